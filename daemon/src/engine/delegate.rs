//! Delegation: validate a request, resolve it against the project's config and
//! policy, write the task's files and record it durably. Nothing runs yet.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agents::{self, TokenValues};
use crate::clock::{now_ms, rfc3339};
use crate::config::{IsolationPref, project_root};
use crate::error::{Error, Result};
use crate::launch::LaunchPlan;
use crate::launch::ProviderId;
use crate::oacp::{Isolation, Mode, TASK_PROTOCOL, TaskDoc};
use crate::provider::{self};
use crate::resolve::{self, AgentTarget};
use crate::store::{TaskRecord, TaskStatus};

use crate::workshop;

use super::*;

impl Engine {
    // ---------------------------------------------------------------- delegate

    /// Validates a delegation, records the task durably, starts its agent
    /// and returns without waiting for it.
    pub async fn delegate(self: &Arc<Self>, input: DelegateInput) -> Result<Delegated> {
        self.delegate_under(input, None).await
    }

    /// [`Engine::delegate`], for a child of `parent` when a task delegates
    /// (its limits are checked once resolved; see `nested`).
    pub(super) async fn delegate_under(
        self: &Arc<Self>,
        input: DelegateInput,
        parent: Option<&TaskRecord>,
    ) -> Result<Delegated> {
        self.delegate_as(input, parent, None).await
    }

    /// [`Engine::delegate_under`], under a chosen id when the task continues
    /// a chain of attempts (a fallback, issue 17).
    pub(super) async fn delegate_as(
        self: &Arc<Self>,
        input: DelegateInput,
        parent: Option<&TaskRecord>,
        succession: Option<super::fallback::Succession>,
    ) -> Result<Delegated> {
        if let Some(s) = &succession
            && let Some(existing) = self.store.task(&s.id)?
        {
            // Delegated already (a fallback redone after a crash).
            return Ok(Delegated { record: existing, warnings: Default::default(), worktree: None });
        }
        let staged = self.stage_delegation(input, parent, succession).await?;
        self.store.insert_task(&staged.delegated.record)?;
        self.launch_staged(staged).await
    }

    /// A delegation checked and resolved, its task directory and task.json
    /// written, its record built but not stored: [`Engine::delegate_as`]
    /// stores one, a group stores its members and itself in one
    /// transaction (issue 17). Dropped unstored, it removes its directory.
    pub(super) async fn stage_delegation(
        self: &Arc<Self>,
        input: DelegateInput,
        parent: Option<&TaskRecord>,
        succession: Option<super::fallback::Succession>,
    ) -> Result<Staged> {
        bounds::check_delegate(&input)?;
        let objective = input.objective.trim();
        if objective.is_empty() {
            return Err(Error::Invalid("`objective` is empty: say what the agent should do".to_owned()));
        }
        let workspace = PathBuf::from(&input.workspace);
        if input.workspace.is_empty() || !workspace.is_absolute() {
            return Err(Error::Invalid(format!(
                "`workspace` must be an absolute directory path, got `{}`",
                input.workspace
            )));
        }
        if !workspace.is_dir() {
            return Err(Error::Invalid(format!("workspace {} is not a directory", workspace.display())));
        }
        let project = project_root(&workspace);
        let (config, config_problem) = self.load_config(&project)?;
        let resolution = resolve::resolve(&config, &project, &input).map_err(|e| match &config_problem {
            // The request may name what the broken file declares: say so.
            Some(problem) => e.with_note(&format!("note: {problem}; the last good config was used")),
            None => e,
        })?;
        let lifecycle = super::fallback::plan_for(&config, &resolution, &input, succession.as_ref())?;
        let verify_commands = super::verify::resolve_verify(
            &config,
            resolution.role.as_ref().map(|r| r.name.as_str()),
            &input.verify,
            &workspace,
        )?;
        let mut warnings = resolution.warnings.clone();
        if let Some(problem) = config_problem {
            warnings.insert("config_warning".to_owned(), format!("{problem}; delegating with the last good config"));
        }
        // Repository configs the user has not trusted (issue 19): what was ignored.
        for (i, u) in config.untrusted.iter().enumerate() {
            let key = if i == 0 { "untrusted_config".to_owned() } else { format!("untrusted_config_{}", i + 1) };
            warnings.insert(key, u.warning());
        }
        let agent_id = resolution.agent.clone();
        let (mode, timeout_ms) = (resolution.mode, resolution.timeout_ms);
        let isolation = workshop::decide(&workspace, resolution.isolation, mode, config.policy.allow_inplace_write)?;
        if let Some(p) = parent {
            nested::check_resolved(&nested::Parent::of(p), mode, isolation, resolution.network.available)?;
        }
        let facts = workshop::facts(&workspace);
        // Two write tasks never share one tree at the same time: a write
        // task in place holds its tree, and the queue keeps another one
        // waiting until it is free.
        let shared_tree = (isolation == Isolation::Inplace && mode == Mode::Write)
            .then(|| facts.root.clone().unwrap_or_else(|| workspace.clone()).display().to_string());
        let session_id = input.session_id.clone().filter(|s| !s.trim().is_empty());
        match &resolution.target {
            AgentTarget::Provider { spec, .. } if session_id.is_some() && !spec.capabilities.resume => {
                return Err(Error::Invalid(format!("agent `{agent_id}` cannot resume sessions: omit `session_id`")));
            }
            AgentTarget::Generic { .. } if session_id.is_some() => {
                return Err(Error::Invalid(format!(
                    "agent `{agent_id}` is a generic agent and cannot resume a session: omit `session_id`"
                )));
            }
            _ => {}
        }
        if let Some(session) = &session_id
            && let Some(owner) = self.store.agent_of_session(session)?
            && owner != agent_id
        {
            return Err(Error::Invalid(format!(
                "session `{session}` belongs to agent `{owner}`, not `{agent_id}`: resume it with agent `{owner}`, or omit `session_id`"
            )));
        }
        // Where it runs (`[runner]`, issue 16): per delegation, role or project.
        let asked = match input.runner.as_deref().filter(|r| !r.trim().is_empty()) {
            Some(r) => Some(crate::launch::runner::RunnerKind::parse(r).map_err(Error::Invalid)?),
            None => None,
        };
        let role_runner =
            resolution.role.as_ref().and_then(|r| config.role_runner.get(&r.name).map(|k| (r.name.as_str(), *k)));
        let (kind, chosen_by) = crate::launch::runner::choose(asked, role_runner, config.runner.kind);
        let kube = config
            .runner
            .for_kind(kind)
            .map_err(|(key, why)| Error::Invalid(format!("{chosen_by} needs a cluster, but `{key}` {why}")))?;
        // The return channel: `caesar-mcp --channel`, injected into the
        // agent's CLI where it can load an MCP server, and named in task.json
        // for OACP agents that start it themselves. In a pod it is the
        // image's, and reaches the pod's relay (`runner/kubernetes/channel.rs`).
        let channel_bin = match (input.channel, &kube) {
            (false, _) => None,
            (true, Some(_)) => Some(PathBuf::from("caesar-mcp")),
            (true, None) => self.channel_binary(),
        };
        let channel_socket = match &kube {
            Some(_) => PathBuf::from(crate::runner::remote_channel::KUBE_POD_SOCKET),
            None => self.paths.socket.clone(),
        };
        let channel = match (&channel_bin, &resolution.target) {
            (None, _) if input.channel => {
                warnings.insert(
                    "channel_warning".to_owned(),
                    "caesar-mcp was not found beside caesard (or in CAESAR_MCP_BIN): the agent runs without the return channel".to_owned(),
                );
                false
            }
            (Some(_), AgentTarget::Provider { spec, .. })
                if !spec.capabilities.mcp_injection || needs_workspace_files(spec.id, session_id.is_some()) =>
            {
                let why = if spec.capabilities.mcp_injection {
                    "reads MCP servers only from settings files in the project or your home, which caesar does not \
                     write for one task"
                } else {
                    "cannot load an MCP server for one run"
                };
                warnings.insert(
                    "channel_warning".to_owned(),
                    format!("agent `{agent_id}` {why}: it runs without the return channel"),
                );
                false
            }
            (Some(_), _) => true,
            (None, _) => false,
        };
        // The queue is bounded: every pending task holds a row, a task
        // directory and a place in each queue turn.
        bounds::check_pending(self.store.count_status(TaskStatus::Pending)?, self.settings.max_pending)?;

        let id = succession.as_ref().map(|s| s.id.clone()).unwrap_or_else(crate::ids::task_id);
        let dir = TaskDir::new(self.paths.state_dir.join("tasks").join(&id));
        let task_dir = dir.root().to_path_buf();
        std::fs::create_dir_all(&task_dir).map_err(|e| Error::io_at("cannot create", &task_dir, e))?;
        // A delegation refused from here on (a full disk) leaves no directory behind.
        let unrecorded = UnrecordedDir(Some(task_dir.clone()));
        // The daemon's own files go beside the agent's directory, out of its
        // reach, from the first one on (issue 19, `task_dir.rs`).
        dir.create_daemon_part().map_err(|e| Error::io_at("cannot create", &dir.daemon_part(), e))?;
        let report_path = dir.report();
        let events_path = dir.events();
        let created_ms = now_ms();
        let mut context = input.context.clone();
        if !resolution.system_prompt.trim().is_empty() {
            context = format!("{}\n\n{context}", resolution.system_prompt.trim()).trim().to_owned();
        }
        let doc = TaskDoc {
            protocol: TASK_PROTOCOL.to_owned(),
            id: id.clone(),
            created_at: rfc3339(created_ms),
            role: resolution.role.as_ref().map(|r| r.name.clone()),
            agent: agent_id.clone(),
            objective: objective.to_owned(),
            context,
            constraints: input.constraints.clone(),
            acceptance_criteria: input.acceptance_criteria.clone(),
            mode,
            isolation,
            network: resolution.network.available,
            workspace: workspace.display().to_string(),
            base_ref: None,
            deadline_ms: timeout_ms,
            depth: input.depth + 1,
            report_path: report_path.display().to_string(),
            events_path: events_path.display().to_string(),
            channel: None,
            model: resolution.model.clone(),
        };
        // The agent works where the workshop will put it: a worktree's
        // counterpart of the workspace, known before it exists.
        let mut doc = doc;
        if isolation == Isolation::Worktree
            && let Some(root) = &facts.root
        {
            let rel = workspace.strip_prefix(root).unwrap_or(Path::new(""));
            doc.workspace = root.join(workshop::WORKTREES_DIR).join(&id).join(rel).display().to_string();
            doc.base_ref = facts.head.clone();
        }
        // The one description of the channel (no secret in it: the daemon
        // binds a channel to its task by the caller's process tree).
        let spec =
            crate::channel_spec::channel_spec(channel_bin.as_deref().unwrap_or(Path::new("")), &id, &channel_socket);
        let (channel_env, channel_args, channel_bin_s) = (spec.env, spec.args, spec.command);
        if channel && channel_bin.is_some() {
            doc.channel = Some(serde_json::json!({
                "transport": "mcp-stdio",
                "command": &channel_bin_s,
                "args": &channel_args,
                "server_name": CHANNEL_SERVER,
            }));
        }
        // The brief goes to the task's prompt file; the launch holds the
        // token where it goes (issue 19, `prompt.rs`).
        let brief = agents::brief(&doc);
        crate::prompt::write(&dir, &brief).map_err(|e| Error::io_at("cannot write", &crate::prompt::path(&dir), e))?;
        // The context for a fallback's request, which stores a placeholder.
        if !input.context.is_empty() {
            crate::prompt::write_context(&dir, &input.context)
                .map_err(|e| Error::io_at("cannot write", &dir.daemon_part(), e))?;
        }
        let prompt = crate::prompt::TOKEN.to_owned();
        let mut launch_findings = Vec::new();
        let task_dir_s = task_dir.display().to_string();
        let mut launch = match &resolution.target {
            AgentTarget::Generic { def, program } => {
                let mut args = agents::expand_args(
                    &def.args,
                    &TokenValues {
                        prompt: Some(&prompt),
                        workspace: Some(&doc.workspace),
                        task_dir: Some(&task_dir_s),
                        report_path: Some(&doc.report_path),
                        model: resolution.model.as_deref(),
                    },
                );
                if resolution.network.request == Some(false) {
                    args.extend(def.network_args.iter().flatten().cloned());
                }
                // `protocol = "acp"`: the prompt and the return channel go through the session
                // the supervisor opens (session/new's mcpServers), as for a built-in ACP agent.
                let stdin = if def.speaks_acp() {
                    let mcp = (channel && channel_bin.is_some()).then_some(provider::McpServer {
                        name: CHANNEL_SERVER,
                        command: &channel_bin_s,
                        args: &channel_args,
                        env: &channel_env,
                        tools: &CHANNEL_TOOLS,
                    });
                    provider::acp::session_stdin(&doc.workspace, mcp.as_ref(), &prompt)
                } else if def.prompt_on_stdin() {
                    provider::Stdin::Prompt
                } else {
                    provider::Stdin::default()
                };
                LaunchPlan {
                    program: program.display().to_string(),
                    args,
                    secret_env: def.env.keys().cloned().collect(),
                    provider: ProviderId::Generic,
                    stdin,
                    ..LaunchPlan::default()
                }
            }
            AgentTarget::Provider { spec, program } => {
                // Tier 2: where the CLI can constrain its final answer to a
                // schema, it gets the report's (strict variant).
                let schema_path = if spec.capabilities.structured_output {
                    let path = dir.report_schema();
                    let schema = crate::oacp::schema("report", true).unwrap_or_default();
                    std::fs::write(&path, schema.to_string()).map_err(|e| Error::io_at("cannot write", &path, e))?;
                    Some(path.display().to_string())
                } else {
                    None
                };
                let invocation = provider::Invocation {
                    prompt: &prompt,
                    mode,
                    model: resolution.model.as_deref(),
                    effort: input.effort.as_deref().filter(|e| !e.is_empty()),
                    resume_session: session_id.as_deref(),
                    workspace: &doc.workspace,
                    output_schema_path: schema_path.as_deref(),
                    mcp: channel.then_some(provider::McpServer {
                        name: CHANNEL_SERVER,
                        command: &channel_bin_s,
                        args: &channel_args,
                        env: &channel_env,
                        tools: &CHANNEL_TOOLS,
                    }),
                    network: resolution.network.request,
                };
                // A provider that speaks a session protocol is driven through it (adapter data).
                let built = provider::acp::launch(spec.id.as_str(), &invocation)
                    .map(|acp| provider::acp::with_fallback(acp, provider::build_launch(spec.id, &invocation)))
                    .or_else(|| self.codex_app_launch(spec.id, program, &invocation))
                    .or_else(|| provider::build_launch(spec.id, &invocation))
                    .ok_or_else(|| Error::Internal(format!("no launch for provider {}", spec.id)))?;
                for (name, content) in &built.files {
                    let Some(path) = dir.provider_file(name) else {
                        return Err(Error::Internal(format!("provider file `{name}` escapes the task directory")));
                    };
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
                    }
                    std::fs::write(&path, content).map_err(|e| Error::io_at("cannot write", &path, e))?;
                }
                LaunchPlan {
                    program: program.display().to_string(),
                    args: built.args,
                    env: built.env,
                    provider: spec.id,
                    native_report: schema_path.is_some(),
                    stdin: built.stdin,
                    ..LaunchPlan::default()
                }
            }
        };
        launch.prompt = prompt_way(&launch).map(|via| crate::prompt::PromptRef { bytes: brief.len() as u64, via });
        if launch.prompt.is_some_and(|p| p.via == crate::prompt::Via::Argv) {
            crate::prompt::check_args(&agent_id, &launch.program, &launch.args, brief.len()).map_err(Error::Invalid)?;
        }
        if let Some(why) = drop_unfit_fallback(&mut launch, &agent_id, brief.len()) {
            launch_findings.push(crate::oacp::Finding {
                severity: crate::oacp::Severity::Low,
                title: "no stream fallback for this prompt".to_owned(),
                file: None,
                line: None,
                detail: why,
            });
        }
        // gemini skips its own folder-trust check only in a folder the user
        // trusted with `caesar trust` (issue 19); elsewhere it decides itself.
        if launch.provider == ProviderId::Gemini
            && !(config.untrusted.is_empty()
                && crate::trust::TrustStore::new(&self.paths.state_dir).trusts_folder(&project))
        {
            launch.args.retain(|a| a != "--skip-trust");
        }
        launch.findings = resolution.findings.clone();
        launch.findings.append(&mut launch_findings);
        launch.channel = channel;
        launch.parent = parent.map(|p| p.id.clone());
        launch.plan = Some(crate::launch::WorkshopPlan {
            isolation: match isolation {
                Isolation::Worktree => IsolationPref::Worktree,
                Isolation::Inplace => IsolationPref::Inplace,
            },
            label: resolution.role.as_ref().map(|r| r.name.clone()).unwrap_or_else(|| agent_id.clone()),
            allow_inplace_write: config.policy.allow_inplace_write,
            worktree: config.worktree.clone(),
            shared_tree,
            worktree_decided: isolation == Isolation::Worktree,
        });
        launch.max_parallel = config.policy.max_parallel;
        // `[runner]` (issue 16): a Kubernetes task is refused here, before
        // anything is recorded or created, when its Job could not be.
        launch.kube = kube.clone();
        if let Some(k) = kube {
            crate::runner::multi::fit_remote(&launch).map_err(Error::Precondition)?;
            // What asks on stdin needs `pods/exec`; claude in plan mode asks nothing (its pump
            // only carries an interrupt, and gives up where exec is forbidden).
            let stdin = match &launch.stdin {
                crate::provider::Stdin::Null | crate::provider::Stdin::Prompt => false,
                crate::provider::Stdin::Control { .. } => crate::provider::asks_on_stdin(launch.provider, &launch.args),
                crate::provider::Stdin::Session { .. } => true,
            };
            crate::runner::multi::preflight(&k, &id, stdin, launch.channel).await.map_err(Error::Precondition)?;
        }
        launch.lifecycle = lifecycle;
        launch.verify = verify_commands;
        let task_json = serde_json::to_vec_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
        crate::safe_fs::write_atomic(&dir.task_json(), &task_json)
            .map_err(|e| Error::io_at("cannot write", &dir.task_json(), e))?;

        let record = TaskRecord {
            id: id.clone(),
            created_ms,
            agent: agent_id,
            role: doc.role.clone(),
            mode,
            isolation,
            network: doc.network,
            model: resolution.model.clone(),
            objective: objective.to_owned(),
            workspace: workspace.display().to_string(),
            task_dir: task_dir_s,
            timeout_ms,
            depth: input.depth,
            status: TaskStatus::Pending,
            started_ms: None,
            finished_ms: None,
            exit_code: None,
            signal: None,
            error: None,
            run: None,
            log_offset: 0,
            session_id: session_id.clone(),
            cancel_requested: false,
            event_count: 0,
            last_event: None,
            blocker: None,
            launch,
            workshop: None,
            changes_state: None,
        };
        // Where a worktree task's agent will work, for the caller's first lines.
        let worktree = (doc.workspace != record.workspace).then(|| doc.workspace.clone());
        Ok(Staged { delegated: Delegated { record, warnings, worktree }, unrecorded })
    }

    /// After a staged delegation's record is stored: the task goes live, its
    /// worktree is prepared or it is queued.
    pub(super) async fn launch_staged(self: &Arc<Self>, staged: Staged) -> Result<Delegated> {
        let Staged { delegated: Delegated { record, warnings, worktree }, mut unrecorded } = staged;
        let id = record.id.clone();
        unrecorded.0 = None;
        self.make_live(&record.id, TaskStatus::Pending, 0);
        // Recorded: the answer goes back now. The worktree and its setup are
        // made on a task of their own; a task that needs neither is queued.
        if record.launch.prepares_worktree() {
            self.spawn_preparation(record.clone());
            return Ok(Delegated { record, warnings, worktree });
        }
        self.schedule().await;
        let record = self.record(&id)?;
        Ok(Delegated { record, warnings, worktree })
    }

    /// Gives the queue a turn. Tasks start when one is delegated or one ends;
    /// this also starts those whose start failed, and whose failure could not
    pub(super) fn channel_binary(&self) -> Option<PathBuf> {
        if let Some(bin) = std::env::var_os("CAESAR_MCP_BIN").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(bin)).filter(|p| p.is_file());
        }
        let name = if cfg!(windows) { "caesar-mcp.exe" } else { "caesar-mcp" };
        self.settings.supervisor_exe.parent().map(|d| d.join(name)).filter(|p| p.is_file())
    }
}

/// Providers that read a per-run MCP server only from a file in the
/// project: injecting the channel would write into the user's tree.
pub(super) fn needs_workspace_files(provider: ProviderId, resuming: bool) -> bool {
    // An ACP agent gets the channel through session/new's mcpServers instead.
    provider::adapter(provider).is_some_and(|a| a.mcp_from_workspace)
        && !provider::acp::runs_as_session(provider.as_str(), resuming)
}

/// The directory of a task being delegated, removed on drop unless the task
/// was recorded (then it is set to `None`).
pub(super) struct UnrecordedDir(Option<PathBuf>);

/// A delegation ready to be stored ([`Engine::stage_delegation`]).
pub(super) struct Staged {
    pub(super) delegated: Delegated,
    unrecorded: UnrecordedDir,
}

impl Drop for UnrecordedDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(TaskDir::new(&dir).daemon_part());
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// How the launch hands the prompt over (issue 19): on stdin, inside a stdin
/// protocol, or in argv where the token stands there; `None` for a template
/// with no `{{prompt}}` (the agent reads task.json).
fn prompt_way(launch: &LaunchPlan) -> Option<crate::prompt::Via> {
    match launch.stdin {
        provider::Stdin::Prompt => Some(crate::prompt::Via::Stdin),
        provider::Stdin::Control { .. } | provider::Stdin::Session { .. } => Some(crate::prompt::Via::Protocol),
        provider::Stdin::Null if crate::prompt::in_args(&launch.args) => Some(crate::prompt::Via::Argv),
        provider::Stdin::Null => None,
    }
}

/// A session's stream fallback whose argv could not carry this prompt is
/// dropped (it would fail with E2BIG at spawn); returns why, for a finding.
fn drop_unfit_fallback(launch: &mut LaunchPlan, agent: &str, prompt_bytes: usize) -> Option<String> {
    let provider::Stdin::Session { opening, .. } = &mut launch.stdin else { return None };
    let mut v: serde_json::Value = serde_json::from_str(opening).ok()?;
    let fallback: crate::supervisor::opening::Fallback = serde_json::from_value(v.get("fallback")?.clone()).ok()?;
    let why = crate::prompt::check_args(agent, &launch.program, &fallback.args, prompt_bytes).err()?;
    v.as_object_mut()?.remove("fallback");
    *opening = v.to_string();
    Some(format!("if the session cannot be opened, the one-shot command cannot run instead: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cursor-agent's ACP launch with its stream fallback (the prompt in argv), built as
    /// delegation builds it.
    fn cursor() -> LaunchPlan {
        let inv = provider::Invocation::bare(crate::prompt::TOKEN, Mode::ReadOnly);
        let acp = provider::acp::launch("cursor-agent", &inv).unwrap();
        let built = provider::acp::with_fallback(acp, provider::build_launch(ProviderId::CursorAgent, &inv));
        LaunchPlan {
            program: "/bin/cursor-agent".into(),
            args: built.args,
            stdin: built.stdin,
            ..LaunchPlan::default()
        }
    }

    fn has_fallback(l: &LaunchPlan) -> bool {
        let provider::Stdin::Session { opening, .. } = &l.stdin else { return false };
        serde_json::from_str::<serde_json::Value>(opening).unwrap().get("fallback").is_some()
    }

    #[test]
    fn a_session_keeps_its_prompt_in_the_protocol_and_drops_a_fallback_that_could_not_carry_it() {
        let mut l = cursor();
        assert_eq!(prompt_way(&l), Some(crate::prompt::Via::Protocol));
        assert!(has_fallback(&l) && drop_unfit_fallback(&mut l, "cursor-agent", 1000).is_none() && has_fallback(&l));
        let why = drop_unfit_fallback(&mut l, "cursor-agent", 200 * 1024).expect("dropped");
        assert!(why.contains("MAX_ARG_STRLEN") && !has_fallback(&l), "{why}");
        let argv = LaunchPlan { args: vec!["-p".into(), crate::prompt::TOKEN.into()], ..LaunchPlan::default() };
        assert_eq!(prompt_way(&argv), Some(crate::prompt::Via::Argv));
        assert_eq!(prompt_way(&LaunchPlan::default()), None, "a template without {{prompt}}");
    }
}

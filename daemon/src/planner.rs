//! The one place a launch plan is made.
//!
//! [`plan`] is a pure function: from a validated request, its resolution
//! against the config, and the facts the engine gathered before (the task's
//! id and directory, the repository, the installed codex's protocol, whether
//! the folder is trusted, where the return channel's binary is), it decides
//! what runs, with which argv, environment, stdin protocol and prompt route,
//! where (`[runner]`), with which return channel, and what files the task
//! directory gets. It reads no file, spawns nothing and touches no store:
//! the engine writes [`Planned::files`] and records [`Planned::record`].
//!
//! Everything a delegation could be refused for once resolved (a prompt too
//! long for an argv-only agent, a session on an agent that cannot resume, a
//! prompt too large for a pod) is refused here, before anything exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::agents::{self, TokenValues};
use crate::clock::rfc3339;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::launch::runner::{KubeSettings, RunnerKind};
use crate::launch::{LaunchPlan, ProviderId, Stdin, WorkshopPlan};
use crate::oacp::{Finding, Isolation, Mode, Severity, TASK_PROTOCOL, TaskDoc};
use crate::prompt::{PromptRef, Via};
use crate::provider::{self, McpServer};
use crate::request::DelegateInput;
use crate::resolve::{AgentTarget, Resolution};
use crate::store::{TaskRecord, TaskStatus};
use crate::task_dir::TaskDir;

pub use crate::channel_spec::{CHANNEL_SERVER, CHANNEL_TOOLS};

/// The return channel's command inside a Kubernetes pod: the image's `caesar-mcp`.
const POD_CHANNEL_BIN: &str = "caesar-mcp";

/// What the engine found out before planning: every fact that needs the
/// filesystem, git, the store or a probe of an installed CLI.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    /// The new task's id (a fallback's is chosen by its chain).
    pub id: &'a str,
    pub created_ms: i64,
    /// The task's directory (its paths; the engine creates it).
    pub dir: &'a TaskDir,
    /// In place or in a worktree, decided against the repository.
    pub isolation: Isolation,
    /// The repository's root and HEAD, where the workspace is in one.
    pub repo_root: Option<&'a Path>,
    pub repo_head: Option<&'a str>,
    /// A session to resume, checked against its owner.
    pub session_id: Option<&'a str>,
    /// This machine's `caesar-mcp`, if there is one (a local task's channel).
    pub channel_bin: Option<&'a Path>,
    /// The daemon's socket (a local task's channel reaches it).
    pub socket: &'a Path,
    /// The installed codex speaks `app-server` (probed once per binary).
    pub codex_app_server: bool,
    /// The user trusted this project's folder with `caesar trust`.
    pub folder_trusted: bool,
    /// Budget, blocker policy and fallback chain.
    pub lifecycle: crate::lifecycle::Plan,
    /// Commands run after the agent, resolved from the request and role.
    pub verify: Vec<String>,
    /// The task that delegated this one from inside its tree.
    pub parent: Option<&'a str>,
    /// Issue 31: the worktree of the finished task this one continues
    /// (`engine/continuation.rs`): the new task works there, from its base.
    pub continues: Option<&'a crate::workshop::Prepared>,
}

/// A file of the task directory: its path and its whole content.
pub type TaskFile = (PathBuf, Vec<u8>);

/// A delegation planned: what the engine writes and records.
#[derive(Debug)]
pub struct Planned {
    /// The task as it will be stored (`pending`), its launch plan inside.
    pub record: TaskRecord,
    /// The OACP task document (also among [`Planned::files`] as `task.json`).
    pub doc: TaskDoc,
    /// The files of the task directory, in the order to write them.
    pub files: Vec<TaskFile>,
    /// What the caller is told besides the task (config and channel warnings).
    pub warnings: BTreeMap<String, String>,
    /// The worktree the agent will work in (a worktree task only).
    pub worktree: Option<String>,
}

/// Plans a delegation; see the module's documentation.
pub fn plan(input: &DelegateInput, config: &Config, resolution: &Resolution<'_>, facts: &Facts<'_>) -> Result<Planned> {
    let mut warnings = resolution.warnings.clone();
    check_session(resolution, facts.session_id)?;
    let kube = runner_of(input, config, resolution)?;
    let channel = channel_of(input, resolution, facts, kube.is_some(), &mut warnings);
    let doc = task_doc(input, resolution, facts, channel.as_ref());
    let brief = agents::brief(&doc);
    // A new task's own files go to its daemon part (`TaskDir::daemon_files`
    // asks the disk, which a plan must not: the part does not exist yet).
    let daemon_files = facts.dir.daemon_part();
    let mut files = vec![(daemon_files.join(crate::prompt::FILE), brief.clone().into_bytes())];
    if !input.context.is_empty() {
        // The context for a fallback's request, which stores a placeholder.
        files.push((daemon_files.join(crate::prompt::CONTEXT_FILE), input.context.clone().into_bytes()));
    }
    let (mut launch, provider_files) = command_of(input, resolution, facts, &doc, channel.as_ref())?;
    files.extend(provider_files);
    let agent = resolution.agent.as_str();
    launch.prompt = prompt_way(&launch).map(|via| PromptRef { bytes: brief.len() as u64, via });
    if launch.prompt.is_some_and(|p| p.via == Via::Argv) {
        crate::prompt::check_args(agent, &launch.program, &launch.args, brief.len()).map_err(Error::Invalid)?;
    }
    launch.findings = resolution.findings.clone();
    if let Some(why) = drop_unfit_fallback(&mut launch, agent, brief.len()) {
        launch.findings.push(Finding {
            severity: Severity::Low,
            title: "no stream fallback for this prompt".to_owned(),
            file: None,
            line: None,
            detail: why,
        });
    }
    // gemini skips its own folder-trust check only in a folder the user
    // trusted with `caesar trust` (issue 19); elsewhere it decides itself.
    if launch.provider == ProviderId::Gemini && !(config.untrusted.is_empty() && facts.folder_trusted) {
        drop_arg(&mut launch, "--skip-trust");
    }
    launch.channel = channel.is_some();
    launch.parent = facts.parent.map(str::to_owned);
    launch.plan = Some(workshop_plan(input, config, resolution, facts));
    launch.max_parallel = config.policy.max_parallel;
    launch.box_limits = crate::launch::BoxLimits {
        memory_max: config.policy.box_memory_max_mb.map(|mb| mb.saturating_mul(1 << 20)),
        pids_max: config.policy.box_pids_max,
        cpu_weight: config.policy.box_cpu_weight,
    };
    launch.kube = kube;
    if launch.kube.is_some() {
        crate::runner::multi::fit_remote(&launch).map_err(Error::Precondition)?;
    }
    launch.lifecycle = facts.lifecycle.clone();
    launch.verify = facts.verify.clone();
    let task_json = serde_json::to_vec_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
    files.push((facts.dir.task_json(), task_json));
    let mut record = record_of(input, resolution, facts, &doc, launch);
    if let Some(p) = facts.continues.filter(|_| facts.isolation == Isolation::Worktree) {
        // The workshop exists: nothing is prepared, the agent starts in it.
        // Its diff, end ref and daemon's index are the new task's own.
        let scratch = Some(facts.dir.daemon_part());
        record.workshop = Some(crate::workshop::Prepared { task_id: facts.id.to_owned(), scratch, ..p.clone() });
    }
    let worktree = (doc.workspace != record.workspace).then(|| doc.workspace.clone());
    Ok(Planned { record, doc, files, warnings, worktree })
}

/// A session can be resumed only by an agent that can resume one.
/// Whether the resolved agent can resume a native session.
pub fn can_resume(resolution: &Resolution<'_>) -> bool {
    check_session(resolution, Some("")).is_ok()
}

fn check_session(resolution: &Resolution<'_>, session_id: Option<&str>) -> Result<()> {
    if session_id.is_none() {
        return Ok(());
    }
    let agent = &resolution.agent;
    match &resolution.target {
        AgentTarget::Provider { spec, .. } if !spec.capabilities.resume => {
            Err(Error::Invalid(format!("agent `{agent}` cannot resume sessions: omit `session_id`")))
        }
        AgentTarget::Generic { .. } => Err(Error::Invalid(format!(
            "agent `{agent}` is a generic agent and cannot resume a session: omit `session_id`"
        ))),
        AgentTarget::Provider { .. } => Ok(()),
    }
}

/// Where it runs (`[runner]`, issue 16): per delegation, role or project.
fn runner_of(input: &DelegateInput, config: &Config, resolution: &Resolution<'_>) -> Result<Option<KubeSettings>> {
    let asked = match input.runner.as_deref().filter(|r| !r.trim().is_empty()) {
        Some(r) => Some(RunnerKind::parse(r).map_err(Error::Invalid)?),
        None => None,
    };
    let role_runner =
        resolution.role.as_ref().and_then(|r| config.role_runner.get(&r.name).map(|k| (r.name.as_str(), *k)));
    let (kind, chosen_by) = crate::launch::runner::choose(asked, role_runner, config.runner.kind);
    config
        .runner
        .for_kind(kind)
        .map_err(|(key, why)| Error::Invalid(format!("{chosen_by} needs a cluster, but `{key}` {why}")))
}

/// The return channel as one task gets it: the command that serves it and
/// its arguments and environment (no secret: the daemon binds a channel to
/// its task by the caller's process tree).
#[derive(Debug, Clone)]
struct Channel {
    command: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Channel {
    fn server(&self) -> McpServer<'_> {
        McpServer {
            name: CHANNEL_SERVER,
            command: &self.command,
            args: &self.args,
            env: &self.env,
            tools: &CHANNEL_TOOLS,
        }
    }
}

/// The return channel: `caesar-mcp --channel`, injected into the agent's
/// CLI where it can load an MCP server, and named in task.json for OACP
/// agents that start it themselves. In a pod it is the image's, and reaches
/// the pod's relay (`runner/kubernetes/channel.rs`). `None`, with a warning
/// saying why, where it was asked for and cannot be given.
fn channel_of(
    input: &DelegateInput,
    resolution: &Resolution<'_>,
    facts: &Facts<'_>,
    remote: bool,
    warnings: &mut BTreeMap<String, String>,
) -> Option<Channel> {
    if !input.channel {
        return None;
    }
    let (bin, socket) = if remote {
        (PathBuf::from(POD_CHANNEL_BIN), PathBuf::from(crate::runner::remote_channel::KUBE_POD_SOCKET))
    } else {
        let Some(bin) = facts.channel_bin else {
            warnings.insert(
                "channel_warning".to_owned(),
                "caesar-mcp was not found beside caesard (or in CAESAR_MCP_BIN): the agent runs without the return \
                 channel"
                    .to_owned(),
            );
            return None;
        };
        (bin.to_path_buf(), facts.socket.to_path_buf())
    };
    if let AgentTarget::Provider { spec, .. } = &resolution.target
        && (!spec.capabilities.mcp_injection || needs_workspace_files(spec.id, facts.session_id.is_some()))
    {
        let why = if spec.capabilities.mcp_injection {
            "reads MCP servers only from settings files in the project or your home, which caesar does not write for \
             one task"
        } else {
            "cannot load an MCP server for one run"
        };
        warnings.insert(
            "channel_warning".to_owned(),
            format!("agent `{}` {why}: it runs without the return channel", resolution.agent),
        );
        return None;
    }
    let spec = crate::channel_spec::channel_spec(&bin, facts.id, &socket);
    Some(Channel { command: spec.command, args: spec.args, env: spec.env })
}

/// Providers that read a per-run MCP server only from a file in the
/// project: injecting the channel would write into the user's tree.
fn needs_workspace_files(provider: ProviderId, resuming: bool) -> bool {
    // An ACP agent gets the channel through session/new's mcpServers instead.
    provider::adapter(provider).is_some_and(|a| a.mcp_from_workspace)
        && !provider::acp::runs_as_session(provider.as_str(), resuming)
}

/// The OACP task document the agent reads. The agent works where the
/// workshop will put it: a worktree's counterpart of the workspace, known
/// before it exists.
fn task_doc(
    input: &DelegateInput,
    resolution: &Resolution<'_>,
    facts: &Facts<'_>,
    channel: Option<&Channel>,
) -> TaskDoc {
    let workspace = Path::new(&input.workspace);
    let mut context = input.context.clone();
    if !resolution.system_prompt.trim().is_empty() {
        context = format!("{}\n\n{context}", resolution.system_prompt.trim()).trim().to_owned();
    }
    let mut doc = TaskDoc {
        protocol: TASK_PROTOCOL.to_owned(),
        id: facts.id.to_owned(),
        created_at: rfc3339(facts.created_ms),
        role: resolution.role.as_ref().map(|r| r.name.clone()),
        agent: resolution.agent.clone(),
        objective: input.objective.trim().to_owned(),
        context,
        constraints: input.constraints.clone(),
        acceptance_criteria: input.acceptance_criteria.clone(),
        mode: resolution.mode,
        isolation: facts.isolation,
        network: resolution.network.available,
        workspace: workspace.display().to_string(),
        base_ref: None,
        deadline_ms: resolution.timeout_ms,
        depth: input.depth + 1,
        report_path: facts.dir.report().display().to_string(),
        events_path: facts.dir.events().display().to_string(),
        channel: None,
        model: resolution.model.clone(),
    };
    if facts.isolation == Isolation::Worktree
        && let Some(root) = facts.repo_root
    {
        let rel = workspace.strip_prefix(root).unwrap_or(Path::new(""));
        doc.workspace = root.join(crate::workshop::WORKTREES_DIR).join(facts.id).join(rel).display().to_string();
        doc.base_ref = facts.repo_head.map(str::to_owned);
        if let Some(p) = facts.continues {
            doc.workspace = p.workdir.display().to_string();
            doc.base_ref.clone_from(&p.base_ref);
        }
    }
    if let Some(c) = channel {
        doc.channel = Some(serde_json::json!({
            "transport": "mcp-stdio",
            "command": &c.command,
            "args": &c.args,
            "server_name": CHANNEL_SERVER,
        }));
    }
    doc
}

/// What runs: a generic agent's template, or a provider's launch (through
/// its session protocol where it speaks one), and the files its adapter
/// asks for. The launch holds [`crate::prompt::TOKEN`] where the prompt goes.
fn command_of(
    input: &DelegateInput,
    resolution: &Resolution<'_>,
    facts: &Facts<'_>,
    doc: &TaskDoc,
    channel: Option<&Channel>,
) -> Result<(LaunchPlan, Vec<TaskFile>)> {
    let prompt = crate::prompt::TOKEN;
    let mut files = Vec::new();
    let mcp = channel.map(Channel::server);
    let launch = match &resolution.target {
        AgentTarget::Generic { def, program } => {
            let task_dir = facts.dir.root().display().to_string();
            let mut args = agents::expand_args(
                &def.args,
                &TokenValues {
                    prompt: Some(prompt),
                    workspace: Some(&doc.workspace),
                    task_dir: Some(&task_dir),
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
                provider::acp::session_stdin(&doc.workspace, mcp.as_ref(), prompt)
            } else if def.prompt_on_stdin() {
                Stdin::Prompt
            } else {
                Stdin::default()
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
            let schema_path = spec.capabilities.structured_output.then(|| facts.dir.report_schema());
            if let Some(path) = &schema_path {
                let schema = crate::oacp::schema("report", true).unwrap_or_default();
                files.push((path.clone(), schema.to_string().into_bytes()));
            }
            let schema_arg = schema_path.as_ref().map(|p| p.display().to_string());
            let invocation = provider::Invocation {
                prompt,
                mode: resolution.mode,
                model: resolution.model.as_deref(),
                effort: input.effort.as_deref().filter(|e| !e.is_empty()),
                resume_session: facts.session_id,
                workspace: &doc.workspace,
                output_schema_path: schema_arg.as_deref(),
                mcp,
                network: resolution.network.request,
            };
            let built = session_launch(spec.id, facts.codex_app_server, &invocation)
                .or_else(|| provider::build_launch(spec.id, &invocation))
                .ok_or_else(|| Error::Internal(format!("no launch for provider {}", spec.id)))?;
            for (name, content) in &built.files {
                let Some(path) = facts.dir.provider_file(name) else {
                    return Err(Error::Internal(format!("provider file `{name}` escapes the task directory")));
                };
                files.push((path, content.clone().into_bytes()));
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
    Ok((launch, files))
}

/// A provider that speaks a session protocol is driven through it, with its
/// one-shot stream command as the fallback the supervisor runs when the
/// session cannot be opened: ACP (adapter data), or codex's app-server where
/// the installed codex has it (a resumed task continues its thread).
fn session_launch(id: ProviderId, codex_app_server: bool, inv: &provider::Invocation) -> Option<provider::Launch> {
    let session = match id {
        ProviderId::Codex if codex_app_server => Some(provider::codex_app::launch(inv)),
        _ => provider::acp::launch(id.as_str(), inv),
    }?;
    Some(provider::acp::with_fallback(session, provider::build_launch(id, inv)))
}

/// What the workshop needs at start.
fn workshop_plan(
    input: &DelegateInput,
    config: &Config,
    resolution: &Resolution<'_>,
    facts: &Facts<'_>,
) -> WorkshopPlan {
    let worktree = facts.isolation == Isolation::Worktree;
    // Two write tasks never share one tree at the same time: a write task in
    // place holds its tree, and the queue keeps another one waiting until it
    // is free.
    let shared_tree = (!worktree && resolution.mode == Mode::Write)
        .then(|| facts.repo_root.map_or_else(|| input.workspace.clone(), |r| r.display().to_string()));
    WorkshopPlan {
        isolation: if worktree {
            crate::config::IsolationPref::Worktree
        } else {
            crate::config::IsolationPref::Inplace
        },
        label: resolution.role.as_ref().map(|r| r.name.clone()).unwrap_or_else(|| resolution.agent.clone()),
        allow_inplace_write: config.policy.allow_inplace_write,
        worktree: config.worktree.clone(),
        shared_tree,
        worktree_decided: worktree,
        start_tree: None,
        start_base: None,
    }
}

/// The task as stored when delegated.
fn record_of(
    input: &DelegateInput,
    resolution: &Resolution<'_>,
    facts: &Facts<'_>,
    doc: &TaskDoc,
    launch: LaunchPlan,
) -> TaskRecord {
    TaskRecord {
        id: facts.id.to_owned(),
        created_ms: facts.created_ms,
        agent: resolution.agent.clone(),
        role: doc.role.clone(),
        mode: resolution.mode,
        isolation: facts.isolation,
        network: doc.network,
        model: resolution.model.clone(),
        objective: doc.objective.clone(),
        workspace: input.workspace.clone(),
        task_dir: facts.dir.root().display().to_string(),
        timeout_ms: resolution.timeout_ms,
        depth: input.depth,
        status: TaskStatus::Pending,
        started_ms: None,
        finished_ms: None,
        exit_code: None,
        signal: None,
        error: None,
        run: None,
        log_offset: 0,
        session_id: facts.session_id.map(str::to_owned),
        cancel_requested: false,
        event_count: 0,
        last_event: None,
        blocker: None,
        launch,
        workshop: None,
        changes_state: None,
    }
}

/// How the launch hands the prompt over (issue 19): on stdin, inside a stdin
/// protocol, or in argv where the token stands there; `None` for a template
/// with no `{{prompt}}` (the agent reads task.json).
fn prompt_way(launch: &LaunchPlan) -> Option<Via> {
    match launch.stdin {
        Stdin::Prompt => Some(Via::Stdin),
        Stdin::Control { .. } | Stdin::Session { .. } => Some(Via::Protocol),
        Stdin::Null if crate::prompt::in_args(&launch.args) => Some(Via::Argv),
        Stdin::Null => None,
    }
}

/// Removes `arg` from the launch's argv and from its session's stream
/// fallback, which the supervisor runs when the session cannot be opened.
fn drop_arg(launch: &mut LaunchPlan, arg: &str) {
    launch.args.retain(|a| a != arg);
    let Stdin::Session { opening, .. } = &mut launch.stdin else { return };
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(opening) else { return };
    if let Some(args) = v.pointer_mut("/fallback/args").and_then(serde_json::Value::as_array_mut) {
        args.retain(|a| a.as_str() != Some(arg));
        *opening = v.to_string();
    }
}

/// A session's stream fallback whose argv could not carry this prompt is
/// dropped (it would fail with E2BIG at spawn); returns why, for a finding.
fn drop_unfit_fallback(launch: &mut LaunchPlan, agent: &str, prompt_bytes: usize) -> Option<String> {
    let Stdin::Session { opening, .. } = &mut launch.stdin else { return None };
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
    use crate::oacp::Mode;

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
        let Stdin::Session { opening, .. } = &l.stdin else { return false };
        serde_json::from_str::<serde_json::Value>(opening).unwrap().get("fallback").is_some()
    }

    use crate::config::Config;
    use crate::resolve::NetworkDecision;

    /// A resolution of `agent` (a native provider) as the resolver would give it.
    fn resolved(agent: &str, mode: Mode) -> Resolution<'static> {
        Resolution {
            agent: agent.to_owned(),
            target: AgentTarget::Provider {
                spec: provider::spec(agent).unwrap(),
                program: PathBuf::from(format!("/usr/bin/{agent}")),
            },
            role: None,
            mode,
            isolation: crate::config::IsolationPref::Inplace,
            network: NetworkDecision { request: None, available: true },
            timeout_ms: 60_000,
            model: None,
            system_prompt: String::new(),
            warnings: BTreeMap::new(),
            findings: Vec::new(),
        }
    }

    fn request(objective: &str) -> DelegateInput {
        DelegateInput { objective: objective.to_owned(), workspace: "/w".to_owned(), ..DelegateInput::default() }
    }

    /// Plans with the facts of a task `t_1` in place in `/w` (no repository),
    /// a local `caesar-mcp` and no codex app-server.
    fn planned(input: &DelegateInput, resolution: &Resolution<'_>) -> Result<Planned> {
        let dir = TaskDir::new("/state/tasks/t_1");
        let facts = Facts {
            id: "t_1",
            created_ms: 0,
            dir: &dir,
            isolation: Isolation::Inplace,
            repo_root: None,
            repo_head: None,
            session_id: input.session_id.as_deref(),
            channel_bin: Some(Path::new("/opt/caesar/caesar-mcp")),
            socket: Path::new("/run/caesard.sock"),
            codex_app_server: false,
            folder_trusted: false,
            lifecycle: crate::lifecycle::Plan::default(),
            verify: vec!["cargo test".to_owned()],
            parent: None,
            continues: None,
        };
        plan(input, &Config::default(), resolution, &facts)
    }

    #[test]
    fn a_plan_holds_the_prompt_token_never_the_prompt_and_lists_every_file_it_needs() {
        let p = planned(&request("fix the parser"), &resolved("claude", Mode::ReadOnly)).unwrap();
        let launch = &p.record.launch;
        assert_eq!(launch.provider, ProviderId::Claude);
        assert_eq!(launch.program, "/usr/bin/claude");
        assert!(!launch.args.iter().any(|a| a.contains("fix the parser")), "{:?}", launch.args);
        assert_eq!(launch.prompt.map(|p| p.via), Some(Via::Protocol));
        assert_eq!(launch.verify, ["cargo test"]);
        assert_eq!(p.record.status, TaskStatus::Pending);
        let names: Vec<String> =
            p.files.iter().map(|(path, _)| path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.iter().any(|n| n == "task.json"), "{names:?}");
        let in_daemon_part = Path::new("/state/tasks/t_1.daemon/prompt.txt");
        let (_, prompt) = p.files.iter().find(|(path, _)| path == in_daemon_part).expect("the prompt file");
        assert!(String::from_utf8_lossy(prompt).contains("fix the parser"));
        assert!(p.doc.channel.is_none() && !launch.channel);
    }

    #[test]
    fn a_continuation_is_planned_over_its_sources_workshop_and_prepares_nothing_new() {
        let source = crate::workshop::Prepared {
            task_id: "t_0".to_owned(),
            workspace: "/r".into(),
            workdir: "/r/.caesar/wt/t_0".into(),
            isolation: Isolation::Worktree,
            repo_root: Some("/r".into()),
            base_ref: Some("abc".to_owned()),
            branch: Some("caesar/claude/x".to_owned()),
            worktree: Some("/r/.caesar/wt/t_0".into()),
            git_dir: Some("/r/.caesar/wt/t_0.git".into()),
            scratch: Some("/state/tasks/t_0.daemon".into()),
            before: None,
            kernel_read_only: false,
            placed: Vec::new(),
            findings: Vec::new(),
        };
        let dir = TaskDir::new("/state/tasks/t_1");
        let facts = Facts {
            id: "t_1",
            created_ms: 0,
            dir: &dir,
            isolation: Isolation::Worktree,
            repo_root: Some(Path::new("/r")),
            repo_head: Some("def"),
            session_id: None,
            channel_bin: None,
            socket: Path::new("/run/caesard.sock"),
            codex_app_server: false,
            folder_trusted: false,
            lifecycle: crate::lifecycle::Plan::default(),
            verify: Vec::new(),
            parent: None,
            continues: Some(&source),
        };
        let input = DelegateInput { workspace: "/r".to_owned(), ..request("go on") };
        let p = plan(&input, &Config::default(), &resolved("claude", Mode::Write), &facts).unwrap();
        let w = p.record.workshop.expect("the workshop is the source's");
        assert_eq!(
            (w.task_id.as_str(), w.worktree, w.base_ref.as_deref()),
            ("t_1", source.worktree.clone(), Some("abc"))
        );
        assert_eq!(w.scratch.as_deref(), Some(Path::new("/state/tasks/t_1.daemon")), "the daemon's index is its own");
        assert_eq!((p.doc.workspace.as_str(), p.doc.base_ref.as_deref()), ("/r/.caesar/wt/t_0", Some("abc")));
    }

    #[test]
    fn the_channel_goes_to_an_agent_that_can_load_it_and_is_refused_by_name_elsewhere() {
        let mut input = request("ask me");
        input.channel = true;
        let p = planned(&input, &resolved("claude", Mode::ReadOnly)).unwrap();
        assert!(p.record.launch.channel && p.doc.channel.is_some(), "{:?}", p.warnings);
        assert!(!p.warnings.contains_key("channel_warning"));
        // gemini resuming a session runs as a stream, and reads MCP servers only from files.
        input.session_id = Some("s1".to_owned());
        let p = planned(&input, &resolved("gemini", Mode::ReadOnly)).unwrap();
        assert!(!p.record.launch.channel);
        assert!(p.warnings["channel_warning"].contains("gemini"), "{:?}", p.warnings);
    }

    #[test]
    fn a_session_is_refused_to_an_agent_that_cannot_resume_it() {
        let mut input = request("go on");
        input.session_id = Some("s1".to_owned());
        let def: &'static crate::config::AgentDef = Box::leak(Box::new(crate::config::AgentDef {
            id: "x".to_owned(),
            bin: "/bin/x".to_owned(),
            args: vec!["{{prompt}}".to_owned()],
            ..Default::default()
        }));
        let r = Resolution {
            target: AgentTarget::Generic { def, program: "/bin/x".into() },
            ..resolved("claude", Mode::ReadOnly)
        };
        let err = planned(&input, &r).unwrap_err().to_string();
        assert!(err.contains("cannot resume a session"), "{err}");
    }

    /// Issue 29: gemini's stream fallback kept `--skip-trust` in a folder
    /// the user never trusted.
    #[test]
    fn gemini_skips_its_folder_trust_nowhere_in_an_untrusted_folder() {
        let p = planned(&request("look"), &resolved("gemini", Mode::ReadOnly)).unwrap();
        let launch = &p.record.launch;
        let Stdin::Session { opening, .. } = &launch.stdin else { panic!("gemini runs as an ACP session") };
        assert!(!launch.args.iter().any(|a| a == "--skip-trust"), "{:?}", launch.args);
        assert!(!opening.contains("--skip-trust"), "the fallback keeps it: {opening}");
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

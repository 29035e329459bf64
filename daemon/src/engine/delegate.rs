//! Delegation: validate a request, resolve it against the project's config and
//! policy, gather the facts the planner needs, plan the launch
//! ([`crate::planner::plan`]), write the task's files and record it durably.
//! Nothing runs yet.

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::now_ms;
use crate::config::project_root;
use crate::error::{Error, Result};
use crate::launch::{ProviderId, Stdin};
use crate::planner;
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
        // A review loop's step delegated again after a crash (issue 32, `review.rs`).
        if let Some(id) = &input.chosen_id
            && let Some(existing) = self.store.task(id)?
        {
            return Ok(Delegated { record: existing, warnings: Default::default(), worktree: None });
        }
        // Issue 32: the review loop it starts, checked before anything is written.
        let review = review::ask_of(&input)?;
        // Issue 32: the tasks it builds on, checked before anything is written.
        let stack = stacking::ask_of(&input)?;
        if stack.is_some() && input.continue_from.as_deref().is_some_and(|c| !c.is_empty()) {
            return Err(Error::Invalid(
                "`continue_from` with `depends_on` is refused: a continuation builds on its source task's worktree; delegate the continuation first, then stack other work on its id".to_owned(),
            ));
        }
        if let Some(ask) = &stack {
            let chosen = succession.as_ref().map(|s| s.id.as_str());
            self.check_stack(ask, std::path::Path::new(&input.workspace), chosen, parent)?;
        }
        let staged = self.stage_delegation(input, parent, succession).await?;
        if let Some(ask) = &review {
            // Issue 32: with its review loop and the loop's group, in one transaction.
            self.store_reviewed(&staged.delegated.record, ask)?;
            return self.launch_staged(staged).await;
        }
        match (&stack, &staged.continues) {
            (Some(ask), _) => self.store_stacked(&staged.delegated.record, ask)?,
            // Issue 31: the task and its link in one transaction, so a source is continued once.
            (None, Some(source)) => {
                if let Err(by) = self.store.insert_continuation(&staged.delegated.record, source)? {
                    return Err(Error::Precondition(format!(
                        "task {source} was already continued by task {by}: continue the newest task of its lineage"
                    )));
                }
            }
            (None, None) => self.store.insert_task(&staged.delegated.record)?,
        }
        self.launch_staged(staged).await
    }

    /// A delegation checked and resolved, its task directory and task.json
    /// written, its record built but not stored: [`Engine::delegate_as`]
    /// stores one, a group stores its members and itself in one
    /// transaction (issue 17). Dropped unstored, it removes its directory.
    pub(super) async fn stage_delegation(
        self: &Arc<Self>,
        mut input: DelegateInput,
        parent: Option<&TaskRecord>,
        succession: Option<super::fallback::Succession>,
    ) -> Result<Staged> {
        // Issue 31: a continuation works where its source did, filled from it.
        let source = match input.continue_from.clone().filter(|s| !s.is_empty()) {
            Some(from) => Some(super::continuation::take_source(&self.store, &from, &mut input)?),
            None => None,
        };
        let workspace = validate(&input)?;
        let project = project_root(&workspace);
        let (config, config_problem) = self.projects.load_config(&project)?;
        // A role's agent is picked with the quota ledger's headroom (issue 32).
        let headroom = self.projects.quota.headroom_with(&config);
        let resolution =
            resolve::resolve_with(&config, &project, &input, &headroom).map_err(|e| match &config_problem {
                // The request may name what the broken file declares: say so.
                Some(problem) => e.with_note(&format!("note: {problem}; the last good config was used")),
                None => e,
            })?;
        let lifecycle = super::fallback::plan_for(&config, &resolution, &input, succession.as_ref())?;
        let verify = super::verify::resolve_verify(
            &config,
            resolution.role.as_ref().map(|r| r.name.as_str()),
            &input.verify,
            &workspace,
        )?;
        let isolation =
            workshop::decide(&workspace, resolution.isolation, resolution.mode, config.policy.allow_inplace_write)?;
        if let Some(p) = parent {
            nested::check_resolved(&nested::Parent::of(p), resolution.mode, isolation, resolution.network.available)?;
        }
        let session_id = input.session_id.as_deref().filter(|s| !s.trim().is_empty());
        // A continuation resumes its source's session where the agent can (issue 31).
        let session_id = session_id
            .filter(|_| !source.as_ref().is_some_and(|s| s.session_inherited) || planner::can_resume(&resolution));
        if let Some(session) = session_id
            && let Some(owner) = self.store.agent_of_session(session)?
            && owner != resolution.agent
        {
            let agent = &resolution.agent;
            return Err(Error::Invalid(format!(
                "session `{session}` belongs to agent `{owner}`, not `{agent}`: resume it with agent `{owner}`, or omit `session_id`"
            )));
        }
        // The queue is bounded: every pending task holds a row, a task
        // directory and a place in each queue turn.
        bounds::check_pending(self.store.count_status(TaskStatus::Pending)?, self.settings.max_pending)?;

        let repo = workshop::facts(&workspace);
        let id = succession
            .as_ref()
            .map(|s| s.id.clone())
            .or_else(|| input.chosen_id.clone())
            .unwrap_or_else(crate::ids::task_id);
        let dir = TaskDir::new(self.paths.state_dir.join("tasks").join(&id));
        let channel_bin = if input.channel { channel_binary(&self.settings.supervisor_exe) } else { None };
        let codex_app_server = match &resolution.target {
            AgentTarget::Provider { spec, program } if spec.id == ProviderId::Codex => {
                self.projects.codex_speaks_app_server(program)
            }
            _ => false,
        };
        let facts = planner::Facts {
            id: &id,
            created_ms: now_ms(),
            dir: &dir,
            isolation,
            repo_root: repo.root.as_deref(),
            repo_head: repo.head.as_deref(),
            session_id,
            channel_bin: channel_bin.as_deref(),
            socket: &self.paths.socket,
            codex_app_server,
            folder_trusted: crate::trust::TrustStore::new(&self.paths.state_dir).trusts_folder(&project),
            lifecycle,
            verify,
            parent: parent.map(|p| p.id.as_str()),
            continues: source
                .as_ref()
                .and_then(|s| s.workshop.as_ref())
                .or_else(|| succession.as_ref().and_then(|s| s.workshop.as_ref())),
        };
        let mut planned = planner::plan(&input, &config, &resolution, &facts)?;
        if let Some(problem) = config_problem {
            planned
                .warnings
                .insert("config_warning".to_owned(), format!("{problem}; delegating with the last good config"));
        }
        // Repository configs the user has not trusted (issue 19): what was ignored.
        for (i, u) in config.untrusted.iter().enumerate() {
            let key = if i == 0 { "untrusted_config".to_owned() } else { format!("untrusted_config_{}", i + 1) };
            planned.warnings.insert(key, u.warning());
        }
        // `[runner]` (issue 16): a Kubernetes task is refused here, before
        // anything is recorded or created, when its Job could not be.
        let launch = &planned.record.launch;
        if let Some(k) = &launch.kube {
            // What asks on stdin needs `pods/exec`; claude in plan mode asks nothing (its pump
            // only carries an interrupt, and gives up where exec is forbidden).
            let stdin = match &launch.stdin {
                Stdin::Null | Stdin::Prompt => false,
                Stdin::Control { .. } => crate::provider::asks_on_stdin(launch.provider, &launch.args),
                Stdin::Session { .. } => true,
            };
            crate::runner::multi::preflight(k, &id, stdin, launch.channel).await.map_err(Error::Precondition)?;
        }
        let unrecorded = write_task_files(&dir, &planned.files)?;
        let planner::Planned { record, warnings, worktree, .. } = planned;
        let continues = source.map(|s| s.id);
        Ok(Staged { delegated: Delegated { record, warnings, worktree }, unrecorded, continues })
    }

    /// After a staged delegation's record is stored: the task goes live, its
    /// worktree is prepared or it is queued. See [`Engine::launch_all`].
    pub(super) async fn launch_staged(self: &Arc<Self>, staged: Staged) -> Result<Delegated> {
        let mut one = self.launch_all(vec![staged]).await?;
        Ok(one.remove(0))
    }

    /// [`Engine::launch_staged`] for tasks stored together (a group's
    /// members): one queue turn for all of them.
    ///
    /// The answer goes back once the tasks are durable (issue 33): their
    /// starts go on behind it. Only on a quiet daemon, where these are the
    /// only starts in flight, does it wait for them, so that a task that
    /// could start at once answers `running`; under a burst of delegations
    /// it answers `pending` (phase `starting`), and a start that fails
    /// afterwards is recorded as the task's ending (`start.rs`).
    pub(super) async fn launch_all(self: &Arc<Self>, staged: Vec<Staged>) -> Result<Vec<Delegated>> {
        let mut out = Vec::with_capacity(staged.len());
        let mut queued = Vec::new();
        for mut one in staged {
            // Recorded: its directory stays.
            one.unrecorded.0 = None;
            let delegated = one.delegated;
            let id = delegated.record.id.clone();
            self.runs.make(&id, TaskStatus::Pending, 0);
            let record = &delegated.record;
            if self.store.stack_of(&id)?.is_some() {
                // Stacked (issue 32): prepared once its parents have ended.
                self.stacked_stored(&id);
            } else if record.launch.prepares_worktree() && record.workshop.is_none() {
                // Recorded: the answer goes back now. The worktree and its
                // setup are made on a task of their own. A continuation's
                // worktree exists already (issue 31).
                self.spawn_preparation(record.clone());
            } else {
                queued.push(out.len());
            }
            out.push(delegated);
        }
        if queued.is_empty() {
            return Ok(out);
        }
        let ids: Vec<String> = queued.iter().map(|&i| out[i].record.id.clone()).collect();
        self.schedule_waiting_for(&ids).await;
        for i in queued {
            out[i].record = self.views.record(&out[i].record.id)?;
        }
        Ok(out)
    }
}

/// Validates what a request says before anything is resolved; returns its
/// workspace.
fn validate(input: &DelegateInput) -> Result<PathBuf> {
    bounds::check_delegate(input)?;
    if input.objective.trim().is_empty() {
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
    Ok(workspace)
}

/// Creates the task's directory (the agent's part and the daemon's, out of
/// its reach, from the first file on: issue 19, `task_dir.rs`) and writes
/// the planned files. A delegation refused from here on (a full disk)
/// leaves no directory behind: the guard removes it unless the task is
/// recorded.
///
/// Durable before the task is recorded, in one batch (issue 33): the files
/// are written new, then every file and directory is fsynced at once.
fn write_task_files(dir: &TaskDir, files: &[planner::TaskFile]) -> Result<UnrecordedDir> {
    let root = dir.root().to_path_buf();
    std::fs::create_dir_all(&root).map_err(|e| Error::io_at("cannot create", &root, e))?;
    let unrecorded = UnrecordedDir(Some(root.clone()));
    let mut batch = crate::durable::Batch::default();
    if let Some(tasks) = root.parent() {
        batch.dir(tasks);
    }
    dir.create_daemon_part_in(&mut batch).map_err(|e| Error::io_at("cannot create", &dir.daemon_part(), e))?;
    for (path, bytes) in files {
        if let Some(parent) = path.parent()
            && !parent.is_dir()
        {
            std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
            // Each new directory's own entry too (beneath the task's, which is noted).
            for made in parent.ancestors().take_while(|a| a.starts_with(&root) && *a != root) {
                batch.dir(made);
                if let Some(up) = made.parent() {
                    batch.dir(up);
                }
            }
        }
        batch.write_new(path, bytes).map_err(|e| Error::io_at("cannot write", path, e))?;
    }
    batch.dir(&root);
    batch.sync().map_err(Error::Io)?;
    Ok(unrecorded)
}

/// The directory of a task being delegated, removed on drop unless the task
/// was recorded (then it is set to `None`).
pub(super) struct UnrecordedDir(Option<PathBuf>);

/// A delegation ready to be stored ([`Engine::stage_delegation`]).
pub(super) struct Staged {
    pub(super) delegated: Delegated,
    unrecorded: UnrecordedDir,
    /// The task a continuation continues (issue 31), stored with it.
    continues: Option<String>,
}

impl Drop for UnrecordedDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(TaskDir::new(&dir).daemon_part());
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The return channel's binary (`caesar-mcp`), beside the supervisor's
/// (`CAESAR_MCP_BIN` overrides), if it is there.
fn channel_binary(supervisor_exe: &std::path::Path) -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("CAESAR_MCP_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin)).filter(|p| p.is_file());
    }
    let name = if cfg!(windows) { "caesar-mcp.exe" } else { "caesar-mcp" };
    supervisor_exe.parent().map(|d| d.join(name)).filter(|p| p.is_file())
}

//! Starting a prepared task: its workshop at start (the inplace snapshot),
//! the runner's spawn, and the `running` state with its `started` event in
//! one transaction.
//!
//! A cancel that races the start is never lost: cancel records its request
//! before it looks for a run to stop, and start looks for a recorded request
//! after it records the run, so one of the two always sees the other.

use std::path::Path;
use std::sync::Arc;

use tracing::{Instrument, info, info_span};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::launch::Stdin;
use crate::oacp::EventBody;
use crate::report::{self, Ending};
use crate::runner::StartSpec;
use crate::store::{TaskRecord, TaskStatus};

use super::*;

impl Engine {
    /// Starts a recorded, prepared task and its monitor.
    pub(super) async fn start(self: &Arc<Self>, mut record: TaskRecord) -> Result<()> {
        let dir = TaskDir::new(&record.task_dir);
        let workdir = match self.prepare_at_start(&mut record).await {
            Ok(dir) => dir,
            Err(why) => {
                self.fail_unstarted(&record, &why)?;
                return Err(Error::Precondition(why));
            }
        };
        match self.store.task(&record.id)? {
            // Started or ended meanwhile: nothing to do.
            Some(current) if current.status != TaskStatus::Pending || current.run.is_some() => return Ok(()),
            None => return Ok(()),
            // Cancelled while it waited for its turn: it never runs.
            Some(current) if current.cancel_requested => {
                self.end_cancelled_unstarted(&record);
                return Ok(());
            }
            Some(_) => {}
        }
        let launch = &record.launch;
        let env = self.start_env(&record, &dir)?;
        let (env, protections) = confine(&self.paths, &record, &dir, &workdir, env);
        let (initial, opening) = match stdin_lines(&record, &dir) {
            Ok(lines) => lines,
            Err(why) => {
                self.fail_unstarted(&record, &why)?;
                return Err(Error::Precondition(why));
            }
        };
        let stdin = match &launch.stdin {
            Stdin::Null | Stdin::Prompt => None,
            Stdin::Control { close_after, .. } => Some((initial.as_str(), close_after.as_str())),
            // The supervisor closes a session's stdin itself, at the end of the turn.
            Stdin::Session { .. } => Some((initial.as_str(), "")),
        };
        let session = match &launch.stdin {
            Stdin::Session { protocol, .. } => Some((*protocol, opening.as_str())),
            _ => None,
        };
        let deadline_ms = now_ms() + record.timeout_ms as i64;
        let spec = StartSpec {
            task_id: &record.id,
            dir: &dir,
            workdir: &workdir,
            program: &launch.program,
            args: &launch.args,
            env,
            deadline_ms,
            stdin,
            kube: launch.kube.as_ref(),
            session,
            prompt_stdin: launch.stdin == Stdin::Prompt,
            channel: launch.channel,
        };
        let live = self.runs.make(&record.id, TaskStatus::Running, record.event_count);
        let started = match self.runner.start(&spec) {
            Ok(s) => s,
            Err(e) => {
                self.fail_unstarted(&record, &e.to_string())?;
                return Err(e);
            }
        };
        let event = EventBody::Started {
            agent: record.agent.clone(),
            command: crate::prompt::command_line(launch),
            protections: Some(protections),
        };
        self.runs.emit_with(&record.id, dir.root(), &live, vec![event], |events| {
            self.store.set_running(&record.id, started.started_ms, &started.handle, events)?;
            Ok(true)
        })?;
        if self.store.task(&record.id)?.is_some_and(|r| r.cancel_requested) {
            self.runner.request_stop(&started.handle);
        }
        let run = Run::new(&record, dir, live, Some(started.handle), started.started_ms, None);
        info!(task_id = %record.id, "task started");
        let engine = self.clone();
        let span = info_span!("task", task_id = %record.id);
        tokio::spawn(async move { engine.monitor(run, started.watch).await }.instrument(span));
        Ok(())
    }

    /// The agent's environment on top of its adapter's allowlist: who it is,
    /// its launch's variables, its `[[agent]] env` secrets (read now from the
    /// config, never stored), the channel's socket and its own `TMPDIR`.
    fn start_env(&self, record: &TaskRecord, dir: &TaskDir) -> Result<Vec<(String, String)>> {
        let launch = &record.launch;
        let mut env = vec![
            ("CAESAR_AGENT".to_owned(), record.agent.clone()),
            ("CAESAR_DEPTH".to_owned(), (record.depth + 1).to_string()),
            // Which adapter's variables the runner passes (`agent_env.rs`).
            ("CAESAR_PROVIDER".to_owned(), launch.provider.to_string()),
        ];
        env.extend(launch.env.iter().cloned());
        if !launch.secret_env.is_empty() {
            let project = crate::config::project_root(Path::new(&record.workspace));
            if let Ok((config, _)) = self.projects.load_config(&project)
                && let Some(def) = config.agent(&record.agent)
            {
                env.extend(
                    def.env.iter().filter(|(k, _)| launch.secret_env.contains(k)).map(|(k, v)| (k.clone(), v.clone())),
                );
            }
        }
        if launch.channel {
            // What the in-agent channel server needs to reach the daemon. No
            // secret (issue 19): the caller's process tree names its task; in
            // a Kubernetes pod the socket is the pod's relay's, and the stream
            // the daemon opened into that pod names it (`runner/kubernetes/channel.rs`).
            let socket = match launch.kube {
                Some(_) => crate::runner::remote_channel::KUBE_POD_SOCKET.to_owned(),
                None => self.paths.socket.display().to_string(),
            };
            env.push(("CAESAR_SOCKET".to_owned(), socket));
        }
        // A task's temp files go to its own directory.
        let tmp = dir.root().join("tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| Error::io_at("cannot create", &tmp, e))?;
        env.push(("TMPDIR".to_owned(), tmp.display().to_string()));
        // Package caches of its own: the user's are read-only to it (issue 29).
        env.extend(crate::sandbox::task_caches(dir.root()));
        Ok(env)
    }

    /// Ends a task whose agent never ran, with the reason as its report.
    pub(super) fn fail_unstarted(&self, record: &TaskRecord, why: &str) -> Result<()> {
        let report = report::unstarted(&record.id, Ending::Failed(why.to_owned()));
        self.finish_task(record, Exit::without_process(TaskStatus::Failed, Some(why.to_owned())), report, None)
    }
}

/// Kernel confinement (issue 19; `sandbox.rs`), which the supervisor
/// applies to the agent: the spec goes into the environment, and the
/// description of what protects this task comes back for its `started`
/// event.
fn confine(
    paths: &Paths,
    record: &TaskRecord,
    dir: &TaskDir,
    workdir: &Path,
    mut env: Vec<(String, String)>,
) -> (Vec<(String, String)>, String) {
    let launch = &record.launch;
    let read_only = record.mode == crate::oacp::Mode::ReadOnly;
    // caesar's own directories are out of every task's reach (issue 19);
    // a worktree task's main tree too. Beneath `/tmp` as well: there the
    // temp directory is carved around them (by mounts in the agent's mount
    // namespace, `sandbox/mount_carve.rs`: `/tmp` stays writable, entries
    // beside caesar's directories too, but no new one; else by Landlock,
    // which refuses new entries directly in `/tmp` too; the agent's
    // `TMPDIR` is its own). Reads
    // confined too (`sandbox/mount.rs`), but for its task directory, the
    // socket's directory and its worktree; not in a Kubernetes pod, whose
    // directories are not caesar's. One owner of this: `boxed::task_spec`,
    // which setup and verify get too.
    let inputs = super::boxing::spec_inputs(paths, record, dir.root(), read_only, &env);
    let sandbox = crate::supervisor::boxed::task_spec(&inputs, workdir);
    env.push((crate::sandbox::ENV.to_owned(), serde_json::to_string(&sandbox).unwrap_or_default()));
    let mut described = crate::sandbox::describe_for(read_only, launch.provider);
    if let Some(limits) = crate::sandbox::cgroup::describe_limits(&launch.box_limits) {
        described = format!("{described}; {limits}");
    }
    (env, described)
}

/// A stdin protocol's first lines and a session's opening, with the
/// prompt filled in from the task's prompt file (the stored launch holds
/// its token; `prompt.rs`). Arguments and a prompt on stdin get it from
/// the supervisor. The error says why the prompt could not be read.
fn stdin_lines(record: &TaskRecord, dir: &TaskDir) -> std::result::Result<(String, String), String> {
    let (initial, opening) = match &record.launch.stdin {
        Stdin::Control { initial, .. } => (initial.as_str(), ""),
        Stdin::Session { initial, opening, .. } => (initial.as_str(), opening.as_str()),
        Stdin::Null | Stdin::Prompt => ("", ""),
    };
    if !initial.contains(crate::prompt::TOKEN) && !opening.contains(crate::prompt::TOKEN) {
        return Ok((initial.to_owned(), opening.to_owned()));
    }
    let prompt = crate::prompt::read(&dir.daemon_files())
        .map_err(|e| format!("cannot read the task's prompt ({}): {e}", crate::prompt::path(dir).display()))?;
    Ok((crate::prompt::fill_json(initial, &prompt), crate::prompt::fill_json(opening, &prompt)))
}

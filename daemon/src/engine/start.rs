//! Starting a prepared task: its driver's first input, the runner's spawn,
//! and the `running` state with its `started` event in one transaction.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{Instrument, info, info_span};

use crate::agents::Launch;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::{EventBody, OACP_VERSION};
use crate::provider::{self};
use crate::report::{self, Ending};
use crate::store::{Running, TaskRecord, TaskStatus};
use crate::supervisor::{self, SuperviseArgs};
use crate::tail::LogTail;

use super::*;

impl Engine {
    /// Starts the supervisor of a recorded task and its monitor.
    pub(super) async fn start(self: &Arc<Self>, record: TaskRecord) -> Result<TaskRecord> {
        let launch: Launch =
            serde_json::from_str(&record.launch_json).map_err(|e| Error::Internal(format!("stored launch: {e}")))?;
        let task_dir = PathBuf::from(&record.task_dir);
        let workdir = match self.prepare_workshop(&record, &launch).await {
            Ok(dir) => dir,
            Err(why) => {
                self.fail_unstarted(&record, &why)?;
                return Err(Error::Precondition(why));
            }
        };
        let started_ms = now_ms();
        let stdin_close_after = match &launch.stdin {
            provider::Stdin::Null => None,
            provider::Stdin::Control { initial, close_after } => {
                let path = task_dir.join(supervisor::STDIN_INITIAL);
                if let Err(e) = std::fs::write(&path, initial) {
                    let why = format!("cannot write {}: {e}", path.display());
                    self.fail_unstarted(&record, &why)?;
                    return Err(Error::Internal(why));
                }
                Some(close_after.clone())
            }
        };
        let sargs = SuperviseArgs {
            task_dir: task_dir.clone(),
            deadline_ms: started_ms + record.timeout_ms as i64,
            grace_ms: self.settings.grace_ms,
            log_cap: self.settings.raw_log_cap,
            stdin_close_after: stdin_close_after.clone(),
            program: launch.program.clone(),
            args: launch.args.clone(),
        };
        let mut cmd = tokio::process::Command::new(&self.settings.supervisor_exe);
        cmd.args(sargs.to_argv())
            .current_dir(&workdir)
            // [V] opencode takes its working directory from PWD, which the daemon inherited
            // from wherever it was started: left alone, the agent edits that directory.
            .env("PWD", &workdir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env("CAESAR_TASK_DIR", &task_dir)
            .env("CAESAR_TASK_FILE", task_dir.join("task.json"))
            .env("CAESAR_REPORT_PATH", task_dir.join("report.json"))
            .env("CAESAR_EVENTS_PATH", task_dir.join(EVENTS_FILE))
            .env("CAESAR_TASK_ID", &record.id)
            .env("CAESAR_AGENT", &record.agent)
            .env("CAESAR_DEPTH", (record.depth + 1).to_string())
            .env("CAESAR_PROTOCOL_VERSION", OACP_VERSION)
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        if launch.channel {
            // What the in-agent channel server needs to reach this task, and
            // only this task.
            cmd.env("CAESAR_CHANNEL_SECRET", &record.secret).env("CAESAR_SOCKET", &self.paths.socket);
        }
        match std::fs::File::create(task_dir.join(SUPERVISOR_LOG)) {
            Ok(f) => cmd.stderr(f),
            Err(_) => cmd.stderr(std::process::Stdio::null()),
        };
        #[cfg(unix)]
        // SAFETY: setsid is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
        }
        let live = Live::new(TaskStatus::Running, record.event_count);
        self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), live.clone());
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let why = format!("cannot start the supervisor {}: {e}", self.settings.supervisor_exe.display());
                self.fail_unstarted(&record, &why)?;
                return Err(Error::Internal(why));
            }
        };
        let pid = child.id().unwrap_or(0);
        let boot_id = supervisor::boot_id();
        let running =
            Running { started_ms, pid, start_time: supervisor::process_start_time(pid), boot_id: boot_id.as_deref() };
        let started = EventBody::Started { agent: record.agent.clone(), command: launch.display() };
        self.emit_with(&record.id, &task_dir, &live, vec![started], |events| {
            self.store.set_running(&record.id, &running, events)?;
            Ok(true)
        })?;
        let run = Run {
            id: record.id.clone(),
            task_dir: task_dir.clone(),
            tail: LogTail::new(&task_dir.join(supervisor::RAW_LOG), 0),
            parser: parser_for(&launch.parser),
            generic: launch.parser == provider::GENERIC,
            final_text: None,
            messages: String::new(),
            session_id: None,
            blocker: None,
            supervisor_pid: Some(pid),
            live,
            bridge: stdin_close_after.map(|_| launch.parser.clone()),
            permission_deadlines: Vec::new(),
            deadline_ms: started_ms + record.timeout_ms as i64,
        };
        info!(task_id = %record.id, pid, "task started");
        let engine = self.clone();
        let span = info_span!("task", task_id = %record.id);
        tokio::spawn(async move { engine.monitor(run, Waiter::Child(child)).await }.instrument(span));
        self.store.task(&record.id)?.ok_or_else(|| Error::Internal("task vanished from the store".to_owned()))
    }

    /// Prepares where the task runs (a worktree, or the workspace with a
    /// snapshot of it), records it, and returns the agent's directory. A
    /// failure (a setup command, a worktree that cannot be made) is the
    pub(super) fn fail_unstarted(&self, record: &TaskRecord, why: &str) -> Result<()> {
        let report = report::recover(&report::Inputs {
            task_id: &record.id,
            report_path: &Path::new(&record.task_dir).join("report.json"),
            texts: &[],
            ending: Ending::Failed(why.to_owned()),
            duration_ms: 0,
            native: None,
        });
        self.finish_task(record, Exit::without_process(TaskStatus::Failed, Some(why.to_owned())), report, None)
    }
}

//! The local runner: `caesard __supervise` on this machine.
//!
//! The supervisor runs in a session of its own, so it outlives the daemon;
//! it starts the agent, copies its output into `raw.log`, holds its stdin
//! when it has one (fed through the task's FIFO), stops its whole tree at the
//! deadline or on request, and writes `exit.json` last. See
//! [`crate::supervisor`] for the process itself.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::OACP_VERSION;
use crate::supervisor::{self, ExitRecord, SuperviseArgs};
use crate::task_dir::TaskDir;

use super::log_wake::LogWake;
use super::{Adopted, RunHandle, RunWatch, Runner, StartSpec, Started};
use crate::launch::runner::RunnerKind;

/// Runs supervisors on this machine.
#[derive(Debug, Clone)]
pub struct LocalRunner {
    /// The executable that runs `__supervise` (the caesard binary).
    pub supervisor_exe: PathBuf,
    /// Between SIGTERM and SIGKILL when a run is stopped.
    pub grace_ms: u64,
    /// The most bytes of an agent's output kept in raw.log (0: no cap).
    pub raw_log_cap: u64,
}

impl LocalRunner {
    fn handle_parts(handle: &RunHandle) -> (u32, Option<u64>, Option<&str>) {
        match handle {
            RunHandle::Local { pid, start, boot } => (*pid, *start, boot.as_deref()),
            // Never routed here (runner::multi sends it to the Kubernetes runner).
            RunHandle::Kubernetes { .. } => (0, None, None),
        }
    }
}

impl Runner for LocalRunner {
    fn start(&self, spec: &StartSpec<'_>) -> Result<Started> {
        let dir = spec.dir.root();
        // The supervisor's files go in the daemon's part (issue 19): it is
        // unconfined, its agent is not, and the agent has no path to them.
        let files = spec.dir.daemon_files();
        if let Some((initial, _)) = spec.stdin {
            let path = spec.dir.stdin_initial();
            std::fs::write(&path, initial).map_err(|e| Error::io_at("cannot write", &path, e))?;
        }
        if let Some((_, opening)) = spec.session {
            let path = spec.dir.session_opening();
            std::fs::write(&path, opening).map_err(|e| Error::io_at("cannot write", &path, e))?;
        }
        let sargs = SuperviseArgs {
            task_dir: files,
            deadline_ms: spec.deadline_ms,
            grace_ms: self.grace_ms,
            log_cap: self.raw_log_cap,
            stdin_close_after: spec.stdin.map(|(_, close_after)| close_after.to_owned()),
            session: spec.session.map(|(protocol, _)| protocol),
            stdin_prompt: spec.prompt_stdin,
            program: spec.program.to_owned(),
            args: spec.args.to_vec(),
        };
        let mut cmd = tokio::process::Command::new(&self.supervisor_exe);
        // Not the daemon's whole environment: an allowlist for the adapter (issue 19).
        let provider =
            spec.env.iter().find(|(k, _)| k == "CAESAR_PROVIDER").and_then(|(_, v)| v.parse().ok()).unwrap_or_default();
        cmd.env_clear().envs(crate::agent_env::allowed(provider, std::env::vars_os()));
        cmd.args(sargs.to_argv())
            .current_dir(spec.workdir)
            // [V] opencode takes its working directory from PWD, which the daemon inherited
            // from wherever it was started: left alone, the agent edits that directory.
            .env("PWD", spec.workdir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env("CAESAR_TASK_DIR", dir)
            .env("CAESAR_TASK_FILE", spec.dir.task_json())
            .env("CAESAR_REPORT_PATH", spec.dir.report())
            .env("CAESAR_EVENTS_PATH", spec.dir.events())
            .env("CAESAR_TASK_ID", spec.task_id)
            .env("CAESAR_PROTOCOL_VERSION", OACP_VERSION)
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        // Made just before the spawn: recovery reads its absence as "no
        // supervisor was ever started", without scanning /proc.
        let log = spec.dir.supervisor_log();
        match std::fs::File::create(&log) {
            Ok(f) => cmd.stderr(f),
            Err(_) => cmd.stderr(std::process::Stdio::null()),
        };
        // No `pre_exec` here: without one std starts the supervisor with
        // posix_spawn (a vfork), not a fork of the whole daemon, whose page
        // tables grow with every task it holds. The supervisor leaves the
        // daemon's session itself, first thing ([`supervisor::run`]).
        // The log is made here, before the supervisor appends to it, so that the monitor's
        // wake on write is set before the first line (the supervisor opens it for appending).
        let wake = {
            use std::os::unix::fs::OpenOptionsExt;
            let raw = spec.dir.raw_log();
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&raw)
                .ok()
                .and_then(|_| LogWake::watch(&raw))
        };
        let started_ms = now_ms();
        let child = cmd.spawn().map_err(|e| {
            Error::Internal(format!("cannot start the supervisor {}: {e}", self.supervisor_exe.display()))
        })?;
        let pid = child.id().unwrap_or(0);
        let handle = RunHandle::Local { pid, start: supervisor::process_start_time(pid), boot: supervisor::boot_id() };
        Ok(Started { handle, started_ms, watch: Box::new(LocalWatch { kind: WatchKind::Child(child), wake }) })
    }

    fn attach(&self, handle: &RunHandle, dir: &TaskDir) -> Box<dyn RunWatch> {
        let (pid, start, boot) = Self::handle_parts(handle);
        let kind = WatchKind::Reattached { pid, start, boot: boot.map(str::to_owned), exit: dir.exit(), ticks: 0 };
        Box::new(LocalWatch { kind, wake: LogWake::watch(&dir.raw_log()) })
    }

    fn adopt(
        &self,
        _kind: RunnerKind,
        task_id: &str,
        dir: &TaskDir,
    ) -> Pin<Box<dyn Future<Output = Option<Adopted>> + Send + '_>> {
        let (task_id, dir) = (task_id.to_owned(), dir.clone());
        Box::pin(async move {
            // agent.json is written by the supervisor right after it started
            // the agent: once it exists, the agent ran (or runs), and must
            // never be started again. Adopted whether its supervisor lives
            // or not; the monitor then collects its exit record, or ends the
            // task as vanished.
            let adopt = |agent: supervisor::AgentStarted| {
                let pid = agent.supervisor_pid;
                let start = supervisor::process_start_time(pid).filter(|_| pid != 0);
                Adopted {
                    handle: RunHandle::Local { pid, start, boot: supervisor::boot_id() },
                    started_ms: agent.started_ms,
                }
            };
            let files = dir.daemon_files();
            if let Some(agent) = supervisor::read_agent_checked(&files, &task_id) {
                return Some(adopt(agent));
            }
            // No supervisor.log: no supervisor was ever spawned for this
            // task. None alive: it died before starting the agent.
            if !dir.supervisor_log().exists() || supervisor::processes_of_task(&task_id).is_empty() {
                return None;
            }
            // A supervisor runs (it names the task in its environment): it
            // writes agent.json soon.
            for _ in 0..250 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Some(agent) = supervisor::read_agent_checked(&files, &task_id) {
                    return Some(adopt(agent));
                }
            }
            // It never got the agent started: start afresh.
            supervisor::kill_by_task_env(&task_id);
            // The agent may have been started in the last instant.
            supervisor::read_agent_checked(&files, &task_id).map(adopt)
        })
    }

    fn is_alive(&self, handle: &RunHandle) -> bool {
        let (pid, start, boot) = Self::handle_parts(handle);
        supervisor::is_same_process_alive(pid, start, boot)
    }

    fn request_stop(&self, handle: &RunHandle) {
        if self.is_alive(handle) {
            #[cfg(unix)]
            supervisor::request_stop(Self::handle_parts(handle).0);
        }
    }

    fn write_stdin(&self, _handle: &RunHandle, dir: &TaskDir, line: &str) -> std::io::Result<()> {
        supervisor::write_agent_stdin(&dir.daemon_files(), line)
    }

    fn exit_record(&self, _handle: &RunHandle, dir: &TaskDir) -> Option<ExitRecord> {
        supervisor::read_exit(&dir.daemon_files())
    }

    fn kill_remains(&self, _handle: &RunHandle, task_id: &str, dir: &TaskDir) {
        // The agent's group if agent.json names one of this task's own
        // processes (the agent can write agent.json: its pid is never taken
        // on its word), and every process carrying the task's id in its
        // environment.
        #[cfg(unix)]
        supervisor::kill_group_checked(&dir.daemon_files(), task_id);
        supervisor::kill_by_task_env(task_id);
    }
}

/// How the local runner learns that a supervisor is done, and when its log grew.
struct LocalWatch {
    kind: WatchKind,
    /// Wakes the monitor as soon as `raw.log` is written (Linux); the tick remains the fallback.
    wake: Option<LogWake>,
}

enum WatchKind {
    /// This daemon started the supervisor and is its parent.
    Child(tokio::process::Child),
    /// An earlier daemon started it: `exit.json`, and every 25 ticks the
    /// supervisor's liveness, tell.
    Reattached { pid: u32, start: Option<u64>, boot: Option<String>, exit: PathBuf, ticks: u64 },
}

impl RunWatch for LocalWatch {
    fn wait(&mut self, tick: Duration) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let LocalWatch { kind, wake } = self;
            let written = async {
                match wake {
                    Some(w) => w.changed().await,
                    None => std::future::pending().await,
                }
            };
            match kind {
                WatchKind::Child(child) => tokio::select! {
                    _ = child.wait() => true,
                    _ = written => false,
                    _ = tokio::time::sleep(tick) => false,
                },
                WatchKind::Reattached { pid, start, boot, exit, ticks } => {
                    tokio::select! {
                        _ = written => {}
                        _ = tokio::time::sleep(tick) => {}
                    }
                    *ticks += 1;
                    exit.exists()
                        || (ticks.is_multiple_of(25)
                            && !supervisor::is_same_process_alive(*pid, *start, boot.as_deref()))
                }
            }
        })
    }
}

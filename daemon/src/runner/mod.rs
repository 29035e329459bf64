//! The Runner seam: where a task's process runs.
//!
//! A runner starts a task's supervised process, finds it again after a
//! daemon restart, feeds its stdin, stops it and collects how it ended. The
//! engine never sees a pid: it holds an opaque [`RunHandle`], stored with the
//! task, that the runner alone interprets. Output always arrives the same
//! way whatever the runner: as bytes appended to the task directory's
//! `raw.log`, which the monitor reads from its stored offset; the ending as
//! an [`ExitRecord`].
//!
//! [`local::LocalRunner`] runs `caesard __supervise` on this machine. A
//! runner for a process elsewhere (a Kubernetes Job) implements the same
//! trait: its handle names the Job, it copies the pod's output into
//! `raw.log`, and its exit record comes from the pod. Such a runner also
//! carries the task's return channel ([`remote_channel`]), which has no
//! path to the daemon's socket from there.

#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod local;
mod log_wake;
pub mod multi;
pub mod remote_channel;
/// The `[runner]` settings, which a launch plan carries (`launch::runner`).
pub use crate::launch::runner as settings;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::launch::runner::RunnerKind;
use crate::supervisor::ExitRecord;
use crate::task_dir::TaskDir;

/// A started task's process as its runner knows it. Stored with the task,
/// it survives daemon restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "runner", rename_all = "snake_case")]
pub enum RunHandle {
    /// A supervisor on this machine: pid, start time and boot, so that a
    /// reused pid or a reboot is never taken for it.
    Local { pid: u32, start: Option<u64>, boot: Option<String> },
    /// A Kubernetes Job (issue 16): where it is and which one (its uid, so a
    /// Job re-created under the same name is never taken for it).
    Kubernetes {
        #[serde(default)]
        kubeconfig: Option<String>,
        #[serde(default)]
        context: Option<String>,
        namespace: String,
        job: String,
        #[serde(default)]
        uid: Option<String>,
    },
}

impl RunHandle {
    /// The runner this handle belongs to.
    pub fn kind(&self) -> RunnerKind {
        match self {
            RunHandle::Local { .. } => RunnerKind::Local,
            RunHandle::Kubernetes { .. } => RunnerKind::Kubernetes,
        }
    }
}

/// Everything a runner needs to start a task.
#[derive(Debug, Clone)]
pub struct StartSpec<'a> {
    pub task_id: &'a str,
    pub dir: &'a TaskDir,
    /// Where the agent works.
    pub workdir: &'a Path,
    pub program: &'a str,
    pub args: &'a [String],
    /// The agent's environment on top of what the runner sets.
    pub env: Vec<(String, String)>,
    /// When the run is stopped, milliseconds since the epoch.
    pub deadline_ms: i64,
    /// For an agent whose stdin stays open: the first bytes it reads, and
    /// the output line prefix after which its stdin is closed.
    pub stdin: Option<(&'a str, &'a str)>,
    /// Run as a Kubernetes Job with these settings; `None`: locally.
    pub kube: Option<&'a settings::KubeSettings>,
    /// For a session protocol: which, and the rest of its opening, which the supervisor
    /// carries out (`stdin` then holds the first request).
    pub session: Option<(crate::launch::SessionProtocol, &'a str)>,
    /// The agent reads its prompt on stdin, from the task's prompt file, then end of file
    /// (issue 19, [`crate::prompt`]); its arguments may also hold [`crate::prompt::TOKEN`],
    /// filled in by the supervisor.
    pub prompt_stdin: bool,
    /// The agent has the return channel (`caesar-mcp --channel`): a runner
    /// for elsewhere carries its calls ([`remote_channel`]).
    pub channel: bool,
}

/// A started run, as the runner hands it back.
pub struct Started {
    pub handle: RunHandle,
    /// When the process started, milliseconds since the epoch.
    pub started_ms: i64,
    pub watch: Box<dyn RunWatch>,
}

/// A process started without being recorded (the daemon died in between),
/// found again and adopted.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub handle: RunHandle,
    pub started_ms: i64,
}

/// How the monitor learns that a run ended.
pub trait RunWatch: Send {
    /// Waits up to `tick`; true once the run has ended (its output is then
    /// complete and its exit record, if any, readable).
    fn wait(&mut self, tick: Duration) -> Pin<Box<dyn Future<Output = bool> + Send + '_>>;
}

/// Where tasks run. Every method is safe to call again after a crash.
///
/// Which runner a task belongs to is what its stored record says: every
/// method after [`Runner::start`] takes the stored [`RunHandle`], or, for a
/// task that may have no handle yet, the [`RunnerKind`] its stored launch
/// names. Never a file in the task directory, which its agent can write.
pub trait Runner: Send + Sync {
    /// Starts the run. Writes nothing to the store: the engine records the
    /// handle.
    fn start(&self, spec: &StartSpec<'_>) -> Result<Started>;

    /// Watches a run started by an earlier daemon.
    fn attach(&self, handle: &RunHandle, dir: &TaskDir) -> Box<dyn RunWatch>;

    /// A run of `task_id` that was started but never recorded, if one is
    /// alive; waits briefly for one that is still starting. A run found but
    /// unusable is stopped, and `None` returned: the task starts afresh.
    /// `kind`: the runner the task's stored launch names.
    fn adopt(
        &self,
        kind: RunnerKind,
        task_id: &str,
        dir: &TaskDir,
    ) -> Pin<Box<dyn Future<Output = Option<Adopted>> + Send + '_>>;

    /// Whether the run is still going.
    fn is_alive(&self, handle: &RunHandle) -> bool;

    /// Asks the run to stop its whole tree; it ends with `terminated` soon.
    fn request_stop(&self, handle: &RunHandle);

    /// Writes one line to the agent's stdin (a run started with `stdin`).
    fn write_stdin(&self, handle: &RunHandle, dir: &TaskDir, line: &str) -> std::io::Result<()>;

    /// How the run ended, once it has.
    fn exit_record(&self, handle: &RunHandle, dir: &TaskDir) -> Option<ExitRecord>;

    /// Makes sure nothing of a run whose supervision vanished goes on.
    fn kill_remains(&self, handle: &RunHandle, task_id: &str, dir: &TaskDir);

    /// Lets go of what a finished run left outside this machine once its
    /// changes are applied, discarded or collected (a Kubernetes task's
    /// refs on the git remote); `repo` is a repository to run git in.
    /// `kind`: the runner the task's stored record names (its handle's, or
    /// for a task never recorded started, its launch's: a start that died
    /// before it was recorded may have pushed refs already).
    /// Idempotent; true when something was released now. An error is
    /// retried at the next gc.
    fn release(
        &self,
        kind: RunnerKind,
        task_id: &str,
        dir: &TaskDir,
        repo: &Path,
    ) -> std::result::Result<bool, String> {
        let _ = (kind, task_id, dir, repo);
        Ok(false)
    }
}

/// Findings a runner recorded about a task's run (a remote pod whose
/// control files the agent forged, a result that did not verify), one JSON
/// [`crate::oacp::Finding`] a line in the task's daemon part (out of a local
/// agent's reach: a finding there is the runner's word); the report gets them.
pub const RUNNER_FINDINGS: &str = "runner.findings.jsonl";

/// The findings a runner recorded for the task in `dir` (at most 20).
pub fn findings(dir: &TaskDir) -> Vec<crate::oacp::Finding> {
    let path = dir.daemon_files().join(RUNNER_FINDINGS);
    let Ok(bytes) = crate::safe_fs::read_capped(&path, crate::safe_fs::REPORT_CAP) else { return Vec::new() };
    String::from_utf8_lossy(&bytes).lines().filter_map(|l| serde_json::from_str(l).ok()).take(20).collect()
}

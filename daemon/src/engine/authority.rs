//! Who is calling (issue 19): the user, or a process inside a task's tree.
//!
//! Agents run as the user, so the socket's uid check admits them. The
//! kernel, not the caller, says which process connected; its ancestry (read
//! at accept, [`caesar_proto::peer`]) leads to the task supervisor it runs
//! under, because the supervisor is the task's subreaper and re-parented
//! descendants stay beneath it. A supervisor is believed only when its pid
//! and start time are the ones the store holds for the task it claims: an
//! agent can rename a process and set `CAESAR_TASK_ID` in an environment,
//! but not forge the daemon's record of its own supervisor.
//!
//! A task's processes may read their own task and the tasks they delegated,
//! answer and cancel those children, delegate further under their own
//! authority (see [`super::nested`]), and use the return channel for their
//! own task. Everything else an orchestrator does is refused, by name.

use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::peer::{PeerInfo, SUPERVISOR_COMM};

use crate::error::{Error, Result};
use crate::runner::RunHandle;
use crate::store::TaskRecord;

use super::*;

/// How long a call from under a supervisor the daemon has just spawned waits
/// for the task's run to be recorded (spawn and record are a few ms apart).
const RECORD_WAIT: Duration = Duration::from_secs(3);

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Caller {
    /// One of the user's own processes (or the HTTP endpoint, which
    /// authenticates by its token).
    User,
    /// A process inside the tree of this task's supervisor.
    Task(Box<TaskRecord>),
    /// A process caesar started or supervises but cannot attribute to a
    /// task (a worktree `setup`, a tree whose supervisor is no task's, an
    /// ancestry the kernel would not tell): it may call nothing that reads
    /// or changes tasks. The text says why.
    Untrusted(String),
}

impl Caller {
    /// The task the caller runs inside, if any.
    pub fn task(&self) -> Option<&TaskRecord> {
        match self {
            Caller::Task(t) => Some(t),
            _ => None,
        }
    }

    /// Refuses an orchestrator call (`what`) from anyone but the user.
    pub fn require_user(&self, what: &str) -> Result<()> {
        match self {
            Caller::User => Ok(()),
            Caller::Task(t) => Err(Error::Refused(format!(
                "`{what}` is an orchestrator call, and the caller runs inside task {}'s process tree (below its supervisor): a task's agent cannot act as its orchestrator. Ask the orchestrator through the return channel (`ask_orchestrator`), or report what should be done",
                t.id
            ))),
            Caller::Untrusted(why) => Err(Error::Refused(format!("`{what}` is an orchestrator call, refused: {why}"))),
        }
    }

    /// Refuses a call about task `target` unless the caller may see it: the
    /// user sees every task, a task itself and the tasks it delegated.
    pub fn require_reach(&self, what: &str, target: &TaskRecord) -> Result<()> {
        match self {
            Caller::User => Ok(()),
            Caller::Task(t) if reaches(t, target) => Ok(()),
            Caller::Task(t) => Err(Error::Refused(format!(
                "`{what}` on task {} is refused: the caller runs inside task {}'s process tree, and a task reaches only itself and the tasks it delegated",
                target.id, t.id
            ))),
            Caller::Untrusted(why) => Err(Error::Refused(format!("`{what}` is refused: {why}"))),
        }
    }

    /// Refuses an orchestrator call on task `target` (answer, cancel) unless
    /// the caller is the user or `target`'s parent task.
    pub fn require_parent_of(&self, what: &str, target: &TaskRecord) -> Result<()> {
        match self {
            Caller::Task(t) if target.launch.parent.as_deref() == Some(t.id.as_str()) => Ok(()),
            Caller::Task(t) => Err(Error::Refused(format!(
                "`{what}` on task {} is refused: the caller runs inside task {}'s process tree, and a task may {what} only the tasks it delegated",
                target.id, t.id
            ))),
            other => other.require_user(what),
        }
    }

    /// Refuses a call about `workspace` (ShowConfig, Health, ListAgents,
    /// DescribeAgent, ListRoles) from inside a task unless it is the task's
    /// own project: a task reads the config, health, agents and roles of the
    /// project it runs in (and the global layer, asked with an empty
    /// workspace), never another of the user's (issue 29).
    pub fn require_workspace(&self, what: &str, workspace: &str) -> Result<()> {
        match self {
            Caller::User => Ok(()),
            Caller::Task(t) if workspace.is_empty() || same_project(&t.workspace, Path::new(workspace)) => Ok(()),
            Caller::Task(t) => Err(Error::Refused(format!(
                "`{what}` of workspace {workspace} is refused: the caller runs inside task {}'s process tree, and a task reads only the project it runs in ({})",
                t.id, t.workspace
            ))),
            Caller::Untrusted(why) => Err(Error::Refused(format!("`{what}` is refused: {why}"))),
        }
    }

    /// Whether the caller may see what concerns `path` (a trust record):
    /// the user everything, a task only what lies in its own project.
    pub fn sees_path(&self, path: &str) -> bool {
        match self {
            Caller::User => true,
            Caller::Task(t) => {
                let own = crate::config::project_root(&canonical(Path::new(&t.workspace)));
                let path = Path::new(path);
                let lexical =
                    || !path.components().any(|c| c == std::path::Component::ParentDir) && path.starts_with(&own);
                std::fs::canonicalize(path).map_or_else(|_| lexical(), |p| p.starts_with(&own))
            }
            Caller::Untrusted(_) => false,
        }
    }
}

/// `path` with its links and `..` resolved, or as given when it does not
/// exist (a task's own workspace, which the daemon recorded).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether `asked` lies in the same project as the task's `workspace`,
/// both resolved (`<project>/../other` is another project).
fn same_project(workspace: &str, asked: &Path) -> bool {
    let Ok(asked) = std::fs::canonicalize(asked) else { return false };
    let own = crate::config::project_root(&canonical(Path::new(workspace)));
    crate::config::project_root(&asked) == own
}

/// A task reaches itself and its children.
pub fn reaches(caller: &TaskRecord, target: &TaskRecord) -> bool {
    caller.id == target.id || target.launch.parent.as_deref() == Some(caller.id.as_str())
}

impl Engine {
    /// Classifies a caller by what the kernel said of its connection.
    /// `None` (no socket peer: the in-process HTTP endpoint) is the user.
    pub async fn caller(&self, peer: Option<&PeerInfo>) -> Result<Caller> {
        let Some(peer) = peer else { return Ok(Caller::User) };
        let Some(pid) = peer.pid else {
            return Ok(Caller::Untrusted(
                "the kernel did not say which process is calling, so it cannot be told from a task's agent".to_owned(),
            ));
        };
        // The topmost supervisor: an agent can name its own processes
        // `caesar-supervis`, but they all sit beneath its real supervisor.
        let Some(sup) = peer.ancestry.iter().rev().find(|a| a.comm == SUPERVISOR_COMM) else {
            if peer.under_daemon {
                return Ok(Caller::Untrusted(format!(
                    "process {pid} was started by caesard itself (a worktree `setup`, say), not by the user"
                )));
            }
            // Inside a box whose supervisor is gone from its ancestry (or
            // a CLI that runs without the PID namespace): the kernel's
            // confinement, not the ancestry, says it is no user process.
            if let Some(why) = &peer.confined {
                return Ok(Caller::Untrusted(format!(
                    "process {pid} runs {why}: a task's box, not the user's session, and no task's recorded supervisor is among its ancestors"
                )));
            }
            if peer.cut {
                return Ok(Caller::Untrusted(format!(
                    "the ancestry of process {pid} could not be read from /proc, so it cannot be told from a task's agent"
                )));
            }
            return Ok(Caller::User);
        };
        let deadline = std::time::Instant::now() + RECORD_WAIT;
        loop {
            if let Some(id) = &sup.task_id
                && crate::ids::is_task_id(id)
                && let Some(record) = self.store.task(id)?
            {
                // The same process as at accept, and the one recorded.
                if let Some(RunHandle::Local { pid: p, start, .. }) = &record.run
                    && *p == sup.pid
                    && caesar_proto::peer::start_ticks(sup.pid) == Some(sup.start)
                    && start.is_some()
                    && crate::supervisor::process_start_time(sup.pid) == *start
                {
                    return Ok(Caller::Task(Box::new(record)));
                }
                // Spawned by this daemon a moment ago, not recorded yet.
                let fresh = sup.ppid == std::process::id() && record.run.is_none() && !record.status.is_terminal();
                if fresh && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
            return Ok(Caller::Untrusted(format!(
                "process {pid} runs beneath a process named {SUPERVISOR_COMM} (pid {}) that is no task's recorded supervisor",
                sup.pid
            )));
        }
    }
}

//! The launch plan a task is stored with: what runs, how it hears its
//! prompt and answers, where it runs and what happens around it. Written
//! once at delegation, read by the start, the runner, the driver and the
//! store; a restarted daemon knows exactly what ran.

use caesar_proto::kinds::IsolationPref;
use serde::{Deserialize, Serialize};

use super::runner::KubeSettings;
use super::{ProviderId, SessionProtocol};

/// The resolved command of a task, stored with it so that a restarted daemon
/// knows exactly what ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LaunchPlan {
    pub program: String,
    pub args: Vec<String>,
    /// Extra environment on top of the `CAESAR_*` variables.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// The names of the `[[agent]] env` variables (issue 19): their values
    /// are secrets, so they are never stored; the start reads them from
    /// the config and hands them to the supervisor's environment only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    /// Which adapter launched it and reads its output (stored under its old
    /// name, `parser`, so rows written before decode).
    #[serde(rename = "parser")]
    pub provider: ProviderId,
    /// Facts found while resolving (network, model), added to the report.
    #[serde(default)]
    pub findings: Vec<crate::oacp::Finding>,
    /// The project's `max_parallel` when the task was queued; 0 for no limit.
    #[serde(default)]
    pub max_parallel: u32,
    /// The return channel was asked for: the agent gets its secret.
    #[serde(default)]
    pub channel: bool,
    /// How to prepare the task's workshop when it starts.
    #[serde(default)]
    pub plan: Option<WorkshopPlan>,
    /// The CLI was asked to answer in the report schema: its final answer
    /// is the report (tier 2).
    #[serde(default)]
    pub native_report: bool,
    /// What the agent reads on stdin.
    #[serde(default)]
    pub stdin: Stdin,
    /// Budget, blocker policy and fallback chain (issue 17).
    #[serde(default)]
    pub lifecycle: crate::lifecycle::Plan,
    /// Commands run in the task's workshop after the agent ended (issue 17,
    /// `engine/verify.rs`); their outcome goes into the report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
    /// The task that delegated this one from inside its process tree
    /// (issue 19): it alone, besides the user, may await, answer and
    /// cancel it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Run as a Kubernetes Job with these settings (`[runner]`, issue 16);
    /// `None`: on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube: Option<KubeSettings>,
    /// The prompt's size and way (issue 19, `prompt.rs`): the launch holds
    /// the prompt token (`prompt::TOKEN`) where the prompt goes, never its text; `None`
    /// for a launch stored before, which holds the prompt itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptRef>,
    /// The kernel's limits on the task's box (`[policy] box_*`, issue 29).
    #[serde(default, skip_serializing_if = "BoxLimits::is_empty")]
    pub box_limits: BoxLimits,
}

/// Kernel limits on everything a task's box runs (issue 29, `[policy]`
/// `box_memory_max_mb`, `box_pids_max`, `box_cpu_weight`): written to the
/// box's cgroup (`sandbox/cgroup.rs`) where the user's cgroup is delegated
/// with the controller each needs. `None`: the kernel's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BoxLimits {
    /// `memory.max`, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// `pids.max`: processes and threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u64>,
    /// `cpu.weight` (1–10000; the kernel's default is 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u32>,
}

impl BoxLimits {
    pub fn is_empty(&self) -> bool {
        *self == BoxLimits::default()
    }
}

/// What the workshop needs at start: decided at delegation, carried out when
/// the queue starts the task (so a queued task branches from the HEAD of
/// the moment it starts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkshopPlan {
    pub isolation: IsolationPref,
    /// The role, else the agent: the middle of the branch name.
    pub label: String,
    pub allow_inplace_write: bool,
    pub worktree: WorktreeSection,
    /// The tree a write task in place holds while it runs; no other such
    /// task starts on it meanwhile.
    #[serde(default)]
    pub shared_tree: Option<String>,
    /// Delegation decided on a worktree: it is made (with `setup`) before
    /// the task is queued, outside every lock.
    #[serde(default)]
    pub worktree_decided: bool,
    /// A fork (issue 31): the tree (oid) its new worktree starts with, laid
    /// over the base as uncommitted changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_tree: Option<String>,
    /// The base (commit oid) of the task `start_tree` was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_base: Option<String>,
}

impl LaunchPlan {
    /// Decodes a stored launch plan. A plan this build cannot read (written
    /// by a newer daemon, or damaged) becomes a generic launch of nothing,
    /// which fails at start with a message saying so rather than guessing.
    pub fn decode(json: &str) -> LaunchPlan {
        serde_json::from_str(json).unwrap_or_else(|e| {
            tracing::warn!("a stored launch plan does not decode ({e}): the task will fail to start");
            LaunchPlan { provider: ProviderId::Generic, ..LaunchPlan::default() }
        })
    }

    /// How the engine converses with the agent.
    pub fn driver_kind(&self) -> DriverKind {
        match self.stdin {
            Stdin::Null | Stdin::Prompt => DriverKind::Stream,
            Stdin::Control { .. } => DriverKind::StreamWithControl,
            Stdin::Session { protocol: SessionProtocol::Acp, .. } => DriverKind::Acp,
            Stdin::Session { protocol: SessionProtocol::CodexAppServer, .. } => DriverKind::CodexAppServer,
        }
    }

    /// Whether the task's workshop is a worktree made before it is queued:
    /// the part of preparation that runs outside the queue.
    pub fn prepares_worktree(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.worktree_decided)
    }
}

/// How a driver converses with its agent, as stored in the launch plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// Output is read line by line; stdin is closed.
    Stream,
    /// Output is read line by line; stdin stays open for the CLI's control
    /// protocol, through which permission requests are answered.
    StreamWithControl,
    /// A two-way ACP session (JSON-RPC 2.0 over stdio), opened by the supervisor.
    Acp,
    /// A two-way `codex app-server` session (JSON-RPC over stdio), opened by the supervisor.
    CodexAppServer,
}

/// What an agent reads on stdin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stdin {
    /// `/dev/null`: every CLI that takes its prompt as an argument, because several append piped
    /// stdin to the prompt.
    #[default]
    Null,
    /// A line protocol the supervisor keeps open for the whole run, so that it outlives daemon
    /// restarts: `initial` is written first, then each line the daemon writes to the task's
    /// `stdin.fifo`. The supervisor closes the agent's stdin once the agent prints a line that
    /// starts with `close_after` (the end of its turn), which is what makes the CLI exit.
    Control { initial: String, close_after: String },
    /// A two-way session protocol (ACP): the supervisor writes `initial` (the `initialize`
    /// request), then carries out the rest of the opening in `opening` (session/new, then the
    /// prompt) as the agent answers, so that a daemon restart mid-handshake can neither repeat
    /// nor lose a step; it closes stdin once the prompt's turn has ended.
    Session { protocol: SessionProtocol, initial: String, opening: String },
    /// The prompt on stdin, then end of file (issue 19: prompts out of argv): the supervisor
    /// writes the task's `prompt.txt` into a pipe and closes it. For the one-shot CLIs that read
    /// a piped stdin as their prompt (codex `exec -`, gemini and qwen, opencode `run`).
    Prompt,
}

/// How a task's prompt reaches its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// As (part of) an argument: the CLI has no other way.
    Argv,
    /// On stdin, then end of file.
    Stdin,
    /// Inside the CLI's stdin protocol (claude's stream-json, ACP, codex app-server).
    Protocol,
}

impl Via {
    pub(crate) fn words(self) -> &'static str {
        match self {
            Via::Argv => "in argv",
            Via::Stdin => "via stdin",
            Via::Protocol => "via the stdin protocol",
        }
    }
}

/// The prompt as the launch knows it: its size and its way, never its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptRef {
    /// The prompt's size in bytes.
    pub bytes: u64,
    /// How it reaches the agent.
    pub via: Via,
}

impl PromptRef {
    /// What a display shows instead of the prompt: `<prompt: 213 bytes via stdin>`.
    pub fn shown(&self) -> String {
        format!("<prompt: {} bytes {}>", self.bytes, self.via.words())
    }
}

/// `[worktree]`: what a task's worktree needs to be workable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorktreeSection {
    /// Paths copied from the workspace (reflinked where the filesystem can).
    pub copy: Vec<String>,
    /// Paths symlinked from the workspace (shared, not isolated).
    pub link: Vec<String>,
    /// Commands run in the worktree before the agent starts.
    pub setup: Vec<String>,
}

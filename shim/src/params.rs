//! The tools' input parameters: their JSON Schemas are generated from these
//! types, and the same types parse the arguments. Names follow caesar's
//! TypeScript MCP server, so existing prompts and skills work unchanged.

use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

/// Accepts any JSON number (or null) and saturates it into an `i64`, so that
/// an out-of-range number is clamped by the tool instead of refused here.
fn lenient_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = Option::<serde_json::Number>::deserialize(d)?;
    Ok(v.map(|n| {
        if let Some(i) = n.as_i64() {
            i
        } else if n.as_u64().is_some() {
            i64::MAX
        } else {
            let f = n.as_f64().unwrap_or(0.0);
            if f.is_nan() { 0 } else { f as i64 }
        }
    }))
}

/// The mode, isolation and network choices, shared with the CLI and the daemon.
pub use caesar_proto::kinds::{IsolationPref as Isolation, Mode, NetworkPref as Network};

/// A task budget: a duration string or a number of milliseconds.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(untagged)]
pub enum Timeout {
    /// Milliseconds.
    Millis(u64),
    /// A duration such as "90s", "10m", "1h30m" or "1500ms" (a bare number is seconds).
    Text(String),
}

/// `caesar_delegate` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DelegateParams {
    /// The task for the sub-agent, as a clear, self-contained instruction: it has no access to this conversation.
    pub objective: String,
    /// Name of a configured role (see caesar_list_roles) used to pick an agent along its fallback chain and to fill in defaults for mode, isolation and timeout. Ignored for the agent choice when `agent` is also given, but its defaults still apply.
    #[serde(default)]
    pub role: Option<String>,
    /// Explicit provider id (see caesar_list_agents), e.g. "codex", "opencode", "copilot", "claude". Takes precedence over the agent `role` would pick. With neither, the first installed and allowed agent of the default role (the config's `default` role, else every known agent: [[agent]] entries, then claude, codex, gemini, ...) is picked and named in `warnings.agent_choice`.
    #[serde(default)]
    pub agent: Option<String>,
    /// "read-only" forbids the agent from changing files; "write" allows edits. Defaults to the role's mode, then the project policy's default_mode (read-only unless configured): only a write task gets a worktree and a branch.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// "worktree" runs the agent on a disposable git branch whose work is inspected with caesar_diff and landed with caesar_apply; "inplace" runs directly in the workspace; "auto" (default) picks from the mode and git availability.
    #[serde(default)]
    pub isolation: Option<Isolation>,
    /// Whether the sub-agent needs network access. "auto" (default) opens it where the agent allows and warns where it cannot; "on" fails the delegation when the agent cannot provide it; "off" closes it where caesar knows how.
    #[serde(default)]
    pub network: Option<Network>,
    /// Freeform background the sub-agent needs: relevant code, prior findings, links. Inline the content, not a file path.
    #[serde(default)]
    pub context: Option<String>,
    /// Explicit dos and don'ts the sub-agent must respect.
    #[serde(default)]
    pub constraints: Option<Vec<String>>,
    /// How to judge the task successful; included in the sub-agent's brief.
    #[serde(default)]
    pub acceptance_criteria: Option<Vec<String>>,
    /// Model to request from the provider, if it supports choosing one.
    #[serde(default)]
    pub model: Option<String>,
    /// Maximum time budget before the task is aborted: "10m", "90s", "1h", or a number of milliseconds. Defaults to the role's or policy's timeout.
    #[serde(default)]
    pub timeout: Option<Timeout>,
    /// Enable the MCP back-channel for this task, if the agent can load an MCP server: the sub-agent can then ask you questions (see pending_questions in caesar_status/caesar_await, answer with caesar_answer). Off by default.
    #[serde(default)]
    pub channel: Option<bool>,
    /// A provider session to continue (the session_id a previous task of the same agent reported), so the agent keeps its earlier conversation.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Reasoning effort to request from the provider, where it supports one (e.g. "low", "medium", "high").
    #[serde(default)]
    pub effort: Option<String>,
    /// Limits of this task (over the role's and the config's [budget]): at one, the agent is asked to stop and hand back what it has, and the report is `partial` with a `budget` finding. Every limit must be above zero.
    #[serde(default)]
    pub budget: Option<BudgetParam>,
    /// What happens when an auth, quota or network blocker stops the agent: "relay" (the default: as "fallback" when nothing changed; a worktree task that changed files is continued by the next agent of the role's chain in the same worktree, under the same task_id, with a handoff brief of the git-checked work so far), "fallback" (only before it changed anything: the next installed, allowed agent of the role's chain takes over under the same task_id, with `attempts` listed; with none, a quota that says when it lifts parks the task), "park" (a quota that says when it lifts, before the deadline, parks the task: status pending with `parked_until`, then the same agent resumes its session; else fall back) or "fail".
    #[serde(default)]
    pub on_blocker: Option<String>,
    /// The directory the sub-agent works in. Defaults to the server's root (its --root, else the client's MCP roots, else its working directory); a different directory is accepted with a workspace_warning.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Commands caesar runs (with `sh -c`) in the task's workspace or worktree after the agent ends, e.g. ["cargo test -q"]; their outcome is the report's `verification`, and a report claiming success while one fails gets report_status failed and a high finding. Defaults to the role's `verify`.
    #[serde(default)]
    pub verify: Option<Vec<String>>,
    /// Fan out: one task per agent on the same objective, each in a worktree of its own (2-8 distinct provider ids; instead of `agent`). Returns a group_id: caesar_await it for every member and a side-by-side comparison (status, verification, files and lines changed, usage, overlap between diffs).
    #[serde(default)]
    pub agents: Option<Vec<String>>,
    /// Fan out: N tasks (2-8) of the same agent or role on the same objective, each in a worktree of its own, as one group.
    #[serde(default)]
    pub attempts: Option<u32>,
    /// Where the task runs: "local" (this machine) or "kubernetes" (a Job on the cluster of the project's `[runner.kubernetes]`). Defaults to the role's `runner`, else the project's `[runner] kind`.
    #[serde(default)]
    pub runner: Option<String>,
    /// Stacked tasks: ids of tasks (of the same repository) this one builds on. It waits (status pending, phase `waiting`) until every one has ended, then starts in a worktree whose base is their results merged (use mode "write" or isolation "worktree"). A conflict between the parents' results fails it, naming the paths.
    #[serde(default)]
    pub depends_on: Option<Vec<String>>,
    /// With depends_on: what a parent that fails or is cancelled does to this task: "cancel" (default: it is cancelled, saying which parent) or "run" (it runs on what the other parents made).
    #[serde(default)]
    pub on_parent_failure: Option<String>,
    /// Continue this finished task (its task_id) in its own worktree and branch: its changes are there, its agent's session is resumed where the agent can, and the new task's diff is the whole work since the first task's base. `objective` says what to do next; the workspace, agent, mode and isolation are the source's. Refused for a task still running (use caesar_steer), applied or discarded, or already continued (continue the newest).
    #[serde(default)]
    pub continue_from: Option<String>,
    /// A review loop (write tasks only): the agent, or the role, that reviews the result. When the worker's run succeeds (and its verification passes), caesar runs this reviewer read-only in a worktree of its own that holds the worker's result (from a role: its first agent of another model family than the worker's); its findings, anchored to file:line and the hunk they concern, go back to the worker as a continuation in the same worktree, until the reviewer approves or `review_rounds` is reached (then the worker's report is partial with the open findings). Every run of the loop is a task of one group (the returned group_id).
    #[serde(default)]
    pub review_by: Option<String>,
    /// With review_by: the most review rounds, 1 to 5 (default 3).
    #[serde(default)]
    pub review_rounds: Option<u32>,
    /// The agent that takes over when an auth, quota or network blocker or the budget stops this one (instead of the role's chain): it goes on in the same worktree, under the same task_id, with a handoff brief. Checked now: an agent that is not installed, not allowed, or the task's own is refused.
    #[serde(default)]
    pub relay_to: Option<String>,
    /// Fork a task instead of starting from the repository's HEAD: the new task runs in a new worktree that starts with this task's files (a worktree task's) as they were at event `fork_at`, and its brief names that task, its objective and the point; `objective` says what to do from there. Mode write and isolation worktree; `agent` defaults to the source's.
    #[serde(default)]
    pub fork_from: Option<String>,
    /// With `fork_from`: the event (its seq, as caesar_logs shows it) whose files the fork starts with; the source's latest state when omitted.
    #[serde(default)]
    pub fork_at: Option<u64>,
}

/// A task's limits for `caesar_delegate`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct BudgetParam {
    /// Input plus output tokens, from the agent's usage events.
    #[serde(default)]
    pub tokens: Option<i64>,
    /// US dollars, where the provider reports a cost.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Wall time from the agent's start, in milliseconds.
    #[serde(default)]
    pub wall_ms: Option<i64>,
    /// The agent's replies.
    #[serde(default)]
    pub turns: Option<i64>,
}

/// `caesar_await` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AwaitParams {
    /// One or more task_id values previously returned by caesar_delegate, or a group_id (all its tasks, with their comparison).
    pub task_ids: Vec<String>,
    /// How long to wait, in milliseconds. Defaults to 30000 (30 s); values above 600000 (10 min) are clamped to it, zero or negative values fall back to the default.
    #[serde(default, deserialize_with = "lenient_int")]
    #[schemars(with = "Option<i64>")]
    pub timeout_ms: Option<i64>,
    /// Return as soon as an awaited task asks a question or hits a blocker (auth, rate limit, permission), instead of waiting out timeout_ms while it waits on you. Defaults to true.
    #[serde(default)]
    pub wake_on_attention: Option<bool>,
}

/// Parameters of the tools that take one task.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct TaskParams {
    /// The task_id returned by caesar_delegate.
    pub task_id: String,
}

/// `caesar_logs` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct LogsParams {
    /// The task_id returned by caesar_delegate.
    pub task_id: String,
    /// Return the sub-agent's raw CLI output (stdout and stderr, interleaved) instead of normalized events.
    #[serde(default)]
    pub raw: Option<bool>,
    /// Maximum number of most-recent normalized events to return. Ignored when raw is true. Defaults to 50; clamped to 1..=1000.
    #[serde(default, deserialize_with = "lenient_int")]
    #[schemars(with = "Option<i64>")]
    pub limit: Option<i64>,
    /// Raw mode: resume reading from this character offset of the raw output (the value a truncated answer's hint gives). Without it, the most recent output is returned.
    #[serde(default, deserialize_with = "lenient_int")]
    #[schemars(with = "Option<i64>")]
    pub start_char: Option<i64>,
    /// Raw mode: the most characters of output to return. Defaults to, and is clamped to, the server's response cap (20000 unless configured).
    #[serde(default, deserialize_with = "lenient_int")]
    #[schemars(with = "Option<i64>")]
    pub max_chars: Option<i64>,
}

/// `caesar_diff` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DiffParams {
    /// The task_id returned by caesar_delegate.
    pub task_id: String,
    /// Resume reading the patch from this character offset (the value a truncated answer's hint gives).
    #[serde(default, deserialize_with = "lenient_int")]
    #[schemars(with = "Option<i64>")]
    pub start_char: Option<i64>,
    /// The most characters of patch to return. Defaults to, and is clamped to, the server's response cap (20000 unless configured).
    #[serde(default, deserialize_with = "lenient_int")]
    #[schemars(with = "Option<i64>")]
    pub max_chars: Option<i64>,
}

/// `caesar_answer` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AnswerParams {
    /// The task_id returned by caesar_delegate.
    pub task_id: String,
    /// The pending question's id, as surfaced by caesar_status or caesar_await (pending_questions).
    pub question_id: String,
    /// The answer to hand back to the sub-agent. For a permission (kind `permission` in pending_questions): the `id` of one of its option_details (or its kind), optionally followed by `: ` and a reason the agent reads, e.g. `deny: use make -n first`; an option not offered is refused with the valid ones.
    pub answer: String,
}

/// `caesar_steer` parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SteerParams {
    /// The task_id returned by caesar_delegate.
    pub task_id: String,
    /// What the running sub-agent should know, in words it reads as a message from you (at most 64 KiB).
    pub text: String,
    /// End the sub-agent's running turn first, then say it (default false: it hears it without being stopped).
    #[serde(default)]
    pub interrupt: bool,
}

/// Parameters of the list tools: none.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct NoParams {}

/// `caesar_describe_agent` parameters.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DescribeAgentParams {
    /// The agent id, as caesar_list_agents shows it (e.g. codex, claude, or a configured [[agent]]).
    pub agent: String,
}

//! What a caller asks of a delegation, before anything is resolved.
//!
//! Its own module so that both the engine and the resolver use it
//! without depending on each other.

/// What a caller asks of the engine's delegation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DelegateInput {
    pub objective: String,
    pub agent: Option<String>,
    pub role: Option<String>,
    pub mode: Option<String>,
    pub isolation: Option<String>,
    pub network: Option<String>,
    pub context: String,
    pub constraints: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub model: Option<String>,
    pub timeout_ms: Option<u64>,
    pub channel: bool,
    pub workspace: String,
    pub session_id: Option<String>,
    pub effort: Option<String>,
    pub depth: u32,
    /// Limits of this delegation (issue 17), over the role's and `[budget]`.
    pub budget: Option<crate::lifecycle::Limits>,
    /// `fallback` or `fail` when a blocker stops the agent; the role's otherwise.
    pub on_blocker: Option<String>,
    /// Verification commands for this delegation; empty for the role's.
    pub verify: Vec<String>,
    /// `local` or `kubernetes` (issue 16), over the role's and `[runner] kind`.
    pub runner: Option<String>,
    /// Issue 32 (stacked tasks): the tasks this one builds on.
    pub depends_on: Vec<String>,
    /// Issue 32: `cancel` (the default) or `run` when a parent fails.
    pub on_parent_failure: Option<String>,
    /// Who delegates, for the recursion rule (issue 30): the daemon's word
    /// from the caller's processes, never the request's.
    #[serde(default)]
    pub host: Host,
    /// Issue 31: the finished task this one continues in its worktree
    /// (`engine/continuation.rs`); never stored in a fallback's request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continue_from: Option<String>,
    /// Issue 32: the agent or role that reviews a write task's result
    /// (`engine/review.rs`); never stored in a fallback's request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_by: Option<String>,
    /// Issue 32: the most review rounds (default 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_rounds: Option<u32>,
    /// Set by the daemon only (the review loop): the id the task gets, chosen
    /// and stored before it is delegated, so that a round redone after a
    /// crash finds its task instead of starting a second one.
    #[serde(skip)]
    pub chosen_id: Option<String>,
    /// Issue 31: the agent that takes over when a blocker or the budget
    /// stops this one (instead of the role's chain), checked at delegation
    /// (`engine/relay.rs`); never stored in a fallback's request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay_to: Option<String>,
}

/// The program a delegation comes from, as far as the recursion rule cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Host {
    /// Not known (the HTTP endpoint, an ancestry /proc would not tell, a
    /// request recorded before issue 30): treated as Claude Code could be.
    #[default]
    Unknown,
    /// A Claude Code session is among the caller's processes, or the caller
    /// is a task whose agent is claude.
    ClaudeCode,
    /// Something else: a terminal, a script, another agent's task.
    Other,
}

impl Host {
    /// Whether delegating to claude from here could be Claude Code calling itself.
    pub fn may_be_claude_code(self) -> bool {
        self != Host::Other
    }
}

//! The tools' results: `structuredContent` is one of these, the text block
//! is the same JSON, and each tool's output schema is generated from its
//! type. Field names follow caesar's TypeScript MCP server; empty fields are
//! omitted.

use std::collections::BTreeMap;

use caesar_proto::pb;
use rmcp::schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// Fields every capped answer may carry.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Shaping {
    /// True when the answer was cut to fit the response cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// How to get the rest when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// A question a sub-agent asked and is waiting on.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct PendingQuestion {
    /// Pass it to caesar_answer.
    pub question_id: String,
    /// The question.
    pub question: String,
    /// The choices the agent offered, if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// When it was asked (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked_at: Option<String>,
    /// `question` (asked through ask_orchestrator) or `permission` (the agent's CLI asks to use a
    /// tool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// For a permission: the tool it is asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For a permission: the protocol's kind of tool (execute, edit, read, …), where it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_kind: Option<String>,
    /// For a permission: the tool's whole input (for a shell command, the whole command).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
    /// For a permission: the options offered. Answer with one's `id` (or its `kind`), optionally
    /// followed by `: ` and a reason the agent reads (for a reject).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub option_details: Vec<QuestionOption>,
}

/// One option of a permission request.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct QuestionOption {
    /// What caesar_answer takes.
    pub id: String,
    /// What the agent shows a person.
    pub label: String,
    /// allow_once, allow_always, reject_once or reject_always.
    pub kind: String,
}

/// A snapshot of one task, for caesar_status and caesar_await.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct TaskResult {
    /// The task's id.
    pub task_id: String,
    /// Other unapplied worktree tasks of the same repository (or "uncommitted", your own uncommitted changes) that change the same files; hunk_paths are those where the same lines change, so applying one breaks the other's apply.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts_with: Vec<OverlapOut>,
    /// How old the conflict radar's answer is, in ms (absent until the radar has read the task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radar_age_ms: Option<u64>,
    /// The process outcome: pending, running, succeeded, failed, cancelled or timed_out.
    pub status: String,
    /// What became of the task, weighing the process outcome with the report, the blocker caesar recognized, the verification and the questions waiting: succeeded, `blocked: <kind>` (auth, rate_limit, permission, network, or reported by the agent), failed, verification failed, needs answer, cancelled, timed out, `parked until <time>`, running or pending. Read this first: a task blocked by a 401 whose process exited 0 has status succeeded and verdict `blocked: auth`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// The agent running the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The role it was delegated through, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// read-only or write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// inplace or worktree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// The model requested, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When the task was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When the agent started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the task ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Time spent so far, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// The agent's exit code, once it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// caesar_await only: true while the task is still running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<bool>,
    /// The sub-agent's own verdict once it reported: success, partial, failed or blocked. Check it as well as status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_status: Option<String>,
    /// Where the report came from: channel, native, file, fenced, embedded or synthesized.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_source: Option<String>,
    /// caesar_await only: the normalized report (summary, changes, findings, questions, next_steps...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Value>,
    /// The last normalized event recorded so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event: Option<Value>,
    /// How many events were recorded (see caesar_logs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_count: Option<u64>,
    /// Questions the sub-agent asked and is waiting on: answer with caesar_answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_questions: Vec<PendingQuestion>,
    /// The blocker the task hit, if any: auth, rate_limit, permission or network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
    /// Why the task failed to run, when caesar itself knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The provider session, to continue it with caesar_delegate's session_id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The last characters of the agent's reply so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// How old output_tail is, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_age_ms: Option<u64>,
    /// The agents tried before the current one, oldest first, when a blocker made caesar fall back along the role's chain: each with its own task_id (for caesar_logs), agent, stopped_by (auth, rate_limit, network) and message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Value>,
    /// The task id of the attempt running now for this task, when caesar fell back to another agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_task_id: Option<String>,
    /// The task this one continues in the same worktree (caesar_delegate's continue_from), and the task that continued this one (which holds the worktree now: continue, apply or discard that one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continues: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continued_by: Option<String>,
    /// The task's limits and what it used (tokens, cost_usd, turns, wall_ms), and `exceeded`: the limit that stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Value>,
    /// While the task waits for the provider's quota to lift (status pending): when the same agent resumes it (RFC 3339). Cancel it with caesar_cancel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_until: Option<String>,
    /// What the provider said when it parked the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_reason: Option<String>,
    /// A stacked task's parents (depends_on), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// Where a pending task stands: preparing, queued, starting, parked, or waiting (for its parents).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Set when a parent's result moved after this task took it: "<parent id> <its new commit>".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// The review loop (review_by) this task is a run of, in words: its round, part and where the loop stands, and its group (caesar_await the group_id for every round side by side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<String>,
    /// The review loop's findings, every round's: round, reviewer_task_id, file, line, hunk, severity, title, detail and state (open, stale: its hunk changed since and it was not sent, sent: to the worker's next run, resolved).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub review_findings: Vec<Value>,
}

impl TaskResult {
    /// Maps the daemon's view. `for_await` adds `pending` and the report.
    pub fn from_view(t: &pb::TaskView, for_await: bool) -> TaskResult {
        let json = |s: &str| serde_json::from_str::<Value>(s).ok();
        let finished = !matches!(t.status(), pb::TaskStatus::Pending | pb::TaskStatus::Running);
        TaskResult {
            conflicts_with: overlaps_out(&t.conflicts_with),
            radar_age_ms: t.radar_age_ms,
            task_id: t.task_id.clone(),
            status: pb::TaskStatus::spell(t.status).to_owned(),
            verdict: non_empty(&pb::Verdict::label_of(t.verdict, &t.verdict_detail)),
            agent: non_empty(&t.agent),
            role: non_empty(&t.role),
            mode: non_empty(&t.mode),
            isolation: non_empty(&t.isolation),
            model: non_empty(&t.model),
            created_at: non_empty(&t.created_at),
            started_at: non_empty(&t.started_at),
            ended_at: non_empty(&t.finished_at),
            elapsed_ms: (t.elapsed_ms > 0).then_some(t.elapsed_ms),
            exit_code: t.exit_code,
            pending: for_await.then_some(t.pending || !finished),
            report_status: non_empty(&t.report_status),
            report_source: non_empty(&t.report_source),
            report: if for_await { json(&t.report_json) } else { None },
            last_event: json(&t.last_event_json),
            event_count: (t.event_count > 0).then_some(t.event_count),
            pending_questions: t
                .pending_questions
                .iter()
                .map(|q| PendingQuestion {
                    question_id: q.question_id.clone(),
                    question: q.question.clone(),
                    options: q.options.clone(),
                    asked_at: non_empty(&q.asked_at),
                    kind: non_empty(pb::QuestionKind::spell(q.kind)),
                    tool: non_empty(&q.tool),
                    tool_kind: non_empty(&q.tool_kind),
                    input: json(&q.input_json),
                    option_details: q
                        .option_details
                        .iter()
                        .map(|o| QuestionOption { id: o.id.clone(), label: o.label.clone(), kind: o.kind.clone() })
                        .collect(),
                })
                .collect(),
            blocker: non_empty(pb::BlockerKind::spell(t.blocker)),
            error: non_empty(&t.error),
            session_id: non_empty(&t.session_id),
            output_tail: non_empty(&t.output_tail),
            output_age_ms: if t.output_tail.is_empty() { None } else { t.output_age_ms },
            attempts: t
                .attempts
                .iter()
                .map(|a| {
                    serde_json::json!({"task_id": a.task_id, "agent": a.agent, "stopped_by": pb::BlockerKind::spell(a.stopped_by), "message": a.message, "files_changed": a.files_changed, "relayed": a.relayed})
                })
                .collect(),
            current_task_id: non_empty(&t.current_task_id),
            continues: non_empty(&t.continues),
            continued_by: non_empty(&t.continued_by),
            parked_until: non_empty(&t.parked_until),
            parked_reason: non_empty(&t.parked_reason),
            parents: t.parents.clone(),
            phase: non_empty(pb::Phase::spell(t.phase)),
            stale: non_empty(&t.stale),
            review: non_empty(&t.review),
            review_findings: t
                .review_findings
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "round": f.round, "reviewer_task_id": f.reviewer_task_id, "file": f.file, "line": f.line,
                        "hunk": f.hunk, "severity": f.severity, "title": f.title, "detail": f.detail, "state": f.state,
                    })
                })
                .collect(),
            budget: t.budget.as_ref().map(|b| {
                let l = b.limits.unwrap_or_default();
                serde_json::json!({
                    "limits": {"tokens": l.tokens, "cost_usd": l.cost_usd, "wall_ms": l.wall_ms, "turns": l.turns},
                    "used": {"tokens": b.tokens, "cost_usd": b.cost_usd, "turns": b.turns, "wall_ms": b.wall_ms},
                    "exceeded": non_empty(&b.exceeded),
                })
            }),
        }
    }
}

/// `caesar_status` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct StatusOutput {
    /// The task.
    #[serde(flatten)]
    pub task: TaskResult,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// Where two pieces of work touch the same files (issue 17, conflict radar).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct OverlapOut {
    /// The other task, or "uncommitted" for your own uncommitted changes.
    pub task_id: String,
    /// Paths both change.
    pub paths: Vec<String>,
    /// Paths where both change the same lines: applying one breaks the other's apply.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hunk_paths: Vec<String>,
}

/// Overlaps from the wire.
pub fn overlaps_out(list: &[pb::Overlap]) -> Vec<OverlapOut> {
    list.iter()
        .map(|o| OverlapOut { task_id: o.task_id.clone(), paths: o.paths.clone(), hunk_paths: o.hunk_paths.clone() })
        .collect()
}

/// One member of a fan-out group, compared with the others.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct GroupMemberOut {
    pub task_id: String,
    pub agent: String,
    /// The process outcome.
    pub status: String,
    /// The agent's verdict (after verification).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_status: Option<String>,
    /// passed, failed, timed_out, cancelled or error; absent when not verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<String>,
    pub files_changed: u32,
    pub lines_added: u64,
    pub lines_removed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Other members whose diffs touch the same files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<OverlapOut>,
}

/// A fan-out group's side-by-side comparison.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct GroupOut {
    pub objective: String,
    /// True when every member has ended.
    pub done: bool,
    pub members: Vec<GroupMemberOut>,
}

impl GroupOut {
    /// A group summary from the wire.
    pub fn from_pb(g: &pb::GroupSummary) -> GroupOut {
        GroupOut {
            objective: g.objective.clone(),
            done: g.done,
            members: g
                .members
                .iter()
                .map(|m| GroupMemberOut {
                    task_id: m.task_id.clone(),
                    agent: m.agent.clone(),
                    status: pb::TaskStatus::spell(m.status).to_owned(),
                    report_status: non_empty(&m.report_status),
                    verification: non_empty(&m.verification),
                    files_changed: m.files_changed,
                    lines_added: m.lines_added,
                    lines_removed: m.lines_removed,
                    input_tokens: m.input_tokens,
                    output_tokens: m.output_tokens,
                    cost_usd: m.cost_usd,
                    duration_ms: m.duration_ms,
                    summary: non_empty(&m.summary),
                    overlaps: overlaps_out(&m.overlaps),
                })
                .collect(),
        }
    }
}

/// `caesar_await` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AwaitOutput {
    /// Every awaited task, keyed by task_id.
    pub tasks: BTreeMap<String, TaskResult>,
    /// For each group_id awaited: its members side by side.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, GroupOut>,
    /// True when the wait ended early because a task asked a question or hit a blocker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub woke_early: Option<bool>,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// `caesar_delegate` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DelegateOutput {
    /// Pass it to caesar_await, caesar_status, caesar_logs, caesar_cancel. For a group: its first task.
    pub task_id: String,
    /// A fan-out group (`agents` or `attempts`): pass it to caesar_await for every member and their comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// A fan-out group's task ids, one per member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_ids: Option<Vec<String>>,
    /// The agent picked.
    pub agent: String,
    /// The role delegated through, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// read-only or write.
    pub mode: String,
    /// inplace, worktree or auto.
    pub isolation: String,
    /// Whether the agent has network access.
    pub network: bool,
    /// The model requested, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The workspace delegated from.
    pub workspace: String,
    /// A worktree task: the worktree the sub-agent works in (review with caesar_diff).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// The task's time budget, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// "running": the task goes on; call caesar_await for its result.
    pub status: String,
    /// Resolution warnings, e.g. workspace_warning, network_warning, model_warning.
    #[serde(flatten)]
    pub warnings: BTreeMap<String, String>,
}

/// `caesar_logs` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct LogsOutput {
    /// The task.
    pub task_id: String,
    /// Whether this is raw output (text) or normalized events.
    pub raw: bool,
    /// Events mode: how many events the task has in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_events: Option<u64>,
    /// Events mode: the most recent events, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<Value>>,
    /// Raw mode: the output window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Raw mode: the character offset of `text` in the raw output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_char: Option<u64>,
    /// Raw mode: the length of the whole raw output, in characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_chars: Option<u64>,
    /// Raw mode: where to continue reading (pass it as start_char), when more follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start_char: Option<u64>,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// One changed file.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DiffFile {
    /// Path relative to the repository.
    pub path: String,
    /// added, modified, deleted or renamed.
    pub status: String,
    /// Lines added.
    pub additions: u64,
    /// Lines deleted.
    pub deletions: u64,
}

/// `caesar_diff` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DiffOutput {
    /// The task.
    pub task_id: String,
    /// True when there is nothing to apply.
    pub is_empty: bool,
    /// Changed files.
    pub files: Vec<DiffFile>,
    /// The unified patch (the window from start_char when truncated).
    pub patch: String,
    /// The character offset of `patch` in the whole patch, when not 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_char: Option<u64>,
    /// The length of the whole patch, in characters.
    pub total_chars: u64,
    /// Where to continue reading (pass it as start_char), when more follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start_char: Option<u64>,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// `caesar_cancel` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct CancelOutput {
    /// The task.
    pub task_id: String,
    /// False when the task had already finished (a no-op).
    pub cancelled: bool,
    /// The task's final status.
    pub status: String,
}

/// `caesar_apply` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ApplyOutput {
    /// The task.
    pub task_id: String,
    /// Whether the patch was applied.
    pub applied: bool,
    /// Files with conflicts ("path: why"), instead of a partial apply.
    pub conflicts: Vec<String>,
    /// The task's changes were already in the main tree: nothing was done.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already_applied: bool,
    /// What happened, for people.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// `caesar_steer` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SteerOutput {
    /// The task.
    pub task_id: String,
    /// The steer's id, as the `steer` event in caesar_logs names it once the agent was given it.
    pub steer_id: i64,
    /// How it reaches the agent: stdin_message or interrupt_then_stdin_message (claude), turn_steer or interrupt_then_new_turn (codex), next_prompt or cancel_then_prompt (ACP agents).
    pub route: String,
    /// The task has not started yet: the steer goes to its agent once it runs.
    pub queued_for_start: bool,
}

/// `caesar_answer` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AnswerOutput {
    /// The task.
    pub task_id: String,
    /// The question answered.
    pub question_id: String,
    /// True.
    pub answered: bool,
}

/// Whether policy allows delegating to an agent now.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AgentPolicy {
    /// Allowed now.
    pub allowed: bool,
    /// Why not, when refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One agent provider.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AgentOutput {
    /// The id to pass as caesar_delegate's agent.
    pub id: String,
    /// A readable name.
    pub display_name: String,
    /// The CLI binary.
    pub bin: String,
    /// Whether the CLI is installed here.
    pub installed: bool,
    /// Where it is installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Capability flags (native read-only mode, structured output, sessions, model selection...).
    pub capabilities: Value,
    /// The default model configured for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
    /// Whether policy allows delegating to it now.
    pub policy: AgentPolicy,
    /// The CLI's version, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// builtin or generic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What holds the agent back now, from caesar's quota ledger (e.g. "near limit until 17:40 UTC
    /// (claude rate_limit_event)"); absent when it has headroom. A role's pick skips such agents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headroom: Option<String>,
    /// What caesar observed the agent use in its quota window (e.g. "observed: 3 tasks of 40, 412k
    /// tokens of 500k in the last 5 h"); absent when it used nothing. Never holds it back alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_usage: Option<String>,
}

impl AgentOutput {
    /// Maps the daemon's agent description.
    pub fn from_pb(a: &pb::AgentInfo) -> AgentOutput {
        AgentOutput {
            id: a.id.clone(),
            display_name: a.display_name.clone(),
            bin: a.bin.clone(),
            installed: a.installed,
            path: non_empty(&a.path),
            capabilities: serde_json::from_str(&a.capabilities_json)
                .unwrap_or_else(|_| Value::Object(Default::default())),
            default_model: non_empty(&a.default_model),
            policy: AgentPolicy { allowed: a.allowed, reason: non_empty(&a.refusal) },
            version: non_empty(&a.version),
            kind: non_empty(&a.kind),
            headroom: non_empty(&a.headroom),
            observed_usage: non_empty(&a.observed_usage),
        }
    }
}

/// `caesar_list_agents` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListAgentsOutput {
    /// Every agent caesar knows of, installed or not.
    pub agents: Vec<AgentOutput>,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// `caesar_list_roles` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListRolesOutput {
    /// Roles: name, purpose, mode, isolation, network, timeout_ms, model, agents (fallback order), would_pick, reason, skipped.
    pub roles: Vec<Value>,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

/// `caesar_describe_agent` result.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DescribeAgentOutput {
    /// The agent, as caesar_list_agents shows it.
    pub agent: AgentOutput,
    /// The options caesar_delegate accepts for it: mode, model ({"free": true} or null), effort ({"allowed": [...]} or null), session_id (whether sessions resume).
    pub options: Value,
    /// Truncation marks.
    #[serde(flatten)]
    pub shaping: Shaping,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_result_spells_the_wire_enums_as_before_and_an_unknown_one_unrecognized() {
        let t = pb::TaskView {
            task_id: "t_1".into(),
            status: pb::TaskStatus::Running.into(),
            blocker: pb::BlockerKind::Network.into(),
            attempts: vec![pb::Attempt { stopped_by: pb::BlockerKind::RateLimit.into(), ..Default::default() }],
            pending_questions: vec![pb::PendingQuestion {
                kind: pb::QuestionKind::Question.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let v = serde_json::to_value(TaskResult::from_view(&t, true)).unwrap();
        assert_eq!((v["status"].as_str(), v["blocker"].as_str()), (Some("running"), Some("network")), "{v}");
        assert_eq!(v["attempts"][0]["stopped_by"], "rate_limit", "{v}");
        assert_eq!(v["pending_questions"][0]["kind"], "question", "{v}");
        assert_eq!(v["pending"], true, "{v}");
        let newer = pb::TaskView { status: 42, blocker: 0, ..t };
        let v = serde_json::to_value(TaskResult::from_view(&newer, true)).unwrap();
        assert_eq!(v["status"], "unrecognized", "{v}");
        assert!(v.get("blocker").is_none(), "no blocker: no field, as before: {v}");
    }
}

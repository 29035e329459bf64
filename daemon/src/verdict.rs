//! One verdict per task (issue 30, item 1): what became of it, for people.
//!
//! A task's `status` is its process outcome, as seed 000 defines it: a
//! codex task stopped by a 401 whose process then exits 0 is `succeeded`.
//! The verdict weighs that outcome with the report, the blocker caesar
//! recognized, caesar's own verification and the questions waiting, once,
//! in the engine: every face (the CLI, the dashboard, notifications, MCP's
//! `verdict`) shows this and never recomputes it. `status` itself keeps its
//! meaning on the wire.
//!
//! Pure: [`of`] reads only its [`Inputs`].

use crate::oacp::BlockerKind;
use crate::store::TaskStatus;

/// What became of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not started yet (queued, preparing, starting).
    Pending,
    /// The agent works.
    Running,
    /// A question or permission waits for an answer; or the ended task's
    /// report asks questions it could not get answered.
    NeedsAnswer,
    /// Waiting for a provider's quota to lift, then resuming.
    Parked,
    Succeeded,
    /// A blocker stopped the work: the kind caesar recognized, or none when
    /// the agent's own report says it was blocked.
    Blocked(Option<BlockerKind>),
    Failed,
    /// The agent ended, and caesar's `verify` commands did not pass.
    VerificationFailed,
    Cancelled,
    TimedOut,
}

/// A verdict and what it names (see [`Verdict`]'s wire detail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskVerdict {
    pub verdict: Verdict,
    /// The blocker kind (`reported` for the agent's own), the RFC 3339 time
    /// a parked task resumes, the verification's outcome, how many questions
    /// wait, or `partial` for a partly done success; empty otherwise.
    pub detail: String,
}

impl Default for TaskVerdict {
    fn default() -> TaskVerdict {
        TaskVerdict { verdict: Verdict::Pending, detail: String::new() }
    }
}

impl TaskVerdict {
    fn bare(verdict: Verdict) -> TaskVerdict {
        TaskVerdict { verdict, detail: String::new() }
    }

    /// The word JSON spells it with (`blocked`, `verification_failed`, …).
    pub fn word(&self) -> &'static str {
        match self.verdict {
            Verdict::Pending => "pending",
            Verdict::Running => "running",
            Verdict::NeedsAnswer => "needs_answer",
            Verdict::Parked => "parked",
            Verdict::Succeeded => "succeeded",
            Verdict::Blocked(_) => "blocked",
            Verdict::Failed => "failed",
            Verdict::VerificationFailed => "verification_failed",
            Verdict::Cancelled => "cancelled",
            Verdict::TimedOut => "timed_out",
        }
    }

    /// As people read it: `blocked: auth`, `parked until …`, ….
    pub fn label(&self) -> String {
        caesar_proto::pb::Verdict::parse(self.word()).map(|v| v.label(&self.detail)).unwrap_or_default()
    }
}

/// What the verdict is computed from.
#[derive(Debug, Clone, Default)]
pub struct Inputs<'a> {
    /// The process outcome.
    pub status: Option<TaskStatus>,
    /// The report's status (`success`, `partial`, `failed`, `blocked`), once it has one.
    pub report_status: Option<&'a str>,
    /// How many questions the ended task's report lists.
    pub report_questions: usize,
    /// The blocker caesar recognized in the agent's output.
    pub blocker: Option<BlockerKind>,
    /// The outcome of caesar's `verify` commands (`passed`, `failed`, `timed_out`, …).
    pub verification: Option<&'a str>,
    /// Questions and permissions waiting for an answer now; for an ended
    /// task, those it asked that were never answered.
    pub open_questions: usize,
    /// While parked at a quota: when it resumes (RFC 3339).
    pub parked_until: Option<String>,
}

/// The verdict. The order of the rules is the point:
///
/// - A task still going is parked, waits on an answer, runs or waits to start.
/// - Cancelled is the person's own decision, and timed out caesar's stop:
///   they say why it ended, whatever the agent said after.
/// - A recognized blocker (auth, quota, permission, network) outranks the
///   exit code: the run could not have done its work.
/// - A verification that did not pass outranks the agent's claim.
/// - A question the agent asked and nobody answered: it needs an answer,
///   whatever it went on to claim.
/// - The agent's report saying blocked (with the questions it could not
///   ask: needs answer) or failed outranks a process that exited 0.
pub fn of(i: &Inputs<'_>) -> TaskVerdict {
    let Some(status) = i.status else { return TaskVerdict::bare(Verdict::Pending) };
    if !status.is_terminal() {
        if let Some(until) = &i.parked_until {
            return TaskVerdict { verdict: Verdict::Parked, detail: until.clone() };
        }
        if i.open_questions > 0 {
            return TaskVerdict { verdict: Verdict::NeedsAnswer, detail: questions(i.open_questions) };
        }
        return TaskVerdict::bare(if status == TaskStatus::Running { Verdict::Running } else { Verdict::Pending });
    }
    match status {
        TaskStatus::Cancelled => return TaskVerdict::bare(Verdict::Cancelled),
        TaskStatus::TimedOut => return TaskVerdict::bare(Verdict::TimedOut),
        _ => {}
    }
    if let Some(kind) = i.blocker {
        return TaskVerdict { verdict: Verdict::Blocked(Some(kind)), detail: kind.as_str().to_owned() };
    }
    if let Some(outcome) = i.verification.filter(|o| *o != "passed") {
        return TaskVerdict { verdict: Verdict::VerificationFailed, detail: outcome.to_owned() };
    }
    if i.open_questions > 0 {
        return TaskVerdict {
            verdict: Verdict::NeedsAnswer,
            detail: format!("{} unanswered", questions(i.open_questions)),
        };
    }
    match i.report_status {
        Some("blocked") if i.report_questions > 0 => {
            TaskVerdict { verdict: Verdict::NeedsAnswer, detail: questions(i.report_questions) }
        }
        Some("blocked") => TaskVerdict { verdict: Verdict::Blocked(None), detail: "reported".to_owned() },
        Some("failed") => TaskVerdict::bare(Verdict::Failed),
        _ if status != TaskStatus::Succeeded => TaskVerdict::bare(Verdict::Failed),
        Some("partial") => TaskVerdict { verdict: Verdict::Succeeded, detail: "partial".to_owned() },
        _ => TaskVerdict::bare(Verdict::Succeeded),
    }
}

fn questions(n: usize) -> String {
    if n == 1 { "1 question".to_owned() } else { format!("{n} questions") }
}

/// The inputs a stored report adds: its status, how many questions it
/// lists and its verification's outcome, read from its body.
pub fn report_inputs(body: &str) -> (usize, Option<String>) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else { return (0, None) };
    let asked = v.get("questions").and_then(|q| q.as_array()).map_or(0, Vec::len);
    let outcome = v.pointer("/verification/outcome").and_then(|o| o.as_str()).map(str::to_owned);
    (asked, outcome)
}

/// The verdict of an engine view: its record, report, questions and park.
/// `unanswered`: for an ended task, the questions it asked that were never
/// answered (a view of an ended task lists none as pending).
pub fn of_view(v: &crate::engine::TaskView, unanswered: usize) -> TaskVerdict {
    let (report_questions, verification) = v.report.as_ref().map(|r| report_inputs(&r.body)).unwrap_or_default();
    of(&Inputs {
        status: Some(v.record.status),
        report_status: v.report.as_ref().map(|r| r.status.as_str()),
        report_questions,
        blocker: v.record.blocker,
        verification: verification.as_deref(),
        open_questions: v.pending_questions.len().max(unanswered),
        parked_until: v.lifecycle.parked.as_ref().map(|(at, _)| crate::clock::rfc3339(*at)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(status: TaskStatus, report: &str) -> Inputs<'_> {
        Inputs { status: Some(status), report_status: Some(report), ..Inputs::default() }
    }

    fn label(i: &Inputs<'_>) -> String {
        of(i).label()
    }

    #[test]
    fn a_clean_success_succeeds() {
        assert_eq!(of(&ended(TaskStatus::Succeeded, "success")), TaskVerdict::bare(Verdict::Succeeded));
        assert_eq!(label(&ended(TaskStatus::Succeeded, "success")), "succeeded");
        assert_eq!(label(&ended(TaskStatus::Succeeded, "partial")), "succeeded (partial)");
    }

    #[test]
    fn a_codex_task_blocked_by_a_401_whose_process_exited_0_is_blocked_auth() {
        let i = Inputs { blocker: Some(BlockerKind::Auth), ..ended(TaskStatus::Succeeded, "blocked") };
        assert_eq!(of(&i).verdict, Verdict::Blocked(Some(BlockerKind::Auth)));
        assert_eq!(label(&i), "blocked: auth");
        // The same 401 where the process exited 1 (claude) reads the same.
        let i = Inputs { status: Some(TaskStatus::Failed), ..i };
        assert_eq!(label(&i), "blocked: auth");
        let quota = Inputs { blocker: Some(BlockerKind::RateLimit), ..ended(TaskStatus::Succeeded, "success") };
        assert_eq!(label(&quota), "blocked: rate_limit", "a blocker outranks the agent's claim");
    }

    #[test]
    fn a_report_saying_blocked_without_a_recognized_blocker_is_blocked_reported() {
        assert_eq!(label(&ended(TaskStatus::Succeeded, "blocked")), "blocked: reported");
    }

    #[test]
    fn an_ended_task_whose_report_asks_questions_needs_an_answer() {
        let i = Inputs { report_questions: 2, ..ended(TaskStatus::Succeeded, "blocked") };
        assert_eq!(of(&i), TaskVerdict { verdict: Verdict::NeedsAnswer, detail: "2 questions".into() });
        assert_eq!(label(&i), "needs answer");
    }

    #[test]
    fn an_ended_task_whose_question_went_unanswered_needs_an_answer_whatever_it_claimed() {
        let i = Inputs { open_questions: 1, ..ended(TaskStatus::Succeeded, "success") };
        assert_eq!(of(&i), TaskVerdict { verdict: Verdict::NeedsAnswer, detail: "1 question unanswered".into() });
        let timed = Inputs { open_questions: 1, ..ended(TaskStatus::TimedOut, "success") };
        assert_eq!(label(&timed), "timed out", "the stop says why it ended");
    }

    #[test]
    fn a_failed_verification_outranks_a_claimed_success() {
        let i = Inputs { verification: Some("failed"), ..ended(TaskStatus::Succeeded, "failed") };
        assert_eq!(of(&i), TaskVerdict { verdict: Verdict::VerificationFailed, detail: "failed".into() });
        assert_eq!(label(&i), "verification failed");
        let timed = Inputs { verification: Some("timed_out"), ..ended(TaskStatus::Succeeded, "success") };
        assert_eq!(of(&timed).verdict, Verdict::VerificationFailed);
        let passed = Inputs { verification: Some("passed"), ..ended(TaskStatus::Succeeded, "success") };
        assert_eq!(of(&passed).verdict, Verdict::Succeeded);
    }

    #[test]
    fn a_failed_process_or_report_fails() {
        assert_eq!(label(&ended(TaskStatus::Failed, "success")), "failed", "the process failed");
        assert_eq!(label(&ended(TaskStatus::Succeeded, "failed")), "failed", "the report says so");
        let none = Inputs { status: Some(TaskStatus::Failed), ..Inputs::default() };
        assert_eq!(label(&none), "failed");
    }

    #[test]
    fn cancelled_and_timed_out_say_why_the_task_ended() {
        let i = Inputs { blocker: Some(BlockerKind::Network), ..ended(TaskStatus::Cancelled, "blocked") };
        assert_eq!(label(&i), "cancelled", "the person stopped it");
        assert_eq!(label(&ended(TaskStatus::TimedOut, "success")), "timed out");
    }

    #[test]
    fn a_task_still_going_is_parked_asks_runs_or_waits() {
        let parked = Inputs {
            status: Some(TaskStatus::Pending),
            parked_until: Some("2026-12-05T14:00:00.000Z".into()),
            open_questions: 1,
            ..Inputs::default()
        };
        assert_eq!(label(&parked), "parked until 2026-12-05T14:00:00.000Z");
        let asking = Inputs { status: Some(TaskStatus::Running), open_questions: 1, ..Inputs::default() };
        assert_eq!(of(&asking), TaskVerdict { verdict: Verdict::NeedsAnswer, detail: "1 question".into() });
        let running = Inputs { status: Some(TaskStatus::Running), ..Inputs::default() };
        assert_eq!(label(&running), "running");
        let pending = Inputs { status: Some(TaskStatus::Pending), ..Inputs::default() };
        assert_eq!(label(&pending), "pending");
        // A blocker seen while it still runs (a permission denial it may get
        // past) is no verdict yet.
        let denied = Inputs { blocker: Some(BlockerKind::Permission), ..running };
        assert_eq!(label(&denied), "running");
    }

    #[test]
    fn the_report_body_gives_its_questions_and_verification() {
        let body =
            r#"{"status":"failed","questions":[{"id":"q1","question":"which?"}],"verification":{"outcome":"failed"}}"#;
        assert_eq!(report_inputs(body), (1, Some("failed".to_owned())));
        assert_eq!(report_inputs("not json"), (0, None));
    }
}

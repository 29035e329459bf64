//! The permission bridge: a CLI's permission prompts become durable questions,
//! and their answers go back on the agent's stdin, exactly once.
//!
//! The design beside its neighbours: `docs/design/sessions.md`.

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::oacp::EventBody;
use crate::provider::{self};
use crate::store::{QuestionRecord, TaskRecord};

use super::*;

/// The permission bridge, a service of the engine: it shares the store, the
/// runner (to answer on the agent's stdin) and the notices.
pub(super) struct Permissions {
    store: Arc<Store>,
    runner: Arc<dyn Runner>,
    notices: super::notifications::Notices,
    /// How long a bridged prompt waits before it is denied.
    timeout: Duration,
}

impl Permissions {
    pub(super) fn new(
        store: Arc<Store>,
        runner: Arc<dyn Runner>,
        notices: super::notifications::Notices,
        timeout: Duration,
    ) -> Permissions {
        Permissions { store, runner, notices, timeout }
    }

    /// A CLI asks whether it may use a tool: the request is kept in the
    /// task's daemon part, out of its agent's reach (for the answer, which
    /// sends back exactly what was asked), the question stored (durably, first), and
    /// a `question` event added to the batch. A request seen again (output
    /// re-read after a restart) is not asked twice.
    pub(super) fn ask(&self, run: &mut Run, ask: provider::PermissionAsk, bodies: &mut Vec<EventBody>) {
        if !run.driver.answers_requests() {
            return;
        }
        let record = self.store.task(&run.id).ok().flatten();
        let provider_id = record.as_ref().map(|r| r.agent.clone()).unwrap_or_default();
        let qid = permission_question_id(&ask.request_id);
        if run.new_questions.iter().any(|q| q.question_id == qid) {
            return;
        }
        match self.store.question(&run.id, &qid) {
            Ok(Some(_)) => return,
            Ok(None) => {}
            Err(e) => {
                warn!(task_id = %run.id, "reading question {qid} failed: {e}");
                return;
            }
        }
        // The request is kept before the question is stored: an answer must
        // always find it.
        let path = run.dir.permission_request(&qid);
        let stored = std::fs::create_dir_all(path.parent().unwrap_or(run.dir.root()))
            .and_then(|()| write_ask(&path, &serde_json::to_vec(&ask).unwrap_or_default()));
        if let Err(e) = stored {
            warn!(task_id = %run.id, "cannot keep the permission request {}: {e}", path.display());
            return;
        }
        // A read-only task never gains write through an answer: caesar refuses itself.
        if let Some(record) = record.as_ref().filter(|r| r.mode == crate::oacp::Mode::ReadOnly)
            && let Some(kind) = ask.kind.as_deref().filter(|k| WRITING_KINDS.contains(k))
        {
            self.refuse_in_read_only(run, record, &ask, kind, bodies);
            return;
        }
        let offers_session = ask.options.iter().any(|o| o.kind == "allow_always");
        let question = if ask.options.is_empty() {
            format!(
                "{provider_id} asks permission to use {}. Answer `allow`, or `deny` followed by a reason for the agent.",
                ask.summary
            )
        } else {
            let offered: Vec<String> = ask.options.iter().map(|o| format!("{} ({})", o.name, o.kind)).collect();
            format!(
                "{provider_id} asks permission ({} tool) to use {}. It offers: {}. Answer `allow`{}, or `deny` \
                 followed by a reason (the agent's protocol carries no reason back; it is kept in the events).",
                ask.kind.as_deref().unwrap_or("other"),
                ask.summary,
                offered.join(", "),
                if offers_session { ", `allow for session`" } else { "" },
            )
        };
        let mut options = vec!["allow".to_owned()];
        if offers_session {
            options.push(ALLOW_FOR_SESSION.to_owned());
        }
        options.push("deny".to_owned());
        let q = QuestionRecord {
            task_id: run.id.clone(),
            question_id: qid.clone(),
            question: question.clone(),
            options: options.clone(),
            asked_ms: now_ms(),
            answer: None,
        };
        // Stored with the batch's events, in one transaction (`Engine::emit`), and shown only then.
        info!(task_id = %run.id, question_id = %qid, tool = %ask.tool_name, "permission prompt bridged");
        bodies.push(EventBody::Question { id: qid, question, options });
        run.new_questions.push(q);
    }

    /// The permission questions of a batch were stored with its events: they show now (the
    /// callers awaiting attention wake), and each is denied if unanswered in time.
    pub(super) fn questions_stored(&self, run: &mut Run, questions: Vec<QuestionRecord>) {
        if questions.is_empty() {
            return;
        }
        for q in &questions {
            run.permission_deadlines.push((q.question_id.clone(), self.deadline(run, q.asked_ms)));
        }
        run.live.attention.send_modify(|n| *n += 1);
        for q in &questions {
            self.notices.task(&run.id, crate::notify::NotifyEvent::Question, &q.question);
        }
    }

    /// After a restart: answers given while no daemon could deliver them are
    /// delivered, and open questions get their deadlines back.
    pub(super) fn resume(&self, run: &mut Run) {
        if !run.driver.answers_requests() {
            return;
        }
        let Ok(questions) = self.store.questions(&run.id) else { return };
        let Ok(Some(record)) = self.store.task(&run.id) else { return };
        for (q, delivered) in questions.into_iter().filter(|(q, _)| is_permission_question(&q.question_id)) {
            match q.answer {
                Some(answer) if !delivered => self.deliver(&record, &q.question_id, &answer),
                Some(_) => {}
                None => run.permission_deadlines.push((q.question_id, self.deadline(run, q.asked_ms))),
            }
        }
    }

    /// When a bridged prompt asked at `asked_ms` is denied for want of an
    /// answer: after the permission timeout, never past the task's deadline.
    pub(super) fn deadline(&self, run: &Run, asked_ms: i64) -> i64 {
        (asked_ms + self.timeout.as_millis() as i64).min(run.deadline_ms)
    }

    /// Denies the bridged prompts nobody answered in time, so the agent goes
    /// on without the tool rather than waiting for ever.
    /// `emit` stores each timeout's answer event before it is delivered.
    pub(super) fn expire(&self, run: &mut Run, emit: impl Fn(&mut Run, Vec<EventBody>) -> Result<()>) {
        let now = now_ms();
        let (due, open): (Vec<_>, Vec<_>) = run.permission_deadlines.drain(..).partition(|(_, at)| *at <= now);
        run.permission_deadlines = open;
        for (qid, _) in due {
            let answer = format!(
                "deny: the orchestrator did not answer within {} s; go on without this tool and say so in your report",
                self.timeout.as_secs()
            );
            match self.store.answer_question(&run.id, &qid, &answer, now) {
                Ok(true) => {
                    let body = EventBody::Answer { id: qid.clone(), answer: answer.clone() };
                    if let Err(e) = emit(run, vec![body]) {
                        warn!(task_id = %run.id, "storing the timeout of {qid} failed: {e}");
                    }
                    if let Ok(Some(record)) = self.store.task(&run.id) {
                        self.deliver(&record, &qid, &answer);
                    }
                }
                // Answered meanwhile: `answer` delivered it.
                Ok(false) => {}
                Err(e) => warn!(task_id = %run.id, "expiring {qid} failed: {e}"),
            }
        }
    }

    /// Writes the answer to a bridged prompt on the agent's stdin, as its
    /// CLI's control response, and marks it delivered. An answer is an
    /// `allow` when it says so; anything else denies, with the answer as the
    /// reason the agent reads.
    pub(super) fn deliver(&self, record: &TaskRecord, qid: &str, answer: &str) {
        let dir = TaskDir::new(&record.task_dir);
        let ask = match super::permission_answers::read_ask(&dir, qid) {
            Ok(ask) => ask,
            Err(e) => {
                warn!(task_id = %record.id, "cannot read the permission request {e}");
                return;
            }
        };
        // The option the (checked, canonical) answer names; an answer that names none denies.
        let (allow, for_session) = match super::permission_answers::choose(&ask, answer) {
            Ok(choice) => (choice.allow(), choice.for_session()),
            Err(_) => (false, false),
        };
        let driver = crate::driver::for_launch(&record.launch);
        let Some(line) = driver.respond(&ask, &crate::driver::Decision { allow, message: answer, for_session }) else {
            warn!(task_id = %record.id, question_id = %qid, "this agent's driver cannot answer a permission request");
            return;
        };
        let Some(handle) = &record.run else {
            warn!(task_id = %record.id, question_id = %qid, "the task has no run to deliver the answer to");
            return;
        };
        match self.runner.write_stdin(handle, &dir, &line) {
            Ok(()) => {
                if let Err(e) = self.store.mark_delivered(&record.id, qid) {
                    warn!(task_id = %record.id, "marking {qid} delivered failed: {e}");
                }
                info!(task_id = %record.id, question_id = %qid, allow, "permission answer delivered");
            }
            Err(e) => warn!(task_id = %record.id, "cannot deliver the answer to {qid}: {e}"),
        }
    }

    /// Refuses an edit or a command asked for in a read-only task, without asking anyone: the
    /// refusal is written back, shown as an error event and kept for the report's findings.
    fn refuse_in_read_only(
        &self,
        run: &Run,
        record: &TaskRecord,
        ask: &provider::PermissionAsk,
        kind: &str,
        bodies: &mut Vec<EventBody>,
    ) {
        let reason = format!("caesar refused a `{kind}` tool in a read-only task: {}", ask.summary);
        let decision = crate::driver::Decision { allow: false, message: &reason, for_session: false };
        if let Some(line) = run.driver.respond(ask, &decision)
            && let Some(handle) = &run.handle
            && let Err(e) = self.runner.write_stdin(handle, &run.dir, &line)
        {
            warn!(task_id = %record.id, "cannot write the refusal to the agent: {e}");
        }
        info!(task_id = %record.id, tool = %ask.tool_name, kind, "write permission refused in a read-only task");
        bodies.push(EventBody::Error { message: reason.clone(), fatal: false });
        let finding = crate::oacp::Finding {
            severity: crate::oacp::Severity::Medium,
            title: format!("the agent asked for a `{kind}` tool in a read-only task; caesar refused it"),
            file: None,
            line: None,
            detail: reason,
        };
        let path = run.dir.permissions().join(REFUSALS);
        let appended = std::fs::create_dir_all(run.dir.permissions()).and_then(|()| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).custom_flags_nofollow().open(&path)?;
            writeln!(f, "{}", serde_json::to_string(&finding).unwrap_or_default())
        });
        if let Err(e) = appended {
            warn!(task_id = %record.id, "cannot keep the refusal in {}: {e}", path.display());
        }
    }
}

/// The findings of the refusals [`Permissions::refuse_in_read_only`] kept for task `dir`.
pub(super) fn refusal_findings(dir: &crate::task_dir::TaskDir) -> Vec<crate::oacp::Finding> {
    let path = dir.permissions().join(REFUSALS);
    let Ok(bytes) = crate::safe_fs::read_capped(&path, crate::safe_fs::REPORT_CAP) else { return Vec::new() };
    String::from_utf8_lossy(&bytes).lines().filter_map(|l| serde_json::from_str(l).ok()).take(20).collect()
}

/// Opening a file for appending that is never a link the agent put there.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(nix::libc::O_NOFOLLOW)
    }
}

/// Keeps a permission request for its answer: written whole under a temporary name (never
/// through a link: the directory is in the agent's reach) and renamed, but not fsynced. The
/// request matters only while the agent that asked is alive: a daemon that dies keeps it (the
/// kernel's page cache), and a machine that dies ends the agent too (the task then ends as
/// vanished). Two fsyncs less on the way to the question (issue 15's latency); the question
/// itself is stored durably, in SQLite, before it shows.
fn write_ask(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}

/// Where the refusals of a read-only task are kept, under `permissions/`.
const REFUSALS: &str = "refused.jsonl";

/// The ACP tool kinds that change something: never allowed in a read-only task.
const WRITING_KINDS: &[&str] = &["edit", "delete", "move", "execute"];

/// The option that allows a tool for the rest of the session.
pub(super) const ALLOW_FOR_SESSION: &str = "allow for session";

/// The question id of a bridged permission prompt: derived from the CLI's
/// request id, so a request read again after a restart is the same question.
pub(super) fn permission_question_id(request_id: &str) -> String {
    // The request id's letters and digits keep it readable; a hash of the
    // whole id keeps two ids that differ only in punctuation (or past the
    // cut) apart. FNV-1a: stable across builds, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in request_id.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut id = String::from("p_");
    id.extend(request_id.chars().filter(char::is_ascii_alphanumeric).take(22));
    id.push_str(&format!("{hash:016x}"));
    id
}

pub(super) fn is_permission_question(question_id: &str) -> bool {
    question_id.starts_with("p_")
}

/// Whether an answer to a permission prompt allows the call.
pub(super) fn is_allow(answer: &str) -> bool {
    let first = answer.trim().split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or_default();
    matches!(first.to_ascii_lowercase().as_str(), "allow" | "yes" | "y" | "approve")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_ids_of_requests_that_differ_only_in_punctuation_or_past_the_cut_do_not_collide() {
        // The audit's case: two request ids with the same letters and digits.
        assert_ne!(permission_question_id("req-1.2"), permission_question_id("req-12"));
        assert_ne!(permission_question_id("req_1_2"), permission_question_id("req-1-2"));
        let long = "a".repeat(40);
        assert_ne!(permission_question_id(&format!("{long}1")), permission_question_id(&format!("{long}2")));
        // Stable: the same request read again after a restart is the same question.
        assert_eq!(permission_question_id("req-1.2"), permission_question_id("req-1.2"));
        assert!(is_permission_question(&permission_question_id("x")));
    }
}

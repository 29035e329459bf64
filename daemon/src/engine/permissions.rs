//! The permission bridge: a CLI's permission prompts become durable questions,
//! and their answers go back on the agent's stdin, exactly once.

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::oacp::EventBody;
use crate::provider::{self};
use crate::store::{QuestionRecord, TaskRecord};
use crate::supervisor::{self};

use super::*;

impl Engine {
    // ------------------------------------------------------ permission bridge

    /// A CLI asks whether it may use a tool: the request is kept in the task
    /// directory (for the answer), the question stored (durably, first), and
    /// a `question` event added to the batch. A request seen again (output
    /// re-read after a restart) is not asked twice.
    pub(super) fn ask_permission(&self, run: &mut Run, ask: provider::PermissionAsk, bodies: &mut Vec<EventBody>) {
        if !run.driver.answers_requests() {
            return;
        }
        let provider_id = self.store.task(&run.id).ok().flatten().map(|r| r.agent).unwrap_or_default();
        let qid = permission_question_id(&ask.request_id);
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
        let dir = run.dir.permissions();
        let path = run.dir.permission_request(&qid);
        let stored = std::fs::create_dir_all(&dir)
            .and_then(|()| supervisor::write_atomic(&path, &serde_json::to_vec(&ask).unwrap_or_default()));
        if let Err(e) = stored {
            warn!(task_id = %run.id, "cannot keep the permission request {}: {e}", path.display());
            return;
        }
        let question = format!(
            "{provider_id} asks permission to use {}. Answer `allow`, or `deny` followed by a reason for the agent.",
            ask.summary
        );
        let options = vec!["allow".to_owned(), "deny".to_owned()];
        let q = QuestionRecord {
            task_id: run.id.clone(),
            question_id: qid.clone(),
            question: question.clone(),
            options: options.clone(),
            asked_ms: now_ms(),
            answer: None,
        };
        if let Err(e) = self.store.insert_question(&q) {
            warn!(task_id = %run.id, "storing permission question {qid} failed: {e}");
            return;
        }
        info!(task_id = %run.id, question_id = %qid, tool = %ask.tool_name, "permission prompt bridged");
        bodies.push(EventBody::Question { id: qid.clone(), question, options });
        run.permission_deadlines.push((qid, self.permission_deadline(run, q.asked_ms)));
        run.live.attention.send_modify(|n| *n += 1);
        self.notify_task(&run.id, crate::notify::NotifyEvent::Question, &q.question);
    }

    /// After a restart: answers given while no daemon could deliver them are
    /// delivered, and open questions get their deadlines back.
    pub(super) fn resume_permissions(&self, run: &mut Run) {
        if !run.driver.answers_requests() {
            return;
        }
        let Ok(questions) = self.store.questions(&run.id) else { return };
        let Ok(Some(record)) = self.store.task(&run.id) else { return };
        for (q, delivered) in questions.into_iter().filter(|(q, _)| is_permission_question(&q.question_id)) {
            match q.answer {
                Some(answer) if !delivered => self.deliver_permission(&record, &q.question_id, &answer),
                Some(_) => {}
                None => run.permission_deadlines.push((q.question_id, self.permission_deadline(run, q.asked_ms))),
            }
        }
    }

    /// When a bridged prompt asked at `asked_ms` is denied for want of an
    /// answer: after the permission timeout, never past the task's deadline.
    pub(super) fn permission_deadline(&self, run: &Run, asked_ms: i64) -> i64 {
        (asked_ms + self.settings.permission_timeout.as_millis() as i64).min(run.deadline_ms)
    }

    /// Denies the bridged prompts nobody answered in time, so the agent goes
    /// on without the tool rather than waiting for ever.
    pub(super) fn expire_permissions(&self, run: &mut Run) {
        let now = now_ms();
        let (due, open): (Vec<_>, Vec<_>) = run.permission_deadlines.drain(..).partition(|(_, at)| *at <= now);
        run.permission_deadlines = open;
        for (qid, _) in due {
            let answer = format!(
                "deny: the orchestrator did not answer within {} s; go on without this tool and say so in your report",
                self.settings.permission_timeout.as_secs()
            );
            match self.store.answer_question(&run.id, &qid, &answer, now) {
                Ok(true) => {
                    let body = EventBody::Answer { id: qid.clone(), answer: answer.clone() };
                    if let Err(e) = self.emit(run, vec![body]) {
                        warn!(task_id = %run.id, "storing the timeout of {qid} failed: {e}");
                    }
                    if let Ok(Some(record)) = self.store.task(&run.id) {
                        self.deliver_permission(&record, &qid, &answer);
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
    pub(super) fn deliver_permission(&self, record: &TaskRecord, qid: &str, answer: &str) {
        let dir = Self::task_dir(record);
        let path = dir.permission_request(qid);
        let ask = match crate::safe_fs::read_capped(&path, crate::safe_fs::REPORT_CAP)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<provider::PermissionAsk>(&b).map_err(|e| e.to_string()))
        {
            Ok(ask) => ask,
            Err(e) => {
                warn!(task_id = %record.id, "cannot read the permission request {}: {e}", path.display());
                return;
            }
        };
        let allow = is_allow(answer);
        let driver = crate::driver::for_launch(&record.launch);
        let Some(line) = driver.respond(&ask, &crate::driver::Decision { allow, message: answer }) else {
            warn!(task_id = %record.id, question_id = %qid, "this agent's driver cannot answer a permission request");
            return;
        };
        match self.runner.write_stdin(&dir, &line) {
            Ok(()) => {
                if let Err(e) = self.store.mark_delivered(&record.id, qid) {
                    warn!(task_id = %record.id, "marking {qid} delivered failed: {e}");
                }
                info!(task_id = %record.id, question_id = %qid, allow, "permission answer delivered");
            }
            Err(e) => warn!(task_id = %record.id, "cannot deliver the answer to {qid}: {e}"),
        }
    }
}

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

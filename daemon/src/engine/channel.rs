//! The channel scope: the return channel's calls, each for the one task
//! whose process tree made it (`rpc.rs::Service::channel` checks the
//! transport: there is no secret), and the orchestrator's answers to a
//! task's questions. A service of the engine over the store, the live runs,
//! the notices and the permission bridge (a permission's answer goes back
//! through it).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::EventBody;
use crate::store::{QuestionRecord, TaskRecord};

use super::*;

/// Default wait of `ask_orchestrator` (5 minutes; never past the task's deadline).
pub const ASK_DEFAULT_MS: u64 = 5 * 60 * 1000;

/// The return channel's calls and the answers to questions.
pub struct Channel {
    pub(super) store: Arc<Store>,
    pub(super) runs: Arc<LiveRuns>,
    /// Hands a steer to a running task's supervisor (`steer.rs`).
    pub(super) runner: Arc<dyn Runner>,
    notices: super::notifications::Notices,
    permissions: Arc<super::permissions::Permissions>,
}

impl Channel {
    pub(super) fn new(
        store: Arc<Store>,
        runs: Arc<LiveRuns>,
        runner: Arc<dyn Runner>,
        notices: super::notifications::Notices,
        permissions: Arc<super::permissions::Permissions>,
    ) -> Channel {
        Channel { store, runs, runner, notices, permissions }
    }

    /// The live state of a task that may still use its channel.
    fn live(&self, record: &TaskRecord) -> Result<Arc<Live>> {
        if record.status.is_terminal() {
            return Err(Error::Precondition(format!("task {} has ended ({})", record.id, record.status.as_str())));
        }
        self.runs
            .get(&record.id)
            .ok_or_else(|| Error::Precondition(format!("task {} is not running yet; retry in a moment", record.id)))
    }

    /// `get_task`: the mission, as `task.json` holds it.
    pub fn get_task(&self, task_id: &str) -> Result<String> {
        let record = super::observe::find_task(&self.store, task_id)?;
        let path = Path::new(&record.task_dir).join("task.json");
        crate::safe_fs::read_to_string_capped(&path, crate::safe_fs::REPORT_CAP)
            .map_err(|e| Error::io_at("cannot read", &path, e))
    }

    /// `report_progress`: a `progress` event in the task's log. Returns its seq.
    pub fn progress(&self, task_id: &str, message: &str, pct: Option<f64>) -> Result<u64> {
        let record = super::observe::find_task(&self.store, task_id)?;
        let live = self.live(&record)?;
        if message.trim().is_empty() {
            return Err(Error::Invalid("`message` is empty: say what progress was made".to_owned()));
        }
        let pct = pct.map(|p| p.clamp(0.0, 100.0));
        self.runs.emit_events(
            &record.id,
            Path::new(&record.task_dir),
            &live,
            vec![EventBody::Progress { message: message.to_owned(), pct }],
            None,
        )
    }

    /// `ask_orchestrator`: stores the question (durably, first), shows it in
    /// status and await, wakes awaiters, then waits for the answer until
    /// `timeout` or the task's deadline. With no answer in time it returns
    /// `answered: false` and an invitation to proceed; that is not an error.
    /// Passing `question_id` resumes waiting on a question already asked
    /// (a channel that reconnected after a restart).
    pub async fn ask(
        &self,
        task_id: &str,
        question: &str,
        options: Vec<String>,
        timeout: Duration,
        question_id: Option<&str>,
    ) -> Result<(String, bool, String)> {
        let record = super::observe::find_task(&self.store, task_id)?;
        let live = self.live(&record)?;
        let mut answers = live.answers.subscribe();
        // The channel may pick the id itself, so that after a daemon restart
        // it can ask again and keep waiting on the same question.
        let asked_before = match question_id.filter(|q| !q.is_empty()) {
            Some(qid) => {
                if !qid.starts_with("q_") || qid.len() > 40 || !qid[2..].bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return Err(Error::Invalid(format!(
                        "question id `{qid}` is malformed: use q_ and letters or digits"
                    )));
                }
                self.store.question(task_id, qid)?.map(|_| qid.to_owned()).ok_or_else(|| qid.to_owned())
            }
            None => Err(crate::ids::question_id()),
        };
        let qid = match asked_before {
            Ok(qid) => qid,
            Err(new_id) => {
                if question.trim().is_empty() {
                    return Err(Error::Invalid("`question` is empty: ask something".to_owned()));
                }
                let q = QuestionRecord {
                    task_id: task_id.to_owned(),
                    question_id: new_id,
                    question: question.to_owned(),
                    options: options.clone(),
                    asked_ms: now_ms(),
                    answer: None,
                };
                self.store.insert_question(&q)?;
                self.runs.emit_events(
                    task_id,
                    Path::new(&record.task_dir),
                    &live,
                    vec![EventBody::Question { id: q.question_id.clone(), question: q.question.clone(), options }],
                    None,
                )?;
                live.attention.send_modify(|n| *n += 1);
                self.notices.task(task_id, crate::notify::NotifyEvent::Question, &q.question);
                q.question_id
            }
        };
        let task_deadline = record.started_ms.unwrap_or_else(now_ms) + record.timeout_ms as i64;
        let wait = timeout.min(Duration::from_millis((task_deadline - now_ms()).max(0) as u64));
        let until = tokio::time::Instant::now() + wait;
        let mut status = live.status.subscribe();
        loop {
            if let Some((q, _)) = self.store.question(task_id, &qid)?
                && let Some(answer) = q.answer
            {
                self.store.mark_delivered(task_id, &qid)?;
                return Ok((qid, true, answer));
            }
            tokio::select! {
                _ = answers.changed() => {}
                _ = status.wait_for(|s| s.is_terminal()) => break,
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        Ok((
            qid,
            false,
            format!(
                "No answer from the orchestrator within {} s. Proceed on your best judgment, and say in your report what you assumed.",
                wait.as_secs()
            ),
        ))
    }

    /// `submit_report`: validated at once; an invalid report is refused with
    /// the failing field so the agent can correct it and submit again.
    pub fn submit_report(&self, task_id: &str, report_json: &str) -> Result<()> {
        let record = super::observe::find_task(&self.store, task_id)?;
        let live = self.live(&record)?;
        let report = crate::oacp::Report::parse(report_json).map_err(|e| Error::Invalid(e.to_string()))?;
        // In the daemon's part (issue 19): the agent cannot write it there,
        // so a report taken as `channel` came over the channel.
        let path = TaskDir::new(&record.task_dir).channel_report();
        let body = serde_json::to_vec_pretty(&report).map_err(|e| Error::Internal(e.to_string()))?;
        crate::safe_fs::write_atomic(&path, &body).map_err(|e| Error::io_at("cannot write", &path, e))?;
        self.runs.emit_events(
            &record.id,
            Path::new(&record.task_dir),
            &live,
            vec![EventBody::Progress { message: format!("report submitted: {}", report.status.as_str()), pct: None }],
            None,
        )?;
        Ok(())
    }

    /// `caesar_answer`: answers a pending question. An unknown task or
    /// question, or one already answered, fails clearly; of two concurrent
    /// answers exactly one wins.
    pub fn answer(&self, task_id: &str, question_id: &str, answer: &str) -> Result<()> {
        let record = super::observe::find_task(&self.store, task_id)?;
        let Some((question, _)) = self.store.question(task_id, question_id)? else {
            let pending: Vec<String> =
                self.store.pending_questions(task_id)?.into_iter().map(|q| q.question_id).collect();
            return Err(Error::NotFound(format!(
                "task {task_id} has no question `{question_id}` (pending: {})",
                if pending.is_empty() { "none".to_owned() } else { pending.join(", ") }
            )));
        };
        if question.answer.is_some() {
            return Err(Error::Precondition(format!("question {question_id} of task {task_id} already has an answer")));
        }
        if record.status.is_terminal() {
            return Err(Error::Precondition(format!(
                "task {task_id} has ended ({}): nobody is waiting for this answer",
                record.status.as_str()
            )));
        }
        // A permission's answer must pick an option the agent offered; it is stored as that option.
        let checked;
        let answer = if is_permission_question(question_id) {
            checked = super::permission_answers::checked_answer(
                &TaskDir::new(&record.task_dir),
                task_id,
                question_id,
                answer,
            )?;
            checked.as_str()
        } else {
            answer
        };
        // The answer and its `answer` event are one transaction (one fsync, issue 15), and the
        // agent gets it right after.
        let at_ms = now_ms();
        let live = self.runs.get(task_id);
        let answered = match &live {
            Some(live) => {
                let mut won = false;
                let body = EventBody::Answer { id: question_id.to_owned(), answer: answer.to_owned() };
                self.runs.emit_with(task_id, Path::new(&record.task_dir), live, vec![body], |records| {
                    won = self.store.answer_question_with_events(task_id, question_id, answer, at_ms, records)?;
                    Ok(won)
                })?;
                won
            }
            None => self.store.answer_question(task_id, question_id, answer, at_ms)?,
        };
        if !answered {
            return Err(Error::Conflict(format!(
                "question {question_id} of task {task_id} was answered by someone else just now"
            )));
        }
        if let Some(live) = &live {
            live.answers.send_modify(|n| *n += 1);
        }
        if is_permission_question(question_id) {
            self.permissions.deliver(&record, question_id, answer);
        }
        Ok(())
    }
}

/// A remote task's channel calls (issue 16): its runner holds the stream
/// into the task's own pod, which is the call's whole credential, and
/// hands each call here with that task's id.
impl crate::runner::remote_channel::ChannelCalls for Engine {
    fn call(
        self: Arc<Self>,
        task_id: String,
        call: crate::runner::remote_channel::ChannelCall,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::runner::remote_channel::ChannelOutcome> + Send>>
    {
        use crate::runner::remote_channel::{ChannelCall, ChannelFault, ChannelReply};
        Box::pin(async move {
            if call.task_id() != task_id {
                return Err(ChannelFault::other_task(call.task_id(), &task_id));
            }
            let done = match call {
                ChannelCall::GetTask { .. } => {
                    self.channel.get_task(&task_id).map(|task_json| ChannelReply::Task { task_json })
                }
                ChannelCall::Progress { message, pct, .. } => {
                    self.channel.progress(&task_id, &message, pct).map(|seq| ChannelReply::Progress { seq })
                }
                ChannelCall::Ask { question, options, timeout_ms, question_id, .. } => {
                    let ms = if timeout_ms == 0 { ASK_DEFAULT_MS } else { timeout_ms };
                    self.channel
                        .ask(&task_id, &question, options, Duration::from_millis(ms), Some(&question_id))
                        .await
                        .map(|(question_id, answered, answer)| ChannelReply::Answer { question_id, answered, answer })
                }
                ChannelCall::Submit { report_json, .. } => {
                    self.channel.submit_report(&task_id, &report_json).map(|()| ChannelReply::Accepted)
                }
            };
            done.map_err(|e| ChannelFault::from(tonic::Status::from(e)))
        })
    }
}

//! The monitor of a running task: read the runner's output, parse it through
//! the driver, apply what it says (activity, session, blockers, questions).
//!
//! Output is read from the task's `raw.log` at the stored offset, whichever
//! runner fills it, and each batch of events is stored with the offset that
//! produced it: after a crash, reading resumes exactly where the stored
//! events end.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::driver::{self, Driver};
use crate::error::Result;
use crate::oacp::{Blocker, BlockerKind, EventBody};
use crate::provider::Parsed;
use crate::report;
use crate::runner::{RunHandle, RunWatch};
use crate::store::TaskRecord;
use crate::tail::LogTail;
use crate::task_dir::TaskDir;

use super::*;

/// The reading state of one running task.
pub(super) struct Run {
    pub(super) id: String,
    pub(super) dir: TaskDir,
    pub(super) tail: LogTail,
    pub(super) driver: Box<dyn Driver>,
    pub(super) final_text: Option<String>,
    pub(super) messages: String,
    pub(super) session_id: Option<String>,
    pub(super) blocker: Option<Blocker>,
    /// The session said the turn failed ([`Parsed::failure`]), whatever the exit code.
    pub(super) failure: Option<String>,
    /// The runner's handle, to stop the run when a blocker makes the rest
    /// of it pointless, and to answer the agent.
    pub(super) handle: Option<RunHandle>,
    pub(super) live: Arc<Live>,
    /// Bridged permission questions still open, with when each is denied for lack of an answer.
    pub(super) permission_deadlines: Vec<(String, i64)>,
    /// The task's own deadline.
    pub(super) deadline_ms: i64,
    /// The task's budget and its tally (issue 17).
    pub(super) budget: super::budget::Meter,
    /// The network blocker's watch (issue 17).
    pub(super) network: super::network::NetWatch,
    /// The task's life-cycle plan (issue 17): whether a blocker may fall back.
    pub(super) plan: crate::lifecycle::Plan,
    /// Questions asked in the batch being read, stored with its events (issue 15).
    pub(super) new_questions: Vec<crate::store::QuestionRecord>,
    /// The task's steers handed over and delivered (issue 31).
    pub(super) steer: super::steer::Tracker,
    /// The agent, and the provider its quota signals name (its id for an `[[agent]]`), for the
    /// quota ledger (issue 32).
    pub(super) agent: String,
    pub(super) quota_provider: String,
}

impl Run {
    /// The reading state of a task started at `started_ms`, reading from
    /// the stored offset.
    pub(super) fn new(
        record: &TaskRecord,
        dir: TaskDir,
        live: Arc<Live>,
        handle: Option<RunHandle>,
        started_ms: i64,
        session_id: Option<String>,
    ) -> Run {
        Run {
            id: record.id.clone(),
            tail: LogTail::new(&dir.raw_log(), record.log_offset),
            dir,
            driver: driver::for_launch(&record.launch),
            final_text: None,
            messages: String::new(),
            session_id,
            blocker: None,
            failure: None,
            handle,
            live,
            permission_deadlines: Vec::new(),
            deadline_ms: started_ms + record.timeout_ms as i64,
            budget: super::budget::Meter::new(record.launch.lifecycle.budget, started_ms),
            network: Default::default(),
            plan: record.launch.lifecycle.clone(),
            new_questions: Vec::new(),
            steer: super::steer::Tracker::for_launch(&record.launch),
            agent: record.agent.clone(),
            quota_provider: match record.launch.provider {
                p if p.is_native() => p.as_str().to_owned(),
                _ => record.agent.clone(),
            },
        }
    }
}

impl Engine {
    /// Follows a run until it ends, then concludes the task and gives the
    /// queue a turn.
    pub(super) async fn monitor(self: Arc<Self>, mut run: Run, mut watch: Box<dyn RunWatch>) {
        loop {
            let ended = watch.wait(self.settings.poll).await;
            if ended {
                break;
            }
            if let Err(e) = self.pump(&mut run, false) {
                warn!(task_id = %run.id, "reading the agent's output failed: {e}");
            }
            if !run.permission_deadlines.is_empty() {
                self.permissions.expire(&mut run, |run, bodies| self.emit(run, bodies));
            }
            self.budgets.check(&mut run);
            self.budgets.check_group(&run);
            self.check_network(&mut run);
            super::steer::tick(&self, &mut run, false);
        }
        self.monitor_done(run).await;
        // A blocked task may be followed by the next agent of its chain.
        self.start_fallbacks().await;
        // A slot is free: start the next queued task.
        self.schedule().await;
    }

    /// Reads what is left of the output and concludes the task.
    pub(super) async fn monitor_done(&self, mut run: Run) {
        if let Err(e) = self.pump(&mut run, true) {
            warn!(task_id = %run.id, "reading the agent's last output failed: {e}");
        }
        super::steer::tick(self, &mut run, true);
        self.verify_after_run(&run.id, &run.dir, run.deadline_ms, run.blocker.is_some()).await;
        self.conclude_until_stored(&mut run).await;
    }

    /// Reads new output, parses it and stores the events.
    pub(super) fn pump(&self, run: &mut Run, at_end: bool) -> Result<()> {
        loop {
            let lines = run.tail.read_lines(at_end)?;
            if lines.is_empty() {
                break;
            }
            let mut bodies = Vec::new();
            for line in &lines {
                let reading = run.driver.read_line(line);
                self.absorb(run, reading.parsed, &mut bodies);
                self.reply(run, &reading.replies);
            }
            self.emit(run, bodies)?;
            if !run.tail.has_more() {
                break;
            }
        }
        if at_end {
            let mut bodies = Vec::new();
            let parsed = run.driver.finish();
            self.absorb(run, parsed, &mut bodies);
            if !bodies.is_empty() {
                self.emit(run, bodies)?;
            }
        }
        Ok(())
    }

    /// Writes a driver's replies on the agent's stdin.
    fn reply(&self, run: &Run, replies: &[String]) {
        let Some(handle) = &run.handle else { return };
        for line in replies {
            if let Err(e) = self.runner.write_stdin(handle, &run.dir, line) {
                warn!(task_id = %run.id, "cannot write to the agent's stdin: {e}");
            }
        }
    }

    pub(super) fn absorb(&self, run: &mut Run, parsed: Parsed, bodies: &mut Vec<EventBody>) {
        for body in &parsed.events {
            run.budget.observe(body);
            run.network.observe(body);
            let activity = match body {
                EventBody::Message { .. } => Some(("message", String::new(), String::new())),
                EventBody::Thinking { .. } => Some(("thinking", String::new(), String::new())),
                EventBody::ToolUse { tool, status, .. } => Some((
                    "tool_use",
                    tool.clone(),
                    serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                )),
                _ => None,
            };
            if let Some((kind, mut tool_name, state)) = activity {
                let mut slot = run.live.activity.lock().unwrap_or_else(|p| p.into_inner());
                // A tool's end may carry only its call id: keep the name of its start.
                if kind == "tool_use"
                    && tool_name.is_empty()
                    && let Some(prev) = slot.as_ref().filter(|a| a.kind == "tool_use")
                {
                    tool_name = prev.tool_name.clone();
                }
                *slot = Some(Activity { kind, tool_name, state, at_ms: now_ms() });
            }
            if let EventBody::Message { text } = body {
                run.messages.push_str(text);
                run.messages.push('\n');
                if run.messages.len() > 2 * MESSAGE_KEEP {
                    let keep = report::tail_chars(&run.messages, MESSAGE_KEEP);
                    run.messages = keep;
                }
                let tail = report::tail_chars(text, OUTPUT_TAIL_CHARS);
                *run.live.output.lock().unwrap_or_else(|p| p.into_inner()) = Some((tail, now_ms()));
            }
        }
        bodies.extend(parsed.events);
        if let Some(ask) = parsed.permission {
            self.permissions.ask(run, ask, bodies);
        }
        if let Some(text) = parsed.final_text {
            run.final_text = Some(text);
        }
        if let Some(why) = parsed.failure {
            run.failure.get_or_insert(why);
        }
        let mut changed = false;
        if let Some(session) = parsed.session_id
            && run.session_id.as_deref() != Some(&session)
        {
            run.session_id = Some(session);
            changed = true;
        }
        // Issue 32: what the agent says of its quota goes to the ledger; a rate-limit blocker
        // counts where no structured signal came with it.
        if let Some(signal) = &parsed.quota {
            self.projects.quota.note(&run.agent, &run.quota_provider, signal);
        } else if let Some(blocker) = &parsed.blocker {
            let blocker = super::parking::with_reset(blocker, now_ms());
            self.projects.quota.note_blocker(&run.agent, &run.quota_provider, &blocker);
        }
        // The parser has already emitted the `blocker` event itself.
        if let Some(blocker) = parsed.blocker
            && run.blocker.is_none()
        {
            // Issue 17: a quota that says when it lifts may park the task; stored before the stop.
            self.parking.note(run, &blocker);
            // An auth or quota blocker will not clear by itself: CLIs that
            // retry on it only burn time, so the run is stopped now. A
            // permission denial is left to the agent, which may go on.
            if matches!(blocker.kind, BlockerKind::Auth | BlockerKind::RateLimit)
                && let Some(handle) = &run.handle
            {
                info!(task_id = %run.id, kind = blocker.kind.as_str(), "blocker recognized: stopping the run");
                self.runner.request_stop(handle);
            }
            // A blocker the next agent of the chain may get past is not the caller's to handle.
            if !run.plan.may_fall_back(blocker.kind) {
                run.live.attention.send_modify(|n| *n += 1);
            }
            self.notices.task(
                &run.id,
                crate::notify::NotifyEvent::Blocker,
                &format!("{}: {}", blocker.kind.as_str(), blocker.message),
            );
            run.blocker = Some(blocker);
            changed = true;
        }
        if changed {
            let kind = run.blocker.as_ref().map(|b| b.kind);
            if let Err(e) = self.store.set_session_and_blocker(&run.id, run.session_id.as_deref(), kind) {
                // Both are stored again at the end, with the task's ending.
                warn!(task_id = %run.id, "storing the session id and blocker failed: {e}");
            }
        }
    }

    /// Ends the task, retrying with a growing pause while its ending cannot
    /// be stored (a full disk): a task is never left `running` because one
    /// write failed. Safe to repeat, since the ending is one transaction.
    pub(super) async fn conclude_until_stored(&self, run: &mut Run) {
        let mut pause = Duration::from_millis(100);
        loop {
            match self.conclude(run).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(task_id = %run.id, "ending the task failed, retrying in {} ms: {e}", pause.as_millis());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }
}

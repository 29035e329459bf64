//! The monitor of a running task: read the runner's output, parse it through
//! the driver, apply what it says (activity, session, blockers, questions).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::Result;
use crate::oacp::{BlockerKind, EventBody};
use crate::provider::{self, LineParser, Parsed, Stream};
use crate::report::{self};
use crate::supervisor::{self};
use crate::tail::LogTail;

use super::*;

/// How the monitor learns that the supervisor is done.
pub(super) enum Waiter {
    /// This daemon started the supervisor and is its parent.
    Child(tokio::process::Child),
    /// A previous daemon started it; `exit.json` and liveness are checked.
    Reattached { pid: u32, start: Option<u64>, boot: Option<String> },
}

/// The parsing state of one running task.
pub(super) struct Run {
    pub(super) id: String,
    pub(super) task_dir: PathBuf,
    pub(super) tail: LogTail,
    pub(super) parser: Box<dyn LineParser>,
    /// Whether the parser is the generic one, whose raw output is the agent's own words.
    pub(super) generic: bool,
    pub(super) final_text: Option<String>,
    pub(super) messages: String,
    pub(super) session_id: Option<String>,
    pub(super) blocker: Option<(BlockerKind, String)>,
    /// Told to stop when a blocker makes the rest of the run pointless.
    pub(super) supervisor_pid: Option<u32>,
    pub(super) live: Arc<Live>,
    /// The provider whose permission prompts this run bridges to the orchestrator, when its
    /// stdin is a control protocol.
    pub(super) bridge: Option<String>,
    /// Bridged permission questions still open, with when each is denied for lack of an answer.
    pub(super) permission_deadlines: Vec<(String, i64)>,
    /// The task's own deadline.
    pub(super) deadline_ms: i64,
}

impl Engine {
    // ---------------------------------------------------------------- monitor

    pub(super) async fn monitor(self: Arc<Self>, mut run: Run, mut waiter: Waiter) {
        let mut tick = tokio::time::interval(self.settings.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u64 = 0;
        loop {
            match &mut waiter {
                Waiter::Child(child) => {
                    tokio::select! {
                        _ = child.wait() => break,
                        _ = tick.tick() => {}
                    }
                }
                Waiter::Reattached { pid, start, boot } => {
                    tick.tick().await;
                    ticks += 1;
                    if run.task_dir.join(supervisor::EXIT_FILE).exists() {
                        break;
                    }
                    if ticks.is_multiple_of(25) && !supervisor::is_same_process_alive(*pid, *start, boot.as_deref()) {
                        break;
                    }
                }
            }
            if let Err(e) = self.pump(&mut run, false) {
                warn!(task_id = %run.id, "reading the agent's output failed: {e}");
            }
            if !run.permission_deadlines.is_empty() {
                self.expire_permissions(&mut run);
            }
        }
        if let Err(e) = self.pump(&mut run, true) {
            warn!(task_id = %run.id, "reading the agent's last output failed: {e}");
        }
        self.conclude_until_stored(&mut run).await;
        // A slot is free: start the next queued task.
        self.schedule().await;
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
                let parsed = run.parser.parse_line(line, Stream::Stdout);
                self.absorb(run, parsed, &mut bodies);
            }
            self.emit(run, bodies)?;
            if !run.tail.has_more() {
                break;
            }
        }
        if at_end {
            let mut bodies = Vec::new();
            let parsed = run.parser.finish();
            self.absorb(run, parsed, &mut bodies);
            if !bodies.is_empty() {
                self.emit(run, bodies)?;
            }
        }
        Ok(())
    }

    pub(super) fn absorb(&self, run: &mut Run, parsed: Parsed, bodies: &mut Vec<EventBody>) {
        for body in &parsed.events {
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
            self.ask_permission(run, ask, bodies);
        }
        if let Some(text) = parsed.final_text {
            run.final_text = Some(text);
        }
        let mut changed = false;
        if let Some(session) = parsed.session_id
            && run.session_id.as_deref() != Some(&session)
        {
            run.session_id = Some(session);
            changed = true;
        }
        // The parser has already emitted the `blocker` event itself.
        if let Some(blocker) = parsed.blocker
            && run.blocker.is_none()
        {
            // An auth or quota blocker will not clear by itself: CLIs that
            // retry on it only burn time, so the run is stopped now. A
            // permission denial is left to the agent, which may go on.
            #[cfg(unix)]
            if matches!(blocker.0, BlockerKind::Auth | BlockerKind::RateLimit)
                && let Some(pid) = run.supervisor_pid
            {
                info!(task_id = %run.id, kind = blocker_name(blocker.0), "blocker recognized: stopping the run");
                supervisor::request_stop(pid);
            }
            run.blocker = Some(blocker);
            changed = true;
            run.live.attention.send_modify(|n| *n += 1);
        }
        if changed {
            let kind = run.blocker.as_ref().map(|(k, _)| blocker_name(*k));
            if let Err(e) = self.store.set_session_and_blocker(&run.id, run.session_id.as_deref(), kind) {
                warn!(task_id = %run.id, "storing the session id failed: {e}");
            }
        }
    }

    /// Numbers, stores (with the log offset), writes to `events.jsonl` and
    /// broadcasts a batch of events.
    pub(super) async fn monitor_done(self: Arc<Self>, mut run: Run) {
        if let Err(e) = self.pump(&mut run, true) {
            warn!(task_id = %run.id, "reading the agent's output failed: {e}");
        }
        self.conclude_until_stored(&mut run).await;
    }

    /// Ends the task, retrying with a growing pause while its ending cannot
    /// be stored (a full disk): a task is never left `running` because one
    /// write failed. Safe to repeat, since the ending is one transaction.
    pub(super) async fn conclude_until_stored(&self, run: &mut Run) {
        let mut pause = Duration::from_millis(100);
        loop {
            match self.conclude(run) {
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

/// The parser for a launch's `parser` name; the generic one for a name this
/// build does not know (a task stored by a newer daemon).
pub(super) fn parser_for(name: &str) -> Box<dyn LineParser> {
    provider::parser(name).unwrap_or_else(|| Box::new(provider::GenericParser))
}

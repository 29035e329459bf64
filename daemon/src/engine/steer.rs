//! Steering a running agent (issue 31): a caller says something to a task's agent unasked.
//!
//! A steer is stored before it is acknowledged ([`Channel::steer`](super::channel::Channel::steer)), which hands it to a running
//! task's supervisor at once; otherwise the task's monitor hands each stored one over ([`tick`],
//! also after a daemon restart) through the task's FIFO, as a line the
//! supervisor reads as an order, never as a line for the agent. The supervisor takes each
//! steer id once (a daemon restarted before it saw the delivery sends it again), delivers it as
//! the agent's protocol allows (`supervisor::steer`), and records the delivery in the task's
//! daemon part; the monitor reads that record, marks the steer delivered in the store and
//! emits its `steer` event with the mode, once. Steers still pending when the run ends are
//! marked undelivered, with a `steer` event that says so.
//!
//! Which agents can hear a steer is decided here, from the launch plan: a stdin protocol the
//! supervisor holds (claude's stream-json, ACP, codex app-server), or for a one-shot agent
//! (whose stdin is closed once it started) the return channel: the daemon itself delivers the
//! steer in the answer of the agent's next channel call ([`Channel::channel_steers`](super::channel::Channel::channel_steers); `get_task`
//! reads new ones). A one-shot agent without the channel, or asked to `--interrupt`, is refused
//! by name, as is a one-shot agent in a Kubernetes pod. A pod's supervisor is handed steers
//! over the stdin pump and its record of deliveries comes back with the mirror's frames.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::warn;

use super::monitor::Run;
use super::*;
use crate::clock::now_ms;
use crate::launch::{LaunchPlan, SessionProtocol, Stdin};
use crate::oacp::EventBody;
use crate::store::{SteerEnd, SteerState, TaskStatus};
use crate::supervisor::steer::{SteerOrder, mode, order_line, read_deliveries};

/// The most bytes of one steer's text (`caesar_proto::STEER_MAX_BYTES`).
pub const MAX_STEER_BYTES: usize = caesar_proto::STEER_MAX_BYTES;
/// The most steers of one task waiting to be delivered.
pub const MAX_PENDING_STEERS: u32 = 100;
/// How much of a steer's text its event carries.
const EVENT_TEXT_CHARS: usize = 2000;
/// How long the monitor waits before trying a FIFO again that could not be written.
const RETRY_MS: i64 = 250;

/// What [`Channel::steer`](super::channel::Channel::steer) stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Steered {
    pub steer_id: i64,
    /// How the agent will be given it (the delivery's own `mode` may differ: a codex steer the
    /// running turn refused goes as the next turn).
    pub route: &'static str,
    /// The task has not started yet: the steer goes to it once it runs.
    pub queued_for_start: bool,
}

/// The monitor's side of a task's steers.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    /// Steers handed to the supervisor by this daemon.
    sent: HashSet<i64>,
    /// The store was read for steers to hand over since the last wake.
    loaded: bool,
    /// Not before this (a FIFO that could not be written).
    retry_at_ms: i64,
    /// How far the supervisor's record of deliveries was read.
    offset: u64,
    /// The agent's stdin is closed once it started: the return channel delivers its steers.
    one_shot: bool,
}

impl Tracker {
    pub(super) fn for_launch(launch: &LaunchPlan) -> Tracker {
        Tracker { one_shot: matches!(launch.stdin, Stdin::Null | Stdin::Prompt), ..Tracker::default() }
    }
}

/// Set when a task got a new steer: its monitor reads the store on its next tick.
#[derive(Debug, Default)]
pub(super) struct Mailbox(AtomicBool);

impl Mailbox {
    fn wake(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

/// How a task's agent can be given a steer (the first mode it will be tried with), or why it
/// cannot, naming the agent.
pub(super) fn route(launch: &LaunchPlan, agent: &str, interrupt: bool) -> std::result::Result<&'static str, String> {
    // A pod's supervisor takes steers over the stdin pump, and its deliveries come back with
    // the mirror (`runner/kubernetes`); a one-shot agent's return channel there is not used for them.
    if launch.kube.is_some() && matches!(launch.stdin, Stdin::Null | Stdin::Prompt) {
        return Err(format!(
            "task of agent `{agent}` runs one-shot in a Kubernetes pod and cannot hear a steer; cancel it and \
             delegate again with the new instructions, or let it finish and `caesar continue` it"
        ));
    }
    match (&launch.stdin, interrupt) {
        (Stdin::Control { .. }, false) => Ok(mode::STDIN_MESSAGE),
        (Stdin::Control { .. }, true) => Ok(mode::INTERRUPT_THEN_STDIN_MESSAGE),
        (Stdin::Session { protocol: SessionProtocol::Acp, .. }, false) => Ok(mode::NEXT_PROMPT),
        (Stdin::Session { protocol: SessionProtocol::Acp, .. }, true) => Ok(mode::CANCEL_THEN_PROMPT),
        (Stdin::Session { protocol: SessionProtocol::CodexAppServer, .. }, false) => Ok(mode::TURN_STEER),
        (Stdin::Session { protocol: SessionProtocol::CodexAppServer, .. }, true) => Ok(mode::INTERRUPT_THEN_NEW_TURN),
        (Stdin::Null | Stdin::Prompt, false) if launch.channel => Ok(mode::CHANNEL_REPLY),
        (Stdin::Null | Stdin::Prompt, true) if launch.channel => Err(format!(
            "agent `{agent}` runs one-shot: a steer reaches it only in the answer of its next call of the return \
             channel, and its turn cannot be interrupted; steer without --interrupt, or cancel the task"
        )),
        (Stdin::Null | Stdin::Prompt, _) => Err(format!(
            "agent `{agent}` runs one-shot (its input is closed once it started) and cannot hear a steer; \
             cancel the task and delegate again with the new instructions, or let it finish and \
             `caesar continue` it"
        )),
    }
}

/// Checks a steer's text: not empty, not past [`MAX_STEER_BYTES`].
fn check_text(text: &str) -> Result<()> {
    if text.trim().is_empty() {
        return Err(Error::Invalid("the steer is empty: say what the agent should know".into()));
    }
    if text.len() > MAX_STEER_BYTES {
        return Err(Error::Invalid(format!(
            "the steer is {} bytes, past the limit of {MAX_STEER_BYTES}; say it in fewer words, or put the \
             details in a file in the task's worktree and point the agent to it",
            text.len()
        )));
    }
    Ok(())
}

/// Steers are part of the channel scope: what a caller says to a task's agent.
impl super::channel::Channel {
    /// The steers waiting for a one-shot agent that called its return channel: marked delivered
    /// (`channel_reply`, a `steer` event each) and returned, for the call's answer. Nothing for
    /// an agent that hears steers otherwise; a failure to read them is logged, never the call's.
    pub fn channel_steers(&self, record: &crate::store::TaskRecord) -> Vec<String> {
        if !matches!(record.launch.stdin, Stdin::Null | Stdin::Prompt) {
            return Vec::new();
        }
        let pending = match self.store.pending_steers(&record.id) {
            Ok(p) if !p.is_empty() => p,
            Ok(_) => return Vec::new(),
            Err(e) => {
                warn!(task_id = %record.id, "reading the task's steers failed: {e}");
                return Vec::new();
            }
        };
        let Some(live) = self.runs.get(&record.id) else { return Vec::new() };
        let (mut texts, mut bodies) = (Vec::new(), Vec::new());
        for row in pending.into_iter().filter(|r| !r.interrupt) {
            if let Ok(Some(row)) =
                self.store.finish_steer(&record.id, row.id, SteerState::Delivered, mode::CHANNEL_REPLY, now_ms())
            {
                bodies.push(event(&row, mode::CHANNEL_REPLY, true));
                texts.push(row.text);
            }
        }
        if !bodies.is_empty()
            && let Err(e) =
                self.runs.emit_events(&record.id, std::path::Path::new(&record.task_dir), &live, bodies, None)
        {
            warn!(task_id = %record.id, "storing steer events failed: {e}");
        }
        texts
    }

    /// Stores a steer for a task that has not ended, and wakes its monitor to deliver it.
    /// Refused: an unknown task, an ended one (pointing to `continue`), one being cancelled, an
    /// agent that cannot hear it, bad text, a full queue.
    pub fn steer(&self, id: &str, text: &str, interrupt: bool) -> Result<Steered> {
        check_text(text)?;
        let record = super::observe::find_task(&self.store, id)?;
        if record.status.is_terminal() {
            return Err(Error::Precondition(format!(
                "task {id} has ended ({}): a steer reaches only a pending or running task; \
                 `caesar continue {id} \"<text>\"` starts a new task in its worktree",
                record.status.as_str()
            )));
        }
        if record.cancel_requested {
            return Err(Error::Precondition(format!("task {id} is being cancelled: it cannot be steered")));
        }
        let route = route(&record.launch, &record.agent, interrupt).map_err(Error::Precondition)?;
        let stored = match self.store.insert_steer(id, text, interrupt, MAX_PENDING_STEERS, now_ms())? {
            Ok(row) => row,
            Err(waiting) => {
                return Err(Error::Exhausted(format!(
                    "task {id} has {waiting} steers waiting to be delivered (the most is {MAX_PENDING_STEERS}); \
                     wait for the agent to take them, or cancel the task"
                )));
            }
        };
        // Handed to a running task's supervisor at once, so that what the caller sends next
        // (an answer) comes after it; otherwise (not started, FIFO not there yet) its monitor
        // hands it over. A steer sent twice is taken once.
        let order = order_line(&SteerOrder { id: stored.id, text: stored.text, interrupt });
        let dir = TaskDir::new(&record.task_dir);
        let handed = route == mode::CHANNEL_REPLY
            || record.status == TaskStatus::Running
                && takes_steers(&dir)
                && record.run.as_ref().is_some_and(|h| self.runner.write_stdin(h, &dir, &order).is_ok());
        if !handed && let Some(live) = self.runs.get(id) {
            live.steers.wake();
        }
        Ok(Steered { steer_id: stored.id, route, queued_for_start: record.status == TaskStatus::Pending })
    }
}

/// One turn of the monitor for a task's steers: record what the supervisor delivered (a
/// `steer` event each), then hand it the stored steers it has not had from this daemon. At the
/// run's end, the steers left are marked undelivered.
pub(super) fn tick(engine: &Engine, run: &mut Run, at_end: bool) {
    let daemon_files = run.dir.daemon_files();
    let (deliveries, offset) = read_deliveries(&daemon_files, run.steer.offset);
    run.steer.offset = offset;
    if !deliveries.is_empty() || at_end {
        match engine.store.pending_steers(&run.id) {
            Ok(pending) => record_ends(engine, run, ends_of(&pending, &deliveries, at_end)),
            Err(e) => warn!(task_id = %run.id, "reading the task's steers failed: {e}"),
        }
    }
    if !at_end {
        hand_over(engine, run);
    }
}

/// The ends to record: each delivery of a steer still pending (one already
/// recorded, before a daemon restart, is left out), and at the run's end
/// every steer left, undelivered.
fn ends_of(
    pending: &[crate::store::SteerRow],
    deliveries: &[crate::supervisor::steer::Delivery],
    at_end: bool,
) -> Vec<(crate::store::SteerRow, SteerEnd)> {
    let mut ends: Vec<(crate::store::SteerRow, SteerEnd)> = Vec::new();
    for d in deliveries {
        if let Some(row) = pending.iter().find(|r| r.id == d.id && !ends.iter().any(|(e, _)| e.id == d.id)) {
            let end = SteerEnd { id: d.id, state: SteerState::Delivered, mode: d.mode.clone(), at_ms: d.at_ms };
            ends.push((row.clone(), end));
        }
    }
    if at_end {
        let why = "undelivered: the run ended before the agent could be given it";
        let delivered: HashSet<i64> = ends.iter().map(|(e, _)| e.id).collect();
        for row in pending.iter().filter(|r| !delivered.contains(&r.id)) {
            let end = SteerEnd { id: row.id, state: SteerState::Undelivered, mode: why.to_owned(), at_ms: now_ms() };
            ends.push((row.clone(), end));
        }
    }
    ends
}

/// Records steers' ends with their events in one transaction; if one was
/// ended meanwhile, each of the others on its own.
fn record_ends(engine: &Engine, run: &mut Run, ends: Vec<(crate::store::SteerRow, SteerEnd)>) {
    if ends.is_empty() {
        return;
    }
    let all = record(engine, run, &ends);
    if !matches!(all, Ok(true)) && ends.len() > 1 {
        for one in &ends {
            let _ = record(engine, run, std::slice::from_ref(one));
        }
    } else if let Err(e) = all {
        warn!(task_id = %run.id, "recording the task's steers failed: {e}");
    }
}

fn record(engine: &Engine, run: &mut Run, ends: &[(crate::store::SteerRow, SteerEnd)]) -> Result<bool> {
    let bodies: Vec<EventBody> =
        ends.iter().map(|(row, end)| event(row, &end.mode, end.state == SteerState::Delivered)).collect();
    let only: Vec<SteerEnd> = ends.iter().map(|(_, end)| end.clone()).collect();
    let mut stored = false;
    engine.runs.emit_with(&run.id, run.dir.root(), &run.live, bodies, |records| {
        stored = engine.store.finish_steers_with_events(&run.id, &only, records)?;
        Ok(stored)
    })?;
    Ok(stored)
}

/// Writes each stored steer this daemon has not handed over yet on the task's FIFO.
fn hand_over(engine: &Engine, run: &mut Run) {
    let woken = run.live.steers.take();
    if run.steer.one_shot {
        // A one-shot agent: the return channel delivers (`Engine::channel_steers`).
        return;
    }
    if (run.steer.loaded && !woken) || now_ms() < run.steer.retry_at_ms {
        if woken {
            run.live.steers.wake();
        }
        return;
    }
    let Some(handle) = &run.handle else { return };
    if !takes_steers(&run.dir) {
        // Not yet (the supervisor is starting), or never (one started by an older caesard,
        // which would hand the order to the agent as is): the steers stay stored.
        run.steer.loaded = false;
        run.steer.retry_at_ms = now_ms() + RETRY_MS;
        return;
    }
    let pending = match engine.store.pending_steers(&run.id) {
        Ok(p) => p,
        Err(e) => {
            warn!(task_id = %run.id, "reading the task's steers failed: {e}");
            return;
        }
    };
    run.steer.loaded = true;
    let unsent: Vec<_> = pending.into_iter().filter(|r| !run.steer.sent.contains(&r.id)).collect();
    for row in unsent {
        let line = order_line(&SteerOrder { id: row.id, text: row.text, interrupt: row.interrupt });
        match engine.runner.write_stdin(handle, &run.dir, &line) {
            Ok(()) => {
                run.steer.sent.insert(row.id);
            }
            Err(e) => {
                // The supervisor may not hold its FIFO yet (just started) or any more (the
                // session fell back to a one-shot command): tried again a moment later.
                tracing::debug!(task_id = %run.id, "cannot hand steer {} to the supervisor yet: {e}", row.id);
                run.steer.loaded = false;
                run.steer.retry_at_ms = now_ms() + RETRY_MS;
                return;
            }
        }
    }
}

/// Whether the task's supervisor takes steers: it makes its record of deliveries before its FIFO.
fn takes_steers(dir: &crate::task_dir::TaskDir) -> bool {
    std::fs::symlink_metadata(dir.daemon_files().join(crate::supervisor::steer::STEERS_DELIVERED))
        .is_ok_and(|m| m.is_file())
}

fn event(row: &crate::store::SteerRow, how: &str, delivered: bool) -> EventBody {
    let text = if row.text.chars().count() > EVENT_TEXT_CHARS {
        let mut t: String = row.text.chars().take(EVENT_TEXT_CHARS).collect();
        t.push('…');
        t
    } else {
        row.text.clone()
    };
    EventBody::Steer { steer_id: row.id, text, mode: how.to_owned(), delivered, interrupt: row.interrupt }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steer_is_routed_by_protocol_and_refused_by_name_where_it_cannot_be_heard() {
        let mut launch = LaunchPlan {
            stdin: Stdin::Control { initial: String::new(), close_after: "{\"type\":\"result\"".into() },
            ..LaunchPlan::default()
        };
        assert_eq!(route(&launch, "claude", false), Ok(mode::STDIN_MESSAGE));
        launch.stdin = Stdin::Session {
            protocol: SessionProtocol::CodexAppServer,
            initial: String::new(),
            opening: String::new(),
        };
        assert_eq!(route(&launch, "codex", false), Ok(mode::TURN_STEER));
        assert_eq!(route(&launch, "codex", true), Ok(mode::INTERRUPT_THEN_NEW_TURN));
        launch.stdin =
            Stdin::Session { protocol: SessionProtocol::Acp, initial: String::new(), opening: String::new() };
        assert_eq!(route(&launch, "gemini", true), Ok(mode::CANCEL_THEN_PROMPT));
        launch.stdin = Stdin::Prompt;
        let e = route(&launch, "opencode", false).unwrap_err();
        assert!(e.contains("`opencode`") && e.contains("cannot hear a steer"), "{e}");
        // With the return channel, the answer of its next channel call; never an interrupt.
        launch.channel = true;
        assert_eq!(route(&launch, "opencode", false), Ok(mode::CHANNEL_REPLY));
        assert!(route(&launch, "opencode", true).unwrap_err().contains("without --interrupt"));
        launch.stdin = Stdin::Null;
        launch.kube = Some(Default::default());
        assert!(route(&launch, "claude", false).unwrap_err().contains("Kubernetes"));
        launch.stdin = Stdin::Control { initial: String::new(), close_after: String::new() };
        assert_eq!(route(&launch, "claude", false), Ok(mode::STDIN_MESSAGE), "a pod's held stdin hears it");
    }

    #[test]
    fn a_steer_too_large_or_empty_is_refused_saying_so() {
        let e = check_text(&"x".repeat(10 << 20)).unwrap_err().to_string();
        assert!(e.contains("10485760 bytes") && e.contains(&MAX_STEER_BYTES.to_string()), "{e}");
        assert!(check_text("  \n").unwrap_err().to_string().contains("empty"));
        assert!(check_text("use the v2 API").is_ok());
    }
}

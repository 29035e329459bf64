//! Steers (issue 31): what the daemon tells a running agent unasked, carried out by the
//! supervisor, which holds the agent's stdin and knows where its protocol stands.
//!
//! The daemon writes a steer as one line on the task's FIFO ([`order_line`]); the forwarder
//! hands it here instead of to the agent. What becomes of it depends on the protocol:
//!
//! - a stream with a control protocol (claude's stream-json): a user message at once (after an
//!   `interrupt` control request for `--interrupt`), and stdin stays open until every user
//!   message's turn has ended;
//! - ACP: queued until the running prompt's answer, then one `session/prompt` in the same
//!   session instead of closing stdin (`session/cancel` first for `--interrupt`);
//! - codex app-server: `turn/steer` on the running turn (`turn/interrupt`, then a new
//!   `turn/start` once the turn completed, for `--interrupt`; a new `turn/start` also for a steer
//!   the running turn refused or that came as it ended).
//!
//! Each steer is taken once, whatever the daemon sends again after a restart (the supervisor
//! outlives the daemon), and each delivery is appended to [`STEERS_DELIVERED`], from which
//! the daemon records it and emits its `steer` event.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::task_dir::STEERS_DELIVERED;

/// The start of a FIFO line that is a steer for the supervisor, never a line for the agent.
pub const ORDER_PREFIX: &str = "{\"caesar_steer\":";

use crate::provider::codex_app::ID_STEER_BASE as CODEX_STEER_ID_BASE;

/// One steer, as the daemon hands it to the supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerOrder {
    /// The steer's id in the daemon's store: the supervisor takes each id once.
    pub id: i64,
    pub text: String,
    /// End the running turn first, then say it.
    #[serde(default)]
    pub interrupt: bool,
}

/// The FIFO line that hands `order` to the supervisor.
pub fn order_line(order: &SteerOrder) -> String {
    json!({ "caesar_steer": order }).to_string()
}

/// The order a FIFO line carries, if it is one.
pub(super) fn parse_order(line: &[u8]) -> Option<SteerOrder> {
    if !line.starts_with(ORDER_PREFIX.as_bytes()) {
        return None;
    }
    let v: Value = serde_json::from_slice(line.trim_ascii()).ok()?;
    serde_json::from_value(v.get("caesar_steer")?.clone()).ok()
}

/// How a steer reached the agent: the `mode` of its `steer` event.
pub mod mode {
    /// A user message on the held stdin (claude stream-json).
    pub const STDIN_MESSAGE: &str = "stdin_message";
    /// The control protocol's `interrupt`, then a user message (claude stream-json).
    pub const INTERRUPT_THEN_STDIN_MESSAGE: &str = "interrupt_then_stdin_message";
    /// `turn/steer` on the running turn (codex app-server).
    pub const TURN_STEER: &str = "turn_steer";
    /// A new `turn/start` once the turn the steer missed completed (codex app-server).
    pub const NEW_TURN: &str = "new_turn";
    /// `turn/interrupt`, then a new `turn/start` (codex app-server).
    pub const INTERRUPT_THEN_NEW_TURN: &str = "interrupt_then_new_turn";
    /// A new `session/prompt` at the end of the running one (ACP).
    pub const NEXT_PROMPT: &str = "next_prompt";
    /// `session/cancel`, then a new `session/prompt` (ACP).
    pub const CANCEL_THEN_PROMPT: &str = "cancel_then_prompt";
    /// In the answer of the agent's next call of the return channel (`get_task`,
    /// `report_progress`, `ask_orchestrator`): a one-shot agent (the daemon delivers it).
    pub const CHANNEL_REPLY: &str = "channel_reply";
}

/// One line of [`STEERS_DELIVERED`]: a steer the agent was given, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub id: i64,
    pub mode: String,
    pub at_ms: i64,
}

/// The deliveries recorded in `daemon_files`'s [`STEERS_DELIVERED`] from byte `from` on (complete
/// lines only), and the offset after them.
pub fn read_deliveries(daemon_files: &Path, from: u64) -> (Vec<Delivery>, u64) {
    let Ok(bytes) = crate::safe_fs::read_capped(&daemon_files.join(STEERS_DELIVERED), 16 << 20) else {
        return (Vec::new(), from);
    };
    let start = (from as usize).min(bytes.len());
    let Some(end) = bytes[start..].iter().rposition(|b| *b == b'\n').map(|i| start + i + 1) else {
        return (Vec::new(), from);
    };
    let found = bytes[start..end].split(|b| *b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect();
    (found, end as u64)
}

/// Which protocol the steers go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    /// A stream with a control protocol on stdin (claude).
    Stream,
    Acp,
    Codex,
}

/// The steers of one run, shared by the forwarder (which takes orders) and the output copier
/// (which sees turns end).
#[derive(Debug)]
pub(super) struct Steering {
    protocol: Protocol,
    /// Where deliveries are recorded (the supervisor's `--task-dir`).
    dir: PathBuf,
    seen: HashSet<i64>,
    /// Taken, not yet delivered: waiting for the turn's end (ACP, codex's interrupt) or for the
    /// turn's id (codex).
    queued: VecDeque<SteerOrder>,
    /// codex: `turn/steer` requests sent, by JSON-RPC id, until their answer.
    in_flight: HashMap<u64, SteerOrder>,
    /// Stream: user messages written whose turn's `result` has not been seen (the first
    /// message, `stdin.initial`, counts).
    open_turns: u32,
    /// A steer's interrupt (or cancel) was sent and its turn has not ended yet.
    interrupting: bool,
    /// The session (ACP) or thread (codex) and the running turn (codex), as the opening knows them.
    session: Option<String>,
    turn: Option<String>,
    running: bool,
    /// The agent's stdin is closed: nothing more reaches it.
    pub(super) closed: bool,
    /// Output lines seen, for the stream's linger.
    pub(super) lines: u64,
}

pub(super) type SharedSteering = Arc<Mutex<Steering>>;

/// Locks the steering, whatever a panicking thread left.
pub(super) fn lock(s: &SharedSteering) -> std::sync::MutexGuard<'_, Steering> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Steering {
    pub(super) fn new(protocol: Protocol, dir: &Path) -> Steering {
        Steering {
            protocol,
            dir: dir.to_path_buf(),
            seen: HashSet::new(),
            queued: VecDeque::new(),
            in_flight: HashMap::new(),
            open_turns: 1,
            interrupting: false,
            session: None,
            turn: None,
            running: false,
            closed: false,
            lines: 0,
        }
    }

    pub(super) fn shared(protocol: Protocol, dir: &Path) -> SharedSteering {
        Arc::new(Mutex::new(Steering::new(protocol, dir)))
    }

    /// What the opening knows now: the session or thread, the running turn, whether one runs.
    /// A codex turn whose id just became known gets the steers that waited for it.
    pub(super) fn sync(&mut self, opening: &super::opening::Opening) -> Vec<String> {
        self.session = opening.session().map(str::to_owned);
        self.running = opening.running();
        let turn = opening.turn().map(str::to_owned);
        let new_turn = turn.is_some() && turn != self.turn;
        self.turn = turn;
        if self.protocol == Protocol::Codex && new_turn && !self.interrupting {
            let waiting: Vec<SteerOrder> = self.queued.drain(..).collect();
            return waiting.into_iter().filter_map(|o| self.codex_steer(o)).collect();
        }
        Vec::new()
    }

    /// A steer from the daemon: the lines to write on the agent's stdin now (none when it
    /// waits, was taken before, or can no longer be delivered).
    pub(super) fn on_order(&mut self, order: SteerOrder) -> Vec<String> {
        if self.closed || !self.seen.insert(order.id) {
            return Vec::new();
        }
        match self.protocol {
            Protocol::Stream => {
                let mut lines = Vec::new();
                let mode = if order.interrupt {
                    lines.push(crate::provider::claude_interrupt_line());
                    mode::INTERRUPT_THEN_STDIN_MESSAGE
                } else {
                    mode::STDIN_MESSAGE
                };
                lines.push(crate::provider::claude_user_message(&order.text));
                self.open_turns += 1;
                self.ack(order.id, mode);
                lines
            }
            Protocol::Acp => {
                let cancel = order.interrupt && self.running && !self.interrupting;
                self.queued.push_back(order);
                match self.session.as_deref().filter(|_| cancel) {
                    Some(session) => {
                        self.interrupting = true;
                        vec![crate::provider::acp::cancel_line(session)]
                    }
                    None => Vec::new(),
                }
            }
            Protocol::Codex => {
                if order.interrupt {
                    let interrupt = self.running && !self.interrupting;
                    self.queued.push_back(order);
                    return match self.session.as_deref().filter(|_| interrupt) {
                        Some(thread) => {
                            self.interrupting = true;
                            vec![crate::provider::codex_app::interrupt_line(thread)]
                        }
                        None => Vec::new(),
                    };
                }
                if self.running && self.turn.is_some() && !self.interrupting {
                    return self.codex_steer(order).into_iter().collect();
                }
                self.queued.push_back(order);
                Vec::new()
            }
        }
    }

    /// `turn/steer` of `order` on the running turn, kept until its answer.
    fn codex_steer(&mut self, order: SteerOrder) -> Option<String> {
        let (thread, turn) = (self.session.clone()?, self.turn.clone()?);
        let id = CODEX_STEER_ID_BASE + order.id.max(0) as u64;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "turn/steer", "params": {
            "threadId": thread, "expectedTurnId": turn, "input": [text_input(&order.text)]}})
        .to_string();
        self.in_flight.insert(id, order);
        Some(line)
    }

    /// One complete line of a codex server's output: the answer to a `turn/steer` delivers its
    /// steer, or (refused: the turn ended meanwhile) queues it for a new turn.
    pub(super) fn on_codex_line(&mut self, line: &[u8]) {
        if self.protocol != Protocol::Codex || self.in_flight.is_empty() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line.trim_ascii()) else { return };
        if v.get("method").is_some() {
            return;
        }
        let Some(order) = v.get("id").and_then(Value::as_u64).and_then(|id| self.in_flight.remove(&id)) else {
            return;
        };
        if v.get("error").is_some() {
            self.queued.push_back(order);
        } else {
            self.ack(order.id, mode::TURN_STEER);
        }
    }

    /// The session's turn ended (`line` is what ended it): the request that carries the queued
    /// steers as the next turn, or `None` to close stdin. A turn cancelled by someone else (a
    /// cancel of the task) is never followed by one.
    pub(super) fn at_turn_end(&mut self, line: &[u8]) -> Option<String> {
        let v: Value = serde_json::from_slice(line.trim_ascii()).unwrap_or(Value::Null);
        let stopped_by_other = match self.protocol {
            Protocol::Acp => v.pointer("/result/stopReason").and_then(Value::as_str) == Some("cancelled"),
            Protocol::Codex => v.pointer("/params/turn/status").and_then(Value::as_str) == Some("interrupted"),
            Protocol::Stream => false,
        } && !self.interrupting;
        let interrupted = std::mem::take(&mut self.interrupting);
        if self.queued.is_empty() || stopped_by_other {
            self.closed = true;
            return None;
        }
        let orders: Vec<SteerOrder> = self.queued.drain(..).collect();
        let input: Vec<Value> = orders.iter().map(|o| text_input(&o.text)).collect();
        let (line, by_interrupt, otherwise) = match self.protocol {
            Protocol::Acp => {
                let Some(session) = self.session.clone() else {
                    self.closed = true;
                    return None;
                };
                let prompt: Vec<Value> = orders.iter().map(|o| json!({"type": "text", "text": o.text})).collect();
                let line = json!({"jsonrpc": "2.0", "id": crate::provider::acp::ID_PROMPT, "method": "session/prompt",
                    "params": {"sessionId": session, "prompt": prompt}});
                (line, mode::CANCEL_THEN_PROMPT, mode::NEXT_PROMPT)
            }
            Protocol::Codex => {
                let Some(thread) = self.session.clone() else {
                    self.closed = true;
                    return None;
                };
                let line = json!({"jsonrpc": "2.0", "id": crate::provider::codex_app::ID_TURN_START,
                    "method": "turn/start", "params": {"threadId": thread, "input": input}});
                (line, mode::INTERRUPT_THEN_NEW_TURN, mode::NEW_TURN)
            }
            Protocol::Stream => return None,
        };
        for o in &orders {
            self.ack(o.id, if interrupted && o.interrupt { by_interrupt } else { otherwise });
        }
        self.turn = None;
        Some(line.to_string())
    }

    /// A stream's turn ended (its `result` line): whether stdin closes now (no user message is
    /// left without its turn).
    pub(super) fn stream_turn_ended(&mut self) -> bool {
        self.open_turns = self.open_turns.saturating_sub(1);
        self.interrupting = false;
        if self.open_turns == 0 {
            self.closed = true;
        }
        self.closed
    }

    /// Records that steer `id` reached the agent, for the daemon.
    fn ack(&self, id: i64, mode: &str) {
        let line = serde_json::to_string(&Delivery { id, mode: mode.to_owned(), at_ms: crate::clock::now_ms() })
            .unwrap_or_default();
        let path = self.dir.join(STEERS_DELIVERED);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()).and_then(|()| f.sync_data()));
        if let Err(e) = written {
            tracing::warn!("cannot record steer {id} delivered in {}: {e}", path.display());
        }
    }
}

/// A text item of a codex turn's input.
fn text_input(text: &str) -> Value {
    json!({"type": "text", "text": text, "text_elements": []})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: i64, text: &str, interrupt: bool) -> SteerOrder {
        SteerOrder { id, text: text.to_owned(), interrupt }
    }

    fn delivered(dir: &Path) -> Vec<(i64, String)> {
        read_deliveries(dir, 0).0.into_iter().map(|d| (d.id, d.mode)).collect()
    }

    #[test]
    fn an_order_line_reads_back_and_other_lines_are_not_orders() {
        let o = order(7, "use the other API\n\"quoted\"", true);
        let line = order_line(&o);
        assert!(!line.contains('\n'), "one line: {line}");
        assert_eq!(parse_order(line.as_bytes()), Some(o));
        assert_eq!(parse_order(br#"{"type":"control_response"}"#), None);
        assert_eq!(parse_order(br#"{"caesar_steer":{"id":"x"}}"#), None);
    }

    #[test]
    fn a_stream_steer_is_a_user_message_at_once_taken_once_and_stdin_waits_for_its_turn() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Steering::new(Protocol::Stream, d.path());
        let lines = s.on_order(order(1, "also add tests", false));
        assert_eq!(lines.len(), 1);
        let msg: Value = serde_json::from_str(lines[0].trim()).unwrap();
        assert_eq!((msg["type"].as_str(), msg["message"]["content"].as_str()), (Some("user"), Some("also add tests")));
        assert!(s.on_order(order(1, "also add tests", false)).is_empty(), "the same steer again is dropped");
        assert!(!s.stream_turn_ended(), "the first turn ended; the steer's has not");
        assert!(s.stream_turn_ended(), "both turns ended: stdin closes");
        assert!(s.on_order(order(2, "late", false)).is_empty(), "nothing reaches a closed stdin");
        assert_eq!(delivered(d.path()), vec![(1, mode::STDIN_MESSAGE.to_owned())]);
        let mut s = Steering::new(Protocol::Stream, d.path());
        let lines = s.on_order(order(3, "stop; do X", true));
        assert!(lines[0].contains("\"interrupt\"") && lines[1].contains("stop; do X"), "{lines:?}");
    }

    fn acp_opening() -> super::super::opening::Opening {
        let v = crate::provider::acp::opening("/w", None, "do it");
        let mut o =
            super::super::opening::Opening::from_json(crate::launch::SessionProtocol::Acp, v.to_string().as_bytes())
                .unwrap();
        o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        o.on_line(br#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s1"}}"#);
        o
    }

    #[test]
    fn an_acp_steer_waits_for_the_turns_end_and_goes_as_the_next_prompt() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Steering::new(Protocol::Acp, d.path());
        let mut o = acp_opening();
        s.sync(&o);
        assert!(s.on_order(order(4, "mind the docs", false)).is_empty(), "queued while the turn runs");
        assert!(delivered(d.path()).is_empty());
        let end = br#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#;
        assert_eq!(o.on_line(end), super::super::opening::Step::Close);
        let next = s.at_turn_end(end).expect("the steer's prompt");
        let next: Value = serde_json::from_str(&next).unwrap();
        assert_eq!(next["method"], "session/prompt");
        assert_eq!(next["params"]["sessionId"], "s1");
        assert_eq!(next["params"]["prompt"][0]["text"], "mind the docs");
        o.resume_turn();
        s.sync(&o);
        assert!(o.running());
        assert_eq!(delivered(d.path()), vec![(4, mode::NEXT_PROMPT.to_owned())]);
        assert_eq!(s.at_turn_end(end), None, "no steer left: stdin closes");
        // --interrupt: session/cancel now, the prompt after the cancelled turn.
        let mut s = Steering::new(Protocol::Acp, d.path());
        s.sync(&o);
        let cancel = s.on_order(order(5, "stop that", true));
        assert!(cancel[0].contains("session/cancel") && cancel[0].contains("s1"), "{cancel:?}");
        let cancelled = br#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#;
        assert!(s.at_turn_end(cancelled).is_some());
        // A turn cancelled by the task's cancel is not followed by a steer's prompt.
        let mut s = Steering::new(Protocol::Acp, d.path());
        s.sync(&o);
        s.on_order(order(6, "later", false));
        assert_eq!(s.at_turn_end(cancelled), None);
    }

    #[test]
    fn a_codex_steer_goes_on_the_running_turn_and_one_it_refused_starts_the_next() {
        use crate::oacp::Mode;
        use crate::provider::Invocation;
        let d = tempfile::tempdir().unwrap();
        let inv = Invocation::bare("do it", Mode::Write);
        let v = crate::provider::codex_app::opening(&inv);
        let mut o = super::super::opening::Opening::from_json(
            crate::launch::SessionProtocol::CodexAppServer,
            v.to_string().as_bytes(),
        )
        .unwrap();
        let mut s = Steering::new(Protocol::Codex, d.path());
        o.on_line(br#"{"id":1,"result":{}}"#);
        o.on_line(br#"{"id":2,"result":{"thread":{"id":"th1"}}}"#);
        s.sync(&o);
        assert!(s.on_order(order(1, "early", false)).is_empty(), "no turn id yet: it waits");
        o.on_line(br#"{"id":3,"result":{"turn":{"id":"tu1"}}}"#);
        let steered = s.sync(&o);
        let steer: Value = serde_json::from_str(&steered[0]).unwrap();
        assert_eq!(steer["method"], "turn/steer");
        assert_eq!(
            (steer["params"]["threadId"].as_str(), steer["params"]["expectedTurnId"].as_str()),
            (Some("th1"), Some("tu1"))
        );
        assert_eq!(steer["params"]["input"][0]["text"], "early");
        assert!(delivered(d.path()).is_empty(), "delivered once codex says so");
        s.on_codex_line(format!(r#"{{"id":{},"result":{{"turnId":"tu1"}}}}"#, CODEX_STEER_ID_BASE + 1).as_bytes());
        assert_eq!(delivered(d.path()), vec![(1, mode::TURN_STEER.to_owned())]);
        // Refused (the turn was ending): it goes as the next turn.
        let again = s.on_order(order(2, "late", false));
        s.on_codex_line(
            format!(r#"{{"id":{},"error":{{"message":"no active turn"}}}}"#, CODEX_STEER_ID_BASE + 2).as_bytes(),
        );
        assert_eq!(again.len(), 1);
        let end = br#"{"method":"turn/completed","params":{"turn":{"id":"tu1","status":"completed"}}}"#;
        let next: Value = serde_json::from_str(&s.at_turn_end(end).unwrap()).unwrap();
        assert_eq!(
            (next["method"].as_str(), next["params"]["input"][0]["text"].as_str()),
            (Some("turn/start"), Some("late"))
        );
        assert_eq!(delivered(d.path())[1], (2, mode::NEW_TURN.to_owned()));
        // --interrupt: turn/interrupt now, a new turn after it.
        let mut s = Steering::new(Protocol::Codex, d.path());
        s.sync(&o);
        let lines = s.on_order(order(3, "stop", true));
        assert!(lines[0].contains("turn/interrupt"), "{lines:?}");
        let interrupted = br#"{"method":"turn/completed","params":{"turn":{"id":"tu1","status":"interrupted"}}}"#;
        assert!(s.at_turn_end(interrupted).unwrap().contains("stop"));
        assert_eq!(delivered(d.path())[2], (3, mode::INTERRUPT_THEN_NEW_TURN.to_owned()));
    }
}

//! The opening of a codex app-server session, carried out by the supervisor (see
//! [`super::opening`] for why the supervisor and not the daemon): after `initialize`'s answer it
//! sends the `initialized` notification and `thread/start` (`thread/resume` for a task that
//! continues a thread); after `thread/start`'s answer,
//! `turn/start` with the brief on the thread it names; once `turn/completed` arrives it closes
//! stdin, which makes the server exit. A pure state machine over complete output lines.

use serde_json::{Value, json};

use super::opening::Step;
use crate::provider::codex_app::{ID_INITIALIZE, ID_THREAD_START, ID_TURN_START};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Initializing,
    Starting,
    Running,
    Done,
}

/// The opening of one codex app-server session.
#[derive(Debug, Clone)]
pub struct CodexOpening {
    thread_start: Value,
    turn_start: Value,
    phase: Phase,
    /// The thread to continue (`thread/resume`) where the task resumes one.
    resume: Option<String>,
    /// The thread the turn runs on, once `thread/start` named it (issue 31: steers go there).
    thread: Option<String>,
    /// The running turn, once `turn/start`'s answer named it (`turn/steer` must name it).
    turn: Option<String>,
}

/// The start of the line that ends the turn, recognised even when the line is longer than the
/// opening keeps (a turn's summary of items can be long).
const TURN_COMPLETED: &[u8] = br#"{"method":"turn/completed""#;

impl CodexOpening {
    /// The opening described by `opening` (written by [`crate::provider::codex_app::opening`]);
    /// `None` when it does not read.
    pub fn from_json(opening: &[u8]) -> Option<CodexOpening> {
        let v: Value = serde_json::from_slice(opening).ok()?;
        Some(CodexOpening {
            thread_start: v.get("thread_start")?.clone(),
            turn_start: v.get("turn_start")?.clone(),
            phase: Phase::Initializing,
            resume: v.get("resume").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned),
            thread: None,
            turn: None,
        })
    }

    /// The thread the turn runs on, once known.
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }

    /// The running turn's id, once `turn/start` answered.
    pub fn turn(&self) -> Option<&str> {
        self.turn.as_deref().filter(|_| self.phase == Phase::Running)
    }

    /// Whether a turn is running.
    pub fn running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// A steer's `turn/start` went out instead of closing stdin at the end of the last turn
    /// (issue 31): its `turn/completed` ends the session again.
    pub fn resume_turn(&mut self) {
        if self.thread.is_some() {
            self.phase = Phase::Running;
            self.turn = None;
        }
    }

    /// Why the opening is over without a turn, for a server whose output ended first.
    pub fn unanswered(&self) -> Option<&'static str> {
        match self.phase {
            Phase::Initializing => Some("codex app-server ended before answering initialize"),
            Phase::Starting if self.resume.is_some() => Some("codex app-server ended before answering thread/resume"),
            Phase::Starting => Some("codex app-server ended before answering thread/start"),
            _ => None,
        }
    }

    /// Whether the opening and the turn are over.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// One complete line of the server's output (without its newline).
    pub fn on_line(&mut self, line: &[u8]) -> Step {
        if self.phase == Phase::Done {
            return Step::Nothing;
        }
        if self.phase == Phase::Running && line.starts_with(TURN_COMPLETED) {
            self.phase = Phase::Done;
            return Step::Close;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line.trim_ascii()) else { return Step::Nothing };
        if let Some(method) = v.get("method").and_then(Value::as_str) {
            // Requests and notifications; only the end of the turn matters here.
            if self.phase == Phase::Running && method == "turn/completed" && v.get("id").is_none() {
                self.phase = Phase::Done;
                return Step::Close;
            }
            return Step::Nothing;
        }
        let Some(id) = v.get("id").and_then(Value::as_u64) else { return Step::Nothing };
        let error = v.get("error").map(|e| e.get("message").and_then(Value::as_str).unwrap_or("error").to_owned());
        match (self.phase, id) {
            (Phase::Initializing, ID_INITIALIZE) => {
                if let Some(e) = error {
                    self.phase = Phase::Done;
                    return Step::Failed(format!("initialize failed: {e}"));
                }
                self.phase = Phase::Starting;
                let initialized = json!({"jsonrpc": "2.0", "method": "initialized"});
                let (method, params) = match &self.resume {
                    Some(thread) => ("thread/resume", resume_params(&self.thread_start, thread)),
                    None => ("thread/start", self.thread_start.clone()),
                };
                let start = json!({"jsonrpc": "2.0", "id": ID_THREAD_START, "method": method, "params": params});
                Step::Write(format!("{initialized}\n{start}"))
            }
            (Phase::Starting, ID_THREAD_START) => {
                let thread = v.pointer("/result/thread/id").and_then(Value::as_str);
                match (error, thread) {
                    (None, Some(thread)) => {
                        self.phase = Phase::Running;
                        self.thread = Some(thread.to_owned());
                        let mut params = self.turn_start.clone();
                        params["threadId"] = json!(thread);
                        Step::Write(
                            json!({"jsonrpc": "2.0", "id": ID_TURN_START, "method": "turn/start", "params": params})
                                .to_string(),
                        )
                    }
                    (e, _) => {
                        self.phase = Phase::Done;
                        let what = if self.resume.is_some() { "thread/resume" } else { "thread/start" };
                        Step::Failed(format!("{what} failed: {}", e.unwrap_or_else(|| "no thread id".to_owned())))
                    }
                }
            }
            // The brief went out: a refused turn is the task's failure (the driver reads the
            // error), never a reason to fall back to `codex exec` and send it again.
            (Phase::Running, ID_TURN_START) if error.is_some() => {
                self.phase = Phase::Done;
                Step::Close
            }
            (Phase::Running, ID_TURN_START) => {
                self.turn = v.pointer("/result/turn/id").and_then(Value::as_str).map(str::to_owned);
                Step::Nothing
            }
            _ => Step::Nothing,
        }
    }
}

/// `thread/resume`'s params ([V] codex 0.171's schema, `ThreadResumeParams`): the thread, and
/// the same cwd, approval policy, sandbox, config overrides and model as a new thread would
/// get; `excludeTurns` so that the answer does not carry the whole history back.
fn resume_params(thread_start: &Value, thread: &str) -> Value {
    let mut params = json!({"threadId": thread, "excludeTurns": true});
    for key in ["cwd", "approvalPolicy", "sandbox", "config", "model"] {
        if let Some(v) = thread_start.get(key) {
            params[key] = v.clone();
        }
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::Mode;
    use crate::provider::Invocation;

    fn opening() -> CodexOpening {
        let inv = Invocation::bare("do it", Mode::Write);
        let o = crate::provider::codex_app::opening(&inv);
        CodexOpening::from_json(o.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_opening_sends_each_step_once_in_order_and_closes_at_the_turns_end() {
        let mut o = opening();
        assert_eq!(o.on_line(br#"{"id":2,"result":{"thread":{"id":"early"}}}"#), Step::Nothing);
        assert_eq!(o.on_line(br#"{"method":"turn/completed","params":{}}"#), Step::Nothing, "no turn yet");
        let Step::Write(start) = o.on_line(br#"{"id":1,"result":{"userAgent":"codex"}}"#) else { panic!() };
        let lines: Vec<Value> = start.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines[0]["method"], "initialized");
        assert!(lines[0].get("id").is_none(), "a notification");
        assert_eq!(lines[1]["method"], "thread/start");
        assert_eq!(lines[1]["params"]["cwd"], "/w");
        assert_eq!(lines[1]["params"]["approvalPolicy"], "on-request");
        assert_eq!(lines[1]["params"]["sandbox"], "workspace-write");
        assert_eq!(o.on_line(br#"{"id":1,"result":{}}"#), Step::Nothing, "a repeated answer sends nothing");
        let Step::Write(turn) = o.on_line(b"{\"id\":2,\"result\":{\"thread\":{\"id\":\"th1\"}}}\r") else { panic!() };
        let turn: Value = serde_json::from_str(&turn).unwrap();
        assert_eq!(turn["method"], "turn/start");
        assert_eq!(turn["params"]["threadId"], "th1");
        assert_eq!(turn["params"]["input"][0]["text"], "do it");
        assert_eq!(o.on_line(br#"{"id":3,"result":{"turn":{"id":"tu1"}}}"#), Step::Nothing);
        assert_eq!(
            o.on_line(br#"{"method":"item/commandExecution/requestApproval","id":0,"params":{}}"#),
            Step::Nothing
        );
        assert_eq!(o.on_line(b"not json"), Step::Nothing);
        let mut long = br#"{"method":"turn/completed","params":{"turn":{"items":["#.to_vec();
        long.extend(std::iter::repeat_n(b'x', 100));
        assert_eq!(o.on_line(&long), Step::Close, "a cut line still ends the turn");
        assert!(o.is_done());
        assert_eq!(o.on_line(br#"{"method":"turn/completed","params":{}}"#), Step::Nothing);
    }

    #[test]
    fn a_failed_opening_says_why_and_sends_no_turn() {
        let mut o = opening();
        assert!(matches!(o.on_line(br#"{"id":1,"result":{}}"#), Step::Write(_)));
        let step = o.on_line(br#"{"id":2,"error":{"code":-32600,"message":"bad cwd"}}"#);
        assert_eq!(step, Step::Failed("thread/start failed: bad cwd".into()));
        assert_eq!(o.on_line(br#"{"id":2,"result":{"thread":{"id":"t"}}}"#), Step::Nothing);
        let mut o = opening();
        assert_eq!(
            o.on_line(br#"{"id":1,"error":{"code":-1,"message":"nope"}}"#),
            Step::Failed("initialize failed: nope".into())
        );
        assert!(CodexOpening::from_json(b"{}").is_none());
        // A refused turn/start closes the session (the brief went out: no fallback).
        let mut o = opening();
        o.on_line(br#"{"id":1,"result":{}}"#);
        assert!(matches!(o.on_line(br#"{"id":2,"result":{"thread":{"id":"t"}}}"#), Step::Write(_)));
        assert_eq!(o.on_line(br#"{"id":3,"error":{"code":-32600,"message":"bad input"}}"#), Step::Close);
        assert_eq!(o.unanswered(), None);
    }

    #[test]
    fn a_resumed_task_resumes_its_thread() {
        let inv =
            Invocation { model: Some("m1"), resume_session: Some("th-old"), ..Invocation::bare("go on", Mode::Write) };
        let mut o = CodexOpening::from_json(crate::provider::codex_app::opening(&inv).to_string().as_bytes()).unwrap();
        let Step::Write(start) = o.on_line(br#"{"id":1,"result":{}}"#) else { panic!() };
        let resume: Value = serde_json::from_str(start.lines().nth(1).unwrap()).unwrap();
        assert_eq!(resume["method"], "thread/resume");
        assert_eq!(resume["id"], ID_THREAD_START);
        let p = &resume["params"];
        assert_eq!(
            (p["threadId"].as_str(), p["cwd"].as_str(), p["model"].as_str()),
            (Some("th-old"), Some("/w"), Some("m1"))
        );
        assert_eq!(p["approvalPolicy"], "on-request");
        assert_eq!(p["sandbox"], "workspace-write");
        assert_eq!(p["excludeTurns"], true);
        assert!(p.get("ephemeral").is_none(), "not a thread/resume param");
        let Step::Write(turn) = o.on_line(br#"{"id":2,"result":{"thread":{"id":"th-old"}}}"#) else { panic!() };
        let turn: Value = serde_json::from_str(&turn).unwrap();
        assert_eq!(
            (turn["method"].as_str(), turn["params"]["threadId"].as_str()),
            (Some("turn/start"), Some("th-old"))
        );
        // A thread codex cannot find fails the opening (and the exec fallback may run).
        let mut o = CodexOpening::from_json(crate::provider::codex_app::opening(&inv).to_string().as_bytes()).unwrap();
        o.on_line(br#"{"id":1,"result":{}}"#);
        let step = o.on_line(br#"{"id":2,"error":{"code":-32600,"message":"no rollout found for thread id th-old"}}"#);
        assert_eq!(step, Step::Failed("thread/resume failed: no rollout found for thread id th-old".into()));
    }
}

//! The opening of a session protocol, carried out by the supervisor rather than the daemon.
//!
//! ACP's handshake is three requests in order (`initialize`, `session/new`, `session/prompt`),
//! each waiting on the answer to the one before. Were the daemon to send them, a daemon killed
//! between reading an answer and writing the next request could not tell, once restarted,
//! whether it had written it: it would send twice or never. The supervisor holds the agent's
//! stdin for the whole run and outlives daemon restarts, so it sends all three itself as it
//! copies the agent's output, and closes stdin once the prompt's turn has ended (which is what
//! makes the agent exit). This is a pure state machine over complete output lines.

use serde_json::{Value, json};

use crate::launch::SessionProtocol;
use crate::provider::acp::{ID_INITIALIZE, ID_NEW_SESSION, ID_PROMPT};

/// The line the supervisor writes into `raw.log` when an ACP session could not be opened and it
/// runs the provider's one-shot stream command instead; from there on the output is a stream.
pub const ACP_FALLBACK_MARKER: &str = "caesar: the ACP handshake failed";

/// The line the supervisor writes into `raw.log` when the codex app-server could not be opened
/// (it ended before answering, or refused `initialize` or `thread/start`/`thread/resume`) and it
/// runs `codex exec --json` instead; from there on the output is codex's exec stream.
pub const CODEX_FALLBACK_MARKER: &str = "caesar: the codex app-server handshake failed";

/// What the supervisor does after one line of the agent's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing.
    Nothing,
    /// Write this line on the agent's stdin.
    Write(String),
    /// The turn is over: close the agent's stdin.
    Close,
    /// The handshake failed before the prompt was sent: close stdin; the reason is logged.
    Failed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Initializing,
    Opening,
    Prompting,
    Done,
}

/// The provider's one-shot stream command, run instead of the session when the handshake fails
/// before the prompt is sent (never after: a turn that started is never run twice).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fallback {
    /// The stream argv, without the program (which is the session's).
    pub args: Vec<String>,
    /// Environment the stream command needs on top of the session's.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// The stream command reads the prompt on stdin (issue 19: prompts out of argv), which the
    /// supervisor feeds from the task's prompt file; else stdin is `/dev/null`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin_prompt: bool,
}

/// The opening of one ACP session.
#[derive(Debug, Clone)]
pub struct AcpOpening {
    new_session: Value,
    prompt: Value,
    phase: Phase,
    /// The handshake failed (the phase is then `Done` with no prompt sent).
    failed: bool,
    /// The session to continue, where the task resumes one.
    resume: Option<String>,
    /// The session being loaded or resumed (the agent advertised it): its answer carries no id.
    continuing: Option<String>,
    /// The session the prompt went to (issue 31: a steer's prompt goes to the same one).
    session: Option<String>,
}

/// The most of one output line the opening looks at; answers to caesar's three requests are
/// far smaller (opencode's session/new, with every model it knows, is about 20 KB).
pub const MAX_OPENING_LINE: usize = 4 << 20;

impl AcpOpening {
    /// The opening described by `opening` (written by [`crate::provider::acp::opening`]);
    /// `None` when it does not read.
    pub fn from_json(opening: &[u8]) -> Option<AcpOpening> {
        let v: Value = serde_json::from_slice(opening).ok()?;
        Some(AcpOpening {
            new_session: v.get("new_session")?.clone(),
            prompt: v.get("prompt")?.clone(),
            phase: Phase::Initializing,
            failed: false,
            resume: v.get("resume").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned),
            continuing: None,
            session: None,
        })
    }

    /// The session the prompt went to, once it did.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Whether a prompt's turn is running.
    pub fn running(&self) -> bool {
        self.phase == Phase::Prompting
    }

    /// A steer's prompt went out instead of closing stdin at the end of the turn (issue 31):
    /// its answer ends the session's turn again.
    pub fn resume_turn(&mut self) {
        if self.session.is_some() && !self.failed {
            self.phase = Phase::Prompting;
        }
    }

    /// Whether the prompt went to the agent: from then on a failure is the turn's, and the
    /// stream fallback is no longer allowed.
    pub fn prompt_sent(&self) -> bool {
        matches!(self.phase, Phase::Prompting | Phase::Done) && !self.failed
    }

    /// Why the handshake is over without a prompt, for an agent whose output ended first.
    pub fn unanswered(&self) -> Option<&'static str> {
        match self.phase {
            Phase::Initializing => Some("the agent ended before answering initialize"),
            Phase::Opening => Some("the agent ended before answering session/new"),
            _ => None,
        }
    }

    /// Whether the handshake and the turn are over.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// One complete line of the agent's output (without its newline).
    pub fn on_line(&mut self, line: &[u8]) -> Step {
        if self.phase == Phase::Done {
            return Step::Nothing;
        }
        let Ok(v) = serde_json::from_slice::<Value>(trim(line)) else { return Step::Nothing };
        // Only responses (an id, no method) to caesar's own requests matter here.
        if v.get("method").is_some() {
            return Step::Nothing;
        }
        let Some(id) = v.get("id").and_then(Value::as_u64) else { return Step::Nothing };
        let error = v.get("error").map(|e| e.get("message").and_then(Value::as_str).unwrap_or("error").to_owned());
        match (self.phase, id) {
            (Phase::Initializing, ID_INITIALIZE) => {
                if let Some(e) = error {
                    self.phase = Phase::Done;
                    self.failed = true;
                    return Step::Failed(format!("initialize failed: {e}"));
                }
                self.phase = Phase::Opening;
                let caps = v.get("result").and_then(|r| r.get("agentCapabilities")).unwrap_or(&Value::Null);
                let (method, params) = match &self.resume {
                    // `session/resume` continues without replaying the history; `session/load`
                    // replays it first (the parser reads the replay as history, not as work).
                    Some(id) if caps.pointer("/sessionCapabilities/resume").is_some_and(|r| !r.is_null()) => {
                        ("session/resume", with_session(&self.new_session, id))
                    }
                    Some(id) if caps.get("loadSession").and_then(Value::as_bool) == Some(true) => {
                        ("session/load", with_session(&self.new_session, id))
                    }
                    _ => ("session/new", self.new_session.clone()),
                };
                if method != "session/new" {
                    self.continuing = self.resume.clone();
                }
                Step::Write(
                    json!({"jsonrpc": "2.0", "id": ID_NEW_SESSION, "method": method, "params": params}).to_string(),
                )
            }
            (Phase::Opening, ID_NEW_SESSION) => {
                let session = v
                    .get("result")
                    .and_then(|r| r.get("sessionId"))
                    .and_then(Value::as_str)
                    .or(self.continuing.as_deref().filter(|_| v.get("result").is_some()))
                    .map(str::to_owned);
                match (error, session) {
                    (None, Some(session)) => {
                        self.session = Some(session.clone());
                        let session = session.as_str();
                        self.phase = Phase::Prompting;
                        Step::Write(
                            json!({"jsonrpc": "2.0", "id": ID_PROMPT, "method": "session/prompt",
                                "params": {"sessionId": session, "prompt": self.prompt}})
                            .to_string(),
                        )
                    }
                    (e, _) => {
                        self.phase = Phase::Done;
                        self.failed = true;
                        let what = if self.continuing.is_some() { "session/load" } else { "session/new" };
                        Step::Failed(format!("{what} failed: {}", e.unwrap_or_else(|| "no sessionId".to_owned())))
                    }
                }
            }
            (Phase::Prompting, ID_PROMPT) => {
                self.phase = Phase::Done;
                Step::Close
            }
            _ => Step::Nothing,
        }
    }
}

/// The opening the supervisor carries out, by protocol (codex app-server's is
/// [`super::codex_opening`]).
#[derive(Debug, Clone)]
pub enum Opening {
    Acp(AcpOpening),
    CodexAppServer(super::codex_opening::CodexOpening),
}

impl Opening {
    /// The opening of `protocol` described by `opening`; `None` when it does not read.
    pub fn from_json(protocol: SessionProtocol, opening: &[u8]) -> Option<Opening> {
        match protocol {
            SessionProtocol::Acp => AcpOpening::from_json(opening).map(Opening::Acp),
            SessionProtocol::CodexAppServer => {
                super::codex_opening::CodexOpening::from_json(opening).map(Opening::CodexAppServer)
            }
        }
    }

    /// One complete line of the agent's output (without its newline).
    pub fn on_line(&mut self, line: &[u8]) -> Step {
        match self {
            Opening::Acp(o) => o.on_line(line),
            Opening::CodexAppServer(o) => o.on_line(line),
        }
    }

    /// Why the handshake is over without a prompt, for an agent whose output ended first.
    pub fn unanswered(&self) -> Option<&'static str> {
        match self {
            Opening::Acp(o) => o.unanswered(),
            Opening::CodexAppServer(o) => o.unanswered(),
        }
    }

    /// The session (ACP) or thread (codex) the turn runs in, once known.
    pub fn session(&self) -> Option<&str> {
        match self {
            Opening::Acp(o) => o.session(),
            Opening::CodexAppServer(o) => o.thread(),
        }
    }

    /// The running turn's id, where the protocol names one (codex).
    pub fn turn(&self) -> Option<&str> {
        match self {
            Opening::Acp(_) => None,
            Opening::CodexAppServer(o) => o.turn(),
        }
    }

    /// Whether a turn is running.
    pub fn running(&self) -> bool {
        match self {
            Opening::Acp(o) => o.running(),
            Opening::CodexAppServer(o) => o.running(),
        }
    }

    /// A steer's turn went out instead of closing stdin at the end of the last one (issue 31).
    pub fn resume_turn(&mut self) {
        match self {
            Opening::Acp(o) => o.resume_turn(),
            Opening::CodexAppServer(o) => o.resume_turn(),
        }
    }
}

/// The stream command an opening (`session.open.json`, either protocol's) names to fall back
/// on, if it reads.
pub fn fallback_of(opening: &[u8]) -> Option<Fallback> {
    let v: Value = serde_json::from_slice(opening).ok()?;
    serde_json::from_value(v.get("fallback")?.clone()).ok()
}

/// The line the supervisor writes into raw.log before it runs a failed session's stream
/// fallback, by protocol: the protocol's driver reads the rest as the stream.
pub fn fallback_marker(protocol: SessionProtocol) -> &'static str {
    match protocol {
        SessionProtocol::Acp => ACP_FALLBACK_MARKER,
        SessionProtocol::CodexAppServer => CODEX_FALLBACK_MARKER,
    }
}

/// session/new's params with the session to continue.
fn with_session(new_session: &Value, id: &str) -> Value {
    let mut params = new_session.clone();
    params["sessionId"] = Value::from(id);
    params
}

fn trim(line: &[u8]) -> &[u8] {
    let end = line.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening() -> AcpOpening {
        let o = crate::provider::acp::opening("/w", None, "do it");
        AcpOpening::from_json(o.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_opening_sends_each_step_once_in_order() {
        let mut o = opening();
        // Nothing before initialize's answer, and requests from the agent are not answers.
        assert_eq!(o.on_line(br#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"early"}}"#), Step::Nothing);
        assert_eq!(o.on_line(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#), Step::Nothing);
        let Step::Write(new) = o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}"#) else {
            panic!()
        };
        assert!(new.contains("session/new") && new.contains("\"cwd\":\"/w\""), "{new}");
        // The same answer again (a repeated line) sends nothing more.
        assert_eq!(o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Step::Nothing);
        let Step::Write(prompt) = o.on_line(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"sessionId\":\"s1\"}}\r")
        else {
            panic!()
        };
        assert!(prompt.contains("\"sessionId\":\"s1\"") && prompt.contains("do it"), "{prompt}");
        assert_eq!(o.on_line(b"not json"), Step::Nothing);
        assert_eq!(o.on_line(br#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#), Step::Close);
        assert!(o.is_done());
        assert_eq!(o.on_line(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#), Step::Nothing);
    }

    #[test]
    fn a_failed_handshake_says_why_and_sends_no_prompt() {
        let mut o = opening();
        assert!(matches!(o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Step::Write(_)));
        let step =
            o.on_line(br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"Authentication required"}}"#);
        assert_eq!(step, Step::Failed("session/new failed: Authentication required".into()));
        assert_eq!(o.on_line(br#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s"}}"#), Step::Nothing);
        assert!(!o.prompt_sent(), "a failed handshake sent no prompt");
        assert!(AcpOpening::from_json(b"{}").is_none());
    }

    #[test]
    fn a_resumed_session_is_loaded_where_the_agent_offers_it() {
        let mut v = crate::provider::acp::opening("/w", None, "go on");
        v["resume"] = Value::from("old-1");
        let resuming = || AcpOpening::from_json(v.to_string().as_bytes()).unwrap();
        // loadSession advertised: session/load with the id; its answer has no id of its own.
        let mut o = resuming();
        let Step::Write(load) =
            o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{"agentCapabilities":{"loadSession":true}}}"#)
        else {
            panic!()
        };
        let load: Value = serde_json::from_str(&load).unwrap();
        assert_eq!(
            (load["method"].as_str(), load["params"]["sessionId"].as_str()),
            (Some("session/load"), Some("old-1"))
        );
        assert_eq!(load["params"]["cwd"], "/w");
        let Step::Write(prompt) = o.on_line(br#"{"jsonrpc":"2.0","id":2,"result":{}}"#) else { panic!() };
        assert!(prompt.contains("\"sessionId\":\"old-1\"") && prompt.contains("go on"), "{prompt}");
        // session/resume preferred where offered.
        let mut o = resuming();
        let Step::Write(r) = o.on_line(
            br#"{"jsonrpc":"2.0","id":1,"result":{"agentCapabilities":{"loadSession":true,"sessionCapabilities":{"resume":{}}}}}"#,
        ) else {
            panic!()
        };
        assert!(r.contains("session/resume"), "{r}");
        // Neither: a new session.
        let mut o = resuming();
        let Step::Write(n) = o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{"agentCapabilities":{}}}"#) else {
            panic!()
        };
        assert!(n.contains("session/new") && !n.contains("old-1"), "{n}");
        // A load that fails says so (and the stream fallback, with its own --resume, may run).
        let mut o = resuming();
        o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{"agentCapabilities":{"loadSession":true}}}"#);
        let step = o.on_line(br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"Session not found"}}"#);
        assert_eq!(step, Step::Failed("session/load failed: Session not found".into()));
    }

    #[test]
    fn the_fallback_is_read_and_allowed_only_before_the_prompt() {
        let mut v = crate::provider::acp::opening("/w", None, "do it");
        v["fallback"] = serde_json::json!({"args": ["-p", "do it"], "env": [["K", "V"]]});
        let mut o = AcpOpening::from_json(v.to_string().as_bytes()).unwrap();
        let fallback = fallback_of(v.to_string().as_bytes()).unwrap();
        assert_eq!(
            (fallback.args, fallback.env),
            (vec!["-p".to_owned(), "do it".to_owned()], vec![("K".to_owned(), "V".to_owned())])
        );
        assert_eq!(o.unanswered(), Some("the agent ended before answering initialize"));
        o.on_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(o.unanswered(), Some("the agent ended before answering session/new"));
        o.on_line(br#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s"}}"#);
        assert!(o.prompt_sent());
        assert_eq!(o.unanswered(), None, "once the prompt is sent there is no falling back");
        assert!(fallback_of(crate::provider::acp::opening("/w", None, "do it").to_string().as_bytes()).is_none());
        // The supervisor reads either protocol's fallback the same way.
        assert!(fallback_of(br#"{"thread_start":{},"turn_start":{}}"#).is_none());
        assert!(fallback_of(b"not json").is_none());
    }
}

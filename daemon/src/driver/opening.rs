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

use crate::provider::acp::{ID_INITIALIZE, ID_NEW_SESSION, ID_PROMPT};

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

/// The opening of one ACP session.
#[derive(Debug, Clone)]
pub struct AcpOpening {
    new_session: Value,
    prompt: Value,
    phase: Phase,
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
        })
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
                    return Step::Failed(format!("initialize failed: {e}"));
                }
                self.phase = Phase::Opening;
                Step::Write(
                    json!({"jsonrpc": "2.0", "id": ID_NEW_SESSION, "method": "session/new", "params": self.new_session})
                        .to_string(),
                )
            }
            (Phase::Opening, ID_NEW_SESSION) => {
                let session = v.get("result").and_then(|r| r.get("sessionId")).and_then(Value::as_str);
                match (error, session) {
                    (None, Some(session)) => {
                        self.phase = Phase::Prompting;
                        Step::Write(
                            json!({"jsonrpc": "2.0", "id": ID_PROMPT, "method": "session/prompt",
                                "params": {"sessionId": session, "prompt": self.prompt}})
                            .to_string(),
                        )
                    }
                    (e, _) => {
                        self.phase = Phase::Done;
                        Step::Failed(format!("session/new failed: {}", e.unwrap_or_else(|| "no sessionId".to_owned())))
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
    pub fn from_json(protocol: super::SessionProtocol, opening: &[u8]) -> Option<Opening> {
        match protocol {
            super::SessionProtocol::Acp => AcpOpening::from_json(opening).map(Opening::Acp),
            super::SessionProtocol::CodexAppServer => {
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
        assert!(AcpOpening::from_json(b"{}").is_none());
    }
}

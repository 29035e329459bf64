//! The ACP session driver: the daemon's half of an Agent Client Protocol session.
//!
//! The supervisor opens the session (see [`super::opening`]); this driver reads every message
//! the agent sends (through [`crate::provider::acp::AcpParser`], a pure reader), answers the
//! requests caesar does not serve with a JSON-RPC error, turns `session/request_permission`
//! into a permission ask whose answer is the JSON-RPC response, and cancels a turn with
//! `session/cancel`.
//!
//! Why serde rather than the `agent-client-protocol` crate: that crate's connection owns the
//! transport and keeps the conversation's state in `!Send` futures inside one process, while
//! here the pipe belongs to the supervisor and the daemon may be restarted at any line. The
//! state this driver needs (the session id, the ids of open permission requests) is rebuilt
//! from `raw.log` and the store, so a plain reader of lines is the right shape; the messages
//! caesar writes are four fixed shapes.

use crate::launch::ProviderId;
use crate::provider::acp::{self, AcpParser};
use crate::provider::{LineParser, Parsed, PermissionAsk, Stream};

use super::stream::StreamDriver;
use super::{Decision, Driver, DriverKind, Reading};

/// The line the supervisor writes into `raw.log` when the session could not be opened.
pub use crate::supervisor::opening::ACP_FALLBACK_MARKER as FALLBACK_MARKER;

/// How many lines (and bytes) of output before the agent's first JSON-RPC message are held
/// back: should the handshake fail, the stream fallback prints its own account, and what the
/// session's agent printed (raw.log keeps it) must not be read twice, as two blockers.
const HELD_LINES: usize = 1000;
const HELD_BYTES: usize = 1 << 20;

/// Reads an ACP agent, or its stream fallback.
pub struct AcpDriver {
    provider: ProviderId,
    parser: AcpParser,
    /// Set once the supervisor fell back to the stream command.
    fallback: Option<StreamDriver>,
    /// Output before the first JSON-RPC message, held back (see [`HELD_LINES`]).
    held: Vec<String>,
    held_bytes: usize,
    /// The agent spoke JSON-RPC (or held output overflowed): nothing more is held.
    opened: bool,
}

impl AcpDriver {
    /// The driver of provider (or generic agent) `provider` over ACP.
    pub fn new(provider: ProviderId) -> AcpDriver {
        AcpDriver {
            provider,
            parser: AcpParser::default(),
            fallback: None,
            held: Vec::new(),
            held_bytes: 0,
            opened: false,
        }
    }

    /// Reads the held lines, in order, into `parsed`.
    fn release(&mut self, parsed: &mut Parsed) {
        self.opened = true;
        for line in std::mem::take(&mut self.held) {
            merge(parsed, self.parser.parse_line(&line, Stream::Stdout));
        }
        self.held_bytes = 0;
    }
}

/// Whether `line` is the agent's error answer to caesar's `initialize` or `session/new`: held
/// back with the output before it, since the stream fallback may follow and give its own
/// account (a session refused for want of a login would otherwise block a run that works).
fn is_handshake_error(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line.trim()).is_ok_and(|v| {
        v.get("error").is_some()
            && v.get("method").is_none()
            && matches!(v.get("id").and_then(serde_json::Value::as_u64), Some(acp::ID_INITIALIZE | acp::ID_NEW_SESSION))
    })
}

/// Appends `more` to `into` (later values win).
fn merge(into: &mut Parsed, more: Parsed) {
    into.events.extend(more.events);
    into.session_id = more.session_id.or(into.session_id.take());
    into.final_text = more.final_text.or(into.final_text.take());
    into.usage = more.usage.or(into.usage.take());
    into.blocker = more.blocker.or(into.blocker.take());
    into.permission = more.permission.or(into.permission.take());
    into.quota = more.quota.or(into.quota.take());
}

impl Driver for AcpDriver {
    fn read_line(&mut self, line: &str) -> Reading {
        if let Some(stream) = &mut self.fallback {
            return stream.read_line(line);
        }
        if line.starts_with(FALLBACK_MARKER) {
            // What the session's agent printed before it failed stays in raw.log only.
            self.held.clear();
            self.opened = true;
            let mut parsed = self.parser.finish();
            parsed.events.push(crate::oacp::EventBody::Progress { message: line.trim().to_owned(), pct: None });
            self.fallback = Some(StreamDriver::new(self.provider, DriverKind::Stream));
            return Reading { parsed, replies: Vec::new() };
        }
        let mut parsed = Parsed::default();
        if line.len() >= crate::tail::MAX_LINE {
            // A piece of a line longer than the tail hands out whole (a flood): no message fits
            // it, and scanning megabytes for JSON or blocker phrases is what would cost.
            parsed.events.push(acp::unrecognized(line));
            return Reading { parsed, replies: Vec::new() };
        }
        if !self.opened {
            let hold = !acp::is_jsonrpc(line) || is_handshake_error(line);
            if hold && self.held.len() < HELD_LINES && self.held_bytes + line.len() <= HELD_BYTES {
                self.held_bytes += line.len();
                self.held.push(line.to_owned());
                return Reading::default();
            }
            self.release(&mut parsed);
        }
        merge(&mut parsed, self.parser.parse_line(line, Stream::Stdout));
        Reading { parsed, replies: self.parser.take_replies() }
    }

    fn finish(&mut self) -> Parsed {
        if let Some(stream) = &mut self.fallback {
            return stream.finish();
        }
        let mut parsed = Parsed::default();
        self.release(&mut parsed);
        merge(&mut parsed, self.parser.finish());
        parsed
    }

    fn answers_requests(&self) -> bool {
        self.fallback.is_none()
    }

    fn respond(&self, ask: &PermissionAsk, decision: &Decision<'_>) -> Option<String> {
        if ask.options.is_empty() {
            return None;
        }
        let kind = match (decision.allow, decision.for_session) {
            (true, true) => "allow_always",
            (true, false) => "allow_once",
            (false, false) => "reject_once",
            (false, true) => "reject_always",
        };
        Some(acp::permission_response(ask, kind))
    }

    fn cancel_line(&self, session_id: Option<&str>) -> Option<String> {
        // A stream fallback reads no stdin: signals stop it.
        session_id.filter(|s| !s.is_empty() && self.fallback.is_none()).map(acp::cancel_line)
    }

    fn raw_is_words(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::EventBody;

    #[test]
    fn a_permission_request_is_asked_with_its_options_and_answered_by_id() {
        let mut d = AcpDriver::new(ProviderId::Copilot);
        let line = r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t1","title":"run","kind":"execute","status":"pending","rawInput":{"command":"rm -rf x"}},"options":[{"optionId":"allow_once","kind":"allow_once","name":"Allow once"},{"optionId":"allow_always","kind":"allow_always","name":"Always allow"},{"optionId":"reject_once","kind":"reject_once","name":"Deny"}]}}"#;
        let r = d.read_line(line);
        let ask = r.parsed.permission.expect("asked");
        assert_eq!(ask.request_id, "0");
        assert_eq!(ask.kind.as_deref(), Some("execute"));
        assert_eq!(ask.options.len(), 3);
        assert!(ask.summary.contains("rm -rf x"), "{}", ask.summary);
        let answer = |allow, for_session| {
            d.respond(&ask, &Decision { allow, message: "m", for_session })
                .map(|l| serde_json::from_str::<serde_json::Value>(&l).unwrap())
        };
        let once = answer(true, false).unwrap();
        assert_eq!(once["id"], 0);
        assert_eq!(once["result"]["outcome"]["optionId"], "allow_once");
        assert_eq!(answer(true, true).unwrap()["result"]["outcome"]["optionId"], "allow_always");
        assert_eq!(answer(false, false).unwrap()["result"]["outcome"]["optionId"], "reject_once");
    }

    #[test]
    fn bad_input_is_unrecognized_and_unknown_requests_get_an_error() {
        let mut d = AcpDriver::new(ProviderId::Qwen);
        // In an open session (output before the first JSON-RPC message is held back).
        d.read_line(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        for line in
            ["{not json", "[1,2]", r#"{"jsonrpc":"2.0","id":77,"result":{}}"#, r#"{"jsonrpc":"2.0","method":"x/y"}"#]
        {
            let r = d.read_line(line);
            assert!(matches!(r.parsed.events.as_slice(), [EventBody::Unrecognized { .. }]), "{line}: {:?}", r.parsed);
            assert!(r.replies.is_empty());
        }
        let r = d.read_line(r#"{"jsonrpc":"2.0","id":1,"method":"craft/drainMidTurnQueue","params":{}}"#);
        assert_eq!(r.replies.len(), 1);
        assert!(r.replies[0].contains("-32601") && r.replies[0].contains("\"id\":1"), "{}", r.replies[0]);
        let giant = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{{\"x\":\"{}\"",
            "y".repeat(1 << 20)
        );
        let r = d.read_line(&giant);
        let [EventBody::Unrecognized { line }] = r.parsed.events.as_slice() else {
            panic!("{:?}", r.parsed.events.len())
        };
        assert!(line.len() < 5000, "an unrecognized line is kept short");
    }

    #[test]
    fn output_before_the_session_is_held_and_dropped_on_fallback() {
        // A session that opens: the stderr line before it is read, in order, with the answer.
        let mut d = AcpDriver::new(ProviderId::Gemini);
        assert!(d.read_line("Loaded cached credentials.").parsed.events.is_empty());
        let r = d.read_line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s9"}}"#);
        assert_eq!(r.parsed.session_id.as_deref(), Some("s9"));
        assert!(!r.parsed.events.is_empty(), "the held line is read now: {:?}", r.parsed.events);
        // A handshake that fails: the agent's own words before the marker are not read (the
        // stream's account follows), so one 401 makes one blocker.
        let mut d = AcpDriver::new(ProviderId::Copilot);
        assert!(d.read_line("Error: 401 unauthorized").parsed.blocker.is_none());
        let r = d.read_line(&format!("{FALLBACK_MARKER}: the agent ended before answering initialize; x"));
        assert!(r.parsed.blocker.is_none() && r.parsed.events.len() == 1, "{:?}", r.parsed);
        // The session refused (an error to initialize) then the fallback: the refusal's words
        // are not a blocker of the run that follows.
        let mut d = AcpDriver::new(ProviderId::Copilot);
        let refused = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}}"#;
        assert!(d.read_line(refused).parsed.blocker.is_none());
        let r = d.read_line(&format!("{FALLBACK_MARKER}: initialize failed: Authentication required; x"));
        assert!(r.parsed.blocker.is_none(), "{:?}", r.parsed);
        // With no fallback the refusal is read at the end, as the run's failure.
        let mut d = AcpDriver::new(ProviderId::Qwen);
        d.read_line(refused);
        assert!(d.finish().blocker.is_some(), "the refusal blocks on auth");
        // Held output with no session at all is read at the end.
        let mut d = AcpDriver::new(ProviderId::Qwen);
        d.read_line("Error: Authentication required");
        let end = d.finish();
        assert!(!end.events.is_empty(), "read at the end: {:?}", end.events);
    }

    #[test]
    fn copilots_error_words_and_opencodes_prompt_error_are_blockers() {
        let mut d = AcpDriver::new(ProviderId::Copilot);
        d.read_line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s"}}"#);
        let chunk = |t: &str| {
            serde_json::json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{
                "sessionUpdate":"agent_message_chunk","content":{"type":"text","text":t}}}})
            .to_string()
        };
        // [V] captured from copilot 1.0 --acp against the scripted server's 401.
        let r = d.read_line(&chunk("Error: Authentication failed with provider at http://127.0.0.1:1 (HTTP 401).\n  Check your COPILOT_PROVIDER_API_KEY."));
        assert_eq!(r.parsed.blocker.map(|b| b.kind), Some(crate::oacp::BlockerKind::Auth));
        let r = d.read_line(&chunk("Error: Too many requests (HTTP 429)."));
        assert_eq!(r.parsed.blocker.map(|b| b.kind), Some(crate::oacp::BlockerKind::RateLimit));
        // Ordinary words that mention an error are the answer, not a blocker.
        let r = d.read_line(&chunk("No error: the 401 page renders."));
        assert!(r.parsed.blocker.is_none());
        // [V] opencode 1.18: the prompt's error carries only the API's message.
        let mut d = AcpDriver::new(ProviderId::Opencode);
        d.read_line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s"}}"#);
        let r = d.read_line(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error: Number of request tokens has exceeded your per-minute rate limit","data":{"service":"session","errorName":"APIError"}}}"#);
        assert_eq!(r.parsed.blocker.map(|b| b.kind), Some(crate::oacp::BlockerKind::RateLimit));
    }

    #[test]
    fn cancel_goes_through_the_session() {
        let d = AcpDriver::new(ProviderId::Gemini);
        assert!(d.cancel_line(None).is_none());
        let line = d.cancel_line(Some("s1")).unwrap();
        assert!(line.contains("session/cancel") && line.contains("s1"), "{line}");
    }

    #[test]
    fn after_the_fallback_marker_the_output_is_the_stream() {
        let mut d = AcpDriver::new(ProviderId::Gemini);
        let r = d.read_line(&format!("{FALLBACK_MARKER}: session/new failed: nope; running the stream command"));
        assert!(matches!(r.parsed.events.as_slice(), [EventBody::Progress { .. }]));
        assert!(!d.answers_requests());
        let r = d.read_line(r#"{"type":"init","session_id":"g1"}"#);
        assert_eq!(r.parsed.session_id.as_deref(), Some("g1"));
    }

    /// Every captured session (tests/tests/real_sessions.rs with CAESAR_UPDATE_CAPTURES=1),
    /// replayed: one permission ask with options, a session id, an answer at the turn's end
    /// where the turn ended, and the opening replayed over the same lines sends each step once.
    #[test]
    fn captured_sessions_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sessions");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("codex_") {
                continue; // codex app-server captures: driver/codex_app.rs replays them
            }
            let raw = std::fs::read_to_string(entry.path()).unwrap();
            let provider = name.split('_').next().unwrap();
            let mut d = AcpDriver::new(crate::launch::ProviderId::of(provider));
            let (mut asks, mut session, mut final_text) = (Vec::new(), None, None);
            let mut opening = crate::supervisor::opening::AcpOpening::from_json(
                crate::provider::acp::opening("/project", None, "p").to_string().as_bytes(),
            )
            .unwrap();
            let (mut writes, mut replies) = (0, Vec::new());
            for line in raw.lines() {
                let r = d.read_line(line);
                replies.extend(r.replies);
                asks.extend(r.parsed.permission);
                session = session.or(r.parsed.session_id);
                final_text = r.parsed.final_text.or(final_text);
                if let crate::supervisor::opening::Step::Write(_) = opening.on_line(line.as_bytes()) {
                    writes += 1;
                }
            }
            d.finish();
            if name.contains("ask_orchestrator") {
                // Issue 30: the CLI's ask to call caesar's own channel is allowed by caesar,
                // never asked of anyone.
                assert!(asks.is_empty(), "{name}: {asks:?}");
                assert!(replies.iter().any(|r| r.contains("\"proceed_once\"")), "{name}: {replies:?}");
                assert!(session.is_some(), "{name}: the session id");
                assert_eq!(writes, 2, "{name}: session/new and the prompt, once each");
                seen += 1;
                continue;
            }
            assert_eq!(asks.len(), 1, "{name}: one permission ask");
            assert!(asks[0].options.iter().any(|o| o.kind == "allow_once"), "{name}: {:?}", asks[0].options);
            assert!(asks[0].options.iter().any(|o| o.kind == "reject_once"), "{name}");
            assert!(session.is_some(), "{name}: the session id");
            assert_eq!(writes, 2, "{name}: session/new and the prompt, once each");
            if name.contains("allowed") || name.contains("sigkill") {
                assert!(final_text.is_some(), "{name}: the answer at the end of the turn");
            }
            seen += 1;
        }
        assert!(seen >= 5, "the captures are there");
    }
}

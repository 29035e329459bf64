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

use crate::provider::acp::{self, AcpParser};
use crate::provider::{LineParser, Parsed, PermissionAsk, Stream};

use super::stream::StreamDriver;
use super::{Decision, Driver, DriverKind, Reading};

/// The line the supervisor writes into `raw.log` when the session could not be opened and it
/// runs the provider's one-shot stream command instead; from there on the output is a stream.
pub const FALLBACK_MARKER: &str = "caesar: the ACP handshake failed";

/// Reads an ACP agent, or its stream fallback.
pub struct AcpDriver {
    provider: String,
    parser: AcpParser,
    /// Set once the supervisor fell back to the stream command.
    fallback: Option<StreamDriver>,
}

impl AcpDriver {
    /// The driver of provider (or generic agent) `provider` over ACP.
    pub fn new(provider: &str) -> AcpDriver {
        AcpDriver { provider: provider.to_owned(), parser: AcpParser::default(), fallback: None }
    }
}

impl Driver for AcpDriver {
    fn read_line(&mut self, line: &str) -> Reading {
        if let Some(stream) = &mut self.fallback {
            return stream.read_line(line);
        }
        if line.starts_with(FALLBACK_MARKER) {
            let mut parsed = self.parser.finish();
            parsed.events.push(crate::oacp::EventBody::Progress { message: line.trim().to_owned(), pct: None });
            self.fallback = Some(StreamDriver::new(&self.provider, DriverKind::Stream));
            return Reading { parsed, replies: Vec::new() };
        }
        let parsed = self.parser.parse_line(line, Stream::Stdout);
        Reading { parsed, replies: self.parser.take_replies() }
    }

    fn finish(&mut self) -> Parsed {
        match &mut self.fallback {
            Some(stream) => stream.finish(),
            None => self.parser.finish(),
        }
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
            (false, _) => "reject_once",
        };
        Some(acp::permission_response(ask, kind))
    }

    fn cancel_line(&self, session_id: Option<&str>) -> Option<String> {
        session_id.filter(|s| !s.is_empty()).map(acp::cancel_line)
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
        let mut d = AcpDriver::new("copilot");
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
        let mut d = AcpDriver::new("qwen");
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
    fn cancel_goes_through_the_session() {
        let d = AcpDriver::new("gemini");
        assert!(d.cancel_line(None).is_none());
        let line = d.cancel_line(Some("s1")).unwrap();
        assert!(line.contains("session/cancel") && line.contains("s1"), "{line}");
    }

    #[test]
    fn after_the_fallback_marker_the_output_is_the_stream() {
        let mut d = AcpDriver::new("gemini");
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
            let mut d = AcpDriver::new(provider);
            let (mut asks, mut session, mut final_text) = (Vec::new(), None, None);
            let mut opening = super::super::opening::AcpOpening::from_json(
                crate::provider::acp::opening("/project", None, "p").to_string().as_bytes(),
            )
            .unwrap();
            let mut writes = 0;
            for line in raw.lines() {
                let r = d.read_line(line);
                asks.extend(r.parsed.permission);
                session = session.or(r.parsed.session_id);
                final_text = r.parsed.final_text.or(final_text);
                if let super::super::opening::Step::Write(_) = opening.on_line(line.as_bytes()) {
                    writes += 1;
                }
            }
            d.finish();
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

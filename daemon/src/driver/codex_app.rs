//! The codex app-server session driver: the daemon's half of a `codex app-server` session.
//!
//! The supervisor opens the session and closes it at the turn's end
//! ([`super::codex_opening`]); this driver reads every message the server sends (through
//! [`crate::provider::codex_app::CodexAppParser`], a pure reader), answers the requests caesar
//! does not serve with a JSON-RPC error, turns command and file-change approvals into permission
//! asks whose answer is the JSON-RPC response (`accept`, `acceptForSession`, `decline`), and
//! cancels with `turn/interrupt`. Like the ACP driver it speaks serde JSON-RPC: its state (the
//! thread id, the open request ids) is rebuilt from `raw.log` and the store.

use crate::provider::codex_app::{self, CodexAppParser};
use crate::provider::{LineParser, Parsed, PermissionAsk, Stream};

use super::{Decision, Driver, Reading};

/// Reads a codex app-server session.
#[derive(Default)]
pub struct CodexAppDriver {
    parser: CodexAppParser,
}

impl CodexAppDriver {
    /// A driver at the start of a session.
    pub fn new() -> CodexAppDriver {
        CodexAppDriver::default()
    }
}

impl Driver for CodexAppDriver {
    fn read_line(&mut self, line: &str) -> Reading {
        let parsed = self.parser.parse_line(line, Stream::Stdout);
        Reading { parsed, replies: self.parser.take_replies() }
    }

    fn finish(&mut self) -> Parsed {
        self.parser.finish()
    }

    fn answers_requests(&self) -> bool {
        true
    }

    fn respond(&self, ask: &PermissionAsk, decision: &Decision<'_>) -> Option<String> {
        let offers = |id: &str| ask.options.iter().any(|o| o.id == id);
        let chosen = match (decision.allow, decision.for_session) {
            (true, true) if offers("acceptForSession") => "acceptForSession",
            (true, _) => "accept",
            (false, _) => "decline",
        };
        Some(codex_app::approval_response(ask, chosen))
    }

    fn cancel_line(&self, session_id: Option<&str>) -> Option<String> {
        session_id.filter(|s| !s.is_empty()).map(codex_app::interrupt_line)
    }

    fn raw_is_words(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::{BlockerKind, EventBody, ToolStatus};
    use serde_json::Value;

    const COMMAND_ASK: &str = r#"{"method":"item/commandExecution/requestApproval","id":0,"params":{"kind":"command","threadId":"th","turnId":"tu","itemId":"call_1","startedAtMs":1,"environmentId":"local","command":"/bin/bash -lc 'touch allowed.txt && rm -rf build'","cwd":"/w","commandActions":[{"type":"unknown","command":"touch allowed.txt && rm -rf build"}],"proposedExecpolicyAmendment":["touch","allowed.txt"],"availableDecisions":["accept",{"acceptWithExecpolicyAmendment":{"execpolicy_amendment":["touch"]}},"cancel"]}}"#;

    fn json(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn a_command_approval_is_asked_in_full_and_answered_by_id() {
        let mut d = CodexAppDriver::new();
        let ask = d.read_line(COMMAND_ASK).parsed.permission.expect("asked");
        assert_eq!(ask.request_id, "0");
        assert_eq!(ask.kind.as_deref(), Some("execute"));
        assert_eq!(ask.tool_name, "shell");
        assert!(ask.summary.contains("/bin/bash -lc 'touch allowed.txt && rm -rf build'"), "{}", ask.summary);
        assert_eq!(ask.input["cwd"], "/w");
        let kinds: Vec<&str> = ask.options.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["allow_once", "reject_once"], "codex listed no acceptForSession");
        let answer =
            |allow, for_session| json(&d.respond(&ask, &Decision { allow, message: "m", for_session }).unwrap());
        assert_eq!(answer(true, false)["id"], 0);
        assert_eq!(answer(true, false)["result"]["decision"], "accept");
        assert_eq!(answer(true, true)["result"]["decision"], "accept", "not offered: once");
        assert_eq!(answer(false, false)["result"]["decision"], "decline");
    }

    #[test]
    fn a_file_change_approval_carries_the_changes_of_its_item() {
        let mut d = CodexAppDriver::new();
        let started = r#"{"method":"item/started","params":{"item":{"type":"fileChange","id":"call_9","changes":[{"path":"/w/p.txt","kind":{"type":"add"},"diff":"hi\n"}],"status":"inProgress"},"threadId":"th","turnId":"tu"}}"#;
        let r = d.read_line(started);
        assert!(matches!(&r.parsed.events[..], [EventBody::ToolUse { status: ToolStatus::Started, .. }]));
        let ask = d
            .read_line(r#"{"method":"item/fileChange/requestApproval","id":5,"params":{"threadId":"th","turnId":"tu","itemId":"call_9","startedAtMs":2,"reason":null,"grantRoot":null}}"#)
            .parsed
            .permission
            .expect("asked");
        assert_eq!(ask.kind.as_deref(), Some("edit"));
        assert_eq!(ask.input["changes"][0]["path"], "/w/p.txt");
        assert!(ask.summary.contains("add /w/p.txt") && ask.summary.contains("hi"), "{}", ask.summary);
        assert!(ask.options.iter().any(|o| o.kind == "allow_always"));
        let line = d.respond(&ask, &Decision { allow: true, message: "", for_session: true }).unwrap();
        assert_eq!(json(&line)["result"]["decision"], "acceptForSession");
        assert_eq!(json(&line)["id"], 5);
    }

    #[test]
    fn errors_become_blockers_from_their_structure_with_the_reset() {
        let mut d = CodexAppDriver::new();
        d.read_line(r#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":100,"windowDurationMins":300,"resetsAt":1796143042}}}}"#);
        let r = d.read_line(r#"{"method":"error","params":{"error":{"message":"You've hit your usage limit.","codexErrorInfo":"usageLimitExceeded"},"willRetry":false,"threadId":"t","turnId":"u"}}"#);
        let b = r.parsed.blocker.expect("a blocker");
        assert_eq!(b.kind, BlockerKind::RateLimit);
        assert_eq!(b.resets_at_ms, Some(1_796_143_042_000));
        let mut d = CodexAppDriver::new();
        let r = d.read_line(r#"{"method":"turn/completed","params":{"threadId":"t","turn":{"id":"u","items":[],"status":"failed","error":{"message":"unexpected status 401 Unauthorized","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":401}}}}}}"#);
        assert_eq!(r.parsed.blocker.expect("auth").kind, BlockerKind::Auth);
        assert!(r.parsed.events.iter().any(|e| matches!(e, EventBody::Error { fatal: true, .. })));
        // Text alone is no blocker: the same words without structure.
        let mut d = CodexAppDriver::new();
        let r = d.read_line(r#"{"method":"error","params":{"error":{"message":"401 Unauthorized: rate limit exceeded","codexErrorInfo":"other"},"willRetry":true}}"#);
        assert!(r.parsed.blocker.is_none());
        let r = d.read_line("\u{1b}[2m2026-12-01T15:36:44Z\u{1b}[0m ERROR codex: 401 Unauthorized usage limit");
        assert!(r.parsed.blocker.is_none());
        assert!(matches!(&r.parsed.events[..], [EventBody::Unrecognized { .. }]));
    }

    #[test]
    fn bad_input_is_unrecognized_and_unknown_requests_get_an_error() {
        let mut d = CodexAppDriver::new();
        for line in ["{not json", "[1,2]", r#"{"id":77,"result":{}}"#, r#"{"method":"x/y","params":{}}"#] {
            let r = d.read_line(line);
            assert!(matches!(r.parsed.events.as_slice(), [EventBody::Unrecognized { .. }]), "{line}: {:?}", r.parsed);
            assert!(r.replies.is_empty());
        }
        let r = d.read_line(r#"{"method":"item/tool/requestUserInput","id":3,"params":{}}"#);
        assert_eq!(r.replies.len(), 1);
        assert!(r.replies[0].contains("-32601") && r.replies[0].contains("\"id\":3"), "{}", r.replies[0]);
        let giant = format!("{{\"method\":\"item/started\",\"params\":{{\"x\":\"{}\"", "y".repeat(1 << 20));
        let r = d.read_line(&giant);
        let [EventBody::Unrecognized { line }] = r.parsed.events.as_slice() else { panic!() };
        assert!(line.len() < 5000, "an unrecognized line is kept short");
    }

    #[test]
    fn cancel_interrupts_the_active_turn_of_the_thread() {
        let d = CodexAppDriver::new();
        assert!(d.cancel_line(None).is_none());
        let line = json(&d.cancel_line(Some("th1")).unwrap());
        assert_eq!(line["method"], "turn/interrupt");
        assert_eq!(line["params"]["threadId"], "th1");
        assert_eq!(line["params"]["turnId"], "");
    }

    /// Every codex capture (tests/tests/real_codex_sessions.rs with CAESAR_UPDATE_CAPTURES=1),
    /// replayed through the driver and the supervisor's opening.
    #[test]
    fn captured_codex_sessions_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sessions");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("codex_") {
                continue;
            }
            let raw = std::fs::read_to_string(entry.path()).unwrap();
            let mut d = CodexAppDriver::new();
            let mut opening = super::super::codex_opening::CodexOpening::from_json(
                br#"{"thread_start":{"cwd":"/w"},"turn_start":{"input":[]}}"#,
            )
            .unwrap();
            let (mut asks, mut session, mut final_text, mut blocker, mut usage) = (Vec::new(), None, None, None, None);
            let (mut writes, mut closed) = (0, false);
            for line in raw.lines() {
                let r = d.read_line(line);
                asks.extend(r.parsed.permission);
                session = session.or(r.parsed.session_id);
                final_text = r.parsed.final_text.or(final_text);
                blocker = blocker.or(r.parsed.blocker);
                usage = r.parsed.usage.or(usage);
                match opening.on_line(line.as_bytes()) {
                    super::super::opening::Step::Write(_) => writes += 1,
                    super::super::opening::Step::Close => closed = true,
                    _ => {}
                }
            }
            assert!(session.is_some(), "{name}: the thread id");
            assert_eq!(writes, 2, "{name}: thread/start and turn/start, once each");
            assert!(closed, "{name}: the turn's end closes stdin");
            if name.contains("429") || name.contains("usage_limit") {
                assert_eq!(blocker.as_ref().map(|b| b.kind), Some(BlockerKind::RateLimit), "{name}");
                assert!(blocker.as_ref().and_then(|b| b.resets_at_ms).is_some(), "{name}: the reset");
            } else if name.contains("401") {
                assert_eq!(blocker.as_ref().map(|b| b.kind), Some(BlockerKind::Auth), "{name}");
            } else {
                assert_eq!(asks.len(), 1, "{name}: one approval");
                assert!(asks[0].options.iter().any(|o| o.kind == "allow_once"), "{name}");
                assert!(asks[0].options.iter().any(|o| o.kind == "reject_once"), "{name}");
                assert!(usage.is_some(), "{name}: token usage");
            }
            if name.contains("allowed") {
                assert!(final_text.is_some(), "{name}: the answer at the end of the turn");
            }
            seen += 1;
        }
        assert!(seen >= 3, "the codex captures are there ({seen})");
    }
}

//! The codex app-server session driver: the daemon's half of a `codex app-server` session.
//!
//! The supervisor opens the session and closes it at the turn's end
//! ([`super::codex_opening`]); this driver reads every message the server sends (through
//! [`crate::provider::codex_app::CodexAppParser`], a pure reader), answers the requests caesar
//! does not serve with a JSON-RPC error, turns command and file-change approvals into permission
//! asks whose answer is the JSON-RPC response (`accept`, `acceptForSession`, `decline`), and
//! cancels with `turn/interrupt`. When the supervisor could not open the session it runs
//! `codex exec --json` instead and says so ([`FALLBACK_MARKER`]): the rest is read as that
//! stream. Like the ACP driver it speaks serde JSON-RPC: its state (the
//! thread id, the open request ids) is rebuilt from `raw.log` and the store.

use crate::provider::codex_app::{self, CodexAppParser};
use crate::provider::{LineParser, Parsed, PermissionAsk, Stream};

use super::stream::StreamDriver;
use super::{Decision, Driver, DriverKind, Reading};

/// The line the supervisor writes into `raw.log` when the app-server could not be opened.
pub use crate::supervisor::opening::CODEX_FALLBACK_MARKER as FALLBACK_MARKER;

/// The most error answers to the opening held back (there are two requests to refuse).
const HELD_LINES: usize = 4;

/// Reads a codex app-server session, or its `codex exec --json` fallback.
#[derive(Default)]
pub struct CodexAppDriver {
    parser: CodexAppParser,
    /// Set once the supervisor fell back to `codex exec --json`.
    fallback: Option<StreamDriver>,
    /// The server's error answers to `initialize` and `thread/start`, held back: should the
    /// exec fallback follow, its own account is the one read (one failure, one blocker).
    held: Vec<String>,
}

impl CodexAppDriver {
    /// A driver at the start of a session.
    pub fn new() -> CodexAppDriver {
        CodexAppDriver::default()
    }

    /// Reads the held lines, in order, into `parsed`.
    fn release(&mut self, parsed: &mut Parsed) {
        for line in std::mem::take(&mut self.held) {
            merge(parsed, self.parser.parse_line(&line, Stream::Stdout));
        }
    }
}

/// Whether `line` is the server's error answer to caesar's `initialize` or `thread/start`.
fn is_opening_error(line: &str) -> bool {
    line.contains("\"error\"")
        && serde_json::from_str::<serde_json::Value>(line.trim()).is_ok_and(|v| {
            v.get("error").is_some()
                && v.get("method").is_none()
                && matches!(
                    v.get("id").and_then(serde_json::Value::as_u64),
                    Some(codex_app::ID_INITIALIZE | codex_app::ID_THREAD_START)
                )
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
    into.failure = more.failure.or(into.failure.take());
}

impl Driver for CodexAppDriver {
    fn read_line(&mut self, line: &str) -> Reading {
        if let Some(stream) = &mut self.fallback {
            return stream.read_line(line);
        }
        if let Some(rest) = line.strip_prefix(FALLBACK_MARKER) {
            // The refused opening stays in raw.log only; the progress line says which ran and why.
            self.held.clear();
            let why = rest.trim_start_matches(':').trim();
            let why = why.strip_suffix("; running the stream command").unwrap_or(why);
            let message = format!("codex app-server could not be opened ({why}): running `codex exec --json` instead");
            let mut parsed = Parsed::default();
            parsed.events.push(crate::oacp::EventBody::Progress { message, pct: None });
            self.fallback = Some(StreamDriver::new(crate::launch::ProviderId::Codex, DriverKind::Stream));
            return Reading { parsed, replies: Vec::new() };
        }
        if self.held.len() < HELD_LINES && is_opening_error(line) {
            self.held.push(line.to_owned());
            return Reading::default();
        }
        let mut parsed = Parsed::default();
        self.release(&mut parsed);
        merge(&mut parsed, self.parser.parse_line(line, Stream::Stdout));
        Reading { parsed, replies: self.parser.take_replies() }
    }

    fn finish(&mut self) -> Parsed {
        if let Some(stream) = &mut self.fallback {
            return stream.finish();
        }
        // No fallback followed: the refusal is the run's account.
        let mut parsed = Parsed::default();
        self.release(&mut parsed);
        merge(&mut parsed, self.parser.finish());
        parsed
    }

    fn answers_requests(&self) -> bool {
        self.fallback.is_none()
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
        // `codex exec` reads no stdin: signals stop it.
        session_id.filter(|s| !s.is_empty() && self.fallback.is_none()).map(codex_app::interrupt_line)
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
    fn a_refused_opening_is_held_and_the_exec_fallback_is_read_as_the_stream() {
        let mut d = CodexAppDriver::new();
        let refusal = r#"{"id":2,"error":{"code":-32600,"message":"no rollout found for thread id th-old"}}"#;
        assert!(d.read_line(refusal).parsed.events.is_empty(), "held back");
        let r = d.read_line(&format!(
            "{FALLBACK_MARKER}: thread/resume failed: no rollout found for thread id th-old; running the stream command"
        ));
        let [EventBody::Progress { message, .. }] = r.parsed.events.as_slice() else { panic!("{:?}", r.parsed) };
        assert!(message.contains("codex exec --json") && message.contains("no rollout found"), "{message}");
        assert!(!d.answers_requests(), "exec reads no stdin");
        assert!(d.cancel_line(Some("th")).is_none(), "signals stop exec");
        // From here on codex exec's JSON lines.
        let r = d.read_line(r#"{"type":"thread.started","thread_id":"th-new"}"#);
        assert_eq!(r.parsed.session_id.as_deref(), Some("th-new"));
        let r = d.read_line(r#"{"type":"item.completed","item":{"id":"i0","type":"agent_message","text":"done"}}"#);
        assert_eq!(r.parsed.final_text.as_deref(), Some("done"));
        // The refusal never became the run's failure.
        assert!(d.finish().failure.is_none());

        // With no fallback after it, the refusal is read: a fatal error.
        let mut d = CodexAppDriver::new();
        assert!(d.read_line(refusal).parsed.events.is_empty());
        let r = d.read_line("codex tracing on stderr");
        assert!(r.parsed.events.iter().any(|e| matches!(e, EventBody::Error { fatal: true, .. })), "{:?}", r.parsed);
        let mut d = CodexAppDriver::new();
        d.read_line(refusal);
        assert!(d.finish().events.iter().any(|e| matches!(e, EventBody::Error { fatal: true, .. })));
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
            let mut opening = crate::supervisor::codex_opening::CodexOpening::from_json(
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
                    crate::supervisor::opening::Step::Write(_) => writes += 1,
                    crate::supervisor::opening::Step::Close => closed = true,
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

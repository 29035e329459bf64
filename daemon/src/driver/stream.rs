//! The one-shot stream driver: a provider's pure line parser over the
//! agent's output, and, when the CLI's stdin is held open for its control
//! protocol, the provider's permission responses.

use crate::launch::ProviderId;
use crate::provider::{self, LineParser, Parsed, PermissionAsk, Stream};

use super::{Decision, Driver, DriverKind, Reading};

/// Reads a provider's output line by line.
pub struct StreamDriver {
    provider: ProviderId,
    parser: Box<dyn LineParser>,
    kind: DriverKind,
}

impl StreamDriver {
    /// The driver of provider (or `generic`) `provider`.
    pub fn new(provider: ProviderId, kind: DriverKind) -> StreamDriver {
        StreamDriver { provider, parser: provider::parser(provider), kind }
    }
}

impl Driver for StreamDriver {
    fn read_line(&mut self, line: &str) -> Reading {
        let mut parsed = self.parser.parse_line(line, Stream::Stdout);
        if self.kind == DriverKind::Stream {
            // Nobody can answer: a request the CLI made anyway is left to
            // its own fallback (a denial), never shown as a question.
            parsed.permission = None;
        }
        Reading { parsed, replies: Vec::new() }
    }

    fn finish(&mut self) -> Parsed {
        self.parser.finish()
    }

    fn answers_requests(&self) -> bool {
        self.kind == DriverKind::StreamWithControl
    }

    fn respond(&self, ask: &PermissionAsk, decision: &Decision<'_>) -> Option<String> {
        if !self.answers_requests() {
            return None;
        }
        provider::permission_response(self.provider, ask, decision.allow, decision.message)
    }

    /// claude's `interrupt` control request, where stdin is held for its control protocol.
    fn cancel_line(&self, _session_id: Option<&str>) -> Option<String> {
        if !self.answers_requests() {
            return None;
        }
        provider::interrupt_line(self.provider)
    }

    fn raw_is_words(&self) -> bool {
        self.provider == crate::launch::ProviderId::Generic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_stream_never_surfaces_a_request_it_cannot_answer() {
        let request = r#"{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"}}}"#;
        let mut plain = StreamDriver::new(crate::launch::ProviderId::of("claude"), DriverKind::Stream);
        assert!(plain.read_line(request).parsed.permission.is_none());
        let mut control = StreamDriver::new(crate::launch::ProviderId::of("claude"), DriverKind::StreamWithControl);
        let ask = control.read_line(request).parsed.permission.expect("a bridged request");
        let line =
            control.respond(&ask, &Decision { allow: false, message: "no", for_session: false }).expect("a response");
        assert!(line.contains("r1") && line.contains("deny"), "{line}");
        assert!(plain.respond(&ask, &Decision { allow: true, message: "", for_session: false }).is_none());
    }

    #[test]
    fn claude_is_interrupted_through_its_control_protocol_only_when_stdin_is_held() {
        let control = StreamDriver::new(crate::launch::ProviderId::of("claude"), DriverKind::StreamWithControl);
        let line = control.cancel_line(None).expect("an interrupt");
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(v["type"], "control_request");
        assert_eq!(v["request"]["subtype"], "interrupt");
        assert!(line.ends_with('\n'));
        assert!(
            StreamDriver::new(crate::launch::ProviderId::of("claude"), DriverKind::Stream).cancel_line(None).is_none()
        );
        assert!(
            StreamDriver::new(crate::launch::ProviderId::of("codex"), DriverKind::StreamWithControl)
                .cancel_line(None)
                .is_none()
        );
        // claude's acknowledgement becomes an event, not an unrecognized line.
        let mut control = control;
        let ack = format!(
            r#"{{"type":"control_response","response":{{"subtype":"success","request_id":"{}"}}}}"#,
            v["request_id"].as_str().unwrap()
        );
        let events = control.read_line(&ack).parsed.events;
        assert!(
            matches!(&events[..], [crate::oacp::EventBody::Progress { message, .. }] if message.contains("interrupt")),
            "{events:?}"
        );
    }

    #[test]
    fn an_unknown_provider_reads_as_generic_words() {
        // A provider id this build does not know (stored by a newer daemon)
        // decodes as the generic adapter, which assumes nothing of the output.
        let mut d = StreamDriver::new(serde_json::from_str("\"from-a-newer-daemon\"").unwrap(), DriverKind::Stream);
        assert!(d.raw_is_words());
        let r = d.read_line("hello");
        assert!(!r.parsed.events.is_empty());
        assert!(StreamDriver::new(crate::launch::ProviderId::Generic, DriverKind::Stream).raw_is_words());
    }
}

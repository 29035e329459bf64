//! The line parser of OACP generic agents (`[[agent]]`): a line that is an
//! OACP event (`"protocol":"caesar.event/v1"`) is taken as that event, any
//! other line is the agent speaking and becomes a `message`.

use super::{LineParser, Parsed, Stream};
use crate::oacp::{Blocker, EVENT_PROTOCOL, EventBody};

/// The parser of generic agents.
#[derive(Debug, Default)]
pub struct GenericParser;

impl LineParser for GenericParser {
    fn parse_line(&mut self, line: &str, _stream: Stream) -> Parsed {
        let mut out = Parsed::default();
        if line.trim().is_empty() {
            return out;
        }
        if line.trim_start().starts_with('{')
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(line)
            && value.get("protocol").and_then(|p| p.as_str()) == Some(EVENT_PROTOCOL)
        {
            match serde_json::from_value::<EventBody>(value) {
                Ok(body) => {
                    if let EventBody::Usage { usage } = &body {
                        out.usage = Some(usage.clone());
                    }
                    // An OACP agent names its own blockers (a quota, its login).
                    if let EventBody::Blocker { kind, message, resets_at_ms } = &body {
                        out.blocker =
                            Some(Blocker { kind: *kind, message: message.clone(), resets_at_ms: *resets_at_ms });
                    }
                    out.events.push(body);
                }
                Err(_) => out.events.push(EventBody::Unrecognized { line: line.to_owned() }),
            }
            return out;
        }
        out.events.push(EventBody::Message { text: line.to_owned() });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::ToolStatus;

    #[test]
    fn oacp_lines_pass_through_and_text_is_a_message() {
        let mut p = GenericParser;
        let tool = p.parse_line(
            r#"{"protocol":"caesar.event/v1","type":"tool_use","tool":"bash","status":"started","id":"1"}"#,
            Stream::Stdout,
        );
        assert_eq!(
            tool.events,
            [EventBody::ToolUse {
                tool: "bash".into(),
                input_summary: String::new(),
                status: ToolStatus::Started,
                id: "1".into()
            }]
        );
        assert_eq!(p.parse_line("hello", Stream::Stdout).events, [EventBody::Message { text: "hello".into() }]);
        let bad = p.parse_line(r#"{"protocol":"caesar.event/v1","type":"nonsense"}"#, Stream::Stdout);
        assert!(matches!(bad.events[0], EventBody::Unrecognized { .. }));
        assert!(p.parse_line("   ", Stream::Stdout).events.is_empty());
    }
}

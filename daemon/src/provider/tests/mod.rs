//! Replays of real provider captures and argv tables.

use super::*;
use crate::oacp::Mode::{ReadOnly, Write};
use crate::oacp::{BlockerKind, ChangeAction, EventBody, Mode, ToolStatus, Usage};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers/");

/// Everything a whole replay yielded.
#[derive(Debug, Default)]
struct Run {
    events: Vec<EventBody>,
    sessions: Vec<String>,
    final_text: Option<String>,
    usage: Option<Usage>,
    blockers: Vec<(BlockerKind, String)>,
}

impl Run {
    fn count(&self, kind: &str) -> usize {
        self.events.iter().filter(|e| e.kind() == kind).count()
    }
    fn session(&self) -> Option<&str> {
        self.sessions.last().map(String::as_str)
    }
    fn blocker_kinds(&self) -> Vec<BlockerKind> {
        self.blockers.iter().map(|b| b.0).collect()
    }
    fn blocker_events(&self) -> Vec<BlockerKind> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventBody::Blocker { kind, .. } => Some(*kind),
                _ => None,
            })
            .collect()
    }
    fn tools(&self) -> Vec<(String, ToolStatus, String)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventBody::ToolUse { tool, status, id, .. } => Some((tool.clone(), *status, id.clone())),
                _ => None,
            })
            .collect()
    }
    fn files(&self) -> Vec<(String, ChangeAction)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventBody::FileChanged { path, action } => Some((path.clone(), *action)),
                _ => None,
            })
            .collect()
    }
    fn messages(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventBody::Message { text } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }
    fn warnings(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventBody::Warning { message } => Some(message.clone()),
                _ => None,
            })
            .collect()
    }
    fn errors(&self) -> Vec<(String, bool)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EventBody::Error { message, fatal } => Some((message.clone(), *fatal)),
                _ => None,
            })
            .collect()
    }
    fn fatal_errors(&self) -> usize {
        self.errors().iter().filter(|e| e.1).count()
    }
}

fn absorb(run: &mut Run, p: Parsed) {
    if let Some(s) = p.session_id {
        run.sessions.push(s);
    }
    if p.final_text.is_some() {
        run.final_text = p.final_text;
    }
    if p.usage.is_some() {
        run.usage = p.usage;
    }
    if let Some(b) = p.blocker {
        run.blockers.push((b.kind, b.message));
    }
    run.events.extend(p.events);
}

/// Replays `<name>.jsonl` (stdout) then `<name>.stderr.txt` if present, then `finish()`.
fn replay(provider: &str, name: &str) -> Run {
    let mut parser = parser(crate::launch::ProviderId::of(provider));
    let mut run = Run::default();
    let stdout = std::fs::read_to_string(format!("{FIXTURES}{name}.jsonl")).expect(name);
    for line in stdout.lines() {
        absorb(&mut run, parser.parse_line(line, Stream::Stdout));
    }
    if let Ok(stderr) = std::fs::read_to_string(format!("{FIXTURES}{name}.stderr.txt")) {
        for line in stderr.lines() {
            absorb(&mut run, parser.parse_line(line, Stream::Stderr));
        }
    }
    absorb(&mut run, parser.finish());
    run
}

fn has_message(run: &Run, needle: &str) -> bool {
    run.messages().iter().any(|m| m.contains(needle))
}

use BlockerKind::{Auth, Permission, RateLimit};
use ToolStatus::{Failed, Started, Succeeded};

fn tool(name: &str, status: ToolStatus, id: &str) -> (String, ToolStatus, String) {
    (name.to_owned(), status, id.to_owned())
}

/// Tokens exactly, cost within float noise (serde_json's float parsing depends on features).
fn assert_usage(got: &Option<Usage>, want: Option<Usage>) {
    let (Some(g), Some(w)) = (got, &want) else {
        assert_eq!(got, &want);
        return;
    };
    assert_eq!((g.input_tokens, g.output_tokens, g.duration_ms), (w.input_tokens, w.output_tokens, w.duration_ms));
    match (g.cost_usd, w.cost_usd) {
        (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "{a} != {b}"),
        (a, b) => assert_eq!(a, b),
    }
}

fn usage(input: u64, output: u64, cost: Option<f64>, duration: Option<u64>) -> Option<Usage> {
    Some(Usage { input_tokens: Some(input), output_tokens: Some(output), cost_usd: cost, duration_ms: duration })
}

/// Every built-in provider's id.
const IDS: &[&str] =
    &["claude", "codex", "gemini", "opencode", "copilot", "cursor-agent", "qwen", "grok", "codebuddy", "antigravity"];

mod argv;
mod parsers;
mod robustness;

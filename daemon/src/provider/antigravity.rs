//! Google Antigravity CLI (`agy --output-format stream-json … -p "prompt"`). Not installable
//! here: flags from hermes-agent and antigravity-cli issues [3P]; the stream shape from the
//! caesar capture (captures-caesar/antigravity.jsonl, a quota error).

use serde_json::Value;

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, ProviderSpec, Stream, error,
    json_object, positional, s, str_at, u64_at,
};
use crate::oacp::{EventBody, Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Antigravity,
    display_name: "Antigravity",
    // Google's Gemini models.
    family: Some("google"),
    default_bin: "agy",
    capabilities: Capabilities {
        // No documented read-only mode: read-only simply withholds the permission bypass.
        native_read_only: false,
        // [3P] --json-schema <file>; the capture's init echoes the schema back.
        structured_output: true,
        // Resume by conversation id is only requested upstream (#7).
        resume: false,
        model_selection: true,
        reasoning_effort: false,
        // --add-mcp persists the server into the user profile: not per-run.
        mcp_injection: false,
        network: NetworkControl::Open,
    },
    efforts: &[],
    version_args: &["--version"],
    env_prefixes: &["ANTIGRAVITY_", "GEMINI_", "GOOGLE_"],
    state_dirs: &[],
    config_env: None,
    config_files: &[],
    install: None,
    own_sandbox: false,
    mcp_from_workspace: false,
    launch,
    parser: AgyParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    let mut args = vec![s("--output-format"), s("stream-json")];
    if let Some(m) = inv.model {
        args.extend([s("--model"), s(m)]);
    }
    if inv.mode == Mode::Write {
        args.push(s("--dangerously-skip-permissions"));
    }
    if let Some(schema) = inv.output_schema_path {
        args.extend([s("--json-schema"), s(schema)]);
    }
    // [3P] -p must come last; a positional prompt is ignored and stdin is never read.
    args.extend([s("-p"), positional(inv.prompt)]);
    Launch { args, ..Launch::default() }
}

#[derive(Debug, Default)]
pub(super) struct AgyParser {
    base: Base,
}

impl LineParser for AgyParser {
    fn parse_line(&mut self, line: &str, _stream: Stream) -> Parsed {
        let raw = line;
        let line = line.trim();
        if line.is_empty() {
            return Parsed::default();
        }
        let Some(v) = json_object(line) else {
            return self.base.text_line(raw);
        };
        self.base.event_line();
        let mut p = Parsed::default();
        match str_at(&v, "event").unwrap_or_default() {
            "init" => {
                if let Some(id) = str_at(&v, "conversation_id") {
                    self.base.session(&mut p, id);
                }
            }
            "step_update" => {
                let step = v.get("step_update").unwrap_or(&Value::Null);
                if let Some(id) = str_at(step, "conversation_id") {
                    self.base.session(&mut p, id);
                }
                let index = u64_at(step, "step_index").unwrap_or(0);
                let kind = str_at(step, "step_type").unwrap_or("step");
                let state = str_at(step, "state").unwrap_or_default().to_lowercase();
                p.events.push(EventBody::Progress {
                    message: format!("step {index}: {kind} {state}").trim_end().to_owned(),
                    pct: None,
                });
            }
            "result" => self.result(&mut p, v.get("result").unwrap_or(&Value::Null)),
            _ => return super::unrecognized(line),
        }
        p
    }
}

impl AgyParser {
    fn result(&mut self, p: &mut Parsed, r: &Value) {
        if let Some(id) = str_at(r, "conversation_id") {
            self.base.session(p, id);
        }
        let u = r.get("usage").unwrap_or(&Value::Null);
        let input = ["input_tokens", "cache_read_tokens"].iter().filter_map(|k| u64_at(u, k)).reduce(|a, b| a + b);
        let output = ["output_tokens", "thinking_tokens"].iter().filter_map(|k| u64_at(u, k)).reduce(|a, b| a + b);
        let duration = r
            .get("duration_seconds")
            .and_then(Value::as_f64)
            .filter(|d| *d >= 0.0)
            .map(|d| (d * 1000.0).round() as u64);
        let usage = Usage { input_tokens: input, output_tokens: output, cost_usd: None, duration_ms: duration };
        if usage != Usage::default() {
            self.base.usage(p, usage);
        }
        let status = str_at(r, "status").unwrap_or_default();
        let response = str_at(r, "response").unwrap_or_default();
        if status.eq_ignore_ascii_case("error") || status.eq_ignore_ascii_case("failed") {
            let msg = str_at(r, "error").filter(|m| !m.is_empty()).unwrap_or("agy run failed");
            error(p, msg, true);
            // "Individual quota reached. Please upgrade your subscription…"
            self.base.classify(p, msg);
        } else if !response.is_empty() {
            p.final_text = Some(response.to_owned());
        }
    }
}

impl AgyParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(AgyParser::default())
    }
}

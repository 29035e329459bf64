//! Cursor Agent CLI (`cursor-agent -p --output-format stream-json`). Closed source and never run
//! here: flags and events come from cursor.com/docs/cli (reference/output-format, parameters)
//! and published fixtures of other integrations [D]/[3P].

use serde_json::Value;

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, ProviderSpec, Stream, error,
    file_changed, mcp_servers_json, message, positional, s, str_at, summarize_input, thinking, u64_at,
};
use crate::oacp::{ChangeAction, Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::CursorAgent,
    display_name: "Cursor Agent",
    // several vendors' models, chosen per run.
    family: None,
    default_bin: "cursor-agent",
    capabilities: Capabilities {
        native_read_only: true,
        structured_output: false,
        resume: true,
        model_selection: true,
        reasoning_effort: false,
        mcp_injection: true,
        network: NetworkControl::Open,
    },
    efforts: &[],
    version_args: &["--version"],
    env_prefixes: &["CURSOR_"],
    state_dirs: &[".cursor", ".config/cursor"],
    config_env: None,
    config_files: &[".cursor/mcp.json", ".cursor/cli-config.json", ".cursor/rules"],
    install: None,
    own_sandbox: false,
    mcp_from_workspace: true,
    launch,
    parser: CursorParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    let mut args = vec![s("-p"), s("--output-format"), s("stream-json")];
    match inv.mode {
        // [D] --mode plan: read-only planning.
        Mode::ReadOnly => args.extend([s("--mode"), s("plan")]),
        // [D] --force allows commands unless explicitly denied.
        Mode::Write => args.push(s("--force")),
    }
    // [D] trust the workspace without the interactive prompt.
    args.push(s("--trust"));
    if let Some(m) = inv.model {
        args.extend([s("--model"), s(m)]);
    }
    if let Some(id) = inv.resume_session {
        // [D] --resume [chatId] has an optional value, so bind it with '='.
        args.push(format!("--resume={id}"));
    }
    let mut launch = Launch::default();
    if let Some(m) = &inv.mcp {
        // [D] MCP servers come only from .cursor/mcp.json; --approve-mcps skips the approval.
        args.push(s("--approve-mcps"));
        let config = mcp_servers_json(m, &[]);
        launch.workspace_files.push((s(".cursor/mcp.json"), config.to_string()));
    }
    args.push(positional(inv.prompt));
    launch.args = args;
    launch
}

#[derive(Debug, Default)]
pub(super) struct CursorParser {
    base: Base,
    thinking: String,
    last_text: Option<String>,
    got_result: bool,
}

impl LineParser for CursorParser {
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed {
        // Not JSON: [D] on failure the stream can end without a result; the error is on stderr.
        let v = match self.base.stdout_json(line, stream) {
            Ok(v) => v,
            Err(p) => return p,
        };
        let mut p = Parsed::default();
        if let Some(id) = str_at(&v, "session_id") {
            self.base.session(&mut p, id);
        }
        let kind = str_at(&v, "type").unwrap_or_default();
        if kind != "thinking" {
            self.flush_thinking(&mut p);
        }
        match kind {
            "system" | "user" => {}
            "thinking" => {
                self.thinking.push_str(str_at(&v, "text").unwrap_or_default());
                if str_at(&v, "subtype") == Some("completed") {
                    self.flush_thinking(&mut p);
                }
            }
            "assistant" => {
                let text = assistant_text(&v);
                message(&mut p, &text);
                if !text.trim().is_empty() {
                    self.last_text = Some(text);
                }
            }
            "tool_call" => self.tool_call(&mut p, &v),
            "result" => {
                self.got_result = true;
                let u = Usage { duration_ms: u64_at(&v, "duration_ms"), ..Usage::default() };
                if u != Usage::default() {
                    self.base.usage(&mut p, u);
                }
                let text = str_at(&v, "result").unwrap_or_default();
                if v.get("is_error").and_then(Value::as_bool) == Some(true) {
                    let msg = if text.is_empty() { "error" } else { text };
                    error(&mut p, msg, true);
                    self.base.classify(&mut p, msg);
                } else if !text.is_empty() {
                    p.final_text = Some(text.to_owned());
                } else {
                    p.final_text = self.last_text.clone();
                }
            }
            _ => return super::unrecognized(line),
        }
        p
    }

    fn finish(&mut self) -> Parsed {
        let mut p = Parsed::default();
        self.flush_thinking(&mut p);
        if !self.got_result {
            p.final_text = self.last_text.take();
        }
        p
    }
}

impl CursorParser {
    fn flush_thinking(&mut self, p: &mut Parsed) {
        if !self.thinking.is_empty() {
            let text = std::mem::take(&mut self.thinking);
            thinking(p, &text);
        }
    }

    /// `tool_call {subtype, call_id, tool_call: {<kind>ToolCall: {args, result}}}`.
    fn tool_call(&mut self, p: &mut Parsed, v: &Value) {
        let id = str_at(v, "call_id").unwrap_or_default();
        let Some((key, call)) = v.get("tool_call").and_then(Value::as_object).and_then(|o| o.iter().next()) else {
            p.events.push(crate::oacp::EventBody::Unrecognized { line: v.to_string() });
            return;
        };
        let name = key.strip_suffix("ToolCall").unwrap_or(key);
        let args = call.get("args").unwrap_or(&Value::Null);
        let summary = summarize_input(args);
        if str_at(v, "subtype") != Some("completed") {
            self.base.tool_start(p, id, name, summary);
            return;
        }
        let result = call.get("result").unwrap_or(&Value::Null);
        let ok = result.get("success").is_some();
        self.base.tool_end(p, id, Some(name), Some(summary), ok);
        if ok && matches!(name, "write" | "edit") {
            let path = str_at(args, "path").unwrap_or_default();
            let action = if name == "write" { ChangeAction::Created } else { ChangeAction::Modified };
            file_changed(p, path, action);
        }
        if !ok {
            // Assumed shapes: {"rejected": {...}} or {"error": {"message"|"error": ...}}.
            let text = result
                .get("rejected")
                .map(|r| format!("rejected permission: {r}"))
                .or_else(|| result.get("error").map(Value::to_string))
                .unwrap_or_default();
            self.base.classify_denial(p, &text);
        }
    }
}

fn assistant_text(v: &Value) -> String {
    v.pointer("/message/content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| str_at(b, "type") == Some("text"))
                .filter_map(|b| str_at(b, "text"))
                .collect::<String>()
        })
        .unwrap_or_default()
}

impl CursorParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(CursorParser::default())
    }
}

//! Google Gemini CLI (`gemini -p … -o stream-json`).
//!
//! Verified on @google/gemini-cli 0.61.0 (providers.md §4, fixtures/captures-local/gemini-*);
//! event schema per google-gemini/gemini-cli `packages/core/src/output/types.ts`.

use serde_json::Value;

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, ProviderSpec, Stream, error,
    file_changed, mcp_servers_json, message, s, str_at, summarize_input, u64_at,
};
use crate::oacp::{ChangeAction, Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Gemini,
    display_name: "Gemini CLI",
    family: Some("google"),
    default_bin: "gemini",
    capabilities: Capabilities {
        native_read_only: true,
        structured_output: false,
        resume: true,
        model_selection: true,
        // providers.md: no effort flag.
        reasoning_effort: false,
        mcp_injection: true,
        network: NetworkControl::Open,
    },
    efforts: &[],
    version_args: &["--version"],
    env_prefixes: &["GEMINI_", "GOOGLE_"],
    state_dirs: &[".gemini"],
    config_env: Some("GEMINI_CLI_HOME"),
    config_files: &[".gemini/settings.json", ".gemini/commands", ".gemini/extensions", ".gemini/GEMINI.md"],
    install: Some("npm install -g @google/gemini-cli"),
    own_sandbox: false,
    mcp_from_workspace: true,
    launch,
    parser: GeminiParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    // [V] headless on a piped stdin, which is the prompt ("-p: Appended to input on stdin (if
    // any)"; `echo … | gemini -o stream-json` runs one-shot): the prompt stays out of argv.
    let mut args = Vec::new();
    args.extend([
        s("-o"),
        s("stream-json"),
        s("--approval-mode"),
        // [V] in default mode write and shell tools are not offered in -p; yolo writes.
        s(match inv.mode {
            Mode::ReadOnly => "default",
            Mode::Write => "yolo",
        }),
        // [V] an untrusted folder exits 55 and downgrades yolo (providers.md §4).
        s("--skip-trust"),
    ]);
    if let Some(m) = inv.model {
        args.extend([s("-m"), s(m)]);
    }
    if let Some(id) = inv.resume_session {
        // [V] 0.61: `-r <uuid>` continues a session its ACP mode opened (provider::acp::launch).
        args.extend([s("-r"), s(id)]);
    }
    let mut launch = Launch {
        args,
        // [V] stops the CLI re-spawning itself, which matters for process-tree kills.
        env: vec![(s("GEMINI_CLI_NO_RELAUNCH"), s("true"))],
        stdin: super::Stdin::Prompt,
        ..Launch::default()
    };
    if let Some(m) = &inv.mcp {
        // [V] mcpServers with "trust": true in the workspace settings: called without a prompt
        // (gemini-mcp.jsonl). A system settings path is only honoured in a root-owned dir.
        let settings = mcp_servers_json(m, &[("trust", Value::Bool(true))]);
        launch.workspace_files.push((s(".gemini/settings.json"), settings.to_string()));
    }
    launch
}

#[derive(Debug, Default)]
pub(super) struct GeminiParser {
    base: Base,
    /// Assistant deltas since the last flush.
    pending: String,
    /// The latest flushed assistant segment: the answer once the run ends.
    last_segment: Option<String>,
    /// tool_id -> (tool name, parameters) for file changes.
    calls: std::collections::HashMap<String, (String, Value)>,
}

const WRITE_TOOLS: &[&str] = &["write_file", "replace", "edit"];

impl LineParser for GeminiParser {
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed {
        // Not JSON: stderr carries the 401 / quota details (gemini-e401.stderr.txt).
        let v = match self.base.stdout_json(line, stream) {
            Ok(v) => v,
            Err(p) => return p,
        };
        let mut p = Parsed::default();
        let kind = str_at(&v, "type").unwrap_or_default();
        let is_assistant_text = kind == "message" && str_at(&v, "role") == Some("assistant");
        if !is_assistant_text {
            self.flush(&mut p);
        }
        match kind {
            "init" => {
                if let Some(id) = str_at(&v, "session_id") {
                    self.base.session(&mut p, id);
                }
            }
            "message" => {
                if is_assistant_text {
                    self.pending.push_str(str_at(&v, "content").unwrap_or_default());
                }
                // role "user" echoes the prompt.
            }
            "tool_use" => {
                let id = str_at(&v, "tool_id").unwrap_or_default();
                let name = str_at(&v, "tool_name").unwrap_or_default();
                let params = v.get("parameters").cloned().unwrap_or(Value::Null);
                self.base.tool_start(&mut p, id, name, summarize_input(&params));
                self.calls.insert(id.to_owned(), (name.to_owned(), params));
            }
            "tool_result" => {
                let id = str_at(&v, "tool_id").unwrap_or_default();
                let ok = str_at(&v, "status") == Some("success");
                self.base.tool_end(&mut p, id, None, None, ok);
                if let Some((name, params)) = self.calls.remove(id) {
                    let path = str_at(&params, "file_path").unwrap_or_default();
                    if ok && WRITE_TOOLS.contains(&name.as_str()) {
                        // write_file does not say whether the file existed.
                        let action = if name == "write_file" { ChangeAction::Created } else { ChangeAction::Modified };
                        file_changed(&mut p, path, action);
                    }
                }
                if !ok {
                    let msg = v
                        .pointer("/error/message")
                        .and_then(Value::as_str)
                        .or_else(|| str_at(&v, "output"))
                        .unwrap_or_default();
                    // [S] non-interactive ASK_USER becomes DENY: "requires user confirmation".
                    self.base.classify_denial(&mut p, msg);
                }
            }
            "error" => {
                let msg = str_at(&v, "message").unwrap_or("error");
                error(&mut p, msg, false);
                self.base.classify(&mut p, msg);
            }
            "result" => self.result(&mut p, &v),
            _ => return super::unrecognized(line),
        }
        p
    }

    fn finish(&mut self) -> Parsed {
        let mut p = Parsed::default();
        if !self.pending.is_empty() {
            self.flush(&mut p);
            p.final_text = self.last_segment.clone();
        }
        p
    }
}

impl GeminiParser {
    fn flush(&mut self, p: &mut Parsed) {
        if self.pending.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.pending);
        message(p, &text);
        self.last_segment = Some(text);
    }

    fn result(&mut self, p: &mut Parsed, v: &Value) {
        let stats = v.get("stats").unwrap_or(&Value::Null);
        let usage = Usage {
            input_tokens: u64_at(stats, "input_tokens"),
            output_tokens: u64_at(stats, "output_tokens"),
            cost_usd: None,
            duration_ms: u64_at(stats, "duration_ms"),
        };
        if usage != Usage::default() {
            self.base.usage(p, usage);
        }
        if str_at(v, "status") == Some("error") {
            let msg = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("error");
            error(p, msg, true);
            self.base.classify(p, msg);
        } else {
            p.final_text = self.last_segment.clone();
        }
    }
}

impl GeminiParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(GeminiParser::default())
    }
}

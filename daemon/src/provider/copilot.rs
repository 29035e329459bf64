//! GitHub Copilot CLI (`copilot --output-format json`, the prompt on stdin).
//!
//! Verified on @github/copilot 1.0.102 (providers.md §4, fixtures/captures-local/copilot-*) and
//! in the caesar capture (a 402 quota error).

use serde_json::Value;

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, ProviderSpec, Stdin, Stream,
    allowed_effort, error, file_changed, mcp_servers_json, message, s, str_at, summarize_input, thinking, u64_at,
};
use crate::oacp::{BlockerKind, ChangeAction, Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Copilot,
    display_name: "GitHub Copilot CLI",
    // several vendors' models, chosen per run.
    family: None,
    default_bin: "copilot",
    capabilities: Capabilities {
        // Without --allow-all-tools writes are denied [V], but so is every other gated tool.
        native_read_only: true,
        structured_output: false,
        resume: true,
        model_selection: true,
        reasoning_effort: true,
        mcp_injection: true,
        network: NetworkControl::Open,
    },
    // [D] --effort; the documented range is wider (none..max), this is the safe core.
    efforts: &["low", "medium", "high"],
    version_args: &["--version"],
    env_prefixes: &["COPILOT_", "GH_", "GITHUB_"],
    state_dirs: &[".copilot", ".config/github-copilot"],
    config_env: None,
    config_files: &[".copilot/config.json", ".copilot/mcp-config.json", ".copilot/agents"],
    install: Some("npm install -g @github/copilot"),
    own_sandbox: false,
    mcp_from_workspace: false,
    launch,
    parser: CopilotParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    // [V] 1.0.102: with no -p, a piped stdin is the prompt of a non-interactive run (its
    // `user.message` is stdin's text), so the prompt stays out of argv (issue 19).
    // json output; --no-ask-user keeps a headless run from waiting on a question.
    let mut args = vec![s("--output-format"), s("json"), s("--no-ask-user")];
    if inv.mode == Mode::Write {
        // [V] without it the `create` tool fails "Permission denied …", exit 0.
        args.push(s("--allow-all-tools"));
    }
    if let Some(m) = inv.model {
        args.extend([s("--model"), s(m)]);
    }
    if let Some(e) = allowed_effort(&SPEC, inv.effort) {
        args.extend([s("--effort"), s(e)]);
    }
    if let Some(id) = inv.resume_session {
        // [D] --resume takes an optional value, so bind it with '='.
        args.push(format!("--resume={id}"));
    }
    if let Some(m) = &inv.mcp {
        let tools: Vec<Value> =
            if m.tools.is_empty() { vec![Value::from("*")] } else { m.tools.iter().map(|t| Value::from(*t)).collect() };
        let config = mcp_servers_json(m, &[("type", Value::from("local")), ("tools", Value::from(tools))]);
        // [V] --additional-mcp-config <json>; the tool must also be allowed.
        args.extend([s("--additional-mcp-config"), config.to_string()]);
        if inv.mode == Mode::ReadOnly {
            // [V] --allow-tool=<server> allows that server's tools.
            args.push(format!("--allow-tool={}", m.name));
        }
    }
    Launch {
        args,
        // [V] keeps the run from checking for updates.
        env: vec![(s("COPILOT_AUTO_UPDATE"), s("false"))],
        stdin: Stdin::Prompt,
        ..Launch::default()
    }
}

#[derive(Debug, Default)]
pub(super) struct CopilotParser {
    base: Base,
    output_tokens: u64,
    has_tokens: bool,
}

impl LineParser for CopilotParser {
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed {
        // Not JSON: [D] a logged-out run says "Error: No authentication information found." on stderr.
        let v = match self.base.stdout_json(line, stream) {
            Ok(v) => v,
            Err(p) => return p,
        };
        let mut p = Parsed::default();
        let data = v.get("data").unwrap_or(&Value::Null);
        match str_at(&v, "type").unwrap_or_default() {
            "assistant.message" => {
                let text = str_at(data, "content").unwrap_or_default();
                message(&mut p, text);
                if !text.trim().is_empty() {
                    p.final_text = Some(text.to_owned());
                }
                if let Some(n) = u64_at(data, "outputTokens") {
                    self.output_tokens += n;
                    self.has_tokens = true;
                }
            }
            "assistant.reasoning" => thinking(&mut p, str_at(data, "content").unwrap_or_default()),
            "tool.execution_start" => {
                let id = str_at(data, "toolCallId").unwrap_or_default();
                let name = str_at(data, "toolName").unwrap_or_default();
                let summary = summarize_input(data.get("arguments").unwrap_or(&Value::Null));
                self.base.tool_start(&mut p, id, name, summary);
            }
            "tool.execution_complete" => self.tool_complete(&mut p, data),
            "session.error" => {
                let msg = str_at(data, "message").unwrap_or("session error");
                error(&mut p, msg, true);
                let status = u64_at(data, "statusCode");
                match (str_at(data, "errorType").unwrap_or_default(), status) {
                    ("authentication", _) | (_, Some(401 | 403)) => {
                        self.base.blocker(&mut p, BlockerKind::Auth, msg);
                    }
                    ("quota" | "rate_limit", _) | (_, Some(402 | 429)) => {
                        self.base.blocker(&mut p, BlockerKind::RateLimit, msg);
                    }
                    _ => self.base.classify(&mut p, msg),
                }
            }
            "session.warning" => {
                error(&mut p, str_at(data, "message").unwrap_or("warning"), false);
            }
            "result" => {
                if let Some(id) = str_at(&v, "sessionId") {
                    self.base.session(&mut p, id);
                }
                let usage = v.get("usage").unwrap_or(&Value::Null);
                let u = Usage {
                    output_tokens: self.has_tokens.then_some(self.output_tokens),
                    duration_ms: u64_at(usage, "sessionDurationMs"),
                    ..Usage::default()
                };
                if u != Usage::default() {
                    self.base.usage(&mut p, u);
                }
            }
            // Turn bookkeeping and the prompt echo carry nothing new.
            "user.message" | "assistant.turn_start" | "assistant.turn_end" => {}
            // Ephemeral events (deltas, model calls, retries, MCP status) are UI chatter; the
            // durable events above repeat what matters.
            _ if v.get("ephemeral").and_then(Value::as_bool) == Some(true) => {}
            t if t.starts_with("session.") => {}
            _ => return super::unrecognized(line),
        }
        p
    }
}

impl CopilotParser {
    fn tool_complete(&mut self, p: &mut Parsed, data: &Value) {
        let id = str_at(data, "toolCallId").unwrap_or_default();
        let ok = data.get("success").and_then(Value::as_bool).unwrap_or(false);
        self.base.tool_end(p, id, None, None, ok);
        let edits = data.get("fileEdits").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for e in edits {
            let action = match str_at(e, "kind") {
                Some("create") => ChangeAction::Created,
                Some("delete") => ChangeAction::Deleted,
                Some("rename") => ChangeAction::Renamed,
                _ => ChangeAction::Modified,
            };
            file_changed(p, str_at(e, "path").unwrap_or_default(), action);
        }
        if ok {
            return;
        }
        let msg = data.pointer("/error/message").and_then(Value::as_str).unwrap_or_default();
        // [V] error.code "denied": "Permission denied because no interactive user response…"
        if data.pointer("/error/code").and_then(Value::as_str) == Some("denied") {
            self.base.blocker(p, BlockerKind::Permission, msg);
        } else {
            self.base.classify_denial(p, msg);
        }
    }
}

impl CopilotParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(CopilotParser::default())
    }
}

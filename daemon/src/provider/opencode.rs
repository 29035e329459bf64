//! opencode (`opencode run --format json`).
//!
//! Verified on opencode-ai 1.18.33 (providers.md §4, fixtures/captures-local/opencode-*) and in
//! the caesar capture; flags per anomalyco/opencode `packages/opencode/src/cli/cmd/run.ts`.

use serde_json::{Value, json};

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, ProviderSpec, Stdin, Stream,
    allowed_effort, error, file_changed, message, s, str_at, summarize_input, thinking, u64_at,
};
use crate::oacp::{BlockerKind, ChangeAction, Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Opencode,
    display_name: "opencode",
    // any provider's models, chosen per run.
    family: None,
    default_bin: "opencode",
    capabilities: Capabilities {
        native_read_only: true,
        structured_output: false,
        resume: true,
        model_selection: true,
        reasoning_effort: true,
        mcp_injection: true,
        network: NetworkControl::Open,
    },
    // [S] --variant is the reasoning effort; the valid set depends on the model's provider.
    efforts: &["minimal", "low", "medium", "high", "max"],
    version_args: &["--version"],
    env_prefixes: &[
        "OPENCODE_",
        "ANTHROPIC_",
        "OPENAI_",
        "GEMINI_",
        "GOOGLE_",
        "OPENROUTER_",
        "GROQ_",
        "XAI_",
        "MISTRAL_",
        "DEEPSEEK_",
        "AWS_",
        "AZURE_",
    ],
    state_dirs: &[".local/share/opencode", ".config/opencode", ".local/state/opencode"],
    config_env: None,
    config_files: &[
        ".config/opencode/opencode.json",
        ".config/opencode/opencode.jsonc",
        ".config/opencode/config.json",
        ".config/opencode/AGENTS.md",
        ".config/opencode/agent",
        ".config/opencode/command",
        ".config/opencode/plugin",
    ],
    install: Some("npm install -g opencode-ai"),
    own_sandbox: false,
    mcp_from_workspace: false,
    launch,
    parser: OpencodeParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    let mut args = vec![s("run"), s("--format"), s("json")];
    if let Some(m) = inv.model {
        // [V] -m provider/model.
        args.extend([s("-m"), s(m)]);
    }
    if let Some(e) = allowed_effort(&SPEC, inv.effort) {
        args.extend([s("--variant"), s(e)]);
    }
    if let Some(id) = inv.resume_session {
        // [S] -s <sessionID>; not run.
        args.extend([s("-s"), s(id)]);
    }
    let mut config = serde_json::Map::new();
    if inv.mode == Mode::ReadOnly {
        // [S] the built-in plan agent has no edit rights; deny edits outright as well.
        args.extend([s("--agent"), s("plan")]);
        config.insert("permission".into(), json!({"edit": "deny"}));
    }
    if let Some(m) = &inv.mcp {
        let mut command = vec![m.command.to_owned()];
        command.extend(m.args.iter().cloned());
        let mut server = json!({"type": "local", "command": command, "enabled": true});
        if !m.env.is_empty() {
            let env: serde_json::Map<String, Value> =
                m.env.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
            if let Some(obj) = server.as_object_mut() {
                // [S] `environment` of a local MCP server (config schema).
                obj.insert("environment".into(), Value::Object(env));
            }
        }
        // [V] "mcp": {name: {type: local, command: [...]}}; tools run without a prompt.
        config.insert("mcp".into(), json!({ m.name: server }));
    }
    // [V] `run` with no message reads it from a piped stdin (`process.stdin.isTTY ? undefined :
    // await Bun.stdin.text()`, the message appended when both are given): the prompt stays out
    // of argv (issue 19).
    let mut env = vec![(s("OPENCODE_DISABLE_AUTOUPDATE"), s("1"))];
    if !config.is_empty() {
        // [S] src/flag/flag.ts; the engine must merge a value the user already set.
        env.push((s("OPENCODE_CONFIG_CONTENT"), Value::Object(config).to_string()));
    }
    Launch { args, env, stdin: Stdin::Prompt, ..Launch::default() }
}

#[derive(Debug, Default)]
pub(super) struct OpencodeParser {
    base: Base,
    input: u64,
    output: u64,
    cost: f64,
    has_cost: bool,
}

impl LineParser for OpencodeParser {
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed {
        // Not JSON: stderr: "! permission requested: edit (…); auto-rejecting" (opencode-write-ask).
        let v = match self.base.stdout_json(line, stream) {
            Ok(v) => v,
            Err(p) => return p,
        };
        let mut p = Parsed::default();
        if let Some(id) = str_at(&v, "sessionID") {
            self.base.session(&mut p, id);
        }
        let part = v.get("part").unwrap_or(&Value::Null);
        match str_at(&v, "type").unwrap_or_default() {
            "step_start" => {}
            "text" => {
                let text = str_at(part, "text").unwrap_or_default();
                message(&mut p, text);
                if !text.trim().is_empty() {
                    p.final_text = Some(text.to_owned());
                }
            }
            "reasoning" => thinking(&mut p, str_at(part, "text").unwrap_or_default()),
            "tool_use" => self.tool(&mut p, part),
            "step_finish" => self.step_finish(&mut p, part),
            "error" => {
                let err = v.get("error").unwrap_or(&Value::Null);
                let msg = err
                    .pointer("/data/message")
                    .and_then(Value::as_str)
                    .or_else(|| str_at(err, "name"))
                    .unwrap_or("error");
                error(&mut p, msg, true);
                let data = err.get("data").unwrap_or(&Value::Null);
                match (u64_at(data, "statusCode"), str_at(err, "name")) {
                    (Some(401 | 403), _) | (_, Some("ProviderAuthError")) => {
                        self.base.blocker(&mut p, BlockerKind::Auth, msg);
                    }
                    (Some(402 | 429), _) => self.base.blocker(&mut p, BlockerKind::RateLimit, msg),
                    _ => self.base.classify(&mut p, msg),
                }
            }
            "done" => {
                // [S] JSON mode lists auto-rejected permissions in done.rejected.
                let rejected = v.get("rejected").and_then(Value::as_array).filter(|r| !r.is_empty());
                if let Some(r) = rejected {
                    let msg = format!("permissions auto-rejected: {}", Value::from(r.clone()));
                    self.base.blocker(&mut p, BlockerKind::Permission, &msg);
                }
            }
            _ => return super::unrecognized(line),
        }
        p
    }
}

impl OpencodeParser {
    /// opencode reports a tool only once it finished, so start and end come together.
    fn tool(&mut self, p: &mut Parsed, part: &Value) {
        let id = str_at(part, "callID").unwrap_or_default();
        let name = str_at(part, "tool").unwrap_or_default();
        let state = part.get("state").unwrap_or(&Value::Null);
        let input = state.get("input").unwrap_or(&Value::Null);
        let status = str_at(state, "status").unwrap_or_default();
        let summary = summarize_input(input);
        match status {
            "completed" => {
                self.base.tool_end(p, id, Some(name), Some(summary), true);
                let path = state
                    .pointer("/metadata/filepath")
                    .and_then(Value::as_str)
                    .or_else(|| str_at(input, "filePath"))
                    .unwrap_or_default();
                let existed = state.pointer("/metadata/exists").and_then(Value::as_bool);
                match name {
                    "write" if existed == Some(false) => {
                        file_changed(p, path, ChangeAction::Created);
                    }
                    "write" | "edit" | "multiedit" | "patch" => {
                        file_changed(p, path, ChangeAction::Modified);
                    }
                    _ => {}
                }
            }
            "error" => {
                self.base.tool_end(p, id, Some(name), Some(summary), false);
                // [V] "The user rejected permission to use this specific tool call."
                self.base.classify_denial(p, str_at(state, "error").unwrap_or_default());
            }
            // pending / running, should a later version stream them.
            _ => self.base.tool_start(p, id, name, summary),
        }
    }

    fn step_finish(&mut self, p: &mut Parsed, part: &Value) {
        let tokens = part.get("tokens").unwrap_or(&Value::Null);
        let cache = tokens.get("cache").unwrap_or(&Value::Null);
        self.input += u64_at(tokens, "input").unwrap_or(0)
            + u64_at(cache, "read").unwrap_or(0)
            + u64_at(cache, "write").unwrap_or(0);
        self.output += u64_at(tokens, "output").unwrap_or(0) + u64_at(tokens, "reasoning").unwrap_or(0);
        if let Some(c) = part.get("cost").and_then(Value::as_f64) {
            self.cost += c;
            self.has_cost = true;
        }
        let usage = Usage {
            input_tokens: Some(self.input),
            output_tokens: Some(self.output),
            cost_usd: self.has_cost.then_some(self.cost),
            duration_ms: None,
        };
        self.base.usage(p, usage);
    }
}

impl OpencodeParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(OpencodeParser::default())
    }
}

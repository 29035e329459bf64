//! OpenAI Codex CLI (`codex exec --json`).
//!
//! Verified on codex-cli 0.171.0 (providers.md §2 "codex", help/codex-exec*.txt,
//! fixtures/captures-local/codex-*); event schema per openai/codex
//! `codex-rs/exec/src/exec_events.rs`.

use serde_json::Value;

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, ProviderSpec, Stdin, Stream,
    allowed_effort, error, json_object, s, str_at, thinking, toml_inline_env, toml_key, toml_str, toml_str_array,
    u64_at,
};
use crate::oacp::{Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Codex,
    display_name: "Codex CLI",
    family: Some("openai"),
    default_bin: "codex",
    capabilities: Capabilities {
        native_read_only: true,
        structured_output: true,
        resume: true,
        model_selection: true,
        reasoning_effort: true,
        mcp_injection: true,
        // The read-only sandbox has no network; workspace-write toggles it.
        network: NetworkControl::WriteOnly,
    },
    // model_reasoning_effort values of codex-rs config (only "high" was exercised [V]).
    efforts: &["minimal", "low", "medium", "high", "xhigh"],
    version_args: &["--version"],
    env_prefixes: &["OPENAI_", "CODEX_", "AZURE_OPENAI_"],
    state_dirs: &[".codex"],
    config_env: Some("CODEX_HOME"),
    config_files: &[".codex/config.toml", ".codex/AGENTS.md", ".codex/rules", ".codex/prompts"],
    install: Some("npm install -g @openai/codex"),
    own_sandbox: true,
    mcp_from_workspace: false,
    launch,
    parser: CodexParser::new_boxed,
};

/// The override that keeps `/tmp` out of codex's workspace-write roots
/// (the key is in codex-cli 0.171's binary and its config's
/// `sandbox_workspace_write` table, beside `exclude_tmpdir_env_var`).
pub(super) const EXCLUDE_SLASH_TMP: &str = "sandbox_workspace_write.exclude_slash_tmp=true";

pub(super) fn launch(inv: &Invocation) -> Launch {
    let sandbox = match inv.mode {
        Mode::ReadOnly => "read-only",
        Mode::Write => "workspace-write",
    };
    let mut args = vec![s("exec")];
    let resume = inv.resume_session;
    if resume.is_some() {
        // [V] `codex exec resume <thread_id> "prompt"`.
        args.push(s("resume"));
    }
    args.push(s("--json"));
    if resume.is_some() {
        // help/codex-exec-resume.txt: resume has no -s / -C, so the sandbox goes through -c.
        args.extend([s("-c"), format!("sandbox_mode={}", toml_str(sandbox))]);
    } else {
        // [V] -s read-only made a shell write fail with "Read-only file system".
        args.extend([s("-s"), s(sandbox), s("-C"), s(inv.workspace)]);
    }
    // [V] outside a git repo exec exits 1 without this.
    args.push(s("--skip-git-repo-check"));
    if let Some(m) = inv.model {
        args.extend([s("-m"), s(m)]);
    }
    if let Some(e) = allowed_effort(&SPEC, inv.effort) {
        // [V] the request carried reasoning.effort.
        args.extend([s("-c"), format!("model_reasoning_effort={}", toml_str(e))]);
    }
    if let (Mode::Write, Some(on)) = (inv.mode, inv.network) {
        // providers.md: network under workspace-write, off by default.
        args.extend([s("-c"), format!("sandbox_workspace_write.network_access={on}")]);
    }
    if inv.mode == Mode::Write {
        // Issue 19: workspace-write also opens `/tmp`, and with it caesar's
        // directories beneath it; `$TMPDIR` (the task's own) stays writable.
        args.extend([s("-c"), s(EXCLUDE_SLASH_TMP)]);
    }
    if let Some(schema) = inv.output_schema_path {
        args.extend([s("--output-schema"), s(schema)]);
    }
    if let Some(m) = &inv.mcp {
        let mut table = format!("{{command={},args={}", toml_str(m.command), toml_str_array(m.args));
        if !m.env.is_empty() {
            table.push_str(&format!(",env={}", toml_inline_env(m.env)));
        }
        // [V] without it every call fails: "MCP tool call requires approval, but approval
        // policy is never" (codex-mcp-call-needs-approval.jsonl).
        table.push_str(",default_tools_approval_mode=\"approve\"}");
        args.extend([s("-c"), format!("mcp_servers.{}={table}", toml_key(m.name))]);
    }
    // clap: everything after `--` is positional, so a prompt may start with '-'.
    args.push(s("--"));
    if let Some(id) = resume {
        args.push(s(id));
    }
    // [V] `-` reads the prompt from stdin (help/codex-exec: "If not provided as an argument (or
    // if `-` is used), instructions are read from stdin"; `exec resume` the same): the prompt stays
    // out of argv (issue 19), whatever its size; the supervisor writes the task's prompt file there.
    args.push(s("-"));
    Launch { args, stdin: Stdin::Prompt, ..Launch::default() }
}

#[derive(Debug, Default)]
pub(super) struct CodexParser {
    base: Base,
    input_tokens: u64,
    output_tokens: u64,
}

impl LineParser for CodexParser {
    fn parse_line(&mut self, line: &str, _stream: Stream) -> Parsed {
        let raw = line;
        let line = line.trim();
        if line.is_empty() {
            return Parsed::default();
        }
        let Some(v) = json_object(line) else {
            // codex reports its own failures as JSON; tracing lines come from subsystems (e.g.
            // rmcp's "AuthRequired" for some MCP server) and are not the run's blockers.
            if is_tracing_line(line) {
                self.base.event_line();
                return super::unrecognized(line);
            }
            return self.base.text_line(raw);
        };
        self.base.event_line();
        let mut p = Parsed::default();
        match str_at(&v, "type").unwrap_or_default() {
            "thread.started" => {
                if let Some(id) = str_at(&v, "thread_id") {
                    self.base.session(&mut p, id);
                }
            }
            "turn.started" => {}
            "item.started" => self.item(&mut p, &v, false),
            "item.updated" => {
                let item = v.get("item").unwrap_or(&Value::Null);
                if str_at(item, "type") == Some("todo_list") {
                    todo_progress(&mut p, item);
                }
            }
            "item.completed" => self.item(&mut p, &v, true),
            "turn.completed" => {
                let u = v.get("usage").unwrap_or(&Value::Null);
                // input_tokens already includes cached_input_tokens.
                self.input_tokens += u64_at(u, "input_tokens").unwrap_or(0);
                self.output_tokens += u64_at(u, "output_tokens").unwrap_or(0);
                let usage = Usage {
                    input_tokens: Some(self.input_tokens),
                    output_tokens: Some(self.output_tokens),
                    ..Usage::default()
                };
                self.base.usage(&mut p, usage);
            }
            "turn.failed" => {
                let msg = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("turn failed");
                error(&mut p, msg, true);
                self.base.classify(&mut p, msg);
            }
            "error" => {
                // "Reconnecting... n/5" and other stream errors are not fatal by themselves;
                // a fatal one is followed by turn.failed.
                let msg = str_at(&v, "message").unwrap_or("error");
                error(&mut p, msg, false);
                self.base.classify(&mut p, msg);
            }
            _ => return super::unrecognized(line),
        }
        p
    }
}

impl CodexParser {
    fn item(&mut self, p: &mut Parsed, v: &Value, completed: bool) {
        let item = v.get("item").unwrap_or(&Value::Null);
        match super::codex_items::map_item(&mut self.base, p, item, completed, &super::codex_items::EXEC) {
            super::codex_items::Mapped::Done => return,
            super::codex_items::Mapped::McpFailed(err) => return self.base.classify_denial(p, &err),
            super::codex_items::Mapped::Other => {}
        }
        match str_at(item, "type").unwrap_or_default() {
            "reasoning" if completed => thinking(p, str_at(item, "text").unwrap_or_default()),
            "todo_list" => todo_progress(p, item),
            // codex's warning about itself, e.g. missing model metadata, the bundled
            // bubblewrap or the WebSocket fallback: never fatal, so a warning, not an error.
            "error" if completed => super::warning(p, str_at(item, "message").unwrap_or_default()),
            // Started items whose content only arrives on completion.
            "agent_message" | "reasoning" | "error" => {}
            _ => p.events.push(crate::oacp::EventBody::Unrecognized { line: v.to_string() }),
        }
    }
}

fn todo_progress(p: &mut Parsed, item: &Value) {
    let items = item.get("items").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let done = items.iter().filter(|i| i.get("completed").and_then(Value::as_bool) == Some(true)).count();
    let next = items
        .iter()
        .find(|i| i.get("completed").and_then(Value::as_bool) != Some(true))
        .and_then(|i| str_at(i, "text"))
        .unwrap_or("done");
    let pct = (!items.is_empty()).then(|| done as f64 * 100.0 / items.len() as f64);
    p.events.push(crate::oacp::EventBody::Progress { message: format!("plan {done}/{}: {next}", items.len()), pct });
}

/// `2026-08-11T14:54:31.678642Z ERROR target: …`, as written by `tracing_subscriber::fmt`.
fn is_tracing_line(line: &str) -> bool {
    let mut parts = line.split_whitespace();
    let (Some(ts), Some(level)) = (parts.next(), parts.next()) else {
        return false;
    };
    let ts = ts.as_bytes();
    ts.len() >= 20
        && ts.get(..4).is_some_and(|y| y.iter().all(u8::is_ascii_digit))
        && ts.get(4) == Some(&b'-')
        && ts.get(10) == Some(&b'T')
        && matches!(level, "ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE")
}

impl CodexParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(CodexParser::default())
    }
}

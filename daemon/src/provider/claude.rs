//! Claude Code (`claude -p --output-format stream-json`), and the parser shared by the CLIs that
//! copy its stream-json schema (qwen, codebuddy, grok `streaming-messages-json`).
//!
//! Verified on claude 2.1.197 against a scripted server and in a 2.1.227 capture
//! (../shared/reference/providers.md §2 "claude", help/claude.txt, fixtures/captures-*/claude*).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{
    Base, Capabilities, Invocation, Launch, LineParser, NetworkControl, Parsed, PermissionAsk, ProviderSpec, Stdin,
    Stream, allowed_effort, error, file_changed, json_object, mcp_servers_json, message, permission_question, s,
    str_at, summarize_input, thinking, u64_at,
};
use crate::oacp::{BlockerKind, ChangeAction, Mode, Usage};

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Claude,
    display_name: "Claude Code",
    family: Some("anthropic"),
    default_bin: "claude",
    capabilities: Capabilities {
        native_read_only: true,
        // `--json-schema` takes the schema inline, not a path; not wired.
        structured_output: false,
        resume: true,
        model_selection: true,
        reasoning_effort: true,
        mcp_injection: true,
        // `--settings` sandbox.network keys exist in the binary but were never tried.
        network: NetworkControl::Open,
    },
    // help/claude.txt: --effort <level> (low, medium, high, xhigh, max)
    efforts: &["low", "medium", "high", "xhigh", "max"],
    version_args: &["--version"],
    env_prefixes: &["ANTHROPIC_", "CLAUDE_", "DISABLE_", "MCP_", "AWS_", "CLOUD_ML_REGION", "VERTEX_"],
    state_dirs: &[".claude", ".claude.json", ".claude.json.backup"],
    config_env: Some("CLAUDE_CONFIG_DIR"),
    config_files: &[
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".claude/hooks",
        ".claude/commands",
        ".claude/agents",
        ".claude/plugins",
        ".claude/skills",
        ".claude/CLAUDE.md",
    ],
    install: Some("npm install -g @anthropic-ai/claude-code"),
    own_sandbox: false,
    mcp_from_workspace: false,
    launch,
    parser: ClaudeParser::new_boxed,
};

/// The line that ends claude's turn in stream-json; after it the supervisor closes stdin.
const RESULT_LINE_PREFIX: &str = r#"{"type":"result""#;

/// Whether claude runs with its permission prompts on stdin (write mode's
/// `--permission-prompt-tool stdio`), which only a daemon holding its stdin can answer.
pub(super) fn asks_on_stdin(args: &[String]) -> bool {
    args.iter().any(|a| a == "--permission-prompt-tool")
}

pub(super) fn launch(inv: &Invocation) -> Launch {
    // [V] The prompt comes on stdin as a stream-json user message, and in write mode permission
    // prompts come out as `control_request`s whose answers go back on stdin
    // (--permission-prompt-tool stdio): that is what lets caesar bridge them to the orchestrator. With this input format claude
    // exits only when stdin closes, which the supervisor does after the `result` line.
    let mut args = vec![
        s("-p"),
        s("--input-format"),
        s("stream-json"),
        s("--output-format"),
        s("stream-json"),
        // [V] stream-json in -p mode requires --verbose.
        s("--verbose"),
    ];
    match inv.mode {
        // [V] plan refuses writes ("Cannot write to … while in plan mode") by itself. Given a
        // prompt tool it would ask instead, and an `allow` would break the read-only promise.
        Mode::ReadOnly => args.extend([s("--permission-mode"), s("plan")]),
        // [V] acceptEdits lets the agent edit the workspace; anything else (a command that is
        // not an edit) is asked through the bridge.
        Mode::Write => {
            args.extend([s("--permission-prompt-tool"), s("stdio"), s("--permission-mode"), s("acceptEdits")])
        }
    }
    if let Some(m) = inv.model {
        args.extend([s("--model"), s(m)]);
    }
    if let Some(e) = allowed_effort(&SPEC, inv.effort) {
        args.extend([s("--effort"), s(e)]);
    }
    if let Some(id) = inv.resume_session {
        // [V] --resume <session_id> keeps the same session_id (claude-resume-text.jsonl).
        args.extend([s("--resume"), s(id)]);
    }
    if let Some(m) = &inv.mcp {
        let config = mcp_servers_json(m, &[("type", Value::from("stdio"))]);
        // [V] inline JSON config plus --strict-mcp-config (claude-mcp-report-progress.jsonl).
        args.extend([s("--mcp-config"), config.to_string(), s("--strict-mcp-config")]);
        // [V] tools are named mcp__<server>__<tool>; pre-allowed they run even in plan mode.
        args.extend([s("--allowedTools"), mcp_tool_names(m.name, m.tools)]);
    }
    Launch {
        args,
        // [V] without it even a 401 is retried 10 times (system/api_retry).
        env: vec![(s("CLAUDE_CODE_MAX_RETRIES"), s("0"))],
        stdin: Stdin::Control { initial: user_message(inv.prompt), close_after: s(RESULT_LINE_PREFIX) },
        ..Launch::default()
    }
}

/// One stream-json user message, newline-terminated.
pub(crate) fn user_message(text: &str) -> String {
    let mut line = json!({"type": "user", "message": {"role": "user", "content": text}}).to_string();
    line.push('\n');
    line
}

/// The control response that answers a `can_use_tool` request: allow (echoing the input, which
/// the SDK requires) or deny with the orchestrator's words.
pub(super) fn permission_response(request_id: &str, allow: bool, input: &Value, message: &str) -> String {
    let response = if allow {
        json!({"behavior": "allow", "updatedInput": input})
    } else {
        json!({"behavior": "deny", "message": message})
    };
    let mut line = json!({"type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response}})
    .to_string();
    line.push('\n');
    line
}

/// The request id of caesar's interrupt, echoed in claude's `control_response`.
pub(super) const INTERRUPT_REQUEST_ID: &str = "caesar-interrupt";

/// [V] claude 2.1.197: `{"type":"control_request","request_id":…,"request":{"subtype":"interrupt"}}`
/// on stdin answers `{"type":"control_response","response":{"subtype":"success","request_id":…}}`,
/// rejects the running tool call, and ends the turn with a `result` of subtype
/// `error_during_execution` (after which the supervisor closes stdin and claude exits).
pub(crate) fn interrupt_line() -> String {
    let mut line = json!({"type": "control_request", "request_id": INTERRUPT_REQUEST_ID,
        "request": {"subtype": "interrupt"}})
    .to_string();
    line.push('\n');
    line
}

/// `mcp__<server>__<tool>` for each tool, or the whole server (`mcp__<server>`) when none listed.
pub(super) fn mcp_tool_names(server: &str, tools: &[&str]) -> String {
    if tools.is_empty() {
        format!("mcp__{server}")
    } else {
        tools.iter().map(|t| format!("mcp__{server}__{t}")).collect::<Vec<_>>().join(",")
    }
}

/// Parser for Claude's stream-json (also qwen, codebuddy and grok `streaming-messages-json`).
#[derive(Debug, Default)]
pub(super) struct ClaudeParser {
    base: Base,
    /// Last assistant text block, the final answer if the stream ends without a `result`.
    last_text: Option<String>,
    got_result: bool,
    /// tool_use id -> file path, for file-editing tools.
    file_targets: HashMap<String, String>,
}

/// File-editing tools: claude's, and qwen's ([V] qwen 0.24.4 `write_file` and `edit`, both with
/// `file_path`), which share this parser.
const FILE_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit", "write_file", "edit"];

impl LineParser for ClaudeParser {
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
        if let Some(id) = str_at(&v, "session_id") {
            self.base.session(&mut p, id);
        }
        match str_at(&v, "type").unwrap_or_default() {
            "system" => self.system(&mut p, &v),
            "assistant" => self.assistant(&mut p, &v),
            "user" => self.user(&mut p, &v),
            "result" => self.result(&mut p, &v),
            "control_request" => self.control_request(&mut p, &v),
            "control_response" => {
                // The answer to caesar's interrupt; other responses (none today) need nothing.
                if v.pointer("/response/request_id").and_then(Value::as_str) == Some(INTERRUPT_REQUEST_ID) {
                    let ok = v.pointer("/response/subtype").and_then(Value::as_str) == Some("success");
                    let said = if ok { "claude accepted the interrupt" } else { "claude refused the interrupt" };
                    p.events.push(crate::oacp::EventBody::Progress { message: said.to_owned(), pct: None });
                }
            }
            "rate_limit_event" => self.rate_limit(&mut p, &v),
            // Partial deltas (only with --include-partial-messages) duplicate `assistant`.
            "stream_event" => {}
            _ => return super::unrecognized(line),
        }
        p
    }

    fn finish(&mut self) -> Parsed {
        let mut p = Parsed::default();
        if !self.got_result {
            p.final_text = self.last_text.take();
        }
        p
    }
}

impl ClaudeParser {
    /// [V] `{"type":"control_request","request_id":…,"request":{"subtype":"can_use_tool",
    /// "tool_name":…,"input":{…},"tool_use_id":…}}`. Other subtypes need no answer from us.
    fn control_request(&mut self, p: &mut Parsed, v: &Value) {
        let request = v.get("request").unwrap_or(&Value::Null);
        if str_at(request, "subtype") != Some("can_use_tool") {
            return;
        }
        let (Some(request_id), Some(tool_name)) = (str_at(v, "request_id"), str_at(request, "tool_name")) else {
            return;
        };
        let input = request.get("input").cloned().unwrap_or(Value::Null);
        // The whole input, before the agent's own description of it.
        let summary = permission_question(tool_name, str_at(request, "description"), &input);
        p.permission = Some(PermissionAsk {
            request_id: request_id.to_owned(),
            tool_name: tool_name.to_owned(),
            input,
            summary,
            kind: tool_kind(tool_name).map(str::to_owned),
            options: Vec::new(),
        });
    }

    /// `{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":<unix s>,
    /// "rateLimitType":"five_hour",…}}`: the shape claude 2.1.197 builds (its `rate_limit_info`
    /// copies `status`, `resetsAt`, `rateLimitType`, `overageResetsAt`, … from the
    /// `anthropic-ratelimit-unified-*` headers, `resetsAt` in seconds). Only a rejection blocks;
    /// its reset time (the overage's when only that is given) goes on the blocker.
    ///
    /// `allowed_warning` (the provider still serves, near its limit) and `rejected` are also
    /// quota signals for the ledger (issue 32); `allowed` says nothing worth keeping.
    fn rate_limit(&mut self, p: &mut Parsed, v: &Value) {
        let info = v.get("rate_limit_info").unwrap_or(&Value::Null);
        let level = match str_at(info, "status") {
            Some("rejected") => crate::quota::Level::Exhausted,
            Some("allowed_warning") => crate::quota::Level::Near,
            _ => return,
        };
        let kind = str_at(info, "rateLimitType").unwrap_or("unknown");
        let resets_at_ms = ["resetsAt", "overageResetsAt"]
            .iter()
            .filter_map(|k| info.get(*k).and_then(Value::as_f64))
            .find(|secs| *secs > 0.0)
            .map(|secs| (secs * 1000.0) as i64);
        p.quota = Some(crate::quota::QuotaSignal {
            level,
            resets_at_ms,
            source: "rate_limit_event".to_owned(),
            account: None,
            detail: kind.to_owned(),
        });
        if level != crate::quota::Level::Exhausted {
            return;
        }
        let msg = match resets_at_ms {
            Some(ms) => format!("rate limit rejected ({kind}); resets at {}", crate::clock::rfc3339(ms)),
            None => format!("rate limit rejected ({kind})"),
        };
        self.base.blocker_until(p, BlockerKind::RateLimit, &msg, resets_at_ms);
    }

    fn system(&mut self, p: &mut Parsed, v: &Value) {
        // init, hook_started/hook_response, thinking_tokens, status… are informational.
        if str_at(v, "subtype") != Some("api_retry") {
            return;
        }
        let err = str_at(v, "error").unwrap_or("unknown");
        let status = u64_at(v, "error_status");
        let attempt = u64_at(v, "attempt").unwrap_or(0);
        let max = u64_at(v, "max_retries").unwrap_or(0);
        let msg = match status {
            Some(st) => format!("API retry {attempt}/{max}: {err} (status {st})"),
            None => format!("API retry {attempt}/{max}: {err}"),
        };
        error(p, &msg, false);
        // A 401 does not heal on retry; a 429 might, so only the final error counts for it.
        if status == Some(401) || err == "authentication_failed" {
            self.base.blocker(p, BlockerKind::Auth, &msg);
        }
    }

    fn assistant(&mut self, p: &mut Parsed, v: &Value) {
        let err = str_at(v, "error");
        let content = v.pointer("/message/content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for block in content {
            match str_at(block, "type").unwrap_or_default() {
                "text" => {
                    let text = str_at(block, "text").unwrap_or_default();
                    if let Some(kind) = err {
                        // A synthetic message carrying an API error, not an answer.
                        error(p, text, false);
                        match error_kind(kind) {
                            Some(k) => self.base.blocker(p, k, text),
                            None if kind == "unknown" => self.base.classify(p, text),
                            None => {}
                        }
                    } else {
                        message(p, text);
                        if !text.trim().is_empty() {
                            self.last_text = Some(text.to_owned());
                        }
                    }
                }
                "thinking" => thinking(p, str_at(block, "thinking").unwrap_or_default()),
                "tool_use" => {
                    let id = str_at(block, "id").unwrap_or_default();
                    let name = str_at(block, "name").unwrap_or_default();
                    let input = block.get("input").unwrap_or(&Value::Null);
                    if FILE_TOOLS.contains(&name) {
                        let path = str_at(input, "file_path").or_else(|| str_at(input, "notebook_path"));
                        if let Some(path) = path {
                            self.file_targets.insert(id.to_owned(), path.to_owned());
                        }
                    }
                    self.base.tool_start(p, id, name, summarize_input(input));
                }
                _ => {}
            }
        }
        // An error message with no text block still deserves its blocker.
        if let Some(kind) = err.and_then(error_kind) {
            self.base.blocker(p, kind, err.unwrap_or_default());
        }
    }

    fn user(&mut self, p: &mut Parsed, v: &Value) {
        let content = v.pointer("/message/content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let tool_use_result = v.get("tool_use_result");
        for block in content {
            if str_at(block, "type") != Some("tool_result") {
                continue;
            }
            let id = str_at(block, "tool_use_id").unwrap_or_default();
            let is_error = block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            self.base.tool_end(p, id, None, None, !is_error);
            if is_error {
                let text = content_text(block.get("content"));
                self.base.classify_denial(p, &text);
                continue;
            }
            // tool_use_result {type: create|update, filePath} reports the file change.
            let reported = tool_use_result.and_then(|r| {
                let path = str_at(r, "filePath")?;
                let action = match str_at(r, "type") {
                    Some("create") => ChangeAction::Created,
                    _ => ChangeAction::Modified,
                };
                Some((path.to_owned(), action))
            });
            let target = self.file_targets.remove(id);
            match (reported, target) {
                (Some((path, action)), _) => file_changed(p, &path, action),
                (None, Some(path)) => file_changed(p, &path, ChangeAction::Modified),
                (None, None) => {}
            }
        }
    }

    fn result(&mut self, p: &mut Parsed, v: &Value) {
        self.got_result = true;
        let usage = v.get("usage").unwrap_or(&Value::Null);
        let input = ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]
            .iter()
            .filter_map(|k| u64_at(usage, k))
            .reduce(|a, b| a + b);
        let u = Usage {
            input_tokens: input,
            output_tokens: u64_at(usage, "output_tokens"),
            cost_usd: v.get("total_cost_usd").and_then(Value::as_f64),
            duration_ms: u64_at(v, "duration_ms"),
        };
        if u != Usage::default() {
            self.base.usage(p, u);
        }
        let text = str_at(v, "result").unwrap_or_default();
        let subtype = str_at(v, "subtype").unwrap_or_default();
        let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false) || subtype.starts_with("error");
        if is_error {
            // qwen puts `error: {type, message}` on an error result.
            let detail = v.pointer("/error/message").and_then(Value::as_str).filter(|m| !m.is_empty());
            let msg =
                [text, detail.unwrap_or_default(), subtype].into_iter().find(|m| !m.is_empty()).unwrap_or("error");
            error(p, msg, true);
            match u64_at(v, "api_error_status") {
                Some(401 | 403) => self.base.blocker(p, BlockerKind::Auth, msg),
                Some(402 | 429) => self.base.blocker(p, BlockerKind::RateLimit, msg),
                _ => self.base.classify(p, msg),
            }
        } else if !text.is_empty() {
            p.final_text = Some(text.to_owned());
        }
        // [V] a default-mode or plan-mode refusal lists the calls in permission_denials.
        let denials = v.get("permission_denials").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if !denials.is_empty() {
            let list: Vec<String> = denials
                .iter()
                .map(|d| {
                    let tool = str_at(d, "tool_name").unwrap_or("tool");
                    let input = summarize_input(d.get("tool_input").unwrap_or(&Value::Null));
                    format!("{tool}({input})")
                })
                .collect();
            let msg = format!("permission denied: {}", list.join(", "));
            self.base.blocker(p, BlockerKind::Permission, &msg);
        }
    }
}

/// The ACP kind of one of claude's tools (qwen's where they share the parser), so that the
/// bridge treats a `Bash` or a `Write` in a read-only task as it treats an ACP `execute` or
/// `edit`: refused by caesar, never asked.
fn tool_kind(tool: &str) -> Option<&'static str> {
    match tool {
        "Bash" | "run_shell_command" => Some("execute"),
        t if FILE_TOOLS.contains(&t) => Some("edit"),
        "Read" | "read_file" | "read_many_files" => Some("read"),
        "Glob" | "Grep" | "LS" | "glob" | "grep_search" | "list_directory" => Some("search"),
        "WebFetch" | "WebSearch" | "web_fetch" => Some("fetch"),
        _ => None,
    }
}

/// The blocker behind an assistant message's `error` kind (full enum in providers.md).
fn error_kind(kind: &str) -> Option<BlockerKind> {
    match kind {
        "authentication_failed" | "oauth_org_not_allowed" => Some(BlockerKind::Auth),
        "rate_limit" | "billing_error" => Some(BlockerKind::RateLimit),
        _ => None,
    }
}

/// The text of a tool_result `content`: a string or a list of text blocks.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(items)) => items.iter().filter_map(|i| str_at(i, "text")).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

impl ClaudeParser {
    /// A fresh parser, as the adapter table names it.
    pub(super) fn new_boxed() -> Box<dyn super::LineParser> {
        Box::new(ClaudeParser::default())
    }
}

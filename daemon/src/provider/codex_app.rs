//! codex through `codex app-server`: adapter data and a pure reader of its JSON-RPC stream.
//!
//! Why it exists: `codex exec --json` is a one-shot stream whose write tasks can never ask for
//! approval. `codex app-server` (experimental in 0.171) is a JSON-RPC peer on stdio: threads and
//! turns, approvals as server requests, `turn/interrupt`, structured errors, token usage and the
//! turn's aggregated diff. Everything here was verified against the installed codex-cli 0.171.0
//! (`codex app-server generate-json-schema` and a hand-driven session against the scripted model
//! server, [V]):
//! - the opening is `initialize` → the `initialized` notification → `thread/start {cwd,
//!   approvalPolicy, sandbox, config}` → `turn/start {threadId, input}`; closing stdin once
//!   `turn/completed` arrives makes the server exit 0 ([V]);
//! - `item/commandExecution/requestApproval` carries the whole command and `availableDecisions`
//!   (`accept`, an exec-policy amendment, `cancel`); `decline` is accepted
//!   although not listed, and the model reads "rejected by user" ([V]);
//! - `item/fileChange/requestApproval` carries only the item id: the changes (path, kind, diff)
//!   come with the `item/started` of the `fileChange` item just before it ([V]);
//! - `turn/interrupt {threadId, turnId: ""}` interrupts whatever turn is active (a wrong turn id
//!   is refused with "expected active turn id"), and the turn completes as `interrupted` ([V]);
//! - a 429 of the usage-limit kind is `codexErrorInfo: "usageLimitExceeded"`, preceded by
//!   `account/rateLimits/updated` whose exhausted window says `resetsAt` (seconds); a plain 429
//!   is `{responseTooManyFailedAttempts: {httpStatusCode: 429}}`, a 401 from an API-key provider
//!   `{httpConnectionFailed: {httpStatusCode: 401}}` ([V]).
//!
//! Only the ids 1 (initialize), 2 (thread/start), 3 (turn/start), 4 (turn/interrupt) and those from
//! [`ID_STEER_BASE`] on (`turn/steer`) are caesar's; the supervisor sends all but the interrupt of a
//! cancel (its codex opening and steers).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{
    Base, Invocation, Launch, LineParser, Parsed, PermissionAsk, PermissionOption, Stdin, Stream, allowed_effort,
    error, json_object, permission_question, s, str_at, thinking, truncate, u64_at,
};
use crate::oacp::{BlockerKind, EventBody, Mode, Usage};

/// The JSON-RPC id of caesar's `initialize`.
pub const ID_INITIALIZE: u64 = 1;
/// The JSON-RPC id of caesar's `thread/start`.
pub const ID_THREAD_START: u64 = 2;
/// The JSON-RPC id of caesar's `turn/start`.
pub const ID_TURN_START: u64 = 3;
/// The JSON-RPC id of caesar's `turn/interrupt`.
pub const ID_INTERRUPT: u64 = 4;
/// The JSON-RPC id of the `turn/steer` of steer `n` is this plus `n` (issue 31,
/// `supervisor::steer`), so that its answer names the steer it is about.
pub const ID_STEER_BASE: u64 = 1 << 40;

/// The oldest codex whose app-server caesar drives: the version its protocol was verified on.
pub const MIN_VERSION: (u64, u64, u64) = (0, 171, 0);

/// Whether a `codex --version` answer (`codex-cli 0.171.0`) names a codex whose app-server
/// caesar drives.
pub fn has_app_server(version_line: &str) -> bool {
    let Some(version) = version_line.split_whitespace().find(|w| w.starts_with(|c: char| c.is_ascii_digit())) else {
        return false;
    };
    let mut parts = version.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b), Some(c)) => (a, b, c) >= MIN_VERSION,
        _ => false,
    }
}

/// The launch of codex as an app-server session: `codex app-server`, and the opening the
/// supervisor carries out (a resumed task's thread through `thread/resume`).
pub fn launch(inv: &Invocation) -> Launch {
    Launch {
        args: vec![s("app-server")],
        stdin: Stdin::Session {
            protocol: crate::launch::SessionProtocol::CodexAppServer,
            initial: initialize_line(),
            opening: opening(inv).to_string(),
        },
        ..Launch::default()
    }
}

/// caesar's `initialize`.
pub fn initialize_line() -> String {
    json!({"jsonrpc": "2.0", "id": ID_INITIALIZE, "method": "initialize", "params": {
        "clientInfo": {"name": "caesar", "title": "caesar", "version": env!("CARGO_PKG_VERSION")}}})
    .to_string()
        + "\n"
}

/// What the supervisor needs for the rest of the opening: `thread/start`'s params and
/// `turn/start`'s (but the thread id, which the server gives).
///
/// The approval policy is `on-request` in both modes: codex works in its sandbox (workspace-write
/// for write tasks, read-only for read-only ones) without asking, as `codex exec` does, and asks
/// when it wants out of it (a command it runs with escalated permissions, a change outside the
/// writable roots) — [V] a plain `touch` ran unasked, the same with `require_escalated` asked.
/// In a read-only task caesar refuses what asks to write or run (the engine's permission
/// bridge). The return channel goes in through the thread's config overrides (the keys `-c`
/// takes), its tools approved in advance.
pub fn opening(inv: &Invocation) -> Value {
    let sandbox = match inv.mode {
        Mode::ReadOnly => "read-only",
        Mode::Write => "workspace-write",
    };
    let mut config = serde_json::Map::new();
    if let Some(m) = &inv.mcp {
        let env: serde_json::Map<String, Value> = m.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let mut server = json!({"command": m.command, "args": m.args, "default_tools_approval_mode": "approve"});
        if !env.is_empty() {
            server["env"] = Value::Object(env);
        }
        config.insert(format!("mcp_servers.{}", m.name), server);
    }
    if let (Mode::Write, Some(on)) = (inv.mode, inv.network) {
        config.insert(s("sandbox_workspace_write.network_access"), json!(on));
    }
    if inv.mode == Mode::Write {
        // Issue 19: `/tmp` (caesar's directories beneath it) out of the writable roots.
        config.insert(s("sandbox_workspace_write.exclude_slash_tmp"), json!(true));
    }
    let mut thread = json!({"cwd": inv.workspace, "approvalPolicy": "on-request", "sandbox": sandbox,
        "config": config, "ephemeral": false});
    if let Some(m) = inv.model {
        thread["model"] = json!(m);
    }
    let mut turn = json!({"input": [{"type": "text", "text": inv.prompt, "text_elements": []}]});
    if let Some(e) = allowed_effort(&super::codex::SPEC, inv.effort) {
        turn["effort"] = json!(e);
    }
    if inv.output_schema_path.is_some()
        && let Some(schema) = crate::oacp::schema("report", true)
    {
        turn["outputSchema"] = schema;
    }
    let mut opening = json!({"thread_start": thread, "turn_start": turn});
    if let Some(thread) = inv.resume_session {
        // The supervisor sends `thread/resume` instead of `thread/start` (the supervisor's codex opening).
        opening["resume"] = json!(thread);
    }
    opening
}

/// The JSON-RPC response that answers approval request `ask` with `decision` (`accept`,
/// `acceptForSession` or `decline`).
pub fn approval_response(ask: &PermissionAsk, decision: &str) -> String {
    let id: Value = serde_json::from_str(&ask.request_id).unwrap_or(Value::String(ask.request_id.clone()));
    json!({"jsonrpc": "2.0", "id": id, "result": {"decision": decision}}).to_string()
}

/// The request that interrupts the active turn of thread `thread` (an empty turn id names the
/// active one, [V] 0.171).
pub fn interrupt_line(thread: &str) -> String {
    json!({"jsonrpc": "2.0", "id": ID_INTERRUPT, "method": "turn/interrupt",
        "params": {"threadId": thread, "turnId": ""}})
    .to_string()
}

/// Reads a codex app-server's output: JSON-RPC messages on stdout, its tracing on stderr.
#[derive(Debug, Default)]
pub struct CodexAppParser {
    base: Base,
    /// Lines owed to the server (errors for the requests caesar does not serve).
    replies: Vec<String>,
    /// The changes of each `fileChange` item seen started, by item id: a file-change approval
    /// names only the item.
    changes: HashMap<String, Value>,
    /// The turn's latest aggregated diff.
    diff: String,
    /// When the exhausted rate-limit window lifts, from the latest `account/rateLimits/updated`.
    resets_at_ms: Option<i64>,
}

/// The most file changes kept for approvals at once (a turn has a handful).
const MAX_KEPT_CHANGES: usize = 256;

impl CodexAppParser {
    /// The replies owed to the server since the last call.
    pub fn take_replies(&mut self) -> Vec<String> {
        std::mem::take(&mut self.replies)
    }

    fn notification(&mut self, p: &mut Parsed, method: &str, params: &Value, line: &str) {
        match method {
            "thread/started" => {
                if let Some(id) = params.pointer("/thread/id").and_then(Value::as_str) {
                    self.base.session(p, id);
                }
            }
            "item/started" => self.item(p, params.get("item").unwrap_or(&Value::Null), false),
            "item/completed" => self.item(p, params.get("item").unwrap_or(&Value::Null), true),
            "thread/tokenUsage/updated" => {
                let total = params.pointer("/tokenUsage/total").unwrap_or(&Value::Null);
                if total.is_object() {
                    // inputTokens already counts the cached input.
                    let usage = Usage {
                        input_tokens: u64_at(total, "inputTokens"),
                        output_tokens: u64_at(total, "outputTokens"),
                        ..Usage::default()
                    };
                    self.base.usage(p, usage);
                }
            }
            "turn/diff/updated" => self.diff = truncate(str_at(params, "diff").unwrap_or_default(), 1 << 20),
            "account/rateLimits/updated" => self.rate_limits(p, params.get("rateLimits").unwrap_or(&Value::Null)),
            "error" => {
                let e = params.get("error").unwrap_or(&Value::Null);
                let msg = str_at(e, "message").unwrap_or("error");
                // A retried error is not fatal by itself; a fatal one ends the turn as failed.
                error(p, msg, false);
                self.structured_blocker(p, e);
            }
            "turn/completed" => self.turn_completed(p, params.get("turn").unwrap_or(&Value::Null)),
            "turn/plan/updated" => {
                let steps: Vec<&str> = params
                    .get("plan")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| str_at(s, "step"))
                    .collect();
                if !steps.is_empty() {
                    p.events.push(EventBody::Progress {
                        message: truncate(&format!("plan: {}", steps.join("; ")), 500),
                        pct: None,
                    });
                }
            }
            "warning" | "configWarning" => {
                let text = str_at(params, "message").or_else(|| str_at(params, "summary")).unwrap_or_default();
                super::warning(p, &truncate(text, 500));
            }
            // Streaming deltas (the completed item carries the whole text) and state the
            // orchestrator does not act on.
            "item/agentMessage/delta"
            | "item/reasoning/textDelta"
            | "item/reasoning/summaryTextDelta"
            | "item/reasoning/summaryPartAdded"
            | "item/commandExecution/outputDelta"
            | "item/fileChange/outputDelta"
            | "item/fileChange/patchUpdated"
            | "item/plan/delta"
            | "item/mcpToolCall/progress"
            | "turn/started"
            | "thread/status/changed"
            | "thread/name/updated"
            | "thread/settings/updated"
            | "serverRequest/resolved"
            | "remoteControl/status/changed"
            | "mcpServer/startupStatus/updated"
            | "account/updated"
            | "skills/changed"
            | "deprecationNotice" => {}
            _ => p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) }),
        }
    }

    fn item(&mut self, p: &mut Parsed, item: &Value, completed: bool) {
        let id = str_at(item, "id").unwrap_or_default();
        // A file-change approval names only its item: the changes are kept from its start.
        if str_at(item, "type") == Some("fileChange") {
            if completed {
                self.changes.remove(id);
            } else {
                if self.changes.len() >= MAX_KEPT_CHANGES {
                    self.changes.clear();
                }
                self.changes.insert(id.to_owned(), item.get("changes").cloned().unwrap_or(Value::Null));
            }
        }
        if super::codex_items::map_item(&mut self.base, p, item, completed, &super::codex_items::APP_SERVER)
            != super::codex_items::Mapped::Other
        {
            return;
        }
        match str_at(item, "type").unwrap_or_default() {
            "reasoning" if completed => {
                let text: Vec<&str> = ["summary", "content"]
                    .iter()
                    .filter_map(|k| item.get(*k).and_then(Value::as_array))
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                thinking(p, &text.join("\n"));
            }
            "plan" if completed => p.events.push(EventBody::Progress {
                message: truncate(&format!("plan: {}", str_at(item, "text").unwrap_or_default()), 500),
                pct: None,
            }),
            // Echoes of the prompt, items whose content comes on completion, and bookkeeping.
            "userMessage" | "agentMessage" | "reasoning" | "plan" | "contextCompaction" | "hookPrompt" => {}
            _ => p.events.push(EventBody::Unrecognized { line: truncate(&item.to_string(), 2000) }),
        }
    }

    /// Keeps when the exhausted window (used 100 %) lifts, for a usage-limit blocker; a window
    /// used [`crate::quota::NEAR_PERCENT`] % or more is a quota signal for the ledger (issue 32).
    fn rate_limits(&mut self, p: &mut Parsed, limits: &Value) {
        let exhausted = ["primary", "secondary"]
            .iter()
            .filter_map(|w| limits.get(*w))
            .filter(|w| w.get("usedPercent").and_then(Value::as_i64).is_some_and(|u| u >= 100))
            .filter_map(|w| w.get("resetsAt").and_then(Value::as_i64))
            .max();
        if let Some(at) = exhausted {
            self.resets_at_ms = Some(at.saturating_mul(1000));
        }
        p.quota = rate_limit_signal(limits);
    }

    /// The blocker a turn error says by its `codexErrorInfo`, never by its text.
    fn structured_blocker(&mut self, p: &mut Parsed, e: &Value) {
        let msg = str_at(e, "message").unwrap_or("error");
        match blocker_kind(e.get("codexErrorInfo").unwrap_or(&Value::Null)) {
            Some(BlockerKind::RateLimit) => self.base.blocker_until(p, BlockerKind::RateLimit, msg, self.resets_at_ms),
            Some(kind) => self.base.blocker(p, kind, msg),
            None => {}
        }
    }

    fn turn_completed(&mut self, p: &mut Parsed, turn: &Value) {
        if !self.diff.is_empty() {
            let files = self.diff.lines().filter(|l| l.starts_with("diff --git ")).count();
            let added = self.diff.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")).count();
            let removed = self.diff.lines().filter(|l| l.starts_with('-') && !l.starts_with("---")).count();
            p.events.push(EventBody::Progress {
                message: format!("the turn's diff: {files} file(s), +{added} -{removed}"),
                pct: None,
            });
        }
        match str_at(turn, "status").unwrap_or_default() {
            "completed" => {}
            "interrupted" => error(p, "the turn was interrupted", false),
            "failed" => {
                let e = turn.get("error").unwrap_or(&Value::Null);
                let why = format!("the turn failed: {}", str_at(e, "message").unwrap_or("no reason given"));
                error(p, &why, true);
                p.failure = Some(truncate(&why, 500));
                self.structured_blocker(p, e);
            }
            other => error(p, &format!("the turn ended as `{}`", truncate(other, 50)), false),
        }
    }

    fn request(&mut self, p: &mut Parsed, v: &Value, method: &str, line: &str) {
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        let params = v.get("params").unwrap_or(&Value::Null);
        let (tool, kind, input, options) = match method {
            "item/commandExecution/requestApproval" => {
                // The whole request but the ids: the command, its cwd, the parsed actions, the reason.
                let mut input = params.clone();
                if let Some(o) = input.as_object_mut() {
                    for k in ["threadId", "turnId", "startedAtMs", "availableDecisions"] {
                        o.remove(k);
                    }
                }
                let offered = params.get("availableDecisions").and_then(Value::as_array);
                ("shell", "execute", input, options_of(offered))
            }
            "item/fileChange/requestApproval" => {
                let item = str_at(params, "itemId").unwrap_or_default();
                let changes = self.changes.get(item).cloned().unwrap_or(Value::Null);
                let mut input = json!({"changes": changes});
                for k in ["reason", "grantRoot"] {
                    if let Some(x) = params.get(k).filter(|x| !x.is_null()) {
                        input[k] = x.clone();
                    }
                }
                let all = vec![json!("accept"), json!("acceptForSession"), json!("decline")];
                ("apply_patch", "edit", input, options_of(Some(&all)))
            }
            _ => {
                // Not served: the server gets an error rather than waiting for ever.
                self.replies.push(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                        "message": format!("caesar does not serve `{}`", truncate(method, 100))}})
                    .to_string(),
                );
                p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) });
                return;
            }
        };
        let shown = if tool == "apply_patch" { file_changes_shown(&input) } else { input.clone() };
        let summary = permission_question(tool, str_at(params, "reason"), &shown);
        p.permission = Some(PermissionAsk {
            request_id: id.to_string(),
            tool_name: tool.to_owned(),
            input,
            summary,
            kind: Some(kind.to_owned()),
            options,
        });
    }

    fn response(&mut self, p: &mut Parsed, v: &Value, line: &str) {
        let failure = v.get("error").map(|e| str_at(e, "message").unwrap_or("unknown error").to_owned());
        match v.get("id").and_then(Value::as_u64) {
            Some(id @ (ID_INITIALIZE | ID_THREAD_START | ID_TURN_START)) => {
                if let Some(msg) = failure {
                    let what = match id {
                        ID_INITIALIZE => "initialize",
                        ID_THREAD_START => "thread/start",
                        _ => "turn/start",
                    };
                    let text = format!("the codex app-server {what} failed: {msg}");
                    error(p, &text, true);
                    self.structured_blocker(p, v.pointer("/error/data").unwrap_or(&Value::Null));
                } else if let Some(thread) = v.pointer("/result/thread/id").and_then(Value::as_str) {
                    self.base.session(p, thread);
                }
            }
            Some(ID_INTERRUPT) => match failure {
                Some(msg) => error(p, &format!("turn/interrupt failed: {msg}"), false),
                None => p.events.push(EventBody::Progress { message: "turn/interrupt acknowledged".into(), pct: None }),
            },
            // A steer's `turn/steer` (issue 31): refused, it goes as the next turn.
            Some(id) if id >= ID_STEER_BASE => {
                if let Some(msg) = failure {
                    p.events.push(EventBody::Progress {
                        message: truncate(&format!("turn/steer refused ({msg}): the steer goes as the next turn"), 500),
                        pct: None,
                    });
                }
            }
            // A response to a request caesar never made.
            _ => p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) }),
        }
    }
}

impl LineParser for CodexAppParser {
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Parsed::default();
        }
        // Anything but a JSON object on stdout is the server's tracing (ANSI-coloured, on
        // stderr): recorded, never read for blockers, which come from structure.
        let v = match (stream, json_object(trimmed)) {
            (Stream::Stdout, Some(v)) => v,
            _ => {
                return Parsed {
                    events: vec![EventBody::Unrecognized { line: truncate(trimmed, 2000) }],
                    ..Parsed::default()
                };
            }
        };
        let mut p = Parsed::default();
        let has_id = v.get("id").is_some_and(|i| !i.is_null());
        match (str_at(&v, "method"), has_id) {
            (Some(method), true) => {
                let method = method.to_owned();
                self.request(&mut p, &v, &method, trimmed);
            }
            (Some(method), false) => {
                let method = method.to_owned();
                self.notification(&mut p, &method, v.get("params").unwrap_or(&Value::Null), trimmed);
            }
            (None, true) => self.response(&mut p, &v, trimmed),
            (None, false) => p.events.push(EventBody::Unrecognized { line: truncate(trimmed, 2000) }),
        }
        p
    }
}

/// The fullest window of an `account/rateLimits/updated` used [`crate::quota::NEAR_PERCENT`] % or
/// more, as a quota signal; `None` when every window has room (or none is readable).
fn rate_limit_signal(limits: &Value) -> Option<crate::quota::QuotaSignal> {
    use crate::quota::{Level, NEAR_PERCENT, QuotaSignal};
    let (name, used, resets) = ["primary", "secondary"]
        .iter()
        .filter_map(|name| {
            let w = limits.get(*name)?;
            let used = w.get("usedPercent").and_then(Value::as_i64)?;
            Some((*name, used, w.get("resetsAt").and_then(Value::as_i64)))
        })
        .filter(|(_, used, _)| *used >= NEAR_PERCENT)
        .max_by_key(|(_, used, resets)| (*used, *resets))?;
    Some(QuotaSignal {
        level: if used >= 100 { Level::Exhausted } else { Level::Near },
        resets_at_ms: resets.map(|s| s.saturating_mul(1000)),
        source: "account/rateLimits/updated".to_owned(),
        account: None,
        detail: format!("{name} window {used} % used"),
    })
}

/// The blocker kind of a `codexErrorInfo`: usage and rate limits and any 429 are rate limits,
/// `unauthorized` and any 401 are auth.
fn blocker_kind(info: &Value) -> Option<BlockerKind> {
    match info {
        Value::String(s) => match s.as_str() {
            "usageLimitExceeded" | "rateLimitExceeded" => Some(BlockerKind::RateLimit),
            "unauthorized" => Some(BlockerKind::Auth),
            _ => None,
        },
        Value::Object(o) => match o.values().next().and_then(|v| u64_at(v, "httpStatusCode")) {
            Some(401) => Some(BlockerKind::Auth),
            Some(429) => Some(BlockerKind::RateLimit),
            _ => None,
        },
        _ => None,
    }
}

/// The answers offered to the orchestrator: `accept`, `acceptForSession` where codex lists it,
/// and always `decline` (which codex takes although its command approvals do not list it, [V]).
/// `cancel` (which also interrupts the turn) and policy amendments are not offered.
fn options_of(offered: Option<&Vec<Value>>) -> Vec<PermissionOption> {
    let listed = |d: &str| offered.is_some_and(|o| o.iter().any(|x| x.as_str() == Some(d)));
    let mut out = Vec::new();
    let option = |id: &str, name: &str, kind: &str| PermissionOption { id: s(id), name: s(name), kind: s(kind) };
    if offered.is_none() || listed("accept") {
        out.push(option("accept", "Accept", "allow_once"));
    }
    if listed("acceptForSession") {
        out.push(option("acceptForSession", "Accept for the session", "allow_always"));
    }
    out.push(option("decline", "Decline", "reject_once"));
    out
}

/// A file-change request as the question shows it: every path with its whole diff.
fn file_changes_shown(input: &Value) -> Value {
    let shown: Vec<String> = input
        .get("changes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let kind = c.pointer("/kind/type").and_then(Value::as_str).unwrap_or("update");
            format!("{kind} {}:\n{}", str_at(c, "path").unwrap_or_default(), str_at(c, "diff").unwrap_or_default())
        })
        .collect();
    if shown.is_empty() {
        return json!({"command": "a file change codex did not describe (its item was not seen)"});
    }
    json!({"command": shown.join("\n")})
}

//! ACP, the Agent Client Protocol (JSON-RPC 2.0, one message per line), as adapter data and a
//! pure reader: which CLIs speak it and how they are started in ACP mode, the messages caesar
//! sends to open a session, and the parser that turns what the agent sends back into events.
//!
//! Verified against the installed CLIs ([V], a hand-driven session against the scripted model
//! server): gemini 0.61 `--acp`, opencode 1.18 `acp`, copilot 1.0 `--acp --stdio`, qwen 0.24
//! `--acp`. All four answer `initialize` and `session/new {cwd, mcpServers}` without an
//! `authenticate` call when their key is in the environment, send `session/request_permission`
//! with `allow_once` / `allow_always` / `reject_once` options, and end a turn with the response
//! to `session/prompt` (`stopReason`). qwen also sends its own `craft/drainMidTurnQueue` request,
//! which gets a "method not found" error. Only the ids 1 (initialize), 2 (session/new) and 3
//! (session/prompt) are caesar's; the supervisor sends those three (see
//! the supervisor's session opening), the daemon only answers and cancels.

use serde_json::{Value, json};

use super::{
    Base, Invocation, Launch, LineParser, McpServer, Parsed, PermissionAsk, PermissionOption, Stdin, Stream, error,
    json_object, message, permission_question, s, str_at, summarize_input, thinking, truncate, u64_at,
};
use crate::oacp::{ChangeAction, EventBody, Mode, Usage};

/// The JSON-RPC id of caesar's `initialize`.
pub const ID_INITIALIZE: u64 = 1;
/// The JSON-RPC id of caesar's `session/new`.
pub const ID_NEW_SESSION: u64 = 2;
/// The JSON-RPC id of caesar's `session/prompt`.
pub const ID_PROMPT: u64 = 3;

/// ACP's error code for "authentication required" (the spec's `auth_required`).
pub const AUTH_REQUIRED: i64 = -32000;

/// The ACP version caesar speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// The argv that starts built-in provider `id` as an ACP agent; `None` when caesar does not
/// drive it through ACP.
pub fn acp_args(id: &str) -> Option<&'static [&'static str]> {
    match id {
        // [V] 0.61: `--acp` (also `--experimental-acp`).
        "gemini" => Some(&["--acp"]),
        // [V] 1.18: the `acp` subcommand. Its permissions come from its config (below).
        "opencode" => Some(&["acp"]),
        // [V] 1.0: `--acp` with `--stdio` (the default transport is stdio too).
        "copilot" => Some(&["--acp", "--stdio"]),
        // [V] 0.24: `--acp`.
        "qwen" => Some(&["--acp"]),
        // Unverified (none of the three installs here), from their documentation:
        // [D] cursor.com/docs/cli/acp: `agent acp` (the binary caesar runs is `cursor-agent`),
        // root options before the subcommand; it asks through session/request_permission.
        "cursor-agent" => Some(&["acp"]),
        // [D] xai-org/grok-build docs/user-guide/15-agent-mode.md: `grok agent stdio`; without
        // `--always-approve` it asks through session/request_permission.
        "grok" => Some(&["agent", "stdio"]),
        // [D] codebuddy.ai/docs/cli/acp: `codebuddy --acp`.
        "codebuddy" => Some(&["--acp"]),
        _ => None,
    }
}

/// The protocol of an `[[agent]]` and why, for `caesar agents describe`.
pub fn generic_protocol(speaks_acp: bool) -> (&'static str, &'static str) {
    if speaks_acp {
        ("acp", "[[agent]] protocol = \"acp\": driven by caesar's ACP session driver, no adapter code")
    } else {
        ("stream", "[[agent]] with no protocol (or \"stream\"): OACP event lines on stdout, anything else is its words")
    }
}

/// Whether caesar's ACP launch of built-in provider `id` was only read from the CLI's
/// documentation, never run here.
pub fn unverified(id: &str) -> bool {
    matches!(id, "cursor-agent" | "grok" | "codebuddy")
}

/// The protocol built-in provider `id` is driven through, for `caesar agents describe`.
pub fn protocol_name(id: &str) -> &'static str {
    match (acp_args(id), id) {
        (Some(_), _) => "acp",
        (None, "claude") => "stream-json-control",
        (None, _) => "stream",
    }
}

/// Why a built-in provider speaks the protocol it does, for `caesar agents describe`.
pub fn protocol_reason(id: &str) -> &'static str {
    match id {
        "gemini" => {
            "ACP session: permission prompts reach the orchestrator, the return channel goes through \
             session/new, cancel goes through session/cancel; the stream command runs instead when \
             the handshake fails at start, and for a resumed session (`-r`: gemini 0.61's session/load \
             loses the session it loads)"
        }
        "qwen" | "opencode" | "copilot" => {
            "ACP session: permission prompts reach the orchestrator, the return channel goes through \
             session/new, cancel goes through session/cancel; the stream command runs instead when \
             the handshake fails at start"
        }
        "cursor-agent" | "grok" | "codebuddy" => {
            "ACP session, unverified: taken from the CLI's documentation and never run against it \
             here; the stream command runs instead when the handshake fails at start"
        }
        "claude" => {
            "stream-json with the control protocol on stdin (verified on claude 2.1.197): permission prompts \
             bridged in write mode, cancel sends `interrupt` before signals"
        }
        "codex" => {
            "codex app-server session where the installed codex is 0.171 or later: approvals reach the \
             orchestrator, cancel goes through turn/interrupt, usage limits and 401s are read from \
             codexErrorInfo, a resumed session continues through thread/resume; else, or when the server \
             cannot be opened at start, the one-shot `codex exec --json` stream"
        }
        _ => "one-shot stream: this CLI offers no session protocol caesar drives",
    }
}

/// Whether a task of provider `id` runs as an ACP session (`resuming`: it continues one).
/// [V] gemini 0.61's session/load overwrites the session it is asked to load before it reads
/// it (its new chat recording takes the same id and `$set`s the messages to the opening
/// context), then finds no resumable session: a resumed gemini task runs its stream command,
/// `-r <id>`, instead.
pub fn runs_as_session(id: &str, resuming: bool) -> bool {
    acp_args(id).is_some() && !(id == "gemini" && resuming)
}

/// The launch of a built-in ACP provider: its ACP argv, the model where the CLI takes one on
/// the command line, and the opening the supervisor sends.
pub fn launch(id: &str, inv: &Invocation) -> Option<Launch> {
    if !runs_as_session(id, inv.resume_session.is_some()) {
        return None;
    }
    let base = acp_args(id)?;
    let mut args: Vec<String> = Vec::new();
    match (id, inv.model) {
        // [D] root options go before the subcommand (`agent --api-key … acp`).
        ("cursor-agent", Some(m)) => args.extend([s("--model"), s(m)]),
        // Unverified: options between `agent` and `stdio`, as `--always-approve` is documented.
        ("grok", Some(m)) => args.extend([s("agent"), s("-m"), s(m)]),
        _ => {}
    }
    let skip = usize::from(id == "grok" && inv.model.is_some());
    args.extend(base.iter().skip(skip).map(|a| s(a)));
    let mut env = Vec::new();
    match id {
        "gemini" => {
            // Edits are approved by the CLI in write mode, everything else asks (as claude does);
            // in read-only mode everything asks and caesar itself refuses writes.
            args.extend([
                s("--approval-mode"),
                s(if inv.mode == Mode::Write { "auto_edit" } else { "default" }),
                s("--skip-trust"),
            ]);
            if let Some(m) = inv.model {
                args.extend([s("-m"), s(m)]);
            }
            env.push((s("GEMINI_CLI_NO_RELAUNCH"), s("true")));
        }
        "qwen" => {
            args.extend([s("--approval-mode"), s(if inv.mode == Mode::Write { "auto-edit" } else { "default" })]);
            if let Some(m) = inv.model {
                args.extend([s("-m"), s(m)]);
            }
        }
        "opencode" => {
            // [V] opencode takes no flags in ACP mode: the model and the permissions go in the
            // config it merges from OPENCODE_CONFIG_CONTENT. Shell commands ask (so they reach
            // the orchestrator), edits are allowed in write mode and denied in read-only mode.
            let mut config = json!({"permission": {
                "edit": if inv.mode == Mode::Write { "allow" } else { "deny" },
                "bash": "ask", "webfetch": "ask"}});
            if let Some(m) = inv.model {
                config["model"] = json!(m);
            }
            env.push((s("OPENCODE_CONFIG_CONTENT"), config.to_string()));
            env.push((s("OPENCODE_DISABLE_AUTOUPDATE"), s("1")));
        }
        "copilot" => {
            // [V] in ACP mode copilot asks for every tool it has not been told to allow: edits
            // are pre-approved in write mode (as its stream launch does with --allow-all-tools),
            // the return channel's server always; shell commands ask.
            if inv.mode == Mode::Write {
                args.push(s("--allow-tool=write"));
            }
            if let Some(m) = &inv.mcp {
                // [V] 1.0 in ACP mode does not load the stdio servers of session/new (the model
                // is told "Tool 'caesar-ask_orchestrator' does not exist"): the channel goes on
                // the command line, as in its stream launch.
                let tools: Vec<Value> = if m.tools.is_empty() {
                    vec![Value::from("*")]
                } else {
                    m.tools.iter().map(|t| Value::from(*t)).collect()
                };
                let config =
                    super::mcp_servers_json(m, &[("type", Value::from("local")), ("tools", Value::from(tools))]);
                args.extend([s("--additional-mcp-config"), config.to_string()]);
                args.push(format!("--allow-tool={}", m.name));
            }
            if let Some(m) = inv.model {
                args.extend([s("--model"), s(m)]);
            }
            env.push((s("COPILOT_AUTO_UPDATE"), s("false")));
        }
        // Unverified: codebuddy copies claude's flags.
        "codebuddy" => {
            if let Some(m) = inv.model {
                args.extend([s("--model"), s(m)]);
            }
        }
        // [3P] keeps grok from updating itself mid-run, as in its stream launch.
        "grok" => env.push((s("GROK_DISABLE_AUTOUPDATER"), s("1"))),
        _ => {}
    }
    // copilot takes the channel on its command line (above), not in session/new.
    let mcp = inv.mcp.as_ref().filter(|_| id != "copilot");
    let mut stdin = session_stdin(inv.workspace, mcp, inv.prompt);
    if let (Some(id), Stdin::Session { opening, .. }) = (inv.resume_session, &mut stdin)
        && let Ok(mut v) = serde_json::from_str::<Value>(opening)
    {
        // The supervisor continues it with session/resume or session/load where the agent
        // advertises either (see the supervisor's session opening), else opens a new one.
        v["resume"] = Value::from(id);
        *opening = v.to_string();
    }
    Some(Launch { args, env, stdin, ..Launch::default() })
}

/// `acp` with the provider's one-shot stream launch as its fallback (see
/// the opening's `Fallback`): its argv and environment go in the opening, its task
/// files with the session's. A stream that needs stdin (a control protocol) or files in the
/// workspace (the channel of gemini, qwen, cursor-agent and grok) runs without those: the
/// fallback is a one-shot run without the return channel there.
pub fn with_fallback(mut acp: Launch, stream: Option<Launch>) -> Launch {
    let Some(stream) = stream.filter(|l| matches!(l.stdin, Stdin::Null | Stdin::Prompt)) else { return acp };
    if let Stdin::Session { opening, .. } = &mut acp.stdin
        && let Ok(mut v) = serde_json::from_str::<Value>(opening)
    {
        v["fallback"] = json!({"args": stream.args, "env": stream.env});
        if stream.stdin == Stdin::Prompt {
            v["fallback"]["stdin_prompt"] = Value::Bool(true);
        }
        *opening = v.to_string();
    }
    for (name, content) in stream.files {
        if !acp.files.iter().any(|(n, _)| *n == name) {
            acp.files.push((name, content));
        }
    }
    acp
}

/// The stdin of an ACP session: `initialize` first, then the opening the supervisor sends as
/// the agent answers (session/new with the return channel, then the prompt).
pub fn session_stdin(cwd: &str, mcp: Option<&McpServer>, prompt: &str) -> Stdin {
    Stdin::Session {
        protocol: crate::launch::SessionProtocol::Acp,
        initial: initialize_line(),
        opening: opening(cwd, mcp, prompt).to_string(),
    }
}

/// caesar's `initialize`: no file system and no terminal offered, so the agent uses its own tools.
pub fn initialize_line() -> String {
    json!({"jsonrpc": "2.0", "id": ID_INITIALIZE, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
        "clientInfo": {"name": "caesar", "version": env!("CARGO_PKG_VERSION")}}})
    .to_string()
        + "\n"
}

/// What the supervisor needs for the rest of the handshake: session/new's params and the prompt.
pub fn opening(cwd: &str, mcp: Option<&McpServer>, prompt: &str) -> Value {
    let servers: Vec<Value> = mcp.map(mcp_server_entry).into_iter().collect();
    json!({"new_session": {"cwd": cwd, "mcpServers": servers},
        "prompt": [{"type": "text", "text": prompt}]})
}

/// The return channel as an ACP `McpServer` entry (stdio): built from the same launch
/// description every adapter gets, so the channel's command, arguments and environment are
/// named in one place.
pub fn mcp_server_entry(m: &McpServer) -> Value {
    let env: Vec<Value> = m.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    json!({"name": m.name, "command": m.command, "args": m.args, "env": env})
}

/// The JSON-RPC response that answers permission request `ask` with the option of `kind`
/// (`allow_once`, `allow_always`, `reject_once`), falling back to the nearest the agent offered;
/// a request with no such option is answered `cancelled`.
pub fn permission_response(ask: &PermissionAsk, kind: &str) -> String {
    let pick = ask
        .options
        .iter()
        .find(|o| o.kind == kind)
        .or_else(|| {
            let family = kind.split('_').next().unwrap_or_default();
            ask.options.iter().find(|o| o.kind.starts_with(family))
        })
        .map(|o| o.id.clone());
    let id: Value = serde_json::from_str(&ask.request_id).unwrap_or(Value::String(ask.request_id.clone()));
    let outcome = match pick {
        Some(option) => json!({"outcome": "selected", "optionId": option}),
        None => json!({"outcome": "cancelled"}),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": outcome}}).to_string()
}

/// The notification that cancels the running turn of session `session`.
pub fn cancel_line(session: &str) -> String {
    json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}).to_string()
}

/// Reads an ACP agent's output: JSON-RPC messages on stdout, anything else (stderr) as text.
#[derive(Debug, Default)]
pub struct AcpParser {
    base: Base,
    /// Message chunks since the last flush.
    pending: String,
    /// Thought chunks since the last flush.
    pending_thought: String,
    /// The agent's words since the last tool call: the answer once the turn ends.
    segment: String,
    /// Lines to write back (errors for requests caesar does not serve).
    replies: Vec<String>,
    /// The session is being loaded: the agent replays its history (which starts with the
    /// user's words) before it answers session/load. Replayed turns are not this task's work.
    replaying: bool,
    /// The agent answered session/new (or session/load).
    opened: bool,
}

impl AcpParser {
    /// The replies owed to the agent since the last call.
    pub fn take_replies(&mut self) -> Vec<String> {
        std::mem::take(&mut self.replies)
    }

    /// Emits the chunks held back as one message (and one thought).
    pub fn flush(&mut self, p: &mut Parsed) {
        if !self.pending_thought.is_empty() {
            thinking(p, &std::mem::take(&mut self.pending_thought));
        }
        if !self.pending.is_empty() {
            let text = std::mem::take(&mut self.pending);
            message(p, &text);
        }
    }

    fn update(&mut self, p: &mut Parsed, update: &Value, line: &str) {
        let kind = str_at(update, "sessionUpdate").unwrap_or_default();
        if kind == "user_message_chunk" && !self.opened {
            self.replaying = true;
        }
        if self.replaying {
            return;
        }
        if !matches!(kind, "agent_message_chunk" | "agent_thought_chunk") {
            self.flush(p);
        }
        match kind {
            "agent_message_chunk" => {
                let text = text_of(update.get("content"));
                // [V] copilot 1.0 reports a failed model call as the turn's words, then ends it
                // with end_turn: "Error: Authentication failed with provider at … (HTTP 401)".
                // With no structured error to read, the text is classified (auth, rate limit).
                if let Some(failure) = text.trim_start().strip_prefix("Error:") {
                    self.flush(p);
                    let failure = format!("the agent reports an error:{}", truncate(failure, 500));
                    error(p, &failure, true);
                    self.base.classify(p, &failure);
                    return;
                }
                self.pending.push_str(text);
                self.segment.push_str(text);
            }
            "agent_thought_chunk" => self.pending_thought.push_str(text_of(update.get("content"))),
            "tool_call" => {
                self.segment.clear();
                let id = str_at(update, "toolCallId").unwrap_or_default();
                let (tool, summary) = tool_and_summary(update);
                self.base.tool_start(p, id, &tool, summary);
                self.tool_status(p, update, id);
            }
            "tool_call_update" => {
                let id = str_at(update, "toolCallId").unwrap_or_default();
                self.tool_status(p, update, id);
            }
            "plan" => {
                let steps: Vec<&str> = update
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| str_at(e, "content"))
                    .collect();
                if !steps.is_empty() {
                    p.events.push(EventBody::Progress {
                        message: truncate(&format!("plan: {}", steps.join("; ")), 500),
                        pct: None,
                    });
                }
            }
            // What the agent offers or echoes: nothing the orchestrator acts on.
            "user_message_chunk"
            | "available_commands_update"
            | "current_mode_update"
            | "config_option_update"
            | "session_info_update"
            | "usage_update" => {}
            _ => p.events.push(EventBody::Unrecognized { line: line.to_owned() }),
        }
    }

    /// A tool call's status and file diffs, from a `tool_call` or a `tool_call_update`.
    fn tool_status(&mut self, p: &mut Parsed, update: &Value, id: &str) {
        for c in update.get("content").and_then(Value::as_array).into_iter().flatten() {
            if str_at(c, "type") == Some("diff") {
                let action = if c.get("oldText").is_none_or(Value::is_null) {
                    ChangeAction::Created
                } else {
                    ChangeAction::Modified
                };
                super::file_changed(p, str_at(c, "path").unwrap_or_default(), action);
            }
        }
        match str_at(update, "status") {
            Some("completed") => self.base.tool_end(p, id, None, None, true),
            Some("failed") => {
                self.base.tool_end(p, id, None, None, false);
                let text: String = update
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| text_of(c.get("content")))
                    .collect();
                if !text.is_empty() {
                    self.base.classify_denial(p, &text);
                }
            }
            _ => {}
        }
    }

    fn request(&mut self, p: &mut Parsed, v: &Value, method: &str, line: &str) {
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        if method != "session/request_permission" {
            // Not served: the agent gets an error rather than waiting for ever.
            self.replies.push(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                    "message": format!("caesar does not serve `{}`", truncate(method, 100))}})
                .to_string(),
            );
            p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) });
            return;
        }
        self.flush(p);
        let params = v.get("params").unwrap_or(&Value::Null);
        let call = params.get("toolCall").unwrap_or(&Value::Null);
        let (tool, _) = tool_and_summary(call);
        let raw = call.get("rawInput").filter(|r| r.as_object().is_some_and(|o| !o.is_empty()));
        // Without rawInput (gemini) the title and content are what the agent shows a person.
        let input = raw.cloned().unwrap_or_else(|| {
            json!({"title": str_at(call, "title").unwrap_or_default(), "content": call.get("content").cloned().unwrap_or(Value::Null)})
        });
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| {
                Some(PermissionOption {
                    id: str_at(o, "optionId")?.to_owned(),
                    name: str_at(o, "name").unwrap_or_default().to_owned(),
                    kind: str_at(o, "kind").unwrap_or_default().to_owned(),
                })
            })
            .collect();
        let summary = permission_question(&tool, str_at(call, "title"), &input);
        let ask = PermissionAsk {
            request_id: id.to_string(),
            tool_name: tool,
            input,
            summary,
            kind: str_at(call, "kind").map(str::to_owned),
            options,
        };
        if is_own_channel_call(call) {
            // caesar's own return channel (issue 30): ACP offers no way to trust a server given
            // in session/new, so its CLI asks to call it. Allowed here, once per call: never a
            // question to the person, who would be asked permission to be asked.
            self.replies.push(permission_response(&ask, "allow_once"));
            return;
        }
        p.permission = Some(ask);
    }

    /// A failed request's blocker: ACP's `auth_required` error (-32000) is one from structure;
    /// anything else is read from its text.
    fn classify_failure(&mut self, p: &mut Parsed, v: &Value, text: &str) {
        if v.pointer("/error/code").and_then(Value::as_i64) == Some(AUTH_REQUIRED) {
            self.base.blocker(p, crate::oacp::BlockerKind::Auth, text);
        } else {
            self.base.classify(p, text);
        }
    }

    fn response(&mut self, p: &mut Parsed, v: &Value, line: &str) {
        let id = v.get("id").and_then(Value::as_u64);
        let failure = v.get("error").map(|e| {
            let msg = str_at(e, "message").unwrap_or("unknown error");
            match e.get("data") {
                Some(d) if !d.is_null() => format!("{msg}: {}", truncate(&d.to_string(), 300)),
                _ => msg.to_owned(),
            }
        });
        let result = v.get("result").unwrap_or(&Value::Null);
        match id {
            Some(ID_INITIALIZE) | Some(ID_NEW_SESSION) => {
                if id == Some(ID_NEW_SESSION) {
                    // Whatever a loaded session replayed before its answer was history.
                    self.opened = true;
                    self.replaying = false;
                    self.pending.clear();
                    self.pending_thought.clear();
                    self.segment.clear();
                }
                if let Some(msg) = failure {
                    let what = if id == Some(ID_INITIALIZE) { "initialize" } else { "session/new" };
                    let text = format!("the ACP {what} failed: {msg}");
                    error(p, &text, true);
                    self.classify_failure(p, v, &text);
                } else if let Some(session) = str_at(result, "sessionId") {
                    self.base.session(p, session);
                }
            }
            Some(ID_PROMPT) => {
                self.flush(p);
                if let Some(msg) = failure {
                    let text = format!("the turn failed: {msg}");
                    error(p, &text, true);
                    self.classify_failure(p, v, &text);
                    return;
                }
                if let Some(usage) = usage_of(result) {
                    self.base.usage(p, usage);
                }
                match str_at(result, "stopReason").unwrap_or("end_turn") {
                    "end_turn" => {}
                    "cancelled" => error(p, "the turn was cancelled", false),
                    other => error(p, &format!("the turn stopped: {other}"), false),
                }
                let answer = self.segment.trim();
                if !answer.is_empty() {
                    p.final_text = Some(answer.to_owned());
                }
            }
            // A response to a request caesar never made.
            _ => p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) }),
        }
    }
}

impl LineParser for AcpParser {
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed {
        let v = match self.base.stdout_json(line, stream) {
            Ok(v) if str_at(&v, "jsonrpc") == Some("2.0") => v,
            Ok(_) => return shortened(self.base.text_line(line)),
            Err(p) => return shortened(p),
        };
        let mut p = Parsed::default();
        match (str_at(&v, "method"), v.get("id").is_some_and(|i| !i.is_null())) {
            (Some("session/update"), false) => {
                let update = v.get("params").and_then(|p| p.get("update")).unwrap_or(&Value::Null);
                self.update(&mut p, update, line);
            }
            (Some(method), true) => {
                let method = method.to_owned();
                self.request(&mut p, &v, &method, line);
            }
            (Some(_), false) => p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) }),
            (None, true) => self.response(&mut p, &v, line),
            (None, false) => p.events.push(EventBody::Unrecognized { line: truncate(line, 2000) }),
        }
        p
    }

    fn finish(&mut self) -> Parsed {
        let mut p = Parsed::default();
        self.flush(&mut p);
        p
    }
}

/// An unrecognized line is kept to its first 2,000 characters: a 1 MiB piece of a giant line
/// (the tail's cut) is noise in the events, and raw.log keeps it whole.
fn shortened(mut p: Parsed) -> Parsed {
    for e in &mut p.events {
        if let EventBody::Unrecognized { line } = e
            && line.len() > 2000
        {
            *line = truncate(line, 2000);
        }
    }
    p
}

fn text_of(content: Option<&Value>) -> &str {
    content.filter(|c| str_at(c, "type") == Some("text")).and_then(|c| str_at(c, "text")).unwrap_or_default()
}

/// A tool call's name (the CLI's own where it says it, else the ACP kind) and its summary.
/// Whether an ACP permission request is for a tool of caesar's own return channel: the tool
/// the CLI names is one of [`crate::channel_spec::CHANNEL_TOOLS`] of the server named
/// [`crate::channel_spec::CHANNEL_SERVER`] (`mcp__caesar__ask_orchestrator` in `_meta.toolName`, as
/// qwen says it; as gemini says it, the title `ask_orchestrator (caesar MCP Server)` and a call
/// id its CLI makes from the server and tool, `mcp_caesar_ask_orchestrator…`), and no edit or
/// command. Each is the CLI's own word for the call, not a title the model wrote.
pub fn is_own_channel_call(call: &Value) -> bool {
    use crate::channel_spec::{CHANNEL_SERVER, CHANNEL_TOOLS};
    if str_at(call, "kind").is_some_and(|k| k != "other") {
        return false;
    }
    let named = |tool: &str| {
        let meta = call.get("_meta").and_then(|m| str_at(m, "toolName"));
        let titled = str_at(call, "title") == Some(&format!("{tool} ({CHANNEL_SERVER} MCP Server)"))
            && str_at(call, "toolCallId").is_some_and(|id| id.starts_with(&format!("mcp_{CHANNEL_SERVER}_{tool}_")));
        meta == Some(&format!("mcp__{CHANNEL_SERVER}__{tool}")) || titled
    };
    CHANNEL_TOOLS.iter().any(|t| named(t))
}

fn tool_and_summary(call: &Value) -> (String, String) {
    let meta_name = call.get("_meta").and_then(|m| str_at(m, "toolName"));
    let tool = meta_name.or_else(|| str_at(call, "kind")).unwrap_or("tool").to_owned();
    let summary = match call.get("rawInput") {
        Some(input) if input.as_object().is_some_and(|o| !o.is_empty()) => summarize_input(input),
        _ => truncate(str_at(call, "title").unwrap_or_default(), 200),
    };
    (tool, summary)
}

/// Token usage from a prompt response: ACP's `usage`, or gemini's `_meta.quota.token_count`.
fn usage_of(result: &Value) -> Option<Usage> {
    if let Some(u) = result.get("usage").filter(|u| u.is_object()) {
        return Some(Usage {
            input_tokens: u64_at(u, "inputTokens"),
            output_tokens: u64_at(u, "outputTokens"),
            ..Usage::default()
        });
    }
    let t = result.get("_meta")?.get("quota")?.get("token_count")?;
    Some(Usage {
        input_tokens: u64_at(t, "input_tokens"),
        output_tokens: u64_at(t, "output_tokens"),
        ..Usage::default()
    })
}

/// `line` as an `unrecognized` event, cut to its first 2,000 characters.
pub fn unrecognized(line: &str) -> EventBody {
    EventBody::Unrecognized { line: truncate(line, 2000) }
}

/// Whether `line` is an ACP JSON-RPC message at all (the fallback marker is not).
pub fn is_jsonrpc(line: &str) -> bool {
    json_object(line.trim()).is_some_and(|v| str_at(&v, "jsonrpc") == Some("2.0"))
}

#[cfg(test)]
#[path = "acp_tests.rs"]
mod tests;

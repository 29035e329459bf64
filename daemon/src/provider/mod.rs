//! Provider adapters: how to launch each coding-agent CLI and how to read what it streams.
//!
//! Everything here is pure: [`build_launch`] turns an [`Invocation`] into an argv, extra
//! environment and config files, and a [`LineParser`] turns one output line into normalized
//! [`EventBody`] values. Nothing spawns a process or touches the filesystem.
//!
//! Parsers never fail. A line they cannot read becomes `EventBody::Unrecognized`, so a change in
//! a CLI's output format degrades the activity feed instead of breaking the supervisor.
//!
//! Conventions shared by every parser:
//! - `Parsed::session_id` is reported when a line reveals a session id that differs from the last
//!   one reported, not on every line.
//! - `Parsed::final_text` and `Parsed::usage` supersede earlier values: the consumer keeps the
//!   latest. `usage` is cumulative for the run, and `input_tokens` counts cached input too.
//! - Each blocker kind is reported at most once per parser (the first message wins), whether it
//!   came from a structured signal or from a text fallback.
//! - A non-JSON line yields one `Unrecognized`; if the shared text fallbacks recognize a blocker
//!   in it (stderr is read this way), it also yields that `Blocker`.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::launch::ProviderId;
use crate::oacp::{Blocker, BlockerKind, ChangeAction, EventBody, Mode, ToolStatus, Usage};

pub mod acp;
mod antigravity;
mod classify;
mod claude;
/// claude's stream-json lines a steer writes (issue 31, `supervisor::steer`).
pub(crate) use claude::{interrupt_line as claude_interrupt_line, user_message as claude_user_message};
mod codebuddy;
mod codex;
pub mod codex_app;
mod codex_items;
mod copilot;
mod cursor;
mod gemini;
mod generic;
mod grok;
mod opencode;
mod qwen;

#[cfg(test)]
mod tests;

pub use classify::classify_text;
pub mod reset;
pub use generic::GenericParser;

/// Which output stream of the child a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What one line yielded. Every field is optional; an unparseable line yields exactly one
/// `EventBody::Unrecognized { line }` (plus a `Blocker` when a text fallback recognizes one).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Parsed {
    /// Normalized events, in order.
    pub events: Vec<EventBody>,
    /// Provider session or thread id, when the line reveals a new one.
    pub session_id: Option<String>,
    /// The agent's final answer when the line carries it; a later value supersedes.
    pub final_text: Option<String>,
    /// Cumulative token usage and cost when the line carries it (also emitted as an event).
    pub usage: Option<Usage>,
    /// A recognized auth, rate-limit or permission blocker (also emitted as an event).
    pub blocker: Option<Blocker>,
    /// The CLI asks, on its control protocol, whether it may use a tool.
    pub permission: Option<PermissionAsk>,
    /// A session protocol says the agent's turn failed. Its server exits 0 all the same
    /// (codex app-server), so this, not the exit code, decides the task failed.
    pub failure: Option<String>,
    /// A structured signal of how close the agent is to its provider's limit (issue 32: claude's
    /// `rate_limit_event`, codex's `account/rateLimits/updated`), for the quota ledger.
    pub quota: Option<crate::quota::QuotaSignal>,
}

/// A CLI's request for permission to use a tool (claude's `can_use_tool` control request). The
/// engine turns it into a pending question and writes the answer back on the agent's stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionAsk {
    /// The CLI's id for the request, echoed in the response.
    pub request_id: String,
    pub tool_name: String,
    /// The tool's input, echoed back when allowed.
    pub input: Value,
    /// A one-line description of the call for the question.
    pub summary: String,
    /// The kind of tool as the protocol names it (ACP: `read`, `edit`, `delete`, `move`,
    /// `search`, `execute`, `think`, `fetch`, `other`); `None` where the CLI does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The answers the agent offered (ACP); empty for allow/deny protocols (claude).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<PermissionOption>,
}

/// One answer an agent offers to a permission request (ACP's `PermissionOption`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionOption {
    /// The agent's id for it, echoed in the answer.
    pub id: String,
    /// What the agent shows a person.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

/// Reads a provider's output one line at a time.
pub trait LineParser: Send {
    /// Never panics, never fails.
    fn parse_line(&mut self, line: &str, stream: Stream) -> Parsed;
    /// Called once at end of stream; flushes buffered text and late fallbacks.
    fn finish(&mut self) -> Parsed {
        Parsed::default()
    }
}

/// How far caesar can control the network of a provider's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkControl {
    /// The agent has the network and caesar knows no verified way to cut it.
    Open,
    /// Network can be allowed or cut in both modes.
    Controllable,
    /// Network can be chosen only in write mode; the read-only sandbox always cuts it.
    WriteOnly,
    /// The agent never has network.
    None,
}

/// What a provider can do, as far as the adapter knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub native_read_only: bool,
    pub structured_output: bool,
    pub resume: bool,
    pub model_selection: bool,
    pub reasoning_effort: bool,
    pub mcp_injection: bool,
    pub network: NetworkControl,
}

/// One provider's adapter: its static description and the pure functions
/// that launch and read it. Everything caesar knows of a provider is here,
/// found by its [`ProviderId`] ([`adapter`]), never by matching its id.
#[derive(Debug, Serialize)]
pub struct ProviderSpec {
    pub id: ProviderId,
    pub display_name: &'static str,
    /// The model family it runs (`anthropic`, `openai`, `google`, …), for
    /// a review by another family than the worker's (issue 32,
    /// `review.rs`); `None` for a CLI that runs any vendor's models.
    #[serde(skip)]
    pub family: Option<&'static str>,
    pub default_bin: &'static str,
    pub capabilities: Capabilities,
    /// Allowlisted reasoning-effort values, empty if none.
    pub efforts: &'static [&'static str],
    pub version_args: &'static [&'static str],
    /// The prefixes of the environment variables an agent of this provider
    /// gets from the daemon's environment (`agent_env.rs`).
    #[serde(skip)]
    pub env_prefixes: &'static [&'static str],
    /// The state directories its CLI writes under `$HOME`, besides what its
    /// environment names (the confinement leaves them writable).
    #[serde(skip)]
    pub state_dirs: &'static [&'static str],
    /// The variable naming the CLI's state directory, if it has one
    /// (`CLAUDE_CONFIG_DIR`); `config_files` are beneath it, else beneath `$HOME`.
    #[serde(skip)]
    pub config_env: Option<&'static str>,
    /// The files and directories beneath the CLI's writable state that hold
    /// code or configuration it runs or obeys later, in the user's own
    /// sessions too: its settings, hooks, commands, agents, plugins and
    /// MCP-server files. Read-only to a task (issue 29).
    #[serde(skip)]
    pub config_files: &'static [&'static str],
    /// How to install it, where it is an npm package.
    #[serde(skip)]
    pub install: Option<&'static str>,
    /// The CLI confines a read-only run itself with the kernel (codex:
    /// bubblewrap and Landlock), so caesar leaves its writes to it.
    #[serde(skip)]
    pub own_sandbox: bool,
    /// The CLI reads a per-run MCP server only from a settings file in the
    /// project, so the return channel cannot be injected as a one-shot
    /// stream run (an ACP session gets it through `session/new`).
    #[serde(skip)]
    pub mcp_from_workspace: bool,
    /// The one-shot stream launch: argv, environment and files.
    #[serde(skip)]
    pub launch: fn(&Invocation) -> Launch,
    /// A fresh line parser of its output.
    #[serde(skip)]
    pub parser: fn() -> Box<dyn LineParser>,
}

/// One run to launch.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    pub prompt: &'a str,
    pub mode: Mode,
    pub model: Option<&'a str>,
    /// Dropped unless it is in the provider's `efforts` allowlist.
    pub effort: Option<&'a str>,
    pub resume_session: Option<&'a str>,
    pub workspace: &'a str,
    /// Where the CLI supports native structured output (codex `--output-schema`).
    pub output_schema_path: Option<&'a str>,
    /// A stdio MCP server to inject (the return channel).
    pub mcp: Option<McpServer<'a>>,
    /// Requested network access; `None` leaves the provider default. Only honoured where
    /// `capabilities.network` allows it (codex in write mode).
    pub network: Option<bool>,
}

#[cfg(test)]
impl<'a> Invocation<'a> {
    /// A run of `prompt` in `mode` in `/w`, with nothing else asked: the base the tests adjust.
    pub(crate) fn bare(prompt: &'a str, mode: Mode) -> Invocation<'a> {
        Invocation {
            prompt,
            mode,
            model: None,
            effort: None,
            resume_session: None,
            workspace: "/w",
            output_schema_path: None,
            mcp: None,
            network: None,
        }
    }
}

/// A stdio MCP server to give the agent for one run.
#[derive(Debug, Clone, Copy)]
pub struct McpServer<'a> {
    pub name: &'a str,
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    /// Tool names to pre-approve; empty means every tool of the server.
    pub tools: &'a [&'a str],
}

/// Everything needed to launch a provider.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launch {
    /// Argv without the binary.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Files to write before launch: path relative to the task dir, content.
    pub files: Vec<(String, String)>,
    /// Files to write before launch: path relative to the workspace, content. Used where the
    /// only per-run config the CLI reads lives in the project (gemini, qwen, cursor, grok MCP).
    /// The engine must not clobber an existing file, must exclude these paths from the diff and
    /// should remove them after the run.
    pub workspace_files: Vec<(String, String)>,
    /// What the agent reads on stdin.
    pub stdin: Stdin,
}

pub use crate::launch::Stdin;

/// The line that answers a permission request on the agent's stdin, for the providers whose
/// control protocol caesar bridges; `None` for the others.
pub fn permission_response(provider: ProviderId, ask: &PermissionAsk, allow: bool, message: &str) -> Option<String> {
    match provider {
        ProviderId::Claude => Some(claude::permission_response(&ask.request_id, allow, &ask.input, message)),
        _ => None,
    }
}

/// The line that interrupts the running turn through the CLI's control protocol, written
/// before any signal on cancel; `None` for providers with no such request.
pub fn interrupt_line(provider: ProviderId) -> Option<String> {
    match provider {
        ProviderId::Claude => Some(claude::interrupt_line()),
        _ => None,
    }
}

/// Whether a launch with this control-protocol stdin asks questions there that the daemon must
/// answer (claude's permission prompt tool, write mode), rather than only taking its prompt and
/// being closed after its turn (claude in plan mode).
pub fn asks_on_stdin(provider: ProviderId, args: &[String]) -> bool {
    match provider {
        ProviderId::Claude => claude::asks_on_stdin(args),
        _ => true,
    }
}

static ALL: &[ProviderSpec] = &[
    claude::SPEC,
    codex::SPEC,
    gemini::SPEC,
    opencode::SPEC,
    copilot::SPEC,
    cursor::SPEC,
    qwen::SPEC,
    grok::SPEC,
    codebuddy::SPEC,
    antigravity::SPEC,
];

/// Every known provider.
pub fn all() -> &'static [ProviderSpec] {
    ALL
}

/// The adapter of a native provider; `None` for [`ProviderId::Generic`].
pub fn adapter(id: ProviderId) -> Option<&'static ProviderSpec> {
    ALL.iter().find(|s| s.id == id)
}

/// The model family an agent of provider `id` runs (issue 32, the review
/// loop's choice of a reviewer); `None` for a generic agent or a CLI of any
/// vendor's models.
pub fn family(id: ProviderId) -> Option<&'static str> {
    adapter(id).and_then(|a| a.family)
}

/// The native provider with this id as configured or stored; `None` for
/// anything else (a generic agent's name).
pub fn spec(id: &str) -> Option<&'static ProviderSpec> {
    ProviderId::native(id).and_then(adapter)
}

/// The argv, environment and files to launch provider `id` as a one-shot
/// stream run; `None` for a generic agent (its template is its launch).
pub fn build_launch(id: ProviderId, inv: &Invocation) -> Option<Launch> {
    adapter(id).map(|a| (a.launch)(inv))
}

/// The built-in providers that take a prompt of any size (issue 19): in a session protocol
/// (ACP), or on stdin (claude's stream-json, codex `exec -`); never in an argument. For the
/// error that refuses a prompt too long for an argv-only agent.
pub fn long_prompt_agents() -> Vec<&'static str> {
    let inv = Invocation {
        prompt: crate::prompt::TOKEN,
        mode: Mode::ReadOnly,
        model: None,
        effort: None,
        resume_session: None,
        workspace: "/",
        output_schema_path: None,
        mcp: None,
        network: None,
    };
    ALL.iter()
        .map(|s| s.id)
        .filter(|id| {
            acp::acp_args(id.as_str()).is_some() || build_launch(*id, &inv).is_some_and(|l| l.stdin != Stdin::Null)
        })
        .map(ProviderId::as_str)
        .collect()
}

/// A fresh parser for provider `id`'s stream (a generic agent's for
/// [`ProviderId::Generic`]).
pub fn parser(id: ProviderId) -> Box<dyn LineParser> {
    adapter(id).map_or_else(|| Box::new(GenericParser) as Box<dyn LineParser>, |a| (a.parser)())
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the adapters.
// ---------------------------------------------------------------------------------------------

/// The effort to pass, if it is allowlisted for this provider.
fn allowed_effort<'a>(spec: &ProviderSpec, effort: Option<&'a str>) -> Option<&'a str> {
    effort.filter(|e| spec.efforts.contains(e))
}

/// A positional prompt that no option parser can mistake for a flag. (The brief always starts
/// with `# Task`, and the launch is built with [`crate::prompt::TOKEN`] in its place.)
fn positional(prompt: &str) -> String {
    if prompt.starts_with('-') { format!(" {prompt}") } else { prompt.to_owned() }
}

fn s(v: &str) -> String {
    v.to_owned()
}

/// The `mcpServers` JSON shape shared by claude, gemini, qwen, cursor and codebuddy.
fn mcp_servers_json(m: &McpServer, extra: &[(&str, Value)]) -> Value {
    let mut server = serde_json::Map::new();
    server.insert("command".into(), Value::from(m.command));
    server.insert("args".into(), Value::from(m.args.to_vec()));
    if !m.env.is_empty() {
        let env: serde_json::Map<String, Value> =
            m.env.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        server.insert("env".into(), Value::Object(env));
    }
    for (k, v) in extra {
        server.insert((*k).to_owned(), v.clone());
    }
    let mut servers = serde_json::Map::new();
    servers.insert(m.name.to_owned(), Value::Object(server));
    let mut root = serde_json::Map::new();
    root.insert("mcpServers".into(), Value::Object(servers));
    Value::Object(root)
}

/// A TOML basic string.
fn toml_str(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when possible, quoted otherwise.
fn toml_key(k: &str) -> String {
    let bare = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { k.to_owned() } else { toml_str(k) }
}

fn toml_str_array(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|a| toml_str(a)).collect();
    format!("[{}]", parts.join(","))
}

fn toml_inline_env(env: &[(String, String)]) -> String {
    let parts: Vec<String> = env.iter().map(|(k, v)| format!("{}={}", toml_key(k), toml_str(v))).collect();
    format!("{{{}}}", parts.join(","))
}

/// Cuts `text` to at most `max` characters, on a character boundary.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// A one-line summary of a tool's input: the most telling field, else compact JSON.
fn summarize_input(input: &Value) -> String {
    const KEYS: &[&str] = &[
        "command",
        "cmd",
        "file_path",
        "filePath",
        "path",
        "absolute_path",
        "notebook_path",
        "pattern",
        "query",
        "url",
        "message",
        "description",
        "prompt",
    ];
    if let Some(obj) = input.as_object() {
        for k in KEYS {
            match obj.get(*k) {
                Some(Value::String(v)) => return truncate(&one_line(v), 200),
                Some(Value::Array(a)) if *k == "command" || *k == "cmd" => {
                    let parts: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
                    return truncate(&parts.join(" "), 200);
                }
                _ => {}
            }
        }
    }
    match input {
        Value::Null => String::new(),
        Value::String(v) => truncate(&one_line(v), 200),
        other => truncate(&other.to_string(), 200),
    }
}

/// The most characters of a tool's input a permission question shows; past
/// it the question says, in words, that it was shortened.
pub const PERMISSION_INPUT_SHOWN: usize = 16 * 1024;

/// The text of a permission question about one tool call: the whole input
/// first (for a shell tool, the whole command, verbatim, newlines kept,
/// then every other field of the input, none left out: an allow approves
/// them too, `cwd`, `env` with its `LD_PRELOAD`, `dangerouslyDisableSandbox`
/// and `run_in_background` alike; issue 29), then the agent's own
/// description, marked as its claim. A summary that shows the description
/// first and cuts the command is how an approver once read `echo running
/// the unit tests …` and approved a hidden `; curl … | sh`. Control and
/// bidirectional characters are shown escaped, so nothing in the input can
/// hide the rest of it from a terminal.
pub(crate) fn permission_question(tool_name: &str, description: Option<&str>, input: &Value) -> String {
    let object = input.as_object();
    let key = object.and_then(|o| ["command", "cmd"].into_iter().find(|k| o.contains_key(*k)));
    let command = object.zip(key).and_then(|(o, k)| match o.get(k) {
        Some(Value::String(c)) => Some(c.clone()),
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    });
    let mut text = match (command, object, key) {
        (Some(c), Some(o), Some(k)) => {
            let others: Vec<String> = o
                .iter()
                .filter(|(name, _)| name.as_str() != k)
                .map(|(name, v)| format!("  {name}: {}", serde_json::to_string(v).unwrap_or_else(|_| v.to_string())))
                .collect();
            if others.is_empty() {
                format!("{tool_name} with this whole command:\n{}", shown_capped(&c))
            } else {
                format!(
                    "{tool_name} with this command:\n{}\nand these other fields of its input, which an allow approves \
                     too:\n{}",
                    shown_capped(&c),
                    shown_capped(&others.join("\n"))
                )
            }
        }
        _ => format!(
            "{tool_name} with this whole input:\n{}",
            shown_capped(&serde_json::to_string_pretty(input).unwrap_or_else(|_| input.to_string()))
        ),
    };
    if let Some(d) = description.map(str::trim).filter(|d| !d.is_empty()) {
        text.push_str(&format!(
            "\n(The agent describes this as: \"{}\"; that is its claim, the input above is what runs.)",
            reveal(d)
        ));
    }
    text
}

/// `text` revealed ([`reveal`]) and cut at [`PERMISSION_INPUT_SHOWN`]
/// characters, saying so in words when it is.
fn shown_capped(text: &str) -> String {
    let shown = reveal(text);
    let total = shown.chars().count();
    let mut out = truncate_plain(&shown, PERMISSION_INPUT_SHOWN).to_owned();
    if total > PERMISSION_INPUT_SHOWN {
        out.push_str(&format!(
            "\n[shortened by caesar: it is {total} characters long and only the first {PERMISSION_INPUT_SHOWN} are \
             shown; the whole request is kept in the task's permissions/ directory. Do not allow what you have not \
             read.]"
        ));
    }
    out
}

/// `text` with control characters (but newline and tab) and bidirectional
/// overrides written as `\u{…}` escapes.
fn reveal(text: &str) -> String {
    let hidden = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    text.chars().map(|c| if hidden(c) { format!("\\u{{{:x}}}", c as u32) } else { c.to_string() }).collect()
}

/// The first `max` characters of `text`, with no mark (the caller says it).
fn truncate_plain(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn one_line(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn str_at<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

fn u64_at(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| x.as_u64().or_else(|| x.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)))
}

/// Parses a line as a JSON object; `None` for anything else.
fn json_object(line: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(line).ok()?;
    v.is_object().then_some(v)
}

/// Per-run state every parser needs: the last session id, reported blockers, open tool calls.
#[derive(Debug, Default)]
struct Base {
    session: Option<String>,
    reported: Vec<BlockerKind>,
    /// call id -> (tool name, input summary)
    tools: HashMap<String, (String, String)>,
    started: HashSet<String>,
    /// The last line was text, not one of the provider's events: the
    /// continuation lines of a stack trace or a printed object after it
    /// fold into its one event.
    in_text: bool,
}

impl Base {
    fn session(&mut self, p: &mut Parsed, id: &str) {
        if id.is_empty() || self.session.as_deref() == Some(id) {
            return;
        }
        self.session = Some(id.to_owned());
        p.session_id = Some(id.to_owned());
    }

    fn blocker(&mut self, p: &mut Parsed, kind: BlockerKind, message: &str) {
        self.blocker_until(p, kind, message, None);
    }

    /// [`Self::blocker`] for a limit that says when it lifts.
    fn blocker_until(&mut self, p: &mut Parsed, kind: BlockerKind, message: &str, resets_at_ms: Option<i64>) {
        if self.reported.contains(&kind) {
            return;
        }
        self.reported.push(kind);
        let blocker = Blocker { kind, message: truncate(message.trim(), 500), resets_at_ms };
        p.events.push(blocker.event());
        if p.blocker.is_none() {
            p.blocker = Some(blocker);
        }
    }

    /// Runs the shared text fallbacks on CLI-originated error text.
    fn classify(&mut self, p: &mut Parsed, text: &str) {
        if let Some(kind) = classify_text(text) {
            // A quota that says when it lifts, at a time (issue 17, quota parking; `reset.rs`).
            let at = match reset::reset_hint(text) {
                Some(reset::ResetHint::At(ms)) if kind == BlockerKind::RateLimit => Some(ms),
                _ => None,
            };
            self.blocker_until(p, kind, text, at);
        }
    }

    /// Runs only the permission fallbacks (for tool errors, whose text may come from the tool).
    fn classify_denial(&mut self, p: &mut Parsed, text: &str) {
        if classify::is_denial(text) {
            self.blocker(p, BlockerKind::Permission, text);
        }
    }

    fn tool_start(&mut self, p: &mut Parsed, id: &str, tool: &str, summary: String) {
        self.tools.insert(id.to_owned(), (tool.to_owned(), summary.clone()));
        self.started.insert(id.to_owned());
        p.events.push(EventBody::ToolUse {
            tool: tool.to_owned(),
            input_summary: summary,
            status: ToolStatus::Started,
            id: id.to_owned(),
        });
    }

    /// Ends a tool call, emitting its start first if the stream never reported one.
    fn tool_end(&mut self, p: &mut Parsed, id: &str, tool: Option<&str>, summary: Option<String>, ok: bool) {
        let known = self.tools.get(id).cloned();
        let name = tool.map(str::to_owned).or_else(|| known.as_ref().map(|k| k.0.clone())).unwrap_or_default();
        let summary = summary.or_else(|| known.as_ref().map(|k| k.1.clone())).unwrap_or_default();
        if !self.started.contains(id) {
            self.tool_start(p, id, &name, summary.clone());
        }
        self.started.remove(id);
        p.events.push(EventBody::ToolUse {
            tool: name,
            input_summary: summary,
            status: if ok { ToolStatus::Succeeded } else { ToolStatus::Failed },
            id: id.to_owned(),
        });
    }

    fn usage(&mut self, p: &mut Parsed, usage: Usage) {
        p.events.push(EventBody::Usage { usage: usage.clone() });
        p.usage = Some(usage);
    }

    /// The prelude of the parsers whose events are JSON objects on stdout:
    /// the line's object, or what to return instead (nothing for a blank
    /// line; for anything else, stderr included, an unrecognized line read
    /// by the text fallbacks).
    // `Err` is not an error but the early answer, returned once per line.
    #[allow(clippy::result_large_err)]
    fn stdout_json(&mut self, line: &str, stream: Stream) -> Result<Value, Parsed> {
        if line.trim().is_empty() {
            return Err(Parsed::default());
        }
        let v = match stream {
            Stream::Stdout => json_object(line.trim()),
            Stream::Stderr => None,
        };
        match v {
            Some(v) => {
                self.event_line();
                Ok(v)
            }
            None => Err(self.text_line(line)),
        }
    }

    /// A line that is one of the provider's events: text after it starts anew.
    fn event_line(&mut self) {
        self.in_text = false;
    }

    /// A line that is not one of the provider's JSON events (untrimmed: its
    /// indentation tells a continuation). The first line of a block of text
    /// is one `Unrecognized` event; its continuation lines (a stack trace's
    /// `at …` frames, a printed object's indented fields and closing
    /// brackets) fold into it: no event of their own (the raw log keeps
    /// them), but the text fallbacks still read them for blockers.
    fn text_line(&mut self, line: &str) -> Parsed {
        let continues = self.in_text && is_continuation(line);
        self.in_text = true;
        let line = line.trim();
        let mut p = if continues { Parsed::default() } else { unrecognized(line) };
        // A JSON-RPC message (an ACP session's traffic kept in the raw log
        // before a fallback to the stream command) is protocol, never the
        // CLI's error text: a command list that mentions quotas is no quota.
        if !is_json_rpc(line) {
            self.classify(&mut p, &classify::strip_ansi(line));
        }
        p
    }
}

/// A line that carries on the text before it rather than starting anew:
/// indented, a stack frame, or a closing bracket.
fn is_continuation(line: &str) -> bool {
    let trimmed = line.trim();
    line.starts_with([' ', '\t'])
        || trimmed.starts_with("at ")
        || trimmed.starts_with("...")
        || (!trimmed.is_empty() && trimmed.chars().all(|c| matches!(c, '}' | ']' | ')' | ',' | ';')))
}

fn unrecognized(line: &str) -> Parsed {
    Parsed { events: vec![EventBody::Unrecognized { line: line.to_owned() }], ..Parsed::default() }
}

fn message(p: &mut Parsed, text: &str) {
    if !text.trim().is_empty() {
        p.events.push(EventBody::Message { text: text.to_owned() });
    }
}

fn thinking(p: &mut Parsed, text: &str) {
    if !text.trim().is_empty() {
        p.events.push(EventBody::Thinking { text: text.to_owned() });
    }
}

fn error(p: &mut Parsed, text: &str, fatal: bool) {
    p.events.push(EventBody::Error { message: text.to_owned(), fatal });
}

/// A CLI's warning about itself: `warning`, not `error` (issue 30).
fn warning(p: &mut Parsed, text: &str) {
    if !text.trim().is_empty() {
        p.events.push(EventBody::Warning { message: text.to_owned() });
    }
}

fn file_changed(p: &mut Parsed, path: &str, action: ChangeAction) {
    if !path.is_empty() {
        p.events.push(EventBody::FileChanged { path: path.to_owned(), action });
    }
}

/// Whether `line` is a JSON-RPC message (`{"jsonrpc":"2.0",…}`), whole or
/// not: a line cut by the reader's cap, or with another writer's text run
/// into its end, is no JSON of its own but still the protocol's.
fn is_json_rpc(line: &str) -> bool {
    let head: String = line.chars().filter(|c| !c.is_whitespace()).take(11).collect();
    head == "{\"jsonrpc\":"
}

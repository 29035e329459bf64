//! A scripted model server on 127.0.0.1 for the real-CLI tests.
//!
//! It speaks the three streaming wires the real CLIs use against a custom base URL:
//! Anthropic Messages SSE (`POST /v1/messages`: claude, and copilot and opencode with an
//! anthropic provider), OpenAI Responses SSE (`POST /v1/responses`: codex) and Gemini SSE
//! (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`: gemini). Each model request takes the next [`Reply`] of the script;
//! when the script runs out, the model says [`ModelServer::FALLBACK_TEXT`] and ends its turn.
//! Every request is logged, so a test can assert what the CLI sent back (a tool result carrying
//! the orchestrator's answer, the earlier turns of a resumed session).
//!
//! Plain threads and blocking sockets: the server must not depend on the runtime of the test
//! that owns it. Its loops are bounded: at most [`MAX_CONNECTIONS`] connections, each read
//! times out, and dropping the server stops it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The accept loop stops by itself after this many connections.
pub const MAX_CONNECTIONS: usize = 2_000;
/// A connection that sends nothing for this long is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request body accepted (the CLIs send their whole conversation each turn).
const MAX_BODY: usize = 64 << 20;

/// What the model does for one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A text answer that ends the turn.
    Text(String),
    /// One tool call (Anthropic `tool_use`, Responses `function_call`). Every `{cwd}` in the
    /// input's strings becomes the working directory the CLI announced in the request, for tools
    /// that want absolute paths; every `{task_id}` and `{question_id}` the last caesar task id
    /// (`t_` and 12 hex digits) and question id (`q_` and 8 hex digits) the request carries,
    /// for a script that answers the ids earlier tool results gave it.
    Tool { name: String, input: Value },
    /// A Responses output item sent as is (codex's custom tools, such as `apply_patch`), but for
    /// `{task_id}` and `{question_id}`, replaced as in [`Reply::Tool`].
    ResponsesItem(Value),
    /// An HTTP error with the wire's error body.
    Error { status: u16, message: String },
    /// An HTTP answer with exactly this status, these extra headers and this JSON body, whatever
    /// the wire (codex's usage-limit 429: its `usage_limit_reached` body and `x-codex-*` headers).
    Raw { status: u16, headers: Vec<(String, String)>, body: Value },
}

impl Reply {
    pub fn text(t: &str) -> Reply {
        Reply::Text(t.to_owned())
    }

    pub fn tool(name: &str, input: Value) -> Reply {
        Reply::Tool { name: name.to_owned(), input }
    }

    /// A call to the tool of the request's tools list whose name ends with `suffix` (the name a
    /// host gives an MCP server's tool: `mcp__caesar__caesar_delegate`, `caesar_caesar_delegate`,
    /// ...), found when the request comes; `suffix` itself when no tool matches.
    pub fn tool_ending(suffix: &str, input: Value) -> Reply {
        Reply::Tool { name: format!("{ENDING}{suffix}"), input }
    }

    pub fn error(status: u16, message: &str) -> Reply {
        Reply::Error { status, message: message.to_owned() }
    }
}

/// Marks a [`Reply::Tool`] name as a suffix to resolve against the request's tools.
const ENDING: &str = "\u{0}ending:";

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body as JSON, or `Value::Null` when it was not JSON.
    pub body: Value,
    /// Whether it was answered from the script (a model request) rather than ignored.
    pub scripted: bool,
    /// When its body had been read: the time between a tool call's answer and the next model
    /// request is the time the CLI took to run that tool.
    pub at: Instant,
}

impl Request {
    /// The whole body as text, for "the CLI sent this back" assertions.
    pub fn body_text(&self) -> String {
        self.body.to_string()
    }

    /// Every tool name the request offers the model (Anthropic and Responses `tools[].name`, a
    /// Responses namespace's members, Gemini's `functionDeclarations[].name`).
    pub fn tool_names(&self) -> Vec<String> {
        fn walk(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                Value::Object(o) => {
                    if let Some(Value::String(n)) = o.get("name") {
                        out.push(n.clone());
                    }
                    for k in ["tools", "functionDeclarations"] {
                        if let Some(x) = o.get(k) {
                            walk(x, out);
                        }
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        if let Some(t) = self.body.get("tools") {
            walk(t, &mut out);
        }
        out
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    log: Vec<Request>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    ids: AtomicU64,
}

/// The server. Dropping it stops the accept loop.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl ModelServer {
    /// What the model says once the script is exhausted.
    pub const FALLBACK_TEXT: &'static str = "Nothing more to do.";

    /// Binds 127.0.0.1 on a free port and starts answering with `script`.
    pub fn start(script: Vec<Reply>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State { script: script.into(), log: Vec::new() }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(1),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::spawn(move || accept_loop(&listener, &accept_shared));
        ModelServer { addr, shared, accept: Some(accept) }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Appends replies to the script.
    pub fn push(&self, replies: Vec<Reply>) {
        self.lock().script.extend(replies);
    }

    /// Replaces what is left of the script.
    pub fn set_script(&self, replies: Vec<Reply>) {
        self.lock().script = replies.into();
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.lock().log.clone()
    }

    /// The model requests (those the script answered), in order.
    pub fn model_requests(&self) -> Vec<Request> {
        self.lock().log.iter().filter(|r| r.scripted).cloned().collect()
    }

    /// Waits until at least `n` model requests arrived; false on timeout.
    pub fn wait_for_model_requests(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if state.log.iter().filter(|r| r.scripted).count() >= n {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.shared.changed.wait_timeout(state, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming().take(MAX_CONNECTIONS) {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(shared);
        std::thread::spawn(move || {
            let _ = serve_connection(stream, &shared);
        });
    }
}

/// Serves requests on one connection until the peer closes it, a read times out, or the server
/// stops. Keep-alive is honoured: undici and reqwest both reuse connections.
fn serve_connection(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while !shared.stop.load(Ordering::SeqCst) {
        let Some(mut request) = read_request(&mut reader)? else { return Ok(()) };
        let reply = if is_model_request(&request) {
            request.scripted = true;
            let mut state = shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let reply = state.script.pop_front().unwrap_or_else(|| Reply::text(ModelServer::FALLBACK_TEXT));
            state.log.push(request.clone());
            shared.changed.notify_all();
            Some(reply)
        } else {
            let mut state = shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            state.log.push(request.clone());
            shared.changed.notify_all();
            None
        };
        let id = shared.ids.fetch_add(1, Ordering::SeqCst);
        match reply {
            Some(reply) if request.path.starts_with("/v1/messages") => {
                write_anthropic(&mut writer, &request, &reply, id)?
            }
            Some(reply) if request.path.contains(":streamGenerateContent") => {
                write_gemini(&mut writer, &request, &reply)?
            }
            Some(reply) => write_responses(&mut writer, &request, &reply, id)?,
            None => write_side(&mut writer, &request, id)?,
        }
    }
    Ok(())
}

/// Whether a request is a turn of the agent's model, which takes the next scripted reply. Side
/// requests (opencode's title, gemini's model router, token counts) get a fixed answer instead,
/// so that a script counts only the agent's turns.
fn is_model_request(r: &Request) -> bool {
    if r.method != "POST" {
        return false;
    }
    let path = r.path.split('?').next().unwrap_or_default();
    let has_tools = r.body.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    let streaming = r.body.get("stream") != Some(&Value::Bool(false));
    match path {
        "/v1/messages" | "/v1/responses" => streaming && has_tools,
        _ => path.ends_with(":streamGenerateContent") && has_tools,
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(reader)?
    } else {
        let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        if len > MAX_BODY {
            return Err(std::io::Error::other("request body too large"));
        }
        let mut buf = vec![0; len];
        reader.read_exact(&mut buf)?;
        buf
    };
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Ok(Some(Request { method, path, headers, body, scripted: false, at: Instant::now() }))
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if body.len() + size > MAX_BODY {
            return Err(std::io::Error::other("request body too large"));
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

fn write_raw(w: &mut TcpStream, status: u16, headers: &[(String, String)], body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        w,
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        reason(status),
        body.len()
    )?;
    w.flush()
}

fn write_plain(w: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        w,
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 0\r\n\r\n{body}",
        reason(status),
        body.len()
    )?;
    w.flush()
}

/// The answer to a side request: a short text in the wire it asked in.
fn write_side(w: &mut TcpStream, r: &Request, id: u64) -> std::io::Result<()> {
    let path = r.path.split('?').next().unwrap_or_default();
    if r.method != "POST" {
        write_plain(w, 404, &json!({"error": {"message": "not scripted"}}))
    } else if path == "/v1/messages" && r.body.get("stream") == Some(&Value::Bool(true)) {
        write_anthropic(w, r, &Reply::text("A scripted conversation"), id)
    } else if path == "/v1/messages" {
        write_plain(
            w,
            200,
            &json!({"id": format!("msg_side{id}"), "type": "message", "role": "assistant", "model": model_of(r),
                "content": [{"type": "text", "text": "A scripted conversation"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}}),
        )
    } else if path.ends_with(":generateContent") {
        // gemini's router asks which model to use; any well-formed answer will do.
        let text = json!({"reasoning": "scripted", "model_choice": "flash",
            "complexity_reasoning": "scripted", "complexity_score": 1})
        .to_string();
        write_plain(w, 200, &gemini_chunk(vec![json!({"text": text})]))
    } else if path.ends_with(":streamGenerateContent") {
        write_gemini(w, r, &Reply::text("A scripted conversation"))
    } else if path == "/v1/responses" {
        write_responses(w, r, &Reply::text("A scripted conversation"), id)
    } else {
        write_plain(w, 404, &json!({"error": {"message": "not scripted"}}))
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Error",
    }
}

/// Writes a whole SSE response. The length is known up front, so the connection stays usable.
fn write_sse(w: &mut TcpStream, events: &[(&str, Value)]) -> std::io::Result<()> {
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    write!(
        w,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

fn model_of(r: &Request) -> String {
    r.body.get("model").and_then(Value::as_str).unwrap_or("fake-model").to_owned()
}

fn write_anthropic(w: &mut TcpStream, r: &Request, reply: &Reply, id: u64) -> std::io::Result<()> {
    let (block, stop) = match reply {
        Reply::Raw { status, headers, body } => return write_raw(w, *status, headers, body),
        Reply::Error { status, message } => {
            let kind = match status {
                401 => "authentication_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            return write_plain(w, *status, &json!({"type": "error", "error": {"type": kind, "message": message}}));
        }
        Reply::Text(t) | Reply::ResponsesItem(Value::String(t)) => (
            vec![
                ("content_block_start", json!({"index": 0, "content_block": {"type": "text", "text": ""}})),
                ("content_block_delta", json!({"index": 0, "delta": {"type": "text_delta", "text": t}})),
            ],
            "end_turn",
        ),
        Reply::ResponsesItem(_) => (Vec::new(), "end_turn"),
        Reply::Tool { name, input } => (
            vec![
                (
                    "content_block_start",
                    json!({"index": 0, "content_block":
                        {"type": "tool_use", "id": format!("toolu_fake{id}"), "name": resolve_name(name, r), "input": {}}}),
                ),
                (
                    "content_block_delta",
                    json!({"index": 0, "delta": {"type": "input_json_delta", "partial_json": with_cwd(input, r)}}),
                ),
            ],
            "tool_use",
        ),
    };
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_fake{id}"), "type": "message", "role": "assistant", "model": model_of(r),
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    )];
    let has_block = !block.is_empty();
    for (name, mut data) in block {
        data["type"] = json!(name);
        events.push((name, data));
    }
    if has_block {
        events.push(("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 7}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    write_sse(w, &events)
}

fn write_responses(w: &mut TcpStream, r: &Request, reply: &Reply, id: u64) -> std::io::Result<()> {
    let item = match reply {
        Reply::Raw { status, headers, body } => return write_raw(w, *status, headers, body),
        Reply::Error { status, message } => {
            let code = match status {
                401 => "invalid_api_key",
                429 => "rate_limit_exceeded",
                _ => "server_error",
            };
            return write_plain(w, *status, &json!({"error": {"message": message, "type": code, "code": code}}));
        }
        Reply::Text(t) => json!({
            "type": "message", "id": format!("msg_fake{id}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}]}),
        Reply::Tool { name, input } => json!({
            "type": "function_call", "id": format!("fc_fake{id}"), "call_id": format!("call_fake{id}"),
            "name": resolve_name(name, r), "arguments": with_cwd(input, r), "status": "completed"}),
        Reply::ResponsesItem(item) => with_ids(item, r),
    };
    let response_id = format!("resp_fake{id}");
    let events = [
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": response_id, "model": model_of(r)}}),
        ),
        ("response.output_item.done", json!({"type": "response.output_item.done", "output_index": 0, "item": item})),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": response_id, "usage": {
                "input_tokens": 24, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 34}}}),
        ),
    ];
    write_sse(w, &events)
}

/// A tool name as the script gave it, or for [`Reply::tool_ending`] the request's tool whose name
/// ends with the suffix.
fn resolve_name(name: &str, r: &Request) -> String {
    let Some(suffix) = name.strip_prefix(ENDING) else { return name.to_owned() };
    r.tool_names().into_iter().find(|n| n.ends_with(suffix)).unwrap_or_else(|| suffix.to_owned())
}

/// The tool input as JSON text, with `{cwd}` replaced by the request's working directory and
/// `{task_id}`, `{question_id}` by the last ids the request carries.
fn with_cwd(input: &Value, r: &Request) -> String {
    let text = ids_replaced(input.to_string(), r);
    match cwd_of(r) {
        Some(cwd) => text.replace("{cwd}", &cwd),
        None => text,
    }
}

/// A JSON value with `{task_id}` and `{question_id}` replaced; the value itself when it has none.
fn with_ids(item: &Value, r: &Request) -> Value {
    let text = item.to_string();
    if !text.contains("{task_id}") && !text.contains("{question_id}") {
        return item.clone();
    }
    serde_json::from_str(&ids_replaced(text, r)).unwrap_or_else(|_| item.clone())
}

fn ids_replaced(text: String, r: &Request) -> String {
    if !text.contains("{task_id}") && !text.contains("{question_id}") {
        return text;
    }
    let body = r.body_text();
    let mut text = text;
    if let Some(id) = last_id(&body, "t_", 12) {
        text = text.replace("{task_id}", &id);
    }
    if let Some(id) = last_id(&body, "q_", 8) {
        text = text.replace("{question_id}", &id);
    }
    text
}

/// The last `<prefix><digits hex digits>` in `text` that stands alone (no word character on
/// either side): a caesar task or question id.
pub fn last_id(text: &str, prefix: &str, digits: usize) -> Option<String> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = None;
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix).map(|i| i + from) {
        from = i + prefix.len();
        let end = from + digits;
        // An id right after an escaped newline or tab of JSON text stands alone too.
        let escaped = i >= 2 && bytes[i - 2] == b'\\' && matches!(bytes[i - 1], b'n' | b't' | b'r');
        let before_ok = i == 0 || !word(bytes[i - 1]) || escaped;
        let hex_ok = end <= bytes.len() && bytes[from..end].iter().all(|b| b.is_ascii_hexdigit());
        let after_ok = end == bytes.len() || (end < bytes.len() && !word(bytes[end]));
        if before_ok && hex_ok && after_ok {
            found = Some(text[i..end].to_owned());
        }
    }
    found
}

/// The working directory a CLI announces in its prompt: claude's "Primary working directory: X"
/// in the system prompt, codex's `<cwd>X</cwd>` environment context.
fn cwd_of(r: &Request) -> Option<String> {
    let body = r.body_text();
    let markers = [
        ("Primary working directory: ", &['\\', '"', '<'][..]),
        ("Current working directory: ", &['\\', '"', '<'][..]),
        ("Working directory: ", &['\\', '"', '<'][..]),
        ("I'm currently working in the directory: ", &['\\', '"', '<'][..]),
        ("<cwd>", &['<', '"', '\\'][..]),
    ];
    for (start, stops) in markers {
        if let Some(i) = body.find(start) {
            let rest = &body[i + start.len()..];
            let end = rest.find(stops).unwrap_or(rest.len());
            return Some(rest[..end].trim().to_owned());
        }
    }
    None
}

/// One Gemini `GenerateContentResponse` holding `parts`.
fn gemini_chunk(parts: Vec<Value>) -> Value {
    json!({"candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 24, "candidatesTokenCount": 10, "totalTokenCount": 34},
        "modelVersion": "scripted"})
}

fn write_gemini(w: &mut TcpStream, r: &Request, reply: &Reply) -> std::io::Result<()> {
    let parts = match reply {
        Reply::Raw { status, headers, body } => return write_raw(w, *status, headers, body),
        Reply::Error { status, message } => {
            let kind = match status {
                401 => "UNAUTHENTICATED",
                429 => "RESOURCE_EXHAUSTED",
                _ => "INTERNAL",
            };
            return write_plain(w, *status, &json!({"error": {"code": status, "message": message, "status": kind}}));
        }
        Reply::Text(t) => vec![json!({"text": t})],
        Reply::Tool { name, input } => {
            let args: Value = serde_json::from_str(&with_cwd(input, r)).unwrap_or_default();
            vec![json!({"functionCall": {"name": resolve_name(name, r), "args": args}})]
        }
        Reply::ResponsesItem(item) => vec![with_ids(item, r)],
    };
    let body = format!("data: {}\r\n\r\n", gemini_chunk(parts));
    write!(
        w,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

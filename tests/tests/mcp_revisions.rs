//! `caesar-mcp` under MCP 2026-07-28, the stateless revision: no
//! `initialize`, every request carrying its own `_meta` (protocol version,
//! client capabilities), no session, no roots. Spoken as raw JSON-RPC lines
//! over stdio so the wire is what the test says: `server/discover` lists
//! the revision, the workspace comes from the shim's working directory,
//! `caesar_await` sends progress for a progress token, and tool errors are
//! `isError` results with `code: message` text, against a real daemon.
//! (The older revisions, with `initialize` and roots, are tests/mcp.rs.)

#![allow(clippy::unwrap_used)]

mod common;

mod raw_mcp;

use common::*;
use raw_mcp::*;
use serde_json::{Value, json};

#[tokio::test]
async fn the_stateless_revision_discovers_delegates_from_the_cwd_awaits_with_progress_and_reports_errors() {
    let mut env = Env::new(&[("slow", &["say", "working", "sleep", "1200", "report", "success", "slow done"])]);
    env.start_daemon().await;
    let mut shim = Raw::spawn(&env, &[("CAESAR_MCP_PROGRESS_MS", "200")]);

    // A request without the revision's metadata is refused, naming what is missing.
    let bare = shim.send("tools/list", json!({"_meta": {"io.modelcontextprotocol/protocolVersion": REVISION}})).await;
    let message = bare["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(bare["error"].is_object() && message.contains("clientCapabilities"), "{bare}");

    let d = shim.request("server/discover", json!({}), json!({})).await;
    let versions = d["result"]["supportedVersions"].as_array().unwrap_or_else(|| panic!("{d}"));
    assert!(versions.contains(&json!(REVISION)), "{d}");
    assert!(d["result"]["capabilities"]["tools"].is_object(), "{d}");

    let tools = shim.request("tools/list", json!({}), json!({})).await;
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"caesar_delegate") && names.contains(&"caesar_await"), "{names:?}");

    // No roots in this revision, no --root: the shim's working directory.
    let delegated = ok(&shim.call("caesar_delegate", json!({"objective": "do it", "agent": "slow"}), json!({})).await);
    assert_eq!(delegated["workspace"], env.workspace(), "{delegated}");
    let id = delegated["task_id"].as_str().unwrap().to_owned();

    let awaited = shim
        .call(
            "caesar_await",
            json!({"task_ids": [id], "timeout_ms": 30000, "wake_on_attention": false}),
            json!({"progressToken": "await-2026"}),
        )
        .await;
    assert_eq!(ok(&awaited)["tasks"][&id]["report"]["summary"], "slow done", "{awaited}");
    let progress: Vec<&Value> = shim.notifications.iter().filter(|n| n["method"] == "notifications/progress").collect();
    assert!(progress.len() >= 2, "progress every 200 ms over 1.2 s: {:?}", shim.notifications);
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "await-2026"), "{progress:?}");
    assert!(
        progress.windows(2).all(|w| w[1]["params"]["progress"].as_f64() > w[0]["params"]["progress"].as_f64()),
        "{progress:?}"
    );

    // Errors are tool results, not protocol errors.
    err(&shim.call("caesar_status", json!({"task_id": "t_000000000000"}), json!({})).await, "not_found");
    err(&shim.call("caesar_delegate", json!({"objective": ""}), json!({})).await, "validation_error");
    err(&shim.call("caesar_delegate", json!({"objective": "x", "agent": "nobody"}), json!({})).await, "not_found");

    // Stateless: a second process answers the same task with no handshake at all.
    let mut other = Raw::spawn(&env, &[]);
    let status = ok(&other.call("caesar_status", json!({"task_id": id}), json!({})).await);
    assert_eq!(status["status"], "succeeded", "{status}");
    drop(other.stdin);
    let _ = tokio::time::timeout(LIMIT, other.child.wait()).await;
}

/// One raw HTTP/1.1 POST of a 2026-07-28 JSON-RPC request (with the
/// revision's headers); returns the whole response.
fn post_2026(port: u16, token: &str, id: u64, method: &str, params: Value) -> String {
    post_2026_as(port, token, id, method, params, json!({}))
}

/// [`post_2026`] from a client declaring `capabilities`.
fn post_2026_as(port: u16, token: &str, id: u64, method: &str, params: Value, capabilities: Value) -> String {
    use std::io::{Read, Write};
    let (headers, body) = request_2026(token, id, method, params, capabilities);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The revision's headers and the JSON-RPC body of one request from a
/// client declaring `capabilities`.
fn request_2026(token: &str, id: u64, method: &str, mut params: Value, capabilities: Value) -> (String, String) {
    if !params["_meta"].is_object() {
        params["_meta"] = json!({});
    }
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(REVISION);
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    params["_meta"]["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw", "version": "0"});
    let name = params["name"].as_str().map(|n| format!("Mcp-Name: {n}\r\n")).unwrap_or_default();
    let headers =
        format!("Authorization: Bearer {token}\r\nMCP-Protocol-Version: {REVISION}\r\nMcp-Method: {method}\r\n{name}");
    (headers, json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
}

/// The JSON-RPC messages in an HTTP response body (plain JSON or SSE `data:` lines).
fn messages(response: &str) -> Vec<Value> {
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    body.lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim).or(Some(l.trim())))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("jsonrpc").is_some())
        .collect()
}

fn answer(response: &str, id: u64) -> Value {
    messages(response)
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .unwrap_or_else(|| panic!("no answer {id}: {response}"))
}

#[tokio::test]
async fn the_http_endpoint_speaks_the_stateless_revision_with_the_workspace_as_an_argument() {
    let mut env = Env::new(&[("slow", &["say", "working", "sleep", "1200", "report", "success", "over http"])]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        .unwrap();
    let mut c = env.start_daemon_with(&[("CAESAR_MCP_PROGRESS_MS", "200")]).await;
    let token = c
        .http_token(caesar_proto::pb::HttpTokenRequest { rotate: false, readonly: false })
        .await
        .unwrap()
        .into_inner()
        .token;
    assert!(eventually(LIMIT, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await);

    let d = answer(&post_2026(port, &token, 1, "server/discover", json!({})), 1);
    assert!(d["result"]["supportedVersions"].as_array().unwrap().contains(&json!(REVISION)), "{d}");

    // No roots over HTTP: without a `workspace` argument the delegation is refused.
    let call = |id, args: Value| {
        post_2026(port, &token, id, "tools/call", json!({"name": "caesar_delegate", "arguments": args}))
    };
    let r = answer(&call(2, json!({"objective": "where am I", "agent": "slow"})), 2);
    err(&r["result"], "validation_error");
    let r = answer(&call(3, json!({"objective": "go", "agent": "slow", "workspace": env.workspace()})), 3);
    let delegated = ok(&r["result"]);
    assert_eq!(delegated["workspace"], env.workspace());
    let id = delegated["task_id"].as_str().unwrap().to_owned();

    let r = post_2026(
        port,
        &token,
        4,
        "tools/call",
        json!({"name": "caesar_await", "arguments": {"task_ids": [id], "timeout_ms": 30000, "wake_on_attention": false},
               "_meta": {"progressToken": 44}}),
    );
    assert_eq!(ok(&answer(&r, 4)["result"])["tasks"][&id]["report"]["summary"], "over http", "{r}");
    let progress: Vec<Value> = messages(&r).into_iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert!(!progress.is_empty(), "progress in the response stream: {r}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == 44), "{progress:?}");
    assert!(!r.to_lowercase().contains("mcp-session-id"), "no session in this revision: {r}");
}

/// The official Python SDK (mcp 2.3.0, the first with 2026-07-28) through
/// its high-level `mcp.Client`: it probes `server/discover`, negotiates
/// 2026-07-28 with caesar-mcp over stdio and with the HTTP endpoint, and
/// delegates, awaits with progress and gets a `not_found` error under it.
#[tokio::test]
async fn the_python_sdk_speaks_the_stateless_revision_over_stdio_and_http() {
    let mut env = Env::new(&[("modern", &["say", "working", "sleep", "600", "report", "success", "modern done"])]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        .unwrap();
    let mut c = env.start_daemon_with(&[("CAESAR_MCP_PROGRESS_MS", "100")]).await;
    let token = c
        .http_token(caesar_proto::pb::HttpTokenRequest { rotate: false, readonly: false })
        .await
        .unwrap()
        .into_inner()
        .token;
    assert!(eventually(LIMIT, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await);
    let version = std::process::Command::new("python3")
        .args(["-c", "import importlib.metadata as m; print(m.version('mcp'))"])
        .output()
        .expect("python3 must be installed");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    assert!(version.starts_with("2."), "mcp {version:?}: 2026-07-28 needs mcp >= 2.3.0 (`pip install mcp==2.3.0`)");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/mcp_modern_test.py");
    let out = tokio::process::Command::new("python3")
        .arg(&script)
        .current_dir(env.project.path())
        .envs(env.envs())
        .env("CAESAR_MCP_BIN", bin_dir().join("caesar-mcp"))
        .env("CAESAR_MCP_PROGRESS_MS", "100")
        .env("CAESAR_TEST_URL", format!("http://127.0.0.1:{port}/mcp"))
        .env("CAESAR_TEST_TOKEN", &token)
        .env("CAESAR_TEST_WORKSPACE", env.workspace())
        .env("CAESAR_TEST_AGENT", "modern")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("python modern client: ok"), "{stdout}");
}

/// The Tasks extension's status notifications over HTTP: `subscriptions/listen`
/// naming task ids streams the acknowledgement, then `notifications/tasks`
/// (a full DetailedTask) per change, and ends once the tasks have ended.
#[tokio::test]
async fn over_http_subscriptions_listen_streams_notifications_tasks_until_the_task_ends() {
    let mut env = Env::new(&[("asker", &["mcp-ask", "go on?", "report", "success", "listened"])]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        .unwrap();
    let mut c = env.start_daemon().await;
    let token = c
        .http_token(caesar_proto::pb::HttpTokenRequest { rotate: false, readonly: false })
        .await
        .unwrap()
        .into_inner()
        .token;
    assert!(eventually(LIMIT, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await);
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});

    let args = json!({"objective": "go", "agent": "asker", "channel": true, "workspace": env.workspace()});
    let r = post_2026_as(
        port,
        &token,
        1,
        "tools/call",
        json!({"name": "caesar_delegate", "arguments": args}),
        tasks.clone(),
    );
    let handle = answer(&r, 1);
    assert_eq!(handle["result"]["resultType"], "task", "{handle}");
    let id = handle["result"]["taskId"].as_str().unwrap().to_owned();

    // A host without the extension is told which capability it lacks.
    let listen = json!({"notifications": {"taskIds": [id]}});
    let r = answer(&post_2026(port, &token, 2, "subscriptions/listen", listen.clone()), 2);
    assert_eq!(r["error"]["code"], -32021, "{r}");
    assert!(
        r["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{r}"
    );

    // The task waits on its question until the stream has told of it; then it is answered.
    let listen = json!({"notifications": {"taskIds": [id, "t_000000000000"]}});
    let (headers, body) = request_2026(&token, 3, "subscriptions/listen", listen, tasks);
    let mut stream = Streamed::post(port, &headers, body);
    let mut all = Vec::new();
    while let Some(m) = stream.next().await {
        if m["method"] == "notifications/tasks" && m["params"]["status"] == "input_required" {
            let asked = m["params"]["inputRequests"].as_object().unwrap_or_else(|| panic!("{m}"));
            let (question, request) = asked.iter().next().unwrap();
            assert_eq!(request["params"]["message"], "go on?", "{m}");
            let a = caesar_proto::pb::AnswerRequest {
                task_id: id.clone(),
                question_id: question.clone(),
                answer: "yes".into(),
            };
            c.answer(a).await.unwrap();
        }
        let end = m["id"] == 3;
        all.push(m);
        if end {
            break;
        }
    }
    let ack = all.first().unwrap_or_else(|| panic!("nothing streamed"));
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "the acknowledgement comes first: {all:?}");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]), "only the known task is followed: {ack}");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 3, "{ack}");
    let notes: Vec<&Value> = all.iter().filter(|m| m["method"] == "notifications/tasks").collect();
    let statuses: Vec<&str> = notes.iter().map(|n| n["params"]["status"].as_str().unwrap()).collect();
    assert!(statuses.contains(&"input_required"), "{all:?}");
    assert_eq!(statuses.last(), Some(&"completed"), "{all:?}");
    let done = notes.last().unwrap();
    assert_eq!(done["params"]["taskId"], id.as_str());
    assert_eq!(done["params"]["result"]["structuredContent"]["tasks"][&id]["report"]["summary"], "listened", "{done}");
    let end = all.last().unwrap();
    assert_eq!(end["id"], 3, "the stream ends with the listen's result once the task ended: {all:?}");
    assert_eq!(end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 3, "{end}");
}

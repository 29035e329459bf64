//! `caesar-mcp` driven over stdio by real MCP clients (rmcp's client here,
//! the official Python SDK in `tests/python/mcp_client_test.py`) against a
//! real caesard: schemas, every tool, every error code we can provoke,
//! truncation with `start_char`, progress during await, a shim killed in the
//! middle of an await, and a daemon restart under a running shim.

#![allow(clippy::unwrap_used, deprecated)]

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, ListRootsResult,
    NumberOrString, ProgressNotificationParam, ProgressToken, RequestMetaObject, Root,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

/// The most any single step of a test may take.
const LIMIT: Duration = Duration::from_secs(40);

const ALL_TOOLS: [&str; 12] = [
    "caesar_delegate",
    "caesar_await",
    "caesar_status",
    "caesar_logs",
    "caesar_cancel",
    "caesar_diff",
    "caesar_apply",
    "caesar_list_agents",
    "caesar_list_roles",
    "caesar_answer",
    "caesar_describe_agent",
    "caesar_steer",
];

fn shim_bin() -> PathBuf {
    let p = bin_dir().join("caesar-mcp");
    assert!(p.is_file(), "{} is missing: build it with `cargo build -p caesar`", p.display());
    p
}

/// A test client: records progress notifications and, when given roots,
/// advertises and serves them.
#[derive(Clone, Default)]
struct TestClient {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    roots: Option<Vec<String>>,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities = if self.roots.is_some() {
            serde_json::from_value(json!({"roots": {"listChanged": false}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("caesar-tests", "0"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params);
    }

    #[allow(deprecated)]
    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        let roots =
            self.roots.clone().unwrap_or_default().into_iter().map(|p| Root::new(format!("file://{p}"))).collect();
        Ok(ListRootsResult::new(roots))
    }
}

type Client = RunningService<RoleClient, TestClient>;

/// Spawns `caesar-mcp` with the Env's environment and connects a client.
/// Returns the client and the shim's pid.
async fn shim_with(env: &Env, handler: TestClient, args: &[&str], extra: &[(&str, &str)]) -> (Client, u32) {
    let mut cmd = tokio::process::Command::new(shim_bin());
    cmd.args(args).current_dir(env.project.path()).envs(env.envs()).envs(extra.iter().copied());
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let log = std::fs::File::create(env.file(&format!("shim{n}.log"))).unwrap();
    cmd.env("CAESAR_MCP_LOG", "debug,h2=info");
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(log).spawn().unwrap();
    let pid = transport.id().unwrap();
    let client = handler.serve(transport).await.expect("initialize");
    (client, pid)
}

async fn shim(env: &Env) -> Client {
    let root = env.workspace();
    shim_with(env, TestClient::default(), &["--root", &root], &[]).await.0
}

async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!("arguments must be an object") };
    c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

fn text(r: &CallToolResult) -> String {
    assert_eq!(r.content.len(), 1, "one text block: {r:?}");
    r.content[0].as_text().expect("text block").text.clone()
}

/// A successful result: structuredContent, equal to the text block's JSON.
fn ok(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "tool failed: {}", text(r));
    let s = r.structured_content.clone().expect("structuredContent");
    assert_eq!(json(&text(r)), s, "the text block carries the same JSON");
    s
}

/// A failed result's `code: message`, checked for the code.
fn err(r: &CallToolResult, code: &str) -> String {
    assert_eq!(r.is_error, Some(true), "expected {code}, got {r:?}");
    let t = text(r);
    assert!(t.starts_with(&format!("{code}: ")), "expected `{code}: ...`, got {t}");
    t
}

async fn delegate(c: &Client, agent: &str) -> String {
    let d = ok(&call(c, "caesar_delegate", json!({"objective": "do it", "agent": agent})).await);
    assert_eq!(d["status"], "running");
    d["task_id"].as_str().unwrap().to_owned()
}

fn assert_schema_object(name: &str, what: &str, s: &serde_json::Map<String, Value>) {
    assert_eq!(s.get("type"), Some(&json!("object")), "{name} {what}: {s:?}");
    if let Some(p) = s.get("properties") {
        assert!(p.is_object(), "{name} {what}: properties is an object");
    }
    // A JSON Schema is JSON: every $ref must point into $defs.
    let text = serde_json::to_string(s).unwrap();
    for r in text.split("\"$ref\":\"").skip(1) {
        let target = r.split('"').next().unwrap();
        let def = target.strip_prefix("#/$defs/").expect("local $ref");
        assert!(s.get("$defs").and_then(|d| d.get(def)).is_some(), "{name} {what}: dangling $ref {target}");
    }
}

#[tokio::test]
async fn initialize_and_tools_list_with_schemas_annotations_and_scoping() {
    let mut env = Env::new(&[]);
    env.start_daemon().await;
    let c = shim(&env).await;
    let info = c.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "caesar");
    assert!(info.capabilities.tools.is_some());
    let tools = c.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ALL_TOOLS);
    for t in &tools {
        assert_schema_object(&t.name, "input", &t.input_schema);
        assert_schema_object(&t.name, "output", t.output_schema.as_ref().unwrap());
        let d = t.description.as_deref().unwrap();
        assert!(d.len() > 150, "{} has a real description", t.name);
        let a = t.annotations.as_ref().unwrap();
        let ro = matches!(
            t.name.as_ref(),
            "caesar_status"
                | "caesar_logs"
                | "caesar_diff"
                | "caesar_await"
                | "caesar_list_agents"
                | "caesar_list_roles"
                | "caesar_describe_agent"
        );
        assert_eq!(a.read_only_hint, Some(ro), "{} readOnlyHint", t.name);
        if matches!(t.name.as_ref(), "caesar_cancel" | "caesar_apply") {
            assert_eq!(a.destructive_hint, Some(true), "{}", t.name);
        }
    }
    let delegate = tools.iter().find(|t| t.name == "caesar_delegate").unwrap();
    let props = delegate.input_schema["properties"].as_object().unwrap();
    for p in
        ["objective", "agent", "role", "mode", "isolation", "network", "timeout", "session_id", "effort", "channel"]
    {
        assert!(props.contains_key(p), "delegate takes {p}");
    }
    c.cancel().await.unwrap();

    // --profile readonly and --tools narrow the list; calling a hidden tool
    // is a protocol error.
    let (ro, _) = shim_with(&env, TestClient::default(), &["--profile", "readonly"], &[]).await;
    let names: Vec<String> = ro.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        names,
        [
            "caesar_await",
            "caesar_status",
            "caesar_logs",
            "caesar_diff",
            "caesar_list_agents",
            "caesar_list_roles",
            "caesar_describe_agent"
        ]
    );
    let hidden = ro
        .call_tool(
            CallToolRequestParams::new("caesar_cancel")
                .with_arguments(json!({"task_id": "x"}).as_object().unwrap().clone()),
        )
        .await;
    assert!(hidden.is_err(), "a hidden tool is a protocol error");
    ro.cancel().await.unwrap();
    let (two, _) = shim_with(&env, TestClient::default(), &["--tools", "caesar_logs,caesar_status"], &[]).await;
    assert_eq!(two.list_all_tools().await.unwrap().len(), 2);
    two.cancel().await.unwrap();

    // An unknown name is a startup error that names the valid ones.
    let out = std::process::Command::new(shim_bin())
        .args(["--tools", "caesar_status,caesar_bogus"])
        .envs(env.envs())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("caesar_bogus") && stderr.contains("caesar_delegate"), "{stderr}");
}

#[tokio::test]
async fn delegate_await_status_logs_and_cancel() {
    let mut env = Env::new(&[
        ("writer", &["say", "hello", "lines", "3", "report", "success", "all done"]),
        ("sleeper", &["say", "started", "hang"]),
    ]);
    env.start_daemon().await;
    let c = shim(&env).await;

    let d = ok(&call(
        &c,
        "caesar_delegate",
        json!({"objective": "write", "agent": "writer", "timeout": "5m", "effort": "low"}),
    )
    .await);
    assert_eq!(d["agent"], "writer");
    assert_eq!(d["workspace"], env.workspace());
    assert_eq!(d["timeout_ms"], 300_000);
    assert!(d.get("workspace_warning").is_none());
    let id = d["task_id"].as_str().unwrap().to_owned();

    let a = ok(&call(&c, "caesar_await", json!({"task_ids": [id], "timeout_ms": 30000})).await);
    let t = &a["tasks"][&id];
    assert_eq!(t["status"], "succeeded");
    assert_eq!(t["pending"], false);
    assert_eq!(t["report_status"], "success");
    assert_eq!(t["report"]["summary"], "all done");
    assert_eq!(t["agent"], "writer");
    assert!(a.get("truncated").is_none());

    let s = ok(&call(&c, "caesar_status", json!({"task_id": id})).await);
    assert_eq!(s["status"], "succeeded");
    assert_eq!(s["report_status"], "success");
    assert_eq!(s["last_event"]["type"], "finished");
    assert!(s.get("report").is_none(), "status never returns the report");
    assert!(s.get("ended_at").is_some() && s.get("created_at").is_some());
    assert!(s.get("pending_questions").is_none(), "empty fields are omitted");

    let l = ok(&call(&c, "caesar_logs", json!({"task_id": id, "limit": 2})).await);
    assert_eq!(l["raw"], false);
    assert_eq!(l["events"].as_array().unwrap().len(), 2);
    assert!(l["total_events"].as_u64().unwrap() > 2);
    let raw = ok(&call(&c, "caesar_logs", json!({"task_id": id, "raw": true})).await);
    assert!(raw["text"].as_str().unwrap().contains("hello\n"));
    assert!(raw.get("truncated").is_none());

    // Cancel a hanging task, then again: a no-op.
    let sid = delegate(&c, "sleeper").await;
    let pending = ok(&call(&c, "caesar_await", json!({"task_ids": [sid], "timeout_ms": 300})).await);
    assert_eq!(pending["tasks"][&sid]["pending"], true);
    assert!(pending["tasks"][&sid].get("report").is_none());
    let x = ok(&call(&c, "caesar_cancel", json!({"task_id": sid})).await);
    assert_eq!((x["cancelled"].clone(), x["status"].clone()), (json!(true), json!("cancelled")));
    let again = ok(&call(&c, "caesar_cancel", json!({"task_id": sid})).await);
    assert_eq!(again["cancelled"], false);
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn raw_logs_are_capped_and_continue_with_start_char() {
    let mut env = Env::new(&[("chatty", &["lines", "3000", "report", "success", "ok"])]);
    env.start_daemon().await;
    let root = env.workspace();
    let (c, _) = shim_with(&env, TestClient::default(), &["--root", &root, "--max-chars", "4000"], &[]).await;
    let id = delegate(&c, "chatty").await;
    ok(&call(&c, "caesar_await", json!({"task_ids": [id]})).await);

    // The default is the tail, with the way back to the start.
    let r = call(&c, "caesar_logs", json!({"task_id": id, "raw": true})).await;
    assert!(text(&r).chars().count() <= 4000, "capped");
    let tail = ok(&r);
    assert_eq!(tail["truncated"], true);
    assert!(tail["text"].as_str().unwrap().contains("line 2999\n"));
    assert!(tail["hint"].as_str().unwrap().contains("start_char=0"));
    let total = tail["total_chars"].as_u64().unwrap();

    // Reading forward from 0 with the hints' offsets rebuilds the output.
    let mut all = String::new();
    let mut next = Some(0u64);
    let mut reads = 0;
    while let Some(at) = next {
        let r =
            call(&c, "caesar_logs", json!({"task_id": id, "raw": true, "start_char": at, "max_chars": 999_999_999}))
                .await;
        assert!(text(&r).chars().count() <= 4000);
        let w = ok(&r);
        assert_eq!(w["start_char"], at);
        all.push_str(w["text"].as_str().unwrap());
        next = w["next_start_char"].as_u64();
        if let Some(n) = next {
            assert_eq!(w["truncated"], true);
            assert!(w["hint"].as_str().unwrap().contains(&format!("start_char={n}")));
        }
        reads += 1;
        assert!(reads < 100);
    }
    assert!(reads > 3, "several windows");
    assert_eq!(all.chars().count() as u64, total);
    let expected: String = (0..3000).map(|k| format!("line {k}\n")).collect();
    assert!(all.contains(&expected), "the windows join into the whole output");

    // A small per-call max_chars, and out-of-range numbers clamped.
    let small =
        ok(&call(&c, "caesar_logs", json!({"task_id": id, "raw": true, "start_char": 0, "max_chars": 100})).await);
    assert_eq!(small["text"].as_str().unwrap().chars().count(), 100);
    assert_eq!(small["next_start_char"], 100);
    let neg =
        ok(&call(&c, "caesar_logs", json!({"task_id": id, "raw": true, "start_char": -5, "max_chars": -1})).await);
    assert_eq!(neg["start_char"], 0);
    let events = call(&c, "caesar_logs", json!({"task_id": id, "limit": 1e12})).await;
    assert!(text(&events).chars().count() <= 4000);
    let ev = ok(&events);
    assert_eq!(ev["truncated"], true);
    let n = ev["events"].as_array().unwrap().len();
    assert!((1..1000).contains(&n), "{n} events");
    assert!(ev["hint"].as_str().unwrap().contains("most recent"));
    let last = ev["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["type"], "finished", "the newest events are kept");
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn error_codes() {
    let mut env = Env::new(&[("writer", &["report", "success", "ok"])]);
    // An agent whose executable is missing: the daemon answers FAILED_PRECONDITION.
    let mut config = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    config.push_str("[[agent]]\nid = \"ghost\"\nbin = \"/nonexistent/ghost-agent\"\nargs = []\n");
    std::fs::write(env.project.path().join(".caesar/config.toml"), config).unwrap();
    env.start_daemon().await;
    let c = shim(&env).await;
    let id = delegate(&c, "writer").await;

    // Not built in this daemon yet: internal_error, saying so.
    for (tool, args) in [
        ("caesar_diff", json!({"task_id": id})),
        ("caesar_apply", json!({"task_id": id})),
        ("caesar_list_agents", json!({})),
        ("caesar_list_roles", json!({})),
        ("caesar_answer", json!({"task_id": id, "question_id": "q1", "answer": "yes"})),
    ] {
        // These arrive with other issues: until then the daemon answers
        // UNIMPLEMENTED, which must come back as internal_error saying so.
        let r = call(&c, tool, args).await;
        if r.is_error == Some(true) {
            let t = text(&r);
            let code = t.split(':').next().unwrap();
            assert!(
                ["validation_error", "not_found", "policy_refused", "conflict", "internal_error"].contains(&code),
                "{tool}: {t}"
            );
            if code == "internal_error" {
                assert!(t.contains("not available in this build"), "{tool}: {t}");
            }
        } else {
            ok(&r);
        }
    }
    err(&call(&c, "caesar_status", json!({"task_id": "t_000000000000"})).await, "not_found");
    err(&call(&c, "caesar_await", json!({"task_ids": ["t_000000000000"]})).await, "not_found");
    err(&call(&c, "caesar_delegate", json!({"objective": "x", "agent": "nobody"})).await, "not_found");
    for bad in [
        json!({"objective": "x", "agent": "writer", "mode": "sideways"}),
        json!({"objective": "x", "agent": "writer", "timeout": "10x"}),
        json!({"agent": "writer"}),
        json!({"objective": "  ", "agent": "writer"}),
    ] {
        err(&call(&c, "caesar_delegate", bad).await, "validation_error");
    }
    err(&call(&c, "caesar_await", json!({"task_ids": []})).await, "validation_error");
    err(&call(&c, "caesar_status", json!({"task_id": 42})).await, "validation_error");
    err(&call(&c, "caesar_logs", json!({"task_id": ""})).await, "validation_error");
    err(&call(&c, "caesar_delegate", json!({"objective": "x", "agent": "ghost"})).await, "conflict");
    c.cancel().await.unwrap();

    // No daemon, and none can be started: daemon_unavailable.
    env.kill_daemons().await;
    let root = env.workspace();
    let (c, _) =
        shim_with(&env, TestClient::default(), &["--root", &root], &[("CAESAR_DAEMON_BIN", "/nonexistent/caesard")])
            .await;
    err(&call(&c, "caesar_status", json!({"task_id": id})).await, "daemon_unavailable");
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn await_sends_progress_with_a_progress_token() {
    let mut env = Env::new(&[("slow", &["say", "working", "sleep", "1500", "report", "success", "slow done"])]);
    env.start_daemon().await;
    let handler = TestClient::default();
    let progress = handler.progress.clone();
    let root = env.workspace();
    let (c, _) = shim_with(&env, handler, &["--root", &root], &[("CAESAR_MCP_PROGRESS_MS", "200")]).await;
    let id = delegate(&c, "slow").await;
    let token = ProgressToken(NumberOrString::String("await-1".into()));
    let mut params = CallToolRequestParams::new("caesar_await").with_arguments(
        json!({"task_ids": [id], "timeout_ms": 30000, "wake_on_attention": false}).as_object().unwrap().clone(),
    );
    params.meta = Some(RequestMetaObject::with_progress_token(token.clone()));
    let r = c.call_tool(params).await.unwrap();
    assert_eq!(ok(&r)["tasks"][&id]["report"]["summary"], "slow done");
    let got = progress.lock().unwrap().clone();
    assert!(got.len() >= 3, "progress every 200 ms over 1.5 s: {got:?}");
    // The client may stand its own token in for ours; it must be one token.
    assert!(got.iter().all(|p| p.progress_token == got[0].progress_token && p.total == Some(1.0)), "{got:?}");
    assert!(got.windows(2).all(|w| w[1].progress > w[0].progress), "progress increases");
    let msg = got[got.len() / 2].message.clone().unwrap();
    assert!(msg.starts_with("0/1 tasks done"), "{msg}");
    assert!(msg.contains(&id) && msg.contains("last event"), "{msg}");
    c.cancel().await.unwrap();
}

/// An await with a progress token, as an MCP host makes it.
fn await_with_progress(id: &str, token: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("caesar_await")
        .with_arguments(json!({"task_ids": [id], "timeout_ms": 30000}).as_object().unwrap().clone());
    params.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(NumberOrString::String(token.into()))));
    params
}

// A regression test too: a new shim's first call being an await with a
// progress token once deadlocked on the connection lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shim_loses_nothing() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let gate_s = gate.display().to_string();
    env.set_agents(&[("gated", &["say", "waiting", "wait-file", &gate_s, "report", "success", "after the gate"])]);
    let mut grpc = env.start_daemon().await;
    let handler = TestClient::default();
    let progress = handler.progress.clone();
    let (c, pid) = shim_with(&env, handler, &["--root", &env.workspace()], &[("CAESAR_MCP_PROGRESS_MS", "100")]).await;
    let id = tokio::time::timeout(LIMIT, delegate(&c, "gated")).await.expect("delegate answers");
    let mut waiting = {
        let c = c.peer().clone();
        let params = await_with_progress(&id, "await-1");
        tokio::spawn(async move { c.call_tool(params).await })
    };
    // The shim reports progress once the await is under way in it.
    assert!(eventually(LIMIT, || !progress.lock().unwrap().is_empty()).await, "the shim reports progress on the await");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    // The killed shim never answers: its stdout closes and the call fails.
    let answered = tokio::time::timeout(LIMIT, &mut waiting).await;
    assert!(matches!(answered, Ok(Ok(Err(_)))), "the await fails with the shim, unanswered: {answered:?}");
    drop(c);
    // The task outlived the shim that delegated it.
    let s = grpc.status(caesar_proto::pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(s.status().as_str(), "running", "the shim's death stopped nothing");
    std::fs::write(&gate, "go").unwrap();

    let root = env.workspace();
    let (c2, _) = tokio::time::timeout(LIMIT, shim_with(&env, TestClient::default(), &["--root", &root], &[]))
        .await
        .expect("a new shim initializes");
    let a = tokio::time::timeout(LIMIT, c2.call_tool(await_with_progress(&id, "await-2")))
        .await
        .unwrap_or_else(|_| panic!("the new shim answers await; its log: {}", env.file("shim1.log").display()))
        .unwrap();
    let a = ok(&a);
    assert_eq!(a["tasks"][&id]["status"], "succeeded");
    assert_eq!(a["tasks"][&id]["report"]["summary"], "after the gate");
    c2.cancel().await.unwrap();
}

#[tokio::test]
async fn the_shim_starts_the_daemon_and_reconnects_after_a_restart() {
    let mut env = Env::new(&[("writer", &["report", "success", "ok"])]);
    env.start_daemon().await;
    let c = shim(&env).await;
    let id = delegate(&c, "writer").await;
    ok(&call(&c, "caesar_await", json!({"task_ids": [id]})).await);
    let first = env.daemon_pid().await;

    env.kill_daemons().await;
    env.start_daemon().await;
    assert_ne!(env.daemon_pid().await, first);
    let s = ok(&call(&c, "caesar_status", json!({"task_id": id})).await);
    assert_eq!(s["status"], "succeeded", "same shim, new daemon");

    // With no daemon at all, the next call starts one.
    env.kill_daemons().await;
    let started = Instant::now();
    let s = ok(&call(&c, "caesar_status", json!({"task_id": id})).await);
    assert_eq!(s["status"], "succeeded");
    assert!(started.elapsed() < Duration::from_secs(15));
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn workspace_comes_from_mcp_roots_and_a_mismatch_warns() {
    let mut env = Env::new(&[("writer", &["report", "success", "ok"])]);
    env.start_daemon().await;
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join(".caesar")).unwrap();
    std::fs::copy(env.project.path().join(".caesar/config.toml"), other.path().join(".caesar/config.toml")).unwrap();

    // No --root, started elsewhere: the client's root wins over the cwd.
    let mut cmd = tokio::process::Command::new(shim_bin());
    cmd.current_dir(other.path()).envs(env.envs());
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().unwrap();
    let handler = TestClient { roots: Some(vec![env.workspace()]), ..Default::default() };
    let c = handler.serve(transport).await.unwrap();
    let d = ok(&call(&c, "caesar_delegate", json!({"objective": "x", "agent": "writer"})).await);
    assert_eq!(d["workspace"], env.workspace());
    assert!(d.get("workspace_warning").is_none());

    let w = other.path().display().to_string();
    let d = ok(&call(&c, "caesar_delegate", json!({"objective": "x", "agent": "writer", "workspace": w})).await);
    assert_eq!(d["workspace"], w);
    let warning = d["workspace_warning"].as_str().unwrap();
    assert!(warning.contains(&env.workspace()), "{warning}");
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn the_python_mcp_sdk_drives_the_shim() {
    let mut env = Env::new(&[("writer", &["say", "hello", "report", "success", "python done"])]);
    env.start_daemon().await;
    let probe = std::process::Command::new("python3")
        .args(["-c", "import mcp, jsonschema"])
        .output()
        .expect("python3 must be installed");
    assert!(
        probe.status.success(),
        "the Python MCP SDK is missing: run `pip install mcp` ({})",
        String::from_utf8_lossy(&probe.stderr)
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/mcp_client_test.py");
    let out = tokio::process::Command::new("python3")
        .arg(&script)
        .envs(env.envs())
        .env("CAESAR_MCP_BIN", shim_bin())
        .env("CAESAR_TEST_WORKSPACE", env.workspace())
        .env("CAESAR_TEST_AGENT", "writer")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("python mcp client: ok"), "{stdout}");
}

#[tokio::test]
async fn describe_agent_gives_the_options_delegate_accepts() {
    let mut env = Env::new(&[("ok", &["report", "success", "ok"])]);
    env.start_daemon().await;
    // The shim as Claude Code starts it (issue 30: the recursion rule holds
    // where Claude Code is the caller).
    let root = env.workspace();
    let c = shim_with(&env, TestClient::default(), &["--root", &root], &[("CLAUDECODE", "1")]).await.0;
    let codex = ok(&call(&c, "caesar_describe_agent", json!({"agent": "codex"})).await);
    assert_eq!(codex["agent"]["id"], "codex");
    assert!(codex["options"]["effort"]["allowed"].as_array().unwrap().iter().any(|e| e == "high"));
    assert_eq!(codex["options"]["session_id"], true);
    let claude = ok(&call(&c, "caesar_describe_agent", json!({"agent": "claude"})).await);
    assert_eq!(claude["agent"]["policy"]["allowed"], false, "recursion is refused by default: {claude}");
    let generic = ok(&call(&c, "caesar_describe_agent", json!({"agent": "ok"})).await);
    assert_eq!(generic["agent"]["kind"], "generic");
    err(&call(&c, "caesar_describe_agent", json!({"agent": "nope"})).await, "not_found");
    let refused =
        err(&call(&c, "caesar_delegate", json!({"objective": "x", "agent": "claude"})).await, "policy_refused");
    assert!(refused.contains("allow_recursion"), "{refused}");
    err(&call(&c, "caesar_describe_agent", json!({"agent": " "})).await, "validation_error");
    c.cancel().await.unwrap();
}

/// A raw `initialize` over stdio, returning the negotiated protocol version.
fn negotiate(env: &Env, version: &str) -> String {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new(shim_bin())
        .envs(env.envs())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    writeln!(stdin, "{init}").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    json(&line)["result"]["protocolVersion"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn every_protocol_version_from_2024_11_05_to_2025_11_25_is_negotiated() {
    let env = Env::new(&[]);
    for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        assert_eq!(negotiate(&env, v), v, "the client's version is accepted");
    }
    // An unknown version gets one the server speaks, for the client to judge.
    let other = negotiate(&env, "1999-01-01");
    assert!(other.starts_with("20") && other != "1999-01-01", "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_shims_at_once_against_one_daemon() {
    let mut env = Env::new(&[("ok", &["report", "success", "ok"])]);
    env.start_daemon().await;
    let mut clients = Vec::new();
    for _ in 0..50 {
        clients.push(shim(&env).await);
    }
    let calls = clients.iter().map(|c| async move {
        let d = ok(&call(c, "caesar_delegate", json!({"objective": "x", "agent": "ok", "mode": "read-only"})).await);
        let id = d["task_id"].as_str().unwrap().to_owned();
        let a = ok(&call(c, "caesar_await", json!({"task_ids": [id.clone()], "timeout_ms": 60000})).await);
        a["tasks"][&id]["status"].as_str().unwrap().to_owned()
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert_eq!(statuses.len(), 50);
    assert!(statuses.iter().all(|s| s == "succeeded"), "{statuses:?}");
    for c in clients {
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn diff_and_apply_a_worktree_task_and_applying_twice_is_said() {
    let mut env = Env::new(&[("writer", &["write", "new.txt", "hello\n", "report", "success", "wrote"])]);
    let p = env.project.path().to_path_buf();
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
    env.start_daemon().await;
    let c = shim(&env).await;
    let d = ok(&call(&c, "caesar_delegate", json!({"objective": "write", "agent": "writer", "mode": "write"})).await);
    assert_eq!(d["isolation"], "worktree");
    let id = d["task_id"].as_str().unwrap().to_owned();
    let a = ok(&call(&c, "caesar_await", json!({"task_ids": [id.clone()], "timeout_ms": 60000})).await);
    assert_eq!(a["tasks"][&id]["report"]["changes_verified_by"], "git", "{a}");
    let diff = ok(&call(&c, "caesar_diff", json!({"task_id": id})).await);
    assert_eq!(diff["is_empty"], false);
    assert!(diff["patch"].as_str().unwrap().contains("+hello"), "{diff}");
    let applied = ok(&call(&c, "caesar_apply", json!({"task_id": id})).await);
    assert_eq!(applied["applied"], true, "{applied}");
    assert_eq!(std::fs::read_to_string(p.join("new.txt")).unwrap(), "hello\n");
    let again = ok(&call(&c, "caesar_apply", json!({"task_id": id})).await);
    assert_eq!(again["already_applied"], true, "{again}");
    c.cancel().await.unwrap();
}

/// Issue 31's bad input over MCP: each an `isError` result with its `code: message`, naming
/// what was wrong and the way on; nothing is started or stored by a refused call.
#[tokio::test]
async fn steer_continue_and_relay_bad_input_are_tool_errors() {
    let mut env = Env::new(&[("writer", &["report", "success", "ok"])]);
    let mut config = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    config.push_str("[[agent]]\nid = \"ghost\"\nbin = \"/nonexistent/ghost-agent\"\nargs = []\n");
    std::fs::write(env.project.path().join(".caesar/config.toml"), config).unwrap();
    let mut daemon = env.start_daemon().await;
    let c = shim(&env).await;

    let t = err(&call(&c, "caesar_steer", json!({"task_id": "t_000000000000", "text": "hi"})).await, "not_found");
    assert!(t.contains("t_000000000000"), "{t}");
    let big = "y".repeat(10 << 20);
    let t = err(&call(&c, "caesar_steer", json!({"task_id": "t_000000000000", "text": big})).await, "validation_error");
    assert!(t.contains("10485760 bytes"), "{t}");

    // A read-only task, ended: a steer points to continue; continuing it in write mode is refused.
    let d =
        ok(&call(&c, "caesar_delegate", json!({"objective": "look", "agent": "writer", "mode": "read-only"})).await);
    let id = d["task_id"].as_str().unwrap().to_owned();
    await_one(&mut daemon, &id, Duration::from_secs(60)).await;
    let t = err(&call(&c, "caesar_steer", json!({"task_id": id, "text": "also this"})).await, "conflict");
    assert!(t.contains("has ended") && t.contains("caesar continue"), "{t}");
    let cont = json!({"objective": "now write", "continue_from": id, "mode": "write"});
    let t = err(&call(&c, "caesar_delegate", cont).await, "validation_error");
    assert!(t.contains("ran read-only, so it cannot be continued in write mode"), "{t}");

    // A named next agent that is not installed: refused at delegation, naming it.
    let relay = json!({"objective": "x", "agent": "writer", "mode": "write", "relay_to": "ghost"});
    let t = err(&call(&c, "caesar_delegate", relay).await, "validation_error");
    assert!(t.contains("relay_to `ghost` could not take over") && t.contains("relay_to out"), "{t}");
    let ps = daemon
        .list_tasks(caesar_proto::pb::ListTasksRequest { limit: 50, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ps.tasks.len(), 1, "only the read-only task: {ps:?}");
    c.cancel().await.unwrap();
}

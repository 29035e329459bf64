//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`) served by
//! caesar-mcp under 2026-07-28, against a real daemon and a real agent
//! process: a `caesar_delegate` call answered with a task handle whose id is
//! the daemon's task id, `tasks/get` through working, input_required (the
//! agent's question as an elicitation) and completed, `tasks/update`
//! carrying the answer to the agent, `tasks/cancel`; and a host that does
//! not declare the extension still gets the plain result.

#![allow(clippy::unwrap_used)]

mod common;
mod raw_mcp;

use std::time::{Duration, Instant};

use caesar_proto::pb;
use common::*;
use raw_mcp::*;
use serde_json::{Value, json};

fn tasks_host(env: &Env) -> Raw {
    let mut r = Raw::spawn(env, &[]);
    r.capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    r
}

async fn get(shim: &mut Raw, id: &str) -> Value {
    let r = shim.request("tasks/get", json!({"taskId": id}), json!({})).await;
    assert!(r.get("error").is_none(), "tasks/get: {r}");
    r["result"].clone()
}

/// Polls `tasks/get` until its status is `status`.
async fn until(shim: &mut Raw, id: &str, status: &str) -> Value {
    let start = Instant::now();
    loop {
        let t = get(shim, id).await;
        if t["status"] == status {
            return t;
        }
        assert!(start.elapsed() < LIMIT, "task {id} never became {status}: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_delegation_is_a_task_polled_answered_and_completed_under_the_same_id() {
    let mut env = Env::new(&[("asker", &["mcp-ask", "keep going?", "report", "success", "asked and answered"])]);
    let mut c = env.start_daemon().await;
    let mut shim = tasks_host(&env);

    let d = shim.request("server/discover", json!({}), json!({})).await;
    assert!(d["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(), "{d}");

    let r = shim
        .call("caesar_delegate", json!({"objective": "ask first", "agent": "asker", "channel": true}), json!({}))
        .await;
    assert_eq!(r["resultType"], "task", "a task handle, not the result: {r}");
    let id = r["taskId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("t_"), "the daemon's own id: {r}");
    assert_eq!(r["status"], "working");
    // The same task, seen from the daemon.
    let view = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(view.agent, "asker");

    let t = until(&mut shim, &id, "input_required").await;
    let (question_id, request) = t["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{t}");
    assert_eq!(request["params"]["message"], "keep going?", "{t}");

    // A response to a question that is not pending is refused, naming it.
    let bad = shim
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"q_nope": {"action": "accept", "content": {"answer": "x"}}}}),
            json!({}),
        )
        .await;
    assert!(bad["error"]["message"].as_str().unwrap_or_default().contains("q_nope"), "{bad}");

    let ok_ack = shim
        .request(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {question_id: {"action": "accept", "content": {"answer": "yes"}}}}),
            json!({}),
        )
        .await;
    assert!(ok_ack.get("error").is_none(), "{ok_ack}");

    let done = until(&mut shim, &id, "completed").await;
    // The result is caesar_await's for this task.
    let result = &done["result"]["structuredContent"]["tasks"][&id];
    assert_eq!(result["status"], "succeeded", "{done}");
    assert_eq!(result["report"]["summary"], "asked and answered", "{done}");
    let logs = ok(&shim.call("caesar_logs", json!({"task_id": id, "limit": 100}), json!({})).await);
    assert!(logs.to_string().contains("ask_orchestrator: Answer: yes"), "the answer reached the agent: {logs}");

    // An unknown task id is the caller's error.
    let r = shim.request("tasks/get", json!({"taskId": "t_000000000000"}), json!({})).await;
    assert!(r["error"]["message"].as_str().unwrap_or_default().starts_with("not_found: "), "{r}");
}

#[tokio::test]
async fn tasks_cancel_stops_the_daemons_task_and_a_plain_host_keeps_the_plain_result() {
    let mut env = Env::new(&[("slow", &["sleep", "30000", "report", "success", "late"])]);
    env.start_daemon().await;
    let mut shim = tasks_host(&env);
    let r = shim.call("caesar_delegate", json!({"objective": "take long", "agent": "slow"}), json!({})).await;
    let id = r["taskId"].as_str().unwrap().to_owned();
    until(&mut shim, &id, "working").await;
    let ack = shim.request("tasks/cancel", json!({"taskId": id}), json!({})).await;
    assert!(ack.get("error").is_none(), "{ack}");
    until(&mut shim, &id, "cancelled").await;

    // A failed delegation stays an isError result, even for a tasks host.
    err(&shim.call("caesar_delegate", json!({"objective": "x", "agent": "nobody"}), json!({})).await, "not_found");

    // A host that does not declare the extension: the result, then caesar_await.
    let mut plain = Raw::spawn(&env, &[]);
    let d = ok(&plain.call("caesar_delegate", json!({"objective": "plain", "agent": "slow"}), json!({})).await);
    assert_eq!(d["status"], "running", "{d}");
    let r = plain.request("tasks/get", json!({"taskId": d["task_id"]}), json!({})).await;
    assert!(r["error"].is_object(), "tasks/* needs the extension declared: {r}");
    let status = ok(&plain.call("caesar_status", json!({"task_id": d["task_id"]}), json!({})).await);
    let cancelled = ok(&plain.call("caesar_cancel", json!({"task_id": d["task_id"]}), json!({})).await);
    assert_eq!(cancelled["cancelled"], true, "{cancelled} {status}");
}

/// The extension's task notifications over stdio: a `subscriptions/listen`
/// naming the task is acknowledged, tells of the task until it ends, and
/// ends with its result, all under the listen's subscription id.
#[tokio::test]
async fn over_stdio_subscriptions_listen_follows_a_task_until_it_ends() {
    let mut env = Env::new(&[("quick", &["sleep", "300", "report", "success", "followed"])]);
    env.start_daemon().await;
    let mut shim = tasks_host(&env);
    let r = shim.call("caesar_delegate", json!({"objective": "follow me", "agent": "quick"}), json!({})).await;
    let id = r["taskId"].as_str().unwrap().to_owned();

    let end = shim.request("subscriptions/listen", json!({"notifications": {"taskIds": [id]}}), json!({})).await;
    assert!(end.get("error").is_none(), "{end}");
    let sub = end["id"].clone();
    assert_eq!(end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], sub, "{end}");
    let notes: Vec<&Value> = shim
        .notifications
        .iter()
        .filter(|n| n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == sub)
        .collect();
    assert_eq!(
        notes.first().map(|n| &n["method"]),
        Some(&json!("notifications/subscriptions/acknowledged")),
        "{notes:?}"
    );
    let last = notes.last().unwrap();
    assert_eq!(
        (&last["method"], &last["params"]["status"]),
        (&json!("notifications/tasks"), &json!("completed")),
        "{last}"
    );
    assert_eq!(last["params"]["result"]["structuredContent"]["tasks"][&id]["report"]["summary"], "followed", "{last}");

    // Ids that are not a list are the caller's error, named.
    let r = shim.request("subscriptions/listen", json!({"notifications": {"taskIds": id}}), json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("`notifications.taskIds`"), "{r}");
}

// MCP 2025-11-25's experimental tasks: a host that negotiated that revision
// augments `tools/call` with `task` and gets `{"task": …}`, then polls
// `tasks/get`, waits on `tasks/result`, lists and cancels, over the same ids.

const LEGACY: &str = "2025-11-25";

/// A caesar-mcp session opened with `initialize` under 2025-11-25.
async fn legacy_host(env: &Env) -> (Raw, Value) {
    let mut r = Raw::spawn(env, &[]);
    let init = r
        .send(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "caesar-tests", "version": "0"}}),
        )
        .await;
    use tokio::io::AsyncWriteExt;
    r.stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await.unwrap();
    (r, init)
}

async fn legacy_get(shim: &mut Raw, id: &str) -> Value {
    let r = shim.send("tasks/get", json!({"taskId": id})).await;
    assert!(r.get("error").is_none(), "tasks/get: {r}");
    r["result"].clone()
}

async fn legacy_until(shim: &mut Raw, id: &str, status: &str) -> Value {
    let start = Instant::now();
    loop {
        let t = legacy_get(shim, id).await;
        if t["status"] == status {
            return t;
        }
        assert!(start.elapsed() < LIMIT, "task {id} never became {status}: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `notifications/tasks/status` seen so far for task `id`, by status.
fn status_notes(shim: &Raw, id: &str) -> Vec<String> {
    shim.notifications
        .iter()
        .filter(|n| n["method"] == "notifications/tasks/status" && n["params"]["taskId"] == id)
        .map(|n| n["params"]["status"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_2025_11_25_host_augments_a_delegation_with_a_task_polls_it_waits_for_its_result_lists_and_cancels() {
    let mut env = Env::new(&[
        ("asker", &["mcp-ask", "keep going?", "report", "success", "asked and answered"]),
        ("slow", &["sleep", "30000", "report", "success", "late"]),
    ]);
    let mut c = env.start_daemon().await;
    let (mut shim, init) = legacy_host(&env).await;
    assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
    let caps = &init["result"]["capabilities"];
    assert!(caps["tasks"]["requests"]["tools"]["call"].is_object(), "the revision's tasks capability: {init}");
    assert!(caps["tasks"]["list"].is_object() && caps["tasks"]["cancel"].is_object(), "{init}");

    let tools = shim.send("tools/list", json!({})).await;
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    let delegate = tools.iter().find(|t| t["name"] == "caesar_delegate").unwrap();
    assert_eq!(delegate["execution"]["taskSupport"], "optional", "{delegate}");
    let status_tool = tools.iter().find(|t| t["name"] == "caesar_status").unwrap();
    assert!(status_tool.get("execution").is_none(), "{status_tool}");

    let r = shim
        .send(
            "tools/call",
            json!({"name": "caesar_delegate", "arguments": {"objective": "ask first", "agent": "asker", "channel": true},
                   "task": {"ttl": 60000}}),
        )
        .await;
    let task = &r["result"]["task"];
    let id = task["taskId"].as_str().unwrap_or_else(|| panic!("a CreateTaskResult: {r}")).to_owned();
    assert!(id.starts_with("t_"), "the daemon's own id: {r}");
    // The agent may have asked already.
    let created_status = task["status"].as_str().unwrap_or_default().to_owned();
    assert!(created_status == "working" || created_status == "input_required", "{r}");
    assert!(task["createdAt"].is_string() && task["lastUpdatedAt"].is_string(), "{r}");
    assert_eq!(task["ttl"], 60000, "the ttl asked for: {r}");
    assert!(r["result"].get("content").is_none(), "a task, not the tool's result: {r}");
    let view = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(view.agent, "asker");

    // The question: input_required, answered with caesar_answer.
    let t = legacy_until(&mut shim, &id, "input_required").await;
    let question = view_question(&mut c, &id).await;
    assert!(t["statusMessage"].as_str().unwrap().contains(&question), "names the question to answer: {t}");
    // The host hears of the change too, while connected (unless the task had asked already when created).
    let start = Instant::now();
    while created_status == "working" && !status_notes(&shim, &id).contains(&"input_required".to_owned()) {
        assert!(start.elapsed() < LIMIT, "no input_required notification: {:?}", shim.notifications);
        tokio::time::sleep(Duration::from_millis(100)).await;
        legacy_get(&mut shim, &id).await;
    }
    let a = shim
        .send(
            "tools/call",
            json!({"name": "caesar_answer", "arguments": {"task_id": id, "question_id": question, "answer": "yes"}}),
        )
        .await;
    assert_ne!(a["result"]["isError"], json!(true), "{a}");

    // tasks/result waits for the end and is caesar_await's result for the task.
    let done = shim.send("tasks/result", json!({"taskId": id})).await;
    let result = &done["result"];
    assert_eq!(result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str(), "{done}");
    assert_eq!(result["structuredContent"]["tasks"][&id]["status"], "succeeded", "{done}");
    assert_eq!(result["structuredContent"]["tasks"][&id]["report"]["summary"], "asked and answered", "{done}");
    assert!(result.get("resultType").is_none(), "no 2026-07-28 discriminator on this revision: {done}");
    let t = legacy_until(&mut shim, &id, "completed").await;
    assert!(t.get("pollInterval").is_none(), "{t}");

    // The status notifications the host got while connected.
    let start = Instant::now();
    while !status_notes(&shim, &id).contains(&"completed".to_owned()) {
        assert!(start.elapsed() < LIMIT, "no completed notification: {:?}", shim.notifications);
        tokio::time::sleep(Duration::from_millis(100)).await;
        legacy_get(&mut shim, &id).await;
    }

    // tasks/list: the daemon's tasks, this one among them.
    let list = shim.send("tasks/list", json!({})).await;
    let listed = list["result"]["tasks"].as_array().unwrap_or_else(|| panic!("{list}"));
    assert!(listed.iter().any(|t| t["taskId"] == id.as_str() && t["status"] == "completed"), "{list}");

    // Cancelling an ended task is the caller's error; a running one is cancelled.
    let r = shim.send("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("already completed"), "{r}");
    let r = shim
        .send(
            "tools/call",
            json!({"name": "caesar_delegate", "arguments": {"objective": "take long", "agent": "slow"}, "task": {}}),
        )
        .await;
    let slow = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
    legacy_until(&mut shim, &slow, "working").await;
    let r = shim.send("tasks/cancel", json!({"taskId": slow})).await;
    assert_eq!(r["result"]["taskId"], slow.as_str(), "a Task back: {r}");
    legacy_until(&mut shim, &slow, "cancelled").await;
    let v = c.status(pb::StatusRequest { task_id: slow.clone() }).await.unwrap().into_inner();
    assert_eq!(v.status().as_str(), "cancelled", "the daemon's task is cancelled");

    // Bad requests: an unknown id, a tool that does not run as a task.
    let r = shim.send("tasks/get", json!({"taskId": "t_000000000000"})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().starts_with("not_found: "), "{r}");
    let r = shim.send("tools/call", json!({"name": "caesar_status", "arguments": {"task_id": id}, "task": {}})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("only caesar_delegate"), "{r}");

    // The same host without `task`: the plain result, and caesar_await.
    let r = shim
        .send("tools/call", json!({"name": "caesar_delegate", "arguments": {"objective": "plain", "agent": "asker"}}))
        .await;
    let d = ok(&r["result"]);
    assert_eq!(d["status"], "running", "{d}");
    let aw = shim
        .send(
            "tools/call",
            json!({"name": "caesar_await", "arguments": {"task_ids": [d["task_id"]], "timeout_ms": 300}}),
        )
        .await;
    assert!(ok(&aw["result"])["tasks"][d["task_id"].as_str().unwrap()].is_object(), "{aw}");
}

/// The pending question id of task `id`, from the daemon.
async fn view_question(c: &mut caesar_proto::client::Client, id: &str) -> String {
    let v = c.status(pb::StatusRequest { task_id: id.to_owned() }).await.unwrap().into_inner();
    v.pending_questions.first().map(|q| q.question_id.clone()).unwrap_or_else(|| panic!("no question: {v:?}"))
}

/// One raw HTTP/1.1 POST of a 2025-11-25 JSON-RPC request; returns the answer to `id`.
fn post_legacy(port: u16, token: &str, id: u64, method: &str, params: Value) -> Value {
    use std::io::{Read, Write};
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nMCP-Protocol-Version: {LEGACY}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    body.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["id"] == json!(id))
        .unwrap_or_else(|| panic!("no answer {id} to {method}: {out}"))
}

#[tokio::test]
async fn the_http_endpoint_serves_the_2025_11_25_tasks_over_the_daemons_ids() {
    let mut env = Env::new(&[
        ("quick", &["sleep", "800", "report", "success", "over http"]),
        ("slow", &["sleep", "30000", "report", "success", "late"]),
    ]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        .unwrap();
    let mut c = env.start_daemon().await;
    let token = c.http_token(pb::HttpTokenRequest { rotate: false, readonly: false }).await.unwrap().into_inner().token;
    assert!(eventually(LIMIT, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await);

    let init = post_legacy(
        port,
        &token,
        1,
        "initialize",
        json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
    );
    assert!(init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(), "{init}");

    let ws = env.workspace();
    let r = post_legacy(
        port,
        &token,
        2,
        "tools/call",
        json!({"name": "caesar_delegate", "arguments": {"objective": "go", "agent": "quick", "workspace": ws}, "task": {"ttl": 600000}}),
    );
    let id = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
    assert_eq!(r["result"]["task"]["ttl"], 600000, "{r}");
    let v = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(v.agent, "quick");
    let t = post_legacy(port, &token, 3, "tasks/get", json!({"taskId": id}));
    assert!(t["result"]["status"] == "working" || t["result"]["status"] == "completed", "{t}");

    let done = post_legacy(port, &token, 4, "tasks/result", json!({"taskId": id}));
    assert_eq!(done["result"]["structuredContent"]["tasks"][&id]["report"]["summary"], "over http", "{done}");
    assert_eq!(done["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
    assert_eq!(post_legacy(port, &token, 5, "tasks/get", json!({"taskId": id}))["result"]["status"], "completed");
    let list = post_legacy(port, &token, 6, "tasks/list", json!({}));
    assert!(list["result"]["tasks"].as_array().unwrap().iter().any(|t| t["taskId"] == id.as_str()), "{list}");

    let r = post_legacy(
        port,
        &token,
        7,
        "tools/call",
        json!({"name": "caesar_delegate", "arguments": {"objective": "long", "agent": "slow", "workspace": ws}, "task": {}}),
    );
    let slow = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
    let r = post_legacy(port, &token, 8, "tasks/cancel", json!({"taskId": slow}));
    assert_eq!(r["result"]["taskId"], slow.as_str(), "{r}");
    assert!(
        eventually(LIMIT, || {
            post_legacy(port, &token, 9, "tasks/get", json!({"taskId": slow}))["result"]["status"] == "cancelled"
        })
        .await
    );
    let r = post_legacy(port, &token, 10, "tasks/get", json!({"taskId": "t_000000000000"}));
    assert!(r["error"]["message"].as_str().unwrap_or_default().starts_with("not_found: "), "{r}");
}

// Round 3 of issue 18: tasks/list pages, the requested ttl, and the
// elicitation tasks/result sends a 2025-11-25 host that declared it.

/// A 2025-11-25 session whose `initialize` declares `capabilities`.
async fn legacy_host_with(env: &Env, extra: &[(&str, &str)], capabilities: Value) -> Raw {
    let mut r = Raw::spawn(env, extra);
    let init = r
        .send(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": capabilities, "clientInfo": {"name": "caesar-tests", "version": "0"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
    r.write(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    r
}

/// A task-augmented caesar_delegate; the `task` answered.
async fn legacy_delegate(shim: &mut Raw, args: Value, task: Value) -> Value {
    let r = shim.send("tools/call", json!({"name": "caesar_delegate", "arguments": args, "task": task})).await;
    assert!(r["result"]["task"]["taskId"].is_string(), "a CreateTaskResult: {r}");
    r["result"]["task"].clone()
}

#[tokio::test]
async fn tasks_list_pages_through_every_task_once_with_an_opaque_cursor() {
    let mut env = Env::new(&[("quick", &["report", "success", "quick"])]);
    env.start_daemon().await;
    let mut shim = legacy_host_with(&env, &[("CAESAR_MCP_TASKS_PAGE", "3")], json!({})).await;
    let mut made = Vec::new();
    for i in 0..7 {
        let t =
            legacy_delegate(&mut shim, json!({"objective": format!("number {i}"), "agent": "quick"}), json!({})).await;
        made.push(t["taskId"].as_str().unwrap().to_owned());
    }

    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<Value> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = shim.send("tasks/list", params).await;
        let page = r["result"]["tasks"].as_array().unwrap_or_else(|| panic!("{r}")).clone();
        assert!(page.len() <= 3, "a page holds at most CAESAR_MCP_TASKS_PAGE tasks: {r}");
        assert!(page.iter().all(|t| t["createdAt"].is_string() && t["status"].is_string()), "{r}");
        seen.extend(page.iter().map(|t| t["taskId"].as_str().unwrap().to_owned()));
        pages += 1;
        match r["result"].get("nextCursor") {
            Some(c) => cursor = Some(c.clone()),
            None => break,
        }
        assert!(pages < 10, "the cursor must end: {seen:?}");
    }
    assert_eq!(pages, 3, "7 tasks in pages of 3: {seen:?}");
    // Every task once, newest first.
    made.reverse();
    assert_eq!(seen, made);

    // A cursor caesar did not give is the caller's error.
    let r = shim.send("tasks/list", json!({"cursor": "page-2"})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("`cursor`"), "{r}");
    let r = shim.send("tasks/list", json!({"cursor": 2})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[tokio::test]
async fn the_requested_ttl_is_the_handles_and_once_it_passes_the_handle_expires_while_caesar_keeps_the_task() {
    let mut env = Env::new(&[("quick", &["report", "success", "kept"])]);
    let mut c = env.start_daemon().await;
    let mut shim = legacy_host_with(&env, &[], json!({})).await;

    let short = legacy_delegate(&mut shim, json!({"objective": "brief", "agent": "quick"}), json!({"ttl": 1500})).await;
    assert_eq!(short["ttl"], 1500, "the chosen ttl is the one asked: {short}");
    let id = short["taskId"].as_str().unwrap().to_owned();
    let tiny = legacy_delegate(&mut shim, json!({"objective": "tiny", "agent": "quick"}), json!({"ttl": 0})).await;
    assert_eq!(tiny["ttl"], 1000, "raised to the shortest ttl caesar gives: {tiny}");
    let kept = legacy_delegate(&mut shim, json!({"objective": "kept", "agent": "quick"}), json!({})).await;
    assert!(kept["ttl"].is_null(), "none asked: unlimited, caesar keeps its tasks: {kept}");
    let kept_id = kept["taskId"].as_str().unwrap().to_owned();
    let long = legacy_delegate(&mut shim, json!({"objective": "long", "agent": "quick"}), json!({"ttl": 600000})).await;
    let long_id = long["taskId"].as_str().unwrap().to_owned();
    let r = shim
        .send("tools/call", json!({"name": "caesar_delegate", "arguments": {"objective": "x", "agent": "quick"}, "task": {"ttl": "soon"}}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("`task.ttl`"), "{r}");

    // Within its ttl a handle answers, with its ttl (a long one, so a slow machine cannot make this late).
    let t = shim.send("tasks/get", json!({"taskId": long_id})).await;
    assert_eq!(t["result"]["ttl"], 600000, "{t}");

    // Once the short one's ttl from creation has passed: expired for MCP (get, result, cancel; left out of the list)...
    tokio::time::sleep(Duration::from_millis(1700)).await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = shim.send(method, json!({"taskId": id})).await;
        assert_eq!(r["error"]["code"], -32602, "{method}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains("has expired") && message.contains("caesar_status"), "{method}: {r}");
    }
    let list = shim.send("tasks/list", json!({})).await;
    let listed: Vec<&str> =
        list["result"]["tasks"].as_array().unwrap().iter().filter_map(|t| t["taskId"].as_str()).collect();
    assert!(
        !listed.contains(&id.as_str()) && listed.contains(&kept_id.as_str()) && listed.contains(&long_id.as_str()),
        "{list}"
    );
    // ...while caesar keeps the task, its report and its record.
    let status = ok(&shim.call_legacy("caesar_status", json!({"task_id": id})).await);
    assert_eq!(status["task_id"], id.as_str(), "{status}");
    let v = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(v.mcp_expired && v.mcp_ttl_ms == Some(1500), "{v:?}");
    let t = shim.send("tasks/get", json!({"taskId": kept_id})).await;
    assert!(t["result"]["taskId"] == kept_id.as_str() && t["result"]["ttl"].is_null(), "{t}");

    // The same handles under 2026-07-28 (the extension's tasks/get): the same ttl, the same expiry.
    let mut modern = tasks_host(&env);
    let r = modern.request("tasks/get", json!({"taskId": id}), json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("has expired"), "{r}");
    assert_eq!(get(&mut modern, &long_id).await["ttlMs"], 600000);
    assert!(get(&mut modern, &kept_id).await["ttlMs"].is_null());
}

#[tokio::test]
async fn tasks_result_asks_a_hosts_elicitation_for_the_agents_question_and_delivers_the_answer() {
    let mut env = Env::new(&[("asker", &["mcp-ask", "keep going?", "report", "success", "asked and answered"])]);
    env.start_daemon().await;
    let mut shim = legacy_host_with(&env, &[], json!({"elicitation": {"form": {}}})).await;
    let task = legacy_delegate(
        &mut shim,
        json!({"objective": "ask first", "agent": "asker", "channel": true}),
        json!({"ttl": 600000}),
    )
    .await;
    let id = task["taskId"].as_str().unwrap().to_owned();

    shim.write(json!({"jsonrpc": "2.0", "id": 900, "method": "tasks/result", "params": {"taskId": id}})).await;
    let mut statuses = Vec::new();
    let mut elicited = 0;
    let done = loop {
        let m = shim.next_message().await;
        if m["id"] == 900 {
            break m;
        }
        if m["method"] == "notifications/tasks/status" && m["params"]["taskId"] == id.as_str() {
            statuses.push(m["params"]["status"].as_str().unwrap().to_owned());
        }
        if m["method"] == "elicitation/create" {
            elicited += 1;
            let p = &m["params"];
            assert_eq!(p["message"], "keep going?", "{m}");
            assert_eq!(p["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str(), "{m}");
            assert_eq!(p["requestedSchema"]["required"], json!(["answer"]), "{m}");
            shim.write(
                json!({"jsonrpc": "2.0", "id": m["id"], "result": {"action": "accept", "content": {"answer": "yes"}}}),
            )
            .await;
        }
    };
    assert_eq!(elicited, 1, "one elicitation for the one question: {statuses:?}");
    let result = &done["result"];
    assert_eq!(result["structuredContent"]["tasks"][&id]["report"]["summary"], "asked and answered", "{done}");
    assert!(task["status"] == "input_required" || statuses.contains(&"input_required".to_owned()), "{statuses:?}");
    assert_eq!(statuses.last().map(String::as_str), Some("completed"), "{statuses:?}");
    let mut deduped = statuses.clone();
    deduped.dedup();
    assert_eq!(deduped, statuses, "each change told once: {statuses:?}");
    let logs = ok(&shim.call_legacy("caesar_logs", json!({"task_id": id, "limit": 100})).await);
    assert!(logs.to_string().contains("ask_orchestrator: Answer: yes"), "the answer reached the agent: {logs}");
}

#[tokio::test]
async fn over_http_tasks_result_streams_the_status_notifications_before_the_result() {
    let mut env = Env::new(&[("asker", &["mcp-ask", "keep going?", "report", "success", "answered over http"])]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        .unwrap();
    let mut c = env.start_daemon().await;
    let token = c.http_token(pb::HttpTokenRequest { rotate: false, readonly: false }).await.unwrap().into_inner().token;
    assert!(eventually(LIMIT, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await);

    let args = json!({"objective": "ask", "agent": "asker", "channel": true, "workspace": env.workspace()});
    let r =
        post_legacy(port, &token, 1, "tools/call", json!({"name": "caesar_delegate", "arguments": args, "task": {}}));
    let id = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();

    // tasks/result holds its response stream open until the end, telling each change meanwhile:
    // the question is answered once that stream said the task waits on it.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/result", "params": {"taskId": id}}).to_string();
    let mut stream =
        Streamed::post(port, &format!("Authorization: Bearer {token}\r\nMCP-Protocol-Version: {LEGACY}\r\n"), body);
    let mut messages = Vec::new();
    while let Some(m) = stream.next().await {
        if m["method"] == "notifications/tasks/status" && m["params"]["status"] == "input_required" {
            let question = view_question(&mut c, &id).await;
            c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: question, answer: "yes".into() })
                .await
                .unwrap();
        }
        let end = m["id"] == 2;
        messages.push(m);
        if end {
            break;
        }
    }
    let statuses: Vec<&str> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/tasks/status")
        .map(|m| {
            assert_eq!(m["params"]["taskId"], id.as_str(), "{m}");
            assert!(m["params"]["createdAt"].is_string(), "the full Task: {m}");
            m["params"]["status"].as_str().unwrap()
        })
        .collect();
    assert!(statuses.contains(&"input_required"), "{messages:?}");
    assert_eq!(statuses.last(), Some(&"completed"), "{messages:?}");
    let last = messages.last().unwrap();
    assert_eq!(last["id"], 2, "the result comes last: {messages:?}");
    assert_eq!(last["result"]["structuredContent"]["tasks"][&id]["report"]["summary"], "answered over http", "{last}");
}

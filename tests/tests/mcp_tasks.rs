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

//! MCP 2025-11-25's experimental tasks over caesar's own tasks, for hosts
//! that negotiate that revision (rmcp 3.x serves only the 2026-07-28 Tasks
//! extension, [`crate::tasks`]).
//!
//! A `tools/call` of `caesar_delegate` carrying the revision's `task` param
//! (renamed by [`crate::legacy_wire`], as the other task requests are, so
//! rmcp hands them over whole as custom requests) is answered with a
//! `CreateTaskResult` (`{"task": {…}}`) whose `taskId` is the daemon's task
//! id; `tasks/get` and `tasks/cancel` answer a `Task`, `tasks/result` waits
//! for the task to end and answers `caesar_await`'s result for it (with the
//! `related-task` metadata), `tasks/list` lists the daemon's recent tasks,
//! and while the host stays connected it gets `notifications/tasks/status`
//! on every status change. Status: pending or running is `working`, a
//! pending question `input_required` (answered with `caesar_answer`: this
//! server sends no elicitation requests), succeeded `completed`, cancelled
//! `cancelled`, any other end `failed`.

use std::time::Duration;

use caesar_proto::pb;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, CustomNotification, ServerNotification};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::legacy_wire::PREFIX;
use crate::server::Shim;
use crate::tools;

/// How often a host should poll, and how often the status watcher looks.
const POLL_MS: u64 = 1000;
const WATCH: Duration = Duration::from_millis(300);
/// How many tasks `tasks/list` lists (the daemon's newest).
const LIST_LIMIT: u32 = 100;

/// Answers a renamed 2025-11-25 request (`method` under [`PREFIX`]); `None`
/// when `method` is not one.
pub async fn handle(
    shim: &Shim,
    method: &str,
    params: Option<Value>,
    ctx: RequestContext<RoleServer>,
) -> Option<Result<Value, McpError>> {
    let method = method.strip_prefix(PREFIX)?;
    Some(match method {
        "tools/call" => create(shim, params, ctx).await,
        "tasks/get" => match task_id_param(params.as_ref()) {
            Ok(id) => crate::tasks::view(shim.daemon(), &id).await.map(|v| task_json(&v)),
            Err(e) => Err(e),
        },
        "tasks/cancel" => match task_id_param(params.as_ref()) {
            Ok(id) => cancel(shim, &id).await,
            Err(e) => Err(e),
        },
        "tasks/result" => match task_id_param(params.as_ref()) {
            Ok(id) => result(shim, &id, &ctx).await,
            Err(e) => Err(e),
        },
        "tasks/list" => list(shim).await,
        other => Err(McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, other.to_owned(), None)),
    })
}

fn task_id_param(params: Option<&Value>) -> Result<String, McpError> {
    params
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| McpError::invalid_params("validation_error: `taskId` is missing: name the task", None))
}

/// The revision's status of a daemon task.
pub fn status_of(v: &pb::TaskView) -> &'static str {
    match v.status.as_str() {
        "pending" | "running" if !v.pending_questions.is_empty() => "input_required",
        "pending" | "running" => "working",
        "succeeded" => "completed",
        "cancelled" => "cancelled",
        _ => "failed",
    }
}

fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// A daemon task as the revision's `Task`.
pub fn task_json(v: &pb::TaskView) -> Value {
    let status = status_of(v);
    let created = if v.created_at.is_empty() { now() } else { v.created_at.clone() };
    let updated =
        [&v.finished_at, &v.started_at].into_iter().find(|t| !t.is_empty()).cloned().unwrap_or(created.clone());
    let message = match status {
        "input_required" => {
            let q = &v.pending_questions[0];
            format!(
                "the agent asks `{}` ({}): answer with caesar_answer {{task_id: {}, question_id: {}}}",
                q.question, q.question_id, v.task_id, q.question_id
            )
        }
        "working" if v.status == "pending" => "queued: the agent waits its turn".to_owned(),
        "working" => format!("running ({} events)", v.event_count),
        _ if v.report_status.is_empty() => v.status.clone(),
        _ => format!("{}, report {}", v.status, v.report_status),
    };
    let mut t = json!({
        "taskId": v.task_id,
        "status": status,
        "statusMessage": message,
        "createdAt": created,
        "lastUpdatedAt": updated,
        // The daemon keeps its tasks: no expiry.
        "ttl": null,
    });
    if !terminal(status) {
        t["pollInterval"] = json!(POLL_MS);
    }
    t
}

fn now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    caesar_proto::civil::rfc3339_seconds(secs as i64)
}

/// `tools/call` with `task`: delegate, answer the task, watch it.
async fn create(shim: &Shim, params: Option<Value>, ctx: RequestContext<RoleServer>) -> Result<Value, McpError> {
    let mut params = params.unwrap_or_else(|| json!({}));
    if let Some(o) = params.as_object_mut() {
        o.remove("task");
    }
    let p: CallToolRequestParams = serde_json::from_value(params)
        .map_err(|e| McpError::invalid_params(format!("validation_error: bad tools/call params: {e}"), None))?;
    if p.name != tools::DELEGATE {
        return Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "`{}` does not run as a task: only caesar_delegate has taskSupport; call it without `task`",
                p.name
            ),
            None,
        ));
    }
    let peer = ctx.peer.clone();
    let result = match shim.call_tool(p, ctx).await? {
        CallToolResponse::Complete(r) => r,
        // Only a host declaring the 2026-07-28 extension gets that handle.
        other => {
            return serde_json::to_value(rmcp::model::ServerResult::from(other))
                .map_err(|e| McpError::internal_error(e.to_string(), None));
        }
    };
    let id = result.structured_content.as_ref().and_then(|s| s.get("task_id")).and_then(Value::as_str);
    let Some(id) = id.filter(|_| result.is_error != Some(true)).map(str::to_owned) else {
        // A delegation that made no task stays its isError result.
        return plain(&result);
    };
    let v = crate::tasks::view(shim.daemon(), &id).await?;
    let task = task_json(&v);
    let first = task["status"].as_str().unwrap_or_default().to_owned();
    let watcher = shim.clone();
    tokio::spawn(async move { watch(watcher, peer, id, first).await });
    Ok(json!({ "task": task }))
}

/// A tool result as this revision writes it (no 2026-07-28 discriminator).
fn plain(r: &CallToolResult) -> Result<Value, McpError> {
    let mut out = serde_json::to_value(r).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    if let Some(o) = out.as_object_mut() {
        o.remove("resultType");
    }
    Ok(out)
}

async fn cancel(shim: &Shim, id: &str) -> Result<Value, McpError> {
    let v = crate::tasks::view(shim.daemon(), id).await?;
    let status = status_of(&v);
    if terminal(status) {
        return Err(McpError::invalid_params(
            format!("validation_error: cannot cancel task {id}: it is already {status}"),
            None,
        ));
    }
    crate::tasks::cancel(shim.daemon(), id).await?;
    Ok(task_json(&crate::tasks::view(shim.daemon(), id).await?))
}

/// `tasks/result`: waits for the end, then answers caesar_await's result.
async fn result(shim: &Shim, id: &str, ctx: &RequestContext<RoleServer>) -> Result<Value, McpError> {
    loop {
        let v = crate::tasks::view(shim.daemon(), id).await?;
        if crate::tasks::ended(&v) {
            let args = json!({"task_ids": [v.task_id], "timeout_ms": 1000});
            let r = shim.dispatch(tools::AWAIT, args, ctx).await.unwrap_or_else(|e| e.into_result());
            let mut out = plain(&r)?;
            out["_meta"]["io.modelcontextprotocol/related-task"] = json!({"taskId": v.task_id});
            return Ok(out);
        }
        tokio::select! {
            _ = ctx.ct.cancelled() => {
                return Err(McpError::internal_error("internal_error: tasks/result was cancelled", None));
            }
            _ = tokio::time::sleep(WATCH) => {}
        }
    }
}

async fn list(shim: &Shim) -> Result<Value, McpError> {
    let req = pb::ListTasksRequest { statuses: Vec::new(), limit: LIST_LIMIT };
    let r = shim
        .daemon()
        .call(move |mut c| {
            let req = req.clone();
            async move { c.list_tasks(req).await }
        })
        .await
        .map_err(|e| McpError::internal_error(format!("{}: {}", e.code.as_str(), e.message), None))?;
    Ok(json!({ "tasks": r.tasks.iter().map(task_json).collect::<Vec<_>>() }))
}

/// Sends `notifications/tasks/status` on each status change until the task
/// ends or the host is gone.
async fn watch(shim: Shim, peer: rmcp::service::Peer<RoleServer>, id: String, mut last: String) {
    loop {
        tokio::time::sleep(WATCH).await;
        let Ok(v) = crate::tasks::view(shim.daemon(), &id).await else { return };
        let t = task_json(&v);
        let status = t["status"].as_str().unwrap_or_default().to_owned();
        if status != last {
            let n = CustomNotification::new("notifications/tasks/status", Some(t));
            if peer.send_notification(ServerNotification::CustomNotification(n)).await.is_err() {
                return;
            }
            last = status;
        }
        if terminal(&last) {
            return;
        }
    }
}

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
//! `related-task` metadata; [`crate::legacy_result`]), `tasks/list` pages
//! through the daemon's tasks, newest first (an opaque `nextCursor` while
//! more remain; the store reads one page per request), and while the host
//! stays connected it gets `notifications/tasks/status` on every status
//! change. Status: pending or running is `working`, a pending question
//! `input_required` (answered with `caesar_answer`, or through the
//! elicitation `tasks/result` sends a host that declared elicitation),
//! succeeded `completed`, cancelled `cancelled`, any other end `failed`.
//!
//! `task.ttl`: the handle gets the ttl asked for (at least 1 s), stored in
//! the daemon before the answer and reported as `ttl` in every `Task`; none
//! asked is `ttl: null` (unlimited: caesar keeps its tasks, gc removes only
//! finished worktrees). Once the ttl from creation has passed, the MCP
//! handle is expired: `tasks/get|result|cancel` answer -32602 saying so and
//! `tasks/list` leaves it out, while the daemon keeps the task itself
//! (`caesar_status`, `caesar status`) as it keeps every task: nothing of
//! the user's is deleted early.
//!
//! The design beside its neighbours: `docs/design/mcp.md`.

use std::time::Duration;

use caesar_proto::pb;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::legacy_result::{self, notify};
use crate::legacy_wire::PREFIX;
use crate::server::Shim;
use crate::tools;

/// How often a host should poll, and how often the status watcher looks.
const POLL_MS: u64 = 1000;
const WATCH: Duration = Duration::from_millis(300);
/// How many tasks one `tasks/list` page holds, unless
/// `CAESAR_MCP_TASKS_PAGE` (1..=1000) says otherwise.
const PAGE: u32 = 50;

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
            Ok(id) => live_view(shim, &id).await.map(|v| task_json(&v)),
            Err(e) => Err(e),
        },
        "tasks/cancel" => match task_id_param(params.as_ref()) {
            Ok(id) => cancel(shim, &id).await,
            Err(e) => Err(e),
        },
        "tasks/result" => match task_id_param(params.as_ref()) {
            Ok(id) => legacy_result::result(shim, &id, &ctx).await,
            Err(e) => Err(e),
        },
        "tasks/list" => list(shim, params.as_ref()).await,
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

pub(crate) fn terminal(status: &str) -> bool {
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
        // The ttl the host asked for, as chosen; none is unlimited (the daemon keeps its tasks).
        "ttl": v.mcp_ttl_ms,
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

/// The daemon's view of task `id`, refused as the revision says once its
/// MCP handle's ttl has passed.
pub(crate) async fn live_view(shim: &Shim, id: &str) -> Result<pb::TaskView, McpError> {
    let v = crate::tasks::view(shim.daemon(), id).await?;
    if v.mcp_expired {
        return Err(McpError::invalid_params(
            format!(
                "not_found: task {id} has expired: its ttl of {} ms from creation has passed, so its MCP task is gone; \
                 caesar keeps the task itself: caesar_status {{task_id: {id}}} (or `caesar status {id}`) shows it",
                v.mcp_ttl_ms.unwrap_or_default()
            ),
            None,
        ));
    }
    Ok(v)
}

/// The `task.ttl` a request asked for: `None` when absent or null.
fn requested_ttl(task: Option<&Value>) -> Result<Option<u64>, McpError> {
    match task.and_then(|t| t.get("ttl")) {
        None | Some(Value::Null) => Ok(None),
        Some(t) => t.as_u64().map(Some).ok_or_else(|| {
            McpError::invalid_params(
                format!("validation_error: `task.ttl` is {t}: give whole milliseconds (e.g. 60000), or leave it out"),
                None,
            )
        }),
    }
}

/// `tools/call` with `task`: delegate, answer the task, watch it.
async fn create(shim: &Shim, params: Option<Value>, ctx: RequestContext<RoleServer>) -> Result<Value, McpError> {
    let mut params = params.unwrap_or_else(|| json!({}));
    let task = params.as_object_mut().and_then(|o| o.remove("task"));
    let ttl = requested_ttl(task.as_ref())?;
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
    if let Some(ttl) = ttl {
        // Stored before the handle is answered, so every later request sees it.
        let req = pb::SetMcpTaskTtlRequest { task_id: id.clone(), ttl_ms: ttl };
        shim.daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.set_mcp_task_ttl(req).await }
            })
            .await
            .map_err(crate::tasks::protocol)?;
    }
    let v = crate::tasks::view(shim.daemon(), &id).await?;
    let task = task_json(&v);
    shim.told().status_changed(&id, task["status"].as_str().unwrap_or_default());
    let watcher = shim.clone();
    tokio::spawn(async move { watch(watcher, peer, id).await });
    Ok(json!({ "task": task }))
}

/// A tool result as this revision writes it (no 2026-07-28 discriminator).
pub(crate) fn plain(r: &CallToolResult) -> Result<Value, McpError> {
    let mut out = serde_json::to_value(r).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    if let Some(o) = out.as_object_mut() {
        o.remove("resultType");
    }
    Ok(out)
}

async fn cancel(shim: &Shim, id: &str) -> Result<Value, McpError> {
    let v = live_view(shim, id).await?;
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

/// The `tasks/list` page size.
fn page_size() -> u32 {
    std::env::var("CAESAR_MCP_TASKS_PAGE").ok().and_then(|p| p.parse::<u32>().ok()).unwrap_or(PAGE).clamp(1, 1000)
}

/// `tasks/list`: one page of the daemon's tasks, newest first; expired
/// handles are left out (so a page may be short), `nextCursor` while more remain.
async fn list(shim: &Shim, params: Option<&Value>) -> Result<Value, McpError> {
    let cursor = match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return Err(McpError::invalid_params(
                format!("validation_error: `cursor` is {other}: pass the nextCursor string of the previous page"),
                None,
            ));
        }
    };
    let req = pb::ListTasksPageRequest { limit: page_size(), cursor };
    let r = shim
        .daemon()
        .call(move |mut c| {
            let req = req.clone();
            async move { c.list_tasks_page(req).await }
        })
        .await
        .map_err(crate::tasks::protocol)?;
    let tasks: Vec<Value> = r.tasks.iter().filter(|v| !v.mcp_expired).map(task_json).collect();
    let mut out = json!({ "tasks": tasks });
    if !r.next_cursor.is_empty() {
        out["nextCursor"] = json!(r.next_cursor);
    }
    Ok(out)
}

/// Sends `notifications/tasks/status` on each status change until the task
/// ends, its handle expires or the host is gone.
async fn watch(shim: Shim, peer: rmcp::service::Peer<RoleServer>, id: String) {
    loop {
        tokio::time::sleep(WATCH).await;
        let Ok(v) = live_view(&shim, &id).await else { return };
        let t = task_json(&v);
        if !notify(&shim, &peer, &t).await || terminal(t["status"].as_str().unwrap_or_default()) {
            return;
        }
    }
}

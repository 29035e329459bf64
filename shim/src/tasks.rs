//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over
//! caesar's own tasks.
//!
//! A host that declares the extension gets a task handle for a
//! `caesar_delegate` call instead of its result; the handle's `taskId` is
//! the daemon's task id, so `tasks/get`, `tasks/update` and `tasks/cancel`
//! (and every `caesar_*` tool) name the same task. `tasks/get` maps the
//! daemon's status: pending or running is `working`, a pending question is
//! `input_required` with one `elicitation/create` request per question
//! (keyed by its question id), an ended task is `completed` with
//! `caesar_status`'s result (a failed task is still a completed call; its
//! report says it failed), a cancelled one `cancelled`. `tasks/update`
//! carries the answers, `tasks/cancel` cancels. Hosts that declare nothing
//! keep the plain result and `caesar_await`.
//!
//! The design beside its neighbours: `docs/design/mcp.md`.

use caesar_proto::pb;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, InputResponses,
    Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::error::ToolError;

/// How often a host should poll `tasks/get`, in milliseconds.
const POLL_MS: u64 = 1000;

/// Whether this request's host declared the tasks extension.
pub fn wanted(context: &RequestContext<rmcp::RoleServer>) -> bool {
    context.client_capabilities().is_some_and(|c| c.supports_tasks())
}

/// A `caesar_delegate` result turned into a task handle; a failed delegation
/// (no task) stays the plain `isError` result.
pub fn handle(result: CallToolResult) -> CallToolResponse {
    let id =
        result.structured_content.as_ref().and_then(|s| s.get("task_id")).and_then(Value::as_str).map(str::to_owned);
    match (result.is_error, id) {
        (Some(true), _) | (_, None) => CallToolResponse::Complete(result),
        (_, Some(id)) => {
            let now = now();
            let task = Task::new(id, TaskStatus::Working, now.clone(), now)
                .with_poll_interval_ms(POLL_MS)
                .with_status_message("delegated: the agent starts, or waits its turn in the queue");
            CallToolResponse::Task(CreateTaskResult::new(task))
        }
    }
}

fn now() -> String {
    // RFC 3339, UTC, seconds: what the spec's ISO 8601 timestamps need.
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    caesar_proto::civil::rfc3339_seconds(secs as i64)
}

/// A daemon error as a protocol error (the caller's mistakes as invalid params).
pub(crate) fn protocol(e: ToolError) -> McpError {
    // An unknown task id is the caller's mistake: invalid params, with the code in the text.
    match e.code {
        crate::error::ErrorCode::NotFound | crate::error::ErrorCode::Validation => {
            McpError::invalid_params(format!("{}: {}", e.code.as_str(), e.message), None)
        }
        _ => McpError::internal_error(format!("{}: {}", e.code.as_str(), e.message), None),
    }
}

/// The daemon's view of task `id`.
pub async fn view(daemon: &Daemon, id: &str) -> Result<pb::TaskView, McpError> {
    let req = pb::StatusRequest { task_id: id.trim().to_owned() };
    daemon
        .call(move |mut c| {
            let req = req.clone();
            async move { c.status(req).await }
        })
        .await
        .map_err(protocol)
}

/// Whether the task has ended (its `tasks/get` then carries a result).
pub fn ended(v: &pb::TaskView) -> bool {
    !matches!(v.status.as_str(), "pending" | "running")
}

/// `tasks/get`: the daemon's task as a detailed MCP task. `completed`
/// carries `result` (the `caesar_await` result of the ended task, already shaped).
pub fn detail(v: pb::TaskView, result: Option<CallToolResult>) -> Result<GetTaskResult, McpError> {
    let status = result.unwrap_or_else(|| CallToolResult::success(Vec::new()));
    let created = if v.created_at.is_empty() { now() } else { v.created_at.clone() };
    let updated =
        [&v.finished_at, &v.started_at].into_iter().find(|t| !t.is_empty()).cloned().unwrap_or(created.clone());
    let payload = match v.status.as_str() {
        "pending" | "running" if !v.pending_questions.is_empty() => {
            TaskPayload::InputRequired { input_requests: questions(&v)? }
        }
        "pending" | "running" => TaskPayload::Working,
        "cancelled" => TaskPayload::Cancelled,
        _ => match serde_json::to_value(&status) {
            Ok(Value::Object(result)) => TaskPayload::Completed { result },
            _ => return Err(McpError::internal_error("the task's result did not serialize", None)),
        },
    };
    let message = match &payload {
        TaskPayload::InputRequired { .. } => "the agent asked a question: answer it with tasks/update".to_owned(),
        TaskPayload::Working => format!("{} ({} events)", v.status, v.event_count),
        _ => format!(
            "{}{}",
            v.status,
            if v.report_status.is_empty() { String::new() } else { format!(", report {}", v.report_status) }
        ),
    };
    let mut task = Task::new(v.task_id.clone(), payload.status(), created, updated).with_status_message(message);
    // A ttl a 2025-11-25 host asked for bounds the same handle here; none is unlimited.
    task.ttl_ms = v.mcp_ttl_ms;
    if !payload.status().is_terminal() {
        task = task.with_poll_interval_ms(POLL_MS);
    }
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// One `elicitation/create` per pending question, keyed by its question id.
fn questions(v: &pb::TaskView) -> Result<InputRequests, McpError> {
    let mut out = InputRequests::new();
    for q in &v.pending_questions {
        let mut answer = json!({"type": "string", "description": "The answer for the agent"});
        if !q.options.is_empty() {
            answer["enum"] = json!(q.options);
        }
        let request = json!({
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": q.question,
                "requestedSchema": {"type": "object", "properties": {"answer": answer}, "required": ["answer"]},
            }
        });
        let request = serde_json::from_value(request).map_err(|e| McpError::internal_error(e.to_string(), None))?;
        out.insert(q.question_id.clone(), request);
    }
    Ok(out)
}

/// `tasks/update`: each response answers the question of its key. An
/// elicitation result `{"action": "accept", "content": {"answer": "..."}}`
/// is the answer; a declined or cancelled one answers `declined`.
pub async fn update(daemon: &Daemon, id: &str, responses: InputResponses) -> Result<(), McpError> {
    let v = view(daemon, id).await?;
    for (question_id, response) in responses {
        if !v.pending_questions.iter().any(|q| q.question_id == question_id) {
            return Err(McpError::invalid_params(
                format!("validation_error: `{question_id}` is not a pending question of {id}: see tasks/get"),
                None,
            ));
        }
        let answer = match response.get("action").and_then(Value::as_str) {
            Some("accept") => match response.pointer("/content/answer") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => {
                    return Err(McpError::invalid_params(
                        format!("validation_error: the response to `{question_id}` has no content.answer"),
                        None,
                    ));
                }
            },
            Some(_) => "declined".to_owned(),
            None => {
                return Err(McpError::invalid_params(
                    format!(
                        "validation_error: the response to `{question_id}` is not an elicitation result (no action)"
                    ),
                    None,
                ));
            }
        };
        let req = pb::AnswerRequest { task_id: v.task_id.clone(), question_id, answer };
        daemon
            .call(move |mut c| {
                let req = req.clone();
                async move { c.answer(req).await }
            })
            .await
            .map_err(protocol)?;
    }
    Ok(())
}

/// `tasks/cancel`: the daemon cancels the task and its process tree.
pub async fn cancel(daemon: &Daemon, id: &str) -> Result<(), McpError> {
    let req = pb::CancelRequest { task_id: id.trim().to_owned() };
    daemon
        .call(move |mut c| {
            let req = req.clone();
            async move { c.cancel(req).await }
        })
        .await
        .map_err(protocol)?;
    Ok(())
}

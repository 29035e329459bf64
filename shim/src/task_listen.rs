//! Task status notifications of the 2026-07-28 Tasks extension:
//! `subscriptions/listen` with `notifications.taskIds` opens a stream on
//! which the server pushes `notifications/tasks`, each a complete
//! `DetailedTask` (what `tasks/get` would answer then).
//!
//! rmcp 3.x models `subscriptions/listen` without the extension's `taskIds`
//! (its filter drops the field), so [`crate::legacy_wire`] renames a listen
//! that names tasks to [`METHOD`] and this module serves it as a custom
//! request, on stdio and over streamable HTTP alike (there the request's
//! response stream carries the notifications). The acknowledgement
//! (`notifications/subscriptions/acknowledged`) names the task ids accepted
//! (those the daemon knows); each gets its current state at once, then one
//! notification per status change. The stream ends gracefully (the
//! `subscriptions/listen` result) once every accepted task has ended, and
//! at once when none was accepted. A host that did not declare the
//! extension gets -32021 naming the capability it lacks.

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::{CustomNotification, ErrorCode, GetTaskResult, ServerNotification};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use crate::server::Shim;
use crate::tools;

/// The name a task `subscriptions/listen` is renamed to.
pub const METHOD: &str = "caesar/tasks/listen";

/// How often the stream looks at its tasks.
const WATCH: Duration = Duration::from_millis(300);

/// The extension's code for a missing client capability.
const MISSING_CAPABILITY: i32 = -32021;

/// The most task ids one listen may name.
const MAX_IDS: usize = 100;

/// `tasks/get` for task `id`: the daemon's task as a detailed MCP task,
/// carrying caesar_await's result once it ended; refused once a ttl its
/// creator asked for has passed (the same handle under either revision).
pub async fn detailed(shim: &Shim, id: &str, ctx: &RequestContext<RoleServer>) -> Result<GetTaskResult, McpError> {
    let v = crate::legacy_tasks::live_view(shim, id).await?;
    let result = if crate::tasks::ended(&v) {
        let args = json!({"task_ids": [v.task_id], "timeout_ms": 1000});
        Some(shim.dispatch(tools::AWAIT, args, ctx).await.unwrap_or_else(|e| e.into_result()))
    } else {
        None
    };
    crate::tasks::detail(v, result)
}

fn subscription_meta(ctx: &RequestContext<RoleServer>) -> Value {
    json!({"io.modelcontextprotocol/subscriptionId": ctx.id.clone().into_json_value()})
}

async fn send(ctx: &RequestContext<RoleServer>, method: &str, params: Value) -> bool {
    let n = CustomNotification::new(method.to_owned(), Some(params));
    ctx.peer.send_notification(ServerNotification::CustomNotification(n)).await.is_ok()
}

/// The task ids a listen names, checked.
fn task_ids(params: Option<&Value>) -> Result<Vec<String>, McpError> {
    let bad = |why: &str| {
        McpError::invalid_params(
            format!("validation_error: `notifications.taskIds` {why}: give the taskId strings to follow"),
            None,
        )
    };
    let ids = params.and_then(|p| p.pointer("/notifications/taskIds")).ok_or_else(|| bad("is missing"))?;
    let ids = ids.as_array().ok_or_else(|| bad("is not an array"))?;
    if ids.len() > MAX_IDS {
        return Err(bad(&format!("names {} tasks, more than {MAX_IDS}", ids.len())));
    }
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        let id = id.as_str().map(str::trim).filter(|s| !s.is_empty()).ok_or_else(|| bad("holds a non-string"))?;
        if !out.iter().any(|o| o == id) {
            out.push(id.to_owned());
        }
    }
    Ok(out)
}

/// Serves one task subscription until its tasks end or the host leaves.
pub async fn listen(shim: &Shim, params: Option<Value>, ctx: RequestContext<RoleServer>) -> Result<Value, McpError> {
    if !crate::tasks::wanted(&ctx) {
        return Err(McpError::new(
            ErrorCode(MISSING_CAPABILITY),
            "Missing required client capability: declare the io.modelcontextprotocol/tasks extension to listen to tasks",
            Some(json!({"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})),
        ));
    }
    let ids = task_ids(params.as_ref())?;
    let mut accepted = Vec::new();
    for id in ids {
        if crate::tasks::view(shim.daemon(), &id).await.is_ok() {
            accepted.push(id);
        }
    }
    let meta = subscription_meta(&ctx);
    let ack = json!({"notifications": {"taskIds": accepted}, "_meta": meta});
    if !send(&ctx, "notifications/subscriptions/acknowledged", ack).await {
        return Err(McpError::internal_error("internal_error: the host left before the acknowledgement", None));
    }
    let mut last: HashMap<String, String> = HashMap::new();
    loop {
        let mut open = 0;
        for id in &accepted {
            if last.get(id).is_some_and(|s| is_terminal(s)) {
                continue;
            }
            let Ok(detail) = detailed(shim, id, &ctx).await else { continue };
            let mut task = serde_json::to_value(&detail).map_err(|e| McpError::internal_error(e.to_string(), None))?;
            if let Some(o) = task.as_object_mut() {
                o.remove("resultType");
                o.insert("_meta".to_owned(), meta.clone());
            }
            let status = task["status"].as_str().unwrap_or_default().to_owned();
            if last.get(id) != Some(&status) {
                if !send(&ctx, "notifications/tasks", task).await {
                    return Err(McpError::internal_error("internal_error: the host left", None));
                }
                last.insert(id.clone(), status.clone());
            }
            if !is_terminal(&status) {
                open += 1;
            }
        }
        if open == 0 {
            // Graceful end: every task it follows has ended.
            return Ok(json!({"resultType": "complete", "_meta": meta}));
        }
        tokio::select! {
            _ = ctx.ct.cancelled() => {
                return Err(McpError::internal_error("internal_error: the subscription was cancelled", None));
            }
            _ = tokio::time::sleep(WATCH) => {}
        }
    }
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod unit {
    use super::*;

    #[test]
    fn task_ids_are_checked_and_deduplicated() {
        let p = json!({"notifications": {"taskIds": ["t_1", " t_2 ", "t_1"]}});
        assert_eq!(task_ids(Some(&p)).unwrap(), ["t_1", "t_2"]);
        for bad in [json!({}), json!({"notifications": {"taskIds": "t_1"}}), json!({"notifications": {"taskIds": [3]}})]
        {
            let e = task_ids(Some(&bad)).unwrap_err();
            assert!(e.message.contains("`notifications.taskIds`"), "{e:?}");
        }
    }
}

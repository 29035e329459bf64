//! MCP 2025-11-25's `tasks/result` and the messages that ride on it.
//!
//! `tasks/result` blocks until the task ends, then answers caesar_await's
//! result. While it waits it is the stream the revision suggests for
//! task-related messages, the one a streamable HTTP host keeps open:
//! - each status change goes out as `notifications/tasks/status` (the full
//!   `Task`), so an HTTP host hears of `input_required` and the end without
//!   polling (over stdio the creation's watcher sends them too; [`Told`]
//!   keeps a connection from hearing one change twice);
//! - a pending question, when the host declared the `elicitation`
//!   capability (form mode) in `initialize`, goes out as one
//!   `elicitation/create` carrying the `related-task` metadata, as the
//!   revision's "task-augmented tool call with elicitation" flow has it: an
//!   accepted answer (`content.answer`) is the agent's answer, a declined
//!   one answers `declined`, a cancelled one leaves the question for
//!   `caesar_answer`. Each question is asked once per connection. A
//!   stateless HTTP request cannot carry the host's answer back (the
//!   server accepts no JSON-RPC responses there, and declares no
//!   elicitation for the host), so over HTTP the question stays
//!   `input_required`, named in `statusMessage`, for `caesar_answer`.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use caesar_proto::pb;
use rmcp::model::{
    ClientResult, CustomNotification, ElicitRequest, ElicitRequestParams, InputResponses, ServerNotification,
    ServerRequest,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use crate::legacy_tasks::{live_view, plain, task_json, terminal};
use crate::server::Shim;
use crate::tools;

/// How often a waiting `tasks/result` looks at the task.
const WATCH: Duration = Duration::from_millis(300);

/// What one connection was told: each task's last notified status, and the
/// questions already asked as elicitations.
#[derive(Debug, Default)]
pub struct Told {
    statuses: Mutex<HashMap<String, String>>,
    asked: Mutex<HashSet<(String, String)>>,
}

impl Told {
    /// Records `status` for task `id`; true when it differs from the last told.
    pub fn status_changed(&self, id: &str, status: &str) -> bool {
        let mut m = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(id.to_owned(), status.to_owned()).as_deref() != Some(status)
    }

    /// Records question `qid` of task `id` as asked; true the first time.
    fn first_ask(&self, id: &str, qid: &str) -> bool {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).insert((id.to_owned(), qid.to_owned()))
    }
}

/// Sends `notifications/tasks/status` for `task` (a `Task`) when its status
/// is news to this connection; false once the peer is gone.
pub async fn notify(shim: &Shim, peer: &Peer<RoleServer>, task: &Value) -> bool {
    let (Some(id), Some(status)) = (task["taskId"].as_str(), task["status"].as_str()) else { return true };
    if !shim.told().status_changed(id, status) {
        return true;
    }
    let n = CustomNotification::new("notifications/tasks/status", Some(task.clone()));
    peer.send_notification(ServerNotification::CustomNotification(n)).await.is_ok()
}

/// Whether the host declared form elicitation in its `initialize`.
fn elicits(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.peer.peer_info().is_some_and(|i| {
        i.capabilities.elicitation.as_ref().is_some_and(|e| {
            // No mode named is form (the revision's backward compatibility).
            e.form.is_some() || e.url.is_none()
        })
    })
}

/// `tasks/result`: waits for the end (telling the host of each change and
/// asking its questions meanwhile), then answers caesar_await's result.
pub async fn result(shim: &Shim, id: &str, ctx: &RequestContext<RoleServer>) -> Result<Value, McpError> {
    let elicit = elicits(ctx);
    loop {
        let v = live_view(shim, id).await?;
        let task = task_json(&v);
        notify(shim, &ctx.peer, &task).await;
        if terminal(task["status"].as_str().unwrap_or_default()) {
            let args = json!({"task_ids": [v.task_id], "timeout_ms": 1000});
            let r = shim.dispatch(tools::AWAIT, args, ctx).await.unwrap_or_else(|e| e.into_result());
            let mut out = plain(&r)?;
            out["_meta"]["io.modelcontextprotocol/related-task"] = json!({"taskId": v.task_id});
            return Ok(out);
        }
        if elicit {
            for q in v.pending_questions.iter().filter(|q| shim.told().first_ask(&v.task_id, &q.question_id)) {
                ask(shim, ctx, &v.task_id, q).await?;
            }
        }
        tokio::select! {
            _ = ctx.ct.cancelled() => {
                return Err(McpError::internal_error("internal_error: tasks/result was cancelled", None));
            }
            _ = tokio::time::sleep(WATCH) => {}
        }
    }
}

/// One question as an `elicitation/create` related to task `id`; its answer
/// goes to the agent. Ends early when the question is answered elsewhere.
async fn ask(shim: &Shim, ctx: &RequestContext<RoleServer>, id: &str, q: &pb::PendingQuestion) -> Result<(), McpError> {
    let mut answer = json!({"type": "string", "description": "The answer for the agent"});
    if !q.options.is_empty() {
        answer["enum"] = json!(q.options);
    }
    let params = json!({
        "mode": "form",
        "message": q.question,
        "requestedSchema": {"type": "object", "properties": {"answer": answer}, "required": ["answer"]},
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": id}},
    });
    let params: ElicitRequestParams =
        serde_json::from_value(params).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let response = tokio::select! {
        r = ctx.peer.send_request(request) => r,
        _ = answered_elsewhere(shim, id, &q.question_id) => return Ok(()),
        _ = ctx.ct.cancelled() => {
            return Err(McpError::internal_error("internal_error: tasks/result was cancelled", None));
        }
    };
    let result = match response {
        Ok(ClientResult::ElicitResult(r)) => r,
        Ok(other) => {
            tracing::debug!(task_id = id, "the host answered the elicitation with {other:?}; caesar_answer remains");
            return Ok(());
        }
        Err(e) => {
            tracing::debug!(task_id = id, "the elicitation failed ({e}); caesar_answer remains");
            return Ok(());
        }
    };
    let result = serde_json::to_value(&result).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    if result["action"] == "cancel" {
        // Dismissed, not declined: the question stays for caesar_answer.
        return Ok(());
    }
    let responses: InputResponses = [(q.question_id.clone(), result)].into_iter().collect();
    match crate::tasks::update(shim.daemon(), id, responses).await {
        Ok(()) => Ok(()),
        // Answered meanwhile (or the task ended): nothing to deliver.
        Err(e) if e.message.contains("is not a pending question") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Resolves once question `qid` of task `id` is no longer pending.
async fn answered_elsewhere(shim: &Shim, id: &str, qid: &str) {
    loop {
        tokio::time::sleep(WATCH).await;
        match crate::tasks::view(shim.daemon(), id).await {
            Ok(v) if v.pending_questions.iter().any(|q| q.question_id == qid) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod unit {
    use super::Told;

    #[test]
    fn a_connection_hears_each_change_once_and_is_asked_each_question_once() {
        let t = Told::default();
        assert!(t.status_changed("t_1", "working"));
        assert!(!t.status_changed("t_1", "working"));
        assert!(t.status_changed("t_1", "input_required"));
        assert!(t.status_changed("t_2", "working"), "per task");
        assert!(t.first_ask("t_1", "q_1"));
        assert!(!t.first_ask("t_1", "q_1"));
        assert!(t.first_ask("t_2", "q_1"));
    }
}

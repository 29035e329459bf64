//! The wire side of MCP tasks (issue 18): the paged task list and a task
//! handle's ttl, converted to `caesar.v1`. Kept apart from `rpc.rs`, which
//! calls these.

use caesar_proto::pb;
use tonic::Status;

use crate::engine::{Caller, Engine};

/// Sets `v`'s MCP handle ttl fields from the store (task `id`).
pub fn annotate(engine: &Engine, id: &str, v: &mut pb::TaskView) -> Result<(), Status> {
    let created = engine.record_of(id)?.created_ms;
    if let Some(t) = engine.mcp_ttls(&[(id, created)])?.into_iter().next() {
        (v.mcp_ttl_ms, v.mcp_expired) = (t.ttl_ms, t.expired);
    }
    Ok(())
}

/// One page of the task list as the caller may see it: a task sees itself
/// and its children only (its page may then be shorter; the cursor still
/// walks the whole list).
pub fn page(
    engine: &Engine,
    caller: &Caller,
    r: pb::ListTasksPageRequest,
) -> Result<pb::ListTasksPageResponse, Status> {
    if let Caller::Untrusted(_) = caller {
        caller.require_user("list tasks")?;
    }
    let (views, next_cursor) = engine.list_page(r.limit, &r.cursor)?;
    let views: Vec<_> = views
        .into_iter()
        .filter(|v| match caller {
            Caller::Task(t) => crate::engine::authority_reaches(t, &v.record),
            _ => true,
        })
        .collect();
    let keys: Vec<(String, i64)> = views.iter().map(|v| (v.record.id.clone(), v.record.created_ms)).collect();
    let ttls = engine.mcp_ttls(&keys.iter().map(|(id, c)| (id.as_str(), *c)).collect::<Vec<_>>())?;
    let tasks = views
        .into_iter()
        .zip(ttls)
        .map(|(v, t)| {
            let mut v = crate::rpc::task_view(v, false);
            v.report_json.clear();
            (v.mcp_ttl_ms, v.mcp_expired) = (t.ttl_ms, t.expired);
            v
        })
        .collect();
    Ok(pb::ListTasksPageResponse { tasks, next_cursor })
}

/// Gives a task's MCP handle the ttl its host asked for.
pub fn set_ttl(
    engine: &Engine,
    caller: &Caller,
    r: pb::SetMcpTaskTtlRequest,
) -> Result<pb::SetMcpTaskTtlResponse, Status> {
    if !matches!(caller, Caller::User) {
        caller.require_reach("set the ttl of", &engine.record_of(&r.task_id)?)?;
    }
    Ok(pb::SetMcpTaskTtlResponse { ttl_ms: engine.set_mcp_ttl(r.task_id.trim(), r.ttl_ms)? })
}

//! The MCP Tasks extension's face (issue 18): the paged task list and a
//! task handle's ttl, converted to `caesar.v1`. The ttl is an MCP-only
//! notion, so it lives here and in its own table (`store/mcp_tasks.rs`),
//! not in the engine: it only bounds the MCP handle; once it passed, the
//! MCP surface answers that the task expired, while the daemon keeps the
//! task, its events and its report as it keeps every task. Kept apart from
//! `rpc.rs`, which calls these.

use caesar_proto::pb;
use tonic::Status;

use crate::engine::{Caller, Engine};
use crate::error::Error;

/// The shortest ttl a handle is given (a shorter request is raised to it).
pub const MIN_MCP_TTL_MS: u64 = 1_000;
/// A task's MCP handle lifetime: the ttl, and whether it has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct McpTtl {
    pub ttl_ms: Option<u64>,
    pub expired: bool,
}

impl McpTtl {
    fn of(ttl_ms: Option<u64>, created_ms: i64, now_ms: i64) -> McpTtl {
        let expired = ttl_ms.is_some_and(|t| created_ms.saturating_add(i64::try_from(t).unwrap_or(i64::MAX)) <= now_ms);
        McpTtl { ttl_ms, expired }
    }
}

/// Sets `v`'s MCP handle ttl fields from the store (task `id`).
pub fn annotate(engine: &Engine, id: &str, v: &mut pb::TaskView) -> Result<(), Status> {
    let created = engine.views().record(id)?.created_ms;
    if let Some(t) = mcp_ttls(engine, &[(id, created)])?.into_iter().next() {
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
    let (views, next_cursor) = engine.views().list_page(r.limit, &r.cursor)?;
    let views: Vec<_> = views
        .into_iter()
        .filter(|v| match caller {
            Caller::Task(t) => crate::engine::authority_reaches(t, &v.record),
            _ => true,
        })
        .collect();
    let keys: Vec<(String, i64)> = views.iter().map(|v| (v.record.id.clone(), v.record.created_ms)).collect();
    let ttls = mcp_ttls(engine, &keys.iter().map(|(id, c)| (id.as_str(), *c)).collect::<Vec<_>>())?;
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
        caller.require_reach("set the ttl of", &engine.views().record(&r.task_id)?)?;
    }
    Ok(pb::SetMcpTaskTtlResponse { ttl_ms: set_mcp_ttl(engine, r.task_id.trim(), r.ttl_ms)? })
}

/// Gives task `id`'s MCP handle the ttl a host asked for (raised to
/// [`MIN_MCP_TTL_MS`]), stored before it is answered; returns it.
fn set_mcp_ttl(engine: &Engine, id: &str, requested_ms: u64) -> Result<u64, Error> {
    let record = engine.views().record(id)?;
    let ttl = requested_ms.max(MIN_MCP_TTL_MS);
    if i64::try_from(ttl).is_err() {
        return Err(Error::Invalid(format!("`ttl` {requested_ms} is too large: give milliseconds")));
    }
    engine.store().set_mcp_ttl(&record.id, ttl, crate::clock::now_ms())?;
    Ok(ttl)
}

/// The MCP handle lifetime of each of `tasks` (id, creation time), in one query.
fn mcp_ttls(engine: &Engine, tasks: &[(&str, i64)]) -> Result<Vec<McpTtl>, Error> {
    let ids: Vec<&str> = tasks.iter().map(|t| t.0).collect();
    let ttls = engine.store().mcp_ttls(&ids)?;
    let now = crate::clock::now_ms();
    Ok(tasks.iter().map(|(id, created)| McpTtl::of(ttls.get(*id).copied(), *created, now)).collect())
}

#[cfg(test)]
mod tests {
    use super::McpTtl;

    #[test]
    fn a_handle_expires_once_its_ttl_from_creation_has_passed() {
        assert_eq!(McpTtl::of(None, 0, i64::MAX), McpTtl { ttl_ms: None, expired: false });
        assert!(!McpTtl::of(Some(1_000), 10_000, 10_999).expired);
        assert!(McpTtl::of(Some(1_000), 10_000, 11_000).expired);
        assert!(!McpTtl::of(Some(u64::MAX), 10_000, i64::MAX - 1).expired, "no overflow");
    }
}

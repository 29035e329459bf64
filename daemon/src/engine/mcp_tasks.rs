//! MCP tasks (issue 18) in the engine: the task list a page at a time, and
//! the lifetime an MCP host asked for a task handle. The ttl only bounds the
//! MCP handle: once it passed, the MCP surface answers that the task
//! expired, while the daemon keeps the task, its events and its report as
//! it keeps every task (gc removes finished worktrees, never the record).

use super::{Engine, TaskView};
use crate::error::{Error, Result};
use crate::store::PageCursor;

/// The shortest ttl a handle is given (a shorter request is raised to it).
pub const MIN_MCP_TTL_MS: u64 = 1_000;
/// The most tasks one page holds.
pub const MAX_PAGE: u32 = 1_000;

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

impl Engine {
    /// Up to `limit` tasks (0: 50) after `cursor`, newest first, with the
    /// cursor of the next page when there is one.
    pub fn list_page(&self, limit: u32, cursor: &str) -> Result<(Vec<TaskView>, String)> {
        let limit = if limit == 0 { 50 } else { limit.min(MAX_PAGE) };
        let after = if cursor.is_empty() { None } else { Some(PageCursor::decode(cursor)?) };
        let (records, next) = self.store.tasks_page(limit, after.as_ref())?;
        let views = records.into_iter().map(|r| self.view(r)).collect::<Result<Vec<_>>>()?;
        Ok((views, next.map(|n| n.encode()).unwrap_or_default()))
    }

    /// Gives task `id`'s MCP handle the ttl a host asked for (raised to
    /// [`MIN_MCP_TTL_MS`]), stored before it is answered; returns it.
    pub fn set_mcp_ttl(&self, id: &str, requested_ms: u64) -> Result<u64> {
        let record = self.record(id)?;
        let ttl = requested_ms.max(MIN_MCP_TTL_MS);
        if i64::try_from(ttl).is_err() {
            return Err(Error::Invalid(format!("`ttl` {requested_ms} is too large: give milliseconds")));
        }
        self.store.set_mcp_ttl(&record.id, ttl, crate::clock::now_ms())?;
        Ok(ttl)
    }

    /// The MCP handle lifetime of each of `tasks` (id, creation time), in one query.
    pub fn mcp_ttls(&self, tasks: &[(&str, i64)]) -> Result<Vec<McpTtl>> {
        let ids: Vec<&str> = tasks.iter().map(|t| t.0).collect();
        let ttls = self.store.mcp_ttls(&ids)?;
        let now = crate::clock::now_ms();
        Ok(tasks.iter().map(|(id, created)| McpTtl::of(ttls.get(*id).copied(), *created, now)).collect())
    }
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

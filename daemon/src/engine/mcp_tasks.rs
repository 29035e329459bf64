//! The task list a page at a time (the MCP Tasks extension's `tasks/list`,
//! issue 18). The handles' ttls are the MCP face's own (`rpc_mcp_tasks`).

use super::TaskView;
use super::observe::Views;
use crate::error::Result;
use crate::store::PageCursor;

/// The most tasks one page holds.
pub const MAX_PAGE: u32 = 1_000;

impl Views {
    /// Up to `limit` tasks (0: 50) after `cursor`, newest first, with the
    /// cursor of the next page when there is one.
    pub fn list_page(&self, limit: u32, cursor: &str) -> Result<(Vec<TaskView>, String)> {
        let limit = if limit == 0 { 50 } else { limit.min(MAX_PAGE) };
        let after = if cursor.is_empty() { None } else { Some(PageCursor::decode(cursor)?) };
        let (records, next) = self.store.tasks_page(limit, after.as_ref())?;
        let views = records.into_iter().map(|r| self.view(r)).collect::<Result<Vec<_>>>()?;
        Ok((views, next.map(|n| n.encode()).unwrap_or_default()))
    }
}

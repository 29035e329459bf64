//! The store's side of MCP tasks (issue 18): the task list one page at a
//! time (keyset pagination, newest first, so a page costs one indexed
//! query however many tasks there are), and the lifetime an MCP host asked
//! for its task handle (MCP 2025-11-25 `task.ttl`), in a table of its own
//! so the task row stays as it is.

use std::collections::HashMap;

use rusqlite::params;

use super::{Store, TASK_COLUMNS, TaskRecord, task_from_row};
use crate::error::{Error, Result};

/// Migration 6 -> 7.
pub(super) const MIGRATION: &str = "CREATE TABLE mcp_task_ttls (
        task_id TEXT PRIMARY KEY,
        ttl_ms INTEGER NOT NULL,
        at_ms INTEGER NOT NULL
    );";

/// Where a page starts: after this task (its creation time and id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    pub created_ms: i64,
    pub id: String,
}

/// The cursor's spelling: `c1.<created_ms>.<id>`.
const CURSOR_PREFIX: &str = "c1.";

impl PageCursor {
    /// The opaque spelling handed to callers.
    pub fn encode(&self) -> String {
        format!("{CURSOR_PREFIX}{}.{}", self.created_ms, self.id)
    }

    /// Parses a cursor this store gave; anything else is the caller's error.
    pub fn decode(s: &str) -> Result<PageCursor> {
        let bad = || {
            Error::Invalid(format!(
                "`cursor` `{s}` is not a cursor caesar gave: pass the next cursor of the previous page, or none for the first"
            ))
        };
        let rest = s.strip_prefix(CURSOR_PREFIX).ok_or_else(bad)?;
        let (ms, id) = rest.split_once('.').ok_or_else(bad)?;
        let created_ms = ms.parse::<i64>().map_err(|_| bad())?;
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(bad());
        }
        Ok(PageCursor { created_ms, id: id.to_owned() })
    }
}

impl Store {
    /// Up to `limit` tasks created before `after` (all when `None`), newest
    /// first, and the cursor of the page after them when there are more.
    pub fn tasks_page(&self, limit: u32, after: Option<&PageCursor>) -> Result<(Vec<TaskRecord>, Option<PageCursor>)> {
        self.blocking(|conn| {
            // One more than asked tells whether a next page exists.
            let take = i64::from(limit) + 1;
            let mut out = Vec::new();
            match after {
                None => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT {TASK_COLUMNS} FROM tasks ORDER BY created_ms DESC, id DESC LIMIT ?1"
                    ))?;
                    for row in stmt.query_map([take], task_from_row)? {
                        out.push(row?);
                    }
                }
                Some(c) => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT {TASK_COLUMNS} FROM tasks WHERE created_ms < ?1 OR (created_ms = ?1 AND id < ?2)
                     ORDER BY created_ms DESC, id DESC LIMIT ?3"
                    ))?;
                    for row in stmt.query_map(params![c.created_ms, c.id, take], task_from_row)? {
                        out.push(row?);
                    }
                }
            }
            let next = if out.len() > limit as usize {
                out.truncate(limit as usize);
                out.last().map(|t| PageCursor { created_ms: t.created_ms, id: t.id.clone() })
            } else {
                None
            };
            Ok((out, next))
        })
    }

    /// Records the ttl chosen for task `id`'s MCP handle (the last one wins).
    pub fn set_mcp_ttl(&self, id: &str, ttl_ms: u64, at_ms: i64) -> Result<()> {
        self.blocking(|conn| {
            let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
            conn.execute(
                "INSERT INTO mcp_task_ttls (task_id, ttl_ms, at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT(task_id) DO UPDATE SET ttl_ms = excluded.ttl_ms, at_ms = excluded.at_ms",
                params![id, ttl, at_ms],
            )?;
            Ok(())
        })
    }

    /// The MCP handle ttls of those of `ids` that have one, in one query.
    pub fn mcp_ttls(&self, ids: &[&str]) -> Result<HashMap<String, u64>> {
        self.blocking(|conn| {
            if ids.is_empty() {
                return Ok(HashMap::new());
            }
            let marks = vec!["?"; ids.len()].join(",");
            let mut stmt =
                conn.prepare(&format!("SELECT task_id, ttl_ms FROM mcp_task_ttls WHERE task_id IN ({marks})"))?;
            let rows = stmt.query_map(rusqlite::params_from_iter(ids.iter()), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn pages_walk_every_task_once_newest_first_and_cursors_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("caesar.db")).unwrap();
        // Two tasks share a creation time: the id breaks the tie.
        for (i, id) in ["t_a", "t_b", "t_c", "t_d", "t_e"].iter().enumerate() {
            let mut t = sample(id);
            t.created_ms = 10 + (i as i64).min(3);
            s.insert_task(&t).unwrap();
        }
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = s.tasks_page(2, cursor.as_ref()).unwrap();
            assert!(page.len() <= 2);
            seen.extend(page.iter().map(|t| t.id.clone()));
            let Some(n) = next else { break };
            let again = PageCursor::decode(&n.encode()).unwrap();
            assert_eq!(again, n);
            cursor = Some(again);
        }
        assert_eq!(seen, ["t_e", "t_d", "t_c", "t_b", "t_a"]);
        let (all, next) = s.tasks_page(5, None).unwrap();
        assert_eq!((all.len(), next), (5, None), "an exact last page has no next cursor");

        for bad in ["", "x", "c1.", "c1.12", "c1.abc.t_a", "c1.12.t a", "c2.12.t_a"] {
            let e = PageCursor::decode(bad).unwrap_err().to_string();
            assert!(e.contains("`cursor`"), "{bad}: {e}");
        }
    }

    #[test]
    fn ttls_are_kept_per_task_and_read_in_one_query() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("caesar.db")).unwrap();
        s.set_mcp_ttl("t_a", 60_000, 1).unwrap();
        s.set_mcp_ttl("t_a", 5_000, 2).unwrap();
        s.set_mcp_ttl("t_b", 1_000, 3).unwrap();
        let m = s.mcp_ttls(&["t_a", "t_b", "t_c"]).unwrap();
        assert_eq!((m.len(), m["t_a"], m["t_b"]), (2, 5_000, 1_000), "the last ttl set wins; t_c has none");
    }
}

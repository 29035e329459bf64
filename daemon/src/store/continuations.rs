//! The store's table of continuations (issue 31): which task continues which in the same
//! worktree. A source is continued at most once (its `UNIQUE` column): a second continuation
//! is refused in favour of the newest task of the lineage, which holds the worktree.
//!
//! Made by [`ensure`] on every open (`CREATE … IF NOT EXISTS`), as `store/steers.rs` says why.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, TaskRecord};
use crate::error::Result;

/// The longest lineage followed (a guard against a loop in a damaged store).
const MAX_LINKS: usize = 1000;

/// Makes the table if it is not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS continuations (
            task_id TEXT PRIMARY KEY,
            source_id TEXT NOT NULL UNIQUE,
            created_ms INTEGER NOT NULL
        );",
    )
}

impl Store {
    /// Records `task`, which continues `source`, and the link, in one transaction. Returns the
    /// task that continued `source` first when it already was (nothing is stored then).
    pub fn insert_continuation(&self, task: &TaskRecord, source: &str) -> Result<std::result::Result<(), String>> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            let taken: Option<String> = tx
                .query_row("SELECT task_id FROM continuations WHERE source_id = ?1", params![source], |r| r.get(0))
                .optional()?;
            if let Some(by) = taken {
                return Ok(Err(by));
            }
            Self::insert_task_on(&tx, task)?;
            tx.execute(
                "INSERT INTO continuations (task_id, source_id, created_ms) VALUES (?1, ?2, ?3)",
                params![task.id, source, task.created_ms],
            )?;
            tx.commit()?;
            Ok(Ok(()))
        })
    }

    /// The task `id` continues, if any.
    pub fn continues(&self, id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT source_id FROM continuations WHERE task_id = ?1", params![id], |r| r.get(0))
                .optional()?)
        })
    }

    /// The task that continued `id`, if any.
    pub fn continued_by(&self, id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT task_id FROM continuations WHERE source_id = ?1", params![id], |r| r.get(0))
                .optional()?)
        })
    }

    /// The newest task of `id`'s lineage: `id` itself when nothing continued it.
    pub fn newest_continuation(&self, id: &str) -> Result<String> {
        let mut newest = id.to_owned();
        for _ in 0..MAX_LINKS {
            match self.continued_by(&newest)? {
                Some(next) => newest = next,
                None => break,
            }
        }
        Ok(newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_continued_once_and_the_lineage_leads_to_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let task = super::super::tests::sample;
        store.insert_task(&task("t_a")).unwrap();
        assert_eq!(store.insert_continuation(&task("t_b"), "t_a").unwrap(), Ok(()));
        assert_eq!(store.insert_continuation(&task("t_c"), "t_a").unwrap(), Err("t_b".to_owned()));
        assert!(store.task("t_c").unwrap().is_none(), "a refused continuation stores no task");
        assert_eq!(store.insert_continuation(&task("t_c"), "t_b").unwrap(), Ok(()));
        assert_eq!(store.continues("t_c").unwrap().as_deref(), Some("t_b"));
        assert_eq!(store.continued_by("t_a").unwrap().as_deref(), Some("t_b"));
        assert_eq!(store.newest_continuation("t_a").unwrap(), "t_c");
        assert_eq!(store.newest_continuation("t_c").unwrap(), "t_c");
    }
}

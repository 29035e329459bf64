//! The store's table of forks (issue 31): which task a fork started from,
//! and at which of its events, for `forked_from: <task>@<seq>` in status.
//!
//! Made by [`ensure`] on every open (`CREATE … IF NOT EXISTS`), as
//! `store/steers.rs` says why.

use rusqlite::{Connection, OptionalExtension, params};

use super::Store;
use crate::error::Result;

/// Makes the table if it is not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS forks (
            task_id TEXT PRIMARY KEY,
            source_id TEXT NOT NULL,
            seq INTEGER NOT NULL
        );",
    )
}

impl Store {
    /// Records that `task_id` was forked from `source_id` at its event `seq`
    /// (0: its base).
    pub fn insert_fork(&self, task_id: &str, source_id: &str, seq: u64) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "INSERT OR REPLACE INTO forks (task_id, source_id, seq) VALUES (?1, ?2, ?3)",
                params![task_id, source_id, seq as i64],
            )?;
            Ok(())
        })
    }

    /// The task and event `task_id` was forked from, if it is a fork.
    pub fn fork_of(&self, task_id: &str) -> Result<Option<(String, u64)>> {
        self.blocking(|conn| {
            let row = conn
                .query_row("SELECT source_id, seq FROM forks WHERE task_id = ?1", params![task_id], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })
                .optional()?;
            Ok(row.map(|(s, q)| (s, q.max(0) as u64)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_remembers_its_source_and_point() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        assert_eq!(store.fork_of("t_2").unwrap(), None);
        store.insert_fork("t_2", "t_1", 7).unwrap();
        drop(store);
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        assert_eq!(store.fork_of("t_2").unwrap(), Some(("t_1".to_owned(), 7)));
    }
}

//! The store's tables of stacked tasks (issue 32): which tasks a task builds
//! on (`task_deps`, one row per edge, in the order the caller named them),
//! and where the stack stands (`task_stack`, one row per task that has
//! parents: waiting for them, released on their merged result, or ended
//! by a parent's failure).
//!
//! A task released on its parents' results whose agent had not started
//! when a parent's result moved is put back to waiting and marked in
//! `task_recut` in one transaction ([`Store::rebase_stacked`]): until a
//! preparation on its new base is recorded ([`Store::settle_recut`]), the
//! queue holds it ([`Store::held_stacked`]) and recovery prepares it again.
//!
//! A stacked task and its edges are stored in one transaction
//! ([`Store::insert_stacked`]): a task is never seen pending without the
//! parents it waits for. The tables are made on every open
//! (`CREATE … IF NOT EXISTS`), as `steers.rs` says why.

use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, TaskRecord};
use crate::error::Result;

/// Makes the tables if they are not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS task_stack (
            child TEXT PRIMARY KEY,
            on_parent_failure TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'waiting',
            base TEXT,
            merged TEXT,
            stale TEXT
        );
        CREATE TABLE IF NOT EXISTS task_deps (
            child TEXT NOT NULL,
            parent TEXT NOT NULL,
            pos INTEGER NOT NULL,
            PRIMARY KEY (child, parent)
        );
        CREATE INDEX IF NOT EXISTS task_deps_by_parent ON task_deps (parent);
        CREATE TABLE IF NOT EXISTS task_recut (
            child TEXT PRIMARY KEY
        );",
    )
}

/// Where a stacked task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackState {
    /// Some parent has not ended yet.
    Waiting,
    /// Its parents ended; its base (their results merged) is decided and it
    /// is prepared, queued, running or ended like any task.
    Released,
    /// Ended without running, by a parent's failure or a conflict.
    Ended,
}

impl StackState {
    pub fn as_str(self) -> &'static str {
        match self {
            StackState::Waiting => "waiting",
            StackState::Released => "released",
            StackState::Ended => "ended",
        }
    }

    fn parse(s: &str) -> StackState {
        match s {
            "released" => StackState::Released,
            "ended" => StackState::Ended,
            _ => StackState::Waiting,
        }
    }
}

/// A stacked task's row and its parents.
#[derive(Debug, Clone, PartialEq)]
pub struct StackRow {
    pub child: String,
    /// In the order the caller named them.
    pub parents: Vec<String>,
    /// `cancel` or `run`.
    pub on_parent_failure: String,
    pub state: StackState,
    /// The commit its worktree is made from, once released (`None` then:
    /// no parent left a result, so the repository's HEAD).
    pub base: Option<String>,
    /// The parents whose results its base holds.
    pub merged: Vec<String>,
    /// `<parent> <commit>` when a parent's result moved after it took it.
    pub stale: Option<String>,
}

fn parents_on(conn: &Connection, child: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached("SELECT parent FROM task_deps WHERE child = ?1 ORDER BY pos")?;
    let rows = stmt.query_map(params![child], |r| r.get(0))?;
    rows.collect()
}

impl Store {
    /// Records a new task with the tasks it builds on, in one transaction.
    pub fn insert_stacked(&self, t: &TaskRecord, parents: &[String], on_parent_failure: &str) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            Self::insert_task_on(&tx, t)?;
            // A row an earlier task of the same id left (a fallback's chosen id).
            tx.execute("DELETE FROM task_deps WHERE child = ?1", params![t.id])?;
            for (pos, parent) in parents.iter().enumerate() {
                tx.execute(
                    "INSERT INTO task_deps (child, parent, pos) VALUES (?1, ?2, ?3)",
                    params![t.id, parent, pos as i64],
                )?;
            }
            tx.execute(
                "INSERT OR REPLACE INTO task_stack (child, on_parent_failure, state) VALUES (?1, ?2, 'waiting')",
                params![t.id, on_parent_failure],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// The parents of `child`, in order (empty for a task that has none).
    pub fn parents_of(&self, child: &str) -> Result<Vec<String>> {
        self.blocking(|conn| Ok(parents_on(conn, child)?))
    }

    /// The stack row of `child`, when it has parents.
    pub fn stack_of(&self, child: &str) -> Result<Option<StackRow>> {
        self.blocking(|conn| {
            let row = conn
                .query_row(
                    "SELECT on_parent_failure, state, base, merged, stale FROM task_stack WHERE child = ?1",
                    params![child],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, Option<String>>(4)?,
                        ))
                    },
                )
                .optional()?;
            let Some((policy, state, base, merged, stale)) = row else { return Ok(None) };
            Ok(Some(StackRow {
                child: child.to_owned(),
                parents: parents_on(conn, child)?,
                on_parent_failure: policy,
                state: StackState::parse(&state),
                base,
                merged: merged
                    .map(|m| m.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect())
                    .unwrap_or_default(),
                stale,
            }))
        })
    }

    /// Every task that builds on `parent`, with where its stack stands.
    pub fn dependents_of(&self, parent: &str) -> Result<Vec<(String, StackState)>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT d.child, s.state FROM task_deps d JOIN task_stack s ON s.child = d.child \
                 WHERE d.parent = ?1 ORDER BY d.child",
            )?;
            let rows =
                stmt.query_map(params![parent], |r| Ok((r.get(0)?, StackState::parse(&r.get::<_, String>(1)?))))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The pending tasks still waiting for a parent.
    pub fn waiting_stacked(&self) -> Result<Vec<String>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT s.child FROM task_stack s JOIN tasks t ON t.id = s.child \
                 WHERE s.state = 'waiting' AND t.status = 'pending' ORDER BY t.created_ms",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Releases a waiting task on `base` (the parents `merged`); false when
    /// it was not waiting (released or ended already).
    pub fn release_stacked(&self, child: &str, base: Option<&str>, merged: &[String]) -> Result<bool> {
        self.blocking(|conn| {
            let n = conn.execute(
                "UPDATE task_stack SET state = 'released', base = ?2, merged = ?3 WHERE child = ?1 AND state = 'waiting'",
                params![child, base, merged.join(",")],
            )?;
            Ok(n == 1)
        })
    }

    /// Marks a waiting task ended by its parents; false when it was not waiting.
    pub fn end_stacked(&self, child: &str) -> Result<bool> {
        self.blocking(|conn| {
            let n = conn.execute(
                "UPDATE task_stack SET state = 'ended' WHERE child = ?1 AND state = 'waiting'",
                params![child],
            )?;
            Ok(n == 1)
        })
    }

    /// The pending tasks the queue must not start: waiting for a parent, or
    /// to be made again on a moved parent's new result.
    pub fn held_stacked(&self) -> Result<Vec<String>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT s.child FROM task_stack s JOIN tasks t ON t.id = s.child \
                 WHERE t.status = 'pending' AND (s.state = 'waiting' \
                 OR EXISTS (SELECT 1 FROM task_recut r WHERE r.child = s.child))",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Puts a released task whose agent never started back to waiting, to be
    /// released on its parents' new results and prepared again, and records
    /// that its worktree must be made again, in one transaction. False when
    /// it was not released, or not pending, or has a run.
    pub fn rebase_stacked(&self, child: &str) -> Result<bool> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            let n = tx.execute(
                "UPDATE task_stack SET state = 'waiting', base = NULL, merged = NULL \
                 WHERE child = ?1 AND state = 'released' AND EXISTS \
                 (SELECT 1 FROM tasks t WHERE t.id = ?1 AND t.status = 'pending' AND t.run_handle IS NULL)",
                params![child],
            )?;
            if n == 1 {
                tx.execute("INSERT OR IGNORE INTO task_recut (child) VALUES (?1)", params![child])?;
            }
            tx.commit()?;
            Ok(n == 1)
        })
    }

    /// Whether `child`'s worktree must be made again (see [`Store::rebase_stacked`]).
    pub fn recut_pending(&self, child: &str) -> Result<bool> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT 1 FROM task_recut WHERE child = ?1", params![child], |_| Ok(()))
                .optional()?
                .is_some())
        })
    }

    /// A preparation of `child` made on `base` was recorded: when that is
    /// still the base it is released on, its re-cut is done. A preparation
    /// begun on an older base leaves the mark (and the queue's hold).
    pub fn settle_recut(&self, child: &str, base: Option<&str>) -> Result<bool> {
        self.blocking(|conn| {
            let n = conn.execute(
                "DELETE FROM task_recut WHERE child = ?1 AND EXISTS \
                 (SELECT 1 FROM task_stack s WHERE s.child = ?1 AND s.state = 'released' AND s.base IS ?2)",
                params![child, base],
            )?;
            Ok(n == 1)
        })
    }

    /// Flags a released task stale: `<parent> <commit>`.
    pub fn set_stack_stale(&self, child: &str, stale: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("UPDATE task_stack SET stale = ?2 WHERE child = ?1", params![child, stale])?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stacked_task_is_stored_with_its_edges_and_released_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let child = crate::store::tests::sample("t_child");
        store.insert_stacked(&child, &["t_b".to_owned(), "t_a".to_owned()], "cancel").unwrap();
        let row = store.stack_of("t_child").unwrap().unwrap();
        assert_eq!(
            (row.parents.as_slice(), row.state),
            (&["t_b".to_owned(), "t_a".to_owned()][..], StackState::Waiting)
        );
        assert_eq!(store.waiting_stacked().unwrap(), ["t_child"]);
        assert_eq!(store.dependents_of("t_a").unwrap(), [("t_child".to_owned(), StackState::Waiting)]);
        assert!(store.release_stacked("t_child", Some("abc"), &["t_b".to_owned()]).unwrap());
        assert!(!store.release_stacked("t_child", Some("def"), &[]).unwrap(), "released once");
        assert!(!store.end_stacked("t_child").unwrap(), "a released task is not ended by its parents");
        let row = store.stack_of("t_child").unwrap().unwrap();
        assert_eq!((row.base.as_deref(), row.merged.as_slice()), (Some("abc"), &["t_b".to_owned()][..]));
        assert!(store.waiting_stacked().unwrap().is_empty());
        store.set_stack_stale("t_child", "t_b 0123").unwrap();
        drop(store);
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        assert_eq!(store.stack_of("t_child").unwrap().unwrap().stale.as_deref(), Some("t_b 0123"));
        assert!(store.stack_of("t_b").unwrap().is_none());
    }

    #[test]
    fn a_rebase_holds_the_task_until_a_preparation_on_the_new_base_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        store.insert_stacked(&crate::store::tests::sample("t_c"), &["t_p".to_owned()], "cancel").unwrap();
        assert!(!store.rebase_stacked("t_c").unwrap(), "a waiting task is not rebased");
        assert!(store.release_stacked("t_c", Some("old"), &["t_p".to_owned()]).unwrap());
        assert!(store.held_stacked().unwrap().is_empty(), "released: the queue may start it");
        assert!(store.rebase_stacked("t_c").unwrap());
        assert_eq!(store.held_stacked().unwrap(), ["t_c"]);
        assert!(store.recut_pending("t_c").unwrap());
        // The preparation begun on the old base does not settle it.
        assert!(store.release_stacked("t_c", Some("new"), &["t_p".to_owned()]).unwrap());
        assert!(!store.settle_recut("t_c", Some("old")).unwrap());
        assert_eq!(store.held_stacked().unwrap(), ["t_c"], "still held after its release");
        drop(store);
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        assert!(store.recut_pending("t_c").unwrap(), "the mark survives a restart");
        assert!(store.settle_recut("t_c", Some("new")).unwrap());
        assert!(!store.recut_pending("t_c").unwrap() && store.held_stacked().unwrap().is_empty());
        // A started task is never rebased.
        store.set_running("t_c", 1, &crate::runner::RunHandle::Local { pid: 1, start: None, boot: None }, &[]).unwrap();
        assert!(!store.rebase_stacked("t_c").unwrap());
    }
}

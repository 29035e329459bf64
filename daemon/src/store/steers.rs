//! The store's table of steers (issue 31): what a caller told a running agent unasked, stored
//! before it is acknowledged and marked once the supervisor says the agent was given it.
//!
//! The table is made by [`ensure`] on every open (`CREATE … IF NOT EXISTS`) rather than by a
//! numbered migration: a store an older caesard opens again keeps working (it never reads the
//! table), and the schema number stays free for the migrations of the task row.

use rusqlite::{Connection, OptionalExtension, params};

use super::Store;
use crate::error::Result;

/// Makes the table if it is not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS steers (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id TEXT NOT NULL,
            text TEXT NOT NULL,
            interrupt INTEGER NOT NULL DEFAULT 0,
            state TEXT NOT NULL DEFAULT 'pending',
            created_ms INTEGER NOT NULL,
            mode TEXT,
            done_ms INTEGER
        );
        CREATE INDEX IF NOT EXISTS steers_by_task ON steers (task_id, state, id);",
    )
}

/// Where a steer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerState {
    /// Stored, not yet given to the agent.
    Pending,
    /// The agent was given it (`mode` says how).
    Delivered,
    /// The run ended before the agent could be given it.
    Undelivered,
}

impl SteerState {
    pub fn as_str(self) -> &'static str {
        match self {
            SteerState::Pending => "pending",
            SteerState::Delivered => "delivered",
            SteerState::Undelivered => "undelivered",
        }
    }

    fn parse(s: &str) -> SteerState {
        match s {
            "delivered" => SteerState::Delivered,
            "undelivered" => SteerState::Undelivered,
            _ => SteerState::Pending,
        }
    }
}

/// A steer's end to record with its event: delivered (`mode` says how) or
/// undelivered (`mode` says why).
#[derive(Debug, Clone, PartialEq)]
pub struct SteerEnd {
    pub id: i64,
    pub state: SteerState,
    pub mode: String,
    pub at_ms: i64,
}

/// One stored steer.
#[derive(Debug, Clone, PartialEq)]
pub struct SteerRow {
    pub id: i64,
    pub task_id: String,
    pub text: String,
    pub interrupt: bool,
    pub state: SteerState,
    pub created_ms: i64,
    /// How it was delivered (or why not).
    pub mode: Option<String>,
    pub done_ms: Option<i64>,
}

const COLUMNS: &str = "id, task_id, text, interrupt, state, created_ms, mode, done_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SteerRow> {
    let state: String = r.get(4)?;
    Ok(SteerRow {
        id: r.get(0)?,
        task_id: r.get(1)?,
        text: r.get(2)?,
        interrupt: r.get(3)?,
        state: SteerState::parse(&state),
        created_ms: r.get(5)?,
        mode: r.get(6)?,
        done_ms: r.get(7)?,
    })
}

impl Store {
    /// Stores a steer for `task_id` unless `max_pending` of its steers already wait; returns it,
    /// or the number waiting when the queue is full.
    pub fn insert_steer(
        &self,
        task_id: &str,
        text: &str,
        interrupt: bool,
        max_pending: u32,
        now_ms: i64,
    ) -> Result<std::result::Result<SteerRow, u32>> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            let waiting: u32 = tx.query_row(
                "SELECT COUNT(*) FROM steers WHERE task_id = ?1 AND state = 'pending'",
                params![task_id],
                |r| r.get(0),
            )?;
            if waiting >= max_pending {
                return Ok(Err(waiting));
            }
            tx.execute(
                "INSERT INTO steers (task_id, text, interrupt, created_ms) VALUES (?1, ?2, ?3, ?4)",
                params![task_id, text, interrupt, now_ms],
            )?;
            let id = tx.last_insert_rowid();
            let stored = tx.query_row(&format!("SELECT {COLUMNS} FROM steers WHERE id = ?1"), params![id], row)?;
            tx.commit()?;
            Ok(Ok(stored))
        })
    }

    /// The steers of `task_id` not yet given to its agent, oldest first.
    pub fn pending_steers(&self, task_id: &str) -> Result<Vec<SteerRow>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM steers WHERE task_id = ?1 AND state = 'pending' ORDER BY id"
            ))?;
            let rows = stmt.query_map(params![task_id], row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Every steer of `task_id`, oldest first.
    pub fn steers_of(&self, task_id: &str) -> Result<Vec<SteerRow>> {
        self.blocking(|conn| {
            let mut stmt =
                conn.prepare_cached(&format!("SELECT {COLUMNS} FROM steers WHERE task_id = ?1 ORDER BY id"))?;
            let rows = stmt.query_map(params![task_id], row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Marks a pending steer of `task_id` delivered (or undelivered) with `mode`; returns it
    /// when it was pending, `None` when it was already marked (or is not this task's).
    pub fn finish_steer(
        &self,
        task_id: &str,
        id: i64,
        state: SteerState,
        mode: &str,
        at_ms: i64,
    ) -> Result<Option<SteerRow>> {
        self.blocking(|conn| {
            let changed = conn.execute(
                "UPDATE steers SET state = ?3, mode = ?4, done_ms = ?5 WHERE id = ?1 AND task_id = ?2 AND state = 'pending'",
                params![id, task_id, state.as_str(), mode, at_ms],
            )?;
            if changed == 0 {
                return Ok(None);
            }
            Ok(conn.query_row(&format!("SELECT {COLUMNS} FROM steers WHERE id = ?1"), params![id], row).optional()?)
        })
    }
}

impl Store {
    /// Ends steers and stores the events that say so in one transaction, so
    /// that a daemon killed between the two neither loses a `steer` event nor
    /// repeats it. Nothing is written, and `false` is returned, when one of
    /// them is no longer pending.
    pub fn finish_steers_with_events(
        &self,
        task_id: &str,
        ends: &[SteerEnd],
        events: &[crate::oacp::EventRecord],
    ) -> Result<bool> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            for e in ends {
                let changed = tx.execute(
                    "UPDATE steers SET state = ?3, mode = ?4, done_ms = ?5 WHERE id = ?1 AND task_id = ?2 AND state = 'pending'",
                    params![e.id, task_id, e.state.as_str(), e.mode, e.at_ms],
                )?;
                if changed == 0 {
                    return Ok(false);
                }
            }
            super::insert_events(&tx, task_id, events, None)?;
            tx.commit()?;
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steers_are_stored_bounded_and_finished_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let a = store.insert_steer("t_1", "one", false, 2, 10).unwrap().unwrap();
        let b = store.insert_steer("t_1", "two", true, 2, 11).unwrap().unwrap();
        assert!(b.id > a.id && b.interrupt && b.state == SteerState::Pending);
        assert_eq!(store.insert_steer("t_1", "three", false, 2, 12).unwrap(), Err(2), "the queue is full");
        assert!(store.insert_steer("t_2", "other task", false, 2, 12).unwrap().is_ok());
        assert_eq!(store.pending_steers("t_1").unwrap().iter().map(|s| s.id).collect::<Vec<_>>(), vec![a.id, b.id]);
        let done = store.finish_steer("t_1", a.id, SteerState::Delivered, "stdin_message", 20).unwrap().unwrap();
        assert_eq!(
            (done.state, done.mode.as_deref(), done.done_ms),
            (SteerState::Delivered, Some("stdin_message"), Some(20))
        );
        assert_eq!(store.finish_steer("t_1", a.id, SteerState::Delivered, "stdin_message", 21).unwrap(), None, "once");
        assert_eq!(store.finish_steer("t_2", b.id, SteerState::Delivered, "x", 21).unwrap(), None, "not t_2's");
        assert!(store.insert_steer("t_1", "three", false, 2, 12).unwrap().is_ok(), "a delivered steer frees its place");
        drop(store);
        // Opening again keeps the table and its rows.
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        assert_eq!(store.steers_of("t_1").unwrap().len(), 3);
    }

    /// A steer's end and its event are one write: both, or (the steer no
    /// longer pending) neither.
    #[test]
    fn a_steers_end_and_its_event_are_written_together_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let a = store.insert_steer("t_1", "one", false, 2, 10).unwrap().unwrap();
        let record = |seq| crate::oacp::EventRecord {
            protocol: crate::oacp::EVENT_PROTOCOL.to_owned(),
            seq,
            at: "2026-12-05T00:00:00.000Z".to_owned(),
            task_id: "t_1".to_owned(),
            body: crate::oacp::EventBody::Steer {
                steer_id: a.id,
                text: "one".to_owned(),
                mode: "stdin_message".to_owned(),
                delivered: true,
                interrupt: false,
            },
        };
        let end = SteerEnd { id: a.id, state: SteerState::Delivered, mode: "stdin_message".to_owned(), at_ms: 20 };
        let events = |store: &Store| {
            store.blocking(|c| {
                c.query_row("SELECT COUNT(*) FROM events WHERE task_id = 't_1'", [], |r| r.get::<_, i64>(0))
            })
        };
        assert!(store.finish_steers_with_events("t_1", std::slice::from_ref(&end), &[record(0)]).unwrap());
        assert_eq!(store.steers_of("t_1").unwrap()[0].state, SteerState::Delivered);
        assert_eq!(events(&store).unwrap(), 1);
        assert!(!store.finish_steers_with_events("t_1", &[end], &[record(1)]).unwrap(), "not pending any more");
        assert_eq!(events(&store).unwrap(), 1, "and its event not written again");
    }
}

//! The store's tables of quota parking and group budgets (issue 17, items 3
//! and 4), in tables of their own (migration 5 -> 6) so the task row stays
//! as it is: a parked attempt is an ordinary pending task whose park row
//! says until when the queue leaves it alone.

use rusqlite::{OptionalExtension, params};

use super::Store;
use crate::error::Result;

/// Migration 5 -> 6.
pub(super) const MIGRATION: &str = "CREATE TABLE task_parks (
        task_id TEXT PRIMARY KEY,
        successor_id TEXT NOT NULL UNIQUE,
        parked_until INTEGER NOT NULL,
        reason TEXT NOT NULL,
        session_id TEXT,
        at_ms INTEGER NOT NULL
    );
    CREATE TABLE group_budgets (
        group_id TEXT PRIMARY KEY,
        limits TEXT NOT NULL,
        stopped_limit TEXT,
        detail TEXT,
        at_ms INTEGER
    );";

/// A group's limits (JSON) and the stop that ended it (limit, detail), if any.
pub type GroupBudgetRow = (String, Option<(String, String)>);

/// A blocked task parked until its quota lifts, and the attempt that
/// resumes it then.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkRow {
    /// The task the quota stopped.
    pub task_id: String,
    /// The task that resumes it (delegated at once, started at `parked_until`).
    pub successor_id: String,
    /// When the quota lifts, milliseconds since the epoch.
    pub parked_until: i64,
    /// What the provider said.
    pub reason: String,
    /// The native session to resume, when the agent reported one.
    pub session_id: Option<String>,
    pub at_ms: i64,
}

const PARK_COLUMNS: &str = "task_id, successor_id, parked_until, reason, session_id, at_ms";

fn park(r: &rusqlite::Row<'_>) -> rusqlite::Result<ParkRow> {
    Ok(ParkRow {
        task_id: r.get(0)?,
        successor_id: r.get(1)?,
        parked_until: r.get(2)?,
        reason: r.get(3)?,
        session_id: r.get(4)?,
        at_ms: r.get(5)?,
    })
}

impl Store {
    /// Records a park, unless the task has one already; returns the stored
    /// one (the first successor id and reset time win).
    pub fn record_park(&self, row: &ParkRow) -> Result<ParkRow> {
        self.blocking(|conn| {
            conn.execute(
                &format!("INSERT OR IGNORE INTO task_parks ({PARK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
                params![row.task_id, row.successor_id, row.parked_until, row.reason, row.session_id, row.at_ms],
            )?;
            if let Some(s) = &row.session_id {
                conn.execute(
                    "UPDATE task_parks SET session_id = ?2 WHERE task_id = ?1 AND session_id IS NULL",
                    params![row.task_id, s],
                )?;
            }
            Ok(conn.query_row(
                &format!("SELECT {PARK_COLUMNS} FROM task_parks WHERE task_id = ?1"),
                params![row.task_id],
                park,
            )?)
        })
    }

    /// The park of a blocked task, if one was recorded.
    pub fn park_of(&self, task_id: &str) -> Result<Option<ParkRow>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(&format!("SELECT {PARK_COLUMNS} FROM task_parks WHERE task_id = ?1"), params![task_id], park)
                .optional()?)
        })
    }

    /// The park that made this task, the attempt resuming a blocked one.
    pub fn park_resumed_by(&self, successor_id: &str) -> Result<Option<ParkRow>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {PARK_COLUMNS} FROM task_parks WHERE successor_id = ?1"),
                    params![successor_id],
                    park,
                )
                .optional()?)
        })
    }

    /// Forgets a park that did not happen (the task fell back instead, or
    /// had changed files).
    pub fn drop_park(&self, task_id: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("DELETE FROM task_parks WHERE task_id = ?1", params![task_id])?;
            Ok(())
        })
    }

    /// Parks whose resuming task is pending: those still parked at `now_ms`
    /// are kept out of the queue, the others' timers are re-armed after a
    /// restart.
    pub fn pending_parks(&self) -> Result<Vec<ParkRow>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {PARK_COLUMNS} FROM task_parks p WHERE EXISTS \
             (SELECT 1 FROM tasks t WHERE t.id = p.successor_id AND t.status = 'pending')"
            ))?;
            let rows = stmt.query_map([], park)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Stores a group's limits (at its delegation, before any member).
    pub fn set_group_budget(&self, group_id: &str, limits_json: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO group_budgets (group_id, limits) VALUES (?1, ?2)",
                params![group_id, limits_json],
            )?;
            Ok(())
        })
    }

    /// A group's limits (JSON) and the stop that ended it (limit, detail), if any.
    pub fn group_budget(&self, group_id: &str) -> Result<Option<GroupBudgetRow>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(
                    "SELECT limits, stopped_limit, detail FROM group_budgets WHERE group_id = ?1",
                    params![group_id],
                    |r| {
                        let limit: Option<String> = r.get(1)?;
                        let detail: Option<String> = r.get(2)?;
                        Ok((r.get(0)?, limit.zip(detail)))
                    },
                )
                .optional()?)
        })
    }

    /// Records that a limit stopped the group (the first one wins).
    pub fn record_group_stop(&self, group_id: &str, limit: &str, detail: &str, at_ms: i64) -> Result<()> {
        self.blocking(|conn| {
        conn.execute(
            "UPDATE group_budgets SET stopped_limit = ?2, detail = ?3, at_ms = ?4 WHERE group_id = ?1 AND stopped_limit IS NULL",
            params![group_id, limit, detail, at_ms],
        )?;
        Ok(())
    })
    }
}

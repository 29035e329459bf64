//! The store's tables of the task life cycle (issue 17): the budget stop of
//! a task, and the attempts of a task that fell back to the next agent.
//! Their own tables (migration 3 -> 4), so the task row stays as it is.

use rusqlite::{OptionalExtension, params};

use super::Store;
use crate::error::Result;
use crate::oacp::{EventBody, EventRecord};

/// Migration 3 -> 4.
pub(super) const MIGRATION: &str = "CREATE TABLE task_budget_stops (
        task_id TEXT PRIMARY KEY,
        limit_name TEXT NOT NULL,
        detail TEXT NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE TABLE task_attempts (
        task_id TEXT PRIMARY KEY,
        root_id TEXT NOT NULL,
        successor_id TEXT NOT NULL UNIQUE,
        next_agent TEXT NOT NULL,
        stopped_by TEXT NOT NULL,
        message TEXT NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE INDEX task_attempts_by_root ON task_attempts(root_id, at_ms);";

/// A task that stopped on a blocker and was followed by `successor_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    pub task_id: String,
    pub root_id: String,
    pub successor_id: String,
    pub next_agent: String,
    pub stopped_by: String,
    pub message: String,
    pub at_ms: i64,
}

fn attempt(r: &rusqlite::Row<'_>) -> rusqlite::Result<AttemptRow> {
    Ok(AttemptRow {
        task_id: r.get(0)?,
        root_id: r.get(1)?,
        successor_id: r.get(2)?,
        next_agent: r.get(3)?,
        stopped_by: r.get(4)?,
        message: r.get(5)?,
        at_ms: r.get(6)?,
    })
}

const ATTEMPT_COLUMNS: &str = "task_id, root_id, successor_id, next_agent, stopped_by, message, at_ms";

/// The group whose budget stopped a task, `NULL` where the task's own did
/// (issue 31: a group's stop would stop the next agent too, so it is never
/// relayed). Added on every open where missing, as the steers' table is
/// made (`steers.rs`); a stop recorded before the column names its group
/// only in its detail, `group <id>: …`, which fills it once.
pub(super) fn ensure(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let has =
        conn.prepare("SELECT 1 FROM pragma_table_info('task_budget_stops') WHERE name = 'group_id'")?.exists([])?;
    if !has {
        // One transaction: a column added is a column filled.
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(
            "ALTER TABLE task_budget_stops ADD COLUMN group_id TEXT;
             UPDATE task_budget_stops SET group_id = substr(detail, 7, instr(detail, ':') - 7)
                 WHERE detail LIKE 'group %:%';",
        )?;
        tx.commit()?;
    }
    Ok(())
}

impl Store {
    /// Records that a budget limit stopped the task (the first one wins):
    /// its own, or `group`'s.
    pub fn record_budget_stop(
        &self,
        task_id: &str,
        limit: &str,
        detail: &str,
        group: Option<&str>,
        at_ms: i64,
    ) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO task_budget_stops (task_id, limit_name, detail, group_id, at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![task_id, limit, detail, group, at_ms],
            )?;
            Ok(())
        })
    }

    /// The group whose budget stopped the task, if a group's did.
    pub fn budget_stop_group(&self, task_id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT group_id FROM task_budget_stops WHERE task_id = ?1", params![task_id], |r| {
                    r.get::<_, Option<String>>(0)
                })
                .optional()?
                .flatten())
        })
    }

    /// The limit that stopped the task and its figures, if one did.
    pub fn budget_stop(&self, task_id: &str) -> Result<Option<(String, String)>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(
                    "SELECT limit_name, detail FROM task_budget_stops WHERE task_id = ?1",
                    params![task_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?)
        })
    }

    /// Records a fallback, unless the task has one already; returns the
    /// stored one (so a conclusion redone after a crash keeps the first
    /// successor id, and never makes a second).
    pub fn record_fallback(&self, row: &AttemptRow) -> Result<AttemptRow> {
        self.blocking(|conn| {
            conn.execute(
                &format!("INSERT OR IGNORE INTO task_attempts ({ATTEMPT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
                params![
                    row.task_id,
                    row.root_id,
                    row.successor_id,
                    row.next_agent,
                    row.stopped_by,
                    row.message,
                    row.at_ms
                ],
            )?;
            Ok(conn.query_row(
                &format!("SELECT {ATTEMPT_COLUMNS} FROM task_attempts WHERE task_id = ?1"),
                params![row.task_id],
                attempt,
            )?)
        })
    }

    /// The fallback that followed this task, if any.
    pub fn fallback_of(&self, task_id: &str) -> Result<Option<AttemptRow>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {ATTEMPT_COLUMNS} FROM task_attempts WHERE task_id = ?1"),
                    params![task_id],
                    attempt,
                )
                .optional()?)
        })
    }

    /// The attempts of a chain, oldest first.
    pub fn attempts_of(&self, root_id: &str) -> Result<Vec<AttemptRow>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {ATTEMPT_COLUMNS} FROM task_attempts WHERE root_id = ?1 ORDER BY at_ms, rowid"
            ))?;
            let rows = stmt.query_map(params![root_id], attempt)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Fallbacks whose next task was never delegated (a daemon died between
    /// the two): recovery delegates them.
    pub fn unstarted_fallbacks(&self) -> Result<Vec<AttemptRow>> {
        self.blocking(|conn| {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM task_attempts a WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = a.successor_id) ORDER BY at_ms"
        ))?;
        let rows = stmt.query_map([], attempt)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    })
    }

    /// The usage and message events stored for a task, in order: what a
    /// budget's tally is rebuilt from after a restart.
    pub fn usage_and_messages(&self, task_id: &str) -> Result<Vec<EventBody>> {
        self.blocking(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT line FROM events WHERE task_id = ?1 AND (line LIKE '%\"type\":\"usage\"%' OR line LIKE '%\"type\":\"message\"%') ORDER BY seq",
        )?;
        let lines = stmt.query_map(params![task_id], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for line in lines {
            if let Ok(rec) = serde_json::from_str::<EventRecord>(&line?) {
                out.push(rec.body);
            }
        }
        Ok(out)
    })
    }
}

impl Store {
    /// Forgets a fallback whose next task could not be delegated.
    pub fn drop_fallback(&self, task_id: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("DELETE FROM task_attempts WHERE task_id = ?1", params![task_id])?;
            Ok(())
        })
    }
}

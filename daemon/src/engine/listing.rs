//! The task list for the dashboard: the store's light rows (one query)
//! plus what only the engine knows in memory (the agent's last words, its
//! current activity, where a pending task stands). No `TaskView` per task.

use super::{Activity, Phase};
use crate::error::Result;
use crate::store::{ListRow, TaskStatus};

/// One task of the list.
#[derive(Debug, Clone)]
pub struct ListEntry {
    pub row: ListRow,
    /// The last characters of the agent's reply and when it last spoke.
    pub output: Option<(String, i64)>,
    /// What the agent is doing now.
    pub activity: Option<Activity>,
    /// Where a pending task stands.
    pub phase: Option<Phase>,
}

impl super::observe::Views {
    /// The newest `limit` tasks, those waiting on an answer first.
    pub fn list_entries(&self, limit: u32) -> Result<Vec<ListEntry>> {
        let rows = self.store.list_rows(limit)?;
        // Issue 32: stacked tasks waiting for their parents.
        let waiting = self.store.waiting_stacked()?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let live = if row.status.is_terminal() { None } else { self.runs.get(&row.id) };
                let output = live.as_ref().and_then(|l| l.output.lock().unwrap_or_else(|p| p.into_inner()).clone());
                let activity = live.as_ref().and_then(|l| l.activity.lock().unwrap_or_else(|p| p.into_inner()).clone());
                let phase = (row.status == TaskStatus::Pending).then(|| {
                    if waiting.contains(&row.id) {
                        Phase::Waiting
                    } else if self.queue.is_starting(&row.id) {
                        Phase::Starting
                    } else if self.preparing.is_preparing(&row.id) || row.awaits_worktree {
                        Phase::Preparing
                    } else {
                        Phase::Queued
                    }
                });
                ListEntry { row, output, activity, phase }
            })
            .collect())
    }
}

//! What a queue turn reads of each pending and running task (issue 33):
//! the few columns the engine's queue (`engine/queue.rs`) decides on, not whole records.
//! A burst of 1,000 delegations took many turns, each of which decoded
//! every pending task's launch plan, workshop and run handle.

use rusqlite::params;
use serde::Deserialize;

use super::{Store, TASK_COLUMNS, TaskRecord, TaskStatus, task_from_row};
use crate::error::Result;

/// One task as the queue weighs it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub id: String,
    pub cancel_requested: bool,
    /// Its project's `max_parallel` when it was queued; 0 for no limit.
    pub max_parallel: u32,
    /// The tree a write task in place holds while it runs.
    pub shared_tree: Option<String>,
    /// Its worktree is made before it starts ([`crate::launch::LaunchPlan::prepares_worktree`]).
    pub prepares_worktree: bool,
    /// Its workshop is recorded.
    pub has_workshop: bool,
}

/// The part of a stored launch plan the queue reads; the rest is skipped
/// unparsed. A plan that does not decode counts as the default, as
/// [`crate::launch::LaunchPlan::decode`] makes it (its start then fails).
#[derive(Default, Deserialize)]
struct QueueLaunch {
    #[serde(default)]
    max_parallel: u32,
    #[serde(default)]
    plan: Option<QueuePlan>,
}

#[derive(Deserialize)]
struct QueuePlan {
    #[serde(default)]
    shared_tree: Option<String>,
    #[serde(default)]
    worktree_decided: bool,
}

impl Store {
    /// The tasks in `status`, oldest first, as the queue weighs them.
    pub fn queue_rows(&self, status: TaskStatus) -> Result<Vec<QueueRow>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, cancel_requested, workshop IS NOT NULL, launch_json FROM tasks \
                 WHERE status = ?1 ORDER BY created_ms, id",
            )?;
            let rows = stmt.query_map([status.as_str()], |r| {
                let launch: QueueLaunch = serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default();
                Ok(QueueRow {
                    id: r.get(0)?,
                    cancel_requested: r.get(1)?,
                    has_workshop: r.get(2)?,
                    max_parallel: launch.max_parallel,
                    shared_tree: launch.plan.as_ref().and_then(|p| p.shared_tree.clone()),
                    prepares_worktree: launch.plan.is_some_and(|p| p.worktree_decided),
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The tasks in `statuses`, newest first, at most `limit` of them, as
    /// [`Store::tasks`] reads them, but only those that work in a worktree
    /// and whose changes are undecided: the radar's (issue 33). Read every
    /// tick, so the others (a burst of read-only tasks) are not decoded.
    pub fn worktree_tasks(&self, statuses: &[TaskStatus], limit: u32) -> Result<Vec<TaskRecord>> {
        self.blocking(|conn| {
            // The newest `limit` of these statuses from the status index in
            // order (a plain `ORDER BY … LIMIT` sorts every ended row first:
            // `by_status`), then the filter, as the radar's lookback always did.
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM {} JOIN tasks ON id = pid \
                 WHERE changes_state IS NULL AND json_valid(workshop) \
                 AND json_extract(workshop, '$.isolation') = 'worktree' \
                 ORDER BY pc DESC, pid DESC",
                super::by_status::pick_sql(statuses)
            ))?;
            let rows = stmt.query_map(params![limit, i64::MAX, ""], task_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The whole records of `ids`, in that order; an id not stored is left out.
    pub fn tasks_by_id(&self, ids: &[String]) -> Result<Vec<TaskRecord>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let mut rows = stmt.query_map(params![id], task_from_row)?;
                if let Some(row) = rows.next() {
                    out.push(row?);
                }
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::sample;

    #[test]
    fn the_queue_reads_what_the_whole_record_says() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        for (i, id) in ["b", "a", "c"].into_iter().enumerate() {
            let mut t = sample(id);
            t.created_ms = i as i64;
            t.launch.max_parallel = 3;
            if id == "a" {
                t.launch.plan = Some(crate::launch::WorkshopPlan {
                    isolation: crate::config::IsolationPref::Worktree,
                    label: "fake".into(),
                    allow_inplace_write: false,
                    worktree: Default::default(),
                    shared_tree: Some("/tree".into()),
                    worktree_decided: true,
                    start_tree: None,
                    start_base: None,
                });
            }
            store.insert_task(&t).unwrap();
        }
        store.set_cancel_requested("c").unwrap();
        let rows = store.queue_rows(TaskStatus::Pending).unwrap();
        assert_eq!(rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["b", "a", "c"], "oldest first");
        let whole = store.tasks(&[TaskStatus::Pending], u32::MAX).unwrap();
        for row in &rows {
            let t = whole.iter().find(|t| t.id == row.id).unwrap();
            assert_eq!(row.max_parallel, t.launch.max_parallel);
            assert_eq!(row.shared_tree, t.launch.plan.as_ref().and_then(|p| p.shared_tree.clone()));
            assert_eq!(row.prepares_worktree, t.launch.prepares_worktree());
            assert_eq!(row.has_workshop, t.workshop.is_some());
            assert_eq!(row.cancel_requested, t.cancel_requested);
        }
        assert!(rows[2].cancel_requested);
        assert!(rows[1].prepares_worktree && !rows[0].prepares_worktree);
        assert!(store.queue_rows(TaskStatus::Running).unwrap().is_empty());
        let picked = store.tasks_by_id(&["c".into(), "nope".into(), "b".into()]).unwrap();
        assert_eq!(picked.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["c", "b"]);
    }
}

#[cfg(test)]
mod radar_tests {
    use super::*;
    use crate::store::tests::sample;

    fn workshop(id: &str, isolation: &str) -> crate::workshop::Prepared {
        serde_json::from_value(serde_json::json!({
            "task_id": id, "workspace": "/w", "workdir": "/w", "isolation": isolation, "repo_root": "/w",
        }))
        .unwrap()
    }

    #[test]
    fn the_radar_reads_the_undecided_worktree_tasks_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        for (i, (id, isolation)) in
            [("wt", Some("worktree")), ("in", Some("inplace")), ("none", None), ("done", Some("worktree"))]
                .into_iter()
                .enumerate()
        {
            let mut t = sample(id);
            t.created_ms = i as i64;
            t.workshop = isolation.map(|iso| workshop(id, iso));
            store.insert_task(&t).unwrap();
        }
        store.set_changes_state("done", crate::store::ChangesState::Discarded).unwrap();
        let pending = [TaskStatus::Pending];
        let ids = |v: Vec<TaskRecord>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(store.worktree_tasks(&pending, u32::MAX).unwrap()), ["wt"]);
        assert_eq!(store.worktree_tasks(&pending, u32::MAX).unwrap()[0], store.task("wt").unwrap().unwrap());
        // The lookback counts every task in the statuses, newest first.
        assert!(store.worktree_tasks(&pending, 3).unwrap().is_empty(), "the 3 newest are not undecided worktrees");
        assert_eq!(ids(store.worktree_tasks(&pending, 4).unwrap()), ["wt"]);
        assert!(store.worktree_tasks(&[TaskStatus::Running], u32::MAX).unwrap().is_empty());
    }
}

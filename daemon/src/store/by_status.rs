//! Tasks in some statuses, newest first, read from an index in order (issue 33 item 3).
//!
//! `status IN (…) ORDER BY created_ms DESC, id DESC LIMIT n` made SQLite read every row of
//! those statuses and sort whole rows before the limit: the radar's newest 500 ended tasks
//! (every round, and the first one at the daemon's start) cost a read of the whole history
//! on a store of 100,000 ended tasks. Here each status's newest `n` ids come from the
//! covering index `(status, created_ms, id)` in order, the lists are merged, and only the
//! `n` rows picked are read. A page may start below a `(created_ms, id)` key, so that a
//! walk over the whole history ([`Store::tasks_before`]) holds the connection one page at
//! a time and keeps one page of records in memory.

use rusqlite::{Connection, params};

use super::{Store, TASK_COLUMNS, TaskRecord, TaskStatus, task_from_row};
use crate::error::Result;

/// Makes the index if it is not there yet (on every open, as `store/steers.rs` says why).
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("CREATE INDEX IF NOT EXISTS tasks_by_status_created_id ON tasks (status, created_ms, id);")
}

/// The ids picked, as a subquery with the columns `pid` and `pc` (`created_ms`): each
/// status's newest `?1` below the key `(?2, ?3)` from the index in order, merged, the newest
/// `?1` of them. Join `tasks ON id = pid` and order by `pc DESC, pid DESC` to read their rows.
pub(super) fn pick_sql(statuses: &[TaskStatus]) -> String {
    let picks = statuses
        .iter()
        .map(|s| {
            format!(
                "SELECT * FROM (SELECT id AS pid, created_ms AS pc FROM tasks WHERE status = '{}' \
                 AND (created_ms, id) < (?2, ?3) ORDER BY created_ms DESC, id DESC LIMIT ?1)",
                s.as_str()
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    format!("({picks} ORDER BY pc DESC, pid DESC LIMIT ?1)")
}

/// The statement: `?1` the limit, `(?2, ?3)` the key every row is below.
fn sql(statuses: &[TaskStatus]) -> String {
    format!("SELECT {TASK_COLUMNS} FROM {} JOIN tasks ON id = pid ORDER BY pc DESC, pid DESC", pick_sql(statuses))
}

impl Store {
    /// Tasks in `statuses` (at least one), newest first, at most `limit`, each
    /// older than `before` (`(created_ms, id)`) when it is given.
    pub fn tasks_before(
        &self,
        statuses: &[TaskStatus],
        before: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<TaskRecord>> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        // No id is below "", and no task is created at i64::MAX: every task is below.
        let (ms, id) = before.unwrap_or((i64::MAX, ""));
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&sql(statuses))?;
            let rows = stmt.query_map(params![limit, ms, id], task_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::sample;

    /// Pages walk every task of the statuses asked, newest first (ties by id), each once,
    /// and no other.
    #[test]
    fn pages_below_a_key_walk_every_task_of_the_statuses_once_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let statuses = [TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Pending];
        for i in 0..23 {
            let mut t = sample(&format!("t_{i:02}"));
            // Equal creation times across statuses, so ties are broken by id.
            t.created_ms = i / 3;
            t.status = [TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Running][i as usize % 3];
            store.insert_task(&t).unwrap();
        }
        let ended = &statuses[..2];
        let mut walked = Vec::new();
        let mut before: Option<(i64, String)> = None;
        loop {
            let page = store.tasks_before(ended, before.as_ref().map(|(ms, id)| (*ms, id.as_str())), 4).unwrap();
            let Some(last) = page.last() else { break };
            assert!(page.len() <= 4);
            before = Some((last.created_ms, last.id.clone()));
            walked.extend(page.into_iter().map(|t| (t.created_ms, t.id)));
        }
        let mut expected: Vec<(i64, String)> =
            (0..23).filter(|i| i % 3 != 2).map(|i| (i64::from(i) / 3, format!("t_{i:02}"))).collect();
        expected.sort_by(|a, b| b.cmp(a));
        assert_eq!(walked, expected);
        let listed: Vec<(i64, String)> =
            store.tasks(ended, u32::MAX).unwrap().into_iter().map(|t| (t.created_ms, t.id)).collect();
        assert_eq!(listed, expected);
        let newest: Vec<String> = store.tasks(&statuses, 3).unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(newest, ["t_22", "t_21", "t_19"]);
        assert!(store.tasks_before(&[], None, 10).unwrap().is_empty());
    }

    /// The plan of every statement this module makes reads `tasks` through a covering
    /// index, or one row by its id: never a scan of the table, never rows of a status in
    /// an index without their order (which sorts every row of the status before the limit).
    #[test]
    fn statuses_are_read_in_index_order_and_only_picked_rows_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let plans: Vec<String> = store.blocking(|conn| {
            let mut plans = Vec::new();
            for statuses in [
                &[TaskStatus::Pending, TaskStatus::Running][..],
                &[TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled, TaskStatus::TimedOut],
                &[TaskStatus::Running],
            ] {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", sql(statuses))).unwrap();
                let rows = stmt.query_map(params![500, i64::MAX, ""], |r| r.get::<_, String>(3)).unwrap();
                plans.extend(rows.map(|r| r.unwrap()));
            }
            plans
        });
        let reads: Vec<&String> = plans.iter().filter(|p| p.contains(" tasks ")).collect();
        assert!(!reads.is_empty(), "{plans:#?}");
        for p in reads {
            assert!(
                p.contains("COVERING INDEX tasks_by_status_created_id") || p.contains("(id=?)"),
                "a read of tasks that is neither the ordered index nor one row: {p}\n{plans:#?}"
            );
        }
    }
}

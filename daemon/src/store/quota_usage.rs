//! What observed usage counts (issue 32, item 3; `crate::quota_observed`): the tasks started
//! since a time, each with its agent and the tokens its report gives. Read from the tasks and
//! reports the store already holds; the index on `started_ms` is made on every open
//! (`CREATE … IF NOT EXISTS`), as `store/steers.rs` explains, so a large store is not scanned.

use rusqlite::{Connection, params};

use super::Store;
use crate::error::Result;
use crate::quota_observed::Run;

/// Makes the index if it is not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("CREATE INDEX IF NOT EXISTS tasks_by_started ON tasks (started_ms);")
}

impl Store {
    /// The tasks started after `since_ms`, oldest first, with the input and output tokens their
    /// reports give (0 without a report or a figure).
    pub fn runs_since(&self, since_ms: i64) -> Result<Vec<Run>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT t.agent, t.started_ms,
                    COALESCE(json_extract(r.body, '$.usage.input_tokens'), 0)
                    + COALESCE(json_extract(r.body, '$.usage.output_tokens'), 0)
                 FROM tasks t LEFT JOIN reports r ON r.task_id = t.id AND json_valid(r.body)
                 WHERE t.started_ms > ?1 ORDER BY t.started_ms",
            )?;
            let rows = stmt.query_map(params![since_ms], |r| {
                Ok(Run { agent: r.get(0)?, started_ms: r.get(1)?, tokens: r.get::<_, i64>(2)?.max(0) as u64 })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_since_a_time_carry_their_reports_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let run = crate::runner::RunHandle::Local { pid: 1, start: None, boot: None };
        for (id, started) in [("t_old", 10), ("t_a", 100), ("t_b", 200)] {
            store.insert_task(&crate::store::tests::sample(id)).unwrap();
            store.set_running(id, started, &run, &[]).unwrap();
        }
        store
            .blocking(|conn| {
                conn.execute(
                    "INSERT INTO reports (task_id, source, status, body, created_ms) VALUES
                     ('t_a', 'agent', 'success', '{\"usage\":{\"input_tokens\":1200,\"output_tokens\":34}}', 1),
                     ('t_old', 'agent', 'success', 'not json', 1)",
                    [],
                )?;
                Ok::<(), rusqlite::Error>(())
            })
            .unwrap();
        let runs = store.runs_since(50).unwrap();
        let seen: Vec<(&str, i64, u64)> =
            runs.iter().map(|r| (r.started_ms, r.tokens)).map(|(s, t)| ("", s, t)).collect();
        assert_eq!(seen, [("", 100, 1234), ("", 200, 0)]);
        assert_eq!(store.runs_since(0).unwrap().len(), 3, "a report that is no JSON counts no tokens");
    }
}

//! The store's tables of the review loop (issue 32, item 2; `engine/review.rs`):
//! one row per loop (where it stands, the task of its current step), one per
//! member task (its loop, round and part), each reviewer's review as read at
//! its end, and every finding with its state.
//!
//! A step's task id is chosen and stored with the step, in one transaction,
//! before the task is delegated: a daemon that dies in between finds the
//! step and delegates its task under that id then, so a round starts once.
//! Made by [`ensure`] on every open (`CREATE … IF NOT EXISTS`), as `store/steers.rs` says why.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{GroupRecord, Store, TaskRecord};
use crate::error::Result;

/// Makes the tables if they are not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS review_loops (
            id TEXT PRIMARY KEY,
            group_id TEXT NOT NULL,
            review_by TEXT NOT NULL,
            rounds INTEGER NOT NULL,
            round INTEGER NOT NULL,
            state TEXT NOT NULL,
            worker TEXT NOT NULL,
            reviewer TEXT,
            prev_worker TEXT,
            note TEXT NOT NULL DEFAULT '',
            created_ms INTEGER NOT NULL
        );
        CREATE INDEX IF NOT EXISTS review_loops_by_state ON review_loops(state);
        CREATE TABLE IF NOT EXISTS review_members (
            task_id TEXT PRIMARY KEY,
            loop_id TEXT NOT NULL,
            round INTEGER NOT NULL,
            part TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS review_results (
            task_id TEXT PRIMARY KEY,
            body TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS review_findings (
            loop_id TEXT NOT NULL,
            round INTEGER NOT NULL,
            reviewer_task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            file TEXT NOT NULL,
            line INTEGER NOT NULL,
            hunk TEXT NOT NULL,
            severity TEXT NOT NULL,
            title TEXT NOT NULL,
            detail TEXT NOT NULL,
            state TEXT NOT NULL,
            PRIMARY KEY (reviewer_task_id, idx)
        );
        CREATE INDEX IF NOT EXISTS review_findings_by_loop ON review_findings(loop_id);",
    )
}

/// A review loop as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewLoop {
    /// The first worker task's id.
    pub id: String,
    pub group_id: String,
    /// The agent or role named by `review_by`.
    pub review_by: String,
    pub rounds: u32,
    /// The round under way, from 1.
    pub round: u32,
    /// `working`, `reviewing` (both under way), `approved`, `partial` or `stopped`.
    pub state: String,
    /// The task of the round's worker run.
    pub worker: String,
    /// The task of the round's reviewer run, once the worker's ended.
    pub reviewer: Option<String>,
    /// Why it stopped, or what it ended with.
    pub note: String,
    /// The worker task the round's worker run continues (from round 2).
    pub prev_worker: Option<String>,
}

impl ReviewLoop {
    /// Whether the loop is under way.
    pub fn active(&self) -> bool {
        self.state == "working" || self.state == "reviewing"
    }
}

/// What part a task plays in a loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewMember {
    pub loop_id: String,
    pub round: u32,
    /// `worker` or `reviewer`.
    pub part: String,
}

/// One finding as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingRow {
    pub round: u32,
    pub reviewer_task_id: String,
    pub idx: u32,
    pub file: String,
    pub line: u64,
    pub hunk: String,
    pub severity: String,
    pub title: String,
    pub detail: String,
    /// `open`, `stale`, `sent` or `resolved`.
    pub state: String,
}

/// What a reviewer's end leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewStep {
    /// The next round's worker run, under this id, continues the worker.
    Continue { worker: String },
    /// The loop ends in `state` with `note`; the last worker's report
    /// becomes `report` (`(task id, status, body)`) when given.
    End { state: String, note: String, report: Option<(String, String, String)> },
}

const LOOP_COLUMNS: &str = "id, group_id, review_by, rounds, round, state, worker, reviewer, note, prev_worker";

fn loop_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReviewLoop> {
    Ok(ReviewLoop {
        id: r.get(0)?,
        group_id: r.get(1)?,
        review_by: r.get(2)?,
        rounds: r.get(3)?,
        round: r.get(4)?,
        state: r.get(5)?,
        worker: r.get(6)?,
        reviewer: r.get(7)?,
        note: r.get(8)?,
        prev_worker: r.get(9)?,
    })
}

fn add_member(tx: &Transaction<'_>, lp: &ReviewLoop, task: &str, round: u32, part: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR IGNORE INTO review_members (task_id, loop_id, round, part) VALUES (?1, ?2, ?3, ?4)",
        params![task, lp.id, round, part],
    )?;
    Ok(())
}

impl Store {
    /// Stores a reviewed write task (its round-1 worker run), its group and
    /// its loop in one transaction.
    pub fn insert_reviewed(&self, task: &TaskRecord, lp: &ReviewLoop, group: &GroupRecord) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            Self::insert_task_on(&tx, task)?;
            super::fanout::insert_group_on(&tx, group)?;
            tx.execute(
                "INSERT INTO review_loops (id, group_id, review_by, rounds, round, state, worker, reviewer, note, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![lp.id, lp.group_id, lp.review_by, lp.rounds, lp.round, lp.state, lp.worker, lp.reviewer, lp.note, task.created_ms],
            )?;
            tx.execute(
                "INSERT INTO review_members (task_id, loop_id, round, part) VALUES (?1, ?2, 1, 'worker')",
                params![task.id, lp.id],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Makes a delegated task of a loop a member of the loop's group (once;
    /// after its delegation, so the group never names a task that is not).
    pub fn join_review_group(&self, group_id: &str, task: &str) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            let present: Option<i64> = tx
                .query_row(
                    "SELECT position FROM group_tasks WHERE group_id = ?1 AND task_id = ?2",
                    params![group_id, task],
                    |r| r.get(0),
                )
                .optional()?;
            if present.is_none() {
                tx.execute(
                    "INSERT INTO group_tasks (group_id, position, task_id)
                     SELECT ?1, COALESCE(MAX(position) + 1, 0), ?2 FROM group_tasks WHERE group_id = ?1",
                    params![group_id, task],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// A loop by id.
    pub fn review_loop(&self, id: &str) -> Result<Option<ReviewLoop>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(&format!("SELECT {LOOP_COLUMNS} FROM review_loops WHERE id = ?1"), params![id], loop_of)
                .optional()?)
        })
    }

    /// The loop whose group is `group_id`, if any.
    pub fn review_loop_of_group(&self, group_id: &str) -> Result<Option<ReviewLoop>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {LOOP_COLUMNS} FROM review_loops WHERE group_id = ?1"),
                    params![group_id],
                    loop_of,
                )
                .optional()?)
        })
    }

    /// The loops under way.
    pub fn active_review_loops(&self) -> Result<Vec<ReviewLoop>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {LOOP_COLUMNS} FROM review_loops WHERE state IN ('working', 'reviewing') ORDER BY created_ms"
            ))?;
            let rows = stmt.query_map([], loop_of)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The loop, round and part of a task, if it is a member of a loop.
    pub fn review_member(&self, task_id: &str) -> Result<Option<ReviewMember>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row(
                    "SELECT loop_id, round, part FROM review_members WHERE task_id = ?1",
                    params![task_id],
                    |r| Ok(ReviewMember { loop_id: r.get(0)?, round: r.get(1)?, part: r.get(2)? }),
                )
                .optional()?)
        })
    }

    /// The reviewer's step of the round: a compare-and-set from `working`
    /// on `worker`, with the reviewer's id chosen ahead. False when the step
    /// was taken already.
    pub fn review_step_reviewer(&self, lp: &ReviewLoop, reviewer: &str) -> Result<bool> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            let n = tx.execute(
                "UPDATE review_loops SET state = 'reviewing', reviewer = ?2
                 WHERE id = ?1 AND state = 'working' AND worker = ?3 AND round = ?4",
                params![lp.id, reviewer, lp.worker, lp.round],
            )?;
            if n == 1 {
                add_member(&tx, lp, reviewer, lp.round, "reviewer")?;
            }
            tx.commit()?;
            Ok(n == 1)
        })
    }

    /// Keeps a reviewer's review as read at its end (JSON of `review::ReviewOutcome`).
    pub fn put_review_result(&self, task_id: &str, body: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "INSERT OR REPLACE INTO review_results (task_id, body) VALUES (?1, ?2)",
                params![task_id, body],
            )?;
            Ok(())
        })
    }

    /// A reviewer's review, once it ended.
    pub fn review_result(&self, task_id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT body FROM review_results WHERE task_id = ?1", params![task_id], |r| r.get(0))
                .optional()?)
        })
    }

    /// A reviewer's end, in one transaction: the round's findings stored,
    /// the earlier rounds' sent findings resolved, those of `send` marked
    /// sent, and the loop's next step, a compare-and-set from `reviewing` on
    /// the reviewer. False (nothing stored) when the step was taken already.
    pub fn review_round_ended(
        &self,
        lp: &ReviewLoop,
        reviewer: &str,
        findings: &[FindingRow],
        next: &ReviewStep,
    ) -> Result<bool> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            let n = match next {
                ReviewStep::Continue { worker } => tx.execute(
                    "UPDATE review_loops SET state = 'working', round = round + 1, prev_worker = worker, worker = ?3,
                     reviewer = NULL WHERE id = ?1 AND state = 'reviewing' AND reviewer = ?2",
                    params![lp.id, reviewer, worker],
                )?,
                ReviewStep::End { state, note, .. } => tx.execute(
                    "UPDATE review_loops SET state = ?3, note = ?4 WHERE id = ?1 AND state = 'reviewing' AND reviewer = ?2",
                    params![lp.id, reviewer, state, note],
                )?,
            };
            if n != 1 {
                return Ok(false);
            }
            tx.execute(
                "UPDATE review_findings SET state = 'resolved' WHERE loop_id = ?1 AND state = 'sent'",
                params![lp.id],
            )?;
            for f in findings {
                tx.execute(
                    "INSERT OR REPLACE INTO review_findings
                     (loop_id, round, reviewer_task_id, idx, file, line, hunk, severity, title, detail, state)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params![
                        lp.id,
                        f.round,
                        f.reviewer_task_id,
                        f.idx,
                        f.file,
                        f.line as i64,
                        f.hunk,
                        f.severity,
                        f.title,
                        f.detail,
                        f.state
                    ],
                )?;
            }
            match next {
                ReviewStep::Continue { worker } => add_member(&tx, lp, worker, lp.round + 1, "worker")?,
                ReviewStep::End { report: Some((task, status, body)), .. } => {
                    tx.execute(
                        "UPDATE reports SET status = ?2, body = ?3 WHERE task_id = ?1",
                        params![task, status, body],
                    )?;
                }
                ReviewStep::End { .. } => {}
            }
            tx.commit()?;
            Ok(true)
        })
    }

    /// Ends a loop whose worker step cannot go on (the worker failed, a
    /// step could not be delegated); a compare-and-set on its state and worker.
    pub fn review_stopped(&self, lp: &ReviewLoop, note: &str) -> Result<bool> {
        self.blocking(|conn| {
            let n = conn.execute(
                "UPDATE review_loops SET state = 'stopped', note = ?4 WHERE id = ?1 AND state = ?2 AND worker = ?3",
                params![lp.id, lp.state, lp.worker, note],
            )?;
            Ok(n == 1)
        })
    }

    /// Every finding of a loop, by round and order.
    pub fn review_findings(&self, loop_id: &str) -> Result<Vec<FindingRow>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT round, reviewer_task_id, idx, file, line, hunk, severity, title, detail, state
                 FROM review_findings WHERE loop_id = ?1 ORDER BY round, idx",
            )?;
            let rows = stmt.query_map(params![loop_id], |r| {
                Ok(FindingRow {
                    round: r.get(0)?,
                    reviewer_task_id: r.get(1)?,
                    idx: r.get(2)?,
                    file: r.get(3)?,
                    line: r.get::<_, i64>(4)?.max(0) as u64,
                    hunk: r.get(5)?,
                    severity: r.get(6)?,
                    title: r.get(7)?,
                    detail: r.get(8)?,
                    state: r.get(9)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(reviewer: &str, idx: u32, state: &str) -> FindingRow {
        FindingRow {
            round: 1,
            reviewer_task_id: reviewer.to_owned(),
            idx,
            file: "a.txt".to_owned(),
            line: 1,
            hunk: "+a".to_owned(),
            severity: "high".to_owned(),
            title: format!("f{idx}"),
            detail: String::new(),
            state: state.to_owned(),
        }
    }

    #[test]
    fn each_step_is_taken_once_and_the_group_grows_with_the_rounds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        let sample = super::super::tests::sample;
        let lp = ReviewLoop {
            id: "t_w1".to_owned(),
            group_id: "g_000000000001".to_owned(),
            review_by: "rev".to_owned(),
            rounds: 3,
            round: 1,
            state: "working".to_owned(),
            worker: "t_w1".to_owned(),
            reviewer: None,
            note: String::new(),
            prev_worker: None,
        };
        let group = GroupRecord {
            id: lp.group_id.clone(),
            created_ms: 1,
            objective: "o".to_owned(),
            workspace: "/w".to_owned(),
            task_ids: vec!["t_w1".to_owned()],
        };
        store.insert_reviewed(&sample("t_w1"), &lp, &group).unwrap();
        assert_eq!(store.active_review_loops().unwrap(), std::slice::from_ref(&lp));
        assert!(store.review_step_reviewer(&lp, "t_r1").unwrap());
        assert!(!store.review_step_reviewer(&lp, "t_r1b").unwrap(), "a step is taken once");
        let lp = store.review_loop("t_w1").unwrap().unwrap();
        assert_eq!((lp.state.as_str(), lp.reviewer.as_deref()), ("reviewing", Some("t_r1")));
        let next = ReviewStep::Continue { worker: "t_w2".to_owned() };
        let found = [finding("t_r1", 0, "sent"), finding("t_r1", 1, "stale")];
        assert!(store.review_round_ended(&lp, "t_r1", &found, &next).unwrap());
        assert!(!store.review_round_ended(&lp, "t_r1", &found, &next).unwrap(), "once");
        let lp = store.review_loop("t_w1").unwrap().unwrap();
        assert_eq!((lp.round, lp.worker.as_str(), lp.state.as_str()), (2, "t_w2", "working"));
        assert_eq!(lp.prev_worker.as_deref(), Some("t_w1"));
        assert_eq!(store.group(&lp.group_id).unwrap().unwrap().task_ids, ["t_w1"], "delegated ones only");
        for t in ["t_r1", "t_w2", "t_r1"] {
            store.join_review_group(&lp.group_id, t).unwrap();
        }
        assert_eq!(store.group(&lp.group_id).unwrap().unwrap().task_ids, ["t_w1", "t_r1", "t_w2"]);
        assert_eq!(
            store.review_member("t_w2").unwrap(),
            Some(ReviewMember { loop_id: "t_w1".to_owned(), round: 2, part: "worker".to_owned() })
        );
        // Round 2's reviewer approves: round 1's sent finding is resolved, the stale one stays.
        assert!(store.review_step_reviewer(&lp, "t_r2").unwrap());
        let lp = store.review_loop("t_w1").unwrap().unwrap();
        let end = ReviewStep::End { state: "approved".to_owned(), note: String::new(), report: None };
        assert!(store.review_round_ended(&lp, "t_r2", &[], &end).unwrap());
        let states: Vec<String> = store.review_findings("t_w1").unwrap().into_iter().map(|f| f.state).collect();
        assert_eq!(states, ["resolved", "stale"]);
        assert!(store.active_review_loops().unwrap().is_empty());
    }
}

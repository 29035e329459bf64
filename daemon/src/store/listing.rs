//! The task list as one query: the light rows the dashboard's list shows
//! (no launch document, no report body, no per-task follow-up queries),
//! with each task's open questions and, for a queued task, its place in the
//! queue, computed by SQLite in the same statement. Building a full
//! `TaskView` per task made the first paint of 1,000 tasks take 1.6 s.

use rusqlite::Row;

use super::{Store, TaskStatus};
use crate::error::Result;
use crate::launch::LaunchPlan;

/// One task as the list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRow {
    pub id: String,
    pub status: TaskStatus,
    pub agent: String,
    pub role: Option<String>,
    pub mode: String,
    pub isolation: String,
    pub model: Option<String>,
    pub objective: String,
    pub workspace: String,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub blocker: Option<String>,
    pub event_count: u64,
    pub changes_state: Option<String>,
    /// The report's status, for an ended task that has one.
    pub report_status: Option<String>,
    /// How many questions its report lists, and its verification's outcome
    /// (for the verdict, issue 30).
    pub report_questions: usize,
    pub verification: Option<String>,
    /// The open questions, oldest first: (question id, question, options).
    pub questions: Vec<(String, String, Vec<String>)>,
    /// For a pending task: how many pending tasks were created before it.
    pub queue_position: Option<u32>,
    /// For a pending task: whether its worktree is made before it queues
    /// and is not made yet (from its launch, read for pending tasks only).
    pub awaits_worktree: bool,
}

/// The newest tasks first, read from an index in order rather than sorted.
pub(super) fn ensure(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute_batch("CREATE INDEX IF NOT EXISTS tasks_by_created_id ON tasks (created_ms, id);")
}

// Only the tasks that can be shown are joined and sorted (`pick`): those with
// an open question, and the newest `limit`. A task of the first `limit` rows
// that has no open question is among the newest `limit` of all, so nothing
// shown is lost; sorting every task made the first paint of a store of
// 100,000 tasks take 1.7 s (issue 33).
const LIST_SQL: &str = "WITH q AS (
        SELECT task_id, json_group_array(json_array(question_id, question, options)) AS open
        FROM (SELECT * FROM questions WHERE answer IS NULL ORDER BY asked_ms) GROUP BY task_id
    ), pos AS (
        SELECT id, ROW_NUMBER() OVER (ORDER BY created_ms, id) - 1 AS n FROM tasks WHERE status = 'pending'
    ), pick AS (
        SELECT id FROM (SELECT id FROM tasks ORDER BY created_ms DESC, id DESC LIMIT ?1)
        UNION SELECT task_id FROM q
    )
    SELECT t.id, t.status, t.agent, t.role, t.mode, t.isolation, t.model, t.objective, t.workspace,
        t.created_ms, t.started_ms, t.finished_ms, t.exit_code, t.error, t.blocker, t.event_count,
        t.changes_state, r.status, q.open, pos.n,
        CASE WHEN t.status = 'pending' AND t.workshop IS NULL THEN t.launch_json END,
        CASE WHEN r.status = 'blocked' AND json_valid(r.body) THEN json_array_length(r.body, '$.questions') END,
        CASE WHEN instr(r.body, '\"verification\"') > 0 AND json_valid(r.body)
            THEN json_extract(r.body, '$.verification.outcome') END
    FROM pick JOIN tasks t ON t.id = pick.id LEFT JOIN reports r ON r.task_id = t.id LEFT JOIN q ON q.task_id = t.id
        LEFT JOIN pos ON pos.id = t.id
    ORDER BY q.open IS NULL, t.created_ms DESC, t.id DESC LIMIT ?1";

impl Store {
    /// The newest `limit` tasks as list rows, those waiting on an answer first.
    pub fn list_rows(&self, limit: u32) -> Result<Vec<ListRow>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(LIST_SQL)?;
            let rows = stmt.query_map([limit], row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The ids of the newest `limit` fan-out groups, newest first.
    pub fn recent_group_ids(&self, limit: u32) -> Result<Vec<String>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached("SELECT id FROM groups ORDER BY created_ms DESC, id DESC LIMIT ?1")?;
            let rows = stmt.query_map([limit], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

fn row(r: &Row<'_>) -> rusqlite::Result<ListRow> {
    let status: String = r.get(1)?;
    let open: Option<String> = r.get(18)?;
    let questions = open
        .and_then(|o| serde_json::from_str::<Vec<(String, String, String)>>(&o).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|(id, q, options)| (id, q, serde_json::from_str(&options).unwrap_or_default()))
        .collect();
    let launch: Option<String> = r.get(20)?;
    Ok(ListRow {
        id: r.get(0)?,
        // As task_from_row: an unknown status is a newer build's; show it failed.
        status: TaskStatus::parse(&status).unwrap_or(TaskStatus::Failed),
        agent: r.get(2)?,
        role: r.get(3)?,
        mode: r.get(4)?,
        isolation: r.get(5)?,
        model: r.get(6)?,
        objective: r.get(7)?,
        workspace: r.get(8)?,
        created_ms: r.get(9)?,
        started_ms: r.get(10)?,
        finished_ms: r.get(11)?,
        exit_code: r.get(12)?,
        error: r.get(13)?,
        blocker: r.get(14)?,
        event_count: r.get::<_, i64>(15)? as u64,
        changes_state: r.get(16)?,
        report_status: r.get(17)?,
        report_questions: r.get::<_, Option<i64>>(21)?.unwrap_or(0).max(0) as usize,
        verification: r.get(22)?,
        questions,
        queue_position: r.get::<_, Option<i64>>(19)?.map(|n| n as u32),
        awaits_worktree: launch.is_some_and(|l| LaunchPlan::decode(&l).prepares_worktree()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::QuestionRecord;
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn rows_put_open_questions_first_and_number_the_queue_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("caesar.db")).unwrap();
        for (i, id) in ["t_a", "t_b", "t_c", "t_d"].iter().enumerate() {
            let mut t = sample(id);
            t.created_ms = 10 + i as i64;
            if *id == "t_b" {
                t.status = TaskStatus::Running;
            }
            s.insert_task(&t).unwrap();
        }
        let q = |id: &str, qid: &str, at| QuestionRecord {
            task_id: id.into(),
            question_id: qid.into(),
            question: format!("{qid}?"),
            options: vec!["yes".into(), "no".into()],
            asked_ms: at,
            answer: None,
        };
        s.insert_question(&q("t_b", "q_2", 2)).unwrap();
        s.insert_question(&q("t_b", "q_1", 1)).unwrap();
        s.insert_question(&q("t_c", "q_3", 3)).unwrap();
        assert!(s.answer_question("t_c", "q_3", "yes", 4).unwrap());

        let rows = s.list_rows(10).unwrap();
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["t_b", "t_d", "t_c", "t_a"], "the asking task first, then newest first");
        let b = &rows[0];
        assert_eq!(b.questions.iter().map(|q| q.0.as_str()).collect::<Vec<_>>(), ["q_1", "q_2"], "oldest first");
        assert_eq!(b.questions[0].2, ["yes", "no"]);
        assert_eq!(b.queue_position, None, "a running task has no place in the queue");
        let place = |id: &str| rows.iter().find(|r| r.id == id).unwrap().queue_position;
        assert_eq!((place("t_a"), place("t_c"), place("t_d")), (Some(0), Some(1), Some(2)));
        assert!(rows[2].questions.is_empty(), "an answered question is not open");
        assert_eq!(s.list_rows(2).unwrap().len(), 2);
    }

    #[test]
    fn an_old_task_waiting_on_an_answer_is_shown_past_the_newest_ones() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("caesar.db")).unwrap();
        for i in 0..6 {
            let mut t = sample(&format!("t_{i}"));
            // Two tasks share each instant: the id orders them.
            t.created_ms = 10 + i / 2;
            s.insert_task(&t).unwrap();
        }
        let q = QuestionRecord {
            task_id: "t_0".into(),
            question_id: "q_1".into(),
            question: "which?".into(),
            options: vec![],
            asked_ms: 1,
            answer: None,
        };
        s.insert_question(&q).unwrap();
        let ids = |limit| s.list_rows(limit).unwrap().into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(3), ["t_0", "t_5", "t_4"], "the asking task, then the newest");
        assert_eq!(ids(1), ["t_0"]);
        assert_eq!(ids(10), ["t_0", "t_5", "t_4", "t_3", "t_2", "t_1"], "each task once");
    }
}

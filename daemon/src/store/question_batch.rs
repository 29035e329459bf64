//! Questions written in the same transaction as the events that carry them (issue 15, the
//! permission round trip's latency): each SQLite commit is an fsync (`synchronous=FULL`, about
//! 2 ms on this kind of disk), and a permission request used to cost one for the question and
//! one for its batch of events, an answer one for itself and one for its `answer` event. One
//! transaction each keeps every guarantee (durable before it shows, exactly one answer) for the
//! price of one commit.

use rusqlite::params;

use super::{QuestionRecord, Store, insert_events};
use crate::error::{Error, Result};
use crate::oacp::EventRecord;

impl Store {
    /// Stores `questions` (new ones, asked by the agent) with the batch of `events` that shows
    /// them and the log offset after it, in one transaction.
    pub fn append_events_with_questions(
        &self,
        id: &str,
        events: &[EventRecord],
        new_offset: Option<u64>,
        questions: &[QuestionRecord],
    ) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            for q in questions {
                let options = serde_json::to_string(&q.options).map_err(|e| Error::Internal(e.to_string()))?;
                tx.execute(
                "INSERT INTO questions (task_id, question_id, question, options, asked_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![q.task_id, q.question_id, q.question, options, q.asked_ms],
            )?;
            }
            insert_events(&tx, id, events, new_offset)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Answers a question that has no answer yet and stores `events` (its `answer` event) in the
    /// same transaction. Of two concurrent answers exactly one gets `true`; the other stores
    /// nothing.
    pub fn answer_question_with_events(
        &self,
        task_id: &str,
        question_id: &str,
        answer: &str,
        at_ms: i64,
        events: &[EventRecord],
    ) -> Result<bool> {
        self.blocking(|conn| {
        let tx = conn.transaction()?;
        let changed = tx.execute(
            "UPDATE questions SET answer = ?3, answered_ms = ?4 WHERE task_id = ?1 AND question_id = ?2 AND answer IS NULL",
            params![task_id, question_id, answer, at_ms],
        )?;
        if changed != 1 {
            return Ok(false);
        }
        insert_events(&tx, task_id, events, None)?;
        tx.commit()?;
        Ok(true)
    })
    }
}

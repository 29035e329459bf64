//! The store's tables of issue 17's fan-out concerns: the outcome of each
//! task's verification (written by the daemon, never by the agent, so that
//! a task directory the agent can write cannot forge a pass) and fan-out
//! groups with their member tasks.

use rusqlite::{OptionalExtension, params};

use super::Store;
use crate::error::Result;

/// The migration that creates these tables.
pub(super) const MIGRATION: &str = "CREATE TABLE task_verification (
        task_id TEXT PRIMARY KEY,
        body TEXT NOT NULL,
        created_ms INTEGER NOT NULL
    );
    CREATE TABLE groups (
        id TEXT PRIMARY KEY,
        created_ms INTEGER NOT NULL,
        objective TEXT NOT NULL,
        workspace TEXT NOT NULL
    );
    CREATE TABLE group_tasks (
        group_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        task_id TEXT NOT NULL,
        PRIMARY KEY (group_id, position)
    );
    CREATE INDEX group_tasks_by_task ON group_tasks(task_id);";

/// A fan-out group as stored: one objective, one task per member.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRecord {
    pub id: String,
    pub created_ms: i64,
    pub objective: String,
    pub workspace: String,
    /// Member task ids, in the order they were delegated.
    pub task_ids: Vec<String>,
}

impl Store {
    /// Stores a task's verification outcome (JSON of [`crate::oacp::Verification`]).
    pub fn put_verification(&self, task_id: &str, body: &str, at_ms: i64) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "INSERT OR REPLACE INTO task_verification (task_id, body, created_ms) VALUES (?1, ?2, ?3)",
                params![task_id, body, at_ms],
            )?;
            Ok(())
        })
    }

    /// A task's stored verification outcome, if its verification ended.
    pub fn verification(&self, task_id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT body FROM task_verification WHERE task_id = ?1", params![task_id], |r| r.get(0))
                .optional()?)
        })
    }

    /// Records a group and its members in one transaction.
    pub fn insert_group(&self, g: &GroupRecord) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            insert_group_on(&tx, g)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Records a group's member tasks and the group in one transaction: a
    /// failure (or a crash) anywhere leaves neither a half group nor
    /// members without their group.
    pub fn insert_group_with_tasks(&self, g: &GroupRecord, tasks: &[super::TaskRecord]) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            for t in tasks {
                Store::insert_task_on(&tx, t)?;
            }
            insert_group_on(&tx, g)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// A group by id.
    pub fn group(&self, id: &str) -> Result<Option<GroupRecord>> {
        self.blocking(|conn| {
            let head: Option<(String, i64, String, String)> = conn
                .query_row("SELECT id, created_ms, objective, workspace FROM groups WHERE id = ?1", params![id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()?;
            let Some((id, created_ms, objective, workspace)) = head else { return Ok(None) };
            let mut stmt = conn.prepare("SELECT task_id FROM group_tasks WHERE group_id = ?1 ORDER BY position")?;
            let task_ids = stmt.query_map(params![id], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(Some(GroupRecord { id, created_ms, objective, workspace, task_ids }))
        })
    }

    /// The group a task belongs to, if any.
    pub fn group_of(&self, task_id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            Ok(conn
                .query_row("SELECT group_id FROM group_tasks WHERE task_id = ?1", params![task_id], |r| r.get(0))
                .optional()?)
        })
    }
}

/// The group's row and its members', on a transaction of the caller's.
pub(super) fn insert_group_on(conn: &rusqlite::Connection, g: &GroupRecord) -> Result<()> {
    conn.execute(
        "INSERT INTO groups (id, created_ms, objective, workspace) VALUES (?1, ?2, ?3, ?4)",
        params![g.id, g.created_ms, g.objective, g.workspace],
    )?;
    for (i, t) in g.task_ids.iter().enumerate() {
        conn.execute(
            "INSERT INTO group_tasks (group_id, position, task_id) VALUES (?1, ?2, ?3)",
            params![g.id, i as i64, t],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::sample;

    fn group(id: &str, tasks: &[&str]) -> GroupRecord {
        GroupRecord {
            id: id.into(),
            created_ms: 1,
            objective: "x".into(),
            workspace: "/w".into(),
            task_ids: tasks.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn a_group_and_its_tasks_are_stored_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("caesar.db")).unwrap();
        s.insert_task(&sample("t_taken")).unwrap();
        // The third member's insert fails (its id is taken): nothing of the group stays.
        let g = group("g_000000000001", &["t_a", "t_b", "t_taken"]);
        let members = [sample("t_a"), sample("t_b"), sample("t_taken")];
        assert!(s.insert_group_with_tasks(&g, &members).is_err());
        assert!(s.group(&g.id).unwrap().is_none(), "no group row");
        assert!(s.task("t_a").unwrap().is_none() && s.task("t_b").unwrap().is_none(), "no member before it");
        assert!(s.group_of("t_a").unwrap().is_none());
        // A failure after the tasks (a group id taken) takes the tasks back too.
        s.insert_group(&group("g_000000000002", &["t_taken"])).unwrap();
        let g2 = group("g_000000000002", &["t_c", "t_d"]);
        assert!(s.insert_group_with_tasks(&g2, &[sample("t_c"), sample("t_d")]).is_err());
        assert!(s.task("t_c").unwrap().is_none() && s.task("t_d").unwrap().is_none());
        // And a good one is stored whole.
        let g3 = group("g_000000000003", &["t_e", "t_f"]);
        s.insert_group_with_tasks(&g3, &[sample("t_e"), sample("t_f")]).unwrap();
        assert_eq!(s.group(&g3.id).unwrap().unwrap().task_ids, ["t_e", "t_f"]);
        assert_eq!(s.group_of("t_f").unwrap().as_deref(), Some(g3.id.as_str()));
        assert!(s.task("t_e").unwrap().is_some());
    }
}

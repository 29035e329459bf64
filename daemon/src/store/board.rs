//! What ties the dashboard's cards together (issue 30, item 7): for the newest tasks, the
//! fan-out group each belongs to, the task a fallback attempt stands in for, and the task a
//! continuation continues. One query over the tables that say so, so that the board groups
//! members and attempts under their task without a request per card.

use rusqlite::params;

use super::Store;
use crate::error::Result;

/// How a task is tied to another card of the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// A member of the fan-out group named by the link.
    Group,
    /// A later attempt of the task named by the link (its fallback chain's first task).
    AttemptOf,
    /// A continuation of the task named by the link, in its worktree.
    Continues,
}

impl LinkKind {
    /// The word JSON spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Group => "group",
            LinkKind::AttemptOf => "attempt_of",
            LinkKind::Continues => "continues",
        }
    }
}

/// One tie: `task_id` is `kind` of `other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardLink {
    pub task_id: String,
    pub kind: LinkKind,
    pub other: String,
}

const LINKS_SQL: &str = "WITH recent AS (SELECT id FROM tasks ORDER BY created_ms DESC, id DESC LIMIT ?1)
    SELECT g.task_id, 'group', g.group_id FROM group_tasks g JOIN recent ON recent.id = g.task_id
    UNION ALL
    SELECT a.successor_id, 'attempt_of', a.root_id FROM task_attempts a JOIN recent ON recent.id = a.successor_id
    UNION ALL
    SELECT c.task_id, 'continues', c.source_id FROM continuations c JOIN recent ON recent.id = c.task_id";

impl Store {
    /// The ties of the newest `limit` tasks (those the board lists).
    pub fn board_links(&self, limit: u32) -> Result<Vec<BoardLink>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(LINKS_SQL)?;
            let rows = stmt.query_map(params![limit], |r| {
                let kind: String = r.get(1)?;
                let kind = match kind.as_str() {
                    "group" => LinkKind::Group,
                    "attempt_of" => LinkKind::AttemptOf,
                    _ => LinkKind::Continues,
                };
                Ok(BoardLink { task_id: r.get(0)?, kind, other: r.get(2)? })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::tests::sample;
    use super::super::{AttemptRow, GroupRecord};
    use super::*;

    #[test]
    fn links_name_groups_attempts_and_continuations_of_the_newest_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("caesar.db")).unwrap();
        for (i, id) in ["t_old", "t_m1", "t_m2", "t_root", "t_next", "t_src", "t_cont"].iter().enumerate() {
            let mut t = sample(id);
            t.created_ms = 10 + i as i64;
            if *id != "t_cont" {
                s.insert_task(&t).unwrap();
            } else {
                assert_eq!(s.insert_continuation(&t, "t_src").unwrap(), Ok(()));
            }
        }
        let g = GroupRecord {
            id: "g_1".into(),
            created_ms: 11,
            objective: "o".into(),
            workspace: "/w".into(),
            task_ids: vec!["t_m1".into(), "t_m2".into()],
        };
        s.insert_group(&g).unwrap();
        s.record_fallback(&AttemptRow {
            task_id: "t_root".into(),
            root_id: "t_root".into(),
            successor_id: "t_next".into(),
            next_agent: "b".into(),
            stopped_by: "auth".into(),
            message: "401".into(),
            at_ms: 14,
        })
        .unwrap();
        let mut links = s.board_links(100).unwrap();
        links.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        let got: Vec<(&str, &str, &str)> =
            links.iter().map(|l| (l.task_id.as_str(), l.kind.as_str(), l.other.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("t_cont", "continues", "t_src"),
                ("t_m1", "group", "g_1"),
                ("t_m2", "group", "g_1"),
                ("t_next", "attempt_of", "t_root"),
            ]
        );
        // Only the newest tasks' ties: the two newest are t_cont and t_src.
        let newest: Vec<String> = s.board_links(2).unwrap().into_iter().map(|l| l.task_id).collect();
        assert_eq!(newest, vec!["t_cont".to_owned()]);
    }
}

//! Fan-out groups and the conflict radar (issue 17).
//!
//! A group is one objective delegated to several agents (or N attempts of
//! one), each task in a worktree of its own; every member is checked before
//! any is recorded, so a bad member refuses the whole group. Its summary
//! compares the members side by side, with the overlap between their diffs.
//!
//! The conflict radar itself (footprints, the background refresh, who
//! meets whom) is `radar.rs`; a summary's overlaps read its cache.
//!
//! The design beside its neighbours: `docs/design/orchestration.md`.

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::Isolation;
use crate::store::{GroupRecord, TaskStatus};
use crate::workshop::radar::{self, Meeting};

use super::*;

/// The most tasks one group may have.
pub const MAX_GROUP: usize = 8;

/// What a caller asks of a group, beside the delegation itself.
#[derive(Debug, Clone, Default)]
pub struct GroupAsk {
    pub agents: Vec<String>,
    pub attempts: u32,
}

/// The result of a group delegation.
#[derive(Debug, Clone)]
pub struct DelegatedGroup {
    pub group_id: String,
    pub tasks: Vec<Delegated>,
}

/// One member of a group summary.
#[derive(Debug, Clone)]
pub struct MemberView {
    pub task_id: String,
    pub agent: String,
    pub status: TaskStatus,
    pub report_status: String,
    pub verification: String,
    pub files_changed: u32,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
    pub summary: String,
    pub overlaps: Vec<(String, Meeting)>,
    /// What became of it, as its task view says (issue 30).
    pub verdict: crate::verdict::TaskVerdict,
    /// `git`, `kernel` or `declaration`, from its report; empty without one.
    pub changes_verified_by: String,
}

/// A group, compared.
#[derive(Debug, Clone, Default)]
pub struct GroupView {
    pub group_id: String,
    pub objective: String,
    pub members: Vec<MemberView>,
    pub done: bool,
}

/// Whether `id` has the shape of a group id (`g_` and 12 hex digits).
pub fn is_group_id(id: &str) -> bool {
    id.len() == 14 && id.starts_with("g_") && id[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The agents of a group ask, checked: exclusive choices, no agent twice,
/// a size in range. `agent` is the single agent the request names, if any.
pub fn group_members(ask: &GroupAsk, agent: Option<&str>) -> Result<Option<Vec<Option<String>>>> {
    if ask.agents.is_empty() && ask.attempts == 0 {
        return Ok(None);
    }
    if !ask.agents.is_empty() && ask.attempts != 0 {
        return Err(Error::Invalid(
            "`agents` and `attempts` were both given: use `agents` for different agents, or `agent` with `attempts` for N tries of one".to_owned(),
        ));
    }
    if !ask.agents.is_empty() {
        if agent.is_some() {
            return Err(Error::Invalid("`agent` and `agents` were both given: put every agent in `agents`".to_owned()));
        }
        if ask.agents.len() < 2 || ask.agents.len() > MAX_GROUP {
            return Err(Error::Invalid(format!(
                "`agents` names {} agents: a group has 2 to {MAX_GROUP}; for one agent use `agent`",
                ask.agents.len()
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for a in &ask.agents {
            if a.trim().is_empty() {
                return Err(Error::Invalid("`agents` holds an empty name: remove it".to_owned()));
            }
            if !seen.insert(a.as_str()) {
                return Err(Error::Invalid(format!(
                    "`agents` names `{a}` twice: name each agent once, or use `agent` with `attempts` for several tries of one"
                )));
            }
        }
        return Ok(Some(ask.agents.iter().map(|a| Some(a.clone())).collect()));
    }
    if ask.attempts < 2 || ask.attempts as usize > MAX_GROUP {
        return Err(Error::Invalid(format!(
            "`attempts` is {}: use 2 to {MAX_GROUP} (or omit it for one task)",
            ask.attempts
        )));
    }
    Ok(Some(vec![agent.map(str::to_owned); ask.attempts as usize]))
}

impl Engine {
    // ------------------------------------------------------------------ groups

    /// Delegates one task per member, each in a worktree of its own when the
    /// group writes (in place when it only reads), and records the group. Every member is resolved first: an unknown agent
    /// or a refused one refuses the group before anything is recorded.
    pub async fn delegate_group(self: &Arc<Self>, mut input: DelegateInput, ask: GroupAsk) -> Result<DelegatedGroup> {
        if input.continue_from.as_deref().is_some_and(|c| !c.is_empty()) {
            return Err(Error::Invalid(
                "`continue_from` continues one task in its worktree: it cannot make a group; leave out `agents` and `attempts`"
                    .to_owned(),
            ));
        }
        // A group's budget is the group's, across its tasks (`group_budget.rs`).
        let group_limits = input.budget.take();
        let agent = input.agent.clone().filter(|a| !a.is_empty());
        let Some(members) = group_members(&ask, agent.as_deref())? else {
            return Err(Error::Invalid("a group needs `agents` or `attempts`".to_owned()));
        };
        if input.review_by.as_deref().is_some_and(|r| !r.trim().is_empty()) {
            return Err(Error::Invalid(
                "`review_by` with a fan-out group is not supported: delegate one write task with `review_by` (its \
                 rounds make a group of their own)"
                    .to_owned(),
            ));
        }
        if !input.depends_on.is_empty() {
            return Err(Error::Invalid(
                "`depends_on` with a fan-out group is not supported: delegate the group's tasks on their own with `depends_on`, or stack a task on the group's winner".to_owned(),
            ));
        }
        if input.isolation.as_deref().is_some_and(|i| !i.is_empty() && i != "worktree") {
            return Err(Error::Invalid(
                "a group's tasks run in separate worktrees: omit `isolation` or set it to `worktree`".to_owned(),
            ));
        }
        let workspace = PathBuf::from(&input.workspace);
        let project = crate::config::project_root(&workspace);
        // A group that writes runs each member in a worktree of its own; one
        // that only reads (no mode given, issue 30) reads in place, leaving
        // no branch behind, unless `isolation = worktree` asks for them.
        let mut writes = false;
        if workspace.is_absolute() && workspace.is_dir() {
            let (config, _) = self.projects.load_config(&project)?;
            let headroom = self.projects.quota.headroom_with(&config);
            for (i, m) in members.iter().enumerate() {
                let one = DelegateInput { agent: m.clone(), ..input.clone() };
                let r = crate::resolve::resolve_with(&config, &project, &one, &headroom).map_err(|e| match m {
                    Some(a) if !ask.agents.is_empty() => e.with_note(&format!("(`agents[{i}]` = `{a}`)")),
                    _ => e,
                })?;
                writes |= r.mode == crate::oacp::Mode::Write;
            }
        }
        let isolation = if writes || input.isolation.as_deref().is_some_and(|i| !i.is_empty()) {
            Some("worktree".to_owned())
        } else {
            None
        };
        if workspace.is_absolute()
            && workspace.is_dir()
            && isolation.is_some()
            && crate::workshop::facts(&workspace).root.is_none()
        {
            return Err(Error::Invalid(format!(
                "a group needs a git repository for its worktrees: {} is not in one (git init and commit, or delegate one task)",
                workspace.display()
            )));
        }
        // Every member staged (checked, its directory and task.json written),
        // then the members and the group stored in one transaction: a
        // failure or a crash before it leaves no half group.
        let mut staged = Vec::new();
        for m in members {
            let one = DelegateInput { agent: m, isolation: isolation.clone(), ..input.clone() };
            staged.push(self.stage_delegation(one, None, None).await?);
        }
        let group = GroupRecord {
            id: format!("g_{:012x}", u64::from_str_radix(&crate::ids::task_id()[2..], 16).unwrap_or(0)),
            created_ms: now_ms(),
            objective: input.objective.trim().to_owned(),
            workspace: input.workspace.clone(),
            task_ids: staged.iter().map(|t| t.delegated.record.id.clone()).collect(),
        };
        let records: Vec<_> = staged.iter().map(|t| t.delegated.record.clone()).collect();
        self.store.insert_group_with_tasks(&group, &records)?;
        // The group's budget is in force before any member starts.
        if let Some(limits) = &group_limits {
            self.budgets.set_group(&group.id, limits);
        }
        let tasks = self.launch_all(staged).await?;
        Ok(DelegatedGroup { group_id: group.id, tasks })
    }

    /// The group's member ids, or `NotFound`.
    pub fn group_tasks(&self, id: &str) -> Result<Vec<String>> {
        match self.store.group(id)? {
            Some(g) => Ok(g.task_ids),
            None => Err(Error::NotFound(format!("no group {id}: use the group_id caesar_delegate returned"))),
        }
    }

    /// The group's members side by side.
    pub fn group_view(&self, id: &str) -> Result<GroupView> {
        let Some(g) = self.store.group(id)? else {
            return Err(Error::NotFound(format!("no group {id}: use the group_id caesar_delegate returned")));
        };
        let mut members = Vec::new();
        let mut prints = Vec::new();
        for tid in &g.task_ids {
            let Some(record) = self.store.task(tid)? else { continue };
            let report = self.store.report(tid)?;
            let body: serde_json::Value =
                report.as_ref().and_then(|r| serde_json::from_str(&r.body).ok()).unwrap_or_default();
            let mut m = MemberView {
                task_id: tid.clone(),
                agent: record.agent.clone(),
                status: record.status,
                report_status: report.as_ref().map(|r| r.status.clone()).unwrap_or_default(),
                verification: body["verification"]["outcome"].as_str().unwrap_or_default().to_owned(),
                input_tokens: body["usage"]["input_tokens"].as_u64(),
                output_tokens: body["usage"]["output_tokens"].as_u64(),
                cost_usd: body["usage"]["cost_usd"].as_f64(),
                duration_ms: match (record.started_ms, record.finished_ms) {
                    (Some(s), Some(f)) => (f - s).max(0) as u64,
                    (Some(s), None) => (now_ms() - s).max(0) as u64,
                    _ => 0,
                },
                summary: crate::report::tail_chars(body["summary"].as_str().unwrap_or_default(), 300),
                files_changed: 0,
                lines_added: 0,
                lines_removed: 0,
                overlaps: Vec::new(),
                verdict: self.views().status(tid).map(|v| v.verdict).unwrap_or_default(),
                changes_verified_by: body["changes_verified_by"].as_str().unwrap_or_default().to_owned(),
            };
            if let Some(p) = record.workshop.as_ref().filter(|p| p.isolation == Isolation::Worktree)
                && let Ok(d) = crate::workshop::diff(p)
            {
                m.files_changed = d.files.len() as u32;
                m.lines_added = d.files.iter().map(|f| f.additions).sum();
                m.lines_removed = d.files.iter().map(|f| f.deletions).sum();
            }
            prints.push(self.radar.cached_footprint(&record));
            members.push(m);
        }
        for i in 0..members.len() {
            for j in 0..members.len() {
                if i == j {
                    continue;
                }
                if let (Some(a), Some(b)) = (&prints[i], &prints[j]) {
                    let meeting = radar::meet(a, b);
                    if !meeting.is_empty() {
                        let other = members[j].task_id.clone();
                        members[i].overlaps.push((other, meeting));
                    }
                }
            }
        }
        // A review loop's group (issue 32) is done when its loop is.
        let looping = self
            .store
            .review_member(&g.task_ids.first().cloned().unwrap_or_default())?
            .is_some_and(|m| self.store.review_loop(&m.loop_id).ok().flatten().is_some_and(|l| l.active()));
        let done = !looping && members.iter().all(|m| m.status.is_terminal());
        Ok(GroupView { group_id: g.id, objective: g.objective, members, done })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_asks_are_checked_naming_the_field() {
        let ask =
            |agents: &[&str], attempts| GroupAsk { agents: agents.iter().map(|a| a.to_string()).collect(), attempts };
        assert!(group_members(&ask(&[], 0), None).unwrap().is_none());
        let twice = group_members(&ask(&["a", "b", "a"], 0), None).unwrap_err().to_string();
        assert!(twice.contains("`agents` names `a` twice"), "{twice}");
        assert!(group_members(&ask(&["a"], 0), None).unwrap_err().to_string().contains("`agents`"));
        assert!(group_members(&ask(&[], 1), Some("a")).unwrap_err().to_string().contains("`attempts` is 1"));
        assert!(group_members(&ask(&[], 9), Some("a")).unwrap_err().to_string().contains("`attempts` is 9"));
        assert!(group_members(&ask(&["a", "b"], 2), None).is_err());
        assert_eq!(group_members(&ask(&[], 3), Some("a")).unwrap().unwrap().len(), 3);
        assert!(is_group_id("g_0123456789ab") && !is_group_id("t_0123456789ab"));
    }
}

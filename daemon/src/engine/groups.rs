//! Fan-out groups and the conflict radar (issue 17).
//!
//! A group is one objective delegated to several agents (or N attempts of
//! one), each task in a worktree of its own; every member is checked before
//! any is recorded, so a bad member refuses the whole group. Its summary
//! compares the members side by side, with the overlap between their diffs.
//!
//! The radar finds, for a worktree task, the other live or finished but
//! unapplied worktree tasks of the same repository, and the user's
//! uncommitted changes, that touch the same files and lines. Footprints of
//! finished tasks are cached by the tree they ended with; live ones are
//! recomputed at most every [`LIVE_TTL`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::{Isolation, Mode};
use crate::store::{GroupRecord, TaskRecord, TaskStatus};
use crate::workshop::radar::{self, Footprint, Meeting};

use super::*;

/// The most tasks one group may have.
pub const MAX_GROUP: usize = 8;
/// How long a live task's footprint is reused.
pub const LIVE_TTL: Duration = Duration::from_secs(2);
/// The task id the user's uncommitted changes go by in the radar.
pub const UNCOMMITTED: &str = "uncommitted";
/// The most finished tasks the radar looks back over.
const RADAR_LOOKBACK: u32 = 500;

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
#[derive(Debug, Clone, Default)]
pub struct MemberView {
    pub task_id: String,
    pub agent: String,
    pub status: String,
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
}

/// A group, compared.
#[derive(Debug, Clone, Default)]
pub struct GroupView {
    pub group_id: String,
    pub objective: String,
    pub members: Vec<MemberView>,
    pub done: bool,
}

/// One cached footprint: when it was computed, whether its task had ended.
type CachedFootprint = (Instant, bool, Arc<Footprint>);

/// The radar's cache of footprints.
#[derive(Debug, Default)]
pub(super) struct RadarCache {
    entries: Mutex<HashMap<String, CachedFootprint>>,
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

    /// Delegates one task per member, each in a worktree of its own, and
    /// records the group. Every member is resolved first: an unknown agent
    /// or a refused one refuses the group before anything is recorded.
    pub async fn delegate_group(self: &Arc<Self>, mut input: DelegateInput, ask: GroupAsk) -> Result<DelegatedGroup> {
        // A group's budget is the group's, across its tasks (`group_budget.rs`).
        let group_limits = input.budget.take();
        let agent = input.agent.clone().filter(|a| !a.is_empty());
        let Some(members) = group_members(&ask, agent.as_deref())? else {
            return Err(Error::Invalid("a group needs `agents` or `attempts`".to_owned()));
        };
        if input.isolation.as_deref().is_some_and(|i| !i.is_empty() && i != "worktree") {
            return Err(Error::Invalid(
                "a group's tasks run in separate worktrees: omit `isolation` or set it to `worktree`".to_owned(),
            ));
        }
        let workspace = PathBuf::from(&input.workspace);
        let project = crate::config::project_root(&workspace);
        if workspace.is_absolute() && workspace.is_dir() {
            let (config, _) = self.load_config(&project)?;
            for (i, m) in members.iter().enumerate() {
                let one = DelegateInput { agent: m.clone(), ..input.clone() };
                crate::resolve::resolve(&config, &project, &one).map_err(|e| match m {
                    Some(a) if !ask.agents.is_empty() => e.with_note(&format!("(`agents[{i}]` = `{a}`)")),
                    _ => e,
                })?;
            }
            if crate::workshop::facts(&workspace).root.is_none() {
                return Err(Error::Invalid(format!(
                    "a group needs a git repository for its worktrees: {} is not in one (git init and commit, or delegate one task)",
                    workspace.display()
                )));
            }
        }
        let mut tasks = Vec::new();
        for m in members {
            let one = DelegateInput { agent: m, isolation: Some("worktree".to_owned()), ..input.clone() };
            match self.delegate(one).await {
                Ok(d) => tasks.push(d),
                Err(e) => {
                    // A later member refused (a full queue): the group is not made.
                    for t in &tasks {
                        let _ = self.cancel(&t.record.id).await;
                    }
                    return Err(e);
                }
            }
        }
        let group = GroupRecord {
            id: format!("g_{:012x}", u64::from_str_radix(&crate::ids::task_id()[2..], 16).unwrap_or(0)),
            created_ms: now_ms(),
            objective: input.objective.trim().to_owned(),
            workspace: input.workspace.clone(),
            task_ids: tasks.iter().map(|t| t.record.id.clone()).collect(),
        };
        self.store.insert_group(&group)?;
        if let Some(limits) = &group_limits {
            self.set_group_budget(&group.id, limits);
        }
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
                status: record.status.as_str().to_owned(),
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
                ..MemberView::default()
            };
            if let Some(p) = record.workshop.as_ref().filter(|p| p.isolation == Isolation::Worktree)
                && let Ok(d) = crate::workshop::diff(p)
            {
                m.files_changed = d.files.len() as u32;
                m.lines_added = d.files.iter().map(|f| f.additions).sum();
                m.lines_removed = d.files.iter().map(|f| f.deletions).sum();
            }
            prints.push(self.footprint_of(&record));
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
        let done = members.iter().all(|m| TaskStatus::parse(&m.status).is_some_and(TaskStatus::is_terminal));
        Ok(GroupView { group_id: g.id, objective: g.objective, members, done })
    }

    // ------------------------------------------------------------------- radar

    /// A worktree task's footprint, from the cache when it is fresh.
    fn footprint_of(&self, record: &TaskRecord) -> Option<Arc<Footprint>> {
        let p = record.workshop.as_ref().filter(|p| p.isolation == Isolation::Worktree)?;
        let finished = record.status.is_terminal();
        let known = self.radar.entries.lock().unwrap_or_else(|e| e.into_inner()).get(&record.id).cloned();
        if let Some((at, was_finished, fp)) = &known
            && (*was_finished || at.elapsed() < LIVE_TTL)
        {
            return Some(fp.clone());
        }
        let fp = Arc::new(radar::task_footprint(p, known.as_ref().map(|k| k.2.as_ref())).ok()?);
        self.radar
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.id.clone(), (Instant::now(), finished, fp.clone()));
        Some(fp)
    }

    /// The worktree tasks the radar watches in `repo_root`: live ones, and
    /// finished ones whose changes were neither applied nor discarded.
    fn radar_tasks(&self, repo_root: &std::path::Path) -> Result<Vec<TaskRecord>> {
        let mut all = self.store.tasks(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)?;
        all.extend(self.store.tasks(
            &[TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled, TaskStatus::TimedOut],
            RADAR_LOOKBACK,
        )?);
        Ok(all
            .into_iter()
            .filter(|t| t.mode == Mode::Write || t.workshop.is_some())
            .filter(|t| t.changes_state.is_none())
            .filter(|t| {
                t.workshop
                    .as_ref()
                    .is_some_and(|p| p.isolation == Isolation::Worktree && p.repo_root.as_deref() == Some(repo_root))
            })
            .collect())
    }

    /// Who this task's changes meet: other watched tasks of its repository,
    /// and the user's uncommitted changes (as [`UNCOMMITTED`]).
    pub fn conflicts_with(&self, id: &str) -> Result<Vec<(String, Meeting)>> {
        let record = self.record(id)?;
        let Some(p) = record.workshop.as_ref().filter(|p| p.isolation == Isolation::Worktree) else {
            return Ok(Vec::new());
        };
        let Some(root) = p.repo_root.clone() else { return Ok(Vec::new()) };
        let Some(mine) = self.footprint_of(&record) else { return Ok(Vec::new()) };
        if mine.files.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for other in self.radar_tasks(&root)? {
            if other.id == record.id {
                continue;
            }
            if let Some(fp) = self.footprint_of(&other) {
                let m = radar::meet(&mine, &fp);
                if !m.is_empty() {
                    out.push((other.id.clone(), m));
                }
            }
        }
        if let Ok(user) = radar::uncommitted_footprint(&root, &[]) {
            let m = radar::meet(&mine, &user);
            if !m.is_empty() {
                out.push((UNCOMMITTED.to_owned(), m));
            }
        }
        Ok(out)
    }

    /// The watched tasks whose later apply this task's apply would break:
    /// those changing the same lines (`hunk_paths`). The user's own
    /// uncommitted changes are left to apply's own conflict check.
    pub fn apply_would_break(&self, id: &str) -> Vec<(String, Meeting)> {
        self.conflicts_with(id)
            .unwrap_or_default()
            .into_iter()
            .filter(|(t, m)| t != UNCOMMITTED && !m.hunk_paths.is_empty())
            .collect()
    }

    /// Drops a task from the radar's cache (applied or discarded).
    pub fn radar_forget(&self, id: &str) {
        self.radar.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
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

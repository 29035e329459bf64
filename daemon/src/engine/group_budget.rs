//! Group budgets (issue 17, item 4): a fan-out group's limits on tokens,
//! cost, wall time and turns, summed over its tasks.
//!
//! A group delegated with a `budget` stores it as the group's
//! (`group_budgets`), and its members run without a limit of their own.
//! Each member's monitor hands its tally here after each read; the group's
//! sum is checked against the group's limits (wall time from the group's
//! creation). At a limit the group's stop is stored, then every member
//! still running gets the budget stop a task's own limit would give it
//! (stored before it is told to stop), so each ends `failed` with a
//! `partial` report and a `budget` finding naming the group's figures.
//!
//! Nothing here is stored but the limits and the stops: after a restart the
//! members' tallies are rebuilt from their stored events (as a task's own
//! are), and a recorded stop is asked again by recovery.

use std::collections::HashMap;
use std::sync::Mutex;

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::lifecycle::Limits;
use crate::store::TaskStatus;

use super::budget::{Meter, Tally};
use super::*;

/// How long a task found in no group is taken to be in none: a group's row
/// is stored just after its members are delegated.
const NO_GROUP_RECHECK_MS: i64 = 1_000;

/// Budgets: a task's own limits (`budget.rs`) and its group's (here),
/// checked after each read of its output. A service of the engine whose
/// own state is the groups' live meters.
pub(super) struct Budgets {
    pub(super) store: Arc<Store>,
    pub(super) runner: Arc<dyn crate::runner::Runner>,
    pub(super) notices: super::notifications::Notices,
    /// Task id -> its group (or none, as of when it was looked up).
    of_task: Mutex<HashMap<String, (Option<String>, i64)>>,
    groups: Mutex<HashMap<String, GroupMeter>>,
}

struct GroupMeter {
    limits: Limits,
    created_ms: i64,
    tallies: HashMap<String, Tally>,
    stopped: bool,
}

impl GroupMeter {
    fn sum(&self) -> Tally {
        self.tallies.values().fold(Tally::default(), |a, t| Tally {
            tokens: a.tokens + t.tokens,
            cost_usd: a.cost_usd + t.cost_usd,
            turns: a.turns + t.turns,
        })
    }
}

impl Budgets {
    pub(super) fn new(
        store: Arc<Store>,
        runner: Arc<dyn crate::runner::Runner>,
        notices: super::notifications::Notices,
    ) -> Budgets {
        Budgets { store, runner, notices, of_task: Default::default(), groups: Default::default() }
    }

    /// The group limits of a delegation with `agents`/`attempts` and a
    /// budget: stored as the group's. Called once the group is recorded.
    pub(super) fn set_group(&self, group_id: &str, limits: &Limits) {
        if limits.is_empty() {
            return;
        }
        let json = serde_json::to_string(limits).unwrap_or_default();
        if let Err(e) = self.store.set_group_budget(group_id, &json) {
            warn!(group_id, "cannot store the group's budget: {e}");
        }
    }

    fn group_of_run(&self, task_id: &str) -> Option<String> {
        let now = now_ms();
        let mut of_task = self.of_task.lock().unwrap_or_else(|p| p.into_inner());
        match of_task.get(task_id) {
            Some((Some(g), _)) => return Some(g.clone()),
            Some((None, at)) if now - at < NO_GROUP_RECHECK_MS => return None,
            _ => {}
        }
        let group = self.store.group_of(task_id).ok().flatten();
        of_task.insert(task_id.to_owned(), (group.clone(), now));
        group
    }

    /// Loads a group's limits and its members' tallies, once per daemon.
    fn load_group_meter(&self, group_id: &str) -> Option<GroupMeter> {
        let (limits, stop) = self.store.group_budget(group_id).ok().flatten()?;
        let limits: Limits = serde_json::from_str(&limits).ok()?;
        let group = self.store.group(group_id).ok().flatten()?;
        let mut tallies = HashMap::new();
        for t in &group.task_ids {
            let mut m = Meter::new(limits, 0);
            if let Ok(bodies) = self.store.usage_and_messages(t) {
                bodies.iter().for_each(|b| m.observe(b));
            }
            tallies.insert(t.clone(), m.tally);
        }
        Some(GroupMeter { limits, created_ms: group.created_ms, tallies, stopped: stop.is_some() })
    }

    /// After each read of a group member: its tally into the group's, and
    /// the group's stop at a limit. Called by the monitor.
    pub(super) fn check_group(&self, run: &Run) {
        let Some(group_id) = self.group_of_run(&run.id) else { return };
        let stop = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            if !groups.contains_key(&group_id) {
                let Some(m) = self.load_group_meter(&group_id) else {
                    // No budget: remembered as an empty one.
                    groups.insert(
                        group_id.clone(),
                        GroupMeter { limits: Limits::default(), created_ms: 0, tallies: HashMap::new(), stopped: true },
                    );
                    return;
                };
                groups.insert(group_id.clone(), m);
            }
            let Some(g) = groups.get_mut(&group_id) else { return };
            if g.stopped {
                return;
            }
            g.tallies.insert(run.id.clone(), run.budget.tally);
            let meter = Meter { limits: g.limits, tally: g.sum(), started_ms: g.created_ms, stopping: false };
            let Some((limit, detail)) = meter.exceeded(now_ms()) else { return };
            let detail = format!("group {group_id}: {detail}, across its {} tasks", g.tallies.len());
            if let Err(e) = self.store.record_group_stop(&group_id, limit, &detail, now_ms()) {
                warn!(group_id, "cannot record the group's budget stop: {e}");
                return;
            }
            g.stopped = true;
            (limit, detail)
        };
        self.stop_group_at_budget(&group_id, stop.0, &stop.1);
    }

    /// Gives every running member of the group its budget stop, stored
    /// before it is asked to stop.
    fn stop_group_at_budget(&self, group_id: &str, limit: &str, detail: &str) {
        let Ok(Some(group)) = self.store.group(group_id) else { return };
        info!(group_id, limit, "group budget reached: stopping its tasks");
        self.notices.budget(group.task_ids.first().map(String::as_str).unwrap_or_default(), detail);
        for t in &group.task_ids {
            let (head, _) = super::fallback::head_of(&self.store, t);
            let Ok(Some(record)) = self.store.task(&head) else { continue };
            if record.status != TaskStatus::Running {
                continue;
            }
            if let Err(e) = self.store.record_budget_stop(&head, limit, detail, Some(group_id), now_ms()) {
                warn!(task_id = %head, "cannot record the group's budget stop: {e}");
                continue;
            }
            if let Some(handle) = &record.run {
                self.runner.request_stop(handle);
            }
        }
    }
}

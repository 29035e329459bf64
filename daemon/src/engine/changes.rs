//! A task's changes: diff, apply, discard and gc of its workshop, and the
//! release of what a remote task left on the team's remote once they are
//! decided (`remote_refs.rs`). A service of the engine: it owns the
//! changes-state transitions and shares the store, the runner (for remote
//! releases), the radar and the change stream.

use std::time::Duration;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::Isolation;
use crate::store::ChangesState;
use crate::store::{TaskRecord, TaskStatus};
use crate::workshop;

use std::sync::Arc;

use super::observe::find_task;
use super::radar::Radar;
use super::{GcItem, LiveRuns};
use crate::runner::Runner;
use crate::store::Store;

/// How many ended tasks gc reads at a time.
const GC_PAGE: u32 = 200;

/// Diff, apply, discard and gc.
pub struct Changes {
    pub(super) store: Arc<Store>,
    pub(super) runner: Arc<dyn Runner>,
    radar: Arc<Radar>,
    runs: Arc<LiveRuns>,
}

impl Changes {
    pub(super) fn new(store: Arc<Store>, runner: Arc<dyn Runner>, radar: Arc<Radar>, runs: Arc<LiveRuns>) -> Changes {
        Changes { store, runner, radar, runs }
    }

    /// The task `id` stands for now: the last attempt of its chain (issue 31:
    /// a relay's last agent works on in the first one's worktree, so its end
    /// is the whole work).
    fn current(&self, id: &str) -> Result<crate::store::TaskRecord> {
        let record = find_task(&self.store, id)?;
        let (head, _) = super::fallback::head_of(&self.store, &record.id);
        if head == record.id {
            return Ok(record);
        }
        Ok(self.store.task(&head)?.unwrap_or(record))
    }

    /// The diff of a worktree task. Tasks that ran in place, or not in a
    /// repository, have none here (their verified changes are in the report).
    pub fn diff(&self, id: &str) -> Result<Option<workshop::DiffResult>> {
        let record = self.current(id)?;
        match record.workshop.clone() {
            Some(p) if p.isolation == Isolation::Worktree => Ok(Some(workshop::diff(&p)?)),
            _ => Ok(None),
        }
    }

    /// Applies a finished worktree task's changes to the main working tree:
    /// 3-way, all or nothing, never a commit. A task that ran in place is a
    /// no-op (its changes are already there).
    pub fn apply(&self, id: &str) -> Result<workshop::ApplyResult> {
        let record = self.current(id)?;
        if !record.status.is_terminal() {
            return Err(Error::Precondition(format!(
                "task {id} is still {}: await it, read its diff, then apply",
                record.status.as_str()
            )));
        }
        if record.changes_state == Some(ChangesState::Discarded) {
            return Err(Error::Precondition(format!("task {id}'s changes were discarded")));
        }
        // A stacked task after the parents its base holds (issue 32).
        super::stacking::check_apply(&self.store, id)?;
        // Issue 31: the newest task of a lineage holds the worktree.
        if let Some(why) = super::continuation::held_by_newer(&self.store, &record.id, "apply")? {
            return Err(Error::Precondition(why));
        }
        let Some(p) = record.workshop.clone().filter(|p| p.isolation == Isolation::Worktree) else {
            self.release_remote_soon(&record);
            return Ok(workshop::ApplyResult {
                applied: true,
                already_applied: false,
                conflicts: Vec::new(),
                files: Vec::new(),
                message: "the task ran in place: its changes are already in the working tree".to_owned(),
            });
        };
        let result = workshop::apply(&p)?;
        if result.applied || result.already_applied {
            self.store.set_changes_state(&record.id, ChangesState::Applied)?;
            self.radar.forget(id);
            self.runs.pulse(id);
            self.release_remote_soon(&record);
        }
        Ok(result)
    }

    /// Marks a task's changes as unwanted: gc may then remove its worktree.
    pub fn discard(&self, id: &str) -> Result<()> {
        let record = self.current(id)?;
        if !record.status.is_terminal() {
            return Err(Error::Precondition(format!("task {id} is still running: cancel it first")));
        }
        if record.changes_state == Some(ChangesState::Applied) {
            return Err(Error::Precondition(format!("task {id}'s changes were already applied")));
        }
        if let Some(why) = super::continuation::held_by_newer(&self.store, &record.id, "discard")? {
            return Err(Error::Precondition(why));
        }
        self.store.set_changes_state(&record.id, ChangesState::Discarded)?;
        self.radar.forget(id);
        self.runs.pulse(id);
        self.release_remote_soon(&record);
        Ok(())
    }

    /// Removes the worktrees (and branches) of tasks finished longer ago than
    /// `older_than`, and of every task whose changes were applied or
    /// discarded, whatever its age. Never a worktree whose changes were neither applied nor
    /// discarded, nor a branch with commits reachable from nowhere else,
    /// unless `force`.
    pub fn gc(&self, older_than: Duration, dry_run: bool, force: bool) -> Result<Vec<GcItem>> {
        // A huge age means "everything": saturate rather than wrap.
        let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms().saturating_sub(age);
        const ENDED: [TaskStatus; 4] =
            [TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled, TaskStatus::TimedOut];
        let mut items = Vec::new();
        // The ended tasks a page at a time (issue 33 item 3): on a long history, one read of
        // every record held the store for seconds and all of them in memory at once.
        let mut before: Option<(i64, String)> = None;
        loop {
            let page = self.store.tasks_before(&ENDED, before.as_ref().map(|(ms, id)| (*ms, id.as_str())), GC_PAGE)?;
            let Some(last) = page.last() else { break };
            before = Some((last.created_ms, last.id.clone()));
            for record in page {
                self.gc_one(record, cutoff, dry_run, force, &mut items)?;
            }
        }
        Ok(items)
    }

    /// [`Changes::gc`] of one ended task: what it did goes to `items`.
    fn gc_one(
        &self,
        record: TaskRecord,
        cutoff: i64,
        dry_run: bool,
        force: bool,
        items: &mut Vec<GcItem>,
    ) -> Result<()> {
        // Remote refs of decided tasks (a release apply or discard
        // could not finish is retried here), whatever their worktree.
        if !dry_run
            && record.changes_state.is_some()
            && let Some(e) = self.release_remote_now(&record)
        {
            tracing::warn!(task_id = record.id, error = e, "remote refs kept");
        }
        let Some(p) = record.workshop.clone().filter(|p| p.isolation == Isolation::Worktree) else { return Ok(()) };
        let Some(worktree) = p.worktree.clone() else { return Ok(()) };
        if !worktree.exists() {
            return Ok(());
        }
        let item = |action: &str, reason: String| GcItem {
            task_id: record.id.clone(),
            worktree: worktree.display().to_string(),
            action: action.to_owned(),
            reason,
            bytes: workshop::disk_usage(&worktree),
        };
        // Issue 31: a continued task's worktree is its newest continuation's, even with
        // `force`; it goes with that one.
        let newest = self.store.newest_continuation(&record.id)?;
        // A relay's later agent works in this worktree too (issue 31).
        let head = super::fallback::head_of(&self.store, &record.id).0;
        let shares = |other: &str| {
            self.store.task(other).ok().flatten().and_then(|t| t.workshop).and_then(|w| w.worktree)
                == Some(worktree.clone())
        };
        let newest = if newest == record.id && head != record.id && shares(&head) { head } else { newest };
        if newest != record.id {
            items.push(item("kept", format!("continued by task {newest}, which works in this worktree")));
            return Ok(());
        }
        // Applied or discarded: the person has decided, so the
        // worktree and branch go at the next gc, whatever their age.
        let decided = record.changes_state.is_some();
        if !decided && record.finished_ms.unwrap_or(i64::MAX) > cutoff {
            items.push(item("kept", "finished too recently".to_owned()));
            return Ok(());
        }
        if !decided && !force && workshop::has_unmerged_work(&p).unwrap_or(true) {
            items.push(item(
                "kept",
                format!(
                    "its changes were neither applied nor discarded: `caesar apply {0}` or `caesar discard {0}`",
                    record.id
                ),
            ));
            return Ok(());
        }
        if dry_run {
            items.push(item("would remove", String::new()));
            return Ok(());
        }
        let bytes = workshop::disk_usage(&worktree);
        let removal = if record.changes_state == Some(ChangesState::Discarded) {
            workshop::remove_discarded(&p, force)
        } else {
            workshop::remove(&p, force)
        };
        if removal.is_ok()
            && record.changes_state.is_none()
            && let Some(e) = self.release_remote_now(&record)
        {
            tracing::warn!(task_id = record.id, error = e, "remote refs kept");
        }
        match removal {
            Ok(r) => items.push(GcItem {
                bytes,
                ..item("removed", r.branch_kept.map(|b| format!("branch kept: {b}")).unwrap_or_default())
            }),
            Err(e) => items.push(item("kept", e.to_string())),
        }
        Ok(())
    }
}

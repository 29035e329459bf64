//! The relay on blockers (issue 31, item 3): a worktree task whose agent
//! changed files and was then stopped by a quota, auth or network blocker,
//! or by its own budget,
//! is handed to the next agent of its chain in the same worktree, under the
//! same caller-visible task id, with a handoff brief built from facts
//! ([`super::handoff`]).
//!
//! It rides on the fallback's machinery (`fallback.rs`), so it is durable
//! the same way: the successor's id is stored before the blocked task ends,
//! and the successor is delegated under that id once, by the conclusion or
//! by recovery after a crash. Whether a stored fallback is a relay is
//! decided again from stored facts alone ([`relay_workshop`]), so a redone
//! start decides the same.

use std::path::Path;

use crate::config::{Config, project_root};
use crate::error::{Error, Result};
use crate::lifecycle::OnBlocker;
use crate::oacp::{Isolation, Report};
use crate::resolve::{self, Resolution};
use crate::store::{AttemptRow, TaskRecord};
use crate::workshop::{self, Prepared};

use super::handoff;
use super::*;

/// The most events a handoff quotes, and their bytes.
const HANDOFF_EVENTS: u32 = 20;
const HANDOFF_EVENT_BYTES: usize = 64 * 1024;
/// The most commits a handoff lists.
const HANDOFF_COMMITS: usize = 50;

/// Whether the task's policy and workshop allow a relay: `relay`, a local
/// worktree that is still there.
pub(super) fn relayable(record: &TaskRecord) -> Option<Prepared> {
    if record.launch.lifecycle.on_blocker != OnBlocker::Relay || record.launch.kube.is_some() {
        return None;
    }
    record
        .workshop
        .clone()
        .filter(|p| p.isolation == Isolation::Worktree && p.worktree.as_deref().is_some_and(std::path::Path::is_dir))
}

/// The workshop a stored fallback of `prev` relays in: `Some` when `prev`
/// may relay and git says it changed files (its end ref against its base).
pub(super) fn relay_workshop(prev: &TaskRecord) -> Option<Prepared> {
    let p = relayable(prev)?;
    let diff = workshop::diff(&p).ok()?;
    (!diff.is_empty).then_some(p)
}

/// Issue 31: the agent the caller named to take over on a blocker
/// (`relay_to`), checked now, at delegation, the way the relay will check it
/// then: an agent that is not installed, not allowed, or the task's own is
/// refused with what to do instead.
pub(super) fn named_next(
    config: &Config,
    resolution: &Resolution<'_>,
    input: &DelegateInput,
) -> Result<Option<String>> {
    let Some(next) = input.relay_to.as_deref().map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let fix = "name an installed agent the policy allows (`caesar agents` lists them), or leave relay_to out";
    if next == resolution.agent {
        return Err(Error::Invalid(format!("relay_to `{next}` is the task's own agent: {fix}")));
    }
    if input.on_blocker.as_deref() == Some(OnBlocker::Fail.as_str()) {
        return Err(Error::Invalid(format!(
            "relay_to `{next}` with on_blocker `fail`: a task that fails at a blocker relays to no one; \
             use on_blocker `relay` (the default), or leave relay_to out"
        )));
    }
    let mut probe = input.clone();
    probe.agent = Some(next.to_owned());
    (probe.relay_to, probe.continue_from, probe.session_id, probe.model) = (None, None, None, None);
    let project = project_root(Path::new(&input.workspace));
    resolve::resolve(config, &project, &probe)
        .map_err(|e| Error::Invalid(format!("relay_to `{next}` could not take over this task: {e}; {fix}")))?;
    Ok(Some(next.to_owned()))
}

/// The blocker a budget stop stands for.
pub(super) fn budget_blocker(stop: Option<&(String, String)>) -> Option<crate::oacp::Blocker> {
    let (limit, detail) = stop?;
    Some(crate::oacp::Blocker::new(crate::oacp::BlockerKind::Budget, format!("the {limit} limit: {detail}")))
}

impl Engine {
    /// Issue 31: a worktree task that its own budget stopped after it
    /// changed files (checked with git) goes on with the next agent of its
    /// chain in the same worktree, as after a quota. Nothing else is done
    /// for a budget stop: it is not a reason to fall back on a clean task.
    pub(super) fn relay_after_budget(
        &self,
        record: &TaskRecord,
        stop: Option<&(String, String)>,
        report: &mut Report,
    ) -> Option<AttemptRow> {
        // Only the task's own budget: its group's (`group_budget.rs`) would stop the next agent too.
        if self.store.budget_stop_group(&record.id).ok().flatten().is_some() {
            return None;
        }
        let blocker = budget_blocker(stop)?;
        self.plan_fallback(record, Some(&blocker), report)
    }

    /// The handoff facts of a relay from `prev` (its worktree `p`) by `row`.
    pub(super) fn handoff_facts(
        &self,
        prev: &TaskRecord,
        row: &AttemptRow,
        p: &Prepared,
        input: &DelegateInput,
    ) -> handoff::Facts {
        let files = workshop::diff(p).map(|d| d.files.into_iter().map(Into::into).collect()).unwrap_or_default();
        let stored = self.store.report(&prev.id).ok().flatten();
        let report = stored.as_ref().and_then(|s| Report::parse(&s.body).ok());
        let own = stored.as_ref().is_some_and(|s| s.source != crate::report::Source::Synthesized.as_str());
        let verification = report
            .as_ref()
            .and_then(|r| r.verification.as_ref())
            .map(|v| {
                let code = v.exit_code.map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"));
                vec![format!("{}: {} ({code})", v.outcome, v.command)]
            })
            .unwrap_or_default();
        handoff::Facts {
            task_id: row.root_id.clone(),
            previous_agent: prev.agent.clone(),
            point: handoff::Point::Stopped { why: format!("{}: {}", row.stopped_by, row.message) },
            objective: prev.objective.clone(),
            acceptance_criteria: input.acceptance_criteria.clone(),
            steers: self.store.steers_of(&prev.id).unwrap_or_default().into_iter().map(|s| s.text).collect(),
            worktree: p.workdir.display().to_string(),
            base_ref: p.base_ref.clone(),
            branch: p.branch.clone(),
            files,
            commits: workshop::commits_since_base(p, HANDOFF_COMMITS),
            verification,
            last_events: self.store.last_events(&prev.id, HANDOFF_EVENTS, HANDOFF_EVENT_BYTES).unwrap_or_default(),
            summary: report.filter(|_| own).map(|r| r.summary),
        }
    }
}

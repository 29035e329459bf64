//! Quota parking (issue 17, item 3): a quota or rate-limit blocker that says
//! when it lifts parks the task instead of failing it, and the same agent
//! resumes it then, in the same native session where the agent can resume
//! one (claude `--resume`, codex `exec resume`, …), else from the objective
//! with a note saying why it starts again.
//!
//! A park is an attempt of the task's chain (`fallback.rs`), so the caller
//! keeps the first task id: its status and await follow the chain, and show
//! `pending` with `parked_until` while the resuming attempt waits. Durable
//! in the same steps as a fallback:
//!
//! 1. At the blocker, before the run is stopped: the park (task, resuming
//!    task id chosen once, reset time, session) is stored (`task_parks`).
//! 2. At the task's end: the park becomes the chain's next attempt (or is
//!    dropped: the task changed files, or a fallback agent takes over).
//! 3. The resuming task is delegated at once, `pending`; the queue leaves it
//!    alone until `parked_until`, when a timer gives the queue a turn.
//!    After a restart recovery re-arms the timers; cancel ends it like any
//!    queued task.
//!
//! The choice, by `on_blocker`: `park` parks first and falls back when it
//! cannot; `fallback` (the default) falls back first and parks when no other
//! agent of the chain is installed and allowed (a caller who named an agent
//! without a role has no chain, so its quota parks); `fail` never does
//! either. A reset later than the task's deadline is never parked: the
//! resumed attempt gets what is left of the deadline, at least
//! [`MIN_RESUMED_MS`].
//!
//! The design beside its neighbours: `docs/design/orchestration.md`.

use std::sync::Arc;

use tracing::{info, warn};

use crate::clock::{now_ms, rfc3339};
use crate::lifecycle::OnBlocker;
use crate::oacp::{Blocker, BlockerKind, Finding, Mode, Report, Severity};
use crate::store::{AttemptRow, ParkRow, TaskRecord, TaskStatus};

use super::*;

/// The least time a resumed attempt must have before the task's deadline
/// for a park to be worth it.
pub const MIN_RESUMED_MS: i64 = 10_000;

/// Whether a blocker may park its task: until when, or why not.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ParkChoice {
    /// Park until this time.
    Until(i64),
    /// Not a quota blocker with a reset time, or parking is off.
    No,
    /// The quota lifts too late: the reason, for the report.
    TooLate(String),
}

/// The blocker with a relative reset its message names ("try again in
/// 30 s", `provider/reset.rs`) resolved against `now_ms`, the moment its
/// line was read.
pub(super) fn with_reset(blocker: &Blocker, now_ms: i64) -> Blocker {
    let mut b = blocker.clone();
    if b.kind == BlockerKind::RateLimit
        && b.resets_at_ms.is_none()
        && let Some(crate::provider::reset::ResetHint::After(ms)) = crate::provider::reset::reset_hint(&b.message)
    {
        b.resets_at_ms = Some(now_ms + ms);
    }
    b
}

/// The pure decision: a rate-limit blocker with a reset time, a policy that
/// allows parking, and enough of the deadline left after the reset.
pub(super) fn park_choice(on_blocker: OnBlocker, blocker: &Blocker, now_ms: i64, deadline_ms: i64) -> ParkChoice {
    if on_blocker == OnBlocker::Fail || blocker.kind != BlockerKind::RateLimit {
        return ParkChoice::No;
    }
    let Some(reset) = blocker.resets_at_ms else { return ParkChoice::No };
    let until = reset.max(now_ms);
    if until + MIN_RESUMED_MS > deadline_ms {
        return ParkChoice::TooLate(format!(
            "the quota lifts at {}, later than the task's deadline ({}) allows a resumed run",
            rfc3339(until),
            rfc3339(deadline_ms)
        ));
    }
    ParkChoice::Until(until)
}

/// Quota parks, a service of the engine: it records parks, makes a park the
/// chain's next attempt and adjusts the resuming request. Waking the queue
/// when a park ends is the engine's ([`Engine::arm_park`]).
pub(super) struct Parking {
    store: Arc<Store>,
    runs: Arc<LiveRuns>,
    notices: super::notifications::Notices,
    projects: Arc<super::projects::Projects>,
}

impl Parking {
    pub(super) fn new(
        store: Arc<Store>,
        runs: Arc<LiveRuns>,
        notices: super::notifications::Notices,
        projects: Arc<super::projects::Projects>,
    ) -> Parking {
        Parking { store, runs, notices, projects }
    }

    /// At a blocker, before the run is stopped: stores the park if the
    /// blocker allows one (the monitor calls it first).
    pub(super) fn note(&self, run: &Run, blocker: &Blocker) {
        let blocker = with_reset(blocker, now_ms());
        let ParkChoice::Until(until) = park_choice(run.plan.on_blocker, &blocker, now_ms(), run.deadline_ms) else {
            return;
        };
        let row = ParkRow {
            task_id: run.id.clone(),
            successor_id: crate::ids::task_id(),
            parked_until: until,
            reason: blocker.message.clone(),
            session_id: run.session_id.clone(),
            at_ms: now_ms(),
        };
        match self.store.record_park(&row) {
            Ok(row) => {
                info!(task_id = %run.id, until = %rfc3339(row.parked_until), "quota blocker: the task will park")
            }
            Err(e) => warn!(task_id = %run.id, "cannot record the park: {e}"),
        }
    }

    /// Makes a stored park the chain's next attempt, unless a worktree task
    /// changed files (its resumed run starts in a fresh worktree; a task in
    /// place resumes in the same tree, its changes still there).
    pub(super) fn park(
        &self,
        record: &TaskRecord,
        park: &ParkRow,
        session_id: Option<&str>,
        report: &mut Report,
    ) -> Option<AttemptRow> {
        if let Ok(Some(row)) = self.store.fallback_of(&record.id) {
            self.announce(record, park, report);
            return Some(row);
        }
        let git_checked = report.changes_verified_by.as_deref() == Some("git");
        let in_worktree = record.isolation == crate::oacp::Isolation::Worktree;
        if in_worktree && (!report.changes.is_empty() || (record.mode == Mode::Write && !git_checked)) {
            report.findings.push(Finding {
                severity: Severity::Medium,
                title: "not parked: the worktree task had already changed files".to_owned(),
                file: None,
                line: None,
                detail: format!(
                    "a resumed run starts in a fresh worktree. Review the changes with `caesar diff {id}`, then \
                     delegate the rest again after {}.",
                    rfc3339(park.parked_until),
                    id = record.id
                ),
            });
            let _ = self.store.drop_park(&record.id);
            return None;
        }
        if park.session_id.is_none()
            && let Some(s) = session_id
        {
            let mut with_session = park.clone();
            with_session.session_id = Some(s.to_owned());
            let _ = self.store.record_park(&with_session);
        }
        let plan = &record.launch.lifecycle;
        let row = AttemptRow {
            task_id: record.id.clone(),
            root_id: plan.root.clone().unwrap_or_else(|| record.id.clone()),
            successor_id: park.successor_id.clone(),
            next_agent: record.agent.clone(),
            stopped_by: BlockerKind::RateLimit.as_str().to_owned(),
            message: park.reason.clone(),
            at_ms: now_ms(),
        };
        match self.store.record_fallback(&row) {
            Ok(row) => {
                self.announce(record, park, report);
                Some(row)
            }
            Err(e) => {
                warn!(task_id = %record.id, "cannot record the parked attempt: {e}");
                None
            }
        }
    }

    fn announce(&self, record: &TaskRecord, park: &ParkRow, report: &mut Report) {
        report.findings.push(Finding {
            severity: Severity::Info,
            title: format!(
                "parked until {}: agent `{}` resumes then as task {}",
                rfc3339(park.parked_until),
                record.agent,
                park.successor_id
            ),
            file: None,
            line: None,
            detail: format!("the provider's quota stopped the agent: {}", park.reason),
        });
        self.runs.make(&park.successor_id, TaskStatus::Pending, 0);
        self.notices.task(
            &record.id,
            crate::notify::NotifyEvent::Parked,
            &format!("parked until {}", rfc3339(park.parked_until)),
        );
    }

    /// Adjusts the request of a parked task's resuming attempt: the same
    /// session where the agent can resume one (else a note that it starts
    /// again), and what is left of the deadline. `false` when it is no park.
    pub(super) fn resume_input(&self, prev: &TaskRecord, input: &mut DelegateInput) -> bool {
        let Ok(Some(park)) = self.store.park_of(&prev.id) else { return false };
        let deadline = prev.started_ms.unwrap_or(park.at_ms) + prev.timeout_ms as i64;
        input.timeout_ms = Some((deadline - park.parked_until).max(MIN_RESUMED_MS) as u64);
        let session = park.session_id.clone().or_else(|| prev.session_id.clone());
        let resumable = session.is_some() && self.can_resume(prev, input);
        if resumable {
            input.session_id = session;
        } else {
            input.session_id = None;
            let note = format!(
                "Note from caesar: an earlier run of this task ({}) stopped at the provider's quota ({}); \
                 its session cannot be resumed, so this run starts again from the objective.",
                prev.id, park.reason
            );
            input.context = if input.context.is_empty() { note } else { format!("{}\n\n{note}", input.context) };
        }
        true
    }

    /// Whether the agent of this request can resume a native session.
    fn can_resume(&self, prev: &TaskRecord, input: &DelegateInput) -> bool {
        let project = crate::config::project_root(std::path::Path::new(&input.workspace));
        let Ok((config, _)) = self.projects.load_config(&project) else { return false };
        let mut probe = input.clone();
        probe.agent = Some(prev.agent.clone());
        match crate::resolve::resolve(&config, &project, &probe) {
            Ok(r) => matches!(r.target, crate::resolve::AgentTarget::Provider { spec, .. } if spec.capabilities.resume),
            Err(_) => false,
        }
    }

    /// The ids of tasks parked now: the queue leaves them alone.
    pub(super) fn parked_now(&self) -> std::collections::HashSet<String> {
        let now = now_ms();
        match self.store.pending_parks() {
            Ok(rows) => rows.into_iter().filter(|p| p.parked_until > now).map(|p| p.successor_id).collect(),
            Err(e) => {
                warn!("cannot read the parked tasks: {e}");
                Default::default()
            }
        }
    }
}

impl Engine {
    /// At a blocked task's end: park it, or fall back along its chain, in
    /// the order its `on_blocker` says. Returns the next attempt, if any.
    pub(super) fn after_blocker(
        &self,
        record: &TaskRecord,
        blocker: Option<&Blocker>,
        session_id: Option<&str>,
        report: &mut Report,
    ) -> Option<AttemptRow> {
        let park = self.store.park_of(&record.id).ok().flatten();
        // A park stored before a crash stands for the blocker the new daemon did not see again.
        let fallback_blocker = park.as_ref().map(|p| Blocker {
            kind: BlockerKind::RateLimit,
            message: p.reason.clone(),
            resets_at_ms: Some(p.parked_until),
        });
        let blocker = blocker.or(fallback_blocker.as_ref());
        let on_blocker = record.launch.lifecycle.on_blocker;
        if park.is_none()
            && let Some(b) = blocker
            && let ParkChoice::TooLate(why) = park_choice(
                on_blocker,
                &with_reset(b, now_ms()),
                now_ms(),
                record.started_ms.unwrap_or_else(now_ms) + record.timeout_ms as i64,
            )
        {
            report.findings.push(Finding {
                severity: Severity::Medium,
                title: "not parked: the quota lifts after the task's deadline".to_owned(),
                file: None,
                line: None,
                detail: format!("{why}. Delegate it again after the reset, or with a longer `timeout_ms`."),
            });
        }
        if let Some(park) = &park
            && on_blocker == OnBlocker::Park
            && let Some(row) = self.parking.park(record, park, session_id, report)
        {
            return Some(row);
        }
        if let Some(row) = self.plan_fallback(record, blocker, report) {
            if park.is_some() && row.successor_id != park.as_ref().map(|p| p.successor_id.clone()).unwrap_or_default() {
                let _ = self.store.drop_park(&record.id);
            }
            return Some(row);
        }
        let park = park?;
        if on_blocker == OnBlocker::Park {
            // Refused above already (it had changed files).
            return None;
        }
        self.parking.park(record, &park, session_id, report)
    }

    /// Gives the queue a turn when a park ends.
    pub(super) fn arm_park(self: &Arc<Self>, successor_id: &str, until_ms: i64) {
        let engine = self.clone();
        let id = successor_id.to_owned();
        tokio::spawn(async move {
            let wait = (until_ms - now_ms()).max(0) as u64;
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            info!(task_id = %id, "the park ended: resuming");
            engine.schedule().await;
        });
    }

    /// After a restart: a timer for every task still parked.
    pub(super) fn rearm_parks(self: &Arc<Self>) {
        if let Ok(rows) = self.store.pending_parks() {
            for p in rows {
                self.arm_park(&p.successor_id, p.parked_until);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(resets: Option<i64>) -> Blocker {
        Blocker { kind: BlockerKind::RateLimit, message: "429".into(), resets_at_ms: resets }
    }

    #[test]
    fn a_quota_with_a_reset_inside_the_deadline_parks() {
        assert_eq!(park_choice(OnBlocker::Park, &quota(Some(5_000)), 1_000, 60_000), ParkChoice::Until(5_000));
        assert_eq!(park_choice(OnBlocker::Fallback, &quota(Some(5_000)), 1_000, 60_000), ParkChoice::Until(5_000));
        // A reset in the past resumes now.
        assert_eq!(park_choice(OnBlocker::Park, &quota(Some(10)), 1_000, 60_000), ParkChoice::Until(1_000));
    }

    #[test]
    fn no_park_without_a_reset_for_fail_or_for_other_blockers() {
        assert_eq!(park_choice(OnBlocker::Park, &quota(None), 0, 60_000), ParkChoice::No);
        assert_eq!(park_choice(OnBlocker::Fail, &quota(Some(5_000)), 0, 60_000), ParkChoice::No);
        let auth = Blocker { kind: BlockerKind::Auth, message: "401".into(), resets_at_ms: Some(5_000) };
        assert_eq!(park_choice(OnBlocker::Park, &auth, 0, 60_000), ParkChoice::No);
    }

    #[test]
    fn a_reset_past_the_deadline_is_not_parked() {
        let c = park_choice(OnBlocker::Park, &quota(Some(55_000)), 0, 60_000);
        assert!(matches!(&c, ParkChoice::TooLate(why) if why.contains("later than the task's deadline")), "{c:?}");
    }
}

//! The review loop (issue 32, item 2): a write task delegated with
//! `review_by` is reviewed, read-only, in its own worktree, by another
//! agent (from a role: the first of another model family than the
//! worker's), and the reviewer's findings go back to the worker as a
//! continuation (`continuation.rs`) in the same worktree, round after
//! round, until the reviewer approves or `review_rounds` is reached.
//!
//! The loop is stored (`store/reviews.rs`) with its first worker task and
//! its group in one transaction, so it exists once the delegation is
//! answered. Every ending of a task wakes this room's loop
//! ([`Engine::finish_task`]), which takes each loop under way one step,
//! one at a time:
//!
//! - `working`: when the round's worker ended succeeded (and its
//!   verification passed, if it has one), the reviewer's id is chosen and
//!   stored with the step, then the reviewer is delegated under it; a
//!   worker that failed stops the loop, saying so.
//! - `reviewing`: when the reviewer ended, its review (read at its end from
//!   its final message, strictly and within bounds: `crate::review`) is
//!   checked against the worktree's diff now (a finding whose hunk is no
//!   longer there is `stale`, and not sent); then the round's findings and
//!   the next step are stored in one transaction: the next worker run's id
//!   (delegated just after, continuing the worker with each open finding in
//!   its prompt), or the loop's end (`approved`, or `partial` with the open
//!   findings in the last worker's report).
//!
//! A step's task is delegated under the id stored with it, and a
//! delegation under a taken id returns the existing task: a daemon killed
//! between the two delegates the task after its restart (the sweep after
//! recovery), never twice. Each task of the loop is a member of its group,
//! so `caesar status g_…` shows the rounds side by side.

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tracing::{Instrument, info, info_span, warn};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::{Isolation, Mode};
use crate::review::{self as pure, ReviewOutcome, Verdict};
use crate::store::{FindingRow, GroupRecord, ReviewLoop, ReviewStep, TaskRecord, TaskStatus};

use super::review_brief::{self, ReviewFacts};
use super::*;

/// Review rounds when the caller names none.
pub const DEFAULT_ROUNDS: u32 = 3;
/// The most review rounds a loop may have.
pub const MAX_ROUNDS: u32 = 5;
/// The index round-level problems are stored from, after the findings.
const PROBLEM_IDX: u32 = 1000;

/// The review a delegation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub by: String,
    pub rounds: u32,
}

/// Reads `review_by` and `review_rounds` of a request; `None` without a
/// reviewer. Refuses what needs no lookup to refuse.
pub fn ask_of(input: &DelegateInput) -> Result<Option<Ask>> {
    let Some(by) = input.review_by.as_deref().map(str::trim).filter(|b| !b.is_empty()) else {
        if input.review_rounds.is_some() {
            return Err(Error::Invalid(
                "`review_rounds` without `review_by`: name the reviewer (an agent or a role), or drop it".to_owned(),
            ));
        }
        return Ok(None);
    };
    if by.len() > 64 || !by.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
        return Err(Error::Invalid(format!(
            "`review_by` is `{}`, which is no agent or role name: name one `caesar agents` or `caesar roles` lists",
            by.chars().take(80).collect::<String>()
        )));
    }
    let rounds = input.review_rounds.unwrap_or(DEFAULT_ROUNDS);
    if rounds == 0 || rounds > MAX_ROUNDS {
        return Err(Error::Invalid(format!(
            "`review_rounds` is {rounds}: use 1 to {MAX_ROUNDS} (the default is {DEFAULT_ROUNDS})"
        )));
    }
    if let Some(m) = input.mode.as_deref().and_then(Mode::parse)
        && m != Mode::Write
    {
        return Err(Error::Invalid(format!(
            "`review_by` reviews a write task's changes, but this task is read-only: use mode \"write\" \
             (`caesar run --mode write --review-by {by}`), or delegate the review itself as a read-only task"
        )));
    }
    if input.continue_from.as_deref().is_some_and(|c| !c.is_empty()) {
        return Err(Error::Invalid(
            "`review_by` with `continue_from` is refused: a review loop starts with its worker's first run; \
             delegate the work with `review_by`, or continue the task without it"
                .to_owned(),
        ));
    }
    if !input.depends_on.is_empty() {
        return Err(Error::Invalid(
            "`review_by` with `depends_on` is not supported yet: delegate the stacked task without `review_by`"
                .to_owned(),
        ));
    }
    Ok(Some(Ask { by: by.to_owned(), rounds }))
}

/// The room's own state: the loop's channel (a wake is "look again").
pub(super) struct Reviews {
    tx: mpsc::UnboundedSender<()>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<()>>>,
    /// Told after each look at the loops: an await on a loop's group
    /// takes the members a step added.
    stepped: tokio::sync::Notify,
}

impl Default for Reviews {
    fn default() -> Reviews {
        let (tx, rx) = mpsc::unbounded_channel();
        Reviews { tx, rx: Mutex::new(Some(rx)), stepped: tokio::sync::Notify::new() }
    }
}

impl Reviews {
    /// A task ended, or recovery is done: the loops under way take a step.
    pub(super) fn wake(&self) {
        let _ = self.tx.send(());
    }
}

/// A loop as a task view shows it (issue 32).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewView {
    pub loop_id: String,
    pub group_id: String,
    /// This task's round and part (`worker` or `reviewer`).
    pub round: u32,
    pub part: String,
    pub rounds: u32,
    /// The loop's round under way (or its last).
    pub current_round: u32,
    pub state: String,
    pub note: String,
    pub findings: Vec<FindingRow>,
}

/// A loop in words, for a task of it.
pub fn summary(v: &ReviewView) -> String {
    let part = if v.part == "reviewer" { "the reviewer's run" } else { "the worker's run" };
    let state = match v.state.as_str() {
        "working" => format!("the loop is in round {}, the worker's run", v.current_round),
        "reviewing" => format!("the loop is in round {}, the reviewer's run", v.current_round),
        s => format!("the loop is {s}"),
    };
    let note = if v.note.is_empty() { String::new() } else { format!(": {}", v.note) };
    format!(
        "round {} of {}, {part}; {state}{note} (group {}, `caesar status {}`)",
        v.round, v.rounds, v.group_id, v.group_id
    )
}

/// A review view of `task_id`, when it is a task of a loop.
pub fn view_of(store: &crate::store::Store, task_id: &str) -> Result<Option<ReviewView>> {
    let Some(m) = store.review_member(task_id)? else { return Ok(None) };
    let Some(lp) = store.review_loop(&m.loop_id)? else { return Ok(None) };
    Ok(Some(ReviewView {
        findings: store.review_findings(&lp.id)?,
        loop_id: lp.id,
        group_id: lp.group_id,
        round: m.round,
        part: m.part,
        rounds: lp.rounds,
        current_round: lp.round,
        state: lp.state,
        note: lp.note,
    }))
}

/// Why a worker's ended run is not reviewed (the loop stops), if it is not.
fn worker_stops(worker: &TaskRecord, report: Option<&crate::store::StoredReport>, round: u32) -> Option<String> {
    let id = &worker.id;
    if worker.status != TaskStatus::Succeeded {
        let why = worker.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        return Some(format!(
            "the worker's run of round {round} (task {id}) ended {}{why}; nothing was reviewed after it",
            worker.status.as_str()
        ));
    }
    let body: serde_json::Value = report.and_then(|r| serde_json::from_str(&r.body).ok()).unwrap_or_default();
    if let Some(outcome) = body["verification"]["outcome"].as_str()
        && outcome != "passed"
    {
        return Some(format!(
            "the worker's verification of round {round} (task {id}) {outcome}; nothing was reviewed after it"
        ));
    }
    match report.map(|r| r.status.as_str()) {
        Some(s @ ("failed" | "blocked")) => {
            Some(format!("the worker's report of round {round} (task {id}) is {s}; nothing was reviewed after it"))
        }
        _ => None,
    }
}

/// The model family of an agent of `config`: a native provider's (its
/// adapter's data), none for an `[[agent]]` template.
fn family_of(config: &crate::config::Config, agent: &str) -> Option<&'static str> {
    if config.agents.iter().any(|(a, _)| a.id == agent) {
        return None;
    }
    crate::provider::spec(agent).and_then(|s| s.family)
}

/// The stored report of `worker` made `partial`, with the open findings and
/// the loop's note as findings of its own.
fn partial_report(worker: &str, body: &str, open: &[FindingRow], note: &str) -> Option<(String, String, String)> {
    let mut report: crate::oacp::Report = serde_json::from_str(body).ok()?;
    if report.status == crate::oacp::ReportStatus::Success {
        report.status = crate::oacp::ReportStatus::Partial;
    }
    report.findings.push(crate::oacp::Finding {
        severity: crate::oacp::Severity::Medium,
        title: "the review loop ended without the reviewer's approval".to_owned(),
        file: None,
        line: None,
        detail: note.to_owned(),
    });
    for f in open {
        let severity = match f.severity.as_str() {
            "critical" => crate::oacp::Severity::Critical,
            "high" => crate::oacp::Severity::High,
            "low" => crate::oacp::Severity::Low,
            "info" => crate::oacp::Severity::Info,
            _ => crate::oacp::Severity::Medium,
        };
        report.findings.push(crate::oacp::Finding {
            severity,
            title: format!("review (round {}): {}", f.round, f.title),
            file: Some(f.file.clone()).filter(|f| !f.is_empty()),
            line: Some(f.line).filter(|l| *l > 0),
            detail: if f.hunk.is_empty() { f.detail.clone() } else { format!("{}\n{}", f.detail, f.hunk) },
        });
    }
    let status = report.status.as_str().to_owned();
    Some((worker.to_owned(), status, serde_json::to_string_pretty(&report).ok()?))
}

/// The round's findings as stored: each anchored one `open` when its hunk
/// stands in the diff now, else `stale`; each problem of the answer a
/// finding of the round without a place.
fn round_rows(round: u32, reviewer: &str, outcome: &ReviewOutcome, patch: &str) -> Vec<FindingRow> {
    let files = pure::file_patches(patch);
    let mut rows: Vec<FindingRow> = outcome
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| FindingRow {
            round,
            reviewer_task_id: reviewer.to_owned(),
            idx: i as u32,
            file: f.file.clone(),
            line: f.line,
            hunk: f.hunk.clone(),
            severity: f.severity.clone(),
            title: f.title.clone(),
            detail: f.detail.clone(),
            state: if pure::hunk_stands(&f.hunk, files.get(&f.file).map(String::as_str)) { "open" } else { "stale" }
                .to_owned(),
        })
        .collect();
    for (i, p) in outcome.problems.iter().enumerate() {
        rows.push(FindingRow {
            round,
            reviewer_task_id: reviewer.to_owned(),
            idx: PROBLEM_IDX + i as u32,
            file: String::new(),
            line: 0,
            hunk: String::new(),
            severity: "medium".to_owned(),
            title: format!("the review of round {round} could not be read whole"),
            detail: p.clone(),
            state: "open".to_owned(),
        });
    }
    rows
}

impl Engine {
    /// Stores a staged task with its review loop and the loop's group,
    /// refusing one that does not write in a worktree or whose reviewer
    /// cannot be had.
    pub(super) fn store_reviewed(&self, record: &TaskRecord, ask: &Ask) -> Result<()> {
        if record.mode != Mode::Write || !record.launch.prepares_worktree() {
            return Err(Error::Invalid(format!(
                "`review_by` reviews a write task's changes in its worktree, but this task would run {} in place: \
                 use mode \"write\" (`caesar run --mode write --review-by {}`)",
                record.mode.as_str(),
                ask.by
            )));
        }
        self.reviewer_agent(&ask.by, record)?;
        let group = GroupRecord {
            id: format!("g_{:012x}", u64::from_str_radix(&crate::ids::task_id()[2..], 16).unwrap_or(0)),
            created_ms: now_ms(),
            objective: record.objective.trim().to_owned(),
            workspace: record.workspace.clone(),
            task_ids: vec![record.id.clone()],
        };
        let lp = ReviewLoop {
            id: record.id.clone(),
            group_id: group.id.clone(),
            review_by: ask.by.clone(),
            rounds: ask.rounds,
            round: 1,
            state: "working".to_owned(),
            worker: record.id.clone(),
            reviewer: None,
            note: String::new(),
            prev_worker: None,
        };
        self.store.insert_reviewed(record, &lp, &group)
    }

    /// The reviewer of `worker`: the agent `by` names, or the first agent of
    /// role `by` of another model family than the worker's; checked to
    /// resolve (known, installed, allowed) for a read-only run.
    fn reviewer_agent(&self, by: &str, worker: &TaskRecord) -> Result<String> {
        let project = crate::config::project_root(Path::new(&worker.workspace));
        let (config, _) = self.projects.load_config(&project)?;
        let agent = match config.roles.iter().find(|(r, _)| r.name == by) {
            Some((role, _)) => {
                let candidates: Vec<(String, Option<&'static str>)> =
                    role.agents.iter().map(|a| (a.clone(), family_of(&config, a))).collect();
                let family = crate::provider::family(worker.launch.provider);
                pure::pick_reviewer(by, (&worker.agent, family), &candidates).map_err(Error::Invalid)?
            }
            None => by.to_owned(),
        };
        let probe = DelegateInput {
            objective: "review".to_owned(),
            agent: Some(agent.clone()),
            mode: Some(Mode::ReadOnly.as_str().to_owned()),
            workspace: worker.workspace.clone(),
            host: host_of(worker),
            ..Default::default()
        };
        crate::resolve::resolve_with(&config, &project, &probe, &self.projects.quota.headroom_with(&config))
            .map_err(|e| e.with_note(&format!("(the reviewer `review_by` = `{by}`)")))?;
        Ok(agent)
    }

    /// Starts the loop that takes the review loops' steps (once; from recovery).
    pub(super) fn start_reviews(self: &Arc<Self>) {
        let Some(mut rx) = self.reviews.rx.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let weak = Arc::downgrade(self);
        tokio::spawn(
            async move {
                while rx.recv().await.is_some() {
                    // Wakes that came meanwhile are one look.
                    while rx.try_recv().is_ok() {}
                    let Some(engine) = weak.upgrade() else { break };
                    if !engine.queue.recovered.load(std::sync::atomic::Ordering::SeqCst) {
                        continue;
                    }
                    let loops = match engine.store.active_review_loops() {
                        Ok(l) => l,
                        Err(e) => {
                            warn!("reading the review loops failed: {e}");
                            continue;
                        }
                    };
                    for lp in loops {
                        let id = lp.id.clone();
                        if let Err(e) = engine.review_step(lp).await {
                            warn!(task_id = %id, "the review loop's step failed: {e}");
                        }
                    }
                    engine.reviews.stepped.notify_waiters();
                }
            }
            .instrument(info_span!("reviews")),
        );
    }

    /// Waits until `group_id`'s review loop (if it is a loop's group under
    /// way) takes its next step, at most `limit`; false at once when it is
    /// none. An await on the group then looks at its members again.
    pub async fn review_step_of_group(&self, group_id: &str, limit: std::time::Duration) -> bool {
        let stepped = self.reviews.stepped.notified();
        if !self.store.review_loop_of_group(group_id).ok().flatten().is_some_and(|l| l.active()) {
            return false;
        }
        let _ = tokio::time::timeout(limit, stepped).await;
        true
    }

    /// The worker task of a loop's round: its current attempt (a fallback's head).
    fn round_worker(&self, id: &str) -> Result<Option<TaskRecord>> {
        let (head, _) = super::fallback::head_of(&self.store, id);
        self.store.task(&head)
    }

    /// One step of a loop under way, if its current task ended.
    async fn review_step(self: &Arc<Self>, lp: ReviewLoop) -> Result<()> {
        let Some(worker) = self.round_worker(&lp.worker)? else {
            // The round's worker run was stored as the next step, never delegated (a crash).
            return self.delegate_worker(&lp).await;
        };
        self.store.join_review_group(&lp.group_id, &worker.id)?;
        if lp.state == "working" {
            if !worker.status.is_terminal() {
                return Ok(());
            }
            if let Some(why) = worker_stops(&worker, self.store.report(&worker.id)?.as_ref(), lp.round) {
                info!(task_id = %lp.id, "review loop stopped: {why}");
                self.store.review_stopped(&lp, &why)?;
                return Ok(());
            }
            let reviewer = crate::ids::task_id();
            if !self.store.review_step_reviewer(&lp, &reviewer)? {
                return Ok(());
            }
            let lp = ReviewLoop { state: "reviewing".to_owned(), reviewer: Some(reviewer), ..lp };
            return self.delegate_reviewer(&lp, &worker).await;
        }
        let Some(rid) = lp.reviewer.clone() else { return Ok(()) };
        match self.store.task(&rid)? {
            None => self.delegate_reviewer(&lp, &worker).await,
            Some(r) => {
                self.store.join_review_group(&lp.group_id, &r.id)?;
                if !r.status.is_terminal() {
                    return Ok(());
                }
                self.reviewer_ended(&lp, &worker, &r).await
            }
        }
    }

    /// Delegates the round's reviewer under the id its step stored.
    async fn delegate_reviewer(self: &Arc<Self>, lp: &ReviewLoop, worker: &TaskRecord) -> Result<()> {
        let Some(rid) = lp.reviewer.clone() else { return Ok(()) };
        let started = async {
            let agent = self.reviewer_agent(&lp.review_by, worker)?;
            let Some(p) =
                worker.workshop.clone().filter(|p| p.isolation == Isolation::Worktree && p.repo_root.is_some())
            else {
                return Err(Error::Precondition(format!("task {} has no worktree to review", worker.id)));
            };
            let first = self.store.task(&lp.id)?.unwrap_or_else(|| worker.clone());
            let criteria = first.launch.lifecycle.request.as_ref().map(|r| r.acceptance_criteria.clone());
            let patch = self.diff_text(&p).await;
            let sent: Vec<FindingRow> =
                self.store.review_findings(&lp.id)?.into_iter().filter(|f| f.state == "sent").collect();
            let (objective, context) = review_brief::reviewer_brief(&ReviewFacts {
                worker_task: &worker.id,
                worker_agent: &worker.agent,
                objective: &first.objective,
                acceptance_criteria: criteria.as_deref().unwrap_or_default(),
                round: lp.round,
                rounds: lp.rounds,
                base: p.base_ref.as_deref(),
                patch: &patch,
                sent: &sent,
            });
            // Read-only, in a worktree of its own stacked on the worker's result
            // (`stacking.rs`): the same files at the same lines, and no way to
            // touch the worker's, nor a repository opened through the worker's
            // worktree, whose `.git` is the worker agent's to rewrite (issue 29).
            let input = DelegateInput {
                objective,
                context,
                agent: Some(agent),
                mode: Some(Mode::ReadOnly.as_str().to_owned()),
                isolation: Some(Isolation::Worktree.as_str().to_owned()),
                workspace: first.workspace.clone(),
                depends_on: vec![worker.id.clone()],
                host: host_of(&first),
                chosen_id: Some(rid.clone()),
                ..Default::default()
            };
            self.delegate(input).await
        };
        match started.await {
            Ok(d) => {
                info!(task_id = %lp.id, reviewer = %d.record.id, round = lp.round, "review round: reviewer started");
                self.store.join_review_group(&lp.group_id, &d.record.id)
            }
            Err(e) => {
                let why = format!("the reviewer of round {} could not start: {e}", lp.round);
                warn!(task_id = %lp.id, "{why}");
                self.store.review_stopped(lp, &why)?;
                Ok(())
            }
        }
    }

    /// Delegates the round's worker run, continuing the previous one with
    /// the findings sent to it, under the id its step stored.
    async fn delegate_worker(self: &Arc<Self>, lp: &ReviewLoop) -> Result<()> {
        let Some(source) = lp.prev_worker.clone() else { return Ok(()) };
        let sent: Vec<FindingRow> = self
            .store
            .review_findings(&lp.id)?
            .into_iter()
            .filter(|f| f.round + 1 == lp.round && f.state == "sent")
            .collect();
        let reviewer = match sent.first() {
            Some(f) => self.store.task(&f.reviewer_task_id)?.map(|t| t.agent).unwrap_or_default(),
            None => String::new(),
        };
        let first = self.store.task(&lp.id)?;
        let input = DelegateInput {
            objective: review_brief::worker_prompt(lp.round - 1, &reviewer, &sent),
            continue_from: Some(source),
            workspace: first.as_ref().map(|f| f.workspace.clone()).unwrap_or_default(),
            host: first.as_ref().map(host_of).unwrap_or_default(),
            chosen_id: Some(lp.worker.clone()),
            ..Default::default()
        };
        match self.delegate(input).await {
            Ok(d) => {
                info!(task_id = %lp.id, worker = %lp.worker, round = lp.round, "review round: the worker goes on");
                self.store.join_review_group(&lp.group_id, &d.record.id)
            }
            Err(e) => {
                let why = format!("the worker's run of round {} could not start: {e}", lp.round);
                warn!(task_id = %lp.id, "{why}");
                self.store.review_stopped(lp, &why)?;
                Ok(())
            }
        }
    }

    /// The worktree's diff now, as text (empty when git cannot say).
    async fn diff_text(&self, p: &crate::workshop::Prepared) -> String {
        let p = p.clone();
        match tokio::task::spawn_blocking(move || crate::workshop::diff(&p)).await {
            Ok(Ok(d)) => d.patch,
            _ => String::new(),
        }
    }

    /// The round's reviewer ended: its findings stored, checked against the
    /// diff now, and the loop's next step.
    async fn reviewer_ended(
        self: &Arc<Self>,
        lp: &ReviewLoop,
        worker: &TaskRecord,
        reviewer: &TaskRecord,
    ) -> Result<()> {
        let outcome = if reviewer.status != TaskStatus::Succeeded {
            ReviewOutcome {
                problems: vec![format!(
                    "the reviewer's run (task {}) ended {}{}",
                    reviewer.id,
                    reviewer.status.as_str(),
                    reviewer.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                )],
                ..Default::default()
            }
        } else {
            match self.store.review_result(&reviewer.id)?.and_then(|b| serde_json::from_str(&b).ok()) {
                Some(o) => o,
                None => ReviewOutcome {
                    problems: vec![format!("no review was kept of the reviewer's run (task {})", reviewer.id)],
                    ..Default::default()
                },
            }
        };
        let patch = match worker.workshop.as_ref() {
            Some(p) => self.diff_text(p).await,
            None => String::new(),
        };
        let mut rows = round_rows(lp.round, &reviewer.id, &outcome, &patch);
        let anchored_open = |r: &FindingRow| r.state == "open" && !r.file.is_empty();
        let open = rows.iter().filter(|r| anchored_open(r)).count();
        let n = lp.round;
        let partial = |rows: &[FindingRow], note: String| -> Result<ReviewStep> {
            let body = self.store.report(&worker.id)?.map(|r| r.body).unwrap_or_default();
            let open: Vec<FindingRow> = rows.iter().filter(|r| r.state == "open").cloned().collect();
            let report = partial_report(&worker.id, &body, &open, &note);
            Ok(ReviewStep::End { state: "partial".to_owned(), note, report })
        };
        let next = match outcome.verdict {
            Some(Verdict::Approve) => ReviewStep::End {
                state: "approved".to_owned(),
                note: format!("approved by agent `{}` in round {n}", reviewer.agent),
                report: None,
            },
            None => {
                partial(&rows, format!("the review of round {n} could not be read: {}", outcome.problems.join("; ")))?
            }
            Some(Verdict::Changes) if open == 0 => partial(
                &rows,
                format!(
                    "the reviewer asked for changes in round {n}, but none of its findings is anchored to a hunk of the \
                     diff as it is now (each is stale or unplaced): nothing was sent to the worker"
                ),
            )?,
            Some(Verdict::Changes) if n >= lp.rounds => partial(
                &rows,
                format!("the reviewer still asks for changes after {n} round(s): {open} finding(s) open"),
            )?,
            Some(Verdict::Changes) => {
                for r in rows.iter_mut().filter(|r| anchored_open(r)) {
                    r.state = "sent".to_owned();
                }
                ReviewStep::Continue { worker: crate::ids::task_id() }
            }
        };
        if !self.store.review_round_ended(lp, &reviewer.id, &rows, &next)? {
            return Ok(());
        }
        match next {
            ReviewStep::Continue { worker: next } => {
                let lp = ReviewLoop {
                    state: "working".to_owned(),
                    round: lp.round + 1,
                    prev_worker: Some(lp.worker.clone()),
                    worker: next,
                    reviewer: None,
                    ..lp.clone()
                };
                self.delegate_worker(&lp).await
            }
            ReviewStep::End { state, note, .. } => {
                info!(task_id = %lp.id, state = %state, "review loop ended: {note}");
                self.runs.pulse(&worker.id);
                Ok(())
            }
        }
    }
}

/// Who delegated the loop's first task, for the recursion rule of its later runs.
fn host_of(task: &TaskRecord) -> crate::request::Host {
    task.launch.lifecycle.request.as_ref().map(|r| r.host).unwrap_or_default()
}

/// Reads a reviewer's review at its end, within bounds, from its final
/// answer, its messages, and (a generic agent's words) its whole raw log.
/// Blocking (the raw log).
pub(super) fn read_review(final_text: &str, messages: &str, raw_log: Option<&Path>) -> ReviewOutcome {
    for text in [final_text, messages] {
        let mut s = pure::Scanner::default();
        s.text(text);
        match s.finish() {
            pure::Scan::Nothing => {}
            scan => return pure::read(scan),
        }
    }
    let mut s = pure::Scanner::default();
    if let Some(path) = raw_log
        && let Ok(f) = crate::safe_fs::open_regular(path)
    {
        let _ = s.reader(std::io::BufReader::new(f));
    }
    pure::read(s.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(by: Option<&str>, rounds: Option<u32>, mode: Option<&str>) -> DelegateInput {
        DelegateInput {
            review_by: by.map(str::to_owned),
            review_rounds: rounds,
            mode: mode.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn a_review_ask_is_read_and_bad_ones_are_refused_by_name() {
        assert_eq!(ask_of(&input(None, None, None)).unwrap(), None);
        assert_eq!(
            ask_of(&input(Some("codex"), None, Some("write"))).unwrap(),
            Some(Ask { by: "codex".to_owned(), rounds: DEFAULT_ROUNDS })
        );
        let err = |i: DelegateInput| ask_of(&i).unwrap_err().to_string();
        assert!(err(input(Some("codex"), Some(0), None)).contains("`review_rounds` is 0: use 1 to 5"));
        assert!(err(input(Some("codex"), Some(9), None)).contains("`review_rounds` is 9: use 1 to 5"));
        assert!(err(input(None, Some(2), None)).contains("`review_rounds` without `review_by`"));
        assert!(err(input(Some("codex"), None, Some("read-only"))).contains("use mode \"write\""));
        assert!(err(input(Some("a b"), None, None)).contains("no agent or role name"));
    }

    #[test]
    fn the_families_are_the_adapters_data() {
        use crate::launch::ProviderId;
        assert_eq!(crate::provider::family(ProviderId::Claude), Some("anthropic"));
        assert_eq!(crate::provider::family(ProviderId::Codex), Some("openai"));
        assert_eq!(crate::provider::family(ProviderId::Gemini), Some("google"));
        assert_eq!(crate::provider::family(ProviderId::Opencode), None, "any vendor's models");
        assert_eq!(crate::provider::family(ProviderId::Generic), None);
        // A role of claude, opencode and codex reviews claude's work with codex.
        let chain: Vec<(String, Option<&'static str>)> = [ProviderId::Claude, ProviderId::Opencode, ProviderId::Codex]
            .iter()
            .map(|p| (p.as_str().to_owned(), crate::provider::family(*p)))
            .collect();
        let worker = (ProviderId::Claude.as_str(), crate::provider::family(ProviderId::Claude));
        assert_eq!(pure::pick_reviewer("review", worker, &chain).unwrap(), ProviderId::Codex.as_str());
    }

    #[test]
    fn a_stale_finding_is_stored_stale_and_a_problem_without_a_place() {
        let outcome = ReviewOutcome {
            verdict: Some(Verdict::Changes),
            findings: vec![
                pure::ReviewFinding {
                    file: "a.txt".to_owned(),
                    line: 1,
                    hunk: "+old".to_owned(),
                    severity: "high".to_owned(),
                    title: "t".to_owned(),
                    detail: String::new(),
                },
                pure::ReviewFinding {
                    file: "a.txt".to_owned(),
                    line: 1,
                    hunk: "+new".to_owned(),
                    severity: "low".to_owned(),
                    title: "t2".to_owned(),
                    detail: String::new(),
                },
            ],
            problems: vec!["finding #3 left out".to_owned()],
        };
        let patch = "diff --git a/a.txt b/a.txt\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+new\n";
        let rows = round_rows(2, "t_r", &outcome, patch);
        let states: Vec<(&str, &str)> = rows.iter().map(|r| (r.file.as_str(), r.state.as_str())).collect();
        assert_eq!(states, [("a.txt", "stale"), ("a.txt", "open"), ("", "open")]);
        assert_eq!(rows[2].idx, PROBLEM_IDX);
    }

    #[test]
    fn a_partial_report_lists_the_open_findings() {
        let body =
            serde_json::json!({"protocol": "caesar.report/v1", "status": "success", "summary": "done"}).to_string();
        let open = [FindingRow {
            round: 3,
            reviewer_task_id: "t_r".to_owned(),
            idx: 0,
            file: "a.txt".to_owned(),
            line: 2,
            hunk: "+x".to_owned(),
            severity: "high".to_owned(),
            title: "still wrong".to_owned(),
            detail: "d".to_owned(),
            state: "open".to_owned(),
        }];
        let (task, status, body) = partial_report("t_w", &body, &open, "after 3 rounds").unwrap();
        assert_eq!((task.as_str(), status.as_str()), ("t_w", "partial"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["findings"][1]["title"], "review (round 3): still wrong");
        assert_eq!((v["findings"][1]["file"].as_str(), v["findings"][1]["line"].as_u64()), (Some("a.txt"), Some(2)));
        assert_eq!(v["findings"][0]["detail"], "after 3 rounds");
    }
}

//! Observing tasks: snapshots, listings, await, logs and the live event
//! stream. The engine's read side, a service over the store, the live runs
//! and the queue's and preparation's in-memory phases; it changes nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::BlockerKind;
use crate::store::{TaskRecord, TaskStatus};
use crate::tail::{self};

use super::*;

/// The read side of the engine.
pub struct Views {
    pub(super) store: Arc<Store>,
    pub(super) runs: Arc<LiveRuns>,
    pub(super) queue: Arc<queue::Queue>,
    pub(super) preparing: Arc<prepare::Preparing>,
}

impl Views {
    pub(super) fn new(
        store: Arc<Store>,
        runs: Arc<LiveRuns>,
        queue: Arc<queue::Queue>,
        preparing: Arc<prepare::Preparing>,
    ) -> Views {
        Views { store, runs, queue, preparing }
    }

    /// Tasks pending or running now.
    pub fn active_count(&self) -> Result<u32> {
        Ok(self.store.count_status(TaskStatus::Pending)? + self.store.count_status(TaskStatus::Running)?)
    }

    /// Task `id`'s stored record.
    pub fn record(&self, id: &str) -> Result<TaskRecord> {
        find_task(&self.store, id)
    }

    /// A snapshot of one task.
    pub fn status(&self, id: &str) -> Result<TaskView> {
        let record = self.record(id)?;
        if let Some(view) = self.chain_view(&record)? {
            return Ok(view);
        }
        self.view(record)
    }

    pub(super) fn view(&self, record: TaskRecord) -> Result<TaskView> {
        let report = if record.status.is_terminal() { self.store.report(&record.id)? } else { None };
        let pending_questions =
            if record.status.is_terminal() { Vec::new() } else { self.store.pending_questions(&record.id)? };
        let question_details = {
            let dir = TaskDir::new(&record.task_dir);
            pending_questions.iter().map(|q| permission_answers::details_of(&dir, &q.question_id)).collect()
        };
        let live = self.runs.get(&record.id);
        let output = live.as_ref().and_then(|l| l.output.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let activity = live.as_ref().and_then(|l| l.activity.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let (queue_position, phase) = if record.status == TaskStatus::Pending {
            let phase = if self.queue.is_starting(&record.id) {
                Phase::Starting
            } else if self.preparing.is_preparing(&record.id)
                || (record.launch.prepares_worktree() && record.workshop.is_none())
            {
                Phase::Preparing
            } else {
                Phase::Queued
            };
            (Some(self.store.pending_before(&record)?), Some(phase))
        } else {
            (None, None)
        };
        let parked = self.park_view(&record);
        let phase = if parked.is_some() { Some(Phase::Parked) } else { phase };
        // Issue 32: a stacked task's parents, and its wait for them.
        let stack = self.store.stack_of(&record.id)?;
        let waiting = stack.as_ref().is_some_and(|s| s.state == crate::store::StackState::Waiting);
        let phase = if waiting && phase.is_some() { Some(Phase::Waiting) } else { phase };
        let lifecycle = LifecycleView {
            budget: self.budget_view(&record),
            parked,
            continues: self.store.continues(&record.id)?,
            continued_by: self.store.continued_by(&record.id)?,
            ..LifecycleView::default()
        };
        // Issue 32: the review loop it is a run of.
        let review = super::review::view_of(&self.store, &record.id)?;
        let mut view = TaskView {
            review,
            record,
            report,
            pending_questions,
            question_details,
            output,
            activity,
            queue_position,
            phase,
            lifecycle,
            verdict: Default::default(),
            stack,
        };
        let unanswered =
            if view.record.status.is_terminal() { self.store.pending_questions(&view.record.id)?.len() } else { 0 };
        view.verdict = crate::verdict::of_view(&view, unanswered);
        Ok(view)
    }

    /// Tasks, newest first.
    pub fn list(&self, statuses: &[TaskStatus], limit: u32) -> Result<Vec<TaskView>> {
        self.store.tasks(statuses, limit)?.into_iter().map(|r| self.view(r)).collect()
    }

    /// Waits until every task is finished, `timeout` passes or (with
    /// `wake_on_attention`) one of them needs the caller. Returns the views
    /// and whether the wait ended early for attention.
    pub async fn await_tasks(
        &self,
        ids: &[String],
        timeout: Duration,
        wake_on_attention: bool,
    ) -> Result<(Vec<TaskView>, bool)> {
        if ids.is_empty() {
            return Err(Error::Invalid("`task_ids` is empty: pass the ids that delegate returned".to_owned()));
        }
        bounds::check_await_ids(ids.len())?;
        let mut unknown = Vec::new();
        for id in ids {
            if let Err(Error::NotFound(_)) = self.record(id) {
                unknown.push(id.as_str());
            }
        }
        if !unknown.is_empty() {
            return Err(Error::NotFound(format!("no task {}: list tasks with `caesar ps`", unknown.join(", "))));
        }
        // A task that fell back is awaited through its chain (issue 17): the
        // wait goes on with the next attempt while the deadline allows.
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let heads: Vec<String> = ids.iter().map(|id| super::fallback::head_of(&self.store, id).0).collect();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let woke_early = self.await_heads(&heads, left, wake_on_attention).await?;
            let moved = ids.iter().zip(&heads).any(|(id, h)| super::fallback::head_of(&self.store, id).0 != *h);
            if moved && !woke_early && tokio::time::Instant::now() < deadline {
                continue;
            }
            let views = ids.iter().map(|id| self.status(id)).collect::<Result<Vec<_>>>()?;
            return Ok((views, woke_early));
        }
    }

    /// Waits on these tasks (the current attempts of the awaited ones):
    /// whether the wait ended early for attention.
    async fn await_heads(&self, ids: &[String], timeout: Duration, wake_on_attention: bool) -> Result<bool> {
        let mut waits = Vec::new();
        let mut attention = Vec::new();
        for id in ids {
            let live = self.runs.get(id);
            if let Some(l) = &live {
                let mut rx = l.attention.subscribe();
                rx.mark_unchanged();
                attention.push(rx);
            }
            let terminal = self.store.task(id)?.map(|r| r.status.is_terminal()).unwrap_or(live.is_none());
            let status_rx = live.map(|l| l.status.subscribe());
            if terminal {
                continue;
            }
            let id = id.clone();
            waits.push(async move {
                match status_rx {
                    Some(mut rx) => {
                        let _ = rx.wait_for(|s| s.is_terminal()).await;
                    }
                    // Recorded but not live: only while a restarted daemon
                    // is re-attaching. Woken by the change stream, which
                    // tells each change once it is stored (issue 33: no timer).
                    None => {
                        let mut changes = self.runs.subscribe_changes();
                        use tokio::sync::broadcast::error::RecvError;
                        while self.store.task(&id).ok().flatten().is_some_and(|r| !r.status.is_terminal()) {
                            // Until this task changed (or some changes were missed).
                            loop {
                                match changes.recv().await {
                                    Ok(changed) if changed != id => continue,
                                    Ok(_) | Err(RecvError::Lagged(_)) => break,
                                    Err(RecvError::Closed) => std::future::pending::<()>().await,
                                }
                            }
                        }
                    }
                }
            });
        }
        // A task that already needs the caller (a question waiting, a
        // blocker hit) wakes the wait at once: its signal may have come
        // before this call subscribed.
        if wake_on_attention {
            for id in ids {
                let Some(r) = self.store.task(id)? else { continue };
                let waiting = !r.status.is_terminal() && !self.store.pending_questions(id)?.is_empty();
                let blocked = r.blocker.is_some_and(|k| !r.launch.lifecycle.may_fall_back(k));
                if waiting || (!r.status.is_terminal() && blocked) {
                    return Ok(true);
                }
            }
        }
        let all_done = futures_util::future::join_all(waits);
        let any_attention = async {
            if !wake_on_attention || attention.is_empty() {
                return std::future::pending::<()>().await;
            }
            // A task that ended drops its channel: that is no call for
            // attention (its end completes the wait, or its next attempt's).
            let changes = attention.iter_mut().map(|rx| {
                Box::pin(async move {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await
                    }
                })
            });
            let _ = futures_util::future::select_all(changes).await;
        };
        let woke_early = tokio::select! {
            _ = tokio::time::timeout(timeout, all_done) => false,
            _ = any_attention => true,
        };
        Ok(woke_early)
    }

    /// Stops a running task and waits for its tree to be gone. A finished
    /// task is left alone and `false` returned.
    pub fn logs(&self, id: &str, raw: bool, limit: u32, max_bytes: u64) -> Result<Logs> {
        let record = self.record(id)?;
        if raw {
            let path = TaskDir::new(&record.task_dir).raw_log();
            let (text, size) = tail::read_tail(&path, max_bytes).map_err(|e| Error::io_at("cannot read", &path, e))?;
            let truncated = (text.len() as u64) < size;
            return Ok(Logs {
                total_events: record.event_count,
                raw: text,
                raw_size: size,
                raw_truncated: truncated,
                ..Logs::default()
            });
        }
        let events = self.store.last_events(id, limit.clamp(1, MAX_LOG_EVENTS), LOG_EVENTS_MAX_BYTES)?;
        Ok(Logs { total_events: record.event_count, events, ..Logs::default() })
    }

    /// The events of a task from `from_seq`: stored ones first, then live
    /// ones until the task ends (with `follow`).
    pub fn watch_events(&self, id: &str, from_seq: u64, follow: bool) -> Result<mpsc::Receiver<(u64, String)>> {
        self.record(id)?;
        let (tx, rx) = mpsc::channel(64);
        let live_rx = if follow {
            self.runs.get(id).map(|l| l.events.get_or_init(|| broadcast::channel(WATCH_RING).0).subscribe())
        } else {
            None
        };
        let store = self.store.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            let mut next = from_seq;
            let replay = |next: &mut u64| -> Option<Vec<(u64, String)>> {
                let rows = store.events_from(&id, *next, REPLAY_PAGE).ok()?;
                if let Some((seq, _)) = rows.last() {
                    *next = seq + 1;
                }
                Some(rows)
            };
            loop {
                let Some(rows) = replay(&mut next) else {
                    return;
                };
                let done = rows.len() < REPLAY_PAGE as usize;
                for row in rows {
                    if tx.send(row).await.is_err() {
                        return;
                    }
                }
                if done {
                    break;
                }
            }
            let Some(mut live_rx) = live_rx else { return };
            loop {
                match live_rx.recv().await {
                    Ok((seq, line)) => {
                        if seq < next {
                            continue;
                        }
                        if seq > next {
                            // Fill the gap from the store before going on.
                            let Some(rows) = replay(&mut next) else {
                                return;
                            };
                            for row in rows {
                                if tx.send(row).await.is_err() {
                                    return;
                                }
                            }
                            continue;
                        }
                        next = seq + 1;
                        if tx.send((seq, line)).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        // Lagged: catch up from the store. Closed: the task
                        // ended; send what is left and stop.
                        loop {
                            let Some(rows) = replay(&mut next) else {
                                return;
                            };
                            if rows.is_empty() {
                                break;
                            }
                            for row in rows {
                                if tx.send(row).await.is_err() {
                                    return;
                                }
                            }
                        }
                        if matches!(e, broadcast::error::RecvError::Closed) {
                            return;
                        }
                    }
                }
            }
        });
        Ok(rx)
    }

    /// The view of a task that fell back: its last attempt's, under the
    /// task's own id, with the attempts before it.
    pub(super) fn chain_view(&self, record: &TaskRecord) -> Result<Option<TaskView>> {
        let (head, rows) = super::fallback::head_of(&self.store, &record.id);
        if rows.is_empty() {
            return Ok(None);
        }
        let mut view = match self.store.task(&head)? {
            Some(h) => self.view(h)?,
            None => {
                // Between the blocked attempt's end and the next one's delegation.
                let mut v = self.view(record.clone())?;
                v.record.status = TaskStatus::Pending;
                v.record.finished_ms = None;
                v.record.agent = rows.last().map(|r| r.next_agent.clone()).unwrap_or_default();
                v.report = None;
                v.phase = Some(Phase::Starting);
                v.verdict = crate::verdict::of_view(&v, 0);
                v
            }
        };
        view.lifecycle.attempts = rows
            .iter()
            .map(|r| {
                let attempt = self.store.task(&r.task_id).ok().flatten();
                let next = self.store.task(&r.successor_id).ok().flatten();
                let files_changed = self
                    .store
                    .report(&r.task_id)
                    .ok()
                    .flatten()
                    .and_then(|s| crate::oacp::Report::parse(&s.body).ok())
                    .map_or(0, |rep| rep.changes.len() as u32);
                // The next attempt works in this one's worktree.
                let worktree = |t: &Option<TaskRecord>| t.as_ref().and_then(|t| t.workshop.as_ref()?.worktree.clone());
                AttemptView {
                    agent: attempt.as_ref().map(|t| t.agent.clone()).unwrap_or_default(),
                    task_id: r.task_id.clone(),
                    stopped_by: BlockerKind::parse(&r.stopped_by),
                    message: r.message.clone(),
                    files_changed,
                    relayed: files_changed > 0 && worktree(&attempt).is_some() && worktree(&attempt) == worktree(&next),
                }
            })
            .collect();
        view.lifecycle.current_task_id = Some(head);
        view.record.id = record.id.clone();
        Ok(Some(view))
    }

    /// The budget part of a view.
    pub(super) fn budget_view(&self, record: &TaskRecord) -> Option<BudgetView> {
        let limits = record.launch.lifecycle.budget;
        if limits.is_empty() {
            return None;
        }
        let mut meter = super::budget::Meter::new(limits, record.started_ms.unwrap_or_else(now_ms));
        if let Ok(bodies) = self.store.usage_and_messages(&record.id) {
            bodies.iter().for_each(|b| meter.observe(b));
        }
        let wall_ms = match (record.started_ms, record.finished_ms) {
            (Some(s), Some(f)) => (f - s).max(0) as u64,
            (Some(s), None) => (now_ms() - s).max(0) as u64,
            _ => 0,
        };
        let exceeded = self.store.budget_stop(&record.id).ok().flatten().map(|(l, _)| l);
        Some(BudgetView { limits, used: meter.tally, wall_ms, exceeded })
    }

    /// `parked_until` and the reason of a parked pending task.
    pub(super) fn park_view(&self, record: &TaskRecord) -> Option<(i64, String)> {
        if record.status != TaskStatus::Pending {
            return None;
        }
        let park = self.store.park_resumed_by(&record.id).ok().flatten()?;
        (park.parked_until > now_ms()).then_some((park.parked_until, park.reason))
    }
}

/// Task `id`'s stored record, or an error that says how ids look and where
/// to find them.
pub(super) fn find_task(store: &Store, id: &str) -> Result<TaskRecord> {
    if !crate::ids::is_task_id(id) {
        return Err(Error::NotFound(format!(
            "no task `{id}`: task ids look like t_0123456789ab; list tasks with `caesar ps`"
        )));
    }
    store.task(id)?.ok_or_else(|| Error::NotFound(format!("no task `{id}`: list tasks with `caesar ps`")))
}

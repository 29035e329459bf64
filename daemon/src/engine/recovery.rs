//! Recovery after a restart: every step of a task's life is safe to crash in,
//! and this is where each is finished or redone.
//!
//! - Recorded running: re-attach through the runner, or conclude it if it
//!   ended (or vanished) meanwhile.
//! - Pending, but a run exists (the daemon died between spawning and
//!   recording it): adopt it, never start it twice.
//! - Pending and preparing (no workshop recorded): kill what is left of its
//!   setup and prepare it again; preparation removes what the interrupted
//!   try made of that very task's worktree and branch.
//! - Pending and ready: left to the queue.
//!
//! The socket is served meanwhile: [`Engine::recover`] reads the tasks and
//! returns, the steps run in the background, and the queue waits for them.

use std::sync::Arc;

use tracing::{Instrument, info, info_span, warn};

use crate::clock::now_ms;
use crate::error::Result;
use crate::oacp::EventBody;
use crate::store::TaskStatus;

use super::*;

/// The longest one task's recovery holds up the next (see [`Engine::recover`]).
const RECOVERY_STEP_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

impl Engine {
    /// Re-attaches to the tasks a previous daemon left pending or running,
    /// then gives the queue a turn. Reads the tasks to recover, then returns:
    /// the re-attaching goes on in the background while the socket is
    /// served, each task's step bounded by [`RECOVERY_STEP_LIMIT`] (one that
    /// outlasts it finishes in the background, and the next goes on). The
    /// queue starts nothing until every task has had its step.
    pub async fn recover(self: &Arc<Self>) -> Result<()> {
        // The conflict radar refreshes in the background from now on (issue 17).
        self.radar.start();
        // Stacked tasks' loop (issue 32); it examines nothing before the sweep below.
        self.start_stacking();
        // The review loops' steps (issue 32); none is taken before the wake below.
        self.start_reviews();
        let mut active = self.store.tasks(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)?;
        active.reverse();
        let engine = self.clone();
        tokio::spawn(
            async move {
                for record in active {
                    let id = record.id.clone();
                    let one = engine.clone();
                    let step = tokio::spawn(async move { one.recover_task(record).await });
                    match tokio::time::timeout(RECOVERY_STEP_LIMIT, step).await {
                        Ok(Ok(Ok(()))) => {}
                        Ok(Ok(Err(e))) => warn!(task_id = %id, "recovering the task failed: {e}"),
                        Ok(Err(e)) => warn!(task_id = %id, "recovering the task panicked: {e}"),
                        Err(_) => warn!(
                            task_id = %id,
                            "recovering the task takes longer than {} s: it goes on in the background",
                            RECOVERY_STEP_LIMIT.as_secs()
                        ),
                    }
                }
                // Fallbacks recorded by a daemon that died before delegating them.
                engine.start_fallbacks().await;
                // Parked tasks: their timers died with the daemon.
                engine.rearm_parks();
                engine.queue.recovered.store(true, std::sync::atomic::Ordering::SeqCst);
                // Parents that ended while no daemon ran release or end their waiting dependents.
                engine.stacking.sweep();
                // Review loops whose tasks ended while no daemon ran take their step.
                engine.reviews.wake();
                info!("recovery done");
                engine.schedule().await;
            }
            .instrument(info_span!("recovery")),
        );
        Ok(())
    }

    /// One task left pending or running: adopted, re-attached, concluded or
    /// requeued. A task that ended meanwhile (cancelled while recovery ran)
    /// is left as it is.
    async fn recover_task(self: &Arc<Self>, record: crate::store::TaskRecord) -> Result<()> {
        let Some(record) = self.store.task(&record.id)?.filter(|r| !r.status.is_terminal()) else { return Ok(()) };
        let dir = TaskDir::new(&record.task_dir);
        let (handle, started_ms) = match &record.run {
            Some(handle) => (handle.clone(), record.started_ms.unwrap_or_else(now_ms)),
            None => match self.runner.adopt(record.runner_kind(), &record.id, &dir).await {
                Some(adopted) => {
                    // Started but never recorded: record it now (with its
                    // `started` event), or the queue would start it again.
                    let live = self.runs.make(&record.id, TaskStatus::Running, record.event_count);
                    let event = (record.event_count == 0).then(|| EventBody::Started {
                        agent: record.agent.clone(),
                        command: crate::prompt::command_line(&record.launch),
                        protections: None,
                    });
                    self.runs.emit_with(&record.id, dir.root(), &live, event.into_iter().collect(), |events| {
                        self.store.set_running(&record.id, adopted.started_ms, &adopted.handle, events)?;
                        Ok(true)
                    })?;
                    info!(task_id = %record.id, "adopted a run started but never recorded");
                    (adopted.handle, adopted.started_ms)
                }
                None => {
                    self.requeue(&record);
                    return Ok(());
                }
            },
        };
        let Some(record) = self.store.task(&record.id)? else { return Ok(()) };
        self.runs.repair_events_file(&record.id, dir.root(), record.event_count);
        let live = self
            .runs
            .get(&record.id)
            .unwrap_or_else(|| self.runs.make(&record.id, TaskStatus::Running, record.event_count));
        let exited = self.runner.exit_record(&handle, &dir).is_some();
        let alive = !exited && self.runner.is_alive(&handle);
        if record.cancel_requested && !exited {
            // A cancel recorded by a daemon that died before the run ended
            // (or before it asked the runner): asked again, before the
            // runner re-attaches, so that the run's end reads as caesar's
            // stop (a remote one's partial work still comes back) and not
            // as someone else's.
            self.runner.request_stop(&handle);
        }
        let watch = self.runner.attach(&handle, &dir);
        let mut run = Run::new(&record, dir, live, Some(handle), started_ms, record.session_id.clone());
        self.budgets.restore(&mut run);
        if run.budget.stopping
            && let Some(h) = &run.handle
        {
            // The stop was recorded; its request may not have been made.
            self.runner.request_stop(h);
        }
        info!(task_id = %record.id, exited, alive, "re-attaching to a task");
        let engine = self.clone();
        let span = info_span!("task", task_id = %record.id);
        if alive {
            self.permissions.resume(&mut run);
            tokio::spawn(async move { engine.monitor(run, watch).await }.instrument(span));
        } else {
            // Nothing to wait for: drain and conclude now.
            engine.monitor_done(run).instrument(span).await;
        }
        Ok(())
    }

    /// A pending task that never started: prepared again if its worktree
    /// was never recorded, else left to the queue.
    fn requeue(self: &Arc<Self>, record: &crate::store::TaskRecord) {
        self.runs.make(&record.id, TaskStatus::Pending, record.event_count);
        if record.cancel_requested {
            // Cancelled while no daemon could finish it.
            self.end_cancelled_unstarted(record);
            return;
        }
        if self.needs_preparation(record) {
            let killed = crate::workshop::kill_setups_of(&record.id);
            if killed > 0 {
                warn!(task_id = %record.id, killed, "killed the setup an earlier daemon left running");
            }
            info!(task_id = %record.id, "preparing again after a restart");
            self.spawn_preparation(record.clone());
        }
    }
}

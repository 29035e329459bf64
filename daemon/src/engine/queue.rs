//! The queue: which recorded tasks may start now, and the kick that starts
//! them.
//!
//! The decision ([`decide`]) is a pure function of the running and pending
//! tasks: FIFO across every client, `max_parallel` of the head of the queue,
//! and the shared-tree rule (two write tasks never share one tree at once).
//! A task still preparing holds its place and its slot, so no younger task
//! overtakes it. The kick takes the decision under a short lock, marks the
//! chosen tasks as starting, and starts them outside the lock.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tracing::{Instrument, info_span, warn};

use crate::store::{TaskRecord, TaskStatus};

use super::*;

/// The queue's own state.
#[derive(Default)]
pub(super) struct Queue {
    /// Held while the queue decides, and while a queued task is cancelled,
    /// so the two never race.
    pub(super) turn: tokio::sync::Mutex<()>,
    /// Tasks handed to the runner but not yet recorded `running`.
    pub(super) starting: Mutex<HashSet<String>>,
    /// Set once recovery has re-attached or requeued every task a previous
    /// daemon left: until then the queue starts nothing (the socket is
    /// served meanwhile), so a task whose run was started but never
    /// recorded is adopted, never started a second time.
    pub(super) recovered: std::sync::atomic::AtomicBool,
}

impl Queue {
    pub(super) fn is_starting(&self, id: &str) -> bool {
        self.starting.lock().unwrap_or_else(|p| p.into_inner()).contains(id)
    }

    fn done_starting(&self, id: &str) {
        self.starting.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

/// A pending task as the queue weighs it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Candidate {
    pub(super) id: String,
    /// Its project's `max_parallel` when it was queued; 0 for no limit.
    pub(super) max_parallel: u32,
    /// The tree it holds while it runs (a write task in place).
    pub(super) tree: Option<String>,
    /// Its preparation is done (or it needs none).
    pub(super) ready: bool,
    /// Already handed to the runner.
    pub(super) starting: bool,
}

impl Candidate {
    pub(super) fn of(record: &TaskRecord, starting: bool) -> Candidate {
        let plan = record.launch.plan.as_ref();
        Candidate {
            id: record.id.clone(),
            max_parallel: record.launch.max_parallel,
            tree: plan.and_then(|p| p.shared_tree.clone()),
            ready: !record.launch.prepares_worktree() || record.workshop.is_some(),
            starting,
        }
    }
}

/// Which pending tasks start now. `running` are the trees of running tasks
/// (`None` for those holding none); `pending` is oldest first.
pub(super) fn decide(running: &[Option<String>], pending: &[Candidate]) -> Vec<String> {
    let mut count = running.len() as u32;
    let mut busy: Vec<&str> = running.iter().flatten().map(String::as_str).collect();
    for c in pending.iter().filter(|c| c.starting) {
        count += 1;
        busy.extend(c.tree.as_deref());
    }
    let mut start = Vec::new();
    for c in pending.iter().filter(|c| !c.starting) {
        if c.max_parallel > 0 && count >= c.max_parallel {
            break;
        }
        // A task whose tree a running write task holds keeps its place;
        // tasks behind it that need no busy tree may go first.
        if c.tree.as_deref().is_some_and(|t| busy.contains(&t)) {
            continue;
        }
        count += 1;
        if !c.ready {
            // Preparing: its slot is kept for it.
            continue;
        }
        busy.extend(c.tree.as_deref());
        start.push(c.id.clone());
    }
    start
}

impl Engine {
    /// Gives the queue a turn. Tasks start when one is delegated, prepared
    /// or ended; this also starts those whose start failed, and whose
    /// failure could not even be recorded (a full disk), once the cause is
    /// gone. The daemon calls it every few seconds.
    pub async fn retry_queue(self: &Arc<Self>) {
        self.schedule().await;
    }

    /// Starts what [`decide`] says may start, each on its own task.
    ///
    /// Boxed: a start spawns its monitor, which schedules again when the
    /// task ends, and that cycle needs one named future type.
    pub(super) fn schedule(self: &Arc<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.schedule_now())
    }

    async fn schedule_now(self: &Arc<Self>) {
        if !self.queue.recovered.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let chosen = {
            let _turn = self.queue.turn.lock().await;
            // Taken before the store is read: a start that ends (recorded
            // `running`, then no longer starting) after this snapshot was
            // recorded before the read, so no task is ever seen neither
            // starting nor running while it is both.
            let starting_now: HashSet<String> = self.queue.starting.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let running = match self.store.tasks(&[TaskStatus::Running], u32::MAX) {
                Ok(r) => r,
                Err(e) => {
                    warn!("the queue could not read the running tasks, retrying on its next turn: {e}");
                    return;
                }
            };
            let mut pending = match self.store.tasks(&[TaskStatus::Pending], u32::MAX) {
                Ok(p) => p,
                Err(e) => {
                    warn!("the queue could not read the pending tasks, retrying on its next turn: {e}");
                    return;
                }
            };
            pending.reverse();
            let trees: Vec<Option<String>> =
                running.iter().map(|t| t.launch.plan.as_ref().and_then(|p| p.shared_tree.clone())).collect();
            // Tasks parked at a quota wait for their timer (`parking.rs`).
            let parked = self.parking.parked_now();
            // Stacked tasks wait for their parents, or for their worktree
            // made again on a moved parent's result (issue 32, `stacking.rs`).
            let waiting = self.store.held_stacked().unwrap_or_default();
            let candidates: Vec<Candidate> = pending
                .iter()
                .filter(|t| !t.cancel_requested && !parked.contains(&t.id) && !waiting.contains(&t.id))
                .map(|t| Candidate::of(t, starting_now.contains(&t.id)))
                .collect();
            let chosen = decide(&trees, &candidates);
            let mut starting = self.queue.starting.lock().unwrap_or_else(|p| p.into_inner());
            starting.extend(chosen.iter().cloned());
            drop(starting);
            pending.into_iter().filter(|t| chosen.contains(&t.id)).collect::<Vec<_>>()
        };
        // Outside the lock, each on a task of its own: a runner's start may
        // block its thread (a Kubernetes start pushes the task's base and
        // creates its Job, issue 33), and one start must never wait for
        // another's. The caller waits for the starts, so a delegation that
        // could start at once answers `running`.
        let starts: Vec<_> = chosen
            .into_iter()
            .map(|record| {
                let span = info_span!("task", task_id = %record.id);
                let engine = self.clone();
                let id = record.id.clone();
                let handle = tokio::spawn(
                    async move {
                        let id = record.id.clone();
                        let started = engine.start(record).await;
                        engine.queue.done_starting(&id);
                        if let Err(e) = started {
                            warn!("could not start: {e}");
                            // Its slot is free again.
                            let again = engine.clone();
                            tokio::spawn(async move { again.schedule().await });
                        }
                    }
                    .instrument(span),
                );
                (id, handle)
            })
            .collect();
        for (id, start) in starts {
            if let Err(e) = start.await {
                // Its slot is freed; recovery or a retry decides what becomes of it.
                warn!(task_id = %id, "the task's start panicked: {e}");
                self.queue.done_starting(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, max: u32, tree: Option<&str>, ready: bool) -> Candidate {
        Candidate { id: id.into(), max_parallel: max, tree: tree.map(Into::into), ready, starting: false }
    }

    #[test]
    fn fifo_up_to_max_parallel() {
        let pending = [c("a", 2, None, true), c("b", 2, None, true), c("c", 2, None, true)];
        assert_eq!(decide(&[], &pending), ["a", "b"]);
        assert_eq!(decide(&[None], &pending), ["a"]);
        assert!(decide(&[None, None], &pending).is_empty());
        assert_eq!(decide(&[const { None }; 5], &[c("x", 0, None, true)]), ["x"], "0 is no limit");
    }

    #[test]
    fn a_preparing_task_keeps_its_slot_and_its_place() {
        let pending = [c("a", 2, None, false), c("b", 2, None, true), c("c", 2, None, true)];
        assert_eq!(decide(&[], &pending), ["b"], "a's slot is kept, c may not overtake it");
    }

    #[test]
    fn a_busy_tree_waits_without_blocking_others() {
        let pending = [c("a", 0, Some("/r"), true), c("b", 0, None, true), c("d", 0, Some("/r"), true)];
        assert_eq!(decide(&[Some("/r".into())], &pending), ["b"]);
        assert_eq!(decide(&[], &pending), ["a", "b"], "the second task on /r waits for the first");
    }

    #[test]
    fn starting_tasks_count_as_running() {
        let mut a = c("a", 1, None, true);
        a.starting = true;
        assert!(decide(&[], &[a, c("b", 1, None, true)]).is_empty());
    }
}

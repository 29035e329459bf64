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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, Semaphore, watch};

use tracing::{Instrument, info_span, warn};

use crate::store::{QueueRow, TaskStatus};

use super::*;

/// The queue's own state.
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
    /// Turns are coalesced (issue 33): one caller takes turns while others
    /// ask for one (`again`), so a burst of delegations reads the pending
    /// tasks a few times, not once each.
    again: AtomicBool,
    /// Someone is taking turns.
    deciding: AtomicBool,
    /// Turns begun, and the last one done.
    turns_begun: AtomicU64,
    turns_done: watch::Sender<u64>,
    /// A start ended (recorded `running`, failed or panicked).
    start_ended: Notify,
    /// Starts in flight at once: spawning is cheap, but each start takes
    /// its snapshot, its commits and a fork; they run in parallel up to this.
    start_slots: Arc<Semaphore>,
}

impl Default for Queue {
    fn default() -> Queue {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        Queue {
            turn: Default::default(),
            starting: Default::default(),
            recovered: Default::default(),
            again: AtomicBool::new(false),
            deciding: AtomicBool::new(false),
            turns_begun: AtomicU64::new(0),
            turns_done: watch::channel(0).0,
            start_ended: Notify::new(),
            start_slots: Arc::new(Semaphore::new(start_parallel().unwrap_or((4 * cores).clamp(8, 32)))),
        }
    }
}

/// How many starts may run at once, if `CAESAR_START_PARALLEL` says.
fn start_parallel() -> Option<usize> {
    std::env::var("CAESAR_START_PARALLEL").ok().and_then(|v| v.trim().parse().ok()).filter(|n: &usize| *n > 0)
}

impl Queue {
    pub(super) fn is_starting(&self, id: &str) -> bool {
        self.starting.lock().unwrap_or_else(|p| p.into_inner()).contains(id)
    }

    fn done_starting(&self, id: &str) {
        self.starting.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        self.start_ended.notify_waiters();
    }

    /// The starts in flight are all of `own`'s, and some of them are.
    fn only_starting(&self, own: &[String]) -> bool {
        let starting = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        !starting.is_empty() && starting.iter().all(|s| own.contains(s))
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
    pub(super) fn of(row: &QueueRow, starting: bool) -> Candidate {
        Candidate {
            id: row.id.clone(),
            max_parallel: row.max_parallel,
            tree: row.shared_tree.clone(),
            ready: !row.prepares_worktree || row.has_workshop,
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

    /// Gives the queue a turn, without waiting for the starts it makes.
    ///
    /// Boxed: a start spawns its monitor, which schedules again when the
    /// task ends, and that cycle needs one named future type.
    pub(super) fn schedule(self: &Arc<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        self.schedule_waiting_for(&[])
    }

    /// Gives the queue a turn for tasks just stored (`own`), then waits for
    /// their starts only if they are the only starts in flight (a quiet
    /// daemon: the answer says `running`). Under a burst it returns once the
    /// turn that saw them is done: they are starting or queued.
    pub(super) fn schedule_waiting_for<'a>(
        self: &'a Arc<Self>,
        own: &'a [String],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            if !self.queue.recovered.load(SeqCst) {
                return;
            }
            let q = &self.queue;
            q.again.store(true, SeqCst);
            // A turn begun after this point reads the store after `own` was stored.
            let needed = q.turns_begun.load(SeqCst) + 1;
            while !q.deciding.swap(true, SeqCst) {
                while q.again.swap(false, SeqCst) {
                    let turn = q.turns_begun.fetch_add(1, SeqCst) + 1;
                    self.queue_turn().await;
                    q.turns_done.send_replace(turn);
                }
                q.deciding.store(false, SeqCst);
                // A request made after the last check and before the flag was
                // cleared is this caller's to take.
                if !q.again.load(SeqCst) {
                    break;
                }
            }
            if own.is_empty() {
                return;
            }
            let _ = q.turns_done.subscribe().wait_for(|done| *done >= needed).await;
            if !q.only_starting(own) {
                return;
            }
            loop {
                let ended = q.start_ended.notified();
                tokio::pin!(ended);
                ended.as_mut().enable();
                if !own.iter().any(|id| q.is_starting(id)) {
                    return;
                }
                ended.await;
            }
        })
    }

    /// One turn: starts what [`decide`] says may start, each on a task of
    /// its own, and returns without waiting for them.
    async fn queue_turn(self: &Arc<Self>) {
        let chosen = {
            let _turn = self.queue.turn.lock().await;
            // Taken before the store is read: a start that ends (recorded
            // `running`, then no longer starting) after this snapshot was
            // recorded before the read, so no task is ever seen neither
            // starting nor running while it is both.
            let starting_now: HashSet<String> = self.queue.starting.lock().unwrap_or_else(|p| p.into_inner()).clone();
            // Only the columns the decision needs (issue 33): a burst takes
            // many turns, each over every pending task.
            let running = match self.store.queue_rows(TaskStatus::Running) {
                Ok(r) => r,
                Err(e) => {
                    warn!("the queue could not read the running tasks, retrying on its next turn: {e}");
                    return;
                }
            };
            let pending = match self.store.queue_rows(TaskStatus::Pending) {
                Ok(p) => p,
                Err(e) => {
                    warn!("the queue could not read the pending tasks, retrying on its next turn: {e}");
                    return;
                }
            };
            let trees: Vec<Option<String>> = running.into_iter().map(|t| t.shared_tree).collect();
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
            // The whole records of the chosen only, read before they are
            // marked starting: a turn that cannot read them starts none.
            let records = match self.store.tasks_by_id(&chosen) {
                Ok(r) => r,
                Err(e) => {
                    warn!("the queue could not read the tasks it chose, retrying on its next turn: {e}");
                    return;
                }
            };
            let mut starting = self.queue.starting.lock().unwrap_or_else(|p| p.into_inner());
            starting.extend(records.iter().map(|t| t.id.clone()));
            drop(starting);
            records
        };
        // Outside the lock, each on a task of its own, in parallel up to
        // `start_slots`: a runner's start may block its thread (a Kubernetes
        // start pushes the task's base and creates its Job, issue 33), and
        // one start must never wait for another's beyond that bound.
        for record in chosen {
            let span = info_span!("task", task_id = %record.id);
            let engine = self.clone();
            let id = record.id.clone();
            let slots = self.queue.start_slots.clone();
            let start = tokio::spawn(
                async move {
                    let slot = slots.acquire_owned().await;
                    let id = record.id.clone();
                    let started = engine.start(record).await;
                    engine.queue.done_starting(&id);
                    drop(slot);
                    if let Err(e) = started {
                        warn!("could not start: {e}");
                        // Its slot is free again.
                        engine.schedule().await;
                    }
                }
                .instrument(span),
            );
            let engine = self.clone();
            tokio::spawn(async move {
                if let Err(e) = start.await {
                    // Its slot is freed; recovery or a retry decides what becomes of it.
                    warn!(task_id = %id, "the task's start panicked: {e}");
                    engine.queue.done_starting(&id);
                }
            });
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

//! Checkpoints' engine side (issue 31, fork from a point): each
//! `file_changed` event of a worktree task makes a snapshot of its worktree
//! due (`workshop/checkpoints.rs` takes and keeps it), off the event path.
//!
//! [`Checkpoints::touch`] only notes the event's seq: the snapshot runs on
//! a blocking thread, one at a time per task, and a burst of events while
//! one runs is covered by a single next snapshot, keyed by the burst's last
//! seq. A task holds at most [`crate::workshop::checkpoints::CAP`] of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::store::Store;
use crate::workshop::checkpoints;

/// One task's due snapshot.
#[derive(Debug, Default)]
struct Slot {
    /// The greatest seq not yet covered by a snapshot (0: none).
    due: u64,
    /// A snapshot of this task is being taken.
    busy: bool,
}

/// The checkpoint taker: which tasks have a snapshot due or under way.
#[derive(Debug)]
pub(super) struct Checkpoints {
    store: Arc<Store>,
    slots: Arc<Mutex<HashMap<String, Slot>>>,
}

impl Checkpoints {
    pub(super) fn new(store: Arc<Store>) -> Checkpoints {
        Checkpoints { store, slots: Arc::default() }
    }

    /// A `file_changed` event up to `seq` was stored for `task_id`: a
    /// snapshot covering it is taken soon, never on the caller's thread.
    pub(super) fn touch(&self, task_id: &str, seq: u64) {
        {
            let mut slots = lock(&self.slots);
            let slot = slots.entry(task_id.to_owned()).or_default();
            slot.due = slot.due.max(seq);
            if slot.busy {
                return;
            }
            slot.busy = true;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            lock(&self.slots).remove(task_id);
            return;
        };
        let (store, slots, id) = (self.store.clone(), self.slots.clone(), task_id.to_owned());
        rt.spawn_blocking(move || take_due(&store, &slots, &id));
    }

    /// Waits (at most `limit`) until no snapshot of `task_id` is due or
    /// under way, so that a fork reads every checkpoint of the events
    /// stored so far.
    pub(super) async fn settled(&self, task_id: &str, limit: Duration) {
        let start = Instant::now();
        while lock(&self.slots).contains_key(task_id) && start.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn lock(slots: &Mutex<HashMap<String, Slot>>) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
    slots.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the task's due snapshots until none is due.
fn take_due(store: &Store, slots: &Mutex<HashMap<String, Slot>>, id: &str) {
    loop {
        let seq = {
            let mut all = lock(slots);
            let Some(slot) = all.get_mut(id) else { return };
            if slot.due == 0 {
                all.remove(id);
                return;
            }
            std::mem::take(&mut slot.due)
        };
        let workshop = match store.task(id) {
            Ok(Some(t)) => t.workshop,
            Ok(None) => None,
            Err(e) => {
                warn!(task_id = %id, "no checkpoint at event {seq}: {e}");
                None
            }
        };
        if let Some(p) = workshop.filter(checkpoints::applies)
            && let Err(e) = checkpoints::record(&p, seq)
        {
            warn!(task_id = %id, "no checkpoint at event {seq}: {e}");
        }
    }
}

//! The engine-wide change stream: one broadcast of task ids, sent whenever a
//! task's stored state or its events change, so that a live view of every
//! task (the web dashboard) follows the engine without polling.

use tokio::sync::broadcast;

use super::*;

/// How many changes a slow subscriber may fall behind before it is told it
/// lagged (and should take a fresh snapshot).
pub(super) const PULSE_RING: usize = 1024;

impl Engine {
    /// Every change from now on, as the id of the task that changed. A
    /// subscriber that lags gets `RecvError::Lagged` and should re-read
    /// the tasks it shows.
    pub fn subscribe_changes(&self) -> broadcast::Receiver<String> {
        self.pulse.subscribe()
    }

    /// Tells the subscribers that task `id` changed (after the change is
    /// stored).
    pub(super) fn pulse(&self, id: &str) {
        if self.pulse.receiver_count() > 0 {
            let _ = self.pulse.send(id.to_owned());
        }
    }
}

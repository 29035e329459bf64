//! The queue: which recorded tasks may start now (FIFO, `max_parallel`, the
//! shared-tree rule) and the kick that starts them.

use std::sync::Arc;

use tracing::warn;

use crate::agents::Launch;
use crate::store::{TaskRecord, TaskStatus};

use super::*;

impl Engine {
    /// even be recorded (a full disk), once the cause is gone. The daemon
    /// calls it every few seconds.
    pub async fn retry_queue(self: &Arc<Self>) {
        self.schedule().await;
    }

    /// Starts queued tasks, oldest first, while fewer tasks run than the
    /// head of the queue allows (its project's `max_parallel`). The queue is
    /// FIFO across every client of the daemon: a task never overtakes an
    /// older one.
    ///
    /// Boxed: starting a task spawns its monitor, which schedules again
    /// when the task ends, and that cycle needs one named future type.
    pub(super) fn schedule(self: &Arc<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.schedule_now())
    }

    pub(super) async fn schedule_now(self: &Arc<Self>) {
        let _turn = self.scheduling.lock().await;
        let tree_of = |t: &TaskRecord| {
            serde_json::from_str::<Launch>(&t.launch_json).ok().and_then(|l| l.plan).and_then(|p| p.shared_tree)
        };
        let Ok(running) = self.store.tasks(&[TaskStatus::Running], u32::MAX) else { return };
        let mut count = running.len() as u32;
        let mut busy: Vec<String> = running.iter().filter_map(tree_of).collect();
        let Ok(mut pending) = self.store.tasks(&[TaskStatus::Pending], u32::MAX) else { return };
        pending.reverse();
        for task in pending {
            let max_parallel = serde_json::from_str::<Launch>(&task.launch_json).map(|l| l.max_parallel).unwrap_or(0);
            if max_parallel > 0 && count >= max_parallel {
                return;
            }
            // A task whose tree a running write task holds keeps its place;
            // tasks behind it that need no busy tree may go first.
            let tree = tree_of(&task);
            if tree.as_ref().is_some_and(|t| busy.contains(t)) {
                continue;
            }
            let id = task.id.clone();
            match self.start(task).await {
                Ok(_) => {
                    count += 1;
                    busy.extend(tree);
                }
                Err(e) => warn!(task_id = %id, "could not start: {e}"),
            }
        }
    }
}

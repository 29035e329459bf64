//! Cancel: stop a task and wait until its tree is gone.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::report::{self, Ending};
use crate::store::TaskStatus;
use crate::supervisor::{self};

use super::*;

impl Engine {
    /// Stops a running task and waits for its tree to be gone. A finished
    /// task is left alone and `false` returned.
    pub async fn cancel(&self, id: &str) -> Result<(bool, TaskStatus)> {
        let record = self.record(id)?;
        if record.status.is_terminal() {
            return Ok((false, record.status));
        }
        if record.status == TaskStatus::Pending {
            // Queued: take the queue's turn so it cannot start meanwhile.
            let _turn = self.scheduling.lock().await;
            let record = self.record(id)?;
            if record.status == TaskStatus::Pending && record.supervisor_pid.is_none() {
                self.store.set_cancel_requested(id)?;
                let report = report::recover(&report::Inputs {
                    task_id: &record.id,
                    report_path: &Path::new(&record.task_dir).join("report.json"),
                    texts: &[],
                    ending: Ending::Cancelled,
                    duration_ms: 0,
                    native: None,
                });
                self.finish_task(&record, Exit::without_process(TaskStatus::Cancelled, None), report, None)?;
                return Ok((true, TaskStatus::Cancelled));
            }
        }
        let live = self.live(id);
        let mut status_rx = live.as_ref().map(|l| l.status.subscribe());
        self.store.set_cancel_requested(id)?;
        match record.supervisor_pid {
            #[cfg(unix)]
            Some(pid) if supervisor::is_same_process_alive(pid, record.supervisor_start, record.boot_id.as_deref()) => {
                supervisor::request_stop(pid);
            }
            _ => {}
        }
        let limit = Duration::from_millis(self.settings.grace_ms) + Duration::from_secs(10);
        let settled = async {
            match status_rx.as_mut() {
                Some(rx) => {
                    let _ = rx.wait_for(|s| s.is_terminal()).await;
                }
                None => loop {
                    if self.store.task(id).ok().flatten().is_none_or(|r| r.status.is_terminal()) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                },
            }
        };
        if tokio::time::timeout(limit, settled).await.is_err() {
            return Err(Error::Internal(format!(
                "task {id} did not stop within {} s of SIGTERM and SIGKILL; see {}/supervisor.log",
                limit.as_secs(),
                record.task_dir
            )));
        }
        let status = self.record(id)?.status;
        Ok((status == TaskStatus::Cancelled, status))
    }
}

//! Cancel: stop a task and wait until its tree is gone.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::TaskStatus;

use super::*;

impl Engine {
    /// Stops a running task and waits for its tree to be gone. A finished
    /// task is left alone and `false` returned.
    pub async fn cancel(&self, id: &str) -> Result<(bool, TaskStatus)> {
        self.views.record(id)?;
        // A task that fell back is cancelled in its current attempt (issue 17).
        let (head, _) = super::fallback::head_of(&self.store, id);
        let id = if self.store.task(&head)?.is_some() { head.as_str() } else { id };
        let record = self.views.record(id)?;
        if record.status.is_terminal() {
            return Ok((false, record.status));
        }
        let live = self.runs.get(id);
        let mut status_rx = live.as_ref().map(|l| l.status.subscribe());
        // Recorded before anything is stopped: a daemon restarted mid-cancel
        // still knows the ending was a cancel, and a start that races this
        // sees it (start.rs).
        self.store.set_cancel_requested(id)?;
        if record.status == TaskStatus::Pending {
            // Preparing: setup is killed, and the preparation ends the task.
            self.cancel_preparation(id).await;
            // Queued: the queue's turn is taken so it cannot start meanwhile.
            let _turn = self.queue.turn.lock().await;
            let record = self.views.record(id)?;
            if record.status.is_terminal() {
                return Ok((record.status == TaskStatus::Cancelled, record.status));
            }
            if record.status == TaskStatus::Pending && record.run.is_none() && !self.queue.is_starting(id) {
                self.end_cancelled_unstarted(&record);
                let status = self.views.record(id)?.status;
                return Ok((status == TaskStatus::Cancelled, status));
            }
        }
        if let Some(handle) = self.views.record(id)?.run {
            // A session protocol cancels the turn first; signals remain the backstop.
            self.cancel_through_protocol(id, status_rx.as_mut()).await;
            self.runner.request_stop(&handle);
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
                "task {id} did not stop within {} s of SIGTERM and SIGKILL; see {}",
                limit.as_secs(),
                TaskDir::new(&record.task_dir).supervisor_log().display()
            )));
        }
        let status = self.views.record(id)?.status;
        Ok((status == TaskStatus::Cancelled, status))
    }

    /// Sends the driver's cancel (ACP `session/cancel`) and waits a moment for the agent to end
    /// its turn and exit by itself. Nothing is sent for drivers that have none.
    async fn cancel_through_protocol(
        &self,
        id: &str,
        status_rx: Option<&mut tokio::sync::watch::Receiver<TaskStatus>>,
    ) {
        let Ok(record) = self.views.record(id) else { return };
        let Some(handle) = &record.run else { return };
        let dir = TaskDir::new(&record.task_dir);
        let driver = opened_driver(&record.launch, &dir.raw_log());
        let Some(line) = driver.cancel_line(record.session_id.as_deref()) else { return };
        if let Err(e) = self.runner.write_stdin(handle, &dir, &line) {
            tracing::info!(task_id = %id, "cannot cancel through the protocol ({e}): signalling");
            return;
        }
        tracing::info!(task_id = %id, "session cancel sent");
        if let Some(rx) = status_rx {
            let _ = tokio::time::timeout(PROTOCOL_CANCEL_WAIT, rx.wait_for(|s| s.is_terminal())).await;
        }
    }
}

/// The task's driver after it has read how the run opened (the first 64 KiB of raw.log): a
/// session that fell back to its stream command (the supervisor's marker line) has no protocol
/// cancel, and is signalled at once rather than after [`PROTOCOL_CANCEL_WAIT`].
fn opened_driver(launch: &crate::launch::LaunchPlan, raw_log: &std::path::Path) -> Box<dyn crate::driver::Driver> {
    let mut driver = crate::driver::for_launch(launch);
    if matches!(launch.driver_kind(), crate::driver::DriverKind::Acp | crate::driver::DriverKind::CodexAppServer) {
        let mut head = Vec::new();
        if let Ok(file) = crate::safe_fs::open_regular(raw_log) {
            let _ = std::io::Read::read_to_end(&mut std::io::Read::take(file, 64 * 1024), &mut head);
        }
        // The last line may be cut at the cap: only whole lines are read.
        let whole = head.iter().rposition(|&b| b == b'\n').map_or(&head[..0], |end| &head[..end]);
        for line in String::from_utf8_lossy(whole).lines() {
            driver.read_line(line);
        }
    }
    driver
}

/// How long a cancelled session's agent has to end its turn and exit before it is signalled.
pub(super) const PROTOCOL_CANCEL_WAIT: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::Mode;
    use crate::provider::{self, Invocation};

    fn codex_app_launch() -> crate::launch::LaunchPlan {
        let inv = Invocation::bare("do it", Mode::Write);
        let planned = provider::acp::with_fallback(
            provider::codex_app::launch(&inv),
            provider::build_launch(crate::launch::ProviderId::Codex, &inv),
        );
        crate::launch::LaunchPlan {
            provider: crate::launch::ProviderId::Codex,
            stdin: planned.stdin,
            ..Default::default()
        }
    }

    #[test]
    fn a_session_that_fell_back_to_its_stream_is_not_cancelled_through_the_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw.log");
        let launch = codex_app_launch();
        // An app-server session that opened: the cancel goes through `turn/interrupt`.
        std::fs::write(&raw, "").unwrap();
        assert!(opened_driver(&launch, &raw).cancel_line(Some("th_1")).is_some());
        // The supervisor's marker, then `codex exec --json`: no protocol to cancel through.
        let marker = crate::supervisor::opening::fallback_marker(crate::driver::SessionProtocol::CodexAppServer);
        std::fs::write(&raw, format!("{marker}: the agent ended before answering initialize\n{{\"type\":\"thread.started\",\"thread_id\":\"th_1\"}}\n")).unwrap();
        assert!(opened_driver(&launch, &raw).cancel_line(Some("th_1")).is_none());
        // A long run's raw.log: the marker near its start is what counts.
        let long = format!("{marker}: refused\n{}", "{\"type\":\"turn.started\"}\n".repeat(10_000));
        std::fs::write(&raw, long).unwrap();
        assert!(opened_driver(&launch, &raw).cancel_line(Some("th_1")).is_none());
        // A marker cut at the 64 KiB read is no marker.
        let mut cut = "x".repeat(64 * 1024 - 10);
        cut.insert(0, '\n');
        cut.push_str(marker);
        std::fs::write(&raw, cut).unwrap();
        assert!(opened_driver(&launch, &raw).cancel_line(Some("th_1")).is_some());
    }
}

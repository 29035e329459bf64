//! The mirror: one per running remote task. It follows the agent
//! container's log, lays its frames into the task's local `raw.log` (so the
//! monitor, parsers, live tail and report recovery are the local ones), and
//! ends with the local `exit.json`, written last, after the result is in
//! the worktree and the report in the task directory.
//!
//! Resume: each chunk carries its offset in the pod's raw.log and
//! `mirror.json` records how far the local copy goes and the time of the
//! last frame. A dropped stream (API server restart, idle timeout, daemon
//! restart) is reopened with `sinceTime` one second before that time (the
//! API takes whole seconds and kube rounds to the nearest), so it starts at
//! or before the last frame seen, never after; chunks below the recorded
//! offset are dropped as duplicates, one past it counts as a gap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::AsyncBufReadExt;
use futures_util::TryStreamExt;
use kube::api::LogParams;

use super::frames::{self, Frame, Mirror};
use super::manifest::CONTAINER;
use super::pod::{Ending, FILES_BACK};
use super::status::{self, PodState};
use super::watch::Cluster;
use super::{Meta, workspace};
use crate::clock::now_ms;
use crate::task_dir::TaskDir;

/// What one mirror works on.
pub struct MirrorTask {
    pub cluster: Arc<Cluster>,
    pub task_id: String,
    pub dir: TaskDir,
    pub meta: Meta,
    /// Set when caesar asked the run to stop (cancel, deadline).
    pub stop: Arc<AtomicBool>,
}

/// The mirror's state file.
pub fn mirror_path(dir: &TaskDir) -> std::path::PathBuf {
    dir.root().join("mirror.json")
}

impl MirrorTask {
    /// Runs until the task's ending is known and written as `exit.json`.
    pub async fn run(self) {
        let mut m = Mirror::load(&mirror_path(&self.dir));
        let raw_path = self.dir.raw_log();
        let raw = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&raw_path);
        let Ok(mut raw) = raw else {
            self.finish(status::failed(format!("cannot open {}", raw_path.display()), now_ms()), &m).await;
            return;
        };
        // Bytes past the recorded length were never recorded: they are
        // written again, identically, from the pod's offsets.
        let _ = raw.set_len(m.local_len);
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let began = Instant::now();
        let mut ending: Option<Ending> = None;
        while ending.is_none() {
            let notified = self.cluster.changed.notified();
            let pods = self.cluster.pods.of(&self.task_id);
            let jobs = self.cluster.jobs.of(&self.task_id);
            let pod = pods.last();
            match pod.map(status::state) {
                Some(PodState::Running) | Some(PodState::Terminated { .. }) => {
                    let name = pod.and_then(|p| p.metadata.name.clone()).unwrap_or_default();
                    ending = self.stream(&name, &mut m, &mut raw, &mut files).await;
                    if ending.is_none() {
                        let ended = self.ended_without_frame(&name).await;
                        if ended.is_some() {
                            // The container has ended: what its log still
                            // holds past the drop comes first (a stream of an
                            // ended container ends by itself).
                            ending = self.stream(&name, &mut m, &mut raw, &mut files).await.or(ended);
                        }
                    }
                    if let Some(e) = &ending
                        && e.raw_len > m.pod_offset
                    {
                        // The log lost the tail (the node rotated it away):
                        // counted as dropped output, never silently.
                        m.gap_bytes += e.raw_len - m.pod_offset;
                        m.pod_offset = e.raw_len;
                        let _ = m.store(&mirror_path(&self.dir));
                    }
                    if ending.is_none() {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    continue;
                }
                Some(PodState::ImageFailed { reason, message }) => {
                    let created = pod.and_then(|p| p.metadata.creation_timestamp.clone());
                    let waited = created.map(|t| now_ms() - t.0.as_millisecond()).unwrap_or(0);
                    let limit = i64::from(self.meta.pull_timeout_s) * 1000;
                    if reason == "InvalidImageName" || waited > limit || began.elapsed().as_millis() as i64 > limit {
                        let why = format!(
                            "the image `{}` cannot be pulled (Kubernetes: {reason}: {message}); fix runner.kubernetes.image or the cluster's pull secret",
                            self.meta.image
                        );
                        self.delete_job().await;
                        ending = Some(status::failed(why, now_ms()));
                        continue;
                    }
                }
                Some(PodState::Failed { reason, message }) => {
                    ending = Some(status::failed(
                        format!("the pod failed before the agent ran (Kubernetes: {reason}: {message})"),
                        now_ms(),
                    ));
                    continue;
                }
                Some(PodState::Waiting) => {}
                None => {
                    if self.cluster.jobs.synced() && jobs.is_empty() && began.elapsed() > Duration::from_secs(2) {
                        // Neither Job nor Pod: confirm with the server itself.
                        if let Ok(None) = self.cluster.job_api().get_opt(&self.meta.job).await {
                            ending = Some(self.vanished());
                            continue;
                        }
                    }
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
        let mut ending = ending.unwrap_or_default();
        for (name, data) in &files {
            if FILES_BACK.contains(&name.as_str()) {
                let _ = crate::supervisor::write_atomic(&self.dir.root().join(name), data);
            }
        }
        self.explain_stop(&mut ending).await;
        self.finish(ending, &m).await;
    }

    /// Follows the pod's log from where the mirror stands; the ending if a
    /// frame carried it.
    async fn stream(
        &self,
        pod: &str,
        m: &mut Mirror,
        raw: &mut std::fs::File,
        files: &mut Vec<(String, Vec<u8>)>,
    ) -> Option<Ending> {
        let since_time = m
            .last_ts
            .as_deref()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .and_then(|t| t.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(1)).ok());
        let lp = LogParams {
            container: Some(CONTAINER.to_owned()),
            follow: true,
            timestamps: true,
            since_time,
            ..Default::default()
        };
        let reader = match self.cluster.pod_api().log_stream(pod, &lp).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(task_id = %self.task_id, "log stream failed: {e}");
                return None;
            }
        };
        let mut lines = reader.lines();
        let mut dirty = 0u32;
        let mut stored = Instant::now();
        loop {
            let line = match lines.try_next().await {
                Ok(Some(l)) => l,
                Ok(None) | Err(_) => break,
            };
            let (ts, body) = frames::split_timestamp(&line);
            match frames::decode(body) {
                Frame::Chunk { offset, data } => {
                    if m.lay(raw, offset, &data).is_err() {
                        break;
                    }
                    if let Some(ts) = ts {
                        m.last_ts = Some(ts.to_owned());
                    }
                    dirty += 1;
                    if dirty >= 16 {
                        let _ = m.store(&mirror_path(&self.dir));
                        dirty = 0;
                    }
                }
                Frame::File { name, data } => files.push((name, data)),
                Frame::Exit(json) => {
                    let _ = m.store(&mirror_path(&self.dir));
                    return serde_json::from_slice(&json).ok();
                }
                Frame::Heartbeat | Frame::Other => {}
            }
            // What was laid is recorded at least every 200 ms.
            if dirty > 0 && stored.elapsed() > Duration::from_millis(200) {
                let _ = m.store(&mirror_path(&self.dir));
                dirty = 0;
                stored = Instant::now();
            }
        }
        let _ = m.store(&mirror_path(&self.dir));
        None
    }

    /// The stream ended without the ending: if the container has ended, the
    /// termination message (or the reason) tells how.
    async fn ended_without_frame(&self, pod: &str) -> Option<Ending> {
        match self.cluster.pod_api().get_opt(pod).await {
            Ok(Some(p)) => match status::state(&p) {
                PodState::Terminated { exit_code, reason, message } => {
                    let mut e = status::ending_from_terminated(exit_code, &reason, message.as_deref(), now_ms());
                    if let Some((r, msg)) = status::pod_reason(&p)
                        && e.error.is_some()
                    {
                        e = status::failed(format!("the pod ended (Kubernetes: {r}: {msg})"), now_ms());
                    }
                    Some(e)
                }
                PodState::Failed { reason, message } => {
                    Some(status::failed(format!("the pod failed (Kubernetes: {reason}: {message})"), now_ms()))
                }
                _ => None,
            },
            Ok(None) => {
                // The pod is gone; the Job with it, or not.
                match self.cluster.job_api().get_opt(&self.meta.job).await {
                    Ok(None) => Some(self.vanished()),
                    _ => None,
                }
            }
            Err(_) => None,
        }
    }

    fn vanished(&self) -> Ending {
        if self.stop.load(Ordering::Acquire) {
            let mut e = Ending::default();
            e.exit.terminated = true;
            e.exit.finished_ms = now_ms();
            return e;
        }
        status::failed(format!("the Job {} was deleted outside caesar before the task ended", self.meta.job), now_ms())
    }

    /// A run stopped that caesar did not stop: someone deleted the Job, or
    /// the cluster evicted the pod. The task fails with that reason.
    async fn explain_stop(&self, ending: &mut Ending) {
        if !ending.exit.terminated || self.stop.load(Ordering::Acquire) {
            return;
        }
        let pods = self.cluster.pods.of(&self.task_id);
        let reason = pods.last().and_then(status::pod_reason);
        let why = match reason {
            Some((r, m)) => format!("the pod was stopped by the cluster (Kubernetes: {r}: {m})"),
            None => match self.cluster.job_api().get_opt(&self.meta.job).await {
                Ok(None) => format!("the Job {} was deleted outside caesar while the agent ran", self.meta.job),
                _ => "the pod was stopped outside caesar".to_owned(),
            },
        };
        ending.exit.spawn_error = Some(why);
    }

    async fn delete_job(&self) {
        let dp = kube::api::DeleteParams::background().grace_period(0);
        let _ = self.cluster.job_api().delete(&self.meta.job, &dp).await;
    }

    /// Brings the result back, then writes `exit.json` (last).
    async fn finish(&self, ending: Ending, m: &Mirror) {
        let mut exit = ending.exit;
        exit.output_dropped_bytes += m.gap_bytes;
        if let Some(result) = &ending.result
            && exit.spawn_error.is_none()
        {
            let (meta, task, scratch) = (self.meta.clone(), self.task_id.clone(), self.dir.root().to_path_buf());
            let result = result.clone();
            let applied = tokio::task::spawn_blocking(move || {
                workspace::apply_result(&meta.workdir, &meta.remote, &task, &meta.base, &result, &scratch)
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            if let Err(e) = applied {
                exit.spawn_error = Some(format!("the agent's changes could not be brought back: {e}"));
            }
        } else if exit.spawn_error.is_none()
            && let Some(err) = ending.error
        {
            exit.spawn_error = Some(err);
        }
        if self.stop.load(Ordering::Acquire) {
            self.wait_pod_gone().await;
        }
        let bytes = serde_json::to_vec(&exit).unwrap_or_default();
        if let Err(e) = crate::supervisor::write_atomic(&self.dir.exit(), &bytes) {
            tracing::warn!(task_id = %self.task_id, "cannot write exit.json: {e}");
        }
    }

    /// Cancel returns once the pod is gone (seed 000), within a bound.
    async fn wait_pod_gone(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let notified = self.cluster.changed.notified();
            let lp =
                kube::api::ListParams::default().labels(&format!("{}={}", super::manifest::TASK_LABEL, self.task_id));
            match self.cluster.pod_api().list(&lp).await {
                Ok(l) if l.items.is_empty() => return,
                _ => {}
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }
}

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
use super::{Meta, bundle, workspace};
use crate::clock::now_ms;
use crate::launch::runner::WorkspaceMode;
use crate::task_dir::TaskDir;

/// How often the log of a task without a stream of its own is read, while
/// every stream the namespace allows is taken ([`super::watch::log_streams`]).
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// What one mirror works on.
pub struct MirrorTask {
    pub cluster: Arc<Cluster>,
    pub task_id: String,
    pub dir: TaskDir,
    pub meta: Meta,
    /// Set when caesar asked the run to stop (cancel, deadline).
    pub stop: Arc<AtomicBool>,
}

/// Lays a chunk of the pod supervisor's record of steer deliveries into the
/// local one at its offset (issue 31; the monitor reads it as a local
/// task's): a repeated chunk writes the same bytes again, and one past the
/// local end (a resumed stream that skipped some) is left out, so the
/// steers it recorded end undelivered rather than the file holding a hole.
fn lay_steers(dir: &TaskDir, offset: u64, data: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.daemon_files().join(crate::supervisor::steer::STEERS_DELIVERED);
    let Ok(mut f) = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path) else { return };
    if f.metadata().map_or(true, |m| offset > m.len()) {
        return;
    }
    if f.seek(SeekFrom::Start(offset)).and_then(|_| f.write_all(data)).is_err() {
        tracing::debug!("cannot lay steer deliveries into {}", path.display());
    }
}

/// The mirror's state file.
pub fn mirror_path(dir: &TaskDir) -> std::path::PathBuf {
    dir.root().join("mirror.json")
}

impl MirrorTask {
    /// Runs until the task's ending is known and written as `exit.json`.
    pub async fn run(self) {
        let mut m = Mirror::load(&mirror_path(&self.dir));
        if self.meta.stdin {
            // The pod's supervisor takes steers (`engine/steer.rs` looks for this file).
            let steers = self.dir.daemon_files().join(crate::supervisor::steer::STEERS_DELIVERED);
            let _ = std::fs::OpenOptions::new().create(true).truncate(false).append(true).open(steers);
        }
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
        let mut base_in = self.meta.workspace != WorkspaceMode::Api;
        while ending.is_none() {
            let notified = self.cluster.changed.notified();
            let pods = self.cluster.pods.of(&self.task_id);
            let jobs = self.cluster.jobs.of(&self.task_id);
            let pod = pods.last();
            if !base_in && let Some(p) = pod {
                match self.send_base(p).await {
                    Ok(done) => base_in = done,
                    Err(why) => {
                        self.delete_job().await;
                        ending = Some(status::failed(why, now_ms()));
                        continue;
                    }
                }
            }
            match pod.map(status::state) {
                Some(PodState::Running) | Some(PodState::Terminated { .. }) => {
                    let name = pod.and_then(|p| p.metadata.name.clone()).unwrap_or_default();
                    let (follow, permit) = self.log_turn().await;
                    let mut said = self.stream(&name, follow, &mut m, &mut raw, &mut files).await;
                    // A read in turns of a pod the watch still sees running
                    // asks the API server nothing more.
                    let watched_running = matches!(pod.map(status::state), Some(PodState::Running));
                    let mut word = if follow || said.is_some() || !watched_running {
                        self.container_word(&name).await
                    } else {
                        Word::Running
                    };
                    if said.is_none() && word.ended() {
                        // The container has ended: what its log still
                        // holds past the drop comes first (a stream of an
                        // ended container ends by itself).
                        said = self.stream(&name, follow, &mut m, &mut raw, &mut files).await;
                    }
                    drop(permit);
                    if said.is_some() && !word.ended() {
                        word = self.await_container_end(&name).await;
                    }
                    ending = settle(said, word);
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
                        tokio::time::sleep(if follow { Duration::from_millis(200) } else { POLL_EVERY }).await;
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
                let _ = crate::safe_fs::write_atomic(&self.dir.root().join(name), data);
            }
        }
        self.explain_stop(&mut ending).await;
        self.finish(ending, &m).await;
    }

    /// A stream of its own while one is free (`true`); else a turn to read
    /// the log so far, with a few other tasks, again after [`POLL_EVERY`].
    async fn log_turn(&self) -> (bool, Option<tokio::sync::OwnedSemaphorePermit>) {
        match self.cluster.follows.clone().try_acquire_owned() {
            Ok(p) => (true, Some(p)),
            Err(_) => (false, self.cluster.polls.clone().acquire_owned().await.ok()),
        }
    }

    /// `workspace = "api"`: streams the base into the pod's waiting init
    /// container; whether the base is in (or no longer needed). An error
    /// that retrying cannot mend (RBAC) ends the task.
    async fn send_base(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Result<bool, String> {
        match bundle::fetcher(pod) {
            bundle::Fetcher::Ended => Ok(true),
            bundle::Fetcher::Waiting => Ok(false),
            bundle::Fetcher::Running => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                match bundle::send_base(&self.cluster, &name, self.dir.root()).await {
                    Ok(()) => Ok(true),
                    // RBAC, or the receiver's own refusal of a bundle past its cap: final.
                    Err(e) if e.contains("Kubernetes refused (") || e.contains("the bundle is larger than") => {
                        Err(format!("the task's workspace cannot be sent to the pod: {e}"))
                    }
                    Err(e) => {
                        tracing::debug!(task_id = %self.task_id, "the base bundle was not taken yet: {e}");
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok(false)
                    }
                }
            }
        }
    }

    /// Follows the pod's log from where the mirror stands (or, not
    /// `follow`ing, reads what it holds now); the ending if a frame carried it.
    async fn stream(
        &self,
        pod: &str,
        follow: bool,
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
            follow,
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
        let mut said: Option<Ending> = None;
        let mut dirty = 0u32;
        let mut stored = Instant::now();
        while let Ok(Some(line)) = lines.try_next().await {
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
                Frame::Steered { offset, data } => lay_steers(&self.dir, offset, &data),
                // Kept, and the log read on to its end: the agent shares
                // the container and may have printed an ending of its own
                // (the container's termination message settles it).
                Frame::Exit(json) => {
                    if let Ok(mut e) = serde_json::from_slice::<Ending>(&json) {
                        if said.as_ref().is_some_and(|s| *s != e) {
                            e.tamper.push(FORGED_ENDING.to_owned());
                        }
                        said = Some(e);
                    }
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
        said
    }

    /// What the agent container's status says: still running, its
    /// termination message (written by the wrapper after the agent's tree
    /// ended), or only a reason.
    async fn container_word(&self, pod: &str) -> Word {
        match self.cluster.pod_api().get_opt(pod).await {
            Ok(Some(p)) => match status::state(&p) {
                PodState::Terminated { exit_code, reason, message } => {
                    if let Some(e) = message.as_deref().and_then(|m| serde_json::from_str::<Ending>(m).ok()) {
                        return Word::Message(e);
                    }
                    let mut e = status::ending_from_terminated(exit_code, &reason, None, now_ms());
                    if let Some((r, msg)) = status::pod_reason(&p) {
                        e = status::failed(format!("the pod ended (Kubernetes: {r}: {msg})"), now_ms());
                    }
                    Word::Reason(e)
                }
                PodState::Failed { reason, message } => {
                    Word::Reason(status::failed(format!("the pod failed (Kubernetes: {reason}: {message})"), now_ms()))
                }
                _ => Word::Running,
            },
            Ok(None) => {
                // The pod is gone; the Job with it, or not.
                match self.cluster.job_api().get_opt(&self.meta.job).await {
                    Ok(None) => Word::Reason(self.vanished()),
                    _ => Word::Running,
                }
            }
            Err(_) => Word::Running,
        }
    }

    /// The log carried an ending: the container's own status, once it has
    /// ended (within a bound; a container still running after it printed
    /// an ending is followed on).
    async fn await_container_end(&self, pod: &str) -> Word {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.cluster.changed.notified();
            let word = self.container_word(pod).await;
            if word.ended() || Instant::now() > until {
                return word;
            }
            let _ = tokio::time::timeout(Duration::from_millis(250), notified).await;
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
        let mut exit = ending.exit.clone();
        exit.output_dropped_bytes += m.gap_bytes;
        let mut findings = Vec::new();
        if !ending.tamper.is_empty() {
            findings.push(finding(
                "the agent tampered with the pod's control files",
                format!("{}; the result was taken from what caesar verifies itself", ending.tamper.join("; ")),
            ));
        }
        // What the pod says (its frames, its termination message) comes
        // from a container the agent shares: the result is what caesar
        // reads itself, the result ref or the collector's bundle. A stopped
        // run's too: its collector outlives the stop (it holds SIGTERM), so
        // a cancelled task's partial work comes back as under git.
        if exit.spawn_error.is_none() {
            match self.bring_back(&ending).await {
                Ok((verified, mut notes)) => {
                    findings.append(&mut notes);
                    if verified.is_none()
                        && let Some(err) = &ending.error
                    {
                        // A cancelled pod's collector is stopped with it: the run ends
                        // cancelled, and what it left behind is a finding.
                        if self.stop.load(Ordering::Acquire) {
                            findings
                                .push(finding("the cancelled run's changes could not be brought back", err.clone()));
                        } else {
                            exit.spawn_error = Some(err.clone());
                        }
                    }
                }
                // A cancelled run ends cancelled; what it left is a finding.
                Err(e) if self.stop.load(Ordering::Acquire) => {
                    findings.push(finding("the cancelled run's changes could not be brought back", e))
                }
                Err(e) => exit.spawn_error = Some(format!("the agent's changes could not be brought back: {e}")),
            }
        }
        if !findings.is_empty() {
            let lines: String =
                findings.iter().filter_map(|f| serde_json::to_string(f).ok()).map(|l| l + "\n").collect();
            let _ = crate::safe_fs::write_atomic(
                &self.dir.daemon_files().join(crate::runner::RUNNER_FINDINGS),
                lines.as_bytes(),
            );
        }
        if self.stop.load(Ordering::Acquire) {
            self.wait_pod_gone().await;
        }
        let bytes = serde_json::to_vec(&exit).unwrap_or_default();
        if let Err(e) = crate::safe_fs::write_atomic(&self.dir.exit(), &bytes) {
            tracing::warn!(task_id = %self.task_id, "cannot write exit.json: {e}");
        }
    }

    /// The verified result laid into the worktree (`None`: there is none),
    /// with findings where the pod's word differs from it.
    async fn bring_back(&self, ending: &Ending) -> Result<(Option<String>, Vec<crate::oacp::Finding>), String> {
        let reported = ending.result.clone();
        let (meta, task, scratch) = (self.meta.clone(), self.task_id.clone(), self.dir.root().to_path_buf());
        let verified = match self.meta.workspace {
            WorkspaceMode::Git => {
                let collector = self.collector_word().await;
                let (m, t) = (meta.clone(), task.clone());
                let got =
                    tokio::task::spawn_blocking(move || workspace::fetch_result(&m.workdir, &m.remote, &t, &m.base))
                        .await
                        .map_err(|e| e.to_string())??;
                if let (Some(c), Some(g)) = (&collector, &got)
                    && c != g
                {
                    return Err(format!(
                        "the result ref holds {g}, but the collector pushed {c}: someone else wrote the ref; not applied"
                    ));
                }
                if let Some(g) = &got {
                    let (m, g2, sc) = (meta.clone(), g.clone(), scratch.clone());
                    tokio::task::spawn_blocking(move || workspace::lay_changes(&m.workdir, &m.base, &g2, &sc))
                        .await
                        .map_err(|e| e.to_string())??;
                }
                got
            }
            WorkspaceMode::Api => {
                let pod = self.cluster.pods.of(&self.task_id).last().cloned();
                let pod = pod.ok_or("the pod is gone, and its result with it")?;
                // Stopped before its containers started: no agent ran, there is nothing to take.
                if self.stop.load(Ordering::Acquire) && bundle::collector(&pod) == bundle::Collector::NeverRan {
                    return Ok((None, Vec::new()));
                }
                let name = pod.metadata.name.clone().unwrap_or_default();
                Some(bundle::bring_back(&self.cluster, &name, &meta, &scratch).await?)
            }
        };
        let mut notes = Vec::new();
        let said = reported.as_deref().unwrap_or("none");
        let is = verified.as_deref().unwrap_or("none");
        if reported.is_some() && said != is {
            notes.push(finding(
                "the pod reported a result that is not the one the collector made",
                format!("the pod's ending names commit {said}; caesar verified {is} and used it"),
            ));
        }
        Ok((verified, notes))
    }

    /// The collector's own report of the commit it pushed (its termination
    /// message, which the agent cannot write), once it has ended.
    async fn collector_word(&self) -> Option<String> {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            let notified = self.cluster.changed.notified();
            let pod = self.cluster.pods.of(&self.task_id).last().cloned()?;
            let st = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
            // A pod with no collector status at all has no collector to wait for.
            let c = st.and_then(|l| l.iter().find(|c| c.name == super::manifest::COLLECT_CONTAINER).cloned())?;
            match c.state.and_then(|s| s.terminated) {
                Some(t) => {
                    let p: super::phases::Pushed = serde_json::from_str(t.message.as_deref()?).ok()?;
                    return p.result;
                }
                None => {
                    let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
                }
            }
        }
        None
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

/// A high finding about the run.
fn finding(title: &str, detail: String) -> crate::oacp::Finding {
    crate::oacp::Finding {
        severity: crate::oacp::Severity::High,
        title: title.to_owned(),
        file: None,
        line: None,
        detail,
    }
}

/// The tampering noted when the log carried more than one ending, or one
/// that is not the termination message.
const FORGED_ENDING: &str = "the pod's log carried an ending the wrapper did not write";

/// What the agent container's status says about the run's end.
enum Word {
    /// Not ended (or not known yet).
    Running,
    /// Ended with the wrapper's termination message.
    Message(Ending),
    /// Ended with no parseable message: the Kubernetes reason.
    Reason(Ending),
}

impl Word {
    fn ended(&self) -> bool {
        !matches!(self, Word::Running)
    }
}

/// The run's ending from what the log said and what the container's status
/// says. The termination message wins: the wrapper writes it last, after
/// the agent's tree ended, while an ending in the log may be one the agent
/// printed into the wrapper's output (recorded as tampering when they
/// differ). With no message, the log's ending, else the reason; nothing
/// while the container still runs.
fn settle(said: Option<Ending>, word: Word) -> Option<Ending> {
    match (said, word) {
        (said, Word::Message(mut e)) => {
            if said.is_some_and(|s| s != e) {
                e.tamper.push(FORGED_ENDING.to_owned());
            }
            Some(e)
        }
        (Some(s), Word::Reason(_)) => Some(s),
        (None, Word::Reason(e)) => Some(e),
        (_, Word::Running) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(code: i64, result: &str) -> Ending {
        let mut e = Ending { result: Some(result.to_owned()), ..Default::default() };
        e.exit.exit_code = Some(code);
        e
    }

    #[test]
    fn the_termination_message_settles_the_ending() {
        let real = ending(3, "aaaa");
        // The log agrees: that is the ending, nothing noted.
        assert_eq!(settle(Some(real.clone()), Word::Message(real.clone())), Some(real.clone()));
        // The log carried another (the agent printed it): the message wins, noted.
        let got = settle(Some(ending(0, "ffff")), Word::Message(real.clone())).expect("ended");
        assert_eq!((got.exit.exit_code, got.result.as_deref()), (Some(3), Some("aaaa")));
        assert_eq!(got.tamper, [FORGED_ENDING]);
        // No message: the log's ending, else the reason; nothing while it runs.
        let reason = status::failed("OOMKilled".into(), 1);
        assert_eq!(settle(Some(real.clone()), Word::Reason(reason.clone())), Some(real.clone()));
        assert_eq!(settle(None, Word::Reason(reason.clone())), Some(reason));
        assert_eq!(settle(Some(real), Word::Running), None);
        assert_eq!(settle(None, Word::Running), None);
    }
}

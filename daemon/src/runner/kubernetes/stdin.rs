//! A remote task's stdin (issue 16): what the drivers write through
//! [`crate::runner::Runner::write_stdin`] reaches the pod's supervisor FIFO
//! over one `pods/exec` stream.
//!
//! Daemon side, [`Pump`]: each line gets the next sequence number and is
//! appended (fsync'd) to the task directory's [`QUEUE_FILE`] before the
//! write is acknowledged, so a daemon restart loses none. One exec stream
//! into the agent container runs `caesard __kube stdin`; the pump sends
//! `<seq> <line>` lines, the pod answers `ack <seq>`. A dropped stream (API
//! server restart, network) is reopened; the pod's first line says the last
//! sequence it wrote (`last <seq>`), and the pump resends what follows.
//!
//! Pod side, [`stdin_main`]: writes each line into the supervisor's
//! `stdin.fifo` (in its daemon part, `/ws/.caesar.daemon`), records its
//! sequence in [`SEQ_FILE`] beside it, then acknowledges it; a sequence
//! already written is acknowledged again and not written twice. The agent
//! shares the pod's filesystem: forging the sequence file
//! only withholds its own answers, and the FIFO is written only if it is
//! one ([`crate::supervisor::write_agent_stdin`]).

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::AttachParams;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::manifest::CONTAINER;
use super::pod::POD_ARG0;
use super::watch::Cluster;
use crate::task_dir::TaskDir;

/// `caesard __kube stdin`.
pub const STDIN_ARG: &str = "stdin";
/// The lines written to a remote task's stdin, in its local task directory.
pub const QUEUE_FILE: &str = "kube-stdin.jsonl";
/// In the pod's task directory: the last sequence written into the FIFO.
pub const SEQ_FILE: &str = "stdin.seq";

/// How the stream's error starts when RBAC refuses the exec.
pub(super) const FORBIDDEN: &str = "forbidden: ";

/// The most bytes of one line the pod takes (a permission answer is a few
/// hundred; this bounds what a forged stream could make it hold).
const MAX_LINE: usize = 1 << 20;

/// One line of the queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    seq: u64,
    line: String,
}

#[derive(Debug, Default)]
struct Queue {
    /// The next sequence to give.
    next: u64,
    /// Lines the pod has not acknowledged, in order.
    pending: VecDeque<Entry>,
}

/// A remote task's stdin pump.
#[derive(Debug)]
pub struct Pump {
    file: PathBuf,
    exit: PathBuf,
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
    /// Set when the cluster refused the exec: nothing queued would be delivered.
    refused: AtomicBool,
}

impl Pump {
    /// The pump of the task in `dir`, with the lines its queue file holds
    /// (a restarted daemon: the pod says which it already has).
    pub fn open(dir: &TaskDir) -> Arc<Pump> {
        let file = dir.root().join(QUEUE_FILE);
        let mut q = Queue { next: 1, ..Default::default() };
        if let Ok(text) = std::fs::read_to_string(&file) {
            for e in text.lines().filter_map(|l| serde_json::from_str::<Entry>(l).ok()) {
                q.next = q.next.max(e.seq + 1);
                q.pending.push_back(e);
            }
        }
        Arc::new(Pump {
            file,
            exit: dir.exit(),
            queue: Mutex::new(q),
            wake: tokio::sync::Notify::new(),
            refused: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one line for the agent's stdin: durable when this returns.
    pub fn push(&self, line: &str) -> std::io::Result<()> {
        if self.exit.exists() {
            return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "the remote task has ended"));
        }
        if self.refused() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "Kubernetes refuses the daemon `create` on `pods/exec`, which carries the agent's stdin",
            ));
        }
        let line = line.trim_end_matches('\n');
        if line.contains('\n') || line.len() > MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("one line of at most {MAX_LINE} bytes at a time"),
            ));
        }
        let mut q = self.lock();
        let e = Entry { seq: q.next, line: line.to_owned() };
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.file)?;
        let mut bytes = serde_json::to_vec(&e).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        f.write_all(&bytes)?;
        f.sync_data()?;
        q.next += 1;
        q.pending.push_back(e);
        drop(q);
        self.wake.notify_one();
        Ok(())
    }

    /// Whether the cluster refused the exec that carries the agent's stdin.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// Drops what the pod has written, up to `seq`.
    fn acked(&self, seq: u64) {
        let mut q = self.lock();
        while q.pending.front().is_some_and(|e| e.seq <= seq) {
            q.pending.pop_front();
        }
    }

    /// The lines after `sent`, in order.
    fn after(&self, sent: u64) -> Vec<Entry> {
        self.lock().pending.iter().filter(|e| e.seq > sent).cloned().collect()
    }

    /// Carries the queue into the pod until the task has ended (its
    /// `exit.json`) or was stopped, reopening the stream whenever it drops.
    pub async fn run(self: Arc<Self>, cluster: Arc<Cluster>, task_id: String, stop: Arc<AtomicBool>) {
        let mut pause = Duration::from_millis(100);
        while !self.exit.exists() {
            match self.stream(&cluster, &task_id, &stop).await {
                // Not a passing fault: nothing is retried (preflight refuses a task that asks
                // on stdin without it; what else is lost is an interrupt, signalled instead).
                Err(e) if e.starts_with(FORBIDDEN) => {
                    tracing::warn!(task_id, "the agent's stdin cannot reach the pod: {e}");
                    self.refused.store(true, Ordering::Release);
                    return;
                }
                Ok(()) => {
                    tracing::info!(task_id, "the stdin stream into the pod ended");
                    pause = Duration::from_millis(100)
                }
                Err(e) => {
                    tracing::info!(task_id, "the stdin stream into the pod is not open: {e}");
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
            if stop.load(Ordering::Acquire) && self.lock().pending.is_empty() {
                return;
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// One exec stream: until it drops or the task ends.
    async fn stream(&self, cluster: &Cluster, task_id: &str, stop: &AtomicBool) -> Result<(), String> {
        let mut p = exec_in_agent(cluster, task_id, STDIN_ARG, 64 * 1024).await?;
        let (Some(mut w), Some(r)) = (p.stdin(), p.stdout()) else { return Err("the exec has no stdin".into()) };
        let mut lines = tokio::io::BufReader::new(r).lines();
        // A connection dropped without a close (an API server gone) ends the client's task with
        // an error but never ends its stdout: the task's end is watched too.
        let done = p.join();
        tokio::pin!(done);
        let first = tokio::select! {
            l = lines.next_line() => l.map_err(|e| e.to_string())?.ok_or("the pod's stdin command ended at once")?,
            r = &mut done => return Err(format!("the exec ended at once: {r:?}")),
            () = tokio::time::sleep(Duration::from_secs(30)) => return Err("the pod's stdin command said nothing".into()),
        };
        let mut sent = first
            .strip_prefix("last ")
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| format!("the pod's stdin command said {first:?}"))?;
        self.acked(sent);
        let ended = loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            for e in self.after(sent) {
                let out = format!("{} {}\n", e.seq, e.line);
                w.write_all(out.as_bytes()).await.map_err(|e| format!("cannot send into the pod: {e}"))?;
                sent = e.seq;
            }
            w.flush().await.map_err(|e| format!("cannot send into the pod: {e}"))?;
            tokio::select! {
                () = &mut woken => {}
                r = &mut done => break r.map_err(|e| format!("the stdin stream dropped: {e}")),
                l = lines.next_line() => match l {
                    Ok(Some(l)) => match l.strip_prefix("ack ").and_then(|s| s.trim().parse::<u64>().ok()) {
                        Some(seq) => self.acked(seq),
                        None => break Err(format!("the pod's stdin command: {l}")),
                    },
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(format!("the stdin stream dropped: {e}")),
                },
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if self.exit.exists() || stop.load(Ordering::Acquire) && self.lock().pending.is_empty() {
                        break Ok(());
                    }
                }
            }
        };
        // Dropping the writer would not end the exec's stdin: shut down, it closes the stream.
        let _ = w.shutdown().await;
        ended
    }
}

/// Runs `caesard __kube <arg>` in the task's running agent container with
/// its stdin and stdout streamed (`buf` bytes buffered each way); a refusal
/// by RBAC is said with [`FORBIDDEN`] first.
pub(super) async fn exec_in_agent(
    cluster: &Cluster,
    task_id: &str,
    arg: &str,
    buf: usize,
) -> Result<kube::api::AttachedProcess, String> {
    let pod = agent_pod(cluster, task_id).ok_or("the agent container is not running")?;
    let ap = AttachParams {
        container: Some(CONTAINER.to_owned()),
        stdin: true,
        stdout: true,
        stderr: false,
        tty: false,
        max_stdin_buf_size: Some(buf),
        max_stdout_buf_size: Some(buf),
        ..Default::default()
    };
    cluster.pod_api().exec(&pod, ["caesard", POD_ARG0, arg], &ap).await.map_err(|e| {
        let why = super::client::explain(&e, "create", "pods/exec", &cluster.namespace);
        match e {
            kube::Error::Api(s) if s.code == 403 => format!("{FORBIDDEN}{why}"),
            _ => why,
        }
    })
}

/// The task's pod whose agent container runs, by name (the newest).
pub(super) fn agent_pod(cluster: &Cluster, task_id: &str) -> Option<String> {
    cluster.pods.of(task_id).into_iter().rev().find(agent_running).and_then(|p| p.metadata.name)
}

/// Whether the pod's agent container runs (exec reaches only a running one).
fn agent_running(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let st = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    st.into_iter().flatten().any(|c| c.name == CONTAINER && c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// `caesard __kube stdin`, in the agent container: the pump's lines into the
/// supervisor's FIFO, each once; 0 at the end of its input.
pub fn stdin_main(_argv: &[String]) -> i32 {
    super::pod::out_of_the_agents_reach();
    let (ws, _, _) = super::phases::dirs();
    // The supervisor's FIFO is in its daemon part (`/ws/.caesar.daemon`).
    match copy_lines(&ws.join(super::pod::DAEMON_DIR), std::io::stdin().lock(), &mut std::io::stdout().lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("caesard {POD_ARG0} {STDIN_ARG}: {e}");
            1
        }
    }
}

/// The pod's side of the protocol, over any reader and writer.
fn copy_lines(tdir: &Path, input: impl BufRead, out: &mut impl Write) -> Result<(), String> {
    let seq_file = tdir.join(SEQ_FILE);
    let mut last: u64 = std::fs::read_to_string(&seq_file).ok().and_then(|s| s.trim().parse().ok()).unwrap_or_default();
    let say = |out: &mut dyn Write, s: String| out.write_all(s.as_bytes()).and_then(|()| out.flush());
    say(out, format!("last {last}\n")).map_err(|e| e.to_string())?;
    for line in input.split(b'\n') {
        let line = line.map_err(|e| e.to_string())?;
        if line.len() > MAX_LINE + 32 {
            return Err(format!("a line of {} bytes: refused", line.len()));
        }
        let line = String::from_utf8(line).map_err(|_| "a line that is not UTF-8: refused".to_owned())?;
        let (seq, text) = line.split_once(' ').ok_or_else(|| format!("no sequence in {line:?}"))?;
        let seq: u64 = seq.parse().map_err(|_| format!("no sequence in {line:?}"))?;
        if seq > last + 1 {
            return Err(format!("line {seq} follows line {last}: lines are missing"));
        }
        if seq == last + 1 {
            crate::supervisor::write_agent_stdin(tdir, text)
                .map_err(|e| format!("cannot write to the agent's stdin: {e}"))?;
            last = seq;
            crate::safe_fs::write_atomic(&seq_file, last.to_string().as_bytes())
                .map_err(|e| format!("cannot record line {seq}: {e}"))?;
        }
        say(out, format!("ack {seq}\n")).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pod's side against a real FIFO: each sequence written once, a
    /// repeated one acknowledged and not written, a gap refused.
    #[test]
    fn the_pod_writes_each_line_once_and_refuses_a_gap() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join(crate::supervisor::STDIN_FIFO);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Held open for reading and writing, as the supervisor holds it.
        let reader = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
        let mut out = Vec::new();
        copy_lines(d.path(), &b"1 one\n2 two\n"[..], &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "last 0\nack 1\nack 2\n");
        // Reconnected: line 2 again (its ack was lost), then 3.
        let mut out = Vec::new();
        copy_lines(d.path(), &b"2 two\n3 three\n"[..], &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "last 2\nack 2\nack 3\n");
        let mut got = vec![0u8; 64];
        let n = std::io::Read::read(&mut &reader, &mut got).unwrap();
        assert_eq!(&got[..n], b"one\ntwo\nthree\n");
        let e = copy_lines(d.path(), &b"5 five\n"[..], &mut Vec::new()).unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }

    #[test]
    fn queued_lines_survive_a_restart_and_acks_drop_them() {
        let d = tempfile::tempdir().unwrap();
        let dir = TaskDir::new(d.path().to_path_buf());
        let p = Pump::open(&dir);
        p.push("{\"a\":1}\n").unwrap();
        p.push("{\"a\":2}").unwrap();
        assert!(p.push("x\ny").is_err());
        p.acked(1);
        assert_eq!(p.after(0).iter().map(|e| e.seq).collect::<Vec<_>>(), [2]);
        let again = Pump::open(&dir);
        assert_eq!(
            again.after(0).iter().map(|e| (e.seq, e.line.as_str())).collect::<Vec<_>>(),
            [(1, "{\"a\":1}"), (2, "{\"a\":2}")]
        );
        again.push("3").unwrap();
        assert_eq!(again.after(2)[0].seq, 3);
        std::fs::write(dir.exit(), "{}").unwrap();
        assert!(again.push("late").is_err(), "an ended task takes no line");
    }
}

//! The live runs: what the engine keeps in memory for each task that is not
//! over (its status watch, its event numbering and watchers), the
//! engine-wide change stream, and the writing of a task's events in order:
//! numbering, `events.jsonl`, the store, the watchers, and the repair of
//! `events.jsonl` after a crash.
//!
//! Its own state is the live map and the change stream; the store is shared.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};
use tracing::warn;

use crate::clock::{now_ms, rfc3339};
use crate::error::{Error, Result};
use crate::oacp::{EVENT_PROTOCOL, EventBody, EventRecord};
use crate::store::{Store, TaskStatus};
use crate::task_dir::TaskDir;

use super::Activity;

/// How many changes a slow subscriber may fall behind before it is told it
/// lagged (and should take a fresh snapshot).
const PULSE_RING: usize = 1024;

/// What the engine keeps in memory for a running task.
pub(crate) struct Live {
    pub(super) status: watch::Sender<TaskStatus>,
    /// Bumped when the task needs the caller: a blocker, a question.
    pub(super) attention: watch::Sender<u64>,
    /// Made on the first watcher: most tasks have none, and its ring is the
    /// largest thing a task holds.
    pub(super) events: std::sync::OnceLock<broadcast::Sender<(u64, String)>>,
    pub(super) output: Mutex<Option<(String, i64)>>,
    pub(super) activity: Mutex<Option<Activity>>,
    /// The next event sequence number. Held while a batch is stored, so the
    /// monitor and the return channel number events in the order stored.
    pub(super) next_seq: Mutex<u64>,
    /// Bumped when a question of the task is answered.
    pub(super) answers: watch::Sender<u64>,
    /// An append to `events.jsonl` failed: it is repaired before the next.
    pub(super) events_file_behind: std::sync::atomic::AtomicBool,
    /// `events.jsonl` reached its cap and said so (issue 19; `events`).
    pub(super) events_capped: std::sync::atomic::AtomicBool,
    /// Set when the task got a steer (issue 31, `steer.rs`).
    pub(super) steers: super::steer::Mailbox,
}

impl Live {
    pub(super) fn new(status: TaskStatus, next_seq: u64) -> Arc<Live> {
        Arc::new(Live {
            next_seq: Mutex::new(next_seq),
            answers: watch::channel(0).0,
            status: watch::channel(status).0,
            attention: watch::channel(0).0,
            events: std::sync::OnceLock::new(),
            output: Mutex::new(None),
            activity: Mutex::new(None),
            events_file_behind: Default::default(),
            events_capped: Default::default(),
            steers: Default::default(),
        })
    }
}

/// The live tasks and the change stream. One per engine.
pub struct LiveRuns {
    store: Arc<Store>,
    map: Mutex<HashMap<String, Arc<Live>>>,
    /// Task ids that changed, for live views of all tasks (the dashboard).
    pulse: broadcast::Sender<String>,
}

impl LiveRuns {
    pub(super) fn new(store: Arc<Store>) -> LiveRuns {
        LiveRuns { store, map: Mutex::new(HashMap::new()), pulse: broadcast::channel(PULSE_RING).0 }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live state of task `id`, if it is live.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Live>> {
        self.map().get(id).cloned()
    }

    /// Registers a task as live (its status watched, its events numbered
    /// from `next_seq`), or moves the live one to `status`. A task is live
    /// from its delegation on, so that a caller awaiting it while it is
    /// queued or preparing is woken by what happens once it runs.
    pub(super) fn make(&self, id: &str, status: TaskStatus, next_seq: u64) -> Arc<Live> {
        let mut live = self.map();
        if let Some(existing) = live.get(id).cloned() {
            existing.status.send_replace(status);
            drop(live);
            self.pulse(id);
            return existing;
        }
        let made = Live::new(status, next_seq);
        live.insert(id.to_owned(), made.clone());
        drop(live);
        self.pulse(id);
        made
    }

    /// Takes task `id` out of the live map, without telling its watchers.
    pub(super) fn remove(&self, id: &str) -> Option<Arc<Live>> {
        self.map().remove(id)
    }

    /// Takes a finished task out of the live map, its watchers told
    /// `stored`, the status its ending stored (the caller has it: read back
    /// here, it cost a row's read between the commit and an await's wake).
    pub(super) fn forget(&self, id: &str, stored: TaskStatus) {
        if let Some(live) = self.remove(id) {
            live.status.send_replace(stored);
        }
        self.pulse(id);
    }

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

    /// Numbers, stores (with the log offset when the output produced them),
    /// appends to `events.jsonl` and broadcasts a batch of events. Returns
    /// the last sequence number used.
    pub(super) fn emit_events(
        &self,
        id: &str,
        task_dir: &Path,
        live: &Live,
        bodies: Vec<EventBody>,
        offset: Option<u64>,
    ) -> Result<u64> {
        self.emit_with(id, task_dir, live, bodies, |records| {
            self.store.append_events(id, records, offset)?;
            Ok(true)
        })
    }

    /// Numbers a batch of events and hands it to `store`, which writes it in
    /// the same transaction as the state change it comes with (a task's start
    /// or end) and says whether it did. `events.jsonl` gets the batch first,
    /// so that it is whole by the time a reader of the store sees the change
    /// (a finished task's file ends with `finished`); it is cut back when the
    /// store refuses the batch, and repaired from the store after a crash.
    /// Only stored events reach the watchers.
    pub(super) fn emit_with(
        &self,
        id: &str,
        task_dir: &Path,
        live: &Live,
        bodies: Vec<EventBody>,
        store: impl FnOnce(&[EventRecord]) -> Result<bool>,
    ) -> Result<u64> {
        let mut next = live.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let at = rfc3339(now_ms());
        let first = *next;
        let records: Vec<EventRecord> = bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| EventRecord {
                protocol: EVENT_PROTOCOL.to_owned(),
                seq: first + i as u64,
                at: at.clone(),
                task_id: id.to_owned(),
                body,
            })
            .collect();
        let mut text = String::new();
        let mut lines = Vec::with_capacity(records.len());
        for r in &records {
            let line = serde_json::to_string(r).map_err(|e| Error::Internal(e.to_string()))?;
            text.push_str(&line);
            text.push('\n');
            lines.push((r.seq, line));
        }
        let file = TaskDir::new(task_dir).events();
        if live.events_file_behind.load(std::sync::atomic::Ordering::SeqCst) {
            // An earlier append failed: bring the file back to the store first.
            self.repair_events_file(id, task_dir, first);
        }
        let before = std::fs::symlink_metadata(&file).map(|m| m.len()).unwrap_or(0);
        let appended = append_file(&file, text.as_bytes());
        let stored = store(&records);
        if !matches!(stored, Ok(true)) {
            if let Err(e) = crate::safe_fs::truncate_regular(&file, before) {
                warn!(task_id = %id, "cannot cut {} back after the store refused a batch: {e}", file.display());
                live.events_file_behind.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        } else if let Err(e) = appended {
            // The store has the events; the file is repaired before the next batch.
            warn!(task_id = %id, "cannot append to {}: {e}; it is repaired from the store next", file.display());
            live.events_file_behind.store(true, std::sync::atomic::Ordering::SeqCst);
        } else {
            live.events_file_behind.store(false, std::sync::atomic::Ordering::SeqCst);
        }
        if !stored? || records.is_empty() {
            return Ok(first.saturating_sub(1));
        }
        *next = first + records.len() as u64;
        if let Some(watchers) = live.events.get() {
            for l in lines {
                let _ = watchers.send(l);
            }
        }
        self.pulse(id);
        Ok(*next - 1)
    }

    /// Makes a task's `events.jsonl` hold exactly its `stored` events again
    /// (after a crash, or a failed append): lines written for a batch the
    /// store never got are cut, lines the store has and the file lacks are
    /// added. Failures are logged with their cause.
    pub(super) fn repair_events_file(&self, id: &str, task_dir: &Path, stored: u64) {
        let file = TaskDir::new(task_dir).events();
        // The agent can write here: opened as a regular file only, never
        // through a link or a FIFO, and read in pieces no further than the
        // stored events' own length (issue 29: a 3 GiB file was read whole).
        let expected = match self.store.events_bytes(id) {
            Ok(n) => n,
            Err(e) => {
                warn!(task_id = %id, "cannot measure the stored events to repair {}: {e}", file.display());
                return;
            }
        };
        let (kept, end, len) = crate::safe_fs::open_regular(&file)
            .and_then(|f| {
                let len = f.metadata()?.len();
                let (kept, end) = count_lines(f, stored, expected)?;
                Ok((kept, end, len))
            })
            .unwrap_or((0, 0, 0));
        if end < len {
            warn!(task_id = %id, "events.jsonl had lines past the stored events: cut back");
            if let Err(e) = crate::safe_fs::truncate_regular(&file, end) {
                warn!(task_id = %id, "cannot cut {} back: {e}", file.display());
            }
        }
        if kept < stored {
            warn!(task_id = %id, "events.jsonl lacked stored events: completed from the store");
            let rows = match self.store.events_from(id, kept, u32::MAX) {
                Ok(rows) => rows,
                Err(e) => {
                    warn!(task_id = %id, "cannot read the events to repair {}: {e}", file.display());
                    return;
                }
            };
            let mut missing = String::new();
            for (_, line) in rows.into_iter().take((stored - kept) as usize) {
                missing.push_str(&line);
                missing.push('\n');
            }
            if let Err(e) = append_file(&file, missing.as_bytes()) {
                warn!(task_id = %id, "cannot repair {}: {e}", file.display());
            }
        }
    }
}

/// The first `want` lines of `from`, read in pieces and no further than
/// `max` bytes: how many there are, and the offset past the last.
fn count_lines(from: impl std::io::Read, want: u64, max: u64) -> std::io::Result<(u64, u64)> {
    use std::io::Read;
    let mut from = from.take(max);
    let mut buf = vec![0u8; 64 * 1024];
    let (mut kept, mut end, mut at) = (0u64, 0u64, 0u64);
    while kept < want {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for (i, b) in buf[..n].iter().enumerate() {
            if *b == b'\n' {
                kept += 1;
                end = at + i as u64 + 1;
                if kept == want {
                    break;
                }
            }
        }
        at += n as u64;
    }
    Ok((kept, end))
}

fn append_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    crate::safe_fs::open_append_regular(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::count_lines;
    use std::io::Read;

    #[test]
    fn lines_are_counted_no_further_than_asked() {
        assert_eq!(count_lines(&b"a\nbb\nccc\n"[..], 2, 100).unwrap(), (2, 5));
        assert_eq!(count_lines(&b"a\nbb\nccc\n"[..], 9, 100).unwrap(), (3, 9));
        // Past `max` nothing is read: a line there is not counted.
        assert_eq!(count_lines(&b"a\nbb\nccc\n"[..], 3, 5).unwrap(), (2, 5));
        // A huge file without a newline is read only up to `max`.
        let endless = std::io::repeat(0).take(u64::MAX);
        assert_eq!(count_lines(endless, 1, 1 << 20).unwrap(), (0, 0));
    }
}

#[cfg(test)]
mod service_tests {
    use std::sync::Arc;

    use super::LiveRuns;
    use crate::oacp::EventBody;
    use crate::store::{Store, TaskStatus};
    use crate::task_dir::TaskDir;

    fn runs() -> (tempfile::TempDir, Arc<Store>, LiveRuns) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("caesar.db")).unwrap());
        let mut task = crate::store::tests::sample("t_0123456789ab");
        task.task_dir = dir.path().join("t").display().to_string();
        std::fs::create_dir_all(&task.task_dir).unwrap();
        store.insert_task(&task).unwrap();
        let runs = LiveRuns::new(store.clone());
        (dir, store, runs)
    }

    fn message(text: &str) -> EventBody {
        EventBody::Message { text: text.to_owned() }
    }

    #[test]
    fn events_are_numbered_stored_written_and_broadcast_in_order() {
        let (dir, store, runs) = runs();
        let id = "t_0123456789ab";
        let task_dir = dir.path().join("t");
        let mut changes = runs.subscribe_changes();
        let live = runs.make(id, TaskStatus::Running, 0);
        let watcher = live.events.get_or_init(|| tokio::sync::broadcast::channel(16).0).subscribe();
        assert_eq!(runs.emit_events(id, &task_dir, &live, vec![message("a"), message("b")], None).unwrap(), 1);
        assert_eq!(runs.emit_events(id, &task_dir, &live, vec![message("c")], None).unwrap(), 2);
        let stored: Vec<u64> = store.events_from(id, 0, 10).unwrap().into_iter().map(|(s, _)| s).collect();
        assert_eq!(stored, vec![0, 1, 2]);
        let file = std::fs::read_to_string(TaskDir::new(&task_dir).events()).unwrap();
        assert_eq!(file.lines().count(), 3);
        assert_eq!(watcher.len(), 3, "each stored event reached the watcher");
        assert_eq!(changes.try_recv().unwrap(), id, "the change stream named the task");
    }

    #[test]
    fn a_batch_the_store_refuses_is_cut_from_the_file_and_never_broadcast() {
        let (dir, _store, runs) = runs();
        let id = "t_0123456789ab";
        let task_dir = dir.path().join("t");
        let live = runs.make(id, TaskStatus::Running, 0);
        runs.emit_events(id, &task_dir, &live, vec![message("kept")], None).unwrap();
        let refused = runs.emit_with(id, &task_dir, &live, vec![message("lost")], |_| Ok(false)).unwrap();
        assert_eq!(refused, 0, "the last seq used is still the kept event's");
        let file = std::fs::read_to_string(TaskDir::new(&task_dir).events()).unwrap();
        assert!(file.contains("kept") && !file.contains("lost"), "{file}");
        assert_eq!(
            runs.emit_events(id, &task_dir, &live, vec![message("next")], None).unwrap(),
            1,
            "its seq is reused"
        );
    }

    #[test]
    fn the_events_file_is_repaired_from_the_store() {
        let (dir, _store, runs) = runs();
        let id = "t_0123456789ab";
        let task_dir = dir.path().join("t");
        let live = runs.make(id, TaskStatus::Running, 0);
        runs.emit_events(id, &task_dir, &live, vec![message("a"), message("b")], None).unwrap();
        let file = TaskDir::new(&task_dir).events();
        // A crash left one line too few and a half-written one too many.
        let text = std::fs::read_to_string(&file).unwrap();
        let first = text.lines().next().unwrap();
        std::fs::write(&file, format!("{first}\n{{\"half")).unwrap();
        runs.repair_events_file(id, &task_dir, 2);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }

    #[test]
    fn a_forgotten_task_tells_its_watchers_the_status_its_ending_stored() {
        let (_dir, _store, runs) = runs();
        let id = "t_0123456789ab";
        let live = runs.make(id, TaskStatus::Running, 0);
        let status = live.status.subscribe();
        runs.forget(id, TaskStatus::Succeeded);
        assert!(runs.get(id).is_none());
        assert_eq!(*status.borrow(), TaskStatus::Succeeded, "the stored status, not the live one");
    }
}

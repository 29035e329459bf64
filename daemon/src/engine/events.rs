//! Events: numbering, `events.jsonl`, the store and the watchers, in that
//! order, and the repair of `events.jsonl` after a crash.

use std::path::Path;

use tracing::warn;

use crate::clock::{now_ms, rfc3339};
use crate::error::{Error, Result};
use crate::oacp::{EVENT_PROTOCOL, EventBody, EventRecord};
use crate::task_dir::TaskDir;

use super::*;

impl Engine {
    /// Numbers, stores (with the log offset), writes to `events.jsonl` and
    /// broadcasts a batch of events.
    pub(super) fn emit(&self, run: &mut Run, bodies: Vec<EventBody>) -> Result<()> {
        let bodies = self.cap_event_bytes(run, bodies);
        let changed_files = bodies.iter().any(|b| matches!(b, EventBody::FileChanged { .. }));
        // The batch's new questions go in the same transaction as its events (issue 15).
        let questions = std::mem::take(&mut run.new_questions);
        let offset = Some(run.tail.offset());
        let emitted = self
            .emit_with(&run.id, run.dir.root(), &run.live, bodies, |records| {
                self.store.append_events_with_questions(&run.id, records, offset, &questions)?;
                Ok(true)
            })
            .map(|_| ());
        match &emitted {
            Ok(()) => self.questions_stored(run, questions),
            Err(e) if !questions.is_empty() => {
                warn!(task_id = %run.id, "storing {} question(s) with their events failed: {e}", questions.len())
            }
            Err(_) => {}
        }
        if changed_files {
            // The conflict radar reads this task's worktree again (issue 17).
            self.radar_touch(&run.id);
        }
        emitted
    }

    /// A task's `events.jsonl` is held to the raw-log cap (issue 19): a
    /// line of NUL bytes is six times longer as JSON, so 256 MiB of output
    /// could make 1.6 GB of events. Past the cap one error event says so;
    /// after it only what the caller needs stays (questions, blockers,
    /// errors, usage), and the rest of the output is in `raw.log` alone.
    fn cap_event_bytes(&self, run: &Run, bodies: Vec<EventBody>) -> Vec<EventBody> {
        let cap = self.settings.raw_log_cap;
        if cap == 0 {
            return bodies;
        }
        let size = std::fs::symlink_metadata(run.dir.events()).map(|m| m.len()).unwrap_or(0);
        // Each body is measured (serialized once more): one batch can be
        // megabytes, so the file's size alone cannot tell.
        let mut total = size;
        let mut over = run.live.events_capped.load(std::sync::atomic::Ordering::SeqCst);
        let mut kept = Vec::with_capacity(bodies.len());
        for b in bodies {
            // The envelope (protocol, seq, time, task id) adds about 100 bytes.
            let len = serde_json::to_string(&b).map_or(0, |t| t.len() as u64) + 100;
            if !over && total + len <= cap {
                total += len;
                kept.push(b);
                continue;
            }
            over = true;
            let needed = matches!(
                b,
                EventBody::Question { .. }
                    | EventBody::Blocker { .. }
                    | EventBody::Error { .. }
                    | EventBody::Usage { .. }
            );
            if needed && len <= 64 * 1024 {
                kept.push(b);
            }
        }
        if !over {
            return kept;
        }
        if !run.live.events_capped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            kept.push(
                EventBody::Error {
                    message: format!(
                        "events.jsonl reached the cap of {cap} bytes (CAESAR_RAW_LOG_MAX_BYTES): further output is in raw.log only"
                    ),
                    fatal: false,
                },
            );
        }
        kept
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

//! Events: numbering, `events.jsonl`, the store and the watchers, in that
//! order, and the repair of `events.jsonl` after a crash.

use std::path::Path;

use tracing::warn;

use crate::clock::{now_ms, rfc3339};
use crate::error::{Error, Result};
use crate::oacp::{EVENT_PROTOCOL, EventBody, EventRecord};
use crate::store::TaskRecord;

use super::*;

impl Engine {
    /// Numbers, stores (with the log offset), writes to `events.jsonl` and
    /// broadcasts a batch of events.
    pub(super) fn emit(&self, run: &mut Run, bodies: Vec<EventBody>) -> Result<()> {
        self.emit_events(&run.id, &run.task_dir, &run.live, bodies, Some(run.tail.offset())).map(|_| ())
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
        let file = task_dir.join(EVENTS_FILE);
        let before = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        append_file(&file, text.as_bytes());
        let stored = store(&records);
        if !matches!(stored, Ok(true)) {
            let _ = std::fs::OpenOptions::new().write(true).open(&file).and_then(|f| f.set_len(before));
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
        Ok(*next - 1)
    }

    /// Makes a task's `events.jsonl` hold exactly its stored events again
    /// after a crash: lines written for a batch the store never got are cut,
    /// lines the store has and the file lacks are added.
    pub(super) fn repair_events_file(&self, record: &TaskRecord) {
        let file = Path::new(&record.task_dir).join(EVENTS_FILE);
        let text = std::fs::read(&file).unwrap_or_default();
        let mut kept = 0u64;
        let mut end = 0usize;
        for (i, b) in text.iter().enumerate() {
            if *b == b'\n' {
                if kept == record.event_count {
                    break;
                }
                kept += 1;
                end = i + 1;
            }
        }
        if end < text.len() {
            warn!(task_id = %record.id, "events.jsonl had lines past the stored events: cut back");
            let _ = std::fs::OpenOptions::new().write(true).open(&file).and_then(|f| f.set_len(end as u64));
        }
        if kept < record.event_count {
            warn!(task_id = %record.id, "events.jsonl lacked stored events: completed from the store");
            let Ok(rows) = self.store.events_from(&record.id, kept, u32::MAX) else { return };
            let mut missing = String::new();
            for (_, line) in rows {
                missing.push_str(&line);
                missing.push('\n');
            }
            append_file(&file, missing.as_bytes());
        }
    }
}

pub(super) fn append_file(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(bytes);
    }
}

/// A task's events, one JSON line each, for OACP readers of its directory.
pub(super) const EVENTS_FILE: &str = "events.jsonl";

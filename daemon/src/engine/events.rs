//! A running task's batches of events: held to the cap, stored with the
//! batch's questions, and the radar told of changed files. The writing
//! itself is [`LiveRuns::emit_with`](super::LiveRuns).

use tracing::warn;

use crate::error::Result;
use crate::oacp::EventBody;

use super::*;

impl Engine {
    /// Numbers, stores (with the log offset), writes to `events.jsonl` and
    /// broadcasts a batch of events.
    pub(super) fn emit(&self, run: &mut Run, bodies: Vec<EventBody>) -> Result<()> {
        let bodies = cap_event_bytes(self.settings.raw_log_cap, run, bodies);
        let changed_files = bodies.iter().any(|b| matches!(b, EventBody::FileChanged { .. }));
        // The batch's new questions go in the same transaction as its events (issue 15).
        let questions = std::mem::take(&mut run.new_questions);
        let offset = Some(run.tail.offset());
        let emitted = self.runs.emit_with(&run.id, run.dir.root(), &run.live, bodies, |records| {
            self.store.append_events_with_questions(&run.id, records, offset, &questions)?;
            Ok(true)
        });
        match &emitted {
            Ok(_) => self.permissions.questions_stored(run, questions),
            Err(e) if !questions.is_empty() => {
                warn!(task_id = %run.id, "storing {} question(s) with their events failed: {e}", questions.len())
            }
            Err(_) => {}
        }
        if changed_files {
            // The conflict radar reads this task's worktree again (issue 17).
            self.radar.touch(&run.id);
            // And a checkpoint of its worktree becomes due (issue 31, a fork's point).
            if let Ok(seq) = &emitted {
                self.checkpoints.touch(&run.id, *seq);
            }
        }
        emitted.map(|_| ())
    }
}

/// A task's `events.jsonl` is held to the raw-log cap (issue 19): a
/// line of NUL bytes is six times longer as JSON, so 256 MiB of output
/// could make 1.6 GB of events. Past the cap one error event says so;
/// after it only what the caller needs stays (questions, blockers,
/// errors, usage), and the rest of the output is in `raw.log` alone.
fn cap_event_bytes(cap: u64, run: &Run, bodies: Vec<EventBody>) -> Vec<EventBody> {
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
            EventBody::Question { .. } | EventBody::Blocker { .. } | EventBody::Error { .. } | EventBody::Usage { .. }
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

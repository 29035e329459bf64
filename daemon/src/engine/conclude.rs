//! The end of a task: classify how it ended, recover the report, reconcile it
//! with git, and finish the task once.

use std::path::Path;

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::{EventBody, Mode};
use crate::report::{self, Ending};
use crate::store::{Outcome, StoredReport, TaskRecord, TaskStatus};
use crate::tail::{self};
use crate::workshop;

use super::*;

impl Engine {
    /// Ends a task whose run is over: status, report, `finished`.
    pub(super) async fn conclude(&self, run: &mut Run) -> Result<()> {
        let Some(record) = self.store.task(&run.id)? else {
            return Ok(());
        };
        if record.status.is_terminal() {
            // Ended already (a concluding daemon died after storing it).
            self.runs.forget(&record.id, record.status);
            return Ok(());
        }
        let exit = run.handle.as_ref().and_then(|h| self.runner.exit_record(h, &run.dir));
        // Issue 17: a budget that stopped the agent (stored before the stop).
        // A group's budget stops members that have no limit of their own (`group_budget.rs`).
        let budget_stop = self.store.budget_stop(&run.id)?;
        let (status, ending, error) = match &exit {
            None => {
                // The supervision died without a word; its agent must not
                // run on unwatched.
                if let Some(h) = &run.handle {
                    self.runner.kill_remains(h, &run.id, &run.dir);
                }
                let why = "the task's supervisor process vanished without recording how the agent ended (killed, or the machine restarted)".to_owned();
                (TaskStatus::Failed, Ending::Failed(why.clone()), Some(why))
            }
            Some(e) => {
                if let Some(err) = &e.spawn_error {
                    (TaskStatus::Failed, Ending::Failed(err.clone()), Some(err.clone()))
                } else if record.cancel_requested {
                    (TaskStatus::Cancelled, Ending::Cancelled, None)
                } else if e.timed_out {
                    (TaskStatus::TimedOut, Ending::TimedOut { after_ms: record.timeout_ms }, None)
                } else if let Some((limit, detail)) = &budget_stop {
                    let why = format!("stopped at its budget ({limit}): {detail}");
                    (TaskStatus::Failed, Ending::Failed(why.clone()), Some(why))
                } else if let Some(crate::oacp::Blocker { kind, message, .. }) = &run.blocker {
                    let status = if e.exit_code == Some(0) { TaskStatus::Succeeded } else { TaskStatus::Failed };
                    (status, Ending::Blocked { kind: kind.as_str().to_owned(), message: message.clone() }, None)
                } else if let Some(why) = run.failure.clone().filter(|_| e.exit_code == Some(0)) {
                    (TaskStatus::Failed, Ending::Failed(why.clone()), Some(why))
                } else if e.terminated {
                    let why =
                        "the task's supervisor was told to stop (SIGTERM) by someone other than caesar".to_owned();
                    (TaskStatus::Failed, Ending::Failed(why.clone()), Some(why))
                } else {
                    match (e.exit_code, e.signal) {
                        (Some(0), _) => (TaskStatus::Succeeded, Ending::Exited(0), None),
                        (Some(code), _) => (TaskStatus::Failed, Ending::Exited(code), None),
                        (None, Some(sig)) => (TaskStatus::Failed, Ending::Signalled(sig), None),
                        (None, None) => (TaskStatus::Failed, Ending::Failed("no exit status".to_owned()), None),
                    }
                }
            }
        };
        let duration_ms = record
            .started_ms
            .map(|s| (exit.as_ref().map(|e| e.finished_ms).unwrap_or_else(now_ms) - s).max(0) as u64)
            .unwrap_or(0);
        // The report files, the raw log's tail and the workshop's diff are
        // read, parsed and checked on the blocking pool (issue 19): a report
        // of tens of megabytes must not hold an async worker.
        let job = ReportJob {
            task_id: run.id.clone(),
            dir: run.dir.clone(),
            raw_is_words: run.driver.raw_is_words(),
            final_text: run.final_text.clone().unwrap_or_default(),
            messages: run.messages.clone(),
            ending,
            duration_ms,
            record: record.clone(),
        };
        // A review loop's reviewer (issue 32): its review, read within bounds, kept before its end.
        if self.store.review_member(&run.id)?.is_some_and(|m| m.part == "reviewer") {
            let (text, messages) = (run.final_text.clone().unwrap_or_default(), run.messages.clone());
            let raw = run.driver.raw_is_words().then(|| run.dir.raw_log());
            let outcome =
                crate::blocking::section(move || super::review::read_review(&text, &messages, raw.as_deref()))
                    .await
                    .map_err(|e| Error::Internal(format!("reading the review failed: {e}")))?;
            let body = serde_json::to_string(&outcome).map_err(|e| Error::Internal(e.to_string()))?;
            self.store.put_review_result(&run.id, &body)?;
        }
        let mut recovered = crate::blocking::section(move || job.recover())
            .await
            .map_err(|e| Error::Internal(format!("recovering the report failed: {e}")))?;
        if let Some((limit, detail)) = &budget_stop {
            super::budget::apply_stop(&mut recovered.0, limit, detail);
        }
        if status != TaskStatus::Cancelled && status != TaskStatus::TimedOut && budget_stop.is_none() {
            self.after_blocker(&record, run.blocker.as_ref(), run.session_id.as_deref(), &mut recovered.0);
        } else if status == TaskStatus::Failed {
            // Issue 31: a worktree task its own budget stopped after it changed files is relayed.
            self.relay_after_budget(&record, budget_stop.as_ref(), &mut recovered.0);
        }
        super::verify::apply_to_report(&mut recovered.0, self.stored_verification(&run.id));
        let finished = EventBody::Finished {
            status: recovered.0.status,
            summary: report::tail_chars(&recovered.0.summary, 500),
            exit_code: exit.as_ref().and_then(|e| e.exit_code),
        };
        let ended = Exit {
            status,
            exit_code: exit.as_ref().and_then(|e| e.exit_code),
            signal: exit.as_ref().and_then(|e| e.signal),
            error,
        };
        self.finish_task(&record, ended, recovered, Some((&run.live, finished)))?;
        info!(task_id = %run.id, status = status.as_str(), "task finished");
        Ok(())
    }

    /// Git decides, not the agent's word: reconciles the report's changes
    /// with the diff of the task's workshop, and flags a read-only task
    /// that modified files; where the kernel kept a read-only task's writes
    /// out of its repository, its changes are none, verified by the kernel.
    /// Blocking (git).
    pub(super) fn verify_changes(record: &TaskRecord, report: &mut crate::oacp::Report) {
        let prepared = record.workshop.as_ref();
        let diff = match prepared {
            // A worktree task's result goes into the user's repository
            // here, at its end (`workshop::capture`).
            Some(p) if p.repo_root.is_some() => match workshop::conclude(p) {
                Ok(d) => Some(d),
                Err(e) => {
                    report.findings.push(crate::oacp::Finding {
                        severity: crate::oacp::Severity::Medium,
                        title: "the changes could not be checked against git".to_owned(),
                        file: None,
                        line: None,
                        detail: e.to_string(),
                    });
                    None
                }
            },
            _ => None,
        };
        if let Some(p) = prepared {
            report.findings.extend(p.findings.iter().cloned());
        }
        let verified = workshop::reconcile(report, diff.as_ref());
        report.changes_verified_by = Some(verified.to_owned());
        if record.mode == Mode::ReadOnly
            && let Some(d) = &diff
            && let Some(finding) = workshop::read_only_violation(d)
        {
            report.findings.push(finding);
        }
    }

    pub(super) fn finish_task(
        &self,
        record: &TaskRecord,
        Exit { status, exit_code, signal, error }: Exit,
        (report, source): (crate::oacp::Report, report::Source),
        finished: Option<(&Live, EventBody)>,
    ) -> Result<()> {
        let body = serde_json::to_string_pretty(&report).map_err(|e| Error::Internal(e.to_string()))?;
        let outcome = Outcome {
            status,
            exit_code,
            signal,
            finished_ms: now_ms(),
            error,
            report: StoredReport {
                source: source.as_str().to_owned(),
                status: report.status.as_str().to_owned(),
                body: body.clone(),
            },
        };
        // The `finished` event is stored with the ending, in one transaction:
        // a task ends once, and its log with it.
        let mut stored = false;
        match finished {
            Some((live, body)) => {
                self.runs.emit_with(&record.id, Path::new(&record.task_dir), live, vec![body], |events| {
                    stored = self.store.finish(&record.id, &outcome, events)?;
                    Ok(stored)
                })?;
            }
            None => {
                stored = self.store.finish(&record.id, &outcome, &[])?;
            }
        }
        // Ended meanwhile by another way (a cancel): its watchers get what is stored.
        let stored_status = match stored {
            true => status,
            false => self.store.task(&record.id)?.map_or(status, |r| r.status),
        };
        self.runs.forget(&record.id, stored_status);
        // Its waiting dependents are examined (issue 32, `stacking.rs`).
        self.stacking.ended(&record.id);
        // A review loop's step may be due (issue 32, `review.rs`).
        self.reviews.wake();
        self.notices.finished(&record.id, &report.summary);
        // Its final footprint, for the conflict radar (issue 17).
        self.radar.touch(&record.id);
        // OACP readers of the task directory find the report where the
        // agent would have put it. A convenience copy (the store holds the
        // report), written after the waiters are woken. The directory is
        // the agent's to write: never through a link it planted.
        let report_path = TaskDir::new(&record.task_dir).report();
        if std::fs::symlink_metadata(&report_path).is_err()
            && let Err(e) = crate::safe_fs::write_replacing(&report_path, body.as_bytes())
        {
            warn!(task_id = %record.id, "cannot leave a copy of the report at {}: {e}", report_path.display());
        }
        Ok(())
    }
}

/// How a task ended, as its row records it.
pub(super) struct Exit {
    pub(super) status: TaskStatus,
    pub(super) exit_code: Option<i64>,
    pub(super) signal: Option<i32>,
    pub(super) error: Option<String>,
}

impl Exit {
    /// The ending of a task whose agent never ran (refused at start, cancelled in the queue).
    pub(super) fn without_process(status: TaskStatus, error: Option<String>) -> Exit {
        Exit { status, exit_code: None, signal: None, error }
    }
}

/// What the report of an ended run is recovered from, owned, for the
/// blocking pool ([`crate::blocking::section`]).
struct ReportJob {
    task_id: String,
    dir: TaskDir,
    raw_is_words: bool,
    final_text: String,
    messages: String,
    ending: Ending,
    duration_ms: u64,
    record: TaskRecord,
}

impl ReportJob {
    /// The report with the findings of the launch, the refusals, the runner
    /// and git. Blocking.
    fn recover(self) -> (crate::oacp::Report, report::Source) {
        // A provider's raw output is its JSON stream, no place for a summary:
        // only a generic agent's raw output is read as its words.
        let raw_tail = if self.raw_is_words {
            tail::read_tail(&self.dir.raw_log(), 256 * 1024).unwrap_or_default().0
        } else {
            String::new()
        };
        let texts = [self.final_text.as_str(), self.messages.as_str(), raw_tail.as_str()];
        let mut recovered = report::recover(&report::Inputs {
            task_id: &self.task_id,
            report_path: &self.dir.report(),
            channel_path: &self.dir.channel_report(),
            texts: &texts,
            ending: self.ending,
            duration_ms: self.duration_ms,
            native: self.record.launch.native_report.then_some(self.final_text.as_str()),
        });
        recovered.0.findings.extend(self.record.launch.findings.iter().cloned());
        recovered.0.findings.extend(super::permissions::refusal_findings(&self.dir));
        recovered.0.findings.extend(crate::runner::findings(&self.dir));
        Engine::verify_changes(&self.record, &mut recovered.0);
        recovered
    }
}

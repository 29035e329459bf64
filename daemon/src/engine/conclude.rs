//! The end of a task: classify how it ended, recover the report, reconcile it
//! with git, and finish the task once.

use std::path::Path;

use tracing::info;

use crate::agents::Launch;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::oacp::{EventBody, Mode};
use crate::provider::LineParser;
use crate::report::{self, Ending};
use crate::store::{Outcome, StoredReport, TaskRecord, TaskStatus};
use crate::supervisor::{self};
use crate::tail::{self};
use crate::workshop;

use super::*;

impl Engine {
    /// Ends a task whose supervisor is gone: status, report, `finished`.
    pub(super) fn conclude(&self, run: &mut Run) -> Result<()> {
        let Some(record) = self.store.task(&run.id)? else {
            return Ok(());
        };
        let exit = supervisor::read_exit(&run.task_dir);
        let (status, ending, error) = match &exit {
            None => {
                // The supervisor died without a word; its agent must not
                // run on unwatched. Its group if it was recorded, and every
                // process carrying the task's id in its environment.
                #[cfg(unix)]
                if let Some(agent) = supervisor::read_agent(&run.task_dir) {
                    supervisor::kill_group(agent.pid);
                }
                supervisor::kill_by_task_env(&run.id);
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
                } else if let Some((kind, message)) = &run.blocker {
                    let status = if e.exit_code == Some(0) { TaskStatus::Succeeded } else { TaskStatus::Failed };
                    (status, Ending::Blocked { kind: blocker_name(*kind).to_owned(), message: message.clone() }, None)
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
        // A provider's raw output is its JSON stream, no place for a summary:
        // only a generic agent's raw output is read as its words.
        let raw_tail = if run.generic {
            tail::read_tail(&run.task_dir.join(supervisor::RAW_LOG), 256 * 1024).unwrap_or_default().0
        } else {
            String::new()
        };
        let final_text = run.final_text.clone().unwrap_or_default();
        let launch_native =
            serde_json::from_str::<Launch>(&record.launch_json).map(|l| l.native_report).unwrap_or(false);
        let texts = [final_text.as_str(), run.messages.as_str(), raw_tail.as_str()];
        let duration_ms = record
            .started_ms
            .map(|s| (exit.as_ref().map(|e| e.finished_ms).unwrap_or_else(now_ms) - s).max(0) as u64)
            .unwrap_or(0);
        let recovered = report::recover(&report::Inputs {
            task_id: &run.id,
            report_path: &run.task_dir.join("report.json"),
            texts: &texts,
            ending,
            duration_ms,
            native: launch_native.then_some(final_text.as_str()),
        });
        let mut recovered = recovered;
        if let Ok(launch) = serde_json::from_str::<Launch>(&record.launch_json) {
            recovered.0.findings.extend(launch.findings);
        }
        self.verify_changes(&record, &mut recovered.0);
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
    /// that modified files.
    pub(super) fn verify_changes(&self, record: &TaskRecord, report: &mut crate::oacp::Report) {
        let prepared = record.workshop.as_deref().and_then(|w| serde_json::from_str::<workshop::Prepared>(w).ok());
        let diff = match &prepared {
            Some(p) if p.repo_root.is_some() => match workshop::diff(p) {
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
        if let Some(p) = &prepared {
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
        match finished {
            Some((live, body)) => {
                let task_dir = Path::new(&record.task_dir);
                self.emit_with(&record.id, task_dir, live, vec![body], |events| {
                    self.store.finish(&record.id, &outcome, events)
                })?;
            }
            None => {
                self.store.finish(&record.id, &outcome, &[])?;
            }
        }
        if let Some(live) = self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&record.id) {
            live.status.send_replace(status);
        }
        // OACP readers of the task directory find the report where the
        // agent would have put it. A convenience copy (the store holds the
        // report): atomic, but not worth an fsync, and written after the
        // waiters are woken.
        let report_path = Path::new(&record.task_dir).join("report.json");
        if !report_path.exists() {
            let tmp = report_path.with_extension("tmp");
            if std::fs::write(&tmp, body.as_bytes()).is_ok() {
                let _ = std::fs::rename(&tmp, &report_path);
            }
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

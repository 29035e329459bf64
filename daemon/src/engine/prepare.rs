//! Preparation: the task's workshop, made before it may start.
//!
//! A worktree task gets its worktree (and `setup`) right after delegation,
//! on a task of its own: delegate has already answered, the queue's lock is
//! not held, and tasks prepare concurrently up to `prepare_parallel`. The
//! task shows `pending`, phase `preparing`, and can be cancelled meanwhile
//! (setup's process group is killed). Preparation is idempotent: a daemon
//! killed in the middle prepares the task again on restart, removing what
//! the interrupted try had made of that very task's worktree and branch.
//!
//! Tasks in place are prepared at start instead ([`Engine::prepare_at_start`]):
//! their snapshot must be taken when no other write task holds the tree.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tracing::{Instrument, info, info_span, warn};

use crate::oacp::{Isolation, TaskDoc};
use crate::store::{TaskRecord, TaskStatus};

use crate::workshop::{self, Prepared};

use super::*;

/// How long one `setup` command may run.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The preparations in flight.
pub(super) struct Preparing {
    slots: Arc<Semaphore>,
    flights: Mutex<HashMap<String, Arc<Flight>>>,
}

/// One task's preparation.
struct Flight {
    /// Set to cancel it: setup is killed, the worktree removed.
    cancel: Arc<AtomicBool>,
    /// Becomes true when it is over, whatever the outcome.
    done: watch::Sender<bool>,
    /// Set when the task must be prepared once more after this try (its
    /// stacked base moved meanwhile, `stacking.rs`).
    again: AtomicBool,
}

impl Preparing {
    pub(super) fn new(parallel: usize) -> Preparing {
        Preparing { slots: Arc::new(Semaphore::new(parallel.max(1))), flights: Mutex::new(HashMap::new()) }
    }

    pub(super) fn is_preparing(&self, id: &str) -> bool {
        self.flights.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id)
    }

    fn flight(&self, id: &str) -> Option<Arc<Flight>> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }
}

impl Engine {
    /// Prepares a recorded worktree task in the background, then gives the
    /// queue a turn. A task already preparing is prepared once more when
    /// that preparation is over (it may have begun on an older base).
    pub(super) fn spawn_preparation(self: &Arc<Self>, record: TaskRecord) {
        let flight = {
            let mut flights = self.preparing.flights.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(flight) = flights.get(&record.id) {
                flight.again.store(true, Ordering::SeqCst);
                return;
            }
            let flight = Arc::new(Flight {
                cancel: Arc::new(AtomicBool::new(false)),
                done: watch::channel(false).0,
                again: AtomicBool::new(false),
            });
            flights.insert(record.id.clone(), flight.clone());
            flight
        };
        let engine = self.clone();
        let span = info_span!("task", task_id = %record.id);
        tokio::spawn(
            async move {
                let id = record.id.clone();
                let mut record = record;
                loop {
                    engine.prepare_worktree(record, &flight).await;
                    let again = {
                        let mut flights = engine.preparing.flights.lock().unwrap_or_else(|p| p.into_inner());
                        let again = flight.again.swap(false, Ordering::SeqCst);
                        if !again {
                            flights.remove(&id);
                        }
                        again
                    };
                    let current = if again { engine.store.task(&id).ok().flatten() } else { None };
                    match current {
                        Some(r) if r.status == TaskStatus::Pending && r.run.is_none() => record = r,
                        _ if again => {
                            engine.preparing.flights.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                            break;
                        }
                        _ => break,
                    }
                }
                flight.done.send_replace(true);
                engine.schedule().await;
            }
            .instrument(span),
        );
    }

    async fn prepare_worktree(self: &Arc<Self>, record: TaskRecord, flight: &Flight) {
        let Ok(_slot) = self.preparing.slots.clone().acquire_owned().await else { return };
        // Put back to waiting (its parent moved): its release prepares it.
        if self.stack_waits(&record.id) && !flight.cancel.load(Ordering::SeqCst) {
            return;
        }
        if flight.cancel.load(Ordering::SeqCst) {
            self.end_cancelled_unstarted(&record);
            return;
        }
        let cancel = flight.cancel.clone();
        let input = record.clone();
        // Setup runs in the task's box (issue 29), confined as a write task
        // to its worktree: it prepares it.
        let root = TaskDir::new(&record.task_dir).root().to_path_buf();
        let (exe, grace) = (&self.settings.supervisor_exe, self.settings.grace_ms);
        let launcher = super::boxing::launcher(&self.paths, &record, &root, exe, grace, false);
        // A stacked task is made from its parents' results (issue 32).
        let base = super::stacking::base_of(&self.store, &record.id);
        let made_on = base.clone();
        let prepared = tokio::task::spawn_blocking(move || {
            prepare_blocking(&input, Some(&cancel), Some(&launcher), base.as_deref(), &[])
        })
        .await
        .unwrap_or_else(|e| Err(format!("preparation panicked: {e}")));
        let cancelled = flight.cancel.load(Ordering::SeqCst);
        match prepared {
            Ok(prepared) if cancelled => {
                let _ = tokio::task::spawn_blocking(move || workshop::remove(&prepared, true)).await;
                self.end_cancelled_unstarted(&record);
            }
            Ok(prepared) => {
                self.record_workshop(&record, &prepared, made_on.as_deref()).await;
                info!("prepared in {}", prepared.workdir.display());
            }
            Err(_) if cancelled => self.end_cancelled_unstarted(&record),
            Err(why) => {
                if let Err(e) = self.fail_unstarted(&record, &why) {
                    warn!("could not record the failed preparation ({why}): {e}");
                }
            }
        }
    }

    /// Stores where the task runs, retrying while the store refuses (a full
    /// disk): a prepared worktree is never left unrecorded, or recovery
    /// would make it again. A stacked task's re-cut (`stacking.rs`) is done
    /// when it was made on the base it is released on (`base`). Then
    /// task.json tells the agent where it works.
    async fn record_workshop(&self, record: &TaskRecord, prepared: &Prepared, base: Option<&str>) {
        let mut pause = Duration::from_millis(100);
        while let Err(e) =
            self.store.set_workshop(&record.id, prepared).and_then(|()| self.store.settle_recut(&record.id, base))
        {
            warn!("recording the workshop failed, retrying in {} ms: {e}", pause.as_millis());
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
        }
        self.rewrite_task_doc(record, prepared);
    }

    /// task.json gets the frozen base and the agent's directory, which the
    /// agent reads. A failure is logged and said in the task's directory:
    /// the agent then reads the workspace it was given at delegation.
    fn rewrite_task_doc(&self, record: &TaskRecord, prepared: &Prepared) {
        if prepared.isolation != Isolation::Worktree {
            return;
        }
        let path = TaskDir::new(&record.task_dir).task_json();
        let rewritten = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<TaskDoc>(&b).map_err(|e| e.to_string()))
            .and_then(|mut doc| {
                doc.base_ref = prepared.base_ref.clone();
                doc.workspace = prepared.workdir.display().to_string();
                serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())
            })
            .and_then(|bytes| crate::safe_fs::write_atomic(&path, &bytes).map_err(|e| e.to_string()));
        if let Err(e) = rewritten {
            warn!(task_id = %record.id, "cannot update {} with the worktree: {e}", path.display());
        }
    }

    /// Cancels a task that is preparing: setup's group is killed and what
    /// was made removed. Waits until that is done; false when the task was
    /// not preparing.
    pub(super) async fn cancel_preparation(&self, id: &str) -> bool {
        let Some(flight) = self.preparing.flight(id) else { return false };
        flight.cancel.store(true, Ordering::SeqCst);
        let mut done = flight.done.subscribe();
        let limit = Duration::from_millis(self.settings.grace_ms) + Duration::from_secs(10);
        if tokio::time::timeout(limit, done.wait_for(|d| *d)).await.is_err() {
            warn!(task_id = %id, "its preparation did not stop within {} s", limit.as_secs());
        }
        true
    }

    /// The workshop of a task at its start: the recorded one (a worktree
    /// made by [`Engine::spawn_preparation`]), or the inplace one made now
    /// (its snapshot, unless the kernel keeps the task out of the tree),
    /// recorded before the agent runs and put in `record`. Returns the
    /// agent's directory.
    pub(super) async fn prepare_at_start(&self, record: &mut TaskRecord) -> std::result::Result<PathBuf, String> {
        if let Some(prepared) = &record.workshop {
            // Prepared before a restart: the kernel's word, taken then instead of
            // a snapshot, must still hold (a reboot into a kernel without Landlock).
            let root = prepared.repo_root.as_deref().unwrap_or(&prepared.workspace);
            if prepared.kernel_read_only
                && !super::boxing::unwritable(&self.paths, record).iter().any(|u| root.starts_with(u))
            {
                return Err(format!(
                    "the box no longer keeps this read-only task out of {} as it did when the task was prepared, \
                     so nothing could tell what it changed: delegate it again",
                    root.display()
                ));
            }
            return Ok(prepared.workdir.clone());
        }
        if record.launch.prepares_worktree() {
            return Err("the task's worktree was never prepared".to_owned());
        }
        if record.launch.plan.is_none() {
            return Ok(PathBuf::from(&record.workspace));
        }
        let input = record.clone();
        let unwritable = super::boxing::unwritable(&self.paths, record);
        let prepared = tokio::task::spawn_blocking(move || prepare_blocking(&input, None, None, None, &unwritable))
            .await
            .map_err(|e| e.to_string())??;
        self.store.set_workshop(&record.id, &prepared).map_err(|e| e.to_string())?;
        let workdir = prepared.workdir.clone();
        record.workshop = Some(prepared);
        Ok(workdir)
    }

    /// Ends a task cancelled before its agent ever ran.
    pub(super) fn end_cancelled_unstarted(&self, record: &TaskRecord) {
        let report = crate::report::unstarted(&record.id, crate::report::Ending::Cancelled);
        if let Err(e) = self.finish_task(record, Exit::without_process(TaskStatus::Cancelled, None), report, None) {
            warn!(task_id = %record.id, "could not record the cancel: {e}");
        }
    }
}

fn prepare_blocking(
    record: &TaskRecord,
    cancel: Option<&AtomicBool>,
    launcher: Option<&crate::supervisor::boxed::Launcher>,
    base: Option<&str>,
    unwritable: &[PathBuf],
) -> std::result::Result<Prepared, String> {
    let Some(plan) = &record.launch.plan else {
        return Err("the task has no workshop plan".to_owned());
    };
    workshop::prepare(&workshop::PrepareInput {
        workspace: std::path::Path::new(&record.workspace),
        task_id: &record.id,
        label: &plan.label,
        objective: &record.objective,
        isolation: plan.isolation,
        mode: record.mode,
        allow_inplace_write: plan.allow_inplace_write,
        config: &plan.worktree,
        setup_timeout: Some(SETUP_TIMEOUT),
        cancel,
        own_git_dir: record.launch.kube.is_none(),
        scratch: Some(&crate::task_dir::TaskDir::new(&record.task_dir).daemon_part()),
        launcher,
        base,
        unwritable,
    })
    .and_then(|p| match (&plan.start_tree, &plan.start_base) {
        // A fork's worktree holds its source's files at the point it was forked from.
        (Some(tree), Some(base)) => match workshop::checkpoints::seed(&p, base, tree) {
            Ok(()) => Ok(p),
            Err(e) => {
                let _ = workshop::remove(&p, true);
                Err(e)
            }
        },
        _ => Ok(p),
    })
    .map_err(|e| e.to_string())
}

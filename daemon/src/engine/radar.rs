//! The conflict radar's engine side (issue 17): a background refresh that
//! keeps the footprint of every watched worktree task (live, or finished
//! and neither applied nor discarded) and of the user's uncommitted changes
//! up to date, so that `Status`, `Await`, `Diff`, `Apply` and a group's
//! summary read a cached answer with its age and never snapshot a tree on
//! the caller's path.
//!
//! What makes a footprint due: a task's `file_changed` event or its end
//! ([`Radar::touch`]), a change of the user's HEAD or index, and, as a
//! backstop for edits no event names (a shell command's), its age passing
//! 750 ms while the task's output grew (or `CAESAR_RADAR_RESCAN_MS`, default
//! 3 s, if shorter; ten times that when it did not), so that with the tick
//! the footprint of a task whose output grew is at most about 1 s old (issue
//! 33 item 5). An answer's age also counts the user's tree: rescanned on a
//! change of HEAD or the index, every 750 ms while a live task of its
//! repository has output that grew, else every rescan period. A refresh diffs only what moved since the last one
//! ([`radar::task_footprint`]). One task is refreshed at most
//! every `CAESAR_RADAR_MS` (default 250 ms), the loop's tick; a finished
//! task's footprint is computed once. Refreshes run one at a time on a
//! blocking thread, so the radar costs at most one snapshot at a time.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::error::Result;
use crate::oacp::{Isolation, Mode};
use crate::store::{TaskRecord, TaskStatus};
use crate::workshop::radar::{self, Footprint, Meeting};

use crate::store::Store;

/// The task id the user's uncommitted changes go by in the radar.
pub const UNCOMMITTED: &str = "uncommitted";
/// The most finished tasks the radar looks back over.
const RADAR_LOOKBACK: u32 = 500;
/// The loop's tick and the shortest pause between two refreshes of one
/// task, unless `CAESAR_RADAR_MS` says otherwise.
const DEFAULT_TICK_MS: u64 = 250;
/// How old a live footprint may grow with no event, unless
/// `CAESAR_RADAR_RESCAN_MS` says otherwise.
const DEFAULT_RESCAN_MS: u64 = 3_000;
/// How old a live footprint may grow while its task's output grows (or the
/// rescan period, if shorter): with the tick, answers at most about 1 s old.
const GROWN_MS: u64 = 750;
/// A live task with no new output is rescanned only after this many rescan
/// periods (its edits come with output: a tool call's events).
const IDLE_RESCANS: u32 = 10;

/// One task's footprint, as the radar last read it.
#[derive(Debug, Clone)]
struct TaskEntry {
    at: Instant,
    /// The task had ended: its footprint is final.
    finished: bool,
    /// The repository the task's worktree belongs to.
    root: PathBuf,
    /// The task's stored event count and log offset when it was read: a
    /// live task that has said nothing since is not rescanned.
    progress: (u64, u64),
    fp: Arc<Footprint>,
}

/// What says the user's tree may have changed without a scan: HEAD's
/// commit and the index's modification time.
type Stamp = (Option<String>, Option<SystemTime>);

/// The user's uncommitted changes in one repository.
#[derive(Debug, Clone)]
struct UserEntry {
    at: Instant,
    stamp: Stamp,
    fp: Arc<Footprint>,
}

#[derive(Debug, Default)]
struct State {
    tasks: HashMap<String, TaskEntry>,
    users: HashMap<PathBuf, UserEntry>,
    /// Tasks whose footprint an event made stale.
    dirty: HashSet<String>,
}

/// The conflict radar: a service of the engine with its footprint cache
/// and the background loop's controls as its own state.
#[derive(Debug)]
pub struct Radar {
    store: Arc<Store>,
    state: Mutex<State>,
    wake: Arc<Notify>,
    started: AtomicBool,
    tick: Duration,
    rescan: Duration,
}

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(default))
}

impl Radar {
    pub(super) fn new(store: Arc<Store>) -> Radar {
        Radar {
            store,
            state: Mutex::default(),
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
            tick: env_ms("CAESAR_RADAR_MS", DEFAULT_TICK_MS),
            rescan: env_ms("CAESAR_RADAR_RESCAN_MS", DEFAULT_RESCAN_MS),
        }
    }
}

impl Radar {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one background round did (logged, and read by `caesar-bench --radar`).
#[derive(Debug, Default, Clone, Copy)]
pub struct RadarRound {
    /// Task footprints recomputed.
    pub tasks: usize,
    /// Users' trees rescanned.
    pub user_trees: usize,
    /// The round's wall time.
    pub elapsed: Duration,
}

/// A task's overlaps, as the radar last saw them.
#[derive(Debug, Clone, Default)]
pub struct RadarView {
    /// Who this task's changes meet, by task id (or [`UNCOMMITTED`]).
    pub overlaps: Vec<(String, Meeting)>,
    /// The age of the oldest live footprint compared (a finished task's is
    /// final, however old); `None` before the radar has read this task.
    pub age: Option<Duration>,
}

fn worktree_of(t: &TaskRecord) -> Option<&crate::workshop::Prepared> {
    t.workshop.as_ref().filter(|p| p.isolation == Isolation::Worktree)
}

/// HEAD's commit and the index's mtime of the repository at `root`.
fn stamp(root: &Path) -> Stamp {
    let Ok(repo) = git2::Repository::open(root) else { return (None, None) };
    let head = repo.head().ok().and_then(|h| h.target()).map(|o| o.to_string());
    let index = std::fs::metadata(repo.path().join("index")).and_then(|m| m.modified()).ok();
    (head, index)
}

/// One footprint refreshed (read by `caesar-bench --radar`).
fn log_refresh(of: &str, started: Instant) {
    tracing::debug!(target: "caesar::radar", of, us = started.elapsed().as_micros() as u64, "radar refresh");
}

/// Whether a live task's footprint of age `age` is due: an event named a
/// change (`dirty`) and a tick passed, its output grew (`moved`) and 750 ms
/// (or the rescan period, if shorter) passed, or ten rescan periods passed.
fn live_due(age: Duration, dirty: bool, moved: bool, (tick, rescan): (Duration, Duration)) -> bool {
    (dirty && age >= tick)
        || (moved && age >= rescan.min(Duration::from_millis(GROWN_MS)))
        || age >= rescan * IDLE_RESCANS
}

impl Radar {
    /// Starts the background radar (once per engine).
    pub(super) fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(self);
        let (wake, tick) = (self.wake.clone(), self.tick);
        tokio::spawn(async move {
            loop {
                let Some(radar) = weak.upgrade() else { break };
                let round = tokio::task::spawn_blocking(move || radar.round()).await.unwrap_or_default();
                if round.tasks + round.user_trees > 0 {
                    tracing::trace!(
                        target: "caesar::radar",
                        tasks = round.tasks,
                        user_trees = round.user_trees,
                        us = round.elapsed.as_micros() as u64,
                        "radar round"
                    );
                }
                tokio::select! {
                    _ = wake.notified() => tokio::time::sleep(tick.min(Duration::from_millis(50))).await,
                    _ = tokio::time::sleep(tick) => {}
                }
            }
        });
    }

    /// Marks a task's footprint stale (it changed a file, or it ended) and
    /// wakes the radar.
    pub(super) fn touch(&self, id: &str) {
        self.lock().dirty.insert(id.to_owned());
        self.wake.notify_one();
    }

    /// The worktree tasks the radar watches: live ones, and finished ones
    /// whose changes were neither applied nor discarded.
    fn watched(&self) -> Result<Vec<TaskRecord>> {
        let mut all = self.store.worktree_tasks(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)?;
        all.extend(self.store.worktree_tasks(
            &[TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled, TaskStatus::TimedOut],
            RADAR_LOOKBACK,
        )?);
        Ok(all
            .into_iter()
            .filter(|t| t.mode == Mode::Write || t.workshop.is_some())
            .filter(|t| t.changes_state.is_none())
            .filter(|t| worktree_of(t).is_some_and(|p| p.repo_root.is_some()))
            // A continued task's work is its continuation's (issue 31), not a second footprint.
            .filter(|t| !matches!(self.store.continued_by(&t.id), Ok(Some(_))))
            .filter(|t| !matches!(self.store.fallback_of(&t.id), Ok(Some(_))))
            .collect())
    }

    /// One background round: recomputes what is due, drops what is no
    /// longer watched.
    pub(super) fn round(&self) -> RadarRound {
        let started = Instant::now();
        let mut round = RadarRound::default();
        let Ok(watched) = self.watched() else { return round };
        let (tick, rescan) = (self.tick, self.rescan);
        let dirty: HashSet<String> = {
            let mut st = self.lock();
            let ids: HashSet<&str> = watched.iter().map(|t| t.id.as_str()).collect();
            st.tasks.retain(|k, _| ids.contains(k.as_str()));
            std::mem::take(&mut st.dirty).into_iter().filter(|d| ids.contains(d.as_str())).collect()
        };
        let mut still_dirty = Vec::new();
        let mut roots = BTreeSet::new();
        // Repositories with a live task whose output grew: their user's tree
        // is rescanned as often as such a task, so that no answer about it
        // is older than about 1 s (issue 33 item 5).
        let mut busy = BTreeSet::new();
        for t in &watched {
            let Some(p) = worktree_of(t) else { continue };
            let Some(root) = p.repo_root.clone() else { continue };
            roots.insert(root.clone());
            let finished = t.status.is_terminal();
            let known = self.lock().tasks.get(&t.id).cloned();
            let due = match &known {
                None => true,
                Some(k) if k.finished => false,
                Some(_) if finished => true,
                Some(k) => {
                    let moved = k.progress != (t.event_count, t.log_offset);
                    if moved {
                        busy.insert(root.clone());
                    }
                    live_due(k.at.elapsed(), dirty.contains(&t.id), moved, (tick, rescan))
                }
            };
            if !due {
                if dirty.contains(&t.id) && !known.as_ref().is_some_and(|k| k.finished) {
                    still_dirty.push(t.id.clone());
                }
                continue;
            }
            // A worktree still being prepared has no footprint yet: next round.
            let one = Instant::now();
            let Ok(fp) = radar::task_footprint(p, known.as_ref().map(|k| k.fp.as_ref())) else { continue };
            log_refresh(&t.id, one);
            round.tasks += 1;
            let progress = (t.event_count, t.log_offset);
            let entry = TaskEntry { at: Instant::now(), finished, root, progress, fp: Arc::new(fp) };
            let mut st = self.lock();
            // Applied or discarded meanwhile: `forget` removed it, and it stays out.
            if known.is_none() || st.tasks.contains_key(&t.id) {
                st.tasks.insert(t.id.clone(), entry);
            }
        }
        for root in &roots {
            let now = stamp(root);
            let known = self.lock().users.get(root).cloned();
            let period = if busy.contains(root) { rescan.min(Duration::from_millis(GROWN_MS)) } else { rescan };
            let due = match &known {
                None => true,
                Some(k) => k.at.elapsed() >= period || (k.stamp != now && k.at.elapsed() >= tick),
            };
            if !due {
                continue;
            }
            let one = Instant::now();
            if let Ok(fp) = radar::uncommitted_footprint(root, &[]) {
                log_refresh(UNCOMMITTED, one);
                round.user_trees += 1;
                self.lock().users.insert(root.clone(), UserEntry { at: Instant::now(), stamp: now, fp: Arc::new(fp) });
            }
        }
        let mut st = self.lock();
        st.users.retain(|r, _| roots.contains(r));
        st.dirty.extend(still_dirty);
        round.elapsed = started.elapsed();
        round
    }

    /// A task's cached footprint, if the radar has read it. A finished
    /// task whose final footprint the radar has not read yet (it ended a
    /// moment ago) is read now, once: a group's summary at its end is exact.
    pub(super) fn cached_footprint(&self, record: &TaskRecord) -> Option<Arc<Footprint>> {
        let known = self.lock().tasks.get(&record.id).cloned();
        if !record.status.is_terminal() || known.as_ref().is_some_and(|k| k.finished) || record.changes_state.is_some()
        {
            return known.map(|k| k.fp);
        }
        let p = worktree_of(record)?;
        let root = p.repo_root.clone()?;
        let fp = Arc::new(radar::task_footprint(p, known.as_ref().map(|k| k.fp.as_ref())).ok()?);
        let progress = (record.event_count, record.log_offset);
        let entry = TaskEntry { at: Instant::now(), finished: true, root, progress, fp: fp.clone() };
        self.lock().tasks.insert(record.id.clone(), entry);
        Some(fp)
    }

    /// Who this task's changes meet, from the radar's cache: other watched
    /// tasks of its repository, and the user's uncommitted changes (as
    /// [`UNCOMMITTED`]), with the answer's age. Never reads a tree.
    pub fn view(&self, id: &str) -> RadarView {
        let st = self.lock();
        let Some(mine) = st.tasks.get(id) else {
            drop(st);
            self.touch(id);
            return RadarView::default();
        };
        // A finished task's footprint is final: it never makes an answer old.
        let live = |e: &TaskEntry| if e.finished { Instant::now() } else { e.at };
        let mut oldest = live(mine);
        let mut overlaps = Vec::new();
        if !mine.fp.files.is_empty() {
            let mut others: Vec<(&String, &TaskEntry)> =
                st.tasks.iter().filter(|(o, e)| o.as_str() != id && e.root == mine.root).collect();
            others.sort_by(|a, b| a.0.cmp(b.0));
            for (other, e) in others {
                oldest = oldest.min(live(e));
                let m = radar::meet(&mine.fp, &e.fp);
                if !m.is_empty() {
                    overlaps.push((other.clone(), m));
                }
            }
            if let Some(user) = st.users.get(&mine.root) {
                oldest = oldest.min(user.at);
                let m = radar::meet(&mine.fp, &user.fp);
                if !m.is_empty() {
                    overlaps.push((UNCOMMITTED.to_owned(), m));
                }
            }
        }
        RadarView { overlaps, age: Some(oldest.elapsed()) }
    }

    /// Who this task's changes meet (see [`Radar::view`]).
    pub fn conflicts_with(&self, id: &str) -> Result<Vec<(String, Meeting)>> {
        Ok(self.view(id).overlaps)
    }

    /// The watched tasks whose later apply this task's apply would break:
    /// those changing the same lines (`hunk_paths`). The user's own
    /// uncommitted changes are left to apply's own conflict check.
    pub fn apply_would_break(&self, id: &str) -> Vec<(String, Meeting)> {
        self.view(id).overlaps.into_iter().filter(|(t, m)| t != UNCOMMITTED && !m.hunk_paths.is_empty()).collect()
    }

    /// Drops a task from the radar (applied or discarded).
    pub fn forget(&self, id: &str) {
        let mut st = self.lock();
        st.tasks.remove(id);
        st.dirty.remove(id);
        drop(st);
        // The user's tree changed with the apply: read it again soon.
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33 item 5: a task whose output grew is refreshed once its
    /// footprint is 750 ms old with the default periods, so that with the
    /// 250 ms tick an answer about it is at most about 1 s old; a quiet one
    /// waits for ten rescan periods.
    #[test]
    fn a_task_whose_output_grew_is_due_within_a_second() {
        let periods = (Duration::from_millis(DEFAULT_TICK_MS), Duration::from_millis(DEFAULT_RESCAN_MS));
        let ms = Duration::from_millis;
        assert!(!live_due(ms(700), false, true, periods));
        assert!(live_due(ms(750), false, true, periods));
        assert!(ms(750) + periods.0 <= ms(1_000), "a refresh at most a tick after it is due");
        assert!(!live_due(ms(29_000), false, false, periods), "no output, no event: not due");
        assert!(live_due(ms(30_000), false, false, periods));
        assert!(live_due(ms(250), true, false, periods), "an event naming a change: the next tick");
        // A shorter rescan period (a test's) still wins.
        assert!(live_due(ms(100), false, true, (ms(50), ms(100))));
    }
}

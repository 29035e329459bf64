//! Stacked tasks (issue 32): a task that builds on other tasks' results.
//!
//! A delegation with `depends_on` is checked here before anything is
//! written ([`ask_of`], [`Engine::check_stack`]: known ids, one repository,
//! at most [`MAX_PARENTS`] parents and [`MAX_GRAPH`] ancestors, no cycle),
//! then stored with its edges in one transaction (`store/deps.rs`),
//! `pending` in phase `waiting`: the queue skips it and it is not prepared.
//!
//! Waiting is event-driven. Every ending of a task ([`Engine::finish_task`])
//! wakes this room's loop with the task's id, and the loop examines the
//! task's waiting dependents, one at a time, so an ending and a sweep never
//! race over one child. When every parent has ended:
//!
//! - all succeeded (or `on_parent_failure = run`): the base is the results
//!   of the parents that succeeded merged (`workshop/stack.rs`), stored
//!   with the release, and the task is prepared on it like any worktree
//!   task; a conflict between parents fails it, naming the paths;
//! - a parent failed, timed out or was cancelled, under the default
//!   `on_parent_failure = cancel`: the task is cancelled, the error naming
//!   the parent and how it ended; its own dependents follow, since its end
//!   wakes the loop in turn.
//!
//! After a restart, recovery leaves waiting tasks alone and sends one sweep
//! once the queue may start tasks: what ended while no daemon ran is
//! examined then. A release is a compare-and-set in the store, so a task is
//! released (and prepared, and started) once.
//!
//! `caesar apply` of a task before the parents its base holds are applied is
//! refused naming them ([`check_apply`]); applied after them, it applies only
//! its own changes, since its diff is against its stacked base.
//!
//! When a parent's result moves later (it was continued), [`Engine::parent_moved`]
//! decides, under the queue's turn (the lock a start is chosen under), what
//! becomes of each dependent ([`on_parent_moved`]): those still waiting take
//! the new result when they are released, since the base is read then; those
//! released whose agent has not started (preparing, or prepared and queued)
//! are put back to waiting with a durable re-cut mark in one store
//! transaction, so the queue holds them, they are released on the merged new
//! results (a conflict fails them, as at their first release) and prepared
//! again (a preparation in flight runs once more, `prepare.rs`); those whose
//! agent started are flagged `stale`. A daemon killed after the decision
//! finds the task waiting, or released with its mark, and prepares it again.

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tracing::{Instrument, info, info_span, warn};

use crate::error::{Error, Result};
use crate::oacp::{Finding, Isolation, Severity};
use crate::report::{self, Ending};
use crate::store::{ChangesState, StackState, Store, TaskRecord, TaskStatus};
use crate::workshop;

use super::*;

/// The most parents one task names.
pub const MAX_PARENTS: usize = 16;
/// The most tasks a stack reaches below a new task (its ancestors): a
/// longer chain is refused at delegation rather than walked at every end.
pub const MAX_GRAPH: usize = 256;

/// What a parent's failure does to its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnParentFailure {
    /// The dependent is cancelled (the default).
    Cancel,
    /// The dependent runs on what the other parents made.
    Run,
}

impl OnParentFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnParentFailure::Cancel => "cancel",
            OnParentFailure::Run => "run",
        }
    }
}

/// The stack a delegation asks for, its ids checked for form.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Distinct, in the order named.
    pub parents: Vec<String>,
    pub on_parent_failure: OnParentFailure,
}

/// Reads `depends_on` and `on_parent_failure` of a request; `None` without
/// parents. Refuses what no store lookup is needed to refuse.
pub fn ask_of(input: &DelegateInput) -> Result<Option<Ask>> {
    let policy = match input.on_parent_failure.as_deref().map(str::trim) {
        None | Some("") | Some("cancel") => OnParentFailure::Cancel,
        Some("run") => OnParentFailure::Run,
        Some(other) => {
            return Err(Error::Invalid(format!(
                "`on_parent_failure` is `{other}`: use `cancel` (the default) or `run`"
            )));
        }
    };
    if input.depends_on.is_empty() {
        if input.on_parent_failure.as_deref().is_some_and(|p| !p.trim().is_empty()) {
            return Err(Error::Invalid(
                "`on_parent_failure` without `depends_on`: name the tasks this one builds on, or drop it".to_owned(),
            ));
        }
        return Ok(None);
    }
    let mut parents: Vec<String> = Vec::new();
    for id in &input.depends_on {
        let id = id.trim();
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(Error::Invalid(format!(
                "`depends_on` names `{}`, which is not a task id: use the ids caesar_delegate returned (t_…)",
                id.chars().take(80).collect::<String>()
            )));
        }
        if !parents.iter().any(|p| p == id) {
            parents.push(id.to_owned());
        }
    }
    if parents.len() > MAX_PARENTS {
        return Err(Error::Invalid(format!(
            "`depends_on` names {} tasks, more than {MAX_PARENTS}: stack them (make a task that builds on some, and depend on it)",
            parents.len()
        )));
    }
    Ok(Some(Ask { parents, on_parent_failure: policy }))
}

/// Checks the graph below a new task: no cycle through `child` (possible
/// only when an id is reused) and at most [`MAX_GRAPH`] ancestors.
/// `parents_of` reads a task's parents.
pub fn check_graph(
    child: Option<&str>,
    parents: &[String],
    mut parents_of: impl FnMut(&str) -> Result<Vec<String>>,
) -> Result<()> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut todo: VecDeque<String> = parents.iter().cloned().collect();
    while let Some(id) = todo.pop_front() {
        if child == Some(id.as_str()) {
            return Err(Error::Invalid(format!(
                "`depends_on` makes a cycle: task {id} would depend on itself through its parents; name only tasks that do not build on it"
            )));
        }
        if !seen.insert(id.clone()) {
            continue;
        }
        if seen.len() > MAX_GRAPH {
            return Err(Error::Invalid(format!(
                "`depends_on` reaches more than {MAX_GRAPH} tasks below this one: a stack that deep is refused; \
                 apply some of it and delegate on the result instead"
            )));
        }
        todo.extend(parents_of(&id)?);
    }
    Ok(())
}

/// The repository root of a directory, as git finds it, canonical.
fn repo_of(dir: &Path) -> Option<std::path::PathBuf> {
    let root = workshop::facts(dir).root?;
    Some(root.canonicalize().unwrap_or(root))
}

/// The commit a stacked task's worktree is made from, once released.
pub fn base_of(store: &Store, id: &str) -> Option<String> {
    store.stack_of(id).ok().flatten().filter(|s| s.state == StackState::Released).and_then(|s| s.base)
}

/// Refuses to apply a task whose base holds parents' results that are not
/// applied yet, naming them.
pub fn check_apply(store: &Store, id: &str) -> Result<()> {
    let Some(row) = store.stack_of(id)? else { return Ok(()) };
    let mut unapplied = Vec::new();
    for parent in &row.merged {
        let Some(p) = store.task(parent)? else { continue };
        let worktree = p.workshop.as_ref().is_some_and(|w| w.isolation == Isolation::Worktree);
        match p.changes_state {
            Some(ChangesState::Applied) => {}
            Some(ChangesState::Discarded) if worktree => {
                return Err(Error::Precondition(format!(
                    "task {id} builds on task {parent}, whose changes were discarded: {id}'s diff assumes them; \
                     discard {id} too, or bring {parent}'s changes in by hand first"
                )));
            }
            _ if worktree => unapplied.push(parent.clone()),
            _ => {}
        }
    }
    if unapplied.is_empty() {
        return Ok(());
    }
    Err(Error::Precondition(format!(
        "task {id} builds on {}, not applied yet: apply {} first (in that order), or `caesar apply --chain {id}`",
        unapplied.iter().map(|p| format!("task {p}")).collect::<Vec<_>>().join(" and "),
        unapplied.join(", then ")
    )))
}

/// What wakes the loop.
enum Wake {
    /// A task ended: its waiting dependents are examined.
    Ended(String),
    /// A task was just stored waiting: its parents may all have ended.
    Examine(String),
    /// Every waiting task (after recovery).
    Sweep,
}

/// The room's own state: the loop's channel.
pub(super) struct Stacking {
    tx: mpsc::UnboundedSender<Wake>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Wake>>>,
}

impl Default for Stacking {
    fn default() -> Stacking {
        let (tx, rx) = mpsc::unbounded_channel();
        Stacking { tx, rx: Mutex::new(Some(rx)) }
    }
}

impl Stacking {
    /// A task ended (its ending is stored).
    pub(super) fn ended(&self, id: &str) {
        let _ = self.tx.send(Wake::Ended(id.to_owned()));
    }

    fn examine(&self, id: &str) {
        let _ = self.tx.send(Wake::Examine(id.to_owned()));
    }

    pub(super) fn sweep(&self) {
        let _ = self.tx.send(Wake::Sweep);
    }
}

/// What became of a dependent when its parent's result moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// Still waiting: it takes the new result when it is released.
    TakesNew(String),
    /// Released, but its agent had not started: put back to waiting, it is
    /// released on the new result and its worktree made again.
    Rebased(String),
    /// Its agent started on the old result (or it ended): flagged stale.
    Stale(String),
}

/// What a moved parent does to one dependent, from where its stack stands
/// and whether its agent has started (`started`: it has a run, is being
/// started, or is no longer pending).
pub fn on_parent_moved(child: &str, state: StackState, started: bool) -> Option<Moved> {
    match state {
        StackState::Waiting => Some(Moved::TakesNew(child.to_owned())),
        StackState::Released if started => Some(Moved::Stale(child.to_owned())),
        StackState::Released => Some(Moved::Rebased(child.to_owned())),
        StackState::Ended => None,
    }
}

impl Engine {
    /// Checks a delegation's stack against the store: every parent known and
    /// in the same repository as `workspace`, and the graph below bounded and
    /// without a cycle. `child` is the id chosen ahead (a fallback's). A
    /// task delegating (`delegator`) builds only on itself and the tasks it
    /// delegated: another task's result is out of its reach.
    pub(super) fn check_stack(
        &self,
        ask: &Ask,
        workspace: &Path,
        child: Option<&str>,
        delegator: Option<&TaskRecord>,
    ) -> Result<()> {
        let repo = repo_of(workspace);
        for id in &ask.parents {
            let Some(parent) = self.store.task(id)? else {
                return Err(Error::NotFound(format!(
                    "`depends_on` names task {id}, which caesar does not know: use the ids caesar_delegate returned \
                     (caesar_list shows them)"
                )));
            };
            if let Some(d) = delegator
                && !super::authority::reaches(d, &parent)
            {
                return Err(Error::Refused(format!(
                    "`depends_on` names task {id}, which task {} did not delegate: a task builds only on itself and \
                     the tasks it delegated",
                    d.id
                )));
            }
            let theirs = repo_of(Path::new(&parent.workspace));
            if theirs.is_none() || theirs != repo {
                return Err(Error::Invalid(format!(
                    "`depends_on` names task {id} of {}, another repository than this task's ({}): a task builds only \
                     on tasks of its own repository",
                    theirs.as_deref().unwrap_or(Path::new(&parent.workspace)).display(),
                    repo.as_deref().unwrap_or(workspace).display()
                )));
            }
        }
        check_graph(child, &ask.parents, |id| self.store.parents_of(id))
    }

    /// Stores a staged task with its stack, refusing one that would not run
    /// in a worktree (its parents' results reach it only there).
    pub(super) fn store_stacked(&self, record: &TaskRecord, ask: &Ask) -> Result<()> {
        if !record.launch.prepares_worktree() {
            return Err(Error::Invalid(format!(
                "a task with `depends_on` starts on its parents' results, in a worktree, but this one would run in \
                 place ({} mode): use mode \"write\" or isolation \"worktree\"",
                record.mode.as_str()
            )));
        }
        self.store.insert_stacked(record, &ask.parents, ask.on_parent_failure.as_str())
    }

    /// Whether a task waits for its parents (true when the store cannot
    /// say: a waiting task prepared on the wrong base is worse than a
    /// preparation put off to the sweep).
    pub(super) fn stack_waits(&self, id: &str) -> bool {
        match self.store.stack_of(id) {
            Ok(row) => row.is_some_and(|s| s.state == StackState::Waiting),
            Err(e) => {
                warn!(task_id = %id, "cannot read the task's stack, leaving it unprepared: {e}");
                true
            }
        }
    }

    /// Whether a pending worktree task must be prepared (again) now: never
    /// prepared, or marked to be made again on a moved parent's result,
    /// and not waiting for its parents.
    pub(super) fn needs_preparation(&self, record: &TaskRecord) -> bool {
        record.launch.prepares_worktree()
            && (record.workshop.is_none() || self.store.recut_pending(&record.id).unwrap_or(true))
            && !self.stack_waits(&record.id)
    }

    /// After a stacked task is stored: its parents may all have ended.
    pub(super) fn stacked_stored(&self, id: &str) {
        self.stacking.examine(id);
    }

    /// Starts the loop that examines waiting tasks (once; from recovery).
    pub(super) fn start_stacking(self: &Arc<Self>) {
        let Some(mut rx) = self.stacking.rx.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let weak = Arc::downgrade(self);
        tokio::spawn(
            async move {
                while let Some(wake) = rx.recv().await {
                    let Some(engine) = weak.upgrade() else { break };
                    // Before recovery is done, the sweep that follows it covers every task.
                    if !engine.queue.recovered.load(std::sync::atomic::Ordering::SeqCst) {
                        continue;
                    }
                    let children = match wake {
                        Wake::Ended(parent) => engine.lineage_moved(&parent).await.and_then(|mut moved| {
                            engine.store.dependents_of(&parent).map(|d| {
                                moved.extend(d.into_iter().filter(|(_, s)| *s == StackState::Waiting).map(|(c, _)| c));
                                moved
                            })
                        }),
                        Wake::Examine(child) => Ok(vec![child]),
                        Wake::Sweep => engine.store.waiting_stacked(),
                    };
                    match children {
                        Ok(children) => {
                            for child in children {
                                if let Err(e) = engine.examine(&child).await {
                                    warn!(task_id = %child, "examining the task's parents failed: {e}");
                                }
                            }
                        }
                        Err(e) => warn!("reading the waiting tasks failed: {e}"),
                    }
                }
            }
            .instrument(info_span!("stacking")),
        );
    }

    /// A waiting task whose parents may all have ended: released on their
    /// merged results, or ended by their failure or their conflict.
    async fn examine(self: &Arc<Self>, child: &str) -> Result<()> {
        let Some(record) = self.store.task(child)?.filter(|r| r.status == TaskStatus::Pending && !r.cancel_requested)
        else {
            return Ok(());
        };
        let Some(row) = self.store.stack_of(child)?.filter(|s| s.state == StackState::Waiting) else { return Ok(()) };
        let mut succeeded = Vec::new();
        let mut failed = Vec::new();
        for id in &row.parents {
            // A parent that fell back goes on as its current attempt.
            let (head, _) = super::fallback::head_of(&self.store, id);
            // A parent continued since (issue 31) gives its newest result.
            let Some(head) = self.newest_result(&head)? else { return Ok(()) };
            match self.store.task(&head)? {
                Some(p) if !p.status.is_terminal() => return Ok(()),
                Some(p) if p.status == TaskStatus::Succeeded => succeeded.push(head),
                Some(p) => failed.push(format!("{id} {}", p.status.as_str())),
                None => failed.push(format!("{id} is gone")),
            }
        }
        if !failed.is_empty() && row.on_parent_failure == OnParentFailure::Cancel.as_str() {
            if self.store.end_stacked(child)? {
                let why = format!(
                    "cancelled before it started: its parent {} (on_parent_failure = cancel); delegate it again, or \
                     with on_parent_failure = run to build on what the other parents made",
                    failed.join(", parent ")
                );
                info!(task_id = %child, "{why}");
                let mut report = report::unstarted(child, Ending::Cancelled);
                report.0.findings.push(Finding {
                    severity: Severity::Medium,
                    title: "a parent task did not succeed".to_owned(),
                    file: None,
                    line: None,
                    detail: why.clone(),
                });
                self.finish_task(&record, Exit::without_process(TaskStatus::Cancelled, Some(why)), report, None)?;
            }
            return Ok(());
        }
        let root = repo_of(Path::new(&record.workspace)).unwrap_or_else(|| record.workspace.clone().into());
        let id = child.to_owned();
        let merged = tokio::task::spawn_blocking(move || workshop::stack::merged_base(&root, &id, &succeeded))
            .await
            .map_err(|e| Error::Internal(format!("merging the parents' results panicked: {e}")))?;
        match merged {
            Ok((base, merged)) => {
                let base = base.map(|b| b.to_string());
                if self.store.release_stacked(child, base.as_deref(), &merged)? {
                    info!(task_id = %child, base = base.as_deref().unwrap_or("HEAD"), "its parents ended: released");
                    self.spawn_preparation(record);
                }
            }
            Err(e) => {
                if self.store.end_stacked(child)? {
                    self.fail_unstarted(&record, &e.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// A parent's result moved (it was continued or relayed, and its end
    /// ref now names `commit`): see [`parent_moved`]. Decided under the
    /// queue's turn, so no dependent is chosen to start meanwhile: one not
    /// being started, pending and without a run is rebased before the
    /// queue may look at it again, and one the queue chose is stale.
    pub async fn parent_moved(&self, parent: &str, commit: &str) -> Result<Vec<Moved>> {
        let moved = {
            let _turn = self.queue.turn.lock().await;
            let started = |child: &str| -> Result<bool> {
                if self.queue.is_starting(child) {
                    return Ok(true);
                }
                Ok(self.store.task(child)?.is_none_or(|t| t.status != TaskStatus::Pending || t.run.is_some()))
            };
            parent_moved(&self.store, parent, commit, started)?
        };
        for m in &moved {
            match m {
                Moved::Stale(c) => self.runs.pulse(c),
                Moved::Rebased(c) => {
                    info!(task_id = %c, parent, "its parent's result moved before it started: rebased")
                }
                Moved::TakesNew(_) => {}
            }
        }
        Ok(moved)
    }
}

impl Engine {
    /// The task whose result stands for `id`'s lineage (issue 31): the
    /// newest link that ended succeeded, following `continued_by`; `None`
    /// while a newer link still runs (the dependents wait for it).
    fn newest_result(&self, id: &str) -> Result<Option<String>> {
        let mut newest = id.to_owned();
        while let Some(next) = self.store.continued_by(&newest)? {
            match self.store.task(&next)? {
                Some(t) if !t.status.is_terminal() => return Ok(None),
                Some(t) if t.status == TaskStatus::Succeeded => newest = next,
                _ => break,
            }
        }
        Ok(Some(newest))
    }

    /// `id` ended: if it continues earlier tasks (issue 31) and succeeded,
    /// their lineage's result moved to its end commit. The dependents of
    /// each earlier link that took the old result are flagged stale; those
    /// still waiting are returned, to be examined (they take the new one).
    async fn lineage_moved(&self, id: &str) -> Result<Vec<String>> {
        let Some(task) = self.store.task(id)?.filter(|t| t.status == TaskStatus::Succeeded) else {
            return Ok(Vec::new());
        };
        let Some(commit) = end_commit(Path::new(&task.workspace), id) else { return Ok(Vec::new()) };
        let mut waiting = Vec::new();
        let mut link = id.to_owned();
        while let Some(source) = self.store.continues(&link)? {
            for moved in self.parent_moved(&source, &commit).await? {
                if let Moved::TakesNew(child) | Moved::Rebased(child) = moved {
                    waiting.push(child);
                }
            }
            link = source;
        }
        Ok(waiting)
    }
}

/// The commit of a task's result (`workshop::end_ref`) in the repository
/// of `workspace`.
fn end_commit(workspace: &Path, id: &str) -> Option<String> {
    let repo = git2::Repository::open(repo_of(workspace)?).ok()?;
    let end = repo.find_reference(&workshop::end_ref(id)).ok()?.peel_to_commit().ok()?;
    Some(end.id().to_string())
}

/// A parent's result moved to `commit`: its dependents still waiting take
/// the new result when they are released (their base is read then); those
/// released whose agent has not started (`started` says) are put back to
/// waiting with their re-cut marked ([`Store::rebase_stacked`]); those that
/// started on the old one are flagged `stale` (`<parent> <commit>`) in the
/// store. Returns what became of each.
pub fn parent_moved(
    store: &Store,
    parent: &str,
    commit: &str,
    mut started: impl FnMut(&str) -> Result<bool>,
) -> Result<Vec<Moved>> {
    let mut out = Vec::new();
    for (child, state) in store.dependents_of(parent)? {
        let begun = state == StackState::Released && started(&child)?;
        let Some(mut moved) = on_parent_moved(&child, state, begun) else { continue };
        // The store's compare-and-set has the last word: not pending, or
        // with a run, it started.
        if let Moved::Rebased(c) = &moved
            && !store.rebase_stacked(c)?
        {
            moved = Moved::Stale(c.clone());
        }
        if let Moved::Stale(c) = &moved {
            store.set_stack_stale(c, &format!("{parent} {commit}"))?;
        }
        out.push(moved);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn input(deps: &[&str], policy: Option<&str>) -> DelegateInput {
        DelegateInput {
            depends_on: deps.iter().map(|s| s.to_string()).collect(),
            on_parent_failure: policy.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn a_stack_request_is_read_and_bad_ones_are_refused_by_name() {
        assert_eq!(ask_of(&input(&[], None)).unwrap(), None);
        let a = ask_of(&input(&["t_a", "t_b", "t_a"], Some("run"))).unwrap().unwrap();
        assert_eq!(a.parents, ["t_a", "t_b"], "a repeated id counts once");
        assert_eq!(a.on_parent_failure, OnParentFailure::Run);
        let err = |i: DelegateInput| ask_of(&i).unwrap_err().to_string();
        assert!(err(input(&["t_a"], Some("retry"))).contains("use `cancel` (the default) or `run`"));
        assert!(err(input(&[], Some("run"))).contains("without `depends_on`"));
        assert!(err(input(&["../x"], None)).contains("`../x`, which is not a task id"));
        let many: Vec<String> = (0..=MAX_PARENTS).map(|i| format!("t_{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(err(input(&many, None)).contains(&format!("more than {MAX_PARENTS}")));
    }

    #[test]
    fn a_cycle_and_a_graph_of_a_thousand_tasks_are_refused() {
        // A chain t_0 <- t_1 <- ... <- t_999.
        let edges: HashMap<String, Vec<String>> =
            (1..1000).map(|i| (format!("t_{i}"), vec![format!("t_{}", i - 1)])).collect();
        let lookup = |id: &str| Ok(edges.get(id).cloned().unwrap_or_default());
        assert!(check_graph(Some("t_new"), &["t_10".to_owned()], lookup).is_ok(), "a short stack");
        let e = check_graph(Some("t_new"), &["t_999".to_owned()], lookup).unwrap_err().to_string();
        assert!(e.contains(&format!("more than {MAX_GRAPH} tasks")), "{e}");
        let e = check_graph(Some("t_3"), &["t_7".to_owned()], lookup).unwrap_err().to_string();
        assert!(e.contains("makes a cycle: task t_3"), "{e}");
        // A diamond is no cycle: each task counts once.
        let diamond: HashMap<&str, Vec<String>> =
            HashMap::from([("t_b", vec!["t_a".to_owned()]), ("t_c", vec!["t_a".to_owned()])]);
        let lookup = |id: &str| Ok(diamond.get(id).cloned().unwrap_or_default());
        assert!(check_graph(Some("t_d"), &["t_b".to_owned(), "t_c".to_owned()], lookup).is_ok());
    }

    #[test]
    fn a_moved_parent_stales_what_took_its_result_and_not_what_waits() {
        for started in [false, true] {
            assert_eq!(on_parent_moved("t_w", StackState::Waiting, started), Some(Moved::TakesNew("t_w".into())));
            assert_eq!(on_parent_moved("t_e", StackState::Ended, started), None);
        }
        assert_eq!(on_parent_moved("t_r", StackState::Released, true), Some(Moved::Stale("t_r".into())));
        assert_eq!(
            on_parent_moved("t_q", StackState::Released, false),
            Some(Moved::Rebased("t_q".into())),
            "released but not started: it takes the new result"
        );
    }

    #[test]
    fn parent_moved_flags_the_released_dependents_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        for (child, parents) in [("t_r", vec!["t_p"]), ("t_w", vec!["t_p", "t_q"])] {
            let parents: Vec<String> = parents.into_iter().map(str::to_owned).collect();
            store.insert_stacked(&crate::store::tests::sample(child), &parents, "cancel").unwrap();
        }
        store.release_stacked("t_r", Some("0123"), &["t_p".to_owned()]).unwrap();
        let moved = parent_moved(&store, "t_p", "4567", |_| Ok(true)).unwrap();
        assert_eq!(moved, [Moved::Stale("t_r".into()), Moved::TakesNew("t_w".into())]);
        assert_eq!(store.stack_of("t_r").unwrap().unwrap().stale.as_deref(), Some("t_p 4567"));
        assert_eq!(store.stack_of("t_w").unwrap().unwrap().stale, None, "a waiting task is not stale");
        assert!(parent_moved(&store, "t_q", "89ab", |_| Ok(false)).unwrap() == [Moved::TakesNew("t_w".into())]);
    }

    #[test]
    fn parent_moved_rebases_the_released_dependents_that_did_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("caesar.db")).unwrap();
        store.insert_stacked(&crate::store::tests::sample("t_q"), &["t_p".to_owned()], "cancel").unwrap();
        store.release_stacked("t_q", Some("0123"), &["t_p".to_owned()]).unwrap();
        let moved = parent_moved(&store, "t_p", "4567", |_| Ok(false)).unwrap();
        assert_eq!(moved, [Moved::Rebased("t_q".into())]);
        let row = store.stack_of("t_q").unwrap().unwrap();
        assert_eq!((row.state, row.base, row.stale), (StackState::Waiting, None, None), "waiting again, not stale");
        assert!(store.recut_pending("t_q").unwrap());
        // Released again, then started: the next move stales it.
        store.release_stacked("t_q", Some("4567"), &["t_p".to_owned()]).unwrap();
        store.set_running("t_q", 1, &crate::runner::RunHandle::Local { pid: 1, start: None, boot: None }, &[]).unwrap();
        let moved = parent_moved(&store, "t_p", "89ab", |_| Ok(false)).unwrap();
        assert_eq!(moved, [Moved::Stale("t_q".into())], "the store's check has the last word");
        assert_eq!(store.stack_of("t_q").unwrap().unwrap().stale.as_deref(), Some("t_p 89ab"));
    }
}

//! The git workshop: where an agent works, and what git says it changed.
//!
//! "Git is the truth": an agent's declared changes are checked against a diff
//! that caesar takes itself. This module owns every git operation of a task:
//!
//! - [`prepare`] picks the isolation (`inplace`, `worktree`, `auto`), creates
//!   the worktree at `<repo>/.caesar/wt/<task>` on a branch
//!   `caesar/<label>/<slug>-<8 chars>` with `base_ref` frozen, with a git
//!   directory of its own beside it that borrows the repository's objects
//!   (`taskgit`: the repository's refs, config and hooks are out of the
//!   agent's reach), places the
//!   `[worktree]` `copy` and `link` paths and runs its `setup` commands. For an
//!   inplace task in a repository it snapshots the working tree first.
//! - [`diff`] compares the frozen base (or the inplace snapshot) with a
//!   snapshot of the tree the agent worked in: commits, untracked files,
//!   deletions, renames and binary files included, placed paths excluded.
//! - [`capture`] (at a task's end, through [`conclude`]) brings its commits
//!   and its worktree's tree into the repository, as its branch and
//!   [`end_ref`], which diff, apply, the radar and gc then read.
//! - [`reconcile`] sets a report's `changes` from that diff;
//!   [`read_only_violation`] turns a read-only task's diff into a finding.
//! - [`apply`] merges a worktree's changes into the main working tree (a
//!   3-way merge, all or nothing, never a commit, never a branch move).
//! - [`inspect`] and [`remove`] give gc its facts and its mechanism.
//!
//! A snapshot is a tree object of a working tree written through a temporary
//! index (a copy of the real one, or of the daemon's own index of a task's
//! worktree, so unchanged files are not re-hashed); the real index, HEAD and
//! branches are never touched by a snapshot, and a task's worktree is read
//! through the user's repository, never through its `.git`. Everything
//! here is blocking: call it from `spawn_blocking`.
//!
//! Nothing shells out to the `git` CLI: libgit2 covers worktrees, snapshots,
//! diffs and the 3-way merge ([`apply`] merges trees with `merge_trees` and
//! writes the result itself). Only `cp` (for reflinks) and `sh` (for the
//! project's setup commands) are run.

mod apply;
// Issue 31: the worktree at each file_changed event, for a fork.
pub mod checkpoints;
mod diff;
mod place;
pub mod radar;
pub(crate) mod refs;
mod snapshot;
pub mod stack;
mod taskgit;

use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::{BranchType, Oid, Repository, WorktreeAddOptions, WorktreePruneOptions};
use serde::{Deserialize, Serialize};

use crate::config::{IsolationPref, WorktreeSection};
use crate::oacp::{Finding, Isolation, Mode};

pub use apply::{ApplyResult, Conflict, apply};
pub use diff::{DiffResult, FileChange, commits_since_base, conclude, diff, read_only_violation, reconcile};
pub use place::kill_setups_of;
pub use taskgit::{capture, end_ref};

/// Where worktrees live, relative to the repository root.
pub const WORKTREES_DIR: &str = ".caesar/wt";
/// The line added to `.git/info/exclude` so worktrees never show as untracked.
const EXCLUDE_LINE: &str = "/.caesar/wt/";

/// What [`prepare`] needs to know about a task.
#[derive(Debug, Clone)]
pub struct PrepareInput<'a> {
    /// The directory the task names; may be a subdirectory of a repository.
    pub workspace: &'a Path,
    /// The task id; names the worktree directory. `[A-Za-z0-9_-]`, at most 64.
    pub task_id: &'a str,
    /// The role, or the agent when there is no role; the branch's middle part.
    pub label: &'a str,
    /// The objective; its first words make the branch's slug.
    pub objective: &'a str,
    pub isolation: IsolationPref,
    pub mode: Mode,
    pub allow_inplace_write: bool,
    /// `[worktree]` of the merged configuration. `copy` and `link` are
    /// relative to `workspace`; `setup` runs in the workspace's counterpart in
    /// the worktree.
    pub config: &'a WorktreeSection,
    /// How long each setup command may run; `None` for no limit.
    pub setup_timeout: Option<Duration>,
    /// Set to give up: a running setup command's group is killed, and what
    /// was made is removed.
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// The worktree gets a git directory of its own that borrows the
    /// repository's objects (`taskgit`), rather than a `git worktree` of
    /// the repository: every task whose agent runs on this machine. A
    /// Kubernetes task's worktree, which only the daemon touches, stays a
    /// `git worktree`.
    pub own_git_dir: bool,
    /// The daemon's own directory for the task's files (its daemon part):
    /// the index it keeps of the worktree, and its temporary files.
    pub scratch: Option<&'a Path>,
    /// The task's box, which setup runs in (issue 29); `None`: plain `sh`.
    pub launcher: Option<&'a crate::supervisor::boxed::Launcher>,
    /// The trees the kernel keeps every write of a read-only task's box out
    /// of (`sandbox::unwritable`): an inplace task whose repository lies
    /// beneath one is not snapshotted, since it cannot change it (issue 33).
    pub unwritable: &'a [PathBuf],
    /// The commit a worktree is made from instead of HEAD: a stacked
    /// task's parents' results merged (issue 32, `stack.rs`).
    pub base: Option<&'a str>,
}

/// Where a task runs and everything a later diff, apply or removal needs.
/// Stored as JSON with the task, so a restarted daemon can go on from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub task_id: String,
    /// The workspace as requested.
    pub workspace: PathBuf,
    /// Where the agent runs: the workspace, or its counterpart in the worktree.
    pub workdir: PathBuf,
    pub isolation: Isolation,
    /// The main working tree's root, when the workspace is in a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_root: Option<PathBuf>,
    /// The commit (sha) the worktree was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<PathBuf>,
    /// The worktree's own git directory (`<worktree>.git`, beside it),
    /// borrowing the repository's objects; `None` for a `git worktree` of
    /// the repository (a Kubernetes task's, or one made before issue 29).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_dir: Option<PathBuf>,
    /// The daemon's own directory for the task's files (its daemon part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<PathBuf>,
    /// Inplace only: the tree (oid) of the working tree before the agent ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Inplace only: the kernel keeps the task's writes out of its
    /// repository (a read-only task's box, `sandbox::unwritable`), so no
    /// snapshot was taken before and none is diffed after: its changes are
    /// none, verified by the kernel rather than by git.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_read_only: bool,
    /// Repository-relative paths caesar placed itself (copy, link); every diff
    /// and apply excludes them by prefix.
    #[serde(default)]
    pub placed: Vec<String>,
    /// Paths that could not be placed, each naming the key to fix.
    #[serde(default)]
    pub findings: Vec<Finding>,
}

/// Why the workshop refused or failed. Each message names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum WorkshopError {
    #[error(
        "a write task in place is refused while a worktree is possible ({repo} is a git repository with a commit): \
         use isolation=worktree or auto, or set allow_inplace_write = true in [policy]"
    )]
    InplaceWriteRefused { repo: PathBuf },
    #[error("isolation=worktree is impossible for {workspace}: {why}")]
    WorktreeImpossible { workspace: PathBuf, why: String },
    #[error("{0}")]
    Invalid(String),
    #[error(
        "[worktree] setup command `{command}` failed ({}) in {dir}: fix or remove it in [worktree] setup\n{output}",
        exit_code.map_or_else(|| "killed or timed out".to_owned(), |c| format!("exit code {c}"))
    )]
    SetupFailed { command: String, exit_code: Option<i32>, output: String, dir: PathBuf },
    #[error(
        "{path} is not in a git repository: caesar cannot diff or apply there, so the agent's declared changes \
         stand unverified; run `git init` and commit to get verified changes"
    )]
    NoRepository { path: PathBuf },
    #[error("the worktree {path} is gone (removed by gc or by hand): there is nothing left to diff or apply")]
    WorktreeGone { path: PathBuf },
    #[error("task {task} worked in place: its changes are already in {path}, so there is nothing to apply")]
    NotAWorktree { task: String, path: PathBuf },
    #[error(
        "the worktree {path} holds changes to {files} file(s) that were neither applied nor discarded: \
         apply or discard them first, or force the removal"
    )]
    UnmergedWork { path: PathBuf, files: usize },
    #[error("{0}")]
    Exists(String),
    #[error(
        "apply into {root} failed while writing {file}: {source}; every file it had written was restored, \
         fix the cause and apply again"
    )]
    ApplyFailed { root: PathBuf, file: String, source: std::io::Error },
    #[error("git: {action}: {source}")]
    Git { action: String, source: git2::Error },
    #[error("{action} {}: {source}", path.display())]
    Io { action: String, path: PathBuf, source: std::io::Error },
}

/// The broad class of a [`WorkshopError`], for mapping to gRPC codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong (INVALID_ARGUMENT).
    Invalid,
    /// The request is valid but the state does not allow it (FAILED_PRECONDITION).
    Precondition,
    /// Something is in the way (ABORTED).
    Conflict,
    /// Our fault or the system's (INTERNAL).
    Internal,
}

impl WorkshopError {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            WorkshopError::Invalid(_) | WorkshopError::WorktreeImpossible { .. } => ErrorKind::Invalid,
            WorkshopError::InplaceWriteRefused { .. }
            | WorkshopError::SetupFailed { .. }
            | WorkshopError::NoRepository { .. }
            | WorkshopError::WorktreeGone { .. }
            | WorkshopError::NotAWorktree { .. }
            | WorkshopError::UnmergedWork { .. } => ErrorKind::Precondition,
            WorkshopError::Exists(_) | WorkshopError::ApplyFailed { .. } => ErrorKind::Conflict,
            WorkshopError::Git { .. } | WorkshopError::Io { .. } => ErrorKind::Internal,
        }
    }

    pub(crate) fn git(action: impl Into<String>) -> impl FnOnce(git2::Error) -> WorkshopError {
        let action = action.into();
        move |source| WorkshopError::Git { action, source }
    }

    pub(crate) fn io(action: &str, path: &Path) -> impl FnOnce(std::io::Error) -> WorkshopError {
        let (action, path) = (action.to_owned(), path.to_owned());
        move |source| WorkshopError::Io { action, path, source }
    }
}

impl From<WorkshopError> for crate::error::Error {
    fn from(e: WorkshopError) -> crate::error::Error {
        let msg = e.to_string();
        match e.kind() {
            ErrorKind::Invalid => crate::error::Error::Invalid(msg),
            ErrorKind::Precondition => crate::error::Error::Precondition(msg),
            ErrorKind::Conflict => crate::error::Error::Conflict(msg),
            ErrorKind::Internal => crate::error::Error::Internal(msg),
        }
    }
}

/// What git knows about a workspace, before anything is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFacts {
    /// The working tree's root; `None` outside a repository (or in a bare one).
    pub root: Option<PathBuf>,
    /// HEAD's commit, when there is one.
    pub head: Option<String>,
}

/// Looks the workspace up in git without writing anything.
pub fn facts(workspace: &Path) -> RepoFacts {
    let Ok(repo) = Repository::discover(workspace) else {
        return RepoFacts { root: None, head: None };
    };
    let root = repo.workdir().map(Path::to_path_buf);
    let head = repo.head().ok().and_then(|h| h.peel_to_commit().ok()).map(|c| c.id().to_string());
    RepoFacts { root, head }
}

/// The isolation `auto` and the explicit requests resolve to, or the refusal.
/// Writes nothing.
pub fn decide(
    workspace: &Path,
    request: IsolationPref,
    mode: Mode,
    allow_inplace_write: bool,
) -> Result<Isolation, WorkshopError> {
    let f = facts(workspace);
    decide_from(&f, workspace, request, mode, allow_inplace_write)
}

fn decide_from(
    f: &RepoFacts,
    workspace: &Path,
    request: IsolationPref,
    mode: Mode,
    allow_inplace_write: bool,
) -> Result<Isolation, WorkshopError> {
    let possible = f.root.is_some() && f.head.is_some();
    match request {
        IsolationPref::Auto if possible && mode == Mode::Write => Ok(Isolation::Worktree),
        IsolationPref::Auto => Ok(Isolation::Inplace),
        IsolationPref::Worktree if possible => Ok(Isolation::Worktree),
        IsolationPref::Worktree => {
            let why = if f.root.is_none() {
                "it is not in a git repository; use isolation=inplace, or run `git init` and commit".to_owned()
            } else {
                "its repository has no commit yet; commit once, or use isolation=inplace".to_owned()
            };
            Err(WorkshopError::WorktreeImpossible { workspace: workspace.to_owned(), why })
        }
        IsolationPref::Inplace if mode == Mode::Write && possible && !allow_inplace_write => {
            Err(WorkshopError::InplaceWriteRefused { repo: f.root.clone().unwrap_or_default() })
        }
        IsolationPref::Inplace => Ok(Isolation::Inplace),
    }
}

/// Decides the isolation and makes the task's workshop ready: the worktree
/// with its placed paths and setup, or the inplace snapshot. A refusal writes
/// nothing; a failed setup removes the worktree and branch it had made.
pub fn prepare(input: &PrepareInput) -> Result<Prepared, WorkshopError> {
    check_task_id(input.task_id)?;
    let workspace = input
        .workspace
        .canonicalize()
        .map_err(|e| WorkshopError::Invalid(format!("workspace {}: {e}", input.workspace.display())))?;
    if !workspace.is_dir() {
        return Err(WorkshopError::Invalid(format!("workspace {} is not a directory", workspace.display())));
    }
    let f = facts(&workspace);
    let isolation = decide_from(&f, &workspace, input.isolation, input.mode, input.allow_inplace_write)?;
    let mut prepared = Prepared {
        task_id: input.task_id.to_owned(),
        workspace: workspace.clone(),
        workdir: workspace.clone(),
        isolation,
        repo_root: f.root.clone(),
        base_ref: None,
        branch: None,
        worktree: None,
        git_dir: None,
        scratch: input.scratch.map(Path::to_path_buf),
        before: None,
        kernel_read_only: false,
        placed: Vec::new(),
        findings: Vec::new(),
    };
    let Some(root) = f.root.clone() else { return Ok(prepared) };
    match isolation {
        Isolation::Inplace if input.mode == Mode::ReadOnly && input.unwritable.iter().any(|u| root.starts_with(u)) => {
            // Two reads of every file of the tree (before and after) saved;
            // and the user's own edits meanwhile are not taken for the task's.
            prepared.kernel_read_only = true;
            Ok(prepared)
        }
        Isolation::Inplace => {
            let tree = snapshot::snapshot(&root, &[], input.scratch)?;
            prepared.before = Some(tree.to_string());
            Ok(prepared)
        }
        Isolation::Worktree => {
            let head = input.base.map(str::to_owned).or_else(|| f.head.clone()).unwrap_or_default();
            make_worktree(input, &workspace, &root, &head, &mut prepared)?;
            let placed = place::place_all(&root, &workspace, &prepared, input.config);
            match placed {
                Ok((placed, findings)) => {
                    prepared.placed = placed;
                    prepared.findings = findings;
                }
                Err(e) => {
                    let _ = remove(&prepared, true);
                    return Err(e);
                }
            }
            let setup = place::Setup {
                dir: &prepared.workdir,
                task_id: input.task_id,
                timeout: input.setup_timeout,
                cancel: input.cancel,
                launcher: input.launcher,
            };
            if let Err(e) = place::run_setup(&setup, &input.config.setup) {
                let _ = remove(&prepared, true);
                return Err(e);
            }
            Ok(prepared)
        }
    }
}

fn check_task_id(id: &str) -> Result<(), WorkshopError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !id.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(WorkshopError::Invalid(format!(
            "task id `{id}` cannot name a worktree: use letters, digits, `_` and `-` (at most 64)"
        )))
    }
}

/// Lower-case ASCII words joined by `-`, at most `max` bytes; `fallback` when empty.
fn slug(text: &str, max: usize, fallback: &str) -> String {
    let mut out = String::new();
    for word in text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_ascii_lowercase();
        let extra = if out.is_empty() { word.len() } else { word.len() + 1 };
        if out.len() + extra > max {
            if out.is_empty() {
                out = word[..max].to_owned();
            }
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word);
    }
    if out.is_empty() { fallback.to_owned() } else { out }
}

/// `caesar/<label>/<slug>-<8 chars>`: the last 8 alphanumerics of the task id,
/// or 8 random hex digits when the id has fewer.
pub fn branch_name(label: &str, objective: &str, task_id: &str) -> String {
    let alnum: Vec<char> = task_id.chars().filter(char::is_ascii_alphanumeric).collect();
    let short: String = if alnum.len() >= 8 {
        alnum[alnum.len() - 8..].iter().collect::<String>().to_ascii_lowercase()
    } else {
        crate::ids::secret()[..8].to_owned()
    };
    format!("caesar/{}/{}-{short}", slug(label, 32, "agent"), slug(objective, 40, "task"))
}

/// Held while a worktree is added (see `make_worktree`).
static WORKTREE_ADDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn make_worktree(
    input: &PrepareInput,
    workspace: &Path,
    root: &Path,
    head: &str,
    prepared: &mut Prepared,
) -> Result<(), WorkshopError> {
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let branch = branch_name(input.label, input.objective, input.task_id);
    if !git2::Branch::name_is_valid(&branch).unwrap_or(false) {
        return Err(WorkshopError::Invalid(format!("`{branch}` is not a valid branch name: change the label")));
    }
    let wt_dir = root.join(WORKTREES_DIR);
    let wt_path = wt_dir.join(input.task_id);
    // Before anything reads the records (deleting a branch and adding a
    // worktree read every record's HEAD).
    screen_records(repo.commondir());
    // A task is prepared again only when no preparation of it was ever
    // recorded (a daemon killed in the middle): a worktree named by its id,
    // and the branch named by its id, label and objective, are what that
    // interrupted try made. They are removed and made afresh.
    // libgit2 has been seen (under the soak, rarely) to call the branch
    // checked out by a worktree record that is gone a moment later: the
    // removal is tried again before it fails the task.
    let mut tries = 0;
    while let Err(e) = remove_leftovers(&repo, input.task_id, &branch, &wt_path) {
        tries += 1;
        if tries >= 3 {
            return Err(e);
        }
        tracing::warn!(
            task_id = input.task_id,
            "removing what an interrupted preparation left failed ({e}); trying again"
        );
        std::thread::sleep(std::time::Duration::from_millis(100 * tries));
    }
    ensure_excluded(&repo)?;
    std::fs::create_dir_all(&wt_dir).map_err(WorkshopError::io("create", &wt_dir))?;
    let oid = Oid::from_str(head).map_err(WorkshopError::git("read HEAD"))?;
    let commit = repo.find_commit(oid).map_err(WorkshopError::git("read HEAD's commit"))?;
    let rel = workspace.strip_prefix(root).unwrap_or(Path::new(""));
    let workdir = wt_path.join(rel);
    prepared.base_ref = Some(head.to_owned());
    prepared.branch = Some(branch.clone());
    prepared.worktree = Some(wt_path.clone());
    prepared.workdir = workdir.clone();
    if input.own_git_dir {
        // A result of an earlier try of this task is not this one's.
        if let Ok(mut r) = repo.find_reference(&end_ref(input.task_id)) {
            let _ = r.delete();
        }
        prepared.git_dir = Some(taskgit::make(&repo, &wt_path, &branch, &commit, input.scratch)?);
        std::fs::create_dir_all(&workdir).map_err(WorkshopError::io("create", &workdir))?;
        return Ok(());
    }
    // Adding a worktree while other tasks add theirs to the same repository
    // fails with "already checked out" for a branch just made (libgit2 reads
    // the other worktrees' half-written HEADs): the adds are taken one at a
    // time in this process (each takes milliseconds; setup runs after, side by
    // side). A failed try is still cleaned up whole (its record too) and
    // tried again, a few times, before it is the task's failure.
    let one_add_at_a_time = WORKTREE_ADDS.lock().unwrap_or_else(|p| p.into_inner());
    let mut tries = 0;
    loop {
        tries += 1;
        let branch_ref = refs::write_retrying(|| repo.branch(&branch, &commit, false))
            .map_err(WorkshopError::git(format!("create {branch}")))?;
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(branch_ref.get()));
        match repo.worktree(input.task_id, &wt_path, Some(&opts)) {
            Ok(_) => break,
            Err(e) => {
                let cleaned = remove_leftovers(&repo, input.task_id, &branch, &wt_path);
                if tries >= 3 || cleaned.is_err() {
                    return Err(WorkshopError::git(format!("add worktree {}", wt_path.display()))(e));
                }
                tracing::warn!(task_id = input.task_id, "adding the worktree failed ({e}); trying again");
                std::thread::sleep(std::time::Duration::from_millis(50 * tries));
            }
        }
    }
    drop(one_add_at_a_time);
    // Rebuild the fresh worktree's index from the base tree: the same entries
    // and stat data, plus the tree cache libgit2's checkout leaves out, which
    // halves the cost of every later snapshot of the worktree.
    let tree = commit.tree().map_err(WorkshopError::git("read the base tree"))?;
    Repository::open(&wt_path)
        .and_then(|w| w.index())
        .and_then(|mut idx| idx.read_tree(&tree).and_then(|()| idx.write()))
        .map_err(WorkshopError::git(format!("index the worktree {}", wt_path.display())))?;
    std::fs::create_dir_all(&workdir).map_err(WorkshopError::io("create", &workdir))?;
    Ok(())
}

/// Removes what an interrupted preparation of this very task left: its
/// worktree (by the task id) and its branch (by the name derived from the
/// task id). Nothing else is touched.
fn remove_leftovers(repo: &Repository, task_id: &str, branch: &str, wt_path: &Path) -> Result<(), WorkshopError> {
    if let Ok(wt) = repo.find_worktree(task_id) {
        let mut opts = git2::WorktreePruneOptions::new();
        opts.valid(true).locked(true).working_tree(true);
        wt.prune(Some(&mut opts)).map_err(WorkshopError::git(format!("remove the leftover worktree {task_id}")))?;
    }
    // A worktree whose creation was cut short may not open as one, yet its
    // administrative directory keeps the branch "checked out": every record
    // that names this task's worktree or checks out this task's branch goes.
    let records = repo.commondir().join("worktrees");
    let head_line = format!("ref: refs/heads/{branch}");
    for entry in std::fs::read_dir(&records).into_iter().flatten().flatten() {
        let admin = entry.path();
        let head = record_file(&admin.join("HEAD"));
        let gitdir = record_file(&admin.join("gitdir"));
        let ours = entry.file_name() == task_id
            || head.trim() == head_line
            || Path::new(gitdir.trim()).parent() == Some(wt_path);
        if ours {
            std::fs::remove_dir_all(&admin)
                .map_err(WorkshopError::io("remove the leftover worktree record", &admin))?;
        }
    }
    if wt_path.exists() {
        std::fs::remove_dir_all(wt_path).map_err(WorkshopError::io("remove the leftover worktree", wt_path))?;
    }
    // A process killed while it wrote the branch leaves the ref's lock.
    let lock = repo.commondir().join("refs/heads").join(format!("{branch}.lock"));
    if lock.exists() {
        std::fs::remove_file(&lock).map_err(WorkshopError::io("remove the leftover lock", &lock))?;
    }
    if let Ok(mut b) = repo.find_branch(branch, BranchType::Local) {
        b.delete().map_err(|e| {
            let mut seen = String::new();
            for entry in std::fs::read_dir(&records).into_iter().flatten().flatten() {
                let head = record_file(&entry.path().join("HEAD"));
                let gitdir = record_file(&entry.path().join("gitdir"));
                seen.push_str(&format!(" [{:?} HEAD={} gitdir={}]", entry.file_name(), head.trim(), gitdir.trim()));
            }
            WorkshopError::git(format!("delete the leftover branch {branch} (worktree records:{seen})"))(e)
        })?;
    }
    Ok(())
}

/// The files of a worktree record (`<commondir>/worktrees/<name>/`) that
/// git and libgit2 open. A worktree task's agent can write its own record.
const RECORD_FILES: [&str; 4] = ["HEAD", "gitdir", "commondir", "index"];

/// A small file of a worktree record, read without following a link nor
/// blocking on a FIFO; empty when it is not a regular file.
fn record_file(path: &Path) -> String {
    crate::safe_fs::read_to_string_capped(path, 64 * 1024).unwrap_or_default()
}

/// The first of the record `admin`'s git files that is there and is not a
/// regular file (a FIFO, a link, a directory), or `admin` itself when it
/// is not a directory.
pub(crate) fn hostile_record(admin: &Path) -> Option<PathBuf> {
    if std::fs::symlink_metadata(admin).is_ok_and(|m| !m.is_dir()) {
        return Some(admin.to_path_buf());
    }
    RECORD_FILES
        .iter()
        .map(|f| admin.join(f))
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_file()))
}

/// Removes every worktree record of the repository at `commondir` whose
/// git files are not all regular files: libgit2 reads every record's HEAD
/// when it adds a worktree, and a FIFO an agent planted at its own blocked
/// every later preparation, across restarts (issue 29). Only an agent makes
/// such a record; its task's worktree is then no longer git's.
fn screen_records(commondir: &Path) {
    for entry in std::fs::read_dir(commondir.join("worktrees")).into_iter().flatten().flatten() {
        let admin = entry.path();
        let Some(bad) = hostile_record(&admin) else { continue };
        tracing::warn!(
            "the worktree record {} holds {}, which is not a regular file (an agent's doing): the record is removed",
            admin.display(),
            bad.display()
        );
        let gone = if bad == admin { std::fs::remove_file(&admin) } else { std::fs::remove_dir_all(&admin) };
        if let Err(e) = gone {
            tracing::warn!("cannot remove the worktree record {}: {e}", admin.display());
        }
    }
}

/// Adds `/.caesar/wt/` to the repository's `info/exclude` once, so worktrees
/// never appear as untracked in the main tree.
fn ensure_excluded(repo: &Repository) -> Result<(), WorkshopError> {
    let info = repo.commondir().join("info");
    let path = info.join("exclude");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(WorkshopError::io("read", &path)(e)),
    };
    if text.lines().any(|l| l.trim() == EXCLUDE_LINE) {
        return Ok(());
    }
    std::fs::create_dir_all(&info).map_err(WorkshopError::io("create", &info))?;
    let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
    let new = format!("{text}{sep}# caesar's task worktrees\n{EXCLUDE_LINE}\n");
    std::fs::write(&path, new).map_err(WorkshopError::io("write", &path))
}

/// The facts gc decides on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkState {
    /// The worktree directory still exists.
    pub worktree_present: bool,
    /// Files the task changed against its base (from the worktree, or from the
    /// branch's tip once the worktree is gone).
    pub changed_files: usize,
    /// Every one of those changes is already in the main working tree (the
    /// task was applied, or the same edits were made by hand).
    pub in_main: bool,
    /// Commits on the task's branch that no other reference reaches.
    pub unique_commits: usize,
}

impl WorkState {
    /// Changes that were neither applied nor are otherwise in the main tree.
    pub fn unmerged(&self) -> bool {
        self.changed_files > 0 && !self.in_main
    }
}

/// What gc needs to know about a task's worktree and branch. An inplace task
/// has nothing to keep.
pub fn inspect(p: &Prepared) -> Result<WorkState, WorkshopError> {
    let empty = WorkState { worktree_present: false, changed_files: 0, in_main: true, unique_commits: 0 };
    let (Some(root), Some(base), Isolation::Worktree) = (&p.repo_root, &p.base_ref, p.isolation) else {
        return Ok(empty);
    };
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let base = repo
        .find_commit(Oid::from_str(base).map_err(WorkshopError::git("read base_ref"))?)
        .map_err(WorkshopError::git("find base_ref"))?;
    let tip =
        p.branch.as_deref().and_then(|b| repo.find_branch(b, BranchType::Local).ok()).and_then(|b| b.get().target());
    let present = taskgit::worktree_present(p);
    let task_tree = match taskgit::task_tree(p, &repo) {
        Ok(tree) => tree,
        Err(WorkshopError::WorktreeGone { .. }) => match tip {
            Some(t) => {
                repo.find_commit(t).and_then(|c| c.tree()).map(|t| t.id()).map_err(WorkshopError::git("read tip"))?
            }
            None => base.tree_id(),
        },
        Err(e) => return Err(e),
    };
    let base_tree = base.tree_id();
    let changed = apply::changed_paths(&repo, base_tree, task_tree)?;
    let in_main = if changed.is_empty() {
        true
    } else {
        let main_tree = snapshot::snapshot(root, &[], Some(&taskgit::scratch_of(p)))?;
        apply::all_present(&repo, &changed, task_tree, main_tree)?
    };
    let unique_commits = match (tip, p.branch.as_deref()) {
        (Some(tip), Some(branch)) => unique_commits(&repo, tip, branch, &p.task_id)?,
        _ => 0,
    };
    Ok(WorkState { worktree_present: present, changed_files: changed.len(), in_main, unique_commits })
}

/// Whether removing this task's worktree would lose changes that were neither
/// applied nor are otherwise in the main tree.
pub fn has_unmerged_work(p: &Prepared) -> Result<bool, WorkshopError> {
    Ok(inspect(p)?.unmerged())
}

/// The commits of the task's branch that no other reference reaches (the
/// task's own refs under `refs/caesar/tasks/<id>/` are not others).
fn unique_commits(repo: &Repository, tip: Oid, branch: &str, task_id: &str) -> Result<usize, WorkshopError> {
    let own = format!("refs/heads/{branch}");
    let own_refs = format!("refs/caesar/tasks/{task_id}/");
    let mut walk = repo.revwalk().map_err(WorkshopError::git("walk history"))?;
    walk.push(tip).map_err(WorkshopError::git("walk history"))?;
    for r in repo.references().map_err(WorkshopError::git("list references"))?.flatten() {
        if r.name().is_ok_and(|n| n == own || n.starts_with(&own_refs)) {
            continue;
        }
        if let Ok(c) = r.peel_to_commit() {
            let _ = walk.hide(c.id());
        }
    }
    if let Ok(h) = repo.head().and_then(|h| h.peel_to_commit()) {
        let _ = walk.hide(h.id());
    }
    Ok(walk.take(100_000).filter(Result::is_ok).count())
}

/// What [`remove`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub worktree_removed: bool,
    pub branch_deleted: bool,
    /// Why the branch was kept, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_kept: Option<String>,
}

/// Removes a task's worktree and branch with gc's safety rules. Without
/// `force` it refuses a worktree whose changes are unmerged
/// ([`WorkState::unmerged`]), and keeps (but reports) a branch holding commits
/// that no other reference reaches. With `force` both go. An inplace task has
/// nothing to remove.
pub fn remove(p: &Prepared, force: bool) -> Result<Removed, WorkshopError> {
    remove_with(p, force, false)
}

/// [`remove`] for a task whose changes the caller discarded: its worktree
/// goes even with unmerged changes, but a branch holding commits no other
/// reference reaches is still kept unless `force`.
pub fn remove_discarded(p: &Prepared, force: bool) -> Result<Removed, WorkshopError> {
    remove_with(p, force, true)
}

fn remove_with(p: &Prepared, force: bool, discarded: bool) -> Result<Removed, WorkshopError> {
    let (Some(root), Isolation::Worktree) = (&p.repo_root, p.isolation) else { return Ok(Removed::default()) };
    let state = if force {
        None
    } else {
        match inspect(p) {
            Ok(s) => Some(s),
            // A worktree that cannot be inspected (its agent broke its git
            // record, issue 29) still goes when the caller discarded it; its
            // branch is then kept unless forced.
            Err(e) if discarded => {
                tracing::warn!(task_id = p.task_id, "removing a discarded worktree that cannot be inspected: {e}");
                None
            }
            Err(e) => return Err(e),
        }
    };
    if let Some(s) = &state
        && s.unmerged()
        && !discarded
    {
        return Err(WorkshopError::UnmergedWork {
            path: p.worktree.clone().unwrap_or_default(),
            files: s.changed_files,
        });
    }
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    // Pruning and deleting the branch read every worktree record's HEAD.
    screen_records(repo.commondir());
    let mut out = Removed::default();
    if let Some(wt) = &p.worktree {
        if std::fs::symlink_metadata(wt).is_ok() {
            taskgit::remove_any(wt)?;
            out.worktree_removed = true;
        }
        if let Some(git_dir) = &p.git_dir {
            taskgit::remove_any(git_dir)?;
        }
        if let Ok(mut r) = repo.find_reference(&end_ref(&p.task_id)) {
            r.delete().map_err(WorkshopError::git(format!("delete {}", end_ref(&p.task_id))))?;
        }
        checkpoints::drop_all(&repo, &p.task_id);
        if let Ok(w) = repo.find_worktree(&p.task_id) {
            let mut o = WorktreePruneOptions::new();
            o.valid(true).locked(force).working_tree(true);
            w.prune(Some(&mut o)).map_err(WorkshopError::git(format!("prune worktree {}", p.task_id)))?;
        }
    }
    if let Some(branch) = &p.branch
        && let Ok(mut b) = repo.find_branch(branch, BranchType::Local)
    {
        let unique = state.as_ref().map_or(0, |s| s.unique_commits);
        if !force && state.is_none() {
            out.branch_kept = Some(format!(
                "branch {branch} kept: its worktree could not be inspected; delete it with `git branch -D {branch}` (or force the removal)"
            ));
        } else if force || unique == 0 {
            b.delete().map_err(WorkshopError::git(format!("delete branch {branch}")))?;
            out.branch_deleted = true;
        } else {
            out.branch_kept = Some(format!(
                "branch {branch} kept: it holds {unique} commit(s) no other branch or tag reaches; \
                 merge it, or delete it with `git branch -D {branch}` (or force the removal)"
            ));
        }
    }
    Ok(out)
}

/// Bytes under `path`, not following symlinks; for gc's disk retention.
pub fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_are_slugged_and_valid() {
        let b = branch_name("Implementer", "Fix the login bug: crash on empty password!", "t_0123456789ab");
        assert_eq!(b, "caesar/implementer/fix-the-login-bug-crash-on-empty-456789ab");
        assert!(git2::Branch::name_is_valid(&b).unwrap());
        let b = branch_name("", "   ", "t_0123456789ab");
        assert_eq!(b, "caesar/agent/task-456789ab");
        let b = branch_name("codex", "é", "x");
        assert!(b.starts_with("caesar/codex/task-") && b.len() == "caesar/codex/task-".len() + 8, "{b}");
        assert_eq!(slug("abcdefghij", 4, "x"), "abcd");
    }

    #[test]
    fn task_ids_that_could_escape_are_refused() {
        assert!(check_task_id("t_0123456789ab").is_ok());
        for bad in ["", "../x", "a/b", "-x", "a b"] {
            assert!(check_task_id(bad).is_err(), "{bad}");
        }
    }
}

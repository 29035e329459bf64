//! Checkpoints (issue 31, fork from a point): a worktree task's files as
//! they were at one of its events, kept as cheap git objects.
//!
//! On a `file_changed` event the engine (`engine/checkpoints.rs`) takes a
//! snapshot of the task's worktree with the daemon's own index of it (as
//! [`super::capture`] does at the task's end: never through the worktree's
//! `.git`) and records it here as a commit on the task's base, under
//! `refs/caesar/tasks/<id>/at/<seq>` in the user's repository, where the
//! agent cannot write. A checkpoint at `seq` holds every change of the
//! events up to `seq` (and perhaps a little more: the agent keeps working
//! while the snapshot is taken). A tree equal to the previous checkpoint's
//! is not recorded again, and a task keeps at most a cap of them: past it,
//! the newest replaces the one before it, so the early points stay and the
//! last one is always current.
//!
//! [`tree_at`] answers "the files at event N": the checkpoint of the
//! greatest seq <= N, the base before the first one. [`seed`] lays such a
//! tree into a new worktree (a fork's) as uncommitted changes on its base.
//! Everything here is blocking.

use git2::{Oid, Repository};

use super::{Prepared, WorkshopError, taskgit};
use crate::oacp::Isolation;

/// The most checkpoints one task keeps.
pub const CAP: usize = 200;

/// The ref of a task's checkpoint at event `seq`.
pub fn at_ref(task_id: &str, seq: u64) -> String {
    format!("refs/caesar/tasks/{task_id}/at/{seq}")
}

/// Whether a task has a worktree checkpoints can be taken of: a worktree
/// of its own on this machine, in a repository with a base.
pub fn applies(p: &Prepared) -> bool {
    p.isolation == Isolation::Worktree && p.git_dir.is_some() && p.repo_root.is_some() && p.base_ref.is_some()
}

fn open(p: &Prepared) -> Result<Repository, WorkshopError> {
    let root = p.repo_root.clone().unwrap_or_default();
    Repository::open(&root).map_err(WorkshopError::git(format!("open {}", root.display())))
}

/// The task's checkpoints, by seq, oldest first.
pub fn list(repo: &Repository, task_id: &str) -> Vec<(u64, Oid)> {
    let prefix = format!("refs/caesar/tasks/{task_id}/at/");
    let Ok(refs) = repo.references_glob(&format!("{prefix}*")) else { return Vec::new() };
    let mut out: Vec<(u64, Oid)> = refs
        .filter_map(|r| {
            let r = r.ok()?;
            let seq = r.name().ok()?.strip_prefix(&prefix)?.parse().ok()?;
            Some((seq, r.target()?))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Records the task's worktree as its checkpoint at `seq`. `None` when
/// nothing changed since the last checkpoint (or the task has no
/// worktree of its own).
pub fn record(p: &Prepared, seq: u64) -> Result<Option<u64>, WorkshopError> {
    if !applies(p) || !taskgit::worktree_present(p) {
        return Ok(None);
    }
    let repo = open(p)?;
    let root = p.repo_root.clone().unwrap_or_default();
    let wt = p.worktree.clone().unwrap_or_default();
    let tree = taskgit::worktree_tree(p, &root, &wt, None)?;
    let mut existing = list(&repo, &p.task_id);
    let base = Oid::from_str(p.base_ref.as_deref().unwrap_or_default()).map_err(WorkshopError::git("read base_ref"))?;
    let base = repo.find_commit(base).map_err(WorkshopError::git("read the task's base"))?;
    let last_tree = match existing.last() {
        Some((_, c)) => repo.find_commit(*c).map(|c| c.tree_id()).ok(),
        None => Some(base.tree_id()),
    };
    if last_tree == Some(tree) || existing.last().is_some_and(|(s, _)| *s >= seq) {
        return Ok(None);
    }
    if existing.len() >= CAP
        && let Some((newest, _)) = existing.pop()
        && let Ok(mut r) = repo.find_reference(&at_ref(&p.task_id, newest))
    {
        let _ = r.delete();
    }
    let tree = repo.find_tree(tree).map_err(WorkshopError::git("read the checkpoint's tree"))?;
    let sig = git2::Signature::now("caesar", "caesar@localhost").map_err(WorkshopError::git("sign"))?;
    let msg = format!("caesar: the worktree of task {} at event {seq}", p.task_id);
    let commit =
        repo.commit(None, &sig, &sig, &msg, &tree, &[&base]).map_err(WorkshopError::git("commit a checkpoint"))?;
    super::refs::write_retrying(|| repo.reference(&at_ref(&p.task_id, seq), commit, true, "caesar: a checkpoint"))
        .map_err(WorkshopError::git(format!("write {}", at_ref(&p.task_id, seq))))?;
    Ok(Some(seq))
}

/// The tree of the task's files at event `at`: its checkpoint of the
/// greatest seq <= `at` (the base before the first), with that seq (0 for
/// the base). Without `at`, its latest state: the tree at its end, else its
/// worktree's now.
pub fn tree_at(p: &Prepared, at: Option<u64>) -> Result<(Oid, u64), WorkshopError> {
    let repo = open(p)?;
    let checkpoints = list(&repo, &p.task_id);
    let Some(at) = at else {
        let tree = taskgit::task_tree(p, &repo)?;
        return Ok((tree, checkpoints.last().map_or(0, |(s, _)| *s)));
    };
    match checkpoints.iter().rev().find(|(s, _)| *s <= at) {
        Some((seq, commit)) => {
            let c = repo.find_commit(*commit).map_err(WorkshopError::git("read a checkpoint"))?;
            Ok((c.tree_id(), *seq))
        }
        None => {
            let base = Oid::from_str(p.base_ref.as_deref().unwrap_or_default())
                .map_err(WorkshopError::git("read base_ref"))?;
            let c = repo.find_commit(base).map_err(WorkshopError::git("read the task's base"))?;
            Ok((c.tree_id(), 0))
        }
    }
}

/// Lays `tree` (a state of a task that started from `from_base`) into the
/// new worktree of `p` (made by [`super::prepare`], before its agent runs):
/// its files become the worktree's, as changes not yet committed, so the
/// task's diff shows them. When the new worktree's base is another commit
/// (the user's HEAD moved), the source's changes are merged onto it; a
/// conflict there is refused, naming the files.
pub fn seed(p: &Prepared, from_base: &str, tree: &str) -> Result<(), WorkshopError> {
    let wt = p.worktree.clone().ok_or_else(|| WorkshopError::Invalid("a fork needs a worktree".to_owned()))?;
    let mut tree = Oid::from_str(tree).map_err(WorkshopError::git("read the fork's tree"))?;
    if p.base_ref.as_deref() != Some(from_base) {
        tree = rebase_tree(p, from_base, tree)?;
    }
    // The worktree was made by the daemon just now; no agent has run in it.
    let w = Repository::open(&wt).map_err(WorkshopError::git(format!("open {}", wt.display())))?;
    let tree = w.find_tree(tree).map_err(WorkshopError::git("read the fork's tree through the task's store"))?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.force().update_index(false);
    w.checkout_tree(tree.as_object(), Some(&mut co))
        .map_err(WorkshopError::git(format!("lay the fork's files into {}", wt.display())))
}

/// `tree`'s changes over `from_base`, merged onto the base of `p`.
fn rebase_tree(p: &Prepared, from_base: &str, tree: Oid) -> Result<Oid, WorkshopError> {
    let repo = open(p)?;
    let commit_tree = |oid: &str| -> Result<git2::Tree<'_>, WorkshopError> {
        let oid = Oid::from_str(oid).map_err(WorkshopError::git("read a base"))?;
        repo.find_commit(oid).and_then(|c| c.tree()).map_err(WorkshopError::git("read a base"))
    };
    let ancestor = commit_tree(from_base)?;
    let ours = commit_tree(p.base_ref.as_deref().unwrap_or_default())?;
    let theirs = repo.find_tree(tree).map_err(WorkshopError::git("read the fork's tree"))?;
    let mut index =
        repo.merge_trees(&ancestor, &ours, &theirs, None).map_err(WorkshopError::git("merge the fork's changes"))?;
    if index.has_conflicts() {
        let files: Vec<String> = index
            .conflicts()
            .map(|c| {
                c.flatten()
                    .filter_map(|c| c.our.or(c.their).map(|e| String::from_utf8_lossy(&e.path).into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        return Err(WorkshopError::Exists(format!(
            "the source's changes conflict with the repository's HEAD, which moved since the source started, in: {}; \
             fork from a point before those changes, or commit or check out the source's base first",
            files.join(", ")
        )));
    }
    index.write_tree_to(&repo).map_err(WorkshopError::git("write the fork's merged tree"))
}

/// Deletes the task's checkpoints (when its worktree goes).
pub fn drop_all(repo: &Repository, task_id: &str) {
    for (seq, _) in list(repo, task_id) {
        if let Ok(mut r) = repo.find_reference(&at_ref(task_id, seq)) {
            let _ = r.delete();
        }
    }
}

/// The files `tree` changes against the task's base, git-checked with
/// their line counts, sorted by path (placed paths left out).
pub fn changed_files(p: &Prepared, tree: Oid) -> Result<Vec<super::FileChange>, WorkshopError> {
    let repo = open(p)?;
    let base = Oid::from_str(p.base_ref.as_deref().unwrap_or_default()).map_err(WorkshopError::git("read base_ref"))?;
    let base = repo.find_commit(base).map_err(WorkshopError::git("read the task's base"))?.tree_id();
    let mut files = super::diff::diff_trees(&repo, base, tree, &p.placed)?.files;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

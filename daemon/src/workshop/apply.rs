//! Applying a worktree's changes to the main working tree.
//!
//! A 3-way merge done by libgit2, not `git apply`: the ancestor is the
//! task's base commit, "ours" is a snapshot of the main working tree (so the
//! user's uncommitted files take part), "theirs" is a snapshot of the
//! worktree. Nothing is written unless the whole merge is clean; then only
//! the paths whose content changes are written, straight into the working
//! tree. The index, HEAD and every branch are left alone, and a failed write
//! restores every file already written. Conflicts are:
//!
//! - paths the task changed that hold uncommitted changes in the main tree
//!   (the user's work is never merged into, let alone overwritten);
//! - paths both the task and commits made since the base changed in ways
//!   that do not merge;
//! - an ignored file standing where the task adds one.
//!
//! Applying the same task twice answers `already_applied`: every path the
//! task changed already holds the task's content in the main tree (so it
//! survives a restart, and a commit of the applied changes).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use git2::{MergeOptions, ObjectType, Oid, Repository, Tree};
use serde::{Deserialize, Serialize};

use super::diff::{tree_diff, trees};
use super::snapshot::{excluded, snapshot};
use super::{Prepared, WorkshopError};
use crate::oacp::Isolation;
use crate::safe_fs;

/// A path that keeps the apply from happening, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub path: String,
    pub reason: String,
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyResult {
    /// The changes are now in the main working tree.
    pub applied: bool,
    /// They were already there: nothing was written.
    pub already_applied: bool,
    /// Why nothing was written; empty when `applied` or `already_applied`.
    pub conflicts: Vec<Conflict>,
    /// The paths written or deleted, repository-relative.
    pub files: Vec<String>,
    /// One sentence for a person.
    pub message: String,
}

impl ApplyResult {
    fn nothing(message: String, already_applied: bool) -> ApplyResult {
        ApplyResult { applied: false, already_applied, conflicts: Vec::new(), files: Vec::new(), message }
    }
}

type Entry = Option<(Oid, i32)>;

fn entry(tree: &Tree, path: &str) -> Entry {
    let e = tree.get_path(Path::new(path)).ok()?;
    match e.kind() {
        Some(ObjectType::Blob) | Some(ObjectType::Commit) => Some((e.id(), e.filemode())),
        _ => None,
    }
}

/// Every path that differs between two trees (old and new sides, no
/// renames), once each, in the diff's order. Linear in changed paths: a
/// `Vec::contains` per path here made apply quadratic (issue 33: 3,000
/// changed files took 11 s).
pub(crate) fn changed_paths(repo: &Repository, from: Oid, to: Oid) -> Result<Vec<String>, WorkshopError> {
    let d = tree_diff(repo, from, to, false)?;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for delta in d.deltas() {
        for f in [delta.old_file(), delta.new_file()] {
            if let Some(p) = f.path() {
                let p = p.to_string_lossy().replace('\\', "/");
                if seen.insert(p.clone()) {
                    out.push(p);
                }
            }
        }
    }
    Ok(out)
}

/// Whether every one of `paths` holds in `main` what it holds in `task`.
pub(crate) fn all_present(repo: &Repository, paths: &[String], task: Oid, main: Oid) -> Result<bool, WorkshopError> {
    let task = repo.find_tree(task).map_err(WorkshopError::git("read the task's tree"))?;
    let main = repo.find_tree(main).map_err(WorkshopError::git("read the main tree"))?;
    Ok(paths.iter().all(|p| entry(&task, p) == entry(&main, p)))
}

/// Merges a worktree task's changes into the main working tree: all or
/// nothing, never a commit, never a branch move. See the module docs.
pub fn apply(p: &Prepared) -> Result<ApplyResult, WorkshopError> {
    if p.isolation != Isolation::Worktree {
        return Err(WorkshopError::NotAWorktree { task: p.task_id.clone(), path: p.workspace.clone() });
    }
    let (repo, base, task) = trees(p)?;
    let root = p.repo_root.clone().unwrap_or_default();
    let changed: Vec<String> =
        changed_paths(&repo, base, task)?.into_iter().filter(|c| !excluded(c, &p.placed)).collect();
    if changed.is_empty() {
        return Ok(ApplyResult::nothing("nothing to apply: the task changed no file".to_owned(), false));
    }
    let main = snapshot(&root, &[], Some(&super::taskgit::scratch_of(p)))?;
    if all_present(&repo, &changed, task, main)? {
        return Ok(ApplyResult::nothing(
            format!("already applied: all {} changed file(s) already hold the task's content", changed.len()),
            true,
        ));
    }
    let t = |oid| repo.find_tree(oid).map_err(WorkshopError::git("read a tree"));
    let (base_tree, main_tree, task_tree) = (t(base)?, t(main)?, t(task)?);
    let head_tree = match repo.head().and_then(|h| h.peel_to_tree()) {
        Ok(tree) => tree,
        Err(_) => t(base)?,
    };
    let conflicts = uncommitted_conflicts(&changed, &main_tree, &head_tree, (&base_tree, &task_tree));
    if !conflicts.is_empty() {
        return Ok(refused(conflicts));
    }
    let mut opts = MergeOptions::new();
    opts.find_renames(true).fail_on_conflict(false);
    let mut merged =
        repo.merge_trees(&base_tree, &main_tree, &task_tree, Some(&opts)).map_err(WorkshopError::git("merge"))?;
    if merged.has_conflicts() {
        let branch = p.branch.as_deref().unwrap_or("the task's branch");
        return Ok(refused(merge_conflicts(&merged, branch, &p.task_id)?));
    }
    let result = merged.write_tree_to(&repo).map_err(WorkshopError::git("write the merged tree"))?;
    let result_tree = t(result)?;
    // What changes on disk: main working tree -> merged result.
    let mut plan: BTreeMap<String, Entry> = BTreeMap::new();
    for path in changed_paths(&repo, main, result)? {
        let target = entry(&result_tree, &path);
        plan.insert(path, target);
    }
    let conflicts = unsafe_writes(&root, &plan, &main_tree);
    if !conflicts.is_empty() {
        return Ok(refused(conflicts));
    }
    let written = write_plan(&repo, &root, &plan, &main_tree)?;
    Ok(ApplyResult {
        applied: true,
        already_applied: false,
        conflicts: Vec::new(),
        message: format!("applied: {} file(s) changed in the working tree, nothing staged or committed", written.len()),
        files: written,
    })
}

/// The changed paths the working tree changed too (uncommitted, and not
/// already to the task's content): applying would overwrite that work.
/// A path whose main-tree content is the task's base is no one's unsaved
/// work: a stacked task's base holds its parents' results, which apply put
/// there uncommitted (issue 32).
fn uncommitted_conflicts(
    changed: &[String],
    main_tree: &Tree,
    head_tree: &Tree,
    (base_tree, task_tree): (&Tree, &Tree),
) -> Vec<Conflict> {
    let mut conflicts = Vec::new();
    for path in changed {
        let (m, h, k) = (entry(main_tree, path), entry(head_tree, path), entry(task_tree, path));
        if m != h && m != k && m != entry(base_tree, path) {
            conflicts.push(Conflict {
                path: path.clone(),
                reason: "it has uncommitted changes in the working tree: commit or stash them, then apply again"
                    .to_owned(),
            });
        }
    }
    conflicts
}

/// The paths of a three-way merge that did not merge, once each, with the
/// advice to merge the task's branch by hand.
fn merge_conflicts(merged: &git2::Index, branch: &str, task_id: &str) -> Result<Vec<Conflict>, WorkshopError> {
    let mut conflicts: Vec<Conflict> = Vec::new();
    let mut seen = HashSet::new();
    for c in merged.conflicts().map_err(WorkshopError::git("list conflicts"))?.flatten() {
        let e = c.our.as_ref().or(c.their.as_ref()).or(c.ancestor.as_ref());
        let Some(e) = e else { continue };
        let path = String::from_utf8_lossy(&e.path).into_owned();
        if !seen.insert(path.clone()) {
            continue;
        }
        conflicts.push(Conflict {
            path,
            // Never "commit in the task's worktree": git run there reads the
            // agent's config (`core.fsmonitor`, hooks) and runs its commands
            // (issue 29). The patch comes from caesar instead.
            reason: format!(
                "the task and the commits made since its base changed it in ways that do not merge: bring the \
                 change in by hand in your own checkout (`caesar --json diff {task_id}` holds the whole patch, \
                 for `git apply --3way`; its branch {branch} holds only the agent's own commits); do not run git \
                 inside the task's worktree, whose git config is the agent's to write"
            ),
        });
    }
    Ok(conflicts)
}

/// The writes of `plan` that must not happen: a path whose way out of the
/// repository goes through a link, a submodule whose commit changed, and a
/// new file where an ignored or untracked one is in the way.
fn unsafe_writes(root: &Path, plan: &BTreeMap<String, Entry>, main_tree: &Tree) -> Vec<Conflict> {
    let mut conflicts = Vec::new();
    for (path, target) in plan {
        let full = root.join(path);
        // A directory on the way that is a link (an ignored `cache ->
        // /elsewhere`) would take the write out of the repository.
        if let Some(at) = safe_fs::parent_escape(root, Path::new(path)) {
            let shown = at.strip_prefix(root).unwrap_or(&at).display().to_string();
            conflicts.push(Conflict {
                path: path.clone(),
                reason: format!(
                    "`{shown}` on its way is a symbolic link or not a directory, so writing it could leave the \
                     repository: replace `{shown}` with a real directory (or remove it), then apply again"
                ),
            });
            continue;
        }
        if let Some((_, mode)) = target {
            if *mode == 0o160000 {
                conflicts.push(Conflict {
                    path: path.clone(),
                    reason: "it is a submodule whose commit changed: update the submodule by hand".to_owned(),
                });
            } else if entry(main_tree, path).is_none() && std::fs::symlink_metadata(&full).is_ok() {
                conflicts.push(Conflict {
                    path: path.clone(),
                    reason: "an ignored or untracked file is in the way: move it aside, then apply again".to_owned(),
                });
            }
        }
    }
    conflicts
}

/// Writes `plan` into the working tree at `root` and returns the paths
/// written; on a failure, puts back what it had written and fails.
fn write_plan(
    repo: &Repository,
    root: &Path,
    plan: &BTreeMap<String, Entry>,
    main_tree: &Tree,
) -> Result<Vec<String>, WorkshopError> {
    let mut written: Vec<String> = Vec::new();
    // Deletions first, so a directory can become a file and the reverse.
    let order = plan.iter().filter(|(_, t)| t.is_none()).chain(plan.iter().filter(|(_, t)| t.is_some()));
    for (path, target) in order {
        written.push(path.clone());
        if let Err(source) = put(repo, root, path, *target) {
            for done in written.iter().rev() {
                let _ = put(repo, root, done, entry(main_tree, done));
            }
            return Err(WorkshopError::ApplyFailed { root: root.to_path_buf(), file: path.clone(), source });
        }
    }
    Ok(written)
}

fn refused(conflicts: Vec<Conflict>) -> ApplyResult {
    ApplyResult {
        applied: false,
        already_applied: false,
        message: format!("not applied, nothing was written: {} conflicting file(s)", conflicts.len()),
        conflicts,
        files: Vec::new(),
    }
}

/// Makes `root/path` hold `target` (a blob and its mode), or removes it.
fn put(repo: &Repository, root: &Path, path: &str, target: Entry) -> std::io::Result<()> {
    let full = root.join(path);
    // Checked again just before the write, in case the tree changed since.
    if let Some(at) = safe_fs::parent_escape(root, Path::new(path)) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is a symbolic link or not a directory: caesar writes only inside the repository", at.display()),
        ));
    }
    if let Ok(meta) = std::fs::symlink_metadata(&full) {
        if meta.is_dir() {
            if target.is_none() {
                return Ok(());
            }
            std::fs::remove_dir(&full)?;
        } else {
            std::fs::remove_file(&full)?;
        }
    }
    let Some((oid, mode)) = target else {
        let mut dir = full.parent();
        while let Some(d) = dir {
            if d == root || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        return Ok(());
    };
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let blob = repo.find_blob(oid).map_err(std::io::Error::other)?;
    if mode == 0o120000 {
        let target = String::from_utf8_lossy(blob.content()).into_owned();
        #[cfg(unix)]
        return std::os::unix::fs::symlink(target, &full);
        #[cfg(not(unix))]
        return std::fs::write(&full, target);
    }
    std::fs::write(&full, blob.content())?;
    #[cfg(unix)]
    if mode == 0o100755 {
        use std::os::unix::fs::PermissionsExt;
        let mut perms = std::fs::metadata(&full)?.permissions();
        perms.set_mode(perms.mode() | 0o111);
        std::fs::set_permissions(&full, perms)?;
    }
    Ok(())
}

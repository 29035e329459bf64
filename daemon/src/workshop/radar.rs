//! The conflict radar's git side (issue 17): which files and which lines of
//! its base a piece of work touches (a task's worktree, or the user's
//! uncommitted changes), and where two such footprints overlap. Read with
//! libgit2 from trees only (the snapshot is written through a temporary
//! index, nothing is checked out), so it is cheap enough to recompute for
//! live tasks and to cache for finished ones by the tree they ended with.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{DiffOptions, Oid, Patch, Repository};

use super::snapshot::{excluded, snapshot};
use super::{Prepared, WorkshopError};
use crate::oacp::Isolation;

/// A whole file (an added file has no lines of the base to compare).
const WHOLE: (u32, u32) = (0, u32::MAX);

/// What a piece of work touches: for each path, the ranges of the base's
/// lines it changes (`[start, end)`, 1-based; an insertion is the one line
/// it goes after).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footprint {
    /// The tree compared from.
    pub base: String,
    /// The tree compared to (a cache key: the same tree, the same footprint).
    pub tree: String,
    pub files: BTreeMap<String, Vec<(u32, u32)>>,
}

/// Where two footprints meet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meeting {
    /// Paths both change.
    pub paths: Vec<String>,
    /// Paths where both change overlapping lines of the same base (or, with
    /// different bases, any path both change): a later apply conflicts.
    pub hunk_paths: Vec<String>,
}

impl Meeting {
    /// Whether the two touch nothing in common.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

/// The current tree of a worktree task, without diffing it: the key to
/// reuse a cached footprint.
pub fn current_tree(p: &Prepared) -> Result<String, WorkshopError> {
    let (repo, _) = repo_of(p)?;
    Ok(super::taskgit::task_tree(p, &repo)?.to_string())
}

/// The user's repository of a worktree task, and the task's base tree.
fn repo_of(p: &Prepared) -> Result<(Repository, Oid), WorkshopError> {
    if p.isolation != Isolation::Worktree {
        return Err(WorkshopError::Invalid("the radar reads worktree tasks only".to_owned()));
    }
    let Some(root) = &p.repo_root else { return Err(WorkshopError::NoRepository { path: p.workspace.clone() }) };
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let base = Oid::from_str(p.base_ref.as_deref().unwrap_or_default()).map_err(WorkshopError::git("read base_ref"))?;
    let base = repo.find_commit(base).map_err(WorkshopError::git("find base_ref"))?.tree_id();
    Ok((repo, base))
}

/// The footprint of a worktree task: its base commit's tree against its
/// tree (its end ref's once it ended; else a snapshot of its worktree now:
/// commits, uncommitted and untracked work). `known` is a footprint
/// computed before: returned as it is when the task's tree has not changed
/// since.
pub fn task_footprint(p: &Prepared, known: Option<&Footprint>) -> Result<Footprint, WorkshopError> {
    let (repo, base) = repo_of(p)?;
    let now = super::taskgit::task_tree(p, &repo)?;
    if let Some(k) = known.filter(|k| k.tree == now.to_string() && k.base == base.to_string()) {
        return Ok(k.clone());
    }
    footprint(&repo, base, now, &p.placed)
}

/// The footprint of the user's uncommitted changes in the main working tree
/// (HEAD's tree against a snapshot of the tree, untracked files included).
/// `skip` are paths caesar keeps there itself (the worktrees' directory).
pub fn uncommitted_footprint(repo_root: &Path, skip: &[String]) -> Result<Footprint, WorkshopError> {
    let repo = Repository::open(repo_root).map_err(WorkshopError::git(format!("open {}", repo_root.display())))?;
    let head = repo.head().and_then(|h| h.peel_to_tree()).map_err(WorkshopError::git("read HEAD's tree"))?.id();
    let now = snapshot(repo_root, skip, None)?;
    footprint(&repo, head, now, skip)
}

/// The lines of `from` that the change to `to` touches, by path.
pub fn footprint(repo: &Repository, from: Oid, to: Oid, placed: &[String]) -> Result<Footprint, WorkshopError> {
    let mut out = Footprint { base: from.to_string(), tree: to.to_string(), files: BTreeMap::new() };
    if from == to {
        return Ok(out);
    }
    let old = repo.find_tree(from).map_err(WorkshopError::git("read the base tree"))?;
    let new = repo.find_tree(to).map_err(WorkshopError::git("read the tree"))?;
    let mut opts = DiffOptions::new();
    opts.context_lines(0);
    let d = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts)).map_err(WorkshopError::git("diff"))?;
    for i in 0..d.deltas().len() {
        let Some(delta) = d.get_delta(i) else { continue };
        let file = delta.new_file().path().or_else(|| delta.old_file().path());
        let Some(path) = file.map(|p| p.to_string_lossy().replace('\\', "/")) else { continue };
        if excluded(&path, placed) {
            continue;
        }
        let mut ranges = Vec::new();
        let whole =
            delta.status() != git2::Delta::Modified || delta.old_file().is_binary() || delta.new_file().is_binary();
        if !whole && let Ok(Some(patch)) = Patch::from_diff(&d, i) {
            for h in 0..patch.num_hunks() {
                if let Ok((hunk, _)) = patch.hunk(h) {
                    let start = hunk.old_start();
                    ranges.push((start, start + hunk.old_lines().max(1)));
                }
            }
        }
        if ranges.is_empty() {
            ranges.push(WHOLE);
        }
        out.files.insert(path, ranges);
    }
    Ok(out)
}

/// Where two footprints meet.
pub fn meet(a: &Footprint, b: &Footprint) -> Meeting {
    let mut m = Meeting::default();
    let same_base = a.base == b.base;
    for (path, ra) in &a.files {
        let Some(rb) = b.files.get(path) else { continue };
        m.paths.push(path.clone());
        let lines_meet = ra.iter().any(|x| rb.iter().any(|y| x.0 < y.1 && y.0 < x.1));
        if !same_base || lines_meet {
            m.hunk_paths.push(path.clone());
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(base: &str, files: &[(&str, &[(u32, u32)])]) -> Footprint {
        Footprint {
            base: base.into(),
            tree: String::new(),
            files: files.iter().map(|(p, r)| (p.to_string(), r.to_vec())).collect(),
        }
    }

    #[test]
    fn footprints_meet_on_paths_and_on_lines() {
        let a = fp("b", &[("x.rs", &[(1, 3)]), ("y.rs", &[(10, 11)])]);
        let b = fp("b", &[("x.rs", &[(3, 5)]), ("y.rs", &[(10, 12)]), ("z.rs", &[WHOLE])]);
        let m = meet(&a, &b);
        assert_eq!(m.paths, ["x.rs", "y.rs"]);
        assert_eq!(m.hunk_paths, ["y.rs"], "x.rs: lines 1-2 and 3-4 do not overlap");
        let other_base = fp("c", &[("x.rs", &[(100, 101)])]);
        assert_eq!(meet(&a, &other_base).hunk_paths, ["x.rs"], "different bases: any shared path");
        assert!(meet(&a, &fp("b", &[("q.rs", &[WHOLE])])).is_empty());
    }
}

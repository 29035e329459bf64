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
    let known = known.filter(|k| k.base == base.to_string());
    if let Some(k) = known.filter(|k| k.tree == now.to_string()) {
        return Ok(k.clone());
    }
    match known.and_then(|k| Oid::from_str(&k.tree).ok().map(|t| (k, t))) {
        Some((k, before)) => footprint_since(&repo, k, before, now, &p.placed),
        None => footprint(&repo, base, now, &p.placed),
    }
}

/// `known` (the footprint of the tree `before`, against the same base)
/// brought to the tree `now`: only the paths that changed between the two
/// trees are diffed against the base again, so a refresh costs what changed
/// since the last one, not every file the task changed (issue 33 item 5).
fn footprint_since(
    repo: &Repository,
    known: &Footprint,
    before: Oid,
    now: Oid,
    placed: &[String],
) -> Result<Footprint, WorkshopError> {
    let base = Oid::from_str(&known.base).map_err(WorkshopError::git("read the footprint's base"))?;
    let (old, new) = (find_tree(repo, before)?, find_tree(repo, now)?);
    let d = repo.diff_tree_to_tree(Some(&old), Some(&new), None).map_err(WorkshopError::git("diff"))?;
    let mut moved: Vec<String> = Vec::new();
    for delta in d.deltas() {
        for f in [delta.old_file(), delta.new_file()] {
            if let Some(p) = f.path().map(|p| p.to_string_lossy().replace('\\', "/")) {
                moved.push(p);
            }
        }
    }
    moved.sort_unstable();
    moved.dedup();
    let mut out = known.clone();
    out.tree = now.to_string();
    let base = find_tree(repo, base)?;
    for p in moved {
        out.files.remove(&p);
        if excluded(&p, placed) {
            continue;
        }
        if let Some(ranges) = path_ranges(repo, &base, &new, &p) {
            out.files.insert(p, ranges);
        }
    }
    Ok(out)
}

/// The lines of `base`'s `path` that `now`'s changes, as [`footprint`]
/// reads them for one path; `None` when the path is as in the base.
fn path_ranges(repo: &Repository, base: &git2::Tree, now: &git2::Tree, path: &str) -> Option<Vec<(u32, u32)>> {
    let at = |t: &git2::Tree| t.get_path(Path::new(path)).ok().map(|e| (e.id(), e.filemode(), e.kind()));
    let (b, n) = (at(base), at(now));
    if b == n {
        return None;
    }
    let regular = |m: i32| m == 0o100644 || m == 0o100755;
    let mut ranges = Vec::new();
    if let (Some((bo, bm, Some(git2::ObjectType::Blob))), Some((no, nm, Some(git2::ObjectType::Blob)))) = (b, n)
        && (bm == nm || (regular(bm) && regular(nm)))
        && let (Ok(old), Ok(new)) = (repo.find_blob(bo), repo.find_blob(no))
        && !old.is_binary()
        && !new.is_binary()
    {
        let mut opts = DiffOptions::new();
        opts.context_lines(0);
        if let Ok(patch) = Patch::from_blobs(&old, None, &new, None, Some(&mut opts)) {
            for h in 0..patch.num_hunks() {
                if let Ok((hunk, _)) = patch.hunk(h) {
                    let start = hunk.old_start();
                    ranges.push((start, start + hunk.old_lines().max(1)));
                }
            }
        }
    }
    if ranges.is_empty() {
        ranges.push(WHOLE);
    }
    Some(ranges)
}

fn find_tree(repo: &Repository, id: Oid) -> Result<git2::Tree<'_>, WorkshopError> {
    repo.find_tree(id).map_err(WorkshopError::git("read a tree"))
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

    /// A tree of `files` (path, content, mode) written into `repo`.
    fn tree(repo: &Repository, files: &[(&str, &[u8], i32)]) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, content, mode) in files {
            let id = repo.blob(content).unwrap();
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: *mode as u32,
                uid: 0,
                gid: 0,
                file_size: content.len() as u32,
                id,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).unwrap();
        }
        index.write_tree_to(repo).unwrap()
    }

    /// A refresh from the last footprint diffs only what moved since, and
    /// answers what a full diff from the base answers: edits, additions,
    /// deletions, a file put back as in the base, a mode change, a binary
    /// file, a link, and a placed path left out (issue 33 item 5).
    #[test]
    fn a_refresh_from_the_last_footprint_equals_a_full_one() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let lines = |n: u32, changed: &[u32]| -> Vec<u8> {
            (1..=n)
                .map(|i| if changed.contains(&i) { format!("changed {i}\n") } else { format!("line {i}\n") })
                .collect::<String>()
                .into_bytes()
        };
        let (f, x, l) = (0o100644, 0o100755, 0o120000);
        let base_files: Vec<(String, Vec<u8>, i32)> =
            (0..40).map(|i| (format!("d{}/f{i}.txt", i / 10), lines(20, &[]), f)).collect();
        let mut base_files = base_files;
        base_files.push(("bin.dat".into(), vec![0, 1, 2, 0], f));
        base_files.push(("link".into(), b"d0/f0.txt".to_vec(), l));
        let view =
            |v: &[(String, Vec<u8>, i32)]| v.iter().map(|(p, c, m)| (p.clone(), c.clone(), *m)).collect::<Vec<_>>();
        let build = |v: &[(String, Vec<u8>, i32)]| {
            let refs: Vec<(&str, &[u8], i32)> = v.iter().map(|(p, c, m)| (p.as_str(), c.as_slice(), *m)).collect();
            tree(&repo, &refs)
        };
        let base = build(&base_files);
        let set = |v: &mut Vec<(String, Vec<u8>, i32)>, path: &str, content: Option<Vec<u8>>, mode: i32| {
            v.retain(|(p, _, _)| p != path);
            if let Some(c) = content {
                v.push((path.to_owned(), c, mode));
            }
        };
        let mut one = view(&base_files);
        set(&mut one, "d0/f1.txt", Some(lines(20, &[3, 4])), f);
        set(&mut one, "d0/f2.txt", Some(lines(20, &[10])), f);
        set(&mut one, "d1/f10.txt", None, f);
        set(&mut one, "new/a.txt", Some(lines(3, &[])), f);
        set(&mut one, "placed/p.txt", Some(lines(3, &[])), f);
        let one = build(&one);
        let mut two_files = view(&base_files);
        set(&mut two_files, "d0/f1.txt", Some(lines(20, &[3, 4, 18])), f);
        set(&mut two_files, "d1/f10.txt", None, f);
        set(&mut two_files, "new/a.txt", Some(lines(4, &[])), f);
        set(&mut two_files, "new/b.txt", Some(lines(2, &[])), f);
        set(&mut two_files, "d2/f20.txt", Some(lines(20, &[])), x);
        set(&mut two_files, "d3/f30.txt", Some(lines(21, &[1])), f);
        set(&mut two_files, "bin.dat", Some(vec![0, 1, 3, 0]), f);
        set(&mut two_files, "link", Some(b"d0/f0.txt\n".to_vec()), f);
        set(&mut two_files, "placed/p.txt", Some(lines(4, &[])), f);
        let two = build(&two_files);
        let placed = vec!["placed".to_owned()];
        let known = footprint(&repo, base, one, &placed).unwrap();
        assert!(known.files.contains_key("d0/f2.txt"), "{known:?}");
        let since = footprint_since(&repo, &known, one, two, &placed).unwrap();
        let full = footprint(&repo, base, two, &placed).unwrap();
        assert_eq!(since, full);
        assert!(!since.files.contains_key("d0/f2.txt"), "put back as in the base: {since:?}");
        assert_eq!(since.files["d0/f1.txt"], [(3, 5), (18, 19)]);
        assert!(!since.files.keys().any(|p| p.starts_with("placed")), "{since:?}");
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

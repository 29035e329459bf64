//! A task's own git directory (issue 29): git history out of its reach.
//!
//! A worktree task no longer gets a `git worktree` of the user's
//! repository, whose refs, objects, logs, config and hooks its agent could
//! write (it moved `main` and made a tag, with no apply). It gets a git
//! directory of its own beside its worktree, `<root>/.caesar/wt/<id>.git`,
//! that borrows the user's objects (`objects/info/alternates`) and holds
//! its own refs, index, config and hooks; the worktree's `.git` file names
//! it, so git works there as before. Only that directory and the worktree
//! are writable to the agent (`sandbox.rs`); the user's `.git` is not.
//!
//! When the task ends, [`capture`] brings its result into the user's
//! repository: the agent's commits (copied object by object from the
//! task's store, never by running git there) become the task's branch, and
//! the tree of its worktree becomes `refs/caesar/tasks/<id>/end`, from which
//! diff, apply, the radar and gc read it. The daemon never opens the task's
//! repository through a path the agent controls: the objects are read from
//! the directory the daemon made (its parent is not the agent's to write),
//! after the files there that are not regular files are removed, and its
//! refs are read without following a link.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Odb, Oid, Repository, RepositoryInitOptions};

use super::snapshot::{self, CACHE_INDEX, Stat};
use super::{Prepared, WorkshopError};

/// How many objects of the agent's commits [`capture`] copies at most.
const OBJECT_CAP: usize = 500_000;
/// The cap on a ref file, `HEAD` or `packed-refs` of a task's git directory.
const REF_CAP: u64 = 4 * 1024 * 1024;

/// The ref that holds a task's result in the user's repository: a commit
/// whose tree is its worktree's at its end (beside the Kubernetes runner's
/// `base` and `result` of the same task, so not `refs/caesar/tasks/<id>`
/// itself, which git cannot keep beside them).
pub fn end_ref(task_id: &str) -> String {
    format!("refs/caesar/tasks/{task_id}/end")
}

/// The task's git directory beside its worktree.
pub(super) fn git_dir_of(wt_path: &Path) -> PathBuf {
    let name = wt_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    wt_path.with_file_name(format!("{name}.git"))
}

/// The daemon's directory for a task's temporary files: its daemon part,
/// or, for a task prepared before it was recorded, the temporary directory.
pub(super) fn scratch_of(p: &Prepared) -> PathBuf {
    p.scratch.clone().filter(|s| s.is_dir()).unwrap_or_else(std::env::temp_dir)
}

/// Removes whatever is at `path` (a directory, a file or a link), if anything.
pub(super) fn remove_any(path: &Path) -> Result<(), WorkshopError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).map_err(WorkshopError::io("remove", path)),
        Ok(_) => std::fs::remove_file(path).map_err(WorkshopError::io("remove", path)),
        Err(_) => Ok(()),
    }
}

/// Makes the worktree `wt_path` on `branch` at `commit`, with its own git
/// directory borrowing `user`'s objects, and the daemon's index of it in
/// `scratch`. `branch` is made (or moved back) in the user's repository
/// too, at the base: the task's branch, which [`capture`] moves to the
/// agent's commits.
pub(super) fn make(
    user: &Repository,
    wt_path: &Path,
    branch: &str,
    commit: &git2::Commit,
    scratch: Option<&Path>,
) -> Result<PathBuf, WorkshopError> {
    let git_dir = git_dir_of(wt_path);
    // What an interrupted preparation of this very task left.
    remove_any(wt_path)?;
    remove_any(&git_dir)?;
    super::refs::write_retrying(|| user.branch(branch, commit, true))
        .map_err(WorkshopError::git(format!("create {branch}")))?;
    let mut o = RepositoryInitOptions::new();
    o.bare(true).no_reinit(true).mkpath(false).external_template(false);
    Repository::init_opts(&git_dir, &o).map_err(WorkshopError::git(format!("create {}", git_dir.display())))?;
    let objects = user.commondir().join("objects");
    let info = git_dir.join("objects/info");
    std::fs::create_dir_all(&info).map_err(WorkshopError::io("create", &info))?;
    let alternates = info.join("alternates");
    std::fs::write(&alternates, format!("{}\n", objects.display())).map_err(WorkshopError::io("write", &alternates))?;
    // The user's ignore rules and the settings git's checkout and commits
    // read, not its hooks, filters or other programs.
    let exclude = user.commondir().join("info/exclude");
    if let Ok(text) = crate::safe_fs::read_capped(&exclude, REF_CAP) {
        let to = git_dir.join("info/exclude");
        let _ = std::fs::create_dir_all(git_dir.join("info"));
        std::fs::write(&to, text).map_err(WorkshopError::io("write", &to))?;
    }
    let task = Repository::open_bare(&git_dir).map_err(WorkshopError::git(format!("open {}", git_dir.display())))?;
    {
        let mut cfg = task.config().map_err(WorkshopError::git("read the task's git config"))?;
        cfg.set_bool("core.bare", false).map_err(WorkshopError::git("write the task's git config"))?;
        if let Ok(local) = user.config().and_then(|c| c.open_level(git2::ConfigLevel::Local)) {
            for key in ["user.name", "user.email", "core.autocrlf", "core.eol", "core.filemode", "core.symlinks"] {
                if let Ok(v) = local.get_string(key) {
                    let _ = cfg.set_str(key, &v);
                }
            }
        }
    }
    let head = format!("refs/heads/{branch}");
    task.reference(&head, commit.id(), true, "caesar: the task's base")
        .map_err(WorkshopError::git(format!("create {branch}")))?;
    task.set_head(&head).map_err(WorkshopError::git("set the task's HEAD"))?;
    std::fs::create_dir_all(wt_path).map_err(WorkshopError::io("create", wt_path))?;
    let dotgit = wt_path.join(".git");
    std::fs::write(&dotgit, format!("gitdir: {}\n", git_dir.display())).map_err(WorkshopError::io("write", &dotgit))?;
    // Checked out by the daemon before any agent runs: the index it leaves
    // is the daemon's to trust, and becomes its own index of the worktree.
    let w = Repository::open(wt_path).map_err(WorkshopError::git(format!("open {}", wt_path.display())))?;
    let base = w.find_commit(commit.id()).map_err(WorkshopError::git("read the base through the task's store"))?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.force();
    w.checkout_tree(base.as_object(), Some(&mut co))
        .map_err(WorkshopError::git(format!("check out the base in {}", wt_path.display())))?;
    // The index again from the base tree: the same entries and stat data,
    // plus the tree cache the checkout leaves out, which halves the cost of
    // every later snapshot.
    let tree = base.tree().map_err(WorkshopError::git("read the base tree"))?;
    w.index()
        .and_then(|mut idx| idx.read_tree(&tree).and_then(|()| idx.write()))
        .map_err(WorkshopError::git(format!("index the worktree {}", wt_path.display())))?;
    if let Some(scratch) = scratch {
        let cache = scratch.join(CACHE_INDEX);
        let _ = std::fs::remove_file(&cache);
        let from = git_dir.join("index");
        let mut to = snapshot::exclusive(&cache).map_err(WorkshopError::io("create", &cache))?;
        let mut from = std::fs::File::open(&from).map_err(WorkshopError::io("read", &from))?;
        std::io::copy(&mut from, &mut to).map_err(WorkshopError::io("write", &cache))?;
    }
    Ok(git_dir)
}

/// The tree of a task's worktree now, read through the user's repository
/// `root` with the daemon's own index of it; `tracked` as in
/// [`snapshot::snapshot_worktree`].
pub(super) fn worktree_tree(p: &Prepared, root: &Path, wt: &Path, tracked: Option<Oid>) -> Result<Oid, WorkshopError> {
    let scratch = scratch_of(p);
    // Only a task's own daemon part holds its index.
    let cache = p.scratch.as_deref().filter(|s| s.is_dir()).map(|s| s.join(CACHE_INDEX));
    let seed = p.base_ref.as_deref().and_then(|b| Oid::from_str(b).ok()).and_then(|b| {
        let repo = Repository::open(root).ok()?;
        repo.find_commit(b).ok().map(|c| c.tree_id())
    });
    snapshot::snapshot_worktree(root, wt, &p.placed, (Stat::Cache { path: cache.as_deref(), seed }, tracked), &scratch)
}

/// Whether the worktree directory is there (not its `.git`, the agent's).
pub(super) fn worktree_present(p: &Prepared) -> bool {
    p.worktree.as_deref().is_some_and(|w| std::fs::symlink_metadata(w).is_ok_and(|m| m.is_dir()))
}

/// The tree the task's work is: its end ref's once it ended, else its
/// worktree's now. `WorktreeGone` when it has neither.
pub(super) fn task_tree(p: &Prepared, repo: &Repository) -> Result<Oid, WorkshopError> {
    if let Some(tree) = end_tree(p, repo) {
        return Ok(tree);
    }
    let root = p.repo_root.clone().unwrap_or_default();
    let wt = p.worktree.clone().unwrap_or_default();
    if !worktree_present(p) {
        return Err(WorkshopError::WorktreeGone { path: wt });
    }
    worktree_tree(p, &root, &wt, None)
}

/// The tree of the task's end ref, when it has one.
pub(super) fn end_tree(p: &Prepared, repo: &Repository) -> Option<Oid> {
    let r = repo.find_reference(&end_ref(&p.task_id)).ok()?;
    r.peel_to_tree().ok().map(|t| t.id())
}

/// At a worktree task's end: its worktree's tree and its agent's commits
/// into the user's repository, as `refs/caesar/tasks/<id>/end` and the
/// task's branch. The commits are brought in as well as they can be (what
/// the agent left may be broken); the tree always is. Returns the end ref's
/// commit.
pub fn capture(p: &Prepared) -> Result<Option<Oid>, WorkshopError> {
    let (Some(root), Some(base)) = (&p.repo_root, p.base_ref.as_deref()) else { return Ok(None) };
    if p.isolation != crate::oacp::Isolation::Worktree || !worktree_present(p) {
        return Ok(None);
    }
    let wt = p.worktree.clone().unwrap_or_default();
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let base = Oid::from_str(base).map_err(WorkshopError::git("read base_ref"))?;
    let branch = p.branch.as_deref().unwrap_or_default();
    let tip = match &p.git_dir {
        Some(git_dir) => match bring_commits(&repo, git_dir) {
            Ok(tip) => tip,
            Err(e) => {
                tracing::warn!(task_id = p.task_id, "the agent's commits were not brought in: {e}");
                None
            }
        },
        None => repo.find_branch(branch, git2::BranchType::Local).ok().and_then(|b| b.get().target()),
    };
    // What the agent's HEAD names must be a commit to be one's parent.
    let tip = tip.filter(|t| repo.find_commit(*t).is_ok());
    let parent = tip.unwrap_or(base);
    let parent_commit = repo.find_commit(parent).map_err(WorkshopError::git("read the task's last commit"))?;
    let tracked = tip.map(|_| parent_commit.tree_id());
    let tree = worktree_tree(p, root, &wt, tracked)?;
    let end = if parent_commit.tree_id() == tree {
        parent
    } else {
        let tree = repo.find_tree(tree).map_err(WorkshopError::git("read the task's tree"))?;
        let sig = git2::Signature::now("caesar", "caesar@localhost").map_err(WorkshopError::git("sign"))?;
        let msg = format!("caesar: the worktree of task {} at its end", p.task_id);
        repo.commit(None, &sig, &sig, &msg, &tree, &[&parent_commit])
            .map_err(WorkshopError::git("commit the task's worktree"))?
    };
    super::refs::write_retrying(|| repo.reference(&end_ref(&p.task_id), end, true, "caesar: the task ended"))
        .map_err(WorkshopError::git(format!("write {}", end_ref(&p.task_id))))?;
    if p.git_dir.is_some()
        && let Some(tip) = tip
        && git2::Branch::name_is_valid(branch).unwrap_or(false)
    {
        let name = format!("refs/heads/{branch}");
        super::refs::write_retrying(|| repo.reference(&name, tip, true, "caesar: the task's commits"))
            .map_err(WorkshopError::git(format!("move {branch}")))?;
    }
    Ok(Some(end))
}

/// Copies the commit the task's `HEAD` names, and every object it reaches
/// that the user's repository lacks, from the task's git directory into
/// the user's repository. `None` when the task's `HEAD` names no commit.
fn bring_commits(user: &Repository, git_dir: &Path) -> Result<Option<Oid>, String> {
    let objects = git_dir.join("objects");
    // Only directories of the daemon's making are read and walked: not a
    // link an agent put in their place, which would send both elsewhere.
    for dir in [git_dir, objects.as_path()] {
        if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            return Err(format!("{} is not a directory (the agent's doing)", dir.display()));
        }
    }
    let Some(tip) = read_head(git_dir)? else { return Ok(None) };
    screen(&objects, 0)?;
    // The store's alternates are put back as the daemon made them (the
    // user's objects), whatever the agent wrote there.
    let alternates = objects.join("info/alternates");
    remove_any(&alternates).map_err(|e| e.to_string())?;
    if let Some(info) = alternates.parent() {
        let _ = std::fs::create_dir_all(info);
    }
    let mut made = snapshot::exclusive(&alternates).map_err(|e| format!("write {}: {e}", alternates.display()))?;
    std::io::Write::write_all(&mut made, format!("{}\n", user.commondir().join("objects").display()).as_bytes())
        .map_err(|e| format!("write {}: {e}", alternates.display()))?;
    let from = Odb::new().map_err(|e| e.to_string())?;
    from.add_disk_alternate(&objects.display().to_string()).map_err(|e| e.to_string())?;
    let to = user.odb().map_err(|e| e.to_string())?;
    let mut stack = vec![tip];
    let mut seen = HashSet::new();
    while let Some(oid) = stack.pop() {
        if !seen.insert(oid) || to.exists(oid) {
            continue;
        }
        if seen.len() > OBJECT_CAP {
            return Err(format!("the task's commits reach more than {OBJECT_CAP} new objects"));
        }
        let obj = from.read(oid).map_err(|e| format!("object {oid}: {e}"))?;
        match obj.kind() {
            ObjectType::Commit => stack.extend(commit_links(obj.data())),
            ObjectType::Tree => stack.extend(tree_links(obj.data())?),
            ObjectType::Tag => stack.extend(header_oids(obj.data(), "object ")),
            _ => {}
        }
        to.write(obj.kind(), obj.data()).map_err(|e| format!("copy {oid}: {e}"))?;
    }
    Ok(Some(tip))
}

/// Removes every entry beneath `dir` that is neither a directory nor a
/// regular file (a FIFO on which libgit2 would block, a link out of the
/// store): only an agent makes them.
fn screen(dir: &Path, depth: u32) -> Result<(), String> {
    if depth > 3 {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(t) = entry.file_type() else { continue };
        if t.is_dir() {
            screen(&path, depth + 1)?;
        } else if !t.is_file() {
            tracing::warn!("{} is not a regular file (an agent's doing): removed", path.display());
            std::fs::remove_file(&path).map_err(|e| format!("remove {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// The commit the task's `HEAD` names (through one branch), read without
/// following a link; `None` without one.
fn read_head(git_dir: &Path) -> Result<Option<Oid>, String> {
    let head = crate::safe_fs::read_beneath_to_string(git_dir, Path::new("HEAD"), REF_CAP)
        .map_err(|e| format!("read the task's HEAD: {e}"))?;
    let head = head.trim();
    let Some(name) = head.strip_prefix("ref:").map(str::trim) else { return Ok(Oid::from_str(head).ok()) };
    if !name.starts_with("refs/") || !git2::Reference::is_valid_name(name) {
        return Err(format!("the task's HEAD names `{name}`, which is not a ref"));
    }
    match crate::safe_fs::read_beneath_to_string(git_dir, Path::new(name), REF_CAP) {
        Ok(text) => return Ok(Oid::from_str(text.trim()).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("read {name}: {e}")),
    }
    let packed = match crate::safe_fs::read_beneath_to_string(git_dir, Path::new("packed-refs"), REF_CAP) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("read packed-refs: {e}")),
    };
    Ok(packed.lines().find_map(|l| {
        let (oid, r) = l.split_once(' ')?;
        (r.trim() == name).then(|| Oid::from_str(oid).ok()).flatten()
    }))
}

/// The oids after `prefix` on the header lines of a commit or tag.
fn header_oids(data: &[u8], prefix: &str) -> Vec<Oid> {
    let text = String::from_utf8_lossy(data);
    text.lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|o| Oid::from_str(o.trim()).ok())
        .collect()
}

/// A commit's tree and parents.
fn commit_links(data: &[u8]) -> Vec<Oid> {
    let mut out = header_oids(data, "tree ");
    out.extend(header_oids(data, "parent "));
    out
}

/// A tree's entries (`<mode> <name>\0<20 bytes>` each), but submodules
/// (`160000`), whose commits are another repository's.
fn tree_links(data: &[u8]) -> Result<Vec<Oid>, String> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let nul = rest.iter().position(|&b| b == 0).ok_or("a tree entry without its name's end")?;
        let head = &rest[..nul];
        let id = rest.get(nul + 1..nul + 21).ok_or("a tree entry without its id")?;
        if !head.starts_with(b"160000 ") {
            out.push(Oid::from_bytes(id).map_err(|e| e.to_string())?);
        }
        rest = &rest[nul + 21..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_and_commits_name_what_they_reach() {
        let a = [1u8; 20];
        let b = [2u8; 20];
        let mut tree = b"100644 a.txt\0".to_vec();
        tree.extend(a);
        tree.extend(b"160000 sub\0");
        tree.extend(b);
        assert_eq!(tree_links(&tree).unwrap(), vec![Oid::from_bytes(&a).unwrap()], "a submodule is not followed");
        assert!(tree_links(b"100644 broken").is_err());
        let t = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let p = "0123456789012345678901234567890123456789";
        let commit = format!("tree {t}\nparent {p}\nauthor a <a> 0 +0000\n\nparent {t}\n");
        let links: Vec<String> = commit_links(commit.as_bytes()).iter().map(Oid::to_string).collect();
        assert_eq!(links, [t, p], "the message is not read");
    }
}

//! Carving protected paths out of a writable directory with mounts rather
//! than Landlock rules (issue 33), where the agent has a mount namespace.
//!
//! Landlock can only grant: to keep caesar's directories (or a read-only
//! task's workspace) out of reach beneath a writable `/tmp`, [`super::carve`]
//! replaces `/tmp` by one rule per entry of it, level by level. That costs a
//! rule (an open and a system call) per entry of `/tmp` at every box's
//! start, and it refuses entries made in `/tmp` after the box started. In a
//! mount namespace the same confinement needs no rule per entry: the
//! writable root keeps its one rule, and beneath it
//!
//! - every directory between the root and a protected path is bound
//!   read-only over itself (no new entry in it, none of its entries removed
//!   or renamed, and, being a mount point, it cannot itself be renamed or
//!   removed), its other entries bound back over themselves as they were;
//! - the protected path is bound read-only over itself (or hidden, for
//!   caesar's state, config and runtime directories: [`super::mount`]), a
//!   writable path named inside a shielded one bound back as it was.
//!
//! What the kernel then refuses is what the carving refused, but for new
//! entries directly in the writable root, which are now the agent's (a
//! write there was refused for an entry that appeared after the box
//! started). [`plan`] says `None` where mounts cannot say the same (a link
//! or a missing directory on the way, too many entries): the caller carves
//! with Landlock then.

use std::path::{Path, PathBuf};

/// At most this many entries bound back (the child keeps their cloned
/// trees in a fixed array: it cannot allocate).
pub const MAX_KEEP: usize = 64;

/// At most this many directories bound read-only.
const MAX_READ_ONLY: usize = 64;

/// The mounts that stand for the carving.
#[derive(Debug, Default, PartialEq)]
pub struct Carve {
    /// The directories between a writable root and a protected path,
    /// outermost first: bound read-only over themselves.
    pub ro_dirs: Vec<PathBuf>,
    /// Their other entries: bound back over themselves as they were, after
    /// the directories above.
    pub keep: Vec<PathBuf>,
    /// The protected and shielded paths that are not hidden: bound
    /// read-only over themselves once the hidden directories are in place.
    pub ro_trees: Vec<PathBuf>,
    /// Writable paths beneath one of the above: bound back as they were,
    /// last.
    pub keep_inside: Vec<PathBuf>,
}

/// The carving of `protect` and `shield` out of `writable` ([`super::carve_all`])
/// as mounts, given the directories hidden (tmpfs) and re-exposed beneath
/// them in the namespace ([`super::mount::dirs`]). Returns the writable
/// paths for Landlock (uncarved: the writable roots but those in a
/// protected path) and the mounts; `None` where mounts cannot stand for it.
pub fn plan(
    writable: &[PathBuf],
    protect: &[PathBuf],
    shield: &[PathBuf],
    hidden: &[PathBuf],
    exposed: &[PathBuf],
) -> Option<(Vec<PathBuf>, Carve)> {
    let roots: Vec<PathBuf> = writable.iter().filter(|w| !protect.iter().any(|p| w.starts_with(p))).cloned().collect();
    let targets: Vec<&PathBuf> = protect.iter().chain(shield).collect();
    let beneath_hidden = |p: &Path| hidden.iter().any(|h| p.starts_with(h));
    // A path beneath a hidden directory exists in the namespace only inside a re-exposed one.
    let reachable = |p: &Path| !beneath_hidden(p) || exposed.iter().any(|e| p.starts_with(e));
    let mut carve = Carve::default();
    // A target inside another that is bound read-only whole is out of reach
    // with it: carving it too would bind the outer one's other entries back
    // writable (a read-only task in a subdirectory of its project, both
    // protected; a worktree task's project in a subdirectory of its main
    // repository, both shielded). A target beneath a hidden directory is
    // still carved: the tmpfs is not bound over what is re-exposed in it.
    let bound_whole = |t: &Path| !beneath_hidden(t) && !roots.iter().any(|r| r == t);
    let covered = |h: &Path| targets.iter().any(|t| h.starts_with(t) && h != t.as_path() && bound_whole(t));
    for w in &roots {
        for h in targets.iter().filter(|h| h.starts_with(w) && h.as_path() != w.as_path() && !covered(h)) {
            // A writable root named as it stays writable, as the carving keeps it.
            if roots.iter().any(|r| r == *h) {
                continue;
            }
            let rel = h.strip_prefix(w).ok()?;
            let parts: Vec<_> = rel.components().collect();
            let mut at = w.clone();
            for part in &parts[..parts.len().saturating_sub(1)] {
                at.push(part);
                if beneath_hidden(&at) {
                    break;
                }
                let meta = std::fs::symlink_metadata(&at).ok()?;
                if !meta.is_dir() {
                    // A link on the way, or a file: the carving's own answer.
                    return None;
                }
                if !carve.ro_dirs.contains(&at) {
                    carve.ro_dirs.push(at.clone());
                }
            }
            if hidden.contains(h) || !reachable(h) {
                continue;
            }
            match std::fs::symlink_metadata(h) {
                Ok(m) if m.file_type().is_symlink() => return None,
                Ok(_) => {
                    if !carve.ro_trees.contains(h) {
                        carve.ro_trees.push((*h).clone());
                    }
                }
                // Missing right beneath the root: only Landlock refuses its making.
                Err(_) if h.parent() == Some(w.as_path()) => return None,
                // Missing beneath a read-only directory: it cannot be made.
                Err(_) => {}
            }
        }
    }
    carve.ro_dirs.sort_by_key(|d| d.components().count());
    for dir in &carve.ro_dirs {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            let on_the_way = carve.ro_dirs.contains(&path) || targets.iter().any(|t| **t == path);
            if entry.file_type().is_ok_and(|t| t.is_symlink()) || on_the_way || beneath_hidden(&path) {
                continue;
            }
            carve.keep.push(path);
        }
    }
    // A writable root beneath a read-only bind and not in an entry bound back.
    for r in &roots {
        let covered = carve.ro_trees.iter().chain(&carve.ro_dirs).any(|d| r.starts_with(d) && r != d);
        let kept = carve.keep.iter().any(|k| r.starts_with(k));
        if covered && !kept && !beneath_hidden(r) && !carve.ro_dirs.contains(r) && r.exists() {
            carve.keep_inside.push(r.clone());
        }
    }
    if carve.keep.len() + carve.keep_inside.len() > MAX_KEEP
        || carve.ro_dirs.len() + carve.ro_trees.len() > MAX_READ_ONLY
    {
        return None;
    }
    Some((roots, carve))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caesars_home_under_a_writable_root_is_bound_read_only_with_its_other_entries_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        for s in
            ["tmp/home/state/tasks/t_1", "tmp/home/config", "tmp/home/run", "tmp/home/files", "tmp/ws", "tmp/other"]
        {
            std::fs::create_dir_all(p(s)).unwrap();
        }
        std::fs::write(p("tmp/home/note"), "").unwrap();
        std::os::unix::fs::symlink(p("tmp/ws"), p("tmp/home/link")).unwrap();
        let writable = [p("tmp"), p("tmp/home/state/tasks/t_1")];
        let shield = [p("tmp/home/state"), p("tmp/home/config"), p("tmp/home/run")];
        let hidden = [p("tmp/home/state"), p("tmp/home/config")];
        let (roots, mut c) =
            plan(&writable, &[p("tmp/ws")], &shield, &hidden, &[p("tmp/home/state/tasks/t_1")]).unwrap();
        // One rule for the root, however many entries it has.
        assert_eq!(roots, writable);
        assert_eq!(c.ro_dirs, [p("tmp/home")]);
        c.keep.sort();
        assert_eq!(c.keep, [p("tmp/home/files"), p("tmp/home/note")], "the link and the carved paths are not kept");
        assert_eq!(c.ro_trees, [p("tmp/ws"), p("tmp/home/run")], "hidden directories are the tmpfs's");
        assert!(c.keep_inside.is_empty());
    }

    #[test]
    fn a_writable_path_inside_a_shielded_one_is_bound_back() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        std::fs::create_dir_all(p("tmp/proj/.git/worktrees/t_1")).unwrap();
        let writable = [p("tmp"), p("tmp/proj/.git/worktrees/t_1")];
        let (roots, c) = plan(&writable, &[], &[p("tmp/proj")], &[], &[]).unwrap();
        assert_eq!(roots, writable);
        assert!(c.ro_dirs.is_empty());
        assert_eq!(c.ro_trees, [p("tmp/proj")]);
        assert_eq!(c.keep_inside, [p("tmp/proj/.git/worktrees/t_1")]);
        // A writable path inside a protected one is dropped, as the carving drops it.
        let (roots, _) = plan(&writable, &[p("tmp/proj")], &[], &[], &[]).unwrap();
        assert_eq!(roots, [p("tmp")]);
    }

    /// A read-only task in a subdirectory of its project beneath a
    /// writable root: the project is protected whole, its subdirectory's
    /// siblings are not bound back writable.
    #[test]
    fn a_protected_path_inside_another_binds_nothing_back_inside_it() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        std::fs::create_dir_all(p("tmp/x/proj/sub")).unwrap();
        std::fs::write(p("tmp/x/proj/README.md"), "").unwrap();
        std::fs::write(p("tmp/x/other"), "").unwrap();
        // The repository root as libgit2 names it, with a trailing slash.
        let proj = PathBuf::from(format!("{}/", p("tmp/x/proj").display()));
        let (_, c) = plan(&[p("tmp")], &[p("tmp/x/proj/sub"), proj], &[], &[], &[]).unwrap();
        assert_eq!(c.ro_dirs, [p("tmp/x")]);
        assert_eq!(c.keep, [p("tmp/x/other")], "nothing inside the project is bound back");
        assert_eq!(c.ro_trees.len(), 1, "{:?}", c.ro_trees);
        assert!(c.ro_trees[0] == p("tmp/x/proj"), "{:?}", c.ro_trees);
    }

    /// The same for shielded paths (a worktree task's project in a
    /// subdirectory of its main repository), but beneath a hidden directory,
    /// whose tmpfs does not cover what is re-exposed in it.
    #[test]
    fn a_shielded_path_inside_another_binds_nothing_back_inside_it() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        for s in ["tmp/repo/proj", "tmp/home/state/wt/ws"] {
            std::fs::create_dir_all(p(s)).unwrap();
        }
        std::fs::write(p("tmp/repo/README.md"), "").unwrap();
        let (_, c) = plan(&[p("tmp")], &[], &[p("tmp/repo/proj"), p("tmp/repo")], &[], &[]).unwrap();
        assert!(c.keep.iter().all(|k| !k.starts_with(p("tmp/repo"))), "{:?}", c.keep);
        assert_eq!(c.ro_trees, [p("tmp/repo")]);
        // Re-exposed beneath a hidden directory: still bound read-only itself.
        let hidden = [p("tmp/home/state")];
        let (_, c) =
            plan(&[p("tmp")], &[p("tmp/home/state/wt/ws")], &hidden, &hidden, &[p("tmp/home/state/wt/ws")]).unwrap();
        assert!(c.ro_trees.contains(&p("tmp/home/state/wt/ws")), "{:?}", c.ro_trees);
    }

    #[test]
    fn what_mounts_cannot_say_is_left_to_landlock() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        std::fs::create_dir_all(p("tmp/real/state")).unwrap();
        std::os::unix::fs::symlink(p("tmp/real"), p("tmp/link")).unwrap();
        // A link on the way to a protected path.
        assert!(plan(&[p("tmp")], &[], &[p("tmp/link/state")], &[], &[]).is_none());
        // A protected path missing right beneath the root: only Landlock refuses its making.
        assert!(plan(&[p("tmp")], &[], &[p("tmp/config")], &[], &[]).is_none());
        // Missing beneath a directory bound read-only: it cannot be made there.
        assert!(plan(&[p("tmp")], &[], &[p("tmp/real/config")], &[], &[]).is_some());
        // Too many entries to bind back.
        for i in 0..=MAX_KEEP {
            std::fs::create_dir(p(&format!("tmp/real/e{i}"))).unwrap();
        }
        assert!(plan(&[p("tmp")], &[], &[p("tmp/real/state")], &[], &[]).is_none());
    }
}

//! The base of a stacked task (issue 32): its parents' results merged.
//!
//! Each parent's result is its end commit, `refs/caesar/tasks/<id>/end`
//! ([`super::end_ref`], made by [`super::capture`] when the parent ended).
//! One result is the base as it is; several are merged with libgit2's
//! `merge_commits` (each against their merge base), one after the other,
//! into a commit of the user's repository whose parents are theirs. A
//! conflict between two parents' results is the child's failure, naming
//! the paths. A parent without a result (it ran in place, or not in this
//! repository) contributes nothing. Blocking (git).

use std::path::Path;

use git2::{Oid, Repository};

use super::{WorkshopError, end_ref};

/// Why a stacked task's base could not be made.
#[derive(Debug)]
pub enum StackBaseError {
    /// Two parents changed the same lines: `later`'s result conflicts with
    /// what `earlier` (one or more parents) made, in `paths`.
    Conflict {
        earlier: Vec<String>,
        later: String,
        paths: Vec<String>,
    },
    Workshop(WorkshopError),
}

impl std::fmt::Display for StackBaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackBaseError::Conflict { earlier, later, paths } => write!(
                f,
                "its parents' results do not merge: {later}'s changes conflict with {}'s in {}; \
                 make one parent build on the other (depends_on), or delegate again once they are reconciled",
                earlier.join(" and "),
                paths.join(", ")
            ),
            StackBaseError::Workshop(e) => write!(f, "{e}"),
        }
    }
}

impl From<WorkshopError> for StackBaseError {
    fn from(e: WorkshopError) -> StackBaseError {
        StackBaseError::Workshop(e)
    }
}

/// The merged base of `child` from the results of `parents` (in order) in
/// the repository at `root`: `None` when no parent left a result, with the
/// parents whose results it holds.
pub fn merged_base(root: &Path, child: &str, parents: &[String]) -> Result<(Option<Oid>, Vec<String>), StackBaseError> {
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let mut base: Option<Oid> = None;
    let mut merged: Vec<String> = Vec::new();
    for parent in parents {
        let Ok(end) = repo.find_reference(&end_ref(parent)) else { continue };
        let end = end.peel_to_commit().map_err(WorkshopError::git(format!("read {}", end_ref(parent))))?.id();
        base = Some(match base {
            None => end,
            Some(acc) => merge_two(&repo, child, acc, end, &merged, parent)?,
        });
        merged.push(parent.clone());
    }
    Ok((base, merged))
}

/// `acc` (the results of `earlier`) and `next` (the result of `later`) merged.
fn merge_two(
    repo: &Repository,
    child: &str,
    acc: Oid,
    next: Oid,
    earlier: &[String],
    later: &str,
) -> Result<Oid, StackBaseError> {
    if acc == next || repo.graph_descendant_of(acc, next).unwrap_or(false) {
        return Ok(acc);
    }
    if repo.graph_descendant_of(next, acc).unwrap_or(false) {
        return Ok(next);
    }
    let (a, b) = (
        repo.find_commit(acc).map_err(WorkshopError::git("read a parent's result"))?,
        repo.find_commit(next).map_err(WorkshopError::git("read a parent's result"))?,
    );
    let mut index = repo.merge_commits(&a, &b, None).map_err(WorkshopError::git("merge the parents' results"))?;
    if index.has_conflicts() {
        let mut paths: Vec<String> = Vec::new();
        for c in index.conflicts().map_err(WorkshopError::git("list conflicts"))?.flatten() {
            let e = c.our.as_ref().or(c.their.as_ref()).or(c.ancestor.as_ref());
            if let Some(e) = e {
                let p = String::from_utf8_lossy(&e.path).into_owned();
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        return Err(StackBaseError::Conflict { earlier: earlier.to_vec(), later: later.to_owned(), paths });
    }
    let tree = index.write_tree_to(repo).map_err(WorkshopError::git("write the merged tree"))?;
    let tree = repo.find_tree(tree).map_err(WorkshopError::git("read the merged tree"))?;
    let sig = git2::Signature::now("caesar", "caesar@localhost").map_err(WorkshopError::git("sign"))?;
    let msg = format!("caesar: the base of task {child}, its parents' results merged");
    Ok(repo.commit(None, &sig, &sig, &msg, &tree, &[&a, &b]).map_err(WorkshopError::git("commit the merged base"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &Repository, parent: Option<Oid>, files: &[(&str, &str)]) -> Oid {
        let mut tb = match parent {
            Some(p) => repo.treebuilder(Some(&repo.find_commit(p).unwrap().tree().unwrap())).unwrap(),
            None => repo.treebuilder(None).unwrap(),
        };
        for (name, body) in files {
            let blob = repo.blob(body.as_bytes()).unwrap();
            tb.insert(name, blob, 0o100644).unwrap();
        }
        let tree = repo.find_tree(tb.write().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@t").unwrap();
        let parents: Vec<git2::Commit> = parent.map(|p| repo.find_commit(p).unwrap()).into_iter().collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &refs).unwrap()
    }

    #[test]
    fn parents_results_merge_and_a_conflict_names_the_paths() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let root = commit(&repo, None, &[("shared.txt", "one\n")]);
        let a = commit(&repo, Some(root), &[("a.txt", "a\n")]);
        let b = commit(&repo, Some(root), &[("b.txt", "b\n")]);
        let c = commit(&repo, Some(root), &[("shared.txt", "c\n")]);
        let d = commit(&repo, Some(root), &[("shared.txt", "d\n")]);
        for (id, oid) in [("t_a", a), ("t_b", b), ("t_c", c), ("t_d", d)] {
            repo.reference(&end_ref(id), oid, true, "test").unwrap();
        }
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        let (one, merged) = merged_base(dir.path(), "t_x", &ids(&["t_a", "t_none"])).unwrap();
        assert_eq!(
            (one, merged),
            (Some(a), ids(&["t_a"])),
            "one result is the base; a parent without one adds nothing"
        );
        assert_eq!(merged_base(dir.path(), "t_x", &ids(&["t_none"])).unwrap(), (None, vec![]));

        let (both, _) = merged_base(dir.path(), "t_x", &ids(&["t_a", "t_b", "t_c"])).unwrap();
        let tree = repo.find_commit(both.unwrap()).unwrap().tree().unwrap();
        for f in ["a.txt", "b.txt", "shared.txt"] {
            assert!(tree.get_name(f).is_some(), "{f} is in the merged base");
        }

        let e = merged_base(dir.path(), "t_x", &ids(&["t_a", "t_c", "t_d"])).unwrap_err().to_string();
        assert!(e.contains("t_d's changes conflict with t_a and t_c's in shared.txt"), "{e}");
    }
}

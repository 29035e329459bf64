//! Writing a ref while another task may be deleting one beside it.
//!
//! libgit2 removes a ref's parent directories (and its reflog's) when it
//! deletes the last ref in them, so a write under `refs/heads/caesar/<label>/`
//! or `refs/caesar/` can make its directory and find it gone a moment later:
//! "failed to make directory … No such file or directory" (or, for the
//! reflog, "could not open … for writing"). Fresh-clone CI
//! met it when one task's preparation removed its leftover branch while
//! another made its own. Git retries such writes (its `raceproof_create_file`);
//! so does caesar. A failed write leaves no ref behind (libgit2 writes the
//! reflog before it commits the ref's lock), so trying again is safe.

use std::time::Duration;

/// How many times a write that lost the race is tried again. Each try loses
/// only if a delete lands in the moment between libgit2 making the directory
/// and creating its file there, but a loaded machine can line several of
/// those moments up: fresh-clone CI saw six losses in a row, so the bound is
/// generous (all its waits together come to about 130 ms).
const RETRIES: u32 = 64;

/// Runs `write`, trying again while it fails because a directory it made
/// was removed under it.
pub(crate) fn write_retrying<T>(mut write: impl FnMut() -> Result<T, git2::Error>) -> Result<T, git2::Error> {
    let mut tries = 0;
    loop {
        match write() {
            Err(e) if tries < RETRIES && lost_a_directory(&e) => {
                tries += 1;
                // Waits of 0–4 ms, varied so two writers do not fall into step.
                std::thread::sleep(Duration::from_micros(u64::from(tries * 997 % 4_001)));
            }
            other => return other,
        }
    }
}

/// Whether `e` says a directory libgit2 needed vanished while it wrote:
/// the one it made for the ref or the reflog ("failed to make directory …")
/// or the one the reflog's file goes in ("could not open … for writing").
/// libgit2 keeps no errno, only `strerror`'s text, which is English in the
/// daemon (a Rust program never calls `setlocale`).
fn lost_a_directory(e: &git2::Error) -> bool {
    e.class() == git2::ErrorClass::Os && e.message().contains("No such file or directory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn repo_with_a_commit(dir: &Path) -> (git2::Repository, git2::Oid) {
        let repo = git2::Repository::init(dir).unwrap();
        let sig = git2::Signature::now("t", "t@localhost").unwrap();
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        let oid = {
            let tree = repo.find_tree(tree).unwrap();
            repo.commit(Some("HEAD"), &sig, &sig, "base", &tree, &[]).unwrap()
        };
        (repo, oid)
    }

    /// Two threads each make and delete a branch in the same new directory,
    /// so each delete empties the directory the other's next write needs.
    #[test]
    fn a_ref_write_survives_a_delete_emptying_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (_, oid) = repo_with_a_commit(dir.path());
        let churn = |name: &'static str| {
            let path = dir.path().to_owned();
            std::thread::spawn(move || {
                let repo = git2::Repository::open(&path).unwrap();
                let commit = repo.find_commit(oid).unwrap();
                for i in 0..400 {
                    let mut branch = write_retrying(|| repo.branch(&format!("caesar/race/{name}"), &commit, true))
                        .unwrap_or_else(|e| panic!("write {i} of {name}: {e}"));
                    branch.delete().unwrap();
                }
            })
        };
        let a = churn("a");
        let b = churn("b");
        a.join().unwrap();
        b.join().unwrap();
    }

    #[test]
    fn other_failures_are_not_tried_again() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, oid) = repo_with_a_commit(dir.path());
        let commit = repo.find_commit(oid).unwrap();
        let mut calls = 0;
        let e = write_retrying(|| {
            calls += 1;
            repo.branch("not..valid", &commit, true).map(|_| ())
        })
        .unwrap_err();
        assert_eq!(calls, 1, "{e}");
    }
}

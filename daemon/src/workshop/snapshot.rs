//! Snapshots: a tree object of a working tree, written through a temporary
//! index so that the real index, HEAD and branches stay as they are.
//!
//! The temporary index starts as a copy of the real one: its stat data lets
//! libgit2 skip re-hashing unchanged files, so a snapshot of a clean tree of
//! 10,000 files costs a `stat` per file, not a read.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use git2::{Index, IndexAddOption, Oid, Repository};

use super::{WORKTREES_DIR, WorkshopError};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Removes the temporary index file however the snapshot ends.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(self.0.with_extension("index.lock"));
    }
}

/// A new file at `path`, 0600, made by this call: never an existing file
/// nor a link planted there.
fn exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Whether `path` (repository-relative, `/`-separated) is `prefix` or under it.
pub(crate) fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix || (path.len() > prefix.len() && path.starts_with(prefix) && path.as_bytes()[prefix.len()] == b'/')
}

/// Whether a snapshot leaves `path` out: caesar's own worktrees, and the
/// paths caesar placed.
pub(crate) fn excluded(path: &str, placed: &[String]) -> bool {
    under(path, WORKTREES_DIR) || placed.iter().any(|p| under(path, p))
}

/// The tree of the working tree at `workdir`: tracked files as they are on
/// disk, untracked files that are not ignored, deletions; ignored files,
/// nested repositories and `placed` paths left out.
pub(crate) fn snapshot(workdir: &Path, placed: &[String]) -> Result<Oid, WorkshopError> {
    super::refuse_hostile_git(workdir)?;
    let repo = Repository::open(workdir).map_err(WorkshopError::git(format!("open {}", workdir.display())))?;
    let gitdir = repo.path().to_path_buf();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // A worktree's git directory is its agent's to write: the temporary
    // index gets a name it cannot guess, is created exclusively (never
    // through a link planted there), and the real index is read without
    // following a link or blocking on a FIFO (issue 29: `std::fs::copy` to a
    // predictable name overwrote caesar's config through a planted link).
    let tmp =
        TempFile(gitdir.join(format!("caesar-snapshot-{}-{n}-{}.index", std::process::id(), crate::ids::secret())));
    let real = gitdir.join("index");
    if let Ok(mut from) = crate::safe_fs::open_regular(&real) {
        let mut to = exclusive(&tmp.0).map_err(WorkshopError::io("create the temporary index", &tmp.0))?;
        std::io::copy(&mut from, &mut to).map_err(WorkshopError::io("copy the index to", &tmp.0))?;
    }
    let mut index = Index::open(&tmp.0).map_err(WorkshopError::git("open a temporary index"))?;
    repo.set_index(&mut index).map_err(WorkshopError::git("use a temporary index"))?;
    // Entries copied from the real index under an excluded prefix go too.
    let stale: Vec<Vec<u8>> =
        index.iter().filter(|e| excluded(&String::from_utf8_lossy(&e.path), placed)).map(|e| e.path).collect();
    for path in stale {
        let p = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
        index.remove_path(&p).map_err(WorkshopError::git("drop an excluded path"))?;
    }
    let mut skip = |path: &Path, _spec: &[u8]| -> i32 {
        let p = path.to_string_lossy();
        // A trailing `/` is an untracked directory git would not enter: a
        // nested repository. Snapshots leave those out, as `git add` does.
        if p.ends_with('/') || excluded(&p, placed) { 1 } else { 0 }
    };
    // The pathspec `*` (everything) and not an empty one: git2 reads the
    // matched pathspec the callback receives, which is NULL for an empty one.
    index
        .add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip))
        .map_err(WorkshopError::git(format!("snapshot {}", workdir.display())))?;
    index.write_tree().map_err(WorkshopError::git(format!("write the tree of {}", workdir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_components() {
        assert!(under("node_modules", "node_modules"));
        assert!(under("node_modules/a/b", "node_modules/"));
        assert!(!under("node_modules2", "node_modules"));
        assert!(excluded(".caesar/wt/t_1/x", &[]));
        assert!(!excluded(".caesar/config.toml", &[]));
    }
}

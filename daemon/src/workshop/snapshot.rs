//! Snapshots: a tree object of a working tree, written through a temporary
//! index so that the real index, HEAD and branches stay as they are.
//!
//! The temporary index starts as a copy of the real one: its stat data lets
//! libgit2 skip re-hashing unchanged files, so a snapshot of a clean tree of
//! 10,000 files costs a `stat` per file, not a read. On Linux a copy that is
//! only read is kept in memory, not in a file. A task's worktree is
//! read through the user's repository with the daemon's own index of it
//! ([`Stat::Cache`], in the task's daemon part), never through the
//! worktree's `.git`, which its agent may rewrite.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use git2::{Index, IndexAddOption, Oid, Repository};

use super::{WORKTREES_DIR, WorkshopError};

/// The daemon's own index of a task's worktree, in its daemon part.
pub(crate) const CACHE_INDEX: &str = "worktree.index";

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
pub(crate) fn exclusive(path: &Path) -> std::io::Result<std::fs::File> {
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

/// Where a snapshot's index comes from: the stat data that lets libgit2
/// skip re-hashing unchanged files.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stat<'a> {
    /// The repository's own index, copied and left as it is (the user's
    /// main tree).
    Real,
    /// The daemon's own index for a task's worktree, in the task's daemon
    /// part: read, and replaced by the snapshot's once it is taken. Missing
    /// (or `None`, for a task without a daemon part), the snapshot starts
    /// from `seed` (the base tree) and hashes every file.
    Cache { path: Option<&'a Path>, seed: Option<Oid> },
}

/// The tree of the user's working tree at `root` (its repository's own
/// index for stat data), with the temporary index in `scratch`.
pub(crate) fn snapshot(root: &Path, placed: &[String], scratch: Option<&Path>) -> Result<Oid, WorkshopError> {
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let gitdir = repo.path().to_path_buf();
    snapshot_of(repo, None, placed, (Stat::Real, None), scratch.unwrap_or(&gitdir))
}

/// The tree of a task's worktree `wt`, read through the user's repository
/// at `root` (opened by the daemon at the root it recorded): never through
/// the worktree's `.git`, which is the agent's to rewrite (issue 29). The
/// blobs go into the user's object store. `tracked`, the tree of the
/// agent's last commit once it is in the user's repository, makes what it
/// committed tracked (a file it forced in under an ignored name included).
pub(crate) fn snapshot_worktree(
    root: &Path,
    wt: &Path,
    placed: &[String],
    (stat, tracked): (Stat, Option<Oid>),
    scratch: &Path,
) -> Result<Oid, WorkshopError> {
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    snapshot_of(repo, Some(wt), placed, (stat, tracked), scratch)
}

/// The tree of the working tree of `repo` (or `workdir`, for this handle
/// only): tracked files as they are on disk, untracked files that are not
/// ignored, deletions; ignored files, nested repositories and `placed`
/// paths left out. The temporary index is made in `scratch`.
fn snapshot_of(
    repo: Repository,
    workdir: Option<&Path>,
    placed: &[String],
    (stat, tracked): (Stat, Option<Oid>),
    scratch: &Path,
) -> Result<Oid, WorkshopError> {
    if let Some(wt) = workdir {
        repo.set_workdir(wt, false).map_err(WorkshopError::git(format!("read {}", wt.display())))?;
    }
    let shown = repo.workdir().map(Path::to_path_buf).unwrap_or_default();
    // The index it starts from is read without following a link or
    // blocking on a FIFO.
    let from = match stat {
        Stat::Real => Some(repo.path().join("index")),
        Stat::Cache { path, .. } => path.map(Path::to_path_buf),
    };
    let from = from.and_then(|f| crate::safe_fs::open_regular(&f).ok());
    // A copy that is only read (`Stat::Real`) lives in memory where the
    // system allows it, so a snapshot makes and deletes no file: none in
    // the user's `.git` at each of the radar's refreshes, which editors'
    // git views watch, and no recently deleted inode for the next files to
    // step over on an ext4 without a journal (issue 33, BENCHMARKS round 6).
    // Otherwise the temporary index gets a name nobody can guess, in the
    // daemon's own directory, and is created exclusively (never through a
    // link planted there): issue 29, `std::fs::copy` to a predictable name
    // in the worktree's git directory overwrote caesar's config through a
    // planted link.
    let memory = match (&from, stat) {
        (Some(_), Stat::Real) => memory_index(),
        _ => None,
    };
    let tmp = match memory {
        Some((file, path)) => Scratch::Memory(file, path),
        None => {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            Scratch::File(TempFile(scratch.join(format!(
                "caesar-snapshot-{}-{n}-{}.index",
                std::process::id(),
                crate::ids::secret()
            ))))
        }
    };
    let mut copied = false;
    if let Some(mut from) = from {
        let mut to = match &tmp {
            Scratch::Memory(file, _) => file.try_clone(),
            Scratch::File(file) => exclusive(&file.0),
        }
        .map_err(WorkshopError::io("create the temporary index", tmp.path()))?;
        std::io::copy(&mut from, &mut to).map_err(WorkshopError::io("copy the index to", tmp.path()))?;
        copied = true;
    }
    let mut index = Index::open(tmp.path()).map_err(WorkshopError::git("open a temporary index"))?;
    let start = match (copied, stat) {
        (_, Stat::Cache { .. }) if tracked.is_some() => tracked,
        (false, Stat::Cache { seed, .. }) => seed,
        _ => None,
    };
    // Entries of the same path, mode and id keep the stat data they had.
    if let Some(tree) = start {
        let tree = repo.find_tree(tree).map_err(WorkshopError::git("read the tree to start from"))?;
        index.read_tree(&tree).map_err(WorkshopError::git("index the tree to start from"))?;
    }
    repo.set_index(&mut index).map_err(WorkshopError::git("use a temporary index"))?;
    // Entries copied from the index under an excluded prefix go too.
    let stale: Vec<Vec<u8>> =
        index.iter().filter(|e| excluded(&String::from_utf8_lossy(&e.path), placed)).map(|e| e.path).collect();
    for path in stale {
        let p = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
        index.remove_path(&p).map_err(WorkshopError::git("drop an excluded path"))?;
    }
    add_worktree(&repo, &mut index, &shown, placed, scratch)?;
    let tree = index.write_tree().map_err(WorkshopError::git(format!("write the tree of {}", shown.display())))?;
    // The daemon's cache keeps this snapshot's stat data for the next one
    // (a rename: a snapshot taken at the same time reads one or the other).
    if let (Stat::Cache { path: Some(path), .. }, Scratch::File(file)) = (stat, &tmp)
        && index.write().is_ok()
    {
        let _ = std::fs::rename(&file.0, path);
    }
    Ok(tree)
}

/// Where a snapshot's temporary index is, for as long as the snapshot runs.
enum Scratch {
    /// A file, removed when the snapshot ends.
    File(TempFile),
    /// The memory file [`memory_index`] made (held open: its `/proc` path
    /// names it only while it is) and that path.
    Memory(std::fs::File, PathBuf),
}

impl Scratch {
    fn path(&self) -> &Path {
        match self {
            Scratch::File(f) => &f.0,
            Scratch::Memory(_, p) => p,
        }
    }
}

/// An anonymous file in memory and the path libgit2 opens it by
/// (`/proc/self/fd/<fd>`), for an index that is only read; `None` where
/// there is none (not Linux, no `/proc`), and a file is used instead.
#[cfg(target_os = "linux")]
fn memory_index() -> Option<(std::fs::File, PathBuf)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: memfd_create takes a NUL-terminated name and flags, and
    // returns a new descriptor (owned by the File below) or -1.
    let fd = unsafe { nix::libc::memfd_create(c"caesar-snapshot-index".as_ptr(), nix::libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just made and nothing else owns it.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    path.exists().then_some((file, path))
}

#[cfg(not(target_os = "linux"))]
fn memory_index() -> Option<(std::fs::File, PathBuf)> {
    None
}

/// How many files that change while they are read one snapshot takes as
/// read before it gives up.
const MOVING_FILES: usize = 64;

/// Adds the working tree at `shown` to `index`: tracked files as they are,
/// untracked ones not ignored, deletions. A file that changes between
/// libgit2's stat and its read (an agent's growing log) fails the whole
/// `add_all`; it is then left out of the walk (out of the index too, or the
/// walk's own comparison would read it again) and, once the rest is in,
/// added from a copy of its content made in `scratch`.
fn add_worktree(
    repo: &Repository,
    index: &mut Index,
    shown: &Path,
    placed: &[String],
    scratch: &Path,
) -> Result<(), WorkshopError> {
    let mut moving: Vec<String> = Vec::new();
    loop {
        let mut last: Option<String> = None;
        let mut skip = |path: &Path, _spec: &[u8]| -> i32 {
            let p = path.to_string_lossy();
            // A trailing `/` is an untracked directory git would not enter: a
            // nested repository. Snapshots leave those out, as `git add` does.
            if p.ends_with('/') || excluded(&p, placed) || moving.iter().any(|m| *m == p) {
                return 1;
            }
            last = Some(p.into_owned());
            0
        };
        // The pathspec `*` (everything) and not an empty one: git2 reads the
        // matched pathspec the callback receives, which is NULL for an empty one.
        let failure = match index.add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip)) {
            Ok(()) => break,
            Err(e) => e,
        };
        // Only a read that failed on a file is taken again: libgit2 says
        // "file changed before we could read it" (its filesystem class) or
        // "failed to read file into stream" (its OS class).
        let read_failed = matches!(failure.class(), git2::ErrorClass::Os | git2::ErrorClass::Filesystem);
        match last.filter(|_| read_failed && moving.len() < MOVING_FILES) {
            Some(path) => {
                let _ = index.remove_path(Path::new(&path));
                moving.push(path);
            }
            None => return Err(WorkshopError::git(format!("snapshot {}", shown.display()))(failure)),
        }
    }
    for path in moving {
        add_as_read(repo, index, shown, &path, scratch)
            .map_err(|e| WorkshopError::Git { action: format!("snapshot {path}, which keeps changing"), source: e })?;
    }
    Ok(())
}

/// Adds the file `path` of the working tree `shown` from a copy of its
/// content now, made in `scratch`: a file still growing is taken as it was
/// when copied. Its entry has no stat data, so the next snapshot hashes it
/// again.
fn add_as_read(
    repo: &Repository,
    index: &mut Index,
    shown: &Path,
    path: &str,
    scratch: &Path,
) -> Result<(), git2::Error> {
    let io = |e: std::io::Error| git2::Error::from_str(&format!("read it: {e}"));
    let mut from = crate::safe_fs::open_regular(&shown.join(path)).map_err(io)?;
    let executable = {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            from.metadata().map_err(io)?.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        false
    };
    let copy = TempFile(scratch.join(format!("caesar-moving-{}-{}", std::process::id(), crate::ids::secret())));
    let mut to = exclusive(&copy.0).map_err(io)?;
    let size = std::io::copy(&mut from, &mut to).map_err(io)?;
    drop(to);
    let id = repo.blob_path(&copy.0)?;
    let entry = git2::IndexEntry {
        ctime: git2::IndexTime::new(0, 0),
        mtime: git2::IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode: if executable { 0o100755 } else { 0o100644 },
        uid: 0,
        gid: 0,
        file_size: u32::try_from(size).unwrap_or(u32::MAX),
        id,
        flags: u16::try_from(path.len()).unwrap_or(0xfff).min(0xfff),
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    };
    index.add(&entry)
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

    /// On Linux a snapshot of the user's tree makes no file: its copy of the
    /// index is in memory, so a scratch directory that cannot take a file
    /// (here: one that does not exist) does not matter, the repository's
    /// git directory is left as it was, and the stat data still serves.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_snapshot_of_the_users_tree_makes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        index.write().unwrap();
        std::fs::write(dir.path().join("b.txt"), "b\n").unwrap();
        let listing = |p: &Path| {
            let mut names: Vec<_> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            names
        };
        let before = listing(repo.path());
        let nowhere = dir.path().join("no-such-directory");
        let tree = snapshot(dir.path(), &[], Some(&nowhere)).expect("a snapshot without a scratch file");
        let tree = repo.find_tree(tree).unwrap();
        assert!(tree.get_name("a.txt").is_some() && tree.get_name("b.txt").is_some(), "tracked and untracked files");
        assert_eq!(listing(repo.path()), before, "nothing made in the git directory");
        assert!(!nowhere.exists());
        // The worktree's snapshots still go through a file, kept as the daemon's cache.
        let cache = dir.path().join("cache.index");
        let scratch = tempfile::tempdir().unwrap();
        snapshot_worktree(
            dir.path(),
            dir.path(),
            &[],
            (Stat::Cache { path: Some(&cache), seed: None }, None),
            scratch.path(),
        )
        .unwrap();
        assert!(cache.is_file(), "the cache is written");
    }

    /// A file that grows while a snapshot reads it (an agent's log, a build
    /// writing its output) is snapshotted as it was when read, not refused:
    /// libgit2 fails a file whose size changed between its stat and its read
    /// ("file changed before we could read it"), which stopped the radar's
    /// refreshes of that task and failed `caesar diff`.
    #[test]
    fn a_file_growing_during_the_snapshot_is_taken_as_read() {
        use std::io::Write;
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;

        let dir = tempfile::tempdir().unwrap();
        Repository::init(dir.path()).unwrap();
        for i in 0..50 {
            std::fs::write(dir.path().join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
        }
        let log = dir.path().join("grow.log");
        std::fs::write(&log, b"").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (stop, log) = (Arc::clone(&stop), log.clone());
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
                let line = [b'x'; 512];
                // It grows to 1 MiB, starts again, and stops when the
                // snapshots are done (or after a minute, whatever happens).
                let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
                let mut written = 0;
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                    f.write_all(&line).unwrap();
                    written += line.len();
                    if written >= 1 << 20 {
                        f.set_len(0).unwrap();
                        written = 0;
                    }
                }
            })
        };
        let repo = Repository::open(dir.path()).unwrap();
        let mut taken = 0;
        for _ in 0..100 {
            let tree = snapshot(dir.path(), &[], None).expect("a snapshot of a tree with a growing file");
            let tree = repo.find_tree(tree).unwrap();
            assert!(tree.get_name("grow.log").is_some(), "the growing file is in the snapshot");
            assert_eq!(tree.len(), 51, "and every other file");
            taken += 1;
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert_eq!(taken, 100);
    }
}

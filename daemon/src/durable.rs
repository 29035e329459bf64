//! New files made durable together (issue 33): a delegation writes its task's
//! files, then every file and every directory that names one is fsynced at
//! once, on threads of their own, so that the filesystem's journal commits
//! them in one go instead of one commit per `fsync` in turn.
//!
//! The files are new, in a task directory no reader opens before the task is
//! recorded, and recorded only once [`Batch::sync`] returned: a crash before
//! that leaves a directory nobody reads, so no temporary name and rename is
//! needed. A link or file already at a name (a task directory left by a crash
//! under a reused id) is removed, never written through.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Files and directories written now, made durable by [`Batch::sync`].
#[derive(Debug, Default)]
pub struct Batch {
    files: Vec<(PathBuf, File)>,
    dirs: Vec<PathBuf>,
}

impl Batch {
    /// Writes `bytes` as a new file at `path` (whatever was there is
    /// removed first, a link included: never followed) and notes its
    /// directory.
    pub fn write_new(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
        f.write_all(bytes)?;
        self.files.push((path.to_path_buf(), f));
        if let Some(dir) = path.parent() {
            self.dir(dir);
        }
        Ok(())
    }

    /// Notes a directory whose entries must be durable (one that holds a
    /// new file, or the parent of a new directory).
    pub fn dir(&mut self, dir: &Path) {
        if !self.dirs.iter().any(|d| d == dir) {
            self.dirs.push(dir.to_path_buf());
        }
    }

    /// Fsyncs every file and directory noted, all at once; the first error
    /// names its path.
    pub fn sync(self) -> std::io::Result<()> {
        let Batch { files, dirs } = self;
        let mut opened = Vec::with_capacity(dirs.len());
        for d in dirs {
            let f = File::open(&d).map_err(|e| at(&d, e))?;
            opened.push((d, f));
        }
        let all: Vec<&(PathBuf, File)> = files.iter().chain(opened.iter()).collect();
        let Some((last, rest)) = all.split_last() else { return Ok(()) };
        std::thread::scope(|s| {
            let others: Vec<_> =
                rest.iter().map(|(p, f)| s.spawn(move || f.sync_all().map_err(|e| at(p, e)))).collect();
            // The last on this thread: one thread fewer to start.
            let mine = last.1.sync_all().map_err(|e| at(&last.0, e));
            let mut result = mine;
            for h in others {
                let r = h.join().unwrap_or_else(|_| Err(std::io::Error::other("an fsync thread panicked")));
                if result.is_ok() {
                    result = r;
                }
            }
            result
        })
    }
}

fn at(path: &Path, e: std::io::Error) -> std::io::Error {
    // As `Error::io_at` says it: the path, then the kernel's words (a full disk may only show at the fsync).
    std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_new_and_a_planted_link_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&victim, d.path().join("task.json")).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let mut b = Batch::default();
        b.write_new(&d.path().join("task.json"), b"{}").unwrap();
        b.write_new(&d.path().join("sub/prompt.txt"), b"do it").unwrap();
        b.dir(d.path());
        b.sync().unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("task.json")).unwrap(), "{}");
        assert!(!std::fs::symlink_metadata(d.path().join("task.json")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(d.path().join("sub/prompt.txt")).unwrap(), "do it");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn a_directory_that_cannot_be_opened_is_named() {
        let mut b = Batch::default();
        b.dir(Path::new("/nonexistent/caesar-durable-test"));
        let e = b.sync().unwrap_err();
        assert!(e.to_string().contains("/nonexistent/caesar-durable-test"), "{e}");
    }
}

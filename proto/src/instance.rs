//! The running daemon's record: where it listens, written in its state
//! directory so that every client of that directory finds it, whatever
//! socket the client's own environment points at.
//!
//! A host such as codex starts MCP servers with a minimal environment (no
//! `XDG_RUNTIME_DIR`, no `CAESAR_*`), so its `caesar-mcp` computes another
//! socket than a shell's `caesar`. Both share the state directory, which is
//! what the daemon locks; the record turns that shared directory into the
//! way to the one daemon.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::paths::Paths;

/// What a daemon says about itself in [`Paths::record_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonRecord {
    /// The socket it serves, absolute.
    pub socket: PathBuf,
    pub pid: u32,
    /// Its API protocol number.
    pub protocol: u32,
    pub version: String,
}

impl DaemonRecord {
    /// This process's record, serving `socket`.
    pub fn for_this_process(socket: &Path) -> DaemonRecord {
        DaemonRecord {
            socket: std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf()),
            pid: std::process::id(),
            protocol: crate::PROTOCOL,
            version: crate::VERSION.to_owned(),
        }
    }

    /// The record in the state directory of `paths`, if there is a readable
    /// one. It may be stale (the daemon was killed): connecting tells.
    pub fn read(paths: &Paths) -> Option<DaemonRecord> {
        let text = std::fs::read_to_string(paths.record_file()).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some(DaemonRecord {
            socket: PathBuf::from(v.get("socket")?.as_str()?),
            pid: u32::try_from(v.get("pid")?.as_u64()?).ok()?,
            protocol: u32::try_from(v.get("protocol")?.as_u64()?).ok()?,
            version: v.get("version").and_then(|s| s.as_str()).unwrap_or_default().to_owned(),
        })
    }

    /// Writes the record atomically (a private temporary file renamed over
    /// the old one), so a reader sees the old record or the new, never half.
    pub fn write(&self, paths: &Paths) -> io::Result<()> {
        let target = paths.record_file();
        let tmp = paths.state_dir.join(format!(".caesard.json.{}", self.pid));
        let body = serde_json::json!({
            "socket": self.socket.to_string_lossy(),
            "pid": self.pid,
            "protocol": self.protocol,
            "version": self.version,
        });
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut file = opts.open(&tmp)?;
        file.write_all(format!("{body}\n").as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &target)
    }

    /// Removes the record if it is still this process's (a daemon that
    /// took over meanwhile keeps its own).
    pub fn remove_if_mine(paths: &Paths) {
        if DaemonRecord::read(paths).is_some_and(|r| r.pid == std::process::id()) {
            let _ = std::fs::remove_file(paths.record_file());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_only_its_writer_removes_it() {
        let home = tempfile::tempdir().unwrap();
        let paths = Paths::under(home.path());
        std::fs::create_dir_all(&paths.state_dir).unwrap();
        assert_eq!(DaemonRecord::read(&paths), None);
        let mine = DaemonRecord::for_this_process(Path::new("/run/user/1/caesar/caesard.sock"));
        mine.write(&paths).unwrap();
        assert_eq!(DaemonRecord::read(&paths), Some(mine.clone()));
        let other = DaemonRecord { pid: mine.pid.wrapping_add(1), ..mine.clone() };
        other.write(&paths).unwrap();
        DaemonRecord::remove_if_mine(&paths);
        assert_eq!(DaemonRecord::read(&paths), Some(other));
        mine.write(&paths).unwrap();
        DaemonRecord::remove_if_mine(&paths);
        assert_eq!(DaemonRecord::read(&paths), None);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&paths.state_dir).unwrap().count(), 0);
    }

    #[test]
    fn a_relative_socket_is_recorded_absolute() {
        let r = DaemonRecord::for_this_process(Path::new("x.sock"));
        assert!(r.socket.is_absolute());
    }

    #[test]
    fn a_garbled_record_is_no_record() {
        let home = tempfile::tempdir().unwrap();
        let paths = Paths::under(home.path());
        std::fs::create_dir_all(&paths.state_dir).unwrap();
        std::fs::write(paths.record_file(), "{\"socket\": 3").unwrap();
        assert_eq!(DaemonRecord::read(&paths), None);
    }
}

//! Reading files an agent or a repository controls, safely.
//!
//! A task's directory is writable by its agent, and a project's `.caesar/`
//! comes from whoever committed to the repository. Either can put a FIFO, a
//! symbolic link to `/dev/zero` or a gigabyte where the daemon expects a
//! small JSON or TOML file. Every such read goes through [`read_capped`] (a
//! file whose path the daemon made) or [`read_beneath`] (a path a
//! configuration names, resolved beneath a root), which:
//!
//! - open with `O_NOFOLLOW | O_NONBLOCK`, so a link is refused and a FIFO
//!   never blocks the open;
//! - require a regular file (`fstat` of the opened descriptor, not of the
//!   path, so nothing can be swapped in between);
//! - read at most the cap, and refuse a larger file with an error that names
//!   the file and the cap.
//!
//! A missing file keeps `ErrorKind::NotFound`, so callers can still treat
//! absence as absence.
//!
//! The design beside its neighbours: `docs/design/confinement.md`.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

/// The cap for a report (`report.json`, the channel report).
pub const REPORT_CAP: u64 = 4 * 1024 * 1024;
/// The cap for a configuration layer (`config.toml`, `config.local.toml`).
pub const CONFIG_CAP: u64 = 1024 * 1024;
/// The cap for a role's `system_prompt_file`.
pub const PROMPT_CAP: u64 = 256 * 1024;
/// The cap for the small files the supervisor writes (`exit.json`, `agent.json`).
pub const RECORD_CAP: u64 = 64 * 1024;

/// Reads the regular file at `path`, at most `cap` bytes, without following
/// a symbolic link at its last component and without blocking on a FIFO.
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open_leaf(None, path, path)?;
    read_open(file, path, cap)
}

/// Opens the regular file at `path` for reading, without following a link
/// at its last component and without blocking on a FIFO: for files read in
/// pieces (a growing `raw.log`) rather than whole.
pub fn open_regular(path: &Path) -> io::Result<File> {
    only_regular(open_leaf(None, path, path)?, path)
}

/// `file`, opened at `path`, if it is a regular file: never a FIFO, a
/// device or a directory the agent put there.
fn only_regular(file: File, path: &Path) -> io::Result<File> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(path, &meta));
    }
    Ok(file)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_to_string_capped(path: &Path, cap: u64) -> io::Result<String> {
    into_string(read_capped(path, cap)?, path)
}

/// Like [`read_to_string_capped`], but follows a symbolic link: for a file
/// the user owns and may keep as a link (the global config), which must
/// still be a regular file under the cap and must not block.
pub fn read_following_to_string(path: &Path, cap: u64) -> io::Result<String> {
    let file = open_following(path)?;
    into_string(read_open(file, path, cap)?, path)
}

#[cfg(unix)]
fn open_following(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY;
    std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path)
}

#[cfg(not(unix))]
fn open_following(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Reads `root/rel`, where `rel` comes from configuration: it must be
/// relative, without `..`, and no component of it (directories included)
/// may be a symbolic link. Each component is opened beneath the previous
/// one, so nothing outside `root` is ever opened. Same caps and checks as
/// [`read_capped`].
#[cfg(unix)]
pub fn read_beneath(root: &Path, rel: &Path, cap: u64) -> io::Result<Vec<u8>> {
    use std::os::fd::AsFd;

    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;

    let full = root.join(rel);
    let parts = normal_components(rel)?;
    let Some((leaf, dirs)) = parts.split_last() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", rel.display())));
    };
    // The root itself is the daemon's choice (a project's `.caesar/`) and is
    // opened as given; everything below it is not followed.
    let mut dir: std::os::fd::OwnedFd = File::open(root)?.into();
    for part in dirs {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        dir = openat(dir.as_fd(), part.as_path(), flags, Mode::empty()).map_err(|e| explain(e, &full))?;
    }
    let file = open_leaf(Some(dir), Path::new(leaf), &full)?;
    read_open(file, &full, cap)
}

/// [`read_beneath`] as UTF-8 text.
#[cfg(unix)]
pub fn read_beneath_to_string(root: &Path, rel: &Path, cap: u64) -> io::Result<String> {
    into_string(read_beneath(root, rel, cap)?, &root.join(rel))
}

/// The first component of `rel` beneath `root` that is a symbolic link or
/// something other than a directory, among the directories that lead to
/// `rel` (its last component is not looked at). `None` when every parent
/// that exists is a real directory: writing `root/rel` then stays inside
/// `root`. `rel` must be relative and free of `..` (else it is its own answer).
pub fn parent_escape(root: &Path, rel: &Path) -> Option<PathBuf> {
    let Ok(parts) = normal_components(rel) else {
        return Some(rel.to_path_buf());
    };
    let mut at = root.to_path_buf();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_dir() => {}
            // Not there yet: it, and everything under it, will be created.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            _ => return Some(at),
        }
    }
    None
}

/// Opens `path` to append to it, creating it (mode 0600) if need be, but
/// never through a link and only if it is a regular file: for files in a
/// task directory the daemon writes while the agent runs (`events.jsonl`),
/// where a link to `~/.bashrc` must not receive the task's events.
#[cfg(unix)]
pub fn open_append_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| explain_io(e, path))?;
    only_regular(file, path)
}

/// Cuts the regular file at `path` back to `len` bytes, never through a
/// link (a link's target is not truncated) and never blocking on a FIFO.
#[cfg(unix)]
pub fn truncate_regular(path: &Path, len: u64) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| explain_io(e, path))?;
    only_regular(file, path)?.set_len(len)
}

#[cfg(not(unix))]
pub fn open_append_regular(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().append(true).create(true).open(path)
}

#[cfg(not(unix))]
pub fn truncate_regular(path: &Path, len: u64) -> io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path)?.set_len(len)
}

/// Replaces `path` with a file holding `bytes` (a temporary file beside it,
/// then a rename), without an fsync: for convenience copies in a directory
/// an agent can write. A link left at the temporary name is removed, never
/// written through, and the temporary file is created new (`O_EXCL`).
pub fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(unix)]
fn explain_io(e: io::Error, path: &Path) -> io::Error {
    match e.raw_os_error().map(nix::errno::Errno::from_raw) {
        Some(errno) => explain(errno, path),
        None => e,
    }
}

/// The components of a configured relative path: only plain names (`.` is
/// skipped); an absolute path or a `..` is refused.
fn normal_components(rel: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(name) => out.push(PathBuf::from(name)),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} climbs out with `..`", rel.display()),
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is absolute", rel.display())));
            }
        }
    }
    Ok(out)
}

#[cfg(unix)]
fn open_leaf(dir: Option<std::os::fd::OwnedFd>, leaf: &Path, shown: &Path) -> io::Result<File> {
    use std::os::fd::AsFd;

    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::Mode;

    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let fd = match dir {
        Some(dir) => openat(dir.as_fd(), leaf, flags, Mode::empty()),
        None => open(leaf, flags, Mode::empty()),
    };
    fd.map(File::from).map_err(|e| explain(e, shown))
}

#[cfg(not(unix))]
fn open_leaf(_dir: Option<()>, leaf: &Path, _shown: &Path) -> io::Result<File> {
    File::open(leaf)
}

/// Without `openat`, the parents are checked, then the file is opened.
#[cfg(not(unix))]
pub fn read_beneath(root: &Path, rel: &Path, cap: u64) -> io::Result<Vec<u8>> {
    normal_components(rel)?;
    if let Some(at) = parent_escape(root, rel) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a directory", at.display())));
    }
    read_capped(&root.join(rel), cap)
}

#[cfg(not(unix))]
pub fn read_beneath_to_string(root: &Path, rel: &Path, cap: u64) -> io::Result<String> {
    into_string(read_beneath(root, rel, cap)?, &root.join(rel))
}

/// An errno as an `io::Error` that names the file; a link met where none
/// is followed says so.
#[cfg(unix)]
fn explain(e: nix::errno::Errno, path: &Path) -> io::Error {
    let err = io::Error::from(e);
    match e {
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is, or lies under, a symbolic link or a non-directory, which caesar does not follow",
                path.display()
            ),
        ),
        _ => io::Error::new(err.kind(), format!("{}: {err}", path.display())),
    }
}

fn read_open(file: File, path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    // fstat of what was opened: a path check could be raced.
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(path, &meta));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{} is larger than the cap of {cap} bytes, so caesar does not read it", path.display()),
        )
    };
    if meta.len() > cap {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    // One byte past the cap tells a file that grew since the fstat.
    file.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(buf)
}

fn not_regular(path: &Path, meta: &std::fs::Metadata) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} is not a regular file ({}), so caesar does not read it", path.display(), kind(meta)),
    )
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() { "a directory" } else { "not a plain file" }
}

fn into_string(bytes: Vec<u8>, path: &Path) -> io::Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{} is not UTF-8 text", path.display())))
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::OpenOptionsExt;
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_regular_file_under_the_cap_is_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        std::fs::write(&p, b"{}").unwrap();
        assert_eq!(read_capped(&p, 2).unwrap(), b"{}");
        let e = read_capped(&d.path().join("none"), 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_file_over_the_cap_is_refused_by_name_and_cap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.json");
        std::fs::write(&p, vec![b' '; 1001]).unwrap();
        let e = read_capped(&p, 1000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let msg = e.to_string();
        assert!(msg.contains("report.json") && msg.contains("1000 bytes"), "{msg}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.json");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let t = Instant::now();
        let e = read_capped(&p, 1000).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert!(e.to_string().contains("a FIFO"), "{e}");
    }

    #[test]
    fn a_link_to_dev_zero_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.json");
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let e = read_capped(&p, 1000).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // And the device itself, named directly, is not a regular file.
        let e = read_capped(Path::new("/dev/zero"), 1000).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
    }

    #[test]
    fn beneath_refuses_climbing_absolute_and_linked_paths() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join(".caesar");
        std::fs::create_dir_all(root.join("roles")).unwrap();
        std::fs::write(root.join("roles/r.md"), "prompt").unwrap();
        std::fs::write(d.path().join("secret"), "secret").unwrap();
        assert_eq!(read_beneath(&root, Path::new("roles/r.md"), 100).unwrap(), b"prompt");
        assert_eq!(read_beneath(&root, Path::new("./roles/r.md"), 100).unwrap(), b"prompt");
        for bad in ["../secret", "roles/../../secret", "/etc/passwd"] {
            let e = read_beneath(&root, Path::new(bad), 100).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}: {e}");
        }
        // A link as the file, and a link as a directory on the way.
        std::os::unix::fs::symlink(d.path().join("secret"), root.join("roles/leak.md")).unwrap();
        std::os::unix::fs::symlink(d.path(), root.join("up")).unwrap();
        for bad in ["roles/leak.md", "up/secret"] {
            let e = read_beneath(&root, Path::new(bad), 100).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{bad}: {e}");
        }
    }

    #[test]
    fn writes_in_a_task_directory_never_go_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("bashrc");
        std::fs::write(&victim, "precious\n").unwrap();
        let events = d.path().join("events.jsonl");
        std::os::unix::fs::symlink(&victim, &events).unwrap();
        assert!(open_append_regular(&events).unwrap_err().to_string().contains("symbolic link"));
        assert!(truncate_regular(&events, 0).is_err());
        std::os::unix::fs::symlink(&victim, d.path().join("report.tmp")).unwrap();
        write_replacing(&d.path().join("report.json"), b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(std::fs::read(d.path().join("report.json")).unwrap(), b"{}");
        // A FIFO in events.jsonl's place neither blocks nor is written.
        std::fs::remove_file(&events).unwrap();
        nix::unistd::mkfifo(&events, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // (ENXIO with no reader; refused as a FIFO when the agent reads it.)
        assert!(open_append_regular(&events).is_err());
        let _reader = std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(&events).unwrap();
        assert!(open_append_regular(&events).unwrap_err().to_string().contains("FIFO"));
        // The honest case: created, appended, cut back.
        let honest = d.path().join("honest.jsonl");
        {
            use std::io::Write;
            open_append_regular(&honest).unwrap().write_all(b"one\n").unwrap();
            open_append_regular(&honest).unwrap().write_all(b"two\n").unwrap();
        }
        truncate_regular(&honest, 4).unwrap();
        assert_eq!(std::fs::read(&honest).unwrap(), b"one\n");
    }

    #[test]
    fn parent_escape_finds_a_linked_directory() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("src")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), d.path().join("cache")).unwrap();
        assert_eq!(parent_escape(d.path(), Path::new("src/a.rs")), None);
        assert_eq!(parent_escape(d.path(), Path::new("new/dir/a.rs")), None);
        assert_eq!(parent_escape(d.path(), Path::new("cache/x")), Some(d.path().join("cache")));
        assert_eq!(parent_escape(d.path(), Path::new("cache")), None);
        assert!(parent_escape(d.path(), Path::new("../x")).is_some());
    }
}

/// Writes `bytes` to `path` atomically: a temporary file, fsync, rename,
/// fsync of the directory. A reader sees the old file or the whole new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        // The directory may be an agent's (a task directory): a link left at
        // the temporary name is removed, never written through, and the
        // file is created new (O_EXCL refuses a link put back meanwhile).
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

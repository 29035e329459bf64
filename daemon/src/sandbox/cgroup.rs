//! A cgroup v2 per box (issue 29), where the user's cgroup is delegated:
//! the launcher ((`supervisor/boxed.rs`)) makes a child cgroup of its own,
//! writes the task's limits into it (`memory.max`, `pids.max`, `cpu.weight`,
//! where the controller is enabled), moves itself into it (so every process
//! of the box is in it, whatever it forks), and on its way out writes
//! `cgroup.kill` and removes it. Where the current cgroup is not writable
//! (not delegated, or cgroup v1 only) the box goes on without one, and
//! [`describe`] says so.
//!
//! Limits need their controllers enabled in the boxes' parent, which the
//! kernel allows only in a cgroup holding no process itself (the root
//! aside): at its start the daemon moves itself into a leaf of its own,
//! [`DAEMON_LEAF`], and enables them ([`enable_controllers`]); boxes are
//! made beside that leaf.

use std::path::{Path, PathBuf};

/// The cgroup v2 directory of this process, if it is writable to it
/// (delegated): `0::<path>` of `/proc/self/cgroup`, beneath the cgroup2
/// mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
pub fn delegated() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim_start_matches('/').to_owned();
    let dir = mount_point()?.join(rel);
    writable(&dir).then_some(dir)
}

/// Where the cgroup v2 tree is mounted: `/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid host. A box keeps it read-only
/// (`supervisor/boxed.rs`), so nothing inside can move itself out of its
/// box's cgroup.
pub fn mount_point() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .find(|m| m.join("cgroup.procs").is_file() && m.join("cgroup.subtree_control").is_file())
}

fn writable(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
            && nix::unistd::access(&dir.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK).is_ok()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        false
    }
}

/// The leaf cgroup the daemon moves itself into, so that its own cgroup
/// may enable controllers for the boxes beside it.
pub const DAEMON_LEAF: &str = "caesard";

/// Each controller a limit needs, and the file the limit is written to.
const CONTROLLERS: [(&str, &str); 3] = [("memory", "memory.max"), ("pids", "pids.max"), ("cpu", "cpu.weight")];

/// Where boxes are made: the delegated cgroup of this process, or its
/// parent when this process sits in the daemon's leaf.
pub fn box_parent() -> Option<PathBuf> {
    delegated().map(|d| beside_leaf(&d))
}

fn beside_leaf(dir: &Path) -> PathBuf {
    match (dir.file_name(), dir.parent()) {
        (Some(name), Some(parent)) if name == DAEMON_LEAF => parent.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// At the daemon's start: enables, for the boxes, the controllers their
/// limits need that the delegated cgroup offers, moving the daemon into
/// [`DAEMON_LEAF`] first unless its cgroup is the root. Returns the
/// controllers enabled now for boxes; changes nothing where there is no
/// delegated cgroup.
pub fn enable_controllers() -> Vec<String> {
    let Some(dir) = delegated() else { return Vec::new() };
    let root = mount_point().is_some_and(|m| m == dir);
    enable_in(&beside_leaf(&dir), std::process::id(), root)
}

fn enable_in(dir: &Path, pid: u32, root: bool) -> Vec<String> {
    let words = |file: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(file)).unwrap_or_default().split_whitespace().map(str::to_owned).collect()
    };
    let (offered, enabled) = (words("cgroup.controllers"), words("cgroup.subtree_control"));
    let wanted: Vec<&str> = CONTROLLERS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| offered.iter().any(|o| o == c) && !enabled.iter().any(|e| e == c))
        .collect();
    if !wanted.is_empty() && !root {
        let leaf = dir.join(DAEMON_LEAF);
        let _ = std::fs::create_dir(&leaf);
        if std::fs::write(leaf.join("cgroup.procs"), pid.to_string()).is_err() {
            return Vec::new();
        }
    }
    wanted
        .into_iter()
        .filter(|c| std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}")).is_ok())
        .map(str::to_owned)
        .collect()
}

/// The limits a task asked for, and which of them its box gets here, in
/// words (the task's `started` event); `None` for a task without limits.
pub fn describe_limits(limits: &crate::launch::BoxLimits) -> Option<String> {
    if limits.is_empty() {
        return None;
    }
    Some(match box_parent() {
        Some(parent) => limits_here(&parent, limits),
        None => "its limits (`[policy] box_*`) are not applied: no delegated cgroup v2 here".to_owned(),
    })
}

fn limits_here(parent: &Path, limits: &crate::launch::BoxLimits) -> String {
    let enabled = std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let (mut applied, mut missing) = (Vec::new(), Vec::new());
    for ((controller, file), value) in CONTROLLERS.iter().zip(limit_values(limits)) {
        let Some(value) = value else { continue };
        if enabled.split_whitespace().any(|c| c == *controller) {
            applied.push(format!("{file} {value}"));
        } else {
            missing.push(*controller);
        }
    }
    let mut out = Vec::new();
    if !applied.is_empty() {
        out.push(format!("limits {}", applied.join(", ")));
    }
    if !missing.is_empty() {
        out.push(format!(
            "not applied: the {} controller(s) not enabled beneath {} (run caesard in a cgroup delegated with them, as `Delegate=yes` in its systemd unit gives)",
            missing.join(", "),
            parent.display()
        ));
    }
    out.join("; ")
}

/// The value written for each of [`CONTROLLERS`], in its order.
fn limit_values(limits: &crate::launch::BoxLimits) -> [Option<String>; 3] {
    [
        limits.memory_max.map(|v| v.to_string()),
        limits.pids_max.map(|v| v.to_string()),
        limits.cpu_weight.map(|v| v.to_string()),
    ]
}

/// Whether a box gets a cgroup here, in words.
pub fn describe() -> String {
    match delegated() {
        Some(dir) => format!(
            "a cgroup v2 of its own beneath {} (delegated), killed whole (`cgroup.kill`) when it ends",
            dir.display()
        ),
        None => {
            "no cgroup of its own (the current cgroup v2 is not delegated to this user, or there is none)".to_owned()
        }
    }
}

/// A box's own cgroup, removed (after `cgroup.kill`) when dropped.
///
/// Issue 33: moving a process that exists into a cgroup (a write to
/// `cgroup.procs`) waits for an RCU grace period in the kernel, 10 to 30 ms
/// on a loaded machine, and moving back out as long again. So the box's
/// first process is forked straight into it ([`BoxCgroup::fd`] for
/// `clone3(CLONE_INTO_CGROUP)`), and the launcher moves itself in
/// ([`BoxCgroup::enter`]) only where that cannot be done.
#[derive(Debug)]
pub struct BoxCgroup {
    dir: PathBuf,
    /// The directory, open, for `CLONE_INTO_CGROUP`.
    fd: Option<std::fs::File>,
    /// The launcher moved itself in, and moves out before the kill.
    moved_in: bool,
}

impl BoxCgroup {
    /// Makes `caesar-box-<pid>` beside the daemon's cgroup and writes the
    /// limits whose controller is enabled there; nothing is in it yet.
    /// `None` where there is no delegated cgroup or the kernel refuses.
    pub fn make(limits: &crate::launch::BoxLimits) -> Option<BoxCgroup> {
        let base = box_parent()?;
        sweep(&base);
        let dir = base.join(format!("{}{}", caesar_proto::peer::BOX_CGROUP_PREFIX, std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        write_limits(&dir, limits);
        let fd = std::fs::File::open(&dir).ok();
        Some(BoxCgroup { dir, fd, moved_in: false })
    }

    /// Moves this process into the cgroup (everything it forks from now on
    /// is in it). False if the kernel refuses.
    pub fn enter(&mut self) -> bool {
        self.moved_in = std::fs::write(self.dir.join("cgroup.procs"), b"0").is_ok();
        self.moved_in
    }

    /// The cgroup's directory, open, for `clone3(CLONE_INTO_CGROUP)`.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.fd.as_ref().map(|f| f.as_fd())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Writes each limit whose file the box's cgroup has (its controller is
/// enabled); the others are said by [`describe_limits`].
fn write_limits(dir: &Path, limits: &crate::launch::BoxLimits) {
    for ((_, file), value) in CONTROLLERS.iter().zip(limit_values(limits)) {
        if let Some(value) = value
            && dir.join(file).is_file()
        {
            let _ = std::fs::write(dir.join(file), value);
        }
    }
}

/// Removes the cgroups of boxes whose launcher is gone (a launcher killed
/// by SIGKILL never removes its own): only empty ones, which `rmdir` alone
/// allows, so a live box's is never touched.
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(caesar_proto::peer::BOX_CGROUP_PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

impl Drop for BoxCgroup {
    fn drop(&mut self) {
        // This process leaves first (back to the parent), then the rest is killed.
        if self.moved_in
            && let Some(parent) = self.dir.parent()
        {
            let _ = std::fs::write(parent.join("cgroup.procs"), b"0");
        }
        let _ = std::fs::write(self.dir.join("cgroup.kill"), b"1");
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::BoxLimits;

    /// A cgroup directory as the kernel shows one, in a plain directory.
    fn fake(dir: &Path, offered: &str, enabled: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("cgroup.controllers"), offered).unwrap();
        std::fs::write(dir.join("cgroup.subtree_control"), enabled).unwrap();
    }

    #[test]
    fn boxes_are_made_beside_the_daemons_leaf() {
        assert_eq!(beside_leaf(Path::new("/sys/fs/cgroup/u/caesard")), Path::new("/sys/fs/cgroup/u"));
        assert_eq!(beside_leaf(Path::new("/sys/fs/cgroup/u/app.scope")), Path::new("/sys/fs/cgroup/u/app.scope"));
    }

    #[test]
    fn the_daemon_moves_into_its_leaf_before_it_enables_the_controllers_offered() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("caesard.service");
        fake(&dir, "cpu io memory", "");
        let enabled = enable_in(&dir, 4242, false);
        // cgroup.subtree_control is a plain file here: the last write stays.
        assert_eq!(enabled, ["memory", "cpu"], "pids is not offered, io is not wanted");
        assert_eq!(std::fs::read_to_string(dir.join(DAEMON_LEAF).join("cgroup.procs")).unwrap(), "4242");
        // Nothing wanted: nothing moves.
        let other = t.path().join("other");
        fake(&other, "memory", "memory");
        assert!(enable_in(&other, 4242, false).is_empty());
        assert!(!other.join(DAEMON_LEAF).exists());
        // The root cgroup takes controllers with processes in it: no leaf.
        let root = t.path().join("root");
        fake(&root, "pids", "");
        assert_eq!(enable_in(&root, 4242, true), ["pids"]);
        assert!(!root.join(DAEMON_LEAF).exists());
    }

    #[test]
    fn limits_are_written_where_their_controller_is_and_said_where_not() {
        let t = tempfile::tempdir().unwrap();
        let parent = t.path();
        fake(parent, "memory pids cpu", "memory cpu");
        let limits = BoxLimits { memory_max: Some(512 << 20), pids_max: Some(256), cpu_weight: Some(50) };
        let said = limits_here(parent, &limits);
        assert!(said.contains("limits memory.max 536870912, cpu.weight 50"), "{said}");
        assert!(said.contains("the pids controller(s) not enabled"), "{said}");
        // The box's cgroup has the files of the enabled controllers only.
        let boxed = parent.join("caesar-box-1");
        std::fs::create_dir(&boxed).unwrap();
        std::fs::write(boxed.join("memory.max"), "max").unwrap();
        write_limits(&boxed, &limits);
        assert_eq!(std::fs::read_to_string(boxed.join("memory.max")).unwrap(), "536870912");
        assert!(!boxed.join("pids.max").exists(), "no file is made for a controller not enabled");
        assert_eq!(describe_limits(&BoxLimits::default()), None);
    }
}

//! A cgroup v2 per box (issue 29), where the user's cgroup is delegated:
//! the launcher ((`supervisor/boxed.rs`)) makes a child cgroup of its own, moves
//! itself into it (so every process of the box is in it, whatever it
//! forks), and on its way out writes `cgroup.kill` and removes it. Where
//! the current cgroup is not writable (not delegated, or cgroup v1 only) the
//! box goes on without one, and [`describe`] says so.

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
#[derive(Debug)]
pub struct BoxCgroup {
    dir: PathBuf,
}

impl BoxCgroup {
    /// Makes `caesar-box-<pid>` beneath the delegated cgroup and moves this
    /// process into it. `None` where there is no delegated cgroup or the
    /// kernel refuses.
    pub fn enter() -> Option<BoxCgroup> {
        let base = delegated()?;
        sweep(&base);
        let dir = base.join(format!("{}{}", caesar_proto::peer::BOX_CGROUP_PREFIX, std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let cg = BoxCgroup { dir };
        std::fs::write(cg.dir.join("cgroup.procs"), b"0").ok()?;
        Some(cg)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
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
        if let Some(parent) = self.dir.parent() {
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

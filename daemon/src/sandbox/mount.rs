//! A mount namespace per agent (issue 19): its reads confined. Between fork
//! and exec the agent unshares a user and a mount namespace (the user's own
//! uid and gid mapped to themselves, `setgroups` denied), makes `/`
//! recursively private, and hides caesar's state, config and runtime
//! directories behind empty read-only tmpfs mounts, re-exposing by bind
//! mount only what it needs beneath them (its own task directory, the main
//! socket's directory, its worktree): `caesar.db`, other tasks' directories,
//! its own `<id>.daemon/`, the HTTP token and caesar's configuration are
//! then absent for it. Landlock comes after (a domain forbids mounting), and
//! its ptrace scoping keeps `/proc/<pid>/root` of the daemon out of reach.
//!
//! The daemon decides the directories ([`dirs`]) where [`works`] (probed
//! once); the supervisor turns them into a [`Plan`] before it forks
//! ([`Plan::new`], every path a C string, the mount trees cloned in the
//! child before the tmpfs covers their paths) and the agent's `pre_exec`
//! only makes system calls ([`Plan::apply`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// At most this many directories re-exposed (the child keeps their cloned
/// trees in a fixed array: it cannot allocate).
const MAX_EXPOSE: usize = 16;

/// The hidden and re-exposed directories of a task, from what the daemon
/// would hide and expose: missing paths dropped, a hidden path beneath
/// another one dropped (the outer one covers it), one that is itself
/// re-exposed dropped (nothing to hide), and only what lies strictly
/// beneath a hidden path re-exposed (the outermost of nested ones).
pub fn dirs(hide: &[PathBuf], expose: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let exists = |p: &&PathBuf| p.is_absolute() && p.is_dir();
    let mut hidden: Vec<PathBuf> = Vec::new();
    for h in hide.iter().filter(exists) {
        if !expose.contains(h) && !hidden.contains(h) {
            hidden.push(h.clone());
        }
    }
    let keep = hidden.clone();
    hidden.retain(|h| !keep.iter().any(|o| o != h && h.starts_with(o)));
    let beneath = |p: &PathBuf| hidden.iter().any(|h| p.starts_with(h) && p != h);
    let mut exposed: Vec<PathBuf> = Vec::new();
    for e in expose.iter().filter(exists).filter(|e| beneath(e)) {
        if !exposed.contains(e) {
            exposed.push(e.clone());
        }
    }
    let keep = exposed.clone();
    exposed.retain(|e| !keep.iter().any(|o| o != e && e.starts_with(o)));
    (hidden, exposed)
}

/// Whether an agent can have a mount namespace here: the whole sequence
/// of [`Plan::apply`], tried once in a throwaway child on a temporary
/// directory (a hidden directory with one re-exposed inside it).
pub fn works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            if std::env::var("CAESAR_MOUNT_NS").is_ok_and(|v| v == "off") {
                return false;
            }
            let d = std::env::temp_dir().join(format!("caesar-mount-probe-{}", std::process::id()));
            let works = probe(&d);
            let _ = std::fs::remove_dir_all(&d);
            works
        }
        #[cfg(not(target_os = "linux"))]
        false
    })
}

/// [`works`] in the directory `d` (made, and left for the caller to remove).
#[cfg(target_os = "linux")]
fn probe(d: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    let (hide, expose) = (d.join("h"), d.join("h/e"));
    if std::fs::create_dir_all(&expose).is_err() || std::fs::write(hide.join("secret"), "").is_err() {
        return false;
    }
    let Ok(Some(plan)) = Plan::new(std::slice::from_ref(&hide), &[expose], &[]) else { return false };
    // Inside, the hidden file is gone and the exposed directory is there.
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg("test ! -e \"$1/secret\" && test -d \"$1/e\"").arg("probe").arg(&hide);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    cmd.stderr(std::process::Stdio::null());
    // SAFETY: the closure makes only system calls on buffers `plan` owns.
    unsafe {
        cmd.pre_exec(move || plan.apply());
    }
    cmd.status().is_ok_and(|s| s.success())
}

/// At most this many paths kept read-only.
const MAX_READONLY: usize = 64;

/// The mount flags of the mount `p` is on that a remount in a user
/// namespace must keep (the kernel locks them): nosuid, nodev, noexec and
/// the atime ones.
fn locked_flags(p: &Path) -> u64 {
    #[cfg(target_os = "linux")]
    {
        use nix::libc;
        let Ok(c) = c_path(p) else { return 0 };
        // SAFETY: a NUL-terminated path and a zeroed struct the call fills.
        let f = unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(c.as_ptr(), &mut st) != 0 {
                return 0;
            }
            st.f_flag
        };
        let mut out = 0u64;
        for (have, flag) in [
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if f & have != 0 {
                out |= flag;
            }
        }
        out
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = p;
        0
    }
}

/// One directory re-exposed: its path, and the directories to make in the
/// tmpfs on the way down to it.
struct Expose {
    target: CString,
    mkdirs: Vec<CString>,
}

/// Everything the child needs, as C strings and bytes built before the fork.
pub struct Plan {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    hide: Vec<CString>,
    expose: Vec<Expose>,
    /// Bound read-only over themselves (existing paths), with the flags of
    /// the mount each is on (a remount must keep those the kernel locked).
    readonly: Vec<(CString, u64)>,
    /// The working directory, entered again once the mounts are made (the
    /// inherited one would still be the covered directory, whose `..`
    /// leads back into what is hidden).
    cwd: Option<CString>,
    /// The hidden and re-exposed directories as paths ([`dirs`]), for [`Plan::carve_writes`].
    hidden_paths: Vec<PathBuf>,
    exposed_paths: Vec<PathBuf>,
    /// The carving of the writable paths done by mounts ([`super::mount_carve`]), where it is.
    carve: Option<CarveMounts>,
}

/// [`super::mount_carve::Carve`] as the child needs it.
struct CarveMounts {
    ro_dirs: Vec<(CString, u64)>,
    keep: Vec<CString>,
    ro_trees: Vec<(CString, u64)>,
    keep_inside: Vec<CString>,
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("a path with a NUL byte: {}", p.display()))
}

impl Plan {
    /// The plan for these directories (filtered by [`dirs`]); `None` when
    /// nothing is left to hide (a Kubernetes pod, where caesar's
    /// directories do not exist).
    pub fn new(hide: &[PathBuf], expose: &[PathBuf], readonly: &[PathBuf]) -> Result<Option<Plan>, String> {
        let (hide, expose) = dirs(hide, expose);
        if hide.is_empty() {
            return Ok(None);
        }
        if expose.len() > MAX_EXPOSE {
            return Err(format!("more than {MAX_EXPOSE} directories to re-expose in the agent's mount namespace"));
        }
        let mut exposes = Vec::new();
        for e in &expose {
            let Some(root) = hide.iter().find(|h| e.starts_with(h)) else { continue };
            let mut mkdirs = Vec::new();
            let mut at = root.clone();
            for part in e.strip_prefix(root).map_err(|e| e.to_string())?.components() {
                at.push(part);
                mkdirs.push(c_path(&at)?);
            }
            exposes.push(Expose { target: c_path(e)?, mkdirs });
        }
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        let mut ro = Vec::new();
        for r in readonly.iter().filter(|r| r.is_absolute() && r.exists()) {
            if ro.len() == MAX_READONLY {
                return Err(format!("more than {MAX_READONLY} paths to keep read-only in the agent's mount namespace"));
            }
            ro.push((c_path(r)?, locked_flags(r)));
        }
        Ok(Some(Plan {
            readonly: ro,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            hide: hide.iter().map(|h| c_path(h)).collect::<Result<_, _>>()?,
            expose: exposes,
            cwd: std::env::current_dir().ok().map(|d| c_path(&d)).transpose()?,
            hidden_paths: hide,
            exposed_paths: expose,
            carve: None,
        }))
    }

    /// Carves `protect` and `shield` out of `writable` with mounts in this
    /// namespace ([`super::mount_carve`], issue 33) rather than with a
    /// Landlock rule per entry of each writable ancestor. Returns the paths
    /// Landlock is to make writable; `None` where mounts cannot stand for
    /// the carving (the caller carves with Landlock then).
    pub fn carve_writes(
        &mut self,
        writable: &[PathBuf],
        protect: &[PathBuf],
        shield: &[PathBuf],
    ) -> Option<Vec<PathBuf>> {
        let (roots, c) = super::mount_carve::plan(writable, protect, shield, &self.hidden_paths, &self.exposed_paths)?;
        let flagged = |v: &[PathBuf]| -> Option<Vec<(CString, u64)>> {
            v.iter().map(|p| c_path(p).ok().map(|c| (c, locked_flags(p)))).collect()
        };
        let plain = |v: &[PathBuf]| -> Option<Vec<CString>> { v.iter().map(|p| c_path(p).ok()).collect() };
        self.carve = Some(CarveMounts {
            ro_dirs: flagged(&c.ro_dirs)?,
            keep: plain(&c.keep)?,
            ro_trees: flagged(&c.ro_trees)?,
            keep_inside: plain(&c.keep_inside)?,
        });
        Some(roots)
    }

    /// In the agent, between fork and exec: the namespaces, the tmpfs
    /// mounts and the binds. Only system calls on buffers built before the
    /// fork (async-signal-safe).
    pub fn apply(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            use nix::libc;
            let err = std::io::Error::last_os_error;
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            let mut trees = [-1 as libc::c_int; MAX_EXPOSE];
            let mut kept = [-1 as libc::c_int; super::mount_carve::MAX_KEEP];
            let none = std::ptr::null::<libc::c_char>();
            // SAFETY: system calls on NUL-terminated strings and buffers
            // owned by `self`, and on fds this process holds.
            unsafe {
                if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                    return Err(err());
                }
                super::write_file(c"/proc/self/setgroups", b"deny")?;
                super::write_file(c"/proc/self/uid_map", &self.uid_map)?;
                super::write_file(c"/proc/self/gid_map", &self.gid_map)?;
                if libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
                    return Err(err());
                }
                // The re-exposed trees (and the entries the carving keeps) are
                // cloned while their paths still lead to them.
                for (i, e) in self.expose.iter().enumerate() {
                    trees[i] = clone_tree(&e.target)?;
                }
                let carve = self.carve.as_ref();
                let keeps = carve.map(|c| c.keep.iter().chain(&c.keep_inside)).into_iter().flatten();
                for (i, k) in keeps.enumerate() {
                    kept[i] = clone_tree(k)?;
                }
                // The directories on the way to what is carved out: read-only, their other entries as they were.
                if let Some(c) = carve {
                    for (d, locked) in &c.ro_dirs {
                        bind_read_only(d, *locked)?;
                    }
                    for (i, k) in c.keep.iter().enumerate() {
                        move_tree(kept[i], k)?;
                    }
                }
                for h in &self.hide {
                    let opts = c"mode=0700,size=1m";
                    if libc::mount(c"tmpfs".as_ptr(), h.as_ptr(), c"tmpfs".as_ptr(), flags, opts.as_ptr().cast()) != 0 {
                        return Err(err());
                    }
                }
                for (i, e) in self.expose.iter().enumerate() {
                    for d in &e.mkdirs {
                        if libc::mkdir(d.as_ptr(), 0o700) != 0 {
                            let e = err();
                            if e.raw_os_error() != Some(libc::EEXIST) {
                                return Err(e);
                            }
                        }
                    }
                    move_tree(trees[i], &e.target)?;
                }
                for h in &self.hide {
                    let ro = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags;
                    if libc::mount(none, h.as_ptr(), none, ro, std::ptr::null()) != 0 {
                        return Err(err());
                    }
                }
                // What is carved out itself: read-only, a writable path inside it as it was.
                if let Some(c) = carve {
                    for (t, locked) in &c.ro_trees {
                        bind_read_only(t, *locked)?;
                    }
                    for (i, k) in c.keep_inside.iter().enumerate() {
                        move_tree(kept[c.keep.len() + i], k)?;
                    }
                }
                // The CLI's configuration and the shared caches: bound over
                // themselves, then made read-only (locked with the rest below).
                for (r, locked) in &self.readonly {
                    bind_read_only(r, *locked)?;
                }
                // A second user and mount namespace below the first: the
                // mounts copied into it are locked together (the kernel
                // locks what a less privileged namespace inherits), so an
                // agent that is root in its namespace cannot unmount a
                // tmpfs to uncover what it hides, nor remount it writable.
                if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                    return Err(err());
                }
                super::write_file(c"/proc/self/uid_map", &self.uid_map)?;
                super::write_file(c"/proc/self/gid_map", &self.gid_map)?;
                if let Some(cwd) = &self.cwd {
                    // A working directory now hidden is not kept: the agent
                    // starts at `/` then.
                    if libc::chdir(cwd.as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0 {
                        return Err(err());
                    }
                }
            }
        }
        Ok(())
    }
}

/// A clone of the mount tree at `path` (recursive), to be moved somewhere
/// with [`move_tree`]. Only system calls (between fork and exec).
#[cfg(target_os = "linux")]
unsafe fn clone_tree(path: &std::ffi::CStr) -> std::io::Result<nix::libc::c_int> {
    use nix::libc;
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let how = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), how) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd as libc::c_int)
}

/// Mounts the tree `fd` ([`clone_tree`]) at `path` and closes it.
#[cfg(target_os = "linux")]
unsafe fn move_tree(fd: nix::libc::c_int, path: &std::ffi::CStr) -> std::io::Result<()> {
    use nix::libc;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    // SAFETY: an fd this process holds and a NUL-terminated path.
    unsafe {
        let moved = libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        );
        if moved != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::close(fd);
    }
    Ok(())
}

/// Binds `path` over itself (with what is mounted beneath it), then makes
/// that bind read-only, keeping the flags the kernel locked (`locked`).
#[cfg(target_os = "linux")]
unsafe fn bind_read_only(path: &std::ffi::CStr, locked: u64) -> std::io::Result<()> {
    use nix::libc;
    let none = std::ptr::null::<libc::c_char>();
    // SAFETY: NUL-terminated paths.
    unsafe {
        if libc::mount(path.as_ptr(), path.as_ptr(), none, libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let ro = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | locked as libc::c_ulong;
        if libc::mount(none, path.as_ptr(), none, ro, std::ptr::null()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn what_is_hidden_stays_hidden_even_for_root_in_the_namespace() {
        use std::os::unix::process::CommandExt;
        if !works() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (hide, expose) = (d.path().join("state"), d.path().join("state/tasks/t_1"));
        std::fs::create_dir_all(&expose).unwrap();
        std::fs::write(hide.join("caesar.db"), "secret").unwrap();
        std::fs::write(expose.join("mine"), "mine").unwrap();
        let plan = Plan::new(std::slice::from_ref(&hide), std::slice::from_ref(&expose), &[]).unwrap().unwrap();
        // Root in its namespace (as here, running as root) keeps its
        // capabilities across exec: it tries to unmount and remount.
        let script = r#"umount -l "$1/tasks/t_1" 2>/dev/null; umount -l "$1" 2>/dev/null; mount -o remount,rw "$1" 2>/dev/null
            if test -e "$1/caesar.db"; then echo uncovered; fi; cat "$1/tasks/t_1/mine"; : > "$1/planted" 2>/dev/null && echo wrote"#;
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(script).arg("t").arg(&hide);
        // SAFETY: the closure makes only system calls on buffers `plan` owns.
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(said.trim(), "mine", "{said}");
        assert!(!hide.join("planted").exists());
    }

    /// Issue 29: a CLI's settings file stays read-only to its agent (even
    /// root in its namespace, as here), beneath a writable directory.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_read_only_path_is_bound_read_only_in_the_namespace() {
        use std::os::unix::process::CommandExt;
        if !works() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (hide, cli) = (d.path().join("state"), d.path().join("home/.claude"));
        std::fs::create_dir_all(&hide).unwrap();
        std::fs::create_dir_all(&cli).unwrap();
        std::fs::write(cli.join("settings.json"), "{}").unwrap();
        let plan = Plan::new(std::slice::from_ref(&hide), &[], &[cli.join("settings.json")]).unwrap().unwrap();
        let script = r#"echo '{"hooks":1}' > "$1/settings.json" 2>/dev/null && echo wrote-settings
            mount -o remount,rw "$1/settings.json" 2>/dev/null; umount -l "$1/settings.json" 2>/dev/null
            echo '{"hooks":2}' > "$1/settings.json" 2>/dev/null && echo wrote-again
            echo session > "$1/session" && echo session-ok"#;
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(script).arg("t").arg(&cli);
        // SAFETY: the closure makes only system calls on buffers `plan` owns.
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(said.trim(), "session-ok", "{said}");
        assert_eq!(std::fs::read_to_string(cli.join("settings.json")).unwrap(), "{}");
    }

    /// Issue 33: caesar's home beneath a writable `/tmp` carved out by
    /// mounts: nothing new beside caesar's directories, which cannot be
    /// moved either, while its other entries and the root stay writable.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_carving_by_mounts_keeps_the_root_and_the_entries_beside_writable() {
        use std::os::unix::process::CommandExt;
        if !works() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        for s in ["home/state/tasks/t_1", "home/run", "home/files", "ws"] {
            std::fs::create_dir_all(p(s)).unwrap();
        }
        let mut plan = Plan::new(&[p("home/state")], &[p("home/state/tasks/t_1")], &[]).unwrap().unwrap();
        let roots = plan
            .carve_writes(&[d.path().to_path_buf()], &[p("ws")], &[p("home/state"), p("home/run")])
            .expect("mounts stand for this carving");
        assert_eq!(roots, [d.path().to_path_buf()]);
        // `echo 2>/dev/null >file`: a failed redirection of `:` (a special builtin) ends `sh`.
        let script = r#"cd "$1"; echo >new-in-root && echo root-ok; echo >home/files/f && echo files-ok
            echo 2>/dev/null >home/beside && echo beside; echo 2>/dev/null >home/run/planted && echo run
            echo 2>/dev/null >ws/planted && echo ws; mv home moved 2>/dev/null && echo moved-home
            mv home/run home/run2 2>/dev/null && echo moved-run; echo >home/state/tasks/t_1/mine && echo mine-ok"#;
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(script).arg("t").arg(d.path());
        // SAFETY: the closure makes only system calls on buffers `plan` owns.
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(said.split_whitespace().collect::<Vec<_>>(), ["root-ok", "files-ok", "mine-ok"], "{said} {err}");
        assert!(p("home/run").is_dir() && !p("moved").exists() && !p("home/beside").exists());
    }

    #[test]
    fn only_what_lies_beneath_a_hidden_directory_is_re_exposed() {
        let d = tempfile::tempdir().unwrap();
        let p = |s: &str| d.path().join(s);
        for s in ["state/tasks/t_1/wt", "state/run", "config", "ws", "run"] {
            std::fs::create_dir_all(p(s)).unwrap();
        }
        let hide = [p("state"), p("config"), p("run"), p("state/run"), p("missing")];
        let expose = [p("state/tasks/t_1"), p("state/tasks/t_1/wt"), p("state/run"), p("ws"), p("run")];
        let (h, e) = dirs(&hide, &expose);
        // `run` is the socket's directory itself: nothing to hide there.
        assert_eq!(h, vec![p("state"), p("config")]);
        assert_eq!(e, vec![p("state/tasks/t_1"), p("state/run")]);
    }
}

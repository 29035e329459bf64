//! The PID namespace of a task's box (issue 29): whether this kernel gives
//! an unprivileged user one, and entering it. The launcher that uses it is
//! `supervisor/boxed.rs`.

/// `CAESAR_PID_NS=off` in the daemon's environment: no PID namespace (a
/// host whose namespaces misbehave; the fallback's tests).
pub const PID_NS_ENV: &str = "CAESAR_PID_NS";

/// Whether a task can have a PID namespace of its own here: an unprivileged
/// user and PID namespace, tried once in a throwaway child.
pub fn works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            if std::env::var(PID_NS_ENV).is_ok_and(|v| v == "off") {
                return false;
            }
            use std::os::unix::process::CommandExt;
            let mut cmd = std::process::Command::new("true");
            cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
            cmd.stderr(std::process::Stdio::null());
            let (uid, gid) = id_maps();
            // SAFETY: system calls on buffers built before the fork.
            unsafe {
                cmd.pre_exec(move || enter(&uid, &gid));
            }
            cmd.status().is_ok_and(|s| s.success())
        }
        #[cfg(not(target_os = "linux"))]
        false
    })
}

/// Whether the process tree of a task is bounded here, in words (doctor and
/// the task's `started` event).
pub fn describe() -> String {
    let pid = if works() {
        "a PID namespace per task whose init is caesar's launcher: when the task ends, nothing it started survives, \
         however it forked (its agent, setup and verify each in one)"
    } else {
        "no PID namespace (no unprivileged user namespaces here, or CAESAR_PID_NS=off): the task's processes are \
         found by its supervisor's scan and markers, which a process that forks away in a loop can outrun"
    };
    format!("{pid}; {}", super::cgroup::describe())
}

#[cfg(target_os = "linux")]
pub fn id_maps() -> (Vec<u8>, Vec<u8>) {
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    (format!("{uid} {uid} 1\n").into_bytes(), format!("{gid} {gid} 1\n").into_bytes())
}

/// A user namespace mapping the user's own ids to themselves, and a PID
/// namespace for this process's children. Only system calls.
#[cfg(target_os = "linux")]
pub fn enter(uid_map: &[u8], gid_map: &[u8]) -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: system calls on static C strings and the caller's buffers.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        crate::sandbox::write_file(c"/proc/self/setgroups", b"deny")?;
        crate::sandbox::write_file(c"/proc/self/uid_map", uid_map)?;
        crate::sandbox::write_file(c"/proc/self/gid_map", gid_map)?;
    }
    Ok(())
}

/// [`describe`] for a CLI that builds its own sandbox and so gets no PID
/// namespace of caesar's (`SandboxSpec::no_pid_ns`).
pub fn describe_without(provider: crate::launch::ProviderId) -> String {
    format!(
        "no PID namespace for {provider}: its own sandbox needs user namespaces of its own, which it cannot make \
         inside caesar's; its processes are found by its supervisor's scan and markers; {}",
        super::cgroup::describe()
    )
}

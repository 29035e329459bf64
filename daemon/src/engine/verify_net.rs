//! A verification under its task's network policy (issue 17, item 5): when
//! the task's agent runs with the network cut, its `verify` commands must
//! not reach the network either. Caesar cuts it itself, since the commands
//! are plain `sh -c` and no provider's sandbox covers them:
//!
//! - first choice, a network namespace of their own (an unprivileged user
//!   namespace mapping only the user's own ids, so files keep their owner),
//!   where only a loopback of its own is up: nothing outside it, the host's
//!   loopback included, can be reached, by TCP, UDP or anything else;
//! - where user namespaces are refused, Landlock (ABI 4 and later) denying
//!   every TCP connect and bind, plus abstract Unix sockets outside the
//!   domain (ABI 6); UDP is not covered there;
//! - where neither exists, the verification is not run: it fails, saying why.

/// How the network was cut for one verification.
#[derive(Debug)]
pub(super) enum Cut {
    /// A network namespace (ids: the user's own uid and gid, mapped to themselves).
    Namespace { uid_map: Vec<u8>, gid_map: Vec<u8> },
    /// A Landlock ruleset fd denying TCP.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Landlock(std::os::fd::OwnedFd),
}

/// Whether unprivileged user and network namespaces work here: tried once,
/// in a throwaway child.
fn namespaces_work() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let mut cmd = std::process::Command::new("true");
            // SAFETY: one system call between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if nix::libc::unshare(nix::libc::CLONE_NEWUSER | nix::libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.status().is_ok_and(|s| s.success())
        }
        #[cfg(not(target_os = "linux"))]
        false
    })
}

/// The way to cut the network on this machine, or why there is none.
pub(super) fn plan() -> Result<Cut, String> {
    #[cfg(target_os = "linux")]
    {
        // `CAESAR_VERIFY_NET_CUT=landlock` takes Landlock even where
        // namespaces work (a host whose namespaces misbehave; tests).
        let landlock_only = std::env::var("CAESAR_VERIFY_NET_CUT").is_ok_and(|v| v == "landlock");
        if !landlock_only && namespaces_work() {
            let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
            return Ok(Cut::Namespace {
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            });
        }
        use landlock::{ABI, Access, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};
        if crate::sandbox::kernel_abi().is_some_and(|abi| abi >= 4) {
            let e = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
            let mut ruleset = Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessNet::from_all(ABI::V4))
                .map_err(e)?;
            if crate::sandbox::kernel_abi().is_some_and(|abi| abi >= 6) {
                ruleset =
                    ruleset.set_compatibility(CompatLevel::BestEffort).scope(Scope::AbstractUnixSocket).map_err(e)?;
            }
            let created = ruleset.create().map_err(e)?;
            let fd: Option<std::os::fd::OwnedFd> = created.into();
            if let Some(fd) = fd {
                return Ok(Cut::Landlock(fd));
            }
        }
    }
    Err("this task runs with the network cut, and this machine offers no way to cut it for its verification \
         (no unprivileged user namespaces, no Landlock ABI 4): the commands were not run. \
         Run the task with network `on`/`auto`, or verify it by hand"
        .to_owned())
}

impl Cut {
    /// Arranges for `cmd`'s child to run with the network cut.
    pub(super) fn apply(self, cmd: &mut tokio::process::Command) {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: the closure makes only system calls on buffers built
            // before the fork (no allocation, no locks).
            unsafe {
                cmd.pre_exec(move || self.in_child());
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = cmd;
    }

    #[cfg(target_os = "linux")]
    fn in_child(&self) -> std::io::Result<()> {
        use nix::libc;
        let err = std::io::Error::last_os_error;
        match self {
            Cut::Landlock(fd) => {
                use std::os::fd::AsRawFd;
                crate::sandbox::restrict_in_child(fd.as_raw_fd())
            }
            Cut::Namespace { uid_map, gid_map } => {
                // SAFETY: system calls on static C strings and buffers owned by `self`.
                unsafe {
                    if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                        return Err(err());
                    }
                    crate::sandbox::write_file(c"/proc/self/setgroups", b"deny")?;
                    crate::sandbox::write_file(c"/proc/self/uid_map", uid_map)?;
                    crate::sandbox::write_file(c"/proc/self/gid_map", gid_map)?;
                    // A loopback of its own, so the commands' own local servers work.
                    let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
                    if s >= 0 {
                        let mut ifr: libc::ifreq = std::mem::zeroed();
                        for (i, b) in b"lo".iter().enumerate() {
                            ifr.ifr_name[i] = *b as libc::c_char;
                        }
                        if libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) == 0 {
                            ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
                            libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr);
                        }
                        libc::close(s);
                    }
                }
                Ok(())
            }
        }
    }
}

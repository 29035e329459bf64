//! The box (issue 29): the one launcher every process of a task goes through.
//!
//! The agent (started by its supervisor), its `[worktree] setup` and its
//! `verify` commands (started by the daemon) are each started as
//! `caesard __boxed [--grace-ms N] [--report-fd N] -- program args…`, with
//! the task's confinement in [`crate::sandbox::ENV`] and an environment the
//! caller already cut to the agent's allowlist ([`crate::agent_env`]). The
//! launcher, a fresh single-threaded process:
//!
//! 1. builds the task's Landlock ruleset and mount plan
//!    ([`crate::sandbox::prepare`]);
//! 2. where the kernel allows it ([`pid_ns_works`]), unshares a user and a
//!    PID namespace and forks the namespace's init: the init starts the
//!    program (pid 2, with the mount namespace and Landlock of the task
//!    applied between fork and exec), reaps whatever is re-parented to it,
//!    and when the program ends sends SIGTERM to everything left, waits the
//!    grace, and exits; the kernel then SIGKILLs whatever is still in the
//!    namespace, however it forked. The init dies with the launcher
//!    (`PR_SET_PDEATHSIG`), so a launcher killed (a cancel's SIGKILL to the
//!    group, a restarted daemon stopping what a dead supervisor left) takes
//!    the namespace with it. A supervisor killed alone leaves the box
//!    running as it left the agent before: the next daemon stops it;
//! 3. where it does not, applies the confinement to itself and execs the
//!    program: today's behaviour, said in [`describe`].
//!
//! The launcher keeps the program's exit status (a signal is raised again),
//! so its caller sees the program's ending as before. A program that cannot
//! be started is said on stdout (`caesar: …`) and, with `--report-fd`, on
//! that pipe, which the supervisor reads to record a spawn error; the
//! launcher then exits 127.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::launch::ProviderId;
use crate::sandbox::SandboxSpec;

/// The launcher's and its init's process name: not `caesard`, so that
/// `pkill -x caesard` stops the daemon and never a task.
pub const PROCESS_NAME: &std::ffi::CStr = c"caesar-box";

/// The argument that selects the launcher in the `caesard` binary.
pub const BOXED_ARG: &str = "__boxed";

/// The launcher's command line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxedArgs {
    /// Between the SIGTERM to what the program left and the namespace's end.
    pub grace_ms: u64,
    /// A pipe on which a failure to start the program is written.
    pub report_fd: Option<i32>,
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl BoxedArgs {
    /// Parses what follows `__boxed`.
    pub fn parse(argv: &[OsString]) -> Result<BoxedArgs, String> {
        let mut grace_ms = 2000;
        let mut report_fd = None;
        let mut i = 0;
        while i < argv.len() {
            let flag = argv[i].to_string_lossy();
            let value = || {
                argv.get(i + 1).map(|v| v.to_string_lossy().into_owned()).ok_or_else(|| format!("{flag} needs a value"))
            };
            match flag.as_ref() {
                "--grace-ms" => grace_ms = value()?.parse().map_err(|e| format!("--grace-ms: {e}"))?,
                "--report-fd" => report_fd = Some(value()?.parse().map_err(|e| format!("--report-fd: {e}"))?),
                "--" => {
                    let program = argv.get(i + 1).cloned().ok_or("no program after --")?;
                    return Ok(BoxedArgs {
                        grace_ms: grace_ms.min(super::MAX_GRACE_MS),
                        report_fd,
                        program,
                        args: argv[i + 2..].to_vec(),
                    });
                }
                other => return Err(format!("unknown argument `{other}`: expected --grace-ms, --report-fd or --")),
            }
            i += 2;
        }
        Err("no program: expected `-- <program> [args...]`".to_owned())
    }
}

/// The launcher's arguments before the program: `__boxed --grace-ms N --`.
pub fn argv_prefix(grace_ms: u64, report_fd: Option<i32>) -> Vec<String> {
    let mut v = vec![BOXED_ARG.to_owned(), "--grace-ms".to_owned(), grace_ms.to_string()];
    if let Some(fd) = report_fd {
        v.extend(["--report-fd".to_owned(), fd.to_string()]);
    }
    v.push("--".to_owned());
    v
}

/// What one task's box is made of, for a command the daemon starts itself
/// (setup, verify): the task's confinement for a given working directory,
/// and the environment the agent's allowlist lets through.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The caesard binary.
    pub exe: PathBuf,
    pub grace_ms: u64,
    /// The environment (already allowlisted).
    pub env: Vec<(OsString, OsString)>,
    /// The confinement for a working directory.
    pub spec: SpecInputs,
}

/// What the task's confinement is computed from ([`task_spec`]).
#[derive(Debug, Clone)]
pub struct SpecInputs {
    pub task_root: PathBuf,
    pub workspace: PathBuf,
    pub read_only: bool,
    pub provider: ProviderId,
    /// caesar's state, config and runtime directories and the socket's.
    pub state_dir: PathBuf,
    pub config_dir: PathBuf,
    pub runtime_dir: PathBuf,
    pub socket: PathBuf,
    /// The agent's environment as the daemon adds it (its state variables).
    pub env: Vec<(String, String)>,
    /// Reads confined too (not in a Kubernetes pod).
    pub hide: bool,
    /// The repository's root, with its `.git`, when the project is a
    /// directory beneath it: out of a worktree task's reach (issue 29).
    pub repo_root: Option<PathBuf>,
    /// The kernel's limits on the box's cgroup.
    pub limits: crate::launch::BoxLimits,
}

impl Launcher {
    /// `program args` in the box, in `dir`: a process group of its own,
    /// stdin closed; the caller sets its output.
    pub fn command(&self, dir: &Path, program: &str, args: &[String]) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.args(argv_prefix(self.grace_ms, None)).arg(program).args(args);
        cmd.env_clear().envs(self.env.iter().map(|(k, v)| (k, v))).env("PWD", dir).current_dir(dir);
        let spec = task_spec(&self.spec, dir);
        cmd.env(crate::sandbox::ENV, serde_json::to_string(&spec).unwrap_or_default());
        cmd.stdin(std::process::Stdio::null());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }
}

/// The confinement of a task whose agent works in `workdir` (issue 19):
/// writes confined (a read-only task's to its task directory, temp and its
/// CLI's state; a write task's to its workdir too), caesar's directories
/// (and a worktree task's main tree) out of reach, and its reads of caesar's
/// directories confined in a mount namespace where the kernel allows one.
pub fn task_spec(i: &SpecInputs, workdir: &Path) -> SandboxSpec {
    let mut shield: Vec<PathBuf> = [&i.state_dir, &i.config_dir, &i.runtime_dir]
        .into_iter()
        .cloned()
        .chain(i.socket.parent().map(Path::to_path_buf))
        .collect();
    if workdir != i.workspace {
        shield.push(crate::config::project_root(&i.workspace));
        shield.extend(i.repo_root.clone());
    }
    let mut sandbox = if i.read_only {
        crate::sandbox::for_task(true, &i.task_root, workdir, i.provider, &i.env)
    } else {
        crate::sandbox::for_write_task(&i.task_root, workdir, &shield, i.provider, &i.env)
    };
    if i.read_only && sandbox.confine_writes {
        sandbox.shield = shield;
    }
    if i.read_only {
        // As given and as the kernel resolves them: the carving compares
        // paths as strings, so a project named through a symbolic link
        // (its workspace a subdirectory of it) is protected beneath a
        // writable `/tmp` by its real path too. The workdir is already real.
        // The repository around a project that a `.caesar` marks in one of
        // its subdirectories too.
        let roots = [crate::config::project_root(&i.workspace), i.workspace.clone()];
        for p in roots.into_iter().chain(i.repo_root.clone()) {
            let real = p.canonicalize().unwrap_or_else(|_| p.clone());
            for q in [p, real] {
                if !sandbox.protect.contains(&q) {
                    sandbox.protect.push(q);
                }
            }
        }
    }
    // Issue 29: the CLI's settings, hooks and MCP-server files stay
    // read-only beneath its writable state directory.
    sandbox.readonly = crate::sandbox::cli_config_files(i.provider, &i.env);
    // The cgroup tree too: nothing of the box may move itself out of the
    // box's cgroup (which the daemon's authority check reads).
    #[cfg(target_os = "linux")]
    sandbox.readonly.extend(crate::sandbox::cgroup::mount_point());
    sandbox.no_pid_ns = crate::sandbox::has_own_sandbox(i.provider);
    sandbox.limits = i.limits;
    // On this machine (not in a pod), the daemon's one check stands for every box.
    if i.hide {
        sandbox.pid_ns_works = Some(crate::sandbox::pid_ns::works());
    }
    if i.hide && crate::sandbox::mount::works() {
        sandbox.hide = [&i.state_dir, &i.config_dir, &i.runtime_dir].into_iter().cloned().collect();
        sandbox.expose = crate::sandbox::exposed(&i.task_root, workdir, &i.workspace, &i.socket, &i.env);
    }
    sandbox
}

/// Runs the launcher to its end; returns the exit code (a program killed by
/// a signal is ended by that signal again where it can be).
#[cfg(unix)]
pub fn run(args: BoxedArgs) -> i32 {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    // The stop signals a caller sends to the group are for the program:
    // blocked here (and in the init), unblocked in the program.
    let mut stop = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT] {
        stop.add(s);
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop), None);
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(PROCESS_NAME);
    let report = args.report_fd.map(|fd| {
        // SAFETY: the caller handed this fd to this process, for it alone.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let _ = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
        std::fs::File::from(fd)
    });
    let spec = match std::env::var(crate::sandbox::ENV).ok().map(|j| serde_json::from_str::<SandboxSpec>(&j)) {
        None => None,
        Some(Ok(spec)) => Some(spec),
        Some(Err(e)) => return refuse(report.as_ref(), &format!("unreadable {}: {e}", crate::sandbox::ENV)),
    };
    #[cfg(target_os = "linux")]
    let no_pid_ns = spec.as_ref().is_some_and(|s| s.no_pid_ns);
    // The daemon's word where it gave one: probing here costs a fork and an exec per box.
    #[cfg(target_os = "linux")]
    let pid_ns_works = || spec.as_ref().and_then(|s| s.pid_ns_works).unwrap_or_else(crate::sandbox::pid_ns::works);
    let sandbox = match spec.as_ref().map(crate::sandbox::prepare) {
        None => None,
        Some(Ok(p)) => p,
        Some(Err(e)) => return refuse(report.as_ref(), &e),
    };
    // A cgroup of its own where the user's is delegated: everything the
    // box starts is in it, and is killed with it (dropped last).
    #[cfg(target_os = "linux")]
    let mut cgroup = crate::sandbox::cgroup::BoxCgroup::make(&spec.as_ref().map(|s| s.limits).unwrap_or_default());
    #[cfg(target_os = "linux")]
    if !no_pid_ns && pid_ns_works() {
        let (uid, gid) = crate::sandbox::pid_ns::id_maps();
        if crate::sandbox::pid_ns::enter(&uid, &gid).is_ok() {
            let status = boxed_init::fork_init(&args, sandbox, report, cgroup.as_mut());
            drop(cgroup);
            return status.map_or_else(|code| code, |st| boxed_init::end_like(st, stop));
        }
    }
    #[cfg(target_os = "linux")]
    let cgroup = cgroup.and_then(|mut c| c.enter().then_some(c));
    #[cfg(target_os = "linux")]
    if cgroup.is_some() {
        // No PID namespace but a cgroup: the program as a child, so that
        // the cgroup is killed when it ends.
        let status = boxed_init::spawn_and_wait(&args, sandbox, report);
        drop(cgroup);
        return status.map_or_else(|code| code, |st| boxed_init::end_like(st, stop));
    }
    // No PID namespace: the confinement applied here, then the program.
    exec_program(&args, sandbox.as_ref(), report.as_ref())
}

/// Says why the program cannot start (stdout and the report pipe); 127.
#[cfg(unix)]
fn refuse(report: Option<&std::fs::File>, why: &str) -> i32 {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "caesar: {why}");
    if let Some(mut r) = report {
        let _ = r.write_all(why.as_bytes());
    }
    127
}

/// Applies the confinement to this process and execs the program.
#[cfg(unix)]
fn exec_program(args: &BoxedArgs, sandbox: Option<&crate::sandbox::Prepared>, report: Option<&std::fs::File>) -> i32 {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    use std::os::unix::process::CommandExt;
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    if let Some(s) = sandbox
        && let Err(e) = s.in_child()
    {
        return refuse(report, &format!("cannot confine the task: {e}"));
    }
    let e = std::process::Command::new(&args.program).args(&args.args).env_remove(crate::sandbox::ENV).exec();
    refuse(report, &e.to_string())
}

#[cfg(target_os = "linux")]
mod boxed_init {
    use std::io::{Read, Write};

    use nix::libc;
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

    use super::{BoxedArgs, refuse};

    /// Forks the namespace's init and waits for it; returns the program's
    /// wait status, or the exit code when it could not be started.
    pub(super) fn fork_init(
        args: &BoxedArgs,
        sandbox: Option<crate::sandbox::Prepared>,
        report: Option<std::fs::File>,
        cgroup: Option<&mut crate::sandbox::cgroup::BoxCgroup>,
    ) -> Result<i32, i32> {
        let Ok((mut status_r, status_w)) = std::io::pipe() else {
            return Err(refuse(report.as_ref(), "cannot make the launcher's status pipe"));
        };
        let pid = fork_into(cgroup);
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            return Err(refuse(report.as_ref(), &format!("cannot fork the task's init: {e}")));
        }
        if pid == 0 {
            drop(status_r);
            // The init dies with this launcher (a SIGKILL to it ends the
            // namespace); the launcher dies with its own parent.
            // SAFETY: a plain system call.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            let code = init(args, sandbox, report, status_w);
            // SAFETY: ends this forked process without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(status_w);
        drop(report);
        drop(sandbox);
        let mut status = 0;
        // SAFETY: waits for this process's own child.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        let mut raw = [0u8; 4];
        if status_r.read_exact(&mut raw).is_ok() {
            return Ok(i32::from_ne_bytes(raw));
        }
        // The init ended before the program did (it could not start it).
        Err(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 1 })
    }

    /// Forks the init: straight into the box's cgroup where the kernel
    /// allows it (`clone3` with `CLONE_INTO_CGROUP`, no migration of a live
    /// process, which waits for an RCU grace period: issue 33); else into
    /// it after this launcher moved itself in; else with no cgroup.
    fn fork_into(cgroup: Option<&mut crate::sandbox::cgroup::BoxCgroup>) -> libc::pid_t {
        use std::os::fd::AsRawFd;
        let Some(cgroup) = cgroup else {
            // SAFETY: this process is single-threaded: the child may run any code.
            return unsafe { libc::fork() };
        };
        if let Some(fd) = cgroup.fd() {
            // `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
            #[repr(C)]
            struct CloneArgs {
                flags: u64,
                pidfd: u64,
                child_tid: u64,
                parent_tid: u64,
                exit_signal: u64,
                stack: u64,
                stack_size: u64,
                tls: u64,
                set_tid: u64,
                set_tid_size: u64,
                cgroup: u64,
            }
            const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
            let clone_args = CloneArgs {
                flags: CLONE_INTO_CGROUP,
                pidfd: 0,
                child_tid: 0,
                parent_tid: 0,
                exit_signal: libc::SIGCHLD as u64,
                stack: 0,
                stack_size: 0,
                tls: 0,
                set_tid: 0,
                set_tid_size: 0,
                cgroup: fd.as_raw_fd() as u64,
            };
            // SAFETY: a fork (no CLONE_VM, no new stack: the child runs on a
            // copy of this one) of a single-threaded process, as `fork` is;
            // the child then runs only the init, as after `fork` above.
            let pid = unsafe {
                libc::syscall(libc::SYS_clone3, &clone_args as *const CloneArgs, std::mem::size_of::<CloneArgs>())
            };
            if pid >= 0 {
                return pid as libc::pid_t;
            }
        }
        // An older kernel, or one that refuses: the launcher moves itself in first.
        cgroup.enter();
        // SAFETY: as above.
        unsafe { libc::fork() }
    }

    /// Without a PID namespace: the program as this process's child, waited
    /// for; returns its wait status, or the exit code when it could not be
    /// started.
    pub(super) fn spawn_and_wait(
        args: &BoxedArgs,
        sandbox: Option<crate::sandbox::Prepared>,
        report: Option<std::fs::File>,
    ) -> Result<i32, i32> {
        let child = match program_command(args, sandbox).spawn() {
            Ok(c) => c,
            Err(e) => return Err(refuse(report.as_ref(), &e.to_string())),
        };
        drop(report);
        let mut status = 0;
        // SAFETY: waits for this process's own child.
        while unsafe { libc::waitpid(child.id() as libc::pid_t, &mut status, 0) } < 0 {
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return Err(1);
            }
        }
        Ok(status)
    }

    /// The program, its confinement applied between fork and exec.
    fn program_command(args: &BoxedArgs, sandbox: Option<crate::sandbox::Prepared>) -> std::process::Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(&args.program);
        cmd.args(&args.args).env_remove(crate::sandbox::ENV);
        let sandbox = sandbox.map(std::sync::Arc::new);
        // SAFETY: pthread_sigmask and the sandbox's system calls only, on
        // buffers built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None).map_err(std::io::Error::from)?;
                sandbox.as_ref().map_or(Ok(()), |s| s.in_child())
            });
        }
        cmd
    }

    /// Ends this process as `status` (a wait status) says: its exit code, or
    /// its signal raised again (128 + the signal where that does not end it).
    pub(super) fn end_like(status: i32, stop: SigSet) -> i32 {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            // The program's signal, raised again at this process.
            if let Ok(s) = Signal::try_from(sig) {
                // SAFETY: default disposition for this signal, then unblocked.
                unsafe {
                    let _ = nix::sys::signal::signal(s, nix::sys::signal::SigHandler::SigDfl);
                }
                let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stop), None);
                let _ = nix::sys::signal::raise(s);
            }
            return 128 + sig;
        }
        if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 1 }
    }

    /// The namespace's init (pid 1): starts the program, reaps everything,
    /// and when the program ends stops what is left. Returns its exit code.
    fn init(
        args: &BoxedArgs,
        sandbox: Option<crate::sandbox::Prepared>,
        report: Option<std::fs::File>,
        mut status_w: std::io::PipeWriter,
    ) -> i32 {
        let child = match program_command(args, sandbox).spawn() {
            Ok(c) => c,
            Err(e) => return refuse(report.as_ref(), &e.to_string()),
        };
        // Started: the report pipe's end tells the supervisor so.
        drop(report);
        let program = child.id() as libc::pid_t;
        let mut status = 0;
        loop {
            let mut st = 0;
            // SAFETY: reaps any child of this init.
            let pid = unsafe { libc::waitpid(-1, &mut st, 0) };
            if pid == program {
                status = st;
                break;
            }
            if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        // What the program left: SIGTERM, the grace, then the namespace ends
        // with this process (the kernel SIGKILLs the rest).
        // SAFETY: -1 from a namespace's init reaches every other process in it.
        unsafe { libc::kill(-1, libc::SIGTERM) };
        let end = std::time::Instant::now() + std::time::Duration::from_millis(args.grace_ms);
        while std::time::Instant::now() < end {
            let mut st = 0;
            // SAFETY: reaps any child of this init, without blocking.
            let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
            if pid < 0 {
                break;
            }
            if pid == 0 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        let _ = status_w.write_all(&status.to_ne_bytes());
        if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_argv_round_trips() {
        let mut argv: Vec<OsString> = argv_prefix(250, Some(3)).into_iter().map(OsString::from).collect();
        argv.extend(["sh", "-c", "echo -- x"].map(OsString::from));
        let a = BoxedArgs::parse(&argv[1..]).unwrap();
        assert_eq!(a.grace_ms, 250);
        assert_eq!(a.report_fd, Some(3));
        assert_eq!(a.program, "sh");
        assert_eq!(a.args, ["-c", "echo -- x"].map(OsString::from));
        let e = BoxedArgs::parse(&["--bogus".into()]).unwrap_err();
        assert!(e.contains("--bogus"), "{e}");
        assert!(BoxedArgs::parse(&["--grace-ms".into(), "1".into()]).is_err());
    }
}

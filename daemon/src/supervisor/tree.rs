//! The task's process tree: finding it in /proc, signalling and reaping it, and checking
//! that a pid read from the agent's reach really belongs to the task before it is signalled.

use std::path::Path;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{AgentStarted, Msg, read_agent};

/// Now plus `d`, saturated: a grace of `u64::MAX` ms (`CAESAR_KILL_GRACE_MS`)
/// is "as long as it takes", not an overflow panic.
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or_else(|| {
        // The furthest instant this platform represents, found by halving.
        let mut step = d;
        let mut far = now;
        while !step.is_zero() {
            if let Some(t) = far.checked_add(step) {
                far = t;
            } else {
                step /= 2;
            }
        }
        far
    })
}

/// SIGTERM to the group and every descendant, the grace period, then
/// SIGKILL. Returns the agent's exit status once it is reaped.
#[cfg(unix)]
pub(super) fn stop_tree(agent_pid: u32, grace: Duration, rx: &mpsc::Receiver<Msg>) -> std::io::Result<ExitStatus> {
    use nix::sys::signal::Signal;
    signal_tree(agent_pid, Signal::SIGTERM);
    let deadline = after(grace);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Msg::Exited(status)) => return status,
            Ok(Msg::Signal | Msg::TurnOver | Msg::HandshakeFailed) => continue,
            Err(_) => break,
        }
    }
    signal_tree(agent_pid, Signal::SIGKILL);
    loop {
        match rx.recv() {
            Ok(Msg::Exited(status)) => return status,
            Ok(Msg::Signal | Msg::TurnOver | Msg::HandshakeFailed) => continue,
            Err(_) => return Err(std::io::Error::other("the wait thread is gone")),
        }
    }
}

/// Ends what is left of the tree after the agent itself exited: SIGTERM,
/// up to the grace period, SIGKILL, then reaps the re-parented orphans.
/// Returns how many processes were found.
#[cfg(unix)]
pub(super) fn kill_leftovers(agent_pid: u32, grace: Duration) -> u32 {
    use nix::sys::signal::Signal;
    // The common case, no child left at all, without scanning /proc: every
    // leftover would be a descendant of this subreaper.
    if has_no_children() {
        return 0;
    }
    let found = live_tree(agent_pid).len() as u32;
    if found > 0 {
        signal_tree(agent_pid, Signal::SIGTERM);
        let deadline = after(grace);
        while Instant::now() < deadline && !live_tree(agent_pid).is_empty() {
            reap_orphans();
            std::thread::sleep(Duration::from_millis(10));
        }
        signal_tree(agent_pid, Signal::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !live_tree(agent_pid).is_empty() {
            reap_orphans();
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    reap_orphans();
    found
}

/// Whether this process has no child at all, alive or a zombie: `waitid`
/// says so (ECHILD) without reaping anything, whichever thread started the
/// child. `false` when it cannot tell.
///
/// Issue 33: this used to read `/proc/self/task/*/children`, where a thread
/// that had just ended (the agent's waiter) made the read fail, so every
/// task paid a scan of all of `/proc` before its `exit.json`.
fn has_no_children() -> bool {
    #[cfg(unix)]
    {
        use nix::sys::wait::{Id, WaitPidFlag, waitid};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        matches!(waitid(Id::All, flags), Err(nix::errno::Errno::ECHILD))
    }
    #[cfg(not(unix))]
    false
}

#[cfg(unix)]
fn reap_orphans() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if st == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Sends `sig` to the agent's process group and to every live descendant of
/// this supervisor (which, as subreaper, inherits those that left the group).
#[cfg(unix)]
fn signal_tree(agent_pid: u32, sig: nix::sys::signal::Signal) {
    use nix::sys::signal::{kill, killpg};
    use nix::unistd::Pid;
    let _ = killpg(Pid::from_raw(agent_pid as i32), sig);
    for pid in live_tree(agent_pid) {
        let _ = kill(Pid::from_raw(pid as i32), sig);
    }
}

/// The live (non-zombie) processes of the task: descendants of this
/// supervisor, plus members of the agent's process group.
fn live_tree(agent_pid: u32) -> Vec<u32> {
    let me = std::process::id();
    let procs = proc_table();
    let mut tree = Vec::new();
    let mut frontier = vec![me];
    while let Some(parent) = frontier.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            frontier.push(p.pid);
            if !p.zombie {
                tree.push(p.pid);
            }
        }
    }
    for p in procs.iter().filter(|p| p.pgid == agent_pid && !p.zombie && p.pid != me) {
        if !tree.contains(&p.pid) {
            tree.push(p.pid);
        }
    }
    tree
}

struct ProcEntry {
    pid: u32,
    ppid: u32,
    pgid: u32,
    zombie: bool,
}

/// The fields of a `/proc/<pid>/stat` text after the command name, the
/// state first. The name is in parentheses and may hold anything, spaces
/// and parentheses included, so the fields start after the last `)`.
fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat.get(stat.rfind(')')? + 1..)?.split_whitespace())
}

/// Every process from `/proc` (Linux). Elsewhere the table is empty and the
/// process group alone is signalled.
fn proc_table() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(fields) = stat_fields(&stat) else {
            continue;
        };
        let fields: Vec<&str> = fields.collect();
        if fields.len() < 4 {
            continue;
        }
        out.push(ProcEntry {
            pid,
            ppid: fields[1].parse().unwrap_or(0),
            pgid: fields[2].parse().unwrap_or(0),
            zombie: fields[0] == "Z" || fields[0] == "X",
        });
    }
    out
}

/// The start time of a process in seconds since the epoch, which together
/// with its pid identifies it against pid reuse. `None` if it is not alive.
///
/// The value sysinfo gives (the boot time from `/proc/stat`'s `btime` plus
/// the start in clock ticks, in whole seconds), so that handles stored by
/// an earlier daemon still match, read from `/proc/<pid>/stat` alone: each
/// task asks it three times before its agent's end is noticed, and a whole
/// sysinfo refresh reads five files (issue 33).
pub fn process_start_time(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        start_seconds(&stat, boot_time()?, clock_ticks_per_second())
    }
    #[cfg(not(target_os = "linux"))]
    {
        use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
        let mut sys = System::new().ok()?;
        let pid = Pid::from_u32(pid);
        sys.refresh_processes_specifics(ProcessesToUpdate::Some(&[pid]), true, ProcessRefreshKind::nothing());
        let p = sys.process(pid)?;
        if matches!(p.status(), sysinfo::ProcessStatus::Zombie | sysinfo::ProcessStatus::Dead) {
            return None;
        }
        Some(p.start_time())
    }
}

/// The start time in seconds since the epoch from the text of
/// `/proc/<pid>/stat`; `None` for a zombie or a dead process, or text that
/// does not read. Of its fields after the command name ([`stat_fields`]),
/// the state is first, the start time (in clock ticks since boot) twentieth.
#[cfg(target_os = "linux")]
fn start_seconds(stat: &str, boot: u64, ticks_per_second: u64) -> Option<u64> {
    let mut fields = stat_fields(stat)?;
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    let ticks: u64 = fields.nth(18)?.parse().ok()?;
    Some(boot.saturating_add(ticks / ticks_per_second.max(1)))
}

/// The boot time in seconds since the epoch, as `/proc/stat`'s `btime`
/// says, read once per process.
#[cfg(target_os = "linux")]
fn boot_time() -> Option<u64> {
    static BOOT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *BOOT.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        stat.lines().find_map(|l| l.strip_prefix("btime")).and_then(|v| v.trim().parse().ok())
    })
}

#[cfg(target_os = "linux")]
fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let ticks = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    u64::try_from(ticks).unwrap_or(100)
}

/// This boot's identity (Linux), so that a pid recorded before a reboot is
/// never mistaken for a live process after it.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_owned())
}

/// Whether the process recorded as `(pid, start)` in boot `boot` is alive now.
pub fn is_same_process_alive(pid: u32, start: Option<u64>, boot: Option<&str>) -> bool {
    if boot.is_some() && boot_id().as_deref() != boot {
        return false;
    }
    match (process_start_time(pid), start) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Asks a supervisor to stop its task's tree (SIGTERM). It writes
/// `exit.json` with `terminated: true` once the tree is gone.
#[cfg(unix)]
pub fn request_stop(pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
}

/// Kills every process that carries `CAESAR_TASK_ID=<task_id>` in its
/// environment (Linux): the agent and whatever it started, wherever they
/// went. Used for a task whose supervisor vanished, possibly before it
/// recorded the agent's pid. Returns how many were signalled.
pub fn kill_by_task_env(task_id: &str) -> usize {
    let pids = processes_of_task(task_id);
    for pid in &pids {
        #[cfg(unix)]
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), nix::sys::signal::Signal::SIGKILL);
    }
    pids.len()
}

/// Live processes whose environment names the task (`CAESAR_TASK_ID`): its
/// supervisor, the agent and whatever they started.
pub fn processes_of_task(task_id: &str) -> Vec<u32> {
    let marker = format!("CAESAR_TASK_ID={task_id}");
    let me = std::process::id();
    proc_table()
        .into_iter()
        .filter(|p| p.pid != me && !p.zombie)
        .filter(|p| {
            std::fs::read(format!("/proc/{}/environ", p.pid))
                .is_ok_and(|environ| environ.split(|&b| b == 0).any(|var| var == marker.as_bytes()))
        })
        .map(|p| p.pid)
        .collect()
}

/// Whether `pid`, read from a file an agent can write (`agent.json`), is
/// really a live process of task `task_id`: it carries
/// `CAESAR_TASK_ID=<task_id>` in its environment (which only the task's own
/// supervisor, agent and their descendants do, and which `/proc` shows only
/// for this user's processes) and, when `start` is given, it started then.
/// Call it before signalling any pid taken from the task directory, so a
/// forged `agent.json` cannot turn the daemon on another process.
pub fn checked_task_pid(pid: u32, task_id: &str, start: Option<u64>) -> bool {
    if pid == 0 || pid == std::process::id() {
        return false;
    }
    let marker = format!("CAESAR_TASK_ID={task_id}");
    let carries = std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|&b| b == 0).any(|var| var == marker.as_bytes()));
    carries && is_same_process_alive(pid, start, None)
}

/// `agent.json`, with each pid kept only if [`checked_task_pid`] vouches
/// for it (a pid that fails is replaced by 0). `None` if there is no file.
pub fn read_agent_checked(task_dir: &Path, task_id: &str) -> Option<AgentStarted> {
    let mut agent = read_agent(task_dir)?;
    if !checked_task_pid(agent.pid, task_id, agent.agent_start) {
        agent.pid = 0;
    }
    if !checked_task_pid(agent.supervisor_pid, task_id, agent.supervisor_start) {
        agent.supervisor_pid = 0;
    }
    Some(agent)
}

/// [`kill_group`] for the agent recorded in `agent.json`, only if that pid
/// is a process of the task and leads its own group (the agent starts in a
/// new group whose id is its pid). Returns whether it signalled.
#[cfg(unix)]
pub fn kill_group_checked(task_dir: &Path, task_id: &str) -> bool {
    let Some(agent) = read_agent(task_dir) else {
        return false;
    };
    let leads_group = proc_table().iter().any(|p| p.pid == agent.pid && p.pgid == agent.pid);
    if !leads_group || !checked_task_pid(agent.pid, task_id, agent.agent_start) {
        return false;
    }
    kill_group(agent.pid);
    true
}

/// Kills what may remain of a task whose supervisor vanished: the agent's
/// process group.
#[cfg(unix)]
pub fn kill_group(agent_pid: u32) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(agent_pid as i32), nix::sys::signal::Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::super::{AGENT_FILE, AgentStarted};
    use super::*;

    /// Handles stored by a daemon that asked sysinfo must still match.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_start_time_is_sysinfos_for_a_live_process_and_none_for_a_zombie() {
        use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        for pid in [std::process::id(), child.id()] {
            let mut sys = System::new().unwrap();
            let p = Pid::from_u32(pid);
            sys.refresh_processes_specifics(ProcessesToUpdate::Some(&[p]), true, ProcessRefreshKind::nothing());
            assert_eq!(process_start_time(pid), Some(sys.process(p).unwrap().start_time()), "pid {pid}");
        }
        child.kill().unwrap();
        // A zombie until reaped: not alive.
        let zombie = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_start_time(zombie).is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(process_start_time(zombie), None);
        child.wait().unwrap();
        assert_eq!(process_start_time(zombie), None, "reaped");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let tail = (4..=22).map(|n| if n == 22 { "12345".to_owned() } else { n.to_string() }).collect::<Vec<_>>();
        let stat = format!("77 (a) (b c)) S {}", tail.join(" "));
        assert_eq!(start_seconds(&stat, 1_000, 100), Some(1_000 + 123));
        assert_eq!(start_seconds(&stat.replace(")) S ", ")) Z "), 1_000, 100), None);
        assert_eq!(start_seconds("77 (x) S 1 2", 1_000, 100), None, "too few fields");
        assert_eq!(start_seconds("no parenthesis", 1_000, 100), None);
    }
    use crate::safe_fs::write_atomic;
    use std::process::Command;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_tasks_own_agent_group_is_killed_when_checked() {
        use std::os::unix::process::CommandExt;
        let d = tempfile::tempdir().unwrap();
        let mut agent =
            Command::new("sleep").arg("30").env("CAESAR_TASK_ID", "t_000000000002").process_group(0).spawn().unwrap();
        let pid = agent.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !checked_task_pid(pid, "t_000000000002", None) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let record = AgentStarted {
            pid,
            started_ms: 0,
            supervisor_pid: 0,
            agent_start: process_start_time(pid),
            supervisor_start: None,
        };
        write_atomic(&d.path().join(AGENT_FILE), &serde_json::to_vec(&record).unwrap()).unwrap();
        assert!(!kill_group_checked(d.path(), "t_0000000000ff"), "another task's id");
        assert!(kill_group_checked(d.path(), "t_000000000002"));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(agent.wait().unwrap().signal(), Some(9));
    }

    /// Issue 33: the check that spares a finished task the scan of `/proc`
    /// holds after the thread that reaped the agent has ended (which made the
    /// old reading of `/proc/self/task/*/children` fail, so every task paid
    /// the scan). A process of its own per test (nextest), like a supervisor.
    #[cfg(target_os = "linux")]
    #[test]
    fn no_child_left_is_told_after_the_waiter_thread_ended() {
        std::thread::spawn(|| Command::new("true").status().unwrap()).join().unwrap();
        assert!(has_no_children(), "the only child was reaped on a thread that ended");
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!has_no_children(), "a live child");
        child.kill().unwrap();
        assert!(!has_no_children(), "killed but not reaped: still a child");
        child.wait().unwrap();
        assert!(has_no_children(), "reaped");
    }

    #[test]
    fn a_saturated_grace_does_not_overflow() {
        let far = after(Duration::from_millis(u64::MAX));
        assert!(far > Instant::now() + Duration::from_secs(3600));
        assert!(after(Duration::from_millis(5)) <= Instant::now() + Duration::from_millis(5));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_forged_agent_file_names_no_process_to_kill() {
        let d = tempfile::tempdir().unwrap();
        let spawn = |id: &str| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30").env("CAESAR_TASK_ID", id);
            cmd.spawn().unwrap()
        };
        let mut ours = spawn("t_000000000001");
        let mut other = spawn("t_0000000000ff");
        let (pid, other_pid) = (ours.id(), other.id());
        // Wait until exec has replaced the environment.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !checked_task_pid(pid, "t_000000000001", None) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let start = process_start_time(pid);
        assert!(checked_task_pid(pid, "t_000000000001", start));
        assert!(!checked_task_pid(pid, "t_000000000001", start.map(|s| s + 1000)), "pid reused");
        assert!(!checked_task_pid(other_pid, "t_000000000001", None), "another task's process");
        assert!(!checked_task_pid(std::process::id(), "t_000000000001", None), "the daemon itself");
        assert!(!checked_task_pid(1, "t_000000000001", None), "init");

        // The agent rewrites agent.json to point at someone else.
        let forged = AgentStarted {
            pid: other_pid,
            started_ms: 0,
            supervisor_pid: 1,
            agent_start: None,
            supervisor_start: None,
        };
        write_atomic(&d.path().join(AGENT_FILE), &serde_json::to_vec(&forged).unwrap()).unwrap();
        let read = read_agent_checked(d.path(), "t_000000000001").unwrap();
        assert_eq!((read.pid, read.supervisor_pid), (0, 0));
        assert!(!kill_group_checked(d.path(), "t_000000000001"));
        assert!(is_same_process_alive(other_pid, None, None), "nothing was killed");
        for c in [&mut ours, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let start = process_start_time(me).unwrap();
        assert!(is_same_process_alive(me, Some(start), boot_id().as_deref()));
        assert!(!is_same_process_alive(me, Some(start + 1000), None));
        assert!(!is_same_process_alive(me, Some(start), Some("another-boot")));
    }
}

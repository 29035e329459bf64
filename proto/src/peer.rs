//! Who is at the other end of the daemon's socket. The kernel says which
//! process connected (`SO_PEERCRED`); its ancestry, read from `/proc` once
//! at accept (while the connecting process is surely alive), lets the daemon
//! tell the user's own processes from those inside a task's tree, whatever
//! environment they claim (issue 19).

use std::sync::Arc;

/// The process name of a task supervisor (`caesar-supervise`, cut to the
/// kernel's 15 bytes).
pub const SUPERVISOR_COMM: &str = "caesar-supervis";

/// The most ancestors followed: deeper trees are cut there (and treated as
/// unknown by the daemon rather than as the user's).
pub const MAX_ANCESTRY: usize = 128;

/// What the daemon knows of one connection's peer. Tonic puts it in every
/// request's extensions.
#[derive(Debug, Clone, Default)]
pub struct PeerInfo {
    /// The connecting process, as the kernel said; `None` where it did not.
    pub pid: Option<u32>,
    /// The peer and its ancestors, the peer first, up to (not including)
    /// pid 1 or the daemon itself; empty where `/proc` could not tell.
    pub ancestry: Arc<Vec<Ancestor>>,
    /// The walk reached the daemon's own process: the peer is a process
    /// the daemon started (a supervisor's tree, a worktree `setup`).
    pub under_daemon: bool,
    /// The walk stopped before pid 1 (too deep, or a process vanished).
    pub cut: bool,
    /// Where the kernel says the peer is confined by something caesar
    /// builds around a task (issue 29): a PID namespace other than the
    /// daemon's, or a box's cgroup beneath the daemon's. `None` for a
    /// process of the daemon's own namespace and cgroup tree.
    pub confined: Option<String>,
}

/// One process of a peer's ancestry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestor {
    pub pid: u32,
    pub ppid: u32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start: u64,
    /// The kernel's process name (at most 15 bytes).
    pub comm: String,
    /// For a process named [`SUPERVISOR_COMM`], the `CAESAR_TASK_ID` of its
    /// environment: a claim, which the daemon verifies against its records.
    pub task_id: Option<String>,
}

impl PeerInfo {
    /// Reads the ancestry of `pid` now. `daemon` is the serving process's pid.
    pub fn of(pid: Option<u32>, daemon: u32) -> PeerInfo {
        let Some(pid) = pid else { return PeerInfo { cut: true, ..PeerInfo::default() } };
        let mut out = Vec::new();
        let mut cur = pid;
        let mut under_daemon = false;
        let mut cut = false;
        loop {
            if cur <= 1 {
                break;
            }
            if cur == daemon {
                under_daemon = true;
                break;
            }
            if out.len() >= MAX_ANCESTRY {
                cut = true;
                break;
            }
            let Some(a) = read_stat(cur) else {
                cut = true;
                break;
            };
            cur = a.ppid;
            out.push(a);
        }
        PeerInfo { pid: Some(pid), ancestry: Arc::new(out), under_daemon, cut, confined: confinement_of(pid) }
    }
}

/// The prefix of a box's cgroup (`sandbox/cgroup.rs` in the daemon).
pub const BOX_CGROUP_PREFIX: &str = "caesar-box-";

/// Why `pid` is inside a task's box as the kernel tells it, if it is: its
/// PID namespace is not this process's, or its cgroup v2 path lies in a
/// box's cgroup beneath this process's own. A PID namespace is for life;
/// a cgroup is left by writing to a parent's `cgroup.procs`, which the
/// box's mount namespace keeps read-only where the kernel gives it one.
#[cfg(target_os = "linux")]
fn confinement_of(pid: u32) -> Option<String> {
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    if let (Some(mine), Some(theirs)) = (ns("self"), ns(&pid.to_string()))
        && mine != theirs
    {
        return Some(format!("in a PID namespace other than caesard's ({})", theirs.display()));
    }
    let cgroup = |p: &str| {
        let text = std::fs::read_to_string(format!("/proc/{p}/cgroup")).ok()?;
        text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
    };
    let (mine, theirs) = (cgroup("self")?, cgroup(&pid.to_string())?);
    box_cgroup_below(&mine, &theirs).map(|b| format!("in the cgroup of a task's box ({b})"))
}

#[cfg(not(target_os = "linux"))]
fn confinement_of(_pid: u32) -> Option<String> {
    None
}

/// The box cgroup that `theirs` lies in beneath `mine`, if any. A box's
/// cgroup is a sibling of the daemon's or beneath it: the common part is
/// skipped, and a component named `caesar-box-*` below it marks a box.
fn box_cgroup_below<'a>(mine: &str, theirs: &'a str) -> Option<&'a str> {
    let mine: Vec<&str> = mine.split('/').filter(|c| !c.is_empty()).collect();
    let parts: Vec<&str> = theirs.split('/').filter(|c| !c.is_empty()).collect();
    let common = mine.iter().zip(&parts).take_while(|(a, b)| a == b).count();
    parts[common..].iter().copied().find(|c| c.starts_with(BOX_CGROUP_PREFIX))
}

/// `/proc/<pid>/stat` parsed: the name is between the first `(` and the
/// last `)` (it may hold either), the fields after it are numbers.
#[cfg(target_os = "linux")]
fn read_stat(pid: u32) -> Option<Ancestor> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, starttime field 22.
    let ppid = rest.get(1)?.parse().ok()?;
    let start = rest.get(19)?.parse().ok()?;
    let task_id = (comm == SUPERVISOR_COMM).then(|| environ_var(pid, "CAESAR_TASK_ID")).flatten();
    Some(Ancestor { pid, ppid, start, comm, task_id })
}

/// A process's start time in clock ticks since boot, read now: with the
/// value read at accept, it tells whether a pid still names that process.
pub fn start_ticks(pid: u32) -> Option<u64> {
    read_stat(pid).map(|a| a.start)
}

#[cfg(not(target_os = "linux"))]
fn read_stat(_pid: u32) -> Option<Ancestor> {
    None
}

/// One variable of a process's environment, as the kernel holds it.
#[cfg(target_os = "linux")]
fn environ_var(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn our_own_ancestry_is_read_up_to_the_daemon_or_init() {
        let me = std::process::id();
        let p = PeerInfo::of(Some(me), u32::MAX);
        assert_eq!(p.ancestry[0].pid, me);
        assert!(!p.under_daemon && !p.cut, "{p:?}");
        assert_eq!(p.ancestry[0].start, p.ancestry[0].start);
        // Our parent as the "daemon": the walk stops there and says so.
        let parent = p.ancestry[0].ppid;
        let q = PeerInfo::of(Some(me), parent);
        assert!(q.under_daemon);
        assert_eq!(q.ancestry.len(), 1);
        assert!(PeerInfo::of(None, parent).cut);
        assert_eq!(p.confined, None, "this test runs in its own namespace and cgroup");
    }

    #[test]
    fn a_box_cgroup_is_found_below_the_common_part_only() {
        // A box beside or beneath the daemon's cgroup.
        assert_eq!(box_cgroup_below("/user.slice/caesard", "/user.slice/caesar-box-12"), Some("caesar-box-12"));
        assert_eq!(box_cgroup_below("/", "/caesar-box-7/sub"), Some("caesar-box-7"));
        assert_eq!(box_cgroup_below("/a", "/a/caesar-box-7"), Some("caesar-box-7"));
        // A daemon that itself runs inside a box (caesar dogfooded by an
        // agent) does not take its own user's processes for a task's.
        assert_eq!(box_cgroup_below("/caesar-box-3/d", "/caesar-box-3/shell"), None);
        assert_eq!(box_cgroup_below("/user.slice", "/user.slice/app.slice/term"), None);
    }
}

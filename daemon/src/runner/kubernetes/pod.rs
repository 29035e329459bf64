//! `caesard __kube pod`: what runs inside the Job's container.
//!
//! It fetches the task's frozen base from the git remote, writes the task's
//! files, runs `caesard __supervise` (so the deadline, the tree kill, the
//! raw-log cap and `exit.json` are the laptop's), prints the supervisor's
//! raw.log as frames ([`super::frames`]) while it runs, then commits what
//! the agent changed, pushes it as `refs/caesar/tasks/<id>/result`, prints
//! the report and the ending, and writes the ending as the container's
//! termination message too, for when the daemon cannot read the stream.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::frames;
use crate::supervisor::{self, ExitRecord, SuperviseArgs};

/// `caesard __kube pod …`.
pub const POD_ARG0: &str = "__kube";
/// See [`POD_ARG0`].
pub const POD_ARG1: &str = "pod";
/// The task directory's files, JSON `{name: base64}`, in the pod's environment.
pub const FILES_ENV: &str = "CAESAR_POD_FILES";
/// Files of the task directory that come back to the daemon.
pub const FILES_BACK: &[&str] = &["report.json"];

/// The pod's own part of the task, beside its task directory (`<ws>/.caesar`)
/// as on the laptop: the supervisor's files (raw.log, exit.json, agent.json,
/// its stdin's), out of the agent's directory (issue 19).
pub const DAEMON_DIR: &str = ".caesar.daemon";

/// The task's files sent to the pod that go to its daemon part, not to the
/// agent's directory.
const DAEMON_FILES: &[&str] = &[crate::prompt::FILE, supervisor::STDIN_INITIAL, supervisor::SESSION_OPENING];

/// How the pod's run ended: the last frame and the termination message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ending {
    pub exit: ExitRecord,
    /// The result commit pushed, if any.
    #[serde(default)]
    pub result: Option<String>,
    /// What went wrong around the agent (workspace in or out).
    #[serde(default)]
    pub error: Option<String>,
    /// The pod's raw.log length at the end.
    #[serde(default)]
    pub raw_len: u64,
    /// What the agent did to the pod's control files (`/ws/.pod`), which
    /// the wrapper found and removed before the collector began.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tamper: Vec<String>,
}

/// The pod's command line.
#[derive(Debug, Clone)]
struct PodArgs {
    task_id: String,
    sup: SuperviseArgs,
}

fn parse(argv: &[String]) -> Result<PodArgs, String> {
    let mut task_id = None;
    let mut rest = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let value = || argv.get(i + 1).cloned().ok_or_else(|| format!("{} needs a value", argv[i]));
        match argv[i].as_str() {
            "--task-id" => task_id = Some(value()?),
            _ => {
                rest = argv[i..].to_vec();
                break;
            }
        }
        i += 2;
    }
    // The rest is the supervisor's own command line, less its task dir.
    let mut sup_argv = vec!["--task-dir".to_owned(), String::new()];
    sup_argv.extend(rest);
    let sup = SuperviseArgs::parse(&sup_argv)?;
    Ok(PodArgs { task_id: task_id.ok_or("--task-id is required")?, sup })
}

/// Puts this process out of the agent's reach as far as its uid allows:
/// the agent runs as the same user in the agent container (the image's, with
/// no capability to switch), so it could attach to the wrapper, the stdin
/// pump or the channel relay with ptrace and speak for them. A process
/// that is not dumpable cannot be attached to, nor its `/proc` files
/// (memory, environment, descriptors) read, by another of its uid without
/// `CAP_SYS_PTRACE`, whatever the node's Yama setting. A signal still
/// reaches it: that only ends the agent's own task, which says so.
pub fn out_of_the_agents_reach() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("caesard {POD_ARG0}: cannot make this process non-dumpable: {e}");
    }
}

/// Runs the pod's side of a task; the container's exit code.
#[cfg(unix)]
pub fn main(argv: &[String]) -> i32 {
    out_of_the_agents_reach();
    let args = match parse(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("caesard {POD_ARG0} {POD_ARG1}: {e}");
            return 2;
        }
    };
    // A real pod has the filesystem of its image; the simulator's process
    // kubelet gives each pod a directory of its own and names it here.
    let root = std::env::var_os("CAESAR_POD_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    let ws = root.join(super::manifest::WS.trim_start_matches('/'));
    let repo = ws.join("repo");
    let tdir = ws.join(".caesar");
    let sdir = ws.join(DAEMON_DIR);
    let term = root.join(super::manifest::TERMINATION_LOG.trim_start_matches('/'));
    let ending = bounded(run(&args, &repo, &tdir, &sdir));
    let json = serde_json::to_vec(&ending).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    for name in FILES_BACK {
        if let Ok(data) = std::fs::read(tdir.join(name)) {
            let _ = out.write_all(frames::file(name, &data).as_bytes());
        }
    }
    let _ = out.write_all(frames::exit(&json).as_bytes());
    let _ = out.flush();
    // The termination message holds at most 4 KiB: the ending is well under.
    if let Some(parent) = term.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(&term, &json);
    if ending.error.is_some() { 1 } else { 0 }
}

#[cfg(unix)]
fn run(args: &PodArgs, repo: &Path, tdir: &Path, sdir: &Path) -> Ending {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let fail = |why: String| Ending {
        exit: ExitRecord { spawn_error: Some(why.clone()), finished_ms: crate::clock::now_ms(), ..Default::default() },
        error: Some(why),
        ..Default::default()
    };
    // A stop (the Job deleted: SIGTERM to this, the container's first
    // process) goes to the supervisor, which stops the agent's tree and
    // writes exit.json; the result is still pushed.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop), None);
    // The task directory's `tmp/` is the agent's TMPDIR, as on the laptop (`engine/start.rs`).
    let made = std::fs::create_dir_all(tdir.join("tmp")).and_then(|_| std::fs::create_dir_all(repo)).and_then(|_| {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(sdir)
    });
    if let Err(e) = made {
        return fail(format!("cannot create the pod's workspace: {e}"));
    }
    // The init container fetched the base (it holds the read credential).
    let notes = repo.parent().unwrap_or(repo).join(super::phases::NOTES);
    if let Ok(e) = std::fs::read_to_string(notes.join(super::phases::FETCH_ERROR)) {
        return fail(e);
    }
    if !repo.join(".git").exists() {
        return fail("the init container left no workspace".to_owned());
    }
    if let Err(e) = write_files(tdir, sdir) {
        return fail(format!("cannot write the task's files: {e}"));
    }
    // Held while the supervisor runs: the collector begins once it is
    // released, which the agent cannot do for this process.
    let lock = match take_lock(&notes) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let mut sup = args.sup.clone();
    sup.task_dir = sdir.to_path_buf();
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("caesard"));
    let log = std::fs::File::create(sdir.join("supervisor.log")).ok();
    let mut cmd = Command::new(exe);
    cmd.args(sup.to_argv())
        .current_dir(repo)
        .env("PWD", repo)
        .env("CAESAR_TASK_DIR", tdir)
        .env("CAESAR_TASK_FILE", tdir.join("task.json"))
        .env("CAESAR_REPORT_PATH", tdir.join("report.json"))
        .env("CAESAR_EVENTS_PATH", tdir.join("events.jsonl"))
        .env("CAESAR_TASK_ID", &args.task_id)
        .env("CAESAR_PROTOCOL_VERSION", crate::oacp::OACP_VERSION)
        .env_remove(FILES_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // caesar's socket, for the agent's tree, is the pod's channel relay
    // (`channel.rs`; under the pod's root in the simulator): from a pod only
    // the return channel is served.
    cmd.env("CAESAR_SOCKET", super::channel::pod_socket(repo.parent().unwrap_or(repo)));
    if let Some(f) = log {
        cmd.stderr(f);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start the supervisor: {e}")),
    };
    let pid = child.id();
    std::thread::spawn(move || {
        let mut set = SigSet::empty();
        set.add(Signal::SIGTERM);
        set.add(Signal::SIGINT);
        while set.wait().is_ok() {
            STOPPING.store(true, std::sync::atomic::Ordering::Release);
            supervisor::request_stop(pid);
        }
    });
    let raw = sdir.join(supervisor::RAW_LOG);
    // Issue 31: the supervisor's record of steer deliveries goes back too.
    let steers = sdir.join(supervisor::steer::STEERS_DELIVERED);
    let mut steers_sent = 0u64;
    let mut sent = 0u64;
    let mut idle = Instant::now();
    let mut out = std::io::stdout();
    loop {
        let done = matches!(child.try_wait(), Ok(Some(_)) | Err(_));
        let n = send_new(&raw, &mut sent, &mut out, frames::chunk);
        send_new(&steers, &mut steers_sent, &mut out, frames::steered);
        if n > 0 {
            idle = Instant::now();
        } else if idle.elapsed() > Duration::from_secs(30) {
            let _ = out.write_all(frames::HEARTBEAT.as_bytes());
            let _ = out.flush();
            idle = Instant::now();
        }
        if done {
            // Whatever the tree wrote last.
            while send_new(&raw, &mut sent, &mut out, frames::chunk) > 0 {}
            send_new(&steers, &mut steers_sent, &mut out, frames::steered);
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let exit = supervisor::read_exit(sdir).unwrap_or_else(|| ExitRecord {
        spawn_error: Some("the supervisor ended without an exit record".to_owned()),
        finished_ms: crate::clock::now_ms(),
        ..Default::default()
    });
    // The collector container (it holds the write credential) commits and
    // pushes the result once it sees the agent is done.
    let tamper = release(&notes, lock);
    let pushed = collected(&notes, STOPPING.load(std::sync::atomic::Ordering::Acquire));
    Ending { exit, result: pushed.result, error: pushed.error, raw_len: sent, tamper }
}

type Lock = nix::fcntl::Flock<std::fs::File>;

/// Locks the init container's lock file and says so.
fn take_lock(notes: &Path) -> Result<Lock, String> {
    use super::phases::{LOCK, LOCKED};
    let f = crate::safe_fs::open_regular(&notes.join(LOCK))
        .map_err(|e| format!("the init container left no lock file: {e}"))?;
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock the pod's lock file: {e}"))?;
    std::fs::write(notes.join(LOCKED), b"1").map_err(|e| format!("cannot write {LOCKED}: {e}"))?;
    Ok(lock)
}

/// The agent has ended: anything it left among the pod's control files is
/// noted and removed (so the collector's answer read next is the
/// collector's), then the lock is released.
fn release(notes: &Path, lock: Lock) -> Vec<String> {
    use super::phases::{FETCH_ERROR, LOCK, LOCKED};
    use std::os::unix::fs::MetadataExt;
    let mut tamper = Vec::new();
    let held = lock.metadata().ok().map(|m| (m.dev(), m.ino()));
    let now = std::fs::symlink_metadata(notes.join(LOCK)).ok().map(|m| (m.dev(), m.ino()));
    if held != now {
        tamper.push(format!("the agent replaced /ws/{}/{LOCK}", super::phases::NOTES));
    }
    let mut names: Vec<String> = std::fs::read_dir(notes)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    let mut more = 0usize;
    for name in names {
        if [LOCK, LOCKED, FETCH_ERROR].contains(&name.as_str()) {
            continue;
        }
        let path = notes.join(&name);
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        let _ = if is_dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        // A few named, the rest counted: the ending must stay well within
        // the termination message's 4 KiB.
        if tamper.len() < TAMPER_NAMED {
            let shown: String = name.chars().take(64).collect();
            tamper.push(format!(
                "the agent wrote /ws/{}/{shown:?}, a file only the pod's wrapper and collector write",
                super::phases::NOTES
            ));
        } else {
            more += 1;
        }
    }
    if more > 0 {
        tamper.push(format!("and {more} more such files"));
    }
    drop(lock);
    tamper
}

/// How many tampered files the ending names.
const TAMPER_NAMED: usize = 5;

/// The ending's free texts cut so that its JSON stays under the
/// termination message's 4 KiB (the daemon trusts that over the log).
fn bounded(mut e: Ending) -> Ending {
    let cut = |s: &mut Option<String>| {
        if let Some(t) = s
            && t.len() > 600
        {
            *t = format!("{}…", t.chars().take(600).collect::<String>());
        }
    };
    cut(&mut e.error);
    cut(&mut e.exit.spawn_error);
    e
}

/// Sends what a file (raw.log, the steer deliveries) gained since `sent` as
/// `frame`s; the bytes sent.
fn send_new(raw: &Path, sent: &mut u64, out: &mut impl Write, frame: fn(u64, &[u8]) -> String) -> u64 {
    let Ok(mut f) = std::fs::File::open(raw) else { return 0 };
    if f.seek(SeekFrom::Start(*sent)).is_err() {
        return 0;
    }
    let mut total = 0;
    let mut buf = vec![0u8; frames::CHUNK];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = out.write_all(frame(*sent, &buf[..n]).as_bytes());
        *sent += n as u64;
        total += n as u64;
    }
    let _ = out.flush();
    total
}

/// Set once the pod is being stopped: the collector is then given seconds,
/// not minutes.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits for the collector's word on the result (its lock released).
fn collected(notes: &Path, stopping: bool) -> super::phases::Pushed {
    use super::phases::{PUSHED, Pushed};
    let patience = Duration::from_secs(if stopping { 5 } else { 600 });
    let until = Instant::now() + patience;
    while Instant::now() < until {
        if let Ok(bytes) = std::fs::read(notes.join(PUSHED)) {
            return serde_json::from_slice(&bytes).unwrap_or_else(|e| Pushed {
                result: None,
                error: Some(format!("the collector's answer does not parse: {e}")),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Pushed { result: None, error: Some(format!("the collector container pushed no result within {patience:?}")) }
}

fn write_files(tdir: &Path, sdir: &Path) -> std::io::Result<()> {
    let Ok(json) = std::env::var(FILES_ENV) else { return Ok(()) };
    let files: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&json).map_err(std::io::Error::other)?;
    for (name, b64) in files {
        // Names come from the daemon, which lists its own task directory:
        // still, nothing outside the pod's task directory is written.
        if name.contains('/') || name.starts_with('.') {
            continue;
        }
        let data = frames::b64_decode(&b64).ok_or_else(|| std::io::Error::other("bad base64"))?;
        let dir = if DAEMON_FILES.contains(&name.as_str()) { sdir } else { tdir };
        std::fs::write(dir.join(name), data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The wrapper, the pump and the relay leave this process non-dumpable:
    /// not attachable with ptrace by the agent, its uid's other process. (An
    /// end-to-end check cannot run here: the tests run as root, whose
    /// `CAP_SYS_PTRACE` passes over the flag.)
    #[test]
    fn the_pods_own_processes_are_not_dumpable() {
        assert!(nix::sys::prctl::get_dumpable().unwrap(), "a test process starts dumpable");
        super::out_of_the_agents_reach();
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
    }
}

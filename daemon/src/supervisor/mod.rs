//! The per-task supervisor: a tiny process between the daemon and the agent.
//!
//! The daemon starts `caesard __supervise` in a session of its own; the
//! supervisor starts the agent in its box (`caesard __boxed`, [`boxed`]:
//! the task's confinement and a PID namespace of its own), in a new process group with stdin from
//! `/dev/null` and stdout and stderr appended to `raw.log`, waits for it, and
//! writes the exit status atomically to `exit.json`. Because the supervisor,
//! not the daemon, is the agent's parent, a daemon that dies or restarts
//! loses nothing: the next daemon re-attaches by reading `raw.log` from its
//! stored offset and `exit.json` when it appears. These files are in the
//! task's daemon part (`--task-dir`), beside the directory its agent may
//! write, so that nothing the daemon trusts is the agent's to forge.
//!
//! The supervisor also owns the whole process tree of its task. It is a
//! child subreaper on Linux, so a grandchild that leaves the group (setsid,
//! double fork) is re-parented to it rather than to init. On SIGTERM (cancel)
//! or at the deadline (timeout) it sends SIGTERM to the group and to every
//! descendant, waits for the grace period, then SIGKILLs whatever is left.
//! When the agent exits on its own, leftovers get the same treatment before
//! `exit.json` is written, so a finished task leaves no process behind.
//!
//! An agent that speaks a line protocol on stdin (claude's stream-json, for
//! its permission prompts) gets a pipe instead of `/dev/null`. The supervisor
//! holds its write end for the whole run, writes `stdin.initial` into it, then
//! forwards each line the daemon writes to the task's `stdin.fifo`. It closes
//! the pipe when the agent prints the line that ends its turn. Because the
//! supervisor holds both the pipe and the FIFO open, a daemon restart neither
//! closes the agent's stdin nor loses a line.
//!
//! It uses no async runtime: two threads (one `wait`, one `sigwait`) and a
//! channel, plus the output copier and the stdin forwarder when used.

pub mod boxed;
pub mod codex_opening;
pub mod opening;
mod stdin;
pub mod steer;
mod tree;

pub use stdin::write_agent_stdin;
use stdin::{StdinControl, copy_capped, forward_stdin};
pub use tree::{
    boot_id, checked_task_pid, is_same_process_alive, kill_by_task_env, kill_group, kill_group_checked,
    process_start_time, processes_of_task, read_agent_checked, request_stop,
};
use tree::{kill_leftovers, stop_tree};

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The file name of the small binary that runs a task's supervisor and box.
pub const TASK_BINARY: &str = "caesar-task";

/// The program the daemon starts each task's supervisor (and the supervisor
/// its box) from: `caesar-task` beside `exe` where it is installed, else
/// `exe` itself, which has the same entries.
///
/// Each task starts it twice before its agent runs. `caesar` holds the whole
/// CLI, daemon and MCP server: a 40 MB executable whose start (relocating
/// and copying its 0.9 MB of relocated read-only data) costs about 1 ms of
/// CPU more than a small one's, per start (issue 33, BENCHMARKS.md).
pub fn executable(exe: std::path::PathBuf) -> std::path::PathBuf {
    exe.parent()
        .map(|dir| dir.join(format!("{TASK_BINARY}{}", std::env::consts::EXE_SUFFIX)))
        .filter(|p| p.is_file())
        .unwrap_or(exe)
}

/// The argument that selects supervisor mode in the `caesard` binary.
pub const SUPERVISE_ARG: &str = "__supervise";

/// The supervisor's process name (`/proc/<pid>/comm`, what `pkill -x` and
/// `killall` match). Linux keeps 15 bytes of it: `caesar-supervis`.
pub const PROCESS_NAME: &std::ffi::CStr = c"caesar-supervise";

/// The longest grace between SIGTERM and SIGKILL, whatever
/// `CAESAR_KILL_GRACE_MS` asks: ten minutes.
pub const MAX_GRACE_MS: u64 = 10 * 60 * 1000;

pub use crate::task_dir::{AGENT_FILE, EXIT_FILE, RAW_LOG, SESSION_OPENING, STDIN_FIFO, STDIN_INITIAL};

/// How long an agent whose session turn has ended may take to exit once its stdin is closed
/// before the supervisor stops it (qwen 0.24 does not exit on EOF).
const SESSION_LINGER: Duration = Duration::from_secs(5);

/// `agent.json`: the agent process as started.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentStarted {
    pub pid: u32,
    pub started_ms: i64,
    /// The supervisor itself, for a daemon that died before recording it.
    #[serde(default)]
    pub supervisor_pid: u32,
    /// The start times ([`process_start_time`]) of the agent and the
    /// supervisor, against pid reuse. The file is in the agent's reach, so
    /// neither these nor the pids are trusted alone: see [`checked_task_pid`].
    #[serde(default)]
    pub agent_start: Option<u64>,
    #[serde(default)]
    pub supervisor_start: Option<u64>,
}

/// `exit.json`: how the agent ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExitRecord {
    /// The exit code when the agent exited normally.
    pub exit_code: Option<i64>,
    /// The signal that ended the agent, if one did.
    pub signal: Option<i32>,
    /// The deadline passed and the supervisor stopped the tree.
    pub timed_out: bool,
    /// The supervisor was told to stop the tree (cancel or shutdown).
    pub terminated: bool,
    /// The agent could not be started at all.
    pub spawn_error: Option<String>,
    /// Processes still alive after the agent exited, which had to be killed.
    pub leftovers_killed: u32,
    /// Output dropped past the raw log's cap.
    #[serde(default)]
    pub output_dropped_bytes: u64,
    /// The agent's session turn had ended and it did not exit on its own once its stdin was
    /// closed, so the supervisor stopped it: its ending counts as exit 0.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_ended: bool,
    pub finished_ms: i64,
}

/// The supervisor's command line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct SuperviseArgs {
    /// The directory of the supervisor's files (`raw.log`, `agent.json`,
    /// `exit.json`, its stdin's, the prompt): the task's daemon part
    /// ([`crate::task_dir::TaskDir::daemon_files`]), which its agent cannot
    /// write; the agent's own directory reaches it only as `CAESAR_TASK_DIR`.
    pub task_dir: PathBuf,
    /// Absolute deadline, milliseconds since the epoch.
    pub deadline_ms: i64,
    pub grace_ms: u64,
    /// The most bytes of output kept in raw.log; 0 for no cap.
    pub log_cap: u64,
    /// The agent speaks a line protocol on stdin, closed after the output line that starts
    /// with this prefix; `None` for stdin at `/dev/null`.
    pub stdin_close_after: Option<String>,
    /// The stdin protocol is this session protocol, opened by the supervisor from
    /// [`SESSION_OPENING`]; the prefix above is then unused.
    pub session: Option<crate::launch::SessionProtocol>,
    /// The agent reads its prompt on stdin: the task's prompt file, read once at the start,
    /// then end of file (issue 19, [`crate::prompt`]). Arguments holding
    /// [`crate::prompt::TOKEN`] get the prompt filled in, whatever this says.
    pub stdin_prompt: bool,
    pub program: String,
    pub args: Vec<String>,
}

impl SuperviseArgs {
    /// The arguments that follow `caesard` to run this supervisor.
    pub fn to_argv(&self) -> Vec<String> {
        let mut v = vec![
            SUPERVISE_ARG.to_owned(),
            "--task-dir".to_owned(),
            self.task_dir.to_string_lossy().into_owned(),
            "--deadline-ms".to_owned(),
            self.deadline_ms.to_string(),
            "--grace-ms".to_owned(),
            self.grace_ms.to_string(),
            "--log-cap".to_owned(),
            self.log_cap.to_string(),
        ];
        if let Some(prefix) = &self.stdin_close_after {
            v.extend(["--stdin-control".to_owned(), prefix.clone()]);
        }
        if let Some(protocol) = self.session {
            v.extend(["--stdin-session".to_owned(), protocol.as_str().to_owned()]);
        }
        if self.stdin_prompt {
            v.push("--stdin-prompt".to_owned());
        }
        v.extend(["--".to_owned(), self.program.clone()]);
        v.extend(self.args.iter().cloned());
        v
    }

    /// Parses what follows `__supervise`.
    pub fn parse(argv: &[String]) -> Result<SuperviseArgs, String> {
        let mut task_dir = None;
        let mut deadline_ms = None;
        let mut grace_ms = 2000;
        let mut log_cap = 0;
        let mut stdin_close_after = None;
        let mut session = None;
        let mut stdin_prompt = false;
        let mut i = 0;
        while i < argv.len() {
            let value = |i: usize| argv.get(i + 1).cloned().ok_or_else(|| format!("{} needs a value", argv[i]));
            match argv[i].as_str() {
                // A flag with no value.
                "--stdin-prompt" => {
                    stdin_prompt = true;
                    i += 1;
                    continue;
                }
                "--task-dir" => task_dir = Some(PathBuf::from(value(i)?)),
                "--deadline-ms" => deadline_ms = Some(value(i)?.parse().map_err(|e| format!("--deadline-ms: {e}"))?),
                "--grace-ms" => grace_ms = value(i)?.parse().map_err(|e| format!("--grace-ms: {e}"))?,
                "--log-cap" => log_cap = value(i)?.parse().map_err(|e| format!("--log-cap: {e}"))?,
                "--stdin-control" => stdin_close_after = Some(value(i)?),
                "--stdin-session" => {
                    let name = value(i)?;
                    session = Some(
                        crate::launch::SessionProtocol::parse(&name)
                            .ok_or_else(|| format!("--stdin-session: unknown protocol `{name}`"))?,
                    );
                }
                "--" => {
                    let program = argv.get(i + 1).cloned().ok_or("no program after --")?;
                    return Ok(SuperviseArgs {
                        task_dir: task_dir.ok_or("--task-dir is required")?,
                        deadline_ms: deadline_ms.ok_or("--deadline-ms is required")?,
                        grace_ms,
                        log_cap,
                        stdin_close_after,
                        session,
                        stdin_prompt,
                        program,
                        args: argv[i + 2..].to_vec(),
                    });
                }
                other => return Err(format!("unknown supervisor argument `{other}`")),
            }
            i += 2;
        }
        Err("no program: expected `-- <program> [args...]`".to_owned())
    }
}

enum Msg {
    Exited(std::io::Result<ExitStatus>),
    Signal,
    /// The session's turn ended a while ago and the agent is still there.
    TurnOver,
    /// The session's handshake failed: the agent is stopped (and the stream fallback may run).
    HandshakeFailed,
}

/// Runs the supervisor to completion. Returns the process exit code.
#[cfg(unix)]
pub fn run(args: SuperviseArgs) -> i32 {
    let stop = become_supervisor();
    let raw_path = args.task_dir.join(RAW_LOG);
    let log = match OpenOptions::new().create(true).append(true).open(&raw_path) {
        Ok(f) => f,
        Err(e) => {
            write_exit(
                &args.task_dir,
                &ExitRecord { spawn_error: Some(format!("cannot open {}: {e}", raw_path.display())), ..exit_now() },
            );
            return 1;
        }
    };
    // With a cap or a stdin protocol, output goes through a pipe that this
    // process copies into raw.log (up to the cap); otherwise straight into
    // the file.
    let (tx, rx) = mpsc::channel();
    let turn_over = tx.clone();
    let prompt = match read_prompt(&args) {
        Ok(p) => p,
        Err(message) => return refuse_start(&args.task_dir, &log, message),
    };
    let argv = prompt.as_deref().map_or_else(|| args.args.clone(), |p| crate::prompt::fill_args(&args.args, p));
    let feed = prompt.as_deref().filter(|_| args.stdin_prompt).map(str::as_bytes);
    let spawned = spawn_agent(&args, &argv, &[], true, feed, &log, turn_over.clone());
    let (child, mut copier) = match spawned {
        Ok(c) => c,
        Err(e) => return refuse_start(&args.task_dir, &log, format!("cannot start `{}`: {e}", args.program)),
    };
    let mut agent_pid = started(&args.task_dir, child, &tx);
    forward_stop_signals(stop, tx.clone());

    // A grace past ten minutes would leave an agent that ignores SIGTERM
    // running for as long as it likes; past that it is cut to ten minutes.
    let grace = Duration::from_millis(args.grace_ms.min(MAX_GRACE_MS));
    let remaining = || Duration::from_millis((args.deadline_ms - crate::clock::now_ms()).max(0) as u64);
    let mut record = wait_agent(agent_pid, grace, remaining, &rx);
    record.leftovers_killed = kill_leftovers(agent_pid, grace);
    let mut outcome = copier.take().map(|c| c.join().unwrap_or_default()).unwrap_or_default();
    if let Some((why, fallback)) = stream_fallback_due(&args, &mut outcome, &record, &rx) {
        let marker = args.session.map_or(opening::ACP_FALLBACK_MARKER, opening::fallback_marker);
        let _ = writeln!(&log, "{marker}: {why}; running the stream command");
        let argv =
            prompt.as_deref().map_or_else(|| fallback.args.clone(), |p| crate::prompt::fill_args(&fallback.args, p));
        let feed = prompt.as_deref().filter(|_| fallback.stdin_prompt).map(str::as_bytes);
        match spawn_agent(&args, &argv, &fallback.env, false, feed, &log, turn_over) {
            Ok((next, next_copier)) => {
                agent_pid = started(&args.task_dir, next, &tx);
                let leftovers = record.leftovers_killed;
                record = wait_agent(agent_pid, grace, remaining, &rx);
                record.leftovers_killed = leftovers + kill_leftovers(agent_pid, grace);
                let more = next_copier.map(|c| c.join().unwrap_or_default()).unwrap_or_default();
                outcome.dropped += more.dropped;
            }
            Err(e) => {
                let message = format!("cannot start the stream fallback `{}`: {e}", args.program);
                let _ = writeln!(&log, "caesar: {message}");
                record.spawn_error = Some(message);
            }
        }
    }
    record.output_dropped_bytes = outcome.dropped;
    record.finished_ms = crate::clock::now_ms();
    write_exit(&args.task_dir, &record);
    0
}

/// Makes this process the task's supervisor: the subreaper of its tree with
/// a name of its own (Linux), and the stop signals blocked in every thread
/// so that only the sigwait thread sees them. Returns those signals.
#[cfg(unix)]
fn become_supervisor() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

    // A session of its own, out of the daemon's: a terminal the daemon was
    // started from can neither stop the task (its hangup, its ^C) nor be
    // opened by the agent as its controlling terminal. Done here and not
    // between the daemon's fork and exec, so the daemon can start this
    // process without forking itself.
    let _ = nix::unistd::setsid();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let _ = nix::sys::prctl::set_child_subreaper(true);
        // A name of its own, so that `pkill -x caesard` or `killall caesard`
        // (which match this name) stop the daemon and never a task.
        let _ = nix::sys::prctl::set_name(PROCESS_NAME);
    }

    // Block the stop signals before any thread exists, so that only the
    // sigwait thread ever sees them. The agent starts with an empty mask
    // (set in its pre_exec below: std would hand it this one).
    let mut stop = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT] {
        stop.add(s);
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop), None);
    stop
}

/// The agent cannot start: says why in raw.log and as the exit record's
/// spawn error, and returns the supervisor's exit code (0: the record is
/// the outcome).
#[cfg(unix)]
fn refuse_start(task_dir: &Path, mut log: &File, message: String) -> i32 {
    let _ = writeln!(&mut log, "caesar: {message}");
    write_exit(task_dir, &ExitRecord { spawn_error: Some(message), ..exit_now() });
    0
}

/// The prompt (issue 19): read once, before any agent of this task ran, for
/// the arguments that stand for it and for a prompt on stdin (the session's
/// stream fallback may need it too). Failing to read it is an error only
/// when the first agent needs it.
#[cfg(unix)]
fn read_prompt(args: &SuperviseArgs) -> Result<Option<String>, String> {
    let needs_prompt = args.stdin_prompt || crate::prompt::in_args(&args.args);
    let wanted = needs_prompt || args.session.is_some();
    match wanted.then(|| crate::prompt::read(&args.task_dir)) {
        None => Ok(None),
        Some(Ok(p)) => Ok(Some(p)),
        Some(Err(e)) if needs_prompt => Err(format!("cannot read the task's prompt ({}): {e}", crate::prompt::FILE)),
        Some(Err(_)) => Ok(None),
    }
}

/// Starts the sigwait thread: each stop signal becomes a [`Msg::Signal`].
#[cfg(unix)]
fn forward_stop_signals(stop: nix::sys::signal::SigSet, tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        while stop.wait().is_ok() {
            if tx.send(Msg::Signal).is_err() {
                break;
            }
        }
    });
}

/// The stream fallback is due when the session could not be opened (its
/// prompt was never sent: the copier saw the handshake fail), the run was
/// neither cancelled nor out of time, and the adapter has a stream command.
/// Returns why the handshake failed and that command.
#[cfg(unix)]
fn stream_fallback_due(
    args: &SuperviseArgs,
    outcome: &mut stdin::CopyOutcome,
    record: &ExitRecord,
    rx: &mpsc::Receiver<Msg>,
) -> Option<(String, opening::Fallback)> {
    let fallback = args
        .session
        .and_then(|_| std::fs::read(args.task_dir.join(SESSION_OPENING)).ok())
        .and_then(|bytes| opening::fallback_of(&bytes));
    let mut cancelled = record.terminated || record.timed_out;
    // A stop signal that came while the first agent was ending is a cancel all the same.
    while let Ok(m) = rx.try_recv() {
        cancelled |= matches!(m, Msg::Signal);
    }
    match (outcome.handshake_failed.take(), fallback, cancelled) {
        (Some(why), Some(fallback), false) => Some((why, fallback)),
        _ => None,
    }
}

/// Starts the agent in its box (`caesard __boxed`, [`boxed`]: the
/// task's confinement from the environment, a PID namespace of its own) with
/// `argv` after the program and `env` on top of this process's: stdin per the
/// task's protocol when `protocol`, else `feed` then end of file (the prompt), else
/// `/dev/null`; output through the capped copier when there is a cap or a protocol. Returns
/// the child and the copier's thread.
#[cfg(unix)]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn spawn_agent(
    args: &SuperviseArgs,
    argv: &[String],
    env: &[(String, String)],
    protocol: bool,
    feed: Option<&[u8]>,
    log: &File,
    turn_over: mpsc::Sender<Msg>,
) -> std::io::Result<(std::process::Child, Option<std::thread::JoinHandle<stdin::CopyOutcome>>)> {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(boxed::argv_prefix(args.grace_ms.min(MAX_GRACE_MS), Some(BOX_REPORT_FD)))
        .arg(&args.program)
        .args(argv)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    // The box says on this pipe why the agent could not start; its end
    // without a word means it started.
    let (mut report, report_w) = std::io::pipe()?;
    let report_fd = report_w.as_raw_fd();
    // std gives the child this process's signal mask, in which the stop
    // signals are blocked for the sigwait thread: left so, the agent
    // never sees the SIGTERM of a cancel or a timeout and always dies by
    // SIGKILL after the grace, with no chance to clean up.
    // SAFETY: pthread_sigmask, dup2 and fcntl are async-signal-safe,
    // and the closure touches nothing else between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None).map_err(std::io::Error::from)?;
            let fd = BOX_REPORT_FD;
            if report_fd == fd {
                if nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if nix::libc::dup2(report_fd, fd) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let stdin = match args.stdin_close_after.as_ref().filter(|_| protocol) {
        Some(prefix) => {
            let (reader, writer) = std::io::pipe()?;
            cmd.stdin(reader);
            let opening = match args.session {
                Some(protocol) => {
                    let bytes = std::fs::read(args.task_dir.join(SESSION_OPENING))?;
                    Some(opening::Opening::from_json(protocol, &bytes).ok_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "the session opening does not read")
                    })?)
                }
                None => None,
            };
            let protocol = match args.session {
                Some(crate::launch::SessionProtocol::Acp) => steer::Protocol::Acp,
                Some(crate::launch::SessionProtocol::CodexAppServer) => steer::Protocol::Codex,
                None => steer::Protocol::Stream,
            };
            // Made before the FIFO: its presence tells the daemon this supervisor takes steers
            // (one started by an older caesard would hand the order line to the agent).
            let _ = OpenOptions::new().create(true).append(true).open(args.task_dir.join(steer::STEERS_DELIVERED));
            let steering = steer::Steering::shared(protocol, &args.task_dir);
            let writer = forward_stdin(&args.task_dir, writer, steering.clone())?;
            Some(StdinControl { writer, close_after: prefix.clone(), opening, turn_over, steering })
        }
        None => {
            cmd.stdin(Stdio::null());
            None
        }
    };
    // The prompt on stdin: a pipe this process fills from memory and closes,
    // on a thread of its own (a CLI that reads it late never blocks the run).
    let feeder = match feed.filter(|_| stdin.is_none()) {
        Some(bytes) => {
            let (reader, writer) = std::io::pipe()?;
            cmd.stdin(reader);
            Some((writer, bytes.to_vec()))
        }
        None => None,
    };
    let feed_now = move || {
        if let Some((mut writer, bytes)) = feeder {
            std::thread::spawn(move || {
                let _ = writer.write_all(&bytes);
            });
        }
    };
    if args.log_cap > 0 || stdin.is_some() {
        let (reader, writer) = std::io::pipe()?;
        cmd.stdout(writer.try_clone()?).stderr(writer);
        let child = cmd.spawn();
        // The command (and its copies of the pipes' ends) is dropped
        // here, so the output pipe ends when the agent's tree is gone.
        drop(cmd);
        drop(report_w);
        let child = box_started(child?, &mut report)?;
        feed_now();
        let out = log.try_clone()?;
        let cap = if args.log_cap > 0 { args.log_cap } else { u64::MAX };
        let copier = std::thread::spawn(move || copy_capped(reader, out, cap, stdin));
        Ok((child, Some(copier)))
    } else {
        let child = cmd.stdout(log.try_clone()?).stderr(log.try_clone()?).spawn();
        drop(cmd);
        drop(report_w);
        let child = box_started(child?, &mut report)?;
        feed_now();
        Ok((child, None))
    }
}

/// The fd on which the box reports a failure to start the agent.
const BOX_REPORT_FD: i32 = 3;

/// Waits for the box's word on its agent's start: nothing (its report
/// pipe closed) when the agent runs; else why it could not start, as an
/// error, the box then reaped.
#[cfg(unix)]
fn box_started(
    mut child: std::process::Child,
    report: &mut std::io::PipeReader,
) -> std::io::Result<std::process::Child> {
    use std::io::Read;
    let mut why = Vec::new();
    let _ = report.take(4096).read_to_end(&mut why);
    if why.is_empty() {
        return Ok(child);
    }
    let _ = child.wait();
    Err(std::io::Error::other(String::from_utf8_lossy(&why).into_owned()))
}

/// Records the started agent in `agent.json` and starts the thread that waits for it.
/// Returns its pid.
fn started(task_dir: &Path, mut child: std::process::Child, tx: &mpsc::Sender<Msg>) -> u32 {
    let agent_pid = child.id();
    // Replaced whole (a rename) but not synced. Its pids mean nothing after
    // a power loss. Its other word, "this agent ran: never start it again",
    // is for a daemon that died between the spawn and its own durable
    // record of the run (`set_running`, milliseconds later), and such a
    // crash leaves the file in the page cache: only a daemon crash and a
    // power loss in the same milliseconds lose it. Its two fsyncs were on
    // the way to noticing a quick agent's end.
    let _ = crate::safe_fs::write_replacing(
        &task_dir.join(AGENT_FILE),
        &serde_json::to_vec(&AgentStarted {
            pid: agent_pid,
            started_ms: crate::clock::now_ms(),
            supervisor_pid: std::process::id(),
            agent_start: process_start_time(agent_pid),
            supervisor_start: process_start_time(std::process::id()),
        })
        .unwrap_or_default(),
    );
    let waiter = tx.clone();
    std::thread::spawn(move || {
        let _ = waiter.send(Msg::Exited(child.wait()));
    });
    agent_pid
}

/// Waits for agent `agent_pid` to end, stopping its tree on a stop signal, at the deadline
/// (`remaining` is the time left), once its session's turn is over, or when its handshake
/// failed. Returns the exit record so far (no leftovers, output or finish time yet).
#[cfg(unix)]
fn wait_agent(
    agent_pid: u32,
    grace: Duration,
    remaining: impl Fn() -> Duration,
    rx: &mpsc::Receiver<Msg>,
) -> ExitRecord {
    let mut record = ExitRecord::default();
    let status = match rx.recv_timeout(remaining()) {
        Ok(Msg::Exited(status)) => status,
        Ok(Msg::Signal) => {
            record.terminated = true;
            stop_tree(agent_pid, grace, rx)
        }
        Ok(Msg::TurnOver) => {
            record.session_ended = true;
            stop_tree(agent_pid, grace, rx)
        }
        Ok(Msg::HandshakeFailed) => stop_tree(agent_pid, grace, rx),
        Err(_) => {
            record.timed_out = true;
            stop_tree(agent_pid, grace, rx)
        }
    };
    match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            record.exit_code = st.code().map(i64::from);
            record.signal = st.signal();
            if record.session_ended {
                // The work was done; the stop was only for an agent that would not exit.
                record.exit_code = Some(0);
                record.signal = None;
            }
        }
        Err(e) => record.spawn_error = Some(format!("lost the agent's exit status: {e}")),
    }
    record
}

fn exit_now() -> ExitRecord {
    ExitRecord { finished_ms: crate::clock::now_ms(), ..ExitRecord::default() }
}

/// Writes `exit.json` whole (a temporary file, then a rename), without an
/// fsync (issue 33: two fsyncs on every task's way to its ending, each
/// several milliseconds on a loaded disk). Nothing is acknowledged on this
/// file: the daemon acknowledges a task's end once its ending is committed
/// to the store, which is the durable record; until then a power cut that
/// loses this file reads as the supervisor having vanished, as a power cut
/// before it was written does.
fn write_exit(task_dir: &Path, record: &ExitRecord) {
    let _ = crate::safe_fs::write_replacing(&task_dir.join(EXIT_FILE), &serde_json::to_vec(record).unwrap_or_default());
}

/// Reads `exit.json` from a task directory, if the supervisor wrote it.
pub fn read_exit(task_dir: &Path) -> Option<ExitRecord> {
    let bytes = crate::safe_fs::read_capped(&task_dir.join(EXIT_FILE), crate::safe_fs::RECORD_CAP).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Reads `agent.json` from a task directory, if the agent started.
pub fn read_agent(task_dir: &Path) -> Option<AgentStarted> {
    let bytes = crate::safe_fs::read_capped(&task_dir.join(AGENT_FILE), crate::safe_fs::RECORD_CAP).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_binary_beside_the_daemon_is_preferred_and_the_daemon_stands_in() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("caesar");
        std::fs::write(&exe, "").unwrap();
        assert_eq!(executable(exe.clone()), exe, "none installed: the daemon's own binary");
        std::fs::create_dir(dir.path().join(TASK_BINARY)).unwrap();
        assert_eq!(executable(exe.clone()), exe, "a directory of that name is not it");
        std::fs::remove_dir(dir.path().join(TASK_BINARY)).unwrap();
        std::fs::write(dir.path().join(TASK_BINARY), "").unwrap();
        assert_eq!(executable(exe), dir.path().join(TASK_BINARY));
    }

    #[test]
    fn supervisor_argv_round_trips() {
        let a = SuperviseArgs {
            task_dir: "/s/t".into(),
            deadline_ms: 123,
            grace_ms: 50,
            log_cap: 1 << 20,
            stdin_close_after: Some(r#"{"type":"result""#.into()),
            session: Some(crate::launch::SessionProtocol::Acp),
            stdin_prompt: true,
            program: "/bin/agent".into(),
            args: vec!["--x".into(), "--".into(), "y z".into()],
        };
        let argv = a.to_argv();
        assert_eq!(argv[0], SUPERVISE_ARG);
        assert_eq!(SuperviseArgs::parse(&argv[1..]).unwrap(), a);
        assert!(SuperviseArgs::parse(&["--task-dir".into()]).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn task_dir_links_are_replaced_or_refused_never_written_through() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // The agent leaves links at the temporary name of exit.json and at
        // the FIFO's name.
        std::os::unix::fs::symlink(&victim, d.path().join("exit.tmp")).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join(STDIN_FIFO)).unwrap();
        crate::safe_fs::write_atomic(&d.path().join(EXIT_FILE), b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join(EXIT_FILE)).unwrap(), "{}");
        assert!(write_agent_stdin(d.path(), "{\"type\":\"control_response\"}").is_err());
        // A regular file in the FIFO's place is refused too.
        std::fs::remove_file(d.path().join(STDIN_FIFO)).unwrap();
        std::fs::write(d.path().join(STDIN_FIFO), "").unwrap();
        let e = write_agent_stdin(d.path(), "line").unwrap_err();
        assert!(e.to_string().contains("not the supervisor's FIFO"), "{e}");
        assert_eq!(std::fs::read_to_string(d.path().join(STDIN_FIFO)).unwrap(), "");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }
}

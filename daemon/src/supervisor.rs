//! The per-task supervisor: a tiny process between the daemon and the agent.
//!
//! The daemon starts `caesard __supervise` in a session of its own; the
//! supervisor starts the agent in a new process group with stdin from
//! `/dev/null` and stdout and stderr appended to `raw.log`, waits for it, and
//! writes the exit status atomically to `exit.json`. Because the supervisor,
//! not the daemon, is the agent's parent, a daemon that dies or restarts
//! loses nothing: the next daemon re-attaches by reading `raw.log` from its
//! stored offset and `exit.json` when it appears.
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

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The argument that selects supervisor mode in the `caesard` binary.
pub const SUPERVISE_ARG: &str = "__supervise";

/// The supervisor's process name (`/proc/<pid>/comm`, what `pkill -x` and
/// `killall` match). Linux keeps 15 bytes of it: `caesar-supervis`.
pub const PROCESS_NAME: &std::ffi::CStr = c"caesar-supervise";

/// The longest grace between SIGTERM and SIGKILL, whatever
/// `CAESAR_KILL_GRACE_MS` asks: ten minutes.
pub const MAX_GRACE_MS: u64 = 10 * 60 * 1000;

/// Written by the supervisor once the agent is started.
pub const AGENT_FILE: &str = "agent.json";
/// Written by the supervisor once the agent and its tree are gone.
pub const EXIT_FILE: &str = "exit.json";
/// The agent's combined stdout and stderr.
pub const RAW_LOG: &str = "raw.log";
/// What the supervisor writes first to an agent with a stdin protocol.
pub const STDIN_INITIAL: &str = "stdin.initial";
/// The FIFO through which the daemon writes lines to such an agent's stdin.
pub const STDIN_FIFO: &str = "stdin.fifo";
/// The rest of a session protocol's opening, which the supervisor carries out
/// ([`crate::driver::opening`]).
pub const SESSION_OPENING: &str = "session.open.json";
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
    pub session: Option<crate::driver::SessionProtocol>,
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
        let mut i = 0;
        while i < argv.len() {
            let value = |i: usize| argv.get(i + 1).cloned().ok_or_else(|| format!("{} needs a value", argv[i]));
            match argv[i].as_str() {
                "--task-dir" => task_dir = Some(PathBuf::from(value(i)?)),
                "--deadline-ms" => deadline_ms = Some(value(i)?.parse().map_err(|e| format!("--deadline-ms: {e}"))?),
                "--grace-ms" => grace_ms = value(i)?.parse().map_err(|e| format!("--grace-ms: {e}"))?,
                "--log-cap" => log_cap = value(i)?.parse().map_err(|e| format!("--log-cap: {e}"))?,
                "--stdin-control" => stdin_close_after = Some(value(i)?),
                "--stdin-session" => {
                    let name = value(i)?;
                    session = Some(
                        crate::driver::SessionProtocol::parse(&name)
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
}

/// Runs the supervisor to completion. Returns the process exit code.
#[cfg(unix)]
pub fn run(args: SuperviseArgs) -> i32 {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

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
    let mut copier = None;
    let (tx, rx) = mpsc::channel();
    let turn_over = tx.clone();
    // Kernel confinement (issue 19): the ruleset is built here, before the
    // fork; the agent only applies it. One that cannot be built fails the
    // start rather than run the agent unconfined.
    let sandbox = match std::env::var(crate::sandbox::ENV).ok().map(|j| serde_json::from_str(&j)) {
        None => Ok(None),
        Some(Ok(spec)) => crate::sandbox::prepare(&spec),
        Some(Err(e)) => Err(format!("unreadable {}: {e}", crate::sandbox::ENV)),
    };
    let sandbox = match sandbox {
        Ok(s) => s,
        Err(message) => {
            let _ = writeln!(&log, "caesar: {message}");
            write_exit(&args.task_dir, &ExitRecord { spawn_error: Some(message), ..exit_now() });
            return 0;
        }
    };
    let sandbox_fd = sandbox.as_ref().map_or(-1, |s| s.raw());
    let spawned = (|| -> std::io::Result<std::process::Child> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&args.program);
        cmd.args(&args.args).process_group(0).env_remove(crate::sandbox::ENV);
        // std gives the child this process's signal mask, in which the stop
        // signals are blocked for the sigwait thread: left so, the agent
        // never sees the SIGTERM of a cancel or a timeout and always dies by
        // SIGKILL after the grace, with no chance to clean up.
        // SAFETY: pthread_sigmask is async-signal-safe, and the closure
        // touches nothing else between fork and exec.
        // The sandbox's two system calls are as safe there.
        unsafe {
            cmd.pre_exec(move || {
                pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None).map_err(std::io::Error::from)?;
                crate::sandbox::restrict_in_child(sandbox_fd)
            });
        }
        let stdin = match &args.stdin_close_after {
            Some(prefix) => {
                let (reader, writer) = std::io::pipe()?;
                cmd.stdin(reader);
                let opening = match args.session {
                    Some(crate::driver::SessionProtocol::Acp) => {
                        let bytes = std::fs::read(args.task_dir.join(SESSION_OPENING))?;
                        Some(crate::driver::opening::AcpOpening::from_json(&bytes).ok_or_else(|| {
                            std::io::Error::new(std::io::ErrorKind::InvalidData, "the session opening does not read")
                        })?)
                    }
                    None => None,
                };
                Some(StdinControl {
                    writer: forward_stdin(&args.task_dir, writer)?,
                    close_after: prefix.clone(),
                    opening,
                    turn_over,
                })
            }
            None => {
                cmd.stdin(Stdio::null());
                None
            }
        };
        if args.log_cap > 0 || stdin.is_some() {
            let (reader, writer) = std::io::pipe()?;
            cmd.stdout(writer.try_clone()?).stderr(writer);
            let child = cmd.spawn();
            // The command (and its copies of the pipes' ends) is dropped
            // here, so the output pipe ends when the agent's tree is gone.
            drop(cmd);
            let child = child?;
            let out = log.try_clone()?;
            let cap = if args.log_cap > 0 { args.log_cap } else { u64::MAX };
            copier = Some(std::thread::spawn(move || copy_capped(reader, out, cap, stdin)));
            Ok(child)
        } else {
            cmd.stdout(log.try_clone()?).stderr(log.try_clone()?).spawn()
        }
    })();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let message = format!("cannot start `{}`: {e}", args.program);
            let _ = writeln!(&log, "caesar: {message}");
            write_exit(&args.task_dir, &ExitRecord { spawn_error: Some(message), ..exit_now() });
            return 0;
        }
    };
    let agent_pid = child.id();
    let _ = write_atomic(
        &args.task_dir.join(AGENT_FILE),
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
    std::thread::spawn(move || {
        while stop.wait().is_ok() {
            if tx.send(Msg::Signal).is_err() {
                break;
            }
        }
    });

    // A grace past ten minutes would leave an agent that ignores SIGTERM
    // running for as long as it likes; past that it is cut to ten minutes.
    let grace = Duration::from_millis(args.grace_ms.min(MAX_GRACE_MS));
    let mut record = ExitRecord::default();
    let remaining = || Duration::from_millis((args.deadline_ms - crate::clock::now_ms()).max(0) as u64);
    let status = match rx.recv_timeout(remaining()) {
        Ok(Msg::Exited(status)) => status,
        Ok(Msg::Signal) => {
            record.terminated = true;
            stop_tree(agent_pid, grace, &rx)
        }
        Ok(Msg::TurnOver) => {
            record.session_ended = true;
            stop_tree(agent_pid, grace, &rx)
        }
        Err(_) => {
            record.timed_out = true;
            stop_tree(agent_pid, grace, &rx)
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
    // The agent is gone; anything of its tree still alive is a leftover.
    record.leftovers_killed = kill_leftovers(agent_pid, grace);
    if let Some(copier) = copier {
        record.output_dropped_bytes = copier.join().unwrap_or(0);
    }
    record.finished_ms = crate::clock::now_ms();
    write_exit(&args.task_dir, &record);
    0
}

/// The write end of an agent's stdin, shared by the forwarder and the
/// output copier that closes it.
type SharedStdin = std::sync::Arc<std::sync::Mutex<Option<std::io::PipeWriter>>>;

/// An agent's stdin protocol, as the output copier sees it.
struct StdinControl {
    writer: SharedStdin,
    /// The agent's stdin is closed after the output line starting with this.
    close_after: String,
    /// A session protocol's opening, carried out instead of the prefix match.
    opening: Option<crate::driver::opening::AcpOpening>,
    /// Told when a session's turn ended and its agent did not exit.
    turn_over: mpsc::Sender<Msg>,
}

/// Makes the task's FIFO and starts the thread that writes `stdin.initial`,
/// then every line written to the FIFO, to the agent's stdin.
fn forward_stdin(task_dir: &Path, writer: std::io::PipeWriter) -> std::io::Result<SharedStdin> {
    use std::io::{BufRead, BufReader};
    let fifo = task_dir.join(STDIN_FIFO);
    match nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(std::io::Error::from(e)),
    }
    // Read and write: opening never blocks, and the FIFO never reads as
    // ended while this process lives, whatever writers come and go.
    let fifo = OpenOptions::new().read(true).write(true).open(&fifo)?;
    let initial = std::fs::read(task_dir.join(STDIN_INITIAL)).unwrap_or_default();
    let shared: SharedStdin = std::sync::Arc::new(std::sync::Mutex::new(Some(writer)));
    let forwarder = std::sync::Arc::clone(&shared);
    let write = move |bytes: &[u8]| -> bool {
        let mut slot = forwarder.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_mut() {
            Some(w) => w.write_all(bytes).and_then(|()| w.flush()).is_ok(),
            None => false,
        }
    };
    std::thread::spawn(move || {
        if !write(&initial) {
            return;
        }
        let mut lines = BufReader::new(fifo);
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    if !write(&line) {
                        return;
                    }
                }
            }
        }
    });
    Ok(shared)
}

/// Copies the agent's output into raw.log up to `cap` bytes, then drops the
/// rest, saying so in raw.log. Returns how many bytes were dropped. With a
/// stdin protocol, it also closes the agent's stdin after the line that ends
/// the agent's turn.
fn copy_capped(mut from: std::io::PipeReader, mut to: File, cap: u64, stdin: Option<StdinControl>) -> u64 {
    use std::io::Read;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut kept, mut dropped) = (0u64, 0u64);
    // How much of the closing prefix the current line has matched so far;
    // `None` once the line cannot match.
    let mut matched = Some(0usize);
    let mut stdin = stdin;
    // A session's current output line, up to the opening's cap.
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let room = cap.saturating_sub(kept) as usize;
        let keep = n.min(room);
        if keep > 0 && to.write_all(&buf[..keep]).is_ok() {
            kept += keep as u64;
        }
        if let Some(control) = stdin.as_mut().filter(|c| c.opening.is_some()) {
            if session_lines(control, &buf[..n], &mut line, &mut to) {
                stdin = None;
            }
        } else if let Some(control) = &stdin {
            let prefix = control.close_after.as_bytes();
            let mut ended = false;
            for &b in &buf[..n] {
                if b == b'\n' {
                    if matched == Some(prefix.len()) {
                        ended = true;
                    }
                    matched = Some(0);
                    continue;
                }
                matched = match matched {
                    Some(m) if m < prefix.len() && prefix[m] == b => Some(m + 1),
                    Some(m) if m == prefix.len() => Some(m),
                    _ => None,
                };
            }
            if ended {
                // The turn is over: closing stdin lets the agent exit.
                control.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                stdin = None;
            }
        }
        if keep < n {
            if dropped == 0 {
                let _ =
                    write!(to, "\ncaesar: the output reached the raw log cap of {cap} bytes; the rest is dropped\n");
            }
            dropped += (n - keep) as u64;
        }
    }
    if dropped > 0 {
        let _ = writeln!(to, "caesar: {dropped} bytes of output were dropped past the raw log cap of {cap} bytes");
    }
    dropped
}

/// Feeds a session's opening the complete lines in `bytes` (`line` holds the current partial
/// one) and writes what it says on the agent's stdin. Returns whether stdin was closed: the
/// turn is over (the agent gets [`SESSION_LINGER`] to exit) or the handshake failed (said in
/// raw.log).
fn session_lines(control: &mut StdinControl, bytes: &[u8], line: &mut Vec<u8>, log: &mut File) -> bool {
    use crate::driver::opening::{MAX_OPENING_LINE, Step};
    let Some(opening) = control.opening.as_mut() else { return false };
    for &b in bytes {
        if b != b'\n' {
            if line.len() < MAX_OPENING_LINE {
                line.push(b);
            }
            continue;
        }
        let step = opening.on_line(line);
        line.clear();
        let mut slot = control.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match step {
            Step::Nothing => {}
            Step::Write(request) => {
                if let Some(w) = slot.as_mut() {
                    let _ = w.write_all(format!("{request}\n").as_bytes()).and_then(|()| w.flush());
                }
            }
            Step::Close => {
                slot.take();
                let tx = control.turn_over.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(SESSION_LINGER);
                    let _ = tx.send(Msg::TurnOver);
                });
                return true;
            }
            Step::Failed(why) => {
                slot.take();
                let _ = writeln!(log, "caesar: the ACP session could not be opened: {why}");
                return true;
            }
        }
    }
    false
}

/// Writes one line to the stdin of a task's agent through its FIFO. Fails at
/// once when no supervisor holds the FIFO (the task has ended).
pub fn write_agent_stdin(task_dir: &Path, line: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = task_dir.join(STDIN_FIFO);
    // Non-blocking open fails with ENXIO when nobody reads the FIFO, where a
    // blocking one would wait forever; the write itself may block briefly.
    // The FIFO's name is in the agent's reach: a link or a regular file put
    // in its place must not receive the line (nor be truncated or created).
    let fifo =
        OpenOptions::new().write(true).custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW).open(&path)?;
    {
        use std::os::unix::fs::FileTypeExt;
        if !fifo.metadata()?.file_type().is_fifo() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not the supervisor's FIFO; nothing was written to it", path.display()),
            ));
        }
    }
    let flags = nix::fcntl::fcntl(&fifo, nix::fcntl::FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&fifo, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    let mut fifo = fifo;
    fifo.write_all(line.as_bytes())?;
    if !line.ends_with('\n') {
        fifo.write_all(b"\n")?;
    }
    Ok(())
}

fn exit_now() -> ExitRecord {
    ExitRecord { finished_ms: crate::clock::now_ms(), ..ExitRecord::default() }
}

fn write_exit(task_dir: &Path, record: &ExitRecord) {
    let _ = write_atomic(&task_dir.join(EXIT_FILE), &serde_json::to_vec(record).unwrap_or_default());
}

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
fn stop_tree(agent_pid: u32, grace: Duration, rx: &mpsc::Receiver<Msg>) -> std::io::Result<ExitStatus> {
    use nix::sys::signal::Signal;
    signal_tree(agent_pid, Signal::SIGTERM);
    let deadline = after(grace);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Msg::Exited(status)) => return status,
            Ok(Msg::Signal | Msg::TurnOver) => continue,
            Err(_) => break,
        }
    }
    signal_tree(agent_pid, Signal::SIGKILL);
    loop {
        match rx.recv() {
            Ok(Msg::Exited(status)) => return status,
            Ok(Msg::Signal | Msg::TurnOver) => continue,
            Err(_) => return Err(std::io::Error::other("the wait thread is gone")),
        }
    }
}

/// Ends what is left of the tree after the agent itself exited: SIGTERM,
/// up to the grace period, SIGKILL, then reaps the re-parented orphans.
/// Returns how many processes were found.
#[cfg(unix)]
fn kill_leftovers(agent_pid: u32, grace: Duration) -> u32 {
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

/// Whether this process has no child at all (`/proc/self/task/*/children`,
/// Linux). `false` when it cannot tell.
fn has_no_children() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return false };
    for task in tasks.flatten() {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(c) if c.trim().is_empty() => {}
            _ => return false,
        }
    }
    true
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
        // The command name is in parentheses and may contain anything, so
        // the fields are counted from the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
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

/// Writes `bytes` to `path` atomically: a temporary file, fsync, rename,
/// fsync of the directory. A reader sees the old file or the whole new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        // The directory may be an agent's (a task directory): a link left at
        // the temporary name is removed, never written through, and the
        // file is created new (O_EXCL refuses a link put back meanwhile).
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
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

/// The start time of a process in seconds since the epoch, which together
/// with its pid identifies it against pid reuse. `None` if it is not alive.
pub fn process_start_time(pid: u32) -> Option<u64> {
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
    use super::*;

    #[test]
    fn supervisor_argv_round_trips() {
        let a = SuperviseArgs {
            task_dir: "/s/t".into(),
            deadline_ms: 123,
            grace_ms: 50,
            log_cap: 1 << 20,
            stdin_close_after: Some(r#"{"type":"result""#.into()),
            session: Some(crate::driver::SessionProtocol::Acp),
            program: "/bin/agent".into(),
            args: vec!["--x".into(), "--".into(), "y z".into()],
        };
        let argv = a.to_argv();
        assert_eq!(argv[0], SUPERVISE_ARG);
        assert_eq!(SuperviseArgs::parse(&argv[1..]).unwrap(), a);
        assert!(SuperviseArgs::parse(&["--task-dir".into()]).is_err());
    }

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
        write_atomic(&d.path().join(EXIT_FILE), b"{}").unwrap();
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

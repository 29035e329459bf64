//! An agent's stdin protocol, held by the supervisor: the FIFO the daemon writes lines into,
//! the forwarder that copies them to the agent, the output copier that caps raw.log and
//! closes stdin when the turn ends, and the session opening it drives.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

use super::steer::{self, SharedSteering};
use super::{Msg, SESSION_LINGER, STDIN_FIFO, STDIN_INITIAL};

/// How long a stream agent (claude) that was given a steer may stay silent after a turn's
/// `result` before its stdin is closed anyway (issue 31): a steer it took into the turn that
/// just ended leaves no turn of its own to wait for.
const STEER_LINGER: std::time::Duration = std::time::Duration::from_secs(10);

/// The write end of an agent's stdin, shared by the forwarder and the
/// output copier that closes it.
type SharedStdin = std::sync::Arc<std::sync::Mutex<Option<std::io::PipeWriter>>>;

/// An agent's stdin protocol, as the output copier sees it.
pub(super) struct StdinControl {
    pub(super) writer: SharedStdin,
    /// The agent's stdin is closed after the output line starting with this.
    pub(super) close_after: String,
    /// A session protocol's opening, carried out instead of the prefix match.
    pub(super) opening: Option<super::opening::Opening>,
    /// Told when a session's turn ended and its agent did not exit.
    pub(super) turn_over: mpsc::Sender<Msg>,
    /// The run's steers (issue 31), shared with the forwarder.
    pub(super) steering: SharedSteering,
}

/// Makes the task's FIFO and starts the thread that writes `stdin.initial`,
/// then every line written to the FIFO, to the agent's stdin; a steer's line goes to `steering`,
/// which says what to write instead.
pub(super) fn forward_stdin(
    task_dir: &Path,
    writer: std::io::PipeWriter,
    steering: SharedSteering,
) -> std::io::Result<SharedStdin> {
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
                    if let Some(order) = steer::parse_order(&line) {
                        // Held while writing, so that the copier's writes never cut in between.
                        let mut st = steer::lock(&steering);
                        for mut out in st.on_order(order) {
                            if !out.ends_with('\n') {
                                out.push('\n');
                            }
                            if !write(out.as_bytes()) {
                                st.closed = true;
                            }
                        }
                        continue;
                    }
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

/// What the output copier saw by the end of the agent's output.
#[derive(Debug, Default)]
pub(super) struct CopyOutcome {
    /// Bytes dropped past the raw log's cap.
    pub(super) dropped: u64,
    /// The session's handshake failed, or the agent's output ended before it was over: why.
    /// The prompt was never sent, so the stream fallback may run.
    pub(super) handshake_failed: Option<String>,
}

/// Copies the agent's output into raw.log up to `cap` bytes, then drops the
/// rest, saying so in raw.log. With a stdin protocol, it also closes the
/// agent's stdin after the line that ends the agent's turn.
pub(super) fn copy_capped(
    mut from: std::io::PipeReader,
    mut to: File,
    cap: u64,
    stdin: Option<StdinControl>,
) -> CopyOutcome {
    use std::io::Read;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut kept, mut dropped) = (0u64, 0u64);
    // How much of the closing prefix the current line has matched so far;
    // `None` once the line cannot match.
    let mut matched = Some(0usize);
    let mut stdin = stdin;
    // A session's current output line, up to the opening's cap.
    let mut line: Vec<u8> = Vec::new();
    let mut handshake_failed = None;
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
            match session_lines(control, &buf[..n], &mut line, &mut to) {
                None => {}
                Some(SessionEnd::TurnOver) => stdin = None,
                Some(SessionEnd::Failed(why)) => {
                    // Stopped at once: an agent refused its session is not left waiting.
                    let _ = control.turn_over.send(Msg::HandshakeFailed);
                    handshake_failed = Some(why);
                    stdin = None;
                }
            }
        } else if let Some(control) = &stdin {
            let prefix = control.close_after.as_bytes();
            let (mut ended, mut newlines) = (0u32, 0u64);
            for &b in &buf[..n] {
                if b == b'\n' {
                    newlines += 1;
                    if matched == Some(prefix.len()) {
                        ended += 1;
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
            let mut st = steer::lock(&control.steering);
            st.lines += newlines;
            let mut close = false;
            for _ in 0..ended {
                // A steer's user message is still owed its turn: stdin stays open for it.
                close |= st.stream_turn_ended();
            }
            if close {
                // The turn is over: closing stdin lets the agent exit.
                control.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                drop(st);
                stdin = None;
            } else if ended > 0 {
                linger(&control.steering, &control.writer, st.lines);
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
    if let Some(why) = stdin.as_ref().and_then(|c| c.opening.as_ref()).and_then(|o| o.unanswered()) {
        handshake_failed = Some(why.to_owned());
    }
    CopyOutcome { dropped, handshake_failed }
}

/// How a session's opening ended, as the output copier sees it.
enum SessionEnd {
    /// The prompt's turn is over.
    TurnOver,
    /// The handshake failed before the prompt was sent: why.
    Failed(String),
}

/// Feeds a session's opening the complete lines in `bytes` (`line` holds the current partial
/// one) and writes what it says on the agent's stdin. Returns how it ended once stdin was
/// closed: the turn is over (the agent gets [`SESSION_LINGER`] to exit) or the handshake
/// failed (said in raw.log).
fn session_lines(control: &mut StdinControl, bytes: &[u8], line: &mut Vec<u8>, log: &mut File) -> Option<SessionEnd> {
    use super::opening::{MAX_OPENING_LINE, Step};
    let opening = control.opening.as_mut()?;
    for &b in bytes {
        if b != b'\n' {
            if line.len() < MAX_OPENING_LINE {
                line.push(b);
            }
            continue;
        }
        let mut step = opening.on_line(line);
        // Issue 31: the steers learn where the session stands; one queued for the end of the
        // turn becomes the next turn instead of the close.
        let mut st = steer::lock(&control.steering);
        let mut writes = st.sync(opening);
        st.on_codex_line(line);
        match &step {
            Step::Close => {
                if let Some(next) = st.at_turn_end(line) {
                    opening.resume_turn();
                    writes.extend(st.sync(opening));
                    writes.insert(0, next);
                    step = Step::Nothing;
                }
            }
            Step::Failed(_) => st.closed = true,
            _ => {}
        }
        line.clear();
        let mut slot = control.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(st);
        if let Some(w) = slot.as_mut() {
            for request in &writes {
                let _ = w.write_all(format!("{request}\n").as_bytes()).and_then(|()| w.flush());
            }
        }
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
                return Some(SessionEnd::TurnOver);
            }
            Step::Failed(why) => {
                slot.take();
                let _ = writeln!(log, "caesar: the session could not be opened: {why}");
                return Some(SessionEnd::Failed(why));
            }
        }
    }
    None
}

/// Closes a stream agent's stdin once it has said nothing for [`STEER_LINGER`] after the turn
/// that ended when `lines` output lines had been seen, unless stdin was closed meanwhile.
fn linger(steering: &SharedSteering, writer: &SharedStdin, lines: u64) {
    let (steering, writer) = (std::sync::Arc::clone(steering), std::sync::Arc::clone(writer));
    std::thread::spawn(move || {
        std::thread::sleep(STEER_LINGER);
        let mut st = steer::lock(&steering);
        if st.lines == lines && !st.closed {
            st.closed = true;
            writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        }
    });
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

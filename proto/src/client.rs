//! Reaching the daemon: connect, start it when none answers, and check that
//! it speaks our protocol.
//!
//! A client tries the socket its environment names, then the one the
//! running daemon recorded in the state directory
//! ([`crate::instance::DaemonRecord`]): clients with different environments
//! (with and without `XDG_RUNTIME_DIR`) find the same daemon.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use crate::instance::DaemonRecord;
use crate::paths::Paths;
use crate::pb::caesar_client::CaesarClient;
use crate::pb::{PingRequest, PingResponse, ShutdownRequest};
use crate::{PROTOCOL, ipc};

/// A connected client of the daemon.
pub type Client = CaesarClient<Channel>;

/// Why no daemon could be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("no caesard answers at {socket}: {cause}. Start it with `caesar daemon start`")]
    NotRunning { socket: PathBuf, cause: String },
    #[error(
        "could not start caesard ({bin}): {cause}. Set CAESAR_DAEMON_BIN to the caesard binary, or start it yourself with `caesard`"
    )]
    SpawnFailed { bin: PathBuf, cause: String },
    #[error("caesard did not become ready at {socket} within {waited:?}; see its log at {log}")]
    NotReady { socket: PathBuf, waited: Duration, log: PathBuf },
    #[error(
        "caesard {daemon_version} at {socket} speaks API protocol {daemon_protocol}, newer than this client's {PROTOCOL} ({active} active task(s)): upgrade caesar and caesar-mcp to match the daemon"
    )]
    ProtocolMismatch { socket: PathBuf, daemon_version: String, daemon_protocol: u32, active: u32 },
    #[error("{0}")]
    ForeignDaemon(ipc::ForeignPeer),
    #[error(
        "no caesard answers at {socket}, and this process runs inside a caesar task ({why}): a daemon started from here would inherit the task's sandbox and environment, so none is started. Start caesard outside the task (`caesar daemon start` from your own shell)"
    )]
    InsideTask { socket: PathBuf, why: String },
    #[error("cannot resolve caesar's directories: {0}")]
    Paths(#[from] std::io::Error),
}

/// Connects to a running daemon without starting one, and returns its `Ping`:
/// at the socket of `paths`, else at the socket the daemon of this state
/// directory recorded. A socket served by another user is refused
/// ([`ConnectError::ForeignDaemon`]) without trying further.
pub async fn connect(paths: &Paths) -> Result<(Client, PingResponse), ConnectError> {
    let (channel, ping) = connect_channel(paths).await?;
    Ok((client_of(channel), ping))
}

/// As [`connect`], but the bare channel, for clients that wrap it in a
/// transport of their own.
pub async fn connect_channel(paths: &Paths) -> Result<(Channel, PingResponse), ConnectError> {
    let first = match connect_channel_at(&paths.socket).await {
        Ok(found) => return Ok(found),
        Err(e @ ConnectError::ForeignDaemon(_)) => return Err(e),
        Err(e) => e,
    };
    if let Some(record) = DaemonRecord::read(paths)
        && record.socket != paths.socket
    {
        match connect_channel_at(&record.socket).await {
            // A stale record may name a socket that another state
            // directory's daemon serves now: that one is not ours.
            Ok(found) if same_dir(Path::new(&found.1.state_dir), &paths.state_dir) => return Ok(found),
            Ok(_) => {}
            Err(e @ ConnectError::ForeignDaemon(_)) => return Err(e),
            Err(_) => {}
        }
    }
    Err(first)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn client_of(channel: Channel) -> Client {
    CaesarClient::new(channel).max_decoding_message_size(64 * 1024 * 1024)
}

/// Connects to the daemon at exactly `socket` and pings it.
pub async fn connect_at(socket: &Path) -> Result<(Client, PingResponse), ConnectError> {
    let (channel, ping) = connect_channel_at(socket).await?;
    Ok((client_of(channel), ping))
}

async fn connect_channel_at(socket: &Path) -> Result<(Channel, PingResponse), ConnectError> {
    let channel = ipc::connect(socket).await.map_err(|e| match ipc::foreign_peer(&e) {
        Some(f) => ConnectError::ForeignDaemon(f),
        None => ConnectError::NotRunning { socket: socket.to_path_buf(), cause: source_chain(&e) },
    })?;
    let ping = client_of(channel.clone())
        .ping(PingRequest {})
        .await
        .map_err(|e| match ipc::foreign_peer(&e) {
            Some(f) => ConnectError::ForeignDaemon(f),
            None => ConnectError::NotRunning { socket: socket.to_path_buf(), cause: e.message().to_owned() },
        })?
        .into_inner();
    Ok((channel, ping))
}

/// Connects to the daemon, starting it first when none answers. Two clients
/// that do this at once end up with one daemon: the daemon holds an instance
/// lock, and the loser exits while both clients connect to the winner.
///
/// A daemon of an older protocol is replaced (shut down, its tasks left
/// running for the new daemon to re-attach); a newer one is refused with
/// [`ConnectError::ProtocolMismatch`].
pub async fn connect_or_start(paths: &Paths) -> Result<Client, ConnectError> {
    match connect(paths).await {
        Ok((client, ping)) if ping.protocol == PROTOCOL => return Ok(client),
        Ok((mut client, ping)) => {
            // An older daemon is replaced: tasks outlive the daemon (their
            // supervisors keep running and the new daemon re-attaches),
            // so nothing is lost. A newer one is never replaced by an older
            // client: its store may be of a schema this build cannot read.
            if ping.protocol > PROTOCOL {
                return Err(ConnectError::ProtocolMismatch {
                    socket: paths.socket.clone(),
                    daemon_version: ping.version,
                    daemon_protocol: ping.protocol,
                    active: ping.active_tasks,
                });
            }
            let _ = client.shutdown(ShutdownRequest { cancel_tasks: false, only_if_idle: false }).await;
            wait_until_gone(paths, Duration::from_secs(10)).await;
        }
        Err(e @ ConnectError::ForeignDaemon(_)) => return Err(e),
        Err(_) => {}
    }
    // The daemon gets the socket as CAESAR_SOCKET (below), which it takes
    // as the user's own choice of directory and does not check: a directory
    // caesar picked itself is checked here first (not a symlink, ours, 0700).
    if let Some(why) = inside_task() {
        return Err(ConnectError::InsideTask { socket: paths.socket.clone(), why });
    }
    if !paths.socket_overridden {
        paths.ensure_dirs()?;
    }
    start_daemon(paths)?;
    wait_until_ready(paths, Duration::from_secs(10)).await
}

/// Whether this process runs inside a caesar task (issue 19): beneath a
/// task supervisor (the kernel's ancestry, which an agent cannot hide), or
/// with a task's `CAESAR_TASK_ID` in its environment. Says which.
pub fn inside_task() -> Option<String> {
    let me = crate::peer::PeerInfo::of(Some(proc_self_pid()), u32::MAX);
    if let Some(s) = me.ancestry.iter().find(|a| a.comm == crate::peer::SUPERVISOR_COMM) {
        return Some(format!("beneath the task supervisor pid {}", s.pid));
    }

    std::env::var("CAESAR_TASK_ID").ok().filter(|v| !v.is_empty()).map(|id| format!("CAESAR_TASK_ID={id}"))
}

/// This process's pid as `/proc` numbers it: in a task's box (issue 29)
/// `getpid` answers in the box's PID namespace while `/proc` is the host's,
/// whose `self` names this process by its pid there.
fn proc_self_pid() -> u32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(std::process::id)
}

/// The caesard binary: `CAESAR_DAEMON_BIN`, else the one beside this
/// executable, else `caesard` on PATH.
pub fn daemon_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("CAESAR_DAEMON_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(bin);
    }
    let name = if cfg!(windows) { "caesard.exe" } else { "caesard" };
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        let sibling = dir.join(name);
        if sibling.is_file() {
            return sibling;
        }
    }
    PathBuf::from(name)
}

/// Starts caesard detached from this process: its own session, no stdio.
/// The child is reaped by a background thread so it never lingers as a zombie
/// of a long-lived client.
pub fn start_daemon(paths: &Paths) -> Result<(), ConnectError> {
    let bin = daemon_binary();
    let mut cmd = Command::new(&bin);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
        }
    }
    // The daemon resolves the same paths from the same environment; make
    // the socket explicit in case the caller computed it differently.
    cmd.env("CAESAR_SOCKET", &paths.socket);
    let mut child = cmd.spawn().map_err(|e| ConnectError::SpawnFailed { bin: bin.clone(), cause: e.to_string() })?;
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// Polls until a daemon of our protocol answers, at our socket or at the
/// one recorded (a daemon started meanwhile from another environment wins
/// the instance lock, and this client uses it).
pub async fn wait_until_ready(paths: &Paths, limit: Duration) -> Result<Client, ConnectError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(2);
    loop {
        match connect(paths).await {
            Ok((client, ping)) if ping.protocol == PROTOCOL => return Ok(client),
            Err(e @ ConnectError::ForeignDaemon(_)) => return Err(e),
            _ => {}
        }
        if started.elapsed() >= limit {
            return Err(ConnectError::NotReady {
                socket: paths.socket.clone(),
                waited: limit,
                log: paths.daemon_log(),
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// Waits until no daemon answers on the socket, up to `limit`.
pub async fn wait_until_gone(paths: &Paths, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if connect(paths).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

//! The local-socket transport under tonic: a Unix socket on Unix, a named
//! pipe on Windows, through `interprocess` so both take one code path.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use interprocess::local_socket::tokio::{Listener, Stream, prelude::*};
use interprocess::local_socket::{GenericFilePath, GenericNamespaced, ListenerOptions, Name};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::{Channel, Endpoint, Uri};

fn socket_name(path: &Path) -> io::Result<Name<'static>> {
    let s = path.to_string_lossy().into_owned();
    if cfg!(windows) { s.to_ns_name::<GenericNamespaced>() } else { s.to_fs_name::<GenericFilePath>() }
}

/// One accepted connection, in the shape tonic's server wants, with what
/// the kernel said about its peer (every request carries it).
pub struct IpcConn(pub Stream, pub crate::peer::PeerInfo);

impl tonic::transport::server::Connected for IpcConn {
    type ConnectInfo = crate::peer::PeerInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.1.clone()
    }
}

impl AsyncRead for IpcConn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for IpcConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Binds the daemon's socket, mode 0600 from the start (no umask race).
/// A stale socket file is replaced: the caller holds the instance lock, so
/// no live daemon owns it.
pub fn bind(path: &Path) -> io::Result<Listener> {
    let opts = ListenerOptions::new().name(socket_name(path)?).try_overwrite(true);
    #[cfg(unix)]
    let opts = {
        use interprocess::os::unix::local_socket::ListenerOptionsExt;
        opts.mode(0o600)
    };
    opts.create_tokio()
}

/// The listening socket a service manager passed us (systemd socket
/// activation: `LISTEN_PID` is this process and `LISTEN_FDS` >= 1, the socket
/// is fd 3), or `None`. The variables are removed so that no child takes
/// them for its own.
#[cfg(unix)]
pub fn inherited_listener() -> io::Result<Option<Listener>> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let pid_matches = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    if !pid_matches || count == 0 {
        return Ok(None);
    }
    // SAFETY: called once at start-up, before any thread that could
    // read or write the environment.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    // SAFETY: under socket activation fd 3 is ours, open, and a listening
    // socket; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
    let listener = interprocess::os::unix::uds_local_socket::tokio::Listener::try_from(fd)?;
    Ok(Some(listener.into()))
}

/// Accepts one connection and checks that its peer is this user. A peer of
/// another uid gets `Ok(None)`: it is dropped and the caller keeps accepting.
/// The peer's pid and ancestry are read now, while it waits for our answer.
pub async fn accept(listener: &Listener) -> io::Result<Option<IpcConn>> {
    let stream = listener.accept().await?;
    #[cfg(unix)]
    let pid = {
        let me = nix::unistd::geteuid().as_raw();
        let creds = stream.peer_creds();
        match creds.as_ref().map(|c| c.euid()) {
            Ok(Some(uid)) if uid == me => {}
            _ => return Ok(None),
        }
        creds.ok().and_then(|c| c.pid()).and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
    };
    #[cfg(not(unix))]
    let pid = None;
    let peer = crate::peer::PeerInfo::of(pid, std::process::id());
    Ok(Some(IpcConn(stream, peer)))
}

/// Opens a gRPC channel to the daemon's socket. It connects now, so a missing
/// daemon is seen here rather than on the first call.
///
/// Every connection (the first and any reconnection) is checked before a
/// byte is sent: the process serving the socket must run as this user. One
/// of another uid fails with a [`ForeignPeer`] inside the error.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is required by tonic and ignored by the connector.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = Stream::connect(socket_name(&path)?).await?;
                #[cfg(unix)]
                check_peer(&path, peer_euid(&stream), nix::unistd::geteuid().as_raw())?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// The effective uid of the process serving `stream`. Read with
/// `SO_PEERCRED` itself on Linux: `interprocess` takes a peer pid of 0 for
/// an error, and 0 is what a client in a PID namespace of its own (a task's
/// box, issue 29) sees of a daemon outside it.
#[cfg(unix)]
fn peer_euid(stream: &Stream) -> io::Result<Option<u32>> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::os::fd::AsFd;
        #[allow(irrefutable_let_patterns)]
        if let Stream::UdSocket(s) = stream {
            let creds = nix::sys::socket::getsockopt(&s.inner().as_fd(), nix::sys::socket::sockopt::PeerCredentials)
                .map_err(io::Error::from)?;
            return Ok(Some(creds.uid()));
        }
    }
    stream.peer_creds().map(|c| c.euid())
}

/// The socket is served by a process of another user: it is not our
/// daemon, and nothing may be sent to it (a delegation carries objectives,
/// workspaces and secrets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} is served by a process of uid {}, not by you (uid {me}): it is not your caesard, so nothing was sent to it; remove the socket or point CAESAR_SOCKET elsewhere",
    socket.display(),
    peer.map_or_else(|| "unknown".to_owned(), |u| u.to_string())
)]
pub struct ForeignPeer {
    pub socket: std::path::PathBuf,
    /// The peer's effective uid, when the system told it.
    pub peer: Option<u32>,
    pub me: u32,
}

/// The client's half of the peer check: `peer` is what `SO_PEERCRED` (or
/// the system's equivalent) said about the connected socket.
#[cfg(unix)]
fn check_peer(socket: &Path, peer: io::Result<Option<u32>>, me: u32) -> io::Result<()> {
    match peer {
        Ok(Some(uid)) if uid == me => Ok(()),
        Ok(peer) => {
            Err(io::Error::new(io::ErrorKind::PermissionDenied, ForeignPeer { socket: socket.to_path_buf(), peer, me }))
        }
        Err(_) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            ForeignPeer { socket: socket.to_path_buf(), peer: None, me },
        )),
    }
}

/// The [`ForeignPeer`] somewhere in an error's chain of sources, if any.
pub fn foreign_peer(e: &(dyn std::error::Error + 'static)) -> Option<ForeignPeer> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(f) = err.downcast_ref::<ForeignPeer>() {
            return Some(f.clone());
        }
        if let Some(io) = err.downcast_ref::<io::Error>()
            && let Some(f) = io.get_ref().and_then(|i| i.downcast_ref::<ForeignPeer>())
        {
            return Some(f.clone());
        }
        cur = err.source();
    }
    None
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn only_a_peer_of_our_uid_is_accepted() {
        let s = Path::new("/tmp/x.sock");
        check_peer(s, Ok(Some(1000)), 1000).unwrap();
        for peer in [Ok(Some(0)), Ok(Some(1001)), Ok(None), Err(io::Error::other("no creds"))] {
            let err = check_peer(s, peer, 1000).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
            let f = foreign_peer(&err).expect("a ForeignPeer inside");
            assert_eq!(f.me, 1000);
            assert!(err.to_string().contains("not your caesard"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_daemon_of_our_own_uid_passes_the_check() {
        // The positive path through the real connector: a listener of ours.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = bind(&path).unwrap();
        let accepting = tokio::spawn(async move {
            let _conn = accept(&listener).await;
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        });
        // tonic's connect also does the HTTP/2 handshake, which the bare
        // listener never answers; what matters is that the connector let the
        // stream through, so its error (if any) holds no ForeignPeer.
        let r = tokio::time::timeout(std::time::Duration::from_millis(500), connect(&path)).await;
        if let Ok(Err(e)) = r {
            assert_eq!(foreign_peer(&e), None, "{e}");
        }
        accepting.abort();
    }
}

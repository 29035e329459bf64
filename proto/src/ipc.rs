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

/// One accepted connection, in the shape tonic's server wants.
pub struct IpcConn(pub Stream);

impl tonic::transport::server::Connected for IpcConn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
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
pub async fn accept(listener: &Listener) -> io::Result<Option<IpcConn>> {
    let stream = listener.accept().await?;
    #[cfg(unix)]
    {
        let me = nix::unistd::geteuid().as_raw();
        match stream.peer_creds().map(|c| c.euid()) {
            Ok(Some(uid)) if uid == me => {}
            _ => return Ok(None),
        }
    }
    Ok(Some(IpcConn(stream)))
}

/// Opens a gRPC channel to the daemon's socket. It connects now, so a missing
/// daemon is seen here rather than on the first call.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is required by tonic and ignored by the connector.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = Stream::connect(socket_name(&path)?).await?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

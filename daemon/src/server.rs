//! The daemon's wiring: instance lock, socket, recovery, serving, shutdown.

use std::fs::File;
use std::sync::Arc;

use caesar_proto::ipc;
use caesar_proto::paths::Paths;
use caesar_proto::pb::caesar_server::CaesarServer;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::engine::{Engine, Settings};
use crate::rpc::Service;

/// How [`serve`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// Served until told to stop.
    Stopped,
    /// Another daemon holds the instance lock for this socket.
    AlreadyRunning,
}

/// Takes the instance lock for `paths`, or `None` when another daemon has it.
/// The lock is held as long as the returned file is open; the kernel drops
/// it when the process dies, however it dies.
pub fn lock_instance(paths: &Paths) -> anyhow::Result<Option<File>> {
    paths.ensure_dirs()?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(paths.lock_file())?;
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Runs the daemon until SIGTERM, SIGINT or a Shutdown call.
pub async fn serve(paths: Paths) -> anyhow::Result<Served> {
    let Some(_lock) = lock_instance(&paths)? else {
        return Ok(Served::AlreadyRunning);
    };
    let engine = Engine::open(paths.clone(), Settings::from_env()?)?;
    engine.recover().await?;
    let listener = ipc::bind(&paths.socket)?;
    info!(socket = %paths.socket.display(), pid = std::process::id(), version = caesar_proto::VERSION, "caesard ready");

    let (stop_tx, mut stop_rx) = watch::channel(false);
    let service = Service::new(Arc::clone(&engine), stop_tx);
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        loop {
            match ipc::accept(&listener).await {
                Ok(Some(conn)) => return Some((Ok(conn), listener)),
                Ok(None) => warn!("refused a connection from another user"),
                Err(e) => return Some((Err(e), listener)),
            }
        }
    });
    let shutdown = async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).ok();
            let mut int = signal(SignalKind::interrupt()).ok();
            tokio::select! {
                _ = async { match term.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => info!("SIGTERM: stopping"),
                _ = async { match int.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => info!("SIGINT: stopping"),
                _ = stop_rx.wait_for(|s| *s) => info!("shutdown requested"),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = stop_rx.wait_for(|s| *s) => {}
            }
        }
    };
    tonic::transport::Server::builder()
        .add_service(CaesarServer::new(service).max_decoding_message_size(64 * 1024 * 1024))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    // Running tasks are left to their supervisors; the next daemon
    // re-attaches to them.
    info!("caesard stopped");
    Ok(Served::Stopped)
}

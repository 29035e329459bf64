//! The daemon's wiring: instance lock, socket, recovery, serving, shutdown.

use std::fs::File;
use std::sync::Arc;

use caesar_proto::instance::DaemonRecord;
use caesar_proto::paths::Paths;
use caesar_proto::pb::PingResponse;
use caesar_proto::pb::caesar_server::CaesarServer;
use caesar_proto::{client, ipc};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::engine::{Engine, Settings};
use crate::rpc::Service;

/// How [`serve`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// Served until told to stop.
    Stopped,
    /// Another daemon holds the instance lock of this state directory; its
    /// record, when it wrote one, says where it listens.
    AlreadyRunning(Option<DaemonRecord>),
    /// A daemon answers on our socket but does not hold our state
    /// directory's lock: it serves another state directory (or is an older
    /// caesard that locked its socket, not its store). Its socket is not
    /// taken from it.
    SocketTaken(PingResponse),
}

/// Takes the instance lock for the state directory of `paths`, or `None`
/// when another daemon has it. The lock is held as long as the returned
/// file is open; the kernel drops it when the process dies, however it dies.
///
/// The lock belongs to the state directory, not to the socket: two clients
/// may compute different sockets (one with `XDG_RUNTIME_DIR`, one without),
/// and the daemons they start must still not share one store.
pub fn lock_instance(paths: &Paths) -> anyhow::Result<Option<File>> {
    paths.ensure_dirs()?;
    let lock = File::options().create(true).truncate(false).write(true).open(paths.lock_file())?;
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Takes the instance lock, waiting a little while a daemon that is
/// stopping still holds it (its socket is closed before its process exits).
/// Gives up at once when the daemon that holds it answers.
async fn wait_for_instance_lock(paths: &Paths) -> anyhow::Result<Option<File>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(lock) = lock_instance(paths)? {
            return Ok(Some(lock));
        }
        if std::time::Instant::now() >= deadline || client::connect(paths).await.is_ok() {
            return Ok(None);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Runs the daemon until SIGTERM, SIGINT or a Shutdown call.
pub async fn serve(paths: Paths) -> anyhow::Result<Served> {
    crate::origin::environment_origin();
    let Some(_lock) = wait_for_instance_lock(&paths).await? else {
        return Ok(Served::AlreadyRunning(DaemonRecord::read(&paths)));
    };
    // The boxes' limits need their controllers enabled beside this daemon
    // (issue 29, `sandbox/cgroup.rs`).
    #[cfg(target_os = "linux")]
    {
        let enabled = crate::sandbox::cgroup::enable_controllers();
        if !enabled.is_empty() {
            info!(controllers = ?enabled, "cgroup controllers enabled for the tasks' boxes");
        }
    }
    #[cfg(unix)]
    let inherited = ipc::inherited_listener()?;
    #[cfg(not(unix))]
    let inherited = None;
    let activated = inherited.is_some();
    // Binding replaces a stale socket file; one that a live daemon serves is
    // another state directory's, and stays its own.
    if !activated
        && let Ok(Ok((_, ping))) =
            tokio::time::timeout(std::time::Duration::from_secs(2), client::connect_at(&paths.socket)).await
    {
        return Ok(Served::SocketTaken(ping));
    }
    let engine = Engine::open(paths.clone(), Settings::from_env()?, None)?;
    engine.recover().await?;
    let listener = match inherited {
        Some(l) => l,
        None => ipc::bind(&paths.socket)?,
    };
    // Clients whose environment names another socket find this one here.
    if let Err(e) = DaemonRecord::for_this_process(&paths.socket).write(&paths) {
        warn!(
            "cannot write {}: clients with another environment will not find this daemon: {e}",
            paths.record_file().display()
        );
    }
    info!(socket = %paths.socket.display(), pid = std::process::id(), version = caesar_proto::VERSION, activated, "caesard ready");
    notify_ready();

    spawn_hourly_gc(Arc::clone(&engine));
    spawn_queue_retry(Arc::clone(&engine));
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let dashboard = crate::dashboard::Hub::new(Arc::clone(&engine));
    let service = Service::new(Arc::clone(&engine), stop_tx).with_dashboard(Arc::clone(&dashboard));
    let grpc = CaesarServer::new(service).max_decoding_message_size(64 * 1024 * 1024);
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        loop {
            match ipc::accept(&listener).await {
                Ok(Some(conn)) => return Some((Ok(conn), listener)),
                Ok(None) => warn!("refused a connection from another user"),
                Err(e) => return Some((Err(e), listener)),
            }
        }
    });
    // One signal stops accepting; connections that stay open (a shim idling
    // on its channel) get a short grace and are then dropped.
    let (stopping_tx, stopping_rx) = watch::channel(false);
    let signals = async move {
        wait_for_stop(&mut stop_rx).await;
        let _ = stopping_tx.send(true);
    };
    let mut drained = stopping_rx.clone();
    serve_http_if_configured(&paths, &grpc, &stopping_rx, &dashboard);
    let server =
        tonic::transport::Server::builder().add_service(grpc).serve_with_incoming_shutdown(incoming, async move {
            let mut rx = stopping_rx;
            let _ = rx.wait_for(|s| *s).await;
        });
    tokio::pin!(server);
    tokio::spawn(signals);
    tokio::select! {
        r = &mut server => r?,
        _ = async {
            let _ = drained.wait_for(|s| *s).await;
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        } => info!("closing connections that stayed open"),
    }
    // Running tasks are left to their supervisors; the next daemon
    // re-attaches to them. Under socket activation the socket outlives this
    // process (the service manager keeps it), and so does the record.
    if !activated {
        DaemonRecord::remove_if_mine(&paths);
    }
    info!("caesard stopped");
    Ok(Served::Stopped)
}

/// Collects the worktrees of finished tasks every hour, with the same
/// safety rules as `caesar gc` and never with force. The first collection
/// waits a few minutes: it walks every ended task, which on a long history
/// took the daemon's start and first calls seconds (issue 33 item 3).
fn spawn_hourly_gc(engine: Arc<Engine>) {
    tokio::spawn(async move {
        let hour = std::time::Duration::from_secs(3600);
        let first = tokio::time::Instant::now() + std::time::Duration::from_secs(300);
        let mut every = tokio::time::interval_at(first, hour);
        loop {
            every.tick().await;
            let engine = Arc::clone(&engine);
            let age = std::time::Duration::from_millis(crate::rpc::GC_DEFAULT_AGE_MS);
            match tokio::task::spawn_blocking(move || engine.changes().gc(age, false, false)).await {
                Ok(Ok(items)) => {
                    let removed = items.iter().filter(|i| i.action == "removed").count();
                    if removed > 0 {
                        info!(removed, "scheduled gc removed worktrees");
                    }
                }
                Ok(Err(e)) => warn!("scheduled gc failed: {e}"),
                Err(e) => warn!("scheduled gc panicked: {e}"),
            }
        }
    });
}

/// Gives the queue a turn every few seconds, for tasks whose start failed
/// in a way that could not be recorded (a full disk).
fn spawn_queue_retry(engine: Arc<Engine>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            engine.retry_queue().await;
        }
    });
}

/// Starts MCP over HTTP when the global config asks for it (`[http]
/// listen`); its tools call the same gRPC service in process, and it stops
/// when `stopping` turns true. A config that does not load, or a bad
/// address, leaves it off with a warning.
fn serve_http_if_configured(
    paths: &Paths,
    grpc: &CaesarServer<Service>,
    stopping: &watch::Receiver<bool>,
    dashboard: &Arc<crate::dashboard::Hub>,
) {
    let config = match crate::config::Config::load_global(&paths.config_dir) {
        Ok(config) => config,
        Err(e) => {
            warn!("the global config does not load, so MCP over HTTP is off: {e}");
            return;
        }
    };
    let Some(h) = config.http else { return };
    let listen = match crate::config::parse_listen(&h.listen) {
        Ok(listen) => listen,
        Err(e) => {
            warn!("{e}");
            return;
        }
    };
    let cfg = crate::http::HttpConfig { listen, rate_limit_per_minute: h.rate_limit_per_minute };
    let mut rx = stopping.clone();
    let stop = async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // The HTTP tools call this same service in process.
    let api = caesar_mcp::daemon::client_over(grpc.clone());
    tokio::spawn(crate::http::serve(paths.clone(), api, cfg, stop, Arc::clone(dashboard)));
}

async fn wait_for_stop(stop_rx: &mut watch::Receiver<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).ok();
        let mut int = signal(SignalKind::interrupt()).ok();
        tokio::select! {
            _ = recv(term.as_mut()) => info!("SIGTERM: stopping"),
            _ = recv(int.as_mut()) => info!("SIGINT: stopping"),
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
}

#[cfg(unix)]
async fn recv(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Tells systemd (`Type=notify`) that the daemon is ready, when it asked.
fn notify_ready() {
    #[cfg(target_os = "linux")]
    if let Some(path) = std::env::var_os("NOTIFY_SOCKET") {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let bytes = path.as_bytes();
        let addr = match bytes.first() {
            Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]),
            _ => SocketAddr::from_pathname(std::path::Path::new(&path)),
        };
        let sent = UnixDatagram::unbound().and_then(|s| addr.and_then(|a| s.send_to_addr(b"READY=1", &a)));
        if let Err(e) = sent {
            warn!("could not notify the service manager: {e}");
        }
    }
}

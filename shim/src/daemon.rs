//! The shim's only link to state: the `caesar.v1` API of caesard.
//!
//! The tools are written once against that API, reached one of two ways:
//! over the daemon's socket (`caesar-mcp` on stdio: connected lazily on the
//! first call, reopened after a daemon restart, the daemon auto-started when
//! none answers), or in process (the daemon's own HTTP endpoint: its gRPC
//! service called directly, with no socket and no second daemon).
//!
//! The cached channel is a transport detail, not state: dropping it loses
//! nothing, and every answer comes from the daemon.

use std::future::Future;

use caesar_proto::client;
use caesar_proto::paths::Paths;
use caesar_proto::pb::caesar_client::CaesarClient;
use tokio::sync::Mutex;
use tower::ServiceExt;

use crate::error::{ToolError, is_transport};

/// Any transport of the `caesar.v1` API: a socket channel, or the daemon's
/// service itself.
pub type Transport = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    TransportError,
>;

/// Why a [`Transport`] failed: the socket's error, kept whole. A named type
/// rather than a boxed trait object, whose lifetime bounds the compiler
/// cannot prove in the tools' futures.
#[derive(Debug)]
pub struct TransportError(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The transport's own error, so that tonic finds it in the chain and
        // a broken connection reads as one.
        Some(self.0.as_ref())
    }
}

/// A client of the API over any [`Transport`].
pub type Client = CaesarClient<Transport>;

/// A client over `service`: a tonic `Channel`, or a generated server
/// (`CaesarServer<impl Caesar>`) called in process.
pub fn client_over<S, E>(service: S) -> Client
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>, Error = E>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    CaesarClient::new(Transport::new(service.map_err(|e: E| TransportError(e.into()))))
        .max_decoding_message_size(64 * 1024 * 1024)
}

/// Where the API is.
enum Source {
    Socket(Paths),
    InProcess(Client),
}

/// A lazily connected client of caesard.
pub struct Daemon {
    source: Source,
    client: Mutex<Option<Client>>,
}

impl Daemon {
    /// A daemon reached over the socket of `paths`. Nothing is connected yet.
    pub fn new(paths: Paths) -> Daemon {
        Daemon { source: Source::Socket(paths), client: Mutex::new(None) }
    }

    /// The daemon's own API, called in process.
    pub fn in_process(client: Client) -> Daemon {
        Daemon { source: Source::InProcess(client), client: Mutex::new(None) }
    }

    /// A connected client: the cached one, or a new connection (starting the
    /// daemon when none answers).
    ///
    /// The lock is never held across the connection: `caesar_await` polls
    /// its call and its progress ticks in turn, and a tick waiting on a lock
    /// that the suspended call holds would never wake.
    pub async fn client(&self) -> Result<Client, ToolError> {
        let paths = match &self.source {
            Source::InProcess(c) => return Ok(c.clone()),
            Source::Socket(paths) => paths,
        };
        if let Some(c) = self.client.lock().await.as_ref() {
            return Ok(c.clone());
        }
        // A daemon of our protocol answers (started if need be); the tools
        // then speak to it over a channel of their own, found the same way.
        client::connect_or_start(paths).await?;
        let (channel, _) = client::connect_channel(paths).await?;
        let c = client_over(channel);
        Ok(self.client.lock().await.get_or_insert(c).clone())
    }

    /// Forgets the cached connection so the next call reconnects.
    async fn reset(&self) {
        *self.client.lock().await = None;
    }

    /// Runs one RPC. A call that fails because the connection broke (the
    /// daemon restarted or died) is retried once on a fresh connection, which
    /// starts the daemon again when needed.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, ToolError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let c = self.client().await?;
        match f(c).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) if is_transport(&s) => {
                tracing::info!(error = %s, "daemon connection lost; reconnecting once");
                self.reset().await;
                let c = self.client().await?;
                match f(c).await {
                    Ok(r) => Ok(r.into_inner()),
                    Err(s) => {
                        if is_transport(&s) {
                            self.reset().await;
                        }
                        Err(s.into())
                    }
                }
            }
            Err(s) => Err(s.into()),
        }
    }
}

//! The shim's only link to state: a connection to caesard, opened lazily on
//! the first call and reopened after a daemon restart.
//!
//! The cached channel is a transport detail, not state: dropping it loses
//! nothing, and every answer comes from the daemon.

use std::future::Future;

use caesar_proto::client::{self, Client};
use caesar_proto::paths::Paths;
use tokio::sync::Mutex;

use crate::error::{ToolError, is_transport};

/// A lazily connected client of caesard.
pub struct Daemon {
    paths: Paths,
    client: Mutex<Option<Client>>,
}

impl Daemon {
    /// A daemon handle for these paths. Nothing is connected yet.
    pub fn new(paths: Paths) -> Daemon {
        Daemon { paths, client: Mutex::new(None) }
    }

    /// A connected client: the cached one, or a new connection (starting the
    /// daemon when none answers).
    ///
    /// The lock is never held across the connection: `caesar_await` polls
    /// its call and its progress ticks in turn, and a tick waiting on a lock
    /// that the suspended call holds would never wake.
    pub async fn client(&self) -> Result<Client, ToolError> {
        if let Some(c) = self.client.lock().await.as_ref() {
            return Ok(c.clone());
        }
        let c = client::connect_or_start(&self.paths).await?;
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

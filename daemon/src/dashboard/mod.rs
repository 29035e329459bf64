//! The web dashboard (`caesar ui`): the engine's tasks, live, in a browser.
//!
//! Served on loopback by the daemon, on the `[http]` listener next to MCP
//! over HTTP, or on a listener opened on demand (free port on 127.0.0.1)
//! the first time `caesar ui` asks for it. It talks to the engine through
//! the same typed API `rpc.rs` uses, and follows it through the engine's
//! change stream (`Engine::subscribe_changes`) and each task's event stream,
//! pushed to the page as server-sent events: nothing polls.
//!
//! Rooms: [`auth`] (one-time login links, session cookies, Host, Origin and
//! CSRF checks; MCP over HTTP's bearer tokens on the JSON API, the
//! read-only one for reading only), [`api`] (JSON views and the actions), [`sse`] (the live
//! streams), [`pages`] (the HTML shell and the embedded assets),
//! [`orchestra`] (groups, budgets and the conflict radar), [`work`] (start,
//! retry, continue with line comments, steer).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use tracing::{info, warn};

use crate::engine::Engine;
use crate::error::{Error, Result};

mod api;
mod auth;
mod orchestra;
mod pages;
mod sse;
mod work;

/// How long a login link is valid.
pub const LOGIN_VALID: Duration = Duration::from_secs(5 * 60);
/// How long a session lasts after login.
pub const SESSION_VALID: Duration = Duration::from_secs(12 * 60 * 60);

/// The dashboard's state: the engine, where the dashboard is served, the
/// login links handed out and the sessions they became. Login links and
/// sessions live in memory only: a restarted daemon asks for a new link.
pub struct Hub {
    engine: Arc<Engine>,
    addr: Mutex<Option<SocketAddr>>,
    /// Serialises opening the on-demand listener.
    opening: tokio::sync::Mutex<()>,
    logins: Mutex<HashMap<String, auth::Login>>,
    sessions: Mutex<HashMap<String, auth::Session>>,
    /// The project shown first on the agents and health pages.
    workspace: Mutex<String>,
    /// MCP over HTTP's bearer tokens, which reach the JSON API too.
    tokens: crate::http::Tokens,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// What [`Hub::open`] hands `caesar ui`.
#[derive(Debug, Clone)]
pub struct Opened {
    pub login_url: String,
    pub base_url: String,
    pub opened_on_demand: bool,
}

impl Hub {
    /// A dashboard over `engine`, served nowhere yet.
    pub fn new(engine: Arc<Engine>) -> Arc<Hub> {
        Arc::new(Hub {
            tokens: crate::http::Tokens::new(engine.paths().state_dir.clone()),
            engine,
            addr: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            logins: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            workspace: Mutex::new(String::new()),
        })
    }

    /// Records that the dashboard is served at `addr` (the `[http]`
    /// listener calls this once it is bound).
    pub fn served_at(&self, addr: SocketAddr) {
        *self.addr.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr);
    }

    /// Where the dashboard is served, if anywhere yet.
    pub fn addr(&self) -> Option<SocketAddr> {
        *self.addr.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The routes, for whichever listener serves them.
    pub fn router(self: &Arc<Self>) -> Router {
        let routes = Router::new()
            .route("/", get(pages::tasks))
            .route("/task/{id}", get(pages::task))
            .route("/agents", get(pages::agents))
            .route("/health", get(pages::health))
            .route("/groups", get(pages::groups))
            .route("/budgets", get(pages::budgets))
            .route("/radar", get(pages::radar))
            .route("/login", get(auth::login))
            .route("/assets/{name}", get(pages::asset))
            .route("/api/tasks", get(api::tasks))
            .route("/api/tasks/stream", get(sse::tasks))
            .route("/api/task/{id}", get(api::task))
            .route("/api/task/{id}/events", get(sse::events))
            .route("/api/task/{id}/raw", get(api::raw))
            .route("/api/task/{id}/diff", get(api::diff))
            .route("/api/task/{id}/answer", post(api::answer))
            .route("/api/task/{id}/cancel", post(api::cancel))
            .route("/api/task/{id}/apply", post(api::apply))
            .route("/api/task/{id}/discard", post(api::discard))
            .route("/api/tasks", post(work::start))
            .route("/api/task/{id}/retry", post(work::retry))
            .route("/api/task/{id}/continue", post(work::continue_task))
            .route("/api/task/{id}/steer", post(work::steer))
            .route("/api/agents", get(api::agents))
            .route("/api/health", get(api::health))
            .route("/api/groups", get(orchestra::groups))
            .route("/api/group/{id}", get(orchestra::group))
            .route("/api/budgets", get(orchestra::budgets))
            .route("/api/radar", get(orchestra::radar))
            .with_state(self.clone());
        let hub = self.clone();
        routes.layer(axum::middleware::from_fn(move |req, next| auth::guard(hub.clone(), req, next)))
    }

    /// A one-time login URL for `caesar ui`, opening a listener on a free
    /// loopback port first when the dashboard is served nowhere yet.
    pub async fn open(self: &Arc<Self>, workspace: &str) -> Result<Opened> {
        if !workspace.is_empty() {
            *self.workspace.lock().unwrap_or_else(|p| p.into_inner()) = workspace.to_owned();
        }
        let mut opened_on_demand = false;
        let addr = {
            let _one = self.opening.lock().await;
            match self.addr() {
                Some(a) => a,
                None => {
                    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
                        Error::Precondition(format!("cannot open a loopback port for the dashboard: {e}"))
                    })?;
                    let addr = listener.local_addr().map_err(Error::Io)?;
                    let app = self.router();
                    tokio::spawn(async move {
                        if let Err(e) = axum::serve(listener, app).await {
                            warn!("the dashboard's listener stopped: {e}");
                        }
                    });
                    info!(%addr, "dashboard opened on demand at http://{addr}/");
                    self.served_at(addr);
                    opened_on_demand = true;
                    addr
                }
            }
        };
        let token = self.mint_login();
        let base_url = format!("http://{addr}/");
        Ok(Opened { login_url: format!("{base_url}login?token={token}"), base_url, opened_on_demand })
    }

    /// The engine behind the dashboard.
    fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The project shown first, or empty (the global config only).
    fn workspace(&self) -> String {
        self.workspace.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Forgets entries older than `keep` from a map of timestamped entries.
fn prune<T>(map: &mut HashMap<String, T>, at: impl Fn(&T) -> Instant, keep: Duration) {
    let now = Instant::now();
    map.retain(|_, v| now.duration_since(at(v)) < keep);
}

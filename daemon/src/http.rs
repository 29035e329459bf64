//! MCP over streamable HTTP, for hosts that cannot spawn a process.
//!
//! Enabled by `[http] listen = "127.0.0.1:7077"` in the global config, on
//! loopback only. The tools and their response shaping are caesar-mcp's own
//! (the `caesar_mcp` library), served statelessly with plain JSON answers;
//! they call the daemon's gRPC service in process: no connection to its own
//! socket, so never a second daemon. With no MCP roots over HTTP, a
//! delegation must name its workspace.
//!
//! In front of them: a bearer token (generated on first use, kept 0600 in
//! the state directory, shown or rotated by `caesar mcp token`) answered by
//! 401 and a `WWW-Authenticate` challenge when bad or missing; `Host` and
//! `Origin` checks against DNS rebinding; `?tools=` and `?profile=` scoping;
//! and a per-token rate limit answering 429.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use caesar_mcp::server::{Settings, Shim};
use caesar_proto::paths::Paths;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tracing::{info, warn};

use crate::error::{Error, Result};

/// The token file in the state directory.
pub const TOKEN_FILE: &str = "http.token";

/// `[http]` of the global config.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// Requests per minute and token; 0 for no limit.
    pub rate_limit_per_minute: u32,
}

/// Parses and checks `[http] listen`: loopback only.
pub fn parse_listen(listen: &str) -> std::result::Result<SocketAddr, String> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|e| format!("[http] listen `{listen}` is not an address:port ({e}); write it like 127.0.0.1:7077"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "[http] listen `{listen}` is not a loopback address: caesar serves MCP over HTTP on 127.0.0.1 or [::1] only"
        ));
    }
    Ok(addr)
}

/// The bearer token, created (0600) on first use; `rotate` makes a new one.
pub fn token(state_dir: &Path, rotate: bool) -> Result<String> {
    let path = state_dir.join(TOKEN_FILE);
    if !rotate
        && let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_owned());
    }
    let token = format!("{}{}", crate::ids::secret(), crate::ids::secret());
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(|e| Error::io_at("cannot write", &tmp, e))?;
        f.write_all(token.as_bytes()).map_err(|e| Error::io_at("cannot write", &tmp, e))?;
        f.sync_all().map_err(|e| Error::io_at("cannot write", &tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| Error::io_at("cannot write", &path, e))?;
    Ok(token)
}

#[derive(Clone)]
struct Guard {
    state_dir: PathBuf,
    limit: u32,
    window: Arc<Mutex<HashMap<String, (Instant, u32)>>>,
}

impl Guard {
    fn challenge(why: &str) -> Response {
        let mut r = (
            StatusCode::UNAUTHORIZED,
            format!("unauthorized: {why}. Send `Authorization: Bearer <token>`; `caesar mcp token` shows it\n"),
        )
            .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"caesar\", error=\"invalid_token\""),
        );
        r
    }

    /// Whether this token may make one more request in the current minute.
    fn admit(&self, token: &str) -> bool {
        if self.limit == 0 {
            return true;
        }
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let slot = w.entry(token.to_owned()).or_insert((now, 0));
        if now.duration_since(slot.0) >= Duration::from_secs(60) {
            *slot = (now, 0);
        }
        slot.1 += 1;
        slot.1 <= self.limit
    }
}

async fn guard(guard: Guard, req: Request, next: Next) -> Response {
    // Read the token each time: `caesar mcp token --rotate` takes effect at once.
    let Ok(expected) = token(&guard.state_dir, false) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the token file cannot be read\n").into_response();
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(given) = given else { return Guard::challenge("no bearer token") };
    if !crate::ids::secrets_match(given, &expected) {
        return Guard::challenge("the token is not valid");
    }
    if !guard.admit(given) {
        let mut r = (StatusCode::TOO_MANY_REQUESTS, format!("rate limit: at most {} requests a minute\n", guard.limit))
            .into_response();
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
        return r;
    }
    // Bad scoping is refused up front, with the valid names.
    let (profile, tools) = caesar_mcp::server::scope_of(req.uri().query().unwrap_or(""));
    if let Err(e) = caesar_mcp::tools::select(&profile, tools.as_deref()) {
        return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
    }
    next.run(req).await
}

/// Serves MCP over HTTP until `stop` resolves.
pub async fn serve(
    paths: Paths,
    api: caesar_mcp::daemon::Client,
    config: HttpConfig,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    dashboard: std::sync::Arc<crate::dashboard::Hub>,
) -> Result<()> {
    token(&paths.state_dir, false)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| Error::Precondition(format!("cannot listen on {} for MCP over HTTP: {e}", config.listen)))?;
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(config.listen.port());
    dashboard.served_at(SocketAddr::new(config.listen.ip(), port));
    let settings = Settings {
        root: None,
        max_chars: caesar_mcp::shape::DEFAULT_MAX_CHARS,
        progress_every: Duration::from_secs(5),
        tools: caesar_mcp::tools::ALL.to_vec(),
        cwd_is_root: false,
    };
    let hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned(), "[::1]".to_owned()]
        .into_iter()
        .flat_map(|h| [h.clone(), format!("{h}:{port}")])
        .collect::<Vec<_>>();
    let origins =
        vec![format!("http://127.0.0.1:{port}"), format!("http://localhost:{port}"), format!("http://[::1]:{port}")];
    let mcp = StreamableHttpService::new(
        move || Ok(Shim::over(caesar_mcp::daemon::Daemon::in_process(api.clone()), settings.clone())),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins),
    );
    let g =
        Guard { state_dir: paths.state_dir.clone(), limit: config.rate_limit_per_minute, window: Default::default() };
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(move |req: Request, next: Next| guard(g.clone(), req, next)))
        .merge(dashboard.router());
    info!(listen = %config.listen, "MCP over HTTP at http://{}/mcp", config.listen);
    axum::serve(listener, app).with_graceful_shutdown(stop).await.map_err(|e| {
        warn!("MCP over HTTP stopped: {e}");
        Error::Internal(e.to_string())
    })
}

//! MCP over streamable HTTP, for hosts that cannot spawn a process.
//!
//! Enabled by `[http] listen = "127.0.0.1:7077"` in the global config, on
//! loopback only. The tools and their response shaping are caesar-mcp's own
//! (the `caesar_mcp` library), served statelessly with plain JSON answers;
//! they call the daemon's gRPC service in process: no connection to its own
//! socket, so never a second daemon. With no MCP roots over HTTP, a
//! delegation must name its workspace.
//!
//! In front of them: a bearer token answered by 401 and a
//! `WWW-Authenticate` challenge when bad or missing; `Host` and `Origin`
//! checks against DNS rebinding; `?tools=` and `?profile=` scoping; and a
//! per-token rate limit answering 429. Two tokens, each kept 0600 in the
//! state directory and read again only when its file changed: the full one
//! (made on first use, `caesar mcp token [--rotate]`), and a read-only one
//! (made when first asked for, `caesar mcp token --readonly [--rotate]`)
//! that the server confines to the `readonly` profile whatever the client
//! asks (`http_scope.rs`, issue 19).

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

/// The full token's file in the state directory.
pub const TOKEN_FILE: &str = "http.token";
/// The read-only token's file in the state directory.
pub const READONLY_TOKEN_FILE: &str = "http.readonly.token";

/// Which bearer token: what a request made with it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// Every tool, as the user.
    Full,
    /// The `readonly` profile only, enforced by the server.
    ReadOnly,
}

impl TokenKind {
    /// The token's file name in the state directory.
    pub fn file(self) -> &'static str {
        match self {
            TokenKind::Full => TOKEN_FILE,
            TokenKind::ReadOnly => READONLY_TOKEN_FILE,
        }
    }
}

/// `[http]` of the global config.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// Requests per minute and token; 0 for no limit.
    pub rate_limit_per_minute: u32,
}

/// The bearer token of `kind`, created (0600) on first use; `rotate` makes
/// a new one.
pub fn token(state_dir: &Path, kind: TokenKind, rotate: bool) -> Result<String> {
    let path = state_dir.join(kind.file());
    if !rotate
        && let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_owned());
    }
    let token = format!("{}{}", crate::ids::secret(), crate::ids::secret());
    // A name of its own: the server's start and a `caesar mcp token` can
    // both make the first token at once, and one rename must not take the
    // other's file away.
    let tmp = path.with_extension(format!("tmp.{}", crate::ids::secret()));
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
    if !rotate {
        // The first token is made once: a link fails where another caller
        // made it meanwhile, and that one is the token.
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        return match linked {
            Ok(()) => Ok(token),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read_to_string(&path)
                .map(|t| t.trim().to_owned())
                .map_err(|e| Error::io_at("cannot read", &path, e)),
            Err(e) => Err(Error::io_at("cannot write", &path, e)),
        };
    }
    std::fs::rename(&tmp, &path).map_err(|e| Error::io_at("cannot write", &path, e))?;
    Ok(token)
}

/// The tokens a request may carry, as the files hold them now; MCP over
/// HTTP and the dashboard's API check the same ones.
#[derive(Clone, Debug)]
pub struct Tokens {
    state_dir: PathBuf,
    /// Each token as last read, with its file's identity then: it is read
    /// again only when the file changed (a rotation renames a new one in).
    cached: Arc<Mutex<HashMap<TokenKind, (FileStamp, String)>>>,
    /// Failed authentications this minute (its start, the count), shared by
    /// the clones of one `Tokens` (MCP over HTTP's server and the dashboard
    /// each hold their own).
    failures: Arc<Mutex<Option<(Instant, u32)>>>,
}

#[derive(Clone)]
struct Guard {
    tokens: Tokens,
    limit: u32,
    window: Arc<Mutex<HashMap<String, (Instant, u32)>>>,
}

/// What tells a changed token file: inode, size, modification time.
type FileStamp = (u64, u64, Option<std::time::SystemTime>);

/// Failed authentications answered 401 per minute, all clients together;
/// past it they get 429 without a challenge (issue 19). A valid token is
/// never refused by this, so nobody can lock the user out.
const FAILED_AUTH_PER_MINUTE: u32 = 30;

impl Tokens {
    /// The tokens kept in `state_dir`.
    pub fn new(state_dir: PathBuf) -> Tokens {
        Tokens { state_dir, cached: Default::default(), failures: Default::default() }
    }

    /// The expected token of `kind`, from the cache while its file is
    /// unchanged. The full token is made if missing; the read-only one
    /// only when the user asks for it, so until then there is none.
    fn expected(&self, kind: TokenKind) -> Result<Option<String>> {
        let path = self.state_dir.join(kind.file());
        let stamp = std::fs::metadata(&path).ok().map(|m| {
            #[cfg(unix)]
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let ino = 0;
            (ino, m.len(), m.modified().ok())
        });
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(stamp), Some((seen, t))) = (stamp, cached.get(&kind))
            && stamp == *seen
        {
            return Ok(Some(t.clone()));
        }
        if stamp.is_none() && kind == TokenKind::ReadOnly {
            cached.remove(&kind);
            return Ok(None);
        }
        let t = token(&self.state_dir, kind, false)?;
        match stamp {
            Some(s) => cached.insert(kind, (s, t.clone())),
            None => cached.remove(&kind),
        };
        Ok(Some(t))
    }

    /// Whether one more failed authentication may be answered (401) this
    /// minute; past [`FAILED_AUTH_PER_MINUTE`] the answer is 429. A valid
    /// token is never counted, so nobody can lock the user out.
    pub fn admit_failure(&self) -> bool {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let slot = f.get_or_insert((now, 0));
        if now.duration_since(slot.0) >= Duration::from_secs(60) {
            *slot = (now, 0);
        }
        slot.1 = slot.1.saturating_add(1);
        slot.1 <= FAILED_AUTH_PER_MINUTE
    }

    /// Which token `given` is, compared in constant time with each.
    pub fn kind_of(&self, given: &str) -> Result<Option<TokenKind>> {
        for kind in [TokenKind::Full, TokenKind::ReadOnly] {
            if self.expected(kind)?.is_some_and(|t| crate::ids::secrets_match(given, &t)) {
                return Ok(Some(kind));
            }
        }
        Ok(None)
    }
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

    /// Whether one more failed authentication may be answered 401 this minute.
    fn admit_failure(&self) -> bool {
        self.tokens.admit_failure()
    }

    /// Whether this token may make one more request in the current minute.
    fn admit(&self, token: &str) -> bool {
        if self.limit == 0 {
            return true;
        }
        self.count(token, self.limit)
    }

    fn count(&self, key: &str, limit: u32) -> bool {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let slot = w.entry(key.to_owned()).or_insert((now, 0));
        if now.duration_since(slot.0) >= Duration::from_secs(60) {
            *slot = (now, 0);
        }
        slot.1 = slot.1.saturating_add(1);
        slot.1 <= limit
    }

    fn too_many() -> Response {
        let mut r = (
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed authentications this minute; `caesar mcp token` shows the token\n",
        )
            .into_response();
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
        r
    }
}

async fn guard(guard: Guard, req: Request, next: Next) -> Response {
    // Each file is checked each time (a stat), read when it changed:
    // `caesar mcp token [--readonly] --rotate` takes effect at once.
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let kind = match given.map(|g| guard.tokens.kind_of(g)).transpose() {
        Ok(kind) => kind.flatten(),
        Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, "the token file cannot be read\n").into_response(),
    };
    let (Some(given), Some(kind)) = (given, kind) else {
        if !guard.admit_failure() {
            return Guard::too_many();
        }
        return Guard::challenge(if given.is_none() { "no bearer token" } else { "the token is not valid" });
    };
    if !guard.admit(given) {
        let mut r = (StatusCode::TOO_MANY_REQUESTS, format!("rate limit: at most {} requests a minute\n", guard.limit))
            .into_response();
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
        return r;
    }
    let req = match kind {
        TokenKind::Full => req,
        TokenKind::ReadOnly => match crate::http_scope::confine(req).await {
            Ok(req) => req,
            Err(refused) => return refused,
        },
    };
    // Bad scoping is refused up front, with the valid names.
    let (profile, tools) = caesar_mcp::roots::scope_of(req.uri().query().unwrap_or(""));
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
    token(&paths.state_dir, TokenKind::Full, false)?;
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
    let g = Guard {
        tokens: Tokens::new(paths.state_dir.clone()),
        limit: config.rate_limit_per_minute,
        window: Default::default(),
    };
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(crate::http_legacy_tasks::rewrite))
        .layer(axum::middleware::from_fn(move |req: Request, next: Next| guard(g.clone(), req, next)))
        .merge(dashboard.router());
    info!(listen = %config.listen, "MCP over HTTP at http://{}/mcp", config.listen);
    axum::serve(listener, app).with_graceful_shutdown(stop).await.map_err(|e| {
        warn!("MCP over HTTP stopped: {e}");
        Error::Internal(e.to_string())
    })
}

//! Who may use the dashboard: one-time login links become session cookies
//! (HttpOnly, SameSite=Strict); every request is checked for its Host (no
//! DNS rebinding) and, when it carries one, its Origin; every state-changing
//! request must come from the dashboard's own origin and carry the session's
//! CSRF token.
//!
//! A script may use the JSON API (`/api/…`) with MCP over HTTP's bearer
//! tokens instead of a session (not an ambient credential, so no CSRF
//! token): the full one for everything, the read-only one
//! (`caesar mcp token --readonly`) for reading only: a state-changing call
//! with it is 403, naming the token (issue 19).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Hub, LOGIN_VALID, SESSION_VALID, pages, prune};
use crate::http::TokenKind;

/// A login link handed out by `caesar ui`.
#[derive(Debug, Clone)]
pub(super) struct Login {
    issued: Instant,
    used: bool,
}

impl Login {
    /// Why this link cannot log in at `now`, if it cannot.
    fn admit(&self, now: Instant) -> Result<(), &'static str> {
        if self.used {
            return Err("this login link was used already (each link logs in once)");
        }
        if now.duration_since(self.issued) >= LOGIN_VALID {
            return Err("this login link has expired (links are valid for 5 minutes)");
        }
        Ok(())
    }
}

/// A logged-in browser.
#[derive(Debug, Clone)]
pub(super) struct Session {
    created: Instant,
    /// Sent back by the page on every state-changing request.
    pub(super) csrf: String,
}

/// The most login links remembered at once, used, expired or outstanding:
/// each `caesar ui` adds one, and the oldest goes past this many.
pub(super) const MAX_LOGINS: usize = 64;

/// The header a state-changing request carries the CSRF token in.
pub(super) const CSRF_HEADER: &str = "x-caesar-csrf";

impl Hub {
    /// A new one-time login token.
    pub(super) fn mint_login(&self) -> String {
        let token = format!("{}{}", crate::ids::secret(), crate::ids::secret());
        let mut logins = self.logins.lock().unwrap_or_else(|p| p.into_inner());
        // Used and expired links are remembered for an hour, to say which they were.
        prune(&mut logins, |l| l.issued, LOGIN_VALID * 12);
        // Bounded (issue 29): past the cap the oldest link is dropped, and
        // then no longer logs in ("not valid": `caesar ui` gives a new one).
        while logins.len() >= MAX_LOGINS {
            let Some(oldest) = logins.iter().min_by_key(|(_, l)| l.issued).map(|(t, _)| t.clone()) else { break };
            logins.remove(&oldest);
        }
        logins.insert(token.clone(), Login { issued: Instant::now(), used: false });
        token
    }

    /// Trades a login token for a new session id, once.
    fn redeem(&self, token: &str) -> Result<String, &'static str> {
        let mut logins = self.logins.lock().unwrap_or_else(|p| p.into_inner());
        let found = logins.iter_mut().find(|(t, _)| crate::ids::secrets_match(t, token)).map(|(_, l)| l);
        let Some(login) = found else {
            return Err("this login link is not valid");
        };
        login.admit(Instant::now())?;
        login.used = true;
        drop(logins);
        let id = format!("{}{}", crate::ids::secret(), crate::ids::secret());
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        prune(&mut sessions, |s| s.created, SESSION_VALID);
        sessions.insert(id.clone(), Session { created: Instant::now(), csrf: crate::ids::secret() });
        Ok(id)
    }

    fn session(&self, id: &str) -> Option<Session> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .iter()
            .find(|(k, _)| crate::ids::secrets_match(k, id))
            .map(|(_, s)| s.clone())
            .filter(|s| s.created.elapsed() < SESSION_VALID)
    }

    /// The session cookie's name: per port, since cookies do not tell ports apart.
    fn cookie_name(&self) -> String {
        format!("caesar_dash_{}", self.addr().map(|a| a.port()).unwrap_or(0))
    }
}

/// `GET /login?token=…`: the one-time link `caesar ui` printed.
pub(super) async fn login(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let token = query_param(req.uri().query().unwrap_or(""), "token").unwrap_or_default();
    if token.is_empty() {
        return pages::refusal(
            StatusCode::UNAUTHORIZED,
            "the login link has no token: run `caesar ui` for a new link",
            false,
        );
    }
    match hub.redeem(&token) {
        Ok(session) => {
            let cookie = format!(
                "{}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
                hub.cookie_name(),
                SESSION_VALID.as_secs()
            );
            let mut r = (StatusCode::SEE_OTHER, "logged in\n").into_response();
            let h = r.headers_mut();
            h.insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                h.insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(why) => pages::refusal(StatusCode::UNAUTHORIZED, &format!("{why}: run `caesar ui` for a new link"), false),
    }
}

/// The checks in front of every route.
pub(super) async fn guard(hub: Arc<Hub>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let api = path.starts_with("/api/");
    let port = hub.addr().map(|a| a.port()).unwrap_or(0);
    let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if !host_allowed(&host, port) {
        return pages::refusal(
            StatusCode::FORBIDDEN,
            &format!("Host `{host}` is not this dashboard's: open it as http://127.0.0.1:{port}/"),
            api,
        );
    }
    let own_origin = format!("http://{host}");
    let origin = req.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD);
    if let Some(o) = origin.as_ref().filter(|o| **o != own_origin) {
        return pages::refusal(
            StatusCode::FORBIDDEN,
            &format!("cross-site request refused: it comes from {o}, not from the dashboard ({own_origin})"),
            api,
        );
    }
    if let Some(given) = bearer(req.headers()) {
        return match hub.tokens.kind_of(given) {
            Ok(Some(kind)) if api => {
                if changes_state && kind == TokenKind::ReadOnly {
                    return pages::refusal(
                        StatusCode::FORBIDDEN,
                        "forbidden: this is the read-only token, which only reads; answering, cancelling, applying, \
                         discarding, starting, retrying, continuing and steering need the full token \
                         (`caesar mcp token`) or a login from `caesar ui`",
                        api,
                    );
                }
                next.run(req).await
            }
            Ok(Some(_)) => pages::refusal(
                StatusCode::UNAUTHORIZED,
                "a bearer token reaches the dashboard's JSON API (/api/…) only: run `caesar ui` for a login link",
                api,
            ),
            // Failed attempts are limited as MCP over HTTP's are (issue 19).
            Ok(None) if !hub.tokens.admit_failure() => {
                let mut r = pages::refusal(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many failed authentications this minute; `caesar mcp token [--readonly]` shows the token",
                    api,
                );
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
                r
            }
            Ok(None) => pages::refusal(
                StatusCode::UNAUTHORIZED,
                "the bearer token is not valid: `caesar mcp token [--readonly]` shows it",
                api,
            ),
            Err(_) => pages::refusal(StatusCode::INTERNAL_SERVER_ERROR, "the token file cannot be read", api),
        };
    }
    if origin.is_none() && changes_state {
        return pages::refusal(
            StatusCode::FORBIDDEN,
            "cross-site request refused: a state-changing request must carry the dashboard's Origin",
            api,
        );
    }
    if path == "/login" || path.starts_with("/assets/") {
        return next.run(req).await;
    }
    let Some(session) = cookie(req.headers(), &hub.cookie_name()).and_then(|id| hub.session(&id)) else {
        return pages::refusal(
            StatusCode::UNAUTHORIZED,
            "not logged in (or the session expired, or the daemon restarted): run `caesar ui` for a login link",
            api,
        );
    };
    if changes_state {
        let given = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !crate::ids::secrets_match(given, &session.csrf) {
            return pages::refusal(
                StatusCode::FORBIDDEN,
                "cross-site request refused: the CSRF token is missing or wrong; reload the page",
                api,
            );
        }
    }
    req.extensions_mut().insert(session);
    next.run(req).await
}

/// The bearer token a request carries, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

/// Whether `host` (a Host header) names this dashboard on loopback.
fn host_allowed(host: &str, port: u16) -> bool {
    let Some((name, p)) = host.rsplit_once(':') else { return false };
    p.parse::<u16>().ok() == Some(port) && matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

/// The value of cookie `name`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

/// One parameter of a query string, percent-decoded.
pub(super) fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex =
            b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(v)) => {
                out.push(v);
                i += 2;
            }
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_loopback_names_on_our_port_only() {
        assert!(host_allowed("127.0.0.1:4000", 4000));
        assert!(host_allowed("localhost:4000", 4000));
        assert!(host_allowed("[::1]:4000", 4000));
        assert!(!host_allowed("127.0.0.1:4001", 4000));
        assert!(!host_allowed("evil.example:4000", 4000));
        assert!(!host_allowed("127.0.0.1", 4000));
    }

    #[test]
    fn a_link_logs_in_once_and_only_within_five_minutes() {
        use std::time::Duration;
        let issued = Instant::now();
        let fresh = Login { issued, used: false };
        assert_eq!(fresh.admit(issued + LOGIN_VALID - Duration::from_secs(1)), Ok(()));
        let expired = fresh.admit(issued + LOGIN_VALID).unwrap_err();
        assert!(expired.contains("expired") && expired.contains("5 minutes"), "{expired}");
        let used = Login { issued, used: true }.admit(issued).unwrap_err();
        assert!(used.contains("used already"), "{used}");
    }

    #[test]
    fn query_params_are_decoded() {
        assert_eq!(query_param("a=1&token=x%2Fy+z", "token").as_deref(), Some("x/y z"));
        assert_eq!(query_param("a=%", "a").as_deref(), Some("%"));
        assert_eq!(query_param("a=%4", "a").as_deref(), Some("%4"));
        assert_eq!(query_param("a=1", "b"), None);
    }
}

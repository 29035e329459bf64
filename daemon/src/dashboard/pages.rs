//! The dashboard's pages: one HTML shell per page (the page's script fills
//! it from the JSON API and the live streams), the embedded assets, and the
//! refusal page every bad request gets.

use std::sync::Arc;

use axum::extract::{Extension, Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Hub;
use super::auth::Session;

/// The scripts of every page, embedded in the binary, in the order the
/// pages load them: the shared helpers, the board, a task's page, then the
/// smaller pages and the dispatch.
pub const SCRIPTS: &[(&str, &str)] = &[
    ("core.js", include_str!("assets/core.js")),
    ("board.js", include_str!("assets/board.js")),
    ("task.js", include_str!("assets/task.js")),
    ("app.js", include_str!("assets/app.js")),
];
/// The style sheet, embedded in the binary.
pub const APP_CSS: &str = include_str!("assets/app.css");

/// Escapes text for HTML.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
            ),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

const NAV: &[(&str, &str, &str)] = &[
    ("tasks", "/", "Tasks"),
    ("groups", "/groups", "Groups"),
    ("budgets", "/budgets", "Budgets"),
    ("radar", "/radar", "Conflict radar"),
    ("agents", "/agents", "Agents & roles"),
    ("health", "/health", "Health"),
];

fn shell(page: &str, title: &str, csrf: &str, data: &str) -> String {
    let nav: String = NAV
        .iter()
        .map(|(key, href, label)| {
            let cur = if *key == page { " class=\"current\"" } else { "" };
            format!("<a href=\"{href}\"{cur}>{label}</a>")
        })
        .collect();
    let scripts: String = SCRIPTS.iter().map(|(name, _)| format!("<script src=\"/assets/{name}\"></script>")).collect();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<meta name=\"caesar-csrf\" content=\"{csrf}\"><title>{title} · caesar</title><link rel=\"stylesheet\" href=\"/assets/app.css\"></head>\
<body data-page=\"{page}\" {data}><header><span class=\"brand\">caesar</span><nav>{nav}</nav><span id=\"live\" class=\"live\">connecting…</span></header>\
<main id=\"main\"><noscript>This page fills itself from the daemon with a small embedded script; turn JavaScript on for it.</noscript></main>\
<div id=\"toast\" role=\"status\" aria-live=\"polite\"></div>{scripts}</body></html>"
    )
}

/// A page saying what was refused and what to do: JSON for the API, HTML for pages.
pub(super) fn refusal(status: StatusCode, message: &str, api: bool) -> Response {
    if api {
        return super::api::json_response(status, &serde_json::json!({ "error": message }));
    }
    html(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · caesar</title><link rel=\"stylesheet\" href=\"/assets/app.css\"></head>\
<body><header><span class=\"brand\">caesar</span></header><main><div class=\"refusal\" id=\"refusal\"><h1>{}</h1><p>{}</p></div></main></body></html>",
            status.as_u16(),
            esc(status.canonical_reason().unwrap_or("refused")),
            esc(message)
        ),
    )
}

/// `GET /`: the board.
pub(super) async fn tasks(Extension(s): Extension<Session>) -> Response {
    html(StatusCode::OK, shell("tasks", "Tasks", &s.csrf, ""))
}

/// `GET /task/{id}`: one task; 404 for a task the store does not have.
pub(super) async fn task(
    State(hub): State<Arc<Hub>>,
    Extension(s): Extension<Session>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    match hub.engine().views().status(&id) {
        Ok(_) => html(StatusCode::OK, shell("task", &esc(&id), &s.csrf, &format!("data-task=\"{}\"", esc(&id)))),
        Err(e @ crate::error::Error::NotFound(_)) => refusal(StatusCode::NOT_FOUND, &e.to_string(), false),
        Err(e) => refusal(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), false),
    }
}

/// `GET /agents`: agents and roles.
pub(super) async fn agents(Extension(s): Extension<Session>) -> Response {
    html(StatusCode::OK, shell("agents", "Agents & roles", &s.csrf, ""))
}

/// `GET /health`: what doctor says.
pub(super) async fn health(Extension(s): Extension<Session>) -> Response {
    html(StatusCode::OK, shell("health", "Health", &s.csrf, ""))
}

/// `GET /groups`: fan-out groups side by side.
pub(super) async fn groups(Extension(s): Extension<Session>) -> Response {
    html(StatusCode::OK, shell("groups", "Groups", &s.csrf, ""))
}

/// `GET /budgets`: each budgeted task's limits against its use.
pub(super) async fn budgets(Extension(s): Extension<Session>) -> Response {
    html(StatusCode::OK, shell("budgets", "Budgets", &s.csrf, ""))
}

/// `GET /radar`: the conflict radar.
pub(super) async fn radar(Extension(s): Extension<Session>) -> Response {
    html(StatusCode::OK, shell("radar", "Conflict radar", &s.csrf, ""))
}

/// `GET /assets/{name}`: the embedded scripts and style sheet.
pub(super) async fn asset(UrlPath(name): UrlPath<String>) -> Response {
    let (body, kind) = match SCRIPTS.iter().find(|(n, _)| *n == name) {
        Some((_, body)) => (*body, "text/javascript; charset=utf-8"),
        None if name == "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        None => return refusal(StatusCode::NOT_FOUND, &format!("no asset `{name}`"), true),
    };
    (StatusCode::OK, [(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

//! The HTTP half of serving MCP 2025-11-25's experimental tasks: the same
//! JSON rewriting the stdio server does ([`caesar_mcp::legacy_wire`]),
//! around rmcp's streamable HTTP service. A request body is rewritten
//! before rmcp parses it; a plain-JSON answer that needs a patch (the
//! `initialize` capability, `caesar_delegate`'s `taskSupport`) is patched
//! after; a renamed request's `Mcp-Method` header follows its body (a
//! 2026-07-28 `subscriptions/listen` naming tasks, [`caesar_mcp::task_listen`]).
//! Bodies that are not JSON, or too big, pass untouched.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use caesar_mcp::legacy_wire;
use serde_json::Value;

/// The largest body rewritten; bigger ones pass as they are.
const MAX_BODY: usize = 4 << 20;

/// The middleware.
pub async fn rewrite(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return Response::builder()
            .status(axum::http::StatusCode::PAYLOAD_TOO_LARGE)
            .body(Body::from(format!("the request body is over {MAX_BODY} bytes\n")))
            .unwrap_or_default();
    };
    let mut renamed = None;
    let (bytes, mut pending) = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut v) => {
            let before = v.get("method").cloned();
            let patches = legacy_wire::inbound(&mut v);
            if v.get("method") != before.as_ref() {
                renamed = v["method"].as_str().map(str::to_owned);
            }
            (axum::body::Bytes::from(v.to_string()), patches)
        }
        Err(_) => (bytes, Vec::new()),
    };
    let mut parts = parts;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    // A renamed request keeps its `Mcp-Method` header in step with its body,
    // which rmcp checks under 2026-07-28.
    if let Some(m) = renamed.and_then(|m| axum::http::HeaderValue::from_str(&m).ok())
        && parts.headers.contains_key("mcp-method")
    {
        parts.headers.insert("mcp-method", m);
    }
    let res = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    if pending.is_empty() {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let out = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut v) => {
            legacy_wire::outbound_by_id(&mut v, &mut pending);
            axum::body::Bytes::from(v.to_string())
        }
        Err(_) => bytes,
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

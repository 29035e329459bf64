//! What a read-only HTTP token may do (issue 19): the server decides, not
//! the client's `?profile=`.
//!
//! A request carrying the read-only token (`http.readonly.token`, shown
//! and rotated by `caesar mcp token --readonly`) is served the `readonly`
//! profile whatever it asks for: an explicit other profile, or a `?tools=`
//! outside it, is refused with 403 naming the token and the fix; the query
//! the MCP server sees is rewritten to `profile=readonly`, so its tool list
//! and its `tools/call` check hold that profile; and the JSON-RPC body is
//! read (bounded) and only methods that change nothing pass: `tools/call`
//! of a read-only tool, reading tasks (`tasks/get`, `tasks/list`,
//! `tasks/result`, subscriptions), never `tasks/cancel` or `tasks/update`
//! (which answers a task's questions), which bypass the tool list.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The largest body checked; a bigger one is refused (the MCP layer
/// behind refuses bodies past the same size).
const MAX_BODY: usize = 4 << 20;

/// JSON-RPC methods a read-only token may call, besides notifications and
/// `tools/call` of a read-only tool.
const READ_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "subscriptions/listen",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// The 403 a read-only token gets, saying which token and what to do.
fn refuse(what: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        format!(
            "forbidden: this is the read-only token, which grants only the readonly profile; {what}. Use the full \
             token (`caesar mcp token`) for that, or stay within the readonly profile (`caesar mcp token --readonly`)\n"
        ),
    )
        .into_response()
}

/// Confines a request made with the read-only token to the `readonly`
/// profile, or refuses it.
pub async fn confine(req: Request) -> Result<Request, Response> {
    let (mut parts, body) = req.into_parts();
    parts.uri = readonly_uri(&parts.uri).map_err(|why| refuse(&why))?;
    if parts.method != Method::POST {
        return Ok(Request::from_parts(parts, body));
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return Err(
            (StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {MAX_BODY} bytes\n")).into_response()
        );
    };
    // Not JSON: the MCP layer answers it as a parse error, calling nothing.
    if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
        let messages = match &v {
            Value::Array(all) => all.iter().collect(),
            one => vec![one],
        };
        for m in messages {
            check_message(m).map_err(|why| refuse(&why))?;
        }
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The URI with `profile=readonly` in place of any profile asked for;
/// refuses (saying why) another profile, or tools outside it.
fn readonly_uri(uri: &Uri) -> Result<Uri, String> {
    let query = uri.query().unwrap_or("");
    let (profile, tools) = caesar_mcp::roots::scope_of(query);
    let asked = query.split('&').any(|kv| kv.starts_with("profile="));
    if asked && profile != "readonly" {
        return Err(format!("it asked for the `{profile}` profile: connect with `?profile=readonly` or no profile"));
    }
    caesar_mcp::tools::select("readonly", tools.as_deref())?;
    let mut kept: Vec<&str> = query.split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("profile=")).collect();
    kept.push("profile=readonly");
    let path_and_query = format!("{}?{}", uri.path(), kept.join("&"));
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().map_err(|_| "its query cannot be read".to_owned())?);
    Uri::from_parts(parts).map_err(|_| "its query cannot be read".to_owned())
}

/// Refuses (saying why) one JSON-RPC message a read-only token may not send.
fn check_message(m: &Value) -> Result<(), String> {
    // A response (to a request of the server's) or something without a
    // method calls nothing.
    let Some(method) = m.get("method").and_then(Value::as_str) else { return Ok(()) };
    if method.starts_with("notifications/") || READ_METHODS.contains(&method) {
        return Ok(());
    }
    if method == "tools/call" {
        let tool = m.pointer("/params/name").and_then(Value::as_str).unwrap_or("");
        if caesar_mcp::tools::READONLY.contains(&tool) {
            return Ok(());
        }
        return Err(format!(
            "`{tool}` is not a read-only tool (those are: {})",
            caesar_mcp::tools::READONLY.join(", ")
        ));
    }
    Err(format!("`{method}` is not a read-only call"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(q: &str) -> Result<String, String> {
        let u: Uri = format!("/mcp{q}").parse().unwrap();
        readonly_uri(&u).map(|u| u.to_string())
    }

    #[test]
    fn the_profile_is_readonly_whatever_the_query_says() {
        assert_eq!(uri("").unwrap(), "/mcp?profile=readonly");
        assert_eq!(uri("?profile=readonly").unwrap(), "/mcp?profile=readonly");
        assert_eq!(uri("?tools=caesar_status&x=1").unwrap(), "/mcp?tools=caesar_status&x=1&profile=readonly");
        assert!(uri("?profile=full").unwrap_err().contains("the `full` profile"));
        assert!(uri("?profile=readonly&profile=full").unwrap_err().contains("the `full` profile"));
        assert!(uri("?tools=caesar_cancel").unwrap_err().contains("caesar_cancel"));
    }

    #[test]
    fn only_calls_that_change_nothing_pass() {
        let ok = |v: Value| check_message(&v).is_ok();
        assert!(ok(serde_json::json!({"method": "initialize"})));
        assert!(ok(serde_json::json!({"method": "notifications/initialized"})));
        assert!(ok(serde_json::json!({"method": "tools/call", "params": {"name": "caesar_status"}})));
        assert!(ok(serde_json::json!({"id": 3, "result": {}})));
        assert!(!ok(serde_json::json!({"method": "tools/call", "params": {"name": "caesar_delegate"}})));
        assert!(!ok(serde_json::json!({"method": "tools/call", "params": {}})));
        assert!(!ok(serde_json::json!({"method": "tasks/cancel", "params": {"taskId": "t_1"}})));
        assert!(!ok(serde_json::json!({"method": "tasks/update"})));
    }
}

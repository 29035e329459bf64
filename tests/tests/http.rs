//! MCP over streamable HTTP, served by caesard: a real MCP client (the
//! Python SDK) over HTTP, and the guards in front of it: bearer auth with a
//! challenge, the Host check, scoping errors and the rate limit.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;

use caesar_proto::pb;
use common::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One raw HTTP/1.1 POST of an MCP initialize; returns the status line and headers.
fn post(port: u16, path: &str, host: &str, token: Option<&str>) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// One raw HTTP/1.1 POST of a JSON-RPC `body`; returns the whole response.
fn post_body(port: u16, host: &str, token: &str, body: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[tokio::test]
async fn mcp_over_http_with_auth_host_check_scoping_and_rate_limit() {
    let mut env = Env::new(&[("writer", &["report", "success", "over http"])]);
    let port = free_port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(
        env.home.path().join("config/config.toml"),
        format!("[http]\nlisten = \"127.0.0.1:{port}\"\nrate_limit_per_minute = 40\n"),
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let t = c.http_token(pb::HttpTokenRequest { rotate: false }).await.unwrap().into_inner();
    assert_eq!(t.url, format!("http://127.0.0.1:{port}/mcp"));
    let mode = std::fs::metadata(env.paths.state_dir.join("http.token")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    let host = format!("127.0.0.1:{port}");
    assert!(eventually(std::time::Duration::from_secs(10), || TcpStream::connect(("127.0.0.1", port)).is_ok()).await);

    let r = post(port, "/mcp", &host, None);
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    assert!(r.to_lowercase().contains("www-authenticate: bearer"), "{r}");
    assert!(post(port, "/mcp", &host, Some("wrong")).starts_with("HTTP/1.1 401"));
    let r = post(port, "/mcp", "evil.example", Some(&t.token));
    assert!(r.starts_with("HTTP/1.1 403"), "DNS rebinding: {r}");
    let r = post(port, "/mcp?tools=caesar_nope", &host, Some(&t.token));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("caesar_nope"), "{r}");
    let r = post(port, "/mcp", &host, Some(&t.token));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("\"protocolVersion\":\"2025-06-18\""), "{r}");

    // A real MCP client over HTTP.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/mcp_http_test.py");
    let out = tokio::process::Command::new("python3")
        .arg(&script)
        .env("CAESAR_TEST_URL", &t.url)
        .env("CAESAR_TEST_TOKEN", &t.token)
        .env("CAESAR_TEST_WORKSPACE", env.workspace())
        .env("CAESAR_TEST_AGENT", "writer")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("python http client: ok"));

    // Over HTTP there are no MCP roots and the daemon's working directory is
    // nobody's project: a delegation without a workspace is refused.
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"caesar_delegate","arguments":{"objective":"where am I","agent":"writer"}}}"#;
    let r = post_body(port, &host, &t.token, call);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains(r#""isError":true"#) && r.contains("validation_error: `workspace` is required"), "{r}");

    // doctor reports the endpoint.
    let o = env.caesar(&["--json", "doctor"]);
    let d = json(String::from_utf8_lossy(&o.stdout).trim());
    assert_eq!(d["http"]["url"], t.url.as_str());
    // Where the daemon's environment came from: who started it, and caesar's variables.
    let origin = d["environment"].as_str().unwrap_or_default();
    assert!(origin.starts_with("started by ") && origin.contains("CAESAR_HOME set"), "{origin}");
    assert_eq!(d["http"]["listening"], true);

    // Rotating the token: the old one stops working at once.
    let rotated = c.http_token(pb::HttpTokenRequest { rotate: true }).await.unwrap().into_inner();
    assert_ne!(rotated.token, t.token);
    assert!(post(port, "/mcp", &host, Some(&t.token)).starts_with("HTTP/1.1 401"));

    // The rate limit: 40 a minute per token.
    let mut statuses = Vec::new();
    for _ in 0..45 {
        statuses.push(post(port, "/mcp", &host, Some(&rotated.token))[9..12].to_owned());
    }
    assert!(statuses.iter().any(|s| s == "429"), "{statuses:?}");

    // Failed authentications are rate-limited too (issue 19): 30 a minute
    // answered 401, then 429 without a challenge.
    let failures: Vec<String> = (0..35).map(|_| post(port, "/mcp", &host, Some("guess"))).collect();
    let first: Vec<&str> = failures.iter().map(|r| &r[9..12]).collect();
    assert!(first.iter().filter(|s| **s == "401").count() <= 30, "{first:?}");
    let limited = failures.iter().find(|r| r.starts_with("HTTP/1.1 429")).expect("a 429 among the failures");
    assert!(limited.contains("too many failed authentications"), "{limited}");
}

#[tokio::test]
async fn a_non_loopback_listen_address_is_refused() {
    let env = Env::new(&[]);
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), "[http]\nlisten = \"0.0.0.0:7077\"\n").unwrap();
    let o = env.caesar(&["--json", "doctor"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("not a loopback address"), "{out}");
}

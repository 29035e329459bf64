//! A caesar-mcp process spoken to as raw JSON-RPC lines under MCP
//! 2026-07-28 (every request with its own `_meta`), shared by
//! mcp_revisions.rs and mcp_tasks.rs.

#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::common::*;

mod http;
// Not every test binary that includes this module streams HTTP.
#[allow(unused_imports)]
pub use http::Streamed;

/// The revision spoken.
pub const REVISION: &str = "2026-07-28";
/// The most one step may take.
pub const LIMIT: Duration = Duration::from_secs(40);

/// A caesar-mcp process spoken to line by line.
pub struct Raw {
    pub child: Child,
    pub stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Notifications seen while waiting for responses.
    pub notifications: Vec<Value>,
    /// The client capabilities every request declares.
    pub capabilities: Value,
}

impl Raw {
    pub fn spawn(env: &Env, extra: &[(&str, &str)]) -> Raw {
        let shim = bin_dir().join("caesar-mcp");
        assert!(shim.is_file(), "{} is missing: build the workspace", shim.display());
        let log = std::fs::File::create(env.file("shim-raw.log")).unwrap();
        // No --root, and no roots to ask for: the working directory is the workspace.
        let mut child = tokio::process::Command::new(shim)
            .current_dir(env.project.path())
            .envs(env.envs())
            .envs(extra.iter().copied())
            .env("CAESAR_MCP_LOG", "debug,h2=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Raw { child, stdin, lines, next_id: 1, notifications: Vec::new(), capabilities: json!({}) }
    }

    /// Sends `method` with `params` plus the revision's per-request `_meta`,
    /// and returns its response (notifications before it are kept).
    pub async fn request(&mut self, method: &str, mut params: Value, meta: Value) -> Value {
        let mut m = json!({
            "io.modelcontextprotocol/protocolVersion": REVISION,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities.clone(),
            "io.modelcontextprotocol/clientInfo": {"name": "caesar-tests", "version": "0"},
        });
        if let (Some(m), Some(extra)) = (m.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        params["_meta"] = m;
        self.send(method, params).await
    }

    pub async fn send(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        loop {
            let line = tokio::time::timeout(LIMIT, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} in {LIMIT:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("caesar-mcp closed stdout before answering {method}"));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if v["id"] == json!(id) {
                return v;
            }
            assert!(v.get("id").is_none() || v.get("method").is_some(), "an answer to another request: {v}");
            self.notifications.push(v);
        }
    }

    /// Writes one JSON-RPC message (a request whose answer is read with
    /// [`Raw::next_message`], or a response to the server's request).
    pub async fn write(&mut self, message: Value) {
        self.stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The next message the server writes, whatever it is.
    pub async fn next_message(&mut self) -> Value {
        let line = tokio::time::timeout(LIMIT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no message in {LIMIT:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("caesar-mcp closed stdout"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// A tool call in a session opened with `initialize` (no per-request `_meta`).
    pub async fn call_legacy(&mut self, tool: &str, args: Value) -> Value {
        let r = self.send("tools/call", json!({"name": tool, "arguments": args})).await;
        assert!(r.get("error").is_none(), "{tool}: protocol error {r}");
        r["result"].clone()
    }

    pub async fn call(&mut self, tool: &str, args: Value, meta: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}), meta).await;
        assert!(r.get("error").is_none(), "{tool}: protocol error {r}");
        r["result"].clone()
    }
}

/// A successful tool result's structuredContent.
pub fn ok(r: &Value) -> Value {
    assert_ne!(r["isError"], json!(true), "tool failed: {r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert_eq!(json(text), r["structuredContent"], "the text block carries the same JSON");
    r["structuredContent"].clone()
}

/// A failed tool result's `code: message`, checked for the code.
pub fn err(r: &Value, code: &str) -> String {
    assert_eq!(r["isError"], json!(true), "expected {code}: {r}");
    let text = r["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(text.starts_with(&format!("{code}: ")), "expected `{code}: ...`: {text}");
    text
}

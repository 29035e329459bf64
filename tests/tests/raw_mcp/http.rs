//! One raw HTTP/1.1 POST to the daemon's MCP endpoint whose response is
//! read as it arrives: a test can act on a notification (answer the
//! question it announces) while the same response stream is still open.

use std::io::{BufRead, BufReader, Read, Write};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::LIMIT;

/// The JSON-RPC messages of one response, in order, as they arrive.
pub struct Streamed {
    rx: UnboundedReceiver<Value>,
}

impl Streamed {
    /// POSTs `body` (a JSON-RPC message) to `/mcp` on 127.0.0.1:`port` with
    /// `headers` (each line ending in `\r\n`) and reads the answer on a thread.
    pub fn post(port: u16, headers: &str, body: String) -> Streamed {
        let (tx, rx) = unbounded_channel();
        let headers = headers.to_owned();
        std::thread::spawn(move || read_response(port, &headers, &body, &tx));
        Streamed { rx }
    }

    /// The next message; `None` once the response has ended.
    pub async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(LIMIT, self.rx.recv()).await.unwrap_or_else(|_| panic!("no message in {LIMIT:?}"))
    }
}

fn read_response(port: u16, headers: &str, body: &str, tx: &UnboundedSender<Value>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        chunked |= line.starts_with("transfer-encoding:") && line.contains("chunked");
    }
    let mut text: Vec<u8> = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).unwrap_or(0) == 0 {
                break;
            }
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or_default(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            if r.read_exact(&mut chunk).is_err() {
                break;
            }
            text.extend_from_slice(&chunk[..n]);
            emit_lines(&mut text, tx);
        }
    } else {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = r.read(&mut buf) {
            text.extend_from_slice(&buf[..n]);
            emit_lines(&mut text, tx);
        }
    }
    text.push(b'\n');
    emit_lines(&mut text, tx);
}

/// Sends each complete line of `text` that is a JSON-RPC message (plain or
/// an SSE `data:` line), keeping the incomplete rest.
fn emit_lines(text: &mut Vec<u8>, tx: &UnboundedSender<Value>) {
    while let Some(i) = text.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = text.drain(..=i).collect();
        let line = String::from_utf8_lossy(&line);
        let line = line.trim();
        let line = line.strip_prefix("data:").unwrap_or(line).trim();
        if let Ok(v) = serde_json::from_str::<Value>(line)
            && v.get("jsonrpc").is_some()
        {
            let _ = tx.send(v);
        }
    }
}

//! A small W3C WebDriver client over a blocking HTTP/1.1 connection to a
//! local chromedriver, driving Debian's headless Chromium. Written here
//! rather than taken from a crate (fantoccini, thirtyfour) because the tests
//! need a dozen commands, and those crates would add an HTTP client stack
//! and its build to a 2-core machine for them.

// Two test binaries (`dashboard`, `dashboard_board`) include it, each using part.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One blocking HTTP/1.1 request to 127.0.0.1:`port`; the status and the body.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("send");
    // Read the head, then exactly Content-Length bytes (chromedriver keeps the
    // connection open whatever the request says), or to the end.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break raw.len(),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let lower = head.to_ascii_lowercase();
    let length =
        lower.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
    loop {
        if length.is_some_and(|n| raw.len() >= head_end + n) {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let rest = String::from_utf8_lossy(&raw[head_end.min(raw.len())..]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = if lower.contains("transfer-encoding: chunked") { dechunk(&rest) } else { rest };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A headless Chromium behind its chromedriver; both stop on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a fresh headless Chromium session.
    pub fn start() -> Browser {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: install Debian's chromium and chromium-driver (`apt-get install -y chromium chromium-driver`; .ci/run does it when missing)"
            );
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().expect("profile");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}});
        let (status, body) = http(port, "POST", "/session", &[("Content-Type", "application/json")], &caps.to_string());
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let session =
            v["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session ({status}): {body}")).to_owned();
        Browser { driver, port, session, _profile: profile }
    }

    fn cmd(&self, method: &str, what: &str, body: Value) -> Value {
        let path = format!("/session/{}{what}", self.session);
        if std::env::var_os("DASH_DEBUG").is_some() {
            eprintln!("webdriver {method} {what}");
        }
        let (status, text) = http(self.port, method, &path, &[("Content-Type", "application/json")], &body.to_string());
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("webdriver {what}: {status} {text}"));
        assert!(status == 200, "webdriver {method} {what}: {status} {v}");
        v["value"].clone()
    }

    /// Navigates and waits for the load.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url }));
    }

    pub fn url(&self) -> String {
        self.cmd("GET", "/url", json!({})).as_str().unwrap_or_default().to_owned()
    }

    /// Runs `script` (a function body) in the page with `args`.
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.cmd("POST", "/execute/sync", json!({ "script": script, "args": args }))
    }

    /// Runs an async `script` whose last argument is the callback.
    pub fn js_async(&self, script: &str, args: Value) -> Value {
        self.cmd("POST", "/execute/async", json!({ "script": script, "args": args }))
    }

    /// The element for `css`, or a panic naming it.
    pub fn find(&self, css: &str) -> String {
        let v = self.cmd("POST", "/element", json!({ "using": "css selector", "value": css }));
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no {css}"))
            .to_owned()
    }

    pub fn click(&self, css: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/click"), json!({}));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/value"), json!({ "text": text }));
    }

    /// The page's text.
    pub fn text(&self) -> String {
        self.js("return document.body.innerText", json!([])).as_str().unwrap_or_default().to_owned()
    }

    /// Every cookie the browser holds for the page, HttpOnly ones too.
    pub fn cookies(&self) -> Value {
        self.cmd("GET", "/cookie", json!({}))
    }

    /// Waits until `script` returns a truthy value; returns it.
    pub fn wait(&self, what: &str, limit: Duration, script: &str, args: Value) -> Value {
        let start = Instant::now();
        loop {
            let v = self.js(script, args.clone());
            if !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0)) {
                return v;
            }
            assert!(start.elapsed() < limit, "timed out waiting for {what}; page text:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Saves a PNG of the viewport under target/dashboard-shots/.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let b64 = self.cmd("GET", "/screenshot", json!({}));
        let bytes = base64_decode(b64.as_str().unwrap_or_default());
        let dir = shots_dir();
        std::fs::create_dir_all(&dir).expect("shots dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes).expect("write screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(self.port, "DELETE", &format!("/session/{}", self.session), &[], "");
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where the screenshots go: `<target>/dashboard-shots`.
pub fn shots_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").join("dashboard-shots")
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter_map(val) {
        acc = (acc << 6) | c as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

//! Notifications (issue 17): `[notify]` webhooks (a small JSON POST) and a
//! command hook, on a task's or group's finish, question, blocker and budget.
//!
//! Read from the global config layer only: a cloned repository's committed
//! config must not make the daemon post task summaries somewhere or run a
//! command. Delivery happens on tasks of its own, retried with a growing
//! pause, and never blocks the engine: [`Notifier::notify`] only queues. The
//! last outcome of each endpoint is kept for `caesar doctor`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{info, warn};

use crate::clock::now_ms;

/// The events a notification is sent for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyEvent {
    /// A task (or a whole group) ended.
    Finish,
    /// A task asks the orchestrator a question (or a permission).
    Question,
    /// A task hit a blocker (auth, rate limit, network, permission).
    Blocker,
    /// A task reached a budget limit.
    Budget,
    /// A task was parked at a quota until it lifts (issue 17, item 3).
    Parked,
}

impl NotifyEvent {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Finish => "finish",
            NotifyEvent::Question => "question",
            NotifyEvent::Blocker => "blocker",
            NotifyEvent::Budget => "budget",
            NotifyEvent::Parked => "parked",
        }
    }
}

/// `[notify]` as written in a config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNotify {
    webhooks: Option<Vec<String>>,
    command: Option<Vec<String>>,
    events: Option<Vec<NotifyEvent>>,
}

/// `[notify]`, merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NotifyConfig {
    /// `http://` or `https://` URLs, each POSTed the notification's JSON.
    pub webhooks: Vec<String>,
    /// A command (argv, no shell) run with the notification's JSON on stdin.
    pub command: Vec<String>,
    /// Which events are sent; empty for all.
    pub events: Vec<NotifyEvent>,
}

impl NotifyConfig {
    /// Merges a layer's `[notify]`, lists replaced whole. On a bad value,
    /// the key and why it is refused.
    pub fn merge(&mut self, raw: RawNotify) -> Result<(), (&'static str, String)> {
        if let Some(hooks) = raw.webhooks {
            for url in &hooks {
                parse_url(url).map_err(|why| ("webhooks", format!("entry `{url}` {why}")))?;
            }
            self.webhooks = hooks;
        }
        if let Some(command) = raw.command {
            if command.first().is_none_or(|p| p.trim().is_empty()) {
                return Err((
                    "command",
                    "is empty or starts with an empty program: give an argv such as [\"notify-send\", \"caesar\"], or remove the key".to_owned(),
                ));
            }
            self.command = command;
        }
        if let Some(events) = raw.events {
            self.events = events;
        }
        Ok(())
    }

    /// Whether anything is configured at all.
    pub fn is_empty(&self) -> bool {
        self.webhooks.is_empty() && self.command.is_empty()
    }

    fn wants(&self, event: NotifyEvent) -> bool {
        self.events.is_empty() || self.events.contains(&event)
    }
}

/// A webhook URL, split.
#[derive(Debug, Clone, PartialEq)]
struct Url {
    tls: bool,
    host: String,
    port: u16,
    path: String,
}

fn parse_url(url: &str) -> Result<Url, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err("is not an http(s) URL: write it as http://host[:port]/path or https://…".to_owned());
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') || authority.chars().any(char::is_whitespace) {
        return Err("has no valid host: write it as http://host[:port]/path (no credentials in the URL)".to_owned());
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("has spaces or control characters in its path: percent-encode them".to_owned());
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            let port = p.parse::<u16>().map_err(|_| format!("has a bad port `{p}`: use a number up to 65535"))?;
            (h.trim_matches(|c| c == '[' || c == ']').to_owned(), port)
        }
        _ => (authority.to_owned(), if tls { 443 } else { 80 }),
    };
    Ok(Url { tls, host, port, path: path.to_owned() })
}

/// One notification, as posted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notification {
    /// The task, when the event is a task's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The group, when the task is in one or the event is the group's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    pub event: NotifyEvent,
    /// The task's status (or the group's), as `caesar_status` names it.
    pub status: String,
    /// What became of the task, as every face shows it first (issue 30):
    /// `succeeded`, `blocked: auth`, `needs answer`, …; none for a group's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// A short summary (at most 500 characters).
    pub summary: String,
    /// When it happened, milliseconds since the epoch.
    pub at_ms: i64,
}

/// How one endpoint fared last.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointState {
    pub ok: bool,
    pub last_error: String,
    pub at_ms: i64,
    pub delivered: u64,
    pub failed: u64,
}

impl EndpointState {
    /// An endpoint nothing has been sent to yet: fine until it fails.
    fn fresh() -> EndpointState {
        EndpointState { ok: true, last_error: String::new(), at_ms: 0, delivered: 0, failed: 0 }
    }
}

/// Delivers notifications in the background and keeps each endpoint's state.
#[derive(Debug, Default)]
pub struct Notifier {
    endpoints: Mutex<BTreeMap<String, EndpointState>>,
}

/// How many times a delivery is tried.
pub const ATTEMPTS: u32 = 5;

fn backoff_base() -> Duration {
    Duration::from_millis(std::env::var("CAESAR_NOTIFY_BACKOFF_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000))
}

impl Notifier {
    /// Queues `n` to every endpoint of `config` that wants its event. Returns
    /// at once; without a Tokio runtime nothing is sent.
    pub fn notify(self: &std::sync::Arc<Self>, config: &NotifyConfig, mut n: Notification) {
        if config.is_empty() || !config.wants(n.event) {
            return;
        }
        n.summary = crate::report::tail_chars(&n.summary, 500);
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let body = serde_json::to_string(&n).unwrap_or_default();
        for url in &config.webhooks {
            let (me, url, body) = (self.clone(), url.clone(), body.clone());
            handle.spawn(
                async move { me.deliver(&url, &body, |u, b| Box::pin(async move { post(&u, &b).await })).await },
            );
        }
        if !config.command.is_empty() {
            let (me, argv, body) = (self.clone(), config.command.clone(), body.clone());
            let key = format!("command `{}`", argv.join(" "));
            handle.spawn(async move {
                me.deliver(&key, &body, move |_, b| {
                    let argv = argv.clone();
                    Box::pin(async move { run_hook(&argv, &b).await })
                })
                .await
            });
        }
    }

    async fn deliver<F>(&self, endpoint: &str, body: &str, send: F)
    where
        F: Fn(String, String) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>,
    {
        let mut pause = backoff_base();
        for attempt in 1..=ATTEMPTS {
            match send(endpoint.to_owned(), body.to_owned()).await {
                Ok(()) => {
                    self.record(endpoint, Ok(()));
                    info!(endpoint, attempt, "notification delivered");
                    return;
                }
                Err(e) => {
                    warn!(endpoint, attempt, "notification not delivered: {e}");
                    if attempt == ATTEMPTS {
                        self.record(endpoint, Err(format!("{e} (after {ATTEMPTS} attempts)")));
                        return;
                    }
                    self.mark_trouble(endpoint, &e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(60));
                }
            }
        }
    }

    fn mark_trouble(&self, endpoint: &str, error: &str) {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(endpoint.to_owned()).or_insert_with(EndpointState::fresh);
        e.last_error = format!("{error} (retrying)");
        e.at_ms = now_ms();
    }

    fn record(&self, endpoint: &str, outcome: Result<(), String>) {
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(endpoint.to_owned()).or_insert_with(EndpointState::fresh);
        e.at_ms = now_ms();
        match outcome {
            Ok(()) => {
                e.ok = true;
                e.delivered += 1;
                e.last_error.clear();
            }
            Err(err) => {
                e.ok = false;
                e.failed += 1;
                e.last_error = err;
            }
        }
    }

    /// Each endpoint's last outcome.
    pub fn endpoints(&self) -> BTreeMap<String, EndpointState> {
        self.endpoints.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// One line per endpoint whose last delivery failed, for `caesar doctor`.
    pub fn problems(&self) -> Vec<String> {
        self.endpoints()
            .into_iter()
            .filter(|(_, s)| !s.ok)
            .map(|(endpoint, s)| {
                format!(
                    "notification endpoint {endpoint} is failing: {} ({} delivered, {} failed). Check the [notify] section of the global config",
                    s.last_error, s.delivered, s.failed
                )
            })
            .collect()
    }
}

/// POSTs `body` to an http URL (HTTP/1.1, `Connection: close`, 10 s); an
/// https URL goes through `curl`, since the daemon links no TLS stack.
async fn post(url: &str, body: &str) -> Result<(), String> {
    let u = parse_url(url)?;
    if u.tls {
        return post_with_curl(url, body).await;
    }
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((u.host.as_str(), u.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", u.host, u.port))?;
        let host = if u.port == 80 { u.host.clone() } else { format!("{}:{}", u.host, u.port) };
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nUser-Agent: caesard/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            u.path,
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        stream.write_all(head.as_bytes()).await.map_err(|e| format!("cannot send: {e}"))?;
        stream.write_all(body.as_bytes()).await.map_err(|e| format!("cannot send: {e}"))?;
        let mut reply = vec![0u8; 256];
        let mut got = 0;
        while got < reply.len() && !reply[..got].contains(&b'\n') {
            let n = stream.read(&mut reply[got..]).await.map_err(|e| format!("no answer: {e}"))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let line = String::from_utf8_lossy(&reply[..got]);
        let code = line.split_whitespace().nth(1).and_then(|c| c.parse::<u16>().ok());
        match code {
            Some(c) if (200..300).contains(&c) => Ok(()),
            Some(c) => Err(format!("HTTP {c}")),
            None => Err("no HTTP answer".to_owned()),
        }
    };
    tokio::time::timeout(Duration::from_secs(10), exchange).await.map_err(|_| "no answer in 10 s".to_owned())?
}

async fn post_with_curl(url: &str, body: &str) -> Result<(), String> {
    let Some(curl) = crate::agents::resolve_bin("curl") else {
        return Err("https webhooks need `curl` on the daemon's PATH".to_owned());
    };
    let argv = vec![
        curl.display().to_string(),
        "-sS".to_owned(),
        "-f".to_owned(),
        "-m".to_owned(),
        "10".to_owned(),
        "-H".to_owned(),
        "Content-Type: application/json".to_owned(),
        "--data-binary".to_owned(),
        "@-".to_owned(),
        "--".to_owned(),
        url.to_owned(),
    ];
    run_hook(&argv, body).await
}

/// Runs a command with `body` on stdin (20 s at most); success is exit 0.
async fn run_hook(argv: &[String], body: &str) -> Result<(), String> {
    let Some((program, args)) = argv.split_first() else { return Err("empty command".to_owned()) };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(body.as_bytes()).await;
    }
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .map_err(|_| format!("`{program}` did not end in 20 s"))?
        .map_err(|e| format!("`{program}`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!("`{program}` exited {}: {}", out.status, crate::report::tail_chars(err.trim(), 200)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_http_or_https_with_a_host() {
        assert_eq!(
            parse_url("http://127.0.0.1:9000/hook").unwrap(),
            Url { tls: false, host: "127.0.0.1".into(), port: 9000, path: "/hook".into() }
        );
        assert_eq!(parse_url("https://example.com").unwrap().port, 443);
        assert!(parse_url("ftp://example.com/x").unwrap_err().contains("not an http(s) URL"));
        assert!(parse_url("file:///etc/passwd").is_err());
        assert!(parse_url("http://").is_err());
        assert!(parse_url("http://u:p@host/").is_err());
        assert!(parse_url("http://host:99999/").is_err());
    }

    #[test]
    fn merge_names_the_key() {
        let mut c = NotifyConfig::default();
        let raw: RawNotify = toml::from_str("webhooks = [\"gopher://x\"]").unwrap();
        assert_eq!(c.merge(raw).unwrap_err().0, "webhooks");
        let raw: RawNotify = toml::from_str("command = []").unwrap();
        assert_eq!(c.merge(raw).unwrap_err().0, "command");
        let raw: RawNotify = toml::from_str("webhooks = [\"http://127.0.0.1:1/\"]\nevents = [\"finish\"]").unwrap();
        c.merge(raw).unwrap();
        assert!(c.wants(NotifyEvent::Finish) && !c.wants(NotifyEvent::Question));
    }
}

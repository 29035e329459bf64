//! A strict Kubernetes API simulator for testing caesar's Kubernetes runner
//! without a cluster (no kube-apiserver can be installed here). It serves,
//! on 127.0.0.1 over plain HTTP, the subset of the API the runner uses —
//! Jobs and Pods (create, get, list by label selector, watch, delete with
//! propagation), namespaces, pod logs with follow/timestamps/sinceTime,
//! server-side dry runs, RBAC refusals — and a "process kubelet" that runs
//! each pod's container command as a local process. The daemon reaches it
//! through an ordinary kubeconfig, so its client path is the production one.
//!
//! It is written from the API's documented behaviour, not from the client's
//! types: objects are JSON, checked against [`validate`]'s schema subset.

pub mod api;
pub mod exec;
pub mod kubelet;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// What the simulator is told at start.
#[derive(Debug, Clone, Default)]
pub struct SimConfig {
    /// Namespaces that exist.
    pub namespaces: BTreeSet<String>,
    /// `verb:resource` pairs RBAC refuses (`create:jobs`).
    pub forbidden: BTreeSet<String>,
    /// Where pods' directories go.
    pub state_dir: PathBuf,
    /// The PATH a container gets: what "the image" holds.
    pub path: String,
    /// Secrets: name → key → value.
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// Lines longer than this are split into several log records, as
    /// containerd does at 16 KiB.
    pub split_at: usize,
    /// The light kubelet (`--kubelet light`, for the 500-task figure): a
    /// pod runs no process; the kubelet writes the framed output of an agent
    /// that says `agent-up` and waits for the file its `wait-file` argument
    /// names, then ends it, so the daemon's side (watch, log streams,
    /// mirrors, monitors) is measured without 1,500 local processes.
    pub light: bool,
}

/// One log record of a container: its time and its bytes (a whole line
/// with its newline, or a part of a long one).
#[derive(Debug, Clone)]
pub struct Record {
    pub ts: String,
    pub nanos: i128,
    pub data: Vec<u8>,
}

/// A container's log.
#[derive(Debug, Default)]
pub struct LogBuf {
    pub records: Mutex<Vec<Record>>,
    pub done: std::sync::atomic::AtomicBool,
    pub notify: tokio::sync::Notify,
}

/// A change, for watchers: resource ("jobs"/"pods"), namespace, type, object.
#[derive(Debug, Clone)]
pub struct Change {
    pub resource: &'static str,
    pub namespace: String,
    pub kind: &'static str,
    pub object: Value,
    pub rv: u64,
}

/// The objects.
#[derive(Debug, Default)]
pub struct State {
    pub rv: u64,
    pub jobs: BTreeMap<(String, String), Value>,
    pub pods: BTreeMap<(String, String), Value>,
    pub history: Vec<Change>,
}

/// The simulator.
pub struct Sim {
    pub cfg: SimConfig,
    pub state: Mutex<State>,
    pub changes: tokio::sync::broadcast::Sender<Change>,
    pub logs: Mutex<HashMap<(String, String), Arc<LogBuf>>>,
    /// Pod processes: (ns, pod) → process group id.
    pub procs: Mutex<HashMap<(String, String), Vec<i32>>>,
    /// Bumped to cut every open log stream.
    pub log_generation: AtomicU64,
    /// Bumped to cut every open `pods/exec` stream, as an API server restart does.
    pub exec_cuts: tokio::sync::watch::Sender<u64>,
    /// Armed: the next stdin frame an exec receives reaches its process, then the stream is
    /// cut before anything the process answers gets back (a line delivered, its ack lost).
    pub cut_after_stdin: std::sync::atomic::AtomicBool,
    pub open_execs: AtomicUsize,
    /// Every `pods/exec` stream opened.
    pub execs_opened: AtomicU64,
    pub open_log_streams: AtomicUsize,
    /// Log requests with `follow=true` open now, and the most ever open at once.
    pub open_follows: AtomicUsize,
    pub peak_follows: AtomicUsize,
    /// The most log requests (followed or not) ever open at once.
    pub peak_log_streams: AtomicUsize,
    pub open_watches: AtomicUsize,
    pub requests: AtomicU64,
    /// Every Job body accepted, for schema validation in CI.
    pub accepted: Mutex<Vec<Value>>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").finish_non_exhaustive()
    }
}

/// Now, RFC 3339 with nanoseconds, and as nanoseconds.
pub fn now_ts() -> (String, i128) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let nanos = d.as_nanos() as i128;
    (fmt_ts(nanos, true), nanos)
}

/// Formats nanoseconds since the epoch as RFC 3339 (UTC).
pub fn fmt_ts(nanos: i128, with_nanos: bool) -> String {
    let secs = nanos.div_euclid(1_000_000_000) as i64;
    let frac = nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = caesar_proto::civil::civil_from_days(days);
    let base = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", sod / 3600, sod % 3600 / 60, sod % 60);
    if with_nanos { format!("{base}.{frac:09}Z") } else { format!("{base}Z") }
}

/// Parses an RFC 3339 UTC time (`2026-12-01T12:00:00Z`, fraction optional) to nanoseconds.
pub fn parse_ts(s: &str) -> Option<i128> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut dp = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, d) = (dp.next()?.ok()?, dp.next()?.ok()?, dp.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut tp = hms.split(':').map(|p| p.parse::<i64>());
    let (hh, mm, ss) = (tp.next()?.ok()?, tp.next()?.ok()?, tp.next()?.ok()?);
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let mut nanos = ((days * 86_400 + hh * 3600 + mm * 60 + ss) as i128) * 1_000_000_000;
    if !frac.is_empty() {
        let f: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos += f.parse::<i128>().ok()?;
    }
    Some(nanos)
}

/// A Status object, as the API server returns for errors.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

impl Sim {
    /// A simulator with this configuration.
    pub fn new(cfg: SimConfig) -> Arc<Sim> {
        let (changes, _) = tokio::sync::broadcast::channel(65_536);
        Arc::new(Sim {
            cfg,
            state: Mutex::new(State::default()),
            changes,
            logs: Mutex::new(HashMap::new()),
            procs: Mutex::new(HashMap::new()),
            log_generation: AtomicU64::new(0),
            exec_cuts: tokio::sync::watch::Sender::new(0),
            cut_after_stdin: std::sync::atomic::AtomicBool::new(false),
            open_execs: AtomicUsize::new(0),
            execs_opened: AtomicU64::new(0),
            open_log_streams: AtomicUsize::new(0),
            open_follows: AtomicUsize::new(0),
            peak_follows: AtomicUsize::new(0),
            peak_log_streams: AtomicUsize::new(0),
            open_watches: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            accepted: Mutex::new(Vec::new()),
        })
    }

    /// Locks the objects.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores an object (a new resourceVersion) and tells the watchers.
    pub fn put(&self, st: &mut State, resource: &'static str, mut obj: Value, kind: &'static str) -> Value {
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let map = if resource == "jobs" { &mut st.jobs } else { &mut st.pods };
        if kind == "DELETED" {
            map.remove(&(ns.clone(), name));
        } else {
            map.insert((ns.clone(), name), obj.clone());
        }
        let change = Change { resource, namespace: ns, kind, object: obj.clone(), rv: st.rv };
        st.history.push(change.clone());
        let _ = self.changes.send(change);
        obj
    }

    /// Updates a stored object in place, if it exists.
    pub fn update(&self, resource: &'static str, ns: &str, name: &str, f: impl FnOnce(&mut Value)) -> Option<Value> {
        let mut st = self.lock();
        let map = if resource == "jobs" { &st.jobs } else { &st.pods };
        let mut obj = map.get(&(ns.to_owned(), name.to_owned()))?.clone();
        f(&mut obj);
        Some(self.put(&mut st, resource, obj, "MODIFIED"))
    }

    /// The log of a pod's container, made on first use.
    pub fn log(&self, ns: &str, pod: &str, container: &str) -> Arc<LogBuf> {
        let key = (ns.to_owned(), format!("{pod}/{container}"));
        self.logs.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().clone()
    }

    /// Whether RBAC lets the client do this.
    pub fn allowed(&self, verb: &str, resource: &str) -> bool {
        !self.cfg.forbidden.contains(&format!("{verb}:{resource}"))
    }

    /// Counters for the benchmarks and tests.
    pub fn stats(&self) -> Value {
        let st = self.lock();
        json!({
            "requests": self.requests.load(Ordering::Relaxed),
            "open_log_streams": self.open_log_streams.load(Ordering::Relaxed),
            "peak_follows": self.peak_follows.load(Ordering::Relaxed),
            "peak_log_streams": self.peak_log_streams.load(Ordering::Relaxed),
            "open_watches": self.open_watches.load(Ordering::Relaxed),
            "open_execs": self.open_execs.load(Ordering::Relaxed),
            "execs_opened": self.execs_opened.load(Ordering::Relaxed),
            "exec_cut_armed": self.cut_after_stdin.load(Ordering::Relaxed),
            "jobs": st.jobs.len(),
            "pods": st.pods.len(),
            "processes": self.procs.lock().unwrap_or_else(|p| p.into_inner()).len(),
        })
    }
}

/// Whether an object's labels match a selector (`a=b,c!=d,e,!f`).
pub fn selector_matches(obj: &Value, selector: &str) -> bool {
    let labels = &obj["metadata"]["labels"];
    selector.split(',').map(str::trim).filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k].as_str() != Some(v)
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels[k].as_str() == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            labels.get(k).is_none()
        } else {
            labels.get(term).is_some()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_selectors() {
        let t = "2026-12-01T12:34:56.123456789Z";
        let n = parse_ts(t).expect("parses");
        assert_eq!(fmt_ts(n, true), t);
        assert_eq!(parse_ts("2026-12-01T12:34:56Z"), Some(n - 123_456_789));
        let o = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        assert!(selector_matches(&o, "a=1,b"));
        assert!(!selector_matches(&o, "a=1,b!=2"));
        assert!(selector_matches(&o, "!c"));
    }
}

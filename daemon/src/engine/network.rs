//! The network blocker (issue 17, item 1): an agent that does nothing but
//! fail to reach its provider (name resolution, refused connections, TLS,
//! codex's "waiting for network") for `CAESAR_NETWORK_BLOCKER_MS` (default
//! 60 s) is blocked with kind `network` and stopped, instead of burning its
//! whole deadline on retries.
//!
//! Only an agent that has not yet done anything is watched: its first
//! reply, thought, tool call or file change ends the watch for good, so a
//! transient failure inside a working session is never a blocker and a
//! working agent's events cost one boolean test each.

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::oacp::{Blocker, BlockerKind, EventBody};

use super::*;

/// The default time an agent may spend failing to reach its provider.
pub const DEFAULT_NETWORK_BLOCKER_MS: u64 = 60_000;

/// Phrases of a failure to reach a server (lowercase).
const UNREACHABLE: &[&str] = &[
    "waiting for network",
    "error sending request",
    "connection refused",
    "econnrefused",
    "connection failed",
    "failed to connect",
    "unable to connect",
    "cannot connect to api",
    "could not connect",
    "couldn't connect",
    "fetch failed",
    "network is unreachable",
    "enetunreach",
    "no route to host",
    "ehostunreach",
    "failed to lookup address",
    "name or service not known",
    "nodename nor servname",
    "temporary failure in name resolution",
    "could not resolve host",
    "getaddrinfo",
    "enotfound",
    "eai_again",
    "dns error",
    "tls handshake",
    "certificate verify failed",
    "unable to get local issuer certificate",
    "self signed certificate",
    "self-signed certificate",
    "ssl routines",
    "connection reset",
    "econnreset",
    "stream disconnected before completion",
];

/// Whether a line of the agent's says it could not reach a server.
pub fn is_unreachable(text: &str) -> bool {
    // Long lines are file contents or dumps, not a CLI's error line.
    if text.len() > 4096 {
        return false;
    }
    let t = text.to_ascii_lowercase();
    UNREACHABLE.iter().any(|p| t.contains(p))
}

/// The watch of one run.
#[derive(Debug, Clone, Default)]
pub struct NetWatch {
    /// The agent has done something: the watch is over.
    pub working: bool,
    /// When the first failure to reach the provider was seen.
    pub failing_since_ms: Option<i64>,
    /// The latest such failure, for the blocker's message.
    pub last_failure: String,
}

impl NetWatch {
    /// Reads one event.
    #[inline]
    pub fn observe(&mut self, body: &EventBody) {
        if self.working {
            return;
        }
        let text = match body {
            EventBody::Message { .. }
            | EventBody::Thinking { .. }
            | EventBody::ToolUse { .. }
            | EventBody::FileChanged { .. } => {
                self.working = true;
                self.failing_since_ms = None;
                return;
            }
            EventBody::Error { message, .. } => message,
            EventBody::Unrecognized { line } => line,
            EventBody::Progress { message, .. } => message,
            _ => return,
        };
        if is_unreachable(text) {
            self.failing_since_ms.get_or_insert_with(now_ms);
            self.last_failure = crate::report::tail_chars(text.trim(), 300);
        }
    }

    /// Whether the agent has failed to reach its provider for `limit_ms`.
    pub fn due(&self, now_ms: i64, limit_ms: u64) -> bool {
        !self.working && self.failing_since_ms.is_some_and(|since| now_ms - since >= limit_ms as i64)
    }
}

/// The blocker time from `CAESAR_NETWORK_BLOCKER_MS`.
pub fn blocker_ms_from_env() -> u64 {
    std::env::var("CAESAR_NETWORK_BLOCKER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_NETWORK_BLOCKER_MS)
}

impl Engine {
    /// Blocks and stops a run that has done nothing but fail to reach its
    /// provider for the setting's time. Called by the monitor after each read.
    pub(super) fn check_network(&self, run: &mut Run) {
        if run.blocker.is_some() || !run.network.due(now_ms(), self.settings.network_blocker_ms) {
            return;
        }
        let secs = self.settings.network_blocker_ms as f64 / 1000.0;
        let message = format!(
            "the agent could not reach its provider for {secs:.0} s and did nothing else (last: {}); check the \
             network, proxy and the provider's URL, or raise CAESAR_NETWORK_BLOCKER_MS",
            run.network.last_failure
        );
        info!(task_id = %run.id, "network blocker: stopping the run");
        run.blocker = Some(Blocker::new(BlockerKind::Network, message.clone()));
        if let Err(e) =
            self.store.set_session_and_blocker(&run.id, run.session_id.as_deref(), Some(BlockerKind::Network))
        {
            warn!(task_id = %run.id, "storing the network blocker failed: {e}");
        }
        if let Err(e) = self.emit(run, vec![Blocker::new(BlockerKind::Network, message).event()]) {
            warn!(task_id = %run.id, "storing the network blocker's event failed: {e}");
        }
        if let Some(handle) = &run.handle {
            self.runner.request_stop(handle);
        }
        if !run.plan.may_fall_back(BlockerKind::Network) {
            run.live.attention.send_modify(|n| *n += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_providers_are_recognized() {
        for t in [
            "Reconnecting... waiting for network (Connection failed: error sending request for url (http://127.0.0.1:9/v1/responses))",
            "Cannot connect to API: Unable to connect. Is the computer able to access the url?",
            "Attempt 1 failed. Retrying with backoff... Error: exception TypeError: fetch failed",
            "getaddrinfo ENOTFOUND api.example.invalid",
            "error: dns error: failed to lookup address information: Name or service not known",
        ] {
            assert!(is_unreachable(t), "{t}");
        }
        for t in ["API Error: 529 Overloaded", "wrote the file", "Reconnecting... 2/5 (unexpected status 500)"] {
            assert!(!is_unreachable(t), "{t}");
        }
    }

    #[test]
    fn a_working_agent_is_never_a_network_blocker() {
        let fail = EventBody::Error { message: "Connection refused (os error 111)".into(), fatal: false };
        let mut w = NetWatch::default();
        w.observe(&fail);
        let since = w.failing_since_ms.unwrap();
        assert!(w.due(since + 1000, 1000));
        assert!(!w.due(since + 999, 1000));
        w.observe(&EventBody::Message { text: "working".into() });
        w.observe(&fail);
        assert!(!w.due(since + 10_000, 1000), "a failure after the agent worked is transient");
    }
}

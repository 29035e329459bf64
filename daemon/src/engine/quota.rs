//! The quota ledger's service (issue 32, item 3): it records what the monitor reads of an
//! agent's quota (a parser's [`QuotaSignal`], a rate-limit blocker) in the store, and gives a
//! role's resolution and `caesar agents` the [`Headroom`] now. The decisions are pure
//! (`crate::quota`); this only stores and logs them. Observed usage against the limits a config
//! declares (`crate::quota_observed`) joins the stored entries at every read, never stored.

use std::sync::Arc;

use tracing::{info, warn};

use crate::clock::now_ms;
use crate::config::Config;
use crate::oacp::{Blocker, BlockerKind};
use crate::quota::{Bounded, Headroom, Level, QuotaSignal, bound};
use crate::quota_observed::{self, Run, SHOWN_WINDOW_MS};
use crate::store::Store;

/// The ledger, over the store's `quota_ledger` table.
pub struct Ledger {
    store: Arc<Store>,
}

impl Ledger {
    pub(super) fn new(store: Arc<Store>) -> Ledger {
        Ledger { store }
    }

    /// Records what `signal` says of `agent` (whose adapter is `provider`): an entry until its
    /// reset (bounded), or forgetting the one held when the reset is already past.
    pub(super) fn note(&self, agent: &str, provider: &str, signal: &QuotaSignal) {
        let result = match bound(agent, provider, signal, now_ms()) {
            Bounded::Record { entry, note } => {
                if let Some(note) = note {
                    warn!(agent, "quota signal bounded: {note}");
                }
                info!(
                    agent,
                    level = entry.level.as_str(),
                    resets_at_ms = entry.resets_at_ms,
                    "quota ledger: {}",
                    entry.source
                );
                self.store.record_quota(&entry)
            }
            Bounded::Forget { note } => {
                info!(agent, "quota ledger: {note}");
                self.store.forget_quota(agent, signal.account.as_deref().unwrap_or_default())
            }
        };
        if let Err(e) = result {
            warn!(agent, "storing the quota ledger failed: {e}");
        }
    }

    /// A rate-limit blocker (any provider's, codex's usage-limit error, an ACP refusal, an OACP
    /// agent's `blocker` event) is a signal that the agent is out of quota until its reset.
    pub(super) fn note_blocker(&self, agent: &str, provider: &str, blocker: &Blocker) {
        if blocker.kind != BlockerKind::RateLimit {
            return;
        }
        let signal = QuotaSignal {
            level: Level::Exhausted,
            resets_at_ms: blocker.resets_at_ms,
            source: "rate_limit blocker".to_owned(),
            account: None,
            detail: blocker.message.clone(),
        };
        self.note(agent, provider, &signal);
    }

    /// The ledger now, without what has reset (deleted from the store as it is read).
    pub fn headroom(&self) -> Headroom {
        let now = now_ms();
        match self.store.quota_ledger(now) {
            Ok(entries) => Headroom::at(entries, now),
            Err(e) => {
                warn!("reading the quota ledger failed, routing as if every agent had headroom: {e}");
                Headroom { entries: Vec::new(), now_ms: now }
            }
        }
    }

    /// [`Ledger::headroom`] with what observed usage holds against the agents `config` declares
    /// `[quota.<agent>]` limits for: a role's resolution and a fan-out read this.
    pub fn headroom_with(&self, config: &Config) -> Headroom {
        let mut headroom = self.headroom();
        let Some(longest) = config.quota.values().map(|l| l.window_ms).max() else { return headroom };
        let runs = self.runs(headroom.now_ms - longest);
        headroom.entries.extend(quota_observed::entries(&config.quota, &runs, headroom.now_ms));
        headroom
    }

    /// Each agent's observed usage in one line (over its declared window, or the last 5 h), for
    /// `caesar agents`: shown, never held against an agent without a declared limit.
    pub fn observed(&self, config: &Config) -> impl Fn(&str) -> Option<String> + use<> {
        let now = now_ms();
        let longest = config.quota.values().map(|l| l.window_ms).max().unwrap_or(0).max(SHOWN_WINDOW_MS);
        let runs = self.runs(now - longest);
        let limits = config.quota.clone();
        move |agent: &str| quota_observed::shown(agent, limits.get(agent), &runs, now)
    }

    fn runs(&self, since_ms: i64) -> Vec<Run> {
        self.store.runs_since(since_ms).unwrap_or_else(|e| {
            warn!("reading the observed usage failed, counting none: {e}");
            Vec::new()
        })
    }
}

//! Routing by remaining quota (issue 32, item 3): the pure half of the quota ledger.
//!
//! Agents say how close they are to their provider's limits in structured signals: claude's
//! `rate_limit_event` (`allowed_warning`, `rejected`), codex app-server's
//! `account/rateLimits/updated`, and every rate-limit blocker with or without a reset time (codex
//! usage-limit errors, ACP refusals, an OACP agent's `blocker` event). Parsers turn them into a
//! [`QuotaSignal`]; [`bound`] turns a signal into a ledger [`Entry`] (a reset in the past forgets
//! the entry, one more than [`MAX_HORIZON_MS`] ahead is bounded and says so); the store keeps the
//! entries (`store/quota.rs`) and [`Headroom`] is what a role's resolution and `caesar agents`
//! read: which agents are near their limit, until when, and why.

use crate::clock::rfc3339;

/// The furthest ahead a reset is believed: a signal that says "years from now" is bounded here.
pub const MAX_HORIZON_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// How long a limit that says nothing of its reset is held.
pub const DEFAULT_HOLD_MS: i64 = 60 * 60 * 1000;

/// The share of a window used (percent) from which a codex window counts as near its limit.
pub const NEAR_PERCENT: i64 = 90;

/// How close to its limit an agent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// The provider still serves, and warned that the limit is close.
    Near,
    /// The provider refuses until the reset.
    Exhausted,
}

impl Level {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Near => "near",
            Level::Exhausted => "exhausted",
        }
    }

    /// Parses the stored spelling; anything else reads as `near` (the milder claim).
    pub fn parse(s: &str) -> Level {
        if s == "exhausted" { Level::Exhausted } else { Level::Near }
    }
}

/// What a parser read about an agent's quota: a typed signal, independent of the provider's words.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaSignal {
    pub level: Level,
    /// When the limit lifts (milliseconds since the epoch), where the signal says.
    pub resets_at_ms: Option<i64>,
    /// The signal that said so, for the reader (`rate_limit_event`, `account/rateLimits/updated`).
    pub source: String,
    /// The account the signal names, where it names one.
    pub account: Option<String>,
    /// The provider's words, short (`five_hour`, `primary window 93 % used`).
    pub detail: String,
}

/// One ledger row: an agent (and account) that is near or out of its quota until a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The agent id (for a native provider, its provider id).
    pub agent: String,
    /// The account the signal named, or empty.
    pub account: String,
    pub level: Level,
    /// When the entry is forgotten: the reset, bounded to [`MAX_HORIZON_MS`] ahead.
    pub resets_at_ms: i64,
    /// Where the signal came from: `<provider> <signal>`.
    pub source: String,
    /// The provider's words, and what caesar did with the reset (bounded, assumed).
    pub detail: String,
    pub observed_ms: i64,
}

impl Entry {
    /// One line for `caesar agents`: `near limit until 17:40 UTC (alpha rate_limit_event)`.
    pub fn describe(&self, now_ms: i64) -> String {
        let what = match self.level {
            Level::Near => "near limit",
            Level::Exhausted => "out of quota",
        };
        format!("{what} until {} ({})", when(self.resets_at_ms, now_ms), self.source)
    }
}

/// A reset as a reader wants it: the hour within a day, the full time beyond.
pub fn when(ms: i64, now_ms: i64) -> String {
    let full = rfc3339(ms);
    if ms - now_ms < 24 * 60 * 60 * 1000 {
        // `2026-12-05T17:40:00.000Z` -> `17:40 UTC`
        format!("{} UTC", full.get(11..16).unwrap_or(&full))
    } else {
        format!("{} UTC", full.get(..16).unwrap_or(&full).replace('T', " "))
    }
}

/// What to do with a signal: record an entry (and a note when its reset was bounded or assumed),
/// or nothing (a reset already past: what has reset is forgotten).
#[derive(Debug, Clone, PartialEq)]
pub enum Bounded {
    Record { entry: Entry, note: Option<String> },
    Forget { note: String },
}

/// The ledger entry of `signal`, seen from `agent` at `now_ms`.
pub fn bound(agent: &str, provider: &str, signal: &QuotaSignal, now_ms: i64) -> Bounded {
    let source = format!("{provider} {}", signal.source);
    let (resets_at_ms, note) = match signal.resets_at_ms {
        Some(at) if at <= now_ms => {
            return Bounded::Forget {
                note: format!(
                    "{source}: its reset ({}) is already past; nothing is held against `{agent}`",
                    rfc3339(at)
                ),
            };
        }
        Some(at) if at - now_ms > MAX_HORIZON_MS => (
            now_ms + MAX_HORIZON_MS,
            Some(format!(
                "{source}: its reset ({}) is more than 7 days ahead; `{agent}` is held until {} instead",
                rfc3339(at),
                rfc3339(now_ms + MAX_HORIZON_MS)
            )),
        ),
        Some(at) => (at, None),
        None => (now_ms + DEFAULT_HOLD_MS, Some(format!("{source}: no reset time given; `{agent}` is held for 1 h"))),
    };
    let detail = match &note {
        Some(n) => format!("{}; {n}", signal.detail),
        None => signal.detail.clone(),
    };
    Bounded::Record {
        entry: Entry {
            agent: agent.to_owned(),
            account: signal.account.clone().unwrap_or_default(),
            level: signal.level,
            resets_at_ms,
            source,
            detail,
            observed_ms: now_ms,
        },
        note,
    }
}

/// The ledger as a role's resolution reads it: the entries still in force at `now_ms`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headroom {
    pub entries: Vec<Entry>,
    pub now_ms: i64,
}

impl Headroom {
    /// The ledger at `now_ms`, without what has reset.
    pub fn at(entries: Vec<Entry>, now_ms: i64) -> Headroom {
        Headroom { entries: entries.into_iter().filter(|e| e.resets_at_ms > now_ms).collect(), now_ms }
    }

    /// What limits `agent` now: its worst entry (out of quota before near), the latest reset first.
    pub fn limit_of(&self, agent: &str) -> Option<&Entry> {
        self.entries.iter().filter(|e| e.agent == agent).max_by_key(|e| (e.level, e.resets_at_ms))
    }

    /// `agent`'s headroom in one line, or `None` when nothing holds it back.
    pub fn describe(&self, agent: &str) -> Option<String> {
        self.limit_of(agent).map(|e| e.describe(self.now_ms))
    }
}

/// The choice among a chain's usable agents (installed and allowed, in chain order).
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The index of the picked agent in the candidates.
    pub index: usize,
    /// The candidates passed over for their quota, each with why.
    pub passed: Vec<(String, String)>,
    /// Every candidate is near its limit: the pick is the one that resets soonest.
    pub all_limited: bool,
}

/// Picks the first candidate with headroom; when every one is near its limit, the one that resets
/// soonest (the first of equals).
pub fn choose(candidates: &[String], headroom: &Headroom) -> Option<Choice> {
    if candidates.is_empty() {
        return None;
    }
    let limits: Vec<Option<&Entry>> = candidates.iter().map(|a| headroom.limit_of(a)).collect();
    let why = |i: usize| limits[i].map(|e| e.describe(headroom.now_ms)).unwrap_or_default();
    if let Some(index) = limits.iter().position(Option::is_none) {
        let passed = (0..index).map(|i| (candidates[i].clone(), why(i))).collect();
        return Some(Choice { index, passed, all_limited: false });
    }
    let index = (0..candidates.len()).min_by_key(|i| limits[*i].map(|e| e.resets_at_ms).unwrap_or(i64::MAX))?;
    let passed = (0..candidates.len()).filter(|i| *i != index).map(|i| (candidates[i].clone(), why(i))).collect();
    Some(Choice { index, passed, all_limited: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000_000;

    fn signal(level: Level, resets_at_ms: Option<i64>) -> QuotaSignal {
        QuotaSignal {
            level,
            resets_at_ms,
            source: "rate_limit_event".into(),
            account: None,
            detail: "five_hour".into(),
        }
    }

    fn entry(agent: &str, level: Level, resets_at_ms: i64) -> Entry {
        match bound(agent, agent, &signal(level, Some(resets_at_ms)), NOW) {
            Bounded::Record { entry, .. } => entry,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reset_in_the_past_is_forgotten_with_a_note() {
        let b = bound("alpha", "alpha", &signal(Level::Near, Some(NOW - 1)), NOW);
        let Bounded::Forget { note } = b else { panic!("{b:?}") };
        assert!(note.contains("already past"), "{note}");
        // An entry recorded earlier whose reset has passed since is not in the headroom.
        let old = entry("alpha", Level::Near, NOW + 1000);
        let later = Headroom::at(vec![old], NOW + 1000);
        assert_eq!(later.limit_of("alpha"), None);
    }

    #[test]
    fn a_reset_years_ahead_is_bounded_to_seven_days_and_says_so() {
        let years = NOW + 5 * 365 * 24 * 3600 * 1000;
        let Bounded::Record { entry, note } = bound("beta", "beta", &signal(Level::Exhausted, Some(years)), NOW) else {
            panic!()
        };
        assert_eq!(entry.resets_at_ms, NOW + MAX_HORIZON_MS);
        let note = note.expect("a note");
        assert!(note.contains("more than 7 days ahead"), "{note}");
        assert!(entry.detail.contains("more than 7 days ahead"), "{}", entry.detail);
    }

    #[test]
    fn no_reset_time_holds_an_hour_and_says_so() {
        let Bounded::Record { entry, note } = bound("q", "generic", &signal(Level::Exhausted, None), NOW) else {
            panic!()
        };
        assert_eq!(entry.resets_at_ms, NOW + DEFAULT_HOLD_MS);
        assert!(note.is_some_and(|n| n.contains("no reset time")));
    }

    #[test]
    fn the_description_names_the_level_the_time_and_the_signal() {
        let e = entry("alpha", Level::Near, NOW + 90 * 60 * 1000);
        let said = e.describe(NOW);
        assert!(said.starts_with("near limit until ") && said.ends_with(" UTC (alpha rate_limit_event)"), "{said}");
        let far = entry("alpha", Level::Exhausted, NOW + 3 * 24 * 3600 * 1000);
        assert!(far.describe(NOW).starts_with("out of quota until 2026-"), "{}", far.describe(NOW));
    }

    #[test]
    fn the_first_agent_with_headroom_is_chosen_and_the_ones_passed_say_why() {
        let chain = vec!["alpha".to_owned(), "beta".to_owned(), "gamma".to_owned()];
        let h = Headroom::at(vec![entry("alpha", Level::Near, NOW + 60_000)], NOW);
        let c = choose(&chain, &h).unwrap();
        assert_eq!((c.index, c.all_limited), (1, false));
        assert_eq!(c.passed.len(), 1);
        assert!(c.passed[0].1.contains("near limit"), "{:?}", c.passed);
        // Nothing recorded: the first.
        assert_eq!(choose(&chain, &Headroom::default()).unwrap().index, 0);
    }

    #[test]
    fn when_all_are_limited_the_one_that_resets_soonest_is_chosen() {
        let chain = vec!["alpha".to_owned(), "beta".to_owned()];
        let h = Headroom::at(
            vec![entry("alpha", Level::Near, NOW + 3_600_000), entry("beta", Level::Exhausted, NOW + 60_000)],
            NOW,
        );
        let c = choose(&chain, &h).unwrap();
        assert_eq!((c.index, c.all_limited), (1, true));
        assert_eq!(c.passed[0].0, "alpha");
        // Equal resets: the first.
        let h = Headroom::at(
            vec![entry("alpha", Level::Near, NOW + 60_000), entry("beta", Level::Near, NOW + 60_000)],
            NOW,
        );
        assert_eq!(choose(&chain, &h).unwrap().index, 0);
    }

    #[test]
    fn the_worst_entry_of_an_agent_limits_it() {
        let h = Headroom::at(
            vec![entry("alpha", Level::Near, NOW + 9_000_000), entry("alpha", Level::Exhausted, NOW + 60_000)],
            NOW,
        );
        assert_eq!(h.limit_of("alpha").map(|e| e.level), Some(Level::Exhausted));
    }
}

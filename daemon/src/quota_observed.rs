//! Observed usage in the quota ledger (issue 32, item 3): what caesar saw each agent use, held
//! against the limits a user declares.
//!
//! A user declares, per agent id, what the agent's account allows in a rolling window:
//!
//! ```toml
//! [quota.claude]
//! tokens_per_window = 500000
//! tasks_per_window = 40
//! window = "5h"
//! ```
//!
//! The daemon counts, from its own store, the tasks of that agent started in the last `window`
//! and the tokens their reports say they used ([`Used`], `store/quota_usage.rs`). [`judge`] turns
//! the count and the limit into a ledger [`Entry`]: `near` from [`NEAR_PERCENT`] of a limit,
//! `exhausted` at it, until the oldest counted task slides out of the window, with a reason a
//! person reads as it is ("observed usage: 412k of 500k tokens in the last 5 h"). These entries
//! are never stored: they are derived again at every read, so a window that slid past forgets by
//! itself, and they route (`crate::quota::choose`) exactly as the signal-fed ones. Without a
//! declared limit the usage is only shown ([`shown`]), never held against the agent.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::quota::{Entry, Level};

/// The share of a declared limit (percent) from which an agent counts as near it.
pub const NEAR_PERCENT: u64 = 90;

/// The window observed usage is shown over when no limit declares one.
pub const SHOWN_WINDOW_MS: i64 = 5 * 60 * 60 * 1000;

/// The longest window believed: a week.
pub const MAX_WINDOW_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// `[quota.<agent>]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    pub tasks_per_window: Option<i64>,
    pub tokens_per_window: Option<i64>,
    pub window: Option<String>,
}

/// A declared limit, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub tasks: Option<u64>,
    pub tokens: Option<u64>,
    pub window_ms: i64,
}

/// Checks one `[quota.<agent>]` table; the error names the key and the fix (`key`, `why`).
pub fn limit_of(agent: &str, raw: &RawLimit) -> Result<Limit, (String, String)> {
    let key = |k: &str| format!("quota.{agent}.{k}");
    let count = |k: &str, v: Option<i64>| -> Result<Option<u64>, (String, String)> {
        match v {
            Some(n) if n <= 0 => Err((
                key(k),
                format!("is {n}: give a positive number of {} per window, or remove the key", &k[..k.len() - 11]),
            )),
            Some(n) => Ok(Some(n as u64)),
            None => Ok(None),
        }
    };
    let tasks = count("tasks_per_window", raw.tasks_per_window)?;
    let tokens = count("tokens_per_window", raw.tokens_per_window)?;
    let Some(window) = raw.window.as_deref() else {
        return Err((key("window"), "is missing: say how long the provider's window is, like window = \"5h\"".into()));
    };
    let window_ms = match caesar_proto::duration::parse_ms(window) {
        Ok(0) => return Err((key("window"), "is zero: give the provider's window, like \"5h\" or \"168h\"".into())),
        Ok(ms) if ms as i64 > MAX_WINDOW_MS => {
            return Err((
                key("window"),
                format!("is `{window}`, longer than 7 days: give a window of at most \"168h\" (7 days)"),
            ));
        }
        Ok(ms) => ms as i64,
        Err(e) => return Err((key("window"), format!("{e}: write a duration like \"5h\", \"90m\" or \"168h\""))),
    };
    if tasks.is_none() && tokens.is_none() {
        return Err((
            format!("quota.{agent}"),
            "declares no limit: set tasks_per_window or tokens_per_window (or both), or remove the table".into(),
        ));
    }
    Ok(Limit { tasks, tokens, window_ms })
}

/// Refuses a limit declared for an agent caesar does not know (`known` says which are).
pub fn check_agents(limits: &BTreeMap<String, Limit>, known: impl Fn(&str) -> bool) -> Result<(), (String, String)> {
    match limits.keys().find(|a| !known(a)) {
        Some(a) => Err((
            format!("quota.{a}"),
            format!(
                "names `{a}`, which is no agent: use a provider id (claude, codex, …) or the id of an [[agent]] \
                 this config declares"
            ),
        )),
        None => Ok(()),
    }
}

/// One task as observed usage counts it.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub agent: String,
    pub started_ms: i64,
    /// Input and output tokens its report gives (0 while it runs or when it gives none).
    pub tokens: u64,
}

/// An agent's usage in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub tasks: u64,
    pub tokens: u64,
    /// When the oldest counted task started.
    pub oldest_ms: Option<i64>,
}

/// What `agent`'s tasks among `runs` used in the `window_ms` before `now_ms`.
pub fn used(runs: &[Run], agent: &str, window_ms: i64, now_ms: i64) -> Used {
    let since = now_ms - window_ms;
    runs.iter().filter(|r| r.agent == agent && r.started_ms > since).fold(Used::default(), |u, r| Used {
        tasks: u.tasks + 1,
        tokens: u.tokens + r.tokens,
        oldest_ms: Some(u.oldest_ms.map_or(r.started_ms, |o| o.min(r.started_ms))),
    })
}

/// A count as a person reads it: `412k`, `1.2M`, `87`.
fn amount(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{}k", n / 1_000),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

/// A window as a person reads it: `5 h`, `90 min`, `7 d`.
fn span(ms: i64) -> String {
    let min = ms / 60_000;
    if min % (24 * 60) == 0 && min > 0 {
        format!("{} d", min / (24 * 60))
    } else if min % 60 == 0 && min > 0 {
        format!("{} h", min / 60)
    } else {
        format!("{} min", min.max(1))
    }
}

/// The ledger entry of `agent`'s observed usage against its declared `limit`, or `None` while it
/// has headroom. It holds until the oldest counted task leaves the window.
pub fn judge(agent: &str, limit: &Limit, used: &Used, now_ms: i64) -> Option<Entry> {
    let measures = [("tasks", limit.tasks, used.tasks), ("tokens", limit.tokens, used.tokens)];
    // The measure closest to its limit speaks.
    let (what, max, seen) = measures
        .iter()
        .filter_map(|(w, l, u)| l.map(|l| (*w, l, *u)))
        .max_by_key(|(_, l, u)| u.saturating_mul(1000) / l)?;
    let level = if seen >= max {
        Level::Exhausted
    } else if seen.saturating_mul(100) >= max.saturating_mul(NEAR_PERCENT) {
        Level::Near
    } else {
        return None;
    };
    let oldest = used.oldest_ms.unwrap_or(now_ms);
    Some(Entry {
        agent: agent.to_owned(),
        account: String::new(),
        level,
        resets_at_ms: (oldest + limit.window_ms).max(now_ms + 1),
        source: format!(
            "observed usage: {} of {} {what} in the last {}",
            amount(seen),
            amount(max),
            span(limit.window_ms)
        ),
        detail: format!(
            "{agent}: {} tasks, {} tokens in the last {} (observed)",
            used.tasks,
            used.tokens,
            span(limit.window_ms)
        ),
        observed_ms: now_ms,
    })
}

/// The entries observed usage holds against the agents with a declared limit.
pub fn entries(limits: &BTreeMap<String, Limit>, runs: &[Run], now_ms: i64) -> Vec<Entry> {
    limits.iter().filter_map(|(agent, l)| judge(agent, l, &used(runs, agent, l.window_ms, now_ms), now_ms)).collect()
}

/// `agent`'s observed usage in one line for `caesar agents`, over its declared window (or the
/// last [`SHOWN_WINDOW_MS`]); `None` when it used nothing.
pub fn shown(agent: &str, limit: Option<&Limit>, runs: &[Run], now_ms: i64) -> Option<String> {
    let window = limit.map_or(SHOWN_WINDOW_MS, |l| l.window_ms);
    let u = used(runs, agent, window, now_ms);
    if u.tasks == 0 {
        return None;
    }
    let of = |n: Option<u64>| n.map(|n| format!(" of {}", amount(n))).unwrap_or_default();
    let declared = if limit.is_some() { "" } else { "; no limit declared" };
    Some(format!(
        "observed: {} task{}{}, {} tokens{} in the last {}{declared}",
        u.tasks,
        if u.tasks == 1 { "" } else { "s" },
        of(limit.and_then(|l| l.tasks)),
        amount(u.tokens),
        of(limit.and_then(|l| l.tokens)),
        span(window)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000_000;
    const H: i64 = 60 * 60 * 1000;

    fn run(agent: &str, ago_ms: i64, tokens: u64) -> Run {
        Run { agent: agent.into(), started_ms: NOW - ago_ms, tokens }
    }

    fn raw(tasks: Option<i64>, tokens: Option<i64>, window: Option<&str>) -> RawLimit {
        RawLimit { tasks_per_window: tasks, tokens_per_window: tokens, window: window.map(Into::into) }
    }

    #[test]
    fn a_declared_limit_is_read_and_bad_ones_name_the_key_and_the_fix() {
        let l = limit_of("claude", &raw(Some(40), Some(500_000), Some("5h"))).unwrap();
        assert_eq!(l, Limit { tasks: Some(40), tokens: Some(500_000), window_ms: 5 * H });
        let err = |r: RawLimit| limit_of("claude", &r).unwrap_err();
        let (k, why) = err(raw(Some(-3), None, Some("5h")));
        assert_eq!(k, "quota.claude.tasks_per_window");
        assert!(why.contains("is -3: give a positive number of tasks"), "{why}");
        let (k, why) = err(raw(None, Some(0), Some("5h")));
        assert_eq!(k, "quota.claude.tokens_per_window");
        assert!(why.contains("positive number of tokens"), "{why}");
        let (k, why) = err(raw(Some(1), None, Some("0s")));
        assert_eq!((k.as_str(), why.contains("is zero")), ("quota.claude.window", true), "{why}");
        let (k, why) = err(raw(Some(1), None, Some("soon")));
        assert!(k.ends_with(".window") && why.contains("like \"5h\""), "{why}");
        assert!(err(raw(Some(1), None, Some("200h"))).1.contains("at most \"168h\""));
        assert!(err(raw(Some(1), None, None)).1.contains("is missing"));
        assert!(err(raw(None, None, Some("5h"))).1.contains("declares no limit"));
        let limits = BTreeMap::from([("claude".to_owned(), l), ("clade".to_owned(), l)]);
        let (k, why) = check_agents(&limits, |a| a == "claude").unwrap_err();
        assert_eq!(k, "quota.clade");
        assert!(why.contains("`clade`, which is no agent"), "{why}");
    }

    #[test]
    fn usage_in_the_window_holds_an_agent_near_then_out_and_says_why() {
        let l = Limit { tasks: None, tokens: Some(500_000), window_ms: 5 * H };
        let runs = vec![run("claude", 4 * H, 200_000), run("claude", H, 212_000), run("codex", H, 900_000)];
        assert!(judge("claude", &l, &used(&runs, "claude", l.window_ms, NOW), NOW).is_none(), "412k of 500k: headroom");
        let runs = [runs, vec![run("claude", 1000, 40_000)]].concat();
        let e = judge("claude", &l, &used(&runs, "claude", l.window_ms, NOW), NOW).unwrap();
        assert_eq!(e.level, Level::Near);
        assert_eq!(e.source, "observed usage: 452k of 500k tokens in the last 5 h");
        assert_eq!(e.resets_at_ms, NOW - 4 * H + 5 * H, "held until the oldest counted task leaves the window");
        let tasks = Limit { tasks: Some(2), tokens: None, window_ms: 5 * H };
        let e = judge("claude", &tasks, &used(&runs, "claude", tasks.window_ms, NOW), NOW).unwrap();
        assert_eq!((e.level, e.source.as_str()), (Level::Exhausted, "observed usage: 3 of 2 tasks in the last 5 h"));
    }

    #[test]
    fn a_window_that_slid_past_forgets() {
        let l = Limit { tasks: Some(1), tokens: None, window_ms: 5 * H };
        let limits = BTreeMap::from([("claude".to_owned(), l)]);
        let runs = vec![run("claude", 5 * H + 1, 10)];
        assert!(entries(&limits, &runs, NOW).is_empty(), "a task older than the window counts no more");
        let runs = vec![run("claude", 5 * H - 1000, 10)];
        let e = entries(&limits, &runs, NOW);
        assert_eq!(e.len(), 1);
        assert!(crate::quota::Headroom::at(e, NOW + 1000).limit_of("claude").is_none(), "forgotten once it slides out");
    }

    #[test]
    fn usage_is_shown_with_or_without_a_limit() {
        let runs = vec![run("codex", H, 1_500), run("codex", 2 * H, 0)];
        assert_eq!(
            shown("codex", None, &runs, NOW).unwrap(),
            "observed: 2 tasks, 1k tokens in the last 5 h; no limit declared"
        );
        let l = Limit { tasks: Some(10), tokens: Some(2_000_000), window_ms: 24 * H };
        assert_eq!(
            shown("codex", Some(&l), &runs, NOW).unwrap(),
            "observed: 2 tasks of 10, 1k tokens of 2.0M in the last 1 d"
        );
        assert_eq!(shown("claude", None, &runs, NOW), None);
    }
}

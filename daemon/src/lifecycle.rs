//! What a task carries for its life cycle past one run (issue 17, items 1–4):
//! its budget, what to do when a blocker stops it, and the chain of agents
//! it may fall back along. Decided at delegation, stored in the task's
//! launch plan (so with the task, in one row), read by the engine's
//! `budget`, `network` and `fallback` rooms.

use serde::{Deserialize, Serialize};

use crate::request::DelegateInput;

/// Limits of one task. `None` is no limit. Every figure is at least 1 (a
/// cost above 0): zero or negative limits are refused where they are read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Input plus output tokens, summed over the agent's usage events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// US dollars, where the provider reports a cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Wall time from the agent's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    /// The agent's replies (its `message` events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
}

impl Limits {
    /// Field by field: `self` where set, else `base`.
    pub fn over(self, base: Limits) -> Limits {
        Limits {
            tokens: self.tokens.or(base.tokens),
            cost_usd: self.cost_usd.or(base.cost_usd),
            wall_ms: self.wall_ms.or(base.wall_ms),
            turns: self.turns.or(base.turns),
        }
    }

    /// No limit at all.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// Builds limits from signed figures (the wire's and TOML's integers),
    /// refusing zero and negative ones. `prefix` names the field in the
    /// error (`budget` for a delegation, `[budget]` or a role's `budget`).
    pub fn from_signed(
        prefix: &str,
        tokens: Option<i64>,
        cost_usd: Option<f64>,
        wall_ms: Option<i64>,
        turns: Option<i64>,
    ) -> std::result::Result<Limits, String> {
        let count = |name: &str, v: Option<i64>| -> std::result::Result<Option<u64>, String> {
            match v {
                None => Ok(None),
                Some(n) if n >= 1 => Ok(Some(n as u64)),
                Some(n) => Err(format!(
                    "`{prefix}.{name}` must be at least 1, got {n}: raise it, or leave it out for no limit"
                )),
            }
        };
        let cost = match cost_usd {
            None => None,
            Some(c) if c.is_finite() && c > 0.0 => Some(c),
            Some(c) => {
                return Err(format!(
                    "`{prefix}.cost_usd` must be above 0, got {c}: raise it, or leave it out for no limit"
                ));
            }
        };
        Ok(Limits {
            tokens: count("tokens", tokens)?,
            cost_usd: cost,
            wall_ms: count("wall_ms", wall_ms)?,
            turns: count("turns", turns)?,
        })
    }
}

/// What a task does when a blocker (auth, quota, network) stops it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBlocker {
    /// As `fallback` when nothing changed; a worktree task that changed
    /// files (checked with git) is handed to the next agent of the chain in
    /// the same worktree, under the same task id, with a handoff brief
    /// (issue 31, `engine/handoff.rs`). The default.
    #[default]
    Relay,
    /// Start the next permitted agent of the role's chain when the agent
    /// changed nothing; with no agent left to fall back on, park a quota
    /// blocker that says when it lifts (`engine/parking.rs`). A task that
    /// changed files ends blocked.
    Fallback,
    /// End blocked, as the agent stopped.
    Fail,
    /// Park a quota blocker that says when it lifts, before the task's
    /// deadline, and resume the same agent then (issue 17, item 3); fall
    /// back along the chain when it cannot be parked.
    Park,
}

impl OnBlocker {
    /// Parses the config and wire spelling.
    pub fn parse(s: &str) -> std::result::Result<OnBlocker, String> {
        match s {
            "relay" => Ok(OnBlocker::Relay),
            "fallback" => Ok(OnBlocker::Fallback),
            "fail" => Ok(OnBlocker::Fail),
            "park" => Ok(OnBlocker::Park),
            other => Err(format!("unknown on_blocker `{other}`: use `relay`, `fallback`, `park` or `fail`")),
        }
    }

    /// The spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnBlocker::Relay => "relay",
            OnBlocker::Fallback => "fallback",
            OnBlocker::Fail => "fail",
            OnBlocker::Park => "park",
        }
    }
}

/// A role's life-cycle settings (`[[role]] budget`, `on_blocker`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleLifecycle {
    pub budget: Limits,
    pub on_blocker: Option<OnBlocker>,
}

/// A `budget` table in TOML: `{ tokens = 200000, cost_usd = 2.5, wall = "30m", turns = 40 }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    tokens: Option<i64>,
    cost_usd: Option<f64>,
    /// `"30m"`, `"90s"`, or milliseconds.
    wall: Option<toml::Value>,
    turns: Option<i64>,
}

impl RawBudget {
    /// The limits, with `prefix` naming the table in errors.
    pub fn limits(&self, prefix: &str) -> std::result::Result<Limits, String> {
        let wall = match &self.wall {
            None => None,
            Some(toml::Value::Integer(ms)) => Some(*ms),
            Some(toml::Value::String(s)) => Some(
                caesar_proto::duration::parse_ms(s).map_err(|e| format!("`{prefix}.wall` {e}")).map(|ms| ms as i64)?,
            ),
            Some(other) => {
                return Err(format!("`{prefix}.wall` must be a duration like \"30m\" or milliseconds, got `{other}`"));
            }
        };
        Limits::from_signed(prefix, self.tokens, self.cost_usd, wall, self.turns)
            .map_err(|e| e.replace(&format!("`{prefix}.wall_ms`"), &format!("`{prefix}.wall`")))
    }
}

/// What a task's launch carries for its life cycle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Plan {
    /// The effective limits (delegation over role over `[budget]`).
    #[serde(skip_serializing_if = "Limits::is_empty")]
    pub budget: Limits,
    pub on_blocker: OnBlocker,
    /// The role's chain when the agent came from one; empty when the caller
    /// named the agent without a role (then there is nothing to fall back on).
    pub chain: Vec<String>,
    /// The chain is the one agent the caller named with `relay_to` (issue
    /// 31), not a role's: findings about it say so.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub named_next: bool,
    /// The first task of the chain of attempts this task belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The request, to delegate it again to the next agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<DelegateInput>,
}

impl Plan {
    /// Whether a blocker of this kind may hand the task to the next agent:
    /// then it is no reason to wake the caller, who keeps waiting on the chain.
    pub fn may_fall_back(&self, kind: crate::oacp::BlockerKind) -> bool {
        use crate::oacp::BlockerKind::*;
        let falls_back = self.on_blocker != OnBlocker::Fail && !self.chain.is_empty();
        // A quota may park the task instead (issue 17, item 3).
        let parks = self.on_blocker != OnBlocker::Fail && kind == RateLimit;
        (falls_back && matches!(kind, Auth | RateLimit | Network)) || parks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_negative_limits_are_refused_by_name() {
        let e = Limits::from_signed("budget", Some(0), None, None, None).unwrap_err();
        assert!(e.contains("`budget.tokens` must be at least 1, got 0"), "{e}");
        let e = Limits::from_signed("budget", None, Some(-1.0), None, None).unwrap_err();
        assert!(e.contains("`budget.cost_usd` must be above 0"), "{e}");
        let e = Limits::from_signed("budget", None, None, None, Some(-3)).unwrap_err();
        assert!(e.contains("`budget.turns`"), "{e}");
        let ok = Limits::from_signed("budget", Some(5), Some(0.5), Some(1000), Some(2)).unwrap();
        assert_eq!(ok, Limits { tokens: Some(5), cost_usd: Some(0.5), wall_ms: Some(1000), turns: Some(2) });
    }

    #[test]
    fn toml_wall_takes_durations_and_names_its_key() {
        let raw: RawBudget = toml::from_str("wall = \"2m\"\nturns = 3").unwrap();
        assert_eq!(raw.limits("[budget]").unwrap().wall_ms, Some(120_000));
        let raw: RawBudget = toml::from_str("wall = 0").unwrap();
        let e = raw.limits("[budget]").unwrap_err();
        assert!(e.contains("`[budget].wall` must be at least 1"), "{e}");
    }

    #[test]
    fn limits_merge_field_by_field() {
        let role = Limits { tokens: Some(10), turns: Some(4), ..Limits::default() };
        let call = Limits { tokens: Some(3), ..Limits::default() };
        assert_eq!(call.over(role), Limits { tokens: Some(3), turns: Some(4), ..Limits::default() });
    }
}

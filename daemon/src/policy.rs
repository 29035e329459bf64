//! Policy decisions: which agents may be delegated to, and how deep.
//!
//! Four rules, applied in this order, the first refusal winning: `denied`
//! (the agent is in `policy.denied`), `allowlist` (`policy.allowed` is not
//! empty and does not name it), `depth` (the caller's delegation depth has
//! reached `max_depth`) and `recursion` (delegating to `claude` while
//! `allow_recursion` is off: Claude Code delegating to itself, so only where
//! Claude Code may be the caller, `crate::host`). Each refusal carries its
//! own remedy.

use serde::Serialize;

use crate::config::Policy;
use crate::launch::ProviderId;
use crate::request::Host;

/// The rule that refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rule {
    Denied,
    Allowlist,
    Depth,
    Recursion,
}

/// A refusal: which rule, why, and what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    pub rule: Rule,
    pub reason: String,
    pub remedy: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.reason, self.remedy)
    }
}

/// The allowlist and denylist rules.
pub fn agent_allowed(policy: &Policy, agent: &str) -> Result<(), Refusal> {
    if policy.denied.iter().any(|a| a == agent) {
        return Err(Refusal {
            rule: Rule::Denied,
            reason: format!("agent `{agent}` is refused: it is in the policy's `denied` list."),
            remedy: format!("Allow it with `caesar agents enable {agent}`."),
        });
    }
    if !policy.allowed.is_empty() && !policy.allowed.iter().any(|a| a == agent) {
        return Err(Refusal {
            rule: Rule::Allowlist,
            reason: format!(
                "agent `{agent}` is refused: the policy only allows the agents in `allowed` ({}).",
                policy.allowed.join(", ")
            ),
            remedy: format!("Add it with `caesar policy allow {agent}`."),
        });
    }
    Ok(())
}

/// The depth rule: a caller at `depth` may delegate only below `max_depth`.
pub fn depth_allowed(policy: &Policy, depth: u32) -> Result<(), Refusal> {
    if depth >= policy.max_depth {
        return Err(Refusal {
            rule: Rule::Depth,
            reason: format!(
                "delegation at depth {depth} is refused: the policy limits nesting to max_depth = {}.",
                policy.max_depth
            ),
            remedy: "Do this work yourself instead of delegating it further, or raise `max_depth` in [policy]."
                .to_owned(),
        });
    }
    Ok(())
}

/// The recursion rule.
pub fn recursion_allowed(policy: &Policy, agent: &str) -> Result<(), Refusal> {
    if !policy.allow_recursion && ProviderId::native(agent) == Some(ProviderId::Claude) {
        return Err(Refusal {
            rule: Rule::Recursion,
            reason: "agent `claude` is refused: `allow_recursion` is off (Claude Code delegating to Claude would be a recursion).".to_owned(),
            remedy: "Set `allow_recursion = true` in [policy] if you mean it.".to_owned(),
        });
    }
    Ok(())
}

/// The recursion rule for a delegation from `host`: only where Claude Code
/// may be the caller (issue 30; `crate::host`).
pub fn recursion_allowed_from(policy: &Policy, agent: &str, host: Host) -> Result<(), Refusal> {
    if host.may_be_claude_code() { recursion_allowed(policy, agent) } else { Ok(()) }
}

/// The four rules in order, for a caller caesar cannot place.
pub fn check(policy: &Policy, agent: &str, depth: u32) -> Result<(), Refusal> {
    check_from(policy, agent, depth, Host::Unknown)
}

/// The four rules in order, for a delegation from `host`.
pub fn check_from(policy: &Policy, agent: &str, depth: u32, host: Host) -> Result<(), Refusal> {
    agent_allowed(policy, agent)?;
    depth_allowed(policy, depth)?;
    recursion_allowed_from(policy, agent, host)
}

/// An agent's standing with the policy, depth aside (for listings).
pub fn standing(policy: &Policy, agent: &str) -> Result<(), Refusal> {
    standing_from(policy, agent, Host::Unknown)
}

/// An agent's standing with the policy for a delegation from `host`, depth aside.
pub fn standing_from(policy: &Policy, agent: &str, host: Host) -> Result<(), Refusal> {
    agent_allowed(policy, agent)?;
    recursion_allowed_from(policy, agent, host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_rules_refuse_in_order_with_their_remedies() {
        let mut p = Policy::default();
        assert!(check(&p, "codex", 0).is_ok());
        let r = check(&p, "claude", 0).unwrap_err();
        assert_eq!(r.rule, Rule::Recursion);
        assert!(r.remedy.contains("allow_recursion"));
        assert_eq!(check_from(&p, "claude", 0, Host::ClaudeCode).unwrap_err().rule, Rule::Recursion);
        assert!(check_from(&p, "claude", 0, Host::Other).is_ok(), "no Claude Code calls: no recursion");
        p.allow_recursion = true;
        assert!(check(&p, "claude", 1).is_ok());
        let r = check(&p, "codex", 2).unwrap_err();
        assert_eq!(r.rule, Rule::Depth);
        assert!(r.reason.contains("max_depth = 2"));
        p.allowed = vec!["codex".into()];
        let r = check(&p, "gemini", 0).unwrap_err();
        assert_eq!(r.rule, Rule::Allowlist);
        assert!(r.remedy.contains("caesar policy allow gemini"));
        // Denied wins over allowed, and comes before depth.
        p.denied = vec!["codex".into()];
        let r = check(&p, "codex", 5).unwrap_err();
        assert_eq!(r.rule, Rule::Denied);
        assert!(r.remedy.contains("caesar agents enable codex"));
    }
}

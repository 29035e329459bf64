//! The roles caesar ships (`reviewer`, `implementer`, `investigator`): data
//! a project's `[[role]]` tables add to or replace by name.

use super::{IsolationPref, NetworkPref, Role};
use crate::launch::ProviderId;
use crate::oacp::Mode;

/// The three roles caesar ships.
pub fn builtin_roles() -> Vec<Role> {
    let role = |name: &str, purpose: &str, agents: &[&str], mode, isolation| Role {
        name: name.to_owned(),
        purpose: purpose.to_owned(),
        agents: agents.iter().map(|a| a.to_string()).collect(),
        mode,
        isolation,
        network: NetworkPref::Auto,
        timeout_ms: 10 * 60 * 1000,
        model: None,
        system_prompt_file: Some(format!("roles/{name}.md")),
    };
    vec![
        role(
            "reviewer",
            "Reviews a diff and reports bugs and regressions. Changes nothing.",
            &[ProviderId::Codex.as_str(), ProviderId::Antigravity.as_str()],
            Mode::ReadOnly,
            IsolationPref::Inplace,
        ),
        role(
            "implementer",
            "Implements a precise task and hands back a reviewed diff.",
            &[ProviderId::Codex.as_str(), ProviderId::Antigravity.as_str(), ProviderId::Opencode.as_str()],
            Mode::Write,
            IsolationPref::Worktree,
        ),
        role(
            "investigator",
            "Explores the code and explains a mechanism. Changes nothing.",
            &[ProviderId::Antigravity.as_str(), ProviderId::Codex.as_str(), ProviderId::Opencode.as_str()],
            Mode::ReadOnly,
            IsolationPref::Auto,
        ),
    ]
}

//! The vocabulary of a launch, at the bottom of the daemon: which provider
//! runs ([`ProviderId`]). It imports nothing of the daemon, so every other
//! module may name a provider without a string and without a circle.
//!
//! A provider's behaviour (argv, parser, environment, state directories) is
//! its adapter in `provider/`; this module only names it, and the session
//! protocol ([`SessionProtocol`]) a launch speaks on the agent's stdin.

mod plan;
mod provider_id;
pub mod runner;

use serde::{Deserialize, Serialize};

pub use plan::{BoxLimits, DriverKind, LaunchPlan, PromptRef, Stdin, Via, WorkshopPlan, WorktreeSection};
pub use provider_id::{ProviderId, UnknownProvider};

/// A two-way session protocol the supervisor opens before the agent's
/// output is read (ACP or codex app-server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionProtocol {
    /// The Agent Client Protocol.
    Acp,
    /// `codex app-server`'s JSON-RPC protocol.
    CodexAppServer,
}

impl SessionProtocol {
    /// The name on the supervisor's command line and in descriptions.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionProtocol::Acp => "acp",
            SessionProtocol::CodexAppServer => "codex_app_server",
        }
    }

    /// The protocol of a name written by [`SessionProtocol::as_str`].
    pub fn parse(name: &str) -> Option<SessionProtocol> {
        match name {
            "acp" => Some(SessionProtocol::Acp),
            "codex_app_server" => Some(SessionProtocol::CodexAppServer),
            _ => None,
        }
    }
}

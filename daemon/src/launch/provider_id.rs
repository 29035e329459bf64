//! [`ProviderId`]: one variant per native provider adapter, plus `Generic`
//! for an `[[agent]]` template. It is stored (a task's launch) and shown
//! with the ids caesar has always used, so rows written before it decode.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which adapter launches and reads an agent. The default is `Generic`, the
/// adapter that assumes nothing of the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderId {
    Claude,
    Codex,
    Gemini,
    Opencode,
    Copilot,
    CursorAgent,
    Qwen,
    Grok,
    Codebuddy,
    Antigravity,
    /// A user's `[[agent]]` template (argv from config, the generic parser).
    /// Also what a stored id this build does not know decodes as (a task
    /// written by a newer daemon): its output is read as plain words.
    #[default]
    #[serde(other)]
    Generic,
}

/// A name that is no provider id; the message lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProvider(pub String);

impl fmt::Display for UnknownProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = ProviderId::NATIVE.iter().map(|p| p.as_str()).collect();
        write!(f, "`{}` is not a provider id (known: {}, or generic)", self.0, known.join(", "))
    }
}

impl std::error::Error for UnknownProvider {}

impl ProviderId {
    /// Every native provider, in the order `caesar agents` lists them.
    pub const NATIVE: [ProviderId; 10] = [
        ProviderId::Claude,
        ProviderId::Codex,
        ProviderId::Gemini,
        ProviderId::Opencode,
        ProviderId::Copilot,
        ProviderId::CursorAgent,
        ProviderId::Qwen,
        ProviderId::Grok,
        ProviderId::Codebuddy,
        ProviderId::Antigravity,
    ];

    /// The id as stored, configured and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProviderId::Claude => "claude",
            ProviderId::Codex => "codex",
            ProviderId::Gemini => "gemini",
            ProviderId::Opencode => "opencode",
            ProviderId::Copilot => "copilot",
            ProviderId::CursorAgent => "cursor-agent",
            ProviderId::Qwen => "qwen",
            ProviderId::Grok => "grok",
            ProviderId::Codebuddy => "codebuddy",
            ProviderId::Antigravity => "antigravity",
            ProviderId::Generic => "generic",
        }
    }

    /// The native provider of this id; `None` for `generic` and anything
    /// else (an `[[agent]]` name is not a provider).
    pub fn native(id: &str) -> Option<ProviderId> {
        ProviderId::NATIVE.into_iter().find(|p| p.as_str() == id)
    }

    /// Whether this is a native adapter rather than a template.
    pub fn is_native(self) -> bool {
        self != ProviderId::Generic
    }
}

#[cfg(test)]
impl ProviderId {
    /// The provider of a known id, for tests that name providers as text.
    pub(crate) fn of(id: &str) -> ProviderId {
        id.parse().unwrap_or_else(|e| panic!("{e}"))
    }
}

impl std::str::FromStr for ProviderId {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<ProviderId, UnknownProvider> {
        match s {
            "generic" => Ok(ProviderId::Generic),
            other => ProviderId::native(other).ok_or_else(|| UnknownProvider(other.to_owned())),
        }
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ProviderId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ProviderId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_round_trips_through_its_stored_spelling() {
        for p in ProviderId::NATIVE.into_iter().chain([ProviderId::Generic]) {
            assert_eq!(p.as_str().parse::<ProviderId>(), Ok(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<ProviderId>(&json).unwrap(), p);
        }
    }

    #[test]
    fn an_unknown_id_is_refused_naming_the_known_ones() {
        let err = "cursor".parse::<ProviderId>().unwrap_err();
        assert_eq!(err, UnknownProvider("cursor".to_owned()));
        assert!(err.to_string().contains("cursor-agent"), "{err}");
        assert_eq!(ProviderId::native("generic"), None);
    }

    #[test]
    fn a_stored_id_this_build_does_not_know_reads_as_generic() {
        assert_eq!(serde_json::from_str::<ProviderId>("\"from-a-newer-daemon\"").unwrap(), ProviderId::Generic);
    }
}

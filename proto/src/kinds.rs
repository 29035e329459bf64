//! The choices every side names the same way: a task's mode, its isolation
//! (asked for, and decided), and its network request.
//!
//! One set of types for the CLI (which parses them from flags), the MCP
//! server (which reads them from tool arguments and describes them in its
//! schemas) and the daemon (which stores them and writes them into OACP
//! documents); the wire spelling is each type's `as_str`, and `parse`
//! reads it back.

use serde::{Deserialize, Serialize};

macro_rules! spelled {
    ($ty:ident, $what:literal, { $($variant:ident => $word:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $ty {
            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word,)+
                }
            }

            /// Parses the wire spelling; `None` for anything else.
            pub fn parse(s: &str) -> Option<$ty> {
                match s {
                    $($word $(| $alias)* => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<$ty, String> {
                $ty::parse(s).ok_or_else(|| {
                    format!(concat!("unknown ", $what, " `{}`: use {}"), s, [$($word),+].join(", "))
                })
            }
        }
    };
}

/// Read-only or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Mode {
    /// The agent must not change files (review, investigation).
    #[serde(rename = "read-only")]
    ReadOnly,
    /// The agent may edit files.
    #[serde(rename = "write")]
    Write,
}

spelled!(Mode, "mode", { ReadOnly => "read-only" | "readonly" | "read_only", Write => "write" });

/// Where the agent works, as decided: the workspace itself, or a disposable
/// git worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Directly in the workspace.
    Inplace,
    /// On a disposable git worktree.
    Worktree,
}

spelled!(Isolation, "isolation", { Inplace => "inplace", Worktree => "worktree" });

/// Where the agent works, as asked: a choice, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema), schemars(rename = "Isolation"))]
#[serde(rename_all = "lowercase")]
pub enum IsolationPref {
    /// Directly in the workspace.
    Inplace,
    /// On a disposable git worktree.
    Worktree,
    /// Picked from the mode and git availability.
    Auto,
}

spelled!(IsolationPref, "isolation", { Inplace => "inplace", Worktree => "worktree", Auto => "auto" });

/// Network access for the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema), schemars(rename = "Network"))]
#[serde(rename_all = "lowercase")]
pub enum NetworkPref {
    /// Open where the agent allows it, with a warning where it cannot.
    Auto,
    /// Required: the delegation fails when the agent cannot provide it.
    On,
    /// Closed where caesar knows how.
    Off,
}

spelled!(NetworkPref, "network", { Auto => "auto", On => "on", Off => "off" });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip_and_errors_name_the_choices() {
        for m in [Mode::ReadOnly, Mode::Write] {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
            assert_eq!(serde_json::to_value(m).unwrap(), serde_json::json!(m.as_str()));
        }
        assert_eq!(Mode::parse("readonly"), Some(Mode::ReadOnly));
        for i in [IsolationPref::Inplace, IsolationPref::Worktree, IsolationPref::Auto] {
            assert_eq!(i.as_str().parse::<IsolationPref>(), Ok(i));
        }
        assert_eq!("off".parse::<NetworkPref>(), Ok(NetworkPref::Off));
        assert_eq!("sideways".parse::<Mode>().unwrap_err(), "unknown mode `sideways`: use read-only, write");
        assert_eq!(Isolation::Worktree.to_string(), "worktree");
    }
}

//! The JSON spellings of the `caesar.v1` enums: a task's status, a pending
//! task's phase, a blocker's kind, what became of a task's changes and a
//! pending question's kind.
//!
//! On the wire these are enums; in every JSON face (MCP tool results,
//! `caesar --json`, the dashboard) they keep the words they always had
//! (`timed_out`, `rate_limit`, …). This is the one place a client turns one
//! into the other: `as_str` and `parse` on each generated enum, and `spell`
//! for a raw wire value, which may be one this build does not know (a newer
//! daemon): that reads `unrecognized`, never a panic.
//!
//! `UNSPECIFIED` spells as the empty string: "none" where the field is
//! optional (a task without a phase or a blocker), as an empty string was
//! before the enums.

use crate::pb::{BlockerKind, ChangesState, Phase, QuestionKind, TaskStatus, Verdict};

/// How a wire value this build does not know reads in JSON and text.
pub const UNRECOGNIZED: &str = "unrecognized";

/// A wire value outside the enum this build knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown {what} {value} on the wire: this build knows {choices}; the daemon and its client are of different \
     versions (restart the daemon with `caesar daemon stop`, then retry)"
)]
pub struct UnknownValue {
    /// What the value names, e.g. `task status`.
    pub what: &'static str,
    pub value: i32,
    /// The values this build knows, as spelled in JSON.
    pub choices: String,
}

macro_rules! spelled {
    ($ty:ident, $what:literal, { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            /// What the enum names, in messages.
            pub const WHAT: &'static str = $what;

            /// Every value but `UNSPECIFIED`, in wire order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The JSON spelling; `""` for `UNSPECIFIED`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $ty::Unspecified => "",
                    $($ty::$variant => $word,)+
                }
            }

            /// Reads a JSON spelling back; `None` for anything else, the
            /// empty string included.
            pub fn parse(s: &str) -> Option<$ty> {
                match s {
                    $($word => Some($ty::$variant),)+
                    _ => None,
                }
            }

            /// The spelling of raw wire value `raw`: [`UNRECOGNIZED`] for a
            /// value this build does not know.
            pub fn spell(raw: i32) -> &'static str {
                $ty::try_from(raw).map_or(UNRECOGNIZED, $ty::as_str)
            }

            /// Raw wire value `raw` as the enum, or an error naming it and
            /// the known values.
            pub fn decode(raw: i32) -> Result<$ty, UnknownValue> {
                $ty::try_from(raw).map_err(|_| UnknownValue {
                    what: $what,
                    value: raw,
                    choices: [$($word),+].join(", "),
                })
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

spelled!(TaskStatus, "task status", {
    Pending => "pending",
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
    TimedOut => "timed_out",
});

spelled!(Phase, "phase", {
    Preparing => "preparing",
    Queued => "queued",
    Starting => "starting",
    Parked => "parked",
    Waiting => "waiting",
});

spelled!(BlockerKind, "blocker kind", {
    Auth => "auth",
    RateLimit => "rate_limit",
    Permission => "permission",
    Network => "network",
    Budget => "budget",
});

spelled!(ChangesState, "changes state", {
    Applied => "applied",
    Discarded => "discarded",
});

spelled!(QuestionKind, "question kind", {
    Question => "question",
    Permission => "permission",
});

spelled!(Verdict, "verdict", {
    Pending => "pending",
    Running => "running",
    NeedsAnswer => "needs_answer",
    Parked => "parked",
    Succeeded => "succeeded",
    Blocked => "blocked",
    Failed => "failed",
    VerificationFailed => "verification_failed",
    Cancelled => "cancelled",
    TimedOut => "timed_out",
});

impl Verdict {
    /// The verdict as people read it, with its detail: `succeeded`,
    /// `blocked: auth`, `verification failed`, `needs answer`,
    /// `parked until 2026-12-05T14:00:00Z`, `timed out`, ….
    pub fn label(self, detail: &str) -> String {
        let with = |word: &str| if detail.is_empty() { word.to_owned() } else { format!("{word}: {detail}") };
        match self {
            Verdict::Unspecified => String::new(),
            Verdict::Blocked => with("blocked"),
            Verdict::Parked if detail.is_empty() => "parked".to_owned(),
            Verdict::Parked => format!("parked until {detail}"),
            Verdict::NeedsAnswer => "needs answer".to_owned(),
            Verdict::VerificationFailed => "verification failed".to_owned(),
            Verdict::TimedOut => "timed out".to_owned(),
            Verdict::Succeeded if detail.is_empty() => "succeeded".to_owned(),
            Verdict::Succeeded => format!("succeeded ({detail})"),
            other => other.as_str().to_owned(),
        }
    }

    /// The label of raw wire value `raw` (an older daemon sends none: the
    /// empty string; a newer one's unknown value reads `unrecognized`).
    pub fn label_of(raw: i32, detail: &str) -> String {
        Verdict::try_from(raw).map_or_else(|_| UNRECOGNIZED.to_owned(), |v| v.label(detail))
    }

    /// The exit code of a task with this verdict, as the README's table
    /// says: 0 succeeded; 1 failed, blocked or its verification failed;
    /// 4 cancelled; 5 timed out, or not ended when the wait did (pending,
    /// running, parked); 6 it needs an answer.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Succeeded => 0,
            Verdict::Failed | Verdict::Blocked | Verdict::VerificationFailed | Verdict::Unspecified => 1,
            Verdict::Cancelled => 4,
            Verdict::TimedOut | Verdict::Pending | Verdict::Running | Verdict::Parked => 5,
            Verdict::NeedsAnswer => 6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value spells, parses back, and survives the wire as an i32.
    macro_rules! round_trip {
        ($ty:ident, $count:literal) => {{
            assert_eq!($ty::ALL.len(), $count, "{}: every value but UNSPECIFIED", $ty::WHAT);
            for &v in $ty::ALL {
                let word = v.as_str();
                assert!(!word.is_empty() && word != UNRECOGNIZED, "{v:?}");
                assert_eq!($ty::parse(word), Some(v));
                assert_eq!(word.parse::<$ty>(), Ok(v));
                assert_eq!(v.to_string(), word);
                assert_eq!($ty::spell(v as i32), word);
                assert_eq!($ty::decode(v as i32), Ok(v));
            }
            assert_eq!($ty::Unspecified.as_str(), "");
            assert_eq!($ty::spell(0), "");
            assert_eq!($ty::parse(""), None);
            assert_eq!($ty::spell(99), UNRECOGNIZED);
            let e = $ty::decode(99).unwrap_err();
            assert_eq!((e.what, e.value), ($ty::WHAT, 99));
            assert!(e.to_string().contains("restart the daemon"), "{e}");
        }};
    }

    #[test]
    fn every_value_round_trips_and_an_unknown_one_reads_unrecognized() {
        round_trip!(TaskStatus, 6);
        round_trip!(Phase, 5);
        round_trip!(BlockerKind, 5);
        round_trip!(ChangesState, 2);
        round_trip!(QuestionKind, 2);
        round_trip!(Verdict, 10);
    }

    #[test]
    fn the_spellings_are_the_json_faces_words() {
        let words: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(words, ["pending", "running", "succeeded", "failed", "cancelled", "timed_out"]);
        let words: Vec<&str> = Phase::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(words, ["preparing", "queued", "starting", "parked", "waiting"]);
        let words: Vec<&str> = BlockerKind::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(words, ["auth", "rate_limit", "permission", "network", "budget"]);
        let words: Vec<&str> = ChangesState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(words, ["applied", "discarded"]);
        let words: Vec<&str> = QuestionKind::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(words, ["question", "permission"]);
    }

    #[test]
    fn unknown_words_and_values_name_the_choices() {
        assert_eq!(
            "done".parse::<TaskStatus>().unwrap_err(),
            "unknown task status `done`: use pending, running, succeeded, failed, cancelled, timed_out"
        );
        assert_eq!(
            BlockerKind::decode(-3).unwrap_err().to_string(),
            "unknown blocker kind -3 on the wire: this build knows auth, rate_limit, permission, network, budget; the \
             daemon and its client are of different versions (restart the daemon with `caesar daemon stop`, then retry)"
        );
    }

    #[test]
    fn a_verdict_reads_with_its_detail_and_maps_to_the_readme_exit_codes() {
        assert_eq!(Verdict::Blocked.label("auth"), "blocked: auth");
        assert_eq!(Verdict::Parked.label("2026-12-05T14:00:00Z"), "parked until 2026-12-05T14:00:00Z");
        assert_eq!(Verdict::VerificationFailed.label("failed"), "verification failed");
        assert_eq!(Verdict::NeedsAnswer.label("1 question"), "needs answer");
        assert_eq!(Verdict::TimedOut.label(""), "timed out");
        assert_eq!(Verdict::Succeeded.label(""), "succeeded");
        assert_eq!(Verdict::label_of(0, ""), "", "an older daemon sends none");
        assert_eq!(Verdict::label_of(99, ""), UNRECOGNIZED);
        let codes: Vec<u8> = Verdict::ALL.iter().map(|v| v.exit_code()).collect();
        assert_eq!(codes, [5, 5, 6, 5, 0, 1, 1, 1, 4, 5]);
    }
}

//! The engine's enums and their `caesar.v1` counterparts (issue 28): a task's
//! status, a pending task's phase, a blocker's kind, what became of a task's
//! changes and a pending question's kind. The one place the daemon turns
//! one into the other; the rest of `rpc*.rs` calls [`WireEnum`].
//!
//! A value the client sends that this build does not know, or
//! `UNSPECIFIED` where a value is needed, is INVALID_ARGUMENT naming the
//! known values, never a panic.

use caesar_proto::pb;
use tonic::Status;

use crate::engine::{Phase, QuestionKind};
use crate::oacp::BlockerKind;
use crate::store::{ChangesState, TaskStatus};

/// An engine enum with a `caesar.v1` counterpart.
pub trait WireEnum: Sized + Copy {
    /// The generated enum.
    type Wire;

    /// The generated value.
    fn to_wire(self) -> Self::Wire;

    /// The value as a message field holds it.
    fn wire(self) -> i32;

    /// Reads a message field back: an unknown value or `UNSPECIFIED` is
    /// INVALID_ARGUMENT naming the values this build knows.
    fn from_wire(raw: i32) -> Result<Self, Status>;
}

/// An optional engine value as a message field holds it: `UNSPECIFIED` (0)
/// for none.
pub fn wire_opt<E: WireEnum>(e: Option<E>) -> i32 {
    e.map_or(0, E::wire)
}

macro_rules! wire_enum {
    ($engine:ty => $wire:ident { $($e:ident => $w:ident),+ $(,)? }) => {
        impl WireEnum for $engine {
            type Wire = pb::$wire;

            fn to_wire(self) -> pb::$wire {
                match self {
                    $(Self::$e => pb::$wire::$w,)+
                }
            }

            fn wire(self) -> i32 {
                self.to_wire() as i32
            }

            fn from_wire(raw: i32) -> Result<Self, Status> {
                match pb::$wire::decode(raw).map_err(|e| Status::invalid_argument(e.to_string()))? {
                    $(pb::$wire::$w => Ok(Self::$e),)+
                    pb::$wire::Unspecified => Err(Status::invalid_argument(format!(
                        "{} is unspecified: use one of {}",
                        pb::$wire::WHAT,
                        pb::$wire::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
                    ))),
                }
            }
        }
    };
}

wire_enum!(TaskStatus => TaskStatus {
    Pending => Pending,
    Running => Running,
    Succeeded => Succeeded,
    Failed => Failed,
    Cancelled => Cancelled,
    TimedOut => TimedOut,
});

wire_enum!(Phase => Phase {
    Preparing => Preparing,
    Queued => Queued,
    Starting => Starting,
    Parked => Parked,
    Waiting => Waiting,
});

wire_enum!(BlockerKind => BlockerKind {
    Auth => Auth,
    RateLimit => RateLimit,
    Permission => Permission,
    Network => Network,
    Budget => Budget,
});

wire_enum!(ChangesState => ChangesState {
    Applied => Applied,
    Discarded => Discarded,
});

wire_enum!(QuestionKind => QuestionKind {
    Question => Question,
    Permission => Permission,
});

#[cfg(test)]
mod tests {
    use super::*;

    /// Every engine value crosses the wire and comes back itself, with the
    /// JSON spelling the engine's own `as_str` gives it (the store's, the
    /// dashboard's); `UNSPECIFIED` and an unknown value are refused by name.
    fn round_trip<E>(all: &[E], engine_word: fn(E) -> &'static str, wire_word: fn(E::Wire) -> &'static str)
    where
        E: WireEnum + PartialEq + std::fmt::Debug,
        E::Wire: Copy,
    {
        for &e in all {
            assert_eq!(E::from_wire(e.wire()).unwrap(), e);
            assert_eq!(wire_word(e.to_wire()), engine_word(e), "{e:?}");
            assert_eq!(wire_opt(Some(e)), e.wire());
        }
        assert_eq!(wire_opt::<E>(None), 0);
        let unspecified = E::from_wire(0).unwrap_err();
        assert_eq!(unspecified.code(), tonic::Code::InvalidArgument);
        assert!(unspecified.message().contains("is unspecified: use one of"), "{}", unspecified.message());
        let unknown = E::from_wire(4242).unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::InvalidArgument);
        assert!(unknown.message().contains("4242"), "{}", unknown.message());
    }

    #[test]
    fn every_engine_value_round_trips_with_its_spelling() {
        use TaskStatus as S;
        round_trip(
            &[S::Pending, S::Running, S::Succeeded, S::Failed, S::Cancelled, S::TimedOut],
            S::as_str,
            pb::TaskStatus::as_str,
        );
        round_trip(
            &[Phase::Preparing, Phase::Queued, Phase::Starting, Phase::Parked, Phase::Waiting],
            Phase::as_str,
            pb::Phase::as_str,
        );
        use BlockerKind as B;
        round_trip(&[B::Auth, B::RateLimit, B::Permission, B::Network], B::as_str, pb::BlockerKind::as_str);
        round_trip(&[ChangesState::Applied, ChangesState::Discarded], ChangesState::as_str, pb::ChangesState::as_str);
        round_trip(&[QuestionKind::Question, QuestionKind::Permission], QuestionKind::as_str, pb::QuestionKind::as_str);
    }

    #[test]
    fn a_status_filter_of_an_unknown_value_is_refused_with_the_choices() {
        let e = TaskStatus::from_wire(17).unwrap_err();
        assert_eq!(
            e.message(),
            "unknown task status 17 on the wire: this build knows pending, running, succeeded, failed, cancelled, \
             timed_out; the daemon and its client are of different versions (restart the daemon with `caesar daemon \
             stop`, then retry)"
        );
        let e = TaskStatus::from_wire(0).unwrap_err();
        assert_eq!(
            e.message(),
            "task status is unspecified: use one of pending, running, succeeded, failed, cancelled, timed_out"
        );
    }
}

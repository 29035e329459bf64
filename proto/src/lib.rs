//! The caesar API (`caesar.v1`) and everything a client needs to reach the
//! daemon: where its files live ([`paths`]), the local-socket transport
//! ([`ipc`]) and a connection that starts the daemon when none answers and
//! checks that both sides speak the same protocol ([`client`]).
//!
//! The generated types stop at the RPC layer: the daemon's engine has its
//! own types and converts at the edge.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod civil;
pub mod client;
pub mod codec;
pub mod duration;
pub mod enums;
pub mod instance;
pub mod ipc;
pub mod kinds;
pub mod paths;
pub mod peer;

/// Generated protobuf messages and the tonic client and server for `caesar.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("caesar.v1");
}

/// The API protocol number. A client refuses to work with a daemon that
/// answers `Ping` with another number (see [`client::connect_or_start`]).
/// 2 (issue 28): task status, phase, blocker kind, changes state and
/// question kind became enums, under new field numbers.
pub const PROTOCOL: u32 = 2;

/// The most bytes of one steer's text (issue 31): the daemon refuses more, and the clients
/// say so before sending it.
pub const STEER_MAX_BYTES: usize = 64 * 1024;

/// The version of this build, shared by the three binaries.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

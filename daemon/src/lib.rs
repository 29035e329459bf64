//! The caesar engine and the caesard daemon around it.
//!
//! The daemon owns all state: tasks, events, questions, reports and the
//! agents' processes. Clients (the `caesar` CLI, the `caesar-mcp` shim) reach
//! it over the `caesar.v1` gRPC API on a per-user local socket. See
//! ARCHITECTURE.md at the repository root for the map.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod agent_env;
pub mod agents;
pub mod blocking;
pub mod capped_json;
pub mod catalog;
pub mod channel_spec;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod config_edit;
pub mod dashboard;
pub mod driver;
pub mod durable;
pub mod engine;
pub mod error;
pub mod host;
pub mod http;
pub mod http_legacy_tasks;
pub mod http_scope;
pub mod ids;
pub mod init;
pub mod launch;
pub mod lifecycle;
pub mod marked;
pub mod notify;
pub mod oacp;
pub mod origin;
pub mod planner;
pub mod policy;
pub mod prompt;
pub mod provider;
pub mod quota;
pub mod quota_observed;
pub mod report;
// Issue 32: the review loop's pure half (findings, staleness, the reviewer's family).
pub mod request;
pub mod resolve;
pub mod review;
pub mod rpc;
pub mod rpc_fanout;
pub mod rpc_fork;
pub mod rpc_kinds;
pub mod rpc_mcp_tasks;
pub mod runner;
pub mod safe_fs;
pub mod sandbox;
pub mod server;
pub mod store;
pub mod supervisor;
pub mod tail;
pub mod task_dir;
pub mod trust;
pub mod verdict;
pub mod workshop;

/// The API protocol number this daemon answers `Ping` with.
/// `CAESAR_TEST_PROTOCOL` overrides it, so tests can play an older daemon.
pub fn protocol_number() -> u32 {
    std::env::var("CAESAR_TEST_PROTOCOL").ok().and_then(|v| v.parse().ok()).unwrap_or(caesar_proto::PROTOCOL)
}

//! caesar's MCP server, as a library: the eleven `caesar_*` tools over any
//! rmcp transport ([`server::Shim`]), the response shaping they share
//! ([`shape`]), and the in-agent return channel ([`channel::Channel`]).
//!
//! `caesar-mcp` serves it over stdio ([`cmd::main`]); `caesard` serves the same
//! implementation over streamable HTTP when `[http] listen` is set.

pub mod channel;
pub mod cmd;
pub mod daemon;
pub mod error;
pub mod fit;
pub mod fork;
pub mod legacy_result;
pub mod legacy_tasks;
pub mod legacy_wire;
pub mod output;
pub mod params;
pub mod roots;
pub mod schema;
pub mod server;
pub mod shape;
pub mod task_listen;
pub mod tasks;
pub mod tools;

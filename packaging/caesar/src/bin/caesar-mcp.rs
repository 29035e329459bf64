//! `caesar-mcp`, the stdio MCP server: a launcher for the `caesar` binary
//! beside it, which holds the server (`shim/`, library `caesar_mcp`).

#[path = "../launcher.rs"]
mod launcher;

fn main() -> std::process::ExitCode {
    launcher::exec_as("caesar-mcp")
}

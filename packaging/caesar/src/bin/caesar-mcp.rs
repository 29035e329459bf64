//! `caesar-mcp`, the stdio MCP server. Its code is the `caesar_mcp` library (`shim/`).

fn main() -> std::process::ExitCode {
    caesar_mcp::cmd::main()
}

//! The `caesar-mcp` binary's `main`: the stateless stdio MCP server that IDEs
//! launch. The binary itself lives in the `caesar` package (`packaging/caesar/`), so that
//! one build installs all three binaries.
//!
//! It exposes caesar's ten tools (`caesar_delegate`, `caesar_await`,
//! `caesar_status`, `caesar_logs`, `caesar_cancel`, `caesar_diff`,
//! `caesar_apply`, `caesar_list_agents`, `caesar_list_roles`,
//! `caesar_answer`) and forwards every call to caesard over the `caesar.v1`
//! API, starting the daemon when none answers. It keeps no task state: kill
//! it at any time, and a new one sees every task, question and report.
//!
//! stdout carries the MCP protocol only; logs go to stderr
//! (`CAESAR_MCP_LOG=debug` for more).

use crate::{channel, server, shape, tools};

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rmcp::ServiceExt;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "caesar-mcp",
    version = caesar_proto::VERSION,
    about = "caesar's MCP server over stdio: every tool call goes to caesard."
)]
struct Args {
    /// The workspace delegations run in. Default: the client's MCP roots, else the working directory.
    #[arg(long, env = "CAESAR_MCP_ROOT")]
    root: Option<PathBuf>,
    /// Expose only these tools (comma-separated), e.g. caesar_status,caesar_logs.
    #[arg(long, env = "CAESAR_MCP_TOOLS")]
    tools: Option<String>,
    /// A named tool set: full (all ten) or readonly (status, logs, diff, await and the list tools).
    #[arg(long, env = "CAESAR_MCP_PROFILE", default_value = "full")]
    profile: String,
    /// The response cap, in characters (at least 1000).
    #[arg(long, env = "CAESAR_MCP_MAX_CHARS", default_value_t = shape::DEFAULT_MAX_CHARS)]
    max_chars: usize,
    /// Serve the return channel of the task in CAESAR_TASK_ID instead (run by a delegated agent's CLI).
    #[arg(long)]
    channel: bool,
    /// Milliseconds between caesar_await progress notifications (50..=10000).
    #[arg(long, env = "CAESAR_MCP_PROGRESS_MS", default_value_t = 5_000, hide = true)]
    progress_ms: u64,
}

/// Everything `caesar-mcp` does: the stdio server, or `--channel`.
#[tokio::main(flavor = "current_thread")]
pub async fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAESAR_MCP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();

    let args = Args::parse();
    let tools = match tools::select(&args.profile, args.tools.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("caesar-mcp: {e}");
            return ExitCode::from(2);
        }
    };
    let paths = match caesar_proto::paths::Paths::from_env() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("caesar-mcp: cannot resolve caesar's directories: {e}");
            return ExitCode::from(2);
        }
    };
    if args.channel {
        return serve_channel(paths).await;
    }
    let root = match args.root.map(std::path::absolute).transpose() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("caesar-mcp: bad --root: {e}");
            return ExitCode::from(2);
        }
    };
    let settings = server::Settings {
        root,
        max_chars: args.max_chars.max(shape::MIN_MAX_CHARS),
        progress_every: Duration::from_millis(args.progress_ms.clamp(50, 10_000)),
        tools,
        cwd_is_root: true,
    };
    let shim = server::Shim::new(paths, settings);
    let running = match shim.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("caesar-mcp: MCP initialization failed: {e}");
            return ExitCode::from(1);
        }
    };
    match running.waiting().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("caesar-mcp: {e}");
            ExitCode::from(1)
        }
    }
}

async fn serve_channel(paths: caesar_proto::paths::Paths) -> ExitCode {
    let channel = match channel::Channel::from_env(paths) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("caesar-mcp --channel: {e}");
            return ExitCode::from(2);
        }
    };
    match channel.serve(rmcp::transport::stdio()).await {
        Ok(running) => match running.waiting().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("caesar-mcp --channel: {e}");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("caesar-mcp --channel: MCP initialization failed: {e}");
            ExitCode::from(1)
        }
    }
}

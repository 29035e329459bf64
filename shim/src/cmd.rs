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
    if !args.channel {
        // The schemas `tools/list` answers with, built while the rest starts and `initialize` is answered.
        tools::prewarm();
    }
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
    let (transport, written) = rewritten_stdio();
    let running = match shim.serve(transport).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("caesar-mcp: MCP initialization failed: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match running.waiting().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("caesar-mcp: {e}");
            ExitCode::from(1)
        }
    };
    // Everything rmcp wrote reaches stdout before the process ends.
    let _ = tokio::time::timeout(Duration::from_secs(5), written).await;
    code
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

/// Stdio with [`crate::legacy_wire`]'s rewriting between it and rmcp: each
/// inbound line is rewritten before rmcp parses it, each answer that needs
/// it is patched after rmcp wrote it. A line that is not JSON passes as is.
fn rewritten_stdio() -> ((tokio::io::DuplexStream, tokio::io::DuplexStream), tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (to_rmcp, rmcp_reads) = tokio::io::duplex(1 << 20);
    let (rmcp_writes, from_rmcp) = tokio::io::duplex(1 << 20);
    let pending = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let inbound = pending.clone();
    tokio::spawn(async move {
        let mut to_rmcp = to_rmcp;
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(mut v) => {
                    let patches = crate::legacy_wire::inbound(&mut v);
                    inbound.lock().unwrap_or_else(|p| p.into_inner()).extend(patches);
                    v.to_string()
                }
                Err(_) => line,
            };
            if to_rmcp.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                return;
            }
        }
        // Stdin closed: rmcp sees the end and stops.
    });
    let written = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        let mut lines = BufReader::new(from_rmcp).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(mut v) => {
                    crate::legacy_wire::outbound_by_id(&mut v, &mut pending.lock().unwrap_or_else(|p| p.into_inner()));
                    v.to_string()
                }
                Err(_) => line,
            };
            if out.write_all(format!("{line}\n").as_bytes()).await.is_err() || out.flush().await.is_err() {
                return;
            }
        }
    });
    ((rmcp_reads, rmcp_writes), written)
}

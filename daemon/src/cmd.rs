//! The `caesard` binary's `main`: the per-user caesar daemon. The engine is
//! in the rest of the library; this is only the wiring: arguments, logging,
//! runtime. The binary itself lives in the `caesar` package (`packaging/caesar/`), so that
//! one build installs all three binaries.

use std::process::ExitCode;

use crate::server::{Served, serve};
use crate::supervisor::{self, SUPERVISE_ARG, SuperviseArgs};
use caesar_proto::paths::Paths;

const USAGE: &str = "caesard: the caesar daemon. Usually started for you by `caesar` or `caesar-mcp`.

Usage: caesard [--version]

Environment:
  CAESAR_HOME     keep the socket, state and config under this directory
  CAESAR_SOCKET   the socket path alone
  CAESAR_LOG      log filter (default: info), written to <state>/caesard.log";

/// Everything `caesard` does: its internal entries (`__boxed`,
/// `__supervise`, `__kube`), `--version`, `--help`, or serve.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = internal_entry(&args) {
        return code;
    }
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => {
            println!("caesard {} (API protocol {})", caesar_proto::VERSION, crate::protocol_number());
            return ExitCode::SUCCESS;
        }
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("caesard: unknown argument `{other}`\n\n{USAGE}");
            return ExitCode::from(2);
        }
        None => {}
    }
    let paths = match Paths::from_env() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("caesard: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = init_logging(&paths) {
        eprintln!("caesard: cannot open the log in {}: {e}", paths.state_dir.display());
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("caesard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(paths.clone())) {
        Ok(Served::Stopped) => ExitCode::SUCCESS,
        Ok(Served::AlreadyRunning(record)) => match record {
            Some(r) if r.socket != std::path::absolute(&paths.socket).unwrap_or_else(|_| paths.socket.clone()) => {
                // Not a race between two auto-starts of one socket: this
                // daemon was asked to serve the same store at another socket.
                eprintln!(
                    "caesard: another caesard (pid {}) already serves the state directory {} at {}; clients reach it there whatever their socket, so this one does not start. To serve at {} instead, stop it first (`caesar daemon stop`)",
                    r.pid,
                    paths.state_dir.display(),
                    r.socket.display(),
                    paths.socket.display()
                );
                ExitCode::FAILURE
            }
            Some(r) => {
                eprintln!("caesard: already running (pid {}) for {}", r.pid, paths.socket.display());
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("caesard: already running for {}", paths.state_dir.display());
                ExitCode::SUCCESS
            }
        },
        Ok(Served::SocketTaken(ping)) => {
            eprintln!(
                "caesard: {} is served by another caesard (pid {}, state directory {}); it is left alone. Stop it, or give this daemon its own socket with CAESAR_SOCKET",
                paths.socket.display(),
                ping.pid,
                ping.state_dir
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            tracing::error!("caesard failed: {e:#}");
            eprintln!("caesard: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `caesar-task`'s `main`: a task's supervisor or its box, and nothing
/// else ([`crate::supervisor::executable`] says why it is a binary of its own).
pub fn task_main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    task_entry(&args).unwrap_or_else(|| {
        eprintln!(
            "caesar-task: the daemon starts this for a task's supervisor (`{SUPERVISE_ARG} …`) or box (`{} …`); it is not run by hand",
            crate::supervisor::boxed::BOXED_ARG
        );
        ExitCode::from(2)
    })
}

/// A task's own processes: its box and its supervisor; `None` for anything else.
fn task_entry(args: &[String]) -> Option<ExitCode> {
    match args.first().map(String::as_str) {
        Some(crate::supervisor::boxed::BOXED_ARG) => {
            let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
            Some(match crate::supervisor::boxed::BoxedArgs::parse(&argv) {
                #[cfg(unix)]
                Ok(a) => ExitCode::from(crate::supervisor::boxed::run(a).clamp(0, 255) as u8),
                #[cfg(not(unix))]
                Ok(_) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("caesard {}: {e}", crate::supervisor::boxed::BOXED_ARG);
                    ExitCode::from(2)
                }
            })
        }
        Some(SUPERVISE_ARG) => Some(match SuperviseArgs::parse(&args[1..]) {
            #[cfg(unix)]
            Ok(a) => ExitCode::from(supervisor::run(a) as u8),
            #[cfg(not(unix))]
            Ok(_) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("caesard {SUPERVISE_ARG}: {e}");
                ExitCode::from(2)
            }
        }),
        _ => None,
    }
}

/// The entries caesard runs itself as (the task's box, its supervisor, the
/// Kubernetes pod's phases); `None` for anything else.
fn internal_entry(args: &[String]) -> Option<ExitCode> {
    if let Some(code) = task_entry(args) {
        return Some(code);
    }
    match args.first().map(String::as_str) {
        #[cfg(all(unix, feature = "kubernetes"))]
        Some(crate::runner::kubernetes::pod::POD_ARG0)
            if args.get(1).map(String::as_str) == Some(crate::runner::kubernetes::pod::POD_ARG1) =>
        {
            Some(ExitCode::from(crate::runner::kubernetes::pod::main(&args[2..]) as u8))
        }
        #[cfg(all(unix, feature = "kubernetes"))]
        Some(crate::runner::kubernetes::pod::POD_ARG0) => {
            use crate::runner::kubernetes::phases;
            let code = match args.get(1).map(String::as_str) {
                Some(phases::FETCH_ARG) => phases::fetch_main(&args[2..]),
                Some(phases::COLLECT_ARG) => phases::collect_main(&args[2..]),
                Some(phases::RECEIVE_ARG) => phases::receive_main(&args[2..]),
                Some(phases::RESULT_ARG) => phases::result_main(&args[2..]),
                Some(phases::TAKEN_ARG) => phases::taken_main(&args[2..]),
                Some(crate::runner::kubernetes::stdin::STDIN_ARG) => {
                    crate::runner::kubernetes::stdin::stdin_main(&args[2..])
                }
                Some(crate::runner::kubernetes::channel::CHANNEL_ARG) => {
                    crate::runner::kubernetes::channel::channel_main(&args[2..])
                }
                _ => {
                    eprintln!(
                        "caesard __kube: use `pod`, `fetch`, `collect`, `receive`, `result`, `taken`, `stdin` or `channel`"
                    );
                    2
                }
            };
            Some(ExitCode::from(code as u8))
        }
        _ => None,
    }
}

/// Past this size the log is rotated at start-up (one previous file kept).
const LOG_ROTATE_BYTES: u64 = 10 * 1024 * 1024;

fn init_logging(paths: &Paths) -> std::io::Result<()> {
    paths.ensure_dirs()?;
    let log = paths.daemon_log();
    if std::fs::metadata(&log).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let _ = std::fs::rename(&log, log.with_extension("log.1"));
    }
    let file = std::fs::OpenOptions::new().create(true).append(true).open(paths.daemon_log())?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAESAR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::sync::Mutex::new(file)).init();
    Ok(())
}

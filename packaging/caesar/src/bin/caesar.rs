//! `caesar`: one binary for the command line, the daemon and the MCP server.
//!
//! The three share nearly all their code, and linking it is the longest step
//! of an install: one binary links it once (issue 30 item 8). It runs as what
//! it was started as: `caesard` and `caesar-mcp` are small launchers beside
//! it (`src/launcher.rs`) that start it under their own name. The daemon
//! starts its supervisors and boxes from `caesar-task` beside it, or from it
//! with the same internal arguments where that is missing.

use std::ffi::OsStr;
use std::path::Path;
use std::process::ExitCode;

/// What one start of the binary is.
#[derive(Debug, PartialEq, Eq)]
enum Role {
    Cli,
    Daemon,
    Mcp,
}

/// The role from the name the binary was started under (`argv[0]`) and its
/// first argument. caesard's internal entries (`__supervise`, `__boxed`,
/// `__kube`) start with two underscores and reach the daemon whatever the
/// name, because the daemon re-executes this file by its path.
fn role(arg0: Option<&OsStr>, first: Option<&OsStr>) -> Role {
    if first.and_then(OsStr::to_str).is_some_and(|a| a.starts_with("__")) {
        return Role::Daemon;
    }
    let name = arg0.map(Path::new).and_then(Path::file_stem).and_then(OsStr::to_str).unwrap_or("caesar");
    match name {
        "caesard" => Role::Daemon,
        "caesar-mcp" => Role::Mcp,
        _ => Role::Cli,
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let arg0 = args.next();
    let first = args.next();
    match role(arg0.as_deref(), first.as_deref()) {
        Role::Cli => caesar_cli::main(),
        Role::Daemon => {
            name_process(c"caesard");
            caesard::cmd::main()
        }
        Role::Mcp => {
            name_process(c"caesar-mcp");
            caesar_mcp::cmd::main()
        }
    }
}

/// The kernel names a process after the file it executed: started from a
/// launcher, the daemon and the MCP server would show as `caesar` in `ps`,
/// `top` and `pkill`. A failure only leaves that name.
fn name_process(name: &std::ffi::CStr) {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(name);
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role_of(arg0: &str, first: Option<&str>) -> Role {
        role(Some(OsStr::new(arg0)), first.map(OsStr::new))
    }

    #[test]
    fn the_name_it_was_started_under_decides() {
        assert_eq!(role_of("/usr/local/bin/caesar", Some("run")), Role::Cli);
        assert_eq!(role_of("caesar", None), Role::Cli);
        assert_eq!(role_of("/home/u/.cargo/bin/caesard", None), Role::Daemon);
        assert_eq!(role_of("caesard", Some("--version")), Role::Daemon);
        assert_eq!(role_of("caesar-mcp", Some("--root")), Role::Mcp);
        assert_eq!(role_of("caesar-mcp.exe", None), Role::Mcp);
    }

    #[test]
    fn the_daemons_internal_entries_reach_the_daemon_under_any_name() {
        assert_eq!(role_of("/opt/bin/caesar", Some("__supervise")), Role::Daemon);
        assert_eq!(role_of("caesar", Some("__boxed")), Role::Daemon);
        assert_eq!(role_of("caesar-mcp", Some("__kube")), Role::Daemon);
    }

    #[test]
    fn an_unknown_name_is_the_command_line() {
        assert_eq!(role_of("my-caesar", Some("ps")), Role::Cli);
        assert_eq!(role(None, None), Role::Cli);
    }
}

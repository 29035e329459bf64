//! The `caesard __supervise` process on its own, as the daemon starts it.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use caesard::supervisor::{self, SuperviseArgs};

fn now_ms() -> i64 {
    caesard::clock::now_ms()
}

fn supervise(task_dir: &Path, deadline_ms: i64, grace_ms: u64, program: &str, args: &[&str]) -> std::process::Child {
    supervise_with(task_dir, deadline_ms, grace_ms, false, program, args)
}

fn supervise_with(
    task_dir: &Path,
    deadline_ms: i64,
    grace_ms: u64,
    stdin_prompt: bool,
    program: &str,
    args: &[&str],
) -> std::process::Child {
    let a = SuperviseArgs {
        task_dir: task_dir.to_path_buf(),
        deadline_ms,
        grace_ms,
        log_cap: 0,
        stdin_close_after: None,
        session: None,
        stdin_prompt,
        program: program.to_owned(),
        args: args.iter().map(|s| s.to_string()).collect(),
    };
    Command::new(caesard_bin()).args(a.to_argv()).env("CAESAR_TASK_ID", "t_00000000abcd").spawn().unwrap()
}

#[test]
fn the_largest_grace_does_not_panic_the_supervisor() {
    // CAESAR_KILL_GRACE_MS=18446744073709551615 reaches the supervisor as is.
    let d = tempfile::tempdir().unwrap();
    let mut s = supervise(d.path(), now_ms() + 300, u64::MAX, "sleep", &["30"]);
    let started = Instant::now();
    let status = s.wait().unwrap();
    assert!(status.success(), "the supervisor failed: {status:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let exit = supervisor::read_exit(d.path()).unwrap();
    assert!(exit.timed_out && exit.signal == Some(15), "{exit:?}");
}

#[test]
fn the_supervisor_has_a_process_name_of_its_own() {
    let d = tempfile::tempdir().unwrap();
    let mut s = supervise(d.path(), now_ms() + 30_000, 100, "sleep", &["30"]);
    let comm = format!("/proc/{}/comm", s.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut name = String::new();
    while Instant::now() < deadline {
        name = std::fs::read_to_string(&comm).unwrap_or_default().trim().to_owned();
        // Named `caesar` by the kernel after its file, then `caesard` by
        // the one binary, then its own name: wait for the last.
        if name == "caesar-supervis" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // `pkill -x caesard` and `killall caesard` match this name.
    assert_eq!(name, "caesar-supervis", "the kernel keeps 15 bytes of `caesar-supervise`");
    // And agent.json now carries start times, so its pids can be checked.
    while supervisor::read_agent(d.path()).is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let agent = supervisor::read_agent_checked(d.path(), "t_00000000abcd").unwrap();
    assert!(agent.pid != 0 && agent.supervisor_pid == s.id(), "{agent:?}");
    assert!(agent.agent_start.is_some() && agent.supervisor_start.is_some());
    supervisor::request_stop(s.id());
    assert!(s.wait().unwrap().success());
    assert!(supervisor::read_exit(d.path()).unwrap().terminated);
}

/// Issue 19, prompts out of argv: a 300 KiB prompt (past the kernel's
/// 128 KiB for one argument) reaches the agent whole on its stdin, neither
/// the supervisor's command line nor the agent's holds it, and an argument
/// that stands for the prompt gets it filled in by the supervisor alone.
#[test]
fn the_supervisor_hands_the_prompt_over_on_stdin_and_fills_the_token() {
    let d = tempfile::tempdir().unwrap();
    let prompt = "# Task t_1\n".to_owned() + &"the secret plan ".repeat(300 * 1024 / 16);
    std::fs::write(d.path().join(caesard::prompt::FILE), &prompt).unwrap();
    let out = d.path().join("got");
    let script = format!("cat > '{}'; tr '\\0' ' ' < /proc/self/cmdline > '{}.argv'", out.display(), out.display());
    let mut s = supervise_with(d.path(), now_ms() + 30_000, 100, true, "sh", &["-c", &script]);
    let argv = std::fs::read_to_string(format!("/proc/{}/cmdline", s.id())).unwrap_or_default();
    assert!(!argv.contains("secret plan"), "the supervisor's argv holds no prompt");
    assert!(s.wait().unwrap().success());
    let exit = supervisor::read_exit(d.path()).unwrap();
    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), prompt, "the whole prompt came on stdin");
    let agent_argv = std::fs::read_to_string(format!("{}.argv", out.display())).unwrap();
    assert!(!agent_argv.contains("secret plan") && agent_argv.contains("cat >"), "{agent_argv}");

    // The token in an argument: filled by the supervisor (a small prompt, argv-only agent).
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join(caesard::prompt::FILE), "# Task t_2\ndo it").unwrap();
    let out = d.path().join("arg");
    let script = format!("printf %s \"$1\" > '{}'", out.display());
    let mut s = supervise(d.path(), now_ms() + 30_000, 100, "sh", &["-c", &script, "sh", caesard::prompt::TOKEN]);
    assert!(s.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "# Task t_2\ndo it");
}

/// The caesard binary, which the `caesar` package builds beside this test's
/// directory (`target/<profile>/`): `cargo build --workspace` first.
fn caesard_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let bin = profile_dir.join("caesard");
    assert!(bin.exists(), "{} is missing: run `cargo build --workspace` before the tests", bin.display());
    bin
}

//! One daemon per state directory, whoever starts it and from whatever
//! environment: a shell's `caesar` (with `XDG_RUNTIME_DIR`) and a
//! `caesar-mcp` that codex started with a minimal environment (HOME, PATH,
//! LANG, SHELL, TERM, TMPDIR and nothing else) compute different sockets
//! but must share one daemon, since they share one store. And a socket
//! served by another user is never talked to.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// A user's HOME with no `CAESAR_*` anywhere, and a project whose config
/// declares one fake agent.
struct Home {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

/// Which environment a process gets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// A login shell: `XDG_RUNTIME_DIR` is set.
    Shell,
    /// What codex gives the MCP servers it starts.
    Codex,
}

impl Home {
    fn new() -> Home {
        let home = tempfile::Builder::new().prefix("ci").tempdir_in("/tmp").unwrap();
        std::fs::DirBuilder::new().mode(0o700).create(home.path().join("xdg-run")).unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".caesar")).unwrap();
        std::fs::write(
            project.path().join(".caesar/config.toml"),
            format!(
                "[[agent]]\nid = \"ok\"\nbin = {:?}\nargs = [\"report\", \"success\", \"shared\"]\n",
                fake_agent().display().to_string()
            ),
        )
        .unwrap();
        Home { home, project }
    }

    fn env(&self, shape: Shape) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("HOME", self.home.path().display().to_string()),
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("LANG", "C.UTF-8".to_owned()),
            ("SHELL", "/bin/sh".to_owned()),
            ("TERM", "dumb".to_owned()),
            ("TMPDIR", std::env::temp_dir().display().to_string()),
        ];
        if shape == Shape::Shell {
            env.push(("XDG_RUNTIME_DIR", self.home.path().join("xdg-run").display().to_string()));
        }
        env
    }

    fn caesar(&self, shape: Shape, args: &[&str]) -> Output {
        Command::new(caesar_bin())
            .args(args)
            .current_dir(self.project.path())
            .env_clear()
            .envs(self.env(shape))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn caesar_json(&self, shape: Shape, args: &[&str]) -> Value {
        let o = self.caesar(shape, args);
        assert!(o.status.success(), "caesar {args:?} ({shape:?}): {}", String::from_utf8_lossy(&o.stderr));
        json(&String::from_utf8_lossy(&o.stdout))
    }

    /// The pids of every caesard process whose HOME is this one.
    fn daemons(&self) -> Vec<u32> {
        let marker = format!("HOME={}", self.home.path().display());
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            // The daemon runs from the one `caesar` binary and names itself
            // `caesard` (packaging/caesar), whichever file started it.
            let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else { continue };
            if comm.trim_end() != "caesard" || !alive(pid) {
                continue;
            }
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            // `caesard __supervise` shares the binary; only daemons count.
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if environ.split(|b| *b == 0).any(|v| v == marker.as_bytes())
                && !cmdline.windows(11).any(|w| w == b"__supervise")
            {
                pids.push(pid);
            }
        }
        pids
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = self.caesar(Shape::Shell, &["daemon", "stop"]);
        for pid in self.daemons() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL);
        }
    }
}

/// Runs `caesar-mcp` in the codex shape and calls one tool.
async fn mcp_call(h: &Home, tool: &str, args: Value) -> Value {
    let mut cmd = tokio::process::Command::new(bin_dir().join("caesar-mcp"));
    cmd.current_dir(h.project.path()).env_clear().envs(h.env(Shape::Codex));
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().unwrap();
    let client = ().serve(transport).await.expect("initialize");
    let Value::Object(args) = args else { panic!("arguments must be an object") };
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args)),
    )
    .await
    .expect("in time")
    .expect("tool call");
    assert_ne!(r.is_error, Some(true), "{tool} failed: {r:?}");
    let out = r.structured_content.clone().expect("structuredContent");
    let _ = client.cancel().await;
    out
}

#[tokio::test]
async fn a_shell_and_a_codex_started_shim_share_one_daemon() {
    let h = Home::new();
    // The shell starts the daemon on the XDG runtime socket.
    let started = h.caesar_json(Shape::Shell, &["daemon", "start", "--json"]);
    let pid = started["pid"].as_u64().unwrap() as u32;
    assert!(started["socket"].as_str().unwrap().contains("xdg-run"), "{started}");

    // codex's environment computes another socket, and finds the daemon
    // through the record in the state directory instead of starting one.
    let again = h.caesar_json(Shape::Codex, &["daemon", "start", "--json"]);
    assert_eq!(again["pid"].as_u64(), Some(pid as u64), "{again}");
    let status = h.caesar_json(Shape::Codex, &["daemon", "status", "--json"]);
    assert_eq!(status["pid"].as_u64(), Some(pid as u64), "{status}");

    // A task delegated from the shell is seen by a codex-started caesar-mcp.
    // The project's `[[agent]]` counts once the user trusts its config.
    let trust = h.caesar(Shape::Shell, &["trust"]);
    assert!(trust.status.success(), "{}", String::from_utf8_lossy(&trust.stderr));
    let run = h.caesar(Shape::Shell, &["run", "--agent", "ok", "--detach", "x"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let task = String::from_utf8_lossy(&run.stdout).trim().to_owned();
    assert!(task.starts_with("t_"), "{task}");
    let seen = mcp_call(&h, "caesar_await", json!({"task_ids": [task], "timeout_ms": 20000})).await;
    assert!(seen.to_string().contains("shared"), "{seen}");

    assert_eq!(h.daemons(), vec![pid], "one daemon for the state directory");
}

#[tokio::test]
async fn the_first_start_may_come_from_either_environment_even_at_once() {
    let h = Home::new();
    // Both start at the same moment: each client may spawn a daemon, one
    // wins the state directory's lock, and both clients end up with it.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| h.caesar_json(Shape::Codex, &["daemon", "start", "--json"]));
        let b = s.spawn(|| h.caesar_json(Shape::Shell, &["daemon", "start", "--json"]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a["pid"], b["pid"], "{a} {b}");
    let pid = a["pid"].as_u64().unwrap() as u32;
    // The loser, if one was spawned, has exited.
    assert!(eventually(Duration::from_secs(10), || h.daemons() == vec![pid]).await, "{:?}", h.daemons());
    let listed = mcp_call(&h, "caesar_list_roles", json!({})).await;
    assert!(listed.to_string().contains("implementer") || listed.is_object(), "{listed}");
    assert_eq!(h.daemons(), vec![pid]);
}

#[tokio::test]
async fn a_second_caesard_on_the_same_state_dir_refuses_and_says_where_the_first_is() {
    let h = Home::new();
    let started = h.caesar_json(Shape::Codex, &["daemon", "start", "--json"]);
    let socket = started["socket"].as_str().unwrap().to_owned();
    let o = Command::new(caesard_bin()).env_clear().envs(h.env(Shape::Shell)).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already serves the state directory") && stderr.contains(&socket), "{stderr}");
    assert_eq!(h.daemons().len(), 1);
}

#[tokio::test]
async fn a_socket_served_by_another_user_is_refused_before_anything_is_sent() {
    if !nix::unistd::geteuid().is_root() {
        // Serving a socket as another uid needs root; the check itself is
        // unit-tested in caesar-proto's ipc module.
        return;
    }
    let h = Home::new();
    // A shared directory (like /tmp) where uid 65534 serves a socket.
    let shared = h.home.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(h.home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = shared.join("caesard.sock");
    // The fake agent serves the socket (its relay goes nowhere: no
    // CAESAR_SOCKET) as uid 65534, until it is killed.
    let mut fake = Command::new(fake_agent())
        .args(["relay", socket.to_str().unwrap(), "hang"])
        .env_clear()
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || socket.exists()).await, "the fake daemon listens");

    let o = Command::new(caesar_bin())
        .args(["ps"])
        .current_dir(h.project.path())
        .env_clear()
        .envs(h.env(Shape::Codex))
        .env("CAESAR_SOCKET", &socket)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let _ = fake.kill();
    let _ = fake.wait();
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("uid 65534") && stderr.contains("not your caesard"), "{stderr}");
    // No daemon was started in its place, and the directory of the
    // explicit socket kept its mode.
    assert_eq!(h.daemons(), Vec::<u32>::new());
    assert_eq!(std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777, 0o777);
    assert!(Path::new(&socket).exists(), "the other user's socket was left alone");
}

#[tokio::test]
async fn a_runtime_directory_planted_as_a_symlink_is_refused_by_the_client_too() {
    // The client starts the daemon with an explicit socket, so the check of
    // a directory caesar picked itself must happen in the client.
    let h = Home::new();
    let elsewhere = h.home.path().join("elsewhere");
    std::fs::DirBuilder::new().mode(0o700).create(&elsewhere).unwrap();
    let state = h.home.path().join(".local/state/caesar");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&state).unwrap();
    std::os::unix::fs::symlink(&elsewhere, state.join("run")).unwrap();
    let o = h.caesar(Shape::Codex, &["ps"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("symlink"), "{stderr}");
    assert_eq!(h.daemons(), Vec::<u32>::new());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing was put where the link points");
}

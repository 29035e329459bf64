//! What a write task's agent can reach (issue 19), through the real
//! binaries, with caesar's directories and the home directory where they
//! are for a user (not under /tmp, which every task may write): the agent
//! tries to write `~/.bashrc`, the daemon's state and config directories,
//! to read a secret of the daemon's environment, and to auto-start a
//! daemon of its own; the kernel and caesar refuse each, while its
//! workspace, task directory and temp stay writable. `[[agent]] env`
//! values reach the agent and nothing caesar stores.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use caesar_proto::client;
use caesar_proto::paths::Paths;
use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

struct Daemon(std::process::Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A write refused by Landlock (EACCES) or, where the agent has a mount
/// namespace, by the read-only tmpfs hiding caesar's directories (EROFS).
fn refused(said: &str) -> bool {
    said.contains("ermission denied") || said.contains("ead-only file system")
}

fn grep_dir(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    for e in walk(dir) {
        if std::fs::read(&e).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
            hits.push(e);
        }
    }
    hits
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}

#[tokio::test]
async fn a_write_task_writes_only_its_own_places_and_sees_no_secret_of_the_daemon() {
    // Outside /tmp (writable to every task) and outside any git repository.
    let root = tempfile::tempdir_in(std::env::home_dir().unwrap()).unwrap();
    let (home, caesar_home, project) =
        (root.path().join("home"), root.path().join("caesar"), root.path().join("project"));
    for d in [&home, &caesar_home, &project.join(".caesar")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join(".bashrc"), "# the user's\n").unwrap();
    let c_bin = caesar_bin().display().to_string();
    let attack = format!(
        r#"O="$CAESAR_TASK_DIR"; try() {{ n=$1; shift; "$@" >"$O/out-$n" 2>&1; echo "rc=$?" >>"$O/out-$n"; }}
try bashrc sh -c 'echo evil >> "$HOME/.bashrc"'
try state sh -c 'echo evil > "$CAESAR_HOME/state/planted"'
try config sh -c 'mkdir -p "$CAESAR_HOME/config" && echo "[policy]" > "$CAESAR_HOME/config/config.toml"'
try ws sh -c 'echo x > "$PWD/by-agent"'
try tmp sh -c 'echo x > "${{TMPDIR:-/tmp}}/agent-temp"'
try cache sh -c 'mkdir -p "$HOME/.cache/x" && echo x > "$HOME/.cache/x/y"'
env > "$O/out-env"
try autostart env -u CAESAR_TASK_ID CAESAR_HOME="$CAESAR_TASK_DIR/other" {c_bin} ps"#
    );
    std::fs::write(
        project.join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"w\"\nbin = {:?}\nargs = {}\nenv = {{ API_KEY = \"sekrit-value-42\" }}\n",
            fake_agent().display().to_string(),
            serde_json::to_string(&["sh", &attack, "report", "success", "tried"]).unwrap()
        ),
    )
    .unwrap();
    let paths = Paths::under(&caesar_home);
    let _d = Daemon(
        Command::new(caesard_bin())
            .env("CAESAR_HOME", &caesar_home)
            .env("HOME", &home)
            .env("CAESAR_TRUST_PREFIX", root.path())
            .env("CAESAR_KILL_GRACE_MS", "300")
            .env("SECRET_X", "daemon-only-secret")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut c = client::wait_until_ready(&paths, Duration::from_secs(20)).await.unwrap();
    let req = pb::DelegateRequest {
        objective: "write where you should not".into(),
        agent: "w".into(),
        workspace: project.display().to_string(),
        mode: "write".into(),
        ..Default::default()
    };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let out = |n: &str| std::fs::read_to_string(Path::new(&t.task_dir).join(format!("out-{n}"))).unwrap_or_default();

    // Its own places stay writable.
    for n in ["ws", "tmp", "cache"] {
        assert!(out(n).contains("rc=0"), "{n}: {}", out(n));
    }
    assert!(project.join("by-agent").exists());
    // The environment: an allowlist, plus its [[agent]] env; not the daemon's secret.
    let env_seen = out("env");
    assert!(env_seen.contains("PATH=") && env_seen.contains("API_KEY=sekrit-value-42"), "{env_seen}");
    assert!(!env_seen.contains("SECRET_X") && !env_seen.contains("CAESAR_CHANNEL_SECRET"), "{env_seen}");
    // The [[agent]] env value is in nothing caesar keeps: the store, task.json, events.
    let hits = grep_dir(&paths.state_dir, b"sekrit-value-42");
    let hits: Vec<_> = hits.iter().filter(|p| !p.ends_with("out-env")).collect();
    assert!(hits.is_empty(), "the [[agent]] env value was stored: {hits:?}");
    // A daemon is not auto-started from inside the task, even with its id unset.
    let auto = out("autostart");
    assert!(auto.contains("inside a caesar task") && !auto.contains("rc=0"), "{auto}");
    assert!(!Path::new(&t.task_dir).join("other/run").exists(), "no daemon was started");

    if caesard::sandbox::kernel_abi().is_some() {
        for n in ["bashrc", "state", "config"] {
            let said = out(n);
            assert!(!said.contains("rc=0") && refused(&said), "{n} was written: {said}");
        }
        assert_eq!(std::fs::read_to_string(home.join(".bashrc")).unwrap(), "# the user's\n");
        assert!(!paths.state_dir.join("planted").exists());
        assert!(!paths.config_dir.join("config.toml").exists());
        let started = c
            .logs(pb::LogsRequest { task_id: id, raw: false, limit: 10, max_bytes: 0 })
            .await
            .unwrap()
            .into_inner()
            .events_json
            .into_iter()
            .find(|e| e.contains("\"started\""))
            .unwrap();
        assert!(started.contains("writes confined to its worktree"), "{started}");
    }
}

#[tokio::test]
async fn caesars_directories_under_tmp_are_out_of_every_tasks_reach_too() {
    // CAESAR_HOME under /tmp (as Env makes it), which every task may write:
    // a read-only and a write task try to plant a file in the state
    // directory, to open the store for writing, to write the config and
    // runtime directories, to move the daemon's socket away, and to make a
    // new entry beside caesar's directories. Their task directory, their
    // TMPDIR and the existing entries of /tmp stay writable.
    let attack = r#"O="$CAESAR_TASK_DIR"; T=$(basename "$O"); try() { n=$1; shift; "$@" >"$O/out-$n" 2>&1; echo "rc=$?" >>"$O/out-$n"; }
try state sh -c "echo evil > \"$CAESAR_HOME/state/planted-$T\""
try db sh -c ': >> "$CAESAR_HOME/state/caesar.db"'
try config sh -c "mkdir -p \"$CAESAR_HOME/config\" && echo '[policy]' > \"$CAESAR_HOME/config/config.toml\""
try run sh -c "echo evil > \"$CAESAR_HOME/run/planted-$T\""
try socket sh -c 'for s in "$CAESAR_HOME"/run/*.sock; do mv "$s" "$s.moved"; done'
try beside sh -c "echo evil > \"$CAESAR_HOME/beside-$T\""
try tmp sh -c "echo x > \"$TMPDIR/agent-temp\""
try mine sh -c "echo x > \"$O/mine\""
try files sh -c "echo x > \"$CAESAR_HOME/files/ok-$T\"""#;
    let mut env = Env::new(&[("w", &["sh", attack, "report", "success", "tried"])]);
    assert!(env.home.path().starts_with("/tmp"), "the point of this test");
    let mut c = env.start_daemon().await;
    let sockets_before: Vec<_> =
        std::fs::read_dir(&env.paths.runtime_dir).unwrap().flatten().map(|e| e.path()).collect();
    for mode in ["read-only", "write"] {
        let req = pb::DelegateRequest { mode: mode.into(), ..env.delegate_request("w", mode) };
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{mode}: {t:?}");
        let out =
            |n: &str| std::fs::read_to_string(Path::new(&t.task_dir).join(format!("out-{n}"))).unwrap_or_default();
        for n in ["tmp", "mine", "files"] {
            assert!(out(n).contains("rc=0"), "{mode}: {n} stays writable: {}", out(n));
        }
        if caesard::sandbox::kernel_abi().is_none() {
            continue;
        }
        for n in ["state", "db", "config", "run", "beside"] {
            let said = out(n);
            assert!(!said.contains("rc=0") && refused(&said), "{mode}: {n} was written: {said}");
        }
        assert!(!out("socket").contains("rc=0"), "{mode}: the socket was moved: {}", out("socket"));
        assert!(!env.paths.state_dir.join(format!("planted-{id}")).exists());
        assert!(!env.paths.runtime_dir.join(format!("planted-{id}")).exists());
        assert!(!env.home.path().join(format!("beside-{id}")).exists());
        assert!(!env.paths.config_dir.join("config.toml").exists());
    }
    let sockets_after: Vec<_> =
        std::fs::read_dir(&env.paths.runtime_dir).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(sockets_before, sockets_after, "the runtime directory is as it was");
    assert!(c.ping(pb::PingRequest {}).await.is_ok(), "the daemon still answers");
    // A new client still finds the daemon at its socket.
    let o = env.caesar(&["ps"]);
    assert!(o.status.success(), "{o:?}");
}

//! Test support: a real caesard on a temporary socket and state directory,
//! a project whose `.caesar/config.toml` declares fake agents, and helpers to
//! run the real `caesar` binary against it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use caesar_proto::client::{self, Client};
use caesar_proto::paths::Paths;
use caesar_proto::pb;

/// The directory holding the workspace's binaries: `CAESAR_TEST_BIN_DIR`
/// when set (a copy taken right after building, safe from another checkout
/// rebuilding into a shared target directory), else the target directory.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAESAR_TEST_BIN_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_BIN_EXE_fake-agent")).parent().expect("bin dir").to_path_buf()
}

pub fn fake_agent() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fake-agent"))
}

pub fn caesard_bin() -> PathBuf {
    bin_dir().join("caesard")
}

pub fn caesar_bin() -> PathBuf {
    bin_dir().join("caesar")
}

/// One isolated caesar installation: its own CAESAR_HOME and project.
pub struct Env {
    pub home: tempfile::TempDir,
    pub project: tempfile::TempDir,
    pub paths: Paths,
    daemons: Vec<Child>,
}

impl Env {
    /// A new installation whose project declares `agents` as
    /// `(id, [args...])` fake agents.
    pub fn new(agents: &[(&str, &[&str])]) -> Env {
        let home = tempfile::Builder::new().prefix("ch").tempdir_in("/tmp").expect("home");
        let project = tempfile::tempdir().expect("project");
        let paths = Paths::under(home.path());
        // Made before any task starts: a task's agent may write beneath it
        // (caesar's own directories beside it are carved out of its reach,
        // and with them new entries directly in CAESAR_HOME; issue 19).
        std::fs::create_dir_all(home.path().join("files")).expect("files dir");
        let env = Env { home, project, paths, daemons: Vec::new() };
        env.set_agents(agents);
        env
    }

    /// Rewrites the project's config to declare exactly these fake agents.
    pub fn set_agents(&self, agents: &[(&str, &[&str])]) {
        let mut config = String::new();
        for (id, args) in agents {
            config.push_str(&format!(
                "[[agent]]\nid = {:?}\nbin = {:?}\nargs = {}\n\n",
                id,
                fake_agent().display().to_string(),
                serde_json::to_string(args).expect("args")
            ));
        }
        std::fs::create_dir_all(self.project.path().join(".caesar")).expect("mkdir");
        std::fs::write(self.project.path().join(".caesar/config.toml"), config).expect("config");
    }

    pub fn workspace(&self) -> String {
        self.project.path().display().to_string()
    }

    /// Environment every process of this installation gets.
    pub fn envs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CAESAR_HOME", self.home.path().display().to_string()),
            ("CAESAR_KILL_GRACE_MS", "300".to_owned()),
            ("CAESAR_LOG", "debug".to_owned()),
            // The user trusts the temporary projects these tests make
            // (issue 19; `tests/tests/trust.rs` runs without this).
            ("CAESAR_TRUST_PREFIX", std::env::temp_dir().display().to_string()),
        ]
    }

    /// Starts caesard in the foreground of a child process and waits until
    /// it answers.
    pub async fn start_daemon(&mut self) -> Client {
        self.start_daemon_with(&[]).await
    }

    pub async fn start_daemon_with(&mut self, extra: &[(&str, &str)]) -> Client {
        self.spawn_daemon(extra);
        client::wait_until_ready(&self.paths, Duration::from_secs(20)).await.expect("daemon ready")
    }

    /// Starts caesard with extra environment and does not wait for it.
    pub fn spawn_daemon(&mut self, extra: &[(&str, &str)]) {
        let mut cmd = Command::new(caesard_bin());
        cmd.envs(self.envs())
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.daemons.push(cmd.spawn().expect("spawn caesard"));
    }

    /// A client of the running daemon (no auto-start).
    pub async fn client(&self) -> Client {
        client::connect(&self.paths).await.expect("connect").0
    }

    /// SIGKILLs every daemon this Env started and waits for the socket to go quiet.
    pub async fn kill_daemons(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        self.daemons.clear();
        assert!(client::wait_until_gone(&self.paths, Duration::from_secs(10)).await);
    }

    /// Runs the real `caesar` CLI in the project directory.
    pub fn caesar(&self, args: &[&str]) -> Output {
        Command::new(caesar_bin())
            .args(args)
            .current_dir(self.project.path())
            .envs(self.envs())
            .stdin(Stdio::null())
            .output()
            .expect("run caesar")
    }

    /// A write task's request: the tests built on it were written when write
    /// was the default mode, and most of them need its worktree, its branch
    /// or its writes. A task without a mode is read-only (issue 30); a test of
    /// that default sets `mode` back to empty.
    /// Runs the real `caesar` CLI as Claude Code would: beneath a process
    /// the kernel names `claude` (a shell script of that name that does not
    /// exec), which is how the daemon knows Claude Code is the caller.
    pub fn caesar_under_claude_code(&self, args: &[&str]) -> Output {
        let dir = self.files_dir().join("claude-code");
        std::fs::create_dir_all(&dir).unwrap();
        let host = dir.join(caesard::launch::ProviderId::Claude.as_str());
        std::fs::write(&host, "#!/bin/sh\n\"$@\"\nexit $?\n").unwrap();
        std::fs::set_permissions(&host, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        Command::new(&host)
            .arg(caesar_bin())
            .args(args)
            .current_dir(self.project.path())
            .envs(self.envs())
            .stdin(Stdio::null())
            .output()
            .expect("run caesar under claude")
    }

    pub fn delegate_request(&self, agent: &str, objective: &str) -> pb::DelegateRequest {
        pb::DelegateRequest {
            objective: objective.to_owned(),
            agent: agent.to_owned(),
            workspace: self.workspace(),
            mode: "write".to_owned(),
            ..Default::default()
        }
    }

    /// The pid of the daemon that answers, via Ping.
    pub async fn daemon_pid(&self) -> u32 {
        let (_, ping) = client::connect(&self.paths).await.expect("connect");
        ping.pid
    }

    /// A path for the test's own files, beneath [`Env::files_dir`] (which
    /// a task's agent can write).
    pub fn file(&self, name: &str) -> PathBuf {
        self.files_dir().join(name)
    }

    /// `$CAESAR_HOME/files`, made by [`Env::new`].
    pub fn files_dir(&self) -> PathBuf {
        self.home.path().join("files")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Stop any daemon, whoever started it, and whatever its tasks left.
        let paths = self.paths.clone();
        // Drop may run inside a test's runtime, where no other runtime can
        // block: do the shutdown call from a thread of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                if let Ok((mut c, _)) = client::connect(&paths).await {
                    let _ = c.shutdown(pb::ShutdownRequest { cancel_tasks: true, only_if_idle: false }).await;
                }
            });
        })
        .join();
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Waits for a task to finish and returns its view.
pub async fn await_one(c: &mut Client, task_id: &str, timeout: Duration) -> pb::TaskView {
    let r = c
        .r#await(pb::AwaitRequest {
            task_ids: vec![task_id.to_owned()],
            timeout_ms: timeout.as_millis() as u64,
            wake_on_attention: false,
        })
        .await
        .expect("await")
        .into_inner();
    r.tasks.into_iter().next().expect("one task")
}

/// Whether a process is alive (a zombie counts as dead).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next().map(str::to_owned));
            !matches!(state.as_deref(), Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// The task supervisor above `pid`: its nearest ancestor named
/// `caesar-supervis` (an agent runs in its task's box, beneath the box's
/// launcher and init: issue 29). `pid` itself when there is none.
#[allow(dead_code)]
pub fn supervisor_of(pid: u32) -> u32 {
    let mut cur = pid;
    for _ in 0..16 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{cur}/stat")) else { break };
        let comm = stat.find('(').zip(stat.rfind(')')).map(|(a, b)| stat[a + 1..b].to_owned()).unwrap_or_default();
        if comm == "caesar-supervis" {
            return cur;
        }
        let ppid: u32 = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(1).unwrap().parse().unwrap();
        if ppid <= 1 {
            break;
        }
        cur = ppid;
    }
    pid
}

/// Pids recorded by the fake agent's `pid`, `child` and `escape` steps.
pub fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Polls `cond` until it holds or `limit` passes.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// Parses a JSON document.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Runs git in `dir` with a fixed identity and `main` as the default branch;
/// panics with git's stderr when it fails. Returns its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Makes `dir` a git repository whose one commit, `base`, holds what it has.
pub fn commit_base(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
}

/// A process's peak resident memory in KiB (`VmHWM` of its `/proc/<pid>/status`).
pub fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in the process's status")
}

/// A shell script for the fake agent that tries attacks from inside its
/// task: `try NAME CMD...` runs CMD, keeping its output and exit code in
/// `$CAESAR_HOME/files/out/NAME` (read back with [`attack_out`]); `$C` is
/// the `caesar` binary and `$M` the `caesar-mcp` one. It touches `out/done`
/// at the end.
pub fn attack_script(body: &str) -> String {
    format!(
        r#"C={caesar}; M={mcp}; O="$CAESAR_HOME/files/out"; mkdir -p "$O"
try() {{ n=$1; shift; "$@" >"$O/$n" 2>&1; echo "rc=$?" >>"$O/$n"; }}
{body}
touch "$O/done""#,
        caesar = caesar_bin().display(),
        mcp = bin_dir().join("caesar-mcp").display(),
    )
}

/// What [`attack_script`]'s `try NAME` kept, or `<no NAME>`.
pub fn attack_out(env: &Env, name: &str) -> String {
    std::fs::read_to_string(env.file("out").join(name)).unwrap_or_else(|_| format!("<no {name}>"))
}

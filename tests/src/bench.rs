//! What the `caesar-bench*` tools share: a project committed to git with its
//! `.caesar/config.toml`, and a real caesard on a scratch `CAESAR_HOME` that trusts the
//! temporary projects (issue 19) and is shut down at the end. One copy, rather than one a tool.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use caesar_proto::client::{self, Client};
use caesar_proto::paths::Paths;
use caesar_proto::pb;

/// A bench's result: any error ends it with its message.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Runs git in `dir` with a fixed identity and `main` as the default branch.
pub fn git(dir: &Path, args: &[&str]) -> BenchResult<()> {
    let ok = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@b", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()?
        .success();
    if ok { Ok(()) } else { Err(format!("git {args:?} failed").into()) }
}

/// Writes `config` as the project's `.caesar/config.toml` and a `.gitignore` that keeps
/// `.caesar/` out, and commits what the project holds as `base`.
pub fn commit_project(project: &Path, config: &str) -> BenchResult<()> {
    std::fs::create_dir_all(project.join(".caesar"))?;
    std::fs::write(project.join(".caesar/config.toml"), config)?;
    std::fs::write(project.join(".gitignore"), ".caesar/\n")?;
    git(project, &["init", "-q"])?;
    git(project, &["add", "-A"])?;
    git(project, &["commit", "-qm", "base"])
}

/// A caesard started from `bin_dir` on `home`, and a client of it.
pub struct BenchDaemon {
    child: Child,
    /// A client of the daemon.
    pub client: Client,
}

impl BenchDaemon {
    /// Starts caesard with `CAESAR_HOME=home`, `CAESAR_LOG=log`, the temporary directory trusted,
    /// and `env`, and waits until it answers.
    pub async fn start(bin_dir: &Path, home: &Path, log: &str, env: &[(&str, &str)]) -> BenchResult<BenchDaemon> {
        let child = Command::new(bin_dir.join("caesard"))
            .env("CAESAR_HOME", home)
            .env("CAESAR_LOG", log)
            .env("CAESAR_TRUST_PREFIX", std::env::temp_dir())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let client = client::wait_until_ready(&Paths::under(home), Duration::from_secs(20)).await?;
        Ok(BenchDaemon { child, client })
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Shuts the daemon down, its tasks cancelled; waits up to 30 s for it to exit, then kills it.
    pub async fn stop(mut self) {
        let _ = self.client.shutdown(pb::ShutdownRequest { cancel_tasks: true, only_if_idle: false }).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), async {
            while self.child.try_wait().ok().flatten().is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Kubernetes simulator (`k8s-sim`, `crate::k8s_sim`) as the tests start it, for a bench's
/// remote mode: on 127.0.0.1, namespace `caesar`, its kubeconfig and a bare repository standing
/// for the team's git server in its own temporary directory, and `path` as "the image" (the
/// PATH its pods' containers get). It stops, killing every pod process, when this is dropped.
pub struct SimCluster {
    child: Child,
    dir: tempfile::TempDir,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
}

impl SimCluster {
    /// Starts `bin_dir/k8s-sim` and waits (up to 5 s) for the port it chose.
    pub fn start(bin_dir: &Path, path: &str) -> BenchResult<SimCluster> {
        SimCluster::start_with(bin_dir, path, &[])
    }

    /// [`SimCluster::start`] with more of the simulator's arguments (`--kubelet light`).
    pub fn start_with(bin_dir: &Path, path: &str, extra: &[&str]) -> BenchResult<SimCluster> {
        let dir = tempfile::Builder::new().prefix("k8s").tempdir_in("/tmp")?;
        let port_file = dir.path().join("port");
        let child = Command::new(bin_dir.join("k8s-sim"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--port-file")
            .arg(&port_file)
            .args(["--namespace", "caesar", "--path", path])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut sim = SimCluster { child, dir, port: 0 };
        let mut port = None;
        for _ in 0..500 {
            if let Some(p) = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse::<u16>().ok()) {
                port = Some(p);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let port = port.ok_or("k8s-sim wrote no port within 5 s")?;
        sim.port = port;
        git(sim.dir.path(), &["init", "-q", "--bare", "remote.git"])?;
        std::fs::write(
            sim.kubeconfig(),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: caesar\ncurrent-context: sim\nusers:\n- name: sim\n  user: {{}}\n"
            ),
        )?;
        Ok(sim)
    }

    /// The simulator's counters (`/sim/stats`: open log streams, watches).
    pub fn stats(&self) -> BenchResult<serde_json::Value> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(s, "GET /sim/stats HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        let json = body.lines().find(|l| l.trim_start().starts_with('{')).unwrap_or(body);
        Ok(serde_json::from_str(json)?)
    }

    /// The simulator's kubeconfig.
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The `[runner]` settings that send a project's tasks to this simulator, for its
    /// `.caesar/config.local.toml`.
    pub fn runner_config(&self) -> String {
        format!(
            "[runner]\nkind = \"kubernetes\"\n[runner.kubernetes]\nkubeconfig = {:?}\nnamespace = \"caesar\"\nimage = \"caesar-agent:1\"\ngit_remote = {:?}\nttl_seconds = 600\n",
            self.kubeconfig().display().to_string(),
            self.dir.path().join("remote.git").display().to_string(),
        )
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        // Closing its stdin stops it, and with it every pod process.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

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

//! The pod's two git phases, in containers of their own so that the agent
//! container holds neither git credential (issue 16).
//!
//! - `caesard __kube fetch` is the init container, with the read
//!   credential (the Secret `git_read_secret`, as environment only): it
//!   fetches the task's base into the agent's repository `/ws/repo`, and
//!   into a git directory of its own on the `/git` volume, which only the
//!   init and collector containers mount.
//! - `caesard __kube collect` is the collector container, with the write
//!   credential (`git_write_secret`): it waits until the agent container's
//!   wrapper says the supervisor ended (`/ws/.pod/agent.done`), commits the
//!   work tree with its own git directory (never the agent's `.git`, whose
//!   config and hooks the agent controls) and pushes `…/result`, then tells
//!   the wrapper the commit (`/ws/.pod/pushed.json`).
//!
//! A failed fetch is written to `/ws/.pod/fetch.error` and the init
//! container succeeds, so that the wrapper reports it as the task's ending
//! as it reports every other failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `caesard __kube fetch`.
pub const FETCH_ARG: &str = "fetch";
/// `caesard __kube collect`.
pub const COLLECT_ARG: &str = "collect";
/// Where the init and collector containers keep their git directory.
pub const GIT_VOLUME: &str = "/git";
/// The wrapper's and the git phases' notes to each other, under `/ws`.
pub const NOTES: &str = ".pod";
/// Written by the init container when the base could not be fetched.
pub const FETCH_ERROR: &str = "fetch.error";
/// Written by the wrapper once the supervisor ended.
pub const AGENT_DONE: &str = "agent.done";
/// Written by the collector: the result commit, or why there is none.
pub const PUSHED: &str = "pushed.json";

/// What the collector hands back to the wrapper.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pushed {
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// The pod's directories: (`/ws`, the notes directory, the collector's git directory).
pub fn dirs() -> (PathBuf, PathBuf, PathBuf) {
    let root = std::env::var_os("CAESAR_POD_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    let ws = root.join(super::manifest::WS.trim_start_matches('/'));
    let notes = ws.join(NOTES);
    let git_dir = root.join(GIT_VOLUME.trim_start_matches('/')).join("repo.git");
    (ws, notes, git_dir)
}

fn flag(argv: &[String], name: &str) -> Result<String, String> {
    let i = argv.iter().position(|a| a == name).ok_or_else(|| format!("{name} is required"))?;
    argv.get(i + 1).cloned().ok_or_else(|| format!("{name} needs a value"))
}

/// Runs git; `git_dir`/`work_tree` set its repository explicitly.
pub fn git(dir: &Path, git_dir: Option<&Path>, work_tree: Option<&Path>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir);
    if let Some(g) = git_dir {
        cmd.arg("--git-dir").arg(g);
    }
    if let Some(w) = work_tree {
        cmd.arg("--work-tree").arg(w);
    }
    let o = cmd.args(args).stdin(Stdio::null()).output().map_err(|e| format!("cannot run git: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
    } else {
        Err(format!("git {}: {}", args.first().unwrap_or(&""), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// The base, fetched from the remote into `repo` (the agent's) and from
/// there into `git_dir` (the collector's). The remote is never written into
/// a repository's config, nor into `FETCH_HEAD`.
fn fetch(repo: &Path, git_dir: &Path, remote: &str, base: &str) -> Result<(), String> {
    std::fs::create_dir_all(repo).map_err(|e| format!("cannot create {}: {e}", repo.display()))?;
    git(repo, None, None, &["init", "-q"])?;
    let spec = format!("+{base}:refs/caesar/base");
    git(repo, None, None, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", remote, &spec])?;
    git(repo, None, None, &["checkout", "-q", "--detach", base])?;
    std::fs::create_dir_all(git_dir).map_err(|e| format!("cannot create {}: {e}", git_dir.display()))?;
    git(git_dir, None, None, &["init", "-q", "--bare"])?;
    let from = repo.display().to_string();
    git(git_dir, Some(git_dir), None, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", &from, &spec])?;
    Ok(())
}

/// `caesard __kube fetch --remote R --base OID`: 0 unless even the failure
/// could not be written.
pub fn fetch_main(argv: &[String]) -> i32 {
    let (ws, notes, git_dir) = dirs();
    let result = (|| {
        let remote = flag(argv, "--remote")?;
        let base = flag(argv, "--base")?;
        fetch(&ws.join("repo"), &git_dir, &remote, &base)
            .map_err(|e| format!("cannot fetch the task's workspace from {remote}: {e}"))
    })();
    let _ = std::fs::create_dir_all(&notes);
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("caesard __kube {FETCH_ARG}: {e}");
            if std::fs::write(notes.join(FETCH_ERROR), &e).is_ok() { 0 } else { 1 }
        }
    }
}

/// The work tree as a commit on the base, made with the collector's own
/// git directory and index, pushed as the task's result ref.
fn push_result(ws: &Path, git_dir: &Path, remote: &str, task_id: &str, base: &str) -> Result<String, String> {
    let work = ws.join("repo");
    let g = Some(git_dir);
    git(&work, g, Some(&work), &["read-tree", base])?;
    git(&work, g, Some(&work), &["add", "-A"])?;
    let tree = git(&work, g, Some(&work), &["write-tree"])?;
    let base_tree = git(&work, g, None, &["rev-parse", &format!("{base}^{{tree}}")])?;
    let oid = if tree == base_tree {
        base.to_owned()
    } else {
        let c = ["-c", "user.name=caesar", "-c", "user.email=caesar@localhost"];
        let mut args: Vec<&str> = c.to_vec();
        args.extend(["commit-tree", &tree, "-p", base, "-m", "caesar: task result"]);
        git(&work, g, None, &args)?
    };
    let refspec = format!("+{oid}:{}", super::manifest::result_ref(task_id));
    git(&work, g, None, &["push", "-q", "--no-verify", remote, &refspec])?;
    Ok(oid)
}

/// `caesard __kube collect --task-id T --remote R --base OID`: waits for the
/// agent's end, pushes the result, says which commit it is.
pub fn collect_main(argv: &[String]) -> i32 {
    let (ws, notes, git_dir) = dirs();
    let args = (|| Ok::<_, String>((flag(argv, "--task-id")?, flag(argv, "--remote")?, flag(argv, "--base")?)))();
    let (task_id, remote, base) = match args {
        Ok(a) => a,
        Err(e) => {
            eprintln!("caesard __kube {COLLECT_ARG}: {e}");
            return 2;
        }
    };
    // Until the agent's wrapper says it ended (the pod's deletion or its
    // deadline stops this container otherwise).
    while !notes.join(AGENT_DONE).exists() && !notes.join(FETCH_ERROR).exists() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let pushed = if notes.join(FETCH_ERROR).exists() {
        Pushed { result: None, error: Some("the workspace was never fetched".to_owned()) }
    } else {
        match push_result(&ws, &git_dir, &remote, &task_id, &base) {
            Ok(oid) => Pushed { result: Some(oid), error: None },
            Err(e) => Pushed { result: None, error: Some(format!("cannot push the task's result to {remote}: {e}")) },
        }
    };
    let json = serde_json::to_vec(&pushed).unwrap_or_default();
    let tmp = notes.join(".pushed.tmp");
    let written = std::fs::write(&tmp, json).and_then(|_| std::fs::rename(&tmp, notes.join(PUSHED)));
    i32::from(written.is_err() || pushed.error.is_some())
}

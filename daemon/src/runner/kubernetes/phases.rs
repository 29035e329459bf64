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
//!   wrapper released its lock on `/ws/.pod/run.lock` (it holds it while the
//!   supervisor runs; the agent cannot release another process's lock, and a
//!   lock file it replaced is told by its inode, which the init container
//!   recorded on `/git`, a volume the agent does not mount), commits the
//!   work tree with its own git directory (never the agent's `.git`, whose
//!   config and hooks the agent controls) and pushes `…/result`, then tells
//!   the wrapper the commit (`/ws/.pod/pushed.json`) and the daemon (its own
//!   termination message, which the agent cannot write).
//! - With `--workspace api` (no git server, see [`super::bundle`]) the base
//!   comes as a bundle the daemon streams into `caesard __kube receive`
//!   (exec'd in the init container), and the result leaves as a bundle on
//!   `/git` that the daemon reads with `caesard __kube result` (exec'd in the
//!   collector, which lingers until `caesard __kube taken` or
//!   [`LINGER`]).
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
/// The wrapper's lock, held while the supervisor runs (made by the init container).
pub const LOCK: &str = "run.lock";
/// Written by the wrapper once it holds [`LOCK`] (before the agent starts).
pub const LOCKED: &str = "run.locked";
/// On `/git`: the device and inode of the [`LOCK`] the init container made.
pub const LOCK_ID: &str = "run.lock.id";
/// On `/git`: the base bundle the daemon streamed in (`--workspace api`).
pub const BASE_BUNDLE: &str = "base.bundle";
/// On `/git`: the result bundle the daemon takes (`--workspace api`).
pub const RESULT_BUNDLE: &str = "result.bundle";
/// On `/git`: the collector's answer, for `__kube result`.
pub const RESULT_JSON: &str = "result.json";
/// On `/git`: the daemon took the result; the collector may end.
pub const TAKEN: &str = "taken";
/// `caesard __kube receive` (exec'd in the init container).
pub const RECEIVE_ARG: &str = "receive";
/// `caesard __kube result` (exec'd in the collector).
pub const RESULT_ARG: &str = "result";
/// `caesard __kube taken` (exec'd in the collector).
pub const TAKEN_ARG: &str = "taken";
/// The ref a bundle carries its commit under.
pub const BUNDLE_REF: &str = "refs/caesar/bundle";
/// How long the collector keeps an untaken result bundle (`--workspace api`).
pub const LINGER: Duration = Duration::from_secs(30 * 60);
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

/// What every git caesar runs is told first: a repository's config is its
/// committer's (or an agent's) to write, and these settings would make git
/// run programs it names (issue 29): an fsmonitor hook on every status, and
/// hooks on commits and pushes.
pub(crate) const UNTRUSTED_CONFIG_OFF: [&str; 4] = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"];

/// Runs git; `git_dir`/`work_tree` set its repository explicitly.
pub fn git(dir: &Path, git_dir: Option<&Path>, work_tree: Option<&Path>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("git");
    cmd.args(UNTRUSTED_CONFIG_OFF).arg("-C").arg(dir);
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

/// Where the workspace comes from and goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Transport {
    /// The team's git remote.
    Remote(String),
    /// Bundles exchanged with the daemon over `pods/exec`.
    Api,
}

fn transport(argv: &[String]) -> Result<Transport, String> {
    if argv.iter().any(|a| a == "--workspace") {
        return match flag(argv, "--workspace")?.as_str() {
            "api" => Ok(Transport::Api),
            other => Err(format!("--workspace is {other:?}: use \"api\" or --remote")),
        };
    }
    flag(argv, "--remote").map(Transport::Remote)
}

/// The root of the `/git` volume (only the init and collector containers mount it).
fn git_root(git_dir: &Path) -> PathBuf {
    git_dir.parent().map(Path::to_path_buf).unwrap_or_else(|| git_dir.to_path_buf())
}

/// The base, fetched from `source` (the remote, or a bundle) into `repo`
/// (the agent's) and from there into `git_dir` (the collector's). The
/// source is never written into a repository's config, nor into `FETCH_HEAD`.
fn fetch(repo: &Path, git_dir: &Path, source: &str, want: &str, base: &str) -> Result<(), String> {
    std::fs::create_dir_all(repo).map_err(|e| format!("cannot create {}: {e}", repo.display()))?;
    git(repo, None, None, &["init", "-q"])?;
    let spec = format!("+{want}:refs/caesar/base");
    git(repo, None, None, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", source, &spec])?;
    let got = git(repo, None, None, &["rev-parse", "refs/caesar/base^{commit}"])?;
    if got != base {
        return Err(format!("the workspace holds commit {got}, not the task's base {base}"));
    }
    git(repo, None, None, &["checkout", "-q", "--detach", base])?;
    std::fs::create_dir_all(git_dir).map_err(|e| format!("cannot create {}: {e}", git_dir.display()))?;
    git(git_dir, None, None, &["init", "-q", "--bare"])?;
    let from = repo.display().to_string();
    let spec = format!("+{base}:refs/caesar/base");
    git(git_dir, Some(git_dir), None, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", &from, &spec])?;
    Ok(())
}

/// The wrapper's lock file, and its identity on `/git` where the agent
/// cannot change it.
fn make_lock(notes: &Path, root: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(notes).map_err(|e| format!("cannot create {}: {e}", notes.display()))?;
    let f = std::fs::File::create(notes.join(LOCK)).map_err(|e| format!("cannot create the pod's lock: {e}"))?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    std::fs::write(root.join(LOCK_ID), format!("{}:{}", m.dev(), m.ino())).map_err(|e| e.to_string())
}

/// How long the init container waits for the daemon's bundle.
const BUNDLE_WAIT: Duration = Duration::from_secs(15 * 60);

/// Waits for the daemon's bundle of the base (`__kube receive` puts it in
/// place whole), within [`BUNDLE_WAIT`].
fn wait_bundle(root: &Path) -> Result<String, String> {
    let path = root.join(BASE_BUNDLE);
    let until = std::time::Instant::now() + BUNDLE_WAIT;
    while !path.is_file() {
        if std::time::Instant::now() > until {
            return Err(format!("the daemon sent no workspace within {BUNDLE_WAIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(path.display().to_string())
}

/// `caesard __kube fetch (--remote R | --workspace api) --base OID`: 0
/// unless even the failure could not be written.
pub fn fetch_main(argv: &[String]) -> i32 {
    let (ws, notes, git_dir) = dirs();
    let root = git_root(&git_dir);
    let result = (|| {
        let base = flag(argv, "--base")?;
        let (source, want, from) = match transport(argv)? {
            Transport::Remote(r) => (r.clone(), base.clone(), r),
            Transport::Api => (wait_bundle(&root)?, BUNDLE_REF.to_owned(), "the daemon's bundle".to_owned()),
        };
        fetch(&ws.join("repo"), &git_dir, &source, &want, &base)
            .map_err(|e| format!("cannot fetch the task's workspace from {from}: {e}"))?;
        make_lock(&notes, &root)
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

/// The most bytes a base bundle may have, on both sides: the daemon
/// refuses to start a task whose bundle is larger, and `__kube receive`
/// stops reading past it (the bundle lands on the node's disk, in `/git`).
pub const BASE_CAP: u64 = 4 << 30;

/// `caesard __kube receive`, exec'd by the daemon in the init container: its
/// stdin, a git bundle, becomes `/git/base.bundle` (whole, or not at all),
/// written as it arrives: at most [`BASE_CAP`] bytes, never held in memory.
pub fn receive_main(_argv: &[String]) -> i32 {
    let (_, _, git_dir) = dirs();
    let root = git_root(&git_dir);
    match receive(std::io::stdin().lock(), &root, BASE_CAP) {
        Ok(n) => {
            println!("received {n} bytes");
            0
        }
        Err(e) => {
            eprintln!("caesard __kube {RECEIVE_ARG}: {e}");
            1
        }
    }
}

/// Copies a git bundle from `input` to `root/base.bundle` through a
/// temporary file, in fixed-size pieces, refusing it past `cap` bytes; the
/// bytes received.
fn receive(mut input: impl std::io::Read, root: &Path, cap: u64) -> Result<u64, String> {
    use std::io::{Read, Write};
    const HEADS: [&[u8]; 2] = [b"# v2 git bundle\n", b"# v3 git bundle\n"];
    let mut head = Vec::with_capacity(HEADS[0].len());
    (&mut input)
        .take(HEADS[0].len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| format!("cannot read the bundle: {e}"))?;
    if !HEADS.contains(&head.as_slice()) {
        return Err(format!("stdin is not a git bundle (it starts with {:?})", String::from_utf8_lossy(&head)));
    }
    std::fs::create_dir_all(root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    let tmp = root.join(format!(".{BASE_BUNDLE}.tmp"));
    let stored = (|| {
        let mut out = std::io::BufWriter::with_capacity(256 * 1024, std::fs::File::create(&tmp)?);
        out.write_all(&head)?;
        // One byte past the cap tells a bundle that is too large.
        let rest = std::io::copy(&mut input.take(cap.saturating_sub(head.len() as u64) + 1), &mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok::<_, std::io::Error>(head.len() as u64 + rest)
    })();
    let n = match stored {
        Ok(n) if n <= cap => n,
        Ok(_) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!(
                "the bundle is larger than {cap} bytes: refused (the task's workspace is too large for workspace = \"api\"; use workspace = \"git\")"
            ));
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("cannot store the bundle in {}: {e}", root.display()));
        }
    };
    std::fs::rename(&tmp, root.join(BASE_BUNDLE)).map_err(|e| format!("cannot store the bundle: {e}"))?;
    Ok(n)
}

/// The work tree as a commit on the base, made with the collector's own
/// git directory and index.
fn result_commit(ws: &Path, git_dir: &Path, base: &str) -> Result<String, String> {
    let work = ws.join("repo");
    let g = Some(git_dir);
    git(&work, g, Some(&work), &["read-tree", base])?;
    git(&work, g, Some(&work), &["add", "-A"])?;
    let tree = git(&work, g, Some(&work), &["write-tree"])?;
    let base_tree = git(&work, g, None, &["rev-parse", &format!("{base}^{{tree}}")])?;
    if tree == base_tree {
        return Ok(base.to_owned());
    }
    let c = ["-c", "user.name=caesar", "-c", "user.email=caesar@localhost"];
    let mut args: Vec<&str> = c.to_vec();
    args.extend(["commit-tree", &tree, "-p", base, "-m", "caesar: task result"]);
    git(&work, g, None, &args)
}

/// The result commit pushed as the task's result ref.
fn push_result(ws: &Path, git_dir: &Path, remote: &str, task_id: &str, base: &str) -> Result<String, String> {
    let oid = result_commit(ws, git_dir, base)?;
    let refspec = format!("+{oid}:{}", super::manifest::result_ref(task_id));
    git(&ws.join("repo"), Some(git_dir), None, &["push", "-q", "--no-verify", remote, &refspec])?;
    Ok(oid)
}

/// The result commit as `/git/result.bundle` (nothing when it is the base).
fn bundle_result(ws: &Path, git_dir: &Path, base: &str) -> Result<String, String> {
    let oid = result_commit(ws, git_dir, base)?;
    if oid != base {
        let work = ws.join("repo");
        let g = Some(git_dir);
        git(&work, g, None, &["update-ref", BUNDLE_REF, &oid])?;
        let root = git_root(git_dir);
        let tmp = root.join(format!(".{RESULT_BUNDLE}.tmp"));
        let tmp_s = tmp.display().to_string();
        let not_base = format!("^{base}");
        git(&work, g, None, &["bundle", "create", "-q", &tmp_s, BUNDLE_REF, &not_base])?;
        std::fs::rename(&tmp, root.join(RESULT_BUNDLE)).map_err(|e| e.to_string())?;
    }
    Ok(oid)
}

/// Until the wrapper released its lock: the supervisor, and so the agent's
/// tree, has ended. An error when the lock is not the one the init
/// container made (the agent replaced it).
fn wait_agent_end(notes: &Path, root: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    while !notes.join(LOCKED).exists() {
        if notes.join(FETCH_ERROR).exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let f = crate::safe_fs::open_regular(&notes.join(LOCK))
        .map_err(|e| format!("the wrapper's lock cannot be opened ({e}): the agent removed it"))?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    let want = std::fs::read_to_string(root.join(LOCK_ID)).unwrap_or_default();
    if want.trim() != format!("{}:{}", m.dev(), m.ino()) {
        return Err("the agent replaced the wrapper's lock file /ws/.pod/run.lock: no result is collected".to_owned());
    }
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot wait on the wrapper's lock: {e}"))?;
    drop(lock);
    Ok(())
}

/// Blocks SIGTERM and SIGINT for this process (and the git it runs).
fn hold_stop_signals() {
    #[cfg(unix)]
    {
        use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
        let mut stop = SigSet::empty();
        stop.add(Signal::SIGTERM);
        stop.add(Signal::SIGINT);
        let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop), None);
    }
}

/// `caesard __kube collect --task-id T (--remote R | --workspace api) --base
/// OID`: waits for the agent's end, pushes (or bundles) the result, says
/// which commit it is.
pub fn collect_main(argv: &[String]) -> i32 {
    let (ws, notes, git_dir) = dirs();
    let root = git_root(&git_dir);
    let args = (|| Ok::<_, String>((flag(argv, "--task-id")?, transport(argv)?, flag(argv, "--base")?)))();
    let (task_id, transport, base) = match args {
        Ok(a) => a,
        Err(e) => {
            eprintln!("caesard __kube {COLLECT_ARG}: {e}");
            return 2;
        }
    };
    // A stop (the pod's deletion) is not this container's end: the agent's
    // is. Its SIGTERM is held as PID 1 of a container ignores it, so the
    // result of a cancelled run is still made and, with bundles, waits to be
    // taken; the grace period's SIGKILL is the bound.
    hold_stop_signals();
    // Until the agent's wrapper released its lock.
    let ended = wait_agent_end(&notes, &root);
    let pushed = if let Err(e) = ended {
        Pushed { result: None, error: Some(e) }
    } else if notes.join(FETCH_ERROR).exists() {
        Pushed { result: None, error: Some("the workspace was never fetched".to_owned()) }
    } else {
        let made = match &transport {
            Transport::Remote(remote) => push_result(&ws, &git_dir, remote, &task_id, &base)
                .map_err(|e| format!("cannot push the task's result to {remote}: {e}")),
            Transport::Api => {
                bundle_result(&ws, &git_dir, &base).map_err(|e| format!("cannot bundle the task's result: {e}"))
            }
        };
        match made {
            Ok(oid) => Pushed { result: Some(oid), error: None },
            Err(e) => Pushed { result: None, error: Some(e) },
        }
    };
    let json = serde_json::to_vec(&pushed).unwrap_or_default();
    // For the daemon: where the agent cannot write (its own termination
    // message; with bundles, `/git` too).
    let term = std::env::var_os("CAESAR_POD_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    let term = term.join(super::manifest::TERMINATION_LOG.trim_start_matches('/'));
    if let Some(parent) = term.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(&term, &json);
    if transport == Transport::Api {
        let tmp = root.join(format!(".{RESULT_JSON}.tmp"));
        let _ = std::fs::write(&tmp, &json).and_then(|_| std::fs::rename(&tmp, root.join(RESULT_JSON)));
    }
    // For the wrapper.
    let tmp = notes.join(".pushed.tmp");
    let written = std::fs::write(&tmp, &json).and_then(|_| std::fs::rename(&tmp, notes.join(PUSHED)));
    if transport == Transport::Api && pushed.result.is_some() {
        // The result lives in this container until the daemon took it.
        let until = std::time::Instant::now() + LINGER;
        while !root.join(TAKEN).exists() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    i32::from(written.is_err() || pushed.error.is_some())
}

/// `caesard __kube result`, exec'd by the daemon in the collector: waits for
/// the collector's answer, then writes the result bundle to stdout (nothing
/// when the agent changed nothing); exit 3 with the collector's error.
pub fn result_main(_argv: &[String]) -> i32 {
    use std::io::Write;
    let (_, _, git_dir) = dirs();
    let root = git_root(&git_dir);
    let until = std::time::Instant::now() + Duration::from_secs(120);
    let answer = loop {
        if let Ok(bytes) = std::fs::read(root.join(RESULT_JSON)) {
            break serde_json::from_slice::<Pushed>(&bytes).map_err(|e| e.to_string());
        }
        if std::time::Instant::now() > until {
            break Err("the collector has no result yet".to_owned());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    match answer {
        Ok(Pushed { result: Some(_), .. }) => {
            let bundle = root.join(RESULT_BUNDLE);
            if !bundle.exists() {
                return 0;
            }
            match std::fs::read(&bundle) {
                Ok(data) => {
                    let mut out = std::io::stdout().lock();
                    i32::from(out.write_all(&data).and_then(|_| out.flush()).is_err())
                }
                Err(e) => {
                    eprintln!("cannot read the result bundle: {e}");
                    3
                }
            }
        }
        Ok(Pushed { error, .. }) => {
            eprintln!("{}", error.unwrap_or_else(|| "the collector made no result".to_owned()));
            3
        }
        Err(e) => {
            eprintln!("{e}");
            3
        }
    }
}

/// `caesard __kube taken`: the daemon has the result; the collector may end.
pub fn taken_main(_argv: &[String]) -> i32 {
    let (_, _, git_dir) = dirs();
    i32::from(std::fs::write(git_root(&git_dir).join(TAKEN), b"1").is_err())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29: git run in a repository whose config names an fsmonitor
    /// hook ran that hook (an agent's program, with the daemon's authority).
    #[test]
    fn git_runs_no_program_a_repository_config_names() {
        let repo = tempfile::tempdir().unwrap();
        let marker = repo.path().join("hook-ran");
        let hook = repo.path().join("hook.sh");
        std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        git(repo.path(), None, None, &["init", "-q"]).unwrap();
        git(repo.path(), None, None, &["config", "core.fsmonitor", &hook.display().to_string()]).unwrap();
        std::fs::write(repo.path().join("a.txt"), "a").unwrap();
        git(repo.path(), None, None, &["status", "--porcelain"]).unwrap();
        git(repo.path(), None, None, &["add", "a.txt"]).unwrap();
        git(repo.path(), None, None, &["status", "--porcelain"]).unwrap();
        assert!(!marker.exists(), "git ran the repository's fsmonitor hook");
        super::super::workspace::git(repo.path(), None, &["status", "--porcelain"]).unwrap();
        assert!(!marker.exists(), "the daemon's git ran the repository's fsmonitor hook");
    }

    /// A reader that yields `n` bytes of a git bundle without holding them.
    struct Bundle {
        head: &'static [u8],
        left: u64,
    }

    impl std::io::Read for Bundle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if !self.head.is_empty() {
                let n = self.head.len().min(buf.len());
                buf[..n].copy_from_slice(&self.head[..n]);
                self.head = &self.head[n..];
                return Ok(n);
            }
            let n = (buf.len() as u64).min(self.left) as usize;
            buf[..n].fill(b'x');
            self.left -= n as u64;
            Ok(n)
        }
    }

    #[test]
    fn the_base_bundle_is_stored_whole_up_to_the_cap_and_refused_past_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().join("git");
        let head = b"# v2 git bundle\n";
        let size = |extra: u64| head.len() as u64 + extra;

        // At the cap: stored whole, its temporary file gone.
        let cap = size(1 << 20);
        let n = receive(Bundle { head, left: 1 << 20 }, &root, cap).expect("stored");
        assert_eq!(n, cap);
        assert_eq!(std::fs::metadata(root.join(BASE_BUNDLE)).expect("bundle").len(), cap);
        assert!(!root.join(format!(".{BASE_BUNDLE}.tmp")).exists());
        std::fs::remove_file(root.join(BASE_BUNDLE)).expect("rm");

        // One byte past it: refused with the fix named, nothing left behind.
        let e = receive(Bundle { head, left: (1 << 20) + 1 }, &root, cap).expect_err("refused");
        assert!(e.contains("larger than") && e.contains("workspace = \"git\""), "{e}");
        assert!(!root.join(BASE_BUNDLE).exists());
        assert!(!root.join(format!(".{BASE_BUNDLE}.tmp")).exists());

        // Not a bundle: refused before anything is written.
        let e = receive(&b"GIF89a not a bundle"[..], &root, cap).expect_err("refused");
        assert!(e.contains("not a git bundle"), "{e}");
        let e = receive(&b""[..], &root, cap).expect_err("refused");
        assert!(e.contains("not a git bundle"), "{e}");
        assert!(!root.join(BASE_BUNDLE).exists());
    }
}

//! The workshop proper: what a fresh worktree needs to be workable.
//!
//! A worktree holds only tracked files. `[worktree] copy` brings ignored
//! paths over (reflinked where the filesystem can), `link` symlinks them, and
//! `setup` runs commands before the agent starts. A path that cannot be placed
//! is a finding naming the key to fix, never a failure; a failing setup
//! command is a failure.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use git2::Repository;

use super::{Prepared, WorkshopError};
use crate::config::WorktreeSection;
use crate::oacp::{Finding, Severity};

/// How much of a failing setup command's output the error keeps (its end).
const OUTPUT_CAP: usize = 4000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Copy,
    Link,
}

impl How {
    fn key(self) -> &'static str {
        match self {
            How::Copy => "worktree.copy",
            How::Link => "worktree.link",
        }
    }
}

fn finding(how: How, path: &str, what: &str, fix: &str) -> Finding {
    Finding {
        severity: Severity::Low,
        title: format!("{} `{path}` not placed: {what}", how.key()),
        file: Some(path.to_owned()),
        line: None,
        detail: fix.to_owned(),
    }
}

/// Why a configured path is not acceptable at all, before looking at disk.
fn invalid(p: &str) -> Option<&'static str> {
    if p.trim().is_empty() {
        return Some("it is empty");
    }
    if Path::new(p).is_absolute() || p.starts_with('\\') {
        return Some("it is absolute; paths are relative to the workspace root");
    }
    let parts: Vec<&str> = p.split(['/', '\\']).filter(|s| !s.is_empty() && *s != ".").collect();
    if parts.contains(&"..") {
        return Some("it contains `..` and would leave the workspace");
    }
    if parts.is_empty() {
        return Some("it names the workspace itself");
    }
    if matches!(parts.first(), Some(&".git") | Some(&".caesar")) {
        return Some("it is under .git or .caesar, which belong to git and to caesar");
    }
    None
}

/// Places `copy` then `link` entries; returns the repository-relative paths
/// placed and a finding for each path left out. `link` after `copy`: a path in
/// both is copied (isolated) and its link reported as already present.
pub(crate) fn place_all(
    root: &Path,
    workspace: &Path,
    p: &Prepared,
    config: &WorktreeSection,
) -> Result<(Vec<String>, Vec<Finding>), WorkshopError> {
    let (mut placed, mut findings) = (Vec::new(), Vec::new());
    if config.copy.is_empty() && config.link.is_empty() {
        return Ok((placed, findings));
    }
    let Some(worktree) = &p.worktree else { return Ok((placed, findings)) };
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    let index = repo.index().map_err(WorkshopError::git("read the index"))?;
    let tracked: Vec<String> = index.iter().map(|e| String::from_utf8_lossy(&e.path).into_owned()).collect();
    let ws_rel = workspace.strip_prefix(root).unwrap_or(Path::new("")).to_string_lossy().replace('\\', "/");
    let plan = config.copy.iter().map(|c| (How::Copy, c)).chain(config.link.iter().map(|l| (How::Link, l)));
    for (how, entry) in plan {
        if let Some(why) = invalid(entry) {
            findings.push(finding(
                how,
                entry,
                why,
                &format!("fix or remove `{entry}` in [worktree] {}", &how.key()[9..]),
            ));
            continue;
        }
        let clean: Vec<&str> = entry.split(['/', '\\']).filter(|s| !s.is_empty() && *s != ".").collect();
        let clean = clean.join("/");
        let rel = if ws_rel.is_empty() { clean.clone() } else { format!("{ws_rel}/{clean}") };
        let key = &how.key()[9..];
        let from = workspace.join(&clean);
        let to = worktree.join(&rel);
        if std::fs::symlink_metadata(&from).is_err() {
            let fix = format!("create it in the workspace, or remove `{entry}` from [worktree] {key}");
            findings.push(finding(how, entry, "it is absent from the workspace", &fix));
            continue;
        }
        if tracked.iter().any(|t| super::snapshot::under(t, &rel)) {
            let fix = format!(
                "git tracks it, so the worktree has its own version and placing it would let the agent write into \
                 the main tree: remove `{entry}` from [worktree] {key}"
            );
            findings.push(finding(how, entry, "it is tracked by git", &fix));
            continue;
        }
        if !repo.is_path_ignored(&rel).unwrap_or(false) {
            let fix = format!(
                "placed, it would show in every diff as the agent's work: add it to .gitignore, or remove `{entry}` \
                 from [worktree] {key}"
            );
            findings.push(finding(how, entry, "it is neither tracked nor ignored", &fix));
            continue;
        }
        if std::fs::symlink_metadata(&to).is_ok() {
            let fix = format!(
                "it is already in the worktree (placed by another entry, or by git); nothing was overwritten: remove \
                 `{entry}` from [worktree] {key} if it is listed twice"
            );
            findings.push(finding(how, entry, "it is already present", &fix));
            continue;
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(WorkshopError::io("create", parent))?;
        }
        match how {
            How::Copy => copy_tree(&from, &to)?,
            How::Link => symlink(&from, &to)?,
        }
        placed.push(rel);
    }
    Ok((placed, findings))
}

#[cfg(unix)]
fn symlink(from: &Path, to: &Path) -> Result<(), WorkshopError> {
    std::os::unix::fs::symlink(from, to).map_err(WorkshopError::io("symlink", to))
}

#[cfg(not(unix))]
fn symlink(from: &Path, to: &Path) -> Result<(), WorkshopError> {
    let r = if from.is_dir() {
        std::os::windows::fs::symlink_dir(from, to)
    } else {
        std::os::windows::fs::symlink_file(from, to)
    };
    r.map_err(WorkshopError::io("symlink", to))
}

/// Copies with `cp --reflink=auto` (a copy-on-write clone where the
/// filesystem can, an ordinary copy elsewhere; symlinks kept, modes and times
/// preserved), falling back to a plain recursive copy where that `cp` is not
/// available.
fn copy_tree(from: &Path, to: &Path) -> Result<(), WorkshopError> {
    let cp = Command::new("cp")
        .args(["-R", "-P", "-p", "--reflink=auto", "--"])
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if matches!(cp, Ok(s) if s.success()) {
        return Ok(());
    }
    if std::fs::symlink_metadata(to).is_ok() {
        let _ = if to.is_dir() { std::fs::remove_dir_all(to) } else { std::fs::remove_file(to) };
    }
    copy_plain(from, to)
}

fn copy_plain(from: &Path, to: &Path) -> Result<(), WorkshopError> {
    let meta = std::fs::symlink_metadata(from).map_err(WorkshopError::io("read", from))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from).map_err(WorkshopError::io("read the link", from))?;
        return symlink(&target, to);
    }
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(WorkshopError::io("create", to))?;
        for entry in std::fs::read_dir(from).map_err(WorkshopError::io("list", from))? {
            let entry = entry.map_err(WorkshopError::io("list", from))?;
            copy_plain(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    std::fs::copy(from, to).map(drop).map_err(WorkshopError::io("copy to", to))
}

/// The environment variable that marks a task's setup processes, so that a
/// restarted daemon can find (and kill) a setup an earlier one left running.
pub const SETUP_MARKER: &str = "CAESAR_SETUP_OF";

/// Where and how setup commands run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup<'a> {
    pub dir: &'a Path,
    pub task_id: &'a str,
    /// How long each command may run; `None` for no limit.
    pub timeout: Option<Duration>,
    /// Set to stop: the running command's group is killed.
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// The task's box; `None`: plain `sh`.
    pub launcher: Option<&'a crate::supervisor::boxed::Launcher>,
}

/// Runs each setup command with `sh -c` in `dir`, in order, stdin closed,
/// stderr merged into stdout; stops at the first that fails (or outlives
/// `timeout`, or is cancelled, its whole process group then killed).
pub(crate) fn run_setup(setup: &Setup<'_>, commands: &[String]) -> Result<(), WorkshopError> {
    let dir = setup.dir;
    for command in commands {
        let (code, output) = run_one(setup, command)?;
        if code != Some(0) {
            return Err(WorkshopError::SetupFailed {
                command: command.clone(),
                exit_code: code,
                output: cap(&output),
                dir: dir.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Kills what is left of a task's setup commands (Linux): every process
/// whose environment carries the task's [`SETUP_MARKER`], with its group.
/// Returns how many were found. For a daemon that died while setup ran.
pub fn kill_setups_of(task_id: &str) -> usize {
    crate::marked::kill_marked(SETUP_MARKER, task_id)
}

fn cap(output: &str) -> String {
    let t = output.trim_end();
    if t.len() <= OUTPUT_CAP {
        return t.to_owned();
    }
    let mut start = t.len() - OUTPUT_CAP;
    while !t.is_char_boundary(start) {
        start += 1;
    }
    format!("[… {start} bytes cut]\n{}", &t[start..])
}

fn run_one(setup: &Setup<'_>, command: &str) -> Result<(Option<i32>, String), WorkshopError> {
    let (dir, timeout) = (setup.dir, setup.timeout);
    let script = [String::from("-c"), format!("exec 2>&1\n{command}")];
    let mut cmd = match setup.launcher {
        Some(l) => l.command(dir, "sh", &script),
        None => Command::new("sh"),
    };
    if setup.launcher.is_none() {
        cmd.args(&script).current_dir(dir);
    }
    cmd.env(SETUP_MARKER, setup.task_id);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(WorkshopError::io(&format!("run `{command}` in"), dir))?;
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(out) = stdout.as_mut() {
            let _ = out.read_to_end(&mut buf);
        }
        buf
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => return Err(WorkshopError::io(&format!("wait for `{command}` in"), dir)(e)),
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            kill_group(&mut child);
            break None;
        }
        if setup.cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst)) {
            kill_group(&mut child);
            return Err(WorkshopError::Invalid(format!("setup `{command}` was cancelled")));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut output = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    if status.is_none() {
        output.push_str(&format!("\n[caesar: killed after {:?}]", timeout.unwrap_or_default()));
    }
    Ok((status.and_then(|s| s.code()), output))
}

fn kill_group(child: &mut std::process::Child) {
    #[cfg(unix)]
    crate::supervisor::kill_group(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_paths_are_named() {
        assert!(invalid("/etc").is_some());
        assert!(invalid("a/../../b").is_some());
        assert!(invalid(".git/hooks").is_some());
        assert!(invalid("./.caesar").is_some());
        assert!(invalid("").is_some());
        assert!(invalid("node_modules").is_none());
    }

    #[test]
    fn output_is_capped_at_its_end() {
        let long = "x".repeat(OUTPUT_CAP * 2) + "END";
        let c = cap(&long);
        assert!(c.ends_with("END") && c.len() < OUTPUT_CAP + 40, "{}", c.len());
    }
}

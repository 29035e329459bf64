//! The workspace in and the changes out, through the team's git remote.
//!
//! In: the task's workdir as it is (HEAD plus every uncommitted and
//! untracked, not ignored, change) becomes a commit object made with a
//! temporary index, so the user's index and branches are untouched, and is
//! pushed as `refs/caesar/tasks/<id>/base`. Out: the pod pushes
//! `…/result`; the daemon fetches it and moves the workdir's files from the
//! base tree to the result tree (again through a temporary index), so the
//! worktree holds the agent's changes uncommitted, exactly as after a local
//! run, and diff, apply and gc work unchanged. The refs are deleted when the
//! task's changes are applied, discarded or collected.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::manifest::{base_ref, result_ref};

pub(super) fn git(dir: &Path, index: Option<&Path>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("git");
    cmd.args(super::phases::UNTRUSTED_CONFIG_OFF).arg("-C").arg(dir).args(args).stdin(Stdio::null());
    if let Some(i) = index {
        cmd.env("GIT_INDEX_FILE", i);
    }
    let o = cmd.output().map_err(|e| format!("cannot run git: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
    } else {
        Err(format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// The workdir's repository top.
pub fn top_of(workdir: &Path) -> Result<PathBuf, String> {
    let top = git(workdir, None, &["rev-parse", "--show-toplevel"])
        .map_err(|e| format!("the task's workdir {} is not in a git repository: {e}", workdir.display()))?;
    Ok(PathBuf::from(top))
}

/// Commits the workdir's state (with a temporary index under `scratch`):
/// on HEAD, or with no parent (`orphan`: the tree alone, the smallest
/// bundle). The commit's id.
pub fn snapshot_commit(workdir: &Path, task_id: &str, scratch: &Path, orphan: bool) -> Result<String, String> {
    let top = top_of(workdir)?;
    let top = top.as_path();
    let index = scratch.join("kube-base.index");
    let _ = std::fs::remove_file(&index);
    let head = git(top, None, &["rev-parse", "-q", "--verify", "HEAD^{commit}"]).ok();
    if let Some(h) = &head {
        git(top, Some(&index), &["read-tree", h])?;
    }
    git(top, Some(&index), &["add", "-A"])?;
    let tree = git(top, Some(&index), &["write-tree"])?;
    let _ = std::fs::remove_file(&index);
    let mut args = vec!["-c", "user.name=caesar", "-c", "user.email=caesar@localhost", "commit-tree", &tree, "-m"];
    let msg = format!("caesar: base of task {task_id}");
    args.push(&msg);
    if let Some(h) = head.as_ref().filter(|_| !orphan) {
        args.extend(["-p", h]);
    }
    git(top, None, &args)
}

/// Commits the workdir's state and pushes it as the task's base ref; the
/// commit's id.
pub fn push_base(workdir: &Path, remote: &str, task_id: &str, scratch: &Path) -> Result<String, String> {
    let oid = snapshot_commit(workdir, task_id, scratch, false)?;
    let top = top_of(workdir)?;
    let refspec = format!("+{oid}:{}", base_ref(task_id));
    git(&top, None, &["push", "-q", "--no-verify", remote, &refspec])
        .map_err(|e| format!("cannot push the task's workspace to {remote}: {e}"))?;
    Ok(oid)
}

/// The result commit's one parent must be the task's base (or the result
/// is the base itself): anything else is not this task's result.
pub fn check_parent(top: &Path, result: &str, base: &str) -> Result<(), String> {
    if result == base {
        return Ok(());
    }
    let line = git(top, None, &["rev-list", "--parents", "-n", "1", result])?;
    let ids: Vec<&str> = line.split_whitespace().collect();
    if ids.len() != 2 || ids[1] != base {
        return Err(format!("its commit {result} is not a child of the task's base {base}"));
    }
    Ok(())
}

/// Fetches the task's result ref and checks it: what the remote holds
/// (which only the collector, with the write credential, can push) is the
/// result, whatever the pod said; `None` when there is no result ref.
pub fn fetch_result(workdir: &Path, remote: &str, task_id: &str, base: &str) -> Result<Option<String>, String> {
    let top = top_of(workdir)?;
    let r = result_ref(task_id);
    let listed = git(&top, None, &["ls-remote", "--refs", remote, &r])
        .map_err(|e| format!("cannot read the task's result ref on {remote}: {e}"))?;
    let Some(oid) = listed.lines().find(|l| l.ends_with(&r)).and_then(|l| l.split_whitespace().next()) else {
        return Ok(None);
    };
    let oid = oid.to_owned();
    // No FETCH_HEAD: tasks in place share one repository and fetch at once.
    git(&top, None, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", remote, &r])?;
    check_parent(&top, &oid, base).map_err(|e| format!("the result ref {r} is refused: {e}"))?;
    Ok(Some(oid))
}

/// Lays the changes from `base` to `result` (both in the repository) into
/// the workdir's files, leaving the index and HEAD as they are.
pub fn lay_changes(workdir: &Path, base: &str, result: &str, scratch: &Path) -> Result<(), String> {
    if result == base {
        return Ok(());
    }
    let top = top_of(workdir)?;
    let top = top.as_path();
    let index = scratch.join("kube-result.index");
    let _ = std::fs::remove_file(&index);
    git(top, Some(&index), &["read-tree", base])?;
    // Stat data for the files, so read-tree sees them as matching the base.
    let _ = git(top, Some(&index), &["update-index", "-q", "--refresh"]);
    let r = git(top, Some(&index), &["read-tree", "-m", "-u", base, result]);
    let _ = std::fs::remove_file(&index);
    r.map(|_| ())
}

/// Deletes the task's refs on the remote, those it still has (so a
/// deletion that half happened, or happened before a crash, completes).
pub fn delete_refs(repo: &Path, remote: &str, task_id: &str) -> Result<(), String> {
    let pattern = format!("refs/caesar/tasks/{task_id}/*");
    let listed = git(repo, None, &["ls-remote", "--refs", remote, &pattern])
        .map_err(|e| format!("cannot list the task's refs on {remote}: {e}"))?;
    let present: Vec<&str> = listed.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    let known = [base_ref(task_id), result_ref(task_id)];
    let doomed: Vec<&str> = present.into_iter().filter(|r| known.iter().any(|k| k == r)).collect();
    if doomed.is_empty() {
        return Ok(());
    }
    let mut args = vec!["push", "-q", "--no-verify", remote, "--delete"];
    args.extend(doomed);
    git(repo, None, &args).map(|_| ()).map_err(|e| format!("cannot delete the task's refs on {remote}: {e}"))
}

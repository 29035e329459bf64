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
    commit_at(&top, task_id, scratch, orphan)
}

/// [`snapshot_commit`] in the repository whose top is `top`.
fn commit_at(top: &Path, task_id: &str, scratch: &Path, orphan: bool) -> Result<String, String> {
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
/// commit's id. Tasks starting from one workdir at the same moment share
/// one commit ([`shared_snapshot`]) and one push ([`coalesced_push`]).
pub fn push_base(workdir: &Path, remote: &str, task_id: &str, scratch: &Path) -> Result<String, String> {
    let (top, oid) = shared_snapshot(workdir, task_id, scratch)?;
    let refspec = format!("+{oid}:{}", base_ref(task_id));
    coalesced_push(&top, remote, refspec).map_err(|e| format!("cannot push the task's workspace to {remote}: {e}"))?;
    Ok(oid)
}

/// What a task waiting for a snapshot gets: the repository top and the commit.
type Snapped = Result<(PathBuf, String), String>;

/// The tasks waiting for a snapshot of one workdir, and whether one is
/// being taken.
#[derive(Default)]
struct SnapLane {
    waiting: Vec<(String, std::sync::mpsc::Sender<Snapped>)>,
    taking: bool,
}

/// One lane per workdir.
static SNAP_LANES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<PathBuf, SnapLane>>> =
    std::sync::LazyLock::new(Default::default);

/// [`snapshot_commit`] (on HEAD), shared by the tasks that ask for the same
/// workdir at the same moment (issue 33 item 4: 500 tasks made 500 commits
/// of one unchanged workdir, six git processes each). A snapshot is only
/// ever shared with tasks that asked before it began: a caller arriving
/// while one is being taken waits for the next, so every task's base is
/// the workdir as it was at its start or later, never earlier.
pub fn shared_snapshot(workdir: &Path, task_id: &str, scratch: &Path) -> Snapped {
    let key = workdir.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    let leads = {
        let mut lanes = SNAP_LANES.lock().unwrap_or_else(|p| p.into_inner());
        let lane = lanes.entry(key.clone()).or_default();
        lane.waiting.push((task_id.to_owned(), tx));
        !std::mem::replace(&mut lane.taking, true)
    };
    if leads {
        loop {
            let batch = {
                let mut lanes = SNAP_LANES.lock().unwrap_or_else(|p| p.into_inner());
                let Some(lane) = lanes.get_mut(&key) else { break };
                if lane.waiting.is_empty() {
                    lanes.remove(&key);
                    break;
                }
                std::mem::take(&mut lane.waiting)
            };
            let name = match batch.as_slice() {
                [(one, _)] => one.clone(),
                [(first, _), rest @ ..] => format!("{first} and {} more started with it", rest.len()),
                [] => continue,
            };
            let made = top_of(workdir).and_then(|top| commit_at(&top, &name, scratch, false).map(|oid| (top, oid)));
            for (_, tx) in batch {
                let _ = tx.send(made.clone());
            }
        }
    }
    rx.recv().unwrap_or_else(|_| Err("the snapshot of this task's workspace was lost".to_owned()))
}

/// The refspecs waiting to be pushed from one repository to one remote, and
/// whether a push of them is under way.
#[derive(Default)]
struct Lane {
    waiting: Vec<(String, std::sync::mpsc::Sender<Result<(), String>>)>,
    pushing: bool,
}

/// One lane per (repository, remote).
static LANES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<(PathBuf, String), Lane>>> =
    std::sync::LazyLock::new(Default::default);

/// Pushes `refspec` from `top` to `remote`, together with the refspecs other
/// tasks starting at the same moment push there (issue 33: 500 tasks made
/// 500 pushes, each a few processes on both ends). The first caller pushes
/// what waits, in one `git push`, while later ones queue for the next; a
/// batch that fails is pushed again one refspec at a time, so that each
/// caller gets its own refspec's error.
fn coalesced_push(top: &Path, remote: &str, refspec: String) -> Result<(), String> {
    let key = (top.to_path_buf(), remote.to_owned());
    let (tx, rx) = std::sync::mpsc::channel();
    let leads = {
        let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
        let lane = lanes.entry(key.clone()).or_default();
        lane.waiting.push((refspec, tx));
        !std::mem::replace(&mut lane.pushing, true)
    };
    if leads {
        loop {
            let batch = {
                let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
                let Some(lane) = lanes.get_mut(&key) else { break };
                if lane.waiting.is_empty() {
                    lanes.remove(&key);
                    break;
                }
                std::mem::take(&mut lane.waiting)
            };
            push_batch(top, remote, batch);
        }
    }
    rx.recv().unwrap_or_else(|_| Err("the push of this task's base was lost".to_owned()))
}

/// Pushes a batch of refspecs and tells each waiter its outcome.
fn push_batch(top: &Path, remote: &str, batch: Vec<(String, std::sync::mpsc::Sender<Result<(), String>>)>) {
    let mut args = vec!["push", "-q", "--no-verify", remote];
    args.extend(batch.iter().map(|(r, _)| r.as_str()));
    if git(top, None, &args).is_ok() {
        for (_, tx) in batch {
            let _ = tx.send(Ok(()));
        }
        return;
    }
    for (refspec, tx) in batch {
        let _ = tx.send(git(top, None, &["push", "-q", "--no-verify", remote, &refspec]).map(|_| ()));
    }
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

#[cfg(test)]
mod coalescing_tests {
    use std::path::Path;

    fn sh(dir: &Path, args: &[&str]) -> String {
        super::git(dir, None, args).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn concurrent_pushes_to_one_remote_all_land_and_a_bad_refspec_fails_alone() {
        let root = tempfile::tempdir().unwrap();
        let (repo, remote) = (root.path().join("repo"), root.path().join("remote.git"));
        std::fs::create_dir_all(&repo).unwrap();
        sh(root.path(), &["init", "-q", "--bare", remote.to_str().unwrap()]);
        sh(&repo, &["init", "-q"]);
        std::fs::write(repo.join("f"), "x").unwrap();
        sh(&repo, &["add", "-A"]);
        sh(&repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]);
        let head = sh(&repo, &["rev-parse", "HEAD"]);
        let remote_url = remote.display().to_string();
        let outcomes: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..24)
                .map(|i| {
                    let (repo, remote_url, head) = (&repo, &remote_url, &head);
                    s.spawn(move || {
                        let refspec = if i == 7 {
                            // Names an object the repository does not have.
                            format!("+{}:refs/caesar/tasks/t_{i}/base", "1".repeat(40))
                        } else {
                            format!("+{head}:refs/caesar/tasks/t_{i}/base")
                        };
                        super::coalesced_push(repo, remote_url, refspec)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, o) in outcomes.iter().enumerate() {
            assert_eq!(o.is_err(), i == 7, "task {i}: {o:?}");
        }
        let refs = sh(&remote, &["for-each-ref", "--format=%(refname)", "refs/caesar/tasks"]);
        assert_eq!(refs.lines().count(), 23, "{refs}");
        assert!(!refs.contains("t_7/"), "{refs}");
    }
}

#[cfg(test)]
mod snapshot_tests {
    use std::path::Path;

    fn sh(dir: &Path, args: &[&str]) -> String {
        super::git(dir, None, args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Tasks that ask while a snapshot of their workdir is being taken wait
    /// for the next one, and share it: one commit for all of them, which
    /// holds what the workdir held when they asked (issue 33 item 4).
    #[test]
    fn tasks_asking_during_a_snapshot_share_the_next_one() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        sh(&repo, &["init", "-q"]);
        std::fs::write(repo.join("f"), "x").unwrap();
        sh(&repo, &["add", "-A"]);
        sh(&repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]);
        // A snapshot under way: those who ask now queue for the next.
        super::SNAP_LANES.lock().unwrap().entry(repo.clone()).or_default().taking = true;
        std::fs::write(repo.join("late.txt"), "written before they asked").unwrap();
        let got = std::thread::scope(|s| {
            let waiters: Vec<_> = (0..8)
                .map(|i| {
                    let (repo, scratch) = (&repo, root.path().join(format!("s{i}")));
                    std::fs::create_dir_all(&scratch).unwrap();
                    s.spawn(move || super::shared_snapshot(repo, &format!("t_{i}"), &scratch))
                })
                .collect();
            while super::SNAP_LANES.lock().unwrap()[&repo].waiting.len() < 8 {
                std::thread::yield_now();
            }
            // The one under way ends: the next caller takes one for all.
            super::SNAP_LANES.lock().unwrap().get_mut(&repo).unwrap().taking = false;
            let lead = super::shared_snapshot(&repo, "t_lead", root.path());
            let mut got: Vec<_> = waiters.into_iter().map(|h| h.join().unwrap()).collect();
            got.push(lead);
            got
        });
        let (top, oid) = got[0].clone().unwrap();
        assert!(got.iter().all(|g| g.as_ref() == Ok(&(top.clone(), oid.clone()))), "{got:?}");
        assert_eq!(sh(&repo, &["show", &format!("{oid}:late.txt")]), "written before they asked");
        assert_eq!(sh(&repo, &["rev-parse", &format!("{oid}^")]), sh(&repo, &["rev-parse", "HEAD"]));
        assert!(!super::SNAP_LANES.lock().unwrap().contains_key(&repo), "the lane goes when no one waits");
    }
}

//! Preparation outside the queue, through the real daemon on real
//! repositories: delegate answers before `setup` runs, write tasks prepare
//! concurrently, a preparing task can be cancelled (its setup killed, its
//! worktree and branch removed), and a daemon SIGKILLed mid-preparation
//! prepares the task again on restart instead of failing it.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

/// The project as a repository with one commit, whose writer agent writes
/// a file, and whose `[worktree] setup` is `setup`.
fn project(env: &Env, setup: &str) {
    env.set_agents(&[("writer", &["write", "out.txt", "done\n"])]);
    let p = env.project.path();
    let config = std::fs::read_to_string(p.join(".caesar/config.toml")).unwrap();
    let section = format!("[worktree]\nsetup = [{setup:?}]\n\n[policy]\nmax_parallel = 8\n\n");
    std::fs::write(p.join(".caesar/config.toml"), section + &config).unwrap();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    commit_base(p);
}

async fn status(c: &mut Client, id: &str) -> pb::TaskView {
    c.status(pb::StatusRequest { task_id: id.to_owned() }).await.unwrap().into_inner()
}

/// The task worktrees (each with its own git directory beside it, issue
/// 29; any `git worktree` of the repository counts too) and caesar branches.
fn leftovers(env: &Env) -> (usize, String) {
    let p = env.project.path();
    let linked = git(p, &["worktree", "list", "--porcelain"]).matches("worktree ").count() - 1;
    let own = std::fs::read_dir(p.join(".caesar/wt"))
        .map(|d| d.flatten().filter(|e| !e.file_name().to_string_lossy().ends_with(".git")).count())
        .unwrap_or(0);
    (linked + own, git(p, &["branch", "--list", "caesar/*"]))
}

#[tokio::test]
async fn delegate_answers_before_setup_and_write_tasks_prepare_side_by_side() {
    let mut env = Env::new(&[]);
    project(&env, "sleep 3");
    let mut c = env.start_daemon_with(&[("CAESAR_PREPARE_PARALLEL", "4")]).await;
    let begun = Instant::now();
    let mut ids = Vec::new();
    for i in 0..3 {
        let asked = Instant::now();
        let d = c.delegate(env.delegate_request("writer", &format!("write {i}"))).await.unwrap().into_inner();
        assert!(asked.elapsed() < Duration::from_secs(2), "delegate waited for setup: {:?}", asked.elapsed());
        assert_eq!((d.status().as_str(), d.isolation.as_str()), ("pending", "worktree"));
        ids.push(d.task_id);
    }
    let first = status(&mut c, &ids[0]).await;
    assert_eq!((first.status().as_str(), first.phase().as_str()), ("pending", "preparing"));
    for id in &ids {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    }
    // Three 3 s setups one after another would take 9 s.
    assert!(begun.elapsed() < Duration::from_secs(8), "setups ran one after another: {:?}", begun.elapsed());
    assert_eq!(leftovers(&env).0, 3, "each task keeps its own worktree until applied or gc'd");
}

#[tokio::test]
async fn a_preparing_task_is_cancelled_with_its_setup_and_leaves_nothing() {
    let mut env = Env::new(&[]);
    // Beneath `files/`, which a task's box may write; the shell's pid as the
    // host's /proc numbers it (`$$` is its pid in the box's namespace).
    let pid_file = env.home.path().join("files/setup.pid");
    project(&env, &format!("read -r p _ < /proc/self/stat; echo $p > {}; sleep 300", pid_file.display()));
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("writer", "never runs")).await.unwrap().into_inner();
    assert!(eventually(Duration::from_secs(20), || pids_in(&pid_file).len() == 1).await, "setup never ran");
    let setup_pid = pids_in(&pid_file)[0];
    let r = c.cancel(pb::CancelRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(r.cancelled, "{r:?}");
    let t = status(&mut c, &d.task_id).await;
    assert_eq!(t.status().as_str(), "cancelled");
    assert!(eventually(Duration::from_secs(5), || !alive(setup_pid)).await, "setup {setup_pid} outlived the cancel");
    assert_eq!(leftovers(&env), (0, String::new()), "a cancelled preparation leaves no worktree or branch");
    assert!(!env.project.path().join("out.txt").exists());
}

#[tokio::test]
async fn a_daemon_killed_while_preparing_prepares_again_after_restart() {
    let mut env = Env::new(&[]);
    let pid_file = env.home.path().join("files/setup.pid");
    project(&env, &format!("read -r p _ < /proc/self/stat; echo $p >> {}; sleep 2", pid_file.display()));
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("writer", "survive a crash")).await.unwrap().into_inner();
    assert!(eventually(Duration::from_secs(20), || pids_in(&pid_file).len() == 1).await, "setup never ran");
    let orphan = pids_in(&pid_file)[0];
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    assert!(!alive(orphan), "the interrupted setup {orphan} was left running");
    assert_eq!(pids_in(&pid_file).len(), 2, "setup ran again, once");
    let (worktrees, branches) = leftovers(&env);
    assert_eq!((worktrees, branches.lines().count()), (1, 1), "one worktree and branch for the task: {branches}");
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("out.txt"), "{diff:?}");
}

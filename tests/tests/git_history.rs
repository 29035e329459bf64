//! Issue 29 item 2, through the real binaries: a worktree task's agent
//! cannot reach the user's git history. A scripted agent moves `main`,
//! tags, writes the repository's config and a hook, from its worktree and
//! straight in the user's repository; none of it changes anything of the
//! user's, and the task's work (its commit and its uncommitted files) still
//! comes through diff and apply. The daemon reads the task's work without
//! going through the worktree's `.git`, whatever the agent made of it.
//! Each test fails without the task's own git directory.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

/// A repository with one commit, for worktree tasks.
fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(p);
}

/// What of the user's repository an agent must not change: its refs (with
/// their targets), its config and its hooks.
fn history(env: &Env) -> (String, String, Vec<String>) {
    let p = env.project.path();
    let refs = git(p, &["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main", "refs/tags"]);
    let config = std::fs::read_to_string(p.join(".git/config")).unwrap();
    let mut hooks: Vec<String> = std::fs::read_dir(p.join(".git/hooks"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    hooks.sort();
    (refs, config, hooks)
}

#[tokio::test]
async fn a_worktree_task_cannot_move_the_users_branches_tags_config_or_hooks() {
    // From its worktree, where its git is its own; and, where the kernel
    // has Landlock (without it nothing confines a write task's writes),
    // straight in the user's repository.
    let direct = r#"try update-ref-user git -C "$U" update-ref refs/heads/main HEAD
try tag-user git -C "$U" tag agent-tag-2 HEAD
try config-user git -C "$U" config core.hooksPath /tmp/agent-hooks
try config-file sh -c "printf '[alias]\n\tx = !touch /tmp/agent-alias\n' >> '$U/.git/config'"
try hook sh -c "printf '#!/bin/sh\ntouch /tmp/agent-hook\n' > '$U/.git/hooks/post-checkout' && chmod +x '$U/.git/hooks/post-checkout'""#;
    let landlock = caesard::sandbox::kernel_abi().is_some();
    let attack = attack_script(&format!(
        r#"U=$(cat "$CAESAR_HOME/files/user-repo")
G="git -c user.name=a -c user.email=a@a"
echo agent > agent.txt
try commit $G commit -qam "the agent's commit"
try update-ref git update-ref refs/heads/main HEAD
try tag git tag agent-tag
{}
echo uncommitted > loose.txt"#,
        if landlock { direct } else { "" }
    ));
    let mut env = Env::new(&[(
        "attacker",
        &["write", "README.md", "hello\nagent\n", "sh", &attack, "report", "success", "tried"],
    )]);
    repo(&env);
    std::fs::write(env.file("user-repo"), env.project.path().display().to_string()).unwrap();
    let before = history(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("attacker", "attack the history");
    req.mode = "write".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.isolation, "worktree");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert!(env.file("out").join("done").exists(), "the attack did not run to its end");
    // The agent's git works in its worktree: it commits.
    assert!(attack_out(&env, "commit").contains("rc=0"), "{}", attack_out(&env, "commit"));

    let after = history(&env);
    assert_eq!(after.0, before.0, "the user's main or tags changed");
    assert_eq!(after.1, before.1, "the user's .git/config changed");
    assert_eq!(after.2, before.2, "the user's hooks changed");
    for name in ["update-ref-user", "tag-user", "config-user", "config-file", "hook"].iter().filter(|_| landlock) {
        assert!(!attack_out(&env, name).contains("rc=0"), "{name}: {}", attack_out(&env, name));
    }

    // The task's work comes through: its commit, and what it left uncommitted.
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    let mut paths: Vec<&str> = diff.files.iter().map(|f| f.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["README.md", "agent.txt", "loose.txt"], "{diff:?}");
    // Its result is kept in the user's repository, its commit on its branch.
    let p = env.project.path();
    let end = format!("refs/caesar/tasks/{}/end", d.task_id);
    assert_eq!(git(p, &["show", &format!("{end}:loose.txt")]), "uncommitted\n");
    let branch = git(p, &["for-each-ref", "--format=%(refname:short)", "refs/heads/caesar/"]);
    assert_eq!(git(p, &["log", "-1", "--format=%s", branch.trim()]).trim(), "the agent's commit");
    let a = c.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(p.join("README.md")).unwrap(), "hello\nagent\n");
    assert_eq!(std::fs::read_to_string(p.join("agent.txt")).unwrap(), "agent\n");
    assert_eq!(std::fs::read_to_string(p.join("loose.txt")).unwrap(), "uncommitted\n");
    assert_eq!(history(&env).0, before.0, "apply moved nothing either");
}

#[tokio::test]
async fn the_daemon_reads_a_task_whose_agent_broke_its_dot_git() {
    // The agent's `.git` becomes a FIFO, and its git directory's HEAD a
    // link out of it: neither blocks nor misleads the daemon.
    let plant = r#"G=$(git rev-parse --absolute-git-dir) && rm -f .git && mkfifo .git && rm -f "$G/HEAD" && ln -s /dev/zero "$G/HEAD" && touch "$CAESAR_HOME/files/planted""#;
    let mut env = Env::new(&[("planter", &["write", "b.txt", "b\n", "sh", plant, "report", "success", "planted"])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("planter", "break the .git");
    req.mode = "write".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert!(env.file("planted").exists(), "the agent did not plant: {t:?}");
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let report = json(&t.report_json);
    assert_eq!(report["changes_verified_by"], "git", "{report}");
    let diff = c.diff(pb::DiffRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("+b"), "{diff:?}");
    let a = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(a.applied, "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("b.txt")).unwrap(), "b\n");
}

#[tokio::test]
async fn a_nested_delegation_stays_inside_its_parents_repository() {
    // Another repository of the user's, which the agent names.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("x.txt"), "x\n").unwrap();
    commit_base(other.path());
    let parent = attack_script(
        r#"W=$(cat "$CAESAR_HOME/files/other")
try outside $C run --detach --agent leaf --mode write --workspace "$W" "work elsewhere"
try own $C run --detach --agent leaf --mode write "work here""#,
    );
    let mut env = Env::new(&[
        ("leaf", &["write", "leaf.txt", "leaf\n", "report", "success", "leaf"]),
        ("parent", &["sh", &parent, "report", "success", "parent"]),
    ]);
    repo(&env);
    std::fs::write(env.file("other"), other.path().display().to_string()).unwrap();
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("parent", "the parent");
    req.mode = "write".into();
    let p = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(p.isolation, "worktree");
    assert_eq!(await_one(&mut c, &p.task_id, LONG).await.status().as_str(), "succeeded");

    let outside = attack_out(&env, "outside");
    assert!(!outside.contains("rc=0") && outside.contains("stays inside its parent's repository"), "{outside}");
    // From its worktree (the default workspace), the child works in the
    // same directory of the user's repository, never through the worktree's git.
    let own = attack_out(&env, "own");
    assert!(own.contains("rc=0"), "{own}");
    assert!(own.contains("workspace_moved"), "the move is said: {own}");
    let child = own.lines().map(str::trim).find(|l| l.starts_with("t_")).unwrap().to_owned();
    let k = await_one(&mut c, &child, LONG).await;
    assert_eq!(k.status().as_str(), "succeeded", "{k:?}");
    let project = env.project.path().canonicalize().unwrap();
    assert_eq!(Path::new(&k.workspace), project, "{k:?}");
    let diff = c.diff(pb::DiffRequest { task_id: child.clone() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("+leaf"), "{diff:?}");
    // Only the parent and the one child were delegated.
    let all = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 100 }).await.unwrap().into_inner().tasks;
    assert_eq!(all.len(), 2, "{all:?}");
}

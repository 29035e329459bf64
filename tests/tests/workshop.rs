//! The git workshop through the daemon, on real repositories: worktree
//! isolation, changes verified by git, diff, apply (and twice), read-only
//! violations, the in-place refusal, discard and gc.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(60);

/// Makes the project a repository with one commit.
fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/config.local.toml\n").unwrap();
    commit_base(p);
}

#[tokio::test]
async fn a_write_task_runs_in_a_worktree_and_git_decides_what_changed() {
    let mut env = Env::new(&[]);
    env.set_agents(&[(
        "writer",
        &[
            "write", "src/new.rs", "fn main() {}\n",
            "write", "README.md", "hello\nworld\n",
            "sh", "git -c user.name=a -c user.email=a@a commit -qam 'agent commit' >/dev/null",
            "write", "notes.txt", "untracked\n",
            "report-raw", r#"{"protocol":"caesar.report/v1","status":"success","summary":"done","changes":[{"path":"src/new.rs","action":"created"},{"path":"ghost.rs","action":"modified"}]}"#,
        ],
    )]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("writer", "add a main")).await.unwrap().into_inner();
    assert_eq!(d.isolation, "worktree", "auto: a write task in a repository with a commit");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let report = json(&t.report_json);
    assert_eq!(report["changes_verified_by"], "git");
    let mut paths: Vec<&str> =
        report["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    paths.sort();
    assert_eq!(
        paths,
        ["README.md", "notes.txt", "src/new.rs"],
        "git's list, with the agent's commit and the untracked file"
    );
    assert!(
        report["findings"].as_array().unwrap().iter().any(|f| f["title"].as_str().unwrap().contains("ghost.rs")
            || f["detail"].as_str().unwrap_or("").contains("ghost.rs")),
        "a declared change git does not see is a finding: {report}"
    );
    // The main tree is untouched until apply.
    assert!(!env.project.path().join("src/new.rs").exists());
    assert_eq!(git(env.project.path(), &["status", "--porcelain"]), "");

    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(!diff.is_empty);
    assert_eq!(diff.files.len(), 3);
    assert!(diff.patch.contains("+world"));

    let a = c.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\nworld\n");
    assert!(env.project.path().join("src/new.rs").exists());
    assert_eq!(git(env.project.path(), &["log", "--oneline"]).lines().count(), 1, "apply never commits");
    let again = c.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(again.already_applied, "applying twice gets a clear answer: {again:?}");

    // Applied: gc may remove the worktree.
    let gc = c.gc(pb::GcRequest { dry_run: false, force: false, older_than_ms: 1 }).await.unwrap().into_inner();
    assert_eq!(gc.items.len(), 1);
    assert_eq!(gc.items[0].action, "removed", "{:?}", gc.items);
    assert!(!Path::new(&gc.items[0].worktree).exists());
}

/// Issue 33: a read-only task whose box the kernel keeps out of its
/// repository is not snapshotted, so the user's own edit while it runs is
/// not taken for the task's (git compared the tree before and after, and
/// flagged the edit as the read-only task's). A project that a `.caesar`
/// marks in a subdirectory of its repository: the repository around it is
/// out of the task's reach too, and its snapshots are still taken.
#[tokio::test]
async fn a_users_edit_during_a_kernel_read_only_task_is_not_the_tasks() {
    if caesard::sandbox::kernel_abi().is_none_or(|v| v < 3) {
        eprintln!("skipped: no Landlock ABI 3 here, so every read-only task is snapshotted");
        return;
    }
    let mut env = Env::new(&[]);
    let files = env.home.path().join("files");
    let (up, go) = (files.join("up").display().to_string(), files.join("go").display().to_string());
    env.set_agents(&[(
        "reader",
        &["write", &up, "x", "wait-file", &go, "write", "../README.md", "agent\n", "report", "success", "looked"],
    )]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("reader", "look only");
    req.mode = "read-only".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(eventually(LONG, || files.join("up").exists()).await, "the agent never started");
    std::fs::write(env.project.path().join("README.md"), "hello\nuser\n").unwrap();
    std::fs::write(files.join("go"), "").unwrap();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let report = json(&t.report_json);
    assert_eq!(report["changes_verified_by"], "kernel", "{report}");
    assert_eq!(report["changes"], serde_json::json!([]), "{report}");
    assert!(!t.report_json.contains("\"high\""), "the user's edit flagged as the task's: {report}");
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(diff.is_empty && diff.files.is_empty(), "{diff:?}");

    // `.caesar` in `sub`: the project is `sub`, the repository its parent.
    let sub = env.project.path().join("sub");
    std::fs::create_dir_all(sub.join(".caesar")).unwrap();
    std::fs::rename(env.project.path().join(".caesar/config.toml"), sub.join(".caesar/config.toml")).unwrap();
    std::fs::remove_file(files.join("go")).unwrap();
    let mut req = env.delegate_request("reader", "look only, from a subdirectory");
    req.mode = "read-only".into();
    req.workspace = sub.display().to_string();
    let d = c.delegate(req).await.unwrap().into_inner();
    std::fs::write(files.join("go"), "").unwrap();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\nuser\n");
    assert_eq!(json(&t.report_json)["changes_verified_by"], "git", "{}", t.report_json);
}

#[tokio::test]
async fn unapplied_work_is_kept_by_gc_until_discarded() {
    let mut env = Env::new(&[]);
    env.set_agents(&[("writer", &["write", "a.txt", "a\n", "report", "success", "wrote a"])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("writer", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let gc = c.gc(pb::GcRequest { dry_run: false, force: false, older_than_ms: 1 }).await.unwrap().into_inner();
    assert_eq!(gc.items[0].action, "kept");
    assert!(gc.items[0].reason.contains("neither applied nor discarded"), "{:?}", gc.items);
    c.discard(pb::DiscardRequest { task_id: id.clone() }).await.unwrap();
    let e = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    let dry = c.gc(pb::GcRequest { dry_run: true, force: false, older_than_ms: 1 }).await.unwrap().into_inner();
    assert_eq!(dry.items[0].action, "would remove");
    let gc = c.gc(pb::GcRequest { dry_run: false, force: false, older_than_ms: 1 }).await.unwrap().into_inner();
    assert_eq!(gc.items[0].action, "removed");
}

#[tokio::test]
async fn a_read_only_task_that_writes_is_flagged_and_inplace_writes_are_refused() {
    let mut env = Env::new(&[]);
    env.set_agents(&[
        ("sneaky", &["write", "README.md", "changed\n", "report", "success", "only looked"]),
        ("climber", &["write", "../README.md", "changed\n", "report", "success", "only looked"]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("sneaky", "look only");
    req.mode = "read-only".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.isolation, "inplace");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    let report = json(&t.report_json);
    // Where the kernel refuses every write (Landlock ABI 3), it says the task changed nothing, not git.
    let by_kernel = caesard::sandbox::kernel_abi().is_some_and(|v| v >= 3);
    assert_eq!(report["changes_verified_by"], if by_kernel { "kernel" } else { "git" }, "{report}");
    if caesard::sandbox::kernel_abi().is_some() {
        // Landlock (issue 19): the kernel refuses the write itself.
        assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\n");
        // Nothing changed: the kernel says so, or git, comparing the tree with the snapshot taken before.
        let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
        assert!(diff.is_empty && diff.files.is_empty(), "{diff:?}");
    } else {
        // No kernel confinement: git sees the write, and the report says so.
        let high = report["findings"].as_array().unwrap().iter().find(|f| f["severity"] == "high").cloned();
        assert!(high.is_some_and(|f| f.to_string().contains("README.md")), "{report}");
    }

    // A read-only task in a subdirectory of the project, named through a
    // link: its project's other files stay out of its reach. The carving
    // compares paths as strings, so the project is protected by its real
    // path too, not only as the link names it.
    if caesard::sandbox::kernel_abi().is_some() {
        std::fs::create_dir_all(env.project.path().join("sub")).unwrap();
        let links = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(env.project.path(), links.path().join("ws")).unwrap();
        let mut req = env.delegate_request("climber", "look only, through a link");
        req.mode = "read-only".into();
        req.workspace = links.path().join("ws/sub").display().to_string();
        let d = c.delegate(req).await.unwrap().into_inner();
        let t = await_one(&mut c, &d.task_id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
        assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\n");
    }

    let mut req = env.delegate_request("sneaky", "write in place");
    req.isolation = "inplace".into();
    let before = git(env.project.path(), &["status", "--porcelain"]);
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("allow_inplace_write"), "{}", e.message());
    assert_eq!(git(env.project.path(), &["status", "--porcelain"]), before, "nothing written");
}

//! Continuing a finished task in its own worktree (issue 31, item 2), through the real daemon,
//! CLI and a scripted agent: the first task writes file A, its continuation (after a daemon
//! restart) finds A in the same worktree and writes B; the continuation's diff holds both,
//! there is one worktree, `caesar apply` lands both; the lineage shows in status; and each
//! refusal (unknown, still running, continued already, an older link applied or discarded,
//! applied, read-only continued in write mode) is a clear error with exit 2.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Output;
use std::time::Duration;

use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(60);

/// Writes `a.txt`, or `b.txt` when `a.txt` is there already (a continuation in the same worktree).
const WRITER: &[&str] =
    &["sh", "if [ -f a.txt ]; then echo b > b.txt; else echo a > a.txt; fi", "report", "success", "done"];

fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/config.local.toml\n").unwrap();
    commit_base(p);
}

fn text_of(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn write_request(env: &Env, agent: &str, objective: &str) -> pb::DelegateRequest {
    pb::DelegateRequest { mode: "write".to_owned(), ..env.delegate_request(agent, objective) }
}

/// The directories under `<repo>/.caesar/wt`, sorted.
fn worktrees(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.project.path().join(".caesar/wt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_continuation_works_in_the_same_worktree_and_its_diff_holds_all_the_work() {
    let mut env = Env::new(&[("writer", WRITER)]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let first = c.delegate(write_request(&env, "writer", "write a")).await.unwrap().into_inner();
    assert_eq!(first.isolation, "worktree");
    let t = await_one(&mut c, &first.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);

    // The daemon restarts between the source's end and its continuation.
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;

    let out = env.caesar(&["continue", &first.task_id, "now write b", "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    let second = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(second.starts_with("t_") && second != first.task_id, "a new task id: {second}");
    let t = await_one(&mut c, &second, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    assert_eq!(t.continues, first.task_id, "the lineage shows in the view");
    assert_eq!((t.mode.as_str(), t.isolation.as_str()), ("write", "worktree"));
    let source = c.status(pb::StatusRequest { task_id: first.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(source.continued_by, second);
    let status = env.caesar(&["status", &second]);
    assert!(text_of(&status).contains(&format!("continues: {}", first.task_id)), "{}", text_of(&status));

    // One worktree, the source's; the continuation's diff is the whole work since the base.
    assert_eq!(worktrees(&env), [first.task_id.clone(), format!("{}.git", first.task_id)]);
    let diff = c.diff(pb::DiffRequest { task_id: second.clone() }).await.unwrap().into_inner();
    let mut files: Vec<&str> = diff.files.iter().map(|f| f.path.as_str()).collect();
    files.sort();
    assert_eq!(files, ["a.txt", "b.txt"], "{}", diff.patch);
    let report = json(&t.report_json);
    assert_eq!(report["changes"].as_array().unwrap().len(), 2, "git's list: {report}");

    // The worktree is the newest task's: the source is neither continued again, nor applied
    // or discarded; each refusal names the newest.
    let out = env.caesar(&["continue", &first.task_id, "again"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains(&format!("already continued by task {second}")), "{}", text_of(&out));
    assert!(text_of(&out).contains(&format!("caesar continue {second}")), "{}", text_of(&out));
    let e = c.apply(pb::ApplyRequest { task_id: first.task_id.clone() }).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains(&format!("apply {second} instead")), "{}", e.message());
    let e = c.discard(pb::DiscardRequest { task_id: first.task_id.clone() }).await.unwrap_err();
    assert!(e.message().contains(&format!("discard {second} instead")), "{}", e.message());
    let gc = c.gc(pb::GcRequest { dry_run: true, force: true, older_than_ms: 1 }).await.unwrap().into_inner();
    let kept = gc.items.iter().find(|i| i.task_id == first.task_id).unwrap();
    assert_eq!(kept.action, "kept", "even forced, gc keeps an older link's worktree: {kept:?}");

    // Apply lands both files.
    let out = env.caesar(&["apply", &second]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    assert_eq!(std::fs::read_to_string(env.project.path().join("a.txt")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(env.project.path().join("b.txt")).unwrap(), "b\n");
    let out = env.caesar(&["continue", &second, "more"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("already applied"), "{}", text_of(&out));
}

#[tokio::test]
async fn continuations_that_cannot_be_are_refused_clearly() {
    let mut env = Env::new(&[
        ("writer", WRITER),
        ("reader", &["report", "success", "looked"]),
        ("slow", &["wait-file", "/nonexistent/never", "report", "success", "x"]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;

    let out = env.caesar(&["continue", "t_000000000000", "go on"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("no task `t_000000000000`"), "{}", text_of(&out));

    let running = c.delegate(write_request(&env, "slow", "wait")).await.unwrap().into_inner();
    let out = env.caesar(&["continue", &running.task_id, "go on"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains(&format!("caesar steer {}", running.task_id)), "{}", text_of(&out));
    c.cancel(pb::CancelRequest { task_id: running.task_id.clone() }).await.unwrap();

    let ro = pb::DelegateRequest { mode: "read-only".to_owned(), ..env.delegate_request("reader", "look") };
    let ro = c.delegate(ro).await.unwrap().into_inner();
    await_one(&mut c, &ro.task_id, LONG).await;
    let out = env.caesar(&["continue", &ro.task_id, "now change it", "--mode", "write"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("ran read-only, so it cannot be continued in write mode"), "{}", text_of(&out));

    // The MCP-shaped request: a discarded task is not continued.
    let w = c.delegate(write_request(&env, "writer", "write a")).await.unwrap().into_inner();
    await_one(&mut c, &w.task_id, LONG).await;
    c.discard(pb::DiscardRequest { task_id: w.task_id.clone() }).await.unwrap();
    let req = pb::DelegateRequest { continue_from: w.task_id.clone(), ..env.delegate_request("", "more") };
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("were discarded"), "{}", e.message());
}

/// Stands in for claude's stream-json protocol: records its argv, names a session, answers once.
const CLAUDE: &str = r#"#!/usr/bin/env python3
import json, os, sys
d = os.environ["CAESAR_TASK_DIR"]
open(os.path.join(d, "argv"), "w").write("\n".join(sys.argv[1:]))
sys.stdin.readline()
def say(v):
    print(json.dumps(v, separators=(",", ":")), flush=True)
say({"type": "system", "subtype": "init", "session_id": "s-first"})
say({"type": "result", "subtype": "success", "is_error": False, "result": "done"})
sys.stdin.read()
"#;

#[tokio::test]
async fn a_continuation_resumes_the_agents_session() {
    let mut env = Env::new(&[]);
    let claude = env.home.path().join("claude");
    std::fs::write(&claude, CLAUDE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("[policy]\nallow_recursion = true\n\n[bin]\nclaude = {:?}\n", claude.display().to_string()),
    )
    .unwrap();
    repo(&env);
    let mut c = env.start_daemon().await;
    let first = c.delegate(write_request(&env, "claude", "start")).await.unwrap().into_inner();
    let t = await_one(&mut c, &first.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.session_id.as_str()), ("succeeded", "s-first"), "{}", t.error);
    let req = pb::DelegateRequest { continue_from: first.task_id.clone(), ..env.delegate_request("", "go on") };
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.agent, "claude", "the source's agent");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let argv = std::fs::read_to_string(std::path::Path::new(&t.task_dir).join("argv")).unwrap();
    assert!(argv.contains("--resume\ns-first"), "the native session is resumed: {argv}");
}

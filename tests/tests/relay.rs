//! The relay on blockers (issue 31, item 3), through the real daemon, CLI and scripted agents:
//! agent one edits two files in its worktree and is then refused with a usage limit; agent two
//! starts in the same worktree path under the same task id, its brief holds the git-checked
//! diff stat and the open acceptance criteria, and `await` on the one id returns agent two's
//! result; a relay whose next agent is not installed leaves a clear finding and the work where
//! it was; and a daemon SIGKILL around the blocker starts exactly one agent two.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::Output;
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

fn quota() -> String {
    serde_json::json!({"type": "blocker", "kind": "rate_limit", "message": "You've hit your usage limit."}).to_string()
}

fn text_of(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A repository with one commit and a role `pair` of `agents` in write mode, in worktrees.
fn project(env: &Env, agents: &str, extra: &str) {
    let p = env.project.path();
    let mut f = std::fs::OpenOptions::new().append(true).open(p.join(".caesar/config.toml")).unwrap();
    write!(f, "{extra}[[role]]\nname = \"pair\"\nagents = {agents}\nmode = \"write\"\nisolation = \"worktree\"\n")
        .unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    commit_base(p);
}

fn request(env: &Env) -> pb::DelegateRequest {
    pb::DelegateRequest {
        objective: "write a and b, then c".to_owned(),
        role: "pair".to_owned(),
        mode: "write".to_owned(),
        workspace: env.workspace(),
        acceptance_criteria: vec!["c.txt joins a.txt and b.txt".to_owned()],
        ..Default::default()
    }
}

fn diff_files(d: &pb::DiffResponse) -> Vec<String> {
    let mut files: Vec<String> = d.files.iter().map(|f| f.path.clone()).collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_blocked_agent_that_changed_files_is_relayed_in_its_worktree_under_one_id() {
    let mut env = Env::new(&[]);
    let pwd = env.file("two-pwd").display().to_string();
    let quota = quota();
    env.set_agents(&[
        ("one", &["write", "a.txt", "a\n", "write", "b.txt", "b\n", "event", &quota, "hang"]),
        ("two", &["sh", &format!("pwd > {pwd}; cat a.txt b.txt > c.txt"), "report", "success", "two finished"]),
    ]);
    project(&env, "[\"one\", \"two\"]", "");
    let mut c = env.start_daemon().await;
    let d = c.delegate(request(&env)).await.unwrap().into_inner();
    assert_eq!((d.agent.as_str(), d.isolation.as_str()), ("one", "worktree"));

    let out = env.caesar(&["--json", "await", &d.task_id, "--timeout", "60s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    assert!(
        text_of(&out).contains("two finished"),
        "await on the one id returns agent two's result: {}",
        text_of(&out)
    );
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.task_id.as_str(), t.agent.as_str(), t.status().as_str()), (d.task_id.as_str(), "two", "succeeded"));
    assert_eq!(json(&t.report_json)["summary"], "two finished");
    assert_eq!(t.attempts.len(), 1, "{:?}", t.attempts);
    assert_eq!((t.attempts[0].agent.as_str(), t.attempts[0].stopped_by().as_str()), ("one", "rate_limit"));
    // The attempts list shows agent one's part: two files, relayed.
    assert_eq!((t.attempts[0].files_changed, t.attempts[0].relayed), (2, true), "{:?}", t.attempts);
    let status = env.caesar(&["status", &d.task_id]);
    assert!(text_of(&status).contains("relayed with 2 file(s) changed"), "{}", text_of(&status));

    // The same worktree path.
    let worktree = std::fs::canonicalize(&d.worktree).unwrap();
    let seen = std::fs::read_to_string(&pwd).unwrap();
    assert_eq!(std::fs::canonicalize(seen.trim()).unwrap(), worktree);
    // Its brief holds the diff stat and the open acceptance criteria.
    let two = c.status(pb::StatusRequest { task_id: t.current_task_id.clone() }).await.unwrap().into_inner();
    let doc = json(&std::fs::read_to_string(std::path::Path::new(&two.task_dir).join("task.json")).unwrap());
    let context = doc["context"].as_str().unwrap();
    for part in [
        "You take over task",
        "from agent `one`",
        "rate_limit: You've hit your usage limit.",
        "- added a.txt (+1 -0)",
        "- added b.txt (+1 -0)",
        "2 files changed, 2 insertions(+), 0 deletions(-)",
        "## Acceptance criteria (open until you meet them)\n- c.txt joins a.txt and b.txt",
    ] {
        assert!(context.contains(part), "missing {part:?} in the brief:\n{context}");
    }

    // The diff of the one id is the whole work; apply lands it.
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(diff_files(&diff), ["a.txt", "b.txt", "c.txt"]);
    let a = c.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(a.applied, "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("c.txt")).unwrap(), "a\nb\n");
}

#[tokio::test]
async fn a_relay_whose_next_agent_is_not_installed_is_a_finding_and_loses_nothing() {
    let quota = quota();
    let mut env = Env::new(&[("one", &["write", "a.txt", "a\n", "event", &quota, "hang"])]);
    project(&env, "[\"one\", \"ghost\"]", "[[agent]]\nid = \"ghost\"\nbin = \"/nonexistent/ghost-agent\"\n\n");
    let mut c = env.start_daemon().await;
    let d = c.delegate(request(&env)).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.agent.as_str(), t.report_status.as_str()), ("one", "blocked"), "{t:?}");
    assert!(t.attempts.is_empty());
    let findings = json(&t.report_json)["findings"].to_string();
    assert!(
        findings.contains("no relay: the rest of the role's chain is not installed or not allowed (ghost)"),
        "{findings}"
    );
    assert!(findings.contains("nothing is lost"), "{findings}");
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(diff_files(&diff), ["a.txt"]);
}

#[tokio::test]
async fn a_daemon_sigkill_around_the_blocker_starts_exactly_one_agent_two() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let gate_s = gate.display().to_string();
    let runs = env.file("two-runs").display().to_string();
    let quota = quota();
    env.set_agents(&[
        ("one", &["write", "a.txt", "a\n", "write", "b.txt", "b\n", "wait-file", &gate_s, "event", &quota, "hang"]),
        ("two", &["sh", &format!("echo run >> {runs}"), "report", "success", "two finished"]),
    ]);
    project(&env, "[\"one\", \"two\"]", "");
    let mut c = env.start_daemon().await;
    let d = c.delegate(request(&env)).await.unwrap().into_inner();
    assert!(eventually(LONG, || std::path::Path::new(&d.worktree).join("b.txt").exists()).await);
    // The blocker comes while no daemon watches.
    env.kill_daemons().await;
    std::fs::write(&gate, "").unwrap();
    let raw = caesar_tests::daemon_files(&d.task_dir).join("raw.log");
    assert!(eventually(LONG, || std::fs::read_to_string(&raw).is_ok_and(|s| s.contains("usage limit"))).await);
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.agent.as_str()), ("succeeded", "two"), "{t:?}");
    // A second restart makes no second agent two.
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let probe = pb::DelegateRequest { mode: "write".to_owned(), ..env.delegate_request("two", "after recovery") };
    let probe = c.delegate(probe).await.unwrap().into_inner();
    assert_eq!(await_one(&mut c, &probe.task_id, LONG).await.status().as_str(), "succeeded");
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2, "the relay's agent two and the probe");
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(ps.tasks.len(), 3, "one, its one relay, the probe");
}

fn usage(input: u64, output: u64) -> String {
    serde_json::json!({"type": "usage", "input_tokens": input, "output_tokens": output}).to_string()
}

#[tokio::test]
async fn a_budget_stop_after_changes_is_relayed_like_a_quota() {
    let mut env = Env::new(&[]);
    let pwd = env.file("two-pwd").display().to_string();
    let spent = usage(700, 400);
    env.set_agents(&[
        ("one", &["write", "a.txt", "a\n", "write", "b.txt", "b\n", "event", &spent, "hang"]),
        ("two", &["sh", &format!("pwd > {pwd}; cat a.txt b.txt > c.txt"), "report", "success", "two finished"]),
    ]);
    project(&env, "[\"one\", \"two\"]", "");
    let mut c = env.start_daemon().await;
    let mut req = request(&env);
    req.budget = Some(pb::Budget { tokens: Some(1000), ..Default::default() });
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(
        (t.task_id.as_str(), t.agent.as_str(), t.status().as_str()),
        (d.task_id.as_str(), "two", "succeeded"),
        "{t:?}"
    );
    assert_eq!(t.attempts.len(), 1, "{:?}", t.attempts);
    let a = &t.attempts[0];
    assert_eq!(
        (a.agent.as_str(), a.stopped_by(), a.files_changed, a.relayed),
        ("one", pb::BlockerKind::Budget, 2, true)
    );
    assert!(a.message.contains("the tokens limit: 1100 tokens used of a budget of 1000"), "{}", a.message);
    let seen = std::fs::read_to_string(&pwd).unwrap();
    assert_eq!(std::fs::canonicalize(seen.trim()).unwrap(), std::fs::canonicalize(&d.worktree).unwrap());
    let two = c.status(pb::StatusRequest { task_id: t.current_task_id.clone() }).await.unwrap().into_inner();
    let doc = json(&std::fs::read_to_string(std::path::Path::new(&two.task_dir).join("task.json")).unwrap());
    let context = doc["context"].as_str().unwrap();
    for part in ["from agent `one`", "budget: the tokens limit", "2 files changed", "- c.txt joins a.txt and b.txt"] {
        assert!(context.contains(part), "missing {part:?} in the brief:\n{context}");
    }
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(diff_files(&diff), ["a.txt", "b.txt", "c.txt"]);
}

#[tokio::test]
async fn a_budget_stop_with_nothing_changed_ends_there() {
    let spent = usage(700, 400);
    let mut env = Env::new(&[("one", &["event", &spent, "hang"]), ("two", &["report", "success", "never"])]);
    project(&env, "[\"one\", \"two\"]", "");
    let mut c = env.start_daemon().await;
    let mut req = request(&env);
    req.budget = Some(pb::Budget { tokens: Some(1000), ..Default::default() });
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(
        (t.agent.as_str(), t.status().as_str(), t.report_status.as_str()),
        ("one", "failed", "partial"),
        "{t:?}"
    );
    assert!(t.attempts.is_empty(), "a budget stop is not a reason to fall back: {:?}", t.attempts);
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(ps.tasks.len(), 1);
}

#[tokio::test]
async fn a_relay_goes_to_the_agent_the_caller_names() {
    let mut env = Env::new(&[]);
    let quota = quota();
    env.set_agents(&[
        ("one", &["write", "a.txt", "a\n", "event", &quota, "hang"]),
        ("two", &["report", "success", "the role's next agent, not named"]),
        ("three", &["sh", "cat a.txt a.txt > c.txt", "report", "success", "three finished"]),
    ]);
    project(&env, "[\"one\", \"two\"]", "");
    let _c = env.start_daemon().await;
    // Through the CLI, by agent: no role chain, the named one takes over.
    let out = env.caesar(&[
        "--json",
        "run",
        "--agent",
        "one",
        "--relay-to",
        "three",
        "--mode",
        "write",
        "--isolation",
        "worktree",
        "write a, then c",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    let text = text_of(&out);
    assert!(text.contains("three finished"), "{text}");
    let mut c = env.client().await;
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    let mut agents: Vec<&str> = ps.tasks.iter().map(|t| t.agent.as_str()).collect();
    agents.sort_unstable();
    assert_eq!(agents, ["one", "three"], "{ps:?}");
    // Over the RPC, in a role: the named agent, not the role's next one.
    let mut req = request(&env);
    (req.agent, req.relay_to) = ("one".to_owned(), "three".to_owned());
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.agent.as_str(), t.status().as_str()), ("three", "succeeded"), "{t:?}");
    assert_eq!((t.attempts[0].agent.as_str(), t.attempts[0].relayed), ("one", true), "{:?}", t.attempts);
    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(diff_files(&diff), ["a.txt", "c.txt"]);
}

#[tokio::test]
async fn a_named_next_agent_that_cannot_take_over_is_refused_at_delegation() {
    let mut env = Env::new(&[("one", &["report", "success", "never run"])]);
    project(&env, "[\"one\"]", "[[agent]]\nid = \"ghost\"\nbin = \"/nonexistent/ghost-agent\"\n\n");
    let mut c = env.start_daemon().await;
    for (relay_to, on_blocker, says) in [
        ("ghost", "", "relay_to `ghost` could not take over this task: agent `ghost`: its executable"),
        ("nobody", "", "relay_to `nobody` could not take over this task"),
        ("one", "", "relay_to `one` is the task's own agent"),
        ("ghost", "fail", "relay_to `ghost` with on_blocker `fail`"),
    ] {
        let mut req = request(&env);
        (req.relay_to, req.on_blocker) = (relay_to.to_owned(), on_blocker.to_owned());
        let e = c.delegate(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(says), "{relay_to}: {}", e.message());
        assert!(e.message().contains("relay_to out"), "the fix: {}", e.message());
    }
    let out = env.caesar(&["run", "--agent", "one", "--relay-to", "ghost", "--mode", "write", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("relay_to `ghost` could not take over"), "{}", text_of(&out));
    assert!(text_of(&out).contains("`caesar agents` lists them"), "{}", text_of(&out));
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert!(ps.tasks.is_empty(), "nothing started: {ps:?}");
}

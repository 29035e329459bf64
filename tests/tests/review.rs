//! The review loop (issue 32, item 2), through the real daemon, CLI, dashboard API and scripted
//! agents: a reviewer that finds two anchored findings in round 1 and approves in round 2 (its
//! first round held across a daemon SIGKILL); a finding on a hunk the worker rewrote reported
//! stale and not sent, the loop ending `partial` with the open finding in the worker's report;
//! malformed and 10 MB reviews bounded into a finding of the round; bad requests refused by name.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "review/scripts.rs"]
mod scripts;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Output;
use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use scripts::{WORKER, block};
use serde_json::Value;
use tonic::Code;

const LONG: Duration = Duration::from_secs(90);

fn text_of(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A repository with `.caesar/` ignored and one commit.
fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(p);
}

fn request(env: &Env, rounds: u32) -> pb::DelegateRequest {
    pb::DelegateRequest {
        mode: "write".to_owned(),
        review_by: "rev".to_owned(),
        review_rounds: rounds,
        ..env.delegate_request("writer", "write a and b")
    }
}

/// Waits until the loop of `task` is no longer under way; returns the task's view.
async fn loop_end(c: &mut Client, task: &str) -> pb::TaskView {
    let start = std::time::Instant::now();
    loop {
        let v = c.status(pb::StatusRequest { task_id: task.to_owned() }).await.unwrap().into_inner();
        if !v.review.contains("the loop is in round") {
            return v;
        }
        assert!(start.elapsed() < LONG, "the loop did not end: {}", v.review);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The task's objective as its agent was given it (task.json).
async fn objective_of(c: &mut Client, task: &str) -> String {
    let v = c.status(pb::StatusRequest { task_id: task.to_owned() }).await.unwrap().into_inner();
    let doc = json(&std::fs::read_to_string(std::path::Path::new(&v.task_dir).join("task.json")).unwrap());
    doc["objective"].as_str().unwrap().to_owned()
}

fn group_members(env: &Env, group: &str) -> Vec<String> {
    let out = env.caesar(&["--json", "status", group]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    let v = json(String::from_utf8_lossy(&out.stdout).trim());
    let members = v["members"].as_array().or_else(|| v["tasks"].as_array()).unwrap_or_else(|| panic!("{v}"));
    members.iter().map(|m| m["task_id"].as_str().unwrap().to_owned()).collect()
}

/// `GET path` of the dashboard's API with the full token; the JSON body.
fn api(env: &Env, port: u16, path: &str) -> Value {
    let o = env.caesar(&["--json", "mcp", "token"]);
    assert!(o.status.success(), "{o:?}");
    let token = json(String::from_utf8_lossy(&o.stdout).trim())["token"].as_str().unwrap().to_owned();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    json(out.split_once("\r\n\r\n").unwrap().1)
}

#[tokio::test]
async fn two_findings_go_back_to_the_worker_and_the_loop_stops_when_the_reviewer_approves() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    let (changes, approve) = (env.file("changes.txt"), env.file("approve.txt"));
    std::fs::write(
        &changes,
        block("changes", &[("a.txt", 1, "@@ -0,0 +1 @@\n+one", "a is wrong"), ("b.txt", 1, "+bee", "b is thin")]),
    )
    .unwrap();
    std::fs::write(&approve, block("approve", &[])).unwrap();
    let review = format!(
        "if grep -q fixed a.txt; then cat {}; else while [ ! -f {gate} ]; do sleep 0.05; done; cat {}; fi",
        approve.display(),
        changes.display()
    );
    env.set_agents(&[("writer", WORKER), ("rev", &["sh", &review])]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(env.home.path().join("config")).unwrap();
    std::fs::write(env.home.path().join("config/config.toml"), format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        .unwrap();
    repo(&env);
    let mut c = env.start_daemon().await;
    let d = c.delegate(request(&env, 0)).await.unwrap().into_inner();
    assert!(d.group_id.starts_with("g_"), "the loop's rounds make a group: {d:?}");
    let first = d.task_id.clone();

    // Round 1's reviewer runs (it waits on the gate): the daemon is SIGKILLed and restarted.
    assert!(
        eventually(LONG, || group_members(&env, &d.group_id).len() == 2).await,
        "the reviewer of round 1 joins the group"
    );
    let reviewer1 = group_members(&env, &d.group_id)[1].clone();
    let r1 = await_status(&mut c, &reviewer1, "running").await;
    assert_eq!((r1.agent.as_str(), r1.mode.as_str(), r1.isolation.as_str()), ("rev", "read-only", "worktree"));
    assert_eq!(
        r1.parents,
        std::slice::from_ref(&first),
        "the reviewer reads the worker's result, in a worktree of its own"
    );
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    std::fs::write(&gate, "").unwrap();

    let end = loop_end(&mut c, &first).await;
    assert!(end.review.contains("the loop is approved: approved by agent `rev` in round 2"), "{}", end.review);
    // Four runs side by side, each started once: worker, reviewer, worker, reviewer.
    let members = group_members(&env, &d.group_id);
    assert_eq!(members.len(), 4, "{members:?}");
    assert_eq!((members[0].as_str(), members[1].as_str()), (first.as_str(), reviewer1.as_str()));
    let tasks = c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks;
    assert_eq!(tasks.len(), 4, "no round started twice: {tasks:?}");
    let second = members[2].clone();
    let w1 = c.status(pb::StatusRequest { task_id: first.clone() }).await.unwrap().into_inner();
    assert_eq!(w1.continued_by, second, "the worker's second run continues the first in its worktree");
    let w2 = await_one(&mut c, &second, LONG).await;
    assert_eq!((w2.status().as_str(), w2.continued_by.as_str()), ("succeeded", ""), "no third run");

    // The worker's second run got both findings, each with its place and hunk.
    let prompt = objective_of(&mut c, &second).await;
    for part in ["a.txt:1 [high] a is wrong", "@@ -0,0 +1 @@\n+one", "b.txt:1 [high] b is thin", "+bee", "agent `rev`"]
    {
        assert!(prompt.contains(part), "missing {part:?} in the worker's prompt:\n{prompt}");
    }
    // Both findings were sent, then resolved by round 2's review; the status shows them.
    let states: Vec<(u32, &str, u64, &str)> =
        w2.review_findings.iter().map(|f| (f.round, f.file.as_str(), f.line, f.state.as_str())).collect();
    assert_eq!(states, [(1, "a.txt", 1, "resolved"), (1, "b.txt", 1, "resolved")]);
    let status = text_of(&env.caesar(&["status", &second]));
    assert!(status.contains("review: round 2 of 3, the worker's run; the loop is approved"), "{status}");
    assert!(status.contains("round 1 a.txt:1 [high] a is wrong (resolved)"), "{status}");

    // The dashboard's API shows the findings at their lines.
    let v = api(&env, port, &format!("/api/task/{second}"));
    let f = v["review_findings"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(f.len(), 2, "{v}");
    assert_eq!(
        (f[0]["file"].as_str(), f[0]["line"].as_u64(), f[0]["round"].as_u64()),
        (Some("a.txt"), Some(1), Some(1))
    );
    assert_eq!(f[0]["reviewer_task_id"], reviewer1.as_str());
    assert_eq!(
        (f[1]["hunk"].as_str(), f[1]["severity"].as_str(), f[1]["state"].as_str()),
        (Some("+bee"), Some("high"), Some("resolved"))
    );
    assert_eq!(f[1]["title"], "b is thin");
    assert_eq!(f[1]["detail"], "fix it");
    let diff = c.diff(pb::DiffRequest { task_id: second.clone() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("+fixed") && diff.patch.contains("+bee"), "{}", diff.patch);
}

#[tokio::test]
async fn a_finding_on_a_rewritten_hunk_is_stale_and_not_sent_and_the_last_round_ends_partial() {
    let mut env = Env::new(&[]);
    let changes = env.file("changes.txt");
    // The reviewer says the same every round: a.txt's first hunk (which the worker rewrites
    // in round 2) and b.txt's (which it never touches).
    std::fs::write(
        &changes,
        block("changes", &[("a.txt", 1, "+one", "a is wrong"), ("b.txt", 1, "+bee", "b is thin")]),
    )
    .unwrap();
    env.set_agents(&[("writer", WORKER), ("rev", &["sh", &format!("cat {}", changes.display())])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let d = c.delegate(request(&env, 3)).await.unwrap().into_inner();
    // An await on the loop's group returns at the loop's end, with every round's runs.
    let a = c
        .r#await(pb::AwaitRequest { task_ids: vec![d.group_id.clone()], timeout_ms: 90_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.tasks.len(), 6, "{:?}", a.tasks.iter().map(|t| &t.task_id).collect::<Vec<_>>());
    assert!(a.groups[0].done, "the group is done when its loop is");
    let end = c.status(pb::StatusRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(
        end.review
            .contains("the loop is partial: the reviewer still asks for changes after 3 round(s): 1 finding(s) open"),
        "{}",
        end.review
    );
    let members = group_members(&env, &d.group_id);
    assert_eq!(members.len(), 6, "three rounds of two runs: {members:?}");
    let states: Vec<(u32, &str, &str)> =
        end.review_findings.iter().map(|f| (f.round, f.file.as_str(), f.state.as_str())).collect();
    assert_eq!(
        states,
        [
            (1, "a.txt", "resolved"),
            (1, "b.txt", "resolved"),
            (2, "a.txt", "stale"),
            (2, "b.txt", "resolved"),
            (3, "a.txt", "stale"),
            (3, "b.txt", "open"),
        ]
    );
    // Round 3's worker got b.txt's finding only.
    let prompt = objective_of(&mut c, &members[4]).await;
    assert!(prompt.contains("b.txt:1 [high] b is thin"), "{prompt}");
    assert!(!prompt.contains("a is wrong"), "a stale finding is not sent:\n{prompt}");
    // The last worker's report is partial and lists the open finding, not the stale one.
    let last = await_one(&mut c, &members[4], LONG).await;
    assert_eq!(last.report_status, "partial", "{}", last.report_json);
    let report = json(&last.report_json);
    let titles: Vec<&str> =
        report["findings"].as_array().unwrap().iter().map(|f| f["title"].as_str().unwrap()).collect();
    assert!(titles.contains(&"review (round 3): b is thin"), "{titles:?}");
    assert!(!titles.iter().any(|t| t.contains("a is wrong")), "{titles:?}");
}

#[tokio::test]
async fn malformed_and_ten_megabyte_reviews_are_a_finding_of_the_round_and_the_daemon_stays_small() {
    let huge = "printf 'x\\n```json caesar:review\\n{\"verdict\":\"changes\",\"findings\":[\\n'; \
                yes '{\"file\":\"a.txt\",\"line\":1,\"title\":\"t\"},' | head -c 10485760; printf '{}]}\\n```\\n'";
    let mut env = Env::new(&[
        ("writer", WORKER),
        ("garbled", &["say", "```json caesar:review\n{\"verdict\": \"changes\", \"findings\": [\n```"]),
        ("huge", &["sh", huge]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let rss = |pid: u32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").trim().parse().unwrap()
    };
    let pid = env.daemon_pid().await;
    let before = rss(pid);
    for (reviewer, problem) in [("garbled", "is not valid JSON"), ("huge", "more than the 262144 read")] {
        let req = pb::DelegateRequest { review_by: reviewer.to_owned(), ..request(&env, 2) };
        let d = c.delegate(req).await.unwrap().into_inner();
        let end = loop_end(&mut c, &d.task_id).await;
        assert!(end.review.contains("the loop is partial: the review of round 1 could not be read"), "{}", end.review);
        assert!(end.review.contains(problem), "{}", end.review);
        assert_eq!(end.review_findings.len(), 1, "one finding of the round");
        let f = &end.review_findings[0];
        assert_eq!((f.round, f.file.as_str(), f.state.as_str()), (1, "", "open"));
        assert!(f.detail.contains(problem), "{}", f.detail);
        assert_eq!(group_members(&env, &d.group_id).len(), 2, "nothing was sent to the worker");
        let w = await_one(&mut c, &d.task_id, LONG).await;
        assert_eq!(w.report_status, "partial");
        assert!(w.report_json.contains(problem), "{}", w.report_json);
    }
    let after = rss(pid);
    assert!(after < before + 64 * 1024, "the daemon grew from {before} kB to {after} kB");
}

#[tokio::test]
async fn review_requests_that_cannot_be_are_refused_by_name() {
    let mut env = Env::new(&[("writer", WORKER)]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let e = c.delegate(pb::DelegateRequest { review_rounds: 9, ..request(&env, 0) }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("`review_rounds` is 9: use 1 to 5"), "{}", e.message());
    let e = c.delegate(pb::DelegateRequest { mode: "read-only".to_owned(), ..request(&env, 0) }).await.unwrap_err();
    assert!(e.message().contains("use mode \"write\""), "{}", e.message());
    let e = c.delegate(pb::DelegateRequest { review_by: "ghost".to_owned(), ..request(&env, 0) }).await.unwrap_err();
    assert!(e.message().contains("ghost") && e.message().contains("review_by"), "{}", e.message());
    let out = env.caesar(&[
        "run",
        "--mode",
        "write",
        "--agent",
        "writer",
        "--review-by",
        "writer",
        "--review-rounds",
        "0",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("review-rounds"), "{}", text_of(&out));
    let all = c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks;
    assert!(all.is_empty(), "nothing was delegated: {all:?}");
    // Detached, the CLI says the first task and the loop's group.
    let out = env.caesar(&[
        "--json",
        "run",
        "--detach",
        "--mode",
        "write",
        "--agent",
        "writer",
        "--review-by",
        "writer",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    let v = json(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        v["task_id"].as_str().unwrap().starts_with("t_") && v["group_id"].as_str().unwrap().starts_with("g_"),
        "{v}"
    );
}

/// Waits until `task` has `status`.
async fn await_status(c: &mut Client, task: &str, status: &str) -> pb::TaskView {
    let start = std::time::Instant::now();
    loop {
        let v = c.status(pb::StatusRequest { task_id: task.to_owned() }).await.unwrap().into_inner();
        if v.status().as_str() == status {
            return v;
        }
        assert!(start.elapsed() < LONG, "task {task} is {} not {status}", v.status().as_str());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

//! Issue 17, fan-out: verification in the worktree, fan-out groups, the
//! conflict radar and notifications, through the real daemon with scripted
//! agents, real git and loopback receivers.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
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
    git(p, &["init", "-q"]);
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "base"]);
}

fn append_config(env: &Env, text: &str) {
    let path = env.project.path().join(".caesar/config.toml");
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

const SUCCESS: &str = r#"{"protocol":"caesar.report/v1","status":"success","summary":"done, all tests pass"}"#;

// ------------------------------------------------------------ verification

#[tokio::test]
async fn verification_that_passes_is_in_the_report_with_verified_by_command() {
    let mut env = Env::new(&[("writer", &["write", "ok.txt", "fine\n", "report-raw", SUCCESS])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "make ok.txt");
    req.mode = "write".into();
    req.verify = vec!["test -f ok.txt".into(), "echo checked-$PWD".into()];
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.isolation, "worktree");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status, "succeeded", "{}", t.error);
    assert_eq!(t.report_status, "success");
    let report = json(&t.report_json);
    assert_eq!(report["verified_by"], "command", "{report}");
    let v = &report["verification"];
    assert_eq!(v["outcome"], "passed", "{report}");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["command"], "echo checked-$PWD", "the last command run");
    assert!(v["duration_ms"].is_u64());
    // It ran in the task's worktree, not in the workspace.
    let tail = v["tail"].as_str().unwrap();
    assert!(tail.contains(".caesar-worktrees") || tail.contains(&d.task_id), "ran in the worktree: {tail}");
    assert_eq!(v["commands"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn verification_that_fails_overrides_a_claimed_success_with_a_high_finding() {
    let mut env = Env::new(&[("writer", &["write", "a.txt", "x\n", "report-raw", SUCCESS])]);
    repo(&env);
    append_config(
        &env,
        "[[role]]\nname = \"checked\"\nagents = [\"writer\"]\nmode = \"write\"\nverify = [\"true\", \"echo boom-from-tests; exit 3\", \"touch never-run\"]\n",
    );
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("", "write a.txt");
    req.role = "checked".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status, "succeeded", "the process outcome is the agent's");
    assert_eq!(t.report_status, "failed", "the tests decide, not the agent");
    let report = json(&t.report_json);
    assert!(report["summary"].as_str().unwrap().starts_with("verification failed"), "{report}");
    let v = &report["verification"];
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["outcome"], "failed");
    assert!(v["tail"].as_str().unwrap().contains("boom-from-tests"));
    assert_eq!(v["commands"].as_array().unwrap().len(), 2, "stops at the first failure");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["severity"] == "high" && f["title"].as_str().unwrap().contains("verification failed")),
        "{report}"
    );
}

#[tokio::test]
async fn a_verify_command_that_does_not_exist_is_refused_naming_the_field() {
    let mut env = Env::new(&[("writer", &["report-raw", SUCCESS])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "x");
    req.verify = vec!["no-such-program-for-caesar --all".into()];
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("`verify`") && e.message().contains("no-such-program-for-caesar"), "{}", e.message());
    let listed = c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner();
    assert!(listed.tasks.is_empty(), "bad input loses nothing and records nothing");
}

#[tokio::test]
async fn an_agents_forged_verification_is_dropped() {
    let forged = r#"{"protocol":"caesar.report/v1","status":"success","summary":"ok","verified_by":"command","verification":{"command":"cargo test","exit_code":0,"duration_ms":1,"tail":"","outcome":"passed"}}"#;
    let mut env = Env::new(&[("liar", &["report-raw", forged])]);
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("liar", "x")).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    let report = json(&t.report_json);
    assert!(report.get("verified_by").is_none() && report.get("verification").is_none(), "{report}");
}

#[tokio::test]
async fn verification_survives_a_daemon_sigkill_and_is_run_again() {
    let mut env = Env::new(&[("writer", &["write", "b.txt", "y\n", "report-raw", SUCCESS])]);
    repo(&env);
    let marks = env.file("verify-runs");
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "write b.txt");
    req.mode = "write".into();
    req.verify = vec![format!("echo $$ >> {}; sleep 3; test -f b.txt", marks.display())];
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(eventually(LONG, || !pids_in(&marks).is_empty()).await, "verification started");
    let first = pids_in(&marks)[0];
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status, "succeeded", "{}", t.error);
    let report = json(&t.report_json);
    assert_eq!(report["verification"]["outcome"], "passed", "{report}");
    let runs = pids_in(&marks);
    assert_eq!(runs.len(), 2, "run again after the restart: {runs:?}");
    assert!(!alive(first), "the verification the killed daemon left was killed");
}

#[tokio::test]
async fn cancelling_during_verification_kills_it() {
    let mut env = Env::new(&[("writer", &["report-raw", SUCCESS])]);
    let marks = env.file("verify-pid");
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "x");
    req.verify = vec![format!("echo $$ >> {}; exec sleep 30", marks.display())];
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(eventually(LONG, || !pids_in(&marks).is_empty()).await);
    let pid = pids_in(&marks)[0];
    let r = c.cancel(pb::CancelRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(r.cancelled, "{r:?}");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status, "cancelled");
    assert!(eventually(Duration::from_secs(5), || !alive(pid)).await, "the verification's tree is gone");
}

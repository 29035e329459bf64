//! Issue 29, more of the side doors, through the real binaries: a scripted
//! agent inside its task lists the agents and roles of another of the
//! user's projects. Each test fails without its fix.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_task_lists_the_agents_and_roles_of_its_own_project_only() {
    // Another project of the user's, declaring an agent and a role of its own.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join(".caesar")).unwrap();
    std::fs::write(
        other.path().join(".caesar/config.toml"),
        "[[agent]]\nid = \"secret-agent\"\nbin = \"/opt/secret/bin/agent\"\n\n\
         [[role]]\nname = \"secret-role\"\nagents = [\"secret-agent\"]\nmode = \"read-only\"\n",
    )
    .unwrap();
    let attack = attack_script(
        r#"W=$(cat "$CAESAR_HOME/files/other")
try agents-other sh -c "cd '$W' && $C --json agents list"
try describe-other sh -c "cd '$W' && $C --json agents describe secret-agent"
try roles-other sh -c "cd '$W' && $C --json role list"
try agents-own $C --json agents list
try describe-own $C --json agents describe attacker
try roles-own $C --json role list"#,
    );
    let mut env = Env::new(&[("attacker", &["sh", &attack, "report", "success", "tried"])]);
    std::fs::write(env.file("other"), other.path().display().to_string()).unwrap();
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("attacker", "the attacker");
    req.mode = "read-only".into();
    let attacker = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &attacker, LONG).await.status().as_str(), "succeeded");
    assert!(env.file("out").join("done").exists());

    for name in ["agents-other", "describe-other", "roles-other"] {
        let said = attack_out(&env, name);
        assert!(!said.contains("rc=0") && said.contains("reads only the project it runs in"), "{name}: {said}");
        assert!(!said.contains("secret"), "{name} showed the other project's config: {said}");
    }
    // Its own project it still reads.
    for name in ["agents-own", "describe-own", "roles-own"] {
        let said = attack_out(&env, name);
        assert!(said.contains("rc=0"), "{name}: {said}");
    }
    assert!(attack_out(&env, "agents-own").contains("attacker"));

    // The user reaches the other project.
    let workspace = other.path().display().to_string();
    let agents = c.list_agents(pb::ListAgentsRequest { workspace: workspace.clone() }).await.unwrap().into_inner();
    assert!(agents.agents.iter().any(|a| a.id == "secret-agent"), "{agents:?}");
    let roles = c.list_roles(pb::ListRolesRequest { workspace }).await.unwrap().into_inner();
    assert!(roles.roles_json.iter().any(|r| r.contains("secret-role")), "{roles:?}");
}

/// `GET path` on the dashboard at `port` with `cookie`: the status code,
/// the headers and the body.
fn get(port: u16, path: &str, cookie: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let code = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, raw)
}

/// Stands in for claude in write mode: it asks to run a harmless command
/// whose other fields are not harmless (a preloaded library, another
/// directory, no sandbox, in the background), and ends on the answer.
const CLAUDE_WITH_FIELDS: &str = r#"#!/usr/bin/env python3
import json, sys
sys.stdin.readline()
ask = {"type": "control_request", "request_id": "r-1", "request": {
    "subtype": "can_use_tool", "tool_name": "Bash", "input": {
        "command": "make test", "cwd": "/home/someone/.ssh", "env": {"LD_PRELOAD": "/tmp/evil.so"},
        "dangerouslyDisableSandbox": True, "run_in_background": True}}}
print(json.dumps(ask), flush=True)
sys.stdin.readline()
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done"}), flush=True)
"#;

#[tokio::test]
async fn a_permission_question_shows_every_field_an_allow_approves() {
    let mut env = Env::new(&[]);
    let agent = env.file("claude");
    std::fs::write(&agent, CLAUDE_WITH_FIELDS).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = env.project.path().to_path_buf();
    std::fs::write(
        p.join(".caesar/config.toml"),
        format!("[policy]\nallow_recursion = true\n\n[bin]\nclaude = {:?}\n", agent.display().to_string()),
    )
    .unwrap();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    commit_base(&p);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest { mode: "write".into(), ..env.delegate_request("claude", "run the tests") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let mut question = None;
    for _ in 0..50 {
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.clone()], timeout_ms: 2_000, wake_on_attention: true })
            .await
            .unwrap()
            .into_inner();
        if let Some(q) = r.tasks[0].pending_questions.first() {
            question = Some(q.clone());
            break;
        }
        assert!(r.tasks[0].report_json.is_empty(), "ended before asking: {}", r.tasks[0].report_json);
    }
    let q = question.expect("the agent's permission question");
    let fields = [
        "cwd: \"/home/someone/.ssh\"",
        "env: {\"LD_PRELOAD\":\"/tmp/evil.so\"}",
        "dangerouslyDisableSandbox: true",
        "run_in_background: true",
    ];
    assert!(!q.question.contains("whole command"), "{}", q.question);
    for field in fields {
        assert!(q.question.contains(field), "{field} is not shown: {}", q.question);
    }
    assert!(q.question.find("make test") < q.question.find("cwd:"), "the command first: {}", q.question);

    // The dashboard shows the same text.
    let o = env.caesar(&["--json", "ui", "--no-open"]);
    let url = json(String::from_utf8_lossy(&o.stdout).trim())["login_url"].as_str().unwrap().to_owned();
    let port: u16 = url.split(':').nth(2).and_then(|p| p.split('/').next()).and_then(|p| p.parse().ok()).unwrap();
    let login = url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap();
    let (code, raw) = get(port, &login, "");
    assert_eq!(code, 303, "{raw}");
    let cookie = raw
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: ").or_else(|| l.strip_prefix("Set-Cookie: ")))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no cookie: {raw}"))
        .to_owned();
    let (code, raw) = get(port, &format!("/api/task/{id}"), &cookie);
    assert_eq!(code, 200, "{raw}");
    let body = json(&raw[raw.find("\r\n\r\n").unwrap() + 4..]);
    let shown = body["questions"][0]["question"].as_str().unwrap_or_else(|| panic!("{body}"));
    assert_eq!(shown, q.question, "the dashboard shows what the CLI shows");

    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id, answer: "deny".into() })
        .await
        .unwrap();
    await_one(&mut c, &id, LONG).await;
}

/// A CLI whose `--version` forks a child that would outlive it (its pid
/// written to `pidfile`), then hangs.
fn hanging_cli(pidfile: &std::path::Path) -> String {
    format!("#!/bin/sh\nsleep 600 &\necho $! > {}\nsleep 600\n", pidfile.display())
}

#[tokio::test]
async fn the_version_probe_leaves_no_process_behind() {
    let env = Env::new(&[]);
    let pidfile = env.file("forked.pid");
    let cli = env.file("hanging-cli");
    std::fs::write(&cli, hanging_cli(&pidfile)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("[[agent]]\nid = \"hanger\"\nbin = {:?}\n", cli.display().to_string()),
    )
    .unwrap();
    let mut env = env;
    let _c = env.start_daemon().await;
    let started = std::time::Instant::now();
    let o = env.caesar(&["--json", "agents", "list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(started.elapsed() < Duration::from_secs(30), "the listing waited for the hung CLI");
    let listed = json(String::from_utf8_lossy(&o.stdout).trim());
    let hanger = listed["agents"].as_array().unwrap().iter().find(|a| a["id"] == "hanger").cloned().unwrap();
    assert_eq!(hanger["installed"], true, "{hanger}");
    assert!(hanger["version"].is_null(), "no version from a CLI that hangs: {hanger}");
    let pid: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let gone = eventually(Duration::from_secs(10), || !alive(pid)).await;
    if !gone {
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(gone, "the CLI's forked child {pid} was left running");
}

#[tokio::test]
async fn a_conflict_never_sends_the_user_to_run_git_in_the_agents_worktree() {
    let mut env = Env::new(&[]);
    env.set_agents(&[("writer", &["write", "README.md", "hello\nfrom the task\n", "report", "success", "wrote"])]);
    let p = env.project.path().to_path_buf();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(&p);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest { mode: "write".into(), ..env.delegate_request("writer", "edit the readme") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
    // The user commits another change of the same line meanwhile.
    std::fs::write(p.join("README.md"), "hello\nfrom the user\n").unwrap();
    git(&p, &["-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "mine"]);
    let o = env.caesar(&["--json", "apply", &id]);
    let said = json(String::from_utf8_lossy(&o.stdout).trim());
    let reason = said["conflicts"][0].as_str().unwrap_or_else(|| panic!("{said}")).to_owned();
    // Git run in the worktree reads the agent's config: `core.fsmonitor`
    // there runs the agent's command (issue 29).
    assert!(!reason.contains("commit the task's worktree"), "{reason}");
    assert!(
        reason.contains(&format!("caesar --json diff {id}")) && reason.contains("do not run git inside"),
        "{reason}"
    );
    // What it says works from the user's own checkout.
    let o = env.caesar(&["--json", "diff", &id]);
    let patch = json(String::from_utf8_lossy(&o.stdout).trim())["patch"].as_str().unwrap().to_owned();
    std::fs::write(env.file("task.patch"), patch).unwrap();
    let applied = std::process::Command::new("git")
        .current_dir(&p)
        .args(["apply", "--3way", &env.file("task.patch").display().to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&applied.stderr);
    assert!(text.contains("conflict") || applied.status.success(), "{text}");
    assert!(std::fs::read_to_string(p.join("README.md")).unwrap().contains("from the task"));
}

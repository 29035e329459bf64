//! The `caesar` CLI tells the truth (issue 30): its exit codes follow the
//! README's table, a stopped task's exit status is not shown as a success,
//! `gc` keeps no decided work and `--older-than 0s` means now; one verdict
//! leads every face (a blocked task whose agent exited 0 is `blocked: auth`
//! in ps, status, await, run and MCP), the agents a task tried are listed
//! with why each was left, and `caesar run` on a terminal asks the agent's
//! questions there.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Declares `agents` as `(id, bin, args)` in the project's config.
fn declare(env: &Env, agents: &[(&str, &str, &[&str])]) {
    let mut config = String::new();
    for (id, bin, args) in agents {
        config.push_str(&format!(
            "[[agent]]\nid = {id:?}\nbin = {bin:?}\nargs = {}\n\n",
            serde_json::to_string(args).unwrap()
        ));
    }
    std::fs::write(env.project.path().join(".caesar/config.toml"), config).unwrap();
}

fn detach(env: &Env, agent: &str) -> String {
    let o = env.caesar(&["--json", "run", "--detach", "--agent", agent, "x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn await_timing_out_exits_5_and_a_cancelled_task_shows_no_exit_code_0() {
    let env = Env::new(&[]);
    // An agent that ends gracefully, with 0, when it is told to stop, as node CLIs do.
    let graceful = "trap 'exit 0' TERM; echo working; while :; do sleep 0.1; done";
    declare(&env, &[("graceful", "/bin/sh", &["-c", graceful])]);
    let id = detach(&env, "graceful");

    let o = env.caesar(&["await", "--timeout", "1s", &id]);
    assert_eq!(o.status.code(), Some(5), "README: 5 timed out\n{}{}", stdout(&o), stderr(&o));
    let o = env.caesar(&["--json", "await", "--timeout", "1s", &id]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert_eq!(json(stdout(&o).trim())["tasks"][0]["status"], "running");

    let o = env.caesar(&["cancel", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = env.caesar(&["await", "--timeout", "30s", &id]);
    assert_eq!(o.status.code(), Some(4), "README: 4 cancelled\n{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("cancelled"), "{out}");
    assert!(!out.contains("exit code: 0"), "a cancelled task is no success:\n{out}");
    assert!(out.contains("stopped by caesar (cancelled)"), "{out}");
    let o = env.caesar(&["status", &id]);
    assert!(!stdout(&o).contains("exit code: 0"), "{}", stdout(&o));
}

#[tokio::test]
async fn mcp_install_for_an_unknown_host_is_bad_input() {
    let env = Env::new(&[]);
    let o = env.caesar(&["mcp", "install", "vim"]);
    assert_eq!(o.status.code(), Some(2), "README: 2 bad input\n{}", stderr(&o));
    assert!(stderr(&o).contains("unknown MCP client `vim`: use one of claude"), "{}", stderr(&o));
    let o = env.caesar(&["--json", "mcp", "install", "vim"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json(stdout(&o).trim())["exit_code"], 2);
}

fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/config.local.toml\n").unwrap();
    commit_base(p);
}

fn gc(env: &Env, args: &[&str]) -> serde_json::Value {
    let o = env.caesar(&[&["--json", "gc"], args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    json(stdout(&o).trim())
}

fn caesar_branches(env: &Env) -> Vec<String> {
    git(env.project.path(), &["branch", "--list", "caesar/*", "--format=%(refname:short)"])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn gc_removes_decided_work_at_once_and_older_than_0s_means_now() {
    let env = Env::new(&[
        ("writer", &["write", "a.txt", "a\n", "report", "success", "wrote a"]),
        ("looker", &["report", "success", "looked"]),
    ]);
    repo(&env);
    let run = |agent: &str| {
        let o = env.caesar(&["--json", "run", "--agent", agent, "--mode", "write", "--isolation", "worktree", "x"]);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned()
    };

    // Discarded: the next gc, at its default age, takes the worktree and the branch.
    let written = run("writer");
    assert_eq!(caesar_branches(&env).len(), 1, "a write task has its branch");
    let o = env.caesar(&["discard", &written]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = gc(&env, &[]);
    let item = &v["items"][0];
    assert_eq!(item["task_id"], written.as_str(), "{v}");
    assert_eq!(item["action"], "removed", "a discarded task's worktree goes at the next gc: {v}");
    assert_eq!(caesar_branches(&env), Vec::<String>::new(), "and its branch");

    // Undecided and unchanged: `--older-than 0s` means now, not the default 24 h.
    let looked = run("looker");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let v = gc(&env, &["--older-than", "0s"]);
    let item = v["items"].as_array().unwrap().iter().find(|i| i["task_id"] == looked.as_str()).cloned();
    assert_eq!(item.unwrap()["action"], "removed", "{v}");
    assert_eq!(caesar_branches(&env), Vec::<String>::new());
}

/// Issue 30: a task given no mode, by the user or a role, reads in place:
/// no worktree, no branch, and its agent cannot write the project. Write is
/// asked for, and then gets its worktree and branch.
#[tokio::test]
async fn a_task_without_a_mode_is_read_only_in_place_and_leaves_no_branch() {
    let env = Env::new(&[("writer", &["write", "new.txt", "x\n", "report", "success", "wrote"])]);
    repo(&env);
    let o = env.caesar(&["--json", "run", "--agent", "writer", "Explain the parser"]);
    let v = json(stdout(&o).trim());
    assert_eq!((v["mode"].as_str(), v["isolation"].as_str()), (Some("read-only"), Some("inplace")), "{v}");
    assert_eq!(caesar_branches(&env), Vec::<String>::new(), "no branch for a task that only reads");
    if caesard::sandbox::kernel_abi().is_some() {
        assert!(!env.project.path().join("new.txt").exists(), "a read-only task wrote the project: {v}");
    }
    let o = env.caesar(&["run", "--agent", "writer", "Explain the parser"]);
    assert!(stdout(&o).contains("mode read-only, isolation inplace"), "the header says so: {}", stdout(&o));

    let o = env.caesar(&["--json", "run", "--agent", "writer", "--mode", "write", "x"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let v = json(stdout(&o).trim());
    assert_eq!((v["mode"].as_str(), v["isolation"].as_str()), (Some("write"), Some("worktree")), "{v}");
    assert_eq!(caesar_branches(&env).len(), 1, "a write task has its branch");
}

#[tokio::test]
async fn watch_on_a_short_terminal_shows_the_running_task_and_counts_the_rest() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[
        ("quick", &["say", "done already", "report", "success", "ok"]),
        ("gated", &["say", "still at it", "wait-file", &g, "report", "success", "ok"]),
    ]);
    for i in 0..8 {
        let o = env.caesar(&["run", "--agent", "quick", &format!("quick job {i}")]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let running = detach(&env, "gated");
    // A 12-row terminal: `script` gives caesar watch a pseudo-terminal of that size.
    let o = std::process::Command::new("script")
        .args(["-qec", &format!("stty rows 12 cols 100; timeout 2 {} watch", caesar_bin().display()), "/dev/null"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    std::fs::write(&gate, "go").unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    // The last whole frame (`timeout` may stop caesar while it writes one).
    let frame = out.split("\x1b[2J\x1b[H").filter(|f| f.ends_with('\n')).last().unwrap_or_default();
    let lines: Vec<&str> = frame.lines().collect();
    assert!(lines.len() < 12, "a frame of {} lines on a 12-row terminal:\n{frame}", lines.len());
    assert!(lines[0].starts_with("TASK"), "{frame}");
    assert!(lines[1].starts_with(&running), "the running task first: {frame}");
    assert!(lines.last().unwrap().contains("finished not shown"), "the rest is counted: {frame}");
}

#[tokio::test]
async fn status_shows_the_conflict_radar() {
    let env = Env::new(&[
        ("w1", &["write", "README.md", "hello from w1\n", "report", "success", "w1"]),
        ("w2", &["write", "README.md", "hello from w2\n", "report", "success", "w2"]),
    ]);
    repo(&env);
    let mut ids = Vec::new();
    for agent in ["w1", "w2"] {
        let o = env.caesar(&["--json", "run", "--agent", agent, "--mode", "write", "--isolation", "worktree", "x"]);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        ids.push(json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned());
    }
    // The background radar reads the finished tasks' worktrees soon after they end.
    let mut out = String::new();
    let seen = eventually(Duration::from_secs(30), || {
        out = stdout(&env.caesar(&["status", &ids[0]]));
        out.contains("conflict radar: overlaps with other work")
    })
    .await;
    assert!(seen, "{out}");
    assert!(out.contains(&format!("{}: README.md (same lines: README.md)", ids[1])), "{out}");
    let o = env.caesar(&["--json", "status", &ids[0]]);
    let v = json(stdout(&o).trim());
    assert_eq!(v["conflicts_with"][0]["task_id"], ids[1].as_str(), "{v}");
}

#[tokio::test]
async fn agents_describe_codex_shows_read_only_protections_under_read_only() {
    let env = Env::new(&[]);
    let o = env.caesar(&["--json", "agents", "describe", "codex"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(stdout(&o).trim());
    let (read_only, write) =
        (v["protections"]["read-only"].as_str().unwrap(), v["protections"]["write"].as_str().unwrap());
    assert!(
        !read_only.contains("writes confined to its worktree"),
        "the write mode's rules under read-only: {read_only}"
    );
    if write.starts_with("landlock") {
        assert!(read_only.contains("codex's own read-only sandbox"), "{read_only}");
    }
}

/// An agent that prints an auth blocker and, told to stop, exits 0, as
/// codex and gemini did on a 401 (issue 30).
const LOCKED_OUT: &str = "trap 'exit 0' TERM; echo '{\"protocol\":\"caesar.event/v1\",\"type\":\"blocker\",\"kind\":\"auth\",\"message\":\"401 Unauthorized: invalid API key\"}'; while :; do sleep 0.1; done";

/// `caesar_status` through the real `caesar-mcp`.
async fn mcp_status(env: &Env, id: &str) -> Value {
    let mut cmd = tokio::process::Command::new(bin_dir().join("caesar-mcp"));
    cmd.current_dir(env.project.path()).envs(env.envs());
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().unwrap();
    let client = ().serve(transport).await.expect("initialize");
    let Value::Object(args) = serde_json::json!({"task_id": id}) else { unreachable!() };
    let call = client.call_tool(CallToolRequestParams::new("caesar_status").with_arguments(args));
    let r = tokio::time::timeout(Duration::from_secs(30), call).await.expect("in time").expect("tool call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let out = r.structured_content.clone().expect("structuredContent");
    let _ = client.cancel().await;
    out
}

/// The line of `caesar ps --all` for task `id`.
fn ps_line(env: &Env, id: &str) -> String {
    let o = env.caesar(&["ps", "--all"]);
    stdout(&o).lines().find(|l| l.starts_with(id)).map(str::to_owned).unwrap_or_else(|| panic!("{}", stdout(&o)))
}

#[tokio::test]
async fn a_blocked_task_whose_agent_exited_0_is_blocked_in_every_face_and_run_exits_non_zero() {
    let env = Env::new(&[]);
    declare(&env, &[("locked", "/bin/sh", &["-c", LOCKED_OUT])]);
    let o = env.caesar(&["run", "--agent", "locked", "x"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "README: 1 blocked\n{out}{}", stderr(&o));
    assert!(out.contains(": blocked: auth, report "), "the report leads with the verdict:\n{out}");
    let id = out.split(':').next().unwrap().trim_start_matches("task ").to_owned();

    // The process outcome stays what the contract says; the verdict says what happened.
    let v = json(stdout(&env.caesar(&["--json", "status", &id])).trim());
    assert_eq!((v["status"].as_str(), v["verdict"].as_str()), (Some("succeeded"), Some("blocked: auth")), "{v}");
    let status = stdout(&env.caesar(&["status", &id]));
    assert!(status.starts_with(&format!("{id}  blocked: auth  locked")), "{status}");
    assert!(status.contains("process succeeded"), "{status}");
    let line = ps_line(&env, &id);
    assert!(line.contains("blocked: auth") && !line.contains("succeeded"), "{line}");
    let o = env.caesar(&["await", &id]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("blocked: auth"), "{}", stdout(&o));
    let o = env.caesar(&["--json", "await", &id]);
    assert_eq!(json(stdout(&o).trim())["tasks"][0]["verdict"], "blocked: auth");

    let m = mcp_status(&env, &id).await;
    assert_eq!((m["status"].as_str(), m["verdict"].as_str()), (Some("succeeded"), Some("blocked: auth")), "{m}");
}

#[tokio::test]
async fn a_failed_verify_is_verification_failed() {
    let env = Env::new(&[("ok", &["say", "all good", "report", "success", "done"])]);
    let o = env.caesar(&["--json", "run", "--agent", "ok", "--verify", "echo broken; exit 3", "x"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let v = json(stdout(&o).trim());
    assert_eq!(v["verdict"], "verification failed", "{v}");
    let id = v["task_id"].as_str().unwrap().to_owned();
    assert!(ps_line(&env, &id).contains("verification failed"), "{}", ps_line(&env, &id));
    let status = stdout(&env.caesar(&["status", &id]));
    assert!(status.starts_with(&format!("{id}  verification failed")), "{status}");
    let m = mcp_status(&env, &id).await;
    assert_eq!(m["verdict"], "verification failed", "{m}");
}

const PAIR_ROLE: &str = "[[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"read-only\"\n";

fn blocker(kind: &str, message: &str) -> String {
    serde_json::json!({"type": "blocker", "kind": kind, "message": message}).to_string()
}

fn add_role(env: &Env) {
    let path = env.project.path().join(".caesar/config.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{config}\n{PAIR_ROLE}")).unwrap();
}

#[tokio::test]
async fn the_fallback_chain_is_told_live_and_listed_with_reasons_in_status_and_json() {
    let auth = blocker("auth", "401 Unauthorized: not logged in");
    let env = Env::new(&[
        ("first", &["say", "first here", "event", &auth, "hang"]),
        ("second", &["say", "second at work", "report", "success", "done by second"]),
    ]);
    add_role(&env);
    let o = env.caesar(&["run", "--role", "pair", "x"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let switch = out.find("caesar: first blocked (auth) → trying second").unwrap_or_else(|| panic!("{out}"));
    assert!(out[..switch].contains("first here"), "the first agent's events, then the switch:\n{out}");
    assert!(out[switch..].contains("second at work"), "then the new agent's events, live:\n{out}");
    assert!(out.contains("first said: 401 Unauthorized: not logged in"), "{out}");
    let id = out.split(':').next().unwrap().trim_start_matches("task ").to_owned();

    let status = stdout(&env.caesar(&["status", &id]));
    assert!(status.contains("  attempts:\n"), "{status}");
    assert!(
        status.contains(&format!("    1. first ({id}) blocked (auth): 401 Unauthorized: not logged in\n")),
        "{status}"
    );
    assert!(status.contains(") produced the result") && status.contains("    2. second ("), "{status}");
    let v = json(stdout(&env.caesar(&["--json", "status", &id])).trim());
    let attempts = v["attempts"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(attempts.len(), 2, "{v}");
    assert_eq!((attempts[0]["agent"].as_str(), attempts[0]["stopped_by"].as_str()), (Some("first"), Some("auth")));
    assert!(attempts[0]["message"].as_str().unwrap().contains("401"), "{v}");
    assert_eq!((attempts[1]["agent"].as_str(), attempts[1]["produced_result"].as_bool()), (Some("second"), Some(true)));
}

#[tokio::test]
async fn a_chain_tried_to_its_end_says_so_and_not_that_no_agent_is_installed() {
    let auth = blocker("auth", "401 Unauthorized");
    let env = Env::new(&[("first", &["event", &auth, "hang"]), ("second", &["event", &auth, "hang"])]);
    add_role(&env);
    let o = env.caesar(&["run", "--role", "pair", "x"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(out.contains("blocked: auth"), "{out}");
    assert!(out.contains("no fallback: every agent of the role's chain was tried (first, second)"), "{out}");
    assert!(!out.contains("no other agent of the role's chain is installed"), "both were installed and tried:\n{out}");
}

/// Everything a child writes, gathered as it comes.
fn gather(mut from: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    seen
}

#[tokio::test]
async fn caesar_run_on_a_terminal_asks_the_agents_question_and_the_typed_answer_reaches_it() {
    let env = Env::new(&[]);
    let asked_at = env.file("asked_at");
    let stamp = asked_at.display().to_string();
    env.set_agents(&[(
        "asker",
        &["stamp", &stamp, "mcp-ask", "Which colour should the button be?", "report", "success", "asked"],
    )]);
    // `script` gives caesar run a pseudo-terminal; what the test writes to
    // script's stdin is typed at it.
    let mut child = std::process::Command::new("script")
        .args(["-qec", &format!("{} run --agent asker x", caesar_bin().display()), "/dev/null"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = gather(child.stdout.take().unwrap());
    let text = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    let asked = eventually(Duration::from_secs(40), || text().contains("answer (")).await;
    assert!(asked, "no question at the terminal:\n{}", text());
    // Measured, not asserted: from the agent's ask (its channel's start included) to the prompt.
    let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let at_ns: u128 = std::fs::read_to_string(&asked_at).unwrap().trim().parse().unwrap();
    eprintln!("question to terminal prompt: {} ms", now_ns.saturating_sub(at_ns) / 1_000_000);
    let prompt = text();
    assert!(prompt.contains("QUESTION q_") && prompt.contains("Which colour should the button be?"), "{prompt}");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"ultramarine\n").unwrap();
    stdin.flush().unwrap();
    let ended = eventually(Duration::from_secs(40), || child.try_wait().unwrap().is_some()).await;
    assert!(ended, "caesar run did not end:\n{}", text());
    drop(stdin);
    let out = text();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{out}");
    assert!(out.contains("caesar: answered q_"), "{out}");
    // The agent's own words: the reply ask_orchestrator gave it (not the terminal's echo).
    let reply = out.lines().find(|l| l.contains("ask_orchestrator:")).unwrap_or_else(|| panic!("{out}"));
    assert!(reply.contains("ultramarine"), "{reply}");
}

#[tokio::test]
async fn caesar_run_with_no_ask_or_a_pipe_keeps_the_channel_off() {
    let env = Env::new(&[("asker", &["mcp-ask", "Which colour?", "report", "success", "asked"])]);
    // A pipe: no terminal to ask at, so no channel (as before issue 30).
    let o = env.caesar(&["--json", "run", "--agent", "asker", "x"]);
    let v = json(stdout(&o).trim());
    let id = v["task_id"].as_str().unwrap();
    let task =
        std::fs::read_to_string(std::path::Path::new(v["task_dir"].as_str().unwrap()).join("task.json")).unwrap();
    assert!(json(&task)["channel"].is_null(), "{id}: {task}");
    // And --no-ask on a terminal.
    let o = std::process::Command::new("script")
        .args(["-qec", &format!("{} run --no-ask --agent asker x", caesar_bin().display()), "/dev/null"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .env("TERM", "dumb")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!out.contains("QUESTION"), "{out}");
    let id = out.split("task ").nth(1).and_then(|r| r.split(':').next()).unwrap_or_else(|| panic!("{out}"));
    let v = json(stdout(&env.caesar(&["--json", "status", id])).trim());
    let task =
        std::fs::read_to_string(std::path::Path::new(v["task_dir"].as_str().unwrap()).join("task.json")).unwrap();
    assert!(json(&task)["channel"].is_null(), "{id}: {task}");
}

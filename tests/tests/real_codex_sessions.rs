//! codex through `codex app-server` (the real codex 0.171 from tests/real-clis), through a real
//! daemon and `caesar-mcp`, with the model replaced by the scripted server on 127.0.0.1: an
//! approval (a command codex runs outside its sandbox) bridged and answered allow, another
//! answered deny (it does not run and the model is told), a cancel through `turn/interrupt`
//! with no process left, a pending approval surviving a daemon SIGKILL, a read-only task's
//! escalation refused by caesar itself, and the usage-limit 429 and the 401 as blockers read
//! from codex's structured errors. The rig is the one of real_clis.rs and real_sessions.rs,
//! `common/real_cli.rs` (own HOME and CODEX_HOME, a dead proxy, no retries).
//!
//! With `CAESAR_UPDATE_CAPTURES=1` each run's raw stream is saved under
//! `daemon/tests/fixtures/sessions/codex_app_server_*.jsonl`, which the driver's replay test reads.
//! `figures_of_the_approval_bridge` (ignored) prints the bridge's latencies for BENCHMARKS.md.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/real_cli.rs"]
mod real_cli;

use std::time::{Duration, Instant};

use caesar_tests::model_server::Reply;
use common::*;
use real_cli::{Captures, Cli, Rig, Setup, report_of};
use serde_json::{Value, json};

const TASK_LIMIT_MS: u64 = 120_000;

/// A command codex runs outside its sandbox, which makes it ask ([V] 0.171 under `on-request`:
/// the same command without `require_escalated` runs unasked in the sandbox).
fn escalated(command: &str) -> Reply {
    Reply::tool(
        "exec_command",
        json!({"cmd": command, "sandbox_permissions": "require_escalated", "justification": "the brief asks for it"}),
    )
}

impl Rig {
    /// This file's rig: codex under [`TASK_LIMIT_MS`], its JSON-RPC saved as session captures.
    async fn start(script: Vec<Reply>) -> Rig {
        Rig::start_with(script, 90_000).await
    }

    /// A rig whose daemon denies an unanswered approval after `permission_timeout_ms`.
    async fn start_with(script: Vec<Reply>, permission_timeout_ms: u64) -> Rig {
        let setup = Setup::new(TASK_LIMIT_MS, permission_timeout_ms, Captures::SessionsJsonRpc);
        Rig::launch(Cli::Codex, script, setup).await
    }
}

/// The task ran on `codex app-server`, and its `started` event says so.
fn assert_app_server(rig: &Rig, id: &str) {
    let started = rig.events(id).into_iter().find(|e| e["type"] == "started").expect("a started event");
    // The command shows where the prompt went after it: `… app-server < <prompt: N bytes …>`.
    let command = started["command"].as_str().unwrap_or_default();
    assert!(command.split(" < ").next().unwrap_or_default().ends_with(" app-server"), "{started}");
}

#[tokio::test]
async fn codex_app_server_approval_allowed_runs_the_command() {
    let rig = Rig::start(vec![escalated("echo allowed > bridged.txt"), Reply::text("Wrote bridged.txt.")]).await;
    let id = rig.delegate("Write bridged.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    let q = &t["pending_questions"][0];
    let options = q["options"].as_array().unwrap_or_else(|| panic!("{t}\n{}", rig.raw(&id)));
    assert!(options.iter().any(|o| o == "allow") && options.iter().any(|o| o == "deny"), "{q}");
    let text = q["question"].as_str().unwrap();
    assert!(text.contains("echo allowed > bridged.txt") && text.contains("execute"), "the whole command: {q}");
    assert!(q["question_id"].as_str().unwrap().starts_with("p_"), "a permission: {q}");
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": q["question_id"], "answer": "allow"})).await;
    let t = rig.finish(&id).await;
    let report = report_of(&t);
    assert_eq!(report["status"], "success", "{t}\n{}", rig.raw(&id));
    assert!(report["changes"].to_string().contains("bridged.txt"), "git saw the write: {report}\n{}", rig.raw(&id));
    assert_app_server(&rig, &id);
    let events = rig.events(&id);
    assert!(events.iter().any(|e| e["type"] == "usage" && e["input_tokens"].as_u64() > Some(0)), "usage recorded");
    assert!(
        events.iter().any(|e| e["type"] == "tool_use" && e["status"] == "succeeded" && e["tool"] == "shell"),
        "the command ran: {events:?}"
    );
}

#[tokio::test]
async fn codex_app_server_approval_denied_keeps_the_command_from_running() {
    let rig = Rig::start(vec![escalated("echo no > denied.txt"), Reply::text("I was not allowed.")]).await;
    let id = rig.delegate("Write denied.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    let qid = t["pending_questions"][0]["question_id"].as_str().unwrap_or_else(|| panic!("{t}\n{}", rig.raw(&id)));
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "deny: not this command"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["changes"], json!([]), "nothing was written: {t}\n{}", rig.raw(&id));
    let requests = rig.server.model_requests();
    assert!(requests.len() >= 2, "the model was called again after the refusal: {}", rig.raw(&id));
    assert!(requests[1].body_text().contains("rejected by user"), "the model is told: {}", requests[1].body_text());
    assert!(rig.raw(&id).contains(r#""result":{"decision":"decline"}"#) || rig.raw(&id).contains("\"declined\""));
}

#[tokio::test]
async fn codex_app_server_cancel_interrupts_the_turn_and_leaves_no_process() {
    let rig = Rig::start(vec![escalated("echo late > late.txt"), Reply::text("done")]).await;
    let id = rig.delegate("Write late.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    assert!(t["pending_questions"][0].is_object(), "{t}\n{}", rig.raw(&id));
    assert!(!rig.processes_of(&id).is_empty(), "the agent runs");
    rig.ok("caesar_cancel", json!({"task_id": id})).await;
    let t = rig.finish(&id).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let raw = rig.raw(&id);
    assert!(raw.contains(r#""status":"interrupted""#), "the turn ended through turn/interrupt: {raw}");
    assert!(
        rig.events(&id).iter().any(|e| e["message"] == "turn/interrupt acknowledged"),
        "codex answered the interrupt"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rig.processes_of(&id).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rig.processes_of(&id), Vec::<u32>::new(), "no process left");
    assert!(!rig.env.project.path().join("late.txt").exists());
}

#[tokio::test]
async fn codex_app_server_unanswered_approval_is_declined_after_the_timeout() {
    let rig = Rig::start_with(vec![escalated("echo t > timeout.txt"), Reply::text("Nobody answered.")], 3_000).await;
    let id = rig.delegate("Write timeout.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["changes"], json!([]), "nothing was written: {t}\n{}", rig.raw(&id));
    let answer = rig.events(&id).into_iter().find(|e| e["type"] == "answer").expect("the timeout's answer");
    assert!(answer["answer"].as_str().unwrap().contains("did not answer within 3 s"), "{answer}");
    let requests = rig.server.model_requests();
    assert!(requests.len() >= 2 && requests[1].body_text().contains("rejected by user"), "{}", rig.raw(&id));
}

#[tokio::test]
async fn codex_app_server_approval_survives_a_daemon_sigkill() {
    let mut rig =
        Rig::start(vec![escalated("echo still > after_restart.txt"), Reply::text("Wrote it after all.")]).await;
    let id = rig
        .delegate("Write after_restart.txt with the shell.", json!({"mode": "write", "isolation": "worktree"}))
        .await;
    let t = rig.question(&id).await;
    let qid =
        t["pending_questions"][0]["question_id"].as_str().unwrap_or_else(|| panic!("{t}\n{}", rig.raw(&id))).to_owned();
    let pids = rig.processes_of(&id);
    rig.restart_daemon().await;
    assert!(pids.iter().all(|p| alive(*p)), "the run outlived the daemon");
    let t = rig.ok("caesar_status", json!({"task_id": id})).await;
    assert_eq!(t["pending_questions"][0]["question_id"], qid.as_str(), "the question survived: {t}");
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["status"], "success", "{t}\n{}", rig.raw(&id));
    assert!(report_of(&t)["changes"].to_string().contains("after_restart.txt"), "{t}");
    let answers = rig.raw(&id).matches(r#""result":{"decision":"accept"}"#).count();
    assert!(answers <= 1, "answered once");
}

#[tokio::test]
async fn codex_app_server_read_only_escalation_is_refused_by_caesar() {
    let rig = Rig::start(vec![escalated("echo x > ro.txt"), Reply::text("Could not write.")]).await;
    let id = rig.delegate("Write ro.txt with the shell.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&id).await;
    let report = report_of(&t);
    assert_eq!(report["changes"], json!([]), "{t}\n{}", rig.raw(&id));
    assert!(report["findings"].to_string().contains("read-only task; caesar refused it"), "{report}\n{}", rig.raw(&id));
    assert!(t["pending_questions"].as_array().is_none_or(|q| q.is_empty()), "nobody was asked: {t}");
    assert!(!rig.env.project.path().join("ro.txt").exists());
    assert_app_server(&rig, &id);
}

#[tokio::test]
async fn codex_app_server_usage_limit_is_a_rate_limit_blocker_with_its_reset() {
    let resets_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 3600;
    // What the ChatGPT backend answers at the limit ([V] codex maps it to usageLimitExceeded).
    let limit = Reply::Raw {
        status: 429,
        headers: vec![
            ("x-codex-primary-used-percent".into(), "100".into()),
            ("x-codex-primary-window-minutes".into(), "300".into()),
            ("x-codex-primary-reset-at".into(), resets_at.to_string()),
        ],
        body: json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
            "plan_type": "plus", "resets_at": resets_at}}),
    };
    let rig = Rig::start(vec![limit]).await;
    let id = rig.delegate("Say hello.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.finish(&id).await;
    let r = report_of(&t);
    assert_eq!(r["status"], "blocked", "{t}\n{}", rig.raw(&id));
    assert!(r.to_string().contains("rate_limit"), "{r}");
    let blocker = rig.events(&id).into_iter().find(|e| e["type"] == "blocker").expect("a blocker event");
    assert_eq!(blocker["kind"], "rate_limit", "{blocker}");
    assert_eq!(blocker["resets_at_ms"].as_u64(), Some(resets_at * 1000), "the reset from the limit: {blocker}");
    assert_app_server(&rig, &id);
}

#[tokio::test]
async fn codex_app_server_401_is_an_auth_blocker() {
    let rig = Rig::start(vec![Reply::error(401, "invalid api key"); 3]).await;
    let id = rig.delegate("Say hello.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.finish(&id).await;
    let r = report_of(&t);
    assert_eq!(r["status"], "blocked", "{t}\n{}", rig.raw(&id));
    assert!(r.to_string().contains("auth"), "{r}");
    let blocker = rig.events(&id).into_iter().find(|e| e["type"] == "blocker").expect("a blocker event");
    assert_eq!(blocker["kind"], "auth", "{blocker}");
    assert_app_server(&rig, &id);
}

/// The bridge's latencies over the real codex, for BENCHMARKS.md: from codex's approval request
/// reaching raw.log to the question visible to `caesar_await`, and from the `caesar_answer`
/// call to codex's `serverRequest/resolved` (the response written, read and acted on by codex).
/// Both clocks are this machine's wall clock.
#[tokio::test]
#[ignore = "figures: cargo nextest run -p caesar-tests --test real_codex_sessions --run-ignored only"]
async fn figures_of_the_approval_bridge() {
    let now_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let runs = 5;
    let (mut ask, mut answer) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let rig = Rig::start(vec![escalated(&format!("echo {i} > f{i}.txt")), Reply::text("ok")]).await;
        let id = rig.delegate("Write a file with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
        // When the request reaches raw.log (the supervisor's copy of codex's stdout), polled
        // every 200 µs beside the caesar_await that waits for the question.
        let raw_log = caesar_tests::daemon_files(rig.task_dir(&id)).join("raw.log");
        let poller = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if std::fs::read_to_string(&raw_log).is_ok_and(|r| r.contains("item/commandExecution/requestApproval"))
                {
                    return Some(now_ms());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            None
        });
        let t = rig.question(&id).await;
        let seen = now_ms();
        let qid = t["pending_questions"][0]["question_id"].as_str().unwrap().to_owned();
        let asked = poller.join().unwrap().expect("the request reached raw.log");
        let before = now_ms();
        rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
        let _ = rig.finish(&id).await;
        let raw = std::fs::read_to_string(caesar_tests::daemon_files(rig.task_dir(&id)).join("raw.log")).unwrap();
        let resolved = raw
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["method"] == "serverRequest/resolved")
            .and_then(|v| v["emittedAtMs"].as_i64())
            .unwrap();
        ask.push(seen - asked);
        answer.push(resolved - before);
    }
    ask.sort_unstable();
    answer.sort_unstable();
    println!(
        "codex approval in raw.log -> visible to caesar_await: median {} ms, max {} ms ({runs} runs)",
        ask[runs / 2],
        ask[runs - 1]
    );
    println!(
        "caesar_answer -> codex serverRequest/resolved: median {} ms, max {} ms ({runs} runs)",
        answer[runs / 2],
        answer[runs - 1]
    );
}

// ---- issue 15, round 3 (latency6): codex's exec fallback and thread/resume -----------------

/// A task continuing a thread: the supervisor sends `thread/resume` (not `codex exec resume`),
/// and the model sees the first turn in the second's history.
#[tokio::test]
async fn codex_app_server_resume_continues_the_thread() {
    let rig =
        Rig::start(vec![Reply::text("The secret word is pelican."), Reply::text("You asked about pelican.")]).await;
    let first = rig.delegate("Pick a secret word.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&first).await;
    assert_eq!(report_of(&t)["status"], "success", "{t}\n{}", rig.raw(&first));
    let session = t["session_id"].as_str().or_else(|| report_of(&t)["session_id"].as_str());
    let session = session.unwrap_or_else(|| panic!("no thread id: {t}\n{}", rig.raw(&first))).to_owned();
    let second = rig.delegate("What was the word?", json!({"mode": "read-only", "session_id": session})).await;
    let t2 = rig.finish(&second).await;
    assert_eq!(report_of(&t2)["status"], "success", "{t2}\n{}", rig.raw(&second));
    assert_app_server(&rig, &second);
    let opening =
        std::fs::read_to_string(caesar_tests::daemon_files(rig.task_dir(&second)).join("session.open.json")).unwrap();
    assert!(opening.contains(&session), "the opening continues the thread: {opening}");
    let raw = rig.raw(&second);
    assert!(
        raw.contains(&format!(r#""result":{{"thread":{{"id":"{session}""#)) || raw.contains(&session),
        "codex answered thread/resume with the same thread: {raw}"
    );
    assert!(!raw.contains(FALLBACK), "no fallback: {raw}");
    let requests = rig.server.model_requests();
    let last = requests.last().unwrap().body_text();
    assert!(
        last.contains("Pick a secret word.") && last.contains("The secret word is pelican."),
        "the first turn is in the resumed thread's history: {last}\n{raw}"
    );
    let summary = report_of(&t2)["summary"].as_str().unwrap_or_default().to_owned();
    assert!(summary.contains("You asked about pelican."), "the answer is the new turn's: {t2}");
    assert_eq!(t2["session_id"].as_str(), Some(session.as_str()), "the same thread: {t2}");
}

/// The line the supervisor writes before it runs `codex exec --json` instead of the app-server.
const FALLBACK: &str = "caesar: the codex app-server handshake failed";

/// An app-server that cannot be opened at start (here a codex whose `app-server` exits at once,
/// as one without the subcommand does) falls back to the real `codex exec --json` in the same
/// supervisor; the task's events say which ran and why, and the exec run is read as its stream.
#[tokio::test]
async fn codex_app_server_failing_at_start_falls_back_to_exec() {
    let rig = Rig::start(vec![Reply::text("Hello from exec.")]).await;
    let wrapper = rig.homes.path().join("codex-without-app-server");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = app-server ]; then echo \"error: unrecognized subcommand 'app-server'\" >&2; \
             exit 2; fi\nexec '{}' \"$@\"\n",
            Cli::Codex.bin().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        rig.env.project.path().join(".caesar/config.toml"),
        format!("[bin]\ncodex = {:?}\n", wrapper.display().to_string()),
    )
    .unwrap();
    let id = rig.delegate("Say hello.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.finish(&id).await;
    let raw = rig.raw(&id);
    assert_eq!(report_of(&t)["status"], "success", "{t}\n{raw}");
    assert!(report_of(&t)["summary"].as_str().unwrap_or_default().contains("Hello from exec."), "{t}\n{raw}");
    assert_app_server(&rig, &id);
    assert!(raw.contains(FALLBACK) && raw.contains("ended before answering initialize"), "{raw}");
    assert!(raw.contains(r#""type":"thread.started""#), "codex exec ran: {raw}");
    let events = rig.events(&id);
    let said = events.iter().find(|e| {
        e["type"] == "progress" && e["message"].as_str().is_some_and(|m| m.contains("running `codex exec --json`"))
    });
    assert!(said.is_some(), "the events say exec ran and why: {events:?}");
    let agent = std::fs::read_to_string(caesar_tests::daemon_files(rig.task_dir(&id)).join("agent.json")).unwrap();
    assert!(!agent.is_empty(), "agent.json names the exec run");
    assert_eq!(rig.server.model_requests().len(), 1, "the brief went to the model once");
}

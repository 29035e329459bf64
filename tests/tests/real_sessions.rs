//! ACP sessions against the real CLIs (gemini, qwen, opencode and copilot from tests/real-clis),
//! through a real daemon and `caesar-mcp`, with the model replaced by the scripted server on
//! 127.0.0.1: a permission request bridged and answered allow, another answered deny (the tool
//! does not run), `ask_orchestrator` over the return channel given through session/new, a
//! cancel through session/cancel with no process left, a pending permission that survives
//! a daemon SIGKILL, and a resumed session (session/load for copilot, session/resume for
//! opencode) whose model sees the first turn. The rig is real_clis.rs's, `common/real_cli.rs`
//! (same isolation: own HOME and XDG dirs, a dead proxy, no retries).
//!
//! With `CAESAR_UPDATE_CAPTURES=1` each run's raw stream is saved under
//! `daemon/tests/fixtures/sessions/`, which the driver's replay test reads.

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

impl Rig {
    /// This file's rig: `cli` under [`TASK_LIMIT_MS`], its streams saved as session captures.
    async fn start(cli: Cli, script: Vec<Reply>) -> Rig {
        Rig::launch(cli, script, Setup::new(TASK_LIMIT_MS, 90_000, Captures::Sessions)).await
    }
}

/// A shell command in a write task asks; `allow` lets it run and the file is in the diff.
async fn permission_allowed(cli: Cli) {
    let command = "echo allowed > bridged.txt";
    let rig = Rig::start(cli, vec![cli.shell(command), Reply::text("Wrote bridged.txt.")]).await;
    let id = rig.delegate("Write bridged.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    let q = &t["pending_questions"][0];
    assert!(
        q["options"].as_array().unwrap_or_else(|| panic!("{t}\n{}", rig.raw(&id))).iter().any(|o| o == "allow"),
        "{q}"
    );
    assert!(q["question"].as_str().unwrap().contains("bridged.txt"), "the whole command is shown: {q}");
    let qid = q["question_id"].as_str().unwrap();
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
    let t = rig.finish(&id).await;
    let report = report_of(&t);
    assert_eq!(report["status"], "success", "{t}\n{}", rig.raw(&id));
    assert!(report["changes"].to_string().contains("bridged.txt"), "git saw the write: {report}\n{}", rig.raw(&id));
}

/// The same request denied: the command does not run, and the model hears of the refusal.
async fn permission_denied(cli: Cli) {
    let command = "echo no > denied.txt";
    let rig = Rig::start(cli, vec![cli.shell(command), Reply::text("I was not allowed.")]).await;
    let id = rig.delegate("Write denied.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    let qid =
        t["pending_questions"][0]["question_id"].as_str().unwrap_or_else(|| panic!("{t}\n{}", rig.raw(&id))).to_owned();
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "deny: not this command"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["changes"], json!([]), "nothing was written: {t}\n{}", rig.raw(&id));
    if matches!(cli, Cli::Qwen | Cli::Opencode | Cli::Copilot) {
        // [V] qwen 0.24, opencode 1.18 and copilot 1.0 end their turn on a rejection: the model
        // is not called again. What the agent was told is the tool call's failure, with the
        // rejection in its words (opencode: "The user rejected permission to use this specific
        // tool call.", copilot: "The user rejected this tool call.").
        let raw = rig.raw(&id);
        if cli != Cli::Qwen {
            assert!(raw.contains(r#""status":"failed""#) && raw.contains("rejected"), "{raw}");
        }
        return;
    }
    let requests = rig.server.model_requests();
    assert!(requests.len() >= 2, "the model was called again after the refusal: {}", rig.raw(&id));
    let after = requests[1].body_text().to_lowercase();
    assert!(after.contains("cancel") || after.contains("reject") || after.contains("denied"), "{after}");
}

/// The return channel reaches the agent through session/new's mcpServers.
async fn ask_orchestrator(cli: Cli) {
    let rig = Rig::start(
        cli,
        vec![
            cli.channel("ask_orchestrator", json!({"question": "Which colour?"})),
            Reply::text("Using the colour given."),
        ],
    )
    .await;
    let id = rig.delegate("Ask which colour to use.", json!({"mode": "write", "channel": true})).await;
    let t = rig.question(&id).await;
    // The CLI asks permission to call the channel's tool (ACP offers no way to trust a server
    // given in session/new): caesar allows its own channel itself, so the orchestrator is
    // never asked permission to be asked (issue 30).
    let first = t["pending_questions"][0]["question_id"].as_str().unwrap_or_default();
    assert!(!first.starts_with("p_"), "a permission to call caesar's own tool: {t}\n{}", rig.raw(&id));
    let q = &t["pending_questions"][0];
    assert!(q["question"].as_str().unwrap_or_else(|| panic!("{t}\n{}", rig.raw(&id))).contains("Which colour?"), "{q}");
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": q["question_id"], "answer": "ultramarine"})).await;
    let _ = rig.finish(&id).await;
    let requests = rig.server.model_requests();
    assert!(
        requests.iter().any(|r| r.body_text().contains("ultramarine")),
        "the answer reached the model: {}",
        rig.raw(&id)
    );
}

/// Cancel while a permission is pending: session/cancel first, and nothing of the task is left.
async fn cancel_leaves_no_process(cli: Cli) {
    let rig = Rig::start(cli, vec![cli.shell("echo late > late.txt"), Reply::text("done")]).await;
    let id = rig.delegate("Write late.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    assert!(t["pending_questions"][0].is_object(), "{t}\n{}", rig.raw(&id));
    assert!(!rig.processes_of(&id).is_empty(), "the agent runs");
    rig.ok("caesar_cancel", json!({"task_id": id})).await;
    let t = rig.finish(&id).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let log = std::fs::read_to_string(rig.env.file("daemon.log")).unwrap_or_default();
    let _ = log;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rig.processes_of(&id).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rig.processes_of(&id), Vec::<u32>::new(), "no process left");
}

/// A pending permission outlives a daemon SIGKILL and its answer reaches the agent.
async fn permission_survives_sigkill(cli: Cli) {
    let command = "echo still > after_restart.txt";
    let mut rig = Rig::start(cli, vec![cli.shell(command), Reply::text("Wrote it after all.")]).await;
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
}

/// A read-only task never gains write through an answer: caesar refuses the command itself.
async fn read_only_refuses_a_command(cli: Cli) {
    let rig = Rig::start(cli, vec![cli.shell("echo x > ro.txt"), Reply::text("Could not write.")]).await;
    let id = rig.delegate("Write ro.txt with the shell.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&id).await;
    let report = report_of(&t);
    assert_eq!(report["changes"], json!([]), "{t}\n{}", rig.raw(&id));
    assert!(report["findings"].to_string().contains("read-only task; caesar refused it"), "{report}\n{}", rig.raw(&id));
    assert!(!rig.env.project.path().join("ro.txt").exists());
}

/// A task continuing a session: the supervisor sends session/load (the CLI advertises
/// loadSession) and the model sees the first turn in the second's history.
async fn resume_continues_the_session(cli: Cli) {
    let rig =
        Rig::start(cli, vec![Reply::text("The secret word is pelican."), Reply::text("You asked about pelican.")])
            .await;
    let first = rig.delegate("Pick a secret word.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&first).await;
    let session = t["session_id"].as_str().or_else(|| report_of(&t)["session_id"].as_str());
    let session = session.unwrap_or_else(|| panic!("no session id: {t}\n{}", rig.raw(&first))).to_owned();
    let second = rig.delegate("What was the word?", json!({"mode": "read-only", "session_id": session})).await;
    let t2 = rig.finish(&second).await;
    let opening =
        std::fs::read_to_string(caesar_tests::daemon_files(rig.task_dir(&second)).join("session.open.json")).unwrap();
    assert!(opening.contains(&session), "the opening continues the session: {opening}");
    let requests = rig.server.model_requests();
    let last = requests.last().unwrap().body_text();
    assert!(
        last.contains("Pick a secret word.") && last.contains("The secret word is pelican."),
        "earlier turns sent: {last}\n{}",
        rig.raw(&second)
    );
    let summary = report_of(&t2)["summary"].as_str().unwrap_or_default().to_owned();
    assert!(summary.contains("You asked about pelican."), "the answer is the new turn's: {t2}");
}

// gemini 0.61 advertises loadSession, but its session/load overwrites the session before it
// reads it ("No previous sessions found for this project."): a resumed gemini task runs its
// stream command instead (gemini_resume_runs_the_stream_with_resume_…, at the end).
#[tokio::test]
async fn copilot_resume_loads_the_session_and_the_model_sees_the_first_turn() {
    resume_continues_the_session(Cli::Copilot).await;
}
#[tokio::test]
async fn opencode_resume_continues_the_session_and_the_model_sees_the_first_turn() {
    resume_continues_the_session(Cli::Opencode).await;
}
#[tokio::test]
async fn gemini_permission_allowed_runs_the_command() {
    permission_allowed(Cli::Gemini).await;
}
#[tokio::test]
async fn gemini_permission_denied_keeps_the_command_from_running() {
    permission_denied(Cli::Gemini).await;
}
#[tokio::test]
async fn gemini_ask_orchestrator_over_the_session_channel() {
    ask_orchestrator(Cli::Gemini).await;
}
#[tokio::test]
async fn gemini_cancel_through_the_session_leaves_no_process() {
    cancel_leaves_no_process(Cli::Gemini).await;
}
#[tokio::test]
async fn gemini_permission_survives_a_daemon_sigkill() {
    permission_survives_sigkill(Cli::Gemini).await;
}
#[tokio::test]
async fn gemini_read_only_task_is_refused_a_command_by_caesar() {
    read_only_refuses_a_command(Cli::Gemini).await;
}
#[tokio::test]
async fn opencode_permission_allowed_runs_the_command() {
    permission_allowed(Cli::Opencode).await;
}
#[tokio::test]
async fn opencode_permission_denied_keeps_the_command_from_running() {
    permission_denied(Cli::Opencode).await;
}
#[tokio::test]
async fn opencode_cancel_through_the_session_leaves_no_process() {
    cancel_leaves_no_process(Cli::Opencode).await;
}
#[tokio::test]
async fn copilot_permission_allowed_runs_the_command() {
    permission_allowed(Cli::Copilot).await;
}
#[tokio::test]
async fn copilot_permission_denied_keeps_the_command_from_running() {
    permission_denied(Cli::Copilot).await;
}
#[tokio::test]
async fn copilot_cancel_through_the_session_leaves_no_process() {
    cancel_leaves_no_process(Cli::Copilot).await;
}
#[tokio::test]
async fn qwen_permission_allowed_runs_the_command() {
    permission_allowed(Cli::Qwen).await;
}
#[tokio::test]
async fn qwen_permission_denied_keeps_the_command_from_running() {
    permission_denied(Cli::Qwen).await;
}
#[tokio::test]
async fn qwen_ask_orchestrator_over_the_session_channel() {
    ask_orchestrator(Cli::Qwen).await;
}

// ---- issue 15, round 3 (latency6): gemini's resume ----------------------------------------

/// gemini 0.61's session/load overwrites the session it is asked to load before reading it,
/// so a resumed gemini task runs its stream command with `-r <id>` (not ACP), which
/// finds the session its first task opened through ACP: the model sees the first turn.
#[tokio::test]
async fn gemini_resume_runs_the_stream_with_resume_and_the_model_sees_the_first_turn() {
    let rig = Rig::start(
        Cli::Gemini,
        vec![Reply::text("The secret word is pelican."), Reply::text("You asked about pelican.")],
    )
    .await;
    let first = rig.delegate("Pick a secret word.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&first).await;
    let session = t["session_id"].as_str().or_else(|| report_of(&t)["session_id"].as_str());
    let session = session.unwrap_or_else(|| panic!("no session id: {t}\n{}", rig.raw(&first))).to_owned();
    let started = |id: &str| {
        let events = std::fs::read_to_string(rig.task_dir(id).join("events.jsonl")).unwrap_or_default();
        let line = events.lines().next().unwrap_or_default().to_owned();
        serde_json::from_str::<Value>(&line).unwrap_or_default()["command"].as_str().unwrap_or_default().to_owned()
    };
    assert!(started(&first).contains("--acp"), "the first task is an ACP session: {}", started(&first));
    let second = rig.delegate("What was the word?", json!({"mode": "read-only", "session_id": session})).await;
    let t2 = rig.finish(&second).await;
    let command = started(&second);
    assert!(
        command.contains(" -r ") && command.contains(&session) && !command.contains("--acp"),
        "the stream command resumes the session: {command}"
    );
    let requests = rig.server.model_requests();
    let last = requests.last().unwrap().body_text();
    assert!(
        last.contains("Pick a secret word.") && last.contains("The secret word is pelican."),
        "earlier turns sent: {last}\n{}",
        rig.raw(&second)
    );
    assert_eq!(report_of(&t2)["status"], "success", "{t2}\n{}", rig.raw(&second));
    let summary = report_of(&t2)["summary"].as_str().unwrap_or_default().to_owned();
    assert!(summary.contains("You asked about pelican."), "the answer is the new turn's: {t2}");
}

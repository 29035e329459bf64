//! The real `claude`, `codex`, `gemini`, `opencode` and `copilot` CLIs, installed from the npm
//! registry into `tests/real-clis` (`npm install --prefix tests/real-clis --no-save --no-audit --no-fund`, which `.ci/run` does),
//! driven through `caesar-mcp` by an MCP client against a real daemon, with the model replaced by
//! the scripted server of `caesar_tests::model_server` on 127.0.0.1.
//!
//! claude and codex go through every scenario of the real-CLI issue. gemini, opencode, copilot
//! and qwen go through the ones their CLIs can take here: a write in a worktree, a fenced report,
//! a question over the return channel (opencode, copilot; gemini and qwen read MCP servers only
//! from settings files, so they get a channel warning) and an auth failure (plus a rate limit
//! for opencode and copilot; gemini retries a 429 for minutes whatever it is told).
//!
//! Each test isolates the CLIs: their own HOME, CLAUDE_CONFIG_DIR, CODEX_HOME and XDG dirs, a
//! proxy on a dead loopback port so that no request leaves the machine, and no retries. caesar finds the
//! binaries through the project's `[bin]` config, never through PATH. The rig, shared with
//! real_sessions.rs, real_codex_sessions.rs and real_hosts.rs, is `common/real_cli.rs`.
//!
//! Run with `CAESAR_UPDATE_CAPTURES=1` to save each run's stream under
//! `daemon/tests/fixtures/providers/captures-real/`, which the adapter tests replay.

#![allow(clippy::unwrap_used, deprecated)]

mod common;
#[path = "common/real_cli.rs"]
mod real_cli;

use std::time::{Duration, Instant};

use caesar_tests::model_server::Reply;
use common::*;
use real_cli::{Captures, Cli, Rig, Setup, report_of};
use serde_json::{Value, json};

/// The most a task of these tests may take: the model answers at once, so this is the CLIs' own
/// start-up and tool time.
const TASK_LIMIT_MS: u64 = 90_000;

impl Rig {
    /// This file's rig: `cli` under [`TASK_LIMIT_MS`], its streams saved as provider captures.
    async fn start(cli: Cli, script: Vec<Reply>) -> Rig {
        Rig::launch(cli, script, Setup::new(TASK_LIMIT_MS, 60_000, Captures::Providers)).await
    }
}

// ------------------------------------------------------------------ 1. write in a worktree

async fn write_task_in_a_worktree(cli: Cli) {
    let rig = Rig::start(
        cli,
        vec![
            cli.create("hello.txt", "hello\n"),
            cli.edit("hello.txt", "hello", "hello, world"),
            Reply::text("Created hello.txt and greeted the world."),
        ],
    )
    .await;
    let id = rig
        .delegate("Create hello.txt and greet the world in it.", json!({"mode": "write", "isolation": "worktree"}))
        .await;
    let t = rig.finish(&id).await;
    let report = report_of(&t);
    assert_eq!(report["status"], "success", "{t}\n{}", rig.debug(&id));
    assert_eq!(report["changes_verified_by"], "git", "{report}\n{}", rig.debug(&id));
    let changes = report["changes"].as_array().unwrap();
    assert!(
        changes.iter().any(|c| c["path"] == "hello.txt" && c["action"] == "created"),
        "{report}\n{}",
        rig.debug(&id)
    );
    assert!(!rig.env.project.path().join("hello.txt").exists(), "a worktree task leaves the main tree alone");

    let diff = rig.ok("caesar_diff", json!({"task_id": id})).await;
    assert!(diff.to_string().contains("+hello, world"), "{diff}");
    let applied = rig.ok("caesar_apply", json!({"task_id": id})).await;
    assert_eq!(
        std::fs::read_to_string(rig.env.project.path().join("hello.txt")).unwrap(),
        "hello, world\n",
        "{applied}"
    );
}

#[tokio::test]
async fn claude_write_task_in_a_worktree_is_verified_and_applied() {
    write_task_in_a_worktree(Cli::Claude).await;
}

#[tokio::test]
async fn codex_write_task_in_a_worktree_is_verified_and_applied() {
    write_task_in_a_worktree(Cli::Codex).await;
}

// ------------------------------------------------------------------ 2. read-only

async fn read_only_refuses_a_write(cli: Cli) {
    let write = match cli {
        Cli::Claude => cli.create("nope.txt", "should not exist\n"),
        Cli::Codex => cli.shell("echo should not exist > nope.txt"),
        other => panic!("the read-only scenario is written for claude and codex, not {other:?}"),
    };
    let rig = Rig::start(cli, vec![write, Reply::text("I could not write nope.txt.")]).await;
    let id = rig.delegate("Write nope.txt.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&id).await;
    assert!(!rig.env.project.path().join("nope.txt").exists(), "the CLI's read-only mode held");
    let report = report_of(&t);
    let said = report["summary"].as_str().unwrap_or_default();
    match cli {
        Cli::Claude => {
            // [V] claude's stream carries the refusal ("Cannot write … while in plan mode") and
            // the result's permission_denials: the report is blocked and names the call.
            assert_eq!(report["status"], "blocked", "{t}\n{}", rig.debug(&id));
            assert!(said.contains("permission") && said.contains("nope.txt"), "the report names the refusal: {report}");
        }
        Cli::Codex => {
            // [V] codex 0.171's sandbox refuses the write ("Read-only file system" in the tool
            // output the model gets), but its --json stream has no item for the failed command:
            // only the agent's own words can say so.
            let last = rig.server.model_requests().pop().unwrap().body_text();
            assert!(last.contains("Read-only file system"), "the sandbox refused it: {}", rig.debug(&id));
            assert!(said.contains("could not write nope.txt"), "the report says so: {report}");
        }
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn claude_read_only_task_is_refused_a_write_and_says_so() {
    read_only_refuses_a_write(Cli::Claude).await;
}

#[tokio::test]
async fn codex_read_only_task_is_refused_a_write_and_says_so() {
    read_only_refuses_a_write(Cli::Codex).await;
}

// ------------------------------------------------------------------ 3. report tiers

async fn report_through_the_channel(cli: Cli) {
    let report = json!({"protocol": "caesar.report/v1", "status": "partial", "summary": "half of it, through the channel",
        "next_steps": ["do the other half"]});
    let rig = Rig::start(
        cli,
        vec![cli.channel("submit_report", json!({"report": report})), Reply::text("Report submitted.")],
    )
    .await;
    let id = rig.delegate("Report through the channel.", json!({"mode": "read-only", "channel": true})).await;
    let t = rig.finish(&id).await;
    let r = report_of(&t);
    assert_eq!(t["report_source"], "channel", "{t}\n{}", rig.debug(&id));
    assert_eq!(r["status"], "partial");
    assert_eq!(r["summary"], "half of it, through the channel");
    // The CLI got the tool's success back.
    let last = rig.server.model_requests().pop().unwrap();
    assert!(
        last.body_text().contains("report accepted") || last.body_text().contains("accepted"),
        "{}",
        last.body_text()
    );
}

#[tokio::test]
async fn claude_report_arrives_through_submit_report() {
    report_through_the_channel(Cli::Claude).await;
}

#[tokio::test]
async fn codex_report_arrives_through_submit_report() {
    report_through_the_channel(Cli::Codex).await;
}

async fn report_in_a_fenced_block(cli: Cli) {
    let answer = "All checked.\n\n```json caesar:report\n{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\
                  \"summary\":\"checked through the fenced block\",\"findings\":[{\"severity\":\"low\",\"title\":\"a nit\"}]}\n```\n";
    let rig = Rig::start(cli, vec![Reply::text(answer)]).await;
    let id = rig.delegate("Check it and report.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&id).await;
    let r = report_of(&t);
    assert_eq!(t["report_source"], "fenced", "{t}\n{}", rig.debug(&id));
    assert_eq!(r["summary"], "checked through the fenced block");
    assert!(r.to_string().contains("a nit"), "{r}");
}

#[tokio::test]
async fn claude_report_arrives_in_a_fenced_block() {
    report_in_a_fenced_block(Cli::Claude).await;
}

#[tokio::test]
async fn codex_report_arrives_in_a_fenced_block() {
    report_in_a_fenced_block(Cli::Codex).await;
}

// ------------------------------------------------------------------ 4. ask_orchestrator

async fn ask_orchestrator_answer_reaches_the_model(cli: Cli) {
    let rig = Rig::start(
        cli,
        vec![
            cli.channel(
                "ask_orchestrator",
                json!({"question": "Which colour should the button be?", "options": ["red", "blue"]}),
            ),
            Reply::text("Painted it as told."),
        ],
    )
    .await;
    let id = rig.delegate("Paint the button.", json!({"mode": "read-only", "channel": true})).await;
    let t = rig.attention(&id).await;
    let pending = t["pending_questions"].as_array().unwrap_or_else(|| panic!("no question: {t}\n{}", rig.debug(&id)));
    assert_eq!(pending.len(), 1, "{t}");
    assert_eq!(pending[0]["question"], "Which colour should the button be?");
    assert_eq!(pending[0]["options"], json!(["red", "blue"]));
    let qid = pending[0]["question_id"].as_str().unwrap();
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "blue, the shade of the logo"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["status"], "success", "{t}");
    // The answer went back to the model as the tool's result.
    let requests = rig.server.model_requests();
    assert!(requests.len() >= 2, "{}", rig.debug(&id));
    assert!(requests[1].body_text().contains("blue, the shade of the logo"), "{}", requests[1].body_text());
}

#[tokio::test]
async fn claude_ask_orchestrator_answer_reaches_the_model() {
    ask_orchestrator_answer_reaches_the_model(Cli::Claude).await;
}

#[tokio::test]
async fn codex_ask_orchestrator_answer_reaches_the_model() {
    ask_orchestrator_answer_reaches_the_model(Cli::Codex).await;
}

// ------------------------------------------------------------------ 5. 401 and 429

async fn api_errors_block(cli: Cli) {
    let rig = auth_error_blocks(cli).await;
    // opencode and copilot retry a 429 (at once, given `retry-after: 0`): every try gets one.
    // [V] opencode 1.18 under ACP answers the prompt with {"code":-32603,"message":"Internal
    // error: <the API's message>","data":{"errorName":"APIError"}}: no status, no error type, so
    // only the message can say it is a rate limit. Its case gets the API's real wording.
    let message = if cli == Cli::Opencode {
        "Number of request tokens has exceeded your per-minute rate limit"
    } else {
        "slow down"
    };
    rig.server.set_script(vec![Reply::error(429, message); 10]);
    let id = rig.delegate("Say hello again.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&id).await;
    let r = report_of(&t);
    assert_eq!(r["status"], "blocked", "{t}\n{}", rig.debug(&id));
    assert!(r.to_string().contains("rate_limit"), "{r}");
}

/// A 401 ends the task `blocked` on auth, fast. Returns the rig for a next scenario.
async fn auth_error_blocks(cli: Cli) -> Rig {
    // copilot retries a 401 once ("transient_auth_error"): every try gets one.
    let rig = Rig::start(cli, vec![Reply::error(401, "invalid x-api-key"); 5]).await;
    let id = rig.delegate("Say hello.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&id).await;
    // Measured from the CLI's first request to the model, which got the 401:
    // what follows is caesar recognizing the blocker and stopping the run
    // (and the CLI's own retries); the CLI's start-up before it is not
    // caesar's, and takes seconds on a loaded machine.
    let first = rig.server.model_requests().first().map(|r| r.at).expect("the CLI asked the model");
    assert!(first.elapsed() < Duration::from_secs(10), "a 401 ends the task fast: {:?} after it", first.elapsed());
    let r = report_of(&t);
    assert_eq!(r["status"], "blocked", "{t}\n{}", rig.debug(&id));
    assert!(r.to_string().contains("auth"), "{r}");
    rig
}

#[tokio::test]
async fn claude_401_blocks_on_auth_and_429_on_rate_limit() {
    api_errors_block(Cli::Claude).await;
}

#[tokio::test]
async fn codex_401_blocks_on_auth_and_429_on_rate_limit() {
    api_errors_block(Cli::Codex).await;
}

// ------------------------------------------------------------------ 6. cancel

async fn cancel_leaves_no_process(cli: Cli) {
    let rig = Rig::start(cli, vec![cli.shell("sleep 300")]).await;
    let id = rig.delegate("Wait a long time.", json!({"mode": "write", "isolation": "worktree"})).await;
    // Mid-run: the CLI is running its tool (codex), or waiting on the bridged permission
    // prompt for it (claude), which is then allowed so that the sleep runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = rig.ok("caesar_status", json!({"task_id": id})).await;
        if let Some(q) = t["pending_questions"].as_array().and_then(|q| q.first()) {
            let qid = q["question_id"].as_str().unwrap();
            rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
        }
        let sleeping = rig
            .processes_of(&id)
            .into_iter()
            .any(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\x00300")));
        if sleeping {
            break;
        }
        assert!(Instant::now() < deadline, "the tool never ran: {t}\n{}", rig.debug(&id));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = rig.processes_of(&id);
    assert!(before.len() >= 2, "the CLI and its tool run: {before:?}");
    rig.ok("caesar_cancel", json!({"task_id": id})).await;
    let t = rig.finish(&id).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let left = rig.processes_of(&id);
    assert!(left.is_empty(), "processes of the run are left: {left:?}");
    assert!(before.iter().all(|p| !alive(*p)), "{before:?}");
    if matches!(cli, Cli::Claude) {
        // The interrupt went first, through claude's control protocol, and claude took it.
        let events = std::fs::read_to_string(rig.task_dir(&id).join("events.jsonl")).unwrap_or_default();
        assert!(events.contains("claude accepted the interrupt"), "{events}\n{}", rig.debug(&id));
    }
}

/// At a budget the agent is asked to stop through its protocol first (issue 17, item 4):
/// claude gets `interrupt`, takes it, and the report is partial with the budget finding.
#[tokio::test]
async fn claude_at_its_budget_is_interrupted_first_and_reports_partial() {
    let rig = Rig::start(Cli::Claude, vec![Cli::Claude.shell("sleep 300")]).await;
    let id = rig
        .delegate("Wait a long time.", json!({"mode": "write", "isolation": "worktree", "budget": {"wall_ms": 8000}}))
        .await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let t = loop {
        let t = rig.ok("caesar_status", json!({"task_id": id})).await;
        if t["status"] != "running" && t["status"] != "pending" {
            break t;
        }
        if let Some(q) = t["pending_questions"].as_array().and_then(|q| q.first()) {
            let qid = q["question_id"].as_str().unwrap();
            let _ = rig.call("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
        }
        assert!(Instant::now() < deadline, "the budget never stopped the task: {t}\n{}", rig.debug(&id));
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let t = if t["report"].is_null() { rig.finish(&id).await } else { t };
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(t["report_status"], "partial", "{t}");
    let findings = t["report"]["findings"].to_string();
    assert!(findings.contains("budget"), "{t}");
    let events = std::fs::read_to_string(rig.task_dir(&id).join("events.jsonl")).unwrap_or_default();
    assert!(events.contains("claude accepted the interrupt"), "{events}\n{}", rig.debug(&id));
    assert!(rig.processes_of(&id).is_empty(), "processes of the run are left");
}

#[tokio::test]
async fn claude_cancel_mid_run_leaves_no_process() {
    cancel_leaves_no_process(Cli::Claude).await;
}

#[tokio::test]
async fn codex_cancel_mid_run_leaves_no_process() {
    cancel_leaves_no_process(Cli::Codex).await;
}

// ------------------------------------------------------------------ 7. resume

async fn resume_continues_the_session(cli: Cli) {
    let rig =
        Rig::start(cli, vec![Reply::text("The secret word is pelican."), Reply::text("You asked about pelican.")])
            .await;
    let first = rig.delegate("Pick a secret word.", json!({"mode": "read-only"})).await;
    let t = rig.finish(&first).await;
    let session = t["session_id"].as_str().or_else(|| report_of(&t)["session_id"].as_str());
    let session = session.unwrap_or_else(|| panic!("no session id: {t}")).to_owned();

    let second = rig.delegate("What was the word?", json!({"mode": "read-only", "session_id": session})).await;
    let t2 = rig.finish(&second).await;
    let session2 = t2["session_id"].as_str().or_else(|| report_of(&t2)["session_id"].as_str()).unwrap_or_default();
    assert_eq!(session2, session, "the same session goes on: {t2}");
    let requests = rig.server.model_requests();
    let last = requests.last().unwrap().body_text();
    assert!(
        last.contains("Pick a secret word.") && last.contains("The secret word is pelican."),
        "earlier turns sent: {last}"
    );
    assert_eq!(report_of(&t2)["summary"].as_str().map(|s| s.contains("pelican")), Some(true), "{t2}");
}

#[tokio::test]
async fn claude_resume_continues_the_session() {
    resume_continues_the_session(Cli::Claude).await;
}

#[tokio::test]
async fn codex_resume_continues_the_session() {
    resume_continues_the_session(Cli::Codex).await;
}

// ------------------------------------------------------------------ 8. permission bridge

/// claude asks before running a command that is not an edit; caesar makes the prompt a
/// pending question and writes the answer back as claude's control response. (codex's `exec`
/// never asks: its approval policy is `never`, so there is nothing to bridge.)
#[tokio::test]
async fn claude_permission_prompt_is_bridged_and_allow_lets_the_write_happen() {
    let cli = Cli::Claude;
    let command = "python3 -c \"open('bridged.txt','w').write('allowed')\"";
    let rig = Rig::start(cli, vec![cli.shell(command), Reply::text("Wrote bridged.txt.")]).await;
    let id = rig.delegate("Write bridged.txt with python.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.attention(&id).await;
    let pending = t["pending_questions"].as_array().unwrap_or_else(|| panic!("no prompt: {t}\n{}", rig.debug(&id)));
    let q = &pending[0];
    assert_eq!(q["options"], json!(["allow", "deny"]), "{q}");
    assert!(q["question"].as_str().unwrap().contains("Bash"), "{q}");
    // What it is: a permission for Bash with the whole command, and the options offered.
    assert_eq!(
        (&q["kind"], &q["tool"], &q["tool_kind"]),
        (&json!("permission"), &json!("Bash"), &json!("execute")),
        "{q}"
    );
    assert_eq!(q["input"]["command"], command, "{q}");
    assert_eq!(
        q["option_details"].as_array().map(|o| o.iter().map(|o| o["id"].clone()).collect()),
        Some(vec![json!("allow"), json!("deny")]),
        "{q}"
    );
    let qid = q["question_id"].as_str().unwrap();
    let refused = rig.call("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow_always"})).await;
    let text = refused.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
    assert!(refused.is_error == Some(true) && text.contains("`allow` (allow_once), `deny` (reject_once)"), "{text}");
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
    let t = rig.finish(&id).await;
    let report = report_of(&t);
    assert_eq!(report["status"], "success", "{t}\n{}", rig.debug(&id));
    assert!(report["changes"].to_string().contains("bridged.txt"), "git saw the write: {report}");
    rig.ok("caesar_apply", json!({"task_id": id})).await;
    assert_eq!(std::fs::read_to_string(rig.env.project.path().join("bridged.txt")).unwrap(), "allowed");
}

/// The same prompt denied: the command does not run, and the reason reaches the model.
#[tokio::test]
async fn claude_permission_prompt_denied_keeps_the_command_from_running() {
    let cli = Cli::Claude;
    let command = "python3 -c \"open('denied.txt','w').write('no')\"";
    let rig = Rig::start(cli, vec![cli.shell(command), Reply::text("I was not allowed.")]).await;
    let id = rig.delegate("Write denied.txt with python.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.attention(&id).await;
    let qid = t["pending_questions"][0]["question_id"].as_str().unwrap_or_else(|| panic!("{t}")).to_owned();
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "deny: use the Write tool instead"}))
        .await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["changes"], json!([]), "nothing was written: {t}");
    let requests = rig.server.model_requests();
    assert!(requests[1].body_text().contains("use the Write tool instead"), "{}", requests[1].body_text());
}

/// A bridged prompt outlives the daemon: claude waits on its stdin, which the supervisor holds;
/// the question is in the store; the answer given to the next daemon reaches claude.
#[tokio::test]
async fn claude_permission_prompt_survives_a_daemon_sigkill() {
    let cli = Cli::Claude;
    let command = "python3 -c \"open('after_restart.txt','w').write('still allowed')\"";
    let mut rig = Rig::start(cli, vec![cli.shell(command), Reply::text("Wrote it after all.")]).await;
    let id =
        rig.delegate("Write after_restart.txt with python.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.attention(&id).await;
    let qid = t["pending_questions"][0]["question_id"].as_str().unwrap_or_else(|| panic!("{t}")).to_owned();
    let claude_pids = rig.processes_of(&id);

    rig.restart_daemon().await;
    assert!(claude_pids.iter().all(|p| alive(*p)), "the run outlived the daemon");
    let t = rig.ok("caesar_status", json!({"task_id": id})).await;
    assert_eq!(t["pending_questions"][0]["question_id"], qid.as_str(), "the question survived: {t}");
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(report_of(&t)["status"], "success", "{t}\n{}", rig.debug(&id));
    assert!(report_of(&t)["changes"].to_string().contains("after_restart.txt"), "{t}");
}

// ------------------------------------------------------------------ gemini, opencode, copilot

#[tokio::test]
async fn gemini_write_task_in_a_worktree_is_verified_and_applied() {
    write_task_in_a_worktree(Cli::Gemini).await;
}

#[tokio::test]
async fn gemini_report_arrives_in_a_fenced_block() {
    report_in_a_fenced_block(Cli::Gemini).await;
}

/// gemini takes per-run MCP servers only from settings files in its one-shot mode, but caesar
/// drives it through ACP, whose `session/new` carries the return channel: `channel: true` gives
/// no warning and the channel's tools are offered to the model (issue 15).
#[tokio::test]
async fn gemini_channel_reaches_the_agent_through_its_acp_session() {
    let cli = Cli::Gemini;
    let rig = Rig::start(cli, vec![Reply::text("Done with the channel at hand.")]).await;
    let mut args = json!({"objective": "Say hello.", "agent": "gemini", "mode": "read-only", "channel": true});
    args["timeout"] = json!(TASK_LIMIT_MS);
    let d = rig.ok("caesar_delegate", args).await;
    assert!(d["warnings"].get("channel_warning").is_none() && d.get("channel_warning").is_none(), "{d}");
    let id = d["task_id"].as_str().unwrap();
    let t = rig.finish(id).await;
    assert_eq!(report_of(&t)["status"], "success", "{t}");
    let tools = rig.server.model_requests()[0].body_text();
    assert!(tools.contains("ask_orchestrator"), "the channel's tools were offered");
}

#[tokio::test]
async fn gemini_401_blocks_on_auth() {
    auth_error_blocks(Cli::Gemini).await;
}

#[tokio::test]
async fn opencode_write_task_in_a_worktree_is_verified_and_applied() {
    write_task_in_a_worktree(Cli::Opencode).await;
}

#[tokio::test]
async fn opencode_report_arrives_in_a_fenced_block() {
    report_in_a_fenced_block(Cli::Opencode).await;
}

#[tokio::test]
async fn opencode_ask_orchestrator_answer_reaches_the_model() {
    ask_orchestrator_answer_reaches_the_model(Cli::Opencode).await;
}

#[tokio::test]
async fn opencode_401_blocks_on_auth_and_429_on_rate_limit() {
    api_errors_block(Cli::Opencode).await;
}

#[tokio::test]
async fn copilot_write_task_in_a_worktree_is_verified_and_applied() {
    write_task_in_a_worktree(Cli::Copilot).await;
}

#[tokio::test]
async fn copilot_report_arrives_in_a_fenced_block() {
    report_in_a_fenced_block(Cli::Copilot).await;
}

#[tokio::test]
async fn copilot_ask_orchestrator_answer_reaches_the_model() {
    ask_orchestrator_answer_reaches_the_model(Cli::Copilot).await;
}

#[tokio::test]
async fn copilot_401_blocks_on_auth_and_429_on_rate_limit() {
    api_errors_block(Cli::Copilot).await;
}

#[tokio::test]
async fn qwen_write_task_in_a_worktree_is_verified_and_applied() {
    write_task_in_a_worktree(Cli::Qwen).await;
}

#[tokio::test]
async fn qwen_report_arrives_in_a_fenced_block() {
    report_in_a_fenced_block(Cli::Qwen).await;
}

#[tokio::test]
async fn qwen_401_blocks_on_auth() {
    auth_error_blocks(Cli::Qwen).await;
}

// ------------------------------------------------------------------ quota parking (issue 17, item 3)

/// A 429 whose message says when the quota lifts parks the task; once it
/// lifts, the same CLI resumes its own session (`--resume <id>`) under the
/// caller's one task id, and succeeds.
async fn a_429_with_a_reset_parks_and_resumes_the_session(cli: Cli) {
    let rig = Rig::start(cli, vec![Reply::error(429, "rate limited: try again in 3 seconds"); 20]).await;
    let id = rig.delegate("Say hello.", json!({"mode": "read-only", "on_blocker": "park"})).await;
    let deadline = Instant::now() + Duration::from_millis(TASK_LIMIT_MS);
    let parked = loop {
        let t = rig.ok("caesar_status", json!({"task_id": id})).await;
        if t["parked_until"].is_string() {
            break t;
        }
        assert!(t["status"] == "pending" || t["status"] == "running", "never parked: {t}\n{}", rig.debug(&id));
        assert!(Instant::now() < deadline, "never parked: {t}\n{}", rig.debug(&id));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(parked["status"], "pending", "{parked}");
    assert!(parked["parked_reason"].as_str().unwrap().contains("try again in 3 seconds"), "{parked}");
    // The quota lifts: the model answers again.
    rig.server.set_script(vec![Reply::text("hello after the quota")]);
    let t = rig.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t}\n{}", rig.debug(&id));
    assert_eq!(t["attempts"][0]["stopped_by"], "rate_limit", "{t}");
    // The first run's own session, from its stream, is the one resumed.
    let raw = std::fs::read_to_string(caesar_tests::daemon_files(rig.task_dir(&id)).join("raw.log")).unwrap();
    let session = raw
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["session_id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no session id in the first run's stream:\n{raw}"));
    let resumed = t["current_task_id"].as_str().unwrap().to_owned();
    let events = std::fs::read_to_string(rig.task_dir(&resumed).join("events.jsonl")).unwrap();
    let started = events.lines().find(|l| l.contains("\"type\":\"started\"")).unwrap();
    assert!(started.contains("--resume") && started.contains(&session), "{started}");
    assert_eq!(t["session_id"].as_str(), Some(session.as_str()), "{t}");
}

#[tokio::test]
async fn claude_429_with_a_reset_parks_and_resumes_the_session() {
    a_429_with_a_reset_parks_and_resumes_the_session(Cli::Claude).await;
}

// codex is not tested here: on a 429 it prints only "exceeded retry limit, last status: 429 Too
// Many Requests", with neither the body's words nor the retry-after header, so it gives no reset
// time to park on (its usage-limit error carries one; the codex driver reads that).

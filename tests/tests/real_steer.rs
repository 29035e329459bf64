//! Steering the real CLIs (issue 31) from tests/real-clis, through a real daemon and
//! `caesar-mcp`, with the model replaced by the scripted server on 127.0.0.1: while a turn
//! waits on a permission question, `caesar_steer` hands the agent a steer; once the question is
//! answered, a later request to the model carries the steer's text, the task is neither
//! cancelled nor restarted, and one `steer` event says how it was delivered: a user message on
//! claude's held stdin, `turn/steer` on codex's running turn, the next `session/prompt` of
//! opencode's ACP session; with `interrupt`, `turn/interrupt` then a new turn (codex) and
//! `session/cancel` then the prompt (opencode). The rig is `common/real_cli.rs`'s.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/real_cli.rs"]
mod real_cli;

use caesar_tests::model_server::Reply;
use real_cli::{Captures, Cli, Rig, Setup, report_of};
use serde_json::json;

const TASK_LIMIT_MS: u64 = 120_000;
/// A command codex runs outside its sandbox, which makes it ask (real_codex_sessions.rs).
fn escalated() -> Reply {
    Reply::tool(
        "exec_command",
        json!({"cmd": "echo gate > gate.txt", "sandbox_permissions": "require_escalated",
            "justification": "the brief asks for it"}),
    )
}

const STEER: &str = "Also mention the zebra-42 constraint in your answer.";

/// With `interrupt`, the question is left unanswered: the steer ends the running turn and the
/// next one carries it.
async fn steer_reaches_the_model(cli: Cli, gate: Reply, mode: &str, interrupt: bool) {
    let setup = Setup::new(TASK_LIMIT_MS, 90_000, Captures::Sessions);
    let rig =
        Rig::launch(cli, vec![gate, Reply::text("First turn done."), Reply::text("Heard zebra-42.")], setup).await;
    let id = rig.delegate("Write gate.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    let qid = t["pending_questions"][0]["question_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no question: {t}\n{}", rig.debug(&id)))
        .to_owned();
    let asked = rig.server.model_requests().len();
    let sent_ms = wall_ms();
    let s = rig.ok("caesar_steer", json!({"task_id": id, "text": STEER, "interrupt": interrupt})).await;
    assert_eq!(s["route"], mode, "{s}");
    if !interrupt {
        rig.ok("caesar_answer", json!({"task_id": id, "question_id": qid, "answer": "allow"})).await;
    }
    let t = rig.finish(&id).await;
    assert_ne!(t["status"], "cancelled", "{t}\n{}", rig.debug(&id));
    if !interrupt {
        assert_eq!(report_of(&t)["status"], "success", "{t}\n{}", rig.debug(&id));
    }
    let requests = rig.server.model_requests();
    assert!(
        requests[..asked].iter().all(|r| !r.body_text().contains("zebra-42")),
        "no request before the steer carries it"
    );
    assert!(
        requests[asked..].iter().any(|r| r.body_text().contains("zebra-42")),
        "a later request to the model carries the steer\n{}",
        rig.debug(&id)
    );
    let events = rig.events(&id);
    let steers: Vec<_> = events.iter().filter(|e| e["type"] == "steer").collect();
    assert_eq!(steers.len(), 1, "one steer event: {events:?}");
    assert_eq!((steers[0]["mode"].as_str(), steers[0]["delivered"].as_bool()), (Some(mode), Some(true)));
    // For BENCHMARKS.md: the steer sent → its delivery recorded (the event's time), from the
    // same clock; `--no-capture` shows it.
    let delivered_ms = rfc3339_ms(steers[0]["at"].as_str().unwrap_or_default());
    eprintln!("steer-latency mode={mode} ms={}", delivered_ms - sent_ms);
    assert_eq!(events.iter().filter(|e| e["type"] == "started").count(), 1, "the task was not restarted");
    assert!(rig.processes_of(&id).is_empty(), "no process left");
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// `2026-12-05T18:54:43.851Z` in ms since the epoch (UTC, as the daemon writes it).
fn rfc3339_ms(s: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok()).unwrap_or(0);
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (h, min, sec, ms) = (n(11..13), n(14..16), n(17..19), n(20..23));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + h) * 60 + min) * 60_000 + sec * 1000 + ms
}

#[test]
fn rfc3339_reads_as_the_daemon_writes() {
    assert_eq!(rfc3339_ms("1970-01-01T00:00:00.000Z"), 0);
    assert_eq!(rfc3339_ms("2026-12-05T18:54:43.851Z"), 1_796_496_883_851);
}

#[tokio::test]
async fn claude_hears_a_steer_as_a_user_message_on_its_held_stdin() {
    // [V] claude 2.1.197 runs `echo … > file` unasked under acceptEdits; python it asks about.
    let gate = Cli::Claude.shell("python3 -c \"open('gate.txt','w').write('gate')\"");
    steer_reaches_the_model(Cli::Claude, gate, "stdin_message", false).await;
}

#[tokio::test]
async fn claude_with_interrupt_ends_the_turn_and_hears_the_steer_in_the_next() {
    let gate = Cli::Claude.shell("python3 -c \"open('gate.txt','w').write('gate')\"");
    steer_reaches_the_model(Cli::Claude, gate, "interrupt_then_stdin_message", true).await;
}

#[tokio::test]
async fn codex_app_server_hears_a_steer_through_turn_steer() {
    steer_reaches_the_model(Cli::Codex, escalated(), "turn_steer", false).await;
}

#[tokio::test]
async fn codex_app_server_with_interrupt_ends_the_turn_and_starts_one_with_the_steer() {
    steer_reaches_the_model(Cli::Codex, escalated(), "interrupt_then_new_turn", true).await;
}

#[tokio::test]
async fn opencode_with_interrupt_cancels_the_turn_and_prompts_with_the_steer() {
    steer_reaches_the_model(Cli::Opencode, Cli::Opencode.shell("echo gate > gate.txt"), "cancel_then_prompt", true)
        .await;
}

#[tokio::test]
async fn opencode_hears_a_steer_as_the_next_prompt_of_its_acp_session() {
    steer_reaches_the_model(Cli::Opencode, Cli::Opencode.shell("echo gate > gate.txt"), "next_prompt", false).await;
}

//! Steering a running agent (issue 31), through the real daemon, supervisors and CLI: a steer
//! reaches a stream-json agent (a scripted stand-in for claude) on its held stdin, and an ACP
//! agent (`fake-acp` as qwen) as the next prompt of its session (after `session/cancel` with
//! `--interrupt`), once each, without the task being restarted; a steer stored for a task not
//! yet started survives a daemon SIGKILL and is delivered exactly once after the restart; and
//! bad input (an ended task, an unknown id, a one-shot agent, 10 MB, 10,000 steers) gets a
//! clear error or a bounded queue.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

/// Stands in for claude's stream-json protocol: reads its prompt, says it is working, then
/// waits for the next user message on stdin (the steer), records it in `got`, ends the first
/// turn and answers the steer in a second one; whatever else reaches its stdin until it is
/// closed goes to `rest`.
const CLAUDE: &str = r#"#!/usr/bin/env python3
import json, os, sys
d = os.environ["CAESAR_TASK_DIR"]
def say(v):
    print(json.dumps(v, separators=(",", ":")), flush=True)
sys.stdin.readline()
say({"type": "system", "subtype": "init", "session_id": "s-steer"})
say({"type": "assistant", "message": {"content": [{"type": "text", "text": "working"}]}})
# The pid as /proc knows it (inside the box's PID namespace getpid is the namespace's).
open(os.path.join(d, "ready"), "w").write(open("/proc/self/stat").read().split()[0])
steer = sys.stdin.readline()
open(os.path.join(d, "got"), "a").write(steer)
say({"type": "result", "subtype": "success", "is_error": False, "result": "first turn done"})
text = json.loads(steer)["message"]["content"]
say({"type": "assistant", "message": {"content": [{"type": "text", "text": "heard: " + text}]}})
say({"type": "result", "subtype": "success", "is_error": False, "result": "heard: " + text})
open(os.path.join(d, "rest"), "w").write(sys.stdin.read())
"#;

fn fake_acp() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fake-acp"))
}

fn script(env: &Env, name: &str, body: &str) -> PathBuf {
    let path = env.home.path().join(name);
    std::fs::write(&path, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The project's config: `extra`, then `[bin] provider = script`.
fn use_bin(env: &Env, extra: &str, provider: &str, script: &Path) {
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("{extra}\n[bin]\n{provider} = {:?}\n", script.display().to_string()),
    )
    .unwrap();
}

async fn events(c: &mut Client, id: &str) -> Vec<Value> {
    let logs = c
        .logs(pb::LogsRequest { task_id: id.to_owned(), limit: 10_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    logs.events_json.iter().map(|e| json(e)).collect()
}

fn of_type<'a>(evs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| e["type"] == kind).collect()
}

async fn task_dir(c: &mut Client, id: &str) -> PathBuf {
    PathBuf::from(c.status(pb::StatusRequest { task_id: id.to_owned() }).await.unwrap().into_inner().task_dir)
}

fn raw(dir: &Path) -> String {
    std::fs::read_to_string(caesar_tests::daemon_files(dir).join("raw.log")).unwrap_or_default()
}

fn summary(t: &pb::TaskView) -> String {
    json(&t.report_json)["summary"].as_str().unwrap_or_default().to_owned()
}

fn text_of(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[tokio::test]
async fn a_steer_reaches_a_stream_json_agent_on_its_held_stdin_once_and_the_task_goes_on() {
    let mut env = Env::new(&[]);
    let claude = script(&env, "claude", CLAUDE);
    use_bin(&env, "[policy]\nallow_recursion = true\n", "claude", &claude);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("claude", "build the client") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let dir = task_dir(&mut c, &id).await;
    assert!(eventually(LONG, || dir.join("ready").exists()).await, "the agent started: {}", raw(&dir));
    let pid: u32 = std::fs::read_to_string(dir.join("ready")).unwrap().trim().parse().unwrap();

    let out = env.caesar(&["steer", &id, "use the v2 API"]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    assert!(text_of(&out).contains("stdin_message"), "the route is said: {}", text_of(&out));

    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}\n{}", t.report_json, raw(&dir));
    assert!(summary(&t).contains("heard: use the v2 API"), "the agent answered the steer: {}", t.report_json);
    let got = std::fs::read_to_string(dir.join("got")).unwrap();
    assert_eq!(got.lines().count(), 1, "one user message: {got}");
    assert!(got.contains("\"type\":\"user\""), "{got}");
    assert_eq!(std::fs::read_to_string(dir.join("rest")).unwrap(), "", "nothing else reached the agent");
    let evs = events(&mut c, &id).await;
    let steers = of_type(&evs, "steer");
    assert_eq!(steers.len(), 1, "one steer event: {evs:?}");
    assert_eq!((steers[0]["mode"].as_str(), steers[0]["delivered"].as_bool()), (Some("stdin_message"), Some(true)));
    assert_eq!(steers[0]["text"], "use the v2 API");
    assert_eq!(of_type(&evs, "started").len(), 1, "the task was not restarted");
    assert!(!alive(pid), "the agent exited once both turns ended");

    // The task has ended: a steer is refused, pointing to continue (exit 2).
    let out = env.caesar(&["steer", &id, "one more thing"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("has ended") && text_of(&out).contains("caesar continue"), "{}", text_of(&out));
}

/// The daemon is SIGKILLed after it acknowledged a steer and before the agent was given it (the
/// task waits its turn behind another); after the restart the agent gets it exactly once.
#[tokio::test]
async fn a_steer_stored_then_the_daemon_sigkilled_is_delivered_exactly_once_after_the_restart() {
    let mut env = Env::new(&[]);
    let claude = script(&env, "claude", CLAUDE);
    let gate = env.file("gate");
    let extra = format!(
        "[policy]\nallow_recursion = true\nmax_parallel = 1\n\n[[agent]]\nid = \"gated\"\nbin = {:?}\nargs = {}\n",
        fake_agent().display().to_string(),
        serde_json::to_string(&["wait-file", &gate.display().to_string(), "report", "success", "gated"]).unwrap()
    );
    use_bin(&env, &extra, "claude", &claude);
    let mut c = env.start_daemon().await;
    let first = c.delegate(env.delegate_request("gated", "hold the slot")).await.unwrap().into_inner();
    assert_eq!(first.status().as_str(), "running");
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("claude", "build the client") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let r = c
        .steer(pb::SteerRequest { task_id: id.clone(), text: "keep the old endpoint".into(), interrupt: false })
        .await
        .unwrap()
        .into_inner();
    assert!(r.queued_for_start && r.route == "stdin_message", "{r:?}");
    env.kill_daemons().await;

    let mut c = env.start_daemon().await;
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    let dir = task_dir(&mut c, &id).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}\n{}", t.report_json, raw(&dir));
    let got = std::fs::read_to_string(dir.join("got")).unwrap();
    assert_eq!(got.lines().count(), 1, "{got}");
    assert!(got.contains("keep the old endpoint"), "{got}");
    assert_eq!(std::fs::read_to_string(dir.join("rest")).unwrap(), "", "delivered once, not twice");
    let evs = events(&mut c, &id).await;
    assert_eq!(of_type(&evs, "steer").len(), 1, "{evs:?}");
    assert!(summary(&t).contains("heard: keep the old endpoint"), "{}", t.report_json);
}

/// A steer to a running task, then the daemon SIGKILLed at once: whether or not the agent had
/// it before the kill, it has it exactly once after the restart, with one event.
#[tokio::test]
async fn a_steer_to_a_running_task_survives_a_daemon_sigkill_once() {
    let mut env = Env::new(&[]);
    let claude = script(&env, "claude", CLAUDE);
    use_bin(&env, "[policy]\nallow_recursion = true\n", "claude", &claude);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("claude", "build the client") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let dir = task_dir(&mut c, &id).await;
    assert!(eventually(LONG, || dir.join("ready").exists()).await, "{}", raw(&dir));
    c.steer(pb::SteerRequest { task_id: id.clone(), text: "add a test".into(), interrupt: false }).await.unwrap();
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}\n{}", t.report_json, raw(&dir));
    assert_eq!(std::fs::read_to_string(dir.join("got")).unwrap().lines().count(), 1);
    assert_eq!(std::fs::read_to_string(dir.join("rest")).unwrap(), "");
    let evs = events(&mut c, &id).await;
    assert_eq!(of_type(&evs, "steer").len(), 1, "{evs:?}");
}

/// An ACP agent hears a steer as the next prompt of the same session, once its turn ends (the
/// session stays open for it); with `--interrupt`, the running turn is cancelled first.
#[tokio::test]
async fn a_steer_reaches_an_acp_agent_as_the_next_prompt_and_with_interrupt_after_a_cancel() {
    for interrupt in [false, true] {
        let mut env = Env::new(&[]);
        let log = env.file("prompts.log");
        let acp = format!(
            "#!/bin/sh\nexec '{}' log '{}' ask 'echo hi' say 'first turn'\n",
            fake_acp().display(),
            log.display()
        );
        let qwen = script(&env, "qwen", &acp);
        use_bin(&env, "[policy]\nallow_recursion = true\n", "qwen", &qwen);
        let p = env.project.path().to_path_buf();
        std::fs::write(p.join("README.md"), "hello\n").unwrap();
        git(&p, &["init", "-q"]);
        git(&p, &["add", "-A"]);
        git(&p, &["commit", "-q", "-m", "base"]);
        let mut c = env.start_daemon().await;
        let req = pb::DelegateRequest {
            mode: "write".into(),
            isolation: "worktree".into(),
            ..env.delegate_request("qwen", "say hello")
        };
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let dir = task_dir(&mut c, &id).await;
        // The first turn waits on a permission question.
        let mut question = None;
        for _ in 0..30 {
            let r = c
                .r#await(pb::AwaitRequest { task_ids: vec![id.clone()], timeout_ms: 2_000, wake_on_attention: true })
                .await
                .unwrap()
                .into_inner();
            if let Some(q) = r.tasks[0].pending_questions.first() {
                question = Some(q.question_id.clone());
                break;
            }
        }
        let qid = question.unwrap_or_else(|| panic!("the agent asked: {}", raw(&dir)));
        let mut args = vec!["steer", &id, "mind the docs"];
        if interrupt {
            args.push("--interrupt");
        }
        let out = env.caesar(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
        if !interrupt {
            // Answered after the steer was handed over: the turn ends, then the steer's prompt.
            c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: qid, answer: "allow".into() })
                .await
                .unwrap();
        }
        let t = await_one(&mut c, &id, LONG).await;
        let prompts = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(prompts.lines().count(), 2, "the brief, then the steer, in one session: {prompts}\n{}", raw(&dir));
        assert_eq!(prompts.lines().nth(1), Some("mind the docs"));
        assert!(summary(&t).contains("heard: mind the docs"), "{}\n{}", t.report_json, raw(&dir));
        let evs = events(&mut c, &id).await;
        let steers = of_type(&evs, "steer");
        assert_eq!(steers.len(), 1, "{evs:?}");
        let mode = if interrupt { "cancel_then_prompt" } else { "next_prompt" };
        assert_eq!(steers[0]["mode"], mode, "{evs:?}");
        assert_eq!(of_type(&evs, "started").len(), 1, "the task was not restarted");
        if interrupt {
            assert!(raw(&dir).contains(r#""stopReason":"cancelled""#), "the turn was cancelled first: {}", raw(&dir));
        }
    }
}

#[tokio::test]
async fn bad_steers_get_clear_errors_and_the_queue_is_bounded() {
    let mut env = Env::new(&[("oneshot", &["say", "hi", "report", "success", "done"])]);
    let gate = env.file("gate");
    let claude = script(&env, "claude", CLAUDE);
    let config = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    let extra = format!(
        "{config}\n[policy]\nallow_recursion = true\nmax_parallel = 1\n\n[[agent]]\nid = \"gated\"\nbin = {:?}\nargs = {}\n",
        fake_agent().display().to_string(),
        serde_json::to_string(&["wait-file", &gate.display().to_string(), "report", "success", "gated"]).unwrap()
    );
    use_bin(&env, &extra, "claude", &claude);
    let mut c = env.start_daemon().await;

    // Unknown id.
    let out = env.caesar(&["steer", "t_000000000000", "hello"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("no task `t_000000000000`"), "{}", text_of(&out));

    // A one-shot agent cannot hear it: refused by name, before anything is stored.
    let gated = c.delegate(env.delegate_request("gated", "hold the slot")).await.unwrap().into_inner().task_id;
    let oneshot = c.delegate(env.delegate_request("oneshot", "x")).await.unwrap().into_inner().task_id;
    let out = env.caesar(&["steer", &oneshot, "hello"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("`oneshot`") && text_of(&out).contains("cannot hear a steer"), "{}", text_of(&out));

    // Too large: the CLI says so before sending, the daemon says so too.
    let big = "x".repeat(100 * 1024);
    let out = env.caesar(&["steer", &gated, &big]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text_of(&out).contains("102400 bytes, past the limit of 65536"), "{}", text_of(&out));
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("claude", "queued") };
    let queued = c.delegate(req).await.unwrap().into_inner().task_id;
    let e = c
        .steer(pb::SteerRequest { task_id: queued.clone(), text: "y".repeat(10 << 20), interrupt: false })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("10485760 bytes"), "{e:?}");

    // 10,000 steers: the first 100 wait, the rest are refused saying why; the daemon stays up.
    let (mut stored, mut refused) = (0, 0);
    for i in 0..10_000 {
        match c.steer(pb::SteerRequest { task_id: queued.clone(), text: format!("steer {i}"), interrupt: false }).await
        {
            Ok(_) => stored += 1,
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted);
                assert!(e.message().contains("100 steers waiting"), "{e:?}");
                refused += 1;
            }
        }
    }
    assert_eq!((stored, refused), (100, 9_900));
    let pid = env.daemon_pid().await;
    assert!(peak_rss_kb(pid) < 200 * 1024, "the daemon stays small");
    c.cancel(pb::CancelRequest { task_id: queued.clone() }).await.unwrap();
    std::fs::write(&gate, "go").unwrap();
    await_one(&mut c, &gated, LONG).await;
}

/// A one-shot agent with the return channel hears a steer in the answer of its next channel
/// call; `--interrupt` is refused for it, by name.
#[tokio::test]
async fn a_one_shot_agent_hears_a_steer_in_the_answer_of_its_next_channel_call() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[(
        "worker",
        &["wait-file", &g, "mcp-progress", "halfway", "mcp-progress", "nearly done", "report", "success", "done"],
    )]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("worker", "work");
    req.channel = true;
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let out = env.caesar(&["steer", &id, "stop early", "--interrupt"]);
    assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
    assert!(text_of(&out).contains("`worker`") && text_of(&out).contains("without --interrupt"), "{}", text_of(&out));
    let r = c
        .steer(pb::SteerRequest { task_id: id.clone(), text: "use tabs, not spaces".into(), interrupt: false })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.route, "channel_reply");
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.report_json);
    let evs = events(&mut c, &id).await;
    let steers = of_type(&evs, "steer");
    assert_eq!(steers.len(), 1, "{evs:?}");
    assert_eq!((steers[0]["mode"].as_str(), steers[0]["delivered"].as_bool()), (Some("channel_reply"), Some(true)));
    let heard: Vec<&str> = of_type(&evs, "message")
        .into_iter()
        .filter_map(|e| e["text"].as_str())
        .filter(|t| t.contains("use tabs, not spaces"))
        .collect();
    assert_eq!(heard.len(), 1, "in the answer of the first call only: {evs:?}");
}

/// A supervisor that does not take steers (one started by an older caesard: it has no record of
/// deliveries) is never handed one, which it would pass to the agent as is; the steer stays
/// stored and, once the run ends, its event says it was not delivered.
#[tokio::test]
async fn a_supervisor_that_takes_no_steers_is_never_handed_one() {
    let mut env = Env::new(&[]);
    let claude = script(&env, "claude", CLAUDE);
    use_bin(&env, "[policy]\nallow_recursion = true\n", "claude", &claude);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("claude", "build the client") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let dir = task_dir(&mut c, &id).await;
    assert!(eventually(LONG, || dir.join("ready").exists()).await, "{}", raw(&dir));
    std::fs::remove_file(caesar_tests::daemon_files(&dir).join("steers.delivered.jsonl")).unwrap();
    c.steer(pb::SteerRequest { task_id: id.clone(), text: "never handed".into(), interrupt: false }).await.unwrap();
    c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled");
    // (The cancel's own interrupt request may have reached it: only the steer must not.)
    let got = std::fs::read_to_string(dir.join("got")).unwrap_or_default();
    assert!(!got.contains("never handed") && !got.contains("caesar_steer"), "the agent was not given the steer: {got}");
    let evs = events(&mut c, &id).await;
    let steers = of_type(&evs, "steer");
    assert_eq!(steers.len(), 1, "{evs:?}");
    assert_eq!(steers[0]["delivered"], false, "{evs:?}");
    assert!(steers[0]["mode"].as_str().unwrap().starts_with("undelivered"), "{evs:?}");
}

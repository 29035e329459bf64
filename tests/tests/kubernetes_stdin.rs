//! A remote task's stdin (issue 16): the daemon's answers reach an agent in
//! a pod over one `pods/exec` stream into `caesard __kube stdin`, which
//! writes them into the pod supervisor's FIFO. A real daemon, its real kube
//! client, an ordinary kubeconfig and the `k8s-sim` simulator whose process
//! kubelet runs the pod (the supervisor, the agent, and the exec'd command
//! in the agent container, sharing the task volume) as local processes.
//! The agents are the repository's fakes: a claude stand-in speaking its
//! stream-json control protocol, and `fake-acp` for an ACP session.

#![allow(clippy::unwrap_used)]

mod common;
mod k8s_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use k8s_common::*;

/// A claude stand-in: reads its prompt line (its objective says `ask <n>`),
/// asks `n` permission questions one after the other, prints each answer it
/// read back as a `fake_got` line (so the test sees, in the mirrored raw.log,
/// exactly what reached the agent and in which order), then ends its turn.
const CLAUDE: &str = r#"#!/usr/bin/env python3
import json, re, sys
prompt = sys.stdin.readline()
found = re.search(r"ask (\d+)", prompt)
for i in range(1, int(found.group(1)) + 1 if found else 2):
    print(json.dumps({"type": "control_request", "request_id": "r-%d" % i, "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "echo %d" % i}}}), flush=True)
    line = sys.stdin.readline()
    if not line:
        break
    print(json.dumps({"type": "system", "subtype": "fake_got", "line": line.strip()}), flush=True)
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done remotely"}), flush=True)
"#;

/// "The image": a directory holding the stand-ins by their CLI's name,
/// first on the simulator's PATH (the pod runs the agent by name).
fn image(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The simulator with `image`'s directory first on its PATH, and a project
/// whose `[bin] <name>` is that stand-in.
fn rig(name: &str, text: &str) -> (Sim, Env, tempfile::TempDir) {
    rig_with(name, text, &[])
}

fn rig_with(name: &str, text: &str, extra: &[&str]) -> (Sim, Env, tempfile::TempDir) {
    let img = tempfile::Builder::new().prefix("img").tempdir_in("/tmp").unwrap();
    let bin = image(img.path(), name, text);
    let path =
        format!("{}:{}:{}", img.path().display(), bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let sim = Sim::start(&[&["--path", path.as_str()][..], extra].concat());
    let env = Env::new(&[]);
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("[policy]\nallow_recursion = true\n[bin]\n{name} = {:?}\n", bin.display().to_string()),
    )
    .unwrap();
    project(&env, &sim, "caesar-agent:1", "");
    (sim, env, img)
}

async fn write_task(c: &mut Client, env: &Env, agent: &str, objective: &str) -> String {
    let mut req = env.delegate_request(agent, objective);
    req.mode = "write".into();
    c.delegate(req).await.unwrap().into_inner().task_id
}

async fn answer(c: &mut Client, id: &str, q: &pb::PendingQuestion, with: &str) {
    c.answer(pb::AnswerRequest { task_id: id.to_owned(), question_id: q.question_id.clone(), answer: with.into() })
        .await
        .unwrap();
}

/// What the claude stand-in read on its stdin, in order (from the mirrored raw.log).
fn received(env: &Env, id: &str) -> Vec<serde_json::Value> {
    let raw =
        std::fs::read_to_string(caesar_tests::daemon_files(task_dir(env, id)).join("raw.log")).unwrap_or_default();
    raw.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["subtype"] == "fake_got")
        .map(|v| json(v["line"].as_str().unwrap_or("null")))
        .collect()
}

/// The request id each control response answered, and whether it allowed.
fn answered(got: &[serde_json::Value]) -> Vec<(String, String)> {
    got.iter()
        .map(|g| {
            let r = &g["response"];
            let id = r["request_id"].as_str().unwrap_or("?").to_owned();
            let behavior = r["response"]["behavior"].as_str().unwrap_or("?").to_owned();
            (id, behavior)
        })
        .collect()
}

#[tokio::test]
async fn claude_write_in_a_pod_asks_and_the_answer_reaches_it() {
    let (sim, mut env, _img) = rig("claude", CLAUDE);
    let mut c = env.start_daemon().await;
    let id = write_task(&mut c, &env, "claude", "ask 1").await;
    let q = question(&mut c, &id).await;
    assert!(q.input_json.contains("echo 1"), "{q:?}");
    answer(&mut c, &id, &q, "allow").await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    assert!(t.report_json.contains("done remotely"), "{}", t.report_json);
    let got = received(&env, &id);
    assert_eq!(answered(&got), [("r-1".to_owned(), "allow".to_owned())], "{got:?}");
    // The exec stream ended with the task.
    assert!(eventually(Duration::from_secs(10), || sim.stats()["open_execs"] == 0).await, "{}", sim.stats());
}

#[tokio::test]
async fn dropped_exec_streams_lose_and_duplicate_no_answer() {
    let (sim, mut env, _img) = rig("claude", CLAUDE);
    let mut c = env.start_daemon().await;
    let id = write_task(&mut c, &env, "claude", "ask 3").await;
    // 1: the stream is cut right after the line reached the pod, before its
    // ack came back: the pump resends it, and the pod does not write it twice.
    let q = question(&mut c, &id).await;
    assert_eq!(sim.http("POST", "/sim/drop-exec-after-stdin", "").0, 200);
    answer(&mut c, &id, &q, "allow").await;
    assert!(eventually(LONG, || sim.stats()["exec_cut_armed"] == false).await, "the cut happened");
    // The pump reopened its stream.
    let reopened = || {
        let s = sim.stats();
        s["execs_opened"].as_u64() >= Some(2) && s["open_execs"] == 1
    };
    assert!(eventually(LONG, reopened).await, "{}", sim.stats());
    // 2: the stream is cut before the answer: the reopened stream carries it.
    let q = question(&mut c, &id).await;
    assert!(q.input_json.contains("echo 2"), "{q:?}");
    assert_eq!(sim.http("POST", "/sim/drop-execs", "").0, 200);
    answer(&mut c, &id, &q, "deny: not now").await;
    // 3: the daemon is killed with the question pending; the restarted one
    // reopens the stream for the re-attached task.
    let q = question(&mut c, &id).await;
    assert!(q.input_json.contains("echo 3"), "{q:?}");
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    answer(&mut c, &id, &q, "allow").await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let got = received(&env, &id);
    assert_eq!(
        answered(&got),
        [
            ("r-1".to_owned(), "allow".to_owned()),
            ("r-2".to_owned(), "deny".to_owned()),
            ("r-3".to_owned(), "allow".to_owned())
        ],
        "each answer once, in order: {got:?}"
    );
    // The first stream, and one again after each cut and after the restart.
    assert!(sim.stats()["execs_opened"].as_u64().unwrap() >= 4, "{}", sim.stats());
}

/// An ACP agent (`fake-acp`, as qwen) runs as a session in the pod: its
/// permission request is a pending question, the answer reaches it.
fn acp_agent(steps: &str) -> String {
    format!("#!/bin/sh\nexec fake-acp {steps}\n")
}

#[tokio::test]
async fn an_acp_session_in_a_pod_asks_and_is_answered() {
    let (sim, mut env, _img) = rig("qwen", &acp_agent("ask 'touch acp.txt' say 'Allowed and done.'"));
    let mut c = env.start_daemon().await;
    let id = write_task(&mut c, &env, "qwen", "do it").await;
    let q = question(&mut c, &id).await;
    assert_eq!(q.kind().as_str(), "permission", "{q:?}");
    assert!(q.input_json.contains("touch acp.txt"), "{q:?}");
    answer(&mut c, &id, &q, "allow_once").await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let raw =
        std::fs::read_to_string(caesar_tests::daemon_files(task_dir(&env, &id)).join("raw.log")).unwrap_or_default();
    assert!(raw.contains("\"status\":\"completed\""), "the agent read the allow: {raw}");
    assert!(raw.contains("Allowed and done."), "{raw}");
    // A session, not its stream command: the pod's supervisor ran the opening.
    let accepted = sim.get_json("/sim/accepted");
    assert!(accepted[0].to_string().contains("--stdin-session"), "{accepted}");
    assert!(!t.report_json.contains("stream command"), "{}", t.report_json);
}

#[tokio::test]
async fn a_remote_session_is_cancelled_through_its_interrupt_and_its_pod_goes() {
    let (sim, mut env, _img) = rig("qwen", &acp_agent("ask 'sleep 1000' say 'Not after a cancel.'"));
    let mut c = env.start_daemon().await;
    let id = write_task(&mut c, &env, "qwen", "do it").await;
    let _ = question(&mut c, &id).await;
    c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled", "{}", t.error);
    assert!(sim.pods_of(&id).is_empty(), "the pod is gone when the cancel is done");
    // The session's cancel went down the agent's stdin in the pod, and the agent answered it:
    // it ends its turn with `stopReason: "cancelled"` only once it read `session/cancel`
    // (`fake-acp`), and the mirrored raw.log holds that response to the prompt.
    let queued = std::fs::read_to_string(task_dir(&env, &id).join("kube-stdin.jsonl")).unwrap_or_default();
    assert!(queued.contains("session/cancel"), "{queued}");
    let raw =
        std::fs::read_to_string(caesar_tests::daemon_files(task_dir(&env, &id)).join("raw.log")).unwrap_or_default();
    let responses: Vec<serde_json::Value> = raw
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["result"].get("stopReason").is_some())
        .collect();
    assert_eq!(responses.len(), 1, "one answer to the prompt: {raw}");
    assert_eq!(responses[0]["result"]["stopReason"], "cancelled", "the agent in the pod read the cancel: {raw}");
    // The tool it was asking for did not run: its permission was never granted.
    assert!(raw.contains(r#""status":"failed""#) && !raw.contains(r#""status":"completed""#), "{raw}");
    assert!(!raw.contains("Not after a cancel."), "the turn ended at the cancel: {raw}");
    assert!(eventually(Duration::from_secs(10), || sim.stats()["processes"] == 0).await, "no pod process left");
}

#[tokio::test]
async fn a_task_that_asks_on_stdin_is_refused_at_delegate_without_create_on_pods_exec() {
    let (sim, mut env, _img) = rig_with("claude", CLAUDE, &["--forbid", "create:pods/exec"]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("claude", "ask 1");
    req.mode = "write".into();
    let e = c.delegate(req).await.unwrap_err();
    assert!(e.message().contains("pods/exec") && e.message().contains("stdin"), "{}", e.message());
    assert!(e.message().contains("rbac.yaml"), "says how to fix it: {}", e.message());
    assert_eq!(sim.stats()["jobs"], 0, "nothing was created");
    // claude read-only asks nothing on stdin: it runs there, and its report comes back.
    let mut req = env.delegate_request("claude", "ask 0");
    req.mode = "read_only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
}

/// Issue 31: a steer to claude in a pod goes the production path, the stdin pump into the pod
/// supervisor's FIFO; the supervisor writes it on the agent's held stdin as a user message, and
/// its record of the delivery comes back with the mirror: one `steer` event, delivered.
#[tokio::test]
async fn a_steer_reaches_claude_in_a_pod_through_the_stdin_pump_once() {
    let (sim, mut env, _img) = rig("claude", CLAUDE);
    let mut c = env.start_daemon().await;
    let id = write_task(&mut c, &env, "claude", "ask 1").await;
    // Its question says the agent runs and reads its stdin.
    question(&mut c, &id).await;
    let out = env.caesar(&["steer", &id, "use the v2 API"]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("stdin_message"), "{said}");
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let got = received(&env, &id);
    assert_eq!(got.len(), 1, "the steer, and nothing else, reached the agent: {got:?}");
    assert_eq!(got[0]["type"], "user", "{got:?}");
    assert!(got[0].to_string().contains("use the v2 API"), "{got:?}");
    let logs = c
        .logs(pb::LogsRequest { task_id: id.clone(), limit: 10_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let steers: Vec<serde_json::Value> =
        logs.events_json.iter().map(|l| json(l)).filter(|e| e["type"] == "steer").collect();
    assert_eq!(steers.len(), 1, "one steer event: {steers:?}");
    assert_eq!((steers[0]["mode"].as_str(), steers[0]["delivered"].as_bool()), (Some("stdin_message"), Some(true)));
    assert!(eventually(Duration::from_secs(10), || sim.stats()["open_execs"] == 0).await, "{}", sim.stats());
}

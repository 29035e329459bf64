//! A remote task's return channel (issue 16): the agent's `caesar-mcp
//! --channel` in a pod reaches the daemon over one `pods/exec` stream into
//! `caesard __kube channel`, the pod's relay. A real daemon, its real kube
//! client, an ordinary kubeconfig and the `k8s-sim` simulator, whose process
//! kubelet runs the pod and the exec'd relay as local processes. The agent
//! is the repository's fake, an MCP client of the real `caesar-mcp
//! --channel`, started as the pod's task.json says.

#![allow(clippy::unwrap_used)]

mod common;
mod k8s_common;

use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use k8s_common::*;

const REPORT: &str =
    r#"{"protocol":"caesar.report/v1","status":"success","summary":"reported over the remote channel"}"#;

async fn channel_task(c: &mut Client, env: &Env, agent: &str) -> String {
    let mut req = env.delegate_request(agent, "talk to me");
    req.channel = true;
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(!d.warnings.contains_key("channel_warning"), "{:?}", d.warnings);
    d.task_id
}

/// The task's next pending question (waiting on the daemon's attention wake).
async fn question(c: &mut Client, id: &str) -> pb::PendingQuestion {
    for _ in 0..45 {
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.to_owned()], timeout_ms: 2_000, wake_on_attention: true })
            .await
            .unwrap()
            .into_inner();
        if let Some(q) = r.tasks[0].pending_questions.first() {
            return q.clone();
        }
        assert!(r.tasks[0].report_json.is_empty(), "ended before asking: {:?}", r.tasks[0]);
    }
    panic!("no question from {id}");
}

fn raw_log(env: &Env, id: &str) -> String {
    std::fs::read_to_string(caesar_tests::daemon_files(task_dir(env, id)).join("raw.log")).unwrap_or_default()
}

#[tokio::test]
async fn a_remote_agent_reports_progress_asks_and_submits_over_its_channel() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    env.set_agents(&[(
        "talker",
        &["mcp-progress", "half way", "mcp-ask", "Which colour?", "mcp-report", REPORT, "say", "talked"],
    )]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = channel_task(&mut c, &env, "talker").await;

    let q = question(&mut c, &id).await;
    assert_eq!(q.kind, "question", "{q:?}");
    assert_eq!(q.question, "Which colour?");
    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id.clone(), answer: "blue".into() })
        .await
        .unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status, "succeeded", "{} {}", t.error, t.report_json);
    // The report is the one handed in over the channel, not one synthesized from the output.
    assert_eq!(json(&t.report_json)["summary"], "reported over the remote channel", "{}", t.report_json);

    // What the agent's channel answered it, as the agent printed it in the pod.
    let raw = raw_log(&env, &id);
    assert!(raw.contains("report_progress: progress recorded"), "{raw}");
    assert!(raw.contains("ask_orchestrator: Answer: blue"), "{raw}");
    assert!(raw.contains("submit_report: report accepted"), "{raw}");
    let logs = all_logs(&mut c, &id).await;
    let events: Vec<serde_json::Value> = logs.events_json.iter().map(|e| json(e)).collect();
    assert!(
        events.iter().any(|e| e["type"] == "progress" && e["message"] == "half way" && e["pct"] == 50.0),
        "the progress event: {events:?}"
    );

    // The agent was told the image's caesar-mcp and the pod's socket, never this machine's.
    let accepted = sim.get_json("/sim/accepted");
    let job = accepted[0].to_string();
    assert!(!job.contains(&env.paths.socket.display().to_string()), "{job}");
    let container = &accepted[0]["spec"]["template"]["spec"]["containers"][0];
    let socket = container["env"].as_array().unwrap().iter().find(|e| e["name"] == "CAESAR_SOCKET").unwrap();
    assert_eq!(socket["value"], "/ws/.channel/caesard.sock", "{container}");
    let task_json = json(&std::fs::read_to_string(task_dir(&env, &id).join("task.json")).unwrap());
    assert_eq!(task_json["channel"]["command"], "caesar-mcp", "{task_json}");
    validate_against_official_schemas(&sim, &accepted[0]);
    // The relay's stream ended with the task, and nothing of the pod is left.
    assert!(eventually(Duration::from_secs(10), || sim.stats()["open_execs"] == 0).await, "{}", sim.stats());
    assert!(eventually(Duration::from_secs(10), || sim.stats()["processes"] == 0).await, "{}", sim.stats());
}

#[tokio::test]
async fn a_question_outlives_a_cut_stream_and_a_daemon_kill_and_is_answered_once() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    env.set_agents(&[("talker", &["mcp-ask", "Proceed?", "mcp-report", REPORT])]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = channel_task(&mut c, &env, "talker").await;
    let q = question(&mut c, &id).await;

    // The relay's stream is cut while the agent waits: the relay in the pod
    // ends, the agent's channel reconnects to the next one and asks again
    // with the same id.
    let opened = sim.stats()["execs_opened"].as_u64().unwrap();
    assert_eq!(sim.http("POST", "/sim/drop-execs", "").0, 200);
    let reopened = || {
        let s = sim.stats();
        s["execs_opened"].as_u64() > Some(opened) && s["open_execs"] == 1
    };
    assert!(eventually(LONG, reopened).await, "{}", sim.stats());
    // And the daemon is killed with the question pending.
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let again = question(&mut c, &id).await;
    assert_eq!(again.question_id, q.question_id, "still the one question");
    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id.clone(), answer: "yes".into() })
        .await
        .unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status, "succeeded", "{} {}", t.error, t.report_json);
    assert_eq!(json(&t.report_json)["summary"], "reported over the remote channel");
    let raw = raw_log(&env, &id);
    assert_eq!(raw.matches("ask_orchestrator: Answer: yes").count(), 1, "{raw}");
    let status = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(status.pending_questions.is_empty(), "{status:?}");
    // The first stream, one after the cut, one after the restart.
    assert!(sim.stats()["execs_opened"].as_u64().unwrap() >= opened + 2, "{}", sim.stats());
}

#[tokio::test]
async fn a_channel_task_is_refused_at_delegate_without_create_on_pods_exec() {
    let sim = Sim::start(&["--forbid", "create:pods/exec"]);
    let mut env = Env::new(&[]);
    env.set_agents(&[("talker", &["mcp-report", REPORT]), ("plain", &["report", "success", "no channel"])]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("talker", "talk to me");
    req.channel = true;
    let e = c.delegate(req).await.unwrap_err();
    assert!(e.message().contains("pods/exec") && e.message().contains("channel"), "{}", e.message());
    assert!(e.message().contains("rbac.yaml"), "says how to fix it: {}", e.message());
    assert_eq!(sim.stats()["jobs"], 0, "nothing was created");
    // Without the channel a task runs there.
    let id = c.delegate(env.delegate_request("plain", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status, "succeeded", "{} {}", t.error, t.report_json);
}

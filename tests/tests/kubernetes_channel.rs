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
    assert_eq!(q.kind().as_str(), "question", "{q:?}");
    assert_eq!(q.question, "Which colour?");
    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id.clone(), answer: "blue".into() })
        .await
        .unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
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
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
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
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
}

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn stamps(path: &std::path::Path) -> Vec<u128> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn summary(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    println!("{what}: n={} median={:.1} ms p95={:.1} ms max={:.1} ms", ms.len(), at(0.5), at(0.95), at(1.0));
}

/// The figures in BENCHMARKS.md ("The return channel in a pod"): one
/// channel call's round trip (`report_progress`, from the agent's MCP call
/// to its answer) and a question's two legs (the agent asks → the
/// orchestrator sees it; the orchestrator answers → the agent has it), in a
/// pod on the simulator and, for comparison, on this machine. Not a timed
/// test: it prints what it measures. `cargo nextest run -p caesar-tests
/// --test kubernetes_channel --run-ignored only -E 'test(figures)' --no-capture`
#[tokio::test]
#[ignore = "measurement, run by hand for BENCHMARKS.md"]
async fn figures() {
    const CALLS: usize = 30;
    const ASKS: usize = 10;
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let calls = env.file("calls").display().to_string();
    let asks = env.file("asks").display().to_string();
    let mut asker: Vec<String> = Vec::new();
    for i in 0..ASKS {
        asker.extend(["stamp".into(), asks.clone(), "mcp-ask".into(), format!("question {i}")]);
        asker.extend(["stamp".into(), asks.clone()]);
    }
    asker.extend(["mcp-report".into(), REPORT.into()]);
    let mut progress: Vec<String> = Vec::new();
    for i in 0..=CALLS {
        progress.extend(["mcp-progress".into(), format!("call {i}"), "stamp".into(), calls.clone()]);
    }
    progress.extend(["mcp-report".into(), REPORT.into()]);
    let progress: Vec<&str> = progress.iter().map(String::as_str).collect();
    let asker: Vec<&str> = asker.iter().map(String::as_str).collect();
    env.set_agents(&[("caller", &progress), ("asker", &asker)]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    for runner in ["kubernetes", "local"] {
        let _ = std::fs::remove_file(&calls);
        let _ = std::fs::remove_file(&asks);
        let mut req = env.delegate_request("caller", "call");
        req.channel = true;
        req.runner = runner.into();
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
        // The first call also started the channel: left out.
        let s = stamps(std::path::Path::new(&calls));
        assert_eq!(s.len(), CALLS + 1, "{s:?}");
        summary(
            &format!("{runner}: report_progress round trip"),
            s.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e6).collect(),
        );

        let mut req = env.delegate_request("asker", "ask");
        req.channel = true;
        req.runner = runner.into();
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let (mut seen, mut answered) = (Vec::new(), Vec::new());
        for i in 0..ASKS {
            let q = question(&mut c, &id).await;
            seen.push(now_ns());
            assert_eq!(q.question, format!("question {i}"));
            answered.push(now_ns());
            c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id, answer: "go".into() })
                .await
                .unwrap();
        }
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
        let s = stamps(std::path::Path::new(&asks));
        assert_eq!(s.len(), 2 * ASKS, "{s:?}");
        // The first question also started the channel: left out.
        summary(
            &format!("{runner}: asked -> visible to the orchestrator"),
            (1..ASKS).map(|i| (seen[i] - s[2 * i]) as f64 / 1e6).collect(),
        );
        summary(
            &format!("{runner}: answered -> the agent has it"),
            (0..ASKS).map(|i| (s[2 * i + 1] - answered[i]) as f64 / 1e6).collect(),
        );
    }
}

//! The return channel on the daemon's side, spoken over gRPC from inside
//! the task's process tree (the agent relays the test's connection, as
//! `caesar-mcp --channel` would make it): progress, questions (answered,
//! timed out, surviving a daemon SIGKILL), exactly-once answers, report
//! validation, and the channel's scope: its own task, from its own tree,
//! with no secret anywhere (issue 19).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(30);

/// Starts a channel task whose agent relays a socket to the daemon, then
/// waits on `gate`. Returns the task's id, its channel scope, and a client
/// whose calls reach the daemon from inside the task's tree.
async fn channel_task(env: &Env, c: &mut Client, gate: &str) -> (String, pb::ChannelRequest, Client) {
    let relay = env.file("relay.sock").display().to_string();
    env.set_agents(&[("talker", &["relay", &relay, "env", "CAESAR_CHANNEL_SECRET", "wait-file", gate])]);
    let mut req = env.delegate_request("talker", "talk to me");
    req.channel = true;
    let d = c.delegate(req).await.unwrap().into_inner();
    let raw = caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(&d.task_id)).join("raw.log");
    assert!(eventually(LONG, || std::fs::read_to_string(&raw).is_ok_and(|s| s.contains('\n'))).await);
    // No channel secret in a local agent's environment (issue 19).
    let line = std::fs::read_to_string(&raw).unwrap();
    assert_eq!(line.trim(), "CAESAR_CHANNEL_SECRET=", "{line}");
    (d.task_id.clone(), pb::ChannelRequest { task_id: d.task_id }, inside(env).await)
}

/// A client connected through the task's relay.
async fn inside(env: &Env) -> Client {
    caesar_proto::client::connect_at(&env.file("relay.sock")).await.unwrap().0
}

#[tokio::test]
async fn progress_a_question_answered_once_and_a_channel_report() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    let mut c = env.start_daemon().await;
    let (id, ch, mut t) = channel_task(&env, &mut c, &gate).await;

    let task = t.get_task(ch.clone()).await.unwrap().into_inner();
    assert_eq!(json(&task.task_json)["id"], id.as_str());
    let p = t
        .report_progress(pb::ReportProgressRequest {
            channel: Some(ch.clone()),
            message: "half way".into(),
            pct: Some(50.0),
        })
        .await
        .unwrap()
        .into_inner();
    let logs =
        c.logs(pb::LogsRequest { task_id: id.clone(), limit: 100, ..Default::default() }).await.unwrap().into_inner();
    let progress = logs.events_json.iter().map(|e| json(e)).find(|e| e["type"] == "progress").unwrap();
    assert_eq!((progress["seq"].as_u64(), progress["pct"].as_f64()), (Some(p.seq), Some(50.0)));

    // Ask in the background; the question shows in status and wakes an awaiter.
    let mut asker = t.clone();
    let ask_ch = ch.clone();
    let ask = tokio::spawn(async move {
        asker
            .ask_orchestrator(pb::AskOrchestratorRequest {
                channel: Some(ask_ch),
                question: "tabs or spaces?".into(),
                options: vec!["tabs".into(), "spaces".into()],
                timeout_ms: 20_000,
                question_id: String::new(),
            })
            .await
    });
    let started = Instant::now();
    let r = c
        .r#await(pb::AwaitRequest { task_ids: vec![id.clone()], timeout_ms: 20_000, wake_on_attention: true })
        .await
        .unwrap()
        .into_inner();
    assert!(r.woke_early && started.elapsed() < Duration::from_secs(10), "a question wakes the awaiter early");
    let q = &r.tasks[0].pending_questions[0];
    assert_eq!((q.question.as_str(), q.options.len()), ("tabs or spaces?", 2));

    let e = c
        .answer(pb::AnswerRequest { task_id: id.clone(), question_id: "q_nope".into(), answer: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains(&q.question_id), "the error lists what is pending: {}", e.message());
    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id.clone(), answer: "spaces".into() })
        .await
        .unwrap();
    let e = c
        .answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id.clone(), answer: "tabs".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "a second answer is refused");
    let got = ask.await.unwrap().unwrap().into_inner();
    assert!(got.answered);
    assert_eq!(got.answer, "spaces");
    let s = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(s.pending_questions.is_empty());

    // An invalid report is refused naming the field; a valid one wins tier 1.
    let e = t
        .submit_report(pb::SubmitReportRequest {
            channel: Some(ch.clone()),
            report_json: r#"{"protocol":"caesar.report/v1","status":"done","summary":"x"}"#.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("status") || e.message().contains("done"), "{}", e.message());
    t.submit_report(pb::SubmitReportRequest {
        channel: Some(ch.clone()),
        report_json: r#"{"protocol":"caesar.report/v1","status":"partial","summary":"over the channel"}"#.into(),
    })
    .await
    .unwrap();
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!((t.report_source.as_str(), t.report_status.as_str()), ("channel", "partial"));
    let types: Vec<String> = c
        .logs(pb::LogsRequest { task_id: id, limit: 100, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .events_json
        .iter()
        .map(|e| json(e)["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(types.contains(&"question".to_owned()) && types.contains(&"answer".to_owned()), "{types:?}");
}

#[tokio::test]
async fn an_unanswered_question_times_out_normally_and_the_channel_is_scoped() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    let mut c = env.start_daemon().await;
    let (id, ch, mut t) = channel_task(&env, &mut c, &gate).await;
    let r = t
        .ask_orchestrator(pb::AskOrchestratorRequest {
            channel: Some(ch.clone()),
            question: "anyone?".into(),
            options: vec![],
            timeout_ms: 300,
            question_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.answered, "a timeout is an answer, not an error");
    assert!(r.answer.contains("best judgment"));

    // From inside the task, another task's name is refused ...
    let other = pb::ChannelRequest { task_id: "t_000000000000".into() };
    let e = t.get_task(other).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("speaks only for its own task"), "{}", e.message());
    // ... and from outside every task, even the task's own name: nothing
    // but the task's process tree speaks for it.
    let e = c.get_task(ch.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("outside every task's process tree"), "{}", e.message());
    // Nor is there a secret in the store for an agent to read (schema 8).
    let db = rusqlite::Connection::open(env.paths.state_dir.join("caesar.db")).unwrap();
    let mut columns = db.prepare("SELECT name FROM pragma_table_info('tasks')").unwrap();
    let columns: Vec<String> = columns.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    assert!(columns.contains(&"objective".to_owned()) && !columns.iter().any(|c| c.contains("secret")), "{columns:?}");
    std::fs::write(&gate, "go").unwrap();
    await_one(&mut c, &id, LONG).await;
}

#[tokio::test]
async fn a_pending_question_survives_a_daemon_sigkill_and_is_answered_after() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    let mut c = env.start_daemon().await;
    let (id, ch, t) = channel_task(&env, &mut c, &gate).await;
    let mut asker = t.clone();
    let ask_ch = ch.clone();
    let first_ask = tokio::spawn(async move {
        asker
            .ask_orchestrator(pb::AskOrchestratorRequest {
                channel: Some(ask_ch),
                question: "keep going?".into(),
                options: vec![],
                timeout_ms: 60_000,
                question_id: String::new(),
            })
            .await
    });
    let asked_by = Instant::now() + LONG;
    let question_id = loop {
        let s = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
        if let Some(q) = s.pending_questions.first() {
            break q.question_id.clone();
        }
        assert!(Instant::now() < asked_by, "the question shows in status");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    env.kill_daemons().await;
    assert!(first_ask.await.unwrap().is_err(), "the channel's call broke with the daemon");

    let mut c = env.start_daemon().await;
    let s = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(s.pending_questions[0].question_id, question_id, "the question survived");
    // The channel reconnects and keeps waiting on the same question: with
    // no answer yet, its wait times out on that question, and asks no other.
    let mut asker = inside(&env).await;
    let resume = |timeout_ms| pb::AskOrchestratorRequest {
        channel: Some(ch.clone()),
        question: String::new(),
        options: vec![],
        timeout_ms,
        question_id: question_id.clone(),
    };
    let waited = asker.ask_orchestrator(resume(300)).await.unwrap().into_inner();
    assert_eq!((waited.question_id.as_str(), waited.answered), (question_id.as_str(), false), "{waited:?}");
    let s = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    let pending: Vec<&str> = s.pending_questions.iter().map(|q| q.question_id.as_str()).collect();
    assert_eq!(pending, [question_id.as_str()], "still the one question");
    // Its next wait ends with the answer, given while it waits or before.
    let again = tokio::spawn({
        let mut asker = asker.clone();
        let ask = resume(20_000);
        async move { asker.ask_orchestrator(ask).await }
    });
    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: question_id.clone(), answer: "yes".into() })
        .await
        .unwrap();
    let got = again.await.unwrap().unwrap().into_inner();
    assert_eq!((got.question_id.as_str(), got.answered, got.answer.as_str()), (question_id.as_str(), true, "yes"));
    std::fs::write(&gate, "go").unwrap();
    assert_eq!(await_one(&mut c, &id, LONG).await.status, "succeeded");
}

#[tokio::test]
async fn an_agent_speaks_mcp_to_caesar_mcp_channel_end_to_end() {
    let mut env = Env::new(&[]);
    env.set_agents(&[(
        "mcp-agent",
        &[
            "mcp-progress",
            "read the code",
            "mcp-ask",
            "tabs or spaces?",
            "mcp-report",
            r#"{"protocol":"caesar.report/v1","status":"finished","summary":"x"}"#,
            "mcp-report",
            r#"{"protocol":"caesar.report/v1","status":"success","summary":"used the answer"}"#,
        ],
    )]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("mcp-agent", "talk over MCP");
    req.channel = true;
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(!d.warnings.contains_key("channel_warning"), "{:?}", d.warnings);
    let task_json = json(&std::fs::read_to_string(std::path::Path::new(&d.task_dir).join("task.json")).unwrap());
    assert_eq!(task_json["channel"]["args"], serde_json::json!(["--channel"]));

    let r = c
        .r#await(pb::AwaitRequest { task_ids: vec![d.task_id.clone()], timeout_ms: 30_000, wake_on_attention: true })
        .await
        .unwrap()
        .into_inner();
    assert!(r.woke_early);
    let q = r.tasks[0].pending_questions[0].clone();
    assert_eq!(q.question, "tabs or spaces?");
    c.answer(pb::AnswerRequest { task_id: d.task_id.clone(), question_id: q.question_id, answer: "spaces".into() })
        .await
        .unwrap();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status.as_str(), t.report_source.as_str()), ("succeeded", "channel"));
    assert_eq!(json(&t.report_json)["summary"], "used the answer");
    let logs =
        c.logs(pb::LogsRequest { task_id: d.task_id, limit: 100, ..Default::default() }).await.unwrap().into_inner();
    let events: Vec<serde_json::Value> = logs.events_json.iter().map(|e| json(e)).collect();
    assert!(events.iter().any(|e| e["type"] == "progress" && e["message"] == "read the code"));
    let texts: Vec<&str> =
        events.iter().filter(|e| e["type"] == "message").filter_map(|e| e["text"].as_str()).collect();
    assert!(texts.contains(&"ask_orchestrator: Answer: spaces"), "the answer reached the agent: {texts:?}");
    assert!(
        texts.iter().any(|t| t.starts_with("submit_report: ERROR report refused") && t.contains("finished")),
        "an invalid report is refused naming what is wrong: {texts:?}"
    );
    assert!(texts.contains(&"submit_report: report accepted"));
}

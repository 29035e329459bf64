//! `[[agent]] protocol = "acp"` (issue 15, item 6): a configured agent that speaks ACP runs
//! through caesar's ACP session driver with no adapter code. The agent is a real process
//! (`tests/agents/acp_agent.py`, ACP over stdio) started by a real daemon: it gets the return
//! channel through session/new's `mcpServers`, its permission request becomes a pending
//! question that says what it is (tool, whole input, offered options), an answer picks one of
//! the offered options by id (an option not offered is refused naming the valid ones), and the
//! agent's report ends the task. `caesar agents describe` says which protocol it speaks and why.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use caesar_proto::pb;
use common::*;
use tonic::Code;

fn agent_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/acp_agent.py")
}

/// A project (a git repository) declaring the ACP agent `tiny`, and a daemon.
async fn rig() -> (Env, caesar_proto::client::Client, PathBuf) {
    let mut env = Env::new(&[]);
    let project = env.project.path().to_path_buf();
    let log = env.file("acp-agent.log");
    std::fs::write(
        project.join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"tiny\"\nbin = {:?}\nprotocol = \"acp\"\nenv = {{ ACP_AGENT_LOG = {:?}, ACP_AGENT_COMMAND = \"echo ran > acp.txt && printf '%s' \\\"$CAESAR_TASK_ID\\\" > id.txt\" }}\n",
            agent_script().display().to_string(),
            log.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(project.join(".gitignore"), ".caesar/\n").unwrap();
    std::fs::write(project.join("README.md"), "hello\n").unwrap();
    commit_base(&project);
    let c = env.start_daemon().await;
    (env, c, log)
}

async fn delegate(env: &Env, c: &mut caesar_proto::client::Client) -> String {
    let mut req = env.delegate_request("tiny", "Run the command.");
    req.mode = "write".into();
    req.isolation = "worktree".into();
    req.channel = true;
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(!d.warnings.contains_key("channel_warning"), "no channel warning: {:?}", d.warnings);
    d.task_id
}

async fn pending(c: &mut caesar_proto::client::Client, id: &str) -> pb::PendingQuestion {
    for _ in 0..10 {
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.to_owned()], timeout_ms: 10_000, wake_on_attention: true })
            .await
            .unwrap()
            .into_inner();
        if let Some(q) = r.tasks[0].pending_questions.first() {
            return q.clone();
        }
        assert!(r.tasks[0].report_json.is_empty(), "ended without asking: {:?}", r.tasks[0]);
    }
    panic!("no question from {id}");
}

async fn finish(c: &mut caesar_proto::client::Client, id: &str) -> pb::TaskView {
    for _ in 0..10 {
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.to_owned()], timeout_ms: 10_000, wake_on_attention: false })
            .await
            .unwrap()
            .into_inner();
        if !r.tasks[0].report_json.is_empty() {
            return r.tasks[0].clone();
        }
    }
    panic!("task {id} did not end");
}

fn log_entries(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(json).collect()
}

#[tokio::test]
async fn an_acp_agent_from_config_is_asked_answered_by_option_and_reports() {
    let (env, mut c, log) = rig().await;
    let described = c
        .describe_agent(pb::DescribeAgentRequest { agent: "tiny".into(), workspace: env.workspace() })
        .await
        .unwrap()
        .into_inner()
        .agent
        .unwrap();
    assert_eq!(described.protocol, "acp");
    assert!(described.protocol_reason.contains("protocol = \"acp\""), "{}", described.protocol_reason);

    let id = delegate(&env, &mut c).await;
    let q = pending(&mut c, &id).await;
    assert_eq!(q.kind().as_str(), "permission", "{q:?}");
    assert_eq!(q.tool_kind, "execute", "{q:?}");
    // The whole command, not a summary of it.
    assert_eq!(json(&q.input_json)["command"], "echo ran > acp.txt && printf '%s' \"$CAESAR_TASK_ID\" > id.txt");
    let offered: Vec<(&str, &str, &str)> =
        q.option_details.iter().map(|o| (o.id.as_str(), o.label.as_str(), o.kind.as_str())).collect();
    assert_eq!(
        offered,
        [
            ("yes-once", "Run it", "allow_once"),
            ("yes-always", "Always run", "allow_always"),
            ("no", "Do not run", "reject_once")
        ]
    );
    // The return channel reached the agent through session/new.
    let entries = log_entries(&log);
    let servers = &entries.iter().find(|e| e.get("session/new").is_some()).unwrap()["session/new"]["mcpServers"];
    assert_eq!(servers[0]["name"], "caesar", "{servers}");
    assert!(servers[0]["args"].to_string().contains("--channel"), "{servers}");

    // An option the agent did not offer is refused, naming the valid ones; nothing is stored.
    let e = c
        .answer(pb::AnswerRequest {
            task_id: id.clone(),
            question_id: q.question_id.clone(),
            answer: "reject_always".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("`yes-once` (allow_once)") && e.message().contains("`no` (reject_once)"),
        "{}",
        e.message()
    );
    c.answer(pb::AnswerRequest {
        task_id: id.clone(),
        question_id: q.question_id.clone(),
        answer: "yes-always".into(),
    })
    .await
    .unwrap();

    let t = finish(&mut c, &id).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert_eq!(json(&t.report_json)["status"], "success", "{}", t.report_json);
    assert!(t.report_json.contains("acp.txt"), "git saw the command's file: {}", t.report_json);
    let answered = log_entries(&log).into_iter().find_map(|e| e.get("permission").cloned()).unwrap();
    assert_eq!(answered["outcome"]["optionId"], "yes-always", "{answered}");
}

#[tokio::test]
async fn an_acp_agent_from_config_denied_does_not_run_its_command() {
    let (env, mut c, log) = rig().await;
    let id = delegate(&env, &mut c).await;
    let q = pending(&mut c, &id).await;
    c.answer(pb::AnswerRequest {
        task_id: id.clone(),
        question_id: q.question_id.clone(),
        answer: "no: not on this branch".into(),
    })
    .await
    .unwrap();
    let t = finish(&mut c, &id).await;
    assert_eq!(json(&t.report_json)["status"], "blocked", "{}", t.report_json);
    assert!(!t.report_json.contains("acp.txt"), "{}", t.report_json);
    let answered = log_entries(&log).into_iter().find_map(|e| e.get("permission").cloned()).unwrap();
    assert_eq!(answered["outcome"]["optionId"], "no", "{answered}");
    let events = c
        .logs(pb::LogsRequest { task_id: id.clone(), limit: 200, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .events_json;
    assert!(events.iter().any(|e| e.contains("no: not on this branch")), "the reason is kept in the events");
}

//! Many delegations at once (issue 33): every one is answered once its task
//! is durable, with its start behind the answer, and every task runs exactly
//! once — also when the daemon is killed between the answers and the starts.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(120);

/// An installation whose `gated` agent stamps a line when it runs, waits
/// for the gate, then reports; room for `n` tasks at once.
fn gated_env(n: usize) -> (Env, std::path::PathBuf, std::path::PathBuf) {
    let env = Env::new(&[]);
    let (gate, stamps) = (env.file("gate"), env.file("stamps"));
    let (g, s) = (gate.display().to_string(), stamps.display().to_string());
    env.set_agents(&[("gated", &["stamp", &s, "wait-file", &g, "report", "success", "ok"])]);
    let config = env.project.path().join(".caesar/config.toml");
    let agents = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("[policy]\nmax_parallel = {n}\n\n{agents}")).unwrap();
    (env, gate, stamps)
}

/// Delegates `per_client` tasks from each of `clients` connections at once;
/// returns every answer.
async fn burst(env: &Env, clients: usize, per_client: usize) -> Vec<pb::DelegateResponse> {
    let mut calls = Vec::new();
    for k in 0..clients {
        let mut c = env.client().await;
        let mut request = env.delegate_request("gated", "");
        request.mode = "read-only".into();
        calls.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..per_client {
                let r = pb::DelegateRequest { objective: format!("burst {k}/{i}"), ..request.clone() };
                answers.push(c.delegate(r).await.unwrap().into_inner());
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.extend(call.await.unwrap());
    }
    answers
}

fn stamp_count(stamps: &std::path::Path) -> usize {
    std::fs::read_to_string(stamps).map(|t| t.lines().count()).unwrap_or(0)
}

#[tokio::test]
async fn fifty_delegations_from_five_clients_are_all_answered_and_each_runs_once() {
    let (mut env, gate, stamps) = gated_env(100);
    let mut c = env.start_daemon().await;
    let answers = burst(&env, 5, 10).await;
    // No agent can have finished: the gate is not there yet.
    assert_eq!(answers.len(), 50);
    for a in &answers {
        assert!(matches!(a.status().as_str(), "pending" | "running"), "{a:?}");
        // The id is real: the task is recorded, pending or running, never ended.
        let s = c.status(pb::StatusRequest { task_id: a.task_id.clone() }).await.unwrap().into_inner();
        assert!(matches!(s.status().as_str(), "pending" | "running"), "{s:?}");
    }
    let ids: std::collections::HashSet<_> = answers.iter().map(|a| a.task_id.clone()).collect();
    assert_eq!(ids.len(), 50, "fifty distinct tasks");
    // Every agent starts while all wait at the gate.
    assert!(eventually(LONG, || stamp_count(&stamps) >= 50).await, "{} of 50 started", stamp_count(&stamps));
    std::fs::write(&gate, "go").unwrap();
    for id in &ids {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    }
    assert_eq!(stamp_count(&stamps), 50, "each agent ran exactly once");
}

#[tokio::test]
async fn a_daemon_killed_between_the_answers_and_the_starts_starts_each_task_once_on_restart() {
    let (mut env, gate, stamps) = gated_env(100);
    // One start at a time, so that most answered tasks are still unstarted
    // when the daemon dies.
    let slow = [("CAESAR_START_PARALLEL", "1")];
    let mut c = env.start_daemon_with(&slow).await;
    let answers = burst(&env, 5, 4).await;
    let mut unstarted = 0;
    for a in &answers {
        let s = c.status(pb::StatusRequest { task_id: a.task_id.clone() }).await.unwrap().into_inner();
        unstarted += usize::from(s.status().as_str() == "pending");
    }
    env.kill_daemons().await;
    assert!(unstarted > 0, "every task had started before the kill: the case is not exercised");
    let mut c = env.start_daemon().await;
    assert!(eventually(LONG, || stamp_count(&stamps) >= 20).await, "{} of 20 started", stamp_count(&stamps));
    std::fs::write(&gate, "go").unwrap();
    for a in &answers {
        let t = await_one(&mut c, &a.task_id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    }
    assert_eq!(stamp_count(&stamps), 20, "each agent ran exactly once across the restart");
}

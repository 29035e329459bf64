//! Orchestration across a task's life (issue 17, items 1–4) against a real
//! caesard: the network blocker (with the real codex pointed at a closed
//! port), fallback along a role's chain under one task id, no fallback
//! after changes, budgets that stop an agent with a partial report, bad
//! budgets refused, and budgets and fallbacks surviving a daemon SIGKILL.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::time::Duration;

use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(60);

/// An OACP event line body for `fake-agent event`.
fn blocker(kind: &str, message: &str) -> String {
    serde_json::json!({"type": "blocker", "kind": kind, "message": message}).to_string()
}

fn usage(input: u64, output: u64) -> String {
    serde_json::json!({"type": "usage", "input_tokens": input, "output_tokens": output}).to_string()
}

/// Appends TOML to the project's config.
fn append_config(env: &Env, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(env.project.path().join(".caesar/config.toml")).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

const PAIR_ROLE: &str = "[[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"read-only\"\n";

fn role_request(env: &Env, role: &str) -> pb::DelegateRequest {
    pb::DelegateRequest {
        objective: "do the thing".to_owned(),
        role: role.to_owned(),
        workspace: env.workspace(),
        ..Default::default()
    }
}

async fn status(c: &mut caesar_proto::client::Client, id: &str) -> pb::TaskView {
    c.status(pb::StatusRequest { task_id: id.to_owned() }).await.unwrap().into_inner()
}

#[tokio::test]
async fn a_quota_blocker_falls_back_to_the_next_agent_under_one_task_id() {
    let quota = blocker("rate_limit", "You've hit your usage limit.");
    let mut env = Env::new(&[
        ("first", &["event", &quota, "hang"]),
        ("second", &["say", "working", "report", "success", "done by second"]),
    ]);
    append_config(&env, PAIR_ROLE);
    let mut c = env.start_daemon().await;
    let d = c.delegate(role_request(&env, "pair")).await.unwrap().into_inner();
    assert_eq!(d.agent, "first");
    // A blocker the chain gets past does not wake an await that wakes on attention.
    let r = c
        .r#await(pb::AwaitRequest { task_ids: vec![d.task_id.clone()], timeout_ms: 60_000, wake_on_attention: true })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.woke_early);
    let t = r.tasks.into_iter().next().unwrap();
    assert_eq!(t.task_id, d.task_id, "the caller keeps the first id");
    assert_eq!((t.status().as_str(), t.agent.as_str()), ("succeeded", "second"), "{t:?}");
    assert_eq!(json(&t.report_json)["summary"], "done by second");
    assert_eq!(t.attempts.len(), 1, "{:?}", t.attempts);
    let a = &t.attempts[0];
    assert_eq!(
        (a.task_id.as_str(), a.agent.as_str(), a.stopped_by().as_str()),
        (d.task_id.as_str(), "first", "rate_limit")
    );
    assert!(a.message.contains("usage limit"), "{a:?}");
    assert!(!t.current_task_id.is_empty() && t.current_task_id != d.task_id);
    // status follows the chain too; the attempt's own logs keep its blocker.
    let s = status(&mut c, &d.task_id).await;
    assert_eq!((s.status().as_str(), s.current_task_id.as_str()), ("succeeded", t.current_task_id.as_str()));
    let logs = c
        .logs(pb::LogsRequest { task_id: d.task_id.clone(), limit: 100, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(logs.events_json.iter().any(|e| json(e)["type"] == "blocker"), "{:?}", logs.events_json);
    // Exactly two tasks ran: no attempt was doubled.
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(ps.tasks.len(), 2, "{:?}", ps.tasks.iter().map(|t| &t.agent).collect::<Vec<_>>());
}

#[tokio::test]
async fn on_blocker_fail_opts_out_of_the_fallback() {
    let quota = blocker("rate_limit", "429 Too Many Requests");
    let mut env = Env::new(&[("first", &["event", &quota, "hang"]), ("second", &["say", "never"])]);
    append_config(&env, PAIR_ROLE);
    let mut c = env.start_daemon().await;
    let mut req = role_request(&env, "pair");
    req.on_blocker = "fail".to_owned();
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.agent.as_str(), t.report_status.as_str(), t.blocker().as_str()), ("first", "blocked", "rate_limit"));
    assert!(t.attempts.is_empty());
    // And a bad choice is refused by name.
    let mut req = role_request(&env, "pair");
    req.on_blocker = "retry".to_owned();
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("on_blocker `retry`"), "{}", e.message());
}

#[tokio::test]
async fn a_task_that_changed_files_is_not_re_run_elsewhere() {
    let quota = blocker("rate_limit", "quota exceeded");
    let mut env = Env::new(&[
        ("first", &["write", "new.txt", "half done", "event", &quota, "hang"]),
        ("second", &["say", "never"]),
    ]);
    append_config(
        &env,
        "[[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"write\"\nisolation = \"worktree\"\n",
    );
    let p = env.project.path().to_path_buf();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(&p);
    let mut c = env.start_daemon().await;
    // `fallback` only re-runs a task that changed nothing; the default, `relay`, would hand this
    // one on in its worktree (issue 31, `tests/relay.rs`).
    let mut req = role_request(&env, "pair");
    req.on_blocker = "fallback".to_owned();
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.agent.as_str(), t.report_status.as_str()), ("first", "blocked"), "{t:?}");
    assert!(t.attempts.is_empty());
    let report = json(&t.report_json);
    let titles: Vec<&str> =
        report["findings"].as_array().unwrap().iter().map(|f| f["title"].as_str().unwrap()).collect();
    assert!(
        titles.iter().any(|t| t.contains("no fallback to another agent: it had already changed files")),
        "{titles:?}"
    );
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(ps.tasks.len(), 1);
}

#[tokio::test]
async fn a_turn_budget_stops_the_agent_with_a_partial_report() {
    let mut env = Env::new(&[("chatty", &["say", "one", "say", "two", "say", "three", "hang"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("chatty", "talk");
    req.budget = Some(pb::Budget { turns: Some(2), ..Default::default() });
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.report_status.as_str()), ("failed", "partial"), "{t:?}");
    assert!(t.error.contains("budget (turns)"), "{}", t.error);
    let b = t.budget.clone().unwrap();
    assert_eq!((b.exceeded.as_str(), b.limits.unwrap().turns), ("turns", Some(2)));
    assert!(b.turns >= 2);
    let report = json(&t.report_json);
    let finding = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["title"].as_str().unwrap().starts_with("budget:"))
        .expect("a budget finding");
    assert_eq!(finding["severity"], "high");
    assert!(finding["detail"].as_str().unwrap().contains("turns taken of a budget of 2"), "{finding}");
}

#[tokio::test]
async fn a_token_budget_from_the_role_stops_the_agent() {
    let u = usage(700, 400);
    let mut env = Env::new(&[("spender", &["event", &u, "hang"])]);
    append_config(
        &env,
        "[budget]\nwall = \"10m\"\n\n[[role]]\nname = \"cheap\"\nagents = [\"spender\"]\nmode = \"read-only\"\nbudget = { tokens = 1000 }\n",
    );
    let mut c = env.start_daemon().await;
    let d = c.delegate(role_request(&env, "cheap")).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    let b = t.budget.clone().unwrap();
    assert_eq!((b.exceeded.as_str(), b.tokens), ("tokens", 1100), "{t:?}");
    let limits = b.limits.unwrap();
    assert_eq!((limits.tokens, limits.wall_ms), (Some(1000), Some(600_000)), "role over [budget], field by field");
    assert_eq!(t.report_status, "partial");
}

#[tokio::test]
async fn zero_and_negative_budgets_are_refused_at_delegate_and_config_load() {
    let mut env = Env::new(&[("a", &["say", "hi"])]);
    let mut c = env.start_daemon().await;
    for (budget, field) in [
        (pb::Budget { tokens: Some(0), ..Default::default() }, "`budget.tokens` must be at least 1, got 0"),
        (pb::Budget { cost_usd: Some(-2.0), ..Default::default() }, "`budget.cost_usd` must be above 0"),
        (pb::Budget { wall_ms: Some(-5), ..Default::default() }, "`budget.wall_ms` must be at least 1, got -5"),
    ] {
        let mut req = env.delegate_request("a", "x");
        req.budget = Some(budget);
        let e = c.delegate(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains(field), "{}", e.message());
    }
    let env2 = Env::new(&[("a", &["say", "hi"])]);
    append_config(&env2, "[budget]\nturns = -1\n");
    let mut req = env2.delegate_request("a", "x");
    req.workspace = env2.workspace();
    let e = c.delegate(req).await.unwrap_err();
    assert!(e.message().contains("`[budget].turns` must be at least 1, got -1"), "{}", e.message());
    assert!(e.message().contains("config.toml"), "{}", e.message());
}

#[tokio::test]
async fn a_budget_survives_a_daemon_sigkill() {
    let first = usage(600, 0);
    let second = usage(500, 0);
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let gate_s = gate.display().to_string();
    env.set_agents(&[("spender", &["event", &first, "wait-file", &gate_s, "event", &second, "hang"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("spender", "spend");
    req.budget = Some(pb::Budget { tokens: Some(1000), ..Default::default() });
    let d = c.delegate(req).await.unwrap().into_inner();
    // The first 600 tokens are stored, then the daemon dies.
    let mut seen = false;
    for _ in 0..250 {
        let t = status(&mut c, &d.task_id).await;
        if t.budget.as_ref().is_some_and(|b| b.tokens == 600) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen, "the first usage event was tallied");
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    // 500 more: over the limit only if the restarted daemon kept the 600.
    std::fs::write(&gate, "").unwrap();
    let t = await_one(&mut c, &d.task_id, Duration::from_secs(20)).await;
    assert!(!t.pending, "the restarted daemon stopped the agent at its budget: {t:?}");
    let b = t.budget.clone().unwrap();
    assert_eq!((b.exceeded.as_str(), b.tokens), ("tokens", 1100));
    assert_eq!(t.report_status, "partial");
}

#[tokio::test]
async fn a_fallback_survives_a_daemon_sigkill_without_doubling() {
    let quota = blocker("rate_limit", "usage limit");
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let gate_s = gate.display().to_string();
    env.set_agents(&[
        ("first", &["wait-file", &gate_s, "event", &quota, "hang"]),
        ("second", &["report", "success", "second finished"]),
    ]);
    append_config(&env, PAIR_ROLE);
    let mut c = env.start_daemon().await;
    let d = c.delegate(role_request(&env, "pair")).await.unwrap().into_inner();
    assert_eq!(status(&mut c, &d.task_id).await.status().as_str(), "running");
    // The blocker comes while no daemon watches: it is in the raw log
    // before the next daemon starts.
    env.kill_daemons().await;
    std::fs::write(&gate, "").unwrap();
    let raw = caesar_tests::daemon_files(&d.task_dir).join("raw.log");
    assert!(
        eventually(LONG, || std::fs::read_to_string(&raw).is_ok_and(|s| s.contains("usage limit"))).await,
        "the agent wrote its blocker to {}",
        raw.display()
    );
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.agent.as_str()), ("succeeded", "second"), "{t:?}");
    assert_eq!(t.attempts.len(), 1);
    // A second restart makes no second attempt. The queue starts nothing
    // until recovery is done, recorded fallbacks included: once a task
    // delegated now has run, recovery has made every attempt it would.
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let probe = c.delegate(env.delegate_request("second", "after recovery")).await.unwrap().into_inner();
    assert_eq!(await_one(&mut c, &probe.task_id, LONG).await.status().as_str(), "succeeded");
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    let others: Vec<_> =
        ps.tasks.iter().filter(|t| t.task_id != probe.task_id).map(|t| (&t.agent, t.status().as_str())).collect();
    assert_eq!(others.len(), 2, "the blocked task and its one fallback: {others:?}");
}

#[tokio::test]
async fn an_agent_that_only_fails_to_connect_is_blocked_network_and_falls_back() {
    let refused = serde_json::json!({"type": "error", "message": "Connection refused (os error 111)"}).to_string();
    let mut env = Env::new(&[
        ("first", &["event", &refused, "sleep", "300", "event", &refused, "hang"]),
        ("second", &["report", "success", "second did it"]),
        ("worker", &["say", "working", "event", &refused, "sleep", "3000"]),
    ]);
    append_config(&env, PAIR_ROLE);
    let mut c = env.start_daemon_with(&[("CAESAR_NETWORK_BLOCKER_MS", "1000")]).await;
    let d = c.delegate(role_request(&env, "pair")).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.agent.as_str()), ("succeeded", "second"), "{t:?}");
    assert_eq!(t.attempts[0].stopped_by().as_str(), "network");
    assert!(t.attempts[0].message.contains("could not reach its provider"), "{:?}", t.attempts);
    // A failure inside a working session is transient: no blocker.
    let d = c.delegate(env.delegate_request("worker", "work")).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.blocker().as_str()), ("succeeded", ""), "{t:?}");
}

/// The real codex, its provider pointed at a closed port, says "Reconnecting... waiting for
/// network" until its deadline; caesar blocks it `network` after the setting's time.
#[tokio::test]
async fn real_codex_without_network_is_blocked_network() {
    let codex = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("real-clis/node_modules/.bin/codex");
    if !codex.exists() {
        panic!("codex is not installed: npm install --prefix tests/real-clis --no-save");
    }
    let mut env = Env::new(&[]);
    append_config(&env, &format!("[bin]\ncodex = {:?}\n", codex.display().to_string()));
    let homes = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let codex_home = homes.path().join("codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    // Port 9 (discard) on loopback: nothing listens, every connection is refused.
    std::fs::write(
        codex_home.join("config.toml"),
        "model = \"gpt-5-codex\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\nenv_key = \"FAKE_KEY\"\nwire_api = \"responses\"\n",
    )
    .unwrap();
    let home = homes.path().display().to_string();
    let codex_home_s = codex_home.display().to_string();
    let mut c = env
        .start_daemon_with(&[
            ("CAESAR_NETWORK_BLOCKER_MS", "3000"),
            ("CODEX_HOME", &codex_home_s),
            ("HOME", &home),
            ("FAKE_KEY", "k"),
            ("CAESAR_PASS_ENV", "FAKE_KEY"),
        ])
        .await;
    let mut req = env.delegate_request("codex", "say hi");
    req.mode = "read-only".to_owned();
    req.timeout_ms = 120_000;
    let started = std::time::Instant::now();
    let d = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.blocker().as_str(), t.report_status.as_str()), ("network", "blocked"), "{t:?}");
    assert!(started.elapsed() < Duration::from_secs(40), "blocked long before the deadline");
    let report = json(&t.report_json);
    assert!(report["summary"].as_str().unwrap().contains("could not reach its provider"), "{report}");
    assert!(t.attempts.is_empty(), "an agent named without a role has no chain");
}

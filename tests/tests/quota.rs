//! Routing by remaining quota (issue 32, item 3) against a real caesard: claude (a stand-in set
//! with `[bin]` that prints claude's own stream-json, read by caesar's claude adapter) reports a
//! `rate_limit_event` saying it is near its limit; the next delegation through a role listing
//! claude then codex goes to codex before starting, with no blocker, and `caesar agents` and
//! the roles' view say why. The ledger survives a daemon restart.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../daemon/tests/fixtures/providers").join(rel)
}

/// A stand-in for a provider CLI that replays `capture` (claude's or codex's own output) and
/// exits 0.
fn stand_in(env: &Env, name: &str, capture: &Path) -> PathBuf {
    let script = env.home.path().join(format!("{name}-stand-in"));
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec '{}' replay '{}' exit 0\n", fake_agent().display(), capture.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// claude's text-only capture with a `rate_limit_event` (the shape claude 2.1.197 prints from
/// the `anthropic-ratelimit-unified-*` headers) of `status` and `resets_at_s` after its init.
fn claude_capture(env: &Env, name: &str, status: &str, resets_at_s: i64) -> PathBuf {
    let text = std::fs::read_to_string(fixture("captures-local/claude-text-only.jsonl")).unwrap();
    let event = serde_json::json!({
        "type": "rate_limit_event",
        "rate_limit_info": {"status": status, "resetsAt": resets_at_s, "rateLimitType": "five_hour",
                            "utilization": 0.93, "isUsingOverage": false},
        "uuid": "4b0c9d3e-0000-4000-8000-000000000002",
        "session_id": "c0c229a3-687b-416b-8090-93b5d36f7554",
    });
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.insert(1, event.to_string());
    let path = env.home.path().join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

fn write_config(env: &Env, claude: &Path, codex: &Path) {
    let config = format!(
        "[policy]\nallow_recursion = true\n[bin]\nclaude = {:?}\ncodex = {:?}\n\n\
         [[role]]\nname = \"pair\"\nagents = [\"claude\", \"codex\"]\nmode = \"read-only\"\n",
        claude.display().to_string(),
        codex.display().to_string()
    );
    std::fs::write(env.project.path().join(".caesar/config.toml"), config).unwrap();
}

async fn event_types(c: &mut caesar_proto::client::Client, id: &str) -> Vec<String> {
    let logs = c
        .logs(pb::LogsRequest { task_id: id.to_owned(), limit: 10_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    logs.events_json.iter().map(|e| json(e)["type"].as_str().unwrap_or("").to_owned()).collect()
}

fn agents_text(env: &Env) -> String {
    let o = env.caesar(&["agents", "list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn pair_role(c: &mut caesar_proto::client::Client, env: &Env) -> serde_json::Value {
    let roles = c.list_roles(pb::ListRolesRequest { workspace: env.workspace() }).await.unwrap().into_inner();
    roles.roles_json.iter().map(|r| json(r)).find(|r| r["name"] == "pair").expect("the pair role")
}

#[tokio::test]
async fn a_claude_near_its_limit_sends_the_next_role_delegation_to_codex_before_starting() {
    let mut env = Env::new(&[]);
    let resets = now_s() + 2 * 3600;
    let claude = stand_in(&env, "claude", &claude_capture(&env, "claude-near.jsonl", "allowed_warning", resets));
    let codex = stand_in(&env, "codex", &fixture("captures-local/codex-text-only.jsonl"));
    write_config(&env, &claude, &codex);
    let mut c = env.start_daemon().await;

    // Before any signal the role picks claude, its first choice.
    assert_eq!(pair_role(&mut c, &env).await["would_pick"], "claude");

    // A task of claude's that succeeds, its stream saying it is near its limit: no blocker.
    let mut req = env.delegate_request("claude", "say hello");
    req.mode = "read-only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!((t.status().as_str(), t.report_status.as_str(), t.blocker().as_str()), ("succeeded", "success", ""));
    assert!(!event_types(&mut c, &id).await.iter().any(|t| t == "blocker"));

    // `caesar agents` says why claude would be passed over, and the MCP face's field carries it.
    let listed = agents_text(&env);
    let quota_line = listed.lines().skip_while(|l| !l.starts_with("claude ")).nth(1).unwrap_or_default().to_owned();
    assert!(
        quota_line.trim_start().starts_with("quota: near limit until ")
            && quota_line.ends_with("(claude rate_limit_event)"),
        "{listed}"
    );
    let agents = c.list_agents(pb::ListAgentsRequest { workspace: env.workspace() }).await.unwrap().into_inner();
    let of = |id: &str| agents.agents.iter().find(|a| a.id == id).unwrap().headroom.clone();
    assert!(of("claude").starts_with("near limit until"), "{:?}", of("claude"));
    assert_eq!(of("codex"), "", "codex has headroom");
    let role = pair_role(&mut c, &env).await;
    assert_eq!(role["would_pick"], "codex", "{role}");
    assert!(role["reason"].as_str().unwrap().contains("`claude` is near limit until"), "{role}");

    // The next delegation through the role goes to codex at once: no blocker, no fallback.
    let req = pb::DelegateRequest {
        objective: "say hello".into(),
        role: "pair".into(),
        mode: "read-only".into(),
        workspace: env.workspace(),
        ..Default::default()
    };
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.agent, "codex");
    assert!(d.agent_reason.contains("quota headroom") && d.agent_reason.contains("claude"), "{}", d.agent_reason);
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.agent.as_str(), t.blocker().as_str()), ("succeeded", "codex", ""), "{t:?}");
    assert!(t.attempts.is_empty(), "no attempt was blocked first: {:?}", t.attempts);
    assert!(!event_types(&mut c, &d.task_id).await.iter().any(|t| t == "blocker"));
    let all = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(all.tasks.len(), 2, "claude was not started for the role's task");

    // A fan-out through the role picks the same way for each of its tasks.
    std::fs::write(env.project.path().join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(env.project.path());
    let fan = pb::DelegateRequest {
        objective: "say hello".into(),
        role: "pair".into(),
        mode: "read-only".into(),
        attempts: 2,
        workspace: env.workspace(),
        ..Default::default()
    };
    let g = c.delegate(fan).await.unwrap().into_inner();
    assert_eq!(g.task_ids.len(), 2, "{g:?}");
    for id in &g.task_ids {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!((t.status().as_str(), t.agent.as_str(), t.blocker().as_str()), ("succeeded", "codex", ""), "{t:?}");
    }

    // claude named outright is kept, and the caller hears it is near its limit.
    let mut req = env.delegate_request("claude", "say hello");
    req.mode = "read-only".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.agent, "claude");
    assert!(d.warnings.get("quota").is_some_and(|w| w.contains("near limit until")), "{:?}", d.warnings);
    await_one(&mut c, &d.task_id, LONG).await;

    // The ledger survives a restart of the daemon.
    drop(c);
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    assert!(agents_text(&env).contains("quota: near limit until"), "after a restart");
    assert_eq!(pair_role(&mut c, &env).await["would_pick"], "codex");
}

#[tokio::test]
async fn a_reset_in_the_past_is_forgotten_and_one_years_ahead_is_bounded() {
    let mut env = Env::new(&[]);
    let codex = stand_in(&env, "codex", &fixture("captures-local/codex-text-only.jsonl"));
    // Years ahead: held for 7 days at most, and the listing shows the bounded date.
    let far = now_s() + 5 * 365 * 86_400;
    let claude = stand_in(&env, "claude", &claude_capture(&env, "claude-far.jsonl", "allowed_warning", far));
    write_config(&env, &claude, &codex);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("claude", "say hello");
    req.mode = "read-only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
    let agents = c.list_agents(pb::ListAgentsRequest { workspace: env.workspace() }).await.unwrap().into_inner();
    let said = agents.agents.iter().find(|a| a.id == "claude").unwrap().headroom.clone();
    let year = 1970 + far / (365 * 86_400 + 21_600);
    assert!(said.starts_with("near limit until ") && !said.contains(&year.to_string()), "bounded: {said}");

    // A later signal whose reset is already past: what had reset is forgotten.
    let claude = stand_in(&env, "claude", &claude_capture(&env, "claude-past.jsonl", "allowed_warning", now_s() - 60));
    write_config(&env, &claude, &codex);
    let mut req = env.delegate_request("claude", "say hello");
    req.mode = "read-only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
    let agents = c.list_agents(pb::ListAgentsRequest { workspace: env.workspace() }).await.unwrap().into_inner();
    assert_eq!(agents.agents.iter().find(|a| a.id == "claude").unwrap().headroom, "");
    assert_eq!(pair_role(&mut c, &env).await["would_pick"], "claude");
}

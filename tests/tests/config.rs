//! Layered configuration through the daemon: policy refusals, roles with
//! fallback chains, model resolution, network decisions, and the fair queue.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(30);

fn write_config(env: &Env, text: &str) {
    std::fs::write(env.project.path().join(".caesar/config.toml"), text).unwrap();
}

/// Writes `head` and two agents: `gated`, which succeeds once the returned gate file exists, and
/// `quick`, which succeeds at once.
fn gated_and_quick(env: &Env, head: &str) -> std::path::PathBuf {
    let gate = env.file("gate");
    let g = gate.display().to_string();
    write_config(
        env,
        &format!(
            "{head}{}{}",
            agent_entry("gated", &["wait-file", &g, "report", "success", "ok"]),
            agent_entry("quick", &["report", "success", "ok"])
        ),
    );
    gate
}

fn agent_entry(id: &str, args: &[&str]) -> String {
    format!(
        "[[agent]]\nid = {id:?}\nbin = {:?}\nargs = {}\n",
        fake_agent().display().to_string(),
        serde_json::to_string(args).unwrap()
    )
}

#[tokio::test]
async fn policy_refusals_come_in_order_with_their_remedy_and_write_nothing() {
    let mut env = Env::new(&[]);
    write_config(
        &env,
        &format!(
            "[policy]\ndenied = [\"bad\"]\nallowed = [\"good\", \"bad\"]\nmax_depth = 1\n{}{}{}",
            agent_entry("good", &["report", "success", "ok"]),
            agent_entry("bad", &["report", "success", "ok"]),
            agent_entry("other", &["report", "success", "ok"])
        ),
    );
    let mut c = env.start_daemon().await;
    let e = c.delegate(env.delegate_request("bad", "x")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("`denied`") && e.message().contains("caesar agents enable bad"), "{}", e.message());
    let e = c.delegate(env.delegate_request("other", "x")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("caesar policy allow other"), "{}", e.message());
    let list = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 10 }).await.unwrap().into_inner();
    assert!(list.tasks.is_empty(), "a refusal writes nothing");
    assert_eq!(std::fs::read_dir(env.paths.state_dir.join("tasks")).unwrap().count(), 0);

    let ok = c.delegate(env.delegate_request("good", "x")).await.unwrap().into_inner();
    assert_eq!(await_one(&mut c, &ok.task_id, LONG).await.status().as_str(), "succeeded");
    // The depth is the daemon's to say (issue 19): the user's own request
    // is at depth 0 whatever it claims; tests/authority.rs reaches
    // max_depth through real nested delegations.
    let mut deep = env.delegate_request("good", "x");
    deep.depth = 1;
    let deep = c.delegate(deep).await.unwrap().into_inner();
    assert_eq!(await_one(&mut c, &deep.task_id, LONG).await.status().as_str(), "succeeded");

    // Listings show each agent's standing: the allowlist comes before recursion.
    let agents = c.list_agents(pb::ListAgentsRequest { workspace: env.workspace() }).await.unwrap().into_inner().agents;
    let claude = agents.iter().find(|a| a.id == "claude").unwrap();
    assert!(!claude.allowed && claude.refusal.contains("`allowed`"), "{}", claude.refusal);
    assert!(!agents.iter().find(|a| a.id == "other").unwrap().allowed);
    assert!(agents.iter().find(|a| a.id == "good").unwrap().allowed);
}

#[tokio::test]
async fn a_role_falls_back_past_missing_and_denied_agents_and_brings_its_defaults() {
    let mut env = Env::new(&[]);
    write_config(
        &env,
        &format!(
            "[policy]\ndenied = [\"second\"]\n[models]\nthird = \"model-from-models\"\n\
             [[role]]\nname = \"checker\"\npurpose = \"checks\"\nagents = [\"ghost-cli\", \"second\", \"third\"]\nmode = \"read-only\"\ntimeout = \"2m\"\n\
             {}{}",
            agent_entry("second", &["report", "success", "second"]),
            agent_entry(
                "third",
                &["say", "--model={{model}}", "env", "CAESAR_TASK_FILE", "report", "success", "third"]
            )
        ),
    );
    std::fs::create_dir_all(env.project.path().join(".caesar/roles")).unwrap();
    let mut c = env.start_daemon().await;
    let roles =
        c.list_roles(pb::ListRolesRequest { workspace: env.workspace() }).await.unwrap().into_inner().roles_json;
    let roles: Vec<serde_json::Value> = roles.iter().map(|r| json(r)).collect();
    let names: Vec<&str> = roles.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["reviewer", "implementer", "investigator", "checker"]);
    let checker = roles.iter().find(|r| r["name"] == "checker").unwrap();
    assert_eq!(checker["would_pick"], "third");
    let skipped = checker["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2);
    assert!(skipped[0]["reason"].as_str().unwrap().contains("not installed"));
    assert!(skipped[1]["reason"].as_str().unwrap().contains("denied"));
    assert_eq!(checker["timeout_ms"], 120_000);

    let mut req = env.delegate_request("", "check it");
    req.role = "checker".into();
    req.mode.clear(); // the role's mode applies
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!((d.agent.as_str(), d.mode.as_str(), d.role.as_str()), ("third", "read-only", "checker"));
    assert_eq!(d.model, "model-from-models", "explicit, then role, then [models]");
    assert_eq!(d.timeout_ms, 120_000);
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded");
    let logs =
        c.logs(pb::LogsRequest { task_id: d.task_id, limit: 100, ..Default::default() }).await.unwrap().into_inner();
    assert!(logs.events_json.iter().any(|e| e.contains("--model=model-from-models")));

    let mut req = env.delegate_request("", "x");
    req.role = "nobody".into();
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("checker"), "{}", e.message());
}

#[tokio::test]
async fn a_model_the_agent_cannot_take_is_refused_when_explicit_and_dropped_when_configured() {
    let mut env = Env::new(&[]);
    write_config(&env, &format!("[models]\nplain = \"m1\"\n{}", agent_entry("plain", &["report", "success", "ok"])));
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("plain", "x");
    req.model = "m2".into();
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("cannot choose a model"));
    let d = c.delegate(env.delegate_request("plain", "x")).await.unwrap().into_inner();
    assert!(d.warnings["model_warning"].contains("m1"), "{:?}", d.warnings);
    assert_eq!(d.model, "");

    // With no allowlist, claude is refused by the recursion rule where Claude
    // Code is the caller (issue 30), and not to a plain terminal.
    let o = env.caesar_under_claude_code(&["--json", "agents", "list"]);
    let listed = json(String::from_utf8_lossy(&o.stdout).trim());
    let claude = listed["agents"].as_array().unwrap().iter().find(|a| a["id"] == "claude").unwrap().clone();
    let refusal = claude["policy"]["reason"].as_str().unwrap_or_default();
    assert!(claude["policy"]["allowed"] == false && refusal.contains("allow_recursion"), "{claude}");
    let agents = c.list_agents(pb::ListAgentsRequest { workspace: env.workspace() }).await.unwrap().into_inner().agents;
    let claude = agents.iter().find(|a| a.id == "claude").unwrap();
    assert!(claude.refusal.is_empty() || !claude.refusal.contains("allow_recursion"), "{}", claude.refusal);

    // network: off cannot be enforced on a generic agent without network_args.
    let mut req = env.delegate_request("plain", "x");
    req.network = "off".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    assert!(d.warnings.contains_key("network_warning"));
    assert!(d.network, "not cut, so not claimed cut");
}

#[tokio::test]
async fn max_parallel_queues_fifo_and_a_queued_task_can_be_cancelled() {
    let mut env = Env::new(&[]);
    let gate = gated_and_quick(&env, "[policy]\nmax_parallel = 1\n");
    let mut c = env.start_daemon().await;
    let first = c.delegate(env.delegate_request("gated", "1")).await.unwrap().into_inner();
    assert_eq!(first.status().as_str(), "running");
    let second = c.delegate(env.delegate_request("quick", "2")).await.unwrap().into_inner();
    let third = c.delegate(env.delegate_request("quick", "3")).await.unwrap().into_inner();
    assert_eq!((second.status().as_str(), third.status().as_str()), ("pending", "pending"));
    let s = c.status(pb::StatusRequest { task_id: third.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(s.queue_position, Some(1));
    let s = c.status(pb::StatusRequest { task_id: second.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(s.queue_position, Some(0));

    // Cancelling a queued task ends it at once.
    let r = c.cancel(pb::CancelRequest { task_id: second.task_id.clone() }).await.unwrap().into_inner();
    assert!(r.cancelled);
    assert_eq!(r.status().as_str(), "cancelled");
    let s = c.status(pb::StatusRequest { task_id: third.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!((s.status().as_str(), s.queue_position), ("pending", Some(0)));

    std::fs::write(&gate, "go").unwrap();
    let t1 = await_one(&mut c, &first.task_id, LONG).await;
    let t3 = await_one(&mut c, &third.task_id, LONG).await;
    assert_eq!((t1.status().as_str(), t3.status().as_str()), ("succeeded", "succeeded"));
    assert!(t3.started_at >= t1.finished_at, "the queued task started after the first ended");
}

#[tokio::test]
async fn the_cli_edits_one_layer_at_a_time_and_keeps_comments() {
    let env = Env::new(&[]);
    let run = |args: &[&str]| {
        let o = env.caesar(args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        "# team config\n[policy]\nmax_parallel = 3 # keep it low\n",
    )
    .unwrap();
    let (code, out, err) = run(&["init"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("kept") && out.contains(".caesar/config.toml"), "{out}");
    assert!(env.project.path().join(".caesar/roles/implementer.md").exists());

    let (code, out, _) = run(&["agents", "disable", "gemini"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("now owns the whole list"), "{out}");
    let (_, out, _) = run(&["agents", "set-model", "codex", "o4", "--local"]);
    assert!(out.contains("config.local.toml"), "{out}");
    let (code, _, err) = run(&["policy", "allow", "codex", "--global", "--local"]);
    assert_eq!(code, Some(2), "both layers at once is refused");
    assert!(err.contains("cannot be used with"), "{err}");

    let text = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    assert!(text.starts_with("# team config\n") && text.contains("max_parallel = 3 # keep it low"), "{text}");
    assert!(text.contains("denied = [\"gemini\"]"), "{text}");

    let (_, out, _) = run(&["--json", "policy", "show"]);
    let v = json(out.trim());
    assert_eq!(v["policy"]["max_parallel"], 3);
    assert_eq!(v["provenance"]["policy.max_parallel"], "project");
    assert_eq!(v["policy"]["denied"], serde_json::json!(["gemini"]));

    let (code, out, err) =
        run(&["role", "add", "doc", "--agents", "codex,opencode", "--mode", "write", "--timeout", "5m"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("added role `doc`"));
    let (_, out, _) = run(&["--json", "role", "show", "doc"]);
    let v = json(out.trim());
    assert_eq!(v["roles"][0]["timeout_ms"], 300_000);
    assert_eq!(v["roles"][0]["origin"], "project");
    let (code, _, err) = run(&["role", "remove", "reviewer"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("comes from the default layer"), "{err}");
    let (code, _, _) = run(&["role", "remove", "doc"]);
    assert_eq!(code, Some(0));

    let (_, out, _) = run(&["--json", "protocol", "schema", "report", "--strict"]);
    let schema = json(out.trim());
    assert_eq!(schema["additionalProperties"], false);
    let (code, _, err) = run(&["protocol", "schema", "nope"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("task, report or event"));
}

#[tokio::test]
async fn two_write_tasks_never_share_a_tree_but_readers_go_ahead() {
    let mut env = Env::new(&[]);
    let gate = gated_and_quick(&env, "");
    let mut c = env.start_daemon().await;
    let writer = c.delegate(env.delegate_request("gated", "write 1")).await.unwrap().into_inner();
    let second = c.delegate(env.delegate_request("quick", "write 2")).await.unwrap().into_inner();
    let mut read = env.delegate_request("quick", "read");
    read.mode = "read-only".into();
    let reader = c.delegate(read).await.unwrap().into_inner();
    assert_eq!(writer.status().as_str(), "running");
    assert_eq!(second.status().as_str(), "pending", "the tree is taken by a write task");
    assert_eq!(
        await_one(&mut c, &reader.task_id, LONG).await.status().as_str(),
        "succeeded",
        "a reader passes the blocked writer"
    );
    let s = c.status(pb::StatusRequest { task_id: second.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(s.status().as_str(), "pending");
    std::fs::write(&gate, "go").unwrap();
    let t1 = await_one(&mut c, &writer.task_id, LONG).await;
    let t2 = await_one(&mut c, &second.task_id, LONG).await;
    assert_eq!(t2.status().as_str(), "succeeded");
    assert!(t2.started_at >= t1.finished_at);
}

#[tokio::test]
async fn a_broken_edit_keeps_the_last_good_config_and_says_so() {
    let env = Env::new(&[("ok", &["report", "success", "ok"])]);
    let o = env.caesar(&["--json", "run", "--agent", "ok", "first"]);
    assert!(o.status.success());
    let good = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("{good}\n[policy]\nmax_parallel = \"many\"\n"),
    )
    .unwrap();

    let o = env.caesar(&["--json", "run", "--agent", "ok", "second"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(String::from_utf8_lossy(&o.stdout).trim());
    let warning = v["warnings"]["config_warning"].as_str().unwrap();
    assert!(warning.contains("config.toml") && warning.contains("last good config"), "{warning}");

    let o = env.caesar(&["--json", "doctor"]);
    assert_eq!(o.status.code(), Some(1), "doctor fails while a config does not load");
    let v = json(String::from_utf8_lossy(&o.stdout).trim());
    assert!(v["problems"].to_string().contains("max_parallel"), "{v}");
    let o = env.caesar(&["--json", "daemon", "status"]);
    assert!(json(String::from_utf8_lossy(&o.stdout).trim())["problems"].to_string().contains("last good config"));

    std::fs::write(env.project.path().join(".caesar/config.toml"), good).unwrap();
    let o = env.caesar(&["--json", "daemon", "status"]);
    assert_eq!(json(String::from_utf8_lossy(&o.stdout).trim())["problems"], serde_json::json!([]));
}

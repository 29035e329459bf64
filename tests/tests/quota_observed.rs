//! Observed usage in the quota ledger (issue 32, item 3) against a real caesard: a user declares
//! `[quota.first] tasks_per_window = 2` for one agent; once two of its tasks ran, the next
//! delegation through a role listing `first` then `second` goes to `second` before starting, with
//! no blocker event, and `caesar agents` says why. Without a declared limit the usage is only
//! shown. A limit for an agent caesar does not know is refused by name.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

fn config(env: &Env, quota: &str) {
    let fake = fake_agent().display().to_string();
    let agent = |id: &str| {
        format!("[[agent]]\nid = {id:?}\nbin = {fake:?}\nargs = [\"report\", \"success\", \"{id} did it\"]\n\n")
    };
    let text = format!(
        "{}{}[[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"read-only\"\n\n{quota}",
        agent("first"),
        agent("second")
    );
    std::fs::write(env.project.path().join(".caesar/config.toml"), text).unwrap();
}

fn agents_text(env: &Env) -> String {
    let o = env.caesar(&["agents", "list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `<what>: ` line `caesar agents list` prints under `agent` (`quota`, `usage`), or "".
fn line(text: &str, agent: &str, what: &str) -> String {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(agent));
    lines.next();
    lines
        .take_while(|l| l.starts_with(' '))
        .find_map(|l| l.trim().strip_prefix(&format!("{what}: ")))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_declared_limit_reached_by_observed_usage_sends_the_role_to_the_next_agent() {
    let mut env = Env::new(&[]);
    config(&env, "[quota.first]\ntasks_per_window = 2\nwindow = \"5h\"\n");
    let mut c = env.start_daemon().await;
    let first =
        |objective: &str| pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("first", objective) };
    for i in 0..2 {
        let d = c.delegate(first(&format!("task {i}"))).await.unwrap().into_inner();
        assert_eq!(await_one(&mut c, &d.task_id, LONG).await.status(), pb::TaskStatus::Succeeded);
    }
    let text = agents_text(&env);
    let why = line(&text, "first", "quota");
    assert!(
        why.starts_with("out of quota until ") && why.ends_with("(observed usage: 2 of 2 tasks in the last 5 h)"),
        "{text}"
    );
    assert_eq!(line(&text, "first", "usage"), "observed: 2 tasks of 2, 0 tokens in the last 5 h", "{text}");
    assert_eq!((line(&text, "second", "quota"), line(&text, "second", "usage")), (String::new(), String::new()));

    let req = pb::DelegateRequest {
        objective: "say hello".into(),
        role: "pair".into(),
        mode: "read-only".into(),
        workspace: env.workspace(),
        ..Default::default()
    };
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.agent, "second", "{d:?}");
    assert!(d.agent_reason.contains("observed usage: 2 of 2 tasks"), "{}", d.agent_reason);
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.blocker().as_str()), ("succeeded", ""), "{t:?}");
    assert!(t.attempts.is_empty(), "no attempt was blocked first: {:?}", t.attempts);
    let all = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(all.tasks.len(), 3, "first was not started for the role's task");
    // Without a declared limit, second's usage is shown and holds nothing against it.
    let text = agents_text(&env);
    assert_eq!(line(&text, "second", "quota"), "", "second has headroom: {text}");
    assert_eq!(
        line(&text, "second", "usage"),
        "observed: 1 task, 0 tokens in the last 5 h; no limit declared",
        "{text}"
    );
}

/// `caesar agents list` in a fresh installation whose config is `quota`: its stderr, and
/// whether it failed.
async fn refused(quota: &str) -> (bool, String) {
    let mut env = Env::new(&[]);
    config(&env, quota);
    let _c = env.start_daemon().await;
    let o = env.caesar(&["agents", "list"]);
    (!o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[tokio::test]
async fn a_bad_quota_table_is_refused_naming_the_key_and_the_fix() {
    let (failed, err) = refused("[quota.nobody]\ntasks_per_window = 2\nwindow = \"5h\"\n").await;
    assert!(failed && err.contains("`quota.nobody` names `nobody`, which is no agent: use a provider id"), "{err}");
    let (failed, err) = refused("[quota.first]\ntasks_per_window = 2\nwindow = \"0s\"\n").await;
    assert!(failed && err.contains("`quota.first.window` is zero"), "{err}");
    let (failed, err) = refused("[quota.first]\ntasks_per_window = -1\nwindow = \"5h\"\n").await;
    assert!(failed && err.contains("`quota.first.tasks_per_window` is -1: give a positive number"), "{err}");
}

//! Quota parking and the life-cycle flags of `caesar run` (issue 17, items 3
//! and 4) against a real caesard: a quota blocker that says when it lifts
//! parks the task (`pending` with `parked_until` in status, await and
//! `caesar ps`), the same agent resumes it then under the caller's one task
//! id; a parked task is cancellable, survives a daemon SIGKILL, and is never
//! parked past its deadline; `caesar run --budget-* --on-blocker` reach the
//! daemon.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

/// A fake agent that stops at a quota saying "try again in `after`" on its
/// first run, and on any later run reports success (a marker file tells
/// the runs apart). The quota line is an OACP blocker event, as a generic
/// agent prints it, with no `resets_at_ms`: the reset comes from its words.
fn quota_once(env: &Env, after: &str) -> String {
    let mark = env.file("ran-once").display().to_string();
    let event = serde_json::json!({
        "protocol": "caesar.event/v1", "type": "blocker", "kind": "rate_limit",
        "message": format!("429 Too Many Requests: rate limited, try again in {after}"),
    });
    format!(
        "if [ -e '{mark}' ]; then echo resumed after the quota; \
         printf '%s' '{{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"resumed and done\"}}' > \"$CAESAR_REPORT_PATH\"; \
         else touch '{mark}'; echo '{event}'; sleep 300; fi"
    )
}

/// A daemon whose one agent, `solo`, runs [`quota_once`] with `after`, and the task delegated
/// to it with a 60 s deadline and `on_blocker` (the default when empty). The `Env` keeps the
/// daemon alive.
async fn quota_task(after: &str, on_blocker: &str) -> (Env, Client, pb::DelegateResponse) {
    let mut env = Env::new(&[]);
    let script = quota_once(&env, after);
    env.set_agents(&[("solo", &["sh", &script])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("solo", "do the thing");
    req.on_blocker = on_blocker.to_owned();
    req.timeout_ms = 60_000;
    let d = c.delegate(req).await.unwrap().into_inner();
    (env, c, d)
}

async fn status(c: &mut Client, id: &str) -> pb::TaskView {
    c.status(pb::StatusRequest { task_id: id.to_owned() }).await.unwrap().into_inner()
}

/// Polls the task's status until it shows `parked_until`.
async fn until_parked(c: &mut Client, id: &str) -> pb::TaskView {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = status(c, id).await;
        if !t.parked_until.is_empty() {
            return t;
        }
        assert!(Instant::now() < deadline, "the task never parked: {t:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn titles(t: &pb::TaskView) -> Vec<String> {
    json(&t.report_json)["findings"]
        .as_array()
        .map(|f| f.iter().map(|f| f["title"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_quota_with_a_reset_parks_the_task_and_the_agent_resumes_it_under_one_id() {
    let (env, mut c, d) = quota_task("2 seconds", "").await;
    // Named without a role: no chain to fall back on, so the default parks.
    let t = until_parked(&mut c, &d.task_id).await;
    assert_eq!(
        (t.task_id.as_str(), t.status().as_str(), t.phase().as_str()),
        (d.task_id.as_str(), "pending", "parked")
    );
    assert!(t.parked_reason.contains("try again in 2 seconds"), "{t:?}");
    let until = t.parked_until_ms.unwrap();
    let now = caesar_now_ms();
    assert!(until > now - 1_000 && until < now + 3_000, "parked until {until}, now {now}");
    assert_eq!(t.attempts.len(), 1, "{:?}", t.attempts);
    assert_eq!(t.attempts[0].stopped_by().as_str(), "rate_limit");
    // `caesar ps` and `caesar status` say so too.
    let ps = env.caesar(&["ps"]);
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(ps.contains("parked") && ps.contains(&t.parked_until), "{ps}");
    let st = env.caesar(&["status", &d.task_id]);
    let st = String::from_utf8_lossy(&st.stdout);
    assert!(st.contains(&format!("parked until {}", t.parked_until)), "{st}");
    let w = env.caesar(&["watch", "--once", &d.task_id]);
    let w = String::from_utf8_lossy(&w.stdout);
    // (cut to the terminal's width: no terminal here)
    assert!(w.contains(&d.task_id) && w.contains("pending") && w.contains("parked until 20"), "{w}");
    // A waiter on the first id sees the resumed attempt finish.
    let r = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((r.task_id.as_str(), r.status().as_str(), r.agent.as_str()), (d.task_id.as_str(), "succeeded", "solo"));
    assert_eq!(json(&r.report_json)["summary"], "resumed and done", "{r:?}");
    assert!(r.parked_until.is_empty());
    let resumed = status(&mut c, &r.current_task_id).await;
    let started = resumed.started_at.clone();
    assert!(!started.is_empty());
    // A generic agent cannot resume a session: its brief says why it starts again.
    let brief = std::fs::read_to_string(std::path::Path::new(&resumed.task_dir).join("task.json")).unwrap();
    assert!(brief.contains("stopped at the provider's quota"), "{brief}");
    // The blocked attempt's report says it parked.
    let logs = c
        .logs(pb::LogsRequest { task_id: d.task_id.clone(), limit: 100, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(logs.events_json.iter().any(|e| json(e)["type"] == "blocker"));
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(ps.tasks.len(), 2, "two runs, no more");
}

fn caesar_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn a_parked_task_is_cancelled_and_never_resumes() {
    let (_env, mut c, d) = quota_task("3 seconds", "park").await;
    until_parked(&mut c, &d.task_id).await;
    let r = c.cancel(pb::CancelRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(r.cancelled, "{r:?}");
    assert_eq!(r.status().as_str(), "cancelled");
    // Past the reset, nothing started again.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let t = status(&mut c, &d.task_id).await;
    assert_eq!((t.status().as_str(), t.parked_until.as_str()), ("cancelled", ""), "{t:?}");
    assert!(t.started_at.is_empty(), "the parked attempt never ran: {t:?}");
}

#[tokio::test]
async fn a_park_survives_a_daemon_sigkill_and_resumes_once() {
    let (mut env, mut c, d) = quota_task("3 seconds", "").await;
    let parked = until_parked(&mut c, &d.task_id).await;
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    let t = status(&mut c, &d.task_id).await;
    assert_eq!((t.status().as_str(), t.parked_until.as_str()), ("pending", parked.parked_until.as_str()), "{t:?}");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.status().as_str(), t.attempts.len()), ("succeeded", 1), "{t:?}");
    let ps = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(
        ps.tasks.len(),
        2,
        "{:?}",
        ps.tasks.iter().map(|t| (&t.task_id, t.status().as_str())).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_reset_past_the_deadline_is_not_parked() {
    let (_env, mut c, d) = quota_task("2 hours", "park").await;
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!((t.report_status.as_str(), t.blocker().as_str()), ("blocked", "rate_limit"), "{t:?}");
    assert!(t.attempts.is_empty() && t.parked_until.is_empty(), "{t:?}");
    let titles = titles(&t);
    assert!(titles.iter().any(|t| t.contains("not parked: the quota lifts after the task's deadline")), "{titles:?}");
}

#[tokio::test]
async fn caesar_run_passes_budget_and_on_blocker_flags_to_the_daemon() {
    let mut env = Env::new(&[]);
    let script = quota_once(&env, "2 seconds");
    env.set_agents(&[("solo", &["sh", &script]), ("idle", &["sleep", "30000"])]);
    let mut c = env.start_daemon().await;
    let out = env.caesar(&[
        "run",
        "--agent",
        "idle",
        "--detach",
        "--budget-tokens",
        "5000",
        "--budget-cost",
        "1.5",
        "--budget-wall",
        "10m",
        "--budget-turns",
        "7",
        "wait",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let b = status(&mut c, &id).await.budget.unwrap();
    let l = b.limits.unwrap();
    assert_eq!((l.tokens, l.cost_usd, l.wall_ms, l.turns), (Some(5000), Some(1.5), Some(600_000), Some(7)));
    c.cancel(pb::CancelRequest { task_id: id }).await.unwrap();
    // `--on-blocker fail`: the quota ends it blocked where the default would park.
    let out = env.caesar(&["run", "--agent", "solo", "--timeout", "60s", "--on-blocker", "fail", "--json", "go"]);
    let v = json(String::from_utf8_lossy(&out.stdout).trim());
    assert_eq!((v["report"]["status"].as_str(), v["blocker"].as_str()), (Some("blocked"), Some("rate_limit")), "{v}");
    assert!(v.get("parked_until").is_none() && v.get("current_task_id").is_none(), "{v}");
    // Bad flags are refused by name before anything is delegated.
    let out = env.caesar(&["run", "--agent", "solo", "--on-blocker", "retry", "go"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--on-blocker"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = env.caesar(&["run", "--agent", "solo", "--budget-tokens", "0", "go"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("budget.tokens"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = env.caesar(&["run", "--agent", "solo", "--budget-wall", "soon", "go"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--budget-wall"), "{}", String::from_utf8_lossy(&out.stderr));
}

// ------------------------------------------------------------ group budgets

fn usage(input: u64, output: u64) -> String {
    serde_json::json!({"type": "usage", "input_tokens": input, "output_tokens": output}).to_string()
}

/// Whether the task has stored a `usage` event.
async fn has_usage(c: &mut Client, id: &str) -> bool {
    let logs = c.logs(pb::LogsRequest { task_id: id.to_owned(), limit: 100, ..Default::default() }).await.unwrap();
    logs.into_inner().events_json.iter().any(|e| json(e)["type"] == "usage")
}

#[tokio::test]
async fn a_group_budget_stops_every_task_of_the_group_and_survives_a_restart() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    let (u400, u450) = (usage(300, 100), usage(350, 100));
    env.set_agents(&[
        ("g1", &["event", &u400, "wait-file", &gate, "event", &u450, "hang"]),
        ("g2", &["event", &u400, "hang"]),
    ]);
    let p = env.project.path().to_path_buf();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(&p);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("", "share the budget");
    req.agents = vec!["g1".into(), "g2".into()];
    req.mode = "read-only".into();
    req.budget = Some(pb::Budget { tokens: Some(1000), ..Default::default() });
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.task_ids.len(), 2, "{d:?}");
    // 800 of 1000 used, 400 each: no member is over alone, nor the group.
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in &d.task_ids {
        while !has_usage(&mut c, id).await {
            assert!(Instant::now() < deadline, "no usage stored for {id}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for id in &d.task_ids {
        let t = status(&mut c, id).await;
        assert_eq!(t.status().as_str(), "running", "{t:?}");
        assert!(t.budget.is_none(), "the budget is the group's, not each task's: {t:?}");
    }
    // The restarted daemon rebuilds the group's tally: g1's next 450 takes
    // the group past 1000 only if g2's 400 still count.
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    std::fs::write(&gate, "").unwrap();
    for id in &d.task_ids {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!((t.status().as_str(), t.report_status.as_str()), ("failed", "partial"), "{t:?}");
        let r = json(&t.report_json);
        let budget = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["title"].as_str().unwrap_or("").starts_with("budget: the tokens limit"))
            .unwrap_or_else(|| panic!("no budget finding: {r}"))
            .clone();
        let detail = budget["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("group {}", d.group_id))
                && detail.contains("1250 tokens used of a budget of 1000"),
            "{detail}"
        );
    }
}

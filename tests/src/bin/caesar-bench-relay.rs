//! The relay on blockers (issue 31), for BENCHMARKS.md: how long from a blocker of agent one
//! (which changed two files in its worktree) to agent two running in the same worktree, through
//! a real daemon. Agent one stamps the wall clock right before it prints its usage-limit blocker;
//! agent two stamps it as its first step. Between the two: the monitor sees the blocker and stops
//! agent one, the conclusion captures the worktree and diffs it, the relay row is stored, the
//! handoff brief is built, agent two is planned over the same workshop, queued and started
//! through the supervisor and its box.
//!
//! With `--budget`, agent one's stop is its own token budget instead (issue 31: relay on a
//! budget stop): it stamps the clock, then prints usage past a budget of 1,000 tokens.
//!
//! Agent one is named (with the role's chain behind it): the quota ledger would otherwise
//! give the role's next agent the second run outright.
//!
//! `caesar-bench-relay [--runs N] [--budget]` (default 10 runs, a quota blocker).

use std::time::Duration;

use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, commit_project};

fn stamps(path: &std::path::Path) -> Vec<i128> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent").display().to_string();
    let home = tempfile::Builder::new().prefix("cr").tempdir_in("/tmp")?;
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let (one_at, two_at) = (files.join("one"), files.join("two"));
    let budget = args.iter().any(|a| a == "--budget");
    let quota = if budget {
        serde_json::json!({"type": "usage", "input_tokens": 700, "output_tokens": 400})
    } else {
        serde_json::json!({"type": "blocker", "kind": "rate_limit", "message": "You've hit your usage limit."})
    };
    let one = serde_json::json!([
        "write",
        "a.txt",
        "a\n",
        "write",
        "b.txt",
        "b\n",
        "stamp",
        one_at.display().to_string(),
        "event",
        quota.to_string(),
        "hang"
    ]);
    let two = serde_json::json!(["stamp", two_at.display().to_string(), "report", "success", "two finished"]);
    let project = tempfile::tempdir()?;
    let p = project.path();
    std::fs::write(p.join("README.md"), "hello\n")?;
    commit_project(
        p,
        &format!(
            "[[agent]]\nid = \"one\"\nbin = {fake:?}\nargs = {one}\n\n[[agent]]\nid = \"two\"\nbin = {fake:?}\nargs = {two}\n\n\
             [[role]]\nname = \"pair\"\nagents = [\"one\", \"two\"]\nmode = \"write\"\nisolation = \"worktree\"\n"
        ),
    )?;
    let mut daemon = BenchDaemon::start(&bin_dir, home.path(), "warn", &[("CAESAR_KILL_GRACE_MS", "200")]).await?;
    let c = &mut daemon.client;
    let mut ms = Vec::new();
    for run in 0..runs {
        let d = c
            .delegate(pb::DelegateRequest {
                objective: format!("write a and b ({run})"),
                role: "pair".into(),
                agent: "one".into(),
                mode: "write".into(),
                budget: budget.then_some(pb::Budget { tokens: Some(1000), ..Default::default() }),
                workspace: p.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let r = c
            .r#await(pb::AwaitRequest {
                task_ids: vec![d.task_id.clone()],
                timeout_ms: 60_000,
                wake_on_attention: false,
            })
            .await?
            .into_inner();
        let t = r.tasks.first().ok_or("no task")?;
        if t.agent != "two" || t.status() != pb::TaskStatus::Succeeded {
            return Err(format!("run {run}: not relayed: {} {:?} {}", t.agent, t.status(), t.error).into());
        }
        let (a, b) = (stamps(&one_at), stamps(&two_at));
        let (Some(a), Some(b)) = (a.get(run), b.get(run)) else { return Err("a stamp is missing".into()) };
        ms.push((b - a) as f64 / 1e6);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop().await;
    let mut sorted = ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| sorted[((sorted.len() as f64 - 1.0) * q).round() as usize];
    println!("runs: {}", ms.iter().map(|m| format!("{m:.0}")).collect::<Vec<_>>().join(", "));
    println!(
        "| runs | blocker → agent two running: median (ms) | p90 (ms) | best (ms) | worst (ms) |\n|---|---|---|---|---|\n| {runs} | {:.0} | {:.0} | {:.0} | {:.0} |",
        pick(0.5),
        pick(0.9),
        sorted[0],
        sorted[sorted.len() - 1]
    );
    Ok(())
}

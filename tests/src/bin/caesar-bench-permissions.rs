//! Latency of claude's control protocol through caesar (issue 15, "Measure"), for
//! BENCHMARKS.md: a process speaking claude's stream-json control protocol (configured as
//! `[bin] claude`, `tests/agents/claude_control_agent.py`) asks `can_use_tool` in a loop through
//! a real daemon; each request carries the agent's CLOCK_MONOTONIC stamp, so the bench times
//! P15a request printed → pending question visible to `Await`, and P15b `Answer` called →
//! control response read by the agent (the next request carries that stamp).
//!
//! `caesar-bench-permissions [--rounds N] [--remote]`. `--remote` runs the task on the
//! Kubernetes runner against the simulator as the tests start it (`k8s-sim`, whose process
//! kubelet runs the pod's supervisor and the agent as local processes, so both clocks are this
//! machine's; "the image" a directory holding the agent as `claude`): the request comes through
//! the pod's log stream mirrored into raw.log, the answer through the stdin pump's `pods/exec`
//! stream into the pod's FIFO.

use std::path::Path;

use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, SimCluster, commit_project};

/// CLOCK_MONOTONIC in nanoseconds, the clock Python's `time.monotonic_ns` reads.
fn monotonic_ns() -> i64 {
    let mut ts = nix::libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[((v.len() - 1) as f64 * p).round() as usize] }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let remote = args.iter().any(|a| a == "--remote");
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/claude_control_agent.py");
    let home = tempfile::Builder::new().prefix("cp").tempdir_in("/tmp")?;
    // A pod runs the agent by its CLI's name from the image's PATH: the agent is `claude` there.
    let image = home.path().join("image");
    std::fs::create_dir_all(&image)?;
    std::os::unix::fs::symlink(&agent, image.join("claude"))?;
    let agent = image.join("claude");
    let project = tempfile::tempdir()?;
    let p = project.path();
    commit_project(
        p,
        &format!("[policy]\nallow_recursion = true\n\n[bin]\nclaude = {:?}\n", agent.display().to_string()),
    )?;
    let _cluster = if remote {
        let path = format!("{}:{}:{}", image.display(), bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let cluster = SimCluster::start(&bin_dir, &path)?;
        std::fs::write(p.join(".caesar/config.local.toml"), cluster.runner_config())?;
        Some(cluster)
    } else {
        None
    };
    let mut daemon = BenchDaemon::start(&bin_dir, home.path(), "warn", &[]).await?;
    let c = &mut daemon.client;
    let d = c
        .delegate(pb::DelegateRequest {
            objective: format!("bench {rounds}"),
            agent: "claude".into(),
            workspace: p.display().to_string(),
            mode: "write".into(),
            isolation: "worktree".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let id = d.task_id;
    let (mut visible, mut delivered) = (Vec::new(), Vec::new());
    let mut answered_at: Option<i64> = None;
    for _ in 0..rounds {
        let q = loop {
            let r = c
                .r#await(pb::AwaitRequest { task_ids: vec![id.clone()], timeout_ms: 30_000, wake_on_attention: true })
                .await?
                .into_inner();
            if let Some(q) = r.tasks[0].pending_questions.first() {
                break q.clone();
            }
            if !r.tasks[0].report_json.is_empty() {
                return Err(format!("the agent ended early: {}", r.tasks[0].report_json).into());
            }
        };
        let seen = monotonic_ns();
        let input: serde_json::Value = serde_json::from_str(&q.input_json)?;
        let sent = input["sent_ns"].as_i64().ok_or("no sent_ns in the input")?;
        visible.push((seen - sent) as f64 / 1e6);
        if let (Some(at), Some(got)) = (answered_at, input["prev_received_ns"].as_i64()) {
            delivered.push((got - at) as f64 / 1e6);
        }
        answered_at = Some(monotonic_ns());
        c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id, answer: "allow".into() }).await?;
    }
    let _ = c.cancel(pb::CancelRequest { task_id: id.clone() }).await;
    println!("| figure | median (ms) | p95 (ms) | max (ms) | target |");
    println!("|---|---|---|---|---|");
    let (a, b, target) = if remote {
        ("P15a remote can_use_tool printed → visible to Await", "P15b remote Answer → read by the agent", "none yet")
    } else {
        (
            "P15a claude can_use_tool printed → visible to Await",
            "P15b Answer → control response read by the agent",
            "≤ 5 ms",
        )
    };
    for (name, v) in [(a, &mut visible), (b, &mut delivered)] {
        let max = v.iter().copied().fold(0.0, f64::max);
        let n = v.len();
        println!("| {name} (n={n}) | {:.2} | {:.2} | {max:.2} | {target} |", percentile(v, 0.5), percentile(v, 0.95));
    }
    daemon.stop().await;
    Ok(())
}

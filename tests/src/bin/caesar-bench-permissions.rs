//! Latency of claude's control protocol through caesar (issue 15, "Measure"), for
//! BENCHMARKS.md: a process speaking claude's stream-json control protocol (configured as
//! `[bin] claude`, `tests/agents/claude_control_agent.py`) asks `can_use_tool` in a loop through
//! a real daemon; each request carries the agent's CLOCK_MONOTONIC stamp, so the bench times
//! P15a request printed → pending question visible to `Await`, and P15b `Answer` called →
//! control response read by the agent (the next request carries that stamp).
//!
//! `caesar-bench-permissions [--rounds N]`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use caesar_proto::client;
use caesar_proto::paths::Paths;
use caesar_proto::pb;

fn git(dir: &Path, args: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let ok = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@b", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()?
        .success();
    if ok { Ok(()) } else { Err(format!("git {args:?} failed").into()) }
}

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
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/claude_control_agent.py");
    let home = tempfile::Builder::new().prefix("cp").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    let p = project.path();
    std::fs::create_dir_all(p.join(".caesar"))?;
    std::fs::write(p.join(".gitignore"), ".caesar/\n")?;
    std::fs::write(
        p.join(".caesar/config.toml"),
        format!("[policy]\nallow_recursion = true\n\n[bin]\nclaude = {:?}\n", agent.display().to_string()),
    )?;
    git(p, &["init", "-q"])?;
    git(p, &["add", "-A"])?;
    git(p, &["commit", "-qm", "base"])?;
    let paths = Paths::under(home.path());
    let mut daemon = Command::new(bin_dir.join("caesard"))
        .env("CAESAR_HOME", home.path())
        .env("CAESAR_LOG", "warn")
        // The project's `[bin]` is honoured only in a trusted project (issue 19).
        .env("CAESAR_TRUST_PREFIX", p)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut c = client::wait_until_ready(&paths, Duration::from_secs(20)).await?;
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
    let _ = c.cancel(pb::CancelRequest { task_id: id.clone(), ..Default::default() }).await;
    println!("| figure | median (ms) | p95 (ms) | max (ms) | target |");
    println!("|---|---|---|---|---|");
    for (name, v) in [
        ("P15a claude can_use_tool printed → visible to Await", &mut visible),
        ("P15b Answer → control response read by the agent", &mut delivered),
    ] {
        let max = v.iter().copied().fold(0.0, f64::max);
        println!("| {name} | {:.2} | {:.2} | {max:.2} | ≤ 5 ms |", percentile(v, 0.5), percentile(v, 0.95));
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    Ok(())
}

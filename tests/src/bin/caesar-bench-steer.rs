//! Steer latency per protocol (issue 31, "Measure and report"), for BENCHMARKS.md: through a
//! real daemon and its supervisor, from the `Steer` RPC sent to the agent's stamp as soon as it
//! read the steer. Scripted agents stand in for the CLIs, so only caesar's part is measured:
//!
//! - `stream-json (claude) stdin_message`: a stream-json stand-in as `claude` (through `[bin]`)
//!   that stamps every user message it reads on its held stdin; `--runs` steers to one running
//!   task, one after the other, each once the previous one was read.
//! - `ACP cancel_then_prompt (--interrupt)`: `fake-acp` as `qwen`, whose first turn waits on a
//!   permission question; a steer with `--interrupt` ends that turn (`session/cancel`) and comes
//!   as the next `session/prompt`, stamped when read. One task per steer.
//! - `ACP next_prompt`: the same, without `--interrupt`: the steer waits for the turn's end,
//!   so it is measured from the `Answer` RPC that lets the turn end (steer sent before it).
//!
//! The `Steer` RPC's own round trip (stored, then acknowledged) is printed too. Every stamp is
//! wall-clock nanoseconds on this machine. `caesar-bench-steer [--runs N]` (default 50 steers
//! for stream-json, N/2 tasks for each ACP route).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use caesar_proto::client::Client;
use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, BenchResult, commit_project};

/// The stream-json stand-in: reads its prompt, says it works, and stamps each user message
/// read on stdin (a steer) until stdin closes; it never ends its turn.
const CLAUDE: &str = r#"#!/usr/bin/env python3
import json, sys, time
STAMPS = "@STAMPS@"
def say(v):
    print(json.dumps(v, separators=(",", ":")), flush=True)
sys.stdin.readline()
say({"type": "system", "subtype": "init", "session_id": "s-bench"})
say({"type": "assistant", "message": {"content": [{"type": "text", "text": "working"}]}})
while True:
    line = sys.stdin.readline()
    if not line:
        break
    t = time.time_ns()
    if '"type":"user"' in line.replace(" ", ""):
        with open(STAMPS, "a") as f:
            f.write("%d\n" % t)
"#;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn stamps(path: &Path) -> Vec<u128> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn ms(from: u128, to: u128) -> f64 {
    to.saturating_sub(from) as f64 / 1e6
}

fn print(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        println!("{name:<52} no samples");
        return;
    }
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<52} min {:>7.3}  median {:>7.3}  p95 {:>7.3}  max {:>7.3} ms  (n={})",
        v[0],
        p(0.5),
        p(0.95),
        v[v.len() - 1],
        v.len()
    );
}

/// Waits until `path` holds more than `n` stamps; returns stamp `n`.
async fn stamp_after(path: &Path, n: usize, what: &str) -> BenchResult<u128> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = stamps(path).get(n) {
            return Ok(*t);
        }
        if Instant::now() > until {
            return Err(format!("{what}: no stamp {n} in {} within 60 s", path.display()).into());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// A task of `agent`: read-only in place for claude; a write task in a worktree for the ACP
/// agent, whose permission question a read-only task would not ask the caller.
fn request(agent: &str, workspace: &Path) -> pb::DelegateRequest {
    let write = agent == "qwen";
    pb::DelegateRequest {
        objective: "work until steered".into(),
        agent: agent.into(),
        mode: if write { "write" } else { "read-only" }.into(),
        isolation: if write { "worktree" } else { "inplace" }.into(),
        workspace: workspace.display().to_string(),
        timeout_ms: 600_000,
        ..Default::default()
    }
}

/// Steers one running stream-json task `runs` times; returns (sent→read, RPC round trip).
async fn stream_json(
    c: &mut Client,
    project: &Path,
    stamp_file: &Path,
    runs: usize,
) -> BenchResult<(Vec<f64>, Vec<f64>)> {
    let d = c.delegate(request("claude", project)).await?.into_inner();
    // Running, with its session open: the first steer may wait for the start, the rest not.
    let until = Instant::now() + Duration::from_secs(60);
    while c.status(pb::StatusRequest { task_id: d.task_id.clone() }).await?.into_inner().status().as_str() != "running"
    {
        if Instant::now() > until {
            return Err("the stream-json task never ran".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut read, mut rpc) = (Vec::new(), Vec::new());
    // One warm-up steer, not counted: the agent may not have read its prompt yet.
    for i in 0..=runs {
        let sent = now_ns();
        c.steer(pb::SteerRequest { task_id: d.task_id.clone(), text: format!("steer {i}"), interrupt: false }).await?;
        let acked = now_ns();
        let got = stamp_after(stamp_file, i, "stream-json").await?;
        if i > 0 {
            read.push(ms(sent, got));
            rpc.push(ms(sent, acked));
        }
    }
    c.cancel(pb::CancelRequest { task_id: d.task_id.clone() }).await?;
    Ok((read, rpc))
}

/// One ACP task per steer: its first turn waits on a permission question; the steer (with
/// `interrupt`, or released by the answer) comes as the next prompt. Returns the latencies.
async fn acp(c: &mut Client, project: &Path, stamp_file: &Path, runs: usize, interrupt: bool) -> BenchResult<Vec<f64>> {
    let mut out = Vec::new();
    let _ = std::fs::remove_file(stamp_file);
    for i in 0..runs {
        let d = c.delegate(request("qwen", project)).await?.into_inner();
        let qid = loop {
            let r = c
                .r#await(pb::AwaitRequest {
                    task_ids: vec![d.task_id.clone()],
                    timeout_ms: 30_000,
                    wake_on_attention: true,
                })
                .await?
                .into_inner();
            let t = r.tasks.first().ok_or("no task in the await")?;
            if let Some(q) = t.pending_questions.first() {
                break q.question_id.clone();
            }
            if !t.report_json.is_empty() {
                return Err(format!("the ACP task ended before its question: {}", t.error).into());
            }
        };
        let sent = now_ns();
        c.steer(pb::SteerRequest { task_id: d.task_id.clone(), text: format!("steer {i}"), interrupt }).await?;
        let from = if interrupt {
            sent
        } else {
            let answered = now_ns();
            c.answer(pb::AnswerRequest { task_id: d.task_id.clone(), question_id: qid, answer: "allow".into() })
                .await?;
            answered
        };
        let got = stamp_after(stamp_file, i, "ACP").await?;
        out.push(ms(from, got));
        c.r#await(pb::AwaitRequest { task_ids: vec![d.task_id.clone()], timeout_ms: 30_000, wake_on_attention: false })
            .await?;
    }
    Ok(out)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--runs takes a number")?,
        None => 50,
    }
    .max(2);
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let home = tempfile::Builder::new().prefix("cs").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    // Beneath `files/`, made before any task starts: the agents may write there.
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let (claude_stamps, acp_stamps) = (files.join("claude-steers"), files.join("acp-steers"));
    let claude = home.path().join("claude");
    std::fs::write(&claude, CLAUDE.replace("@STAMPS@", &claude_stamps.display().to_string()))?;
    let qwen = home.path().join("qwen");
    std::fs::write(
        &qwen,
        format!(
            "#!/bin/sh\nexec '{}' stamp-steer '{}' ask 'echo hi' say 'first turn'\n",
            bin_dir.join("fake-acp").display(),
            acp_stamps.display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    for s in [&claude, &qwen] {
        std::fs::set_permissions(s, std::fs::Permissions::from_mode(0o755))?;
    }
    let config = format!(
        "[policy]\nallow_recursion = true\n\n[bin]\nclaude = {:?}\nqwen = {:?}\n",
        claude.display().to_string(),
        qwen.display().to_string()
    );
    commit_project(project.path(), &config)?;
    let mut daemon = BenchDaemon::start(&bin_dir, home.path(), "warn", &[("CAESAR_KILL_GRACE_MS", "200")]).await?;
    let c = &mut daemon.client;
    let (read, rpc) = stream_json(c, project.path(), &claude_stamps, runs).await?;
    let tasks = (runs / 2).max(2);
    let interrupted = acp(c, project.path(), &acp_stamps, tasks, true).await?;
    let next = acp(c, project.path(), &acp_stamps, tasks, false).await?;
    print("Steer RPC round trip (stored, acknowledged)", rpc);
    print("stream-json (claude) stdin_message: sent→agent read", read);
    print("ACP cancel_then_prompt (--interrupt): sent→agent read", interrupted);
    print("ACP next_prompt: turn released (answer)→agent read", next);
    daemon.stop().await;
    Ok(())
}

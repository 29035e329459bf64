//! caesar-bench: measures caesar against its latency targets with a real
//! daemon on a temporary CAESAR_HOME and the scripted fake agent, and prints
//! min, median and max of each figure.
//!
//! ```sh
//! cargo build --release -p caesar-tests -p caesard -p caesar-cli
//! target/release/caesar-bench [--runs N]
//! ```
//!
//! Figures:
//! - `run→agent`: `caesar run` spawned as a whole process, to the agent's
//!   first instruction (its wall-clock stamp).
//! - `delegate→agent` (P2): the Delegate RPC sent, to the agent's stamp.
//! - `delegate+await` (P3): Delegate, then Await, of an agent that writes a
//!   report and exits, until the report is in hand.
//! - `exit→await` (P4): the agent's stamp just before it exits, to Await
//!   returning its report.
//! - `status process` (P7): `caesar status <id> --json` as a whole process.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use caesar_proto::client;
use caesar_proto::paths::Paths;
use caesar_proto::pb;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

struct Figure {
    name: &'static str,
    target: &'static str,
    samples: Vec<f64>,
}

impl Figure {
    fn new(name: &'static str, target: &'static str) -> Figure {
        Figure { name, target, samples: Vec::new() }
    }

    fn print(&mut self) {
        self.samples.sort_by(|a, b| a.total_cmp(b));
        let n = self.samples.len();
        if n == 0 {
            println!("| {} | - | - | - | {} |", self.name, self.target);
            return;
        }
        let median =
            if n % 2 == 1 { self.samples[n / 2] } else { (self.samples[n / 2 - 1] + self.samples[n / 2]) / 2.0 };
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {} |",
            self.name,
            self.samples[0],
            median,
            self.samples[n - 1],
            self.target
        );
    }
}

fn ms(ns: u128) -> f64 {
    ns as f64 / 1e6
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut runs = 30usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--runs") {
        runs = args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--runs takes a number")?;
    }
    let bin_dir: PathBuf = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent");
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    let stamp = home.path().join("stamp");
    let s = stamp.display().to_string();
    let f = fake.display().to_string();
    std::fs::create_dir_all(project.path().join(".caesar"))?;
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"stamp\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"report\", \"success\", \"done\", \"stamp\", {s:?}]\n"
        ),
    )?;
    let paths = Paths::under(home.path());
    let envs = [("CAESAR_HOME", home.path().display().to_string()), ("CAESAR_LOG", "warn".to_owned())];
    let mut daemon = Command::new(bin_dir.join("caesard"))
        .envs(envs.iter().cloned())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut c = client::wait_until_ready(&paths, Duration::from_secs(20)).await?;
    let workspace = project.path().display().to_string();
    let request = || pb::DelegateRequest {
        objective: "bench".into(),
        agent: "stamp".into(),
        workspace: workspace.clone(),
        ..Default::default()
    };

    let mut run_to_agent = Figure::new("run→agent (caesar run process)", "-");
    let mut delegate_to_agent = Figure::new("P2 delegate→agent started", "≤ 5 ms");
    let mut round_trip = Figure::new("P3 delegate+await, agent reports and exits", "≤ 20 ms");
    let mut wake = Figure::new("P4 agent exit→await returns", "≤ 2 ms");
    let mut status = Figure::new("P7 `caesar status --json` process", "≤ 10 ms");
    let mut last_id = String::new();

    for _ in 0..runs {
        let _ = std::fs::remove_file(&stamp);
        let t0 = now_ns();
        let started = Instant::now();
        let id = c.delegate(request()).await?.into_inner().task_id;
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.clone()], timeout_ms: 30_000, wake_on_attention: false })
            .await?
            .into_inner();
        let t_done = now_ns();
        let elapsed = started.elapsed();
        if r.tasks.first().map(|t| t.status.as_str()) != Some("succeeded") {
            return Err(format!("task {id} did not succeed: {:?}", r.tasks.first().map(|t| &t.status)).into());
        }
        let stamps: Vec<u128> = std::fs::read_to_string(&stamp)?.lines().filter_map(|l| l.parse().ok()).collect();
        delegate_to_agent.samples.push(ms(stamps[0].saturating_sub(t0)));
        round_trip.samples.push(elapsed.as_secs_f64() * 1000.0);
        wake.samples.push(ms(t_done.saturating_sub(stamps[1])));
        last_id = id;
    }

    for _ in 0..runs.min(20) {
        let _ = std::fs::remove_file(&stamp);
        let t0 = now_ns();
        let out = Command::new(bin_dir.join("caesar"))
            .args(["--json", "run", "--agent", "stamp", "bench"])
            .current_dir(project.path())
            .envs(envs.iter().cloned())
            .output()?;
        if !out.status.success() {
            return Err(format!("caesar run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        run_to_agent.samples.push(ms(first_stamp(&stamp).saturating_sub(t0)));
    }

    for _ in 0..runs {
        let started = Instant::now();
        let out = Command::new(bin_dir.join("caesar"))
            .args(["--json", "status", &last_id])
            .envs(envs.iter().cloned())
            .output()?;
        if !out.status.success() {
            return Err("caesar status failed".into());
        }
        status.samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }

    // P9: the return channel's round trip, spoken over gRPC as caesar-mcp
    // --channel speaks it: ask, visible to await, answered, delivered.
    let gate = home.path().join("gate");
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"asker\"\nbin = {f:?}\nargs = [\"env\", \"CAESAR_CHANNEL_SECRET\", \"wait-file\", {:?}]\n",
            gate.display().to_string()
        ),
    )?;
    let mut req = request();
    req.agent = "asker".into();
    req.channel = true;
    let asker = c.delegate(req).await?.into_inner();
    let raw = std::path::Path::new(&asker.task_dir).join("raw.log");
    let secret = loop {
        if let Ok(t) = std::fs::read_to_string(&raw)
            && let Some(s) = t.lines().next().and_then(|l| l.strip_prefix("CAESAR_CHANNEL_SECRET="))
        {
            break s.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let scope = pb::ChannelRequest { task_id: asker.task_id.clone(), secret };
    let mut visible = Figure::new("P9a ask→visible to await", "-");
    let mut answered = Figure::new("P9b visible→answer stored", "-");
    let mut delivered = Figure::new("P9c answer→delivered to the agent", "-");
    let mut round = Figure::new("P9 ask→answer delivered, round trip", "≤ 10 ms");
    let trips = runs.max(100);
    for i in 0..trips {
        let mut channel = c.clone();
        let ask = pb::AskOrchestratorRequest {
            channel: Some(scope.clone()),
            question: format!("question {i}?"),
            options: vec![],
            timeout_ms: 30_000,
            question_id: format!("q_bench{i}"),
        };
        let t0 = Instant::now();
        let pending = tokio::spawn(async move { channel.ask_orchestrator(ask).await });
        let r = c
            .r#await(pb::AwaitRequest {
                task_ids: vec![asker.task_id.clone()],
                timeout_ms: 30_000,
                wake_on_attention: true,
            })
            .await?
            .into_inner();
        let t1 = Instant::now();
        let qid = r.tasks[0].pending_questions.first().map(|q| q.question_id.clone()).ok_or("no pending question")?;
        c.answer(pb::AnswerRequest { task_id: asker.task_id.clone(), question_id: qid, answer: "yes".into() }).await?;
        let t2 = Instant::now();
        let got = pending.await??.into_inner();
        let t3 = Instant::now();
        if !got.answered {
            return Err("the answer was not delivered".into());
        }
        visible.samples.push((t1 - t0).as_secs_f64() * 1000.0);
        answered.samples.push((t2 - t1).as_secs_f64() * 1000.0);
        delivered.samples.push((t3 - t2).as_secs_f64() * 1000.0);
        round.samples.push((t3 - t0).as_secs_f64() * 1000.0);
    }
    std::fs::write(&gate, "go")?;

    println!(
        "caesar-bench: {runs} runs ({trips} channel round trips), medians in ms, {} cores",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("| figure | min | median | max | target |");
    println!("|---|---|---|---|---|");
    for f in [
        &mut run_to_agent,
        &mut delegate_to_agent,
        &mut round_trip,
        &mut wake,
        &mut status,
        &mut visible,
        &mut answered,
        &mut delivered,
        &mut round,
    ] {
        f.print();
    }
    let _ = c.shutdown(pb::ShutdownRequest { cancel_tasks: true, only_if_idle: false }).await;
    let _ = daemon.wait();
    Ok(())
}

fn first_stamp(file: &Path) -> u128 {
    std::fs::read_to_string(file).unwrap_or_default().lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0)
}

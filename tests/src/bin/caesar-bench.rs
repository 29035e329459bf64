//! caesar-bench: measures caesar against its latency targets with a real
//! daemon on a temporary CAESAR_HOME and the scripted fake agent, and prints
//! min, median and max of each figure.
//!
//! ```sh
//! cargo build --release -p caesar -p caesar-tests
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
//! - P1: `caesar-mcp` cold start: spawn, initialize, tools/list answered.
//! - P5: 200 tasks delegated at once with max_parallel 200: wall time to
//!   all reports, and the daemon's peak RSS.
//! - P6: provider parser throughput over the real captures, one core.
//! - P8: `Logs` with limit 50 on a task with 1,000,000 events.
//! - P9: the return channel's round trip, step by step.
//! - P10: the idle daemon's RSS, and its CPU over `--idle-seconds` (60).
//!
//! `--lifecycle` measures only issue 17's figures: a quota blocker to the
//! fallback agent running (`--runs` samples), and the budget tally and
//! network watch per event.
//!
//! `--acp` measures only ACP's permission round trip (issue 15, `caesar-bench-acp`).
//!
//! `--breakdown` measures only where P3's milliseconds go, step by step
//! (issue 33, `caesar-bench/breakdown.rs`).
//!
//! `--store-tasks N` fills a store with N ended tasks, then times `caesar ps`,
//! `caesar ps --all`, `caesar status` and the dashboard's first paint against it;
//! `--at-once N` delegates N tasks at once from 10 clients and times until all
//! N agents started, with the daemon's peak RSS (issue 33, `caesar-bench/scale.rs`);
//! `--read-only-tree N` times a read-only `caesar run` in a repository of N files.
//!
//! `--quick` shrinks P8 to 100,000 events and P10 to 5 s.
//!
//! `--prepare` measures only preparation, on a repository whose
//! `[worktree] setup` sleeps 5 s: the time a write task's Delegate takes to
//! answer (`--runs` samples), and eight such tasks delegated at once with
//! `max_parallel = 8` (and the default preparation parallelism): the time until all
//! eight agents run (3 samples).
//!
//! `--compare-mcp 'PROGRAM ARGS…'` measures only P1 and P3, both over MCP,
//! against caesar-mcp and another MCP stdio server (another caesar) in the
//! same run, interleaved, and prints both and the ratio of their medians. The
//! command line is split on whitespace, without quoting; `{project}` in it
//! becomes the bench's project directory, which is also the server's working
//! directory. `--compare-env NAME=VALUE` (repeatable) adds to its
//! environment. The agent, declared in the project's `.caesar/config.toml`,
//! stamps, sleeps `--compare-agent-ms` (20), writes its report and exits; an
//! agent that exits at once is a case some servers miss.
//!
//! ```sh
//! target/release/caesar-bench --runs 20 \
//!     --compare-mcp '/path/to/node /path/to/caesar/packages/cli/dist/bin.js mcp serve --root {project}'
//! ```

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use caesar_proto::client;
use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, git};
use serde_json::{Value, json};

#[path = "caesar-bench/breakdown.rs"]
mod breakdown;
#[path = "caesar-bench/lifecycle.rs"]
mod lifecycle;
#[path = "caesar-bench/scale.rs"]
mod scale;

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

    /// Min, median and max, or None without samples.
    fn stats(&mut self) -> Option<(f64, f64, f64)> {
        self.samples.sort_by(|a, b| a.total_cmp(b));
        let n = self.samples.len();
        if n == 0 {
            return None;
        }
        let median =
            if n % 2 == 1 { self.samples[n / 2] } else { (self.samples[n / 2 - 1] + self.samples[n / 2]) / 2.0 };
        Some((self.samples[0], median, self.samples[n - 1]))
    }

    fn print(&mut self) {
        match self.stats() {
            None => println!("| {} | - | - | - | {} |", self.name, self.target),
            Some((min, median, max)) => {
                println!("| {} | {:.2} | {:.2} | {:.2} | {} |", self.name, min, median, max, self.target)
            }
        }
    }
}

/// Prints `figures` as one markdown table, `first_column` naming its rows.
fn print_table<'a>(first_column: &str, figures: impl IntoIterator<Item = &'a mut Figure>) {
    println!("| {first_column} | min | median | max | target |");
    println!("|---|---|---|---|---|");
    for f in figures {
        f.print();
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
    let quick = args.iter().any(|a| a == "--quick");
    let mut idle_seconds = if quick { 5 } else { 60 };
    if let Some(i) = args.iter().position(|a| a == "--idle-seconds") {
        idle_seconds = args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--idle-seconds takes a number")?;
    }
    let compare = match args.iter().position(|a| a == "--compare-mcp") {
        None => None,
        Some(i) => {
            let line = args.get(i + 1).ok_or("--compare-mcp takes a command line")?;
            let mut envs = Vec::new();
            for (k, a) in args.iter().enumerate() {
                if a == "--compare-env" {
                    let (name, value) =
                        args.get(k + 1).and_then(|v| v.split_once('=')).ok_or("--compare-env takes NAME=VALUE")?;
                    envs.push((name.to_owned(), value.to_owned()));
                }
            }
            let mut agent_ms = 20u64;
            if let Some(k) = args.iter().position(|a| a == "--compare-agent-ms") {
                agent_ms = args.get(k + 1).and_then(|v| v.parse().ok()).ok_or("--compare-agent-ms takes a number")?;
            }
            Some((line.split_whitespace().map(str::to_owned).collect::<Vec<_>>(), envs, agent_ms))
        }
    };
    let bin_dir: PathBuf = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent");
    if args.iter().any(|a| a == "--lifecycle") {
        return lifecycle::figures(&bin_dir, runs).await;
    }
    if args.iter().any(|a| a == "--breakdown") {
        return breakdown::figures(&bin_dir, runs).await;
    }
    if let Some(i) = args.iter().position(|a| a == "--store-tasks") {
        let n = args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--store-tasks takes a number")?;
        return scale::store_figures(&bin_dir, n, runs).await;
    }
    if let Some(i) = args.iter().position(|a| a == "--read-only-tree") {
        let n = args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--read-only-tree takes a number")?;
        return scale::read_only_tree_figures(&bin_dir, n, runs).await;
    }
    if let Some(i) = args.iter().position(|a| a == "--at-once") {
        let n = args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--at-once takes a number")?;
        return scale::at_once_figures(&bin_dir, n).await;
    }
    if args.iter().any(|a| a == "--prepare") {
        return prepare_figures(&bin_dir, runs).await;
    }
    if args.iter().any(|a| a == "--radar") {
        // The conflict radar's figures (issue 17) live in their own binary.
        let ok = Command::new(bin_dir.join("caesar-bench-radar")).args(&args[1..]).status()?.success();
        return if ok { Ok(()) } else { Err("caesar-bench-radar failed".into()) };
    }
    if args.iter().any(|a| a == "--acp") {
        // ACP's permission round trip (issue 15) lives in its own binary.
        let ok = Command::new(bin_dir.join("caesar-bench-acp")).args(&args[1..]).status()?.success();
        return if ok { Ok(()) } else { Err("caesar-bench-acp failed".into()) };
    }
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    // What the agents write goes beneath `files/`, made now: caesar's own
    // directories are carved out of the agents' /tmp, and with them new
    // entries beside them in CAESAR_HOME (issue 19).
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let stamp = files.join("stamp");
    let s = stamp.display().to_string();
    let f = fake.display().to_string();
    std::fs::create_dir_all(project.path().join(".caesar"))?;
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"stamp\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"report\", \"success\", \"done\", \"stamp\", {s:?}]\n"
        ),
    )?;
    // The daemon's environment, which caesar-mcp gets too.
    let envs = [
        ("CAESAR_HOME", home.path().display().to_string()),
        ("CAESAR_LOG", "warn".to_owned()),
        ("CAESAR_TRUST_PREFIX", std::env::temp_dir().display().to_string()),
    ];
    let daemon = BenchDaemon::start(&bin_dir, home.path(), "warn", &[]).await?;
    let mut c = daemon.client.clone();
    let ours = McpCommand {
        program: bin_dir.join("caesar-mcp").display().to_string(),
        args: vec!["--root".into(), project.path().display().to_string()],
        envs: envs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
        cwd: project.path().to_path_buf(),
        stderr: None,
    };
    if let Some((line, extra_envs, agent_ms)) = compare {
        let p = project.path().display().to_string();
        let mut words = line.into_iter().map(|w| w.replace("{project}", &p));
        let theirs = McpCommand {
            program: words.next().ok_or("--compare-mcp: the command line is empty")?,
            args: words.collect(),
            envs: extra_envs,
            cwd: project.path().to_path_buf(),
            stderr: Some(home.path().join("compare-stderr.log")),
        };
        let agent = format!(
            "[[agent]]\nid = \"sleepy\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"sleep\", \"{agent_ms}\", \"report\", \"success\", \"done\", \"stamp\", {s:?}]\n"
        );
        std::fs::write(project.path().join(".caesar/config.toml"), agent)?;
        let result = compare_mcp(&ours, &theirs, runs, agent_ms, &stamp);
        daemon.stop().await;
        return result;
    }
    let daemon_pid = daemon.pid();
    // P10: the daemon idle, fresh, before any load.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu0 = proc_cpu_ticks(daemon_pid);
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let cpu1 = proc_cpu_ticks(daemon_pid);
    let mut idle_rss = Figure::new("P10 idle daemon RSS (MB)", "≤ 15 MB");
    idle_rss.samples.push(proc_kb(daemon_pid, "VmRSS:") as f64 / 1024.0);
    let mut idle_cpu = Figure::new("P10 idle daemon CPU (% of one core)", "~0");
    idle_cpu.samples.push((cpu1 - cpu0) as f64 / 100.0 / idle_seconds as f64 * 100.0);

    let workspace = project.path().display().to_string();
    let request = || pb::DelegateRequest {
        objective: "bench".into(),
        agent: "stamp".into(),
        workspace: workspace.clone(),
        mode: "write".into(),
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
        if r.tasks.first().map(|t| t.status().as_str()) != Some("succeeded") {
            return Err(format!("task {id} did not succeed: {:?}", r.tasks.first().map(|t| t.status().as_str())).into());
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
            .args(["--json", "run", "--agent", "stamp", "--mode", "write", "bench"])
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
    let gate = files.join("gate");
    // The channel speaks only from inside its task's tree (issue 19): the
    // agent relays the bench's connection, a hop as caesar-mcp's own.
    let relay = files.join("relay.sock");
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"asker\"\nbin = {f:?}\nargs = [\"relay\", {:?}, \"env\", \"CAESAR_CHANNEL_SECRET\", \"wait-file\", {:?}]\n",
            relay.display().to_string(),
            gate.display().to_string()
        ),
    )?;
    let mut req = request();
    req.agent = "asker".into();
    req.channel = true;
    let asker = c.delegate(req).await?.into_inner();
    // The agent is up once its `env` step printed (its raw log is in the
    // daemon part).
    let raw = caesar_tests::daemon_files(std::path::Path::new(&asker.task_dir)).join("raw.log");
    while !std::fs::read_to_string(&raw).is_ok_and(|t| t.contains("CAESAR_CHANNEL_SECRET")) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let inside = caesar_proto::client::connect_at(&relay).await.map_err(|e| e.to_string())?.0;
    let scope = pb::ChannelRequest { task_id: asker.task_id.clone() };
    let mut visible = Figure::new("P9a ask→visible to await", "-");
    let mut answered = Figure::new("P9b visible→answer stored", "-");
    let mut delivered = Figure::new("P9c answer→delivered to the agent", "-");
    let mut round = Figure::new("P9 ask→answer delivered, round trip", "≤ 10 ms");
    let trips = runs.max(100);
    for i in 0..trips {
        let mut channel = inside.clone();
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

    // P1: caesar-mcp cold start, the daemon running.
    let mut cold = Figure::new("P1 caesar-mcp cold start (initialize + tools/list)", "≤ 15 ms");
    for _ in 0..runs {
        cold.samples.push(mcp_cold_start(&ours)?);
    }

    // P6: parser throughput over the real captures, on this thread.
    let mut parse = Figure::new("P6 parser throughput (MB/s, higher is better)", "≥ 100 MB/s");
    let captures = load_captures();
    let bytes: usize = captures.iter().map(|(_, t)| t.len()).sum();
    for _ in 0..runs.min(10) {
        let started = Instant::now();
        let mut reps = 0usize;
        while started.elapsed() < Duration::from_millis(200) {
            for (provider, text) in &captures {
                if let Some(mut p) = caesard::provider::spec(provider).map(|a| caesard::provider::parser(a.id)) {
                    for line in text.lines() {
                        std::hint::black_box(p.parse_line(line, caesard::provider::Stream::Stdout));
                    }
                }
            }
            reps += 1;
        }
        parse.samples.push((bytes * reps) as f64 / started.elapsed().as_secs_f64() / 1e6);
    }

    // P5: 200 tasks at once, max_parallel 200, before P8's million events
    // (whose memory the allocator keeps); the high-water mark is reset so the
    // peak is this burst's.
    std::fs::write(format!("/proc/{daemon_pid}/clear_refs"), "5")?;
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!(
            "[policy]\nmax_parallel = 200\n[[agent]]\nid = \"quick\"\nbin = {f:?}\nargs = [\"report\", \"success\", \"ok\"]\n"
        ),
    )?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..200 {
        let mut req = request();
        req.agent = "quick".into();
        req.mode = "read-only".into();
        ids.push(c.delegate(req).await?.into_inner().task_id);
    }
    let r = c
        .r#await(pb::AwaitRequest { task_ids: ids, timeout_ms: 600_000, wake_on_attention: false })
        .await?
        .into_inner();
    let wall = started.elapsed();
    if r.tasks.iter().any(|t| t.status().as_str() != "succeeded") {
        return Err("a task of the 200 did not succeed".into());
    }
    let mut burst = Figure::new("P5 200 tasks at once: wall time to all reports", "≤ 2000 ms");
    burst.samples.push(wall.as_secs_f64() * 1000.0);
    let mut peak = Figure::new("P5 daemon peak RSS (MB)", "≤ 60 MB");
    peak.samples.push(proc_kb(daemon_pid, "VmHWM:") as f64 / 1024.0);

    // P8: Logs limit=50 on a task with many events.
    let events: u64 = if quick { 100_000 } else { 1_000_000 };
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!("[[agent]]\nid = \"lines\"\nbin = {f:?}\nargs = [\"lines\", \"{events}\"]\n"),
    )?;
    let mut req = request();
    req.agent = "lines".into();
    req.mode = "read-only".into();
    let many = c.delegate(req).await?.into_inner().task_id;
    let done = c
        .r#await(pb::AwaitRequest { task_ids: vec![many.clone()], timeout_ms: 600_000, wake_on_attention: false })
        .await?
        .into_inner();
    let total = done.tasks[0].event_count;
    let mut logs =
        Figure::new(if quick { "P8 logs limit=50, 100k events" } else { "P8 logs limit=50, 1M events" }, "≤ 10 ms");
    for _ in 0..runs {
        let started = Instant::now();
        let l = c.logs(pb::LogsRequest { task_id: many.clone(), limit: 50, ..Default::default() }).await?.into_inner();
        logs.samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if l.events_json.len() != 50 || l.total_events != total {
            return Err("logs returned the wrong events".into());
        }
    }

    println!(
        "caesar-bench: {runs} runs ({trips} channel round trips), medians in ms, {} cores",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    print_table(
        "figure",
        [
            &mut run_to_agent,
            &mut delegate_to_agent,
            &mut round_trip,
            &mut wake,
            &mut status,
            &mut visible,
            &mut answered,
            &mut delivered,
            &mut round,
            &mut cold,
            &mut parse,
            &mut logs,
            &mut burst,
            &mut peak,
            &mut idle_rss,
            &mut idle_cpu,
        ],
    );
    daemon.stop().await;
    Ok(())
}

/// `--prepare`: Delegate's answer with a slow setup, and eight preparations
/// side by side.
async fn prepare_figures(bin_dir: &Path, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    let p = project.path();
    // Beneath `files/`, made before any task starts (see `main`).
    std::fs::create_dir_all(home.path().join("files"))?;
    let stamp = home.path().join("files/stamp");
    let (f, s) = (bin_dir.join("fake-agent").display().to_string(), stamp.display().to_string());
    // `CAESAR_BENCH_SETUP` replaces the `sleep 5` setup (issue 33 item 6: a
    // CPU-bound one); `CAESAR_PREPARE_PARALLEL`, passed through, the default bound.
    let setup = std::env::var("CAESAR_BENCH_SETUP").unwrap_or_else(|_| "sleep 5".into());
    std::fs::create_dir_all(p.join(".caesar"))?;
    std::fs::write(
        p.join(".caesar/config.toml"),
        format!(
            "[worktree]\nsetup = [{setup:?}]\n\n[policy]\nmax_parallel = 8\n\n[[agent]]\nid = \"stamp\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"report\", \"success\", \"done\"]\n"
        ),
    )?;
    std::fs::write(p.join("README.md"), "bench\n")?;
    for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-qm", "base"]] {
        git(p, args)?;
    }
    // The default preparation parallelism (issue 33: four per core).
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[]).await?;
    let mut c = daemon.client.clone();
    let request = |objective: String| pb::DelegateRequest {
        objective,
        agent: "stamp".into(),
        mode: "write".into(),
        isolation: "worktree".into(),
        workspace: p.display().to_string(),
        ..Default::default()
    };
    let stamps = || std::fs::read_to_string(&stamp).unwrap_or_default().lines().count();
    let settle = |c: &mut client::Client| {
        let mut c = c.clone();
        async move {
            loop {
                let active = c.ping(pb::PingRequest {}).await.map(|r| r.into_inner().active_tasks).unwrap_or(0);
                if active == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut answer = Figure::new("delegate of a write task with the setup: answered (ms)", "≤ 20 ms");
    for i in 0..runs {
        let started = Instant::now();
        c.delegate(request(format!("answer {i}"))).await?;
        answer.samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    settle(&mut c).await;
    let mut eight = Figure::new("8 write tasks with the setup, at once: all 8 agents running (s)", "≤ 7 s");
    let mut first = Figure::new("the same: the first of the 8 agents running (s)", "-");
    for round in 0..3 {
        let _ = std::fs::remove_file(&stamp);
        let started = Instant::now();
        let calls: Vec<_> = (0..8)
            .map(|i| {
                let mut c = c.clone();
                let req = request(format!("eight {round}/{i}"));
                tokio::spawn(async move { c.delegate(req).await })
            })
            .collect();
        for call in calls {
            call.await??;
        }
        while stamps() < 8 {
            if started.elapsed() > Duration::from_secs(120) {
                return Err("the eight agents did not all start within 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eight.samples.push(started.elapsed().as_secs_f64());
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos()
            - started.elapsed().as_nanos();
        first.samples.push(first_stamp_after(&stamp, since) as f64 / 1e9);
        settle(&mut c).await;
    }
    println!(
        "caesar-bench --prepare: {} cores, setup {setup:?}, CAESAR_PREPARE_PARALLEL {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        std::env::var("CAESAR_PREPARE_PARALLEL").unwrap_or_else(|_| "unset (the default)".into())
    );
    println!("| figure | min | median | max | target |\n|---|---|---|---|---|");
    answer.print();
    eight.print();
    first.print();
    daemon.stop().await;
    Ok(())
}

/// The earliest stamp in `file`, in nanoseconds after `since` (a wall-clock time).
fn first_stamp_after(file: &Path, since: u128) -> u128 {
    let stamps = std::fs::read_to_string(file).unwrap_or_default();
    stamps.lines().filter_map(|l| l.trim().parse::<u128>().ok()).min().unwrap_or(since).saturating_sub(since)
}

fn first_stamp(file: &Path) -> u128 {
    std::fs::read_to_string(file).unwrap_or_default().lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0)
}

/// How to start an MCP stdio server.
struct McpCommand {
    program: String,
    args: Vec<String>,
    /// Added to the bench's own environment.
    envs: Vec<(String, String)>,
    cwd: PathBuf,
    /// Where its stderr is appended; None discards it.
    stderr: Option<PathBuf>,
}

/// A minimal MCP client: newline-delimited JSON-RPC over a child's stdio.
struct McpClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    /// The server's stdout, line by line, from a reader thread (so a silent
    /// server ends in a time-out, not a hang).
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

impl McpClient {
    fn spawn(cmd: &McpCommand) -> Result<McpClient, Box<dyn std::error::Error>> {
        let stderr = match &cmd.stderr {
            Some(p) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(p)?),
            None => Stdio::null(),
        };
        let mut child = Command::new(&cmd.program)
            .args(&cmd.args)
            .envs(cmd.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&cmd.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("{}: {e}", cmd.program))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(McpClient { child, stdin, lines, next_id: 1 })
    }

    fn send(&mut self, message: &Value) -> Result<(), Box<dyn std::error::Error>> {
        let mut text = message.to_string();
        text.push('\n');
        self.stdin.write_all(text.as_bytes())?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Sends a request and returns its response's `result`. A request from
    /// the server meanwhile is refused; notifications are skipped.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, Box<dyn std::error::Error>> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| format!("{method}: no answer within 60 s, or the server exited"))?;
            let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
            if message.get("method").is_some() {
                if let Some(asked) = message.get("id") {
                    let refusal = json!({"code": -32601, "message": "caesar-bench answers no requests"});
                    self.send(&json!({"jsonrpc": "2.0", "id": asked, "error": refusal}))?;
                }
                continue;
            }
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(e) = message.get("error") {
                return Err(format!("{method}: {e}").into());
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    fn initialize(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        let client = json!({"name": "caesar-bench", "version": "0"});
        self.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}))?;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    }

    /// Calls a tool: its structured content, else its first text parsed as JSON.
    fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value, Box<dyn std::error::Error>> {
        let r = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        let text = r.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default();
        if r.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(format!("{name} failed: {text}").into());
        }
        match r.get("structuredContent") {
            Some(v) if !v.is_null() => Ok(v.clone()),
            _ => Ok(serde_json::from_str(text).map_err(|e| format!("{name}: {e}: {text}"))?),
        }
    }

    /// Closes its stdin and waits up to 5 s for it to exit, then kills it.
    fn close(self) {
        let McpClient { mut child, stdin, .. } = self;
        drop(stdin);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// P1: spawns an MCP server, initializes it and waits for tools/list; milliseconds.
fn mcp_cold_start(cmd: &McpCommand) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let mut mcp = McpClient::spawn(cmd)?;
    mcp.initialize()?;
    let tools = mcp.request("tools/list", json!({}))?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let listed = tools["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "caesar_delegate"));
    mcp.close();
    if !listed {
        return Err(format!("tools/list has no caesar_delegate: {tools}").into());
    }
    Ok(ms)
}

/// P3 over MCP, one task of the `sleepy` agent, which stamps first and last.
struct DelegateAwait {
    total: f64,
    to_agent: f64,
    agent: f64,
    wake: f64,
}

fn delegate_await(mcp: &mut McpClient, stamp: &Path) -> Result<DelegateAwait, Box<dyn std::error::Error>> {
    let _ = std::fs::remove_file(stamp);
    let t0 = now_ns();
    let started = Instant::now();
    let d = mcp.call_tool("caesar_delegate", json!({"objective": "bench", "agent": "sleepy"}))?;
    let id = d["task_id"].as_str().ok_or_else(|| format!("caesar_delegate returned no task_id: {d}"))?.to_owned();
    let a = mcp.call_tool("caesar_await", json!({"task_ids": [id], "timeout_ms": 10_000}))?;
    let t_done = now_ns();
    let total = started.elapsed().as_secs_f64() * 1000.0;
    let status = a["tasks"][&id]["status"].as_str().unwrap_or_default();
    if status != "succeeded" {
        return Err(format!(
            "task {id} is {status:?} after caesar_await (10 s): {a}; a server that misses the exit of a short-lived \
             agent needs a longer --compare-agent-ms"
        )
        .into());
    }
    let stamps: Vec<u128> = std::fs::read_to_string(stamp)?.lines().filter_map(|l| l.parse().ok()).collect();
    let [first, last] = stamps[..] else { return Err(format!("the agent left {} stamps, not 2", stamps.len()).into()) };
    Ok(DelegateAwait {
        total,
        to_agent: ms(first.saturating_sub(t0)),
        agent: ms(last.saturating_sub(first)),
        wake: ms(t_done.saturating_sub(last)),
    })
}

/// `--compare-mcp`: P1 and P3 over MCP against caesar-mcp and another server,
/// interleaved run by run (each going first every other run) after one
/// unmeasured run each.
fn compare_mcp(
    ours: &McpCommand,
    theirs: &McpCommand,
    runs: usize,
    agent_ms: u64,
    stamp: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let with_stderr = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        let log = theirs.stderr.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
        format!("{e}\nthe other server's stderr, last lines:\n{}", tail.join("\n")).into()
    };
    let names = [
        "P1 cold start: spawn, initialize, tools/list",
        "P3 delegate+await over MCP (agent sleeps)",
        "P3 less the agent's own run",
        "delegate sent → agent's first stamp",
        "agent's last stamp → await returns",
    ];
    let mut figures: Vec<[Figure; 2]> = names.into_iter().map(|n| [Figure::new(n, "-"), Figure::new(n, "-")]).collect();
    let cmds = [ours, theirs];
    for run in 0..=runs {
        for k in [run % 2, 1 - run % 2] {
            let ms = mcp_cold_start(cmds[k]).map_err(with_stderr)?;
            if run > 0 {
                figures[0][k].samples.push(ms);
            }
        }
    }
    let mut clients = [McpClient::spawn(ours)?, McpClient::spawn(theirs).map_err(with_stderr)?];
    for mcp in &mut clients {
        mcp.initialize().map_err(with_stderr)?;
    }
    for run in 0..=runs {
        for k in [run % 2, 1 - run % 2] {
            let r = delegate_await(&mut clients[k], stamp).map_err(with_stderr)?;
            if run > 0 {
                figures[1][k].samples.push(r.total);
                figures[2][k].samples.push(r.total - r.agent);
                figures[3][k].samples.push(r.to_agent);
                figures[4][k].samples.push(r.wake);
            }
        }
    }
    for mcp in clients {
        mcp.close();
    }
    println!(
        "caesar-bench --compare-mcp: {runs} runs each, interleaved, the agent sleeping {agent_ms} ms, in ms, {} cores",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("other: {} {}", theirs.program, theirs.args.join(" "));
    println!("| figure | caesar-mcp min / median / max | other min / median / max | other ÷ caesar-mcp (medians) |");
    println!("|---|---|---|---|");
    for [a, b] in &mut figures {
        let (Some((a0, a1, a2)), Some((b0, b1, b2))) = (a.stats(), b.stats()) else { continue };
        println!("| {} | {a0:.2} / {a1:.2} / {a2:.2} | {b0:.2} / {b1:.2} / {b2:.2} | {:.1}× |", a.name, b1 / a1);
    }
    Ok(())
}

/// The real captures, by provider.
fn load_captures() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../daemon/tests/fixtures/providers");
    let mut out = Vec::new();
    for sub in ["captures-caesar", "captures-local"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".jsonl") {
                continue;
            }
            // Capture files are named after their provider: codex-api-401.jsonl.
            let provider = name.split(['-', '.']).next().unwrap_or_default();
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                out.push((provider.to_owned(), text));
            }
        }
    }
    out
}

fn proc_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// utime + stime of a process, in clock ticks (100 a second on Linux).
fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

//! Kubernetes delegations at scale (issue 33 item 4), for BENCHMARKS.md:
//! a real daemon whose project sends its tasks to `k8s-sim` (the light
//! kubelet by default: pods run no process, the kubelet writes the frames
//! of an agent that prints `agent-up`; the daemon's side is unchanged). For
//! each count N: N read-only tasks delegated, up to `--in-flight` at once
//! over one connection (as a fan-out or many clients would), then the time
//! until every agent is up, the daemon's RSS, its TCP connections to the
//! API server and the simulator's open log streams and watches.
//!
//! `caesar-bench-kube [--tasks 100,500] [--in-flight 50] [--kubelet light|process]`

use std::path::Path;
use std::time::{Duration, Instant};

use caesar_proto::paths::Paths;
use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, SimCluster, commit_project};
use futures_util::StreamExt;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok()))
        .unwrap_or(0)
        / 1024
}

/// The established TCP connections of `pid` to `port` on this machine.
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[2].ends_with(&want) && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

fn all_up(tasks_dir: &Path, ids: &[String]) -> bool {
    ids.iter().all(|id| {
        std::fs::read_to_string(tasks_dir.join(id).join("events.jsonl")).is_ok_and(|s| s.contains("agent-up"))
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let counts: Vec<usize> = arg(&args, "--tasks")
        .unwrap_or_else(|| "100,500".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let in_flight: usize = arg(&args, "--in-flight").and_then(|v| v.parse().ok()).unwrap_or(50);
    let kubelet = arg(&args, "--kubelet").unwrap_or_else(|| "light".into());
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let home = tempfile::Builder::new().prefix("ck").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    let p = project.path();
    std::fs::create_dir_all(home.path().join("files"))?;
    let gate = home.path().join("files/gate");
    let fake = bin_dir.join("fake-agent").display().to_string();
    commit_project(
        p,
        &format!(
            "[policy]\nmax_parallel = 1000\n\n[[agent]]\nid = \"hang\"\nbin = {fake:?}\nargs = [\"say\", \"agent-up\", \"wait-file\", {:?}]\n",
            gate.display().to_string()
        ),
    )?;
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let cluster = SimCluster::start_with(&bin_dir, &path, &["--kubelet", &kubelet])?;
    std::fs::write(p.join(".caesar/config.local.toml"), cluster.runner_config())?;
    let daemon = BenchDaemon::start(&bin_dir, home.path(), "warn", &[]).await?;
    let pid = daemon.pid();
    let tasks_dir = Paths::under(home.path()).state_dir.join("tasks");
    println!(
        "caesar-bench-kube: {} cores, kubelet {kubelet}, {in_flight} delegations in flight",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    println!(
        "| tasks | delegated (s) | all agents up (s) | daemon RSS before / with them running (MiB) | daemon TCP connections to the API server | sim: open log streams | sim: open watches |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in counts {
        let _ = std::fs::remove_file(&gate);
        let rss0 = rss_mib(pid);
        let started = Instant::now();
        let delegations = futures_util::stream::iter((0..n).map(|i| {
            let mut c = daemon.client.clone();
            let workspace = p.display().to_string();
            async move {
                c.delegate(pb::DelegateRequest {
                    objective: format!("task {i}"),
                    agent: "hang".into(),
                    mode: "read_only".into(),
                    workspace,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().task_id)
            }
        }))
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>()
        .await;
        let ids: Vec<String> = delegations.into_iter().collect::<Result<_, _>>()?;
        let delegated = started.elapsed();
        while !all_up(&tasks_dir, &ids) {
            if started.elapsed() > Duration::from_secs(1_200) {
                return Err(format!("not all {n} agents were up within 20 minutes").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let up = started.elapsed();
        // Let the log streams and the watches settle before counting them.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let stats = cluster.stats()?;
        println!(
            "| {n} | {:.1} | {:.1} | {rss0} / {} | {} | {} | {} |",
            delegated.as_secs_f64(),
            up.as_secs_f64(),
            rss_mib(pid),
            connections_to(pid, cluster.port),
            stats["open_log_streams"],
            stats["open_watches"],
        );
        std::fs::write(&gate, "go")?;
        let mut c = daemon.client.clone();
        for chunk in ids.chunks(100) {
            c.r#await(pb::AwaitRequest { task_ids: chunk.to_vec(), timeout_ms: 600_000, wake_on_attention: false })
                .await?;
        }
    }
    daemon.stop().await;
    Ok(())
}

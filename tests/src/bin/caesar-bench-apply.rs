//! Apply's cost in changed files (issue 33 item 5), for BENCHMARKS.md: a
//! worktree task of a fake agent that changes N files of a generated
//! repository (half modified, half added) through a real daemon; once it
//! ended, the `Apply` call is timed (the daemon's whole apply: the task's
//! end ref, a snapshot of the main tree, the 3-way merge and the writes).
//!
//! Each size runs `--runs` times (default 3): the wall time of the call
//! (median and best) and the daemon's CPU time during it (best; from
//! `/proc/<pid>/stat`, less sensitive to a loaded machine).
//!
//! `caesar-bench-apply [--files N,N,...] [--runs N]` (default 750,1500,3000; 3).

use std::time::{Duration, Instant};

use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, commit_project};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let files: Vec<usize> = match args.iter().position(|a| a == "--files") {
        Some(i) => args.get(i + 1).map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect()).unwrap_or_default(),
        None => vec![750, 1_500, 3_000],
    };
    let runs: usize =
        args.iter().position(|a| a == "--runs").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(3);
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent").display().to_string();
    println!(
        "| changed files | apply wall (ms, median) | apply wall (ms, best) | daemon CPU during apply (ms, best) | files written |"
    );
    println!("|---|---|---|---|---|");
    for &n in &files {
        let (mut walls, mut cpus, mut written) = (Vec::new(), Vec::new(), 0);
        for _ in 0..runs {
            let (wall, cpu, files) = one(&fake, &bin_dir, n).await?;
            walls.push(wall);
            cpus.push(cpu);
            written = files;
        }
        walls.sort_by(|a, b| a.total_cmp(b));
        cpus.sort_by(|a, b| a.total_cmp(b));
        println!("| {n} | {:.0} | {:.0} | {:.0} | {written} |", walls[walls.len() / 2], walls[0], cpus[0]);
    }
    Ok(())
}

/// The daemon's CPU time so far (user and system), in ms.
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: f64 = [11, 12].iter().filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok())).sum();
    ticks * 1000.0 / 100.0
}

/// One task changing `n` files, and its apply: wall ms, daemon CPU ms, files written.
async fn one(fake: &str, bin_dir: &std::path::Path, n: usize) -> Result<(f64, f64, usize), Box<dyn std::error::Error>> {
    {
        let home = tempfile::Builder::new().prefix("ca").tempdir_in("/tmp")?;
        let project = tempfile::tempdir()?;
        let p = project.path();
        // N/2 files in the base, modified by the task; N/2 added by it.
        let half = n / 2;
        for i in 0..half {
            let dir = p.join(format!("d{}", i / 100));
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(format!("f{i}.txt")), format!("line one of {i}\nline two\n"))?;
        }
        let edit = format!(
            "i=0; while [ $i -lt {half} ]; do echo changed >> d$((i / 100))/f$i.txt; mkdir -p n$((i / 100)); echo new > n$((i / 100))/g$i.txt; i=$((i + 1)); done"
        );
        commit_project(
            p,
            &format!(
                "[[agent]]\nid = \"edit\"\nbin = {fake:?}\nargs = [\"sh\", {edit:?}, \"report\", \"success\", \"edited\"]\n"
            ),
        )?;
        let mut daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[]).await?;
        let c = &mut daemon.client;
        let d = c
            .delegate(pb::DelegateRequest {
                objective: format!("edit {n} files"),
                agent: "edit".into(),
                mode: "write".into(),
                isolation: "worktree".into(),
                workspace: p.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let started = Instant::now();
        loop {
            let v = c.status(pb::StatusRequest { task_id: d.task_id.clone() }).await?.into_inner();
            if v.status().as_str() == "succeeded" {
                break;
            }
            if v.status().as_str() != "running" && v.status().as_str() != "pending" {
                return Err(format!("the task ended {}: {}", v.status().as_str(), v.error).into());
            }
            if started.elapsed() > Duration::from_secs(600) {
                return Err("the task did not end within 600 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pid = daemon.pid();
        let (t, cpu) = (Instant::now(), cpu_ms(pid));
        let a = daemon.client.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await?.into_inner();
        let (ms, cpu) = (t.elapsed().as_secs_f64() * 1000.0, cpu_ms(pid) - cpu);
        if !a.applied {
            return Err(format!("not applied: {a:?}").into());
        }
        daemon.stop().await;
        Ok((ms, cpu, a.files.len()))
    }
}

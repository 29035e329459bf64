//! The conflict radar's cost (issue 17), for BENCHMARKS.md: live worktree
//! tasks on a generated repository, through a real daemon. Times the
//! `Status` call that carries `conflicts_with` (which reads the background
//! radar's cache) and the background radar's own cost: footprint
//! refreshes per second and the time of each, from the daemon's
//! `caesar::radar` debug lines, as tasks and repository grow.
//!
//! `caesar-bench-radar [--files N,N] [--tasks N,N,...]`; `caesar-bench --radar` runs it too.
//!
//! `caesar-bench-radar --grow N,N,...` (issue 33 item 5): one live task that
//! changed N files and then keeps appending to one more, printing a line
//! each time (its output grows), for 20 s: the radar's refreshes of it per
//! second, the cost of each, and the age of the answers `Status` gives.

use std::path::Path;
use std::time::{Duration, Instant};

use caesar_proto::paths::Paths;
use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, commit_project};

fn list(args: &[String], name: &str, default: &[usize]) -> Vec<usize> {
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect()).unwrap_or_default(),
        None => default.to_vec(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--grow") {
        return grow(&list(&args, "--grow", &[750, 1_500, 3_000])).await;
    }
    let files = list(&args, "--files", &[1_000, 10_000]);
    let steps = list(&args, "--tasks", &[1, 5, 10, 20]);
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent").display().to_string();
    println!(
        "| repository files | live tasks | Status with conflicts_with (ms, median of 20, 1 s apart) | radar age (ms) | overlaps seen | background refreshes/s | ms per refresh |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n_files in &files {
        let home = tempfile::Builder::new().prefix("cr").tempdir_in("/tmp")?;
        let project = tempfile::tempdir()?;
        let p = project.path();
        for i in 0..n_files {
            let dir = p.join(format!("d{}", i / 100));
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(format!("f{i}.txt")), format!("line one of {i}\nline two\nline three\n"))?;
        }
        std::fs::write(p.join("shared.txt"), "a\nb\nc\n")?;
        commit_project(
            p,
            &format!(
                "[policy]\nmax_parallel = 64\n\n[[agent]]\nid = \"edit\"\nbin = {fake:?}\nargs = [\"write\", \"shared.txt\", \"changed\\n\", \"sh\", \"echo x >> d0/f0.txt\", \"say\", \"ready\", \"hang\"]\n"
            ),
        )?;
        let paths = Paths::under(home.path());
        let mut daemon =
            BenchDaemon::start(&bin_dir, home.path(), "warn,caesar::radar=debug", &[("CAESAR_KILL_GRACE_MS", "200")])
                .await?;
        let c = &mut daemon.client;
        let mut ids: Vec<String> = Vec::new();
        for &want in &steps {
            while ids.len() < want {
                let d = c
                    .delegate(pb::DelegateRequest {
                        objective: format!("edit {}", ids.len()),
                        agent: "edit".into(),
                        mode: "write".into(),
                        isolation: "worktree".into(),
                        workspace: p.display().to_string(),
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                ids.push(d.task_id);
            }
            // Every task live and its edits made.
            let started = Instant::now();
            loop {
                let mut ready = 0;
                for id in &ids {
                    let v = c.status(pb::StatusRequest { task_id: id.clone() }).await?.into_inner();
                    if v.status().as_str() == "running" && v.output_tail.contains("ready") {
                        ready += 1;
                    }
                }
                if ready == ids.len() {
                    break;
                }
                if started.elapsed() > Duration::from_secs(300) {
                    return Err("the tasks did not all become live within 300 s".into());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // The radar has read every task: each meets all the others on shared.txt.
            loop {
                let v = c.status(pb::StatusRequest { task_id: ids[0].clone() }).await?.into_inner();
                if v.conflicts_with.len() + 1 >= ids.len() {
                    break;
                }
                if started.elapsed() > Duration::from_secs(300) {
                    return Err("the radar did not see every task within 300 s".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let log_from = std::fs::metadata(paths.daemon_log()).map(|m| m.len()).unwrap_or(0);
            let window = Instant::now();
            let (mut times, mut ages, mut seen) = (Vec::new(), Vec::new(), 0);
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                let t = Instant::now();
                let v = c.status(pb::StatusRequest { task_id: ids[0].clone() }).await?.into_inner();
                times.push(t.elapsed().as_secs_f64() * 1000.0);
                ages.push(v.radar_age_ms.unwrap_or_default() as f64);
                seen = v.conflicts_with.len();
            }
            let secs = window.elapsed().as_secs_f64();
            let (refreshes, us) = radar_rounds(&paths.daemon_log(), log_from);
            let per = if refreshes == 0 { 0.0 } else { us as f64 / refreshes as f64 / 1000.0 };
            println!(
                "| {n_files} | {} | {:.2} | {:.0} | {seen} | {:.1} | {per:.1} |",
                ids.len(),
                median(times),
                median(ages),
                refreshes as f64 / secs
            );
        }
        daemon.stop().await;
    }
    Ok(())
}

/// The footprints refreshed and the microseconds spent, over the daemon's
/// `radar refresh` lines (one a footprint) after byte `from` of its log.
fn radar_rounds(log: &Path, from: u64) -> (u64, u64) {
    radar_rounds_of(log, from, None)
}

/// [`radar_rounds`] of one task's footprint only (`of` the task id).
fn radar_rounds_of(log: &Path, from: u64, of: Option<&str>) -> (u64, u64) {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
    let field = |line: &str, name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
            .unwrap_or(0)
    };
    let (mut n, mut us) = (0, 0);
    for line in text.lines().filter(|l| l.contains("radar refresh") && of.is_none_or(|id| l.contains(id))) {
        n += 1;
        us += field(line, "us=");
    }
    (n, us)
}

/// `--grow`: see the module docs.
async fn grow(sizes: &[usize]) -> Result<(), Box<dyn std::error::Error>> {
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent").display().to_string();
    println!(
        "| files the task changed | refreshes/s of it | ms per refresh (mean) | Status radar age: median / max (ms) |"
    );
    println!("|---|---|---|---|");
    for &n in sizes {
        let home = tempfile::Builder::new().prefix("cr").tempdir_in("/tmp")?;
        let project = tempfile::tempdir()?;
        let p = project.path();
        for i in 0..n.max(1) {
            let dir = p.join(format!("d{}", i / 100));
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(format!("f{i}.txt")), format!("line one of {i}\nline two\nline three\n"))?;
        }
        // In a directory read first: a snapshot of a worktree fails when a
        // file changes between the scan's stat of it and its read (libgit2's
        // "file changed before we could read it"), which a file the scan
        // reaches last and the agent appends to five times a second hits
        // every time at these sizes (found by this bench; see BENCHMARKS.md).
        std::fs::create_dir_all(p.join("a"))?;
        std::fs::write(p.join("a/grow.txt"), "a\n")?;
        let change = format!("i=0; while [ $i -lt {n} ]; do echo changed >> d$((i/100))/f$i.txt; i=$((i+1)); done");
        let tick = "while true; do echo x >> a/grow.txt; echo tick; sleep 0.2; done";
        commit_project(
            p,
            &format!(
                "[[agent]]\nid = \"grow\"\nbin = {fake:?}\nargs = [\"sh\", {change:?}, \"say\", \"ready\", \"sh\", {tick:?}]\n"
            ),
        )?;
        let paths = Paths::under(home.path());
        let mut daemon =
            BenchDaemon::start(&bin_dir, home.path(), "warn,caesar::radar=debug", &[("CAESAR_KILL_GRACE_MS", "200")])
                .await?;
        let c = &mut daemon.client;
        let id = c
            .delegate(pb::DelegateRequest {
                objective: "grow".into(),
                agent: "grow".into(),
                mode: "write".into(),
                isolation: "worktree".into(),
                workspace: p.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .task_id;
        let started = Instant::now();
        loop {
            let v = c.status(pb::StatusRequest { task_id: id.clone() }).await?.into_inner();
            if v.output_tail.contains("tick") && v.radar_age_ms.is_some() {
                break;
            }
            if started.elapsed() > Duration::from_secs(300) {
                return Err("the task did not become live within 300 s".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let log_from = std::fs::metadata(paths.daemon_log()).map(|m| m.len()).unwrap_or(0);
        let window = Instant::now();
        let mut ages = Vec::new();
        while window.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(97)).await;
            let v = c.status(pb::StatusRequest { task_id: id.clone() }).await?.into_inner();
            ages.push(v.radar_age_ms.unwrap_or_default() as f64);
        }
        let secs = window.elapsed().as_secs_f64();
        let (refreshes, us) = radar_rounds_of(&paths.daemon_log(), log_from, Some(&id));
        let per = if refreshes == 0 { 0.0 } else { us as f64 / refreshes as f64 / 1000.0 };
        let max = ages.iter().copied().fold(0.0, f64::max);
        println!("| {n} | {:.2} | {per:.1} | {:.0} / {max:.0} |", refreshes as f64 / secs, median(ages));
        c.cancel(pb::CancelRequest { task_id: id }).await?;
        daemon.stop().await;
    }
    Ok(())
}

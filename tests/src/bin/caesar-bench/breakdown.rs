//! `caesar-bench --breakdown` (issue 33): where each millisecond of P3 goes,
//! from the timestamps of one run of a no-op agent (read-only, in place, as
//! the side-by-side harness delegates it), over `--runs` runs.
//!
//! Every figure is a difference of wall clocks written by the steps
//! themselves: the bench's own (delegate sent, answer, await returned), the
//! task's record (created, started = the supervisor spawned, finished = the
//! ending committed), the supervisor's `agent.json` (agent started) and
//! `exit.json` (the agent's tree gone), and the agent's stamps (its first and
//! last instruction). The task's and the supervisor's clocks are in
//! milliseconds, so each step is ±1 ms; the medians over many runs are what
//! to read.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, git};

use super::{Figure, print_table};

fn now_ms_f() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0)
}

/// Milliseconds since the epoch of an RFC 3339 time as the API writes it
/// (`2026-12-05T18:51:01.915Z`).
fn rfc3339_ms(s: &str) -> Option<f64> {
    let (date, time) = s.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let mut t = time.split(':');
    let (h, min, sec) =
        (t.next()?.parse::<f64>().ok()?, t.next()?.parse::<f64>().ok()?, t.next()?.parse::<f64>().ok()?);
    Some(days as f64 * 86_400_000.0 + h * 3_600_000.0 + min * 60_000.0 + sec * 1000.0)
}

fn json_ms(path: &Path, key: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v.get(key)?.as_f64()
}

pub async fn figures(bin_dir: &Path, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    // Beneath `files/`, made before any task starts (caesar's directories
    // are carved out of the agents' /tmp).
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let stamp = files.join("stamp");
    let (f, s) = (bin_dir.join("fake-agent").display().to_string(), stamp.display().to_string());
    let p = project.path();
    std::fs::create_dir_all(p.join(".caesar"))?;
    std::fs::write(
        p.join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"noop\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"report\", \"success\", \"ok\", \"stamp\", {s:?}]\nnative_read_only = true\n"
        ),
    )?;
    std::fs::write(p.join("README.md"), "x\n")?;
    for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-qm", "i"]] {
        git(p, args)?;
    }
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[]).await?;
    let mut c = daemon.client.clone();
    let mut steps = [
        Figure::new("delegate sent → task recorded (created)", "-"),
        Figure::new("created → supervisor spawned (started)", "-"),
        Figure::new("delegate sent → answer back", "-"),
        Figure::new("supervisor spawned → agent started (agent.json)", "-"),
        Figure::new("agent started → its first instruction (box, exec)", "-"),
        Figure::new("the agent's own run (first → last instruction)", "-"),
        Figure::new("agent's last instruction → exit.json (exit detected, tree gone)", "-"),
        Figure::new("exit.json → ending committed (finished)", "-"),
        Figure::new("ending committed → await returned", "-"),
        Figure::new("P3 delegate + await (total)", "-"),
    ];
    for i in 0..runs + 1 {
        let _ = std::fs::remove_file(&stamp);
        let t0 = now_ms_f();
        let d = c
            .delegate(pb::DelegateRequest {
                objective: format!("say ok {i}"),
                agent: "noop".into(),
                workspace: p.display().to_string(),
                mode: "read-only".into(),
                isolation: "inplace".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let t_answer = now_ms_f();
        let r = c
            .r#await(pb::AwaitRequest {
                task_ids: vec![d.task_id.clone()],
                timeout_ms: 30_000,
                wake_on_attention: false,
            })
            .await?
            .into_inner();
        let t_end = now_ms_f();
        let t = r.tasks.first().ok_or("no task in the await")?;
        if t.status().as_str() != "succeeded" {
            return Err(format!("task {} did not succeed: {}", d.task_id, t.status().as_str()).into());
        }
        if i == 0 {
            continue; // warm-up
        }
        let part = caesar_tests::daemon_files(Path::new(&d.task_dir));
        let stamps: Vec<f64> = std::fs::read_to_string(&stamp)?
            .lines()
            .filter_map(|l| l.trim().parse::<f64>().ok())
            .map(|ns| ns / 1e6)
            .collect();
        let (created, started, finished) = (
            rfc3339_ms(&t.created_at).ok_or("created_at")?,
            rfc3339_ms(&t.started_at).ok_or("started_at")?,
            rfc3339_ms(&t.finished_at).ok_or("finished_at")?,
        );
        let agent = json_ms(&part.join("agent.json"), "started_ms").ok_or("agent.json")?;
        let exit = json_ms(&part.join("exit.json"), "finished_ms").ok_or("exit.json")?;
        let (first, last) = (stamps.first().copied().ok_or("no stamp")?, stamps.last().copied().ok_or("no stamp")?);
        let values = [
            created - t0,
            started - created,
            t_answer - t0,
            agent - started,
            first - agent,
            last - first,
            exit - last,
            finished - exit,
            t_end - finished,
            t_end - t0,
        ];
        for (f, v) in steps.iter_mut().zip(values) {
            f.samples.push(v);
        }
    }
    println!("caesar-bench --breakdown: {runs} runs of a no-op agent (read-only, in place), ms, clocks in ms (±1)");
    print_table("step", &mut steps);
    daemon.stop().await;
    Ok(())
}

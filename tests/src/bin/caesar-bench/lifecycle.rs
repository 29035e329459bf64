//! `caesar-bench --lifecycle` (issue 17): the time from a quota blocker to
//! the fallback agent running, through a real daemon, and the cost per
//! event of the budget tally and the network watch on the monitor's path.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use caesar_proto::client;
use caesar_proto::pb;
use caesar_tests::bench::BenchDaemon;
use caesard::engine::{Meter, NetWatch};
use caesard::lifecycle::Limits;
use caesard::oacp::{EventBody, Usage};

use super::Figure;

pub async fn figures(bin_dir: &Path, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let home = tempfile::Builder::new().prefix("cb").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    // What the agents write goes beneath `files/`, made before any task
    // starts: caesar's directories are carved out of the agents' /tmp.
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let stamp = files.join("stamp");
    let (f, s) = (bin_dir.join("fake-agent").display().to_string(), stamp.display().to_string());
    let blocker = r#"{"type":"blocker","kind":"rate_limit","message":"usage limit"}"#;
    std::fs::create_dir_all(project.path().join(".caesar"))?;
    std::fs::write(
        project.path().join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"first\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"event\", {blocker:?}, \"hang\"]\n\n\
             [[agent]]\nid = \"second\"\nbin = {f:?}\nargs = [\"stamp\", {s:?}, \"report\", \"success\", \"done\"]\n\n\
             [[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"read-only\"\n"
        ),
    )?;
    let daemon = BenchDaemon::start(bin_dir, home.path(), "warn", &[("CAESAR_KILL_GRACE_MS", "300")]).await?;
    let mut c = daemon.client.clone();
    let mut fallback = Figure::new("quota blocker printed → fallback agent running (ms)", "—");
    for i in 0..runs {
        let _ = std::fs::remove_file(&stamp);
        let d = c
            .delegate(pb::DelegateRequest {
                objective: format!("fall back {i}"),
                role: "pair".into(),
                workspace: project.path().display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        c.r#await(pb::AwaitRequest { task_ids: vec![d.task_id], timeout_ms: 60_000, wake_on_attention: false }).await?;
        let stamps: Vec<u128> =
            std::fs::read_to_string(&stamp)?.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if stamps.len() != 2 {
            return Err(format!("expected two stamps (first, second), got {}", stamps.len()).into());
        }
        fallback.samples.push((stamps[1].saturating_sub(stamps[0])) as f64 / 1e6);
    }
    let mut parked = parking_figure(&mut c, &files, project.path(), runs).await?;
    daemon.stop().await;

    // The per-event cost: a mix of a working agent's events.
    let events = [
        EventBody::Message { text: "working".into() },
        EventBody::Usage { usage: Usage { input_tokens: Some(120), output_tokens: Some(40), ..Usage::default() } },
        EventBody::Thinking { text: "hm".into() },
        EventBody::Error { message: "Reconnecting... waiting for network".into(), fatal: false },
    ];
    let n = 10_000_000u64;
    let mut per_event = Figure::new("budget tally + network watch, per event (ns)", "—");
    for _ in 0..5 {
        let limits = Limits { tokens: Some(u64::MAX), turns: Some(u64::MAX), ..Limits::default() };
        let mut meter = Meter::new(limits, 0);
        let mut watch = NetWatch::default();
        let started = Instant::now();
        for k in 0..n {
            let e = &events[(k % 4) as usize];
            meter.observe(black_box(e));
            watch.observe(black_box(e));
        }
        // The check made once per read of the log, counted here per event too.
        black_box(meter.exceeded(1));
        per_event.samples.push(started.elapsed().as_nanos() as f64 / n as f64);
    }
    println!("caesar-bench --lifecycle: {runs} fallbacks, {n} events x 5");
    println!("| figure | min | median | max | target |\n|---|---|---|---|---|");
    fallback.print();
    parked.print();
    per_event.print();
    Ok(())
}

/// Quota parking: the agent's blocker says the quota lifts 1 s later
/// (`resets_at_ms`); the figure is from that time to the resumed agent's
/// first instruction (`date` in its shell).
async fn parking_figure(
    c: &mut client::Client,
    files: &Path,
    project: &Path,
    runs: usize,
) -> Result<Figure, Box<dyn std::error::Error>> {
    let (mark, reset, resumed) = (files.join("parked-once"), files.join("reset-at"), files.join("resumed-at"));
    let script = format!(
        "if [ -e {m:?} ]; then date +%s%N > {r2:?}; printf '%s' '{{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"resumed\"}}' > \"$CAESAR_REPORT_PATH\"; \
         else touch {m:?}; R=$(( $(date +%s%3N) + 1000 )); echo $R > {r1:?}; \
         echo '{{\"protocol\":\"caesar.event/v1\",\"type\":\"blocker\",\"kind\":\"rate_limit\",\"message\":\"quota\",\"resets_at_ms\":'$R'}}'; sleep 300; fi",
        m = mark.display().to_string(),
        r1 = reset.display().to_string(),
        r2 = resumed.display().to_string(),
    );
    let config = project.join(".caesar/config.toml");
    let mut text = std::fs::read_to_string(&config)?;
    let f = std::env::current_exe()?.with_file_name("fake-agent").display().to_string();
    text.push_str(&format!("\n[[agent]]\nid = \"parker\"\nbin = {f:?}\nargs = [\"sh\", {script:?}]\n"));
    std::fs::write(&config, text)?;
    let mut parked = Figure::new("quota reset time → parked agent resumed (ms)", "—");
    for i in 0..runs {
        let _ = std::fs::remove_file(&mark);
        let d = c
            .delegate(pb::DelegateRequest {
                objective: format!("park {i}"),
                agent: "parker".into(),
                mode: "read-only".into(),
                timeout_ms: 60_000,
                workspace: project.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![d.task_id], timeout_ms: 60_000, wake_on_attention: false })
            .await?
            .into_inner();
        if r.tasks.first().map(|t| t.status().as_str()) != Some("succeeded") {
            return Err(format!("the parked task did not resume and succeed: {:?}", r.tasks).into());
        }
        let at: i64 = std::fs::read_to_string(&reset)?.trim().parse()?;
        let ran: i128 = std::fs::read_to_string(&resumed)?.trim().parse()?;
        parked.samples.push((ran as f64 / 1e6) - at as f64);
    }
    Ok(parked)
}

//! Questions from the terminal (issue 30, item 3), for BENCHMARKS.md: how long from an
//! agent's question to its prompt on the person's terminal. `caesar run` runs on a
//! pseudo-terminal (`script`), against a real daemon, with a scripted agent that stamps the
//! wall clock right before it starts its return channel and calls `ask_orchestrator`; a
//! reader stamps the moment the terminal shows `QUESTION`, then types the answer. Between
//! the two: the channel's start (`caesar-mcp --channel`), the question stored, the daemon's
//! wake-up of the run's event stream, and the CLI's prompt.
//!
//! `caesar-bench-ask [--runs N]` (default 10).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use caesar_tests::bench::{BenchDaemon, commit_project};

fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0)
}

/// One `caesar run` on a terminal: the wall clock when its output first showed the
/// question, and everything it printed.
fn one_run(caesar: &str, home: &std::path::Path, project: &std::path::Path) -> Result<(i128, String), String> {
    let mut child = Command::new("script")
        .args(["-qfec", &format!("{caesar} run --agent asker 'ask the colour'"), "/dev/null"])
        .current_dir(project)
        .env("CAESAR_HOME", home)
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start script (util-linux): {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let mut told = false;
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            if !told && String::from_utf8_lossy(&seen).contains("QUESTION q_") {
                told = true;
                let _ = tx.send(now_ns());
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let shown = rx.recv_timeout(Duration::from_secs(60));
    if let Some(stdin) = child.stdin.as_mut() {
        let _ = stdin.write_all(b"ultramarine\n").and_then(|_| stdin.flush());
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    drop(child.stdin.take());
    let text = reader.join().unwrap_or_default();
    let shown = shown.map_err(|_| format!("no question at the terminal within 60 s:\n{text}"))?;
    if !status.success() {
        return Err(format!("caesar run ended with {status}:\n{text}"));
    }
    Ok((shown, text))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let fake = bin_dir.join("fake-agent").display().to_string();
    let caesar = bin_dir.join("caesar").display().to_string();
    let home = tempfile::Builder::new().prefix("ca").tempdir_in("/tmp")?;
    // `$CAESAR_HOME/files`, the one place of the home an agent's box may write (as in the tests).
    let files = home.path().join("files");
    std::fs::create_dir_all(&files)?;
    let asked_at = files.join("asked_at");
    let asker = serde_json::json!([
        "stamp",
        asked_at.display().to_string(),
        "mcp-ask",
        "Which colour should the button be?",
        "report",
        "success",
        "asked"
    ]);
    let project = tempfile::tempdir()?;
    std::fs::write(project.path().join("README.md"), "hello\n")?;
    commit_project(project.path(), &format!("[[agent]]\nid = \"asker\"\nbin = {fake:?}\nargs = {asker}\n"))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let daemon = runtime.block_on(BenchDaemon::start(&bin_dir, home.path(), "warn", &[]))?;
    let mut ms = Vec::new();
    for run in 0..runs {
        let (shown, text) = one_run(&caesar, home.path(), project.path()).map_err(|e| format!("run {run}: {e}"))?;
        if !text.contains("ultramarine") {
            return Err(format!("run {run}: the answer did not reach the agent:\n{text}").into());
        }
        let stamps: Vec<i128> =
            std::fs::read_to_string(&asked_at)?.lines().filter_map(|l| l.trim().parse().ok()).collect();
        let asked = *stamps.get(run).ok_or("the agent's stamp is missing")?;
        ms.push((shown - asked) as f64 / 1e6);
    }
    runtime.block_on(daemon.stop());
    let mut sorted = ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| sorted[((sorted.len() as f64 - 1.0) * q).round() as usize];
    println!("runs: {}", ms.iter().map(|m| format!("{m:.1}")).collect::<Vec<_>>().join(", "));
    println!(
        "| runs | question → prompt on the terminal: median (ms) | p90 (ms) | best (ms) | worst (ms) |\n|---|---|---|---|---|\n| {runs} | {:.1} | {:.1} | {:.1} | {:.1} |",
        pick(0.5),
        pick(0.9),
        sorted[0],
        sorted[sorted.len() - 1]
    );
    Ok(())
}

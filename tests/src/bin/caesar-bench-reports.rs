//! Huge reports (issue 19), for BENCHMARKS.md: an agent (`fake-agent sh cp …`)
//! hands in a prepared `report.json`, and the bench measures, through a real
//! daemon and the real `caesar-mcp`:
//!
//! - `end`: `caesar_delegate` to the first `caesar_await` answering the task
//!   ended (the agent's copy, the daemon's read and parse of the report);
//! - `await`: a second `caesar_await` of the ended task (the RPC and the
//!   shim's shaping of the stored report under its 20,000-character cap);
//! - what was accepted: the report's source (`file`, else refused), the
//!   entries kept, the answer's characters, the daemon's peak memory.
//!
//! `caesar-bench-reports [--runs N] [--bin-dir DIR]`: DIR holds `caesard`,
//! `caesar-mcp` and `fake-agent` (default: beside this binary), so that the
//! same bench measures another build ("before").

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use caesar_proto::client;
use caesar_proto::paths::Paths;
use caesar_proto::pb;
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One report to hand in: `n` changes, `n` findings of `detail` bytes, and a
/// `details` string of `long` bytes.
struct Shape {
    name: &'static str,
    n: usize,
    detail: usize,
    long: usize,
}

const SHAPES: &[Shape] = &[
    Shape { name: "at the caps: 1,000 changes, 1,000 findings of 3 KB", n: 1_000, detail: 3_000, long: 0 },
    Shape { name: "300,000 changes and 300,000 findings", n: 300_000, detail: 1, long: 0 },
    Shape { name: "a 100 MiB `details` string", n: 3, detail: 1, long: 100 * 1024 * 1024 },
];

fn write_report(path: &Path, s: &Shape) -> Res<u64> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    write!(w, r#"{{"protocol":"caesar.report/v1","status":"success","summary":"{}","changes":["#, s.name)?;
    for k in 0..s.n {
        let sep = if k > 0 { "," } else { "" };
        write!(w, r#"{sep}{{"path":"src/f{k}.rs","action":"modified","summary":"change {k}"}}"#)?;
    }
    write!(w, r#"],"findings":["#)?;
    let detail = "d".repeat(s.detail);
    for k in 0..s.n {
        let sep = if k > 0 { "," } else { "" };
        write!(w, r#"{sep}{{"severity":"info","title":"finding {k}","detail":"{detail}"}}"#)?;
    }
    write!(w, r#"],"details":""#)?;
    let chunk = "x".repeat(1 << 16);
    let mut left = s.long;
    while left > 0 {
        let take = left.min(chunk.len());
        w.write_all(&chunk.as_bytes()[..take])?;
        left -= take;
    }
    write!(w, r#""}}"#)?;
    w.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// newline-delimited JSON-RPC over `caesar-mcp`'s stdio.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next: u64,
}

impl Mcp {
    fn spawn(bin: &Path, home: &Path, project: &Path) -> Res<Mcp> {
        let mut child = Command::new(bin)
            .args(["--root", &project.display().to_string()])
            .env("CAESAR_HOME", home)
            .current_dir(project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut m = Mcp { child, stdin, lines, next: 1 };
        let info = json!({"name": "caesar-bench-reports", "version": "0"});
        m.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}))?;
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(m)
    }

    fn send(&mut self, v: &Value) -> Res<()> {
        self.stdin.write_all(format!("{v}\n").as_bytes())?;
        Ok(self.stdin.flush()?)
    }

    /// The response's `result`, and the line's characters.
    fn request(&mut self, method: &str, params: Value) -> Res<(Value, usize)> {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(600)).map_err(|_| format!("{method}: no answer"))?;
            let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
            if v.get("method").is_none() && v["id"] == json!(id) {
                if let Some(e) = v.get("error") {
                    return Err(format!("{method}: {e}").into());
                }
                return Ok((v["result"].clone(), line.chars().count()));
            }
        }
    }

    /// A tool's text block, and its characters.
    fn call(&mut self, tool: &str, args: Value) -> Res<(Value, usize)> {
        let (r, _) = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        let text = r.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default().to_owned();
        if r["isError"] == json!(true) {
            return Err(format!("{tool}: {text}").into());
        }
        Ok((serde_json::from_str(&text)?, text.chars().count()))
    }
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let runs: usize = value("--runs").map_or(Ok(3), |v| v.parse()).map_err(|_| "--runs takes a number")?.max(1);
    let bin_dir = match value("--bin-dir") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf(),
    };
    println!("caesar-bench-reports: binaries of {}, {runs} run(s) per report", bin_dir.display());
    println!(
        "| report | file | end (ms, median) | await (ms, median) | source | kept changes / findings | answer chars | daemon peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for shape in SHAPES {
        let home = tempfile::Builder::new().prefix("cr").tempdir_in("/tmp")?;
        let project = tempfile::Builder::new().prefix("crp").tempdir_in("/tmp")?;
        let file = home.path().join("prepared-report.json");
        let bytes = write_report(&file, shape)?;
        let fake = bin_dir.join("fake-agent").display().to_string();
        let copy = format!("cp '{}' \"$CAESAR_REPORT_PATH\"", file.display());
        std::fs::create_dir_all(project.path().join(".caesar"))?;
        std::fs::write(
            project.path().join(".caesar/config.toml"),
            format!("[[agent]]\nid = \"copy\"\nbin = {fake:?}\nargs = [\"sh\", {copy:?}]\n"),
        )?;
        let mut daemon = Command::new(bin_dir.join("caesard"))
            .env("CAESAR_HOME", home.path())
            .env("CAESAR_LOG", "warn")
            .env("CAESAR_TRUST_PREFIX", "/tmp")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut c = client::wait_until_ready(&Paths::under(home.path()), Duration::from_secs(30)).await?;
        let mut mcp = Mcp::spawn(&bin_dir.join("caesar-mcp"), home.path(), project.path())?;
        let (mut end, mut again) = (Vec::new(), Vec::new());
        let mut seen = (String::new(), 0, 0, 0);
        for _ in 0..runs {
            let started = Instant::now();
            let (d, _) = mcp.call("caesar_delegate", json!({"objective": "hand in a huge report", "agent": "copy"}))?;
            let id = d["task_id"].as_str().ok_or_else(|| format!("no task_id: {d}"))?.to_owned();
            loop {
                let (a, _) = mcp.call("caesar_await", json!({"task_ids": [id], "timeout_ms": 60_000}))?;
                if a["tasks"][&id]["pending"] != json!(true) {
                    break;
                }
            }
            end.push(started.elapsed().as_secs_f64() * 1000.0);
            let started = Instant::now();
            let (a, chars) = mcp.call("caesar_await", json!({"task_ids": [id], "timeout_ms": 1_000}))?;
            again.push(started.elapsed().as_secs_f64() * 1000.0);
            let done = c
                .r#await(pb::AwaitRequest { task_ids: vec![id.clone()], timeout_ms: 1_000, wake_on_attention: false })
                .await?
                .into_inner();
            let view = done.tasks.into_iter().next().ok_or("the await names no task")?;
            let full: Value = serde_json::from_str(&view.report_json).unwrap_or(Value::Null);
            let count = |k: &str| full[k].as_array().map_or(0, Vec::len);
            seen = (view.report_source.clone(), count("changes"), count("findings"), chars);
            if a["tasks"][&id]["status"].is_null() {
                return Err(format!("the await answer has no task {id}: {a}").into());
            }
        }
        let peak = peak_rss_mib(daemon.id());
        println!(
            "| {} | {:.1} MB | {:.0} | {:.1} | {} | {} / {} | {} | {peak:.0} MiB |",
            shape.name,
            bytes as f64 / 1e6,
            median(end),
            median(again),
            seen.0,
            seen.1,
            seen.2,
            seen.3
        );
        let _ = mcp.child.kill();
        let _ = mcp.child.wait();
        let _ = c.shutdown(pb::ShutdownRequest { cancel_tasks: true, only_if_idle: false }).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while daemon.try_wait()?.is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = daemon.kill();
        let _ = daemon.wait();
    }
    Ok(())
}

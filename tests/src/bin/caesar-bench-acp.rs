//! ACP's permission round trip (issue 15), for BENCHMARKS.md: a scripted ACP agent
//! (`fake-acp`, as the `qwen` provider through `[bin]`) asks for a permission `--runs` times
//! (100 at least) in one write task, through a real daemon and its supervisor. Per ask:
//!
//! - `ACP-a request→visible to await`: the agent's stamp right after it wrote
//!   `session/request_permission`, to `Await` (wake on attention) returning the pending question;
//! - `ACP-b answer→response written to the agent`: the `Answer` RPC sent, to the agent's stamp
//!   right after it read the JSON-RPC response (through the FIFO and the supervisor's pipe).
//!
//! Both stamps are wall-clock nanoseconds on this machine. `caesar-bench-acp [--runs N]`;
//! `caesar-bench --acp` runs it too.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use caesar_proto::client;
use caesar_proto::paths::Paths;
use caesar_proto::pb;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn stamps(path: &Path) -> Vec<u128> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn git(dir: &Path, args: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let ok = Command::new("git")
        .args(["-c", "user.name=b", "-c", "user.email=b@b", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()?
        .success();
    if ok { Ok(()) } else { Err(format!("git {args:?} failed").into()) }
}

fn print(name: &str, target: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        println!("{name:<48} no samples");
        return;
    }
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<48} min {:>7.3}  median {:>7.3}  p90 {:>7.3}  max {:>7.3} ms  (n={}, target {target})",
        v[0],
        p(0.5),
        p(0.9),
        v[v.len() - 1],
        v.len()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or("--runs takes a number")?,
        None => 100,
    }
    .max(100);
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let home = tempfile::Builder::new().prefix("ca").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    let p = project.path();
    let (sent, read) = (home.path().join("sent"), home.path().join("read"));
    let mut steps = format!("stamp-sent '{}' stamp-answer '{}'", sent.display(), read.display());
    for i in 0..runs {
        steps.push_str(&format!(" ask 'echo {i}'"));
    }
    let script = home.path().join("qwen-acp");
    std::fs::write(&script, format!("#!/bin/sh\nexec '{}' {steps}\n", bin_dir.join("fake-acp").display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    std::fs::create_dir_all(p.join(".caesar"))?;
    std::fs::write(p.join(".caesar/config.toml"), format!("[bin]\nqwen = {:?}\n", script.display().to_string()))?;
    std::fs::write(p.join(".gitignore"), ".caesar/\n")?;
    git(p, &["init", "-q"])?;
    git(p, &["add", "-A"])?;
    git(p, &["commit", "-qm", "base"])?;
    let paths = Paths::under(home.path());
    let mut daemon = Command::new(bin_dir.join("caesard"))
        .env("CAESAR_HOME", home.path())
        .env("CAESAR_LOG", "warn")
        .env("CAESAR_KILL_GRACE_MS", "200")
        // The project's `[bin]` is honoured only in a trusted project (issue 19).
        .env("CAESAR_TRUST_PREFIX", p)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut c = client::wait_until_ready(&paths, Duration::from_secs(20)).await?;
    let d = c
        .delegate(pb::DelegateRequest {
            objective: "ask many times".into(),
            agent: "qwen".into(),
            mode: "write".into(),
            isolation: "worktree".into(),
            workspace: p.display().to_string(),
            timeout_ms: 600_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    let (mut visible, mut written) = (Vec::new(), Vec::new());
    let mut last = String::new();
    for i in 0..runs {
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
            if let Some(q) = t.pending_questions.first().filter(|q| q.question_id != last) {
                break q.question_id.clone();
            }
            if !t.report_json.is_empty() {
                return Err(format!("the task ended at ask {i}: {}", t.report_json).into());
            }
        };
        let seen = now_ns();
        let asked = *stamps(&sent).get(i).ok_or("the agent's request stamp is missing")?;
        visible.push(seen.saturating_sub(asked) as f64 / 1e6);
        let before = now_ns();
        c.answer(pb::AnswerRequest { task_id: d.task_id.clone(), question_id: qid.clone(), answer: "allow".into() })
            .await?;
        last = qid;
        let got = loop {
            if let Some(t) = stamps(&read).get(i) {
                break *t;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        written.push(got.saturating_sub(before) as f64 / 1e6);
    }
    print("ACP-a permission request→visible to await", "≤ 5 ms", visible);
    print("ACP-b caesar_answer→response written to the agent", "≤ 5 ms", written);
    let _ = c.shutdown(pb::ShutdownRequest { cancel_tasks: true, only_if_idle: false }).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while daemon.try_wait().ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    Ok(())
}

//! ACP's permission round trip (issue 15), for BENCHMARKS.md: a scripted ACP agent
//! (`fake-acp`, as the `qwen` provider through `[bin]`) asks for a permission `--runs` times
//! (100 at least) in one write task, through a real daemon and its supervisor. Per ask:
//!
//! - `ACP-a request→visible to await`: the agent's stamp right after it wrote
//!   `session/request_permission`, to `Await` (wake on attention) returning the pending question;
//! - `ACP-b answer→response written to the agent`: the `Answer` RPC sent, to the agent's stamp
//!   right after it read the JSON-RPC response (through the FIFO and the supervisor's pipe).
//!
//! Both stamps are wall-clock nanoseconds on this machine. `caesar-bench-acp [--runs N]
//! [--remote]`; `caesar-bench --acp` runs it too. `--remote` runs the task on the Kubernetes
//! runner against the simulator as the tests start it (`k8s-sim`, its process kubelet running
//! the pod's supervisor and the agent as local processes, "the image" a directory holding the
//! agent as `qwen`): the question then comes through the pod's log stream mirrored into
//! raw.log, the answer through the stdin pump's `pods/exec` stream into the pod's FIFO.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use caesar_proto::pb;
use caesar_tests::bench::{BenchDaemon, SimCluster, commit_project};

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn stamps(path: &Path) -> Vec<u128> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn print(name: &str, target: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        println!("{name:<48} no samples");
        return;
    }
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<48} min {:>7.3}  median {:>7.3}  p90 {:>7.3}  p95 {:>7.3}  max {:>7.3} ms  (n={}, target {target})",
        v[0],
        p(0.5),
        p(0.9),
        p(0.95),
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
    let remote = args.iter().any(|a| a == "--remote");
    let bin_dir = std::env::current_exe()?.parent().ok_or("no bin dir")?.to_path_buf();
    let home = tempfile::Builder::new().prefix("ca").tempdir_in("/tmp")?;
    let project = tempfile::tempdir()?;
    let p = project.path();
    // Beneath `files/`, made before the task starts: caesar's directories
    // are carved out of the agent's /tmp, and new entries beside them.
    std::fs::create_dir_all(home.path().join("files"))?;
    let (sent, read) = (home.path().join("files/sent"), home.path().join("files/read"));
    let mut steps = format!("stamp-sent '{}' stamp-answer '{}'", sent.display(), read.display());
    for i in 0..runs {
        steps.push_str(&format!(" ask 'echo {i}'"));
    }
    // A pod runs the agent by its CLI's name from the image's PATH: the script is `qwen` there.
    let image = home.path().join("image");
    std::fs::create_dir_all(&image)?;
    let script = image.join("qwen");
    std::fs::write(&script, format!("#!/bin/sh\nexec '{}' {steps}\n", bin_dir.join("fake-acp").display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    commit_project(p, &format!("[bin]\nqwen = {:?}\n", script.display().to_string()))?;
    let _cluster = if remote {
        let path = format!("{}:{}:{}", image.display(), bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let cluster = SimCluster::start(&bin_dir, &path)?;
        std::fs::write(p.join(".caesar/config.local.toml"), cluster.runner_config())?;
        Some(cluster)
    } else {
        None
    };
    let mut daemon = BenchDaemon::start(&bin_dir, home.path(), "warn", &[("CAESAR_KILL_GRACE_MS", "200")]).await?;
    let c = &mut daemon.client;
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
        let until = std::time::Instant::now() + Duration::from_secs(60);
        let got = loop {
            if let Some(t) = stamps(&read).get(i) {
                break *t;
            }
            if std::time::Instant::now() > until {
                return Err(format!("the agent read no answer to ask {i} within 60 s").into());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        written.push(got.saturating_sub(before) as f64 / 1e6);
    }
    let (a, b) = if remote {
        ("ACP-a remote request→visible to await", "ACP-b remote caesar_answer→agent read it")
    } else {
        ("ACP-a permission request→visible to await", "ACP-b caesar_answer→response written to the agent")
    };
    let target = if remote { "none yet" } else { "≤ 5 ms" };
    print(a, target, visible);
    print(b, target, written);
    daemon.stop().await;
    Ok(())
}

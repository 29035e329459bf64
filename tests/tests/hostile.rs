//! Agents and repositories that attack the daemon through the files it
//! reads: a report made a FIFO, a gigabyte report, a report linked to
//! /dev/zero, a committed config linked to /dev/zero. Each is refused by
//! name, the daemon stays responsive and small, and nothing else is lost.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::*;

const LONG: Duration = Duration::from_secs(30);

/// The daemon's peak resident memory, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn findings_text(report_json: &str) -> String {
    json(report_json)["findings"].as_array().unwrap().iter().map(|f| f["detail"].to_string()).collect()
}

#[tokio::test]
async fn hostile_report_files_are_refused_and_the_daemon_is_neither_wedged_nor_swollen() {
    let fenced = ["fenced", "success", "the work itself"];
    let with = |attack: &'static str| -> Vec<&'static str> {
        let mut v = vec!["sh", attack];
        v.extend(fenced);
        v
    };
    let fifo = with(r#"mkfifo "$CAESAR_REPORT_PATH""#);
    let channel_fifo = with(r#"mkfifo "$CAESAR_TASK_DIR/report.channel.json""#);
    let huge = with(r#"truncate -s 1G "$CAESAR_REPORT_PATH""#);
    let zero = with(r#"ln -s /dev/zero "$CAESAR_REPORT_PATH""#);
    let env = Env::new(&[("fifo", &fifo), ("channel-fifo", &channel_fifo), ("huge", &huge), ("zero", &zero)]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let daemon = env.daemon_pid().await;
    let started = Instant::now();
    let mut ids = Vec::new();
    for agent in ["fifo", "channel-fifo", "huge", "zero"] {
        ids.push((agent, c.delegate(env.delegate_request(agent, "x")).await.unwrap().into_inner().task_id));
    }
    for (agent, id) in &ids {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{agent}: {t:?}");
        // The work is not lost: the fenced report in the output is used.
        assert_eq!(
            (t.report_source.as_str(), json(&t.report_json)["summary"].as_str()),
            ("fenced", Some("the work itself")),
            "{agent}"
        );
        let said = findings_text(&t.report_json);
        match *agent {
            "fifo" => assert!(said.contains("a FIFO"), "{agent}: {said}"),
            "huge" => assert!(said.contains("larger than the cap of"), "{agent}: {said}"),
            "zero" => assert!(said.contains("symbolic link"), "{agent}: {said}"),
            // The channel report is only ever the daemon's own file: a FIFO
            // there is skipped without a word, and must not block.
            _ => {}
        }
    }
    assert!(started.elapsed() < LONG, "the daemon was wedged");
    // Still answering, and it never held the gigabyte or /dev/zero.
    assert_eq!(env.daemon_pid().await, daemon);
    let peak = peak_rss_kib(daemon);
    assert!(peak < 200 * 1024, "the daemon's peak memory was {peak} KiB");
}

#[tokio::test]
async fn a_committed_config_linked_to_dev_zero_is_refused_by_name() {
    let env = Env::new(&[]);
    let config = env.project.path().join(".caesar/config.toml");
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    let mut env = env;
    let _c = env.start_daemon().await;
    let daemon = env.daemon_pid().await;
    let started = Instant::now();
    let out = env.caesar(&["agents", "list"]);
    assert!(started.elapsed() < LONG);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".caesar/config.toml") && err.contains("symbolic link"), "{err}");
    let peak = peak_rss_kib(daemon);
    assert!(peak < 200 * 1024, "the daemon's peak memory was {peak} KiB");
}

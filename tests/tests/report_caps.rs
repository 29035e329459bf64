//! Issue 19's parse-time caps and one-pass shaping, through the real
//! daemon and the real MCP shim: an agent that writes a report of 300,000
//! changes and 300,000 findings, or one with a 100 MB string, ends with a
//! capped report (from its file, not refused) whose finding says what was
//! cut; the daemon's memory stays bounded; and `caesar_await` over MCP
//! answers that report within the 20,000-character cap, as valid JSON that
//! says it was cut.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;
mod raw_mcp;

use std::time::Duration;

use common::*;
use raw_mcp::{Raw, ok};
use serde_json::json;

const LONG: Duration = Duration::from_secs(120);

/// The daemon's peak resident memory, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn truncation_note(report: &serde_json::Value) -> String {
    let findings = report["findings"].as_array().unwrap();
    let notes: Vec<&serde_json::Value> =
        findings.iter().filter(|f| f["title"] == "report truncated by caesar").collect();
    assert_eq!(notes.len(), 1, "one truncation note: {notes:?}");
    notes[0]["detail"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn huge_reports_are_capped_while_read_and_answered_under_the_cap() {
    let hundred_mb = (100 * 1024 * 1024).to_string();
    let many: &[&str] = &["report-huge", "300000", "10"];
    let long: &[&str] = &["report-huge", "3", &hundred_mb];
    let mut env = Env::new(&[("many", many), ("long", long)]);
    let mut c = env.start_daemon().await;
    let daemon = env.daemon_pid().await;

    let many_id = c.delegate(env.delegate_request("many", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &many_id, LONG).await;
    assert_eq!((t.status().as_str(), t.report_source.as_str()), ("succeeded", "file"), "{t:?}");
    let r = json(&t.report_json);
    assert_eq!(r["summary"], "a huge report");
    assert!(r["findings"].as_array().unwrap().len() < 1100, "the findings were capped");
    let note = truncation_note(&r);
    assert!(note.contains("`changes` had 300000 entries, kept the first 1000"), "{note}");
    assert!(note.contains("`findings` had 300000 entries, kept the first 999"), "{note}");
    // The agent's first findings are kept, in order.
    assert_eq!(r["findings"][0]["title"], "finding 0");

    let long_id = c.delegate(env.delegate_request("long", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &long_id, LONG).await;
    assert_eq!((t.status().as_str(), t.report_source.as_str()), ("succeeded", "file"), "{t:?}");
    let r = json(&t.report_json);
    let details = r["details"].as_str().unwrap();
    assert!(details.len() <= 64 * 1024 && details.ends_with(" [truncated by caesar]"), "{}", details.len());
    let note = truncation_note(&r);
    assert!(note.contains("1 string(s) longer than 65536 bytes were cut"), "{note}");

    // The daemon never held the 37 MB or the 100 MB file as a value.
    assert_eq!(env.daemon_pid().await, daemon, "the daemon is still the same");
    let peak = peak_rss_kib(daemon);
    assert!(peak < 150 * 1024, "the daemon's peak memory was {peak} KiB");

    // Over MCP: both reports in one await, within the 20,000-character cap.
    let mut shim = Raw::spawn(&env, &[]);
    let r = shim.call("caesar_await", json!({"task_ids": [many_id, long_id], "timeout_ms": 1000}), json!({})).await;
    let text = r["content"][0]["text"].as_str().unwrap().to_owned();
    let out = ok(&r);
    assert!(text.chars().count() <= 20_000, "the answer takes {} characters", text.chars().count());
    assert_eq!(out["truncated"], true, "{out}");
    assert!(out["hint"].as_str().unwrap().contains("Cut:"), "{out}");
    for id in [&many_id, &long_id] {
        assert_eq!(out["tasks"][id.as_str()]["status"], "succeeded", "{out}");
    }
    // What is kept is the start of each list, not nothing.
    assert_eq!(out["tasks"][many_id.as_str()]["report"]["findings"][0]["title"], "finding 0", "{out}");
    assert!(out["hint"].as_str().unwrap().contains("caesar --json status"), "{out}");
}

//! The CLI side of issue 17's fan-out: `caesar run --agents a,b,c` (or
//! `--attempts N`) follows a group to its end and prints its members side
//! by side; the radar's overlaps as `caesar diff` and `caesar apply` show them.

use caesar_proto::client::Client;
use caesar_proto::pb;
use serde_json::{Value, json};

use crate::render::sanitize;

/// Overlaps as JSON.
pub fn overlaps_json(list: &[pb::Overlap]) -> Value {
    Value::Array(
        list.iter().map(|o| json!({"task_id": o.task_id, "paths": o.paths, "hunk_paths": o.hunk_paths})).collect(),
    )
}

/// Overlaps for people, one line each, under `title`.
pub fn print_overlaps(title: &str, list: &[pb::Overlap]) {
    if list.is_empty() {
        return;
    }
    println!("{title}");
    for o in list {
        let who = if o.task_id == "uncommitted" { "your uncommitted changes".to_owned() } else { o.task_id.clone() };
        let same_lines =
            if o.hunk_paths.is_empty() { String::new() } else { format!(" (same lines: {})", o.hunk_paths.join(", ")) };
        println!("  {who}: {}", sanitize(&format!("{}{same_lines}", o.paths.join(", "))));
    }
}

/// Waits until every member of the group has ended; returns its summary.
pub async fn await_group(c: &mut Client, group_id: &str) -> anyhow::Result<pb::GroupSummary> {
    loop {
        let r = c
            .r#await(pb::AwaitRequest {
                task_ids: vec![group_id.to_owned()],
                timeout_ms: 60_000,
                wake_on_attention: false,
            })
            .await?
            .into_inner();
        let Some(g) = r.groups.into_iter().next() else { anyhow::bail!("the daemon returned no group {group_id}") };
        if g.done {
            return Ok(g);
        }
    }
}

/// A group summary as JSON.
pub fn group_json(g: &pb::GroupSummary) -> Value {
    let members: Vec<Value> = g
        .members
        .iter()
        .map(|m| {
            json!({"task_id": m.task_id, "agent": m.agent, "status": m.status, "report_status": m.report_status,
                   "verification": m.verification, "files_changed": m.files_changed, "lines_added": m.lines_added,
                   "lines_removed": m.lines_removed, "input_tokens": m.input_tokens, "output_tokens": m.output_tokens,
                   "cost_usd": m.cost_usd, "duration_ms": m.duration_ms, "summary": m.summary,
                   "overlaps": overlaps_json(&m.overlaps)})
        })
        .collect();
    json!({"group_id": g.group_id, "objective": g.objective, "done": g.done, "members": members})
}

/// The comparison table of a group.
pub fn comparison(g: &pb::GroupSummary) -> String {
    let mut out = format!("group {}: {}\n", g.group_id, sanitize(&g.objective));
    out.push_str(&format!(
        "{:<16} {:<12} {:<10} {:<8} {:<9} {:>5} {:>7} {:>7} {:>9} {:>8}  overlaps\n",
        "task", "agent", "status", "report", "verified", "files", "+lines", "-lines", "tokens", "time"
    ));
    for m in &g.members {
        let tokens = match (m.input_tokens, m.output_tokens) {
            (None, None) => "-".to_owned(),
            (i, o) => (i.unwrap_or(0) + o.unwrap_or(0)).to_string(),
        };
        let overlaps: Vec<String> = m
            .overlaps
            .iter()
            .map(|o| {
                format!("{} ({})", o.task_id, if o.hunk_paths.is_empty() { o.paths.len() } else { o.hunk_paths.len() })
            })
            .collect();
        out.push_str(&format!(
            "{:<16} {:<12} {:<10} {:<8} {:<9} {:>5} {:>7} {:>7} {:>9} {:>7}s  {}\n",
            m.task_id,
            sanitize(&m.agent),
            m.status,
            if m.report_status.is_empty() { "-" } else { &m.report_status },
            if m.verification.is_empty() { "-" } else { &m.verification },
            m.files_changed,
            m.lines_added,
            m.lines_removed,
            tokens,
            m.duration_ms / 1000,
            if overlaps.is_empty() { "-".to_owned() } else { overlaps.join(", ") }
        ));
        if let Some(cost) = m.cost_usd {
            out.push_str(&format!("{:<16} cost ${cost:.4}\n", ""));
        }
    }
    out.push_str("review each with `caesar diff <task>`, land one with `caesar apply <task>`\n");
    out
}

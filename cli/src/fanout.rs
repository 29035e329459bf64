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
/// `tell` hears each look at the group while it runs (`caesar run` prints
/// its progress from them).
pub async fn await_group(
    c: &mut Client,
    group_id: &str,
    mut tell: impl FnMut(&pb::GroupSummary),
) -> anyhow::Result<pb::GroupSummary> {
    loop {
        let r = c
            .r#await(pb::AwaitRequest {
                task_ids: vec![group_id.to_owned()],
                timeout_ms: LOOK_EVERY_MS,
                wake_on_attention: false,
            })
            .await?
            .into_inner();
        let Some(g) = r.groups.into_iter().next() else { anyhow::bail!("the daemon returned no group {group_id}") };
        if g.done {
            return Ok(g);
        }
        tell(&g);
    }
}

/// How long one look at a running group waits for it to end.
const LOOK_EVERY_MS: u64 = 1_000;

/// How long a running group may go without a line of progress.
const QUIET_MS: u64 = 10_000;

/// The progress of a running group, as lines for a terminal: one when a
/// member ends (its verdict, files and time), and when nothing ended for a
/// while, one saying who still runs. Pure: the caller gives the time.
#[derive(Debug, Default)]
pub struct Progress {
    ended: std::collections::BTreeSet<String>,
    last_line_ms: u64,
}

impl Progress {
    /// The lines to print for this look at the group, `elapsed_ms` after it began.
    pub fn lines(&mut self, g: &pb::GroupSummary, elapsed_ms: u64) -> Vec<String> {
        let total = g.members.len();
        let mut out = Vec::new();
        for m in &g.members {
            use pb::TaskStatus::{Cancelled, Failed, Succeeded, TimedOut};
            let ended = matches!(m.status(), Succeeded | Failed | Cancelled | TimedOut);
            if !ended || !self.ended.insert(m.task_id.clone()) {
                continue;
            }
            out.push(format!(
                "  [{}/{total}] {} ({}): {}, {} file(s) +{} -{}, {}s",
                self.ended.len(),
                m.task_id,
                sanitize(&m.agent),
                member_verdict(m),
                m.files_changed,
                m.lines_added,
                m.lines_removed,
                m.duration_ms / 1000
            ));
        }
        if out.is_empty() && elapsed_ms.saturating_sub(self.last_line_ms) >= QUIET_MS {
            let running: Vec<String> = g
                .members
                .iter()
                .filter(|m| !self.ended.contains(&m.task_id))
                .map(|m| format!("{} {}", m.task_id, sanitize(&m.agent)))
                .collect();
            out.push(format!(
                "  … {} of {total} still running after {}s: {}",
                running.len(),
                elapsed_ms / 1000,
                running.join(", ")
            ));
        }
        if !out.is_empty() {
            self.last_line_ms = elapsed_ms;
        }
        out
    }
}

/// A member's verdict as people read it; its process outcome from an older daemon.
fn member_verdict(m: &pb::GroupMember) -> String {
    let label = pb::Verdict::label_of(m.verdict, &m.verdict_detail);
    if label.is_empty() { pb::TaskStatus::spell(m.status).to_owned() } else { label }
}

/// The `verified` column: the verify commands' outcome where the task had
/// some, else how its changes were checked (`git`, `kernel` or `declaration`).
fn member_verified(m: &pb::GroupMember) -> &str {
    match (m.verification.as_str(), m.changes_verified_by.as_str()) {
        ("", "") => "-",
        ("", by) => by,
        (outcome, _) => outcome,
    }
}

/// A group summary as JSON.
pub fn group_json(g: &pb::GroupSummary) -> Value {
    let members: Vec<Value> = g
        .members
        .iter()
        .map(|m| {
            json!({"task_id": m.task_id, "agent": m.agent, "status": m.status, "verdict": member_verdict(m),
                   "report_status": m.report_status, "changes_verified_by": m.changes_verified_by,
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
        "{:<16} {:<12} {:<20} {:<8} {:<11} {:>5} {:>7} {:>7} {:>9} {:>8}  overlaps\n",
        "task", "agent", "verdict", "report", "verified", "files", "+lines", "-lines", "tokens", "time"
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
            "{:<16} {:<12} {:<20} {:<8} {:<11} {:>5} {:>7} {:>7} {:>9} {:>7}s  {}\n",
            m.task_id,
            sanitize(&m.agent),
            member_verdict(m),
            if m.report_status.is_empty() { "-" } else { &m.report_status },
            member_verified(m),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, status: pb::TaskStatus, verification: &str, by: &str) -> pb::GroupMember {
        pb::GroupMember {
            task_id: id.to_owned(),
            agent: format!("agent-{id}"),
            status: status.into(),
            verification: verification.to_owned(),
            changes_verified_by: by.to_owned(),
            files_changed: 2,
            lines_added: 5,
            lines_removed: 1,
            duration_ms: 12_000,
            ..Default::default()
        }
    }

    fn group(members: Vec<pb::GroupMember>) -> pb::GroupSummary {
        pb::GroupSummary { group_id: "g_0123456789ab".into(), objective: "x".into(), members, done: false }
    }

    #[test]
    fn progress_tells_each_member_once_as_it_ends_and_who_still_runs_when_quiet() {
        use pb::TaskStatus::{Running, Succeeded};
        let mut p = Progress::default();
        let mut g = group(vec![member("t_a", Running, "", ""), member("t_b", Running, "", "")]);
        assert!(p.lines(&g, 1_000).is_empty(), "nothing ended, not quiet for long yet");
        let quiet = p.lines(&g, 10_000);
        assert_eq!(quiet, ["  … 2 of 2 still running after 10s: t_a agent-t_a, t_b agent-t_b"]);
        assert!(p.lines(&g, 12_000).is_empty(), "the next quiet line waits another 10 s");
        g.members[0].status = Succeeded.into();
        g.members[0].verdict = pb::Verdict::Succeeded.into();
        let ended = p.lines(&g, 13_000);
        assert_eq!(ended, ["  [1/2] t_a (agent-t_a): succeeded, 2 file(s) +5 -1, 12s"]);
        assert!(p.lines(&g, 14_000).is_empty(), "told once");
        assert_eq!(p.lines(&g, 23_000), ["  … 1 of 2 still running after 23s: t_b agent-t_b"]);
    }

    #[test]
    fn the_verified_column_is_the_verify_outcome_else_how_changes_were_checked() {
        use pb::TaskStatus::Succeeded;
        let mut blocked = member("t_c", Succeeded, "", "");
        blocked.verdict = pb::Verdict::Blocked.into();
        blocked.verdict_detail = "auth".into();
        let g = group(vec![member("t_a", Succeeded, "passed", "git"), member("t_b", Succeeded, "", "git"), blocked]);
        let table = comparison(&g);
        let row = |id: &str| table.lines().find(|l| l.starts_with(id)).unwrap().to_owned();
        assert!(table.lines().nth(1).unwrap().contains("verdict"), "{table}");
        assert!(row("t_a").contains(" passed "), "{table}");
        assert!(row("t_b").contains(" git "), "git-verified, not `-`: {table}");
        assert!(row("t_c").contains("blocked: auth") && row("t_c").contains(" - "), "{table}");
    }
}

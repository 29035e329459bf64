//! `caesar watch`: running and recent tasks, live.
//!
//! On a terminal the screen is redrawn every second: tasks waiting on a
//! question first, then the rest, with the agent, elapsed time, current
//! tool, event count, and how long the agent has been silent. Through a pipe
//! it prints one line per event, and with `--json` one NDJSON object per
//! event (`--once`: one object per task). Colour only on a terminal, and
//! never with NO_COLOR.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::render;

/// How long a finished task stays on screen.
const RECENT_MS: i64 = 5 * 60 * 1000;
/// Silence longer than this is shown.
const SILENT_MS: i64 = 30 * 1000;

/// What to watch and how.
pub struct Options {
    pub ids: Vec<String>,
    pub once: bool,
    pub json: bool,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Milliseconds since the epoch of an RFC 3339 UTC timestamp as caesar
/// writes them (`2026-11-30T22:43:51.123Z`); `None` for anything else.
fn parse_ms(at: &str) -> Option<i64> {
    let b = at.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| at.get(r).and_then(|s| s.parse::<i64>().ok());
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let ms = if b.get(19) == Some(&b'.') { num(20..23).unwrap_or(0) } else { 0 };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms)
}

async fn snapshot(c: &mut Client, ids: &[String]) -> Result<Vec<pb::TaskView>, tonic::Status> {
    if !ids.is_empty() {
        let mut out = Vec::new();
        for id in ids {
            out.push(c.status(pb::StatusRequest { task_id: id.clone() }).await?.into_inner());
        }
        return Ok(out);
    }
    let all = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 100 }).await?.into_inner().tasks;
    let now = now_ms();
    Ok(all
        .into_iter()
        .filter(|t| {
            matches!(t.status.as_str(), "pending" | "running")
                || parse_ms(&t.finished_at).is_some_and(|f| now - f < RECENT_MS)
        })
        .collect())
}

/// Runs the watch until interrupted (or once).
pub async fn run(mut c: Client, opts: Options) -> anyhow::Result<u8> {
    let tty = std::io::stdout().is_terminal() && !opts.json;
    if opts.once {
        let tasks = snapshot(&mut c, &opts.ids).await?;
        if opts.json {
            for t in &tasks {
                println!("{}", render::task_json(t));
            }
        } else {
            print!("{}", screen(&tasks, false));
        }
        return Ok(0);
    }
    if tty {
        let color = std::env::var_os("NO_COLOR").is_none();
        loop {
            let tasks = snapshot(&mut c, &opts.ids).await?;
            print!("\x1b[2J\x1b[H{}", screen(&tasks, color));
            let _ = std::io::stdout().flush();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = tokio::signal::ctrl_c() => return Ok(0),
            }
        }
    }
    // A line (or an NDJSON object) per event, for every task as it appears.
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    let mut followed: HashSet<String> = HashSet::new();
    let mut discover = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = discover.tick() => {
                for t in snapshot(&mut c, &opts.ids).await? {
                    if followed.insert(t.task_id.clone()) {
                        let mut client = c.clone();
                        let tx = tx.clone();
                        let from_seq = t.event_count;
                        tokio::spawn(async move {
                            let req = pb::WatchEventsRequest { task_id: t.task_id, from_seq, follow: true };
                            let Ok(stream) = client.watch_events(req).await else { return };
                            let mut stream = stream.into_inner();
                            while let Ok(Some(ev)) = stream.message().await {
                                if tx.send(ev.event_json).await.is_err() {
                                    return;
                                }
                            }
                        });
                    }
                }
            }
            Some(line) = rx.recv() => {
                if opts.json {
                    println!("{line}");
                } else {
                    let task = serde_json::from_str::<Value>(&line).ok().and_then(|v| v["task_id"].as_str().map(str::to_owned)).unwrap_or_default();
                    print!("{task}  ");
                    render::print_event(&line);
                }
                let _ = std::io::stdout().flush();
            }
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}

/// The screen: questions first, then running, pending and recent tasks.
fn screen(tasks: &[pb::TaskView], color: bool) -> String {
    let paint = |code: &str, s: &str| if color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() };
    let mut sorted: Vec<&pb::TaskView> = tasks.iter().collect();
    sorted.sort_by_key(|t| (t.pending_questions.is_empty(), !matches!(t.status.as_str(), "running" | "pending")));
    let now = now_ms();
    let mut out = format!(
        "{:<16} {:<10} {:<12} {:>8} {:<18} {:>6}  NOTE\n",
        "TASK", "STATUS", "AGENT", "ELAPSED", "TOOL", "EVENTS"
    );
    if sorted.is_empty() {
        out.push_str("no running or recent task\n");
    }
    for t in sorted {
        let status = match t.status.as_str() {
            "running" => paint("32", "running   "),
            "succeeded" => paint("32", "succeeded "),
            "failed" | "timed_out" => paint("31", &format!("{:<10}", t.status)),
            other => format!("{other:<10}"),
        };
        let tool = t
            .activity
            .as_ref()
            .filter(|a| a.kind == "tool_use")
            .map(|a| format!("{} {}", a.tool_name, a.state))
            .unwrap_or_else(|| t.activity.as_ref().map(|a| a.kind.clone()).unwrap_or_default());
        let last_at =
            serde_json::from_str::<Value>(&t.last_event_json).ok().and_then(|e| e["at"].as_str().and_then(parse_ms));
        let mut note = String::new();
        if let Some(q) = t.pending_questions.first() {
            note = paint("33", &format!("QUESTION {}: {}", q.question_id, q.question));
        } else if t.status == "running"
            && let Some(at) = last_at
            && now - at > SILENT_MS
        {
            note = format!("no event for {} s", (now - at) / 1000);
        } else if !t.blocker.is_empty() {
            note = paint("31", &format!("blocked: {}", t.blocker));
        } else if let Some(p) = t.queue_position {
            note = format!("queued, {p} ahead");
        } else if !t.report_status.is_empty() {
            note = format!("report {}", t.report_status);
        }
        out.push_str(&format!(
            "{:<16} {} {:<12} {:>8} {:<18} {:>6}  {}\n",
            t.task_id,
            status,
            t.agent,
            format!("{}s", t.elapsed_ms / 1000),
            tool.chars().take(18).collect::<String>(),
            t.event_count,
            note
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_caesar_timestamps() {
        assert_eq!(parse_ms("1970-01-01T00:00:01.500Z"), Some(1500));
        assert_eq!(parse_ms("2026-11-30T23:43:51.123Z"), Some(1_796_082_231_123));
        assert_eq!(parse_ms("nope"), None);
    }

    #[test]
    fn questions_come_first_and_silence_is_shown() {
        let old = "1970-01-01T00:00:00.000Z";
        let quiet = pb::TaskView {
            task_id: "t_quiet".into(),
            status: "running".into(),
            last_event_json: format!("{{\"at\":\"{old}\"}}"),
            ..Default::default()
        };
        let asking = pb::TaskView {
            task_id: "t_asking".into(),
            status: "running".into(),
            pending_questions: vec![pb::PendingQuestion {
                question_id: "q_1".into(),
                question: "why?".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let s = screen(&[quiet, asking], false);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[1].starts_with("t_asking") && lines[1].contains("QUESTION q_1: why?"), "{s}");
        assert!(lines[2].contains("no event for"), "{s}");
        assert!(!s.contains('\x1b'), "no colour when asked not to");
    }
}

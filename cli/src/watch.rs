//! `caesar watch`: running and recent tasks, live.
//!
//! On a terminal the screen is redrawn every second: tasks waiting on a
//! question first, then the rest, each with the agent, elapsed time, current
//! tool, event count and how long the agent has been silent, then under it
//! its objective, its last reply line (or what it is doing) and its pending
//! question, every line cut to the terminal's width and stripped of the
//! agent's control characters. Through a pipe it prints one line per event,
//! and with `--json` one NDJSON object per event (`--once`: one object per
//! task). Colour only on a terminal, and never with NO_COLOR.

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
            matches!(t.status(), pb::TaskStatus::Pending | pb::TaskStatus::Running)
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
            print!("{}", screen(&tasks, false, terminal_width(), terminal_height(), now_ms()));
        }
        return Ok(0);
    }
    if tty {
        let color = std::env::var_os("NO_COLOR").is_none();
        loop {
            let tasks = snapshot(&mut c, &opts.ids).await?;
            // One row fewer than the terminal's: the last line's newline must not scroll the header away.
            let height = terminal_height().saturating_sub(1);
            print!("\x1b[2J\x1b[H{}", screen(&tasks, color, terminal_width(), height, now_ms()));
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
                    render::print_event(&line, render::Command::Brief);
                }
                let _ = std::io::stdout().flush();
            }
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}

/// The width to cut lines to: the terminal's, else `COLUMNS`, else 100.
fn terminal_width() -> usize {
    tty_columns()
        .or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).filter(|c| *c > 0))
        .unwrap_or(100)
}

/// The lines a screen may take: the terminal's rows, else `LINES`, else 50.
fn terminal_height() -> usize {
    tty_size()
        .map(|(rows, _)| rows)
        .filter(|r| *r > 0)
        .or_else(|| std::env::var("LINES").ok().and_then(|c| c.parse().ok()).filter(|c| *c > 0))
        .unwrap_or(50)
}

fn tty_columns() -> Option<usize> {
    tty_size().map(|(_, cols)| cols).filter(|c| *c > 0)
}

/// The terminal's rows and columns, when stdout is one.
#[cfg(unix)]
fn tty_size() -> Option<(usize, usize)> {
    let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct passed, which
    // outlives the call; on a descriptor that is no terminal it fails and
    // writes nothing.
    #[allow(unsafe_code)]
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0).then_some((usize::from(ws.ws_row), usize::from(ws.ws_col)))
}

#[cfg(not(unix))]
fn tty_size() -> Option<(usize, usize)> {
    None
}

/// `s` cut to `width` visible characters (the screen's own colour
/// sequences, `ESC [ … m`, take no room), with `…` where it was cut.
fn fit(s: &str, width: usize) -> String {
    let mut out = String::new();
    let mut visible = 0;
    let mut chars = s.chars().peekable();
    let mut cut = false;
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            out.push(c);
            for c in chars.by_ref() {
                out.push(c);
                if c == 'm' {
                    break;
                }
            }
            continue;
        }
        if visible + 1 == width && !rest_is_only_colour(chars.clone()) {
            out.push('…');
            cut = true;
            break;
        }
        out.push(c);
        visible += 1;
    }
    if cut && color_open(&out) {
        out.push_str("\x1b[0m");
    }
    out
}

/// Whether what is left is only colour sequences (nothing visible).
fn rest_is_only_colour(mut rest: std::iter::Peekable<std::str::Chars<'_>>) -> bool {
    while let Some(c) = rest.next() {
        if c != '\x1b' {
            return false;
        }
        for c in rest.by_ref() {
            if c == 'm' {
                break;
            }
        }
    }
    true
}

/// Whether a colour was started and not reset.
fn color_open(s: &str) -> bool {
    match (s.rfind("\x1b["), s.rfind("\x1b[0m")) {
        (Some(start), Some(reset)) => start > reset,
        (Some(_), None) => true,
        _ => false,
    }
}

/// What a task last said, or else what it is doing: the last line of its
/// reply, its last message, its ending, or its current activity.
fn last_words(t: &pb::TaskView) -> Option<String> {
    let last_line = |s: &str| s.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_owned());
    if let Some(line) = last_line(&t.output_tail) {
        return Some(format!("said: {line}"));
    }
    let e = serde_json::from_str::<Value>(&t.last_event_json).unwrap_or(Value::Null);
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
    match s("type") {
        "message" => {
            if let Some(line) = last_line(s("text")) {
                return Some(format!("said: {line}"));
            }
        }
        "finished" if !s("summary").is_empty() => return last_line(s("summary")).map(|l| format!("ended: {l}")),
        "error" => return Some(format!("error: {}", s("message"))),
        "warning" => return Some(format!("warning: {}", s("message"))),
        _ => {}
    }
    let a = t.activity.as_ref()?;
    Some(match a.kind.as_str() {
        "tool_use" => format!("doing: tool {} {}", a.tool_name, a.state),
        "thinking" => "doing: thinking".to_owned(),
        other => format!("doing: {other}"),
    })
}

/// The screen: questions first, then running, pending and recent tasks,
/// each a row and, under it, its objective, its last words and its
/// question, cut to `width`, in at most `height` lines: what does not fit
/// (the finished tasks first) is counted in the last line instead.
fn screen(tasks: &[pb::TaskView], color: bool, width: usize, height: usize, now: i64) -> String {
    let paint = |code: &str, s: &str| if color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() };
    let mut sorted: Vec<&pb::TaskView> = tasks.iter().collect();
    sorted.sort_by_key(|t| {
        (t.pending_questions.is_empty(), !matches!(t.status(), pb::TaskStatus::Running | pb::TaskStatus::Pending))
    });
    let mut out = vec![format!(
        "{:<16} {:<19} {:<12} {:>8} {:<14} {:>6}  NOTE",
        "TASK", "VERDICT", "AGENT", "ELAPSED", "TOOL", "EVENTS"
    )];
    if sorted.is_empty() {
        out.push("no running or recent task".to_owned());
    }
    let blocks: Vec<(bool, Vec<String>)> = sorted
        .iter()
        .map(|t| (matches!(t.status(), pb::TaskStatus::Running | pb::TaskStatus::Pending), task_lines(t, &paint, now)))
        .collect();
    let height = height.max(2);
    let mut left_out = (0, 0);
    for (i, (active, lines)) in blocks.iter().enumerate() {
        // Room for this task, and for the line that counts the rest after it.
        let rest_after = i + 1 < blocks.len();
        let room = height.saturating_sub(out.len() + usize::from(rest_after));
        if left_out == (0, 0) && lines.len() <= room {
            out.extend(lines.iter().cloned());
        } else if left_out == (0, 0) && *active && room >= 1 {
            // A running task keeps at least its row.
            out.push(lines[0].clone());
        } else if *active {
            left_out.0 += 1;
        } else {
            left_out.1 += 1;
        }
    }
    if left_out != (0, 0) {
        let mut parts = Vec::new();
        if left_out.0 > 0 {
            parts.push(format!("{} more running or waiting", left_out.0));
        }
        if left_out.1 > 0 {
            parts.push(format!("{} finished", left_out.1));
        }
        out.truncate(height - 1);
        out.push(format!("+ {} not shown (caesar ps --all)", parts.join(", ")));
    }
    let mut text = String::new();
    for l in out {
        text.push_str(&fit(&l, width));
        text.push('\n');
    }
    text
}

/// One task's lines on the screen: its row, then its objective, its last
/// words and how to answer its question.
fn task_lines(t: &pb::TaskView, paint: &dyn Fn(&str, &str) -> String, now: i64) -> Vec<String> {
    let clean = |s: &str| render::one_line(&render::sanitize(s), 1000);
    let mut out = Vec::new();
    let mut line = |s: String| out.push(s);
    {
        // A parked task is still pending: the row says both, the note until when.
        let verdict =
            if t.verdict() == pb::Verdict::Parked { "pending (parked)".to_owned() } else { render::verdict_short(t) };
        let status = match t.verdict() {
            pb::Verdict::Unspecified => match pb::TaskStatus::spell(t.status) {
                "running" => paint("32", &format!("{:<19}", "running")),
                "succeeded" => paint("32", &format!("{:<19}", "succeeded")),
                word @ ("failed" | "timed_out") => paint("31", &format!("{word:<19}")),
                other => format!("{other:<19}"),
            },
            pb::Verdict::Running | pb::Verdict::Succeeded => paint("32", &format!("{verdict:<19}")),
            pb::Verdict::Failed | pb::Verdict::Blocked | pb::Verdict::VerificationFailed | pb::Verdict::TimedOut => {
                paint("31", &format!("{verdict:<19}"))
            }
            pb::Verdict::NeedsAnswer | pb::Verdict::Parked => paint("33", &format!("{verdict:<19}")),
            _ => format!("{verdict:<19}"),
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
            note = paint("33", &format!("QUESTION {}: {}", q.question_id, clean(&q.question)));
        } else if t.status() == pb::TaskStatus::Running
            && let Some(at) = last_at
            && now - at > SILENT_MS
        {
            note = format!("no event for {} s", (now - at) / 1000);
        } else if !t.parked_until.is_empty() {
            note = paint("33", &format!("parked until {}: {}", t.parked_until, clean(&t.parked_reason)));
        } else if t.blocker != 0 {
            note = paint("31", &format!("blocked: {}", pb::BlockerKind::spell(t.blocker)));
        } else if let Some(p) = t.queue_position {
            note = format!("queued, {p} ahead");
        } else if !t.report_status.is_empty() {
            note = format!("report {}", t.report_status);
        }
        line(format!(
            "{:<16} {} {:<12} {:>8} {:<14} {:>6}  {}",
            t.task_id,
            status,
            t.agent,
            format!("{}s", t.elapsed_ms / 1000),
            clean(&tool).chars().take(14).collect::<String>(),
            t.event_count,
            note
        ));
        line(format!("  {}", clean(&t.objective)));
        if let Some(words) = last_words(t) {
            line(format!("  {}", clean(&words)));
        }
        if let Some(q) = t.pending_questions.first() {
            line(format!("  answer: caesar answer {} {} \"...\"", t.task_id, q.question_id));
        }
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
            status: pb::TaskStatus::Running.into(),
            objective: "stay quiet".into(),
            last_event_json: format!("{{\"at\":\"{old}\"}}"),
            ..Default::default()
        };
        let asking = pb::TaskView {
            task_id: "t_asking".into(),
            status: pb::TaskStatus::Running.into(),
            objective: "ask something".into(),
            pending_questions: vec![pb::PendingQuestion {
                question_id: "q_1".into(),
                question: "why?".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let s = screen(&[quiet, asking], false, 200, 50, 100_000);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[1].starts_with("t_asking") && lines[1].contains("QUESTION q_1: why?"), "{s}");
        assert_eq!(lines[2], "  ask something", "{s}");
        assert_eq!(lines[3], "  answer: caesar answer t_asking q_1 \"...\"", "{s}");
        assert!(lines[4].starts_with("t_quiet") && lines[4].contains("no event for 100 s"), "{s}");
        assert_eq!(lines[5], "  stay quiet", "{s}");
        assert!(!s.contains('\x1b'), "no colour when asked not to");
    }

    #[test]
    fn each_task_says_what_it_is_and_what_it_last_said_within_the_width() {
        let long = "Fix the flaky test in tests/io.rs, then the other one, and the one after it too";
        let talking = pb::TaskView {
            task_id: "t_talking".into(),
            status: pb::TaskStatus::Running.into(),
            agent: "codex".into(),
            objective: long.into(),
            output_tail:
                "Looking at tests/io.rs\nFound it: a race \x1b]52;c;cGF3bmVk\x07on the \x1b[2Jtemp dir \x1b[0m\n\n"
                    .into(),
            ..Default::default()
        };
        let working = pb::TaskView {
            task_id: "t_working".into(),
            status: pb::TaskStatus::Running.into(),
            objective: "Review\nsrc/parser.rs".into(),
            activity: Some(pb::Activity {
                kind: "tool_use".into(),
                tool_name: "Bash".into(),
                state: "started".into(),
                age_ms: 0,
            }),
            ..Default::default()
        };
        let s = screen(&[talking, working], true, 40, 50, 0);
        for l in s.lines() {
            let visible: String = l
                .split('\x1b')
                .enumerate()
                .map(|(i, p)| if i == 0 { p } else { p.split_once('m').map_or("", |(_, r)| r) })
                .collect();
            assert!(visible.chars().count() <= 40, "{l:?} is wider than 40");
        }
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[2], "  Fix the flaky test in tests/io.rs, th…", "{s}");
        assert_eq!(lines[3], "  said: Found it: a race on the temp dir", "the agent's escapes are gone: {s:?}");
        assert_eq!(lines[5], "  Review src/parser.rs", "{s}");
        assert_eq!(lines[6], "  doing: tool Bash started", "{s}");
        assert!(!s.contains("52;") && !s.contains("[2J"), "{s:?}");
    }

    fn task(id: &str, status: pb::TaskStatus, question: bool) -> pb::TaskView {
        pb::TaskView {
            task_id: id.into(),
            status: status.into(),
            objective: format!("objective of {id}"),
            output_tail: format!("words of {id}"),
            pending_questions: if question {
                vec![pb::PendingQuestion { question_id: "q_1".into(), question: "which?".into(), ..Default::default() }]
            } else {
                vec![]
            },
            ..Default::default()
        }
    }

    /// Issue 30: in a 45-row pane the frame was 78 lines, the running rows
    /// scrolled away. Now running and waiting tasks come first, and what
    /// does not fit is a count.
    #[test]
    fn the_screen_fits_the_height_with_running_and_waiting_first_and_a_count_of_the_rest() {
        let mut tasks: Vec<pb::TaskView> =
            (0..20).map(|i| task(&format!("t_done{i:02}"), pb::TaskStatus::Succeeded, false)).collect();
        tasks.push(task("t_running", pb::TaskStatus::Running, false));
        tasks.insert(3, task("t_asking", pb::TaskStatus::Running, true));
        tasks.push(task("t_pending", pb::TaskStatus::Pending, false));
        for height in [12, 20, 45] {
            let s = screen(&tasks, false, 100, height, 0);
            let lines: Vec<&str> = s.lines().collect();
            assert!(lines.len() <= height, "{} lines in {height}:\n{s}", lines.len());
            assert!(lines[0].starts_with("TASK"), "{s}");
            assert!(lines[1].starts_with("t_asking"), "the question first: {s}");
            for id in ["t_running", "t_pending"] {
                assert!(s.contains(id), "{id} in {height} rows:\n{s}");
            }
            let shown = lines.iter().filter(|l| l.starts_with("t_done")).count();
            let last = lines.last().unwrap();
            assert_eq!(*last, format!("+ {} finished not shown (caesar ps --all)", 20 - shown), "{s}");
        }
        // Room for everything: no count.
        let s = screen(&tasks[..3], false, 100, 45, 0);
        assert!(!s.contains("not shown"), "{s}");
        // Not even room for the running ones: their rows, then the count.
        let running: Vec<_> = (0..10).map(|i| task(&format!("t_run{i}"), pb::TaskStatus::Running, false)).collect();
        let s = screen(&running, false, 100, 6, 0);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 6, "{s}");
        assert!(lines[1].starts_with("t_run0") && lines[4].starts_with("t_run1"), "{s}");
        assert_eq!(lines[5], "+ 8 more running or waiting not shown (caesar ps --all)", "{s}");
    }

    #[test]
    fn fit_counts_only_visible_characters_and_closes_a_cut_colour() {
        assert_eq!(fit("abcdef", 6), "abcdef");
        assert_eq!(fit("abcdefg", 6), "abcde…");
        assert_eq!(fit("\x1b[32mabc\x1b[0m", 3), "\x1b[32mabc\x1b[0m");
        assert_eq!(fit("\x1b[33mabcdef\x1b[0m", 4), "\x1b[33mabc…\x1b[0m");
    }
}

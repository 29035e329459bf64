//! Human and JSON output. Human output uses no colour, so it reads the same
//! in a terminal, a pipe and a log (and NO_COLOR has nothing to turn off).

use caesar_proto::pb;
use serde_json::{Value, json};

/// What became of the task, as people read it (issue 30): the daemon's
/// verdict (`blocked: auth`, `verification failed`, …), or for an older
/// daemon that sends none, its status.
pub fn verdict(t: &pb::TaskView) -> String {
    let label = pb::Verdict::label_of(t.verdict, &t.verdict_detail);
    if label.is_empty() { pb::TaskStatus::spell(t.status).to_owned() } else { label }
}

/// The verdict in a table's narrow column: a parked task's time is on a
/// line of its own.
pub fn verdict_short(t: &pb::TaskView) -> String {
    if t.verdict() == pb::Verdict::Parked { "parked".to_owned() } else { verdict(t) }
}

/// The agents a task tried, oldest first, each with why it was left, then
/// the one that produced the result (issue 30, item 2), as JSON.
pub fn attempts_json(t: &pb::TaskView) -> Value {
    let mut out: Vec<Value> = t
        .attempts
        .iter()
        .map(|a| {
            json!({
                "task_id": a.task_id, "agent": a.agent, "left_because": "blocker",
                "stopped_by": pb::BlockerKind::spell(a.stopped_by), "message": a.message,
            })
        })
        .collect();
    if !out.is_empty() {
        let current = if t.current_task_id.is_empty() { &t.task_id } else { &t.current_task_id };
        let ended = !matches!(t.status(), pb::TaskStatus::Pending | pb::TaskStatus::Running);
        out.push(json!({"task_id": current, "agent": t.agent, "produced_result": ended}));
    }
    Value::Array(out)
}

/// The attempts as lines: `1. claude (t_…) blocked (auth): 401 …`, and
/// the last one's `produced the result` (or `runs now`).
pub fn attempt_lines(t: &pb::TaskView) -> Vec<String> {
    if t.attempts.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<String> = t
        .attempts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let part =
                if a.relayed { format!(", relayed with {} file(s) changed", a.files_changed) } else { String::new() };
            format!(
                "{}. {} ({}) blocked ({}{part}): {}",
                i + 1,
                a.agent,
                a.task_id,
                pb::BlockerKind::spell(a.stopped_by),
                sanitize(&one_line(&a.message, 160))
            )
        })
        .collect();
    let current = if t.current_task_id.is_empty() { &t.task_id } else { &t.current_task_id };
    let what = if matches!(t.status(), pb::TaskStatus::Pending | pb::TaskStatus::Running) {
        "runs now"
    } else {
        "produced the result"
    };
    out.push(format!("{}. {} ({current}) {what}", out.len() + 1, t.agent));
    out
}

/// A task as a JSON object, with the report and last event parsed.
/// A review loop's finding (issue 32) as `--json` shows it.
fn review_finding_json(f: &pb::ReviewFinding) -> Value {
    json!({
        "round": f.round, "reviewer_task_id": f.reviewer_task_id, "file": f.file, "line": f.line,
        "hunk": f.hunk, "severity": f.severity, "title": f.title, "detail": f.detail, "state": f.state,
    })
}

/// A review loop's finding in one line: its round, place, severity, title and state.
fn review_finding_line(f: &pb::ReviewFinding) -> String {
    let place = if f.file.is_empty() { "(the round)".to_owned() } else { format!("{}:{}", f.file, f.line) };
    let detail = if f.file.is_empty() { format!(": {}", f.detail) } else { String::new() };
    sanitize(&format!("round {} {place} [{}] {}{detail} ({})", f.round, f.severity, f.title, f.state)).into_owned()
}

pub fn task_json(t: &pb::TaskView) -> Value {
    let mut v = json!({
        "task_id": t.task_id,
        "verdict": verdict(t),
        "status": pb::TaskStatus::spell(t.status),
        "agent": t.agent,
        "mode": t.mode,
        "isolation": t.isolation,
        "objective": t.objective,
        "workspace": t.workspace,
        "created_at": t.created_at,
        "timeout_ms": t.timeout_ms,
        "event_count": t.event_count,
        "elapsed_ms": t.elapsed_ms,
        "task_dir": t.task_dir,
    });
    let put = |v: &mut Value, k: &str, s: &str| {
        if !s.is_empty() {
            v[k] = json!(s);
        }
    };
    put(&mut v, "role", &t.role);
    put(&mut v, "model", &t.model);
    put(&mut v, "started_at", &t.started_at);
    put(&mut v, "finished_at", &t.finished_at);
    put(&mut v, "report_status", &t.report_status);
    put(&mut v, "report_source", &t.report_source);
    put(&mut v, "session_id", &t.session_id);
    put(&mut v, "error", &t.error);
    put(&mut v, "blocker", pb::BlockerKind::spell(t.blocker));
    put(&mut v, "parked_until", &t.parked_until);
    put(&mut v, "parked_reason", &t.parked_reason);
    put(&mut v, "current_task_id", &t.current_task_id);
    put(&mut v, "continues", &t.continues);
    put(&mut v, "continued_by", &t.continued_by);
    put(&mut v, "forked_from", &t.forked_from);
    put(&mut v, "phase", pb::Phase::spell(t.phase));
    if !t.parents.is_empty() {
        v["parents"] = json!(t.parents);
    }
    put(&mut v, "stale", &t.stale);
    put(&mut v, "review", &t.review);
    if !t.review_findings.is_empty() {
        v["review_findings"] = Value::Array(t.review_findings.iter().map(review_finding_json).collect());
    }
    if let Some(code) = t.exit_code {
        v["exit_code"] = json!(code);
    }
    if t.pending {
        v["pending"] = json!(true);
    }
    if !t.attempts.is_empty() {
        v["attempts"] = attempts_json(t);
    }
    if !t.conflicts_with.is_empty() || t.radar_age_ms.is_some() {
        v["conflicts_with"] = crate::fanout::overlaps_json(&t.conflicts_with);
    }
    if let Some(age) = t.radar_age_ms {
        v["radar_age_ms"] = json!(age);
    }
    if let Ok(e) = serde_json::from_str::<Value>(&t.last_event_json) {
        v["last_event"] = e;
    }
    if let Ok(r) = serde_json::from_str::<Value>(&t.report_json) {
        v["report"] = r;
    }
    if !t.pending_questions.is_empty() {
        v["pending_questions"] = json!(t
            .pending_questions
            .iter()
            .map(|q| {
                let mut j = json!({"question_id": q.question_id, "question": q.question, "options": q.options, "asked_at": q.asked_at});
                let kind = pb::QuestionKind::spell(q.kind);
                if !kind.is_empty() {
                    j["kind"] = json!(kind);
                }
                if !q.tool.is_empty() {
                    j["tool"] = json!(q.tool);
                    j["tool_kind"] = json!(q.tool_kind);
                    j["input"] = serde_json::from_str::<Value>(&q.input_json).unwrap_or(Value::Null);
                    j["option_details"] = json!(q
                        .option_details
                        .iter()
                        .map(|o| json!({"id": o.id, "label": o.label, "kind": o.kind}))
                        .collect::<Vec<_>>());
                }
                j
            })
            .collect::<Vec<_>>());
    }
    if !t.output_tail.is_empty() {
        v["output_tail"] = json!(t.output_tail);
        v["output_age_ms"] = json!(t.output_age_ms);
    }
    v
}

/// The Delegate answer as JSON.
pub fn delegate_json(d: &pb::DelegateResponse) -> Value {
    let mut v = json!({
        "task_id": d.task_id, "agent": d.agent, "mode": d.mode, "isolation": d.isolation,
        "network": d.network, "model": d.model, "workspace": d.workspace, "status": pb::TaskStatus::spell(d.status),
        "timeout_ms": d.timeout_ms, "warnings": d.warnings,
        "agent_reason": d.agent_reason, "worktree": d.worktree,
    });
    // A review loop's group (issue 32).
    if !d.group_id.is_empty() {
        v["group_id"] = json!(d.group_id);
    }
    v
}

/// The Ping answer as JSON.
pub fn ping_json(p: &pb::PingResponse) -> Value {
    json!({
        "running": true, "version": p.version, "protocol": p.protocol, "pid": p.pid,
        "active_tasks": p.active_tasks, "socket": p.socket, "state_dir": p.state_dir,
    })
}

/// How much of the `started` event's command line to show: the whole of it
/// (it carries the whole brief) or only the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Full,
    Brief,
}

/// One event line, readably (sanitized: agent output never reaches the
/// terminal's escape-sequence parser).
pub fn print_event(line: &str, command: Command) {
    println!("{}", sanitize(&event_line(line, command)));
}

/// One event as the line [`print_event`] prints, before sanitizing.
pub fn event_line(line: &str, command: Command) -> String {
    let Ok(e) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
    let time = s("at").get(11..19).unwrap_or("");
    let detail = match s("type") {
        "started" if command == Command::Full => format!("started: {}", s("command")),
        "started" => format!("started: {} (its command line: --verbose, or caesar logs)", s("agent")),
        "message" => s("text").to_owned(),
        "thinking" => format!("(thinking) {}", s("text")),
        "tool_use" => format!("tool {} {}{}", s("tool"), s("status"), prefixed(": ", s("input_summary"))),
        "file_changed" => format!("file {} {}", s("action"), s("path")),
        "progress" => {
            format!("progress {}{}", e.get("pct").map(|p| format!("{p}% ")).unwrap_or_default(), s("message"))
        }
        "question" => format!("question {}: {}", s("id"), s("question")),
        "answer" => format!("answer {}: {}", s("id"), s("answer")),
        "error" => format!("error: {}", s("message")),
        "warning" => format!("warning: {}", s("message")),
        "blocker" => format!("BLOCKED ({}): {}", s("kind"), s("message")),
        "usage" => format!(
            "usage: {} in, {} out",
            e.get("input_tokens").map(Value::to_string).unwrap_or_else(|| "?".into()),
            e.get("output_tokens").map(Value::to_string).unwrap_or_else(|| "?".into())
        ),
        "finished" => format!("finished: {}{}", s("status"), prefixed(": ", s("summary"))),
        "unrecognized" => format!("? {}", s("line")),
        other => format!("{other}: {line}"),
    };
    format!("{time}  {detail}")
}

/// Agent output made safe to print on a terminal: escape sequences (CSI,
/// OSC such as the OSC 52 clipboard write, DCS and the other string
/// controls, in their ESC and their 8-bit C1 forms) are removed whole, and
/// every other C0 or C1 control character and DEL is dropped, except `\n`
/// and `\t`. `caesar logs --raw` is the way to see the bytes as they were.
pub fn sanitize(s: &str) -> std::borrow::Cow<'_, str> {
    let clean = |c: char| c == '\n' || c == '\t' || !(c.is_control());
    if s.chars().all(clean) {
        return std::borrow::Cow::Borrowed(s);
    }
    #[derive(PartialEq)]
    enum State {
        Text,
        /// After ESC.
        Escape,
        /// In a CSI sequence, up to its final byte.
        Csi,
        /// In a string control (OSC, DCS, SOS, PM, APC), up to BEL or ST.
        Str,
        /// ESC seen inside a string control (ST is ESC \\).
        StrEscape,
    }
    let mut out = String::with_capacity(s.len());
    let mut state = State::Text;
    for c in s.chars() {
        state = match state {
            State::Text => match c {
                '\x1b' => State::Escape,
                '\u{9b}' => State::Csi,
                '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => State::Str,
                c if clean(c) => {
                    out.push(c);
                    State::Text
                }
                _ => State::Text,
            },
            State::Escape => match c {
                '[' => State::Csi,
                ']' | 'P' | 'X' | '^' | '_' => State::Str,
                // Intermediate bytes (ESC ( B and the like) come before the final one.
                ' '..='/' => State::Escape,
                _ => State::Text,
            },
            State::Csi => match c {
                '@'..='~' => State::Text,
                '\x1b' => State::Escape,
                _ => State::Csi,
            },
            State::Str => match c {
                '\x07' | '\u{9c}' => State::Text,
                '\x1b' => State::StrEscape,
                _ => State::Str,
            },
            State::StrEscape => match c {
                '\\' => State::Text,
                '\x1b' => State::StrEscape,
                _ => State::Str,
            },
        };
    }
    std::borrow::Cow::Owned(out)
}

fn prefixed(prefix: &str, s: &str) -> String {
    if s.is_empty() { String::new() } else { format!("{prefix}{s}") }
}

/// A task in a few lines.
pub fn print_task(t: &pb::TaskView, with_report: bool) {
    println!("{}  {}  {}  {}", t.task_id, verdict(t), t.agent, sanitize(&t.objective));
    println!(
        "  process {}, mode {}, isolation {}, {} event(s), {}",
        pb::TaskStatus::spell(t.status),
        t.mode,
        t.isolation,
        t.event_count,
        human_ms(t.elapsed_ms)
    );
    if !t.report_status.is_empty() {
        println!("  report: {} (from {})", t.report_status, t.report_source);
    }
    if let Some(line) = exit_line(t) {
        println!("  {line}");
    }
    if !t.error.is_empty() {
        println!("  error: {}", sanitize(&t.error));
    }
    if !t.parked_until.is_empty() {
        println!("  parked until {}: {}", t.parked_until, sanitize(&t.parked_reason));
    }
    if !t.current_task_id.is_empty() {
        println!("  current attempt: {}", t.current_task_id);
    }
    if !t.parents.is_empty() {
        let waiting = if t.phase() == pb::Phase::Waiting { ", waiting for them to end" } else { "" };
        println!("  builds on: {}{waiting}", t.parents.join(", "));
    }
    if let Some((parent, commit)) = t.stale.split_once(' ') {
        println!("  stale: its parent {parent} moved to {commit} after it took its result");
    }
    if !t.continues.is_empty() {
        println!("  continues: {}", t.continues);
    }
    if !t.continued_by.is_empty() {
        println!("  continued by: {} (which holds the worktree now)", t.continued_by);
    }
    if !t.forked_from.is_empty() {
        println!("  forked_from: {}", t.forked_from);
    }
    if !t.review.is_empty() {
        println!("  review: {}", sanitize(&t.review));
        for f in &t.review_findings {
            println!("    {}", review_finding_line(f));
        }
    }
    let attempts = attempt_lines(t);
    if !attempts.is_empty() {
        println!("  attempts:");
        for a in attempts {
            println!("    {a}");
        }
    }
    for q in &t.pending_questions {
        println!("  QUESTION {}: {}", q.question_id, sanitize(&q.question));
        if q.kind() == pb::QuestionKind::Permission {
            let kind = if q.tool_kind.is_empty() { String::new() } else { format!(" ({})", q.tool_kind) };
            println!("    permission for {}{kind}, input: {}", sanitize(&q.tool), sanitize(&q.input_json));
            let offered: Vec<String> =
                q.option_details.iter().map(|o| format!("{} = {} [{}]", o.id, sanitize(&o.label), o.kind)).collect();
            println!("    options: {}", offered.join(", "));
            println!("    answer: caesar answer {} {} \"<option id>[: reason]\"", t.task_id, q.question_id);
        }
    }
    print_radar(t);
    if !t.output_tail.is_empty() {
        println!("  last output: {}", sanitize(&one_line(&t.output_tail, 200)));
    }
    if with_report && !t.report_json.is_empty() {
        print_report(t);
    }
}

/// The conflict radar, as MCP and the dashboard show it: the other
/// unapplied work (or the user's uncommitted changes) touching this task's
/// files, and whether the radar has read the task yet.
fn print_radar(t: &pb::TaskView) {
    if !t.conflicts_with.is_empty() {
        crate::fanout::print_overlaps("  conflict radar: overlaps with other work", &t.conflicts_with);
    } else if let Some(age) = t.radar_age_ms {
        println!("  conflict radar: no other work touches these files (checked {} ago)", human_ms(age));
    }
}

/// What the agent's exit status means, for people: a task caesar stopped
/// (cancelled, timed out) ended because of the stop, whatever code the
/// agent's process then exited with, so its `0` is no success.
fn exit_line(t: &pb::TaskView) -> Option<String> {
    let code = t.exit_code?;
    Some(match t.status() {
        pb::TaskStatus::Cancelled => {
            format!("stopped by caesar (cancelled); the agent's process then exited with {code}")
        }
        pb::TaskStatus::TimedOut => {
            format!("stopped by caesar (timed out); the agent's process then exited with {code}")
        }
        _ => format!("exit code: {code}"),
    })
}

/// The report of a finished task.
pub fn print_report(t: &pb::TaskView) {
    let Ok(r) = serde_json::from_str::<Value>(&t.report_json) else {
        println!("{}: {} (no report)", t.task_id, verdict(t));
        return;
    };
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    println!();
    println!("{}: {}, report {} (from {})", t.task_id, verdict(t), s("status"), t.report_source);
    let attempts = attempt_lines(t);
    if !attempts.is_empty() {
        println!("attempts:");
        for a in attempts {
            println!("  {a}");
        }
    }
    println!("{}", sanitize(s("summary")));
    if !s("details").is_empty() {
        println!("\n{}", sanitize(s("details")));
    }
    let list = |k: &str| r.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let changes = list("changes");
    if !changes.is_empty() {
        println!("\nchanges:");
        for c in changes {
            println!(
                "  {} {}",
                sanitize(c["action"].as_str().unwrap_or("")),
                sanitize(c["path"].as_str().unwrap_or(""))
            );
        }
    }
    let findings = list("findings");
    if !findings.is_empty() {
        println!("\nfindings:");
        for f in findings {
            println!(
                "  [{}] {}{}",
                f["severity"].as_str().unwrap_or(""),
                sanitize(f["title"].as_str().unwrap_or("")),
                sanitize(&prefixed(": ", f["detail"].as_str().unwrap_or("")))
            );
        }
    }
    let next = list("next_steps");
    if !next.is_empty() {
        println!("\nnext steps:");
        for n in next {
            println!("  - {}", sanitize(n.as_str().unwrap_or("")));
        }
    }
}

/// `caesar ps`: questions first, then by recency.
pub fn print_table(tasks: &[pb::TaskView]) {
    if tasks.is_empty() {
        println!("no tasks");
        return;
    }
    let mut sorted: Vec<&pb::TaskView> = tasks.iter().collect();
    sorted.sort_by_key(|t| t.pending_questions.is_empty());
    println!("{:<16} {:<20} {:<12} {:>8}  OBJECTIVE", "TASK", "VERDICT", "AGENT", "ELAPSED");
    for t in sorted {
        let status = if t.verdict == 0 && !t.pending_questions.is_empty() {
            "question".to_owned()
        } else if t.verdict == 0 && !t.parked_until.is_empty() {
            "parked".to_owned()
        } else {
            verdict_short(t)
        };
        println!(
            "{:<16} {:<20} {:<12} {:>8}  {}",
            t.task_id,
            status,
            t.agent,
            human_ms(t.elapsed_ms),
            sanitize(&one_line(&t.objective, 60))
        );
        if !t.parked_until.is_empty() {
            println!("{:<16} until {}", "", t.parked_until);
        }
    }
}

pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max { flat } else { format!("{}…", flat.chars().take(max - 1).collect::<String>()) }
}

pub fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    if s < 60 {
        format!("{}.{}s", s, (ms % 1000) / 100)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// An agent as JSON, with its capabilities parsed.
pub fn agent_json(a: &pb::AgentInfo) -> Value {
    json!({
        "id": a.id, "display_name": a.display_name, "bin": a.bin, "installed": a.installed,
        "path": if a.path.is_empty() { Value::Null } else { json!(a.path) },
        "version": if a.version.is_empty() { Value::Null } else { json!(a.version) },
        "capabilities": serde_json::from_str::<Value>(&a.capabilities_json).unwrap_or(Value::Null),
        "default_model": if a.default_model.is_empty() { Value::Null } else { json!(a.default_model) },
        "policy": if a.allowed { json!({"allowed": true}) } else { json!({"allowed": false, "reason": a.refusal}) },
        "kind": a.kind,
        "protocol": if a.protocol.is_empty() { Value::Null } else { json!({"name": a.protocol, "why": a.protocol_reason}) },
        "headroom": if a.headroom.is_empty() { Value::Null } else { json!(a.headroom) },
        "observed_usage": if a.observed_usage.is_empty() { Value::Null } else { json!(a.observed_usage) },
    })
}

/// The agents as a table.
pub fn print_agents(agents: &[pb::AgentInfo]) {
    println!("{:<14} {:<10} {:<9} {:<28} PATH", "AGENT", "KIND", "INSTALLED", "VERSION");
    for a in agents {
        println!(
            "{:<14} {:<10} {:<9} {:<28} {}",
            a.id,
            a.kind,
            if a.installed { "yes" } else { "no" },
            one_line(if a.version.is_empty() { "-" } else { &a.version }, 28),
            if a.path.is_empty() { format!("({} not found)", a.bin) } else { a.path.clone() }
        );
        // Issue 32: an agent near its quota says so under its line.
        if !a.headroom.is_empty() {
            println!("{:<14} quota: {}", "", a.headroom);
        }
        if !a.observed_usage.is_empty() {
            println!("{:<14} usage: {}", "", a.observed_usage);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_face_spells_the_wire_enums_as_before_and_an_unknown_one_unrecognized() {
        let t = pb::TaskView {
            task_id: "t_1".into(),
            status: pb::TaskStatus::TimedOut.into(),
            blocker: pb::BlockerKind::RateLimit.into(),
            phase: pb::Phase::Unspecified.into(),
            pending_questions: vec![pb::PendingQuestion {
                question_id: "q_1".into(),
                kind: pb::QuestionKind::Permission.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let v = task_json(&t);
        assert_eq!((v["status"].as_str(), v["blocker"].as_str()), (Some("timed_out"), Some("rate_limit")), "{v}");
        assert!(v.get("phase").is_none(), "no phase: no field, as before: {v}");
        assert_eq!(v["pending_questions"][0]["kind"], "permission", "{v}");
        let newer = pb::TaskView { status: 42, phase: 42, ..t };
        let v = task_json(&newer);
        assert_eq!((v["status"].as_str(), v["phase"].as_str()), (Some("unrecognized"), Some("unrecognized")), "{v}");
    }

    #[test]
    fn sanitize_removes_escape_sequences_and_controls_but_keeps_newlines_and_tabs() {
        assert!(matches!(sanitize("plain\ttext\nand more"), std::borrow::Cow::Borrowed(_)));
        // OSC 52 (a clipboard write), ended by BEL and by ST.
        assert_eq!(sanitize("a\x1b]52;c;ZWNobyBwd25lZA==\x07b"), "ab");
        assert_eq!(sanitize("a\x1b]0;title\x1b\\b"), "ab");
        // Screen clear and cursor moves (CSI), colour, a charset switch.
        assert_eq!(sanitize("\x1b[2J\x1b[Hx\x1b[1;31my\x1b[0m\x1b(Bz"), "xyz");
        // DCS, and the 8-bit C1 forms of CSI and OSC.
        assert_eq!(sanitize("a\x1bPq#0;2;0;0;0\x1b\\b"), "ab");
        assert_eq!(sanitize("a\u{9b}2Jb\u{9d}52;c;x\u{9c}c"), "abc");
        // Other C0, DEL and C1 characters go; \n and \t stay; other text is untouched.
        assert_eq!(sanitize("a\rb\x08c\x7fd\u{85}e\u{7}\n\té→"), "abcde\n\té→");
        // An unterminated sequence swallows the rest rather than leak it.
        assert_eq!(sanitize("ok\x1b]52;c;AAAA"), "ok");
    }

    #[test]
    fn the_started_event_shows_its_command_line_only_in_full() {
        let started = r#"{"type":"started","at":"2026-12-01T09:00:00.000Z","agent":"codex","command":"codex exec 'the whole brief'"}"#;
        assert_eq!(event_line(started, Command::Full), "09:00:00  started: codex exec 'the whole brief'");
        let brief = event_line(started, Command::Brief);
        assert!(brief.starts_with("09:00:00  started: codex (") && !brief.contains("whole brief"), "{brief}");
    }
}

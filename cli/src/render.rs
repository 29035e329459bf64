//! Human and JSON output. Human output uses no colour, so it reads the same
//! in a terminal, a pipe and a log (and NO_COLOR has nothing to turn off).

use caesar_proto::pb;
use serde_json::{Value, json};

/// A task as a JSON object, with the report and last event parsed.
pub fn task_json(t: &pb::TaskView) -> Value {
    let mut v = json!({
        "task_id": t.task_id,
        "status": t.status,
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
    put(&mut v, "blocker", &t.blocker);
    if let Some(code) = t.exit_code {
        v["exit_code"] = json!(code);
    }
    if t.pending {
        v["pending"] = json!(true);
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
            .map(|q| json!({"question_id": q.question_id, "question": q.question, "options": q.options, "asked_at": q.asked_at}))
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
    json!({
        "task_id": d.task_id, "agent": d.agent, "mode": d.mode, "isolation": d.isolation,
        "network": d.network, "model": d.model, "workspace": d.workspace, "status": d.status,
        "timeout_ms": d.timeout_ms, "warnings": d.warnings,
    })
}

/// The Ping answer as JSON.
pub fn ping_json(p: &pb::PingResponse) -> Value {
    json!({
        "running": true, "version": p.version, "protocol": p.protocol, "pid": p.pid,
        "active_tasks": p.active_tasks, "socket": p.socket, "state_dir": p.state_dir,
    })
}

/// One event line, readably.
pub fn print_event(line: &str) {
    let Ok(e) = serde_json::from_str::<Value>(line) else {
        println!("{line}");
        return;
    };
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
    let time = s("at").get(11..19).unwrap_or("");
    let detail = match s("type") {
        "started" => format!("started: {}", s("command")),
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
    println!("{time}  {detail}");
}

fn prefixed(prefix: &str, s: &str) -> String {
    if s.is_empty() { String::new() } else { format!("{prefix}{s}") }
}

/// A task in a few lines.
pub fn print_task(t: &pb::TaskView, with_report: bool) {
    println!("{}  {}  {}  {}", t.task_id, t.status, t.agent, t.objective);
    println!("  mode {}, isolation {}, {} event(s), {}", t.mode, t.isolation, t.event_count, human_ms(t.elapsed_ms));
    if !t.report_status.is_empty() {
        println!("  report: {} (from {})", t.report_status, t.report_source);
    }
    if let Some(code) = t.exit_code {
        println!("  exit code: {code}");
    }
    if !t.error.is_empty() {
        println!("  error: {}", t.error);
    }
    for q in &t.pending_questions {
        println!("  QUESTION {}: {}", q.question_id, q.question);
    }
    if !t.output_tail.is_empty() {
        println!("  last output: {}", one_line(&t.output_tail, 200));
    }
    if with_report && !t.report_json.is_empty() {
        print_report(t);
    }
}

/// The report of a finished task.
pub fn print_report(t: &pb::TaskView) {
    let Ok(r) = serde_json::from_str::<Value>(&t.report_json) else {
        println!("{}: {} (no report)", t.task_id, t.status);
        return;
    };
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    println!();
    println!("{}: {}, report {} (from {})", t.task_id, t.status, s("status"), t.report_source);
    println!("{}", s("summary"));
    if !s("details").is_empty() {
        println!("\n{}", s("details"));
    }
    let list = |k: &str| r.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let changes = list("changes");
    if !changes.is_empty() {
        println!("\nchanges:");
        for c in changes {
            println!("  {} {}", c["action"].as_str().unwrap_or(""), c["path"].as_str().unwrap_or(""));
        }
    }
    let findings = list("findings");
    if !findings.is_empty() {
        println!("\nfindings:");
        for f in findings {
            println!(
                "  [{}] {}{}",
                f["severity"].as_str().unwrap_or(""),
                f["title"].as_str().unwrap_or(""),
                prefixed(": ", f["detail"].as_str().unwrap_or(""))
            );
        }
    }
    let next = list("next_steps");
    if !next.is_empty() {
        println!("\nnext steps:");
        for n in next {
            println!("  - {}", n.as_str().unwrap_or(""));
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
    println!("{:<16} {:<10} {:<12} {:>8}  OBJECTIVE", "TASK", "STATUS", "AGENT", "ELAPSED");
    for t in sorted {
        let status = if t.pending_questions.is_empty() { t.status.clone() } else { "question".to_owned() };
        println!(
            "{:<16} {:<10} {:<12} {:>8}  {}",
            t.task_id,
            status,
            t.agent,
            human_ms(t.elapsed_ms),
            one_line(&t.objective, 60)
        );
    }
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max { flat } else { format!("{}…", flat.chars().take(max - 1).collect::<String>()) }
}

fn human_ms(ms: u64) -> String {
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
    }
}

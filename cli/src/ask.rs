//! Questions from the terminal (issue 30, item 3): `caesar run` on a
//! terminal turns the return channel on and asks the person each question
//! an agent asks, and each permission its CLI requests, inline, with one
//! answer syntax for both: a number picks an offered option, other text is
//! the answer as typed, an empty line leaves it for `caesar answer`.
//! `--no-ask`, `--json` or a stdin that is no terminal keep the old
//! behaviour (no channel, questions wait for `caesar answer`).

use std::io::{BufRead, IsTerminal};

use caesar_proto::pb;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::render::sanitize;

/// Whether `caesar run` asks at the terminal.
pub(crate) fn wanted(no_ask: bool, json: bool) -> bool {
    !no_ask && !json && std::io::stdin().is_terminal()
}

/// The lines typed at the terminal, read on a thread of its own (never the
/// runtime's blocking pool, whose shutdown would wait on a read).
pub(crate) fn typed_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next typed line, or never when nothing is read.
pub(crate) async fn next_line(rx: Option<&mut mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What the terminal shows for a question: who asks what, and for a
/// permission every field it approves (the tool, its kind, its whole
/// input), then the options, numbered.
pub(crate) fn prompt(agent: &str, q: &pb::PendingQuestion) -> String {
    let mut out = String::new();
    let permission = q.kind() == pb::QuestionKind::Permission;
    if permission {
        out.push_str(&format!("\nPERMISSION {} ({agent} asks)\n", q.question_id));
        out.push_str(&format!("  {}\n", sanitize(&q.question)));
        if !q.tool.is_empty() {
            let kind = if q.tool_kind.is_empty() { String::new() } else { format!(" (kind {})", q.tool_kind) };
            out.push_str(&format!("  tool: {}{kind}\n", sanitize(&q.tool)));
        }
        if !q.input_json.is_empty() {
            let input = serde_json::from_str::<Value>(&q.input_json)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or_else(|| q.input_json.clone());
            out.push_str("  input:\n");
            for line in sanitize(&input).lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
    } else {
        out.push_str(&format!("\nQUESTION {} ({agent} asks)\n", q.question_id));
        out.push_str(&format!("  {}\n", sanitize(&q.question)));
    }
    for (i, o) in q.options.iter().enumerate() {
        out.push_str(&format!("  {}) {}\n", i + 1, sanitize(o)));
    }
    if q.options.is_empty() {
        for (i, o) in q.option_details.iter().enumerate() {
            out.push_str(&format!("  {}) {} = {} [{}]\n", i + 1, o.id, sanitize(&o.label), o.kind));
        }
    } else if !q.option_details.is_empty() {
        let offered: Vec<String> =
            q.option_details.iter().map(|o| format!("{} = {} [{}]", o.id, sanitize(&o.label), o.kind)).collect();
        out.push_str(&format!("  (the agent's own options: {})\n", offered.join(", ")));
    }
    let pick = if q.options.is_empty() && q.option_details.is_empty() { "" } else { "a number picks an option, " };
    out.push_str(&format!("answer ({pick}or type the answer; an empty line leaves it for `caesar answer`): "));
    out
}

/// The answer a typed line gives: a number picks the option it names,
/// anything else is the answer as typed; `None` for an empty line.
pub(crate) fn answer_of(q: &pb::PendingQuestion, line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    if let Ok(n) = line.parse::<usize>()
        && n >= 1
    {
        if let Some(o) = q.options.get(n - 1) {
            return Some(o.clone());
        }
        if q.options.is_empty()
            && let Some(o) = q.option_details.get(n - 1)
        {
            return Some(o.id.clone());
        }
    }
    Some(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> pb::PendingQuestion {
        pb::PendingQuestion {
            question_id: "q_1".into(),
            question: "Which colour?".into(),
            options: vec!["red".into(), "blue".into()],
            kind: pb::QuestionKind::Question.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_number_picks_an_option_and_other_text_is_the_answer() {
        let q = question();
        assert_eq!(answer_of(&q, "2\n"), Some("blue".to_owned()));
        assert_eq!(answer_of(&q, "green, please"), Some("green, please".to_owned()));
        assert_eq!(answer_of(&q, "7"), Some("7".to_owned()), "no such option: the text as typed");
        assert_eq!(answer_of(&q, "  "), None);
        let detailed = pb::PendingQuestion {
            options: vec![],
            option_details: vec![pb::QuestionOption {
                id: "allow_once".into(),
                label: "Allow".into(),
                kind: "allow_once".into(),
            }],
            ..q
        };
        assert_eq!(answer_of(&detailed, "1"), Some("allow_once".to_owned()));
    }

    #[test]
    fn a_permission_shows_every_field_it_approves() {
        let q = pb::PendingQuestion {
            question_id: "p_1".into(),
            question: "gemini asks permission to use run_shell_command".into(),
            options: vec!["allow".into(), "deny".into()],
            kind: pb::QuestionKind::Permission.into(),
            tool: "run_shell_command".into(),
            tool_kind: "execute".into(),
            input_json: r#"{"command":"rm -rf build","dir":"/src"}"#.into(),
            ..Default::default()
        };
        let p = prompt("gemini", &q);
        assert!(p.contains("PERMISSION p_1 (gemini asks)"), "{p}");
        assert!(p.contains("tool: run_shell_command (kind execute)"), "{p}");
        assert!(p.contains("\"command\": \"rm -rf build\"") && p.contains("\"dir\": \"/src\""), "{p}");
        assert!(p.contains("  1) allow\n  2) deny\n"), "{p}");
        assert!(prompt("codex", &question()).contains("QUESTION q_1 (codex asks)\n  Which colour?\n  1) red\n"));
    }
}

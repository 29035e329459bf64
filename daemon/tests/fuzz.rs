//! Property tests over what reads untrusted text: the ten providers' line
//! parsers and the generic one, the report validator, and the config loader.
//! None of them may panic, whatever the input; what they accept must be
//! sound. Cases per property: PROPTEST_CASES (default 2,000 here).

#![allow(clippy::unwrap_used)]

use caesard::config::Config;
use caesard::oacp::Report;
use caesard::provider::{self, Stream};
use proptest::prelude::*;

const PROVIDERS: [&str; 11] = [
    "claude",
    "codex",
    "gemini",
    "opencode",
    "copilot",
    "cursor-agent",
    "qwen",
    "grok",
    "codebuddy",
    "antigravity",
    "generic",
];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

/// Lines that look like what the CLIs print: JSON objects with the keys they
/// use, nested and truncated, as well as plain noise.
fn line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("type"),
        Just("subtype"),
        Just("message"),
        Just("content"),
        Just("item"),
        Just("part"),
        Just("tool_use_id"),
        Just("id"),
        Just("text"),
        Just("error"),
        Just("usage"),
        Just("session_id"),
        Just("result"),
        Just("is_error"),
        Just("status"),
        Just("tool"),
        Just("name"),
        Just("input"),
    ];
    let leaf = prop_oneof![
        any::<String>().prop_map(serde_json::Value::String),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        any::<bool>().prop_map(serde_json::Value::Bool),
        Just(serde_json::Value::Null),
        prop_oneof![Just("assistant"), Just("result"), Just("tool_use"), Just("item.completed"), Just("turn.failed")]
            .prop_map(|s| serde_json::json!(s)),
    ];
    let value = leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| { serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()) }),
        ]
    });
    prop_oneof![
        4 => value.prop_map(|v| v.to_string()),
        1 => any::<String>(),
        1 => (value_string(), any::<usize>()).prop_map(|(s, cut)| {
            let cut = cut % (s.len() + 1);
            s.char_indices().map(|(i, _)| i).take_while(|i| *i <= cut).last().map(|i| s[..i].to_owned()).unwrap_or_default()
        }),
    ]
}

fn value_string() -> impl Strategy<Value = String> {
    any::<String>().prop_map(|s| {
        serde_json::json!({"type": "assistant", "message": {"content": [{"type": "text", "text": s}]}}).to_string()
    })
}

/// The most events a line may yield: one per JSON object in it, plus one
/// (an `unrecognized` line, a line's summary event). A parser that made
/// events from nothing, or repeated them, would pass it.
fn amplification_bound(line: &str) -> usize {
    line.matches('{').count() + 1
}

/// The parts of a message as wide as a CLI can print: thousands of texts,
/// thoughts and tool calls, enough for more than 10,000 events where the
/// random lines above yield a handful.
fn wide_parts() -> impl Strategy<Value = Vec<serde_json::Value>> {
    let part = prop_oneof![
        any::<u16>().prop_map(|n| serde_json::json!({"type": "text", "text": format!("t{n}")})),
        any::<u16>().prop_map(|n| serde_json::json!({"type": "thinking", "thinking": format!("th{n}")})),
        any::<u16>().prop_map(
            |n| serde_json::json!({"type": "tool_use", "id": format!("tu{n}"), "name": "Bash", "input": {"command": "ls"}})
        ),
    ];
    prop::collection::vec(part, 10_001..10_400)
}

/// Such a message in the shapes of claude's stream-json (assistant and
/// user turns) and of a bare role/content message.
fn wide_line(parts: Vec<serde_json::Value>, shape: usize) -> String {
    match shape {
        0 => serde_json::json!({"type": "assistant", "message": {"content": parts}}),
        1 => serde_json::json!({"type": "user", "message": {"content": parts}}),
        _ => serde_json::json!({"type": "message", "role": "assistant", "content": parts}),
    }
    .to_string()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases().clamp(1, 8), max_shrink_iters: 4, ..ProptestConfig::default() })]

    #[test]
    fn wide_lines_yield_no_more_events_than_they_hold(parts in wide_parts(), shape in 0usize..3, which in 0usize..PROVIDERS.len()) {
        let line = wide_line(parts, shape);
        let mut p = provider::parser(PROVIDERS[which].parse().expect("a provider id"));
        let out = p.parse_line(&line, Stream::Stdout);
        prop_assert!(out.events.len() <= amplification_bound(&line), "{} events from {} objects", out.events.len(), amplification_bound(&line));
        let _ = p.finish();
    }

    #[test]
    fn claude_keeps_every_part_of_a_wide_message(parts in wide_parts()) {
        // The bound is reached, not only respected: stream-json's parser
        // gives each of more than 10,000 parts of an assistant turn its event.
        let n = parts.len();
        let mut p = provider::parser(caesard::launch::ProviderId::Claude);
        let out = p.parse_line(&wide_line(parts, 0), Stream::Stdout);
        prop_assert!(out.events.len() >= n, "{} events for {n} parts", out.events.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn parsers_never_panic(lines in prop::collection::vec(line(), 1..8), which in 0usize..PROVIDERS.len()) {
        let mut p = provider::parser(PROVIDERS[which].parse().expect("a provider id"));
        for l in &lines {
            let out = p.parse_line(l, Stream::Stdout);
            prop_assert!(out.events.len() <= amplification_bound(l), "{} events from {l}", out.events.len());
            let _ = p.parse_line(l, Stream::Stderr);
        }
        let _ = p.finish();
    }

    #[test]
    fn reports_are_validated_without_panicking(text in any::<String>(), status in "[a-z]{0,8}", summary in any::<String>()) {
        let _ = Report::parse(&text);
        let doc = serde_json::json!({"protocol": "caesar.report/v1", "status": status, "summary": summary}).to_string();
        if let Ok(r) = Report::parse(&doc) {
            // Whatever is accepted round-trips and has a summary.
            prop_assert!(!r.summary.trim().is_empty());
            let again = Report::parse(&serde_json::to_string(&r).unwrap()).unwrap();
            prop_assert_eq!(again, r);
        }
    }

    #[test]
    fn the_config_loader_never_panics(text in any::<String>(), key in "[a-z_]{1,12}", value in any::<i64>()) {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(p.path().join(".caesar")).unwrap();
        for body in [text.clone(), format!("[policy]\n{key} = {value}\n"), format!("[[role]]\nname = {text:?}\nagents = []\nmode = {text:?}\n")] {
            std::fs::write(p.path().join(".caesar/config.toml"), body).unwrap();
            let _ = Config::load(g.path(), p.path());
        }
    }
}

/// A string of `n` bytes or so, of one- to four-byte characters, so a cut can
/// fall inside a character.
fn long_string(n: usize, wide: bool) -> String {
    if wide { "é€😀a".repeat(n / 10 + 1) } else { "x".repeat(n) }
}

fn report_doc(lists: [usize; 4], strings: [usize; 3], wide: bool) -> serde_json::Value {
    let [changes, findings, steps, options] = lists;
    let [summary, detail, step] = strings;
    serde_json::json!({
        "protocol": "caesar.report/v1",
        "status": "success",
        "summary": long_string(summary.max(1), wide),
        "details": long_string(detail, wide),
        "changes": (0..changes).map(|i| serde_json::json!({"path": format!("f{i}"), "action": "modified"})).collect::<Vec<_>>(),
        // Long strings in the first entries only, to keep each case small.
        "findings": (0..findings).map(|i| serde_json::json!({"severity": "low", "title": format!("f{i}"), "detail": if i < 2 { long_string(detail, wide) } else { String::new() }})).collect::<Vec<_>>(),
        "next_steps": (0..steps).map(|i| if i < 2 { long_string(step, wide) } else { format!("s{i}") }).collect::<Vec<_>>(),
        "questions": [{"id": "q", "question": "?", "options": (0..options).map(|i| i.to_string()).collect::<Vec<_>>()}],
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases().clamp(1, 64), max_shrink_iters: 16, ..ProptestConfig::default() })]

    #[test]
    fn report_lists_and_strings_are_capped_at_parse_time(
        lists in prop::array::uniform4(prop_oneof![0usize..8, 995usize..1006, 1500usize..3000]),
        strings in prop::array::uniform3(prop_oneof![0usize..64, 65_530usize..65_545, 70_000usize..200_000]),
        wide in any::<bool>(),
    ) {
        use caesard::oacp::{MAX_REPORT_ITEMS, MAX_REPORT_STRING, TRUNCATED_TITLE};
        let doc = report_doc(lists, strings, wide);
        let over = doc["changes"].as_array().unwrap().len() > MAX_REPORT_ITEMS
            || doc["findings"].as_array().unwrap().len() > MAX_REPORT_ITEMS
            || doc["next_steps"].as_array().unwrap().len() > MAX_REPORT_ITEMS
            || doc["questions"][0]["options"].as_array().unwrap().len() > MAX_REPORT_ITEMS
            || doc["summary"].as_str().unwrap().len() > MAX_REPORT_STRING
            || doc["details"].as_str().unwrap().len() > MAX_REPORT_STRING
            || doc["next_steps"].as_array().unwrap().iter().any(|s| s.as_str().unwrap().len() > MAX_REPORT_STRING);
        let r = Report::parse(&doc.to_string()).unwrap();
        for len in [r.changes.len(), r.findings.len(), r.next_steps.len(), r.questions[0].options.len()] {
            prop_assert!(len <= MAX_REPORT_ITEMS, "a list of {len} entries");
        }
        let strings = [&r.summary, &r.details]
            .into_iter()
            .chain(&r.next_steps)
            .chain(r.findings.iter().flat_map(|f| [&f.title, &f.detail]));
        for s in strings {
            prop_assert!(s.len() <= MAX_REPORT_STRING, "a string of {} bytes", s.len());
        }
        // Cut only when over, and then said, once.
        let notes = r.findings.iter().filter(|f| f.title == TRUNCATED_TITLE).count();
        prop_assert_eq!(notes, usize::from(over));
        // Nothing under the caps is lost: the first entries are kept as sent.
        prop_assert_eq!(r.changes.len(), lists[0].min(MAX_REPORT_ITEMS));
        prop_assert_eq!(r.next_steps.len(), lists[2].min(MAX_REPORT_ITEMS));
        if !over {
            prop_assert_eq!(serde_json::to_value(&r).unwrap()["summary"].clone(), doc["summary"].clone());
        }
        // A capped report is stable: parsing it again cuts nothing more.
        let again = Report::parse(&serde_json::to_string(&r).unwrap()).unwrap();
        prop_assert_eq!(again, r);
    }
}

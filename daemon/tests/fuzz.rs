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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn parsers_never_panic(lines in prop::collection::vec(line(), 1..8), which in 0usize..PROVIDERS.len()) {
        let mut p = provider::parser(PROVIDERS[which]).unwrap();
        for l in &lines {
            let out = p.parse_line(l, Stream::Stdout);
            // A line always yields something for a non-empty line, or nothing at all.
            prop_assert!(out.events.len() < 10_000);
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

//! The fuzz targets of issue 19 (`caesar_tests::fuzzing`), run on stable
//! as a bounded, seeded test: 2,000 adversarial inputs for the report
//! parser and 2,000 for the response shaping, mutated from seeds that sit
//! at the caps (1,000 entries, 64 KiB strings, surrogate pairs at the cut,
//! deep nesting). The same seed gives the same inputs; a failing input is
//! written to a file the panic names, to replay under `tests/fuzz`.

#![allow(clippy::unwrap_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use caesar_tests::fuzzing::{Rng, check_report_caps, check_shaping, mutate, report_parser, shaping};
use caesard::capped_json;
use caesard::oacp::{MAX_REPORT_ITEMS, MAX_REPORT_STRING, REPORT_LIMITS, Report, TRUNCATED_TITLE};
use caesard::safe_fs::REPORT_CAP;
use serde_json::{Value, json};

const RUNS: usize = 2_000;

/// Runs `target` on `input`; a panic is reported with the input kept.
fn run(name: &str, i: usize, input: &[u8], target: fn(&[u8])) {
    if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
        let path = std::env::temp_dir().join(format!("caesar-fuzz-{name}-{i}.bin"));
        std::fs::write(&path, input).unwrap();
        panic!("{name}: input {i} broke an invariant (above); it is kept in {}", path.display());
    }
}

fn report(extra: Value) -> Value {
    let mut r = json!({"protocol": "caesar.report/v1", "status": "success", "summary": "done"});
    r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    r
}

/// Reports at and past the caps, and texts that are barely JSON.
fn report_seeds() -> Vec<Vec<u8>> {
    let full = report(json!({
        "task_id": "t_1",
        "details": "line one\nline \"two\" \\ é 😀 \u{1}",
        "changes": [{"path": "src/a.rs", "action": "modified", "summary": "edit"}],
        "commands_run": [{"command": "cargo test", "exit_code": 0, "note": "ok"}],
        "findings": [{"severity": "high", "title": "bug", "file": "src/a.rs", "line": 3, "detail": "d"}],
        "questions": [{"id": "q1", "question": "which?", "options": ["a", "b"]}],
        "next_steps": ["ship"],
        "artifacts": [{"path": "out.txt", "description": "log"}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01, "duration_ms": 9},
    }));
    let many = report(json!({
        "changes": (0..1_200).map(|k| json!({"path": format!("f{k}"), "action": "created"})).collect::<Vec<_>>(),
        "findings": (0..1_100).map(|k| json!({"severity": "info", "title": format!("f{k}")})).collect::<Vec<_>>(),
        "questions": [{"id": "q", "question": "?", "options": (0..1_005).map(|k| k.to_string()).collect::<Vec<_>>()}],
    }));
    // Strings just past the cap, their cut falling inside a pair, an escape
    // or a character.
    let pairs = format!("{}{}", "a".repeat(MAX_REPORT_STRING - 24), "\\ud83d\\ude00".repeat(8));
    let chars = format!("{}{}", "b".repeat(MAX_REPORT_STRING - 23), "é😀".repeat(8));
    let slash = format!("{}{}", "c".repeat(MAX_REPORT_STRING - 23), "\\\\uD800".repeat(8));
    let long = format!(
        r#"{{"protocol":"caesar.report/v1","status":"partial","details":"{pairs}","summary":"{chars}","next_steps":["{slash}"]}}"#
    );
    let deep = format!(
        r#"{{"protocol":"caesar.report/v1","status":"failed","summary":"s","x":{}1{}}}"#,
        "[".repeat(70),
        "]".repeat(70)
    );
    vec![
        serde_json::to_vec(&report(json!({}))).unwrap(),
        serde_json::to_vec(&full).unwrap(),
        serde_json::to_vec_pretty(&full).unwrap(),
        serde_json::to_vec(&many).unwrap(),
        long.into_bytes(),
        deep.into_bytes(),
        br#"{"protocol":"caesar.report/v2","status":"success","summary":"x"}"#.to_vec(),
        br#"[1, -2.5e3, true, null, "s", {"a": []}]"#.to_vec(),
        b"{".to_vec(),
    ]
}

#[test]
fn the_report_parser_keeps_its_caps_on_adversarial_input() {
    let seeds = report_seeds();
    // The seeds themselves: the capped ones say what was cut.
    for (i, s) in seeds.iter().enumerate() {
        run("report", i, s, report_parser);
    }
    let many = Report::parse_reader(&seeds[3][..]).unwrap();
    check_report_caps(&many);
    assert_eq!((many.changes.len(), many.findings.len()), (MAX_REPORT_ITEMS, MAX_REPORT_ITEMS));
    let note = &many.findings.last().unwrap();
    assert_eq!(note.title, TRUNCATED_TITLE);
    for said in
        ["`changes` had 1200 entries", "`findings` had 1100 entries, kept the first 999", "`question options` had 1005"]
    {
        assert!(note.detail.contains(said), "{said}: {}", note.detail);
    }
    let long = Report::parse_reader(&seeds[4][..]).unwrap();
    assert!(long.details.len() <= MAX_REPORT_STRING && long.details.ends_with(" [truncated by caesar]"));
    assert!(long.findings.last().unwrap().detail.contains("3 string(s)"), "{:?}", long.findings);

    let mut rng = Rng(0x19_2026);
    for i in 0..RUNS {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(3) {
            input = mutate(&input, &mut rng);
        }
        run("report", seeds.len() + i, &input, report_parser);
    }
}

#[test]
fn a_report_past_the_total_keeps_its_required_fields() {
    // 80 findings of 64 KiB each: past the 4 MiB the parse copies, with the
    // required `summary` last.
    let detail = "d".repeat(MAX_REPORT_STRING);
    let findings: Vec<Value> =
        (0..80).map(|k| json!({"severity": "low", "title": format!("t{k}"), "detail": detail})).collect();
    let text = format!(
        r#"{{"protocol":"caesar.report/v1","status":"success","findings":{},"next_steps":["late"],"summary":"last"}}"#,
        serde_json::to_string(&findings).unwrap()
    );
    let r = Report::parse_reader(text.as_bytes()).unwrap();
    assert_eq!(r.summary, "last");
    assert!(r.findings.len() < 80 && r.next_steps.is_empty(), "{} findings", r.findings.len());
    let note = &r.findings.last().unwrap().detail;
    assert!(
        note.contains("`findings` had 80 entries") && note.contains("1 field(s) past the report's total cap"),
        "{note}"
    );
    check_report_caps(&r);
}

/// What the libFuzzer run of `tests/fuzz` broke, replayed: a required
/// field repeated past the total was copied at every repetition, so the
/// total capped nothing (limits from the first four bytes: no entries,
/// 22-byte strings, depth 1, total 0; `cargo fuzz tmin` left 1,618 bytes).
#[test]
fn a_required_field_repeated_past_the_total_is_kept_once() {
    let mut found = vec![0, 0, 1, 0];
    found.extend_from_slice(format!("{{{}}}", vec![r#""summary":0"#; 131].join(",")).as_bytes());
    run("found", 0, &found, report_parser);

    // The same at the report's own caps: 80 findings of 64 KiB pass the
    // total, then `task_id` 300,000 times (4 MB) and `summary` once.
    let detail = "d".repeat(MAX_REPORT_STRING);
    let findings: Vec<Value> =
        (0..80).map(|k| json!({"severity": "low", "title": format!("t{k}"), "detail": detail})).collect();
    let text = format!(
        r#"{{"protocol":"caesar.report/v1","status":"success","findings":{},{}"summary":"last"}}"#,
        serde_json::to_string(&findings).unwrap(),
        r#""task_id":"t","#.repeat(300_000)
    );
    let (copy, _) = capped_json::filter(text.as_bytes(), REPORT_LIMITS).unwrap();
    let most = REPORT_CAP as usize + 2 * MAX_REPORT_STRING;
    assert!(copy.len() <= most, "the copy takes {} bytes, over {most}", copy.len());
    let r = Report::parse_reader(text.as_bytes()).unwrap();
    assert_eq!((r.task_id.as_str(), r.summary.as_str()), ("t", "last"));
    check_report_caps(&r);
}

#[test]
fn await_answers_carrying_capped_reports_fit_the_cap() {
    let mut rng = Rng(0x005E_ED19);
    let reports: Vec<Value> = report_seeds()
        .iter()
        .filter_map(|s| Report::parse_reader(&s[..]).ok())
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    for i in 0..RUNS / 10 {
        let tasks: serde_json::Map<String, Value> = (0..=rng.below(4))
            .map(|k| {
                let r = reports[rng.below(reports.len())].clone();
                (format!("t_{k}"), json!({"task_id": format!("t_{k}"), "status": "succeeded", "report": r}))
            })
            .collect();
        let cap = 1_000 + rng.below(40_000);
        if catch_unwind(AssertUnwindSafe(|| check_shaping(json!({"tasks": tasks}), cap))).is_err() {
            panic!("await answer {i} with cap {cap} broke an invariant (above)");
        }
    }
}

#[test]
fn the_shaping_of_arbitrary_values_never_passes_the_cap() {
    // Found by the libFuzzer run: a float whose JSON serde_json parses
    // back one bit off (the text had been compared through a parse).
    run("shaping", usize::MAX, b"220220E50", shaping);
    let mut rng = Rng(0x005E_ED20);
    for i in 0..RUNS {
        let len = rng.below(if i % 10 == 0 { 16_384 } else { 1_024 });
        let input: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        run("shaping", i, &input, shaping);
    }
}

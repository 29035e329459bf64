//! Response shaping: every answer fits the character cap, says when it was
//! cut, and says how to get the rest.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::Value;

use crate::error::{ErrorCode, ToolError};

/// The default response cap, in characters.
pub const DEFAULT_MAX_CHARS: usize = 20_000;
/// The smallest cap the server accepts (`--max-chars`).
pub const MIN_MAX_CHARS: usize = 1_000;

/// Clamps an optional caller number into `lo..=hi`; absent, zero or
/// negative values give `default`.
pub fn clamp(v: Option<i64>, default: u64, lo: u64, hi: u64) -> u64 {
    match v {
        Some(n) if n > 0 => (n as u64).clamp(lo, hi),
        _ => default,
    }
}

/// A window of `text` by characters: `(window, start, total, next)`, where
/// `next` is where to continue when more follows.
pub fn window(text: &str, start: u64, max: usize) -> (String, u64, u64, Option<u64>) {
    let total = text.chars().count() as u64;
    let start = start.min(total);
    let out: String = text.chars().skip(start as usize).take(max).collect();
    let end = start + out.chars().count() as u64;
    (out, start, total, (end < total).then_some(end))
}

/// The characters `v` takes as the text block, counted without building
/// the text ([`crate::fit::measure`]).
pub fn size(v: &Value) -> usize {
    crate::fit::measure(v)
}

/// Drops the first (oldest) of `items` until `fixed` (the size of the
/// answer without them) plus their JSON fits `budget`, keeping at least
/// one; each item is measured once. Returns how many were dropped.
pub fn drop_oldest(items: &mut Vec<Value>, fixed: usize, budget: usize) -> usize {
    let sizes: Vec<usize> = items.iter().map(crate::fit::measure).collect();
    let mut total = fixed + sizes.iter().sum::<usize>() + sizes.len().saturating_sub(1);
    let mut drop = 0;
    while items.len() - drop > 1 && total > budget {
        total -= sizes[drop] + 1;
        drop += 1;
    }
    items.drain(..drop);
    drop
}

/// Serializes a result and caps it: when it had to be cut, `truncated` and
/// `hint` are set. The text block carries the same JSON as
/// `structuredContent`.
pub fn finish<T: Serialize>(out: &T, cap: usize, hint: &str) -> Result<CallToolResult, ToolError> {
    let (text, v) = shaped(out, cap, hint)?;
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    Ok(r)
}

/// What [`finish`] answers: the text block and the value it carries. An
/// answer over `cap` characters is cut in one pass ([`crate::fit`]) to
/// leave room for `truncated` and a `hint` that says how to get the rest
/// (`hint`) and what was cut; the text never exceeds `cap`.
pub fn shaped<T: Serialize>(out: &T, cap: usize, hint: &str) -> Result<(String, Value), ToolError> {
    let mut v = serde_json::to_value(out)
        .map_err(|e| ToolError::new(ErrorCode::Internal, format!("cannot encode result: {e}")))?;
    let already = v.get("truncated").and_then(Value::as_bool) == Some(true);
    // Leave room for the marks themselves and the note of what was cut.
    let marks = 40 + size(&Value::String(hint.to_owned())) + crate::fit::NOTE_CHARS;
    let cuts = crate::fit::fit_when_over(&mut v, cap, cap.saturating_sub(marks));
    if cuts.any()
        && let Value::Object(o) = &mut v
    {
        o.insert("truncated".into(), Value::Bool(true));
        let said = match o.get("hint").and_then(Value::as_str) {
            Some(h) if already => h.to_owned(),
            _ => hint.to_owned(),
        };
        o.insert("hint".into(), Value::String(format!("{said} {}", cuts.note())));
    }
    let text = serde_json::to_string(&v)
        .map_err(|e| ToolError::new(ErrorCode::Internal, format!("cannot encode result: {e}")))?;
    Ok((text, v))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn clamps() {
        assert_eq!(clamp(None, 30, 1, 100), 30);
        assert_eq!(clamp(Some(-4), 30, 1, 100), 30);
        assert_eq!(clamp(Some(0), 30, 1, 100), 30);
        assert_eq!(clamp(Some(1_000), 30, 1, 100), 100);
        assert_eq!(clamp(Some(7), 30, 1, 100), 7);
    }

    #[test]
    fn windows_by_characters() {
        assert_eq!(window("héllo", 1, 2), ("él".to_owned(), 1, 5, Some(3)));
        assert_eq!(window("héllo", 3, 10), ("lo".to_owned(), 3, 5, None));
        assert_eq!(window("abc", 9, 10), (String::new(), 3, 3, None));
    }

    #[test]
    fn a_cut_answer_stays_under_the_cap_and_says_what_was_cut() {
        let out = json!({"a": "x".repeat(5000), "b": (0..3000).collect::<Vec<_>>(), "hint": "old"});
        let (text, v) = shaped(&out, 1_000, "Read the rest with caesar_logs.").unwrap();
        assert!(text.chars().count() <= 1_000, "{}", text.chars().count());
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        assert_eq!(v["truncated"], true);
        let hint = v["hint"].as_str().unwrap();
        assert!(
            hint.starts_with("Read the rest with caesar_logs. Cut: ") && hint.contains("list entries dropped"),
            "{hint}"
        );
        let small = json!({"a": 1});
        assert_eq!(shaped(&small, 1_000, "h").unwrap(), (small.to_string(), small));
    }

    #[test]
    fn dropping_the_oldest_keeps_the_newest_within_the_budget() {
        let mut items: Vec<Value> = (0..100).map(|i| json!({"n": i, "text": "y".repeat(90)})).collect();
        let fixed = 50;
        let dropped = drop_oldest(&mut items, fixed, 2_000);
        assert!(dropped > 0);
        assert_eq!(items.first().unwrap()["n"], dropped as u64);
        assert_eq!(items.last().unwrap()["n"], 99);
        assert!(fixed + size(&Value::Array(items.clone())) - 2 <= 2_000);
        let mut one = vec![json!("z".repeat(5_000))];
        assert_eq!(drop_oldest(&mut one, fixed, 100), 0);
    }
}

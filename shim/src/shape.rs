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
/// What is left of a string cut by [`fit`].
const CUT_MARK: &str = "…[truncated]";

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

/// The characters `v` takes as the text block.
pub fn size(v: &Value) -> usize {
    serde_json::to_string(v).map(|s| s.chars().count()).unwrap_or(0)
}

/// Shrinks `v` until its JSON fits `cap` characters: the longest strings are
/// halved first, then the longest arrays lose their last items. Returns
/// whether anything was cut.
pub fn fit(v: &mut Value, cap: usize) -> bool {
    let mut cut = false;
    for _ in 0..10_000 {
        let now = size(v);
        if now <= cap {
            return cut;
        }
        cut = true;
        let excess = now - cap;
        if let Some(s) = longest_string(v).filter(|s| s.chars().count() > 64) {
            let len = s.chars().count();
            let keep = len.saturating_sub(excess + CUT_MARK.len()).min(len / 2).max(32);
            let mut t: String = s.chars().take(keep).collect();
            t.push_str(CUT_MARK);
            *s = t;
            continue;
        }
        if let Some(a) = longest_array(v).filter(|a| !a.is_empty()) {
            a.pop();
            continue;
        }
        return cut;
    }
    cut
}

fn longest_string(v: &mut Value) -> Option<&mut String> {
    fn walk<'a>(v: &'a mut Value, best: &mut Option<&'a mut String>) {
        match v {
            Value::String(s) if best.as_ref().is_none_or(|b| b.len() < s.len()) => {
                *best = Some(s);
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, best)),
            Value::Object(o) => o.values_mut().for_each(|x| walk(x, best)),
            _ => {}
        }
    }
    let mut best = None;
    walk(v, &mut best);
    best
}

fn longest_array(v: &mut Value) -> Option<&mut Vec<Value>> {
    /// One step down a JSON document.
    enum Step {
        Index(usize),
        Key(String),
    }
    fn find(v: &Value, path: &mut Vec<Step>, best: &mut Option<(usize, Vec<Step>)>) {
        match v {
            Value::Array(a) => {
                if best.as_ref().is_none_or(|(n, _)| *n < a.len()) {
                    *best = Some((a.len(), clone_path(path)));
                }
                for (i, x) in a.iter().enumerate() {
                    path.push(Step::Index(i));
                    find(x, path, best);
                    path.pop();
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    path.push(Step::Key(k.clone()));
                    find(x, path, best);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    fn clone_path(p: &[Step]) -> Vec<Step> {
        p.iter()
            .map(|s| match s {
                Step::Index(i) => Step::Index(*i),
                Step::Key(k) => Step::Key(k.clone()),
            })
            .collect()
    }
    let mut best = None;
    find(v, &mut Vec::new(), &mut best);
    let (_, path) = best?;
    let mut cur = v;
    for step in path {
        cur = match step {
            Step::Index(i) => cur.get_mut(i)?,
            Step::Key(k) => cur.get_mut(k.as_str())?,
        };
    }
    cur.as_array_mut()
}

/// Serializes a result and caps it: when `fit` had to cut, `truncated` and
/// `hint` are set. The text block carries the same JSON as
/// `structuredContent`.
pub fn finish<T: Serialize>(out: &T, cap: usize, hint: &str) -> Result<CallToolResult, ToolError> {
    let mut v = serde_json::to_value(out)
        .map_err(|e| ToolError::new(ErrorCode::Internal, format!("cannot encode result: {e}")))?;
    let already = v.get("truncated").and_then(Value::as_bool) == Some(true);
    // Leave room for the marks themselves.
    let marks = 40 + hint.len();
    if size(&v) > cap
        && fit(&mut v, cap.saturating_sub(marks))
        && let Value::Object(o) = &mut v
    {
        o.insert("truncated".into(), Value::Bool(true));
        if !already {
            o.insert("hint".into(), Value::String(hint.to_owned()));
        }
    }
    let text = serde_json::to_string(&v)
        .map_err(|e| ToolError::new(ErrorCode::Internal, format!("cannot encode result: {e}")))?;
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    Ok(r)
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
    fn fit_cuts_long_strings_then_arrays() {
        let mut v = json!({"a": "x".repeat(5000), "b": [1, 2, 3]});
        assert!(fit(&mut v, 500));
        assert!(size(&v) <= 500);
        let mut v = json!({"list": (0..1000).collect::<Vec<_>>()});
        assert!(fit(&mut v, 200));
        assert!(size(&v) <= 200);
        let mut small = json!({"a": 1});
        assert!(!fit(&mut small, 100));
    }
}

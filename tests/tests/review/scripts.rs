//! The scripted worker and reviewer of the review loop's tests (tests/review.rs and
//! tests/dashboard_review.rs).

use serde_json::Value;

/// Round 1 writes `a.txt` and `b.txt`; a later round (a.txt is there) rewrites `a.txt` only.
pub const WORKER: &[&str] = &[
    "sh",
    "if [ -f a.txt ]; then printf 'fixed\\n' > a.txt; else printf 'one\\n' > a.txt; printf 'bee\\n' > b.txt; fi",
    "report",
    "success",
    "worked",
];

/// A review block of `verdict` with these `(file, line, hunk, title)` findings.
pub fn block(verdict: &str, findings: &[(&str, u64, &str, &str)]) -> String {
    let findings: Vec<Value> = findings
        .iter()
        .map(|(f, l, h, t)| serde_json::json!({"file": f, "line": l, "hunk": h, "severity": "high", "title": t, "detail": "fix it"}))
        .collect();
    let body = serde_json::json!({"verdict": verdict, "findings": findings});
    format!("I read the diff.\n```json caesar:review\n{body}\n```\n")
}

//! The pure half of the review loop (issue 32, item 2; the loop itself is
//! `engine/review.rs`): reading a reviewer's findings strictly and within
//! bounds, telling a finding whose hunk changed since (`stale`) from one
//! that still stands, and choosing a reviewer of another model family than
//! the worker's.
//!
//! A reviewer answers with one fenced block in its final message:
//!
//! ````text
//! ```json caesar:review
//! {"verdict": "changes", "findings": [{"file": "src/a.rs", "line": 12,
//!   "hunk": "@@ -10,3 +10,4 @@\n fn a() {\n+    b();\n }", "severity": "high",
//!   "title": "b() panics on empty input", "detail": "…"}]}
//! ```
//! ````
//!
//! Everything here is bounded: the block is read line by line and kept only
//! up to [`MAX_BLOCK`] bytes (a reviewer printing 10 MB of findings costs
//! the daemon no more than that), at most [`MAX_FINDINGS`] findings are
//! kept, and each field is cut to its cap. What is refused or cut is said,
//! as a problem of the round, never dropped silently.

use std::collections::HashMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

/// The opening line of a reviewer's answer.
pub const FENCE: &str = "```json caesar:review";
/// The most bytes of one review block kept.
pub const MAX_BLOCK: usize = 256 * 1024;
/// The most findings of one round kept.
pub const MAX_FINDINGS: usize = 50;
/// The caps of one finding's fields, in bytes.
const MAX_FILE: usize = 1024;
const MAX_HUNK: usize = 16 * 1024;
const MAX_TITLE: usize = 300;
const MAX_DETAIL: usize = 8 * 1024;
/// The severities a finding may have, lowest first.
pub const SEVERITIES: [&str; 5] = ["info", "low", "medium", "high", "critical"];

/// What the reviewer decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    Changes,
}

/// One finding, anchored to a line of a file of the worktree and the hunk
/// of the diff it concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewFinding {
    pub file: String,
    pub line: u64,
    pub hunk: String,
    pub severity: String,
    pub title: String,
    pub detail: String,
}

/// A round's review as read: the verdict (`None` when the block could not
/// be read at all), the findings kept, and what was wrong with the answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewOutcome {
    pub verdict: Option<Verdict>,
    pub findings: Vec<ReviewFinding>,
    pub problems: Vec<String>,
}

/// What a scan of the reviewer's output found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scan {
    /// The last complete block, without its fences.
    Found(String),
    /// A block longer than [`MAX_BLOCK`] (its size in bytes, up to where it ended or the output did).
    TooLarge(u64),
    /// An opening fence without its closing one.
    Unclosed,
    /// No block at all.
    Nothing,
}

/// Finds the last review block in lines of output, keeping at most
/// [`MAX_BLOCK`] bytes of it.
#[derive(Debug, Default)]
pub struct Scanner {
    open: bool,
    buf: String,
    bytes: u64,
    too_large: bool,
    last: Option<Scan>,
}

impl Scanner {
    /// One line of output (without its newline).
    pub fn line(&mut self, line: &str) {
        let t = line.trim();
        if t.starts_with(FENCE) {
            self.open = true;
            self.buf.clear();
            self.bytes = 0;
            self.too_large = false;
            return;
        }
        if !self.open {
            return;
        }
        if t == "```" {
            self.open = false;
            let block = std::mem::take(&mut self.buf);
            self.last = Some(if self.too_large { Scan::TooLarge(self.bytes) } else { Scan::Found(block) });
            return;
        }
        self.add(line.len() as u64);
        if !self.too_large {
            self.buf.push_str(line);
            self.buf.push('\n');
        }
    }

    /// A line too long to be read whole: it counts, and is not kept.
    fn oversized(&mut self, bytes: u64) {
        if self.open {
            self.add(bytes);
        }
    }

    fn add(&mut self, bytes: u64) {
        self.bytes += bytes + 1;
        if self.bytes > MAX_BLOCK as u64 && !self.too_large {
            self.too_large = true;
            self.buf = String::new();
        }
    }

    /// Every line of `text`.
    pub fn text(&mut self, text: &str) {
        for l in text.lines() {
            self.line(l);
        }
    }

    /// Every line of a reader, none held longer than [`MAX_BLOCK`] bytes.
    pub fn reader(&mut self, r: impl BufRead) -> std::io::Result<()> {
        let mut r = r;
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = std::io::Read::take(&mut r, MAX_BLOCK as u64 + 1).read_until(b'\n', &mut buf)?;
            if n == 0 {
                return Ok(());
            }
            if buf.last() == Some(&b'\n') || n <= MAX_BLOCK {
                let line = String::from_utf8_lossy(&buf);
                self.line(line.trim_end_matches(['\n', '\r']));
                continue;
            }
            // The rest of an oversized line, counted and dropped.
            let mut len = n as u64;
            loop {
                buf.clear();
                let m = std::io::Read::take(&mut r, 64 * 1024).read_until(b'\n', &mut buf)?;
                len += m as u64;
                if m == 0 || buf.last() == Some(&b'\n') {
                    break;
                }
            }
            self.oversized(len);
        }
    }

    /// What was found: the last complete block, else what the open one is.
    pub fn finish(self) -> Scan {
        match self.last {
            Some(s) => s,
            None if self.open && self.too_large => Scan::TooLarge(self.bytes),
            None if self.open => Scan::Unclosed,
            None => Scan::Nothing,
        }
    }
}

/// The review a scan found, read strictly: a bad verdict or bad JSON makes
/// no review (its problem says why); a bad finding is left out, named.
pub fn read(scan: Scan) -> ReviewOutcome {
    let block = match scan {
        Scan::Found(b) => b,
        Scan::TooLarge(n) => {
            return unreadable(format!(
                "the reviewer's review block is {n} bytes, more than the {MAX_BLOCK} read: it was not read (the whole \
                 output is in the reviewer's raw.log); a review lists at most {MAX_FINDINGS} findings"
            ));
        }
        Scan::Unclosed => {
            return unreadable(format!(
                "the reviewer opened a {FENCE} block and never closed it with ```: no review was read"
            ));
        }
        Scan::Nothing => {
            return unreadable(format!(
                "the reviewer gave no {FENCE} block with its verdict and findings: no review was read"
            ));
        }
    };
    let value: serde_json::Value = match serde_json::from_str(block.trim()) {
        Ok(v) => v,
        Err(e) => {
            return unreadable(format!("the reviewer's review block is not valid JSON ({e}): no review was read"));
        }
    };
    let verdict = match value.get("verdict").and_then(|v| v.as_str()) {
        Some("approve") => Verdict::Approve,
        Some("changes") => Verdict::Changes,
        other => {
            return unreadable(format!(
                "the reviewer's verdict is {}, not \"approve\" or \"changes\": no review was read",
                other.map(|v| format!("\"{}\"", prefix(v, 40))).unwrap_or_else(|| "missing".to_owned())
            ));
        }
    };
    let mut out = ReviewOutcome { verdict: Some(verdict), ..Default::default() };
    let items = match value.get("findings") {
        None | Some(serde_json::Value::Null) => &[][..],
        Some(serde_json::Value::Array(a)) => a.as_slice(),
        Some(_) => {
            out.problems.push("the review's `findings` is not an array: no finding was read".to_owned());
            &[][..]
        }
    };
    for (i, item) in items.iter().enumerate() {
        if out.findings.len() == MAX_FINDINGS {
            out.problems.push(format!(
                "the review has {} findings: the first {MAX_FINDINGS} are kept, {} left out",
                items.len(),
                items.len() - i
            ));
            break;
        }
        match finding(item) {
            Ok(f) => out.findings.push(f),
            Err(why) => out.problems.push(format!("finding #{} left out: {why}", i + 1)),
        }
    }
    out
}

fn unreadable(problem: String) -> ReviewOutcome {
    ReviewOutcome { verdict: None, findings: Vec::new(), problems: vec![problem] }
}

/// One finding, checked field by field.
fn finding(v: &serde_json::Value) -> Result<ReviewFinding, String> {
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let file = text("file").filter(|f| !f.trim().is_empty()).ok_or("it names no `file`")?;
    let file = file.trim().trim_start_matches("./").to_owned();
    if file.starts_with('/') || file.split('/').any(|c| c == "..") || file.len() > MAX_FILE {
        return Err(format!("its `file` `{}` is not a path inside the worktree", prefix(&file, 80)));
    }
    let line = v.get("line").and_then(|l| l.as_u64()).filter(|l| *l >= 1).ok_or("its `line` is not a number from 1")?;
    let severity = text("severity").unwrap_or_else(|| "medium".to_owned()).to_ascii_lowercase();
    if !SEVERITIES.contains(&severity.as_str()) {
        return Err(format!("its `severity` `{}` is not one of {}", prefix(&severity, 40), SEVERITIES.join(", ")));
    }
    let title = text("title").filter(|t| !t.trim().is_empty()).ok_or("it has no `title`")?;
    Ok(ReviewFinding {
        file,
        line,
        hunk: prefix(&text("hunk").unwrap_or_default(), MAX_HUNK).to_owned(),
        severity,
        title: prefix(title.trim(), MAX_TITLE).to_owned(),
        detail: prefix(&text("detail").unwrap_or_default(), MAX_DETAIL).to_owned(),
    })
}

/// At most `max` bytes of `s`, on a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A diff's text split per file (`diff --git a/X b/Y` sections), by the new path.
pub fn file_patches(patch: &str) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::new();
    let mut current: Option<String> = None;
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let path = rest.rsplit_once(" b/").map(|(_, b)| b.to_owned()).unwrap_or_default();
            current = Some(path.clone());
            out.entry(path).or_default();
            continue;
        }
        if let Some(p) = &current
            && let Some(text) = out.get_mut(p)
        {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// Whether a finding's hunk still stands in the file's current diff: its
/// lines (the `@@` headers aside, trailing blanks ignored) appear together
/// in the diff, as diff lines or, without their `+`/`-`/` ` marks, as the
/// code. A finding without a hunk cannot be checked and stands; a file no
/// longer in the diff makes any hunk stale.
pub fn hunk_stands(hunk: &str, file_patch: Option<&str>) -> bool {
    let wanted: Vec<&str> =
        hunk.lines().filter(|l| !l.starts_with("@@")).map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    if wanted.is_empty() {
        return true;
    }
    let Some(patch) = file_patch else { return false };
    let lines: Vec<&str> = patch
        .lines()
        .filter(|l| !l.starts_with("@@") && !l.starts_with("+++") && !l.starts_with("---"))
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let code: Vec<&str> = lines.iter().map(|l| l.get(1..).unwrap_or("").trim_end()).collect();
    let marked = contains(&lines, &wanted);
    marked || contains(&code, &wanted)
}

fn contains(hay: &[&str], needle: &[&str]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Picks the reviewer among a role's agents: the first whose model family
/// is known and differs from the worker's; when the worker's family is
/// unknown, the first agent other than the worker. `candidates` are
/// `(agent, family)` in the role's order.
pub fn pick_reviewer(
    role: &str,
    worker: (&str, Option<&str>),
    candidates: &[(String, Option<&'static str>)],
) -> Result<String, String> {
    let (agent, family) = worker;
    let found = match family {
        Some(f) => candidates.iter().find(|(_, c)| c.is_some_and(|c| c != f)),
        None => candidates.iter().find(|(a, _)| a != agent),
    };
    if let Some((a, _)) = found {
        return Ok(a.clone());
    }
    let worker_family = family.map(|f| format!(" ({f})")).unwrap_or_default();
    Err(format!(
        "role `{role}` has no agent of another model family than the worker's `{agent}`{worker_family} to review \
         it: add one to the role, or name the reviewer agent itself in `review_by` (an agent named is used as is)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> Scan {
        let mut s = Scanner::default();
        s.text(text);
        s.finish()
    }

    #[test]
    fn two_anchored_findings_and_a_verdict_are_read() {
        let out = "thinking…\n```json caesar:review\n{\"verdict\":\"changes\",\"findings\":[\
            {\"file\":\"./a.txt\",\"line\":1,\"hunk\":\"+a\",\"severity\":\"High\",\"title\":\"t1\"},\
            {\"file\":\"b.txt\",\"line\":2,\"hunk\":\"+b\",\"title\":\"t2\",\"detail\":\"d\"}]}\n```\nbye";
        let r = read(scan(out));
        assert_eq!(r.verdict, Some(Verdict::Changes));
        assert_eq!(r.problems, Vec::<String>::new());
        assert_eq!(r.findings.len(), 2);
        assert_eq!((r.findings[0].file.as_str(), r.findings[0].severity.as_str()), ("a.txt", "high"));
        assert_eq!((r.findings[1].line, r.findings[1].severity.as_str()), (2, "medium"));
    }

    #[test]
    fn malformed_reviews_are_problems_by_name() {
        let problem = |text: &str| read(scan(text)).problems.join(" | ");
        assert!(problem("no block here").contains("gave no ```json caesar:review block"));
        assert!(problem("```json caesar:review\n{\"verdict\":\"approve\"").contains("never closed it"));
        assert!(problem("```json caesar:review\n{nope\n```").contains("not valid JSON"));
        assert!(problem("```json caesar:review\n{\"verdict\":\"lgtm\"}\n```").contains("\"lgtm\", not \"approve\""));
        let r = read(scan(
            "```json caesar:review\n{\"verdict\":\"changes\",\"findings\":[{\"file\":\"/etc/passwd\",\"line\":1,\
             \"title\":\"x\"},{\"file\":\"a\",\"line\":0,\"title\":\"x\"},{\"file\":\"a\",\"line\":3,\"title\":\"ok\",\
             \"severity\":\"urgent\"},{\"file\":\"a\",\"line\":3,\"title\":\"kept\"}]}\n```",
        ));
        assert_eq!(r.findings.len(), 1, "{r:?}");
        assert_eq!(r.findings[0].title, "kept");
        let p = r.problems.join(" | ");
        assert!(p.contains("finding #1 left out: its `file` `/etc/passwd` is not a path inside the worktree"), "{p}");
        assert!(p.contains("finding #2 left out: its `line` is not a number from 1"), "{p}");
        assert!(p.contains("finding #3 left out: its `severity` `urgent`"), "{p}");
    }

    #[test]
    fn ten_megabytes_of_findings_are_bounded() {
        let one = "{\"file\":\"a.txt\",\"line\":1,\"hunk\":\"+a\",\"title\":\"t\"},";
        let body = one.repeat(10 * 1024 * 1024 / one.len());
        // On many lines (text), and as one line from a reader.
        let text = format!(
            "```json caesar:review\n{{\"verdict\":\"changes\",\"findings\":[\n{}\n]}}\n```\n",
            body.replace("},", "},\n")
        );
        let mut s = Scanner::default();
        s.text(&text);
        assert!(s.buf.len() <= MAX_BLOCK, "the scanner holds at most the cap");
        let r = read(s.finish());
        assert_eq!(r.verdict, None);
        assert!(r.problems[0].contains("more than the 262144 read"), "{:?}", r.problems);
        let one_line = format!("```json caesar:review\n{{\"verdict\":\"changes\",\"findings\":[{body}]}}\n```\n");
        let mut s = Scanner::default();
        s.reader(std::io::Cursor::new(one_line.as_bytes())).unwrap();
        assert!(matches!(s.finish(), Scan::TooLarge(n) if n > 10_000_000));
        // Within the block's cap, more than MAX_FINDINGS findings: the first are kept.
        let many = format!(
            "```json caesar:review\n{{\"verdict\":\"changes\",\"findings\":[{}{}]}}\n```",
            one.repeat(80),
            one.trim_end_matches(',')
        );
        let r = read(scan(&many));
        assert_eq!(r.findings.len(), MAX_FINDINGS);
        assert!(r.problems[0].contains("81 findings: the first 50 are kept, 31 left out"), "{:?}", r.problems);
    }

    #[test]
    fn a_hunk_the_worker_rewrote_is_stale_and_one_untouched_stands() {
        let patch = "diff --git a/a.txt b/a.txt\nnew file mode 100644\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+fixed\n+two\n\
                     diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-old\n+new\n";
        let files = file_patches(patch);
        assert_eq!(files.len(), 2);
        let a = files.get("a.txt").map(String::as_str);
        assert!(!hunk_stands("@@ -0,0 +1 @@\n+broken", a), "rewritten");
        assert!(hunk_stands("@@ -0,0 +1,2 @@\n+fixed\n+two", a), "as a diff");
        assert!(hunk_stands("fixed\ntwo\n", a), "as code");
        assert!(hunk_stands("-old\n+new", files.get("b.txt").map(String::as_str)));
        assert!(!hunk_stands("+x", None), "a file no longer in the diff");
        assert!(hunk_stands("", None), "no hunk: nothing to check");
    }

    #[test]
    fn the_reviewer_is_of_another_family_unless_none_is() {
        let c = |v: &[(&str, Option<&'static str>)]| v.iter().map(|(a, f)| (a.to_string(), *f)).collect::<Vec<_>>();
        let chain = c(&[("claude", Some("anthropic")), ("opencode", None), ("codex", Some("openai"))]);
        assert_eq!(pick_reviewer("review", ("claude", Some("anthropic")), &chain).unwrap(), "codex");
        assert_eq!(pick_reviewer("review", ("codex", Some("openai")), &chain).unwrap(), "claude");
        assert_eq!(pick_reviewer("review", ("mine", None), &chain).unwrap(), "claude");
        assert_eq!(pick_reviewer("review", ("claude", None), &chain).unwrap(), "opencode");
        let e = pick_reviewer("solo", ("claude", Some("anthropic")), &c(&[("claude", Some("anthropic"))])).unwrap_err();
        assert!(
            e.contains("role `solo` has no agent of another model family than the worker's `claude` (anthropic)"),
            "{e}"
        );
        assert!(e.contains("name the reviewer agent itself in `review_by`"), "{e}");
    }
}

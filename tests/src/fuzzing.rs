//! The fuzz targets of issue 19, shared by `tests/fuzz` (cargo-fuzz, on
//! nightly) and the stable, bounded run in `tests/tests/fuzzing.rs`: each
//! target takes arbitrary bytes, calls the daemon's report parser or the
//! MCP shim's response shaping, and panics when an invariant breaks.
//!
//! This file depends only on `caesard`, `caesar_mcp` and `serde_json`, so
//! the fuzz crate includes it by path (`#[path]`), without the rest of
//! this library.

use caesard::capped_json::{self, CUT_MARK, LISTED, Limits, PATH_BYTES};
use caesard::oacp::{MAX_REPORT_ITEMS, MAX_REPORT_STRING, REPORT_LIMITS, Report, TRUNCATED_TITLE};
use serde_json::{Value, json};

/// The report parser: never panics; what it accepts respects every cap;
/// a second parse of what it produced changes nothing; and on an input
/// too small to reach any cap it agrees with serde_json exactly.
pub fn report_parser(data: &[u8]) {
    let parsed = Report::parse_reader(data);
    // The same bytes handed over a few at a time parse the same: the
    // parser's buffer boundaries never show.
    let step = data.len() % 7 + 1;
    let chunked = Report::parse_reader(Chunked { data, step });
    assert_eq!(parsed, chunked, "a read of {step} bytes at a time parsed differently");
    if let Ok(r) = &parsed {
        check_report_caps(r);
        let text = serde_json::to_string(r).expect("a report serializes");
        let again = Report::parse(&text).expect("a parsed report parses again");
        assert_eq!(&again, r, "a second parse changed the report");
    }
    // Below 2,000 bytes no list can pass 1,000 entries nor a string 64 KiB:
    // the capped parse must then be serde_json's parse.
    if data.len() < 2_000 && depth(data) <= 60 {
        let plain = serde_json::from_slice::<Value>(data).ok().map(Report::from_value);
        match (plain, parsed) {
            (Some(Ok(a)), Ok(b)) => assert_eq!(a, b, "the capped parse differs from serde_json's"),
            (Some(Err(_)) | None, Err(_)) => {}
            (Some(Ok(_)), Err(e)) => panic!("the capped parse refused what serde_json reads: {e}"),
            (Some(Err(e)), Ok(_)) => panic!("the capped parse accepted a report serde_json's refuses: {e}"),
            (None, Ok(_)) => panic!("the capped parse accepted text that is not JSON"),
        }
    }
    capped_filter(data);
}

/// The stream filter the report parser reads with, under caps small
/// enough for a fuzzer's few-KiB inputs to pass them all: the first four
/// bytes choose the entries per array, the bytes per string, the depth and
/// the total, the rest is filtered. What it copies out keeps every cap
/// (the total within one value's overshoot), reads the same a few bytes
/// at a time, and is JSON whenever the input is JSON within the depth.
pub fn capped_filter(data: &[u8]) {
    let [a, b, c, d, rest @ ..] = data else { return };
    let limits = Limits {
        items: usize::from(a % 6),
        string_bytes: CUT_MARK.len() + usize::from(b % 32),
        depth: usize::from(c % 8),
        total: usize::from(*d) * 2,
        first_value_only: a & 0x80 != 0,
        always: REPORT_LIMITS.always,
    };
    let whole = capped_json::filter(rest, limits).map_err(|e| e.to_string());
    let step = rest.len() % 5 + 1;
    let chunked = capped_json::filter(Chunked { data: rest, step }, limits).map_err(|e| e.to_string());
    assert_eq!(whole, chunked, "a read of {step} bytes at a time filtered differently");
    let json_within_depth =
        !limits.first_value_only && depth(rest) <= limits.depth && serde_json::from_slice::<Value>(rest).is_ok();
    let (out, cut) = match whole {
        Ok(copy) => copy,
        // A number of more than MAX_SCALAR digits is JSON the filter refuses by design.
        Err(e) if json_within_depth && !e.contains("number or literal longer") => {
            panic!("the filter refused JSON within its depth: {e}")
        }
        Err(_) => return,
    };
    let bound = total_bound(&limits, rest);
    assert!(
        out.len() <= bound,
        "the copy takes {} bytes, over the total of {} ({bound} with one value's overshoot)",
        out.len(),
        limits.total
    );
    assert!(cut.lists.len() <= LISTED, "{} list paths named", cut.lists.len());
    for (path, had, kept) in &cut.lists {
        assert!(path.len() <= PATH_BYTES && kept < had && *kept <= limits.items, "{path}: {had} -> {kept}");
    }
    match serde_json::from_slice::<Value>(&out) {
        Ok(v) => check_filtered(&v, 0, &limits),
        Err(e) if json_within_depth => panic!("the filter's copy of JSON is not JSON: {e}"),
        Err(_) => {}
    }
}

/// The most bytes [`capped_json::filter`] may copy out of `data` under
/// `l`: the total, then one field begun below it (a cut name and a cut
/// string or a scalar, each as written: an escape takes up to six bytes
/// for one), the brackets that close, and each required field once.
fn total_bound(l: &Limits, data: &[u8]) -> usize {
    let string = (6 * l.string_bytes).min(data.len()) + CUT_MARK.len() + 2;
    let field = 2 + string + string.max(longest_scalar(data));
    l.total + field + l.depth + 1 + l.always.len() * field
}

/// The bytes of `data` outside JSON strings, each string's opening quote
/// standing for the whole string.
fn outside_strings(data: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (mut in_str, mut esc) = (false, false);
    data.iter().copied().filter(move |&b| {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            return false;
        }
        in_str = b == b'"';
        true
    })
}

/// The longest run of bytes outside strings that a number or literal is
/// made of.
fn longest_scalar(data: &[u8]) -> usize {
    let (mut run, mut max) = (0usize, 0usize);
    for b in outside_strings(data) {
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
            run += 1;
            max = max.max(run);
        } else {
            run = 0;
        }
    }
    max
}

/// Every array of `v` within `l.items`, every string and field name
/// within `l.string_bytes`, every value within `l.depth` (`v` is at `at`).
fn check_filtered(v: &Value, at: usize, l: &Limits) {
    assert!(at <= l.depth, "a value at depth {at}, past the depth of {}", l.depth);
    match v {
        Value::String(s) => {
            assert!(s.len() <= l.string_bytes, "a string of {} bytes, over {}", s.len(), l.string_bytes)
        }
        Value::Array(items) => {
            assert!(items.len() <= l.items, "an array of {} entries, over {}", items.len(), l.items);
            items.iter().for_each(|i| check_filtered(i, at + 1, l));
        }
        Value::Object(fields) => {
            for (k, f) in fields {
                assert!(k.len() <= l.string_bytes, "a field name of {} bytes, over {}", k.len(), l.string_bytes);
                check_filtered(f, at + 1, l);
            }
        }
        _ => {}
    }
}

/// A reader that hands over `step` bytes at a time.
struct Chunked<'a> {
    data: &'a [u8],
    step: usize,
}

impl std::io::Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Every list of `r` within [`MAX_REPORT_ITEMS`] (findings one more for
/// the note of what was cut) and every string within [`MAX_REPORT_STRING`].
pub fn check_report_caps(r: &Report) {
    let strings_ok = |s: &str| assert!(s.len() <= MAX_REPORT_STRING, "a string of {} bytes was kept", s.len());
    for s in [&r.task_id, &r.summary, &r.details].into_iter().chain(&r.changes_verified_by) {
        strings_ok(s);
    }
    assert!(r.changes.len() <= MAX_REPORT_ITEMS);
    assert!(r.commands_run.len() <= MAX_REPORT_ITEMS);
    assert!(r.questions.len() <= MAX_REPORT_ITEMS);
    assert!(r.next_steps.len() <= MAX_REPORT_ITEMS);
    assert!(r.artifacts.len() <= MAX_REPORT_ITEMS);
    assert!(r.findings.len() <= MAX_REPORT_ITEMS, "{} findings kept", r.findings.len());
    r.changes.iter().for_each(|c| [&c.path, &c.summary].into_iter().for_each(|s| strings_ok(s)));
    r.commands_run.iter().for_each(|c| [&c.command, &c.note].into_iter().for_each(|s| strings_ok(s)));
    r.next_steps.iter().for_each(|s| strings_ok(s));
    r.artifacts.iter().for_each(|a| [&a.path, &a.description].into_iter().for_each(|s| strings_ok(s)));
    for q in &r.questions {
        assert!(q.options.len() <= MAX_REPORT_ITEMS);
        [&q.id, &q.question].into_iter().chain(&q.options).for_each(|s| strings_ok(s));
    }
    for f in &r.findings {
        strings_ok(&f.title);
        strings_ok(&f.detail);
        if let Some(file) = &f.file {
            strings_ok(file);
        }
    }
    let notes = r.findings.iter().filter(|f| f.title == TRUNCATED_TITLE).count();
    assert!(notes <= 1, "{notes} truncation notes");
}

/// The deepest nesting of brackets outside strings (for the comparison's
/// limit: serde_json accepts 128 levels, the capped parse 64).
fn depth(data: &[u8]) -> usize {
    let (mut d, mut max) = (0usize, 0usize);
    for b in outside_strings(data) {
        match b {
            b'[' | b'{' => {
                d += 1;
                max = max.max(d);
            }
            b']' | b'}' => d = d.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The response shaping: whatever the value and the cap, the answer is
/// valid JSON equal to its structured content, never over the cap, left
/// alone when it fits, and says it was cut when it was.
pub fn shaping(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let cap = caesar_mcp::shape::MIN_MAX_CHARS + usize::from(first) * 80;
    let value = match serde_json::from_slice::<Value>(rest) {
        Ok(v) => v,
        Err(_) => build_value(rest),
    };
    check_shaping(value, cap);
}

/// [`shaping`]'s invariants for one value and cap.
pub fn check_shaping(value: Value, cap: usize) {
    let before = serde_json::to_string(&value).expect("serializes");
    let size = before.chars().count();
    assert_eq!(caesar_mcp::shape::size(&value), size, "the measure disagrees with serde_json");
    let hint = "Truncated to fit the response cap. Lower limit, or read one task with caesar_status.";
    let (text, structured) = caesar_mcp::shape::shaped(&value, cap, hint).expect("a Value always encodes");
    let parsed: Value = serde_json::from_str(&text).expect("the text block is JSON");
    // The text is the structured content's own JSON; a parse of it may
    // differ by a float's last bit (serde_json's parse is not correctly
    // rounded without `float_roundtrip`), so the text is compared.
    let encoded = serde_json::to_string(&structured).expect("serializes");
    assert_eq!(text, encoded, "the text and the structured content differ");
    let chars = text.chars().count();
    assert!(chars <= cap, "the answer takes {chars} characters, over the cap of {cap}");
    if size <= cap {
        assert_eq!(text, before, "a value within the cap was changed");
    } else if parsed.is_object() {
        assert_eq!(parsed["truncated"], true, "a cut answer does not say so");
        assert!(parsed["hint"].as_str().is_some_and(|h| h.contains("Cut:")), "the hint does not say what was cut");
    }
}

/// A JSON value built from arbitrary bytes, so that the shaping target
/// sees deep, wide and long values whatever the fuzzer feeds it: at most
/// about 20,000 nodes and 200,000 characters of strings, so that one input
/// stays quick.
pub fn build_value(data: &[u8]) -> Value {
    let mut b = Builder { data, at: 0, nodes: 20_000, chars: 200_000 };
    b.node(0)
}

/// The state of [`build_value`]: where it reads and what it may still make.
struct Builder<'a> {
    data: &'a [u8],
    at: usize,
    nodes: usize,
    chars: usize,
}

impl Builder<'_> {
    fn take(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn node(&mut self, depth: u32) -> Value {
        self.nodes = self.nodes.saturating_sub(1);
        let b = self.take();
        match b % 8 {
            0 if depth < 6 && self.nodes > 0 => {
                let n = (usize::from(self.take()) * usize::from(self.take() % 8 + 1)).min(self.nodes);
                Value::Array((0..n).map(|_| self.node(depth + 1)).collect())
            }
            1 if depth < 6 && self.nodes > 0 => {
                let n = usize::from(self.take() % 12);
                Value::Object((0..n).map(|i| (format!("k{i}_{}", self.take()), self.node(depth + 1))).collect())
            }
            2 => {
                let c = char::from_u32(u32::from(self.take()) * 37).unwrap_or('\u{fffd}');
                let n = (usize::from(self.take()) * 97).min(self.chars);
                self.chars -= n;
                Value::String(std::iter::repeat_n(c, n).collect())
            }
            3 => json!(i64::from(self.take()) * -1_000_003),
            4 => json!(f64::from(self.take()) / 7.0),
            5 => json!("q\"\\\n\u{1}é😀"),
            6 => Value::Bool(b & 16 != 0),
            _ => Value::Null,
        }
    }
}

/// A small deterministic generator (splitmix64), so that a failing
/// iteration of the stable run is reproduced by its seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Bytes that JSON mutations like to meet.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\\u",
    b"\\ud83d",
    b"null",
    b"-1e999",
    b"0",
    b"\xff",
    b"\xe2\x80",
    b" ",
    b"\n",
    b"\x00",
    b"\"protocol\":\"caesar.report/v1\"",
    b"[1,2,3,4,5,6,7,8]",
    b"\"x\"",
];

/// One mutation of `input`, libFuzzer-style: flip, insert, delete,
/// duplicate a slice, or splice in a token.
pub fn mutate(input: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = if v.is_empty() { 0 } else { rng.below(v.len() + 1) };
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.insert(at, rng.next_u64() as u8),
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 if !v.is_empty() => {
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(64)).min(v.len());
                let piece = v[start..end].to_vec();
                v.splice(at..at, piece);
            }
            _ => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
        }
    }
    v
}

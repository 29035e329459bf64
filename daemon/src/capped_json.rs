//! Caps applied to JSON while it is read (issue 19): an agent's report of
//! 300,000 entries or of 100 MB strings must never become a huge value in
//! the daemon's memory before its caps are applied.
//!
//! [`filter`] streams the bytes of a JSON text once and copies out a JSON
//! text with every array held to its first `items` entries, every string to
//! `string_bytes` bytes (ending with a mark), the nesting to `depth`, and
//! the whole copy to about `total` bytes; the rest is skipped as it is
//! read, never buffered. What was cut is counted by path, so the report's
//! truncation finding can say it. The filter checks only the structure it
//! needs; serde_json then parses the (small) copy and judges its validity.

use std::io::{self, Read};

/// What the filter keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Entries kept per array.
    pub items: usize,
    /// Bytes kept per string (as written, escapes included), the mark included.
    pub string_bytes: usize,
    /// The deepest nesting accepted.
    pub depth: usize,
    /// About the most bytes copied out; past it, further entries and fields are dropped.
    pub total: usize,
    /// Stop after the first value (for a report embedded in other text).
    pub first_value_only: bool,
    /// Fields of the outermost object kept even past `total` (a report's
    /// required fields), each once, their values still capped.
    pub always: &'static [&'static str],
}

/// What the filter cut.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Per array cut: its path (`changes`, `questions[].options`), how many
    /// entries it had and how many were kept; the first cut of each path,
    /// at most [`LISTED`] paths of at most [`PATH_BYTES`] bytes.
    pub lists: Vec<(String, usize, usize)>,
    /// Arrays cut that `lists` does not name (another of a path it names,
    /// or past its [`LISTED`]), so that what is said of a cut stays small.
    pub other_lists: usize,
    /// Strings shortened.
    pub strings: usize,
    /// Object fields dropped past the total.
    pub fields: usize,
}

impl Cut {
    /// Whether anything was cut.
    pub fn any(&self) -> bool {
        !self.lists.is_empty() || self.other_lists > 0 || self.strings > 0 || self.fields > 0
    }

    /// Records an array at `path` that had `had` entries and kept `kept`.
    fn list(&mut self, path: &str, had: usize, kept: usize) {
        let mut end = path.len().min(PATH_BYTES);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        let path = &path[..end];
        if self.lists.len() >= LISTED || self.lists.iter().any(|(p, _, _)| p == path) {
            self.other_lists += 1;
            return;
        }
        self.lists.push((path.to_owned(), had, kept));
    }
}

/// The most array paths a [`Cut`] names.
pub const LISTED: usize = 16;
/// The most bytes of a path a [`Cut`] names.
pub const PATH_BYTES: usize = 120;

/// Why the text could not be filtered: it is not JSON in a way the filter
/// sees (serde_json judges the rest), or it could not be read.
#[derive(Debug)]
pub enum FilterError {
    /// Not JSON: the reason, with the byte offset.
    Syntax(String),
    /// Reading failed.
    Io(io::Error),
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FilterError::Syntax(m) => f.write_str(m),
            FilterError::Io(e) => write!(f, "cannot read: {e}"),
        }
    }
}

/// What replaces the end of a string cut by the filter (the same words as
/// the report's own caps use).
pub const CUT_MARK: &str = " [truncated by caesar]";

/// The longest number or literal copied (no real one comes near it).
const MAX_SCALAR: usize = 4096;

/// Copies `input` with `limits` applied; returns the copy and what was cut.
pub fn filter<R: Read>(input: R, limits: Limits) -> Result<(Vec<u8>, Cut), FilterError> {
    let mut f =
        Filter { input, buf: vec![0; 64 * 1024], at: 0, len: 0, read: 0, out: Vec::new(), cut: Cut::default(), limits };
    f.ws()?;
    let mut path = String::new();
    f.value(0, &mut path, true)?;
    if !limits.first_value_only {
        f.ws()?;
        if let Some(b) = f.peek()? {
            return Err(f.error(&format!("unexpected `{}` after the JSON value", b as char)));
        }
    }
    Ok((f.out, f.cut))
}

/// [`filter`], then serde_json's parse of the copy: the value and what was
/// cut, or why the text is not JSON.
pub fn read_value<R: Read>(input: R, limits: Limits) -> Result<(serde_json::Value, Cut), String> {
    let (bytes, cut) = filter(input, limits).map_err(|e| e.to_string())?;
    let value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    Ok((value, cut))
}

struct Filter<R> {
    input: R,
    buf: Vec<u8>,
    at: usize,
    len: usize,
    /// Bytes consumed before `buf[0]`.
    read: usize,
    out: Vec<u8>,
    cut: Cut,
    limits: Limits,
}

impl<R: Read> Filter<R> {
    fn peek(&mut self) -> Result<Option<u8>, FilterError> {
        if self.at == self.len {
            self.read += self.len;
            self.at = 0;
            self.len = loop {
                match self.input.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(FilterError::Io(e)),
                }
            };
            if self.len == 0 {
                return Ok(None);
            }
        }
        Ok(Some(self.buf[self.at]))
    }

    fn next(&mut self) -> Result<u8, FilterError> {
        match self.peek()? {
            Some(b) => {
                self.at += 1;
                Ok(b)
            }
            None => Err(self.error("the text ends in the middle of a value")),
        }
    }

    fn error(&self, what: &str) -> FilterError {
        FilterError::Syntax(format!("{what} (at byte {})", self.read + self.at))
    }

    fn ws(&mut self) -> Result<(), FilterError> {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek()? {
            self.at += 1;
        }
        Ok(())
    }

    fn expect(&mut self, want: u8) -> Result<(), FilterError> {
        let b = self.next()?;
        if b != want {
            return Err(self.error(&format!("expected `{}`, found `{}`", want as char, b as char)));
        }
        Ok(())
    }

    /// Makes at least `n` bytes readable from the cursor (fewer at the end
    /// of the input), moving what is left of the buffer to its start.
    fn fill(&mut self, n: usize) -> Result<(), FilterError> {
        while self.len - self.at < n {
            self.buf.copy_within(self.at..self.len, 0);
            self.read += self.at;
            self.len -= self.at;
            self.at = 0;
            let got = loop {
                match self.input.read(&mut self.buf[self.len..]) {
                    Ok(g) => break g,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(FilterError::Io(e)),
                }
            };
            if got == 0 {
                break;
            }
            self.len += got;
        }
        Ok(())
    }

    /// Which of `always` the field name starting at the cursor (its
    /// opening quote) is, if any.
    fn always_index(&mut self) -> Result<Option<usize>, FilterError> {
        let longest = self.limits.always.iter().map(|n| n.len()).max().unwrap_or(0);
        self.fill(longest + 2)?;
        let rest = &self.buf[self.at..self.len];
        Ok(self.limits.always.iter().position(|name| {
            rest.len() >= name.len() + 2
                && rest[0] == b'"'
                && &rest[1..=name.len()] == name.as_bytes()
                && rest[name.len() + 1] == b'"'
        }))
    }

    fn over_total(&self) -> bool {
        self.out.len() >= self.limits.total
    }

    /// Copies one value (`emit`) or skips it, at nesting `depth`.
    fn value(&mut self, depth: usize, path: &mut String, emit: bool) -> Result<(), FilterError> {
        if depth > self.limits.depth {
            return Err(self.error(&format!("nested deeper than {} levels", self.limits.depth)));
        }
        match self.peek()? {
            Some(b'{') => self.object(depth, path, emit),
            Some(b'[') => self.array(depth, path, emit),
            Some(b'"') => self.string(emit).map(|_| ()),
            Some(_) => self.scalar(emit),
            None => Err(self.error("the text ends where a value was expected")),
        }
    }

    fn scalar(&mut self, emit: bool) -> Result<(), FilterError> {
        let mut n = 0;
        while let Some(b) = self.peek()? {
            if !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) {
                break;
            }
            self.at += 1;
            n += 1;
            // No number or literal is this long: keep the copy bounded.
            if n > MAX_SCALAR {
                return Err(self.error(&format!("a number or literal longer than {MAX_SCALAR} bytes")));
            }
            if emit {
                self.out.push(b);
            }
        }
        if n == 0 {
            let b = self.peek()?.unwrap_or(b' ');
            return Err(self.error(&format!("unexpected `{}`", b as char)));
        }
        Ok(())
    }

    /// A string: copied whole when it decodes to at most `string_bytes`
    /// bytes, else cut where [`CUT_MARK`] still fits after it (on a
    /// character, never inside an escape, a UTF-8 sequence or a surrogate
    /// pair) and the rest skipped as it is read, the same cut the report's
    /// own cap makes. When `emit`, the copy is written, a cut counted, and
    /// the raw bytes kept are returned (a field name); a string not emitted
    /// is only skipped.
    fn string(&mut self, emit: bool) -> Result<Vec<u8>, FilterError> {
        self.expect(b'"')?;
        let max = self.limits.string_bytes;
        let room = max.saturating_sub(CUT_MARK.len());
        let mut kept = Vec::new();
        // Decoded bytes so far, and the raw length where the mark still fits.
        let mut decoded = 0usize;
        let mut cut_at = 0usize;
        let mut cutting = !emit;
        let mut unit = Vec::with_capacity(12);
        loop {
            if cutting {
                self.skip_plain()?;
            }
            let b = self.next()?;
            if b == b'"' {
                break;
            }
            unit.clear();
            unit.push(b);
            let mut width = 1;
            // A high surrogate is never a place to cut: its pair follows.
            let mut high = false;
            if b == b'\\' {
                let e = self.next()?;
                unit.push(e);
                if e == b'u' {
                    for _ in 0..4 {
                        unit.push(self.next()?);
                    }
                    let code = escape_code(&unit[2..]);
                    width = escape_width(code);
                    high = code.is_some_and(|u| (0xD800..0xDC00).contains(&u));
                }
            } else if b >= 0xC0 {
                // The rest of a UTF-8 sequence, never split.
                let more = if b >= 0xF0 {
                    3
                } else if b >= 0xE0 {
                    2
                } else {
                    1
                };
                for _ in 0..more {
                    match self.peek()? {
                        Some(c) if (0x80..0xC0).contains(&c) => {
                            self.at += 1;
                            unit.push(c);
                        }
                        _ => break,
                    }
                }
                width = unit.len();
            }
            if cutting {
                continue;
            }
            decoded += width;
            if decoded > max {
                cutting = true;
                kept.truncate(cut_at);
                continue;
            }
            kept.extend_from_slice(&unit);
            if decoded <= room && !high {
                cut_at = kept.len();
            }
        }
        if emit {
            self.out.push(b'"');
            self.out.extend_from_slice(&kept);
            if cutting {
                self.out.extend_from_slice(CUT_MARK.as_bytes());
                self.cut.strings += 1;
            }
            self.out.push(b'"');
        }
        Ok(kept)
    }

    /// Skips, a buffer at a time, the bytes of a string that are neither
    /// its end nor an escape: the rest of a 100 MB string is passed over,
    /// not read byte by byte.
    fn skip_plain(&mut self) -> Result<(), FilterError> {
        while self.peek()?.is_some() {
            match self.buf[self.at..self.len].iter().position(|&b| b == b'"' || b == b'\\') {
                Some(p) => {
                    self.at += p;
                    return Ok(());
                }
                None => self.at = self.len,
            }
        }
        Ok(())
    }

    fn array(&mut self, depth: usize, path: &mut String, emit: bool) -> Result<(), FilterError> {
        self.expect(b'[')?;
        if emit {
            self.out.push(b'[');
        }
        self.ws()?;
        let (mut had, mut kept) = (0usize, 0usize);
        if self.peek()? == Some(b']') {
            self.at += 1;
        } else {
            let base = path.len();
            path.push_str("[]");
            loop {
                self.ws()?;
                had += 1;
                let keep = emit && kept < self.limits.items && !self.over_total();
                if keep && kept > 0 {
                    self.out.push(b',');
                }
                self.value(depth + 1, path, keep)?;
                if keep {
                    kept += 1;
                }
                self.ws()?;
                match self.next()? {
                    b',' => {}
                    b']' => break,
                    b => return Err(self.error(&format!("expected `,` or `]` in an array, found `{}`", b as char))),
                }
            }
            path.truncate(base);
        }
        if emit {
            self.out.push(b']');
            if kept < had {
                let name = if path.is_empty() { "(the document)" } else { path.as_str() };
                self.cut.list(name, had, kept);
            }
        }
        Ok(())
    }

    fn object(&mut self, depth: usize, path: &mut String, emit: bool) -> Result<(), FilterError> {
        self.expect(b'{')?;
        if emit {
            self.out.push(b'{');
        }
        self.ws()?;
        if self.peek()? == Some(b'}') {
            self.at += 1;
        } else {
            let mut kept = 0usize;
            let base = path.len();
            // Past the total each of `always` is kept once: a report that
            // repeats `"summary"` 300,000 times must not be copied whole.
            let mut always_kept = vec![false; if depth == 0 { self.limits.always.len() } else { 0 }];
            loop {
                self.ws()?;
                if self.peek()? != Some(b'"') {
                    return Err(self.error("expected a field name in quotes"));
                }
                let keep = emit
                    && (!self.over_total()
                        || depth == 0
                            && match self.always_index()? {
                                Some(i) => !std::mem::replace(&mut always_kept[i], true),
                                None => false,
                            });
                let mark = self.out.len();
                if keep && kept > 0 {
                    self.out.push(b',');
                }
                let name = self.string(keep)?;
                self.ws()?;
                self.expect(b':')?;
                if keep {
                    self.out.push(b':');
                }
                self.ws()?;
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&String::from_utf8_lossy(&name));
                self.value(depth + 1, path, keep)?;
                path.truncate(base);
                if keep {
                    kept += 1;
                } else if emit {
                    self.out.truncate(mark);
                    self.cut.fields += 1;
                }
                self.ws()?;
                match self.next()? {
                    b',' => {}
                    b'}' => break,
                    b => return Err(self.error(&format!("expected `,` or `}}` in an object, found `{}`", b as char))),
                }
            }
        }
        if emit {
            self.out.push(b'}');
        }
        Ok(())
    }
}

/// The code unit of a `\\uXXXX` escape (`hex` is its four digits).
fn escape_code(hex: &[u8]) -> Option<u16> {
    std::str::from_utf8(hex).ok().and_then(|h| u16::from_str_radix(h, 16).ok())
}

/// The bytes a `\\uXXXX` escape decodes to: a surrogate counts two, so
/// that a pair counts the four of its character.
fn escape_width(code: Option<u16>) -> usize {
    match code {
        Some(u) if u < 0x80 => 1,
        Some(u) if u < 0x800 => 2,
        Some(u) if (0xD800..0xE000).contains(&u) => 2,
        _ => 3,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::{Value, json};

    use super::*;

    fn limits() -> Limits {
        Limits { items: 3, string_bytes: 40, depth: 8, total: 1 << 20, first_value_only: false, always: &["keep"] }
    }

    fn run(text: &str, l: Limits) -> (Value, Cut) {
        let (bytes, cut) = filter(text.as_bytes(), l).unwrap();
        (serde_json::from_slice(&bytes).unwrap(), cut)
    }

    #[test]
    fn a_small_document_is_copied_unchanged() {
        let v = json!({"a": [1, 2.5e3, true, null], "b": {"c": "é\\n\"😀"}, "d": []});
        let (out, cut) = run(&v.to_string(), Limits { items: 4, ..limits() });
        assert_eq!((out, cut.any()), (v, false));
    }

    #[test]
    fn arrays_strings_and_depth_are_capped_by_path() {
        let text = format!(
            r#"{{"changes": [1,2,3,4,5], "q": [{{"options": ["a","b","c","d"]}}], "s": "{}", "e": "{}"}}"#,
            "x".repeat(1000),
            "\\u00e9".repeat(100)
        );
        let (out, cut) = run(&text, limits());
        assert_eq!(out["changes"], json!([1, 2, 3]));
        assert_eq!(out["q"][0]["options"], json!(["a", "b", "c"]));
        assert!(out["s"].as_str().unwrap().ends_with(CUT_MARK) && out["s"].as_str().unwrap().len() <= 40);
        assert!(out["e"].as_str().unwrap().starts_with("éé"));
        assert_eq!(cut.lists, vec![("changes".to_owned(), 5, 3), ("q[].options".to_owned(), 4, 3)]);
        assert_eq!(cut.strings, 2);
        let deep = "[".repeat(20) + &"]".repeat(20);
        assert!(filter(deep.as_bytes(), limits()).is_err());
    }

    #[test]
    fn the_total_drops_later_entries_and_fields() {
        let l = Limits { items: 1000, total: 100, ..limits() };
        let text = serde_json::to_string(&json!({"a": (0..500).collect::<Vec<_>>(), "keep": 2, "z": 1})).unwrap();
        let (out, cut) = run(&text, l);
        assert!(out["a"].as_array().unwrap().len() < 60);
        assert!(out.get("z").is_none() && cut.fields == 1);
        assert_eq!(out["keep"], 2);
    }

    #[test]
    fn what_is_said_of_cut_lists_stays_small() {
        let list = format!("[{}]", ["0"; 5].join(","));
        let many: Vec<String> = (0..40).map(|k| format!("\"{k}{}\": {list}", "n".repeat(300))).collect();
        let text = format!("{{{}, \"q\": [{{\"o\": {list}}}, {{\"o\": {list}}}]}}", many.join(","));
        let (_, cut) = run(&text, Limits { string_bytes: 1000, ..limits() });
        assert_eq!((cut.lists.len(), cut.other_lists), (LISTED, 40 + 2 - LISTED));
        assert!(cut.lists.iter().all(|(p, _, _)| p.len() <= PATH_BYTES));
    }

    #[test]
    fn a_cut_never_splits_a_pair_nor_mistakes_an_escaped_backslash() {
        // 30 bytes kept at most: 8 of text, then the mark.
        let l = Limits { string_bytes: 30, ..limits() };
        let text = format!(r#"["abcdef\ud83d\ude00{x}", "abcdef\\uD800{x}", "abcdefgé😀{x}"]"#, x = "x".repeat(40));
        let (out, cut) = run(&text, l);
        assert_eq!(cut.strings, 3);
        let kept: Vec<&str> =
            out.as_array().unwrap().iter().map(|v| v.as_str().unwrap().strip_suffix(CUT_MARK).unwrap()).collect();
        assert_eq!(kept, ["abcdef", "abcdef\\u", "abcdefg"]);
    }

    #[test]
    fn broken_text_is_refused_not_panicked_on() {
        for bad in ["", "{", "[1,", "{\"a\" 1}", "\"abc", "[1] x", "{1:2}", "\"\\u12", "@"] {
            assert!(filter(bad.as_bytes(), limits()).is_err(), "{bad}");
        }
        let l = Limits { first_value_only: true, ..limits() };
        assert!(filter("{\"a\":1} trailing {".as_bytes(), l).is_ok());
    }
}

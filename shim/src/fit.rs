//! One-pass fitting of a JSON answer under the response cap (issue 19).
//!
//! The first shaper re-serialized the whole answer for every string it
//! halved and every entry it dropped, so a 300,000-entry report took 88 s
//! and still came out over the cap. Here every node is measured once,
//! bottom-up, into a flat table (pre-order, so a subtree is a range), and
//! the cap is then shared out top-down in one walk: an object keeps its
//! small fields whole and splits what is left evenly among the large ones
//! (water-filling), an array keeps the longest prefix whose entries each
//! get a useful share, and a string is cut to its share with a mark. The
//! result never exceeds the budget it was given, whatever the input, and the
//! work is linear in the answer's size (a binary search per node aside).

use serde_json::Value;

/// What replaces the end of a string that was cut.
pub const CUT_MARK: &str = "…[truncated]";
/// The characters of [`CUT_MARK`].
const MARK_CHARS: usize = 12;
/// The share below which an array keeps fewer entries rather than cutting
/// every entry thinner (an entry smaller than this is kept whole).
pub const MIN_SHARE: usize = 256;
/// The share below which an object keeps fewer fields rather than cutting
/// every value thinner (a value smaller than this is kept whole).
pub const FIELD_SHARE: usize = 64;

/// What a fit cut, said in the answer's hint.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cuts {
    /// Strings shortened (each ends with [`CUT_MARK`]).
    pub strings: usize,
    /// Array entries dropped from the ends of their arrays.
    pub items: usize,
    /// Object fields dropped from the ends of their objects (when a share
    /// cannot give every field [`FIELD_SHARE`]).
    pub fields: usize,
}

impl Cuts {
    /// Whether anything was cut.
    pub fn any(&self) -> bool {
        self.strings + self.items + self.fields > 0
    }

    /// One sentence saying what was cut, at most [`NOTE_CHARS`] characters.
    pub fn note(&self) -> String {
        let mut parts = Vec::new();
        if self.items > 0 {
            parts.push(format!("{} list entries dropped", self.items));
        }
        if self.strings > 0 {
            parts.push(format!("{} strings shortened", self.strings));
        }
        if self.fields > 0 {
            parts.push(format!("{} fields dropped", self.fields));
        }
        format!("Cut: {}.", parts.join(", "))
    }
}

/// The most characters [`Cuts::note`] can take (three 20-digit counts).
pub const NOTE_CHARS: usize = 140;

/// One measured node: its serialized size, the least it can be cut to, and
/// how many table rows its subtree spans (itself included).
#[derive(Debug, Clone, Copy, Default)]
struct Node {
    size: usize,
    floor: usize,
    span: usize,
}

/// The characters `v` takes serialized as compact JSON, computed without
/// building the text.
pub fn measure(v: &Value) -> usize {
    let mut table = Vec::new();
    walk(v, &mut table).0
}

/// Cuts `v`, when its compact JSON takes more than `limit` characters, so
/// that it takes at most `budget` (the limit less the room the caller's
/// marks need; at least 2), measuring each node once; a value within its
/// limit is left alone. Returns what was cut.
pub fn fit_when_over(v: &mut Value, limit: usize, budget: usize) -> Cuts {
    let mut table = Vec::new();
    let (size, _) = walk(v, &mut table);
    let mut cuts = Cuts::default();
    if size > limit {
        cut(v, &table, 0, budget, &mut cuts);
    }
    cuts
}

/// Measures `v` into `table` (pre-order); returns its size and floor.
fn walk(v: &Value, table: &mut Vec<Node>) -> (usize, usize) {
    let at = table.len();
    table.push(Node::default());
    let (size, floor) = match v {
        Value::Null => (4, 4),
        Value::Bool(true) => (4, 4),
        Value::Bool(false) => (5, 5),
        Value::Number(n) => {
            let n = number_chars(n);
            (n, n)
        }
        Value::String(s) => (2 + escaped_chars(s), 2),
        Value::Array(a) => {
            let mut size = 2 + a.len().saturating_sub(1);
            for x in a {
                size += walk(x, table).0;
            }
            (size, 2)
        }
        Value::Object(o) => {
            let mut size = 2 + o.len().saturating_sub(1);
            for (k, x) in o {
                size += key_chars(k) + walk(x, table).0;
            }
            // An object can lose its last fields, down to `{}`.
            (size, 2)
        }
    };
    table[at] = Node { size, floor, span: table.len() - at };
    (size, floor)
}

/// A field name with its quotes and colon.
fn key_chars(k: &str) -> usize {
    escaped_chars(k) + 3
}

/// The characters of `s` once escaped by serde_json (quotes excluded).
fn escaped_chars(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

fn char_width(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        _ => 1,
    }
}

fn number_chars(n: &serde_json::Number) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, n);
    c.0
}

/// The table rows of the children of the node at `at`.
fn children(table: &[Node], at: usize, n: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(n);
    let mut i = at + 1;
    for _ in 0..n {
        out.push(i);
        i += table[i].span;
    }
    out
}

/// Cuts the node at row `at` (which is `v`) to `budget`.
fn cut(v: &mut Value, table: &[Node], at: usize, budget: usize, cuts: &mut Cuts) {
    if table[at].size <= budget {
        return;
    }
    match v {
        Value::String(s) => {
            cut_string(s, budget);
            cuts.strings += 1;
        }
        Value::Array(a) => {
            let kids = children(table, at, a.len());
            let avail = budget.saturating_sub(2);
            // The longest prefix whose entries each get their share: an
            // entry smaller than MIN_SHARE whole, a larger one MIN_SHARE
            // (or its floor, when that is more).
            let mut keep = 0;
            let mut used = 0;
            for &k in &kids {
                let want = table[k].size.min(table[k].floor.max(MIN_SHARE)) + usize::from(keep > 0);
                if used + want > avail {
                    break;
                }
                used += want;
                keep += 1;
            }
            // Never below one entry where one can be made to fit.
            if keep == 0 && kids.first().is_some_and(|&k| table[k].floor <= avail) {
                keep = 1;
            }
            if keep < a.len() {
                cuts.items += a.len() - keep;
                a.truncate(keep);
            }
            let inner = avail.saturating_sub(keep.saturating_sub(1));
            let shares = water_fill(&kids[..keep], table, inner);
            for ((x, &k), share) in a.iter_mut().zip(&kids).zip(shares) {
                cut(x, table, k, share, cuts);
            }
        }
        Value::Object(o) => {
            let kids = children(table, at, o.len());
            let keys: Vec<usize> = o.keys().map(|k| key_chars(k)).collect();
            let avail = budget.saturating_sub(2);
            // The longest prefix of fields that each get a useful share: a
            // value smaller than FIELD_SHARE whole, a larger one FIELD_SHARE
            // (or its floor, when that is more).
            let mut keep = 0;
            let mut used = 0;
            for (&k, &key) in kids.iter().zip(&keys) {
                let want = key + table[k].size.min(table[k].floor.max(FIELD_SHARE)) + usize::from(keep > 0);
                if used + want > avail {
                    break;
                }
                used += want;
                keep += 1;
            }
            // Never below one field where one can be made to fit.
            if keep == 0 && kids.first().zip(keys.first()).is_some_and(|(&k, &key)| key + table[k].floor <= avail) {
                keep = 1;
            }
            if keep < o.len() {
                cuts.fields += o.len() - keep;
                let mut seen = 0;
                o.retain(|_, _| {
                    seen += 1;
                    seen <= keep
                });
            }
            let fixed: usize = keys[..keep].iter().sum::<usize>() + keep.saturating_sub(1);
            let shares = water_fill(&kids[..keep], table, avail.saturating_sub(fixed));
            for ((x, &k), share) in o.values_mut().zip(&kids).zip(shares) {
                cut(x, table, k, share, cuts);
            }
        }
        // A scalar cannot shrink; callers never give it less than its size.
        _ => {}
    }
}

/// Shares `total` among the nodes `kids`: the largest level `t` such that
/// giving each `clamp(t, floor, size)` fits, so small nodes stay whole and
/// large ones get equal shares. The floors are known to fit.
fn water_fill(kids: &[usize], table: &[Node], total: usize) -> Vec<usize> {
    let given =
        |t: usize| -> usize { kids.iter().map(|&k| t.clamp(table[k].floor, table[k].size.max(table[k].floor))).sum() };
    let max = kids.iter().map(|&k| table[k].size).max().unwrap_or(0);
    let (mut lo, mut hi) = (0usize, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if given(mid) <= total { lo = mid } else { hi = mid - 1 }
    }
    kids.iter().map(|&k| lo.clamp(table[k].floor, table[k].size.max(table[k].floor))).collect()
}

/// Cuts `s` so that its JSON (quotes included) takes at most `budget`
/// characters, ending with [`CUT_MARK`] where there is room for it.
fn cut_string(s: &mut String, budget: usize) {
    let room = budget.saturating_sub(2);
    if room < MARK_CHARS + 1 {
        s.clear();
        if room >= 1 {
            s.push('…');
        }
        return;
    }
    let room = room - MARK_CHARS;
    let mut used = 0;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        let w = char_width(c);
        if used + w > room {
            break;
        }
        used += w;
        end = i + c.len_utf8();
    }
    s.truncate(end);
    s.push_str(CUT_MARK);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn fit(v: &mut Value, budget: usize) -> Cuts {
        fit_when_over(v, budget, budget)
    }

    fn chars(v: &Value) -> usize {
        serde_json::to_string(v).unwrap().chars().count()
    }

    #[test]
    fn measuring_agrees_with_serde() {
        let v = json!({"a": "q\"\\\n\u{1}é😀", "b": [1, -2, 3.5, 1e300, null, true, false], "c": {}, "d": []});
        assert_eq!(measure(&v), chars(&v));
        assert_eq!(CUT_MARK.chars().count(), MARK_CHARS);
    }

    #[test]
    fn small_fields_stay_whole_and_large_ones_share() {
        let mut v = json!({"id": "t_1", "big": "x".repeat(50_000), "list": (0..10_000).collect::<Vec<_>>()});
        let cuts = fit(&mut v, 5_000);
        assert!(chars(&v) <= 5_000, "{}", chars(&v));
        assert_eq!(v["id"], "t_1");
        assert!(v["big"].as_str().unwrap().ends_with(CUT_MARK));
        assert!(!v["list"].as_array().unwrap().is_empty());
        assert_eq!((cuts.strings, cuts.fields), (1, 0));
        assert_eq!(cuts.items, 10_000 - v["list"].as_array().unwrap().len());
    }

    #[test]
    fn an_array_keeps_small_entries_whole_and_at_least_one_cut_down() {
        let mut v = json!([{"detail": "y".repeat(100_000)}, {"detail": "z"}]);
        let cuts = fit(&mut v, 300);
        assert!(chars(&v) <= 300);
        assert_eq!(v[1], json!({"detail": "z"}));
        assert_eq!(cuts, Cuts { strings: 1, items: 0, fields: 0 });
        let mut v = json!([{"detail": "y".repeat(100_000)}, {"detail": "y".repeat(100_000)}]);
        let cuts = fit(&mut v, 200);
        assert!(chars(&v) <= 200);
        assert!(v[0]["detail"].as_str().unwrap().ends_with(CUT_MARK));
        assert_eq!(cuts, Cuts { strings: 1, items: 1, fields: 0 });
    }

    #[test]
    fn an_object_keeps_fewer_fields_rather_than_empty_ones() {
        let mut v: Value = Value::Object((0..30).map(|i| (format!("f{i:02}"), json!("v".repeat(200)))).collect());
        let cuts = fit(&mut v, 1_000);
        assert!(chars(&v) <= 1_000);
        let o = v.as_object().unwrap();
        assert!(o.len() < 30 && o.contains_key("f00") && cuts.fields == 30 - o.len());
        assert!(o.values().all(|x| x.as_str().unwrap().chars().count() >= FIELD_SHARE - 2));
    }

    #[test]
    fn too_many_fields_lose_the_last_ones() {
        let mut v: Value = Value::Object((0..1000).map(|i| (format!("k{i:04}"), json!(i))).collect());
        let cuts = fit(&mut v, 500);
        assert!(chars(&v) <= 500);
        assert!(cuts.fields > 0 && v.get("k0000").is_some());
    }
}

//! When a quota lifts, read from the text a CLI prints with its rate-limit
//! error (issue 17, item 3: quota parking): `Retry-After: 30`, "try again in
//! 4 days 2 hours", "Resets in 101h33m31s", "resets at 2026-12-01T17:00:00Z",
//! claude's "usage limit reached|1717084800".
//!
//! Pure: an absolute time becomes the blocker's `resets_at_ms` in the
//! parser; a relative one is resolved by the engine against the moment it
//! read the line (`engine/parking.rs`), so parsers never read the clock. A
//! bare time of day ("resets 3pm") names no time zone and is not read.

/// When a limit lifts, as the text says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetHint {
    /// At this time, milliseconds since the epoch.
    At(i64),
    /// This many milliseconds after the line was printed.
    After(i64),
}

/// The reset a rate-limit message names, if it names one.
pub fn reset_hint(text: &str) -> Option<ResetHint> {
    let t = super::classify::strip_ansi(text).to_lowercase();
    if let Some(secs) = retry_after_header(&t) {
        return Some(ResetHint::After(secs * 1000));
    }
    for lead in ["try again in", "retry in", "resets in", "reset in", "retry after", "available again in"] {
        if let Some(i) = t.find(lead)
            && let Some(ms) = duration_ms(&t[i + lead.len()..])
        {
            return Some(ResetHint::After(ms));
        }
    }
    for lead in ["try again at", "resets at", "reset at", "resets on", "available again at", "retry at"] {
        if let Some(i) = t.find(lead)
            && let Some(ms) = iso_ms(t[i + lead.len()..].trim_start())
        {
            return Some(ResetHint::At(ms));
        }
    }
    // claude: "Claude AI usage limit reached|1717084800" (epoch seconds).
    if let Some(i) = t.find("limit reached|") {
        let digits: String = t[i + "limit reached|".len()..].chars().take_while(char::is_ascii_digit).collect();
        if (9..=11).contains(&digits.len()) {
            return digits.parse::<i64>().ok().map(|s| ResetHint::At(s * 1000));
        }
    }
    None
}

/// `retry-after: N` or a JSON header map's `"retry-after":"N"`, in seconds.
fn retry_after_header(t: &str) -> Option<i64> {
    let i = t.find("retry-after")?;
    let rest = t[i + "retry-after".len()..].trim_start_matches(|c: char| c == '"' || c == ':' || c.is_whitespace());
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    digits.parse().ok()
}

/// A duration such as "30 seconds", "4 days 2 hours 5 minutes", "101h33m31s",
/// "23.45s", "1 hour and 5 minutes"; `None` when the text starts with none.
fn duration_ms(text: &str) -> Option<i64> {
    let mut rest = text.trim_start();
    let mut total = 0f64;
    let mut parts = 0;
    loop {
        rest = rest.trim_start();
        if parts > 0
            && let Some(r) = rest.strip_prefix("and ").or_else(|| rest.strip_prefix(", "))
        {
            rest = r.trim_start();
        }
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            break;
        }
        let Ok(n) = rest[..num_len].parse::<f64>() else { break };
        let after = rest[num_len..].trim_start();
        let unit_len = after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
        let unit = &after[..unit_len];
        let scale = match unit {
            "ms" | "millisecond" | "milliseconds" => 1.0,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000.0,
            "d" | "day" | "days" => 86_400_000.0,
            _ => break,
        };
        total += n * scale;
        parts += 1;
        rest = &after[unit_len..];
    }
    (parts > 0 && total.is_finite() && total < 1e15).then_some(total.round() as i64)
}

/// `2026-12-01T17:00:00Z` or `2026-12-01 17:00:00 UTC` (UTC only, seconds
/// optional, a fraction ignored), as milliseconds since the epoch.
fn iso_ms(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    let num = |s: &str| s.parse::<i64>().ok();
    if b.len() < 16 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b't' || b[10] == b' ') || b[13] != b':' {
        return None;
    }
    let (y, mo, d) = (num(&t[0..4])?, num(&t[5..7])?, num(&t[8..10])?);
    let (h, mi) = (num(&t[11..13])?, num(&t[14..16])?);
    let mut rest = &t[16..];
    let mut s = 0;
    if let Some(r) = rest.strip_prefix(':')
        && r.len() >= 2
    {
        s = num(&r[..2])?;
        rest = &r[2..];
    }
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let rest = rest.trim_start();
    // A local time with no zone, or another offset, is not guessed at.
    if !(rest.starts_with('z') || rest.starts_with("utc") || rest.starts_with("+00:00") || rest.starts_with("gmt")) {
        return None;
    }
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    Some(((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60_000 + s * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_resets_from_real_cli_lines() {
        // antigravity (captures-caesar/antigravity.jsonl).
        let agy =
            "Individual quota reached. Please upgrade your subscription to increase your limits. Resets in 101h33m31s.";
        assert_eq!(reset_hint(agy), Some(ResetHint::After((101 * 3600 + 33 * 60 + 31) * 1000)));
        // opencode's error with the provider's headers (captures-real/opencode-401_…).
        let oc = r#"{"responseHeaders":{"content-length":"74","content-type":"application/json","retry-after":"0"},"responseBody":"slow down"}"#;
        assert_eq!(reset_hint(oc), Some(ResetHint::After(0)));
        assert_eq!(reset_hint("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30"), Some(ResetHint::After(30_000)));
        let codex = "You've hit your usage limit. Upgrade to Pro, or try again in 4 days 2 hours 5 minutes.";
        assert_eq!(reset_hint(codex), Some(ResetHint::After(((4 * 24 + 2) * 60 + 5) * 60_000)));
        assert_eq!(reset_hint("Quota exceeded. Please retry in 23.45s."), Some(ResetHint::After(23_450)));
        assert_eq!(reset_hint("rate limited: try again in 1 hour and 5 minutes"), Some(ResetHint::After(3_900_000)));
    }

    #[test]
    fn absolute_resets_in_utc_and_epoch_seconds() {
        assert_eq!(
            reset_hint("usage limit: resets at 2026-12-01T17:00:00Z"),
            Some(ResetHint::At(1_796_144_400_000)),
            "2026-12-01T17:00:00Z"
        );
        assert_eq!(reset_hint("try again at 2026-12-01 17:00 UTC"), Some(ResetHint::At(1_796_144_400_000)));
        assert_eq!(reset_hint("Claude AI usage limit reached|1717084800"), Some(ResetHint::At(1_717_084_800_000)));
    }

    #[test]
    fn no_reset_where_none_is_said_or_the_zone_is_unknown() {
        for t in [
            "exceeded retry limit, last status: 429 Too Many Requests",
            "5-hour limit reached ∙ resets 3pm",
            "try again at 2026-12-01 17:00",
            "API Error (429) · Retrying in 5 seconds…",
            "try again in a moment",
            "Credit balance is too low",
        ] {
            assert_eq!(reset_hint(t), None, "{t}");
        }
    }
}

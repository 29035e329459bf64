//! Durations as people write them: `90s`, `10m`, `1h30m`, `1500ms`, or a
//! bare number of seconds.

/// Parses a duration such as `90s`, `10m`, `1h30m`, `1500ms` or a bare number
/// of seconds. Returns milliseconds.
pub fn parse_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration: write it like 90s, 10m or 1h".to_owned());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(secs.saturating_mul(1000));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let mut unit = c.to_string();
        while let Some(&n) = chars.peek() {
            if n.is_ascii_alphabetic() {
                unit.push(n);
                chars.next();
            } else {
                break;
            }
        }
        let n: u64 =
            digits.parse().map_err(|_| format!("bad duration `{text}`: a number must come before `{unit}`"))?;
        digits.clear();
        let factor = match unit.as_str() {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => {
                return Err(format!("bad duration `{text}`: unknown unit `{unit}` (use ms, s, m or h)"));
            }
        };
        total = total.saturating_add(n.saturating_mul(factor));
    }
    if !digits.is_empty() {
        return Err(format!("bad duration `{text}`: `{digits}` has no unit (use ms, s, m or h)"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        assert_eq!(parse_ms("10m"), Ok(600_000));
        assert_eq!(parse_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_ms("1500ms"), Ok(1500));
        assert_eq!(parse_ms("45"), Ok(45_000));
        assert!(parse_ms("10x").unwrap_err().contains("unknown unit"));
        assert!(parse_ms("").is_err());
        assert!(parse_ms("5m3").is_err());
    }
}

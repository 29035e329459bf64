//! Text fallbacks for blocker recognition, shared by every provider.
//!
//! Structured signals (an `error` kind, a status code, a denial list) always come first; these
//! patterns only read CLI-originated error text and stderr. A transient failure (5xx, overloaded,
//! "high demand", a dropped connection) is deliberately not a blocker: retrying can fix it.

use crate::oacp::BlockerKind;

/// Phrases that mean the CLI has no usable credentials.
const AUTH: &[&str] = &[
    "not logged in",
    "please run /login",
    "no authentication information found",
    "please set an auth method",
    "invalid api key",
    "incorrect api key",
    "invalid x-api-key",
    "api key not valid",
    "invalid_api_key",
    "api key required",
    "authentication failed",
    "authentication_failed",
    "failed to authenticate",
    "unauthenticated",
    "missing environment variable",
    "run `codex login`",
    "oauth token has expired",
    "token has expired",
];

/// Phrases that mean a quota, rate or spending limit was hit.
const RATE: &[&str] = &[
    "too many requests",
    "rate limit",
    "rate-limit",
    "rate_limit",
    "ratelimit",
    "usage limit",
    "quota exceeded",
    "quota reached",
    "resource_exhausted",
    "insufficient_quota",
    "credit balance",
    "billing_error",
    "payment required",
];

/// Phrases a CLI uses when it refused a tool call for lack of permission. Safe to match in tool
/// error text because a tool's own output does not say these.
const DENIAL: &[&str] = &[
    "haven't granted it yet",
    "while in plan mode",
    "requires approval",
    "approval required",
    "approval policy is never",
    "requires user confirmation",
    "rejected permission",
    "user rejected",
    "permission denied because no interactive",
    "prevents you from using this specific tool",
    "auto-rejecting",
    "not allowlisted",
    "isn't allowlisted",
    "not in the allowlist",
];

/// Classifies CLI error text or a stderr line. Matches both `'` and `’` apostrophes.
pub fn classify_text(text: &str) -> Option<BlockerKind> {
    let t = normalize(text);
    if t.is_empty() {
        return None;
    }
    if AUTH.iter().any(|p| t.contains(p)) || has_status(&t, "401") {
        return Some(BlockerKind::Auth);
    }
    let quota = t.contains("quota") && (t.contains("exceeded") || t.contains("exhausted"));
    if RATE.iter().any(|p| t.contains(p)) || quota || has_status(&t, "429") {
        return Some(BlockerKind::RateLimit);
    }
    if DENIAL.iter().any(|p| t.contains(p)) || t.contains("permission denied") {
        return Some(BlockerKind::Permission);
    }
    None
}

/// Whether tool error text is a permission refusal by the CLI (not, say, a shell's EACCES).
pub(super) fn is_denial(text: &str) -> bool {
    let t = normalize(text);
    DENIAL.iter().any(|p| t.contains(p))
}

/// Lowercase, with typographic apostrophes folded to ASCII and ANSI escapes removed.
fn normalize(text: &str) -> String {
    strip_ansi(text)
        .chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '\u{02BC}' => '\'',
            c => c,
        })
        .collect::<String>()
        .to_lowercase()
}

/// `code` as a standalone number in text that talks about a status or an error.
fn has_status(t: &str, code: &str) -> bool {
    const CONTEXT: &[&str] = &["status", "error", "http", "api", "code", "unauthorized", "rejected", "failed"];
    let bytes = t.as_bytes();
    let standalone = t.match_indices(code).any(|(i, _)| {
        let before = i.checked_sub(1).and_then(|j| bytes.get(j));
        let after = bytes.get(i + code.len());
        let ok = |b: Option<&u8>| b.is_none_or(|c| !c.is_ascii_alphanumeric() && *c != b'.');
        ok(before) && ok(after)
    });
    standalone && CONTEXT.iter().any(|c| t.contains(c))
}

/// Removes ANSI escape sequences (CSI and OSC), as printed by CLIs on a colour terminal.
pub(super) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_phrases_and_401() {
        for t in [
            "Not logged in · Please run /login",
            "Failed to authenticate. API Error: 401 fake authentication_error",
            "unexpected status 401 Unauthorized: Incorrect API key provided, url: http://x",
            "Missing environment variable: `FAKE_KEY`.",
            "Error: No authentication information found.",
            "Please set an Auth method in your settings",
            r#"{"error":{"code":401,"message":"scripted","status":"UNAUTHENTICATED"}}"#,
        ] {
            assert_eq!(classify_text(t), Some(BlockerKind::Auth), "{t}");
        }
    }

    #[test]
    fn rate_phrases_and_429_with_both_apostrophes() {
        for t in [
            "exceeded retry limit, last status: 429 Too Many Requests",
            "API Error: Request rejected (429) · fake rate_limit_error",
            "You’ve hit your usage limit. Upgrade to Pro",
            "You've hit your usage limit.",
            "Quota exceeded. Check your plan and billing details.",
            "You have exhausted your daily quota on this model.",
            "Credit balance is too low",
            "Individual quota reached. Please upgrade your subscription.",
            "You have exceeded your monthly quota",
        ] {
            assert_eq!(classify_text(t), Some(BlockerKind::RateLimit), "{t}");
        }
    }

    #[test]
    fn permission_phrases_with_both_apostrophes() {
        for t in [
            "Claude requested permissions to write to /x, but you haven't granted it yet.",
            "Claude requested permissions to write to /x, but you haven’t granted it yet.",
            "MCP tool call requires approval, but approval policy is never",
            "\u{1b}[93m\u{1b}[1m! \u{1b}[0mpermission requested: edit (a.txt); auto-rejecting",
            "Error: The Bash tool tried to run a command that isn’t allowlisted.",
            "Permission denied",
        ] {
            assert_eq!(classify_text(t), Some(BlockerKind::Permission), "{t}");
        }
    }

    #[test]
    fn transient_failures_and_noise_are_not_blockers() {
        for t in [
            "We’re currently experiencing high demand, which may cause temporary errors.",
            "API Error: 529 Overloaded. This is a server-side issue",
            "Reconnecting... 2/5 (unexpected status 200 OK: Unknown error, url: ws://x)",
            "Attempt 1 failed. Retrying with backoff... Error: exception TypeError: fetch failed",
            "Cannot connect to API: Unable to connect. Is the computer able to access the url?",
            "YOLO mode is enabled. All tool calls will be automatically approved.",
            "wrote 4010 bytes in 429.5 ms",
            "processed line 401",
            "",
        ] {
            assert_eq!(classify_text(t), None, "{t}");
        }
    }

    #[test]
    fn shell_eacces_is_not_a_cli_denial() {
        assert!(!is_denial("bash: /etc/shadow: Permission denied"));
        assert!(is_denial("The user rejected permission to use this specific tool call."));
    }
}

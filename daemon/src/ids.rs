//! Identifiers and secrets.

/// 64 bits from the operating system's random source (`getrandom(2)` on
/// Linux). Ids and secrets must not be guessable, so there is no
/// weaker fallback: if the OS refuses randomness, which it does not once
/// booted, the process stops rather than hand out a predictable secret.
fn random_u64() -> u64 {
    match getrandom::u64() {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(
                "the operating system's random source failed ({e}); caesar stops rather than make guessable ids"
            );
            std::process::abort()
        }
    }
}

/// A new task id, `t_` and 12 hex digits.
pub fn task_id() -> String {
    format!("t_{:012x}", random_u64() & 0xffff_ffff_ffff)
}

/// A new question id, `q_` and 8 hex digits.
pub fn question_id() -> String {
    format!("q_{:08x}", random_u64() & 0xffff_ffff)
}

/// A 128-bit secret in hex: HTTP tokens, dashboard sessions, scratch names.
pub fn secret() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// Compares two secrets in time that depends only on their length, so a
/// caller cannot learn a secret byte by byte from how fast it is refused.
pub fn secrets_match(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `id` has the shape of a task id; anything else cannot name a task
/// and never reaches a path or a query.
pub fn is_task_id(id: &str) -> bool {
    id.len() == 14 && id.starts_with("t_") && id[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_well_formed_and_distinct() {
        let a = task_id();
        let b = task_id();
        assert!(is_task_id(&a), "{a}");
        assert_ne!(a, b);
        assert!(!is_task_id("t_../../etc"));
        assert_eq!(secret().len(), 32);
        assert!(secrets_match("abc", "abc"));
        assert!(!secrets_match("abc", "abd") && !secrets_match("abc", "ab"));
    }

    #[test]
    fn secrets_do_not_repeat_and_use_every_bit() {
        let secrets: std::collections::BTreeSet<String> = (0..1000).map(|_| secret()).collect();
        assert_eq!(secrets.len(), 1000);
        // Each of the 128 bits is set in some secrets and clear in others.
        let values: Vec<u128> = secrets.iter().map(|s| u128::from_str_radix(s, 16).unwrap()).collect();
        let (any, all) = values.iter().fold((0u128, u128::MAX), |(a, b), v| (a | v, b & v));
        assert_eq!((any, all), (u128::MAX, 0));
    }
}

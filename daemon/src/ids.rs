//! Identifiers and secrets.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 64 unpredictable bits. `RandomState` is seeded from the OS's randomness
/// once per process; mixing in the time and a counter makes every call differ.
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_i64(crate::clock::now_ms());
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u32(t.subsec_nanos());
    }
    h.finish()
}

/// A new task id, `t_` and 12 hex digits.
pub fn task_id() -> String {
    format!("t_{:012x}", random_u64() & 0xffff_ffff_ffff)
}

/// A new question id, `q_` and 8 hex digits.
pub fn question_id() -> String {
    format!("q_{:08x}", random_u64() & 0xffff_ffff)
}

/// A 128-bit secret in hex, for binding the return channel to one task.
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
}

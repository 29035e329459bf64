//! Store migration 8 (issue 19: no channel secret in `caesar.db`), for
//! BENCHMARKS.md: how long the daemon's first open of a schema-7 store
//! takes, the column dropped and the file rebuilt so that no old secret
//! stays on disk.
//!
//! `caesar-bench-migrate [--tasks N] [--events E]`: a store of N tasks
//! (default 10,000), each with E events (default 20), a 1 KB objective and
//! a 2 KB launch record, and its secret in clear, as a schema-7 build left
//! it; then the time of `Store::open`, the file's size before and after,
//! and a check that no secret is left in the file or its log.

use std::path::Path;
use std::time::Instant;

use rusqlite::{Connection, params};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A store as schema 7 left it: today's tables, plus the clear secret, at
/// version 7. Returns the secrets.
fn store_at_7(path: &Path, tasks: usize, events: usize) -> Res<Vec<String>> {
    drop(caesard::store::Store::open(path)?);
    let mut conn = Connection::open(path)?;
    conn.execute_batch("ALTER TABLE tasks ADD COLUMN secret TEXT NOT NULL DEFAULT ''")?;
    let objective = "o".repeat(1024);
    // Fillers that are not hex digits, so that finding a secret is cheap.
    let launch = format!("{{\"argv\":[\"{}\"]}}", "l".repeat(2048));
    let mut secrets = Vec::with_capacity(tasks);
    let tx = conn.transaction()?;
    for i in 0..tasks {
        let secret = format!("{:032x}", (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) | 1 << 127);
        let id = format!("t_{i:012x}");
        tx.execute(
            "INSERT INTO tasks (id, created_ms, agent, mode, isolation, network, objective, workspace, task_dir, \
             timeout_ms, status, secret, launch_json) VALUES (?1, ?2, 'fake', 'read-only', 'inplace', 0, ?3, '/w', \
             '/s', 1000, 'succeeded', ?4, ?5)",
            params![id, i as i64, objective, secret, launch],
        )?;
        for seq in 1..=events {
            tx.execute(
                "INSERT INTO events (task_id, seq, line) VALUES (?1, ?2, ?3)",
                params![
                    id,
                    seq as i64,
                    format!("{{\"type\":\"message\",\"seq\":{seq},\"text\":\"{}\"}}", "x".repeat(200))
                ],
            )?;
        }
        secrets.push(secret);
    }
    tx.commit()?;
    conn.pragma_update(None, "user_version", 7)?;
    Ok(secrets)
}

/// How many of `secrets` (32 hex digits each) occur in `bytes`: every run
/// of hex digits is looked up, one window at a time.
fn secrets_in(bytes: &[u8], secrets: &[String]) -> usize {
    let wanted: std::collections::HashSet<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
    let mut found = std::collections::HashSet::new();
    for run in bytes.split(|b| !b.is_ascii_hexdigit()).filter(|r| r.len() >= 32) {
        found.extend(run.windows(32).filter(|w| wanted.contains(w)));
    }
    found.len()
}

fn main() -> Res<()> {
    let (tasks, events) = (arg("--tasks", 10_000), arg("--events", 20));
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("caesar.db");
    let secrets = store_at_7(&path, tasks, events)?;
    let before = std::fs::metadata(&path)?.len();
    let mut old = std::fs::read(&path)?;
    old.extend(std::fs::read(path.with_extension("db-wal")).unwrap_or_default());
    let present = secrets_in(&old, &secrets);
    let started = Instant::now();
    let store = caesard::store::Store::open(&path)?;
    let took = started.elapsed();
    drop(store);
    let after = std::fs::metadata(&path)?.len();
    let mut bytes = std::fs::read(&path)?;
    bytes.extend(std::fs::read(path.with_extension("db-wal")).unwrap_or_default());
    let left = secrets_in(&bytes, &secrets);
    println!(
        "migration 7 -> 8 of {tasks} tasks ({events} events each): {:.0} ms; file {:.1} MB before, {:.1} MB after; secrets on disk: {present} before, {left} after",
        took.as_secs_f64() * 1000.0,
        before as f64 / 1e6,
        after as f64 / 1e6
    );
    if left > 0 {
        return Err(format!("{left} secrets were left on disk").into());
    }
    Ok(())
}

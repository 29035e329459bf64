//! Migration 7 -> 8 (issue 19): no channel secret in the store.
//!
//! Up to schema 7 each task row held its return channel's secret in clear,
//! and `caesar.db` is readable by every agent of the user (reads are not
//! confined), so any agent could speak for any task from outside every
//! task's tree. The channel now answers only from inside its own task's
//! process tree, so no secret is generated, and migration 8 drops the
//! column, then rebuilds the file (`VACUUM`) so that no page, free or in
//! use, keeps a copy of an old value (inserts and page splits leave stale
//! bytes behind that a column drop does not touch), and empties the
//! write-ahead log, all before the daemon serves. Each step is safe to
//! repeat: the version says 8 only once the file is clean, and a restart
//! in between finds the column gone and goes on with the rebuild.

use rusqlite::Connection;

use crate::error::Result;

/// The schema version that first holds no secret.
pub(super) const VERSION: i64 = 8;

/// Migration 7 -> 8; `conn` is at version 7.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    let has_secret: bool =
        conn.query_row("SELECT count(*) FROM pragma_table_info('tasks') WHERE name = 'secret'", [], |r| r.get(0))?;
    if has_secret {
        let tx = conn.transaction()?;
        tx.execute_batch("ALTER TABLE tasks DROP COLUMN secret;")?;
        tx.commit()?;
    }
    // Outside a transaction, as SQLite requires; atomic on its own.
    conn.execute_batch("VACUUM;")?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    conn.pragma_update(None, "user_version", VERSION)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, params};

    use super::super::{MIGRATIONS, Store};

    /// A store at schema 7, as a build before this one left it: `n` tasks,
    /// each with its secret in clear; returns the secrets.
    fn store_at_7(path: &std::path::Path, n: usize) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        for (i, sql) in MIGRATIONS[..7].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", (i + 1) as i64).unwrap();
        }
        let mut secrets = Vec::new();
        for i in 0..n {
            let secret = crate::ids::secret();
            conn.execute(
                "INSERT INTO tasks (id, created_ms, agent, mode, isolation, network, objective, workspace, task_dir, \
                 timeout_ms, status, secret, launch_json) VALUES (?1, ?2, 'fake', 'read-only', 'inplace', 0, \
                 'an objective', '/w', '/s', 1000, 'succeeded', ?3, '{}')",
                params![format!("t_{i:012x}"), i as i64, secret],
            )
            .unwrap();
            secrets.push(secret);
        }
        secrets
    }

    /// Every byte of the store on disk: the database and its write-ahead log.
    fn bytes_on_disk(path: &std::path::Path) -> Vec<u8> {
        let mut all = std::fs::read(path).unwrap();
        all.extend(std::fs::read(path.with_extension("db-wal")).unwrap_or_default());
        all
    }

    #[test]
    fn a_store_at_7_migrates_and_keeps_no_secret_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("caesar.db");
        let secrets = store_at_7(&path, 300);
        let before = bytes_on_disk(&path);
        let found = |bytes: &[u8], s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
        assert!(secrets.iter().all(|s| found(&before, s)), "the old store holds its secrets in clear");

        let store = Store::open(&path).unwrap();
        let version: i64 = store.blocking(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0))).unwrap();
        assert_eq!(version, super::VERSION);
        // The tasks are all there, read as before.
        let t = store.task("t_000000000007").unwrap().unwrap();
        assert_eq!((t.agent.as_str(), t.objective.as_str()), ("fake", "an objective"));
        assert_eq!(store.tasks(&[], 1000).unwrap().len(), 300);
        store.integrity_check().unwrap();
        drop(store);
        // No old secret survives anywhere in the file or its log.
        let after = bytes_on_disk(&path);
        let left: Vec<&String> = secrets.iter().filter(|s| found(&after, s)).collect();
        assert!(left.is_empty(), "{} of 300 secrets still on disk", left.len());
        // And opening it again is a no-op.
        drop(Store::open(&path).unwrap());
    }
}

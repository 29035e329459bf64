//! The store's quota ledger (issue 32, item 3): which agent (and account) is near or out of its
//! quota, until when, and which signal said so (`crate::quota` says how a signal becomes a row).
//!
//! Made by [`ensure`] on every open (`CREATE … IF NOT EXISTS`), as `store/steers.rs` explains. A
//! row whose reset has passed is deleted when the ledger is read: the ledger forgets what has
//! reset, across restarts too.

use rusqlite::{Connection, params};

use super::Store;
use crate::error::Result;
use crate::quota::{Entry, Level};

/// Makes the table if it is not there yet.
pub(super) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS quota_ledger (
            agent TEXT NOT NULL,
            account TEXT NOT NULL DEFAULT '',
            level TEXT NOT NULL,
            resets_at_ms INTEGER NOT NULL,
            source TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '',
            observed_ms INTEGER NOT NULL,
            PRIMARY KEY (agent, account)
        );",
    )
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    let level: String = r.get(2)?;
    Ok(Entry {
        agent: r.get(0)?,
        account: r.get(1)?,
        level: Level::parse(&level),
        resets_at_ms: r.get(3)?,
        source: r.get(4)?,
        detail: r.get(5)?,
        observed_ms: r.get(6)?,
    })
}

impl Store {
    /// Records (or replaces) the agent's and account's entry.
    pub fn record_quota(&self, e: &Entry) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "INSERT INTO quota_ledger (agent, account, level, resets_at_ms, source, detail, observed_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (agent, account) DO UPDATE SET level = ?3, resets_at_ms = ?4, source = ?5,
                     detail = ?6, observed_ms = ?7",
                params![e.agent, e.account, e.level.as_str(), e.resets_at_ms, e.source, e.detail, e.observed_ms],
            )?;
            Ok(())
        })
    }

    /// Forgets the agent's and account's entry (its provider said it has headroom again).
    pub fn forget_quota(&self, agent: &str, account: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("DELETE FROM quota_ledger WHERE agent = ?1 AND account = ?2", params![agent, account])?;
            Ok(())
        })
    }

    /// The entries still in force at `now_ms`; the ones that have reset are deleted.
    pub fn quota_ledger(&self, now_ms: i64) -> Result<Vec<Entry>> {
        self.blocking(|conn| {
            conn.execute("DELETE FROM quota_ledger WHERE resets_at_ms <= ?1", params![now_ms])?;
            let mut stmt = conn.prepare_cached(
                "SELECT agent, account, level, resets_at_ms, source, detail, observed_ms
                 FROM quota_ledger ORDER BY agent, account",
            )?;
            let rows = stmt.query_map([], row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{Bounded, QuotaSignal, bound};

    const NOW: i64 = 1_780_000_000_000;

    fn entry(agent: &str, resets_at_ms: Option<i64>) -> Entry {
        let s = QuotaSignal {
            level: Level::Near,
            resets_at_ms,
            source: "rate_limit_event".into(),
            account: None,
            detail: "five_hour".into(),
        };
        match bound(agent, agent, &s, NOW) {
            Bounded::Record { entry, .. } => entry,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_ledger_survives_a_reopen_and_forgets_what_has_reset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("caesar.db");
        {
            let store = Store::open(&path).unwrap();
            store.record_quota(&entry("alpha", Some(NOW + 60_000))).unwrap();
            store.record_quota(&entry("beta", Some(NOW + 3_600_000))).unwrap();
            // Years ahead: bounded before it is stored.
            store.record_quota(&entry("gamma", Some(NOW + 10 * 365 * 86_400_000))).unwrap();
        }
        let store = Store::open(&path).unwrap();
        let all = store.quota_ledger(NOW).unwrap();
        assert_eq!(all.iter().map(|e| e.agent.as_str()).collect::<Vec<_>>(), ["alpha", "beta", "gamma"]);
        assert_eq!(all[2].resets_at_ms, NOW + crate::quota::MAX_HORIZON_MS);
        assert_eq!(all[0], entry("alpha", Some(NOW + 60_000)), "read back as written");
        // claude's reset passes: it is forgotten, and stays forgotten after another reopen.
        assert_eq!(store.quota_ledger(NOW + 60_000).unwrap().len(), 2);
        drop(store);
        let store = Store::open(&path).unwrap();
        let left = store.quota_ledger(NOW).unwrap();
        assert_eq!(left.iter().map(|e| e.agent.as_str()).collect::<Vec<_>>(), ["beta", "gamma"]);
        // A newer signal replaces the row; forgetting removes it.
        store.record_quota(&entry("beta", Some(NOW + 120_000))).unwrap();
        assert_eq!(store.quota_ledger(NOW).unwrap()[0].resets_at_ms, NOW + 120_000);
        store.forget_quota("beta", "").unwrap();
        assert_eq!(store.quota_ledger(NOW).unwrap().len(), 1);
    }
}

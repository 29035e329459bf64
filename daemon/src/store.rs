//! The durable store: one SQLite file (WAL, `synchronous=FULL`) holding
//! tasks, events, questions and reports.
//!
//! Every write is one transaction that commits before the engine acknowledges
//! the change, so a daemon killed at any instant restarts with everything it
//! ever confirmed. The schema carries its version in `PRAGMA user_version`;
//! [`Store::open`] migrates older files forward and refuses newer ones.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Error, Result};
use crate::launch::LaunchPlan;
use crate::oacp::{BlockerKind, EventRecord, Isolation, Mode};
use crate::runner::RunHandle;
use crate::workshop::Prepared;

mod by_status;
mod lifecycle;
mod listing;
pub use lifecycle::AttemptRow;
pub use listing::ListRow;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 8;

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the first schema.
    "CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        created_ms INTEGER NOT NULL,
        agent TEXT NOT NULL,
        role TEXT,
        mode TEXT NOT NULL,
        isolation TEXT NOT NULL,
        network INTEGER NOT NULL,
        model TEXT,
        objective TEXT NOT NULL,
        workspace TEXT NOT NULL,
        task_dir TEXT NOT NULL,
        timeout_ms INTEGER NOT NULL,
        depth INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL,
        started_ms INTEGER,
        finished_ms INTEGER,
        exit_code INTEGER,
        signal INTEGER,
        error TEXT,
        supervisor_pid INTEGER,
        supervisor_start INTEGER,
        boot_id TEXT,
        log_offset INTEGER NOT NULL DEFAULT 0,
        session_id TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        secret TEXT NOT NULL,
        event_count INTEGER NOT NULL DEFAULT 0,
        last_event TEXT,
        blocker TEXT,
        launch_json TEXT NOT NULL
    );
    CREATE INDEX tasks_by_status ON tasks(status, created_ms);
    CREATE INDEX tasks_by_created ON tasks(created_ms);
    CREATE TABLE events (
        task_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (task_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE reports (
        task_id TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        status TEXT NOT NULL,
        body TEXT NOT NULL,
        created_ms INTEGER NOT NULL
    );
    CREATE TABLE questions (
        task_id TEXT NOT NULL,
        question_id TEXT NOT NULL,
        question TEXT NOT NULL,
        options TEXT NOT NULL,
        asked_ms INTEGER NOT NULL,
        answer TEXT,
        answered_ms INTEGER,
        delivered INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (task_id, question_id)
    );",
    // 1 -> 2: the git workshop of each task, and what became of its changes.
    "ALTER TABLE tasks ADD COLUMN workshop TEXT;
    ALTER TABLE tasks ADD COLUMN changes_state TEXT;",
    // 2 -> 3: the runner's handle of a started task (JSON of
    // [`crate::runner::RunHandle`]); older rows keep theirs in supervisor_*.
    "ALTER TABLE tasks ADD COLUMN run_handle TEXT;",
    // 3 -> 4: budget stops and fallback attempts (issue 17), in `lifecycle`.
    lifecycle::MIGRATION,
    // 4 -> 5 (issue 17, fan-out): verification outcomes and groups (`store/fanout.rs`).
    fanout::MIGRATION,
    // 5 -> 6 (issue 17): quota parks and group budgets (`store/parking.rs`).
    parking::MIGRATION,
    // 6 -> 7 (issue 18): MCP task handle ttls (`store/mcp_tasks.rs`).
    mcp_tasks::MIGRATION,
    // 7 -> 8 (issue 19): the channel secrets dropped, in Rust
    // (`store/secrets.rs`, [`secrets::migrate`]).
];

mod secrets;

mod mcp_tasks;
pub use mcp_tasks::PageCursor;

mod parking;
pub use parking::ParkRow;

mod fanout;
pub use fanout::GroupRecord;

mod question_batch;

mod steers;
// Issue 31: forks' lineage.
mod forks;
pub use steers::{SteerEnd, SteerRow, SteerState};
// Issue 31: which task continues which in the same worktree.
mod continuations;
// Issue 30, item 7: what ties the dashboard's cards together.
mod board;
pub use board::{BoardLink, LinkKind};
// Issue 32: the review loop's rounds and findings.
mod reviews;
pub use reviews::{FindingRow, ReviewLoop, ReviewMember, ReviewStep};

mod deps;
// Issue 33: the columns a queue turn decides on.
mod queue_rows;
pub use queue_rows::QueueRow;
mod quota;
mod quota_usage;
pub use deps::{StackRow, StackState};

/// The process outcome of a task, exactly seed 000's six statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl TaskStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::TimedOut => "timed_out",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        Some(match s {
            "pending" => TaskStatus::Pending,
            "running" => TaskStatus::Running,
            "succeeded" => TaskStatus::Succeeded,
            "failed" => TaskStatus::Failed,
            "cancelled" => TaskStatus::Cancelled,
            "timed_out" => TaskStatus::TimedOut,
            _ => return None,
        })
    }

    /// Whether the task can change no more.
    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskStatus::Pending | TaskStatus::Running)
    }
}

/// One task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub id: String,
    pub created_ms: i64,
    pub agent: String,
    pub role: Option<String>,
    pub mode: Mode,
    pub isolation: Isolation,
    pub network: bool,
    pub model: Option<String>,
    pub objective: String,
    pub workspace: String,
    pub task_dir: String,
    pub timeout_ms: u64,
    pub depth: u32,
    pub status: TaskStatus,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub exit_code: Option<i64>,
    pub signal: Option<i32>,
    pub error: Option<String>,
    /// Where the task's process runs, once started: the runner's opaque handle.
    pub run: Option<RunHandle>,
    /// How far into raw.log the events are parsed.
    pub log_offset: u64,
    pub session_id: Option<String>,
    pub cancel_requested: bool,
    pub event_count: u64,
    pub last_event: Option<String>,
    pub blocker: Option<BlockerKind>,
    /// The launch plan: the resolved command line, driver and workshop plan,
    /// decoded once here.
    pub launch: LaunchPlan,
    /// Where the task runs, once its workshop is prepared.
    pub workshop: Option<Prepared>,
    /// What the caller decided about the task's changes.
    pub changes_state: Option<ChangesState>,
}

impl TaskRecord {
    /// The runner the stored record names (issue 28): its handle's once it
    /// started, else the one its stored launch asked for. Never a file in
    /// the task directory, which the agent can write.
    pub fn runner_kind(&self) -> crate::launch::runner::RunnerKind {
        use crate::launch::runner::RunnerKind;
        match &self.run {
            Some(handle) => handle.kind(),
            None if self.launch.kube.is_some() => RunnerKind::Kubernetes,
            None => RunnerKind::Local,
        }
    }
}

/// What became of a finished task's changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangesState {
    Applied,
    Discarded,
}

impl ChangesState {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangesState::Applied => "applied",
            ChangesState::Discarded => "discarded",
        }
    }

    fn parse(s: &str) -> Option<ChangesState> {
        match s {
            "applied" => Some(ChangesState::Applied),
            "discarded" => Some(ChangesState::Discarded),
            _ => None,
        }
    }
}

/// A stored report.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredReport {
    pub source: String,
    pub status: String,
    pub body: String,
}

/// A question an agent asked.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionRecord {
    pub task_id: String,
    pub question_id: String,
    pub question: String,
    pub options: Vec<String>,
    pub asked_ms: i64,
    pub answer: Option<String>,
}

/// How a task ended, written in one transaction with its report.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: TaskStatus,
    pub exit_code: Option<i64>,
    pub signal: Option<i32>,
    pub finished_ms: i64,
    pub error: Option<String>,
    pub report: StoredReport,
}

/// The store. One connection behind a mutex: every statement is short, and
/// SQLite serializes writers anyway.
pub struct Store {
    db: db::Db,
}

/// The connection, out of reach of everything but [`db::Db::blocking`]:
/// its field is private to this module, so a store method (in this file or
/// in `store/*.rs`) that tried to lock the connection any other way would
/// not compile. ARCHITECTURE.md's promise that every SQLite call runs
/// through `Store::blocking` is kept by the compiler (issue 28).
mod db {
    use std::sync::Mutex;

    use rusqlite::Connection;

    pub(super) struct Db(Mutex<Connection>);

    impl Db {
        pub(super) fn new(conn: Connection) -> Db {
            Db(Mutex::new(conn))
        }

        /// Runs `op` on the connection, telling tokio when it runs on an
        /// async worker: SQLite's work (an fsync on every commit,
        /// `synchronous=FULL`), and the wait for the connection, then move
        /// the worker's other tasks to another thread instead of stalling
        /// them (issue 19). Off the workers (the blocking pool, a plain
        /// thread, a current-thread runtime) it simply runs.
        pub(super) fn blocking<T>(&self, op: impl FnOnce(&mut Connection) -> T) -> T {
            use tokio::runtime::{Handle, RuntimeFlavor};
            let run = || {
                // A panic while holding the lock leaves SQLite consistent (the
                // transaction rolls back), so the poison flag carries no meaning.
                let mut conn = self.0.lock().unwrap_or_else(|p| p.into_inner());
                op(&mut conn)
            };
            match Handle::try_current() {
                Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(run),
                _ => run(),
            }
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

const TASK_COLUMNS: &str = "id, created_ms, agent, role, mode, isolation, network, model, objective, \
    workspace, task_dir, timeout_ms, depth, status, started_ms, finished_ms, exit_code, signal, error, \
    supervisor_pid, supervisor_start, boot_id, log_offset, session_id, cancel_requested, \
    event_count, last_event, blocker, launch_json, workshop, changes_state, run_handle";

impl Store {
    /// Opens (creating if needed) and migrates the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).map_err(|e| {
            Error::Internal(format!(
                "cannot open the store {}: {e}. Check the state directory's permissions and free space",
                path.display()
            ))
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let store = Store { db: db::Db::new(conn) };
        store.migrate(path)?;
        Ok(store)
    }

    /// Runs a store operation on the connection, the only way to it
    /// ([`db::Db::blocking`]): on an async worker, SQLite's work and the
    /// wait for the connection leave the worker's other tasks to another
    /// thread (issue 19).
    fn blocking<T>(&self, op: impl FnOnce(&mut Connection) -> T) -> T {
        self.db.blocking(op)
    }

    fn migrate(&self, path: &Path) -> Result<()> {
        self.blocking(|conn| Self::migrate_on(conn, path))
    }

    fn migrate_on(conn: &mut Connection, path: &Path) -> Result<()> {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(Error::Precondition(format!(
                "the store {} has schema version {version}, newer than this caesard ({SCHEMA_VERSION}); upgrade caesar or point CAESAR_HOME elsewhere",
                path.display()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        if version < secrets::VERSION {
            secrets::migrate(conn).map_err(|e| {
                Error::Precondition(format!(
                    "cannot finish migration 8 of the store {} (dropping the channel secrets rebuilds the file, which \
                     needs free space about its size): {e}; free some space and start caesard again",
                    path.display()
                ))
            })?;
        }
        // Issue 31: the steers' table, made on every open (`store/steers.rs` says why).
        steers::ensure(conn)?;
        // Issue 31: which group's budget stopped a task, the same way (`store/lifecycle.rs`).
        lifecycle::ensure(conn)?;
        // Issue 32: the quota ledger, made the same way (`store/quota.rs`).
        quota::ensure(conn)?;
        quota_usage::ensure(conn)?;
        // Issue 32: the stacked tasks' tables, made the same way (`store/deps.rs`).
        deps::ensure(conn)?;
        continuations::ensure(conn)?;
        reviews::ensure(conn)?;
        forks::ensure(conn)?;
        listing::ensure(conn)?;
        by_status::ensure(conn)?;
        Ok(())
    }

    /// Records a new task.
    pub fn insert_task(&self, t: &TaskRecord) -> Result<()> {
        self.blocking(|conn| Self::insert_task_on(conn, t))
    }

    /// [`Store::insert_task`] on an open connection or transaction.
    fn insert_task_on(conn: &Connection, t: &TaskRecord) -> Result<()> {
        conn.execute(
            &format!(
                "INSERT INTO tasks ({TASK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32)"
            ),
            params![
                t.id,
                t.created_ms,
                t.agent,
                t.role,
                t.mode.as_str(),
                t.isolation.as_str(),
                t.network,
                t.model,
                t.objective,
                t.workspace,
                t.task_dir,
                t.timeout_ms as i64,
                t.depth,
                t.status.as_str(),
                t.started_ms,
                t.finished_ms,
                t.exit_code,
                t.signal,
                t.error,
                None::<u32>,
                None::<i64>,
                None::<String>,
                t.log_offset as i64,
                t.session_id,
                t.cancel_requested,
                t.event_count as i64,
                t.last_event,
                t.blocker.map(BlockerKind::as_str),
                to_json(&t.launch)?,
                t.workshop.as_ref().map(to_json).transpose()?,
                t.changes_state.map(ChangesState::as_str),
                t.run.as_ref().map(to_json).transpose()?,
            ],
        )?;
        Ok(())
    }

    /// One task, or `None`.
    pub fn task(&self, id: &str) -> Result<Option<TaskRecord>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))?;
            Ok(stmt.query_row([id], task_from_row).optional()?)
        })
    }

    /// Tasks, newest first, optionally only in some statuses.
    pub fn tasks(&self, statuses: &[TaskStatus], limit: u32) -> Result<Vec<TaskRecord>> {
        if !statuses.is_empty() {
            // Read in index order, only the rows picked (`store/by_status.rs`).
            return self.tasks_before(statuses, None, limit);
        }
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks ORDER BY created_ms DESC, id DESC LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit], task_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Records where a task runs, once its workshop is prepared.
    pub fn set_workshop(&self, id: &str, workshop: &Prepared) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("UPDATE tasks SET workshop = ?2 WHERE id = ?1", params![id, to_json(workshop)?])?;
            Ok(())
        })
    }

    /// Records that a task's changes were applied or discarded.
    pub fn set_changes_state(&self, id: &str, state: ChangesState) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("UPDATE tasks SET changes_state = ?2 WHERE id = ?1", params![id, state.as_str()])?;
            Ok(())
        })
    }

    /// How many pending tasks were queued before `task` (its queue position).
    pub fn pending_before(&self, task: &TaskRecord) -> Result<u32> {
        self.blocking(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT COUNT(*) FROM tasks WHERE status = 'pending' AND (created_ms < ?1 OR (created_ms = ?1 AND id < ?2))",
        )?;
        Ok(stmt.query_row(params![task.created_ms, task.id], |r| r.get(0))?)
    })
    }

    /// How many tasks are in `status`.
    pub fn count_status(&self, status: TaskStatus) -> Result<u32> {
        self.blocking(|conn| {
            Ok(conn.query_row("SELECT COUNT(*) FROM tasks WHERE status = ?1", [status.as_str()], |r| r.get(0))?)
        })
    }

    /// Marks a task running with the identity of its supervisor process.
    /// Records a started task's supervisor, together with `events` (its
    /// `started` event) in one transaction, so a crash cannot leave a running
    /// task without it.
    pub fn set_running(&self, id: &str, started_ms: i64, run: &RunHandle, events: &[EventRecord]) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "UPDATE tasks SET status = 'running', started_ms = ?2, run_handle = ?3 WHERE id = ?1",
                params![id, started_ms, to_json(run)?],
            )?;
            insert_events(&tx, id, events, None)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Records that the user asked to cancel, before any signal is sent, so a
    /// daemon restarted mid-cancel still knows the ending was a cancel.
    pub fn set_cancel_requested(&self, id: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute("UPDATE tasks SET cancel_requested = 1 WHERE id = ?1", [id])?;
            Ok(())
        })
    }

    /// Records the provider's session id and the blocker, when seen.
    pub fn set_session_and_blocker(
        &self,
        id: &str,
        session_id: Option<&str>,
        blocker: Option<BlockerKind>,
    ) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "UPDATE tasks SET session_id = COALESCE(?2, session_id), blocker = COALESCE(?3, blocker) WHERE id = ?1",
                params![id, session_id, blocker.map(BlockerKind::as_str)],
            )?;
            Ok(())
        })
    }

    /// Appends parsed events and advances the raw-log offset in one
    /// transaction: after a crash, parsing resumes exactly where the stored
    /// events end, with no gap and no duplicate.
    pub fn append_events(&self, id: &str, events: &[EventRecord], new_offset: Option<u64>) -> Result<()> {
        self.blocking(|conn| {
            let tx = conn.transaction()?;
            insert_events(&tx, id, events, new_offset)?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Ends a task: its status, its report and `events` (its `finished`
    /// event), in one transaction, so the task ends exactly once and its log
    /// ends with it. A task already ended is left as it is, nothing is
    /// written, and `false` is returned.
    pub fn finish(&self, id: &str, o: &Outcome, events: &[EventRecord]) -> Result<bool> {
        self.blocking(|conn| {
        let tx = conn.transaction()?;
        let changed = tx.execute(
            "UPDATE tasks SET status = ?2, exit_code = ?3, signal = ?4, finished_ms = ?5, error = ?6 WHERE id = ?1 AND status IN ('pending', 'running')",
            params![id, o.status.as_str(), o.exit_code, o.signal, o.finished_ms, o.error],
        )?;
        if changed == 1 {
            tx.execute(
                "INSERT OR REPLACE INTO reports (task_id, source, status, body, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, o.report.source, o.report.status, o.report.body, o.finished_ms],
            )?;
            insert_events(&tx, id, events, None)?;
        }
        tx.commit()?;
        Ok(changed == 1)
    })
    }

    /// A task's report, once it has one.
    pub fn report(&self, id: &str) -> Result<Option<StoredReport>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached("SELECT source, status, body FROM reports WHERE task_id = ?1")?;
            Ok(stmt
                .query_row([id], |r| Ok(StoredReport { source: r.get(0)?, status: r.get(1)?, body: r.get(2)? }))
                .optional()?)
        })
    }

    /// Event lines with `seq >= from`, in order, at most `limit`.
    pub fn events_from(&self, id: &str, from: u64, limit: u32) -> Result<Vec<(u64, String)>> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, line FROM events WHERE task_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows =
                stmt.query_map(params![id, from as i64, limit], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The bytes of a task's stored event lines, each with its newline: the
    /// length its `events.jsonl` has when it holds them exactly.
    pub fn events_bytes(&self, id: &str) -> Result<u64> {
        self.blocking(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT COALESCE(SUM(length(CAST(line AS BLOB)) + 1), 0) FROM events WHERE task_id = ?1",
            )?;
            Ok(stmt.query_row([id], |r| r.get::<_, i64>(0))?.max(0) as u64)
        })
    }

    /// The last `limit` event lines, in order, no more than `max_bytes` of
    /// them (the newest always).
    pub fn last_events(&self, id: &str, limit: u32, max_bytes: usize) -> Result<Vec<String>> {
        self.blocking(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT line FROM events WHERE task_id = ?1 ORDER BY seq DESC LIMIT ?2")?;
            // Newest first, read one row at a time, until `max_bytes` (the
            // newest line always, even alone past it): one answer never
            // holds more (issue 29).
            let mut lines = Vec::new();
            let mut bytes = 0usize;
            for line in stmt.query_map(params![id, limit], |r| r.get::<_, String>(0))? {
                let line = line?;
                bytes = bytes.saturating_add(line.len());
                if bytes > max_bytes && !lines.is_empty() {
                    break;
                }
                lines.push(line);
            }
            lines.reverse();
            Ok(lines)
        })
    }

    /// Questions of a task that have no answer yet.
    pub fn pending_questions(&self, id: &str) -> Result<Vec<QuestionRecord>> {
        self.blocking(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT task_id, question_id, question, options, asked_ms, answer, delivered FROM questions WHERE task_id = ?1 AND answer IS NULL ORDER BY asked_ms",
        )?;
        let rows = stmt.query_map([id], |r| question_from_row(r).map(|(q, _)| q))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    })
    }

    /// The agent of the task that reported this provider session id, if any.
    pub fn agent_of_session(&self, session_id: &str) -> Result<Option<String>> {
        self.blocking(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT agent FROM tasks WHERE session_id = ?1 ORDER BY created_ms DESC LIMIT 1")?;
            Ok(stmt.query_row([session_id], |r| r.get(0)).optional()?)
        })
    }

    /// Records a question an agent asked. Durable before the agent is told
    /// anything, and before the question shows anywhere.
    pub fn insert_question(&self, q: &QuestionRecord) -> Result<()> {
        self.blocking(|conn| {
            let options = serde_json::to_string(&q.options).map_err(|e| Error::Internal(e.to_string()))?;
            conn.execute(
                "INSERT INTO questions (task_id, question_id, question, options, asked_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![q.task_id, q.question_id, q.question, options, q.asked_ms],
            )?;
            Ok(())
        })
    }

    /// One question of a task, with whether its answer was delivered.
    pub fn question(&self, task_id: &str, question_id: &str) -> Result<Option<(QuestionRecord, bool)>> {
        self.blocking(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT task_id, question_id, question, options, asked_ms, answer, delivered FROM questions WHERE task_id = ?1 AND question_id = ?2",
        )?;
        Ok(stmt.query_row([task_id, question_id], question_from_row).optional()?)
    })
    }

    /// Every question of a task, answered or not, oldest first, each with
    /// whether its answer was delivered (for audits: doctor, the soak test).
    pub fn questions(&self, task_id: &str) -> Result<Vec<(QuestionRecord, bool)>> {
        self.blocking(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT task_id, question_id, question, options, asked_ms, answer, delivered FROM questions WHERE task_id = ?1 ORDER BY asked_ms, question_id",
        )?;
        let rows = stmt.query_map([task_id], question_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    })
    }

    /// Answers a question if it has no answer yet. Of two concurrent
    /// answers exactly one gets `true`.
    pub fn answer_question(&self, task_id: &str, question_id: &str, answer: &str, at_ms: i64) -> Result<bool> {
        self.blocking(|conn| {
        let changed = conn.execute(
            "UPDATE questions SET answer = ?3, answered_ms = ?4 WHERE task_id = ?1 AND question_id = ?2 AND answer IS NULL",
            params![task_id, question_id, answer, at_ms],
        )?;
        Ok(changed == 1)
    })
    }

    /// Marks an answer handed to the agent.
    pub fn mark_delivered(&self, task_id: &str, question_id: &str) -> Result<()> {
        self.blocking(|conn| {
            conn.execute(
                "UPDATE questions SET delivered = 1 WHERE task_id = ?1 AND question_id = ?2",
                params![task_id, question_id],
            )?;
            Ok(())
        })
    }

    /// Runs SQLite's integrity check; `Ok(())` when the file is sound.
    pub fn integrity_check(&self) -> Result<()> {
        self.blocking(|conn| {
            let verdict: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
            if verdict == "ok" { Ok(()) } else { Err(Error::Internal(format!("store integrity check: {verdict}"))) }
        })
    }
}

/// Inserts events and advances the task's counters (and the raw-log offset,
/// when given) inside `tx`.
fn insert_events(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    events: &[EventRecord],
    new_offset: Option<u64>,
) -> Result<()> {
    if events.is_empty() && new_offset.is_none() {
        return Ok(());
    }
    {
        let mut ins = tx.prepare_cached("INSERT INTO events (task_id, seq, line) VALUES (?1, ?2, ?3)")?;
        for e in events {
            let line = serde_json::to_string(e).map_err(|e| Error::Internal(e.to_string()))?;
            ins.execute(params![id, e.seq as i64, line])?;
        }
    }
    let last = match events.last() {
        Some(e) => Some(serde_json::to_string(e).map_err(|e| Error::Internal(e.to_string()))?),
        None => None,
    };
    tx.execute(
        "UPDATE tasks SET log_offset = COALESCE(?2, log_offset), event_count = event_count + ?3, last_event = COALESCE(?4, last_event) WHERE id = ?1",
        params![id, new_offset.map(|o| o as i64), events.len() as i64, last],
    )?;
    Ok(())
}

/// A `questions` row selected as `task_id, question_id, question, options,
/// asked_ms, answer, delivered`.
fn question_from_row(r: &Row<'_>) -> rusqlite::Result<(QuestionRecord, bool)> {
    let options: String = r.get(3)?;
    Ok((
        QuestionRecord {
            task_id: r.get(0)?,
            question_id: r.get(1)?,
            question: r.get(2)?,
            options: serde_json::from_str(&options).unwrap_or_default(),
            asked_ms: r.get(4)?,
            answer: r.get(5)?,
        },
        r.get(6)?,
    ))
}

fn task_from_row(r: &Row<'_>) -> rusqlite::Result<TaskRecord> {
    let mode: String = r.get(4)?;
    let isolation: String = r.get(5)?;
    let status: String = r.get(13)?;
    Ok(TaskRecord {
        id: r.get(0)?,
        created_ms: r.get(1)?,
        agent: r.get(2)?,
        role: r.get(3)?,
        mode: Mode::parse(&mode).unwrap_or(Mode::ReadOnly),
        isolation: if isolation == "worktree" { Isolation::Worktree } else { Isolation::Inplace },
        network: r.get(6)?,
        model: r.get(7)?,
        objective: r.get(8)?,
        workspace: r.get(9)?,
        task_dir: r.get(10)?,
        timeout_ms: r.get::<_, i64>(11)? as u64,
        depth: r.get(12)?,
        // An unknown status can only come from a newer build, which
        // `migrate` refuses; treat it as failed rather than panic.
        status: TaskStatus::parse(&status).unwrap_or(TaskStatus::Failed),
        started_ms: r.get(14)?,
        finished_ms: r.get(15)?,
        exit_code: r.get(16)?,
        signal: r.get(17)?,
        error: r.get(18)?,
        run: run_handle(r)?,
        log_offset: r.get::<_, i64>(22)? as u64,
        session_id: r.get(23)?,
        cancel_requested: r.get(24)?,
        event_count: r.get::<_, i64>(25)? as u64,
        last_event: r.get(26)?,
        blocker: r.get::<_, Option<String>>(27)?.as_deref().and_then(BlockerKind::parse),
        launch: LaunchPlan::decode(&r.get::<_, String>(28)?),
        workshop: r.get::<_, Option<String>>(29)?.and_then(|w| serde_json::from_str(&w).ok()),
        changes_state: r.get::<_, Option<String>>(30)?.as_deref().and_then(ChangesState::parse),
    })
}

/// The runner's handle of a row: its JSON, or for a row written before the
/// handle had a column, the local supervisor recorded in `supervisor_*`.
fn run_handle(r: &Row<'_>) -> rusqlite::Result<Option<RunHandle>> {
    if let Some(json) = r.get::<_, Option<String>>(31)? {
        return Ok(serde_json::from_str(&json).ok());
    }
    let pid: Option<u32> = r.get(19)?;
    Ok(pid.map(|pid| RunHandle::Local {
        pid,
        start: r.get::<_, Option<i64>>(20).ok().flatten().map(|v| v as u64),
        boot: r.get(21).ok().flatten(),
    }))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Internal(format!("cannot encode a task field: {e}")))
}

#[cfg(test)]
pub(crate) mod tests;

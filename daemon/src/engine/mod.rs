//! The engine: tasks from delegation to report, in rooms.
//!
//! A task's life, and the room that owns each step:
//!
//! - [`delegate`]: validate, resolve against the project's config and
//!   policy, write the task's files, record it `pending`. Answers at once.
//! - [`prepare`]: make its worktree and run `setup`, concurrently across
//!   tasks (bounded), outside every lock another call needs; cancellable.
//! - [`queue`]: a pure FIFO decision of what may start now, and the kick.
//! - [`start`]: hand the launch to the [`Runner`](crate::runner::Runner)
//!   and record `running` with its `started` event in one transaction.
//! - [`monitor`]: read the runner's output, parse it through the
//!   [`Driver`](crate::driver::Driver), apply what it says.
//! - [`events`]: number, write `events.jsonl`, store, broadcast.
//! - [`conclude`]: classify the ending, recover the report, reconcile it
//!   with git, finish once.
//! - [`recovery`]: after a restart, finish or redo each step idempotently.
//! - [`observe`], [`cancel`], [`channel`], [`permissions`], [`changes`],
//!   [`projects`]: what callers ask of tasks and projects.
//! - [`bounds`]: pure caps on what one request may ask (await ids, field
//!   sizes, list lengths, the queue's length).
//! - [`budget`], [`network`], [`fallback`] (issue 17): a task's limits
//!   tallied live, the network blocker, and the next agent of the role's
//!   chain after a blocker, under the caller's one task id.
//!
//! Waiting is event-driven: each live task has a `watch` channel of its
//! status, and [`Engine::await_tasks`] sleeps on those, never polling.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use caesar_proto::paths::Paths;
use tokio::sync::{broadcast, watch};

use crate::error::{Error, Result};
use crate::runner::Runner;
use crate::runner::local::LocalRunner;
use crate::store::{QuestionRecord, Store, StoredReport, TaskRecord, TaskStatus};
use crate::task_dir::TaskDir;

mod authority;
pub mod bounds;
mod boxing;
mod budget;
mod cancel;
mod changes;
mod channel;
mod codex_choice;
mod conclude;
mod delegate;
mod events;
mod fallback;
mod listing;
pub mod mcp_tasks;
pub use listing::ListEntry;
mod monitor;
mod nested;
mod network;
mod observe;
mod permission_answers;
mod permissions;
mod prepare;
mod projects;
mod pulse;
mod queue;
mod recovery;
mod remote_refs;
mod start;
mod trusting;
// Issue 17, fan-out: verification in the worktree, groups.
pub mod groups;
mod notifications;
pub mod radar;
mod verify;
mod verify_net;
// Issue 17, items 3 and 4: quota parking, group budgets.
mod group_budget;
mod parking;

pub use authority::{Caller, reaches as authority_reaches};
pub use budget::{Meter, Tally};
pub use channel::ASK_DEFAULT_MS;
use conclude::Exit;
pub use fallback::{AttemptView, BudgetView, LifecycleView};
use monitor::Run;
pub use network::NetWatch;
use permissions::is_permission_question;

/// Tunables of the engine.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Between SIGTERM and SIGKILL when a task is stopped.
    pub grace_ms: u64,
    /// How often a running task's log is read.
    pub poll: Duration,
    /// The most bytes of an agent's output kept in raw.log (0: no cap).
    pub raw_log_cap: u64,
    /// The executable that runs `__supervise` (the caesard binary).
    pub supervisor_exe: PathBuf,
    /// How many tasks prepare (worktree and `setup`) at once.
    pub prepare_parallel: usize,
    /// How long a bridged permission prompt waits for the orchestrator before it is denied
    /// (`CAESAR_PERMISSION_TIMEOUT_MS`, default 5 min; never past the task's deadline).
    pub permission_timeout: Duration,
    /// The most tasks that may wait in the queue (`pending`) at once; a
    /// delegation past it is refused (`CAESAR_MAX_PENDING`, default
    /// [`bounds::MAX_PENDING`]).
    pub max_pending: u32,
    /// How long an agent may do nothing but fail to reach its provider
    /// before it is blocked `network` (`CAESAR_NETWORK_BLOCKER_MS`, default 60 s).
    pub network_blocker_ms: u64,
}

impl Settings {
    /// The defaults, with the grace period overridable by
    /// `CAESAR_KILL_GRACE_MS` (tests shorten it).
    pub fn from_env() -> std::io::Result<Settings> {
        let grace_ms = std::env::var("CAESAR_KILL_GRACE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(3000)
            .min(crate::supervisor::MAX_GRACE_MS);
        let raw_log_cap =
            std::env::var("CAESAR_RAW_LOG_MAX_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_RAW_LOG_CAP);
        Ok(Settings {
            grace_ms,
            poll: Duration::from_millis(20),
            raw_log_cap,
            supervisor_exe: std::env::current_exe()?,
            prepare_parallel: std::env::var("CAESAR_PREPARE_PARALLEL")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)),
            permission_timeout: Duration::from_millis(
                std::env::var("CAESAR_PERMISSION_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000),
            ),
            max_pending: std::env::var("CAESAR_MAX_PENDING")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(bounds::MAX_PENDING),
            network_blocker_ms: network::blocker_ms_from_env(),
        })
    }
}

/// What a live watcher of a task holds, in events: the broadcast ring, and
/// one page of replay from the store. An event can be a whole output line of
/// up to 1 MiB, so these bound a watcher's memory under a flood; a watcher
/// that falls behind catches up from the store.
const WATCH_RING: usize = 256;
const REPLAY_PAGE: u32 = 128;

/// The most events one `Logs` call returns.
pub const MAX_LOG_EVENTS: u32 = 10_000;
/// The most bytes of events one `Logs` answer carries (issue 29: 10,000
/// large events made a 264 MB answer): the newest that fit, the answer's
/// `total_events` saying how many there are; `WatchEvents` (`caesar logs
/// --follow`) pages through them all.
pub const LOG_EVENTS_MAX_BYTES: usize = 4 * 1024 * 1024;
/// The default cap of a task's raw.log: 256 MiB (`CAESAR_RAW_LOG_MAX_BYTES`).
pub const DEFAULT_RAW_LOG_CAP: u64 = 256 * 1024 * 1024;
/// How many characters of the agent's reply a snapshot shows.
pub const OUTPUT_TAIL_CHARS: usize = 1000;
/// How much of the agent's messages is kept for report recovery.
const MESSAGE_KEEP: usize = 256 * 1024;

pub use crate::request::DelegateInput;
pub use permission_answers::{OfferedOption, QuestionDetails, QuestionKind};

/// A task as callers see it.
#[derive(Debug, Clone)]
pub struct TaskView {
    pub record: TaskRecord,
    pub report: Option<StoredReport>,
    pub pending_questions: Vec<QuestionRecord>,
    /// What each pending question is (same order): a question, or a permission with its
    /// tool, input and offered options (issue 15).
    pub question_details: Vec<QuestionDetails>,
    /// The last characters of the agent's reply and when it last spoke.
    pub output: Option<(String, i64)>,
    /// What the agent is doing now.
    pub activity: Option<Activity>,
    /// For a queued task, how many queued tasks start before it.
    pub queue_position: Option<u32>,
    /// Where a pending task stands.
    pub phase: Option<Phase>,
    /// Attempts, the current attempt and the budget (issue 17).
    pub lifecycle: LifecycleView,
}

/// Where a pending task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Its worktree is being made, or `setup` runs.
    Preparing,
    /// Ready, waiting for a slot.
    Queued,
    /// Handed to the runner.
    Starting,
    /// Parked at a quota until it lifts (issue 17, `parking.rs`).
    Parked,
}

impl Phase {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preparing => "preparing",
            Phase::Queued => "queued",
            Phase::Starting => "starting",
            Phase::Parked => "parked",
        }
    }
}

/// The result of [`Engine::delegate`].
#[derive(Debug, Clone)]
pub struct Delegated {
    pub record: TaskRecord,
    pub warnings: BTreeMap<String, String>,
    /// The worktree the agent will work in (a worktree task only).
    pub worktree: Option<String>,
}

/// One worktree considered by [`Engine::gc`].
#[derive(Debug, Clone, PartialEq)]
pub struct GcItem {
    pub task_id: String,
    pub worktree: String,
    /// `removed`, `would remove` or `kept`.
    pub action: String,
    pub reason: String,
    pub bytes: u64,
}

/// The result of [`Engine::logs`].
#[derive(Debug, Clone, Default)]
pub struct Logs {
    pub total_events: u64,
    pub events: Vec<String>,
    pub raw: String,
    pub raw_size: u64,
    pub raw_truncated: bool,
}

/// What a running agent is doing now, from its latest events.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    /// `message`, `thinking` or `tool_use`.
    pub kind: &'static str,
    pub tool_name: String,
    /// The tool call's state; empty for other kinds.
    pub state: String,
    /// When it was seen, milliseconds since the epoch.
    pub at_ms: i64,
}

/// What the engine keeps in memory for a running task.
struct Live {
    pub(super) status: watch::Sender<TaskStatus>,
    /// Bumped when the task needs the caller: a blocker, a question.
    pub(super) attention: watch::Sender<u64>,
    /// Made on the first watcher: most tasks have none, and its ring is the
    /// largest thing a task holds.
    pub(super) events: std::sync::OnceLock<broadcast::Sender<(u64, String)>>,
    pub(super) output: Mutex<Option<(String, i64)>>,
    pub(super) activity: Mutex<Option<Activity>>,
    /// The next event sequence number. Held while a batch is stored, so the
    /// monitor and the return channel number events in the order stored.
    pub(super) next_seq: Mutex<u64>,
    /// Bumped when a question of the task is answered.
    pub(super) answers: watch::Sender<u64>,
    /// An append to `events.jsonl` failed: it is repaired before the next.
    pub(super) events_file_behind: std::sync::atomic::AtomicBool,
    /// `events.jsonl` reached its cap and said so (issue 19; `events`).
    pub(super) events_capped: std::sync::atomic::AtomicBool,
}

impl Live {
    fn new(status: TaskStatus, next_seq: u64) -> Arc<Live> {
        Arc::new(Live {
            next_seq: Mutex::new(next_seq),
            answers: watch::channel(0).0,
            status: watch::channel(status).0,
            attention: watch::channel(0).0,
            events: std::sync::OnceLock::new(),
            output: Mutex::new(None),
            activity: Mutex::new(None),
            events_file_behind: Default::default(),
            events_capped: Default::default(),
        })
    }
}

/// The engine. One per daemon.
pub struct Engine {
    paths: Paths,
    settings: Settings,
    store: Store,
    /// Where tasks run.
    runner: Arc<dyn Runner>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    queue: queue::Queue,
    preparing: prepare::Preparing,
    projects: projects::Projects,
    /// Task ids that changed, for live views of all tasks (`pulse.rs`).
    pulse: broadcast::Sender<String>,
    /// Webhooks and the command hook (issue 17, `notify.rs`).
    notifier: Arc<crate::notify::Notifier>,
    /// The conflict radar's footprints and background loop (issue 17, `radar.rs`).
    radar: radar::RadarCache,
    /// The groups' budgets (issue 17, `group_budget.rs`).
    group_meters: group_budget::GroupMeters,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("paths", &self.paths).finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens the store under `paths.state_dir` and builds the engine, with
    /// tasks run by the local runner. Call [`Engine::recover`] next.
    pub fn open(paths: Paths, settings: Settings) -> Result<Arc<Engine>> {
        std::fs::create_dir_all(paths.state_dir.join("tasks"))
            .map_err(|e| Error::io_at("cannot create", &paths.state_dir, e))?;
        let store = Store::open(&paths.state_dir.join("caesar.db"))?;
        let local = LocalRunner {
            supervisor_exe: settings.supervisor_exe.clone(),
            grace_ms: settings.grace_ms,
            raw_log_cap: settings.raw_log_cap,
        };
        // The runners hold the engine weakly: a remote task's channel calls come back to it.
        Ok(Arc::new_cyclic(|engine: &std::sync::Weak<Engine>| Engine {
            preparing: prepare::Preparing::new(settings.prepare_parallel),
            paths,
            settings,
            store,
            runner: Arc::new(crate::runner::multi::Runners::new(local, engine.clone())),
            live: Mutex::new(HashMap::new()),
            queue: Default::default(),
            projects: Default::default(),
            pulse: broadcast::channel(pulse::PULSE_RING).0,
            notifier: Default::default(),
            radar: Default::default(),
            group_meters: Default::default(),
        }))
    }

    /// The store, for read-only inspection (doctor, tests).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The paths this engine works in.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    fn live(&self, id: &str) -> Option<Arc<Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    /// Registers a task as live (its status watched, its events numbered
    /// from `next_seq`), or moves the live one to `status`. A task is live
    /// from its delegation on, so that a caller awaiting it while it is
    /// queued or preparing is woken by what happens once it runs.
    fn make_live(&self, id: &str, status: TaskStatus, next_seq: u64) -> Arc<Live> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = live.get(id).cloned() {
            existing.status.send_replace(status);
            drop(live);
            self.pulse(id);
            return existing;
        }
        let made = Live::new(status, next_seq);
        live.insert(id.to_owned(), made.clone());
        drop(live);
        self.pulse(id);
        made
    }

    /// The task's directory.
    fn task_dir(record: &TaskRecord) -> TaskDir {
        TaskDir::new(&record.task_dir)
    }

    /// Tasks pending or running now.
    pub fn active_count(&self) -> Result<u32> {
        Ok(self.store.count_status(TaskStatus::Pending)? + self.store.count_status(TaskStatus::Running)?)
    }
}

pub use crate::planner::{CHANNEL_SERVER, CHANNEL_TOOLS};

//! The engine: tasks from delegation to report. [`Engine`] is the
//! composition root: it builds its services (each with its own state and
//! tests; ARCHITECTURE.md has the table) and runs a task's life across
//! them, one room per step:
//!
//! - [`delegate`]: validate, resolve, plan ([`crate::planner`]), write the
//!   task's files, record it `pending`. Answers at once.
//! - [`prepare`]: make its worktree and run `setup`, concurrently across
//!   tasks (bounded), outside every lock another call needs; cancellable.
//! - [`queue`]: a pure FIFO decision of what may start now, and the kick.
//! - [`start`]: hand the launch to the [`Runner`](crate::runner::Runner)
//!   and record `running` with its `started` event in one transaction.
//! - [`monitor`]: read the runner's output, parse it through the
//!   [`Driver`](crate::driver::Driver), apply what it says.
//! - [`events`]: a running task's batches, written by [`LiveRuns`].
//! - [`conclude`]: classify the ending, recover the report, reconcile it
//!   with git, finish once.
//! - [`recovery`]: after a restart, finish or redo each step idempotently.
//! - [`cancel`], [`fallback`], [`verify`], [`groups`], [`network`],
//!   [`nested`]: the rest of a task's life past one plain run.
//!
//! The services: [`LiveRuns`] (`live`), [`observe::Views`], [`changes::Changes`],
//! [`projects::Projects`], [`channel::Channel`], `permissions::Permissions`,
//! `group_budget::Budgets`, `parking::Parking`, [`radar::Radar`] and
//! [`notifications::Notices`].
//!
//! Waiting is event-driven: each live task has a `watch` channel of its
//! status, and [`observe::Views::await_tasks`] sleeps on those, never polling.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use caesar_proto::paths::Paths;

use crate::error::{Error, Result};
use crate::runner::Runner;
use crate::runner::local::LocalRunner;
use crate::store::{QuestionRecord, Store, StoredReport, TaskRecord};
use crate::task_dir::TaskDir;

mod authority;
pub mod bounds;
mod boxing;
mod budget;
mod cancel;
pub mod changes;
pub mod channel;
mod codex_choice;
mod conclude;
// Issue 31: continuing a finished task in its worktree.
mod continuation;
mod delegate;
mod events;
mod fallback;
// Issue 31: the brief an agent taking over a half-done task gets (pure; shared with fork).
pub mod handoff;
mod listing;
pub mod mcp_tasks;
pub use listing::ListEntry;
mod live;
mod monitor;
mod nested;
mod network;
pub mod observe;
mod permission_answers;
mod permissions;
mod prepare;
pub mod projects;
use live::Live;
pub use live::LiveRuns;
mod queue;
pub mod quota;
mod recovery;
// Issue 31: a half-done worktree task handed to the next agent on a blocker.
mod relay;
// Issue 30: retrying an ended task with another agent, asked the same.
mod remote_refs;
mod retry;
// Issue 32: the review loop across model families, and its briefs.
pub mod review;
mod review_brief;
pub mod stacking;
mod start;
// Issue 31: steering a running agent; checkpoints and forks.
mod checkpoints;
pub mod fork;
pub mod steer;
mod trusting;
// Issue 17, fan-out: verification in the worktree, groups.
pub mod groups;
pub mod notifications;
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
            supervisor_exe: crate::supervisor::executable(std::env::current_exe()?),
            prepare_parallel: std::env::var("CAESAR_PREPARE_PARALLEL")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or_else(default_prepare_parallel),
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

/// How many tasks prepare at once by default: four per core, between 4
/// and 64. A `setup` mostly waits (a package download, a container pull),
/// so a bound at the core count queued I/O-bound setups behind each other
/// (issue 33: four 4 s setups on 2 cores took 9.6 s); CPU-bound setups
/// share the cores either way, and `CAESAR_PREPARE_PARALLEL` sets it.
fn default_prepare_parallel() -> usize {
    (4 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)).clamp(4, 64)
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
    /// What became of it, for people (issue 30): computed once, by
    /// `crate::verdict::of_view`, when the view is made.
    pub verdict: crate::verdict::TaskVerdict,
    /// The tasks it builds on and where its stack stands (issue 32).
    pub stack: Option<crate::store::StackRow>,
    /// The review loop it is a run of, and the loop's findings (issue 32).
    pub review: Option<review::ReviewView>,
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
    /// Waiting for the tasks it builds on to end (issue 32, `stacking.rs`).
    Waiting,
}

impl Phase {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preparing => "preparing",
            Phase::Queued => "queued",
            Phase::Starting => "starting",
            Phase::Parked => "parked",
            Phase::Waiting => "waiting",
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

/// The engine. One per daemon.
pub struct Engine {
    paths: Paths,
    settings: Settings,
    store: Arc<Store>,
    /// Where tasks run.
    runner: Arc<dyn Runner>,
    /// Diff, apply, discard and gc of tasks' changes.
    changes: changes::Changes,
    /// The live tasks, their events and the change stream.
    runs: Arc<LiveRuns>,
    queue: Arc<queue::Queue>,
    preparing: Arc<prepare::Preparing>,
    /// The read side: views, lists, await, logs.
    views: Arc<observe::Views>,
    /// Projects' configs, agents, roles and trust.
    projects: Arc<projects::Projects>,
    /// Quota parks.
    parking: parking::Parking,
    /// Webhooks and the command hook (issue 17).
    notices: notifications::Notices,
    /// The conflict radar's footprints and background loop (issue 17, `radar.rs`).
    radar: Arc<radar::Radar>,
    /// The permission bridge.
    permissions: Arc<permissions::Permissions>,
    /// The return channel's calls and the answers to questions.
    channel: channel::Channel,
    /// Tasks' and groups' budgets (issue 17).
    budgets: group_budget::Budgets,
    /// Stacked tasks' loop (issue 32, `stacking.rs`).
    stacking: stacking::Stacking,
    /// The review loops' steps (issue 32, `review.rs`).
    reviews: review::Reviews,
    /// Worktree snapshots per `file_changed` event (issue 31, `checkpoints.rs`).
    checkpoints: checkpoints::Checkpoints,
    /// Held while stored fallbacks are delegated (`fallback.rs`): every
    /// monitor's end looks for them, and two at once delegated one successor
    /// id twice, the loser removing the winner's task directory.
    fallback_turn: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("paths", &self.paths).finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens the store under `paths.state_dir` and builds the engine and its
    /// services. Tasks run on `runner`; `None` gives the production runners
    /// (local, and Kubernetes where a task's stored plan says so). Call
    /// [`Engine::recover`] next.
    pub fn open(paths: Paths, settings: Settings, runner: Option<Arc<dyn Runner>>) -> Result<Arc<Engine>> {
        std::fs::create_dir_all(paths.state_dir.join("tasks"))
            .map_err(|e| Error::io_at("cannot create", &paths.state_dir, e))?;
        let store = Arc::new(Store::open(&paths.state_dir.join("caesar.db"))?);
        let local = LocalRunner {
            supervisor_exe: settings.supervisor_exe.clone(),
            grace_ms: settings.grace_ms,
            raw_log_cap: settings.raw_log_cap,
        };
        // The runners hold the engine weakly: a remote task's channel calls come back to it.
        let permission_timeout = settings.permission_timeout;
        Ok(Arc::new_cyclic(|engine: &std::sync::Weak<Engine>| {
            let runner: Arc<dyn Runner> =
                runner.unwrap_or_else(|| Arc::new(crate::runner::multi::Runners::new(local, engine.clone())));
            let runs = Arc::new(LiveRuns::new(store.clone()));
            let radar = Arc::new(radar::Radar::new(store.clone()));
            let queue: Arc<queue::Queue> = Default::default();
            let preparing = Arc::new(prepare::Preparing::new(settings.prepare_parallel));
            let views = Arc::new(observe::Views::new(store.clone(), runs.clone(), queue.clone(), preparing.clone()));
            let notices = notifications::Notices::new(paths.clone(), store.clone(), views.clone());
            let projects = Arc::new(projects::Projects::new(paths.clone(), quota::Ledger::new(store.clone())));
            let permissions = Arc::new(permissions::Permissions::new(
                store.clone(),
                runner.clone(),
                notices.clone(),
                permission_timeout,
            ));
            Engine {
                parking: parking::Parking::new(store.clone(), runs.clone(), notices.clone(), projects.clone()),
                channel: channel::Channel::new(
                    store.clone(),
                    runs.clone(),
                    runner.clone(),
                    notices.clone(),
                    permissions.clone(),
                ),
                budgets: group_budget::Budgets::new(store.clone(), runner.clone(), notices.clone()),
                changes: changes::Changes::new(store.clone(), runner.clone(), radar.clone(), runs.clone()),
                checkpoints: checkpoints::Checkpoints::new(store.clone()),
                fallback_turn: tokio::sync::Mutex::new(()),
                paths,
                settings,
                projects,
                permissions,
                notices,
                views,
                runs,
                radar,
                store,
                runner,
                queue,
                preparing,
                stacking: Default::default(),
                reviews: Default::default(),
            }
        }))
    }

    /// The store, for read-only inspection (doctor, tests).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Projects' configurations, agents, roles and trust records.
    pub fn projects(&self) -> &projects::Projects {
        &self.projects
    }

    /// The return channel's calls and the answers to questions.
    pub fn channel(&self) -> &channel::Channel {
        &self.channel
    }

    /// The read side: task views, lists, await, logs and event streams.
    pub fn views(&self) -> &observe::Views {
        &self.views
    }

    /// Diff, apply, discard and gc of tasks' changes.
    pub fn changes(&self) -> &changes::Changes {
        &self.changes
    }

    /// Webhooks and the command hook.
    pub fn notices(&self) -> &notifications::Notices {
        &self.notices
    }

    /// The conflict radar.
    pub fn radar(&self) -> &radar::Radar {
        &self.radar
    }

    /// The paths this engine works in.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The live tasks and the engine-wide change stream.
    pub fn runs(&self) -> &LiveRuns {
        &self.runs
    }
}

pub use crate::planner::{CHANNEL_SERVER, CHANNEL_TOOLS};

//! The engine: tasks from delegation to report.
//!
//! [`Engine::delegate`] records a task durably, then starts its supervisor
//! ([`crate::supervisor`]). A monitor per running task tails `raw.log`,
//! parses lines into OACP events, stores them together with the new log
//! offset, and broadcasts them. When the supervisor writes `exit.json` the
//! monitor drains the log, recovers the report ([`crate::report`]) and ends
//! the task in one transaction, then wakes every waiter.
//!
//! Waiting is event-driven: each live task has a `watch` channel of its
//! status, and [`Engine::await_tasks`] sleeps on those, never polling.
//!
//! On start, [`Engine::recover`] re-attaches to every task a previous daemon
//! left running: it resumes tailing from the stored offset, collects the
//! exit status the supervisor wrote meanwhile, and ends as `failed` (with a
//! report that says why) any task whose supervisor vanished.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use caesar_proto::paths::Paths;
use tokio::sync::{broadcast, mpsc, watch};
use tracing::{Instrument, info, info_span, warn};

use crate::agents::{self, Launch, TokenValues};
use crate::clock::{now_ms, rfc3339};
use crate::config::{Config, IsolationPref, project_root};
use crate::error::{Error, Result};
use crate::oacp::{
    BlockerKind, EVENT_PROTOCOL, EventBody, EventRecord, Isolation, Mode, OACP_VERSION, TASK_PROTOCOL, TaskDoc,
};
use crate::provider::{self, LineParser, Parsed, Stream};
use crate::report::{self, Ending};
use crate::resolve::{self, AgentTarget};
use crate::store::{Outcome, QuestionRecord, Running, Store, StoredReport, TaskRecord, TaskStatus};
use crate::supervisor::{self, SuperviseArgs};
use crate::tail::{self, LogTail};
use crate::workshop;

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
    /// How long a bridged permission prompt waits for the orchestrator before it is denied
    /// (`CAESAR_PERMISSION_TIMEOUT_MS`, default 5 min; never past the task's deadline).
    pub permission_timeout: Duration,
}

impl Settings {
    /// The defaults, with the grace period overridable by
    /// `CAESAR_KILL_GRACE_MS` (tests shorten it).
    pub fn from_env() -> std::io::Result<Settings> {
        let grace_ms = std::env::var("CAESAR_KILL_GRACE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
        let raw_log_cap =
            std::env::var("CAESAR_RAW_LOG_MAX_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_RAW_LOG_CAP);
        Ok(Settings {
            grace_ms,
            poll: Duration::from_millis(20),
            raw_log_cap,
            supervisor_exe: std::env::current_exe()?,
            permission_timeout: Duration::from_millis(
                std::env::var("CAESAR_PERMISSION_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000),
            ),
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
/// The default cap of a task's raw.log: 256 MiB (`CAESAR_RAW_LOG_MAX_BYTES`).
pub const DEFAULT_RAW_LOG_CAP: u64 = 256 * 1024 * 1024;
/// How many characters of the agent's reply a snapshot shows.
pub const OUTPUT_TAIL_CHARS: usize = 1000;
/// How much of the agent's messages is kept for report recovery.
const MESSAGE_KEEP: usize = 256 * 1024;

/// What a caller asks of [`Engine::delegate`].
#[derive(Debug, Clone, Default)]
pub struct DelegateInput {
    pub objective: String,
    pub agent: Option<String>,
    pub role: Option<String>,
    pub mode: Option<String>,
    pub isolation: Option<String>,
    pub network: Option<String>,
    pub context: String,
    pub constraints: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub model: Option<String>,
    pub timeout_ms: Option<u64>,
    pub channel: bool,
    pub workspace: String,
    pub session_id: Option<String>,
    pub effort: Option<String>,
    pub depth: u32,
}

/// A task as callers see it.
#[derive(Debug, Clone)]
pub struct TaskView {
    pub record: TaskRecord,
    pub report: Option<StoredReport>,
    pub pending_questions: Vec<QuestionRecord>,
    /// The last characters of the agent's reply and when it last spoke.
    pub output: Option<(String, i64)>,
    /// What the agent is doing now.
    pub activity: Option<Activity>,
    /// For a queued task, how many queued tasks start before it.
    pub queue_position: Option<u32>,
}

/// The result of [`Engine::delegate`].
#[derive(Debug, Clone)]
pub struct Delegated {
    pub record: TaskRecord,
    pub warnings: BTreeMap<String, String>,
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
    status: watch::Sender<TaskStatus>,
    /// Bumped when the task needs the caller: a blocker, a question.
    attention: watch::Sender<u64>,
    /// Made on the first watcher: most tasks have none, and its ring is the
    /// largest thing a task holds.
    events: std::sync::OnceLock<broadcast::Sender<(u64, String)>>,
    output: Mutex<Option<(String, i64)>>,
    activity: Mutex<Option<Activity>>,
    /// The next event sequence number. Held while a batch is stored, so the
    /// monitor and the return channel number events in the order stored.
    next_seq: Mutex<u64>,
    /// Bumped when a question of the task is answered.
    answers: watch::Sender<u64>,
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
        })
    }
}

/// The engine. One per daemon.
pub struct Engine {
    paths: Paths,
    settings: Settings,
    store: Store,
    live: Mutex<HashMap<String, Arc<Live>>>,
    versions: crate::catalog::VersionCache,
    /// Held while the queue decides what to start, and while a queued task
    /// is cancelled, so the two never race.
    scheduling: tokio::sync::Mutex<()>,
    /// The last configuration of each project that loaded, served while a
    /// later edit of it does not load.
    good_configs: Mutex<HashMap<PathBuf, Config>>,
    /// The current load error of each project whose config does not load.
    config_problems: Mutex<HashMap<PathBuf, String>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("paths", &self.paths).finish_non_exhaustive()
    }
}

/// How the monitor learns that the supervisor is done.
enum Waiter {
    /// This daemon started the supervisor and is its parent.
    Child(tokio::process::Child),
    /// A previous daemon started it; `exit.json` and liveness are checked.
    Reattached { pid: u32, start: Option<u64>, boot: Option<String> },
}

/// The parsing state of one running task.
struct Run {
    id: String,
    task_dir: PathBuf,
    tail: LogTail,
    parser: Box<dyn LineParser>,
    /// Whether the parser is the generic one, whose raw output is the agent's own words.
    generic: bool,
    final_text: Option<String>,
    messages: String,
    session_id: Option<String>,
    blocker: Option<(BlockerKind, String)>,
    /// Told to stop when a blocker makes the rest of the run pointless.
    supervisor_pid: Option<u32>,
    live: Arc<Live>,
    /// The provider whose permission prompts this run bridges to the orchestrator, when its
    /// stdin is a control protocol.
    bridge: Option<String>,
    /// Bridged permission questions still open, with when each is denied for lack of an answer.
    permission_deadlines: Vec<(String, i64)>,
    /// The task's own deadline.
    deadline_ms: i64,
}

impl Engine {
    /// Opens the store under `paths.state_dir` and builds the engine. Call
    /// [`Engine::recover`] next.
    pub fn open(paths: Paths, settings: Settings) -> Result<Arc<Engine>> {
        std::fs::create_dir_all(paths.state_dir.join("tasks"))
            .map_err(|e| Error::io_at("cannot create", &paths.state_dir, e))?;
        let store = Store::open(&paths.state_dir.join("caesar.db"))?;
        Ok(Arc::new(Engine {
            paths,
            settings,
            store,
            live: Mutex::new(HashMap::new()),
            versions: Default::default(),
            scheduling: Default::default(),
            good_configs: Default::default(),
            config_problems: Default::default(),
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

    /// Tasks pending or running now.
    pub fn active_count(&self) -> Result<u32> {
        Ok(self.store.tasks(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)?.len() as u32)
    }

    // ---------------------------------------------------------------- delegate

    /// Validates a delegation, records the task durably, starts its agent
    /// and returns without waiting for it.
    pub async fn delegate(self: &Arc<Self>, input: DelegateInput) -> Result<Delegated> {
        let objective = input.objective.trim();
        if objective.is_empty() {
            return Err(Error::Invalid("`objective` is empty: say what the agent should do".to_owned()));
        }
        let workspace = PathBuf::from(&input.workspace);
        if input.workspace.is_empty() || !workspace.is_absolute() {
            return Err(Error::Invalid(format!(
                "`workspace` must be an absolute directory path, got `{}`",
                input.workspace
            )));
        }
        if !workspace.is_dir() {
            return Err(Error::Invalid(format!("workspace {} is not a directory", workspace.display())));
        }
        let project = project_root(&workspace);
        let (config, config_problem) = self.load_config(&project)?;
        let resolution = resolve::resolve(&config, &project, &input).map_err(|e| match &config_problem {
            // The request may name what the broken file declares: say so.
            Some(problem) => e.with_note(&format!("note: {problem}; the last good config was used")),
            None => e,
        })?;
        let mut warnings = resolution.warnings.clone();
        if let Some(problem) = config_problem {
            warnings.insert("config_warning".to_owned(), format!("{problem}; delegating with the last good config"));
        }
        let agent_id = resolution.agent.clone();
        let (mode, timeout_ms) = (resolution.mode, resolution.timeout_ms);
        let isolation = workshop::decide(&workspace, resolution.isolation, mode, config.policy.allow_inplace_write)?;
        let facts = workshop::facts(&workspace);
        // Two write tasks never share one tree at the same time: a write
        // task in place holds its tree, and the queue keeps another one
        // waiting until it is free.
        let shared_tree = (isolation == Isolation::Inplace && mode == Mode::Write)
            .then(|| facts.root.clone().unwrap_or_else(|| workspace.clone()).display().to_string());
        let session_id = input.session_id.clone().filter(|s| !s.trim().is_empty());
        match &resolution.target {
            AgentTarget::Provider { spec, .. } if session_id.is_some() && !spec.capabilities.resume => {
                return Err(Error::Invalid(format!("agent `{agent_id}` cannot resume sessions: omit `session_id`")));
            }
            AgentTarget::Generic { .. } if session_id.is_some() => {
                return Err(Error::Invalid(format!(
                    "agent `{agent_id}` is a generic agent and cannot resume a session: omit `session_id`"
                )));
            }
            _ => {}
        }
        if let Some(session) = &session_id
            && let Some(owner) = self.store.agent_of_session(session)?
            && owner != agent_id
        {
            return Err(Error::Invalid(format!(
                "session `{session}` belongs to agent `{owner}`, not `{agent_id}`: resume it with agent `{owner}`, or omit `session_id`"
            )));
        }
        // The return channel: `caesar-mcp --channel`, injected into the
        // agent's CLI where it can load an MCP server, and named in task.json
        // for OACP agents that start it themselves.
        let channel_bin = if input.channel { self.channel_binary() } else { None };
        let channel = match (&channel_bin, &resolution.target) {
            (None, _) if input.channel => {
                warnings.insert(
                    "channel_warning".to_owned(),
                    "caesar-mcp was not found beside caesard (or in CAESAR_MCP_BIN): the agent runs without the return channel".to_owned(),
                );
                false
            }
            (Some(_), AgentTarget::Provider { spec, .. })
                if !spec.capabilities.mcp_injection || needs_workspace_files(spec.id) =>
            {
                let why = if spec.capabilities.mcp_injection {
                    "reads MCP servers only from settings files in the project or your home, which caesar does not \
                     write for one task"
                } else {
                    "cannot load an MCP server for one run"
                };
                warnings.insert(
                    "channel_warning".to_owned(),
                    format!("agent `{agent_id}` {why}: it runs without the return channel"),
                );
                false
            }
            (Some(_), _) => true,
            (None, _) => false,
        };
        let secret = crate::ids::secret();

        let id = crate::ids::task_id();
        let task_dir = self.paths.state_dir.join("tasks").join(&id);
        std::fs::create_dir_all(&task_dir).map_err(|e| Error::io_at("cannot create", &task_dir, e))?;
        // A delegation refused from here on (a full disk) leaves no directory behind.
        let mut unrecorded = UnrecordedDir(Some(task_dir.clone()));
        let report_path = task_dir.join("report.json");
        let events_path = task_dir.join(EVENTS_FILE);
        let created_ms = now_ms();
        let mut context = input.context.clone();
        if !resolution.system_prompt.trim().is_empty() {
            context = format!("{}\n\n{context}", resolution.system_prompt.trim()).trim().to_owned();
        }
        let doc = TaskDoc {
            protocol: TASK_PROTOCOL.to_owned(),
            id: id.clone(),
            created_at: rfc3339(created_ms),
            role: resolution.role.as_ref().map(|r| r.name.clone()),
            agent: agent_id.clone(),
            objective: objective.to_owned(),
            context,
            constraints: input.constraints.clone(),
            acceptance_criteria: input.acceptance_criteria.clone(),
            mode,
            isolation,
            network: resolution.network.available,
            workspace: workspace.display().to_string(),
            base_ref: None,
            deadline_ms: timeout_ms,
            depth: input.depth + 1,
            report_path: report_path.display().to_string(),
            events_path: events_path.display().to_string(),
            channel: None,
            model: resolution.model.clone(),
        };
        // The agent works where the workshop will put it: a worktree's
        // counterpart of the workspace, known before it exists.
        let mut doc = doc;
        if isolation == Isolation::Worktree
            && let Some(root) = &facts.root
        {
            let rel = workspace.strip_prefix(root).unwrap_or(Path::new(""));
            doc.workspace = root.join(workshop::WORKTREES_DIR).join(&id).join(rel).display().to_string();
            doc.base_ref = facts.head.clone();
        }
        if channel && let Some(bin) = &channel_bin {
            doc.channel = Some(serde_json::json!({
                "transport": "mcp-stdio",
                "command": bin.display().to_string(),
                "args": ["--channel"],
                "server_name": CHANNEL_SERVER,
            }));
        }
        let prompt = agents::brief(&doc);
        let channel_env: Vec<(String, String)> = vec![
            ("CAESAR_TASK_ID".to_owned(), id.clone()),
            ("CAESAR_CHANNEL_SECRET".to_owned(), secret.clone()),
            ("CAESAR_SOCKET".to_owned(), self.paths.socket.display().to_string()),
        ];
        let channel_args = vec!["--channel".to_owned()];
        let channel_bin_s = channel_bin.as_ref().map(|b| b.display().to_string()).unwrap_or_default();
        let task_dir_s = task_dir.display().to_string();
        let mut launch = match &resolution.target {
            AgentTarget::Generic { def, program } => {
                let mut args = agents::expand_args(
                    &def.args,
                    &TokenValues {
                        prompt: Some(&prompt),
                        workspace: Some(&doc.workspace),
                        task_dir: Some(&task_dir_s),
                        report_path: Some(&doc.report_path),
                        model: resolution.model.as_deref(),
                    },
                );
                if resolution.network.request == Some(false) {
                    args.extend(def.network_args.iter().flatten().cloned());
                }
                Launch {
                    program: program.display().to_string(),
                    args,
                    env: def.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    parser: provider::GENERIC.to_owned(),
                    ..Launch::default()
                }
            }
            AgentTarget::Provider { spec, program } => {
                // Tier 2: where the CLI can constrain its final answer to a
                // schema, it gets the report's (strict variant).
                let schema_path = if spec.capabilities.structured_output {
                    let path = task_dir.join("report.schema.json");
                    let schema = crate::oacp::schema("report", true).unwrap_or_default();
                    std::fs::write(&path, schema.to_string()).map_err(|e| Error::io_at("cannot write", &path, e))?;
                    Some(path.display().to_string())
                } else {
                    None
                };
                let invocation = provider::Invocation {
                    prompt: &prompt,
                    mode,
                    model: resolution.model.as_deref(),
                    effort: input.effort.as_deref().filter(|e| !e.is_empty()),
                    resume_session: session_id.as_deref(),
                    workspace: &doc.workspace,
                    output_schema_path: schema_path.as_deref(),
                    mcp: channel.then_some(provider::McpServer {
                        name: CHANNEL_SERVER,
                        command: &channel_bin_s,
                        args: &channel_args,
                        env: &channel_env,
                        tools: &CHANNEL_TOOLS,
                    }),
                    network: resolution.network.request,
                };
                let built = provider::build_launch(spec.id, &invocation)
                    .ok_or_else(|| Error::Internal(format!("no launch for provider {}", spec.id)))?;
                for (name, content) in &built.files {
                    if name.contains("..") || Path::new(name).is_absolute() {
                        return Err(Error::Internal(format!("provider file `{name}` escapes the task directory")));
                    }
                    let path = task_dir.join(name);
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
                    }
                    std::fs::write(&path, content).map_err(|e| Error::io_at("cannot write", &path, e))?;
                }
                Launch {
                    program: program.display().to_string(),
                    args: built.args,
                    env: built.env,
                    parser: spec.id.to_owned(),
                    native_report: schema_path.is_some(),
                    stdin: built.stdin,
                    ..Launch::default()
                }
            }
        };
        launch.findings = resolution.findings.clone();
        launch.channel = channel;
        launch.plan = Some(agents::WorkshopPlan {
            isolation: match isolation {
                Isolation::Worktree => IsolationPref::Worktree,
                Isolation::Inplace => IsolationPref::Inplace,
            },
            label: resolution.role.as_ref().map(|r| r.name.clone()).unwrap_or_else(|| agent_id.clone()),
            allow_inplace_write: config.policy.allow_inplace_write,
            worktree: config.worktree.clone(),
            shared_tree,
        });
        launch.max_parallel = config.policy.max_parallel;
        let task_json = serde_json::to_vec_pretty(&doc).map_err(|e| Error::Internal(e.to_string()))?;
        supervisor::write_atomic(&task_dir.join("task.json"), &task_json)
            .map_err(|e| Error::io_at("cannot write", &task_dir.join("task.json"), e))?;

        let record = TaskRecord {
            id: id.clone(),
            created_ms,
            agent: agent_id,
            role: doc.role.clone(),
            mode,
            isolation,
            network: doc.network,
            model: resolution.model.clone(),
            objective: objective.to_owned(),
            workspace: workspace.display().to_string(),
            task_dir: task_dir_s,
            timeout_ms,
            depth: input.depth,
            status: TaskStatus::Pending,
            started_ms: None,
            finished_ms: None,
            exit_code: None,
            signal: None,
            error: None,
            supervisor_pid: None,
            supervisor_start: None,
            boot_id: None,
            log_offset: 0,
            session_id: session_id.clone(),
            cancel_requested: false,
            secret,
            event_count: 0,
            last_event: None,
            blocker: None,
            launch_json: serde_json::to_string(&launch).map_err(|e| Error::Internal(e.to_string()))?,
            workshop: None,
            changes_state: None,
        };
        self.store.insert_task(&record)?;
        unrecorded.0 = None;
        self.schedule().await;
        let record = self.record(&id)?;
        Ok(Delegated { record, warnings })
    }

    /// Gives the queue a turn. Tasks start when one is delegated or one ends;
    /// this also starts those whose start failed, and whose failure could not
    /// even be recorded (a full disk), once the cause is gone. The daemon
    /// calls it every few seconds.
    pub async fn retry_queue(self: &Arc<Self>) {
        self.schedule().await;
    }

    /// Starts queued tasks, oldest first, while fewer tasks run than the
    /// head of the queue allows (its project's `max_parallel`). The queue is
    /// FIFO across every client of the daemon: a task never overtakes an
    /// older one.
    ///
    /// Boxed: starting a task spawns its monitor, which schedules again
    /// when the task ends, and that cycle needs one named future type.
    fn schedule(self: &Arc<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.schedule_now())
    }

    async fn schedule_now(self: &Arc<Self>) {
        let _turn = self.scheduling.lock().await;
        let tree_of = |t: &TaskRecord| {
            serde_json::from_str::<Launch>(&t.launch_json).ok().and_then(|l| l.plan).and_then(|p| p.shared_tree)
        };
        let Ok(running) = self.store.tasks(&[TaskStatus::Running], u32::MAX) else { return };
        let mut count = running.len() as u32;
        let mut busy: Vec<String> = running.iter().filter_map(tree_of).collect();
        let Ok(mut pending) = self.store.tasks(&[TaskStatus::Pending], u32::MAX) else { return };
        pending.reverse();
        for task in pending {
            let max_parallel = serde_json::from_str::<Launch>(&task.launch_json).map(|l| l.max_parallel).unwrap_or(0);
            if max_parallel > 0 && count >= max_parallel {
                return;
            }
            // A task whose tree a running write task holds keeps its place;
            // tasks behind it that need no busy tree may go first.
            let tree = tree_of(&task);
            if tree.as_ref().is_some_and(|t| busy.contains(t)) {
                continue;
            }
            let id = task.id.clone();
            match self.start(task).await {
                Ok(_) => {
                    count += 1;
                    busy.extend(tree);
                }
                Err(e) => warn!(task_id = %id, "could not start: {e}"),
            }
        }
    }

    /// Starts the supervisor of a recorded task and its monitor.
    async fn start(self: &Arc<Self>, record: TaskRecord) -> Result<TaskRecord> {
        let launch: Launch =
            serde_json::from_str(&record.launch_json).map_err(|e| Error::Internal(format!("stored launch: {e}")))?;
        let task_dir = PathBuf::from(&record.task_dir);
        let workdir = match self.prepare_workshop(&record, &launch).await {
            Ok(dir) => dir,
            Err(why) => {
                self.fail_unstarted(&record, &why)?;
                return Err(Error::Precondition(why));
            }
        };
        let started_ms = now_ms();
        let stdin_close_after = match &launch.stdin {
            provider::Stdin::Null => None,
            provider::Stdin::Control { initial, close_after } => {
                let path = task_dir.join(supervisor::STDIN_INITIAL);
                if let Err(e) = std::fs::write(&path, initial) {
                    let why = format!("cannot write {}: {e}", path.display());
                    self.fail_unstarted(&record, &why)?;
                    return Err(Error::Internal(why));
                }
                Some(close_after.clone())
            }
        };
        let sargs = SuperviseArgs {
            task_dir: task_dir.clone(),
            deadline_ms: started_ms + record.timeout_ms as i64,
            grace_ms: self.settings.grace_ms,
            log_cap: self.settings.raw_log_cap,
            stdin_close_after: stdin_close_after.clone(),
            program: launch.program.clone(),
            args: launch.args.clone(),
        };
        let mut cmd = tokio::process::Command::new(&self.settings.supervisor_exe);
        cmd.args(sargs.to_argv())
            .current_dir(&workdir)
            // [V] opencode takes its working directory from PWD, which the daemon inherited
            // from wherever it was started: left alone, the agent edits that directory.
            .env("PWD", &workdir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env("CAESAR_TASK_DIR", &task_dir)
            .env("CAESAR_TASK_FILE", task_dir.join("task.json"))
            .env("CAESAR_REPORT_PATH", task_dir.join("report.json"))
            .env("CAESAR_EVENTS_PATH", task_dir.join(EVENTS_FILE))
            .env("CAESAR_TASK_ID", &record.id)
            .env("CAESAR_AGENT", &record.agent)
            .env("CAESAR_DEPTH", (record.depth + 1).to_string())
            .env("CAESAR_PROTOCOL_VERSION", OACP_VERSION)
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        if launch.channel {
            // What the in-agent channel server needs to reach this task, and
            // only this task.
            cmd.env("CAESAR_CHANNEL_SECRET", &record.secret).env("CAESAR_SOCKET", &self.paths.socket);
        }
        match std::fs::File::create(task_dir.join(SUPERVISOR_LOG)) {
            Ok(f) => cmd.stderr(f),
            Err(_) => cmd.stderr(std::process::Stdio::null()),
        };
        #[cfg(unix)]
        // SAFETY: setsid is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
        }
        let live = Live::new(TaskStatus::Running, record.event_count);
        self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), live.clone());
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let why = format!("cannot start the supervisor {}: {e}", self.settings.supervisor_exe.display());
                self.fail_unstarted(&record, &why)?;
                return Err(Error::Internal(why));
            }
        };
        let pid = child.id().unwrap_or(0);
        let boot_id = supervisor::boot_id();
        let running =
            Running { started_ms, pid, start_time: supervisor::process_start_time(pid), boot_id: boot_id.as_deref() };
        let started = EventBody::Started { agent: record.agent.clone(), command: launch.display() };
        self.emit_with(&record.id, &task_dir, &live, vec![started], |events| {
            self.store.set_running(&record.id, &running, events)?;
            Ok(true)
        })?;
        let run = Run {
            id: record.id.clone(),
            task_dir: task_dir.clone(),
            tail: LogTail::new(&task_dir.join(supervisor::RAW_LOG), 0),
            parser: parser_for(&launch.parser),
            generic: launch.parser == provider::GENERIC,
            final_text: None,
            messages: String::new(),
            session_id: None,
            blocker: None,
            supervisor_pid: Some(pid),
            live,
            bridge: stdin_close_after.map(|_| launch.parser.clone()),
            permission_deadlines: Vec::new(),
            deadline_ms: started_ms + record.timeout_ms as i64,
        };
        info!(task_id = %record.id, pid, "task started");
        let engine = self.clone();
        let span = info_span!("task", task_id = %record.id);
        tokio::spawn(async move { engine.monitor(run, Waiter::Child(child)).await }.instrument(span));
        self.store.task(&record.id)?.ok_or_else(|| Error::Internal("task vanished from the store".to_owned()))
    }

    /// Prepares where the task runs (a worktree, or the workspace with a
    /// snapshot of it), records it, and returns the agent's directory. A
    /// failure (a setup command, a worktree that cannot be made) is the
    /// reason the task fails.
    async fn prepare_workshop(&self, record: &TaskRecord, launch: &Launch) -> std::result::Result<PathBuf, String> {
        let Some(plan) = launch.plan.clone() else { return Ok(PathBuf::from(&record.workspace)) };
        let (id, workspace, objective, mode) =
            (record.id.clone(), PathBuf::from(&record.workspace), record.objective.clone(), record.mode);
        let prepared = tokio::task::spawn_blocking(move || {
            workshop::prepare(&workshop::PrepareInput {
                workspace: &workspace,
                task_id: &id,
                label: &plan.label,
                objective: &objective,
                isolation: plan.isolation,
                mode,
                allow_inplace_write: plan.allow_inplace_write,
                config: &plan.worktree,
                setup_timeout: Some(Duration::from_secs(30 * 60)),
            })
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let json = serde_json::to_string(&prepared).map_err(|e| e.to_string())?;
        self.store.set_workshop(&record.id, &json).map_err(|e| e.to_string())?;
        if prepared.isolation == Isolation::Worktree {
            // task.json tells the agent the frozen base and where it works.
            let path = Path::new(&record.task_dir).join("task.json");
            if let Ok(mut doc) = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<TaskDoc>(&b).map_err(|e| e.to_string()))
            {
                doc.base_ref = prepared.base_ref.clone();
                doc.workspace = prepared.workdir.display().to_string();
                if let Ok(bytes) = serde_json::to_vec_pretty(&doc) {
                    let _ = supervisor::write_atomic(&path, &bytes);
                }
            }
        }
        Ok(prepared.workdir)
    }

    fn fail_unstarted(&self, record: &TaskRecord, why: &str) -> Result<()> {
        let report = report::recover(&report::Inputs {
            task_id: &record.id,
            report_path: &Path::new(&record.task_dir).join("report.json"),
            texts: &[],
            ending: Ending::Failed(why.to_owned()),
            duration_ms: 0,
            native: None,
        });
        self.finish_task(record, Exit::without_process(TaskStatus::Failed, Some(why.to_owned())), report, None)
    }

    // ---------------------------------------------------------------- monitor

    async fn monitor(self: Arc<Self>, mut run: Run, mut waiter: Waiter) {
        let mut tick = tokio::time::interval(self.settings.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u64 = 0;
        loop {
            match &mut waiter {
                Waiter::Child(child) => {
                    tokio::select! {
                        _ = child.wait() => break,
                        _ = tick.tick() => {}
                    }
                }
                Waiter::Reattached { pid, start, boot } => {
                    tick.tick().await;
                    ticks += 1;
                    if run.task_dir.join(supervisor::EXIT_FILE).exists() {
                        break;
                    }
                    if ticks.is_multiple_of(25) && !supervisor::is_same_process_alive(*pid, *start, boot.as_deref()) {
                        break;
                    }
                }
            }
            if let Err(e) = self.pump(&mut run, false) {
                warn!(task_id = %run.id, "reading the agent's output failed: {e}");
            }
            if !run.permission_deadlines.is_empty() {
                self.expire_permissions(&mut run);
            }
        }
        if let Err(e) = self.pump(&mut run, true) {
            warn!(task_id = %run.id, "reading the agent's last output failed: {e}");
        }
        self.conclude_until_stored(&mut run).await;
        // A slot is free: start the next queued task.
        self.schedule().await;
    }

    /// Reads new output, parses it and stores the events.
    fn pump(&self, run: &mut Run, at_end: bool) -> Result<()> {
        loop {
            let lines = run.tail.read_lines(at_end)?;
            if lines.is_empty() {
                break;
            }
            let mut bodies = Vec::new();
            for line in &lines {
                let parsed = run.parser.parse_line(line, Stream::Stdout);
                self.absorb(run, parsed, &mut bodies);
            }
            self.emit(run, bodies)?;
            if !run.tail.has_more() {
                break;
            }
        }
        if at_end {
            let mut bodies = Vec::new();
            let parsed = run.parser.finish();
            self.absorb(run, parsed, &mut bodies);
            if !bodies.is_empty() {
                self.emit(run, bodies)?;
            }
        }
        Ok(())
    }

    fn absorb(&self, run: &mut Run, parsed: Parsed, bodies: &mut Vec<EventBody>) {
        for body in &parsed.events {
            let activity = match body {
                EventBody::Message { .. } => Some(("message", String::new(), String::new())),
                EventBody::Thinking { .. } => Some(("thinking", String::new(), String::new())),
                EventBody::ToolUse { tool, status, .. } => Some((
                    "tool_use",
                    tool.clone(),
                    serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                )),
                _ => None,
            };
            if let Some((kind, mut tool_name, state)) = activity {
                let mut slot = run.live.activity.lock().unwrap_or_else(|p| p.into_inner());
                // A tool's end may carry only its call id: keep the name of its start.
                if kind == "tool_use"
                    && tool_name.is_empty()
                    && let Some(prev) = slot.as_ref().filter(|a| a.kind == "tool_use")
                {
                    tool_name = prev.tool_name.clone();
                }
                *slot = Some(Activity { kind, tool_name, state, at_ms: now_ms() });
            }
            if let EventBody::Message { text } = body {
                run.messages.push_str(text);
                run.messages.push('\n');
                if run.messages.len() > 2 * MESSAGE_KEEP {
                    let keep = report::tail_chars(&run.messages, MESSAGE_KEEP);
                    run.messages = keep;
                }
                let tail = report::tail_chars(text, OUTPUT_TAIL_CHARS);
                *run.live.output.lock().unwrap_or_else(|p| p.into_inner()) = Some((tail, now_ms()));
            }
        }
        bodies.extend(parsed.events);
        if let Some(ask) = parsed.permission {
            self.ask_permission(run, ask, bodies);
        }
        if let Some(text) = parsed.final_text {
            run.final_text = Some(text);
        }
        let mut changed = false;
        if let Some(session) = parsed.session_id
            && run.session_id.as_deref() != Some(&session)
        {
            run.session_id = Some(session);
            changed = true;
        }
        // The parser has already emitted the `blocker` event itself.
        if let Some(blocker) = parsed.blocker
            && run.blocker.is_none()
        {
            // An auth or quota blocker will not clear by itself: CLIs that
            // retry on it only burn time, so the run is stopped now. A
            // permission denial is left to the agent, which may go on.
            #[cfg(unix)]
            if matches!(blocker.0, BlockerKind::Auth | BlockerKind::RateLimit)
                && let Some(pid) = run.supervisor_pid
            {
                info!(task_id = %run.id, kind = blocker_name(blocker.0), "blocker recognized: stopping the run");
                supervisor::request_stop(pid);
            }
            run.blocker = Some(blocker);
            changed = true;
            run.live.attention.send_modify(|n| *n += 1);
        }
        if changed {
            let kind = run.blocker.as_ref().map(|(k, _)| blocker_name(*k));
            if let Err(e) = self.store.set_session_and_blocker(&run.id, run.session_id.as_deref(), kind) {
                warn!(task_id = %run.id, "storing the session id failed: {e}");
            }
        }
    }

    /// Numbers, stores (with the log offset), writes to `events.jsonl` and
    /// broadcasts a batch of events.
    fn emit(&self, run: &mut Run, bodies: Vec<EventBody>) -> Result<()> {
        self.emit_events(&run.id, &run.task_dir, &run.live, bodies, Some(run.tail.offset())).map(|_| ())
    }

    /// Numbers, stores (with the log offset when the output produced them),
    /// appends to `events.jsonl` and broadcasts a batch of events. Returns
    /// the last sequence number used.
    fn emit_events(
        &self,
        id: &str,
        task_dir: &Path,
        live: &Live,
        bodies: Vec<EventBody>,
        offset: Option<u64>,
    ) -> Result<u64> {
        self.emit_with(id, task_dir, live, bodies, |records| {
            self.store.append_events(id, records, offset)?;
            Ok(true)
        })
    }

    /// Numbers a batch of events and hands it to `store`, which writes it in
    /// the same transaction as the state change it comes with (a task's start
    /// or end) and says whether it did. `events.jsonl` gets the batch first,
    /// so that it is whole by the time a reader of the store sees the change
    /// (a finished task's file ends with `finished`); it is cut back when the
    /// store refuses the batch, and repaired from the store after a crash.
    /// Only stored events reach the watchers.
    fn emit_with(
        &self,
        id: &str,
        task_dir: &Path,
        live: &Live,
        bodies: Vec<EventBody>,
        store: impl FnOnce(&[EventRecord]) -> Result<bool>,
    ) -> Result<u64> {
        let mut next = live.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let at = rfc3339(now_ms());
        let first = *next;
        let records: Vec<EventRecord> = bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| EventRecord {
                protocol: EVENT_PROTOCOL.to_owned(),
                seq: first + i as u64,
                at: at.clone(),
                task_id: id.to_owned(),
                body,
            })
            .collect();
        let mut text = String::new();
        let mut lines = Vec::with_capacity(records.len());
        for r in &records {
            let line = serde_json::to_string(r).map_err(|e| Error::Internal(e.to_string()))?;
            text.push_str(&line);
            text.push('\n');
            lines.push((r.seq, line));
        }
        let file = task_dir.join(EVENTS_FILE);
        let before = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        append_file(&file, text.as_bytes());
        let stored = store(&records);
        if !matches!(stored, Ok(true)) {
            let _ = std::fs::OpenOptions::new().write(true).open(&file).and_then(|f| f.set_len(before));
        }
        if !stored? || records.is_empty() {
            return Ok(first.saturating_sub(1));
        }
        *next = first + records.len() as u64;
        if let Some(watchers) = live.events.get() {
            for l in lines {
                let _ = watchers.send(l);
            }
        }
        Ok(*next - 1)
    }

    /// Ends a task whose supervisor is gone: status, report, `finished`.
    fn conclude(&self, run: &mut Run) -> Result<()> {
        let Some(record) = self.store.task(&run.id)? else {
            return Ok(());
        };
        let exit = supervisor::read_exit(&run.task_dir);
        let (status, ending, error) = match &exit {
            None => {
                // The supervisor died without a word; its agent must not
                // run on unwatched. Its group if it was recorded, and every
                // process carrying the task's id in its environment.
                #[cfg(unix)]
                if let Some(agent) = supervisor::read_agent(&run.task_dir) {
                    supervisor::kill_group(agent.pid);
                }
                supervisor::kill_by_task_env(&run.id);
                let why = "the task's supervisor process vanished without recording how the agent ended (killed, or the machine restarted)".to_owned();
                (TaskStatus::Failed, Ending::Failed(why.clone()), Some(why))
            }
            Some(e) => {
                if let Some(err) = &e.spawn_error {
                    (TaskStatus::Failed, Ending::Failed(err.clone()), Some(err.clone()))
                } else if record.cancel_requested {
                    (TaskStatus::Cancelled, Ending::Cancelled, None)
                } else if e.timed_out {
                    (TaskStatus::TimedOut, Ending::TimedOut { after_ms: record.timeout_ms }, None)
                } else if let Some((kind, message)) = &run.blocker {
                    let status = if e.exit_code == Some(0) { TaskStatus::Succeeded } else { TaskStatus::Failed };
                    (status, Ending::Blocked { kind: blocker_name(*kind).to_owned(), message: message.clone() }, None)
                } else if e.terminated {
                    let why =
                        "the task's supervisor was told to stop (SIGTERM) by someone other than caesar".to_owned();
                    (TaskStatus::Failed, Ending::Failed(why.clone()), Some(why))
                } else {
                    match (e.exit_code, e.signal) {
                        (Some(0), _) => (TaskStatus::Succeeded, Ending::Exited(0), None),
                        (Some(code), _) => (TaskStatus::Failed, Ending::Exited(code), None),
                        (None, Some(sig)) => (TaskStatus::Failed, Ending::Signalled(sig), None),
                        (None, None) => (TaskStatus::Failed, Ending::Failed("no exit status".to_owned()), None),
                    }
                }
            }
        };
        // A provider's raw output is its JSON stream, no place for a summary:
        // only a generic agent's raw output is read as its words.
        let raw_tail = if run.generic {
            tail::read_tail(&run.task_dir.join(supervisor::RAW_LOG), 256 * 1024).unwrap_or_default().0
        } else {
            String::new()
        };
        let final_text = run.final_text.clone().unwrap_or_default();
        let launch_native =
            serde_json::from_str::<Launch>(&record.launch_json).map(|l| l.native_report).unwrap_or(false);
        let texts = [final_text.as_str(), run.messages.as_str(), raw_tail.as_str()];
        let duration_ms = record
            .started_ms
            .map(|s| (exit.as_ref().map(|e| e.finished_ms).unwrap_or_else(now_ms) - s).max(0) as u64)
            .unwrap_or(0);
        let recovered = report::recover(&report::Inputs {
            task_id: &run.id,
            report_path: &run.task_dir.join("report.json"),
            texts: &texts,
            ending,
            duration_ms,
            native: launch_native.then_some(final_text.as_str()),
        });
        let mut recovered = recovered;
        if let Ok(launch) = serde_json::from_str::<Launch>(&record.launch_json) {
            recovered.0.findings.extend(launch.findings);
        }
        self.verify_changes(&record, &mut recovered.0);
        let finished = EventBody::Finished {
            status: recovered.0.status,
            summary: report::tail_chars(&recovered.0.summary, 500),
            exit_code: exit.as_ref().and_then(|e| e.exit_code),
        };
        let ended = Exit {
            status,
            exit_code: exit.as_ref().and_then(|e| e.exit_code),
            signal: exit.as_ref().and_then(|e| e.signal),
            error,
        };
        self.finish_task(&record, ended, recovered, Some((&run.live, finished)))?;
        info!(task_id = %run.id, status = status.as_str(), "task finished");
        Ok(())
    }

    /// Git decides, not the agent's word: reconciles the report's changes
    /// with the diff of the task's workshop, and flags a read-only task
    /// that modified files.
    fn verify_changes(&self, record: &TaskRecord, report: &mut crate::oacp::Report) {
        let prepared = record.workshop.as_deref().and_then(|w| serde_json::from_str::<workshop::Prepared>(w).ok());
        let diff = match &prepared {
            Some(p) if p.repo_root.is_some() => match workshop::diff(p) {
                Ok(d) => Some(d),
                Err(e) => {
                    report.findings.push(crate::oacp::Finding {
                        severity: crate::oacp::Severity::Medium,
                        title: "the changes could not be checked against git".to_owned(),
                        file: None,
                        line: None,
                        detail: e.to_string(),
                    });
                    None
                }
            },
            _ => None,
        };
        if let Some(p) = &prepared {
            report.findings.extend(p.findings.iter().cloned());
        }
        let verified = workshop::reconcile(report, diff.as_ref());
        report.changes_verified_by = Some(verified.to_owned());
        if record.mode == Mode::ReadOnly
            && let Some(d) = &diff
            && let Some(finding) = workshop::read_only_violation(d)
        {
            report.findings.push(finding);
        }
    }

    fn finish_task(
        &self,
        record: &TaskRecord,
        Exit { status, exit_code, signal, error }: Exit,
        (report, source): (crate::oacp::Report, report::Source),
        finished: Option<(&Live, EventBody)>,
    ) -> Result<()> {
        let body = serde_json::to_string_pretty(&report).map_err(|e| Error::Internal(e.to_string()))?;
        let outcome = Outcome {
            status,
            exit_code,
            signal,
            finished_ms: now_ms(),
            error,
            report: StoredReport {
                source: source.as_str().to_owned(),
                status: report.status.as_str().to_owned(),
                body: body.clone(),
            },
        };
        // The `finished` event is stored with the ending, in one transaction:
        // a task ends once, and its log with it.
        match finished {
            Some((live, body)) => {
                let task_dir = Path::new(&record.task_dir);
                self.emit_with(&record.id, task_dir, live, vec![body], |events| {
                    self.store.finish(&record.id, &outcome, events)
                })?;
            }
            None => {
                self.store.finish(&record.id, &outcome, &[])?;
            }
        }
        if let Some(live) = self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&record.id) {
            live.status.send_replace(status);
        }
        // OACP readers of the task directory find the report where the
        // agent would have put it. A convenience copy (the store holds the
        // report): atomic, but not worth an fsync, and written after the
        // waiters are woken.
        let report_path = Path::new(&record.task_dir).join("report.json");
        if !report_path.exists() {
            let tmp = report_path.with_extension("tmp");
            if std::fs::write(&tmp, body.as_bytes()).is_ok() {
                let _ = std::fs::rename(&tmp, &report_path);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- recover

    /// Re-attaches to the tasks a previous daemon left pending or running.
    pub async fn recover(self: &Arc<Self>) -> Result<()> {
        let active = self.store.tasks(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)?;
        for record in active {
            let task_dir = PathBuf::from(&record.task_dir);
            let agent = supervisor::read_agent(&task_dir);
            let exited = task_dir.join(supervisor::EXIT_FILE).exists();
            let supervisor_alive = record.supervisor_pid.is_some_and(|pid| {
                supervisor::is_same_process_alive(pid, record.supervisor_start, record.boot_id.as_deref())
            });
            let mut agent = agent;
            if record.supervisor_pid.is_none() && agent.is_none() && !exited {
                // Queued, or the previous daemon died between spawning the
                // supervisor and recording it: a supervisor that runs names
                // the task in its environment, and soon writes agent.json.
                // supervisor.log is made just before the spawn: without it,
                // no supervisor was started, and /proc need not be read.
                if !task_dir.join(SUPERVISOR_LOG).exists() || supervisor::processes_of_task(&record.id).is_empty() {
                    continue;
                }
                agent = wait_for_agent_file(&task_dir).await;
                if agent.is_none() {
                    // It never got the agent started: start afresh.
                    supervisor::kill_by_task_env(&record.id);
                    continue;
                }
            }
            // Started, but the daemon died before recording the supervisor:
            // the supervisor recorded itself in agent.json.
            let (supervisor_pid, supervisor_alive) = match (record.supervisor_pid, &agent) {
                (Some(pid), _) => (pid, supervisor_alive),
                (None, Some(a)) => (a.supervisor_pid, supervisor::is_same_process_alive(a.supervisor_pid, None, None)),
                (None, None) => (0, false),
            };
            let launch: Option<Launch> = serde_json::from_str(&record.launch_json).ok();
            self.repair_events_file(&record);
            let live = Live::new(TaskStatus::Running, record.event_count);
            self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), live.clone());
            if record.supervisor_pid.is_none() && supervisor_pid != 0 {
                // Started but never recorded: record it now (with its
                // `started` event), or the queue would start it again.
                let boot_id = supervisor::boot_id();
                let running = Running {
                    started_ms: agent.as_ref().map(|a| a.started_ms).unwrap_or_else(now_ms),
                    pid: supervisor_pid,
                    start_time: supervisor::process_start_time(supervisor_pid),
                    boot_id: boot_id.as_deref(),
                };
                let started = (record.event_count == 0).then(|| EventBody::Started {
                    agent: record.agent.clone(),
                    command: launch.as_ref().map(Launch::display).unwrap_or_default(),
                });
                self.emit_with(&record.id, &task_dir, &live, started.into_iter().collect(), |events| {
                    self.store.set_running(&record.id, &running, events)?;
                    Ok(true)
                })?;
            }
            let run = Run {
                id: record.id.clone(),
                task_dir: task_dir.clone(),
                tail: LogTail::new(&task_dir.join(supervisor::RAW_LOG), record.log_offset),
                parser: parser_for(launch.as_ref().map(|l| l.parser.as_str()).unwrap_or(provider::GENERIC)),
                generic: launch.as_ref().is_none_or(|l| l.parser == provider::GENERIC),
                final_text: None,
                messages: String::new(),
                session_id: record.session_id.clone(),
                blocker: None,
                supervisor_pid: Some(supervisor_pid).filter(|p| *p != 0),
                live,
                bridge: launch
                    .as_ref()
                    .filter(|l| matches!(l.stdin, provider::Stdin::Control { .. }))
                    .map(|l| l.parser.clone()),
                permission_deadlines: Vec::new(),
                deadline_ms: record.started_ms.unwrap_or_else(now_ms) + record.timeout_ms as i64,
            };
            let waiter = Waiter::Reattached {
                pid: supervisor_pid,
                start: record.supervisor_start,
                boot: record.boot_id.clone(),
            };
            info!(task_id = %record.id, exited, supervisor_alive, "re-attaching to a task");
            let mut run = run;
            if !exited && supervisor_alive {
                self.resume_permissions(&mut run);
            }
            let engine = self.clone();
            let span = info_span!("task", task_id = %record.id);
            if exited || !supervisor_alive {
                // Nothing to wait for: drain and conclude now.
                engine.monitor_done(run).instrument(span).await;
            } else {
                tokio::spawn(async move { engine.monitor(run, waiter).await }.instrument(span));
            }
        }
        self.schedule().await;
        Ok(())
    }

    /// Makes a task's `events.jsonl` hold exactly its stored events again
    /// after a crash: lines written for a batch the store never got are cut,
    /// lines the store has and the file lacks are added.
    fn repair_events_file(&self, record: &TaskRecord) {
        let file = Path::new(&record.task_dir).join(EVENTS_FILE);
        let text = std::fs::read(&file).unwrap_or_default();
        let mut kept = 0u64;
        let mut end = 0usize;
        for (i, b) in text.iter().enumerate() {
            if *b == b'\n' {
                if kept == record.event_count {
                    break;
                }
                kept += 1;
                end = i + 1;
            }
        }
        if end < text.len() {
            warn!(task_id = %record.id, "events.jsonl had lines past the stored events: cut back");
            let _ = std::fs::OpenOptions::new().write(true).open(&file).and_then(|f| f.set_len(end as u64));
        }
        if kept < record.event_count {
            warn!(task_id = %record.id, "events.jsonl lacked stored events: completed from the store");
            let Ok(rows) = self.store.events_from(&record.id, kept, u32::MAX) else { return };
            let mut missing = String::new();
            for (_, line) in rows {
                missing.push_str(&line);
                missing.push('\n');
            }
            append_file(&file, missing.as_bytes());
        }
    }

    async fn monitor_done(self: Arc<Self>, mut run: Run) {
        if let Err(e) = self.pump(&mut run, true) {
            warn!(task_id = %run.id, "reading the agent's output failed: {e}");
        }
        self.conclude_until_stored(&mut run).await;
    }

    /// Ends the task, retrying with a growing pause while its ending cannot
    /// be stored (a full disk): a task is never left `running` because one
    /// write failed. Safe to repeat, since the ending is one transaction.
    async fn conclude_until_stored(&self, run: &mut Run) {
        let mut pause = Duration::from_millis(100);
        loop {
            match self.conclude(run) {
                Ok(()) => return,
                Err(e) => {
                    warn!(task_id = %run.id, "ending the task failed, retrying in {} ms: {e}", pause.as_millis());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// `caesar-mcp`, which serves the return channel: `CAESAR_MCP_BIN`, else
    /// beside the daemon's own executable.
    fn channel_binary(&self) -> Option<PathBuf> {
        if let Some(bin) = std::env::var_os("CAESAR_MCP_BIN").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(bin)).filter(|p| p.is_file());
        }
        let name = if cfg!(windows) { "caesar-mcp.exe" } else { "caesar-mcp" };
        self.settings.supervisor_exe.parent().map(|d| d.join(name)).filter(|p| p.is_file())
    }

    // ---------------------------------------------------------------- workshop

    fn prepared(&self, record: &TaskRecord) -> Option<workshop::Prepared> {
        record.workshop.as_deref().and_then(|w| serde_json::from_str(w).ok())
    }

    /// The diff of a worktree task. Tasks that ran in place, or not in a
    /// repository, have none here (their verified changes are in the report).
    pub fn diff(&self, id: &str) -> Result<Option<workshop::DiffResult>> {
        let record = self.record(id)?;
        match self.prepared(&record) {
            Some(p) if p.isolation == Isolation::Worktree => Ok(Some(workshop::diff(&p)?)),
            _ => Ok(None),
        }
    }

    /// Applies a finished worktree task's changes to the main working tree:
    /// 3-way, all or nothing, never a commit. A task that ran in place is a
    /// no-op (its changes are already there).
    pub fn apply(&self, id: &str) -> Result<workshop::ApplyResult> {
        let record = self.record(id)?;
        if !record.status.is_terminal() {
            return Err(Error::Precondition(format!(
                "task {id} is still {}: await it, read its diff, then apply",
                record.status.as_str()
            )));
        }
        if record.changes_state.as_deref() == Some("discarded") {
            return Err(Error::Precondition(format!("task {id}'s changes were discarded")));
        }
        let Some(p) = self.prepared(&record).filter(|p| p.isolation == Isolation::Worktree) else {
            return Ok(workshop::ApplyResult {
                applied: true,
                already_applied: false,
                conflicts: Vec::new(),
                files: Vec::new(),
                message: "the task ran in place: its changes are already in the working tree".to_owned(),
            });
        };
        let result = workshop::apply(&p)?;
        if result.applied || result.already_applied {
            self.store.set_changes_state(id, "applied")?;
        }
        Ok(result)
    }

    /// Marks a task's changes as unwanted: gc may then remove its worktree.
    pub fn discard(&self, id: &str) -> Result<()> {
        let record = self.record(id)?;
        if !record.status.is_terminal() {
            return Err(Error::Precondition(format!("task {id} is still running: cancel it first")));
        }
        if record.changes_state.as_deref() == Some("applied") {
            return Err(Error::Precondition(format!("task {id}'s changes were already applied")));
        }
        self.store.set_changes_state(id, "discarded")?;
        Ok(())
    }

    /// Removes the worktrees (and branches) of tasks finished longer ago than
    /// `older_than`. Never a worktree whose changes were neither applied nor
    /// discarded, nor a branch with commits reachable from nowhere else,
    /// unless `force`.
    pub fn gc(&self, older_than: Duration, dry_run: bool, force: bool) -> Result<Vec<GcItem>> {
        let cutoff = now_ms() - older_than.as_millis() as i64;
        let finished = self.store.tasks(
            &[TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled, TaskStatus::TimedOut],
            u32::MAX,
        )?;
        let mut items = Vec::new();
        for record in finished {
            let Some(p) = self.prepared(&record).filter(|p| p.isolation == Isolation::Worktree) else { continue };
            let Some(worktree) = p.worktree.clone() else { continue };
            if !worktree.exists() {
                continue;
            }
            let item = |action: &str, reason: String| GcItem {
                task_id: record.id.clone(),
                worktree: worktree.display().to_string(),
                action: action.to_owned(),
                reason,
                bytes: workshop::disk_usage(&worktree),
            };
            if record.finished_ms.unwrap_or(i64::MAX) > cutoff {
                items.push(item("kept", "finished too recently".to_owned()));
                continue;
            }
            let decided = record.changes_state.is_some();
            if !decided && !force && workshop::has_unmerged_work(&p).unwrap_or(true) {
                items.push(item(
                    "kept",
                    format!(
                        "its changes were neither applied nor discarded: `caesar apply {0}` or `caesar discard {0}`",
                        record.id
                    ),
                ));
                continue;
            }
            if dry_run {
                items.push(item("would remove", String::new()));
                continue;
            }
            let bytes = workshop::disk_usage(&worktree);
            let removal = if record.changes_state.as_deref() == Some("discarded") {
                workshop::remove_discarded(&p, force)
            } else {
                workshop::remove(&p, force)
            };
            match removal {
                Ok(r) => items.push(GcItem {
                    bytes,
                    ..item("removed", r.branch_kept.map(|b| format!("branch kept: {b}")).unwrap_or_default())
                }),
                Err(e) => items.push(item("kept", e.to_string())),
            }
        }
        Ok(items)
    }

    // ---------------------------------------------------------------- channel

    /// The task a return-channel call speaks for, once its secret matches.
    /// The secret binds a channel to one task: it can reach nothing else.
    fn channel_record(&self, task_id: &str, secret: &str) -> Result<TaskRecord> {
        let record = self.record(task_id)?;
        if !crate::ids::secrets_match(&record.secret, secret) {
            return Err(Error::Refused(format!(
                "the channel secret does not match task {task_id}: a channel speaks only for the task that started it"
            )));
        }
        Ok(record)
    }

    fn channel_live(&self, record: &TaskRecord) -> Result<Arc<Live>> {
        if record.status.is_terminal() {
            return Err(Error::Precondition(format!("task {} has ended ({})", record.id, record.status.as_str())));
        }
        self.live(&record.id)
            .ok_or_else(|| Error::Precondition(format!("task {} is not running yet; retry in a moment", record.id)))
    }

    /// `get_task`: the mission, as `task.json` holds it.
    pub fn channel_get_task(&self, task_id: &str, secret: &str) -> Result<String> {
        let record = self.channel_record(task_id, secret)?;
        let path = Path::new(&record.task_dir).join("task.json");
        std::fs::read_to_string(&path).map_err(|e| Error::io_at("cannot read", &path, e))
    }

    /// `report_progress`: a `progress` event in the task's log. Returns its seq.
    pub fn channel_progress(&self, task_id: &str, secret: &str, message: &str, pct: Option<f64>) -> Result<u64> {
        let record = self.channel_record(task_id, secret)?;
        let live = self.channel_live(&record)?;
        if message.trim().is_empty() {
            return Err(Error::Invalid("`message` is empty: say what progress was made".to_owned()));
        }
        let pct = pct.map(|p| p.clamp(0.0, 100.0));
        self.emit_events(
            &record.id,
            Path::new(&record.task_dir),
            &live,
            vec![EventBody::Progress { message: message.to_owned(), pct }],
            None,
        )
    }

    /// `ask_orchestrator`: stores the question (durably, first), shows it in
    /// status and await, wakes awaiters, then waits for the answer until
    /// `timeout` or the task's deadline. With no answer in time it returns
    /// `answered: false` and an invitation to proceed; that is not an error.
    /// Passing `question_id` resumes waiting on a question already asked
    /// (a channel that reconnected after a restart).
    pub async fn channel_ask(
        &self,
        task_id: &str,
        secret: &str,
        question: &str,
        options: Vec<String>,
        timeout: Duration,
        question_id: Option<&str>,
    ) -> Result<(String, bool, String)> {
        let record = self.channel_record(task_id, secret)?;
        let live = self.channel_live(&record)?;
        let mut answers = live.answers.subscribe();
        // The channel may pick the id itself, so that after a daemon restart
        // it can ask again and keep waiting on the same question.
        let asked_before = match question_id.filter(|q| !q.is_empty()) {
            Some(qid) => {
                if !qid.starts_with("q_") || qid.len() > 40 || !qid[2..].bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return Err(Error::Invalid(format!(
                        "question id `{qid}` is malformed: use q_ and letters or digits"
                    )));
                }
                self.store.question(task_id, qid)?.map(|_| qid.to_owned()).ok_or_else(|| qid.to_owned())
            }
            None => Err(crate::ids::question_id()),
        };
        let qid = match asked_before {
            Ok(qid) => qid,
            Err(new_id) => {
                if question.trim().is_empty() {
                    return Err(Error::Invalid("`question` is empty: ask something".to_owned()));
                }
                let q = QuestionRecord {
                    task_id: task_id.to_owned(),
                    question_id: new_id,
                    question: question.to_owned(),
                    options: options.clone(),
                    asked_ms: now_ms(),
                    answer: None,
                };
                self.store.insert_question(&q)?;
                self.emit_events(
                    task_id,
                    Path::new(&record.task_dir),
                    &live,
                    vec![EventBody::Question { id: q.question_id.clone(), question: q.question.clone(), options }],
                    None,
                )?;
                live.attention.send_modify(|n| *n += 1);
                q.question_id
            }
        };
        let task_deadline = record.started_ms.unwrap_or_else(now_ms) + record.timeout_ms as i64;
        let wait = timeout.min(Duration::from_millis((task_deadline - now_ms()).max(0) as u64));
        let until = tokio::time::Instant::now() + wait;
        let mut status = live.status.subscribe();
        loop {
            if let Some((q, _)) = self.store.question(task_id, &qid)?
                && let Some(answer) = q.answer
            {
                self.store.mark_delivered(task_id, &qid)?;
                return Ok((qid, true, answer));
            }
            tokio::select! {
                _ = answers.changed() => {}
                _ = status.wait_for(|s| s.is_terminal()) => break,
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        Ok((
            qid,
            false,
            format!(
                "No answer from the orchestrator within {} s. Proceed on your best judgment, and say in your report what you assumed.",
                wait.as_secs()
            ),
        ))
    }

    /// `submit_report`: validated at once; an invalid report is refused with
    /// the failing field so the agent can correct it and submit again.
    pub fn channel_submit_report(&self, task_id: &str, secret: &str, report_json: &str) -> Result<()> {
        let record = self.channel_record(task_id, secret)?;
        let live = self.channel_live(&record)?;
        let report = crate::oacp::Report::parse(report_json).map_err(|e| Error::Invalid(e.to_string()))?;
        let path = Path::new(&record.task_dir).join(report::CHANNEL_REPORT);
        let body = serde_json::to_vec_pretty(&report).map_err(|e| Error::Internal(e.to_string()))?;
        supervisor::write_atomic(&path, &body).map_err(|e| Error::io_at("cannot write", &path, e))?;
        self.emit_events(
            &record.id,
            Path::new(&record.task_dir),
            &live,
            vec![EventBody::Progress { message: format!("report submitted: {}", report.status.as_str()), pct: None }],
            None,
        )?;
        Ok(())
    }

    /// `caesar_answer`: answers a pending question. An unknown task or
    /// question, or one already answered, fails clearly; of two concurrent
    /// answers exactly one wins.
    pub fn answer(&self, task_id: &str, question_id: &str, answer: &str) -> Result<()> {
        let record = self.record(task_id)?;
        let Some((question, _)) = self.store.question(task_id, question_id)? else {
            let pending: Vec<String> =
                self.store.pending_questions(task_id)?.into_iter().map(|q| q.question_id).collect();
            return Err(Error::NotFound(format!(
                "task {task_id} has no question `{question_id}` (pending: {})",
                if pending.is_empty() { "none".to_owned() } else { pending.join(", ") }
            )));
        };
        if question.answer.is_some() {
            return Err(Error::Precondition(format!("question {question_id} of task {task_id} already has an answer")));
        }
        if record.status.is_terminal() {
            return Err(Error::Precondition(format!(
                "task {task_id} has ended ({}): nobody is waiting for this answer",
                record.status.as_str()
            )));
        }
        if !self.store.answer_question(task_id, question_id, answer, now_ms())? {
            return Err(Error::Conflict(format!(
                "question {question_id} of task {task_id} was answered by someone else just now"
            )));
        }
        if let Some(live) = self.live(task_id) {
            self.emit_events(
                task_id,
                Path::new(&record.task_dir),
                &live,
                vec![EventBody::Answer { id: question_id.to_owned(), answer: answer.to_owned() }],
                None,
            )?;
            live.answers.send_modify(|n| *n += 1);
        }
        if is_permission_question(question_id) {
            self.deliver_permission(&record, question_id, answer);
        }
        Ok(())
    }

    // ------------------------------------------------------ permission bridge

    /// A CLI asks whether it may use a tool: the request is kept in the task
    /// directory (for the answer), the question stored (durably, first), and
    /// a `question` event added to the batch. A request seen again (output
    /// re-read after a restart) is not asked twice.
    fn ask_permission(&self, run: &mut Run, ask: provider::PermissionAsk, bodies: &mut Vec<EventBody>) {
        let Some(provider_id) = run.bridge.clone() else { return };
        let qid = permission_question_id(&ask.request_id);
        match self.store.question(&run.id, &qid) {
            Ok(Some(_)) => return,
            Ok(None) => {}
            Err(e) => {
                warn!(task_id = %run.id, "reading question {qid} failed: {e}");
                return;
            }
        }
        // The request is kept before the question is stored: an answer must
        // always find it.
        let dir = run.task_dir.join(PERMISSIONS_DIR);
        let path = dir.join(format!("{qid}.json"));
        let stored = std::fs::create_dir_all(&dir)
            .and_then(|()| supervisor::write_atomic(&path, &serde_json::to_vec(&ask).unwrap_or_default()));
        if let Err(e) = stored {
            warn!(task_id = %run.id, "cannot keep the permission request {}: {e}", path.display());
            return;
        }
        let question = format!(
            "{provider_id} asks permission to use {}. Answer `allow`, or `deny` followed by a reason for the agent.",
            ask.summary
        );
        let options = vec!["allow".to_owned(), "deny".to_owned()];
        let q = QuestionRecord {
            task_id: run.id.clone(),
            question_id: qid.clone(),
            question: question.clone(),
            options: options.clone(),
            asked_ms: now_ms(),
            answer: None,
        };
        if let Err(e) = self.store.insert_question(&q) {
            warn!(task_id = %run.id, "storing permission question {qid} failed: {e}");
            return;
        }
        info!(task_id = %run.id, question_id = %qid, tool = %ask.tool_name, "permission prompt bridged");
        bodies.push(EventBody::Question { id: qid.clone(), question, options });
        run.permission_deadlines.push((qid, self.permission_deadline(run, q.asked_ms)));
        run.live.attention.send_modify(|n| *n += 1);
    }

    /// After a restart: answers given while no daemon could deliver them are
    /// delivered, and open questions get their deadlines back.
    fn resume_permissions(&self, run: &mut Run) {
        if run.bridge.is_none() {
            return;
        }
        let Ok(questions) = self.store.questions(&run.id) else { return };
        let Ok(Some(record)) = self.store.task(&run.id) else { return };
        for (q, delivered) in questions.into_iter().filter(|(q, _)| is_permission_question(&q.question_id)) {
            match q.answer {
                Some(answer) if !delivered => self.deliver_permission(&record, &q.question_id, &answer),
                Some(_) => {}
                None => run.permission_deadlines.push((q.question_id, self.permission_deadline(run, q.asked_ms))),
            }
        }
    }

    /// When a bridged prompt asked at `asked_ms` is denied for want of an
    /// answer: after the permission timeout, never past the task's deadline.
    fn permission_deadline(&self, run: &Run, asked_ms: i64) -> i64 {
        (asked_ms + self.settings.permission_timeout.as_millis() as i64).min(run.deadline_ms)
    }

    /// Denies the bridged prompts nobody answered in time, so the agent goes
    /// on without the tool rather than waiting for ever.
    fn expire_permissions(&self, run: &mut Run) {
        let now = now_ms();
        let (due, open): (Vec<_>, Vec<_>) = run.permission_deadlines.drain(..).partition(|(_, at)| *at <= now);
        run.permission_deadlines = open;
        for (qid, _) in due {
            let answer = format!(
                "deny: the orchestrator did not answer within {} s; go on without this tool and say so in your report",
                self.settings.permission_timeout.as_secs()
            );
            match self.store.answer_question(&run.id, &qid, &answer, now) {
                Ok(true) => {
                    let body = EventBody::Answer { id: qid.clone(), answer: answer.clone() };
                    if let Err(e) = self.emit(run, vec![body]) {
                        warn!(task_id = %run.id, "storing the timeout of {qid} failed: {e}");
                    }
                    if let Ok(Some(record)) = self.store.task(&run.id) {
                        self.deliver_permission(&record, &qid, &answer);
                    }
                }
                // Answered meanwhile: `answer` delivered it.
                Ok(false) => {}
                Err(e) => warn!(task_id = %run.id, "expiring {qid} failed: {e}"),
            }
        }
    }

    /// Writes the answer to a bridged prompt on the agent's stdin, as its
    /// CLI's control response, and marks it delivered. An answer is an
    /// `allow` when it says so; anything else denies, with the answer as the
    /// reason the agent reads.
    fn deliver_permission(&self, record: &TaskRecord, qid: &str, answer: &str) {
        let task_dir = Path::new(&record.task_dir);
        let path = task_dir.join(PERMISSIONS_DIR).join(format!("{qid}.json"));
        let ask = match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<provider::PermissionAsk>(&b).map_err(|e| e.to_string()))
        {
            Ok(ask) => ask,
            Err(e) => {
                warn!(task_id = %record.id, "cannot read the permission request {}: {e}", path.display());
                return;
            }
        };
        let parser = serde_json::from_str::<Launch>(&record.launch_json).map(|l| l.parser).unwrap_or_default();
        let allow = is_allow(answer);
        let Some(line) = provider::permission_response(&parser, &ask, allow, answer) else { return };
        match supervisor::write_agent_stdin(task_dir, &line) {
            Ok(()) => {
                if let Err(e) = self.store.mark_delivered(&record.id, qid) {
                    warn!(task_id = %record.id, "marking {qid} delivered failed: {e}");
                }
                info!(task_id = %record.id, question_id = %qid, allow, "permission answer delivered");
            }
            Err(e) => warn!(task_id = %record.id, "cannot deliver the answer to {qid}: {e}"),
        }
    }

    // ---------------------------------------------------------------- agents

    /// A project's configuration. When its files do not load (a bad edit),
    /// the last version that did is served instead, with the problem; with
    /// no such version the error is returned.
    fn load_config(&self, project: &Path) -> Result<(Config, Option<String>)> {
        match Config::load(&self.paths.config_dir, project) {
            Ok(config) => {
                self.good_configs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(project.to_path_buf(), config.clone());
                self.config_problems.lock().unwrap_or_else(|p| p.into_inner()).remove(project);
                Ok((config, None))
            }
            Err(e @ Error::Invalid(_)) => {
                let problem = e.to_string();
                self.config_problems
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(project.to_path_buf(), problem.clone());
                match self.good_configs.lock().unwrap_or_else(|p| p.into_inner()).get(project) {
                    Some(good) => Ok((good.clone(), Some(problem))),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn config_for(&self, workspace: &str) -> Result<(Config, PathBuf)> {
        let project = if workspace.is_empty() {
            PathBuf::from("/nonexistent/caesar-no-project")
        } else {
            project_root(Path::new(workspace))
        };
        let (config, _) = self.load_config(&project)?;
        Ok((config, project))
    }

    /// The store's integrity and the configuration problems known now.
    pub fn health(&self, workspace: &str) -> (Result<()>, Vec<String>) {
        if !workspace.is_empty() {
            let _ = self.load_config(&project_root(Path::new(workspace)));
        }
        let _ = self.load_config(Path::new("/nonexistent/caesar-no-project"));
        let mut problems: Vec<String> = self
            .config_problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(project, problem)| {
                let served = self.good_configs.lock().unwrap_or_else(|p| p.into_inner()).contains_key(project);
                if served {
                    format!(
                        "{problem} (fix the file; until then the last good config of {} is used)",
                        project.display()
                    )
                } else {
                    format!("{problem} (fix the file: delegations in {} fail until then)", project.display())
                }
            })
            .collect();
        problems.sort();
        (self.store.integrity_check(), problems)
    }

    /// Every agent of the project at `workspace` (only the global config
    /// when empty). Probes executables for their version: call it off the
    /// async runtime.
    pub fn list_agents(&self, workspace: &str) -> Result<Vec<crate::catalog::AgentEntry>> {
        let (config, _) = self.config_for(workspace)?;
        Ok(crate::catalog::list(&config, &self.versions))
    }

    /// The roles of the project at `workspace`, each with the agent it would
    /// pick now and why earlier candidates were skipped.
    pub fn list_roles(&self, workspace: &str) -> Result<Vec<serde_json::Value>> {
        let (config, _) = self.config_for(workspace)?;
        Ok(resolve::roles_view(&config))
    }

    /// The effective configuration of a project, with provenance.
    pub fn show_config(&self, workspace: &str) -> Result<serde_json::Value> {
        let (config, _) = self.config_for(workspace)?;
        Ok(serde_json::json!({
            "policy": config.policy,
            "worktree": config.worktree,
            "roles": config.roles.iter().map(|(r, o)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["origin"] = serde_json::json!(o.as_str());
                v
            }).collect::<Vec<_>>(),
            "agents": config.agents.iter().map(|(a, o)| {
                let mut v = serde_json::to_value(a).unwrap_or_default();
                v["origin"] = serde_json::json!(o.as_str());
                v
            }).collect::<Vec<_>>(),
            "models": config.models.iter().map(|(k, (m, o))| (k.clone(), serde_json::json!({"model": m, "origin": o.as_str()}))).collect::<serde_json::Map<_, _>>(),
            "bin": config.bin.iter().map(|(k, (b, o))| (k.clone(), serde_json::json!({"bin": b, "origin": o.as_str()}))).collect::<serde_json::Map<_, _>>(),
            "provenance": config.provenance,
            "files": config.files,
        }))
    }

    /// Edits one layer of a project's (or the global) configuration.
    pub fn edit_config(
        &self,
        workspace: &str,
        layer: &str,
        edit: &crate::config_edit::Edit,
    ) -> Result<crate::config_edit::Outcome> {
        let layer = match layer {
            "global" => crate::config::Origin::Global,
            "project" => crate::config::Origin::Project,
            "local" => crate::config::Origin::Local,
            other => return Err(Error::Invalid(format!("unknown layer `{other}`: use global, project or local"))),
        };
        if layer != crate::config::Origin::Global && workspace.is_empty() {
            return Err(Error::Invalid("editing a project layer needs the project's workspace".to_owned()));
        }
        let project = if workspace.is_empty() {
            PathBuf::from("/nonexistent/caesar-no-project")
        } else {
            project_root(Path::new(workspace))
        };
        crate::config_edit::apply(&self.paths.config_dir, &project, layer, edit)
    }

    /// `caesar init`: the global layer, or a project's config, role prompts,
    /// `.gitignore` lines and host-agent skills.
    pub fn init(&self, workspace: &str, global: bool, force: bool) -> Result<crate::init::Written> {
        if global {
            return crate::init::init_global(&self.paths.config_dir, force);
        }
        let workspace = Path::new(workspace);
        if !workspace.is_absolute() || !workspace.is_dir() {
            return Err(Error::Invalid(format!("workspace `{}` is not an absolute directory", workspace.display())));
        }
        let project = project_root(workspace);
        let config = Config::load(&self.paths.config_dir, &project)?;
        crate::init::init_project(&project, force, &|host| resolve::program_of(&config, host).is_some())
    }

    /// One agent with the options delegate accepts for it.
    pub fn describe_agent(&self, id: &str, workspace: &str) -> Result<crate::catalog::AgentEntry> {
        let (config, project) = self.config_for(workspace)?;
        let all = crate::catalog::list(&config, &self.versions);
        let known: Vec<String> = all.iter().map(|a| a.id.clone()).collect();
        all.into_iter().find(|a| a.id == id).ok_or_else(|| {
            Error::NotFound(format!(
                "unknown agent `{id}`: use one of {}, or declare it as [[agent]] in {}/.caesar/config.toml",
                known.join(", "),
                project.display()
            ))
        })
    }

    // ---------------------------------------------------------------- queries

    fn record(&self, id: &str) -> Result<TaskRecord> {
        if !crate::ids::is_task_id(id) {
            return Err(Error::NotFound(format!(
                "no task `{id}`: task ids look like t_0123456789ab; list tasks with `caesar ps`"
            )));
        }
        self.store.task(id)?.ok_or_else(|| Error::NotFound(format!("no task `{id}`: list tasks with `caesar ps`")))
    }

    /// A snapshot of one task.
    pub fn status(&self, id: &str) -> Result<TaskView> {
        let record = self.record(id)?;
        self.view(record)
    }

    fn view(&self, record: TaskRecord) -> Result<TaskView> {
        let report = if record.status.is_terminal() { self.store.report(&record.id)? } else { None };
        let pending_questions =
            if record.status.is_terminal() { Vec::new() } else { self.store.pending_questions(&record.id)? };
        let live = self.live(&record.id);
        let output = live.as_ref().and_then(|l| l.output.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let activity = live.as_ref().and_then(|l| l.activity.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let queue_position = if record.status == TaskStatus::Pending {
            let queued = self.store.tasks(&[TaskStatus::Pending], u32::MAX)?;
            queued.iter().rev().position(|t| t.id == record.id).map(|p| p as u32)
        } else {
            None
        };
        Ok(TaskView { record, report, pending_questions, output, activity, queue_position })
    }

    /// Tasks, newest first.
    pub fn list(&self, statuses: &[TaskStatus], limit: u32) -> Result<Vec<TaskView>> {
        self.store.tasks(statuses, limit)?.into_iter().map(|r| self.view(r)).collect()
    }

    /// Waits until every task is finished, `timeout` passes or (with
    /// `wake_on_attention`) one of them needs the caller. Returns the views
    /// and whether the wait ended early for attention.
    pub async fn await_tasks(
        &self,
        ids: &[String],
        timeout: Duration,
        wake_on_attention: bool,
    ) -> Result<(Vec<TaskView>, bool)> {
        if ids.is_empty() {
            return Err(Error::Invalid("`task_ids` is empty: pass the ids that delegate returned".to_owned()));
        }
        let mut unknown = Vec::new();
        for id in ids {
            if let Err(Error::NotFound(_)) = self.record(id) {
                unknown.push(id.as_str());
            }
        }
        if !unknown.is_empty() {
            return Err(Error::NotFound(format!("no task {}: list tasks with `caesar ps`", unknown.join(", "))));
        }
        let mut waits = Vec::new();
        let mut attention = Vec::new();
        for id in ids {
            let live = self.live(id);
            if let Some(l) = &live {
                let mut rx = l.attention.subscribe();
                rx.mark_unchanged();
                attention.push(rx);
            }
            let status_rx = live.map(|l| l.status.subscribe());
            if self.record(id)?.status.is_terminal() {
                continue;
            }
            let id = id.clone();
            waits.push(async move {
                match status_rx {
                    Some(mut rx) => {
                        let _ = rx.wait_for(|s| s.is_terminal()).await;
                    }
                    // Recorded but not live: only while a restarted daemon
                    // is re-attaching. Check the store until it settles.
                    None => loop {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if self.store.task(&id).ok().flatten().is_none_or(|r| r.status.is_terminal()) {
                            break;
                        }
                    },
                }
            });
        }
        // A task that already needs the caller (a question waiting, a
        // blocker hit) wakes the wait at once: its signal may have come
        // before this call subscribed.
        if wake_on_attention {
            for id in ids {
                let r = self.record(id)?;
                let waiting = !r.status.is_terminal() && !self.store.pending_questions(id)?.is_empty();
                if waiting || (!r.status.is_terminal() && r.blocker.is_some()) {
                    let views = ids.iter().map(|id| self.status(id)).collect::<Result<Vec<_>>>()?;
                    return Ok((views, true));
                }
            }
        }
        let all_done = futures_util::future::join_all(waits);
        let any_attention = async {
            if !wake_on_attention || attention.is_empty() {
                return std::future::pending::<()>().await;
            }
            let changes = attention.iter_mut().map(|rx| Box::pin(rx.changed()));
            let _ = futures_util::future::select_all(changes).await;
        };
        let woke_early = tokio::select! {
            _ = tokio::time::timeout(timeout, all_done) => false,
            _ = any_attention => true,
        };
        let views = ids.iter().map(|id| self.status(id)).collect::<Result<Vec<_>>>()?;
        Ok((views, woke_early))
    }

    /// Stops a running task and waits for its tree to be gone. A finished
    /// task is left alone and `false` returned.
    pub async fn cancel(&self, id: &str) -> Result<(bool, TaskStatus)> {
        let record = self.record(id)?;
        if record.status.is_terminal() {
            return Ok((false, record.status));
        }
        if record.status == TaskStatus::Pending {
            // Queued: take the queue's turn so it cannot start meanwhile.
            let _turn = self.scheduling.lock().await;
            let record = self.record(id)?;
            if record.status == TaskStatus::Pending && record.supervisor_pid.is_none() {
                self.store.set_cancel_requested(id)?;
                let report = report::recover(&report::Inputs {
                    task_id: &record.id,
                    report_path: &Path::new(&record.task_dir).join("report.json"),
                    texts: &[],
                    ending: Ending::Cancelled,
                    duration_ms: 0,
                    native: None,
                });
                self.finish_task(&record, Exit::without_process(TaskStatus::Cancelled, None), report, None)?;
                return Ok((true, TaskStatus::Cancelled));
            }
        }
        let live = self.live(id);
        let mut status_rx = live.as_ref().map(|l| l.status.subscribe());
        self.store.set_cancel_requested(id)?;
        match record.supervisor_pid {
            #[cfg(unix)]
            Some(pid) if supervisor::is_same_process_alive(pid, record.supervisor_start, record.boot_id.as_deref()) => {
                supervisor::request_stop(pid);
            }
            _ => {}
        }
        let limit = Duration::from_millis(self.settings.grace_ms) + Duration::from_secs(10);
        let settled = async {
            match status_rx.as_mut() {
                Some(rx) => {
                    let _ = rx.wait_for(|s| s.is_terminal()).await;
                }
                None => loop {
                    if self.store.task(id).ok().flatten().is_none_or(|r| r.status.is_terminal()) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                },
            }
        };
        if tokio::time::timeout(limit, settled).await.is_err() {
            return Err(Error::Internal(format!(
                "task {id} did not stop within {} s of SIGTERM and SIGKILL; see {}/supervisor.log",
                limit.as_secs(),
                record.task_dir
            )));
        }
        let status = self.record(id)?.status;
        Ok((status == TaskStatus::Cancelled, status))
    }

    /// The most recent normalized events, or the tail of the raw output.
    pub fn logs(&self, id: &str, raw: bool, limit: u32, max_bytes: u64) -> Result<Logs> {
        let record = self.record(id)?;
        if raw {
            let path = Path::new(&record.task_dir).join(supervisor::RAW_LOG);
            let (text, size) = tail::read_tail(&path, max_bytes).map_err(|e| Error::io_at("cannot read", &path, e))?;
            let truncated = (text.len() as u64) < size;
            return Ok(Logs {
                total_events: record.event_count,
                raw: text,
                raw_size: size,
                raw_truncated: truncated,
                ..Logs::default()
            });
        }
        let events = self.store.last_events(id, limit.clamp(1, MAX_LOG_EVENTS))?;
        Ok(Logs { total_events: record.event_count, events, ..Logs::default() })
    }

    /// The events of a task from `from_seq`: stored ones first, then live
    /// ones until the task ends (with `follow`).
    pub fn watch_events(
        self: &Arc<Self>,
        id: &str,
        from_seq: u64,
        follow: bool,
    ) -> Result<mpsc::Receiver<(u64, String)>> {
        self.record(id)?;
        let (tx, rx) = mpsc::channel(64);
        let live_rx = if follow {
            self.live(id).map(|l| l.events.get_or_init(|| broadcast::channel(WATCH_RING).0).subscribe())
        } else {
            None
        };
        let engine = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            let mut next = from_seq;
            let replay = |next: &mut u64| -> Option<Vec<(u64, String)>> {
                let rows = engine.store.events_from(&id, *next, REPLAY_PAGE).ok()?;
                if let Some((seq, _)) = rows.last() {
                    *next = seq + 1;
                }
                Some(rows)
            };
            loop {
                let Some(rows) = replay(&mut next) else {
                    return;
                };
                let done = rows.len() < REPLAY_PAGE as usize;
                for row in rows {
                    if tx.send(row).await.is_err() {
                        return;
                    }
                }
                if done {
                    break;
                }
            }
            let Some(mut live_rx) = live_rx else { return };
            loop {
                match live_rx.recv().await {
                    Ok((seq, line)) => {
                        if seq < next {
                            continue;
                        }
                        if seq > next {
                            // Fill the gap from the store before going on.
                            let Some(rows) = replay(&mut next) else {
                                return;
                            };
                            for row in rows {
                                if tx.send(row).await.is_err() {
                                    return;
                                }
                            }
                            continue;
                        }
                        next = seq + 1;
                        if tx.send((seq, line)).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        // Lagged: catch up from the store. Closed: the task
                        // ended; send what is left and stop.
                        loop {
                            let Some(rows) = replay(&mut next) else {
                                return;
                            };
                            if rows.is_empty() {
                                break;
                            }
                            for row in rows {
                                if tx.send(row).await.is_err() {
                                    return;
                                }
                            }
                        }
                        if matches!(e, broadcast::error::RecvError::Closed) {
                            return;
                        }
                    }
                }
            }
        });
        Ok(rx)
    }
}

/// The name the return channel's MCP server has in the agent's CLI.
pub const CHANNEL_SERVER: &str = "caesar";
/// The return channel's tools, pre-approved where the CLI asks.
pub const CHANNEL_TOOLS: [&str; 4] = ["get_task", "report_progress", "ask_orchestrator", "submit_report"];

/// Providers that read a per-run MCP server only from a file in the
/// project: injecting the channel would write into the user's tree.
fn needs_workspace_files(provider: &str) -> bool {
    matches!(provider, "gemini" | "qwen" | "cursor-agent" | "grok")
}

/// The parser for a launch's `parser` name; the generic one for a name this
/// build does not know (a task stored by a newer daemon).
fn parser_for(name: &str) -> Box<dyn LineParser> {
    provider::parser(name).unwrap_or_else(|| Box::new(provider::GenericParser))
}

/// The stored name of a blocker kind.
pub fn blocker_name(kind: BlockerKind) -> &'static str {
    match kind {
        BlockerKind::Auth => "auth",
        BlockerKind::RateLimit => "rate_limit",
        BlockerKind::Permission => "permission",
    }
}

fn append_file(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(bytes);
    }
}

/// The supervisor's own stderr, made just before it is spawned.
const SUPERVISOR_LOG: &str = "supervisor.log";

/// A task's events, one JSON line each, for OACP readers of its directory.
const EVENTS_FILE: &str = "events.jsonl";

/// Where the permission requests of a task's bridged prompts are kept.
const PERMISSIONS_DIR: &str = "permissions";

/// The question id of a bridged permission prompt: derived from the CLI's
/// request id, so a request read again after a restart is the same question.
fn permission_question_id(request_id: &str) -> String {
    let mut id = String::from("p_");
    id.extend(request_id.chars().filter(char::is_ascii_alphanumeric).take(38));
    id
}

fn is_permission_question(question_id: &str) -> bool {
    question_id.starts_with("p_")
}

/// Whether an answer to a permission prompt allows the call.
fn is_allow(answer: &str) -> bool {
    let first = answer.trim().split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or_default();
    matches!(first.to_ascii_lowercase().as_str(), "allow" | "yes" | "y" | "approve")
}

/// The directory of a task being delegated, removed on drop unless the task
/// was recorded (then it is set to `None`).
struct UnrecordedDir(Option<PathBuf>);

impl Drop for UnrecordedDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// How a task ended, as its row records it.
struct Exit {
    status: TaskStatus,
    exit_code: Option<i64>,
    signal: Option<i32>,
    error: Option<String>,
}

impl Exit {
    /// The ending of a task whose agent never ran (refused at start, cancelled in the queue).
    fn without_process(status: TaskStatus, error: Option<String>) -> Exit {
        Exit { status, exit_code: None, signal: None, error }
    }
}

/// Waits up to 2 s for a starting supervisor to write `agent.json`.
async fn wait_for_agent_file(task_dir: &Path) -> Option<supervisor::AgentStarted> {
    for _ in 0..100 {
        if let Some(agent) = supervisor::read_agent(task_dir) {
            return Some(agent);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

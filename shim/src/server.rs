//! The MCP server: tools/list from the scoped catalog, tools/call forwarded
//! to caesard, results shaped to the cap, errors as `code: message`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use caesar_proto::pb;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams, GetTaskResult,
    Implementation, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::daemon::Daemon;
use crate::error::{ErrorCode, ToolError};
use crate::output::*;
use crate::params::*;
use crate::roots::{file_uri_path, same_dir, scope_of};
use crate::shape::{self, clamp, finish, window};
use crate::tools;

/// The default wait of caesar_await, in milliseconds.
pub const AWAIT_DEFAULT_MS: u64 = 30_000;
/// The longest wait of caesar_await, in milliseconds.
pub const AWAIT_MAX_MS: u64 = 600_000;
/// The most task ids one caesar_await may name (the daemon's cap too).
pub const AWAIT_MAX_IDS: usize = 1_000;
/// The most raw output fetched from the daemon for caesar_logs (its limit).
const RAW_FETCH_BYTES: u64 = 16 * 1024 * 1024;

/// How a server was configured at startup.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--root`: the workspace for delegations, over MCP roots and the cwd.
    pub root: Option<PathBuf>,
    /// The response cap, in characters.
    pub max_chars: usize,
    /// How often caesar_await sends progress notifications.
    pub progress_every: Duration,
    /// The tools this server exposes.
    pub tools: Vec<&'static str>,
    /// Whether the working directory is the last resort for the root: true
    /// on stdio, where the host started the server in its project; false
    /// over HTTP, where the working directory is the daemon's.
    pub cwd_is_root: bool,
}

/// The caesar MCP server. Cloning it is cheap; it holds no task state.
#[derive(Clone)]
pub struct Shim {
    inner: Arc<Inner>,
}

struct Inner {
    daemon: Daemon,
    settings: Settings,
    /// The 2025-11-25 task statuses and questions this connection was told of.
    told: crate::legacy_result::Told,
}

impl Shim {
    /// A server that reaches the daemon over the socket at `paths`.
    pub fn new(paths: caesar_proto::paths::Paths, settings: Settings) -> Shim {
        Shim::over(Daemon::new(paths), settings)
    }

    /// A server that reaches the daemon through `daemon` (in process, for
    /// the daemon's own HTTP endpoint).
    pub fn over(daemon: Daemon, settings: Settings) -> Shim {
        // The tools' schemas are built once per process, on first use (`tools::all`).
        Shim { inner: Arc::new(Inner { daemon, settings, told: Default::default() }) }
    }

    /// The tools a request may see: the server's set, narrowed by the HTTP
    /// request's `?profile=` and `?tools=` when it came over HTTP.
    fn visible(&self, ctx: &RequestContext<RoleServer>) -> Result<Vec<&'static str>, String> {
        let base = &self.inner.settings.tools;
        let Some(parts) = ctx.extensions.get::<http::request::Parts>() else { return Ok(base.clone()) };
        let (profile, list) = scope_of(parts.uri.query().unwrap_or(""));
        Ok(tools::select(&profile, list.as_deref())?.into_iter().filter(|t| base.contains(t)).collect())
    }

    fn cap(&self) -> usize {
        self.inner.settings.max_chars
    }

    pub(crate) fn daemon(&self) -> &Daemon {
        &self.inner.daemon
    }

    pub(crate) fn told(&self) -> &crate::legacy_result::Told {
        &self.inner.told
    }

    pub(crate) async fn dispatch(
        &self,
        name: &str,
        args: Value,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        match name {
            tools::DELEGATE => self.delegate(parse(args)?, ctx).await,
            tools::AWAIT => self.await_tasks(parse(args)?, ctx).await,
            tools::STATUS => self.status(parse(args)?).await,
            tools::LOGS => self.logs(parse(args)?).await,
            tools::CANCEL => self.cancel(parse(args)?).await,
            tools::DIFF => self.diff(parse(args)?).await,
            tools::APPLY => self.apply(parse(args)?).await,
            tools::LIST_AGENTS => self.list_agents(ctx).await,
            tools::LIST_ROLES => self.list_roles(ctx).await,
            tools::ANSWER => self.answer(parse(args)?).await,
            tools::DESCRIBE_AGENT => self.describe_agent(parse(args)?, ctx).await,
            tools::STEER => self.steer(parse(args)?).await,
            other => Err(ToolError::validation(format!("unknown tool `{other}`"))),
        }
    }

    /// The workspace root: `--root`, else the client's first `file://` MCP
    /// root (when it advertises roots), else (on stdio) the working
    /// directory. Roots are deprecated by SEP-2577 but still what today's
    /// IDEs send. `None` over HTTP without roots.
    #[allow(deprecated)]
    async fn root(&self, ctx: &RequestContext<RoleServer>) -> Option<PathBuf> {
        if let Some(r) = &self.inner.settings.root {
            return Some(r.clone());
        }
        if ctx.client_capabilities().is_some_and(|c| c.roots.is_some()) {
            match tokio::time::timeout(Duration::from_secs(5), ctx.peer.list_roots()).await {
                Ok(Ok(list)) => {
                    if let Some(p) = list.roots.iter().find_map(|r| file_uri_path(&r.uri)) {
                        return Some(p);
                    }
                }
                Ok(Err(e)) => tracing::warn!("roots/list failed: {e}"),
                Err(_) => tracing::warn!("roots/list got no answer within 5 s"),
            }
        }
        if !self.inner.settings.cwd_is_root {
            return None;
        }
        Some(std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")))
    }

    /// The root as a workspace for listings: empty (the global config only)
    /// when there is none.
    async fn root_or_global(&self, ctx: &RequestContext<RoleServer>) -> String {
        self.root(ctx).await.map(|r| r.display().to_string()).unwrap_or_default()
    }

    async fn delegate(&self, p: DelegateParams, ctx: &RequestContext<RoleServer>) -> Result<CallToolResult, ToolError> {
        if p.objective.trim().is_empty() {
            return Err(ToolError::validation("`objective` is empty: say what the sub-agent should do"));
        }
        let timeout_ms = match &p.timeout {
            None => 0,
            Some(Timeout::Millis(ms)) => *ms,
            Some(Timeout::Text(t)) => caesar_proto::duration::parse_ms(t).map_err(ToolError::validation)?,
        };
        let mut workspace_warning = None;
        let given = p.workspace.as_deref().filter(|w| !w.trim().is_empty());
        let root = match (self.root(ctx).await, given) {
            (Some(root), _) => root,
            (None, Some(w)) if Path::new(w).is_absolute() => PathBuf::from(w),
            (None, _) => {
                return Err(ToolError::validation(
                    "`workspace` is required here: this server has no root (no --root, no MCP roots, and over \
                     HTTP the working directory is the daemon's); pass the project's absolute path",
                ));
            }
        };
        let workspace = match given {
            None => root.clone(),
            Some(w) => {
                let w = root.join(w);
                let w = std::path::absolute(&w).unwrap_or(w);
                if !same_dir(&w, &root) {
                    workspace_warning = Some(format!(
                        "the workspace {} is not this session's root {}: the sub-agent works outside the tree this MCP server was started for (set with --root, the client's MCP roots, or its working directory)",
                        w.display(),
                        root.display()
                    ));
                }
                w
            }
        };
        let fork = crate::fork::request(&p)?;
        let depth = std::env::var("CAESAR_DEPTH").ok().and_then(|d| d.trim().parse().ok()).unwrap_or(0);
        let req = pb::DelegateRequest {
            objective: p.objective,
            agent: p.agent.unwrap_or_default(),
            role: p.role.unwrap_or_default(),
            mode: p.mode.map(|m| m.as_str().to_owned()).unwrap_or_default(),
            isolation: p.isolation.map(|i| i.as_str().to_owned()).unwrap_or_default(),
            network: p.network.map(|n| n.as_str().to_owned()).unwrap_or_default(),
            context: p.context.unwrap_or_default(),
            constraints: p.constraints.unwrap_or_default(),
            acceptance_criteria: p.acceptance_criteria.unwrap_or_default(),
            model: p.model.unwrap_or_default(),
            timeout_ms,
            channel: p.channel.unwrap_or(false),
            workspace: workspace.display().to_string(),
            session_id: p.session_id.unwrap_or_default(),
            effort: p.effort.unwrap_or_default(),
            depth,
            budget: p.budget.map(|b| pb::Budget {
                tokens: b.tokens,
                cost_usd: b.cost_usd,
                wall_ms: b.wall_ms,
                turns: b.turns,
            }),
            on_blocker: p.on_blocker.unwrap_or_default(),
            verify: p.verify.unwrap_or_default(),
            agents: p.agents.unwrap_or_default(),
            attempts: p.attempts.unwrap_or(0),
            runner: p.runner.unwrap_or_default(),
            depends_on: p.depends_on.unwrap_or_default(),
            on_parent_failure: p.on_parent_failure.unwrap_or_default(),
            continue_from: p.continue_from.unwrap_or_default(),
            review_by: p.review_by.unwrap_or_default(),
            review_rounds: p.review_rounds.unwrap_or(0),
            relay_to: p.relay_to.unwrap_or_default(),
        };
        let d = self
            .daemon()
            .call(move |mut c| {
                let (req, fork) = (req.clone(), fork.clone());
                async move {
                    match fork {
                        Some(f) => c.fork(f).await,
                        None => c.delegate(req).await,
                    }
                }
            })
            .await?;
        let mut warnings: BTreeMap<String, String> = d.warnings.into_iter().collect();
        if let Some(w) = workspace_warning {
            warnings.entry("workspace_warning".to_owned()).or_insert(w);
        }
        let out = DelegateOutput {
            group_id: (!d.group_id.is_empty()).then(|| d.group_id.clone()),
            task_ids: (!d.task_ids.is_empty()).then(|| d.task_ids.clone()),
            task_id: d.task_id,
            agent: d.agent,
            role: (!d.role.is_empty()).then_some(d.role),
            mode: d.mode,
            isolation: d.isolation,
            network: d.network,
            model: (!d.model.is_empty()).then_some(d.model),
            workspace: d.workspace,
            worktree: (!d.worktree.is_empty()).then_some(d.worktree),
            timeout_ms: (d.timeout_ms > 0).then_some(d.timeout_ms),
            status: pb::TaskStatus::spell(d.status).to_owned(),
            warnings,
        };
        finish(&out, self.cap(), "Truncated to fit the response cap.")
    }

    async fn await_tasks(&self, p: AwaitParams, ctx: &RequestContext<RoleServer>) -> Result<CallToolResult, ToolError> {
        let ids: Vec<String> = p.task_ids.into_iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
        if ids.is_empty() {
            return Err(ToolError::validation("`task_ids` is empty: pass the task_id values caesar_delegate returned"));
        }
        check_await_ids(ids.len())?;
        let req = pb::AwaitRequest {
            task_ids: ids.clone(),
            timeout_ms: clamp(p.timeout_ms, AWAIT_DEFAULT_MS, 1, AWAIT_MAX_MS),
            wake_on_attention: p.wake_on_attention.unwrap_or(true),
        };
        let call = self.daemon().call(move |mut c| {
            let req = req.clone();
            async move { c.r#await(req).await }
        });
        tokio::pin!(call);
        let token = ctx.meta.get_progress_token();
        let r = match token {
            None => tokio::select! {
                r = &mut call => r?,
                _ = ctx.ct.cancelled() => return Err(cancelled()),
            },
            Some(token) => {
                let mut tick = tokio::time::interval(self.inner.settings.progress_every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut n: u64 = 0;
                loop {
                    tokio::select! {
                        r = &mut call => break r?,
                        _ = ctx.ct.cancelled() => return Err(cancelled()),
                        _ = tick.tick() => {
                            n += 1;
                            self.progress(&ids, &token, n, ctx).await;
                        }
                    }
                }
            }
        };
        let tasks = r.tasks.iter().map(|t| (t.task_id.clone(), TaskResult::from_view(t, true))).collect();
        let groups = r.groups.iter().map(|g| (g.group_id.clone(), crate::output::GroupOut::from_pb(g))).collect();
        let out = AwaitOutput { tasks, groups, woke_early: r.woke_early.then_some(true), shaping: Default::default() };
        finish(
            &out,
            self.cap(),
            "Truncated to fit the response cap: long report fields were cut. Await fewer tasks at once, read events with caesar_logs and the changes with caesar_diff; the whole report is `caesar --json status <task_id>`.",
        )
    }

    /// One progress notification: how many tasks are done, and the latest
    /// event of each task still running. `n` makes `progress` increase on
    /// every notification, as MCP requires, while staying between `done`
    /// and `done + 1`.
    async fn progress(&self, ids: &[String], token: &ProgressToken, n: u64, ctx: &RequestContext<RoleServer>) {
        let mut done = 0usize;
        let mut latest = Vec::new();
        for id in ids {
            let req = pb::StatusRequest { task_id: id.clone() };
            let Ok(v) = self
                .daemon()
                .call(move |mut c| {
                    let req = req.clone();
                    async move { c.status(req).await }
                })
                .await
            else {
                continue;
            };
            if !matches!(v.status(), pb::TaskStatus::Pending | pb::TaskStatus::Running) {
                done += 1;
                continue;
            }
            let mut line = format!("{id}: {}", pb::TaskStatus::spell(v.status));
            if let Ok(e) = serde_json::from_str::<Value>(&v.last_event_json) {
                line.push_str(&format!(", last event: {}", event_summary(&e)));
            }
            if !v.pending_questions.is_empty() {
                line.push_str(&format!(", {} pending question(s)", v.pending_questions.len()));
            }
            latest.push(line);
        }
        let mut message = format!("{done}/{} tasks done", ids.len());
        if !latest.is_empty() {
            message.push_str("; ");
            message.push_str(&latest.join("; "));
        }
        let message: String = message.chars().take(1_000).collect();
        let progress = done as f64 + (n as f64 / (n as f64 + 1.0));
        let note =
            ProgressNotificationParam::new(token.clone(), progress).with_total(ids.len() as f64).with_message(message);
        if let Err(e) = ctx.peer.notify_progress(note).await {
            tracing::debug!("progress notification not sent: {e}");
        }
    }

    async fn status(&self, p: TaskParams) -> Result<CallToolResult, ToolError> {
        let req = pb::StatusRequest { task_id: task_id(&p.task_id)? };
        let v = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.status(req).await }
            })
            .await?;
        let out = StatusOutput { task: TaskResult::from_view(&v, false), shaping: Default::default() };
        finish(
            &out,
            self.cap(),
            "Truncated to fit the response cap. Read events with caesar_logs and the report with caesar_await.",
        )
    }

    async fn logs(&self, p: LogsParams) -> Result<CallToolResult, ToolError> {
        let id = task_id(&p.task_id)?;
        let cap = self.cap();
        if !p.raw.unwrap_or(false) {
            let limit = clamp(p.limit, 50, 1, 1_000) as u32;
            let req = pb::LogsRequest { task_id: id.clone(), raw: false, limit, max_bytes: 0 };
            let l = self
                .daemon()
                .call(move |mut c| {
                    let req = req.clone();
                    async move { c.logs(req).await }
                })
                .await?;
            let events: Vec<Value> = l
                .events_json
                .iter()
                .map(|e| serde_json::from_str(e).unwrap_or_else(|_| Value::String(e.clone())))
                .collect();
            let mut out = LogsOutput {
                task_id: id,
                raw: false,
                total_events: Some(l.total_events),
                events: Some(events),
                text: None,
                start_char: None,
                total_chars: None,
                next_start_char: None,
                shaping: Default::default(),
            };
            // Drop the oldest events first: the newest matter most.
            // Each event is measured once (issue 19), not the whole answer per drop.
            let budget = cap.saturating_sub(400);
            let mut events = out.events.replace(Vec::new()).unwrap_or_default();
            let fixed = shape::size(&serde_json::to_value(&out).unwrap_or(Value::Null));
            let dropped = shape::drop_oldest(&mut events, fixed, budget);
            out.events = Some(events);
            if dropped > 0 {
                let kept = out.events.as_ref().map_or(0, Vec::len);
                out.shaping.truncated = Some(true);
                out.shaping.hint = Some(format!(
                    "Truncated to fit the response cap: the {kept} most recent of {} events. Lower limit, or read the raw output with raw: true (start_char to continue).",
                    l.total_events
                ));
            }
            return finish(
                &out,
                cap,
                "Truncated to fit the response cap: long event fields were cut. Read the raw output with raw: true (start_char to continue).",
            );
        }

        let req = pb::LogsRequest { task_id: id.clone(), raw: true, limit: 0, max_bytes: RAW_FETCH_BYTES };
        let l = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.logs(req).await }
            })
            .await?;
        let want = clamp(p.max_chars, cap as u64, 1, cap as u64) as usize;
        let total = l.raw.chars().count();
        let mut budget = want.min(cap.saturating_sub(600)).max(1);
        loop {
            let start = match p.start_char {
                Some(s) => s.max(0) as u64,
                None => total.saturating_sub(budget) as u64,
            };
            let (text, start, total_chars, next) = window(&l.raw, start, budget);
            let cut = start > 0 || next.is_some();
            let mut out = LogsOutput {
                task_id: id.clone(),
                raw: true,
                total_events: None,
                events: None,
                text: Some(text),
                start_char: Some(start),
                total_chars: Some(total_chars),
                next_start_char: next,
                shaping: Default::default(),
            };
            if cut {
                out.shaping.truncated = Some(true);
                let mut hint = match next {
                    Some(n) => format!("Output truncated. Continue reading with start_char={n}."),
                    None => format!(
                        "Showing the last {} of {total_chars} characters. Read from the beginning with start_char=0.",
                        total_chars - start
                    ),
                };
                if l.raw_truncated {
                    hint.push_str(&format!(
                        " The raw log holds {} bytes; offsets count from its last {RAW_FETCH_BYTES} bytes.",
                        l.raw_size
                    ));
                }
                out.shaping.hint = Some(hint);
            }
            let v = serde_json::to_value(&out).unwrap_or(Value::Null);
            let over = shape::size(&v).saturating_sub(cap);
            if over == 0 || budget <= 1 {
                return finish(&out, cap, "Truncated to fit the response cap.");
            }
            // JSON escaping made the window bigger than its characters.
            budget = budget.saturating_sub(over + 16).max(1);
        }
    }

    async fn cancel(&self, p: TaskParams) -> Result<CallToolResult, ToolError> {
        let req = pb::CancelRequest { task_id: task_id(&p.task_id)? };
        let id = req.task_id.clone();
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.cancel(req).await }
            })
            .await?;
        finish(
            &CancelOutput { task_id: id, cancelled: r.cancelled, status: pb::TaskStatus::spell(r.status).to_owned() },
            self.cap(),
            "Truncated to fit the response cap.",
        )
    }

    async fn diff(&self, p: DiffParams) -> Result<CallToolResult, ToolError> {
        let req = pb::DiffRequest { task_id: task_id(&p.task_id)? };
        let id = req.task_id.clone();
        let d = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.diff(req).await }
            })
            .await?;
        let cap = self.cap();
        let want = clamp(p.max_chars, cap as u64, 1, cap as u64) as usize;
        let files: Vec<DiffFile> = d
            .files
            .iter()
            .map(|f| DiffFile {
                path: f.path.clone(),
                status: f.status.clone(),
                additions: f.additions,
                deletions: f.deletions,
            })
            .collect();
        let files_size = serde_json::to_string(&files).map_or(0, |s| s.chars().count());
        let mut budget = want.min(cap.saturating_sub(600 + files_size)).max(1);
        let start = p.start_char.map_or(0, |s| s.max(0) as u64);
        loop {
            let (patch, start, total, next) = window(&d.patch, start, budget);
            let mut out = DiffOutput {
                task_id: id.clone(),
                is_empty: d.is_empty,
                files: Vec::new(),
                patch,
                start_char: (start > 0).then_some(start),
                total_chars: total,
                next_start_char: next,
                shaping: Default::default(),
            };
            if let Some(n) = next {
                out.shaping.truncated = Some(true);
                out.shaping.hint = Some(format!("Patch truncated. Continue reading with start_char={n}."));
            }
            let v = serde_json::to_value(&out).unwrap_or(Value::Null);
            let over = (shape::size(&v) + files_size).saturating_sub(cap);
            if over == 0 || budget <= 1 {
                out.files = files;
                return finish(&out, cap, "Truncated to fit the response cap: the file list was cut.");
            }
            budget = budget.saturating_sub(over + 16).max(1);
        }
    }

    async fn apply(&self, p: TaskParams) -> Result<CallToolResult, ToolError> {
        let req = pb::ApplyRequest { task_id: task_id(&p.task_id)? };
        let id = req.task_id.clone();
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.apply(req).await }
            })
            .await?;
        finish(
            &ApplyOutput {
                task_id: id,
                applied: r.applied,
                conflicts: r.conflicts,
                already_applied: r.already_applied,
                message: r.message,
                shaping: Default::default(),
            },
            self.cap(),
            "Truncated to fit the response cap: the conflict list was cut.",
        )
    }

    async fn list_agents(&self, ctx: &RequestContext<RoleServer>) -> Result<CallToolResult, ToolError> {
        let req = pb::ListAgentsRequest { workspace: self.root_or_global(ctx).await };
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.list_agents(req).await }
            })
            .await?;
        finish(
            &ListAgentsOutput {
                agents: r.agents.iter().map(AgentOutput::from_pb).collect(),
                shaping: Default::default(),
            },
            self.cap(),
            "Truncated to fit the response cap: some agents or fields were cut.",
        )
    }

    async fn describe_agent(
        &self,
        p: DescribeAgentParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        if p.agent.trim().is_empty() {
            return Err(ToolError::validation("`agent` is empty: name an agent from caesar_list_agents"));
        }
        let req =
            pb::DescribeAgentRequest { agent: p.agent.trim().to_owned(), workspace: self.root_or_global(ctx).await };
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.describe_agent(req).await }
            })
            .await?;
        let agent = AgentOutput::from_pb(&r.agent.unwrap_or_default());
        let options = serde_json::from_str(&r.options_json).unwrap_or(Value::Null);
        finish(
            &DescribeAgentOutput { agent, options, shaping: Default::default() },
            self.cap(),
            "Truncated to fit the response cap.",
        )
    }

    async fn list_roles(&self, ctx: &RequestContext<RoleServer>) -> Result<CallToolResult, ToolError> {
        let req = pb::ListRolesRequest { workspace: self.root_or_global(ctx).await };
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.list_roles(req).await }
            })
            .await?;
        let roles =
            r.roles_json.iter().map(|j| serde_json::from_str(j).unwrap_or_else(|_| Value::String(j.clone()))).collect();
        finish(
            &ListRolesOutput { roles, shaping: Default::default() },
            self.cap(),
            "Truncated to fit the response cap: some roles or fields were cut.",
        )
    }

    async fn answer(&self, p: AnswerParams) -> Result<CallToolResult, ToolError> {
        if p.question_id.trim().is_empty() || p.answer.is_empty() {
            return Err(ToolError::validation("`question_id` and `answer` must not be empty"));
        }
        let req =
            pb::AnswerRequest { task_id: task_id(&p.task_id)?, question_id: p.question_id.clone(), answer: p.answer };
        let id = req.task_id.clone();
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.answer(req).await }
            })
            .await?;
        finish(
            &AnswerOutput { task_id: id, question_id: p.question_id, answered: r.answered },
            self.cap(),
            "Truncated to fit the response cap.",
        )
    }
}

impl Shim {
    async fn steer(&self, p: SteerParams) -> Result<CallToolResult, ToolError> {
        if p.text.trim().is_empty() {
            return Err(ToolError::validation("`text` is empty: say what the sub-agent should know"));
        }
        let max = caesar_proto::STEER_MAX_BYTES;
        if p.text.len() > max {
            return Err(ToolError::validation(format!(
                "`text` is {} bytes, past the limit of {max}; say it in fewer words, or put the details in a file in \
                 the task's worktree and point the agent to it",
                p.text.len()
            )));
        }
        let req = pb::SteerRequest { task_id: task_id(&p.task_id)?, text: p.text, interrupt: p.interrupt };
        let id = req.task_id.clone();
        let r = self
            .daemon()
            .call(move |mut c| {
                let req = req.clone();
                async move { c.steer(req).await }
            })
            .await?;
        finish(
            &SteerOutput { task_id: id, steer_id: r.steer_id, route: r.route, queued_for_start: r.queued_for_start },
            self.cap(),
            "Truncated to fit the response cap.",
        )
    }
}

impl ServerHandler for Shim {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("caesar", caesar_proto::VERSION))
            .with_instructions(
                "caesar delegates objectives to coding-agent CLIs supervised by the caesard daemon. \
                 Start work with caesar_delegate (it returns at once), collect results with caesar_await, \
                 check in with caesar_status or caesar_logs, review worktree changes with caesar_diff and \
                 land them with caesar_apply. Failed calls return `code: message` with a stable code: \
                 validation_error, not_found, policy_refused, conflict, daemon_unavailable or internal_error.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let visible = self.visible(&context).map_err(|e| McpError::invalid_params(e, None))?;
        Ok(ListToolsResult::with_all_items(
            tools::all().iter().filter(|t| visible.contains(&t.name.as_ref())).cloned().collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let visible = self.visible(&context).map_err(|e| McpError::invalid_params(e, None))?;
        if !visible.contains(&name) {
            // Calling a tool this server does not expose is a protocol fault.
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`; this server exposes: {}", visible.join(", ")),
                None,
            ));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let result = match self.dispatch(name, args, &context).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(tool = name, code = e.code.as_str(), "{}", e.message);
                e.into_result()
            }
        };
        if name == tools::DELEGATE && crate::tasks::wanted(&context) {
            return Ok(crate::tasks::handle(result));
        }
        Ok(result.into())
    }

    async fn get_task(&self, r: GetTaskParams, ctx: RequestContext<RoleServer>) -> Result<GetTaskResult, McpError> {
        crate::task_listen::detailed(self, &r.task_id, &ctx).await
    }

    async fn update_task(&self, r: UpdateTaskParams, _: RequestContext<RoleServer>) -> Result<(), McpError> {
        crate::tasks::update(self.daemon(), &r.task_id, r.input_responses).await
    }

    async fn cancel_task(&self, r: CancelTaskParams, _: RequestContext<RoleServer>) -> Result<(), McpError> {
        crate::tasks::cancel(self.daemon(), &r.task_id).await
    }

    async fn on_custom_request(
        &self,
        r: rmcp::model::CustomRequest,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        // The extension's task subscriptions and MCP 2025-11-25's task
        // requests, renamed by crate::legacy_wire.
        if r.method == crate::task_listen::METHOD {
            return crate::task_listen::listen(self, r.params, ctx).await.map(rmcp::model::CustomResult);
        }
        match crate::legacy_tasks::handle(self, &r.method, r.params, ctx).await {
            Some(answer) => answer.map(rmcp::model::CustomResult),
            None => Err(McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, r.method, None)),
        }
    }
}

/// Parses tool arguments; a mismatch is a `validation_error`.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::validation(format!("bad parameters: {e}")))
}

fn task_id(id: &str) -> Result<String, ToolError> {
    let id = id.trim();
    if id.is_empty() {
        return Err(ToolError::validation("`task_id` is empty: pass the task_id caesar_delegate returned"));
    }
    Ok(id.to_owned())
}

fn cancelled() -> ToolError {
    ToolError::new(ErrorCode::Internal, "the client cancelled the request")
}

/// A one-line summary of an event for progress messages.
fn event_summary(e: &Value) -> String {
    let kind = e.get("type").and_then(Value::as_str).unwrap_or("event");
    let detail =
        ["text", "message", "name", "tool", "path", "summary"].iter().find_map(|k| e.get(*k).and_then(Value::as_str));
    match detail {
        Some(d) => {
            let d: String = d.chars().take(120).collect();
            format!("{kind} {d:?}")
        }
        None => kind.to_owned(),
    }
}

/// Refuses a caesar_await on more than [`AWAIT_MAX_IDS`] ids before the daemon is asked.
fn check_await_ids(n: usize) -> Result<(), ToolError> {
    if n > AWAIT_MAX_IDS {
        return Err(ToolError::validation(format!(
            "`task_ids` names {n} tasks, more than the {AWAIT_MAX_IDS} one caesar_await may wait on: \
             await them in batches of at most {AWAIT_MAX_IDS}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn await_ids_are_capped_with_a_validation_error() {
        assert!(check_await_ids(AWAIT_MAX_IDS).is_ok());
        let e = check_await_ids(AWAIT_MAX_IDS + 1).unwrap_err();
        assert_eq!(e.code, ErrorCode::Validation);
        assert!(e.message.contains("1001") && e.message.contains("batches"), "{}", e.message);
    }
}

//! The gRPC face of the engine: converts `caesar.v1` messages to engine
//! types and back. No engine logic lives here.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use caesar_proto::pb::{self, caesar_server::Caesar};
use futures_util::{Stream, StreamExt};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::engine::{Caller, DelegateInput, Engine, TaskView};
use crate::rpc_kinds::{WireEnum, wire_opt};
use crate::store::TaskStatus;

/// Default and ceiling of `Await.timeout_ms`.
pub const AWAIT_DEFAULT_MS: u64 = 30_000;
pub const AWAIT_MAX_MS: u64 = 10 * 60 * 1000;
/// Default age of a finished task's worktree before gc removes it (1 day).
pub const GC_DEFAULT_AGE_MS: u64 = 24 * 60 * 60 * 1000;
pub use crate::engine::ASK_DEFAULT_MS;

/// The service. Shutdown requests are passed to the server through `stop`.
pub struct Service {
    engine: Arc<Engine>,
    stop: watch::Sender<bool>,
    /// The web dashboard, when this daemon serves one.
    dashboard: Option<Arc<crate::dashboard::Hub>>,
}

impl Service {
    /// A service over `engine`; `stop` is set to `true` on a Shutdown call.
    pub fn new(engine: Arc<Engine>, stop: watch::Sender<bool>) -> Service {
        Service { engine, stop, dashboard: None }
    }

    /// The same service, answering OpenDashboard with `hub`.
    pub fn with_dashboard(mut self, hub: Arc<crate::dashboard::Hub>) -> Service {
        self.dashboard = Some(hub);
        self
    }
}

impl Service {
    /// Who sent `req`: the kernel's word on its connection, not its claims
    /// (issue 19; `engine/authority.rs`).
    async fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        Ok(self.engine.caller(req.extensions().get::<caesar_proto::peer::PeerInfo>()).await?)
    }

    /// Who `caller` delegates as, for the recursion rule (`crate::host`).
    fn host<T>(caller: &Caller, req: &Request<T>) -> crate::host::Host {
        match caller {
            Caller::User => crate::host::of_peer(req.extensions().get::<caesar_proto::peer::PeerInfo>()),
            Caller::Task(t) => crate::host::of_task_agent(&t.agent),
            Caller::Untrusted(_) => crate::host::Host::Unknown,
        }
    }

    /// Refuses a call about `task_id` the caller may not reach.
    fn reach(&self, caller: &Caller, what: &str, task_id: &str) -> Result<(), Status> {
        if !matches!(caller, Caller::User) {
            caller.require_reach(what, &self.engine.views().record(task_id)?)?;
        }
        Ok(())
    }

    /// A return-channel call speaks for the caller's own task: from inside
    /// task T's tree, only T. The transport is the whole credential (issue
    /// 19): no secret exists, so nothing an agent reads speaks for a task.
    fn channel(&self, caller: &Caller, c: pb::ChannelRequest) -> Result<String, Status> {
        match caller {
            Caller::Task(t) if t.id == c.task_id => Ok(c.task_id),
            Caller::Task(t) => Err(Status::permission_denied(format!(
                "this channel call names task {}, but it comes from inside task {}'s process tree: a channel speaks only for its own task",
                c.task_id, t.id
            ))),
            Caller::User => Err(Status::permission_denied(format!(
                "this channel call names task {}, but it comes from outside every task's process tree: the return channel speaks only from inside its task (`caesar-mcp --channel`, started by the task's agent); the orchestrator uses status, answer and cancel instead",
                c.task_id
            ))),
            Caller::Untrusted(why) => Err(Status::permission_denied(format!("the channel call is refused: {why}"))),
        }
    }
}

fn opt(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

/// Converts an engine view to the wire.
pub fn task_view(v: TaskView, pending: bool) -> pb::TaskView {
    let r = v.record;
    let now = crate::clock::now_ms();
    let elapsed_ms = match (r.started_ms, r.finished_ms) {
        (Some(s), Some(f)) => (f - s).max(0) as u64,
        (Some(s), None) => (now - s).max(0) as u64,
        _ => 0,
    };
    pb::TaskView {
        task_id: r.id,
        status: r.status.wire(),
        agent: r.agent,
        role: r.role.unwrap_or_default(),
        mode: r.mode.as_str().to_owned(),
        isolation: r.isolation.as_str().to_owned(),
        objective: r.objective,
        workspace: r.workspace,
        created_at: crate::clock::rfc3339(r.created_ms),
        started_at: r.started_ms.map(crate::clock::rfc3339).unwrap_or_default(),
        finished_at: r.finished_ms.map(crate::clock::rfc3339).unwrap_or_default(),
        exit_code: r.exit_code,
        last_event_json: r.last_event.unwrap_or_default(),
        report_status: v.report.as_ref().map(|x| x.status.clone()).unwrap_or_default(),
        report_source: v.report.as_ref().map(|x| x.source.clone()).unwrap_or_default(),
        report_json: v.report.map(|x| x.body).unwrap_or_default(),
        pending_questions: v
            .pending_questions
            .into_iter()
            .zip(v.question_details.into_iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(q, d)| {
                let d = d.unwrap_or_else(crate::engine::QuestionDetails::question);
                pb::PendingQuestion {
                    question_id: q.question_id,
                    question: q.question,
                    options: q.options,
                    asked_at: crate::clock::rfc3339(q.asked_ms),
                    kind: d.kind.wire(),
                    tool: d.tool.unwrap_or_default(),
                    tool_kind: d.tool_kind.unwrap_or_default(),
                    input_json: d.input_json.unwrap_or_default(),
                    option_details: d
                        .options
                        .into_iter()
                        .map(|o| pb::QuestionOption { id: o.id, label: o.label, kind: o.kind })
                        .collect(),
                }
            })
            .collect(),
        pending: pending && !r.status.is_terminal(),
        session_id: r.session_id.unwrap_or_default(),
        model: r.model.unwrap_or_default(),
        timeout_ms: r.timeout_ms,
        event_count: r.event_count,
        error: r.error.unwrap_or_default(),
        task_dir: r.task_dir,
        network: r.network,
        output_age_ms: v.output.as_ref().map(|(_, at)| (now - at).max(0) as u64),
        output_tail: v.output.map(|(t, _)| t).unwrap_or_default(),
        blocker: wire_opt(r.blocker),
        elapsed_ms,
        activity: v.activity.map(|a| pb::Activity {
            kind: a.kind.to_owned(),
            tool_name: a.tool_name,
            state: a.state,
            age_ms: (now - a.at_ms).max(0) as u64,
        }),
        queue_position: v.queue_position,
        phase: wire_opt(v.phase),
        changes: wire_opt(r.changes_state),
        attempts: v
            .lifecycle
            .attempts
            .into_iter()
            .map(|a| pb::Attempt {
                task_id: a.task_id,
                agent: a.agent,
                stopped_by: wire_opt(a.stopped_by),
                message: a.message,
                files_changed: a.files_changed,
                relayed: a.relayed,
            })
            .collect(),
        budget: v.lifecycle.budget.map(|b| pb::BudgetStatus {
            limits: Some(pb::Budget {
                tokens: b.limits.tokens.map(|v| v as i64),
                cost_usd: b.limits.cost_usd,
                wall_ms: b.limits.wall_ms.map(|v| v as i64),
                turns: b.limits.turns.map(|v| v as i64),
            }),
            tokens: b.used.tokens,
            cost_usd: b.used.cost_usd,
            turns: b.used.turns,
            wall_ms: b.wall_ms,
            exceeded: b.exceeded.unwrap_or_default(),
        }),
        current_task_id: v.lifecycle.current_task_id.unwrap_or_default(),
        parked_until: v.lifecycle.parked.as_ref().map(|(t, _)| crate::clock::rfc3339(*t)).unwrap_or_default(),
        parked_until_ms: v.lifecycle.parked.as_ref().map(|(t, _)| *t),
        continues: v.lifecycle.continues.unwrap_or_default(),
        continued_by: v.lifecycle.continued_by.unwrap_or_default(),
        parked_reason: v.lifecycle.parked.map(|(_, r)| r).unwrap_or_default(),
        conflicts_with: Vec::new(),
        radar_age_ms: None,
        mcp_ttl_ms: None,
        mcp_expired: false,
        verdict: pb::Verdict::parse(v.verdict.word()).map_or(0, |w| w as i32),
        verdict_detail: v.verdict.detail,
        parents: v.stack.as_ref().map(|s| s.parents.clone()).unwrap_or_default(),
        stale: v.stack.and_then(|s| s.stale).unwrap_or_default(),
        forked_from: String::new(),
        review: v.review.as_ref().map(crate::engine::review::summary).unwrap_or_default(),
        review_findings: v.review.map(|r| r.findings.into_iter().map(review_finding).collect()).unwrap_or_default(),
    }
}

/// A review loop's finding on the wire (issue 32).
fn review_finding(f: crate::store::FindingRow) -> pb::ReviewFinding {
    pb::ReviewFinding {
        round: f.round,
        reviewer_task_id: f.reviewer_task_id,
        file: f.file,
        line: f.line,
        hunk: f.hunk,
        severity: f.severity,
        title: f.title,
        detail: f.detail,
        state: f.state,
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::EventMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Caesar for Service {
    async fn ping(&self, _: Request<pb::PingRequest>) -> Result<Response<pb::PingResponse>, Status> {
        let paths = self.engine.paths();
        Ok(Response::new(pb::PingResponse {
            version: caesar_proto::VERSION.to_owned(),
            protocol: crate::protocol_number(),
            pid: std::process::id(),
            active_tasks: self.engine.views().active_count()?,
            state_dir: paths.state_dir.display().to_string(),
            socket: paths.socket.display().to_string(),
        }))
    }

    async fn shutdown(&self, req: Request<pb::ShutdownRequest>) -> Result<Response<pb::ShutdownResponse>, Status> {
        self.caller(&req).await?.require_user("shutdown")?;
        let req = req.into_inner();
        let active = self.engine.views().active_count()?;
        if req.only_if_idle && active > 0 {
            return Ok(Response::new(pb::ShutdownResponse { stopping: false, active_tasks: active }));
        }
        if req.cancel_tasks {
            for v in self.engine.views().list(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)? {
                let _ = self.engine.cancel(&v.record.id).await;
            }
        }
        let _ = self.stop.send(true);
        Ok(Response::new(pb::ShutdownResponse { stopping: true, active_tasks: active }))
    }

    async fn delegate(&self, req: Request<pb::DelegateRequest>) -> Result<Response<pb::DelegateResponse>, Status> {
        let caller = self.caller(&req).await?;
        let host = Self::host(&caller, &req);
        let r = req.into_inner();
        let group = crate::rpc_fanout::is_group(&r).then(|| crate::rpc_fanout::ask(&r));
        let mut input = DelegateInput {
            objective: r.objective,
            agent: opt(r.agent),
            role: opt(r.role),
            mode: opt(r.mode),
            isolation: opt(r.isolation),
            network: opt(r.network),
            context: r.context,
            constraints: r.constraints,
            acceptance_criteria: r.acceptance_criteria,
            model: if r.model.is_empty() { None } else { Some(r.model) },
            timeout_ms: if r.timeout_ms == 0 { None } else { Some(r.timeout_ms) },
            channel: r.channel,
            workspace: r.workspace,
            session_id: opt(r.session_id),
            effort: opt(r.effort),
            depth: r.depth,
            budget: match r.budget {
                Some(b) => Some(
                    crate::lifecycle::Limits::from_signed("budget", b.tokens, b.cost_usd, b.wall_ms, b.turns)
                        .map_err(Status::invalid_argument)?,
                ),
                None => None,
            },
            on_blocker: opt(r.on_blocker),
            verify: r.verify,
            runner: opt(r.runner),
            depends_on: r.depends_on,
            on_parent_failure: opt(r.on_parent_failure),
            host,
            continue_from: opt(r.continue_from),
            review_by: opt(r.review_by),
            review_rounds: (r.review_rounds != 0).then_some(r.review_rounds),
            chosen_id: None,
            relay_to: opt(r.relay_to),
        };
        // The depth is the daemon's to say, never the request's: 0 for the
        // user, the parent's plus one inside a task.
        let (d, group_id, task_ids) = match (&caller, group) {
            (Caller::Untrusted(_), _) => {
                return Err(caller
                    .require_user("delegate")
                    .err()
                    .map(Status::from)
                    .unwrap_or_else(|| Status::permission_denied("delegate")));
            }
            (Caller::Task(_), Some(_)) => {
                return Err(Status::failed_precondition(
                    "a fan-out group (`agents` or `attempts`) is delegated by the user's orchestrator, not from inside a task: delegate the members one by one",
                ));
            }
            (Caller::User, Some(ask)) => {
                input.depth = 0;
                let g = self.engine.delegate_group(input, ask).await?;
                let ids = g.tasks.iter().map(|t| t.record.id.clone()).collect();
                let first = g.tasks.into_iter().next().ok_or_else(|| Status::internal("an empty group"))?;
                (first, g.group_id, ids)
            }
            (Caller::User, None) => {
                input.depth = 0;
                let d = self.engine.delegate(input).await?;
                // Issue 32: a reviewed task's rounds are a group.
                let group = self.engine.store().group_of(&d.record.id)?.unwrap_or_default();
                (d, group, Vec::new())
            }
            (Caller::Task(parent), None) => {
                (self.engine.delegate_from(parent, input).await?, String::new(), Vec::new())
            }
        };
        Ok(Response::new(crate::rpc_fork::response(d, group_id, task_ids)))
    }

    async fn r#await(&self, req: Request<pb::AwaitRequest>) -> Result<Response<pb::AwaitResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        if !matches!(caller, Caller::User) {
            crate::engine::bounds::check_await_ids(r.task_ids.len())?;
            for id in &r.task_ids {
                self.reach(&caller, "await", id)?;
            }
        }
        let ms = if r.timeout_ms == 0 { AWAIT_DEFAULT_MS } else { r.timeout_ms.min(AWAIT_MAX_MS) };
        let deadline = std::time::Instant::now() + Duration::from_millis(ms);
        let (views, woke_early, group_ids) = loop {
            let mut ids = r.task_ids.clone();
            let group_ids = crate::rpc_fanout::expand(&self.engine, &mut ids)?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let (views, woke) = self.engine.views().await_tasks(&ids, left, r.wake_on_attention).await?;
            // A review loop's group (issue 32) is awaited to the loop's end, its members as they come.
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut looping = false;
            if !woke && !left.is_zero() && views.iter().all(|v| v.record.status.is_terminal()) {
                for g in &group_ids {
                    looping |= self.engine.review_step_of_group(g, left).await;
                }
            }
            if !looping {
                break (views, woke, group_ids);
            }
        };
        let mut tasks: Vec<pb::TaskView> = views.into_iter().map(|v| task_view(v, true)).collect();
        for t in &mut tasks {
            (t.conflicts_with, t.radar_age_ms) = crate::rpc_fanout::conflicts_with(&self.engine, &t.task_id);
        }
        let groups = crate::rpc_fanout::summaries(&self.engine, group_ids).await?;
        Ok(Response::new(pb::AwaitResponse { tasks, woke_early, groups }))
    }

    async fn status(&self, req: Request<pb::StatusRequest>) -> Result<Response<pb::TaskView>, Status> {
        let caller = self.caller(&req).await?;
        let id = req.into_inner().task_id;
        self.reach(&caller, "status", &id)?;
        let mut v = task_view(self.engine.views().status(&id)?, false);
        (v.conflicts_with, v.radar_age_ms) = crate::rpc_fanout::conflicts_with(&self.engine, &v.task_id);
        crate::rpc_mcp_tasks::annotate(&self.engine, &id, &mut v)?;
        v.forked_from = crate::rpc_fork::lineage(&self.engine, &id);
        // Status is a snapshot: the report itself is for Await.
        v.report_json.clear();
        Ok(Response::new(v))
    }

    async fn list_tasks(&self, req: Request<pb::ListTasksRequest>) -> Result<Response<pb::ListTasksResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        let statuses = r.statuses.iter().map(|&s| TaskStatus::from_wire(s)).collect::<Result<Vec<_>, _>>()?;
        let limit = if r.limit == 0 { 50 } else { r.limit.min(10_000) };
        let tasks = match &caller {
            Caller::User => self.engine.views().list(&statuses, limit)?,
            // A task lists itself and its children only.
            Caller::Task(t) => self
                .engine
                .views()
                .list(&statuses, 10_000)?
                .into_iter()
                .filter(|v| crate::engine::authority_reaches(t, &v.record))
                .take(limit as usize)
                .collect(),
            Caller::Untrusted(_) => {
                return Err(caller
                    .require_user("list tasks")
                    .err()
                    .map(Status::from)
                    .unwrap_or_else(|| Status::permission_denied("list tasks")));
            }
        };
        Ok(Response::new(pb::ListTasksResponse {
            tasks: tasks
                .into_iter()
                .map(|v| {
                    let mut v = task_view(v, false);
                    v.report_json.clear();
                    v
                })
                .collect(),
        }))
    }

    async fn logs(&self, req: Request<pb::LogsRequest>) -> Result<Response<pb::LogsResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        self.reach(&caller, "logs", &r.task_id)?;
        let limit = if r.limit == 0 { 50 } else { r.limit };
        let max_bytes = if r.max_bytes == 0 { 64 * 1024 } else { r.max_bytes.min(16 * 1024 * 1024) };
        let l = self.engine.views().logs(&r.task_id, r.raw, limit, max_bytes)?;
        Ok(Response::new(pb::LogsResponse {
            total_events: l.total_events,
            events_json: l.events,
            raw: l.raw,
            raw_size: l.raw_size,
            raw_truncated: l.raw_truncated,
        }))
    }

    async fn cancel(&self, req: Request<pb::CancelRequest>) -> Result<Response<pb::CancelResponse>, Status> {
        let caller = self.caller(&req).await?;
        let id = req.into_inner().task_id;
        if !matches!(caller, Caller::User) {
            caller.require_parent_of("cancel", &self.engine.views().record(&id)?)?;
        }
        let (cancelled, status) = self.engine.cancel(&id).await?;
        Ok(Response::new(pb::CancelResponse { cancelled, status: status.wire() }))
    }

    async fn diff(&self, req: Request<pb::DiffRequest>) -> Result<Response<pb::DiffResponse>, Status> {
        let caller = self.caller(&req).await?;
        let id = req.into_inner().task_id;
        self.reach(&caller, "diff", &id)?;
        let engine = self.engine.clone();
        let overlaps = crate::rpc_fanout::conflicts_with(&self.engine, &id).0;
        let diff = tokio::task::spawn_blocking(move || engine.changes().diff(&id))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(match diff {
            None => pb::DiffResponse { is_empty: true, files: Vec::new(), patch: String::new(), overlaps },
            Some(d) => pb::DiffResponse {
                is_empty: d.is_empty,
                files: d
                    .files
                    .into_iter()
                    .map(|f| pb::DiffFile {
                        path: f.path,
                        status: f.status,
                        additions: f.additions,
                        deletions: f.deletions,
                        old_path: f.old_path.unwrap_or_default(),
                        binary: f.binary,
                    })
                    .collect(),
                patch: d.patch,
                overlaps,
            },
        }))
    }

    async fn apply(&self, req: Request<pb::ApplyRequest>) -> Result<Response<pb::ApplyResponse>, Status> {
        self.caller(&req).await?.require_user("apply")?;
        let id = req.into_inner().task_id;
        let engine = self.engine.clone();
        let breaks = crate::rpc_fanout::would_break(&self.engine, &id);
        let r = tokio::task::spawn_blocking(move || engine.changes().apply(&id))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::ApplyResponse {
            applied: r.applied,
            conflicts: r.conflicts.into_iter().map(|c| format!("{}: {}", c.path, c.reason)).collect(),
            already_applied: r.already_applied,
            message: r.message,
            files: r.files,
            breaks: if r.applied { breaks } else { Vec::new() },
        }))
    }

    async fn discard(&self, req: Request<pb::DiscardRequest>) -> Result<Response<pb::DiscardResponse>, Status> {
        self.caller(&req).await?.require_user("discard")?;
        self.engine.changes().discard(&req.into_inner().task_id)?;
        Ok(Response::new(pb::DiscardResponse { discarded: true }))
    }

    async fn gc(&self, req: Request<pb::GcRequest>) -> Result<Response<pb::GcResponse>, Status> {
        self.caller(&req).await?.require_user("gc")?;
        let r = req.into_inner();
        let older = Duration::from_millis(if r.older_than_ms == 0 { GC_DEFAULT_AGE_MS } else { r.older_than_ms });
        let engine = self.engine.clone();
        let items = tokio::task::spawn_blocking(move || engine.changes().gc(older, r.dry_run, r.force))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::GcResponse {
            items: items
                .into_iter()
                .map(|i| pb::GcItem {
                    task_id: i.task_id,
                    worktree: i.worktree,
                    action: i.action,
                    reason: i.reason,
                    bytes: i.bytes,
                })
                .collect(),
        }))
    }

    async fn http_token(&self, req: Request<pb::HttpTokenRequest>) -> Result<Response<pb::HttpTokenResponse>, Status> {
        self.caller(&req).await?.require_user("http token")?;
        let paths = self.engine.paths();
        let r = req.into_inner();
        let kind = if r.readonly { crate::http::TokenKind::ReadOnly } else { crate::http::TokenKind::Full };
        let token = crate::http::token(&paths.state_dir, kind, r.rotate)?;
        let url = crate::config::Config::load_global(&paths.config_dir)
            .ok()
            .and_then(|c| c.http)
            .map(|h| format!("http://{}/mcp", h.listen))
            .unwrap_or_default();
        Ok(Response::new(pb::HttpTokenResponse { token, url }))
    }

    async fn health(&self, req: Request<pb::HealthRequest>) -> Result<Response<pb::HealthResponse>, Status> {
        let caller = self.caller(&req).await?;
        let workspace = req.into_inner().workspace;
        caller.require_workspace("health", &workspace)?;
        let engine = self.engine.clone();
        let (store, problems) = tokio::task::spawn_blocking(move || {
            (engine.store().integrity_check(), engine.projects().problems(&workspace))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        let mut problems = problems;
        problems.extend(self.engine.notices().problems());
        let http = crate::config::Config::load_global(&self.engine.paths().config_dir).ok().and_then(|c| c.http);
        let (http_url, http_listening) = match http {
            Some(h) => {
                let listening = tokio::net::TcpStream::connect(&h.listen).await.is_ok();
                if !listening {
                    problems.push(format!(
                        "MCP over HTTP is configured on {} but nothing answers there: restart caesard (see `caesar daemon logs`)",
                        h.listen
                    ));
                }
                (format!("http://{}/mcp", h.listen), listening)
            }
            None => (String::new(), false),
        };
        Ok(Response::new(pb::HealthResponse {
            store_ok: store.is_ok(),
            store_error: store.err().map(|e| e.to_string()).unwrap_or_default(),
            problems,
            http_url,
            http_listening,
            environment: crate::origin::environment_origin().to_owned(),
            protections: format!(
                "read-only tasks: {}; write tasks: {}",
                crate::sandbox::describe(true),
                crate::sandbox::describe(false)
            ),
        }))
    }

    async fn list_agents(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let caller = self.caller(&req).await?;
        caller.require_workspace("agents list", &req.get_ref().workspace)?;
        let host = Self::host(&caller, &req);
        let workspace = req.into_inner().workspace;
        let engine = self.engine.clone();
        let (agents, warnings) = tokio::task::spawn_blocking(move || {
            let agents = engine.projects().list_agents_from(&workspace, host);
            agents.map(|a| (a, engine.projects().untrusted_warnings(&workspace)))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::ListAgentsResponse { agents: agents.into_iter().map(agent_info).collect(), warnings }))
    }

    async fn describe_agent(
        &self,
        req: Request<pb::DescribeAgentRequest>,
    ) -> Result<Response<pb::DescribeAgentResponse>, Status> {
        let caller = self.caller(&req).await?;
        caller.require_workspace("agents describe", &req.get_ref().workspace)?;
        let host = Self::host(&caller, &req);
        let r = req.into_inner();
        let engine = self.engine.clone();
        let entry = tokio::task::spawn_blocking(move || engine.projects().describe_agent(&r.agent, &r.workspace, host))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        let options_json = entry.options.to_string();
        let protections_json = serde_json::json!({
            "read-only": crate::sandbox::describe_for(true, entry.id.parse().unwrap_or_default()),
            "write": crate::sandbox::describe_for(false, entry.id.parse().unwrap_or_default()),
        })
        .to_string();
        Ok(Response::new(pb::DescribeAgentResponse { agent: Some(agent_info(entry)), options_json, protections_json }))
    }

    async fn list_roles(&self, req: Request<pb::ListRolesRequest>) -> Result<Response<pb::ListRolesResponse>, Status> {
        let caller = self.caller(&req).await?;
        caller.require_workspace("role list", &req.get_ref().workspace)?;
        let host = Self::host(&caller, &req);
        let workspace = req.into_inner().workspace;
        let engine = self.engine.clone();
        let roles = tokio::task::spawn_blocking(move || engine.projects().list_roles_from(&workspace, host))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::ListRolesResponse { roles_json: roles.iter().map(|r| r.to_string()).collect() }))
    }

    async fn show_config(
        &self,
        req: Request<pb::ShowConfigRequest>,
    ) -> Result<Response<pb::ShowConfigResponse>, Status> {
        let caller = self.caller(&req).await?;
        let workspace = req.into_inner().workspace;
        caller.require_workspace("config show", &workspace)?;
        let config = self.engine.projects().show_config(&workspace)?;
        Ok(Response::new(pb::ShowConfigResponse { config_json: config.to_string() }))
    }

    async fn edit_config(
        &self,
        req: Request<pb::EditConfigRequest>,
    ) -> Result<Response<pb::EditConfigResponse>, Status> {
        self.caller(&req).await?.require_user("config edit")?;
        let r = req.into_inner();
        let edit: crate::config_edit::Edit =
            serde_json::from_str(&r.edit_json).map_err(|e| Status::invalid_argument(format!("bad edit: {e}")))?;
        let o = self.engine.projects().edit_config(&r.workspace, &r.layer, &edit)?;
        Ok(Response::new(pb::EditConfigResponse {
            changed: o.changed,
            message: o.message,
            path: o.path.display().to_string(),
        }))
    }

    async fn init_project(
        &self,
        req: Request<pb::InitProjectRequest>,
    ) -> Result<Response<pb::InitProjectResponse>, Status> {
        self.caller(&req).await?.require_user("init")?;
        let r = req.into_inner();
        let w = self.engine.projects().init(&r.workspace, r.global, r.force)?;
        let show = |v: Vec<std::path::PathBuf>| v.into_iter().map(|p| p.display().to_string()).collect();
        Ok(Response::new(pb::InitProjectResponse { written: show(w.written), kept: show(w.kept) }))
    }

    async fn protocol_schema(
        &self,
        req: Request<pb::ProtocolSchemaRequest>,
    ) -> Result<Response<pb::ProtocolSchemaResponse>, Status> {
        let r = req.into_inner();
        let schema = crate::oacp::schema(&r.document, r.strict).ok_or_else(|| {
            Status::invalid_argument(format!("unknown document `{}`: use task, report or event", r.document))
        })?;
        Ok(Response::new(pb::ProtocolSchemaResponse { schema_json: schema.to_string() }))
    }

    async fn answer(&self, req: Request<pb::AnswerRequest>) -> Result<Response<pb::AnswerResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        if !matches!(caller, Caller::User) {
            caller.require_parent_of("answer", &self.engine.views().record(&r.task_id)?)?;
        }
        self.engine.channel().answer(&r.task_id, &r.question_id, &r.answer)?;
        Ok(Response::new(pb::AnswerResponse { answered: true }))
    }

    async fn steer(&self, req: Request<pb::SteerRequest>) -> Result<Response<pb::SteerResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        if !matches!(caller, Caller::User) {
            caller.require_parent_of("steer", &self.engine.views().record(&r.task_id)?)?;
        }
        let s = self.engine.channel().steer(&r.task_id, &r.text, r.interrupt)?;
        Ok(Response::new(pb::SteerResponse {
            steer_id: s.steer_id,
            route: s.route.to_owned(),
            queued_for_start: s.queued_for_start,
        }))
    }

    async fn fork(&self, req: Request<pb::ForkRequest>) -> Result<Response<pb::DelegateResponse>, Status> {
        let caller = self.caller(&req).await?;
        Ok(Response::new(crate::rpc_fork::fork(&self.engine, &caller, req.into_inner()).await?))
    }

    async fn watch_events(&self, req: Request<pb::WatchEventsRequest>) -> Result<Response<EventStream>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        self.reach(&caller, "watch", &r.task_id)?;
        let rx = self.engine.views().watch_events(&r.task_id, r.from_seq, r.follow)?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx)
            .map(|(seq, event_json)| Ok(pb::EventMessage { seq, event_json }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_task(&self, req: Request<pb::ChannelRequest>) -> Result<Response<pb::GetTaskResponse>, Status> {
        let caller = self.caller(&req).await?;
        let task_id = self.channel(&caller, req.into_inner())?;
        let task_json = self.engine.channel().get_task(&task_id)?;
        let steers =
            self.engine.views().record(&task_id).map(|r| self.engine.channel().channel_steers(&r)).unwrap_or_default();
        Ok(Response::new(pb::GetTaskResponse { task_json, steers }))
    }

    async fn report_progress(
        &self,
        req: Request<pb::ReportProgressRequest>,
    ) -> Result<Response<pb::ReportProgressResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        let task_id = self.channel(&caller, r.channel.unwrap_or_default())?;
        let seq = self.engine.channel().progress(&task_id, &r.message, r.pct)?;
        let steers =
            self.engine.views().record(&task_id).map(|r| self.engine.channel().channel_steers(&r)).unwrap_or_default();
        Ok(Response::new(pb::ReportProgressResponse { seq, steers }))
    }

    async fn ask_orchestrator(
        &self,
        req: Request<pb::AskOrchestratorRequest>,
    ) -> Result<Response<pb::AskOrchestratorResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        let task_id = self.channel(&caller, r.channel.unwrap_or_default())?;
        let timeout = Duration::from_millis(if r.timeout_ms == 0 { ASK_DEFAULT_MS } else { r.timeout_ms });
        let (question_id, answered, answer) =
            self.engine.channel().ask(&task_id, &r.question, r.options, timeout, Some(r.question_id.as_str())).await?;
        let steers =
            self.engine.views().record(&task_id).map(|r| self.engine.channel().channel_steers(&r)).unwrap_or_default();
        Ok(Response::new(pb::AskOrchestratorResponse { question_id, answered, answer, steers }))
    }

    async fn submit_report(
        &self,
        req: Request<pb::SubmitReportRequest>,
    ) -> Result<Response<pb::SubmitReportResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        let task_id = self.channel(&caller, r.channel.unwrap_or_default())?;
        self.engine.channel().submit_report(&task_id, &r.report_json)?;
        Ok(Response::new(pb::SubmitReportResponse { accepted: true }))
    }

    // ---- The web dashboard (issue 18).

    async fn open_dashboard(
        &self,
        req: Request<pb::OpenDashboardRequest>,
    ) -> Result<Response<pb::OpenDashboardResponse>, Status> {
        self.caller(&req).await?.require_user("ui (the dashboard's login link)")?;
        let Some(hub) = &self.dashboard else {
            return Err(Status::unavailable("this daemon serves no dashboard"));
        };
        let o = hub.open(&req.into_inner().workspace).await?;
        Ok(Response::new(pb::OpenDashboardResponse {
            login_url: o.login_url,
            base_url: o.base_url,
            opened_on_demand: o.opened_on_demand,
            login_valid_secs: crate::dashboard::LOGIN_VALID.as_secs() as u32,
        }))
    }

    // ---- Trust (issue 19).

    async fn trust(&self, req: Request<pb::TrustRequest>) -> Result<Response<pb::TrustResponse>, Status> {
        let caller = self.caller(&req).await?;
        let r = req.into_inner();
        if r.action != "list" {
            // An agent trusting its own repository's config would widen its own authority.
            caller.require_user(&format!("trust {}", r.action))?;
        }
        let engine = self.engine.clone();
        let entries = tokio::task::spawn_blocking(move || engine.projects().trust(&r.action, &r.path))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::TrustResponse {
            entries: entries
                .into_iter()
                .filter(|e| caller.sees_path(&e.path))
                .map(|e| pb::TrustEntry {
                    path: e.path,
                    sha256: e.sha256,
                    trusted_at: crate::clock::rfc3339(e.trusted_ms),
                })
                .collect(),
        }))
    }

    // ---- MCP tasks (issue 18).

    async fn set_mcp_task_ttl(
        &self,
        req: Request<pb::SetMcpTaskTtlRequest>,
    ) -> Result<Response<pb::SetMcpTaskTtlResponse>, Status> {
        let caller = self.caller(&req).await?;
        Ok(Response::new(crate::rpc_mcp_tasks::set_ttl(&self.engine, &caller, req.into_inner())?))
    }

    async fn list_tasks_page(
        &self,
        req: Request<pb::ListTasksPageRequest>,
    ) -> Result<Response<pb::ListTasksPageResponse>, Status> {
        let caller = self.caller(&req).await?;
        Ok(Response::new(crate::rpc_mcp_tasks::page(&self.engine, &caller, req.into_inner())?))
    }
}

fn agent_info(a: crate::catalog::AgentEntry) -> pb::AgentInfo {
    pb::AgentInfo {
        id: a.id,
        display_name: a.display_name,
        bin: a.bin,
        installed: a.installed,
        path: a.path.map(|p| p.display().to_string()).unwrap_or_default(),
        capabilities_json: a.capabilities.to_string(),
        default_model: a.default_model.unwrap_or_default(),
        allowed: a.allowed,
        refusal: a.refusal.unwrap_or_default(),
        version: a.version.unwrap_or_default(),
        kind: a.kind.to_owned(),
        protocol: a.protocol.to_owned(),
        protocol_reason: a.protocol_reason.to_owned(),
        headroom: a.headroom.unwrap_or_default(),
        observed_usage: a.observed_usage.unwrap_or_default(),
    }
}

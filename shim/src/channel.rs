//! `caesar-mcp --channel`: the return channel, an MCP server that runs inside
//! a delegated agent's process tree and speaks for that one task.
//!
//! It is the same binary as the orchestrator-side shim (one thing to install,
//! one version to match the daemon), started by the agent's CLI with the
//! task's id in its environment (`CAESAR_TASK_ID`). Four tools: `get_task`,
//! `report_progress`, `ask_orchestrator` and `submit_report`. The daemon
//! binds every call to the task whose process tree it comes from (issue 19),
//! and to nothing else: there is no secret. No orchestrator tool is
//! reachable from here.
//!
//! Questions live in the daemon, not here: `ask_orchestrator` picks its
//! question id itself, so when the daemon restarts mid-wait the channel
//! reconnects and asks again with the same id, and keeps waiting on the
//! same question.

use std::sync::Arc;
use std::time::{Duration, Instant};

use caesar_proto::client::{self, Client};
use caesar_proto::paths::Paths;
use caesar_proto::pb;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData as McpError, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use tokio::sync::Mutex;

/// How long the channel keeps trying to reach a daemon that went away.
const RECONNECT_FOR: Duration = Duration::from_secs(120);

/// `report_progress` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(transform = crate::schema::portable)]
pub struct ProgressArgs {
    /// What was done or is being done, in a sentence.
    pub message: String,
    /// How far along, from 0 to 100.
    #[serde(default)]
    pub pct: Option<f64>,
}

/// `ask_orchestrator` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AskArgs {
    /// The question, self-contained: the orchestrator sees only this.
    pub question: String,
    /// The answers you expect, if it is a choice.
    #[serde(default)]
    pub options: Vec<String>,
}

/// `submit_report` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SubmitArgs {
    /// The report: {"protocol":"caesar.report/v1","status":"success|partial|failed|blocked","summary":"...", ...}.
    pub report: serde_json::Value,
}

struct Inner {
    paths: Paths,
    task_id: String,
    client: Mutex<Option<Client>>,
}

/// The channel server.
#[derive(Clone)]
pub struct Channel {
    tool_router: ToolRouter<Self>,
    inner: Arc<Inner>,
}

fn failure(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn transport_broken(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}

fn question_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    format!("q_{:08x}", h.finish() & 0xffff_ffff)
}

#[tool_router]
impl Channel {
    /// A channel for the task named by the environment.
    pub fn from_env(paths: Paths) -> Result<Channel, String> {
        let var = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                format!("{name} is not set: --channel runs inside a task that caesar started with channel: true")
            })
        };
        Ok(Channel {
            tool_router: Self::tool_router(),
            inner: Arc::new(Inner {
                paths,
                // The daemon believes it only from inside that task's tree.
                task_id: var("CAESAR_TASK_ID")?,
                client: Mutex::new(None),
            }),
        })
    }

    fn scope(&self) -> pb::ChannelRequest {
        pb::ChannelRequest { task_id: self.inner.task_id.clone() }
    }

    /// Runs one RPC, reconnecting while the daemon restarts.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, String>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let mut delay = Duration::from_millis(50);
        loop {
            let cached = self.inner.client.lock().await.clone();
            let c = match cached {
                Some(c) => Some(c),
                None => client::connect(&self.inner.paths).await.ok().map(|(c, _)| c),
            };
            if let Some(c) = c {
                *self.inner.client.lock().await = Some(c.clone());
                match f(c).await {
                    Ok(r) => return Ok(r.into_inner()),
                    Err(s) if transport_broken(&s) => *self.inner.client.lock().await = None,
                    Err(s) => return Err(s.message().to_owned()),
                }
            }
            if started.elapsed() > RECONNECT_FOR {
                return Err(format!("the caesar daemon is unreachable at {}", self.inner.paths.socket.display()));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Re-reads your mission: the task.json caesar wrote for this task, followed by any new messages the orchestrator sent you while you work (call it to check for them).
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn get_task(&self) -> Result<CallToolResult, McpError> {
        let scope = self.scope();
        Ok(
            match self
                .call(move |mut c| {
                    let s = scope.clone();
                    async move { c.get_task(s).await }
                })
                .await
            {
                Ok(r) => CallToolResult::success(vec![ContentBlock::text(with_steers(r.task_json, &r.steers))]),
                Err(e) => failure(e),
            },
        )
    }

    /// Tells the orchestrator how far along you are, without ending the task. Use it at milestones.
    #[tool(annotations(read_only_hint = false, destructive_hint = false, open_world_hint = false))]
    async fn report_progress(&self, Parameters(a): Parameters<ProgressArgs>) -> Result<CallToolResult, McpError> {
        let req = pb::ReportProgressRequest { channel: Some(self.scope()), message: a.message, pct: a.pct };
        Ok(
            match self
                .call(move |mut c| {
                    let r = req.clone();
                    async move { c.report_progress(r).await }
                })
                .await
            {
                Ok(r) => CallToolResult::success(vec![ContentBlock::text(with_steers(
                    format!("progress recorded (event {})", r.seq),
                    &r.steers,
                ))]),
                Err(e) => failure(e),
            },
        )
    }

    /// Asks the orchestrator a question and waits for its answer (up to 5 minutes, never past your deadline). Use it when a decision is not yours to make. With no answer in time it tells you to proceed on your best judgment; that is not an error.
    #[tool(annotations(read_only_hint = false, destructive_hint = false, open_world_hint = false))]
    async fn ask_orchestrator(&self, Parameters(a): Parameters<AskArgs>) -> Result<CallToolResult, McpError> {
        let req = pb::AskOrchestratorRequest {
            channel: Some(self.scope()),
            question: a.question,
            options: a.options,
            timeout_ms: 0,
            question_id: question_id(),
        };
        Ok(
            match self
                .call(move |mut c| {
                    let r = req.clone();
                    async move { c.ask_orchestrator(r).await }
                })
                .await
            {
                Ok(r) if r.answered => CallToolResult::success(vec![ContentBlock::text(with_steers(
                    format!("Answer: {}", r.answer),
                    &r.steers,
                ))]),
                Ok(r) => CallToolResult::success(vec![ContentBlock::text(with_steers(r.answer, &r.steers))]),
                Err(e) => failure(e),
            },
        )
    }

    /// Hands in your final report, validated at once: an invalid report is refused naming the failing field, and you can fix it and submit again. The most reliable way to report.
    #[tool(annotations(
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn submit_report(&self, Parameters(a): Parameters<SubmitArgs>) -> Result<CallToolResult, McpError> {
        let report_json = match &a.report {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let req = pb::SubmitReportRequest { channel: Some(self.scope()), report_json };
        Ok(
            match self
                .call(move |mut c| {
                    let r = req.clone();
                    async move { c.submit_report(r).await }
                })
                .await
            {
                Ok(_) => CallToolResult::success(vec![ContentBlock::text("report accepted")]),
                Err(e) => failure(format!("report refused: {e}. Fix it and call submit_report again.")),
            },
        )
    }
}

/// A channel call's answer with the orchestrator's messages sent since the last call (steers,
/// issue 31), which a one-shot agent hears no other way.
fn with_steers(text: String, steers: &[String]) -> String {
    if steers.is_empty() {
        return text;
    }
    let mut out = text;
    out.push_str("\n\nMessage(s) from the orchestrator, sent while you work; take them into account:");
    for s in steers {
        out.push_str("\n- ");
        out.push_str(s);
    }
    out
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Channel {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("caesar-channel", caesar_proto::VERSION))
            .with_instructions(
                "The return channel to the orchestrator that delegated this task to you: report_progress at \
                 milestones, ask_orchestrator when a decision is not yours, submit_report when done. The \
                 orchestrator may send you messages while you work: they come in the answer of your next call \
                 (get_task reads them); follow them.",
            )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The return channel's tools reach the delegated agent's CLI (codex,
    /// gemini, opencode...), whose validators are as strict as any host's.
    #[test]
    fn the_channel_tools_have_strict_2020_12_schemas() {
        let tools = Channel::tool_router().list_all();
        assert!(!tools.is_empty());
        for t in tools {
            let mut schemas = vec![("input", serde_json::Value::Object(t.input_schema.as_ref().clone()))];
            if let Some(out) = &t.output_schema {
                schemas.push(("output", serde_json::Value::Object(out.as_ref().clone())));
            }
            for (what, schema) in schemas {
                assert_eq!(crate::schema::problems(&schema), Vec::<String>::new(), "{} {what}: {schema}", t.name);
                jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .should_validate_formats(true)
                    .should_ignore_unknown_formats(false)
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("{} {what}: {e}: {schema}", t.name));
            }
        }
    }
}

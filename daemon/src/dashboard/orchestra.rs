//! The dashboard's JSON for orchestration (issue 17's fan-out): groups side
//! by side (`Engine::group_view`: status, verification, files, lines,
//! usage and cost, overlaps), budgets (limit against use, per task, from
//! each task's view) and the conflict radar (`Radar::conflicts_with` of
//! every watched worktree task). Fields the page does not know are ignored
//! by it, so the engine may grow them.

use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::Hub;
use super::api::{engine_error, json_response};
use crate::engine::groups::{GroupView, is_group_id};
use crate::error::Error;
use crate::oacp::Isolation;

/// The most groups the page shows.
const GROUPS: u32 = 20;
/// How many of the newest tasks the budgets and radar pages look over.
const LOOKBACK: u32 = 300;

fn group_json(g: &GroupView) -> Value {
    let members: Vec<Value> = g
        .members
        .iter()
        .map(|m| {
            json!({
                "task_id": m.task_id, "agent": m.agent, "status": m.status.as_str(), "report_status": m.report_status,
                "verification": m.verification, "files_changed": m.files_changed, "lines_added": m.lines_added,
                "lines_removed": m.lines_removed, "input_tokens": m.input_tokens, "output_tokens": m.output_tokens,
                "cost_usd": m.cost_usd, "duration_ms": m.duration_ms, "summary": m.summary,
                "overlaps": m.overlaps.iter().map(|(t, mt)| json!({"task_id": t, "paths": mt.paths, "hunk_paths": mt.hunk_paths})).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "group_id": g.group_id, "objective": g.objective, "done": g.done, "members": members })
}

async fn blocking<F>(f: F) -> Response
where
    F: FnOnce() -> Result<Value, Error> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => engine_error(&e),
        Err(e) => engine_error(&Error::Internal(e.to_string())),
    }
}

/// `GET /api/groups`: the newest groups, each compared.
pub(super) async fn groups(State(hub): State<Arc<Hub>>) -> Response {
    blocking(move || {
        let engine = hub.engine();
        let ids = engine.store().recent_group_ids(GROUPS)?;
        let groups: Vec<Value> =
            ids.iter().filter_map(|id| engine.group_view(id).ok()).map(|g| group_json(&g)).collect();
        Ok(json!({ "groups": groups }))
    })
    .await
}

/// `GET /api/group/{id}`: one group; 400 for what is no group id, 404 for an unknown one.
pub(super) async fn group(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>) -> Response {
    if !is_group_id(&id) {
        return engine_error(&Error::Invalid(format!("`{id}` is not a group id (g_ and 12 hex digits)")));
    }
    blocking(move || Ok(group_json(&hub.engine().group_view(&id)?))).await
}

/// `GET /api/budgets`: each recent task with a budget, its limits and its use.
pub(super) async fn budgets(State(hub): State<Arc<Hub>>) -> Response {
    blocking(move || {
        let views = hub.engine().views().list(&[], LOOKBACK)?;
        let tasks: Vec<Value> = views
            .iter()
            .filter_map(|v| {
                let b = v.lifecycle.budget.as_ref()?;
                let r = &v.record;
                Some(json!({
                    "task_id": r.id, "agent": r.agent, "status": r.status.as_str(), "objective": r.objective,
                    "limits": { "tokens": b.limits.tokens, "cost_usd": b.limits.cost_usd, "wall_ms": b.limits.wall_ms, "turns": b.limits.turns },
                    "used": { "tokens": b.used.tokens, "cost_usd": b.used.cost_usd, "wall_ms": b.wall_ms, "turns": b.used.turns },
                    "exceeded": b.exceeded,
                }))
            })
            .collect();
        Ok(json!({ "tasks": tasks }))
    })
    .await
}

/// `GET /api/radar`: for every watched worktree task (live, or finished and
/// neither applied nor discarded), who its changes meet.
pub(super) async fn radar(State(hub): State<Arc<Hub>>) -> Response {
    blocking(move || {
        let engine = hub.engine();
        let records = engine.store().tasks(&[], LOOKBACK)?;
        let mut tasks = Vec::new();
        for r in records.iter().filter(|r| r.changes_state.is_none()) {
            if !r.workshop.as_ref().is_some_and(|p| p.isolation == Isolation::Worktree) {
                continue;
            }
            let meets = engine.radar().conflicts_with(&r.id).unwrap_or_default();
            tasks.push(json!({
                "task_id": r.id, "agent": r.agent, "status": r.status.as_str(), "objective": r.objective,
                "meets": meets.iter().map(|(t, m)| json!({"task_id": t, "paths": m.paths, "hunk_paths": m.hunk_paths})).collect::<Vec<_>>(),
            }));
        }
        Ok(json!({ "tasks": tasks }))
    })
    .await
}

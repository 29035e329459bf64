//! The dashboard's JSON: task views (never a task's secret), the raw log
//! from an offset, the diff, agents, roles and health; and the actions
//! (answer, cancel, apply, discard), each one engine call whose refusal
//! comes back with the engine's own message and the matching HTTP status.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Hub;
use super::auth::query_param;
use crate::engine::TaskView;
use crate::error::Error;
use crate::store::TaskStatus;

/// The most tasks one listing shows.
pub(super) const MAX_TASKS: u32 = 5000;
/// The default length of the listing.
pub(super) const DEFAULT_TASKS: u32 = 1000;
/// The most bytes of raw log one request returns.
const RAW_PAGE: u64 = 64 * 1024;

/// A JSON answer.
pub(super) fn json_response(status: StatusCode, v: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], v.to_string())
        .into_response()
}

/// An engine error as the page shows it: its message, and the status that says what kind it is.
pub(super) fn engine_error(e: &Error) -> Response {
    let status = match e {
        Error::Invalid(_) => StatusCode::BAD_REQUEST,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Precondition(_) | Error::Conflict(_) => StatusCode::CONFLICT,
        Error::Refused(_) => StatusCode::FORBIDDEN,
        Error::Exhausted(_) => StatusCode::TOO_MANY_REQUESTS,
        Error::Unimplemented(_) => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    json_response(status, &json!({ "error": e.to_string() }))
}

/// A task as the page shows it.
pub(super) fn view_json(v: &TaskView) -> Value {
    let r = &v.record;
    let report = v.report.as_ref().map(|rep| {
        let body = serde_json::from_str::<Value>(&rep.body).unwrap_or_else(|_| Value::String(rep.body.clone()));
        json!({ "status": rep.status, "source": rep.source, "body": body })
    });
    let questions: Vec<Value> = v
        .pending_questions
        .iter()
        .map(|q| {
            json!({
                "id": q.question_id,
                "question": q.question,
                "options": q.options,
                "asked_ms": q.asked_ms,
                "permission": q.question_id.starts_with("p_"),
            })
        })
        .collect();
    json!({
        "id": r.id,
        "status": r.status.as_str(),
        "verdict": v.verdict.label(),
        "verdict_kind": v.verdict.word(),
        "attempts": attempts_json(v),
        "agent": r.agent,
        "role": r.role,
        "mode": r.mode.as_str(),
        "isolation": r.isolation.as_str(),
        "model": r.model,
        "objective": r.objective,
        "workspace": r.workspace,
        "created_ms": r.created_ms,
        "started_ms": r.started_ms,
        "finished_ms": r.finished_ms,
        "exit_code": r.exit_code,
        "error": r.error,
        "blocker": r.blocker.map(|b| b.as_str()),
        "event_count": r.event_count,
        "queue_position": v.queue_position,
        "phase": v.phase.map(|p| p.as_str()),
        "activity": v.activity.as_ref().map(|a| json!({
            "kind": a.kind, "tool": a.tool_name, "state": a.state, "at_ms": a.at_ms,
        })),
        "output_tail": v.output.as_ref().map(|(t, _)| t.as_str()),
        "output_at_ms": v.output.as_ref().map(|(_, at)| *at),
        "questions": questions,
        "report": report,
        "changes": r.changes_state.map(|c| c.as_str()),
        "worktree": r.workshop.as_ref().map(|w| w.isolation == crate::oacp::Isolation::Worktree).unwrap_or(false),
        "continues": v.lifecycle.continues,
        "continued_by": v.lifecycle.continued_by,
        "now_ms": crate::clock::now_ms(),
        // Issue 32: the review loop's findings, for the diff view to show at their lines.
        "review_findings": review_findings_json(v),
    })
}

/// A task as the page shows it, with the fan-out group it belongs to (its id
/// and members, in order), so that a member's page links its siblings.
pub(super) fn task_json(hub: &Hub, v: &TaskView) -> Value {
    let mut out = view_json(v);
    let store = hub.engine().store();
    if let Some(g) = store.group_of(&v.record.id).ok().flatten().and_then(|g| store.group(&g).ok().flatten()) {
        out["group"] = json!({ "id": g.id, "task_ids": g.task_ids });
    }
    out
}

/// The review loop's findings of a task (issue 32): every round's, empty
/// for a task of no loop.
fn review_findings_json(v: &TaskView) -> Value {
    let Some(r) = &v.review else { return json!([]) };
    r.findings
        .iter()
        .map(|f| {
            json!({
                "round": f.round, "reviewer_task_id": f.reviewer_task_id, "file": f.file, "line": f.line,
                "hunk": f.hunk, "severity": f.severity, "title": f.title, "detail": f.detail, "state": f.state,
            })
        })
        .collect()
}

/// The agents a task tried (issue 30, item 2): each earlier one with why
/// it was left, then the one that produced the result (or runs now).
fn attempts_json(v: &TaskView) -> Value {
    let attempts = &v.lifecycle.attempts;
    if attempts.is_empty() {
        return json!([]);
    }
    let mut out: Vec<Value> = attempts
        .iter()
        .map(|a| {
            json!({
                "task_id": a.task_id, "agent": a.agent,
                "stopped_by": a.stopped_by.map(|k| k.as_str()), "message": a.message,
            })
        })
        .collect();
    let current = v.lifecycle.current_task_id.as_deref().unwrap_or(&v.record.id);
    out.push(json!({ "task_id": current, "agent": v.record.agent, "produced_result": v.record.status.is_terminal() }));
    Value::Array(out)
}

/// A list row as the page shows it: the fields of [`view_json`] the list
/// uses, from one store query (no report body, no launch).
pub(super) fn entry_json(e: &crate::engine::ListEntry) -> Value {
    let r = &e.row;
    let verdict = crate::verdict::of(&crate::verdict::Inputs {
        status: Some(r.status),
        report_status: r.report_status.as_deref(),
        report_questions: r.report_questions,
        blocker: r.blocker.as_deref().and_then(crate::oacp::BlockerKind::parse),
        verification: r.verification.as_deref(),
        open_questions: r.questions.len(),
        parked_until: None,
    });
    let questions: Vec<Value> = r
        .questions
        .iter()
        .map(|(id, q, options)| json!({ "id": id, "question": q, "options": options, "permission": id.starts_with("p_") }))
        .collect();
    json!({
        "id": r.id,
        "status": r.status.as_str(),
        "verdict": verdict.label(),
        "verdict_kind": verdict.word(),
        "agent": r.agent,
        "role": r.role,
        "mode": r.mode,
        "isolation": r.isolation,
        "model": r.model,
        "objective": r.objective,
        "workspace": r.workspace,
        "created_ms": r.created_ms,
        "started_ms": r.started_ms,
        "finished_ms": r.finished_ms,
        "exit_code": r.exit_code,
        "error": r.error,
        "blocker": r.blocker,
        "event_count": r.event_count,
        "queue_position": r.queue_position,
        "phase": e.phase.map(|p| p.as_str()),
        "activity": e.activity.as_ref().map(|a| json!({
            "kind": a.kind, "tool": a.tool_name, "state": a.state, "at_ms": a.at_ms,
        })),
        "output_tail": e.output.as_ref().map(|(t, _)| t.as_str()),
        "output_at_ms": e.output.as_ref().map(|(_, at)| *at),
        "questions": questions,
        "report_status": r.report_status,
        "changes": r.changes_state,
        "now_ms": crate::clock::now_ms(),
    })
}

/// The listing: tasks needing an answer first, then newest first; one
/// store query for all of it.
pub(super) fn listing(hub: &Hub, limit: u32) -> Result<Value, Error> {
    let limit = limit.clamp(1, MAX_TASKS);
    let entries = hub.engine().views().list_entries(limit)?;
    let total = hub.engine().store().count_status(TaskStatus::Pending)?
        + hub.engine().store().count_status(TaskStatus::Running)?;
    // What groups the board's cards: fan-out members, attempts, continuations.
    let links: Vec<Value> =
        hub.engine().store().board_links(limit)?.iter().map(|l| json!([l.task_id, l.kind.as_str(), l.other])).collect();
    Ok(json!({
        "tasks": entries.iter().map(entry_json).collect::<Vec<_>>(),
        "active": total,
        "links": links,
        "workspace": hub.workspace(),
    }))
}

/// `GET /api/tasks?limit=N`.
pub(super) async fn tasks(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let limit =
        query_param(req.uri().query().unwrap_or(""), "limit").and_then(|l| l.parse().ok()).unwrap_or(DEFAULT_TASKS);
    match tokio::task::spawn_blocking(move || listing(&hub, limit)).await {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => engine_error(&e),
        Err(e) => engine_error(&Error::Internal(e.to_string())),
    }
}

/// `GET /api/task/{id}`.
pub(super) async fn task(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>) -> Response {
    match hub.engine().views().status(&id) {
        Ok(v) => json_response(StatusCode::OK, &task_json(&hub, &v)),
        Err(e) => engine_error(&e),
    }
}

/// `GET /api/task/{id}/raw?offset=N`: up to 64 KiB of raw.log from `offset`
/// (from the last 64 KiB when absent), and where to continue.
pub(super) async fn raw(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>, req: Request) -> Response {
    let offset = query_param(req.uri().query().unwrap_or(""), "offset").and_then(|o| o.parse::<u64>().ok());
    let record = match hub.engine().views().status(&id) {
        Ok(v) => v.record,
        Err(e) => return engine_error(&e),
    };
    let path = crate::task_dir::TaskDir::new(&record.task_dir).raw_log();
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<(u64, u64, String)> {
        // raw.log of a task delegated before the move is in the agent's
        // directory: a regular file only, never through a link.
        let mut f = match crate::safe_fs::open_regular(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0, String::new())),
            Err(e) => return Err(e),
        };
        let size = f.metadata()?.len();
        let from = offset.unwrap_or(size.saturating_sub(RAW_PAGE)).min(size);
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.take(RAW_PAGE).read_to_end(&mut buf)?;
        Ok((from, size, String::from_utf8_lossy(&buf).into_owned()))
    })
    .await;
    match read {
        Ok(Ok((from, size, text))) => {
            let next = from + RAW_PAGE.min(size - from);
            json_response(StatusCode::OK, &json!({ "from": from, "next": next, "size": size, "text": text }))
        }
        Ok(Err(e)) => engine_error(&Error::Io(e)),
        Err(e) => engine_error(&Error::Internal(e.to_string())),
    }
}

/// `GET /api/task/{id}/diff`: per-file changes and the whole patch.
pub(super) async fn diff(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>) -> Response {
    let engine = hub.engine().clone();
    match tokio::task::spawn_blocking(move || engine.changes().diff(&id)).await {
        Ok(Ok(Some(d))) => json_response(
            StatusCode::OK,
            &json!({ "available": true, "files": d.files, "patch": d.patch, "is_empty": d.is_empty }),
        ),
        Ok(Ok(None)) => json_response(
            StatusCode::OK,
            &json!({ "available": false, "why": "the task did not run in a worktree: its changes, if any, are already in the working tree (see the report)" }),
        ),
        Ok(Err(e)) => engine_error(&e),
        Err(e) => engine_error(&Error::Internal(e.to_string())),
    }
}

/// `POST /api/task/{id}/answer` with `{"question_id": …, "answer": …}`.
pub(super) async fn answer(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return engine_error(&Error::Invalid(format!(
                "the body is not JSON ({e}): send {{\"question_id\": \"q_…\", \"answer\": \"…\"}}"
            )));
        }
    };
    let Some(qid) = v.get("question_id").and_then(Value::as_str) else {
        return engine_error(&Error::Invalid("`question_id` is missing: name the question being answered".to_owned()));
    };
    let Some(text) = v.get("answer").and_then(Value::as_str).filter(|a| !a.trim().is_empty()) else {
        return engine_error(&Error::Invalid("`answer` is empty: write an answer (or allow / deny)".to_owned()));
    };
    match hub.engine().channel().answer(&id, qid, text) {
        Ok(()) => json_response(StatusCode::OK, &json!({ "answered": qid })),
        Err(e) => engine_error(&e),
    }
}

/// `POST /api/task/{id}/cancel`.
pub(super) async fn cancel(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>) -> Response {
    match hub.engine().cancel(&id).await {
        Ok((cancelled, status)) => {
            json_response(StatusCode::OK, &json!({ "cancelled": cancelled, "status": status.as_str() }))
        }
        Err(e) => engine_error(&e),
    }
}

/// `POST /api/task/{id}/apply`: 409 with the conflicts when the main tree moved.
pub(super) async fn apply(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>) -> Response {
    let engine = hub.engine().clone();
    match tokio::task::spawn_blocking(move || engine.changes().apply(&id)).await {
        Ok(Ok(r)) => {
            let status = if r.applied || r.already_applied { StatusCode::OK } else { StatusCode::CONFLICT };
            let body = json!({
                "applied": r.applied,
                "already_applied": r.already_applied,
                "files": r.files,
                "conflicts": r.conflicts,
                "message": r.message,
            });
            let mut body = body;
            if status == StatusCode::CONFLICT {
                body["error"] = Value::String(r.message.clone());
            }
            json_response(status, &body)
        }
        Ok(Err(e)) => engine_error(&e),
        Err(e) => engine_error(&Error::Internal(e.to_string())),
    }
}

/// `POST /api/task/{id}/discard`.
pub(super) async fn discard(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>) -> Response {
    match hub.engine().changes().discard(&id) {
        Ok(()) => json_response(StatusCode::OK, &json!({ "discarded": true })),
        Err(e) => engine_error(&e),
    }
}

fn workspace_of(hub: &Hub, req: &Request) -> String {
    query_param(req.uri().query().unwrap_or(""), "workspace")
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| hub.workspace())
}

/// `GET /api/agents?workspace=…`: agents and roles of a project.
pub(super) async fn agents(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let workspace = workspace_of(&hub, &req);
    let engine = hub.engine().clone();
    let w = workspace.clone();
    let got = tokio::task::spawn_blocking(move || {
        Ok::<_, Error>((engine.projects().list_agents(&w)?, engine.projects().list_roles(&w)?))
    })
    .await;
    match got {
        Ok(Ok((agents, roles))) => {
            let agents: Vec<Value> = agents
                .into_iter()
                .map(|a| {
                    json!({
                        "id": a.id, "name": a.display_name, "bin": a.bin, "installed": a.installed,
                        "path": a.path, "version": a.version, "allowed": a.allowed, "refusal": a.refusal,
                        "default_model": a.default_model, "kind": a.kind,
                    })
                })
                .collect();
            json_response(StatusCode::OK, &json!({ "workspace": workspace, "agents": agents, "roles": roles }))
        }
        Ok(Err(e)) => engine_error(&e),
        Err(e) => engine_error(&Error::Internal(e.to_string())),
    }
}

/// `GET /api/health?workspace=…`: what `caesar doctor` says of the daemon.
pub(super) async fn health(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let workspace = workspace_of(&hub, &req);
    let engine = hub.engine().clone();
    let w = workspace.clone();
    let Ok((store, problems)) =
        tokio::task::spawn_blocking(move || (engine.store().integrity_check(), engine.projects().problems(&w))).await
    else {
        return engine_error(&Error::Internal("the health check panicked".to_owned()));
    };
    let paths = hub.engine().paths();
    let http = crate::config::Config::load_global(&paths.config_dir).ok().and_then(|c| c.http).map(|h| h.listen);
    json_response(
        StatusCode::OK,
        &json!({
            "workspace": workspace,
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "socket": paths.socket,
            "state_dir": paths.state_dir,
            "store_ok": store.is_ok(),
            "store_error": store.err().map(|e| e.to_string()),
            "problems": problems,
            "http_listen": http,
            "dashboard": hub.addr().map(|a| format!("http://{a}/")),
            "environment": crate::origin::environment_origin(),
            "active_tasks": hub.engine().views().active_count().ok(),
        }),
    )
}

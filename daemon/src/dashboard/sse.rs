//! The live streams, as server-sent events: the task list follows the
//! engine's change stream (a `snapshot` first, then one `task` per changed
//! task, coalesced over a few milliseconds), and a task page follows that
//! task's own event stream (`ev` per event, `end` when the task is over).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path as UrlPath, Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::Hub;
use super::api::{DEFAULT_TASKS, engine_error, listing, task_json};
use super::auth::query_param;

/// Changes arriving this close together are sent as one batch.
const COALESCE: Duration = Duration::from_millis(25);

fn sse_of(rx: mpsc::Receiver<Result<Event, Infallible>>) -> impl IntoResponse {
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// `GET /api/tasks/stream?limit=N[&only=ID]`: the listing, live.
pub(super) async fn tasks(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or("").to_owned();
    let limit = query_param(&query, "limit").and_then(|l| l.parse().ok()).unwrap_or(DEFAULT_TASKS);
    let only = query_param(&query, "only").filter(|o| !o.is_empty());
    // Subscribe before the snapshot, so no change falls between the two.
    let mut changes = hub.engine().runs().subscribe_changes();
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(async move {
        let snapshot = |hub: Arc<Hub>, only: Option<String>| async move {
            tokio::task::spawn_blocking(move || match &only {
                Some(id) => hub.engine().views().status(id).map(|v| json!({ "tasks": [task_json(&hub, &v)] })),
                None => listing(&hub, limit),
            })
            .await
            .ok()
            .and_then(Result::ok)
        };
        let Some(first) = snapshot(hub.clone(), only.clone()).await else { return };
        if tx.send(Ok(Event::default().event("snapshot").data(first.to_string()))).await.is_err() {
            return;
        }
        loop {
            let mut ids = BTreeSet::new();
            let mut lagged = false;
            match changes.recv().await {
                Ok(id) => {
                    ids.insert(id);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => lagged = true,
                Err(broadcast::error::RecvError::Closed) => return,
            }
            // Gather what else changed meanwhile.
            let deadline = tokio::time::Instant::now() + COALESCE;
            while let Ok(r) = tokio::time::timeout_at(deadline, changes.recv()).await {
                match r {
                    Ok(id) => {
                        ids.insert(id);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => lagged = true,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
            if lagged {
                let Some(again) = snapshot(hub.clone(), only.clone()).await else { return };
                if tx.send(Ok(Event::default().event("snapshot").data(again.to_string()))).await.is_err() {
                    return;
                }
                continue;
            }
            if let Some(o) = &only {
                ids.retain(|id| id == o);
            }
            for id in ids {
                let Ok(v) = hub.engine().views().status(&id) else { continue };
                let data = task_json(&hub, &v).to_string();
                if tx.send(Ok(Event::default().event("task").data(data))).await.is_err() {
                    return;
                }
            }
        }
    });
    sse_of(rx).into_response()
}

/// `GET /api/task/{id}/events?from=N`: the task's events from `from`, live.
pub(super) async fn events(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>, req: Request) -> Response {
    let from = query_param(req.uri().query().unwrap_or(""), "from").and_then(|f| f.parse().ok()).unwrap_or(0);
    let mut events = match hub.engine().views().watch_events(&id, from, true) {
        Ok(rx) => rx,
        Err(e) => return engine_error(&e),
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::spawn(async move {
        while let Some((seq, line)) = events.recv().await {
            let ev = Event::default().event("ev").id(seq.to_string()).data(line.replace(['\n', '\r'], " "));
            if tx.send(Ok(ev)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Ok(Event::default().event("end").data("{}"))).await;
    });
    sse_of(rx).into_response()
}

//! The simulator's HTTP API: the Kubernetes paths the runner uses, with the
//! real server's order of checks (RBAC, then the namespace, then the body)
//! and its Status errors, plus `/sim/…` fault knobs for the tests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{Sim, kubelet, now_ts, parse_ts, selector_matches, status, validate};

type Q = Query<HashMap<String, String>>;

pub(super) fn reply(code: u16, body: Value) -> Response {
    let mut r =
        (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body.to_string()).into_response();
    r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    r
}

pub(super) fn fail(code: u16, reason: &str, msg: &str) -> Response {
    reply(code, status(code, reason, msg))
}

/// RBAC, then the namespace: the order a real API server checks them in.
#[allow(clippy::result_large_err)] // an axum handler's early answer, as is
pub(super) fn gate(sim: &Sim, verb: &str, resource: &str, group: &str, ns: &str) -> Result<(), Response> {
    if !sim.allowed(verb, resource) {
        let res = if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") };
        return Err(fail(
            403,
            "Forbidden",
            &format!(
                "{res} is forbidden: User \"caesar\" cannot {verb} resource \"{resource}\" in API group \"{group}\" in the namespace \"{ns}\""
            ),
        ));
    }
    if !sim.cfg.namespaces.contains(ns) {
        return Err(fail(404, "NotFound", &format!("namespaces \"{ns}\" not found")));
    }
    Ok(())
}

/// The API's router.
pub fn router(sim: Arc<Sim>) -> Router {
    Router::new()
        .route(
            "/version",
            get(|| async { reply(200, json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-caesar-sim"})) }),
        )
        .route("/api/v1/namespaces/{ns}", get(get_namespace))
        .route("/apis/batch/v1/namespaces/{ns}/jobs", get(list_jobs).post(create_job))
        .route("/apis/batch/v1/namespaces/{ns}/jobs/{name}", get(get_job).delete(delete_job).put(replace_job))
        .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
        .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod).delete(delete_pod))
        .route("/api/v1/namespaces/{ns}/pods/{name}/log", get(pod_log))
        .route("/api/v1/namespaces/{ns}/pods/{name}/exec", get(super::exec::exec).post(super::exec::exec))
        .route("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", post(super::exec::access_review))
        .route("/sim/stats", get(|State(sim): State<Arc<Sim>>| async move { reply(200, sim.stats()) }))
        .route(
            "/sim/accepted",
            get(|State(sim): State<Arc<Sim>>| async move {
                reply(200, Value::Array(sim.accepted.lock().unwrap_or_else(|p| p.into_inner()).clone()))
            }),
        )
        .route(
            "/sim/drop-logs",
            post(|State(sim): State<Arc<Sim>>| async move {
                sim.log_generation.fetch_add(1, Ordering::AcqRel);
                for l in sim.logs.lock().unwrap_or_else(|p| p.into_inner()).values() {
                    l.notify.notify_waiters();
                }
                reply(200, json!({"dropped": true}))
            }),
        )
        .route(
            "/sim/drop-execs",
            post(|State(sim): State<Arc<Sim>>| async move {
                sim.exec_cuts.send_modify(|g| *g += 1);
                reply(200, json!({"dropped": true}))
            }),
        )
        .route(
            "/sim/drop-exec-after-stdin",
            post(|State(sim): State<Arc<Sim>>| async move {
                sim.cut_after_stdin.store(true, Ordering::Release);
                reply(200, json!({"armed": true}))
            }),
        )
        .route(
            "/sim/evict/{ns}/{pod}",
            post(|State(sim): State<Arc<Sim>>, Path((ns, pod)): Path<(String, String)>| async move {
                tokio::spawn(async move { kubelet::evict(&sim, &ns, &pod).await });
                reply(200, json!({}))
            }),
        )
        .route(
            "/sim/lose-node/{ns}/{pod}",
            post(|State(sim): State<Arc<Sim>>, Path((ns, pod)): Path<(String, String)>| async move {
                kubelet::lose_node(&sim, &ns, &pod);
                reply(200, json!({}))
            }),
        )
        .fallback(|| async { fail(404, "NotFound", "the server could not find the requested resource") })
        .with_state(sim)
}

async fn get_namespace(State(sim): State<Arc<Sim>>, Path(ns): Path<String>) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if !sim.allowed("get", "namespaces") {
        return fail(
            403,
            "Forbidden",
            &format!(
                "namespaces \"{ns}\" is forbidden: User \"caesar\" cannot get resource \"namespaces\" in API group \"\" at the cluster scope"
            ),
        );
    }
    if !sim.cfg.namespaces.contains(&ns) {
        return fail(404, "NotFound", &format!("namespaces \"{ns}\" not found"));
    }
    reply(
        200,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "status": {"phase": "Active"}}),
    )
}

fn uid() -> String {
    let mut b = [0u8; 16];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

async fn create_job(State(sim): State<Arc<Sim>>, Path(ns): Path<String>, Query(q): Q, body: Bytes) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(&sim, "create", "jobs", "batch", &ns) {
        return r;
    }
    let Ok(mut job) = serde_json::from_slice::<Value>(&body) else {
        return fail(
            400,
            "BadRequest",
            "the body of the request was in an unknown format - accepted media types include: application/json",
        );
    };
    if let Err((code, reason, msg)) =
        validate::check(&job, &validate::JOB, "$").and_then(|_| validate::job_semantics(&job))
    {
        return fail(code, reason, &msg);
    }
    if let Some(n) = job["metadata"]["namespace"].as_str()
        && n != ns
    {
        return fail(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        );
    }
    let name = job["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let dry = q.get("dryRun").is_some_and(|d| d == "All");
    let (ts, _) = now_ts();
    job["metadata"]["namespace"] = json!(ns);
    job["metadata"]["uid"] = json!(uid());
    job["metadata"]["creationTimestamp"] = json!(ts[..19].to_owned() + "Z");
    job["metadata"]["generation"] = json!(1);
    job["spec"]["completions"] = json!(1);
    job["spec"]["parallelism"] = json!(1);
    job["status"] = json!({});
    let created = {
        let mut st = sim.lock();
        if st.jobs.contains_key(&(ns.clone(), name.clone())) {
            return reply(
                409,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("jobs.batch \"{name}\" already exists"), "reason": "AlreadyExists",
                "details": {"name": name, "group": "batch", "kind": "jobs"}, "code": 409}),
            );
        }
        if dry {
            return reply(201, job);
        }
        sim.accepted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        sim.put(&mut st, "jobs", job, "ADDED")
    };
    kubelet::job_created(&sim, &created);
    reply(201, created)
}

async fn replace_job(State(sim): State<Arc<Sim>>, Path((ns, name)): Path<(String, String)>, body: Bytes) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(&sim, "update", "jobs", "batch", &ns) {
        return r;
    }
    let Ok(job) = serde_json::from_slice::<Value>(&body) else { return fail(400, "BadRequest", "bad body") };
    if let Err((code, reason, msg)) = validate::check(&job, &validate::JOB, "$") {
        return fail(code, reason, &msg);
    }
    let mut st = sim.lock();
    let Some(cur) = st.jobs.get(&(ns.clone(), name.clone())).cloned() else {
        return fail(404, "NotFound", &format!("jobs.batch \"{name}\" not found"));
    };
    if job["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"] {
        return fail(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on jobs.batch \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    if job["spec"]["template"] != cur["spec"]["template"] {
        return fail(
            422,
            "Invalid",
            &format!("Job.batch \"{name}\" is invalid: spec.template: Invalid value: field is immutable"),
        );
    }
    let mut next = cur.clone();
    next["metadata"]["labels"] = job["metadata"]["labels"].clone();
    next["metadata"]["annotations"] = job["metadata"]["annotations"].clone();
    reply(200, sim.put(&mut st, "jobs", next, "MODIFIED"))
}

async fn get_job(State(sim): State<Arc<Sim>>, Path((ns, name)): Path<(String, String)>) -> Response {
    get_one(&sim, "jobs", "batch", &ns, &name)
}

async fn get_pod(State(sim): State<Arc<Sim>>, Path((ns, name)): Path<(String, String)>) -> Response {
    get_one(&sim, "pods", "", &ns, &name)
}

fn get_one(sim: &Sim, resource: &'static str, group: &str, ns: &str, name: &str) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(sim, "get", resource, group, ns) {
        return r;
    }
    let st = sim.lock();
    let map = if resource == "jobs" { &st.jobs } else { &st.pods };
    match map.get(&(ns.to_owned(), name.to_owned())) {
        Some(o) => reply(200, o.clone()),
        None => {
            let res = if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") };
            fail(404, "NotFound", &format!("{res} \"{name}\" not found"))
        }
    }
}

async fn list_jobs(State(sim): State<Arc<Sim>>, Path(ns): Path<String>, Query(q): Q) -> Response {
    list_or_watch(sim, "jobs", "batch", ns, q).await
}

async fn list_pods(State(sim): State<Arc<Sim>>, Path(ns): Path<String>, Query(q): Q) -> Response {
    list_or_watch(sim, "pods", "", ns, q).await
}

async fn list_or_watch(
    sim: Arc<Sim>,
    resource: &'static str,
    group: &str,
    ns: String,
    q: HashMap<String, String>,
) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    if let Err(r) = gate(&sim, if watching { "watch" } else { "list" }, resource, group, &ns) {
        return r;
    }
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    let matches = {
        let (ns, selector) = (ns.clone(), selector.clone());
        move |o: &Value| o["metadata"]["namespace"] == ns.as_str() && selector_matches(o, &selector)
    };
    if !watching {
        let st = sim.lock();
        let map = if resource == "jobs" { &st.jobs } else { &st.pods };
        let items: Vec<Value> = map.values().filter(|o| matches(o)).cloned().collect();
        let (kind, api) = if resource == "jobs" { ("JobList", "batch/v1") } else { ("PodList", "v1") };
        return reply(
            200,
            json!({"kind": kind, "apiVersion": api, "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
        );
    }
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let timeout = q.get("timeoutSeconds").and_then(|v| v.parse::<u64>().ok()).unwrap_or(1800);
    let mut rx = sim.changes.subscribe();
    let (tx, out) = tokio::sync::mpsc::channel::<Bytes>(1024);
    let line = |kind: &str, o: &Value| Bytes::from(format!("{}\n", json!({"type": kind, "object": o})));
    let mut last = from;
    {
        let st = sim.lock();
        let initial: Vec<Bytes> = if from == 0 {
            let map = if resource == "jobs" { &st.jobs } else { &st.pods };
            map.values().filter(|o| matches(o)).map(|o| line("ADDED", o)).collect()
        } else {
            st.history
                .iter()
                .filter(|c| c.resource == resource && c.rv > from && matches(&c.object))
                .map(|c| line(c.kind, &c.object))
                .collect()
        };
        last = last.max(st.rv);
        for b in initial {
            let _ = tx.try_send(b);
        }
    }
    let sim2 = sim.clone();
    tokio::spawn(async move {
        sim2.open_watches.fetch_add(1, Ordering::AcqRel);
        let until = tokio::time::Instant::now() + Duration::from_secs(timeout);
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tokio::time::sleep_until(until) => break,
                _ = tx.closed() => break,
            };
            match ev {
                Ok(c) if c.resource == resource && c.rv > last && matches(&c.object) => {
                    last = c.rv;
                    if tx.send(line(c.kind, &c.object)).await.is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    let gone = status(410, "Expired", "too old resource version");
                    let _ = tx.send(Bytes::from(format!("{}\n", json!({"type": "ERROR", "object": gone})))).await;
                    break;
                }
                Err(_) => break,
            }
        }
        sim2.open_watches.fetch_sub(1, Ordering::AcqRel);
    });
    stream_response(out)
}

fn stream_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx)) });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    r
}

fn delete_options(q: &HashMap<String, String>, body: &Bytes) -> (String, Option<u64>) {
    let b: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let policy = b["propagationPolicy"].as_str().map(str::to_owned).or_else(|| q.get("propagationPolicy").cloned());
    let grace = b["gracePeriodSeconds"].as_u64().or_else(|| q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()));
    // batch/v1 Jobs deleted through the API orphan their pods by default.
    (policy.unwrap_or_else(|| "Orphan".to_owned()), grace)
}

async fn delete_job(
    State(sim): State<Arc<Sim>>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(&sim, "delete", "jobs", "batch", &ns) {
        return r;
    }
    let Some(job) = sim.lock().jobs.get(&(ns.clone(), name.clone())).cloned() else {
        return fail(404, "NotFound", &format!("jobs.batch \"{name}\" not found"));
    };
    let (policy, grace) = delete_options(&q, &body);
    if !["Foreground", "Background", "Orphan"].contains(&policy.as_str()) {
        return fail(400, "BadRequest", &format!("propagationPolicy: Unsupported value: \"{policy}\""));
    }
    let (s, n, p) = (sim.clone(), ns.clone(), policy.clone());
    let name2 = name.clone();
    tokio::spawn(async move { kubelet::delete_job(&s, &n, &name2, &p, grace).await });
    if policy == "Foreground" {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let cur = sim.lock().jobs.get(&(ns, name)).cloned().unwrap_or(job);
        return reply(200, cur);
    }
    reply(
        200,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "group": "batch", "kind": "jobs", "uid": job["metadata"]["uid"]}}),
    )
}

async fn delete_pod(
    State(sim): State<Arc<Sim>>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(&sim, "delete", "pods", "", &ns) {
        return r;
    }
    let Some(pod) = sim.lock().pods.get(&(ns.clone(), name.clone())).cloned() else {
        return fail(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let (_, grace) = delete_options(&q, &body);
    tokio::spawn(async move { kubelet::delete_pod(&sim, &ns, &name, grace).await });
    reply(200, pod)
}

async fn pod_log(State(sim): State<Arc<Sim>>, Path((ns, name)): Path<(String, String)>, Query(q): Q) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(&sim, "get", "pods/log", "", &ns) {
        return r;
    }
    let Some(pod) = sim.lock().pods.get(&(ns.clone(), name.clone())).cloned() else {
        return fail(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let containers: Vec<&str> =
        pod["spec"]["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    let container = q.get("container").cloned().unwrap_or_else(|| containers.first().copied().unwrap_or("").to_owned());
    if !containers.contains(&container.as_str()) {
        return fail(400, "BadRequest", &format!("container {container} is not valid for pod {name}"));
    }
    let statuses = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let state =
        statuses.iter().find(|c| c["name"] == container.as_str()).map(|c| c["state"].clone()).unwrap_or_default();
    let state = &state;
    if state.get("running").is_none() && state.get("terminated").is_none() {
        let why = state["waiting"]["reason"].as_str().unwrap_or("ContainerCreating");
        return fail(
            400,
            "BadRequest",
            &format!("container \"{container}\" in pod \"{name}\" is waiting to start: {why}"),
        );
    }
    if q.contains_key("sinceTime") && q.contains_key("sinceSeconds") {
        return fail(422, "Invalid", "at most one of `sinceTime` or `sinceSeconds` may be specified");
    }
    let since = match q.get("sinceTime") {
        Some(t) => match parse_ts(t) {
            Some(n) => n,
            None => return fail(400, "BadRequest", &format!("sinceTime: invalid value {t:?}")),
        },
        None => q
            .get("sinceSeconds")
            .and_then(|s| s.parse::<i128>().ok())
            .map(|s| now_ts().1 - s * 1_000_000_000)
            .unwrap_or(0),
    };
    let follow = q.get("follow").is_some_and(|f| f == "true");
    let timestamps = q.get("timestamps").is_some_and(|f| f == "true");
    let log = sim.log(&ns, &name, &container);
    let generation = sim.log_generation.load(Ordering::Acquire);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let sim2 = sim.clone();
    tokio::spawn(async move {
        let open = sim2.open_log_streams.fetch_add(1, Ordering::AcqRel) + 1;
        sim2.peak_log_streams.fetch_max(open, Ordering::AcqRel);
        if follow {
            let now = sim2.open_follows.fetch_add(1, Ordering::AcqRel) + 1;
            sim2.peak_follows.fetch_max(now, Ordering::AcqRel);
        }
        let mut next = 0usize;
        loop {
            let notified = log.notify.notified();
            let batch: Vec<Bytes> = {
                let r = log.records.lock().unwrap_or_else(|p| p.into_inner());
                let out = r[next..]
                    .iter()
                    .filter(|rec| rec.nanos >= since)
                    .map(|rec| {
                        let mut b = Vec::with_capacity(rec.data.len() + 32);
                        if timestamps {
                            b.extend_from_slice(rec.ts.as_bytes());
                            b.push(b' ');
                        }
                        b.extend_from_slice(&rec.data);
                        Bytes::from(b)
                    })
                    .collect();
                next = r.len();
                out
            };
            let mut closed = false;
            for b in batch {
                if tx.send(b).await.is_err() {
                    closed = true;
                    break;
                }
            }
            let dropped = sim2.log_generation.load(Ordering::Acquire) != generation;
            let done =
                log.done.load(Ordering::Acquire) && log.records.lock().unwrap_or_else(|p| p.into_inner()).len() == next;
            if closed || dropped || !follow || done {
                break;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = tx.closed() => break,
            }
        }
        sim2.open_log_streams.fetch_sub(1, Ordering::AcqRel);
        if follow {
            sim2.open_follows.fetch_sub(1, Ordering::AcqRel);
        }
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx)) });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert("content-type", "text/plain".parse().expect("header"));
    r
}

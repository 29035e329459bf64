//! The simulator's `pods/exec` (what `workspace = "api"` sends the
//! workspace through) and `selfsubjectaccessreviews` (how the runner's
//! preflight asks whether it may). Strict as the API server and kubelet
//! are: RBAC (`create` on `pods/exec`), the namespace, the pod, a named
//! container that exists and runs (init containers too), at least one
//! command and one stream, a websocket upgrade offering a subprotocol it
//! speaks (`v5.channel.k8s.io`, then `v4.channel.k8s.io`). Then the command
//! runs as a process in the container's own root (its environment, its
//! working directory, its volumes), and the frames are the protocol's: a
//! leading channel byte, 0 stdin, 1 stdout, 2 stderr, 3 the ending's Status
//! JSON, and in v5 the close channel 255 that ends stdin.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::api::{fail, gate, reply};
use super::{Sim, kubelet};

/// The subprotocols spoken, in the server's order of preference.
const PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io"];

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query string's pairs, repeated keys kept (`command=a&command=b`).
fn pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn truthy(v: Option<&String>) -> bool {
    v.is_some_and(|v| v == "true" || v == "1")
}

/// `GET|POST /api/v1/namespaces/{ns}/pods/{name}/exec`.
pub async fn exec(
    State(sim): State<Arc<Sim>>,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(q): RawQuery,
    mut req: Request,
) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(r) = gate(&sim, "create", "pods/exec", "", &ns) {
        return r;
    }
    let Some(pod) = sim.lock().pods.get(&(ns.clone(), name.clone())).cloned() else {
        return fail(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let all = pairs(q.as_deref().unwrap_or(""));
    let one: HashMap<String, String> = all.iter().cloned().collect();
    let command: Vec<String> = all.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
    let (stdin, stdout, stderr, tty) =
        (truthy(one.get("stdin")), truthy(one.get("stdout")), truthy(one.get("stderr")), truthy(one.get("tty")));
    if command.is_empty() {
        return fail(400, "BadRequest", "you must specify at least 1 command");
    }
    if !stdin && !stdout && !stderr {
        return fail(400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr");
    }
    if tty && stderr {
        return fail(400, "BadRequest", "tty and stderr cannot both be true");
    }
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let (mains, inits) = (names("containers"), names("initContainers"));
    let container = match one.get("container") {
        Some(c) => c.clone(),
        None if mains.len() == 1 && inits.is_empty() => mains[0].clone(),
        None => {
            return fail(
                400,
                "BadRequest",
                &format!(
                    "a container name must be specified for pod {name}, choose one of: [{}] or one of the init containers: [{}]",
                    mains.join(" "),
                    inits.join(" ")
                ),
            );
        }
    };
    let (spec_field, status_field) = if inits.contains(&container) {
        ("initContainers", "initContainerStatuses")
    } else if mains.contains(&container) {
        ("containers", "containerStatuses")
    } else {
        return fail(400, "BadRequest", &format!("container {container} is not valid for pod {name}"));
    };
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if phase == "Succeeded" || phase == "Failed" {
        return fail(
            400,
            "BadRequest",
            &format!("cannot exec into a container in a completed pod; current phase is {phase}"),
        );
    }
    let running = pod["status"][status_field]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container.as_str())
        .is_some_and(|c| c["state"].get("running").is_some());
    if !running {
        return fail(400, "BadRequest", &format!("container {container} is not running"));
    }
    // The websocket upgrade, RFC 6455, and a subprotocol both sides speak.
    let h = req.headers();
    let has = |name: header::HeaderName, want: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(want)))
    };
    let key = h.get(header::SEC_WEBSOCKET_KEY).cloned();
    if !has(header::CONNECTION, "upgrade") || !has(header::UPGRADE, "websocket") || key.is_none() {
        return fail(400, "BadRequest", "Upgrade request required");
    }
    if h.get(header::SEC_WEBSOCKET_VERSION).and_then(|v| v.to_str().ok()) != Some("13") {
        return fail(400, "BadRequest", "Sec-WebSocket-Version must be 13");
    }
    let offered: Vec<String> = h
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(|p| p.trim().to_owned()).collect())
        .unwrap_or_default();
    let Some(protocol) = PROTOCOLS.iter().find(|p| offered.iter().any(|o| o == *p)).copied() else {
        return fail(
            400,
            "BadRequest",
            &format!("none of the offered subprotocols {offered:?} is supported: {}", PROTOCOLS.join(", ")),
        );
    };
    let spec = pod["spec"][spec_field]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container.as_str())
        .cloned()
        .unwrap_or_default();
    let env = match kubelet::container_env(&sim, &spec) {
        Ok(e) => e,
        Err(e) => return fail(500, "InternalError", &e),
    };
    let upgrade = hyper::upgrade::on(&mut req);
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(
        key.unwrap_or_else(|| HeaderValue::from_static("")).as_bytes(),
    );
    let root = kubelet::container_root(&sim, &name, &container);
    let work = root.join(spec["workingDir"].as_str().unwrap_or("").trim_start_matches('/'));
    let run = Run {
        sim: sim.clone(),
        mounts: json!({"volumeMounts": spec["volumeMounts"].clone()}),
        root,
        work,
        env,
        command,
        stdin,
        stdout,
        stderr,
        v5: protocol.starts_with("v5"),
        of: (ns, name, status_field, container),
    };
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            let io = hyper_util::rt::TokioIo::new(upgraded);
            let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(io, Role::Server, None).await;
            run.serve(ws).await;
        }
    });
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let hs = r.headers_mut();
    hs.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    hs.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    hs.insert(header::SEC_WEBSOCKET_ACCEPT, accept.parse().expect("header"));
    hs.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    r
}

/// One exec'd command and its streams.
struct Run {
    sim: Arc<Sim>,
    /// The container's `volumeMounts`, mounted for the exec'd process as for the container's.
    mounts: Value,
    root: std::path::PathBuf,
    work: std::path::PathBuf,
    env: Vec<(String, String)>,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    v5: bool,
    /// Namespace, pod, status field and container: the exec'd process ends with its container.
    of: (String, String, &'static str, String),
}

impl Run {
    /// Whether the exec'd container still runs (its pod exists and says so).
    fn container_runs(&self) -> bool {
        let (ns, pod, field, container) = &self.of;
        let st = self.sim.lock();
        let Some(p) = st.pods.get(&(ns.clone(), pod.clone())) else { return false };
        p["status"][*field]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == container.as_str())
            .is_some_and(|c| c["state"].get("running").is_some())
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(Bytes::from(v))
}

impl Run {
    async fn serve<S>(self, ws: tokio_tungstenite::WebSocketStream<S>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let (mut tx, mut rx) = ws.split();
        let path = &self.sim.cfg.path;
        let program = &self.command[0];
        let resolved = path.split(':').map(|d| std::path::Path::new(d).join(program)).find(|p| p.is_file());
        let mut cmd = tokio::process::Command::new(resolved.unwrap_or_else(|| program.into()));
        cmd.args(&self.command[1..])
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.root.join("home"))
            .env("CAESAR_POD_ROOT", &self.root)
            .envs(self.env.iter().cloned())
            .stdin(if self.stdin { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        kubelet::mount_volumes(&mut cmd, &self.root, &self.mounts);
        // Each stream the client asked for opens with its channel byte alone.
        for (open, ch) in [(self.stdout, 1u8), (self.stderr, 2u8), (true, 3u8)] {
            if open {
                let _ = tx.send(frame(ch, &[])).await;
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let st = json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
                    "message": format!("failed to exec in container: starting container process caused: exec: \"{program}\": {e}")});
                let _ = tx.send(frame(3, st.to_string().as_bytes())).await;
                let _ = tx.send(Message::Close(None)).await;
                return;
            }
        };
        let mut child_in = child.stdin.take();
        let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<(u8, Vec<u8>)>(64);
        for (ch, wanted, pipe) in [
            (
                1u8,
                self.stdout,
                child.stdout.take().map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            ),
            (
                2u8,
                self.stderr,
                child.stderr.take().map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            ),
        ] {
            let Some(mut pipe) = pipe else { continue };
            let out_tx = out_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    match pipe.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        // A stream the client did not ask for is read and dropped.
                        Ok(n) if wanted => {
                            if out_tx.send((ch, buf[..n].to_vec())).await.is_err() {
                                break;
                            }
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
        drop(out_tx);
        let mut client_open = true;
        let mut cuts = self.sim.exec_cuts.subscribe();
        self.sim.open_execs.fetch_add(1, Ordering::Relaxed);
        self.sim.execs_opened.fetch_add(1, Ordering::Relaxed);
        let mut cut = false;
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = cuts.changed(), if !cut => cut = true,
                // As a kubelet does, the container's end ends what was exec'd in it.
                _ = tick.tick() => if !self.container_runs() {
                    let _ = child.start_kill();
                },
                m = rx.next(), if client_open => match m {
                    Some(Ok(Message::Binary(b))) if !b.is_empty() => match b[0] {
                        0 => {
                            if let Some(w) = child_in.as_mut()
                                && (w.write_all(&b[1..]).await.is_err() || w.flush().await.is_err())
                            {
                                child_in = None;
                            }
                            cut = self.sim.cut_after_stdin.swap(false, Ordering::AcqRel);
                        }
                        // v5: the client closed a stream (stdin: its EOF).
                        255 if self.v5 && b.get(1) == Some(&0) => child_in = None,
                        _ => {}
                    },
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        client_open = false;
                        child_in = None;
                    }
                    Some(Ok(_)) => {}
                },
                out = out_rx.recv() => match out {
                    Some((ch, data)) => {
                        if client_open && tx.send(frame(ch, &data)).await.is_err() {
                            client_open = false;
                        }
                    }
                    None => break,
                },
            }
            if cut {
                // The connection drops with no Status and no close frame; the process sees its
                // stdin end, as it does when a real API server restarts.
                client_open = false;
                break;
            }
        }
        self.sim.open_execs.fetch_sub(1, Ordering::Relaxed);
        drop(child_in);
        if cut {
            drop(tx);
            drop(rx);
            let _ = child.wait().await;
            return;
        }
        let status = child.wait().await;
        let code = status.ok().and_then(|s| s.code()).unwrap_or(137);
        let st = if code == 0 {
            json!({"metadata": {}, "status": "Success"})
        } else {
            json!({"metadata": {}, "status": "Failure",
                "message": format!("command terminated with non-zero exit code: error executing command {:?}, exit code {code}", self.command),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
        };
        if client_open {
            let _ = tx.send(frame(3, st.to_string().as_bytes())).await;
            let _ = tx.send(Message::Close(None)).await;
        }
    }
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: may the
/// caller do this? Answered from the simulator's RBAC; nothing is stored.
pub async fn access_review(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    sim.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(mut review) = serde_json::from_slice::<Value>(&body) else {
        return fail(400, "BadRequest", "the body is not JSON");
    };
    if review["kind"] != "SelfSubjectAccessReview" || review["apiVersion"] != "authorization.k8s.io/v1" {
        return fail(400, "BadRequest", "the object is not an authorization.k8s.io/v1 SelfSubjectAccessReview");
    }
    let attrs = &review["spec"]["resourceAttributes"];
    let Some(verb) = attrs["verb"].as_str() else {
        return fail(
            422,
            "Invalid",
            "SelfSubjectAccessReview.authorization.k8s.io is invalid: spec.resourceAttributes.verb: Required value",
        );
    };
    let resource = match (attrs["resource"].as_str().unwrap_or(""), attrs["subresource"].as_str().unwrap_or("")) {
        (r, "") => r.to_owned(),
        (r, s) => format!("{r}/{s}"),
    };
    let allowed = sim.allowed(verb, &resource);
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = json!({"allowed": allowed});
    reply(201, review)
}

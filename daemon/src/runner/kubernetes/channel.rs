//! A remote task's return channel (issue 16): the agent's `caesar-mcp
//! --channel` in the pod reaches the engine over one `pods/exec` stream.
//!
//! Pod side, [`channel_main`] (`caesard __kube channel`, exec'd into the
//! agent container): a gRPC server on the pod's channel socket
//! ([`crate::runner::remote_channel::KUBE_POD_SOCKET`], which the agent's
//! channel is given as `CAESAR_SOCKET`), serving `Ping` and the four channel
//! calls and nothing else. Each call becomes one JSON line on its stdout
//! ([`Request`]); the daemon's [`Response`] lines on its stdin complete
//! them. It ends with its stdin: a dropped stream ends this process, the
//! channel sees its daemon go and reconnects (as it does across a daemon
//! restart), and the daemon's next stream starts another one.
//!
//! Daemon side, [`Relay`]: opens that stream into the task's own pod and
//! hands each call to the engine ([`ChannelCalls`]) as that task's. The
//! stream is the credential, as the process tree is locally: the daemon
//! chose the pod, and nothing in the pod speaks for another task. A call
//! repeated after a drop is safe: a question keeps the id its channel
//! picked, a report is replaced by the same one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use caesar_proto::pb;
use caesar_proto::pb::caesar_server::{Caesar, CaesarServer};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use super::pod::POD_ARG0;
use super::stdin::FORBIDDEN;
use super::watch::Cluster;
use crate::runner::remote_channel::{
    ChannelCall, ChannelCalls, ChannelOutcome, ChannelReply, KUBE_POD_SOCKET, Request, Response,
};

/// `caesard __kube channel`.
pub const CHANNEL_ARG: &str = "channel";

/// The most bytes of one line either way: a report or task.json, well
/// above what the daemon keeps of either (its caps then apply).
const MAX_LINE: usize = 16 << 20;

/// The most calls of one task carried at once (a channel makes one at a
/// time; this bounds what a pod that floods the stream can make the daemon
/// hold, each waiting question being a task of its own).
const MAX_IN_FLIGHT: usize = 64;

/// Reads one line of at most `cap` bytes (without its newline); `None` at
/// the end of the input. A longer line is an error: the other side is not
/// speaking this protocol.
async fn read_line_capped<R: AsyncBufRead + Unpin>(r: &mut R, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (take, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > cap {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line of more than {cap} bytes: refused"),
            ));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take + usize::from(end));
        if end {
            return Ok(Some(line));
        }
    }
}

// ------------------------------------------------------------ daemon side

/// A remote task's channel relay: the daemon's end of the stream.
pub struct Relay {
    pub task_id: String,
    /// The task's `exit.json`: the relay ends with the task.
    pub exit: PathBuf,
    pub calls: Weak<dyn ChannelCalls>,
}

impl Relay {
    /// Carries the task's channel until it has ended or was stopped,
    /// reopening the stream whenever it drops.
    pub async fn run(self, cluster: Arc<Cluster>, stop: Arc<AtomicBool>) {
        let mut pause = Duration::from_millis(100);
        while !self.exit.exists() && !stop.load(Ordering::Acquire) {
            match self.stream(&cluster, &stop).await {
                Err(e) if e.starts_with(FORBIDDEN) => {
                    tracing::warn!(task_id = self.task_id, "the return channel cannot reach the pod: {e}");
                    return;
                }
                Ok(()) => pause = Duration::from_millis(100),
                Err(e) => {
                    tracing::info!(task_id = self.task_id, "the return channel's stream is not open: {e}");
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// One exec stream: until it drops, the task ends or it is stopped.
    async fn stream(&self, cluster: &Cluster, stop: &AtomicBool) -> Result<(), String> {
        let mut p = super::stdin::exec_in_agent(cluster, &self.task_id, CHANNEL_ARG, 256 * 1024).await?;
        let (Some(w), Some(r)) = (p.stdin(), p.stdout()) else { return Err("the exec has no stdin".into()) };
        let done = p.join();
        self.carry(r, w, async move { done.await.map_err(|e| format!("the channel's stream dropped: {e}")) }, stop)
            .await
    }

    /// Carries the calls read from `r` to the engine and their outcomes to
    /// `w`, until `r` ends, `done` (the stream's end) resolves, the task
    /// ends or `stop` is set.
    async fn carry<R, W, D>(&self, r: R, mut w: W, done: D, stop: &AtomicBool) -> Result<(), String>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin,
        D: std::future::Future<Output = Result<(), String>>,
    {
        // The pod's lines, read by a task of their own (the reading is not cancel-safe).
        let (req_tx, mut requests) = mpsc::channel::<Result<Request, String>>(64);
        let reader = tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(r);
            loop {
                let item = match read_line_capped(&mut r, MAX_LINE).await {
                    Ok(Some(l)) => serde_json::from_slice::<Request>(&l)
                        .map_err(|e| format!("the pod's channel relay said something else than a call: {e}")),
                    Ok(None) => return,
                    Err(e) => Err(e.to_string()),
                };
                let bad = item.is_err();
                if req_tx.send(item).await.is_err() || bad {
                    return;
                }
            }
        });
        let (reply_tx, mut replies) = mpsc::unbounded_channel::<Response>();
        let mut calls = tokio::task::JoinSet::new();
        // Calls not yet answered (each one's task may outlive its answer a little).
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        tokio::pin!(done);
        let ended = loop {
            tokio::select! {
                item = requests.recv() => match item {
                    Some(Ok(req)) if in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT => {
                        let fault = crate::runner::remote_channel::ChannelFault {
                            code: tonic::Code::ResourceExhausted as i32,
                            message: format!("more than {MAX_IN_FLIGHT} channel calls at once from this pod: wait for an answer"),
                        };
                        let _ = reply_tx.send(Response { id: req.id, outcome: Err(fault) });
                    }
                    Some(Ok(req)) => {
                        let Some(engine) = self.calls.upgrade() else { break Ok(()) };
                        let (task_id, tx, count) = (self.task_id.clone(), reply_tx.clone(), in_flight.clone());
                        count.fetch_add(1, Ordering::AcqRel);
                        calls.spawn(async move {
                            let outcome = engine.call(task_id, req.call).await;
                            count.fetch_sub(1, Ordering::AcqRel);
                            let _ = tx.send(Response { id: req.id, outcome });
                        });
                    }
                    Some(Err(e)) => break Err(e),
                    None => break Ok(()),
                },
                Some(resp) = replies.recv() => {
                    let mut line = serde_json::to_vec(&resp).map_err(|e| e.to_string())?;
                    line.push(b'\n');
                    if let Err(e) = w.write_all(&line).await.and(w.flush().await) {
                        break Err(format!("cannot answer into the pod: {e}"));
                    }
                }
                Some(_) = calls.join_next(), if !calls.is_empty() => {}
                r = &mut done => break r,
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if self.exit.exists() || stop.load(Ordering::Acquire) {
                        break Ok(());
                    }
                }
            }
        };
        // Calls in flight are the pod's to repeat on the next stream.
        calls.abort_all();
        reader.abort();
        let _ = w.shutdown().await;
        ended
    }
}

// --------------------------------------------------------------- pod side

/// The pod's channel socket in the pod's workspace volume `ws` (`/ws` in a
/// real pod, beneath `CAESAR_POD_ROOT` in the simulator).
pub fn pod_socket(ws: &Path) -> PathBuf {
    let rel = KUBE_POD_SOCKET.strip_prefix(super::manifest::WS).unwrap_or(KUBE_POD_SOCKET);
    ws.join(rel.trim_start_matches('/'))
}

/// `caesard __kube channel`, in the agent container: serves the channel's
/// calls on the pod's socket until its stdin ends; 0 then.
pub fn channel_main(_argv: &[String]) -> i32 {
    super::pod::out_of_the_agents_reach();
    let socket = pod_socket(&super::phases::dirs().0);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("caesard {POD_ARG0} {CHANNEL_ARG}: {e}");
            return 1;
        }
    };
    let served = rt.block_on(serve(&socket, tokio::io::stdin(), tokio::io::stdout()));
    let _ = std::fs::remove_file(&socket);
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("caesard {POD_ARG0} {CHANNEL_ARG}: {e}");
            1
        }
    }
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<ChannelOutcome>>>>;

/// Serves the channel at `socket`, its calls out on `output` and their
/// outcomes in on `input`, until `input` ends.
async fn serve<I, O>(socket: &Path, input: I, mut output: O) -> Result<(), String>
where
    I: tokio::io::AsyncRead + Unpin + Send + 'static,
    O: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use std::os::unix::fs::DirBuilderExt;
    let dir = socket.parent().ok_or("the channel socket has no directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let listener =
        caesar_proto::ipc::bind(socket).map_err(|e| format!("cannot listen at {}: {e}", socket.display()))?;
    let pending: Pending = Default::default();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(line) = out_rx.recv().await {
            if output.write_all(&line).await.and(output.flush().await).is_err() {
                return;
            }
        }
    });
    // The daemon's answers; their end is this relay's.
    let (ended_tx, ended_rx) = oneshot::channel::<String>();
    let answers = pending.clone();
    tokio::spawn(async move {
        let mut r = tokio::io::BufReader::new(input);
        let why = loop {
            match read_line_capped(&mut r, MAX_LINE).await {
                Ok(Some(l)) => match serde_json::from_slice::<Response>(&l) {
                    Ok(resp) => {
                        let waiter = answers.lock().unwrap_or_else(|p| p.into_inner()).remove(&resp.id);
                        if let Some(w) = waiter {
                            let _ = w.send(resp.outcome);
                        }
                    }
                    Err(e) => break format!("the daemon said something else than an answer: {e}"),
                },
                Ok(None) => break String::new(),
                Err(e) => break e.to_string(),
            }
        };
        let _ = ended_tx.send(why);
    });
    let relay =
        PodRelay { socket: socket.to_path_buf(), next: AtomicU64::new(1), pending: pending.clone(), out: out_tx };
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        loop {
            match caesar_proto::ipc::accept(&listener).await {
                Ok(Some(conn)) => return Some((Ok::<_, std::io::Error>(conn), listener)),
                Ok(None) => continue,
                Err(e) => return Some((Err(e), listener)),
            }
        }
    });
    // Not a graceful shutdown: a connection left open (the agent's channel
    // idles on it) would keep this relay serving calls nobody can answer.
    let server = tonic::transport::Server::builder()
        .add_service(CaesarServer::new(relay).max_decoding_message_size(MAX_LINE))
        .serve_with_incoming(incoming);
    let why = tokio::select! {
        r = server => r.map_err(|e| e.to_string()).err().unwrap_or_default(),
        why = ended_rx => why.unwrap_or_default(),
    };
    // Calls still waiting fail as a daemon gone does: the channel reconnects.
    pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
    writer.abort();
    if why.is_empty() { Ok(()) } else { Err(why) }
}

/// The pod's channel server.
struct PodRelay {
    socket: PathBuf,
    next: AtomicU64,
    pending: Pending,
    out: mpsc::UnboundedSender<Vec<u8>>,
}

impl PodRelay {
    /// Sends `call` to the daemon and waits for its outcome.
    async fn forward(&self, call: ChannelCall) -> Result<ChannelReply, Status> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx);
        let mut line = serde_json::to_vec(&Request { id, call }).map_err(|e| Status::internal(e.to_string()))?;
        line.push(b'\n');
        let gone = || Status::unavailable("the daemon's stream into this pod closed; the channel reconnects");
        if self.out.send(line).is_err() {
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            return Err(gone());
        }
        match rx.await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(fault)) => Err(fault.into()),
            Err(_) => Err(gone()),
        }
    }
}

fn unexpected(reply: ChannelReply) -> Status {
    Status::internal(format!("the daemon answered the channel's call with {reply:?}"))
}

#[tonic::async_trait]
impl Caesar for PodRelay {
    async fn ping(&self, _: GrpcRequest<pb::PingRequest>) -> Result<GrpcResponse<pb::PingResponse>, Status> {
        Ok(GrpcResponse::new(pb::PingResponse {
            version: caesar_proto::VERSION.to_owned(),
            protocol: crate::protocol_number(),
            pid: std::process::id(),
            active_tasks: 0,
            state_dir: String::new(),
            socket: self.socket.display().to_string(),
        }))
    }

    async fn get_task(
        &self,
        req: GrpcRequest<pb::ChannelRequest>,
    ) -> Result<GrpcResponse<pb::GetTaskResponse>, Status> {
        let task_id = req.into_inner().task_id;
        match self.forward(ChannelCall::GetTask { task_id }).await? {
            ChannelReply::Task { task_json } => {
                Ok(GrpcResponse::new(pb::GetTaskResponse { task_json, steers: Vec::new() }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn report_progress(
        &self,
        req: GrpcRequest<pb::ReportProgressRequest>,
    ) -> Result<GrpcResponse<pb::ReportProgressResponse>, Status> {
        let r = req.into_inner();
        let task_id = r.channel.unwrap_or_default().task_id;
        match self.forward(ChannelCall::Progress { task_id, message: r.message, pct: r.pct }).await? {
            ChannelReply::Progress { seq } => {
                Ok(GrpcResponse::new(pb::ReportProgressResponse { seq, steers: Vec::new() }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn ask_orchestrator(
        &self,
        req: GrpcRequest<pb::AskOrchestratorRequest>,
    ) -> Result<GrpcResponse<pb::AskOrchestratorResponse>, Status> {
        let r = req.into_inner();
        let call = ChannelCall::Ask {
            task_id: r.channel.unwrap_or_default().task_id,
            question: r.question,
            options: r.options,
            timeout_ms: r.timeout_ms,
            question_id: r.question_id,
        };
        match self.forward(call).await? {
            ChannelReply::Answer { question_id, answered, answer } => {
                Ok(GrpcResponse::new(pb::AskOrchestratorResponse { question_id, answered, answer, steers: Vec::new() }))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn submit_report(
        &self,
        req: GrpcRequest<pb::SubmitReportRequest>,
    ) -> Result<GrpcResponse<pb::SubmitReportResponse>, Status> {
        let r = req.into_inner();
        let call = ChannelCall::Submit { task_id: r.channel.unwrap_or_default().task_id, report_json: r.report_json };
        match self.forward(call).await? {
            ChannelReply::Accepted => Ok(GrpcResponse::new(pb::SubmitReportResponse { accepted: true })),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine that records what it is handed: progress answered at once,
    /// questions never.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, ChannelCall)>>);

    impl ChannelCalls for Recorder {
        fn call(
            self: Arc<Self>,
            task_id: String,
            call: ChannelCall,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ChannelOutcome> + Send>> {
            let wait = matches!(call, ChannelCall::Ask { .. });
            self.0.lock().unwrap().push((task_id, call));
            Box::pin(async move {
                if wait {
                    std::future::pending::<()>().await;
                }
                Ok(ChannelReply::Progress { seq: 1 })
            })
        }
    }

    fn line(id: u64, call: ChannelCall) -> Vec<u8> {
        let mut l = serde_json::to_vec(&Request { id, call }).unwrap();
        l.push(b'\n');
        l
    }

    /// The daemon's side of a stream: every call is handed over as the
    /// stream's task's (whatever it names), the calls held at once are
    /// bounded, and a line that is not a call ends the stream.
    #[tokio::test]
    async fn the_daemon_carries_a_streams_calls_as_its_tasks_and_bounds_them() {
        let d = tempfile::tempdir().unwrap();
        let engine = Arc::new(Recorder::default());
        let calls: Weak<dyn ChannelCalls> = Arc::downgrade(&(engine.clone() as Arc<dyn ChannelCalls>));
        let relay = Relay { task_id: "t_pod".into(), exit: d.path().join("exit.json"), calls };
        let (mut pod_out, daemon_in) = tokio::io::duplex(1 << 20);
        let (daemon_out, pod_in) = tokio::io::duplex(1 << 20);
        let mut pod_in = tokio::io::BufReader::new(pod_in);
        let carried = tokio::spawn(async move {
            let stop = AtomicBool::new(false);
            relay.carry(daemon_in, daemon_out, std::future::pending(), &stop).await
        });
        let mut next_answer = async || -> Response {
            serde_json::from_slice(&read_line_capped(&mut pod_in, MAX_LINE).await.unwrap().unwrap()).unwrap()
        };
        // A call naming another task goes to the engine as the stream's
        // task's call (the engine refuses it: `engine/channel.rs`).
        let progress = ChannelCall::Progress { task_id: "t_other".into(), message: "m".into(), pct: None };
        pod_out.write_all(&line(1, progress.clone())).await.unwrap();
        let first = next_answer().await;
        assert_eq!((first.id, first.outcome.is_ok()), (1, true));
        // Questions nobody answers: past the bound, refused at once.
        for id in 2..=(MAX_IN_FLIGHT as u64 + 3) {
            let ask = ChannelCall::Ask {
                task_id: "t_pod".into(),
                question: "q".into(),
                options: vec![],
                timeout_ms: 0,
                question_id: format!("q_{id}"),
            };
            pod_out.write_all(&line(id, ask)).await.unwrap();
        }
        for want in [MAX_IN_FLIGHT as u64 + 2, MAX_IN_FLIGHT as u64 + 3] {
            let refused = next_answer().await;
            assert_eq!(refused.id, want);
            assert_eq!(refused.outcome.unwrap_err().code, tonic::Code::ResourceExhausted as i32);
        }
        pod_out.write_all(b"not a call\n").await.unwrap();
        let ended = carried.await.unwrap();
        assert!(ended.unwrap_err().contains("something else than a call"));
        let seen = engine.0.lock().unwrap().clone();
        assert!(seen.iter().all(|(task, _)| task == "t_pod"), "{seen:?}");
        assert_eq!(seen[0].1, progress);
        assert!(seen.len() <= 1 + MAX_IN_FLIGHT, "{}", seen.len());
    }

    #[test]
    fn the_socket_is_where_the_agents_channel_is_told() {
        assert_eq!(pod_socket(Path::new(super::super::manifest::WS)), Path::new(KUBE_POD_SOCKET));
    }

    /// A long line is refused, not buffered; lines split across reads join.
    #[tokio::test]
    async fn lines_are_read_whole_and_capped() {
        let mut r = tokio::io::BufReader::with_capacity(4, &b"abcdefgh\nij\nklmnopqrstuvwxyz\n"[..]);
        assert_eq!(read_line_capped(&mut r, 10).await.unwrap().unwrap(), b"abcdefgh");
        assert_eq!(read_line_capped(&mut r, 10).await.unwrap().unwrap(), b"ij");
        assert!(read_line_capped(&mut r, 10).await.is_err());
        let mut end = tokio::io::BufReader::new(&b""[..]);
        assert!(read_line_capped(&mut end, 10).await.unwrap().is_none());
    }

    /// The pod's relay against a real client over a real socket: the
    /// channel's call goes out as a line, the daemon's answer comes back as
    /// its reply, a fault keeps its code, the calls it does not carry are
    /// refused, and the end of its input ends it.
    #[tokio::test]
    async fn the_pod_relay_carries_the_channels_calls_as_lines() {
        let d = tempfile::tempdir().unwrap();
        let socket = d.path().join(".channel/caesard.sock");
        let (mut daemon_in, relay_out) = tokio::io::duplex(1 << 16);
        let (relay_in, mut daemon_out) = tokio::io::duplex(1 << 16);
        let served = tokio::spawn({
            let socket = socket.clone();
            async move { serve(&socket, relay_in, relay_out).await }
        });
        let mut client = loop {
            match caesar_proto::client::connect_at(&socket).await {
                Ok((c, ping)) => {
                    assert_eq!(ping.protocol, crate::protocol_number());
                    break c;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let ask = tokio::spawn({
            let mut c = client.clone();
            async move {
                c.ask_orchestrator(pb::AskOrchestratorRequest {
                    channel: Some(pb::ChannelRequest { task_id: "t_1".into() }),
                    question: "which?".into(),
                    options: vec![],
                    timeout_ms: 0,
                    question_id: "q_abc".into(),
                })
                .await
            }
        });
        let mut lines = tokio::io::BufReader::new(&mut daemon_in);
        let line = read_line_capped(&mut lines, MAX_LINE).await.unwrap().unwrap();
        let req: Request = serde_json::from_slice(&line).unwrap();
        assert!(
            matches!(&req.call, ChannelCall::Ask { task_id, question_id, .. } if task_id == "t_1" && question_id == "q_abc"),
            "{req:?}"
        );
        let answer = Response {
            id: req.id,
            outcome: Ok(ChannelReply::Answer { question_id: "q_abc".into(), answered: true, answer: "blue".into() }),
        };
        daemon_out.write_all(format!("{}\n", serde_json::to_string(&answer).unwrap()).as_bytes()).await.unwrap();
        let got = ask.await.unwrap().unwrap().into_inner();
        assert!(got.answered && got.answer == "blue", "{got:?}");

        let report = tokio::spawn({
            let mut c = client.clone();
            async move {
                c.submit_report(pb::SubmitReportRequest {
                    channel: Some(pb::ChannelRequest { task_id: "t_2".into() }),
                    report_json: "{}".into(),
                })
                .await
            }
        });
        let line = read_line_capped(&mut lines, MAX_LINE).await.unwrap().unwrap();
        let req: Request = serde_json::from_slice(&line).unwrap();
        let refused = Response {
            id: req.id,
            outcome: Err(crate::runner::remote_channel::ChannelFault::other_task("t_2", "t_1")),
        };
        daemon_out.write_all(format!("{}\n", serde_json::to_string(&refused).unwrap()).as_bytes()).await.unwrap();
        let e = report.await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

        // An orchestrator's call is not the channel's: not carried.
        let e = client.list_tasks(pb::ListTasksRequest::default()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");

        drop(daemon_out);
        assert_eq!(served.await.unwrap(), Ok(()));
    }
}

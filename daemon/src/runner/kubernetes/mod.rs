//! The Kubernetes runner (issue 16): one Job per task, behind the same
//! [`Runner`] seam as the local supervisor.
//!
//! - [`manifest`]: the Job, a pure function of the task (fixed name,
//!   `caesar.dev/task-id` label, `backoffLimit: 0`, `restartPolicy: Never`).
//! - [`client`]: the client from the kubeconfig, the preflight, the errors.
//! - [`workspace`]: the base pushed to the team's git remote, the result
//!   fetched back into the worktree.
//! - [`pod`]: `caesard __kube pod`, the container's entrypoint around
//!   `caesard __supervise`.
//! - [`frames`]: the framed log lines and how they are laid into raw.log.
//! - [`watch`]: one watch per namespace over caesar's Jobs and Pods.
//! - [`follow`]: a task's mirror, from pod log to raw.log and exit.json.
//! - [`status`]: pod status to state and ending.
//! - [`stdin`]: the agent's stdin over one `pods/exec` stream (the pump).
//! - [`channel`]: the return channel over another one (the relay).

pub mod bundle;
pub mod channel;
pub mod client;
pub mod follow;
pub mod frames;
pub mod manifest;
pub mod phases;
pub mod pod;
pub mod status;
pub mod stdin;
pub mod watch;
pub mod workspace;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, PostParams};
use serde::{Deserialize, Serialize};

use super::remote_channel::ChannelCalls;
use super::{Adopted, RunHandle, RunWatch, Runner, StartSpec, Started};
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::launch::runner::{KubeSettings, WorkspaceMode};
use crate::supervisor::ExitRecord;
use crate::task_dir::TaskDir;
use watch::Cluster;

/// `kube.json` in the task's daemon part: written before the Job is
/// created, so a daemon that died in between knows where to look for it
/// (adoption), and what the mirror needs to bring the result back. Read
/// only for a task whose stored record names this runner (issue 28).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    #[serde(default)]
    pub task_id: String,
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
    pub namespace: String,
    pub job: String,
    pub image: String,
    pub remote: String,
    pub base: String,
    pub workdir: PathBuf,
    pub pull_timeout_s: u32,
    /// How the workspace travels (a `kube.json` from before this knew only git).
    #[serde(default)]
    pub workspace: WorkspaceMode,
    /// The agent's stdin is held open and fed by the daemon (the pump, [`stdin`]).
    #[serde(default)]
    pub stdin: bool,
    /// The agent has the return channel, carried by the relay ([`channel`]).
    #[serde(default)]
    pub channel: bool,
}

/// The marker file's name.
pub const META_FILE: &str = "kube.json";

/// Written (in the daemon part) once the task's refs are gone from the remote.
pub const RELEASED_FILE: &str = "kube.released";

impl Meta {
    /// Where a task's `kube.json` is written: its daemon part.
    pub fn path(dir: &TaskDir) -> PathBuf {
        dir.daemon_files().join(META_FILE)
    }

    /// Reads a Kubernetes task's `kube.json`: from its daemon part, or
    /// where a daemon before issue 28 put it, the task directory (its agent
    /// ran in a pod, with no path to that directory). Never called for a
    /// local task: the runner is chosen by the stored record.
    pub fn load(dir: &TaskDir) -> Option<Meta> {
        [Meta::path(dir), dir.root().join(META_FILE)].iter().find_map(|path| {
            let bytes = crate::safe_fs::read_capped(path, crate::safe_fs::RECORD_CAP).ok()?;
            serde_json::from_slice(&bytes).ok()
        })
    }
}

/// How many tasks' bases are prepared at once: `CAESAR_KUBE_BASE_PARALLEL`,
/// else four per core (the work is mostly waiting on git and the remote).
fn base_parallel() -> usize {
    std::env::var("CAESAR_KUBE_BASE_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| 4 * std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))
}

/// A connected cluster namespace: kubeconfig, context, namespace.
type ClusterKey = (Option<String>, Option<String>, String);

/// Runs tasks as Kubernetes Jobs.
pub struct KubeRunner {
    rt: tokio::runtime::Handle,
    grace_ms: u64,
    /// Bounds the tasks whose base is committed and pushed (or bundled) at
    /// once: starts run in parallel (issue 33: 500 tasks took 908 s one
    /// push after another), each push is a few git processes.
    bases: Arc<tokio::sync::Semaphore>,
    log_cap: u64,
    clusters: tokio::sync::Mutex<HashMap<ClusterKey, Arc<Cluster>>>,
    /// Tasks whose mirror runs in this daemon.
    mirrors: Mutex<HashSet<String>>,
    /// Runs caesar asked to stop, by task id.
    stops: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// The stdin pumps of the tasks that have one, by task id.
    pumps: Arc<Mutex<HashMap<String, Arc<stdin::Pump>>>>,
    /// Who carries out the channel calls the relays bring (the engine).
    calls: Weak<dyn ChannelCalls>,
    /// Tasks whose channel relay runs in this daemon.
    relays: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for KubeRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRunner").finish_non_exhaustive()
    }
}

/// Runs a future to completion from synchronous runner code.
fn block<F: Future>(rt: &tokio::runtime::Handle, f: F) -> F::Output {
    tokio::task::block_in_place(|| rt.block_on(f))
}

impl KubeRunner {
    /// A runner on the current runtime.
    /// A runner on the current runtime; `calls` carries out its tasks'
    /// channel calls (the engine).
    pub fn new(grace_ms: u64, log_cap: u64, calls: Weak<dyn ChannelCalls>) -> Option<KubeRunner> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(KubeRunner {
            rt,
            grace_ms,
            bases: Arc::new(tokio::sync::Semaphore::new(base_parallel())),
            log_cap,
            calls,
            relays: Default::default(),
            clusters: Default::default(),
            mirrors: Default::default(),
            stops: Default::default(),
            pumps: Default::default(),
        })
    }

    /// The watched cluster namespace, connected once.
    pub async fn cluster(
        &self,
        kubeconfig: Option<&str>,
        context: Option<&str>,
        ns: &str,
    ) -> std::result::Result<Arc<Cluster>, String> {
        let key = (kubeconfig.map(str::to_owned), context.map(str::to_owned), ns.to_owned());
        let mut clusters = self.clusters.lock().await;
        if let Some(c) = clusters.get(&key) {
            return Ok(c.clone());
        }
        let client = client::connect(kubeconfig, context).await?;
        let c = Cluster::start(client, ns);
        clusters.insert(key, c.clone());
        Ok(c)
    }

    fn stop_flag(&self, task_id: &str) -> Arc<AtomicBool> {
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).entry(task_id.to_owned()).or_default().clone()
    }

    /// Starts the task's mirror unless one runs already.
    fn spawn_mirror(&self, cluster: Arc<Cluster>, task_id: &str, dir: &TaskDir, meta: Meta) {
        if !self.mirrors.lock().unwrap_or_else(|p| p.into_inner()).insert(task_id.to_owned()) {
            return;
        }
        let task = follow::MirrorTask {
            cluster,
            task_id: task_id.to_owned(),
            dir: dir.clone(),
            meta,
            stop: self.stop_flag(task_id),
        };
        self.rt.spawn(task.run());
    }

    /// The task's channel relay, started (with its one exec stream) unless it runs already.
    fn spawn_relay(&self, cluster: Arc<Cluster>, task_id: &str, dir: &TaskDir) {
        if !self.relays.lock().unwrap_or_else(|p| p.into_inner()).insert(task_id.to_owned()) {
            return;
        }
        let relay = channel::Relay { task_id: task_id.to_owned(), exit: dir.exit(), calls: self.calls.clone() };
        let (all, id, stop) = (self.relays.clone(), task_id.to_owned(), self.stop_flag(task_id));
        self.rt.spawn(async move {
            relay.run(cluster, stop).await;
            all.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        });
    }

    /// The task's stdin pump, started (with its one exec stream) unless it runs already.
    fn spawn_pump(&self, cluster: Arc<Cluster>, task_id: &str, dir: &TaskDir) -> Arc<stdin::Pump> {
        let mut pumps = self.pumps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pumps.get(task_id) {
            return p.clone();
        }
        let pump = stdin::Pump::open(dir);
        pumps.insert(task_id.to_owned(), pump.clone());
        let (all, id, stop) = (self.pumps.clone(), task_id.to_owned(), self.stop_flag(task_id));
        let run = pump.clone();
        self.rt.spawn(async move {
            run.clone().run(cluster, id.clone(), stop).await;
            // A refused pump stays: its task's writes fail at once rather than start another.
            if !run.refused() {
                all.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            }
        });
        pump
    }

    async fn start_async(
        &self,
        spec: &StartSpec<'_>,
        k: &KubeSettings,
    ) -> std::result::Result<(RunHandle, Meta), String> {
        let cluster = self.cluster(k.kubeconfig.as_deref(), k.context.as_deref(), &k.namespace).await?;
        let (workdir, remote, id, scratch) =
            (spec.workdir.to_path_buf(), k.git_remote.clone(), spec.task_id.to_owned(), spec.dir.root().to_path_buf());
        let mode = k.workspace;
        let slot = self.bases.acquire().await.map_err(|e| e.to_string())?;
        let base = tokio::task::spawn_blocking(move || match mode {
            WorkspaceMode::Git => workspace::push_base(&workdir, &remote, &id, &scratch),
            // The mirror streams the bundle in once the pod's init container runs.
            WorkspaceMode::Api => bundle::make_base(&workdir, &id, &scratch),
        })
        .await
        .map_err(|e| e.to_string())??;
        drop(slot);
        let job_name = manifest::job_name(spec.task_id);
        let meta = Meta {
            task_id: spec.task_id.to_owned(),
            kubeconfig: k.kubeconfig.clone(),
            context: k.context.clone(),
            namespace: k.namespace.clone(),
            job: job_name.clone(),
            image: k.image.clone(),
            remote: k.git_remote.clone(),
            base: base.clone(),
            workdir: spec.workdir.to_path_buf(),
            pull_timeout_s: k.image_pull_timeout_seconds,
            workspace: k.workspace,
            stdin: spec.stdin.is_some(),
            channel: spec.channel,
        };
        let meta_bytes = serde_json::to_vec(&meta).map_err(|e| e.to_string())?;
        crate::safe_fs::write_atomic(&Meta::path(spec.dir), &meta_bytes).map_err(|e| e.to_string())?;
        let job = self.job_for(spec, k, &base);
        let job: Job = serde_json::from_value(job).map_err(|e| format!("the Job does not encode: {e}"))?;
        let api = cluster.job_api();
        let uid = match api.create(&PostParams::default(), &job).await {
            Ok(j) => j.metadata.uid,
            // Created by this very start before a crash: adopt it.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing =
                    api.get(&job_name).await.map_err(|e| client::explain(&e, "get", "jobs", &k.namespace))?;
                let ours =
                    existing.metadata.labels.as_ref().and_then(|l| l.get(manifest::TASK_LABEL)).map(String::as_str)
                        == Some(spec.task_id);
                if !ours {
                    return Err(format!("a Job named {job_name} exists and is not this task's: delete it"));
                }
                existing.metadata.uid
            }
            Err(e) => return Err(client::explain(&e, "create", "jobs", &k.namespace)),
        };
        let handle = RunHandle::Kubernetes {
            kubeconfig: k.kubeconfig.clone(),
            context: k.context.clone(),
            namespace: k.namespace.clone(),
            job: job_name,
            uid,
        };
        if meta.stdin {
            self.spawn_pump(cluster.clone(), spec.task_id, spec.dir);
        }
        if meta.channel {
            self.spawn_relay(cluster.clone(), spec.task_id, spec.dir);
        }
        self.spawn_mirror(cluster, spec.task_id, spec.dir, meta.clone());
        Ok((handle, meta))
    }

    /// The Job for a start: the manifest, with the task's local paths in the
    /// arguments mapped to the pod's, and the task directory's files.
    pub fn job_for(&self, spec: &StartSpec<'_>, k: &KubeSettings, base: &str) -> serde_json::Value {
        let local_dir = spec.dir.root().display().to_string();
        let local_part = spec.dir.daemon_part().display().to_string();
        let local_work = spec.workdir.display().to_string();
        let pod_dir = format!("{}/.caesar", manifest::WS);
        let pod_part = format!("{}/{}", manifest::WS, pod::DAEMON_DIR);
        let pod_work = format!("{}/repo", manifest::WS);
        // The daemon part first: the task directory's path is a prefix of its.
        let map =
            |s: &str| s.replace(&local_part, &pod_part).replace(&local_dir, &pod_dir).replace(&local_work, &pod_work);
        // The prompt travels as the task's `prompt.txt` (issue 19): the pod's
        // supervisor fills the arguments that stand for it, or feeds it on stdin.
        let args: Vec<String> = spec.args.iter().map(|a| map(a)).collect();
        let mut env: Vec<(String, String)> = spec.env.iter().map(|(a, b)| (a.clone(), map(b))).collect();
        env.push((pod::FILES_ENV.to_owned(), task_files(spec.dir, &map)));
        let program = std::path::Path::new(spec.program).file_name().map(|f| f.to_string_lossy().into_owned());
        let input = manifest::JobInput {
            task_id: spec.task_id,
            program: program.as_deref().unwrap_or(spec.program),
            args: &args,
            env: &env,
            deadline_ms: spec.deadline_ms,
            now_ms: now_ms(),
            grace_ms: self.grace_ms,
            log_cap: self.log_cap,
            stdin_close_after: spec.stdin.map(|(_, c)| c),
            stdin_prompt: spec.prompt_stdin,
            session: spec.session.map(|(p, _)| p.as_str()),
            base_oid: base,
            agent: env.iter().find(|(k, _)| k == "CAESAR_AGENT").map(|(_, v)| v.as_str()).unwrap_or("agent"),
        };
        manifest::job_json(&input, k)
    }
}

/// The task's small files the pod needs (task.json, the report schema,
/// provider files; from its daemon part the prompt, stdin.initial and the
/// session opening), as `{name: base64}` JSON.
fn task_files(dir: &TaskDir, map: &dyn Fn(&str) -> String) -> String {
    const SKIP: &[&str] = &[
        "raw.log",
        "events.jsonl",
        "exit.json",
        "agent.json",
        "mirror.json",
        META_FILE,
        RELEASED_FILE,
        "supervisor.log",
        stdin::QUEUE_FILE,
        bundle::BASE_FILE,
        bundle::RESULT_FILE,
        super::RUNNER_FINDINGS,
        crate::task_dir::LAYOUT_MARKER,
    ];
    let mut files = BTreeMap::new();
    let mut total = 0usize;
    let mut dirs = vec![dir.root().to_path_buf()];
    if !dir.is_legacy() {
        dirs.push(dir.daemon_part());
    }
    for rd in dirs.iter().filter_map(|d| std::fs::read_dir(d).ok()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let regular = e.file_type().is_ok_and(|t| t.is_file());
            if !regular || SKIP.contains(&name.as_str()) || name.starts_with('.') {
                continue;
            }
            if let Ok(mut data) = crate::safe_fs::read_capped(&e.path(), 256 * 1024) {
                let local_paths =
                    [crate::prompt::FILE, crate::supervisor::STDIN_INITIAL, crate::supervisor::SESSION_OPENING];
                if local_paths.contains(&name.as_str()) {
                    // The prompt (and a session's opening: its cwd) names the task's files by
                    // their local paths, as its arguments did.
                    data = map(&String::from_utf8_lossy(&data)).into_bytes();
                }
                total += data.len();
                if total > 512 * 1024 {
                    break;
                }
                files.insert(name, frames::b64_encode(&data));
            }
        }
    }
    serde_json::to_string(&files).unwrap_or_default()
}

fn parts(handle: &RunHandle) -> Option<(Option<&str>, Option<&str>, &str, &str)> {
    match handle {
        RunHandle::Kubernetes { kubeconfig, context, namespace, job, .. } => {
            Some((kubeconfig.as_deref(), context.as_deref(), namespace.as_str(), job.as_str()))
        }
        RunHandle::Local { .. } => None,
    }
}

impl Runner for KubeRunner {
    fn start(&self, spec: &StartSpec<'_>) -> Result<Started> {
        let k = spec.kube.ok_or_else(|| Error::Internal("no Kubernetes settings for a Kubernetes start".into()))?;
        // What the pod's supervisor writes first on the agent's stdin, and a session's opening:
        // they travel with the task's files.
        if let Some((initial, _)) = spec.stdin {
            let path = spec.dir.stdin_initial();
            std::fs::write(&path, initial).map_err(|e| Error::io_at("cannot write", &path, e))?;
        }
        if let Some((_, opening)) = spec.session {
            let path = spec.dir.root().join(crate::supervisor::SESSION_OPENING);
            std::fs::write(&path, opening).map_err(|e| Error::io_at("cannot write", &path, e))?;
        }
        let started_ms = now_ms();
        let (handle, _) = block(&self.rt, self.start_async(spec, k)).map_err(Error::Precondition)?;
        Ok(Started { handle, started_ms, watch: Box::new(KubeWatch { exit: spec.dir.exit() }) })
    }

    fn attach(&self, handle: &RunHandle, dir: &TaskDir) -> Box<dyn RunWatch> {
        if let (Some((kc, ctx, ns, _)), Some(meta)) = (parts(handle), Meta::load(dir))
            && !dir.exit().exists()
        {
            let task_id = meta.task_id.clone();
            match block(&self.rt, self.cluster(kc, ctx, ns)) {
                Ok(c) => {
                    // Re-established after a daemon restart: the pod says what it already wrote.
                    if meta.stdin {
                        self.spawn_pump(c.clone(), &task_id, dir);
                    }
                    if meta.channel {
                        self.spawn_relay(c.clone(), &task_id, dir);
                    }
                    self.spawn_mirror(c, &task_id, dir, meta)
                }
                Err(e) => write_failed(dir, &e),
            }
        }
        Box::new(KubeWatch { exit: dir.exit() })
    }

    fn adopt(
        &self,
        _kind: crate::launch::runner::RunnerKind,
        task_id: &str,
        dir: &TaskDir,
    ) -> Pin<Box<dyn Future<Output = Option<Adopted>> + Send + '_>> {
        let (task_id, dir) = (task_id.to_owned(), dir.clone());
        Box::pin(async move {
            let meta = Meta::load(&dir)?;
            let c = self.cluster(meta.kubeconfig.as_deref(), meta.context.as_deref(), &meta.namespace).await.ok()?;
            let job = c.job_api().get_opt(&meta.job).await.ok()??;
            let ours = job.metadata.labels.as_ref().and_then(|l| l.get(manifest::TASK_LABEL)) == Some(&task_id);
            if !ours {
                return None;
            }
            let started_ms =
                job.metadata.creation_timestamp.as_ref().map(|t| t.0.as_millisecond()).unwrap_or_else(now_ms);
            Some(Adopted {
                handle: RunHandle::Kubernetes {
                    kubeconfig: meta.kubeconfig,
                    context: meta.context,
                    namespace: meta.namespace,
                    job: meta.job,
                    uid: job.metadata.uid,
                },
                started_ms,
            })
        })
    }

    fn is_alive(&self, _handle: &RunHandle) -> bool {
        // The mirror decides how a remote run ended, even one whose Job is
        // gone: it is always given the chance to.
        true
    }

    fn request_stop(&self, handle: &RunHandle) {
        let Some((kc, ctx, ns, job)) = parts(handle) else { return };
        let task_id = manifest_task(job);
        if let Some(t) = task_id {
            self.stop_flag(&t).store(true, Ordering::Release);
        }
        let (kc, ctx, ns, job) = (kc.map(str::to_owned), ctx.map(str::to_owned), ns.to_owned(), job.to_owned());
        let grace = (self.grace_ms / 1000 + 15) as u32;
        let this = self.clusters_handle();
        self.rt.spawn(async move {
            if let Ok(c) = this(kc, ctx, ns).await {
                let dp = DeleteParams::background().grace_period(grace);
                let _ = c.job_api().delete(&job, &dp).await;
            }
        });
    }

    fn write_stdin(&self, handle: &RunHandle, dir: &TaskDir, line: &str) -> std::io::Result<()> {
        let unsupported = || {
            std::io::Error::new(std::io::ErrorKind::Unsupported, "this remote task's agent takes nothing on its stdin")
        };
        let (kc, ctx, ns, _) = parts(handle).ok_or_else(unsupported)?;
        let meta = Meta::load(dir).filter(|m| m.stdin).ok_or_else(unsupported)?;
        let known = self.pumps.lock().unwrap_or_else(|p| p.into_inner()).get(&meta.task_id).cloned();
        let pump = match known {
            Some(p) => p,
            // Its pump ended (the task is over) or never ran in this daemon.
            None => {
                let c = block(&self.rt, self.cluster(kc, ctx, ns)).map_err(std::io::Error::other)?;
                self.spawn_pump(c, &meta.task_id, dir)
            }
        };
        pump.push(line)
    }

    fn exit_record(&self, _handle: &RunHandle, dir: &TaskDir) -> Option<ExitRecord> {
        crate::supervisor::read_exit(&dir.daemon_files())
    }

    fn release(
        &self,
        _kind: crate::launch::runner::RunnerKind,
        task_id: &str,
        dir: &TaskDir,
        repo: &std::path::Path,
    ) -> std::result::Result<bool, String> {
        let Some(meta) = Meta::load(dir) else { return Ok(false) };
        let marker = dir.daemon_files().join(RELEASED_FILE);
        // Or where a daemon before issue 28 recorded it.
        if marker.exists() || dir.root().join(RELEASED_FILE).exists() {
            return Ok(false);
        }
        // The workspace's repository knows a remote named in its config;
        // the task's own workdir may be gone (a collected worktree).
        let repo = if repo.is_dir() { repo } else { meta.workdir.as_path() };
        match meta.workspace {
            WorkspaceMode::Git => workspace::delete_refs(repo, &meta.remote, task_id)?,
            // Nothing on a remote: the local result ref and the bundles here.
            WorkspaceMode::Api => {
                bundle::delete_local_ref(repo, task_id)?;
                for f in [bundle::BASE_FILE, bundle::RESULT_FILE] {
                    let _ = std::fs::remove_file(dir.root().join(f));
                }
            }
        }
        crate::safe_fs::write_atomic(&marker, b"{}").map_err(|e| format!("cannot record the release: {e}"))?;
        Ok(true)
    }

    fn kill_remains(&self, handle: &RunHandle, _task_id: &str, _dir: &TaskDir) {
        let Some((kc, ctx, ns, job)) = parts(handle) else { return };
        let (kc, ctx, ns, job) = (kc.map(str::to_owned), ctx.map(str::to_owned), ns.to_owned(), job.to_owned());
        let this = self.clusters_handle();
        self.rt.spawn(async move {
            if let Ok(c) = this(kc, ctx, ns).await {
                let _ = c.job_api().delete(&job, &DeleteParams::background().grace_period(0)).await;
            }
        });
    }
}

type ClusterFuture = Pin<Box<dyn Future<Output = std::result::Result<Arc<Cluster>, String>> + Send>>;

impl KubeRunner {
    /// A cluster lookup that does not borrow the runner (for spawned tasks):
    /// it reuses a connected cluster, or connects one for the call.
    fn clusters_handle(&self) -> impl Fn(Option<String>, Option<String>, String) -> ClusterFuture + use<> {
        let known: Vec<(ClusterKey, Arc<Cluster>)> = self
            .clusters
            .try_lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        move |kc, ctx, ns| {
            let key = (kc.clone(), ctx.clone(), ns.clone());
            let hit = known.iter().find(|(k, _)| *k == key).map(|(_, c)| c.clone());
            Box::pin(async move {
                match hit {
                    Some(c) => Ok(c),
                    None => {
                        let client = client::connect(kc.as_deref(), ctx.as_deref()).await?;
                        Ok(Cluster::start(client, &ns))
                    }
                }
            })
        }
    }
}

/// The task id back from a Job name made by [`manifest::job_name`].
fn manifest_task(job: &str) -> Option<String> {
    job.strip_prefix("caesar-t-").map(|hex| format!("t_{hex}"))
}

fn write_failed(dir: &TaskDir, why: &str) {
    let exit = ExitRecord { spawn_error: Some(why.to_owned()), finished_ms: now_ms(), ..Default::default() };
    let _ = crate::safe_fs::write_atomic(&dir.exit(), &serde_json::to_vec(&exit).unwrap_or_default());
}

/// A remote run has ended once its mirror wrote `exit.json`.
struct KubeWatch {
    exit: PathBuf,
}

impl RunWatch for KubeWatch {
    fn wait(&mut self, tick: Duration) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            tokio::time::sleep(tick).await;
            self.exit.exists()
        })
    }
}

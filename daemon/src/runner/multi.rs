//! The engine's one runner, which hands each task to the runner it belongs
//! to: a start by its launch plan (`[runner]`), everything after by its
//! stored handle, or by the kind its stored launch names (adoption, the
//! release of a task never recorded started). Never by a file in the task
//! directory, which a local agent can write (issue 28).

use std::future::Future;
use std::pin::Pin;

use super::local::LocalRunner;
use super::{Adopted, RunHandle, RunWatch, Runner, StartSpec, Started};
use crate::error::{Error, Result};
use crate::launch::runner::RunnerKind;
use crate::supervisor::ExitRecord;
use crate::task_dir::TaskDir;

/// The local runner, and the Kubernetes one when this build has it.
pub struct Runners {
    pub local: LocalRunner,
    #[cfg(feature = "kubernetes")]
    pub kube: Option<super::kubernetes::KubeRunner>,
}

impl std::fmt::Debug for Runners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runners").field("local", &self.local).finish_non_exhaustive()
    }
}

impl Runners {
    /// The local runner and, built with `kubernetes` and inside a runtime,
    /// the Kubernetes one, which carries its tasks' return channels to
    /// `calls` (the engine).
    pub fn new(local: LocalRunner, calls: std::sync::Weak<dyn super::remote_channel::ChannelCalls>) -> Runners {
        #[cfg(feature = "kubernetes")]
        let kube = super::kubernetes::KubeRunner::new(local.grace_ms, local.raw_log_cap, calls);
        #[cfg(not(feature = "kubernetes"))]
        let _ = calls;
        Runners {
            local,
            #[cfg(feature = "kubernetes")]
            kube,
        }
    }

    #[cfg(feature = "kubernetes")]
    fn remote(&self) -> Option<&dyn Runner> {
        self.kube.as_ref().map(|k| k as &dyn Runner)
    }

    #[cfg(not(feature = "kubernetes"))]
    fn remote(&self) -> Option<&dyn Runner> {
        None
    }

    /// The runner of a kind; `None`: Kubernetes, which this daemon cannot run.
    fn for_kind(&self, kind: RunnerKind) -> Option<&dyn Runner> {
        match kind {
            RunnerKind::Local => Some(&self.local),
            RunnerKind::Kubernetes => self.remote(),
        }
    }

    fn for_handle(&self, handle: &RunHandle) -> Option<&dyn Runner> {
        self.for_kind(handle.kind())
    }
}

/// Why a build without the feature cannot run a Kubernetes task.
pub const NO_KUBERNETES: &str = "this caesar was built without the Kubernetes runner: reinstall it with `cargo install --locked --path packaging/caesar --features kubernetes`, or set `[runner] kind = \"local\"`";

/// The largest prompt a Kubernetes task takes (issue 19): its file travels
/// with the task's other files in one environment variable of the pod, base64
/// encoded, which the kernel caps at 128 KiB like one argument.
const REMOTE_PROMPT_CAP: u64 = 64 * 1024;

/// Fits a launch to a pod, or says why it cannot run there. The agent's
/// stdin reaches the pod (the pump, `runner::kubernetes::stdin`): claude's
/// permission prompts, ACP and codex app-server sessions run there as they
/// do locally, and so does the return channel (the relay,
/// `runner::kubernetes::channel`). What a remote task cannot do is refused
/// before anything is recorded: a prompt too large for the pod's
/// environment.
pub fn fit_remote(launch: &crate::launch::LaunchPlan) -> std::result::Result<(), String> {
    if let Some(p) = launch.prompt.filter(|p| p.bytes > REMOTE_PROMPT_CAP) {
        return Err(format!(
            "this prompt is {} bytes, more than the {REMOTE_PROMPT_CAP} a Kubernetes pod receives yet: shorten the \
             objective or context (put the material in a file of the workspace), or set `[runner] kind = \"local\"`",
            p.bytes
        ));
    }
    Ok(())
}

/// Checks that a task with these settings can run on its cluster; the
/// error is the reason and the fix. Nothing is created. `stdin`: its agent
/// takes answers on stdin; `channel`: it has the return channel (for
/// either the daemon must be allowed `pods/exec`).
pub async fn preflight(
    settings: &crate::launch::runner::KubeSettings,
    task_id: &str,
    stdin: bool,
    channel: bool,
) -> std::result::Result<(), String> {
    #[cfg(feature = "kubernetes")]
    {
        use super::kubernetes::manifest;
        let input = manifest::JobInput {
            task_id,
            program: "true",
            args: &[],
            env: &[],
            deadline_ms: 0,
            now_ms: 0,
            grace_ms: 0,
            log_cap: 0,
            stdin_close_after: None,
            stdin_prompt: false,
            session: None,
            base_oid: "0000000000000000000000000000000000000000",
            agent: "preflight",
        };
        super::kubernetes::client::preflight(settings, &manifest::job_json(&input, settings), stdin, channel).await
    }
    #[cfg(not(feature = "kubernetes"))]
    {
        let _ = (settings, task_id, stdin, channel);
        Err(NO_KUBERNETES.to_owned())
    }
}

impl Runner for Runners {
    fn start(&self, spec: &StartSpec<'_>) -> Result<Started> {
        if spec.kube.is_none() {
            return self.local.start(spec);
        }
        match self.remote() {
            Some(r) => r.start(spec),
            None => Err(Error::Precondition(NO_KUBERNETES.to_owned())),
        }
    }

    fn attach(&self, handle: &RunHandle, dir: &TaskDir) -> Box<dyn RunWatch> {
        match self.for_handle(handle) {
            Some(r) => r.attach(handle, dir),
            None => self.local.attach(handle, dir),
        }
    }

    fn adopt(
        &self,
        kind: RunnerKind,
        task_id: &str,
        dir: &TaskDir,
    ) -> Pin<Box<dyn Future<Output = Option<Adopted>> + Send + '_>> {
        match self.for_kind(kind) {
            Some(r) => r.adopt(kind, task_id, dir),
            // Nothing this daemon can find: the task starts afresh (and says why it cannot).
            None => Box::pin(std::future::ready(None)),
        }
    }

    fn is_alive(&self, handle: &RunHandle) -> bool {
        self.for_handle(handle).is_some_and(|r| r.is_alive(handle))
    }

    fn request_stop(&self, handle: &RunHandle) {
        if let Some(r) = self.for_handle(handle) {
            r.request_stop(handle);
        }
    }

    fn write_stdin(&self, handle: &RunHandle, dir: &TaskDir, line: &str) -> std::io::Result<()> {
        match self.for_handle(handle) {
            Some(r) => r.write_stdin(handle, dir, line),
            None => Err(std::io::Error::new(std::io::ErrorKind::Unsupported, NO_KUBERNETES)),
        }
    }

    fn exit_record(&self, handle: &RunHandle, dir: &TaskDir) -> Option<ExitRecord> {
        match self.for_handle(handle) {
            Some(r) => r.exit_record(handle, dir),
            // Every runner's ending is the daemon part's exit.json, which the local one reads.
            None => self.local.exit_record(handle, dir),
        }
    }

    fn kill_remains(&self, handle: &RunHandle, task_id: &str, dir: &TaskDir) {
        if let Some(r) = self.for_handle(handle) {
            r.kill_remains(handle, task_id, dir);
        }
    }

    fn release(
        &self,
        kind: RunnerKind,
        task_id: &str,
        dir: &TaskDir,
        repo: &std::path::Path,
    ) -> std::result::Result<bool, String> {
        match self.for_kind(kind) {
            Some(r) => r.release(kind, task_id, dir, repo),
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28: a local task's directory holds a `kube.json` (naming a git
    /// remote with the task's ref) and runner findings, as its agent could
    /// write them. Routed by the stored record, the release of the local
    /// task touches no remote, and the report gets no finding; a
    /// Kubernetes task's own `kube.json`, in its daemon part, still
    /// releases its refs.
    #[cfg(feature = "kubernetes")]
    #[test]
    fn files_planted_in_a_local_task_route_nothing_to_kubernetes() {
        use super::super::kubernetes::{META_FILE, Meta, RELEASED_FILE};
        use std::process::Command;

        struct NoCalls;
        impl crate::runner::remote_channel::ChannelCalls for NoCalls {
            fn call(
                self: std::sync::Arc<Self>,
                _task_id: String,
                _call: crate::runner::remote_channel::ChannelCall,
            ) -> Pin<Box<dyn Future<Output = crate::runner::remote_channel::ChannelOutcome> + Send>> {
                Box::pin(std::future::pending())
            }
        }
        let git = |dir: &std::path::Path, args: &[&str]| {
            let out = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let tmp = tempfile::tempdir().unwrap();
        let (repo, remote) = (tmp.path().join("repo"), tmp.path().join("remote.git"));
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "base"]);
        git(tmp.path(), &["init", "-q", "--bare", "remote.git"]);
        let remote_s = remote.display().to_string();
        git(&repo, &["push", "-q", &remote_s, "HEAD:refs/caesar/tasks/t_1/base"]);
        let refs = || git(&remote, &["for-each-ref", "--format=%(refname)", "refs/caesar/tasks/t_1/"]);
        let dir = TaskDir::new(tmp.path().join("tasks").join("t_1"));
        std::fs::create_dir_all(dir.root()).unwrap();
        dir.create_daemon_part().unwrap();
        let meta = Meta {
            task_id: "t_1".into(),
            namespace: "planted".into(),
            job: "caesar-t-1".into(),
            remote: remote_s.clone(),
            workdir: repo.clone(),
            stdin: true,
            ..Default::default()
        };
        let meta = serde_json::to_vec(&meta).unwrap();
        std::fs::write(dir.root().join(META_FILE), &meta).unwrap();
        let finding = r#"{"severity":"high","title":"planted","detail":"planted"}"#;
        std::fs::write(dir.root().join(super::super::RUNNER_FINDINGS), finding).unwrap();

        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let _in_rt = rt.enter();
        let local = LocalRunner { supervisor_exe: "/nonexistent".into(), grace_ms: 100, raw_log_cap: 0 };
        let calls: std::sync::Weak<dyn crate::runner::remote_channel::ChannelCalls> = std::sync::Weak::<NoCalls>::new();
        let runners = Runners::new(local, calls);
        assert!(runners.kube.is_some(), "the Kubernetes runner is there to be misrouted to");

        // The local task: nothing released, no git on the planted remote.
        assert_eq!(runners.release(RunnerKind::Local, "t_1", &dir, &repo), Ok(false));
        assert_eq!(refs().trim(), "refs/caesar/tasks/t_1/base");
        assert!(!dir.root().join(RELEASED_FILE).exists() && !dir.daemon_files().join(RELEASED_FILE).exists());
        // A planted finding is not the runner's.
        assert!(crate::runner::findings(&dir).is_empty());
        // Its stdin goes to the local supervisor's FIFO, not to a pump.
        let fifo = dir.daemon_files().join(crate::supervisor::STDIN_FIFO);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut supervisor = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(&fifo).unwrap()
        };
        let handle = RunHandle::Local { pid: 0, start: None, boot: None };
        runners.write_stdin(&handle, &dir, "{\"answer\":1}").unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut supervisor, &mut got).unwrap();
        assert_eq!(got, "{\"answer\":1}\n");

        // A Kubernetes task: its kube.json in the daemon part releases its refs, once.
        std::fs::write(dir.daemon_files().join(META_FILE), &meta).unwrap();
        assert_eq!(runners.release(RunnerKind::Kubernetes, "t_1", &dir, &repo), Ok(true));
        assert_eq!(refs().trim(), "");
        assert!(dir.daemon_files().join(RELEASED_FILE).exists());
        assert_eq!(runners.release(RunnerKind::Kubernetes, "t_1", &dir, &repo), Ok(false));
    }
    use crate::oacp::Mode;
    use crate::prompt::{PromptRef, Via};
    use crate::provider::{self, Invocation, Stdin};

    fn inv() -> Invocation<'static> {
        Invocation::bare("do it", Mode::ReadOnly)
    }

    /// A task's launch as delegation stores it, from a provider's session launch.
    fn stored(parser: &str, planned: provider::Launch) -> crate::launch::LaunchPlan {
        crate::launch::LaunchPlan {
            provider: parser.parse().expect("a provider id"),
            args: planned.args,
            env: planned.env,
            stdin: planned.stdin,
            prompt: Some(PromptRef { bytes: 5, via: Via::Protocol }),
            ..Default::default()
        }
    }

    #[test]
    fn sessions_claude_write_and_the_channel_run_in_a_pod() {
        let i = inv();
        let acp = provider::acp::with_fallback(
            provider::acp::launch("gemini", &i).unwrap(),
            provider::build_launch(crate::launch::ProviderId::Gemini, &i),
        );
        // A session stays a session: its stdin reaches the pod.
        let gemini = stored("gemini", acp);
        let before = gemini.args.clone();
        fit_remote(&gemini).unwrap();
        assert!(matches!(gemini.stdin, Stdin::Session { .. }));
        assert_eq!(gemini.args, before);
        assert!(gemini.findings.is_empty(), "{:?}", gemini.findings);
        let app = provider::acp::with_fallback(
            provider::codex_app::launch(&i),
            provider::build_launch(crate::launch::ProviderId::Codex, &i),
        );
        let codex = stored("codex", app);
        fit_remote(&codex).unwrap();
        assert!(matches!(codex.stdin, Stdin::Session { .. }));
        // claude write asks its permissions on stdin: it runs in a pod now.
        let w = stored(
            "claude",
            provider::build_launch(crate::launch::ProviderId::Claude, &Invocation { mode: Mode::Write, ..inv() })
                .unwrap(),
        );
        assert!(matches!(w.stdin, Stdin::Control { .. }));
        fit_remote(&w).unwrap();
        // A session with no stream command to fall back to runs too.
        let bare = stored("generic", provider::acp::launch("gemini", &i).unwrap());
        fit_remote(&bare).unwrap();
        // The return channel reaches a pod (its relay).
        let mut chan = stored("claude", provider::build_launch(crate::launch::ProviderId::Claude, &i).unwrap());
        chan.channel = true;
        fit_remote(&chan).unwrap();
        let mut big = stored("claude", provider::build_launch(crate::launch::ProviderId::Claude, &i).unwrap());
        big.prompt = Some(PromptRef { bytes: REMOTE_PROMPT_CAP + 1, via: Via::Stdin });
        assert!(fit_remote(&big).unwrap_err().contains("bytes"));
    }
}

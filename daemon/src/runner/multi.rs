//! The engine's one runner, which hands each task to the runner it belongs
//! to: a start by its launch plan (`[runner]`), everything after by the
//! kind of its handle, or by the `kube.json` a Kubernetes start leaves in
//! the task directory before it creates anything.

use std::future::Future;
use std::pin::Pin;

use super::local::LocalRunner;
use super::{Adopted, RunHandle, RunWatch, Runner, StartSpec, Started};
use crate::error::{Error, Result};
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

/// The file that marks a task given to the Kubernetes runner.
const KUBE_MARK: &str = "kube.json";

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

    fn for_handle(&self, handle: &RunHandle) -> Option<&dyn Runner> {
        match handle {
            RunHandle::Local { .. } => Some(&self.local),
            RunHandle::Kubernetes { .. } => self.remote(),
        }
    }

    fn for_dir(&self, dir: &TaskDir) -> &dyn Runner {
        match self.remote() {
            Some(r) if dir.root().join(KUBE_MARK).exists() => r,
            _ => &self.local,
        }
    }
}

/// Why a build without the feature cannot run a Kubernetes task.
pub const NO_KUBERNETES: &str = "this caesard was built without the `kubernetes` feature: install the default `caesar` package, or set `[runner] kind = \"local\"`";

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

    fn adopt(&self, task_id: &str, dir: &TaskDir) -> Pin<Box<dyn Future<Output = Option<Adopted>> + Send + '_>> {
        self.for_dir(dir).adopt(task_id, dir)
    }

    fn is_alive(&self, handle: &RunHandle) -> bool {
        self.for_handle(handle).is_some_and(|r| r.is_alive(handle))
    }

    fn request_stop(&self, handle: &RunHandle) {
        if let Some(r) = self.for_handle(handle) {
            r.request_stop(handle);
        }
    }

    fn write_stdin(&self, dir: &TaskDir, line: &str) -> std::io::Result<()> {
        self.for_dir(dir).write_stdin(dir, line)
    }

    fn exit_record(&self, dir: &TaskDir) -> Option<ExitRecord> {
        self.for_dir(dir).exit_record(dir)
    }

    fn kill_remains(&self, task_id: &str, dir: &TaskDir) {
        self.for_dir(dir).kill_remains(task_id, dir);
    }

    fn release(&self, task_id: &str, dir: &TaskDir, repo: &std::path::Path) -> std::result::Result<bool, String> {
        self.for_dir(dir).release(task_id, dir, repo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

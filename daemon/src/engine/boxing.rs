//! The box of a task for what the daemon starts itself (issue 29): its
//! `[worktree] setup` and its `verify` commands run through the same
//! launcher as its agent ([`crate::supervisor::boxed`]), with the task's confinement and
//! the agent's environment allowlist, never the daemon's own environment.

use std::path::Path;

use caesar_proto::paths::Paths;

use crate::store::TaskRecord;
use crate::supervisor::boxed::{Launcher, SpecInputs};

/// What the task's confinement is computed from: `read_only` as its mode
/// says (setup always writes its worktree, so it passes `false`), `env` the
/// agent's environment as the daemon adds it.
pub(super) fn spec_inputs(
    paths: &Paths,
    record: &TaskRecord,
    task_root: &Path,
    read_only: bool,
    env: &[(String, String)],
) -> SpecInputs {
    SpecInputs {
        task_root: task_root.to_path_buf(),
        workspace: Path::new(&record.workspace).to_path_buf(),
        read_only,
        provider: record.launch.provider,
        state_dir: paths.state_dir.clone(),
        config_dir: paths.config_dir.clone(),
        runtime_dir: paths.runtime_dir.clone(),
        socket: paths.socket.clone(),
        env: env.to_vec(),
        hide: record.launch.kube.is_none(),
        repo_root: record.workshop.as_ref().and_then(|p| p.repo_root.clone()),
        limits: record.launch.box_limits,
    }
}

/// The trees the box of read-only task `record` keeps every write out of,
/// on this machine (`sandbox::unwritable`): its spec as the start will
/// build it (what decides it, the provider, the mode and the workspace,
/// does not change between the two). Empty for any other task.
pub(super) fn unwritable(paths: &Paths, record: &TaskRecord) -> Vec<std::path::PathBuf> {
    if record.mode != crate::oacp::Mode::ReadOnly || record.launch.kube.is_some() {
        return Vec::new();
    }
    let workspace = Path::new(&record.workspace);
    let workdir = workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf());
    let dir = crate::task_dir::TaskDir::new(&record.task_dir);
    let inputs = spec_inputs(paths, record, dir.root(), true, &[]);
    crate::sandbox::unwritable(&crate::supervisor::boxed::task_spec(&inputs, &workdir))
}

/// The launcher of a task's setup or verify: `exe` is caesard. Their
/// environment is the agent's allowlist for the task's provider, its own
/// `TMPDIR` and package caches; confined as a write task when not
/// `read_only`. A CLI's own sandbox does not cover these commands, so
/// caesar's write rules apply to them whatever the provider.
pub(super) fn launcher(
    paths: &Paths,
    record: &TaskRecord,
    task_root: &Path,
    exe: &Path,
    grace_ms: u64,
    read_only: bool,
) -> Launcher {
    let provider = record.launch.provider;
    let tmp = task_root.join("tmp");
    let _ = std::fs::create_dir_all(&tmp);
    let mut added = vec![("TMPDIR".to_owned(), tmp.display().to_string())];
    added.extend(crate::sandbox::task_caches(task_root));
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        crate::agent_env::allowed(provider, std::env::vars_os());
    env.retain(|(k, _)| !added.iter().any(|(a, _)| k == a.as_str()));
    env.extend(added.iter().map(|(k, v)| (k.into(), v.into())));
    let mut spec = spec_inputs(paths, record, task_root, read_only, &added);
    // Not the CLI's own sandbox: these are plain `sh -c` commands.
    spec.provider = crate::launch::ProviderId::Generic;
    Launcher { exe: exe.to_path_buf(), grace_ms: grace_ms.min(2000), env, spec }
}

//! Kernel confinement of an agent (issue 19): Landlock, applied by the
//! supervisor to the agent alone, between fork and exec.
//!
//! Every task gets its own Landlock domain where the kernel has one, which
//! by itself keeps the agent from ptrace-ing or reading the memory of
//! processes outside it (other tasks, the daemon; their
//! `/proc/<pid>/environ` stays readable, as measured on Linux 6.18),
//! and, from ABI 6, from signalling them (its supervisor among them: the
//! subreaper that ties its tree to its task) or reaching abstract sockets
//! outside it. A read-only task also has its writes confined: beneath its
//! task directory, the temporary directories, `/dev`, and its CLI's own
//! state directories, so the workspace is out of its reach. The daemon
//! decides the spec ([`for_task`]); the supervisor builds the ruleset
//! before it forks ([`prepare`]) and the agent's `pre_exec` only makes
//! system calls ([`Prepared::in_child`]). Its reads of caesar's directories
//! are confined first, in a mount namespace of its own where the kernel
//! allows one ([`mount`]).
//!
//! The design beside its neighbours: `docs/design/confinement.md`.

use std::path::{Path, PathBuf};

pub mod cgroup;
pub mod mount;
mod mount_carve;
pub mod pid_ns;

use serde::{Deserialize, Serialize};

use crate::launch::ProviderId;

/// The supervisor's environment variable that carries the spec (JSON); it
/// is removed from the agent's environment.
pub const ENV: &str = "CAESAR_SANDBOX";

/// What to confine an agent to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Confine writes to `writable` (a read-only task); otherwise only the
    /// domain and its scopes apply.
    pub confine_writes: bool,
    /// Where writes are allowed, when confined (missing paths are skipped).
    pub writable: Vec<PathBuf>,
    /// Kept out of reach even beneath a writable path (the workspace of a
    /// read-only task under `/tmp`): in a mount namespace the directories on
    /// the way to it are bound read-only (`sandbox/mount_carve.rs`); else the
    /// writable path is replaced by the entries beside the protected one,
    /// level by level, in Landlock's rules.
    #[serde(default)]
    pub protect: Vec<PathBuf>,
    /// Kept out of reach beneath a writable ancestor too, but a writable
    /// path named inside one stays writable (the daemon's state directory,
    /// with the task's own directory in it; a project's main tree, with a
    /// worktree task's worktree in it).
    #[serde(default)]
    pub shield: Vec<PathBuf>,
    /// Hidden from the agent behind empty read-only tmpfs mounts in a mount
    /// namespace of its own (caesar's state, config and runtime
    /// directories; `mount.rs`), where the kernel allows one.
    #[serde(default)]
    pub hide: Vec<PathBuf>,
    /// Re-exposed by bind mount beneath a hidden directory (its task
    /// directory, the main socket's directory, its worktree).
    #[serde(default)]
    pub expose: Vec<PathBuf>,
    /// Read-only to the task though beneath a writable directory (issue 29:
    /// its CLI's settings, hooks and MCP-server files, the package caches
    /// shared with the user): bound read-only over themselves in its mount
    /// namespace where it has one (existing paths only), else carved out of
    /// its writable paths by Landlock like `shield`.
    #[serde(default)]
    pub readonly: Vec<PathBuf>,
    /// No PID namespace for this program: a CLI that builds its own
    /// sandbox with user namespaces (codex's bubblewrap) cannot build it
    /// inside caesar's, and its commands hang. Its tree is then bounded by
    /// its supervisor's scan and the cgroup, as before the box.
    #[serde(default)]
    pub no_pid_ns: bool,
    /// The kernel's limits on the box's cgroup (`cgroup.rs`).
    #[serde(default)]
    pub limits: crate::launch::BoxLimits,
    /// Whether a PID namespace works on this machine, as the daemon found once
    /// ([`pid_ns::works`]); `None` (a spec for elsewhere, or from an older daemon): the
    /// launcher finds out itself, at the cost of a throwaway child per box (issue 33).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns_works: Option<bool>,
}

/// The Landlock ABI this kernel offers, `None` where it offers none.
pub fn kernel_abi() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
        // SAFETY: with a null attribute and this flag the call only returns
        // the ABI version (or an error); it touches no memory.
        let v =
            unsafe { nix::libc::syscall(nix::libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
        (v > 0).then_some(v as i32)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// What a task of this mode gets on this machine, in words (doctor,
/// `agents describe`, the task's `started` event).
pub fn describe(read_only: bool) -> String {
    format!("{}; {}; {}", describe_kernel(read_only), describe_reads(), pid_ns::describe())
}

/// Whether the agent's reads are confined ([`mount`]), in words.
fn describe_reads() -> &'static str {
    match (mount::works(), kernel_abi().is_some()) {
        (true, true) => {
            "reads confined: caesar's state, config and runtime directories hidden in a mount namespace of its own \
             (but its own task directory, the socket's directory and its worktree)"
        }
        (true, false) => {
            "reads partly confined: caesar's directories hidden in a mount namespace of its own, but without \
             Landlock `/proc/<daemon pid>/root` still reaches them"
        }
        (false, _) => {
            "reads not confined: no unprivileged user and mount namespaces here, so caesar's store, other tasks' \
             directories and caesar's config are readable"
        }
    }
}

fn describe_kernel(read_only: bool) -> String {
    let writes = if read_only {
        "writes confined to its task directory, temp, /dev and its CLI's state directories (the workspace is read-only)"
    } else {
        "writes confined to its worktree (or its workspace, in place), its task directory, temp, /dev and its CLI's state directories (not the rest of the home directory, nor caesar's state, config and socket directories)"
    };
    describe_kernel_writes(writes)
}

/// The kernel's protections in words, with `writes` saying what confines
/// the agent's writes.
fn describe_kernel_writes(writes: &str) -> String {
    match kernel_abi() {
        None => "none: this kernel offers no Landlock (a read-only task is asked not to write, not prevented; \
                 another task's processes are not walled off)"
            .to_owned(),
        Some(abi) => {
            let scopes = if abi >= 6 {
                "signals and abstract sockets scoped to the task"
            } else {
                "no signal scoping (needs ABI 6)"
            };
            format!(
                "landlock ABI {abi}: a domain of its own (no ptrace or memory reads of other tasks), {scopes}, {writes}"
            )
        }
    }
}

/// The state directories each provider's CLI writes in `$HOME` (its
/// adapter's data), besides what its environment names.
fn state_dirs(provider: ProviderId) -> &'static [&'static str] {
    crate::provider::adapter(provider).map_or(&[], |a| a.state_dirs)
}

/// CLIs that confine a read-only run themselves with the kernel (codex:
/// bubblewrap and Landlock). Their sandbox needs to remount, which a
/// Landlock domain that handles file access forbids, so caesar leaves their
/// writes to them and keeps only the domain's scopes.
pub fn has_own_sandbox(provider: ProviderId) -> bool {
    crate::provider::adapter(provider).is_some_and(|a| a.own_sandbox)
}

/// [`describe`] for one task's agent.
pub fn describe_for(read_only: bool, provider: ProviderId) -> String {
    // A CLI with a sandbox of its own keeps its read-only mode itself:
    // caesar adds no write rules of its own, so the write-mode rules are not
    // what holds it (issue 30: they were shown under read-only).
    if read_only && has_own_sandbox(provider) && kernel_abi().is_some() {
        let writes = format!("writes confined by {provider}'s own read-only sandbox (the workspace is read-only)");
        return format!(
            "{}; {}; {}",
            describe_kernel_writes(&writes),
            describe_reads(),
            pid_ns::describe_without(provider)
        );
    }
    describe(read_only)
}

/// The files and directories beneath a CLI's writable state that hold code
/// or configuration it runs or obeys later (issue 29: a read-only claude
/// wrote a `SessionStart` hook into `~/.claude/settings.json`), from its
/// adapter: relative to the state directory its environment names, or to
/// `$HOME`.
fn config_files(provider: ProviderId) -> (Option<&'static str>, &'static [&'static str]) {
    crate::provider::adapter(provider).map_or((None, &[]), |spec| (spec.config_env, spec.config_files))
}

/// Package caches shared with the user, beneath `$HOME`: read-only to a
/// task (issue 29: a task could poison them for the user's next build).
/// The task gets caches of its own instead ([`task_caches`]).
const SHARED_CACHES: &[&str] = &[".npm", ".cache/pip", ".cache/go-build", ".cache/yarn", ".cache/uv", ".cache/pnpm"];

/// The task's own package caches beneath `root` (its task directory), as
/// the variables the package managers read.
pub fn task_caches(root: &Path) -> Vec<(String, String)> {
    let at = |d: &str| root.join("cache").join(d).display().to_string();
    vec![
        ("npm_config_cache".to_owned(), at("npm")),
        ("PIP_CACHE_DIR".to_owned(), at("pip")),
        ("GOCACHE".to_owned(), at("go-build")),
        ("YARN_CACHE_FOLDER".to_owned(), at("yarn")),
        ("UV_CACHE_DIR".to_owned(), at("uv")),
    ]
}

/// What stays read-only to a task of `provider` beneath its writable state
/// ([`SandboxSpec::readonly`]): its CLI's configuration files and the
/// shared package caches.
pub fn cli_config_files(provider: ProviderId, env: &[(String, String)]) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let mut out = Vec::new();
    let (var, files) = config_files(provider);
    let named = var.and_then(|name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok())
    });
    for f in files {
        match named.as_deref().map(PathBuf::from).filter(|d| d.is_absolute()) {
            // `.claude/settings.json` is `settings.json` in `$CLAUDE_CONFIG_DIR`.
            Some(dir) => out.push(dir.join(f.split_once('/').map_or(*f, |(_, rest)| rest))),
            None => out.extend(home.as_ref().map(|h| h.join(f))),
        }
    }
    out.extend(home.iter().flat_map(|h| SHARED_CACHES.iter().map(|c| h.join(c))));
    out
}

/// Variables naming a CLI's state directory, honoured where set.
const STATE_ENV: &[&str] = &["CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "XDG_CACHE_HOME", "TMPDIR"];

/// The spec of a task: `read_only` confines writes to the task directory,
/// temp, `/dev`, `$HOME/.cache`, `$HOME/.npm` and `provider`'s state.
/// `env` is the agent's environment as the daemon adds it.
pub fn for_task(
    read_only: bool,
    task_dir: &Path,
    workspace: &Path,
    provider: ProviderId,
    env: &[(String, String)],
) -> SandboxSpec {
    if !read_only || has_own_sandbox(provider) {
        return SandboxSpec::default();
    }
    // `/proc`: a CLI's own sandbox maps its user namespace
    // (`/proc/self/uid_map`); another process's files there need ptrace
    // rights, which the domain refuses.
    let mut writable = vec![
        task_dir.to_path_buf(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev"),
        PathBuf::from("/proc"),
    ];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) {
        for d in [".cache", ".npm"].iter().chain(state_dirs(provider)) {
            writable.push(home.join(d));
        }
    }
    for name in STATE_ENV {
        let value = env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok());
        if let Some(v) = value.filter(|v| Path::new(v).is_absolute()) {
            writable.push(PathBuf::from(v));
        }
    }
    SandboxSpec { confine_writes: true, writable, protect: vec![workspace.to_path_buf()], ..SandboxSpec::default() }
}

/// The spec of a write task (issue 19): writes confined to `workdir` (its
/// worktree, or the workspace in place), the task directory, temp, `/dev`,
/// `$HOME/.cache`, `$HOME/.npm` and the CLI's state. A worktree's own git
/// directory (which borrows the main repository's objects) stays writable
/// so that git works in it; nothing of the main repository's git directory
/// is (issue 29). `shield` (caesar's state, config and socket directories; the main
/// tree of a worktree task) is carved out of every writable ancestor.
pub fn for_write_task(
    task_dir: &Path,
    workdir: &Path,
    shield: &[PathBuf],
    provider: ProviderId,
    env: &[(String, String)],
) -> SandboxSpec {
    if has_own_sandbox(provider) {
        return SandboxSpec::default();
    }
    let mut spec = for_task(true, task_dir, workdir, ProviderId::Generic, env);
    spec.protect.clear();
    spec.writable.extend(state_paths(provider));
    spec.writable.push(workdir.to_path_buf());
    spec.writable.extend(worktree_git_dir(workdir));
    spec.shield = shield.to_vec();
    spec
}

/// What an agent's mount namespace re-exposes beneath caesar's hidden
/// directories ([`mount::dirs`] keeps what lies beneath one): its task
/// directory, the main socket's directory (its return channel), its
/// workdir (a read-only task's workspace; a worktree and the main
/// repository's git directory it needs), and the state directories its
/// environment names.
pub fn exposed(
    task_dir: &Path,
    workdir: &Path,
    workspace: &Path,
    socket: &Path,
    env: &[(String, String)],
) -> Vec<PathBuf> {
    let mut out = vec![task_dir.to_path_buf(), workdir.to_path_buf()];
    out.extend(socket.parent().map(Path::to_path_buf));
    if workdir == workspace {
        out.push(workspace.to_path_buf());
    }
    if let Some(git_dir) = worktree_git_dir(workdir) {
        // The worktree's git directory, and the objects it borrows.
        out.extend(borrowed_objects(&git_dir));
        out.push(git_dir);
    }
    for name in STATE_ENV {
        let value = env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok());
        if let Some(v) = value.filter(|v| Path::new(v).is_absolute()) {
            out.push(PathBuf::from(v));
        }
    }
    out
}

/// A provider's state directories under `$HOME`.
fn state_paths(provider: ProviderId) -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) else {
        return Vec::new();
    };
    state_dirs(provider).iter().map(|d| home.join(d)).collect()
}

/// For a worktree whose `.git` is a file naming `gitdir: …`: that git
/// directory (a worktree task's own, made by the daemon before the agent
/// runs).
fn worktree_git_dir(workdir: &Path) -> Option<PathBuf> {
    let text = crate::safe_fs::read_to_string_capped(&workdir.join(".git"), 4096).ok()?;
    Some(PathBuf::from(text.strip_prefix("gitdir:")?.trim())).filter(|g| g.is_absolute())
}

/// The object store a git directory borrows (its `objects/info/alternates`).
fn borrowed_objects(git_dir: &Path) -> Option<PathBuf> {
    let text = crate::safe_fs::read_to_string_capped(&git_dir.join("objects/info/alternates"), 4096).ok()?;
    Some(PathBuf::from(text.lines().next()?.trim())).filter(|o| o.is_absolute())
}

/// The trees `spec` keeps every write out of, whatever process of the box
/// makes it: its protected paths, where writes are confined and the kernel
/// enforces every write access (Landlock ABI 3, which handles truncation),
/// but those beneath caesar's hidden directories, which the box binds back
/// rather than carves. A writable path inside one is dropped
/// ([`carve_all`], `mount_carve::plan`) and one around it is carved. An
/// inplace snapshot of a repository beneath one of these needs no git to
/// say that the task changed nothing (`workshop::prepare`). Empty where
/// the kernel cannot say so (no Landlock, an older ABI, a CLI's own
/// sandbox, a write task).
pub fn unwritable(spec: &SandboxSpec) -> Vec<PathBuf> {
    unwritable_under(spec, kernel_abi())
}

fn unwritable_under(spec: &SandboxSpec, abi: Option<i32>) -> Vec<PathBuf> {
    if !spec.confine_writes || abi.is_none_or(|v| v < 3) {
        return Vec::new();
    }
    spec.protect.iter().filter(|p| !spec.hide.iter().any(|h| p.starts_with(h))).cloned().collect()
}

/// The writable paths with every protected path carved out: a writable
/// ancestor of a protected path becomes the entries beside it, level by
/// level (symbolic links skipped: a rule through one would reach its
/// target). Entries made later directly in those ancestors are refused.
pub fn carve(writable: &[PathBuf], protect: &[PathBuf]) -> Vec<PathBuf> {
    carve_all(writable, protect, &[])
}

/// [`carve`] with `shield` paths too: carved out of their writable
/// ancestors like protected ones, but a writable path named inside a
/// shielded one is kept.
pub fn carve_all(writable: &[PathBuf], protect: &[PathBuf], shield: &[PathBuf]) -> Vec<PathBuf> {
    let hidden: Vec<&PathBuf> = protect.iter().chain(shield).collect();
    let mut out = Vec::new();
    for w in writable {
        if protect.iter().any(|p| w.starts_with(p)) {
            continue;
        }
        carve_dir(w, &hidden, &mut out);
    }
    out
}

/// Pushes `w`, or, where a hidden path lies strictly beneath it, the
/// entries of `w` around it, level by level (links skipped).
fn carve_dir(w: &Path, hidden: &[&PathBuf], out: &mut Vec<PathBuf>) {
    if !hidden.iter().any(|h| h.starts_with(w) && h.as_path() != w) {
        out.push(w.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(w) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_symlink()) || hidden.iter().any(|h| h.as_path() == path) {
            continue;
        }
        carve_dir(&path, hidden, out);
    }
}

/// A ruleset ready for the agent, built by the supervisor before it forks.
pub struct Prepared {
    #[cfg(target_os = "linux")]
    fd: Option<std::os::fd::OwnedFd>,
    /// The agent's mount namespace, where it gets one.
    #[cfg(target_os = "linux")]
    mounts: Option<mount::Plan>,
}

/// Builds the ruleset of `spec`. `None` where the kernel has no Landlock.
#[cfg(target_os = "linux")]
pub fn prepare(spec: &SandboxSpec) -> Result<Option<Prepared>, String> {
    use landlock::{
        ABI, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    let mut mounts = mount::Plan::new(&spec.hide, &spec.expose, &spec.readonly)?;
    let Some(abi) = kernel_abi() else { return Ok(mounts.map(|m| Prepared { fd: None, mounts: Some(m) })) };
    let e = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    if spec.confine_writes {
        ruleset = ruleset.handle_access(AccessFs::from_write(ABI::V3)).map_err(e)?;
    }
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket).map_err(e)?;
    } else if !spec.confine_writes {
        // Before ABI 6 only file access makes a domain, and a domain that
        // handles it forbids remounting (which a CLI's own sandbox does):
        // nothing to apply.
        return Ok(mounts.map(|m| Prepared { fd: None, mounts: Some(m) }));
    }
    let mut created = ruleset.create().map_err(e)?;
    if spec.confine_writes {
        make_home_dirs(&spec.writable);
        // Without a mount namespace the read-only paths are carved out of
        // the writable ones; with one they are bound read-only there.
        let mut shield = spec.shield.clone();
        if spec.hide.is_empty() {
            shield.extend(spec.readonly.iter().cloned());
        }
        // In a mount namespace the carving is made of mounts, whatever the
        // number of entries beside what is carved out (issue 33: a rule per
        // entry of `/tmp` at every box's start); else of Landlock rules.
        let by_mounts = mounts.as_mut().and_then(|m| m.carve_writes(&spec.writable, &spec.protect, &shield));
        let writable = by_mounts.unwrap_or_else(|| carve_all(&spec.writable, &spec.protect, &shield));
        created = created.add_rules(path_beneath_rules(&writable, AccessFs::from_write(ABI::V3))).map_err(e)?;
    }
    let fd: Option<std::os::fd::OwnedFd> = created.into();
    Ok(Some(Prepared { fd, mounts }))
}

/// A rule needs its directory to exist: the state directories under
/// `$HOME` that a CLI would make on its first run are made now (a file such
/// as `.claude.json` is left to the CLI).
#[cfg(target_os = "linux")]
fn make_home_dirs(writable: &[PathBuf]) {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) else { return };
    for w in writable {
        let is_file = w.extension().is_some_and(|x| x == "json" || x == "backup");
        if w.starts_with(&home) && w != &home && !is_file && !w.exists() {
            let _ = std::fs::create_dir_all(w);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn prepare(_spec: &SandboxSpec) -> Result<Option<Prepared>, String> {
    Ok(None)
}

impl Prepared {
    /// In the agent, between fork and exec: its mount namespace, then the
    /// Landlock ruleset (a domain forbids mounting). Only system calls.
    pub fn in_child(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            if let Some(m) = &self.mounts {
                m.apply()?;
            }
            restrict_in_child(self.fd.as_ref().map_or(-1, |f| f.as_raw_fd()))
        }
        #[cfg(not(target_os = "linux"))]
        Ok(())
    }
}

/// In the agent, between fork and exec: no new privileges, then the
/// ruleset. Only system calls (async-signal-safe).
pub fn restrict_in_child(fd: i32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        if fd < 0 {
            return Ok(());
        }
        // SAFETY: plain system calls on integers and an fd this process
        // holds; no memory is touched.
        unsafe {
            if nix::libc::prctl(nix::libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if nix::libc::syscall(nix::libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
    Ok(())
}

/// Writes `bytes` to `path` with plain system calls (between fork and exec).
#[cfg(target_os = "linux")]
pub(crate) unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: a NUL-terminated path and a buffer with its length.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 30: `caesar agents describe codex` showed the write mode's
    /// protections (its worktree) under read-only.
    #[test]
    fn a_cli_with_its_own_sandbox_is_described_read_only_under_read_only() {
        let read_only = describe_for(true, ProviderId::Codex);
        let write = describe_for(false, ProviderId::Codex);
        if kernel_abi().is_none() {
            assert_eq!(read_only, describe(true));
            return;
        }
        assert!(!read_only.contains("writes confined to its worktree"), "{read_only}");
        assert!(read_only.contains("writes confined by codex's own read-only sandbox"), "{read_only}");
        assert!(write.contains("writes confined to its worktree"), "{write}");
        assert_eq!(describe_for(true, ProviderId::Claude), describe(true));
    }

    /// Defect of issue 28: the table keyed cursor-agent's state on `cursor`,
    /// which is no provider id, so its CLI could not write its own state.
    #[test]
    fn every_native_provider_with_a_state_directory_gets_it_writable() {
        assert_eq!(state_dirs(ProviderId::CursorAgent), [".cursor", ".config/cursor"]);
        for p in [ProviderId::Claude, ProviderId::Codex, ProviderId::Gemini, ProviderId::CursorAgent] {
            assert!(!state_dirs(p).is_empty(), "{p}");
        }
        assert!(state_dirs(ProviderId::Generic).is_empty());
    }

    /// Issue 29: the CLI's settings, hooks and MCP files and the shared
    /// package caches are named read-only, in the directory its environment
    /// names when it names one.
    #[test]
    fn a_clis_configuration_is_named_read_only() {
        let env = [("CLAUDE_CONFIG_DIR".to_owned(), "/cfg/claude".to_owned())];
        let ro = cli_config_files(ProviderId::Claude, &env);
        assert!(ro.contains(&PathBuf::from("/cfg/claude/settings.json")), "{ro:?}");
        assert!(ro.contains(&PathBuf::from("/cfg/claude/hooks")), "{ro:?}");
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()) {
            assert!(ro.contains(&home.join(".npm")), "{ro:?}");
            let codex = cli_config_files(ProviderId::Codex, &[]);
            assert!(codex.iter().any(|p| p.ends_with("config.toml")), "{codex:?}");
        }
        assert!(task_caches(Path::new("/t")).iter().any(|(k, v)| k == "npm_config_cache" && v == "/t/cache/npm"));
    }

    #[test]
    fn a_read_only_spec_leaves_the_workspace_out() {
        let spec = for_task(
            true,
            Path::new("/state/tasks/t_1"),
            Path::new("/w"),
            crate::launch::ProviderId::of("claude"),
            &[],
        );
        assert!(spec.confine_writes);
        assert!(spec.writable.contains(&PathBuf::from("/state/tasks/t_1")));
        assert!(spec.writable.iter().any(|p| p.ends_with(".claude")));
        assert!(
            !for_task(false, Path::new("/x"), Path::new("/w"), crate::launch::ProviderId::of("claude"), &[])
                .confine_writes
        );
        assert!(describe(true).contains("landlock") || describe(true).starts_with("none"));
    }

    /// Issue 33: an inplace read-only task's snapshots are skipped only
    /// where the kernel keeps its writes out of the tree.
    #[test]
    fn only_a_kernel_confined_read_only_box_names_unwritable_trees() {
        let generic = ProviderId::Generic;
        let mut spec = for_task(true, Path::new("/state/tasks/t_1"), Path::new("/w/sub"), generic, &[]);
        spec.protect.push(PathBuf::from("/w"));
        assert_eq!(unwritable_under(&spec, Some(6)), vec![PathBuf::from("/w/sub"), PathBuf::from("/w")]);
        assert_eq!(unwritable_under(&spec, Some(3)).len(), 2);
        // ABI 1 and 2 leave truncation unhandled; no Landlock, nothing.
        assert!(unwritable_under(&spec, Some(2)).is_empty());
        assert!(unwritable_under(&spec, None).is_empty());
        // A tree beneath caesar's hidden directories is bound back, not carved.
        spec.hide = vec![PathBuf::from("/w")];
        assert!(unwritable_under(&spec, Some(6)).is_empty());
        // A CLI with its own sandbox, and a write task: the kernel does not say.
        let own = for_task(true, Path::new("/t"), Path::new("/w"), ProviderId::Codex, &[]);
        assert!(unwritable_under(&own, Some(6)).is_empty());
        let write = for_write_task(Path::new("/t"), Path::new("/w"), &[], generic, &[]);
        assert!(unwritable_under(&write, Some(6)).is_empty());
    }

    #[test]
    fn a_protected_path_is_carved_out_of_its_writable_ancestor() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().to_path_buf();
        for p in ["a/ws", "a/other", "b"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        std::os::unix::fs::symlink(root.join("a/ws"), root.join("a/link")).unwrap();
        let mut got = carve(&[root.clone(), PathBuf::from("/nonexistent-elsewhere")], &[root.join("a/ws")]);
        got.sort();
        assert_eq!(got, vec![PathBuf::from("/nonexistent-elsewhere"), root.join("a/other"), root.join("b")]);
        // A writable path inside the protected one is dropped.
        assert!(carve(&[root.join("a/ws/sub")], &[root.join("a/ws")]).is_empty());
    }
}

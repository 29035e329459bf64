//! Configuration, read and merged the way caesar reads it.
//!
//! Three TOML layers, most general first: global (`<config_dir>/config.toml`),
//! project (`<project>/.caesar/config.toml`) and local
//! (`<project>/.caesar/config.local.toml`). On top of the defaults:
//!
//! - `[policy]` and `[worktree]` merge field by field; a list replaces the
//!   inherited list whole (so a layer can remove an inherited entry).
//! - `[[role]]` merges by `name`, `[[agent]]` by `id`: a later entry replaces
//!   an earlier one whole.
//! - `[models]` (agent id to default model) and `[bin]` (provider id to
//!   executable) merge by key.
//!
//! Every effective value knows the layer it came from ([`Config::provenance`]).
//! A file that does not parse, or holds a value that cannot work, is refused
//! at load time with its path, line and the key to fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::launch::WorktreeSection;
use crate::oacp::Mode;

mod gate;
mod roles;
pub use gate::UntrustedLayer;
pub use roles::builtin_roles;

/// An OACP generic agent declared with `[[agent]]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    pub id: String,
    /// The executable: a path, or a name looked up on PATH.
    pub bin: String,
    /// The argument template; see [`crate::agents::expand_args`].
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// caesar's `process` (run in the workspace) or `flag` (the template
    /// passes `{{workspace}}`); both run in the workspace here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd_mode: Option<String>,
    /// The agent enforces read-only mode itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_read_only: Option<bool>,
    /// Arguments that cut the agent's network, appended when network is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_args: Option<Vec<String>>,
    /// Extra environment variables for the agent (a caesar-rs extension).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// How caesar talks to it: `stream` (absent: OACP event lines on stdout) or `acp` (an ACP
    /// agent on stdio, driven through caesar's ACP session driver; issue 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// How a `stream` agent takes its prompt (issue 19): `argv` (absent: where `{{prompt}}`
    /// stands in `args`) or `stdin` (written on its stdin, then end of file; nothing in argv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_input: Option<String>,
}

impl AgentDef {
    /// Whether the agent speaks ACP (`protocol = "acp"`).
    pub fn speaks_acp(&self) -> bool {
        self.protocol.as_deref() == Some("acp")
    }

    /// Whether the agent reads its prompt on stdin (`prompt_input = "stdin"`).
    pub fn prompt_on_stdin(&self) -> bool {
        self.prompt_input.as_deref() == Some("stdin")
    }
}

pub use caesar_proto::kinds::{IsolationPref, NetworkPref};

/// A duration in TOML: `"10m"`, `"90s"`, `"1h"`, or an integer of milliseconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum DurationValue {
    Millis(u64),
    Text(String),
}

impl DurationValue {
    fn ms(&self) -> std::result::Result<u64, String> {
        match self {
            DurationValue::Millis(ms) => Ok(*ms),
            DurationValue::Text(t) => caesar_proto::duration::parse_ms(t),
        }
    }
}

/// `[policy]`: who may be delegated to, and the defaults of a delegation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    pub allowed: Vec<String>,
    pub denied: Vec<String>,
    pub max_parallel: u32,
    pub default_isolation: IsolationPref,
    pub default_mode: Mode,
    pub default_network: NetworkPref,
    pub default_timeout_ms: u64,
    pub allow_recursion: bool,
    pub allow_inplace_write: bool,
    pub max_depth: u32,
    /// Directories (absolute) a delegation from inside a task may name as
    /// its workspace beside its parent's repository (issue 29): none by
    /// default, and only the user's own config can name one.
    pub nested_workspaces: Vec<String>,
    /// Limits on each task's box (issue 29): `memory.max` in MiB, `pids.max`
    /// and `cpu.weight` of its cgroup; `None` for the kernel's default.
    pub box_memory_max_mb: Option<u64>,
    pub box_pids_max: Option<u64>,
    pub box_cpu_weight: Option<u32>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            allowed: Vec::new(),
            denied: Vec::new(),
            max_parallel: 4,
            default_isolation: IsolationPref::Auto,
            // A task nobody gave a mode reads and changes nothing (issue 30):
            // writing, a worktree and a branch are asked for, never assumed.
            default_mode: Mode::ReadOnly,
            default_network: NetworkPref::Auto,
            default_timeout_ms: 10 * 60 * 1000,
            allow_recursion: false,
            allow_inplace_write: false,
            max_depth: 2,
            nested_workspaces: Vec::new(),
            box_memory_max_mb: None,
            box_pids_max: None,
            box_cpu_weight: None,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    allowed: Option<Vec<String>>,
    denied: Option<Vec<String>>,
    max_parallel: Option<u32>,
    default_isolation: Option<IsolationPref>,
    default_mode: Option<Mode>,
    default_network: Option<NetworkPref>,
    default_timeout: Option<DurationValue>,
    allow_recursion: Option<bool>,
    allow_inplace_write: Option<bool>,
    max_depth: Option<u32>,
    nested_workspaces: Option<Vec<String>>,
    box_memory_max_mb: Option<u64>,
    box_pids_max: Option<u64>,
    box_cpu_weight: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorktree {
    copy: Option<Vec<String>>,
    link: Option<Vec<String>>,
    setup: Option<Vec<String>>,
}

/// A role: a purpose, defaults, and a fallback chain of agents.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Role {
    pub name: String,
    pub purpose: String,
    /// Candidate agents, first choice first.
    pub agents: Vec<String>,
    pub mode: Mode,
    pub isolation: IsolationPref,
    pub network: NetworkPref,
    pub timeout_ms: u64,
    /// The model the role asks for, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Relative to `<project>/.caesar/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt_file: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRole {
    name: String,
    #[serde(default)]
    purpose: String,
    agents: Vec<String>,
    mode: Mode,
    #[serde(default = "auto_isolation")]
    isolation: IsolationPref,
    #[serde(default = "auto_network")]
    network: NetworkPref,
    timeout: Option<DurationValue>,
    model: Option<String>,
    system_prompt_file: Option<String>,
    /// Issue 17: the role's limits and blocker policy.
    budget: Option<crate::lifecycle::RawBudget>,
    on_blocker: Option<String>,
    /// Commands run in the worktree after the agent ends (issue 17).
    verify: Option<Vec<String>>,
    /// Where the role's tasks run (issue 16), over `[runner] kind`.
    runner: Option<crate::launch::runner::RunnerKind>,
}

fn auto_isolation() -> IsolationPref {
    IsolationPref::Auto
}

fn auto_network() -> NetworkPref {
    NetworkPref::Auto
}

/// One parsed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Layer {
    policy: Option<RawPolicy>,
    worktree: Option<RawWorktree>,
    role: Option<Vec<RawRole>>,
    agent: Option<Vec<AgentDef>>,
    /// Default model per agent id.
    models: Option<BTreeMap<String, String>>,
    /// Executables of the native providers: `claude = "/opt/tools/claude"`.
    bin: Option<BTreeMap<String, String>>,
    /// MCP over HTTP, served by the daemon (read from the global layer).
    http: Option<RawHttp>,
    /// `[runner]`: local or Kubernetes (issue 16).
    runner: Option<crate::launch::runner::RawRunner>,
    /// Default limits of every task (issue 17).
    budget: Option<crate::lifecycle::RawBudget>,
    /// Webhooks and a command hook on task events (issue 17).
    notify: Option<crate::notify::RawNotify>,
    /// `[quota.<agent>]`: the limits observed usage is held against (issue 32).
    quota: Option<BTreeMap<String, crate::quota_observed::RawLimit>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Option<String>,
    rate_limit_per_minute: Option<u32>,
}

/// `[http]`: MCP over streamable HTTP on loopback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HttpSection {
    /// `127.0.0.1:7077`; loopback only.
    pub listen: String,
    /// Requests a minute per token (default 120); 0 for no limit.
    pub rate_limit_per_minute: u32,
}

/// Which layer a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Default,
    Global,
    Project,
    Local,
}

impl Origin {
    /// The name shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Default => "default",
            Origin::Global => "global",
            Origin::Project => "project",
            Origin::Local => "local",
        }
    }
}

/// The effective configuration for one project.
#[derive(Debug, Clone)]
pub struct Config {
    pub policy: Policy,
    pub worktree: WorktreeSection,
    /// Roles, built-in ones first, with the layer each came from.
    pub roles: Vec<(Role, Origin)>,
    /// Generic agents, in declaration order, with the layer each came from.
    pub agents: Vec<(AgentDef, Origin)>,
    /// `[models]`: agent id to default model, merged by key.
    pub models: BTreeMap<String, (String, Origin)>,
    /// `[bin]`: provider id to executable, merged by key.
    pub bin: BTreeMap<String, (String, Origin)>,
    /// `[http]`, when MCP over HTTP is enabled.
    pub http: Option<HttpSection>,
    /// Each role's `verify` commands, by role name (a role redefined in a
    /// later layer takes its own, or none).
    pub role_verify: BTreeMap<String, Vec<String>>,
    /// Each role's `runner`, by role name (issue 16; a role redefined in a
    /// later layer takes its own, or none).
    pub role_runner: BTreeMap<String, crate::launch::runner::RunnerKind>,
    /// `[notify]`: webhooks and a command hook (read from the global layer).
    pub notify: crate::notify::NotifyConfig,
    /// Where each `policy.*` and `worktree.*` field came from; absent means default.
    pub provenance: BTreeMap<String, Origin>,
    /// The files that were read.
    pub files: Vec<PathBuf>,
    /// `[runner]`, merged key by key.
    pub runner: crate::launch::runner::RunnerConfig,
    /// `[budget]`: limits of every task, merged field by field (issue 17).
    pub budget: crate::lifecycle::Limits,
    /// Each role's `budget` and `on_blocker`, by role name (issue 17).
    pub role_lifecycle: BTreeMap<String, crate::lifecycle::RoleLifecycle>,
    /// Project and local layers read without the user's trust, and what of
    /// each was ignored (issue 19; `crate::trust`).
    pub untrusted: Vec<UntrustedLayer>,
    /// `[quota.<agent>]`, by agent id, a later layer's table replacing an
    /// earlier one's (issue 32, `crate::quota_observed`).
    pub quota: BTreeMap<String, crate::quota_observed::Limit>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            policy: Policy::default(),
            worktree: WorktreeSection::default(),
            roles: builtin_roles().into_iter().map(|r| (r, Origin::Default)).collect(),
            agents: Vec::new(),
            models: BTreeMap::new(),
            bin: BTreeMap::new(),
            http: None,
            role_verify: BTreeMap::new(),
            role_runner: BTreeMap::new(),
            notify: Default::default(),
            provenance: BTreeMap::new(),
            files: Vec::new(),
            runner: Default::default(),
            budget: Default::default(),
            role_lifecycle: BTreeMap::new(),
            untrusted: Vec::new(),
            quota: BTreeMap::new(),
        }
    }
}

/// The three layer files for a project, most general first.
pub fn layer_paths(global_dir: &Path, project: &Path) -> [(PathBuf, Origin); 3] {
    [
        (global_dir.join("config.toml"), Origin::Global),
        (project.join(".caesar").join("config.toml"), Origin::Project),
        (project.join(".caesar").join("config.local.toml"), Origin::Local),
    ]
}

/// A relative `bin` path (one with a separator, `./x` or `tools/x`) is the
/// config file's, not the daemon's working directory's (issue 19); a bare
/// name stays a PATH lookup.
fn anchor_bin(config_file: &Path, bin: String) -> String {
    let p = Path::new(&bin);
    match config_file.parent() {
        Some(dir) if !p.is_absolute() && p.components().count() > 1 => dir.join(p).display().to_string(),
        _ => bin,
    }
}

impl Config {
    /// Loads and merges the three layers for `project` over the defaults,
    /// trusting every layer (for tools that only read or edit files; the
    /// engine loads through [`Config::load_gated`]).
    pub fn load(global_dir: &Path, project: &Path) -> Result<Config> {
        Config::load_inner(global_dir, project, None)
    }

    /// As [`Config::load`], but a project or local layer that `gate` does
    /// not trust loses what could run code or widen policy (issue 19).
    pub fn load_gated(global_dir: &Path, project: &Path, gate: &dyn crate::trust::Gate) -> Result<Config> {
        Config::load_inner(global_dir, project, Some(gate))
    }

    fn load_inner(global_dir: &Path, project: &Path, trust: Option<&dyn crate::trust::Gate>) -> Result<Config> {
        let mut config = Config::default();
        for (path, origin) in layer_paths(global_dir, project) {
            // A project's layers come from its repository: a committed link
            // to /dev/zero or a FIFO must not hang or exhaust the daemon.
            // The global layer is the user's own and may be a link (dotfile
            // managers make them), so only it is followed.
            // `.caesar` itself is the repository's too, so it is not followed
            // either: the layer is opened beneath the project directory.
            let read = match (origin, path.strip_prefix(project)) {
                (Origin::Global, _) | (_, Err(_)) => {
                    crate::safe_fs::read_following_to_string(&path, crate::safe_fs::CONFIG_CAP)
                }
                (_, Ok(rel)) => crate::safe_fs::read_beneath_to_string(project, rel, crate::safe_fs::CONFIG_CAP),
            };
            let text = match read {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io_at("cannot read", &path, e)),
            };
            let mut layer = parse_layer(&path, &text)?;
            if let Some(g) = trust
                && origin != Origin::Global
                && !g.trusts(&path, &text)
            {
                let ignored = gate::strip(&mut layer, &config);
                if !ignored.is_empty() {
                    config.untrusted.push(UntrustedLayer {
                        file: path.clone(),
                        project: project.to_path_buf(),
                        ignored,
                    });
                }
            }
            config.merge(&path, &text, layer, origin)?;
            config.files.push(path);
        }
        crate::quota_observed::check_agents(&config.quota, |a| {
            crate::launch::ProviderId::native(a).is_some() || config.agent(a).is_some()
        })
        .map_err(|(key, why)| Error::Invalid(format!("`{key}` {why} (in {})", config.files_shown())))?;
        Ok(config)
    }

    /// Loads only the global layer (no project).
    pub fn load_global(global_dir: &Path) -> Result<Config> {
        Config::load(global_dir, Path::new("/nonexistent/caesar-no-project"))
    }

    /// Merges one parsed layer over what the layers before it set, section
    /// by section (a later layer wins key by key), after checking each value.
    fn merge(&mut self, path: &Path, text: &str, layer: Layer, origin: Origin) -> Result<()> {
        let src = LayerSource { path, text, origin };
        if let Some(p) = layer.policy {
            self.merge_policy(&src, p)?;
        }
        if let Some(w) = layer.worktree {
            self.merge_worktree(&src, w)?;
        }
        for raw in layer.role.unwrap_or_default() {
            self.merge_role(&src, raw)?;
        }
        for agent in layer.agent.unwrap_or_default() {
            self.merge_agent(&src, agent)?;
        }
        for (id, model) in layer.models.unwrap_or_default() {
            if model.trim().is_empty() {
                return Err(src.bad(&id, "in [models] is empty: remove the key or name a model".to_owned()));
            }
            self.models.insert(id, (model, origin));
        }
        if let Some(h) = layer.http {
            self.merge_http(&src, h)?;
        }
        if let Some(b) = &layer.budget {
            let limits = b.limits("[budget]").map_err(|e| src.bad("budget", e))?;
            self.budget = limits.over(self.budget);
        }
        if let Some(n) = layer.notify {
            if origin != Origin::Global {
                return Err(src.bad(
                    "notify",
                    "is read only from the global config (a repository's config must not post your tasks anywhere or run commands): move [notify] to the global config.toml".to_owned(),
                ));
            }
            self.notify.merge(n).map_err(|(key, why)| src.bad(key, why))?;
        }
        for (id, bin) in layer.bin.unwrap_or_default() {
            if bin.trim().is_empty() {
                return Err(src.bad(&id, "in [bin] is empty: give the executable's path, or remove the key".to_owned()));
            }
            self.bin.insert(id, (anchor_bin(path, bin), origin));
        }
        if let Some(r) = layer.runner {
            self.runner.merge(r).map_err(|(key, why)| src.bad(&key, why))?;
        }
        for (agent, raw) in layer.quota.unwrap_or_default() {
            let limit = crate::quota_observed::limit_of(&agent, &raw).map_err(|(key, why)| src.bad(&key, why))?;
            self.quota.insert(agent, limit);
        }
        Ok(())
    }

    /// `[policy]`: each key the layer sets replaces the value before it and
    /// records the layer as its origin.
    fn merge_policy(&mut self, src: &LayerSource, p: RawPolicy) -> Result<()> {
        let mut set = |field: &str| {
            self.provenance.insert(format!("policy.{field}"), src.origin);
        };
        if let Some(v) = p.allowed {
            self.policy.allowed = v;
            set("allowed");
        }
        if let Some(v) = p.denied {
            self.policy.denied = v;
            set("denied");
        }
        if let Some(v) = p.max_parallel {
            if v == 0 {
                return Err(src.bad("max_parallel", "must be at least 1".to_owned()));
            }
            self.policy.max_parallel = v;
            set("max_parallel");
        }
        if let Some(v) = p.default_isolation {
            self.policy.default_isolation = v;
            set("default_isolation");
        }
        if let Some(v) = p.default_mode {
            self.policy.default_mode = v;
            set("default_mode");
        }
        if let Some(v) = p.default_network {
            self.policy.default_network = v;
            set("default_network");
        }
        if let Some(v) = p.default_timeout {
            self.policy.default_timeout_ms = v.ms().map_err(|e| src.bad("default_timeout", e))?;
            set("default_timeout");
        }
        if let Some(v) = p.allow_recursion {
            self.policy.allow_recursion = v;
            set("allow_recursion");
        }
        if let Some(v) = p.allow_inplace_write {
            self.policy.allow_inplace_write = v;
            set("allow_inplace_write");
        }
        if let Some(v) = p.max_depth {
            self.policy.max_depth = v;
            set("max_depth");
        }
        if let Some(v) = p.nested_workspaces {
            if let Some(bad) = v.iter().find(|d| !Path::new(d).is_absolute()) {
                return Err(src.bad(
                    "nested_workspaces",
                    format!("names `{bad}`, which is not an absolute path: name each directory by its absolute path"),
                ));
            }
            self.policy.nested_workspaces = v;
            set("nested_workspaces");
        }
        // The box's limits (issue 29), each in a range the kernel takes and
        // a task can live in.
        let (memory, pids, cpu) = (p.box_memory_max_mb, p.box_pids_max, p.box_cpu_weight);
        for (key, value, min, max, what) in [
            ("box_memory_max_mb", memory, 16, 1 << 30, "a task's memory in MiB"),
            ("box_pids_max", pids, 16, 1 << 22, "a task's processes and threads"),
            ("box_cpu_weight", cpu.map(u64::from), 1, 10_000, "the kernel's cpu.weight"),
        ] {
            let Some(v) = value else { continue };
            if !(min..=max).contains(&v) {
                return Err(src.bad(key, format!("is {v}: give {what}, from {min} to {max}")));
            }
            set(key);
        }
        self.policy.box_memory_max_mb = memory.or(self.policy.box_memory_max_mb);
        self.policy.box_pids_max = pids.or(self.policy.box_pids_max);
        self.policy.box_cpu_weight = cpu.or(self.policy.box_cpu_weight);
        Ok(())
    }

    /// `[worktree]`: the files copied and linked into a task's worktree
    /// (each a safe relative path) and its setup commands (none empty).
    fn merge_worktree(&mut self, src: &LayerSource, w: RawWorktree) -> Result<()> {
        for (key, list) in [("copy", &w.copy), ("link", &w.link)] {
            for entry in list.iter().flatten() {
                check_worktree_path(entry).map_err(|why| src.bad(key, format!("entry `{entry}` {why}")))?;
            }
        }
        if let Some(v) = w.copy {
            self.worktree.copy = v;
            self.provenance.insert("worktree.copy".to_owned(), src.origin);
        }
        if let Some(v) = w.link {
            self.worktree.link = v;
            self.provenance.insert("worktree.link".to_owned(), src.origin);
        }
        if let Some(v) = w.setup {
            if v.iter().any(|c| c.trim().is_empty()) {
                return Err(src.bad("setup", "holds an empty command: remove it".to_owned()));
            }
            self.worktree.setup = v;
            self.provenance.insert("worktree.setup".to_owned(), src.origin);
        }
        Ok(())
    }

    /// One `[[role]]`: checks it, then replaces the role of the same name
    /// (or adds it) with its lifecycle, runner and verify commands.
    fn merge_role(&mut self, src: &LayerSource, raw: RawRole) -> Result<()> {
        if raw.name.trim().is_empty() {
            return Err(src.bad("name", "of a [[role]] is empty: give the role a name".to_owned()));
        }
        if raw.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(src.bad("model", format!("of role `{}` is empty: remove the key or name a model", raw.name)));
        }
        let timeout_ms = match &raw.timeout {
            Some(t) => t.ms().map_err(|e| src.bad("timeout", e))?,
            None => 10 * 60 * 1000,
        };
        let lifecycle = crate::lifecycle::RoleLifecycle {
            budget: match &raw.budget {
                Some(b) => b.limits(&format!("role `{}` budget", raw.name)).map_err(|e| src.bad("budget", e))?,
                None => Default::default(),
            },
            on_blocker: match raw.on_blocker.as_deref() {
                Some(o) => Some(crate::lifecycle::OnBlocker::parse(o).map_err(|e| src.bad("on_blocker", e))?),
                None => None,
            },
        };
        self.role_lifecycle.insert(raw.name.clone(), lifecycle);
        match raw.runner {
            Some(k) => self.role_runner.insert(raw.name.clone(), k),
            None => self.role_runner.remove(&raw.name),
        };
        match raw.verify {
            Some(v) if v.iter().any(|c| c.trim().is_empty()) => {
                return Err(src.bad("verify", format!("of role `{}` holds an empty command: remove it", raw.name)));
            }
            Some(v) if !v.is_empty() => {
                self.role_verify.insert(raw.name.clone(), v);
            }
            _ => {
                self.role_verify.remove(&raw.name);
            }
        }
        let role = Role {
            name: raw.name,
            purpose: raw.purpose,
            agents: raw.agents,
            mode: raw.mode,
            isolation: raw.isolation,
            network: raw.network,
            timeout_ms,
            model: raw.model,
            system_prompt_file: raw.system_prompt_file,
        };
        match self.roles.iter_mut().find(|(r, _)| r.name == role.name) {
            Some(slot) => *slot = (role, src.origin),
            None => self.roles.push((role, src.origin)),
        }
        Ok(())
    }

    /// One `[[agent]]`: checks it, anchors its executable to the layer's
    /// directory, then replaces the agent of the same id (or adds it).
    fn merge_agent(&mut self, src: &LayerSource, mut agent: AgentDef) -> Result<()> {
        validate_agent(src.path, &agent)?;
        agent.bin = anchor_bin(src.path, agent.bin);
        match self.agents.iter_mut().find(|(a, _)| a.id == agent.id) {
            Some(slot) => *slot = (agent, src.origin),
            None => self.agents.push((agent, src.origin)),
        }
        Ok(())
    }

    /// `[http]`: MCP over HTTP; an empty `listen` (the default) turns it off.
    fn merge_http(&mut self, src: &LayerSource, h: RawHttp) -> Result<()> {
        let mut section =
            self.http.clone().unwrap_or(HttpSection { listen: String::new(), rate_limit_per_minute: 120 });
        if let Some(listen) = h.listen {
            parse_listen(&listen).map_err(|e| src.bad("listen", e))?;
            section.listen = listen;
        }
        if let Some(limit) = h.rate_limit_per_minute {
            section.rate_limit_per_minute = limit;
        }
        self.http = (!section.listen.is_empty()).then_some(section);
        Ok(())
    }

    /// The generic agent with this id, if declared.
    /// The files read, for a message.
    fn files_shown(&self) -> String {
        self.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    }

    pub fn agent(&self, id: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|(a, _)| a.id == id).map(|(a, _)| a)
    }

    /// The role with this name, if any.
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.iter().find(|(r, _)| r.name == name).map(|(r, _)| r)
    }

    /// Where a `policy.*` or `worktree.*` field came from.
    pub fn origin_of(&self, key: &str) -> Origin {
        self.provenance.get(key).copied().unwrap_or(Origin::Default)
    }
}

/// The layer being merged: where it was read from, its text (to point an
/// error at a line) and the origin its values get.
struct LayerSource<'a> {
    path: &'a Path,
    text: &'a str,
    origin: Origin,
}

impl LayerSource<'_> {
    /// The error for a bad value of `key` in this layer: file, line and why.
    fn bad(&self, key: &str, why: String) -> Error {
        Error::Invalid(format!("{}{}: `{key}` {why}", self.path.display(), line_of(self.text, key)))
    }
}

/// The line of the first occurrence of `key` in `text`, as `:N`, to point
/// a person at it; empty when not found.
fn line_of(text: &str, key: &str) -> String {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.starts_with(key) && l[key.len()..].trim_start().starts_with('=')
        })
        .map(|i| format!(":{}", i + 1))
        .unwrap_or_default()
}

/// A `[worktree]` copy or link path must stay inside the workspace and out
/// of the repository's and caesar's own directories.
fn check_worktree_path(p: &str) -> std::result::Result<(), &'static str> {
    if p.trim().is_empty() {
        return Err("is empty");
    }
    if p.starts_with('/') || p.starts_with('\\') || (p.len() > 1 && p.as_bytes()[1] == b':') {
        return Err("is absolute: paths are relative to the workspace root");
    }
    let parts: Vec<&str> = p.split(['/', '\\']).collect();
    if parts.contains(&"..") {
        return Err("contains `..`: a path cannot leave the workspace");
    }
    if matches!(parts.first(), Some(&".git") | Some(&".caesar")) {
        return Err("is under .git or .caesar, which belong to git and to caesar");
    }
    Ok(())
}

fn parse_layer(path: &Path, text: &str) -> Result<Layer> {
    toml::from_str::<Layer>(text).map_err(|e| {
        let (place, key) = e
            .span()
            .map(|span| {
                let start = span.start.min(text.len());
                let line = text[..start].matches('\n').count() + 1;
                // The key of the offending line, when it is a `key = value` line.
                let line_text = text.lines().nth(line - 1).unwrap_or_default();
                let key = line_text
                    .split_once('=')
                    .map(|(k, _)| k.trim())
                    .filter(|k| !k.is_empty() && !k.starts_with('[') && !k.starts_with('#'))
                    .map(|k| format!(" (key `{k}`)"))
                    .unwrap_or_default();
                (format!(":{line}"), key)
            })
            .unwrap_or_default();
        Error::Invalid(format!("{}{place}{key}: {}", path.display(), e.message().trim()))
    })
}

fn validate_agent(path: &Path, agent: &AgentDef) -> Result<()> {
    if agent.id.trim().is_empty()
        || !agent.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Error::Invalid(format!(
            "{}: [[agent]] id `{}` must be letters, digits, '-', '_' or '.'",
            path.display(),
            agent.id
        )));
    }
    if agent.bin.trim().is_empty() {
        return Err(Error::Invalid(format!(
            "{}: [[agent]] `{}` has an empty `bin`: give the executable's name or path",
            path.display(),
            agent.id
        )));
    }
    if let Some(protocol) = agent.protocol.as_deref()
        && !matches!(protocol, "stream" | "acp")
    {
        return Err(Error::Invalid(format!(
            "{}: [[agent]] `{}` has protocol `{protocol}`: use `stream` (OACP event lines, the default) or `acp` \
             (an Agent Client Protocol agent on stdio)",
            path.display(),
            agent.id
        )));
    }
    if let Some(input) = agent.prompt_input.as_deref() {
        let why = match input {
            "argv" => None,
            "stdin" if agent.speaks_acp() => Some(
                "has prompt_input `stdin`, but an `acp` agent gets its prompt in its session: remove `prompt_input`"
                    .to_owned(),
            ),
            "stdin" if agent.args.iter().any(|a| a.contains("{{prompt}}")) => Some(
                "has prompt_input `stdin` and `{{prompt}}` in `args`: remove `{{prompt}}` from `args` (the prompt \
                 comes on stdin), or set `prompt_input = \"argv\"`"
                    .to_owned(),
            ),
            "stdin" => None,
            other => Some(format!(
                "has prompt_input `{other}`: use `argv` (where `{{{{prompt}}}}` stands in `args`, the default) or \
                 `stdin` (the prompt written on its stdin)"
            )),
        };
        if let Some(why) = why {
            return Err(Error::Invalid(format!("{}: [[agent]] `{}` {why}", path.display(), agent.id)));
        }
    }
    if let Some(mode) = agent.cwd_mode.as_deref()
        && !matches!(mode, "process" | "flag")
    {
        return Err(Error::Invalid(format!(
            "{}: [[agent]] `{}` has cwd_mode `{mode}`: use `process` or `flag`",
            path.display(),
            agent.id
        )));
    }
    Ok(())
}

/// The project a workspace belongs to: the nearest ancestor holding a
/// `.caesar` directory, else the nearest holding `.git`, else the workspace.
/// A caesar worktree (`<project>/.caesar/wt/<id>/…`) belongs to the project
/// it was made from: its own `.caesar/`, which its agent could write, never
/// becomes policy (issue 19).
pub fn project_root(workspace: &Path) -> PathBuf {
    if let Some(main) = worktree_project(workspace) {
        return main;
    }
    for marker in [".caesar", ".git"] {
        if let Some(dir) = workspace.ancestors().find(|d| d.join(marker).exists()) {
            return dir.to_path_buf();
        }
    }
    workspace.to_path_buf()
}

/// The project whose caesar worktree holds `path`, if one does: the
/// outermost `<project>/.caesar/wt/<id>` above it (a nested task's worktree
/// lies inside its parent's).
fn worktree_project(path: &Path) -> Option<PathBuf> {
    let mut found = None;
    for dir in path.ancestors() {
        let (Some(wt), Some(id)) = (dir.parent(), dir.file_name()) else { continue };
        if id.is_empty() || wt.file_name().is_none_or(|n| n != "wt") {
            continue;
        }
        if let Some(dot) = wt.parent().filter(|d| d.file_name().is_some_and(|n| n == ".caesar"))
            && let Some(project) = dot.parent()
        {
            found = Some(project.to_path_buf());
        }
    }
    found
}

/// Parses and checks `[http] listen`: loopback only.
pub fn parse_listen(listen: &str) -> std::result::Result<std::net::SocketAddr, String> {
    let addr: std::net::SocketAddr = listen
        .parse()
        .map_err(|e| format!("[http] listen `{listen}` is not an address:port ({e}); write it like 127.0.0.1:7077"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "[http] listen `{listen}` is not a loopback address: caesar serves MCP over HTTP on 127.0.0.1 or [::1] only"
        ));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests;

//! What an untrusted project or local layer may still say (issue 19; the
//! trust records are `crate::trust`): everything that only narrows. What
//! can run code or widen policy is taken out of the parsed layer before it
//! is merged, and named, so that the warning can say what was ignored.

use super::{Config, Layer};
use caesar_proto::kinds::{IsolationPref, NetworkPref};

use crate::oacp::Mode;

/// A project or local layer that was read untrusted, and what of it was
/// ignored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UntrustedLayer {
    /// The layer file.
    pub file: std::path::PathBuf,
    /// The project root (what `caesar trust` takes).
    pub project: std::path::PathBuf,
    /// The keys that were ignored (`[worktree] setup`, `[[agent]] x`, …).
    pub ignored: Vec<String>,
}

impl UntrustedLayer {
    /// The warning shown to people: what was ignored and the command to run.
    pub fn warning(&self) -> String {
        format!(
            "{} is not trusted, so its {} {} ignored: read it, then run `caesar trust {}`",
            self.file.display(),
            self.ignored.join(", "),
            if self.ignored.len() == 1 { "is" } else { "are" },
            self.project.display()
        )
    }
}

/// A list as TOML writes it: `["a", "b"]`.
fn list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// Takes out of `layer` what could run code or widen `current`'s policy,
/// and returns what it took.
pub(super) fn strip(layer: &mut Layer, current: &Config) -> Vec<String> {
    let mut ignored = Vec::new();
    if let Some(w) = &mut layer.worktree
        && w.setup.take().is_some_and(|s| !s.is_empty())
    {
        ignored.push("[worktree] setup".to_owned());
    }
    for a in layer.agent.take().unwrap_or_default() {
        ignored.push(format!("[[agent]] {}", a.id));
    }
    if layer.bin.take().is_some_and(|b| !b.is_empty()) {
        ignored.push("[bin]".to_owned());
    }
    if layer.runner.take().is_some() {
        ignored.push("[runner]".to_owned());
    }
    for r in layer.role.iter_mut().flatten() {
        if r.verify.take().is_some_and(|v| !v.is_empty()) {
            ignored.push(format!("[[role]] {} verify", r.name));
        }
        if r.system_prompt_file.take().is_some() {
            ignored.push(format!("[[role]] {} system_prompt_file", r.name));
        }
    }
    if let Some(p) = &mut layer.policy {
        let cur = &current.policy;
        // Each ignored key says the value the file would set (issue 30), so
        // that `caesar policy show` and a refusal can tell what trust changes.
        let mut widen = |key: &str, wider: bool, value: String| {
            if wider {
                ignored.push(format!("policy.{key} = {value}"));
            }
            !wider
        };
        if let Some(v) = &p.allowed {
            let narrower = cur.allowed.is_empty() || v.iter().all(|a| cur.allowed.contains(a));
            if !widen("allowed", !narrower, list(v)) {
                p.allowed = None;
            }
        }
        if let Some(v) = &p.denied
            && !widen("denied", !cur.denied.iter().all(|d| v.contains(d)), list(v))
        {
            p.denied = None;
        }
        if p.max_parallel.is_some_and(|v| !widen("max_parallel", v > cur.max_parallel, v.to_string())) {
            p.max_parallel = None;
        }
        if p.default_isolation
            .is_some_and(|v| !widen("default_isolation", v == IsolationPref::Inplace, format!("\"{}\"", v.as_str())))
        {
            p.default_isolation = None;
        }
        if p.default_mode.is_some_and(|v| {
            !widen("default_mode", v == Mode::Write && cur.default_mode != Mode::Write, format!("\"{}\"", v.as_str()))
        }) {
            p.default_mode = None;
        }
        if p.default_network.is_some_and(|v| {
            !widen("default_network", v != NetworkPref::Off && v != cur.default_network, format!("\"{}\"", v.as_str()))
        }) {
            p.default_network = None;
        }
        if p.allow_recursion.is_some_and(|v| !widen("allow_recursion", v && !cur.allow_recursion, v.to_string())) {
            p.allow_recursion = None;
        }
        if p.allow_inplace_write
            .is_some_and(|v| !widen("allow_inplace_write", v && !cur.allow_inplace_write, v.to_string()))
        {
            p.allow_inplace_write = None;
        }
        if p.max_depth.is_some_and(|v| !widen("max_depth", v > cur.max_depth, v.to_string())) {
            p.max_depth = None;
        }
        if let Some(v) = &p.nested_workspaces
            && !widen("nested_workspaces", !v.iter().all(|d| cur.nested_workspaces.contains(d)), list(v))
        {
            p.nested_workspaces = None;
        }
        // A box's limit is widened by a value above the current one; any
        // value narrows none (the kernel's default).
        if p.box_memory_max_mb
            .is_some_and(|v| !widen("box_memory_max_mb", cur.box_memory_max_mb.is_some_and(|c| v > c), v.to_string()))
        {
            p.box_memory_max_mb = None;
        }
        if p.box_pids_max
            .is_some_and(|v| !widen("box_pids_max", cur.box_pids_max.is_some_and(|c| v > c), v.to_string()))
        {
            p.box_pids_max = None;
        }
        if p.box_cpu_weight
            .is_some_and(|v| !widen("box_cpu_weight", cur.box_cpu_weight.is_some_and(|c| v > c), v.to_string()))
        {
            p.box_cpu_weight = None;
        }
    }
    ignored
}

//! The agents caesar knows of: the native providers and the `[[agent]]`
//! generic agents of a project, with where each is installed, its version,
//! what it can do and the options delegate accepts for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::agents;
use crate::config::{AgentDef, Config};
use crate::provider::{self, ProviderSpec};

/// One agent as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEntry {
    pub id: String,
    pub display_name: String,
    /// The executable as configured or by default.
    pub bin: String,
    pub installed: bool,
    pub path: Option<PathBuf>,
    pub capabilities: Value,
    pub default_model: Option<String>,
    pub allowed: bool,
    pub refusal: Option<String>,
    pub version: Option<String>,
    /// `builtin` or `generic`.
    pub kind: &'static str,
    /// The options delegate accepts, as described by [`options`].
    pub options: Value,
    /// The protocol caesar speaks with it (`acp`, `stream`, …) and why (issue 15).
    pub protocol: &'static str,
    pub protocol_reason: &'static str,
    /// What holds the agent back now, from the quota ledger (issue 32), e.g. `near limit until
    /// 17:40 UTC (claude rate_limit_event)`; `None` when it has headroom (set by the engine).
    pub headroom: Option<String>,
    /// What caesar observed it use in its quota window (`crate::quota_observed::shown`; set by
    /// the engine); `None` when it used nothing.
    pub observed_usage: Option<String>,
}

/// Caches `--version` answers by executable and modification time, so a
/// listing does not start ten CLIs every time.
#[derive(Debug, Default)]
pub struct VersionCache {
    seen: Mutex<HashMap<PathBuf, Probed>>,
}

/// An executable's modification time when probed, and what it answered.
type Probed = (Option<SystemTime>, Option<String>);

/// How long a `--version` probe may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

impl VersionCache {
    /// The version an executable reports, probing it at most once per build
    /// of it.
    pub fn version(&self, path: &Path, args: &[&str]) -> Option<String> {
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if let Some((seen, version)) = self.seen.lock().unwrap_or_else(|p| p.into_inner()).get(path)
            && *seen == mtime
        {
            return version.clone();
        }
        let version = probe_version(path, args);
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).insert(path.to_path_buf(), (mtime, version.clone()));
        version
    }
}

/// The first line a CLI prints for `args`, within [`VERSION_TIMEOUT`]. The
/// CLI runs in a process group of its own, killed whole when the time is up:
/// a CLI that forks and hangs (or whose child keeps its stdout open) leaves
/// no process behind and does not hold the listing (issue 29).
fn probe_version(path: &Path, args: &[&str]) -> Option<String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(path)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).ok()?);
    let mut stdout = child.stdout.take()?;
    // Read on a thread of its own: a descendant holding the pipe open keeps
    // it from ending, and only the deadline below decides.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = (&mut stdout).take(64 * 1024).read_to_end(&mut out);
        let _ = tx.send(read.map(|_| out));
    });
    let deadline = std::time::Instant::now() + VERSION_TIMEOUT;
    let out = rx.recv_timeout(VERSION_TIMEOUT).ok().and_then(Result::ok);
    // Its stdout ended: the CLI itself has until the deadline to exit.
    let exited = out.is_some()
        && loop {
            match child.try_wait() {
                Ok(Some(_)) => break true,
                Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                _ => break false,
            }
        };
    if !exited {
        // The group is the child's pid, kept from reuse while any member lives.
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait();
        return None;
    }
    let text = String::from_utf8_lossy(&out?).into_owned();
    text.lines().map(str::trim).find(|l| !l.is_empty()).map(|l| l.chars().take(120).collect())
}

/// Every agent of the configuration: `[[agent]]` entries first, then the
/// native providers they do not replace.
pub fn list(config: &Config, versions: &VersionCache) -> Vec<AgentEntry> {
    list_from(config, versions, crate::request::Host::Unknown)
}

/// Every agent as [`list`] gives it, with each one's standing for a
/// delegation from `host` (issue 30: claude is no recursion from a terminal).
pub fn list_from(config: &Config, versions: &VersionCache, host: crate::request::Host) -> Vec<AgentEntry> {
    // An entry may probe its CLI's `--version`, which can take seconds (up to
    // VERSION_TIMEOUT): the entries are made side by side, in their order.
    let mut out: Vec<AgentEntry> = std::thread::scope(|scope| {
        let generic = config.agents.iter().map(|(def, _)| scope.spawn(move || generic_entry(def, versions)));
        let builtin = provider::all()
            .iter()
            .filter(|spec| config.agent(spec.id.as_str()).is_none())
            .map(|spec| scope.spawn(move || builtin_entry(spec, config, versions)));
        let made: Vec<_> = generic.chain(builtin).collect();
        made.into_iter().filter_map(|entry| entry.join().ok()).collect()
    });
    for entry in &mut out {
        if let Err(refusal) = crate::policy::standing_from(&config.policy, &entry.id, host) {
            entry.allowed = false;
            entry.refusal = Some(refusal.to_string());
        }
        entry.default_model = config.models.get(&entry.id).map(|(m, _)| m.clone());
    }
    out
}

fn generic_entry(def: &AgentDef, versions: &VersionCache) -> AgentEntry {
    let path = agents::resolve_bin(&def.bin);
    let takes_model = def.args.iter().any(|a| a.contains("{{model}}"));
    let (protocol, protocol_reason) = provider::acp::generic_protocol(def.speaks_acp());
    AgentEntry {
        protocol,
        protocol_reason,
        headroom: None,
        observed_usage: None,
        id: def.id.clone(),
        display_name: def.display_name.clone().unwrap_or_else(|| def.id.clone()),
        bin: def.bin.clone(),
        installed: path.is_some(),
        version: path.as_deref().and_then(|p| versions.version(p, &["--version"])),
        path,
        capabilities: json!({
            "native_read_only": false,
            "structured_output": false,
            "resume": false,
            "model_selection": takes_model,
            "reasoning_effort": false,
            "mcp_injection": false,
            "network": "open",
        }),
        default_model: None,
        allowed: true,
        refusal: None,
        kind: "generic",
        options: json!({
            "mode": ["read-only", "write"],
            "model": if takes_model { json!({"free": true}) } else { Value::Null },
        }),
    }
}

fn builtin_entry(spec: &ProviderSpec, config: &Config, versions: &VersionCache) -> AgentEntry {
    let bin = config.bin.get(spec.id.as_str()).map(|(b, _)| b.clone()).unwrap_or_else(|| spec.default_bin.to_owned());
    let path = agents::resolve_bin(&bin);
    AgentEntry {
        protocol: provider::acp::protocol_name(spec.id.as_str()),
        protocol_reason: provider::acp::protocol_reason(spec.id.as_str()),
        headroom: None,
        observed_usage: None,
        id: spec.id.to_string(),
        display_name: spec.display_name.to_owned(),
        installed: path.is_some(),
        version: path.as_deref().and_then(|p| versions.version(p, spec.version_args)),
        path,
        bin,
        capabilities: serde_json::to_value(spec.capabilities).unwrap_or(Value::Null),
        default_model: None,
        allowed: true,
        refusal: None,
        kind: "builtin",
        options: options(spec),
    }
}

/// The options delegate accepts for a provider. Anything outside them is
/// refused by delegate, never passed through to the CLI.
pub fn options(spec: &ProviderSpec) -> Value {
    let caps = &spec.capabilities;
    json!({
        "mode": ["read-only", "write"],
        "model": if caps.model_selection { json!({"free": true}) } else { Value::Null },
        "effort": if spec.efforts.is_empty() { Value::Null } else { json!({"allowed": spec.efforts}) },
        "session_id": caps.resume,
        // Issue 15: which protocol caesar speaks with the CLI, and why.
        "protocol": {"name": crate::provider::acp::protocol_name(spec.id.as_str()),
            "reason": crate::provider::acp::protocol_reason(spec.id.as_str())},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_provider_and_lets_an_agent_entry_replace_one() {
        let mut config = Config::default();
        let versions = VersionCache::default();
        let all = list(&config, &versions);
        assert_eq!(all.len(), 10);
        assert!(all.iter().all(|a| a.kind == "builtin"));
        let claude = all.iter().find(|a| a.id == "claude").unwrap();
        assert_eq!(claude.capabilities["resume"], true);

        config.agents.push((
            AgentDef { id: "claude".into(), bin: "sh".into(), ..Default::default() },
            crate::config::Origin::Project,
        ));
        let all = list(&config, &versions);
        assert_eq!(all.len(), 10);
        let claude = all.iter().find(|a| a.id == "claude").unwrap();
        assert_eq!((claude.kind, claude.installed), ("generic", true));
    }

    #[test]
    fn options_follow_capabilities() {
        let codex = provider::spec("codex").unwrap();
        let o = options(codex);
        assert!(o["effort"]["allowed"].as_array().unwrap().iter().any(|e| e == "high"));
        assert_eq!(o["session_id"], true);
        let agy = provider::spec("antigravity").unwrap();
        assert_eq!(options(agy)["session_id"], false);
    }

    #[test]
    fn versions_are_probed_and_cached() {
        let cache = VersionCache::default();
        let sh = agents::resolve_bin("sh").unwrap();
        // `sh -c 'echo v1'` stands in for `--version`.
        assert_eq!(cache.version(&sh, &["-c", "echo v1.2"]).as_deref(), Some("v1.2"));
        assert_eq!(cache.version(&sh, &["-c", "echo other"]).as_deref(), Some("v1.2"), "cached");
    }
}

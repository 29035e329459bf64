//! Resolving a delegation before anything is written: the role and its
//! fallback chain, the agent and its executable, the policy's four rules,
//! mode, isolation, network, timeout and model, each from the most specific
//! source that sets it (the request, then the role, then the config, then
//! the default). Every refusal happens here, so a refused delegation leaves
//! no trace on disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::agents;
use crate::config::{AgentDef, Config, IsolationPref, NetworkPref, Role};
use crate::error::{Error, Result};
use crate::launch::ProviderId;
use crate::oacp::{Finding, Mode, Severity};
use crate::policy;
use crate::provider::{self, NetworkControl, ProviderSpec};
use crate::quota::{self, Headroom};
use crate::request::DelegateInput;
use crate::request::Host;

/// What an agent id resolves to.
#[derive(Debug)]
pub enum AgentTarget<'a> {
    /// An OACP generic agent from `[[agent]]`.
    Generic { def: &'a AgentDef, program: PathBuf },
    /// A native provider adapter.
    Provider { spec: &'static ProviderSpec, program: PathBuf },
}

/// The executable of an agent id, if it is installed: a `[[agent]]` entry
/// first (declaring one with a native id replaces that adapter), then a
/// native provider whose executable is `[bin]`'s, else its default name on
/// PATH.
pub fn program_of(config: &Config, agent_id: &str) -> Option<PathBuf> {
    if let Some(def) = config.agent(agent_id) {
        return agents::resolve_bin(&def.bin);
    }
    let spec = provider::spec(agent_id)?;
    let bin = config.bin.get(agent_id).map(|(b, _)| b.as_str()).unwrap_or(spec.default_bin);
    agents::resolve_bin(bin)
}

/// Resolves an agent id to what runs, or an error naming the fix.
pub fn agent_target<'a>(config: &'a Config, project: &Path, agent_id: &str) -> Result<AgentTarget<'a>> {
    if let Some(def) = config.agent(agent_id) {
        let program = agents::resolve_bin(&def.bin).ok_or_else(|| {
            Error::Precondition(format!(
                "agent `{agent_id}`: its executable `{}` is not installed or not executable; fix `bin` in the [[agent]] entry",
                def.bin
            ))
        })?;
        return Ok(AgentTarget::Generic { def, program });
    }
    if let Some(spec) = provider::spec(agent_id) {
        let (bin, from_config) = match config.bin.get(agent_id) {
            Some((bin, _)) => (bin.as_str(), true),
            None => (spec.default_bin, false),
        };
        let program = agents::resolve_bin(bin).ok_or_else(|| {
            Error::Precondition(if from_config {
                format!("agent `{agent_id}`: [bin] {agent_id} = `{bin}` is not an executable file; fix the path in your config")
            } else {
                format!(
                    "agent `{agent_id}` is not installed: `{bin}` is not on PATH. Install it, or set its path in config: [bin] {agent_id} = \"/path/to/{bin}\""
                )
            })
        })?;
        return Ok(AgentTarget::Provider { spec, program });
    }
    let mut known: Vec<&str> = config.agents.iter().map(|(a, _)| a.id.as_str()).collect();
    known.extend(provider::all().iter().map(|s| s.id.as_str()).filter(|id| config.agent(id).is_none()));
    // Declared in a layer the user has not trusted (issue 19): say so, and how.
    let wanted = format!("[[agent]] {agent_id}");
    if let Some(u) = config.untrusted.iter().find(|u| u.ignored.contains(&wanted)) {
        return Err(Error::Precondition(format!("agent `{agent_id}` is not available: {}", u.warning())));
    }
    Err(Error::NotFound(format!(
        "unknown agent `{agent_id}`: use one of {}, or declare it as [[agent]] in {}/.caesar/config.toml",
        known.join(", "),
        project.display()
    )))
}

/// The agent a role would pick now, and why each earlier candidate was
/// skipped (not installed, or refused by the policy).
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    pub agent: Option<String>,
    pub reason: String,
    pub skipped: Vec<(String, String)>,
}

/// Walks a role's fallback chain, for a caller caesar cannot place, as if
/// every agent had headroom.
pub fn pick_for_role(config: &Config, role: &Role) -> Pick {
    pick_for_role_with(config, role, Host::Unknown, &Headroom::default())
}

/// Walks a role's fallback chain for a delegation from `host`: the first
/// agent installed, allowed and with headroom in the quota ledger (issue
/// 32); when every usable one is near its limit, the one that resets soonest.
pub fn pick_for_role_with(config: &Config, role: &Role, host: Host, headroom: &Headroom) -> Pick {
    let mut skipped = Vec::new();
    let mut usable = Vec::new();
    for agent in &role.agents {
        if program_of(config, agent).is_none() {
            skipped.push((agent.clone(), format!("agent `{agent}` is not installed (not found on PATH or in [bin])")));
            continue;
        }
        if let Err(r) = policy::standing_from(&config.policy, agent, host) {
            skipped.push((agent.clone(), with_untrusted_remedy(config, r).to_string()));
            continue;
        }
        usable.push(agent.clone());
    }
    if let Some(choice) = quota::choose(&usable, headroom) {
        let agent = usable[choice.index].clone();
        let by_quota: Vec<String> = choice.passed.iter().map(|(a, why)| format!("`{a}` is {why}")).collect();
        let reason = if choice.all_limited {
            let own = headroom.describe(&agent).unwrap_or_default();
            format!(
                "every installed and allowed agent of the role's chain is near its quota limit: `{agent}` resets soonest ({own}); {}",
                by_quota.join("; ")
            )
        } else if !by_quota.is_empty() {
            format!(
                "`{agent}` is the first installed and allowed agent of the role's chain with quota headroom: {}",
                by_quota.join("; ")
            )
        } else if skipped.is_empty() {
            format!("`{agent}` is the role's first choice, installed and allowed")
        } else {
            format!("`{agent}` is the first installed and allowed agent of the role's chain")
        };
        skipped.extend(choice.passed.into_iter().map(|(a, why)| {
            let said = format!("agent `{a}` is {why}");
            (a, said)
        }));
        return Pick { agent: Some(agent), reason, skipped };
    }
    let reason = if role.agents.is_empty() {
        format!("role `{}` lists no agent: add some to its `agents`", role.name)
    } else {
        format!(
            "no agent of role `{}` is available: {}",
            role.name,
            skipped.iter().map(|(_, why)| why.as_str()).collect::<Vec<_>>().join("; ")
        )
    };
    Pick { agent: None, reason, skipped }
}

/// A recursion refusal whose `allow_recursion = true` is in a file the user
/// has not trusted says so, and how to trust it, instead of asking for a
/// setting that is already there (issue 30).
fn with_untrusted_remedy(config: &Config, mut r: policy::Refusal) -> policy::Refusal {
    if r.rule != policy::Rule::Recursion {
        return r;
    }
    let set = config.untrusted.iter().find(|u| u.ignored.iter().any(|k| k == "policy.allow_recursion = true"));
    if let Some(u) = set {
        r.remedy = format!(
            "`allow_recursion = true` in {} is ignored because that file is not trusted: read it, then run `caesar trust {}`.",
            u.file.display(),
            u.project.display()
        );
    }
    r
}

/// The name of the role a delegation naming neither an agent nor a role
/// goes through: a `[[role]]` of this name when the config declares one.
pub const DEFAULT_ROLE: &str = "default";

/// The warning key under which a delegation naming an agent near its quota limit says so
/// (issue 32).
pub const QUOTA_WARNING: &str = "quota";

/// The warning key under which a delegation that named no agent says which
/// agent was picked and why (an information, not a problem).
pub const AGENT_CHOICE: &str = "agent_choice";

/// The role of a delegation that names neither an agent nor a role: the
/// config's `default` role if it declares one, else every agent caesar
/// knows, the `[[agent]]` entries first (someone declared them on purpose),
/// then the native providers in their listing order. Its mode, isolation,
/// network and timeout are the policy's defaults, as for a bare agent.
pub fn default_role(config: &Config) -> Role {
    if let Some(role) = config.role(DEFAULT_ROLE) {
        return role.clone();
    }
    let mut agents: Vec<String> = config.agents.iter().map(|(a, _)| a.id.clone()).collect();
    agents.extend(provider::all().iter().map(|s| s.id.to_string()).filter(|id| config.agent(id).is_none()));
    Role {
        name: DEFAULT_ROLE.to_owned(),
        purpose: "Whatever the objective asks, by the first agent installed and allowed.".to_owned(),
        agents,
        mode: config.policy.default_mode,
        isolation: config.policy.default_isolation,
        network: config.policy.default_network,
        timeout_ms: config.policy.default_timeout_ms,
        model: None,
        system_prompt_file: None,
    }
}

/// The note a picked default says: the agent, and why the earlier ones were
/// passed over.
fn choice_note(pick: &Pick) -> String {
    let agent = pick.agent.as_deref().unwrap_or("");
    let mut note = format!("picked `{agent}`, the first agent installed and allowed (name one with --agent)");
    if !pick.skipped.is_empty() {
        let passed: Vec<String> = pick.skipped.iter().map(|(a, why)| format!("{a}: {}", short_reason(why))).collect();
        note.push_str(&format!("; passed over {}", passed.join(", ")));
    }
    note
}

/// A skip reason in a few words, for the one-line note.
fn short_reason(why: &str) -> &str {
    if why.contains("not installed") {
        "not installed"
    } else if why.contains("allow_recursion") {
        "refused, allow_recursion is off"
    } else if why.contains("`denied`") {
        "denied by policy"
    } else if why.contains("only allows") {
        "not in the policy's allowed list"
    } else if let Some(limit) = why.split_once("` is ").map(|(_, l)| l).filter(|l| l.contains(" until ")) {
        limit
    } else {
        why
    }
}

/// Why no agent could be picked, and how to get one: a first line that
/// says what is wrong, then the supported agents and the ways out.
fn no_agent_message(config: &Config, pick: &Pick) -> String {
    let refused: Vec<&str> =
        pick.skipped.iter().filter(|(_, why)| !why.contains("not installed")).map(|(_, why)| why.as_str()).collect();
    let mut msg = if pick.skipped.is_empty() {
        pick.reason.clone()
    } else if refused.is_empty() {
        "no agent CLI is installed: none of the supported agents was found on PATH or in [bin]".to_owned()
    } else {
        format!("no agent is both installed and allowed: {}", refused.join(" "))
    };
    let supported: Vec<&str> = provider::all().iter().map(|s| s.id.as_str()).collect();
    msg.push_str(&format!("\n  supported agents: {}", supported.join(", ")));
    if config.agents.is_empty() {
        msg.push_str("\n  install one, for example:");
        for (id, cmd) in provider::all().iter().filter_map(|a| Some((a.id, a.install?))) {
            msg.push_str(&format!("\n    {cmd:<44} # {id}"));
        }
    }
    msg.push_str(
        "\n  or point caesar at one you have with [bin] <agent> = \"/path/to/it\" in .caesar/config.toml, or declare any other program as [[agent]]\n  `caesar agents list` shows what caesar finds; --agent <id> names one",
    );
    msg
}

/// Every role as `caesar_list_roles` shows it, as if every agent had headroom.
pub fn roles_view(config: &Config) -> Vec<Value> {
    roles_view_with(config, Host::Unknown, &Headroom::default())
}

/// Every role as `caesar_list_roles` shows it to a caller at `host`, each
/// with the agent it would pick now given the quota ledger's `headroom`,
/// and why.
pub fn roles_view_with(config: &Config, host: Host, headroom: &Headroom) -> Vec<Value> {
    config
        .roles
        .iter()
        .map(|(role, origin)| {
            let pick = pick_for_role_with(config, role, host, headroom);
            json!({
                "name": role.name,
                "purpose": role.purpose,
                "mode": role.mode.as_str(),
                "isolation": role.isolation.as_str(),
                "network": role.network.as_str(),
                "timeout_ms": role.timeout_ms,
                "model": role.model,
                "agents": role.agents,
                "would_pick": pick.agent,
                "reason": pick.reason,
                "skipped": pick.skipped.iter().map(|(a, why)| json!({"agent": a, "reason": why})).collect::<Vec<_>>(),
                "origin": origin.as_str(),
            })
        })
        .collect()
}

/// How the network will be, as far as caesar can say.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkDecision {
    /// What to ask the provider for: `Some(open)` where it can be set.
    pub request: Option<bool>,
    /// Whether the agent has the network: `false` only when known cut.
    pub available: bool,
}

/// Decides the network against what the agent can enforce.
/// `on` is refused where the network cannot be given; `off` closes it
/// where it can and warns where it cannot; `auto` opens it where it can and
/// says so in an info finding where it is cut.
pub fn decide_network(
    agent: &str,
    pref: NetworkPref,
    control: NetworkControl,
    mode: Mode,
    warnings: &mut BTreeMap<String, String>,
    findings: &mut Vec<Finding>,
) -> Result<NetworkDecision> {
    // What the agent can do in this mode: settable, always open, always cut.
    let settable = matches!(control, NetworkControl::Controllable)
        || (matches!(control, NetworkControl::WriteOnly) && mode == Mode::Write);
    let always_cut = matches!(control, NetworkControl::None)
        || (matches!(control, NetworkControl::WriteOnly) && mode == Mode::ReadOnly);
    Ok(match pref {
        NetworkPref::On if always_cut => {
            return Err(Error::Refused(format!(
                "network `on` cannot be honoured: agent `{agent}` has no network in {} mode. Use network `auto`, or another agent",
                mode.as_str()
            )));
        }
        NetworkPref::On | NetworkPref::Auto if settable => NetworkDecision { request: Some(true), available: true },
        NetworkPref::On => NetworkDecision { request: None, available: true },
        NetworkPref::Auto if always_cut => {
            findings.push(Finding {
                severity: Severity::Info,
                title: format!("no network for {agent} in {} mode", mode.as_str()),
                file: None,
                line: None,
                detail: format!("`{agent}` runs without the network in this mode; the agent was told so in its brief."),
            });
            NetworkDecision { request: None, available: false }
        }
        NetworkPref::Auto => NetworkDecision { request: None, available: true },
        NetworkPref::Off if settable => NetworkDecision { request: Some(false), available: false },
        NetworkPref::Off if always_cut => NetworkDecision { request: None, available: false },
        NetworkPref::Off => {
            warnings.insert(
                "network_warning".to_owned(),
                format!("network `off` cannot be enforced for agent `{agent}`: it runs with the network"),
            );
            NetworkDecision { request: None, available: true }
        }
    })
}

/// A delegation, resolved.
#[derive(Debug)]
pub struct Resolution<'a> {
    pub agent: String,
    pub target: AgentTarget<'a>,
    pub role: Option<Role>,
    pub mode: Mode,
    pub isolation: IsolationPref,
    pub network: NetworkDecision,
    pub timeout_ms: u64,
    pub model: Option<String>,
    /// The role's system prompt, prepended to the context.
    pub system_prompt: String,
    pub warnings: BTreeMap<String, String>,
    /// Findings to add to the task's report (network facts and the like).
    pub findings: Vec<Finding>,
}

/// The recursion rule by what would run (issue 19): an `[[agent]]` or a
/// `[bin]` that starts the `claude` executable under another id is Claude
/// Code all the same.
fn recursion_by_program(config: &Config, agent: &str, target: &AgentTarget<'_>, host: Host) -> Result<()> {
    let program = match target {
        AgentTarget::Generic { program, .. } | AgentTarget::Provider { program, .. } => program,
    };
    let claude = ProviderId::Claude.as_str();
    let runs_claude =
        program.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.strip_suffix(".exe").unwrap_or(n) == claude);
    if agent != claude && runs_claude && !config.policy.allow_recursion && host.may_be_claude_code() {
        return Err(Error::Refused(format!(
            "agent `{agent}` is refused: it runs {} (Claude Code) and `allow_recursion` is off (Claude Code delegating to Claude would be a recursion). Set `allow_recursion = true` in [policy] if you mean it",
            program.display()
        )));
    }
    Ok(())
}

/// The longest timeout a delegation may ask for.
pub const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// Resolves a delegation request against a project's configuration, as if every agent had
/// headroom.
pub fn resolve<'a>(config: &'a Config, project: &Path, input: &DelegateInput) -> Result<Resolution<'a>> {
    resolve_with(config, project, input, &Headroom::default())
}

/// Resolves a delegation request against a project's configuration; a role's agent is picked
/// with the quota ledger's `headroom` (issue 32).
pub fn resolve_with<'a>(
    config: &'a Config,
    project: &Path,
    input: &DelegateInput,
    headroom: &Headroom,
) -> Result<Resolution<'a>> {
    let mut warnings = BTreeMap::new();
    let mut findings = Vec::new();
    let role = requested_role(config, project, input)?;
    // Naming neither an agent nor a role goes through the default role: the
    // config's `default` role (whose mode and the like then apply), else
    // every known agent in order.
    let named_agent = input.agent.as_deref().filter(|a| !a.is_empty());
    let implicit = named_agent.is_none() && role.is_none();
    let role = if implicit { config.role(DEFAULT_ROLE).cloned() } else { role };
    let agent = match named_agent {
        Some(a) => a.to_owned(),
        None => agent_of_role(config, role.as_ref(), implicit, input.host, headroom, &mut warnings)?,
    };
    // An agent named outright is not replaced, but its caller hears that it is near its limit.
    if named_agent.is_some()
        && let Some(limit) = headroom.describe(&agent)
    {
        warnings.insert(
            QUOTA_WARNING.to_owned(),
            format!("agent `{agent}` is {limit}: it may stop on its limit; a role picks an agent with headroom"),
        );
    }
    // Policy first: a refused agent is refused whether or not it is installed.
    policy::check_from(&config.policy, &agent, input.depth, input.host)
        .map_err(|r| Error::Refused(with_untrusted_remedy(config, r).to_string()))?;
    let target = agent_target(config, project, &agent)?;
    recursion_by_program(config, &agent, &target, input.host)?;

    let mode = match input.mode.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => {
            Mode::parse(m).ok_or_else(|| Error::Invalid(format!("unknown mode `{m}`: use `read-only` or `write`")))?
        }
        None => role.as_ref().map(|r| r.mode).unwrap_or(config.policy.default_mode),
    };
    let isolation = match input.isolation.as_deref().filter(|m| !m.is_empty()) {
        Some(i) => IsolationPref::parse(i)
            .ok_or_else(|| Error::Invalid(format!("unknown isolation `{i}`: use `inplace`, `worktree` or `auto`")))?,
        None => role.as_ref().map(|r| r.isolation).unwrap_or(config.policy.default_isolation),
    };
    let network_pref = match input.network.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => NetworkPref::parse(n)
            .ok_or_else(|| Error::Invalid(format!("unknown network `{n}`: use `auto`, `on` or `off`")))?,
        None => role.as_ref().map(|r| r.network).unwrap_or(config.policy.default_network),
    };
    let timeout_ms = match input.timeout_ms.filter(|t| *t > 0) {
        Some(t) if t > MAX_TIMEOUT_MS => {
            return Err(Error::Invalid(format!("timeout of {t} ms is over the limit of {MAX_TIMEOUT_MS} ms (24 h)")));
        }
        Some(t) => t,
        None => role.as_ref().map(|r| r.timeout_ms).unwrap_or(config.policy.default_timeout_ms),
    };

    let (can_choose_model, control) = model_and_network_control(&target);
    let model = choose_model(config, input, &agent, role.as_ref(), can_choose_model, &mut warnings)?;
    check_effort(&target, input, &agent)?;
    let network = decide_network(&agent, network_pref, control, mode, &mut warnings, &mut findings)?;
    let system_prompt = match role.as_ref().and_then(|r| r.system_prompt_file.as_deref().map(|f| (r, f))) {
        Some((r, file)) => read_system_prompt(project, &r.name, file)?,
        None => String::new(),
    };
    Ok(Resolution {
        agent,
        target,
        role,
        mode,
        isolation,
        network,
        timeout_ms,
        model,
        system_prompt,
        warnings,
        findings,
    })
}

/// The role the request names, if any; an unknown name is an error that
/// lists the known roles.
fn requested_role(config: &Config, project: &Path, input: &DelegateInput) -> Result<Option<Role>> {
    let Some(name) = input.role.as_deref().filter(|r| !r.is_empty()) else { return Ok(None) };
    config.role(name).cloned().map(Some).ok_or_else(|| {
        let known: Vec<&str> = config.roles.iter().map(|(r, _)| r.name.as_str()).collect();
        Error::NotFound(format!(
            "unknown role `{name}`: use one of {}, or declare it as [[role]] in {}/.caesar/config.toml",
            known.join(", "),
            project.display()
        ))
    })
}

/// The agent for a request that names none: the first usable one of the
/// role's chain (or of every known agent without a role). When the choice
/// was `implicit` (no role named either) it is explained in the warnings,
/// and finding none says how to install or declare one.
fn agent_of_role(
    config: &Config,
    role: Option<&Role>,
    implicit: bool,
    host: Host,
    headroom: &Headroom,
    warnings: &mut BTreeMap<String, String>,
) -> Result<String> {
    let chain = role.cloned().unwrap_or_else(|| default_role(config));
    let pick = pick_for_role_with(config, &chain, host, headroom);
    // A pick the quota ledger moved (or could not) says why (issue 32).
    let by_quota = pick.agent.as_deref().is_some_and(|a| headroom.limit_of(a).is_some())
        || pick.skipped.iter().any(|(a, _)| headroom.limit_of(a).is_some());
    match &pick.agent {
        Some(agent) if by_quota => {
            warnings.insert(AGENT_CHOICE.to_owned(), pick.reason.clone());
            Ok(agent.clone())
        }
        Some(agent) if implicit => {
            warnings.insert(AGENT_CHOICE.to_owned(), choice_note(&pick));
            Ok(agent.clone())
        }
        Some(agent) => Ok(agent.clone()),
        None if implicit => Err(Error::Precondition(no_agent_message(config, &pick))),
        None => Err(Error::Precondition(pick.reason)),
    }
}

/// Whether the target can choose a model, and how far it can control its
/// network.
fn model_and_network_control(target: &AgentTarget) -> (bool, NetworkControl) {
    match target {
        AgentTarget::Provider { spec, .. } => (spec.capabilities.model_selection, spec.capabilities.network),
        AgentTarget::Generic { def, .. } => (
            def.args.iter().any(|a| a.contains("{{model}}")),
            if def.network_args.is_some() { NetworkControl::Controllable } else { NetworkControl::Open },
        ),
    }
}

/// The model: explicit, then role, then [models], then the provider's
/// default (`None`). An explicit model for an agent that cannot choose one
/// is an error; a configured one is dropped with a warning.
fn choose_model(
    config: &Config,
    input: &DelegateInput,
    agent: &str,
    role: Option<&Role>,
    can_choose_model: bool,
    warnings: &mut BTreeMap<String, String>,
) -> Result<Option<String>> {
    let explicit = input.model.clone();
    if explicit.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(Error::Invalid("`model` is empty: omit it or name a model".to_owned()));
    }
    let configured = role
        .and_then(|r| r.model.clone().map(|m| (m, format!("role `{}`", r.name))))
        .or_else(|| config.models.get(agent).map(|(m, o)| (m.clone(), format!("[models] ({} layer)", o.as_str()))));
    Ok(match (explicit, configured) {
        (Some(_), _) if !can_choose_model => {
            return Err(Error::Invalid(format!("agent `{agent}` cannot choose a model: omit `model`")));
        }
        (Some(m), _) => Some(m),
        (None, Some((m, from))) if !can_choose_model => {
            warnings.insert(
                "model_warning".to_owned(),
                format!("model `{m}` from {from} was dropped: agent `{agent}` cannot choose a model"),
            );
            None
        }
        (None, Some((m, _))) => Some(m),
        (None, None) => None,
    })
}

/// A reasoning effort must be one the provider lists.
fn check_effort(target: &AgentTarget, input: &DelegateInput, agent: &str) -> Result<()> {
    if let AgentTarget::Provider { spec, .. } = target
        && let Some(effort) = input.effort.as_deref().filter(|e| !e.is_empty())
        && !spec.efforts.contains(&effort)
    {
        return Err(Error::Invalid(if spec.efforts.is_empty() {
            format!("agent `{agent}` takes no reasoning effort: omit `effort`")
        } else {
            format!("effort `{effort}` is not allowed for agent `{agent}`: use one of {}", spec.efforts.join(", "))
        }));
    }
    Ok(())
}

/// A role's `system_prompt_file`, read from beneath `<project>/.caesar/`: a
/// committed config must not put `/etc/shadow` or a link to it into a prompt.
/// No file is no prompt; anything else that cannot be read is refused.
fn read_system_prompt(project: &Path, role: &str, file: &str) -> Result<String> {
    let root = project.join(".caesar");
    // Beneath the project, so that a committed `.caesar -> /etc` is not
    // followed either; `..` in `file` is refused before anything is opened.
    let rel = Path::new(".caesar").join(file);
    if Path::new(file).is_absolute() {
        return Err(refuse_prompt(role, file, &root, "it is absolute"));
    }
    match crate::safe_fs::read_beneath_to_string(project, &rel, crate::safe_fs::PROMPT_CAP) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(refuse_prompt(role, file, &root, &e.to_string())),
    }
}

fn refuse_prompt(role: &str, file: &str, root: &Path, why: &str) -> Error {
    Error::Invalid(format!(
        "role `{role}`: system_prompt_file `{file}` is refused: {why}; it must name a regular file of at most {} \
         bytes inside {} (a relative path, no `..`, no symbolic link): move the prompt there and name it relative \
         to .caesar/",
        crate::safe_fs::PROMPT_CAP,
        root.display()
    ))
}

#[cfg(test)]
mod tests;

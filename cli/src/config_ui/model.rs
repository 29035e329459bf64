//! The state of `caesar config`, and what each key does to it.
//!
//! Pure: no terminal, no daemon. The state is built from the daemon's
//! `ShowConfig` and `ListAgents` answers ([`Snapshot::from_daemon`]), and a
//! key either changes the view (tab, selection, layer, a line being typed)
//! or yields a [`Command`]: one edit for the daemon's `EditConfig`, an MCP
//! registration, a prompt file to open. The caller carries the command out
//! and reloads the snapshot; nothing here writes anything.

use serde_json::{Value, json};

/// The four screens, in the order the tab bar shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Agents,
    Roles,
    Policy,
    Mcp,
}

impl Tab {
    /// Every tab, left to right.
    pub const ALL: [Tab; 4] = [Tab::Agents, Tab::Roles, Tab::Policy, Tab::Mcp];

    /// The tab's title.
    pub fn title(self) -> &'static str {
        match self {
            Tab::Agents => "Agents",
            Tab::Roles => "Roles",
            Tab::Policy => "Policy",
            Tab::Mcp => "MCP install",
        }
    }

    fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }
}

/// The layer an edit writes. Always shown, never guessed: `l` cycles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Project,
    Local,
    Global,
}

impl Layer {
    /// The name `EditConfig` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Project => "project",
            Layer::Local => "local",
            Layer::Global => "global",
        }
    }

    fn next(self) -> Layer {
        match self {
            Layer::Project => Layer::Local,
            Layer::Local => Layer::Global,
            Layer::Global => Layer::Project,
        }
    }
}

/// One agent as the Agents tab shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentRow {
    pub id: String,
    pub installed: bool,
    pub allowed: bool,
    /// Why the policy refuses it, when it does.
    pub refusal: String,
    /// `[models]` for this agent and the layer it comes from.
    pub model: Option<(String, String)>,
    /// The provider's own default model.
    pub default_model: String,
    /// Whether `policy.denied` names it.
    pub denied: bool,
}

/// One role as the Roles tab shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoleRow {
    pub name: String,
    pub purpose: String,
    pub agents: Vec<String>,
    pub mode: String,
    pub isolation: String,
    pub network: String,
    pub timeout_ms: u64,
    pub model: Option<String>,
    pub prompt_file: Option<String>,
    /// The layer that declares it (`default` for the built-in roles).
    pub origin: String,
}

impl RoleRow {
    /// The role as `role_add` writes it.
    fn spec(&self) -> Value {
        let timeout = if self.timeout_ms.is_multiple_of(1000) {
            format!("{}s", self.timeout_ms / 1000)
        } else {
            format!("{}ms", self.timeout_ms)
        };
        json!({
            "name": self.name, "purpose": self.purpose, "agents": self.agents, "mode": self.mode,
            "isolation": self.isolation, "network": self.network, "timeout": timeout,
            "model": self.model, "system_prompt_file": self.prompt_file,
        })
    }
}

/// One `[policy]` value with the layer it comes from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyRow {
    /// The key as written in the file (`default_timeout`, not `_ms`).
    pub key: String,
    pub value: String,
    pub origin: String,
}

impl PolicyRow {
    fn is_list(&self) -> bool {
        self.key == "allowed" || self.key == "denied"
    }
}

/// Everything the screens show, as the daemon said it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    pub agents: Vec<AgentRow>,
    pub roles: Vec<RoleRow>,
    pub policy: Vec<PolicyRow>,
    /// The project root (role prompt files live under its `.caesar/`).
    pub project: String,
    /// The config files that were read.
    pub files: Vec<String>,
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Snapshot {
    /// Builds the snapshot from `ShowConfig`'s JSON and `ListAgents`'s
    /// agents (id, installed, allowed, refusal, default model).
    pub fn from_daemon(config: &Value, agents: &[(String, bool, bool, String, String)]) -> Snapshot {
        let provenance = &config["provenance"];
        let denied: Vec<String> = config["policy"]["denied"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let agents = agents
            .iter()
            .map(|(id, installed, allowed, refusal, default_model)| AgentRow {
                id: id.clone(),
                installed: *installed,
                allowed: *allowed,
                refusal: refusal.clone(),
                model: config["models"][id.as_str()]
                    .as_object()
                    .map(|m| (s(&m["model"]), m.get("origin").map(s).unwrap_or_default())),
                default_model: default_model.clone(),
                denied: denied.iter().any(|d| d == id),
            })
            .collect();
        let roles = config["roles"]
            .as_array()
            .map(|roles| {
                roles
                    .iter()
                    .map(|r| RoleRow {
                        name: s(&r["name"]),
                        purpose: s(&r["purpose"]),
                        agents: r["agents"]
                            .as_array()
                            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                            .unwrap_or_default(),
                        mode: s(&r["mode"]),
                        isolation: s(&r["isolation"]),
                        network: s(&r["network"]),
                        timeout_ms: r["timeout_ms"].as_u64().unwrap_or(600_000),
                        model: r["model"].as_str().map(str::to_owned),
                        prompt_file: r["system_prompt_file"].as_str().map(str::to_owned),
                        origin: s(&r["origin"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let policy = config["policy"]
            .as_object()
            .map(|p| {
                p.iter()
                    .map(|(key, value)| {
                        let key = if key == "default_timeout_ms" { "default_timeout".to_owned() } else { key.clone() };
                        let value = match (key.as_str(), value) {
                            ("default_timeout", Value::Number(n)) => human_ms(n.as_u64().unwrap_or(0)),
                            (_, Value::Array(a)) => a.iter().map(s).collect::<Vec<_>>().join(", "),
                            (_, v) => s(v),
                        };
                        let origin = provenance[format!("policy.{key}")].as_str().unwrap_or("default").to_owned();
                        PolicyRow { key, value, origin }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Snapshot {
            agents,
            roles,
            policy,
            project: s(&config["project"]),
            files: config["files"].as_array().map(|f| f.iter().map(s).collect()).unwrap_or_default(),
        }
    }
}

/// `90s`, `10m`, `1h30m`: a duration as the config takes it.
pub fn human_ms(ms: u64) -> String {
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A key, as the model needs it (the terminal's key events map onto these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Esc,
    Backspace,
    Up,
    Down,
    Left,
    Right,
    Tab,
    BackTab,
    /// Ctrl-C.
    Interrupt,
}

/// What a line being typed is for.
#[derive(Debug, Clone, PartialEq)]
pub enum Purpose {
    Model {
        agent: String,
    },
    Chain {
        role: String,
    },
    PromptFile {
        role: String,
    },
    PolicyValue {
        key: String,
    },
    /// `+id` adds to the list, `-id` removes.
    PolicyList {
        field: String,
    },
}

/// A line being typed at the bottom of the screen.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub prompt: String,
    pub buffer: String,
    pub purpose: Purpose,
}

/// What the caller must do after a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// One `EditConfig` call.
    Edit {
        layer: Layer,
        edit: Value,
    },
    /// `caesar mcp install <client>` (or its dry run, or uninstall).
    McpInstall {
        client: String,
        uninstall: bool,
        dry_run: bool,
    },
    /// Open this file (a role's prompt) in the user's editor.
    OpenFile {
        path: String,
    },
    Quit,
}

/// The MCP clients `caesar mcp install` knows, as the MCP tab lists them.
pub const MCP_CLIENTS: [&str; 7] = ["claude", "codex", "gemini", "cursor", "vscode", "opencode", "copilot"];

/// The whole screen's state.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub snapshot: Snapshot,
    pub tab: Tab,
    selected: [usize; 4],
    pub layer: Layer,
    pub input: Option<Input>,
    /// The last thing that happened, for the status line.
    pub status: String,
    /// Whether the last status is an error.
    pub status_is_error: bool,
}

impl State {
    /// A state on the Agents tab, writing the project layer.
    pub fn new(snapshot: Snapshot) -> State {
        State {
            snapshot,
            tab: Tab::Agents,
            selected: [0; 4],
            layer: Layer::Project,
            input: None,
            status: "? for help".to_owned(),
            status_is_error: false,
        }
    }

    /// Replaces the snapshot (after an edit), keeping the selection in range.
    pub fn reload(&mut self, snapshot: Snapshot) {
        self.snapshot = snapshot;
        for tab in Tab::ALL {
            let len = self.len(tab);
            let i = &mut self.selected[tab.index()];
            *i = (*i).min(len.saturating_sub(1));
        }
    }

    /// Says what happened on the status line.
    pub fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status = text.into();
        self.status_is_error = error;
    }

    /// The selected row of `tab`.
    pub fn selected(&self, tab: Tab) -> usize {
        self.selected[tab.index()]
    }

    fn len(&self, tab: Tab) -> usize {
        match tab {
            Tab::Agents => self.snapshot.agents.len(),
            Tab::Roles => self.snapshot.roles.len(),
            Tab::Policy => self.snapshot.policy.len(),
            Tab::Mcp => MCP_CLIENTS.len(),
        }
    }

    /// The keys of the current tab, for the help line.
    pub fn help(&self) -> &'static str {
        match self.tab {
            Tab::Agents => "e enable  d disable  m set model  u unset model",
            Tab::Roles => "c chain  m mode  i isolation  n network  f prompt file  o open prompt",
            Tab::Policy => "enter change value (lists: +id adds, -id removes)",
            Tab::Mcp => "enter what would change  i install  x uninstall",
        }
    }

    /// Handles one key.
    pub fn on_key(&mut self, key: Key) -> Option<Command> {
        if key == Key::Interrupt {
            return Some(Command::Quit);
        }
        if self.input.is_some() {
            return self.on_input_key(key);
        }
        let len = self.len(self.tab);
        let i = self.selected[self.tab.index()];
        match key {
            Key::Char('q') | Key::Esc => return Some(Command::Quit),
            Key::Tab | Key::Right => self.tab = Tab::ALL[(self.tab.index() + 1) % 4],
            Key::BackTab | Key::Left => self.tab = Tab::ALL[(self.tab.index() + 3) % 4],
            Key::Char(c @ '1'..='4') => self.tab = Tab::ALL[c as usize - '1' as usize],
            Key::Down | Key::Char('j') => self.selected[self.tab.index()] = (i + 1).min(len.saturating_sub(1)),
            Key::Up | Key::Char('k') => self.selected[self.tab.index()] = i.saturating_sub(1),
            Key::Char('l') => {
                self.layer = self.layer.next();
                let layer = self.layer.as_str();
                self.say(format!("edits now go to the {layer} layer"), false);
            }
            Key::Char('?') => {
                let help = self.help();
                self.say(format!("{help}  |  l layer  tab/1-4 screens  q quit"), false);
            }
            key => return self.on_tab_key(key),
        }
        None
    }

    fn begin(&mut self, prompt: String, buffer: String, purpose: Purpose) {
        self.input = Some(Input { prompt, buffer, purpose });
    }

    fn edit(&self, edit: Value) -> Option<Command> {
        Some(Command::Edit { layer: self.layer, edit })
    }

    fn on_tab_key(&mut self, key: Key) -> Option<Command> {
        let i = self.selected(self.tab);
        match self.tab {
            Tab::Agents => {
                let a = self.snapshot.agents.get(i)?.clone();
                match key {
                    Key::Char('e') => {
                        self.edit(json!({"op": "policy_list", "field": "denied", "id": a.id, "present": false}))
                    }
                    Key::Char('d') => {
                        self.edit(json!({"op": "policy_list", "field": "denied", "id": a.id, "present": true}))
                    }
                    Key::Char('m') | Key::Enter => {
                        let current = a.model.map(|(m, _)| m).unwrap_or_default();
                        self.begin(format!("model for {}", a.id), current, Purpose::Model { agent: a.id });
                        None
                    }
                    Key::Char('u') => self.edit(json!({"op": "unset_model", "agent": a.id})),
                    _ => None,
                }
            }
            Tab::Roles => {
                let r = self.snapshot.roles.get(i)?.clone();
                match key {
                    Key::Char('c') | Key::Enter => {
                        let chain = r.agents.join(", ");
                        self.begin(
                            format!("agents of {} (first choice first)", r.name),
                            chain,
                            Purpose::Chain { role: r.name },
                        );
                        None
                    }
                    Key::Char('m') => {
                        let mode = if r.mode == "write" { "read-only" } else { "write" };
                        self.role_edit(RoleRow { mode: mode.to_owned(), ..r })
                    }
                    Key::Char('i') => {
                        let isolation = cycle(&["auto", "worktree", "inplace"], &r.isolation);
                        self.role_edit(RoleRow { isolation, ..r })
                    }
                    Key::Char('n') => {
                        let network = cycle(&["auto", "on", "off"], &r.network);
                        self.role_edit(RoleRow { network, ..r })
                    }
                    Key::Char('f') => {
                        let current = r.prompt_file.clone().unwrap_or_else(|| format!("prompts/{}.md", r.name));
                        self.begin(
                            format!("prompt file of {} (under .caesar/)", r.name),
                            current,
                            Purpose::PromptFile { role: r.name },
                        );
                        None
                    }
                    Key::Char('o') => match &r.prompt_file {
                        Some(f) if !self.snapshot.project.is_empty() => {
                            Some(Command::OpenFile { path: format!("{}/.caesar/{f}", self.snapshot.project) })
                        }
                        _ => {
                            self.say(format!("role `{}` has no prompt file: press f to name one", r.name), true);
                            None
                        }
                    },
                    _ => None,
                }
            }
            Tab::Policy => {
                let p = self.snapshot.policy.get(i)?.clone();
                if key != Key::Enter && key != Key::Char('s') {
                    return None;
                }
                if p.is_list() {
                    self.begin(
                        format!("policy.{}: +id adds, -id removes", p.key),
                        String::new(),
                        Purpose::PolicyList { field: p.key },
                    );
                } else {
                    self.begin(format!("policy.{}", p.key), p.value, Purpose::PolicyValue { key: p.key });
                }
                None
            }
            Tab::Mcp => {
                let client = MCP_CLIENTS.get(i)?.to_string();
                match key {
                    Key::Enter => Some(Command::McpInstall { client, uninstall: false, dry_run: true }),
                    Key::Char('i') => Some(Command::McpInstall { client, uninstall: false, dry_run: false }),
                    Key::Char('x') => Some(Command::McpInstall { client, uninstall: true, dry_run: false }),
                    _ => None,
                }
            }
        }
    }

    fn role_edit(&self, role: RoleRow) -> Option<Command> {
        self.edit(json!({"op": "role_add", "role": role.spec()}))
    }

    fn on_input_key(&mut self, key: Key) -> Option<Command> {
        let input = self.input.as_mut()?;
        match key {
            Key::Esc => {
                self.input = None;
                self.say("cancelled", false);
                None
            }
            Key::Backspace => {
                input.buffer.pop();
                None
            }
            Key::Char(c) => {
                input.buffer.push(c);
                None
            }
            Key::Enter => {
                let input = self.input.take()?;
                self.submit(input)
            }
            _ => None,
        }
    }

    fn submit(&mut self, input: Input) -> Option<Command> {
        let text = input.buffer.trim().to_owned();
        match input.purpose {
            Purpose::Model { agent } if text.is_empty() => self.edit(json!({"op": "unset_model", "agent": agent})),
            Purpose::Model { agent } => self.edit(json!({"op": "set_model", "agent": agent, "model": text})),
            Purpose::Chain { role } => {
                let agents: Vec<String> =
                    text.split([',', ' ']).map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect();
                if agents.is_empty() {
                    self.say("a role needs at least one agent", true);
                    return None;
                }
                let r = self.snapshot.roles.iter().find(|r| r.name == role)?.clone();
                self.role_edit(RoleRow { agents, ..r })
            }
            Purpose::PromptFile { role } => {
                let r = self.snapshot.roles.iter().find(|r| r.name == role)?.clone();
                let prompt_file = (!text.is_empty()).then_some(text);
                self.role_edit(RoleRow { prompt_file, ..r })
            }
            Purpose::PolicyValue { key } => self.edit(json!({"op": "policy_set", "key": key, "value": text})),
            Purpose::PolicyList { field } => {
                let (present, id) = match text.split_at_checked(1) {
                    Some(("+", id)) => (true, id.trim()),
                    Some(("-", id)) => (false, id.trim()),
                    _ => {
                        self.say(format!("write +id to add to policy.{field}, -id to remove"), true);
                        return None;
                    }
                };
                if id.is_empty() {
                    self.say("name an agent id after + or -", true);
                    return None;
                }
                self.edit(json!({"op": "policy_list", "field": field, "id": id, "present": present}))
            }
        }
    }
}

fn cycle(values: &[&str], current: &str) -> String {
    let i = values.iter().position(|v| *v == current).map(|i| (i + 1) % values.len()).unwrap_or(0);
    values[i].to_owned()
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;

//! `caesar config`: a terminal screen over the layered configuration.
//!
//! A thin client like the rest of the CLI: it reads the config through the
//! daemon's `ShowConfig` and `ListAgents`, and every change is one
//! `EditConfig` call naming its layer (the daemon edits the file, keeping its
//! comments, and re-reads it before writing). `model` is the pure state,
//! `view` draws it, `input` maps the terminal's keys; [`Session`] joins them
//! to a daemon, and [`run`] to a real terminal.

pub mod input;
pub mod model;
pub mod view;

use caesar_proto::client::Client;
use caesar_proto::pb;

pub use model::{Command, Key, Layer, Snapshot, State, Tab};

/// What the screen's owner must do after a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Flow {
    Continue,
    Quit,
    /// Open this file in the user's editor, then reload.
    OpenFile(String),
}

/// The screen's state bound to a daemon and a workspace.
pub struct Session {
    client: Client,
    workspace: String,
    /// What is on screen.
    pub state: State,
}

impl Session {
    /// Reads the config of `workspace` from the daemon.
    pub async fn open(mut client: Client, workspace: String) -> anyhow::Result<Session> {
        let snapshot = snapshot(&mut client, &workspace).await?;
        Ok(Session { client, workspace, state: State::new(snapshot) })
    }

    /// Reads the config again (after an edit, or a prompt file edited).
    pub async fn reload(&mut self) -> anyhow::Result<()> {
        let snapshot = snapshot(&mut self.client, &self.workspace).await?;
        self.state.reload(snapshot);
        Ok(())
    }

    /// Handles one key: an edit goes to the daemon at once, and its answer
    /// (or its refusal) shows on the status line.
    pub async fn key(&mut self, key: Key) -> Flow {
        let Some(command) = self.state.on_key(key) else {
            return Flow::Continue;
        };
        match command {
            Command::Quit => Flow::Quit,
            Command::OpenFile { path } => Flow::OpenFile(path),
            Command::Edit { layer, edit } => {
                let request = pb::EditConfigRequest {
                    workspace: self.workspace.clone(),
                    layer: layer.as_str().to_owned(),
                    edit_json: edit.to_string(),
                };
                match self.client.edit_config(request).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        let note =
                            if r.changed { format!(" (wrote {})", r.path) } else { " (nothing changed)".to_owned() };
                        self.state.say(format!("{}{note}", r.message), false);
                        if let Err(e) = self.reload().await {
                            self.state.say(format!("edited, but cannot read the config again: {e:#}"), true);
                        }
                    }
                    Err(status) => self.state.say(format!("refused: {}", status.message()), true),
                }
                Flow::Continue
            }
            Command::McpInstall { client, uninstall, dry_run } => {
                match crate::mcp_install::install(&client, uninstall, dry_run) {
                    Ok(plan) => {
                        let verb = if dry_run { "would change" } else { "changed" };
                        let what = if plan.changed { plan.summary } else { "nothing to change".to_owned() };
                        let target = plan
                            .path
                            .map(|p| p.display().to_string())
                            .or(plan.command.map(|c| c.join(" ")))
                            .unwrap_or_default();
                        self.state.say(format!("{client}: {verb}: {what} {target}"), false);
                    }
                    Err(e) => self.state.say(format!("{client}: {e:#}"), true),
                }
                Flow::Continue
            }
        }
    }
}

async fn snapshot(client: &mut Client, workspace: &str) -> anyhow::Result<Snapshot> {
    let config = client.show_config(pb::ShowConfigRequest { workspace: workspace.to_owned() }).await?.into_inner();
    let config: serde_json::Value = serde_json::from_str(&config.config_json)?;
    let agents = client.list_agents(pb::ListAgentsRequest { workspace: workspace.to_owned() }).await?.into_inner();
    let agents: Vec<_> =
        agents.agents.into_iter().map(|a| (a.id, a.installed, a.allowed, a.refusal, a.default_model)).collect();
    Ok(Snapshot::from_daemon(&config, &agents))
}

/// Runs the screen on the real terminal until `q`.
pub async fn run(client: Client, workspace: String) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "caesar config needs a terminal: to read the config from a script use `caesar policy show`, `caesar role list` or `caesar agents list` (with --json), and to edit it `caesar policy ...`, `caesar role add|remove` or `caesar agents enable|disable|set-model`"
        );
    }
    let mut session = Session::open(client, workspace).await?;
    let mut terminal = ratatui::init();
    let outcome = loop {
        if let Err(e) = terminal.draw(|f| view::draw(f, &session.state)) {
            break Err(e.into());
        }
        let key = match input::next_key() {
            Ok(Some(k)) => k,
            Ok(None) => continue,
            Err(e) => break Err(e),
        };
        match session.key(key).await {
            Flow::Continue => {}
            Flow::Quit => break Ok(()),
            Flow::OpenFile(path) => {
                ratatui::restore();
                let result = input::edit_file(&path);
                terminal = ratatui::init();
                let _ = terminal.clear();
                match result {
                    Ok(()) => session.state.say(format!("edited {path}"), false),
                    Err(e) => session.state.say(format!("{e:#}"), true),
                }
                let _ = session.reload().await;
            }
        }
    };
    ratatui::restore();
    outcome
}

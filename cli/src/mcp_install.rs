//! `caesar mcp install <client>`: registers `caesar-mcp` with an MCP host.
//!
//! Where the client has its own `mcp add` command and it is installed
//! (Claude Code, Codex, Gemini CLI), that command does the work. Otherwise
//! the client's config file is merged: only the `caesar` entry is added,
//! changed or removed; other entries and the order of keys stay as they were
//! (TOML through toml_edit, comments included; JSON keeps its key order and
//! indentation). Installing twice changes nothing, and `--dry-run` prints
//! exactly what would change.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// The clients caesar can register with.
pub const CLIENTS: [&str; 8] = ["claude", "codex", "gemini", "qwen", "cursor", "vscode", "opencode", "copilot"];

/// The name of the entry in every client's config.
const NAME: &str = "caesar";

/// How long a host should let one tool call run, in seconds: `caesar_await`
/// blocks up to 600 s, and codex (60 s by default) or gemini (10 minutes)
/// would otherwise cut a long await short. See docs/hosts.md.
const TOOL_TIMEOUT_SEC: i64 = 660;

/// What `install` did or would do.
pub struct Plan {
    /// A human description of the change.
    pub summary: String,
    /// The file changed, if any.
    pub path: Option<PathBuf>,
    /// A command run instead of a file edit, if any.
    pub command: Option<Vec<String>>,
    /// `false` when already as asked.
    pub changed: bool,
}

fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from).context("HOME is not set")
}

/// Finds an executable on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The caesar-mcp executable: beside this one, else on PATH.
pub fn shim_path() -> PathBuf {
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
        && dir.join("caesar-mcp").is_file()
    {
        return dir.join("caesar-mcp");
    }
    on_path("caesar-mcp").unwrap_or_else(|| PathBuf::from("caesar-mcp"))
}

/// Registers (or with `uninstall` removes) caesar-mcp for `client`.
pub fn install(client: &str, uninstall: bool, dry_run: bool) -> anyhow::Result<Plan> {
    let shim = shim_path().display().to_string();
    let home = home()?;
    match client {
        "claude" => {
            // Claude Code keeps user-scope servers in ~/.claude.json, or in
            // $CLAUDE_CONFIG_DIR/.claude.json when that is set.
            let path = std::env::var_os("CLAUDE_CONFIG_DIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| home.clone())
                .join(".claude.json");
            let entry = json!({"type": "stdio", "command": shim, "args": [], "env": {}});
            if let Some(cli) = on_path("claude") {
                let present = read_json(&path)?.and_then(|v| v.pointer(&format!("/mcpServers/{NAME}")).cloned());
                let want = if uninstall { None } else { Some(&entry) };
                let matches = match (&present, want) {
                    (None, None) => true,
                    (Some(p), Some(w)) => p.get("command") == w.get("command"),
                    _ => false,
                };
                let args: Vec<String> = if uninstall {
                    vec!["mcp".into(), "remove".into(), "--scope".into(), "user".into(), NAME.into()]
                } else {
                    vec![
                        "mcp".into(),
                        "add".into(),
                        "--scope".into(),
                        "user".into(),
                        NAME.into(),
                        "--".into(),
                        shim.clone(),
                    ]
                };
                return run_client(&cli, args, !matches, dry_run);
            }
            merge_json(&path, &["mcpServers"], (!uninstall).then_some(entry), dry_run)
        }
        "codex" => {
            let path = std::env::var_os("CODEX_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".codex"))
                .join("config.toml");
            if let Some(cli) = on_path("codex") {
                let present = read_toml_entry(&path)?;
                if uninstall {
                    let args = vec!["mcp".into(), "remove".into(), NAME.into()];
                    return run_client(&cli, args, present.is_some(), dry_run);
                }
                let command_ok = present.as_ref().is_some_and(|(c, _)| c == &shim);
                let args = vec!["mcp".into(), "add".into(), NAME.into(), "--".into(), shim.clone()];
                let mut plan = run_client(&cli, args, !command_ok, dry_run)?;
                // `codex mcp add` has no option for the timeout, the tools'
                // approval or the environment (and rewrites the entry): they
                // are merged into what it wrote.
                if let Some(note) = complete_codex_entry(&path, dry_run)? {
                    plan.summary = if plan.changed { format!("{}; {note}", plan.summary) } else { note };
                    plan.path = Some(path);
                    plan.changed = true;
                }
                return Ok(plan);
            }
            merge_codex_toml(&path, (!uninstall).then_some(shim.as_str()), dry_run)
        }
        "gemini" => {
            let entry = json!({"command": shim, "args": [], "trust": false, "timeout": TOOL_TIMEOUT_SEC * 1000});
            merge_json(&home.join(".gemini/settings.json"), &["mcpServers"], (!uninstall).then_some(entry), dry_run)
        }
        // Qwen Code is a gemini fork: the same `mcpServers` entry, in its own home.
        "qwen" => {
            let entry = json!({"command": shim, "args": [], "trust": false, "timeout": TOOL_TIMEOUT_SEC * 1000});
            merge_json(&home.join(".qwen/settings.json"), &["mcpServers"], (!uninstall).then_some(entry), dry_run)
        }
        "cursor" => {
            let entry = json!({"command": shim, "args": []});
            merge_json(&home.join(".cursor/mcp.json"), &["mcpServers"], (!uninstall).then_some(entry), dry_run)
        }
        "vscode" => {
            let dir = if cfg!(target_os = "macos") {
                home.join("Library/Application Support/Code/User")
            } else {
                std::env::var_os("XDG_CONFIG_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".config"))
                    .join("Code/User")
            };
            let entry = json!({"type": "stdio", "command": shim, "args": []});
            merge_json(&dir.join("mcp.json"), &["servers"], (!uninstall).then_some(entry), dry_run)
        }
        "opencode" => {
            let dir = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".config"));
            let entry = json!({"type": "local", "command": [shim], "enabled": true});
            merge_json(&dir.join("opencode/opencode.json"), &["mcp"], (!uninstall).then_some(entry), dry_run)
        }
        "copilot" => {
            let entry = json!({"type": "local", "command": shim, "args": [], "tools": ["*"]});
            merge_json(&home.join(".copilot/mcp-config.json"), &["mcpServers"], (!uninstall).then_some(entry), dry_run)
        }
        other => {
            Err(crate::bad_input::BadInput(format!("unknown MCP client `{other}`: use one of {}", CLIENTS.join(", ")))
                .into())
        }
    }
}

fn run_client(cli: &Path, args: Vec<String>, needed: bool, dry_run: bool) -> anyhow::Result<Plan> {
    let mut command = vec![cli.display().to_string()];
    command.extend(args);
    if !needed {
        return Ok(Plan {
            summary: "already as asked: nothing to do".to_owned(),
            path: None,
            command: None,
            changed: false,
        });
    }
    if !dry_run {
        let status = Command::new(&command[0])
            .args(&command[1..])
            .status()
            .with_context(|| format!("cannot run {}", command[0]))?;
        if !status.success() {
            bail!("`{}` failed ({status})", command.join(" "));
        }
    }
    Ok(Plan { summary: format!("run: {}", command.join(" ")), path: None, command: Some(command), changed: true })
}

fn read_json(path: &Path) -> anyhow::Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(t) if t.trim().is_empty() => Ok(Some(json!({}))),
        Ok(t) => Ok(Some(
            serde_json::from_str(&t).with_context(|| format!("{} is not valid JSON: fix it first", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The indentation a JSON file uses, to write it back the same way.
fn indent_of(text: &str) -> usize {
    text.lines()
        .find(|l| l.starts_with(' ') && !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .unwrap_or(2)
}

/// Sets (or removes, with `None`) `<table...>.caesar` in a JSON file.
fn merge_json(path: &Path, table: &[&str], entry: Option<Value>, dry_run: bool) -> anyhow::Result<Plan> {
    let before_text = std::fs::read_to_string(path).unwrap_or_default();
    let mut doc = read_json(path)?.unwrap_or_else(|| json!({}));
    let mut node = &mut doc;
    for key in table {
        let Some(obj) = node.as_object_mut() else {
            bail!("{}: `{key}`'s parent is not an object: fix it first", path.display())
        };
        node = obj.entry(key.to_string()).or_insert_with(|| json!({}));
    }
    let Some(servers) = node.as_object_mut() else {
        bail!("{}: `{}` is not an object: fix it first", path.display(), table.join("."))
    };
    let changed = match &entry {
        Some(e) => servers.get(NAME) != Some(e),
        None => servers.contains_key(NAME),
    };
    match entry.clone() {
        Some(e) => {
            servers.insert(NAME.to_owned(), e);
        }
        None => {
            servers.remove(NAME);
        }
    }
    let summary = match (&entry, changed) {
        (_, false) => format!("{}: already as asked, nothing to do", path.display()),
        (Some(e), true) => format!("{}: set {}.{NAME} = {e}", path.display(), table.join(".")),
        (None, true) => format!("{}: remove {}.{NAME}", path.display(), table.join(".")),
    };
    if changed && !dry_run {
        let indent = " ".repeat(indent_of(&before_text));
        let mut out = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
        serde::Serialize::serialize(&doc, &mut ser)?;
        out.push(b'\n');
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(Plan { summary, path: Some(path.to_path_buf()), command: None, changed })
}

/// The command and `tool_timeout_sec` of `[mcp_servers.caesar]`, if there is one.
fn read_toml_entry(path: &Path) -> anyhow::Result<Option<(String, Option<i64>)>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let doc: toml_edit::DocumentMut =
        text.parse().with_context(|| format!("{} is not valid TOML: fix it first", path.display()))?;
    let Some(entry) = doc.get("mcp_servers").and_then(|s| s.get(NAME)) else { return Ok(None) };
    let command = entry.get("command").and_then(|c| c.as_str()).unwrap_or_default().to_owned();
    Ok(Some((command, entry.get("tool_timeout_sec").and_then(|t| t.as_integer()))))
}

/// What caesar's entry in Codex's config needs beyond its command:
/// - `tool_timeout_sec`, longer than `caesar_await`'s longest wait;
/// - `default_tools_approval_mode = "approve"`: `codex exec` never asks, so
///   an unapproved tool is refused outright ("approval policy is never");
/// - `env`: codex starts MCP servers with a minimal environment, so the
///   variables that say where caesar's state lives are passed when set.
fn codex_entry_extras(entry: &mut dyn toml_edit::TableLike) -> bool {
    let mut changed = false;
    if entry.get("tool_timeout_sec").and_then(|t| t.as_integer()) != Some(TOOL_TIMEOUT_SEC) {
        entry.insert("tool_timeout_sec", toml_edit::value(TOOL_TIMEOUT_SEC));
        changed = true;
    }
    if entry.get("default_tools_approval_mode").and_then(|a| a.as_str()) != Some("approve") {
        entry.insert("default_tools_approval_mode", toml_edit::value("approve"));
        changed = true;
    }
    for key in ["CAESAR_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"] {
        let Some(value) = std::env::var(key).ok().filter(|v| !v.is_empty()) else { continue };
        let current = entry.get("env").and_then(|e| e.get(key)).and_then(|v| v.as_str()).map(str::to_owned);
        if current.as_deref() == Some(value.as_str()) {
            continue;
        }
        if entry.get("env").and_then(|e| e.as_table_like()).is_none() {
            entry.insert("env", toml_edit::value(toml_edit::InlineTable::new()));
        }
        if let Some(env) = entry.get_mut("env").and_then(|e| e.as_table_like_mut()) {
            env.insert(key, toml_edit::value(value));
            changed = true;
        }
    }
    changed
}

/// Completes the `[mcp_servers.caesar]` that `codex mcp add` wrote (see
/// [`codex_entry_extras`]), keeping the rest of the file. Says what it did,
/// or `None` when the entry was already complete.
fn complete_codex_entry(path: &Path, dry_run: bool) -> anyhow::Result<Option<String>> {
    let what = format!(
        "{}: set [mcp_servers.{NAME}] tool_timeout_sec = {TOOL_TIMEOUT_SEC}, default_tools_approval_mode = \"approve\" and its env",
        path.display()
    );
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(_) if dry_run => return Ok(Some(what)),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut doc: toml_edit::DocumentMut =
        text.parse().with_context(|| format!("{} is not valid TOML: fix it first", path.display()))?;
    let Some(entry) = doc.get_mut("mcp_servers").and_then(|s| s.get_mut(NAME)).and_then(|e| e.as_table_like_mut())
    else {
        if dry_run {
            return Ok(Some(what));
        }
        bail!(
            "`codex mcp add` left no [mcp_servers.{NAME}] in {}: add `tool_timeout_sec = {TOOL_TIMEOUT_SEC}` and `default_tools_approval_mode = \"approve\"` to caesar's entry yourself",
            path.display()
        )
    };
    if !codex_entry_extras(entry) {
        return Ok(None);
    }
    if !dry_run {
        std::fs::write(path, doc.to_string()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(Some(what))
}

/// Sets (or removes) `[mcp_servers.caesar]` in Codex's config.toml,
/// keeping everything else, comments included.
fn merge_codex_toml(path: &Path, command: Option<&str>, dry_run: bool) -> anyhow::Result<Plan> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut doc: toml_edit::DocumentMut =
        text.parse().with_context(|| format!("{} is not valid TOML: fix it first", path.display()))?;
    let entry = doc.get("mcp_servers").and_then(|s| s.get(NAME));
    let present = entry.and_then(|e| e.get("command")).and_then(|c| c.as_str()).map(str::to_owned);
    let timeout = entry.and_then(|e| e.get("tool_timeout_sec")).and_then(|t| t.as_integer());
    let approval = entry.and_then(|e| e.get("default_tools_approval_mode")).and_then(|a| a.as_str());
    let changed = match command {
        Some(c) => present.as_deref() != Some(c) || timeout != Some(TOOL_TIMEOUT_SEC) || approval != Some("approve"),
        None => entry.is_some(),
    };
    match command {
        Some(c) => {
            if !doc.contains_key("mcp_servers") {
                let mut t = toml_edit::Table::new();
                t.set_implicit(true);
                doc.insert("mcp_servers", toml_edit::Item::Table(t));
            }
            let servers = doc["mcp_servers"].as_table_mut().context("`mcp_servers` is not a table: fix it first")?;
            let mut entry = toml_edit::Table::new();
            entry.insert("command", toml_edit::value(c));
            entry.insert("args", toml_edit::value(toml_edit::Array::new()));
            codex_entry_extras(&mut entry);
            servers.insert(NAME, toml_edit::Item::Table(entry));
        }
        None => {
            if let Some(servers) = doc.get_mut("mcp_servers").and_then(|s| s.as_table_mut()) {
                servers.remove(NAME);
            }
        }
    }
    let summary = match (command, changed) {
        (_, false) => format!("{}: already as asked, nothing to do", path.display()),
        (Some(c), true) => format!(
            "{}: set [mcp_servers.{NAME}] command = \"{c}\", tool_timeout_sec = {TOOL_TIMEOUT_SEC}, default_tools_approval_mode = \"approve\"",
            path.display()
        ),
        (None, true) => format!("{}: remove [mcp_servers.{NAME}]", path.display()),
    };
    if changed && !dry_run {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(path, doc.to_string()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(Plan { summary, path: Some(path.to_path_buf()), command: None, changed })
}

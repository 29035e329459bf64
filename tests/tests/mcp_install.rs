//! `caesar mcp install` into a temporary HOME, for every supported client:
//! the resulting config files, idempotence, --dry-run and --uninstall, and
//! the client's own `mcp add` command where it has one.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn install(home: &Path, path_dir: &Path, args: &[&str]) -> Output {
    Command::new(caesar_bin())
        .arg("--json")
        .arg("mcp")
        .arg("install")
        .args(args)
        .env("HOME", home)
        .env("PATH", path_dir)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODEX_HOME")
        .output()
        .unwrap()
}

fn result(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    json(String::from_utf8_lossy(&o.stdout).trim())
}

#[test]
fn every_client_gets_its_entry_merged_once_and_removed_cleanly() {
    let home = tempfile::tempdir().unwrap();
    let empty_path = tempfile::tempdir().unwrap();
    let h = home.path();
    // Existing configs with other servers and a comment, which must survive.
    std::fs::create_dir_all(h.join(".cursor")).unwrap();
    std::fs::write(
        h.join(".cursor/mcp.json"),
        "{\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"}\n    }\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(h.join(".codex")).unwrap();
    std::fs::write(
        h.join(".codex/config.toml"),
        "# my codex\nmodel = \"o3\"\n\n[mcp_servers.other]\ncommand = \"x\"\n",
    )
    .unwrap();

    let files = [
        ("claude", ".claude.json", "/mcpServers/caesar/command"),
        ("codex", ".codex/config.toml", ""),
        ("gemini", ".gemini/settings.json", "/mcpServers/caesar/command"),
        ("qwen", ".qwen/settings.json", "/mcpServers/caesar/command"),
        ("cursor", ".cursor/mcp.json", "/mcpServers/caesar/command"),
        ("vscode", ".config/Code/User/mcp.json", "/servers/caesar/command"),
        ("opencode", ".config/opencode/opencode.json", "/mcp/caesar/command/0"),
        ("copilot", ".copilot/mcp-config.json", "/mcpServers/caesar/command"),
    ];
    for (client, file, pointer) in files {
        let path = h.join(file);
        let dry = result(&install(h, empty_path.path(), &[client, "--dry-run"]));
        assert_eq!(dry["changed"], true, "{client}");
        let before = std::fs::read_to_string(&path).ok();
        assert_eq!(before, std::fs::read_to_string(&path).ok(), "{client}: --dry-run writes nothing");

        let first = result(&install(h, empty_path.path(), &[client]));
        assert_eq!(first["changed"], true, "{client}");
        let text = std::fs::read_to_string(&path).unwrap();
        if client == "codex" {
            assert!(text.starts_with("# my codex\nmodel = \"o3\""), "{text}");
            assert!(text.contains("[mcp_servers.other]") && text.contains("[mcp_servers.caesar]"), "{text}");
            assert!(text.contains("caesar-mcp"), "{text}");
            // caesar_await blocks up to 600 s; codex's default is 60 s.
            assert!(text.contains("tool_timeout_sec = 660"), "{text}");
        } else {
            let v = json(&text);
            assert!(v.pointer(pointer).and_then(|c| c.as_str()).unwrap().ends_with("caesar-mcp"), "{client}: {v}");
            if client == "gemini" || client == "qwen" {
                assert_eq!(v.pointer("/mcpServers/caesar/timeout"), Some(&serde_json::json!(660_000)), "{v}");
            }
        }
        let again = result(&install(h, empty_path.path(), &[client]));
        assert_eq!(again["changed"], false, "{client}: installing twice changes nothing");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);

        let removed = result(&install(h, empty_path.path(), &[client, "--uninstall"]));
        assert_eq!(removed["changed"], true, "{client}");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("caesar-mcp"), "{client}");
    }
    // Other entries, key order and indentation survived in the JSON file.
    let cursor = std::fs::read_to_string(h.join(".cursor/mcp.json")).unwrap();
    assert!(cursor.contains("\n        \"other\""), "four-space indentation kept: {cursor}");
    let codex = std::fs::read_to_string(h.join(".codex/config.toml")).unwrap();
    assert!(codex.contains("[mcp_servers.other]") && !codex.contains("caesar"), "{codex}");

    let o = install(h, empty_path.path(), &["notepad"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("claude, codex"), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn a_client_with_its_own_mcp_add_command_is_asked_to_do_it() {
    let home = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("claude.args");
    let fake = bin.path().join("claude");
    std::fs::write(&fake, format!("#!/bin/sh\necho \"$@\" >> '{}'\n", log.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let o = Command::new(caesar_bin())
        .args(["--json", "mcp", "install", "claude"])
        .env("HOME", home.path())
        .env("PATH", &path)
        .output()
        .unwrap();
    let v = result(&o);
    assert_eq!(v["command"][1], "mcp");
    let args = std::fs::read_to_string(&log).unwrap();
    assert!(args.starts_with("mcp add --scope user caesar -- ") && args.trim_end().ends_with("caesar-mcp"), "{args}");
}

#[test]
fn codex_gets_its_own_mcp_add_then_a_tool_timeout_longer_than_an_await() {
    let home = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("codex.args");
    let config = home.path().join(".codex/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "# mine\nmodel = \"o3\"\n").unwrap();
    // What `codex mcp add caesar -- <cmd>` does to the file, and nothing more.
    let fake = bin.path().join("codex");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nfor a; do last=$a; done\nprintf '\\n[mcp_servers.caesar]\\ncommand = \"%s\"\\n' \"$last\" >> '{}'\n",
            log.display(),
            config.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let run = |args: &[&str]| {
        Command::new(caesar_bin())
            .args(["--json", "mcp", "install", "codex"])
            .args(args)
            .env("HOME", home.path())
            .env("PATH", &path)
            .env_remove("CODEX_HOME")
            .output()
            .unwrap()
    };
    let dry = result(&run(&["--dry-run"]));
    assert_eq!(dry["changed"], true);
    assert!(!log.exists(), "--dry-run runs nothing");
    let v = result(&run(&[]));
    assert_eq!(v["command"][1], "mcp");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with("# mine\nmodel = \"o3\""), "{text}");
    assert!(text.contains("[mcp_servers.caesar]") && text.contains("tool_timeout_sec = 660"), "{text}");
    // `codex exec` refuses a server's tools unless they are approved beforehand.
    assert!(text.contains("default_tools_approval_mode = \"approve\""), "{text}");
    let again = result(&run(&[]));
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1, "codex mcp add ran once");
}

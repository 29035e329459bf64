//! Unit tests of the config screen's state: each key yields the edit the
//! daemon's `EditConfig` takes, in the layer shown.

use super::*;

fn snapshot() -> Snapshot {
    let config = json!({
        "project": "/src/app",
        "policy": {"allowed": [], "denied": ["grok"], "max_parallel": 4, "default_timeout_ms": 600000},
        "provenance": {"policy.denied": "global", "policy.max_parallel": "project"},
        "models": {"codex": {"model": "o4", "origin": "local"}},
        "roles": [
            {"name": "reviewer", "purpose": "reviews", "agents": ["claude", "codex"], "mode": "read-only",
             "isolation": "inplace", "network": "auto", "timeout_ms": 600000, "origin": "default"},
            {"name": "doc", "purpose": "", "agents": ["codex"], "mode": "write", "isolation": "worktree",
             "network": "off", "timeout_ms": 90000, "system_prompt_file": "prompts/doc.md", "origin": "project"}
        ],
        "files": ["/src/app/.caesar/config.toml"]
    });
    let agents = vec![
        ("codex".to_owned(), true, true, String::new(), "gpt-5".to_owned()),
        ("grok".to_owned(), false, false, "denied".to_owned(), String::new()),
    ];
    Snapshot::from_daemon(&config, &agents)
}

fn typed(state: &mut State, text: &str) -> Option<Command> {
    for c in text.chars() {
        assert_eq!(state.on_key(Key::Char(c)), None);
    }
    state.on_key(Key::Enter)
}

#[test]
fn the_snapshot_carries_provenance_and_policy_in_file_terms() {
    let s = snapshot();
    assert_eq!(s.agents[0].model, Some(("o4".to_owned(), "local".to_owned())));
    assert!(s.agents[1].denied && !s.agents[0].denied);
    let timeout = s.policy.iter().find(|p| p.key == "default_timeout").unwrap();
    assert_eq!((timeout.value.as_str(), timeout.origin.as_str()), ("10m", "default"));
    let denied = s.policy.iter().find(|p| p.key == "denied").unwrap();
    assert_eq!((denied.value.as_str(), denied.origin.as_str()), ("grok", "global"));
    assert_eq!(s.roles[1].prompt_file.as_deref(), Some("prompts/doc.md"));
}

#[test]
fn agent_keys_enable_disable_and_set_the_model_in_the_chosen_layer() {
    let mut st = State::new(snapshot());
    assert_eq!(
        st.on_key(Key::Char('d')),
        Some(Command::Edit {
            layer: Layer::Project,
            edit: json!({"op": "policy_list", "field": "denied", "id": "codex", "present": true})
        })
    );
    st.on_key(Key::Char('l'));
    assert_eq!(st.layer, Layer::Local);
    assert!(st.status.contains("local layer"), "{}", st.status);
    st.on_key(Key::Down);
    assert_eq!(
        st.on_key(Key::Char('e')),
        Some(Command::Edit {
            layer: Layer::Local,
            edit: json!({"op": "policy_list", "field": "denied", "id": "grok", "present": false})
        })
    );
    st.on_key(Key::Up);
    assert_eq!(st.on_key(Key::Char('m')), None);
    // The current model is there to edit; Backspace twice, then type.
    assert_eq!(st.input.as_ref().unwrap().buffer, "o4");
    st.on_key(Key::Backspace);
    st.on_key(Key::Backspace);
    assert_eq!(
        typed(&mut st, "o3-mini"),
        Some(Command::Edit {
            layer: Layer::Local,
            edit: json!({"op": "set_model", "agent": "codex", "model": "o3-mini"})
        })
    );
    assert!(st.input.is_none());
    // An empty model unsets it; Esc abandons a line.
    st.on_key(Key::Char('m'));
    st.on_key(Key::Esc);
    assert!(st.input.is_none());
    assert_eq!(st.on_key(Key::Char('q')), Some(Command::Quit));
}

#[test]
fn role_keys_write_the_whole_role_with_one_field_changed() {
    let mut st = State::new(snapshot());
    st.on_key(Key::Char('2'));
    assert_eq!(st.tab, Tab::Roles);
    let Some(Command::Edit { edit, .. }) = st.on_key(Key::Char('m')) else { panic!("no edit") };
    assert_eq!(edit["op"], "role_add");
    assert_eq!(edit["role"]["mode"], "write");
    assert_eq!(edit["role"]["agents"], json!(["claude", "codex"]));
    assert_eq!(edit["role"]["timeout"], "600s");
    let Some(Command::Edit { edit, .. }) = st.on_key(Key::Char('i')) else { panic!("no edit") };
    assert_eq!(edit["role"]["isolation"], "auto", "inplace cycles to auto");
    let Some(Command::Edit { edit, .. }) = st.on_key(Key::Char('n')) else { panic!("no edit") };
    assert_eq!(edit["role"]["network"], "on");

    st.on_key(Key::Char('c'));
    for _ in 0.."claude, codex".len() {
        st.on_key(Key::Backspace);
    }
    let Some(Command::Edit { edit, .. }) = typed(&mut st, "gemini, claude") else { panic!("no edit") };
    assert_eq!(edit["role"]["agents"], json!(["gemini", "claude"]));
    st.on_key(Key::Char('c'));
    for _ in 0.."claude, codex".len() {
        st.on_key(Key::Backspace);
    }
    assert_eq!(st.on_key(Key::Enter), None, "an empty chain is refused");
    assert!(st.status_is_error && st.status.contains("at least one agent"));

    // The built-in role has no prompt file: `o` says how to name one.
    assert_eq!(st.on_key(Key::Char('o')), None);
    assert!(st.status.contains("press f"), "{}", st.status);
    st.on_key(Key::Down);
    assert_eq!(st.on_key(Key::Char('o')), Some(Command::OpenFile { path: "/src/app/.caesar/prompts/doc.md".into() }));
    st.on_key(Key::Char('f'));
    let Some(Command::Edit { edit, .. }) = typed(&mut st, "2") else { panic!("no edit") };
    assert_eq!(edit["role"]["system_prompt_file"], "prompts/doc.md2");
    assert_eq!(edit["role"]["timeout"], "90s");
}

#[test]
fn policy_values_and_lists_are_typed_and_checked() {
    let mut st = State::new(snapshot());
    st.on_key(Key::Char('3'));
    let max = st.snapshot.policy.iter().position(|p| p.key == "max_parallel").unwrap();
    for _ in 0..max {
        st.on_key(Key::Down);
    }
    st.on_key(Key::Enter);
    st.on_key(Key::Backspace);
    assert_eq!(
        typed(&mut st, "2"),
        Some(Command::Edit {
            layer: Layer::Project,
            edit: json!({"op": "policy_set", "key": "max_parallel", "value": "2"})
        })
    );
    for _ in 0..10 {
        st.on_key(Key::Up);
    }
    assert_eq!(st.snapshot.policy[0].key, "allowed");
    st.on_key(Key::Enter);
    assert_eq!(typed(&mut st, "codex"), None, "a list edit needs + or -");
    assert!(st.status.contains("+id"), "{}", st.status);
    st.on_key(Key::Enter);
    assert_eq!(
        typed(&mut st, "+codex"),
        Some(Command::Edit {
            layer: Layer::Project,
            edit: json!({"op": "policy_list", "field": "allowed", "id": "codex", "present": true})
        })
    );
}

#[test]
fn the_mcp_tab_previews_installs_and_uninstalls() {
    let mut st = State::new(snapshot());
    st.on_key(Key::BackTab);
    assert_eq!(st.tab, Tab::Mcp);
    st.on_key(Key::Down);
    assert_eq!(
        st.on_key(Key::Enter),
        Some(Command::McpInstall { client: "codex".into(), uninstall: false, dry_run: true })
    );
    assert_eq!(
        st.on_key(Key::Char('x')),
        Some(Command::McpInstall { client: "codex".into(), uninstall: true, dry_run: false })
    );
    // Selection stays in range after a reload with fewer rows.
    st.on_key(Key::Char('1'));
    st.on_key(Key::Down);
    st.reload(Snapshot { agents: vec![AgentRow::default()], ..snapshot() });
    assert_eq!(st.selected(Tab::Agents), 0);
}

#[test]
fn durations_read_as_written() {
    assert_eq!(human_ms(90_000), "1m30s");
    assert_eq!(human_ms(3_600_000), "1h");
    assert_eq!(human_ms(1500), "1500ms");
    assert_eq!(human_ms(0), "0s");
}

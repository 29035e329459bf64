//! Tests of [`super`]: a role's pick, the network decision and the
//! recursion rule; the prompt files in `prompt_files` (unix).
use super::*;

fn net(pref: NetworkPref, control: NetworkControl, mode: Mode) -> (Result<NetworkDecision>, usize, usize) {
    let mut w = BTreeMap::new();
    let mut f = Vec::new();
    let d = decide_network("x", pref, control, mode, &mut w, &mut f);
    (d, w.len(), f.len())
}

#[test]
fn network_decisions_follow_the_capability() {
    use NetworkControl as C;
    use NetworkPref as P;
    let (d, w, f) = net(P::On, C::Controllable, Mode::ReadOnly);
    assert_eq!((d.unwrap(), w, f), (NetworkDecision { request: Some(true), available: true }, 0, 0));
    assert!(matches!(net(P::On, C::None, Mode::Write).0, Err(Error::Refused(_))));
    assert!(matches!(net(P::On, C::WriteOnly, Mode::ReadOnly).0, Err(Error::Refused(_))));
    let (d, w, _) = net(P::Off, C::Open, Mode::Write);
    assert_eq!((d.unwrap().available, w), (true, 1), "off on an open agent warns");
    let (d, w, _) = net(P::Off, C::WriteOnly, Mode::Write);
    assert_eq!((d.unwrap(), w), (NetworkDecision { request: Some(false), available: false }, 0));
    let (d, _, f) = net(P::Auto, C::WriteOnly, Mode::ReadOnly);
    assert_eq!((d.unwrap().available, f), (false, 1), "auto where it is cut gives an info finding");
    let (d, w, f) = net(P::Auto, C::Open, Mode::Write);
    assert_eq!((d.unwrap(), w, f), (NetworkDecision { request: Option::None, available: true }, 0, 0));
}

fn delegate(agent: Option<&str>) -> DelegateInput {
    DelegateInput {
        objective: "o".into(),
        agent: agent.map(str::to_owned),
        role: None,
        mode: None,
        isolation: None,
        network: None,
        context: String::new(),
        constraints: vec![],
        acceptance_criteria: vec![],
        model: None,
        timeout_ms: None,
        channel: false,
        workspace: String::new(),
        session_id: None,
        effort: None,
        depth: 0,
        ..Default::default()
    }
}

fn declared(config: &mut Config, id: &str, bin: &str) {
    config
        .agents
        .push((AgentDef { id: id.into(), bin: bin.into(), ..Default::default() }, crate::config::Origin::Project));
}

#[test]
fn no_agent_named_picks_the_first_installed_and_allowed_and_says_why() {
    let mut config = Config::default();
    // Native providers are looked up by their default names; none of
    // them is `ghost-…`, so point them all at nothing through [bin].
    for spec in provider::all() {
        config.bin.insert(spec.id.to_string(), ("/nonexistent/ghost".to_owned(), crate::config::Origin::Project));
    }
    declared(&mut config, "missing", "/nonexistent/missing-agent");
    declared(&mut config, "denied", "sh");
    declared(&mut config, "present", "sh");
    config.policy.denied = vec!["denied".into()];
    let chain = default_role(&config);
    assert_eq!(&chain.agents[..3], ["missing", "denied", "present"], "[[agent]] entries first");
    assert_eq!(chain.agents.len(), 3 + provider::all().len());
    let r = resolve(&config, Path::new("/tmp"), &delegate(None)).unwrap();
    assert_eq!(r.agent, "present");
    let note = &r.warnings[AGENT_CHOICE];
    assert!(note.contains("picked `present`"), "{note}");
    assert!(note.contains("missing: not installed") && note.contains("denied: denied by policy"), "{note}");
    // Naming the agent says nothing about a choice.
    let r = resolve(&config, Path::new("/tmp"), &delegate(Some("present"))).unwrap();
    assert!(!r.warnings.contains_key(AGENT_CHOICE));
}

#[test]
fn with_no_agent_installed_the_refusal_lists_the_supported_ones_and_how_to_install() {
    let mut config = Config::default();
    for spec in provider::all() {
        config.bin.insert(spec.id.to_string(), ("/nonexistent/ghost".to_owned(), crate::config::Origin::Project));
    }
    let Err(Error::Precondition(msg)) = resolve(&config, Path::new("/tmp"), &delegate(None)) else {
        panic!("expected a precondition error");
    };
    assert!(msg.starts_with("no agent CLI is installed"), "{msg}");
    assert!(msg.contains("supported agents: claude, codex, gemini"), "{msg}");
    assert!(msg.contains("npm install -g @openai/codex"), "{msg}");
    assert!(msg.contains("[bin]"), "{msg}");
}

#[test]
fn a_configured_default_role_is_the_chain_and_its_mode_applies() {
    let mut config = Config::default();
    declared(&mut config, "present", "sh");
    let role = Role {
        name: DEFAULT_ROLE.into(),
        purpose: String::new(),
        agents: vec!["present".into()],
        mode: Mode::Write,
        isolation: IsolationPref::Auto,
        network: NetworkPref::Auto,
        timeout_ms: 1234,
        model: None,
        system_prompt_file: None,
    };
    config.roles.push((role, crate::config::Origin::Project));
    let r = resolve(&config, Path::new("/tmp"), &delegate(None)).unwrap();
    assert_eq!((r.agent.as_str(), r.mode, r.timeout_ms), ("present", Mode::Write, 1234));
    assert!(r.warnings[AGENT_CHOICE].contains("picked `present`"));
}

#[test]
fn the_fallback_chain_skips_missing_and_refused_agents() {
    let mut config = Config::default();
    config.agents.push((
        AgentDef { id: "present".into(), bin: "sh".into(), ..Default::default() },
        crate::config::Origin::Project,
    ));
    config.agents.push((
        AgentDef { id: "denied".into(), bin: "sh".into(), ..Default::default() },
        crate::config::Origin::Project,
    ));
    config.policy.denied = vec!["denied".into()];
    let role = Role {
        name: "r".into(),
        purpose: String::new(),
        agents: vec!["ghost-agent".into(), "denied".into(), "present".into()],
        mode: Mode::ReadOnly,
        isolation: IsolationPref::Auto,
        network: NetworkPref::Auto,
        timeout_ms: 1,
        model: None,
        system_prompt_file: None,
    };
    let pick = pick_for_role(&config, &role);
    assert_eq!(pick.agent.as_deref(), Some("present"));
    assert_eq!(pick.skipped.len(), 2);
    assert!(pick.skipped[0].1.contains("not installed"));
    assert!(pick.skipped[1].1.contains("denied"));
    config.policy.denied.push("present".into());
    let none = pick_for_role(&config, &role);
    assert_eq!(none.agent, None);
    assert!(none.reason.contains("no agent of role `r`"));
}

fn near(agent: &str, resets_at_ms: i64, now: i64) -> crate::quota::Entry {
    let signal = crate::quota::QuotaSignal {
        level: crate::quota::Level::Near,
        resets_at_ms: Some(resets_at_ms),
        source: "rate_limit_event".into(),
        account: None,
        detail: "five_hour".into(),
    };
    match crate::quota::bound(agent, agent, &signal, now) {
        crate::quota::Bounded::Record { entry, .. } => entry,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_role_passes_over_an_agent_near_its_limit_and_says_why() {
    let mut config = Config::default();
    declared(&mut config, "first", "sh");
    declared(&mut config, "second", "sh");
    let role = Role {
        name: "r".into(),
        purpose: String::new(),
        agents: vec!["first".into(), "second".into()],
        mode: Mode::ReadOnly,
        isolation: IsolationPref::Auto,
        network: NetworkPref::Auto,
        timeout_ms: 1,
        model: None,
        system_prompt_file: None,
    };
    let now = 1_780_000_000_000;
    let headroom = Headroom::at(vec![near("first", now + 3_600_000, now)], now);
    let pick = pick_for_role_with(&config, &role, Host::Unknown, &headroom);
    assert_eq!(pick.agent.as_deref(), Some("second"));
    assert!(
        pick.reason.contains("with quota headroom") && pick.reason.contains("`first` is near limit until"),
        "{}",
        pick.reason
    );
    assert!(pick.skipped[0].1.contains("rate_limit_event"), "{:?}", pick.skipped);
    // The roles' view says the same.
    config.roles.push((role.clone(), crate::config::Origin::Project));
    let view = roles_view_with(&config, Host::Unknown, &headroom);
    let r = view.iter().find(|v| v["name"] == "r").unwrap();
    assert_eq!(r["would_pick"], "second");
    assert!(r["reason"].as_str().unwrap().contains("near limit"), "{r}");
    // Both near: the one that resets soonest, and the reason says every one is limited.
    let both = Headroom::at(vec![near("first", now + 3_600_000, now), near("second", now + 60_000, now)], now);
    let pick = pick_for_role_with(&config, &role, Host::Unknown, &both);
    assert_eq!(pick.agent.as_deref(), Some("second"));
    assert!(pick.reason.starts_with("every installed and allowed agent"), "{}", pick.reason);
    // A delegation through the role carries the reason as its agent choice.
    let project = tempfile::tempdir().unwrap();
    let input = DelegateInput { role: Some("r".into()), ..delegate(None) };
    let r = resolve_with(&config, project.path(), &input, &headroom).unwrap();
    assert_eq!(r.agent, "second");
    assert!(r.warnings[AGENT_CHOICE].contains("with quota headroom"), "{:?}", r.warnings);
    // Without a ledger, the first, and no note.
    let r = resolve(&config, project.path(), &input).unwrap();
    assert_eq!((r.agent.as_str(), r.warnings.get(AGENT_CHOICE)), ("first", None));
    // Named outright: kept, with a warning.
    let named = DelegateInput { agent: Some("first".into()), ..delegate(None) };
    let r = resolve_with(&config, project.path(), &named, &headroom).unwrap();
    assert_eq!(r.agent, "first");
    assert!(r.warnings[QUOTA_WARNING].contains("near limit until"), "{:?}", r.warnings);
}

#[cfg(unix)]
mod prompt_files {
    use super::*;

    /// A project whose committed config gives role `r` (run by `sh`) the
    /// `system_prompt_file` named.
    fn project_with_prompt_file(file: &str) -> (tempfile::TempDir, tempfile::TempDir) {
        let global = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".caesar/roles")).unwrap();
        std::fs::write(
            project.path().join(".caesar/config.toml"),
            format!(
                "[[agent]]\nid = \"a\"\nbin = \"sh\"\nargs = [\"{{{{prompt}}}}\"]\n[[role]]\nname = \"r\"\nagents = [\"a\"]\nmode = \"read-only\"\nsystem_prompt_file = \"{file}\"\n"
            ),
        )
        .unwrap();
        (global, project)
    }

    fn resolve_role(global: &Path, project: &Path) -> Result<String> {
        let config = Config::load(global, project)?;
        let input = DelegateInput {
            objective: "x".into(),
            role: Some("r".into()),
            workspace: project.display().to_string(),
            ..Default::default()
        };
        resolve(&config, project, &input).map(|r| r.system_prompt)
    }

    #[test]
    fn a_dot_caesar_linked_elsewhere_gives_no_prompt() {
        let p = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(elsewhere.path().join("roles")).unwrap();
        std::fs::write(elsewhere.path().join("roles/r.md"), "SECRET").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), p.path().join(".caesar")).unwrap();
        let e = read_system_prompt(p.path(), "r", "roles/r.md").unwrap_err().to_string();
        assert!(e.contains("symbolic link") && !e.contains("SECRET"), "{e}");
    }

    #[test]
    fn a_prompt_inside_dot_caesar_is_read() {
        let (g, p) = project_with_prompt_file("roles/r.md");
        std::fs::write(p.path().join(".caesar/roles/r.md"), "be careful").unwrap();
        assert_eq!(resolve_role(g.path(), p.path()).unwrap(), "be careful");
        let (g, p) = project_with_prompt_file("roles/missing.md");
        assert_eq!(resolve_role(g.path(), p.path()).unwrap(), "");
    }

    #[test]
    fn a_prompt_file_outside_dot_caesar_is_refused_by_field_and_file() {
        // What the audit did: read /etc/shadow (here a file beside the
        // project, which the test can create) into the prompt.
        for file in ["../../../../../../etc/shadow", "/etc/passwd", "../outside.md"] {
            let (g, p) = project_with_prompt_file(file);
            std::fs::write(p.path().join("outside.md"), "SECRET").unwrap();
            let e = resolve_role(g.path(), p.path()).unwrap_err().to_string();
            assert!(e.contains("system_prompt_file") && e.contains(file) && e.contains("relative to .caesar/"), "{e}");
            assert!(!e.contains("SECRET"));
        }
        // A link out, as the file or as a directory on the way.
        let (g, p) = project_with_prompt_file("roles/r.md");
        std::fs::write(p.path().join("outside.md"), "SECRET").unwrap();
        std::os::unix::fs::symlink(p.path().join("outside.md"), p.path().join(".caesar/roles/r.md")).unwrap();
        let e = resolve_role(g.path(), p.path()).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let (g, p) = project_with_prompt_file("up/outside.md");
        std::os::unix::fs::symlink(p.path(), p.path().join(".caesar/up")).unwrap();
        std::fs::write(p.path().join("outside.md"), "SECRET").unwrap();
        assert!(resolve_role(g.path(), p.path()).unwrap_err().to_string().contains("symbolic link"));
        // And no gigabyte: past the cap it is refused.
        let (g, p) = project_with_prompt_file("roles/big.md");
        std::fs::write(p.path().join(".caesar/roles/big.md"), vec![b'x'; crate::safe_fs::PROMPT_CAP as usize + 1])
            .unwrap();
        assert!(resolve_role(g.path(), p.path()).unwrap_err().to_string().contains("cap"));
    }
}

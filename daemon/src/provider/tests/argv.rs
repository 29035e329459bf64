//! The command line, environment and files each adapter builds for a launch.

use super::*;

// ---------------------------------------------------------------------------------------------
// argv
// ---------------------------------------------------------------------------------------------

fn base_inv(mode: Mode) -> Invocation<'static> {
    Invocation { workspace: "/ws", ..Invocation::bare("Fix the bug", mode) }
}

fn args_of(id: &str, inv: &Invocation) -> Vec<String> {
    build_launch(crate::launch::ProviderId::of(id), inv).expect(id).args
}

#[test]
fn argv_per_provider_and_mode() {
    const PROMPT_ON_STDIN: &[&str] = &["codex", "gemini", "opencode", "copilot", "qwen"];
    let table: &[(&str, Mode, &[&str])] = &[
        (
            "claude",
            ReadOnly,
            &[
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "plan",
            ],
        ),
        (
            "claude",
            Write,
            &[
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-prompt-tool",
                "stdio",
                "--permission-mode",
                "acceptEdits",
            ],
        ),
        ("codex", ReadOnly, &["exec", "--json", "-s", "read-only", "-C", "/ws", "--skip-git-repo-check", "--", "-"]),
        (
            "codex",
            Write,
            &[
                "exec",
                "--json",
                "-s",
                "workspace-write",
                "-C",
                "/ws",
                "--skip-git-repo-check",
                "-c",
                "sandbox_workspace_write.exclude_slash_tmp=true",
                "--",
                "-",
            ],
        ),
        ("gemini", ReadOnly, &["-o", "stream-json", "--approval-mode", "default", "--skip-trust"]),
        ("gemini", Write, &["-o", "stream-json", "--approval-mode", "yolo", "--skip-trust"]),
        ("opencode", ReadOnly, &["run", "--format", "json", "--agent", "plan"]),
        ("opencode", Write, &["run", "--format", "json"]),
        ("copilot", ReadOnly, &["--output-format", "json", "--no-ask-user"]),
        ("copilot", Write, &["--output-format", "json", "--no-ask-user", "--allow-all-tools"]),
        (
            "cursor-agent",
            ReadOnly,
            &["-p", "--output-format", "stream-json", "--mode", "plan", "--trust", "Fix the bug"],
        ),
        ("cursor-agent", Write, &["-p", "--output-format", "stream-json", "--force", "--trust", "Fix the bug"]),
        ("qwen", ReadOnly, &["--output-format", "stream-json", "--approval-mode", "plan"]),
        ("qwen", Write, &["--output-format", "stream-json", "--approval-mode", "yolo"]),
        (
            "grok",
            ReadOnly,
            &[
                "-p",
                "Fix the bug",
                "--output-format",
                "streaming-messages-json",
                "--sandbox",
                "read-only",
                "--always-approve",
            ],
        ),
        (
            "grok",
            Write,
            &[
                "-p",
                "Fix the bug",
                "--output-format",
                "streaming-messages-json",
                "--sandbox",
                "workspace",
                "--always-approve",
            ],
        ),
        ("codebuddy", ReadOnly, &["-p", "Fix the bug", "--output-format", "stream-json", "--permission-mode", "plan"]),
        ("codebuddy", Write, &["-p", "Fix the bug", "--output-format", "stream-json", "-y"]),
        ("antigravity", ReadOnly, &["--output-format", "stream-json", "-p", "Fix the bug"]),
        (
            "antigravity",
            Write,
            &["--output-format", "stream-json", "--dangerously-skip-permissions", "-p", "Fix the bug"],
        ),
    ];
    for (id, mode, want) in table {
        let launch = build_launch(crate::launch::ProviderId::of(id), &base_inv(*mode)).expect(id);
        assert_eq!(launch.args, *want, "{id} {mode:?}");
        if *id == "claude" {
            // The prompt goes on stdin, where the permission answers follow it.
            let Stdin::Control { initial, close_after } = &launch.stdin else { panic!("claude: no stdin protocol") };
            let line: serde_json::Value = serde_json::from_str(initial.trim_end()).unwrap();
            assert_eq!(line["message"]["content"], "Fix the bug");
            assert_eq!(close_after, r#"{"type":"result""#);
        } else if PROMPT_ON_STDIN.contains(id) {
            // Issue 19: the prompt on stdin, nothing of it in argv.
            assert_eq!(launch.stdin, Stdin::Prompt, "{id}: the prompt comes on stdin");
            assert!(!launch.args.iter().any(|a| a.contains("Fix the bug")), "{id}: no prompt in argv");
        } else {
            // The CLIs with no verified way but argv keep the prompt there (refused at
            // delegation past the kernel's limit, `prompt::check_args`).
            assert_eq!(launch.stdin, Stdin::Null, "{id}: stdin is /dev/null");
            assert!(launch.args.iter().any(|a| a.contains("Fix the bug")), "{id}: the prompt in argv");
        }
        assert!(launch.files.is_empty() && launch.workspace_files.is_empty(), "{id}");
    }
    // Every provider has a row per mode.
    for s in all() {
        for mode in [ReadOnly, Write] {
            assert!(table.iter().any(|(id, m, _)| *id == s.id.as_str() && *m == mode), "{}", s.id);
        }
    }
    assert!(build_launch(crate::launch::ProviderId::Generic, &base_inv(Write)).is_none());
}

fn env_of(launch: &Launch, key: &str) -> Option<String> {
    launch.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

fn json_arg(args: &[String], flag: &str) -> serde_json::Value {
    let i = args.iter().position(|a| a == flag).expect(flag);
    serde_json::from_str(&args[i + 1]).expect("JSON value")
}

const MCP_ARGS: &[String] = &[];

fn mcp_args() -> Vec<String> {
    vec!["/srv/x.py".to_owned(), "--stdio".to_owned()]
}

#[test]
fn claude_options_resume_and_mcp() {
    let args = mcp_args();
    let env = vec![("CAESAR_TASK_ID".to_owned(), "t_1".to_owned())];
    let tools: &[&str] = &["report_progress", "submit_report"];
    let inv = Invocation {
        model: Some("opus"),
        effort: Some("xhigh"),
        resume_session: Some("5234c1cd"),
        mcp: Some(McpServer { name: "orch", command: "python3", args: &args, env: &env, tools }),
        ..base_inv(ReadOnly)
    };
    let launch = build_launch(crate::launch::ProviderId::of("claude"), &inv).unwrap();
    let a = &launch.args;
    assert_eq!(
        a[..14],
        [
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "plan",
            "--model",
            "opus",
            "--effort",
            "xhigh",
            "--resume",
            "5234c1cd"
        ]
    );
    assert_eq!(a[14], "--mcp-config");
    assert_eq!(
        json_arg(a, "--mcp-config"),
        serde_json::json!({"mcpServers": {"orch": {"type": "stdio", "command": "python3",
            "args": ["/srv/x.py", "--stdio"], "env": {"CAESAR_TASK_ID": "t_1"}}}})
    );
    assert_eq!(
        a[16..],
        ["--strict-mcp-config", "--allowedTools", "mcp__orch__report_progress,mcp__orch__submit_report"]
    );
    assert_eq!(env_of(&launch, "CLAUDE_CODE_MAX_RETRIES").as_deref(), Some("0"));

    // No tool list: the whole server is allowed; a bad effort is dropped; a dash prompt is safe.
    let inv = Invocation {
        prompt: "--help me",
        effort: Some("extreme"),
        mcp: Some(McpServer { name: "orch", command: "python3", args: MCP_ARGS, env: &[], tools: &[] }),
        ..base_inv(Write)
    };
    let launch = build_launch(crate::launch::ProviderId::of("claude"), &inv).unwrap();
    let a = &launch.args;
    // The prompt is a message on stdin, never an argument that could pass for an option.
    assert!(!a.iter().any(|x| x.contains("help me")));
    let Stdin::Control { initial, .. } = &launch.stdin else { panic!("no stdin protocol") };
    assert!(initial.contains("--help me"));
    assert!(!a.contains(&"--effort".to_owned()));
    assert_eq!(a.last().map(String::as_str), Some("mcp__orch"));
}

#[test]
fn codex_options_resume_schema_network_and_mcp() {
    let args = mcp_args();
    let env = vec![("K".to_owned(), "va\"l".to_owned())];
    let inv = Invocation {
        model: Some("gpt-5-codex"),
        effort: Some("high"),
        output_schema_path: Some("/t/schema.json"),
        network: Some(true),
        mcp: Some(McpServer { name: "orch", command: "python3", args: &args, env: &env, tools: &[] }),
        ..base_inv(Write)
    };
    assert_eq!(
        args_of("codex", &inv),
        [
            "exec",
            "--json",
            "-s",
            "workspace-write",
            "-C",
            "/ws",
            "--skip-git-repo-check",
            "-m",
            "gpt-5-codex",
            "-c",
            "model_reasoning_effort=\"high\"",
            "-c",
            "sandbox_workspace_write.network_access=true",
            "-c",
            "sandbox_workspace_write.exclude_slash_tmp=true",
            "--output-schema",
            "/t/schema.json",
            "-c",
            "mcp_servers.orch={command=\"python3\",args=[\"/srv/x.py\",\"--stdio\"],env={K=\"va\\\"l\"},default_tools_approval_mode=\"approve\"}",
            "--",
            "-",
        ]
    );
    // Resume: `exec resume`, sandbox through -c, no -C, id then `-` (the prompt on stdin) after `--`.
    let inv = Invocation {
        resume_session: Some("01a22e15-a4cf"),
        network: Some(true),
        prompt: "-continue",
        ..base_inv(ReadOnly)
    };
    assert_eq!(
        args_of("codex", &inv),
        [
            "exec",
            "resume",
            "--json",
            "-c",
            "sandbox_mode=\"read-only\"",
            "--skip-git-repo-check",
            "--",
            "01a22e15-a4cf",
            "-"
        ]
    );
}

#[test]
fn gemini_and_qwen_write_trusted_mcp_settings_into_the_workspace() {
    let args = mcp_args();
    let mcp = McpServer { name: "orch", command: "python3", args: &args, env: &[], tools: &[] };
    for (id, path) in [("gemini", ".gemini/settings.json"), ("qwen", ".qwen/settings.json")] {
        let inv = Invocation {
            model: Some("gemini-2.5-pro"),
            resume_session: Some("sess-1"),
            mcp: Some(mcp),
            ..base_inv(Write)
        };
        let launch = build_launch(crate::launch::ProviderId::of(id), &inv).unwrap();
        assert_eq!(launch.workspace_files.len(), 1, "{id}");
        assert_eq!(launch.workspace_files[0].0, path);
        let settings: serde_json::Value = serde_json::from_str(&launch.workspace_files[0].1).unwrap();
        assert_eq!(
            settings,
            serde_json::json!({"mcpServers": {"orch": {"command": "python3", "args": ["/srv/x.py", "--stdio"], "trust": true}}})
        );
        assert!(launch.args.windows(2).any(|w| w == ["-m", "gemini-2.5-pro"]), "{id}");
    }
    let g = build_launch(
        crate::launch::ProviderId::of("gemini"),
        &Invocation { resume_session: Some("sess-1"), prompt: "-x", ..base_inv(ReadOnly) },
    )
    .unwrap();
    assert!(!g.args.iter().any(|a| a.contains("-x") || a == "-p"), "the prompt comes on stdin: {:?}", g.args);
    assert_eq!(g.stdin, Stdin::Prompt);
    assert!(g.args.windows(2).any(|w| w == ["-r", "sess-1"]));
    assert_eq!(env_of(&g, "GEMINI_CLI_NO_RELAUNCH").as_deref(), Some("true"));
    let q = args_of("qwen", &Invocation { resume_session: Some("sess-1"), ..base_inv(ReadOnly) });
    assert!(q.windows(2).any(|w| w == ["--resume", "sess-1"]));
}

#[test]
fn opencode_options_and_config_content() {
    let args = mcp_args();
    let env = vec![("K".to_owned(), "V".to_owned())];
    let inv = Invocation {
        model: Some("anthropic/claude-sonnet-4-5"),
        effort: Some("high"),
        resume_session: Some("ses_A"),
        mcp: Some(McpServer { name: "orch", command: "python3", args: &args, env: &env, tools: &[] }),
        ..base_inv(ReadOnly)
    };
    let launch = build_launch(crate::launch::ProviderId::of("opencode"), &inv).unwrap();
    assert_eq!(
        launch.args,
        [
            "run",
            "--format",
            "json",
            "-m",
            "anthropic/claude-sonnet-4-5",
            "--variant",
            "high",
            "-s",
            "ses_A",
            "--agent",
            "plan"
        ]
    );
    assert_eq!(launch.stdin, Stdin::Prompt, "`run` reads its message from stdin");
    let config: serde_json::Value = serde_json::from_str(&env_of(&launch, "OPENCODE_CONFIG_CONTENT").unwrap()).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "permission": {"edit": "deny"},
            "mcp": {"orch": {"type": "local", "command": ["python3", "/srv/x.py", "--stdio"],
                             "enabled": true, "environment": {"K": "V"}}}
        })
    );
    assert_eq!(env_of(&launch, "OPENCODE_DISABLE_AUTOUPDATE").as_deref(), Some("1"));
    let w = build_launch(crate::launch::ProviderId::of("opencode"), &base_inv(Write)).unwrap();
    assert_eq!(env_of(&w, "OPENCODE_CONFIG_CONTENT"), None);
}

#[test]
fn copilot_options_and_mcp() {
    let args = mcp_args();
    let mcp = McpServer { name: "orch", command: "python3", args: &args, env: &[], tools: &[] };
    let inv = Invocation {
        model: Some("gpt-4.1"),
        effort: Some("medium"),
        resume_session: Some("d911b7f0"),
        mcp: Some(mcp),
        ..base_inv(ReadOnly)
    };
    let a = args_of("copilot", &inv);
    assert_eq!(
        a[..9],
        [
            "--output-format",
            "json",
            "--no-ask-user",
            "--model",
            "gpt-4.1",
            "--effort",
            "medium",
            "--resume=d911b7f0",
            "--additional-mcp-config"
        ]
    );
    assert_eq!(
        json_arg(&a, "--additional-mcp-config"),
        serde_json::json!({"mcpServers": {"orch": {"type": "local", "command": "python3",
            "args": ["/srv/x.py", "--stdio"], "tools": ["*"]}}})
    );
    assert_eq!(a.last().map(String::as_str), Some("--allow-tool=orch"));
    // In write mode --allow-all-tools already covers the server.
    let w = args_of("copilot", &Invocation { mcp: Some(mcp), ..base_inv(Write) });
    assert!(!w.iter().any(|x| x.starts_with("--allow-tool=")));
    assert!(w.contains(&"--allow-all-tools".to_owned()));
}

#[test]
fn cursor_grok_codebuddy_antigravity_options() {
    let args = mcp_args();
    let mcp = McpServer { name: "orch", command: "python3", args: &args, env: &[], tools: &["report_progress"] };
    let full = |mode| Invocation {
        model: Some("m1"),
        effort: Some("high"),
        resume_session: Some("S1"),
        output_schema_path: Some("/t/schema.json"),
        mcp: Some(mcp),
        ..base_inv(mode)
    };

    let c = build_launch(crate::launch::ProviderId::of("cursor-agent"), &full(Write)).unwrap();
    assert_eq!(
        c.args,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--force",
            "--trust",
            "--model",
            "m1",
            "--resume=S1",
            "--approve-mcps",
            "Fix the bug"
        ]
    );
    assert_eq!(c.workspace_files[0].0, ".cursor/mcp.json");

    let g = build_launch(crate::launch::ProviderId::of("grok"), &full(ReadOnly)).unwrap();
    assert_eq!(
        g.args,
        [
            "-p",
            "Fix the bug",
            "--output-format",
            "streaming-messages-json",
            "--sandbox",
            "read-only",
            "--always-approve",
            "-m",
            "m1",
            "--reasoning-effort",
            "high",
            "--resume",
            "S1"
        ]
    );
    assert_eq!(
        g.workspace_files,
        vec![(
            ".grok/config.toml".to_owned(),
            "[mcp_servers.orch]\ncommand = \"python3\"\nargs = [\"/srv/x.py\",\"--stdio\"]\n".to_owned()
        )]
    );

    let b = args_of("codebuddy", &full(Write));
    assert_eq!(b[..9], ["-p", "Fix the bug", "--output-format", "stream-json", "-y", "--model", "m1", "-r", "S1"]);
    assert_eq!(b[b.len() - 2..], ["--allowedTools", "mcp__orch__report_progress"]);
    assert!(!b.contains(&"--effort".to_owned()), "codebuddy has no effort allowlist");

    let a = build_launch(crate::launch::ProviderId::of("antigravity"), &full(Write)).unwrap();
    assert_eq!(
        a.args,
        [
            "--output-format",
            "stream-json",
            "--model",
            "m1",
            "--dangerously-skip-permissions",
            "--json-schema",
            "/t/schema.json",
            "-p",
            "Fix the bug"
        ]
    );
    assert!(a.workspace_files.is_empty(), "agy has no per-run MCP");
}

#[test]
fn specs_are_consistent() {
    let ids: Vec<&str> = all().iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, IDS);
    for s in all() {
        assert_eq!(spec(s.id.as_str()).map(|x| x.id), Some(s.id));
        assert_eq!(adapter(s.id).map(|x| x.id), Some(s.id));
        assert_eq!(s.capabilities.reasoning_effort, !s.efforts.is_empty(), "{}", s.id);
        assert_eq!(s.version_args, ["--version"]);
    }
    assert_eq!(spec("antigravity").map(|s| s.default_bin), Some("agy"));
    assert_eq!(spec("cursor-agent").map(|s| s.default_bin), Some("cursor-agent"));
    assert!(spec("nope").is_none() && "nope".parse::<crate::launch::ProviderId>().is_err());
    assert!(adapter(crate::launch::ProviderId::Generic).is_none() && spec("generic").is_none());
    assert_eq!(serde_json::to_value(NetworkControl::WriteOnly).unwrap(), serde_json::json!("write_only"));
}

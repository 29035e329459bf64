//! Each CLI's parser on the lines it really prints: messages, tools, usage, blockers.

use super::*;

// ---------------------------------------------------------------------------------------------
// claude
// ---------------------------------------------------------------------------------------------

#[test]
fn claude_caesar_capture_write_bash_and_report() {
    let r = replay("claude", "captures-caesar/claude");
    assert_eq!(r.sessions, vec!["5bfd702a-e8e5-48da-9b96-73d9d898804f"]);
    assert_eq!(
        r.tools(),
        vec![
            tool("Write", Started, "toolu_01USMPE3wuYZ96tgtZtJocgq"),
            tool("Write", Succeeded, "toolu_01USMPE3wuYZ96tgtZtJocgq"),
            tool("Bash", Started, "toolu_0149yp8BAiA5JSAPYmYPcAB5"),
            tool("Bash", Succeeded, "toolu_0149yp8BAiA5JSAPYmYPcAB5"),
            tool("Write", Started, "toolu_01WKmUC8WrLex22N6A8zmN1Q"),
            tool("Write", Succeeded, "toolu_01WKmUC8WrLex22N6A8zmN1Q"),
        ]
    );
    assert!(r.events.contains(&EventBody::ToolUse {
        tool: "Bash".into(),
        input_summary: "ls -1".into(),
        status: Succeeded,
        id: "toolu_0149yp8BAiA5JSAPYmYPcAB5".into(),
    }));
    let files = r.files();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0], ("/home/user/project/note.txt".into(), ChangeAction::Created));
    assert_eq!(r.count("message"), 2);
    // Redacted thinking blocks (empty text, signature only) and hook events yield nothing.
    assert_eq!(r.count("thinking"), 0);
    assert_eq!(r.count("unrecognized"), 0);
    assert!(r.final_text.as_deref().is_some_and(|t| t.starts_with("Task finished: `note.txt`")));
    // 8 + 13296 cache creation + 101187 cache read.
    assert_usage(&r.usage, usage(114_491, 918, Some(0.0), Some(28_242)));
    assert!(r.blockers.is_empty());
    assert_eq!(r.count("error"), 0);
}

#[test]
fn claude_text_only_and_resume_keep_their_session() {
    let r = replay("claude", "captures-local/claude-text-only");
    assert_eq!(r.session(), Some("c0c229a3-687b-416b-8090-93b5d36f7554"));
    assert_eq!(r.messages(), vec!["Hello from fake."]);
    assert_eq!(r.final_text.as_deref(), Some("Hello from fake."));
    assert_usage(&r.usage, usage(12, 5, Some(0.00011100000000000001), Some(79)));
    assert!(r.blockers.is_empty());
    assert_eq!(r.events.len(), 2, "{:?}", r.events);

    let resumed = replay("claude", "captures-local/claude-resume-text");
    let mcp = replay("claude", "captures-local/claude-mcp-report-progress");
    assert_eq!(resumed.sessions, vec!["5234c1cd-a1f3-4d27-a916-f4818f255c01"]);
    assert_eq!(resumed.session(), mcp.session());
    assert_eq!(resumed.final_text.as_deref(), Some("Hello from fake."));
}

#[test]
fn claude_mcp_tool_result_gets_its_name_from_the_tool_use() {
    let r = replay("claude", "captures-local/claude-mcp-report-progress");
    assert_eq!(
        r.tools(),
        vec![
            tool("mcp__orch__report_progress", Started, "toolu_fake1"),
            tool("mcp__orch__report_progress", Succeeded, "toolu_fake1"),
        ]
    );
    assert!(r.events.contains(&EventBody::ToolUse {
        tool: "mcp__orch__report_progress".into(),
        input_summary: "50% done".into(),
        status: Succeeded,
        id: "toolu_fake1".into(),
    }));
    assert_usage(&r.usage, usage(24, 25, Some(0.000447), Some(165)));
    assert!(r.blockers.is_empty());
}

#[test]
fn claude_auth_failures_are_auth_blockers() {
    for (name, needle) in
        [("captures-local/claude-not-logged-in", "Not logged in"), ("captures-local/claude-api-401", "401")]
    {
        let r = replay("claude", name);
        assert_eq!(r.blocker_kinds(), vec![Auth], "{name}");
        assert_eq!(r.blocker_events(), vec![Auth], "{name}");
        assert!(r.blockers[0].1.contains(needle), "{name}: {:?}", r.blockers);
        assert_eq!(r.fatal_errors(), 1, "{name}");
        assert_eq!(r.count("message"), 0, "the synthetic error text is not an answer");
        assert_eq!(r.final_text, None, "{name}");
    }
    let r = replay("claude", "captures-local/claude-not-logged-in");
    assert_eq!(r.session(), Some("9b13c828-8eab-426a-ab12-09249db75e0f"));
    assert_usage(&r.usage, usage(0, 0, Some(0.0), Some(222)));
}

#[test]
fn claude_429_is_a_rate_limit_blocker() {
    let r = replay("claude", "captures-local/claude-api-429");
    assert_eq!(r.blocker_kinds(), vec![RateLimit]);
    assert_eq!(r.blocker_events(), vec![RateLimit]);
    assert!(r.blockers[0].1.contains("(429)"));
    assert_eq!(r.session(), Some("61443cf9-3b72-4894-821b-583924141a2a"));
}

#[test]
fn claude_write_denials_are_permission_blockers() {
    for (name, needle) in [
        ("captures-local/claude-write-denied-default-mode", "haven't granted it yet"),
        ("captures-local/claude-write-denied-in-workdir", "while in plan mode"),
    ] {
        let r = replay("claude", name);
        assert_eq!(r.blocker_events(), vec![Permission], "{name}");
        assert!(r.blockers[0].1.contains(needle), "{name}: {:?}", r.blockers);
        assert_eq!(r.tools(), vec![tool("Write", Started, "toolu_fake1"), tool("Write", Failed, "toolu_fake1")]);
        assert!(r.files().is_empty(), "a denied write changed nothing");
        assert_eq!(r.final_text.as_deref(), Some("Hello from fake."));
        assert_eq!(r.fatal_errors(), 0);
    }
}

#[test]
fn claude_result_denial_list_alone_is_a_permission_blocker() {
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let line = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s1","permission_denials":[{"tool_name":"Bash","tool_use_id":"t","tool_input":{"command":"rm -rf x"}}]}"#;
    let out = p.parse_line(line, Stream::Stdout);
    assert_eq!(out.blocker, Some(crate::oacp::Blocker::new(Permission, "permission denied: Bash(rm -rf x)")));
    assert_eq!(out.final_text.as_deref(), Some("ok"));
}

#[test]
fn claude_rejected_rate_limit_event_and_retry_401() {
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let allowed = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":0,"rateLimitType":"five_hour"}}"#;
    assert_eq!(p.parse_line(allowed, Stream::Stdout), Parsed::default());
    let rejected = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1,"rateLimitType":"seven_day"}}"#;
    assert_eq!(p.parse_line(rejected, Stream::Stdout).blocker.map(|b| b.kind), Some(RateLimit));
    let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"error_status":401,"error":"authentication_failed"}"#;
    let out = p.parse_line(retry, Stream::Stdout);
    assert_eq!(out.blocker.map(|b| b.kind), Some(Auth));
    assert_eq!(out.events[0].kind(), "error");
}

#[test]
fn claude_rate_limit_warning_is_a_quota_signal_and_no_blocker() {
    use crate::quota::Level;
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let warning = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1767225600,"rateLimitType":"five_hour","utilization":0.92}}"#;
    let out = p.parse_line(warning, Stream::Stdout);
    assert_eq!((out.blocker, out.events.len()), (None, 0), "a warning blocks nothing");
    let q = out.quota.expect("a quota signal");
    assert_eq!(
        (q.level, q.resets_at_ms, q.source.as_str()),
        (Level::Near, Some(1_767_225_600_000), "rate_limit_event")
    );
    // A rejection is both the blocker and an exhausted signal; an unreadable one neither, nor a crash.
    let rejected = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1767225600}}"#;
    let out = p.parse_line(rejected, Stream::Stdout);
    assert_eq!(out.quota.map(|q| q.level), Some(Level::Exhausted));
    assert!(out.blocker.is_some());
    for odd in [
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":"soon"}}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":"warning"}"#,
        r#"{"type":"rate_limit_event"}"#,
    ] {
        let out = p.parse_line(odd, Stream::Stdout);
        assert!(out.blocker.is_none(), "{odd}");
        assert!(out.quota.as_ref().is_none_or(|q| q.resets_at_ms.is_none()), "{odd}: {out:?}");
    }
}

#[test]
fn codex_app_rate_limits_near_full_are_a_quota_signal() {
    use crate::quota::Level;
    let mut app = super::codex_app::CodexAppParser::default();
    let near = r#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":93,"windowDurationMins":300,"resetsAt":1796143042},"secondary":{"usedPercent":10,"resetsAt":1796999999}}}}"#;
    let q = app.parse_line(near, Stream::Stdout).quota.expect("a signal");
    assert_eq!((q.level, q.resets_at_ms), (Level::Near, Some(1_796_143_042_000)));
    assert!(q.detail.contains("primary window 93 %"), "{}", q.detail);
    let roomy = r#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":12,"resetsAt":1796143042}}}}"#;
    assert_eq!(app.parse_line(roomy, Stream::Stdout).quota, None);
    let odd = r#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":"lots"}}}}"#;
    assert_eq!(app.parse_line(odd, Stream::Stdout).quota, None);
}

#[test]
fn claude_rate_limit_event_carries_its_reset_time_onto_the_blocker() {
    // The shape claude 2.1.197 emits (its `rate_limit_info` builder, from the
    // `anthropic-ratelimit-unified-*` headers; `resetsAt` in unix seconds).
    let line = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1767225600,"rateLimitType":"five_hour","overageStatus":"rejected","overageDisabledReason":"org_level_disabled_until","isUsingOverage":false},"uuid":"4b0c9d3e-0000-4000-8000-000000000001","session_id":"9941e2f3-de12-4efd-8e1b-9182292e1dc0"}"#;
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let out = p.parse_line(line, Stream::Stdout);
    let blocker = out.blocker.expect("a blocker");
    assert_eq!(blocker.kind, RateLimit);
    assert_eq!(blocker.resets_at_ms, Some(1_767_225_600_000));
    assert!(
        blocker.message.contains("five_hour") && blocker.message.contains("2026-01-01T00:00:00"),
        "{}",
        blocker.message
    );
    // Only the overage's reset given: that one; none at all: no reset time.
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let overage = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"overage","overageResetsAt":1767229200}}"#;
    assert_eq!(p.parse_line(overage, Stream::Stdout).blocker.and_then(|b| b.resets_at_ms), Some(1_767_229_200_000));
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let bare = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected"}}"#;
    let b = p.parse_line(bare, Stream::Stdout).blocker.expect("a blocker");
    assert_eq!((b.kind, b.resets_at_ms), (RateLimit, None));
}

#[test]
fn claude_permission_prompt_becomes_an_ask_and_its_answer_a_control_response() {
    // [V] the line claude 2.1.197 printed for a Write in default mode with --permission-prompt-tool stdio.
    let line = r#"{"type":"control_request","request_id":"20452d68-9420-4440-9bd9-8d9ca294850d","request":{"subtype":"can_use_tool","tool_name":"Write","display_name":"Write","input":{"file_path":"/tmp/p/w.txt","content":"allowed\n"},"description":"w.txt","permission_suggestions":[{"type":"setMode","mode":"acceptEdits","destination":"session"}],"tool_use_id":"toolu_fake2"}}"#;
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let parsed = p.parse_line(line, Stream::Stdout);
    assert!(parsed.events.is_empty(), "{:?}", parsed.events);
    let ask = parsed.permission.expect("a permission ask");
    assert_eq!(ask.request_id, "20452d68-9420-4440-9bd9-8d9ca294850d");
    assert_eq!(ask.tool_name, "Write");
    // The whole input, then the agent's description of it.
    assert!(ask.summary.starts_with("Write with this whole input:\n{"), "{}", ask.summary);
    let (input, said) = ask.summary.split_once("(The agent describes this as: \"w.txt\"").unwrap();
    assert!(input.contains(r#""file_path": "/tmp/p/w.txt""#) && input.contains(r#""content": "allowed\n""#), "{input}");
    assert!(said.contains("its claim"));

    let allow = permission_response(crate::launch::ProviderId::of("claude"), &ask, true, "allow").unwrap();
    let v: serde_json::Value = serde_json::from_str(allow.trim_end()).unwrap();
    assert_eq!(v["type"], "control_response");
    assert_eq!(v["response"]["request_id"], ask.request_id.as_str());
    assert_eq!(v["response"]["response"]["behavior"], "allow");
    assert_eq!(v["response"]["response"]["updatedInput"]["file_path"], "/tmp/p/w.txt");
    let deny = permission_response(crate::launch::ProviderId::of("claude"), &ask, false, "deny: not there").unwrap();
    let v: serde_json::Value = serde_json::from_str(deny.trim_end()).unwrap();
    assert_eq!(v["response"]["response"], serde_json::json!({"behavior": "deny", "message": "deny: not there"}));
    assert!(permission_response(crate::launch::ProviderId::of("codex"), &ask, true, "allow").is_none());

    // Other control requests need no answer from caesar and ask nothing.
    let other = r#"{"type":"control_request","request_id":"x","request":{"subtype":"hook_callback"}}"#;
    assert!(p.parse_line(other, Stream::Stdout).permission.is_none());
}

#[test]
fn claude_stream_cut_before_result_keeps_last_text() {
    let mut p = parser(crate::launch::ProviderId::of("claude"));
    let line = r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"partial answer"}]},"session_id":"s9"}"#;
    let out = p.parse_line(line, Stream::Stdout);
    assert_eq!(out.session_id.as_deref(), Some("s9"));
    assert_eq!(
        out.events,
        vec![EventBody::Thinking { text: "hmm".into() }, EventBody::Message { text: "partial answer".into() }]
    );
    assert_eq!(out.final_text, None);
    assert_eq!(p.finish().final_text.as_deref(), Some("partial answer"));
}

// ---------------------------------------------------------------------------------------------
// codex
// ---------------------------------------------------------------------------------------------

#[test]
fn codex_caesar_capture_commands_file_change_and_report() {
    let r = replay("codex", "captures-caesar/codex");
    assert_eq!(r.sessions, vec!["019ff151-655f-7c83-a1c4-2cad58233736"]);
    assert_eq!(
        r.tools(),
        vec![
            tool("shell", Started, "item_1"),
            tool("shell", Succeeded, "item_1"),
            tool("apply_patch", Started, "item_3"),
            tool("apply_patch", Succeeded, "item_3"),
            tool("shell", Started, "item_4"),
            tool("shell", Succeeded, "item_4"),
        ]
    );
    assert_eq!(r.files(), vec![("/home/user/project/note.txt".into(), ChangeAction::Created)]);
    assert_eq!(r.count("message"), 3);
    // The stdin notice and two rmcp tracing lines (an MCP server's AuthRequired) are noise.
    assert_eq!(r.count("unrecognized"), 3);
    assert!(r.blockers.is_empty(), "{:?}", r.blockers);
    let report = r.final_text.expect("final agent_message");
    assert!(report.contains("t_19e12c9b9f1844d7a4f4a8de1105e936"));
    assert!(report.contains("\"status\":\"success\""));
    assert_usage(&r.usage, usage(84_996, 878, None, None));
}

#[test]
fn codex_text_only_ignores_the_metadata_warning() {
    let r = replay("codex", "captures-local/codex-text-only");
    assert_eq!(r.session(), Some("01a22e14-eabf-7a22-8ba9-e5bae3167eaa"));
    assert_eq!(r.messages(), vec!["Hello from fake."]);
    assert_eq!(r.final_text.as_deref(), Some("Hello from fake."));
    assert_usage(&r.usage, usage(12, 5, None, None));
    // Issue 30: codex's warning about itself is a warning, not an error.
    assert_eq!(r.errors(), vec![], "the metadata warning is no error");
    let warnings = r.warnings();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].starts_with("Model metadata for `gpt-5-codex` not found"));
    assert!(r.blockers.is_empty());
}

/// Issue 30: codex's own warnings, captured from codex-cli 0.171.0 (exec
/// `--json` and the app server), are warnings; a failed turn stays an error.
#[test]
fn codex_warnings_about_itself_are_warnings_not_errors() {
    let bwrap = "Codex could not find bubblewrap on PATH. Install bubblewrap with your OS package manager. See the sandbox prerequisites: https://developers.openai.com/codex/concepts/sandboxing#prerequisites. Codex will use the bundled bubblewrap in the meantime.";
    let mut p = parser(crate::launch::ProviderId::of("codex"));
    let item =
        serde_json::json!({"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": bwrap}});
    let out = p.parse_line(&item.to_string(), Stream::Stdout);
    assert_eq!(out.events, vec![EventBody::Warning { message: bwrap.to_owned() }]);
    let failed = r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}"#;
    let out = p.parse_line(failed, Stream::Stdout);
    assert!(out.events.iter().any(|e| matches!(e, EventBody::Error { fatal: true, .. })), "{:?}", out.events);

    let mut app = super::codex_app::CodexAppParser::default();
    let line = serde_json::json!({"method": "configWarning", "params": {"summary": bwrap, "details": null}});
    let out = app.parse_line(&line.to_string(), Stream::Stdout);
    assert_eq!(out.events, vec![EventBody::Warning { message: bwrap.to_owned() }]);
}

/// Issue 30: a printed error object and a stack trace fold into the line
/// that starts them; the next line of text starts anew, and a JSON event
/// between ends the block.
#[test]
fn multi_line_noise_folds_into_one_event() {
    let mut p = parser(crate::launch::ProviderId::of("gemini"));
    let lines = [
        "Error when talking to Gemini API _ApiError: boom",
        "    at throwErrorIfNotOK (file:///x.js:1:2)",
        "    at async Turn.run (file:///x.js:3:4) {",
        "  status: 500",
        "}",
        "Ripgrep is not available. Falling back to GrepTool.",
        r#"{"type":"init","session_id":"s1"}"#,
        "  indented after an event: text of its own",
    ];
    let mut events = Vec::new();
    for line in lines {
        let stream = if line.starts_with('{') { Stream::Stdout } else { Stream::Stderr };
        events.extend(p.parse_line(line, stream).events);
    }
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            EventBody::Unrecognized { line } => Some(line.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            "Error when talking to Gemini API _ApiError: boom".to_owned(),
            "Ripgrep is not available. Falling back to GrepTool.".to_owned(),
            "indented after an event: text of its own".to_owned(),
        ]
    );
    // The frames are still read for blockers.
    let mut p = parser(crate::launch::ProviderId::of("gemini"));
    p.parse_line("Error when talking to Gemini API", Stream::Stderr);
    let folded = p.parse_line(r#"  [{"error":{"code":401,"message":"API key not valid. Please pass a valid API key.","status":"UNAUTHENTICATED"}}]"#, Stream::Stderr);
    assert!(folded.events.iter().all(|e| !matches!(e, EventBody::Unrecognized { .. })), "{:?}", folded.events);
    assert_eq!(folded.blocker.map(|b| b.kind), Some(Auth));
}

#[test]
fn codex_shell_write_and_resume() {
    let r = replay("codex", "captures-local/codex-shell-write");
    assert_eq!(r.tools(), vec![tool("shell", Started, "item_1"), tool("shell", Succeeded, "item_1")]);
    assert!(r.events.contains(&EventBody::ToolUse {
        tool: "shell".into(),
        input_summary: "/bin/bash -lc 'echo hi > written.txt'".into(),
        status: Started,
        id: "item_1".into(),
    }));
    assert_usage(&r.usage, usage(24, 10, None, None));
    assert!(r.blockers.is_empty());

    let resumed = replay("codex", "captures-local/codex-resume-text");
    assert_eq!(resumed.session(), Some("01a22e15-a4cf-72d2-9351-a6a1f3e58fda"));
    assert_usage(&resumed.usage, usage(36, 15, None, None));
    assert_eq!(resumed.final_text.as_deref(), Some("Hello from fake."));
}

#[test]
fn codex_mcp_call_needing_approval_is_a_permission_blocker() {
    let r = replay("codex", "captures-local/codex-mcp-call-needs-approval");
    assert_eq!(
        r.tools(),
        vec![
            tool("mcp__orch__report_progress", Started, "item_1"),
            tool("mcp__orch__report_progress", Failed, "item_1"),
        ]
    );
    assert_eq!(r.blocker_events(), vec![Permission]);
    assert!(r.blockers[0].1.contains("approval policy is never"));
    assert_eq!(r.session(), Some("01a22e15-77df-7470-872a-a6f4b1e5beaf"));

    let ok = replay("codex", "captures-local/codex-mcp-call-approved");
    assert_eq!(
        ok.tools(),
        vec![
            tool("mcp__orch__report_progress", Started, "item_1"),
            tool("mcp__orch__report_progress", Succeeded, "item_1"),
        ]
    );
    assert!(ok.blockers.is_empty());
}

#[test]
fn codex_failed_turns_are_classified() {
    for (name, kind, needle) in [
        ("captures-local/codex-api-401", Auth, "401 Unauthorized"),
        ("captures-local/codex-missing-api-key-env", Auth, "Missing environment variable"),
        ("captures-local/codex-api-429", RateLimit, "429 Too Many Requests"),
    ] {
        let r = replay("codex", name);
        assert_eq!(r.blocker_events(), vec![kind], "{name}");
        assert!(r.blockers[0].1.contains(needle), "{name}");
        assert_eq!(r.fatal_errors(), 1, "{name}: turn.failed");
        // Issue 30: codex's warning is a warning now, not a third error.
        assert_eq!(r.errors().len(), 2, "{name}: error, turn.failed");
        assert_eq!(r.warnings().len(), 1, "{name}: the warning");
        assert_eq!(r.final_text, None);
        assert_eq!(r.usage, None);
    }
}

#[test]
fn codex_high_demand_5xx_is_not_a_blocker() {
    let r = replay("codex", "captures-local/codex-api-5xx");
    assert!(r.blockers.is_empty());
    assert_eq!(r.count("blocker"), 0);
    assert_eq!(r.fatal_errors(), 1);
    assert!(r.errors().iter().any(|e| e.0.starts_with("We’re currently experiencing high demand")));
}

#[test]
fn codex_websocket_reconnects_are_not_failures() {
    let r = replay("codex", "captures-local/codex-websocket-fallback");
    let errors = r.errors();
    // Issue 30: the fallback notice is codex's warning, not an error.
    assert_eq!(errors.len(), 4, "4 reconnects");
    assert_eq!(r.warnings().len(), 1, "the fallback notice");
    assert!(errors.iter().all(|e| !e.1));
    assert_eq!(errors.iter().filter(|e| e.0.starts_with("Reconnecting... ")).count(), 4);
    assert!(r.blockers.is_empty());
    assert_eq!(r.final_text.as_deref(), Some("Hello from fake."));
    assert_eq!(r.session(), Some("01a22e18-f90c-7462-8085-f10da5002e78"));
}

#[test]
fn codex_reconnect_with_401_wakes_as_auth() {
    let mut p = parser(crate::launch::ProviderId::of("codex"));
    let line = r#"{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: Missing bearer, url: wss://x)"}"#;
    let out = p.parse_line(line, Stream::Stdout);
    assert_eq!(out.blocker.map(|b| b.kind), Some(Auth));
    assert!(matches!(out.events[0], EventBody::Error { fatal: false, .. }));
}

// ---------------------------------------------------------------------------------------------
// gemini
// ---------------------------------------------------------------------------------------------

#[test]
fn gemini_text_run_with_stderr_noise() {
    let r = replay("gemini", "captures-local/gemini-text");
    assert_eq!(r.sessions, vec!["e265f8fb-e353-4666-afc7-c492615e3d04"]);
    assert_eq!(r.count("message"), 1, "the user echo is not a message");
    assert!(has_message(&r, "text scenario done"));
    assert!(r.final_text.as_deref().is_some_and(|t| t.starts_with("All done. ```json caesar:report")));
    assert_usage(&r.usage, usage(12, 5, None, Some(67)));
    assert_eq!(r.count("unrecognized"), 4, "four stderr lines");
    assert!(r.blockers.is_empty(), "'YOLO mode … automatically approved' is not a denial");
}

#[test]
fn gemini_write_reports_the_file() {
    let r = replay("gemini", "captures-local/gemini-write");
    let id = "write_file__write_file_1796072755395_0";
    assert_eq!(r.tools(), vec![tool("write_file", Started, id), tool("write_file", Succeeded, id)]);
    assert_eq!(r.files(), vec![("/home/user/project/hello.txt".into(), ChangeAction::Created)]);
    assert_usage(&r.usage, usage(24, 10, None, Some(165)));
    assert!(r.final_text.as_deref().is_some_and(|t| t.starts_with("Wrote hello.txt.")));
    assert!(r.blockers.is_empty());
}

#[test]
fn gemini_default_mode_missing_tool_is_a_failed_call_not_a_blocker() {
    let r = replay("gemini", "captures-local/gemini-write-default");
    let id = "missing_write_tool__missing_write_tool_1796072760143_0";
    assert_eq!(r.tools(), vec![tool("missing_write_tool", Started, id), tool("missing_write_tool", Failed, id)]);
    assert!(r.files().is_empty());
    // "Tool not found" is what the stream shows: no denial, and the run "succeeds".
    assert!(r.blockers.is_empty());
    assert_eq!(r.fatal_errors(), 0);
    assert_eq!(r.session(), Some("398dad70-d0d5-482c-9b68-7281187727df"));
}

#[test]
fn gemini_401_is_one_auth_blocker_from_result_and_stderr() {
    let r = replay("gemini", "captures-local/gemini-e401");
    assert_eq!(r.blocker_events(), vec![Auth], "reported once across stdout and stderr");
    assert!(r.blockers[0].1.contains("API key not valid"));
    assert_eq!(r.fatal_errors(), 1);
    assert_eq!(r.final_text, None);
    assert_eq!(r.session(), Some("745d607a-1031-4c32-914d-07b60a07c8d5"));
    // Issue 30: seven lines of text, the stack trace and the printed
    // `{ status: 401 }` after the last folded into its one event (19 lines before).
    assert_eq!(r.count("unrecognized"), 7);
    // stderr alone is enough to recognize it.
    let mut p = parser(crate::launch::ProviderId::of("gemini"));
    let stderr = std::fs::read_to_string(format!("{FIXTURES}captures-local/gemini-e401.stderr.txt")).unwrap();
    let kinds: Vec<_> =
        stderr.lines().filter_map(|l| p.parse_line(l, Stream::Stderr).blocker.map(|b| b.kind)).collect();
    assert_eq!(kinds, vec![Auth]);
}

#[test]
fn gemini_unreachable_server_retries_are_not_blockers() {
    let r = replay("gemini", "captures-local/gemini-down");
    assert_eq!(r.session(), Some("fd947c32-7f57-42af-ab97-438e2aa58696"));
    assert!(r.blockers.is_empty());
    // Issue 30: one event per line of text, each retry's stack trace folded
    // into its "Attempt N failed" line (59 events before, one per line).
    assert_eq!(r.count("unrecognized"), 9);
    let lines: Vec<_> = r
        .events
        .iter()
        .filter_map(|e| match e {
            EventBody::Unrecognized { line } => Some(line.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(lines.iter().filter(|l| l.starts_with("Attempt ")).count(), 5, "{lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("at ")), "{lines:?}");
    assert_eq!(r.count("message"), 0);
    assert_eq!(r.final_text, None);
}

#[test]
fn gemini_trusted_mcp_tool_call() {
    let r = replay("gemini", "captures-local/gemini-mcp");
    let id = "mcp_progress_report_progress__mcp_progress_report_progress_1796073208991_0";
    assert_eq!(
        r.tools(),
        vec![tool("mcp_progress_report_progress", Started, id), tool("mcp_progress_report_progress", Succeeded, id),]
    );
    assert!(r.events.contains(&EventBody::ToolUse {
        tool: "mcp_progress_report_progress".into(),
        input_summary: "halfway there".into(),
        status: Started,
        id: id.into(),
    }));
    assert_usage(&r.usage, usage(24, 10, None, Some(113)));
    assert!(r.final_text.as_deref().is_some_and(|t| t.starts_with("The tool answered:")));
}

#[test]
fn gemini_deltas_are_joined_into_one_message_per_segment() {
    let mut p = parser(crate::launch::ProviderId::of("gemini"));
    let mut events = Vec::new();
    let mut final_text = None;
    for line in [
        r#"{"type":"message","role":"assistant","content":"Hel","delta":true}"#,
        r#"{"type":"message","role":"assistant","content":"lo","delta":true}"#,
        r#"{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{"file_path":"a.rs"}}"#,
        r#"{"type":"tool_result","tool_id":"t1","status":"error","error":{"type":"x","message":"Tool execution for \"read_file\" requires user confirmation, which is not supported in non-interactive mode."}}"#,
        r#"{"type":"message","role":"assistant","content":"Done","delta":true}"#,
    ] {
        let out = p.parse_line(line, Stream::Stdout);
        events.extend(out.events);
        final_text = out.final_text.or(final_text);
    }
    let out = p.finish();
    events.extend(out.events);
    assert_eq!(events[0], EventBody::Message { text: "Hello".into() });
    assert!(events.iter().any(|e| matches!(e, EventBody::Blocker { kind: Permission, .. })));
    assert_eq!(events.last(), Some(&EventBody::Message { text: "Done".into() }));
    assert_eq!(out.final_text.as_deref(), Some("Done"));
    assert_eq!(final_text, None);
}

// ---------------------------------------------------------------------------------------------
// opencode
// ---------------------------------------------------------------------------------------------

#[test]
fn opencode_caesar_capture_tools_text_and_cumulative_usage() {
    let r = replay("opencode", "captures-caesar/opencode");
    assert_eq!(r.sessions, vec!["ses_00eac186fffeSLsAcbrhTAFAPh"]);
    assert_eq!(
        r.tools(),
        vec![
            tool("write", Started, "write_0"),
            tool("write", Succeeded, "write_0"),
            tool("bash", Started, "bash_1"),
            tool("bash", Succeeded, "bash_1"),
            tool("write", Started, "write_2"),
            tool("write", Succeeded, "write_2"),
        ]
    );
    assert_eq!(r.files()[0], ("/home/user/project/note.txt".into(), ChangeAction::Created));
    assert_eq!(r.count("message"), 2);
    assert!(r.final_text.as_deref().is_some_and(|t| t.starts_with("Task finished: the file `note.txt`")));
    assert_eq!(r.count("usage"), 4, "one per step_finish");
    let u = r.usage.expect("usage");
    // input + cache read + cache write, summed over the four steps.
    assert_eq!(u.input_tokens, Some(8948 + 458 + 8704 + 287 + 8960 + 415 + 9216));
    // output + reasoning.
    assert_eq!(u.output_tokens, Some(117 + 66 + 52 + 1 + 323 + 30 + 98 + 17));
    let cost = u.cost_usd.expect("cost");
    assert!((cost - (0.029589 + 0.0047802 + 0.008844 + 0.0057348)).abs() < 1e-9);
    assert!(r.blockers.is_empty());
}

#[test]
fn opencode_text_write_and_mcp() {
    let r = replay("opencode", "captures-local/opencode-text");
    assert_eq!(r.session(), Some("ses_dd1b66554ffeJbRYG36uuMhxR8"));
    assert_usage(&r.usage, usage(12, 5, Some(0.0), None));
    assert!(has_message(&r, "text scenario done"));

    let w = replay("opencode", "captures-local/opencode-write");
    assert_eq!(
        w.tools(),
        vec![tool("write", Started, "call_1796072963551829"), tool("write", Succeeded, "call_1796072963551829"),]
    );
    assert_eq!(w.files(), vec![("/home/user/project/hello.txt".into(), ChangeAction::Created)]);
    assert_usage(&w.usage, usage(24, 10, Some(0.0), None));
    assert!(w.final_text.as_deref().is_some_and(|t| t.starts_with("Wrote hello.txt.")));

    let m = replay("opencode", "captures-local/opencode-mcp");
    assert_eq!(
        m.tools(),
        vec![
            tool("progress_report_progress", Started, "call_1796073272136724"),
            tool("progress_report_progress", Succeeded, "call_1796073272136724"),
        ]
    );
    assert!(m.final_text.as_deref().is_some_and(|t| t.starts_with("The tool answered:")));
    for r in [r, w, m] {
        assert!(r.blockers.is_empty());
    }
}

#[test]
fn opencode_ask_permission_is_auto_rejected_and_reported_once() {
    let r = replay("opencode", "captures-local/opencode-write-ask");
    assert_eq!(
        r.tools(),
        vec![tool("write", Started, "call_1796072971233831"), tool("write", Failed, "call_1796072971233831"),]
    );
    assert_eq!(r.blocker_events(), vec![Permission], "stdout error + stderr notice, one blocker");
    assert!(r.blockers[0].1.contains("rejected permission"));
    assert!(r.files().is_empty());
    assert_eq!(r.count("unrecognized"), 1, "the ANSI-coloured stderr notice");
    // The stderr notice on its own is recognized too.
    let mut p = parser(crate::launch::ProviderId::of("opencode"));
    let line = "\u{1b}[93m\u{1b}[1m! \u{1b}[0mpermission requested: edit (home/user/project/hello.txt); auto-rejecting";
    assert_eq!(p.parse_line(line, Stream::Stderr).blocker.map(|b| b.kind), Some(Permission));
}

#[test]
fn opencode_errors() {
    let r = replay("opencode", "captures-local/opencode-e401");
    assert_eq!(r.blocker_events(), vec![Auth]);
    assert_eq!(r.fatal_errors(), 1);
    assert_eq!(r.session(), Some("ses_dd1b54151ffe7NolWt7d2JLIhJ"));
    assert!(r.errors()[0].0.contains("Incorrect API key provided"));

    let d = replay("opencode", "captures-local/opencode-down");
    assert!(d.blockers.is_empty());
    assert_eq!(d.fatal_errors(), 1);
    assert!(d.errors()[0].0.starts_with("Cannot connect to API"));
}

// ---------------------------------------------------------------------------------------------
// copilot
// ---------------------------------------------------------------------------------------------

#[test]
fn copilot_text_run() {
    let r = replay("copilot", "captures-local/copilot-text");
    assert_eq!(r.sessions, vec!["eef27286-8b8c-41c1-8112-305cbdcc53f7"]);
    assert_eq!(r.count("message"), 1, "deltas are not repeated");
    assert!(r.final_text.as_deref().is_some_and(|t| t.contains("text scenario done")));
    assert_eq!(r.usage.as_ref().and_then(|u| u.duration_ms), Some(733));
    assert_eq!(r.count("unrecognized"), 0);
    assert!(r.blockers.is_empty());
    assert_eq!(r.events.len(), 2, "{:?}", r.events);
}

#[test]
fn copilot_write_and_denied_write() {
    let r = replay("copilot", "captures-local/copilot-write");
    let id = "call_1796073091603577";
    assert_eq!(r.tools(), vec![tool("create", Started, id), tool("create", Succeeded, id)]);
    assert_eq!(r.files(), vec![("/home/user/project/hello.txt".into(), ChangeAction::Created)]);
    assert!(r.blockers.is_empty());

    let d = replay("copilot", "captures-local/copilot-write-noallow");
    let id = "call_1796073096453639";
    assert_eq!(d.tools(), vec![tool("create", Started, id), tool("create", Failed, id)]);
    assert_eq!(d.blocker_events(), vec![Permission]);
    assert!(d.blockers[0].1.starts_with("Permission denied because no interactive user response"));
    assert!(d.files().is_empty());
    // The model then claims success: the final text is not proof of anything.
    assert!(d.final_text.as_deref().is_some_and(|t| t.starts_with("Wrote hello.txt.")));
    assert_eq!(d.session(), Some("07c39b50-046b-4c7d-8f61-830b11304422"));
}

#[test]
fn copilot_session_errors() {
    let r = replay("copilot", "captures-local/copilot-e401");
    assert_eq!(r.blocker_events(), vec![Auth], "retried 401s wake once, on session.error");
    assert!(r.blockers[0].1.contains("HTTP 401"));
    assert_eq!(r.fatal_errors(), 1);
    assert_eq!(r.session(), Some("a3cc1ac5-f6dd-47e1-ba7e-06008eb1facf"));

    let q = replay("copilot", "captures-caesar/copilot");
    assert_eq!(q.blocker_events(), vec![RateLimit], "errorType quota, HTTP 402");
    assert_eq!(q.session(), Some("39be4f5d-1453-4850-9ce4-0ea59b180b3b"));
    assert_eq!(q.usage.as_ref().and_then(|u| u.duration_ms), Some(2552));

    let d = replay("copilot", "captures-local/copilot-down");
    assert!(d.blockers.is_empty());
    assert_eq!(d.fatal_errors(), 1);
    assert!(d.errors()[0].0.starts_with("Could not connect to local model provider"));
    assert_eq!(d.count("unrecognized"), 0);
}

#[test]
fn copilot_mcp_call_and_stderr_login_error() {
    let r = replay("copilot", "captures-local/copilot-mcp");
    let id = "call_1796073282940590";
    assert_eq!(
        r.tools(),
        vec![tool("progress-report_progress", Started, id), tool("progress-report_progress", Succeeded, id),]
    );
    assert!(r.blockers.is_empty());
    let mut p = parser(crate::launch::ProviderId::of("copilot"));
    let out = p.parse_line("Error: No authentication information found.", Stream::Stderr);
    assert_eq!(out.blocker.map(|b| b.kind), Some(Auth));
    assert_eq!(out.events[0].kind(), "unrecognized");
}

// ---------------------------------------------------------------------------------------------
// antigravity, cursor, and the claude-schema CLIs
// ---------------------------------------------------------------------------------------------

#[test]
fn antigravity_quota_error() {
    let r = replay("antigravity", "captures-caesar/antigravity");
    assert_eq!(r.sessions, vec!["1d008f41-d241-4139-82ed-49102213fb61"]);
    assert_eq!(r.count("progress"), 8);
    assert_eq!(r.blocker_events(), vec![RateLimit]);
    assert!(r.blockers[0].1.starts_with("Individual quota reached"));
    assert_eq!(r.fatal_errors(), 1);
    assert_eq!(r.final_text, None);
    assert_usage(&r.usage, usage(0, 0, None, Some(4377)));
}

#[test]
fn antigravity_success_result() {
    let mut p = parser(crate::launch::ProviderId::of("antigravity"));
    let line = r#"{"event":"result","result":{"conversation_id":"c1","status":"SUCCESS","response":"all good","duration_seconds":1.5,"num_turns":2,"usage":{"input_tokens":10,"output_tokens":4,"thinking_tokens":2,"cache_read_tokens":5,"total_tokens":21}}}"#;
    let out = p.parse_line(line, Stream::Stdout);
    assert_eq!(out.session_id.as_deref(), Some("c1"));
    assert_eq!(out.final_text.as_deref(), Some("all good"));
    assert_usage(&out.usage, usage(15, 6, None, Some(1500)));
    assert_eq!(out.blocker, None);
}

#[test]
fn cursor_documented_stream() {
    let mut p = parser(crate::launch::ProviderId::of("cursor-agent"));
    let mut run = Run::default();
    for line in [
        r#"{"type":"system","subtype":"init","apiKeySource":"login","cwd":"/w","session_id":"cur-1","model":"gpt-5","permissionMode":"default"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"do it"}]},"session_id":"cur-1"}"#,
        r#"{"type":"thinking","subtype":"delta","text":"Let me ","session_id":"cur-1"}"#,
        r#"{"type":"thinking","subtype":"delta","text":"think.","session_id":"cur-1"}"#,
        r#"{"type":"thinking","subtype":"completed","session_id":"cur-1"}"#,
        r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Writing."}]},"session_id":"cur-1"}"#,
        r#"{"type":"tool_call","subtype":"started","call_id":"c1","tool_call":{"writeToolCall":{"args":{"path":"a.txt","fileText":"x"}}},"session_id":"cur-1"}"#,
        r#"{"type":"tool_call","subtype":"completed","call_id":"c1","tool_call":{"writeToolCall":{"args":{"path":"a.txt","fileText":"x"},"result":{"success":{"path":"a.txt","linesCreated":1}}}},"session_id":"cur-1"}"#,
        r#"{"type":"tool_call","subtype":"started","call_id":"c2","tool_call":{"shellToolCall":{"args":{"command":"rm -rf /"}}},"session_id":"cur-1"}"#,
        r#"{"type":"tool_call","subtype":"completed","call_id":"c2","tool_call":{"shellToolCall":{"args":{"command":"rm -rf /"},"result":{"rejected":{"reason":"not allowed"}}}},"session_id":"cur-1"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1234,"duration_api_ms":1234,"result":"Wrote a.txt.","session_id":"cur-1","request_id":"r"}"#,
    ] {
        absorb(&mut run, p.parse_line(line, Stream::Stdout));
    }
    absorb(&mut run, p.finish());
    assert_eq!(run.sessions, vec!["cur-1"]);
    assert_eq!(run.events[0], EventBody::Thinking { text: "Let me think.".into() });
    assert_eq!(
        run.tools(),
        vec![
            tool("write", Started, "c1"),
            tool("write", Succeeded, "c1"),
            tool("shell", Started, "c2"),
            tool("shell", Failed, "c2"),
        ]
    );
    assert_eq!(run.files(), vec![("a.txt".into(), ChangeAction::Created)]);
    assert_eq!(run.blocker_kinds(), vec![Permission]);
    assert_eq!(run.final_text.as_deref(), Some("Wrote a.txt."));
    assert_eq!(run.usage.as_ref().and_then(|u| u.duration_ms), Some(1234));
    // A failure without a result line: the error is on stderr.
    let mut p = parser(crate::launch::ProviderId::of("cursor-agent"));
    let out = p.parse_line(
        "Error: Authentication required. Please run 'cursor-agent login' first, or set CURSOR_API_KEY. Not logged in",
        Stream::Stderr,
    );
    assert_eq!(out.blocker.map(|b| b.kind), Some(Auth));
}

#[test]
fn claude_schema_clis_share_the_parser() {
    // qwen: an error result carries error{type,message}.
    for id in ["qwen", "codebuddy", "grok"] {
        let mut p = parser(crate::launch::ProviderId::of(id));
        let init = r#"{"type":"system","subtype":"init","session_id":"q-1","model":"m","permission_mode":"plan"}"#;
        assert_eq!(p.parse_line(init, Stream::Stdout).session_id.as_deref(), Some("q-1"));
        let res = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"q-1","usage":{"input_tokens":3,"output_tokens":1},"error":{"type":"api","message":"429 Too Many Requests: quota exceeded"}}"#;
        let out = p.parse_line(res, Stream::Stdout);
        assert_eq!(out.blocker.map(|b| b.kind), Some(RateLimit), "{id}");
        assert_eq!(out.usage, Some(Usage { input_tokens: Some(3), output_tokens: Some(1), ..Usage::default() }));
        assert_eq!(out.final_text, None);
    }
}

#[test]
fn an_acp_message_read_as_text_is_never_a_blocker() {
    // An ACP session's traffic left in the raw log before a fallback to the
    // stream command: qwen's command list mentions quotas (issue 29 merge).
    let line = r#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"stats","description":"quota exceeded? rate limit reached? see here"}]}}}"#;
    let mut p = parser(crate::launch::ProviderId::of("qwen"));
    let parsed = p.parse_line(line, Stream::Stdout);
    assert!(parsed.blocker.is_none(), "{:?}", parsed.blocker);
    // Cut short, or with stderr text run into it, it is no JSON, and still no blocker.
    let piece = format!("{} Error: token expired", &line[..line.len() - 20]);
    assert!(p.parse_line(&piece, Stream::Stdout).blocker.is_none());
    assert!(p.parse_line(line, Stream::Stderr).blocker.is_none());
    // The same words as the CLI's own error text are still a blocker.
    let parsed = p.parse_line("Error: quota exceeded for this key (429)", Stream::Stdout);
    assert_eq!(parsed.blocker.map(|b| b.kind), Some(crate::oacp::BlockerKind::RateLimit));
}

//! The ACP launches caesar builds, argv by argv: the verified four and the three taken from
//! their documentation (cursor-agent, grok, codebuddy), resume and the stream fallback.

use super::*;
use crate::provider::{Invocation, McpServer};

fn inv<'a>(mode: Mode, model: Option<&'a str>, mcp: Option<McpServer<'a>>, resume: Option<&'a str>) -> Invocation<'a> {
    Invocation { model, mcp, resume_session: resume, ..Invocation::bare("do it", mode) }
}

fn opening_of(l: &Launch) -> Value {
    match &l.stdin {
        Stdin::Session { opening, .. } => serde_json::from_str(opening).unwrap(),
        other => panic!("not a session: {other:?}"),
    }
}

#[test]
fn cursor_grok_and_codebuddy_get_their_documented_acp_argv_and_say_they_are_unverified() {
    let cursor = launch("cursor-agent", &inv(Mode::Write, Some("sonnet-4"), None, None)).unwrap();
    assert_eq!(cursor.args, ["--model", "sonnet-4", "acp"]);
    assert_eq!(launch("cursor-agent", &inv(Mode::ReadOnly, None, None, None)).unwrap().args, ["acp"]);
    let grok = launch("grok", &inv(Mode::Write, Some("grok-4"), None, None)).unwrap();
    assert_eq!(grok.args, ["agent", "-m", "grok-4", "stdio"]);
    assert!(grok.env.contains(&("GROK_DISABLE_AUTOUPDATER".to_owned(), "1".to_owned())));
    assert_eq!(launch("grok", &inv(Mode::ReadOnly, None, None, None)).unwrap().args, ["agent", "stdio"]);
    assert!(!grok.args.iter().any(|a| a == "--always-approve"), "grok asks, it is not pre-approved");
    let buddy = launch("codebuddy", &inv(Mode::Write, Some("m1"), None, None)).unwrap();
    assert_eq!(buddy.args, ["--acp", "--model", "m1"]);
    for id in ["cursor-agent", "grok", "codebuddy"] {
        assert!(unverified(id), "{id}");
        assert_eq!(protocol_name(id), "acp");
        assert!(protocol_reason(id).contains("unverified"), "{id}: {}", protocol_reason(id));
    }
    for id in ["gemini", "qwen", "opencode", "copilot"] {
        assert!(!unverified(id) && !protocol_reason(id).contains("unverified"), "{id}");
    }
    assert_eq!(protocol_name("claude"), "stream-json-control");
    assert_eq!(protocol_name("codex"), "stream");
}

#[test]
fn opencode_and_copilot_ask_for_commands_and_get_the_channel() {
    let args = [s("--channel")];
    let env = [(s("CAESAR_TASK_ID"), s("t1"))];
    let mcp = McpServer { name: "caesar", command: "/bin/caesar-mcp", args: &args, env: &env, tools: &[] };
    let oc = launch("opencode", &inv(Mode::ReadOnly, Some("anthropic/x"), Some(mcp), None)).unwrap();
    assert_eq!(oc.args, ["acp"]);
    let config = oc.env.iter().find(|(k, _)| k == "OPENCODE_CONFIG_CONTENT").map(|(_, v)| v.clone()).unwrap();
    let config: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["permission"]["edit"], "deny");
    assert_eq!(config["permission"]["bash"], "ask");
    assert_eq!(config["model"], "anthropic/x");
    assert_eq!(opening_of(&oc)["new_session"]["mcpServers"][0]["name"], "caesar", "opencode's channel in session/new");
    let w = launch("opencode", &inv(Mode::Write, None, None, None)).unwrap();
    assert!(w.env.iter().any(|(k, v)| k == "OPENCODE_CONFIG_CONTENT" && v.contains(r#""edit":"allow""#)));

    let cp = launch("copilot", &inv(Mode::Write, None, Some(mcp), None)).unwrap();
    assert_eq!(&cp.args[..2], ["--acp", "--stdio"]);
    assert!(cp.args.contains(&s("--allow-tool=write")) && cp.args.contains(&s("--allow-tool=caesar")), "{:?}", cp.args);
    let at = cp.args.iter().position(|a| a == "--additional-mcp-config").expect("the channel on the command line");
    assert!(cp.args[at + 1].contains("/bin/caesar-mcp"));
    assert_eq!(opening_of(&cp)["new_session"]["mcpServers"], serde_json::json!([]), "not twice");
    let ro = launch("copilot", &inv(Mode::ReadOnly, None, None, None)).unwrap();
    assert!(!ro.args.iter().any(|a| a.starts_with("--allow-tool")), "read-only pre-approves nothing");
}

#[test]
fn a_resumed_task_carries_its_session_and_the_stream_fallback_its_argv() {
    let l = launch("opencode", &inv(Mode::ReadOnly, None, None, Some("sess-9"))).unwrap();
    assert_eq!(opening_of(&l)["resume"], "sess-9");
    assert!(opening_of(&launch("opencode", &inv(Mode::ReadOnly, None, None, None)).unwrap()).get("resume").is_none());
    // gemini's session/load loses the session it loads: a resumed gemini task is a stream run.
    assert!(launch("gemini", &inv(Mode::ReadOnly, None, None, Some("sess-9"))).is_none());
    let i = inv(Mode::ReadOnly, None, None, Some("sess-9"));
    let with = with_fallback(
        launch("copilot", &i).unwrap(),
        crate::provider::build_launch(crate::launch::ProviderId::of("copilot"), &i),
    );
    let fallback = &opening_of(&with)["fallback"];
    let argv: Vec<&str> = fallback["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(argv.contains(&"--output-format") && argv.contains(&"--resume=sess-9"), "{argv:?}");
    assert!(fallback["env"].to_string().contains("COPILOT_AUTO_UPDATE"));
    // claude's stream needs its stdin: no fallback is offered for a launch like that.
    let claude =
        crate::provider::build_launch(crate::launch::ProviderId::of("claude"), &inv(Mode::Write, None, None, None));
    let same = with_fallback(launch("opencode", &i).unwrap(), claude);
    assert!(opening_of(&same).get("fallback").is_none());
    // gemini's and copilot's streams read their prompt on stdin (issue 19): the fallback says
    // so, and its argv holds no prompt; cursor-agent's keeps it in argv. (A fresh task: a
    // resumed gemini task is no ACP session at all.)
    let fresh = inv(Mode::ReadOnly, None, None, None);
    for id in ["gemini", "copilot"] {
        let g = with_fallback(
            launch(id, &fresh).unwrap(),
            crate::provider::build_launch(crate::launch::ProviderId::of(id), &fresh),
        );
        let fallback = &opening_of(&g)["fallback"];
        assert_eq!(fallback["stdin_prompt"], true, "{id}: {fallback}");
        assert!(!fallback["args"].to_string().contains("do it"), "{id}: {fallback}");
    }
    let c = with_fallback(
        launch("cursor-agent", &i).unwrap(),
        crate::provider::build_launch(crate::launch::ProviderId::of("cursor-agent"), &i),
    );
    let fallback = opening_of(&c)["fallback"].to_string();
    assert!(fallback.contains("do it") && !fallback.contains("stdin_prompt"), "{fallback}");
}

/// Issue 30: a CLI asking permission to call caesar's own return channel (gemini and qwen over
/// ACP, from their captures) is allowed by caesar at once, never made a question; a request
/// for any other tool, or a command titled like the channel, still asks.
#[test]
fn caesars_own_channel_tools_are_allowed_without_asking_and_nothing_else_is() {
    let gemini = r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s","options":[{"optionId":"proceed_always_server","name":"Allow all server tools for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"mcp_caesar_ask_orchestrator_1","status":"pending","title":"ask_orchestrator (caesar MCP Server)","content":[{"type":"content","content":{"type":"text","text":"{\"question\":\"Which colour?\"}"}}],"locations":[],"kind":"other"}}}"#;
    let qwen = r#"{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"s","options":[{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"toolu_fake1","status":"pending","title":"{\"question\":\"Which colour?\"}","content":[],"locations":[],"kind":"other","rawInput":{"question":"Which colour?"},"_meta":{"toolName":"mcp__caesar__submit_report"}}}}"#;
    for (line, id) in [(gemini, 0), (qwen, 7)] {
        let mut parser = AcpParser::default();
        let p = parser.parse_line(line, Stream::Stdout);
        assert!(p.permission.is_none(), "no question for the person: {line}");
        let replies = parser.take_replies();
        assert_eq!(replies.len(), 1, "{replies:?}");
        let r: Value = serde_json::from_str(&replies[0]).unwrap();
        assert_eq!(r["id"], id);
        assert_eq!(r["result"]["outcome"], serde_json::json!({"outcome": "selected", "optionId": "proceed_once"}));
    }
    let shell = gemini.replace(r#""kind":"other""#, r#""kind":"execute""#);
    let other_server = gemini.replace("(caesar MCP Server)", "(evil MCP Server)");
    let other_tool = qwen.replace("mcp__caesar__submit_report", "mcp__caesar__run_shell");
    let only_titled = gemini.replace("mcp_caesar_ask_orchestrator_1", "save_memory_1");
    for line in [shell, other_server, other_tool, only_titled] {
        let mut parser = AcpParser::default();
        let p = parser.parse_line(&line, Stream::Stdout);
        assert!(p.permission.is_some(), "still asked: {line}");
        assert!(parser.take_replies().is_empty());
    }
}

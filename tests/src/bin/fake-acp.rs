//! A scripted ACP agent (JSON-RPC 2.0, one message a line) for the tests and the bench that
//! need a session peer whose every message is known: the real CLIs cannot be made to send
//! malformed JSON-RPC, answer a request never made, or time a permission's round trip.
//!
//! It answers `initialize` (advertising `loadSession`), `session/new` (session `fake-1`) and
//! `session/load`, then plays its arguments as the prompt's turn, and answers the prompt with
//! `end_turn`:
//!
//! ```text
//! say TEXT          an agent_message_chunk
//! raw LINE          LINE as is (malformed JSON-RPC, unknown methods, stray responses)
//! big BYTES         one session/update line of BYTES bytes
//! ask TITLE         session/request_permission for an `execute` tool; waits for the answer,
//!                   then reports the tool completed (allowed) or failed (rejected); a
//!                   `session/cancel` read while it waits ends the turn there, as ACP says:
//!                   the tool failed, the rest of the script skipped, the prompt answered
//!                   with `stopReason: "cancelled"`
//! stamp FILE        append the wall-clock time (ns since the epoch) to FILE
//! log FILE          append the text of this prompt and of every later one to FILE, a line each
//! stamp-sent FILE   with `ask`: stamp FILE right after the request is written
//! stamp-answer FILE with `ask`: stamp FILE as soon as the answer is read
//! stamp-steer FILE  stamp FILE as soon as a later `session/prompt` (a steer) is read
//! ```
//!
//! A later `session/prompt` in the same session (a steer, issue 31) is answered with one
//! agent_message_chunk `heard: <its text>` and `end_turn`; the script is not played again.
//!
//! Before the session: `--fail-initialize MSG` answers initialize with an error and then hangs
//! (the supervisor must stop it), `--exit-at-start` exits before reading anything.

use std::io::{BufRead, Write};

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn stamp(file: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let _ = writeln!(f, "{}", now_ns());
    }
}

fn send(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn update(session: &str, update: serde_json::Value) {
    send(&serde_json::json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": session, "update": update}}));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--exit-at-start") {
        std::process::exit(3);
    }
    let fail_initialize = (args.first().map(String::as_str) == Some("--fail-initialize")).then(|| args[1].clone());
    let (mut sent_file, mut answer_file) = (None, None);
    let (mut prompts, mut log_file): (u32, Option<String>) = (0, None);
    let mut steer_file: Option<String> = None;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut session = "fake-1".to_owned();
    while let Some(Ok(line)) = lines.next() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
        let id = msg.get("id").cloned().unwrap_or(serde_json::Value::Null);
        let method = msg.get("method").and_then(|m| m.as_str()).unwrap_or_default();
        match method {
            "initialize" => {
                if let Some(why) = &fail_initialize {
                    send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": why}}));
                    // Hangs: an agent refused its session must be stopped by the supervisor.
                    std::thread::sleep(std::time::Duration::from_secs(600));
                    return;
                }
                send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": 1,
                    "agentCapabilities": {"loadSession": true}}}));
            }
            "session/new" => {
                send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"sessionId": session}}));
            }
            "session/load" => {
                session = msg.pointer("/params/sessionId").and_then(|s| s.as_str()).unwrap_or("fake-1").to_owned();
                update(
                    &session,
                    serde_json::json!({"sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": "the earlier prompt"}}),
                );
                update(
                    &session,
                    serde_json::json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "the earlier answer"}}),
                );
                send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            "session/prompt" => {
                prompts += 1;
                let text: Vec<&str> = msg
                    .pointer("/params/prompt")
                    .and_then(|p| p.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b.get("text").and_then(|t| t.as_str()))
                    .collect();
                let text = text.join(" ");
                let log = |file: &Option<String>| {
                    if let Some(f) = file
                        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(f)
                    {
                        let _ = writeln!(f, "{}", text.replace('\n', " "));
                    }
                };
                if prompts > 1 {
                    if let Some(f) = &steer_file {
                        stamp(f);
                    }
                    log(&log_file);
                    update(
                        &session,
                        serde_json::json!({"sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": format!("heard: {text}")}}),
                    );
                    send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn"}}));
                    continue;
                }
                let mut i = 0;
                let mut ask_id = 100;
                let mut cancelled = false;
                while i < args.len() && !cancelled {
                    let value = args.get(i + 1).cloned().unwrap_or_default();
                    match args[i].as_str() {
                        "say" => update(
                            &session,
                            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": value}}),
                        ),
                        "raw" => {
                            let mut out = std::io::stdout().lock();
                            let _ = writeln!(out, "{value}");
                            let _ = out.flush();
                        }
                        "big" => {
                            let n: usize = value.parse().unwrap_or(0);
                            let mut out = std::io::stdout().lock();
                            let _ = write!(
                                out,
                                "{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{{\"x\":\""
                            );
                            let chunk = "y".repeat(1 << 16);
                            let mut left = n;
                            while left > 0 {
                                let k = left.min(chunk.len());
                                let _ = out.write_all(&chunk.as_bytes()[..k]);
                                left -= k;
                            }
                            let _ = writeln!(out, "\"}}}}");
                            let _ = out.flush();
                        }
                        "stamp" => stamp(&value),
                        "log" => {
                            log_file = Some(value.clone());
                            log(&log_file);
                        }
                        "stamp-sent" => sent_file = Some(value.clone()),
                        "stamp-answer" => answer_file = Some(value.clone()),
                        "stamp-steer" => steer_file = Some(value.clone()),
                        "ask" => {
                            ask_id += 1;
                            let call = format!("call-{ask_id}");
                            update(
                                &session,
                                serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": call,
                                "title": value, "kind": "execute", "status": "pending",
                                "rawInput": {"command": value}}),
                            );
                            send(&serde_json::json!({"jsonrpc": "2.0", "id": ask_id,
                                "method": "session/request_permission", "params": {"sessionId": session,
                                "toolCall": {"toolCallId": call, "title": value, "kind": "execute",
                                    "rawInput": {"command": value}},
                                "options": [
                                    {"optionId": "allow_once", "kind": "allow_once", "name": "Allow"},
                                    {"optionId": "reject_once", "kind": "reject_once", "name": "Reject"}]}}));
                            if let Some(f) = &sent_file {
                                stamp(f);
                            }
                            // The answer: the first response carrying our id.
                            let mut allowed = false;
                            for line in lines.by_ref() {
                                let Ok(line) = line else { break };
                                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                                if v.get("method").and_then(|m| m.as_str()) == Some("session/cancel") {
                                    cancelled = true;
                                    break;
                                }
                                if v.get("id").and_then(|i| i.as_u64()) == Some(ask_id) && v.get("method").is_none() {
                                    if let Some(f) = &answer_file {
                                        stamp(f);
                                    }
                                    allowed = v.pointer("/result/outcome/optionId").and_then(|o| o.as_str())
                                        == Some("allow_once");
                                    break;
                                }
                            }
                            let status = if allowed { "completed" } else { "failed" };
                            update(
                                &session,
                                serde_json::json!({"sessionUpdate": "tool_call_update",
                                "toolCallId": call, "status": status}),
                            );
                        }
                        _ => {
                            i += 1;
                            continue;
                        }
                    }
                    i += 2;
                }
                let stop = if cancelled { "cancelled" } else { "end_turn" };
                send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": stop}}));
            }
            "session/cancel" => {}
            _ if !id.is_null() => send(&serde_json::json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"}})),
            _ => {}
        }
    }
}

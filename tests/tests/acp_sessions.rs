//! ACP sessions against a scripted ACP agent (`fake-acp`), through a real daemon and its
//! supervisors: what the real CLIs cannot be made to do on purpose. A handshake that fails at
//! start runs the adapter's stream command instead and the task's events say why; malformed
//! JSON-RPC, an unknown method, a response to a request never made and a 100 MB line become
//! `unrecognized` events while the session goes on, in bounded memory; a resumed session is
//! loaded and its replayed history is not read as the task's work.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

fn fake_acp() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fake-acp"))
}

fn capture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../daemon/tests/fixtures/providers").join(rel)
}

/// A stand-in for `provider` that appends each argv to `<home>/files/<provider>.args` (one line per
/// run) and runs `acp` when started in ACP mode (its argv holds `acp_flag`), `stream` otherwise.
fn stand_in(env: &Env, provider: &str, acp_flag: &str, acp: &str, stream: &str) -> PathBuf {
    let script = env.home.path().join(format!("{provider}-stand-in"));
    let args = env.file(&format!("{provider}.args"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s ' \"$@\" | tr '\\n' ' ' >> '{a}'\necho >> '{a}'\ncase \" $* \" in *' {acp_flag} '*) exec {acp} ;; esac\nexec {stream}\n",
            a = args.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn runs(env: &Env, provider: &str) -> Vec<String> {
    std::fs::read_to_string(env.file(&format!("{provider}.args")))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn use_bin(env: &Env, provider: &str, script: &Path) {
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("[policy]\nallow_recursion = true\n[bin]\n{provider} = {:?}\n", script.display().to_string()),
    )
    .unwrap();
}

async fn events(c: &mut Client, id: &str) -> Vec<serde_json::Value> {
    let logs = c
        .logs(pb::LogsRequest { task_id: id.to_owned(), limit: 10_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    logs.events_json.iter().map(|e| json(e)).collect()
}

fn raw(env: &Env, id: &str) -> String {
    let raw =
        std::fs::read_to_string(caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(id)).join("raw.log"))
            .unwrap_or_default();
    raw.chars().take(5000).collect()
}

/// initialize answered with an error (the agent then hangs) and an agent that exits before
/// answering: both times the supervisor stops it, runs copilot's stream command, and says so.
#[tokio::test]
async fn a_failed_handshake_runs_the_stream_command_and_the_events_say_why() {
    let mut env = Env::new(&[]);
    let mut c = env.start_daemon().await;
    let replay =
        format!("'{}' replay '{}'", fake_agent().display(), capture("captures-local/copilot-text.jsonl").display());
    for (acp, why) in [
        (
            format!("'{}' --fail-initialize 'Authentication required'", fake_acp().display()),
            "initialize failed: Authentication required",
        ),
        (format!("'{}' --exit-at-start", fake_acp().display()), "the agent ended before answering initialize"),
    ] {
        let _ = std::fs::remove_file(env.file("copilot.args"));
        let script = stand_in(&env, "copilot", "--acp", &acp, &replay);
        use_bin(&env, "copilot", &script);
        let mut req = env.delegate_request("copilot", "say hello");
        req.mode = "read-only".into();
        let started = Instant::now();
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let t = await_one(&mut c, &id, LONG).await;
        // The refused agent hangs for ten minutes: the supervisor stopped it.
        assert!(started.elapsed() < Duration::from_secs(45), "{why}: the hanging agent was stopped");
        assert_eq!(t.report_status, "success", "{why}: the stream ran: {}\n{}", t.report_json, raw(&env, &id));
        let argvs = runs(&env, "copilot");
        assert_eq!(argvs.len(), 2, "{why}: the session, then the stream: {argvs:?}");
        assert!(argvs[0].starts_with("--acp --stdio"), "{argvs:?}");
        assert!(argvs[1].contains("--output-format json"), "the stream command: {argvs:?}");
        let evs = events(&mut c, &id).await;
        let said = evs
            .iter()
            .filter(|e| e["type"] == "progress")
            .filter_map(|e| e["message"].as_str())
            .find(|m| m.contains("ACP handshake failed"))
            .unwrap_or_else(|| panic!("{why}: no event says the fallback ran: {evs:?}"))
            .to_owned();
        assert!(said.contains(why) && said.contains("running the stream command"), "{said}");
        assert!(evs.iter().any(|e| e["type"] == "message"), "{why}: the stream's reply is read");
    }
}

/// Bad JSON-RPC in a running session: each line is `unrecognized`, the unknown request gets
/// an error, and the turn still ends with its answer; the daemon reads a 100 MB line in
/// bounded memory.
#[tokio::test]
async fn bad_json_rpc_is_unrecognized_and_the_session_goes_on() {
    let mut env = Env::new(&[]);
    let mut c = env.start_daemon().await;
    let daemon = env.daemon_pid().await;
    let steps = [
        "raw '{not json'",
        r#"raw '{"jsonrpc":"2.0","id":999,"result":{"late":true}}'"#,
        r#"raw '{"jsonrpc":"2.0","id":7,"method":"x/unknown","params":{}}'"#,
        r#"raw '{"jsonrpc":"2.0","method":"x/notice"}'"#,
        "big 104857600",
        "say 'All done despite the noise.'",
    ]
    .join(" ");
    let acp = format!("'{}' {steps}", fake_acp().display());
    let script = stand_in(&env, "qwen", "--acp", &acp, "false");
    use_bin(&env, "qwen", &script);
    let mut req = env.delegate_request("qwen", "noise");
    req.mode = "read-only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, Duration::from_secs(240)).await;
    assert_eq!(runs(&env, "qwen").len(), 1, "no fallback mid-run");
    let evs = events(&mut c, &id).await;
    let unrecognized = evs.iter().filter(|e| e["type"] == "unrecognized").count();
    assert!(unrecognized >= 4, "each bad line is unrecognized: {unrecognized} in {evs:?}");
    assert!(
        evs.iter().filter(|e| e["type"] == "unrecognized").all(|e| e.to_string().len() < 10_000),
        "an unrecognized line is kept short"
    );
    assert!(
        evs.iter().any(|e| e["type"] == "message" && e.to_string().contains("All done despite the noise.")),
        "the session went on after the noise: {evs:?}\n{}",
        raw(&env, &id)
    );
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.report_json);
    let peak_kb = peak_rss_kb(daemon);
    assert!(peak_kb < 100 * 1024, "the daemon's peak memory stays bounded: {peak_kb} kB after a 100 MB line");
}

/// A task that continues a session: the supervisor loads it (the agent advertises
/// loadSession), and what the agent replays of the earlier turns is not this task's answer.
#[tokio::test]
async fn a_resumed_session_is_loaded_and_its_history_is_not_the_answer() {
    let mut env = Env::new(&[]);
    let mut c = env.start_daemon().await;
    let acp = format!("'{}' say 'The new answer.'", fake_acp().display());
    // qwen (gemini's own session/load loses the session: its resumed tasks run the stream).
    let script = stand_in(&env, "qwen", "--acp", &acp, "false");
    use_bin(&env, "qwen", &script);
    let first = c.delegate(env.delegate_request("qwen", "first")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &first, LONG).await;
    assert_eq!(t.session_id, "fake-1", "{}", raw(&env, &first));
    let mut again = env.delegate_request("qwen", "second");
    again.session_id = t.session_id.clone();
    let second = c.delegate(again).await.unwrap().into_inner().task_id;
    let t2 = await_one(&mut c, &second, LONG).await;
    let opening = std::fs::read_to_string(
        caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(&second)).join("session.open.json"),
    )
    .unwrap();
    assert!(json(&opening)["resume"] == "fake-1", "{opening}");
    let evs = events(&mut c, &second).await;
    let messages: Vec<String> = evs.iter().filter(|e| e["type"] == "message").map(|e| e.to_string()).collect();
    assert!(messages.iter().any(|m| m.contains("The new answer.")), "{messages:?}\n{}", raw(&env, &second));
    assert!(!messages.iter().any(|m| m.contains("the earlier answer")), "the replay is history: {messages:?}");
    assert!(raw(&env, &second).contains("the earlier answer"), "the agent did replay it (session/load ran)");
    assert!(!t2.report_json.contains("the earlier answer"), "{}", t2.report_json);
}

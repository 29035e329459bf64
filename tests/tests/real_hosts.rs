//! The real host CLIs (`claude`, `codex`, `gemini`, `opencode`, `copilot`, `qwen`, installed from
//! the npm registry into `tests/real-clis`, as for `real_clis.rs`) used as *hosts*: caesar-mcp is
//! registered with each through the real `caesar mcp install <host>`, the host runs headless
//! against the scripted model server of `caesar_tests::model_server`, and the scripted model
//! calls caesar's tools in turn: list agents, delegate to a fake sub-agent, await it until it asks
//! a question, status, answer, await it to its end, diff, apply.
//!
//! What is checked is what reached the model: each tool's result is in the host's next model
//! request (the task id, the question, the diff), none of them is an error, and the host printed
//! no warning about caesar. The skill `caesar init` deposits is checked the same way: the first
//! model request names it, or it does not (and the test says which hosts read which location).
//!
//! Isolation as in `real_clis.rs`, through the same homes and environment (`common/real_cli.rs`):
//! the hosts' own HOME, CLAUDE_CONFIG_DIR, CODEX_HOME and XDG dirs, a proxy on a dead loopback
//! port, no retries, a daemon under a scratch CAESAR_HOME.
//! Each run prints a `real-host` line with its timings (the time from the model's tool call to
//! the host's next model request, which carries caesar's answer).

#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/real_cli.rs"]
mod real_cli;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use caesar_tests::model_server::{ModelServer, Reply, Request, last_id};
use common::*;
use real_cli::{Cli as Host, CliHomes, real_clis_dir, seed_project};
use serde_json::{Value, json};

/// The most one host's scenario may take.
const HOST_LIMIT: Duration = Duration::from_secs(150);

/// The skill's description, as `caesar init` writes it (daemon/src/init.rs).
const SKILL_DESCRIPTION: &str = "Delegate coding work to other agent CLIs";

impl Host {
    /// The host's non-interactive run of `prompt`, allowed to call caesar's tools.
    fn args(self, prompt: &str) -> Vec<String> {
        let v: &[&str] = match self {
            // [V] MCP tools need a permission in -p: the server's whole set is pre-allowed.
            Host::Claude => {
                &["-p", prompt, "--output-format", "stream-json", "--verbose", "--allowedTools", "mcp__caesar"]
            }
            Host::Codex => &["exec", "--json", "--skip-git-repo-check", prompt],
            // An untrusted MCP server's tools need a confirmation, which -p cannot give: yolo.
            Host::Gemini => &["-p", prompt, "-o", "stream-json", "--approval-mode", "yolo", "--skip-trust"],
            Host::Opencode => &["run", "--format", "json", prompt],
            Host::Copilot => &["-p", prompt, "--output-format", "json", "--no-ask-user", "--allow-all-tools"],
            Host::Qwen => &["-p", prompt, "--output-format", "stream-json", "--approval-mode", "yolo"],
        };
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A call to caesar's `tool` as this host names it.
    fn call(self, tool: &str, input: Value) -> Reply {
        match self {
            // [V] codex offers a server's tools as one `namespace` tool, `mcp__<server>`; qwen
            // 0.24 defers MCP tools behind its `tool_search`: they are not in the request's
            // tools list, but its registry takes them by their full name.
            Host::Codex | Host::Qwen => self.channel(tool, input),
            // The others: whatever name in the request's tools list ends with the tool's.
            _ => Reply::tool_ending(tool, input),
        }
    }
}

/// One step of the scenario: the tool the model calls, and what its result must carry.
struct Step {
    tool: &'static str,
    input: Value,
    /// Texts the host's next request must contain (`{task_id}` is the delegated task's id).
    expect: &'static [&'static str],
}

/// The full round: list, delegate, await (woken by the question), status, answer, await to the
/// end, diff, apply.
fn round_trip() -> Vec<Step> {
    vec![
        Step { tool: "caesar_list_agents", input: json!({}), expect: &["helper"] },
        Step {
            tool: "caesar_delegate",
            input: json!({"objective": "Paint the button and write colour.txt.", "agent": "helper",
                "mode": "write", "isolation": "worktree", "channel": true, "timeout": 60_000}),
            expect: &["{task_id}"],
        },
        // Wakes early: the agent asks through the return channel.
        Step {
            tool: "caesar_await",
            input: json!({"task_ids": ["{task_id}"], "timeout_ms": 30_000}),
            expect: &["Which colour should the button be?"],
        },
        Step { tool: "caesar_status", input: json!({"task_id": "{task_id}"}), expect: &["{task_id}", "q_"] },
        Step {
            tool: "caesar_answer",
            input: json!({"task_id": "{task_id}", "question_id": "{question_id}", "answer": "blue"}),
            expect: &["answered"],
        },
        Step {
            tool: "caesar_await",
            input: json!({"task_ids": ["{task_id}"], "timeout_ms": 30_000, "wake_on_attention": false}),
            expect: &["painted it blue"],
        },
        Step { tool: "caesar_diff", input: json!({"task_id": "{task_id}"}), expect: &["colour.txt"] },
        Step { tool: "caesar_apply", input: json!({"task_id": "{task_id}"}), expect: &["applied"] },
    ]
}

/// One await that outlasts `ms`: the sleeper agent sleeps that long.
fn long_await(ms: u64) -> Vec<Step> {
    vec![
        Step {
            tool: "caesar_delegate",
            input: json!({"objective": "Take your time.", "agent": "sleeper", "mode": "read-only", "timeout": ms + 60_000}),
            expect: &["{task_id}"],
        },
        Step {
            tool: "caesar_await",
            input: json!({"task_ids": ["{task_id}"], "timeout_ms": ms + 30_000, "wake_on_attention": false}),
            expect: &["slept well"],
        },
    ]
}

/// What one host's run gave.
struct Run {
    host: Host,
    env: Env,
    server: ModelServer,
    stdout: String,
    stderr: String,
    status: Option<std::process::ExitStatus>,
    install: String,
    _homes: CliHomes,
}

impl Run {
    /// Sets up the homes, registers caesar-mcp, runs the host on `script` and returns.
    /// `extra_config` goes into the project's `.caesar/config.toml`, `codex_server` into codex's
    /// `[mcp_servers.caesar]`.
    async fn go(host: Host, script: Vec<Reply>, sleeper_ms: u64, extra_config: &str, codex_server: &str) -> Run {
        Run::go_with(host, script, sleeper_ms, extra_config, codex_server, None).await
    }

    /// The same, and with `drop_skills` (".claude" or ".agents") the skill `caesar init` put there
    /// removed, to see which location a host reads.
    async fn go_with(
        host: Host,
        script: Vec<Reply>,
        sleeper_ms: u64,
        extra_config: &str,
        codex_server: &str,
        drop_skills: Option<&str>,
    ) -> Run {
        let server = ModelServer::start(script);
        let sleep = sleeper_ms.to_string();
        let mut env = Env::new(&[
            (
                "helper",
                &[
                    "mcp-ask",
                    "Which colour should the button be?",
                    "write",
                    "colour.txt",
                    "blue\n",
                    "report",
                    "success",
                    "painted it blue",
                ],
            ),
            ("sleeper", &["sleep", &sleep, "report", "success", "slept well"]),
        ]);
        let project = env.project.path().to_path_buf();
        let config = project.join(".caesar/config.toml");
        let declared = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{declared}\n{extra_config}")).unwrap();
        seed_project(&project);

        let homes = CliHomes::new(&server);
        let path = format!("{}:{}", real_clis_dir().display(), std::env::var("PATH").unwrap_or_default());
        let host_env = host_env(&server, &homes, &path);
        // The daemon sees the hosts on PATH: `caesar init` deposits skills for those it finds.
        env.start_daemon_with(&[("PATH", path.as_str())]).await;

        let init = env.caesar(&["init"]);
        assert!(init.status.success(), "caesar init: {}", String::from_utf8_lossy(&init.stderr));
        for dir in [".claude/skills/caesar", ".agents/skills/caesar"] {
            assert!(project.join(dir).join("SKILL.md").exists(), "caesar init wrote no {dir} (hosts on PATH)");
        }
        if let Some(dir) = drop_skills {
            std::fs::remove_dir_all(project.join(dir).join("skills/caesar")).unwrap();
        }
        commit_base(&project);

        let install = install(host, &env, &host_env, codex_server);

        let mut cmd = tokio::process::Command::new(host.bin());
        cmd.args(host.args("Use caesar to delegate the button to the helper agent, then land its work."))
            .current_dir(&project)
            .env_clear()
            .envs(host_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            // The daemon's home, for the caesar-mcp the host starts (if the host passes it on).
            .envs(env.envs())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap();
        let out = tokio::time::timeout(HOST_LIMIT, child.wait_with_output()).await;
        let (stdout, stderr, status) = match out {
            Ok(Ok(o)) => (
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
                Some(o.status),
            ),
            Ok(Err(e)) => (String::new(), format!("wait: {e}"), None),
            Err(_) => (String::new(), format!("{} did not end within {HOST_LIMIT:?}", host.id()), None),
        };
        Run { host, env, server, stdout, stderr, status, install, _homes: homes }
    }

    fn debug(&self) -> String {
        let requests: Vec<String> = self
            .server
            .requests()
            .iter()
            .map(|r| format!("{} {}{}", r.method, r.path, if r.scripted { " (model)" } else { "" }))
            .collect();
        let results: Vec<String> = self
            .server
            .model_requests()
            .iter()
            .map(|r| last_tool_result(r).map(|(t, e)| format!("error={e} {}", clip(&t, 400))).unwrap_or_default())
            .collect();
        let tools = self.server.model_requests().first().map(|r| r.tool_names()).unwrap_or_default();
        format!(
            "host: {} exit {:?}\ninstall: {}\nstdout:\n{}\nstderr:\n{}\nrequests: {requests:#?}\ntool results: {results:#?}\ntools offered: {tools:?}",
            self.host.id(),
            self.status,
            self.install,
            clip(&self.stdout, 6000),
            clip(&self.stderr, 4000),
        )
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

/// The host's whole environment: the CLIs' (their homes, the model server, the dead proxy) and
/// what a login shell would give, no retries for claude, and `path` as PATH.
fn host_env(server: &ModelServer, homes: &CliHomes, path: &str) -> Vec<(String, String)> {
    [
        ("PATH", path.to_owned()),
        ("USER", "caesar-test".to_owned()),
        ("LANG", "C.UTF-8".to_owned()),
        ("TERM", "dumb".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_owned()),
    ]
    .into_iter()
    .chain(homes.env(server))
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// `caesar mcp install <host>` in the host's scratch home, the host on PATH; then what the host
/// needs beyond it. Returns what was done, for the report.
fn install(host: Host, env: &Env, host_env: &[(String, String)], codex_server: &str) -> String {
    let o = std::process::Command::new(caesar_bin())
        .args(["mcp", "install", host.id()])
        .current_dir(env.project.path())
        .env_clear()
        .envs(host_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .envs(env.envs())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut done = format!(
        "caesar mcp install {}: {}{}",
        host.id(),
        String::from_utf8_lossy(&o.stdout).trim(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    assert!(o.status.success(), "{done}");
    if host == Host::Codex {
        // codex starts MCP servers with a minimal environment, without CAESAR_HOME:
        // caesar-mcp would look for (and start) a daemon at the default paths. Its env table.
        let path = PathBuf::from(&host_env.iter().find(|(k, _)| k == "CODEX_HOME").unwrap().1).join("config.toml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("[mcp_servers.caesar]"), "caesar mcp install codex registered nothing:\n{text}");
        // [V] `codex exec` refuses every call of a server not pre-approved ("MCP tool call
        // requires approval, but approval policy is never"), and the env table is how
        // CAESAR_HOME reaches caesar-mcp: `caesar mcp install codex` writes both.
        assert!(
            text.contains("default_tools_approval_mode = \"approve\"") && text.contains("CAESAR_HOME"),
            "caesar mcp install codex left the entry incomplete:\n{text}"
        );
        if !codex_server.is_empty() {
            text = text.replace("tool_timeout_sec = 660\n", codex_server);
            std::fs::write(&path, text).unwrap();
            done.push_str(&format!("; set {}", codex_server.trim()));
        }
    }
    done
}

/// The last tool result a model request carries, and whether the host marked it an error.
fn last_tool_result(r: &Request) -> Option<(String, bool)> {
    let b = &r.body;
    // Anthropic: the last user message's tool_result blocks.
    if let Some(messages) = b.get("messages").and_then(Value::as_array) {
        let block = messages
            .iter()
            .rev()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("tool_result"))?;
        let error = block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
        return Some((block.get("content").map(text_of).unwrap_or_default(), error));
    }
    // Responses: the last function_call_output item.
    if let Some(input) = b.get("input").and_then(Value::as_array) {
        let item = input
            .iter()
            .rev()
            .find(|i| i.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with("call_output")))?;
        let out = item.get("output").map(text_of).unwrap_or_default();
        // [V] codex reports a failed MCP call in the output's text, not as a flag: "tool call
        // error: tool call failed for `caesar/caesar_await`", "MCP tool call requires approval".
        let error = item.pointer("/output/success") == Some(&Value::Bool(false))
            || out.contains("tool call error")
            || out.contains("MCP tool call requires approval");
        return Some((out, error));
    }
    // Gemini: the last functionResponse part.
    if let Some(contents) = b.get("contents").and_then(Value::as_array) {
        let part = contents
            .iter()
            .rev()
            .filter_map(|c| c.get("parts").and_then(Value::as_array))
            .flatten()
            .find(|p| p.get("functionResponse").is_some())?;
        let response = &part["functionResponse"]["response"];
        let error = response.get("error").is_some();
        return Some((text_of(response), error));
    }
    None
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `real-host` figures of one run: ms from each tool call to the request carrying its result.
struct Timing {
    tool: &'static str,
    ms: u128,
}

/// Checks every step's result reached the model, unmarked as an error and carrying what it must.
/// Returns the timings.
fn check_steps(run: &Run, steps: &[Step], first: usize) -> Vec<Timing> {
    let requests = run.server.model_requests();
    assert!(
        requests.len() > first + steps.len(),
        "{} made {} model requests for {} tool calls:\n{}",
        run.host.id(),
        requests.len(),
        steps.len(),
        run.debug()
    );
    let mut timings = Vec::new();
    let mut task_id = String::new();
    for (i, step) in steps.iter().enumerate() {
        let call = &requests[first + i];
        let answer = &requests[first + i + 1];
        let (text, error) = last_tool_result(answer)
            .unwrap_or_else(|| panic!("{}: no tool result after {}:\n{}", run.host.id(), step.tool, run.debug()));
        assert!(!error, "{}: {} came back as an error: {text}\n{}", run.host.id(), step.tool, run.debug());
        if step.tool == "caesar_delegate" {
            task_id = last_id(&text, "t_", 12)
                .unwrap_or_else(|| panic!("{}: no task id in the delegate result: {text}", run.host.id()));
        }
        for want in step.expect {
            let want = want.replace("{task_id}", &task_id);
            assert!(
                text.contains(&want),
                "{}: {}'s result lacks {want:?}: {text}\n{}",
                run.host.id(),
                step.tool,
                run.debug()
            );
        }
        timings.push(Timing { tool: step.tool, ms: answer.at.duration_since(call.at).as_millis() });
    }
    timings
}

/// Lines of the host's output that speak of caesar and look like a complaint.
fn warnings_about_caesar(run: &Run) -> Vec<String> {
    run.stderr
        .lines()
        .chain(run.stdout.lines())
        .filter(|line| {
            let l = line.to_ascii_lowercase();
            // gemini prints schema complaints without naming the server.
            if l.contains("unknown format") {
                return true;
            }
            if !l.contains("caesar") && !l.contains("mcp") {
                return false;
            }
            if serde_json::from_str::<Value>(line).is_ok() {
                // An event of the host's JSON stream, which echoes tool results and caesar's
                // instructions: only a server status or a warning event counts.
                ["\"status\":\"failed\"", "\"status\":\"error\"", "unknown format", "\"level\":\"warn"]
                    .iter()
                    .any(|w| l.contains(w))
            } else {
                ["warn", "error", "unknown format", "failed", "invalid"].iter().any(|w| l.contains(w))
            }
        })
        .map(|l| clip(l, 300))
        .collect()
}

/// The whole scenario for one host: returns the run and prints its figures.
async fn scenario(host: Host, steps: Vec<Step>, sleeper_ms: u64, extra_config: &str) -> Run {
    let started = Instant::now();
    let mut script: Vec<Reply> = steps.iter().map(|s| host.call(s.tool, s.input.clone())).collect();
    script.push(Reply::text("The helper painted the button blue and its work is applied."));
    let run = Run::go(host, script, sleeper_ms, extra_config, "").await;
    let timings = check_steps(&run, &steps, 0);

    // The tasks ran in this suite's daemon (caesar-mcp found it through CAESAR_HOME).
    let last = run.server.model_requests().pop().unwrap().body_text();
    let id = last_id(&last, "t_", 12).unwrap();
    assert!(run.env.paths.state_dir.join("tasks").join(&id).exists(), "{id} is not a task of the suite's daemon");
    if steps.iter().any(|s| s.tool == "caesar_apply") {
        assert_eq!(std::fs::read_to_string(run.env.project.path().join("colour.txt")).unwrap(), "blue\n");
    }

    // Any warning about caesar fails, a host's schema complaint (`unknown format "uint64"`, which
    // gemini and opencode printed before the tool schemas were made strict) included.
    let warnings = warnings_about_caesar(&run);
    let figures: Vec<String> = timings.iter().map(|t| format!("{}={}ms", t.tool, t.ms)).collect();
    eprintln!(
        "real-host {}: {} tool calls, wall {} ms; {}",
        host.id(),
        steps.len(),
        started.elapsed().as_millis(),
        figures.join(" ")
    );
    assert!(warnings.is_empty(), "{} warned about caesar: {warnings:#?}\n{}", host.id(), run.debug());
    if std::env::var_os("CAESAR_REAL_HOSTS_DEBUG").is_some() {
        eprintln!("{}", run.debug());
    }
    run
}

/// Whether the host's first model request shows caesar's skill (its name and description in the
/// system prompt or a tool's description).
fn skill_seen(run: &Run) -> bool {
    let first = run.server.model_requests().first().map(|r| r.body_text()).unwrap_or_default();
    if let Some(i) = first.find(SKILL_DESCRIPTION) {
        let from = first[..i].char_indices().rev().nth(300).map(|(j, _)| j).unwrap_or(0);
        eprintln!("real-host {} skill context: {}", run.host.id(), clip(&first[from..], 800));
    }
    first.contains(SKILL_DESCRIPTION)
}

/// The round trip for one host, and whether the host showed the model the skill.
async fn round_trip_through(host: Host) -> bool {
    let run = scenario(host, round_trip(), 1_000, "").await;
    let seen = skill_seen(&run);
    eprintln!("real-host {} skill seen: {seen}", host.id());
    seen
}

// Every host here reads the skill `caesar init` deposits: claude from .claude/skills, the others
// from .agents/skills (the system prompt or the skill tool's description lists it).

#[tokio::test]
async fn claude_as_host_delegates_answers_and_applies_through_caesar() {
    assert!(round_trip_through(Host::Claude).await, "claude lists .claude/skills/caesar");
}

#[tokio::test]
async fn codex_as_host_delegates_answers_and_applies_through_caesar() {
    assert!(round_trip_through(Host::Codex).await, "codex lists .agents/skills/caesar");
}

#[tokio::test]
async fn gemini_as_host_delegates_answers_and_applies_through_caesar() {
    assert!(round_trip_through(Host::Gemini).await, "gemini lists .agents/skills/caesar");
}

#[tokio::test]
async fn opencode_as_host_delegates_answers_and_applies_through_caesar() {
    assert!(round_trip_through(Host::Opencode).await, "opencode lists .agents/skills/caesar");
}

#[tokio::test]
async fn copilot_as_host_delegates_answers_and_applies_through_caesar() {
    assert!(round_trip_through(Host::Copilot).await, "copilot lists .agents/skills/caesar");
}

#[tokio::test]
async fn qwen_as_host_delegates_answers_and_applies_through_caesar() {
    assert!(round_trip_through(Host::Qwen).await, "qwen lists .agents/skills/caesar");
}

/// An await longer than a minute: the default tool-call timeout of the MCP TypeScript SDK
/// (60 s) that opencode and copilot build on (opencode resets it on progress, which caesar_await
/// sends), and the `tool_timeout_sec` default older codex releases documented. [V] codex 0.171
/// lets a 130 s await through by default (tried once by hand), but cuts a call at an explicit
/// `tool_timeout_sec` whatever the progress (codex_tool_timeout_shorter_than_an_await).
/// claude's default is 1e8 ms (`MCP_TOOL_TIMEOUT`) and gemini's and qwen's 10 min: out of reach
/// here, so they are not run past it.
const LONG_AWAIT_MS: u64 = 70_000;

#[tokio::test]
async fn codex_as_host_awaits_past_its_tool_timeout() {
    scenario(Host::Codex, long_await(LONG_AWAIT_MS), LONG_AWAIT_MS, "").await;
}

#[tokio::test]
async fn opencode_as_host_awaits_past_a_minute() {
    scenario(Host::Opencode, long_await(LONG_AWAIT_MS), LONG_AWAIT_MS, "").await;
}

#[tokio::test]
async fn copilot_as_host_awaits_past_a_minute() {
    scenario(Host::Copilot, long_await(LONG_AWAIT_MS), LONG_AWAIT_MS, "").await;
}

/// A question asked while the await that should report it is already waiting, on a task that
/// was still being prepared when the await began (a 3 s worktree setup): the await must wake.
/// (It once did not: a task became live only when it started, so an await begun while it
/// prepared was woken by nothing but its end. Tasks are live from delegation now.)
#[tokio::test]
async fn claude_as_host_await_wakes_on_a_question_asked_after_preparation() {
    let started = Instant::now();
    let run = scenario(Host::Claude, round_trip(), 1_000, "[worktree]\nsetup = [\"sleep 3\"]\n").await;
    let requests = run.server.model_requests();
    // Request 2 carries delegate's answer and makes the await call; request 3 its answer.
    let waited = requests[3].at.duration_since(requests[2].at);
    assert!(
        waited < Duration::from_secs(15),
        "the await slept through the question: {waited:?} ({:?} in all)",
        started.elapsed()
    );
}

/// codex's own limit on one tool call (`tool_timeout_sec`, here 5 s) against a 12 s await: what
/// the model gets back. caesar_await sends progress notifications; this shows whether codex
/// lets them extend the call.
#[tokio::test]
async fn codex_tool_timeout_shorter_than_an_await() {
    let host = Host::Codex;
    let steps = long_await(12_000);
    let mut script: Vec<Reply> = steps.iter().map(|s| host.call(s.tool, s.input.clone())).collect();
    script.push(Reply::text("Done."));
    let run = Run::go(host, script, 12_000, "", "tool_timeout_sec = 5\n").await;
    let requests = run.server.model_requests();
    assert!(requests.len() >= 3, "{}", run.debug());
    let (text, error) = last_tool_result(&requests[2]).unwrap_or_else(|| panic!("no await result:\n{}", run.debug()));
    let waited = requests[2].at.duration_since(requests[1].at);
    eprintln!("real-host codex tool_timeout_sec=5, 12 s await: after {waited:?}, error={error}: {}", clip(&text, 300));
    assert!(waited < Duration::from_secs(10), "codex cut the call at its timeout: {waited:?}: {text}");
    assert!(error && text.contains("timed out awaiting tools/call"), "the model is told it timed out: {text}");
}

/// Whether the host shows the model caesar's skill when only `keep` (".claude" or ".agents")
/// holds it: one model turn, no tool call.
async fn reads_skill_from(host: Host, keep: &str) -> bool {
    let drop = if keep == ".claude" { ".agents" } else { ".claude" };
    let run = Run::go_with(host, vec![Reply::text("Nothing to do.")], 1_000, "", "", Some(drop)).await;
    assert!(!run.server.model_requests().is_empty(), "{}", run.debug());
    let seen = skill_seen(&run);
    eprintln!("real-host {} reads {keep}/skills: {seen}", host.id());
    seen
}

/// Which of the two locations `caesar init` writes each host reads (the pinned versions).
async fn skill_locations(host: Host, claude: bool, agents: bool) {
    let from_claude = reads_skill_from(host, ".claude").await;
    let from_agents = reads_skill_from(host, ".agents").await;
    assert_eq!((from_claude, from_agents), (claude, agents), "{}: (.claude/skills, .agents/skills) read", host.id());
}

#[tokio::test]
async fn claude_reads_the_skill_from_claude_skills_only() {
    skill_locations(Host::Claude, true, false).await;
}

#[tokio::test]
async fn codex_reads_the_skill_from_agents_skills_only() {
    skill_locations(Host::Codex, false, true).await;
}

#[tokio::test]
async fn gemini_reads_the_skill_from_agents_skills_only() {
    skill_locations(Host::Gemini, false, true).await;
}

#[tokio::test]
async fn opencode_reads_the_skill_from_both() {
    skill_locations(Host::Opencode, true, true).await;
}

#[tokio::test]
async fn copilot_reads_the_skill_from_both() {
    skill_locations(Host::Copilot, true, true).await;
}

#[tokio::test]
async fn qwen_reads_the_skill_from_agents_skills_only() {
    skill_locations(Host::Qwen, false, true).await;
}

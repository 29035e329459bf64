//! Issue 19, prompts out of argv and out of what is stored and shown ("a prompt over 128 KiB
//! fails with E2BIG"; "full prompts sit in argv, in the `started` event, in `events.jsonl` and
//! in the stored launch record"), through the real daemon, supervisor and shim:
//!
//! - a fake agent with `prompt_input = "stdin"` gets a 200 KiB prompt whole on its stdin while
//!   neither its `/proc/<pid>/cmdline` nor its supervisor's holds any of it, and the `started`
//!   event (`Logs`, `caesar_logs`, `caesar logs`), `events.jsonl` and the stored launch show
//!   only its size; no environment of the task holds a channel secret (there is none);
//! - argv-only agents (an `[[agent]]` with `{{prompt}}`, the built-in antigravity) given the
//!   same prompt are refused at delegation, naming the agent, the kernel's limit and the agents
//!   that take longer prompts, with nothing recorded; a small prompt still goes through argv;
//! - the real codex (`exec -` on stdin, and `app-server`) and the real gemini (ACP) get a
//!   200 KiB prompt, the scripted model server sees all of it, and no process of the task holds
//!   it in its command line while it runs.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use caesar_proto::client::Client;
use caesar_proto::pb;
use caesar_tests::model_server::{ModelServer, Reply};
use common::*;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(120);

/// Words that appear nowhere but in the prompt.
const WORDS: &str = "zebra quartz lantern ";
/// The objective's last words: seen whole, the prompt arrived whole.
const END_MARK: &str = "END-OF-PROMPT-7f3a";

/// An objective of about `bytes` bytes, ending with [`END_MARK`].
fn objective(bytes: usize) -> String {
    format!("Read this material and report.\n{}\n{END_MARK}", WORDS.repeat(bytes / WORDS.len()))
}

/// Whether `text` holds any piece of the prompt.
fn holds_prompt(text: &str) -> bool {
    text.contains("zebra quartz") || text.contains(END_MARK)
}

/// Where in `text` the prompt shows, for a failure's message.
fn around_prompt(text: &str) -> String {
    let at = text.find("zebra quartz").or_else(|| text.find(END_MARK)).unwrap_or(0);
    text.chars().skip(text[..at].chars().count().saturating_sub(300)).take(400).collect()
}

async fn events(c: &mut Client, id: &str) -> Vec<Value> {
    let logs = c
        .logs(pb::LogsRequest { task_id: id.to_owned(), limit: 10_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    logs.events_json.iter().map(|e| json(e)).collect()
}

fn started_command(evs: &[Value]) -> String {
    evs.iter().find(|e| e["type"] == "started").and_then(|e| e["command"].as_str()).unwrap_or_default().to_owned()
}

/// The stored launch of a task, as the store holds it.
fn stored_launch(env: &Env, id: &str) -> String {
    let db = rusqlite::Connection::open(env.paths.state_dir.join("caesar.db")).unwrap();
    db.query_row("SELECT launch_json FROM tasks WHERE id = ?1", [id], |r| r.get::<_, String>(0)).unwrap()
}

fn task_dir(env: &Env, id: &str) -> PathBuf {
    env.paths.state_dir.join("tasks").join(id)
}

fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ")
}

/// The command lines of every live process of task `id` (its supervisor, the agent and all they
/// started: they carry `CAESAR_TASK_ID=<id>` in their environment).
fn task_cmdlines(id: &str) -> Vec<(u32, String)> {
    let mark = format!("CAESAR_TASK_ID={id}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if environ.split(|b| *b == 0).any(|v| v == mark.as_bytes()) {
            out.push((pid, cmdline(pid)));
        }
    }
    out
}

/// What `caesar_logs` answers for `id`, through a real `caesar-mcp`.
async fn mcp_logs(env: &Env, id: &str) -> String {
    let mut cmd = tokio::process::Command::new(bin_dir().join("caesar-mcp"));
    cmd.args(["--root", &env.workspace()]).current_dir(env.project.path()).envs(env.envs());
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(std::process::Stdio::null()).spawn().unwrap();
    let mcp = ().serve(transport).await.expect("initialize caesar-mcp");
    let Value::Object(args) = json!({"task_id": id, "limit": 100}) else { unreachable!() };
    let r = mcp.call_tool(CallToolRequestParams::new("caesar_logs".to_owned()).with_arguments(args)).await.unwrap();
    let _ = mcp.cancel().await;
    assert_ne!(r.is_error, Some(true), "caesar_logs failed: {r:?}");
    serde_json::to_string(&r).unwrap()
}

#[tokio::test]
async fn a_prompt_on_stdin_is_in_no_argv_event_or_record_and_argv_only_agents_refuse_what_cannot_fit() {
    let mut env = Env::new(&[]);
    let (got, pidfile, gate) = (env.file("got-prompt"), env.file("agent.pid"), env.file("gate"));
    let fake = fake_agent().display().to_string();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!(
            "[bin]\nantigravity = {fake:?}\n\n\
             [[agent]]\nid = \"stdin-agent\"\nbin = {fake:?}\nprompt_input = \"stdin\"\n\
             args = [\"sh\", \"cat > '{}'\", \"pid\", {:?}, \"wait-file\", {:?}, \"report\", \"success\", \"ok\"]\n\n\
             [[agent]]\nid = \"argv-agent\"\nbin = {fake:?}\nargs = [\"{{{{prompt}}}}\", \"report\", \"success\", \"ok\"]\n",
            got.display(),
            pidfile.display().to_string(),
            gate.display().to_string(),
        ),
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let big = objective(200 * 1024);

    // 1. On stdin: the agent reads all of it, and no command line holds any of it. With the
    //    return channel, which needs no secret in any process's environment.
    let mut req = env.delegate_request("stdin-agent", &big);
    req.channel = true;
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || !pids_in(&pidfile).is_empty()).await, "the agent started");
    for pid in task_cmdlines(&id).iter().map(|(p, _)| *p).chain([pids_in(&pidfile)[0]]) {
        let environ =
            String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()).into_owned();
        assert!(!environ.contains("CAESAR_CHANNEL_SECRET"), "{pid} holds a channel secret");
    }
    let agent = pids_in(&pidfile)[0];
    let (agent_argv, supervisor_argv) = (cmdline(agent), cmdline(supervisor_of(agent)));
    assert!(agent_argv.contains("wait-file"), "the agent's own argv was read: {agent_argv}");
    assert!(supervisor_argv.contains("__supervise") && supervisor_argv.contains("--stdin-prompt"), "{supervisor_argv}");
    let tree = task_cmdlines(&id);
    assert!(tree.len() >= 2, "the supervisor and the agent carry the task's id: {tree:?}");
    for (pid, argv) in tree.iter().chain([&(agent, agent_argv.clone()), &(0, supervisor_argv.clone())]) {
        assert!(!holds_prompt(argv), "the command line of {pid} holds the prompt");
        assert!(argv.len() < 4096, "{pid}: {} bytes of argv", argv.len());
    }
    std::fs::write(&gate, "").unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let read = std::fs::read_to_string(&got).unwrap();
    assert!(read.starts_with(&format!("# Task {id}")) && read.contains(&big), "the whole brief came on stdin");
    let command = started_command(&events(&mut c, &id).await);
    assert!(command.contains(&format!(" < <prompt: {} bytes via stdin>", read.len())), "{command}");
    let events_jsonl = std::fs::read_to_string(task_dir(&env, &id).join("events.jsonl")).unwrap();
    let launch = stored_launch(&env, &id);
    let cli = env.caesar(&["logs", &id]);
    let cli = String::from_utf8_lossy(&cli.stdout).into_owned() + &String::from_utf8_lossy(&cli.stderr);
    let mcp = mcp_logs(&env, &id).await;
    assert!(mcp.contains("bytes via stdin>") && cli.contains("bytes via stdin>"), "{mcp}\n{cli}");
    for (what, text) in [
        ("the started event", command.as_str()),
        ("events.jsonl", &events_jsonl),
        ("the stored launch", &launch),
        ("caesar logs", &cli),
        ("caesar_logs", &mcp),
    ] {
        assert!(!holds_prompt(text), "{what} holds the prompt: …{}…", around_prompt(text));
    }
    assert!(launch.contains(r#""via":"stdin""#), "{launch}");
    // The objective stays where the user asked for it.
    let status = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(status.objective.contains(END_MARK));

    // 2. argv only: refused at delegation, naming the agent, the limit and the way out; nothing
    //    recorded. The same for the built-in adapter that takes its prompt only in argv.
    let tasks = env.paths.state_dir.join("tasks");
    let before = std::fs::read_dir(&tasks).unwrap().count();
    for agent in ["argv-agent", "antigravity"] {
        let e = c.delegate(env.delegate_request(agent, &big)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{agent}: {e:?}");
        let m = e.message();
        assert!(m.contains(&format!("`{agent}`")) && m.contains("131072") && m.contains("MAX_ARG_STRLEN"), "{m}");
        assert!(m.contains("codex") && m.contains("gemini") && m.contains("prompt_input"), "the way out: {m}");
        assert!(!holds_prompt(m), "{m}");
    }
    assert_eq!(std::fs::read_dir(&tasks).unwrap().count(), before, "nothing recorded");
    let list = c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner();
    assert_eq!(list.tasks.len(), 1, "only the first task exists: {list:?}");

    // 3. A prompt that fits still goes through argv, and is shown by its size there too.
    let id =
        c.delegate(env.delegate_request("argv-agent", "Say zebra quartz once.")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let command = started_command(&events(&mut c, &id).await);
    assert!(command.contains("<prompt: ") && command.contains(" bytes in argv>"), "{command}");
    assert!(!holds_prompt(&command) && !holds_prompt(&stored_launch(&env, &id)), "{command}");
}

// ------------------------------------------------------------------ the real CLIs

fn real_bin(name: &str) -> PathBuf {
    let dir = match std::env::var_os("CAESAR_REAL_CLIS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("real-clis/node_modules/.bin"),
    };
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: `npm install --prefix tests/real-clis --no-save --no-audit --no-fund`",
        bin.display()
    );
    bin
}

/// A daemon whose codex and gemini talk to `server` only (own homes, a dead proxy, no
/// retries), in a git project.
async fn real_rig(server: &ModelServer, extra: &[(&str, &str)]) -> (Env, Client, tempfile::TempDir) {
    let mut env = Env::new(&[]);
    let project = env.project.path().to_path_buf();
    std::fs::write(
        project.join(".caesar/config.toml"),
        format!(
            "[bin]\ncodex = {:?}\ngemini = {:?}\n",
            real_bin("codex").display().to_string(),
            real_bin("gemini").display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(project.join("README.md"), "hello\n").unwrap();
    std::fs::write(project.join(".gitignore"), ".caesar/\n").unwrap();
    git(&project, &["init", "-q"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "base"]);
    // codex refuses helper binaries under /tmp: keep the homes in the target directory.
    let homes = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (home, codex_home) = (homes.path().join("home"), homes.path().join("codex"));
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        home.join(".gemini/settings.json"),
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
            "privacy": {"usageStatisticsEnabled": false}, "general": {"maxAttempts": 1}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\n\
             base_url = \"{}/v1\"\nenv_key = \"FAKE_KEY\"\nwire_api = \"responses\"\n\
             request_max_retries = 0\nstream_max_retries = 0\n",
            server.url()
        ),
    )
    .unwrap();
    let url = server.url();
    let (home_s, codex_s) = (home.display().to_string(), codex_home.display().to_string());
    let xdg = |d: &str| home.join(d).display().to_string();
    let (config, data, cache, state) = (xdg(".config"), xdg(".local/share"), xdg(".cache"), xdg(".local/state"));
    let mut daemon_env: Vec<(&str, &str)> = vec![
        ("HOME", &home_s),
        ("CODEX_HOME", &codex_s),
        ("FAKE_KEY", "test-key-1"),
        ("CAESAR_PASS_ENV", "FAKE_KEY,npm_config_*"),
        ("HTTP_PROXY", "http://127.0.0.1:9"),
        ("HTTPS_PROXY", "http://127.0.0.1:9"),
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("CAESAR_PERMISSION_TIMEOUT_MS", "60000"),
        ("XDG_CONFIG_HOME", &config),
        ("XDG_DATA_HOME", &data),
        ("XDG_CACHE_HOME", &cache),
        ("XDG_STATE_HOME", &state),
        ("GOOGLE_GEMINI_BASE_URL", &url),
        ("GEMINI_API_KEY", "test-key-1"),
        ("GEMINI_CLI_NO_RELAUNCH", "true"),
        ("npm_config_registry", "http://127.0.0.1:9"),
    ];
    daemon_env.extend_from_slice(extra);
    let c = env.start_daemon_with(&daemon_env).await;
    (env, c, homes)
}

/// Every string in a JSON value, one a line: where a CLI put the prompt in its request.
fn strings_of(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| strings_of(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings_of(x, out)),
        _ => {}
    }
}

/// How a real CLI is kept running while the test reads its command lines.
#[derive(Clone, Copy)]
enum Hold {
    /// Its first tool call is a shell command that waits for a file (codex runs it in its
    /// sandbox without asking).
    Gate,
    /// Its first tool call is a shell command it asks permission for (gemini in write mode):
    /// a pending question until the test answers it.
    Question,
}

/// Delegates a 200 KiB objective to `agent` and checks that the model server saw all of it,
/// that no process of the task held it in its command line while it ran, and that the task's
/// records show only its size, `via` its way.
async fn a_large_prompt_reaches_the_model(agent: &str, extra: &[(&str, &str)], hold: Hold, via: &str) {
    let answer = "Read.\n\n```json caesar:report\n{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\
                  \"summary\":\"read the material\"}\n```\n";
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("gate");
    let first = match hold {
        Hold::Gate => Reply::tool(
            "exec_command",
            json!({"cmd": format!("while [ ! -e '{}' ]; do sleep 0.1; done; echo gated", gate.display())}),
        ),
        Hold::Question => Reply::tool("run_shell_command", json!({"command": "echo asked > asked.txt"})),
    };
    let server = ModelServer::start(vec![first, Reply::text(answer)]);
    let (env, mut c, _homes) = real_rig(&server, extra).await;
    let big = objective(200 * 1024);
    let mut req = env.delegate_request(agent, &big);
    match hold {
        Hold::Gate => req.mode = "read-only".into(),
        Hold::Question => (req.mode, req.isolation) = ("write".into(), "worktree".into()),
    }
    req.timeout_ms = 150_000;
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let raw = |env: &Env| -> String {
        let raw =
            std::fs::read_to_string(caesar_tests::daemon_files(task_dir(env, &id)).join("raw.log")).unwrap_or_default();
        raw.chars().take(4000).collect()
    };

    // The CLI has the prompt (the model saw it) and is held: read every command line of the task.
    let first_request = tokio::task::block_in_place(|| server.wait_for_model_requests(1, LONG));
    assert!(first_request, "{agent}: no model request\n{}", raw(&env));
    let mut seen = String::new();
    strings_of(&server.model_requests()[0].body, &mut seen);
    assert!(seen.contains(&big), "{agent}: the model saw {} bytes, not the whole objective\n{}", seen.len(), raw(&env));
    let deadline = Instant::now() + LONG;
    if let Hold::Question = hold {
        loop {
            let t = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap();
            if !t.get_ref().pending_questions.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline && t.get_ref().status().as_str() == "running",
                "{agent}: no question\n{}",
                raw(&env)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let tree = task_cmdlines(&id);
    assert!(tree.len() >= 2, "{agent}: the supervisor and the CLI are running: {tree:?}\n{}", raw(&env));
    for (pid, argv) in &tree {
        assert!(!holds_prompt(argv), "{agent}: the command line of {pid} holds the prompt");
    }
    std::fs::write(&gate, "").unwrap();
    if let Hold::Question = hold {
        let t = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
        let question_id = t.pending_questions[0].question_id.clone();
        let answer = pb::AnswerRequest { task_id: id.clone(), question_id, answer: "allow".into() };
        c.answer(answer).await.unwrap();
    }
    let t = await_one(&mut c, &id, Duration::from_secs(180)).await;
    assert_eq!(t.report_status, "success", "{agent}: {t:?}\n{}", raw(&env));
    let command = started_command(&events(&mut c, &id).await);
    assert!(command.contains(&format!(" bytes {via}>")), "{agent}: {command}");
    let events_jsonl = std::fs::read_to_string(task_dir(&env, &id).join("events.jsonl")).unwrap();
    for (what, text) in [
        ("the started event", command.as_str()),
        ("events.jsonl", &events_jsonl),
        ("the launch", &stored_launch(&env, &id)),
    ] {
        assert!(!holds_prompt(text), "{agent}: {what} holds the prompt: …{}…", around_prompt(text));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_kib_prompt_reaches_the_model_through_codex_exec_on_stdin() {
    a_large_prompt_reaches_the_model("codex", &[("CAESAR_CODEX_PROTOCOL", "exec")], Hold::Gate, "via stdin").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_kib_prompt_reaches_the_model_through_codex_app_server() {
    let via = "via the stdin protocol";
    a_large_prompt_reaches_the_model("codex", &[("CAESAR_CODEX_PROTOCOL", "app-server")], Hold::Gate, via).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_kib_prompt_reaches_the_model_through_gemini_acp() {
    a_large_prompt_reaches_the_model("gemini", &[], Hold::Question, "via the stdin protocol").await;
}

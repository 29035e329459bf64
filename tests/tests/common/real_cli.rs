//! The one rig of the tests that run the real agent CLIs of `tests/real-clis` against the
//! scripted model server of `caesar_tests::model_server` (real_clis.rs, real_sessions.rs,
//! real_codex_sessions.rs, real_hosts.rs): where npm installed the CLIs, how each one's model
//! calls its tools, their scratch homes and config files, the environment that points them at
//! the server and nowhere else, and [`Rig`], a real daemon plus an MCP client of a real
//! `caesar-mcp` that delegates to one CLI and waits for it.
//!
//! A test binary takes it with `#[path = "common/real_cli.rs"] mod real_cli;` beside
//! `mod common;`, so that the binaries that run no real CLI do not compile it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use caesar_tests::model_server::{ModelServer, Reply};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::common::{Env, alive, bin_dir, commit_base};

/// The directory of the installed CLIs: `CAESAR_REAL_CLIS`, else `tests/real-clis/node_modules/.bin`.
pub fn real_clis_dir() -> PathBuf {
    match std::env::var_os("CAESAR_REAL_CLIS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("real-clis/node_modules/.bin"),
    }
}

/// One of the real CLIs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cli {
    Claude,
    Codex,
    Gemini,
    Opencode,
    Copilot,
    Qwen,
}

impl Cli {
    /// Its agent id, which is also the name of its binary.
    pub fn id(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Opencode => "opencode",
            Cli::Copilot => "copilot",
            Cli::Qwen => "qwen",
        }
    }

    /// The binary npm installed; a clear failure when the install step was skipped.
    pub fn bin(self) -> PathBuf {
        let bin = real_clis_dir().join(self.id());
        assert!(
            bin.exists(),
            "{} is missing: install the real CLIs with `npm install --prefix tests/real-clis --no-save --no-audit --no-fund` (README, tests)",
            bin.display()
        );
        bin
    }

    /// Creates `path` (relative to the agent's directory) holding `content`.
    pub fn create(self, path: &str, content: &str) -> Reply {
        match self {
            Cli::Claude => Reply::tool("Write", json!({"file_path": format!("{{cwd}}/{path}"), "content": content})),
            Cli::Codex => {
                let body: String = content.lines().map(|l| format!("+{l}\n")).collect();
                patch(&format!("*** Add File: {path}\n{body}"))
            }
            Cli::Gemini => Reply::tool("write_file", json!({"file_path": path, "content": content})),
            Cli::Opencode => Reply::tool("write", json!({"filePath": format!("{{cwd}}/{path}"), "content": content})),
            Cli::Copilot => Reply::tool("create", json!({"path": format!("{{cwd}}/{path}"), "file_text": content})),
            Cli::Qwen => Reply::tool("write_file", json!({"file_path": format!("{{cwd}}/{path}"), "content": content})),
        }
    }

    /// Replaces `old` by `new` in `path`.
    pub fn edit(self, path: &str, old: &str, new: &str) -> Reply {
        match self {
            Cli::Claude => Reply::tool(
                "Edit",
                json!({"file_path": format!("{{cwd}}/{path}"), "old_string": old, "new_string": new}),
            ),
            Cli::Codex => patch(&format!("*** Update File: {path}\n@@\n-{old}\n+{new}\n")),
            Cli::Gemini => Reply::tool(
                "replace",
                json!({"file_path": path, "old_string": old, "new_string": new, "instruction": "greet the world"}),
            ),
            Cli::Opencode => {
                Reply::tool("edit", json!({"filePath": format!("{{cwd}}/{path}"), "oldString": old, "newString": new}))
            }
            Cli::Copilot => {
                Reply::tool("edit", json!({"path": format!("{{cwd}}/{path}"), "old_str": old, "new_str": new}))
            }
            Cli::Qwen => Reply::tool(
                "edit",
                json!({"file_path": format!("{{cwd}}/{path}"), "old_string": old, "new_string": new}),
            ),
        }
    }

    /// A shell command as the model calls it.
    pub fn shell(self, command: &str) -> Reply {
        match self {
            Cli::Claude => Reply::tool("Bash", json!({"command": command, "description": "run a command"})),
            Cli::Codex => Reply::tool("exec_command", json!({"cmd": command})),
            Cli::Gemini | Cli::Qwen => Reply::tool("run_shell_command", json!({"command": command})),
            Cli::Opencode | Cli::Copilot => {
                Reply::tool("bash", json!({"command": command, "description": "run a command"}))
            }
        }
    }

    /// A call to one of caesar's MCP tools (the return channel's, or the host's `caesar_*`), as
    /// the CLI names it ([V] captures-local/*-mcp.jsonl).
    pub fn channel(self, tool: &str, input: Value) -> Reply {
        match self {
            // [V] qwen 0.24, like claude, names them `mcp__<server>__<tool>`.
            Cli::Claude | Cli::Qwen => Reply::tool(&format!("mcp__caesar__{tool}"), input),
            // [V] codex offers a server's tools as one `namespace` tool, `mcp__<server>`, whose
            // members the model calls by name within it.
            Cli::Codex => Reply::ResponsesItem(json!({
                "type": "function_call", "id": format!("fc_{tool}"), "call_id": format!("call_{tool}"),
                "namespace": "mcp__caesar", "name": tool, "arguments": input.to_string(), "status": "completed"})),
            Cli::Gemini => Reply::tool(&format!("mcp_caesar_{tool}"), input),
            Cli::Opencode => Reply::tool(&format!("caesar_{tool}"), input),
            Cli::Copilot => Reply::tool(&format!("caesar-{tool}"), input),
        }
    }
}

/// codex's apply_patch, which it intercepts when the model runs it as a command.
fn patch(body: &str) -> Reply {
    Reply::tool(
        "exec_command",
        json!({"cmd": format!("apply_patch <<'EOF'\n*** Begin Patch\n{body}*** End Patch\nEOF\n")}),
    )
}

/// The CLIs' scratch homes, with each CLI's config file pointing at the model server.
pub struct CliHomes {
    dir: tempfile::TempDir,
    /// `HOME`, with gemini's and qwen's settings.
    pub home: PathBuf,
    /// `CODEX_HOME`, with codex's `config.toml`.
    pub codex_home: PathBuf,
    /// `CLAUDE_CONFIG_DIR`.
    pub claude_config: PathBuf,
    /// `XDG_CONFIG_HOME`, with opencode's `opencode.json`.
    pub xdg_config: PathBuf,
}

impl CliHomes {
    /// Creates the homes and writes every CLI's config against `server`.
    pub fn new(server: &ModelServer) -> CliHomes {
        // codex refuses helper binaries under /tmp: keep the homes in the target directory.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let home = dir.path().join("home");
        let homes = CliHomes {
            codex_home: dir.path().join("codex"),
            claude_config: dir.path().join("claude"),
            xdg_config: home.join(".config"),
            home,
            dir,
        };
        for d in [
            &homes.home,
            &homes.codex_home,
            &homes.claude_config,
            &homes.xdg_config.join("opencode"),
            &homes.home.join(".gemini"),
            &homes.home.join(".qwen"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        homes.write_configs(server);
        homes
    }

    /// The directory holding them all.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write_configs(&self, server: &ModelServer) {
        // gemini: an API key against the base URL, no folder trust prompt, no usage statistics.
        std::fs::write(
            self.home.join(".gemini/settings.json"),
            json!({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
                "privacy": {"usageStatisticsEnabled": false}, "general": {"maxAttempts": 1}})
            .to_string(),
        )
        .unwrap();
        // qwen: its anthropic auth type (ANTHROPIC_BASE_URL, as claude).
        std::fs::write(
            self.home.join(".qwen/settings.json"),
            json!({"security": {"auth": {"selectedType": "anthropic"}}, "model": {"name": "claude-sonnet-4-5"}})
                .to_string(),
        )
        .unwrap();
        // opencode: its built-in anthropic provider, pointed at the server.
        std::fs::write(
            self.xdg_config.join("opencode/opencode.json"),
            json!({"model": "anthropic/claude-sonnet-4-5",
                "provider": {"anthropic": {"options": {"baseURL": format!("{}/v1", server.url()), "apiKey": "test-key-1"}}}})
            .to_string(),
        )
        .unwrap();
        // codex: a custom provider on the Responses wire, no retries.
        std::fs::write(
            self.codex_home.join("config.toml"),
            format!(
                "model = \"gpt-5-codex\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\n\
                 base_url = \"{}/v1\"\nenv_key = \"FAKE_KEY\"\nwire_api = \"responses\"\n\
                 request_max_retries = 0\nstream_max_retries = 0\n",
                server.url()
            ),
        )
        .unwrap();
    }

    /// The environment that sends every CLI to `server` (and anything else to a dead port).
    pub fn env(&self, server: &ModelServer) -> Vec<(&'static str, String)> {
        let url = server.url();
        let d = |p: &Path| p.display().to_string();
        vec![
            ("HOME", d(&self.home)),
            ("CLAUDE_CONFIG_DIR", d(&self.claude_config)),
            ("CODEX_HOME", d(&self.codex_home)),
            ("ANTHROPIC_BASE_URL", url.clone()),
            ("ANTHROPIC_API_KEY", "test-key-1".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("FAKE_KEY", "test-key-1".to_owned()),
            // Not a provider prefix: passed to agents by name (issue 19, `agent_env.rs`), as is
            // codex's custom `env_key`.
            ("CAESAR_PASS_ENV", "FAKE_KEY,npm_config_*".to_owned()),
            // Anything but the model server goes to a dead port.
            ("HTTP_PROXY", "http://127.0.0.1:9".to_owned()),
            ("HTTPS_PROXY", "http://127.0.0.1:9".to_owned()),
            ("NO_PROXY", "127.0.0.1,localhost".to_owned()),
            ("XDG_CONFIG_HOME", d(&self.xdg_config)),
            ("XDG_DATA_HOME", d(&self.home.join(".local/share"))),
            ("XDG_CACHE_HOME", d(&self.home.join(".cache"))),
            ("XDG_STATE_HOME", d(&self.home.join(".local/state"))),
            // gemini [V]: the base URL with a key; no self-relaunch (which would escape the tree).
            ("GOOGLE_GEMINI_BASE_URL", url.clone()),
            ("GEMINI_API_KEY", "test-key-1".to_owned()),
            ("GEMINI_CLI_NO_RELAUNCH", "true".to_owned()),
            // opencode [V]: nothing fetched at start; its plugin install hits a dead registry.
            ("OPENCODE_DISABLE_MODELS_FETCH", "1".to_owned()),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1".to_owned()),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "true".to_owned()),
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "true".to_owned()),
            ("npm_config_registry", "http://127.0.0.1:9".to_owned()),
            // copilot [V]: bring-your-own-key on the Anthropic wire, offline from GitHub. (A key
            // that is a word would be masked in its output.)
            ("COPILOT_PROVIDER_BASE_URL", url),
            ("COPILOT_PROVIDER_TYPE", "anthropic".to_owned()),
            ("COPILOT_PROVIDER_API_KEY", "test-key-1".to_owned()),
            ("COPILOT_MODEL", "claude-sonnet-4-5".to_owned()),
            ("COPILOT_OFFLINE", "true".to_owned()),
            ("COPILOT_AUTO_UPDATE", "false".to_owned()),
        ]
    }
}

/// Writes the project's README.md and a .gitignore that keeps `.caesar/` out of git.
pub fn seed_project(project: &Path) {
    std::fs::write(project.join("README.md"), "hello\n").unwrap();
    std::fs::write(project.join(".gitignore"), ".caesar/\n").unwrap();
}

/// A finished task view's report; a failure when it has none.
pub fn report_of(t: &Value) -> &Value {
    t.get("report").unwrap_or_else(|| panic!("no report: {t}"))
}

/// Where a rig saves each run's raw stream under `CAESAR_UPDATE_CAPTURES=1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Captures {
    /// `providers/captures-real/<cli>-<scenario>[-n].jsonl`, the scenario being the test's name
    /// without the CLI's prefix, `n` the task's number in the test from the second on (the
    /// adapter tests replay them).
    Providers,
    /// `sessions/<test>.jsonl`, the whole stream (the session driver's replay test reads them).
    Sessions,
    /// `sessions/<test>.jsonl`, only the JSON-RPC lines (codex app-server's stderr tracing names
    /// this machine's paths and times).
    SessionsJsonRpc,
}

/// What a [`Rig`] is started with beside its CLI and script.
pub struct Setup {
    /// The delegations' `timeout`; the waits allow a little more.
    pub task_limit_ms: u64,
    /// `CAESAR_PERMISSION_TIMEOUT_MS`: when the daemon denies an unanswered permission.
    pub permission_timeout_ms: u64,
    /// Where captures go.
    pub captures: Captures,
    /// More of the daemon's environment (after the CLIs', so it may override theirs).
    pub env: Vec<(&'static str, String)>,
}

impl Setup {
    /// A setup with nothing more in the daemon's environment.
    pub fn new(task_limit_ms: u64, permission_timeout_ms: u64, captures: Captures) -> Setup {
        Setup { task_limit_ms, permission_timeout_ms, captures, env: Vec::new() }
    }
}

type Mcp = RunningService<RoleClient, ()>;

/// One isolated installation: the model server, the CLIs' homes, a daemon whose project declares
/// the CLI, and an MCP client of a real `caesar-mcp`.
pub struct Rig {
    pub cli: Cli,
    pub env: Env,
    pub server: ModelServer,
    pub homes: CliHomes,
    /// The daemon's environment, for a restart.
    daemon_env: Vec<(&'static str, String)>,
    mcp: Mcp,
    task_limit_ms: u64,
    captures: Captures,
    /// How many captures this rig saved.
    captured: AtomicUsize,
}

impl Rig {
    /// Starts the server on `script`, a daemon whose project (a git repository with one commit)
    /// runs `cli` from its installed binary, and `caesar-mcp` for the rig's calls.
    pub async fn launch(cli: Cli, script: Vec<Reply>, setup: Setup) -> Rig {
        let server = ModelServer::start(script);
        let mut env = Env::new(&[]);
        let project = env.project.path().to_path_buf();
        std::fs::write(
            project.join(".caesar/config.toml"),
            // caesar refuses claude by default (Claude Code delegating to itself).
            format!(
                "[policy]\nallow_recursion = true\n\n[bin]\n{} = {:?}\n",
                cli.id(),
                cli.bin().display().to_string()
            ),
        )
        .unwrap();
        seed_project(&project);
        commit_base(&project);
        let homes = CliHomes::new(&server);
        let mut daemon_env = homes.env(&server);
        daemon_env.push(("CAESAR_PERMISSION_TIMEOUT_MS", setup.permission_timeout_ms.to_string()));
        daemon_env.extend(setup.env);
        let extra: Vec<(&str, &str)> = daemon_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.start_daemon_with(&extra).await;

        let mut cmd = tokio::process::Command::new(bin_dir().join("caesar-mcp"));
        cmd.args(["--root", &env.workspace()]).current_dir(&project).envs(env.envs());
        let log = std::fs::File::create(env.file("shim.log")).unwrap();
        let (transport, _) = TokioChildProcess::builder(cmd).stderr(log).spawn().unwrap();
        let mcp = ().serve(transport).await.expect("initialize caesar-mcp");
        Rig {
            cli,
            env,
            server,
            homes,
            daemon_env,
            mcp,
            task_limit_ms: setup.task_limit_ms,
            captures: setup.captures,
            captured: AtomicUsize::new(0),
        }
    }

    /// SIGKILLs the daemon and starts another with the same environment.
    pub async fn restart_daemon(&mut self) {
        self.env.kill_daemons().await;
        let extra: Vec<(&str, &str)> = self.daemon_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.env.start_daemon_with(&extra).await;
    }

    /// One MCP tool call; a protocol error fails the test.
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else { panic!("arguments must be an object") };
        self.mcp
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
    }

    /// A tool call that must succeed; its structured result.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args).await;
        let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
        assert_ne!(r.is_error, Some(true), "{tool} failed: {text}");
        r.structured_content.unwrap_or_else(|| serde_json::from_str(&text).unwrap())
    }

    /// Delegates `objective` to the rig's CLI with `extra` arguments; the task id. The result
    /// must carry no channel warning (every CLI here takes the channel it is asked for).
    pub async fn delegate(&self, objective: &str, extra: Value) -> String {
        let mut args = json!({"objective": objective, "agent": self.cli.id(), "timeout": self.task_limit_ms});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        let d = self.ok("caesar_delegate", args).await;
        assert!(d.get("warnings").is_none_or(|w| w.get("channel_warning").is_none()), "no channel warning: {d}");
        d["task_id"].as_str().unwrap_or_else(|| panic!("no task id: {d}")).to_owned()
    }

    /// Awaits the task to its end (questions do not wake it) and returns its view.
    pub async fn finish(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_millis(self.task_limit_ms + 30_000);
        loop {
            let a = self
                .ok("caesar_await", json!({"task_ids": [id], "timeout_ms": 30_000, "wake_on_attention": false}))
                .await;
            let t = a["tasks"][id].clone();
            if t.get("report").is_some() {
                self.save_capture(id);
                return t;
            }
            assert!(Instant::now() < deadline, "task {id} did not end: {t}\n{}", self.debug(id));
        }
    }

    /// Awaits until the task needs the caller (a question, a blocker) or ends: one await.
    pub async fn attention(&self, id: &str) -> Value {
        let a = self.ok("caesar_await", json!({"task_ids": [id], "timeout_ms": 60_000})).await;
        a["tasks"][id].clone()
    }

    /// Awaits until the task has a pending question (or ends), and returns its view.
    pub async fn question(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_millis(self.task_limit_ms);
        loop {
            let a = self.ok("caesar_await", json!({"task_ids": [id], "timeout_ms": 30_000})).await;
            let t = a["tasks"][id].clone();
            if t["pending_questions"].as_array().is_some_and(|q| !q.is_empty()) || t.get("report").is_some() {
                return t;
            }
            assert!(Instant::now() < deadline, "no question from {id}: {t}\n{}", self.raw(id));
        }
    }

    /// The task's directory in the daemon's state.
    pub fn task_dir(&self, id: &str) -> PathBuf {
        self.env.paths.state_dir.join("tasks").join(id)
    }

    /// The first 20,000 characters of the task's raw stream, headed `raw.log:`.
    pub fn raw(&self, id: &str) -> String {
        let raw =
            std::fs::read_to_string(caesar_tests::daemon_files(self.task_dir(id)).join("raw.log")).unwrap_or_default();
        format!("raw.log:\n{}", raw.chars().take(20_000).collect::<String>())
    }

    /// The task's normalized events.
    pub fn events(&self, id: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.task_dir(id).join("events.jsonl")).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// The agent's whole raw stream and what the model server saw, for failure messages.
    pub fn debug(&self, id: &str) -> String {
        let raw =
            std::fs::read_to_string(caesar_tests::daemon_files(self.task_dir(id)).join("raw.log")).unwrap_or_default();
        let requests: Vec<String> = self.server.requests().iter().map(|r| format!("{} {}", r.method, r.path)).collect();
        // What the CLI sent back after the last tool call, and the tools it offered.
        let last = self.server.model_requests().pop().map(|r| r.body).unwrap_or_default();
        let outputs: Vec<String> = ["input", "messages"]
            .iter()
            .filter_map(|k| last.get(k).and_then(Value::as_array))
            .flatten()
            .map(|i| i.to_string())
            .filter(|i| i.contains("output") || i.contains("tool_result"))
            .map(|i| i.chars().take(600).collect())
            .collect();
        let tools: Vec<String> = last
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|t| t.to_string().contains("caesar"))
            .map(|t| t.to_string().chars().take(1500).collect())
            .collect();
        format!(
            "raw.log:\n{raw}\nmodel server saw: {requests:?}\ntool results: {outputs:#?}\nchannel tools: {tools:#?}"
        )
    }

    /// Pids of live processes whose environment names the task: the CLI, its tools, their
    /// children.
    pub fn processes_of(&self, id: &str) -> Vec<u32> {
        caesard::marked::marked_processes("CAESAR_TASK_ID", id).into_iter().filter(|p| alive(*p)).collect()
    }

    /// With CAESAR_UPDATE_CAPTURES set, keeps the run's stream as a fixture named after the test.
    fn save_capture(&self, id: &str) {
        if std::env::var_os("CAESAR_UPDATE_CAPTURES").is_none() {
            return;
        }
        let test = std::thread::current().name().unwrap_or("run").rsplit("::").next().unwrap_or("run").to_owned();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../daemon/tests/fixtures");
        let (dir, file) = match self.captures {
            Captures::Providers => {
                let scenario = test.strip_prefix(&format!("{}_", self.cli.id())).unwrap_or(&test).to_owned();
                // The second and later tasks of a test get their number.
                let n = self.captured.fetch_add(1, Ordering::Relaxed);
                let name = if n == 0 { scenario } else { format!("{scenario}-{}", n + 1) };
                (fixtures.join("providers/captures-real"), format!("{}-{name}.jsonl", self.cli.id()))
            }
            Captures::Sessions | Captures::SessionsJsonRpc => (fixtures.join("sessions"), format!("{test}.jsonl")),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let raw =
            std::fs::read_to_string(caesar_tests::daemon_files(self.task_dir(id)).join("raw.log")).unwrap_or_default();
        let raw = if self.captures == Captures::SessionsJsonRpc {
            raw.lines().filter(|l| l.starts_with('{')).map(|l| format!("{l}\n")).collect()
        } else {
            raw
        };
        // Paths of this machine's temporary directories would churn every capture.
        let raw = raw
            .replace(&self.env.workspace(), "/project")
            .replace(&self.env.home.path().display().to_string(), "/caesar-home")
            .replace(&self.homes.path().display().to_string(), "/cli-homes");
        std::fs::write(dir.join(file), raw).unwrap();
    }
}

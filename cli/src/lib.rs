//! caesar: the command line for people and scripts.
//!
//! Every command is a call to the daemon (started on first use); nothing
//! here spawns agents or touches the store. `--json` makes any command print
//! JSON and nothing else.
//!
//! Exit codes: 0 success, 1 the task failed or was blocked, 2 bad input,
//! 3 no daemon could be reached, 4 the task was cancelled, 5 it timed out.

mod mcp_install;
mod pipe;
mod render;
mod service;
mod watch;

use std::process::ExitCode;

use anyhow::Context as _;
use caesar_proto::client::{self, Client};
use caesar_proto::kinds::{IsolationPref, Mode, NetworkPref};
use caesar_proto::paths::Paths;
use caesar_proto::pb;
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use tonic::Code;

#[derive(Parser)]
#[command(name = "caesar", version, about = "Delegate work to coding-agent CLIs, supervised by caesard.")]
struct Cli {
    /// Print JSON and nothing else.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Delegate an objective, stream its events, then print its report.
    Run(Box<RunArgs>),
    /// Wait for tasks to finish and print their reports.
    Await {
        /// Task ids.
        #[arg(required = true)]
        task_ids: Vec<String>,
        /// How long to wait (e.g. 30s, 10m).
        #[arg(long, default_value = "30s")]
        timeout: String,
    },
    /// A live view of running and recent tasks (one line per event through a pipe).
    Watch {
        /// Only these tasks.
        task_ids: Vec<String>,
        /// Print the current state once and exit.
        #[arg(long)]
        once: bool,
    },
    /// List tasks, newest first.
    Ps {
        /// Include finished tasks (running and pending only by default).
        #[arg(long, short)]
        all: bool,
        /// At most this many tasks.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// A snapshot of one task.
    Status { task_id: String },
    /// A task's normalized events, or its raw output with --raw.
    Logs {
        task_id: String,
        /// The agent's raw output instead of normalized events.
        #[arg(long)]
        raw: bool,
        /// Keep printing events until the task ends.
        #[arg(long, short)]
        follow: bool,
        /// The most recent events to print.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Stop a running task and its whole process tree.
    Cancel { task_id: String },
    /// Answer a question an agent asked (see `caesar ps` or `caesar status`).
    Answer { task_id: String, question_id: String, answer: String },
    /// The git diff of a worktree task.
    Diff {
        task_id: String,
        /// Files and line counts only, no patch.
        #[arg(long)]
        stat: bool,
    },
    /// Apply a worktree task's changes to the main working tree (3-way, never a commit).
    Apply { task_id: String },
    /// Mark a task's changes as unwanted, so gc may remove its worktree.
    Discard { task_id: String },
    /// Remove the worktrees and branches of finished tasks, safely.
    Gc {
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also remove unapplied work and branches reachable from nowhere else.
        #[arg(long)]
        force: bool,
        /// Only tasks finished longer ago than this.
        #[arg(long, default_value = "24h")]
        older_than: String,
    },
    /// The agents caesar can delegate to.
    Agents {
        #[command(subcommand)]
        action: AgentsAction,
    },
    /// Check the daemon and every agent: installed, version, capabilities.
    Doctor,
    /// Write this project's starting config, role prompts and host-agent skills.
    Init {
        /// Initialize the global layer instead of the project.
        #[arg(long)]
        global: bool,
        /// Overwrite the config and role prompts too.
        #[arg(long)]
        force: bool,
    },
    /// Show or edit the policy.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// List, show, add or remove roles.
    Role {
        #[command(subcommand)]
        action: RoleAction,
    },
    /// Register caesar-mcp with an MCP client, or serve it.
    Mcp {
        #[command(subcommand)]
        action: McpAction,
    },
    /// Print shell completions: bash, zsh, fish, elvish or powershell.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff).
    Man,
    /// OACP documents.
    Protocol {
        #[command(subcommand)]
        action: ProtocolAction,
    },
    /// Manage the daemon.
    Daemon {
        #[command(subcommand)]
        action: DaemonAction,
    },
}

#[derive(Subcommand)]
enum AgentsAction {
    /// Every agent: native providers and [[agent]] entries.
    List,
    /// One agent in detail, with the options delegate accepts for it.
    Describe { agent: String },
    /// Remove an agent from the policy's `denied` list.
    Enable {
        agent: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
    /// Add an agent to the policy's `denied` list.
    Disable {
        agent: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
    /// Set an agent's default model in [models].
    SetModel {
        agent: String,
        model: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
    /// Remove an agent's default model from [models].
    UnsetModel {
        agent: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
}

/// Which layer an edit writes: the project's by default.
#[derive(Args)]
struct LayerArgs {
    /// Write the global layer (~/.config/caesar/config.toml).
    #[arg(long, conflicts_with = "local")]
    global: bool,
    /// Write the local layer (.caesar/config.local.toml, not versioned).
    #[arg(long)]
    local: bool,
}

impl LayerArgs {
    fn name(&self) -> &'static str {
        if self.global {
            "global"
        } else if self.local {
            "local"
        } else {
            "project"
        }
    }
}

#[derive(Subcommand)]
enum PolicyAction {
    /// The effective policy and the layer each value comes from.
    Show,
    /// Add an agent to the policy's `allowed` list.
    Allow {
        agent: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
    /// Add an agent to the policy's `denied` list.
    Deny {
        agent: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
}

#[derive(Subcommand)]
enum RoleAction {
    /// Every role, with the agent it would pick now.
    List,
    /// One role in detail.
    Show { name: String },
    /// Add (or replace) a role in a layer.
    Add {
        name: String,
        /// Candidate agents, first choice first (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        agents: Vec<String>,
        /// read-only or write.
        #[arg(long)]
        mode: Mode,
        #[arg(long, default_value = "")]
        purpose: String,
        #[arg(long)]
        isolation: Option<IsolationPref>,
        #[arg(long)]
        network: Option<NetworkPref>,
        #[arg(long)]
        timeout: Option<String>,
        #[arg(long)]
        model: Option<String>,
        #[command(flatten)]
        layer: LayerArgs,
    },
    /// Remove a role from a layer.
    Remove {
        name: String,
        #[command(flatten)]
        layer: LayerArgs,
    },
}

#[derive(Subcommand)]
enum McpAction {
    /// Register caesar-mcp with a client: claude, codex, gemini, qwen, cursor, vscode, opencode or copilot.
    Install {
        client: String,
        /// Print exactly what would change, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Remove the registration instead.
        #[arg(long)]
        uninstall: bool,
    },
    /// The bearer token of MCP over HTTP ([http] listen), and its URL.
    Token {
        /// Make a new token; the old one stops working at once.
        #[arg(long)]
        rotate: bool,
    },
    /// Run caesar-mcp (the stdio MCP server) with these arguments.
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ProtocolAction {
    /// The JSON Schema the daemon validates a document with.
    Schema {
        /// task, report or event.
        document: String,
        /// The variant for native structured outputs: everything required.
        #[arg(long)]
        strict: bool,
    },
}

#[derive(Subcommand)]
enum DaemonAction {
    /// Start caesard if it is not running.
    Start,
    /// Stop caesard. Running tasks keep running and are picked up by the next daemon.
    Stop {
        /// Cancel every running task first.
        #[arg(long)]
        cancel_tasks: bool,
    },
    /// Whether caesard is running, its version and its active tasks.
    Status,
    /// Run caesard under the user's service manager (systemd user units with
    /// socket activation, or a launchd agent).
    Install {
        /// Print the files and commands, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove what `caesar daemon install` set up.
    Uninstall {
        #[arg(long)]
        dry_run: bool,
    },
    /// The daemon's own log.
    Logs {
        /// How many lines.
        #[arg(long, short = 'n', default_value_t = 50)]
        lines: usize,
    },
}

#[derive(Args)]
struct RunArgs {
    /// What the agent should do.
    objective: String,
    /// The agent to delegate to (default: the first installed and allowed
    /// one of the default role, named in the first lines).
    #[arg(long)]
    agent: Option<String>,
    /// The role to delegate through.
    #[arg(long)]
    role: Option<String>,
    /// read-only or write.
    #[arg(long)]
    mode: Option<Mode>,
    /// inplace, worktree or auto.
    #[arg(long)]
    isolation: Option<IsolationPref>,
    /// auto, on or off.
    #[arg(long)]
    network: Option<NetworkPref>,
    /// How long the agent may run (e.g. 90s, 10m, 1h).
    #[arg(long)]
    timeout: Option<String>,
    /// The model to ask the agent for.
    #[arg(long)]
    model: Option<String>,
    /// Extra context: text, or @path to read it from a file.
    #[arg(long)]
    context: Option<String>,
    /// A constraint the agent must respect (repeatable).
    #[arg(long = "constraint")]
    constraints: Vec<String>,
    /// An acceptance criterion (repeatable).
    #[arg(long = "accept")]
    acceptance_criteria: Vec<String>,
    /// The directory the agent works in (default: the current directory).
    #[arg(long)]
    workspace: Option<std::path::PathBuf>,
    /// Return once the task is started instead of following it.
    #[arg(long)]
    detach: bool,
    /// Also print the agent's whole command line (with the brief) when it starts.
    #[arg(long, short)]
    verbose: bool,
}

/// A failure with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Whoever read our output stopped reading (`| head`): end as `cat`
    /// does, with the shell's SIGPIPE status and nothing on stderr.
    fn closed_stdout() -> Failure {
        Failure { code: 141, message: String::new() }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        if let Some(status) = e.downcast_ref::<tonic::Status>() {
            let code = match status.code() {
                Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition | Code::PermissionDenied => 2,
                Code::Unavailable => 3,
                _ => 1,
            };
            return Failure { code, message: status.message().to_owned() };
        }
        if e.downcast_ref::<client::ConnectError>().is_some() {
            return Failure { code: 3, message: format!("{e:#}") };
        }
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
            return Failure::closed_stdout();
        }
        Failure { code: 1, message: format!("{e:#}") }
    }
}

/// The `caesar` binary's whole `main`: parse the arguments, run the command,
/// map the outcome to the exit code.
pub fn main() -> ExitCode {
    pipe::exit_quietly_on_closed_stdout();
    let cli = Cli::parse();
    let json = cli.json;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("caesar: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(f) if f.code == Failure::closed_stdout().code => ExitCode::from(f.code),
        Err(f) => {
            if json {
                println!("{}", json!({"error": f.message, "exit_code": f.code}));
            } else {
                eprintln!("caesar: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

async fn connect() -> anyhow::Result<Client> {
    let paths = Paths::from_env()?;
    Ok(client::connect_or_start(&paths).await?)
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let json = cli.json;
    match cli.command {
        Command::Run(args) => run(*args, json).await,
        Command::Await { task_ids, timeout } => {
            let timeout_ms = parse_duration_ms(&timeout)?;
            let mut c = connect().await?;
            let r = c
                .r#await(pb::AwaitRequest { task_ids, timeout_ms, wake_on_attention: false })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            if json {
                let tasks: Vec<Value> = r.tasks.iter().map(render::task_json).collect();
                println!("{}", json!({"tasks": tasks}));
            } else {
                for t in &r.tasks {
                    render::print_task(t, true);
                }
            }
            Ok(r.tasks.iter().map(exit_code_of).max().unwrap_or(0))
        }
        Command::Watch { task_ids, once } => {
            let c = connect().await?;
            Ok(watch::run(c, watch::Options { ids: task_ids, once, json }).await?)
        }
        Command::Ps { all, limit } => {
            let mut c = connect().await?;
            let statuses = if all { vec![] } else { vec!["pending".to_owned(), "running".to_owned()] };
            let r =
                c.list_tasks(pb::ListTasksRequest { statuses, limit }).await.map_err(anyhow::Error::from)?.into_inner();
            if json {
                let tasks: Vec<Value> = r.tasks.iter().map(render::task_json).collect();
                println!("{}", json!({"tasks": tasks}));
            } else {
                render::print_table(&r.tasks);
            }
            Ok(0)
        }
        Command::Status { task_id } => {
            let mut c = connect().await?;
            let t = c.status(pb::StatusRequest { task_id }).await.map_err(anyhow::Error::from)?.into_inner();
            if json {
                println!("{}", render::task_json(&t));
            } else {
                render::print_task(&t, false);
            }
            Ok(0)
        }
        Command::Logs { task_id, raw, follow, limit } => logs(task_id, raw, follow, limit, json).await,
        Command::Cancel { task_id } => {
            let mut c = connect().await?;
            let r = c
                .cancel(pb::CancelRequest { task_id: task_id.clone() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            if json {
                println!("{}", json!({"task_id": task_id, "cancelled": r.cancelled, "status": r.status}));
            } else if r.cancelled {
                println!("{task_id}: cancelled");
            } else {
                println!("{task_id}: not running ({}), nothing to cancel", r.status);
            }
            Ok(0)
        }
        Command::Agents { action } => agents(action, json).await,
        Command::Doctor => doctor(json).await,
        Command::Init { global, force } => init(global, force, json).await,
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "caesar", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd).render(&mut std::io::stdout()).map_err(anyhow::Error::from)?;
            Ok(0)
        }
        Command::Mcp { action: McpAction::Install { client, dry_run, uninstall } } => {
            let plan = mcp_install::install(&client, uninstall, dry_run)?;
            if json {
                println!(
                    "{}",
                    json!({"client": client, "changed": plan.changed, "dry_run": dry_run, "summary": plan.summary,
                           "path": plan.path, "command": plan.command})
                );
            } else {
                println!("{}{}", if dry_run && plan.changed { "would " } else { "" }, plan.summary);
            }
            Ok(0)
        }
        Command::Mcp { action: McpAction::Token { rotate } } => {
            let mut c = connect().await?;
            let r = c.http_token(pb::HttpTokenRequest { rotate }).await.map_err(anyhow::Error::from)?.into_inner();
            if json {
                println!("{}", json!({"token": r.token, "url": r.url, "rotated": rotate}));
            } else {
                println!("{}", r.token);
                if r.url.is_empty() {
                    eprintln!(
                        "caesar: MCP over HTTP is off: set [http] listen = \"127.0.0.1:7077\" in the global config and restart caesard"
                    );
                } else {
                    eprintln!("caesar: {} with `Authorization: Bearer <token>`", r.url);
                }
            }
            Ok(0)
        }
        Command::Mcp { action: McpAction::Serve { args } } => {
            let shim = mcp_install::shim_path();
            #[cfg(unix)]
            {
                use std::os::unix::process::CommandExt;
                let e = std::process::Command::new(&shim).args(&args).exec();
                Err(Failure { code: 1, message: format!("cannot run {}: {e}", shim.display()) })
            }
            #[cfg(not(unix))]
            {
                let status = std::process::Command::new(&shim).args(&args).status().map_err(anyhow::Error::from)?;
                Ok(status.code().unwrap_or(1) as u8)
            }
        }
        Command::Policy { action } => policy(action, json).await,
        Command::Role { action } => role(action, json).await,
        Command::Protocol { action: ProtocolAction::Schema { document, strict } } => {
            let mut c = connect().await?;
            let r = c
                .protocol_schema(pb::ProtocolSchemaRequest { document, strict })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            let v: Value = serde_json::from_str(&r.schema_json).unwrap_or(Value::Null);
            if json {
                println!("{v}");
            } else {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            Ok(0)
        }
        Command::Daemon { action } => daemon(action, json).await,
        Command::Answer { task_id, question_id, answer } => {
            let mut c = connect().await?;
            c.answer(pb::AnswerRequest { task_id: task_id.clone(), question_id: question_id.clone(), answer })
                .await
                .map_err(anyhow::Error::from)?;
            if json {
                println!("{}", json!({"task_id": task_id, "question_id": question_id, "answered": true}));
            } else {
                println!("{task_id}: answered {question_id}");
            }
            Ok(0)
        }
        Command::Diff { task_id, stat } => {
            let mut c = connect().await?;
            let d = c.diff(pb::DiffRequest { task_id }).await.map_err(anyhow::Error::from)?.into_inner();
            if json {
                let files: Vec<Value> = d
                    .files
                    .iter()
                    .map(|f| json!({"path": f.path, "status": f.status, "additions": f.additions, "deletions": f.deletions, "old_path": if f.old_path.is_empty() { Value::Null } else { json!(f.old_path) }, "binary": f.binary}))
                    .collect();
                println!("{}", json!({"is_empty": d.is_empty, "files": files, "patch": d.patch}));
            } else if d.is_empty {
                println!("no changes");
            } else {
                for f in &d.files {
                    let renamed = if f.old_path.is_empty() { String::new() } else { format!(" (from {})", f.old_path) };
                    println!("{:<10} +{:<5} -{:<5} {}{renamed}", f.status, f.additions, f.deletions, f.path);
                }
                if !stat {
                    println!();
                    print!("{}", d.patch);
                }
            }
            Ok(0)
        }
        Command::Apply { task_id } => {
            let mut c = connect().await?;
            let r =
                c.apply(pb::ApplyRequest { task_id: task_id.clone() }).await.map_err(anyhow::Error::from)?.into_inner();
            if json {
                println!(
                    "{}",
                    json!({"applied": r.applied, "already_applied": r.already_applied, "conflicts": r.conflicts, "files": r.files, "message": r.message})
                );
            } else if r.already_applied {
                println!("{task_id}: already applied, nothing to do");
            } else if r.applied {
                println!(
                    "{task_id}: applied to {} file(s), nothing committed{}",
                    r.files.len(),
                    if r.message.is_empty() { String::new() } else { format!(" ({})", r.message) }
                );
            } else {
                println!("{task_id}: NOT applied, nothing was written. Conflicts:");
                for conflict in &r.conflicts {
                    println!("  {conflict}");
                }
            }
            Ok(if r.applied || r.already_applied { 0 } else { 1 })
        }
        Command::Discard { task_id } => {
            let mut c = connect().await?;
            c.discard(pb::DiscardRequest { task_id: task_id.clone() }).await.map_err(anyhow::Error::from)?;
            if json {
                println!("{}", json!({"task_id": task_id, "discarded": true}));
            } else {
                println!("{task_id}: changes discarded; gc may remove its worktree");
            }
            Ok(0)
        }
        Command::Gc { dry_run, force, older_than } => {
            let older_than_ms = parse_duration_ms(&older_than)?;
            let mut c = connect().await?;
            let r =
                c.gc(pb::GcRequest { dry_run, force, older_than_ms }).await.map_err(anyhow::Error::from)?.into_inner();
            if json {
                let items: Vec<Value> = r.items.iter().map(|i| json!({"task_id": i.task_id, "worktree": i.worktree, "action": i.action, "reason": i.reason, "bytes": i.bytes})).collect();
                println!("{}", json!({ "items": items }));
            } else if r.items.is_empty() {
                println!("no worktree to collect");
            } else {
                for i in &r.items {
                    println!(
                        "{:<13} {} {} ({} KiB){}",
                        i.action,
                        i.task_id,
                        i.worktree,
                        i.bytes / 1024,
                        if i.reason.is_empty() { String::new() } else { format!(": {}", i.reason) }
                    );
                }
            }
            Ok(0)
        }
    }
}

async fn run(a: RunArgs, json: bool) -> Result<u8, Failure> {
    let workspace = match a.workspace {
        Some(w) => std::path::absolute(&w).with_context(|| format!("bad --workspace {}", w.display()))?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let context = match a.context.as_deref() {
        Some(c) if c.starts_with('@') => {
            std::fs::read_to_string(&c[1..]).with_context(|| format!("cannot read the --context file {}", &c[1..]))?
        }
        Some(c) => c.to_owned(),
        None => String::new(),
    };
    let timeout_ms = a.timeout.as_deref().map(parse_duration_ms).transpose()?.unwrap_or(0);
    let depth = std::env::var("CAESAR_DEPTH").ok().and_then(|d| d.parse().ok()).unwrap_or(0);
    let mut c = connect().await?;
    let d = c
        .delegate(pb::DelegateRequest {
            objective: a.objective,
            agent: a.agent.unwrap_or_default(),
            role: a.role.unwrap_or_default(),
            mode: a.mode.map(|m| m.as_str().to_owned()).unwrap_or_default(),
            isolation: a.isolation.map(|i| i.as_str().to_owned()).unwrap_or_default(),
            network: a.network.map(|n| n.as_str().to_owned()).unwrap_or_default(),
            context,
            constraints: a.constraints,
            acceptance_criteria: a.acceptance_criteria,
            model: a.model.unwrap_or_default(),
            timeout_ms,
            channel: false,
            workspace: workspace.display().to_string(),
            session_id: String::new(),
            effort: String::new(),
            depth,
        })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    let choice = d.warnings.get(AGENT_CHOICE);
    for (k, v) in d.warnings.iter().filter(|(k, _)| k.as_str() != AGENT_CHOICE) {
        if !json {
            eprintln!("caesar: {k}: {v}");
        }
    }
    if a.detach {
        if json {
            println!("{}", render::delegate_json(&d));
        } else {
            println!("{}", d.task_id);
            if let Some(why) = choice {
                eprintln!("caesar: {why}");
            }
        }
        return Ok(0);
    }
    if !json {
        print!("{}", run_header(&d, worktree_of(&d).as_deref()));
    }
    let task_id = d.task_id.clone();
    let command = if a.verbose { render::Command::Full } else { render::Command::Brief };
    let follow = follow_events(&mut c, &task_id, 0, json, command);
    tokio::select! {
        r = follow => r?,
        _ = tokio::signal::ctrl_c() => {
            if !json {
                eprintln!("caesar: interrupted, cancelling {task_id}");
            }
            let _ = c.cancel(pb::CancelRequest { task_id: task_id.clone() }).await;
            return Ok(130);
        }
    }
    // The stream ends when the task does; Await returns its report.
    let r = c
        .r#await(pb::AwaitRequest { task_ids: vec![task_id], timeout_ms: 60_000, wake_on_attention: false })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    let Some(t) = r.tasks.first() else {
        return Err(Failure { code: 1, message: "the daemon returned no task".into() });
    };
    if json {
        let mut v = render::task_json(t);
        v["warnings"] = json!(d.warnings);
        println!("{v}");
    } else {
        render::print_report(t);
    }
    Ok(exit_code_of(t))
}

/// The warning under which the daemon says which agent it picked when none
/// was named (caesard's `resolve::AGENT_CHOICE`).
const AGENT_CHOICE: &str = "agent_choice";

/// The first lines of `caesar run`: what runs, how, where, and (when caesar
/// chose the agent) why that one.
fn run_header(d: &pb::DelegateResponse, worktree: Option<&str>) -> String {
    let model = if d.model.is_empty() { "the agent's default".to_owned() } else { d.model.clone() };
    let network = if d.network { "on" } else { "off" };
    let mut out = format!("task {}: agent {}, model {model}\n", d.task_id, d.agent);
    if let Some(why) = d.warnings.get(AGENT_CHOICE) {
        out.push_str(&format!("  {why}\n"));
    }
    out.push_str(&format!("  mode {}, isolation {}, network {network}", d.mode, d.isolation));
    if d.timeout_ms > 0 {
        out.push_str(&format!(", timeout {}", render::human_ms(d.timeout_ms)));
    }
    out.push('\n');
    match worktree {
        Some(w) => out.push_str(&format!(
            "  works in the worktree {w}\n  (review with caesar diff {id}, land with caesar apply {id})\n",
            id = d.task_id
        )),
        None => out.push_str(&format!("  works in {}\n", d.workspace)),
    }
    out
}

/// Where a worktree task's agent works: the workspace of its OACP
/// `task.json`, which the daemon writes before it answers Delegate.
fn worktree_of(d: &pb::DelegateResponse) -> Option<String> {
    if d.isolation != "worktree" {
        return None;
    }
    let doc = std::fs::read_to_string(std::path::Path::new(&d.task_dir).join("task.json")).ok()?;
    let v: Value = serde_json::from_str(&doc).ok()?;
    let worktree = v["workspace"].as_str()?.trim_end_matches('/');
    (worktree != d.workspace.trim_end_matches('/')).then(|| worktree.to_owned())
}

/// The exit code for a finished task: 0 only when it succeeded and its
/// report does not say otherwise.
fn exit_code_of(t: &pb::TaskView) -> u8 {
    match t.status.as_str() {
        "succeeded" if matches!(t.report_status.as_str(), "failed" | "blocked") => 1,
        "succeeded" => 0,
        "cancelled" => 4,
        "timed_out" => 5,
        "pending" | "running" => 1,
        _ => 1,
    }
}

async fn follow_events(
    c: &mut Client,
    task_id: &str,
    from_seq: u64,
    json: bool,
    command: render::Command,
) -> Result<(), Failure> {
    let mut stream = c
        .watch_events(pb::WatchEventsRequest { task_id: task_id.to_owned(), from_seq, follow: true })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    while let Some(ev) = stream.message().await.map_err(anyhow::Error::from)? {
        if json {
            // In --json mode events are not printed: the output is one JSON document.
            continue;
        }
        render::print_event(&ev.event_json, command);
    }
    Ok(())
}

async fn logs(task_id: String, raw: bool, follow: bool, limit: u32, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    if follow && !raw {
        if json {
            let mut stream = c
                .watch_events(pb::WatchEventsRequest { task_id, from_seq: 0, follow: true })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            while let Some(ev) = stream.message().await.map_err(anyhow::Error::from)? {
                println!("{}", ev.event_json);
            }
            return Ok(0);
        }
        follow_events(&mut c, &task_id, 0, false, render::Command::Full).await?;
        return Ok(0);
    }
    let r =
        c.logs(pb::LogsRequest { task_id, raw, limit, max_bytes: 0 }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        let events: Vec<Value> = r.events_json.iter().filter_map(|e| serde_json::from_str(e).ok()).collect();
        let mut v = json!({"total_events": r.total_events});
        if raw {
            v["raw"] = json!(r.raw);
            v["raw_size"] = json!(r.raw_size);
            v["truncated"] = json!(r.raw_truncated);
        } else {
            v["events"] = json!(events);
        }
        println!("{v}");
    } else if raw {
        if r.raw_truncated {
            eprintln!("caesar: showing the last {} of {} bytes", r.raw.len(), r.raw_size);
        }
        print!("{}", r.raw);
    } else {
        if (r.events_json.len() as u64) < r.total_events {
            println!("({} of {} events)", r.events_json.len(), r.total_events);
        }
        for e in &r.events_json {
            render::print_event(e, render::Command::Full);
        }
    }
    Ok(0)
}

async fn daemon(action: DaemonAction, json: bool) -> Result<u8, Failure> {
    let paths = Paths::from_env().map_err(anyhow::Error::from)?;
    match action {
        DaemonAction::Start => {
            let _ = connect().await?;
            let (_, ping) = client::connect(&paths).await.map_err(anyhow::Error::from)?;
            if json {
                println!("{}", render::ping_json(&ping));
            } else {
                println!("caesard {} running (pid {}) at {}", ping.version, ping.pid, ping.socket);
            }
            Ok(0)
        }
        DaemonAction::Stop { cancel_tasks } => {
            let Ok((mut c, _)) = client::connect(&paths).await else {
                if json {
                    println!("{}", json!({"running": false}));
                } else {
                    println!("caesard is not running");
                }
                return Ok(0);
            };
            let r = c
                .shutdown(pb::ShutdownRequest { cancel_tasks, only_if_idle: false })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            client::wait_until_gone(&paths, std::time::Duration::from_secs(10)).await;
            if json {
                println!("{}", json!({"stopped": r.stopping, "active_tasks": r.active_tasks}));
            } else if r.active_tasks > 0 && !cancel_tasks {
                println!(
                    "caesard stopped; {} task(s) keep running and will be picked up by the next daemon",
                    r.active_tasks
                );
            } else {
                println!("caesard stopped");
            }
            Ok(0)
        }
        DaemonAction::Install { dry_run } | DaemonAction::Uninstall { dry_run } => {
            let uninstall = matches!(action, DaemonAction::Uninstall { .. });
            let done = service::install(&client::daemon_binary(), &paths.daemon_log(), dry_run, uninstall)?;
            if json {
                println!("{}", json!({"dry_run": dry_run, "steps": done}));
            } else {
                for line in done {
                    println!("{line}");
                }
            }
            Ok(0)
        }
        DaemonAction::Logs { lines } => {
            let tail = service::log_tail(&paths.daemon_log(), lines)?;
            if json {
                println!("{}", json!({ "lines": tail }));
            } else {
                for l in tail {
                    println!("{l}");
                }
            }
            Ok(0)
        }
        DaemonAction::Status => match client::connect(&paths).await {
            Ok((mut c, ping)) => {
                let health = c
                    .health(pb::HealthRequest { workspace: cwd_string() })
                    .await
                    .map_err(anyhow::Error::from)?
                    .into_inner();
                if json {
                    let mut v = render::ping_json(&ping);
                    v["store_ok"] = json!(health.store_ok);
                    v["problems"] = json!(health.problems);
                    println!("{v}");
                } else {
                    for p in &health.problems {
                        println!("PROBLEM: {p}");
                    }
                    println!(
                        "caesard {} running (pid {}, API protocol {}), {} active task(s)\nsocket: {}\nstate:  {}",
                        ping.version, ping.pid, ping.protocol, ping.active_tasks, ping.socket, ping.state_dir
                    );
                }
                Ok(0)
            }
            Err(_) => {
                if json {
                    println!("{}", json!({"running": false, "socket": paths.socket}));
                } else {
                    println!("caesard is not running (socket {})", paths.socket.display());
                }
                Ok(3)
            }
        },
    }
}

fn parse_duration_ms(text: &str) -> anyhow::Result<u64> {
    caesar_proto::duration::parse_ms(text).map_err(|e| anyhow::anyhow!(e))
}

fn cwd_string() -> String {
    std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()
}

async fn agents(action: AgentsAction, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    match action {
        AgentsAction::List => {
            let r = c
                .list_agents(pb::ListAgentsRequest { workspace: cwd_string() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            if json {
                let agents: Vec<Value> = r.agents.iter().map(render::agent_json).collect();
                println!("{}", json!({ "agents": agents }));
            } else {
                render::print_agents(&r.agents);
            }
        }
        AgentsAction::Enable { agent, layer } => {
            return edit(
                &mut c,
                &layer,
                json!({"op": "policy_list", "field": "denied", "id": agent, "present": false}),
                json,
            )
            .await;
        }
        AgentsAction::Disable { agent, layer } => {
            return edit(
                &mut c,
                &layer,
                json!({"op": "policy_list", "field": "denied", "id": agent, "present": true}),
                json,
            )
            .await;
        }
        AgentsAction::SetModel { agent, model, layer } => {
            return edit(&mut c, &layer, json!({"op": "set_model", "agent": agent, "model": model}), json).await;
        }
        AgentsAction::UnsetModel { agent, layer } => {
            return edit(&mut c, &layer, json!({"op": "unset_model", "agent": agent}), json).await;
        }
        AgentsAction::Describe { agent } => {
            let r = c
                .describe_agent(pb::DescribeAgentRequest { agent, workspace: cwd_string() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            let info = r.agent.unwrap_or_default();
            let mut v = render::agent_json(&info);
            v["options"] = serde_json::from_str(&r.options_json).unwrap_or(Value::Null);
            v["protections"] = serde_json::from_str(&r.protections_json).unwrap_or(Value::Null);
            if json {
                println!("{v}");
            } else {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
        }
    }
    Ok(0)
}

/// Exits 1 when something is wrong, and says how to fix it.
async fn doctor(json: bool) -> Result<u8, Failure> {
    let paths = Paths::from_env().map_err(anyhow::Error::from)?;
    let mut problems = Vec::new();
    let mut c = match connect().await {
        Ok(c) => c,
        Err(e) => {
            let f = Failure::from(e);
            if json {
                println!("{}", json!({"ok": false, "daemon": {"running": false, "error": f.message}}));
            } else {
                println!("daemon: NOT RUNNING: {}", f.message);
            }
            return Ok(1);
        }
    };
    let (_, ping) = client::connect(&paths).await.map_err(anyhow::Error::from)?;
    let agents = c
        .list_agents(pb::ListAgentsRequest { workspace: cwd_string() })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner()
        .agents;
    let health =
        c.health(pb::HealthRequest { workspace: cwd_string() }).await.map_err(anyhow::Error::from)?.into_inner();
    if !health.store_ok {
        problems.push(format!(
            "the store failed its integrity check: {}. Stop the daemon and restore {}/caesar.db from a backup",
            health.store_error, ping.state_dir
        ));
    }
    problems.extend(health.problems);
    if !agents.iter().any(|a| a.installed) {
        problems.push(
            "no agent is installed: install a provider CLI (claude, codex, gemini, ...) or declare an [[agent]]"
                .to_owned(),
        );
    }
    if json {
        let list: Vec<Value> = agents.iter().map(render::agent_json).collect();
        println!(
            "{}",
            json!({"ok": problems.is_empty(), "daemon": render::ping_json(&ping), "store_ok": health.store_ok,
                   "http": if health.http_url.is_empty() { Value::Null } else { json!({"url": health.http_url, "listening": health.http_listening}) },
                   "environment": health.environment, "protections": health.protections, "agents": list, "problems": problems})
        );
    } else {
        println!(
            "daemon: caesard {} (pid {}, API protocol {}) at {}",
            ping.version, ping.pid, ping.protocol, ping.socket
        );
        println!("state:  {}", ping.state_dir);
        println!("env:    {}", health.environment);
        println!("sandbox: {}", health.protections);
        println!("store:  {}", if health.store_ok { "ok" } else { "DAMAGED" });
        if !health.http_url.is_empty() {
            println!(
                "http:   {} ({})",
                health.http_url,
                if health.http_listening { "listening" } else { "NOT ANSWERING" }
            );
        }
        println!();
        render::print_agents(&agents);
        for p in &problems {
            println!("\nPROBLEM: {p}");
        }
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}

async fn edit(c: &mut Client, layer: &LayerArgs, edit: Value, json: bool) -> Result<u8, Failure> {
    let r = c
        .edit_config(pb::EditConfigRequest {
            workspace: cwd_string(),
            layer: layer.name().to_owned(),
            edit_json: edit.to_string(),
        })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        println!("{}", json!({"changed": r.changed, "message": r.message, "path": r.path}));
    } else {
        println!("{}{}", r.message, if r.changed { format!(" ({})", r.path) } else { " (nothing changed)".to_owned() });
    }
    Ok(0)
}

async fn init(global: bool, force: bool, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let r = c
        .init_project(pb::InitProjectRequest { workspace: cwd_string(), global, force })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        println!("{}", json!({"written": r.written, "kept": r.kept}));
    } else {
        for w in &r.written {
            println!("wrote {w}");
        }
        for k in &r.kept {
            println!("kept  {k}");
        }
    }
    Ok(0)
}

async fn show_config(c: &mut Client) -> Result<Value, Failure> {
    let r = c
        .show_config(pb::ShowConfigRequest { workspace: cwd_string() })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    Ok(serde_json::from_str(&r.config_json).unwrap_or(Value::Null))
}

async fn policy(action: PolicyAction, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    match action {
        PolicyAction::Show => {
            let config = show_config(&mut c).await?;
            let provenance = &config["provenance"];
            if json {
                println!("{}", json!({"policy": config["policy"], "provenance": provenance}));
            } else if let Some(policy) = config["policy"].as_object() {
                for (key, value) in policy {
                    let name = if key == "default_timeout_ms" { "default_timeout" } else { key.as_str() };
                    let origin = provenance[format!("policy.{name}")].as_str().unwrap_or("default");
                    println!("{key:<22} {value:<30} ({origin})");
                }
            }
            Ok(0)
        }
        PolicyAction::Allow { agent, layer } => {
            edit(&mut c, &layer, json!({"op": "policy_list", "field": "allowed", "id": agent, "present": true}), json)
                .await
        }
        PolicyAction::Deny { agent, layer } => {
            edit(&mut c, &layer, json!({"op": "policy_list", "field": "denied", "id": agent, "present": true}), json)
                .await
        }
    }
}

async fn role(action: RoleAction, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    match action {
        RoleAction::List | RoleAction::Show { .. } => {
            let roles = c
                .list_roles(pb::ListRolesRequest { workspace: cwd_string() })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner()
                .roles_json;
            let mut roles: Vec<Value> = roles.iter().filter_map(|r| serde_json::from_str(r).ok()).collect();
            if let RoleAction::Show { name } = &action {
                roles.retain(|r| r["name"] == name.as_str());
                if roles.is_empty() {
                    return Err(Failure { code: 2, message: format!("no role `{name}`: see `caesar role list`") });
                }
            }
            if json {
                println!("{}", json!({ "roles": roles }));
            } else {
                for r in &roles {
                    println!(
                        "{:<14} {:<10} picks {:<12} ({})  {}",
                        r["name"].as_str().unwrap_or(""),
                        r["mode"].as_str().unwrap_or(""),
                        r["would_pick"].as_str().unwrap_or("nobody"),
                        r["origin"].as_str().unwrap_or(""),
                        r["purpose"].as_str().unwrap_or("")
                    );
                    if matches!(action, RoleAction::Show { .. }) {
                        println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
                    }
                }
            }
            Ok(0)
        }
        RoleAction::Add { name, agents, mode, purpose, isolation, network, timeout, model, layer } => {
            let role = json!({
                "name": name, "agents": agents, "mode": mode, "purpose": purpose,
                "isolation": isolation, "network": network, "timeout": timeout, "model": model,
            });
            edit(&mut c, &layer, json!({"op": "role_add", "role": role}), json).await
        }
        RoleAction::Remove { name, layer } => {
            edit(&mut c, &layer, json!({"op": "role_remove", "name": name}), json).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_header_says_what_runs_how_where_and_why() {
        let mut d = pb::DelegateResponse {
            task_id: "t_0123456789ab".into(),
            agent: "codex".into(),
            mode: "read-only".into(),
            isolation: "inplace".into(),
            network: true,
            workspace: "/src/app".into(),
            timeout_ms: 600_000,
            ..Default::default()
        };
        d.warnings.insert(AGENT_CHOICE.into(), "picked `codex`, the first agent installed and allowed".into());
        assert_eq!(
            run_header(&d, None),
            "task t_0123456789ab: agent codex, model the agent's default\n  picked `codex`, the first agent installed and allowed\n  mode read-only, isolation inplace, network on, timeout 10m00s\n  works in /src/app\n"
        );
        d.warnings.clear();
        d.model = "o3".into();
        d.isolation = "worktree".into();
        let h = run_header(&d, Some("/src/app/.caesar/wt/t_0123456789ab"));
        assert!(
            h.starts_with("task t_0123456789ab: agent codex, model o3\n  mode read-only, isolation worktree"),
            "{h}"
        );
        assert!(h.contains("works in the worktree /src/app/.caesar/wt/t_0123456789ab"), "{h}");
    }
}

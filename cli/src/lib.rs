//! caesar: the command line for people and scripts.
//!
//! Every command is a call to the daemon (started on first use); nothing
//! here spawns agents or touches the store. `--json` makes any command print
//! JSON and nothing else.
//!
//! Exit codes follow the task's verdict (issue 30): 0 succeeded, 1 failed,
//! blocked or its verification failed, 2 bad input, 3 no daemon could be
//! reached, 4 cancelled, 5 timed out (or not ended when the wait did),
//! 6 it needs an answer.

mod ask;
mod bad_input;
mod changes;
mod config_cmd;
pub mod config_ui;
mod fanout;
mod fork_cmd;
mod manage;
mod mcp_cmd;
mod mcp_install;
mod pipe;
mod render;
mod run;
mod service;
mod tasks;
mod trust_cmd;
mod ui;
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

use config_cmd::{config_screen, edit, init, policy, role};
use manage::{agents, daemon, doctor};
use run::{exit_code_of, logs, run};

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
    /// Tell a running task's agent something without stopping it (delivered once; see
    /// `caesar logs` for its `steer` event).
    Steer {
        task_id: String,
        /// What the agent should know.
        text: String,
        /// End the agent's running turn first, then say it.
        #[arg(long)]
        interrupt: bool,
    },
    /// Continue a finished task in its own worktree and branch (issue 31): a new task whose
    /// agent resumes its session where it can; its diff is the whole work since the first base.
    Continue(Box<ContinueArgs>),
    /// Start a new task in a new worktree holding another task's files as they were at one of
    /// its events (`caesar logs` shows their seq), briefed with that task and your text.
    Fork {
        task_id: String,
        /// What the fork's agent should do.
        text: String,
        /// The event (seq) whose files the fork starts with; the source's latest state without it.
        #[arg(long)]
        at: Option<u64>,
        /// The fork's agent (the source's by default).
        #[arg(long)]
        agent: Option<String>,
        /// The fork's model (the agent's default otherwise).
        #[arg(long)]
        model: Option<String>,
    },
    /// The git diff of a worktree task.
    Diff {
        task_id: String,
        /// Files and line counts only, no patch.
        #[arg(long)]
        stat: bool,
    },
    /// Apply a worktree task's changes to the main working tree (3-way, never a commit).
    Apply {
        task_id: String,
        /// A stacked task: apply its parents first (those not applied yet,
        /// oldest ancestor first), then it.
        #[arg(long)]
        chain: bool,
    },
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
        /// Only tasks finished longer ago than this (0s: all of them); applied
        /// or discarded tasks go whatever their age.
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
    /// Open the web dashboard: prints a one-time login link and opens a browser where one exists.
    Ui {
        /// Only print the link.
        #[arg(long)]
        no_open: bool,
    },
    /// Write this project's starting config, role prompts and host-agent skills.
    Init {
        /// Initialize the global layer instead of the project.
        #[arg(long)]
        global: bool,
        /// Overwrite the config and role prompts too.
        #[arg(long)]
        force: bool,
    },
    /// A terminal screen over the layered config: agents, roles, policy, MCP install.
    Config,
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
    /// Trust this project's .caesar config as it is now (its setup, agents, [bin], policy relaxations,
    /// prompt files take effect only once trusted; a changed file needs trust again).
    Trust {
        /// A project directory or one of its .caesar/config*.toml files (default: the current directory).
        path: Option<String>,
        /// List what is trusted.
        #[arg(long, conflicts_with = "revoke")]
        list: bool,
        /// Withdraw trust from the path and everything beneath it.
        #[arg(long)]
        revoke: bool,
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
    /// Let a delegation from inside a task work in this directory (an
    /// absolute path) beside its parent's repository: `nested_workspaces`,
    /// read from the global config only.
    Nest {
        dir: String,
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
        /// The read-only token instead: the server grants it the readonly
        /// profile only, whatever `?profile=` the client asks for.
        #[arg(long)]
        readonly: bool,
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
    /// Do not ask the agent's questions (and permission requests) at the
    /// terminal: they wait for `caesar answer`, as through a pipe.
    #[arg(long)]
    no_ask: bool,
    /// Also print the agent's whole command line (with the brief) when it starts.
    #[arg(long, short)]
    verbose: bool,
    /// A command run in the task's workshop after the agent ends, whose
    /// outcome goes into the report (repeatable; default: the role's `verify`).
    #[arg(long = "verify")]
    verify: Vec<String>,
    /// Where the task runs: `local` or `kubernetes` (default: the role's
    /// `runner`, else the project's `[runner] kind`).
    #[arg(long, value_parser = ["local", "kubernetes"])]
    runner: Option<String>,
    /// Fan out: one task per agent (comma-separated, e.g. codex,gemini,claude),
    /// each in its own worktree; prints their comparison at the end.
    #[arg(long, value_delimiter = ',', conflicts_with = "agent")]
    agents: Vec<String>,
    /// Fan out: N tasks (2-8) of the same agent or role, as one group.
    #[arg(long)]
    attempts: Option<u32>,
    /// Stop the agent once it used this many tokens (input plus output);
    /// for a group, across all its tasks.
    #[arg(long = "budget-tokens", value_name = "N")]
    budget_tokens: Option<i64>,
    /// Stop the agent once it cost this many US dollars (where the provider reports cost).
    #[arg(long = "budget-cost", value_name = "USD")]
    budget_cost: Option<f64>,
    /// Stop the agent after this much wall time (e.g. 10m, 90s).
    #[arg(long = "budget-wall", value_name = "DURATION")]
    budget_wall: Option<String>,
    /// Stop the agent after this many replies.
    #[arg(long = "budget-turns", value_name = "N")]
    budget_turns: Option<i64>,
    /// When an auth, quota or network blocker stops the agent: relay (the
    /// default: the role's next agent takes over, in the same worktree with
    /// a handoff when files changed), fallback (only when nothing changed),
    /// park (wait for a quota to lift, then resume the same session) or fail.
    #[arg(long = "on-blocker", value_parser = ["relay", "fallback", "park", "fail"])]
    on_blocker: Option<String>,
    /// Stacked tasks: the ids of tasks this one builds on (comma-separated);
    /// it waits for them and starts on their results merged.
    #[arg(long, value_delimiter = ',')]
    after: Vec<String>,
    /// With --after: what a parent that fails or is cancelled does to this
    /// task: cancel it (the default) or run it on what the others made.
    #[arg(long = "on-parent-failure", value_parser = ["cancel", "run"])]
    on_parent_failure: Option<String>,
    /// A review loop (with --mode write): the agent or role that reviews the
    /// result, read-only in the worktree, until it approves; its findings go
    /// back to the worker as continuations (issue 32).
    #[arg(long = "review-by")]
    review_by: Option<String>,
    /// With --review-by: the most review rounds, 1 to 5 (default 3).
    #[arg(long = "review-rounds", value_parser = clap::value_parser!(u32).range(1..=5))]
    review_rounds: Option<u32>,
    /// The task this run continues (`caesar continue`), not a flag of `run`.
    #[arg(skip)]
    continue_from: Option<String>,
    /// The agent that takes over, in the same worktree under the same task
    /// id, when a blocker or the budget stops this one (instead of the
    /// role's chain); checked now: it must be installed and allowed.
    #[arg(long = "relay-to", value_name = "AGENT")]
    relay_to: Option<String>,
}

/// `caesar continue <task> "<text>"`: the task, then `run`'s arguments.
#[derive(Args)]
struct ContinueArgs {
    /// The finished task to continue (the newest of its lineage).
    task_id: String,
    #[command(flatten)]
    run: RunArgs,
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
        if bad_input::is_bad_input(&e) {
            return Failure { code: 2, message: format!("{e:#}") };
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
                eprintln!("caesar: {}", render::sanitize(&f.message));
            }
            ExitCode::from(f.code)
        }
    }
}

async fn connect() -> anyhow::Result<Client> {
    let paths = Paths::from_env()?;
    Ok(client::connect_or_start(&paths).await?)
}

/// Run the parsed command and return its exit code: one arm per command,
/// each handing over to the function (or module) that owns it.
async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let json = cli.json;
    match cli.command {
        Command::Run(args) => run(*args, json).await,
        Command::Await { task_ids, timeout } => tasks::await_tasks(task_ids, &timeout, json).await,
        Command::Watch { task_ids, once } => {
            let c = connect().await?;
            Ok(watch::run(c, watch::Options { ids: task_ids, once, json }).await?)
        }
        Command::Ps { all, limit } => tasks::ps(all, limit, json).await,
        Command::Status { task_id } => tasks::status(task_id, json).await,
        Command::Logs { task_id, raw, follow, limit } => logs(task_id, raw, follow, limit, json).await,
        Command::Cancel { task_id } => tasks::cancel(task_id, json).await,
        Command::Answer { task_id, question_id, answer } => tasks::answer(task_id, question_id, answer, json).await,
        Command::Steer { task_id, text, interrupt } => tasks::steer(task_id, text, interrupt, json).await,
        Command::Continue(c) => {
            let ContinueArgs { task_id, mut run } = *c;
            run.continue_from = Some(task_id);
            run::run(run, json).await
        }
        Command::Fork { task_id, text, at, agent, model } => {
            fork_cmd::fork(fork_cmd::ForkArgs { task_id, at, agent, model, text }, json).await
        }
        Command::Diff { task_id, stat } => changes::diff(task_id, stat, json).await,
        Command::Apply { task_id, chain: false } => changes::apply(task_id, json).await,
        Command::Apply { task_id, chain: true } => changes::apply_chain(task_id, json).await,
        Command::Discard { task_id } => changes::discard(task_id, json).await,
        Command::Gc { dry_run, force, older_than } => changes::gc(dry_run, force, &older_than, json).await,
        Command::Agents { action } => agents(action, json).await,
        Command::Doctor => doctor(json).await,
        Command::Trust { path, list, revoke } => trust_cmd::run(connect().await?, path, list, revoke, json).await,
        Command::Ui { no_open } => Ok(ui::run(connect().await?, cwd_string(), no_open, json).await?),
        Command::Init { global, force } => init(global, force, json).await,
        Command::Completions { shell } => completions(shell),
        Command::Man => man(),
        Command::Mcp { action } => mcp_cmd::mcp(action, json).await,
        Command::Config => config_screen(json).await,
        Command::Policy { action } => policy(action, json).await,
        Command::Role { action } => role(action, json).await,
        Command::Protocol { action: ProtocolAction::Schema { document, strict } } => {
            protocol_schema(document, strict, json).await
        }
        Command::Daemon { action } => daemon(action, json).await,
    }
}

/// `caesar completions`: print the shell's completion script.
fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut cmd, "caesar", &mut std::io::stdout());
    Ok(0)
}

/// `caesar man`: print the man page.
fn man() -> Result<u8, Failure> {
    let cmd = <Cli as clap::CommandFactory>::command();
    clap_mangen::Man::new(cmd).render(&mut std::io::stdout()).map_err(anyhow::Error::from)?;
    Ok(0)
}

/// `caesar protocol schema`: print the JSON Schema the daemon validates a
/// task, report or event document with.
async fn protocol_schema(document: String, strict: bool, json: bool) -> Result<u8, Failure> {
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

fn parse_duration_ms(text: &str) -> anyhow::Result<u64> {
    caesar_proto::duration::parse_ms(text).map_err(|e| anyhow::anyhow!(e))
}

fn cwd_string() -> String {
    std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()
}

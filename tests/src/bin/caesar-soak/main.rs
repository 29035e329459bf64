//! caesar-soak: delegates many tasks to a real daemon on a temporary
//! CAESAR_HOME while SIGKILLing and restarting that daemon at random moments,
//! then checks that nothing was lost.
//!
//! ```sh
//! cargo build --release --workspace
//! target/release/caesar-soak [--tasks 100] [--kills 10] [--seed N]
//! ```
//!
//! The tasks are the scripted fake agent: quick ones that write a report,
//! slow ones, a sixth that ask the orchestrator a question through the
//! return channel (`caesar-mcp --channel`) before reporting, and a third
//! that write a file in a git worktree of their own, half of them in a
//! project whose `[worktree] setup` runs for 300 ms and whose `verify`
//! runs for 300 ms more (so that kills fall inside preparation and
//! verification too, both in the task's box). The soak answers
//! each question as it shows up. Every kill falls at a random point of the
//! run's progress (tasks delegated plus tasks ended), a random while after
//! it; half of them strike a few milliseconds into the next delegation,
//! while the daemon records and starts that task. The daemon stays down a
//! random while. A delegation whose reply a kill swallowed is looked up by
//! its objective after the restart, and sent again only if the store does
//! not have it.
//!
//! At the end it checks, and exits 1 on any loss:
//! - every task is in the store exactly once and ended `succeeded`, with the
//!   report its agent wrote;
//! - every agent ran exactly once (its first line is in its raw log once);
//! - events are gapless: `Logs` returns seq 0..n with no hole or duplicate,
//!   as many as the task counts, one `started` first and one `finished` last,
//!   and the task's events.jsonl holds exactly the same;
//! - every question asked is in the store once, with exactly the answer the
//!   soak gave, delivered; the agent printed that answer once, and the log
//!   has one `question` and one `answer` event for it;
//! - every worktree task has exactly one worktree and one branch, holding
//!   its file, and no other worktree or `caesar/*` branch exists (nothing
//!   left by an interrupted preparation);
//! - no supervisor, agent, setup, verification or channel process is left, and the store
//!   passes SQLite's integrity check.
//!
//! The seed is printed first: `--seed N` replays the same schedule of
//! kinds, pauses and kills (the processes' own timing still varies). On a
//! failure the temporary CAESAR_HOME is kept and its path printed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use caesar_proto::client::{self, Client};
use caesar_proto::paths::Paths;
use caesar_proto::pb;
use tokio::sync::mpsc;

mod checks;
use checks::{check, check_worktrees, processes_of};

/// How often the soak looks at the tasks (questions, progress, the end).
const POLL: Duration = Duration::from_millis(50);
/// Tasks the project lets run at once.
const MAX_PARALLEL: u32 = 8;

/// xorshift64, seeded through splitmix64 so that small seeds spread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (0 when n is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Quick,
    Slow(usize),
    Ask,
    /// A write task in a worktree, in the project with a setup or without.
    Tree {
        setup: bool,
    },
}

/// The slow agents' two pauses, in ms.
const SLOW_PAUSES: [u64; 3] = [150, 600, 1500];

impl Kind {
    fn agent(self) -> String {
        match self {
            Kind::Quick => "quick".to_owned(),
            Kind::Slow(i) => format!("slow{i}"),
            Kind::Ask => "asker".to_owned(),
            Kind::Tree { .. } => "tree".to_owned(),
        }
    }

    /// The summary its agent's report carries.
    fn summary(self) -> String {
        format!("{} done", self.agent())
    }

    /// Which project it runs in: 0 plain, 1 a repository, 2 a repository
    /// with a setup.
    fn project(self) -> usize {
        match self {
            Kind::Tree { setup: false } => 1,
            Kind::Tree { setup: true } => 2,
            _ => 0,
        }
    }
}

/// The file a worktree task writes.
const TREE_FILE: &str = "tree-out.txt";

/// The first line every agent prints: present once in raw.log when the
/// agent ran exactly once.
const START_LINE: &str = "soak: agent started";
/// What the fake agent prints for an answered `ask_orchestrator`.
const ANSWER_PREFIX: &str = "ask_orchestrator: Answer: ";

/// A project for the soak's tasks: the agents' config, and for worktree
/// tasks a repository with one commit and an optional `[worktree] setup`.
fn make_project(fake: &Path, repo: bool, setup: Option<&str>) -> Result<tempfile::TempDir, String> {
    let project = tempfile::tempdir().map_err(|e| e.to_string())?;
    let p = project.path();
    std::fs::create_dir_all(p.join(".caesar")).map_err(|e| e.to_string())?;
    let mut text = setup.map(|s| format!("[worktree]\nsetup = [{s:?}]\n\n")).unwrap_or_default();
    text.push_str(&config(fake));
    std::fs::write(p.join(".caesar/config.toml"), text).map_err(|e| e.to_string())?;
    if repo {
        std::fs::write(p.join("README.md"), "soak\n").map_err(|e| e.to_string())?;
        for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-q", "-m", "base"]] {
            git(p, args)?;
        }
    }
    Ok(project)
}

/// Runs git in `dir` with a fixed identity; its stdout, or why it failed.
fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let o = Command::new("git")
        .args(["-c", "user.name=soak", "-c", "user.email=soak@localhost", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !o.status.success() {
        return Err(format!("git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn config(fake: &Path) -> String {
    let f = fake.display().to_string();
    let mut agents: Vec<(String, Vec<String>)> = Vec::new();
    let words = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    agents
        .push(("quick".into(), words(&["say", START_LINE, "lines", "3", "report", "success", &Kind::Quick.summary()])));
    for (i, pause) in SLOW_PAUSES.iter().enumerate() {
        let p = pause.to_string();
        agents.push((
            Kind::Slow(i).agent(),
            words(&[
                "say",
                START_LINE,
                "sleep",
                &p,
                "lines",
                "20",
                "sleep",
                &p,
                "report",
                "success",
                &Kind::Slow(i).summary(),
            ]),
        ));
    }
    agents.push((
        "asker".into(),
        words(&[
            "say",
            START_LINE,
            "mcp-ask",
            "soak: which way?",
            "lines",
            "2",
            "report",
            "success",
            &Kind::Ask.summary(),
        ]),
    ));
    agents.push((
        "tree".into(),
        words(&[
            "say",
            START_LINE,
            "write",
            TREE_FILE,
            "made in a worktree\n",
            "report",
            "success",
            &Kind::Tree { setup: false }.summary(),
        ]),
    ));
    let mut out = format!("[policy]\nmax_parallel = {MAX_PARALLEL}\n\n");
    for (id, args) in agents {
        out.push_str(&format!(
            "[[agent]]\nid = {id:?}\nbin = {f:?}\nargs = {}\n\n",
            serde_json::to_string(&args).unwrap_or_default()
        ));
    }
    out
}

struct Options {
    tasks: usize,
    kills: usize,
    seed: u64,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Result<Option<u64>, String> {
        match args.iter().position(|a| a == name) {
            Some(i) => {
                args.get(i + 1).and_then(|v| v.parse().ok()).map(Some).ok_or_else(|| format!("{name} takes a number"))
            }
            None => Ok(None),
        }
    };
    for (i, a) in args.iter().enumerate() {
        let is_value = i > 0 && matches!(args[i - 1].as_str(), "--tasks" | "--kills" | "--seed");
        if !is_value && !matches!(a.as_str(), "--tasks" | "--kills" | "--seed") {
            return Err(format!("unknown argument `{a}`: use [--tasks N] [--kills N] [--seed N]"));
        }
    }
    let seed = match value("--seed")? {
        Some(s) => s,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
            .unwrap_or(1),
    };
    let tasks = value("--tasks")?.unwrap_or(100) as usize;
    // ListTasks answers at most 10,000 tasks, and the audit lists them all.
    if !(1..=10_000).contains(&tasks) {
        return Err("--tasks must be from 1 to 10000".to_owned());
    }
    Ok(Options { tasks, kills: value("--kills")?.unwrap_or(10) as usize, seed })
}

fn main() -> std::process::ExitCode {
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("caesar-soak: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    println!("caesar-soak: seed {} (replay with --seed {})", opts.seed, opts.seed);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("caesar-soak: cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match rt.block_on(soak(&opts)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("caesar-soak: {e}");
            eprintln!("caesar-soak: replay with --seed {}", opts.seed);
            std::process::ExitCode::from(1)
        }
    }
}

/// The daemon under test: a child process, SIGKILLed and restarted at will.
struct Daemon {
    bin: PathBuf,
    envs: Vec<(&'static str, String)>,
    paths: Paths,
    child: Option<Child>,
}

impl Daemon {
    async fn start(&mut self) -> Result<Client, String> {
        let child = Command::new(&self.bin)
            .envs(self.envs.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        client::wait_until_ready(&self.paths, Duration::from_secs(30))
            .await
            .map_err(|e| format!("the restarted daemon did not answer: {e}"))
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        client::wait_until_gone(&self.paths, Duration::from_secs(10)).await;
    }

    /// Whether the daemon exited without being told to.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// On the way out, however the soak ends, SIGKILLs whatever still carries
/// its CAESAR_HOME (tasks a failed run left behind).
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for (pid, _) in processes_of(&self.0) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// What a background call reports back to the main loop.
enum Done {
    Delegated { k: usize, generation: u32, result: Result<String, tonic::Status> },
    Answered { task: String, qid: String, result: Result<(), tonic::Status> },
}

fn broken(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}

fn objective(k: usize) -> String {
    format!("soak task {k}")
}

fn answer_for(task: &str, qid: &str) -> String {
    format!("soak answer for {task}/{qid}")
}

/// The whole run's record.
struct Soak {
    kinds: Vec<Kind>,
    ids: Vec<Option<String>>,
    to_send: VecDeque<usize>,
    in_flight: HashSet<usize>,
    attempts: Vec<u32>,
    /// Delegations whose reply was lost to a kill, to look up after the restart.
    unsure: Vec<usize>,
    /// Delegations a kill swallowed that the store turned out to hold.
    lost_replies: u32,
    /// Answers the soak gave (or is giving), by (task, question).
    answers: HashMap<(String, String), String>,
    answering: HashSet<(String, String)>,
    answered: HashSet<(String, String)>,
    problems: Vec<String>,
}

async fn soak(opts: &Options) -> Result<(), String> {
    let started = Instant::now();
    let mut rng = Rng::new(opts.seed);
    let bin_dir: PathBuf = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .parent()
        .ok_or("no directory beside this binary")?
        .to_path_buf();
    for bin in ["caesard", "fake-agent", "caesar-mcp"] {
        if !bin_dir.join(bin).exists() {
            return Err(format!(
                "{} is missing: build the workspace first (cargo build --release --workspace)",
                bin_dir.join(bin).display()
            ));
        }
    }
    let home = tempfile::Builder::new().prefix("csoak").tempdir_in("/tmp").map_err(|e| e.to_string())?;
    let fake = bin_dir.join("fake-agent");
    let projects = [
        make_project(&fake, false, None)?,
        make_project(&fake, true, None)?,
        make_project(&fake, true, Some("sleep 0.3"))?,
    ];
    let workspaces: Vec<String> = projects.iter().map(|p| p.path().display().to_string()).collect();
    let paths = Paths::under(home.path());
    let home_env = home.path().display().to_string();
    let _reaper = Reaper(home.path().to_path_buf());
    let mut daemon = Daemon {
        bin: bin_dir.join("caesard"),
        envs: vec![
            ("CAESAR_HOME", home_env.clone()),
            ("CAESAR_LOG", "info".to_owned()),
            ("CAESAR_TRUST_PREFIX", std::env::temp_dir().display().to_string()),
            ("CAESAR_KILL_GRACE_MS", "300".to_owned()),
        ],
        paths: paths.clone(),
        child: None,
    };

    // A sixth ask, a third work in worktrees (half of them after a setup),
    // the rest are quick or slow, in seeded order.
    let n = opts.tasks;
    let mut kinds: Vec<Kind> = (0..n)
        .map(|k| match k % 6 {
            0 => Kind::Ask,
            1 => Kind::Quick,
            2 => Kind::Slow(k / 6 % SLOW_PAUSES.len()),
            3 => Kind::Tree { setup: false },
            4 => Kind::Tree { setup: true },
            _ => Kind::Quick,
        })
        .collect();
    for i in (1..kinds.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        kinds.swap(i, j);
    }
    // Kills fall at random points of the progress (delegated + ended, out
    // of 2n), each a random while after that point is reached; half of them
    // wait for the next delegation and strike while the daemon handles it.
    let mut kill_points: Vec<(usize, u64, bool)> = (0..opts.kills)
        .map(|_| (1 + rng.below((2 * n).saturating_sub(1) as u64) as usize, rng.below(300), rng.below(2) == 0))
        .collect();
    kill_points.sort();

    let mut s = Soak {
        kinds,
        ids: vec![None; n],
        to_send: (0..n).collect(),
        in_flight: HashSet::new(),
        attempts: vec![0; n],
        unsure: Vec::new(),
        lost_replies: 0,
        answers: HashMap::new(),
        answering: HashSet::new(),
        answered: HashSet::new(),
        problems: Vec::new(),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
    let mut c = daemon.start().await?;
    let mut generation = 0u32;
    let mut kills_done = 0usize;
    let mut kills_preparing = 0usize;
    let mut kill_at: Option<Instant> = None;
    // A kill waiting for the next delegation.
    let mut armed = false;
    let mut next_delegate = Instant::now();
    let mut last_poll = Instant::now() - POLL;
    let mut views: HashMap<String, pb::TaskView> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120 + 3 * n as u64);

    loop {
        // Results of background calls.
        while let Ok(done) = rx.try_recv() {
            match done {
                Done::Delegated { k, generation: g, result } => {
                    s.in_flight.remove(&k);
                    match result {
                        Ok(id) => s.ids[k] = Some(id),
                        Err(e) if broken(&e) && g < generation => s.unsure.push(k),
                        Err(e) => {
                            s.problems.push(format!("delegating task {k} failed: {:?}: {}", e.code(), e.message()));
                            if broken(&e) {
                                s.unsure.push(k);
                            } else if s.attempts[k] < 3 {
                                s.to_send.push_back(k);
                            }
                        }
                    }
                }
                Done::Answered { task, qid, result } => {
                    let key = (task, qid);
                    s.answering.remove(&key);
                    match result {
                        Ok(()) => {
                            s.answered.insert(key);
                        }
                        // An earlier answer of ours whose reply a kill swallowed.
                        Err(e) if e.code() == tonic::Code::FailedPrecondition && e.message().contains("already") => {
                            s.answered.insert(key);
                        }
                        Err(e) if broken(&e) => {}
                        Err(e) => s.problems.push(format!(
                            "answering {}/{} failed: {:?}: {}",
                            key.0,
                            key.1,
                            e.code(),
                            e.message()
                        )),
                    }
                }
            }
        }

        if let Some(status) = daemon.exited() {
            s.problems.push(format!("the daemon exited by itself ({status}); restarting it"));
            daemon.kill().await;
            c = daemon.start().await?;
            generation += 1;
        }

        // Delegations a kill left unsure: the store decides.
        if !s.unsure.is_empty() {
            match c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: u32::MAX }).await {
                Ok(r) => {
                    let tasks = r.into_inner().tasks;
                    for k in std::mem::take(&mut s.unsure) {
                        let found: Vec<&pb::TaskView> = tasks.iter().filter(|t| t.objective == objective(k)).collect();
                        match found.as_slice() {
                            [] => s.to_send.push_front(k),
                            [one] => {
                                s.ids[k] = Some(one.task_id.clone());
                                s.lost_replies += 1;
                            }
                            many => {
                                s.problems.push(format!("task {k} is in the store {} times", many.len()));
                                s.ids[k] = Some(many[0].task_id.clone());
                            }
                        }
                    }
                }
                Err(e) => s.problems.push(format!("listing tasks failed: {e}")),
            }
        }

        // Delegate the next task, at a random pace.
        let mut kill_now = false;
        if Instant::now() >= next_delegate
            && let Some(k) = s.to_send.pop_front()
        {
            s.in_flight.insert(k);
            s.attempts[k] += 1;
            let mut client = c.clone();
            let tree = matches!(s.kinds[k], Kind::Tree { .. });
            let req = pb::DelegateRequest {
                objective: objective(k),
                agent: s.kinds[k].agent(),
                workspace: workspaces[s.kinds[k].project()].clone(),
                channel: s.kinds[k] == Kind::Ask,
                mode: "write".to_owned(),
                isolation: if tree { "worktree".to_owned() } else { String::new() },
                // The sleep carries the installation's mark, so the audit
                // finds it if the box let it outlive its task.
                verify: if s.kinds[k] == (Kind::Tree { setup: true }) {
                    vec![format!("test -f {TREE_FILE} && CAESAR_HOME='{home_env}' sleep 0.3")]
                } else {
                    Vec::new()
                },
                ..Default::default()
            };
            let (tx, g) = (tx.clone(), generation);
            tokio::spawn(async move {
                let result = client.delegate(req).await.map(|r| r.into_inner().task_id);
                let _ = tx.send(Done::Delegated { k, generation: g, result });
            });
            next_delegate = Instant::now() + Duration::from_millis(rng.below(60));
            if armed {
                // Let the request go out, then strike while the daemon
                // records and starts the task.
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
                std::thread::sleep(Duration::from_micros(rng.below(4000)));
                kill_now = true;
            }
        }

        // Look at the tasks: answer new questions, measure progress.
        if last_poll.elapsed() >= POLL {
            last_poll = Instant::now();
            match c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: u32::MAX }).await {
                Ok(r) => {
                    views = r.into_inner().tasks.into_iter().map(|t| (t.task_id.clone(), t)).collect();
                }
                Err(e) if broken(&e) => {}
                Err(e) => s.problems.push(format!("listing tasks failed: {e}")),
            }
            for t in views.values() {
                for q in &t.pending_questions {
                    let key = (t.task_id.clone(), q.question_id.clone());
                    if s.answered.contains(&key) || s.answering.contains(&key) {
                        continue;
                    }
                    let answer = answer_for(&key.0, &key.1);
                    s.answers.insert(key.clone(), answer.clone());
                    s.answering.insert(key.clone());
                    let mut client = c.clone();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let (task, qid) = key;
                        let result = client
                            .answer(pb::AnswerRequest { task_id: task.clone(), question_id: qid.clone(), answer })
                            .await
                            .map(|_| ());
                        let _ = tx.send(Done::Answered { task, qid, result });
                    });
                }
            }
        }

        let delegated = s.ids.iter().filter(|i| i.is_some()).count();
        let ended = s
            .ids
            .iter()
            .flatten()
            .filter(|id| views.get(*id).is_some_and(|t| !matches!(t.status().as_str(), "pending" | "running")))
            .count();

        // Kill at the next point of progress, a random while after it.
        if kills_done < kill_points.len() && !kill_now {
            let (point, after_ms, mid_delegation) = kill_points[kills_done];
            if kill_at.is_none() && !armed && delegated + ended >= point {
                kill_at = Some(Instant::now() + Duration::from_millis(after_ms));
            }
            if kill_at.is_some_and(|at| Instant::now() >= at) {
                kill_at = None;
                armed = mid_delegation;
                kill_now = !mid_delegation;
            }
            // Nothing left to delegate: strike now.
            kill_now |= armed && s.to_send.is_empty();
        }
        if kill_now {
            armed = false;
            // As last seen (at most one poll ago): was a task preparing?
            if views.values().any(|t| t.phase().as_str() == "preparing") {
                kills_preparing += 1;
            }
            daemon.kill().await;
            kills_done += 1;
            tokio::time::sleep(Duration::from_millis(rng.below(400))).await;
            c = daemon.start().await?;
            generation += 1;
            continue;
        }

        if delegated == n
            && ended == n
            && s.to_send.is_empty()
            && s.in_flight.is_empty()
            && s.unsure.is_empty()
            && kills_done == kill_points.len()
        {
            break;
        }
        if Instant::now() > deadline {
            let stuck: Vec<String> = s
                .ids
                .iter()
                .enumerate()
                .map(|(k, id)| match id {
                    None => format!("task {k} never delegated"),
                    Some(id) => format!("{id} {}", views.get(id).map(|t| t.status().as_str()).unwrap_or("missing")),
                })
                .filter(|line| line.contains("never") || line.contains("pending") || line.contains("running"))
                .collect();
            s.problems.push(format!("gave up after {:?}: {}", started.elapsed(), stuck.join(", ")));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    check_worktrees(&mut s, &mut c, &projects).await;
    let questions = check(&mut s, &mut c, &paths, home.path(), &mut daemon).await;
    let duration = started.elapsed();
    let kinds = |f: fn(&Kind) -> bool| s.kinds.iter().filter(|k| f(k)).count();
    println!(
        "caesar-soak: tasks {n} ({} quick, {} slow, {} asking, {} in worktrees of which {} after a setup), \
         kills {kills_done} ({kills_preparing} while a task was preparing), questions {questions} (answered {}), replies lost to a kill {}, duration {:.1} s, seed {}",
        kinds(|k| *k == Kind::Quick),
        kinds(|k| matches!(k, Kind::Slow(_))),
        kinds(|k| *k == Kind::Ask),
        kinds(|k| matches!(k, Kind::Tree { .. })),
        kinds(|k| *k == Kind::Tree { setup: true }),
        s.answered.len(),
        s.lost_replies,
        duration.as_secs_f64(),
        opts.seed,
    );
    if s.problems.is_empty() {
        println!("caesar-soak: ok, nothing lost");
        return Ok(());
    }
    for p in &s.problems {
        eprintln!("LOSS: {p}");
    }
    for project in projects {
        eprintln!("caesar-soak: project kept in {}", project.keep().display());
    }
    let kept = home.keep();
    Err(format!("{} problem(s); the daemon's files are kept in {}", s.problems.len(), kept.display()))
}

//! Issue 29, the box, through the real binaries: a task's `verify` and
//! `[worktree] setup` run in the same confinement as its agent (its mount
//! namespace and Landlock rules, the agent's environment allowlist, a PID
//! namespace of its own), and nothing a task starts survives it, however it
//! forks. Each test fails without the box.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::*;

const LONG: Duration = Duration::from_secs(60);

/// The line a shell runs to record its own pid as the host's `/proc`
/// numbers it (in a box, `$$` is its pid in the box's namespace).
fn record_pid(file: &std::path::Path) -> String {
    format!("read -r p _ < /proc/self/stat; echo $p >> '{}'", file.display())
}

/// Kills what a test's processes left (only when a test fails: the box
/// leaves nothing).
fn kill_all(pids: &[u32]) {
    for p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p as i32), nix::sys::signal::Signal::SIGKILL);
    }
}

#[tokio::test]
async fn a_verify_that_double_forks_a_sleeper_leaves_nothing_after_the_task() {
    let mut env = Env::new(&[("w", &["report", "success", "done"])]);
    let pids = env.file("sleeper.pids");
    let sleeper = env.file("sleeper.sh");
    std::fs::write(&sleeper, format!("{}\nexec env -i sleep 300\n", record_pid(&pids))).unwrap();
    // The sleeper leaves the group, the session and the verification's
    // marker variable (`env -i`): only the box still holds it.
    let verify = format!("true && (setsid sh '{}' </dev/null >/dev/null 2>&1 &); sleep 0.3; true", sleeper.display());
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("w", "verify forks away");
    req.verify = vec![verify];
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let sleeper = pids_in(&pids);
    assert_eq!(sleeper.len(), 1, "the verification ran once and recorded its sleeper");
    let gone = eventually(Duration::from_secs(5), || !alive(sleeper[0])).await;
    kill_all(&sleeper);
    assert!(gone, "the sleeper {} a verification double-forked outlived its task", sleeper[0]);
}

#[tokio::test]
async fn a_verify_reads_neither_the_daemons_environment_nor_its_state() {
    let mut env = Env::new(&[("w", &["report", "success", "done"])]);
    let out = env.files_dir();
    let verify = format!(
        r#"O='{o}'; env > "$O/verify-env"; cat "$CAESAR_HOME/state/caesar.db" > "$O/verify-db" 2>&1; echo "rc=$?" >> "$O/verify-db"; tr '\0' '\n' < "/proc/$(cat "$O/daemon-pid")/environ" > "$O/verify-proc" 2>&1; cat "$CAESAR_HOME/state/http.token" > "$O/verify-token" 2>&1; echo "rc=$?" >> "$O/verify-token"; true"#,
        o = out.display()
    );
    let mut c = env.start_daemon_with(&[("SECRET_X", "daemon-only-secret-29")]).await;
    std::fs::write(env.file("daemon-pid"), env.daemon_pid().await.to_string()).unwrap();
    assert!(env.paths.state_dir.join("caesar.db").exists(), "what it tries to read exists");
    let mut req = env.delegate_request("w", "verify reads what is not its own");
    req.verify = vec![verify];
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let read = |n: &str| std::fs::read_to_string(out.join(n)).unwrap_or_else(|_| format!("<no {n}>"));
    let seen = read("verify-env");
    assert!(seen.contains("PATH="), "the verification ran: {seen}");
    assert!(!seen.contains("daemon-only-secret-29"), "the daemon's environment reached verify: {seen}");
    assert!(!read("verify-proc").contains("daemon-only-secret-29"), "{}", read("verify-proc"));
    let db = read("verify-db");
    assert!(!db.contains("rc=0") && !db.contains("SQLite"), "verify read caesar.db: {db}");
    let token = read("verify-token");
    assert!(!token.contains("rc=0"), "verify read the HTTP token: {token}");
}

#[tokio::test]
async fn a_setup_that_writes_outside_its_worktree_is_refused() {
    let mut env = Env::new(&[]);
    env.set_agents(&[("writer", &["write", "out.txt", "done\n"])]);
    let p = env.project.path().to_path_buf();
    let p = p.as_path();
    let planted = p.join("planted-by-setup");
    let setup = format!(
        "echo mine > by-setup; echo evil > '{}' 2>/dev/null; echo evil > '{}/.git/hooks/pre-commit' 2>/dev/null; true",
        planted.display(),
        p.display()
    );
    let config = std::fs::read_to_string(p.join(".caesar/config.toml")).unwrap();
    std::fs::write(p.join(".caesar/config.toml"), format!("[worktree]\nsetup = [{setup:?}]\n\n{config}")).unwrap();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    commit_base(p);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("writer", "set up")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let diff = env.caesar(&["diff", &id]);
    let diff = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert!(diff.contains("by-setup"), "setup wrote its own worktree: {diff}");
    assert!(!planted.exists(), "setup wrote the user's main tree");
    assert!(!p.join(".git/hooks/pre-commit").exists(), "setup planted a hook in the user's repository");
}

/// A worktree task of a project that a `.caesar` marks in a subdirectory of
/// its repository: the main tree around the project stays out of the
/// agent's reach. In a mount namespace the two shielded paths, one inside
/// the other, bound the repository's other entries back writable.
#[tokio::test]
async fn a_worktree_task_of_a_project_in_a_subdirectory_leaves_the_main_tree_alone() {
    let mut env = Env::new(&[]);
    let repo = env.project.path().to_path_buf();
    let sub = repo.join("sub");
    std::fs::create_dir_all(sub.join(".caesar")).unwrap();
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    let (readme, planted) = (repo.join("README.md"), sub.join("planted"));
    let (r, pl) = (readme.display().to_string(), planted.display().to_string());
    env.set_agents(&[(
        "writer",
        &["write", &r, "evil\n", "write", &pl, "evil\n", "write", "mine.txt", "ok\n", "report", "success", "wrote"],
    )]);
    std::fs::rename(repo.join(".caesar/config.toml"), sub.join(".caesar/config.toml")).unwrap();
    commit_base(&repo);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "write beside the project");
    req.workspace = sub.display().to_string();
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.isolation, "worktree");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), "hello\n", "the agent wrote the main tree");
    assert!(!planted.exists(), "the agent wrote the user's project");
    let diff = c.diff(caesar_proto::pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(diff.files.iter().any(|f| f.path == "sub/mine.txt"), "{diff:?}");
}

#[tokio::test]
async fn an_agent_that_forks_away_in_a_loop_leaves_nothing_after_its_task() {
    let env0 = Env::new(&[]);
    let pids = env0.file("hop.pids");
    let hop = env0.file("hop.sh");
    // Each generation records itself, starts the next and exits at once:
    // always a fresh child its parent no longer holds.
    std::fs::write(&hop, format!("{}\nsh '{}' &\nexit 0\n", record_pid(&pids), hop.display())).unwrap();
    let script = format!("sh '{}' & sleep 0.5", hop.display());
    let mut env = env0;
    env.set_agents(&[("hopper", &["sh", &script, "report", "success", "hopped"])]);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("hopper", "hop away")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    assert!(!pids_in(&pids).is_empty(), "the hopper ran");
    // Nothing of it is left, and nothing new is recorded.
    let gone = eventually(Duration::from_secs(5), || pids_in(&pids).iter().all(|p| !alive(*p))).await;
    let count = pids_in(&pids).len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = pids_in(&pids).len() > count;
    for _ in 0..50 {
        kill_all(&pids_in(&pids));
    }
    assert!(gone && !still, "a process that forks away in a loop outlived its task ({count} generations)");
    // The started event says which box applied.
    let events = std::fs::read_to_string(std::path::Path::new(&t.task_dir).join("events.jsonl")).unwrap();
    let box_said = if caesard::sandbox::pid_ns::works() { "a PID namespace per task" } else { "no PID namespace" };
    assert!(events.contains(box_said), "the started event says the box: {events}");
}

/// Where the kernel refuses a PID namespace (here: switched off) the box
/// falls back to the launcher exec'ing the program, the task still runs with
/// its setup-free verify, and the started event says which protection applied.
#[tokio::test]
async fn without_a_pid_namespace_the_task_runs_and_says_so() {
    let mut env = Env::new(&[("w", &["report", "success", "done"])]);
    let ran = env.file("verify-ran");
    let mut c = env.start_daemon_with(&[("CAESAR_PID_NS", "off")]).await;
    let mut req = env.delegate_request("w", "no namespace");
    // `$$` and the host's number for the shell are one: no namespace.
    req.verify = vec![format!("read -r p _ < /proc/self/stat; echo \"$$ $p\" > '{}'", ran.display())];
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let pids = std::fs::read_to_string(&ran).unwrap();
    let (inner, host) = pids.trim().split_once(' ').unwrap();
    assert_eq!(inner, host, "the verification ran in no PID namespace of its own");
    let events = std::fs::read_to_string(std::path::Path::new(&t.task_dir).join("events.jsonl")).unwrap();
    assert!(events.contains("no PID namespace"), "the started event says the fallback: {events}");
}

/// `caesar ui --no-open` run by `prefix` (a command that runs its argv),
/// with the installation's environment.
fn ui_through(env: &Env, prefix: &[&str]) -> std::process::Output {
    std::process::Command::new(prefix[0])
        .args(&prefix[1..])
        .arg(caesar_bin())
        .args(["--json", "ui", "--no-open"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Issue 29: the authority model does not rest on an intact ancestry. A
/// process in a PID namespace of its own (as everything in a task's box)
/// whose ancestors hold no task supervisor is refused the orchestrator's
/// faces, where the same command run by the user is served.
#[tokio::test]
async fn a_process_in_a_pid_namespace_of_its_own_is_never_taken_for_the_user() {
    if !caesard::sandbox::pid_ns::works() {
        eprintln!("skipped: this kernel gives no PID namespace to this user");
        return;
    }
    let mut env = Env::new(&[]);
    let _c = env.start_daemon().await;
    let user = env.caesar(&["--json", "ui", "--no-open"]);
    assert!(user.status.success(), "the user opens the dashboard: {}", String::from_utf8_lossy(&user.stderr));
    let boxed = ui_through(&env, &["unshare", "--user", "--map-root-user", "--pid", "--fork"]);
    let err = format!("{}{}", String::from_utf8_lossy(&boxed.stdout), String::from_utf8_lossy(&boxed.stderr));
    assert!(!boxed.status.success(), "a process in another PID namespace got a login link");
    assert!(err.contains("PID namespace other than caesard's"), "the refusal names the namespace: {err}");
}

/// The same, by the cgroup: a process in a box's cgroup (a CLI that runs
/// without the PID namespace) is no user process either.
#[tokio::test]
async fn a_process_in_a_box_cgroup_is_never_taken_for_the_user() {
    let Some(base) = caesard::sandbox::cgroup::delegated() else {
        eprintln!("skipped: no delegated cgroup v2 here");
        return;
    };
    let mut env = Env::new(&[]);
    let _c = env.start_daemon().await;
    // Named after this test process, which outlives it: no daemon sweeps it.
    let cg = base.join(format!("caesar-box-{}", std::process::id()));
    std::fs::create_dir_all(&cg).unwrap();
    let enter = format!("echo 0 > '{}' && exec \"$0\" \"$@\"", cg.join("cgroup.procs").display());
    let boxed = ui_through(&env, &["sh", "-c", &enter]);
    let _ = std::fs::remove_dir(&cg);
    let err = format!("{}{}", String::from_utf8_lossy(&boxed.stdout), String::from_utf8_lossy(&boxed.stderr));
    assert!(!boxed.status.success(), "a process in a box's cgroup got a login link");
    assert!(err.contains("in the cgroup of a task's box"), "the refusal names the cgroup: {err}");
}

/// Nothing in a box can move itself out of its cgroup (which the authority
/// check reads): Landlock's write rules refuse it, and the cgroup tree is
/// read-only in the box's mount namespace besides, for a kernel without
/// Landlock.
#[tokio::test]
async fn an_agent_cannot_move_itself_out_of_its_box_cgroup() {
    let Some(base) = caesard::sandbox::cgroup::delegated() else {
        eprintln!("skipped: no delegated cgroup v2 here");
        return;
    };
    if !caesard::sandbox::mount::works() {
        eprintln!("skipped: no mount namespace for this user");
        return;
    }
    let env0 = Env::new(&[]);
    let out = env0.file("escape");
    let script = format!(
        "if echo $$ > '{}' 2>/dev/null; then echo moved > '{o}'; else echo refused > '{o}'; fi",
        base.join("cgroup.procs").display(),
        o = out.display()
    );
    let mut env = env0;
    env.set_agents(&[("escaper", &["sh", &script, "report", "success", "tried"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("escaper", "leave the box's cgroup");
    req.mode = "write".to_owned();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "refused", "the agent left its box's cgroup");
}

/// `[policy] box_pids_max` reaches the task's box: written to its cgroup
/// where the pids controller is enabled beside the daemon (a fork past the
/// limit fails), and where it is not, the `started` event says so and why.
#[tokio::test]
async fn a_box_limit_holds_or_the_started_event_says_why_not() {
    let env0 = Env::new(&[]);
    let out = env0.file("forks");
    // Twenty sleepers at once: past a limit of 16 some forks fail.
    let script = format!(
        "n=0; for i in $(seq 20); do if sleep 2 & then n=$((n+1)); fi; done; echo $n > '{}'; kill $(jobs -p) 2>/dev/null; true",
        out.display()
    );
    let mut env = env0;
    env.set_agents(&[("forker", &["sh", &script, "report", "success", "forked"])]);
    let p = env.project.path().to_path_buf();
    let config = std::fs::read_to_string(p.join(".caesar/config.toml")).unwrap();
    std::fs::write(p.join(".caesar/config.toml"), format!("[policy]\nbox_pids_max = 16\n\n{config}")).unwrap();
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("forker", "fork twenty");
    req.mode = "write".to_owned();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let events = std::fs::read_to_string(std::path::Path::new(&t.task_dir).join("events.jsonl")).unwrap();
    let forked: u32 = std::fs::read_to_string(&out).unwrap().trim().parse().unwrap();
    if events.contains("limits pids.max 16") {
        assert!(forked < 20, "the box's pids.max let {forked} sleepers start");
    } else {
        assert!(
            events.contains("pids controller(s) not enabled") || events.contains("no delegated cgroup v2"),
            "the started event says why the limit is not applied: {events}"
        );
    }
}

/// Issue 33: the box's first process is forked straight into the box's
/// cgroup (`clone3` with `CLONE_INTO_CGROUP`): the launcher itself never
/// moves in nor out, each move of a live process being an RCU grace period
/// in the kernel (10 to 30 ms on a loaded host), twice a task. The agent is
/// in its box's cgroup; its launcher is not.
#[tokio::test]
async fn the_agent_is_born_in_its_box_cgroup_and_its_launcher_never_moves() {
    if caesard::sandbox::cgroup::delegated().is_none() || !caesard::sandbox::pid_ns::works() {
        eprintln!("skipped: no delegated cgroup v2, or no PID namespace, here");
        return;
    }
    let env0 = Env::new(&[]);
    let (out, gate) = (env0.file("agent-cgroup"), env0.file("gate"));
    let record =
        format!("grep '^0::' /proc/self/cgroup > '{}.tmp' && mv '{o}.tmp' '{o}'", out.display(), o = out.display());
    let mut env = env0;
    let gate_s = gate.display().to_string();
    env.set_agents(&[("born", &["sh", &record, "wait-file", &gate_s, "report", "success", "done"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("born", "say where you were born");
    // Write mode: the agent writes beside the test's files, as the tests above.
    req.mode = "write".to_owned();
    let d = c.delegate(req).await.unwrap().into_inner();
    let deadline = std::time::Instant::now() + LONG;
    while !out.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let agent_cgroup = std::fs::read_to_string(&out).expect("the agent recorded its cgroup");
    // The launcher is the supervisor's child, named in agent.json.
    let started = std::fs::read(caesar_tests::daemon_files(&d.task_dir).join("agent.json")).unwrap();
    let launcher = serde_json::from_slice::<serde_json::Value>(&started).unwrap()["pid"].as_u64().unwrap();
    let launcher_cgroup = std::fs::read_to_string(format!("/proc/{launcher}/cgroup")).unwrap();
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{} {}", t.error, t.report_json);
    let box_name = format!("caesar-box-{launcher}");
    assert!(agent_cgroup.trim().ends_with(&box_name), "the agent is in its box's cgroup: {agent_cgroup}");
    let own = launcher_cgroup.lines().find(|l| l.starts_with("0::")).unwrap_or_default();
    assert!(!own.contains("caesar-box-"), "the launcher moved itself into a box's cgroup: {own}");
}

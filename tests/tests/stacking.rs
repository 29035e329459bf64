//! Stacked tasks (issue 32, item 1) against a real caesard and scripted
//! agents: a task that depends on another starts on its result, waits
//! (phase `waiting`) until it ends, cannot be applied before it, survives a
//! daemon SIGKILL in the middle of a chain with every task started once,
//! is cancelled when its parent fails (or runs, when asked), and bad stacks
//! are refused by name.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(60);

async fn status(c: &mut Client, id: &str) -> pb::TaskView {
    c.status(pb::StatusRequest { task_id: id.to_owned() }).await.unwrap().into_inner()
}

/// A write task of `agent`, stacked on `after`.
fn stacked(env: &Env, agent: &str, after: &[&str]) -> pb::DelegateRequest {
    pb::DelegateRequest {
        mode: "write".to_owned(),
        depends_on: after.iter().map(|s| s.to_string()).collect(),
        ..env.delegate_request(agent, &format!("the work of {agent}"))
    }
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0)
}

/// An Env whose project is a repository with one commit.
fn repo_env(agents: &[(&str, &[&str])]) -> Env {
    let env = Env::new(agents);
    std::fs::write(env.project.path().join("README"), "base\n").unwrap();
    commit_base(env.project.path());
    env
}

/// Gives the project's worktrees the `setup` command, committed.
fn with_setup(env: &Env, setup: &str) {
    let p = env.project.path();
    let config = std::fs::read_to_string(p.join(".caesar/config.toml")).unwrap();
    std::fs::write(p.join(".caesar/config.toml"), format!("[worktree]\nsetup = [{setup:?}]\n\n{config}")).unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "setup"]);
}

#[tokio::test]
async fn a_child_starts_on_its_parents_result_and_applies_only_after_it() {
    let probe = tempfile::tempdir().unwrap();
    let go = probe.path().join("go_a");
    let saw = probe.path().join("b_saw");
    let go_s = go.display().to_string();
    let saw_cmd = format!("cat x > {} 2>&1 || echo missing > {}", saw.display(), saw.display());
    let env = repo_env(&[
        ("a", &["wait-file", &go_s, "write", "x", "made by a\n", "report", "success", "a wrote x"]),
        ("b", &["sh", &saw_cmd, "write", "y", "made by b\n", "report", "success", "b wrote y"]),
    ]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    // B waits for A, and says so.
    let v = status(&mut c, &b).await;
    assert_eq!(
        (v.status(), v.phase(), v.parents.clone()),
        (pb::TaskStatus::Pending, pb::Phase::Waiting, vec![a.clone()])
    );
    let out = env.caesar(&["status", &b]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("builds on: {a}, waiting for them to end")), "{text}");
    let out = env.caesar(&["--json", "status", &b]);
    let j = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((j["phase"].as_str(), j["parents"][0].as_str()), (Some("waiting"), Some(a.as_str())), "{j}");

    std::fs::write(&go, "").unwrap();
    let tb = await_one(&mut c, &b, LONG).await;
    assert_eq!(tb.status(), pb::TaskStatus::Succeeded, "{tb:?}");
    assert_eq!(std::fs::read_to_string(&saw).unwrap(), "made by a\n", "B started on A's result");
    // B's diff is its own change only: its base holds A's.
    let d = c.diff(pb::DiffRequest { task_id: b.clone() }).await.unwrap().into_inner();
    assert_eq!(d.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["y"]);

    // Applying B before A is refused, naming A; nothing is written.
    let e = c.apply(pb::ApplyRequest { task_id: b.clone() }).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains(&format!("builds on task {a}, not applied yet: apply {a} first")), "{}", e.message());
    assert!(!env.project.path().join("y").exists() && !env.project.path().join("x").exists());
    // A, then B: B brings only y.
    let ra = c.apply(pb::ApplyRequest { task_id: a.clone() }).await.unwrap().into_inner();
    assert!(ra.applied, "{ra:?}");
    let rb = c.apply(pb::ApplyRequest { task_id: b.clone() }).await.unwrap().into_inner();
    assert!(rb.applied, "{rb:?}");
    assert_eq!(rb.files, ["y"]);
    assert_eq!(std::fs::read_to_string(env.project.path().join("x")).unwrap(), "made by a\n");
    assert_eq!(std::fs::read_to_string(env.project.path().join("y")).unwrap(), "made by b\n");
}

#[tokio::test]
async fn apply_chain_applies_the_parents_then_the_child() {
    let env = repo_env(&[
        ("a", &["write", "x", "one\n", "report", "success", "a"]),
        ("b", &["sh", "echo two >> x", "report", "success", "b"]),
    ]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &b, LONG).await.status(), pb::TaskStatus::Succeeded);
    let out = env.caesar(&["apply", "--chain", &b]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(std::fs::read_to_string(env.project.path().join("x")).unwrap(), "one\ntwo\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (ia, ib) = (stdout.find(&format!("{a}: applied")).unwrap(), stdout.find(&format!("{b}: applied")).unwrap());
    assert!(ia < ib, "{stdout}");
}

#[tokio::test]
async fn a_chain_survives_a_daemon_sigkill_with_each_task_started_once() {
    let probe = tempfile::tempdir().unwrap();
    let p = |n: &str| probe.path().join(n).display().to_string();
    let (sa, sb, sc, go) = (p("starts_a"), p("starts_b"), p("starts_c"), p("go_b"));
    let saw = p("c_saw");
    let c_cmd = format!("cat x y > {saw}");
    let mut env = repo_env(&[
        ("a", &["stamp", &sa, "write", "x", "x\n", "report", "success", "a"]),
        ("b", &["stamp", &sb, "wait-file", &go, "write", "y", "y\n", "report", "success", "b"]),
        ("c", &["stamp", &sc, "sh", &c_cmd, "report", "success", "c"]),
    ]);
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    let cc = c.delegate(stacked(&env, "c", &[&b])).await.unwrap().into_inner().task_id;
    let started_b = std::path::PathBuf::from(&sb);
    assert!(eventually(LONG, || lines(&started_b) == 1).await, "B starts once A ended");
    assert_eq!(status(&mut c, &cc).await.phase(), pb::Phase::Waiting);
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    std::fs::write(&go, "").unwrap();
    let tc = await_one(&mut c, &cc, LONG).await;
    assert_eq!(tc.status(), pb::TaskStatus::Succeeded, "{tc:?}");
    assert_eq!(std::fs::read_to_string(&saw).unwrap(), "x\ny\n", "C started on A's and B's results");
    for (task, starts) in [(&a, &sa), (&b, &sb), (&cc, &sc)] {
        assert_eq!(lines(std::path::Path::new(starts)), 1, "task {task} started exactly once");
        assert_eq!(status(&mut c, task).await.status(), pb::TaskStatus::Succeeded);
    }
}

#[tokio::test]
async fn a_failed_parent_cancels_its_dependents_unless_they_run_anyway() {
    let probe = tempfile::tempdir().unwrap();
    let starts = probe.path().join("starts_b");
    let s = starts.display().to_string();
    let mut env = repo_env(&[
        ("a", &["exit", "3"]),
        ("b", &["stamp", &s, "report", "success", "b"]),
        ("r", &["write", "r", "ran\n", "report", "success", "r"]),
    ]);
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    // A grandchild follows its cancelled parent.
    let g = c.delegate(stacked(&env, "b", &[&b])).await.unwrap().into_inner().task_id;
    let r = c
        .delegate(pb::DelegateRequest { on_parent_failure: "run".to_owned(), ..stacked(&env, "r", &[&a]) })
        .await
        .unwrap()
        .into_inner()
        .task_id;
    let tb = await_one(&mut c, &b, LONG).await;
    assert_eq!(tb.status(), pb::TaskStatus::Cancelled, "{tb:?}");
    assert!(tb.error.contains(&format!("its parent {a} failed (on_parent_failure = cancel)")), "{}", tb.error);
    let tg = await_one(&mut c, &g, LONG).await;
    assert_eq!(tg.status(), pb::TaskStatus::Cancelled);
    assert!(tg.error.contains(&format!("its parent {b} cancelled")), "{}", tg.error);
    assert_eq!(lines(&starts), 0, "a cancelled dependent never started");
    let tr = await_one(&mut c, &r, LONG).await;
    assert_eq!(tr.status(), pb::TaskStatus::Succeeded, "on_parent_failure = run runs it: {tr:?}");
}

#[tokio::test]
async fn bad_stacks_are_refused_by_name_and_store_nothing() {
    let mut env = repo_env(&[("a", &["report", "success", "a"])]);
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    let before = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();

    let e = c.delegate(stacked(&env, "a", &["t_nosuchtask"])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("names task t_nosuchtask, which caesar does not know"), "{}", e.message());

    let e = c.delegate(stacked(&env, "a", &["../etc"])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("which is not a task id"), "{}", e.message());

    let e = c
        .delegate(pb::DelegateRequest { on_parent_failure: "retry".to_owned(), ..stacked(&env, "a", &[&a]) })
        .await
        .unwrap_err();
    assert!(e.message().contains("use `cancel` (the default) or `run`"), "{}", e.message());

    let e = c
        .delegate(pb::DelegateRequest { mode: "read-only".to_owned(), ..stacked(&env, "a", &[&a]) })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("use mode \"write\" or isolation \"worktree\""), "{}", e.message());

    let many: Vec<String> = (0..17).map(|i| format!("t_{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = c.delegate(stacked(&env, "a", &many)).await.unwrap_err();
    assert!(e.message().contains("more than 16"), "{}", e.message());

    // A task of another repository.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join(".caesar")).unwrap();
    std::fs::copy(env.project.path().join(".caesar/config.toml"), other.path().join(".caesar/config.toml")).unwrap();
    commit_base(other.path());
    let theirs = c
        .delegate(pb::DelegateRequest { workspace: other.path().display().to_string(), ..stacked(&env, "a", &[]) })
        .await
        .unwrap()
        .into_inner()
        .task_id;
    let e = c.delegate(stacked(&env, "a", &[&theirs])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("another repository than this task's"), "{}", e.message());

    // The CLI's --after reaches the same checks.
    let out = env.caesar(&["run", "--detach", "--agent", "a", "--mode", "write", "--after", "t_nope,t_nope2", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("t_nope"), "{}", String::from_utf8_lossy(&out.stderr));

    let after = c.list_tasks(pb::ListTasksRequest { limit: 50, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(after.tasks.len(), before.tasks.len() + 1, "only the other repository's task was stored");
}

#[tokio::test]
async fn a_parent_that_ends_while_no_daemon_runs_releases_its_dependent_once_after_restart() {
    let probe = tempfile::tempdir().unwrap();
    let p = |n: &str| probe.path().join(n).display().to_string();
    let (sb, sc, go) = (p("starts_b"), p("starts_c"), p("go_b"));
    let mut env = repo_env(&[
        ("b", &["stamp", &sb, "wait-file", &go, "write", "y", "y\n", "report", "success", "b"]),
        ("c", &["stamp", &sc, "sh", "test -f y", "report", "success", "c"]),
    ]);
    let mut c = env.start_daemon().await;
    let b = c.delegate(stacked(&env, "b", &[])).await.unwrap().into_inner().task_id;
    let cc = c.delegate(stacked(&env, "c", &[&b])).await.unwrap().into_inner().task_id;
    let started_b = std::path::PathBuf::from(&sb);
    assert!(eventually(LONG, || lines(&started_b) == 1).await);
    let task_dir = status(&mut c, &b).await.task_dir;
    env.kill_daemons().await;
    // B ends with no daemon to see it: its exit record is all there is.
    std::fs::write(&go, "").unwrap();
    let exit = std::path::PathBuf::from(format!("{task_dir}.daemon/exit.json"));
    assert!(eventually(LONG, || exit.exists()).await, "{}", exit.display());
    let mut c = env.start_daemon().await;
    let tc = await_one(&mut c, &cc, LONG).await;
    assert_eq!(tc.status(), pb::TaskStatus::Succeeded, "{tc:?}");
    assert_eq!((lines(&started_b), lines(std::path::Path::new(&sc))), (1, 1), "each started once");
}

#[tokio::test]
async fn a_task_builds_only_on_tasks_it_delegated() {
    let probe = tempfile::tempdir().unwrap();
    let gate = probe.path().join("gate").display().to_string();
    let mut env = repo_env(&[]);
    let relay = env.file("relay.sock");
    let relay_s = relay.display().to_string();
    env.set_agents(&[("outer", &["relay", &relay_s, "wait-file", &gate]), ("a", &["report", "success", "a"])]);
    git(env.project.path(), &["add", "-A"]);
    git(env.project.path(), &["commit", "-q", "-m", "agents"]);
    let mut c = env.start_daemon().await;
    let other = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    // A channel task: its agent's environment names the daemon's socket, which the relay dials.
    let outer = c
        .delegate(pb::DelegateRequest { channel: true, ..stacked(&env, "outer", &[]) })
        .await
        .unwrap()
        .into_inner()
        .task_id;
    assert!(eventually(LONG, || relay.exists()).await);
    let mut inside = caesar_proto::client::connect_at(&relay).await.unwrap().0;
    let e = inside.delegate(stacked(&env, "a", &[&other])).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{}", e.message());
    assert!(
        e.message().contains(&format!("names task {other}, which task {outer} did not delegate")),
        "{}",
        e.message()
    );
    std::fs::write(&gate, "").unwrap();
}

/// Issue 31 meets issue 32: a parent continued after its dependents took
/// its result flags them stale (naming its new commit), and a dependent
/// still waiting (on another parent) starts on the continuation's result.
#[tokio::test]
async fn a_continued_parent_stales_what_took_it_and_feeds_what_waits() {
    let probe = tempfile::tempdir().unwrap();
    let go = probe.path().join("go_g");
    let saw = probe.path().join("c_saw");
    let go_s = go.display().to_string();
    let saw_cmd = format!("cat z > {} 2>&1 || echo missing > {}", saw.display(), saw.display());
    let env = repo_env(&[
        ("a", &["write", "x", "one\n", "report", "success", "a wrote x"]),
        ("a2", &["write", "z", "more\n", "report", "success", "a2 wrote z"]),
        ("b", &["write", "y", "b\n", "report", "success", "b wrote y"]),
        ("g", &["wait-file", &go_s, "write", "g", "g\n", "report", "success", "g wrote g"]),
        ("c", &["sh", &saw_cmd, "report", "success", "c looked"]),
    ]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    let g = c.delegate(stacked(&env, "g", &[])).await.unwrap().into_inner().task_id;
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    let cc = c.delegate(stacked(&env, "c", &[&a, &g])).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &b, LONG).await.status(), pb::TaskStatus::Succeeded);
    // A is continued by another agent, which adds z.
    let more =
        pb::DelegateRequest { continue_from: a.clone(), agent: "a2".to_owned(), ..env.delegate_request("", "add z") };
    let a2 = c.delegate(more).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &a2, LONG).await.status(), pb::TaskStatus::Succeeded);
    let mut stale = String::new();
    for _ in 0..100 {
        stale = status(&mut c, &b).await.stale;
        if !stale.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        stale.starts_with(&format!("{a} ")),
        "B took A's first result: flagged stale by A's continuation: {stale:?}"
    );
    // C still waited for G: it starts on A's continuation.
    std::fs::write(&go, "").unwrap();
    assert_eq!(await_one(&mut c, &cc, LONG).await.status(), pb::TaskStatus::Succeeded);
    assert_eq!(std::fs::read_to_string(&saw).unwrap(), "more\n", "C started on the continuation's result");
}

/// Issue 32: a dependent released on its parent's result but whose agent
/// has not started (here: held in its worktree's `setup`) when the parent
/// is continued takes the continuation's result instead of being flagged
/// stale: its worktree is made again on the new result before it starts.
#[tokio::test]
async fn a_dependent_not_started_yet_takes_a_continued_parents_new_result() {
    let probe = tempfile::tempdir().unwrap();
    let (held, go, saw) = (probe.path().join("b_held"), probe.path().join("go"), probe.path().join("b_saw"));
    let saw_cmd = format!("cat z > {} 2>&1 || echo missing > {}", saw.display(), saw.display());
    let env = repo_env(&[
        ("a", &["write", "x", "one\n", "report", "success", "a wrote x"]),
        ("a2", &["write", "z", "more\n", "report", "success", "a2 wrote z"]),
        ("b", &["sh", &saw_cmd, "write", "y", "b\n", "report", "success", "b looked"]),
    ]);
    // Setup holds a worktree made on A's result (it has x) until `go`.
    let setup =
        format!("if [ -f x ]; then touch {}; while [ ! -f {} ]; do sleep 0.05; done; fi", held.display(), go.display());
    with_setup(&env, &setup);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &a, LONG).await.status(), pb::TaskStatus::Succeeded);
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || held.exists()).await, "B is prepared on A's result");
    assert_eq!(status(&mut c, &b).await.phase(), pb::Phase::Preparing, "B's agent has not started");
    // A is continued while B is still held: A's result moves to x and z.
    let more =
        pb::DelegateRequest { continue_from: a.clone(), agent: "a2".to_owned(), ..env.delegate_request("", "add z") };
    let a2 = c.delegate(more).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &a2, LONG).await.status(), pb::TaskStatus::Succeeded);
    // The daemon records that B is made again (its durable mark) before B may go on.
    let db = rusqlite::Connection::open(env.paths.state_dir.join("caesar.db")).unwrap();
    let marked = || {
        db.query_row("SELECT COUNT(*) FROM task_recut WHERE child = ?1", [&b], |r| r.get::<_, i64>(0)).unwrap_or(0) == 1
    };
    let rebased = eventually(Duration::from_secs(20), marked).await;
    std::fs::write(&go, "").unwrap();
    let tb = await_one(&mut c, &b, LONG).await;
    assert_eq!(tb.status(), pb::TaskStatus::Succeeded, "{tb:?}");
    assert_eq!(std::fs::read_to_string(&saw).unwrap(), "more\n", "B started on the continuation's result");
    assert_eq!(tb.stale, "", "B took the new result: it is not stale");
    assert!(rebased, "B was marked to be made again");
    let d = c.diff(pb::DiffRequest { task_id: b.clone() }).await.unwrap().into_inner();
    assert_eq!(d.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["y"], "B's base holds x and z");
}

/// Issue 32: the daemon SIGKILLed after it decided that a dependent must be
/// made again on its continued parent's new result, and before it made it
/// (the first preparation, on the old result, is still held in `setup`).
/// The restarted daemon makes the worktree on the new result and starts the
/// dependent's agent once.
#[tokio::test]
async fn a_rebase_decided_before_a_sigkill_is_made_by_the_next_daemon() {
    let probe = tempfile::tempdir().unwrap();
    let p = |n: &str| probe.path().join(n);
    let (held, go, saw, starts) = (p("b_held"), p("go"), p("b_saw"), p("b_starts"));
    let (saw_s, starts_s) = (saw.display().to_string(), starts.display().to_string());
    let saw_cmd = format!("cat z > {saw_s} 2>&1 || echo missing > {saw_s}");
    let env = repo_env(&[
        ("a", &["write", "x", "one\n", "report", "success", "a wrote x"]),
        ("a2", &["write", "z", "more\n", "report", "success", "a2 wrote z"]),
        ("b", &["stamp", &starts_s, "sh", &saw_cmd, "write", "y", "b\n", "report", "success", "b looked"]),
    ]);
    // Each setup on a base holding A's result counts itself, then waits for `go`.
    let setup = format!(
        "if [ -f x ]; then echo . >> {}; while [ ! -f {} ]; do sleep 0.05; done; fi",
        held.display(),
        go.display()
    );
    with_setup(&env, &setup);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let a = c.delegate(stacked(&env, "a", &[])).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &a, LONG).await.status(), pb::TaskStatus::Succeeded);
    let b = c.delegate(stacked(&env, "b", &[&a])).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || lines(&held) == 1).await, "B is being prepared on A's result");
    let more =
        pb::DelegateRequest { continue_from: a.clone(), agent: "a2".to_owned(), ..env.delegate_request("", "add z") };
    let a2 = c.delegate(more).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &a2, LONG).await.status(), pb::TaskStatus::Succeeded);
    let db = env.paths.state_dir.join("caesar.db");
    let marked = || {
        rusqlite::Connection::open(&db)
            .and_then(|db| {
                db.query_row("SELECT COUNT(*) FROM task_recut WHERE child = ?1", [&b], |r| r.get::<_, i64>(0))
            })
            .unwrap_or(0)
            == 1
    };
    assert!(eventually(Duration::from_secs(20), marked).await, "B is marked to be made again");
    assert_eq!(lines(&held), 1, "the re-cut waits for the preparation in flight, held in its setup");
    env.kill_daemons().await;

    let mut c = env.start_daemon().await;
    std::fs::write(&go, "").unwrap();
    let tb = await_one(&mut c, &b, LONG).await;
    assert_eq!(tb.status(), pb::TaskStatus::Succeeded, "{tb:?}");
    assert_eq!(std::fs::read_to_string(&saw).unwrap(), "more\n", "B started on the continuation's result");
    assert_eq!(lines(&starts), 1, "B's agent started once");
    assert!(lines(&held) >= 2, "the restarted daemon prepared B again");
    assert_eq!(tb.stale, "", "B took the new result: it is not stale");
    assert!(!marked(), "the mark is gone once B is made again");
    let d = c.diff(pb::DiffRequest { task_id: b.clone() }).await.unwrap().into_inner();
    assert_eq!(d.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["y"], "B's base holds x and z");
}

//! The `caesar` CLI tells the truth (issue 30): its exit codes follow the
//! README's table, a stopped task's exit status is not shown as a success,
//! `gc` keeps no decided work and `--older-than 0s` means now.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Declares `agents` as `(id, bin, args)` in the project's config.
fn declare(env: &Env, agents: &[(&str, &str, &[&str])]) {
    let mut config = String::new();
    for (id, bin, args) in agents {
        config.push_str(&format!(
            "[[agent]]\nid = {id:?}\nbin = {bin:?}\nargs = {}\n\n",
            serde_json::to_string(args).unwrap()
        ));
    }
    std::fs::write(env.project.path().join(".caesar/config.toml"), config).unwrap();
}

fn detach(env: &Env, agent: &str) -> String {
    let o = env.caesar(&["--json", "run", "--detach", "--agent", agent, "x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn await_timing_out_exits_5_and_a_cancelled_task_shows_no_exit_code_0() {
    let env = Env::new(&[]);
    // An agent that ends gracefully, with 0, when it is told to stop, as node CLIs do.
    let graceful = "trap 'exit 0' TERM; echo working; while :; do sleep 0.1; done";
    declare(&env, &[("graceful", "/bin/sh", &["-c", graceful])]);
    let id = detach(&env, "graceful");

    let o = env.caesar(&["await", "--timeout", "1s", &id]);
    assert_eq!(o.status.code(), Some(5), "README: 5 timed out\n{}{}", stdout(&o), stderr(&o));
    let o = env.caesar(&["--json", "await", "--timeout", "1s", &id]);
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    assert_eq!(json(stdout(&o).trim())["tasks"][0]["status"], "running");

    let o = env.caesar(&["cancel", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = env.caesar(&["await", "--timeout", "30s", &id]);
    assert_eq!(o.status.code(), Some(4), "README: 4 cancelled\n{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("cancelled"), "{out}");
    assert!(!out.contains("exit code: 0"), "a cancelled task is no success:\n{out}");
    assert!(out.contains("stopped by caesar (cancelled)"), "{out}");
    let o = env.caesar(&["status", &id]);
    assert!(!stdout(&o).contains("exit code: 0"), "{}", stdout(&o));
}

#[tokio::test]
async fn mcp_install_for_an_unknown_host_is_bad_input() {
    let env = Env::new(&[]);
    let o = env.caesar(&["mcp", "install", "vim"]);
    assert_eq!(o.status.code(), Some(2), "README: 2 bad input\n{}", stderr(&o));
    assert!(stderr(&o).contains("unknown MCP client `vim`: use one of claude"), "{}", stderr(&o));
    let o = env.caesar(&["--json", "mcp", "install", "vim"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json(stdout(&o).trim())["exit_code"], 2);
}

fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/config.local.toml\n").unwrap();
    commit_base(p);
}

fn gc(env: &Env, args: &[&str]) -> serde_json::Value {
    let o = env.caesar(&[&["--json", "gc"], args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    json(stdout(&o).trim())
}

fn caesar_branches(env: &Env) -> Vec<String> {
    git(env.project.path(), &["branch", "--list", "caesar/*", "--format=%(refname:short)"])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn gc_removes_decided_work_at_once_and_older_than_0s_means_now() {
    let env = Env::new(&[
        ("writer", &["write", "a.txt", "a\n", "report", "success", "wrote a"]),
        ("looker", &["report", "success", "looked"]),
    ]);
    repo(&env);
    let run = |agent: &str| {
        let o = env.caesar(&["--json", "run", "--agent", agent, "--mode", "write", "--isolation", "worktree", "x"]);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned()
    };

    // Discarded: the next gc, at its default age, takes the worktree and the branch.
    let written = run("writer");
    assert_eq!(caesar_branches(&env).len(), 1, "a write task has its branch");
    let o = env.caesar(&["discard", &written]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = gc(&env, &[]);
    let item = &v["items"][0];
    assert_eq!(item["task_id"], written.as_str(), "{v}");
    assert_eq!(item["action"], "removed", "a discarded task's worktree goes at the next gc: {v}");
    assert_eq!(caesar_branches(&env), Vec::<String>::new(), "and its branch");

    // Undecided and unchanged: `--older-than 0s` means now, not the default 24 h.
    let looked = run("looker");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let v = gc(&env, &["--older-than", "0s"]);
    let item = v["items"].as_array().unwrap().iter().find(|i| i["task_id"] == looked.as_str()).cloned();
    assert_eq!(item.unwrap()["action"], "removed", "{v}");
    assert_eq!(caesar_branches(&env), Vec::<String>::new());
}

#[tokio::test]
async fn watch_on_a_short_terminal_shows_the_running_task_and_counts_the_rest() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[
        ("quick", &["say", "done already", "report", "success", "ok"]),
        ("gated", &["say", "still at it", "wait-file", &g, "report", "success", "ok"]),
    ]);
    for i in 0..8 {
        let o = env.caesar(&["run", "--agent", "quick", &format!("quick job {i}")]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let running = detach(&env, "gated");
    // A 12-row terminal: `script` gives caesar watch a pseudo-terminal of that size.
    let o = std::process::Command::new("script")
        .args(["-qec", &format!("stty rows 12 cols 100; timeout 2 {} watch", caesar_bin().display()), "/dev/null"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    std::fs::write(&gate, "go").unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    // The last whole frame (`timeout` may stop caesar while it writes one).
    let frame = out.split("\x1b[2J\x1b[H").filter(|f| f.ends_with('\n')).last().unwrap_or_default();
    let lines: Vec<&str> = frame.lines().collect();
    assert!(lines.len() < 12, "a frame of {} lines on a 12-row terminal:\n{frame}", lines.len());
    assert!(lines[0].starts_with("TASK"), "{frame}");
    assert!(lines[1].starts_with(&running), "the running task first: {frame}");
    assert!(lines.last().unwrap().contains("finished not shown"), "the rest is counted: {frame}");
}

#[tokio::test]
async fn status_shows_the_conflict_radar() {
    let env = Env::new(&[
        ("w1", &["write", "README.md", "hello from w1\n", "report", "success", "w1"]),
        ("w2", &["write", "README.md", "hello from w2\n", "report", "success", "w2"]),
    ]);
    repo(&env);
    let mut ids = Vec::new();
    for agent in ["w1", "w2"] {
        let o = env.caesar(&["--json", "run", "--agent", agent, "--mode", "write", "--isolation", "worktree", "x"]);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        ids.push(json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned());
    }
    // The background radar reads the finished tasks' worktrees soon after they end.
    let mut out = String::new();
    let seen = eventually(Duration::from_secs(30), || {
        out = stdout(&env.caesar(&["status", &ids[0]]));
        out.contains("conflict radar: overlaps with other work")
    })
    .await;
    assert!(seen, "{out}");
    assert!(out.contains(&format!("{}: README.md (same lines: README.md)", ids[1])), "{out}");
    let o = env.caesar(&["--json", "status", &ids[0]]);
    let v = json(stdout(&o).trim());
    assert_eq!(v["conflicts_with"][0]["task_id"], ids[1].as_str(), "{v}");
}

#[tokio::test]
async fn agents_describe_codex_shows_read_only_protections_under_read_only() {
    let env = Env::new(&[]);
    let o = env.caesar(&["--json", "agents", "describe", "codex"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(stdout(&o).trim());
    let (read_only, write) =
        (v["protections"]["read-only"].as_str().unwrap(), v["protections"]["write"].as_str().unwrap());
    assert!(
        !read_only.contains("writes confined to its worktree"),
        "the write mode's rules under read-only: {read_only}"
    );
    if write.starts_with("landlock") {
        assert!(read_only.contains("codex's own read-only sandbox"), "{read_only}");
    }
}

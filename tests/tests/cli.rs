//! The real `caesar` binary: auto-start, run, exit codes, --json, version
//! handshake.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn run_autostarts_the_daemon_streams_events_and_prints_the_report() {
    let env = Env::new(&[
        ("ok", &["say", "working on it", "report", "success", "it is done"]),
        ("bad", &["say", "oops", "exit", "2"]),
    ]);
    let o = env.caesar(&["run", "--agent", "ok", "do the thing"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("working on it"), "{out}");
    assert!(out.contains("started:"), "{out}");
    assert!(out.contains("it is done"), "{out}");
    assert!(out.contains("succeeded, report success"), "{out}");

    let o = env.caesar(&["run", "--agent", "bad", "fail please"]);
    assert_eq!(o.status.code(), Some(1), "a failed task exits 1");
    assert!(stdout(&o).contains("failed"));

    let o = env.caesar(&["--json", "run", "--agent", "ok", "json please"]);
    assert!(o.status.success());
    let v = json(stdout(&o).trim());
    assert_eq!(v["status"], "succeeded");
    assert_eq!(v["report"]["summary"], "it is done");
    assert_eq!(v["last_event"]["type"], "finished");

    let o = env.caesar(&["--json", "ps", "--all"]);
    let v = json(stdout(&o).trim());
    assert_eq!(v["tasks"].as_array().unwrap().len(), 3);

    let id = v["tasks"][0]["task_id"].as_str().unwrap().to_owned();
    let o = env.caesar(&["--json", "status", &id]);
    assert_eq!(json(stdout(&o).trim())["task_id"], id.as_str());
    let o = env.caesar(&["--json", "logs", &id]);
    let logs = json(stdout(&o).trim());
    assert!(logs["total_events"].as_u64().unwrap() >= 3);
    let o = env.caesar(&["logs", "--raw", &id]);
    assert!(stdout(&o).contains("working on it"));
    let o = env.caesar(&["--json", "cancel", &id]);
    assert_eq!(json(stdout(&o).trim())["cancelled"], false);
}

#[tokio::test]
async fn bad_input_exits_2_with_the_fix_and_json_stays_json() {
    let env = Env::new(&[("ok", &["report", "success", "fine"])]);
    let o = env.caesar(&["run", "--agent", "ghost", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown agent `ghost`"), "{}", stderr(&o));
    let o = env.caesar(&["--json", "status", "t_123456789abc"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(json(stdout(&o).trim())["error"].as_str().unwrap().contains("no task"));
    assert!(stderr(&o).is_empty(), "--json prints nothing but JSON");
    let o = env.caesar(&["run", "--agent", "ok", "--timeout", "10 parsecs", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unit"), "{}", stderr(&o));
}

#[tokio::test]
async fn two_clients_starting_at_once_end_with_one_daemon() {
    let env = Env::new(&[]);
    let spawn = || {
        Command::new(caesar_bin())
            .args(["--json", "daemon", "start"])
            .current_dir(env.project.path())
            .envs(env.envs())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success(), "{} / {}", stderr(&a), stderr(&b));
    let (pa, pb) = (json(stdout(&a).trim())["pid"].as_u64().unwrap(), json(stdout(&b).trim())["pid"].as_u64().unwrap());
    assert_eq!(pa, pb, "both clients talk to the same daemon");
    // And only one caesard of this installation is alive.
    let home = env.home.path().display().to_string();
    let count = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
                let cmd = std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default();
                cmd.starts_with(&caesard_bin().display().to_string())
                    && !cmd.contains("__supervise")
                    && String::from_utf8_lossy(&environ).contains(&format!("CAESAR_HOME={home}"))
            })
            .count()
    };
    assert!(eventually(Duration::from_secs(10), || count() == 1).await, "{} daemons", count());

    let o = env.caesar(&["daemon", "stop"]);
    assert!(o.status.success());
    let o = env.caesar(&["daemon", "status"]);
    assert_eq!(o.status.code(), Some(3));
}

async fn daemon_speaking(env: &mut Env, protocol: &str) -> caesar_proto::client::Client {
    env.spawn_daemon(&[("CAESAR_TEST_PROTOCOL", protocol)]);
    loop {
        if let Ok((c, ping)) = caesar_proto::client::connect(&env.paths).await {
            assert_eq!(ping.protocol.to_string(), protocol);
            break c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_older_daemon_is_replaced_with_its_task_in_flight_and_a_newer_one_refused() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[(
        "gated",
        &["say", "before the upgrade", "wait-file", &g, "report", "success", "after the upgrade"],
    )]);
    let mut old = daemon_speaking(&mut env, "0").await;
    let id = old.delegate(env.delegate_request("gated", "x")).await.unwrap().into_inner().task_id;
    let old_pid = env.daemon_pid().await;

    // A newer client replaces it; the task goes on under the new daemon.
    let o = env.caesar(&["--json", "daemon", "start"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(stdout(&o).trim());
    assert_eq!(v["protocol"], caesar_proto::PROTOCOL);
    assert_ne!(v["pid"].as_u64().unwrap() as u32, old_pid);
    std::fs::write(&gate, "go").unwrap();
    let o = env.caesar(&["--json", "await", &id]);
    let t = json(stdout(&o).trim());
    assert_eq!(t["tasks"][0]["status"], "succeeded", "{t}");
    assert_eq!(t["tasks"][0]["report"]["summary"], "after the upgrade");

    // A daemon newer than the client is never replaced by it.
    let o = env.caesar(&["daemon", "stop"]);
    assert!(o.status.success());
    let _newer = daemon_speaking(&mut env, "99").await;
    let o = env.caesar(&["ps"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("protocol 99") && stderr(&o).contains("upgrade caesar"), "{}", stderr(&o));
}

#[tokio::test]
async fn watch_prints_a_line_per_event_through_a_pipe_and_json_once() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[(
        "gated",
        &["say", "first words", "wait-file", &g, "say", "last words", "report", "success", "ok"],
    )]);
    let o = env.caesar(&["--json", "run", "--detach", "--agent", "gated", "x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned();

    let o = env.caesar(&["--json", "watch", "--once"]);
    let line = stdout(&o).lines().next().unwrap_or_default().to_owned();
    assert_eq!(json(&line)["task_id"], id.as_str(), "{line}");

    let mut watch = Command::new(caesar_bin())
        .args(["watch"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = watch.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(out).lines() {
            let line = line.unwrap_or_default();
            let done = line.contains("finished");
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::write(&gate, "go").unwrap();
    let lines = tokio::task::spawn_blocking(move || reader.join().unwrap()).await.unwrap();
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(lines.iter().any(|l| l.starts_with(&id) && l.contains("last words")), "{lines:?}");
    assert!(lines.last().unwrap().contains("finished: success"), "{lines:?}");
}

#[tokio::test]
async fn service_files_completions_man_page_and_daemon_log() {
    let env = Env::new(&[]);
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(caesar_bin())
        .args(["--json", "daemon", "install", "--dry-run"])
        .envs(env.envs())
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let steps = json(stdout(&o).trim())["steps"].to_string();
    assert!(steps.contains("caesard.service") && steps.contains("caesard.socket"), "{steps}");
    assert!(steps.contains(&format!("ExecStart={}", caesard_bin().display())), "{steps}");
    assert!(steps.contains("enable --now caesard.socket"), "{steps}");
    assert!(!home.path().join(".config/systemd").exists(), "--dry-run writes nothing");

    let o = env.caesar(&["completions", "bash"]);
    assert!(o.status.success() && stdout(&o).contains("caesar"));
    let o = env.caesar(&["man"]);
    assert!(stdout(&o).contains(".TH"), "a roff page");

    env.caesar(&["daemon", "start"]);
    let o = env.caesar(&["daemon", "logs", "-n", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("caesard ready"), "{}", stdout(&o));
}

#[tokio::test]
async fn watch_redraws_a_screen_on_a_terminal_with_colour_unless_no_color() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[("gated", &["say", "halfway through the parser", "wait-file", &g, "report", "success", "ok"])]);
    let o = env.caesar(&["--json", "run", "--detach", "--agent", "gated", "tidy the config parser"]);
    let id = json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned();
    // `script` gives caesar watch a pseudo-terminal; timeout ends it.
    let run = |no_color: bool| {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &format!("timeout 2 {} watch", caesar_bin().display()), "/dev/null"])
            .current_dir(env.project.path())
            .envs(env.envs())
            .env("TERM", "xterm");
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
    };
    let screen = run(false);
    assert!(screen.contains("\x1b[2J"), "the screen is redrawn: {screen:?}");
    assert!(screen.contains(&id) && screen.contains("TASK"), "{screen:?}");
    assert!(screen.contains("\x1b[32mrunning"), "colour on a terminal: {screen:?}");
    // Which task is which: its objective, and its last words.
    assert!(screen.contains("tidy the config parser"), "the objective under the row: {screen:?}");
    assert!(screen.contains("halfway through the parser"), "the last reply line: {screen:?}");
    let plain = run(true);
    assert!(plain.contains(&id) && !plain.contains("\x1b[32m"), "NO_COLOR: {plain:?}");
    std::fs::write(&gate, "go").unwrap();
}

#[tokio::test]
async fn an_upgrade_with_a_question_in_flight_loses_neither_the_question_nor_the_answer() {
    let mut env = Env::new(&[]);
    env.set_agents(&[("asker", &["mcp-ask", "keep going?", "report", "success", "asked and answered"])]);
    let mut old = daemon_speaking(&mut env, "0").await;
    let mut req = env.delegate_request("asker", "ask across an upgrade");
    req.channel = true;
    let id = old.delegate(req).await.unwrap().into_inner().task_id;
    let question = loop {
        let s = old.status(caesar_proto::pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
        if let Some(q) = s.pending_questions.first() {
            break q.question_id.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The newer client replaces the daemon; the agent's channel reconnects.
    let o = env.caesar(&["--json", "daemon", "start"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = env.caesar(&["--json", "status", &id]);
    let s = json(stdout(&o).trim());
    assert_eq!(s["pending_questions"][0]["question_id"], question.as_str(), "{s}");
    let o = env.caesar(&["answer", &id, &question, "yes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = env.caesar(&["--json", "await", "--timeout", "60s", &id]);
    let t = json(stdout(&o).trim());
    assert_eq!(t["tasks"][0]["status"], "succeeded", "{t}");
    let logs = env.caesar(&["--json", "logs", &id, "--limit", "100"]);
    assert!(stdout(&logs).contains("ask_orchestrator: Answer: yes"), "the answer reached the agent: {}", stdout(&logs));
}

#[tokio::test]
async fn run_without_an_agent_picks_the_configured_one_says_so_first_and_strips_escapes() {
    // Only [[agent]] entries come before the native providers, so whatever
    // is on this machine's PATH, the fake agent is the first choice.
    let env = Env::new(&[(
        "fake",
        &["say", "copying \x1b]52;c;ZWNobyBvd25lZA==\x07now\x1b[2J done", "report", "success", "summed up"],
    )]);
    let o = env.caesar(&["run", "--mode", "read-only", "Summarize what this repository does"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("task t_") && lines[0].ends_with(": agent fake, model the agent's default"), "{out}");
    assert!(lines[1].starts_with("  picked `fake`, the first agent installed and allowed"), "{out}");
    assert!(lines[2].starts_with("  mode read-only, isolation inplace, network on"), "{out}");
    assert_eq!(lines[3], format!("  works in {}", env.workspace()), "{out}");
    assert!(out.contains("started: fake ("), "the command line is for --verbose: {out}");
    assert!(!out.contains(&fake_agent().display().to_string()), "{out}");
    assert!(out.contains("copying now done"), "the agent's text, its escapes gone: {out:?}");
    assert!(!out.contains('\x1b'), "no escape reaches the terminal: {out:?}");
    assert!(!stderr(&o).contains("agent_choice"), "the choice is no warning: {}", stderr(&o));

    let o = env.caesar(&["run", "--verbose", "Summarize again"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("started: {}", fake_agent().display())), "{}", stdout(&o));
    // The raw log keeps the bytes as the agent wrote them.
    let id = stdout(&o).split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
    let raw = env.caesar(&["logs", "--raw", &id]);
    assert!(stdout(&raw).contains("\x1b]52;c;"), "--raw stays raw");
}

#[tokio::test]
async fn run_without_an_agent_and_none_installed_fails_at_once_naming_the_supported_ones() {
    let mut env = Env::new(&[]);
    // No [[agent]], no [bin], and a PATH where no agent CLI can be found.
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().display().to_string();
    env.start_daemon_with(&[("PATH", &path)]).await;
    let started = std::time::Instant::now();
    let o = Command::new(caesar_bin())
        .args(["run", "Summarize what this repository does"])
        .current_dir(env.project.path())
        .envs(env.envs())
        .env("PATH", &path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let err = stderr(&o);
    assert!(err.starts_with("caesar: no agent CLI is installed"), "{err}");
    assert!(err.contains("supported agents: claude, codex, gemini, opencode"), "{err}");
    assert!(err.contains("npm install -g @openai/codex"), "{err}");
    assert!(stdout(&o).is_empty(), "no task was started: {}", stdout(&o));
}

/// `caesar logs … | head` and `caesar man | head`: a reader that stops
/// reading ends caesar quietly with the shell's SIGPIPE status, as `cat`.
#[tokio::test]
async fn a_closed_stdout_ends_caesar_quietly() {
    let env = Env::new(&[("chatty", &["lines", "20000", "report", "success", "ok"])]);
    let o = env.caesar(&["--json", "run", "--agent", "chatty", "print many lines"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = json(stdout(&o).trim())["task_id"].as_str().unwrap().to_owned();
    for args in [vec!["logs", "--raw", id.as_str()], vec!["man"]] {
        // A pipe whose reading end is already closed: every write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(caesar_bin())
            .args(&args)
            .envs(env.envs())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(141), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

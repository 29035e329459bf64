//! The daemon dies and comes back: nothing is lost, nothing is left running.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn sigkill_mid_task_then_restart_collects_the_task_and_its_report() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[(
        "gated",
        &[
            "say",
            "before the restart",
            "wait-file",
            &g,
            "say",
            "after the restart",
            "lines",
            "2",
            "report",
            "success",
            "survived",
        ],
    )]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("gated", "x")).await.unwrap().into_inner().task_id;
    // Let the first line be read and stored.
    assert!(
        eventually(LONG, || {
            std::fs::read_to_string(env.paths.state_dir.join("tasks").join(&id).join("events.jsonl"))
                .is_ok_and(|s| s.contains("before the restart"))
        })
        .await
    );
    let old_pid = env.daemon_pid().await;
    env.kill_daemons().await;

    // While no daemon runs, the agent goes on and finishes.
    std::fs::write(&gate, "go").unwrap();
    let exit_file = caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(&id)).join("exit.json");
    assert!(eventually(LONG, || exit_file.exists()).await, "the supervisor records the exit with no daemon");

    let mut c = env.start_daemon().await;
    assert_ne!(env.daemon_pid().await, old_pid);
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded");
    assert_eq!((t.report_status.as_str(), t.report_source.as_str()), ("success", "file"));
    assert_eq!(json(&t.report_json)["summary"], "survived");

    let logs =
        c.logs(pb::LogsRequest { task_id: id.clone(), limit: 100, ..Default::default() }).await.unwrap().into_inner();
    let texts: Vec<String> = logs
        .events_json
        .iter()
        .map(|e| json(e))
        .filter(|e| e["type"] == "message")
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["before the restart", "after the restart", "line 0", "line 1"], "no event lost or doubled");
    let seqs: Vec<u64> = logs.events_json.iter().map(|e| json(e)["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    // The OACP file says the same as the store, whatever the kill interrupted.
    let file = std::fs::read_to_string(env.paths.state_dir.join("tasks").join(&id).join("events.jsonl")).unwrap();
    let file_seqs: Vec<u64> = file.lines().map(|l| json(l)["seq"].as_u64().unwrap()).collect();
    assert_eq!(file_seqs, seqs, "events.jsonl holds exactly the stored events");
}

/// Recovery runs while the socket is served (issue 19): a task that ended while no daemon ran,
/// leaving 100,000 lines to read, is still being drained when the restarted daemon first
/// answers; it then ends with every line, and a task delegated meanwhile waits for the queue
/// until recovery is done.
#[tokio::test]
async fn the_socket_is_served_while_recovery_runs() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[
        ("long", &["say", "before the restart", "wait-file", &g, "lines", "100000", "report", "success", "drained"]),
        ("quick", &["report", "success", "quick"]),
    ]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("long", "x")).await.unwrap().into_inner().task_id;
    let events = env.paths.state_dir.join("tasks").join(&id).join("events.jsonl");
    assert!(
        eventually(LONG, || std::fs::read_to_string(&events).is_ok_and(|s| s.contains("before the restart"))).await
    );
    env.kill_daemons().await;
    std::fs::write(&gate, "go").unwrap();
    let exit_file = caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(&id)).join("exit.json");
    assert!(eventually(LONG, || exit_file.exists()).await, "the supervisor records the exit with no daemon");

    let mut c = env.start_daemon().await;
    let first = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(first.status().as_str(), "running", "the daemon answers before recovery has drained the task");
    let quick = c.delegate(env.delegate_request("quick", "y")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    assert_eq!(json(&t.report_json)["summary"], "drained");
    // Every line once, whole and in order (none torn where a read's chunk ended).
    let texts: Vec<String> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(json)
        .filter(|e| e["type"] == "message")
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .skip(1)
        .collect();
    let torn: Vec<&String> =
        texts.iter().enumerate().filter(|(k, t)| **t != format!("line {k}")).map(|(_, t)| t).take(3).collect();
    assert!(texts.len() == 100_000 && torn.is_empty(), "{} lines, first wrong: {torn:?}", texts.len());
    let q = await_one(&mut c, &quick, LONG).await;
    assert_eq!(q.status().as_str(), "succeeded", "{}", q.error);
    // Both are RFC 3339 in UTC with milliseconds: the strings order as the times.
    assert!(q.started_at >= t.finished_at, "the queue waited for recovery: {} < {}", q.started_at, t.finished_at);
}

#[tokio::test]
async fn a_task_still_running_at_restart_is_reattached_and_streams_on() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[("gated", &["say", "one", "wait-file", &g, "say", "two", "exit", "3"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("gated", "x")).await.unwrap().into_inner().task_id;
    assert!(
        eventually(LONG, || std::fs::read_to_string(
            caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(&id)).join("raw.log")
        )
        .is_ok_and(|s| s.contains("one")))
        .await
    );
    env.kill_daemons().await;

    let mut c2 = env.start_daemon().await;
    let s = c2.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(s.status().as_str(), "running", "re-attached, still running");
    // Await is woken by the re-attached task's exit.
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c2, &id, LONG).await;
    assert_eq!(t.status().as_str(), "failed");
    assert_eq!(t.exit_code, Some(3), "the exit code is collected across the restart");
    drop(c);
}

#[tokio::test]
async fn a_task_whose_processes_vanished_ends_failed_with_a_reason() {
    let env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    env.set_agents(&[("victim", &["pid", &pf, "hang"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("victim", "x")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 1).await);
    let agent = pids_in(&pidfile)[0];
    let supervisor = supervisor_of(agent) as i32;
    env.kill_daemons().await;
    // The supervisor dies with no word; its agent goes on unwatched.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(eventually(LONG, || !alive(supervisor as u32)).await);
    // As if it died before recording its agent: the agent is still found.
    let _ = std::fs::remove_file(
        caesar_tests::daemon_files(env.paths.state_dir.join("tasks").join(&id)).join("agent.json"),
    );

    let mut c2 = env.start_daemon().await;
    let t = await_one(&mut c2, &id, LONG).await;
    assert_eq!(t.status().as_str(), "failed", "never left running");
    assert!(t.error.contains("vanished"), "{}", t.error);
    let report = json(&t.report_json);
    assert_eq!(report["status"], "failed");
    assert!(report["summary"].as_str().unwrap().contains("vanished"));
    assert!(eventually(LONG, || !alive(agent)).await, "the orphaned agent was killed");
    drop(c);
}

#[tokio::test]
async fn sigterm_stops_the_daemon_cleanly_and_tasks_survive() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[("gated", &["wait-file", &g, "report", "success", "ok"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("gated", "x")).await.unwrap().into_inner().task_id;
    let pid = env.daemon_pid().await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(caesar_proto::client::wait_until_gone(&env.paths, LONG).await);
    assert!(eventually(LONG, || !alive(pid)).await, "the daemon exited");
    assert!(!env.paths.socket.exists(), "the socket file is removed on a clean stop");
    std::fs::write(&gate, "go").unwrap();
    let mut c2 = env.start_daemon().await;
    let t = await_one(&mut c2, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded");
    drop(c);
}

/// What `pkill -x caesard` would signal among `pids`: those whose process
/// name (`/proc/<pid>/comm`, which `pkill -x` and `killall` match) is
/// `caesard`. The test signals only these, never every caesard of the
/// machine, since other installations may be running.
fn pkill_x_caesard_among(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "caesard"))
        .collect()
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn pkill_x_caesard_stops_the_daemon_and_no_task() {
    let env = Env::new(&[]);
    let pidfile = env.file("pids");
    let gate = env.file("gate");
    let (pf, g) = (pidfile.display().to_string(), gate.display().to_string());
    env.set_agents(&[("long", &["pid", &pf, "wait-file", &g, "report", "success", "outlived the daemon"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("long", "x")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 1).await);
    let agent = pids_in(&pidfile)[0];
    let supervisor = supervisor_of(agent);
    let daemon = env.daemon_pid().await;
    assert!(
        eventually(LONG, || std::fs::read_to_string(format!("/proc/{supervisor}/comm"))
            .is_ok_and(|c| c.trim() == "caesar-supervis"))
        .await
    );

    // `pkill -x caesard` (SIGTERM) matches the daemon alone.
    let matched = pkill_x_caesard_among(&[daemon, supervisor, agent]);
    assert_eq!(matched, vec![daemon], "pkill -x caesard would match the task's processes");
    for pid in matched {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    }
    assert!(eventually(LONG, || !alive(daemon)).await, "the daemon stopped");
    assert!(alive(supervisor) && alive(agent), "the task's supervisor and agent go on");

    // A new daemon collects the task, which ends as its agent says.
    let mut c2 = env.start_daemon().await;
    assert_eq!(
        c2.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner().status().as_str(),
        "running"
    );
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c2, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded");
    assert_eq!(json(&t.report_json)["summary"], "outlived the daemon");
    drop(c);
}

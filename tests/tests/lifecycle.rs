//! The task lifecycle against a real caesard on a temporary socket: delegate,
//! events, reports, await, cancel of a process tree, timeout, bad input.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_report_file_is_collected_with_events_and_env() {
    let mut env = Env::new(&[(
        "writer",
        &[
            "say",
            "hello",
            "env",
            "CAESAR_TASK_ID",
            "env",
            "CAESAR_DEPTH",
            "lines",
            "3",
            "report",
            "success",
            "all done",
        ],
    )]);
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("writer", "write a report")).await.unwrap().into_inner();
    assert_eq!(d.status().as_str(), "running");
    assert_eq!((d.mode.as_str(), d.isolation.as_str()), ("write", "inplace"));
    assert_eq!(d.timeout_ms, 600_000, "the default timeout is 10 minutes");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded");
    assert_eq!(t.exit_code, Some(0));
    assert!(!t.pending);
    assert_eq!((t.report_status.as_str(), t.report_source.as_str()), ("success", "file"));
    let report = json(&t.report_json);
    assert_eq!(report["summary"], "all done");
    assert_eq!(report["task_id"], d.task_id.as_str());

    let logs = c
        .logs(pb::LogsRequest { task_id: d.task_id.clone(), limit: 100, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let events: Vec<serde_json::Value> = logs.events_json.iter().map(|e| json(e)).collect();
    assert_eq!(logs.total_events, events.len() as u64);
    assert_eq!(events.first().unwrap()["type"], "started");
    assert_eq!(events.last().unwrap()["type"], "finished");
    let texts: Vec<&str> =
        events.iter().filter(|e| e["type"] == "message").map(|e| e["text"].as_str().unwrap()).collect();
    assert_eq!(
        texts,
        ["hello", &format!("CAESAR_TASK_ID={}", d.task_id), "CAESAR_DEPTH=1", "line 0", "line 1", "line 2"]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>(), "seq is dense and ordered");

    // The OACP task directory holds the same documents.
    let dir = std::path::Path::new(&t.task_dir);
    assert_eq!(json(&std::fs::read_to_string(dir.join("task.json")).unwrap())["protocol"], "caesar.task/v1");
    assert_eq!(std::fs::read_to_string(dir.join("events.jsonl")).unwrap().lines().count(), events.len());
    assert!(std::fs::read_to_string(caesar_tests::daemon_files(dir).join("raw.log")).unwrap().contains("line 2"));

    let raw = c
        .logs(pb::LogsRequest { task_id: d.task_id.clone(), raw: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(raw.raw.contains("hello\n") && !raw.raw_truncated);
    let two = c
        .logs(pb::LogsRequest { task_id: d.task_id.clone(), limit: 2, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(two.events_json.len(), 2);
    assert_eq!(two.total_events, logs.total_events);
}

#[tokio::test]
async fn degraded_reports_fenced_embedded_synthesized_and_refused() {
    let mut env = Env::new(&[
        ("fenced", &["say", "working", "fenced", "partial", "half of it"]),
        ("embedded", &["say", r#"result: {"protocol":"caesar.report/v1","status":"failed","summary":"could not"}"#]),
        ("silent", &["say", "bye", "exit", "7"]),
        (
            "future",
            &["report-raw", r#"{"protocol":"caesar.report/v2","status":"success","summary":"from the future"}"#],
        ),
    ]);
    let mut c = env.start_daemon().await;
    let mut ids = Vec::new();
    for agent in ["fenced", "embedded", "silent", "future"] {
        ids.push(c.delegate(env.delegate_request(agent, "x")).await.unwrap().into_inner().task_id);
    }
    let r = c
        .r#await(pb::AwaitRequest { task_ids: ids.clone(), timeout_ms: 30_000, wake_on_attention: false })
        .await
        .unwrap()
        .into_inner();
    let by: Vec<(&str, &str, &str)> =
        r.tasks.iter().map(|t| (t.status().as_str(), t.report_status.as_str(), t.report_source.as_str())).collect();
    assert_eq!(
        by,
        [
            ("succeeded", "partial", "fenced"),
            ("succeeded", "failed", "embedded"),
            ("failed", "failed", "synthesized"),
            ("succeeded", "success", "synthesized"),
        ]
    );
    let silent = json(&r.tasks[2].report_json);
    assert!(silent["summary"].as_str().unwrap().contains("code 7"));
    assert_eq!(r.tasks[2].exit_code, Some(7));
    let future = json(&r.tasks[3].report_json);
    let refused = future["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["severity"] == "high" && f["detail"].as_str().unwrap().contains("caesar.report/v2"));
    assert!(refused, "the v2 report is refused by name: {future}");
}

#[tokio::test]
async fn await_returns_pending_at_its_timeout_and_wakes_at_the_exit() {
    let mut env = Env::new(&[("slow", &["sleep", "1500", "report", "success", "slow done"]), ("hang", &["hang"])]);
    let mut c = env.start_daemon().await;
    let slow = c.delegate(env.delegate_request("slow", "x")).await.unwrap().into_inner().task_id;
    // Read-only: two write tasks would not share the project's tree at once.
    let mut hang_req = env.delegate_request("hang", "x");
    hang_req.mode = "read-only".into();
    let hang = c.delegate(hang_req).await.unwrap().into_inner().task_id;

    let started = Instant::now();
    let r = c
        .r#await(pb::AwaitRequest {
            task_ids: vec![slow.clone(), hang.clone()],
            timeout_ms: 300,
            wake_on_attention: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(r.tasks.iter().all(|t| t.pending && t.status().as_str() == "running" && t.report_json.is_empty()));

    // Waiting for the slow one alone returns when it exits, not at the timeout.
    let started = Instant::now();
    let t = await_one(&mut c, &slow, Duration::from_secs(60)).await;
    assert_eq!(t.status().as_str(), "succeeded");
    assert!(started.elapsed() < Duration::from_secs(20), "woken by the exit, not the 60 s timeout");

    let s = c.status(pb::StatusRequest { task_id: hang.clone() }).await.unwrap().into_inner();
    assert_eq!(s.status().as_str(), "running");
    assert!(s.last_event_json.contains("started"));
    assert!(s.report_json.is_empty());
}

#[tokio::test]
async fn cancel_kills_the_whole_tree_including_escaped_grandchildren() {
    let mut env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    let args = ["ignore-term", "pid", &pf, "child", &pf, "escape", &pf, "say", "ready", "hang"];
    env.set_agents(&[("tree", &args)]);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("tree", "x")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 3).await, "the agent and two children started");
    let pids = pids_in(&pidfile);
    assert!(pids.iter().all(|&p| alive(p)));

    let r = c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(r.cancelled);
    assert_eq!(r.status().as_str(), "cancelled");
    // Cancel returns after the shutdown: nothing is left, not even the
    // SIGTERM-ignoring grandchild that left the process group.
    for p in &pids {
        assert!(!alive(*p), "pid {p} survived the cancel");
    }
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled");
    assert_eq!(json(&t.report_json)["status"], "failed");

    let again = c.cancel(pb::CancelRequest { task_id: id }).await.unwrap().into_inner();
    assert!(!again.cancelled, "cancelling a finished task is a no-op");
    assert_eq!(again.status().as_str(), "cancelled");
}

/// Field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`.
fn stat_field(pid: u32, n: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    after_comm.split_whitespace().nth(n - 3).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_supervisor_runs_caesar_task_in_a_session_of_its_own_outside_the_daemons() {
    let mut env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    env.set_agents(&[("hang", &["pid", &pf, "hang"])]);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("hang", "x")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 1).await, "the agent started");
    let supervisor = supervisor_of(pids_in(&pidfile)[0]);
    assert_ne!(supervisor, pids_in(&pidfile)[0], "the agent runs beneath a supervisor");
    let daemon = env.daemon_pid().await;
    let (pgid, session) = (stat_field(supervisor, 5), stat_field(supervisor, 6));
    assert_eq!((pgid, session), (i64::from(supervisor), i64::from(supervisor)), "it leads its group and session");
    assert_ne!(session, stat_field(daemon, 6), "not the daemon's session");
    assert_eq!(stat_field(supervisor, 7), 0, "no controlling terminal");
    // Started from the small binary beside `caesar`, not `caesar` itself (issue 33).
    let exe = std::fs::read_link(format!("/proc/{supervisor}/exe")).unwrap();
    assert_eq!(exe.file_name().unwrap(), "caesar-task", "{}", exe.display());
    c.cancel(pb::CancelRequest { task_id: id }).await.unwrap();
}

#[tokio::test]
async fn a_timeout_stops_the_agent_and_ends_timed_out() {
    let mut env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    env.set_agents(&[("hang", &["ignore-term", "pid", &pf, "child", &pf, "hang"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("hang", "x");
    req.timeout_ms = 700;
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "timed_out");
    assert_eq!(t.report_status, "failed");
    assert!(json(&t.report_json)["summary"].as_str().unwrap().contains("timed out"));
    let pids = pids_in(&pidfile);
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&p| !alive(p)), "no process of the task is left");
}

#[tokio::test]
async fn leftovers_of_a_finished_agent_are_killed() {
    let mut env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    env.set_agents(&[("leaky", &["escape", &pf, "report", "success", "done, but left a child"])]);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("leaky", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded");
    let pids = pids_in(&pidfile);
    assert_eq!(pids.len(), 1);
    assert!(!alive(pids[0]), "the escaped child of a finished task is gone");
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_loses_nothing() {
    let mut env = Env::new(&[("ok", &["report", "success", "fine"])]);
    let mut c = env.start_daemon().await;
    let good = c.delegate(env.delegate_request("ok", "x")).await.unwrap().into_inner().task_id;
    let before = await_one(&mut c, &good, LONG).await;

    let e = c.delegate(env.delegate_request("nope", "x")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(
        e.message().contains("unknown agent `nope`") && e.message().contains("use one of ok, claude, codex"),
        "{}",
        e.message()
    );

    let e = c.delegate(env.delegate_request("ok", "   ")).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("objective"));

    let mut req = env.delegate_request("ok", "x");
    req.workspace = "relative/dir".into();
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("absolute"));

    let mut req = env.delegate_request("ok", "x");
    req.mode = "yolo".into();
    let e = c.delegate(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("read-only"));

    for id in ["t_000000000000", "../../etc/passwd", ""] {
        let e = c.status(pb::StatusRequest { task_id: id.into() }).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{id}");
        assert!(e.message().contains("caesar ps"));
    }
    let e = c
        .r#await(pb::AwaitRequest {
            task_ids: vec![good.clone(), "t_ffffffffffff".into()],
            timeout_ms: 10,
            wake_on_attention: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("t_ffffffffffff"));
    let e = c.cancel(pb::CancelRequest { task_id: "t_ffffffffffff".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // Nothing stored before was touched.
    let after = await_one(&mut c, &good, LONG).await;
    assert_eq!(before.report_json, after.report_json);
    assert_eq!(before.event_count, after.event_count);
    let list = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 10 }).await.unwrap().into_inner();
    assert_eq!(list.tasks.len(), 1, "no failed delegation left a task behind");
}

#[tokio::test]
async fn a_missing_executable_fails_cleanly() {
    let mut env = Env::new(&[]);
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        "[[agent]]\nid = \"ghost\"\nbin = \"/nonexistent/agent\"\n",
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let e = c.delegate(env.delegate_request("ghost", "x")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("/nonexistent/agent") && e.message().contains("bin"));

    std::fs::write(env.project.path().join(".caesar/config.toml"), "[[agent]]\nid = \"broken\"\nbin = \n").unwrap();
    // The daemon serves the last good config, and the refusal says why the
    // new entry is not seen.
    let e = c.delegate(env.delegate_request("broken", "x")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("config.toml:3") && e.message().contains("last good config"), "{}", e.message());
}

#[tokio::test]
async fn a_flood_and_invalid_utf8_are_read_whole() {
    // 24 MiB in 64 KiB lines, then a line of invalid UTF-8 and a report.
    let mut env = Env::new(&[("flood", &["flood", "25165824", "badutf8", "report", "success", "survived the flood"])]);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("flood", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, Duration::from_secs(120)).await;
    assert_eq!(t.status().as_str(), "succeeded");
    assert_eq!(json(&t.report_json)["summary"], "survived the flood");
    // 384 lines of 64 KiB, the bad line, started and finished.
    assert_eq!(t.event_count, 384 + 1 + 2);
    let last =
        c.logs(pb::LogsRequest { task_id: id.clone(), limit: 2, ..Default::default() }).await.unwrap().into_inner();
    assert!(json(&last.events_json[0])["text"].as_str().unwrap().contains("bad \u{fffd}"), "{}", last.events_json[0]);
    let raw = c
        .logs(pb::LogsRequest { task_id: id, raw: true, max_bytes: 1024, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(raw.raw_truncated && raw.raw_size > 25_000_000 && raw.raw.len() <= 1024);
}

#[tokio::test]
async fn a_flood_past_the_raw_log_cap_is_dropped_said_and_memory_stays_bounded() {
    // 256 MiB of output against a 4 MiB cap.
    let mut env = Env::new(&[("flood", &["flood", "268435456", "report", "success", "flooded"])]);
    let mut c = env.start_daemon_with(&[("CAESAR_RAW_LOG_MAX_BYTES", "4194304")]).await;
    let daemon = env.daemon_pid().await;
    let id = c.delegate(env.delegate_request("flood", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, Duration::from_secs(300)).await;
    assert_eq!(t.status().as_str(), "succeeded");
    let raw_size =
        std::fs::metadata(caesar_tests::daemon_files(std::path::Path::new(&t.task_dir)).join("raw.log")).unwrap().len();
    assert!(raw_size < 4_194_304 + 4096, "raw.log is capped: {raw_size}");
    let raw = c
        .logs(pb::LogsRequest { task_id: id.clone(), raw: true, max_bytes: 4096, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(raw.raw.contains("dropped past the raw log cap of 4194304 bytes"), "{}", raw.raw);
    let peak_kb = peak_rss_kb(daemon);
    assert!(peak_kb < 200 * 1024, "the daemon's peak RSS stayed bounded: {peak_kb} KiB");
}

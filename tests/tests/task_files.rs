//! What the daemon trusts is out of its agent's reach (issue 19), through
//! the real binaries: an agent writes, in its own task directory, the files
//! the daemon and the supervisor kept there before (`report.channel.json`,
//! `exit.json`, `agent.json`, `stdin.fifo`, `raw.log`), and none of them
//! changes the task's outcome, its report's source or which processes are
//! stopped; the daemon's part beside the directory refuses the agent where
//! Landlock confines it; the real channel report still works; and a task
//! started before the move (its files in the old places) still recovers,
//! concludes and shows its logs.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::pb;
use caesar_tests::daemon_files;
use common::*;

const LONG: Duration = Duration::from_secs(30);

/// Writes, in the agent's own directory, a forged channel report, an exit
/// record of success, an `agent.json` naming `victim`, a line at the FIFO's
/// old name and a raw log holding a fenced report of success; then tries
/// to add a file to the daemon's part. What it managed is in `forged.log`.
fn forge(victim: u32) -> String {
    format!(
        r#"D="$CAESAR_TASK_DIR"; L="$D/forged.log"
try() {{ n=$1; shift; if "$@" 2>/dev/null; then echo "wrote $n" >>"$L"; else echo "refused $n" >>"$L"; fi; }}
try channel sh -c 'printf %s "{{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"forged channel\"}}" > "$0/report.channel.json"' "$D"
try exit sh -c 'printf %s "{{\"exit_code\":0,\"signal\":null,\"timed_out\":false,\"terminated\":false,\"spawn_error\":null,\"leftovers_killed\":0,\"finished_ms\":1}}" > "$0/exit.json"' "$D"
try agent sh -c 'printf "{{\"pid\":{victim},\"started_ms\":1,\"supervisor_pid\":{victim}}}" > "$0/agent.json"' "$D"
try fifo sh -c 'echo "{{\"type\":\"control_response\"}}" > "$0/stdin.fifo"' "$D"
try raw sh -c 'printf "\`\`\`json caesar:report\n{{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"forged raw\"}}\n\`\`\`\n" > "$0/raw.log"' "$D"
try part touch "$D.daemon/planted""#
    )
}

/// A process in a group of its own that no task owns.
struct Victim(std::process::Child);

impl Victim {
    fn spawn() -> Victim {
        Victim(std::process::Command::new("sleep").arg("600").process_group(0).spawn().unwrap())
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn task_dir(env: &Env, id: &str) -> PathBuf {
    env.paths.state_dir.join("tasks").join(id)
}

fn forged_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("forged.log")).unwrap_or_default()
}

#[tokio::test]
async fn files_an_agent_forges_in_its_directory_change_nothing_across_a_restart() {
    let victim = Victim::spawn();
    let env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    let script = forge(victim.pid());
    env.set_agents(&[("forger", &["sh", &script, "say", "real output", "wait-file", &gate, "exit", "3"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("forger", "forge")).await.unwrap().into_inner().task_id;
    let dir = task_dir(&env, &id);
    assert!(eventually(LONG, || forged_log(&dir).contains("part")).await, "the agent made its attempts");
    let forged = forged_log(&dir);
    for name in ["channel", "exit", "agent", "fifo", "raw"] {
        assert!(forged.contains(&format!("wrote {name}")), "its own directory is the agent's: {forged}");
    }
    if caesard::sandbox::kernel_abi().is_some() {
        assert!(forged.contains("refused part"), "the daemon's part is out of a confined agent's reach: {forged}");
        assert!(!daemon_files(&dir).join("planted").exists());
    }
    // A re-attached daemon watches for the exit record: a forged one would
    // end the task now, as a success, while its agent still runs.
    env.kill_daemons().await;
    let mut c = env.start_daemon().await;
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!((t.status().as_str(), t.exit_code), ("failed", Some(3)), "the real ending: {t:?}");
    // Neither the forged channel report nor the fenced one in the forged
    // raw log: the agent wrote no report, so it is synthesized.
    assert_eq!(t.report_source, "synthesized", "{}", t.report_json);
    assert!(!t.report_json.contains("forged"), "{}", t.report_json);
    let raw = c
        .logs(pb::LogsRequest { task_id: id.clone(), raw: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .raw;
    assert!(raw.contains("real output") && !raw.contains("forged"), "the raw log is the supervisor's: {raw}");
    let exit = std::fs::read_to_string(daemon_files(&dir).join("exit.json")).unwrap();
    assert!(json(&exit)["exit_code"] == 3, "{exit}");
    assert!(alive(victim.pid()), "the process named by the forged agent.json was left alone");
}

#[tokio::test]
async fn a_forged_agent_json_names_no_process_the_daemon_stops() {
    let victim = Victim::spawn();
    let env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    let script = forge(victim.pid());
    env.set_agents(&[("forger", &["sh", &script, "pid", &pf, "hang"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("forger", "forge")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 1).await);
    let agent = pids_in(&pidfile)[0];
    let supervisor = supervisor_of(agent) as i32;
    // The supervisor dies without a word while no daemon runs: the next one
    // stops what is left of the task, by the records it trusts.
    env.kill_daemons().await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(eventually(LONG, || !alive(supervisor as u32)).await);
    let mut c2 = env.start_daemon().await;
    let t = await_one(&mut c2, &id, LONG).await;
    assert_eq!(t.status().as_str(), "failed", "{t:?}");
    assert!(t.error.contains("vanished"), "{}", t.error);
    assert!(eventually(LONG, || !alive(agent)).await, "the task's own agent was stopped");
    assert!(alive(victim.pid()), "the forged agent.json's process was not");
    drop(c);
}

#[tokio::test]
async fn the_real_channel_report_wins_and_a_forged_one_never_counts() {
    let env = Env::new(&[]);
    let script = forge(std::process::id());
    let real = r#"{"protocol":"caesar.report/v1","status":"success","summary":"real channel report"}"#;
    env.set_agents(&[
        ("honest", &["sh", &script, "mcp-report", real, "sh", &script, "exit", "0"]),
        ("forger", &["sh", &script, "exit", "0"]),
    ]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    for (agent, source, summary) in [("honest", "channel", "real channel report"), ("forger", "synthesized", "")] {
        let mut req = env.delegate_request(agent, "report");
        req.channel = true;
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!((t.status().as_str(), t.report_source.as_str()), ("succeeded", source), "{agent}: {t:?}");
        assert!(!t.report_json.contains("forged"), "{agent}: {}", t.report_json);
        assert!(json(&t.report_json)["summary"].as_str().unwrap().contains(summary), "{}", t.report_json);
    }
}

#[tokio::test]
async fn a_task_started_before_the_move_recovers_concludes_and_shows_its_logs() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[("gated", &["say", "before the upgrade", "wait-file", &g, "say", "after it", "exit", "4"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("gated", "x")).await.unwrap().into_inner().task_id;
    let dir = task_dir(&env, &id);
    let part = daemon_files(&dir);
    assert!(
        eventually(LONG, || std::fs::read_to_string(part.join("raw.log"))
            .is_ok_and(|s| s.contains("before the upgrade")))
        .await
    );
    env.kill_daemons().await;
    std::fs::write(&gate, "go").unwrap();
    assert!(eventually(LONG, || part.join("exit.json").exists()).await, "the supervisor ended with no daemon");
    // As the previous version left it: every daemon file in the task
    // directory, no layout marker (a daemon part with only kept permission
    // requests, or none at all).
    for e in std::fs::read_dir(&part).unwrap().flatten() {
        let name = e.file_name();
        if name != "layout" && e.file_type().unwrap().is_file() {
            std::fs::rename(e.path(), dir.join(&name)).unwrap();
        }
    }
    std::fs::remove_file(part.join("layout")).unwrap();
    std::fs::create_dir_all(part.join("permissions")).unwrap();

    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!((t.status().as_str(), t.exit_code), ("failed", Some(4)), "its exit record, in the old place: {t:?}");
    let logs = c.logs(pb::LogsRequest { task_id: id.clone(), limit: 100, ..Default::default() }).await.unwrap();
    let texts: Vec<String> = logs
        .into_inner()
        .events_json
        .iter()
        .map(|e| json(e))
        .filter(|e| e["type"] == "message")
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .collect();
    assert!(texts.iter().any(|t| t == "after it"), "its raw log, in the old place, was read on: {texts:?}");
    let raw =
        c.logs(pb::LogsRequest { task_id: id.clone(), raw: true, ..Default::default() }).await.unwrap().into_inner();
    assert!(raw.raw.contains("before the upgrade") && raw.raw.contains("after it"), "{}", raw.raw);
    let out = env.caesar(&["logs", "--raw", &id]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("after it"), "caesar logs: {out:?}");
}

#[tokio::test]
async fn a_delegations_context_is_not_in_its_stored_launch_and_still_reaches_the_next_attempt() {
    // Stops at a quota on its first run (a marker file tells the runs
    // apart), is parked and resumed as a new attempt, which reports.
    let mut env = Env::new(&[]);
    let mark = env.file("ran-once").display().to_string();
    let event = serde_json::json!({
        "protocol": "caesar.event/v1", "type": "blocker", "kind": "rate_limit",
        "message": "429 Too Many Requests: rate limited, try again in 1 seconds",
    });
    let script = format!(
        "if [ -e '{mark}' ]; then printf '%s' '{{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"resumed\"}}' > \"$CAESAR_REPORT_PATH\"; \
         else touch '{mark}'; echo '{event}'; sleep 300; fi"
    );
    env.set_agents(&[("solo", &["sh", &script])]);
    let mut c = env.start_daemon().await;
    let context = "the context only the task's row and its daemon part keep";
    let mut req = env.delegate_request("solo", "do the thing");
    req.context = context.to_owned();
    req.timeout_ms = 60_000;
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(
        (t.status().as_str(), json(&t.report_json)["summary"].as_str()),
        ("succeeded", Some("resumed")),
        "{t:?}"
    );
    let next = c.status(pb::StatusRequest { task_id: t.current_task_id.clone() }).await.unwrap().into_inner();
    assert_ne!(next.task_id, id, "a second attempt ran");
    let brief = std::fs::read_to_string(Path::new(&next.task_dir).join("task.json")).unwrap();
    assert!(brief.contains(context), "the next attempt's brief holds the context: {brief}");
    let db = rusqlite::Connection::open(env.paths.state_dir.join("caesar.db")).unwrap();
    let launch: String = db.query_row("SELECT launch_json FROM tasks WHERE id = ?1", [&id], |r| r.get(0)).unwrap();
    assert!(!launch.contains(context) && launch.contains("@@caesar:context@@"), "{launch}");
}

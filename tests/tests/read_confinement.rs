//! What a task's agent can read (issue 19), through the real binaries:
//! in a mount namespace of its own, caesar's state, config and runtime
//! directories are hidden but for its own task directory and the socket's
//! directory. The agent tries to read the store, another task's raw log
//! (in its daemon part) and report, its own `<id>.daemon/` files, the HTTP token, caesar's
//! config file, and the store again through `/proc/<daemon pid>/root`:
//! each is refused, while its workspace, its own task directory, a file of
//! the home directory outside caesar's directories and its return channel
//! (a progress report over MCP) still work.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

/// Each attempt writes `out-<name>` in the task directory: what the command
/// said, then `rc=<status>`.
const ATTACK: &str = r#"O="$CAESAR_TASK_DIR"; F="$CAESAR_HOME/files"; try() { n=$1; shift; "$@" >"$O/out-$n" 2>&1; echo "rc=$?" >>"$O/out-$n"; }
V=$(cat "$F/victim"); D=$(cat "$F/daemon-pid"); H=$(cat "$F/home-file")
try db cat "$CAESAR_HOME/state/caesar.db"
try raw cat "$V.daemon/raw.log"
try report cat "$V/report.json"
try mydaemon cat "$O.daemon/permissions/q.json"
try token cat "$CAESAR_HOME/state/http.token"
try config cat "$CAESAR_HOME/config/config.toml"
try proc cat "/proc/$D/root$CAESAR_HOME/state/caesar.db"
try listing ls "$CAESAR_HOME/state/tasks"
try ws cat "$PWD/.caesar/config.toml"
try mine cat "$O/task.json"
try home cat "$H"
try files cat "$F/victim""#;

#[tokio::test]
async fn an_agent_reads_nothing_of_caesars_but_its_own_task_and_still_reaches_its_channel() {
    if !caesard::sandbox::mount::works() {
        eprintln!("no unprivileged user and mount namespaces here: reads are not confined (the doctor says so)");
        return;
    }
    let go = "go";
    let mut env = Env::new(&[]);
    let go_file = env.file(go).display().to_string();
    env.set_agents(&[
        ("victim", &["say", "the victim's secret output", "report", "success", "victim"]),
        ("reader", &["wait-file", &go_file, "sh", ATTACK, "mcp-progress", "from inside", "report", "success", "read"]),
    ]);
    // caesar's config file, and a file of the home directory outside caesar's.
    std::fs::create_dir_all(&env.paths.config_dir).unwrap();
    std::fs::write(env.paths.config_dir.join("config.toml"), "# the user's caesar config\n").unwrap();
    let home = tempfile::tempdir_in(std::env::home_dir().unwrap()).unwrap();
    std::fs::write(home.path().join("notes"), "home notes\n").unwrap();
    std::fs::write(env.file("home-file"), home.path().join("notes").display().to_string()).unwrap();

    let mut c = env.start_daemon().await;
    c.http_token(pb::HttpTokenRequest { rotate: false, readonly: false }).await.unwrap();
    let victim = c.delegate(env.delegate_request("victim", "be read")).await.unwrap().into_inner().task_id;
    let v = await_one(&mut c, &victim, LONG).await;
    assert_eq!(v.status().as_str(), "succeeded", "{v:?}");
    std::fs::write(env.file("victim"), &v.task_dir).unwrap();
    std::fs::write(env.file("daemon-pid"), env.daemon_pid().await.to_string()).unwrap();
    // What the agent will try to read exists, so a refusal is the sandbox's.
    for p in [
        env.paths.state_dir.join("caesar.db"),
        env.paths.state_dir.join("http.token"),
        Path::new(&format!("{}.daemon", v.task_dir)).join("raw.log"),
        Path::new(&v.task_dir).join("report.json"),
    ] {
        assert!(p.is_file(), "{} exists", p.display());
    }

    for mode in ["read-only", "write"] {
        let _ = std::fs::remove_file(env.file(go));
        let mut req =
            pb::DelegateRequest { mode: mode.into(), ..env.delegate_request("reader", "read what is not yours") };
        req.channel = true;
        let d = c.delegate(req).await.unwrap().into_inner();
        let (id, task_dir) = (d.task_id, d.task_dir);
        let own_daemon = format!("{task_dir}.daemon/permissions");
        std::fs::create_dir_all(&own_daemon).unwrap();
        std::fs::write(Path::new(&own_daemon).join("q.json"), "{}").unwrap();
        std::fs::write(env.file(go), "").unwrap();
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{mode}: {t:?}");
        let out = |n: &str| {
            String::from_utf8_lossy(&std::fs::read(Path::new(&t.task_dir).join(format!("out-{n}"))).unwrap())
                .into_owned()
        };

        for n in ["db", "raw", "report", "mydaemon", "token", "config", "proc"] {
            let said = out(n);
            assert!(
                !said.contains("rc=0") && (said.contains("No such file") || said.contains("ermission denied")),
                "{mode}: {n} was read: {said}"
            );
        }
        assert!(!out("raw").contains("secret output"), "{mode}");
        // Its own task directory is all it sees of the tasks.
        assert_eq!(out("listing").lines().next(), Some(id.as_str()), "{mode}: {}", out("listing"));
        assert!(out("ws").contains("reader") && out("ws").contains("rc=0"), "{mode}: {}", out("ws"));
        assert!(out("mine").contains(&id) && out("mine").contains("rc=0"), "{mode}: {}", out("mine"));
        assert!(out("home").contains("home notes") && out("home").contains("rc=0"), "{mode}: {}", out("home"));
        assert!(out("files").contains("rc=0"), "{mode}: {}", out("files"));
        // The return channel reaches the daemon from inside.
        let events = c
            .logs(pb::LogsRequest { task_id: id.clone(), limit: 100, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .events_json;
        assert!(
            events.iter().any(|e| e.contains("\"progress\"") && e.contains("from inside")),
            "{mode}: the progress report reached the daemon: {events:?}"
        );
        let started = events.iter().find(|e| e.contains("\"started\"")).unwrap();
        assert!(started.contains("reads confined"), "{mode}: {started}");
    }
}

//! The authority model (issue 19), through the real binaries: an agent runs
//! the real `caesar` CLI (and `caesar-mcp --channel`) from inside its task
//! and tries to act as the orchestrator, to reach another task, to forge
//! the environment or a supervisor, to steal another task's channel secret,
//! and to delegate wider or deeper than its own authority. The same calls
//! from the user's own process succeed, so each refusal is the check's.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

fn refused(text: &str) -> bool {
    !text.contains("rc=0") && (text.contains("orchestrator call") || text.contains("process tree"))
}

#[tokio::test]
async fn an_agent_cannot_act_as_the_orchestrator_nor_reach_another_task() {
    let attack = attack_script(
        r#"V=$(cat "$CAESAR_HOME/files/victim")
try status $C status $V
try logs $C logs $V
try cancel $C cancel $V
try answer $C answer $V q_0123456789ab yes
try apply $C apply $V
try discard $C discard $V
try token $C mcp token
try policy $C policy allow evil
try stop $C daemon stop
try forged env CAESAR_TASK_ID=$V CAESAR_DEPTH=0 $C cancel $V
ln -s /bin/sh "$O/caesar-supervis"
try fake env CAESAR_TASK_ID=$V "$O/caesar-supervis" -c "$C cancel $V"
try ps $C ps
try self $C status $CAESAR_TASK_ID"#,
    );
    let mut env = Env::new(&[("victim", &["hang"]), ("attacker", &["sh", &attack, "report", "success", "tried"])]);
    let mut c = env.start_daemon().await;
    let ro = |agent: &str, objective: &str| pb::DelegateRequest {
        mode: "read-only".into(),
        ..env.delegate_request(agent, objective)
    };
    let victim = c.delegate(ro("victim", "the victim")).await.unwrap().into_inner().task_id;
    std::fs::write(env.file("victim"), &victim).unwrap();
    let config_before = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    let attacker = c.delegate(ro("attacker", "the attacker")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &attacker, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert!(env.file("out").join("done").exists());

    for name in ["status", "logs", "cancel", "answer", "apply", "discard", "token", "policy", "stop", "forged", "fake"]
    {
        let said = attack_out(&env, name);
        assert!(refused(&said), "{name} was not refused: {said}");
    }
    assert!(attack_out(&env, "apply").contains("`apply` is an orchestrator call"), "{}", attack_out(&env, "apply"));
    assert!(
        attack_out(&env, "status").contains(&format!("inside task {attacker}'s process tree")),
        "{}",
        attack_out(&env, "status")
    );
    // The renamed shell claiming the victim's id is no task's supervisor,
    // and its real supervisor is still above it.
    assert!(attack_out(&env, "fake").contains("process tree"), "{}", attack_out(&env, "fake"));
    // A task sees itself, and lists nothing else.
    assert!(
        attack_out(&env, "self").contains("rc=0") && attack_out(&env, "self").contains(&attacker),
        "{}",
        attack_out(&env, "self")
    );
    let ps = attack_out(&env, "ps");
    assert!(ps.contains("rc=0") && !ps.contains(&victim), "{ps}");

    // Nothing the attacker asked for happened.
    let v = c.status(pb::StatusRequest { task_id: victim.clone() }).await.unwrap().into_inner();
    assert_eq!(v.status().as_str(), "running", "the victim was not cancelled");
    assert!(!env.paths.state_dir.join("http-token").exists() || !attack_out(&env, "token").contains("rc=0"));
    let config_after = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    assert_eq!(config_before, config_after, "the policy edit was refused");
    assert!(c.ping(pb::PingRequest {}).await.is_ok(), "the daemon was not stopped");

    // The same calls from the user's own process are served.
    let o = env.caesar(&["status", &victim]);
    assert!(o.status.success(), "{o:?}");
    let o = env.caesar(&["cancel", &victim]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(await_one(&mut c, &victim, LONG).await.status().as_str(), "cancelled");
}

#[tokio::test]
async fn nothing_an_agent_reads_speaks_for_another_task() {
    // The attacker reads the victim's /proc/<pid>/environ and caesar.db for
    // anything that could speak for the victim, and calls submit_report for
    // the victim through the real caesar-mcp --channel, naming its id.
    let attack = attack_script(
        r#"V=$(cat "$CAESAR_HOME/files/victim"); P=$(cat "$CAESAR_HOME/files/victim.pid")
tr '\0' '\n' < /proc/$P/environ > "$O/proc" 2>&1; echo "rc=$?" >> "$O/proc"
sqlite3 "$CAESAR_HOME/state/caesar.db" .dump > "$O/db" 2>&1
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}'
inited='{"jsonrpc":"2.0","method":"notifications/initialized"}'
call='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"submit_report","arguments":{"report":{"status":"success","summary":"forged"}}}}'
(printf '%s\n%s\n' "$init" "$inited"; sleep 1; printf '%s\n' "$call"; sleep 3) | env CAESAR_TASK_ID=$V $M --channel >"$O/forge" 2>&1"#,
    );
    // Its pid as the host's /proc numbers it (`$$` answers in its box).
    let victim_script = r#"read -r p _ < /proc/self/stat; echo $p > "$CAESAR_HOME/files/victim.pid"; exec sleep 30"#;
    // Both read-only, so that neither waits for the other's tree.
    let mut env =
        Env::new(&[("victim", &["sh", victim_script]), ("attacker", &["sh", &attack, "report", "success", "tried"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("victim", "the victim");
    req.channel = true;
    req.mode = "read-only".into();
    let victim = c.delegate(req).await.unwrap().into_inner().task_id;
    std::fs::write(env.file("victim"), &victim).unwrap();
    assert!(eventually(LONG, || env.file("victim.pid").exists()).await);
    // The victim's environment, readable from /proc, holds no secret and
    // no key of the daemon's own environment (issue 19) ...
    // The pid is written just before `exec sleep`: while the exec replaces
    // the process's memory its environ reads empty, so wait past it.
    let environ_of = || {
        let pid = std::fs::read_to_string(env.file("victim.pid")).unwrap_or_default();
        std::fs::read(format!("/proc/{}/environ", pid.trim())).unwrap_or_default()
    };
    assert!(eventually(LONG, || !environ_of().is_empty()).await, "the victim's environ stays empty");
    let environ = environ_of();
    let text = String::from_utf8_lossy(&environ);
    assert!(!text.contains("CAESAR_CHANNEL_SECRET") && text.contains("CAESAR_TASK_ID="), "{text}");
    let mut req = env.delegate_request("attacker", "the attacker");
    req.mode = "read-only".into();
    let attacker = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &attacker, LONG).await.status().as_str(), "succeeded");
    // Naming the victim from inside another task's tree is refused.
    let forge = attack_out(&env, "forge");
    assert!(forge.contains("speaks only for its own task"), "{forge}");
    // What it could read of the victim's environ and of the store holds no
    // channel secret: there is none (store schema 8). In the attacker's own
    // mount namespace (`sandbox/mount.rs`) the store is hidden and the
    // victim's environ, in another user namespace, does not open; where
    // agents get no namespace both are read, and hold no secret.
    let seen = attack_out(&env, "proc");
    assert!(!seen.contains("CAESAR_CHANNEL_SECRET"), "{seen}");
    assert!(seen.contains("CAESAR_TASK_ID=") || !seen.contains("rc=0"), "{seen}");
    let db = attack_out(&env, "db");
    assert!(!db.contains("secret TEXT"), "the attacker read a store that holds a secret column: {db}");
    if db.contains(&victim) {
        assert!(!caesard::sandbox::mount::works(), "the store was readable inside a mount namespace: {db}");
    }

    // From the user's own process the victim's name is refused too: only
    // its own tree speaks for a task.
    let r = c
        .report_progress(pb::ReportProgressRequest {
            channel: Some(pb::ChannelRequest { task_id: victim.clone() }),
            message: "from the user".into(),
            pct: None,
        })
        .await;
    assert_eq!(r.unwrap_err().code(), tonic::Code::PermissionDenied);
    c.cancel(pb::CancelRequest { task_id: victim.clone() }).await.unwrap();
    let v = await_one(&mut c, &victim, LONG).await;
    assert!(!v.report_json.contains("forged"), "{}", v.report_json);
}

#[tokio::test]
async fn a_task_delegates_only_under_its_own_authority() {
    // A read-only parent delegates: write is refused, a bare request
    // becomes read-only at the parent's depth plus one, and the parent may
    // await its child. The child's own child would pass max_depth = 2.
    let middle = attack_script(r#"try deeper $C run --detach --agent leaf "deeper still""#);
    let parent = attack_script(
        r#"try write $C run --detach --agent middle --mode write "write for me"
try child $C run --detach --agent middle "read for me"
K=$(head -n1 "$O/child"); try await $C await $K"#,
    );
    let mut env = Env::new(&[
        ("leaf", &["report", "success", "leaf"]),
        ("middle", &["sh", &middle, "report", "success", "middle"]),
        ("parent", &["sh", &parent, "report", "success", "parent"]),
    ]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("parent", "the parent");
    req.mode = "read-only".into();
    // A claimed depth is ignored: the user's own delegation is depth 0.
    req.depth = 7;
    let p = c.delegate(req).await.unwrap().into_inner();
    let t = await_one(&mut c, &p.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let task_json = |dir: &str| json(&std::fs::read_to_string(std::path::Path::new(dir).join("task.json")).unwrap());
    assert_eq!(task_json(&p.task_dir)["depth"], 1, "the claimed depth 7 was ignored");

    let write = attack_out(&env, "write");
    assert!(write.contains("`mode` write is refused") && !write.contains("rc=0"), "{write}");
    let child = attack_out(&env, "child");
    assert!(child.contains("rc=0"), "{child}");
    let child_id = child.lines().next().unwrap().trim().to_owned();
    assert!(attack_out(&env, "await").contains("rc=0"), "{}", attack_out(&env, "await"));
    let k = await_one(&mut c, &child_id, LONG).await;
    assert_eq!((k.status().as_str(), k.mode.as_str()), ("succeeded", "read-only"), "{k:?}");
    assert_eq!(task_json(&k.task_dir)["depth"], 2);
    let deeper = attack_out(&env, "deeper");
    assert!(deeper.contains("max_depth = 2") && !deeper.contains("rc=0"), "{deeper}");
    // Nothing was delegated beyond the one child.
    let all = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 100 }).await.unwrap().into_inner().tasks;
    assert_eq!(all.len(), 2, "{all:?}");
}

#[tokio::test]
async fn a_read_only_task_cannot_write_its_workspace_where_the_kernel_has_landlock() {
    let attempt = attack_script(
        r#"T=$(basename "$CAESAR_TASK_DIR")
try ws-$T sh -c 'echo x > "$PWD/written-by-agent"'
try taskdir-$T sh -c 'echo x > "$CAESAR_TASK_DIR/mine"'
try tmp-$T sh -c 'echo x > "${TMPDIR:-/tmp}/agent-temp"'
read -r S _ < /proc/self/stat
while [ "$S" -gt 1 ] && [ "$(cat /proc/$S/comm)" != caesar-supervis ]; do S=$(cut -d' ' -f4 /proc/$S/stat); done
try kill-$T kill -0 $S"#,
    );
    let mut env = Env::new(&[("writer", &["sh", &attempt, "report", "success", "tried"])]);
    let mut c = env.start_daemon().await;
    let mut ids = Vec::new();
    for mode in ["read-only", "write"] {
        let req = pb::DelegateRequest { mode: mode.into(), ..env.delegate_request("writer", mode) };
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
        ids.push((mode, id));
    }
    let abi = caesard::sandbox::kernel_abi();
    for (mode, id) in &ids {
        let logs = c
            .logs(pb::LogsRequest { task_id: id.clone(), raw: false, limit: 10, max_bytes: 0 })
            .await
            .unwrap()
            .into_inner();
        let started = logs.events_json.iter().find(|e| e.contains("\"started\"")).unwrap();
        let protections = json(started)["protections"].as_str().unwrap_or_default().to_owned();
        assert!(attack_out(&env, &format!("taskdir-{id}")).contains("rc=0"), "{mode}: the task dir stays writable");
        assert!(attack_out(&env, &format!("tmp-{id}")).contains("rc=0"), "{mode}: temp stays writable");
        let ws = attack_out(&env, &format!("ws-{id}"));
        match (abi, *mode) {
            (None, _) => assert!(protections.starts_with("none"), "{protections}"),
            (Some(_), "read-only") => {
                assert!(protections.contains("the workspace is read-only"), "{protections}");
                assert!(!ws.contains("rc=0"), "a read-only task wrote its workspace: {ws}");
            }
            (Some(_), _) => assert!(ws.contains("rc=0"), "a write task can write: {ws}"),
        }
        // From ABI 6 an agent cannot signal outside its domain (its
        // supervisor above all, which ties its tree to its task).
        if abi.is_some_and(|a| a >= 6) {
            let kill = attack_out(&env, &format!("kill-{id}"));
            assert!(!kill.contains("rc=0"), "{mode}: {kill}");
        }
    }
    assert!(env.project.path().join("written-by-agent").exists(), "the write task wrote");
    let o = env.caesar(&["doctor"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("sandbox: read-only tasks: "), "{said}");
}

#[tokio::test]
async fn a_flood_of_control_bytes_cannot_swell_the_events_past_the_raw_log_cap() {
    // 3,000 lines of 1,000 \x01 bytes: 3 MB of output, 18 MB as JSON
    // escapes; the raw-log cap is 4 MiB, so the events stop at it too.
    let flood =
        r#"L=$(head -c 1000 /dev/zero | tr '\0' '\001'); i=0; while [ $i -lt 3000 ]; do echo "$L"; i=$((i+1)); done"#;
    let mut env = Env::new(&[("flood", &["sh", flood, "report", "success", "flooded"])]);
    let cap: u64 = 4 * 1024 * 1024;
    let mut c = env.start_daemon_with(&[("CAESAR_RAW_LOG_MAX_BYTES", &cap.to_string())]).await;
    let id = c.delegate(env.delegate_request("flood", "flood")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert_eq!(json(&t.report_json)["summary"], "flooded", "the report is not lost");
    let events = std::path::Path::new(&t.task_dir).join("events.jsonl");
    let size = std::fs::metadata(&events).unwrap().len();
    assert!(size <= cap + 64 * 1024, "events.jsonl is {size} bytes, over the cap of {cap}");
    assert!(size > cap / 2, "the flood did reach the events: {size}");
    let text = std::fs::read_to_string(&events).unwrap();
    assert!(text.contains("events.jsonl reached the cap"), "it says so");
    assert!(text.lines().last().unwrap().contains("\"finished\""), "the task's end is still recorded");
}

#[tokio::test]
async fn agent_env_values_stay_out_of_show_config_and_a_relative_bin_is_the_config_files() {
    let env = Env::new(&[]);
    let dir = env.project.path().join(".caesar/agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(fake_agent(), dir.join("fake")).unwrap();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        "[[agent]]\nid = \"rel\"\nbin = \"./agents/fake\"\nargs = [\"env\", \"API_KEY\", \"report\", \"success\", \"ok\"]\nenv = { API_KEY = \"sekrit-value\" }\n",
    )
    .unwrap();
    let mut env = env;
    let mut c = env.start_daemon().await;
    let shown =
        c.show_config(pb::ShowConfigRequest { workspace: env.workspace() }).await.unwrap().into_inner().config_json;
    assert!(shown.contains("API_KEY") && !shown.contains("sekrit-value"), "{shown}");
    // The daemon's working directory is not the project's: `./agents/fake`
    // is found beside the config file that names it.
    let id = c.delegate(env.delegate_request("rel", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let logs =
        c.logs(pb::LogsRequest { task_id: id, raw: false, limit: 100, max_bytes: 0 }).await.unwrap().into_inner();
    let started = logs.events_json.iter().find(|e| e.contains("\"started\"")).unwrap();
    assert!(!started.contains("sekrit-value"), "{started}");
}

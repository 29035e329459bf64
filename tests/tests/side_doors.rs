//! Issue 29, the side doors around the authority model, through the real
//! binaries: a scripted agent inside its task reaches for the dashboard's
//! login link, the HTTP token and another project's config, health and
//! trust records; a nested delegation carries a `verify` command of its
//! own; a project reached as `<prefix>/../evil` passes for one beneath a
//! trusted prefix; agent-written escape sequences reach the user's terminal
//! through `caesar diff`, `status` and `ps`; one `Logs` answer grows with
//! the events; a huge `events.jsonl` is read whole by its repair. Each test
//! fails without its fix.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `GET path` on the dashboard at `port`: the status code and the body.
fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let code = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, raw)
}

#[tokio::test]
async fn the_orchestrators_faces_are_the_users_only() {
    // Another project of the user's, with a config of its own, trusted.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join(".caesar")).unwrap();
    std::fs::write(other.path().join(".caesar/config.toml"), "[policy]\nmax_depth = 1\n").unwrap();
    let attack = attack_script(
        r#"W=$(cat "$CAESAR_HOME/files/other")
try ui $C --json ui --no-open
try token $C mcp token
try config-other sh -c "cd '$W' && $C --json policy show"
try config-own $C --json policy show
try health-other sh -c "cd '$W' && $C daemon status"
try health-own $C daemon status
try trust-list $C trust --list"#,
    );
    let mut env = Env::new(&[("attacker", &["sh", &attack, "report", "success", "tried"])]);
    std::fs::write(env.file("other"), other.path().display().to_string()).unwrap();
    let mut c = env.start_daemon().await;
    for dir in [other.path(), env.project.path()] {
        let o = env.caesar(&["trust", &dir.display().to_string()]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let mut req = env.delegate_request("attacker", "the attacker");
    req.mode = "read-only".into();
    let attacker = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &attacker, LONG).await.status().as_str(), "succeeded");
    assert!(env.file("out").join("done").exists());

    let ui = attack_out(&env, "ui");
    assert!(!ui.contains("rc=0") && ui.contains("orchestrator call") && !ui.contains("login?token="), "{ui}");
    let token = attack_out(&env, "token");
    assert!(!token.contains("rc=0") && token.contains("orchestrator call"), "{token}");
    for name in ["config-other", "health-other"] {
        let said = attack_out(&env, name);
        assert!(!said.contains("rc=0") && said.contains("reads only the project it runs in"), "{name}: {said}");
        assert!(!said.contains("max_depth\":1"), "{name} showed the other project's config: {said}");
    }
    // Its own project it still reads.
    for name in ["config-own", "health-own"] {
        let said = attack_out(&env, name);
        assert!(said.contains("rc=0"), "{name}: {said}");
    }
    // The trust records it sees are its own project's, not the other's.
    let listed = attack_out(&env, "trust-list");
    assert!(listed.contains("rc=0"), "{listed}");
    assert!(listed.contains(&env.project.path().display().to_string()), "{listed}");
    assert!(!listed.contains(&other.path().display().to_string()), "{listed}");

    // The user reaches all of it.
    let o = env.caesar(&["--json", "ui", "--no-open"]);
    assert!(o.status.success() && text(&o).contains("login?token="), "{}", text(&o));
    let shown = c.show_config(pb::ShowConfigRequest { workspace: other.path().display().to_string() }).await;
    assert_eq!(json(&shown.unwrap().into_inner().config_json)["policy"]["max_depth"], 1);
    let listed = text(&env.caesar(&["trust", "--list"]));
    assert!(listed.contains(&other.path().display().to_string()), "{listed}");
}

#[tokio::test]
async fn login_links_are_bounded_and_the_oldest_goes_first() {
    let mut env = Env::new(&[]);
    let mut c = env.start_daemon().await;
    let mut links = Vec::new();
    for _ in 0..100 {
        let o = c.open_dashboard(pb::OpenDashboardRequest { workspace: env.workspace() }).await.unwrap();
        links.push(o.into_inner().login_url);
    }
    let port: u16 = links[0].split(':').nth(2).and_then(|p| p.split('/').next()).and_then(|p| p.parse().ok()).unwrap();
    let path = |url: &str| url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap();
    // The first links were dropped past the cap: they log in no more.
    let (code, body) = get(port, &path(&links[0]));
    assert_eq!(code, 401, "the oldest link still logs in: {body}");
    assert!(body.contains("not valid") && body.contains("caesar ui"), "{body}");
    // The newest does.
    let (code, body) = get(port, &path(links.last().unwrap()));
    assert_eq!(code, 303, "{body}");
}

#[tokio::test]
async fn a_nested_delegation_carries_no_command_of_its_own() {
    let parent = attack_script(
        r#"try verify $C run --detach --agent leaf --verify "touch $CAESAR_HOME/files/verify-ran" "check it"
try plain $C run --detach --agent leaf "check it""#,
    );
    let mut env = Env::new(&[
        ("leaf", &["report", "success", "leaf"]),
        ("parent", &["sh", &parent, "report", "success", "parent"]),
    ]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("parent", "the parent");
    req.mode = "read-only".into();
    let p = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &p, LONG).await.status().as_str(), "succeeded");
    let said = attack_out(&env, "verify");
    assert!(!said.contains("rc=0") && said.contains("`verify` is refused"), "{said}");
    assert!(
        said.contains(&format!("from task {p}")) && said.contains("touch "),
        "it names the task and the command: {said}"
    );
    // Without a command of its own the child is delegated as before.
    let plain = attack_out(&env, "plain");
    assert!(plain.contains("rc=0"), "{plain}");
    let child = plain.lines().next().unwrap().trim().to_owned();
    assert_eq!(await_one(&mut c, &child, LONG).await.status().as_str(), "succeeded");
    let all = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 100 }).await.unwrap().into_inner().tasks;
    assert_eq!(all.len(), 2, "only the plain child was delegated: {all:?}");
    assert!(!env.file("verify-ran").exists(), "the nested verify ran");
}

#[tokio::test]
async fn a_trusted_prefix_is_compared_as_resolved_paths() {
    let base = tempfile::tempdir().unwrap();
    let prefix = base.path().join("trusted");
    for project in [prefix.join("good"), base.path().join("evil")] {
        std::fs::create_dir_all(project.join(".caesar")).unwrap();
        std::fs::write(project.join(".caesar/config.toml"), "[worktree]\nsetup = [\"true\"]\n").unwrap();
    }
    let mut env = Env::new(&[]);
    let mut c = env.start_daemon_with(&[("CAESAR_TRUST_PREFIX", &prefix.display().to_string())]).await;
    let untrusted = |config: &str| json(config)["untrusted"].as_array().map_or(0, Vec::len);
    let good = prefix.join("good").display().to_string();
    let shown = c.show_config(pb::ShowConfigRequest { workspace: good }).await.unwrap().into_inner().config_json;
    assert_eq!(untrusted(&shown), 0, "a project beneath the prefix is trusted: {shown}");
    // `<prefix>/../evil` is not beneath the prefix, whatever its spelling.
    let evil = format!("{}/../evil", prefix.display());
    let shown = c.show_config(pb::ShowConfigRequest { workspace: evil }).await.unwrap().into_inner().config_json;
    assert!(untrusted(&shown) > 0, "a project outside the prefix was trusted: {shown}");
    // Nor is one reached through a link beneath it.
    std::os::unix::fs::symlink(base.path().join("evil"), prefix.join("link")).unwrap();
    let link = prefix.join("link").display().to_string();
    let shown = c.show_config(pb::ShowConfigRequest { workspace: link }).await.unwrap().into_inner().config_json;
    assert!(untrusted(&shown) > 0, "a project linked beneath the prefix was trusted: {shown}");
}

#[tokio::test]
async fn agent_written_escapes_never_reach_the_terminal() {
    let nasty = "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x1b[HNo changes.\n";
    let mut env = Env::new(&[]);
    env.set_agents(&[("writer", &["write", "evil.txt", nasty, "report", "success", "wrote"])]);
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(p);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "objective \x1b[2J with a clear");
    req.mode = "write".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
    for args in [vec!["diff", id.as_str()], vec!["status", id.as_str()], vec!["ps"]] {
        let o = env.caesar(&args);
        let said = text(&o);
        assert!(o.status.success(), "{args:?}: {said}");
        assert!(!said.contains('\x1b'), "{args:?} printed an escape: {said:?}");
    }
    let diff = text(&env.caesar(&["diff", &id]));
    assert!(diff.contains("evil.txt") && diff.contains("+No changes."), "{diff:?}");
    // --json stays JSON, the escape escaped in it.
    let o = env.caesar(&["--json", "diff", &id]);
    let v = json(String::from_utf8_lossy(&o.stdout).trim());
    assert!(v["patch"].as_str().unwrap().contains("\x1b]52;c;"), "{v}");
}

#[tokio::test]
async fn one_logs_answer_is_capped_in_bytes() {
    // 12 MiB of output in 64 KiB lines: as many large events.
    let mut env = Env::new(&[("flooder", &["flood", "12582912", "report", "success", "flooded"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("flooder", "flood");
    req.mode = "read-only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
    let l = c
        .logs(pb::LogsRequest { task_id: id.clone(), raw: false, limit: 10_000, max_bytes: 0 })
        .await
        .unwrap()
        .into_inner();
    let bytes: usize = l.events_json.iter().map(String::len).sum();
    let newest = l.events_json.last().map_or(0, String::len);
    assert!(bytes <= 4 * 1024 * 1024 + newest, "one answer carried {bytes} bytes of events");
    assert!((l.events_json.len() as u64) < l.total_events, "{} of {}", l.events_json.len(), l.total_events);
    assert!(l.events_json.last().unwrap().contains("finished"), "the newest events are kept");
    // The CLI says what was cut and how to see the rest.
    let said = text(&env.caesar(&["logs", &id, "--limit", "10000"]));
    assert!(
        said.contains(&format!("of {} events", l.total_events)) && said.contains("--follow"),
        "{}",
        &said[..said.len().min(400)]
    );
}

#[tokio::test]
async fn a_huge_events_file_is_repaired_in_bounded_memory() {
    let mut env = Env::new(&[("waiter", &["say", "hello", "hang"])]);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("waiter", "wait");
    req.mode = "read-only".into();
    let d = c.delegate(req).await.unwrap().into_inner();
    let events = std::path::Path::new(&d.task_dir).join("events.jsonl");
    assert!(eventually(LONG, || std::fs::read_to_string(&events).is_ok_and(|t| t.contains("hello"))).await);
    env.kill_daemons().await;
    // What an agent can write in its task directory: 1 GiB, no newline.
    std::fs::OpenOptions::new().write(true).open(&events).unwrap().set_len(1 << 30).unwrap();
    let mut c = env.start_daemon().await;
    assert!(
        eventually(LONG, || std::fs::metadata(&events).is_ok_and(|m| m.len() < 1 << 20)).await,
        "events.jsonl was not repaired"
    );
    let pid = env.daemon_pid().await;
    let peak = peak_rss_kb(pid);
    assert!(peak < 300 * 1024, "the daemon's peak was {peak} KiB repairing a 1 GiB events.jsonl");
    let repaired = std::fs::read_to_string(&events).unwrap();
    assert!(repaired.starts_with('{') && repaired.contains("hello"), "{repaired}");
    c.cancel(pb::CancelRequest { task_id: d.task_id.clone() }).await.unwrap();
}

/// A repository with one commit, for worktree tasks.
fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(p);
}

#[tokio::test]
async fn a_fifo_an_agent_plants_in_its_worktree_record_blocks_nothing() {
    // The agent replaces its own worktree record's HEAD by a FIFO: libgit2
    // would block on it opening the worktree, and when adding any other.
    let plant = r#"G=$(git rev-parse --absolute-git-dir) && rm -f "$G/HEAD" && mkfifo "$G/HEAD" && echo "$G" > "$CAESAR_HOME/files/planted""#;
    let mut env = Env::new(&[
        ("planter", &["write", "b.txt", "b\n", "sh", plant, "report", "success", "planted"]),
        ("writer", &["write", "a.txt", "a\n", "report", "success", "wrote"]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("planter", "plant a fifo");
    req.mode = "write".into();
    let planter = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &planter, LONG).await;
    assert!(env.file("planted").exists(), "the agent did not plant its FIFO: {t:?}");
    assert!(
        ["succeeded", "failed"].contains(&t.status().as_str()),
        "the planter's task never ended (its conclusion blocked): {t:?}"
    );
    // The next worktree task is prepared, runs and ends.
    let mut req = env.delegate_request("writer", "write a");
    req.mode = "write".into();
    let writer = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &writer, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "the next worktree task was blocked: {t:?}");
    let diff = c.diff(pb::DiffRequest { task_id: writer.clone() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("+a"), "{diff:?}");
    // The planter's worktree, discarded, is removed by gc; nothing blocks.
    c.discard(pb::DiscardRequest { task_id: planter.clone() }).await.unwrap();
    let gc = c.gc(pb::GcRequest { dry_run: false, force: false, older_than_ms: 1 }).await.unwrap().into_inner();
    let item = gc.items.iter().find(|i| i.task_id == planter);
    assert!(item.is_some_and(|i| i.action == "removed"), "{:?}", gc.items);
}

#[tokio::test]
async fn a_link_planted_where_the_snapshot_index_goes_is_never_written_through() {
    // The agent plants links at the names the daemon's snapshot index took
    // (`caesar-snapshot-<daemon pid>-<n>.index` in the worktree's git
    // directory), each to a file of the user's.
    let plant = r#"G=$(git rev-parse --absolute-git-dir); P=$(cat "$CAESAR_HOME/files/daemon.pid")
for n in $(seq 0 300); do ln -s "$CAESAR_HOME/files/precious" "$G/caesar-snapshot-$P-$n.index"; done"#;
    let mut env = Env::new(&[("planter", &["write", "b.txt", "b\n", "sh", plant, "report", "success", "planted"])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    std::fs::write(env.file("daemon.pid"), env.daemon_pid().await.to_string()).unwrap();
    std::fs::write(env.file("precious"), "the user's own\n").unwrap();
    let mut req = env.delegate_request("planter", "plant links");
    req.mode = "write".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "succeeded");
    let diff = c.diff(pb::DiffRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("+b"), "{diff:?}");
    assert_eq!(std::fs::read_to_string(env.file("precious")).unwrap(), "the user's own\n", "written through a link");
}

//! Faults of the machine under the daemon: the disk that holds its state
//! directory fills up.
//!
//! The state directory is a small tmpfs mounted for the test (the tests run
//! as root, in CI too). A test that cannot mount one fails saying so: it
//! never passes without having filled a disk.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use caesar_proto::client::Client;
use caesar_proto::pb;
use common::*;
use tonic::Code;

const LONG: Duration = Duration::from_secs(30);
/// tmpfs hands out space in pages of this size.
const PAGE: u64 = 4096;
/// No daemon log: between the test's own steps nothing writes to the disk.
const QUIET: &[(&str, &str)] = &[("CAESAR_LOG", "off")];

/// A tmpfs mounted over a directory for one test; unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test fills a disk: it must mount a tmpfs at {} and could not (run it as root, as CI does): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs { dir: dir.to_path_buf() }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily when something still holds a file there: the mount goes
        // as soon as it lets go.
        if !Command::new("umount").arg(&self.dir).output().is_ok_and(|o| o.status.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
        }
    }
}

/// Removes a directory tree on drop.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An installation whose state directory is a tmpfs of `size`. Fields drop
/// in order: the daemons stop, then the tmpfs is unmounted, then what the
/// temporary home could not remove under the mount point goes.
struct Fixture {
    env: Env,
    _disk: Tmpfs,
    _home: RemoveOnDrop,
}

impl Fixture {
    fn new(size: &str, agents: &[(&str, &[&str])]) -> Fixture {
        let env = Env::new(agents);
        let disk = Tmpfs::mount(&env.paths.state_dir, size);
        let home = RemoveOnDrop(env.home.path().to_path_buf());
        Fixture { env, _disk: disk, _home: home }
    }

    fn filler(&self) -> PathBuf {
        self.env.paths.state_dir.join("filler")
    }

    /// Takes every page left on the disk.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.filler()).unwrap();
        let page = vec![0u8; PAGE as usize];
        loop {
            if let Err(e) = f.write_all(&page) {
                assert_eq!(e.raw_os_error(), Some(28), "filling stopped for another reason than ENOSPC: {e}");
                break;
            }
        }
    }

    /// Gives `pages` pages back.
    fn free_pages(&self, pages: u64) {
        let f = std::fs::OpenOptions::new().write(true).open(self.filler()).unwrap();
        let len = f.metadata().unwrap().len();
        f.set_len(len - pages * PAGE).unwrap();
    }
}

async fn task_ids(c: &mut Client) -> Vec<String> {
    let r = c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: 1000 }).await.unwrap().into_inner();
    let mut ids: Vec<String> = r.tasks.into_iter().map(|t| t.task_id).collect();
    ids.sort();
    ids
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn a_full_state_disk_refuses_delegation_clearly_and_loses_nothing() {
    let mut fx = Fixture::new("8m", &[("ok", &["say", "working", "report", "success", "done"])]);
    let mut c = fx.env.start_daemon_with(QUIET).await;
    let first = c.delegate(fx.env.delegate_request("ok", "before the disk filled")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &first, LONG).await;
    assert_eq!((t.status().as_str(), t.report_status.as_str()), ("succeeded", "success"));
    let pid = fx.env.daemon_pid().await;

    fx.fill();
    // Not even the task's first file fits (its prompt, issue 19).
    let e = c.delegate(fx.env.delegate_request("ok", "on a full disk")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("prompt.txt: No space left on device")
            && e.message().ends_with("the disk is full; free some space on it and retry"),
        "the refusal names the full disk and the remedy: {}",
        e.message()
    );
    // Two pages: prompt.txt and task.json fit, the store's journal does not.
    fx.free_pages(2);
    let e = c.delegate(fx.env.delegate_request("ok", "with one page free")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().starts_with("store: database or disk is full: no space left on the disk")
            && e.message().contains("nothing of this request was recorded; free some space there and retry"),
        "the store's refusal names the full disk and the remedy: {}",
        e.message()
    );
    // The CLI fails with the same words.
    let out = fx.env.caesar(&["run", "--agent", "ok", "--detach", "from the CLI"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // (Which write fails first depends on what the refused delegations gave back.)
    assert!(
        (stderr.contains("No space left on device") || stderr.contains("disk is full"))
            && stderr.contains("free some space"),
        "{stderr}"
    );

    // The same daemon still serves, and nothing was half recorded.
    assert_eq!(fx.env.daemon_pid().await, pid, "the daemon did not crash");
    assert_eq!(task_ids(&mut c).await, std::slice::from_ref(&first));
    let dirs: Vec<String> = std::fs::read_dir(fx.env.paths.state_dir.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // The first task's directory and its daemon part beside it, nothing else.
    assert_eq!(sorted(dirs), [first.clone(), format!("{first}.daemon")], "refused delegations leave no task directory");
    let s = c.status(pb::StatusRequest { task_id: first.clone() }).await.unwrap().into_inner();
    assert_eq!(s.status().as_str(), "succeeded");

    // SIGKILLed while the disk is still full, it starts again and reads its store.
    fx.env.kill_daemons().await;
    let mut c = fx.env.start_daemon_with(QUIET).await;
    assert_eq!(task_ids(&mut c).await, std::slice::from_ref(&first));
    let h = c.health(pb::HealthRequest { workspace: String::new() }).await.unwrap().into_inner();
    assert!(h.store_ok, "{}", h.store_error);

    // Space again: delegation works, and the earlier task is intact.
    std::fs::remove_file(fx.filler()).unwrap();
    let second = c.delegate(fx.env.delegate_request("ok", "after space was freed")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &second, LONG).await;
    assert_eq!((t.status().as_str(), t.report_status.as_str()), ("succeeded", "success"));
    assert_eq!(json(&t.report_json)["summary"], "done");
    let t = await_one(&mut c, &first, LONG).await;
    assert_eq!((t.status().as_str(), t.report_source.as_str()), ("succeeded", "file"));
    assert_eq!(json(&t.report_json)["summary"], "done");
    assert_eq!(task_ids(&mut c).await, sorted(vec![first.clone(), second.clone()]));
    for id in [&first, &second] {
        let logs = c
            .logs(pb::LogsRequest { task_id: id.clone(), limit: 1000, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let seqs: Vec<u64> = logs.events_json.iter().map(|e| json(e)["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (0..logs.total_events).collect::<Vec<_>>(), "{id}'s events are whole");
    }

    // The file itself, once no daemon holds it: SQLite's full check.
    fx.env.kill_daemons().await;
    let db = rusqlite::Connection::open(fx.env.paths.state_dir.join("caesar.db")).unwrap();
    let verdict: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(verdict, "ok");
    let count: i64 = db.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 2);
}

/// A task running when the disk fills cannot store its ending then; once
/// space is back it must still end, with its report, not stay `running`.
#[tokio::test]
async fn a_task_ending_on_a_full_disk_ends_once_space_is_freed() {
    let env_gate = tempfile::tempdir().unwrap();
    let gate = env_gate.path().join("gate");
    let g = gate.display().to_string();
    let mut fx = Fixture::new(
        "8m",
        &[("gated", &["say", "before", "wait-file", &g, "say", "after", "report", "success", "done"])],
    );
    let mut c = fx.env.start_daemon_with(QUIET).await;
    let id = c.delegate(fx.env.delegate_request("gated", "end on a full disk")).await.unwrap().into_inner().task_id;
    let events = fx.env.paths.state_dir.join("tasks").join(&id).join("events.jsonl");
    assert!(eventually(LONG, || std::fs::read_to_string(&events).is_ok_and(|s| s.contains("before"))).await);

    fx.fill();
    std::fs::write(&gate, "go").unwrap();
    // The agent ends while nothing can be written; then space comes back.
    let agent = supervisor_gone(&fx.env.paths.state_dir.join("tasks").join(&id));
    assert!(eventually(LONG, agent).await, "the task's processes ended");
    std::fs::remove_file(fx.filler()).unwrap();

    let t = await_one(&mut c, &id, Duration::from_secs(10)).await;
    assert_ne!(t.status().as_str(), "running", "the task ended once space was back");
    assert!(!t.report_json.is_empty(), "with a report");
    let logs =
        c.logs(pb::LogsRequest { task_id: id.clone(), limit: 1000, ..Default::default() }).await.unwrap().into_inner();
    let types: Vec<String> =
        logs.events_json.iter().map(|e| json(e)["type"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(types.iter().filter(|t| *t == "finished").count(), 1, "{types:?}");
}

/// Whether no process of the task (its supervisor, its agent) is left.
fn supervisor_gone(task_dir: &Path) -> impl FnMut() -> bool + use<> {
    let needle = format!("CAESAR_TASK_DIR={}", task_dir.display());
    move || {
        let Ok(dir) = std::fs::read_dir("/proc") else { return true };
        !dir.flatten().any(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                && e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()).is_some_and(alive)
        })
    }
}

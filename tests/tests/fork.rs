//! Fork from a point (issue 31, item 4), through the real daemon and CLI:
//! a worktree task's files are kept at each `file_changed` event, and
//! `caesar fork --at <seq>` starts a new task whose worktree holds exactly
//! the files of the events up to that seq.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(60);

/// The seqs of the task's checkpoints, as refs in the user's repository.
fn checkpoints(project: &Path, task_id: &str) -> Vec<u64> {
    let out = git(project, &["for-each-ref", "--format=%(refname)", &format!("refs/caesar/tasks/{task_id}/at/")]);
    let mut seqs: Vec<u64> = out.lines().filter_map(|l| l.rsplit('/').next()?.parse().ok()).collect();
    seqs.sort_unstable();
    seqs
}

fn changed(path: &str) -> String {
    format!(r#"{{"type":"file_changed","path":"{path}","action":"created"}}"#)
}

fn run_ok(env: &Env, args: &[&str]) -> String {
    let o = env.caesar(args);
    assert!(
        o.status.success(),
        "caesar {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn refused(env: &Env, args: &[&str]) -> String {
    let o = env.caesar(args);
    assert_eq!(o.status.code(), Some(2), "caesar {args:?} must be refused: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn a_fork_at_an_event_holds_exactly_the_files_of_the_events_up_to_it() {
    let mut env = Env::new(&[]);
    let gates: Vec<String> = (1..=3).map(|k| env.file(&format!("go{k}")).display().to_string()).collect();
    let (c1, c2, c3) = (changed("one.txt"), changed("two.txt"), changed("three.txt"));
    env.set_agents(&[
        (
            "writer",
            &[
                "write",
                "one.txt",
                "1\n",
                "event",
                &c1,
                "wait-file",
                &gates[0],
                "write",
                "two.txt",
                "2\n",
                "event",
                &c2,
                "wait-file",
                &gates[1],
                "write",
                "three.txt",
                "3\n",
                "event",
                &c3,
                "wait-file",
                &gates[2],
                "report",
                "success",
                "three files",
            ],
        ),
        ("finisher", &["report", "success", "nothing more to do"]),
    ]);
    let p = env.project.path().to_path_buf();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/config.local.toml\n").unwrap();
    commit_base(&p);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest {
        mode: "write".into(),
        isolation: "worktree".into(),
        ..env.delegate_request("writer", "write three files")
    };
    let d = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(d.isolation, "worktree");
    // Each file's event is checkpointed before the agent writes the next
    // file (the agent waits at its gate), so each point is exact.
    for (k, gate) in gates.iter().enumerate() {
        let id = d.task_id.clone();
        assert!(
            eventually(LONG, || checkpoints(&p, &id).len() == k + 1).await,
            "checkpoint {} of {id}: {:?}",
            k + 1,
            checkpoints(&p, &id)
        );
        std::fs::write(gate, "").unwrap();
    }
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);

    // The seq of the event that wrote two.txt, as `caesar logs` shows it.
    let logs = c
        .logs(pb::LogsRequest { task_id: d.task_id.clone(), raw: false, limit: 1000, max_bytes: 0 })
        .await
        .unwrap()
        .into_inner();
    let seq_of = |file: &str| -> u64 {
        logs.events_json
            .iter()
            .map(|l| json(l))
            .find(|e| e["type"] == "file_changed" && e["path"] == file)
            .unwrap_or_else(|| panic!("no file_changed event of {file}: {:?}", logs.events_json))["seq"]
            .as_u64()
            .unwrap()
    };
    let two = seq_of("two.txt");
    assert_eq!(checkpoints(&p, &d.task_id), [seq_of("one.txt"), two, seq_of("three.txt")]);

    // Fork at the event of two.txt, with another agent.
    let at = two.to_string();
    let out = run_ok(&env, &["--json", "fork", &d.task_id, "--at", &at, "--agent", "finisher", "finish the work"]);
    let fork = json(&out)["task_id"].as_str().unwrap().to_owned();
    let f = await_one(&mut c, &fork, LONG).await;
    assert_eq!(f.status().as_str(), "succeeded", "{}", f.error);
    let wt = p.join(".caesar/wt").join(&fork);
    assert!(wt.join("one.txt").is_file() && wt.join("two.txt").is_file(), "the fork holds files 1 and 2");
    assert!(!wt.join("three.txt").exists(), "the fork does not hold file 3, written after its point");

    // Its diff against the original base shows them; status names its lineage.
    let diff = c.diff(pb::DiffRequest { task_id: fork.clone() }).await.unwrap().into_inner();
    let mut files: Vec<&str> = diff.files.iter().map(|f| f.path.as_str()).collect();
    files.sort_unstable();
    assert_eq!(files, ["one.txt", "two.txt"], "{}", diff.patch);
    let status = run_ok(&env, &["status", &fork]);
    assert!(status.contains(&format!("forked_from: {}@{two}", d.task_id)), "{status}");
    // Its brief (the task file's context) names the source, its objective and the point.
    let task = json(&std::fs::read_to_string(Path::new(&f.task_dir).join("task.json")).unwrap());
    let brief = task["context"].as_str().unwrap_or_default();
    for part in [d.task_id.as_str(), "write three files", &format!("event {two}"), "one.txt", "two.txt"] {
        assert!(brief.contains(part), "{part} missing from the brief: {task}");
    }
    assert!(!brief.contains("three.txt"), "{brief}");

    // Applying the fork lands them, and only them.
    let a = c.apply(pb::ApplyRequest { task_id: fork.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(p.join("two.txt")).unwrap(), "2\n");
    assert!(p.join("one.txt").is_file() && !p.join("three.txt").exists());

    // Without --at: the source's latest state, all three files.
    let out = run_ok(&env, &["--json", "fork", &d.task_id, "--agent", "finisher", "go on"]);
    let latest = json(&out)["task_id"].as_str().unwrap().to_owned();
    assert_eq!(await_one(&mut c, &latest, LONG).await.status().as_str(), "succeeded");
    assert!(p.join(".caesar/wt").join(&latest).join("three.txt").is_file());

    // Bad input: each a clear refusal (exit 2) saying what to do.
    let err = refused(&env, &["fork", "t_nope", "x"]);
    assert!(err.contains("unknown task `t_nope`"), "{err}");
    let err = refused(&env, &["fork", &d.task_id, "--at", "100000", "x"]);
    assert!(err.contains("beyond") && err.contains("caesar logs"), "{err}");
    let ro = pb::DelegateRequest {
        mode: "read-only".into(),
        isolation: "inplace".into(),
        ..env.delegate_request("finisher", "look around")
    };
    let inplace = c.delegate(ro).await.unwrap().into_inner();
    await_one(&mut c, &inplace.task_id, LONG).await;
    let err = refused(&env, &["fork", &inplace.task_id, "x"]);
    assert!(err.contains("worked in place") && err.contains("--mode write"), "{err}");
    // A task whose worktree gc removed has nothing left to fork.
    run_ok(&env, &["discard", &latest]);
    let gc = c.gc(pb::GcRequest { dry_run: false, force: false, older_than_ms: 1 }).await.unwrap().into_inner();
    assert!(gc.items.iter().any(|i| i.task_id == latest && i.action == "removed"), "{:?}", gc.items);
    let err = refused(&env, &["fork", &latest, "x"]);
    assert!(err.contains("worktree was removed") && err.contains("nothing left to fork"), "{err}");
}

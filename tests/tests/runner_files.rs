//! A local task's runner is the one its stored record names, never one a
//! file in its directory names (issue 28, defect 1), through the real
//! binaries: every file name the Kubernetes runner reads or writes
//! (`kube.json` naming a cluster, a namespace, a Job and a git remote,
//! `mirror.json`, the stdin queue, the bundles, `runner.findings.jsonl`) is
//! planted in a local task's directory, which its agent may write, and
//! nothing changes: the answer to its question reaches the local agent on
//! its stdin, its report holds no planted finding, discard and gc run no
//! git on the planted remote, cancel stops it, and a task whose supervisor
//! vanished has its agent stopped here.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(30);

fn task_dir(env: &Env, id: &str) -> PathBuf {
    env.paths.state_dir.join("tasks").join(id)
}

/// A bare repository holding `refs/caesar/tasks/<id>/base`, as a
/// Kubernetes task's git remote would: a release would delete the ref.
fn remote_with_task_ref(env: &Env, id: &str) -> PathBuf {
    let remote = env.home.path().join("planted-remote.git");
    git(env.home.path(), &["init", "-q", "--bare", &remote.display().to_string()]);
    let dest = format!("HEAD:refs/caesar/tasks/{id}/base");
    git(env.project.path(), &["push", "-q", &remote.display().to_string(), &dest]);
    remote
}

fn task_refs(remote: &Path, id: &str) -> String {
    git(remote, &["for-each-ref", "--format=%(refname)", &format!("refs/caesar/tasks/{id}/")])
}

/// Writes, in the task's own directory (as its agent could), every file the
/// Kubernetes runner reads or writes there: a `kube.json` for a task with
/// stdin and the channel on an unreachable cluster whose git remote is
/// `remote`, and the rest with plausible content. Not `kube.released`: it
/// would only keep a release from running.
fn plant(dir: &Path, id: &str, remote: &Path, workdir: &str) {
    let meta = serde_json::json!({
        "task_id": id,
        "kubeconfig": dir.join("planted-kubeconfig").display().to_string(),
        "context": "planted",
        "namespace": "planted",
        "job": format!("caesar-{}", id.replace('_', "-")),
        "image": "planted:1",
        "remote": remote.display().to_string(),
        "base": "0000000000000000000000000000000000000000",
        "workdir": workdir,
        "pull_timeout_s": 1,
        "workspace": "git",
        "stdin": true,
        "channel": true,
    });
    std::fs::write(dir.join("kube.json"), meta.to_string()).unwrap();
    std::fs::write(dir.join("planted-kubeconfig"), "apiVersion: v1\nkind: Config\nclusters: []\n").unwrap();
    std::fs::write(dir.join("mirror.json"), r#"{"pod_offset":0,"local_len":0,"gap_bytes":0}"#).unwrap();
    std::fs::write(dir.join("kube-stdin.jsonl"), "{\"planted\":true}\n").unwrap();
    std::fs::write(dir.join("kube-base.bundle"), "planted").unwrap();
    std::fs::write(dir.join("kube-result.bundle"), "planted").unwrap();
    let finding = serde_json::json!({"severity": "high", "title": "planted finding", "detail": "planted"});
    std::fs::write(dir.join("runner.findings.jsonl"), format!("{finding}\n")).unwrap();
}

fn acp_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/acp_agent.py")
}

async fn pending(c: &mut caesar_proto::client::Client, id: &str) -> pb::PendingQuestion {
    for _ in 0..10 {
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.to_owned()], timeout_ms: 10_000, wake_on_attention: true })
            .await
            .unwrap()
            .into_inner();
        if let Some(q) = r.tasks[0].pending_questions.first() {
            return q.clone();
        }
        assert!(r.tasks[0].report_json.is_empty(), "ended without asking: {:?}", r.tasks[0]);
    }
    panic!("no question from {id}");
}

#[tokio::test]
async fn the_answer_to_a_local_task_with_planted_kubernetes_files_reaches_its_agent() {
    let mut env = Env::new(&[]);
    let project = env.project.path().to_path_buf();
    let log = env.file("acp-agent.log");
    std::fs::write(
        project.join(".caesar/config.toml"),
        format!(
            "[[agent]]\nid = \"tiny\"\nbin = {:?}\nprotocol = \"acp\"\nenv = {{ ACP_AGENT_LOG = {:?}, ACP_AGENT_COMMAND = \"echo ran > acp.txt\" }}\n",
            acp_agent().display().to_string(),
            log.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(project.join(".gitignore"), ".caesar/\n").unwrap();
    std::fs::write(project.join("README.md"), "hello\n").unwrap();
    commit_base(&project);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("tiny", "Run the command.");
    req.mode = "write".into();
    req.isolation = "worktree".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let q = pending(&mut c, &id).await;
    plant(&task_dir(&env, &id), &id, &env.home.path().join("planted-remote.git"), &env.workspace());
    // The answer goes to the local agent's stdin, not to a pump into the planted cluster.
    c.answer(pb::AnswerRequest { task_id: id.clone(), question_id: q.question_id.clone(), answer: "yes-once".into() })
        .await
        .unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "the answer reached the agent: {t:?}");
    let answered = std::fs::read_to_string(&log).unwrap();
    assert!(answered.contains("yes-once"), "the agent read the answer: {answered}");
}

#[tokio::test]
async fn a_local_tasks_report_discard_and_gc_ignore_planted_kubernetes_files() {
    let env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    env.set_agents(&[("writer", &["wait-file", &g, "write", "new.txt", "new", "report", "success", "wrote it"])]);
    std::fs::write(env.project.path().join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(env.project.path());
    let mut env = env;
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "write");
    req.mode = "write".into();
    req.isolation = "worktree".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let remote = remote_with_task_ref(&env, &id);
    let dir = task_dir(&env, &id);
    plant(&dir, &id, &remote, &env.workspace());
    std::fs::write(&gate, "go").unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert!(!t.report_json.contains("planted"), "no planted finding in the report: {}", t.report_json);

    // Discard, then gc (which retries every release and waits for it): no
    // git runs on the planted remote, whose ref stays.
    c.discard(pb::DiscardRequest { task_id: id.clone() }).await.unwrap();
    c.gc(pb::GcRequest { older_than_ms: 1, ..Default::default() }).await.unwrap();
    assert_eq!(
        task_refs(&remote, &id).trim(),
        format!("refs/caesar/tasks/{id}/base"),
        "the planted remote's ref stays"
    );
    for released in [dir.join("kube.released"), caesar_tests::daemon_files(&dir).join("kube.released")] {
        assert!(!released.exists(), "nothing was released: {}", released.display());
    }
}

#[tokio::test]
async fn a_local_task_with_planted_kubernetes_files_is_cancelled_and_its_remains_stopped_here() {
    let env = Env::new(&[]);
    let pidfile = env.file("pids");
    let pf = pidfile.display().to_string();
    env.set_agents(&[("hanger", &["pid", &pf, "hang"])]);
    let mut env = env;
    let mut c = env.start_daemon().await;
    let remote = env.home.path().join("planted-remote.git");

    // Cancel stops the local run.
    let id = c.delegate(env.delegate_request("hanger", "hang")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 1).await);
    plant(&task_dir(&env, &id), &id, &remote, &env.workspace());
    let agent = pids_in(&pidfile)[0];
    let cancelled = c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(cancelled.cancelled, "{cancelled:?}");
    assert_eq!(await_one(&mut c, &id, LONG).await.status().as_str(), "cancelled");
    assert!(eventually(LONG, || !alive(agent)).await, "the local agent was stopped");

    // Its supervisor dies without a word while no daemon runs: the next
    // daemon stops what is left of it here, not through the planted Job.
    let id = c.delegate(env.delegate_request("hanger", "hang")).await.unwrap().into_inner().task_id;
    assert!(eventually(LONG, || pids_in(&pidfile).len() == 2).await);
    plant(&task_dir(&env, &id), &id, &remote, &env.workspace());
    let agent = pids_in(&pidfile)[1];
    let supervisor = supervisor_of(agent) as i32;
    env.kill_daemons().await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(eventually(LONG, || !alive(supervisor as u32)).await);
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "failed", "{t:?}");
    assert!(t.error.contains("vanished"), "{}", t.error);
    assert!(eventually(LONG, || !alive(agent)).await, "the task's own agent was stopped here");
}

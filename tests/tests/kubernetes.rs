//! The Kubernetes runner end to end: a real daemon, its real kube client,
//! an ordinary kubeconfig, and the `k8s-sim` API simulator whose process
//! kubelet runs each pod's `caesard __kube pod` (and so the supervisor and
//! the fake agent) as local processes. The workspace travels through a
//! local bare git repository standing for the team's git server.

#![allow(clippy::unwrap_used)]

mod common;
mod k8s_common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;
use k8s_common::*;

#[tokio::test]
async fn a_task_runs_as_a_job_and_its_report_and_diff_come_back() {
    let sim = Sim::start(&["--secret", "caesar-keys:FAKE_PROVIDER_KEY=sk-not-in-any-file"]);
    let mut env = Env::new(&[]);
    env.set_agents(&[(
        "writer",
        &[
            "say",
            "hello from the pod",
            "env",
            "FAKE_PROVIDER_KEY",
            "sh",
            "mktemp >/dev/null && echo \"temp files in $TMPDIR\"",
            "write",
            "src/new.rs",
            "fn main() {}\n",
            "write",
            "README.md",
            "hello\nworld\n",
            "report",
            "success",
            "done remotely",
        ],
    )]);
    project(&env, &sim, "registry.example/caesar-agent:1", "credentials_secret = \"caesar-keys\"\n");
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("writer", "add a main")).await.unwrap().into_inner();
    assert_eq!(d.isolation, "worktree");
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let report = json(&t.report_json);
    assert_eq!(report["summary"], "done remotely");
    let mut paths: Vec<&str> =
        report["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    paths.sort();
    assert_eq!(paths, ["README.md", "src/new.rs"], "{report}");

    let logs = all_logs(&mut c, &d.task_id).await;
    let texts = messages(&logs);
    assert!(texts.contains(&"hello from the pod".to_owned()), "{texts:?}");
    // The provider key reached the agent from the Secret, and no task file holds it.
    assert!(texts.contains(&"FAKE_PROVIDER_KEY=sk-not-in-any-file".to_owned()), "{texts:?}");
    // Its TMPDIR, the task directory's tmp/ as on the laptop, exists in the pod.
    assert!(texts.contains(&"temp files in /ws/.caesar/tmp".to_owned()), "{texts:?}");
    // kube.json is the runner's, in the daemon part (issue 28).
    let kube_json = caesar_tests::daemon_files(task_dir(&env, &d.task_id)).join("kube.json");
    for f in [task_dir(&env, &d.task_id).join("task.json"), kube_json] {
        let s = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(!s.contains("sk-not-in-any-file"), "{} holds the credential", f.display());
    }

    // The Job the runner sent.
    let accepted = sim.get_json("/sim/accepted");
    let job = &accepted[0];
    assert_eq!(job["metadata"]["name"], format!("caesar-{}", d.task_id.replace('_', "-")));
    assert_eq!(job["metadata"]["labels"]["caesar.dev/task-id"], d.task_id);
    assert_eq!(job["spec"]["backoffLimit"], 0);
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert!(job["spec"]["activeDeadlineSeconds"].as_u64().unwrap() > 0);
    assert_eq!(job["spec"]["template"]["spec"]["containers"][0]["command"][1], "__kube");
    assert!(!job.to_string().contains("sk-not-in-any-file"));
    validate_against_official_schemas(&sim, job);
    // The workspace went through the remote.
    let refs = git(&sim.remote(), &["for-each-ref", "--format=%(refname)"]);
    assert!(refs.contains(&format!("refs/caesar/tasks/{}/base", d.task_id)), "{refs}");
    assert!(refs.contains(&format!("refs/caesar/tasks/{}/result", d.task_id)), "{refs}");

    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(diff.files.len(), 2, "{:?}", diff.files);
    assert!(diff.patch.contains("+world"));
    let a = c.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\nworld\n");
    assert!(env.project.path().join("src/new.rs").exists());
    // Applied: the task's refs leave the remote (in the background).
    assert!(eventually(LONG, || task_refs(&sim, &d.task_id).is_empty()).await, "{:?}", task_refs(&sim, &d.task_id));
}

/// A worktree task on the simulator that changed README.md, finished.
async fn finished_writer(env: &mut Env, sim: &Sim) -> (caesar_proto::client::Client, String) {
    env.set_agents(&[("writer", &["write", "README.md", "hello\nagain\n", "report", "success", "ok"])]);
    project(env, sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("writer", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    assert_eq!(task_refs(sim, &id).len(), 2, "base and result pushed");
    (c, id)
}

#[tokio::test]
async fn the_agent_container_holds_neither_git_credential() {
    // The remote is reachable only as `caesar-remote:`, a name that the
    // git credentials (environment from two Secrets) map to the bare
    // repository: the init container fetches with one, the collector pushes
    // with the other, and the agent container has neither.
    let cred = |secret: &str, token: &str| {
        [
            format!("{secret}:GIT_CONFIG_COUNT=1"),
            format!("{secret}:GIT_CONFIG_KEY_0=url.{{dir}}/remote.git.insteadOf"),
            format!("{secret}:GIT_CONFIG_VALUE_0=caesar-remote:"),
            format!("{secret}:{token}"),
        ]
        .map(|s| ["--secret".to_owned(), s])
        .concat()
    };
    let args =
        [cred("git-read", "GIT_READ_TOKEN=r-secret-1"), cred("git-write", "GIT_WRITE_TOKEN=w-secret-2")].concat();
    let sim = Sim::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // What the agent sees, from inside: its environment, a search of every
    // file it can reach for either token (spelled apart so the search's own
    // text never matches), the git volume, and a push of its own.
    let scan = r#"[ -n "$CAESAR_POD_ROOT" ] || echo no-pod-root
if grep -RqsF "hello" "$CAESAR_POD_ROOT/"; then echo scan-reaches-the-workspace; fi
if grep -RqsF -e "r-secret""-1" -e "w-secret""-2" "$CAESAR_POD_ROOT/" "$HOME" /proc/self/environ; then echo creds-found; else echo creds-absent; fi
if [ -e "$CAESAR_POD_ROOT/git" ]; then echo git-volume-visible; else echo git-volume-absent; fi
if git push -q caesar-remote: HEAD:refs/heads/agent 2>/dev/null; then echo agent-pushed; else echo agent-cannot-push; fi"#;
    let mut env = Env::new(&[]);
    env.set_agents(&[(
        "writer",
        &[
            "env",
            "GIT_READ_TOKEN",
            "env",
            "GIT_WRITE_TOKEN",
            "env",
            "GIT_CONFIG_COUNT",
            "sh",
            scan,
            "write",
            "README.md",
            "hello\nfrom a pod without credentials\n",
            "report",
            "success",
            "ok",
        ],
    )]);
    project(&env, &sim, "caesar-agent:1", "git_read_secret = \"git-read\"\ngit_write_secret = \"git-write\"\n");
    let remote = sim.remote().display().to_string();
    git(env.project.path(), &["config", &format!("url.{remote}.insteadOf"), "caesar-remote:"]);
    let local = env.project.path().join(".caesar/config.local.toml");
    let text = std::fs::read_to_string(&local)
        .unwrap()
        .replace(&format!("git_remote = {remote:?}"), "git_remote = \"caesar-remote:\"");
    std::fs::write(&local, text).unwrap();
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("writer", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let texts = messages(&all_logs(&mut c, &id).await);
    for line in [
        "GIT_READ_TOKEN=",
        "GIT_WRITE_TOKEN=",
        "GIT_CONFIG_COUNT=",
        "scan-reaches-the-workspace",
        "creds-absent",
        "git-volume-absent",
        "agent-cannot-push",
    ] {
        assert!(texts.contains(&line.to_owned()), "{line} not in {texts:?}");
    }
    assert!(!texts.contains(&"no-pod-root".to_owned()), "{texts:?}");
    // The result came back through the collector, and applies.
    assert_eq!(task_refs(&sim, &id).len(), 2);
    let a = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(a.applied, "{a:?}");
    assert_eq!(
        std::fs::read_to_string(env.project.path().join("README.md")).unwrap(),
        "hello\nfrom a pod without credentials\n"
    );
    // The Job: the Secrets only on the init and collector containers; checked
    // against the official schemas.
    let job = &sim.get_json("/sim/accepted")[0];
    let spec = &job["spec"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0]["envFrom"][0]["secretRef"]["name"], "git-read");
    assert_eq!(spec["containers"][1]["envFrom"][0]["secretRef"]["name"], "git-write");
    assert!(spec["containers"][0].get("envFrom").is_none(), "{}", spec["containers"][0]);
    validate_against_official_schemas(&sim, job);
}

#[tokio::test]
async fn refs_go_at_discard_and_a_failed_deletion_is_retried_at_gc() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let (mut c, id) = finished_writer(&mut env, &sim).await;
    // The remote is unreachable when the task is discarded: discard still
    // answers at once, and the refs stay.
    let away = sim.dir.path().join("remote.away");
    std::fs::rename(sim.remote(), &away).unwrap();
    c.discard(pb::DiscardRequest { task_id: id.clone() }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::rename(&away, sim.remote()).unwrap();
    assert_eq!(task_refs(&sim, &id).len(), 2, "the deletion failed");
    let released = caesar_tests::daemon_files(task_dir(&env, &id)).join("kube.released");
    assert!(!released.exists());
    // The next gc deletes them, and records it.
    c.gc(pb::GcRequest { older_than_ms: 1, ..Default::default() }).await.unwrap();
    assert!(task_refs(&sim, &id).is_empty(), "{:?}", task_refs(&sim, &id));
    assert!(released.exists());
    // A gc after that has nothing left to do and does not fail.
    c.gc(pb::GcRequest { older_than_ms: 1, ..Default::default() }).await.unwrap();
}

#[tokio::test]
async fn refs_of_an_undecided_task_go_when_gc_removes_its_worktree() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let (mut c, id) = finished_writer(&mut env, &sim).await;
    // Not forced: the unapplied worktree and its refs are kept.
    c.gc(pb::GcRequest { older_than_ms: 1, ..Default::default() }).await.unwrap();
    assert_eq!(task_refs(&sim, &id).len(), 2);
    let gc = c.gc(pb::GcRequest { older_than_ms: 1, force: true, ..Default::default() }).await.unwrap().into_inner();
    assert!(gc.items.iter().any(|i| i.task_id == id && i.action == "removed"), "{:?}", gc.items);
    assert!(task_refs(&sim, &id).is_empty(), "{:?}", task_refs(&sim, &id));
}

#[tokio::test]
async fn the_runner_is_chosen_per_role_and_per_delegation() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("quick", &["say", "hi", "report", "success", "ok"])]);
    project(&env, &sim, "caesar-agent:1", "");
    // The project runs locally; one role and single delegations go remote.
    let local = env.project.path().join(".caesar/config.local.toml");
    let text = std::fs::read_to_string(&local).unwrap().replace("kind = \"kubernetes\"", "kind = \"local\"");
    std::fs::write(&local, text).unwrap();
    let shared = env.project.path().join(".caesar/config.toml");
    std::fs::write(
        &shared,
        std::fs::read_to_string(&shared).unwrap()
            + "[[role]]\nname = \"remote\"\nagents = [\"quick\"]\nmode = \"read-only\"\nrunner = \"kubernetes\"\n",
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let ran_remotely = |id: &str| caesar_tests::daemon_files(task_dir(&env, id)).join("kube.json").exists();
    let by_role = |runner: &str| pb::DelegateRequest {
        agent: String::new(),
        role: "remote".into(),
        runner: runner.into(),
        ..env.delegate_request("", "x")
    };
    let by_agent = |runner: &str| pb::DelegateRequest {
        mode: "read_only".into(),
        runner: runner.into(),
        ..env.delegate_request("quick", "x")
    };
    let mut ids = Vec::new();
    for (req, remote) in
        [(by_role(""), true), (by_agent("kubernetes"), true), (by_agent(""), false), (by_role("local"), false)]
    {
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
        assert_eq!(ran_remotely(&id), remote, "{id}");
        ids.push(id);
    }
    assert_eq!(sim.stats()["jobs"], 2, "two Jobs: the role's task and the delegation's");
    for id in &ids[..2] {
        assert_eq!(sim.pods_of(id).len(), 1, "{id} ran on the cluster");
    }
    // An unknown runner is refused by name.
    let e = c.delegate(by_agent("k8s")).await.expect_err("unknown").message().to_owned();
    assert!(e.contains("`runner`") && e.contains("\"local\" or \"kubernetes\""), "{e}");
    // Without [runner.kubernetes], a role or a delegation asking for the
    // cluster is refused with what is missing, and nothing is created.
    std::fs::remove_file(&local).unwrap();
    let e = c.delegate(by_role("")).await.expect_err("no cluster").message().to_owned();
    assert!(e.contains("role `remote`") && e.contains("runner.kubernetes.namespace"), "{e}");
    let e = c.delegate(by_agent("kubernetes")).await.expect_err("no cluster").message().to_owned();
    assert!(e.contains("the delegation's `runner") && e.contains("runner.kubernetes.namespace"), "{e}");
    assert_eq!(sim.stats()["jobs"], 2);
    assert_eq!(c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks.len(), 4);
}

#[tokio::test]
async fn a_daemon_killed_mid_task_reattaches_with_no_output_lost_or_repeated() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let gate = env.file("gate").display().to_string();
    env.set_agents(&[(
        "gated",
        &[
            "say",
            "before the kill",
            "wait-file",
            &gate,
            "lines",
            "200",
            "say",
            "after the kill",
            "report",
            "success",
            "survived",
        ],
    )]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = read_only(&mut c, &env, "gated").await;
    assert!(eventually(LONG, wait_for(&task_dir(&env, &id).join("events.jsonl"), "before the kill")).await);
    env.kill_daemons().await;
    // The pod goes on while no daemon runs.
    std::fs::write(&gate, "go").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = env.start_daemon().await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    assert_eq!(json(&t.report_json)["summary"], "survived");
    let texts = messages(&all_logs(&mut c, &id).await);
    let mut want = vec!["before the kill".to_owned()];
    want.extend((0..200).map(|i| format!("line {i}")));
    want.push("after the kill".to_owned());
    assert_eq!(texts, want, "every line once, in order");
}

#[tokio::test]
async fn dropped_log_streams_resume_without_gap_or_duplicate() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let mut steps: Vec<String> = Vec::new();
    for i in 0..30 {
        steps.extend(["say".into(), format!("chunk {i} {}", "x".repeat(20_000)), "sleep".into(), "40".into()]);
    }
    steps.extend(["report".into(), "success".into(), "resumed".into()]);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    env.set_agents(&[("slow", &steps)]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = read_only(&mut c, &env, "slow").await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(sim.http("POST", "/sim/drop-logs", "").0, 200);
    }
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let texts = messages(&all_logs(&mut c, &id).await);
    let want: Vec<String> = (0..30).map(|i| format!("chunk {i} {}", "x".repeat(20_000))).collect();
    if texts.len() != want.len() {
        eprintln!(
            "DEBUG mirror {}",
            std::fs::read_to_string(task_dir(&env, &id).join("mirror.json")).unwrap_or_default()
        );
        let raw = std::fs::read_to_string(caesar_tests::daemon_files(task_dir(&env, &id)).join("raw.log"))
            .unwrap_or_default();
        eprintln!("DEBUG raw lines {} bytes {}", raw.lines().count(), raw.len());
        for e in std::fs::read_dir(sim.dir.path().join("state/pods")).unwrap().flatten() {
            let r = std::fs::read_to_string(e.path().join("ws/.caesar.daemon/raw.log")).unwrap_or_default();
            eprintln!("DEBUG pod raw lines {} bytes {}", r.lines().count(), r.len());
        }
        let got: Vec<String> = texts.iter().map(|t| t.chars().take(10).collect()).collect();
        eprintln!("DEBUG got {got:?} report {}", t.report_json);
    }
    assert_eq!(texts.len(), want.len(), "one message per line, none doubled");
    assert!(texts == want, "the 20 KB lines arrive whole and in order");
}

#[tokio::test]
async fn cancel_deletes_the_job_and_waits_for_its_pod() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("hang", &["say", "agent-up", "hang"])]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = read_only(&mut c, &env, "hang").await;
    assert!(eventually(LONG, wait_for(&task_dir(&env, &id).join("events.jsonl"), "agent-up")).await);
    c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled", "{}", t.error);
    assert!(sim.pods_of(&id).is_empty(), "the pod is gone when the cancel is done");
    assert!(eventually(Duration::from_secs(10), || sim.stats()["processes"] == 0).await, "no pod process left");
}

#[tokio::test]
async fn a_job_deleted_behind_caesars_back_fails_the_task_with_the_reason() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("hang", &["say", "agent-up", "hang"])]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    let id = read_only(&mut c, &env, "hang").await;
    assert!(eventually(LONG, wait_for(&task_dir(&env, &id).join("events.jsonl"), "agent-up")).await);
    let job = format!("caesar-{}", id.replace('_', "-"));
    let (code, body) = sim.http(
        "DELETE",
        &format!("/apis/batch/v1/namespaces/caesar/jobs/{job}"),
        r#"{"propagationPolicy":"Background"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "failed");
    assert!(t.error.contains("deleted outside caesar"), "{}", t.error);
}

#[tokio::test]
async fn evicted_pods_and_lost_nodes_fail_the_task_with_the_kubernetes_reason() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("hang", &["say", "agent-up", "hang"])]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    for (fault, reason) in [("evict", "Evicted"), ("lose-node", "NodeLost")] {
        let id = read_only(&mut c, &env, "hang").await;
        assert!(eventually(LONG, wait_for(&task_dir(&env, &id).join("events.jsonl"), "agent-up")).await);
        let pod = sim.pods_of(&id)[0]["metadata"]["name"].as_str().unwrap().to_owned();
        assert_eq!(sim.http("POST", &format!("/sim/{fault}/caesar/{pod}"), "").0, 200);
        let t = await_one(&mut c, &id, LONG).await;
        assert_eq!(t.status().as_str(), "failed", "{fault}");
        assert!(t.error.contains(reason), "{fault}: {}", t.error);
    }
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_fails_the_task_at_start() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("quick", &["say", "never printed"])]);
    project(&env, &sim, "unpullable/caesar-agent:1", "image_pull_timeout_seconds = 1\n");
    let mut c = env.start_daemon().await;
    let id = read_only(&mut c, &env, "quick").await;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "failed");
    assert!(t.error.contains("cannot be pulled") && t.error.contains("ImagePull"), "{}", t.error);
    assert!(eventually(LONG, || sim.pods_of(&id).is_empty()).await, "the Job is deleted");
}

/// Delegates `agent` read-only on objective "x"; the task's id.
async fn read_only(c: &mut caesar_proto::client::Client, env: &Env, agent: &str) -> String {
    let mut req = env.delegate_request(agent, "x");
    req.mode = "read_only".into();
    c.delegate(req).await.unwrap().into_inner().task_id
}

async fn refused(env: &Env, c: &mut caesar_proto::client::Client) -> String {
    let mut req = env.delegate_request("quick", "x");
    req.mode = "read_only".into();
    c.delegate(req).await.expect_err("refused").message().to_owned()
}

#[tokio::test]
async fn bad_cluster_settings_are_refused_at_delegate_and_nothing_is_created() {
    let sim = Sim::start(&["--forbid", "create:jobs"]);
    let mut env = Env::new(&[("quick", &["say", "hi"])]);
    project(&env, &sim, "caesar-agent:1", "");
    let mut c = env.start_daemon().await;
    // RBAC forbids creating Jobs.
    let e = refused(&env, &mut c).await;
    assert!(e.contains("forbidden") && e.contains("rbac"), "{e}");
    // A namespace that does not exist (on a cluster that lets us create Jobs).
    let sim = Sim::start(&[]);
    runner_config(&env, &sim, "caesar-agent:1", "");
    let text = std::fs::read_to_string(env.project.path().join(".caesar/config.local.toml")).unwrap();
    std::fs::write(
        env.project.path().join(".caesar/config.local.toml"),
        text.replace("namespace = \"caesar\"", "namespace = \"nope\""),
    )
    .unwrap();
    let e = refused(&env, &mut c).await;
    assert!(e.contains("namespaces \"nope\" not found") && e.contains("kubectl create namespace"), "{e}");
    // An image name that is no reference.
    runner_config(&env, &sim, "Not A/Valid:Image", "");
    let e = refused(&env, &mut c).await;
    assert!(e.contains("image") && e.contains("not a valid image reference"), "{e}");
    // No kubeconfig.
    let text = std::fs::read_to_string(env.project.path().join(".caesar/config.local.toml")).unwrap();
    let missing = sim.dir.path().join("missing-kubeconfig").display().to_string();
    let text =
        text.replace(&sim.kubeconfig().display().to_string(), &missing).replace("Not A/Valid:Image", "caesar-agent:1");
    std::fs::write(env.project.path().join(".caesar/config.local.toml"), text).unwrap();
    let e = refused(&env, &mut c).await;
    assert!(e.contains("no kubeconfig") && e.contains("KUBECONFIG"), "{e}");
    // An API server that does not answer.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    std::fs::write(&missing, sim.kubeconfig_text(dead_port)).unwrap();
    let e = refused(&env, &mut c).await;
    assert!(e.contains("cannot reach the Kubernetes API server"), "{e}");
    // Nothing was created, and no task recorded.
    assert_eq!(sim.stats()["jobs"], 0);
    let list = c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner();
    assert!(list.tasks.is_empty(), "{:?}", list.tasks);
}

#[tokio::test]
async fn a_hundred_tasks_at_once_all_come_back() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("quick", &["say", "hi", "report", "success", "ok"])]);
    project(&env, &sim, "caesar-agent:1", "");
    allow_parallel(&env, 100);
    let mut c = env.start_daemon().await;
    let mut ids = Vec::new();
    for _ in 0..100 {
        ids.push(read_only(&mut c, &env, "quick").await);
    }
    for id in &ids {
        let t = await_one(&mut c, id, Duration::from_secs(300)).await;
        assert_eq!(t.status().as_str(), "succeeded", "{id}: {}", t.error);
    }
    let stats = sim.stats();
    assert_eq!(stats["jobs"], 100, "{stats}");
    assert!(stats["open_watches"].as_u64().unwrap() <= 2, "one watch of Jobs and one of Pods: {stats}");
}

/// Log requests are bounded (issue 33 item 4): past `CAESAR_KUBE_LOG_STREAMS`
/// followed logs, a task's log is read in turns, and every task's output
/// still comes back whole.
#[tokio::test]
async fn past_the_bound_of_log_streams_logs_are_read_in_turns() {
    let sim = Sim::start(&[]);
    let mut env =
        Env::new(&[("chatty", &["say", "line one", "sleep", "1500", "say", "line two", "report", "success", "ok"])]);
    project(&env, &sim, "caesar-agent:1", "");
    allow_parallel(&env, 30);
    let mut c = env.start_daemon_with(&[("CAESAR_KUBE_LOG_STREAMS", "4")]).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(read_only(&mut c, &env, "chatty").await);
    }
    for id in &ids {
        let t = await_one(&mut c, id, Duration::from_secs(300)).await;
        assert_eq!(t.status().as_str(), "succeeded", "{id}: {}", t.error);
        let texts = messages(&all_logs(&mut c, id).await);
        let said = |line: &str| texts.iter().any(|t| t.contains(line));
        assert!(said("line one") && said("line two"), "{id}'s output came back whole: {texts:?}");
    }
    let stats = sim.stats();
    assert_eq!(stats["jobs"], 20, "{stats}");
    assert!(stats["peak_follows"].as_u64().unwrap() <= 4, "at most 4 logs followed at once: {stats}");
    // The reads in turns are bounded too: 4 followed plus 4 read at once.
    assert!(stats["peak_log_streams"].as_u64().unwrap() <= 8, "at most 8 log requests at once: {stats}");
}

/// Lets the project run `n` tasks at once (`[policy] max_parallel`).
fn allow_parallel(env: &Env, n: u32) {
    let config = env.project.path().join(".caesar/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(config, text + &format!("[policy]\nmax_parallel = {n}\n")).unwrap();
}

/// Against a real cluster (kind or k3d) with the agent image loaded:
/// `CAESAR_K8S_E2E=1 CAESAR_K8S_IMAGE=caesar-agent:dev CAESAR_K8S_REMOTE=<git url the cluster reaches>
///  cargo nextest run -p caesar-tests --test kubernetes --run-ignored only`
#[tokio::test]
#[ignore = "needs a real cluster: kind create cluster && kind load docker-image caesar-agent:dev"]
async fn real_cluster_round_trip() {
    if std::env::var("CAESAR_K8S_E2E").as_deref() != Ok("1") {
        return;
    }
    let image = std::env::var("CAESAR_K8S_IMAGE").unwrap();
    let remote = std::env::var("CAESAR_K8S_REMOTE").unwrap();
    let mut env = Env::new(&[("quick", &["say", "hi", "report", "success", "ok"])]);
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "base"]);
    std::fs::write(
        p.join(".caesar/config.local.toml"),
        format!("[runner]\nkind = \"kubernetes\"\n[runner.kubernetes]\nnamespace = \"caesar\"\nimage = {image:?}\ngit_remote = {remote:?}\n"),
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let id = read_only(&mut c, &env, "quick").await;
    let t = await_one(&mut c, &id, Duration::from_secs(600)).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
}

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.split_whitespace().next()?.parse().ok()))
        .unwrap_or(0)
}

/// The daemon's established TCP connections to the simulator's port.
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let want = format!(":{port:04X}");
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[2].ends_with(&want) && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

/// The figures in BENCHMARKS.md ("Kubernetes runner, on k8s-sim"). Not a
/// timed test: it prints what it measures and asserts only that the tasks
/// run. `CAESAR_K8S_BENCH_TASKS=100,500 [CAESAR_K8S_BENCH_KUBELET=light]
/// cargo nextest run -p caesar-tests --test kubernetes --run-ignored only
/// -E 'test(figures)' --no-capture`
#[tokio::test]
#[ignore = "measurement, run by hand for BENCHMARKS.md"]
async fn figures() {
    let counts: Vec<usize> = std::env::var("CAESAR_K8S_BENCH_TASKS")
        .unwrap_or_else(|_| "100".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let stamps = env.file("stamps").display().to_string();
    let gate = env.file("gate").display().to_string();
    env.set_agents(&[
        ("stamp", &["stamp", &stamps, "say", "up"]),
        ("latency", &["sleep", "300", "stamp", &stamps, "say", "ping"]),
        ("hang", &["say", "agent-up", "wait-file", &gate]),
    ]);
    project(&env, &sim, "caesar-agent:1", "");
    allow_parallel(&env, 1000);
    let mut c = env.start_daemon().await;
    let pid = env.daemon_pid().await;
    // Delegate → agent started, ten times, one at a time.
    let mut starts = Vec::new();
    for _ in 0..10 {
        let _ = std::fs::remove_file(&stamps);
        let mut req = env.delegate_request("stamp", "x");
        req.mode = "read_only".into();
        let t0 = now_ns();
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        await_one(&mut c, &id, LONG).await;
        let t1: u128 = std::fs::read_to_string(&stamps).unwrap().trim().parse().unwrap();
        starts.push((t1 - t0) as f64 / 1e6);
    }
    starts.sort_by(f64::total_cmp);
    println!("FIGURE delegate->agent started ms: median {:.1} max {:.1}", starts[5], starts[9]);
    // Pod output → the daemon's event stream (what `caesar logs -f` reads).
    let mut lat = Vec::new();
    for _ in 0..10 {
        let _ = std::fs::remove_file(&stamps);
        let id = read_only(&mut c, &env, "latency").await;
        let mut stream = c
            .watch_events(pb::WatchEventsRequest { task_id: id.clone(), from_seq: 0, follow: true })
            .await
            .unwrap()
            .into_inner();
        while let Some(Ok(ev)) = futures_util::StreamExt::next(&mut stream).await {
            if ev.event_json.contains("\"ping\"") {
                let seen = now_ns();
                let t1: u128 = std::fs::read_to_string(&stamps).unwrap().trim().parse().unwrap();
                lat.push((seen - t1) as f64 / 1e6);
                break;
            }
        }
        await_one(&mut c, &id, LONG).await;
    }
    lat.sort_by(f64::total_cmp);
    println!("FIGURE pod output -> watch_events ms: median {:.1} max {:.1}", lat[5], lat[9]);
    // The many-task figures: with `CAESAR_K8S_BENCH_KUBELET=light`, on a
    // second simulator whose kubelet runs no processes (the daemon's side
    // is the same; the pods' 3 processes each are what it spares).
    let light = std::env::var("CAESAR_K8S_BENCH_KUBELET").as_deref() == Ok("light");
    let light_sim = light.then(|| Sim::start(&["--kubelet", "light"]));
    let sim = match &light_sim {
        Some(l) => {
            runner_config(&env, l, "caesar-agent:1", "");
            l
        }
        None => &sim,
    };
    for n in counts {
        let _ = std::fs::remove_file(&gate);
        let rss0 = rss_kib(pid);
        let t0 = std::time::Instant::now();
        // As a fan-out or many clients would: up to 50 delegations in
        // flight at once over the one connection (issue 33: no step of a
        // delegation may be serialized across tasks).
        let in_flight = std::env::var("CAESAR_K8S_BENCH_IN_FLIGHT").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
        let ids: Vec<String> = futures_util::StreamExt::collect(futures_util::StreamExt::buffer_unordered(
            futures_util::stream::iter((0..n).map(|_| {
                let mut c = c.clone();
                let env = &env;
                async move { read_only(&mut c, env, "hang").await }
            })),
            in_flight,
        ))
        .await;
        let delegated = t0.elapsed();
        let all_up = eventually(Duration::from_secs(600), || {
            ids.iter().all(|id| {
                std::fs::read_to_string(task_dir(&env, id).join("events.jsonl")).is_ok_and(|s| s.contains("agent-up"))
            })
        })
        .await;
        assert!(all_up, "all {n} agents started");
        let up = t0.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let stats = sim.stats();
        println!(
            "FIGURE {n} remote tasks running: delegated in {:.1} s, all agents up in {:.1} s, daemon RSS {} MiB (was {} MiB), daemon TCP connections to the API server {}, sim log streams {} watches {}",
            delegated.as_secs_f64(),
            up.as_secs_f64(),
            rss_kib(pid) / 1024,
            rss0 / 1024,
            connections_to(pid, sim.port),
            stats["open_log_streams"],
            stats["open_watches"],
        );
        std::fs::write(&gate, "go").unwrap();
        for id in &ids {
            await_one(&mut c, id, Duration::from_secs(600)).await;
        }
    }
}

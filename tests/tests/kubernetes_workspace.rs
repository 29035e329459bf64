//! The Kubernetes runner's workspace: `workspace = "api"` (the base in and
//! the result out as git bundles over `pods/exec`, no git server) and an
//! agent that forges the end of its own task through the files it shares
//! with the pod's wrapper and collector. A real daemon, its real kube
//! client and `k8s-sim`, as in `kubernetes.rs`.

#![allow(clippy::unwrap_used)]

mod common;
mod k8s_common;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use caesar_proto::pb;
use common::*;
use k8s_common::*;

/// Points the project's tasks at the simulator with `workspace = "api"`
/// and no git remote at all.
fn api_config(env: &Env, sim: &Sim) {
    let text = format!(
        "[runner]\nkind = \"kubernetes\"\n[runner.kubernetes]\nkubeconfig = {:?}\nnamespace = \"caesar\"\nimage = \"caesar-agent:1\"\nworkspace = \"api\"\nttl_seconds = 600\n",
        sim.kubeconfig().display().to_string(),
    );
    std::fs::write(env.project.path().join(".caesar/config.local.toml"), text).unwrap();
}

fn has_ref(repo: &Path, r: &str) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "-q", "--verify", r])
        .output()
        .unwrap()
        .status
        .success()
}

#[tokio::test]
async fn with_workspace_api_the_task_round_trips_through_pods_exec_without_a_git_server() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    env.set_agents(&[(
        "writer",
        &[
            "say",
            "hello over exec",
            "write",
            "src/new.rs",
            "fn main() {}\n",
            "write",
            "README.md",
            "hello\nworld\n",
            "report",
            "success",
            "done without a git server",
        ],
    )]);
    project(&env, &sim, "caesar-agent:1", "");
    api_config(&env, &sim);
    let mut c = env.start_daemon().await;
    let d = c.delegate(env.delegate_request("writer", "add a main")).await.unwrap().into_inner();
    let t = await_one(&mut c, &d.task_id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let report = json(&t.report_json);
    assert_eq!(report["summary"], "done without a git server");
    let mut paths: Vec<&str> =
        report["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    paths.sort();
    assert_eq!(paths, ["README.md", "src/new.rs"], "{report}");
    assert!(messages(&all_logs(&mut c, &d.task_id).await).contains(&"hello over exec".to_owned()));

    // The Job's git phases take the workspace from the daemon, not a remote.
    let accepted = sim.get_json("/sim/accepted");
    let job = &accepted[0];
    let spec = &job["spec"]["template"]["spec"];
    for c in [&spec["initContainers"][0], &spec["containers"][1]] {
        let cmd: Vec<&str> = c["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(cmd.windows(2).any(|w| w == ["--workspace", "api"]), "{cmd:?}");
        assert!(!cmd.contains(&"--remote"), "{cmd:?}");
    }
    validate_against_official_schemas(&sim, job);
    // No git server took part: the bare repository is untouched.
    assert_eq!(git(&sim.remote(), &["for-each-ref"]).trim(), "");

    // The result came back as a bundle, kept as the task's result ref in the
    // local repository: one commit whose parent is the task's base.
    let r = format!("refs/caesar/tasks/{}/result", d.task_id);
    let line = git(env.project.path(), &["rev-list", "--parents", "-n", "1", &r]);
    assert_eq!(line.split_whitespace().count(), 2, "{line}");

    let diff = c.diff(pb::DiffRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert_eq!(diff.files.len(), 2, "{:?}", diff.files);
    assert!(diff.patch.contains("+world"));
    let a = c.apply(pb::ApplyRequest { task_id: d.task_id.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\nworld\n");
    assert!(env.project.path().join("src/new.rs").exists());
    // Applied: the local result ref goes (in the background).
    assert!(eventually(LONG, || !has_ref(env.project.path(), &r)).await, "{r} is still there");
    // The collector, its result taken, ended: no pod process is left.
    assert!(eventually(LONG, || sim.stats()["processes"] == 0).await, "{}", sim.stats());
}

#[tokio::test]
async fn workspace_api_is_refused_at_delegate_without_create_on_pods_exec() {
    let sim = Sim::start(&["--forbid", "create:pods/exec"]);
    let mut env = Env::new(&[("quick", &["say", "hi"])]);
    project(&env, &sim, "caesar-agent:1", "");
    api_config(&env, &sim);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("quick", "x");
    req.mode = "read_only".into();
    let e = c.delegate(req).await.expect_err("refused").message().to_owned();
    assert!(e.contains("pods/exec") && e.contains("rbac.yaml") && e.contains("workspace = \"git\""), "{e}");
    assert_eq!(sim.stats()["jobs"], 0);
    let list = c.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner();
    assert!(list.tasks.is_empty(), "{:?}", list.tasks);
}

/// One raw request to the simulator, headers as given; the response head.
fn raw_head(sim: &Sim, path: &str, headers: &[&str]) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", sim.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: sim\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Up to the end of the head (a 101 keeps the connection open).
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn the_simulators_exec_refuses_what_an_api_server_refuses() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[("hang", &["say", "agent-up", "hang"])]);
    project(&env, &sim, "caesar-agent:1", "");
    api_config(&env, &sim);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("hang", "x");
    req.mode = "read_only".into();
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    // Past its init container: the agent and the collector run.
    let collecting = || {
        sim.pods_of(&id).first().is_some_and(|p| p["status"]["containerStatuses"][1]["state"]["running"].is_object())
    };
    assert!(eventually(LONG, collecting).await, "{:?}", sim.pods_of(&id));
    let pod = sim.pods_of(&id)[0]["metadata"]["name"].as_str().unwrap().to_owned();
    let path = |q: &str| format!("/api/v1/namespaces/caesar/pods/{pod}/exec?{q}");
    let ws = [
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ];
    let with = |proto: &str| {
        let mut h: Vec<String> = ws.iter().map(|s| s.to_string()).collect();
        h.push(format!("Sec-WebSocket-Protocol: {proto}"));
        h
    };
    let head = |p: &str, h: &[String]| raw_head(&sim, p, &h.iter().map(String::as_str).collect::<Vec<_>>());
    let ok_q = "container=collect&command=true&stdout=true";
    // No websocket upgrade.
    let r = head(&path(ok_q), &[]);
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("Upgrade request required"), "{r}");
    // No subprotocol the server speaks.
    let r = head(&path(ok_q), &with("v3.channel.k8s.io, channel.k8s.io"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("subprotocols"), "{r}");
    // No command, no stream, a container the pod does not have, none named.
    let r = head(&path("container=collect&stdout=true"), &with("v5.channel.k8s.io"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("at least 1 command"), "{r}");
    let r = head(&path("container=collect&command=true"), &with("v5.channel.k8s.io"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("at least 1 of stdin"), "{r}");
    let r = head(&path("container=nope&command=true&stdout=true"), &with("v5.channel.k8s.io"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("not valid for pod"), "{r}");
    let r = head(&path("command=true&stdout=true"), &with("v5.channel.k8s.io"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("container name must be specified"), "{r}");
    // The init container has ended: it cannot be exec'd into.
    let r = head(&path("container=fetch&command=true&stdout=true"), &with("v5.channel.k8s.io"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("is not running"), "{r}");
    // v4 alone is still spoken; v5 is preferred when offered.
    let r = head(&path(ok_q), &with("v4.channel.k8s.io"));
    assert!(
        r.starts_with("HTTP/1.1 101") && r.to_lowercase().contains("sec-websocket-protocol: v4.channel.k8s.io"),
        "{r}"
    );
    let r = head(&path(ok_q), &with("v4.channel.k8s.io, v5.channel.k8s.io"));
    assert!(
        r.starts_with("HTTP/1.1 101") && r.to_lowercase().contains("sec-websocket-protocol: v5.channel.k8s.io"),
        "{r}"
    );
    c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap();
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled", "{}", t.error);
}

/// A write task cancelled after it wrote a file, under either transport,
/// with or without the cancelling daemon dying before the result was in:
/// it ends `cancelled`, and its partial work is reviewable as a local
/// task's is (Diff shows it, Apply applies it), then its result ref goes
/// and no pod process is left.
async fn a_cancelled_write_task_brings_its_changes_back(api: bool, restart: bool) {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[(
        "partial",
        // It holds SIGTERM: its pod's supervisor stops it at the grace, which
        // leaves a restart the time to come between the cancel and the collection.
        &["write", "partial.txt", "half done\n", "say", "agent-up", "ignore-term", "hang"],
    )]);
    project(&env, &sim, "caesar-agent:1", "");
    if api {
        api_config(&env, &sim);
    }
    let grace = [("CAESAR_KILL_GRACE_MS", if restart { "4000" } else { "300" })];
    let mut c = env.start_daemon_with(&grace).await;
    let id = c.delegate(env.delegate_request("partial", "x")).await.unwrap().into_inner().task_id;
    // In its output (the task's events name it already, in the command line).
    let raw = caesar_tests::daemon_files(task_dir(&env, &id)).join("raw.log");
    assert!(eventually(LONG, wait_for(&raw, "agent-up")).await);
    let r = format!("refs/caesar/tasks/{id}/result");
    if restart {
        // The cancel is asked; its daemon dies once the pod is being deleted,
        // before the agent ended and so before any result was made.
        let mut other = env.client().await;
        let cancelling = id.clone();
        let cancel = tokio::spawn(async move { other.cancel(pb::CancelRequest { task_id: cancelling }).await });
        let deleting = || sim.pods_of(&id).first().is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string());
        assert!(eventually(LONG, deleting).await, "{:?}", sim.pods_of(&id));
        env.kill_daemons().await;
        let _ = cancel.await;
        let daemon_files = caesar_tests::daemon_files(task_dir(&env, &id));
        assert!(!daemon_files.join("exit.json").exists(), "the run ended before the daemon died");
        assert!(!task_dir(&env, &id).join("kube-result.bundle").exists(), "the result was taken before");
        assert!(!has_ref(env.project.path(), &r) && task_refs(&sim, &id).iter().all(|x| *x != r));
        c = env.start_daemon_with(&grace).await;
    } else {
        c.cancel(pb::CancelRequest { task_id: id.clone() }).await.unwrap();
    }
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled", "{}", t.error);
    assert!(!t.report_json.contains("could not be brought back"), "{}", t.report_json);
    let diff = c.diff(pb::DiffRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(diff.files.iter().any(|f| f.path == "partial.txt"), "{:?}", diff.files);
    assert!(diff.patch.contains("+half done"), "{}", diff.patch);
    let a = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("partial.txt")).unwrap(), "half done\n");
    // Applied: the result ref goes, here (api) or on the remote (git).
    let gone = || !has_ref(env.project.path(), &r) && task_refs(&sim, &id).is_empty();
    assert!(eventually(LONG, gone).await, "{r} is still there");
    assert!(sim.pods_of(&id).is_empty(), "the pod is gone when the cancel is done");
    assert!(eventually(LONG, || sim.stats()["processes"] == 0).await, "{}", sim.stats());
}

#[tokio::test]
async fn a_cancelled_write_task_with_workspace_api_brings_its_changes_back() {
    a_cancelled_write_task_brings_its_changes_back(true, false).await;
}

#[tokio::test]
async fn a_cancelled_write_task_with_workspace_api_brings_its_changes_back_across_a_daemon_restart() {
    a_cancelled_write_task_brings_its_changes_back(true, true).await;
}

#[tokio::test]
async fn a_cancelled_write_task_with_workspace_git_brings_its_changes_back() {
    a_cancelled_write_task_brings_its_changes_back(false, false).await;
}

#[tokio::test]
async fn a_cancelled_write_task_with_workspace_git_brings_its_changes_back_across_a_daemon_restart() {
    a_cancelled_write_task_brings_its_changes_back(false, true).await;
}

/// Commits `mib` MiB of random (incompressible) bytes as `big.bin` in the
/// project; their sha256.
fn commit_big_file(env: &Env, mib: usize) -> String {
    let p = env.project.path();
    let mut data = vec![0u8; mib << 20];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut data).unwrap();
    std::fs::write(p.join("big.bin"), &data).unwrap();
    drop(data);
    git(p, &["add", "big.bin"]);
    git(p, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "big"]);
    let out = std::process::Command::new("sha256sum").arg(p.join("big.bin")).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_owned()
}

/// The agent of the large-workspace round trip: it prints the large
/// file's sha256 as it finds it in the pod, and changes another file.
const BIG_AGENT: &[&str] =
    &["sh", "sha256sum big.bin", "write", "README.md", "hello\nbig\n", "report", "success", "big ok"];

/// A `VmHWM:` or `VmRSS:` figure (KiB) of a process, 0 when it is gone.
fn status_kb(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Memory seen while a round trip runs, sampled from `/proc` every
/// millisecond: the highest peak RSS of a `caesard __kube receive`
/// process, and the daemon's highest RSS while `window` is set.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    window: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl Sampler {
    fn start(daemon: u32) -> Sampler {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let window = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, w) = (stop.clone(), window.clone());
        let thread = std::thread::spawn(move || {
            let (mut receiver, mut daemon_rss) = (0u64, 0u64);
            // Bounded: a measurement stops by itself after ten minutes.
            for _ in 0..600_000 {
                if s.load(Ordering::Acquire) {
                    break;
                }
                if w.load(Ordering::Acquire) {
                    daemon_rss = daemon_rss.max(status_kb(&daemon.to_string(), "VmRSS:"));
                }
                for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
                    let needle = b"__kube\0receive\0";
                    if cmd.windows(needle.len()).any(|x| x == needle) {
                        receiver = receiver.max(status_kb(&e.file_name().to_string_lossy(), "VmHWM:"));
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (receiver, daemon_rss)
        });
        Sampler { stop, window, thread }
    }

    /// (the receiver's peak RSS, the daemon's highest RSS in the window), KiB.
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap()
    }
}

/// Runs the large-workspace round trip; the daemon's pid, and with
/// `measure` what [`Sampler`] saw, its window from the base bundle's making
/// (the worktree is prepared) to the task's end.
async fn big_round_trip(env: &mut Env, sim: &Sim, mib: usize, measure: bool) -> (u32, Option<(u64, u64)>) {
    env.set_agents(&[("big", BIG_AGENT)]);
    project(env, sim, "caesar-agent:1", "");
    api_config(env, sim);
    let sum = commit_big_file(env, mib);
    let mut c = env.start_daemon().await;
    let pid = env.daemon_pid().await;
    let sampler = measure.then(|| Sampler::start(pid));
    let id = c.delegate(env.delegate_request("big", "x")).await.unwrap().into_inner().task_id;
    if let Some(s) = &sampler {
        assert!(eventually(LONG, || task_dir(env, &id).join("kube-base.bundle").exists()).await);
        s.window.store(true, std::sync::atomic::Ordering::Release);
    }
    let t = await_one(&mut c, &id, LONG).await;
    let seen = sampler.map(Sampler::finish);
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    // Byte-identical in the pod's checkout.
    let texts = messages(&all_logs(&mut c, &id).await);
    assert!(texts.iter().any(|t| t.starts_with(&format!("{sum}  big.bin"))), "{sum} not in {texts:?}");
    // The change comes back, and only it.
    let diff = c.diff(pb::DiffRequest { task_id: id.clone() }).await.unwrap().into_inner();
    let paths: Vec<&str> = diff.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["README.md"], "{}", diff.patch);
    assert!(diff.patch.contains("+big"), "{}", diff.patch);
    let a = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(a.applied && a.conflicts.is_empty(), "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\nbig\n");
    (pid, seen)
}

#[tokio::test]
async fn with_workspace_api_a_large_incompressible_workspace_round_trips() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    big_round_trip(&mut env, &sim, 48, false).await;
}

/// The figures in BENCHMARKS.md for the base bundle's streaming: over the
/// 48 MiB round trip, the daemon's peak RSS (VmHWM: the worktree's
/// preparation sets it), its highest RSS from the bundle's making to the
/// task's end (the bundle sent, the result taken), and the pod receiver's
/// peak RSS. `cargo nextest run -p caesar-tests --test kubernetes_workspace
/// --run-ignored only -E 'test(bundle_memory)' --no-capture`
#[tokio::test]
#[ignore = "measurement, run by hand for BENCHMARKS.md"]
async fn bundle_memory() {
    // 0 MiB: the same round trip with an empty large file, for the baseline.
    for mib in [0, 48] {
        let sim = Sim::start(&[]);
        let mut env = Env::new(&[]);
        let (pid, seen) = big_round_trip(&mut env, &sim, mib, true).await;
        let (receiver, sending) = seen.unwrap();
        println!(
            "FIGURE {mib} MiB api round trip (KiB): daemon VmHWM {}, daemon VmRSS max from the bundle to the end {sending}, receiver VmHWM {receiver}",
            peak_rss_kb(pid)
        );
    }
}

/// A commit id no repository holds.
const FORGED: &str = "0123456789abcdef0123456789abcdef01234567";

/// An agent that forges the end of its own task: it says it is done
/// (`agent.done`, what the collector once waited for), answers for the
/// collector (`pushed.json` naming a commit it never made), tries to print
/// a forged ending into the wrapper's own output (refused here: the
/// kernel does not let the confined agent open it), then goes on working.
fn forger(env: &mut Env) {
    let forge = format!(
        r#"notes="$CAESAR_POD_ROOT/ws/.pod"
echo 1 > "$notes/agent.done"
printf '{{"result":"{FORGED}"}}' > "$notes/pushed.json"
end='{{"exit":{{"exit_code":0,"signal":null,"timed_out":false,"terminated":false,"spawn_error":null,"leftovers_killed":0,"finished_ms":1}},"result":"{FORGED}"}}'
# The shell's own pid as /proc knows it (inside a PID namespace `$$` is the
# namespace's): `read` is the shell's builtin, so /proc/self is the shell.
read -r p _ < /proc/self/stat
for i in 1 2 3 4 5 6; do
  p=$(cut -d' ' -f4 /proc/$p/stat)
  if [ "$(tr '\0' '\n' < /proc/$p/cmdline | sed -n 2,3p | tr '\n' ' ')" = "__kube pod " ]; then
    printf 'C1 x %s\n' "$(printf '%s' "$end" | base64 -w0)" > /proc/$p/fd/1 && echo forged-the-ending
    break
  fi
done"#
    );
    env.set_agents(&[(
        "forger",
        &[
            "write",
            "README.md",
            "hello\nearly\n",
            "sh",
            &forge,
            // Long enough for a collector fooled by agent.done to have
            // committed the early state.
            "sleep",
            "1500",
            "say",
            "after the forgery",
            "write",
            "README.md",
            "hello\nfinal\n",
            "write",
            "src/late.rs",
            "// late\n",
            "report",
            "success",
            "forged",
        ],
    )]);
}

/// Runs the forger; the task and its report.
async fn forged_run(env: &mut Env, sim: &Sim, api: bool) -> (caesar_proto::client::Client, String, serde_json::Value) {
    forger(env);
    project(env, sim, "caesar-agent:1", "");
    if api {
        api_config(env, sim);
    }
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("forger", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
    let texts = messages(&all_logs(&mut c, &id).await);
    assert!(texts.contains(&"after the forgery".to_owned()), "output after the forgery is kept: {texts:?}");
    let report = json(&t.report_json);
    assert_eq!(report["summary"], "forged");
    // Where the agent could write into the wrapper's output (no write
    // confinement), its ending was seen and not believed.
    if texts.contains(&"forged-the-ending".to_owned()) {
        assert!(report["findings"].to_string().contains("ending the wrapper did not write"), "{report}");
    } else {
        assert!(texts.iter().any(|t| t.contains("Permission denied")), "the forgery was refused: {texts:?}");
    }
    (c, id, report)
}

/// What the forger's report and diff must show, whatever the transport.
async fn forgery_refused(c: &mut caesar_proto::client::Client, id: &str, report: &serde_json::Value) {
    let findings = report["findings"].to_string();
    assert!(findings.contains("tampered with the pod's control files"), "{findings}");
    assert!(findings.contains("pushed.json") && findings.contains("agent.done"), "{findings}");
    // The result is the agent's final state, collected after its end.
    let diff = c.diff(pb::DiffRequest { task_id: id.to_owned() }).await.unwrap().into_inner();
    assert!(diff.patch.contains("+final") && !diff.patch.contains("+early"), "{}", diff.patch);
    assert!(diff.files.iter().any(|f| f.path == "src/late.rs"), "{:?}", diff.files);
    assert!(!report.to_string().contains(FORGED) || findings.contains(FORGED), "{report}");
}

#[tokio::test]
async fn an_agent_forging_its_end_through_the_shared_volume_gets_nothing_accepted() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let (mut c, id, report) = forged_run(&mut env, &sim, false).await;
    forgery_refused(&mut c, &id, &report).await;
    // The result ref the remote holds is the one applied, and not the forged id.
    let on_remote = git(&sim.remote(), &["rev-parse", &format!("refs/caesar/tasks/{id}/result")]);
    assert_ne!(on_remote.trim(), FORGED);
    let a = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert!(a.applied, "{a:?}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("README.md")).unwrap(), "hello\nfinal\n");
}

#[tokio::test]
async fn an_agent_forging_its_end_with_workspace_api_gets_nothing_accepted() {
    let sim = Sim::start(&[]);
    let mut env = Env::new(&[]);
    let (mut c, id, report) = forged_run(&mut env, &sim, true).await;
    forgery_refused(&mut c, &id, &report).await;
    let r = format!("refs/caesar/tasks/{id}/result");
    assert_ne!(git(env.project.path(), &["rev-parse", &r]).trim(), FORGED);
}

/// The figures in BENCHMARKS.md for `workspace = "api"` against `git`: ten
/// worktree tasks one after the other in each mode, delegate → succeeded
/// (the base in, the agent, the result out and laid into the worktree).
/// Not a timed test: it prints what it measures. `cargo nextest run -p
/// caesar-tests --test kubernetes_workspace --run-ignored only -E
/// 'test(figures)' --no-capture`
#[tokio::test]
#[ignore = "measurement, run by hand for BENCHMARKS.md"]
async fn figures() {
    for api in [false, true] {
        let sim = Sim::start(&[]);
        let mut env = Env::new(&[]);
        env.set_agents(&[("writer", &["write", "src/new.rs", "fn main() {}\n", "report", "success", "ok"])]);
        project(&env, &sim, "caesar-agent:1", "");
        if api {
            api_config(&env, &sim);
        }
        let mut c = env.start_daemon().await;
        let mut took = Vec::new();
        let mut bundles = Vec::new();
        for _ in 0..10 {
            let t0 = std::time::Instant::now();
            let id = c.delegate(env.delegate_request("writer", "x")).await.unwrap().into_inner().task_id;
            let t = await_one(&mut c, &id, LONG).await;
            assert_eq!(t.status().as_str(), "succeeded", "{}", t.error);
            took.push(t0.elapsed().as_secs_f64() * 1000.0);
            let size = |f: &str| std::fs::metadata(task_dir(&env, &id).join(f)).map(|m| m.len()).unwrap_or(0);
            bundles.push((size("kube-base.bundle"), size("kube-result.bundle")));
        }
        took.sort_by(f64::total_cmp);
        let mode = if api { "api" } else { "git" };
        println!("FIGURE workspace={mode} delegate->succeeded ms: median {:.0} max {:.0}", took[5], took[9]);
        if api {
            println!("FIGURE workspace=api bundles (base, result) bytes: {:?}", bundles[0]);
        }
    }
}

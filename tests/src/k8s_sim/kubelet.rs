//! The simulator's job controller and "process kubelet": a Job gets one Pod
//! (backoffLimit 0 here means exactly one), whose container command runs as
//! a local process in a directory of its own, its output kept as the
//! container log (long lines split into records as a runtime does), its
//! termination message read from the file at `terminationMessagePath`, and
//! its deletion a SIGTERM to its process group, the grace, then SIGKILL.
//! Image names map to nothing, except that `unpullable/…` never pulls.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Record, Sim, now_ts};

fn random_suffix() -> String {
    let mut b = [0u8; 4];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    const A: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    b.iter().chain(b.iter().take(1)).map(|x| A[*x as usize % A.len()] as char).collect()
}

/// Makes the Job's Pod and starts it.
pub fn job_created(sim: &Arc<Sim>, job: &Value) {
    let ns = job["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
    let jname = job["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let uid = job["metadata"]["uid"].clone();
    let tpl = &job["spec"]["template"];
    let mut labels = tpl["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels["job-name"] = json!(jname);
    labels["batch.kubernetes.io/job-name"] = json!(jname);
    labels["controller-uid"] = uid.clone();
    let pname = format!("{jname}-{}", random_suffix());
    let (ts, _) = now_ts();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pname, "namespace": ns, "labels": labels, "uid": format!("pod-{}", random_suffix()),
            "creationTimestamp": ts[..19].to_owned() + "Z",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": jname, "uid": uid, "controller": true}]},
        "spec": tpl["spec"].clone(),
        "status": {"phase": "Pending"},
    });
    {
        let mut st = sim.lock();
        sim.put(&mut st, "pods", pod.clone(), "ADDED");
    }
    sim.update("jobs", &ns, &jname, |j| j["status"] = json!({"active": 1, "startTime": ts[..19].to_owned() + "Z"}));
    let sim = sim.clone();
    let deadline = job["spec"]["activeDeadlineSeconds"].as_u64();
    tokio::spawn(async move { run_pod(sim, ns, jname, pname, pod, deadline).await });
}

fn container_status(name: &str, image: &str, state: Value) -> Value {
    json!([{"name": name, "image": image, "imageID": "", "ready": false, "restartCount": 0, "state": state}])
}

async fn run_pod(sim: Arc<Sim>, ns: String, job: String, pod: String, obj: Value, deadline: Option<u64>) {
    let c = obj["spec"]["containers"][0].clone();
    let cname = c["name"].as_str().unwrap_or("").to_owned();
    let image = c["image"].as_str().unwrap_or("").to_owned();
    tokio::time::sleep(Duration::from_millis(20)).await;
    if image.starts_with("unpullable/") || image.contains(' ') {
        let reason = if image.contains(' ') { "InvalidImageName" } else { "ErrImagePull" };
        let msg = format!(
            "failed to pull and unpack image \"{image}\": pull access denied, repository does not exist or may require authorization"
        );
        let st = json!({"waiting": {"reason": reason, "message": msg}});
        sim.update("pods", &ns, &pod, |p| p["status"]["containerStatuses"] = container_status(&cname, &image, st));
        if reason == "ErrImagePull" {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let st = json!({"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image \"{image}\"")}});
            sim.update("pods", &ns, &pod, |p| p["status"]["containerStatuses"] = container_status(&cname, &image, st));
        }
        return;
    }
    // The container's environment: its env, its envFrom Secrets.
    let mut env: Vec<(String, String)> = Vec::new();
    for src in c["envFrom"].as_array().into_iter().flatten() {
        let name = src["secretRef"]["name"].as_str().unwrap_or("");
        match sim.cfg.secrets.get(name) {
            Some(keys) => env.extend(keys.iter().map(|(k, v)| (k.clone(), v.clone()))),
            None => {
                let st = json!({"waiting": {"reason": "CreateContainerConfigError", "message": format!("secret \"{name}\" not found")}});
                sim.update("pods", &ns, &pod, |p| {
                    p["status"]["containerStatuses"] = container_status(&cname, &image, st)
                });
                return;
            }
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        if let (Some(n), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
            env.push((n.to_owned(), v.to_owned()));
        }
    }
    let root = sim.cfg.state_dir.join("pods").join(&pod);
    let work = root.join(c["workingDir"].as_str().unwrap_or("").trim_start_matches('/'));
    let _ = std::fs::create_dir_all(&work);
    let term_path =
        root.join(c["terminationMessagePath"].as_str().unwrap_or("dev/termination-log").trim_start_matches('/'));
    let argv: Vec<String> = c["command"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(c["args"].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let Some(program) = argv.first().cloned() else { return };
    let resolved = sim.cfg.path.split(':').map(|d| std::path::Path::new(d).join(&program)).find(|p| p.is_file());
    let mut cmd = tokio::process::Command::new(resolved.clone().unwrap_or_else(|| program.clone().into()));
    cmd.args(&argv[1..])
        .current_dir(&work)
        .env_clear()
        .env("PATH", &sim.cfg.path)
        .env("HOME", root.join("home"))
        .env("CAESAR_POD_ROOT", &root)
        .env("HOSTNAME", &pod)
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    // Deleted or evicted before it started: it never runs.
    if stopped_early(&sim, &ns, &job, &pod) {
        return;
    }
    let mut child = match cmd.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            let msg = format!("failed to create containerd task: exec: \"{program}\": {e}");
            let (ts, _) = now_ts();
            let st = json!({"terminated": {"exitCode": 128, "reason": "StartError", "message": msg, "finishedAt": ts[..19].to_owned() + "Z"}});
            sim.update("pods", &ns, &pod, |p| {
                p["status"]["phase"] = json!("Failed");
                p["status"]["containerStatuses"] = container_status(&cname, &image, st);
            });
            job_finished(&sim, &ns, &job, false, "BackoffLimitExceeded");
            return;
        }
    };
    let pid = child.id().unwrap_or(0) as i32;
    sim.procs.lock().unwrap_or_else(|p| p.into_inner()).insert((ns.clone(), pod.clone()), pid);
    // A deletion or an eviction that came while it was being spawned.
    if sim
        .lock()
        .pods
        .get(&(ns.clone(), pod.clone()))
        .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some() || p["status"]["reason"].is_string())
    {
        let (sim, ns, pod) = (sim.clone(), ns.clone(), pod.clone());
        tokio::spawn(async move { terminate(&sim, &ns, &pod, 2).await });
    }
    let (started, _) = now_ts();
    let st = json!({"running": {"startedAt": started[..19].to_owned() + "Z"}});
    sim.update("pods", &ns, &pod, |p| {
        p["status"]["phase"] = json!("Running");
        p["status"]["startTime"] = json!(started[..19].to_owned() + "Z");
        p["status"]["containerStatuses"] = container_status(&cname, &image, st);
    });
    let log = sim.log(&ns, &pod);
    let split = if sim.cfg.split_at == 0 { 16 * 1024 } else { sim.cfg.split_at };
    let mut readers = Vec::new();
    for out in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let log = log.clone();
        readers.push(tokio::spawn(async move { copy_log(out, log, split).await }));
    }
    if let Some(secs) = deadline {
        let (sim, ns, job, pod) = (sim.clone(), ns.clone(), job.clone(), pod.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            let active = sim.lock().jobs.get(&(ns.clone(), job.clone())).is_some_and(|j| j["status"]["active"] == 1);
            if active {
                sim.update("jobs", &ns, &job, |j| j["metadata"]["annotations"]["sim/deadline"] = json!("1"));
                terminate(&sim, &ns, &pod, 2).await;
            }
        });
    }
    let status = child.wait().await;
    for r in readers {
        let _ = r.await;
    }
    log.done.store(true, Ordering::Release);
    log.notify.notify_waiters();
    sim.procs.lock().unwrap_or_else(|p| p.into_inner()).remove(&(ns.clone(), pod.clone()));
    use std::os::unix::process::ExitStatusExt;
    let (code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    let exit_code = code.unwrap_or_else(|| 128 + signal.unwrap_or(9));
    let mut message = std::fs::read(&term_path).unwrap_or_default();
    message.truncate(4096);
    let message = String::from_utf8_lossy(&message).into_owned();
    let (finished, _) = now_ts();
    let lost =
        sim.lock().pods.get(&(ns.clone(), pod.clone())).and_then(|p| p["status"]["reason"].as_str().map(str::to_owned));
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    let mut term = json!({"exitCode": exit_code, "reason": reason, "startedAt": started[..19].to_owned() + "Z", "finishedAt": finished[..19].to_owned() + "Z"});
    if !message.is_empty() && lost.as_deref() != Some("NodeLost") {
        term["message"] = json!(message);
    }
    if let Some(s) = signal {
        term["signal"] = json!(s);
    }
    let deadline_hit = sim
        .lock()
        .jobs
        .get(&(ns.clone(), job.clone()))
        .is_some_and(|j| j["metadata"]["annotations"]["sim/deadline"] == "1");
    sim.update("pods", &ns, &pod, |p| {
        p["status"]["phase"] = json!(if exit_code == 0 { "Succeeded" } else { "Failed" });
        if deadline_hit {
            p["status"]["reason"] = json!("DeadlineExceeded");
            p["status"]["message"] = json!("Pod was active on the node longer than the specified deadline");
        }
        p["status"]["containerStatuses"] = container_status(&cname, &image, json!({"terminated": term}));
    });
    let why = if deadline_hit { "DeadlineExceeded" } else { "BackoffLimitExceeded" };
    job_finished(&sim, &ns, &job, exit_code == 0 && !deadline_hit, why);
    // A pod being deleted goes once its process has.
    let deleting = sim
        .lock()
        .pods
        .get(&(ns.clone(), pod.clone()))
        .is_some_and(|p| p["metadata"].get("deletionTimestamp").is_some());
    if deleting {
        remove_pod(&sim, &ns, &pod);
    }
}

/// A pod deleted or evicted before its process started: removed (deleted)
/// or failed (evicted), and the Job failed. True when it must not start.
fn stopped_early(sim: &Arc<Sim>, ns: &str, job: &str, pod: &str) -> bool {
    let cur = sim.lock().pods.get(&(ns.to_owned(), pod.to_owned())).cloned();
    let Some(cur) = cur else { return true };
    if cur["metadata"].get("deletionTimestamp").is_some() {
        remove_pod(sim, ns, pod);
        return true;
    }
    if cur["status"]["reason"].is_string() {
        sim.update("pods", ns, pod, |p| p["status"]["phase"] = json!("Failed"));
        job_finished(sim, ns, job, false, "BackoffLimitExceeded");
        return true;
    }
    false
}

async fn copy_log(mut out: Box<dyn tokio::io::AsyncRead + Unpin + Send>, log: Arc<super::LogBuf>, split: usize) {
    use tokio::io::AsyncReadExt;
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match out.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        let mut recs = Vec::new();
        loop {
            match pending.iter().position(|&b| b == b'\n') {
                Some(i) if i < split => {
                    recs.push(pending.drain(..=i).collect::<Vec<u8>>());
                }
                _ if pending.len() >= split => {
                    // A partial record, as containerd writes for a long line.
                    recs.push(pending.drain(..split).collect());
                }
                _ => break,
            }
        }
        if !recs.is_empty() {
            let mut r = log.records.lock().unwrap_or_else(|p| p.into_inner());
            for data in recs {
                let (ts, nanos) = now_ts();
                r.push(Record { ts, nanos, data });
            }
            drop(r);
            log.notify.notify_waiters();
        }
    }
    if !pending.is_empty() {
        let (ts, nanos) = now_ts();
        log.records.lock().unwrap_or_else(|p| p.into_inner()).push(Record { ts, nanos, data: pending });
        log.notify.notify_waiters();
    }
}

fn job_finished(sim: &Arc<Sim>, ns: &str, job: &str, ok: bool, reason: &str) {
    let (ts, _) = now_ts();
    let ts = ts[..19].to_owned() + "Z";
    let reason = reason.to_owned();
    let done = sim.update("jobs", ns, job, |j| {
        let cond = if ok {
            json!({"type": "Complete", "status": "True", "lastTransitionTime": ts})
        } else {
            json!({"type": "Failed", "status": "True", "reason": reason, "lastTransitionTime": ts})
        };
        j["status"] = json!({"active": 0, "succeeded": u8::from(ok), "failed": u8::from(!ok), "conditions": [cond], "completionTime": ts});
    });
    if let Some(j) = done
        && let Some(ttl) = j["spec"]["ttlSecondsAfterFinished"].as_u64()
        && ttl < 3600
    {
        let (sim, ns, job) = (sim.clone(), ns.to_owned(), job.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(ttl)).await;
            delete_job(&sim, &ns, &job, "Background", None).await;
        });
    }
}

/// Stops a pod's process: SIGTERM to its group, `grace` seconds, SIGKILL.
pub async fn terminate(sim: &Arc<Sim>, ns: &str, pod: &str, grace: u64) {
    let pid = sim.procs.lock().unwrap_or_else(|p| p.into_inner()).get(&(ns.to_owned(), pod.to_owned())).copied();
    let Some(pid) = pid else { return };
    let pg = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGTERM);
    let until = std::time::Instant::now() + Duration::from_secs(grace);
    while std::time::Instant::now() < until {
        if !sim.procs.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&(ns.to_owned(), pod.to_owned())) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
    kill_tree(sim, pod);
}

/// SIGKILLs every process of a pod, wherever its process group: each
/// carries the pod's root in its environment (a container's processes all
/// die with it, whatever groups they made).
fn kill_tree(sim: &Sim, pod: &str) {
    let root = sim.cfg.state_dir.join("pods").join(pod);
    let needle = format!("CAESAR_POD_ROOT={}", root.display()).into_bytes();
    let Ok(rd) = std::fs::read_dir("/proc") else { return };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        if env.split(|&b| b == 0).any(|v| v == needle.as_slice()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn remove_pod(sim: &Arc<Sim>, ns: &str, pod: &str) {
    let mut st = sim.lock();
    if let Some(p) = st.pods.get(&(ns.to_owned(), pod.to_owned())).cloned() {
        sim.put(&mut st, "pods", p, "DELETED");
    }
}

/// Deletes a pod: marked, its process stopped within the grace, removed.
pub async fn delete_pod(sim: &Arc<Sim>, ns: &str, pod: &str, grace: Option<u64>) {
    let (ts, _) = now_ts();
    let Some(p) =
        sim.update("pods", ns, pod, |p| p["metadata"]["deletionTimestamp"] = json!(ts[..19].to_owned() + "Z"))
    else {
        return;
    };
    let grace = grace.or_else(|| p["spec"]["terminationGracePeriodSeconds"].as_u64()).unwrap_or(30);
    let running = sim.procs.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&(ns.to_owned(), pod.to_owned()));
    let finished = p["status"]["phase"] == "Succeeded"
        || p["status"]["phase"] == "Failed"
        || p["status"]["containerStatuses"][0]["state"].get("waiting").is_some();
    if running {
        // run_pod removes it once the process is gone.
        terminate(sim, ns, pod, grace).await;
    } else if finished {
        remove_pod(sim, ns, pod);
    }
    // Otherwise it is being started: run_pod sees the mark and removes it.
}

/// Deletes a Job with a propagation policy: Foreground waits for the pods
/// (the Job stays, marked), Background removes the Job at once and the pods
/// after, Orphan leaves the pods.
pub async fn delete_job(sim: &Arc<Sim>, ns: &str, job: &str, policy: &str, grace: Option<u64>) {
    let pods: Vec<String> = {
        let st = sim.lock();
        st.pods
            .iter()
            .filter(|((n, _), p)| n == ns && p["metadata"]["labels"]["job-name"] == job)
            .map(|((_, name), _)| name.clone())
            .collect()
    };
    let remove_job = |sim: &Arc<Sim>| {
        let mut st = sim.lock();
        if let Some(j) = st.jobs.get(&(ns.to_owned(), job.to_owned())).cloned() {
            sim.put(&mut st, "jobs", j, "DELETED");
        }
    };
    match policy {
        "Foreground" => {
            let (ts, _) = now_ts();
            sim.update("jobs", ns, job, |j| {
                j["metadata"]["deletionTimestamp"] = json!(ts[..19].to_owned() + "Z");
                j["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
            });
            let all = pods.iter().map(|p| delete_pod(sim, ns, p, grace));
            futures_util::future::join_all(all).await;
            wait_pods_gone(sim, ns, &pods).await;
            remove_job(sim);
        }
        "Orphan" => remove_job(sim),
        _ => {
            remove_job(sim);
            let all = pods.iter().map(|p| delete_pod(sim, ns, p, grace));
            futures_util::future::join_all(all).await;
        }
    }
}

async fn wait_pods_gone(sim: &Arc<Sim>, ns: &str, pods: &[String]) {
    for _ in 0..2400 {
        let left = {
            let st = sim.lock();
            pods.iter().any(|p| st.pods.contains_key(&(ns.to_owned(), p.clone())))
        };
        if !left {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A fault: the pod is evicted (SIGTERM, grace, its status says Evicted).
pub async fn evict(sim: &Arc<Sim>, ns: &str, pod: &str) {
    sim.update("pods", ns, pod, |p| {
        p["status"]["reason"] = json!("Evicted");
        p["status"]["message"] = json!("The node was low on resource: memory.");
    });
    terminate(sim, ns, pod, 2).await;
}

/// A fault: the node is lost (SIGKILL, no termination message, NodeLost).
pub fn lose_node(sim: &Arc<Sim>, ns: &str, pod: &str) {
    sim.update("pods", ns, pod, |p| {
        p["status"]["reason"] = json!("NodeLost");
        p["status"]["message"] = json!("Node sim-node-1 which was running pod is unresponsive");
    });
    let pid = sim.procs.lock().unwrap_or_else(|p| p.into_inner()).get(&(ns.to_owned(), pod.to_owned())).copied();
    if let Some(pid) = pid {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    kill_tree(sim, pod);
}

/// Stops every pod process (the simulator is stopping).
pub fn kill_all(sim: &Sim) {
    let pods: Vec<(String, i32)> =
        sim.procs.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|((_, p), pid)| (p.clone(), *pid)).collect();
    for (pod, pid) in pods {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        kill_tree(sim, &pod);
    }
}

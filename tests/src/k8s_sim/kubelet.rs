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

/// Sets the status of the `i`th container of `field` (`containerStatuses`
/// or `initContainerStatuses`), the others kept (waiting until they run).
fn set_status(sim: &Arc<Sim>, ns: &str, pod: &str, field: &str, i: usize, state: Value, phase: Option<&str>) {
    sim.update("pods", ns, pod, |p| {
        let spec_field = if field == "initContainerStatuses" { "initContainers" } else { "containers" };
        let specs = p["spec"][spec_field].as_array().cloned().unwrap_or_default();
        let mut list = p["status"][field].as_array().cloned().unwrap_or_default();
        if list.len() != specs.len() {
            list = specs
                .iter()
                .map(|c| {
                    json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": false, "restartCount": 0,
                        "state": {"waiting": {"reason": if field == "initContainerStatuses" { "PodInitializing" } else { "ContainerCreating" }}}})
                })
                .collect();
        }
        if let Some(entry) = list.get_mut(i) {
            entry["state"] = state;
            entry["ready"] = json!(entry["state"].get("running").is_some());
        }
        p["status"][field] = json!(list);
        if let Some(ph) = phase {
            p["status"]["phase"] = json!(ph);
        }
    });
}

/// The pod's processes, by pod.
fn procs_of(sim: &Sim, ns: &str, pod: &str) -> Vec<i32> {
    sim.procs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(ns.to_owned(), pod.to_owned()))
        .cloned()
        .unwrap_or_default()
}

async fn run_pod(sim: Arc<Sim>, ns: String, job: String, pod: String, obj: Value, deadline: Option<u64>) {
    let inits: Vec<Value> = obj["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
    let mains: Vec<Value> = obj["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let c = mains.first().cloned().unwrap_or_default();
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
    if sim.cfg.light {
        let argv: Vec<String> = c["command"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(c["args"].as_array().into_iter().flatten())
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        return light_pod(sim, ns, job, pod, cname, image, argv).await;
    }
    // Deleted or evicted before it started: it never runs.
    if stopped_early(&sim, &ns, &job, &pod) {
        return;
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
    let (started, _) = now_ts();
    let started = started[..19].to_owned() + "Z";
    // Init containers, one after the other, each to its successful end.
    for (i, ic) in inits.iter().enumerate() {
        if stopped_early(&sim, &ns, &job, &pod) {
            return;
        }
        let Some(term) = run_container(&sim, &ns, &pod, ic, "initContainerStatuses", i).await else { return };
        // Deleted while initializing: gone once its init process is.
        if stopped_early(&sim, &ns, &job, &pod) {
            return;
        }
        if term["exitCode"] != 0 {
            sim.update("pods", &ns, &pod, |p| p["status"]["phase"] = json!("Failed"));
            job_finished(&sim, &ns, &job, false, "BackoffLimitExceeded");
            remove_if_deleting(&sim, &ns, &pod);
            return;
        }
    }
    if stopped_early(&sim, &ns, &job, &pod) {
        return;
    }
    sim.update("pods", &ns, &pod, |p| {
        p["status"]["phase"] = json!("Running");
        p["status"]["startTime"] = json!(started);
    });
    // Then the containers, all at once.
    let all = mains.iter().enumerate().map(|(i, mc)| run_container(&sim, &ns, &pod, mc, "containerStatuses", i));
    let terms = futures_util::future::join_all(all).await;
    if terms.iter().any(Option::is_none) {
        // One never started (its status says why); the rest are stopped.
        terminate(&sim, &ns, &pod, 2).await;
        return;
    }
    let ok = terms.iter().flatten().all(|t| t["exitCode"] == 0);
    let deadline_hit = sim
        .lock()
        .jobs
        .get(&(ns.clone(), job.clone()))
        .is_some_and(|j| j["metadata"]["annotations"]["sim/deadline"] == "1");
    sim.update("pods", &ns, &pod, |p| {
        p["status"]["phase"] = json!(if ok { "Succeeded" } else { "Failed" });
        if deadline_hit {
            p["status"]["reason"] = json!("DeadlineExceeded");
            p["status"]["message"] = json!("Pod was active on the node longer than the specified deadline");
        }
    });
    let why = if deadline_hit { "DeadlineExceeded" } else { "BackoffLimitExceeded" };
    job_finished(&sim, &ns, &job, ok && !deadline_hit, why);
    remove_if_deleting(&sim, &ns, &pod);
}

/// Whether the pod is being deleted or was evicted/lost.
fn stopping(sim: &Sim, ns: &str, pod: &str) -> bool {
    sim.lock()
        .pods
        .get(&(ns.to_owned(), pod.to_owned()))
        .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some() || p["status"]["reason"].is_string())
}

/// A pod being deleted goes once its processes have.
fn remove_if_deleting(sim: &Arc<Sim>, ns: &str, pod: &str) {
    let deleting = sim
        .lock()
        .pods
        .get(&(ns.to_owned(), pod.to_owned()))
        .is_some_and(|p| p["metadata"].get("deletionTimestamp").is_some());
    if deleting {
        remove_pod(sim, ns, pod);
    }
}

/// A container's environment: its envFrom Secrets, then its env; the
/// Secret that does not exist, as the kubelet's waiting message.
pub fn container_env(sim: &Sim, c: &Value) -> Result<Vec<(String, String)>, String> {
    let mut env: Vec<(String, String)> = Vec::new();
    for src in c["envFrom"].as_array().into_iter().flatten() {
        let name = src["secretRef"]["name"].as_str().unwrap_or("");
        match sim.cfg.secrets.get(name) {
            Some(keys) => env.extend(keys.iter().map(|(k, v)| (k.clone(), v.clone()))),
            None => return Err(format!("secret \"{name}\" not found")),
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        if let (Some(n), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
            env.push((n.to_owned(), v.to_owned()));
        }
    }
    Ok(env)
}

/// A container's own root directory (its `CAESAR_POD_ROOT`).
pub fn container_root(sim: &Sim, pod: &str, container: &str) -> std::path::PathBuf {
    sim.cfg.state_dir.join("pods").join(pod).join("c").join(container)
}

/// Mounts the container's volumes at their `mountPath`s (`/ws`, `/git`) for
/// the process `cmd` starts, as a container runtime does: the process gets a
/// mount namespace of its own (its children inherit it) in which the link
/// `<root>/<mountPath>` (the pod's directory of that volume) is bound at the
/// absolute path. So the paths the Job names (a session's `cwd`, `TMPDIR`,
/// the sandbox's paths) are the pod's in every process of the container,
/// whatever reads them (a real codex, its own sandbox), as in a cluster;
/// `CAESAR_POD_ROOT` still names the same directories through the links.
/// It needs root (as on the developers' machines and in CI): the mount
/// points are made on this machine, empty, at first use, and stay. Where a
/// mount point cannot be made or the namespace is refused, the process runs
/// without these mounts, reaching its volumes under `CAESAR_POD_ROOT` only.
pub fn mount_volumes(cmd: &mut tokio::process::Command, root: &std::path::Path, c: &Value) {
    use std::os::unix::ffi::OsStrExt;
    let mut binds: Vec<(std::ffi::CString, std::ffi::CString)> = Vec::new();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let Some(at) = m["mountPath"].as_str().filter(|a| a.starts_with('/') && a.len() > 1) else { continue };
        if std::fs::create_dir_all(at).is_err() {
            continue;
        }
        let source = root.join(at.trim_start_matches('/'));
        let (Ok(source), Ok(target)) =
            (std::ffi::CString::new(source.as_os_str().as_bytes()), std::ffi::CString::new(at))
        else {
            continue;
        };
        binds.push((source, target));
    }
    if binds.is_empty() {
        return;
    }
    let slash = c"/";
    // SAFETY: between fork and exec the closure makes only system calls on
    // strings built before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            use nix::libc;
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Ok(());
            }
            // Nothing mounted here reaches the machine's namespace.
            let private = libc::mount(
                std::ptr::null(),
                slash.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            );
            if private != 0 {
                return Ok(());
            }
            for (source, target) in &binds {
                libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null());
            }
            Ok(())
        });
    }
}

/// Runs one container of the pod as a local process, in a directory of its
/// own (`<pod>/c/<name>`, its `CAESAR_POD_ROOT`) where each of its volume
/// mounts is a link to the pod's one directory of that volume, so two
/// containers share exactly the volumes they both mount; they are also
/// mounted at their paths ([`mount_volumes`]). Its status is kept in
/// `field[i]`; its `terminated` state once it ended, `None` when it never
/// started (a missing Secret).
async fn run_container(sim: &Arc<Sim>, ns: &str, pod: &str, c: &Value, field: &str, i: usize) -> Option<Value> {
    let cname = c["name"].as_str().unwrap_or("").to_owned();
    // The container's environment: its env, its envFrom Secrets.
    let env = match container_env(sim, c) {
        Ok(e) => e,
        Err(message) => {
            let st = json!({"waiting": {"reason": "CreateContainerConfigError", "message": message}});
            set_status(sim, ns, pod, field, i, st, None);
            return None;
        }
    };
    let pod_root = sim.cfg.state_dir.join("pods").join(pod);
    let root = container_root(sim, pod, &cname);
    let _ = std::fs::create_dir_all(&root);
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let (Some(v), Some(at)) = (m["name"].as_str(), m["mountPath"].as_str()) else { continue };
        let vol = pod_root.join("volumes").join(v);
        let link = root.join(at.trim_start_matches('/'));
        let _ = std::fs::create_dir_all(&vol);
        if let Some(parent) = link.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::os::unix::fs::symlink(&vol, &link);
    }
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
    let program = argv.first().cloned().unwrap_or_default();
    let resolved = sim.cfg.path.split(':').map(|d| std::path::Path::new(d).join(&program)).find(|p| p.is_file());
    let mut cmd = tokio::process::Command::new(resolved.clone().unwrap_or_else(|| program.clone().into()));
    cmd.args(argv.get(1..).unwrap_or_default())
        .current_dir(&work)
        .env_clear()
        .env("PATH", &sim.cfg.path)
        .env("HOME", root.join("home"))
        .env("CAESAR_POD_ROOT", &root)
        .env("HOSTNAME", pod)
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    mount_volumes(&mut cmd, &root, c);
    if stopping(sim, ns, pod) {
        return Some(json!({"exitCode": 137, "reason": "Error"}));
    }
    let (started, _) = now_ts();
    let started = started[..19].to_owned() + "Z";
    let mut child = match cmd.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            let msg = format!("failed to create containerd task: exec: \"{program}\": {e}");
            let (ts, _) = now_ts();
            let term = json!({"exitCode": 128, "reason": "StartError", "message": msg, "finishedAt": ts[..19].to_owned() + "Z"});
            set_status(sim, ns, pod, field, i, json!({"terminated": term}), None);
            return Some(term);
        }
    };
    let pid = child.id().unwrap_or(0) as i32;
    sim.procs.lock().unwrap_or_else(|p| p.into_inner()).entry((ns.to_owned(), pod.to_owned())).or_default().push(pid);
    // A deletion or an eviction that came while it was being spawned.
    if stopping(sim, ns, pod) {
        let (sim, ns, pod) = (sim.clone(), ns.to_owned(), pod.to_owned());
        tokio::spawn(async move { terminate(&sim, &ns, &pod, 2).await });
    }
    set_status(sim, ns, pod, field, i, json!({"running": {"startedAt": started}}), None);
    let log = sim.log(ns, pod, &cname);
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
    let status = child.wait().await;
    for r in readers {
        let _ = r.await;
    }
    log.done.store(true, Ordering::Release);
    log.notify.notify_waiters();
    {
        let mut procs = sim.procs.lock().unwrap_or_else(|p| p.into_inner());
        let key = (ns.to_owned(), pod.to_owned());
        if let Some(list) = procs.get_mut(&key) {
            list.retain(|p| *p != pid);
            if list.is_empty() {
                procs.remove(&key);
            }
        }
    }
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
    let lost = sim
        .lock()
        .pods
        .get(&(ns.to_owned(), pod.to_owned()))
        .and_then(|p| p["status"]["reason"].as_str().map(str::to_owned));
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    let mut term = json!({"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": finished[..19].to_owned() + "Z"});
    if !message.is_empty() && lost.as_deref() != Some("NodeLost") {
        term["message"] = json!(message);
    }
    if let Some(s) = signal {
        term["signal"] = json!(s);
    }
    set_status(sim, ns, pod, field, i, json!({"terminated": term.clone()}), None);
    Some(term)
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

/// Stops a pod's processes: SIGTERM to their groups, `grace` seconds, SIGKILL.
pub async fn terminate(sim: &Arc<Sim>, ns: &str, pod: &str, grace: u64) {
    let pids = procs_of(sim, ns, pod);
    if pids.is_empty() {
        return;
    }
    for pid in &pids {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGTERM);
    }
    let until = std::time::Instant::now() + Duration::from_secs(grace);
    while std::time::Instant::now() < until {
        if procs_of(sim, ns, pod).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for pid in procs_of(sim, ns, pod) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    kill_tree(sim, pod);
}

/// SIGKILLs every process of a pod, wherever its process group: each
/// carries the pod's root in its environment (a container's processes all
/// die with it, whatever groups they made).
fn kill_tree(sim: &Sim, pod: &str) {
    let root = sim.cfg.state_dir.join("pods").join(pod);
    let needle = format!("CAESAR_POD_ROOT={}/", root.display()).into_bytes();
    let Ok(rd) = std::fs::read_dir("/proc") else { return };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        if env.split(|&b| b == 0).any(|v| v.starts_with(&needle)) {
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
    let running = !procs_of(sim, ns, pod).is_empty();
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
    for pid in procs_of(sim, ns, pod) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    kill_tree(sim, pod);
}

/// Stops every pod process (the simulator is stopping).
pub fn kill_all(sim: &Sim) {
    let pods: Vec<(String, Vec<i32>)> = sim
        .procs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|((_, p), pids)| (p.clone(), pids.clone()))
        .collect();
    for (pod, pids) in pods {
        for pid in pids {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        kill_tree(sim, &pod);
    }
}

/// A pod of the light kubelet ([`super::SimConfig::light`]): no process.
/// Its log is the frames `caesard __kube pod` would write for an agent
/// that prints `agent-up`, and, once the file after `wait-file` in its
/// arguments exists, an ending that says no result was pushed.
async fn light_pod(
    sim: Arc<Sim>,
    ns: String,
    job: String,
    pod: String,
    cname: String,
    image: String,
    argv: Vec<String>,
) {
    use caesard::runner::kubernetes::{frames, pod::Ending};
    let gate = argv.iter().position(|a| a == "wait-file").and_then(|i| argv.get(i + 1)).cloned();
    let (started, _) = now_ts();
    let started = started[..19].to_owned() + "Z";
    let st = json!({"running": {"startedAt": started}});
    sim.update("pods", &ns, &pod, |p| {
        p["status"]["phase"] = json!("Running");
        p["status"]["startTime"] = json!(started);
        p["status"]["containerStatuses"] = container_status(&cname, &image, st);
    });
    let log = sim.log(&ns, &pod, &cname);
    let push = |line: String| {
        let (ts, nanos) = now_ts();
        log.records.lock().unwrap_or_else(|p| p.into_inner()).push(Record { ts, nanos, data: line.into_bytes() });
        log.notify.notify_waiters();
    };
    let out = b"agent-up\n";
    push(frames::chunk(0, out));
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let deleting = sim
            .lock()
            .pods
            .get(&(ns.clone(), pod.clone()))
            .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some());
        if deleting {
            break;
        }
        if gate.as_ref().is_some_and(|g| std::path::Path::new(g).exists()) {
            break;
        }
    }
    let ending = Ending {
        exit: caesard::supervisor::ExitRecord {
            exit_code: Some(0),
            finished_ms: caesard::clock::now_ms(),
            ..Default::default()
        },
        error: Some("the light kubelet ran no agent and pushed no result".to_owned()),
        raw_len: out.len() as u64,
        ..Default::default()
    };
    let json = serde_json::to_string(&ending).unwrap_or_default();
    push(frames::exit(json.as_bytes()));
    log.done.store(true, Ordering::Release);
    log.notify.notify_waiters();
    let (finished, _) = now_ts();
    let term = json!({"exitCode": 0, "reason": "Completed", "message": json, "startedAt": started, "finishedAt": finished[..19].to_owned() + "Z"});
    sim.update("pods", &ns, &pod, |p| {
        p["status"]["phase"] = json!("Succeeded");
        p["status"]["containerStatuses"] = container_status(&cname, &image, json!({"terminated": term}));
    });
    job_finished(&sim, &ns, &job, true, "");
    let deleting = sim
        .lock()
        .pods
        .get(&(ns.clone(), pod.clone()))
        .is_some_and(|p| p["metadata"].get("deletionTimestamp").is_some());
    if deleting {
        remove_pod(&sim, &ns, &pod);
    }
}

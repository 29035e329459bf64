//! The Job caesar creates for a task: a pure function of the task and the
//! settings, so it can be checked against the official schemas offline and
//! compared across daemons (the name is fixed by the task id: creating it
//! twice is an adoption, never a second run).

use serde_json::{Value, json};

use crate::launch::runner::{KubeSettings, WorkspaceMode};

/// The label every object of a task carries, its value the task id.
pub const TASK_LABEL: &str = "caesar.dev/task-id";
/// The label that marks caesar's objects, for the one watch.
pub const MANAGED_LABEL: &str = "app.kubernetes.io/managed-by";
/// The agent container's name.
pub const CONTAINER: &str = "agent";
/// Where the pod's ending is written (its termination message).
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// The pod's working area (an emptyDir).
pub const WS: &str = "/ws";
/// The init container that fetches the base (with the read credential).
pub const FETCH_CONTAINER: &str = "fetch";
/// The container that pushes the result (with the write credential).
pub const COLLECT_CONTAINER: &str = "collect";

/// The Job's name for a task id: `caesar-` and the id as a DNS label.
pub fn job_name(task_id: &str) -> String {
    let body: String =
        task_id.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let mut name = format!("caesar-{body}");
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

/// The refs a task's workspace travels through.
pub fn base_ref(task_id: &str) -> String {
    format!("refs/caesar/tasks/{task_id}/base")
}

/// See [`base_ref`].
pub fn result_ref(task_id: &str) -> String {
    format!("refs/caesar/tasks/{task_id}/result")
}

/// Everything of a task the Job carries.
#[derive(Debug, Clone)]
pub struct JobInput<'a> {
    pub task_id: &'a str,
    /// The agent's program, by name: the image has it on its PATH.
    pub program: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub deadline_ms: i64,
    pub now_ms: i64,
    pub grace_ms: u64,
    pub log_cap: u64,
    pub stdin_close_after: Option<&'a str>,
    /// The agent reads its prompt on stdin (issue 19): the pod's supervisor feeds it from the
    /// task's prompt file, which travels with the task's files.
    pub stdin_prompt: bool,
    /// The stdin protocol is this session protocol (its name), opened by the pod's supervisor
    /// from the task's `session.open.json`.
    pub session: Option<&'a str>,
    /// The base commit pushed for the pod to fetch.
    pub base_oid: &'a str,
    pub agent: &'a str,
}

/// The command the agent container runs: `caesard __kube pod …`.
pub fn pod_command(input: &JobInput<'_>) -> Vec<String> {
    let mut v: Vec<String> = [
        "caesard",
        super::pod::POD_ARG0,
        super::pod::POD_ARG1,
        "--task-id",
        input.task_id,
        "--deadline-ms",
        &input.deadline_ms.to_string(),
        "--grace-ms",
        &input.grace_ms.to_string(),
        "--log-cap",
        &input.log_cap.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(p) = input.stdin_close_after {
        v.extend(["--stdin-control".to_owned(), p.to_owned()]);
    }
    if let Some(p) = input.session {
        v.extend(["--stdin-session".to_owned(), p.to_owned()]);
    }
    if input.stdin_prompt {
        v.push("--stdin-prompt".to_owned());
    }
    v.push("--".to_owned());
    v.push(input.program.to_owned());
    v.extend(input.args.iter().cloned());
    v
}

/// The Job, as JSON (what the runner sends and what CI validates).
pub fn job_json(input: &JobInput<'_>, settings: &KubeSettings) -> Value {
    let name = job_name(input.task_id);
    let remaining_s = ((input.deadline_ms - input.now_ms).max(0) / 1000) as u64;
    // A backstop only: the supervisor in the pod enforces the real deadline;
    // this also counts scheduling and the image pull, hence the margin.
    let active_deadline = remaining_s + 300;
    let mut env: Vec<Value> = input.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    env.push(json!({"name": "CAESAR_TASK_ID", "value": input.task_id}));
    let mut container = json!({
        "name": CONTAINER,
        "image": settings.image,
        "command": pod_command(input),
        "workingDir": WS,
        "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "work", "mountPath": WS}],
    });
    if let Some(secret) = &settings.credentials_secret {
        container["envFrom"] = json!([{"secretRef": {"name": secret}}]);
    }
    let r = &settings.resources;
    let mut requests = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    for (limit, key, v) in [
        (false, "cpu", &r.cpu),
        (false, "memory", &r.memory),
        (true, "cpu", &r.limit_cpu),
        (true, "memory", &r.limit_memory),
    ] {
        if let Some(v) = v {
            let map = if limit { &mut limits } else { &mut requests };
            map.insert(key.to_owned(), json!(v));
        }
    }
    if !requests.is_empty() || !limits.is_empty() {
        container["resources"] = json!({"requests": requests, "limits": limits});
    }
    // The git phases: their own containers, each with one credential and
    // the `git` volume the agent container does not mount.
    let phase = |name: &str, arg: &str, secret: &Option<String>, extra: &[&str]| {
        // The workspace's transport: the git remote, or bundles the daemon
        // exchanges with these containers over `pods/exec`.
        let transport: [&str; 2] = match settings.workspace {
            WorkspaceMode::Git => ["--remote", &settings.git_remote],
            WorkspaceMode::Api => ["--workspace", "api"],
        };
        let mut command: Vec<String> = ["caesard", super::pod::POD_ARG0, arg]
            .iter()
            .chain(&transport)
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        command.extend(["--base".to_owned(), input.base_oid.to_owned()]);
        let mut c = json!({
            "name": name,
            "image": settings.image,
            "command": command,
            "workingDir": WS,
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "work", "mountPath": WS}, {"name": "git", "mountPath": super::phases::GIT_VOLUME}],
        });
        if let Some(secret) = secret {
            c["envFrom"] = json!([{"secretRef": {"name": secret}}]);
        }
        c
    };
    let fetch = phase(FETCH_CONTAINER, super::phases::FETCH_ARG, &settings.git_read_secret, &[]);
    let collect =
        phase(COLLECT_CONTAINER, super::phases::COLLECT_ARG, &settings.git_write_secret, &["--task-id", input.task_id]);
    let labels =
        json!({TASK_LABEL: input.task_id, MANAGED_LABEL: "caesar", "caesar.dev/agent": label_value(input.agent)});
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        // More than the supervisor's grace, plus the time to push the result.
        "terminationGracePeriodSeconds": input.grace_ms / 1000 + 15,
        "initContainers": [fetch],
        "containers": [container, collect],
        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "git", "emptyDir": {}}],
    });
    if let Some(sa) = &settings.service_account {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    if !settings.node_selector.is_empty() {
        pod_spec["nodeSelector"] = json!(settings.node_selector);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {"caesar.dev/protocol": "1", "caesar.dev/base": input.base_oid},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline,
            "ttlSecondsAfterFinished": settings.ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    })
}

/// A label value from free text: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn label_value(s: &str) -> String {
    let v: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).take(63).collect();
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

/// Checks an image reference (`[host[:port]/]path[:tag][@digest]`); the error says what is wrong.
pub fn check_image(image: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("`{image}` is not a valid image reference: {why}"));
    if image.is_empty() || image.len() > 4096 || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("it is empty, too long or holds spaces");
    }
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let ok = d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if !ok {
            return bad("its digest must be sha256: and 64 hex digits");
        }
    }
    let (path, tag) = match rest.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => (p, Some(t)),
        _ => (rest, None),
    };
    if let Some(t) = tag {
        let ok = !t.is_empty()
            && t.len() <= 128
            && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && !t.starts_with(['.', '-']);
        if !ok {
            return bad("its tag must be 1-128 of [A-Za-z0-9_.-], not starting with . or -");
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (h, port) = host.split_once(':').unwrap_or((host, "0"));
        if h.is_empty()
            || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-".contains(&b))
            || port.parse::<u16>().is_err()
        {
            return bad("its registry host is malformed");
        }
    }
    for p in parts {
        let segs_ok = !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && p.starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !segs_ok {
            return bad("each path component must be lowercase letters, digits and . _ -, alphanumeric at both ends");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> KubeSettings {
        KubeSettings {
            namespace: "agents".into(),
            image: "registry.example:5000/caesar/agent:1.2".into(),
            git_remote: "https://git.example/r.git".into(),
            credentials_secret: Some("caesar-provider-keys".into()),
            git_read_secret: Some("git-read".into()),
            git_write_secret: Some("git-write".into()),
            ttl_seconds: 600,
            ..Default::default()
        }
    }

    #[test]
    fn the_job_is_fixed_by_the_task_and_runs_once() {
        let args = vec!["-p".to_owned(), "hi".to_owned()];
        let input = JobInput {
            task_id: "t_00aa11bb22cc",
            program: "claude",
            args: &args,
            env: &[("K".into(), "v".into())],
            deadline_ms: 1_000_000 + 600_000,
            now_ms: 1_000_000,
            grace_ms: 3000,
            log_cap: 1 << 28,
            stdin_close_after: None,
            stdin_prompt: false,
            session: None,
            base_oid: "abc",
            agent: "claude",
        };
        let job = job_json(&input, &settings());
        assert_eq!(job["metadata"]["name"], "caesar-t-00aa11bb22cc");
        assert_eq!(job["metadata"]["labels"][TASK_LABEL], "t_00aa11bb22cc");
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["activeDeadlineSeconds"], 900);
        assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 600);
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        let c = &pod["containers"][0];
        assert_eq!(c["command"][0], "caesard");
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], "caesar-provider-keys");
        assert!(!job.to_string().contains("ANTHROPIC"), "no credential value in the spec");
        // Neither git credential, nor the git volume, reaches the agent container.
        assert_eq!(c["envFrom"].as_array().map(Vec::len), Some(1));
        assert!(!c["volumeMounts"].to_string().contains("/git"));
        assert_eq!(pod["initContainers"][0]["name"], FETCH_CONTAINER);
        assert_eq!(pod["initContainers"][0]["envFrom"][0]["secretRef"]["name"], "git-read");
        assert_eq!(pod["containers"][1]["name"], COLLECT_CONTAINER);
        assert_eq!(pod["containers"][1]["envFrom"][0]["secretRef"]["name"], "git-write");
        // The typed client type accepts it.
        let _: k8s_openapi::api::batch::v1::Job = serde_json::from_value(job).expect("a Job");
    }

    #[test]
    fn names_and_images_are_checked() {
        assert_eq!(job_name("t_ABC"), "caesar-t-abc");
        assert!(check_image("busybox").is_ok());
        assert!(check_image("ghcr.io/org/agent:v1.2-rc").is_ok());
        assert!(check_image(&format!("localhost:5000/a/b@sha256:{}", "a".repeat(64))).is_ok());
        assert!(check_image("Bad/Upper").is_err());
        assert!(check_image("a b").is_err());
        assert!(check_image("img:").is_err());
        assert!(check_image("img@sha256:zz").is_err());
    }
}

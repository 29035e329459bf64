//! Reaching the cluster: a client from the user's kubeconfig (rustls, no
//! OpenSSL), the preflight a delegation passes before anything is created,
//! and Kubernetes errors turned into a reason and a fix.

use std::path::PathBuf;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::launch::runner::KubeSettings;

/// The kubeconfig file a setting names: itself, else `$KUBECONFIG`'s first
/// file, else `~/.kube/config`.
pub fn kubeconfig_path(setting: Option<&str>) -> PathBuf {
    if let Some(p) = setting.filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty())
        && let Some(first) = std::env::split_paths(&k).next()
    {
        return first;
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    home.join(".kube").join("config")
}

/// Clients by kubeconfig file (and its modification time) and context: a
/// client holds the TLS configuration and the connection pool, and building
/// one (reading the kubeconfig and the system's CA certificates) costs far
/// more than a request, so each delegation's preflight reuses it.
type Cache =
    std::sync::Mutex<std::collections::HashMap<(PathBuf, Option<std::time::SystemTime>, Option<String>), Client>>;
static CLIENTS: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();

/// A client for the kubeconfig and context; the error says what to fix.
pub async fn connect(kubeconfig: Option<&str>, context: Option<&str>) -> Result<Client, String> {
    let path = kubeconfig_path(kubeconfig);
    let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    let key = (path.clone(), mtime, context.map(str::to_owned));
    let cache = CLIENTS.get_or_init(Default::default);
    if mtime.is_some()
        && let Some(c) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key)
    {
        return Ok(c.clone());
    }
    let client = connect_new(&path, context).await?;
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key, client.clone());
    Ok(client)
}

async fn connect_new(path: &std::path::Path, context: Option<&str>) -> Result<Client, String> {
    let path = path.to_path_buf();
    if !path.exists() {
        return Err(format!(
            "no kubeconfig at {}: set `runner.kubernetes.kubeconfig` or KUBECONFIG to the cluster's kubeconfig file",
            path.display()
        ));
    }
    let kc = Kubeconfig::read_from(&path)
        .map_err(|e| format!("the kubeconfig {} cannot be read: {e}; fix the file", path.display()))?;
    let options = KubeConfigOptions { context: context.map(str::to_owned), ..Default::default() };
    let config = Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| {
        format!(
            "the kubeconfig {} does not give a cluster{}: {e}; fix `runner.kubernetes.context` or the file",
            path.display(),
            context.map(|c| format!(" for context `{c}`")).unwrap_or_default()
        )
    })?;
    let server = config.cluster_url.to_string();
    let mut config = config;
    if let Some(proxy) = config.proxy_url.as_ref().map(ToString::to_string) {
        let host = config.cluster_url.host().unwrap_or_default().to_owned();
        if env_proxy_exempts(&proxy, &host)? {
            config.proxy_url = None;
        }
    }
    let client = Client::try_from(config).map_err(|e| format!("cannot build a client for {server}: {e}"))?;
    Ok(client)
}

/// Whether the proxy kube chose (`proxy`) is to be dropped for a cluster
/// on `host`. Without a kubeconfig `proxy-url`, kube takes the daemon's
/// `HTTPS_PROXY` (or `https_proxy`), which this build cannot go through
/// (kube's `http-proxy` feature is off), and takes it even for a cluster
/// that `NO_PROXY` exempts: every client build then failed, naming a cargo
/// feature. A cluster `NO_PROXY` covers goes direct (true); another is
/// refused, saying what to change. A `proxy-url` the kubeconfig names is
/// left to kube (false), which refuses it.
fn env_proxy_exempts(proxy: &str, host: &str) -> Result<bool, String> {
    let same = |v: &str| v.trim_end_matches('/') == proxy.trim_end_matches('/');
    let from_env = ["HTTPS_PROXY", "https_proxy"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .next()
        .is_some_and(|v| same(&v));
    if !from_env {
        return Ok(false);
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let no_proxy = ["NO_PROXY", "no_proxy"].iter().filter_map(|k| std::env::var(k).ok()).collect::<Vec<_>>().join(",");
    if no_proxy_covers(&no_proxy, host) {
        return Ok(true);
    }
    Err(format!(
        "the daemon's environment sets HTTPS_PROXY ({proxy}) and caesar's Kubernetes client does not go through a proxy: add the cluster's host `{host}` to NO_PROXY, or unset HTTPS_PROXY, in the daemon's environment"
    ))
}

/// Whether a `NO_PROXY` list (comma-separated; `*`, a host, or a domain
/// with or without its leading dot, which covers its subdomains) covers
/// `host`.
fn no_proxy_covers(list: &str, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    list.split(',').map(|e| e.trim().to_ascii_lowercase()).filter(|e| !e.is_empty()).any(|e| {
        let domain = e.trim_start_matches('.');
        e == "*" || host == domain || host.ends_with(&format!(".{domain}"))
    })
}

/// A Kubernetes error as a sentence with its fix.
pub fn explain(e: &kube::Error, verb: &str, resource: &str, namespace: &str) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "Kubernetes refused ({}): {}; fix: grant the daemon's user `{verb}` on `{resource}` in namespace `{namespace}` (packaging/kubernetes/rbac.yaml)",
            s.reason, s.message
        ),
        kube::Error::Api(s) if s.code == 404 && s.message.contains("namespace") => format!(
            "Kubernetes says ({}): {}; fix: create it (`kubectl create namespace {namespace}`) or set `runner.kubernetes.namespace`",
            s.reason, s.message
        ),
        kube::Error::Api(s) if s.code == 401 => {
            format!(
                "Kubernetes refused the credentials ({}): {}; fix: refresh the kubeconfig's user",
                s.reason, s.message
            )
        }
        kube::Error::Api(s) => format!("Kubernetes refused {verb} {resource} ({} {}): {}", s.code, s.reason, s.message),
        other => format!(
            "cannot reach the Kubernetes API server: {other}; fix: check that the cluster is up and the kubeconfig's `server` is right"
        ),
    }
}

/// Checks, before a task is recorded, that its Job can be created: a valid
/// image, a kubeconfig, a reachable API server, the namespace, the right to
/// create Jobs, and a Job the server accepts (a server-side dry run, so
/// nothing is created).
/// `stdin`: the task's agent takes its answers on stdin, carried over `pods/exec` (the pump);
/// `channel`: it has the return channel, carried over `pods/exec` too (the relay).
pub async fn preflight(
    settings: &KubeSettings,
    job: &serde_json::Value,
    stdin: bool,
    channel: bool,
) -> Result<(), String> {
    super::manifest::check_image(&settings.image).map_err(|e| {
        format!("runner.kubernetes.image {e}; fix: name an image like `registry.example/caesar-agent:1`")
    })?;
    let client = connect(settings.kubeconfig.as_deref(), settings.context.as_deref()).await?;
    if settings.workspace == crate::launch::runner::WorkspaceMode::Api {
        may_exec(&client, &settings.namespace, Need::Workspace).await?;
    }
    if stdin {
        may_exec(&client, &settings.namespace, Need::Stdin).await?;
    }
    if channel {
        may_exec(&client, &settings.namespace, Need::Channel).await?;
    }
    let api: Api<Job> = Api::namespaced(client, &settings.namespace);
    let job: Job = serde_json::from_value(job.clone()).map_err(|e| format!("the Job does not encode: {e}"))?;
    let pp = PostParams { dry_run: true, ..Default::default() };
    api.create(&pp, &job)
        .await
        .map(|_| ())
        .map_err(|e| match &e {
            // A Job of that name exists: the task id is fresh, so it is someone else's.
            kube::Error::Api(s) if s.code == 409 => String::new(),
            _ => explain(&e, "create", "jobs", &settings.namespace),
        })
        .or_else(|e| if e.is_empty() { Ok(()) } else { Err(e) })
}

/// What a task needs `pods/exec` for.
#[derive(Debug, Clone, Copy)]
enum Need {
    /// `workspace = "api"`: the workspace in and the result out.
    Workspace,
    /// The agent's stdin (permission answers, a session's requests).
    Stdin,
    /// The return channel's calls and their answers.
    Channel,
}

/// `workspace = "api"` sends the workspace through `pods/exec`, and the pump
/// an agent's stdin: the daemon's user must be allowed to `create` it, which
/// the API server itself says (a SelfSubjectAccessReview, which every user
/// may make; nothing is created).
async fn may_exec(client: &Client, namespace: &str, need: Need) -> Result<(), String> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some("create".to_owned()),
                resource: Some("pods".to_owned()),
                subresource: Some("exec".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| explain(&e, "create", "selfsubjectaccessreviews", namespace))?;
    let status = answer.status.unwrap_or_default();
    if status.allowed {
        return Ok(());
    }
    let why = status.reason.filter(|r| !r.is_empty()).map(|r| format!(" ({r})")).unwrap_or_default();
    let (needs, or) = match need {
        Need::Workspace => (
            "which `runner.kubernetes.workspace = \"api\"` needs to send the workspace",
            "use `workspace = \"git\"` with a `git_remote`",
        ),
        Need::Stdin => (
            "which this agent needs to receive its answers on stdin (write mode's permission prompts, a session)",
            "delegate it read-only (claude), or set `[runner] kind = \"local\"`",
        ),
        Need::Channel => (
            "which the return channel (`channel: true`) needs to carry the agent's calls",
            "delegate without `channel`, or set `[runner] kind = \"local\"`",
        ),
    };
    Err(format!(
        "Kubernetes does not let the daemon's user `create` on `pods/exec` in namespace `{namespace}`{why}, {needs}; fix: grant it (the pods/exec rule in packaging/kubernetes/rbac.yaml) or {or}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_covers_hosts_domains_and_the_wildcard() {
        assert!(no_proxy_covers("127.0.0.1,localhost", "127.0.0.1"));
        assert!(no_proxy_covers(" example.com ", "api.example.com"));
        assert!(no_proxy_covers(".example.com", "API.example.com"));
        assert!(no_proxy_covers("*", "anything"));
        assert!(!no_proxy_covers("example.com", "notexample.com"));
        assert!(!no_proxy_covers("", "127.0.0.1"));
        assert!(!no_proxy_covers("10.0.0.1", "127.0.0.1"));
    }

    #[test]
    fn a_proxy_the_kubeconfig_names_is_left_to_kube() {
        // Not the environment's (whatever it holds here): kube decides.
        assert_eq!(env_proxy_exempts("http://proxy.invalid.example:3128/", "cluster.example"), Ok(false));
    }
}

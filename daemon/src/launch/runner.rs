//! `[runner]` and `[runner.kubernetes]`: which runner a project's tasks use,
//! and where on a cluster they run. Parsed here, not in `config.rs`, so the
//! shared config file only gains a field; compiled whether or not the
//! `kubernetes` feature is, so a config naming the cluster is understood
//! (and refused with a reason) by a build without it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a task's process runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerKind {
    /// `caesard __supervise` on this machine.
    #[default]
    Local,
    /// A Kubernetes Job per task.
    Kubernetes,
}

impl RunnerKind {
    /// Parses a runner named by a delegation (`runner: "kubernetes"`).
    pub fn parse(s: &str) -> Result<RunnerKind, String> {
        match s.trim() {
            "local" => Ok(RunnerKind::Local),
            "kubernetes" => Ok(RunnerKind::Kubernetes),
            other => Err(format!("`runner` is \"{other}\": use \"local\" or \"kubernetes\"")),
        }
    }

    /// Its name in config and requests.
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Local => "local",
            RunnerKind::Kubernetes => "kubernetes",
        }
    }
}

/// Which runner a task gets, and who chose it: the delegation's `runner`,
/// else its role's `runner`, else `[runner] kind`.
pub fn choose(
    asked: Option<RunnerKind>,
    role: Option<(&str, RunnerKind)>,
    project: RunnerKind,
) -> (RunnerKind, String) {
    match (asked, role) {
        (Some(k), _) => (k, format!("the delegation's `runner = \"{}\"`", k.as_str())),
        (None, Some((name, k))) => (k, format!("role `{name}`'s `runner = \"{}\"`", k.as_str())),
        (None, None) => (project, format!("`[runner] kind = \"{}\"`", project.as_str())),
    }
}

/// How a remote task's workspace travels (`[runner.kubernetes] workspace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// Through the team's git remote (`git_remote`): refs pushed and fetched.
    #[default]
    Git,
    /// Through the API server: the daemon streams a git bundle of the base
    /// into the pod's init container over `pods/exec`, and takes the result
    /// bundle back from the collector the same way (needs `create` on
    /// `pods/exec`; no git server).
    Api,
}

/// Requests and limits of the agent container, Kubernetes quantities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub limit_cpu: Option<String>,
    pub limit_memory: Option<String>,
}

/// `[runner.kubernetes]`, resolved: everything a Job needs. Stored with the
/// task's launch plan, so a restarted daemon finds the same cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeSettings {
    /// The kubeconfig file; default `$KUBECONFIG`, else `~/.kube/config`.
    #[serde(default)]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context; default its current context.
    #[serde(default)]
    pub context: Option<String>,
    /// The namespace the Jobs go to.
    #[serde(default)]
    pub namespace: String,
    /// The agent image: caesard plus the agent CLIs (packaging/kubernetes/).
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub service_account: Option<String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// The Secret whose keys become the agent's environment (provider keys).
    /// Referenced by name only: its values never reach a task file or log.
    #[serde(default)]
    pub credentials_secret: Option<String>,
    /// The git remote the workspace travels through
    /// (`refs/caesar/tasks/<id>/base` and `…/result`), reachable from the
    /// daemon (push) and from the pod (fetch, push of the result).
    #[serde(default)]
    pub git_remote: String,
    /// The Secret whose keys are the environment of the pod's init
    /// container that fetches the base (e.g. `GIT_CONFIG_COUNT`,
    /// `GIT_CONFIG_KEY_0=http.extraHeader`, `GIT_CONFIG_VALUE_0=Authorization: …`).
    /// The agent container never sees it.
    #[serde(default)]
    pub git_read_secret: Option<String>,
    /// The same for the collector container that pushes `…/result`.
    #[serde(default)]
    pub git_write_secret: Option<String>,
    /// How the workspace travels: `git` (default) or `api` (bundles over `pods/exec`).
    #[serde(default)]
    pub workspace: WorkspaceMode,
    /// Seconds a finished Job is kept (`ttlSecondsAfterFinished`).
    #[serde(default = "default_ttl")]
    pub ttl_seconds: u32,
    /// Seconds a pod may wait for its image before the task fails.
    #[serde(default = "default_pull_timeout")]
    pub image_pull_timeout_seconds: u32,
}

fn default_ttl() -> u32 {
    7 * 24 * 3600
}

fn default_pull_timeout() -> u32 {
    120
}

/// `[runner]` as written in one layer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRunner {
    pub kind: Option<RunnerKind>,
    pub kubernetes: Option<RawKube>,
}

/// `[runner.kubernetes]` as written in one layer: every key optional, so a
/// later layer overrides one key at a time.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKube {
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub image: Option<String>,
    pub resources: Option<Resources>,
    pub service_account: Option<String>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub credentials_secret: Option<String>,
    pub git_remote: Option<String>,
    pub git_read_secret: Option<String>,
    pub git_write_secret: Option<String>,
    pub workspace: Option<WorkspaceMode>,
    pub ttl_seconds: Option<u32>,
    pub image_pull_timeout_seconds: Option<u32>,
}

/// The merged `[runner]` of a project.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunnerConfig {
    pub kind: RunnerKind,
    pub kubernetes: KubeSettings,
}

impl RunnerConfig {
    /// Lays one layer over this one. The error names the key and the fix.
    pub fn merge(&mut self, raw: RawRunner) -> Result<(), (String, String)> {
        if let Some(kind) = raw.kind {
            self.kind = kind;
        }
        if let Some(k) = raw.kubernetes {
            let t = &mut self.kubernetes;
            if t.ttl_seconds == 0 {
                t.ttl_seconds = default_ttl();
            }
            if t.image_pull_timeout_seconds == 0 {
                t.image_pull_timeout_seconds = default_pull_timeout();
            }
            macro_rules! set {
                ($f:ident) => {
                    if let Some(v) = k.$f {
                        t.$f = v;
                    }
                };
                (opt $f:ident) => {
                    if let Some(v) = k.$f {
                        t.$f = Some(v);
                    }
                };
            }
            set!(opt kubeconfig);
            set!(opt context);
            set!(namespace);
            set!(image);
            set!(resources);
            set!(opt service_account);
            set!(node_selector);
            set!(opt credentials_secret);
            set!(git_remote);
            set!(opt git_read_secret);
            set!(opt git_write_secret);
            set!(workspace);
            set!(ttl_seconds);
            set!(image_pull_timeout_seconds);
        }
        Ok(())
    }

    /// The cluster settings a task gets, `None` for the local runner; an
    /// error (key, fix) when `kind = "kubernetes"` lacks what a Job needs.
    pub fn for_task(&self) -> Result<Option<KubeSettings>, (String, String)> {
        self.for_kind(self.kind)
    }

    /// The cluster settings of a task run by `kind` (chosen by its role or
    /// its delegation rather than by `[runner] kind`); the same errors.
    pub fn for_kind(&self, kind: RunnerKind) -> Result<Option<KubeSettings>, (String, String)> {
        if kind == RunnerKind::Local {
            return Ok(None);
        }
        let k = &self.kubernetes;
        let missing = |key: &str, fix: &str| Err((format!("runner.kubernetes.{key}"), fix.to_owned()));
        if k.namespace.trim().is_empty() {
            return missing("namespace", "is not set: name the namespace the Jobs go to");
        }
        if k.image.trim().is_empty() {
            return missing("image", "is not set: name the agent image (see packaging/kubernetes/)");
        }
        if k.workspace == WorkspaceMode::Git && k.git_remote.trim().is_empty() {
            return missing(
                "git_remote",
                "is not set: name a git remote both this machine and the cluster reach (the workspace travels through it), or set `workspace = \"api\"` to send it over the API server (pods/exec)",
            );
        }
        Ok(Some(k.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RawRunner {
        #[derive(Deserialize)]
        struct L {
            runner: RawRunner,
        }
        toml::from_str::<L>(text).expect("parses").runner
    }

    #[test]
    fn layers_override_key_by_key_and_kubernetes_needs_its_keys() {
        let mut c = RunnerConfig::default();
        assert_eq!(c.for_task(), Ok(None));
        c.merge(parse("[runner]\nkind = \"kubernetes\"\n[runner.kubernetes]\nnamespace = \"a\"\nimage = \"i:1\"\n"))
            .expect("merges");
        let err = c.for_task().expect_err("no remote");
        assert_eq!(err.0, "runner.kubernetes.git_remote");
        c.merge(parse("[runner.kubernetes]\nnamespace = \"b\"\ngit_remote = \"/srv/r.git\"\n")).expect("merges");
        let k = c.for_task().expect("complete").expect("kubernetes");
        assert_eq!((k.namespace.as_str(), k.image.as_str(), k.ttl_seconds), ("b", "i:1", 604800));
    }

    #[test]
    fn the_delegation_then_the_role_then_the_project_choose() {
        use RunnerKind::*;
        assert_eq!(choose(Some(Local), Some(("r", Kubernetes)), Kubernetes).0, Local);
        assert_eq!(choose(None, Some(("r", Kubernetes)), Local).0, Kubernetes);
        assert!(choose(None, Some(("r", Kubernetes)), Local).1.contains("role `r`"));
        assert_eq!(choose(None, None, Kubernetes).0, Kubernetes);
        assert_eq!(RunnerKind::parse("kubernetes"), Ok(Kubernetes));
        assert!(RunnerKind::parse("k8s").expect_err("unknown").contains("\"local\" or \"kubernetes\""));
        let c = RunnerConfig::default();
        assert_eq!(c.for_kind(Kubernetes).expect_err("no cluster").0, "runner.kubernetes.namespace");
    }

    #[test]
    fn unknown_keys_are_refused() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct L {
            runner: RawRunner,
        }
        let err = toml::from_str::<L>("[runner.kubernetes]\nnamspace = \"a\"\n").expect_err("typo");
        assert!(err.to_string().contains("namspace"), "{err}");
    }
}

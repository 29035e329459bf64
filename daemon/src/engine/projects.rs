//! Projects: the configuration of each project (the last good one served
//! while an edit does not load), its agents and roles, config edits and init.

use std::path::{Path, PathBuf};

use crate::config::{Config, project_root};
use crate::error::{Error, Result};
use crate::resolve::{self};

use super::*;

/// The projects' configurations, agents, roles and trust records: a
/// service of the engine, with the last good config of each project as its
/// own state.
pub struct Projects {
    /// Where the global config and the trust records live.
    pub(super) paths: Paths,
    /// The last configuration of each project that loaded, served while a
    /// later edit of it does not load.
    good: Mutex<HashMap<PathBuf, Config>>,
    /// The current load error of each project whose config does not load.
    problems: Mutex<HashMap<PathBuf, String>>,
    /// Probed agent versions.
    pub(super) versions: crate::catalog::VersionCache,
    /// The quota ledger (issue 32): which agents are near their limit, for routing and listing.
    pub(crate) quota: super::quota::Ledger,
}

impl Projects {
    pub(super) fn new(paths: Paths, quota: super::quota::Ledger) -> Projects {
        Projects { paths, good: Default::default(), problems: Default::default(), versions: Default::default(), quota }
    }

    /// A project's configuration. When its files do not load (a bad edit),
    /// the last version that did is served instead, with the problem; with
    /// no such version the error is returned.
    pub(crate) fn load_config(&self, project: &Path) -> Result<(Config, Option<String>)> {
        match Config::load_gated(&self.paths.config_dir, project, &crate::trust::TrustStore::new(&self.paths.state_dir))
        {
            Ok(config) => {
                self.good.lock().unwrap_or_else(|p| p.into_inner()).insert(project.to_path_buf(), config.clone());
                self.problems.lock().unwrap_or_else(|p| p.into_inner()).remove(project);
                Ok((config, None))
            }
            Err(e @ Error::Invalid(_)) => {
                let problem = e.to_string();
                self.problems.lock().unwrap_or_else(|p| p.into_inner()).insert(project.to_path_buf(), problem.clone());
                match self.good.lock().unwrap_or_else(|p| p.into_inner()).get(project) {
                    Some(good) => Ok((good.clone(), Some(problem))),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn config_for(&self, workspace: &str) -> Result<(Config, PathBuf)> {
        let project = if workspace.is_empty() {
            PathBuf::from("/nonexistent/caesar-no-project")
        } else {
            project_root(Path::new(workspace))
        };
        let (config, _) = self.load_config(&project)?;
        Ok((config, project))
    }

    /// The configuration problems known now, the project at `workspace`'s
    /// among them.
    pub fn problems(&self, workspace: &str) -> Vec<String> {
        if !workspace.is_empty() {
            let _ = self.load_config(&project_root(Path::new(workspace)));
        }
        let _ = self.load_config(Path::new("/nonexistent/caesar-no-project"));
        let mut problems: Vec<String> = self
            .problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(project, problem)| {
                let served = self.good.lock().unwrap_or_else(|p| p.into_inner()).contains_key(project);
                if served {
                    format!(
                        "{problem} (fix the file; until then the last good config of {} is used)",
                        project.display()
                    )
                } else {
                    format!("{problem} (fix the file: delegations in {} fail until then)", project.display())
                }
            })
            .collect();
        // Untrusted repository configs (issue 19): what was ignored, and the command to run.
        if !workspace.is_empty()
            && let Ok((config, _)) = self.config_for(workspace)
        {
            problems.extend(config.untrusted.iter().map(|u| u.warning()));
        }
        problems.sort();
        problems
    }

    /// Every agent of the project at `workspace` (only the global config
    /// when empty). Probes executables for their version: call it off the
    /// async runtime.
    pub fn list_agents(&self, workspace: &str) -> Result<Vec<crate::catalog::AgentEntry>> {
        self.list_agents_from(workspace, crate::request::Host::Unknown)
    }

    /// [`Projects::list_agents`], each agent's standing for a caller at `host`.
    pub fn list_agents_from(
        &self,
        workspace: &str,
        host: crate::request::Host,
    ) -> Result<Vec<crate::catalog::AgentEntry>> {
        let (config, _) = self.config_for(workspace)?;
        let headroom = self.quota.headroom_with(&config);
        let observed = self.quota.observed(&config);
        let mut agents = crate::catalog::list_from(&config, &self.versions, host);
        for a in &mut agents {
            a.headroom = headroom.describe(&a.id);
            a.observed_usage = observed(&a.id);
        }
        Ok(agents)
    }

    /// The roles of the project at `workspace`, each with the agent it would
    /// pick now and why earlier candidates were skipped.
    pub fn list_roles(&self, workspace: &str) -> Result<Vec<serde_json::Value>> {
        self.list_roles_from(workspace, crate::request::Host::Unknown)
    }

    /// [`Projects::list_roles`] as a caller at `host` would be served.
    pub fn list_roles_from(&self, workspace: &str, host: crate::request::Host) -> Result<Vec<serde_json::Value>> {
        let (config, _) = self.config_for(workspace)?;
        Ok(resolve::roles_view_with(&config, host, &self.quota.headroom_with(&config)))
    }

    /// The effective configuration of a project, with provenance.
    pub fn show_config(&self, workspace: &str) -> Result<serde_json::Value> {
        let (config, project) = self.config_for(workspace)?;
        Ok(serde_json::json!({
            // The project root: role prompt files are relative to its `.caesar/`.
            "project": project,
            "policy": config.policy,
            "worktree": config.worktree,
            "roles": config.roles.iter().map(|(r, o)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["origin"] = serde_json::json!(o.as_str());
                v
            }).collect::<Vec<_>>(),
            "agents": config.agents.iter().map(|(a, o)| {
                let mut v = serde_json::to_value(a).unwrap_or_default();
                v["origin"] = serde_json::json!(o.as_str());
                // `[[agent]] env` values are secrets (issue 19): names only.
                if let Some(env) = v.get_mut("env").and_then(|e| e.as_object_mut()) {
                    for value in env.values_mut() {
                        *value = serde_json::json!("<redacted>");
                    }
                }
                v
            }).collect::<Vec<_>>(),
            "models": config.models.iter().map(|(k, (m, o))| (k.clone(), serde_json::json!({"model": m, "origin": o.as_str()}))).collect::<serde_json::Map<_, _>>(),
            "bin": config.bin.iter().map(|(k, (b, o))| (k.clone(), serde_json::json!({"bin": b, "origin": o.as_str()}))).collect::<serde_json::Map<_, _>>(),
            "provenance": config.provenance,
            "files": config.files,
            "untrusted": config.untrusted.iter().map(|u| serde_json::json!({"file": u.file, "project": u.project, "ignored": u.ignored, "warning": u.warning()})).collect::<Vec<_>>(),
        }))
    }

    /// Edits one layer of a project's (or the global) configuration.
    pub fn edit_config(
        &self,
        workspace: &str,
        layer: &str,
        edit: &crate::config_edit::Edit,
    ) -> Result<crate::config_edit::Outcome> {
        let layer = match layer {
            "global" => crate::config::Origin::Global,
            "project" => crate::config::Origin::Project,
            "local" => crate::config::Origin::Local,
            other => return Err(Error::Invalid(format!("unknown layer `{other}`: use global, project or local"))),
        };
        if layer != crate::config::Origin::Global && workspace.is_empty() {
            return Err(Error::Invalid("editing a project layer needs the project's workspace".to_owned()));
        }
        let project = if workspace.is_empty() {
            PathBuf::from("/nonexistent/caesar-no-project")
        } else {
            project_root(Path::new(workspace))
        };
        let mut o = crate::config_edit::apply(&self.paths.config_dir, &project, layer, edit)?;
        if o.changed && layer != crate::config::Origin::Global {
            let note = crate::engine::trusting::after_own_edit(&self.paths.state_dir, &project, &o)?;
            o.message.push_str(&note);
        }
        Ok(o)
    }

    /// `caesar init`: the global layer, or a project's config, role prompts,
    /// `.gitignore` lines and host-agent skills.
    pub fn init(&self, workspace: &str, global: bool, force: bool) -> Result<crate::init::Written> {
        if global {
            return crate::init::init_global(&self.paths.config_dir, force);
        }
        let workspace = Path::new(workspace);
        if !workspace.is_absolute() || !workspace.is_dir() {
            return Err(Error::Invalid(format!("workspace `{}` is not an absolute directory", workspace.display())));
        }
        let project = project_root(workspace);
        let config = Config::load_gated(
            &self.paths.config_dir,
            &project,
            &crate::trust::TrustStore::new(&self.paths.state_dir),
        )?;
        crate::init::init_project(&project, force, &|host| resolve::program_of(&config, host).is_some())
    }

    /// One agent with the options delegate accepts for it.
    pub fn describe_agent(
        &self,
        id: &str,
        workspace: &str,
        host: crate::request::Host,
    ) -> Result<crate::catalog::AgentEntry> {
        let (config, project) = self.config_for(workspace)?;
        let all = crate::catalog::list_from(&config, &self.versions, host);
        let known: Vec<String> = all.iter().map(|a| a.id.clone()).collect();
        let headroom = self.quota.headroom_with(&config);
        let observed = self.quota.observed(&config);
        let found = all.into_iter().find(|a| a.id == id).map(|mut a| {
            a.headroom = headroom.describe(&a.id);
            a.observed_usage = observed(&a.id);
            a
        });
        found.ok_or_else(|| {
            Error::NotFound(format!(
                "unknown agent `{id}`: use one of {}, or declare it as [[agent]] in {}/.caesar/config.toml",
                known.join(", "),
                project.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Projects;
    use caesar_proto::paths::Paths;

    /// A ledger over a store of its own, in `home`.
    fn ledger(home: &std::path::Path) -> super::super::quota::Ledger {
        let store = crate::store::Store::open(&home.join("caesar.db")).unwrap();
        super::super::quota::Ledger::new(std::sync::Arc::new(store))
    }

    #[test]
    fn a_broken_edit_serves_the_last_good_config_and_says_so() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let paths = Paths::under(home.path());
        std::fs::create_dir_all(&paths.config_dir).unwrap();
        let global = paths.config_dir.join("config.toml");
        std::fs::write(&global, "[[agent]]\nid = \"mine\"\nbin = \"/bin/true\"\n").unwrap();
        let projects = Projects::new(paths, ledger(home.path()));
        let (good, problem) = projects.load_config(project.path()).unwrap();
        assert!(problem.is_none());
        assert!(good.agents.iter().any(|(a, _)| a.id == "mine"));

        std::fs::write(&global, "[[agent]\nid = ").unwrap();
        let (served, problem) = projects.load_config(project.path()).unwrap();
        assert!(served.agents.iter().any(|(a, _)| a.id == "mine"), "the last good config is served");
        let problem = problem.expect("the problem is said");
        assert!(problem.contains("config.toml"), "{problem}");
        let listed = projects.problems(&project.path().display().to_string());
        assert!(listed.iter().any(|p| p.contains("until then the last good config")), "{listed:?}");
    }

    #[test]
    fn with_no_good_config_the_error_is_returned() {
        let home = tempfile::tempdir().unwrap();
        let paths = Paths::under(home.path());
        std::fs::create_dir_all(&paths.config_dir).unwrap();
        std::fs::write(paths.config_dir.join("config.toml"), "nonsense = [").unwrap();
        let projects = Projects::new(paths, ledger(home.path()));
        assert!(projects.load_config(std::path::Path::new("/nonexistent")).is_err());
    }
}

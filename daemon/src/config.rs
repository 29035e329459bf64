//! Configuration files, read the way caesar reads them: the global layer
//! (`<config_dir>/config.toml`), the project layer
//! (`<project>/.caesar/config.toml`) and the local layer
//! (`<project>/.caesar/config.local.toml`). `[[agent]]` entries merge by `id`,
//! a later layer replacing an earlier entry of the same id.
//!
//! A file that does not parse is refused with its path, line and column.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// An OACP generic agent declared with `[[agent]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    pub id: String,
    /// The executable: a path, or a name looked up on PATH.
    pub bin: String,
    /// The argument template; see [`crate::agents::expand_args`].
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub display_name: Option<String>,
    /// Extra environment variables for the agent.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

/// One parsed file. Unknown top-level tables are kept for later layers of
/// the product (roles, policy, worktree) and ignored here.
#[derive(Debug, Clone, Default, Deserialize)]
struct Layer {
    #[serde(default)]
    agent: Vec<AgentDef>,
    /// Executables of the native providers: `claude = "/opt/tools/claude"`.
    #[serde(default)]
    bin: std::collections::BTreeMap<String, String>,
}

/// Which file a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Global,
    Project,
    Local,
}

/// The effective configuration for one project.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Generic agents, in declaration order, with the layer each came from.
    pub agents: Vec<(AgentDef, Origin)>,
    /// `[bin]`: provider id to executable, merged by key.
    pub bin: std::collections::BTreeMap<String, (String, Origin)>,
    /// The files that were read.
    pub files: Vec<PathBuf>,
}

impl Config {
    /// Loads and merges the three layers for `project`.
    pub fn load(global_dir: &Path, project: &Path) -> Result<Config> {
        let mut config = Config::default();
        let layers = [
            (global_dir.join("config.toml"), Origin::Global),
            (project.join(".caesar").join("config.toml"), Origin::Project),
            (project.join(".caesar").join("config.local.toml"), Origin::Local),
        ];
        for (path, origin) in layers {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io_at("cannot read", &path, e)),
            };
            let layer = parse_layer(&path, &text)?;
            for agent in layer.agent {
                validate_agent(&path, &agent)?;
                match config.agents.iter_mut().find(|(a, _)| a.id == agent.id) {
                    Some(slot) => *slot = (agent, origin),
                    None => config.agents.push((agent, origin)),
                }
            }
            for (id, bin) in layer.bin {
                if bin.trim().is_empty() {
                    return Err(Error::Invalid(format!(
                        "{}: [bin] `{id}` is empty: give the executable's path, or remove the key",
                        path.display()
                    )));
                }
                config.bin.insert(id, (bin, origin));
            }
            config.files.push(path);
        }
        Ok(config)
    }

    /// The generic agent with this id, if declared.
    pub fn agent(&self, id: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|(a, _)| a.id == id).map(|(a, _)| a)
    }
}

fn parse_layer(path: &Path, text: &str) -> Result<Layer> {
    toml::from_str::<Layer>(text).map_err(|e| {
        let place = e
            .span()
            .map(|span| {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(":{line}")
            })
            .unwrap_or_default();
        Error::Invalid(format!("{}{place}: {}", path.display(), e.message()))
    })
}

fn validate_agent(path: &Path, agent: &AgentDef) -> Result<()> {
    if agent.id.trim().is_empty()
        || !agent.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Error::Invalid(format!(
            "{}: [[agent]] id `{}` must be letters, digits, '-', '_' or '.'",
            path.display(),
            agent.id
        )));
    }
    if agent.bin.trim().is_empty() {
        return Err(Error::Invalid(format!(
            "{}: [[agent]] `{}` has an empty `bin`: give the executable's name or path",
            path.display(),
            agent.id
        )));
    }
    Ok(())
}

/// The project a workspace belongs to: the nearest ancestor holding a
/// `.caesar` directory, else the nearest holding `.git`, else the workspace.
pub fn project_root(workspace: &Path) -> PathBuf {
    for marker in [".caesar", ".git"] {
        if let Some(dir) = workspace.ancestors().find(|d| d.join(marker).exists()) {
            return dir.to_path_buf();
        }
    }
    workspace.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn agents_merge_by_id_across_layers() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        write(
            &g.path().join("config.toml"),
            "[[agent]]\nid = \"a\"\nbin = \"global-a\"\n[[agent]]\nid = \"b\"\nbin = \"b\"\n",
        );
        write(
            &p.path().join(".caesar/config.toml"),
            "[[agent]]\nid = \"a\"\nbin = \"project-a\"\nargs = [\"{{prompt}}\"]\n",
        );
        write(
            &p.path().join(".caesar/config.local.toml"),
            "[policy]\nmax_parallel = 2\n[bin]\nclaude = \"/opt/claude\"\n",
        );
        let c = Config::load(g.path(), p.path()).unwrap();
        assert_eq!(c.agents.len(), 2);
        assert_eq!(c.agent("a").unwrap().bin, "project-a");
        assert_eq!(c.agents[0].1, Origin::Project);
        assert_eq!(c.agent("b").unwrap().bin, "b");
        assert_eq!(c.files.len(), 3);
        assert_eq!(c.bin["claude"], ("/opt/claude".to_owned(), Origin::Local));
    }

    #[test]
    fn a_parse_error_names_the_file_and_line() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        let file = p.path().join(".caesar/config.toml");
        write(&file, "[[agent]]\nid = \"a\"\nbin = \n");
        let err = Config::load(g.path(), p.path()).unwrap_err().to_string();
        assert!(err.contains("config.toml:3"), "{err}");
        write(&file, "[[agent]]\nid = \"a\"\nbin = \"x\"\nargz = []\n");
        let err = Config::load(g.path(), p.path()).unwrap_err().to_string();
        assert!(err.contains("argz"), "{err}");
        write(&file, "[[agent]]\nid = \"a b\"\nbin = \"x\"\n");
        assert!(Config::load(g.path(), p.path()).is_err());
    }
}

//! `caesar trust` (issue 19): the engine's side of the trust gate for
//! repository configs. The records and the gate are `crate::trust`; which
//! keys an untrusted layer loses is `config/gate.rs`.

use std::path::{Path, PathBuf};

use crate::config::{layer_paths, project_root};
use crate::error::{Error, Result};
use crate::trust::{Entry, TrustStore};

use super::projects::Projects;

impl Projects {
    /// `trust` records a project (its folder and each layer file that
    /// exists now, by content) or one layer file; `revoke` removes the
    /// records of a path and beneath it; `list` returns every record.
    pub fn trust(&self, action: &str, path: &str) -> Result<Vec<Entry>> {
        let store = TrustStore::new(&self.paths.state_dir);
        if action == "list" {
            return Ok(store.list());
        }
        let p = PathBuf::from(path);
        if !p.is_absolute() {
            return Err(Error::Invalid(format!("`path` must be an absolute path, got `{path}`")));
        }
        match action {
            "revoke" => store.revoke(&p),
            "trust" => self.trust_path(&store, &p),
            other => Err(Error::Invalid(format!("`action` must be trust, revoke or list, got `{other}`"))),
        }
    }

    fn trust_path(&self, store: &TrustStore, p: &Path) -> Result<Vec<Entry>> {
        let read =
            |root: &Path, rel: &Path| crate::safe_fs::read_beneath_to_string(root, rel, crate::safe_fs::CONFIG_CAP);
        if p.is_dir() {
            let project = project_root(p);
            let mut out = vec![store.record(&project, None)?];
            for (file, origin) in layer_paths(&self.paths.config_dir, &project) {
                if origin == crate::config::Origin::Global {
                    continue;
                }
                let Ok(rel) = file.strip_prefix(&project) else { continue };
                match read(&project, rel) {
                    Ok(text) => out.push(store.record(&file, Some(text.as_bytes()))?),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io_at("cannot read", &file, e)),
                }
            }
            return Ok(out);
        }
        // One layer file: `<project>/.caesar/config.toml` or `config.local.toml`.
        let project = p.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        let is_layer = layer_paths(&self.paths.config_dir, &project)
            .iter()
            .any(|(f, o)| *o != crate::config::Origin::Global && f == p);
        if !is_layer {
            return Err(Error::Invalid(format!(
                "`path` {} is neither a project directory nor a project's .caesar/config.toml or config.local.toml",
                p.display()
            )));
        }
        let rel = p.strip_prefix(&project).map_err(|e| Error::Internal(e.to_string()))?;
        let text = read(&project, rel).map_err(|e| Error::io_at("cannot read", p, e))?;
        Ok(vec![store.record(p, Some(text.as_bytes()))?])
    }

    /// The warnings of the project at `workspace`'s untrusted layers.
    pub fn untrusted_warnings(&self, workspace: &str) -> Vec<String> {
        if workspace.is_empty() {
            return Vec::new();
        }
        self.config_for(workspace).map(|(c, _)| c.untrusted.iter().map(|u| u.warning()).collect()).unwrap_or_default()
    }
}

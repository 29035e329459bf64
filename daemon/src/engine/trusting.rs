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

/// After `caesar config` (or `policy`, `role`) changed a project layer: a
/// file trusted just before the edit, or one the edit made from nothing, is
/// trusted again as written, since its new text is the old one plus the
/// user's own edit; otherwise the note says the file stays untrusted and
/// how to trust it. Without this, any edit untrusted the file it wrote and
/// silently dropped the user's own `[[agent]]` entries and policy (issue 30).
pub(crate) fn after_own_edit(state_dir: &Path, project: &Path, o: &crate::config_edit::Outcome) -> Result<String> {
    use crate::trust::Gate as _;
    let store = TrustStore::new(state_dir);
    if o.before.trim().is_empty() || store.trusts(&o.path, &o.before) {
        store.record(&o.path, Some(o.after.as_bytes()))?;
        return Ok(String::new());
    }
    Ok(format!(
        "; {} was not trusted before this edit and still is not, so what in it could run code or widen the policy stays ignored: read it, then run `caesar trust {}`",
        o.path.display(),
        project.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::Gate as _;

    fn outcome(dir: &Path, before: &str, after: &str) -> crate::config_edit::Outcome {
        crate::config_edit::Outcome {
            changed: true,
            message: String::new(),
            path: dir.join(".caesar/config.toml"),
            before: before.to_owned(),
            after: after.to_owned(),
        }
    }

    #[test]
    fn an_edit_keeps_a_trusted_file_trusted_and_says_so_of_an_untrusted_one() {
        let state = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let store = TrustStore::new(state.path());
        let before = "[[agent]]\nid = \"mine\"\nbin = \"/bin/true\"\nargs = [\"{{prompt}}\"]\n";
        let after = format!("{before}[policy]\nmax_parallel = 2\n");
        let o = outcome(project.path(), before, &after);
        store.record(&o.path, Some(before.as_bytes())).unwrap();
        assert_eq!(after_own_edit(state.path(), project.path(), &o).unwrap(), "");
        assert!(store.trusts(&o.path, &after), "trusted as written");

        let o = outcome(
            project.path(),
            "[policy]\nallow_recursion = true\n",
            "[policy]\nallow_recursion = true\nmax_parallel = 1\n",
        );
        let note = after_own_edit(state.path(), project.path(), &o).unwrap();
        assert!(
            note.contains("not trusted") && note.contains(&format!("caesar trust {}", project.path().display())),
            "{note}"
        );
        assert!(!store.trusts(&o.path, &o.after), "an edit never trusts what the user had not");

        let o = outcome(project.path(), "", "[policy]\nmax_parallel = 1\n");
        assert_eq!(after_own_edit(state.path(), project.path(), &o).unwrap(), "");
        assert!(store.trusts(&o.path, &o.after), "a file made by the edit alone is the user's own");
    }
}

//! Editing one configuration layer without flattening the merge into it.
//!
//! An edit touches only the targeted file, through `toml_edit`, so its
//! comments, ordering and formatting survive. A list edit (`policy.allowed`,
//! `policy.denied`) starts from the *effective* list, so a layer that did
//! not declare the list yet takes ownership of all of it, and says so: from
//! then on, edits to that list in less specific layers no longer reach this
//! project. The result is re-read through the config loader before it is
//! written, so an edit can never leave a file caesar refuses.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, value};

use crate::config::{Config, IsolationPref, NetworkPref, Origin, layer_paths};
use crate::error::{Error, Result};
use crate::oacp::Mode;

/// One edit, as the API carries it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Edit {
    /// Adds (`present`) or removes an agent id from `policy.allowed` or `policy.denied`.
    PolicyList { field: String, id: String, present: bool },
    /// Sets `[models] <agent> = <model>`.
    SetModel { agent: String, model: String },
    /// Removes `[models] <agent>`.
    UnsetModel { agent: String },
    /// Adds a `[[role]]`, replacing one of the same name in this layer.
    RoleAdd { role: RoleSpec },
    /// Removes a `[[role]]` of this layer.
    RoleRemove { name: String },
    /// Sets one scalar of `[policy]` (`max_parallel`, `default_mode`, ...);
    /// `value` is the TOML value as text (`3`, `true`, `write`, `10m`).
    PolicySet { key: String, value: String },
}

/// A role as `role add` writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RoleSpec {
    pub name: String,
    #[serde(default)]
    pub purpose: String,
    pub agents: Vec<String>,
    pub mode: String,
    #[serde(default)]
    pub isolation: Option<String>,
    #[serde(default)]
    pub network: Option<String>,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// The role's prompt file, relative to `<project>/.caesar/`.
    #[serde(default)]
    pub system_prompt_file: Option<String>,
}

/// What an edit did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub changed: bool,
    pub message: String,
    pub path: PathBuf,
    /// The layer's text as the edit read it, and as it wrote it (the same
    /// when nothing changed): what its trust is decided on.
    pub before: String,
    pub after: String,
}

/// The file of a layer.
pub fn layer_path(global_dir: &Path, project: &Path, layer: Origin) -> Result<PathBuf> {
    layer_paths(global_dir, project)
        .into_iter()
        .find(|(_, o)| *o == layer)
        .map(|(p, _)| p)
        .ok_or_else(|| Error::Invalid("the default layer cannot be edited: pick global, project or local".to_owned()))
}

/// Applies `edit` to `layer` of `project`.
pub fn apply(global_dir: &Path, project: &Path, layer: Origin, edit: &Edit) -> Result<Outcome> {
    let effective = Config::load(global_dir, project)?;
    let path = layer_path(global_dir, project, layer)?;
    let before = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io_at("cannot read", &path, e)),
    };
    let mut doc: DocumentMut = before.parse().map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    let message = match edit {
        Edit::PolicyList { field, id, present } => edit_list(&mut doc, &effective, layer, field, id, *present)?,
        Edit::SetModel { agent, model } => {
            if model.trim().is_empty() {
                return Err(Error::Invalid("the model is empty: name a model, or use unset-model".to_owned()));
            }
            table(&mut doc, "models")?.insert(agent, value(model.as_str()));
            format!("[models] {agent} = \"{model}\"")
        }
        Edit::UnsetModel { agent } => {
            let removed = doc.get_mut("models").and_then(Item::as_table_like_mut).and_then(|t| t.remove(agent));
            match removed {
                Some(_) => format!("removed [models] {agent}"),
                None => format!("this layer sets no model for `{agent}`"),
            }
        }
        Edit::RoleAdd { role } => add_role(&mut doc, role)?,
        Edit::RoleRemove { name } => remove_role(&mut doc, name, &effective)?,
        Edit::PolicySet { key, value } => set_policy(&mut doc, key, value)?,
    };
    let after = doc.to_string();
    let changed = after != before;
    if changed {
        // Never write a file the loader would refuse.
        check_layer(global_dir, project, layer, &after)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
        }
        crate::safe_fs::write_atomic(&path, after.as_bytes()).map_err(|e| Error::io_at("cannot write", &path, e))?;
    }
    Ok(Outcome { changed, message, path, before, after })
}

/// Loads the config as it would be with `text` as `layer`'s file, in a
/// scratch copy of the three layers.
fn check_layer(global_dir: &Path, project: &Path, layer: Origin, text: &str) -> Result<()> {
    let scratch = std::env::temp_dir().join(format!("caesar-config-check-{}", crate::ids::secret()));
    let (g, p) = (scratch.join("global"), scratch.join("project"));
    let copy = |from: &Path, to: &Path| -> Result<()> {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
        }
        if from.exists() {
            std::fs::copy(from, to).map_err(|e| Error::io_at("cannot copy", from, e))?;
        }
        Ok(())
    };
    let result = (|| {
        for ((src, origin), (dst, _)) in layer_paths(global_dir, project).into_iter().zip(layer_paths(&g, &p)) {
            if origin == layer {
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
                }
                std::fs::write(&dst, text).map_err(|e| Error::io_at("cannot write", &dst, e))?;
            } else {
                copy(&src, &dst)?;
            }
        }
        Config::load(&g, &p).map(|_| ())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result.map_err(|e| Error::Invalid(format!("the edit would make the config invalid: {e}")))
}

fn table<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut Table> {
    if !doc.contains_key(name) {
        doc.insert(name, Item::Table(Table::new()));
    }
    doc.get_mut(name)
        .and_then(Item::as_table_mut)
        .ok_or_else(|| Error::Invalid(format!("`{name}` in this layer is not a table: fix it by hand first")))
}

fn edit_list(
    doc: &mut DocumentMut,
    effective: &Config,
    layer: Origin,
    field: &str,
    id: &str,
    present: bool,
) -> Result<String> {
    let current = match field {
        "allowed" => &effective.policy.allowed,
        "denied" => &effective.policy.denied,
        "nested_workspaces" => {
            // Only the user's own config names one (issue 29): a project's
            // file is not read for it.
            if layer != Origin::Global {
                return Err(Error::Invalid(
                    "policy.nested_workspaces is read from your global config only: add `--global`".to_owned(),
                ));
            }
            if !Path::new(id).is_absolute() {
                return Err(Error::Invalid(format!(
                    "`{id}` is not an absolute path: name the directory a nested delegation may work in by its absolute path"
                )));
            }
            &effective.policy.nested_workspaces
        }
        other => {
            return Err(Error::Invalid(format!(
                "unknown policy list `{other}`: use `allowed`, `denied` or `nested_workspaces`"
            )));
        }
    };
    let policy = table(doc, "policy")?;
    let owned = policy.contains_key(field);
    let mut list: Vec<String> = match policy.get(field).and_then(Item::as_array) {
        Some(a) => a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        None => current.clone(),
    };
    let had = list.iter().any(|a| a == id);
    if present && !had {
        list.push(id.to_owned());
    } else if !present {
        list.retain(|a| a != id);
    }
    if owned && had == present {
        return Ok(format!("policy.{field} already {} `{id}`", if present { "has" } else { "lacks" }));
    }
    match policy.get_mut(field).and_then(Item::as_array_mut) {
        Some(array) => {
            // Keep the array's own formatting: edit it in place.
            array.retain(|v| v.as_str().is_some_and(|s| list.iter().any(|l| l == s)));
            if present && !had {
                array.push(id);
            }
        }
        None => {
            let mut array = Array::new();
            for a in &list {
                array.push(a.as_str());
            }
            policy.insert(field, value(array));
        }
    }
    let mut message = format!("policy.{field} = [{}] in the {} layer", list.join(", "), layer.as_str());
    if !owned {
        let from = effective.origin_of(&format!("policy.{field}"));
        message.push_str(&format!(
            ". This layer now owns the whole list (it was inherited from {}): changes to policy.{field} in less specific layers no longer apply here",
            from.as_str()
        ));
    }
    if field == "allowed" && present && current.is_empty() {
        message.push_str(". Note: `allowed` was empty (every agent allowed); now only the listed agents are");
    }
    Ok(message)
}

fn add_role(doc: &mut DocumentMut, role: &RoleSpec) -> Result<String> {
    if role.name.trim().is_empty() {
        return Err(Error::Invalid("the role needs a name".to_owned()));
    }
    Mode::parse(&role.mode)
        .ok_or_else(|| Error::Invalid(format!("unknown mode `{}`: use `read-only` or `write`", role.mode)))?;
    if let Some(i) = &role.isolation
        && IsolationPref::parse(i).is_none()
    {
        return Err(Error::Invalid(format!("unknown isolation `{i}`: use `inplace`, `worktree` or `auto`")));
    }
    if let Some(n) = &role.network
        && NetworkPref::parse(n).is_none()
    {
        return Err(Error::Invalid(format!("unknown network `{n}`: use `auto`, `on` or `off`")));
    }
    let mut t = Table::new();
    t.insert("name", value(role.name.as_str()));
    if !role.purpose.is_empty() {
        t.insert("purpose", value(role.purpose.as_str()));
    }
    let mut agents = Array::new();
    for a in &role.agents {
        agents.push(a.as_str());
    }
    t.insert("agents", value(agents));
    t.insert("mode", value(role.mode.as_str()));
    for (key, v) in [
        ("isolation", &role.isolation),
        ("network", &role.network),
        ("timeout", &role.timeout),
        ("model", &role.model),
        ("system_prompt_file", &role.system_prompt_file),
    ] {
        if let Some(v) = v {
            t.insert(key, value(v.as_str()));
        }
    }
    let roles = doc.entry("role").or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    let roles = roles.as_array_of_tables_mut().ok_or_else(|| {
        Error::Invalid("`role` in this layer is not an array of tables: fix it by hand first".to_owned())
    })?;
    let existing = roles.iter().position(|r| r.get("name").and_then(Item::as_str) == Some(role.name.as_str()));
    match existing {
        Some(i) => {
            if let Some(slot) = roles.get_mut(i) {
                *slot = t;
            }
            Ok(format!("replaced role `{}`", role.name))
        }
        None => {
            roles.push(t);
            Ok(format!("added role `{}`", role.name))
        }
    }
}

/// The scalars of `[policy]` and the kind of value each takes.
const POLICY_SCALARS: [(&str, &str); 11] = [
    ("max_parallel", "a whole number"),
    ("max_depth", "a whole number"),
    ("default_mode", "read-only or write"),
    ("default_isolation", "inplace, worktree or auto"),
    ("default_network", "auto, on or off"),
    ("default_timeout", "a duration such as 10m"),
    ("allow_recursion", "true or false"),
    ("allow_inplace_write", "true or false"),
    ("box_memory_max_mb", "a whole number of MiB"),
    ("box_pids_max", "a whole number"),
    ("box_cpu_weight", "a whole number from 1 to 10000"),
];

fn set_policy(doc: &mut DocumentMut, key: &str, text: &str) -> Result<String> {
    let Some((_, kind)) = POLICY_SCALARS.iter().find(|(k, _)| *k == key) else {
        let keys: Vec<&str> = POLICY_SCALARS.iter().map(|(k, _)| *k).collect();
        return Err(Error::Invalid(format!(
            "unknown policy key `{key}`: use one of {} (allowed and denied are lists: use policy_list)",
            keys.join(", ")
        )));
    };
    let text = text.trim();
    let bad = || Error::Invalid(format!("policy.{key} takes {kind}, got `{text}`"));
    let item = match key {
        "max_parallel" | "max_depth" | "box_memory_max_mb" | "box_pids_max" | "box_cpu_weight" => {
            value(text.parse::<u32>().map_err(|_| bad())? as i64)
        }
        "allow_recursion" | "allow_inplace_write" => value(text.parse::<bool>().map_err(|_| bad())?),
        "default_mode" => value(Mode::parse(text).ok_or_else(bad)?.as_str()),
        "default_isolation" => {
            IsolationPref::parse(text).ok_or_else(bad)?;
            value(text)
        }
        "default_network" => {
            NetworkPref::parse(text).ok_or_else(bad)?;
            value(text)
        }
        _ => {
            caesar_proto::duration::parse_ms(text).map_err(|_| bad())?;
            value(text)
        }
    };
    let policy = table(doc, "policy")?;
    match policy.get_mut(key) {
        // Keep a trailing comment on the line.
        Some(Item::Value(old)) => {
            let decor = old.decor().clone();
            if let Item::Value(mut new) = item {
                *new.decor_mut() = decor;
                *old = new;
            }
        }
        _ => {
            policy.insert(key, item);
        }
    }
    Ok(format!("policy.{key} = {text}"))
}

fn remove_role(doc: &mut DocumentMut, name: &str, effective: &Config) -> Result<String> {
    let Some(roles) = doc.get_mut("role").and_then(Item::as_array_of_tables_mut) else {
        return Err(not_in_layer(name, effective));
    };
    let before = roles.len();
    roles.retain(|r| r.get("name").and_then(Item::as_str) != Some(name));
    if roles.len() == before {
        return Err(not_in_layer(name, effective));
    }
    if roles.is_empty() {
        doc.remove("role");
    }
    Ok(format!("removed role `{name}` from this layer"))
}

fn not_in_layer(name: &str, effective: &Config) -> Error {
    match effective.roles.iter().find(|(r, _)| r.name == name) {
        Some((_, origin)) => Error::NotFound(format!(
            "role `{name}` is not declared in this layer; it comes from the {} layer",
            origin.as_str()
        )),
        None => Error::NotFound(format!("no role `{name}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_edits_take_ownership_and_keep_comments() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        std::fs::write(g.path().join("config.toml"), "[policy]\ndenied = [\"grok\"]\n").unwrap();
        std::fs::create_dir_all(p.path().join(".caesar")).unwrap();
        let project_file = p.path().join(".caesar/config.toml");
        std::fs::write(&project_file, "# my project\n[policy]\nmax_parallel = 2 # two at a time\n").unwrap();

        let edit = Edit::PolicyList { field: "denied".into(), id: "qwen".into(), present: true };
        let o = apply(g.path(), p.path(), Origin::Project, &edit).unwrap();
        assert!(o.changed);
        assert!(o.message.contains("now owns the whole list") && o.message.contains("global"), "{}", o.message);
        let text = std::fs::read_to_string(&project_file).unwrap();
        assert!(text.starts_with("# my project\n"), "{text}");
        assert!(text.contains("max_parallel = 2 # two at a time"), "{text}");
        let c = Config::load(g.path(), p.path()).unwrap();
        assert_eq!(c.policy.denied, ["grok", "qwen"]);
        assert_eq!(c.origin_of("policy.denied"), Origin::Project);
        // The global layer was not touched.
        assert_eq!(std::fs::read_to_string(g.path().join("config.toml")).unwrap(), "[policy]\ndenied = [\"grok\"]\n");

        let again = apply(g.path(), p.path(), Origin::Project, &edit).unwrap();
        assert!(!again.changed);
        let enable = Edit::PolicyList { field: "denied".into(), id: "grok".into(), present: false };
        apply(g.path(), p.path(), Origin::Project, &enable).unwrap();
        assert_eq!(Config::load(g.path(), p.path()).unwrap().policy.denied, ["qwen"]);
    }

    #[test]
    fn nested_workspaces_are_named_in_the_global_layer_by_absolute_path() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        let nest = |id: &str| Edit::PolicyList { field: "nested_workspaces".into(), id: id.into(), present: true };
        apply(g.path(), p.path(), Origin::Global, &nest("/srv/shared")).unwrap();
        assert_eq!(Config::load(g.path(), p.path()).unwrap().policy.nested_workspaces, ["/srv/shared"]);
        let err = apply(g.path(), p.path(), Origin::Project, &nest("/srv/other")).unwrap_err().to_string();
        assert!(err.contains("global config only") && err.contains("--global"), "{err}");
        let err = apply(g.path(), p.path(), Origin::Global, &nest("relative")).unwrap_err().to_string();
        assert!(err.contains("`relative` is not an absolute path"), "{err}");
        assert_eq!(Config::load(g.path(), p.path()).unwrap().policy.nested_workspaces, ["/srv/shared"]);
    }

    #[test]
    fn models_and_roles_are_edited_in_their_layer_only() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        apply(g.path(), p.path(), Origin::Local, &Edit::SetModel { agent: "codex".into(), model: "o4".into() })
            .unwrap();
        let role = RoleSpec {
            name: "doc".into(),
            purpose: "writes docs".into(),
            agents: vec!["codex".into()],
            mode: "write".into(),
            isolation: None,
            network: Some("off".into()),
            timeout: Some("5m".into()),
            model: None,
            system_prompt_file: Some("prompts/doc.md".into()),
        };
        apply(g.path(), p.path(), Origin::Project, &Edit::RoleAdd { role: role.clone() }).unwrap();
        let c = Config::load(g.path(), p.path()).unwrap();
        assert_eq!(c.models["codex"], ("o4".to_owned(), Origin::Local));
        let doc = c.role("doc").unwrap();
        assert_eq!((doc.timeout_ms, doc.network), (300_000, NetworkPref::Off));
        assert_eq!(doc.system_prompt_file.as_deref(), Some("prompts/doc.md"));

        let bad = RoleSpec { mode: "yolo".into(), ..role };
        assert!(apply(g.path(), p.path(), Origin::Project, &Edit::RoleAdd { role: bad }).is_err());
        let e = apply(g.path(), p.path(), Origin::Project, &Edit::RoleRemove { name: "reviewer".into() }).unwrap_err();
        assert!(e.to_string().contains("default layer"), "{e}");
        apply(g.path(), p.path(), Origin::Project, &Edit::RoleRemove { name: "doc".into() }).unwrap();
        assert!(Config::load(g.path(), p.path()).unwrap().role("doc").is_none());
        apply(g.path(), p.path(), Origin::Local, &Edit::UnsetModel { agent: "codex".into() }).unwrap();
        assert!(Config::load(g.path(), p.path()).unwrap().models.is_empty());
    }

    #[test]
    fn an_edit_that_would_break_the_file_is_refused() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        let role = RoleSpec {
            name: "r".into(),
            purpose: String::new(),
            agents: vec![],
            mode: "write".into(),
            isolation: None,
            network: None,
            timeout: Some("10 parsecs".into()),
            model: None,
            system_prompt_file: None,
        };
        let e = apply(g.path(), p.path(), Origin::Project, &Edit::RoleAdd { role }).unwrap_err();
        assert!(e.to_string().contains("would make the config invalid"), "{e}");
        assert!(!p.path().join(".caesar/config.toml").exists(), "nothing written");
    }

    #[test]
    fn policy_scalars_are_set_with_their_comment_and_checked_by_kind() {
        let g = tempfile::tempdir().unwrap();
        let p = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(p.path().join(".caesar")).unwrap();
        let file = p.path().join(".caesar/config.toml");
        std::fs::write(&file, "# mine\n[policy]\nmax_parallel = 2 # two at a time\n").unwrap();
        let set = |key: &str, value: &str| Edit::PolicySet { key: key.into(), value: value.into() };
        apply(g.path(), p.path(), Origin::Project, &set("max_parallel", "3")).unwrap();
        apply(g.path(), p.path(), Origin::Project, &set("default_mode", "read-only")).unwrap();
        apply(g.path(), p.path(), Origin::Project, &set("allow_recursion", "true")).unwrap();
        apply(g.path(), p.path(), Origin::Project, &set("default_timeout", "90s")).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("max_parallel = 3 # two at a time"), "{text}");
        let c = Config::load(g.path(), p.path()).unwrap();
        assert_eq!((c.policy.max_parallel, c.policy.default_mode), (3, Mode::ReadOnly));
        assert!(c.policy.allow_recursion);
        assert_eq!(c.policy.default_timeout_ms, 90_000);
        let e = apply(g.path(), p.path(), Origin::Project, &set("max_parallel", "many")).unwrap_err();
        assert!(e.to_string().contains("policy.max_parallel takes a whole number"), "{e}");
        let e = apply(g.path(), p.path(), Origin::Project, &set("colour", "red")).unwrap_err();
        assert!(e.to_string().contains("unknown policy key `colour`"), "{e}");
        assert_eq!(Config::load(g.path(), p.path()).unwrap().policy.max_parallel, 3, "a refused edit writes nothing");
    }
}

//! Nested delegation (issue 19): a task's agent delegating under its own
//! authority. The depth comes from the calling task's record, never from
//! the request; a child's mode, isolation and network are no wider than its
//! parent's; `max_depth` and the recursion rule apply as to any delegation.
//! Its workspace stays inside its parent's repository unless the user's
//! policy names other directories (`[policy] nested_workspaces`, issue 29).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::oacp::{Isolation, Mode};
use crate::store::TaskRecord;

use super::*;

impl Engine {
    /// A delegation asked from inside `parent`'s process tree. The child is
    /// recorded as `parent`'s, so that the parent may await, answer and
    /// cancel it, and nothing else.
    pub async fn delegate_from(self: &Arc<Self>, parent: &TaskRecord, mut input: DelegateInput) -> Result<Delegated> {
        narrow(&Parent::of(parent), &mut input)?;
        let (config, _) = self.projects.load_config(&crate::config::project_root(Path::new(&parent.workspace)))?;
        let moved = keep_in_repository(parent, &mut input, &config.policy.nested_workspaces)?;
        let mut delegated = self.delegate_under(input, Some(parent)).await?;
        if let Some(note) = moved {
            delegated.warnings.insert("workspace_moved".to_owned(), note);
        }
        Ok(delegated)
    }
}

/// What of a parent task bounds its children.
#[derive(Debug, Clone, Copy)]
pub struct Parent<'a> {
    pub id: &'a str,
    pub mode: Mode,
    pub isolation: Isolation,
    pub network: bool,
    pub depth: u32,
}

impl<'a> Parent<'a> {
    /// The limits of `record`.
    pub fn of(record: &'a TaskRecord) -> Parent<'a> {
        Parent {
            id: &record.id,
            mode: record.mode,
            isolation: record.isolation,
            network: record.network,
            depth: record.depth,
        }
    }
}

/// Fills what the request left open with the parent's limits, and refuses
/// what it asked beyond them. `depth` is always the parent's plus one.
pub fn narrow(parent: &Parent<'_>, input: &mut DelegateInput) -> Result<()> {
    input.depth = parent.depth + 1;
    // A command of the request's own would run with the daemon's authority,
    // outside the parent's confinement (issue 29): a nested delegation
    // carries none; the role's `verify` from the user's trusted config still
    // applies.
    if let Some(cmd) = input.verify.iter().find(|c| !c.trim().is_empty()) {
        return Err(Error::Refused(format!(
            "`verify` is refused: this delegation comes from task {}, and a delegation from inside a task may carry no command of its own (it asked to run `{}`). Only the user's own delegation or the user's trusted config (a role's `verify`) names commands: leave `verify` out, or ask the orchestrator for the check",
            parent.id,
            cmd.chars().take(200).collect::<String>()
        )));
    }
    input.verify.clear();
    if parent.mode == Mode::ReadOnly {
        match input.mode.as_deref().filter(|m| !m.is_empty()).map(Mode::parse) {
            Some(Some(Mode::Write)) => {
                return Err(Error::Refused(format!(
                    "`mode` write is refused: this delegation comes from task {}, which is read-only, and a child is never wider than its parent. Ask for mode `read-only`",
                    parent.id
                )));
            }
            Some(None) => {} // resolve names the bad value
            _ => input.mode = Some(Mode::ReadOnly.as_str().to_owned()),
        }
    }
    if !parent.network {
        match input.network.as_deref().filter(|n| !n.is_empty()) {
            Some("on") => {
                return Err(Error::Refused(format!(
                    "`network` on is refused: this delegation comes from task {}, which runs without the network. Ask for network `off`",
                    parent.id
                )));
            }
            Some(_) => {}
            None => input.network = Some("off".to_owned()),
        }
    }
    Ok(())
}

/// Keeps a child's workspace inside its parent's repository (issue 29): a
/// directory of the parent's repository (its workspace's, or the directory
/// itself outside one), or one `allowed` names (the user's policy). A
/// directory of the parent's own worktree becomes the same directory of
/// the repository (said in the returned note): a worktree's git directory
/// is its agent's, and the daemon never opens a repository through it.
/// Another task's worktree is refused. A workspace that is not an absolute
/// directory is left for the delegation's own check to name.
pub fn keep_in_repository(
    parent: &TaskRecord,
    input: &mut DelegateInput,
    allowed: &[String],
) -> Result<Option<String>> {
    let asked = PathBuf::from(&input.workspace);
    let Some(asked) = asked.is_absolute().then(|| asked.canonicalize().ok()).flatten() else { return Ok(None) };
    let parent_ws = PathBuf::from(&parent.workspace);
    let prepared = parent.workshop.as_ref();
    let root = prepared
        .and_then(|p| p.repo_root.clone())
        .or_else(|| crate::workshop::facts(&parent_ws).root)
        .unwrap_or_else(|| parent_ws.clone());
    let root = root.canonicalize().unwrap_or(root);
    let worktree = prepared.filter(|p| p.isolation == Isolation::Worktree).and_then(|p| p.worktree.as_ref());
    if let Some(rel) = worktree.and_then(|wt| asked.strip_prefix(wt).ok()) {
        let mapped = if rel.as_os_str().is_empty() { root.clone() } else { root.join(rel) };
        let note = format!(
            "the workspace {} is in task {}'s worktree, whose git directory is that task's agent's: the child works in the same directory of the repository, {}",
            asked.display(),
            parent.id,
            mapped.display()
        );
        input.workspace = mapped.display().to_string();
        return Ok(Some(note));
    }
    let in_worktrees = asked.starts_with(root.join(crate::workshop::WORKTREES_DIR));
    let named = allowed.iter().any(|d| {
        let d = Path::new(d);
        asked.starts_with(d.canonicalize().unwrap_or_else(|_| d.to_path_buf()))
    });
    if !in_worktrees && (asked.starts_with(&root) || named) {
        return Ok(None);
    }
    let why = if in_worktrees { "it is another task's worktree" } else { "it is outside that repository" };
    Err(Error::Refused(format!(
        "`workspace` {} is refused: this delegation comes from task {}, and a delegation from inside a task stays inside its parent's repository, {} ({why}). Name a directory of {}, or have the user name the directory in `[policy] nested_workspaces` of their own config",
        asked.display(),
        parent.id,
        root.display(),
        root.display()
    )))
}

/// The child as resolved, against its parent: write only under a writing
/// parent, in place only under a parent that writes in place, the network
/// only under a parent that has it.
pub fn check_resolved(parent: &Parent<'_>, mode: Mode, isolation: Isolation, network: bool) -> Result<()> {
    if mode == Mode::Write && parent.mode == Mode::ReadOnly {
        return Err(Error::Refused(format!(
            "`mode` write is refused: this delegation comes from read-only task {}. Ask for mode `read-only`",
            parent.id
        )));
    }
    let parent_inplace_write = parent.mode == Mode::Write && parent.isolation == Isolation::Inplace;
    if mode == Mode::Write && isolation == Isolation::Inplace && !parent_inplace_write {
        return Err(Error::Refused(format!(
            "`isolation` inplace is refused for a write task: this delegation comes from task {}, which does not write in place, and a child is never wider than its parent. Ask for isolation `worktree`",
            parent.id
        )));
    }
    if network && !parent.network {
        return Err(Error::Refused(format!(
            "the child would have the network, and its parent task {} has none: use an agent that can run without it (network `off`)",
            parent.id
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(mode: Mode, isolation: Isolation, network: bool) -> Parent<'static> {
        Parent { id: "t_parent", mode, isolation, network, depth: 2 }
    }

    #[test]
    fn a_child_is_never_wider_than_its_parent() {
        let ro = parent(Mode::ReadOnly, Isolation::Inplace, false);
        let mut input = DelegateInput { depth: 0, ..DelegateInput::default() };
        narrow(&ro, &mut input).unwrap();
        assert_eq!((input.depth, input.mode.as_deref(), input.network.as_deref()), (3, Some("read-only"), Some("off")));
        let mut wide = DelegateInput { mode: Some("write".into()), ..DelegateInput::default() };
        assert!(narrow(&ro, &mut wide).unwrap_err().to_string().contains("`mode` write"));
        let mut verify = DelegateInput { verify: vec!["touch ~/.bashrc".into()], ..DelegateInput::default() };
        let said = narrow(&ro, &mut verify).unwrap_err().to_string();
        assert!(said.contains("`verify` is refused") && said.contains("touch ~/.bashrc"), "{said}");
        let mut net = DelegateInput { network: Some("on".into()), ..DelegateInput::default() };
        assert!(narrow(&ro, &mut net).unwrap_err().to_string().contains("`network` on"));

        let wt = parent(Mode::Write, Isolation::Worktree, true);
        assert!(check_resolved(&wt, Mode::Write, Isolation::Worktree, true).is_ok());
        assert!(check_resolved(&wt, Mode::ReadOnly, Isolation::Inplace, true).is_ok());
        assert!(
            check_resolved(&wt, Mode::Write, Isolation::Inplace, true).unwrap_err().to_string().contains("isolation")
        );
        assert!(check_resolved(&ro, Mode::ReadOnly, Isolation::Inplace, true).is_err());
        let ip = parent(Mode::Write, Isolation::Inplace, true);
        assert!(check_resolved(&ip, Mode::Write, Isolation::Inplace, true).is_ok());
    }
}

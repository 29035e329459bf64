//! Continuing a finished task in its own worktree (issue 31, item 2).
//!
//! `caesar continue <task> "<text>"` (and `continue_from` of a delegation)
//! makes a new task, with an id of its own, that works where its source
//! worked: the same worktree and branch (the source's changes are there),
//! the same base (its diff is the whole work since the first task's base),
//! the agent's native session resumed where the agent can. It is planned by
//! the one planner ([`crate::planner::plan`]) over the existing workshop
//! (`Facts::continues`), and stored with its link in one transaction
//! (`store/continuations.rs`), so a source is continued once.
//!
//! The worktree belongs to the newest task of the lineage: an older link
//! can be neither continued again, nor applied, discarded or removed by gc
//! (each refuses and names the newest, whose diff holds all of the older
//! links' work). A source that ran in place continues in place, with its
//! session; a read-only source cannot be continued in write mode.

use crate::error::{Error, Result};
use crate::oacp::{Isolation, Mode};
use crate::store::{ChangesState, Store, TaskRecord};
use crate::workshop::Prepared;

use super::observe::find_task;
use super::*;

/// The source of a continuation, checked, and its workshop when the new
/// task takes it over (a worktree source).
#[derive(Debug, Clone)]
pub(super) struct Source {
    pub id: String,
    pub workshop: Option<Prepared>,
    /// The session was the source's, not the caller's: dropped where the
    /// agent cannot resume one (a generic agent reporting a session id).
    pub session_inherited: bool,
}

/// Why an older link of a lineage may not be acted on: the newest task
/// holds the worktree. `None` when `id` is the newest.
pub(super) fn held_by_newer(store: &Store, id: &str, what: &str) -> Result<Option<String>> {
    let newest = store.newest_continuation(id)?;
    if newest == id {
        return Ok(None);
    }
    Ok(Some(format!(
        "task {id} was continued by task {newest}, which works in the same worktree and holds all of {id}'s \
         changes: {what} {newest} instead"
    )))
}

/// Checks `id` as the source of a continuation and fills `input` from it:
/// its workspace, agent (and role), mode, isolation, session, model and
/// limits where the caller said nothing, and a note in the context.
pub(super) fn take_source(store: &Store, id: &str, input: &mut DelegateInput) -> Result<Source> {
    let named = find_task(store, id)?;
    // A chain of fallback attempts stands for its last attempt.
    let (head, _) = super::fallback::head_of(store, &named.id);
    let source = if head == named.id { named } else { find_task(store, &head)? };
    check(store, &source)?;
    let asked_session = input.session_id.is_some();
    fill(&source, input)?;
    let session_inherited = !asked_session && input.session_id.is_some();
    let workshop = match source.isolation {
        Isolation::Worktree => Some(worktree_of(&source)?),
        Isolation::Inplace => None,
    };
    Ok(Source { id: source.id, workshop, session_inherited })
}

/// The source may be continued: it ended, its changes are undecided, it was
/// not continued already, and it ran on this machine.
fn check(store: &Store, source: &TaskRecord) -> Result<()> {
    let id = &source.id;
    if !source.status.is_terminal() {
        return Err(Error::Precondition(format!(
            "task {id} is still {}: tell its agent with `caesar steer {id} \"<text>\"` (caesar_steer), or await it \
             and continue it then",
            source.status.as_str()
        )));
    }
    if let Some(by) = store.continued_by(id)? {
        let newest = store.newest_continuation(&by)?;
        return Err(Error::Precondition(format!(
            "task {id} was already continued by task {by}: continue the newest task of its lineage, \
             `caesar continue {newest} \"<text>\"`"
        )));
    }
    match source.changes_state {
        Some(ChangesState::Applied) => {
            return Err(Error::Precondition(format!(
                "task {id}'s changes were already applied: its worktree is done with; delegate a new task for what \
                 comes next"
            )));
        }
        Some(ChangesState::Discarded) => {
            return Err(Error::Precondition(format!(
                "task {id}'s changes were discarded: delegate a new task instead"
            )));
        }
        None => {}
    }
    if source.launch.kube.is_some() {
        return Err(Error::Precondition(format!(
            "task {id} ran in a Kubernetes pod, which cannot be continued yet: delegate a new task"
        )));
    }
    Ok(())
}

/// Fills what the caller left out from the source, and refuses a mode or
/// isolation the source's workshop cannot take.
fn fill(source: &TaskRecord, input: &mut DelegateInput) -> Result<()> {
    let id = &source.id;
    if let Some(m) = input.mode.as_deref().filter(|m| !m.is_empty()) {
        let mode =
            Mode::parse(m).ok_or_else(|| Error::Invalid(format!("unknown mode `{m}`: use `read-only` or `write`")))?;
        if mode != source.mode {
            let why = match source.mode {
                Mode::ReadOnly => format!(
                    "task {id} ran read-only, so it cannot be continued in write mode: delegate a write task \
                     (`caesar run --mode write`) with what it found as context"
                ),
                Mode::Write => format!(
                    "task {id} ran in write mode and a continuation keeps its mode (its diff is the whole work): \
                     continue it without `mode`, or review its diff with a new read-only task"
                ),
            };
            return Err(Error::Invalid(why));
        }
    }
    if let Some(i) = input.isolation.as_deref().filter(|i| !i.is_empty())
        && i != "auto"
        && i != source.isolation.as_str()
    {
        return Err(Error::Invalid(format!(
            "task {id} ran with isolation {}, and its continuation works where it did: leave `isolation` out",
            source.isolation.as_str()
        )));
    }
    input.workspace.clone_from(&source.workspace);
    input.mode = Some(source.mode.as_str().to_owned());
    input.isolation = Some(source.isolation.as_str().to_owned());
    let same_agent = match input.agent.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => a == source.agent,
        None if input.role.as_deref().is_some_and(|r| !r.is_empty()) => false,
        None => {
            input.agent = Some(source.agent.clone());
            true
        }
    };
    if same_agent {
        if input.session_id.is_none() {
            input.session_id.clone_from(&source.session_id);
        }
        if input.model.is_none() {
            input.model.clone_from(&source.model);
        }
    }
    if input.timeout_ms.is_none() {
        input.timeout_ms = Some(source.timeout_ms);
    }
    if let Some(asked) = &source.launch.lifecycle.request {
        if input.acceptance_criteria.is_empty() {
            input.acceptance_criteria.clone_from(&asked.acceptance_criteria);
        }
        if input.constraints.is_empty() {
            input.constraints.clone_from(&asked.constraints);
        }
        if input.verify.is_empty() {
            input.verify.clone_from(&asked.verify);
        }
    }
    let note = continuation_note(source);
    input.context = if input.context.trim().is_empty() { note } else { format!("{note}\n\n{}", input.context) };
    Ok(())
}

/// What the continuing agent is told of the work it continues.
fn continuation_note(source: &TaskRecord) -> String {
    let objective: String = source.objective.chars().take(2000).collect();
    let place = match source.isolation {
        Isolation::Worktree => "in the same worktree and branch: its changes are already there",
        Isolation::Inplace => "in the same directory",
    };
    format!("This task continues task {} ({place}). Its objective was:\n{objective}", source.id)
}

/// The source's worktree, still there.
fn worktree_of(source: &TaskRecord) -> Result<Prepared> {
    let id = &source.id;
    let Some(p) = source.workshop.clone().filter(|p| p.isolation == Isolation::Worktree) else {
        return Err(Error::Precondition(format!(
            "task {id} never got its worktree (it failed before it ran): delegate a new task"
        )));
    };
    if !p.worktree.as_deref().is_some_and(std::path::Path::is_dir) {
        return Err(Error::Precondition(format!(
            "the worktree of task {id} is gone (removed by gc or by hand): its changes live on in its branch {}; \
             delegate a new task",
            p.branch.as_deref().unwrap_or("(none)")
        )));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(mode: Mode, isolation: Isolation) -> TaskRecord {
        TaskRecord {
            mode,
            isolation,
            agent: "claude".to_owned(),
            session_id: Some("s-1".to_owned()),
            workspace: "/repo".to_owned(),
            ..crate::store::tests::sample("t_aaaaaaaaaaaa")
        }
    }

    #[test]
    fn a_read_only_source_is_not_continued_in_write_mode() {
        let mut input = DelegateInput { mode: Some("write".to_owned()), ..Default::default() };
        let e = fill(&source(Mode::ReadOnly, Isolation::Inplace), &mut input).unwrap_err().to_string();
        assert!(e.contains("ran read-only, so it cannot be continued in write mode"), "{e}");
    }

    #[test]
    fn the_continuation_takes_the_sources_place_agent_and_session() {
        let mut input = DelegateInput { workspace: "/elsewhere".to_owned(), ..Default::default() };
        fill(&source(Mode::Write, Isolation::Worktree), &mut input).unwrap();
        assert_eq!(input.workspace, "/repo");
        assert_eq!(input.agent.as_deref(), Some("claude"));
        assert_eq!(input.session_id.as_deref(), Some("s-1"));
        assert_eq!((input.mode.as_deref(), input.isolation.as_deref()), (Some("write"), Some("worktree")));
        assert!(input.context.starts_with("This task continues task t_aaaaaaaaaaaa"), "{}", input.context);
        // Another agent gets no session of the first one.
        let mut input = DelegateInput { agent: Some("codex".to_owned()), ..Default::default() };
        fill(&source(Mode::Write, Isolation::Worktree), &mut input).unwrap();
        assert_eq!(input.session_id, None);
    }
}

//! Fork from a point (issue 31, item 4): a new task, in a new worktree
//! holding another task's files as they were at one of its events (its
//! checkpoint there, `checkpoints.rs`), with the handoff brief a relay
//! gets (`handoff.rs`), its point the fork's event. The source is left as it is.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::oacp::Isolation;
use crate::request::DelegateInput;
use crate::workshop::checkpoints;

use super::handoff::{self, Point};
use super::*;

/// What a fork asks.
#[derive(Debug, Clone, Default)]
pub struct ForkInput {
    /// The task to fork.
    pub source: String,
    /// The event whose files the fork starts with; `None`: the source's latest state.
    pub at: Option<u64>,
    /// The fork's agent; `None`: the source's.
    pub agent: Option<String>,
    /// What the fork's agent should do.
    pub text: String,
    pub model: Option<String>,
}

/// How long a fork waits for the source's due checkpoints.
const SETTLE: Duration = Duration::from_secs(10);

impl Engine {
    /// Starts the fork: checks the source and the point, finds the files
    /// there, and delegates a write task in a worktree that starts with
    /// them. Its lineage (`forked_from`) is stored with it.
    pub async fn fork(self: &Arc<Self>, f: ForkInput) -> Result<Delegated> {
        if f.text.trim().is_empty() {
            return Err(Error::Invalid("the fork's text is empty: say what its agent should do".to_owned()));
        }
        let source = self.store.task(&f.source)?.ok_or_else(|| {
            Error::NotFound(format!("unknown task `{}`: `caesar ls` lists the tasks that can be forked", f.source))
        })?;
        let prepared = source_worktree(&source)?;
        if let Some(at) = f.at
            && at >= source.event_count
        {
            let last = match source.event_count {
                0 => "it has no event yet".to_owned(),
                n => format!("its last event is {}", n - 1),
            };
            return Err(Error::Invalid(format!(
                "--at {at} is beyond task {}'s events ({last}): `caesar logs {}` shows them with their seq",
                source.id, source.id
            )));
        }
        // The checkpoints of the events stored so far are taken first.
        self.checkpoints.settled(&source.id, SETTLE).await;
        let (p, at) = (prepared.clone(), f.at);
        let (tree, seq, changed) = tokio::task::spawn_blocking(move || {
            let (tree, seq) = checkpoints::tree_at(&p, at)?;
            let changed = checkpoints::changed_files(&p, tree)?;
            Ok::<_, crate::workshop::WorkshopError>((tree, seq, changed))
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        let seq = f.at.unwrap_or(seq.max(source.event_count.saturating_sub(1)));
        let facts = handoff::Facts {
            task_id: source.id.clone(),
            previous_agent: source.agent.clone(),
            point: Point::Forked { seq, asked: f.at, text: f.text.clone() },
            objective: source.objective.clone(),
            steers: self.store.steers_of(&source.id)?.into_iter().map(|s| s.text).collect(),
            base_ref: prepared.base_ref.clone(),
            files: changed.into_iter().map(Into::into).collect(),
            ..handoff::Facts::default()
        };
        let input = DelegateInput {
            objective: f.text.clone(),
            context: handoff::brief(&facts),
            agent: Some(f.agent.clone().unwrap_or_else(|| source.agent.clone())),
            mode: Some("write".to_owned()),
            isolation: Some("worktree".to_owned()),
            workspace: source.workspace.clone(),
            model: f.model.clone(),
            ..DelegateInput::default()
        };
        let mut staged = self.stage_delegation(input, None, None).await?;
        let Some(plan) = staged.delegated.record.launch.plan.as_mut().filter(|p| p.worktree_decided) else {
            return Err(Error::Precondition(format!(
                "the fork of task {} would not run in a worktree: its workspace {} is no longer a git repository with a commit",
                source.id, source.workspace
            )));
        };
        plan.start_tree = Some(tree.to_string());
        plan.start_base = prepared.base_ref.clone();
        self.store.insert_task(&staged.delegated.record)?;
        self.store.insert_fork(&staged.delegated.record.id, &source.id, seq)?;
        self.launch_staged(staged).await
    }
}

/// The source's workshop, when it is a worktree a fork can start from;
/// otherwise a clear refusal saying what to do.
fn source_worktree(source: &TaskRecord) -> Result<crate::workshop::Prepared> {
    let id = &source.id;
    let Some(p) = source.workshop.clone() else {
        return Err(Error::Precondition(format!(
            "task {id} has no worktree yet (it is still being prepared or never started): wait until it runs, or delegate anew"
        )));
    };
    if p.isolation != Isolation::Worktree || p.repo_root.is_none() || p.base_ref.is_none() {
        return Err(Error::Precondition(format!(
            "task {id} worked in place, without a worktree, so caesar kept no snapshots of its files to fork from: \
             delegate a new task with `--mode write` (it gets a worktree), or fork a worktree task"
        )));
    }
    if !p.worktree.as_deref().is_some_and(std::path::Path::is_dir) {
        return Err(Error::Precondition(format!(
            "task {id}'s worktree was removed (by gc, or after apply or discard), and its checkpoints with it: \
             there is nothing left to fork; delegate a new task instead"
        )));
    }
    Ok(p)
}

//! Retrying an ended task with another agent (issue 30, item 7): the new
//! task is asked exactly what the first one was (its stored request: the
//! objective, context, constraints, acceptance criteria, verification,
//! budget, timeout, role, mode, isolation, network, runner, parents and
//! review loop), only the agent differs. What belongs to the first agent
//! (its model, session and reasoning effort) stays behind.

use super::Engine;
use crate::error::{Error, Result};
use crate::request::{DelegateInput, Host};
use crate::store::TaskRecord;
use crate::task_dir::TaskDir;

impl Engine {
    /// The request that retries ended task `id` with `agent`, delegated by `host`.
    pub fn retry_input(&self, id: &str, agent: &str, host: Host) -> Result<DelegateInput> {
        let record = self.views().record(id)?;
        if !record.status.is_terminal() {
            return Err(Error::Precondition(format!(
                "task {} is still {}: cancel it first, or steer it",
                record.id,
                record.status.as_str()
            )));
        }
        let mut input = asked_of(&record)?;
        input.agent = Some(agent.to_owned());
        input.host = host;
        // The first task's review loop, when it was its worker's first run.
        if let Some(lp) = self.store.review_loop(&record.id)? {
            input.review_by = Some(lp.review_by);
            input.review_rounds = Some(lp.rounds);
        }
        Ok(input)
    }
}

/// What `record` was asked, from its stored request (the objective and the
/// context, which the request keeps outside, read back); a task stored
/// before requests were kept gets its objective, mode, isolation and project.
fn asked_of(record: &TaskRecord) -> Result<DelegateInput> {
    let Some(mut input) = record.launch.lifecycle.request.clone() else {
        return Ok(DelegateInput {
            objective: record.objective.clone(),
            mode: Some(record.mode.as_str().to_owned()),
            isolation: Some(record.isolation.as_str().to_owned()),
            workspace: record.workspace.clone(),
            timeout_ms: Some(record.timeout_ms),
            ..Default::default()
        });
    };
    if input.objective.is_empty() {
        input.objective.clone_from(&record.objective);
    }
    if input.context == crate::prompt::CONTEXT_TOKEN {
        input.context = crate::prompt::read_context(&TaskDir::new(&record.task_dir)).map_err(|e| {
            Error::Precondition(format!(
                "the context of task {} cannot be read back ({e}): delegate the task again with its context",
                record.id
            ))
        })?;
    }
    // The first agent's own: a model, a session or an effort may mean nothing to the next.
    input.model = None;
    input.session_id = None;
    input.effort = None;
    // Asked by the person at the page, not by the first task's caller.
    input.depth = 0;
    input.continue_from = None;
    input.relay_to = None;
    input.chosen_id = None;
    // The record holds what was resolved: the mode and isolation the task ran with.
    input.mode = Some(record.mode.as_str().to_owned());
    input.isolation = Some(record.isolation.as_str().to_owned());
    input.workspace.clone_from(&record.workspace);
    Ok(input)
}

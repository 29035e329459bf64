//! `caesar_delegate` with `fork_from` (issue 31): the delegation becomes a
//! `Fork` of that task, so the tool count stays as it is.

use caesar_proto::pb;

use crate::error::ToolError;
use crate::params::DelegateParams;

/// The `Fork` request a delegation with `fork_from` asks for, `None`
/// without one; `fork_at` alone is refused.
pub fn request(p: &DelegateParams) -> Result<Option<pb::ForkRequest>, ToolError> {
    let Some(task_id) = p.fork_from.as_deref().map(str::trim).filter(|f| !f.is_empty()) else {
        if p.fork_at.is_some() {
            return Err(ToolError::validation(
                "`fork_at` needs `fork_from`: name the task to fork (its task_id), or leave out `fork_at`",
            ));
        }
        return Ok(None);
    };
    if p.agents.is_some() || p.attempts.is_some() {
        return Err(ToolError::validation(
            "`fork_from` starts one task: leave out `agents` and `attempts`, or fork once per agent",
        ));
    }
    Ok(Some(pb::ForkRequest {
        task_id: task_id.to_owned(),
        at: p.fork_at,
        agent: p.agent.clone().unwrap_or_default(),
        text: p.objective.clone(),
        model: p.model.clone().unwrap_or_default(),
    }))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: serde_json::Value) -> DelegateParams {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn fork_from_makes_a_fork_request_and_fork_at_alone_is_refused() {
        let plain = params(serde_json::json!({"objective": "x"}));
        assert!(request(&plain).unwrap().is_none());
        let f = request(&params(serde_json::json!({
            "objective": "go on", "fork_from": " t_1 ", "fork_at": 7, "agent": "codex"
        })))
        .unwrap()
        .unwrap();
        assert_eq!((f.task_id.as_str(), f.at, f.agent.as_str(), f.text.as_str()), ("t_1", Some(7), "codex", "go on"));
        assert!(request(&params(serde_json::json!({"objective": "x", "fork_at": 3}))).is_err());
        assert!(request(&params(serde_json::json!({"objective": "x", "fork_from": "t_1", "attempts": 2}))).is_err());
    }
}

//! The gRPC face of forking (issue 31): the `Fork` RPC's conversion, and
//! a task's lineage (`forked_from`) for its view. Kept out of `rpc.rs`. A
//! fork answers as a delegation does: [`response`] is the one conversion
//! of a delegated task to its `DelegateResponse`, which `Delegate` uses too.

use std::sync::Arc;

use caesar_proto::pb;
use tonic::Status;

use crate::engine::fork::ForkInput;
use crate::engine::{Caller, Delegated, Engine};
use crate::rpc_kinds::WireEnum;

/// Forks `r.task_id` for the user's orchestrator (a task's agent cannot).
pub async fn fork(engine: &Arc<Engine>, caller: &Caller, r: pb::ForkRequest) -> Result<pb::DelegateResponse, Status> {
    caller.require_user("fork")?;
    let input = ForkInput {
        source: r.task_id,
        at: r.at,
        agent: Some(r.agent).filter(|a| !a.trim().is_empty()),
        text: r.text,
        model: Some(r.model).filter(|m| !m.trim().is_empty()),
    };
    Ok(response(engine.fork(input).await?, String::new(), Vec::new()))
}

/// `<task>@<seq>` when `task_id` is a fork, else empty.
pub fn lineage(engine: &Engine, task_id: &str) -> String {
    match engine.store().fork_of(task_id) {
        Ok(Some((source, seq))) => format!("{source}@{seq}"),
        _ => String::new(),
    }
}

/// The answer to a delegation: the task as recorded, the warnings and the
/// agent's reason; `group_id` and `task_ids` for a fan-out (empty otherwise).
pub(crate) fn response(d: Delegated, group_id: String, task_ids: Vec<String>) -> pb::DelegateResponse {
    let t = d.record;
    let agent_reason = d.warnings.get(crate::resolve::AGENT_CHOICE).cloned().unwrap_or_default();
    pb::DelegateResponse {
        task_id: t.id,
        agent: t.agent,
        role: t.role.unwrap_or_default(),
        mode: t.mode.as_str().to_owned(),
        isolation: t.isolation.as_str().to_owned(),
        network: t.network,
        model: t.model.unwrap_or_default(),
        workspace: t.workspace,
        status: t.status.wire(),
        warnings: d.warnings.into_iter().collect(),
        task_dir: t.task_dir,
        timeout_ms: t.timeout_ms,
        agent_reason,
        worktree: d.worktree.unwrap_or_default(),
        group_id,
        task_ids,
    }
}

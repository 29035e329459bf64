//! The wire side of issue 17's fan-out concerns: group delegation, await on
//! group ids, and the radar's overlaps, converted to `caesar.v1`. Kept apart
//! from `rpc.rs`, which calls these.

use std::sync::Arc;

use caesar_proto::pb;
use tonic::Status;

use crate::engine::Engine;
use crate::engine::groups::{self, GroupAsk, GroupView};
use crate::rpc_kinds::WireEnum;
use crate::workshop::radar::Meeting;

/// Overlaps on the wire.
pub fn overlaps(list: Vec<(String, Meeting)>) -> Vec<pb::Overlap> {
    list.into_iter().map(|(task_id, m)| pb::Overlap { task_id, paths: m.paths, hunk_paths: m.hunk_paths }).collect()
}

/// A task's radar overlaps and their age in ms (unset before the radar
/// has read the task), from the radar's cache: no tree is read here, and
/// a failure is no overlap (the radar informs, it never fails a call).
pub fn conflicts_with(engine: &Engine, id: &str) -> (Vec<pb::Overlap>, Option<u64>) {
    let v = engine.radar().view(id);
    (overlaps(v.overlaps), v.age.map(|a| a.as_millis() as u64))
}

/// The tasks this one's apply would break, from the radar's cache.
pub fn would_break(engine: &Engine, id: &str) -> Vec<pb::Overlap> {
    overlaps(engine.radar().apply_would_break(id))
}

/// Whether the delegation asks for a group.
pub fn is_group(r: &pb::DelegateRequest) -> bool {
    !r.agents.is_empty() || r.attempts != 0
}

/// The group ask of a request.
pub fn ask(r: &pb::DelegateRequest) -> GroupAsk {
    GroupAsk { agents: r.agents.clone(), attempts: r.attempts }
}

/// Replaces each group id among `ids` by its members; returns the group ids.
pub fn expand(engine: &Engine, ids: &mut Vec<String>) -> Result<Vec<String>, Status> {
    let mut groups_seen = Vec::new();
    let mut out = Vec::new();
    for id in ids.drain(..) {
        if groups::is_group_id(&id) {
            out.extend(engine.group_tasks(&id)?);
            groups_seen.push(id);
        } else {
            out.push(id);
        }
    }
    out.dedup();
    *ids = out;
    Ok(groups_seen)
}

/// The summaries of the given groups, off the runtime's threads.
pub async fn summaries(engine: &Arc<Engine>, group_ids: Vec<String>) -> Result<Vec<pb::GroupSummary>, Status> {
    let engine = engine.clone();
    let views = tokio::task::spawn_blocking(move || {
        group_ids.iter().map(|g| engine.group_view(g)).collect::<crate::error::Result<Vec<_>>>()
    })
    .await
    .map_err(|e| Status::internal(e.to_string()))??;
    Ok(views.into_iter().map(summary).collect())
}

fn summary(g: GroupView) -> pb::GroupSummary {
    pb::GroupSummary {
        group_id: g.group_id,
        objective: g.objective,
        done: g.done,
        members: g
            .members
            .into_iter()
            .map(|m| pb::GroupMember {
                task_id: m.task_id,
                agent: m.agent,
                status: m.status.wire(),
                report_status: m.report_status,
                verification: m.verification,
                files_changed: m.files_changed,
                lines_added: m.lines_added,
                lines_removed: m.lines_removed,
                input_tokens: m.input_tokens,
                output_tokens: m.output_tokens,
                cost_usd: m.cost_usd,
                duration_ms: m.duration_ms,
                summary: m.summary,
                overlaps: overlaps(m.overlaps),
                verdict: pb::Verdict::parse(m.verdict.word()).map_or(0, |w| w as i32),
                verdict_detail: m.verdict.detail,
                changes_verified_by: m.changes_verified_by,
            })
            .collect(),
    }
}

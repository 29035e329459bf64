//! The commands about a worktree task's changes: `caesar diff`, `caesar
//! apply`, `caesar discard` and `caesar gc`.

use super::*;

/// `caesar diff`: the files a task changed with their line counts, the
/// overlaps with other tasks, and the patch unless `--stat`.
pub(crate) async fn diff(task_id: String, stat: bool, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let d = c.diff(pb::DiffRequest { task_id }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        let files: Vec<Value> = d
            .files
            .iter()
            .map(|f| json!({"path": f.path, "status": f.status, "additions": f.additions, "deletions": f.deletions, "old_path": if f.old_path.is_empty() { Value::Null } else { json!(f.old_path) }, "binary": f.binary}))
            .collect();
        println!(
            "{}",
            json!({"is_empty": d.is_empty, "files": files, "patch": d.patch, "overlaps": fanout::overlaps_json(&d.overlaps)})
        );
    } else if d.is_empty {
        println!("no changes");
    } else {
        fanout::print_overlaps("overlaps with other work (conflict radar):", &d.overlaps);
        for f in &d.files {
            let renamed = if f.old_path.is_empty() {
                String::new()
            } else {
                format!(" (from {})", render::sanitize(&f.old_path))
            };
            let path = render::sanitize(&f.path);
            println!("{:<10} +{:<5} -{:<5} {path}{renamed}", f.status, f.additions, f.deletions);
        }
        if !stat {
            println!();
            // The patch is the agent's text: its escapes never reach the terminal (issue 29).
            print!("{}", render::sanitize(&d.patch));
        }
    }
    Ok(0)
}

/// `caesar apply`: apply a task's changes to the main working tree; exit 1
/// with the conflicts when nothing could be written.
pub(crate) async fn apply(task_id: String, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let r = c.apply(pb::ApplyRequest { task_id: task_id.clone() }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        println!(
            "{}",
            json!({"applied": r.applied, "already_applied": r.already_applied, "conflicts": r.conflicts, "files": r.files, "message": r.message, "breaks": fanout::overlaps_json(&r.breaks)})
        );
    } else if r.already_applied {
        println!("{task_id}: already applied, nothing to do");
    } else if r.applied {
        println!(
            "{task_id}: applied to {} file(s), nothing committed{}",
            r.files.len(),
            if r.message.is_empty() { String::new() } else { format!(" ({})", r.message) }
        );
        fanout::print_overlaps("these tasks change the same lines: their apply will now conflict:", &r.breaks);
    } else {
        println!("{task_id}: NOT applied, nothing was written. Conflicts:");
        for conflict in &r.conflicts {
            println!("  {}", render::sanitize(conflict));
        }
    }
    Ok(if r.applied || r.already_applied { 0 } else { 1 })
}

/// `caesar apply --chain`: a stacked task's parents that succeeded and are
/// not applied yet, each after its own parents, then the task; stops at the
/// first that does not apply.
pub(crate) async fn apply_chain(task_id: String, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    // Depth first, parents before children, each task once.
    let mut order: Vec<String> = Vec::new();
    let mut todo: Vec<(String, bool)> = vec![(task_id.clone(), false)];
    while let Some((id, expanded)) = todo.pop() {
        if order.contains(&id) {
            continue;
        }
        if expanded {
            order.push(id);
            continue;
        }
        let t = c.status(pb::StatusRequest { task_id: id.clone() }).await.map_err(anyhow::Error::from)?.into_inner();
        let wanted =
            id == task_id || (t.status() == pb::TaskStatus::Succeeded && t.changes() != pb::ChangesState::Applied);
        if !wanted {
            continue;
        }
        todo.push((id, true));
        for p in t.parents.iter().rev() {
            todo.push((p.clone(), false));
        }
    }
    let mut applied = Vec::new();
    for id in &order {
        let r = c.apply(pb::ApplyRequest { task_id: id.clone() }).await.map_err(anyhow::Error::from)?.into_inner();
        if !(r.applied || r.already_applied) {
            if json {
                println!(
                    "{}",
                    json!({"applied": applied, "failed": id, "conflicts": r.conflicts, "message": r.message})
                );
            } else {
                println!(
                    "{id}: NOT applied, nothing of it was written (applied before it: {}). Conflicts:",
                    applied.join(", ")
                );
                for conflict in &r.conflicts {
                    println!("  {}", render::sanitize(conflict));
                }
            }
            return Ok(1);
        }
        if !json {
            println!("{id}: applied to {} file(s), nothing committed", r.files.len());
        }
        applied.push(id.clone());
    }
    if json {
        println!("{}", json!({"applied": applied}));
    }
    Ok(0)
}

/// `caesar discard`: drop a task's changes.
pub(crate) async fn discard(task_id: String, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    c.discard(pb::DiscardRequest { task_id: task_id.clone() }).await.map_err(anyhow::Error::from)?;
    if json {
        println!("{}", json!({"task_id": task_id, "discarded": true}));
    } else {
        println!("{task_id}: changes discarded; gc may remove its worktree");
    }
    Ok(0)
}

/// `caesar gc`: remove (or with `--dry-run` list) the worktrees of tasks
/// finished longer ago than `older_than`.
pub(crate) async fn gc(dry_run: bool, force: bool, older_than: &str, json: bool) -> Result<u8, Failure> {
    // 0 on the wire means the daemon's default (24 h): `0s` asks for now, so 1 ms.
    let older_than_ms = parse_duration_ms(older_than)?.max(1);
    let mut c = connect().await?;
    let r = c.gc(pb::GcRequest { dry_run, force, older_than_ms }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        let items: Vec<Value> = r.items.iter().map(|i| json!({"task_id": i.task_id, "worktree": i.worktree, "action": i.action, "reason": i.reason, "bytes": i.bytes})).collect();
        println!("{}", json!({ "items": items }));
    } else if r.items.is_empty() {
        println!("no worktree to collect");
    } else {
        for i in &r.items {
            println!(
                "{:<13} {} {} ({} KiB){}",
                i.action,
                i.task_id,
                i.worktree,
                i.bytes / 1024,
                if i.reason.is_empty() { String::new() } else { format!(": {}", i.reason) }
            );
        }
    }
    Ok(0)
}

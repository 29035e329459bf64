//! The commands that look at running and finished tasks and steer them:
//! `caesar await`, `caesar ps`, `caesar status`, `caesar cancel`,
//! `caesar answer` and `caesar steer`.

use super::*;

/// `caesar await`: wait for the tasks to end (or the timeout), print their
/// reports, and exit with the worst task's code.
pub(crate) async fn await_tasks(task_ids: Vec<String>, timeout: &str, json: bool) -> Result<u8, Failure> {
    let timeout_ms = parse_duration_ms(timeout)?;
    let mut c = connect().await?;
    let r = c
        .r#await(pb::AwaitRequest { task_ids, timeout_ms, wake_on_attention: false })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        let tasks: Vec<Value> = r.tasks.iter().map(render::task_json).collect();
        println!("{}", json!({"tasks": tasks}));
    } else {
        for t in &r.tasks {
            render::print_task(t, true);
        }
    }
    Ok(r.tasks.iter().map(exit_code_of).max().unwrap_or(0))
}

/// `caesar ps`: the table of pending and running tasks, or of all tasks
/// with `--all`.
pub(crate) async fn ps(all: bool, limit: u32, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let statuses = if all { vec![] } else { vec![pb::TaskStatus::Pending.into(), pb::TaskStatus::Running.into()] };
    let r = c.list_tasks(pb::ListTasksRequest { statuses, limit }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        let tasks: Vec<Value> = r.tasks.iter().map(render::task_json).collect();
        println!("{}", json!({"tasks": tasks}));
    } else {
        render::print_table(&r.tasks);
    }
    Ok(0)
}

/// `caesar status`: one task's state and report.
pub(crate) async fn status(task_id: String, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    if task_id.starts_with("g_") {
        return group_status(&mut c, &task_id, json).await;
    }
    let t = c.status(pb::StatusRequest { task_id }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        println!("{}", render::task_json(&t));
    } else {
        render::print_task(&t, false);
    }
    Ok(0)
}

/// `caesar status g_…`: a fan-out's comparison again, as `run --agents`
/// printed it (its members so far while it runs).
async fn group_status(c: &mut Client, group_id: &str, json: bool) -> Result<u8, Failure> {
    let r = c
        .r#await(pb::AwaitRequest { task_ids: vec![group_id.to_owned()], timeout_ms: 1, wake_on_attention: false })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    let Some(g) = r.groups.into_iter().next() else {
        return Err(anyhow::anyhow!("the daemon returned no group {group_id}").into());
    };
    if json {
        println!("{}", fanout::group_json(&g));
    } else {
        print!("{}", fanout::comparison(&g));
        if !g.done {
            println!("(still running: this is the group so far)");
        }
    }
    Ok(0)
}

/// `caesar cancel`: stop a running task, or say why there was nothing to
/// stop.
pub(crate) async fn cancel(task_id: String, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    let r = c.cancel(pb::CancelRequest { task_id: task_id.clone() }).await.map_err(anyhow::Error::from)?.into_inner();
    if json {
        println!(
            "{}",
            json!({"task_id": task_id, "cancelled": r.cancelled, "status": pb::TaskStatus::spell(r.status)})
        );
    } else if r.cancelled {
        println!("{task_id}: cancelled");
    } else {
        println!("{task_id}: not running ({}), nothing to cancel", pb::TaskStatus::spell(r.status));
    }
    Ok(0)
}

/// `caesar answer`: answer the question a task asked.
pub(crate) async fn answer(task_id: String, question_id: String, answer: String, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    c.answer(pb::AnswerRequest { task_id: task_id.clone(), question_id: question_id.clone(), answer })
        .await
        .map_err(anyhow::Error::from)?;
    if json {
        println!("{}", json!({"task_id": task_id, "question_id": question_id, "answered": true}));
    } else {
        println!("{task_id}: answered {question_id}");
    }
    Ok(0)
}

/// `caesar steer`: tell a running task's agent something unasked. The daemon stores it before
/// answering and delivers it once; an ended task is refused (exit 2), pointing to `continue`.
pub(crate) async fn steer(task_id: String, text: String, interrupt: bool, json: bool) -> Result<u8, Failure> {
    let max = caesar_proto::STEER_MAX_BYTES;
    if text.len() > max {
        return Err(Failure {
            code: 2,
            message: format!(
                "the steer is {} bytes, past the limit of {max}; say it in fewer words, or put the details in a \
                 file in the task's worktree and point the agent to it",
                text.len()
            ),
        });
    }
    let mut c = connect().await?;
    let r = c
        .steer(pb::SteerRequest { task_id: task_id.clone(), text, interrupt })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        println!(
            "{}",
            json!({"task_id": task_id, "steer_id": r.steer_id, "route": r.route, "queued_for_start": r.queued_for_start})
        );
    } else if r.queued_for_start {
        println!("{task_id}: steer {} stored; it reaches the agent ({}) once the task starts", r.steer_id, r.route);
    } else {
        println!("{task_id}: steer {} stored; it reaches the agent as {}", r.steer_id, r.route);
    }
    Ok(0)
}

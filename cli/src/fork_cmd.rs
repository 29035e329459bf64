//! `caesar fork` (issue 31): a new task in a new worktree that starts with
//! another task's files as they were at one of its events. The daemon does
//! the work; this asks and prints.

use super::*;

/// What `caesar fork` was given.
pub(crate) struct ForkArgs {
    pub task_id: String,
    pub at: Option<u64>,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub text: String,
}

/// `caesar fork <task> [--at <seq>] [--agent X] "<text>"`: prints the new
/// task's id and where it works; `caesar await` follows it.
pub(crate) async fn fork(a: ForkArgs, json: bool) -> Result<u8, Failure> {
    if a.text.trim().is_empty() {
        return Err(Failure {
            code: 2,
            message: "say what the fork's agent should do: caesar fork <task> \"<text>\"".to_owned(),
        });
    }
    let mut c = connect().await?;
    let source = a.task_id.clone();
    let d = c
        .fork(pb::ForkRequest {
            task_id: a.task_id,
            at: a.at,
            agent: a.agent.unwrap_or_default(),
            text: a.text,
            model: a.model.unwrap_or_default(),
        })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    let point = match a.at {
        Some(seq) => format!("{source}@{seq}"),
        None => format!("{source} (its latest state)"),
    };
    if json {
        let mut v = render::delegate_json(&d);
        v["forked_from"] = json!(point);
        println!("{v}");
    } else {
        for (k, v) in &d.warnings {
            eprintln!("caesar: {k}: {v}");
        }
        println!("{}", d.task_id);
        eprintln!(
            "caesar: {} forked from {point}, agent {}, in {}; follow it with `caesar await {}`",
            d.task_id,
            d.agent,
            if d.worktree.is_empty() { "a new worktree" } else { d.worktree.as_str() },
            d.task_id
        );
    }
    Ok(0)
}

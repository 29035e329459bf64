//! `caesar run` and `caesar logs`: delegate, print what runs where and why,
//! follow the task's events until it ends, and map its ending to the exit
//! code (see the crate's doc).

use super::*;

/// `caesar run`: delegate, then (unless `--detach`) follow the task's
/// events until it ends, print its report and exit with its code.
pub(crate) async fn run(a: RunArgs, json: bool) -> Result<u8, Failure> {
    let (detach, verbose) = (a.detach, a.verbose);
    // On a terminal the agent may ask the person (issue 30, item 3).
    let ask = !detach && ask::wanted(a.no_ask, json);
    let mut request = delegate_request(a)?;
    request.channel = ask;
    let mut c = connect().await?;
    let d = c.delegate(request).await.map_err(anyhow::Error::from)?.into_inner();
    // A fan-out group; or a review loop's rounds (issue 32), awaited as their group to the loop's end.
    if !d.group_id.is_empty() && (!d.task_ids.is_empty() || !detach) {
        return run_group(&mut c, &d, json, detach).await;
    }
    let choice = agent_reason(&d).map(str::to_owned);
    for (k, v) in d.warnings.iter().filter(|(k, _)| k.as_str() != AGENT_CHOICE) {
        if !json {
            eprintln!("caesar: {k}: {v}");
        }
    }
    if detach {
        if json {
            println!("{}", render::delegate_json(&d));
        } else {
            println!("{}", d.task_id);
            if let Some(why) = choice {
                eprintln!("caesar: {why}");
            }
        }
        return Ok(0);
    }
    if !json {
        print!("{}", run_header(&d, worktree_of(&d).as_deref()));
    }
    let task_id = d.task_id.clone();
    let command = if verbose { render::Command::Full } else { render::Command::Brief };
    let follow = follow_run(&mut c, &task_id, json, command, ask);
    tokio::select! {
        r = follow => r?,
        _ = tokio::signal::ctrl_c() => {
            if !json {
                eprintln!("caesar: interrupted, cancelling {task_id}");
            }
            let _ = c.cancel(pb::CancelRequest { task_id: task_id.clone() }).await;
            return Ok(130);
        }
    }
    let t = &await_ending(&mut c, &task_id, json).await?;
    if json {
        let mut v = render::task_json(t);
        v["warnings"] = json!(d.warnings);
        println!("{v}");
    } else {
        render::print_report(t);
    }
    Ok(exit_code_of(t))
}

/// The Delegate request of `caesar run`'s arguments: the workspace made
/// absolute, `--context @file` read, durations and the budget parsed, and
/// the nesting depth taken from `CAESAR_DEPTH`.
// `..Default::default()` stays in the request: fields other concerns add to it need no edit here.
#[allow(clippy::needless_update)]
fn delegate_request(a: RunArgs) -> Result<pb::DelegateRequest, Failure> {
    let workspace = match a.workspace {
        Some(w) => std::path::absolute(&w).with_context(|| format!("bad --workspace {}", w.display()))?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let context = match a.context.as_deref() {
        Some(c) if c.starts_with('@') => {
            std::fs::read_to_string(&c[1..]).with_context(|| format!("cannot read the --context file {}", &c[1..]))?
        }
        Some(c) => c.to_owned(),
        None => String::new(),
    };
    let timeout_ms = a.timeout.as_deref().map(parse_duration_ms).transpose()?.unwrap_or(0);
    let budget_wall = a
        .budget_wall
        .as_deref()
        .map(|w| parse_duration_ms(w).map_err(|e| anyhow::anyhow!("bad --budget-wall: {e}")))
        .transpose()?;
    let budget =
        (a.budget_tokens.is_some() || a.budget_cost.is_some() || budget_wall.is_some() || a.budget_turns.is_some())
            .then(|| pb::Budget {
                tokens: a.budget_tokens,
                cost_usd: a.budget_cost,
                wall_ms: budget_wall.map(|w| w as i64),
                turns: a.budget_turns,
            });
    let depth = std::env::var("CAESAR_DEPTH").ok().and_then(|d| d.parse().ok()).unwrap_or(0);
    Ok(pb::DelegateRequest {
        objective: a.objective,
        agent: a.agent.unwrap_or_default(),
        role: a.role.unwrap_or_default(),
        mode: a.mode.map(|m| m.as_str().to_owned()).unwrap_or_default(),
        isolation: a.isolation.map(|i| i.as_str().to_owned()).unwrap_or_default(),
        network: a.network.map(|n| n.as_str().to_owned()).unwrap_or_default(),
        context,
        constraints: a.constraints,
        acceptance_criteria: a.acceptance_criteria,
        model: a.model.unwrap_or_default(),
        timeout_ms,
        channel: false,
        workspace: workspace.display().to_string(),
        session_id: String::new(),
        effort: String::new(),
        depth,
        verify: a.verify,
        agents: a.agents,
        attempts: a.attempts.unwrap_or(0),
        runner: a.runner.unwrap_or_default(),
        budget,
        on_blocker: a.on_blocker.unwrap_or_default(),
        depends_on: a.after,
        on_parent_failure: a.on_parent_failure.unwrap_or_default(),
        continue_from: a.continue_from.unwrap_or_default(),
        review_by: a.review_by.unwrap_or_default(),
        review_rounds: a.review_rounds.unwrap_or(0),
        relay_to: a.relay_to.unwrap_or_default(),
        ..Default::default()
    })
}

/// Waits for the task to end and returns it. The event stream ends when the
/// task does; Await returns its report. A task that fell back or parked at
/// a quota goes on under the same id, and a park is told once per deadline.
async fn await_ending(c: &mut Client, task_id: &str, json: bool) -> Result<pb::TaskView, Failure> {
    let mut told_parked = String::new();
    loop {
        let r = c
            .r#await(pb::AwaitRequest {
                task_ids: vec![task_id.to_owned()],
                timeout_ms: 60_000,
                wake_on_attention: false,
            })
            .await
            .map_err(anyhow::Error::from)?
            .into_inner();
        let Some(t) = r.tasks.into_iter().next() else {
            return Err(Failure { code: 1, message: "the daemon returned no task".into() });
        };
        if !matches!(t.status(), pb::TaskStatus::Pending | pb::TaskStatus::Running) {
            return Ok(t);
        }
        if !json && !t.parked_until.is_empty() && t.parked_until != told_parked {
            eprintln!(
                "caesar: parked until {} ({}); cancel with `caesar cancel {task_id}`",
                t.parked_until,
                render::sanitize(&t.parked_reason)
            );
            told_parked = t.parked_until.clone();
        }
    }
}

/// `caesar run --agents …`: the group's ids, then (unless detached) its
/// comparison once every member ended.
pub(crate) async fn run_group(
    c: &mut Client,
    d: &pb::DelegateResponse,
    json: bool,
    detach: bool,
) -> Result<u8, Failure> {
    // A review loop's group starts with its first task (issue 32).
    let ids = if d.task_ids.is_empty() { vec![d.task_id.clone()] } else { d.task_ids.clone() };
    if !json {
        println!("group {}: {} tasks ({})", d.group_id, ids.len(), ids.join(", "));
    }
    if detach {
        if json {
            println!("{}", json!({"group_id": d.group_id, "task_ids": d.task_ids}));
        }
        return Ok(0);
    }
    // Progress while the group runs (not in --json, whose output is one document).
    let began = std::time::Instant::now();
    let mut progress = fanout::Progress::default();
    let tell = |g: &pb::GroupSummary| {
        if !json {
            for line in progress.lines(g, began.elapsed().as_millis() as u64) {
                println!("{line}");
            }
        }
    };
    let g = tokio::select! {
        g = fanout::await_group(c, &d.group_id, tell) => g?,
        _ = tokio::signal::ctrl_c() => {
            for t in &ids {
                let _ = c.cancel(pb::CancelRequest { task_id: t.clone() }).await;
            }
            return Ok(130);
        }
    };
    if json {
        println!("{}", fanout::group_json(&g));
    } else {
        print!("{}", fanout::comparison(&g));
    }
    Ok(if g.members.iter().any(|m| m.status() == pb::TaskStatus::Succeeded) { 0 } else { 1 })
}

/// The warning under which the daemon says which agent it picked when none
/// was named (caesard's `resolve::AGENT_CHOICE`).
const AGENT_CHOICE: &str = "agent_choice";

/// The first lines of `caesar run`: what runs, how, where, and (when caesar
/// chose the agent) why that one.
pub(crate) fn run_header(d: &pb::DelegateResponse, worktree: Option<&str>) -> String {
    let model = if d.model.is_empty() { "the agent's default".to_owned() } else { d.model.clone() };
    let network = if d.network { "on" } else { "off" };
    let mut out = format!("task {}: agent {}, model {model}\n", d.task_id, d.agent);
    if let Some(why) = agent_reason(d) {
        out.push_str(&format!("  {why}\n"));
    }
    out.push_str(&format!("  mode {}, isolation {}, network {network}", d.mode, d.isolation));
    if d.timeout_ms > 0 {
        out.push_str(&format!(", timeout {}", render::human_ms(d.timeout_ms)));
    }
    out.push('\n');
    match worktree {
        Some(w) => out.push_str(&format!(
            "  works in the worktree {w}\n  (review with caesar diff {id}, land with caesar apply {id})\n",
            id = d.task_id
        )),
        None => out.push_str(&format!("  works in {}\n", d.workspace)),
    }
    out
}

/// Where a worktree task's agent works: the daemon's `worktree`, or for an
/// older daemon, the workspace of its OACP `task.json`.
pub(crate) fn worktree_of(d: &pb::DelegateResponse) -> Option<String> {
    if !d.worktree.is_empty() {
        return Some(d.worktree.clone());
    }
    if d.isolation != "worktree" {
        return None;
    }
    let doc = std::fs::read_to_string(std::path::Path::new(&d.task_dir).join("task.json")).ok()?;
    let v: Value = serde_json::from_str(&doc).ok()?;
    let worktree = v["workspace"].as_str()?.trim_end_matches('/');
    (worktree != d.workspace.trim_end_matches('/')).then(|| worktree.to_owned())
}

/// Why caesar picked the agent: `agent_reason`, or the warning an older
/// daemon carries it in.
pub(crate) fn agent_reason(d: &pb::DelegateResponse) -> Option<&str> {
    Some(d.agent_reason.as_str()).filter(|r| !r.is_empty()).or(d.warnings.get(AGENT_CHOICE).map(String::as_str))
}

/// The exit code for a task, as the README's table says: its verdict's
/// (`pb::Verdict::exit_code`): 0 only when it succeeded; a task still
/// pending or running when the wait ended (`caesar await --timeout`) 5.
pub(crate) fn exit_code_of(t: &pb::TaskView) -> u8 {
    use pb::TaskStatus as S;
    // The daemon's verdict (issue 30); an older daemon sends none.
    if let Ok(v) = pb::Verdict::try_from(t.verdict)
        && v != pb::Verdict::Unspecified
    {
        return v.exit_code();
    }
    match t.status() {
        S::Succeeded if matches!(t.report_status.as_str(), "failed" | "blocked") => 1,
        S::Succeeded => 0,
        S::Cancelled => 4,
        S::TimedOut | S::Pending | S::Running => 5,
        _ => 1,
    }
}

/// Follows a task's events until it ends, along its chain of attempts:
/// each switch to the next agent is told as it happens ("claude blocked
/// (auth) → trying codex") and the new agent's events follow. With `ask`,
/// each question and permission is asked at the terminal.
async fn follow_run(
    c: &mut Client,
    task_id: &str,
    json: bool,
    command: render::Command,
    ask: bool,
) -> Result<(), Failure> {
    let mut typed = ask.then(ask::typed_lines);
    let mut following = task_id.to_owned();
    let mut followed = vec![following.clone()];
    let mut told = 0;
    loop {
        follow_attempt(c, task_id, &following, json, command, typed.as_mut()).await?;
        // The attempt ended: a blocker may have handed the task on.
        let t = c.status(pb::StatusRequest { task_id: task_id.to_owned() }).await.map_err(anyhow::Error::from)?;
        let t = t.into_inner();
        if !json {
            for line in switch_lines(&t, told) {
                println!("{line}");
            }
        }
        told = t.attempts.len();
        let head = if t.current_task_id.is_empty() { task_id.to_owned() } else { t.current_task_id.clone() };
        if followed.contains(&head) {
            return Ok(());
        }
        followed.push(head.clone());
        following = head;
    }
}

/// The switches a task made since the first `told` attempts were told:
/// `caesar: claude blocked (auth) → trying codex (t_…)`, and what the
/// agent left said.
pub(crate) fn switch_lines(t: &pb::TaskView, told: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in t.attempts.iter().enumerate().skip(told) {
        let (next, next_id) = match t.attempts.get(i + 1) {
            Some(n) => (n.agent.as_str(), n.task_id.as_str()),
            None => (t.agent.as_str(), t.current_task_id.as_str()),
        };
        let id = if next_id.is_empty() { String::new() } else { format!(" as {next_id}") };
        out.push(format!("caesar: {} blocked ({}) → trying {next}{id}", a.agent, pb::BlockerKind::spell(a.stopped_by)));
        if !a.message.is_empty() {
            out.push(format!("  {} said: {}", a.agent, render::sanitize(&render::one_line(&a.message, 300))));
        }
    }
    out
}

/// Follows one attempt's events until it ends, asking its questions at the
/// terminal when `typed` reads it. The attempt a fallback just named may not
/// be delegated yet: its events are read once it is.
async fn follow_attempt(
    c: &mut Client,
    root: &str,
    task_id: &str,
    json: bool,
    command: render::Command,
    mut typed: Option<&mut tokio::sync::mpsc::UnboundedReceiver<String>>,
) -> Result<(), Failure> {
    let mut stream = loop {
        let req = pb::WatchEventsRequest { task_id: task_id.to_owned(), from_seq: 0, follow: true };
        match c.watch_events(req).await {
            Ok(s) => break s.into_inner(),
            Err(e) if e.code() == tonic::Code::NotFound && task_id != root => {
                // Announced by its predecessor's end, delegated just after;
                // or never, when its delegation failed (the chain ends).
                let t = c.status(pb::StatusRequest { task_id: root.to_owned() }).await.map_err(anyhow::Error::from)?;
                if t.into_inner().current_task_id != task_id {
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(anyhow::Error::from(e).into()),
        }
    };
    let mut queue: std::collections::VecDeque<pb::PendingQuestion> = Default::default();
    let mut asking: Option<pb::PendingQuestion> = None;
    let mut agent = String::new();
    loop {
        tokio::select! {
            m = stream.message() => {
                let Some(ev) = m.map_err(anyhow::Error::from)? else { break };
                if json {
                    // In --json mode events are not printed: the output is one JSON document.
                    continue;
                }
                render::print_event(&ev.event_json, command);
                if typed.is_none() {
                    continue;
                }
                let e = serde_json::from_str::<Value>(&ev.event_json).unwrap_or_default();
                if e["type"] == "started" {
                    agent = e["agent"].as_str().unwrap_or_default().to_owned();
                }
                if e["type"] != "question" {
                    continue;
                }
                let id = e["id"].as_str().unwrap_or_default();
                let t = c.status(pb::StatusRequest { task_id: task_id.to_owned() }).await.map_err(anyhow::Error::from)?;
                let t = t.into_inner();
                if agent.is_empty() {
                    agent.clone_from(&t.agent);
                }
                if let Some(q) = t.pending_questions.into_iter().find(|q| q.question_id == id) {
                    queue.push_back(q);
                }
            }
            line = ask::next_line(typed.as_deref_mut()), if asking.is_some() => {
                let Some(line) = line else {
                    // The terminal closed: the rest waits for `caesar answer`.
                    typed = None;
                    asking = None;
                    queue.clear();
                    continue;
                };
                let Some(q) = asking.take() else { continue };
                match ask::answer_of(&q, &line) {
                    Some(answer) => {
                        let r = c
                            .answer(pb::AnswerRequest { task_id: task_id.to_owned(), question_id: q.question_id.clone(), answer })
                            .await;
                        match r {
                            Ok(_) => println!("caesar: answered {}", q.question_id),
                            Err(e) => println!("caesar: the answer was not taken: {}", e.message()),
                        }
                    }
                    None => println!("caesar: left {} for `caesar answer {task_id} {} \"...\"`", q.question_id, q.question_id),
                }
            }
        }
        if asking.is_none()
            && let Some(q) = queue.pop_front()
        {
            print!("{}", ask::prompt(&agent, &q));
            let _ = std::io::Write::flush(&mut std::io::stdout());
            asking = Some(q);
        }
    }
    Ok(())
}

pub(crate) async fn follow_events(
    c: &mut Client,
    task_id: &str,
    from_seq: u64,
    json: bool,
    command: render::Command,
) -> Result<(), Failure> {
    let mut stream = c
        .watch_events(pb::WatchEventsRequest { task_id: task_id.to_owned(), from_seq, follow: true })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    while let Some(ev) = stream.message().await.map_err(anyhow::Error::from)? {
        if json {
            // In --json mode events are not printed: the output is one JSON document.
            continue;
        }
        render::print_event(&ev.event_json, command);
    }
    Ok(())
}

pub(crate) async fn logs(task_id: String, raw: bool, follow: bool, limit: u32, json: bool) -> Result<u8, Failure> {
    let mut c = connect().await?;
    if follow && !raw {
        if json {
            let mut stream = c
                .watch_events(pb::WatchEventsRequest { task_id, from_seq: 0, follow: true })
                .await
                .map_err(anyhow::Error::from)?
                .into_inner();
            while let Some(ev) = stream.message().await.map_err(anyhow::Error::from)? {
                println!("{}", ev.event_json);
            }
            return Ok(0);
        }
        follow_events(&mut c, &task_id, 0, false, render::Command::Full).await?;
        return Ok(0);
    }
    let r = c
        .logs(pb::LogsRequest { task_id: task_id.clone(), raw, limit, max_bytes: 0 })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        let events: Vec<Value> = r.events_json.iter().filter_map(|e| serde_json::from_str(e).ok()).collect();
        let mut v = json!({"total_events": r.total_events});
        if raw {
            v["raw"] = json!(r.raw);
            v["raw_size"] = json!(r.raw_size);
            v["truncated"] = json!(r.raw_truncated);
        } else {
            v["events"] = json!(events);
        }
        println!("{v}");
    } else if raw {
        if r.raw_truncated {
            eprintln!("caesar: showing the last {} of {} bytes", r.raw.len(), r.raw_size);
        }
        print!("{}", r.raw);
    } else {
        if (r.events_json.len() as u64) < r.total_events {
            let why =
                if (r.events_json.len() as u32) < limit { " (one answer carries at most 4 MiB of events)" } else { "" };
            println!(
                "(the last {} of {} events{why}: `caesar logs --follow {task_id}` prints them all, `--limit N` more or fewer)",
                r.events_json.len(),
                r.total_events
            );
        }
        for e in &r.events_json {
            render::print_event(e, render::Command::Full);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_switch_is_told_once_with_the_agent_that_takes_over() {
        let attempt = |id: &str, agent: &str, kind: pb::BlockerKind, message: &str| pb::Attempt {
            task_id: id.into(),
            agent: agent.into(),
            stopped_by: kind.into(),
            message: message.into(),
            ..Default::default()
        };
        let t = pb::TaskView {
            task_id: "t_1".into(),
            agent: "gemini".into(),
            current_task_id: "t_3".into(),
            attempts: vec![
                attempt("t_1", "claude", pb::BlockerKind::Auth, "401 Unauthorized"),
                attempt("t_2", "codex", pb::BlockerKind::RateLimit, ""),
            ],
            ..Default::default()
        };
        assert_eq!(
            switch_lines(&t, 0),
            [
                "caesar: claude blocked (auth) → trying codex as t_2",
                "  claude said: 401 Unauthorized",
                "caesar: codex blocked (rate_limit) → trying gemini as t_3",
            ]
        );
        assert_eq!(switch_lines(&t, 1), ["caesar: codex blocked (rate_limit) → trying gemini as t_3"], "told once");
        assert!(switch_lines(&t, 2).is_empty());
    }

    #[test]
    fn the_run_header_says_what_runs_how_where_and_why() {
        let mut d = pb::DelegateResponse {
            task_id: "t_0123456789ab".into(),
            agent: "codex".into(),
            mode: "read-only".into(),
            isolation: "inplace".into(),
            network: true,
            workspace: "/src/app".into(),
            timeout_ms: 600_000,
            ..Default::default()
        };
        d.warnings.insert(AGENT_CHOICE.into(), "picked `codex`, the first agent installed and allowed".into());
        assert_eq!(
            run_header(&d, None),
            "task t_0123456789ab: agent codex, model the agent's default\n  picked `codex`, the first agent installed and allowed\n  mode read-only, isolation inplace, network on, timeout 10m00s\n  works in /src/app\n"
        );
        d.warnings.clear();
        d.agent_reason = "picked `codex`, the first agent installed and allowed".into();
        assert!(run_header(&d, None).contains("\n  picked `codex`"), "the field says it as the warning did");
        d.agent_reason.clear();
        d.model = "o3".into();
        d.isolation = "worktree".into();
        let h = run_header(&d, Some("/src/app/.caesar/wt/t_0123456789ab"));
        assert!(
            h.starts_with("task t_0123456789ab: agent codex, model o3\n  mode read-only, isolation worktree"),
            "{h}"
        );
        assert!(h.contains("works in the worktree /src/app/.caesar/wt/t_0123456789ab"), "{h}");
    }
}

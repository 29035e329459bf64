//! The soak's end-of-run audit: every task, event, question, worktree and process is
//! accounted for exactly once, and the store passes its integrity check.

use super::*;

/// The worktree audit: each worktree task has its one worktree, holding its
/// file, and the repositories hold no other worktree and no other caesar
/// branch (nothing an interrupted preparation left behind).
pub(crate) async fn check_worktrees(s: &mut Soak, c: &mut Client, projects: &[tempfile::TempDir]) {
    for (index, project) in projects.iter().enumerate().skip(1) {
        let root = project.path();
        let expected: Vec<String> = s
            .ids
            .iter()
            .enumerate()
            .filter(|(k, _)| matches!(s.kinds[*k], Kind::Tree { .. }) && s.kinds[*k].project() == index)
            .filter_map(|(_, id)| id.clone())
            .collect();
        // Each task worktree has its own git directory beside it
        // (`<id>.git`, issue 29); a `git worktree` of the repository counts too.
        let listed = match git(root, &["worktree", "list", "--porcelain"]) {
            Ok(l) => l,
            Err(e) => {
                s.problems.push(e);
                continue;
            }
        };
        let mut worktrees: Vec<String> = listed
            .lines()
            .filter_map(|l| l.strip_prefix("worktree "))
            .filter_map(|p| p.rsplit_once("/.caesar/wt/").map(|(_, id)| id.to_owned()))
            .collect();
        let own: Vec<String> = std::fs::read_dir(root.join(".caesar/wt"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".git") && !worktrees.contains(n))
            .collect();
        worktrees.extend(own);
        worktrees.sort();
        let mut want = expected.clone();
        want.sort();
        if worktrees != want {
            s.problems
                .push(format!("{}: worktrees {worktrees:?}, expected one per worktree task {want:?}", root.display()));
        }
        let branches = git(root, &["branch", "--list", "caesar/*"]).unwrap_or_default();
        if branches.lines().count() != expected.len() {
            s.problems.push(format!(
                "{}: {} caesar branches for {} worktree tasks:\n{branches}",
                root.display(),
                branches.lines().count(),
                expected.len()
            ));
        }
        for id in &expected {
            match c.diff(pb::DiffRequest { task_id: id.clone() }).await {
                Ok(d) if d.get_ref().patch.contains(TREE_FILE) => {}
                Ok(d) => s.problems.push(format!("{id}'s diff lacks {TREE_FILE}: {}", d.get_ref().patch)),
                Err(e) => s.problems.push(format!("diff of {id}: {e}")),
            }
        }
    }
}

/// The final audit. Returns how many questions the agents asked.
pub(crate) async fn check(s: &mut Soak, c: &mut Client, paths: &Paths, home: &Path, daemon: &mut Daemon) -> usize {
    let mut problems = Vec::new();
    let tasks = match c.list_tasks(pb::ListTasksRequest { statuses: vec![], limit: u32::MAX }).await {
        Ok(r) => r.into_inner().tasks,
        Err(e) => {
            s.problems.push(format!("listing tasks failed: {e}"));
            Vec::new()
        }
    };
    if tasks.len() != s.kinds.len() {
        problems.push(format!("the store holds {} tasks, {} were delegated", tasks.len(), s.kinds.len()));
    }
    // Await hands out the reports (a listing does not).
    // In batches: one await names at most 1,000 ids (the daemon's cap).
    let ids: Vec<String> = s.ids.iter().flatten().cloned().collect();
    let mut awaited = Vec::new();
    for batch in ids.chunks(1000) {
        let req = pb::AwaitRequest { task_ids: batch.to_vec(), timeout_ms: 1000, wake_on_attention: false };
        match c.r#await(req).await {
            Ok(r) => awaited.extend(r.into_inner().tasks),
            Err(e) => problems.push(format!("awaiting the tasks failed: {e}")),
        }
    }
    let by_id: HashMap<&str, &pb::TaskView> = awaited.iter().map(|t| (t.task_id.as_str(), t)).collect();
    let mut events_of: HashMap<String, Vec<serde_json::Value>> = HashMap::new();
    for (k, id) in s.ids.iter().enumerate() {
        let Some(id) = id else { continue };
        let kind = s.kinds[k];
        let Some(t) = by_id.get(id.as_str()) else {
            problems.push(format!("task {k} ({id}) is not in the store"));
            continue;
        };
        if t.status().as_str() != "succeeded" {
            problems.push(format!("{id} ended {} ({}), not succeeded", t.status().as_str(), t.error));
        }
        let report: serde_json::Value = serde_json::from_str(&t.report_json).unwrap_or_default();
        if report["summary"] != kind.summary().as_str() || t.report_source != "file" {
            problems.push(format!("{id} has no report of its own: source `{}`, {}", t.report_source, t.report_json));
        }
        let raw = std::fs::read_to_string(caesar_tests::daemon_files(Path::new(&t.task_dir)).join("raw.log"))
            .unwrap_or_default();
        let starts = raw.lines().filter(|l| *l == START_LINE).count();
        if starts != 1 {
            problems.push(format!("{id}'s agent started {starts} times"));
        }
        match c.logs(pb::LogsRequest { task_id: id.clone(), limit: u32::MAX, ..Default::default() }).await {
            Ok(r) => {
                let r = r.into_inner();
                let events: Vec<serde_json::Value> =
                    r.events_json.iter().map(|e| serde_json::from_str(e).unwrap_or_default()).collect();
                let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap_or(u64::MAX)).collect();
                if seqs != (0..seqs.len() as u64).collect::<Vec<_>>() || r.total_events != seqs.len() as u64 {
                    problems.push(format!("{id}'s events are not gapless: total {}, seqs {seqs:?}", r.total_events));
                }
                let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap_or("")).collect();
                let count = |ty: &str| types.iter().filter(|t| **t == ty).count();
                if types.first() != Some(&"started") || count("started") != 1 {
                    problems.push(format!("{id}'s log does not start with one `started`: {types:?}"));
                }
                if types.last() != Some(&"finished") || count("finished") != 1 {
                    problems.push(format!("{id}'s log does not end with one `finished`: {types:?}"));
                }
                // The OACP file holds exactly what the store holds.
                let file = std::fs::read_to_string(Path::new(&t.task_dir).join("events.jsonl")).unwrap_or_default();
                let file_seqs: Vec<u64> = file
                    .lines()
                    .map(|l| {
                        serde_json::from_str::<serde_json::Value>(l)
                            .ok()
                            .and_then(|e| e["seq"].as_u64())
                            .unwrap_or(u64::MAX)
                    })
                    .collect();
                if file_seqs != seqs {
                    problems
                        .push(format!("{id}'s events.jsonl differs from the store: {file_seqs:?} against {seqs:?}"));
                }
                events_of.insert(id.clone(), events);
            }
            Err(e) => problems.push(format!("logs of {id}: {e}")),
        }
    }
    match c.health(pb::HealthRequest { workspace: String::new() }).await {
        Ok(h) if h.get_ref().store_ok => {}
        Ok(h) => problems.push(format!("the store's check failed: {}", h.into_inner().store_error)),
        Err(e) => problems.push(format!("health: {e}")),
    }
    // With every task ended, only the daemon itself may carry this home.
    let daemon_pid = daemon.child.as_ref().map(|d| d.id());
    let mut left = Vec::new();
    for _ in 0..250 {
        left = processes_of(home).into_iter().filter(|p| Some(p.0) != daemon_pid).collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !left.is_empty() {
        problems.push(format!("processes left while the daemon runs: {left:?}"));
    }
    let _ = c.shutdown(pb::ShutdownRequest { cancel_tasks: false, only_if_idle: false }).await;
    if !client::wait_until_gone(paths, Duration::from_secs(10)).await {
        problems.push("the daemon did not stop on Shutdown".to_owned());
    }
    if let Some(mut child) = daemon.child.take() {
        let _ = child.wait();
    }
    let left = processes_of(home);
    if !left.is_empty() {
        problems.push(format!("processes left after the daemon stopped: {left:?}"));
    }

    // The questions, read from the store itself once the daemon is gone.
    let mut asked = 0;
    match caesard::store::Store::open(&paths.state_dir.join("caesar.db")) {
        Ok(store) => {
            if let Err(e) = store.integrity_check() {
                problems.push(e.to_string());
            }
            for (k, id) in s.ids.iter().enumerate() {
                let Some(id) = id else { continue };
                let qs = match store.questions(id) {
                    Ok(qs) => qs,
                    Err(e) => {
                        problems.push(format!("questions of {id}: {e}"));
                        continue;
                    }
                };
                asked += qs.len();
                let expected = usize::from(s.kinds[k] == Kind::Ask);
                if qs.len() != expected {
                    problems.push(format!("{id} has {} questions in the store, its agent asked {expected}", qs.len()));
                }
                let raw = by_id
                    .get(id.as_str())
                    .map(|t| {
                        std::fs::read_to_string(caesar_tests::daemon_files(Path::new(&t.task_dir)).join("raw.log"))
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                let events = events_of.get(id).map(Vec::as_slice).unwrap_or(&[]);
                for (q, delivered) in qs {
                    let key = (id.clone(), q.question_id.clone());
                    let given = s.answers.get(&key);
                    if given.is_none() || q.answer.as_ref() != given {
                        problems.push(format!(
                            "{id}/{}: the store's answer {:?} is not the one given, {given:?}",
                            q.question_id, q.answer
                        ));
                        continue;
                    }
                    let answer = q.answer.unwrap_or_default();
                    if !delivered {
                        problems.push(format!("{id}/{}: the answer is not marked delivered", q.question_id));
                    }
                    let received = raw.lines().filter(|l| *l == format!("{ANSWER_PREFIX}{answer}")).count();
                    if received != 1 {
                        problems.push(format!("{id}/{}: the agent printed the answer {received} times", q.question_id));
                    }
                    let of = |ty: &str| {
                        events.iter().filter(|e| e["type"] == ty && e["id"] == q.question_id.as_str()).count()
                    };
                    if of("question") != 1 || of("answer") != 1 {
                        problems.push(format!(
                            "{id}/{}: {} `question` and {} `answer` events in the log, not one each",
                            q.question_id,
                            of("question"),
                            of("answer")
                        ));
                    }
                }
            }
        }
        Err(e) => problems.push(format!("cannot open the store: {e}")),
    }
    if asked != s.answers.len() {
        problems.push(format!("{asked} questions in the store, {} answered by the soak", s.answers.len()));
    }
    s.problems.extend(problems);
    asked
}

/// Processes whose environment carries `CAESAR_HOME=home`: the daemon, and
/// every supervisor, agent and channel it started.
pub(crate) fn processes_of(home: &Path) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for pid in caesard::marked::marked_processes("CAESAR_HOME", &home.display().to_string()) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // A zombie is gone already, only not yet reaped.
        if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, cmd.trim().to_owned()));
    }
    found
}

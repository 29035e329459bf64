//! The store's unit tests: a real SQLite file in a temporary directory.

use super::*;
use crate::oacp::{EVENT_PROTOCOL, EventBody};

pub(crate) fn sample(id: &str) -> TaskRecord {
    TaskRecord {
        id: id.into(),
        created_ms: 1,
        agent: "fake".into(),
        role: None,
        mode: Mode::Write,
        isolation: Isolation::Inplace,
        network: true,
        model: None,
        objective: "do it".into(),
        workspace: "/w".into(),
        task_dir: "/s/t".into(),
        timeout_ms: 1000,
        depth: 0,
        status: TaskStatus::Pending,
        started_ms: None,
        finished_ms: None,
        exit_code: None,
        signal: None,
        error: None,
        run: None,
        log_offset: 0,
        session_id: None,
        cancel_requested: false,
        event_count: 0,
        last_event: None,
        blocker: None,
        launch: LaunchPlan::default(),
        workshop: None,
        changes_state: None,
    }
}

fn event(seq: u64) -> EventRecord {
    EventRecord {
        protocol: EVENT_PROTOCOL.into(),
        seq,
        at: "x".into(),
        task_id: "t_1".into(),
        body: EventBody::Message { text: format!("m{seq}") },
    }
}

/// A store call in a test: whether it answered.
type Call = fn(&Store) -> bool;

/// Whether `call`, made on a one-worker runtime while the connection is held
/// by another thread, leaves that worker to the runtime's other tasks.
fn leaves_the_worker(store: &std::sync::Arc<Store>, call: Call) -> bool {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // Held by a plain thread, through the one way to the connection.
    let (holding, held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = {
        let s = std::sync::Arc::clone(store);
        std::thread::spawn(move || {
            s.blocking(|_| {
                holding.send(()).unwrap();
                let _ = released.recv();
            })
        })
    };
    held.recv().unwrap();
    let (calling, called) = std::sync::mpsc::channel();
    let s = std::sync::Arc::clone(store);
    let running = rt.spawn(async move {
        calling.send(()).unwrap();
        call(&s)
    });
    called.recv().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (ran, other) = std::sync::mpsc::channel();
    rt.spawn(async move { ran.send(()).unwrap() });
    // A bound for a failure, not a timing: without block_in_place the
    // other task never runs while the connection is held.
    let result = other.recv_timeout(std::time::Duration::from_secs(20));
    release.send(()).unwrap();
    holder.join().unwrap();
    assert!(rt.block_on(running).unwrap(), "the call answered");
    result.is_ok()
}

#[test]
fn a_store_call_that_waits_on_an_async_worker_leaves_the_runtime_its_other_tasks() {
    // One worker: a store call that waits (here on the connection,
    // held by another thread; on a slow disk, on an fsync) must not keep
    // the runtime's other tasks from running.
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(&dir.path().join("caesar.db")).unwrap());
    store.insert_task(&sample("t_1")).unwrap();
    assert!(leaves_the_worker(&store, |s| s.task("t_1").unwrap().is_some()));
    // The seven reads that once locked the connection without
    // `Store::blocking` (issue 28); none can now (`store::db`).
    let reads: [(&str, Call); 7] = [
        ("verification", |s| s.verification("t_1").is_ok()),
        ("group_of", |s| s.group_of("t_1").is_ok()),
        ("budget_stop", |s| s.budget_stop("t_1").is_ok()),
        ("fallback_of", |s| s.fallback_of("t_1").is_ok()),
        ("park_of", |s| s.park_of("t_1").is_ok()),
        ("park_resumed_by", |s| s.park_resumed_by("t_1").is_ok()),
        ("group_budget", |s| s.group_budget("g_1").is_ok()),
    ];
    for (name, read) in reads {
        assert!(leaves_the_worker(&store, read), "{name} kept the only worker from its other tasks");
    }
}

#[test]
fn a_task_survives_reopening_with_its_events_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("caesar.db");
    {
        let s = Store::open(&path).unwrap();
        s.insert_task(&sample("t_1")).unwrap();
        let run = RunHandle::Local { pid: 42, start: Some(7), boot: Some("boot".into()) };
        s.set_running("t_1", 5, &run, &[event(0)]).unwrap();
        s.append_events("t_1", &[event(1)], Some(120)).unwrap();
        let o = Outcome {
            status: TaskStatus::Succeeded,
            exit_code: Some(0),
            signal: None,
            finished_ms: 9,
            error: None,
            report: StoredReport { source: "file".into(), status: "success".into(), body: "{}".into() },
        };
        assert!(s.finish("t_1", &o, &[event(2)]).unwrap());
        // A second ending is refused, and its events with it: a finished
        // task never changes, and its log ends once.
        assert!(!s.finish("t_1", &Outcome { status: TaskStatus::Failed, ..o }, &[event(3)]).unwrap());
    }
    let s = Store::open(&path).unwrap();
    let t = s.task("t_1").unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.run, Some(RunHandle::Local { pid: 42, start: Some(7), boot: Some("boot".into()) }));
    assert_eq!(t.log_offset, 120);
    assert_eq!(t.event_count, 3, "started, one event, finished; not the refused ending's");
    assert!(t.last_event.unwrap().contains("m2"));
    assert_eq!(s.events_from("t_1", 1, 10).unwrap().len(), 2);
    assert_eq!(s.last_events("t_1", 1, usize::MAX).unwrap().len(), 1);
    assert_eq!(s.report("t_1").unwrap().unwrap().source, "file");
    s.integrity_check().unwrap();
}

/// Issue 31: a group's budget stop is told from a task's own by its group
/// id, not by the words of its detail; a stop recorded before the column
/// gets its group from those words once, on the next open.
#[test]
fn a_budget_stop_names_the_group_that_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("caesar.db");
    let s = Store::open(&path).unwrap();
    s.record_budget_stop("t_own", "tokens", "group of words: 120 of 100", None, 1).unwrap();
    s.record_budget_stop("t_member", "tokens", "120 of 100 across 3 tasks", Some("g_1"), 1).unwrap();
    s.record_budget_stop("t_member", "turns", "again", None, 2).unwrap();
    assert_eq!(s.budget_stop_group("t_own").unwrap(), None, "its own, whatever its detail says");
    assert_eq!(s.budget_stop_group("t_member").unwrap().as_deref(), Some("g_1"), "the first stop stands");
    assert_eq!(s.budget_stop("t_member").unwrap().unwrap().0, "tokens");
    assert_eq!(s.budget_stop_group("t_none").unwrap(), None);
    drop(s);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE task_budget_stops DROP COLUMN group_id;
         INSERT INTO task_budget_stops (task_id, limit_name, detail, at_ms)
             VALUES ('t_old', 'tokens', 'group g_old: 120 of 100, across its 2 tasks', 3);",
    )
    .unwrap();
    drop(conn);
    let s = Store::open(&path).unwrap();
    assert_eq!(s.budget_stop_group("t_old").unwrap().as_deref(), Some("g_old"));
    s.integrity_check().unwrap();
}

#[test]
fn a_store_from_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("caesar.db");
    drop(Store::open(&path).unwrap());
    Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
    let err = Store::open(&path).unwrap_err().to_string();
    assert!(err.contains("schema version 99"), "{err}");
}

#[test]
fn questions_lists_every_question_with_its_answer_and_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("db")).unwrap();
    s.insert_task(&sample("t_1")).unwrap();
    for (qid, at) in [("q_b", 2), ("q_a", 1)] {
        let q = QuestionRecord {
            task_id: "t_1".into(),
            question_id: qid.into(),
            question: format!("{qid}?"),
            options: vec!["x".into()],
            asked_ms: at,
            answer: None,
        };
        s.insert_question(&q).unwrap();
    }
    assert!(s.answer_question("t_1", "q_a", "yes", 3).unwrap());
    s.mark_delivered("t_1", "q_a").unwrap();
    let qs = s.questions("t_1").unwrap();
    let got: Vec<_> = qs.iter().map(|(q, d)| (q.question_id.as_str(), q.answer.as_deref(), *d)).collect();
    assert_eq!(got, [("q_a", Some("yes"), true), ("q_b", None, false)]);
    assert_eq!(qs[1].0.options, ["x"]);
    assert!(s.questions("t_2").unwrap().is_empty());
}

#[test]
fn listing_filters_by_status_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("db")).unwrap();
    for (i, id) in ["t_a", "t_b", "t_c"].iter().enumerate() {
        let mut t = sample(id);
        t.created_ms = i as i64;
        s.insert_task(&t).unwrap();
    }
    s.set_running("t_b", 1, &RunHandle::Local { pid: 1, start: None, boot: None }, &[]).unwrap();
    let all: Vec<_> = s.tasks(&[], 10).unwrap().into_iter().map(|t| t.id).collect();
    assert_eq!(all, ["t_c", "t_b", "t_a"]);
    let running = s.tasks(&[TaskStatus::Running], 10).unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].id, "t_b");
}

//! The engine in process, with a fake runner: a task goes from delegation
//! through its run to its conclusion with no process started, no socket and
//! no supervisor (issue 28 item 6). What the engine decides (the queue, the
//! events, the report's recovery, the stored outcome, the await) is the
//! production code; only where the agent runs is replaced.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use caesar_proto::paths::Paths;
use caesard::engine::{DelegateInput, Engine, Settings};
use caesard::launch::runner::RunnerKind;
use caesard::runner::{Adopted, RunHandle, RunWatch, Runner, StartSpec, Started};
use caesard::store::TaskStatus;
use caesard::supervisor::ExitRecord;
use caesard::task_dir::TaskDir;

/// A pid no process has: the fake's handle must never signal anything real.
const NO_SUCH_PID: u32 = i32::MAX as u32;

/// Where the agent "ran": what it was asked to start, and what it was told.
#[derive(Default)]
struct FakeRunner {
    started: Mutex<Vec<(String, String)>>,
    stops: Mutex<u32>,
    /// What the agent prints, line by line, and the report it leaves.
    output: Vec<String>,
    report: Option<String>,
    exit_code: i64,
}

/// A run that has already ended.
struct Ended;

impl RunWatch for Ended {
    fn wait(&mut self, _tick: Duration) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async { true })
    }
}

impl Runner for FakeRunner {
    fn start(&self, spec: &StartSpec<'_>) -> caesard::error::Result<Started> {
        self.started.lock().unwrap().push((spec.task_id.to_owned(), spec.program.to_owned()));
        // The agent's whole life, at once: its output, then its report.
        let mut text = self.output.join("\n");
        text.push('\n');
        std::fs::write(spec.dir.raw_log(), text).expect("raw.log");
        if let Some(report) = &self.report {
            std::fs::write(spec.dir.report(), report).expect("report.json");
        }
        Ok(Started {
            handle: RunHandle::Local { pid: NO_SUCH_PID, start: None, boot: None },
            started_ms: caesard::clock::now_ms(),
            watch: Box::new(Ended),
        })
    }

    fn attach(&self, _: &RunHandle, _: &TaskDir) -> Box<dyn RunWatch> {
        Box::new(Ended)
    }

    fn adopt(&self, _: RunnerKind, _: &str, _: &TaskDir) -> Pin<Box<dyn Future<Output = Option<Adopted>> + Send + '_>> {
        Box::pin(async { None })
    }

    fn is_alive(&self, _: &RunHandle) -> bool {
        false
    }

    fn request_stop(&self, _: &RunHandle) {
        *self.stops.lock().unwrap() += 1;
    }

    fn write_stdin(&self, _: &RunHandle, _: &TaskDir, _: &str) -> std::io::Result<()> {
        Ok(())
    }

    fn exit_record(&self, _: &RunHandle, _: &TaskDir) -> Option<ExitRecord> {
        Some(ExitRecord { exit_code: Some(self.exit_code), ..ExitRecord::default() })
    }

    fn kill_remains(&self, _: &RunHandle, _: &str, _: &TaskDir) {}
}

struct Home {
    _home: tempfile::TempDir,
    project: tempfile::TempDir,
    paths: Paths,
}

/// A caesar home whose global config declares agent `fake` (whose program
/// exists but is never run), and a project that is not a git repository.
fn home() -> Home {
    let home = tempfile::tempdir().expect("home");
    let project = tempfile::tempdir().expect("project");
    let paths = Paths::under(home.path());
    std::fs::create_dir_all(&paths.config_dir).expect("mkdir");
    std::fs::write(paths.config_dir.join("config.toml"), "[[agent]]\nid = \"fake\"\nbin = \"/bin/true\"\n")
        .expect("config");
    Home { _home: home, project, paths }
}

fn settings() -> Settings {
    let mut s = Settings::from_env().expect("settings");
    s.poll = Duration::from_millis(5);
    s
}

fn read_only_in_place(project: &Path, objective: &str) -> DelegateInput {
    DelegateInput {
        objective: objective.to_owned(),
        agent: Some("fake".to_owned()),
        mode: Some("read-only".to_owned()),
        isolation: Some("inplace".to_owned()),
        workspace: project.display().to_string(),
        ..DelegateInput::default()
    }
}

fn report(status: &str, summary: &str) -> String {
    serde_json::json!({"protocol": "caesar.report/v1", "status": status, "summary": summary}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_from_delegation_to_its_report_with_no_process() {
    let h = home();
    let runner = Arc::new(FakeRunner {
        output: vec!["looking at the code".to_owned(), "done".to_owned()],
        report: Some(report("success", "the code reads well")),
        ..FakeRunner::default()
    });
    let engine = Engine::open(h.paths.clone(), settings(), Some(runner.clone())).expect("engine");
    engine.recover().await.expect("recover");

    let delegated = engine.delegate(read_only_in_place(h.project.path(), "review the code")).await.expect("delegate");
    let id = delegated.record.id.clone();
    let (views, _) =
        engine.views().await_tasks(std::slice::from_ref(&id), Duration::from_secs(30), false).await.expect("await");
    let view = &views[0];

    assert_eq!(view.record.status, TaskStatus::Succeeded, "the run ended with exit 0 and a success report");
    let stored = view.report.as_ref().expect("a stored report");
    assert!(stored.body.contains("the code reads well"), "the agent's report is the task's: {}", stored.body);
    assert_eq!(stored.source, "file", "recovered from the report file the agent left");
    assert_eq!(runner.started.lock().unwrap().len(), 1, "started once");
    assert_eq!(runner.started.lock().unwrap()[0].0, id);
    assert_eq!(*runner.stops.lock().unwrap(), 0, "nothing to stop");

    // The events say the same, in order: started, the output, finished.
    let logs = engine.views().logs(&id, false, 100, 1 << 20).expect("logs");
    let kinds: Vec<String> = logs
        .events
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(e).unwrap()["type"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("started"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("finished"), "{kinds:?}");
    assert!(logs.events.iter().any(|e| e.contains("looking at the code")), "the output became events: {kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_exit_fails_the_task_whatever_the_agent_reported() {
    let h = home();
    let runner =
        Arc::new(FakeRunner { output: vec!["oops".to_owned()], report: None, exit_code: 3, ..FakeRunner::default() });
    let engine = Engine::open(h.paths.clone(), settings(), Some(runner.clone())).expect("engine");
    engine.recover().await.expect("recover");
    let id = engine.delegate(read_only_in_place(h.project.path(), "try")).await.expect("delegate").record.id;
    let (views, _) =
        engine.views().await_tasks(std::slice::from_ref(&id), Duration::from_secs(30), false).await.expect("await");
    assert_eq!(views[0].record.status, TaskStatus::Failed);
    assert_eq!(views[0].record.exit_code, Some(3));
}

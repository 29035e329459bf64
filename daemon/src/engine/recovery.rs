//! Recovery after a restart: re-attach to what still runs, adopt what was
//! started but not recorded, end what vanished, and prepare again what was
//! being prepared.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, info, info_span};

use crate::agents::Launch;
use crate::clock::now_ms;
use crate::error::Result;
use crate::oacp::EventBody;
use crate::provider::{self};
use crate::store::{Running, TaskStatus};
use crate::supervisor::{self};
use crate::tail::LogTail;

use super::*;

impl Engine {
    // ---------------------------------------------------------------- recover

    /// Re-attaches to the tasks a previous daemon left pending or running.
    pub async fn recover(self: &Arc<Self>) -> Result<()> {
        let active = self.store.tasks(&[TaskStatus::Pending, TaskStatus::Running], u32::MAX)?;
        for record in active {
            let task_dir = PathBuf::from(&record.task_dir);
            let agent = supervisor::read_agent(&task_dir);
            let exited = task_dir.join(supervisor::EXIT_FILE).exists();
            let supervisor_alive = record.supervisor_pid.is_some_and(|pid| {
                supervisor::is_same_process_alive(pid, record.supervisor_start, record.boot_id.as_deref())
            });
            let mut agent = agent;
            if record.supervisor_pid.is_none() && agent.is_none() && !exited {
                // Queued, or the previous daemon died between spawning the
                // supervisor and recording it: a supervisor that runs names
                // the task in its environment, and soon writes agent.json.
                // supervisor.log is made just before the spawn: without it,
                // no supervisor was started, and /proc need not be read.
                if !task_dir.join(SUPERVISOR_LOG).exists() || supervisor::processes_of_task(&record.id).is_empty() {
                    continue;
                }
                agent = wait_for_agent_file(&task_dir).await;
                if agent.is_none() {
                    // It never got the agent started: start afresh.
                    supervisor::kill_by_task_env(&record.id);
                    continue;
                }
            }
            // Started, but the daemon died before recording the supervisor:
            // the supervisor recorded itself in agent.json.
            let (supervisor_pid, supervisor_alive) = match (record.supervisor_pid, &agent) {
                (Some(pid), _) => (pid, supervisor_alive),
                (None, Some(a)) => (a.supervisor_pid, supervisor::is_same_process_alive(a.supervisor_pid, None, None)),
                (None, None) => (0, false),
            };
            let launch: Option<Launch> = serde_json::from_str(&record.launch_json).ok();
            self.repair_events_file(&record);
            let live = Live::new(TaskStatus::Running, record.event_count);
            self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), live.clone());
            if record.supervisor_pid.is_none() && supervisor_pid != 0 {
                // Started but never recorded: record it now (with its
                // `started` event), or the queue would start it again.
                let boot_id = supervisor::boot_id();
                let running = Running {
                    started_ms: agent.as_ref().map(|a| a.started_ms).unwrap_or_else(now_ms),
                    pid: supervisor_pid,
                    start_time: supervisor::process_start_time(supervisor_pid),
                    boot_id: boot_id.as_deref(),
                };
                let started = (record.event_count == 0).then(|| EventBody::Started {
                    agent: record.agent.clone(),
                    command: launch.as_ref().map(Launch::display).unwrap_or_default(),
                });
                self.emit_with(&record.id, &task_dir, &live, started.into_iter().collect(), |events| {
                    self.store.set_running(&record.id, &running, events)?;
                    Ok(true)
                })?;
            }
            let run = Run {
                id: record.id.clone(),
                task_dir: task_dir.clone(),
                tail: LogTail::new(&task_dir.join(supervisor::RAW_LOG), record.log_offset),
                parser: parser_for(launch.as_ref().map(|l| l.parser.as_str()).unwrap_or(provider::GENERIC)),
                generic: launch.as_ref().is_none_or(|l| l.parser == provider::GENERIC),
                final_text: None,
                messages: String::new(),
                session_id: record.session_id.clone(),
                blocker: None,
                supervisor_pid: Some(supervisor_pid).filter(|p| *p != 0),
                live,
                bridge: launch
                    .as_ref()
                    .filter(|l| matches!(l.stdin, provider::Stdin::Control { .. }))
                    .map(|l| l.parser.clone()),
                permission_deadlines: Vec::new(),
                deadline_ms: record.started_ms.unwrap_or_else(now_ms) + record.timeout_ms as i64,
            };
            let waiter = Waiter::Reattached {
                pid: supervisor_pid,
                start: record.supervisor_start,
                boot: record.boot_id.clone(),
            };
            info!(task_id = %record.id, exited, supervisor_alive, "re-attaching to a task");
            let mut run = run;
            if !exited && supervisor_alive {
                self.resume_permissions(&mut run);
            }
            let engine = self.clone();
            let span = info_span!("task", task_id = %record.id);
            if exited || !supervisor_alive {
                // Nothing to wait for: drain and conclude now.
                engine.monitor_done(run).instrument(span).await;
            } else {
                tokio::spawn(async move { engine.monitor(run, waiter).await }.instrument(span));
            }
        }
        self.schedule().await;
        Ok(())
    }
}

/// Waits up to 2 s for a starting supervisor to write `agent.json`.
pub(super) async fn wait_for_agent_file(task_dir: &Path) -> Option<supervisor::AgentStarted> {
    for _ in 0..100 {
        if let Some(agent) = supervisor::read_agent(task_dir) {
            return Some(agent);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

//! Where the engine tells the notifier (issue 17, `crate::notify`): a task's
//! finish, question and blocker, a group's finish, and budget events, which
//! the budget room calls [`Engine::notify_budget`] for. Each call only loads
//! the global `[notify]` and queues: delivery never blocks the engine.

use crate::clock::now_ms;
use crate::notify::{Notification, NotifyEvent};

use super::*;

impl Engine {
    /// Queues a notification of `event` for a task, with its group if it has one.
    pub(super) fn notify_task(&self, task_id: &str, event: NotifyEvent, summary: &str) {
        let Some(config) = self.notify_config() else { return };
        let record = self.store.task(task_id).ok().flatten();
        let status = record.as_ref().map(|r| r.status.as_str()).unwrap_or("unknown");
        let verdict = record.clone().and_then(|r| self.view(r).ok()).map(|v| v.verdict.label());
        let group_id = self.store.group_of(task_id).ok().flatten();
        self.notifier.notify(
            &config,
            Notification {
                task_id: Some(task_id.to_owned()),
                group_id,
                event,
                status: status.to_owned(),
                verdict,
                summary: summary.to_owned(),
                at_ms: now_ms(),
            },
        );
    }

    /// A task reached a budget limit: `summary` says which and the figures.
    /// For the budget room (issue 17, items 1–4).
    pub fn notify_budget(&self, task_id: &str, summary: &str) {
        self.notify_task(task_id, NotifyEvent::Budget, summary);
    }

    /// After a task ended: its `finish`, and its group's when it was the
    /// group's last task to end.
    pub(super) fn notify_finished(&self, task_id: &str, summary: &str) {
        self.notify_task(task_id, NotifyEvent::Finish, summary);
        let Ok(Some(group_id)) = self.store.group_of(task_id) else { return };
        let Ok(Some(group)) = self.store.group(&group_id) else { return };
        let members: Vec<_> = group.task_ids.iter().filter_map(|t| self.store.task(t).ok().flatten()).collect();
        if members.len() != group.task_ids.len() || members.iter().any(|m| !m.status.is_terminal()) {
            return;
        }
        let Some(config) = self.notify_config() else { return };
        let succeeded = members.iter().filter(|m| m.status == TaskStatus::Succeeded).count();
        let status = if succeeded == members.len() { "succeeded" } else { "finished" };
        let summary = format!(
            "group of {}: {succeeded} succeeded ({})",
            members.len(),
            members
                .iter()
                .map(|m| format!("{} {} {}", m.id, m.agent, m.status.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.notifier.notify(
            &config,
            Notification {
                task_id: None,
                group_id: Some(group_id),
                event: NotifyEvent::Finish,
                status: status.to_owned(),
                verdict: None,
                summary,
                at_ms: now_ms(),
            },
        );
    }

    /// Endpoints whose last delivery failed, for `caesar doctor`.
    pub fn notify_problems(&self) -> Vec<String> {
        self.notifier.problems()
    }

    fn notify_config(&self) -> Option<crate::notify::NotifyConfig> {
        match crate::config::Config::load_global(&self.paths.config_dir) {
            Ok(c) if !c.notify.is_empty() => Some(c.notify),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!("notifications skipped: the global config does not load: {e}");
                None
            }
        }
    }
}

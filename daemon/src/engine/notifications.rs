//! The engine's notices (issue 17, `crate::notify`): a task's finish,
//! question and blocker, a group's finish, and budget events. Each call
//! only loads the global `[notify]` and queues: delivery never blocks the
//! engine. A service with the notifier's queue as its own state.

use crate::clock::now_ms;
use crate::notify::{Notification, NotifyEvent};

use std::sync::Arc;

use caesar_proto::paths::Paths;

use crate::store::{Store, TaskStatus};

/// Webhooks and the command hook, fed by the engine's rooms. Clones share
/// one notifier.
#[derive(Clone)]
pub struct Notices {
    paths: Paths,
    store: Arc<Store>,
    /// Where a task's verdict comes from.
    views: Arc<super::observe::Views>,
    notifier: Arc<crate::notify::Notifier>,
}

impl Notices {
    pub(super) fn new(paths: Paths, store: Arc<Store>, views: Arc<super::observe::Views>) -> Notices {
        Notices { paths, store, views, notifier: Default::default() }
    }

    /// Queues a notification of `event` for a task, with its group if it has one.
    pub(super) fn task(&self, task_id: &str, event: NotifyEvent, summary: &str) {
        let Some(config) = self.config() else { return };
        let record = self.store.task(task_id).ok().flatten();
        let status = record.as_ref().map(|r| r.status.as_str()).unwrap_or("unknown");
        let verdict = record.and_then(|r| self.views.view(r).ok()).map(|v| v.verdict.label());
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
    pub(super) fn budget(&self, task_id: &str, summary: &str) {
        self.task(task_id, NotifyEvent::Budget, summary);
    }

    /// After a task ended: its `finish`, and its group's when it was the
    /// group's last task to end.
    pub(super) fn finished(&self, task_id: &str, summary: &str) {
        self.task(task_id, NotifyEvent::Finish, summary);
        let Ok(Some(group_id)) = self.store.group_of(task_id) else { return };
        let Ok(Some(group)) = self.store.group(&group_id) else { return };
        let members: Vec<_> = group.task_ids.iter().filter_map(|t| self.store.task(t).ok().flatten()).collect();
        if members.len() != group.task_ids.len() || members.iter().any(|m| !m.status.is_terminal()) {
            return;
        }
        let Some(config) = self.config() else { return };
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
    pub fn problems(&self) -> Vec<String> {
        self.notifier.problems()
    }

    fn config(&self) -> Option<crate::notify::NotifyConfig> {
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

//! Preparation: the task's workshop (worktree and `setup`, or the inplace
//! snapshot), made outside the queue and recorded before the task may start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agents::Launch;
use crate::oacp::{Isolation, TaskDoc};
use crate::store::TaskRecord;
use crate::supervisor::{self};
use crate::workshop;

use super::*;

impl Engine {
    /// reason the task fails.
    pub(super) async fn prepare_workshop(
        &self,
        record: &TaskRecord,
        launch: &Launch,
    ) -> std::result::Result<PathBuf, String> {
        let Some(plan) = launch.plan.clone() else { return Ok(PathBuf::from(&record.workspace)) };
        let (id, workspace, objective, mode) =
            (record.id.clone(), PathBuf::from(&record.workspace), record.objective.clone(), record.mode);
        let prepared = tokio::task::spawn_blocking(move || {
            workshop::prepare(&workshop::PrepareInput {
                workspace: &workspace,
                task_id: &id,
                label: &plan.label,
                objective: &objective,
                isolation: plan.isolation,
                mode,
                allow_inplace_write: plan.allow_inplace_write,
                config: &plan.worktree,
                setup_timeout: Some(Duration::from_secs(30 * 60)),
            })
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let json = serde_json::to_string(&prepared).map_err(|e| e.to_string())?;
        self.store.set_workshop(&record.id, &json).map_err(|e| e.to_string())?;
        if prepared.isolation == Isolation::Worktree {
            // task.json tells the agent the frozen base and where it works.
            let path = Path::new(&record.task_dir).join("task.json");
            if let Ok(mut doc) = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<TaskDoc>(&b).map_err(|e| e.to_string()))
            {
                doc.base_ref = prepared.base_ref.clone();
                doc.workspace = prepared.workdir.display().to_string();
                if let Ok(bytes) = serde_json::to_vec_pretty(&doc) {
                    let _ = supervisor::write_atomic(&path, &bytes);
                }
            }
        }
        Ok(prepared.workdir)
    }
}

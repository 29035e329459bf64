//! What a finished task left outside this machine (issue 16: a Kubernetes
//! task's `refs/caesar/tasks/<id>/{base,result}` on the team's git remote)
//! is let go of once its changes are applied, discarded or collected.
//!
//! Apply and discard never wait for the remote: they hand the release to a
//! thread of its own. The runner records a release that succeeded in the
//! task directory, so one that failed (a remote unreachable, a daemon
//! killed meanwhile) is tried again at every gc until it succeeds.

use crate::store::TaskRecord;

use crate::task_dir::TaskDir;

use super::changes::Changes;

impl Changes {
    /// Releases the task's remote leftovers in the background.
    pub(super) fn release_remote_soon(&self, record: &TaskRecord) {
        let (runner, id, dir) = (self.runner.clone(), record.id.clone(), TaskDir::new(&record.task_dir));
        let (kind, repo) = (record.runner_kind(), std::path::PathBuf::from(&record.workspace));
        let spawned = std::thread::Builder::new().name("caesar-release".into()).spawn(move || {
            if let Err(e) = runner.release(kind, &id, &dir, &repo) {
                tracing::warn!(task_id = id, error = e, "remote refs kept; the next gc retries");
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(task_id = record.id, error = %e, "remote refs kept; the next gc retries");
        }
    }

    /// Releases them now (gc); the error, if one kept them.
    pub(super) fn release_remote_now(&self, record: &TaskRecord) -> Option<String> {
        let repo = std::path::PathBuf::from(&record.workspace);
        self.runner.release(record.runner_kind(), &record.id, &TaskDir::new(&record.task_dir), &repo).err()
    }
}

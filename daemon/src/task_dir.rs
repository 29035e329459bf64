//! A task's directory, and every file name in it.
//!
//! The daemon, the supervisor and OACP agents all meet in this directory, so
//! its layout is a contract: one type names every file, and nothing else in
//! the engine spells a file name.

use std::path::{Path, PathBuf};

use crate::supervisor;

/// `<state>/tasks/<id>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDir {
    root: PathBuf,
}

impl TaskDir {
    /// The directory of a recorded task.
    pub fn new(root: impl Into<PathBuf>) -> TaskDir {
        TaskDir { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The OACP task document the agent reads.
    pub fn task_json(&self) -> PathBuf {
        self.root.join("task.json")
    }

    /// Where an OACP agent writes its report (tier 3), and where the daemon
    /// leaves a copy of the final report.
    pub fn report(&self) -> PathBuf {
        self.root.join("report.json")
    }

    /// The report schema handed to CLIs that can answer in it (tier 2).
    pub fn report_schema(&self) -> PathBuf {
        self.root.join("report.schema.json")
    }

    /// The report submitted over the return channel (tier 1).
    pub fn channel_report(&self) -> PathBuf {
        self.root.join(crate::report::CHANNEL_REPORT)
    }

    /// The task's events, one JSON line each, for OACP readers.
    pub fn events(&self) -> PathBuf {
        self.root.join("events.jsonl")
    }

    /// The agent's combined output, written by the runner.
    pub fn raw_log(&self) -> PathBuf {
        self.root.join(supervisor::RAW_LOG)
    }

    /// The supervisor's record of the started agent.
    pub fn agent_started(&self) -> PathBuf {
        self.root.join(supervisor::AGENT_FILE)
    }

    /// The supervisor's record of how the agent ended.
    pub fn exit(&self) -> PathBuf {
        self.root.join(supervisor::EXIT_FILE)
    }

    /// The supervisor's own stderr, made just before it is spawned: its
    /// absence proves no supervisor was started.
    pub fn supervisor_log(&self) -> PathBuf {
        self.root.join("supervisor.log")
    }

    /// What the supervisor writes first on the agent's stdin.
    pub fn stdin_initial(&self) -> PathBuf {
        self.root.join(supervisor::STDIN_INITIAL)
    }

    /// What the agent may add to of the permission bridge: the refusals of
    /// a read-only task, kept for its report's findings.
    pub fn permissions(&self) -> PathBuf {
        self.root.join("permissions")
    }

    /// The daemon's own part of a task, beside its directory rather than in
    /// it (`<state>/tasks/<id>.daemon/`): an agent confined by Landlock may
    /// write its task directory, but not the state directory around it, so
    /// what an answer relies on is kept here (issue 19).
    pub fn daemon_part(&self) -> PathBuf {
        let name = self.root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.root.with_file_name(format!("{name}.daemon"))
    }

    /// The kept request of one bridged prompt, exactly as it was asked: the
    /// answer sends back its input and names its options.
    pub fn permission_request(&self, question_id: &str) -> PathBuf {
        self.daemon_part().join("permissions").join(format!("{question_id}.json"))
    }

    /// Where a daemon before the request moved out of the agent's reach kept
    /// it (`permissions/<id>.json`), read only for a question it asked.
    pub fn legacy_permission_request(&self, question_id: &str) -> PathBuf {
        self.permissions().join(format!("{question_id}.json"))
    }

    /// A file a provider's launch asks for (an MCP config, say), which must
    /// stay inside the directory.
    pub fn provider_file(&self, name: &str) -> Option<PathBuf> {
        let rel = Path::new(name);
        let inside = !name.is_empty() && rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        inside.then(|| self.root.join(rel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_files_stay_inside() {
        let d = TaskDir::new("/s/t");
        assert_eq!(d.provider_file("mcp/config.json"), Some(PathBuf::from("/s/t/mcp/config.json")));
        assert_eq!(d.provider_file("../x"), None);
        assert_eq!(d.provider_file("/etc/passwd"), None);
        assert_eq!(d.provider_file("a/./b"), Some(PathBuf::from("/s/t/a/b")));
        assert_eq!(d.provider_file(""), None);
    }

    #[test]
    fn the_daemons_part_is_beside_the_task_directory_not_in_it() {
        for root in ["/s/tasks/t_1", "/s/tasks/t_1/"] {
            let d = TaskDir::new(root);
            assert_eq!(d.daemon_part(), PathBuf::from("/s/tasks/t_1.daemon"));
            assert!(!d.permission_request("p_x").starts_with(d.root()));
        }
    }
}

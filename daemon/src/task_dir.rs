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

    /// The kept requests of bridged permission prompts.
    pub fn permissions(&self) -> PathBuf {
        self.root.join("permissions")
    }

    /// The kept request of one bridged prompt.
    pub fn permission_request(&self, question_id: &str) -> PathBuf {
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
}

//! A task's directory, and every file name in it.
//!
//! The daemon, the supervisor and OACP agents all meet here, so the layout is
//! a contract: one type names every file, and nothing else in the engine
//! spells a file name. Two directories make a task (issue 19):
//!
//! - `<state>/tasks/<id>/`, the agent's: what exists for it (`task.json`,
//!   `report.schema.json`, the `report.json` it writes, `tmp/`, provider
//!   files) and `events.jsonl` for OACP readers (the store is the trusted
//!   copy of the events). A confined agent may write all of it.
//! - `<state>/tasks/<id>.daemon/`, the daemon's part, beside it and out of a
//!   confined agent's reach: every file the daemon or the supervisor writes
//!   and later reads back or trusts (`agent.json`, `exit.json`, `raw.log`,
//!   `supervisor.log`, `stdin.fifo`, `stdin.initial`, `session.open.json`,
//!   `prompt.txt`, `report.channel.json`, the kept permission requests).
//!
//! A task delegated before the move has no [`LAYOUT_MARKER`] in its daemon
//! part: its files are read where that daemon put them, in the task
//! directory, and only for such a task.
//!
//! The design beside its neighbours: `docs/design/confinement.md`.

use std::path::{Path, PathBuf};

// The files the supervisor writes in a task's daemon part (their names are
// the layout's, which this module owns; the supervisor re-exports them).
/// Written by the supervisor once the agent is started.
pub const AGENT_FILE: &str = "agent.json";
/// Written by the supervisor once the agent and its tree are gone.
pub const EXIT_FILE: &str = "exit.json";
/// The agent's combined stdout and stderr.
pub const RAW_LOG: &str = "raw.log";
/// What the supervisor writes first to an agent with a stdin protocol.
pub const STDIN_INITIAL: &str = "stdin.initial";
/// The FIFO through which the daemon writes lines to such an agent's stdin.
pub const STDIN_FIFO: &str = "stdin.fifo";
/// The rest of a session protocol's opening, which the supervisor carries out
/// (`supervisor::opening`).
pub const SESSION_OPENING: &str = "session.open.json";

/// The supervisor's record of the steers it gave the agent (issue 31), one JSON line each.
pub const STEERS_DELIVERED: &str = "steers.delivered.jsonl";

/// The file in a task's daemon part that says its daemon-owned files are
/// there; a task without it was delegated by a daemon before the move.
pub const LAYOUT_MARKER: &str = "layout";

/// `<state>/tasks/<id>/`, and its daemon part beside it.
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

    /// The report submitted over the return channel (tier 1), in the
    /// daemon's files: a file the agent wrote is never taken for it.
    pub fn channel_report(&self) -> PathBuf {
        self.daemon_files().join(crate::report::CHANNEL_REPORT)
    }

    /// The task's events, one JSON line each, for OACP readers. Written by
    /// the daemon without following a link; never trusted when read back
    /// (the store holds the events, this file is repaired from it).
    pub fn events(&self) -> PathBuf {
        self.root.join("events.jsonl")
    }

    /// The agent's combined output, written by the supervisor through the
    /// agent's inherited pipe (the agent never opens it by path).
    pub fn raw_log(&self) -> PathBuf {
        self.daemon_files().join(RAW_LOG)
    }

    /// The supervisor's record of the started agent.
    pub fn agent_started(&self) -> PathBuf {
        self.daemon_files().join(AGENT_FILE)
    }

    /// The supervisor's record of how the agent ended.
    pub fn exit(&self) -> PathBuf {
        self.daemon_files().join(EXIT_FILE)
    }

    /// The supervisor's own stderr, made just before it is spawned: its
    /// absence proves no supervisor was started.
    pub fn supervisor_log(&self) -> PathBuf {
        self.daemon_files().join("supervisor.log")
    }

    /// What the supervisor writes first on the agent's stdin.
    pub fn stdin_initial(&self) -> PathBuf {
        self.daemon_files().join(STDIN_INITIAL)
    }

    /// The rest of a session protocol's opening, carried out by the supervisor.
    pub fn session_opening(&self) -> PathBuf {
        self.daemon_files().join(SESSION_OPENING)
    }

    /// The task's prompt, handed over by the supervisor ([`crate::prompt`]).
    pub fn prompt(&self) -> PathBuf {
        self.daemon_files().join(crate::prompt::FILE)
    }

    /// The directory of the files the daemon and the supervisor write and
    /// trust (the supervisor's `--task-dir`): the daemon part, or for a
    /// task delegated before the move ([`TaskDir::is_legacy`]) the task
    /// directory itself, where that daemon put them.
    pub fn daemon_files(&self) -> PathBuf {
        if self.is_legacy() { self.root.clone() } else { self.daemon_part() }
    }

    /// Whether the task was delegated by a daemon that kept its own files in
    /// the task directory: no [`LAYOUT_MARKER`] in the daemon part. The
    /// marker is made before the task is recorded, in a directory the agent
    /// cannot write (when Landlock confines it), so a task of this version
    /// never reads what an agent planted in the old places.
    pub fn is_legacy(&self) -> bool {
        std::fs::symlink_metadata(self.daemon_part().join(LAYOUT_MARKER)).is_err()
    }

    /// Makes the daemon part (0700) with its [`LAYOUT_MARKER`], for a task
    /// being delegated, before anything of it is written or recorded.
    pub fn create_daemon_part(&self) -> std::io::Result<()> {
        let mut batch = crate::durable::Batch::default();
        self.create_daemon_part_in(&mut batch)?;
        batch.sync()
    }

    /// [`TaskDir::create_daemon_part`], made durable with the rest of `batch`
    /// (issue 33: a delegation's files and directories are fsynced together).
    pub fn create_daemon_part_in(&self, batch: &mut crate::durable::Batch) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let part = self.daemon_part();
        match std::fs::DirBuilder::new().mode(0o700).create(&part) {
            Ok(()) => {}
            // Made by nobody else: a new task's id is new. Only a directory of ours will do.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta = std::fs::symlink_metadata(&part)?;
                if !meta.is_dir() {
                    return Err(std::io::Error::other(format!("{} is not a directory", part.display())));
                }
            }
            Err(e) => return Err(e),
        }
        // Durable before the task is recorded, or a restart would read the
        // task as one of before the move. Empty: it takes no block of a
        // full disk, only its name.
        batch.write_new(&part.join(LAYOUT_MARKER), b"")?;
        if let Some(tasks) = part.parent() {
            batch.dir(tasks);
        }
        Ok(())
    }

    /// The permission bridge's own files, in the daemon's files: the
    /// refusals of a read-only task, kept for its report's findings (and,
    /// for a task delegated before the move, its kept requests).
    pub fn permissions(&self) -> PathBuf {
        self.daemon_files().join("permissions")
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
    fn a_new_task_keeps_its_daemon_files_in_its_daemon_part_and_an_old_one_where_they_were() {
        let d = tempfile::tempdir().unwrap();
        let dir = TaskDir::new(d.path().join("t_1"));
        std::fs::create_dir(dir.root()).unwrap();
        // Before the move: every daemon file in the task directory, even
        // with a daemon part holding kept permission requests.
        std::fs::create_dir_all(dir.daemon_part().join("permissions")).unwrap();
        assert!(dir.is_legacy());
        assert_eq!(dir.exit(), dir.root().join("exit.json"));
        assert_eq!(dir.prompt(), dir.root().join("prompt.txt"));
        dir.create_daemon_part().unwrap();
        assert!(!dir.is_legacy());
        for f in [
            dir.exit(),
            dir.agent_started(),
            dir.raw_log(),
            dir.supervisor_log(),
            dir.stdin_initial(),
            dir.session_opening(),
            dir.prompt(),
            dir.channel_report(),
        ] {
            assert!(f.starts_with(dir.daemon_part()), "{}", f.display());
        }
        // What exists for the agent stays in its directory.
        for f in [dir.task_json(), dir.report(), dir.report_schema(), dir.events()] {
            assert!(f.starts_with(dir.root()), "{}", f.display());
        }
        // A new task's daemon part is the daemon's alone.
        use std::os::unix::fs::PermissionsExt;
        let new = TaskDir::new(d.path().join("t_2"));
        new.create_daemon_part().unwrap();
        assert_eq!(std::fs::metadata(new.daemon_part()).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(!new.is_legacy());
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

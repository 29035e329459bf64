//! The return channel as an agent is told to start it: one command, its
//! arguments and its environment, whatever carries them (a CLI's MCP flags,
//! `task.json`, an ACP agent's `session/new` `mcpServers`).
//!
//! It holds no secret (issue 19): a channel started inside a task's process
//! tree is bound to that task by the daemon from the kernel's word on the
//! connection (`engine/authority.rs`), so nothing in argv, in the launch
//! record or in events could let another task speak for this one.

use std::path::Path;

/// The name the return channel's MCP server has in an agent's CLI.
pub const CHANNEL_SERVER: &str = "caesar";

/// The return channel's tools, which a CLI that lists allowed tools must allow.
pub const CHANNEL_TOOLS: [&str; 4] = ["get_task", "report_progress", "ask_orchestrator", "submit_report"];

/// How to start the return channel for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    /// The `caesar-mcp` executable.
    pub command: String,
    pub args: Vec<String>,
    /// `CAESAR_TASK_ID` (which task the channel names) and `CAESAR_SOCKET`.
    pub env: Vec<(String, String)>,
}

/// The return channel of task `task_id`, served by `caesar-mcp` at `bin`
/// over the daemon's socket at `socket`.
pub fn channel_spec(bin: &Path, task_id: &str, socket: &Path) -> ChannelSpec {
    ChannelSpec {
        command: bin.display().to_string(),
        args: vec!["--channel".to_owned()],
        env: vec![
            ("CAESAR_TASK_ID".to_owned(), task_id.to_owned()),
            ("CAESAR_SOCKET".to_owned(), socket.display().to_string()),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_carries_no_secret() {
        let s = channel_spec(Path::new("/bin/caesar-mcp"), "t_0123456789ab", Path::new("/run/c.sock"));
        assert_eq!(s.args, ["--channel"]);
        assert!(s.env.iter().all(|(k, _)| !k.contains("SECRET")), "{s:?}");
        assert!(s.env.contains(&("CAESAR_TASK_ID".to_owned(), "t_0123456789ab".to_owned())));
    }
}

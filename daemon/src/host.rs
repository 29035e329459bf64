//! Who is delegating, for the recursion rule (issue 30): Claude Code
//! delegating to Claude is refused unless `allow_recursion`, but a person at
//! a plain terminal, or an agent other than Claude, is no recursion. The
//! daemon tells them apart by the caller's process ancestry as the kernel
//! gave it at accept (`caesar_proto::peer`), not by what the request says.

use crate::launch::ProviderId;
pub use crate::request::Host;
use caesar_proto::peer::{Ancestor, PeerInfo};

/// The host of a connection from one of the user's own processes.
pub fn of_peer(peer: Option<&PeerInfo>) -> Host {
    let Some(peer) = peer else { return Host::Unknown };
    let Some(pid) = peer.pid else { return Host::Unknown };
    if peer.cut || peer.ancestry.is_empty() {
        return Host::Unknown;
    }
    let claude_env = read_proc(pid, "environ").is_some_and(|e| e.split(|b| *b == 0).any(|v| v == b"CLAUDECODE=1"));
    if claude_env || peer.ancestry.iter().any(|a| is_claude_code(a, read_proc(a.pid, "cmdline").as_deref())) {
        Host::ClaudeCode
    } else {
        Host::Other
    }
}

/// The host of a delegation from inside a task: Claude Code when the task's
/// agent is claude or one caesar does not know the program of.
pub fn of_task_agent(agent: &str) -> Host {
    match ProviderId::native(agent) {
        Some(ProviderId::Claude) | None => Host::ClaudeCode,
        Some(_) => Host::Other,
    }
}

/// Whether one ancestor is Claude Code: its native binary is named `claude`
/// (the kernel's name), the npm one runs node with its `cli.js` and shows
/// `claude` as its first argument.
fn is_claude_code(a: &Ancestor, cmdline: Option<&[u8]>) -> bool {
    let claude = ProviderId::Claude.as_str();
    if a.comm == claude {
        return true;
    }
    let Some(cmdline) = cmdline else { return false };
    cmdline.split(|b| *b == 0).take(2).any(|arg| {
        let arg = String::from_utf8_lossy(arg);
        let base = arg.rsplit('/').next().unwrap_or_default();
        base == claude || arg.contains("@anthropic-ai/claude-code/")
    })
}

/// A capped read of `/proc/<pid>/<file>` (the caller's own, same uid).
fn read_proc(pid: u32, file: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/{file}")).ok()?.take(256 * 1024).read_to_end(&mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn ancestor(pid: u32, comm: &str) -> Ancestor {
        Ancestor { pid, ppid: 1, start: 0, comm: comm.to_owned(), task_id: None }
    }

    #[test]
    fn claude_code_is_told_by_its_name_or_its_command_line() {
        assert!(is_claude_code(&ancestor(2, "claude"), None));
        assert!(!is_claude_code(&ancestor(2, "bash"), None));
        let npm = b"node\0/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js\0--print\0";
        assert!(is_claude_code(&ancestor(2, "node"), Some(npm)));
        assert!(is_claude_code(&ancestor(2, "node"), Some(b"/home/u/.local/bin/claude\0")));
        let other = b"node\0/usr/lib/node_modules/@google/gemini-cli/dist/index.js\0claude\0";
        assert!(!is_claude_code(&ancestor(2, "node"), Some(other)), "only the program and its script count");
    }

    #[test]
    fn an_unknown_caller_may_be_claude_code_and_a_known_terminal_is_not() {
        assert_eq!(of_peer(None), Host::Unknown);
        assert_eq!(of_peer(Some(&PeerInfo { cut: true, ..PeerInfo::default() })), Host::Unknown);
        // This test process: cargo's and the shell's tree, no Claude Code
        // above it unless the suite itself runs under one.
        let me = std::process::id();
        let peer =
            PeerInfo { pid: Some(me), ancestry: Arc::new(vec![ancestor(me, "caesard-tests")]), ..PeerInfo::default() };
        let inside_claude = std::env::var_os("CLAUDECODE").is_some();
        assert_eq!(of_peer(Some(&peer)) == Host::ClaudeCode, inside_claude);
        assert!(Host::Unknown.may_be_claude_code() && Host::ClaudeCode.may_be_claude_code());
        assert!(!Host::Other.may_be_claude_code());
        assert_eq!(of_task_agent(ProviderId::Claude.as_str()), Host::ClaudeCode);
        assert_eq!(of_task_agent(ProviderId::Codex.as_str()), Host::Other);
        assert_eq!(of_task_agent("my-wrapper"), Host::ClaudeCode, "a program caesar cannot name");
    }
}

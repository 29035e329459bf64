//! The item mapping codex's two protocols share: `codex exec --json` ([`super::codex`]) and
//! `codex app-server` ([`super::codex_app`]) report the same items (the agent's message, a
//! shell command, a file change, an MCP tool call, a web search) under different spellings
//! (`agent_message` and `agentMessage`, `exit_code` and `exitCode`, a change's `kind` as a
//! string or as `{type}`). One pure function maps them for both; each parser keeps what only
//! its protocol has.

use serde_json::Value;

use super::{Base, Parsed, file_changed, message, str_at, summarize_input};
use crate::oacp::ChangeAction;

/// How one protocol spells its items.
pub(super) struct Spelling {
    pub agent_message: &'static str,
    pub command: &'static str,
    pub file_change: &'static str,
    pub mcp_tool_call: &'static str,
    pub web_search: &'static str,
    /// A command item's exit code.
    pub exit_code: &'static str,
    /// Where a file change says its kind (`add`, `delete`, `update`), as a JSON pointer.
    pub change_kind: &'static str,
}

/// `codex exec --json`'s items (codex-rs `exec/src/exec_events.rs`).
pub(super) const EXEC: Spelling = Spelling {
    agent_message: "agent_message",
    command: "command_execution",
    file_change: "file_change",
    mcp_tool_call: "mcp_tool_call",
    web_search: "web_search",
    exit_code: "exit_code",
    change_kind: "/kind",
};

/// `codex app-server`'s items (its `ThreadItem` schema).
pub(super) const APP_SERVER: Spelling = Spelling {
    agent_message: "agentMessage",
    command: "commandExecution",
    file_change: "fileChange",
    mcp_tool_call: "mcpToolCall",
    web_search: "webSearch",
    exit_code: "exitCode",
    change_kind: "/kind/type",
};

/// What [`map_item`] did with an item.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Mapped {
    /// Mapped into events.
    Done,
    /// Mapped; the MCP tool call failed with this message (exec reads it for a denial).
    McpFailed(String),
    /// Not one of the shared items (or a started item whose content comes on completion): the
    /// caller's own.
    Other,
}

/// Maps one started (`completed == false`) or completed item that both protocols have.
pub(super) fn map_item(base: &mut Base, p: &mut Parsed, item: &Value, completed: bool, spelling: &Spelling) -> Mapped {
    let id = str_at(item, "id").unwrap_or_default();
    let status = str_at(item, "status").unwrap_or_default();
    let kind = str_at(item, "type").unwrap_or_default();
    if kind == spelling.agent_message {
        if !completed {
            return Mapped::Other;
        }
        let text = str_at(item, "text").unwrap_or_default();
        message(p, text);
        // The last message is the answer; a later one supersedes.
        p.final_text = Some(text.to_owned());
    } else if kind == spelling.command {
        let cmd = str_at(item, "command").unwrap_or_default().to_owned();
        if completed {
            let exit = item.get(spelling.exit_code).and_then(Value::as_i64);
            let ok = status == "completed" && exit.is_none_or(|c| c == 0);
            base.tool_end(p, id, Some("shell"), Some(cmd), ok);
        } else {
            base.tool_start(p, id, "shell", cmd);
        }
    } else if kind == spelling.file_change {
        let changes = item.get("changes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let summary = changes.iter().filter_map(|c| str_at(c, "path")).collect::<Vec<_>>().join(", ");
        if !completed {
            base.tool_start(p, id, "apply_patch", summary);
            return Mapped::Done;
        }
        let ok = status == "completed";
        base.tool_end(p, id, Some("apply_patch"), Some(summary), ok);
        if ok {
            for c in changes {
                let action = match c.pointer(spelling.change_kind).and_then(Value::as_str) {
                    Some("add") => ChangeAction::Created,
                    Some("delete") => ChangeAction::Deleted,
                    _ => ChangeAction::Modified,
                };
                file_changed(p, str_at(c, "path").unwrap_or_default(), action);
            }
        }
    } else if kind == spelling.mcp_tool_call {
        let name = format!(
            "mcp__{}__{}",
            str_at(item, "server").unwrap_or_default(),
            str_at(item, "tool").unwrap_or_default()
        );
        let summary = summarize_input(item.get("arguments").unwrap_or(&Value::Null));
        if !completed {
            base.tool_start(p, id, &name, summary);
            return Mapped::Done;
        }
        let err = item.pointer("/error/message").and_then(Value::as_str);
        base.tool_end(p, id, Some(&name), Some(summary), status == "completed" && err.is_none());
        if let Some(err) = err {
            return Mapped::McpFailed(err.to_owned());
        }
    } else if kind == spelling.web_search {
        let q = str_at(item, "query").unwrap_or_default().to_owned();
        if completed {
            base.tool_end(p, id, Some("web_search"), Some(q), true);
        } else {
            base.tool_start(p, id, "web_search", q);
        }
    } else {
        return Mapped::Other;
    }
    Mapped::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::{EventBody, ToolStatus};
    use serde_json::json;

    /// The same work, spelt by each protocol, maps to the same events.
    #[test]
    fn both_spellings_map_to_the_same_events() {
        let exec = [
            json!({"id": "c1", "type": "command_execution", "command": "ls", "status": "in_progress"}),
            json!({"id": "c1", "type": "command_execution", "command": "ls", "status": "completed", "exit_code": 2}),
            json!({"id": "f1", "type": "file_change", "status": "completed",
                "changes": [{"path": "/w/a", "kind": "add"}, {"path": "/w/b", "kind": "delete"}]}),
            json!({"id": "m1", "type": "mcp_tool_call", "server": "s", "tool": "t", "arguments": {}, "status": "failed",
                "error": {"message": "denied"}}),
            json!({"id": "a1", "type": "agent_message", "text": "done"}),
        ];
        let app = [
            json!({"id": "c1", "type": "commandExecution", "command": "ls", "status": "inProgress"}),
            json!({"id": "c1", "type": "commandExecution", "command": "ls", "status": "completed", "exitCode": 2}),
            json!({"id": "f1", "type": "fileChange", "status": "completed",
                "changes": [{"path": "/w/a", "kind": {"type": "add"}}, {"path": "/w/b", "kind": {"type": "delete"}}]}),
            json!({"id": "m1", "type": "mcpToolCall", "server": "s", "tool": "t", "arguments": {}, "status": "failed",
                "error": {"message": "denied"}}),
            json!({"id": "a1", "type": "agentMessage", "text": "done"}),
        ];
        let run = |items: &[Value], spelling: &Spelling| {
            let (mut base, mut p, mut outcomes) = (Base::default(), Parsed::default(), Vec::new());
            for (i, item) in items.iter().enumerate() {
                outcomes.push(map_item(&mut base, &mut p, item, i != 0, spelling));
            }
            (serde_json::to_string(&p.events).unwrap(), p.final_text, outcomes)
        };
        let (events, answer, outcomes) = run(&exec, &EXEC);
        assert_eq!((events.clone(), answer.clone()), (run(&app, &APP_SERVER).0, run(&app, &APP_SERVER).1));
        assert_eq!(answer.as_deref(), Some("done"));
        assert_eq!(outcomes[3], Mapped::McpFailed("denied".into()));
        let (mut base, mut p) = (Base::default(), Parsed::default());
        map_item(&mut base, &mut p, &exec[1], true, &EXEC);
        assert!(
            matches!(p.events.last(), Some(EventBody::ToolUse { status: ToolStatus::Failed, .. })),
            "exit 2 failed: {:?}",
            p.events
        );
        assert!(events.contains("created") && events.contains("deleted"), "{events}");
        // What neither maps is the caller's.
        let (mut base, mut p) = (Base::default(), Parsed::default());
        assert_eq!(map_item(&mut base, &mut p, &json!({"type": "todo_list"}), true, &EXEC), Mapped::Other);
        assert_eq!(map_item(&mut base, &mut p, &json!({"type": "agentMessage"}), false, &APP_SERVER), Mapped::Other);
        assert!(p.events.is_empty());
    }
}

//! The wire half of MCP 2025-11-25's experimental tasks, which rmcp 3.x
//! does not model: it drops the `task` param of `tools/call` while parsing,
//! checks `tasks/get` and `tasks/cancel` against the 2026-07-28 extension,
//! and its types have no `tasks` server capability nor a tool's
//! `execution.taskSupport`. These pure functions rewrite the JSON-RPC
//! messages around rmcp so [`crate::legacy_tasks`] can serve that revision:
//! inbound, a request that does not declare 2026-07-28 in its `_meta` and is
//! a task-augmented `tools/call` (one with `params.task`) or a `tasks/get`,
//! `tasks/result`, `tasks/list` or `tasks/cancel` is renamed under
//! [`PREFIX`], which rmcp hands the server whole as a custom request;
//! outbound, the `initialize` result of a pre-2026 session gains
//! `capabilities.tasks` and a pre-2026 `tools/list` result marks
//! `caesar_delegate` as `taskSupport: "optional"`. A `subscriptions/listen`
//! naming `notifications.taskIds` (the 2026-07-28 extension's, a field
//! rmcp's filter does not know) is renamed to [`crate::task_listen::METHOD`].
//! The stdio server
//! ([`crate::cmd`]) and the daemon's HTTP endpoint both use them.

use serde_json::{Value, json};

/// The prefix a 2025-11-25 task request's method is renamed under.
pub const PREFIX: &str = "caesar/legacy/";

/// The 2025-11-25 task methods renamed (besides a task-augmented `tools/call`).
const TASK_METHODS: &[&str] = &["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"];

/// The first revision with the Tasks extension, where the legacy surface is gone.
const EXTENSION_REVISION: &str = "2026-07-28";

/// What an answer needs once it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patch {
    /// An `initialize` answer: add the legacy `tasks` capability when the
    /// negotiated revision predates the extension.
    Initialize,
    /// A `tools/list` answer of a legacy request: mark `caesar_delegate`.
    ToolsList,
}

/// Rewrites one inbound message (or batch) in place and returns the request
/// ids whose answers need a [`Patch`].
pub fn inbound(msg: &mut Value) -> Vec<(Value, Patch)> {
    let mut out = Vec::new();
    match msg {
        Value::Array(batch) => batch.iter_mut().for_each(|m| one_inbound(m, &mut out)),
        m => one_inbound(m, &mut out),
    }
    out
}

fn declares_extension_revision(params: &Value) -> bool {
    params
        .pointer("/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v >= EXTENSION_REVISION)
}

fn one_inbound(m: &mut Value, out: &mut Vec<(Value, Patch)>) {
    let Some(method) = m.get("method").and_then(Value::as_str).map(str::to_owned) else { return };
    let id = m.get("id").cloned();
    let modern = m.get("params").is_some_and(declares_extension_revision);
    // 2026-07-28 ignores `task` and answers its own tasks/*: only older requests are renamed.
    let rename = !modern
        && (TASK_METHODS.contains(&method.as_str()) || (method == "tools/call" && m.pointer("/params/task").is_some()));
    if rename {
        m["method"] = Value::String(format!("{PREFIX}{method}"));
        return;
    }
    // The Tasks extension's `taskIds`, which rmcp's listen filter drops.
    if method == "subscriptions/listen" && m.pointer("/params/notifications/taskIds").is_some() {
        m["method"] = Value::String(crate::task_listen::METHOD.to_owned());
        return;
    }
    let Some(id) = id else { return };
    match method.as_str() {
        "initialize" => out.push((id, Patch::Initialize)),
        "tools/list" if !modern => out.push((id, Patch::ToolsList)),
        _ => {}
    }
}

/// The legacy `tasks` server capability: tool calls may be task-augmented,
/// tasks may be listed and cancelled.
pub fn capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// Applies `patch` to an outbound answer.
pub fn outbound(msg: &mut Value, patch: Patch) {
    let Some(result) = msg.get_mut("result").and_then(Value::as_object_mut) else { return };
    match patch {
        Patch::Initialize => {
            let legacy = result.get("protocolVersion").and_then(Value::as_str).is_some_and(|v| v < EXTENSION_REVISION);
            if let (true, Some(caps)) = (legacy, result.get_mut("capabilities").and_then(Value::as_object_mut)) {
                caps.insert("tasks".to_owned(), capability());
            }
        }
        Patch::ToolsList => {
            let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else { return };
            for t in tools.iter_mut().filter(|t| t["name"] == crate::tools::DELEGATE) {
                t["execution"] = json!({"taskSupport": "optional"});
            }
        }
    }
}

/// Applies the patch registered for this answer's id, if any.
pub fn outbound_by_id(msg: &mut Value, pending: &mut Vec<(Value, Patch)>) {
    let apply = |m: &mut Value, pending: &mut Vec<(Value, Patch)>| {
        let Some(id) = m.get("id").filter(|_| m.get("method").is_none()).cloned() else { return };
        if let Some(i) = pending.iter().position(|(p, _)| *p == id) {
            let (_, patch) = pending.swap_remove(i);
            outbound(m, patch);
        }
    };
    match msg {
        Value::Array(batch) => batch.iter_mut().for_each(|m| apply(m, pending)),
        m => apply(m, pending),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod unit {
    use super::*;

    #[test]
    fn legacy_task_requests_are_renamed_and_modern_ones_left_alone() {
        let mut m = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "caesar_delegate", "arguments": {}, "task": {"ttl": 60000}}});
        assert!(inbound(&mut m).is_empty());
        assert_eq!(m["method"], "caesar/legacy/tools/call");
        assert_eq!(m["params"]["task"], json!({"ttl": 60000}));
        let mut get = json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"taskId": "t_1"}});
        inbound(&mut get);
        assert_eq!(get["method"], "caesar/legacy/tasks/get");
        let mut plain = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "x"}});
        inbound(&mut plain);
        assert_eq!(plain["method"], "tools/call");

        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        let mut modern = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "x", "task": {}, "_meta": meta}});
        inbound(&mut modern);
        assert_eq!(modern["method"], "tools/call");
        let mut modern_get = json!({"id": 7, "method": "tasks/get", "params": {"taskId": "t_1", "_meta": meta}});
        inbound(&mut modern_get);
        assert_eq!(modern_get["method"], "tasks/get");

        let mut listen = json!({"id": 8, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": ["t_1"]}, "_meta": meta}});
        inbound(&mut listen);
        assert_eq!(listen["method"], crate::task_listen::METHOD);
        let mut other = json!({"id": 9, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": meta}});
        inbound(&mut other);
        assert_eq!(other["method"], "subscriptions/listen", "rmcp's own categories stay rmcp's");
    }

    #[test]
    fn answers_get_the_capability_and_the_tool_marking_only_when_legacy() {
        let mut init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
        let mut pending = inbound(&mut init);
        let mut answer =
            json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
        outbound_by_id(&mut answer, &mut pending);
        assert_eq!(answer["result"]["capabilities"]["tasks"], capability());
        assert!(pending.is_empty());

        let mut newer =
            json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2026-07-28", "capabilities": {}}});
        outbound(&mut newer, Patch::Initialize);
        assert!(newer["result"]["capabilities"].get("tasks").is_none());

        let mut list = json!({"id": 2, "result": {"tools": [{"name": "caesar_delegate"}, {"name": "caesar_await"}]}});
        outbound(&mut list, Patch::ToolsList);
        assert_eq!(list["result"]["tools"][0]["execution"]["taskSupport"], "optional");
        assert!(list["result"]["tools"][1].get("execution").is_none());
    }
}

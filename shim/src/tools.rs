//! The tool catalog: names, descriptions, annotations and schemas, and the
//! scoping that `--tools` and `--profile` apply to it.

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;

use crate::output::*;
use crate::params::*;

/// `caesar_delegate`.
pub const DELEGATE: &str = "caesar_delegate";
/// `caesar_await`.
pub const AWAIT: &str = "caesar_await";
/// `caesar_status`.
pub const STATUS: &str = "caesar_status";
/// `caesar_logs`.
pub const LOGS: &str = "caesar_logs";
/// `caesar_cancel`.
pub const CANCEL: &str = "caesar_cancel";
/// `caesar_diff`.
pub const DIFF: &str = "caesar_diff";
/// `caesar_apply`.
pub const APPLY: &str = "caesar_apply";
/// `caesar_list_agents`.
pub const LIST_AGENTS: &str = "caesar_list_agents";
/// `caesar_list_roles`.
pub const LIST_ROLES: &str = "caesar_list_roles";
/// `caesar_answer`.
pub const ANSWER: &str = "caesar_answer";
/// `caesar_describe_agent`: one provider in detail (AgentNave's describe_provider).
pub const DESCRIBE_AGENT: &str = "caesar_describe_agent";
/// `caesar_steer` (issue 31).
pub const STEER: &str = "caesar_steer";

/// Every tool, in the order tools/list shows them.
pub const ALL: [&str; 12] =
    [DELEGATE, AWAIT, STATUS, LOGS, CANCEL, DIFF, APPLY, LIST_AGENTS, LIST_ROLES, ANSWER, DESCRIBE_AGENT, STEER];

/// The `readonly` profile: tools that change nothing.
pub const READONLY: [&str; 7] = [AWAIT, STATUS, LOGS, DIFF, LIST_AGENTS, LIST_ROLES, DESCRIBE_AGENT];

/// Which tools a server exposes, from `--profile` and `--tools`. `--tools`
/// narrows the profile. An unknown name is an error that lists the valid ones.
pub fn select(profile: &str, tools: Option<&str>) -> Result<Vec<&'static str>, String> {
    let base: Vec<&'static str> = match profile {
        "full" => ALL.to_vec(),
        "readonly" => READONLY.to_vec(),
        other => return Err(format!("unknown profile `{other}`: use full or readonly")),
    };
    let Some(list) = tools.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(base);
    };
    let mut wanted = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(known) = ALL.iter().find(|t| **t == name) else {
            return Err(format!("unknown tool `{name}` in --tools; valid tools: {}", ALL.join(", ")));
        };
        if !base.contains(known) {
            return Err(format!("tool `{name}` is not in the `{profile}` profile, which holds: {}", base.join(", ")));
        }
        if !wanted.contains(known) {
            wanted.push(*known);
        }
    }
    Ok(ALL.iter().copied().filter(|t| wanted.contains(t)).collect())
}

fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // The schemas are generated from types that are objects; an error here
    // is a bug caught by the tests, and the empty schema keeps serving.
    portable(schema_for_input::<T>().unwrap_or_else(|e| {
        tracing::error!("input schema: {e}");
        rmcp::handler::server::common::schema_for_empty_input()
    }))
}

/// A generated schema without the formats strict hosts complain about
/// (see [`crate::schema`]).
fn portable(schema: Arc<JsonObject>) -> Arc<JsonObject> {
    let mut value = serde_json::Value::Object(schema.as_ref().clone());
    crate::schema::make_portable(&mut value);
    match value {
        serde_json::Value::Object(obj) => Arc::new(obj),
        _ => schema,
    }
}

fn tool<I: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    annotations: ToolAnnotations,
) -> Tool {
    Tool::new(name, description, input::<I>())
        .with_title(title)
        .with_raw_output_schema(portable(schema_for_output::<O>()))
        .with_annotations(annotations)
}

fn read_only(title: &str) -> ToolAnnotations {
    ToolAnnotations::with_title(title).read_only(true).destructive(false).idempotent(true).open_world(false)
}

/// Every tool's definition, built once per process (issue 33: building the
/// schemas at each start was most of `caesar-mcp`'s cold start).
pub fn all() -> &'static [Tool] {
    static BUILT: std::sync::OnceLock<Vec<Tool>> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| ALL.iter().filter_map(|n| definition(n)).collect())
}

/// Starts building [`all`] on a thread of its own, so that the schemas are
/// ready by the time `tools/list` asks, while `initialize` is answered.
pub fn prewarm() {
    std::thread::spawn(|| {
        all();
    });
}

/// The definition of one tool, or `None` for an unknown name.
pub fn definition(name: &str) -> Option<Tool> {
    Some(match name {
        DELEGATE => tool::<DelegateParams, DelegateOutput>(
            DELEGATE,
            "Delegate to a sub-agent",
            "Start an objective on a sub-agent (codex, opencode, copilot, claude, or any configured agent) that runs as a separate CLI process, read-only or write, optionally on a disposable git worktree. Returns at once with a task_id and the resolved agent, mode, isolation, network, model and workspace, plus any *_warning; it does NOT wait for the sub-agent, which can take minutes. Call caesar_await with the task_id to get the result. To race several providers, call caesar_delegate back to back, then one caesar_await with every task_id. A policy refusal (policy_refused) or an unknown role or agent (not_found, validation_error) comes back as an error instead of a task_id.",
            ToolAnnotations::with_title("Delegate to a sub-agent")
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(true),
        ),
        AWAIT => tool::<AwaitParams, AwaitOutput>(
            AWAIT,
            "Await tasks",
            "Wait for one or more tasks started by caesar_delegate and return, per task_id: status, agent, role, and once done the normalized report (status, summary, changes, findings, questions, next_steps). Pass every task_id of a parallel batch in one call. Tasks still running when timeout_ms (default 30 s, at most 10 min) elapses come back with pending: true instead of a report. By default it returns early (woke_early: true) when a task asks a question (pending_questions; answer with caesar_answer) or hits a blocker, so you never wait on a task that waits on you; set wake_on_attention: false to wait regardless. Call it again with the same ids to keep waiting. It does not cancel anything and never returns logs or diffs (see caesar_logs, caesar_diff). With a progressToken it sends progress notifications while it waits.",
            read_only("Await tasks"),
        ),
        STATUS => tool::<TaskParams, StatusOutput>(
            STATUS,
            "Task status",
            "A cheap, non-blocking snapshot of one task: status (the process outcome: pending, running, succeeded, failed, cancelled, timed_out), agent, role, mode, isolation, timestamps, the last event recorded, and pending_questions the sub-agent is waiting on. Once a report exists, report_status (success, partial, failed, blocked) gives the sub-agent's own verdict: a task can exit 0 (status succeeded) with report_status failed, so check both; verdict weighs them for you (with the blocker, the verification and the questions waiting), e.g. `blocked: auth` for a task whose agent exited 0 after a 401. Use it to check on a long task without blocking. It never waits and never returns the full report (caesar_await does) or the event log (caesar_logs does).",
            read_only("Task status"),
        ),
        LOGS => tool::<LogsParams, LogsOutput>(
            LOGS,
            "Task logs",
            "An excerpt of a task's activity: the most recent normalized events (limit, default 50) with total_events, or with raw: true the sub-agent's raw CLI output, the most recent part by default. Use it to diagnose a task that failed, timed out or reported something surprising. Answers are capped: when truncated, the hint gives the start_char to continue reading raw output from. It does not wait for the task and does not return the report (caesar_await does).",
            read_only("Task logs"),
        ),
        CANCEL => tool::<TaskParams, CancelOutput>(
            CANCEL,
            "Cancel a task",
            "Cancel a running task: the sub-agent's process tree gets SIGTERM, then SIGKILL if it does not exit, and the call returns once it is gone, with cancelled and the final status. On a task that already finished it is a no-op (cancelled: false). It does not undo changes the agent already made, and does not delete the task or its report.",
            ToolAnnotations::with_title("Cancel a task")
                .read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
        ),
        DESCRIBE_AGENT => tool::<DescribeAgentParams, DescribeAgentOutput>(
            DESCRIBE_AGENT,
            "Describe an agent",
            "One agent in detail: whether it is installed and where, its version, capabilities, default model, whether the policy permits delegating to it now (and why not), and the options caesar_delegate accepts for it (mode, model, effort values, session resume). An option outside these is refused by caesar_delegate, never passed to the CLI. Use it before delegating with a model, an effort or a session_id. It starts nothing.",
            read_only("Describe an agent"),
        ),
        DIFF => tool::<DiffParams, DiffOutput>(
            DIFF,
            "Task diff",
            "The git diff of a task run with worktree isolation: the changed files and the unified patch. Use it after caesar_await reports a task done, to review what it did before caesar_apply, or to compare the diffs of several providers raced on one objective. is_empty: true with no patch for tasks that ran inplace or changed nothing. Long patches are cut: the hint gives the start_char to continue from. It changes nothing.",
            read_only("Task diff"),
        ),
        APPLY => tool::<TaskParams, ApplyOutput>(
            APPLY,
            "Apply a task's diff",
            "Apply a worktree task's diff to the main working tree (git apply --3way). Use it once you reviewed the result, typically with caesar_diff, and decided to keep it. It never commits and never touches branches; when the patch no longer applies cleanly it reports conflicts instead of applying part of it. A no-op (applied: true, no conflicts) for tasks that ran inplace or changed nothing.",
            ToolAnnotations::with_title("Apply a task's diff")
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(false),
        ),
        LIST_AGENTS => tool::<NoParams, ListAgentsOutput>(
            LIST_AGENTS,
            "List agents",
            "List every sub-agent provider caesar knows of: whether its CLI is installed here, its capabilities (native read-only mode, structured output, resumable sessions, model selection...), its default model, and whether policy allows delegating to it now. Call it before caesar_delegate when unsure which providers are usable, or to pick several to race. It does not start anything.",
            read_only("List agents"),
        ),
        LIST_ROLES => tool::<NoParams, ListRolesOutput>(
            LIST_ROLES,
            "List roles",
            "List the project's roles: purpose, default mode, isolation, network, timeout and model, and, resolved now against installed CLIs and policy, which agent caesar_delegate would pick for each, with the fallback chain and why earlier candidates were skipped. Use it to choose between delegating through a role or naming an agent. It does not start anything.",
            read_only("List roles"),
        ),
        ANSWER => tool::<AnswerParams, AnswerOutput>(
            ANSWER,
            "Answer a sub-agent",
            "Answer a question a running sub-agent asked through its ask_orchestrator tool, so it can go on. Find the question_id first in pending_questions of caesar_status or caesar_await: this tool does not list questions. A permission request (kind: permission, with its tool, whole input and option_details) is answered with one offered option id, then optionally `: reason`. An unknown task or question is not_found; a question already answered is a conflict.",
            ToolAnnotations::with_title("Answer a sub-agent")
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(false),
        ),
        STEER => tool::<SteerParams, SteerOutput>(
            STEER,
            "Steer a running sub-agent",
            "Tell a running (or still queued) sub-agent something without stopping it: a correction, a constraint, an answer it did not ask for. The steer is stored before this returns and reaches the agent exactly once, as its protocol allows: a user message on claude's stdin, turn/steer on codex's running turn, the next session/prompt of an ACP agent once its turn ends (route says which). With interrupt: true the running turn is ended first and the next one carries the steer. caesar_logs shows a `steer` event when the agent was given it. A task that has ended is refused (failed_precondition): continue it instead. An agent that runs one-shot cannot hear a steer and is refused by name; so is a steer over 64 KiB or a task with 100 steers waiting.",
            ToolAnnotations::with_title("Steer a running sub-agent")
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(false),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn profiles_and_tool_lists() {
        assert_eq!(select("full", None).unwrap().len(), ALL.len());
        assert_eq!(select("readonly", None).unwrap(), READONLY.to_vec());
        assert_eq!(select("full", Some("caesar_logs, caesar_status")).unwrap(), vec![STATUS, LOGS]);
        let e = select("full", Some("caesar_nope")).unwrap_err();
        assert!(e.contains("caesar_nope") && e.contains("caesar_delegate"));
        assert!(select("readonly", Some("caesar_cancel")).is_err());
        assert!(select("admin", None).is_err());
    }

    /// Every input and output schema is strict JSON Schema 2020-12: valid
    /// against the meta-schema, compilable by a validator that refuses
    /// unknown formats, and free of keywords 2020-12 does not define.
    #[test]
    fn every_schema_is_strict_2020_12() {
        for name in ALL {
            let t = definition(name).unwrap();
            let schemas = [
                ("input", serde_json::Value::Object(t.input_schema.as_ref().clone())),
                ("output", serde_json::Value::Object(t.output_schema.unwrap().as_ref().clone())),
            ];
            for (what, schema) in schemas {
                let text = schema.to_string();
                assert_eq!(crate::schema::problems(&schema), Vec::<String>::new(), "{name} {what}: {text}");
                assert!(!text.contains("\"definitions\""), "{name} {what}: $defs, not definitions");
                assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name} {what}");
                jsonschema::meta::validate(&schema).unwrap_or_else(|e| panic!("{name} {what}: {e}: {text}"));
                jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .should_validate_formats(true)
                    .should_ignore_unknown_formats(false)
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("{name} {what}: {e}: {text}"));
            }
        }
    }

    /// The rewrite changes no property name and no `required` list: the
    /// schemas are a public contract.
    #[test]
    fn portable_schemas_keep_the_contract() {
        fn shape(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
            if let Some(obj) = v.as_object() {
                if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
                    out.push(format!("{at} properties {:?}", props.keys().collect::<Vec<_>>()));
                }
                if let Some(req) = obj.get("required") {
                    out.push(format!("{at} required {req}"));
                }
                for (k, sub) in obj {
                    shape(sub, &format!("{at}/{k}"), out);
                }
            } else if let Some(list) = v.as_array() {
                for (i, sub) in list.iter().enumerate() {
                    shape(sub, &format!("{at}/{i}"), out);
                }
            }
        }
        for name in ALL {
            let t = definition(name).unwrap();
            let pairs = [
                (t.input_schema.as_ref().clone(), input_raw(name)),
                (t.output_schema.unwrap().as_ref().clone(), output_raw(name)),
            ];
            for (served, raw) in pairs {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                shape(&serde_json::Value::Object(served), "", &mut a);
                shape(&serde_json::Value::Object(raw.as_ref().clone()), "", &mut b);
                assert_eq!(a, b, "{name}");
            }
        }
    }

    /// The check is not vacuous: what schemars writes has the formats Gemini
    /// CLI and opencode complain about, and the validator refuses them.
    #[test]
    fn unrewritten_schemas_fail_the_strict_check() {
        let raw = serde_json::Value::Object(output_raw(AWAIT).as_ref().clone());
        let found = crate::schema::problems(&raw);
        assert!(found.iter().any(|p| p.contains("uint64")), "{found:?}");
        assert!(
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .should_validate_formats(true)
                .should_ignore_unknown_formats(false)
                .build(&raw)
                .is_err()
        );
    }

    fn input_raw(name: &str) -> Arc<JsonObject> {
        macro_rules! raw {
            ($($n:ident => $t:ty),*) => {
                match name { $($n => schema_for_input::<$t>().unwrap(),)* _ => unreachable!() }
            };
        }
        raw!(DELEGATE => DelegateParams, AWAIT => AwaitParams, STATUS => TaskParams, LOGS => LogsParams,
            CANCEL => TaskParams, DIFF => DiffParams, APPLY => TaskParams, LIST_AGENTS => NoParams,
            LIST_ROLES => NoParams, ANSWER => AnswerParams, DESCRIBE_AGENT => DescribeAgentParams,
            STEER => SteerParams)
    }

    fn output_raw(name: &str) -> Arc<JsonObject> {
        macro_rules! raw {
            ($($n:ident => $t:ty),*) => {
                match name { $($n => schema_for_output::<$t>(),)* _ => unreachable!() }
            };
        }
        raw!(DELEGATE => DelegateOutput, AWAIT => AwaitOutput, STATUS => StatusOutput, LOGS => LogsOutput,
            CANCEL => CancelOutput, DIFF => DiffOutput, APPLY => ApplyOutput, LIST_AGENTS => ListAgentsOutput,
            LIST_ROLES => ListRolesOutput, ANSWER => AnswerOutput, DESCRIBE_AGENT => DescribeAgentOutput,
            STEER => SteerOutput)
    }

    #[test]
    fn every_tool_has_object_schemas() {
        for name in ALL {
            let t = definition(name).unwrap();
            assert_eq!(t.input_schema.get("type").unwrap(), "object", "{name}");
            let out = t.output_schema.unwrap();
            assert_eq!(out.get("type").unwrap(), "object", "{name}");
        }
    }
}

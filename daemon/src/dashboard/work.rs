//! Starting and driving work from the dashboard (issue 30, item 7; issue 31's page parts):
//! start a task, retry one with another agent, continue a finished one in its worktree (with
//! line comments from the diff as its text), and steer a running one. Each is one engine call
//! behind the guard's checks (session, Origin, CSRF; or the full bearer token), and a refusal
//! comes back with the engine's own message.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Hub;
use super::api::{engine_error, json_response};
use super::auth::Session;
use crate::error::Error;
use crate::request::{DelegateInput, Host};

/// The most comments one continuation carries.
const MAX_COMMENTS: usize = 200;
/// The most lines of a hunk quoted with a comment.
const HUNK_LINES: usize = 12;

/// A line comment from the diff view.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(super) struct LineComment {
    pub file: String,
    pub line: u64,
    /// The lines of the diff around the commented line, as shown.
    pub hunk: String,
    pub comment: String,
}

/// The text of a continuation: what the person wrote, then each comment as `file:line`, the
/// hunk it is on (quoted, at most [`HUNK_LINES`] lines) and the comment.
pub(super) fn continuation_text(text: &str, comments: &[LineComment]) -> Result<String, Error> {
    if comments.len() > MAX_COMMENTS {
        return Err(Error::Invalid(format!(
            "{} comments is too many for one continuation (at most {MAX_COMMENTS}): send them in parts",
            comments.len()
        )));
    }
    let mut out = text.trim().to_owned();
    let comments: Vec<&LineComment> = comments.iter().filter(|c| !c.comment.trim().is_empty()).collect();
    if comments.is_empty() {
        if out.is_empty() {
            return Err(Error::Invalid(
                "the continuation is empty: write what the agent should do next, or comment on lines of the diff"
                    .to_owned(),
            ));
        }
        return Ok(out);
    }
    if out.is_empty() {
        out.push_str("Address these review comments on your changes.");
    }
    out.push_str("\n\nReview comments on the diff:\n");
    for c in comments {
        if c.file.trim().is_empty() || c.line == 0 {
            return Err(Error::Invalid(
                "a comment names no `file` and `line` (from 1): comment on a line of the diff".to_owned(),
            ));
        }
        out.push_str(&format!("\n{}:{}\n", c.file.trim(), c.line));
        let hunk: Vec<&str> = c.hunk.lines().collect();
        let from = hunk.len().saturating_sub(HUNK_LINES);
        if !hunk.is_empty() {
            out.push_str("```diff\n");
            for l in &hunk[from..] {
                out.push_str(l);
                out.push('\n');
            }
            out.push_str("```\n");
        }
        out.push_str(c.comment.trim());
        out.push('\n');
    }
    Ok(out)
}

fn body_json(body: &Bytes, shape: &str) -> Result<Value, Error> {
    serde_json::from_slice(body).map_err(|e| Error::Invalid(format!("the body is not JSON ({e}): send {shape}")))
}

fn text_field(v: &Value, name: &str) -> Option<String> {
    v.get(name).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// A person at the page is not Claude Code; a bearer-token script may be anything.
fn host_of(session: &Option<Extension<Session>>) -> Host {
    if session.is_some() { Host::Other } else { Host::Unknown }
}

async fn delegated(hub: &Hub, input: DelegateInput) -> Response {
    match hub.engine().delegate(input).await {
        Ok(d) => json_response(
            StatusCode::OK,
            &json!({ "task_id": d.record.id, "agent": d.record.agent, "worktree": d.worktree, "warnings": d.warnings }),
        ),
        Err(e) => engine_error(&e),
    }
}

/// `POST /api/tasks` with `{"objective", "agent"?, "role"?, "mode"?, "workspace"?}`: a new task.
pub(super) async fn start(State(hub): State<Arc<Hub>>, session: Option<Extension<Session>>, body: Bytes) -> Response {
    let v = match body_json(&body, "{\"objective\": \"…\", \"agent\": \"…\", \"mode\": \"read-only|write\"}") {
        Ok(v) => v,
        Err(e) => return engine_error(&e),
    };
    let Some(objective) = text_field(&v, "objective") else {
        return engine_error(&Error::Invalid("`objective` is empty: say what the agent should do".to_owned()));
    };
    let workspace = text_field(&v, "workspace").unwrap_or_else(|| hub.workspace());
    if workspace.is_empty() {
        return engine_error(&Error::Invalid(
            "`workspace` is missing: name the project directory (or open the dashboard with `caesar ui` from it)"
                .to_owned(),
        ));
    }
    let input = DelegateInput {
        objective,
        agent: text_field(&v, "agent"),
        role: text_field(&v, "role"),
        mode: text_field(&v, "mode"),
        workspace,
        host: host_of(&session),
        ..Default::default()
    };
    delegated(&hub, input).await
}

/// `POST /api/task/{id}/retry` with `{"agent"}`: what the task was asked (objective, context,
/// constraints, criteria, limits, mode, project…), again, with another agent (a new task; the
/// first one stays as it is).
pub(super) async fn retry(
    State(hub): State<Arc<Hub>>,
    session: Option<Extension<Session>>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    let v = match body_json(&body, "{\"agent\": \"…\"}") {
        Ok(v) => v,
        Err(e) => return engine_error(&e),
    };
    let Some(agent) = text_field(&v, "agent") else {
        return engine_error(&Error::Invalid("`agent` is missing: name the agent to retry with".to_owned()));
    };
    let input = match hub.engine().retry_input(&id, &agent, host_of(&session)) {
        Ok(i) => i,
        Err(e) => return engine_error(&e),
    };
    delegated(&hub, input).await
}

/// `POST /api/task/{id}/continue` with `{"text", "comments": [{file, line, hunk, comment}]}`:
/// a new task in the same worktree (issue 31), whose text carries the comments.
pub(super) async fn continue_task(
    State(hub): State<Arc<Hub>>,
    session: Option<Extension<Session>>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    let v = match body_json(&body, "{\"text\": \"…\", \"comments\": [{\"file\", \"line\", \"hunk\", \"comment\"}]}") {
        Ok(v) => v,
        Err(e) => return engine_error(&e),
    };
    let comments: Vec<LineComment> = match v.get("comments").cloned().map(serde_json::from_value).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            return engine_error(&Error::Invalid(format!(
                "`comments` is not a list of {{file, line, hunk, comment}}: {e}"
            )));
        }
    };
    let text = match continuation_text(&text_field(&v, "text").unwrap_or_default(), &comments) {
        Ok(t) => t,
        Err(e) => return engine_error(&e),
    };
    let input =
        DelegateInput { objective: text, continue_from: Some(id), host: host_of(&session), ..Default::default() };
    delegated(&hub, input).await
}

/// `POST /api/task/{id}/steer` with `{"text", "interrupt"?}`: a message to the running agent.
pub(super) async fn steer(State(hub): State<Arc<Hub>>, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    let v = match body_json(&body, "{\"text\": \"…\", \"interrupt\": false}") {
        Ok(v) => v,
        Err(e) => return engine_error(&e),
    };
    let text = v.get("text").and_then(Value::as_str).unwrap_or("");
    let interrupt = v.get("interrupt").and_then(Value::as_bool).unwrap_or(false);
    match hub.engine().channel().steer(&id, text, interrupt) {
        Ok(s) => json_response(StatusCode::OK, &json!({ "steer_id": s.steer_id, "interrupt": interrupt })),
        Err(e) => engine_error(&e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn comment(file: &str, line: u64, hunk: &str, text: &str) -> LineComment {
        LineComment { file: file.into(), line, hunk: hunk.into(), comment: text.into() }
    }

    #[test]
    fn each_comment_becomes_file_line_its_hunk_and_the_comment() {
        let c = [
            comment("src/a.rs", 12, "@@ -10,3 +10,3 @@\n-old\n+new", "name this better"),
            comment("b.txt", 1, "", "drop this file"),
            comment("c.txt", 3, "+x", "  "),
        ];
        let t = continuation_text("Please fix these.", &c).unwrap();
        assert_eq!(
            t,
            "Please fix these.\n\nReview comments on the diff:\n\nsrc/a.rs:12\n```diff\n@@ -10,3 +10,3 @@\n-old\n+new\n```\nname this better\n\nb.txt:1\ndrop this file\n"
        );
        let only = continuation_text("", &c[1..2]).unwrap();
        assert!(only.starts_with("Address these review comments"), "{only}");
    }

    #[test]
    fn a_long_hunk_keeps_its_last_lines_and_bad_comments_are_refused() {
        let hunk: Vec<String> = (0..30).map(|i| format!("+l{i}")).collect();
        let t = continuation_text("x", &[comment("f", 30, &hunk.join("\n"), "c")]).unwrap();
        assert!(t.contains("+l29") && t.contains("+l18") && !t.contains("+l17\n"), "{t}");
        let e = continuation_text("", &[]).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = continuation_text("x", &[comment("", 0, "", "c")]).unwrap_err().to_string();
        assert!(e.contains("`file` and `line`"), "{e}");
        let many = vec![comment("f", 1, "", "c"); MAX_COMMENTS + 1];
        assert!(continuation_text("x", &many).unwrap_err().to_string().contains("too many"));
    }
}

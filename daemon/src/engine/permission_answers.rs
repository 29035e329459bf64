//! What a pending question is (a question, or a permission with its tool, its whole input and
//! the options the agent offered), and how an answer picks one of those options (issue 15,
//! item 5). Kept apart from the bridge (`permissions.rs`) so that the same pure rules decide
//! what `caesar_status` shows, what `caesar_answer` accepts, and what a restarted daemon
//! delivers.

use crate::error::{Error, Result};
use crate::provider::PermissionAsk;
use crate::task_dir::TaskDir;

use super::permissions::{is_allow, is_permission_question};

/// Which kind of question a pending question is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionKind {
    /// Asked by the agent through `ask_orchestrator`.
    Question,
    /// A permission request of the agent's CLI (claude's `can_use_tool`, ACP's
    /// `session/request_permission`).
    Permission,
}

impl QuestionKind {
    /// `question` or `permission`, as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionKind::Question => "question",
            QuestionKind::Permission => "permission",
        }
    }
}

/// One answer the agent offers to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedOption {
    /// What `caesar_answer` takes (the agent's own id for ACP; `allow` / `deny` for claude).
    pub id: String,
    /// What the agent shows a person.
    pub label: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

/// What a caller sees of a pending question beyond its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionDetails {
    pub kind: QuestionKind,
    /// The tool a permission is asked for.
    pub tool: Option<String>,
    /// The protocol's kind of that tool (ACP: `execute`, `edit`, …), where it says.
    pub tool_kind: Option<String>,
    /// The tool's whole input, as JSON (for a shell command, the whole command).
    pub input_json: Option<String>,
    /// The options offered; empty for a plain question (its options are its text choices).
    pub options: Vec<OfferedOption>,
}

impl QuestionDetails {
    /// A question asked through `ask_orchestrator`.
    pub fn question() -> QuestionDetails {
        QuestionDetails { kind: QuestionKind::Question, tool: None, tool_kind: None, input_json: None, options: vec![] }
    }
}

/// The options of a permission request: the agent's own (ACP), or claude's allow / deny.
pub fn offered_options(ask: &PermissionAsk) -> Vec<OfferedOption> {
    if ask.options.is_empty() {
        return vec![
            OfferedOption { id: "allow".into(), label: "Allow".into(), kind: "allow_once".into() },
            OfferedOption { id: "deny".into(), label: "Deny".into(), kind: "reject_once".into() },
        ];
    }
    ask.options
        .iter()
        .map(|o| OfferedOption { id: o.id.clone(), label: o.name.clone(), kind: o.kind.clone() })
        .collect()
}

/// The details of permission request `ask`.
pub fn permission_details(ask: &PermissionAsk) -> QuestionDetails {
    QuestionDetails {
        kind: QuestionKind::Permission,
        tool: Some(ask.tool_name.clone()),
        tool_kind: ask.kind.clone(),
        input_json: Some(ask.input.to_string()),
        options: offered_options(ask),
    }
}

/// The option an answer picks, and the words the agent reads with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub option: OfferedOption,
    /// The answer's text after the option (a reason for a reject); may be empty.
    pub reason: String,
}

impl Choice {
    /// Whether the option allows the call.
    pub fn allow(&self) -> bool {
        self.option.kind.starts_with("allow")
    }

    /// Whether it holds for the rest of the session (`allow_always`, `reject_always`).
    pub fn for_session(&self) -> bool {
        self.option.kind.ends_with("always")
    }

    /// The answer as stored: the option's id, then the reason, so that a daemon that delivers it
    /// after a restart picks the same option.
    pub fn canonical(&self) -> String {
        if self.reason.is_empty() { self.option.id.clone() } else { format!("{}: {}", self.option.id, self.reason) }
    }
}

/// The option `answer` picks among those `ask` offers: an option's id or kind as its first word
/// (then, optionally, `:` and a reason), or the words caesar has always taken (`allow`,
/// `allow for session`, `deny …`, `yes`, …; any other text denies, the text being the reason).
/// An option that is not offered is refused naming the valid ones.
pub fn choose(ask: &PermissionAsk, answer: &str) -> std::result::Result<Choice, String> {
    let offered = offered_options(ask);
    let text = answer.trim();
    let (head, rest) = match text.find(|c: char| c == ':' || c.is_whitespace()) {
        Some(at) => (&text[..at], text[at..].trim_start_matches(|c: char| c == ':' || c.is_whitespace())),
        None => (text, ""),
    };
    let reason = rest.trim().to_owned();
    let lower = text.to_ascii_lowercase();
    let valid = || offered.iter().map(|o| format!("`{}` ({})", o.id, o.kind)).collect::<Vec<_>>().join(", ");
    // `allow for session` / `allow always`, caesar's words since the first bridge.
    if is_allow(text) && !head.contains('_') && (lower.contains("session") || lower.contains("always")) {
        return offered
            .iter()
            .find(|o| o.kind == "allow_always")
            .map(|o| Choice { option: o.clone(), reason: String::new() })
            .ok_or_else(|| format!("this agent offers no allow for the session; valid: {}", valid()));
    }
    if let Some(o) = offered.iter().find(|o| o.id == head).or_else(|| offered.iter().find(|o| o.kind == head)) {
        return Ok(Choice { option: o.clone(), reason });
    }
    // Something that names an option kind this request does not offer.
    if ["allow_once", "allow_always", "reject_once", "reject_always"].contains(&head) {
        return Err(format!("option `{head}` is not offered here; valid: {}", valid()));
    }
    let pick = |family: &str, always: bool| {
        let kind = format!("{family}_{}", if always { "always" } else { "once" });
        offered.iter().find(|o| o.kind == kind).or_else(|| offered.iter().find(|o| o.kind.starts_with(family))).cloned()
    };
    if is_allow(text) {
        return pick("allow", false)
            .map(|option| Choice { option, reason: String::new() })
            .ok_or_else(|| format!("this agent offers no allow option; valid: {}", valid()));
    }
    // Everything else denies; the whole text is the reason the agent reads.
    let reason =
        if head.eq_ignore_ascii_case("deny") || head.eq_ignore_ascii_case("reject") { reason } else { text.to_owned() };
    pick("reject", false)
        .map(|option| Choice { option, reason })
        .ok_or_else(|| format!("this agent offers no reject option; valid: {}", valid()))
}

/// The permission request kept for question `qid` of the task in `dir`
/// (where a daemon of before the move kept it, for a question it asked: no
/// question is stored before its request is kept in the daemon's part).
pub(super) fn read_ask(dir: &TaskDir, qid: &str) -> std::result::Result<PermissionAsk, String> {
    let kept = dir.permission_request(qid);
    let path = if kept.exists() { kept } else { dir.legacy_permission_request(qid) };
    crate::safe_fs::read_capped(&path, crate::safe_fs::REPORT_CAP)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|b| serde_json::from_slice::<PermissionAsk>(&b).map_err(|e| format!("{}: {e}", path.display())))
}

/// The details of question `qid` of the task in `dir`: a permission's from its kept request, a
/// plain question's from its id.
pub(super) fn details_of(dir: &TaskDir, qid: &str) -> QuestionDetails {
    if !is_permission_question(qid) {
        return QuestionDetails::question();
    }
    match read_ask(dir, qid) {
        Ok(ask) => permission_details(&ask),
        Err(_) => QuestionDetails { kind: QuestionKind::Permission, ..QuestionDetails::question() },
    }
}

/// The answer to store for permission question `qid`: the chosen option in canonical form, or
/// a refusal naming the valid options (nothing is stored then).
pub(super) fn checked_answer(dir: &TaskDir, task_id: &str, qid: &str, answer: &str) -> Result<String> {
    let ask = read_ask(dir, qid)
        .map_err(|e| Error::Internal(format!("the permission request of {qid} is unreadable: {e}")))?;
    choose(&ask, answer)
        .map(|c| c.canonical())
        .map_err(|e| Error::Invalid(format!("`answer` for {qid} of task {task_id}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::PermissionOption;
    use serde_json::json;

    fn claude_ask() -> PermissionAsk {
        PermissionAsk {
            request_id: "r1".into(),
            tool_name: "Bash".into(),
            input: json!({"command": "rm -rf build && make all 2>&1 | tee log"}),
            summary: "Bash".into(),
            kind: Some("execute".into()),
            options: vec![],
        }
    }

    fn acp_ask() -> PermissionAsk {
        let o =
            |id: &str, name: &str, kind: &str| PermissionOption { id: id.into(), name: name.into(), kind: kind.into() };
        PermissionAsk {
            options: vec![
                o("proceed_once", "Allow", "allow_once"),
                o("proceed_always", "Allow always", "allow_always"),
                o("cancel", "Reject", "reject_once"),
            ],
            ..claude_ask()
        }
    }

    #[test]
    fn a_permission_shows_its_tool_whole_input_and_options() {
        let d = permission_details(&claude_ask());
        assert_eq!(d.kind.as_str(), "permission");
        assert_eq!(d.tool.as_deref(), Some("Bash"));
        let input: serde_json::Value = serde_json::from_str(d.input_json.as_deref().unwrap()).unwrap();
        assert_eq!(input["command"], "rm -rf build && make all 2>&1 | tee log");
        let ids: Vec<_> = d.options.iter().map(|o| (o.id.as_str(), o.kind.as_str())).collect();
        assert_eq!(ids, [("allow", "allow_once"), ("deny", "reject_once")]);
        let acp = permission_details(&acp_ask());
        assert_eq!(acp.options[1].id, "proceed_always");
        assert_eq!(acp.options[1].label, "Allow always");
        assert_eq!(QuestionDetails::question().kind.as_str(), "question");
    }

    #[test]
    fn an_answer_picks_an_offered_option_by_id_or_kind_with_a_reason() {
        let ask = acp_ask();
        let c = choose(&ask, "proceed_always").unwrap();
        assert!(c.allow() && c.for_session());
        assert_eq!(c.canonical(), "proceed_always");
        let c = choose(&ask, "cancel: not on this branch").unwrap();
        assert!(!c.allow());
        assert_eq!(c.reason, "not on this branch");
        assert_eq!(c.canonical(), "cancel: not on this branch");
        // The canonical form picks the same option again (delivery after a restart).
        assert_eq!(choose(&ask, &c.canonical()).unwrap(), c);
        assert_eq!(choose(&ask, "allow_once").unwrap().option.id, "proceed_once");
        // The old words still work.
        assert_eq!(choose(&ask, "allow").unwrap().option.id, "proceed_once");
        assert_eq!(choose(&ask, "allow for session").unwrap().option.id, "proceed_always");
        let c = choose(&ask, "no, use the other file").unwrap();
        assert_eq!((c.option.id.as_str(), c.reason.as_str()), ("cancel", "no, use the other file"));
    }

    #[test]
    fn an_option_not_offered_is_refused_naming_the_valid_ones() {
        let err = choose(&acp_ask(), "reject_always: never").unwrap_err();
        assert!(
            err.contains("reject_always") && err.contains("`proceed_once` (allow_once)") && err.contains("`cancel`"),
            "{err}"
        );
        // claude offers no allow for the session.
        let err = choose(&claude_ask(), "allow for session").unwrap_err();
        assert!(err.contains("`allow` (allow_once), `deny` (reject_once)"), "{err}");
        let err = choose(&claude_ask(), "allow_always").unwrap_err();
        assert!(err.contains("not offered"), "{err}");
        let c = choose(&claude_ask(), "deny: use make -n first").unwrap();
        assert_eq!(c.canonical(), "deny: use make -n first");
        assert_eq!(choose(&claude_ask(), "allow").unwrap().canonical(), "allow");
    }
}

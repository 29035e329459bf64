//! OACP v1, the file contract between an orchestrator and an agent.
//!
//! Three JSON documents, each carrying its version in `protocol`:
//! `task.json` (`caesar.task/v1`), `report.json` (`caesar.report/v1`) and the
//! lines of `events.jsonl` (`caesar.event/v1`). These types are the engine's
//! own; the gRPC layer carries them as JSON text so that a document reaches a
//! client exactly as an agent or a reader of the task directory sees it.
//!
//! A reader refuses a document of an unknown protocol version instead of
//! guessing at it ([`Report::parse`]).

use serde::{Deserialize, Serialize};

/// The protocol number of OACP carried in `CAESAR_PROTOCOL_VERSION`.
pub const OACP_VERSION: &str = "1";
/// `protocol` of `task.json`.
pub const TASK_PROTOCOL: &str = "caesar.task/v1";
/// `protocol` of `report.json`.
pub const REPORT_PROTOCOL: &str = "caesar.report/v1";
/// `protocol` of each line of `events.jsonl`.
pub const EVENT_PROTOCOL: &str = "caesar.event/v1";

pub use caesar_proto::kinds::{Isolation, Mode};

/// `task.json`: the mission, the only input an OACP agent needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaskDoc {
    pub protocol: String,
    pub id: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub agent: String,
    pub objective: String,
    #[serde(default)]
    pub context: String,
    #[serde(default)]
    pub constraints: Vec<String>,
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    pub mode: Mode,
    pub isolation: Isolation,
    /// A result, not a request: `false` only when the network is known to be cut.
    #[serde(default = "default_true")]
    pub network: bool,
    pub workspace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ref: Option<String>,
    pub deadline_ms: u64,
    #[serde(default)]
    pub depth: u32,
    pub report_path: String,
    pub events_path: String,
    #[serde(default)]
    pub channel: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

fn default_true() -> bool {
    true
}

/// The agent's own verdict on its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReportStatus {
    Success,
    Partial,
    Failed,
    Blocked,
}

impl ReportStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportStatus::Success => "success",
            ReportStatus::Partial => "partial",
            ReportStatus::Failed => "failed",
            ReportStatus::Blocked => "blocked",
        }
    }
}

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    Created,
    Modified,
    Deleted,
    Renamed,
}

/// One changed file, as declared by the agent or found by git.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Change {
    pub path: String,
    pub action: ChangeAction,
    #[serde(default)]
    pub summary: String,
}

/// A command the agent ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommandRun {
    pub command: String,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub note: String,
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

/// Something the agent, or the orchestrator, wants the caller to know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    pub severity: Severity,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    #[serde(default)]
    pub detail: String,
}

/// A question the agent leaves for the caller in its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReportQuestion {
    pub id: String,
    pub question: String,
    #[serde(default)]
    pub options: Vec<String>,
}

/// A file the agent produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Artifact {
    pub path: String,
    #[serde(default)]
    pub description: String,
}

/// Tokens, cost and time spent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// `report.json`: only `protocol`, `status` and `summary` are required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Report {
    pub protocol: String,
    #[serde(default)]
    pub task_id: String,
    pub status: ReportStatus,
    pub summary: String,
    #[serde(default)]
    pub details: String,
    #[serde(default)]
    pub changes: Vec<Change>,
    #[serde(default)]
    pub commands_run: Vec<CommandRun>,
    #[serde(default)]
    pub findings: Vec<Finding>,
    #[serde(default)]
    pub questions: Vec<ReportQuestion>,
    #[serde(default)]
    pub next_steps: Vec<String>,
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// How far `changes` can be trusted: `git` when it was checked against the
    /// repository, `kernel` when a read-only task's box kept every write out
    /// of the repository (so it changed nothing), `declaration` when it is
    /// the agent's word. Set by caesar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_verified_by: Option<String>,
    /// The outcome of the task's `verify` commands, run by caesar in the
    /// task's workshop after the agent ended. Set by caesar only: not part of
    /// the schema agents answer in, and an agent's own value is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub verification: Option<Verification>,
    /// How the work's outcome was checked: `command` when caesar ran the
    /// verification commands. Set by caesar only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub verified_by: Option<String>,
}

/// One verification run: the first command that failed, else the last one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    /// The command, as configured (run with `sh -c`).
    pub command: String,
    /// Its exit code; `None` when it was killed (deadline, cancel) or could not start.
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
    /// The last lines of its output (stdout and stderr merged).
    pub tail: String,
    /// `passed`, `failed`, `timed_out`, `cancelled` or `error`.
    pub outcome: String,
    /// Every command run, in order, with its exit code and duration.
    #[serde(default)]
    pub commands: Vec<VerificationStep>,
}

/// One command of a verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerificationStep {
    pub command: String,
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DocError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("`protocol` is missing: a report must declare \"protocol\": \"{REPORT_PROTOCOL}\"")]
    MissingProtocol,
    #[error(
        "unknown protocol version `{0}`: this caesar reads only \"{REPORT_PROTOCOL}\"; write the report in that version"
    )]
    UnknownProtocol(String),
    #[error("invalid report: {0}")]
    Invalid(String),
}

impl Report {
    /// A minimal report built by the orchestrator itself.
    pub fn new(task_id: &str, status: ReportStatus, summary: impl Into<String>) -> Report {
        Report {
            protocol: REPORT_PROTOCOL.to_owned(),
            task_id: task_id.to_owned(),
            status,
            summary: summary.into(),
            details: String::new(),
            changes: Vec::new(),
            commands_run: Vec::new(),
            findings: Vec::new(),
            questions: Vec::new(),
            next_steps: Vec::new(),
            artifacts: Vec::new(),
            usage: None,
            changes_verified_by: None,
            verification: None,
            verified_by: None,
        }
    }

    /// Parses and validates a report. The protocol version is checked before
    /// anything else, so a report of another version is refused by name
    /// rather than by whichever field happens to differ.
    pub fn parse(text: &str) -> Result<Report, DocError> {
        Report::parse_reader(text.as_bytes())
    }

    /// Parses a report from a stream with its caps applied while reading
    /// (`capped_json`), so that a report of 300,000 entries or of 100 MB
    /// strings never becomes a huge value in memory: it becomes a capped
    /// report whose truncation finding says what was cut.
    pub fn parse_reader(input: impl std::io::Read) -> Result<Report, DocError> {
        let (value, cut) = crate::capped_json::read_value(input, REPORT_LIMITS).map_err(DocError::NotJson)?;
        Report::from_value_cut(value, cut)
    }

    /// Validates an already parsed JSON value as a report.
    pub fn from_value(value: serde_json::Value) -> Result<Report, DocError> {
        Report::from_value_cut(value, crate::capped_json::Cut::default())
    }

    /// [`Report::from_value`] of a value the parse already cut (`cut`), so
    /// that the truncation finding says what the parse cut too.
    pub fn from_value_cut(value: serde_json::Value, parsed: crate::capped_json::Cut) -> Result<Report, DocError> {
        match value.get("protocol") {
            None => return Err(DocError::MissingProtocol),
            Some(serde_json::Value::String(p)) if p == REPORT_PROTOCOL => {}
            Some(serde_json::Value::String(p)) => return Err(DocError::UnknownProtocol(p.clone())),
            Some(other) => return Err(DocError::UnknownProtocol(other.to_string())),
        }
        let mut report: Report = serde_json::from_value(value).map_err(|e| DocError::Invalid(e.to_string()))?;
        if report.summary.trim().is_empty() {
            return Err(DocError::Invalid("`summary` must not be empty".to_owned()));
        }
        report.cap(Capped::after_parse(parsed));
        Ok(report)
    }

    /// Holds the report to [`MAX_REPORT_ITEMS`] entries per list and
    /// [`MAX_REPORT_STRING`] bytes per string, so that what an agent hands in
    /// cannot grow the store, every listing and every waiter's answer without
    /// bound. What was cut is said in one finding titled [`TRUNCATED_TITLE`].
    /// A capped report is left as it is by a second `cap`.
    fn cap(&mut self, mut cut: Capped) {
        let Report {
            protocol: _,
            task_id,
            status: _,
            summary,
            details,
            changes,
            commands_run,
            findings,
            questions,
            next_steps,
            artifacts,
            usage: _,
            changes_verified_by,
            // Set by caesar, never kept from an agent (`engine/verify.rs`).
            verification: _,
            verified_by: _,
        } = self;
        for s in [task_id, summary, details] {
            cut.string(s);
        }
        if let Some(v) = changes_verified_by {
            cut.string(v);
        }
        cut.list("changes", changes, MAX_REPORT_ITEMS);
        for c in changes.iter_mut() {
            cut.string(&mut c.path);
            cut.string(&mut c.summary);
        }
        cut.list("commands_run", commands_run, MAX_REPORT_ITEMS);
        for c in commands_run.iter_mut() {
            cut.string(&mut c.command);
            cut.string(&mut c.note);
        }
        cut.list("questions", questions, MAX_REPORT_ITEMS);
        for q in questions.iter_mut() {
            cut.string(&mut q.id);
            cut.string(&mut q.question);
            cut.list("question options", &mut q.options, MAX_REPORT_ITEMS);
            q.options.iter_mut().for_each(|o| cut.string(o));
        }
        cut.list("next_steps", next_steps, MAX_REPORT_ITEMS);
        next_steps.iter_mut().for_each(|n| cut.string(n));
        cut.list("artifacts", artifacts, MAX_REPORT_ITEMS);
        for a in artifacts.iter_mut() {
            cut.string(&mut a.path);
            cut.string(&mut a.description);
        }
        for f in findings.iter_mut().take(MAX_REPORT_ITEMS) {
            cut.string(&mut f.title);
            cut.string(&mut f.detail);
            if let Some(file) = &mut f.file {
                cut.string(file);
            }
        }
        // Findings last, keeping one place for the note when anything was cut.
        let keep = if cut.any() || findings.len() > MAX_REPORT_ITEMS { MAX_REPORT_ITEMS - 1 } else { MAX_REPORT_ITEMS };
        cut.list("findings", findings, keep);
        if cut.any() {
            findings.push(Finding {
                severity: Severity::Low,
                title: TRUNCATED_TITLE.to_owned(),
                file: None,
                line: None,
                detail: cut.note(),
            });
        }
    }
}

/// The most entries a report keeps in each list (`changes`, `findings`, …).
pub const MAX_REPORT_ITEMS: usize = 1000;
/// The most bytes a report keeps in each string.
pub const MAX_REPORT_STRING: usize = 64 * 1024;
/// The title of the finding that says what of a report was cut.
pub const TRUNCATED_TITLE: &str = "report truncated by caesar";
/// What replaces the end of a string that was cut.
const CUT_MARK: &str = crate::capped_json::CUT_MARK;

/// The caps a report's text is read with: the lists and strings as
/// [`Report::cap`] keeps them, the whole copy to the report file's cap.
pub const REPORT_LIMITS: crate::capped_json::Limits = crate::capped_json::Limits {
    items: MAX_REPORT_ITEMS,
    string_bytes: MAX_REPORT_STRING,
    depth: 64,
    total: crate::safe_fs::REPORT_CAP as usize,
    first_value_only: false,
    always: &["protocol", "status", "summary", "task_id"],
};

/// What [`Report::cap`] cut, and what the parse cut before it.
#[derive(Default)]
struct Capped {
    /// Per list, how many entries it had and how many it kept.
    lists: Vec<(String, usize, usize)>,
    strings: usize,
    /// Fields the parse dropped past the total size.
    fields: usize,
    /// Lists the parse cut without naming them (`capped_json::Cut::other_lists`).
    other_lists: usize,
}

impl Capped {
    /// Starts from what the parse cut, its lists named as [`Capped::list`] names them.
    fn after_parse(parsed: crate::capped_json::Cut) -> Capped {
        let lists = parsed
            .lists
            .into_iter()
            .map(|(path, had, kept)| {
                (if path == "questions[].options" { "question options".to_owned() } else { path }, had, kept)
            })
            .collect();
        Capped { lists, strings: parsed.strings, fields: parsed.fields, other_lists: parsed.other_lists }
    }

    fn list<T>(&mut self, name: &'static str, v: &mut Vec<T>, keep: usize) {
        if v.len() > keep {
            // A list the parse cut already keeps the count it had.
            match self.lists.iter_mut().find(|(n, _, _)| n == name) {
                Some(seen) => seen.2 = keep,
                None => self.lists.push((name.to_owned(), v.len(), keep)),
            }
            v.truncate(keep);
        }
    }

    fn string(&mut self, s: &mut String) {
        if s.len() <= MAX_REPORT_STRING {
            return;
        }
        let mut end = MAX_REPORT_STRING - CUT_MARK.len();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str(CUT_MARK);
        self.strings += 1;
    }

    fn any(&self) -> bool {
        !self.lists.is_empty() || self.other_lists > 0 || self.strings > 0 || self.fields > 0
    }

    fn note(&self) -> String {
        let mut parts: Vec<String> = self
            .lists
            .iter()
            .map(|(name, had, kept)| format!("`{name}` had {had} entries, kept the first {kept}"))
            .collect();
        if self.other_lists > 0 {
            parts.push(format!("{} more list(s) were cut", self.other_lists));
        }
        if self.strings > 0 {
            parts.push(format!("{} string(s) longer than {MAX_REPORT_STRING} bytes were cut", self.strings));
        }
        if self.fields > 0 {
            parts.push(format!("{} field(s) past the report's total cap were dropped", self.fields));
        }
        format!("The report was larger than caesar keeps: {}.", parts.join("; "))
    }
}

/// The state of one tool call in a `tool_use` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Started,
    Succeeded,
    Failed,
}

/// A recognized execution blocker, as the engine carries it from the parser or driver that
/// saw it to the task's ending (fallback, parking, the report).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocker {
    pub kind: BlockerKind,
    /// What the agent or its provider said, cut to 500 characters.
    pub message: String,
    /// When a quota or rate limit lifts, milliseconds since the epoch, where the agent says
    /// (claude's `rate_limit_event`, codex's usage-limit error, a `Retry-After`).
    pub resets_at_ms: Option<i64>,
}

impl Blocker {
    /// A blocker that says nothing about when it lifts.
    pub fn new(kind: BlockerKind, message: impl Into<String>) -> Blocker {
        Blocker { kind, message: message.into(), resets_at_ms: None }
    }

    /// Its `blocker` event.
    pub fn event(&self) -> EventBody {
        EventBody::Blocker { kind: self.kind, message: self.message.clone(), resets_at_ms: self.resets_at_ms }
    }
}

/// What an execution blocker is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BlockerKind {
    /// Not logged in, 401, missing key.
    Auth,
    /// 429, usage limit, quota exceeded, credit balance.
    RateLimit,
    /// A denial, approval required, plan-mode refusal, tool not allowlisted.
    Permission,
    /// The agent did nothing but fail to reach its provider (DNS, refused
    /// connection, TLS, "waiting for network") for the network blocker's
    /// time (issue 17).
    Network,
    /// The task's own budget stopped it (issue 31). Set by caesar when it
    /// relays such a task, never taken from an agent's word.
    Budget,
}

impl BlockerKind {
    /// The stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockerKind::Auth => "auth",
            BlockerKind::RateLimit => "rate_limit",
            BlockerKind::Permission => "permission",
            BlockerKind::Network => "network",
            BlockerKind::Budget => "budget",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<BlockerKind> {
        match s {
            "auth" => Some(BlockerKind::Auth),
            "rate_limit" => Some(BlockerKind::RateLimit),
            "permission" => Some(BlockerKind::Permission),
            "network" => Some(BlockerKind::Network),
            "budget" => Some(BlockerKind::Budget),
            _ => None,
        }
    }
}

/// The body of one normalized event: the `type`-tagged part of a line of
/// `events.jsonl`. The envelope (`protocol`, `seq`, `at`, `task_id`) is added
/// by [`EventRecord`].
///
/// `usage`, `blocker`, `warning` and `unrecognized` extend OACP's ten types; readers of
/// the task directory that do not know them skip them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    Started {
        agent: String,
        #[serde(default)]
        command: String,
        /// The kernel protections the agent runs under (issue 19).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protections: Option<String>,
    },
    Thinking {
        text: String,
    },
    Message {
        text: String,
    },
    ToolUse {
        tool: String,
        #[serde(default)]
        input_summary: String,
        status: ToolStatus,
        #[serde(default)]
        id: String,
    },
    FileChanged {
        path: String,
        action: ChangeAction,
    },
    Progress {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pct: Option<f64>,
    },
    Question {
        id: String,
        question: String,
        #[serde(default)]
        options: Vec<String>,
    },
    Answer {
        id: String,
        answer: String,
    },
    Error {
        message: String,
        #[serde(default)]
        fatal: bool,
    },
    /// A CLI's own warning about itself (a missing helper it replaced, a
    /// model it has no metadata for): worth a look, never an error.
    Warning {
        message: String,
    },
    Finished {
        status: ReportStatus,
        #[serde(default)]
        summary: String,
        #[serde(default)]
        exit_code: Option<i64>,
    },
    Usage {
        #[serde(flatten)]
        usage: Usage,
    },
    Blocker {
        kind: BlockerKind,
        message: String,
        /// When the limit lifts (milliseconds since the epoch), where the agent said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resets_at_ms: Option<i64>,
    },
    Unrecognized {
        line: String,
    },
    /// A steer (issue 31) the agent was given (`delivered`, `mode` says how), or that the run
    /// ended without (`mode` says why).
    Steer {
        steer_id: i64,
        text: String,
        mode: String,
        delivered: bool,
        #[serde(default)]
        interrupt: bool,
    },
}

impl EventBody {
    /// The `type` field of this event.
    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::Started { .. } => "started",
            EventBody::Thinking { .. } => "thinking",
            EventBody::Message { .. } => "message",
            EventBody::ToolUse { .. } => "tool_use",
            EventBody::FileChanged { .. } => "file_changed",
            EventBody::Progress { .. } => "progress",
            EventBody::Question { .. } => "question",
            EventBody::Answer { .. } => "answer",
            EventBody::Error { .. } => "error",
            EventBody::Warning { .. } => "warning",
            EventBody::Finished { .. } => "finished",
            EventBody::Usage { .. } => "usage",
            EventBody::Blocker { .. } => "blocker",
            EventBody::Unrecognized { .. } => "unrecognized",
            EventBody::Steer { .. } => "steer",
        }
    }
}

/// One line of `events.jsonl`: the envelope plus the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EventRecord {
    pub protocol: String,
    pub seq: u64,
    pub at: String,
    pub task_id: String,
    #[serde(flatten)]
    pub body: EventBody,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_report_is_valid_and_defaults_the_rest() {
        let r = Report::parse(r#"{"protocol":"caesar.report/v1","status":"success","summary":"done"}"#).unwrap();
        assert_eq!(r.status, ReportStatus::Success);
        assert!(r.changes.is_empty());
        assert_eq!(r.task_id, "");
    }

    #[test]
    fn unknown_protocol_version_is_refused_by_name() {
        let err = Report::parse(r#"{"protocol":"caesar.report/v2","status":"success","summary":"x"}"#).unwrap_err();
        assert_eq!(err, DocError::UnknownProtocol("caesar.report/v2".into()));
        assert!(err.to_string().contains("caesar.report/v2"));
    }

    #[test]
    fn bad_status_and_empty_summary_are_refused() {
        assert!(matches!(
            Report::parse(r#"{"protocol":"caesar.report/v1","status":"great","summary":"x"}"#),
            Err(DocError::Invalid(_))
        ));
        assert!(matches!(
            Report::parse(r#"{"protocol":"caesar.report/v1","status":"failed","summary":"  "}"#),
            Err(DocError::Invalid(_))
        ));
        assert_eq!(Report::parse(r#"{"status":"failed","summary":"x"}"#), Err(DocError::MissingProtocol));
    }

    #[test]
    fn event_lines_round_trip_with_the_oacp_envelope() {
        let line = r#"{"protocol":"caesar.event/v1","seq":1,"at":"2026-01-01T00:00:00.000Z","task_id":"t_1","type":"tool_use","tool":"bash","id":"item_1","input_summary":"pnpm test","status":"started"}"#;
        let rec: EventRecord = serde_json::from_str(line).unwrap();
        assert_eq!(
            rec.body,
            EventBody::ToolUse {
                tool: "bash".into(),
                input_summary: "pnpm test".into(),
                status: ToolStatus::Started,
                id: "item_1".into()
            }
        );
        let back: serde_json::Value = serde_json::to_value(&rec).unwrap();
        assert_eq!(back["type"], "tool_use");
        assert_eq!(back["seq"], 1);
    }
}

/// The JSON Schema of an OACP document, generated from the very types the
/// daemon validates with: `task`, `report` or `event`. `strict` gives the
/// variant native structured outputs need: every property required and no
/// other property allowed, at every level.
pub fn schema(document: &str, strict: bool) -> Option<serde_json::Value> {
    let schema = match document {
        "task" => schemars::schema_for!(TaskDoc),
        "report" => schemars::schema_for!(Report),
        "event" => schemars::schema_for!(EventRecord),
        _ => return None,
    };
    let mut value = serde_json::to_value(schema).ok()?;
    if strict {
        make_strict(&mut value);
    }
    Some(value)
}

fn make_strict(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            // Structured-output validators reject formats such as uint64
            // (a keyword here, not a property of that name).
            if map.get("format").is_some_and(|f| f.is_string()) {
                map.remove("format");
            }
            if let Some(serde_json::Value::Object(props)) = map.get("properties") {
                let keys: Vec<serde_json::Value> = props.keys().map(|k| serde_json::Value::String(k.clone())).collect();
                map.insert("required".to_owned(), serde_json::Value::Array(keys));
                map.insert("additionalProperties".to_owned(), serde_json::Value::Bool(false));
            }
            for child in map.values_mut() {
                make_strict(child);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(make_strict),
        _ => {}
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    #[test]
    fn schemas_come_from_the_types_and_strict_requires_everything() {
        let report = schema("report", false).unwrap();
        assert_eq!(report["required"], serde_json::json!(["protocol", "status", "summary"]));
        assert!(report["properties"]["changes"].is_object());
        let strict = schema("report", true).unwrap();
        assert_eq!(strict["additionalProperties"], false);
        assert!(strict["required"].as_array().unwrap().iter().any(|k| k == "findings"));
        assert!(schema("event", false).is_some() && schema("task", true).is_some());
        assert!(schema("nope", false).is_none());
    }
}

//! Recovering an agent's report once it has exited.
//!
//! The tiers, best first (the first two arrive while the agent runs, through
//! the return channel and the provider's native structured output):
//!
//! 3. `file`: the agent wrote `$CAESAR_REPORT_PATH`.
//! 4. degraded: a fenced ```` ```json caesar:report ```` block in the output
//!    (`fenced`), else any JSON object declaring
//!    `"protocol":"caesar.report/v1"` (`embedded`), else a report synthesized
//!    from the outcome and the tail of the output (`synthesized`).
//!
//! A report that is present but invalid (bad JSON, unknown protocol version,
//! a missing field) is refused by name: the refusal becomes a finding of the
//! report that is used instead, so nobody mistakes it for silence.

use std::path::Path;

use crate::capped_json::Limits;
use crate::oacp::{DocError, Finding, REPORT_PROTOCOL, Report, ReportStatus, Severity};
use crate::safe_fs::{self, REPORT_CAP};

/// Where a report came from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Channel,
    Native,
    File,
    Fenced,
    Embedded,
    Synthesized,
}

impl Source {
    /// The name recorded as `report_source`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Channel => "channel",
            Source::Native => "native",
            Source::File => "file",
            Source::Fenced => "fenced",
            Source::Embedded => "embedded",
            Source::Synthesized => "synthesized",
        }
    }
}

/// How the process ended, as far as the report cares.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Exited(i64),
    Signalled(i32),
    TimedOut { after_ms: u64 },
    Cancelled,
    Blocked { kind: String, message: String },
    Failed(String),
}

/// Everything the recovery looks at.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub task_id: &'a str,
    pub report_path: &'a Path,
    /// The report kept from the return channel ([`crate::task_dir::TaskDir::channel_report`],
    /// in the daemon's part, which the agent cannot write).
    pub channel_path: &'a Path,
    /// Texts to search for a degraded report, most authoritative first
    /// (the agent's final answer, its messages, the raw output tail).
    pub texts: &'a [&'a str],
    pub ending: Ending,
    pub duration_ms: u64,
    /// The agent's final answer when the provider was asked for a report of
    /// the report schema (tier 2, native structured output).
    pub native: Option<&'a str>,
}

/// The file a report handed in over the return channel is kept in, in the
/// task's daemon part.
pub const CHANNEL_REPORT: &str = "report.channel.json";

/// Finds the best report available, never failing: the last tier always
/// produces one.
///
/// It reads and parses files the agent wrote (up to [`REPORT_CAP`] each):
/// blocking work, run in a [`crate::blocking::section`] when the daemon's
/// runtime is around (a debug build checks).
pub fn recover(inputs: &Inputs<'_>) -> (Report, Source) {
    crate::blocking::check_off_async_workers("recovering a report");
    recover_from(inputs, true)
}

/// The report of a task whose agent never ran (refused at its start, or
/// cancelled while pending): made from its ending, no file read, so it
/// needs no blocking section.
pub fn unstarted(task_id: &str, ending: Ending) -> (Report, Source) {
    let none = Path::new("");
    let inputs =
        Inputs { task_id, report_path: none, channel_path: none, texts: &[], ending, duration_ms: 0, native: None };
    recover_from(&inputs, false)
}

fn recover_from(inputs: &Inputs<'_>, read_files: bool) -> (Report, Source) {
    let mut refusals = Vec::new();
    // Tier 1: validated when it was submitted, so it parses.
    // Both report files are read without following links, never from a
    // FIFO, and only up to the cap (a task delegated before the move keeps
    // its channel report in the agent's directory).
    let mut found = read_files
        .then(|| safe_fs::read_to_string_capped(inputs.channel_path, REPORT_CAP).ok())
        .flatten()
        .and_then(|text| Report::parse(&text).ok())
        .map(|r| (r, Source::Channel));
    if found.is_none()
        && let Some(text) = inputs.native.map(str::trim).filter(|t| !t.is_empty())
    {
        match Report::parse(text) {
            Ok(r) => found = Some((r, Source::Native)),
            Err(e) => refusals.push(native_refusal(text, &e)),
        }
    }
    if found.is_none() && read_files {
        match open_report_file(inputs.report_path) {
            Ok(file) => match Report::parse_reader(file) {
                Ok(r) => found = Some((r, Source::File)),
                Err(e) => refusals.push(refusal(&format!("{} was refused", inputs.report_path.display()), &e)),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => refusals.push(Finding {
                severity: Severity::High,
                title: "the report file could not be read".to_owned(),
                file: Some(inputs.report_path.display().to_string()),
                line: None,
                detail: e.to_string(),
            }),
        }
    }
    if found.is_none() {
        found = find_fenced(inputs.texts, &mut refusals).map(|r| (r, Source::Fenced));
    }
    if found.is_none() {
        found = find_embedded(inputs.texts).map(|r| (r, Source::Embedded));
    }
    let (mut report, source) = found.unwrap_or_else(|| (synthesize(inputs), Source::Synthesized));
    if report.task_id.is_empty() {
        report.task_id = inputs.task_id.to_owned();
    }
    let usage = report.usage.get_or_insert_with(Default::default);
    usage.duration_ms.get_or_insert(inputs.duration_ms);
    // A blocker the orchestrator recognized outranks an agent's claim of
    // success: the run could not have done its work.
    if let Ending::Blocked { kind, message } = &inputs.ending
        && report.status != ReportStatus::Blocked
        && source != Source::Synthesized
    {
        report.status = ReportStatus::Blocked;
        report.findings.push(Finding {
            severity: Severity::High,
            title: format!("blocked: {kind}"),
            file: None,
            line: None,
            detail: message.clone(),
        });
    }
    report.findings.extend(refusals);
    (report, source)
}

/// The most bytes of a report file caesar reads. The file is streamed
/// through the report's caps (`capped_json`), so its size costs time, not
/// memory: a report of 300,000 entries or of 100 MB strings becomes a
/// capped report that says what was cut.
pub const REPORT_SCAN_CAP: u64 = 256 * 1024 * 1024;

/// Opens the agent's report file for a streaming read: never through a
/// link, never a FIFO or device, never past [`REPORT_SCAN_CAP`].
fn open_report_file(path: &Path) -> std::io::Result<std::io::Take<std::fs::File>> {
    use std::io::Read;
    let file = safe_fs::open_regular(path)?;
    let len = file.metadata()?.len();
    if len > REPORT_SCAN_CAP {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{} is larger than the cap of {REPORT_SCAN_CAP} bytes, so caesar does not read it", path.display()),
        ));
    }
    Ok(file.take(REPORT_SCAN_CAP))
}

/// Why the native structured answer gave no report. An answer in prose
/// (not even the start of a JSON object) is the agent's choice where the
/// structured report was offered, not a defect: a note. A JSON answer the
/// schema refused is a broken report: high.
fn native_refusal(text: &str, e: &DocError) -> Finding {
    if matches!(e, DocError::NotJson(_)) && !text.starts_with('{') {
        return Finding {
            severity: Severity::Info,
            title: "the agent answered in prose, not with the native structured report".to_owned(),
            file: None,
            line: None,
            detail: "the report was made from its answer instead".to_owned(),
        };
    }
    refusal("the native structured report was refused", e)
}

fn refusal(title: &str, e: &DocError) -> Finding {
    Finding { severity: Severity::High, title: title.to_owned(), file: None, line: None, detail: e.to_string() }
}

const FENCE: &str = "```json caesar:report";

/// The last fenced report block in the first text that has one.
fn find_fenced(texts: &[&str], refusals: &mut Vec<Finding>) -> Option<Report> {
    for text in texts {
        let Some(start) = text.rfind(FENCE) else {
            continue;
        };
        let body = &text[start + FENCE.len()..];
        let end = body.find("```").unwrap_or(body.len());
        match Report::parse(body[..end].trim()) {
            Ok(r) => return Some(r),
            Err(e) => {
                refusals.push(refusal("the fenced caesar:report block was refused", &e));
                return None;
            }
        }
    }
    None
}

/// The last JSON object declaring the report protocol, in the first text that
/// has a valid one.
fn find_embedded(texts: &[&str]) -> Option<Report> {
    for text in texts {
        let mut best = None;
        for (at, _) in text.match_indices(REPORT_PROTOCOL) {
            // Try the nearest opening braces before the marker, innermost first.
            let mut tries = 0;
            let mut end = at;
            while let Some(open) = text[..end].rfind('{') {
                tries += 1;
                if tries > 16 {
                    break;
                }
                // Read with the report's caps, up to the end of the first value.
                let limits = Limits { first_value_only: true, ..crate::oacp::REPORT_LIMITS };
                if let Ok((value, cut)) = crate::capped_json::read_value(&text.as_bytes()[open..], limits)
                    && value.get("protocol").and_then(|p| p.as_str()) == Some(REPORT_PROTOCOL)
                {
                    if let Ok(r) = Report::from_value_cut(value, cut) {
                        best = Some(r);
                    }
                    break;
                }
                end = open;
            }
        }
        if best.is_some() {
            return best;
        }
    }
    None
}

const SUMMARY_TAIL: usize = 1000;

fn synthesize(inputs: &Inputs<'_>) -> Report {
    let tail = inputs
        .texts
        .iter()
        .map(|t| t.trim())
        .find(|t| !t.is_empty())
        .map(|t| tail_chars(t, SUMMARY_TAIL))
        .unwrap_or_default();
    let (status, what) = match &inputs.ending {
        Ending::Exited(0) => (ReportStatus::Success, "The agent exited 0 without a structured report".to_owned()),
        Ending::Exited(code) => {
            (ReportStatus::Failed, format!("The agent exited with code {code} without a structured report"))
        }
        Ending::Signalled(sig) => (ReportStatus::Failed, format!("The agent was killed by signal {sig}")),
        Ending::TimedOut { after_ms } => {
            (ReportStatus::Failed, format!("The task timed out after {} s and was stopped", after_ms / 1000))
        }
        Ending::Cancelled => (ReportStatus::Failed, "The task was cancelled".to_owned()),
        Ending::Blocked { kind, message } => {
            (ReportStatus::Blocked, format!("The agent is blocked ({kind}): {message}"))
        }
        Ending::Failed(why) => (ReportStatus::Failed, why.clone()),
    };
    let summary = if tail.is_empty() { format!("{what}.") } else { format!("{what}. Its output ends with: {tail}") };
    let mut r = Report::new(inputs.task_id, status, summary);
    r.findings.push(Finding {
        severity: Severity::Info,
        title: "report synthesized by caesar".to_owned(),
        file: None,
        line: None,
        detail: "The agent handed in no report (no channel report, no report file, no fenced or embedded report), so this one was built from its exit and its output.".to_owned(),
    });
    r
}

/// The last `n` characters of `s`, on a character boundary.
pub fn tail_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n { s.to_owned() } else { s.chars().skip(count - n).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(dir: &'a Path, texts: &'a [&'a str], ending: Ending) -> Inputs<'a> {
        let channel_path = Path::new("/nonexistent/report.channel.json");
        Inputs { task_id: "t_1", report_path: dir, channel_path, texts, ending, duration_ms: 5, native: None }
    }

    #[test]
    fn the_report_file_wins_over_the_output() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.json");
        std::fs::write(&p, r#"{"protocol":"caesar.report/v1","status":"partial","summary":"from file"}"#).unwrap();
        let texts = [
            "```json caesar:report\n{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"fenced\"}\n```",
        ];
        let (r, s) = recover(&inputs(&p, &texts, Ending::Exited(0)));
        assert_eq!((s, r.summary.as_str(), r.status), (Source::File, "from file", ReportStatus::Partial));
        assert_eq!(r.task_id, "t_1");
        assert_eq!(r.usage.unwrap().duration_ms, Some(5));
    }

    #[test]
    fn an_unknown_protocol_in_the_file_is_refused_and_said() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.json");
        std::fs::write(&p, r#"{"protocol":"caesar.report/v9","status":"success","summary":"x"}"#).unwrap();
        let (r, s) = recover(&inputs(&p, &[], Ending::Exited(0)));
        assert_eq!(s, Source::Synthesized);
        assert!(r.findings.iter().any(|f| f.severity == Severity::High && f.detail.contains("caesar.report/v9")));
    }

    #[test]
    fn fenced_then_embedded_then_synthesized() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("none.json");
        let fenced = [
            "noise\n```json caesar:report\n{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"fenced\"}\n```\n",
        ];
        assert_eq!(recover(&inputs(&p, &fenced, Ending::Exited(0))).1, Source::Fenced);

        let embedded = [
            r#"log line {"type":"x"} then {"summary":"emb","status":"failed","protocol":"caesar.report/v1","details":"{not}"} trailing"#,
        ];
        let (r, s) = recover(&inputs(&p, &embedded, Ending::Exited(0)));
        assert_eq!((s, r.summary.as_str()), (Source::Embedded, "emb"));

        let (r, s) = recover(&inputs(&p, &["last words"], Ending::Exited(3)));
        assert_eq!((s, r.status), (Source::Synthesized, ReportStatus::Failed));
        assert!(r.summary.contains("code 3") && r.summary.contains("last words"), "{}", r.summary);

        let (r, _) = recover(&inputs(&p, &[], Ending::TimedOut { after_ms: 2000 }));
        assert!(r.summary.contains("timed out after 2 s"));
    }

    #[test]
    fn a_recognized_blocker_overrides_a_claimed_success() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("none.json");
        let texts = ["{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"all good\"}"];
        let ending = Ending::Blocked { kind: "auth".into(), message: "401".into() };
        let (r, _) = recover(&inputs(&p, &texts, ending));
        assert_eq!(r.status, ReportStatus::Blocked);
    }
}

#[cfg(test)]
mod native_tests {
    use super::*;

    #[test]
    fn a_native_report_beats_the_file_and_a_bad_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.json");
        std::fs::write(&p, r#"{"protocol":"caesar.report/v1","status":"partial","summary":"file"}"#).unwrap();
        let native = r#"{"protocol":"caesar.report/v1","status":"success","summary":"native"}"#;
        let c = d.path().join(CHANNEL_REPORT);
        let i = Inputs {
            task_id: "t",
            report_path: &p,
            channel_path: &c,
            texts: &[],
            ending: Ending::Exited(0),
            duration_ms: 1,
            native: Some(native),
        };
        let (r, s) = recover(&i);
        assert_eq!((s, r.summary.as_str()), (Source::Native, "native"));
        let i = Inputs { native: Some("not json"), ..i };
        let (r, s) = recover(&i);
        assert_eq!(s, Source::File);
        assert!(r.findings.iter().any(|f| f.title.contains("native")));
    }

    /// Issue 30: codex answering "Hello from fake." where the structured
    /// report was only offered is no `[high]` finding; a broken JSON report is.
    #[test]
    fn a_prose_answer_is_a_note_and_broken_json_stays_high() {
        let d = tempfile::tempdir().unwrap();
        let none = d.path().join("report.json");
        let c = d.path().join(CHANNEL_REPORT);
        let i = Inputs {
            task_id: "t",
            report_path: &none,
            channel_path: &c,
            texts: &["Hello from fake."],
            ending: Ending::Exited(0),
            duration_ms: 1,
            native: Some("Hello from fake."),
        };
        let (r, _) = recover(&i);
        let native: Vec<_> = r.findings.iter().filter(|f| f.title.contains("native")).collect();
        assert_eq!(native.len(), 1, "{:?}", r.findings);
        assert_eq!(native[0].severity, Severity::Info, "{:?}", native[0]);
        assert!(native[0].title.contains("prose"), "{:?}", native[0]);
        assert!(
            !r.findings.iter().any(|f| matches!(f.severity, Severity::High | Severity::Critical)),
            "{:?}",
            r.findings
        );

        let i = Inputs { native: Some(r#"{"protocol":"caesar.report/v1","status":"#), ..i };
        let (r, _) = recover(&i);
        let refused = r.findings.iter().find(|f| f.title == "the native structured report was refused");
        assert_eq!(refused.map(|f| f.severity), Some(Severity::High), "{:?}", r.findings);
    }
}

#[cfg(all(test, unix))]
mod hostile_file_tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn recover_in(dir: &Path) -> (Report, Source, Duration) {
        let p = dir.join("report.json");
        let texts = [
            "```json caesar:report\n{\"protocol\":\"caesar.report/v1\",\"status\":\"success\",\"summary\":\"fenced\"}\n```",
        ];
        let c = dir.join(CHANNEL_REPORT);
        let i = Inputs {
            task_id: "t",
            report_path: &p,
            channel_path: &c,
            texts: &texts,
            ending: Ending::Exited(0),
            duration_ms: 1,
            native: None,
        };
        let t = Instant::now();
        let (r, s) = recover(&i);
        (r, s, t.elapsed())
    }

    fn said(r: &Report, words: &str) -> bool {
        r.findings.iter().any(|f| f.severity == Severity::High && f.detail.contains(words))
    }

    #[test]
    fn a_report_made_a_fifo_neither_wedges_nor_is_lost() {
        let d = tempfile::tempdir().unwrap();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
        nix::unistd::mkfifo(&d.path().join("report.json"), mode).unwrap();
        nix::unistd::mkfifo(&d.path().join(CHANNEL_REPORT), mode).unwrap();
        let (r, s, took) = recover_in(d.path());
        assert!(took < Duration::from_secs(2), "recovery blocked for {took:?}");
        // The fenced report in the output is still found, and the refusal said.
        assert_eq!((s, r.summary.as_str()), (Source::Fenced, "fenced"));
        assert!(said(&r, "FIFO"), "{:?}", r.findings);
    }

    #[test]
    fn a_gigabyte_report_is_refused_by_its_cap_without_reading_it() {
        let d = tempfile::tempdir().unwrap();
        // Sparse: a gigabyte long, nothing on disk.
        std::fs::File::create(d.path().join("report.json")).unwrap().set_len(1 << 30).unwrap();
        let (r, s, _) = recover_in(d.path());
        assert_eq!(s, Source::Fenced);
        assert!(said(&r, &format!("cap of {REPORT_SCAN_CAP} bytes")), "{:?}", r.findings);
    }

    #[test]
    fn a_report_linked_to_dev_zero_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.path().join("report.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.path().join(CHANNEL_REPORT)).unwrap();
        let (r, s, _) = recover_in(d.path());
        assert_eq!(s, Source::Fenced);
        assert!(said(&r, "symbolic link"), "{:?}", r.findings);
    }
}

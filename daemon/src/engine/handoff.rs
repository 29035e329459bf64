//! The handoff brief (issue 31): what an agent taking over a half-done task
//! is told, built only from facts the daemon checked — never from the
//! stopped agent's word alone, which it may not have had time to give.
//!
//! A pure function over [`Facts`], so the relay on blockers, `fork` and the
//! review loop share one brief; what differs is the point the agent starts
//! from ([`Point`]: a stopped agent's worktree, or a fork's event). It says
//! the objective, the acceptance criteria, the
//! steers so far, the git-checked diff stat and commits since the base, the
//! verification results, the last events, and the previous agent's own
//! summary where it gave one. Every list is capped, so a huge task makes a
//! brief of bounded size.

use std::fmt::Write as _;

/// The most files, commits, steers and events a brief lists.
const MAX_FILES: usize = 200;
const MAX_COMMITS: usize = 50;
const MAX_STEERS: usize = 20;
const MAX_EVENTS: usize = 20;
/// The most characters of one event, steer or summary quoted.
const MAX_QUOTE: usize = 2000;

/// One file of the git-checked diff since the base.
#[derive(Debug, Clone, PartialEq)]
pub struct FileStat {
    pub path: String,
    /// `added`, `modified`, `deleted`, `renamed`, ...
    pub status: String,
    pub additions: u64,
    pub deletions: u64,
}

/// Where the agent taking over starts from.
#[derive(Debug, Clone, PartialEq)]
pub enum Point {
    /// A relay: the previous agent stopped, and the next one goes on in its
    /// worktree under the same task id. `why`: `rate_limit: You've hit your usage limit.`
    Stopped { why: String },
    /// A fork (issue 31, item 4): a new task in a new worktree holding the
    /// source's files as of its checkpoint at event `seq`; `asked` is the
    /// event the caller named (`None`: the source's latest state), `text`
    /// what the caller asks of the fork.
    Forked { seq: u64, asked: Option<u64>, text: String },
}

impl Default for Point {
    fn default() -> Point {
        Point::Stopped { why: String::new() }
    }
}

impl From<crate::workshop::FileChange> for FileStat {
    fn from(f: crate::workshop::FileChange) -> FileStat {
        FileStat { path: f.path, status: f.status, additions: f.additions, deletions: f.deletions }
    }
}

/// Everything a handoff brief says, gathered by the engine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The task the caller knows (the chain's first id), or the fork's source.
    pub task_id: String,
    pub previous_agent: String,
    /// Where the agent taking over starts from.
    pub point: Point,
    pub objective: String,
    pub acceptance_criteria: Vec<String>,
    /// What the caller told the running agent, oldest first.
    pub steers: Vec<String>,
    /// Where the work is (a relay's worktree; empty for a fork, whose worktree is its own).
    pub worktree: String,
    pub base_ref: Option<String>,
    pub branch: Option<String>,
    pub files: Vec<FileStat>,
    /// The agent's commits since the base, newest first (`<short sha> <subject>`).
    pub commits: Vec<String>,
    /// The verification's outcome, one line a command.
    pub verification: Vec<String>,
    /// The last events, oldest first, as OACP event lines.
    pub last_events: Vec<String>,
    /// The previous agent's own summary, where its report was its own.
    pub summary: Option<String>,
}

fn quote(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= MAX_QUOTE {
        return s.to_owned();
    }
    let cut: String = s.chars().take(MAX_QUOTE).collect();
    format!("{cut}… (cut)")
}

/// A list of at most `max` items, saying how many were left out.
fn list(out: &mut String, items: &[String], max: usize) {
    for item in items.iter().take(max) {
        let _ = writeln!(out, "- {}", quote(item).replace('\n', "\n  "));
    }
    if items.len() > max {
        let _ = writeln!(out, "- … and {} more", items.len() - max);
    }
}

/// The fork's point, in words.
fn fork_point(seq: u64, asked: Option<u64>) -> String {
    match (asked, seq) {
        (None, _) => "its latest state".to_owned(),
        (Some(_), 0) => "its base (no file had changed by then)".to_owned(),
        (Some(a), s) if a == s => format!("event {s}"),
        (Some(a), s) => format!("event {a} (the files as of its checkpoint at event {s})"),
    }
}

/// The brief's opening: who takes over what, from which point.
fn opening(out: &mut String, f: &Facts) {
    match &f.point {
        Point::Stopped { why } => {
            let _ = writeln!(
                out,
                "You take over task {} from agent `{}`, which was stopped ({}) before it finished. \
                 Its work is in this worktree ({}): continue from there; do not start over.",
                f.task_id,
                f.previous_agent,
                quote(why),
                f.worktree
            );
        }
        Point::Forked { seq, asked, .. } => {
            let _ = writeln!(
                out,
                "This task is a fork of caesar task {} (agent `{}`), taken at {}. Its worktree already holds the \
                 source's work at that point, as uncommitted changes over the base: go on from there. The source \
                 task is left as it is.",
                f.task_id,
                f.previous_agent,
                fork_point(*seq, *asked)
            );
        }
    }
}

/// The brief for the agent that takes over.
pub fn brief(f: &Facts) -> String {
    let mut out = String::new();
    opening(&mut out, f);
    let objective = if matches!(f.point, Point::Forked { .. }) { "The source task's objective" } else { "Objective" };
    let _ = writeln!(out, "\n## {objective}\n{}", quote(&f.objective));
    if !f.acceptance_criteria.is_empty() {
        out.push_str("\n## Acceptance criteria (open until you meet them)\n");
        list(&mut out, &f.acceptance_criteria, usize::MAX);
    }
    if !f.steers.is_empty() {
        out.push_str("\n## What the caller said while it ran\n");
        list(&mut out, &f.steers, MAX_STEERS);
    }
    let base = f.base_ref.as_deref().map(|b| b.chars().take(12).collect::<String>()).unwrap_or_default();
    let so_far = if matches!(f.point, Point::Forked { .. }) { "at that point" } else { "so far" };
    let _ = writeln!(out, "\n## Changes {so_far} (checked with git, since base {base})");
    if f.files.is_empty() {
        out.push_str("none\n");
    }
    for s in f.files.iter().take(MAX_FILES) {
        let _ = writeln!(out, "- {} {} (+{} -{})", s.status, s.path, s.additions, s.deletions);
    }
    if f.files.len() > MAX_FILES {
        let _ = writeln!(out, "- … and {} more files", f.files.len() - MAX_FILES);
    }
    let (adds, dels) = f.files.iter().fold((0, 0), |(a, d), s| (a + s.additions, d + s.deletions));
    let _ = writeln!(out, "{} files changed, {adds} insertions(+), {dels} deletions(-)", f.files.len());
    if !f.commits.is_empty() {
        let branch = f.branch.as_deref().map(|b| format!(" on {b}")).unwrap_or_default();
        let _ = writeln!(out, "\n## Commits since the base{branch}, newest first");
        list(&mut out, &f.commits, MAX_COMMITS);
    }
    if !f.verification.is_empty() {
        out.push_str("\n## Verification\n");
        list(&mut out, &f.verification, usize::MAX);
    }
    if let Some(summary) = f.summary.as_deref().filter(|s| !s.trim().is_empty()) {
        let _ = writeln!(out, "\n## The previous agent's own summary\n{}", quote(summary));
    }
    if !f.last_events.is_empty() {
        out.push_str("\n## Its last events, oldest first\n");
        let from = f.last_events.len().saturating_sub(MAX_EVENTS);
        list(&mut out, &f.last_events[from..], MAX_EVENTS);
    }
    if let Point::Forked { text, .. } = &f.point {
        let _ = writeln!(out, "\n## What the caller asks of this fork\n{}", quote(text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            task_id: "t_aaaaaaaaaaaa".to_owned(),
            previous_agent: "claude".to_owned(),
            point: Point::Stopped { why: "rate_limit: You've hit your usage limit.".to_owned() },
            objective: "add a parser".to_owned(),
            acceptance_criteria: vec!["cargo test passes".to_owned()],
            steers: vec!["use nom".to_owned()],
            worktree: "/repo/.caesar/wt/t_aaaaaaaaaaaa".to_owned(),
            base_ref: Some("0123456789abcdef".to_owned()),
            branch: Some("caesar/claude/add-a-parser".to_owned()),
            files: vec![
                FileStat { path: "src/a.rs".to_owned(), status: "added".to_owned(), additions: 10, deletions: 0 },
                FileStat { path: "README.md".to_owned(), status: "modified".to_owned(), additions: 2, deletions: 1 },
            ],
            commits: vec!["89abcde wip".to_owned()],
            verification: vec!["failed: cargo test (exit 101)".to_owned()],
            last_events: vec![r#"{"type":"blocker","kind":"rate_limit"}"#.to_owned()],
            summary: None,
        }
    }

    #[test]
    fn the_brief_holds_every_fact() {
        let b = brief(&facts());
        for part in [
            "You take over task t_aaaaaaaaaaaa from agent `claude`",
            "rate_limit: You've hit your usage limit.",
            "## Objective\nadd a parser",
            "## Acceptance criteria (open until you meet them)\n- cargo test passes",
            "- use nom",
            "since base 0123456789ab",
            "- added src/a.rs (+10 -0)",
            "- modified README.md (+2 -1)",
            "2 files changed, 12 insertions(+), 1 deletions(-)",
            "on caesar/claude/add-a-parser, newest first\n- 89abcde wip",
            "- failed: cargo test (exit 101)",
            r#"- {"type":"blocker","kind":"rate_limit"}"#,
        ] {
            assert!(b.contains(part), "missing {part:?} in:\n{b}");
        }
        assert!(!b.contains("own summary"), "no summary was given:\n{b}");
        let with = brief(&Facts { summary: Some("parser half done".to_owned()), ..facts() });
        assert!(with.contains("## The previous agent's own summary\nparser half done"), "{with}");
    }

    #[test]
    fn a_huge_task_makes_a_bounded_brief() {
        let file = FileStat { path: "f".repeat(100), status: "added".to_owned(), additions: 1, deletions: 0 };
        let f = Facts {
            files: vec![file; 10_000],
            commits: vec!["c".repeat(100); 10_000],
            last_events: vec!["e".repeat(1_000_000); 1_000],
            steers: vec!["s".repeat(10_000); 1_000],
            ..facts()
        };
        let b = brief(&f);
        assert!(b.len() < 200_000, "{} bytes", b.len());
        assert!(b.contains("… and 9800 more files") && b.contains("10000 files changed"), "the counts stay true");
    }

    #[test]
    fn a_fork_names_the_source_its_objective_the_point_and_the_text() {
        let file =
            |path: &str| FileStat { path: path.to_owned(), status: "added".to_owned(), additions: 1, deletions: 0 };
        let f = Facts {
            task_id: "t_1".to_owned(),
            previous_agent: "writer".to_owned(),
            point: Point::Forked { seq: 4, asked: Some(5), text: "stop after two and add a README".to_owned() },
            objective: "write three files".to_owned(),
            steers: vec!["use tabs".to_owned()],
            files: vec![file("a.txt"), file("b.txt")],
            ..Facts::default()
        };
        let b = brief(&f);
        for part in [
            "task t_1",
            "write three files",
            "event 5",
            "checkpoint at event 4",
            "- added a.txt (+1 -0)",
            "- use tabs",
            "## Changes at that point",
        ] {
            assert!(b.contains(part), "{part} missing from:\n{b}");
        }
        assert!(!b.contains("You take over"), "a fork is not a relay:\n{b}");
        assert!(b.trim_end().ends_with("stop after two and add a README"), "{b}");
        let point = Point::Forked { seq: 0, asked: Some(1), text: "x".to_owned() };
        let base = brief(&Facts { point, files: Vec::new(), ..f });
        assert!(base.contains("its base") && base.contains("no file had changed"), "{base}");
        assert!(base.contains("at that point (checked with git, since base )\nnone"), "{base}");
    }

    #[test]
    fn nothing_changed_says_so() {
        let b = brief(&Facts { files: Vec::new(), commits: Vec::new(), ..facts() });
        assert!(b.contains("since base 0123456789ab)\nnone\n0 files changed"), "{b}");
    }
}

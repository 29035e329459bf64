//! What the review loop tells its agents (issue 32, item 2), as pure
//! functions of checked facts: the reviewer's brief (the work, the diff, the
//! answer wanted as a `json caesar:review` block of findings anchored to
//! `file:line` and their hunk, and a verdict), and the worker's prompt of
//! the next round (each open finding with its place and hunk).

use crate::review::{FENCE, SEVERITIES};
use crate::store::FindingRow;

/// The most bytes of the diff a brief carries; past it, the reviewer reads
/// the rest with git.
pub const BRIEF_DIFF: usize = 32 * 1024;

/// The facts a reviewer's brief is made of.
#[derive(Debug, Clone)]
pub struct ReviewFacts<'a> {
    pub worker_task: &'a str,
    pub worker_agent: &'a str,
    /// The worker's objective (the first round's).
    pub objective: &'a str,
    pub acceptance_criteria: &'a [String],
    pub round: u32,
    pub rounds: u32,
    /// The commit the work started from.
    pub base: Option<&'a str>,
    /// The worktree's diff against it.
    pub patch: &'a str,
    /// The findings sent to the worker after the previous round.
    pub sent: &'a [FindingRow],
}

/// A reviewer's objective and context.
pub fn reviewer_brief(f: &ReviewFacts<'_>) -> (String, String) {
    let objective = format!(
        "Review the changes in this worktree (round {} of at most {}): they are agent `{}`'s work on task {}. \
         Read only; change nothing. End your answer with one {FENCE} block giving your verdict and findings.",
        f.round, f.rounds, f.worker_agent, f.worker_task
    );
    let mut c = String::new();
    c.push_str("## The work under review\n");
    c.push_str(&cut(f.objective, 4000));
    c.push('\n');
    if !f.acceptance_criteria.is_empty() {
        c.push_str("\n## Acceptance criteria\n");
        for a in f.acceptance_criteria {
            c.push_str(&format!("- {a}\n"));
        }
    }
    if !f.sent.is_empty() {
        c.push_str("\n## Findings of the previous round, sent to the worker (check each was addressed)\n");
        for x in f.sent {
            c.push_str(&format!("- {}:{} [{}] {}\n", x.file, x.line, x.severity, x.title));
        }
    }
    c.push_str("\n## The diff\n");
    let base = f.base.unwrap_or("HEAD");
    if f.patch.is_empty() {
        c.push_str("(no changes)\n");
    } else if f.patch.len() > BRIEF_DIFF {
        c.push_str(&format!(
            "The diff is {} bytes; its start is below, the whole of it is `git diff {base}` in this worktree.\n```diff\n{}\n```\n",
            f.patch.len(),
            cut(f.patch, BRIEF_DIFF)
        ));
    } else {
        c.push_str(&format!("(`git diff {base}` in this worktree)\n```diff\n{}```\n", f.patch));
    }
    c.push_str(&format!(
        "\n## Your answer\nEnd with exactly one block like this (JSON, no comments):\n\n{FENCE}\n\
         {{\"verdict\": \"changes\", \"findings\": [{{\"file\": \"src/lib.rs\", \"line\": 42, \
         \"hunk\": \"@@ -40,3 +40,4 @@\\n fn f() {{\\n+    g();\\n }}\", \"severity\": \"high\", \
         \"title\": \"one line\", \"detail\": \"why, and what to do\"}}]}}\n```\n\n\
         - `verdict`: \"approve\" when the work may be merged as it is, else \"changes\".\n\
         - Each finding: `file` relative to the worktree, `line` in the file as it is now, `hunk` the lines of the \
         diff above it concerns (copied exactly, with their +, - or space marks), `severity` one of {}, a `title` \
         and a `detail`.\n- At most {} findings, the most important first; no finding for a matter of taste.\n",
        SEVERITIES.join(", "),
        crate::review::MAX_FINDINGS
    ));
    (objective, c)
}

/// The worker's objective for the next round: each finding with its place and hunk.
pub fn worker_prompt(round: u32, reviewer: &str, findings: &[FindingRow]) -> String {
    let mut p = format!(
        "A reviewer (agent `{reviewer}`) read your changes in round {round} and asks for changes. Address each \
         finding below in this worktree, then end as before. If you think a finding is wrong, say why in your \
         report instead of changing the code.\n"
    );
    for (i, f) in findings.iter().enumerate() {
        p.push_str(&format!("\n### Finding {}: {}:{} [{}] {}\n", i + 1, f.file, f.line, f.severity, f.title));
        if !f.detail.trim().is_empty() {
            p.push_str(&cut(f.detail.trim(), 2000));
            p.push('\n');
        }
        if !f.hunk.trim().is_empty() {
            p.push_str(&format!("```diff\n{}\n```\n", cut(f.hunk.trim_end(), 2000)));
        }
    }
    p
}

/// At most `max` bytes of `s` (on a character boundary), with `…` where it was cut.
fn cut(s: &str, max: usize) -> String {
    let kept = crate::review::prefix(s, max);
    if kept.len() < s.len() { format!("{kept}…") } else { kept.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_text_ends_on_a_character_and_says_it_was_cut() {
        assert_eq!(cut("h\u{e9}llo", 2), "h\u{2026}", "the 2-byte \u{e9} is not split");
        assert_eq!(cut("hello", 5), "hello", "a text within its cap is whole, unmarked");
    }

    fn finding(file: &str, line: u64, hunk: &str) -> FindingRow {
        FindingRow {
            round: 1,
            reviewer_task_id: "t_r".to_owned(),
            idx: 0,
            file: file.to_owned(),
            line,
            hunk: hunk.to_owned(),
            severity: "high".to_owned(),
            title: "off by one".to_owned(),
            detail: "the loop stops early".to_owned(),
            state: "open".to_owned(),
        }
    }

    #[test]
    fn the_reviewer_is_asked_for_anchored_findings_and_a_verdict() {
        let criteria = ["tests pass".to_owned()];
        let sent = [finding("a.rs", 3, "+x")];
        let (objective, context) = reviewer_brief(&ReviewFacts {
            worker_task: "t_w",
            worker_agent: "claude",
            objective: "fix the parser",
            acceptance_criteria: &criteria,
            round: 2,
            rounds: 3,
            base: Some("abc123"),
            patch: "diff --git a/a.rs b/a.rs\n+x\n",
            sent: &sent,
        });
        assert!(objective.contains("round 2 of at most 3") && objective.contains("Read only"), "{objective}");
        for part in [
            "fix the parser",
            "- tests pass",
            "- a.rs:3 [high] off by one",
            "`git diff abc123`",
            "+x",
            FENCE,
            "\"approve\" when the work may be merged",
            "`line` in the file as it is now",
        ] {
            assert!(context.contains(part), "missing {part:?}:\n{context}");
        }
        // A long diff is cut and said to be.
        let big = "+y\n".repeat(BRIEF_DIFF);
        let (_, context) = reviewer_brief(&ReviewFacts {
            patch: &big,
            sent: &[],
            ..ReviewFacts {
                worker_task: "t_w",
                worker_agent: "a",
                objective: "o",
                acceptance_criteria: &[],
                round: 1,
                rounds: 1,
                base: None,
                patch: "",
                sent: &[],
            }
        });
        assert!(context.contains(&format!("The diff is {} bytes", big.len())), "cut");
        assert!(context.len() < BRIEF_DIFF + 4096);
    }

    #[test]
    fn the_worker_gets_every_finding_with_its_place_and_hunk() {
        let p = worker_prompt(1, "codex", &[finding("a.txt", 1, "@@ -0,0 +1 @@\n+a"), finding("b.txt", 7, "")]);
        assert!(p.contains("agent `codex`") && p.contains("round 1"), "{p}");
        assert!(
            p.contains(
                "### Finding 1: a.txt:1 [high] off by one\nthe loop stops early\n```diff\n@@ -0,0 +1 @@\n+a\n```"
            ),
            "{p}"
        );
        assert!(p.contains("### Finding 2: b.txt:7 [high] off by one"), "{p}");
    }
}

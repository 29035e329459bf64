//! The brief a fork's agent gets (issue 31, item 4), built from facts only:
//! which task it forks, that task's objective, the point it was forked
//! from and the files changed there, what the user steered the source
//! with, and the user's own words. A pure function: the daemon gathers the
//! facts, this says them.

/// What a fork's brief is built from.
#[derive(Debug, Clone, Default)]
pub(super) struct ForkFacts<'a> {
    pub source_id: &'a str,
    pub source_objective: &'a str,
    pub source_agent: &'a str,
    /// The event the worktree's files were taken at (0: the source's base).
    pub seq: u64,
    /// The seq asked for, when the caller named one.
    pub asked: Option<u64>,
    /// The files that differ from the base there, at most [`PATHS_SHOWN`].
    pub changed: &'a [String],
    /// How many files differ in all.
    pub changed_total: usize,
    /// The steers the source's agent was given, oldest first.
    pub steers: &'a [String],
    /// What the user asks of the fork.
    pub text: &'a str,
}

/// The most changed paths the brief names.
pub(super) const PATHS_SHOWN: usize = 50;

/// The context of the fork's delegation; its objective is the user's text.
pub(super) fn brief(f: &ForkFacts) -> String {
    let mut out = String::new();
    let point = match (f.asked, f.seq) {
        (None, _) => "its latest state".to_owned(),
        (Some(_), 0) => "its base (no file had changed by then)".to_owned(),
        (Some(a), s) if a == s => format!("event {s}"),
        (Some(a), s) => format!("event {a} (the files as of its checkpoint at event {s})"),
    };
    out.push_str(&format!(
        "This task is a fork of caesar task {} (agent {}), taken at {point}.\n",
        f.source_id, f.source_agent
    ));
    out.push_str(&format!("The source task's objective was:\n{}\n\n", f.source_objective.trim()));
    if f.changed_total == 0 {
        out.push_str("The worktree holds the source's base: no file had changed at that point.\n");
    } else {
        out.push_str(&format!(
            "The worktree already holds the source's work at that point, as uncommitted changes over the base \
             ({} file(s)):\n",
            f.changed_total
        ));
        for p in f.changed.iter().take(PATHS_SHOWN) {
            out.push_str(&format!("- {p}\n"));
        }
        if f.changed_total > f.changed.len().min(PATHS_SHOWN) {
            out.push_str(&format!("- … and {} more\n", f.changed_total - f.changed.len().min(PATHS_SHOWN)));
        }
    }
    if !f.steers.is_empty() {
        out.push_str("\nThe user told the source's agent while it ran:\n");
        for s in f.steers {
            out.push_str(&format!("- {}\n", s.trim()));
        }
    }
    out.push_str(&format!("\nWhat the user asks of this fork:\n{}\n", f.text.trim()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brief_names_the_source_its_objective_the_point_and_the_text() {
        let changed = vec!["a.txt".to_owned(), "b.txt".to_owned()];
        let steers = vec!["use tabs".to_owned()];
        let f = ForkFacts {
            source_id: "t_1",
            source_objective: "write three files",
            source_agent: "writer",
            seq: 4,
            asked: Some(5),
            changed: &changed,
            changed_total: 2,
            steers: &steers,
            text: "stop after two and add a README",
        };
        let b = brief(&f);
        for part in ["task t_1", "write three files", "event 5", "checkpoint at event 4", "- a.txt", "use tabs"] {
            assert!(b.contains(part), "{part} missing from:\n{b}");
        }
        assert!(b.trim_end().ends_with("stop after two and add a README"));
        let base = brief(&ForkFacts { seq: 0, asked: Some(1), text: "x", ..ForkFacts::default() });
        assert!(base.contains("its base") && base.contains("no file had changed"), "{base}");
    }
}

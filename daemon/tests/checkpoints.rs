//! Checkpoints (issue 31, fork from a point) against real repositories: a
//! worktree's states kept per event seq, the tree at a seq, the cap, a
//! fork's worktree seeded (and merged onto a moved HEAD), and their removal.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use caesard::config::{IsolationPref, WorktreeSection};
use caesard::oacp::Mode;
use caesard::workshop::{self, PrepareInput, Prepared, checkpoints};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    git(&root, &["init", "-q"]);
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "init"]);
    (tmp, root)
}

fn worktree(root: &Path, id: &str) -> Prepared {
    let cfg = WorktreeSection::default();
    workshop::prepare(&PrepareInput {
        workspace: root,
        task_id: id,
        label: "implementer",
        objective: "checkpoints",
        isolation: IsolationPref::Worktree,
        mode: Mode::Write,
        allow_inplace_write: false,
        config: &cfg,
        setup_timeout: None,
        cancel: None,
        own_git_dir: true,
        scratch: None,
        launcher: None,
        base: None,
        unwritable: &[],
    })
    .unwrap()
}

fn paths(p: &Prepared, at: Option<u64>) -> (Vec<String>, u64) {
    let (tree, seq) = checkpoints::tree_at(p, at).unwrap();
    (checkpoints::changed_files(p, tree).unwrap().into_iter().map(|f| f.path).collect(), seq)
}

#[test]
fn each_state_is_kept_at_its_seq_and_the_tree_at_a_seq_is_the_last_one_before() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_ck1");
    let wt = p.worktree.clone().unwrap();
    assert!(checkpoints::applies(&p));
    assert_eq!(checkpoints::record(&p, 3).unwrap(), None, "nothing changed yet: no checkpoint");
    std::fs::write(wt.join("one.txt"), "1").unwrap();
    assert_eq!(checkpoints::record(&p, 5).unwrap(), Some(5));
    assert_eq!(checkpoints::record(&p, 6).unwrap(), None, "the same tree again: not kept twice");
    std::fs::write(wt.join("two.txt"), "2").unwrap();
    assert_eq!(checkpoints::record(&p, 9).unwrap(), Some(9));
    std::fs::write(wt.join("three.txt"), "3").unwrap();

    assert_eq!(paths(&p, Some(4)), (vec![], 0), "before the first checkpoint: the base");
    assert_eq!(paths(&p, Some(5)), (vec!["one.txt".to_owned()], 5));
    assert_eq!(paths(&p, Some(8)), (vec!["one.txt".to_owned()], 5));
    assert_eq!(paths(&p, Some(9)).0, ["one.txt", "two.txt"]);
    assert_eq!(paths(&p, None).0, ["one.txt", "three.txt", "two.txt"], "no seq: the worktree now");
    let refs = git(&root, &["for-each-ref", "--format=%(refname)", "refs/caesar/tasks/t_ck1/at/"]);
    assert_eq!(refs.lines().collect::<Vec<_>>(), ["refs/caesar/tasks/t_ck1/at/5", "refs/caesar/tasks/t_ck1/at/9"]);

    // Removing the worktree removes its checkpoints.
    workshop::remove(&p, true).unwrap();
    assert_eq!(git(&root, &["for-each-ref", "refs/caesar/tasks/t_ck1/"]), "");
}

#[test]
fn past_the_cap_the_newest_replaces_the_one_before_it() {
    let (_t, root) = repo();
    let p = worktree(&root, "t_ck2");
    let wt = p.worktree.clone().unwrap();
    let total = checkpoints::CAP as u64 + 5;
    for seq in 1..=total {
        std::fs::write(wt.join("n.txt"), seq.to_string()).unwrap();
        assert_eq!(checkpoints::record(&p, seq).unwrap(), Some(seq));
    }
    let repo = git2::Repository::open(&root).unwrap();
    let kept: Vec<u64> = checkpoints::list(&repo, "t_ck2").into_iter().map(|(s, _)| s).collect();
    assert_eq!(kept.len(), checkpoints::CAP);
    assert_eq!(
        kept[..checkpoints::CAP - 1],
        (1..checkpoints::CAP as u64).collect::<Vec<_>>()[..],
        "the early ones stay"
    );
    assert_eq!(kept.last(), Some(&total), "the last one is current");
}

#[test]
fn a_fork_is_seeded_with_the_tree_and_merged_onto_a_moved_head() {
    let (_t, root) = repo();
    let src = worktree(&root, "t_ck3");
    let wt = src.worktree.clone().unwrap();
    std::fs::write(wt.join("new.txt"), "from the source\n").unwrap();
    checkpoints::record(&src, 2).unwrap();
    let (tree, _) = checkpoints::tree_at(&src, Some(2)).unwrap();

    // Same base: the fork's worktree holds the file, uncommitted.
    let fork = worktree(&root, "t_ck4");
    checkpoints::seed(&fork, src.base_ref.as_deref().unwrap(), &tree.to_string()).unwrap();
    let fwt = fork.worktree.clone().unwrap();
    assert_eq!(std::fs::read_to_string(fwt.join("new.txt")).unwrap(), "from the source\n");
    let d = workshop::diff(&fork).unwrap();
    assert_eq!(d.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["new.txt"]);

    // The user's HEAD moved since: the source's changes are merged onto the new base.
    std::fs::write(root.join("b.txt"), "later\n").unwrap();
    git(&root, &["add", "b.txt"]);
    git(&root, &["commit", "-q", "-m", "later"]);
    let moved = worktree(&root, "t_ck5");
    checkpoints::seed(&moved, src.base_ref.as_deref().unwrap(), &tree.to_string()).unwrap();
    let mwt = moved.worktree.clone().unwrap();
    assert!(mwt.join("new.txt").is_file() && mwt.join("b.txt").is_file(), "both the source's and HEAD's files");
    let d = workshop::diff(&moved).unwrap();
    assert_eq!(d.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["new.txt"]);
}

//! Measures the workshop on a repository of 10,000 files: worktree creation,
//! diff (clean and after an agent's edits), the inplace snapshot, apply and
//! removal.
//!
//! `cargo run --release -p caesard --example workshop_bench [FILES]`

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use caesard::config::{IsolationPref, WorktreeSection};
use caesard::oacp::Mode;
use caesard::workshop::{self, PrepareInput};

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("git")
        .args(["-c", "user.name=Bench", "-c", "user.email=bench@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .status()?;
    anyhow::ensure!(status.success(), "git {args:?} failed");
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:>8.1} ms", d.as_secs_f64() * 1000.0)
}

fn timed<T>(label: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let start = Instant::now();
    let out = f()?;
    println!("{label:<52} {}", ms(start.elapsed()));
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let files: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().canonicalize()?;
    let start = Instant::now();
    git(&root, &["init", "-q"])?;
    for i in 0..files {
        let dir = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let body: String = (0..20).map(|l| format!("file {i} line {l}\n")).collect();
        std::fs::write(dir.join(format!("f{i:05}.txt")), body)?;
    }
    git(&root, &["add", "-A"])?;
    git(&root, &["commit", "-q", "-m", "bench"])?;
    println!("repository of {files} files ready in {} (git CLI, not measured)", ms(start.elapsed()).trim());

    let cfg = WorktreeSection::default();
    let scratch = tempfile::tempdir()?;
    let input = |id: &'static str, mode| PrepareInput {
        workspace: &root,
        task_id: id,
        label: "bench",
        objective: "measure the workshop",
        isolation: IsolationPref::Auto,
        mode,
        allow_inplace_write: false,
        config: &cfg,
        setup_timeout: None,
        cancel: None,
        own_git_dir: true,
        scratch: Some(scratch.path()),
        launcher: None,
        base: None,
        unwritable: &[],
    };
    let p = timed("prepare: worktree creation (branch + checkout)", || {
        Ok(workshop::prepare(&input("t_00000000b001", Mode::Write))?)
    })?;
    let d = timed("diff: clean worktree (first snapshot)", || Ok(workshop::diff(&p)?))?;
    assert!(d.is_empty);
    timed("diff: clean worktree (again)", || Ok(workshop::diff(&p)?))?;
    for i in 0..10 {
        let f = p.workdir.join(format!("d{:03}/f{:05}.txt", i * 7, i * 700));
        std::fs::write(&f, format!("rewritten by the agent {i}\n"))?;
    }
    for i in 0..5 {
        std::fs::write(p.workdir.join(format!("new{i}.txt")), "new\n")?;
    }
    std::fs::remove_file(p.workdir.join("d099/f09999.txt")).ok();
    let d = timed("diff: after 10 edits, 5 new files, 1 deletion", || Ok(workshop::diff(&p)?))?;
    println!("{:<52} {:>8} files, {} bytes of patch", "  result", d.files.len(), d.patch.len());
    timed("has_unmerged_work (worktree + main snapshots)", || Ok(workshop::has_unmerged_work(&p)?))?;
    let r = timed("apply into the main working tree", || Ok(workshop::apply(&p)?))?;
    anyhow::ensure!(r.applied, "apply: {}", r.message);
    timed("apply again (already applied)", || Ok(workshop::apply(&p)?))?;
    timed("remove (worktree + branch)", || Ok(workshop::remove(&p, false)?))?;
    git(&root, &["checkout", "-q", "--", "."])?;
    git(&root, &["clean", "-q", "-fd"])?;
    let q = timed("prepare: inplace read-only (before snapshot)", || {
        Ok(workshop::prepare(&input("t_00000000b002", Mode::ReadOnly))?)
    })?;
    timed("diff: inplace, clean", || Ok(workshop::diff(&q)?))?;
    Ok(())
}

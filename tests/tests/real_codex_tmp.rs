//! The real codex in a write task (issue 19): its own workspace-write
//! sandbox would let the commands it runs write `/tmp`, and with it
//! caesar's directories when they lie beneath `/tmp` (as here); caesar
//! launches it with `sandbox_workspace_write.exclude_slash_tmp=true`. With
//! caesar's mount namespace off (so that codex's own sandbox alone answers)
//! and on, a command writing into caesar's state directory and into `/tmp` is
//! refused, while its worktree and its `$TMPDIR` (the task's own) stay
//! writable. The model is the scripted server of `caesar_tests::model_server`.

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;
#[path = "common/real_cli.rs"]
mod real_cli;

use caesar_tests::model_server::Reply;
use real_cli::{Captures, Cli, Rig, Setup};
use serde_json::json;

/// The four writes of a codex write task, with caesar's mount namespace on
/// or off.
async fn codex_writes(mount_ns: bool) {
    let command = r#"P=$(basename "$PWD"); for t in state:"$TMPDIR/../../../planted" tmp:"/tmp/codex-tmp-$P" own:"$TMPDIR/own" ws:"$PWD/inws.txt"; do n=${t%%:*}; f=${t#*:}; if echo x > "$f"; then echo "$n=written"; else echo "$n=refused"; fi; done; if test -e "$TMPDIR/../../../caesar.db"; then echo db=visible; else echo db=hidden; fi"#;
    let mut setup = Setup::new(90_000, 60_000, Captures::Providers);
    if !mount_ns {
        setup.env.push(("CAESAR_MOUNT_NS", "off".to_owned()));
    }
    let rig =
        Rig::launch(Cli::Codex, vec![Cli::Codex.shell(command), Reply::text("Tried the four writes.")], setup).await;
    assert!(rig.env.paths.state_dir.starts_with("/tmp"), "the point of this test");
    let id = rig.delegate("Try four writes.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.finish(&id).await;
    let seen = rig.server.model_requests().pop().unwrap().body_text();
    for (what, expected) in [("state", "refused"), ("tmp", "refused"), ("own", "written"), ("ws", "written")] {
        assert!(seen.contains(&format!("{what}={expected}")), "{what} {expected}: {t}\n{}", rig.debug(&id));
    }
    // Inside caesar's mount namespace the store is hidden from codex's commands too.
    let db = if mount_ns && caesard::sandbox::mount::works() { "db=hidden" } else { "db=visible" };
    assert!(seen.contains(db), "{db}: {}", rig.debug(&id));
    assert!(!rig.env.paths.state_dir.join("planted").exists());
    assert!(!std::path::Path::new(&format!("/tmp/codex-tmp-{id}")).exists());
    assert!(rig.task_dir(&id).join("tmp/own").exists());
    let diff = rig.ok("caesar_diff", json!({"task_id": id})).await;
    assert!(diff.to_string().contains("inws.txt"), "{diff}");
}

#[tokio::test]
async fn a_codex_write_task_writes_its_worktree_and_tmpdir_but_not_tmp_nor_caesars_state() {
    codex_writes(false).await;
}

/// codex's own sandbox (bubblewrap) still runs its commands inside caesar's
/// mount namespace: the same writes, the same answers.
#[tokio::test]
async fn codex_runs_its_commands_inside_caesars_mount_namespace_too() {
    codex_writes(true).await;
}

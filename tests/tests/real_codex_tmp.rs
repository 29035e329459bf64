//! The real codex in a write task (issue 19): its own workspace-write
//! sandbox would let the commands it runs write `/tmp`, and with it
//! caesar's directories when they lie beneath `/tmp` (as here); caesar
//! launches it with `sandbox_workspace_write.exclude_slash_tmp=true`. With
//! caesar's mount namespace off (so that codex's own sandbox alone answers),
//! a command writing into caesar's state directory and into `/tmp` is
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

#[tokio::test]
async fn a_codex_write_task_writes_its_worktree_and_tmpdir_but_not_tmp_nor_caesars_state() {
    let command = r#"P=$(basename "$PWD"); for t in state:"$TMPDIR/../../../planted" tmp:"/tmp/codex-tmp-$P" own:"$TMPDIR/own" ws:"$PWD/inws.txt"; do n=${t%%:*}; f=${t#*:}; if echo x > "$f"; then echo "$n=written"; else echo "$n=refused"; fi; done"#;
    let mut setup = Setup::new(90_000, 60_000, Captures::Providers);
    setup.env.push(("CAESAR_MOUNT_NS", "off".to_owned()));
    let rig =
        Rig::launch(Cli::Codex, vec![Cli::Codex.shell(command), Reply::text("Tried the four writes.")], setup).await;
    assert!(rig.env.paths.state_dir.starts_with("/tmp"), "the point of this test");
    let id = rig.delegate("Try four writes.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.finish(&id).await;
    let seen = rig.server.model_requests().pop().unwrap().body_text();
    for (what, expected) in [("state", "refused"), ("tmp", "refused"), ("own", "written"), ("ws", "written")] {
        assert!(seen.contains(&format!("{what}={expected}")), "{what} {expected}: {t}\n{}", rig.debug(&id));
    }
    assert!(!rig.env.paths.state_dir.join("planted").exists());
    assert!(!std::path::Path::new(&format!("/tmp/codex-tmp-{id}")).exists());
    assert!(rig.task_dir(&id).join("tmp/own").exists());
    let diff = rig.ok("caesar_diff", json!({"task_id": id})).await;
    assert!(diff.to_string().contains("inws.txt"), "{diff}");
}

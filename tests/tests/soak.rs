//! caesar-soak in small: 20 tasks (quick, slow, some asking the orchestrator
//! a question through the return channel, a third writing in worktrees, half
//! of those after a setup) while the daemon is SIGKILLed and restarted 3
//! times. Nothing may be lost: every task ends
//! with its report, its agent ran once, its events are gapless, every
//! question has its one answer and the agent got it, every worktree task
//! has exactly its one worktree and branch, no process is left.
//! The binary does the work and the audit (see its doc); a fixed seed keeps
//! the schedule of kinds, pauses and kills the same from run to run.

use std::process::Command;

#[test]
fn twenty_tasks_survive_three_daemon_sigkills() {
    let out = Command::new(env!("CARGO_BIN_EXE_caesar-soak"))
        .args(["--tasks", "20", "--kills", "3", "--seed", "20"])
        .output()
        .expect("run caesar-soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "caesar-soak found a loss:\n{stdout}{stderr}");
    assert!(
        stdout.contains("tasks 20 (7 quick, 3 slow, 4 asking, 6 in worktrees of which 3 after a setup), kills 3 ("),
        "the soak ran in full: {stdout}"
    );
    assert!(stdout.contains("questions 4 (answered 4)"), "{stdout}");
    assert!(stdout.contains("ok, nothing lost"), "{stdout}");
}

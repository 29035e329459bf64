//! Verification in the worktree (issue 17): "git decides, not the agent"
//! extended to "the tests decide". A task's `verify` commands (its role's
//! `verify`, or the delegation's) run after the agent ended, in the task's
//! workshop, each in a process group of its own under the task's deadline,
//! killed with its descendants on cancel or at the deadline. The outcome is
//! stored in the daemon's own table before the task concludes, so a daemon
//! killed meanwhile re-runs it (after killing what the earlier one left), and
//! an agent cannot forge it through the task directory.
//!
//! The design beside its neighbours: `docs/design/orchestration.md`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::oacp::{Finding, Report, ReportStatus, Severity, Verification, VerificationStep};

use super::*;

/// The environment variable that marks a task's verification processes, so
/// that a restarted daemon finds (and kills) what an earlier one left.
pub const VERIFY_MARKER: &str = "CAESAR_VERIFY_OF";
/// The most verification commands one task may have.
pub const MAX_VERIFY_COMMANDS: usize = 16;
/// The longest one verification command may be, in bytes.
pub const MAX_VERIFY_COMMAND_LEN: usize = 4096;
/// How much of a command's output is kept as its tail.
const TAIL_BYTES: usize = 4000;
/// How often a running verification looks for a cancel.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Words `sh` runs itself: a command starting with one needs no executable.
const SHELL_WORDS: &[&str] = &[
    "cd", "export", "set", "unset", "test", "[", "true", "false", "exit", ".", "command", "exec", "if", "for", "while",
    "case", "!", "{", "(", "echo", "printf", "read", "eval", "trap", "umask", "wait", ":",
];

/// The verification commands of a delegation: the delegation's own, else its
/// role's. Each is checked before anything is written: not empty, not too
/// long, and its program exists (a shell word, an executable on the daemon's
/// PATH, or a path, relative ones against the workspace).
pub fn resolve_verify(
    config: &Config,
    role: Option<&str>,
    requested: &[String],
    workspace: &Path,
) -> Result<Vec<String>> {
    let (commands, field) = if !requested.is_empty() {
        (requested.to_vec(), "verify".to_owned())
    } else {
        match role.and_then(|r| config.role_verify.get(r).map(|v| (r, v))) {
            Some((r, v)) => (v.clone(), format!("verify of role `{r}`")),
            None => return Ok(Vec::new()),
        }
    };
    if commands.len() > MAX_VERIFY_COMMANDS {
        return Err(Error::Invalid(format!(
            "`{field}` has {} commands, over the limit of {MAX_VERIFY_COMMANDS}: join them with `&&`",
            commands.len()
        )));
    }
    for command in &commands {
        check_command(command, workspace).map_err(|why| Error::Invalid(format!("`{field}`: {why}")))?;
    }
    Ok(commands)
}

fn check_command(command: &str, workspace: &Path) -> std::result::Result<(), String> {
    if command.trim().is_empty() {
        return Err("holds an empty command: remove it or say what to run".to_owned());
    }
    if command.len() > MAX_VERIFY_COMMAND_LEN {
        return Err(format!("a command is over {MAX_VERIFY_COMMAND_LEN} bytes: put it in a script"));
    }
    // The program is the first word after `NAME=value` assignments.
    let Some(program) = command.split_whitespace().find(|w| !is_assignment(w)) else {
        return Err(format!("command `{command}` only sets variables: name a program to run"));
    };
    let program = program.trim_matches(|c| c == '"' || c == '\'');
    if SHELL_WORDS.contains(&program) {
        return Ok(());
    }
    let found = if program.contains('/') {
        let p = Path::new(program);
        let p = if p.is_absolute() { p.to_path_buf() } else { workspace.join(p) };
        p.is_file()
    } else {
        crate::agents::resolve_bin(program).is_some()
    };
    if found {
        Ok(())
    } else {
        Err(format!(
            "command `{command}`: program `{program}` does not exist (not on the daemon's PATH, not a shell builtin, \
             nor a file relative to the workspace): install it, give its path, or fix the command"
        ))
    }
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// Kills every process carrying the task's [`VERIFY_MARKER`] (Linux), with
/// its group. Returns how many were found.
pub fn kill_verifications_of(task_id: &str) -> usize {
    crate::marked::kill_marked(VERIFY_MARKER, task_id)
}

/// Applies a verification to the report: the outcome, `verified_by`, and
/// for a failure of work the agent called a success, the verdict and a high
/// finding. An agent's own `verification` is never kept.
pub fn apply_to_report(report: &mut Report, verification: Option<Verification>) {
    report.verification = None;
    report.verified_by = None;
    let Some(v) = verification else { return };
    if v.outcome != "passed" && report.status == ReportStatus::Success {
        report.status = ReportStatus::Failed;
        report.summary = format!(
            "verification failed: `{}` exited {} although the agent reported success. The agent said: {}",
            v.command,
            v.exit_code.map(|c| c.to_string()).unwrap_or_else(|| v.outcome.clone()),
            report.summary
        );
        report.findings.push(Finding {
            severity: Severity::High,
            title: "the agent reported success but verification failed".to_owned(),
            file: None,
            line: None,
            detail: format!(
                "`{}` ({}, exit {}) after {} ms; last output:\n{}",
                v.command,
                v.outcome,
                v.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "none".to_owned()),
                v.duration_ms,
                v.tail
            ),
        });
    } else if v.outcome != "passed" {
        report.findings.push(Finding {
            severity: Severity::Medium,
            title: format!("verification {}", v.outcome),
            file: None,
            line: None,
            detail: format!("`{}` exit {:?} after {} ms", v.command, v.exit_code, v.duration_ms),
        });
    }
    report.verified_by = Some("command".to_owned());
    report.verification = Some(v);
}

impl Engine {
    /// Runs the task's verification if it has one and it has not run yet,
    /// and stores its outcome. Called after the agent's output is drained and
    /// before the task concludes; safe to repeat (a stored outcome is kept).
    pub(super) async fn verify_after_run(&self, id: &str, dir: &TaskDir, deadline_ms: i64, blocked: bool) {
        let Ok(Some(record)) = self.store.task(id) else { return };
        if record.status.is_terminal() || record.launch.verify.is_empty() {
            return;
        }
        if matches!(self.store.verification(id), Ok(Some(_))) {
            return;
        }
        // Only the work of an agent that ended by itself, well, is verified.
        let Some(exit) = record.run.as_ref().and_then(|h| self.runner.exit_record(h, dir)) else { return };
        if exit.spawn_error.is_some()
            || exit.timed_out
            || exit.terminated
            || exit.exit_code != Some(0)
            || record.cancel_requested
            || blocked
        {
            return;
        }
        let killed = kill_verifications_of(id);
        if killed > 0 {
            warn!(task_id = %id, killed, "killed the verification an earlier daemon left running: running it again");
        }
        let workdir =
            record.workshop.as_ref().map(|p| p.workdir.clone()).unwrap_or_else(|| PathBuf::from(&record.workspace));
        // In the task's box (issue 29): its confinement, the agent's
        // environment allowlist, a PID namespace of its own.
        let read_only = record.mode == crate::oacp::Mode::ReadOnly;
        let launcher = super::boxing::launcher(
            &self.paths,
            &record,
            dir.root(),
            &self.settings.supervisor_exe,
            self.settings.grace_ms,
            read_only,
        );
        let verification =
            self.run_verification(id, &record.launch.verify, &workdir, deadline_ms, record.network, &launcher).await;
        info!(task_id = %id, outcome = %verification.outcome, "verification ended");
        let body = serde_json::to_string(&verification).unwrap_or_default();
        let mut pause = Duration::from_millis(100);
        // Stored before the task concludes: retried like an ending is.
        while let Err(e) = self.store.put_verification(id, &body, now_ms()) {
            warn!(task_id = %id, "storing the verification failed, retrying: {e}");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
        }
        if let Some(live) = self.runs.get(id) {
            *live.activity.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    /// The stored verification of a task, for its report.
    pub(super) fn stored_verification(&self, id: &str) -> Option<Verification> {
        self.store.verification(id).ok().flatten().and_then(|b| serde_json::from_str(&b).ok())
    }

    /// Runs the commands in order, stopping at the first that does not pass;
    /// `network` is the task's: `false` cuts it for the commands too.
    async fn run_verification(
        &self,
        id: &str,
        commands: &[String],
        dir: &Path,
        deadline_ms: i64,
        network: bool,
        launcher: &crate::supervisor::boxed::Launcher,
    ) -> Verification {
        let mut steps = Vec::new();
        let mut last = None;
        for command in commands {
            if let Some(live) = self.runs.get(id) {
                *live.activity.lock().unwrap_or_else(|p| p.into_inner()) = Some(Activity {
                    kind: "verifying",
                    tool_name: command.clone(),
                    state: "running".to_owned(),
                    at_ms: now_ms(),
                });
            }
            let one = self.run_one(id, command, dir, deadline_ms, network, launcher).await;
            steps.push(VerificationStep {
                command: command.clone(),
                exit_code: one.exit_code,
                duration_ms: one.duration_ms,
            });
            let stop = one.outcome != "passed";
            last = Some(one);
            if stop {
                break;
            }
        }
        let mut v = last.unwrap_or_else(|| Verification {
            command: String::new(),
            exit_code: None,
            duration_ms: 0,
            tail: String::new(),
            outcome: "passed".to_owned(),
            commands: Vec::new(),
        });
        v.commands = steps;
        v
    }

    async fn run_one(
        &self,
        id: &str,
        command: &str,
        dir: &Path,
        deadline_ms: i64,
        network: bool,
        launcher: &crate::supervisor::boxed::Launcher,
    ) -> Verification {
        let started = Instant::now();
        let result = |outcome: &str, exit_code: Option<i64>, tail: String| Verification {
            command: command.to_owned(),
            exit_code,
            duration_ms: started.elapsed().as_millis() as u64,
            tail,
            outcome: outcome.to_owned(),
            commands: Vec::new(),
        };
        let left = deadline_ms - now_ms();
        if left <= 0 {
            return result("timed_out", None, "the task's deadline passed before verification could start".to_owned());
        }
        // `sh -c` through the task's box (a process group of its own).
        let script = [String::from("-c"), format!("exec 2>&1\n{command}")];
        let mut cmd = tokio::process::Command::from(launcher.command(dir, "sh", &script));
        cmd.env(VERIFY_MARKER, id);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        if !network {
            // Under the task's network policy: cut for the commands too.
            match super::verify_net::plan() {
                Ok(cut) => cut.apply(&mut cmd),
                Err(why) => return result("error", None, why),
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return result("error", None, format!("cannot run `{command}` in {}: {e}", dir.display())),
        };
        let mut stdout = child.stdout.take();
        let reader = tokio::spawn(async move {
            let mut tail: Vec<u8> = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            if let Some(out) = stdout.as_mut() {
                while let Ok(n) = out.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    tail.extend_from_slice(&buf[..n]);
                    if tail.len() > 4 * TAIL_BYTES {
                        tail.drain(..tail.len() - TAIL_BYTES);
                    }
                }
            }
            tail
        });
        let pid = child.id().unwrap_or(0) as i32;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(left as u64);
        let mut outcome = None;
        let status = loop {
            tokio::select! {
                s = child.wait() => break s.ok(),
                _ = tokio::time::sleep(CANCEL_POLL) => {
                    let cancelled = self.store.task(id).ok().flatten().is_none_or(|r| r.cancel_requested);
                    let late = tokio::time::Instant::now() >= deadline;
                    if cancelled || late {
                        outcome = Some(if cancelled { "cancelled" } else { "timed_out" });
                        self.stop_group(pid).await;
                        break child.wait().await.ok();
                    }
                }
            }
        };
        // What the command left behind in the background goes too.
        kill_verifications_of(id);
        let bytes = tokio::time::timeout(Duration::from_secs(2), reader).await.ok().and_then(|r| r.ok());
        let mut tail = tail_text(&bytes.unwrap_or_default());
        let exit_code = status.and_then(|s| s.code()).map(i64::from);
        let outcome = match outcome {
            Some(o) => {
                tail.push_str(&format!("\n[caesar: verification {o} after {} ms]", started.elapsed().as_millis()));
                o
            }
            None if exit_code == Some(0) => "passed",
            None => "failed",
        };
        result(outcome, exit_code, tail)
    }

    /// SIGTERM to the command's group, the grace, then SIGKILL.
    async fn stop_group(&self, pid: i32) {
        #[cfg(unix)]
        if pid > 0 {
            use nix::sys::signal::{Signal, killpg};
            let group = nix::unistd::Pid::from_raw(pid);
            let _ = killpg(group, Signal::SIGTERM);
            let grace = Duration::from_millis(self.settings.grace_ms.min(2000));
            let end = Instant::now() + grace;
            while Instant::now() < end && killpg(group, None).is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// The last [`TAIL_BYTES`] of output as text, cut at a line start when it can be.
fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let t = text.trim_end();
    if t.len() <= TAIL_BYTES {
        return t.to_owned();
    }
    let mut start = t.len() - TAIL_BYTES;
    while !t.is_char_boundary(start) {
        start += 1;
    }
    let cut = &t[start..];
    match cut.find('\n') {
        Some(nl) if nl < cut.len() / 2 => cut[nl + 1..].to_owned(),
        _ => cut.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_checked_for_their_program() {
        let ws = std::env::temp_dir();
        assert!(check_command("sh -c true", &ws).is_ok());
        assert!(check_command("FOO=1 BAR=2 true", &ws).is_ok());
        assert!(check_command("cd sub && make", &ws).is_ok());
        let e = check_command("no-such-program-caesar --x", &ws).unwrap_err();
        assert!(e.contains("`no-such-program-caesar` does not exist"), "{e}");
        assert!(check_command("  ", &ws).is_err());
        assert!(check_command("./not-here.sh", &ws).is_err());
    }

    #[test]
    fn a_failure_of_claimed_success_is_said_in_the_verdict_and_a_high_finding() {
        let mut r = Report::new("t_1", ReportStatus::Success, "all tests pass");
        let v = Verification {
            command: "cargo test -q".into(),
            exit_code: Some(101),
            duration_ms: 5,
            tail: "test failed".into(),
            outcome: "failed".into(),
            commands: vec![],
        };
        apply_to_report(&mut r, Some(v));
        assert_eq!(r.status, ReportStatus::Failed);
        assert!(r.summary.starts_with("verification failed"), "{}", r.summary);
        assert!(r.findings.iter().any(|f| f.severity == Severity::High));
        assert_eq!(r.verified_by.as_deref(), Some("command"));
        let mut forged = Report::new("t_2", ReportStatus::Success, "ok");
        forged.verified_by = Some("command".into());
        apply_to_report(&mut forged, None);
        assert!(forged.verified_by.is_none() && forged.verification.is_none());
    }

    #[test]
    fn tails_keep_the_end() {
        let long = (0..2000).map(|i| format!("line {i}\n")).collect::<String>();
        let t = tail_text(long.as_bytes());
        assert!(t.ends_with("line 1999") && t.len() <= TAIL_BYTES, "{}", t.len());
    }
}

//! Turning a task into a command line: generic `[[agent]]` templates, the
//! brief an agent reads, and finding executables.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::oacp::{Mode, TaskDoc};

/// The resolved command of a task, stored with it so that a restarted daemon
/// knows exactly what ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
    /// Extra environment on top of the `CAESAR_*` variables.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// The names of the `[[agent]] env` variables (issue 19): their values
    /// are secrets, so they are never stored; the start reads them from
    /// the config and hands them to the supervisor's environment only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    /// Which adapter launched it and reads its output (stored under its old
    /// name, `parser`, so rows written before decode).
    #[serde(rename = "parser")]
    pub provider: crate::launch::ProviderId,
    /// Facts found while resolving (network, model), added to the report.
    #[serde(default)]
    pub findings: Vec<crate::oacp::Finding>,
    /// The project's `max_parallel` when the task was queued; 0 for no limit.
    #[serde(default)]
    pub max_parallel: u32,
    /// The return channel was asked for: the agent gets its secret.
    #[serde(default)]
    pub channel: bool,
    /// How to prepare the task's workshop when it starts.
    #[serde(default)]
    pub plan: Option<WorkshopPlan>,
    /// The CLI was asked to answer in the report schema: its final answer
    /// is the report (tier 2).
    #[serde(default)]
    pub native_report: bool,
    /// What the agent reads on stdin.
    #[serde(default)]
    pub stdin: crate::provider::Stdin,
    /// Budget, blocker policy and fallback chain (issue 17).
    #[serde(default)]
    pub lifecycle: crate::lifecycle::Plan,
    /// Commands run in the task's workshop after the agent ended (issue 17,
    /// `engine/verify.rs`); their outcome goes into the report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
    /// The task that delegated this one from inside its process tree
    /// (issue 19): it alone, besides the user, may await, answer and
    /// cancel it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Run as a Kubernetes Job with these settings (`[runner]`, issue 16);
    /// `None`: on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube: Option<crate::runner::settings::KubeSettings>,
    /// The prompt's size and way (issue 19, `prompt.rs`): the launch holds
    /// [`crate::prompt::TOKEN`] where the prompt goes, never its text; `None`
    /// for a launch stored before, which holds the prompt itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<crate::prompt::PromptRef>,
}

/// What the workshop needs at start: decided at delegation, carried out when
/// the queue starts the task (so a queued task branches from the HEAD of
/// the moment it starts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkshopPlan {
    pub isolation: crate::config::IsolationPref,
    /// The role, else the agent: the middle of the branch name.
    pub label: String,
    pub allow_inplace_write: bool,
    pub worktree: crate::config::WorktreeSection,
    /// The tree a write task in place holds while it runs; no other such
    /// task starts on it meanwhile.
    #[serde(default)]
    pub shared_tree: Option<String>,
    /// Delegation decided on a worktree: it is made (with `setup`) before
    /// the task is queued, outside every lock.
    #[serde(default)]
    pub worktree_decided: bool,
}

impl Launch {
    /// Decodes a stored launch plan. A plan this build cannot read (written
    /// by a newer daemon, or damaged) becomes a generic launch of nothing,
    /// which fails at start with a message saying so rather than guessing.
    pub fn decode(json: &str) -> Launch {
        serde_json::from_str(json).unwrap_or_else(|e| {
            tracing::warn!("a stored launch plan does not decode ({e}): the task will fail to start");
            Launch { provider: crate::launch::ProviderId::Generic, ..Launch::default() }
        })
    }

    /// How the engine converses with the agent.
    pub fn driver_kind(&self) -> crate::driver::DriverKind {
        match self.stdin {
            crate::provider::Stdin::Null | crate::provider::Stdin::Prompt => crate::driver::DriverKind::Stream,
            crate::provider::Stdin::Control { .. } => crate::driver::DriverKind::StreamWithControl,
            crate::provider::Stdin::Session { protocol: crate::driver::SessionProtocol::Acp, .. } => {
                crate::driver::DriverKind::Acp
            }
            crate::provider::Stdin::Session { protocol: crate::driver::SessionProtocol::CodexAppServer, .. } => {
                crate::driver::DriverKind::CodexAppServer
            }
        }
    }

    /// Whether the task's workshop is a worktree made before it is queued:
    /// the part of preparation that runs outside the queue.
    pub fn prepares_worktree(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.worktree_decided)
    }

    /// The command line as one string, for the `started` event: the prompt
    /// shown by its size and way (`<prompt: 213 bytes via stdin>`), never
    /// its text.
    pub fn display(&self) -> String {
        let args = crate::prompt::shown_args(&self.args, self.prompt.as_ref());
        let mut line = std::iter::once(self.program.as_str())
            .chain(args.iter().map(String::as_str))
            .map(|a| if a.starts_with("<prompt: ") && a.ends_with('>') { a.to_owned() } else { shell_quote(a) })
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(p) = self.prompt.filter(|p| p.via != crate::prompt::Via::Argv) {
            line.push_str(&format!(" < {}", p.shown()));
        }
        line
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The values of the template tokens.
#[derive(Debug, Clone, Default)]
pub struct TokenValues<'a> {
    pub prompt: Option<&'a str>,
    pub workspace: Option<&'a str>,
    pub task_dir: Option<&'a str>,
    pub report_path: Option<&'a str>,
    pub model: Option<&'a str>,
}

/// Expands `{{prompt}}`, `{{workspace}}`, `{{taskDir}}`, `{{reportPath}}` and
/// `{{model}}` in each argument. An argument holding a token with no value
/// is dropped whole, so `"--model={{model}}"` disappears when no model is set.
pub fn expand_args(template: &[String], v: &TokenValues<'_>) -> Vec<String> {
    let tokens: [(&str, Option<&str>); 5] = [
        ("{{prompt}}", v.prompt),
        ("{{workspace}}", v.workspace),
        ("{{taskDir}}", v.task_dir),
        ("{{reportPath}}", v.report_path),
        ("{{model}}", v.model),
    ];
    template
        .iter()
        .filter_map(|arg| {
            let mut out = arg.clone();
            for (token, value) in tokens {
                if out.contains(token) {
                    out = out.replace(token, value?);
                }
            }
            Some(out)
        })
        .collect()
}

/// The brief: what the agent reads as its prompt. It carries the mission and
/// says how to hand in the report.
pub fn brief(task: &TaskDoc) -> String {
    let mut b = format!("# Task {}\n\n{}\n", task.id, task.objective.trim());
    if !task.context.trim().is_empty() {
        b.push_str(&format!("\n## Context\n\n{}\n", task.context.trim()));
    }
    if !task.constraints.is_empty() {
        b.push_str("\n## Constraints\n\n");
        for c in &task.constraints {
            b.push_str(&format!("- {c}\n"));
        }
    }
    if !task.acceptance_criteria.is_empty() {
        b.push_str("\n## Acceptance criteria\n\n");
        for c in &task.acceptance_criteria {
            b.push_str(&format!("- {c}\n"));
        }
    }
    b.push_str("\n## Rules\n\n");
    match task.mode {
        Mode::ReadOnly => b.push_str(&format!(
            "- This task is read-only: do not create, modify or delete any file in {}.\n",
            task.workspace
        )),
        Mode::Write => b.push_str(&format!("- You may modify files in {}.\n", task.workspace)),
    }
    if !task.network {
        b.push_str("- The network is cut for this task: do not try to download anything.\n");
    }
    if task.channel.is_some() {
        b.push_str(
            "\n## Return channel\n\nYou have MCP tools from the server `caesar`: `report_progress` (message, pct) at milestones, \
             `ask_orchestrator` (question, options) when a decision is not yours to make (it waits for the answer), \
             `submit_report` (report) to hand in your report, validated at once, and `get_task` to re-read this mission. \
             Prefer `submit_report` to the file below.\n",
        );
    }
    b.push_str(&format!(
        "\n## Report\n\nWhen you are done, write your report as JSON to {} (also in $CAESAR_REPORT_PATH):\n\
         {{\"protocol\":\"caesar.report/v1\",\"status\":\"success|partial|failed|blocked\",\"summary\":\"two or three sentences\",\
         \"changes\":[{{\"path\":\"...\",\"action\":\"created|modified|deleted|renamed\"}}],\"findings\":[],\"next_steps\":[]}}\n\
         If you cannot write files, end your reply with the same JSON in a fenced block that starts with ```json caesar:report\n",
        task.report_path
    ));
    b
}

/// Finds an executable: a path containing a separator is taken as it is,
/// anything else is looked up on PATH.
pub fn resolve_bin(bin: &str) -> Option<PathBuf> {
    let candidate = Path::new(bin);
    if candidate.components().count() > 1 || candidate.is_absolute() {
        return is_executable(candidate).then(|| candidate.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(bin)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tokens_expand_and_empty_ones_drop_their_argument() {
        let v = TokenValues {
            prompt: Some("do it"),
            workspace: Some("/w"),
            task_dir: Some("/t"),
            report_path: Some("/t/report.json"),
            model: None,
        };
        let out = expand_args(
            &strings(&[
                "run",
                "{{prompt}}",
                "--cwd={{workspace}}",
                "--model={{model}}",
                "{{taskDir}}/x",
                "{{reportPath}}",
            ]),
            &v,
        );
        assert_eq!(out, strings(&["run", "do it", "--cwd=/w", "/t/x", "/t/report.json"]));
    }

    #[test]
    fn display_quotes_what_a_shell_would_split() {
        let l = Launch { program: "/bin/a".into(), args: strings(&["-p", "it's two words"]), ..Launch::default() };
        assert_eq!(l.display(), r"/bin/a -p 'it'\''s two words'");
    }

    #[test]
    fn display_shows_the_prompt_by_size_and_way_never_its_text() {
        use crate::prompt::{PromptRef, TOKEN, Via};
        let mut l = Launch {
            program: "/bin/a".into(),
            args: strings(&["-p", TOKEN]),
            prompt: Some(PromptRef { bytes: 213, via: Via::Argv }),
            ..Launch::default()
        };
        assert_eq!(l.display(), "/bin/a -p <prompt: 213 bytes in argv>");
        l.args = strings(&["exec", "-"]);
        l.prompt = Some(PromptRef { bytes: 9, via: Via::Stdin });
        assert_eq!(l.display(), "/bin/a exec - < <prompt: 9 bytes via stdin>");
    }

    #[test]
    fn resolves_on_path_and_by_path() {
        assert!(resolve_bin("sh").is_some());
        assert!(resolve_bin("/bin/sh").is_some());
        assert!(resolve_bin("no-such-binary-caesar").is_none());
        assert!(resolve_bin("/nonexistent/x").is_none());
    }
}

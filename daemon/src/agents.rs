//! Turning a task into a command line: generic `[[agent]]` templates, the
//! brief an agent reads, and finding executables.

use std::path::{Path, PathBuf};

use crate::oacp::{Mode, TaskDoc};

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
    fn resolves_on_path_and_by_path() {
        assert!(resolve_bin("sh").is_some());
        assert!(resolve_bin("/bin/sh").is_some());
        assert!(resolve_bin("no-such-binary-caesar").is_none());
        assert!(resolve_bin("/nonexistent/x").is_none());
    }
}

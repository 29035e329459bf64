//! Where a task's prompt travels, and where it never goes (issue 19: "full prompts sit in argv,
//! in the `started` event, in `events.jsonl` and in the stored launch record").
//!
//! At delegation the daemon writes the brief once, to the task's `prompt.txt` (in its daemon part,
//! beside the task directory, where the agent cannot rewrite it before the supervisor reads it), and
//! builds the launch with [`TOKEN`] wherever the prompt would go: in an argument, in the first
//! stdin line of claude's stream-json, in a session opening. The stored launch, the supervisor's
//! command line and every display therefore carry the token, shown as `<prompt: N bytes via …>`.
//! The prompt itself is filled in at the last moment by whoever hands it to the agent: the
//! supervisor for arguments and for a prompt on stdin ([`crate::provider::Stdin::Prompt`]), the
//! start for a protocol's first lines. A CLI that takes its prompt only as an argument keeps it
//! there (nothing else works), and a prompt that cannot fit an argument is refused at
//! delegation, naming the agent and the limit, rather than failing with E2BIG at spawn.

use crate::task_dir::TaskDir;

/// What stands for the prompt in a launch. Plain ASCII with nothing JSON or a shell would
/// escape, so it survives being put into a JSON string or an argument unchanged.
pub const TOKEN: &str = "@@caesar:prompt@@";

/// The prompt's file in the task's daemon part.
pub const FILE: &str = "prompt.txt";

/// What a stored launch's fallback request holds instead of the delegation's
/// `context` (issue 19): the context itself is in the task's daemon part
/// ([`write_context`]), read back when the next attempt is delegated.
pub const CONTEXT_TOKEN: &str = "@@caesar:context@@";

/// The file of a delegation's `context`, in the task's daemon part.
pub const CONTEXT_FILE: &str = "context.txt";

/// The most bytes of a prompt file read back: more than the largest brief a delegation can
/// make (objective, context, constraints and criteria at their caps).
pub const READ_CAP: u64 = 8 * 1024 * 1024;

/// Linux's limit on one argument (`MAX_ARG_STRLEN`, 32 pages), its terminating NUL included.
pub const MAX_ARG_STRLEN: usize = 128 * 1024;

/// Room left in `ARG_MAX` for the environment and the supervisor's own arguments.
const ENV_ROOM: usize = 256 * 1024;

pub use crate::launch::{PromptRef, Via};

/// The task's prompt file, in its daemon part ([`TaskDir::prompt`]).
pub fn path(dir: &TaskDir) -> std::path::PathBuf {
    dir.prompt()
}

/// Writes the prompt of a new task (before the task is recorded).
pub fn write(dir: &TaskDir, prompt: &str) -> std::io::Result<()> {
    crate::safe_fs::write_atomic(&path(dir), prompt.as_bytes())
}

/// Reads the prompt back from `files`, the directory of the task's daemon
/// files ([`TaskDir::daemon_files`], the supervisor's `--task-dir`), without
/// following a link.
pub fn read(files: &std::path::Path) -> std::io::Result<String> {
    let bytes = crate::safe_fs::read_capped(&files.join(FILE), READ_CAP)?;
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Keeps a new task's `context` for its fallbacks (before the task is recorded).
pub fn write_context(dir: &TaskDir, context: &str) -> std::io::Result<()> {
    crate::safe_fs::write_atomic(&dir.daemon_files().join(CONTEXT_FILE), context.as_bytes())
}

/// The `context` kept by [`write_context`], read without following a link.
pub fn read_context(dir: &TaskDir) -> std::io::Result<String> {
    let bytes = crate::safe_fs::read_capped(&dir.daemon_files().join(CONTEXT_FILE), READ_CAP)?;
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Whether any argument stands for the prompt.
pub fn in_args(args: &[String]) -> bool {
    args.iter().any(|a| a.contains(TOKEN))
}

/// The arguments with the prompt filled in.
pub fn fill_args(args: &[String], prompt: &str) -> Vec<String> {
    args.iter().map(|a| a.replace(TOKEN, prompt)).collect()
}

/// JSON text (a stdin line, a session opening) with the prompt filled into the strings that
/// hold the token, escaped as a JSON string's content.
pub fn fill_json(text: &str, prompt: &str) -> String {
    if !text.contains(TOKEN) {
        return text.to_owned();
    }
    let quoted = serde_json::to_string(prompt).unwrap_or_default();
    let inner = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default();
    text.replace(TOKEN, inner)
}

/// The arguments as a display shows them: the prompt's size and way instead of its text.
pub fn shown_args(args: &[String], prompt: Option<&PromptRef>) -> Vec<String> {
    let shown = prompt.map(PromptRef::shown).unwrap_or_else(|| "<prompt>".to_owned());
    args.iter().map(|a| a.replace(TOKEN, &shown)).collect()
}

/// Refuses a launch whose arguments could not carry a prompt of `prompt_bytes`: one argument
/// past [`MAX_ARG_STRLEN`], or all of them past `ARG_MAX` less room for the environment. The
/// error names the agent, the size, the limit and the agents that take longer prompts.
pub fn check_args(agent: &str, program: &str, args: &[String], prompt_bytes: usize) -> Result<(), String> {
    let filled = |a: &String| a.len() + a.matches(TOKEN).count() * prompt_bytes.saturating_sub(TOKEN.len());
    let longest = args.iter().filter(|a| a.contains(TOKEN)).map(filled).max().unwrap_or(0);
    if longest + 1 > MAX_ARG_STRLEN {
        return Err(format!(
            "agent `{agent}` takes its prompt only on its command line, and this prompt makes an argument of \
             {longest} bytes, past Linux's limit of {MAX_ARG_STRLEN} bytes for one argument, its final NUL included \
             (MAX_ARG_STRLEN): {}",
            way_out()
        ));
    }
    let total: usize = program.len() + 1 + args.iter().map(|a| filled(a) + 1).sum::<usize>();
    let limit = arg_max().saturating_sub(ENV_ROOM);
    if total > limit {
        return Err(format!(
            "agent `{agent}` takes its prompt only on its command line, and with this prompt its arguments come to \
             {total} bytes, past the {limit} bytes this system allows (ARG_MAX less room for the environment): {}",
            way_out()
        ));
    }
    Ok(())
}

/// What to do about a prompt too long for an argument: the agents that take it otherwise.
fn way_out() -> String {
    format!(
        "delegate to an agent that takes a prompt of any size on stdin or in its session ({}, or an `[[agent]]` \
         with `prompt_input = \"stdin\"` or `protocol = \"acp\"`), or shorten the objective and context (put the \
         material in a file of the workspace and name it)",
        crate::provider::long_prompt_agents().join(", ")
    )
}

/// The system's `ARG_MAX` (arguments and environment of one exec).
fn arg_max() -> usize {
    #[cfg(unix)]
    {
        if let Ok(Some(n)) = nix::unistd::sysconf(nix::unistd::SysconfVar::ARG_MAX) {
            return usize::try_from(n).unwrap_or(2 * 1024 * 1024);
        }
    }
    2 * 1024 * 1024
}

/// A launch's command line as one string, for the `started` event: the
/// prompt shown by its size and way (`<prompt: 213 bytes via stdin>`), never
/// its text.
pub fn command_line(launch: &crate::launch::LaunchPlan) -> String {
    let args = shown_args(&launch.args, launch.prompt.as_ref());
    let mut line = std::iter::once(launch.program.as_str())
        .chain(args.iter().map(String::as_str))
        .map(|a| if a.starts_with("<prompt: ") && a.ends_with('>') { a.to_owned() } else { shell_quote(a) })
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(p) = launch.prompt.filter(|p| p.via != Via::Argv) {
        line.push_str(&format!(" < {}", p.shown()));
    }
    line
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn display_quotes_what_a_shell_would_split() {
        let l = crate::launch::LaunchPlan {
            program: "/bin/a".into(),
            args: strs(&["-p", "it's two words"]),
            ..Default::default()
        };
        assert_eq!(command_line(&l), r"/bin/a -p 'it'\''s two words'");
    }

    #[test]
    fn display_shows_the_prompt_by_size_and_way_never_its_text() {
        let mut l = crate::launch::LaunchPlan {
            program: "/bin/a".into(),
            args: strs(&["-p", TOKEN]),
            prompt: Some(PromptRef { bytes: 213, via: Via::Argv }),
            ..Default::default()
        };
        assert_eq!(command_line(&l), "/bin/a -p <prompt: 213 bytes in argv>");
        l.args = strs(&["exec", "-"]);
        l.prompt = Some(PromptRef { bytes: 9, via: Via::Stdin });
        assert_eq!(command_line(&l), "/bin/a exec - < <prompt: 9 bytes via stdin>");
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_token_is_filled_in_arguments_and_json_and_shown_by_size() {
        let args = strings(&["-p", TOKEN, &format!("--prompt={TOKEN}")]);
        assert_eq!(fill_args(&args, "do \"it\""), strings(&["-p", "do \"it\"", "--prompt=do \"it\""]));
        let json = serde_json::json!({"text": TOKEN}).to_string();
        let filled = fill_json(&json, "a \"quoted\"\nline");
        let v: serde_json::Value = serde_json::from_str(&filled).unwrap();
        assert_eq!(v["text"], "a \"quoted\"\nline");
        let r = PromptRef { bytes: 213, via: Via::Stdin };
        assert_eq!(shown_args(&args, Some(&r))[1], "<prompt: 213 bytes via stdin>");
        assert!(!in_args(&strings(&["-"])) && in_args(&args));
    }

    #[test]
    fn an_argument_past_the_per_argument_limit_is_refused_naming_agent_and_limit() {
        let args = strings(&["-p", TOKEN]);
        assert!(check_args("cursor-agent", "/bin/x", &args, 1000).is_ok());
        let e = check_args("cursor-agent", "/bin/x", &args, 200 * 1024).unwrap_err();
        assert!(e.contains("`cursor-agent`") && e.contains("131072") && e.contains("MAX_ARG_STRLEN"), "{e}");
        assert!(e.contains("codex") && e.contains("gemini") && !e.contains("antigravity,"), "names the way out: {e}");
        // One byte short of the limit (the argument and its NUL) still fits.
        let fits = MAX_ARG_STRLEN - 1 - "--prompt=".len();
        assert!(check_args("x", "/bin/x", &strings(&[&format!("--prompt={TOKEN}")]), fits).is_ok());
        assert!(check_args("x", "/bin/x", &strings(&[&format!("--prompt={TOKEN}")]), fits + 1).is_err());
        // No token: the prompt is not in argv, whatever its size.
        assert!(check_args("codex", "/bin/x", &strings(&["exec", "-"]), 10 << 20).is_ok());
    }
}

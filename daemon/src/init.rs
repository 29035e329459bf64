//! `caesar init`: a project's starting configuration, its role prompts, the
//! `.gitignore` lines, and a skill for each host agent found, teaching it to
//! delegate, await and check the diff.
//!
//! The config written declares no values, only commented examples, so that
//! it freezes nothing: the global layer and caesar's defaults keep applying.
//! Re-running refreshes the skills and leaves the user's files alone
//! (unless `force`).

use std::path::{Path, PathBuf};

use crate::config::builtin_roles;
use crate::error::{Error, Result};
use crate::launch::ProviderId;

const CONFIG_TEMPLATE: &str = r#"# caesar configuration for this project (shared with the team).
# Machine-specific overrides go in .caesar/config.local.toml (not versioned);
# personal defaults in ~/.config/caesar/config.toml. Values here override the
# global layer field by field; a list replaces the inherited list.

# [policy]
# max_parallel = 4              # tasks running at once, across all clients
# default_mode = "read-only"    # or "write" (then a worktree and a branch)
# default_isolation = "auto"    # "worktree" for write tasks in a git repo, else "inplace"
# default_network = "auto"      # "on", "off", "auto"
# default_timeout = "10m"
# allowed = []                  # empty: every agent not denied
# denied = []
# allow_recursion = false       # delegating to claude from Claude Code
# allow_inplace_write = false
# max_depth = 2

# [models]
# codex = "gpt-5"

# [bin]
# claude = "/opt/tools/claude"

# [worktree]
# copy = ["node_modules"]       # reflinked where the filesystem can
# link = []
# setup = ["npm ci"]

# [[role]]
# name = "reviewer"
# agents = ["codex", "gemini"]
# mode = "read-only"
"#;

const SKILL: &str = r#"---
name: caesar
description: Delegate coding work to other agent CLIs (codex, claude, gemini, opencode, copilot...) through the caesar MCP tools, in parallel, and check their work by its git diff.
---

# Delegating with caesar

Use the `caesar_*` MCP tools to hand a well-scoped objective to another coding agent running as a supervised sub-process.

1. **Pick an agent or a role.** `caesar_list_agents` shows what is installed and allowed; `caesar_list_roles` shows which agent each role (reviewer, implementer, investigator) would pick now.
2. **Delegate.** `caesar_delegate` with a precise `objective`, the `context` the agent needs, `constraints` and `acceptance_criteria`. It returns a `task_id` at once; it does not wait. To compare agents, delegate the same objective several times back to back.
3. **Await.** `caesar_await` with every `task_id`. It returns when all are done, when the timeout passes (`pending: true`), or early when a task needs you: answer its `pending_questions` with `caesar_answer`, or read its `blocker`.
4. **Check the work, not the claim.** A report's `changes_verified_by: "git"` means the file list was checked against git; `"kernel"`, that the task was read-only and the kernel kept it out of the repository, so it changed nothing. Read `caesar_diff` before you `caesar_apply` a worktree task; `status: succeeded` is the process outcome, `report_status` is the agent's own verdict.
5. **When something looks wrong,** `caesar_logs` shows the normalized events (or `raw: true` the CLI's output). `caesar_cancel` stops a task and its whole process tree.

Do not delegate what you can do in one step yourself, and do not delegate to yourself (the policy refuses `claude` from Claude Code unless `allow_recursion` is set).
"#;

fn role_prompt(name: &str, purpose: &str) -> String {
    format!(
        "# Role: {name}\n\n{purpose}\n\nWork only on the objective you were given. When you are done, hand in your report as the brief says: what you did, what you found, and what is left.\n"
    )
}

/// What `init` did.
#[derive(Debug, Default, PartialEq)]
pub struct Written {
    pub written: Vec<PathBuf>,
    pub kept: Vec<PathBuf>,
}

fn put(path: &Path, content: &str, overwrite: bool, out: &mut Written) -> Result<()> {
    if path.exists() && !overwrite {
        out.kept.push(path.to_path_buf());
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io_at("cannot create", parent, e))?;
    }
    crate::safe_fs::write_atomic(path, content.as_bytes()).map_err(|e| Error::io_at("cannot write", path, e))?;
    out.written.push(path.to_path_buf());
    Ok(())
}

/// Initializes the global layer.
pub fn init_global(config_dir: &Path, force: bool) -> Result<Written> {
    let mut out = Written::default();
    put(&config_dir.join("config.toml"), CONFIG_TEMPLATE, force, &mut out)?;
    Ok(out)
}

/// Initializes a project. `has_host` says whether a host agent's CLI is
/// installed (by id: `claude`, `codex`, `copilot`, `antigravity`).
pub fn init_project(project: &Path, force: bool, has_host: &dyn Fn(&str) -> bool) -> Result<Written> {
    let mut out = Written::default();
    let caesar = project.join(".caesar");
    put(&caesar.join("config.toml"), CONFIG_TEMPLATE, force, &mut out)?;
    for role in builtin_roles() {
        let file = role.system_prompt_file.clone().unwrap_or_else(|| format!("roles/{}.md", role.name));
        put(&caesar.join(file), &role_prompt(&role.name, &role.purpose), force, &mut out)?;
    }
    let gitignore = project.join(".gitignore");
    // The repository's own file: a link to /dev/zero or a FIFO is refused
    // rather than read, and one that cannot be read is left alone rather
    // than replaced by caesar's two lines.
    let mut text = match crate::safe_fs::read_following_to_string(&gitignore, crate::safe_fs::CONFIG_CAP) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io_at("cannot read", &gitignore, e)),
    };
    let missing: Vec<&str> = [".caesar/config.local.toml", ".caesar/wt/"]
        .into_iter()
        .filter(|l| !text.lines().any(|x| x.trim() == *l))
        .collect();
    if missing.is_empty() {
        out.kept.push(gitignore);
    } else {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# caesar\n");
        for l in missing {
            text.push_str(l);
            text.push('\n');
        }
        crate::safe_fs::write_atomic(&gitignore, text.as_bytes())
            .map_err(|e| Error::io_at("cannot write", &gitignore, e))?;
        out.written.push(gitignore);
    }
    // Skills are ours: always refreshed.
    if has_host(ProviderId::Claude.as_str()) || project.join(".claude").exists() {
        put(&project.join(".claude/skills/caesar/SKILL.md"), SKILL, true, &mut out)?;
    }
    // .agents/skills is read by codex, copilot, antigravity, gemini, opencode and qwen.
    let agents_hosts = [
        ProviderId::Codex,
        ProviderId::Copilot,
        ProviderId::Antigravity,
        ProviderId::Gemini,
        ProviderId::Opencode,
        ProviderId::Qwen,
    ];
    if agents_hosts.iter().any(|h| has_host(h.as_str())) || project.join(".agents").exists() {
        put(&project.join(".agents/skills/caesar/SKILL.md"), SKILL, true, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_once_refreshes_skills_and_keeps_user_files() {
        let p = tempfile::tempdir().unwrap();
        std::fs::write(p.path().join(".gitignore"), "target/").unwrap();
        let hosts = |h: &str| h == "codex";
        let first = init_project(p.path(), false, &hosts).unwrap();
        assert!(first.written.iter().any(|f| f.ends_with(".caesar/config.toml")));
        assert!(first.written.iter().any(|f| f.ends_with(".caesar/roles/reviewer.md")));
        assert!(first.written.iter().any(|f| f.ends_with(".agents/skills/caesar/SKILL.md")));
        assert!(!p.path().join(".claude").exists(), "no Claude Code here");
        let gi = std::fs::read_to_string(p.path().join(".gitignore")).unwrap();
        assert_eq!(gi, "target/\n# caesar\n.caesar/config.local.toml\n.caesar/wt/\n");
        // The template declares nothing: it loads to the defaults.
        let g = tempfile::tempdir().unwrap();
        let c = crate::config::Config::load(g.path(), p.path()).unwrap();
        assert_eq!(c.policy, crate::config::Policy::default());

        std::fs::write(p.path().join(".caesar/roles/reviewer.md"), "mine").unwrap();
        let again = init_project(p.path(), false, &hosts).unwrap();
        assert_eq!(std::fs::read_to_string(p.path().join(".caesar/roles/reviewer.md")).unwrap(), "mine");
        assert!(again.written.iter().any(|f| f.ends_with("SKILL.md")), "skills refreshed");
        assert!(again.kept.iter().any(|f| f.ends_with(".gitignore")));
        assert_eq!(std::fs::read_to_string(p.path().join(".gitignore")).unwrap(), gi);
        init_project(p.path(), true, &hosts).unwrap();
        assert_ne!(std::fs::read_to_string(p.path().join(".caesar/roles/reviewer.md")).unwrap(), "mine");
    }
}

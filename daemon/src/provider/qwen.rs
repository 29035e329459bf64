//! Qwen Code (`qwen -p … --output-format stream-json`), a Gemini CLI fork whose stream copies
//! Claude's stream-json. Never run here (needs Node 22): flags and schema from QwenLM/qwen-code
//! `packages/cli/src/config/config.ts` and `packages/cli/src/nonInteractive/types.ts` [S].
//! Parsed by [`super::claude::ClaudeParser`].

use serde_json::Value;

use super::{Capabilities, Invocation, Launch, NetworkControl, ProviderSpec, Stdin, mcp_servers_json, s};
use crate::oacp::Mode;

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Qwen,
    display_name: "Qwen Code",
    family: Some("alibaba"),
    default_bin: "qwen",
    capabilities: Capabilities {
        native_read_only: true,
        structured_output: false,
        resume: true,
        model_selection: true,
        reasoning_effort: false,
        mcp_injection: true,
        network: NetworkControl::Open,
    },
    efforts: &[],
    version_args: &["--version"],
    env_prefixes: &["QWEN_", "DASHSCOPE_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"],
    state_dirs: &[".qwen"],
    config_env: None,
    config_files: &[".qwen/settings.json", ".qwen/commands", ".qwen/QWEN.md"],
    install: Some("npm install -g @qwen-code/qwen-code"),
    own_sandbox: false,
    mcp_from_workspace: true,
    launch,
    parser: super::claude::ClaudeParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    // [S] a gemini-cli fork: a piped stdin is the prompt ("-p: Appended to input on stdin (if
    // any)"), so the prompt stays out of argv (issue 19).
    let mut args = Vec::new();
    args.extend([
        s("--output-format"),
        s("stream-json"),
        // [S] --approval-mode plan|default|auto-edit|yolo.
        s("--approval-mode"),
        s(match inv.mode {
            Mode::ReadOnly => "plan",
            Mode::Write => "yolo",
        }),
    ]);
    if let Some(m) = inv.model {
        args.extend([s("-m"), s(m)]);
    }
    if let Some(id) = inv.resume_session {
        args.extend([s("--resume"), s(id)]);
    }
    let mut launch = Launch { args, stdin: Stdin::Prompt, ..Launch::default() };
    if let Some(m) = &inv.mcp {
        // [S] mcpServers in settings.json, gemini-style, with trust.
        let settings = mcp_servers_json(m, &[("trust", Value::Bool(true))]);
        launch.workspace_files.push((s(".qwen/settings.json"), settings.to_string()));
    }
    launch
}

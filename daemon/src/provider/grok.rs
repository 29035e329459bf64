//! xAI Grok Build CLI (`grok -p … --output-format streaming-messages-json`). Not installable
//! here: flags from xai-org/grok-build `docs/user-guide/14-headless-mode.md` [S] and from other
//! integrations' argv [3P]. `streaming-messages-json` is Claude's stream-json schema, so the
//! stream is parsed by [`super::claude::ClaudeParser`]. (The unrelated npm `@vibe-kit/grok-cli`
//! prints OpenAI chat messages instead; it is not supported.)

use super::{
    Capabilities, Invocation, Launch, NetworkControl, ProviderSpec, allowed_effort, s, toml_inline_env, toml_key,
    toml_str, toml_str_array,
};
use crate::oacp::Mode;

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Grok,
    display_name: "Grok Build",
    family: Some("xai"),
    default_bin: "grok",
    capabilities: Capabilities {
        native_read_only: true,
        structured_output: false,
        resume: true,
        model_selection: true,
        reasoning_effort: true,
        mcp_injection: true,
        // [S] the read-only sandbox also blocks child network on Linux; write is unverified.
        network: NetworkControl::Open,
    },
    efforts: &["low", "medium", "high"],
    version_args: &["--version"],
    env_prefixes: &["GROK_", "XAI_"],
    state_dirs: &[],
    config_env: None,
    config_files: &[],
    install: None,
    own_sandbox: false,
    mcp_from_workspace: true,
    launch,
    parser: super::claude::ClaudeParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    let prompt = if inv.prompt.starts_with('-') {
        vec![format!("--prompt={}", inv.prompt)]
    } else {
        vec![s("-p"), s(inv.prompt)]
    };
    let mut args = prompt;
    args.extend([
        s("--output-format"),
        s("streaming-messages-json"),
        // [S] --sandbox read-only|workspace|strict|off.
        s("--sandbox"),
        s(match inv.mode {
            Mode::ReadOnly => "read-only",
            Mode::Write => "workspace",
        }),
        // [3P] without pre-approval a headless run ends with stopReason "cancelled"; the
        // sandbox, not the prompt, is the boundary.
        s("--always-approve"),
    ]);
    if let Some(m) = inv.model {
        args.extend([s("-m"), s(m)]);
    }
    if let Some(e) = allowed_effort(&SPEC, inv.effort) {
        // [3P] --reasoning-effort (providers.md [S] says --effort).
        args.extend([s("--reasoning-effort"), s(e)]);
    }
    if let Some(id) = inv.resume_session {
        args.extend([s("--resume"), s(id)]);
    }
    let mut launch = Launch {
        args,
        // [3P] keeps the CLI from updating itself mid-run.
        env: vec![(s("GROK_DISABLE_AUTOUPDATER"), s("1"))],
        ..Launch::default()
    };
    if let Some(m) = &inv.mcp {
        // [S] [mcp_servers.<name>] in a repo-level .grok/config.toml.
        let mut toml = format!(
            "[mcp_servers.{}]\ncommand = {}\nargs = {}\n",
            toml_key(m.name),
            toml_str(m.command),
            toml_str_array(m.args)
        );
        if !m.env.is_empty() {
            toml.push_str(&format!("env = {}\n", toml_inline_env(m.env)));
        }
        launch.workspace_files.push((s(".grok/config.toml"), toml));
    }
    launch
}

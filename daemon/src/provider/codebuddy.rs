//! Tencent CodeBuddy Code (`codebuddy -p --output-format stream-json`), which copies Claude
//! Code's flags. Not installable here: flags from cloud.tencent.com/document/product/1831/137040
//! and /137014 [D]; the stream is assumed to be Claude's stream-json and is parsed by
//! [`super::claude::ClaudeParser`].

use serde_json::Value;

use super::{
    Capabilities, Invocation, Launch, NetworkControl, ProviderSpec, claude::mcp_tool_names, mcp_servers_json,
    positional, s,
};
use crate::oacp::Mode;

pub(super) const SPEC: ProviderSpec = ProviderSpec {
    id: crate::launch::ProviderId::Codebuddy,
    display_name: "CodeBuddy Code",
    // several vendors' models, chosen per run.
    family: None,
    default_bin: "codebuddy",
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
    env_prefixes: &["CODEBUDDY_"],
    state_dirs: &[],
    config_env: None,
    config_files: &[],
    install: None,
    own_sandbox: false,
    mcp_from_workspace: false,
    launch,
    parser: super::claude::ClaudeParser::new_boxed,
};

pub(super) fn launch(inv: &Invocation) -> Launch {
    // Prompt right after -p, as for claude: --mcp-config and --allowedTools are variadic there.
    let mut args = vec![s("-p"), positional(inv.prompt), s("--output-format"), s("stream-json")];
    match inv.mode {
        Mode::ReadOnly => args.extend([s("--permission-mode"), s("plan")]),
        // [D] -y is required in -p mode for any tool that needs authorization.
        Mode::Write => args.push(s("-y")),
    }
    if let Some(m) = inv.model {
        args.extend([s("--model"), s(m)]);
    }
    if let Some(id) = inv.resume_session {
        args.extend([s("-r"), s(id)]);
    }
    if let Some(m) = &inv.mcp {
        let config = mcp_servers_json(m, &[("type", Value::from("stdio"))]);
        args.extend([s("--mcp-config"), config.to_string()]);
        args.extend([s("--allowedTools"), mcp_tool_names(m.name, m.tools)]);
    }
    Launch { args, ..Launch::default() }
}

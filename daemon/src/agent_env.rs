//! The environment an agent gets (issue 19): an allowlist per adapter
//! instead of the daemon's whole environment, which is frozen from whichever
//! client first started the daemon and may hold any secret of the user's
//! shell. What passes: the basics every CLI needs (PATH, HOME, the locale,
//! TERM, TMPDIR, the XDG directories, proxies and CA bundles), caesar's own
//! locations (so that an agent's `caesar` reaches the same daemon), the
//! provider's own variables (by prefix, data per adapter), and what the user
//! adds by name or `PREFIX*` in the daemon's `CAESAR_PASS_ENV`
//! (comma-separated). `[[agent]] env` and the adapter's own variables are
//! added by the launch on top.

use std::ffi::OsString;

/// The daemon's variable naming extra variables to pass.
pub const PASS_ENV: &str = "CAESAR_PASS_ENV";

/// Every agent's variables, by exact name.
const BASE: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CAESAR_HOME",
    "CAESAR_SOCKET",
    "CAESAR_DAEMON_BIN",
    "CAESAR_MCP_BIN",
    "CAESAR_KILL_GRACE_MS",
];

/// Every agent's variables, by prefix.
const BASE_PREFIXES: &[&str] = &["LC_"];

/// A provider's own variables, by prefix (adapter data).
pub fn provider_prefixes(provider: &str) -> &'static [&'static str] {
    match provider {
        "claude" => &["ANTHROPIC_", "CLAUDE_", "DISABLE_", "MCP_", "AWS_", "CLOUD_ML_REGION", "VERTEX_"],
        "codex" => &["OPENAI_", "CODEX_", "AZURE_OPENAI_"],
        "gemini" => &["GEMINI_", "GOOGLE_"],
        "qwen" => &["QWEN_", "DASHSCOPE_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"],
        "opencode" => &[
            "OPENCODE_",
            "ANTHROPIC_",
            "OPENAI_",
            "GEMINI_",
            "GOOGLE_",
            "OPENROUTER_",
            "GROQ_",
            "XAI_",
            "MISTRAL_",
            "DEEPSEEK_",
            "AWS_",
            "AZURE_",
        ],
        "copilot" => &["COPILOT_", "GH_", "GITHUB_"],
        "cursor" => &["CURSOR_"],
        "grok" => &["GROK_", "XAI_"],
        "codebuddy" => &["CODEBUDDY_"],
        "antigravity" => &["ANTIGRAVITY_", "GEMINI_", "GOOGLE_"],
        _ => &[],
    }
}

fn passes(name: &str, provider: &str, extra: &[String]) -> bool {
    BASE.contains(&name)
        || BASE_PREFIXES.iter().chain(provider_prefixes(provider)).any(|p| name.starts_with(p))
        || extra.iter().any(|e| match e.strip_suffix('*') {
            Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
            None => e == name,
        })
}

/// The variables of `vars` (the daemon's environment) that an agent of
/// `provider` gets.
pub fn allowed(provider: &str, vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let extra: Vec<String> = std::env::var(PASS_ENV)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    vars.filter(|(k, _)| k.to_str().is_some_and(|k| passes(k, provider, &extra))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_allowlist_passes() {
        let vars =
            [("PATH", "/bin"), ("SECRET_X", "s"), ("ANTHROPIC_API_KEY", "k"), ("LC_ALL", "C"), ("OPENAI_API_KEY", "o")]
                .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got: Vec<String> =
            allowed("claude", vars.clone().into_iter()).into_iter().map(|(k, _)| k.into_string().unwrap()).collect();
        assert_eq!(got, ["PATH", "ANTHROPIC_API_KEY", "LC_ALL"]);
        assert!(
            passes("FAKE_KEY", "codex", &["FAKE_KEY".into()]) && passes("npm_config_x", "x", &["npm_config_*".into()])
        );
        assert!(!passes("SECRET_X", "generic", &["*".into()]), "a bare * passes nothing");
    }
}

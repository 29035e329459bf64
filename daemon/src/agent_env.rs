//! The environment an agent gets (issue 19): an allowlist per adapter
//! instead of the daemon's whole environment, which is frozen from whichever
//! client first started the daemon and may hold any secret of the user's
//! shell. What passes: the basics every CLI needs (PATH, HOME, the locale,
//! TERM, TMPDIR, the XDG directories, proxies and CA bundles), caesar's own
//! locations (so that an agent's `caesar` reaches the same daemon), the
//! provider's own variables (by prefix, data per adapter), and what the user
//! adds by name or `PREFIX*` in the daemon's `CAESAR_PASS_ENV`
//! (comma-separated). `[[agent]] env` and the adapter's own variables are
//! added by the launch on top. For codex, the variables its own config names
//! for its model providers (`[model_providers.<id>] env_key` and the values of
//! `env_http_headers`) pass too: [`codex_config_names`].

use std::ffi::OsString;

use crate::launch::ProviderId;

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
    // The box's own switch (`boxed.rs`): its launcher decides as the daemon did.
    "CAESAR_PID_NS",
];

/// Every agent's variables, by prefix.
const BASE_PREFIXES: &[&str] = &["LC_"];

/// A provider's own variables, by prefix (its adapter's data); none for a
/// generic agent, which names what it needs in `[[agent]] env`.
pub fn provider_prefixes(provider: ProviderId) -> &'static [&'static str] {
    crate::provider::adapter(provider).map_or(&[], |a| a.env_prefixes)
}

fn passes(name: &str, provider: ProviderId, extra: &[String]) -> bool {
    BASE.contains(&name)
        || BASE_PREFIXES.iter().chain(provider_prefixes(provider)).any(|p| name.starts_with(p))
        || extra.iter().any(|e| match e.strip_suffix('*') {
            Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
            None => e == name,
        })
}

/// The variables of `vars` (the daemon's environment) that an agent of
/// `provider` gets.
pub fn allowed(provider: ProviderId, vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let mut extra: Vec<String> = std::env::var(PASS_ENV)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if provider == ProviderId::Codex {
        extra.extend(codex_config_names(&codex_config_path()));
    }
    vars.filter(|(k, _)| k.to_str().is_some_and(|k| passes(k, provider, &extra))).collect()
}

/// The cap on codex's `config.toml` as read here (the user's file; a larger
/// one passes no names).
const CODEX_CONFIG_CAP: u64 = 1024 * 1024;

/// At most this many names are taken from codex's config.
const CODEX_NAMES_MAX: usize = 64;

/// Where the daemon's codex reads its config: `$CODEX_HOME/config.toml`,
/// else `~/.codex/config.toml`.
fn codex_config_path() -> std::path::PathBuf {
    match std::env::var_os("CODEX_HOME").map(std::path::PathBuf::from).filter(|p| p.is_absolute()) {
        Some(dir) => dir.join("config.toml"),
        None => std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default().join(".codex/config.toml"),
    }
}

/// The environment variables a codex config at `path` reads for its model
/// providers: each `[model_providers.<id>] env_key` and each value of its
/// `env_http_headers` table (header name → variable name). The file is read
/// as the global config is (a link is followed, as a dotfile manager makes
/// one, but it must be a regular file under 1 MiB and is never waited on);
/// only names made of `A-Z a-z 0-9 _` that do not start with a digit are
/// taken, at most 64 of them. A missing, unreadable or invalid file passes
/// no names: codex then says which variable it lacks.
pub fn codex_config_names(path: &std::path::Path) -> Vec<String> {
    let Ok(text) = crate::safe_fs::read_following_to_string(path, CODEX_CONFIG_CAP) else { return Vec::new() };
    let Ok(config) = text.parse::<toml::Table>() else { return Vec::new() };
    let Some(providers) = config.get("model_providers").and_then(toml::Value::as_table) else { return Vec::new() };
    let mut names = Vec::new();
    for provider in providers.values().filter_map(toml::Value::as_table) {
        names.extend(provider.get("env_key").and_then(toml::Value::as_str).map(str::to_owned));
        if let Some(headers) = provider.get("env_http_headers").and_then(toml::Value::as_table) {
            names.extend(headers.values().filter_map(toml::Value::as_str).map(str::to_owned));
        }
    }
    names.retain(|n| is_variable_name(n));
    names.sort();
    names.dedup();
    names.truncate(CODEX_NAMES_MAX);
    names
}

/// A portable environment variable name, of at most 128 bytes.
fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 128
        && bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defect of issue 28: the table keyed cursor-agent's variables on
    /// `cursor`, which is no provider id, so its agent lost `CURSOR_API_KEY`.
    #[test]
    fn cursor_agent_keeps_its_own_variables() {
        let vars =
            [("CURSOR_API_KEY", "k"), ("OPENAI_API_KEY", "o")].map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got: Vec<OsString> =
            allowed(ProviderId::CursorAgent, vars.into_iter()).into_iter().map(|(k, _)| k).collect();
        assert_eq!(got, [OsString::from("CURSOR_API_KEY")]);
    }

    #[test]
    fn only_the_allowlist_passes() {
        let vars =
            [("PATH", "/bin"), ("SECRET_X", "s"), ("ANTHROPIC_API_KEY", "k"), ("LC_ALL", "C"), ("OPENAI_API_KEY", "o")]
                .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got: Vec<String> = allowed(crate::launch::ProviderId::of("claude"), vars.clone().into_iter())
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect();
        assert_eq!(got, ["PATH", "ANTHROPIC_API_KEY", "LC_ALL"]);
        assert!(
            passes("FAKE_KEY", crate::launch::ProviderId::of("codex"), &["FAKE_KEY".into()])
                && passes("npm_config_x", ProviderId::Generic, &["npm_config_*".into()])
        );
        assert!(!passes("SECRET_X", ProviderId::Generic, &["*".into()]), "a bare * passes nothing");
    }

    #[test]
    fn codex_config_names_are_its_providers_env_keys_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.toml");
        assert!(codex_config_names(&path).is_empty(), "no file, no names");
        std::fs::write(
            &path,
            "model_provider = \"a\"\nenv_key = \"TOP_LEVEL_IGNORED\"\n\
             [model_providers.a]\nenv_key = \"A_KEY\"\nenv_http_headers = { \"x-org\" = \"A_ORG\" }\n\
             [model_providers.b]\nenv_key = \"B_KEY\"\n\
             [model_providers.c]\nenv_key = \"BAD=NAME\"\n\
             [model_providers.d]\nenv_key = \"9STARTS_WITH_DIGIT\"\n\
             [model_providers.e]\nenv_key = 7\n",
        )
        .unwrap();
        assert_eq!(codex_config_names(&path), ["A_KEY", "A_ORG", "B_KEY"]);
        // An invalid file, and a FIFO (never waited on), pass nothing.
        std::fs::write(&path, "[model_providers.a\nenv_key = \"A_KEY\"").unwrap();
        assert!(codex_config_names(&path).is_empty());
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(codex_config_names(&path).is_empty());
    }
}

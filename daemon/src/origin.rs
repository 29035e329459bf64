//! Where the daemon's environment came from: a fact about this process,
//! taken once at start, that `caesar doctor` and the dashboard show.

/// Where the daemon's environment came from, said by `caesar doctor`: the
/// processes that started it, and the variables that decide where caesar's
/// files are. Taken when the daemon starts, while its starter still runs.
/// Agents inherit this environment (on top of their provider's needs).
pub fn environment_origin() -> &'static str {
    ENV_ORIGIN.get_or_init(describe_environment)
}

static ENV_ORIGIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn describe_environment() -> String {
    let mut chain = Vec::new();
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..3 {
        if pid <= 1 {
            break;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        chain.push(format!("{} ({pid})", comm.trim()));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The parent pid is the second field after the parenthesized name.
        pid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0);
    }
    let starter = if chain.is_empty() { "init or a service manager".to_owned() } else { chain.join(" <- ") };
    let shown: Vec<String> = ["CAESAR_HOME", "CAESAR_SOCKET", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME"]
        .iter()
        .map(|k| format!("{k} {}", if std::env::var_os(k).is_some() { "set" } else { "unset" }))
        .collect();
    format!(
        "started by {starter}; {}; {} variables in all, which agents inherit",
        shown.join(", "),
        std::env::vars_os().count()
    )
}

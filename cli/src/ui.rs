//! `caesar ui`: asks the daemon for a one-time login link to its web
//! dashboard (opening a loopback listener on demand when `[http]` has none),
//! prints it, and opens it in a browser where one can be found. A machine
//! without a browser is not an error: the link is printed either way.

use std::path::Path;
use std::process::{Command, Stdio};

use caesar_proto::client::Client;
use caesar_proto::pb;
use serde_json::json;

/// Prints the login link and opens it unless `no_open`.
pub async fn run(mut c: Client, workspace: String, no_open: bool, json: bool) -> anyhow::Result<u8> {
    let r = c.open_dashboard(pb::OpenDashboardRequest { workspace }).await?.into_inner();
    let opened = if no_open { None } else { open_browser(&r.login_url) };
    if json {
        println!(
            "{}",
            json!({
                "login_url": r.login_url,
                "base_url": r.base_url,
                "opened_on_demand": r.opened_on_demand,
                "login_valid_secs": r.login_valid_secs,
                "browser": opened,
            })
        );
        return Ok(0);
    }
    println!("dashboard: {}", r.base_url);
    println!("log in (once, within {} minutes): {}", r.login_valid_secs / 60, r.login_url);
    if r.opened_on_demand {
        println!("(no [http] listen is configured: the daemon opened this port for the dashboard until it stops)");
    }
    match opened {
        Some(how) => println!("opened in the browser ({how})"),
        None if no_open => {}
        None => println!("no browser found here: open the link above in one on this machine"),
    }
    Ok(0)
}

/// Starts the platform's opener on `url`, detached; the opener's name, or
/// `None` when there is none (or no display to show it on).
fn open_browser(url: &str) -> Option<&'static str> {
    let candidates: &[&'static str] = if cfg!(target_os = "macos") {
        &["open"]
    } else {
        let has_display = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
        if !has_display {
            return None;
        }
        &["xdg-open"]
    };
    for name in candidates {
        if !on_path(name) {
            continue;
        }
        let spawned =
            Command::new(name).arg(url).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        if spawned.is_ok() {
            return Some(name);
        }
    }
    None
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(name))))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

//! `caesar daemon install|uninstall|logs`: caesard under the user's service
//! manager (a systemd user unit with socket activation on Linux, a launchd
//! agent on macOS), and its log.
//!
//! The unit files are the ones in `packaging/`, compiled in, with the
//! paths of this installation filled in.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

const SERVICE: &str = include_str!("../../packaging/systemd/caesard.service");
const SOCKET: &str = include_str!("../../packaging/systemd/caesard.socket");
const PLIST: &str = include_str!("../../packaging/launchd/dev.caesar.caesard.plist");

/// One file the service manager needs, with its content.
pub struct UnitFile {
    pub path: PathBuf,
    pub content: String,
}

/// What `install` writes (and `uninstall` removes) for this system.
pub fn unit_files(caesard: &Path, log: &Path) -> anyhow::Result<Vec<UnitFile>> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from).context("HOME is not set")?;
    if cfg!(target_os = "macos") {
        let content =
            PLIST.replace("@CAESARD@", &caesard.display().to_string()).replace("@LOG@", &log.display().to_string());
        return Ok(vec![UnitFile { path: home.join("Library/LaunchAgents/dev.caesar.caesard.plist"), content }]);
    }
    let dir = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".config"))
        .join("systemd/user");
    let service = SERVICE.replace("ExecStart=%h/.cargo/bin/caesard", &format!("ExecStart={}", caesard.display()));
    Ok(vec![
        UnitFile { path: dir.join("caesard.service"), content: service },
        UnitFile { path: dir.join("caesard.socket"), content: SOCKET.to_owned() },
    ])
}

/// The commands that enable (or disable) the units, for this system.
pub fn manager_commands(files: &[UnitFile], enable: bool) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    if cfg!(target_os = "macos") {
        let uid = nix_uid();
        let plist = files[0].path.display().to_string();
        return if enable {
            vec![s(&["launchctl", "bootstrap", &format!("gui/{uid}"), &plist])]
        } else {
            vec![s(&["launchctl", "bootout", &format!("gui/{uid}/dev.caesar.caesard")])]
        };
    }
    if enable {
        vec![
            s(&["systemctl", "--user", "daemon-reload"]),
            s(&["systemctl", "--user", "enable", "--now", "caesard.socket"]),
        ]
    } else {
        vec![
            s(&["systemctl", "--user", "disable", "--now", "caesard.socket", "caesard.service"]),
            s(&["systemctl", "--user", "daemon-reload"]),
        ]
    }
}

fn nix_uid() -> u32 {
    std::fs::metadata(std::env::var_os("HOME").unwrap_or_default())
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0)
}

/// Writes the unit files and enables them (or with `dry_run` only says so).
/// Returns what was done, line by line.
pub fn install(caesard: &Path, log: &Path, dry_run: bool, uninstall: bool) -> anyhow::Result<Vec<String>> {
    let files = unit_files(caesard, log)?;
    let mut done = Vec::new();
    if uninstall {
        for cmd in manager_commands(&files, false) {
            done.push(run(&cmd, dry_run)?);
        }
        for f in &files {
            if f.path.exists() {
                if !dry_run {
                    std::fs::remove_file(&f.path).with_context(|| format!("cannot remove {}", f.path.display()))?;
                }
                done.push(format!("remove {}", f.path.display()));
            }
        }
        return Ok(done);
    }
    if !caesard.is_file() {
        bail!(
            "{} does not exist: install caesard first (cargo install --locked --path packaging/caesar)",
            caesard.display()
        );
    }
    for f in &files {
        if dry_run {
            done.push(format!("write {}:\n{}", f.path.display(), f.content));
            continue;
        }
        if let Some(parent) = f.path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&f.path, &f.content).with_context(|| format!("cannot write {}", f.path.display()))?;
        done.push(format!("wrote {}", f.path.display()));
    }
    for cmd in manager_commands(&files, true) {
        done.push(run(&cmd, dry_run)?);
    }
    Ok(done)
}

fn run(cmd: &[String], dry_run: bool) -> anyhow::Result<String> {
    let line = cmd.join(" ");
    if dry_run {
        return Ok(format!("run {line}"));
    }
    match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(s) if s.success() => Ok(format!("ran {line}")),
        Ok(s) => Ok(format!("`{line}` failed ({s}): run it yourself once the service manager is up")),
        Err(e) => Ok(format!("could not run `{line}` ({e}): run it yourself")),
    }
}

/// The last `lines` lines of the daemon's log (and the rotated one before
/// it, when the current one is shorter).
pub fn log_tail(log: &Path, lines: usize) -> anyhow::Result<Vec<String>> {
    let mut all: Vec<String> = Vec::new();
    for p in [log.with_extension("log.1"), log.to_path_buf()] {
        if let Ok(text) = std::fs::read_to_string(&p) {
            all.extend(text.lines().map(str::to_owned));
        }
    }
    if all.is_empty() && !log.exists() {
        bail!("no daemon log at {} yet: the daemon has not run here", log.display());
    }
    let skip = all.len().saturating_sub(lines);
    Ok(all.split_off(skip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_carry_this_installation_s_paths() {
        let files = unit_files(Path::new("/opt/caesar/caesard"), Path::new("/s/caesard.log")).unwrap();
        if cfg!(target_os = "macos") {
            assert!(files[0].content.contains("<string>/opt/caesar/caesard</string>"));
        } else {
            assert!(files[0].content.contains("ExecStart=/opt/caesar/caesard"));
            assert!(files[0].content.contains("KillMode=process") && files[0].content.contains("Type=notify"));
            assert!(files[1].content.contains("SocketMode=0600"));
        }
    }
}

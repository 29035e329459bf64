//! Where caesar keeps its socket, state and configuration.
//!
//! Defaults follow the XDG base directories: the socket in
//! `$XDG_RUNTIME_DIR/caesar/`, state in `$XDG_STATE_HOME/caesar`, config in
//! `$XDG_CONFIG_HOME/caesar`. `CAESAR_HOME=<dir>` relocates all three under
//! one directory (`<dir>/run`, `<dir>/state`, `<dir>/config`), and
//! `CAESAR_SOCKET` overrides the socket path alone.

use std::io;
use std::path::{Path, PathBuf};

/// The file name of the daemon's socket inside the runtime directory.
pub const SOCKET_NAME: &str = "caesard.sock";

/// The resolved locations of one caesar installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The daemon's socket (a named pipe name on Windows).
    pub socket: PathBuf,
    /// The directory that holds the socket and the instance lock.
    pub runtime_dir: PathBuf,
    /// The store, task directories and daemon log.
    pub state_dir: PathBuf,
    /// The global configuration layer.
    pub config_dir: PathBuf,
}

impl Paths {
    /// Resolves the paths from the environment.
    pub fn from_env() -> io::Result<Paths> {
        let home = std::env::var_os("CAESAR_HOME").filter(|v| !v.is_empty());
        let socket_override = std::env::var_os("CAESAR_SOCKET").filter(|v| !v.is_empty());
        let mut paths = match home {
            Some(home) => Paths::under(Path::new(&home)),
            None => Paths::xdg()?,
        };
        if let Some(socket) = socket_override {
            let socket = PathBuf::from(socket);
            if let Some(parent) = socket.parent().filter(|p| !p.as_os_str().is_empty()) {
                paths.runtime_dir = parent.to_path_buf();
            }
            paths.socket = socket;
        }
        Ok(paths)
    }

    /// All paths under one directory, as `CAESAR_HOME` asks.
    pub fn under(home: &Path) -> Paths {
        let runtime_dir = home.join("run");
        Paths {
            socket: runtime_dir.join(SOCKET_NAME),
            runtime_dir,
            state_dir: home.join("state"),
            config_dir: home.join("config"),
        }
    }

    fn xdg() -> io::Result<Paths> {
        let base = directories::BaseDirs::new().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "cannot find the home directory: set HOME, or CAESAR_HOME=<dir> to keep caesar's files there",
            )
        })?;
        let state_dir = base.state_dir().unwrap_or_else(|| base.data_local_dir()).join("caesar");
        let config_dir = base.config_dir().join("caesar");
        let runtime_dir = match base.runtime_dir() {
            Some(dir) => dir.join("caesar"),
            None => private_tmp_dir(),
        };
        Ok(Paths { socket: runtime_dir.join(SOCKET_NAME), runtime_dir, state_dir, config_dir })
    }

    /// The lock file that makes the daemon single-instance for this socket.
    pub fn lock_file(&self) -> PathBuf {
        let mut name = self.socket.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| SOCKET_NAME.into());
        name.push(".lock");
        self.runtime_dir.join(name)
    }

    /// The daemon's log file.
    pub fn daemon_log(&self) -> PathBuf {
        self.state_dir.join("caesard.log")
    }

    /// Creates the runtime and state directories, private to this user.
    pub fn ensure_dirs(&self) -> io::Result<()> {
        create_private_dir(&self.runtime_dir)?;
        create_private_dir(&self.state_dir)?;
        Ok(())
    }
}

/// A short per-user directory under the system temp dir, for systems with no
/// `XDG_RUNTIME_DIR` (macOS keeps socket paths under 104 bytes).
fn private_tmp_dir() -> PathBuf {
    #[cfg(unix)]
    let user = nix::unistd::getuid().as_raw().to_string();
    #[cfg(not(unix))]
    let user = std::env::var("USERNAME").unwrap_or_else(|_| "user".to_owned());
    std::env::temp_dir().join(format!("caesar-{user}"))
}

/// Creates `dir` (and its parents) and makes it 0700. A directory that exists
/// but belongs to another user is refused: someone else could swap our socket.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(dir)?;
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to uid {}, not to you (uid {me}): remove it or set CAESAR_HOME",
                    dir.display(),
                    meta.uid()
                ),
            ));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caesar_home_puts_everything_under_one_directory() {
        let p = Paths::under(Path::new("/x/h"));
        assert_eq!(p.socket, Path::new("/x/h/run/caesard.sock"));
        assert_eq!(p.state_dir, Path::new("/x/h/state"));
        assert_eq!(p.config_dir, Path::new("/x/h/config"));
        assert_eq!(p.lock_file(), Path::new("/x/h/run/caesard.sock.lock"));
    }

    #[test]
    fn private_dir_is_made_0700() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = std::env::temp_dir().join(format!("caesar-paths-test-{}", std::process::id()));
        let dir = tmp.join("a/b");
        create_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

//! Where caesar keeps its socket, state and configuration.
//!
//! Defaults follow the XDG base directories: the socket in
//! `$XDG_RUNTIME_DIR/caesar/`, state in `$XDG_STATE_HOME/caesar`, config in
//! `$XDG_CONFIG_HOME/caesar`. Without `XDG_RUNTIME_DIR` the socket goes in
//! `<state>/run/` (or, when that path is too long for a socket,
//! `$TMPDIR/caesar-<uid>/`). `CAESAR_HOME=<dir>` relocates all three under
//! one directory (`<dir>/run`, `<dir>/state`, `<dir>/config`), and
//! `CAESAR_SOCKET` overrides the socket path alone.
//!
//! Two clients of one state directory may compute different sockets (one
//! has `XDG_RUNTIME_DIR`, the other was started by a host with a minimal
//! environment). The daemon is single-instance per state directory (its
//! lock is [`Paths::lock_file`]) and says where it listens in
//! [`Paths::record_file`], so every client finds the same daemon
//! (see [`crate::instance`]).

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
    /// The socket was set by `CAESAR_SOCKET`: its directory is the user's
    /// choice, created when missing but otherwise left as it is.
    pub socket_overridden: bool,
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
            paths.socket_overridden = true;
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
            socket_overridden: false,
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
            None => fallback_runtime_dir(&state_dir),
        };
        Ok(Paths {
            socket: runtime_dir.join(SOCKET_NAME),
            runtime_dir,
            state_dir,
            config_dir,
            socket_overridden: false,
        })
    }

    /// The lock file that makes the daemon single-instance for this state
    /// directory, whatever socket it serves: the store is what two daemons
    /// must never share.
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join("caesard.lock")
    }

    /// Where the running daemon records its socket, pid and protocol, for
    /// clients that computed another socket (see [`crate::instance`]).
    pub fn record_file(&self) -> PathBuf {
        self.state_dir.join("caesard.json")
    }

    /// The daemon's log file.
    pub fn daemon_log(&self) -> PathBuf {
        self.state_dir.join("caesard.log")
    }

    /// Creates the runtime and state directories, private to this user.
    ///
    /// Nothing that exists is ever chmodded: a directory caesar names
    /// itself must already be private (it is, when caesar created it), and
    /// the directory of a `CAESAR_SOCKET` is the user's business.
    pub fn ensure_dirs(&self) -> io::Result<()> {
        if self.socket_overridden {
            create_missing_dir(&self.runtime_dir)?;
        } else {
            create_private_dir(&self.runtime_dir, Follow::No)?;
        }
        create_private_dir(&self.state_dir, Follow::Yes)?;
        Ok(())
    }
}

/// Socket paths longer than this do not fit `sockaddr_un` on every system
/// (108 bytes on Linux, 104 on macOS, both with the final NUL).
const MAX_SOCKET_PATH: usize = 100;

/// The runtime directory when there is no `XDG_RUNTIME_DIR`: `<state>/run`,
/// private because the state directory is, unless the socket path would be
/// too long; then a per-user directory under the system temp dir.
fn fallback_runtime_dir(state_dir: &Path) -> PathBuf {
    let beside_state = state_dir.join("run");
    if beside_state.join(SOCKET_NAME).as_os_str().len() <= MAX_SOCKET_PATH {
        return beside_state;
    }
    #[cfg(unix)]
    let user = nix::unistd::getuid().as_raw().to_string();
    #[cfg(not(unix))]
    let user = std::env::var("USERNAME").unwrap_or_else(|_| "user".to_owned());
    std::env::temp_dir().join(format!("caesar-{user}"))
}

/// Whether [`create_private_dir`] accepts `dir` itself being a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// The user may have moved the directory elsewhere with a symlink.
    Yes,
    /// A symlink is refused: the directory may sit in a place others can
    /// write (`/tmp`), where a symlink is someone else's redirection.
    No,
}

/// Creates `dir` (and missing parents) mode 0700, then checks that it is a
/// directory of this user that nobody else can enter. A directory that
/// fails is refused, never repaired: someone else could swap our socket.
pub fn create_private_dir(dir: &Path, follow: Follow) -> io::Result<()> {
    create_missing_dir(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let mut flags = nix::fcntl::OFlag::O_DIRECTORY;
        if follow == Follow::No {
            flags |= nix::fcntl::OFlag::O_NOFOLLOW;
        }
        // The checks are made on the opened directory (fstat), so what is
        // checked is what was opened, not what a path names a moment later.
        let opened = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(dir);
        let meta = match opened {
            Ok(d) => d.metadata()?,
            Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) || e.raw_os_error() == Some(nix::libc::ENOTDIR) => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is a symlink or not a directory, so it may not be caesar's: remove it, or set XDG_RUNTIME_DIR or CAESAR_HOME",
                        dir.display()
                    ),
                ));
            }
            Err(e) => return Err(e),
        };
        check_private(dir, meta.uid(), meta.mode(), nix::unistd::geteuid().as_raw())?;
    }
    #[cfg(not(unix))]
    let _ = follow;
    Ok(())
}

/// The rule of [`create_private_dir`], apart for testing: owned by `me`,
/// no access for group or others.
#[cfg(unix)]
fn check_private(dir: &Path, owner: u32, mode: u32, me: u32) -> io::Result<()> {
    if owner != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {owner}, not to you (uid {me}): remove it, or set XDG_RUNTIME_DIR or CAESAR_HOME",
                dir.display()
            ),
        ));
    }
    if mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is mode {:o}, open to other users; caesar keeps its socket and store only in private directories: `chmod 700 {}`",
                dir.display(),
                mode & 0o777,
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Creates `dir` and its missing parents, mode 0700 (less the umask); what
/// exists is left untouched.
fn create_missing_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(&format!("caesar-paths-{name}")).tempdir().unwrap()
    }

    #[test]
    fn caesar_home_puts_everything_under_one_directory() {
        let p = Paths::under(Path::new("/x/h"));
        assert_eq!(p.socket, Path::new("/x/h/run/caesard.sock"));
        assert_eq!(p.state_dir, Path::new("/x/h/state"));
        assert_eq!(p.config_dir, Path::new("/x/h/config"));
        assert_eq!(p.lock_file(), Path::new("/x/h/state/caesard.lock"));
        assert_eq!(p.record_file(), Path::new("/x/h/state/caesard.json"));
    }

    #[test]
    fn without_a_runtime_dir_the_socket_goes_beside_the_state() {
        assert_eq!(
            fallback_runtime_dir(Path::new("/home/u/.local/state/caesar")),
            Path::new("/home/u/.local/state/caesar/run")
        );
        let long = PathBuf::from(format!("/home/{}/.local/state/caesar", "u".repeat(80)));
        let tmp = fallback_runtime_dir(&long);
        assert!(tmp.starts_with(std::env::temp_dir()), "{}", tmp.display());
        assert!(tmp.join(SOCKET_NAME).as_os_str().len() <= MAX_SOCKET_PATH);
    }

    #[test]
    fn private_dir_is_made_0700() {
        let tmp = scratch("mode");
        let dir = tmp.path().join("a/b");
        create_private_dir(&dir, Follow::No).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_symlinked_runtime_dir_is_refused() {
        // What another user could plant as /tmp/caesar-<uid>: a symlink to
        // a directory of their choice (here one of ours, already private).
        let tmp = scratch("symlink");
        let target = tmp.path().join("elsewhere");
        create_private_dir(&target, Follow::No).unwrap();
        let planted = tmp.path().join("caesar-0");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let err = create_private_dir(&planted, Follow::No).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("symlink"), "{err}");
        // The state directory may be a symlink of the user's own.
        create_private_dir(&planted, Follow::Yes).unwrap();
    }

    #[test]
    fn an_open_or_foreign_directory_is_refused_and_left_alone() {
        let tmp = scratch("open");
        let dir = tmp.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = create_private_dir(&dir, Follow::No).unwrap_err();
        assert!(err.to_string().contains("chmod 700"), "{err}");
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o755);
        let err = check_private(&dir, 1234, 0o700, 1000).unwrap_err();
        assert!(err.to_string().contains("belongs to uid 1234"), "{err}");
        check_private(&dir, 1000, 0o40700, 1000).unwrap();
    }

    #[test]
    fn the_directory_of_an_explicit_socket_is_never_chmodded() {
        // `CAESAR_SOCKET=/tmp/x.sock` used to make /tmp 0700.
        let tmp = scratch("explicit");
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let home = tmp.path().join("home");
        let mut paths = Paths::under(&home);
        paths.socket = shared.join("x.sock");
        paths.runtime_dir = shared.clone();
        paths.socket_overridden = true;
        paths.ensure_dirs().unwrap();
        assert_eq!(std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777, 0o1777);
        // A missing one is created private.
        paths.runtime_dir = tmp.path().join("new/dir");
        paths.ensure_dirs().unwrap();
        assert_eq!(std::fs::metadata(&paths.runtime_dir).unwrap().permissions().mode() & 0o777, 0o700);
    }
}

//! The body of the `caesard` and `caesar-mcp` launchers: start the `caesar`
//! binary beside this one under the launcher's name, in this process
//! (`exec`), with the same arguments. A launcher uses none of caesar's
//! libraries, so linking it costs nothing; the shared code is linked once,
//! into `caesar`.

use std::process::ExitCode;

/// Replaces this process with `caesar` started as `name`; returns only when
/// that is impossible, saying why and how to fix it.
pub fn exec_as(name: &str) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let beside = match std::env::current_exe() {
        Ok(me) => me.with_file_name(if cfg!(windows) { "caesar.exe" } else { "caesar" }),
        Err(e) => {
            eprintln!("{name}: cannot find where this binary is ({e}); run `caesar` instead");
            return ExitCode::from(127);
        }
    };
    // The name as this launcher was started (a full path keeps `ps` and
    // `/proc/<pid>/cmdline` as they were), unless it was started under
    // another name, which `caesar` would not know.
    let arg0 = std::env::args_os()
        .next()
        .filter(|a| std::path::Path::new(a).file_stem() == Some(std::ffi::OsStr::new(name)))
        .unwrap_or_else(|| name.into());
    let err = std::process::Command::new(&beside).arg0(arg0).args(std::env::args_os().skip(1)).exec();
    eprintln!(
        "{name}: cannot start {} ({err}). `{name}` is a launcher for the `caesar` binary installed beside it; reinstall both with `cargo install --locked --path packaging/caesar`",
        beside.display()
    );
    ExitCode::from(127)
}

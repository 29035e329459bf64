//! `caesard`, the per-user daemon: a launcher for the `caesar` binary beside
//! it, which holds the daemon (`daemon/`, library `caesard`).

#[path = "../launcher.rs"]
mod launcher;

fn main() -> std::process::ExitCode {
    launcher::exec_as("caesard")
}

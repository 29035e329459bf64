//! `caesard`, the per-user daemon. Its code is the `caesard` library (`daemon/`).

fn main() -> std::process::ExitCode {
    caesard::cmd::main()
}

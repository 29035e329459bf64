//! `caesar`, the command line. Its code is the `caesar_cli` library (`cli/`).

fn main() -> std::process::ExitCode {
    caesar_cli::main()
}

//! `caesar-task`: a task's supervisor and its box, which caesard starts
//! twice for every task. It links only that part of the daemon's library,
//! so it starts faster than `caesar` (`caesard::supervisor::executable`);
//! where it is missing, the daemon starts `caesar` with the same arguments.

fn main() -> std::process::ExitCode {
    caesard::cmd::task_main()
}

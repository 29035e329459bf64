//! Support code shared by the end-to-end tests and the tools in `src/bin`.

pub mod bench;
pub mod fuzzing;
pub mod k8s_sim;
pub mod model_server;

/// The daemon's part of the task whose directory is `task_dir`
/// (`<state>/tasks/<id>.daemon/`), where the daemon and the supervisor keep
/// the files they trust: raw.log, exit.json, agent.json, supervisor.log,
/// stdin.initial, session.open.json, prompt.txt, report.channel.json.
pub fn daemon_files(task_dir: impl AsRef<std::path::Path>) -> std::path::PathBuf {
    let dir = task_dir.as_ref();
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.with_file_name(format!("{name}.daemon"))
}

//! Processes that a task's helper commands leave behind (its worktree `setup`, its `verify`
//! commands): each command runs in a process group of its own with a marker variable in its
//! environment, which its descendants inherit, so that this daemon, or a later one after a
//! crash, finds them in `/proc` and kills them with their groups. One function serves both
//! markers (`workshop::SETUP_MARKER`, `engine::verify::VERIFY_MARKER`).

/// Pids of the processes, this one excepted, whose environment holds `var=value` (Linux; none
/// elsewhere). Only this user's processes show their environment.
pub fn marked_processes(var: &str, value: &str) -> Vec<u32> {
    let marker = format!("{var}={value}");
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|v| v == marker.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILLs every process [`marked_processes`] finds, and the process group it leads (the
/// marked command's own group, where it leads one). Returns how many were found.
pub fn kill_marked(var: &str, value: &str) -> usize {
    let pids = marked_processes(var, value);
    #[cfg(unix)]
    for pid in &pids {
        use nix::sys::signal::{Signal, kill, killpg};
        let pid = nix::unistd::Pid::from_raw(*pid as i32);
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = kill(pid, Signal::SIGKILL);
    }
    pids.len()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    fn live(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with(['Z', 'X'])))
            .is_some_and(|dead| !dead)
    }

    #[test]
    fn a_marked_command_and_what_it_started_are_killed_and_others_are_not() {
        let value = format!("t_{}_{:?}", std::process::id(), Instant::now());
        let spawn = |value: &str| {
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c").arg("sleep 30 & echo $!; wait").env("CAESAR_TEST_MARK", value);
            cmd.stdout(std::process::Stdio::piped()).process_group(0);
            let mut child = cmd.spawn().unwrap();
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            (child, line.trim().parse::<u32>().unwrap())
        };
        let (mut marked, sleeper) = spawn(&value);
        let (mut other, other_sleeper) = spawn("another task");
        assert_eq!(marked_processes("CAESAR_TEST_MARK", &value).len(), 2, "the shell and its sleep");

        assert_eq!(kill_marked("CAESAR_TEST_MARK", &value), 2);
        let status = marked.wait().unwrap();
        assert!(!status.success(), "the shell was killed: {status:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while live(sleeper) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!live(sleeper), "what it started went with it");
        assert!(live(other.id()) && live(other_sleeper), "another marker's processes are left alone");
        assert_eq!(kill_marked("CAESAR_TEST_MARK", &value), 0, "nothing is left to find");

        assert_eq!(kill_marked("CAESAR_TEST_MARK", "another task"), 2);
        let _ = other.wait();
    }
}

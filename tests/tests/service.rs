//! caesard under a service manager: started on an inherited, already
//! listening socket (systemd socket activation), and notifying readiness.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use caesar_proto::pb;
use common::*;

#[tokio::test]
async fn the_daemon_serves_an_inherited_socket_and_notifies_readiness() {
    let env = Env::new(&[("ok", &["environ", "report", "success", "activated"])]);
    // As systemd's DirectoryMode=0700 does: caesar refuses a runtime
    // directory others can enter.
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&env.paths.runtime_dir).unwrap();
    // The service manager's part: bind the socket, and a notify socket.
    let listener = UnixListener::bind(&env.paths.socket).unwrap();
    let notify_path = env.home.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let fd = listener.as_raw_fd();
    let mut cmd = Command::new("sh");
    // LISTEN_PID must be the daemon's own pid: the shell exports its pid and
    // execs the daemon in its place.
    cmd.args(["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\"", &caesard_bin().display().to_string()])
        .envs(env.envs())
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: dup2 is async-signal-safe; fd 3 becomes the listening socket.
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = cmd.spawn().unwrap();
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).expect("READY=1 within 20 s");
    assert_eq!(&buf[..n], b"READY=1");
    drop(listener);

    let (mut c, ping) = caesar_proto::client::connect(&env.paths).await.unwrap();
    assert_eq!(ping.pid, daemon.id());
    let id = c.delegate(env.delegate_request("ok", "x")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, Duration::from_secs(30)).await;
    assert_eq!(json(&t.report_json)["summary"], "activated");
    // The agent did not inherit the activation variables. It printed its
    // whole environment (caesar's own variables are there, so the log is
    // not merely empty), and none of the service manager's is in it.
    let raw = std::fs::read_to_string(caesar_tests::daemon_files(std::path::Path::new(&t.task_dir)).join("raw.log"))
        .unwrap_or_default();
    let names: Vec<&str> = raw.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    assert!(names.contains(&"CAESAR_TASK_ID"), "the agent printed no environment: {raw}");
    for inherited in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET"] {
        assert!(!names.contains(&inherited), "the agent inherited {inherited}: {raw}");
    }

    c.shutdown(pb::ShutdownRequest { cancel_tasks: false, only_if_idle: false }).await.unwrap();
    assert!(daemon.wait().unwrap().success());
    assert!(env.paths.socket.exists(), "an activated daemon leaves the socket to the service manager");
}

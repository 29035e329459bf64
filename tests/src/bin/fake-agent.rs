//! A scripted agent for caesar's tests. It runs its arguments as steps, in
//! order, so a test states exactly how the agent behaves:
//!
//! ```text
//! say TEXT            print TEXT on stdout
//! err TEXT            print TEXT on stderr
//! lines N             print N numbered lines
//! flood BYTES         print BYTES bytes of output in 64 KiB lines
//! badutf8             print a line with invalid UTF-8
//! event JSON          print an OACP event line built from JSON (a body)
//! sleep MS            sleep
//! wait-file PATH      sleep until PATH exists
//! report STATUS TEXT  write a caesar.report/v1 to $CAESAR_REPORT_PATH
//! report-raw JSON     write JSON as the report file
//! report-huge N BYTES write a report with N `changes` and N `findings`, and a
//!                     `details` string of BYTES bytes (issue 19's parse-time caps)
//! fenced STATUS TEXT  print a fenced `json caesar:report` block
//! ignore-term         ignore SIGTERM from now on
//! child PIDFILE       start a child that ignores SIGTERM and hangs; append its pid to PIDFILE
//! escape PIDFILE      the same, but the child leaves the process group (setsid)
//! pid PIDFILE         append our own pid to PIDFILE
//! replay FILE         print FILE's lines on stdout (a real CLI capture)
//! replay-err FILE     print FILE's lines on stderr
//! write PATH TEXT     write TEXT to PATH (relative to the working directory)
//! sh COMMAND          run COMMAND with sh -c, its output to ours
//! mcp-progress MSG   call report_progress on the return channel (an MCP client of it)
//! mcp-ask QUESTION    call ask_orchestrator and print the reply
//! mcp-report JSON     call submit_report and print the reply
//! relay PATH          serve a unix socket at PATH in the background, each
//!                     connection piped to $CAESAR_SOCKET: a test's client
//!                     then reaches the daemon from inside this task's tree
//! stamp FILE          append the wall-clock time (ns since the epoch) to FILE
//! env NAME            print NAME=value of an environment variable
//! environ             print the whole environment, one NAME=value a line
//! hang                sleep forever
//! exit CODE           exit with CODE
//! ```
//!
//! The prompt, when the agent template passes one, is ignored.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let next = |i: &mut usize| -> String {
        *i += 1;
        args.get(*i).cloned().unwrap_or_default()
    };
    let stdout = std::io::stdout();
    let mut channel: Option<Channel> = None;
    while i < args.len() {
        let mut out = stdout.lock();
        match args[i].as_str() {
            "say" => {
                let t = next(&mut i);
                let _ = writeln!(out, "{t}");
            }
            "err" => {
                let t = next(&mut i);
                eprintln!("{t}");
            }
            "lines" => {
                let n: u64 = next(&mut i).parse().unwrap_or(0);
                for k in 0..n {
                    let _ = writeln!(out, "line {k}");
                }
            }
            "flood" => {
                let total: u64 = next(&mut i).parse().unwrap_or(0);
                let chunk = "x".repeat(64 * 1024 - 1) + "\n";
                let mut written = 0;
                while written < total {
                    if out.write_all(chunk.as_bytes()).is_err() {
                        break;
                    }
                    written += chunk.len() as u64;
                }
            }
            "badutf8" => {
                let _ = out.write_all(b"bad \xff\xfe bytes\n");
            }
            "event" => {
                let body: serde_json::Value = serde_json::from_str(&next(&mut i)).unwrap_or_default();
                let mut line = serde_json::json!({"protocol": "caesar.event/v1"});
                if let (Some(l), Some(b)) = (line.as_object_mut(), body.as_object()) {
                    l.extend(b.clone());
                }
                let _ = writeln!(out, "{line}");
            }
            "sleep" => {
                let ms: u64 = next(&mut i).parse().unwrap_or(0);
                drop(out);
                std::thread::sleep(Duration::from_millis(ms));
            }
            "wait-file" => {
                let path = next(&mut i);
                drop(out);
                while !std::path::Path::new(&path).exists() {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            "report" => {
                let status = next(&mut i);
                let summary = next(&mut i);
                let report = serde_json::json!({"protocol": "caesar.report/v1", "status": status, "summary": summary});
                write_report(&report.to_string());
            }
            "report-huge" => {
                let n: usize = next(&mut i).parse().unwrap_or(0);
                let bytes: usize = next(&mut i).parse().unwrap_or(0);
                write_huge_report(n, bytes);
            }
            "report-raw" => {
                let raw = next(&mut i);
                write_report(&raw);
            }
            "fenced" => {
                let status = next(&mut i);
                let summary = next(&mut i);
                let report = serde_json::json!({"protocol": "caesar.report/v1", "status": status, "summary": summary});
                let _ = writeln!(out, "Here is my report:\n```json caesar:report\n{report}\n```");
            }
            "ignore-term" => {
                // SAFETY: installing SIG_IGN has no handler code to be unsafe in.
                unsafe {
                    let _ = nix::sys::signal::signal(
                        nix::sys::signal::Signal::SIGTERM,
                        nix::sys::signal::SigHandler::SigIgn,
                    );
                }
            }
            "child" | "escape" => {
                let escape = args[i] == "escape";
                let pidfile = next(&mut i);
                let mut cmd = Command::new(std::env::current_exe().unwrap_or_default());
                cmd.args(["ignore-term", "pid", &pidfile, "hang"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                if escape {
                    use std::os::unix::process::CommandExt;
                    // SAFETY: setsid is async-signal-safe.
                    unsafe {
                        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
                    }
                }
                let _ = cmd.spawn();
                // Wait until the child has recorded itself.
                std::thread::sleep(Duration::from_millis(100));
            }
            "pid" => {
                let pidfile = next(&mut i);
                // As the host's /proc numbers it: in a task's PID namespace
                // `getpid` answers there.
                let pid = std::fs::read_link("/proc/self")
                    .ok()
                    .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
                    .unwrap_or_else(std::process::id);
                append_line(&pidfile, &pid.to_string());
            }
            "replay" | "replay-err" => {
                let to_stderr = args[i] == "replay-err";
                let file = next(&mut i);
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                for line in text.lines() {
                    if to_stderr {
                        eprintln!("{line}");
                    } else {
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
            "write" => {
                let path = next(&mut i);
                let text = next(&mut i);
                if let Some(parent) = std::path::Path::new(&path).parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                let _ = std::fs::write(&path, text);
            }
            "sh" => {
                let command = next(&mut i);
                drop(out);
                let _ = Command::new("sh").args(["-c", &command]).status();
            }
            "mcp-progress" | "mcp-ask" | "mcp-report" => {
                let step = args[i].clone();
                let arg = next(&mut i);
                drop(out);
                let ch = match channel.as_mut() {
                    Some(c) => c,
                    None => channel.insert(Channel::start()),
                };
                let (tool, arguments) = match step.as_str() {
                    "mcp-progress" => ("report_progress", serde_json::json!({"message": arg, "pct": 50})),
                    "mcp-ask" => ("ask_orchestrator", serde_json::json!({"question": arg})),
                    _ => (
                        "submit_report",
                        serde_json::json!({"report": serde_json::from_str::<serde_json::Value>(&arg).unwrap_or_default()}),
                    ),
                };
                let reply = ch.call(tool, arguments);
                println!("{tool}: {reply}");
            }
            "relay" => {
                let path = next(&mut i);
                drop(out);
                relay(&path);
            }
            "stamp" => {
                let file = next(&mut i);
                let ns = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                append_line(&file, &ns.to_string());
            }
            "env" => {
                let name = next(&mut i);
                let _ = writeln!(out, "{name}={}", std::env::var(&name).unwrap_or_default());
            }
            "environ" => {
                let mut vars: Vec<(String, String)> = std::env::vars_os()
                    .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
                    .collect();
                vars.sort();
                for (k, v) in vars {
                    let _ = writeln!(out, "{k}={v}");
                }
            }
            "hang" => {
                drop(out);
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            "exit" => {
                let code: i32 = next(&mut i).parse().unwrap_or(1);
                let _ = out.flush();
                std::process::exit(code);
            }
            _ => {}
        }
        i += 1;
    }
}

/// Listens at `path` (ready when this returns) and, on a thread, pipes each
/// connection to the daemon's socket, so that the daemon's peer is this
/// process, inside the task's tree. It ends with the agent.
fn relay(path: &str) {
    use std::os::unix::net::{UnixListener, UnixStream};
    let daemon = std::env::var("CAESAR_SOCKET").unwrap_or_default();
    let _ = std::fs::remove_file(path);
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("relay: cannot listen at {path}: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let Ok(upstream) = UnixStream::connect(&daemon) else { continue };
            for (mut from, mut to) in
                [(conn.try_clone(), upstream.try_clone()), (upstream.try_clone(), conn.try_clone())]
                    .into_iter()
                    .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
            {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
}

fn write_report(text: &str) {
    if let Ok(path) = std::env::var("CAESAR_REPORT_PATH") {
        let _ = std::fs::write(path, text);
    }
}

/// Streams a report too big to build in memory comfortably: `n` changes,
/// `n` findings and a `details` string of `bytes` bytes.
fn write_huge_report(n: usize, bytes: usize) {
    let Ok(path) = std::env::var("CAESAR_REPORT_PATH") else { return };
    let Ok(file) = std::fs::File::create(path) else { return };
    let mut w = std::io::BufWriter::new(file);
    let _ = write!(w, r#"{{"protocol":"caesar.report/v1","status":"success","summary":"a huge report","changes":["#);
    for k in 0..n {
        let _ = write!(
            w,
            r#"{}{{"path":"src/f{k}.rs","action":"modified","summary":"change {k}"}}"#,
            if k > 0 { "," } else { "" }
        );
    }
    let _ = write!(w, r#"],"findings":["#);
    for k in 0..n {
        let _ =
            write!(w, r#"{}{{"severity":"info","title":"finding {k}","detail":"d"}}"#, if k > 0 { "," } else { "" });
    }
    let _ = write!(w, r#"],"details":""#);
    let chunk = "x".repeat(64 * 1024);
    let mut left = bytes;
    while left > 0 {
        let take = left.min(chunk.len());
        let _ = w.write_all(&chunk.as_bytes()[..take]);
        left -= take;
    }
    let _ = write!(w, r#""}}"#);
    let _ = w.flush();
}

fn append_line(path: &str, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// A minimal MCP client of the return channel (newline-delimited JSON-RPC
/// over the stdio of `caesar-mcp --channel`), started as task.json says.
struct Channel {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Channel {
    fn start() -> Channel {
        let task: serde_json::Value = std::env::var("CAESAR_TASK_FILE")
            .ok()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let command = task["channel"]["command"].as_str().unwrap_or("caesar-mcp").to_owned();
        let args: Vec<String> = task["channel"]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        let mut child = Command::new(command)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                eprintln!("fake-agent: cannot start the channel: {e}");
                std::process::exit(3);
            });
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            std::process::exit(3);
        };
        let mut ch = Channel { child, input, output: std::io::BufReader::new(output), next_id: 1 };
        ch.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake-agent", "version": "0"}}),
        );
        ch.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        ch
    }

    fn send(&mut self, message: &serde_json::Value) {
        let _ = writeln!(self.input, "{message}");
        let _ = self.input.flush();
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        let id = self.next_id;
        self.next_id += 1;
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            if self.output.read_line(&mut line).unwrap_or(0) == 0 {
                return serde_json::Value::Null;
            }
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// Calls a tool and returns its text, prefixed with ERROR when isError.
    fn call(&mut self, tool: &str, arguments: serde_json::Value) -> String {
        let r = self.request("tools/call", serde_json::json!({"name": tool, "arguments": arguments}));
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
        if r["result"]["isError"] == true { format!("ERROR {text}") } else { text }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

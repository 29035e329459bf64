//! The Kubernetes tests' simulator: `k8s-sim` started on 127.0.0.1 with
//! its kubeconfig and a bare repository standing for the team's git server,
//! and the helpers both Kubernetes test files use.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use caesar_proto::pb;

use crate::common::*;

pub const LONG: Duration = Duration::from_secs(90);

/// A running simulator, its kubeconfig and the git remote.
pub struct Sim {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Sim {
    pub fn start(extra: &[&str]) -> Sim {
        let dir = tempfile::Builder::new().prefix("k8s").tempdir_in("/tmp").unwrap();
        let port_file = dir.path().join("port");
        let path = format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap_or_default());
        let child = Command::new(bin_dir().join("k8s-sim"))
            .args(["--state-dir", &dir.path().join("state").display().to_string()])
            .args(["--port-file", &port_file.display().to_string()])
            .args(["--namespace", "caesar", "--path", &path])
            // `{dir}` in an argument is the simulator's directory.
            .args(extra.iter().map(|a| a.replace("{dir}", &dir.path().display().to_string())))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start k8s-sim");
        let mut port = 0;
        for _ in 0..500 {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                port = p.trim().parse().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(port > 0, "k8s-sim wrote no port");
        git(dir.path(), &["init", "-q", "--bare", "remote.git"]);
        let sim = Sim { child, port, dir };
        std::fs::write(sim.kubeconfig(), sim.kubeconfig_text(port)).unwrap();
        sim
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn kubeconfig_text(&self, port: u16) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: caesar\ncurrent-context: sim\nusers:\n- name: sim\n  user: {{}}\n"
        )
    }

    pub fn remote(&self) -> PathBuf {
        self.dir.path().join("remote.git")
    }

    /// One HTTP/1.1 request to the simulator; (status, body).
    pub fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        // Chunked bodies: keep the JSON lines only.
        let body = if body.trim_start().starts_with('{') || body.trim_start().starts_with('[') {
            body
        } else {
            body.lines().filter(|l| l.starts_with('{') || l.starts_with('[')).collect::<Vec<_>>().join("\n")
        };
        (code, body)
    }

    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let (code, body) = self.http("GET", path, "");
        assert_eq!(code, 200, "{path}: {body}");
        json(&body)
    }

    pub fn stats(&self) -> serde_json::Value {
        self.get_json("/sim/stats")
    }

    pub fn pods_of(&self, task_id: &str) -> Vec<serde_json::Value> {
        let v =
            self.get_json(&format!("/api/v1/namespaces/caesar/pods?labelSelector=caesar.dev%2Ftask-id%3D{task_id}"));
        v["items"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        // Closing its stdin stops it, and with it every pod process.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Makes the project a repository with one commit, and points its tasks at
/// the simulator.
pub fn project(env: &Env, sim: &Sim, image: &str, extra: &str) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/config.local.toml\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "base"]);
    runner_config(env, sim, image, extra);
}

pub fn runner_config(env: &Env, sim: &Sim, image: &str, extra: &str) {
    let text = format!(
        "[runner]\nkind = \"kubernetes\"\n[runner.kubernetes]\nkubeconfig = {:?}\nnamespace = \"caesar\"\nimage = {image:?}\ngit_remote = {:?}\nttl_seconds = 600\n{extra}",
        sim.kubeconfig().display().to_string(),
        sim.remote().display().to_string(),
    );
    std::fs::write(env.project.path().join(".caesar/config.local.toml"), text).unwrap();
}

pub fn messages(logs: &pb::LogsResponse) -> Vec<String> {
    logs.events_json
        .iter()
        .map(|e| json(e))
        .filter(|e| e["type"] == "message")
        .map(|e| e["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

pub async fn all_logs(c: &mut caesar_proto::client::Client, id: &str) -> pb::LogsResponse {
    c.logs(pb::LogsRequest { task_id: id.to_owned(), limit: 10_000, ..Default::default() }).await.unwrap().into_inner()
}

pub fn task_dir(env: &Env, id: &str) -> PathBuf {
    env.paths.state_dir.join("tasks").join(id)
}

pub fn wait_for(path: &Path, needle: &str) -> impl FnMut() -> bool {
    let (path, needle) = (path.to_path_buf(), needle.to_owned());
    move || std::fs::read_to_string(&path).is_ok_and(|s| s.contains(&needle))
}

/// The task's refs on the simulator's git remote.
pub fn task_refs(sim: &Sim, task_id: &str) -> Vec<String> {
    git(&sim.remote(), &["for-each-ref", "--format=%(refname)", &format!("refs/caesar/tasks/{task_id}/")])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Every Job the runner sent, checked against the official Kubernetes JSON
/// schemas (strict: unknown properties refused) with `kubernetes-validate`
/// from PyPI, which `.ci/run` installs; it works offline. Without it (a
/// developer machine), skipped with a note, except in CI.
pub fn validate_against_official_schemas(sim: &Sim, job: &serde_json::Value) {
    let file = sim.dir.path().join("job.json");
    std::fs::write(&file, job.to_string()).unwrap();
    let out = Command::new("kubernetes-validate").args(["--strict", "-k", "1.33.0"]).arg(&file).output();
    match out {
        Ok(o) => assert!(
            o.status.success(),
            "the Job does not validate: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) if std::env::var("CI").is_err() => {
            eprintln!("kubernetes-validate is not installed: schema check skipped")
        }
        Err(e) => panic!("kubernetes-validate must be installed in CI: {e}"),
    }
}

/// The task's next pending question (waiting on the daemon's attention wake).
pub async fn question(c: &mut caesar_proto::client::Client, id: &str) -> pb::PendingQuestion {
    for _ in 0..45 {
        let r = c
            .r#await(pb::AwaitRequest { task_ids: vec![id.to_owned()], timeout_ms: 2_000, wake_on_attention: true })
            .await
            .unwrap()
            .into_inner();
        if let Some(q) = r.tasks[0].pending_questions.first() {
            return q.clone();
        }
        assert!(r.tasks[0].report_json.is_empty(), "ended before asking: {:?}", r.tasks[0]);
    }
    panic!("no question from {id}");
}

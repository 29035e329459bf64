//! A real session CLI in a pod (issue 16): the real `codex` of tests/real-clis runs as a write
//! task on the Kubernetes runner, through a real daemon, `caesar-mcp`, an ordinary kubeconfig
//! and the `k8s-sim` simulator, whose process kubelet runs the pod (its supervisor and codex)
//! as local processes. "The image" is the simulator's `--path`: the installed CLIs' bin
//! directory first. The model is the scripted server on 127.0.0.1 (reachable from the pod,
//! whose processes are local); codex's config reaches the pod as a team's would, through the
//! provider Secret (`credentials_secret`): `CODEX_HOME` (its `config.toml` names the server),
//! the key its provider's `env_key` names, and the dead proxy. The rig is the real-CLI tests'
//! (`common/real_cli.rs`): a CLI npm did not install fails the test, saying how to install it.

#![allow(clippy::unwrap_used)]

mod common;
mod k8s_common;
#[path = "common/real_cli.rs"]
mod real_cli;

use caesar_tests::model_server::Reply;
use k8s_common::{Sim, runner_config};
use real_cli::{Captures, Cli, Rig, Setup, real_clis_dir, report_of};
use serde_json::json;

const TASK_LIMIT_MS: u64 = 120_000;

/// The provider Secret the pod's agent container gets its environment from.
const SECRET: &str = "codex-keys";

/// What of the CLI homes' environment codex in the pod needs: its home (whose `config.toml`
/// points at the model server), its provider's key, and the proxies that send anything else
/// to a dead port.
const POD_ENV: &[&str] = &["CODEX_HOME", "FAKE_KEY", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"];

/// A command codex runs outside its sandbox, which makes it ask (as in real_codex_sessions.rs).
fn escalated(command: &str) -> Reply {
    Reply::tool(
        "exec_command",
        json!({"cmd": command, "sandbox_permissions": "require_escalated", "justification": "the brief asks for it"}),
    )
}

/// The real-CLI rig for codex (its daemon, the model server on `script`, `caesar-mcp`), and a
/// simulator whose image holds the real CLIs and whose provider Secret carries codex's
/// environment; the project's tasks run on it.
async fn remote_codex(script: Vec<Reply>) -> (Rig, Sim) {
    let rig = Rig::launch(Cli::Codex, script, Setup::new(TASK_LIMIT_MS, 90_000, Captures::SessionsJsonRpc)).await;
    // The pod runs codex by name, from the image's PATH.
    assert!(Cli::Codex.bin().exists());
    let path = format!(
        "{}:{}:{}",
        real_clis_dir().display(),
        common::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = rig.homes.env(&rig.server);
    let secrets: Vec<String> =
        env.iter().filter(|(k, _)| POD_ENV.contains(k)).map(|(k, v)| format!("{SECRET}:{k}={v}")).collect();
    assert_eq!(secrets.len(), POD_ENV.len(), "{env:?}");
    let mut args = vec!["--path".to_owned(), path];
    for s in secrets {
        args.extend(["--secret".to_owned(), s]);
    }
    let sim = Sim::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    runner_config(&rig.env, &sim, "caesar-agent:1", &format!("credentials_secret = {SECRET:?}\n"));
    (rig, sim)
}

#[tokio::test]
async fn codex_app_server_in_a_pod_asks_an_exec_approval_and_its_file_is_applied() {
    let (rig, sim) = remote_codex(vec![escalated("echo remote > remote.txt"), Reply::text("Wrote remote.txt.")]).await;
    let id = rig.delegate("Write remote.txt with the shell.", json!({"mode": "write", "isolation": "worktree"})).await;
    let t = rig.question(&id).await;
    let q = &t["pending_questions"][0];
    let text = q["question"].as_str().unwrap_or_else(|| panic!("no question: {t}\n{}", rig.debug(&id)));
    assert!(text.contains("echo remote > remote.txt") && text.contains("execute"), "the whole command: {q}");
    assert!(q["question_id"].as_str().unwrap().starts_with("p_"), "a permission: {q}");
    rig.ok("caesar_answer", json!({"task_id": id, "question_id": q["question_id"], "answer": "allow"})).await;
    let t = rig.finish(&id).await;
    assert_eq!(t["status"], "succeeded", "{t}\n{}", rig.debug(&id));
    let report = report_of(&t);
    assert_eq!(report["status"], "success", "{t}\n{}", rig.debug(&id));
    assert!(report["changes"].to_string().contains("remote.txt"), "git saw the write: {report}\n{}", rig.raw(&id));

    // It ran in the pod, as codex app-server under the pod's supervisor, and nowhere else.
    let accepted = sim.get_json("/sim/accepted");
    assert_eq!(accepted.as_array().map(Vec::len), Some(1), "one Job: {accepted}");
    let agent = &accepted[0]["spec"]["template"]["spec"]["containers"][0];
    assert!(agent.to_string().contains("--stdin-session"), "a session, not its stream command: {agent}");
    assert_eq!(agent["envFrom"][0]["secretRef"]["name"], SECRET, "{agent}");
    let started = rig.events(&id).into_iter().find(|e| e["type"] == "started").expect("a started event");
    let command = started["command"].as_str().unwrap_or_default();
    assert!(command.split(" < ").next().unwrap_or_default().ends_with(" app-server"), "{started}");
    let raw = rig.raw(&id);
    assert!(raw.contains("item/commandExecution/requestApproval"), "codex asked over app-server: {raw}");
    // The answer reached codex in the pod: it resolved its request and ran the command there,
    // in the pod's workspace (the session's cwd).
    assert!(raw.contains(r#""method":"serverRequest/resolved""#), "the answer reached codex in the pod: {raw}");
    assert!(raw.contains(r#""cwd":"/ws/repo""#) && raw.contains(r#""exitCode":0"#), "the command ran: {raw}");
    assert!(!raw.contains("the codex app-server handshake failed"), "no fallback to exec: {raw}");
    let requests = rig.server.model_requests();
    assert!(requests.len() >= 2, "the model heard the command's outcome: {}", rig.debug(&id));
    assert!(!rig.env.project.path().join("remote.txt").exists(), "a worktree task leaves the main tree alone");

    let diff = rig.ok("caesar_diff", json!({"task_id": id})).await;
    assert!(diff.to_string().contains("remote.txt") && diff.to_string().contains("+remote"), "{diff}");
    let applied = rig.ok("caesar_apply", json!({"task_id": id})).await;
    assert_eq!(std::fs::read_to_string(rig.env.project.path().join("remote.txt")).unwrap(), "remote\n", "{applied}");
    let gone = common::eventually(std::time::Duration::from_secs(10), || sim.stats()["processes"] == 0).await;
    assert!(gone, "no pod process left: {}", sim.stats());
}

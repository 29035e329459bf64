//! codex's custom `env_key` through the environment allowlist (issue 19):
//! the real codex (tests/real-clis) against the scripted model server, with
//! its model provider's key in a variable that no adapter prefix covers and
//! without `CAESAR_PASS_ENV`. The daemon reads the name from codex's own
//! config (`$CODEX_HOME/config.toml`, `[model_providers.<id>] env_key`) and
//! passes exactly that variable: codex authenticates with it, while another
//! variable of the daemon's environment stays out of the agent's (the model
//! has codex run `env`).

#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use caesar_proto::pb;
use caesar_tests::model_server::{ModelServer, Reply};
use common::*;
use serde_json::json;

fn codex_bin() -> PathBuf {
    let dir = match std::env::var_os("CAESAR_REAL_CLIS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("real-clis/node_modules/.bin"),
    };
    let bin = dir.join("codex");
    assert!(
        bin.exists(),
        "{} is missing: `npm install --prefix tests/real-clis --no-save --no-audit --no-fund`",
        bin.display()
    );
    bin
}

#[tokio::test]
async fn codex_gets_the_key_its_config_names_and_nothing_else_of_the_daemon() {
    // The model has codex run `env` (read-only: inside codex's sandbox,
    // unasked), whose output codex sends back with the next request.
    let server = ModelServer::start(vec![Reply::tool("exec_command", json!({"cmd": "env"})), Reply::text("done")]);
    let mut env = Env::new(&[]);
    let project = env.project.path().to_path_buf();
    std::fs::write(
        project.join(".caesar/config.toml"),
        format!("[bin]\ncodex = {:?}\n", codex_bin().display().to_string()),
    )
    .unwrap();
    std::fs::write(project.join("README.md"), "hello\n").unwrap();
    git(&project, &["init", "-q"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "base"]);
    // codex refuses helper binaries under /tmp: its homes in the target directory.
    let homes = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (home, codex_home) = (homes.path().join("home"), homes.path().join("codex"));
    for d in [&home, &codex_home] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"corp\"\n\n[model_providers.corp]\nname = \"corp\"\n\
             base_url = \"{}/v1\"\nenv_key = \"CORP_LLM_TOKEN\"\nwire_api = \"responses\"\n\
             request_max_retries = 0\nstream_max_retries = 0\n",
            server.url()
        ),
    )
    .unwrap();
    let d = |p: &Path| p.display().to_string();
    let extra = [
        ("HOME", d(&home)),
        ("CODEX_HOME", d(&codex_home)),
        ("CORP_LLM_TOKEN", "corp-token-7".to_owned()),
        ("CORP_OTHER_SETTING", "not-for-agents".to_owned()),
        ("HTTP_PROXY", "http://127.0.0.1:9".to_owned()),
        ("HTTPS_PROXY", "http://127.0.0.1:9".to_owned()),
        ("NO_PROXY", "127.0.0.1,localhost".to_owned()),
        ("XDG_CONFIG_HOME", d(&home.join(".config"))),
        ("XDG_DATA_HOME", d(&home.join(".local/share"))),
        ("XDG_CACHE_HOME", d(&home.join(".cache"))),
        ("XDG_STATE_HOME", d(&home.join(".local/state"))),
    ];
    let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = env.start_daemon_with(&extra).await;
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("codex", "Say done.") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &id, Duration::from_secs(120)).await;
    let raw =
        std::fs::read_to_string(caesar_tests::daemon_files(Path::new(&t.task_dir)).join("raw.log")).unwrap_or_default();
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}\n{}", raw.chars().take(20_000).collect::<String>());
    // codex sent the key it read from the variable its config names.
    let asked = server.model_requests();
    assert!(!asked.is_empty(), "codex reached the model server");
    for r in &asked {
        assert_eq!(r.header("authorization"), Some("Bearer corp-token-7"), "{:?}", r.headers);
    }
    // Only that variable: the daemon's other one is not in what `env` printed.
    let bodies: String = asked.iter().map(|r| r.body_text()).collect();
    assert!(bodies.contains("CODEX_HOME="), "the command's output reached the model: {bodies}");
    assert!(!bodies.contains("not-for-agents"), "the daemon's variable reached the agent");
}

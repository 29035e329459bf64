//! `caesar config`, the terminal screen over the layered config, against a
//! real daemon: drawn on ratatui's test backend with keys fed to it (each
//! edit must reach the file on disk through `EditConfig`, in the layer
//! shown, comments kept), and once in a real terminal under tmux.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use caesar_cli::config_ui::{Flow, Key, Layer, Session, Tab, view};
use common::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn screen(t: &Terminal<TestBackend>) -> String {
    let buffer = t.backend().buffer();
    let width = buffer.area.width as usize;
    let cells: Vec<&str> = buffer.content().iter().map(|c| c.symbol()).collect();
    cells.chunks(width).map(|row| row.concat().trim_end().to_owned()).collect::<Vec<_>>().join("\n")
}

fn draw(t: &mut Terminal<TestBackend>, s: &Session) -> String {
    t.draw(|f| view::draw(f, &s.state)).unwrap();
    screen(t)
}

async fn typed(s: &mut Session, text: &str) {
    for c in text.chars() {
        s.key(Key::Char(c)).await;
    }
    s.key(Key::Enter).await;
}

/// Moves the selection of the current tab to the row `is_row` picks.
async fn select(s: &mut Session, rows: usize, is_row: impl Fn(&Session, usize) -> bool) {
    for _ in 0..rows {
        s.key(Key::Up).await;
    }
    let target = (0..rows).find(|i| is_row(s, *i)).expect("row present");
    for _ in 0..target {
        s.key(Key::Down).await;
    }
    assert_eq!(s.state.selected(s.state.tab), target);
}

#[tokio::test]
async fn keys_on_the_screen_edit_the_chosen_layer_through_the_daemon() {
    let mut env = Env::new(&[("fa", &["report", "success", "ok"])]);
    let project_file = env.project.path().join(".caesar/config.toml");
    let original = std::fs::read_to_string(&project_file).unwrap();
    std::fs::write(&project_file, format!("# the team's config\n{original}")).unwrap();
    let c = env.start_daemon().await;
    let mut s = Session::open(c, env.workspace()).await.unwrap();
    let mut t = Terminal::new(TestBackend::new(130, 30)).unwrap();

    let first = draw(&mut t, &s);
    assert!(first.contains("caesar config") && first.contains("edits write the project layer"), "{first}");
    assert!(first.contains("1 Agents") && first.contains("4 MCP install"), "{first}");
    assert!(first.lines().any(|l| l.contains("fa") && l.contains("enabled")), "{first}");

    // Disable the fake agent: policy.denied in the project layer, comment kept.
    let n = s.state.snapshot.agents.len();
    select(&mut s, n, |s, i| s.state.snapshot.agents[i].id == "fa").await;
    s.key(Key::Char('d')).await;
    assert!(!s.state.status_is_error, "{}", s.state.status);
    let text = std::fs::read_to_string(&project_file).unwrap();
    assert!(text.starts_with("# the team's config\n") && text.contains("denied = [\"fa\"]"), "{text}");
    let shown = draw(&mut t, &s);
    assert!(shown.lines().any(|l| l.contains("fa") && l.contains("disabled")), "{shown}");
    assert!(shown.contains("policy.denied = [fa] in the project layer"), "{shown}");

    // Its model, in the local layer: the layer is switched explicitly.
    s.key(Key::Char('l')).await;
    assert_eq!(s.state.layer, Layer::Local);
    s.key(Key::Char('m')).await;
    typed(&mut s, "fa-large").await;
    let local = std::fs::read_to_string(env.project.path().join(".caesar/config.local.toml")).unwrap();
    assert!(local.contains("[models]") && local.contains("fa = \"fa-large\""), "{local}");
    let shown = draw(&mut t, &s);
    assert!(shown.contains("edits write the local layer"), "{shown}");
    assert!(shown.lines().any(|l| l.contains("fa-large (local)")), "{shown}");

    // Policy: a scalar in the local layer, then a bad value refused with the field named.
    s.key(Key::Char('3')).await;
    assert_eq!(s.state.tab, Tab::Policy);
    let n = s.state.snapshot.policy.len();
    select(&mut s, n, |s, i| s.state.snapshot.policy[i].key == "max_parallel").await;
    s.key(Key::Enter).await;
    s.key(Key::Backspace).await;
    typed(&mut s, "2").await;
    let local = std::fs::read_to_string(env.project.path().join(".caesar/config.local.toml")).unwrap();
    assert!(local.contains("max_parallel = 2"), "{local}");
    let shown = draw(&mut t, &s);
    assert!(shown.lines().any(|l| l.contains("max_parallel") && l.contains('2') && l.contains("local")), "{shown}");
    s.key(Key::Enter).await;
    s.key(Key::Backspace).await;
    typed(&mut s, "many").await;
    assert!(s.state.status_is_error, "{}", s.state.status);
    let shown = draw(&mut t, &s);
    assert!(shown.contains("policy.max_parallel takes a whole number, got `many`"), "{shown}");
    assert!(
        std::fs::read_to_string(env.project.path().join(".caesar/config.local.toml"))
            .unwrap()
            .contains("max_parallel = 2")
    );

    // Roles: the built-in reviewer overridden in the project layer, its chain edited.
    s.key(Key::Char('l')).await;
    s.key(Key::Char('l')).await;
    assert_eq!(s.state.layer, Layer::Project);
    s.key(Key::Char('2')).await;
    let n = s.state.snapshot.roles.len();
    select(&mut s, n, |s, i| s.state.snapshot.roles[i].name == "reviewer").await;
    s.key(Key::Char('c')).await;
    for _ in 0..200 {
        s.key(Key::Backspace).await;
    }
    typed(&mut s, "fa").await;
    assert!(!s.state.status_is_error, "{}", s.state.status);
    // Its prompt file: named here, then opened for the editor.
    s.key(Key::Char('f')).await;
    for _ in 0..200 {
        s.key(Key::Backspace).await;
    }
    typed(&mut s, "prompts/review.md").await;
    assert_eq!(s.key(Key::Char('o')).await, Flow::OpenFile(format!("{}/.caesar/prompts/review.md", env.workspace())));
    let text = std::fs::read_to_string(&project_file).unwrap();
    assert!(text.contains("[[role]]") && text.contains("name = \"reviewer\""), "{text}");
    assert!(text.contains("system_prompt_file = \"prompts/review.md\""), "{text}");
    let shown = draw(&mut t, &s);
    assert!(
        shown.lines().any(|l| l.contains("reviewer") && l.contains("project") && l.contains("prompts/review.md")),
        "{shown}"
    );
    let show = || {
        let out = env.caesar(&["--json", "role", "show", "reviewer"]);
        json(std::str::from_utf8(&out.stdout).unwrap())["roles"][0].clone()
    };
    let reviewer = show();
    assert_eq!(reviewer["agents"], serde_json::json!(["fa"]), "{reviewer}");
    assert!(reviewer["would_pick"].is_null(), "fa is still disabled: {reviewer}");

    // Enabled again from the Agents tab, the role picks it.
    s.key(Key::Char('1')).await;
    s.key(Key::Char('e')).await;
    assert!(s.state.status.contains("policy.denied = []"), "{}", s.state.status);
    assert_eq!(show()["would_pick"], "fa");
}

#[test]
fn json_is_refused_with_where_to_go_instead() {
    let env = Env::new(&[]);
    let out = env.caesar(&["--json", "config"]);
    assert_eq!(out.status.code(), Some(2));
    let v = json(std::str::from_utf8(&out.stdout).unwrap());
    let message = v["error"].as_str().unwrap();
    assert!(message.contains("interactive screen") && message.contains("caesar policy show --json"), "{message}");
    // Without a terminal it says so too, and changes nothing.
    let out = env.caesar(&["config"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a terminal"), "{out:?}");
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn capture(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "ui"])
    }

    fn wait_for(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if screen.contains(what) {
                return screen;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no `{what}` on the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

#[tokio::test]
async fn the_screen_works_in_a_real_terminal() {
    if Command::new("tmux").arg("-V").output().is_err() {
        panic!("tmux is not installed: apt-get install tmux");
    }
    let mut env = Env::new(&[("fa", &["report", "success", "ok"])]);
    let _c = env.start_daemon().await;
    let tmux = Tmux { socket: format!("caesar-config-ui-{}", std::process::id()) };
    let envs: Vec<String> = env.envs().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let command = format!("env {} {} config", envs.join(" "), caesar_bin().display());
    tmux.run(&["new-session", "-d", "-s", "ui", "-x", "120", "-y", "30", "-c", &env.workspace(), &command]);
    tmux.wait_for("edits write the project layer");

    tmux.run(&["send-keys", "-t", "ui", "3"]);
    tmux.wait_for("max_parallel");
    // Down until the highlighted row is max_parallel.
    for _ in 0..12 {
        if tmux.capture().lines().any(|l| l.trim_start().starts_with("> max_parallel")) {
            break;
        }
        tmux.run(&["send-keys", "-t", "ui", "Down"]);
        std::thread::sleep(Duration::from_millis(150));
    }
    tmux.wait_for("> max_parallel");
    tmux.run(&["send-keys", "-t", "ui", "Enter"]);
    tmux.wait_for("policy.max_parallel: ");
    tmux.run(&["send-keys", "-t", "ui", "BSpace", "3", "Enter"]);
    let screen = tmux.wait_for("policy.max_parallel = 3");
    assert!(screen.contains("wrote"), "{screen}");
    let text = std::fs::read_to_string(env.project.path().join(".caesar/config.toml")).unwrap();
    assert!(text.contains("max_parallel = 3"), "{text}");

    tmux.run(&["send-keys", "-t", "ui", "q"]);
    let start = Instant::now();
    while tmux.run(&["list-sessions"]).contains("ui:") {
        assert!(start.elapsed() < Duration::from_secs(10), "q did not end caesar config");
        std::thread::sleep(Duration::from_millis(100));
    }
}

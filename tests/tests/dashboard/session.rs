//! What every dashboard test starts from: a login link from `caesar ui`, a
//! headless Chromium logged in with it, and a committed project.

#![allow(dead_code)]

use std::time::Duration;

use super::common::*;
use super::webdriver::Browser;

pub const LONG: Duration = Duration::from_secs(60);

/// `caesar ui --no-open`: the login URL and the dashboard's port.
pub fn login(env: &Env) -> (String, u16) {
    let o = env.caesar(&["--json", "ui", "--no-open"]);
    assert!(o.status.success(), "caesar ui: {}", String::from_utf8_lossy(&o.stderr));
    let v = json(String::from_utf8_lossy(&o.stdout).trim());
    let url = v["login_url"].as_str().unwrap_or_else(|| panic!("{v}")).to_owned();
    assert_eq!(v["opened_on_demand"], true, "no [http] here: the daemon opens a port on demand: {v}");
    let port = url.split(':').nth(2).and_then(|p| p.split('/').next()).and_then(|p| p.parse().ok()).expect("port");
    (url, port)
}

/// A browser logged in to the dashboard.
pub fn logged_in(env: &Env) -> (Browser, u16) {
    let (url, port) = login(env);
    let b = Browser::start();
    b.goto(&url);
    assert_eq!(b.url(), format!("http://127.0.0.1:{port}/"), "the login link lands on the task list");
    (b, port)
}

/// A project with one commit, whose `.caesar/` git ignores.
pub fn repo(env: &Env) {
    let p = env.project.path();
    std::fs::write(p.join("README.md"), "hello\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".caesar/\n").unwrap();
    commit_base(p);
}

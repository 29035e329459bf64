//! The web dashboard (`caesar ui`) in a real headless Chromium, driven over
//! WebDriver, against a real daemon, real git and real agents: the list
//! follows a task to its end live, a question and a permission prompt are
//! answered from the page, a diff is applied from the page, and forged or
//! bad requests are refused with a clear message. Screenshots of each page
//! go to target/dashboard-shots/.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "dashboard/session.rs"]
mod session;
#[path = "dashboard/webdriver.rs"]
mod webdriver;

use std::time::Duration;

use caesar_proto::pb;
use common::*;
use serde_json::{Value, json};
use session::*;
use webdriver::{Browser, http};

fn row_status(b: &Browser, id: &str) -> Value {
    b.js(
        "const r = document.querySelector(`#tasks [data-id='${arguments[0]}']`); return r ? r.dataset.status : null",
        json!([id]),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_list_is_live_and_a_question_answered_on_the_page_reaches_the_agent() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let gate_s = gate.display().to_string();
    env.set_agents(&[
        ("slow", &["say", "working on it", "wait-file", &gate_s, "report", "success", "done"]),
        ("asker", &["mcp-ask", "tabs or spaces?", "report", "success", "asked and answered"]),
    ]);
    let mut c = env.start_daemon().await;
    let slow = c.delegate(env.delegate_request("slow", "wait for the gate")).await.unwrap().into_inner().task_id;
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    let b = std::sync::Arc::new(b);

    // The session cookie: HttpOnly, SameSite=Strict.
    let cookies = b.cookies();
    let session = cookies.as_array().unwrap().iter().find(|c| c["name"] == format!("caesar_dash_{port}")).cloned();
    let session = session.unwrap_or_else(|| panic!("no session cookie: {cookies}"));
    assert_eq!((session["httpOnly"].clone(), session["sameSite"].clone()), (json!(true), json!("Strict")), "{session}");

    let bb = b.clone();
    let id = slow.clone();
    tokio::task::spawn_blocking(move || {
        bb.wait("the running task in the list", LONG, "return document.body.dataset.painted", json!([]));
        bb.wait("running", LONG, "const r = document.querySelector(`#tasks [data-id='${arguments[0]}']`); return r && r.dataset.status === 'running'", json!([id]));
        // A marker that a reload would lose: the update must come live.
        bb.js("window.__noReload = 'still here'", json!([]));
        bb.screenshot("tasks-running");
    })
    .await
    .unwrap();
    std::fs::write(&gate, "go").unwrap();
    let bb = b.clone();
    let id = slow.clone();
    tokio::task::spawn_blocking(move || {
        bb.wait("succeeded, live", LONG, "const r = document.querySelector(`#tasks [data-id='${arguments[0]}']`); return r && r.dataset.status === 'succeeded'", json!([id]));
        assert_eq!(bb.js("return window.__noReload", json!([])), json!("still here"), "the page was not reloaded");
        assert_eq!(row_status(&bb, &id), json!("succeeded"));
    })
    .await
    .unwrap();

    // A question: it shows first in the list, then is answered on its page.
    let mut req = env.delegate_request("asker", "ask about indentation");
    req.channel = true;
    let asker = c.delegate(req).await.unwrap().into_inner().task_id;
    let bb = b.clone();
    let id = asker.clone();
    let qid = tokio::task::spawn_blocking(move || {
        bb.wait("the question in the list", LONG, "const r = document.querySelector('#tasks .card'); return r && r.dataset.id === arguments[0] && r.classList.contains('asks') && r.closest('[data-col]').dataset.col === 'answer'", json!([id]));
        bb.screenshot("tasks-question-first");
        bb.goto(&format!("http://127.0.0.1:{port}/task/{id}"));
        let qid = bb.wait("the question on the task page", LONG, "const q = document.querySelector('[data-question]'); return q && q.dataset.question", json!([]));
        assert!(bb.text().contains("tabs or spaces?"), "{}", bb.text());
        bb.screenshot("task-question");
        bb.type_into("[data-question] input", "spaces");
        bb.click("[data-answer-send]");
        bb.wait("the answer acknowledged", LONG, "const r = document.querySelector('[data-question] .result.good'); return r && r.textContent", json!([]));
        qid.as_str().unwrap().to_owned()
    })
    .await
    .unwrap();
    let t = await_one(&mut c, &asker, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let logs = c.logs(pb::LogsRequest { task_id: asker.clone(), limit: 100, ..Default::default() }).await.unwrap();
    assert!(
        logs.into_inner().events_json.iter().any(|e| e.contains("ask_orchestrator: Answer: spaces")),
        "the answer given on the page reached the agent"
    );

    let bb = b.clone();
    let id = asker.clone();
    tokio::task::spawn_blocking(move || {
        // A second answer to the same question (a double click that got past the page) is refused, once written.
        let r = bb.js_async(
            "const done = arguments[arguments.length - 1];
             fetch(`/api/task/${arguments[0]}/answer`, {method: 'POST', headers: {'content-type': 'application/json',
               'x-caesar-csrf': document.querySelector('meta[name=caesar-csrf]').content},
               body: JSON.stringify({question_id: arguments[1], answer: 'tabs'})})
             .then(async (r) => done([r.status, await r.json()]));",
            json!([id, qid]),
        );
        assert_eq!(r[0], 409, "{r}");
        assert!(r[1]["error"].as_str().unwrap().contains("task"), "{r}");
        // The report and the events show on the finished task's page.
        bb.goto(&format!("http://127.0.0.1:{port}/task/{id}"));
        bb.wait("the report", LONG, "const r = document.querySelector('#report .summary'); return r && r.textContent.includes('asked and answered')", json!([]));
        bb.wait("the events", LONG, "return document.querySelectorAll('#events li').length >= 3", json!([]));
        bb.wait("the raw log", LONG, "return document.querySelector('#raw').textContent.includes('Answer: spaces')", json!([]));
        bb.screenshot("task-finished");
        // Agents, roles and health.
        bb.goto(&format!("http://127.0.0.1:{port}/agents"));
        bb.wait("the agents", LONG, "return document.querySelector('#agents tr[data-agent=asker]')", json!([]));
        bb.wait("the roles", LONG, "return document.querySelector('#roles tbody tr')", json!([]));
        bb.screenshot("agents");
        bb.goto(&format!("http://127.0.0.1:{port}/health"));
        bb.wait("the health", LONG, "const h = document.querySelector('#health'); return h && h.textContent.includes('store') && h.textContent.includes('ok')", json!([]));
        bb.screenshot("health");
        // An unknown task: 404 with a message on the page.
        bb.goto(&format!("http://127.0.0.1:{port}/task/t_000000000000"));
        assert!(bb.text().contains("no task `t_000000000000`"), "{}", bb.text());
        let status = bb.js_async("const done = arguments[0]; fetch('/task/t_000000000000').then((r) => done(r.status))", json!([]));
        assert_eq!(status, 404);
        bb.screenshot("unknown-task");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_login_links_are_refused_with_a_message() {
    let mut env = Env::new(&[]);
    env.start_daemon().await;
    let (url, port) = login(&env);
    let path = url.split_once(&format!(":{port}")).unwrap().1.to_owned();
    // Unknown token, then the real one twice: logs in once, then "used already".
    let (s, body) = http(port, "GET", "/login?token=0123", &[], "");
    assert_eq!(s, 401);
    assert!(body.contains("not valid") && body.contains("caesar ui"), "{body}");
    let (s, _) = http(port, "GET", &path, &[], "");
    assert_eq!(s, 303);
    let (s, body) = http(port, "GET", &path, &[], "");
    assert_eq!(s, 401);
    assert!(body.contains("used already"), "{body}");
    // No session: pages and the API say how to log in.
    let (s, body) = http(port, "GET", "/", &[], "");
    assert_eq!(s, 401);
    assert!(body.contains("caesar ui"), "{body}");
    let (s, body) = http(port, "GET", "/api/tasks", &[], "");
    assert_eq!(s, 401);
    assert!(json(&body)["error"].as_str().unwrap().contains("not logged in"), "{body}");
    // A foreign Host (DNS rebinding) is refused before anything else.
    let (s, body) = http(port, "GET", "/", &[("Host", "evil.example")], "");
    assert!(s == 403 || s == 400, "{s} {body}");
    let b = tokio::task::block_in_place(Browser::start);
    b.goto(&format!("http://127.0.0.1:{port}{path}"));
    assert!(b.text().contains("used already"), "{}", b.text());
    b.screenshot("login-used");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_diff_applied_from_the_page_lands_in_the_main_tree_and_a_stale_apply_writes_nothing() {
    let mut env = Env::new(&[]);
    env.set_agents(&[
        ("writer", &["write", "hello.txt", "made by the agent\n", "report", "success", "wrote hello.txt"]),
        ("editor", &["write", "README.md", "edited by the agent\n", "report", "success", "edited README"]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "write hello.txt");
    req.mode = "write".into();
    req.isolation = "worktree".into();
    let writer = c.delegate(req).await.unwrap().into_inner().task_id;
    let mut req = env.delegate_request("editor", "edit the README");
    req.mode = "write".into();
    req.isolation = "worktree".into();
    let editor = c.delegate(req).await.unwrap().into_inner().task_id;
    for id in [&writer, &editor] {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    }
    let main = env.project.path().to_path_buf();
    // The main tree moves under the editor's change.
    std::fs::write(main.join("README.md"), "changed in the main tree meanwhile\n").unwrap();
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{writer}"));
        b.wait("the diff", LONG, "const d = document.querySelector('#diff'); return d && d.textContent.includes('hello.txt') && document.querySelector('pre.patch .add')", json!([]));
        let added = b.js("return document.querySelector('pre.patch .add').textContent", json!([]));
        assert!(added.as_str().unwrap().contains("+made by the agent"), "{added}");
        let colour =
            b.js("return getComputedStyle(document.querySelector('pre.patch .add')).backgroundColor", json!([]));
        assert_eq!(colour, json!("rgb(230, 255, 236)"), "additions are coloured");
        b.click("[data-action=apply]");
        let explain = b.js("return document.querySelector('.explain').textContent", json!([]));
        assert!(
            explain.as_str().unwrap().contains("hello.txt") && explain.as_str().unwrap().contains("never a commit"),
            "{explain}"
        );
        assert!(!main.join("hello.txt").exists(), "nothing is written before the confirmation");
        b.screenshot("task-diff-apply-confirm");
        b.click("[data-confirm=apply]");
        b.wait(
            "applied",
            LONG,
            "const r = document.querySelector('.action .result.good'); return r && r.textContent",
            json!([]),
        );
        b.screenshot("task-applied");
    });
    assert_eq!(std::fs::read_to_string(main.join("hello.txt")).unwrap(), "made by the agent\n");
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{editor}"));
        b.wait("the diff", LONG, "const d = document.querySelector('#diff'); return d && d.textContent.includes('README.md') && document.querySelector('pre.patch .del')", json!([]));
        b.click("[data-action=apply]");
        b.click("[data-confirm=apply]");
        let msg = b.wait(
            "the refusal",
            LONG,
            "const r = document.querySelector('.action .result.bad'); return r && r.textContent",
            json!([]),
        );
        assert!(msg.as_str().unwrap().contains("nothing was written"), "{msg}");
        b.screenshot("task-stale-apply");
        // The same refusal over the API: 409 Conflict, with the conflicting file.
        let r = b.js_async(
            "const done = arguments[arguments.length - 1];
             fetch(`/api/task/${arguments[0]}/apply`, {method: 'POST', headers: {'content-type': 'application/json',
               'x-caesar-csrf': document.querySelector('meta[name=caesar-csrf]').content}, body: '{}'})
             .then(async (r) => done([r.status, await r.json()]));",
            json!([editor]),
        );
        assert_eq!(r[0], 409, "{r}");
        assert!(r[1]["error"].as_str().unwrap().contains("nothing was written"), "{r}");
        assert!(r[1]["conflicts"].to_string().contains("README.md"), "{r}");
    });
    assert_eq!(std::fs::read_to_string(main.join("README.md")).unwrap(), "changed in the main tree meanwhile\n");
    let t = c.status(pb::StatusRequest { task_id: editor.clone() }).await.unwrap().into_inner();
    assert_eq!(t.status().as_str(), "succeeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_cross_site_post_is_refused() {
    let mut env = Env::new(&[]);
    env.set_agents(&[("hanger", &["say", "hanging", "hang"])]);
    let mut c = env.start_daemon().await;
    let id = c.delegate(env.delegate_request("hanger", "hang")).await.unwrap().into_inner().task_id;
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    // Another site on loopback (same-site for cookies: only Origin and CSRF stop it) posts a form.
    let evil = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let evil_port = evil.local_addr().unwrap().port();
    let page = format!(
        "<!doctype html><form id=f method=POST action=\"http://127.0.0.1:{port}/api/task/{id}/cancel\"><input name=x value=1></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    let server = std::thread::spawn(move || {
        // Serves the page to at most three requests, then stops.
        evil.set_nonblocking(false).unwrap();
        for conn in evil.incoming().take(3) {
            let Ok(mut s) = conn else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = std::io::Write::write_all(&mut s, resp.as_bytes());
            if buf.starts_with(b"GET / ") {
                return;
            }
        }
    });
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{evil_port}/"));
        b.wait(
            "the form's answer",
            LONG,
            "return location.port === arguments[0] && document.body.innerText",
            json!([port.to_string()]),
        );
        let text = b.text();
        assert!(text.contains("cross-site request refused"), "{text}");
        b.screenshot("forged-post-refused");
    });
    let _ = server.join();
    // And without the page's CSRF token, even from the dashboard's own origin.
    let r = tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/"));
        b.js_async(
            "const done = arguments[1]; fetch(`/api/task/${arguments[0]}/cancel`, {method: 'POST'}).then(async (r) => done([r.status, await r.text()]))",
            json!([id]),
        )
    });
    assert_eq!(r[0], 403, "{r}");
    let t = c.status(pb::StatusRequest { task_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(t.status().as_str(), "running", "the forged requests cancelled nothing");
    // The page's own cancel, confirmed, does.
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{id}"));
        b.wait("the cancel button", LONG, "return document.querySelector('[data-action=cancel]')", json!([]));
        b.click("[data-action=cancel]");
        b.screenshot("task-cancel-confirm");
        b.click("[data-confirm=cancel]");
        b.wait(
            "cancelled",
            LONG,
            "const r = document.querySelector('.action .result.good'); return r && r.textContent",
            json!([]),
        );
    });
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "cancelled");
}

/// claude (the real CLI, against the scripted model) asks before running a shell command;
/// the prompt shows on the task page, and Allow there lets the command run.
const SUCCESS: &str = r#"{"protocol":"caesar.report/v1","status":"success","summary":"done, all tests pass"}"#;

/// The text of the cell of group `g`'s row `row` for task `t`.
fn group_cell(b: &Browser, g: &str, row: &str, t: &str) -> String {
    b.js(
        "const c = document.querySelector(`section[data-group='${arguments[0]}'] tr[data-row='${arguments[1]}'] td[data-task='${arguments[2]}']`); return c ? c.textContent : null",
        json!([g, row, t]),
    )
    .as_str()
    .unwrap_or_else(|| panic!("no {row} cell for {t} in {g}"))
    .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_groups_page_compares_a_groups_members_side_by_side_with_their_overlaps() {
    let mut env = Env::new(&[
        ("a1", &["write", "shared.txt", "from a1\n", "write", "only-a1.txt", "1\n", "report-raw", SUCCESS]),
        ("a2", &["write", "shared.txt", "from a2\n", "report-raw", SUCCESS]),
        ("a3", &["write", "only-a3.txt", "3\n", "sleep", "200", "report-raw", SUCCESS]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/groups"));
        b.wait(
            "the empty page",
            LONG,
            "return document.body.dataset.loaded === '0' && document.querySelector('#groups')",
            json!([]),
        );
    });
    let mut req = env.delegate_request("", "write the files");
    req.agents = vec!["a1".into(), "a2".into(), "a3".into()];
    req.mode = "write".into();
    req.verify = vec!["test -f shared.txt".into()];
    let d = c.delegate(req).await.unwrap().into_inner();
    for t in &d.task_ids {
        await_one(&mut c, t, LONG).await;
    }
    let (g, t1, t2, t3) = (d.group_id.clone(), d.task_ids[0].clone(), d.task_ids[1].clone(), d.task_ids[2].clone());
    tokio::task::block_in_place(|| {
        // The page follows the change stream: the group appears without a reload.
        b.wait(
            "the group, done",
            LONG,
            "const s = document.querySelector(`section[data-group='${arguments[0]}']`); return s && s.textContent.includes('done') && s.querySelectorAll('tr[data-row=agent] td').length === 3",
            json!([g]),
        );
        // Verification ends after its task, each member's on its own; a reload
        // shows each outcome once stored.
        let start = std::time::Instant::now();
        while group_cell(&b, &g, "verification", &t3) != "failed" || group_cell(&b, &g, "verification", &t1) == "none" {
            assert!(
                start.elapsed() < LONG,
                "the verifications never showed: a1 {}, a3 {}",
                group_cell(&b, &g, "verification", &t1),
                group_cell(&b, &g, "verification", &t3)
            );
            std::thread::sleep(Duration::from_millis(300));
            b.goto(&format!("http://127.0.0.1:{port}/groups"));
            b.wait(
                "the group",
                LONG,
                "return document.querySelector(`section[data-group='${arguments[0]}'] tr[data-row=agent] td`)",
                json!([g]),
            );
        }
        assert_eq!(group_cell(&b, &g, "agent", &t1), "a1");
        assert_eq!(group_cell(&b, &g, "files", &t1), "2");
        assert_eq!(group_cell(&b, &g, "files", &t2), "1");
        assert_eq!(group_cell(&b, &g, "lines", &t1), "+2 −0");
        assert_eq!(group_cell(&b, &g, "verification", &t1), "passed");
        assert_eq!(group_cell(&b, &g, "verification", &t3), "failed", "a3 wrote no shared.txt");
        let overlaps = group_cell(&b, &g, "overlaps", &t1);
        assert!(overlaps.contains(&t2) && overlaps.contains("shared.txt"), "{overlaps}");
        assert_eq!(group_cell(&b, &g, "overlaps", &t3), "none");
        assert!(group_cell(&b, &g, "status", &t1).contains("succeeded"));
        b.screenshot("groups");
        // One group by id; a bad id and an unknown one are refused with a message.
        let r = b.js_async(
            "const done = arguments[arguments.length - 1];
             Promise.all(arguments[0].map((u) => fetch(u).then(async (r) => [r.status, await r.json()]))).then(done);",
            json!([[format!("/api/group/{g}"), "/api/group/g_nothex", "/api/group/g_000000000000"]]),
        );
        assert_eq!(r[0][0], 200, "{r}");
        assert_eq!(r[0][1]["members"].as_array().unwrap().len(), 3, "{r}");
        assert_eq!(r[1][0], 400, "{r}");
        assert!(r[1][1]["error"].as_str().unwrap().contains("not a group id"), "{r}");
        assert_eq!(r[2][0], 404, "{r}");
        assert!(r[2][1]["error"].as_str().unwrap().contains("no group g_000000000000"), "{r}");
    });
}

fn usage(input: u64, output: u64) -> String {
    json!({"type": "usage", "input_tokens": input, "output_tokens": output}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_budgets_page_shows_each_tasks_limits_against_its_use() {
    let (within, over) = (usage(300, 100), usage(700, 0));
    let mut env = Env::new(&[
        ("frugal", &["event", &within, "report", "success", "within budget"]),
        ("spender", &["event", &over, "hang"]),
        ("free", &["report", "success", "no budget"]),
    ]);
    let mut c = env.start_daemon().await;
    let mut ids = Vec::new();
    for (agent, tokens) in [("frugal", Some(1000)), ("spender", Some(500)), ("free", None)] {
        let mut req = env.delegate_request(agent, &format!("spend as {agent}"));
        req.budget = tokens.map(|t| pb::Budget { tokens: Some(t), ..Default::default() });
        let id = c.delegate(req).await.unwrap().into_inner().task_id;
        await_one(&mut c, &id, LONG).await;
        ids.push(id);
    }
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/budgets"));
        b.wait("the budgets", LONG, "return document.body.dataset.loaded === '2'", json!([]));
        let cell = |id: &str, col: &str| {
            b.js(
                "const c = document.querySelector(`tr[data-id='${arguments[0]}'] td.${arguments[1]}`); return c ? [c.textContent, c.querySelector('.meter') ? c.querySelector('.meter').dataset.pct : null] : null",
                json!([id, col]),
            )
        };
        assert_eq!(cell(&ids[0], "tokens"), json!(["400 / 1000 (40%)", "40"]));
        assert_eq!(cell(&ids[1], "tokens"), json!(["700 / 500 (100%)", "100"]));
        assert_eq!(cell(&ids[1], "exceeded")[0], "tokens", "the limit that stopped it");
        assert_eq!(cell(&ids[0], "exceeded")[0], "");
        assert!(cell(&ids[2], "tokens").is_null(), "a task without a budget is not listed");
        b.screenshot("budgets");
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn the_radar_page_shows_which_tasks_change_the_same_lines() {
    let mut env = Env::new(&[
        ("w1", &["write", "README.md", "hello from w1\n", "report-raw", SUCCESS]),
        ("w2", &["write", "README.md", "hello from w2\n", "report-raw", SUCCESS]),
        ("w3", &["write", "other.txt", "w3\n", "report-raw", SUCCESS]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut ids = Vec::new();
    for a in ["w1", "w2", "w3"] {
        let mut r = env.delegate_request(a, "edit");
        r.mode = "write".into();
        r.isolation = "worktree".into();
        let d = c.delegate(r).await.unwrap().into_inner();
        await_one(&mut c, &d.task_id, LONG).await;
        ids.push(d.task_id);
    }
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/radar"));
        b.wait("the radar", LONG, "return document.body.dataset.loaded === '3'", json!([]));
        let meets = |id: &str| {
            b.js(
                "return [...document.querySelectorAll(`tr[data-id='${arguments[0]}']`)].map((r) => [r.dataset.meets, r.querySelector('.paths').textContent, r.querySelector('.hunks').textContent, r.classList.contains('clash')])",
                json!([id]),
            )
        };
        assert_eq!(meets(&ids[0]), json!([[ids[1], "README.md", "README.md", true]]));
        assert_eq!(meets(&ids[1]), json!([[ids[0], "README.md", "README.md", true]]));
        assert_eq!(meets(&ids[2]), json!([["", "", "", false]]), "w3 meets nobody");
        b.screenshot("radar");
    });
    // The user's own edit of README.md shows as a meeting too, once the
    // background radar has rescanned the tree (every few seconds: a plain
    // edit moves neither HEAD nor the index) and the page reloads.
    std::fs::write(env.project.path().join("README.md"), "hello by hand\n").unwrap();
    tokio::task::block_in_place(|| {
        let until = std::time::Instant::now() + LONG;
        let seen = "return document.body.dataset.loaded === '3' && document.querySelector(`tr[data-id='${arguments[0]}'][data-meets=uncommitted]`) !== null";
        loop {
            b.goto(&format!("http://127.0.0.1:{port}/radar"));
            b.wait("the radar", LONG, "return document.body.dataset.loaded === '3'", json!([]));
            if b.js(seen, json!([ids[0]])) == json!(true) {
                break;
            }
            assert!(std::time::Instant::now() < until, "timed out waiting for the uncommitted changes: {}", b.text());
            std::thread::sleep(Duration::from_millis(500));
        }
        b.screenshot("radar-uncommitted");
    });
    // A discarded task leaves the radar.
    let o = env.caesar(&["discard", &ids[1]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/radar"));
        b.wait("two tasks", LONG, "return document.body.dataset.loaded === '2'", json!([]));
        let gone = b.js("return document.querySelector(`tr[data-id='${arguments[0]}']`) === null", json!([ids[1]]));
        assert_eq!(gone, json!(true));
    });
}

/// A daemon whose `claude` is the real CLI against a scripted model that
/// asks to run `command` with Bash, then says `after`; and a write task in
/// a worktree delegated to it. Returns the env, client, task id and server.
async fn claude_asks_to_run(
    command: &str,
    after: &str,
) -> (Env, caesar_proto::client::Client, String, caesar_tests::model_server::ModelServer, tempfile::TempDir) {
    use caesar_tests::model_server::{ModelServer, Reply};
    let claude = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("real-clis/node_modules/.bin/claude");
    assert!(
        claude.exists(),
        "{} is missing: `npm install --prefix tests/real-clis --no-save --no-audit --no-fund`",
        claude.display()
    );
    let server = ModelServer::start(vec![
        Reply::tool("Bash", json!({"command": command, "description": "run a command"})),
        Reply::text(after),
    ]);
    let mut env = Env::new(&[]);
    repo(&env);
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!("[policy]\nallow_recursion = true\n\n[bin]\nclaude = {:?}\n", claude.display().to_string()),
    )
    .unwrap();
    let homes = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let home = homes.path().join("home");
    let claude_config = homes.path().join("claude");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&claude_config).unwrap();
    let extra = [
        ("HOME", home.display().to_string()),
        ("CLAUDE_CONFIG_DIR", claude_config.display().to_string()),
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "test-key-1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("HTTP_PROXY", "http://127.0.0.1:9".to_owned()),
        ("HTTPS_PROXY", "http://127.0.0.1:9".to_owned()),
        ("NO_PROXY", "127.0.0.1,localhost".to_owned()),
        ("CAESAR_PERMISSION_TIMEOUT_MS", "120000".to_owned()),
    ];
    let extra_ref: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = env.start_daemon_with(&extra_ref).await;
    let mut req = env.delegate_request("claude", "Write bridged.txt with python.");
    req.mode = "write".into();
    req.isolation = "worktree".into();
    req.timeout_ms = 120_000;
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    (env, c, id, server, homes)
}

/// Opens the task page, waits for the permission prompt and presses `answer` (allow or deny).
fn answer_permission(b: &Browser, port: u16, id: &str, answer: &str, shot: &str) {
    b.goto(&format!("http://127.0.0.1:{port}/task/{id}"));
    b.wait(
        "the permission prompt",
        Duration::from_secs(120),
        "return document.querySelector('[data-question] [data-answer=allow]')",
        json!([]),
    );
    assert!(b.text().contains("Bash"), "{}", b.text());
    b.screenshot(shot);
    b.click(&format!("[data-question] [data-answer={answer}]"));
    b.wait(
        "the answer sent",
        LONG,
        "const r = document.querySelector('[data-question] .result.good'); return r && r.textContent",
        json!([]),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_permission_allowed_on_the_page_lets_claude_run_the_tool() {
    let command = "python3 -c \"open('bridged.txt','w').write('allowed from the page')\"";
    let (env, mut c, id, _server, _homes) = claude_asks_to_run(command, "Wrote bridged.txt.").await;
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| answer_permission(&b, port, &id, "allow", "task-permission"));
    let t = await_one(&mut c, &id, Duration::from_secs(120)).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    let r = json(&t.report_json);
    assert!(r["changes"].to_string().contains("bridged.txt"), "git saw the write the page allowed: {r}");
    let o = env.caesar(&["apply", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(env.project.path().join("bridged.txt")).unwrap(), "allowed from the page");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_permission_denied_on_the_page_keeps_claude_from_running_the_tool() {
    let command = "python3 -c \"open('bridged.txt','w').write('should never exist')\"";
    let (env, mut c, id, server, _homes) = claude_asks_to_run(command, "I was not allowed to write it.").await;
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| answer_permission(&b, port, &id, "deny", "task-permission-deny"));
    let t = await_one(&mut c, &id, Duration::from_secs(120)).await;
    let worktree = json(
        &std::fs::read_to_string(env.paths.state_dir.join("tasks").join(&id).join("task.json")).unwrap(),
    )["workspace"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!std::path::Path::new(&worktree).join("bridged.txt").exists(), "the denied command did not run: {t:?}");
    assert!(!env.project.path().join("bridged.txt").exists());
    let r = json(&t.report_json);
    assert!(!r["changes"].to_string().contains("bridged.txt"), "no change from the denied tool: {r}");
    // Claude heard the refusal: the model's second turn carries it as the tool's result.
    let asked = server.model_requests();
    assert!(asked.len() >= 2, "claude went on after the denial: {} requests", asked.len());
    let last = asked.last().unwrap().body.to_string();
    assert!(last.contains("tool_result") && last.contains("is_error"), "the denial reached the model: {last}");
    let logs = env.caesar(&["logs", &id]);
    assert!(String::from_utf8_lossy(&logs.stdout).contains("deny"), "{}", String::from_utf8_lossy(&logs.stdout));
}

/// The dashboard's figures for BENCHMARKS.md (not a timed test: it prints, it does not
/// assert a speed): time to first paint of the task list with 1,000 tasks in the store, and
/// the latency from an agent's output to the task page. Run by hand:
/// `cargo nextest run -p caesar-tests --test dashboard --run-ignored only --no-capture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement for BENCHMARKS.md, run by hand"]
async fn dashboard_figures() {
    let mut env = Env::new(&[]);
    let stamps = env.file("stamps");
    let stamps_s = stamps.display().to_string();
    let mut talker: Vec<String> = vec!["sleep".into(), "3000".into()];
    for i in 0..10 {
        talker.extend([
            "stamp".into(),
            stamps_s.clone(),
            "say".into(),
            format!("marker-{i}"),
            "sleep".into(),
            "300".into(),
        ]);
    }
    let talker_ref: Vec<&str> = talker.iter().map(String::as_str).collect();
    env.set_agents(&[("quick", &["exit", "0"]), ("talker", &talker_ref)]);
    let mut c = env.start_daemon().await;
    let started = std::time::Instant::now();
    let mut ids = Vec::new();
    for i in 0..1000 {
        ids.push(c.delegate(env.delegate_request("quick", &format!("task {i}"))).await.unwrap().into_inner().task_id);
        if i % 100 == 99 {
            eprintln!("{} delegated after {:?}", i + 1, started.elapsed());
        }
    }
    // Short awaits: one long call is not what a loaded machine should break.
    for chunk in ids.chunks(500) {
        loop {
            let r = c
                .r#await(pb::AwaitRequest { task_ids: chunk.to_vec(), timeout_ms: 30_000, wake_on_attention: false })
                .await
                .unwrap()
                .into_inner();
            if r.tasks.iter().all(|t| !matches!(t.status().as_str(), "pending" | "running")) {
                break;
            }
            eprintln!("awaiting, {:?}", started.elapsed());
        }
    }
    eprintln!("1,000 tasks delegated and finished in {:?}", started.elapsed());
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    let mut paints = Vec::new();
    for _ in 0..5 {
        let ms = tokio::task::block_in_place(|| {
            b.goto(&format!("http://127.0.0.1:{port}/"));
            b.wait(
                "1,000 rows",
                LONG,
                "return document.body.dataset.painted === '1000' && window.__caesarPaintedMs",
                json!([]),
            )
        });
        paints.push(ms.as_f64().unwrap());
    }
    tokio::task::block_in_place(|| b.screenshot("tasks-1000"));
    paints.sort_by(f64::total_cmp);
    eprintln!(
        "first paint of 1,000 tasks (navigation start to rows painted), 5 loads: {paints:?} ms; median {} ms",
        paints[2]
    );

    let id = c.delegate(env.delegate_request("talker", "talk")).await.unwrap().into_inner().task_id;
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{id}"));
    });
    await_one(&mut c, &id, LONG).await;
    let seen = tokio::task::block_in_place(|| {
        b.wait("the markers", LONG, "const e = window.__caesarEvents || []; return e.filter((x) => x.text.includes('marker-')).length >= 10 && e", json!([]))
    });
    let stamped: Vec<i64> = std::fs::read_to_string(&stamps)
        .unwrap()
        .lines()
        .map(|l| (l.trim().parse::<i128>().unwrap() / 1_000_000) as i64)
        .collect();
    let mut lat = Vec::new();
    for (i, at) in stamped.iter().enumerate() {
        let shown =
            seen.as_array().unwrap().iter().find(|e| e["text"].as_str().unwrap_or("").contains(&format!("marker-{i}")));
        lat.push(shown.unwrap()["wall"].as_i64().unwrap() - at);
    }
    lat.sort();
    eprintln!("agent output -> task page, 10 lines: {lat:?} ms; median {} ms, max {} ms", lat[5], lat[9]);
}

/// Issue 30: the badge leads with the verdict (a blocked task whose agent
/// exited 0 is `blocked: auth`, not a green `succeeded`), and a task that
/// fell back lists its attempts on its page.
#[tokio::test(flavor = "multi_thread")]
async fn the_badge_is_the_verdict_and_a_fallback_lists_its_attempts() {
    let auth = json!({"type": "blocker", "kind": "auth", "message": "401 Unauthorized"}).to_string();
    let locked = "trap 'exit 0' TERM; echo '{\"protocol\":\"caesar.event/v1\",\"type\":\"blocker\",\"kind\":\"auth\",\"message\":\"401 Unauthorized\"}'; while :; do sleep 0.1; done";
    let mut env = Env::new(&[
        ("first", &["event", &auth, "hang"]),
        ("second", &["say", "second at work", "report", "success", "done by second"]),
        ("ok", &["report", "success", "all done"]),
    ]);
    let config = env.project.path().join(".caesar/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}[[agent]]\nid = \"locked\"\nbin = \"/bin/sh\"\nargs = [\"-c\", {locked:?}]\n\n[[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"read-only\"\n"
        ),
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let blocked = c.delegate(env.delegate_request("locked", "locked out")).await.unwrap().into_inner().task_id;
    let t = await_one(&mut c, &blocked, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "the process exited 0: {t:?}");
    let mut req = env.delegate_request("ok", "verified");
    req.verify = vec!["exit 3".to_owned()];
    let failed = c.delegate(req).await.unwrap().into_inner().task_id;
    await_one(&mut c, &failed, LONG).await;
    let mut req = env.delegate_request("", "fall back");
    req.role = "pair".to_owned();
    req.mode.clear(); // the role's mode applies
    let chain = c.delegate(req).await.unwrap().into_inner().task_id;
    await_one(&mut c, &chain, LONG).await;

    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        let badge = |id: &str| {
            b.wait(
                "the row",
                LONG,
                "const r = document.querySelector(`#tasks [data-id='${arguments[0]}'] .status .badge`); return r ? [r.textContent, r.className] : null",
                json!([id]),
            )
        };
        let v = badge(&blocked);
        assert_eq!(v[0], "blocked: auth", "{v}");
        assert!(v[1].as_str().unwrap().contains("v-blocked"), "{v}");
        assert_eq!(badge(&failed)[0], "verification failed");
        b.screenshot("verdicts");
        b.goto(&format!("http://127.0.0.1:{port}/task/{chain}"));
        let attempts = b.wait(
            "the attempts",
            LONG,
            "const a = document.querySelector('.attempts ol'); return a ? a.innerText : null",
            json!([]),
        );
        let attempts = attempts.as_str().unwrap();
        assert!(attempts.contains(&format!("first ({chain}) blocked (auth): 401 Unauthorized")), "{attempts}");
        assert!(attempts.contains("second (") && attempts.contains("produced the result"), "{attempts}");
        b.screenshot("attempts");
    });
}

/// Issue 30, item 7: Retry asks the next agent everything the first one was asked (the context,
/// constraints and acceptance criteria, the verification, role, budget and timeout, from the
/// first task's stored request); only the agent differs.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_asks_the_next_agent_everything_the_first_one_was_asked() {
    let mut env = Env::new(&[]);
    // Each agent writes down the prompt it was given.
    let steps: &[&str] = &["write", "seen.txt", "{{prompt}}", "report", "success", "wrote it down"];
    env.set_agents(&[("first", steps), ("second", steps)]);
    let config = env.project.path().join(".caesar/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}[[role]]\nname = \"careful\"\nagents = [\"first\", \"second\"]\nmode = \"write\"\n"),
    )
    .unwrap();
    repo(&env);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest {
        mode: "write".into(),
        role: "careful".into(),
        context: "The parser lives in src/parse.rs.".into(),
        constraints: vec!["touch no test file".into()],
        acceptance_criteria: vec!["seen.txt holds the brief".into()],
        verify: vec!["test -s seen.txt".into()],
        timeout_ms: 900_000,
        budget: Some(pb::Budget { tokens: Some(50_000), ..Default::default() }),
        ..env.delegate_request("first", "write down what you were asked")
    };
    let first = c.delegate(req).await.unwrap().into_inner().task_id;
    await_one(&mut c, &first, LONG).await;
    let (_, port) = login(&env);
    let o = env.caesar(&["--json", "mcp", "token"]);
    let token = json(String::from_utf8_lossy(&o.stdout).trim())["token"].as_str().unwrap().to_owned();
    let (s, body) = http(
        port,
        "POST",
        &format!("/api/task/{first}/retry"),
        &[("Authorization", &format!("Bearer {token}")), ("Content-Type", "application/json")],
        r#"{"agent": "second"}"#,
    );
    assert_eq!(s, 200, "{body}");
    let retried = json(&body);
    let (retried, worktree) = (retried["task_id"].as_str().unwrap().to_owned(), retried["worktree"].clone());
    let t = await_one(&mut c, &retried, LONG).await;
    assert_eq!((t.agent.as_str(), t.role.as_str(), t.mode.as_str()), ("second", "careful", "write"));
    assert_eq!((t.objective.as_str(), t.timeout_ms), ("write down what you were asked", 900_000));
    assert_eq!(t.budget.as_ref().and_then(|b| b.limits.as_ref()).and_then(|l| l.tokens), Some(50_000), "{t:?}");
    let report = json(&t.report_json);
    assert_eq!(report["verification"]["command"], "test -s seen.txt", "{report}");
    // The task file the agent reads, and the prompt it was given.
    let doc = json(&std::fs::read_to_string(std::path::Path::new(&t.task_dir).join("task.json")).unwrap());
    assert_eq!(doc["context"], "The parser lives in src/parse.rs.", "{doc}");
    assert_eq!(doc["constraints"], json!(["touch no test file"]), "{doc}");
    assert_eq!(doc["acceptance_criteria"], json!(["seen.txt holds the brief"]), "{doc}");
    let prompt = std::fs::read_to_string(std::path::Path::new(worktree.as_str().unwrap()).join("seen.txt")).unwrap();
    for part in [
        "write down what you were asked",
        "The parser lives in src/parse.rs.",
        "touch no test file",
        "seen.txt holds the brief",
    ] {
        assert!(prompt.contains(part), "missing {part:?} in the second agent's prompt:\n{prompt}");
    }
}

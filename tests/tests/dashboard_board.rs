//! The dashboard people would choose (issue 30 item 7), in a real headless
//! Chromium against a real daemon and real git: the board by state with its
//! groups, attempts and filters; the task page that leads with the verdict,
//! its diff with line comments sent back through "continue", the
//! conversation; steering a running agent and starting a task from the
//! page. Screenshots go to target/dashboard-shots/.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "dashboard/session.rs"]
mod session;
#[path = "dashboard/webdriver.rs"]
mod webdriver;

use caesar_proto::pb;
use common::*;
use serde_json::{Value, json};
use session::*;
use webdriver::Browser;

/// The column a card of task `id` (or of group `g_…`) is in on the board, or null.
fn column_of(b: &Browser, id: &str) -> Value {
    b.js(
        "const c = document.querySelector(`#tasks [data-id='${arguments[0]}'], #tasks [data-group='${arguments[0]}']`); return c ? c.closest('[data-col]').dataset.col : null",
        json!([id]),
    )
}

/// Issue 30, item 7: the board puts each task in its column by state (needs answer, running,
/// to review, done), a fan-out group's members in one card and a fallback's attempts under
/// their task; the search, the agent filter and the project filter narrow it in the page.
#[tokio::test(flavor = "multi_thread")]
async fn the_board_sorts_tasks_by_state_groups_members_and_attempts_and_filters() {
    let auth = json!({"type": "blocker", "kind": "auth", "message": "401 Unauthorized"}).to_string();
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let gate_s = gate.display().to_string();
    env.set_agents(&[
        ("asker", &["mcp-ask", "which colour?", "report", "success", "asked"]),
        ("runner", &["say", "running", "wait-file", &gate_s, "report", "success", "ran"]),
        ("writer", &["write", "w.txt", "written\n", "report", "success", "wrote w.txt"]),
        ("reader", &["say", "read it", "report", "success", "read the zebra notes"]),
        ("first", &["event", &auth, "hang"]),
        ("second", &["report", "success", "done by second"]),
        ("m1", &["write", "m1.txt", "1\n", "report", "success", "m1"]),
        ("m2", &["write", "m2.txt", "2\n", "report", "success", "m2"]),
    ]);
    let config = env.project.path().join(".caesar/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}[[role]]\nname = \"pair\"\nagents = [\"first\", \"second\"]\nmode = \"read-only\"\n"),
    )
    .unwrap();
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "write w.txt");
    req.mode = "write".into();
    let writer = c.delegate(req).await.unwrap().into_inner();
    assert_eq!(writer.isolation, "worktree");
    let writer = writer.task_id;
    let mut req = env.delegate_request("reader", "read the zebra notes");
    req.mode = "read-only".into();
    let reader = c.delegate(req).await.unwrap().into_inner().task_id;
    let mut req = env.delegate_request("", "fall back");
    req.role = "pair".into();
    req.mode = "read-only".into();
    let chain = c.delegate(req).await.unwrap().into_inner().task_id;
    let mut req = env.delegate_request("", "fan out");
    req.agents = vec!["m1".into(), "m2".into()];
    req.mode = "write".into();
    let group = c.delegate(req).await.unwrap().into_inner();
    for id in [&writer, &reader, &chain, &group.task_ids[0], &group.task_ids[1]] {
        await_one(&mut c, id, LONG).await;
    }
    let mut req = env.delegate_request("runner", "run until the gate opens");
    req.mode = "read-only".into();
    let runner = c.delegate(req).await.unwrap().into_inner().task_id;
    let mut req = env.delegate_request("asker", "ask about colours");
    req.mode = "read-only".into();
    req.channel = true;
    let asker = c.delegate(req).await.unwrap().into_inner().task_id;

    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        b.wait(
            "the question",
            LONG,
            "return document.querySelector(`.col-answer [data-id='${arguments[0]}']`)",
            json!([asker]),
        );
        b.wait(
            "the runner",
            LONG,
            "return document.querySelector(`.col-running [data-id='${arguments[0]}']`)",
            json!([runner]),
        );
        assert_eq!(column_of(&b, &writer), json!("review"), "a worktree task not yet applied waits for review");
        assert_eq!(column_of(&b, &reader), json!("done"), "a read-only task in place is done");
        // The group: one card, its two members inside.
        b.wait("the group's card", LONG, "const g = document.querySelector(`#tasks [data-group='${arguments[0]}']`); return g && g.querySelectorAll('.sub').length === 2", json!([group.group_id]));
        for m in &group.task_ids {
            let inside = b.js(
                "const s = document.querySelector(`#tasks [data-id='${arguments[1]}']`); return s && s.classList.contains('sub') && s.closest('[data-group]').dataset.group === arguments[0]",
                json!([group.group_id, m]),
            );
            assert_eq!(inside, json!(true), "member {m} is in its group's card");
        }
        assert_eq!(column_of(&b, &group.group_id), json!("review"));
        // A member's page names its group and links its sibling.
        b.goto(&format!("http://127.0.0.1:{port}/task/{}", group.task_ids[0]));
        let siblings = b.wait("the group on the page", LONG, "const g = document.querySelector('#group'); return g && [g.querySelector('a').textContent, [...g.querySelectorAll('a.id')].map((a) => a.textContent)]", json!([]));
        assert_eq!(siblings, json!([group.group_id, [group.group_id, group.task_ids[1]]]), "{siblings}");
        b.goto(&format!("http://127.0.0.1:{port}/"));
        b.wait(
            "the board again",
            LONG,
            "return document.querySelector(`#tasks [data-group='${arguments[0]}']`)",
            json!([group.group_id]),
        );
        // The fallback: the second attempt under the first one's card, whose badge is the last attempt's verdict.
        let chained = b.wait(
            "the attempts under their task",
            LONG,
            "const c = document.querySelector(`#tasks .card[data-id='${arguments[0]}']`); return c && c.querySelector('.sub') && [c.dataset.head, c.querySelector('.top .badge').textContent, c.querySelectorAll('.sub').length]",
            json!([chain]),
        );
        assert_ne!(chained[0], json!(chain), "the card leads with the last attempt: {chained}");
        assert_eq!(chained[1], json!("succeeded"), "{chained}");
        assert_eq!(chained[2], json!(1), "the first attempt is listed under it: {chained}");
        b.screenshot("board");
        // Search: only the zebra task stays.
        b.type_into("#search", "zebra");
        b.wait("the search", LONG, "return document.querySelectorAll('#tasks .card').length === 1", json!([]));
        assert_eq!(column_of(&b, &reader), json!("done"));
        assert!(b.url().contains("q=zebra"), "the search is in the address, to share or reload: {}", b.url());
        b.screenshot("board-search");
        // The agent filter: the runner alone.
        b.js(
            "const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input'))",
            json!([]),
        );
        let picked = b.js("const a = document.getElementById('agent-filter'); a.value = 'runner'; a.dispatchEvent(new Event('change')); return [a.value, location.search]", json!([]));
        assert_eq!(picked, json!(["runner", "?agent=runner"]));
        b.wait("the agent filter", LONG, "return document.querySelectorAll('#tasks .card').length === 1 && document.querySelector(`#tasks [data-id='${arguments[0]}']`)", json!([runner]));
        // A project that has no task: nothing.
        b.js("const p = document.getElementById('project'); p.append(new Option('elsewhere', '/elsewhere')); p.value = '/elsewhere'; p.dispatchEvent(new Event('change'))", json!([]));
        b.wait("the project filter", LONG, "return document.querySelectorAll('#tasks .card').length === 0", json!([]));
        // Reloaded with the filters in the address: they hold.
        b.goto(&format!("http://127.0.0.1:{port}/?q=zebra"));
        b.wait("the search from the address", LONG, "return document.body.dataset.painted && document.querySelectorAll('#tasks .card').length === 1 && document.getElementById('search').value === 'zebra'", json!([]));
    });
    std::fs::write(&gate, "go").unwrap();
    await_one(&mut c, &runner, LONG).await;
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/"));
        b.wait(
            "the runner done, live",
            LONG,
            "return document.querySelector(`.col-done [data-id='${arguments[0]}']`)",
            json!([runner]),
        );
    });
}

/// A report with a finding at a line of the file the agent wrote.
const FINDING_REPORT: &str = r#"{"protocol":"caesar.report/v1","status":"success","summary":"Wrote a.txt; one thing to check.","details":"The second line is a guess.","findings":[{"severity":"medium","title":"guessed value","file":"a.txt","line":2,"detail":"two may be wrong"},{"severity":"info","title":"no tests","detail":"none were run"}],"next_steps":["check line two"]}"#;

/// Writes a.txt the first time, b.txt when a.txt is there (a continuation in the same worktree);
/// says a coloured line and shows a tool call in between.
fn writer_steps() -> Vec<String> {
    let tool = |status: &str| {
        json!({"type": "tool_use", "tool": "Bash", "input_summary": "ls -la", "status": status, "id": "call-1"})
            .to_string()
    };
    vec![
        "say".into(),
        "\u{1b}[31mred alert\u{1b}[0m plain".into(),
        "event".into(),
        tool("started"),
        "event".into(),
        tool("succeeded"),
        "sh".into(),
        "if [ -f a.txt ]; then echo b > b.txt; else printf 'one\\ntwo\\n' > a.txt; fi".into(),
        "report-raw".into(),
        FINDING_REPORT.into(),
    ]
}

/// Issue 30, item 7 and issue 31, item 2: the task page leads with the verdict, the summary and
/// the findings as text (a finding with a line sits at that line of the diff), the diff has line
/// numbers, a comment on a line goes back to the agent through "continue" (as `file:line`, the
/// hunk and the comment) and the continuation works in the same worktree; the conversation has
/// timestamps, tool calls as cards and no ANSI codes; retry starts the objective again with
/// another agent; a worktree task that changed nothing is offered no Apply.
#[tokio::test(flavor = "multi_thread")]
async fn the_task_page_leads_with_the_verdict_and_line_comments_continue_the_task() {
    let steps = writer_steps();
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let mut env = Env::new(&[]);
    env.set_agents(&[
        ("writer", &steps),
        ("other", &["report", "success", "retried"]),
        ("idle", &["report", "success", "nothing to do"]),
    ]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let mut req = env.delegate_request("writer", "write a.txt");
    req.mode = "write".into();
    let first = c.delegate(req).await.unwrap().into_inner().task_id;
    let mut req = env.delegate_request("idle", "change nothing");
    req.mode = "write".into();
    let idle = c.delegate(req).await.unwrap().into_inner().task_id;
    for id in [&first, &idle] {
        let t = await_one(&mut c, id, LONG).await;
        assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    }
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    let next = tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{first}"));
        b.wait(
            "the verdict",
            LONG,
            "const v = document.querySelector('#verdict'); return v && v.textContent",
            json!([]),
        );
        let head = b.wait("the summary", LONG, "const s = document.querySelector('#report .summary'); const top = (q) => document.querySelector(q).getBoundingClientRect().top; return s && [document.querySelector('#verdict').textContent, s.textContent, top('.verdict-head') < top('#report'), top('#report ul.findings') < top('#diff'), top('#diff') < top('#events')]", json!([]));
        assert_eq!(
            head,
            json!(["succeeded", "Wrote a.txt; one thing to check.", true, true, true]),
            "the verdict, the summary and the findings lead, then the diff, then the conversation"
        );
        let report = b.wait("the findings", LONG, "const f = document.querySelectorAll('#report ul.findings li'); return f.length === 2 && [...f].map((l) => l.dataset.severity + ' ' + l.querySelector('b').textContent)", json!([]));
        assert_eq!(report, json!(["medium guessed value", "info no tests"]), "findings as text, worst first");
        let summary = b.js("return document.querySelector('#report .summary').textContent", json!([]));
        assert_eq!(summary, json!("Wrote a.txt; one thing to check."));
        assert_eq!(
            b.js("return document.querySelector('#report details.json').open", json!([])),
            json!(false),
            "the JSON is folded away"
        );
        // The diff: numbers of both sides, the finding at its line.
        let lines = b.wait("the diff", LONG, "const p = document.querySelector(`pre.patch[data-file='a.txt']`); return p && [...p.querySelectorAll('.ln.add')].map((l) => [l.dataset.line, l.querySelector('.code').textContent.trim()])", json!([]));
        assert_eq!(lines, json!([["1", "+one"], ["2", "+two"]]));
        let anchored = b.js("const n = document.querySelector(`pre.patch[data-file='a.txt'] .ln[data-line='2'] + .note.finding`); return n && n.textContent", json!([]));
        assert!(anchored.as_str().unwrap_or("").contains("guessed value"), "the finding sits under line 2: {anchored}");
        // The conversation: times, the tool call as one card, no escape codes.
        let conv = b.wait("the conversation", LONG, "const e = document.querySelector('#events'); return e && e.textContent.includes('red alert') && document.querySelector('#events .toolcard') && e.textContent", json!([]));
        let conv = conv.as_str().unwrap();
        assert!(
            conv.contains("red alert plain") && !conv.contains('\u{1b}') && !conv.contains("[31m"),
            "ANSI stripped: {conv}"
        );
        let cards =
            b.js("return [...document.querySelectorAll('#events .toolcard')].map((c) => c.textContent)", json!([]));
        assert_eq!(cards, json!(["Bash succeededls -la"]), "one card per tool call, at its last state");
        let times = b.js("return [...document.querySelectorAll('#events li time')].every((t) => /^\\d\\d:\\d\\d:\\d\\d$/.test(t.textContent))", json!([]));
        assert_eq!(times, json!(true), "every event has its time");
        assert!(!b.text().contains('\u{1b}'), "no escape code anywhere on the page");
        b.screenshot("task-verdict-findings");
        b.js("document.querySelector('#conversation').scrollIntoView()", json!([]));
        b.screenshot("task-conversation");
        // A comment on line 2, then continue.
        b.js("document.querySelector(`pre.patch[data-file='a.txt'] .ln[data-line='2'] .cbtn`).click()", json!([]));
        b.type_into("pre.patch .comment-box textarea", "make it three");
        b.click("[data-save-comment='a.txt:2']");
        b.wait(
            "the comment",
            LONG,
            "return document.querySelector(`.note.comment[data-comment='a.txt:2']`)",
            json!([]),
        );
        assert_eq!(
            b.js("return document.querySelector('[data-action=continue]').textContent", json!([])),
            json!("Continue with 1 comment(s)")
        );
        b.type_into("#continue-text", "Please address the comment.");
        b.js("document.querySelector('#diff').scrollIntoView()", json!([]));
        b.screenshot("task-diff-comment");
        b.click("[data-action=continue]");
        let link = b.wait(
            "continued",
            LONG,
            "const a = document.querySelector('#continue-box .result.good a'); return a && a.textContent",
            json!([]),
        );
        b.screenshot("task-continued");
        link.as_str().unwrap().to_owned()
    });
    let t = await_one(&mut c, &next, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert_eq!(
        t.objective,
        "Please address the comment.\n\nReview comments on the diff:\n\na.txt:2\n```diff\n@@ -0,0 +1,2 @@\n+one\n+two\n```\nmake it three",
        "the comment went back as file:line, hunk and comment"
    );
    assert_eq!(t.continues, first, "a continuation of the first task");
    let retried = tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{next}"));
        b.wait("both files in one diff", LONG, "return document.querySelector(`pre.patch[data-file='a.txt']`) && document.querySelector(`pre.patch[data-file='b.txt']`)", json!([]));
        assert!(b.text().contains(&format!("Continues {first}")), "{}", b.text());
        // The first task's page points to its continuation and offers no second one.
        b.goto(&format!("http://127.0.0.1:{port}/task/{first}"));
        b.wait("the lineage", LONG, "return document.querySelector('#actions') && document.querySelector('#actions').textContent.includes('Continued by')", json!([]));
        assert_eq!(b.js("return document.querySelector('[data-action=continue]') === null && document.querySelector('[data-action=apply]') === null", json!([])), json!(true));
        // Nothing to apply where nothing changed.
        b.goto(&format!("http://127.0.0.1:{port}/task/{idle}"));
        b.wait("the empty diff", LONG, "return document.querySelector('#no-changes') && document.querySelector('#actions').textContent.includes('Nothing to apply')", json!([]));
        assert_eq!(
            b.js("return document.querySelector('[data-action=apply]')", json!([])),
            json!(null),
            "no Apply without changes"
        );
        // Retry with another agent.
        b.wait(
            "the agents to retry with",
            LONG,
            "return [...document.querySelectorAll('#retry-agent option')].map((o) => o.value).includes('other')",
            json!([]),
        );
        b.js("document.getElementById('retry-agent').value = 'other'", json!([]));
        b.click("[data-action=retry]");
        let retried = b.wait(
            "retried",
            LONG,
            "const a = document.querySelector('#retry-box .result.good a'); return a && a.textContent",
            json!([]),
        );
        b.screenshot("task-retried");
        retried.as_str().unwrap().to_owned()
    });
    let t = await_one(&mut c, &retried, LONG).await;
    assert_eq!((t.agent.as_str(), t.objective.as_str(), t.status().as_str()), ("other", "change nothing", "succeeded"));
}

/// Stands in for claude's stream-json protocol (as in tests/steer.rs): says it works, waits for
/// the next user message on stdin (the steer) and answers it in a second turn.
const STEERABLE: &str = r#"#!/usr/bin/env python3
import json, sys
def say(v):
    print(json.dumps(v, separators=(",", ":")), flush=True)
sys.stdin.readline()
say({"type": "system", "subtype": "init", "session_id": "s-dash"})
say({"type": "assistant", "message": {"content": [{"type": "text", "text": "working"}]}})
# A steer with "interrupt" comes as the control protocol's interrupt, then the message.
interrupted = False
while True:
    line = json.loads(sys.stdin.readline())
    if line.get("type") == "control_request" and line["request"]["subtype"] == "interrupt":
        interrupted = True
        say({"type": "control_response", "response": {"subtype": "success", "request_id": line["request_id"]}})
        continue
    break
say({"type": "result", "subtype": "success", "is_error": False, "result": "first turn done"})
text = ("(interrupted) " if interrupted else "") + line["message"]["content"]
say({"type": "assistant", "message": {"content": [{"type": "text", "text": "heard: " + text}]}})
say({"type": "result", "subtype": "success", "is_error": False, "result": "heard: " + text})
# Running until the test has seen the page acknowledge the steer: an ended
# task's page has no steer box, and its acknowledgement goes with it.
import os, time
for _ in range(1200):
    if os.path.exists(GATE):
        break
    time.sleep(0.05)
sys.stdin.read()
"#;

/// Issue 31, item 1: the steer box on a running task's page, its interrupt ticked, reaches the agent
/// (the interrupt, then the message) without restarting it, and the delivery shows in the conversation; a task started from the board's
/// form runs; the new actions are refused without the page's CSRF token.
#[tokio::test(flavor = "multi_thread")]
async fn a_steer_from_the_page_reaches_the_running_agent_and_a_task_starts_from_the_board() {
    let mut env = Env::new(&[]);
    let claude = env.home.path().join("claude");
    let gate = env.file("steer-seen");
    std::fs::write(&claude, STEERABLE.replace("GATE", &format!("{:?}", gate.display().to_string()))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!(
            "[policy]\nallow_recursion = true\n\n[[agent]]\nid = \"quick\"\nbin = {:?}\nargs = [\"say\", \"started from the page\", \"report\", \"success\", \"page task done\"]\n\n[bin]\nclaude = {:?}\n",
            fake_agent().display().to_string(),
            claude.display().to_string()
        ),
    )
    .unwrap();
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest { mode: "read-only".into(), ..env.delegate_request("claude", "build the client") };
    let id = c.delegate(req).await.unwrap().into_inner().task_id;
    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        // Without the CSRF token, from the dashboard's own origin: refused.
        for path in [
            format!("/api/task/{id}/steer"),
            "/api/tasks".to_owned(),
            format!("/api/task/{id}/continue"),
            format!("/api/task/{id}/retry"),
        ] {
            let r = b.js_async(
                "const done = arguments[1]; fetch(arguments[0], {method: 'POST', headers: {'content-type': 'application/json'}, body: '{\"text\": \"x\", \"objective\": \"x\"}'}).then(async (r) => done([r.status, await r.text()]))",
                json!([path]),
            );
            assert_eq!(r[0], 403, "{path}: {r}");
        }
        b.goto(&format!("http://127.0.0.1:{port}/task/{id}"));
        b.wait("the agent working", LONG, "const e = document.querySelector('#events'); return e && e.textContent.includes('working') && document.querySelector('#steer-text')", json!([]));
        b.type_into("#steer-text", "use the v2 API");
        b.click("#steer-interrupt");
        b.screenshot("task-steer");
        b.click("[data-action=steer]");
        b.wait(
            "the steer sent",
            LONG,
            "const r = document.querySelector('#steer-box .result.good'); return r && r.textContent",
            json!([]),
        );
        std::fs::write(&gate, "").unwrap();
        let delivered = b.wait(
            "the delivery in the conversation",
            LONG,
            "const s = document.querySelector('#events li[data-type=steer]'); return s && s.textContent",
            json!([]),
        );
        assert!(delivered.as_str().unwrap().contains("use the v2 API"), "{delivered}");
        assert!(
            delivered.as_str().unwrap().contains("interrupt_then_stdin_message"),
            "the box's interrupt: {delivered}"
        );
        b.wait(
            "the answer to the steer, after the interrupt",
            LONG,
            "return document.querySelector('#events').textContent.includes('heard: (interrupted) use the v2 API')",
            json!([]),
        );
        b.screenshot("task-steered");
    });
    let t = await_one(&mut c, &id, LONG).await;
    assert_eq!(t.status().as_str(), "succeeded", "{t:?}");
    assert!(t.report_json.contains("heard: (interrupted) use the v2 API"), "{}", t.report_json);
    let logs =
        c.logs(pb::LogsRequest { task_id: id.clone(), limit: 1000, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(logs.events_json.iter().filter(|e| e.contains("\"type\":\"started\"")).count(), 1, "not restarted");

    // Start a task from the board's form.
    let started = tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/"));
        b.wait("the board", LONG, "return document.body.dataset.painted", json!([]));
        b.click("[data-action=new]");
        b.type_into("#start-objective", "say hello from the page");
        b.wait(
            "the agents",
            LONG,
            "return [...document.querySelectorAll('#start-agent option')].map((o) => o.value).includes('quick')",
            json!([]),
        );
        b.js("document.getElementById('start-agent').value = 'quick'", json!([]));
        b.screenshot("board-new-task");
        b.click("[data-action=start]");
        let page = b.wait(
            "the new task's page",
            LONG,
            "return location.pathname.startsWith('/task/') && location.pathname",
            json!([]),
        );
        b.wait(
            "its verdict",
            LONG,
            "const v = document.querySelector('#verdict'); return v && v.textContent === 'succeeded'",
            json!([]),
        );
        b.screenshot("task-started-from-board");
        page.as_str().unwrap().trim_start_matches("/task/").to_owned()
    });
    let t = c.status(pb::StatusRequest { task_id: started.clone() }).await.unwrap().into_inner();
    assert_eq!(
        (t.agent.as_str(), t.objective.as_str(), t.mode.as_str()),
        ("quick", "say hello from the page", "read-only")
    );
}

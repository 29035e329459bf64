//! The review loop (issue 32, item 2) on the dashboard's task page (issue 30, item 7), in a real
//! headless Chromium against a real daemon, real git and scripted worker and reviewer: each
//! finding sits under the diff line it is anchored to, with its place, round and state, and a
//! finding on a hunk the worker rewrote is shown stale. Screenshots go to target/dashboard-shots/.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "review/scripts.rs"]
mod scripts;
#[path = "dashboard/session.rs"]
mod session;
#[path = "dashboard/webdriver.rs"]
mod webdriver;

use caesar_proto::pb;
use common::*;
use scripts::{WORKER, block};
use serde_json::json;
use session::*;

/// Issue 30, item 7 with issue 32, item 2: the worker's page shows the review loop's findings
/// under the lines they are anchored to, each with `file:line`, its round, its reviewer and its
/// state; the finding whose hunk the worker rewrote is marked stale, the one it left is open.
#[tokio::test(flavor = "multi_thread")]
async fn the_task_page_shows_each_review_finding_under_its_line_with_its_state() {
    let mut env = Env::new(&[]);
    let review = env.file("review.txt");
    // The reviewer says the same each round: a.txt's first hunk (which round 2 rewrites) and b.txt's.
    std::fs::write(&review, block("changes", &[("a.txt", 1, "+one", "a is wrong"), ("b.txt", 1, "+bee", "b is thin")]))
        .unwrap();
    env.set_agents(&[("writer", WORKER), ("rev", &["sh", &format!("cat {}", review.display())])]);
    repo(&env);
    let mut c = env.start_daemon().await;
    let req = pb::DelegateRequest {
        mode: "write".into(),
        review_by: "rev".into(),
        review_rounds: 2,
        ..env.delegate_request("writer", "write a and b")
    };
    let d = c.delegate(req).await.unwrap().into_inner();
    let a = c
        .r#await(pb::AwaitRequest { task_ids: vec![d.group_id.clone()], timeout_ms: 90_000, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(a.groups[0].done, "the loop ended");
    // Worker, reviewer, worker, reviewer: the page of the last worker's run.
    let members: Vec<String> = a.groups[0].members.iter().map(|m| m.task_id.clone()).collect();
    assert_eq!(members.len(), 4, "{members:?}");
    let worker = members[2].clone();
    let end = c.status(pb::StatusRequest { task_id: worker.clone() }).await.unwrap().into_inner();
    let states: Vec<(u32, &str, &str)> =
        end.review_findings.iter().map(|f| (f.round, f.file.as_str(), f.state.as_str())).collect();
    assert_eq!(
        states,
        [(1, "a.txt", "resolved"), (1, "b.txt", "resolved"), (2, "a.txt", "stale"), (2, "b.txt", "open")],
        "the loop the page shows"
    );

    let (b, port) = tokio::task::block_in_place(|| logged_in(&env));
    tokio::task::block_in_place(|| {
        b.goto(&format!("http://127.0.0.1:{port}/task/{worker}"));
        b.wait(
            "the findings in the diff",
            LONG,
            "return document.querySelectorAll('pre.patch .note.finding').length === 4",
            json!([]),
        );
        // Each note, in the order of the page: the diff line above it, its place, round and state.
        let notes = b.js(
            "return [...document.querySelectorAll('pre.patch .note.finding')].map((n) => {
               let l = n.previousElementSibling;
               while (l && !l.classList.contains('ln')) l = l.previousElementSibling;
               return [n.closest('pre.patch').dataset.file, l.dataset.line, l.querySelector('.code').textContent.trim(),
                 n.querySelector('.loc').textContent.trim(), n.querySelector('.fstate').textContent, n.querySelector('b').textContent,
                 n.textContent.includes('round ' + n.dataset.round), n.classList.contains('stale')];
             })",
            json!([]),
        );
        assert_eq!(
            notes,
            json!([
                ["a.txt", "1", "+fixed", "a.txt:1", "resolved", "a is wrong", true, false],
                ["a.txt", "1", "+fixed", "a.txt:1", "stale", "a is wrong", true, true],
                ["b.txt", "1", "+bee", "b.txt:1", "resolved", "b is thin", true, false],
                ["b.txt", "1", "+bee", "b.txt:1", "open", "b is thin", true, false],
            ]),
            "{notes}"
        );
        // The stale note says which hunk it was written on, which the diff no longer has.
        let stale = b.js("return document.querySelector('pre.patch .note.finding.stale').textContent", json!([]));
        assert!(stale.as_str().unwrap().contains("+one"), "{stale}");
        // Each note links the reviewer's run that found it.
        let reviewers = b.js(
            "return [...document.querySelectorAll('pre.patch .note.finding')].map((n) => n.querySelector('a.id').textContent)",
            json!([]),
        );
        assert_eq!(reviewers, json!([members[1], members[3], members[1], members[3]]), "{reviewers}");
        // The summary lists them too, with their places, the open one first.
        let listed = b.js(
            "return [...document.querySelectorAll('ul.findings.review li')].map((li) => [li.querySelector('.fstate').textContent, li.querySelector('.loc').textContent.trim()])",
            json!([]),
        );
        assert_eq!(
            listed,
            json!([["open", "b.txt:1"], ["stale", "a.txt:1"], ["resolved", "a.txt:1"], ["resolved", "b.txt:1"]]),
            "what still needs doing first: {listed}"
        );
        // The open finding the loop copied into the worker's report is shown once, as a review finding.
        let own = b.js(
            "return [...document.querySelectorAll('ul.findings:not(.review) li b')].map((b) => b.textContent)",
            json!([]),
        );
        assert_eq!(own, json!(["the review loop ended without the reviewer's approval"]), "{own}");
        b.screenshot("task-review-summary");
        b.js("document.querySelector('pre.patch[data-file=\"a.txt\"]').scrollIntoView()", json!([]));
        b.screenshot("task-review-findings");
    });
}

//! Bounds against exhaustion (issue 19), through the real daemon: an await
//! on too many ids, an objective or context too large, too many constraints,
//! and a full queue are each refused by name, with the cap and the fix, and
//! leave nothing recorded.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use caesar_proto::pb;
use common::*;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn oversized_requests_and_a_full_queue_are_refused_by_name() {
    let mut env = Env::new(&[]);
    let gate = env.file("gate");
    let g = gate.display().to_string();
    let fake = fake_agent().display().to_string();
    std::fs::write(
        env.project.path().join(".caesar/config.toml"),
        format!(
            "[policy]\nmax_parallel = 1\n\
             [[agent]]\nid = \"gated\"\nbin = {fake:?}\nargs = [\"wait-file\", {g:?}, \"report\", \"success\", \"ok\"]\n\
             [[agent]]\nid = \"quick\"\nbin = {fake:?}\nargs = [\"report\", \"success\", \"ok\"]\n"
        ),
    )
    .unwrap();
    let mut c = env.start_daemon_with(&[("CAESAR_MAX_PENDING", "2")]).await;

    // 1. Await on more ids than the cap: INVALID_ARGUMENT naming the cap,
    // before any id is looked up.
    let ids: Vec<String> = (0..1001).map(|i| format!("t_nope{i}")).collect();
    let e = c.r#await(pb::AwaitRequest { task_ids: ids, timeout_ms: 10, ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("1001") && e.message().contains("1000"), "{}", e.message());

    // 2. Oversized fields: INVALID_ARGUMENT naming the field.
    let mut r = env.delegate_request("quick", &"o".repeat(256 * 1024 + 1));
    let e = c.delegate(r.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("`objective`") && e.message().contains("262145"), "{}", e.message());
    r.objective = "x".to_owned();
    r.context = "c".repeat(1024 * 1024 + 1);
    let e = c.delegate(r.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("`context`"), "{}", e.message());
    r.context.clear();
    r.constraints = vec!["keep it short".to_owned(); 101];
    let e = c.delegate(r.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("`constraints`") && e.message().contains("101"), "{}", e.message());

    // 3. A full queue: RESOURCE_EXHAUSTED saying how many wait.
    let first = c.delegate(env.delegate_request("gated", "1")).await.unwrap().into_inner();
    assert_eq!(first.status().as_str(), "running");
    let second = c.delegate(env.delegate_request("quick", "2")).await.unwrap().into_inner();
    let third = c.delegate(env.delegate_request("quick", "3")).await.unwrap().into_inner();
    assert_eq!((second.status().as_str(), third.status().as_str()), ("pending", "pending"));
    let e = c.delegate(env.delegate_request("quick", "4")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("2 tasks are already queued"), "{}", e.message());
    // A place freed is a place to delegate again.
    c.cancel(pb::CancelRequest { task_id: second.task_id.clone() }).await.unwrap();
    let fourth = c.delegate(env.delegate_request("quick", "4")).await.unwrap().into_inner();
    assert_eq!(fourth.status().as_str(), "pending");

    // Nothing refused was recorded, and the listing still works.
    let ps = env.caesar(&["ps", "-a"]);
    assert!(ps.status.success(), "{}", String::from_utf8_lossy(&ps.stderr));
    let listed = String::from_utf8_lossy(&ps.stdout).lines().filter(|l| l.contains("t_")).count();
    assert_eq!(listed, 4, "{}", String::from_utf8_lossy(&ps.stdout));

    std::fs::write(&gate, "go").unwrap();
    for id in [&first.task_id, &third.task_id, &fourth.task_id] {
        assert_eq!(await_one(&mut c, id, LONG).await.status().as_str(), "succeeded");
    }
}

//! model-server: the scripted model server of the real-CLI tests, run by hand.
//!
//! ```sh
//! target/debug/model-server '[{"text":"hi"},{"tool":"Write","input":{"file_path":"a","content":"b"}}]'
//! ```
//!
//! It prints its URL, then each request's path and body on stderr, and stops after
//! `--seconds` (default 300) so that a forgotten one does not linger.

use std::time::{Duration, Instant};

use caesar_tests::model_server::{ModelServer, Reply};
use serde_json::Value;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut script = Vec::new();
    let mut seconds = 300;
    while let Some(a) = args.next() {
        if a == "--seconds" {
            seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(seconds);
            continue;
        }
        let steps: Vec<Value> = serde_json::from_str(&a).unwrap_or_else(|e| {
            eprintln!("model-server: the script must be a JSON array of steps: {e}");
            std::process::exit(2)
        });
        script.extend(steps.iter().map(reply_of));
    }
    let server = ModelServer::start(script);
    println!("{}", server.url());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut seen = 0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let requests = server.requests();
        for r in &requests[seen..] {
            eprintln!("{} {} {}", r.method, r.path, r.body_text());
        }
        seen = requests.len();
    }
}

/// `{"text": T}`, `{"tool": NAME, "input": {...}}`, `{"item": {...}}` or `{"status": N, "message": M}`.
fn reply_of(step: &Value) -> Reply {
    if let Some(t) = step.get("text").and_then(Value::as_str) {
        Reply::text(t)
    } else if let Some(name) = step.get("tool").and_then(Value::as_str) {
        Reply::tool(name, step.get("input").cloned().unwrap_or_default())
    } else if let Some(item) = step.get("item") {
        Reply::ResponsesItem(item.clone())
    } else if let Some(status) = step.get("status").and_then(Value::as_u64) {
        Reply::error(u16::try_from(status).unwrap_or(500), step.get("message").and_then(Value::as_str).unwrap_or(""))
    } else {
        eprintln!("model-server: unknown step {step}");
        std::process::exit(2)
    }
}

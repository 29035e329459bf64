//! Blocking work off the async workers (issue 19): a section that runs on
//! tokio's blocking pool, and the check that work which reads what an agent
//! wrote (a report of tens of megabytes) runs in one.
//!
//! The daemon's runtime has two workers; a report parsed on one of them
//! stalls every RPC and monitor scheduled there for as long as it takes.
//! [`section`] moves such work to the blocking pool and marks the thread
//! while it runs; [`check_off_async_workers`] (a debug assertion) fails a
//! debug build that does the work inside the runtime but outside a section.

use std::cell::Cell;

thread_local! {
    static IN_SECTION: Cell<bool> = const { Cell::new(false) };
}

/// Resets the mark when the section ends, even by a panic.
struct Mark;

impl Drop for Mark {
    fn drop(&mut self) {
        IN_SECTION.with(|s| s.set(false));
    }
}

/// Runs `f` on the blocking pool, marked as a blocking section.
pub async fn section<T, F>(f: F) -> std::result::Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        IN_SECTION.with(|s| s.set(true));
        let _mark = Mark;
        f()
    })
    .await
}

/// Whether blocking work may run here: inside a [`section`], or outside any
/// tokio runtime (a plain thread, a unit test, a CLI).
pub fn off_async_workers() -> bool {
    IN_SECTION.with(Cell::get) || tokio::runtime::Handle::try_current().is_err()
}

/// Fails a debug build when `what` runs on an async worker.
#[track_caller]
pub fn check_off_async_workers(what: &str) {
    debug_assert!(off_async_workers(), "{what} runs on an async worker: move it into blocking::section");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_section_is_off_the_workers_and_the_worker_is_not() {
        assert!(!off_async_workers(), "an async task is on a worker");
        assert!(section(off_async_workers).await.unwrap());
        // The mark does not outlive its section on a reused pool thread.
        assert!(!tokio::task::spawn_blocking(|| IN_SECTION.with(Cell::get)).await.unwrap());
        assert!(std::thread::spawn(off_async_workers).join().unwrap());
    }

    #[tokio::test]
    #[should_panic(expected = "runs on an async worker")]
    #[cfg(debug_assertions)]
    async fn the_check_fails_on_a_worker() {
        check_off_async_workers("parsing a report");
    }
}

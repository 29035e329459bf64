//! Wake on write for a task's `raw.log` (issue 15, the permission round trip's latency).
//!
//! The monitor reads `raw.log` on a tick (`EngineSettings::poll`, 20 ms), so a permission
//! request an agent printed waited up to a tick before it became a question. On Linux the local
//! runner watches the file with inotify (`IN_MODIFY`, never through a link) and the monitor reads
//! as soon as the supervisor appended to it. The tick stays: it is the fallback where the watch
//! cannot be set (another OS, a file that is not there, inotify's limits) and what the cluster
//! runner uses. Wakes are coalesced: one read of the inotify descriptor takes every event queued
//! so far, and the monitor reads the whole of what was appended.

use std::path::Path;

/// A watch on one file's writes; `changed` resolves once the file was written to since the last
/// call (or when the watch was set).
pub(crate) struct LogWake {
    #[cfg(target_os = "linux")]
    fd: tokio::io::unix::AsyncFd<linux::Watch>,
    /// The watch failed after it was set: from then on only the tick wakes.
    #[cfg(target_os = "linux")]
    broken: bool,
}

impl LogWake {
    /// A watch on `path`'s writes, or `None` where none can be set (the caller keeps polling),
    /// also outside a Tokio runtime.
    pub(crate) fn watch(path: &Path) -> Option<LogWake> {
        #[cfg(target_os = "linux")]
        {
            // AsyncFd needs the runtime's reactor (it panics without one).
            tokio::runtime::Handle::try_current().ok()?;
            let watch = linux::Watch::new(path)?;
            // SAFETY: `Watch` owns its inotify descriptor, which stays open and is never
            // replaced while the `AsyncFd` owns the `Watch` (it is closed when both drop).
            let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(watch, tokio::io::Interest::READABLE) }
                .ok()?;
            Some(LogWake { fd, broken: false })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
            None
        }
    }

    /// Resolves when the file was written to; never, once the watch broke.
    pub(crate) async fn changed(&mut self) {
        #[cfg(target_os = "linux")]
        loop {
            if self.broken {
                return std::future::pending().await;
            }
            let Ok(mut guard) = self.fd.readable().await else {
                self.broken = true;
                continue;
            };
            match guard.get_inner().drain() {
                // Drained to EAGAIN: the readiness is cleared (a write after the read sets it
                // again), and a readiness with nothing queued waits on.
                Ok(any) => {
                    guard.clear_ready();
                    if any {
                        return;
                    }
                }
                Err(_) => self.broken = true,
            }
        }
        #[cfg(not(target_os = "linux"))]
        std::future::pending().await
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::{AsFd, AsRawFd, RawFd};
    use std::path::Path;

    use nix::errno::Errno;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

    /// A non-blocking inotify descriptor watching one file.
    pub(super) struct Watch(Inotify);

    impl Watch {
        pub(super) fn new(path: &Path) -> Option<Watch> {
            let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
            // IN_DONT_FOLLOW: the task directory is in the agent's reach, a link put in the log's
            // place is not followed (and then only the tick reads the real one).
            inotify.add_watch(path, AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_DONT_FOLLOW).ok()?;
            Some(Watch(inotify))
        }

        /// Takes every queued event: whether there was any (`false` when none was queued).
        pub(super) fn drain(&self) -> nix::Result<bool> {
            let mut any = false;
            loop {
                match self.0.read_events() {
                    Ok(events) if events.is_empty() => return Ok(any),
                    Ok(_) => any = true,
                    Err(Errno::EAGAIN) => return Ok(any),
                    Err(Errno::EINTR) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    impl AsRawFd for Watch {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_wakes_the_watch_and_silence_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.log");
        let mut f = std::fs::File::create(&path).unwrap();
        let mut wake = LogWake::watch(&path).expect("inotify is there on Linux");
        let quiet = tokio::time::timeout(Duration::from_millis(50), wake.changed()).await;
        assert!(quiet.is_err(), "no write, no wake");
        // Many writes before the wait make one wake, then silence again.
        for _ in 0..100 {
            f.write_all(b"line\n").unwrap();
        }
        tokio::time::timeout(Duration::from_secs(5), wake.changed()).await.expect("a write wakes it");
        let again = tokio::time::timeout(Duration::from_millis(50), wake.changed()).await;
        assert!(again.is_err(), "the queued events were taken at once");
        f.write_all(b"more\n").unwrap();
        tokio::time::timeout(Duration::from_secs(5), wake.changed()).await.expect("the next write wakes it");
    }

    #[tokio::test]
    async fn no_watch_through_a_link_or_on_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(LogWake::watch(&dir.path().join("absent")).is_none());
        let target = dir.path().join("target");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("raw.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // A watch on the link itself may be set, but a write to its target never wakes it.
        if let Some(mut wake) = LogWake::watch(&link) {
            std::fs::OpenOptions::new().append(true).open(&target).unwrap().write_all(b"x\n").unwrap();
            let woke = tokio::time::timeout(Duration::from_millis(100), wake.changed()).await;
            assert!(woke.is_err(), "a write through the link's target is not the log's");
        }
    }
}

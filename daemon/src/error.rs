//! The engine's error type. Every message names what was wrong and how to
//! fix it; the RPC layer maps each variant to one gRPC code.

/// An engine error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's input is wrong (gRPC INVALID_ARGUMENT).
    #[error("{0}")]
    Invalid(String),
    /// A task, question or agent does not exist (NOT_FOUND).
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the state does not allow it (FAILED_PRECONDITION).
    #[error("{0}")]
    Precondition(String),
    /// Policy refused the request (PERMISSION_DENIED).
    #[error("{0}")]
    Refused(String),
    /// Two writers raced and this one lost (ABORTED).
    #[error("{0}")]
    Conflict(String),
    /// A bound on what the daemon holds was reached, e.g. the queue is full (RESOURCE_EXHAUSTED).
    #[error("{0}")]
    Exhausted(String),
    /// Not built yet (UNIMPLEMENTED).
    #[error("{0}")]
    Unimplemented(String),
    /// The store failed (RESOURCE_EXHAUSTED when its disk is full, else INTERNAL).
    #[error("store: {0}{remedy}", remedy = if is_store_full(.0) { STORE_FULL_REMEDY } else { "" })]
    Store(#[from] rusqlite::Error),
    /// The file system failed (RESOURCE_EXHAUSTED when the disk is full, else INTERNAL).
    #[error("{0}{remedy}", remedy = if is_io_full(.0) { IO_FULL_REMEDY } else { "" })]
    Io(#[from] std::io::Error),
    /// Anything else that is our fault.
    #[error("{0}")]
    Internal(String),
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a full disk means to the caller, after SQLite's own words (a failed
/// transaction is rolled back whole, so nothing of it was recorded).
const STORE_FULL_REMEDY: &str = ": no space left on the disk that holds caesar's state directory \
    (`caesar doctor` prints it), so nothing of this request was recorded; free some space there and retry";
/// The same for a file caesar writes, whose path the message already names.
const IO_FULL_REMEDY: &str = ": the disk is full; free some space on it and retry";

fn is_store_full(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => f.code == rusqlite::ErrorCode::DiskFull,
        _ => false,
    }
}

fn is_io_full(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

impl Error {
    /// An I/O error with the path and the action that failed.
    pub fn io_at(action: &str, path: &std::path::Path, e: std::io::Error) -> Error {
        Error::Io(std::io::Error::new(e.kind(), format!("{action} {}: {e}", path.display())))
    }
}

impl Error {
    /// Whether the disk under the store or a task's files is full (or over quota).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Store(e) => is_store_full(e),
            Error::Io(e) => is_io_full(e),
            _ => false,
        }
    }

    /// The same error, its message followed by `note`.
    pub fn with_note(self, note: &str) -> Error {
        let add = |m: String| format!("{m} ({note})");
        match self {
            Error::Invalid(m) => Error::Invalid(add(m)),
            Error::NotFound(m) => Error::NotFound(add(m)),
            Error::Precondition(m) => Error::Precondition(add(m)),
            Error::Refused(m) => Error::Refused(add(m)),
            Error::Conflict(m) => Error::Conflict(add(m)),
            Error::Exhausted(m) => Error::Exhausted(add(m)),
            Error::Unimplemented(m) => Error::Unimplemented(add(m)),
            Error::Internal(m) => Error::Internal(add(m)),
            other => other,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        let msg = e.to_string();
        if e.is_disk_full() {
            // gRPC's own code for "the entire file system is out of space".
            return tonic::Status::resource_exhausted(msg);
        }
        match e {
            Error::Invalid(_) => tonic::Status::invalid_argument(msg),
            Error::NotFound(_) => tonic::Status::not_found(msg),
            Error::Precondition(_) => tonic::Status::failed_precondition(msg),
            Error::Refused(_) => tonic::Status::permission_denied(msg),
            Error::Conflict(_) => tonic::Status::aborted(msg),
            Error::Exhausted(_) => tonic::Status::resource_exhausted(msg),
            Error::Unimplemented(_) => tonic::Status::unimplemented(msg),
            Error::Store(_) | Error::Io(_) | Error::Internal(_) => tonic::Status::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_named_with_its_remedy_and_resource_exhausted() {
        let e = Error::io_at(
            "cannot write",
            std::path::Path::new("/s/tasks/t_1/task.json"),
            std::io::Error::from_raw_os_error(28),
        );
        assert!(e.is_disk_full());
        let s = tonic::Status::from(e);
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert!(s.message().starts_with("cannot write /s/tasks/t_1/task.json: No space left on device"), "{s:?}");
        assert!(s.message().ends_with("the disk is full; free some space on it and retry"), "{s:?}");

        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".to_owned()),
        );
        let s = tonic::Status::from(Error::Store(full));
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert!(s.message().starts_with("store: database or disk is full: no space left on the disk"), "{s:?}");
        assert!(s.message().contains("nothing of this request was recorded"), "{s:?}");
    }

    #[test]
    fn other_failures_keep_their_message_and_code() {
        let e = Error::Io(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "cannot write /x: denied"));
        assert!(!e.is_disk_full());
        let s = tonic::Status::from(e);
        assert_eq!((s.code(), s.message()), (tonic::Code::Internal, "cannot write /x: denied"));
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".to_owned()),
        );
        let s = tonic::Status::from(Error::Store(busy));
        assert_eq!((s.code(), s.message()), (tonic::Code::Internal, "store: database is locked"));
    }
}

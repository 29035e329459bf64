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
    /// Not built yet (UNIMPLEMENTED).
    #[error("{0}")]
    Unimplemented(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The file system failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Anything else that is our fault.
    #[error("{0}")]
    Internal(String),
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error with the path and the action that failed.
    pub fn io_at(action: &str, path: &std::path::Path, e: std::io::Error) -> Error {
        Error::Io(std::io::Error::new(e.kind(), format!("{action} {}: {e}", path.display())))
    }
}

impl Error {
    /// The same error, its message followed by `note`.
    pub fn with_note(self, note: &str) -> Error {
        let add = |m: String| format!("{m} ({note})");
        match self {
            Error::Invalid(m) => Error::Invalid(add(m)),
            Error::NotFound(m) => Error::NotFound(add(m)),
            Error::Precondition(m) => Error::Precondition(add(m)),
            Error::Refused(m) => Error::Refused(add(m)),
            Error::Conflict(m) => Error::Conflict(add(m)),
            Error::Unimplemented(m) => Error::Unimplemented(add(m)),
            Error::Internal(m) => Error::Internal(add(m)),
            other => other,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        let msg = e.to_string();
        match e {
            Error::Invalid(_) => tonic::Status::invalid_argument(msg),
            Error::NotFound(_) => tonic::Status::not_found(msg),
            Error::Precondition(_) => tonic::Status::failed_precondition(msg),
            Error::Refused(_) => tonic::Status::permission_denied(msg),
            Error::Conflict(_) => tonic::Status::aborted(msg),
            Error::Unimplemented(_) => tonic::Status::unimplemented(msg),
            Error::Store(_) | Error::Io(_) | Error::Internal(_) => tonic::Status::internal(msg),
        }
    }
}

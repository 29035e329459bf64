//! Tool errors: the stable `code: message` text a failed tool call returns.
//!
//! A failed tool returns `isError: true` with a single text block
//! `code: message`. The codes are stable; the message is for people and may
//! change. JSON-RPC protocol errors are kept for protocol faults (an unknown
//! tool name); everything a caller can fix or retry is a tool error.

use caesar_proto::client::ConnectError;
use rmcp::model::{CallToolResult, ContentBlock};
use tonic::Code;

/// The stable error codes of caesar's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Bad parameters: the caller must change the call (gRPC INVALID_ARGUMENT, OUT_OF_RANGE).
    Validation,
    /// The task, question, role or agent does not exist (NOT_FOUND).
    NotFound,
    /// Policy refused the request (PERMISSION_DENIED).
    PolicyRefused,
    /// The request is valid but the state does not allow it now: a lost race
    /// (ABORTED), a duplicate (ALREADY_EXISTS), the wrong state
    /// (FAILED_PRECONDITION, e.g. answering a question already answered), or
    /// a bound reached (RESOURCE_EXHAUSTED: a task's full steer queue, a full
    /// disk; the message says what frees it).
    Conflict,
    /// No daemon could be reached or started (connect errors, UNAVAILABLE).
    DaemonUnavailable,
    /// Anything else, including UNIMPLEMENTED (`not available in this build: ...`).
    Internal,
}

impl ErrorCode {
    /// The wire spelling of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Validation => "validation_error",
            ErrorCode::NotFound => "not_found",
            ErrorCode::PolicyRefused => "policy_refused",
            ErrorCode::Conflict => "conflict",
            ErrorCode::DaemonUnavailable => "daemon_unavailable",
            ErrorCode::Internal => "internal_error",
        }
    }
}

/// A failed tool call.
#[derive(Debug, Clone)]
pub struct ToolError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong and, where possible, how to fix it.
    pub message: String,
}

impl ToolError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ToolError {
        ToolError { code, message: message.into() }
    }

    /// A `validation_error`.
    pub fn validation(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::Validation, message)
    }

    /// The tool result: `isError: true` and one text block `code: message`.
    pub fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", self.code.as_str(), self.message))])
    }
}

impl From<tonic::Status> for ToolError {
    fn from(s: tonic::Status) -> ToolError {
        let msg = s.message().to_owned();
        let code = match s.code() {
            Code::InvalidArgument | Code::OutOfRange => ErrorCode::Validation,
            Code::NotFound => ErrorCode::NotFound,
            Code::PermissionDenied | Code::Unauthenticated => ErrorCode::PolicyRefused,
            Code::Aborted | Code::AlreadyExists | Code::FailedPrecondition | Code::ResourceExhausted => {
                ErrorCode::Conflict
            }
            Code::Unavailable => ErrorCode::DaemonUnavailable,
            Code::Unimplemented => {
                return ToolError::new(ErrorCode::Internal, format!("not available in this build: {msg}"));
            }
            _ => ErrorCode::Internal,
        };
        let msg = if msg.is_empty() { format!("caesard answered {:?}", s.code()) } else { msg };
        ToolError::new(code, msg)
    }
}

impl From<ConnectError> for ToolError {
    fn from(e: ConnectError) -> ToolError {
        ToolError::new(ErrorCode::DaemonUnavailable, e.to_string())
    }
}

/// Whether a failed call may have failed because the connection broke (the
/// daemon restarted), so reconnecting and retrying once is worth it.
pub fn is_transport(s: &tonic::Status) -> bool {
    match s.code() {
        Code::Unavailable => true,
        // hyper reports a connection reset mid-call as UNKNOWN with a
        // transport error as the source.
        Code::Unknown => {
            let m = s.message().to_ascii_lowercase();
            m.contains("transport") || m.contains("connection") || m.contains("broken pipe")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound reached (a task's steer queue full) is the caller's to wait
    /// out, not caesar's fault: `conflict`, with the daemon's words.
    #[test]
    fn a_bound_reached_is_a_conflict_and_keeps_its_message() {
        let e = ToolError::from(tonic::Status::resource_exhausted("task t_1 has 100 steers queued: wait for them"));
        assert_eq!(e.code, ErrorCode::Conflict);
        assert_eq!(e.message, "task t_1 has 100 steers queued: wait for them");
        assert_eq!(ToolError::from(tonic::Status::internal("x")).code, ErrorCode::Internal);
    }
}

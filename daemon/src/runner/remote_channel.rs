//! The return channel of a task that runs elsewhere (issue 16): what a
//! runner carries between the agent's `caesar-mcp --channel` and the engine
//! when the agent is not in a process tree on this machine.
//!
//! Locally the channel's gRPC calls reach the daemon's socket, and the
//! kernel's word on the connection says which task they speak for
//! (`engine/authority.rs`). A pod has no path to that socket. There the
//! runner opens the stream itself (one `pods/exec` into the task's own pod,
//! `runner/kubernetes/channel.rs`), so the stream is the credential: every
//! call on it speaks for that task and for no other, exactly as a call from
//! a task's tree does here. The calls and replies are these typed records,
//! one JSON line each way; protobuf stops at the relay in the pod.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Where a Kubernetes pod serves the task's channel (the agent's channel is
/// given it as `CAESAR_SOCKET`): beside the workspace, in the pod alone.
pub const KUBE_POD_SOCKET: &str = "/ws/.channel/caesard.sock";

/// One call of the return channel, as the agent made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum ChannelCall {
    /// `get_task`: the mission.
    GetTask { task_id: String },
    /// `report_progress`.
    Progress { task_id: String, message: String, pct: Option<f64> },
    /// `ask_orchestrator`; `question_id` is the channel's own, so a call
    /// repeated after a dropped stream waits on the same question.
    Ask { task_id: String, question: String, options: Vec<String>, timeout_ms: u64, question_id: String },
    /// `submit_report`.
    Submit { task_id: String, report_json: String },
}

impl ChannelCall {
    /// The task the call names (it must be the one the stream belongs to).
    pub fn task_id(&self) -> &str {
        match self {
            ChannelCall::GetTask { task_id }
            | ChannelCall::Progress { task_id, .. }
            | ChannelCall::Ask { task_id, .. }
            | ChannelCall::Submit { task_id, .. } => task_id,
        }
    }
}

/// What a call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum ChannelReply {
    /// `get_task`: task.json's text.
    Task { task_json: String },
    /// `report_progress`: the event's sequence number.
    Progress { seq: u64 },
    /// `ask_orchestrator`.
    Answer { question_id: String, answered: bool, answer: String },
    /// `submit_report`: accepted.
    Accepted,
}

/// Why a call failed: a gRPC status code (its number) and its message, so
/// the relay in the pod answers the agent's channel exactly as the daemon
/// would have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelFault {
    pub code: i32,
    pub message: String,
}

impl ChannelFault {
    /// A call that names another task than the stream's.
    pub fn other_task(named: &str, stream: &str) -> ChannelFault {
        ChannelFault {
            code: tonic::Code::PermissionDenied as i32,
            message: format!(
                "this channel call names task {named}, but it comes from task {stream}'s pod: a channel speaks only for its own task"
            ),
        }
    }
}

impl From<tonic::Status> for ChannelFault {
    fn from(s: tonic::Status) -> ChannelFault {
        ChannelFault { code: s.code() as i32, message: s.message().to_owned() }
    }
}

impl From<ChannelFault> for tonic::Status {
    fn from(f: ChannelFault) -> tonic::Status {
        tonic::Status::new(tonic::Code::from_i32(f.code), f.message)
    }
}

/// The outcome of one call.
pub type ChannelOutcome = Result<ChannelReply, ChannelFault>;

/// Who carries out a remote task's channel calls: the engine. A runner
/// holds it weakly (the engine owns the runner).
pub trait ChannelCalls: Send + Sync {
    /// Carries out `call` for task `task_id`, the task whose stream the call
    /// came on; a call naming another task is refused before this.
    fn call(
        self: Arc<Self>,
        task_id: String,
        call: ChannelCall,
    ) -> Pin<Box<dyn Future<Output = ChannelOutcome> + Send>>;
}

/// One line from the pod: a call and its number on the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub call: ChannelCall,
}

/// One line to the pod: the outcome of call `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    pub outcome: ChannelOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines are stable JSON both sides parse: a daemon and a pod of
    /// the same version, and a fault keeps its gRPC code.
    #[test]
    fn calls_and_outcomes_round_trip_as_lines() {
        let r = Request {
            id: 3,
            call: ChannelCall::Ask {
                task_id: "t_1".into(),
                question: "which?".into(),
                options: vec!["a".into()],
                timeout_ms: 0,
                question_id: "q_1".into(),
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""call":"ask""#), "{line}");
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        let f = Response { id: 3, outcome: Err(ChannelFault::other_task("t_2", "t_1")) };
        let back: Response = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        let status = tonic::Status::from(back.outcome.unwrap_err());
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(status.message().contains("t_2") && status.message().contains("t_1"));
    }
}

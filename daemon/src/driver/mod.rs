//! The Driver seam: how the engine talks to an agent.
//!
//! A driver turns what the agent prints into [`Parsed`] output (events, the
//! session id, blockers, the final answer, permission requests), and turns
//! the orchestrator's answers into what the agent reads on its stdin. Where
//! the process runs and how bytes reach it is the [`crate::runner`]'s
//! business; what the bytes mean is the driver's.
//!
//! Every provider today is a [`stream::StreamDriver`]: a one-shot stream read
//! by the provider's pure line parser, with stdin either closed or held open
//! for the CLI's control protocol (claude's permission prompts). Two-way
//! session protocols (ACP, codex app-server) are drivers of their own kind
//! behind the same trait: they write requests as well as answers, which is
//! why [`Driver::read_line`] returns lines for the agent as well as events.

pub mod acp;
pub mod codex_app;
pub mod stream;

use crate::launch::LaunchPlan;
use crate::provider::{Parsed, PermissionAsk};

pub use crate::launch::{DriverKind, SessionProtocol};

/// What the driver makes of one line of the agent's output.
#[derive(Debug, Default)]
pub struct Reading {
    pub parsed: Parsed,
    /// Lines to write on the agent's stdin in reply (a session protocol's
    /// requests and acknowledgements); empty for one-shot streams.
    pub replies: Vec<String>,
}

/// The orchestrator's decision on a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'a> {
    pub allow: bool,
    /// The answer as given: the reason the agent reads when denied.
    pub message: &'a str,
    /// Allowed for the rest of the session, where the agent offers that.
    pub for_session: bool,
}

/// How the engine talks to one running agent. A driver never fails: output
/// it cannot read becomes `unrecognized` events.
pub trait Driver: Send {
    /// One complete line of the agent's output.
    fn read_line(&mut self, line: &str) -> Reading;

    /// The end of the output: whatever the driver held back.
    fn finish(&mut self) -> Parsed;

    /// Whether the agent's requests reach the orchestrator: the run holds
    /// the agent's stdin open, so an answer can be written back.
    fn answers_requests(&self) -> bool;

    /// The line that answers a permission request on the agent's stdin;
    /// `None` when this driver cannot answer it.
    fn respond(&self, ask: &PermissionAsk, decision: &Decision<'_>) -> Option<String>;

    /// The line that cancels the agent's running turn through its protocol, sent before any
    /// signal; `None` where only signals stop it.
    fn cancel_line(&self, _session_id: Option<&str>) -> Option<String> {
        None
    }

    /// Whether the raw output is the agent's own words (a generic agent),
    /// which report recovery may then read; a provider's raw output is its
    /// JSON stream.
    fn raw_is_words(&self) -> bool;
}

/// The driver of a launch plan.
pub fn for_launch(launch: &LaunchPlan) -> Box<dyn Driver> {
    if launch.driver_kind() == DriverKind::CodexAppServer {
        return Box::new(codex_app::CodexAppDriver::new());
    }
    if launch.driver_kind() == DriverKind::Acp {
        return Box::new(acp::AcpDriver::new(launch.provider));
    }
    Box::new(stream::StreamDriver::new(launch.provider, launch.driver_kind()))
}

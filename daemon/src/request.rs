//! What a caller asks of a delegation, before anything is resolved.
//!
//! Its own module so that both the engine and [`crate::resolve`] use it
//! without depending on each other.

/// What a caller asks of [`crate::engine::Engine::delegate`].
#[derive(Debug, Clone, Default)]
pub struct DelegateInput {
    pub objective: String,
    pub agent: Option<String>,
    pub role: Option<String>,
    pub mode: Option<String>,
    pub isolation: Option<String>,
    pub network: Option<String>,
    pub context: String,
    pub constraints: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub model: Option<String>,
    pub timeout_ms: Option<u64>,
    pub channel: bool,
    pub workspace: String,
    pub session_id: Option<String>,
    pub effort: Option<String>,
    pub depth: u32,
    /// Verification commands for this delegation; empty for the role's.
    pub verify: Vec<String>,
}

//! Which protocol a codex task runs on: `codex app-server` where the installed codex has it (a
//! version caesar verified its protocol on, probed once per build of the binary), else
//! `codex exec --json`. The task's `started` event shows the command, so it says which ran; an
//! app-server that cannot be opened falls back to `codex exec --json` in the same supervisor,
//! which a `progress` event says.

use std::path::Path;

use crate::provider::{self, Invocation, Launch};

use super::Engine;
use crate::launch::ProviderId;

/// Set to `exec` to keep every codex task on `codex exec --json` (or `app-server` to use it
/// whatever the version says).
pub const CODEX_PROTOCOL_ENV: &str = "CAESAR_CODEX_PROTOCOL";

impl Engine {
    /// The app-server launch of a codex task, where that is the protocol to use (a resumed
    /// task continues its thread through `thread/resume`); `None` for every other provider and
    /// for a codex without the subcommand. `codex exec --json` (with `exec resume` for a resumed
    /// task) goes in as the fallback the supervisor runs when the app-server cannot be opened.
    pub(super) fn codex_app_launch(&self, provider_id: ProviderId, program: &Path, inv: &Invocation) -> Option<Launch> {
        if provider_id != ProviderId::Codex {
            return None;
        }
        let use_app = match std::env::var(CODEX_PROTOCOL_ENV).ok().as_deref() {
            Some("exec") => false,
            Some("app-server") => true,
            _ => self
                .projects
                .versions
                .version(program, &["--version"])
                .is_some_and(|v| provider::codex_app::has_app_server(&v)),
        };
        use_app.then(|| {
            provider::acp::with_fallback(
                provider::codex_app::launch(inv),
                provider::build_launch(ProviderId::Codex, inv),
            )
        })
    }
}

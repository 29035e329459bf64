//! Which protocol a codex task runs on: `codex app-server` where the installed codex has it (a
//! version caesar verified its protocol on, probed once per build of the binary), else
//! `codex exec --json`. The task's `started` event shows the command, so it says which ran; an
//! app-server that cannot be opened falls back to `codex exec --json` in the same supervisor,
//! which a `progress` event says.

use std::path::Path;

/// Set to `exec` to keep every codex task on `codex exec --json` (or `app-server` to use it
/// whatever the version says).
pub const CODEX_PROTOCOL_ENV: &str = "CAESAR_CODEX_PROTOCOL";

impl super::projects::Projects {
    /// Whether codex at `program` runs as `codex app-server` (a version caesar verified its
    /// protocol on, probed once per binary), unless [`CODEX_PROTOCOL_ENV`] says otherwise.
    pub(crate) fn codex_speaks_app_server(&self, program: &Path) -> bool {
        match std::env::var(CODEX_PROTOCOL_ENV).ok().as_deref() {
            Some("exec") => false,
            Some("app-server") => true,
            _ => self
                .versions
                .version(program, &["--version"])
                .is_some_and(|v| crate::provider::codex_app::has_app_server(&v)),
        }
    }
}

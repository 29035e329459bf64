//! Bad input found by the CLI itself (not by the daemon): exit code 2, as
//! the README's table says, with the message that names the fix.

/// An argument the CLI refused before asking the daemon.
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Whether `e` is (or wraps) bad input.
pub(crate) fn is_bad_input(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<BadInput>())
}

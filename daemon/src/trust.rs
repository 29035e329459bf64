//! The trust gate for repository configs (issue 19), as direnv and editors
//! have one: a project's `.caesar/config.toml` and `config.local.toml` come
//! from whoever could commit to the repository, so what in them can run code
//! or widen policy (`[worktree] setup`, `[[agent]]`, `[bin]`, `[runner]`,
//! role `verify` and `system_prompt_file`, relaxations of `[policy]`) takes
//! effect only once the user trusted that exact content: `caesar trust`
//! records the file's path and the SHA-256 of its bytes here, in the user's
//! state directory (`trust.json`, 0600), which only the daemon writes. A
//! changed file is untrusted again. A trusted *folder* (the project root
//! itself, recorded by the same command) is what lets gemini skip its own
//! folder-trust check.
//!
//! `CAESAR_TRUST_PREFIX` (the daemon's environment, colon-separated
//! absolute directories) trusts every project beneath them, as direnv's
//! `whitelist.prefix` does: the user's choice for trees they own wholly.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The daemon's environment variable of trusted prefixes.
pub const PREFIX_ENV: &str = "CAESAR_TRUST_PREFIX";

/// One trusted file (with its digest) or folder (no digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Absolute path of the file or folder.
    pub path: String,
    /// Hex SHA-256 of the file's bytes; empty for a folder.
    #[serde(default)]
    pub sha256: String,
    /// When it was trusted (ms since the epoch).
    pub trusted_ms: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    #[serde(default)]
    entries: Vec<Entry>,
}

/// The trust records of one state directory.
#[derive(Debug, Clone)]
pub struct TrustStore {
    file: PathBuf,
}

static WRITE: Mutex<()> = Mutex::new(());

/// Hex SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// What [`crate::config::Config::load_gated`] asks of the gate.
pub trait Gate {
    /// Whether this layer file, with exactly this text, is trusted.
    fn trusts(&self, file: &Path, text: &str) -> bool;
}

impl TrustStore {
    /// The records kept in `state_dir/trust.json`.
    pub fn new(state_dir: &Path) -> TrustStore {
        TrustStore { file: state_dir.join("trust.json") }
    }

    fn book(&self) -> Book {
        crate::safe_fs::read_to_string_capped(&self.file, crate::safe_fs::CONFIG_CAP)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    fn save(&self, book: &Book) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(book).map_err(|e| Error::Internal(e.to_string()))?;
        crate::safe_fs::write_atomic(&self.file, &bytes).map_err(|e| Error::io_at("cannot write", &self.file, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.file, std::fs::Permissions::from_mode(0o600));
        }
        Ok(())
    }

    /// Every record, oldest first.
    pub fn list(&self) -> Vec<Entry> {
        self.book().entries
    }

    /// Records `path` (a file, with the digest of `bytes`, or a folder when
    /// `bytes` is `None`), replacing an earlier record of the same path.
    pub fn record(&self, path: &Path, bytes: Option<&[u8]>) -> Result<Entry> {
        let _g = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        let mut book = self.book();
        let entry = Entry {
            path: path.display().to_string(),
            sha256: bytes.map(digest).unwrap_or_default(),
            trusted_ms: crate::clock::now_ms(),
        };
        book.entries.retain(|e| e.path != entry.path);
        book.entries.push(entry.clone());
        self.save(&book)?;
        Ok(entry)
    }

    /// Removes the records of `path` and of everything beneath it; returns
    /// what was removed.
    pub fn revoke(&self, path: &Path) -> Result<Vec<Entry>> {
        let _g = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        let mut book = self.book();
        let (gone, kept): (Vec<Entry>, Vec<Entry>) =
            book.entries.into_iter().partition(|e| Path::new(&e.path).starts_with(path));
        book.entries = kept;
        if !gone.is_empty() {
            self.save(&book)?;
        }
        Ok(gone)
    }

    /// Whether `folder` (a project root) is trusted: recorded as a folder,
    /// or beneath a trusted prefix.
    pub fn trusts_folder(&self, folder: &Path) -> bool {
        under_prefix(folder) || self.book().entries.iter().any(|e| e.sha256.is_empty() && Path::new(&e.path) == folder)
    }
}

impl Gate for TrustStore {
    fn trusts(&self, file: &Path, text: &str) -> bool {
        if under_prefix(file) {
            return true;
        }
        let sum = digest(text.as_bytes());
        self.book().entries.iter().any(|e| Path::new(&e.path) == file && e.sha256 == sum)
    }
}

/// Whether `path` lies beneath one of [`PREFIX_ENV`]'s directories,
/// compared as canonical paths (issue 29): `<prefix>/../../evil` and a link
/// beneath a prefix to elsewhere are not beneath it. A path or prefix that
/// does not resolve trusts nothing.
fn under_prefix(path: &Path) -> bool {
    let Some(v) = std::env::var_os(PREFIX_ENV) else { return false };
    under_any(path, std::env::split_paths(&v))
}

fn under_any(path: &Path, prefixes: impl Iterator<Item = PathBuf>) -> bool {
    let Ok(path) = std::fs::canonicalize(path) else { return false };
    prefixes
        .filter(|p| p.is_absolute() && p.components().count() > 1)
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .any(|p| p.components().count() > 1 && path.starts_with(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_prefix_trusts_only_what_resolves_beneath_it() {
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("trusted");
        let evil = d.path().join("evil");
        std::fs::create_dir_all(prefix.join("p/.caesar")).unwrap();
        std::fs::create_dir_all(evil.join(".caesar")).unwrap();
        std::fs::write(evil.join(".caesar/config.toml"), "").unwrap();
        std::fs::write(prefix.join("p/.caesar/config.toml"), "").unwrap();
        let prefixes = || vec![prefix.clone()].into_iter();
        assert!(under_any(&prefix.join("p/.caesar/config.toml"), prefixes()));
        assert!(!under_any(&prefix.join("../evil/.caesar/config.toml"), prefixes()), "`..` leaves the prefix");
        std::os::unix::fs::symlink(&evil, prefix.join("link")).unwrap();
        assert!(!under_any(&prefix.join("link/.caesar/config.toml"), prefixes()), "a link leaves it too");
        assert!(!under_any(&prefix.join("missing"), prefixes()));
        // A prefix given with `..` is resolved as well.
        assert!(under_any(&evil.join(".caesar/config.toml"), vec![prefix.join("../evil")].into_iter()));
    }

    #[test]
    fn a_trusted_file_stays_trusted_only_while_its_content_does() {
        let d = tempfile::tempdir().unwrap();
        let s = TrustStore::new(d.path());
        let f = Path::new("/p/.caesar/config.toml");
        assert!(!s.trusts(f, "a = 1"));
        s.record(f, Some(b"a = 1")).unwrap();
        assert!(s.trusts(f, "a = 1"));
        assert!(!s.trusts(f, "a = 2"), "a changed file needs trust again");
        assert!(!s.trusts(Path::new("/q/.caesar/config.toml"), "a = 1"), "the path is part of it");
        s.record(Path::new("/p"), None).unwrap();
        assert!(s.trusts_folder(Path::new("/p")) && !s.trusts_folder(Path::new("/q")));
        assert_eq!(s.revoke(Path::new("/p")).unwrap().len(), 2);
        assert!(!s.trusts(f, "a = 1") && s.list().is_empty());
    }
}

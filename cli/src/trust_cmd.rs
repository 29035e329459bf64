//! `caesar trust` (issue 19): the user trusts a repository's `.caesar`
//! config as it is now. The daemon reads the files and records their
//! digests; this only names the path and prints what was recorded.

use super::*;

/// Trusts `path` (default: the current directory), revokes it, or lists
/// every record.
pub(crate) async fn run(
    mut c: Client,
    path: Option<String>,
    list: bool,
    revoke: bool,
    json: bool,
) -> Result<u8, Failure> {
    let action = if list {
        "list"
    } else if revoke {
        "revoke"
    } else {
        "trust"
    };
    let path = match (list, path) {
        (true, _) => String::new(),
        (false, None) => cwd_string(),
        (false, Some(p)) => std::path::absolute(&p).map(|p| p.display().to_string()).unwrap_or(p),
    };
    let r = c
        .trust(pb::TrustRequest { action: action.to_owned(), path: path.clone() })
        .await
        .map_err(anyhow::Error::from)?
        .into_inner();
    if json {
        let entries: Vec<_> =
            r.entries.iter().map(|e| json!({"path": e.path, "sha256": e.sha256, "trusted_at": e.trusted_at})).collect();
        println!("{}", json!({"action": action, "entries": entries}));
        return Ok(0);
    }
    let verb = match action {
        "trust" => "trusted",
        "revoke" => "revoked",
        _ => "",
    };
    if r.entries.is_empty() {
        println!("{}", if list { "nothing is trusted".to_owned() } else { format!("nothing was trusted at {path}") });
    }
    for e in &r.entries {
        let what = if e.sha256.is_empty() {
            "folder".to_owned()
        } else {
            format!("sha256 {}", &e.sha256[..16.min(e.sha256.len())])
        };
        println!("{verb}{}{}  ({what}, {})", if verb.is_empty() { "" } else { " " }, e.path, e.trusted_at);
    }
    Ok(0)
}

//! The MCP client's roots as paths: `file://` URIs decoded, a scope taken
//! from a query, two directories compared. Pure; the server asks these.

use std::path::{Path, PathBuf};

/// Two paths name the same directory (compared canonically when both exist).
pub(crate) fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The local path of a `file://` URI, percent-decoded.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if bytes[i] == b'%'
            && let Some(b) = hex
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    let s = String::from_utf8(out).ok()?;
    Some(PathBuf::from(s))
}

/// `profile` and `tools` from a query string (`?profile=readonly&tools=a,b`).
pub fn scope_of(query: &str) -> (String, Option<String>) {
    let mut profile = "full".to_owned();
    let mut list = None;
    for pair in query.split('&') {
        let Some((key, value)) = pair.split_once('=') else { continue };
        let value = percent_decode(value);
        match key {
            "profile" => profile = value,
            "tools" => list = Some(value),
            _ => {}
        }
    }
    (profile, list)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn scope_comes_from_the_query() {
        assert_eq!(scope_of("profile=readonly"), ("readonly".to_owned(), None));
        assert_eq!(
            scope_of("tools=caesar_status%2Ccaesar_logs&x=1"),
            ("full".to_owned(), Some("caesar_status,caesar_logs".to_owned()))
        );
        assert_eq!(scope_of(""), ("full".to_owned(), None));
    }
}

#[cfg(test)]
mod uri_tests {
    use super::*;

    #[test]
    fn file_uris() {
        assert_eq!(file_uri_path("file:///home/a%20b/x"), Some(PathBuf::from("/home/a b/x")));
        assert_eq!(file_uri_path("file://localhost/tmp"), Some(PathBuf::from("/tmp")));
        assert_eq!(file_uri_path("https://x/y"), None);
    }
}

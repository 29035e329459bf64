//! The frames on the agent container's stdout, and how the daemon lays them
//! back into the task's local `raw.log`.
//!
//! A container runtime splits long lines (CRI-O at 8 KiB, containerd at
//! 16 KiB) and the API server's log stream can drop at any moment, so the
//! pod never prints the agent's raw bytes. It prints one line per chunk of
//! at most [`CHUNK`] bytes: `C1 o=<offset> <base64>` (about 5.5 KiB, under
//! every runtime's split), then `C1 f <name> <base64>` for each file the
//! daemon needs back (the report), then `C1 x <base64 of the ending>`, and
//! `C1 h` while idle. The offset is the chunk's place in the pod's own
//! raw.log, so a resumed stream that repeats chunks, or starts past some,
//! is laid down with no duplicate and with every gap counted.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The most raw bytes in one frame.
pub const CHUNK: usize = 4096;

/// One decoded line of the pod's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Bytes of raw.log at `offset`.
    Chunk { offset: u64, data: Vec<u8> },
    /// A file of the task directory (its name, its content).
    File { name: String, data: Vec<u8> },
    /// The ending, a JSON [`super::pod::Ending`].
    Exit(Vec<u8>),
    /// Bytes of the pod supervisor's record of steer deliveries at `offset`
    /// (issue 31): laid into the local one, where the monitor reads them.
    Steered { offset: u64, data: Vec<u8> },
    /// Keeps an idle stream alive.
    Heartbeat,
    /// Not a frame (a runtime's own line, a damaged frame): ignored.
    Other,
}

/// A chunk's line, newline included.
pub fn chunk(offset: u64, data: &[u8]) -> String {
    format!("C1 o={offset} {}\n", b64_encode(data))
}

/// A file's line.
pub fn file(name: &str, data: &[u8]) -> String {
    format!("C1 f {name} {}\n", b64_encode(data))
}

/// A steer-deliveries chunk's line.
pub fn steered(offset: u64, data: &[u8]) -> String {
    format!("C1 s={offset} {}\n", b64_encode(data))
}

/// The ending's line.
pub fn exit(json: &[u8]) -> String {
    format!("C1 x {}\n", b64_encode(json))
}

/// The idle line.
pub const HEARTBEAT: &str = "C1 h\n";

/// Decodes one line (without its newline; a leading log timestamp already
/// removed).
pub fn decode(line: &str) -> Frame {
    let line = line.trim_end_matches(['\r', '\n']);
    let Some(rest) = line.strip_prefix("C1 ") else { return Frame::Other };
    if rest == "h" {
        return Frame::Heartbeat;
    }
    if let Some(rest) = rest.strip_prefix("o=") {
        let Some((off, data)) = rest.split_once(' ') else { return Frame::Other };
        return match (off.parse(), b64_decode(data)) {
            (Ok(offset), Some(data)) => Frame::Chunk { offset, data },
            _ => Frame::Other,
        };
    }
    if let Some(rest) = rest.strip_prefix("s=") {
        let Some((off, data)) = rest.split_once(' ') else { return Frame::Other };
        return match (off.parse(), b64_decode(data)) {
            (Ok(offset), Some(data)) => Frame::Steered { offset, data },
            _ => Frame::Other,
        };
    }
    if let Some(rest) = rest.strip_prefix("f ") {
        let Some((name, data)) = rest.split_once(' ') else { return Frame::Other };
        return match b64_decode(data) {
            Some(data) => Frame::File { name: name.to_owned(), data },
            None => Frame::Other,
        };
    }
    if let Some(data) = rest.strip_prefix("x ") {
        return b64_decode(data).map(Frame::Exit).unwrap_or(Frame::Other);
    }
    Frame::Other
}

/// Splits a `timestamps=true` log line into its RFC 3339 time and the rest.
pub fn split_timestamp(line: &str) -> (Option<&str>, &str) {
    match line.split_once(' ') {
        Some((ts, rest)) if ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.ends_with('Z') => (Some(ts), rest),
        _ => (None, line),
    }
}

/// `mirror.json`: how far the pod's raw.log has been laid into the local
/// one. Written after the bytes, so a crash between the two only makes the
/// next daemon write the same bytes again at the same place.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mirror {
    /// The next byte of the pod's raw.log wanted.
    pub pod_offset: u64,
    /// The local raw.log's length that goes with it.
    pub local_len: u64,
    /// Bytes the pod wrote that never reached the daemon (a stream resumed
    /// past them, e.g. after the node rotated its log).
    pub gap_bytes: u64,
    /// The time of the last frame laid down, for `sinceTime` on resume.
    pub last_ts: Option<String>,
}

/// What laying one chunk did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Laid {
    /// Already there (a resumed stream repeats from the second's start).
    Duplicate,
    /// Written; `gap` bytes before it were never seen.
    Written { gap: u64 },
}

impl Mirror {
    /// Reads `mirror.json`, or starts from nothing.
    pub fn load(path: &Path) -> Mirror {
        std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Writes `mirror.json` atomically.
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::safe_fs::write_atomic(path, &bytes)
    }

    /// Lays a chunk at `offset` of the pod's log into `raw` (opened for
    /// writing), keeping only what is new.
    pub fn lay(&mut self, raw: &mut std::fs::File, offset: u64, data: &[u8]) -> std::io::Result<Laid> {
        let end = offset + data.len() as u64;
        if end <= self.pod_offset {
            return Ok(Laid::Duplicate);
        }
        let (skip, gap) = if offset >= self.pod_offset {
            (0, offset - self.pod_offset)
        } else {
            ((self.pod_offset - offset) as usize, 0)
        };
        raw.seek(SeekFrom::Start(self.local_len))?;
        raw.write_all(&data[skip..])?;
        self.local_len += (data.len() - skip) as u64;
        self.pod_offset = end;
        self.gap_bytes += gap;
        Ok(Laid::Written { gap })
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64; `None` for anything else.
pub fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let t = text.as_bytes();
    if !t.len().is_multiple_of(4) {
        return None;
    }
    let val = |b: u8| B64.iter().position(|&x| x == b).map(|p| p as u32);
    let mut out = Vec::with_capacity(t.len() / 4 * 3);
    for (i, q) in t.chunks(4).enumerate() {
        let last = i == t.len() / 4 - 1;
        let pad = q.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &b in &q[..4 - pad] {
            n = n << 6 | val(b)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_stay_under_the_runtime_split() {
        let data: Vec<u8> = (0..CHUNK).map(|i| (i * 7 % 256) as u8).collect();
        let line = chunk(12_288, &data);
        assert!(line.len() < 8 * 1024, "a frame fits CRI-O's 8 KiB record: {}", line.len());
        assert_eq!(decode(&line), Frame::Chunk { offset: 12_288, data });
        assert_eq!(decode(&exit(b"{\"a\":1}")), Frame::Exit(b"{\"a\":1}".to_vec()));
        assert_eq!(
            decode(&file("report.json", b"{}")),
            Frame::File { name: "report.json".into(), data: b"{}".to_vec() }
        );
        assert_eq!(decode(HEARTBEAT), Frame::Heartbeat);
        assert_eq!(decode(&steered(7, b"{}\n")), Frame::Steered { offset: 7, data: b"{}\n".to_vec() });
        assert_eq!(decode("C1 o=x AAAA"), Frame::Other);
        assert_eq!(decode("C1 o=1 A"), Frame::Other);
        assert_eq!(decode("some runtime line"), Frame::Other);
        for n in 0..10 {
            let d: Vec<u8> = (0..n).map(|i| i as u8 ^ 0xa5).collect();
            assert_eq!(b64_decode(&b64_encode(&d)), Some(d));
        }
    }

    #[test]
    fn timestamps_are_split_off() {
        let (ts, rest) = split_timestamp("2026-12-01T12:00:00.123456789Z C1 h");
        assert_eq!((ts, rest), (Some("2026-12-01T12:00:00.123456789Z"), "C1 h"));
        assert_eq!(split_timestamp("C1 h"), (None, "C1 h"));
    }

    #[test]
    fn resumed_chunks_are_laid_once_and_gaps_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("raw.log");
        let mut raw = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).expect("open");
        let mut m = Mirror::default();
        assert_eq!(m.lay(&mut raw, 0, b"hello ").expect("lay"), Laid::Written { gap: 0 });
        assert_eq!(m.lay(&mut raw, 0, b"hello ").expect("lay"), Laid::Duplicate);
        // Overlapping: only the new tail is kept.
        assert_eq!(m.lay(&mut raw, 3, b"lo world").expect("lay"), Laid::Written { gap: 0 });
        // Past what was seen: written, the gap counted.
        assert_eq!(m.lay(&mut raw, 20, b"!").expect("lay"), Laid::Written { gap: 9 });
        assert_eq!(std::fs::read(&path).expect("read"), b"hello world!");
        assert_eq!((m.pod_offset, m.local_len, m.gap_bytes), (21, 12, 9));
        let mp = dir.path().join("mirror.json");
        m.store(&mp).expect("store");
        assert_eq!(Mirror::load(&mp), m);
    }
}

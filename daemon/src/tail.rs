//! Reading an agent's `raw.log` as it grows, line by line, from a byte
//! offset that the store remembers, so that a restarted daemon resumes
//! exactly where the last one stopped.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Lines longer than this are cut into pieces rather than buffered whole,
/// so a agent that never prints a newline cannot grow the daemon's memory.
pub const MAX_LINE: usize = 1 << 20;
/// The most bytes read in one step; a flood is read in bounded chunks.
const CHUNK: usize = 1 << 20;

/// A reader of complete lines from a growing file.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    /// The offset just past the last complete line handed out.
    offset: u64,
    partial: Vec<u8>,
}

impl LogTail {
    /// Starts reading `path` at `offset`.
    pub fn new(path: &Path, offset: u64) -> LogTail {
        LogTail { path: path.to_path_buf(), offset, partial: Vec::new() }
    }

    /// The offset just past the last line returned.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads what has been appended and returns the complete lines (without
    /// their newline, invalid UTF-8 replaced). With `at_end`, a last line
    /// with no newline is returned too, once the file has been read to its
    /// end (the writer is gone; a line cut by the chunk is not its last).
    pub fn read_lines(&mut self, at_end: bool) -> std::io::Result<Vec<String>> {
        let mut lines = Vec::new();
        let mut file = // The task directory is the agent's: a FIFO or a link put in
        // raw.log's place must neither block the monitor nor be followed.
        match crate::safe_fs::open_regular(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(lines),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let read_from = self.offset + self.partial.len() as u64;
        let mut read_to = read_from;
        if len > read_from {
            file.seek(SeekFrom::Start(read_from))?;
            let mut buf = vec![0u8; (len - read_from).min(CHUNK as u64) as usize];
            let n = file.read(&mut buf)?;
            buf.truncate(n);
            read_to += n as u64;
            self.split(&buf, &mut lines);
        }
        if at_end && read_to >= len && !self.partial.is_empty() {
            self.offset += self.partial.len() as u64;
            lines.push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned());
        }
        Ok(lines)
    }

    /// Whether bytes remain beyond what has been read (a flood larger than
    /// one chunk).
    pub fn has_more(&self) -> bool {
        std::fs::metadata(&self.path).map(|m| m.len() > self.offset + self.partial.len() as u64).unwrap_or(false)
    }

    fn split(&mut self, buf: &[u8], lines: &mut Vec<String>) {
        let mut rest = buf;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..nl]);
            let consumed = self.partial.len() as u64 + 1;
            let mut line = std::mem::take(&mut self.partial);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            lines.push(String::from_utf8_lossy(&line).into_owned());
            self.offset += consumed;
            rest = &rest[nl + 1..];
        }
        self.partial.extend_from_slice(rest);
        while self.partial.len() >= MAX_LINE {
            let piece: Vec<u8> = self.partial.drain(..MAX_LINE).collect();
            self.offset += piece.len() as u64;
            lines.push(String::from_utf8_lossy(&piece).into_owned());
        }
    }
}

/// The last `max` bytes of a file, starting on a line boundary when one is
/// near, and the file's whole size.
pub fn read_tail(path: &Path, max: u64) -> std::io::Result<(String, u64)> {
    let mut file = match crate::safe_fs::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((String::new(), 0)),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    file.take(max).read_to_end(&mut buf)?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0
        && let Some(nl) = text.find('\n').filter(|&i| i < 4096)
    {
        text.drain(..=nl);
    }
    Ok((text, len))
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Write;

    use super::*;

    #[test]
    fn lines_come_out_whole_and_resume_from_the_offset() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("raw.log");
        let mut f = File::create(&p).unwrap();
        f.write_all(b"one\ntw").unwrap();
        let mut t = LogTail::new(&p, 0);
        assert_eq!(t.read_lines(false).unwrap(), ["one"]);
        assert_eq!(t.offset(), 4);
        f.write_all(b"o\r\nthree\xff\n").unwrap();
        assert_eq!(t.read_lines(false).unwrap(), ["two", "three\u{fffd}"]);
        f.write_all(b"tail").unwrap();
        assert!(t.read_lines(false).unwrap().is_empty());
        // A new reader from the stored offset sees only what follows.
        let mut again = LogTail::new(&p, t.offset());
        assert_eq!(again.read_lines(true).unwrap(), ["tail"]);
        assert_eq!(again.offset(), std::fs::metadata(&p).unwrap().len());
    }

    #[test]
    fn at_the_end_a_line_cut_by_the_chunk_is_not_taken_for_the_last() {
        // More than one chunk of short lines, read after the writer is gone (a task that ended
        // while no daemon ran): every line comes out whole, none torn at the chunk's edge.
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("raw.log");
        let text: String = (0..200_000).map(|k| format!("line {k}\n")).collect();
        assert!(text.len() > CHUNK);
        std::fs::write(&p, &text).unwrap();
        let mut t = LogTail::new(&p, 0);
        let mut lines = Vec::new();
        loop {
            let more = t.read_lines(true).unwrap();
            if more.is_empty() {
                break;
            }
            lines.extend(more);
        }
        assert_eq!(lines.len(), 200_000);
        assert!(lines.iter().enumerate().all(|(k, l)| *l == format!("line {k}")));
        assert_eq!(t.offset(), text.len() as u64);
    }

    #[test]
    fn a_line_with_no_end_is_cut_at_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("raw.log");
        std::fs::write(&p, vec![b'x'; MAX_LINE + 10]).unwrap();
        let mut t = LogTail::new(&p, 0);
        let lines = t.read_lines(false).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), MAX_LINE);
        assert_eq!(t.read_lines(true).unwrap(), ["x".repeat(10)]);
    }

    #[test]
    fn tail_reads_the_end() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("raw.log");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(read_tail(&p, 3).unwrap(), ("c\n".to_owned(), 6));
        assert_eq!(read_tail(&p, 100).unwrap().0, "a\nb\nc\n");
        assert_eq!(read_tail(&d.path().join("none"), 10).unwrap(), (String::new(), 0));
    }
}

#[cfg(all(test, unix))]
mod hostile_tests {
    use super::*;

    #[test]
    fn a_raw_log_made_a_fifo_or_a_link_neither_blocks_nor_is_followed() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "private key\n").unwrap();
        let raw = d.path().join("raw.log");
        nix::unistd::mkfifo(&raw, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        assert!(LogTail::new(&raw, 0).read_lines(true).is_err());
        assert!(read_tail(&raw, 100).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "blocked on the FIFO");
        std::fs::remove_file(&raw).unwrap();
        std::os::unix::fs::symlink(&secret, &raw).unwrap();
        assert!(LogTail::new(&raw, 0).read_lines(true).is_err());
        assert!(read_tail(&raw, 100).is_err());
    }
}

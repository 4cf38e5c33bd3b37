//! keeppeek's log: what it writes to its standard output and error, copied line by line to
//! the console and to [`LOG_PATH`] in RAM, which the support bundle reads.
//!
//! Bounded whatever keeppeek writes: a line is cut at [`INIT_LOG_LINE_MAX_BYTES`], and the
//! file starts over past [`INIT_LOG_FILE_MAX_BYTES`], keeping one previous file (`.1`), so
//! the log never holds more than twice the ceiling. A log that cannot be written loses lines,
//! never stops keeppeek.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::limits::{INIT_LOG_FILE_MAX_BYTES, INIT_LOG_LINE_MAX_BYTES};

pub(super) const LOG_PATH: &str = "/run/log/keeppeek.log";

/// A log file that starts over (keeping one previous file) past its ceiling.
pub struct RotatingLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    written: u64,
}

impl RotatingLog {
    /// Opens `path` to append to (its folder made if need be), counting what it holds already.
    pub fn new(path: &Path) -> RotatingLog {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok();
        let written = file.as_ref().and_then(|f| f.metadata().ok()).map(|m| m.len()).unwrap_or(0);
        RotatingLog { path: path.to_owned(), file, written }
    }

    /// Appends `line`, starting the file over first when it would pass the ceiling.
    pub fn write_line(&mut self, line: &[u8]) {
        if self.written + line.len() as u64 > INIT_LOG_FILE_MAX_BYTES {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            let _ = std::fs::rename(&self.path, old);
            self.file = std::fs::File::create(&self.path).ok();
            self.written = 0;
        }
        if let Some(f) = self.file.as_mut()
            && f.write_all(line).is_ok()
        {
            self.written += line.len() as u64;
        }
    }
}

/// Copies a child's output, line by line (each cut at [`INIT_LOG_LINE_MAX_BYTES`]), to the
/// console and the log file, in a thread that ends with the output.
pub(super) fn pump_log(out: impl Read + Send + 'static, log: Arc<Mutex<RotatingLog>>) {
    std::thread::spawn(move || {
        for_each_line(out, |line| {
            let _ = std::io::stderr().write_all(line);
            if let Ok(mut l) = log.lock() {
                l.write_line(line);
            }
        })
    });
}

/// Calls `f` with each line of `out` (newline included), a line longer than
/// [`INIT_LOG_LINE_MAX_BYTES`] being cut into pieces of that size.
fn for_each_line(out: impl Read, mut f: impl FnMut(&[u8])) {
    let mut r = std::io::BufReader::new(out);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match r.by_ref().take(INIT_LOG_LINE_MAX_BYTES as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        f(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_past_its_ceiling_is_cut() {
        let text = format!("short\n{}\nend", "x".repeat(INIT_LOG_LINE_MAX_BYTES + 10));
        let mut lines = Vec::new();
        for_each_line(text.as_bytes(), |l| lines.push(l.len()));
        assert_eq!(lines, [6, INIT_LOG_LINE_MAX_BYTES + 1, 11, 4]);
    }

    #[test]
    fn the_log_starts_over_past_its_ceiling_keeping_one_previous_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log/keeppeek.log");
        let mut log = RotatingLog::new(&path);
        let line = vec![b'x'; 1000];
        let lines = INIT_LOG_FILE_MAX_BYTES as usize / 1000 + 5;
        for _ in 0..lines {
            log.write_line(&line);
        }
        let now = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(dir.path().join("log/keeppeek.log.1")).unwrap().len();
        assert!(old <= INIT_LOG_FILE_MAX_BYTES && now <= INIT_LOG_FILE_MAX_BYTES);
        assert_eq!(now + old, lines as u64 * 1000);
    }
}

//! Crash recovery runs `SegmentReader` over whatever a power cut left on disk, so it must
//! return an error, never panic, whatever the bytes.

#![no_main]

use keeppeek::media::fmp4_read::SegmentReader;
use libfuzzer_sys::fuzz_target;

/// More fragments than a fuzz input can hold; only there so a reader bug that stops
/// advancing shows up as a slow input instead of a hang.
const MAX_FRAGMENTS: usize = 10_000;

fuzz_target!(|data: &[u8]| {
    let Ok((mut reader, _init)) = SegmentReader::open(std::io::Cursor::new(data), data.len() as u64) else {
        return;
    };
    for _ in 0..MAX_FRAGMENTS {
        match reader.next_fragment() {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
});

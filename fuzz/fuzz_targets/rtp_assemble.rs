//! RTP packets from a camera into a stream's depacketizer with its frame ceiling: no input
//! panics, and the frame being put together never holds more than its ceiling.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    keeppeek::ingest::rtsp::fuzzing::assemble(data);
});

//! A camera's audio stream into KeepPeek's reader of it: RTP packets of AAC, G.711 and Opus
//! (with payload types switching mid-stream), video frames and both streams' sender reports
//! placing it on the video's timeline. No input panics; the frame being put together never
//! holds more than its ceiling; a static payload type is read as its own codec.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    keeppeek::ingest::rtsp::fuzzing::audio(data);
});

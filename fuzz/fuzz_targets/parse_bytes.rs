//! Byte counts written by people ("8 GiB") are parsed or refused, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The config hands it strings only; non-UTF-8 input says nothing about the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = keeppeek::config::parse_bytes(text);
});

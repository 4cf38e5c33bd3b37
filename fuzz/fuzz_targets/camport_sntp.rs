//! Any datagram on the camera port's NTP port reaches `camport::sntp::parse`: read or
//! refused, never a panic; a request read is answered with its time echoed
//! (`keeppeek::camport::sntp::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keeppeek::camport::sntp::fuzz(data));

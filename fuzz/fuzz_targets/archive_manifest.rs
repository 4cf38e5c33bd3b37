//! Whatever a bucket holds under a manifest's key (another box's, a damaged one, anyone's)
//! reaches `archive::manifest::decode`: read and checked or refused, never a panic
//! (`keeppeek::archive::manifest::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keeppeek::archive::manifest::fuzz(data));

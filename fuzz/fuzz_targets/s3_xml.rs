//! What an S3-compatible server answers the archive: errors, a multipart upload's id, a
//! completed upload, list pages; each read or refused within its ceilings, never a panic
//! (`keeppeek::archive::xml::fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keeppeek::archive::xml::fuzz(data));

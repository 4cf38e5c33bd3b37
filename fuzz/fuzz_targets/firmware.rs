//! What the firmware reads that someone else wrote: an update bundle's head (a strict ustar
//! reader, before any signature is checked), GRUB's environment block, a config to be
//! redacted for the support bundle, and a disk's partition table (the data partition's
//! growth). Each must answer or refuse, never panic.

#![no_main]

use keeppeek::limits;
use keeppeek::system::bundle::read_head;
use keeppeek::system::grubenv;
use keeppeek::system::support::redact_config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(head) = read_head(&mut &data[..]) {
        assert!(head.manifest.len() <= limits::BUNDLE_MANIFEST_MAX_BYTES);
        assert!(head.signature.len() <= limits::BUNDLE_SIGNATURE_MAX_BYTES);
    }
    if let Ok(env) = grubenv::parse(data) {
        // What is written back reads back the same, at the block's own size.
        let size = data.len().max(1024);
        if let Ok(block) = grubenv::render(&env, data, size) {
            assert_eq!(block.len(), size);
            assert_eq!(grubenv::parse(&block).unwrap(), env);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        // Whatever it is, redacting it answers (a config that does not parse is left out).
        let _ = redact_config(text);
    }
    // A GPT with right CRCs and fields as the input says: planned, written, planned again.
    keeppeek::system::grow::fuzzing::check(data);
});

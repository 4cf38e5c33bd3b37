//! A camera's PullMessages answer reaches `onvif::events` as whatever text it sends: its
//! notifications must be read or refused with an error, never panic, and never more than
//! the ceiling of messages.

#![no_main]

use keeppeek::limits;
use keeppeek::onvif::events::{parse_utc, read_pull_answer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(events) = read_pull_answer(text) {
        assert!(events.len() <= limits::ONVIF_EVENTS_PER_PULL_MAX);
    }
    let _ = parse_utc(text);
});

//! A camera's PullMessages and CreatePullPointSubscription answers reach `onvif::events` as
//! whatever text it sends: notifications must be read or refused with an error, never panic,
//! and never more than the ceiling of messages; a subscription's reference parameters, sent
//! back as headers, must make a well-formed envelope whatever they hold.

#![no_main]

use keeppeek::limits;
use keeppeek::onvif::events::{addressing, parse_utc, read_pull_answer, read_subscription_answer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(events) = read_pull_answer(text) {
        assert!(events.len() <= limits::ONVIF_EVENTS_PER_PULL_MAX);
    }
    let _ = parse_utc(text);
    if let Ok(reference) = read_subscription_answer(text) {
        let headers = addressing("urn:action", &reference.address, &reference.parameters);
        let envelope = keeppeek::onvif::soap::envelope(Some(&headers), "<x/>");
        assert!(keeppeek::onvif::xml::parse(&envelope).is_ok(), "{envelope}");
    }
});

//! A live-view session (a `str0m` session accepted from a browser's offer, with KeepPeek's
//! track state around it) takes whatever arrives: datagrams from anyone claiming to be the
//! browser, frames of any shape, time passing. It must never panic.
//!
//! Input: a run of operations, each one byte of kind then a 2-byte length and that many
//! bytes: 0 datagram, 1 keyframe, 2 frame, 3 a tick of (length % 2000) ms.

#![no_main]

use keeppeek::webrtc::fuzzing::Harness;
use libfuzzer_sys::fuzz_target;

/// A Chromium offer (one video track and a data channel), captured once.
const OFFER: &str = include_str!("../../tests/recorder/chromium-offer.sdp");

fuzz_target!(|data: &[u8]| {
    let Some(mut h) = Harness::new(OFFER) else { panic!("the canned offer is accepted") };
    let mut rest = data;
    while rest.len() >= 3 {
        let kind = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]]));
        let body_len = len.min(rest.len() - 3);
        let (body, tail) = rest[3..].split_at(body_len);
        rest = tail;
        match kind % 4 {
            0 => h.datagram(body),
            1 => h.frame(usize::from(kind / 4) % 2, true, body),
            2 => h.frame(usize::from(kind / 4) % 2, false, body),
            _ => h.tick((len % 2000) as u64),
        }
    }
});

//! The HTTP edge's hand-written parsers and its JSON request bodies take whatever a client
//! sends: each must answer or refuse, never panic, and a byte range must lie in the body.

#![no_main]

use keeppeek::http::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&len_byte, rest)) = data.split_first() else { return };
    if let Ok(text) = std::str::from_utf8(rest) {
        let len = u64::from(len_byte) * 1000;
        if let parse::ByteRange::Part(start, end) = parse::byte_range(text, len) {
            assert!(start < end && end <= len);
        }
        let _ = parse::range_query(text);
        let _ = parse::range_name(text);
        let _ = parse::cookie(text, "kp_session");
        let _ = parse::accepts_gzip(text);
        let _ = parse::etag_matches(text, "\"0123456789abcdef-gz\"");
    }
    let _ = serde_json::from_slice::<parse::Credentials>(rest);
    let _ = serde_json::from_slice::<parse::NewUser>(rest);
    let _ = serde_json::from_slice::<parse::NewToken>(rest);
});

//! Event intake takes whatever an analysis service sends: a body that is JSON or multipart,
//! an envelope and a JPEG. Splitting, the envelope's checks and the JPEG's marker walk must
//! answer or refuse, never panic; what passes must hold to its ceilings.

#![no_main]

use bytes::Bytes;
use keeppeek::events::envelope;
use keeppeek::events::jpeg;
use keeppeek::http::events::{BodyError, split_body};
use keeppeek::limits;
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_800_000_000_000_000;

fn check_envelope(bytes: &[u8]) {
    if let Ok(e) = envelope::parse(bytes, NOW) {
        assert!(e.labels.len() <= limits::EVENT_LABELS_MAX);
        assert!(e.boxes.len() <= limits::EVENT_BOXES_MAX);
        assert!(e.text.len() <= limits::EVENT_TEXT_MAX_BYTES);
        assert!(e.terms().len() <= limits::EVENT_TERMS_MAX);
        assert!(e.time() >= 0);
        // What is stored parses again to the same.
        let again = envelope::parse(&serde_json::to_vec(&e).unwrap(), 0).unwrap();
        assert_eq!(again, e);
    }
}

fn check_jpeg(bytes: &[u8]) {
    if let Ok(info) = jpeg::check(bytes) {
        assert!(info.width > 0 && info.height > 0);
        assert!(info.width <= limits::JPEG_SIDE_MAX_PX && info.height <= limits::JPEG_SIDE_MAX_PX);
        assert_eq!(&bytes[bytes.len() - 2..], &[0xFF, 0xD9]);
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks how the body is framed.
    let Some((&kind, body)) = data.split_first() else { return };
    let content_type = match kind % 3 {
        0 => "application/json",
        1 => "multipart/form-data; boundary=B",
        _ => "multipart/form-data; boundary=\"a b\"",
    };
    match futures::executor::block_on(split_body(content_type, Bytes::copy_from_slice(body))) {
        Ok((envelope, snapshot)) => {
            assert!(envelope.len() <= limits::EVENT_ENVELOPE_MAX_BYTES);
            check_envelope(&envelope);
            if let Some(s) = snapshot {
                assert!(s.len() <= limits::EVENT_JPEG_MAX_BYTES);
                check_jpeg(&s);
            }
        }
        Err(BodyError::Unsupported) => unreachable!("both framings are supported"),
        Err(_) => {}
    }
    check_envelope(body);
    check_jpeg(body);
});

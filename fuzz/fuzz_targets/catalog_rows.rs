//! Catalog rows come back from disk: a damaged one is an error, never a panic, and any row
//! that decodes must survive `encode` and `decode` unchanged.

#![no_main]

use keeppeek::catalog::{FragmentRow, RecordingRow};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(row) = RecordingRow::decode(data) {
        let again = RecordingRow::decode(&row.encode()).expect("re-encoded recording row decodes");
        assert_eq!(again, row);
    }
    if let Ok(row) = FragmentRow::decode(data) {
        let again = FragmentRow::decode(&row.encode()).expect("re-encoded fragment row decodes");
        assert_eq!(again, row);
    }
});

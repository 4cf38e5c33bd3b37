//! An admin's certificate upload and the box's own files on disk reach `tls::cert` as
//! whatever bytes they hold: PEM chains and keys, DER certificates, host names. Each must be
//! checked or refused with an error, never panic.
//!
//! Input: a byte that picks the name the upload is checked against and whether the clock is
//! sane, then the certificate file, a NUL, and the key file.

#![no_main]

use keeppeek::tls::cert::{self, Name};
use libfuzzer_sys::fuzz_target;

const NOW_S: i64 = 1_796_428_800;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let (cert_pem, key_pem) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    // The whole input as one DER certificate too (the files the box reads back).
    if let Ok(info) = cert::inspect(rest, 1) {
        let _ = (info.fingerprint(), info.pin());
        let wanted = cert::own_names("keeppeek", &[[192, 168, 1, 20].into()]);
        let _ = cert::remake_reason(&info, &wanted, NOW_S, pick & 1 == 0);
    }
    let asked = match pick >> 1 & 3 {
        0 => Name::reached_as("127.0.0.1"),
        1 => Name::reached_as("nvr.home.example"),
        2 => Name::reached_as("[::1]"),
        _ => Name::reached_as(&String::from_utf8_lossy(key_pem)),
    };
    match cert::check_upload(cert_pem, key_pem, &asked, NOW_S, pick & 1 == 0) {
        Ok(checked) => {
            assert!(!checked.chain.is_empty() && checked.chain.len() <= keeppeek::limits::TLS_CHAIN_CERTS_MAX);
            assert!(checked.info.covers(&asked));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});

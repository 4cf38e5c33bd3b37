//! What cameras send the ONVIF client: WS-Discovery answers and SOAP answers, read with
//! their ceilings, never a panic; a camera found always has a device service at the
//! address it answered from, and a stream address taken from an answer has no credentials.

#![no_main]

use std::net::IpAddr;

use keeppeek::onvif::{device, discovery, soap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from: IpAddr = [192, 0, 2, 7].into();
    let mut search = discovery::Search::default();
    search.take("urn:uuid:1", data, from);
    for f in &search.found {
        assert_eq!(f.address, from);
        let url = url::Url::parse(&f.device_url).expect("a device service is a URL");
        assert_eq!((url.host_str(), url.username(), url.password()), (Some("192.0.2.7"), "", None), "{url}");
    }
    if let Ok(text) = soap::answer("Fuzz", 200, false, data) {
        device::read_any(&text);
    }
    let _ = soap::answer("Fuzz", 500, true, data);
});

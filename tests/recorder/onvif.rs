//! Cameras found and read over ONVIF, against a device KeepPeek did not write: oxvif's mock
//! ONVIF device (the crate `oxvif` 0.17, built as `tools/onvif-device`) in a network
//! namespace of its own, answering WS-Discovery on its veth and checking WS-Security
//! digests, with the RTSP test camera at the stream address it gives
//! (`tools/onvif-camera.sh`). The box searches, finds it once, reads its model and stream
//! addresses with the right credentials and says why not with wrong ones or at addresses
//! that are not ONVIF, probes the stream it gave, adds it, and then marks it as added.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::config_apply::{call, file_box};

#[test]
fn a_camera_on_the_network_is_found_read_over_onvif_probed_and_added() {
    let cam = OnvifCamera::start(1);
    let (_dir, port, _d, admin) = file_box();
    let search = || {
        let started = Instant::now();
        let (code, v) = call(port, &admin, "POST", "/api/cameras/discover", &Value::Null);
        assert_eq!(code, 200, "{v}");
        (v, started.elapsed())
    };

    // A second search while one runs is refused; the first waits its DISCOVERY_WAIT_MS.
    let first = {
        let admin = admin.clone();
        std::thread::spawn(move || call(port, &admin, "POST", "/api/cameras/discover", &Value::Null))
    };
    std::thread::sleep(Duration::from_millis(300));
    let (code, busy) = call(port, &admin, "POST", "/api/cameras/discover", &Value::Null);
    assert_eq!((code, busy["code"].as_str()), (503, Some("search_busy")), "{busy}");
    assert_eq!(first.join().unwrap().0, 200);

    let (v, took) = search();
    assert!(took >= Duration::from_millis(3000) && took < Duration::from_millis(6000), "{took:?}");
    assert!(v["interfaces"].as_array().unwrap().contains(&json!("10.213.1.1")), "{v}");
    let found: Vec<&Value> =
        v["found"].as_array().unwrap().iter().filter(|f| f["address"] == cam.address.as_str()).collect();
    assert_eq!(found.len(), 1, "found once, though it answers each probe twice: {v}");
    // Where the device says its service is (oxvif's mock: /onvif/device), at its address.
    let device_url = found[0]["device_url"].as_str().unwrap().to_string();
    assert!(device_url.starts_with(&format!("http://{}:8000/", cam.address)), "{v}");
    assert_eq!(
        (found[0]["name"].as_str(), found[0]["hardware"].as_str()),
        (Some("Porch-1"), Some("MockCam-4K")),
        "{v}"
    );
    assert_eq!(found[0]["added_as"], Value::Null);

    // Its streams, with the right credentials: at the address it answered from.
    let read = |address: &str, password: &str| {
        let body = json!({ "address": address, "username": CAMERA_USER, "password": password });
        let (code, v) = call(port, &admin, "POST", "/api/cameras/onvif", &body);
        assert_eq!(code, 200, "{v}");
        v
    };
    let v = read(&device_url, CAMERA_PASSWORD);
    assert_eq!(v["ok"], true, "{v}");
    let streams = &v["streams"];
    let main = format!("rtsp://{}:554/mock/stream", cam.address);
    assert_eq!(streams["main"], main.as_str(), "{v}");
    assert!(streams["device"]["manufacturer"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(streams["clock_skew_s"].as_i64().is_some_and(|s| s.abs() <= 5), "{v}");
    assert!(!streams["profiles"].as_array().unwrap().is_empty(), "{v}");
    assert!(!v.to_string().contains(CAMERA_PASSWORD), "no password in the answer");

    // Why not, with the field it is about.
    let silent = silent_server();
    let closed = free_port();
    let cases = [
        (device_url.clone(), "not the password", "wrong_credentials", "password"),
        (format!("127.0.0.1:{closed}"), CAMERA_PASSWORD, "refused", "address"),
        (format!("127.0.0.1:{silent}"), CAMERA_PASSWORD, "timeout", "address"),
        (format!("http://127.0.0.1:{port}/"), CAMERA_PASSWORD, "not_onvif", "address"),
    ];
    for (address, password, code, field) in cases {
        let v = read(&address, password);
        assert_eq!(
            (v["ok"].as_bool(), v["code"].as_str(), v["field"].as_str()),
            (Some(false), Some(code), Some(field)),
            "{address}: {v}"
        );
        eprintln!("onvif {address}: {}", v["message"]);
    }
    let (code, v) = call(
        port,
        &admin,
        "POST",
        "/api/cameras/onvif",
        &json!({ "address": format!("http://u:p@{}/", cam.address), "username": "", "password": "" }),
    );
    assert_eq!((code, v["field"].as_str()), (400, Some("address")), "{v}");

    // The stream it gave plays, and is added.
    let (code, v) = call(
        port,
        &admin,
        "POST",
        "/api/cameras/probe",
        &json!({ "url": main, "username": CAMERA_USER, "password": CAMERA_PASSWORD }),
    );
    assert_eq!((code, v["found"]["codec"].as_str()), (200, Some("H.264")), "{v}");
    let (_, snap) = call(port, &admin, "GET", "/api/config", &Value::Null);
    let change = json!({ "base": snap["rev"], "changes": [{ "op": "add_camera", "name": "porch",
        "set": { "main": { "url": main }, "username": CAMERA_USER, "password": CAMERA_PASSWORD } }] });
    let (code, v) = call(port, &admin, "POST", "/api/config/apply", &change);
    assert_eq!(code, 200, "{v}");
    let (v, _) = search();
    let again: Vec<&Value> =
        v["found"].as_array().unwrap().iter().filter(|f| f["address"] == cam.address.as_str()).collect();
    assert_eq!(again[0]["added_as"], "porch", "{v}");

    // Counted.
    let (_, _, metrics) = request(port, "GET", "/metrics", &[("cookie", admin.0.as_str())], "");
    let count = |outcome: &str| -> u64 {
        let needle = format!("keeppeek_config_changes_total{{outcome=\"{outcome}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&needle))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{metrics}"))
    };
    assert_eq!(count("searched"), 3);
    assert_eq!(count("onvif_read"), 5);
}

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

/// A camera added over ONVIF (its device service kept in the config) has its own motion
/// followed: oxvif's mock device, which no one here wrote, reports MotionAlarm on and off
/// as it is pulled; each start becomes a KeepPeek event with the camera's label, its end a
/// revision with the end time, and the camera, recorded on events, records from the
/// keyframe at or before the motion minus its pre-roll.
#[test]
fn a_cameras_own_motion_becomes_events_that_record_with_the_pre_roll() {
    let cam = OnvifCamera::start(4);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [[cameras]]\nname = \"porch\"\nrecord = \"events\"\npre_roll_s = 3\npost_roll_s = 2\n\
             username = \"{CAMERA_USER}\"\npassword = \"{CAMERA_PASSWORD}\"\n\
             onvif = \"http://{a}:8000/onvif/device_service\"\nmain = {{ url = \"rtsp://{a}:554/mock/stream\" }}\n",
            a = cam.address
        ),
    );
    let mut d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let viewer = make_token(port, &admin, r#""view""#);
    let get = |path: &str| -> Value {
        let (code, _, body) = request(port, "GET", path, &[("authorization", &format!("Bearer {viewer}"))], "");
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    // Once the stream runs and its history holds more than the pre-roll, motion from the
    // camera: an event labelled motion, then its end.
    let connected = wait_until(Duration::from_secs(30), || get("/api/cameras")[0]["streams"][0]["connected"] == true);
    assert!(connected, "the camera's stream:\n{}", d.log_text());
    std::thread::sleep(Duration::from_secs(6));
    let ready_us = wall_us();
    let mut event = Value::Null;
    let found = wait_until(Duration::from_secs(40), || {
        let page = get("/api/events?camera=porch");
        let after =
            page["events"].as_array().into_iter().flatten().filter(|e| e["time_us"].as_i64().unwrap_or(0) > ready_us);
        event = after.min_by_key(|e| e["time_us"].as_i64()).cloned().unwrap_or(Value::Null);
        !event.is_null()
    });
    assert!(found, "no event from the camera's motion:\n{}", d.log_text());
    assert_eq!(event["labels"][0], "motion", "{event}");
    let id = event["event"].as_u64().unwrap();
    let ended = wait_until(Duration::from_secs(20), || {
        get(&format!("/api/events/{id}"))["revisions"].as_array().is_some_and(|r| r.len() >= 2)
    });
    assert!(ended, "the motion's end as a revision: {}", get(&format!("/api/events/{id}")));
    let motion_us = event["time_us"].as_i64().unwrap();
    // The footage reaches back to the keyframe at or before motion − pre-roll: the runs
    // (an earlier motion's recording may hold the first part of it) cover that span whole.
    let pre_roll_us = 3_000_000;
    let from_us = motion_us - pre_roll_us;
    let mut covered = false;
    let mut runs = Vec::new();
    let recorded = wait_until(Duration::from_secs(30), || {
        let path = format!(
            "/api/streams/porch/main/recordings?from_us={}&to_us={}",
            ready_us - 60_000_000,
            wall_us() + 1_000_000
        );
        runs = get(&path)["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r["start_us"].as_i64()?, r["end_us"].as_i64()?)))
            .collect::<Vec<_>>();
        runs.sort();
        // From the run holding motion − pre-roll on, each next run starts where the last ended.
        let mut reach = None;
        for &(a, b) in &runs {
            match reach {
                None if a <= from_us && b >= from_us => reach = Some(b),
                Some(r) if a <= r + 200_000 => reach = Some(r.max(b)),
                _ => {}
            }
        }
        covered = reach.is_some_and(|r| r >= motion_us);
        covered
    });
    let rel: Vec<(i64, i64)> = runs.iter().map(|(a, b)| ((a - motion_us) / 1000, (b - motion_us) / 1000)).collect();
    assert!(
        recorded && covered,
        "motion − pre-roll to motion not recorded whole; runs around the motion (ms): {rel:?}"
    );
    // The subscription and what it made, for an admin and in /metrics.
    let admin_get = |path: &str| -> String {
        let (code, _, body) = request(port, "GET", path, &[("cookie", &admin.0)], "");
        assert_eq!(code, 200, "{path}: {body}");
        body
    };
    let following: Value = serde_json::from_str(&admin_get("/api/system/camera-events")).unwrap();
    let porch = &following["cameras"][0];
    assert_eq!((porch["camera"].as_str(), porch["state"].as_str()), (Some("porch"), Some("subscribed")), "{following}");
    assert!(porch["events"].as_u64().unwrap() >= 2, "a start and its end: {following}");
    assert_eq!(porch["dropped"], 0);
    let metrics = admin_get("/metrics");
    assert!(metrics.contains("keeppeek_onvif_events_subscribed{camera=\"porch\"} 1"), "{metrics}");

    // The frame counter read back: the recording holding motion − pre-roll starts at a
    // keyframe of the camera's clip (one a second, 150 frames a loop) and its frames follow
    // one another from there past the motion.
    d.stop();
    let recs = d.recordings();
    let slack = 150_000;
    let rec = recs
        .iter()
        .find(|r| {
            r["wall_start_us"].as_i64().is_some_and(|a| a <= from_us + slack)
                && r["wall_end_us"].as_i64().is_some_and(|b| b >= from_us)
        })
        .unwrap_or_else(|| panic!("no recording holds motion − pre-roll: {recs:?}"));
    let start = rec["wall_start_us"].as_i64().unwrap();
    let upto = rec["wall_end_us"].as_i64().unwrap().min(motion_us);
    let want = ((upto - start) as f64 * 15.0 / 1e6) as usize;
    let numbers = frame_numbers(&d.data().join(rec["path"].as_str().unwrap()), want + 1);
    assert!(numbers.len() >= want, "{} frames read, {want} wanted", numbers.len());
    assert!(numbers[0].is_multiple_of(15), "starts at a keyframe: frame {}", numbers[0]);
    for pair in numbers.windows(2) {
        assert_eq!(pair[1], (pair[0] + 1) % 150, "consecutive frames: {numbers:?}");
    }
}

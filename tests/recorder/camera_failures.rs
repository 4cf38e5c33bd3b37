//! Cameras that are down, die, refuse the password or hang: KeepPeek keeps running, says
//! why, reconnects with backoff, and the catalog shows a gap, never corruption.

use std::time::Duration;

use crate::common::*;

/// The `retry_in_ms` values logged for one stream, in order.
fn retries(log: &str, stream: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("camera session ended") && l.contains(&format!("stream={stream}")))
        .filter_map(|l| l.split("retry_in_ms=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn survives_cameras_that_are_down_die_refuse_or_hang() {
    let late_port = free_port();
    let silent_port = silent_server();
    let hangs_port = fake_camera(FakeCamera::HangsOnSetup);
    let mute_port = fake_camera(FakeCamera::SilentAfterPlay);
    let cam = Camera::start();
    let mut flaky = Camera::start();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            r#"
flush_interval_s = 1
[retention]
stream_max_bytes = "1 GiB"
total_max_bytes = "1 GiB"
[[cameras]]
name = "late"
main = {{ url = "rtsp://127.0.0.1:{late_port}/h264" }}
[[cameras]]
name = "badpw"
username = "{CAMERA_USER}"
password = "wrong"
main = {{ url = "{auth}" }}
[[cameras]]
name = "silent"
main = {{ url = "rtsp://127.0.0.1:{silent_port}/h264" }}
[[cameras]]
name = "hangs"
main = {{ url = "rtsp://127.0.0.1:{hangs_port}/fake" }}
[[cameras]]
name = "mute"
main = {{ url = "rtsp://127.0.0.1:{mute_port}/fake" }}
[[cameras]]
name = "flaky"
main = {{ url = "{flaky}" }}
"#,
            auth = cam.url("/h264-auth"),
            flaky = flaky.url("/h264"),
        ),
    );
    let mut d = Daemon::start(dir.path());

    // The flaky camera records, dies, and comes back on the same port.
    d.wait_log("recording to recordings/flaky/main", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(4));
    flaky.kill();
    d.wait_log("stream=flaky/main", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    let _flaky_again = Camera::start_on(flaky.port);

    // Wrong password: a clear 401, and the longest backoff.
    d.wait_log("401", 1, Duration::from_secs(20));
    // A camera that accepts and never answers is given up on.
    d.wait_log("no answer to DESCRIBE in time", 1, Duration::from_secs(25));

    // One that stops answering after DESCRIBE, one that plays but sends nothing.
    d.wait_log("no answer to SETUP in time", 1, Duration::from_secs(25));
    d.wait_log("connected, but no video frame for 10 s", 1, Duration::from_secs(25));

    // The camera that was down at start comes up.
    let _late = Camera::start_on(late_port);
    d.wait_log("recording to recordings/late/main", 1, Duration::from_secs(40));
    d.wait_log("recording to recordings/flaky/main", 2, Duration::from_secs(40));
    std::thread::sleep(Duration::from_secs(3));
    assert!(d.is_running(), "keeppeek died:\n{}", d.log_text());
    d.stop();

    let log = d.log_text();
    // Backoff grows: each attempt's range [b/2, b) lies above the previous one's.
    let late = retries(&log, "late/main");
    assert!(late.len() >= 3, "late camera retries: {late:?}");
    assert!(late.windows(2).all(|w| w[1] > w[0]), "backoff must grow: {late:?}");
    let badpw = retries(&log, "badpw/main");
    assert!(badpw.iter().all(|&ms| ms == 30_000), "wrong password waits the longest: {badpw:?}");

    let recs = d.recordings();
    assert!(of_stream(&recs, "badpw/main").is_empty());
    assert!(of_stream(&recs, "silent/main").is_empty());
    assert!(!of_stream(&recs, "late/main").is_empty());
    let flaky_recs = of_stream(&recs, "flaky/main");
    let runs: std::collections::BTreeSet<u64> = flaky_recs.iter().map(|r| r["run_id"].as_u64().unwrap()).collect();
    assert!(runs.len() >= 2, "the camera's death must end the run: {flaky_recs:?}");
    let gap_us = flaky_recs[1]["wall_start_us"].as_i64().unwrap() - flaky_recs[0]["wall_end_us"].as_i64().unwrap();
    assert!(gap_us >= 2_000_000, "the outage shows as a gap of {gap_us} µs");
    for r in flaky_recs {
        assert_recording_matches_file(&d.data(), r);
    }
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

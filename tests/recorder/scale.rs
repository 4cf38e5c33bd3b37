//! The board presets at scale against the real binary and the RTSP camera: 32 cameras with
//! sub streams on the 1 GiB class record for two minutes within the budget, and 10 s GOPs
//! on 32 cameras are cut into shorter fragments with nothing lost and no more memory (a
//! fragment's frames are written as they come, so a long GOP holds none in RAM).
//! One test, so the two runs of 64 camera sessions never overlap each other.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const CAMERAS: usize = 32;

/// The preset's config: `CAMERAS` cameras on `path` (main and sub stream), one in four
/// recorded on events, live view on its own port.
fn preset(cam: &Camera, path: &str, port: u16, extra: &str) -> String {
    let mut body = format!(
        "listen = \"127.0.0.1:{port}\"\nram_class = \"1 GiB\"\nflush_interval_s = 2\n\
         [retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"60 GiB\"\n\
         [webrtc]\nport = {}\n{extra}\n",
        free_port()
    );
    for i in 0..CAMERAS {
        let record = if i % 4 == 0 { "events" } else { "continuous" };
        let url = cam.url(path);
        body.push_str(&format!(
            "[[cameras]]\nname = \"c{i}\"\nrecord = \"{record}\"\nmain = {{ url = \"{url}\" }}\nsub = {{ url = \"{url}\" }}\n"
        ));
    }
    body
}

/// Starts the daemon on `body` in `dir` and waits until every stream is connected; returns
/// it with a `metrics` token.
fn start(dir: &Path, body: &str, port: u16) -> (Daemon, String) {
    write_config(dir, body);
    let config = dir.join("keeppeek.toml");
    let checked = String::from_utf8(succeed(keeppeek().arg("check-config").arg(&config))).unwrap();
    assert!(checked.contains(&format!("ok, {CAMERAS} cameras")), "{checked}");
    let d = Daemon::start(dir);
    d.wait_log("web face listening", 1, Duration::from_secs(30));
    let admin = setup_admin(port);
    let metrics = make_token(port, &admin, r#""metrics""#);
    let all = wait_until(Duration::from_secs(60), || sample_sum(port, &metrics, "keeppeek_stream_connected") == 64);
    assert!(all, "64 camera sessions up: {}", d.log_text());
    (d, metrics)
}

/// The streams recorded continuously: both of every camera but each fourth.
fn continuous_streams() -> impl Iterator<Item = String> {
    (0..CAMERAS).filter(|i| i % 4 != 0).flat_map(|i| ["main", "sub"].map(|kind| format!("c{i}/{kind}")))
}

/// Every recording of `stream` checked against its file; returns the seconds recorded.
fn recorded_seconds(d: &Daemon, recs: &[Value], stream: &str) -> f64 {
    let mine = of_stream(recs, stream);
    for r in &mine {
        assert_recording_matches_file(&d.data(), r);
        assert_decodes(&d.data().join(r["path"].as_str().unwrap()));
    }
    seconds(&mine)
}

#[test]
fn thirty_two_cameras_fit_the_1_gib_class_and_long_gops_lose_nothing() {
    let cam = Camera::start();

    // 1. The 1 GiB preset: 32 cameras, main and sub, for two minutes.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (mut d, metrics) = start(dir.path(), &preset(&cam, "/h264", port, ""), port);
    let budget_kib = budget_line_kib(&d.config, "total");
    let peak = RssPeak::watch(d.pid());
    std::thread::sleep(Duration::from_secs(120));
    let peak_kib = peak.stop();
    let threads = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let threads: usize = threads.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap();
    assert_eq!(sample_sum(port, &metrics, "keeppeek_recorder_queue_dropped_total"), 0, "no frame dropped");
    assert_eq!(sample_sum(port, &metrics, "keeppeek_recorder_fragments_dropped_total"), 0);
    d.stop();
    eprintln!("32 cameras: peak RSS {peak_kib} KiB against a budget of {budget_kib} KiB, {threads} threads");
    assert!(peak_kib < budget_kib, "peak RSS {peak_kib} KiB within the budget's {budget_kib} KiB");
    assert!(
        threads <= 4 + 16,
        "a fixed pool of writers and a capped blocking pool, not a thread per stream: {threads}"
    );
    let check = d.check();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0, "{check}");
    let recs = d.recordings();
    for stream in continuous_streams() {
        let secs = recorded_seconds(&d, &recs, &stream);
        assert!(secs >= 110.0, "{stream}: {secs} s of two minutes");
    }
    for i in (0..CAMERAS).filter(|i| i % 4 == 0) {
        assert!(of_stream(&recs, &format!("c{i}/main")).is_empty(), "c{i} records on events only");
    }
    drop(d);

    // 2. 10 s GOPs on every stream. Fragments end at FRAGMENT_MAX_DURATION_90K (or their
    // header room) rather than hold a GOP; a config from firmware that had a fragment pool
    // (and lowered it) still loads.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pools = "[pools]\nfragments_max_bytes = \"1 MiB\"\n";
    let (mut d, metrics) = start(dir.path(), &preset(&cam, "/h264-long-gop", port, pools), port);
    let budget_kib = budget_line_kib(&d.config, "total");
    let peak = RssPeak::watch(d.pid());
    std::thread::sleep(Duration::from_secs(30));
    let long_peak_kib = peak.stop();
    let cut = sample_sum(port, &metrics, "keeppeek_recorder_fragments_cut_short_total");
    let fragments = sample_sum(port, &metrics, "keeppeek_recorder_fragments_total");
    let frames_in = sample_sum(port, &metrics, "keeppeek_stream_frames_total");
    assert_eq!(sample_sum(port, &metrics, "keeppeek_recorder_queue_dropped_total"), 0, "no frame dropped");
    assert_eq!(sample_sum(port, &metrics, "keeppeek_recorder_fragments_dropped_total"), 0);
    d.stop();
    assert!(d.log_text().contains("pools.fragments_max_bytes is ignored"), "the old key is named");
    eprintln!(
        "long GOPs: {cut} of {fragments} fragments cut short, {frames_in} frames received, peak RSS {long_peak_kib} KiB (2 s GOPs: {peak_kib} KiB)"
    );
    assert!(cut > fragments / 2, "fragments ended before their GOP: {cut} of {fragments}");
    assert!(long_peak_kib < budget_kib, "peak RSS {long_peak_kib} KiB within the budget's {budget_kib} KiB");
    let check = d.check();
    assert_eq!(check["problems"].as_array().unwrap().len(), 0, "{check}");
    let recs = d.recordings();
    for stream in continuous_streams() {
        let mine = of_stream(&recs, &stream);
        let secs = recorded_seconds(&d, &recs, &stream);
        assert!(secs >= 20.0, "{stream}: {secs} s of 30");
        // Fragments shorter than the clip's GOP, and the frames follow one another.
        let frags: Vec<&Value> = mine.iter().flat_map(|r| r["fragments"].as_array().unwrap()).collect();
        assert!(frags.iter().any(|f| f["keyframes"] == 0), "{stream}: fragments between keyframes");
        let path = d.data().join(mine[0]["path"].as_str().unwrap());
        let numbers = frame_numbers(&path, 300);
        for pair in numbers.windows(2) {
            assert_eq!(pair[1], (pair[0] + 1) % 300, "{stream}: consecutive frames {numbers:?}");
        }
    }
}

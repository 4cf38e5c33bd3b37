//! The media API over real HTTP against a recording daemon: live camera state, runs,
//! coverage from the summaries, and export downloads with byte ranges that ffprobe plays.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// A data directory configured for camera `a` (the fixture clip) and a web face on a free port.
fn file_camera_with_web_face() -> (tempfile::TempDir, u16) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let clip = fixtures().join("h264.mp4");
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\nflush_interval_s = 1\n[retention]\nstream_max_bytes = \"1 GiB\"\n\
             total_max_bytes = \"1 GiB\"\n[[cameras]]\nname = \"a\"\nmain = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    );
    (dir, port)
}

#[test]
fn cameras_recordings_coverage_and_export_over_http() {
    let (dir, port) = file_camera_with_web_face();
    let t0 = wall_us();
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, "\"view\"");
    let bearer = format!("Bearer {token}");
    let get = |path: &str| request(port, "GET", path, &[("authorization", &bearer)], "");
    std::thread::sleep(Duration::from_secs(9));

    let (code, _, body) = get("/api/cameras");
    assert_eq!(code, 200, "{body}");
    let cams: Value = serde_json::from_str(&body).unwrap();
    let main = &cams[0]["streams"][0];
    assert_eq!(cams[0]["camera"], "a");
    assert_eq!(
        (main["connected"].as_bool(), main["codec"].as_str(), main["width"].as_u64()),
        (Some(true), Some("h264"), Some(640))
    );
    assert!(main["fps"].as_f64().unwrap() > 10.0 && main["bitrate_bps"].as_u64().unwrap() > 10_000, "{main}");

    // The same state, and the recorder's and catalog's counters, in /metrics.
    let metrics_token = format!("Bearer {}", make_token(port, &admin, "\"metrics\""));
    let (code, _, text) = request(port, "GET", "/metrics", &[("authorization", &metrics_token)], "");
    assert_eq!(code, 200, "{text}");
    let sample = |name: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(sample("keeppeek_stream_connected{stream=\"a/main\"}"), 1);
    assert_eq!(sample("keeppeek_stream_sessions_total{stream=\"a/main\"}"), 1);
    assert!(sample("keeppeek_stream_frames_total{stream=\"a/main\"}") > 100);
    assert!(sample("keeppeek_recorder_fragments_total{stream=\"a/main\"}") >= 2);
    assert!(sample("keeppeek_recorder_bytes_total{stream=\"a/main\"}") > 100_000);
    assert_eq!(sample("keeppeek_recorder_queue_dropped_total{stream=\"a/main\"}"), 0);
    assert_eq!(sample("keeppeek_recorder_write_errors_total{stream=\"a/main\"}"), 0);
    // Frames go to disk as they come: at least one write a fragment, besides its header.
    let writes = sample("keeppeek_recorder_frame_writes_total{stream=\"a/main\"}");
    assert!(writes >= sample("keeppeek_recorder_fragments_total{stream=\"a/main\"}"), "{writes} writes");
    assert!(sample("keeppeek_catalog_commits_total") >= 2);
    assert_eq!(sample("keeppeek_catalog_commit_errors_total"), 0);

    // End the range in the past, so every fragment it touches is written and committed (one
    // GOP, the queue and a flush interval, with room for a loaded machine): the export's length then stays the same between requests.
    let now = wall_us() - 5_000_000;
    let q = format!("?from_us={t0}&to_us={now}");
    let (code, _, body) = get(&format!("/api/streams/a/main/recordings{q}"));
    assert_eq!(code, 200, "{body}");
    let recs: Value = serde_json::from_str(&body).unwrap();
    let run = &recs["runs"][0];
    assert!(run["end_us"].as_i64().unwrap() - run["start_us"].as_i64().unwrap() >= 2_000_000, "{recs}");

    let (code, _, body) = get(&format!("/api/streams/a/main/coverage{q}"));
    assert_eq!(code, 200, "{body}");
    let cov: Value = serde_json::from_str(&body).unwrap();
    let recorded: u64 = cov["buckets"].as_array().unwrap().iter().map(|b| b["recorded_us"].as_u64().unwrap()).sum();
    assert!(recorded >= 2_000_000, "{cov}");

    // The export: a whole download and a byte range of it.
    let (code, head, _) = get(&format!("/api/streams/a/main/export.mp4{q}"));
    assert_eq!(code, 200, "{head}");
    assert!(
        head.contains("attachment; filename=\"a-main-") && head.to_ascii_lowercase().contains("accept-ranges: bytes"),
        "{head}"
    );
    let path = format!("/api/streams/a/main/export.mp4{q}");
    let download = |range: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let req =
            format!("GET {path} HTTP/1.1\r\nhost: kp\r\nauthorization: {bearer}\r\n{range}connection: close\r\n\r\n");
        std::io::Write::write_all(&mut s, req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut raw).unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        (String::from_utf8_lossy(&raw[..split]).into_owned(), raw[split..].to_vec())
    };
    let (_, mp4) = download("");
    let file = dir.path().join("download.mp4");
    std::fs::write(&file, &mp4).unwrap();
    let packets = ffprobe_packets(&file);
    assert!(packets[0].key && packets.len() > 30, "{} packets", packets.len());
    assert_decodes(&file);

    let (head, part) = download("range: bytes=100-199\r\n");
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert!(head.contains(&format!("bytes 100-199/{}", mp4.len())), "{head}");
    assert_eq!(part, &mp4[100..200]);
    let (code, _, _) = request(port, "GET", &path, &[("authorization", &bearer), ("range", "bytes=999999999-")], "");
    assert_eq!(code, 416);
    // The unit is case-insensitive; several ranges get the whole file.
    let (head, upper) = download("range: BYTES=100-199\r\n");
    assert!(head.starts_with("HTTP/1.1 206") && upper == mp4[100..200], "{head}");
    let (head, whole) = download("range: bytes=0-9, 100-199\r\n");
    assert!(head.starts_with("HTTP/1.1 200") && whole == mp4, "{head}");
    let (code, _, _) =
        request(port, "GET", "/api/streams/a/main/export.mp4?from_us=1&to_us=2", &[("authorization", &bearer)], "");
    assert_eq!(code, 404);
    // The same range as an HLS VOD playlist of byte ranges, which ffmpeg reads end to end.
    let (code, _, m3u8) = get(&format!("/api/streams/a/main/export.m3u8{q}"));
    assert_eq!(code, 200, "{m3u8}");
    assert!(m3u8.starts_with("#EXTM3U") && m3u8.contains("#EXT-X-MAP:") && m3u8.trim_end().ends_with("#EXT-X-ENDLIST"));
    let url = format!("http://127.0.0.1:{port}/api/streams/a/main/export.m3u8{q}");
    let out = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-headers",
            &format!("Authorization: {bearer}\r\n"),
            "-count_packets",
            "-select_streams",
            "v:0",
        ])
        .args(["-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "ffprobe of the playlist: {stderr}");
    let printed = String::from_utf8_lossy(&out.stdout);
    // HLS shows the stream once under its program and once on its own: the same count.
    let first = printed.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let hls_packets: usize = first.trim().parse().unwrap_or_else(|_| panic!("ffprobe printed {printed:?}"));
    assert_eq!(hls_packets, packets.len(), "the playlist holds the same frames as the download");
    let (code, _, _) = get("/api/streams/a/main/coverage?from_us=5&to_us=1");
    assert_eq!(code, 400);
}

#[test]
fn deleting_a_time_range_removes_whole_closed_recordings_only() {
    let (dir, port) = file_camera_with_web_face();
    let t0 = wall_us();
    let mut first = Daemon::start(dir.path());
    first.wait_log("recording to", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(4));
    first.stop();
    let t_mid = wall_us();
    let mut d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    std::thread::sleep(Duration::from_secs(3));
    // The first run's file: the oldest name in the stream's folder (names sort by time).
    let stream_dir = dir.path().join("data/recordings/a/main");
    let mut names: Vec<_> = std::fs::read_dir(&stream_dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    assert_eq!(names.len(), 2);
    let first_file = names[0].clone();

    let delete = |from: i64, to: i64| {
        let (code, _, body) = request(
            port,
            "DELETE",
            &format!("/api/streams/a/main/recordings?from_us={from}&to_us={to}"),
            &[("cookie", &admin.0), ("x-csrf-token", &admin.1)],
            "",
        );
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    // The recording still being written is kept whole, even inside the range.
    let r = delete(t0, wall_us());
    assert_eq!((r["deleted"].as_u64(), r["kept"].as_u64()), (Some(1), Some(1)), "{r}");
    assert!(!first_file.exists(), "the first run's file is gone");
    let r = delete(t0, t_mid);
    assert_eq!(r["deleted"].as_u64(), Some(0), "{r}");
    d.stop();
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(d.recordings().len(), 1);
}

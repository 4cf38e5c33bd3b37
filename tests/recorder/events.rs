//! Events from analysis services against the real binary: durable intake with snapshots,
//! revisions and idempotency across `kill -9`, bad input refused with nothing stored, search,
//! and event recordings that start the pre-roll before the event (read from the bar-coded
//! frame counter in the recorded file).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

const BOUNDARY: &str = "kp-test-boundary";

/// A multipart intake body: the envelope, and the snapshot when given.
fn multipart(envelope: &str, snapshot: Option<&[u8]>) -> Vec<u8> {
    let mut b = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"event\"\r\nContent-Type: application/json\r\n\r\n{envelope}\r\n"
    )
    .into_bytes();
    if let Some(jpeg) = snapshot {
        b.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"snapshot\"; filename=\"s.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"
            )
            .as_bytes(),
        );
        b.extend_from_slice(jpeg);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    b
}

pub(crate) fn post_event(port: u16, token: &str, envelope: &str, snapshot: Option<&[u8]>) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    let body = multipart(envelope, snapshot);
    let (code, head, body) =
        request_bytes(port, "POST", "/api/events", &[("authorization", &auth), ("content-type", &ct)], &body);
    (code, serde_json::from_str(&body).unwrap_or_else(|_| panic!("{head}\n{body}")))
}

fn get_json(port: u16, token: &str, path: &str) -> Value {
    let (code, head, body) = request(port, "GET", path, &[("authorization", &format!("Bearer {token}"))], "");
    assert_eq!(code, 200, "{path}: {head}\n{body}");
    serde_json::from_str(&body).unwrap()
}

/// The fixture snapshot with a comment segment naming `n` after its start marker: a
/// different, still whole JPEG for each revision.
pub(crate) fn snapshot(n: usize) -> Vec<u8> {
    let jpeg = std::fs::read(fixtures().join("snapshot-4k.jpg")).unwrap();
    let text = format!("revision {n}");
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xFE]);
    out.extend_from_slice(&((text.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// A daemon with a web face and camera `front` (the fixture file) recorded on events, `extra`
/// config lines before its tables; its first admin set up, and an `events:write`, a `view`
/// and a `metrics` token.
pub(crate) struct EventsBox {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub daemon: Daemon,
    pub writer: String,
    pub viewer: String,
    pub metrics: String,
    pub admin: String,
}

fn events_box(extra: &str) -> EventsBox {
    let clip = fixtures().join("h264.mp4");
    let camera = format!(
        "[[cameras]]\nname = \"front\"\nrecord = \"events\"\nmain = {{ url = \"file://{}\" }}\n",
        clip.display()
    );
    events_box_of(&format!("flush_interval_s = 1\n{extra}"), &camera)
}

/// A box with `top` settings and `cameras`, its admin's writer and viewer tokens.
pub(crate) fn events_box_of(top: &str, cameras: &str) -> EventsBox {
    events_box_with(top, "stream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n", cameras)
}

/// [`events_box_of`] with its own `[retention]`.
fn events_box_with(top: &str, retention: &str, cameras: &str) -> EventsBox {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_config(dir.path(), &format!("listen = \"127.0.0.1:{port}\"\n{top}[retention]\n{retention}{cameras}"));
    let daemon = Daemon::start(dir.path());
    daemon.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let writer = make_token(port, &admin, r#""events:write""#);
    let viewer = make_token(port, &admin, r#""view""#);
    let metrics = make_token(port, &admin, r#""metrics""#);
    let admin = make_token(port, &admin, r#""admin""#);
    EventsBox { dir, port, daemon, writer, viewer, metrics, admin }
}

fn snapshot_files(data: &Path) -> usize {
    let mut n = 0;
    for bucket in std::fs::read_dir(data.join("events")).into_iter().flatten().flatten() {
        n += std::fs::read_dir(bucket.path()).map_or(0, |d| d.count());
    }
    n
}

#[test]
fn twenty_revisions_with_4k_snapshots_survive_kill_9_and_keys_are_not_stored_twice() {
    let EventsBox { dir, port, daemon: mut d, writer, viewer, .. } = events_box("");
    // Some pre-roll first, so the event's recording reaches back before it.
    let connected = wait_until(Duration::from_secs(20), || {
        get_json(port, &viewer, "/api/cameras")[0]["streams"][0]["connected"].as_bool() == Some(true)
    });
    assert!(connected);
    std::thread::sleep(Duration::from_millis(2500));
    let first_us = wall_us();
    let mut sent = Vec::new();
    for n in 1..=20 {
        let jpeg = snapshot(n);
        assert!((400_000..=500_000).contains(&jpeg.len()), "about 450 KB: {}", jpeg.len());
        let envelope = format!(
            r#"{{"id":"door-1","camera":"front","labels":["person"],"score":0.9,"text":"revision {n}","idempotency_key":"door-1-{n}","boxes":[{{"x":0.1,"y":0.2,"w":0.3,"h":0.4}}]}}"#
        );
        let (code, answer) = post_event(port, &writer, &envelope, Some(&jpeg));
        assert_eq!(code, 201, "{answer}");
        assert_eq!((answer["id"].as_u64(), answer["rev"].as_u64()), (Some(1), Some(n as u64)));
        sent.push(jpeg);
    }
    // A retry of revision 5 (same key): answered, not stored again.
    let envelope = r#"{"id":"door-1","camera":"front","text":"revision 5","idempotency_key":"door-1-5"}"#;
    let (code, answer) = post_event(port, &writer, envelope, Some(&snapshot(5)));
    assert_eq!(code, 200, "{answer}");
    assert_eq!((answer["rev"].as_u64(), answer["replayed"].as_bool()), (Some(5), Some(true)));
    assert_eq!(snapshot_files(&dir.path().join("data")), 20);
    // Its recording is on disk past the event before the power goes.
    let recorded = wait_until(Duration::from_secs(20), || {
        let path = format!(
            "/api/streams/front/main/recordings?from_us={}&to_us={}",
            first_us - 60_000_000,
            wall_us() + 1_000_000
        );
        let runs = get_json(port, &viewer, &path)["runs"].clone();
        runs.as_array().unwrap().iter().any(|r| r["end_us"].as_i64().unwrap() > first_us + 1_000_000)
    });
    assert!(recorded, "the event's recording");

    d.kill9();
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let revs = get_json(port, &viewer, "/api/events/1");
    let revs = revs["revisions"].as_array().unwrap();
    assert_eq!(revs.len(), 20);
    for (i, r) in revs.iter().enumerate() {
        assert_eq!(r["rev"].as_u64(), Some(i as u64 + 1));
        assert_eq!(r["text"].as_str().unwrap(), format!("revision {}", i + 1));
        assert_eq!((r["snapshot"]["width"].as_u64(), r["snapshot"]["height"].as_u64()), (Some(3840), Some(2160)));
        let url = r["snapshot"]["url"].as_str().unwrap();
        let (code, bytes) = get_bytes(port, &viewer, url);
        assert_eq!(code, 200);
        assert!(bytes == sent[i], "revision {} snapshot differs", i + 1);
    }
    assert_eq!(snapshot_files(&dir.path().join("data")), 20, "no orphan, nothing twice");
    // The picture recorded at the event (its recording began with the pre-roll): one
    // keyframe as an MP4 that decodes.
    let (code, mp4) = get_bytes(port, &viewer, "/api/events/1/keyframe");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&mp4));
    let file = dir.path().join("keyframe.mp4");
    std::fs::write(&file, &mp4).unwrap();
    assert_decodes(&file);
    let packets = ffprobe_packets(&file);
    assert_eq!(packets.len(), 1);
    assert!(packets[0].key);
    let (code, _) = get_bytes(port, &viewer, "/api/events/99/keyframe");
    assert_eq!(code, 404);
    // The latest revision is what search finds.
    let found = get_json(port, &viewer, "/api/events?camera=front&label=person");
    assert_eq!(found["events"].as_array().unwrap().len(), 1);
    let e = &found["events"][0];
    assert_eq!(e["rev"].as_u64(), Some(20));
    // It links to its keyframe and to playback from the pre-roll (5 s by default).
    assert_eq!(e["keyframe"].as_str(), Some("/api/events/1/keyframe"));
    assert_eq!(e["play"]["stream"].as_str(), Some("front/main"));
    assert_eq!(e["play"]["from_us"].as_i64().unwrap(), e["time_us"].as_i64().unwrap() - 5_000_000);
}

#[test]
fn bad_events_get_clear_errors_and_nothing_is_stored() {
    let EventsBox { dir, port, daemon: _d, writer, viewer, .. } = events_box("");
    let good = snapshot(1);
    let envelope = r#"{"camera":"front","labels":["car"]}"#;
    // A whole 1x1 PNG: a real picture, just not a JPEG.
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\
                \0\0\0\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\0\x05\0\x01\xff\x89\x99=\x1d\0\0\0\0IEND\xaeB`\x82"
        .to_vec();
    // One byte over the ceiling, by comment segments: a well-formed JPEG of 8 MiB + 1.
    let mut huge = good[..2].to_vec();
    let mut fill = (8 << 20) + 1 - good.len();
    while fill > 0 {
        // Whole segments, leaving no remainder too small for a segment of its own.
        let seg = if fill > 0xFFFF + 2 && fill < 0xFFFF + 2 + 4 { fill - 4 } else { fill.min(0xFFFF + 2) };
        huge.extend_from_slice(&[0xFF, 0xFE]);
        huge.extend_from_slice(&((seg - 2) as u16).to_be_bytes());
        huge.extend(std::iter::repeat_n(b'x', seg - 4));
        fill -= seg;
    }
    huge.extend_from_slice(&good[2..]);
    assert_eq!(huge.len(), (8 << 20) + 1);
    type Case<'a> = (&'a str, String, Option<Vec<u8>>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("truncated", envelope.into(), Some(good[..good.len() / 2].to_vec()), 400, "bad_snapshot"),
        ("not a JPEG", envelope.into(), Some(png), 415, "not_jpeg"),
        ("oversized JPEG", envelope.into(), Some(huge), 413, "snapshot_too_large"),
        (
            "oversized envelope",
            format!(r#"{{"camera":"front","text":"{}"}}"#, "x".repeat(17 << 10)),
            None,
            413,
            "envelope_too_large",
        ),
        ("unknown camera", r#"{"camera":"back"}"#.into(), Some(good.clone()), 422, "unknown_camera"),
        ("a bad field", r#"{"camera":"front","score":7}"#.into(), Some(good.clone()), 400, "bad_envelope"),
    ];
    for (what, envelope, jpeg, want, code) in cases {
        let (got, answer) = post_event(port, &writer, &envelope, jpeg.as_deref());
        assert_eq!(got, want, "{what}: {answer}");
        assert_eq!(answer["code"].as_str(), Some(code), "{what}: {answer}");
    }
    let (code, _) = post_event(port, "kp_0_not-a-token", envelope, Some(&good));
    assert_eq!(code, 401, "a bad token");
    let (code, answer) = post_event(port, &viewer, envelope, Some(&good));
    assert_eq!(code, 403, "a token without events:write: {answer}");
    let (code, head, _) = request(
        port,
        "POST",
        "/api/events",
        &[("authorization", &format!("Bearer {writer}")), ("content-type", "image/jpeg")],
        "x",
    );
    assert_eq!(code, 415, "{head}");
    // The framing around the parts has a ceiling of its own: a 60 KB file name is refused.
    let framed = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"event\"; filename=\"{}\"\r\n\r\n{envelope}\r\n--{BOUNDARY}--\r\n",
        "f".repeat(60_000)
    );
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    let (code, _, body) = request_bytes(
        port,
        "POST",
        "/api/events",
        &[("authorization", &format!("Bearer {writer}")), ("content-type", &ct)],
        framed.as_bytes(),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("framing"), "{body}");
    // A body over the intake's ceiling (envelope, snapshot and framing) is refused from its
    // declared length, before it is read; exactly at the ceiling it is read (and then found
    // not to be multipart).
    let max = 16 * 1024 + 8 * 1024 * 1024 + 16 * 1024;
    let head = |len: usize| {
        format!(
            "POST /api/events HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {writer}\r\n\
             content-type: application/json\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
        )
    };
    let r = exchange(port, head(max + 1).as_bytes());
    assert_eq!(status(&r), 413, "{r}");
    let mut at_max = head(max).into_bytes();
    at_max.extend(std::iter::repeat_n(b' ', max));
    let r = exchange(port, &at_max);
    assert_eq!(status(&r), 413, "{r}");
    assert!(r.contains("envelope_too_large"), "read, then refused as an envelope: {r}");
    // A revision that is not a number is a clear error, not ignored.
    let (code, _, body) =
        request(port, "GET", "/api/events/1/snapshot?rev=x", &[("authorization", &format!("Bearer {viewer}"))], "");
    assert_eq!(code, 400, "{body}");
    let all = get_json(port, &viewer, "/api/events");
    assert_eq!(all["events"].as_array().unwrap().len(), 0, "nothing stored: {all}");
    assert_eq!(snapshot_files(&dir.path().join("data")), 0, "nothing stored by half");
    // And a good one still goes in.
    let (code, answer) = post_event(port, &writer, envelope, Some(&good));
    assert_eq!(code, 201, "{answer}");
}

#[test]
fn past_the_snapshot_cap_the_oldest_events_go_with_their_files() {
    let EventsBox { dir, port, daemon: _d, writer, viewer, .. } = events_box("[events]\nmax_bytes = \"1 MiB\"\n");
    for n in 1..=5 {
        let e = format!(r#"{{"camera":"front","text":"event {n}","record":false}}"#);
        assert_eq!(post_event(port, &writer, &e, Some(&snapshot(n))).0, 201);
    }
    // ~420 KB each: two fit in 1 MiB.
    let left = get_json(port, &viewer, "/api/events");
    let ids: Vec<u64> = left["events"].as_array().unwrap().iter().map(|e| e["event"].as_u64().unwrap()).collect();
    assert_eq!(ids, [5, 4]);
    assert_eq!(snapshot_files(&dir.path().join("data")), 2);
    let (code, _, _) = request(port, "GET", "/api/events/1", &[("authorization", &format!("Bearer {viewer}"))], "");
    assert_eq!(code, 404);
}

#[test]
fn search_by_camera_label_words_and_time_in_pages() {
    let EventsBox { dir: _dir, port, daemon: _d, writer, viewer, .. } = events_box("");
    let t0 = wall_us() - 3_600_000_000;
    for i in 0..12i64 {
        let label = if i % 2 == 0 { "person" } else { "car" };
        let text = if i % 3 == 0 { "a red van stopped" } else { "nothing much" };
        let e = format!(
            r#"{{"camera":"front","time_us":{},"labels":["{label}"],"text":"{text}","record":false}}"#,
            t0 + i * 60_000_000
        );
        assert_eq!(post_event(port, &writer, &e, None).0, 201);
    }
    let ids =
        |v: &Value| v["events"].as_array().unwrap().iter().map(|e| e["event"].as_u64().unwrap()).collect::<Vec<_>>();
    assert_eq!(ids(&get_json(port, &viewer, "/api/events?label=person&q=red+van")), [7, 1]);
    let window = format!("/api/events?from_us={}&to_us={}", t0 + 60_000_000, t0 + 180_000_000);
    assert_eq!(ids(&get_json(port, &viewer, &window)), [4, 3, 2]);
    let mut seen = Vec::new();
    let mut path = "/api/events?camera=front&limit=5".to_string();
    loop {
        let page = get_json(port, &viewer, &path);
        seen.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => path = format!("/api/events?camera=front&limit=5&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen, (1..=12).rev().collect::<Vec<u64>>());
    let (code, _, body) =
        request(port, "GET", "/api/events?colour=red", &[("authorization", &format!("Bearer {viewer}"))], "");
    assert_eq!(code, 400, "{body}");
}

#[test]
fn an_event_recording_starts_at_the_keyframe_at_or_before_the_event_minus_the_pre_roll() {
    let cam = Camera::start();
    let cameras = format!(
        "[[cameras]]\nname = \"door\"\nrecord = \"events\"\npre_roll_s = 5\npost_roll_s = 2\nmain = {{ url = \"{}\" }}\n",
        cam.url("/h264-long-gop")
    );
    let EventsBox { dir: _dir, port, daemon: mut d, writer, metrics, .. } =
        events_box_of("flush_interval_s = 1\n", &cameras);
    let stream = |name: &str| sample(port, &metrics, &format!("{name}{{stream=\"door/main\"}}"));
    let up = wait_until(Duration::from_secs(20), || stream("keeppeek_stream_connected") == Some(1));
    assert!(up, "the camera connects: {}", d.log_text());
    // Let the history fill: 10 s GOPs, 5 s pre-roll: it reaches back to a keyframe 5 to
    // 15 s old, and the camera's loop is 20 s.
    std::thread::sleep(Duration::from_secs(17));
    assert_eq!(stream("keeppeek_event_recordings_total"), Some(0), "nothing recorded before an event");
    assert!(stream("keeppeek_preroll_bytes").unwrap() > 0, "the history holds frames");
    let event_us = wall_us();
    let e = format!(r#"{{"camera":"door","time_us":{event_us},"labels":["person"]}}"#);
    let (code, answer) = post_event(port, &writer, &e, None);
    assert_eq!(code, 201, "{answer}");
    // The recording ends at the first keyframe after event + 2 s: within 12 s.
    let done = wait_until(Duration::from_secs(20), || stream("keeppeek_event_recordings_finished_total") == Some(1));
    assert!(done, "an event recording: {}", d.log_text());
    assert_eq!(stream("keeppeek_event_recordings_total"), Some(1));
    d.stop();
    let recs = d.recordings();
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec = &recs[0];
    let start = rec["wall_start_us"].as_i64().unwrap();
    let end = rec["wall_end_us"].as_i64().unwrap();
    let from = event_us - 5_000_000;
    // Receipt times jitter by a few ms around the camera's 15 fps.
    let slack = 150_000;
    assert!(start <= from + slack, "starts at or before event - 5 s: {start} vs {from}");
    assert!(start + 10_000_000 > from - slack, "at the last keyframe before it: {start} vs {from}");
    assert!(end >= event_us + 2_000_000 - slack, "reaches the post-roll: {end} vs {event_us}");
    assert!(end <= event_us + 12_000_000 + slack, "ends at the GOP after it: {end}");
    // The file's first frame is a keyframe of the clip (frame 0 or 150 of its 300), and its
    // frames follow one another.
    let path = d.data().join(rec["path"].as_str().unwrap());
    assert_decodes(&path);
    let numbers = frame_numbers(&path, 200);
    assert!(numbers[0].is_multiple_of(150), "starts at a keyframe: frame {}", numbers[0]);
    for pair in numbers.windows(2) {
        assert_eq!(pair[1], (pair[0] + 1) % 300, "consecutive frames: {numbers:?}");
    }
    let packets = ffprobe_packets(&path);
    let seconds = packets.len() as f64 / 15.0;
    let want = (end - start) as f64 / 1e6;
    assert!((seconds - want).abs() < 0.5, "{seconds} s of frames for {want} s");
}

#[test]
fn pre_roll_caps_hold_in_the_daemon_and_a_disabled_pre_roll_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let clip = fixtures().join("h264.mp4");
    let camera = |name: &str, extra: &str| {
        format!("[[cameras]]\nname = \"{name}\"\n{extra}\nmain = {{ url = \"file://{}\" }}\n", clip.display())
    };
    let mut config = format!(
        "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
         [preroll]\nstream_max_bytes = \"4 MiB\"\ntotal_max_bytes = \"512 KiB\"\n"
    );
    for i in 0..4 {
        config.push_str(&camera(&format!("c{i}"), "record = \"events\"\npre_roll_s = 5"));
    }
    config.push_str(&camera("off", "record = \"events\"\npre_roll_s = 0"));
    config.push_str(&camera("always", "record = \"continuous\""));
    write_config(dir.path(), &config);
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let metrics = make_token(port, &admin, r#""metrics""#);
    let of = |name: &str, stream: &str| sample(port, &metrics, &format!("{name}{{stream=\"{stream}/main\"}}"));
    // Four histories share 512 KiB: 128 KiB each, under the clip's 7 s (~260 KB) of keep.
    let share = 128 << 10;
    std::thread::sleep(Duration::from_secs(9));
    for _ in 0..10 {
        for i in 0..4 {
            let stream = format!("c{i}");
            assert!(of("keeppeek_preroll_bytes", &stream).unwrap() <= share);
        }
        assert!(sample(port, &metrics, "keeppeek_preroll_total_bytes").unwrap() <= 512 << 10);
        std::thread::sleep(Duration::from_millis(300));
    }
    for i in 0..4 {
        let stream = format!("c{i}");
        let high = of("keeppeek_preroll_high_water_bytes", &stream).unwrap();
        assert!(high <= share && high > share / 2, "c{i} reached its share and no more: {high}");
        assert!(of("keeppeek_preroll_gops_capped_total", &stream).unwrap() > 0);
        assert!(of("keeppeek_preroll_frames", &stream).unwrap() > 0);
    }
    let high = sample(port, &metrics, "keeppeek_preroll_total_high_water_bytes").unwrap();
    assert!(high <= 512 << 10, "{high}");
    for stream in ["off", "always"] {
        assert_eq!(of("keeppeek_preroll_bytes", stream), None, "{stream} has no history");
    }
    assert_eq!(of("keeppeek_event_recordings_total", "off"), Some(0));
}

/// The footage of an acknowledged event is made durable at once, not at the next flush:
/// with a flush interval of a minute, a camera recording around events (10 s GOPs, the
/// hardest case: its fragment would otherwise close only at the GOP's end) and one
/// recording always have the event's moment committed within seconds, and the event's
/// keyframe resolves. A camera recording its main and sub streams is flushed once for both.
/// An event storm asks for at most one early flush per stream per EVENT_FLUSH_MIN_INTERVAL_MS.
#[test]
fn an_acknowledged_events_footage_is_durable_at_once_whatever_the_flush_interval() {
    let cam = Camera::start();
    let mut cameras = format!(
        "[[cameras]]\nname = \"door\"\nrecord = \"events\"\npre_roll_s = 5\npost_roll_s = 2\nmain = {{ url = \"{}\" }}\n\
         [[cameras]]\nname = \"yard\"\npost_roll_s = 3\nmain = {{ url = \"{}\" }}\nsub = {{ url = \"{}\" }}\n",
        cam.url("/h264-long-gop"),
        cam.url("/h264"),
        cam.url("/h264")
    );
    for name in ["gate", "shed"] {
        cameras.push_str(&format!(
            "[[cameras]]\nname = \"{name}\"\npost_roll_s = 3\nmain = {{ url = \"{}\" }}\n",
            cam.url("/h264")
        ));
    }
    let EventsBox { dir: _dir, port, daemon: d, writer, viewer, metrics, admin } =
        events_box_of("flush_interval_s = 60\n", &cameras);
    let stream = |name: &str, s: &str| sample(port, &metrics, &format!("{name}{{stream=\"{s}\"}}"));
    let up = wait_until(Duration::from_secs(20), || {
        ["door/main", "yard/main", "yard/sub", "gate/main", "shed/main"]
            .iter()
            .all(|s| stream("keeppeek_stream_connected", s) == Some(1))
    });
    assert!(up, "the cameras connect: {}", d.log_text());
    // The history reaches back to a keyframe before the pre-roll.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(sample(port, &metrics, "keeppeek_catalog_early_flushes_total"), Some(0));

    for camera in ["door", "yard"] {
        let early_flushes = || sample(port, &metrics, "keeppeek_catalog_early_flushes_total").unwrap();
        let flushes_before = early_flushes();
        let event_us = wall_us();
        let e = format!(r#"{{"camera":"{camera}","time_us":{event_us},"labels":["person"]}}"#);
        let (code, answer) = post_event(port, &writer, &e, None);
        assert_eq!(code, 201, "{answer}");
        let acked = Instant::now();
        let path = format!(
            "/api/streams/{camera}/main/recordings?from_us={}&to_us={}",
            event_us - 60_000_000,
            event_us + 60_000_000
        );
        let durable = wait_until(Duration::from_secs(10), || {
            get_json(port, &viewer, &path)["runs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["end_us"].as_i64() >= Some(event_us))
        });
        let took = acked.elapsed();
        assert!(durable, "{camera}: the event's moment committed: {}", d.log_text());
        eprintln!("{camera}: the event's footage durable {} ms after its answer", took.as_millis());
        assert!(took < Duration::from_secs(3), "{camera}: {took:?}, not the 60 s flush interval");
        let id = answer["id"].as_u64().unwrap();
        let (code, _) = get_bytes(port, &viewer, &format!("/api/events/{id}/keyframe"));
        assert_eq!(code, 200, "{camera}: the event's keyframe is on disk");
        assert!(stream("keeppeek_recorder_early_flushes_total", &format!("{camera}/main")) >= Some(1));
        if camera == "yard" {
            // Both streams cut at the moment, one commit made durable both (past the gathering).
            std::thread::sleep(Duration::from_millis(2 * keeppeek::limits::EVENT_FLUSH_GATHER_MS));
            assert_eq!(stream("keeppeek_recorder_early_flushes_total", "yard/sub"), Some(1));
            assert_eq!(early_flushes() - flushes_before, 1, "one early flush for both streams");
        }
    }

    // A storm: 200 events in 10 s on four cameras. Each recorder asks for an early flush at
    // most once per EVENT_FLUSH_MIN_INTERVAL_MS (2 s); recording keeps up.
    let storming = ["yard", "gate", "shed", "door"];
    let early = |s: &str| stream("keeppeek_recorder_early_flushes_total", &format!("{s}/main")).unwrap();
    let before: Vec<u64> = storming.iter().map(|s| early(s)).collect();
    let written =
        |what: &str| sample(port, &metrics, &format!("keeppeek_written_bytes_total{{what=\"{what}\"}}")).unwrap();
    let (commits0, catalog0) = (sample(port, &metrics, "keeppeek_catalog_commits_total").unwrap(), written("catalog"));
    let early0 = sample(port, &metrics, "keeppeek_catalog_early_flushes_total").unwrap();
    let storm = Instant::now();
    for i in 0..200 {
        let e =
            format!(r#"{{"camera":"{}","time_us":{},"labels":["car"],"id":"storm-{i}"}}"#, storming[i % 4], wall_us());
        assert_eq!(post_event(port, &writer, &e, None).0, 201);
        let due = Duration::from_millis(50 * (i as u64 + 1));
        std::thread::sleep(due.saturating_sub(storm.elapsed()));
    }
    let spell_ms = storm.elapsed().as_millis() as u64;
    // Past the storm, its post-roll (3 s) and the interval.
    std::thread::sleep(Duration::from_secs(6));
    let most = spell_ms / 2_000 + 1;
    for (s, b) in storming.iter().zip(&before) {
        let flushes = early(s) - b;
        eprintln!("storm: {flushes} early flushes of {s}/main in {spell_ms} ms (at most {most})");
        assert!((2..=most).contains(&flushes), "{s}: {flushes} early flushes in {spell_ms} ms");
        for lost in ["keeppeek_recorder_queue_dropped_total", "keeppeek_recorder_fragments_dropped_total"] {
            assert_eq!(stream(lost, &format!("{s}/main")), Some(0), "{s}: recording kept up ({lost})");
        }
    }
    let commits = sample(port, &metrics, "keeppeek_catalog_commits_total").unwrap() - commits0;
    let early = sample(port, &metrics, "keeppeek_catalog_early_flushes_total").unwrap() - early0;
    // The moments' flushes, one a camera at most every 2 s, and those the post-rolls may
    // still ask for, one every 2 s at most.
    assert!(early <= 5 * most, "{early} early commits for four cameras in {spell_ms} ms");
    let catalog = written("catalog") - catalog0;
    eprintln!(
        "storm: {commits} catalog commits ({early} early), {catalog} catalog bytes written ({} per event)",
        catalog / 200
    );
    assert!(commits > 0 && catalog > 0);
    // The System page's report says the same.
    let wear = get_json(port, &admin, "/api/system")["wear"].clone();
    for key in [
        "recording_bytes",
        "catalog_bytes",
        "catalog_syncs",
        "event_catalog_bytes",
        "early_flushes",
        "early_flush_bytes",
    ] {
        assert!(wear[key].as_u64() > Some(0), "{key}: {wear}");
    }
    assert!(wear["catalog_bytes"].as_u64() >= Some(catalog), "{wear}");
    let share = wear["early_flush_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{wear}");
}

/// The footage an event says it has (`GET /api/events/{id}`).
fn footage_of(port: u16, token: &str, id: u64) -> Value {
    get_json(port, token, &format!("/api/events/{id}"))["footage"].clone()
}

#[test]
fn an_events_footage_outlives_ordinary_retention_until_the_event_is_deleted() {
    let clip = fixtures().join("h264.mp4");
    let cameras = format!(
        "[[cameras]]\nname = \"front\"\npre_roll_s = 1\npost_roll_s = 1\nkeep_event_footage_days = 1\n\
         main = {{ url = \"file://{}\" }}\n",
        clip.display()
    );
    // A 1 MiB cap: the 332 kbit/s clip fills it in about 25 s, in segments of 128 KiB.
    let retention = "stream_max_bytes = \"1 MiB\"\ntotal_max_bytes = \"1 GiB\"\nheld_max_percent = 50\n";
    let EventsBox { dir: _dir, port, daemon: mut d, writer, viewer, metrics, admin } =
        events_box_with("flush_interval_s = 1\n", retention, &cameras);
    let connected = || sample(port, &metrics, "keeppeek_stream_connected{stream=\"front/main\"}") == Some(1);
    assert!(wait_until(Duration::from_secs(20), connected), "the camera connects: {}", d.log_text());
    std::thread::sleep(Duration::from_secs(12));

    // An event that asks for its footage (held a day), and one that does not, of a moment
    // 9 s earlier: three segments apart.
    let t1 = wall_us();
    let t0 = t1 - 9_000_000;
    let (code, held) = post_event(port, &writer, &format!(r#"{{"camera":"front","time_us":{t1}}}"#), None);
    assert_eq!(code, 201, "{held}");
    let envelope = format!(r#"{{"camera":"front","time_us":{t0},"record":false,"text":"just so"}}"#);
    let (code, plain) = post_event(port, &writer, &envelope, None);
    assert_eq!(code, 201, "{plain}");
    let (held, plain) = (held["id"].as_u64().unwrap(), plain["id"].as_u64().unwrap());
    let on_disk = wait_until(Duration::from_secs(10), || footage_of(port, &viewer, held)["state"] == "on_disk");
    assert!(on_disk, "{}", footage_of(port, &viewer, held));
    let f = footage_of(port, &viewer, held);
    let day_us = 86_400_000_000;
    let until = f["held_until_us"].as_i64().unwrap_or_else(|| panic!("held: {f}"));
    assert!((until - (t1 + day_us)).abs() < 10_000_000, "held a day from its arrival: {f}");
    let f = footage_of(port, &viewer, plain);
    assert_eq!((f["state"].as_str(), f.get("held_until_us")), (Some("on_disk"), None), "{f}");

    // Ordinary retention takes the unheld event's footage; the held one's stays.
    let took = Instant::now();
    let gone = wait_until(Duration::from_secs(120), || footage_of(port, &viewer, plain)["state"] == "gone");
    assert!(gone, "retention never reached the event: {}", footage_of(port, &viewer, plain));
    eprintln!("ordinary footage of the moment went {} s after the event", took.elapsed().as_secs());
    assert_eq!(footage_of(port, &viewer, plain)["why"], "retention");
    let f = footage_of(port, &viewer, held);
    assert_eq!((f["state"].as_str(), f["held_until_us"].as_i64()), (Some("on_disk"), Some(until)), "{f}");
    assert_eq!(get_bytes(port, &viewer, &format!("/api/events/{held}/keyframe")).0, 200);
    assert!(sample(port, &metrics, "keeppeek_retention_held_recordings") >= Some(1));
    // The one stream holds no more than its cap, the held share with it.
    let stored = dir_bytes(&d.data().join("recordings/front"));
    assert!(stored <= (1 << 20) + 3 * (128 << 10), "{stored} bytes");

    // Deleting the event releases its hold: the footage goes to ordinary retention.
    let auth = format!("Bearer {admin}");
    let (code, _, body) = request(port, "DELETE", &format!("/api/events/{held}"), &[("authorization", &auth)], "");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"released_hold\":true"), "{body}");
    let (code, _, _) = request(port, "GET", &format!("/api/events/{held}"), &[("authorization", &auth)], "");
    assert_eq!(code, 404, "deleted");
    let (code, _, _) = request(port, "DELETE", &format!("/api/events/{held}"), &[("authorization", &auth)], "");
    assert_eq!(code, 404, "deleted once");
    let runs = || {
        let path = format!("/api/streams/front/main/recordings?from_us={}&to_us={}", t1 - 1, t1 + 1);
        get_json(port, &viewer, &path)["runs"].as_array().unwrap().len()
    };
    assert!(wait_until(Duration::from_secs(60), || runs() == 0), "released footage goes: {}", d.log_text());
    // An event of that moment now says why it has no footage.
    let envelope = format!(r#"{{"camera":"front","time_us":{t1},"record":false}}"#);
    let (_, late) = post_event(port, &writer, &envelope, None);
    let f = footage_of(port, &viewer, late["id"].as_u64().unwrap());
    assert_eq!((f["state"].as_str(), f["why"].as_str()), (Some("gone"), Some("retention")), "{f}");
    assert_eq!(sample(port, &metrics, "keeppeek_retention_held_deleted_total"), Some(0));

    d.stop();
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

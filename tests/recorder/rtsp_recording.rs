//! Recording real RTSP streams: H.264 and H.265, Digest auth, UDP, AAC audio, a long GOP.

use std::time::Duration;

use crate::common::*;

#[test]
fn records_h264_h265_digest_udp_aac_and_long_gop_streams_that_play() {
    let cam = Camera::start();
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            r#"
flush_interval_s = 2
[retention]
stream_max_bytes = "1 GiB"
total_max_bytes = "1 GiB"
[[cameras]]
name = "h264"
main = {{ url = "{h264}" }}
sub = {{ url = "{h265}" }}
[[cameras]]
name = "h265"
main = {{ url = "{h265}" }}
[[cameras]]
name = "digest"
username = "{CAMERA_USER}"
password = "{CAMERA_PASSWORD}"
main = {{ url = "{auth}" }}
[[cameras]]
name = "udp"
main = {{ url = "{h264}", transport = "udp" }}
[[cameras]]
name = "aac"
main = {{ url = "{aac}" }}
[[cameras]]
name = "longgop"
main = {{ url = "{long}" }}
"#,
            h264 = cam.url("/h264"),
            h265 = cam.url("/h265"),
            auth = cam.url("/h264-auth"),
            long = cam.url("/h264-long-gop"),
            aac = cam.url("/h264-aac"),
        ),
    );
    let mut d = Daemon::start(dir.path());
    for name in ["h264", "h265", "digest", "udp", "aac", "longgop"] {
        d.wait_log(&format!("recording to recordings/{name}/main"), 1, Duration::from_secs(20));
    }
    d.wait_log("recording to recordings/h264/sub", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(22));
    d.stop();

    let recs = d.recordings();
    let streams = [
        ("h264/main", "h264"),
        ("h264/sub", "h265"),
        ("h265/main", "h265"),
        ("digest/main", "h264"),
        ("udp/main", "h264"),
    ];
    for (stream, codec) in streams {
        let mine = of_stream(&recs, stream);
        assert!(!mine.is_empty(), "nothing recorded for {stream}");
        let secs = seconds(&mine);
        assert!(secs >= 20.0, "{stream}: only {secs} s recorded");
        for r in &mine {
            assert_eq!(r["codec"], codec);
            assert_recording_matches_file(&d.data(), r);
            assert_decodes(&d.data().join(r["path"].as_str().unwrap()));
            // One fragment per 1 s GOP: every fragment starts on a keyframe.
            for f in r["fragments"].as_array().unwrap() {
                assert_eq!(f["keyframes"], 1, "{stream}: {f}");
            }
        }
    }
    // AAC from the camera is kept, in step with the video.
    let aac = of_stream(&recs, "aac/main");
    assert!(seconds(&aac) >= 20.0);
    for r in &aac {
        assert_recording_matches_file(&d.data(), r);
        assert_audio_follows_video(&d.data(), r);
        assert_decodes(&d.data().join(r["path"].as_str().unwrap()));
    }
    for r in of_stream(&recs, "h264/main") {
        assert_eq!(r["has_audio"], false, "no audio where the camera sends none");
    }

    // A 10 s GOP is cut into fragments of at most 4 s.
    let long = of_stream(&recs, "longgop/main");
    assert!(!long.is_empty());
    for r in &long {
        assert_recording_matches_file(&d.data(), r);
        for f in r["fragments"].as_array().unwrap() {
            assert!(f["duration_90k"].as_u64().unwrap() <= 4 * 90_000, "{f}");
        }
    }
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

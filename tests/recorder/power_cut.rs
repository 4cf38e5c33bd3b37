//! kill -9 at random moments, twenty times: the catalog always opens, every cataloged
//! fragment reads back, at most a flush interval is lost, and no unknown file is left. The
//! segments cut are of four kinds: AAC sound (the file clip, twice), G.711 sound and none
//! (the RTSP camera).

use std::time::Duration;

use crate::common::*;

/// A small deterministic PRNG; the seed is printed so a failure can be replayed.
fn next(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn kill_9_at_random_moments_never_corrupts_and_loses_at_most_a_flush_interval() {
    let clip = fixtures().join("h264.mp4");
    let cam = Camera::start();
    let dir = tempfile::tempdir().unwrap();
    let flush_s = 2;
    write_config(
        dir.path(),
        &format!(
            r#"
flush_interval_s = {flush_s}
[retention]
stream_max_bytes = "1 MiB"
total_max_bytes = "4 MiB"
[[cameras]]
name = "a"
main = {{ url = "file://{clip}" }}
[[cameras]]
name = "b"
main = {{ url = "file://{clip}" }}
[[cameras]]
name = "g711"
main = {{ url = "{pcmu}" }}
[[cameras]]
name = "mute"
main = {{ url = "{mute}" }}
"#,
            clip = clip.display(),
            pcmu = cam.url("/h264-pcmu"),
            mute = cam.url("/h264"),
        ),
    );
    let mut seed = wall_us() as u64;
    eprintln!("power-cut seed {seed}");
    let mut deletions = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for cut in 0..20 {
        let mut d = Daemon::start(dir.path());
        d.wait_log("recording to recordings/", 4, Duration::from_secs(20));
        let run_ms = 2_000 + next(&mut seed) % 3_000;
        std::thread::sleep(Duration::from_millis(run_ms));
        let cut_us = wall_us();
        d.kill9();

        let v = d.check();
        assert!(v["problems"].as_array().unwrap().is_empty(), "cut {cut}: {v}");
        // A process kill keeps the page cache, so recovery finds every whole fragment: what
        // is lost is the fragment still in memory (one GOP) plus the queue. The bound a power
        // cut allows is one flush interval on top.
        let lost_us = cut_us - v["wall_end_us"].as_i64().unwrap();
        assert!(lost_us <= (flush_s + 2) * 1_000_000, "cut {cut}: lost {lost_us} µs");
        for r in d.recordings() {
            assert!(!r["open"].as_bool().unwrap(), "recovery closes every recording");
            let path = d.data().join(r["path"].as_str().unwrap());
            let packets = ffprobe_packets(&path);
            assert!(packets[0].key, "{} starts on a keyframe", path.display());
            assert_eq!(packets.len() as u64, r["frames"].as_u64().unwrap(), "{}", path.display());
            // Its sound, when it has some, reads back to the cut too.
            if let Some(codec) = r["audio"].as_str() {
                let sound = ffprobe_stream_packets(&path, "a:0");
                assert!(!sound.is_empty(), "{}: {codec} sound", path.display());
                assert!(sound.windows(2).all(|w| w[1].pts_s > w[0].pts_s), "{}", path.display());
                kinds.insert(codec.to_string());
            } else {
                kinds.insert("none".into());
            }
        }
        deletions += d.log_text().matches("retention deleted").count();
    }
    assert!(deletions > 0, "retention must have run during the cuts");
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["aac", "none", "pcmu"], "segments of every kind were cut");
}

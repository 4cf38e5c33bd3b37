//! kill -9 at random moments, twenty times: the catalog always opens, every cataloged
//! fragment reads back, at most a flush interval is lost, and no unknown file is left.

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
    let dir = tempfile::tempdir().unwrap();
    let flush_s = 2;
    write_config(
        dir.path(),
        &format!(
            r#"
flush_interval_s = {flush_s}
[retention]
stream_max_bytes = "1 MiB"
total_max_bytes = "2 MiB"
[[cameras]]
name = "a"
main = {{ url = "file://{clip}" }}
[[cameras]]
name = "b"
main = {{ url = "file://{clip}" }}
"#,
            clip = clip.display()
        ),
    );
    let mut seed = wall_us() as u64;
    eprintln!("power-cut seed {seed}");
    let mut deletions = 0;
    for cut in 0..20 {
        let mut d = Daemon::start(dir.path());
        d.wait_log("recording to recordings/", 2, Duration::from_secs(20));
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
        }
        deletions += d.log_text().matches("retention deleted").count();
    }
    assert!(deletions > 0, "retention must have run during the cuts");
}

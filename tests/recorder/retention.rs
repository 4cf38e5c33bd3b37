//! Retention: byte caps hold while recording goes on, and a full filesystem frees old
//! footage instead of stopping.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

fn file_camera_config(dir: &Path, stream_max: &str, total_max: &str, cameras: &[&str]) {
    let clip = fixtures().join("h264.mp4");
    let mut body = format!(
        "flush_interval_s = 1\n[retention]\nstream_max_bytes = \"{stream_max}\"\ntotal_max_bytes = \"{total_max}\"\n"
    );
    for c in cameras {
        body.push_str(&format!("[[cameras]]\nname = \"{c}\"\nmain = {{ url = \"file://{}\" }}\n", clip.display()));
    }
    write_config(dir, &body);
}

#[test]
fn byte_caps_hold_per_stream_and_in_total_while_recording_continues() {
    let dir = tempfile::tempdir().unwrap();
    let stream_cap: u64 = 1 << 20;
    let total_cap: u64 = 3 << 19; // 1.5 MiB for two streams: the total cap binds first
    file_camera_config(dir.path(), "1 MiB", "1.5 MiB", &["a", "b"]);
    let mut d = Daemon::start(dir.path());
    let rec = d.data().join("recordings");
    // Retention runs as the catalog writer takes each fragment's report: the files may be
    // ahead of it by what each stream wrote since its last report was taken, a fragment
    // (a 1 s GOP of the 332 kbit/s clip, ~42 KB) and, while the writer commits (an fsync,
    // slow on a loaded machine), the next. Two streams, two fragments each.
    let slack: u64 = 2 * 2 * (42 << 10);
    let start = Instant::now();
    let mut peak_total = 0;
    while start.elapsed() < Duration::from_secs(50) {
        let a = dir_bytes(&rec.join("a"));
        let b = dir_bytes(&rec.join("b"));
        assert!(a <= stream_cap + slack && b <= stream_cap + slack, "per stream: {a} {b}");
        assert!(a + b <= total_cap + slack, "total: {}", a + b);
        peak_total = peak_total.max(a + b);
        std::thread::sleep(Duration::from_millis(500));
    }
    d.stop();
    let log = d.log_text();
    assert!(log.contains("retention deleted"), "retention never ran:\n{log}");
    assert!(peak_total > total_cap * 3 / 4, "the test must reach the cap (peak {peak_total})");
    let recs = d.recordings();
    for s in ["a/main", "b/main"] {
        let mine = of_stream(&recs, s);
        let end = mine.iter().map(|r| r["wall_end_us"].as_i64().unwrap()).max().unwrap();
        assert!(wall_us() - end < 3_000_000, "{s} kept recording to the end");
    }
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

/// Mounts a small tmpfs for the test's life (the test runs as root, as CI does).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "mounting a tmpfs needs root: {}", String::from_utf8_lossy(&out.stderr));
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_filesystem_deletes_old_footage_and_recording_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let _fs = Tmpfs::mount(&dir.path().join("data"), "8m");
    file_camera_config(dir.path(), "1 GiB", "1 GiB", &["a"]);
    let ballast = dir.path().join("data/ballast");
    // Leave ~1.5 MiB: the catalog and about 30 s of video.
    fill(&ballast, (8 << 20) - (3 << 19));
    let mut d = Daemon::start(dir.path());
    d.wait_log("recording to recordings/a/main", 1, Duration::from_secs(20));
    // Let retention's reserve deletions happen, then fill the disk to the last byte so a
    // write meets ENOSPC itself.
    d.wait_log("retention deleted", 1, Duration::from_secs(60));
    fill(&ballast, 8 << 20);
    d.wait_log("disk full while writing", 1, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(6));
    assert!(d.is_running(), "keeppeek stopped on a full disk:\n{}", d.log_text());
    d.stop();
    let recs = d.recordings();
    let end = recs.iter().map(|r| r["wall_end_us"].as_i64().unwrap()).max();
    let end = end.unwrap_or_else(|| panic!("no recording left at all; the daemon said:\n{}", d.log_text()));
    assert!(wall_us() - end < 4_000_000, "recording went on after the disk filled: {}", d.log_text());
    // A catalog that met the full disk itself was opened again, not left refusing.
    let log = d.log_text();
    if log.contains("I/O error") {
        assert!(log.contains("catalog opened again after an I/O error"), "{log}");
    }
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

//! Export: a time range spanning two runs (with a gap) becomes one MP4 that plays as one
//! timeline, and any byte range of it reads the same as the whole.

use std::time::Duration;

use keeppeek::catalog::Catalog;
use keeppeek::export::Export;

use crate::common::*;

#[test]
fn a_range_over_two_runs_exports_as_one_playable_mp4_with_byte_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let clip = fixtures().join("h264.mp4");
    write_config(
        dir.path(),
        &format!(
            "flush_interval_s = 2\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [[cameras]]\nname = \"a\"\nmain = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    );
    let from_s = wall_us() as f64 / 1e6;
    for _run in 0..2 {
        let mut d = Daemon::start(dir.path());
        d.wait_log("recording to", 1, Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(6));
        d.stop();
        std::thread::sleep(Duration::from_secs(2));
    }
    let to_s = wall_us() as f64 / 1e6;
    let d = Daemon::start_stopped(dir.path());
    let recs = d.recordings();
    assert_eq!(recs.len(), 2, "two runs");
    let recorded_s = seconds(&recs.iter().collect::<Vec<_>>());

    let out = dir.path().join("export.mp4");
    let printed = succeed(
        keeppeek()
            .arg("export")
            .arg(&d.config)
            .args(["--stream", "a/main", "--from", &from_s.to_string(), "--to", &to_s.to_string(), "--out"])
            .arg(&out),
    );
    assert!(String::from_utf8_lossy(&printed).contains("bytes"));
    let video = ffprobe_packets(&out);
    assert!(video[0].key);
    for w in video.windows(2) {
        assert!(w[1].pts_s > w[0].pts_s, "one increasing timeline: {w:?}");
    }
    let last = video.last().unwrap();
    let exported_s = last.pts_s + last.duration_s - video[0].pts_s;
    assert!((exported_s - recorded_s).abs() <= 1.0 / 15.0 + 1e-3, "{exported_s} s exported of {recorded_s} s recorded");
    assert_eq!(video.len() as u64, recs.iter().map(|r| r["frames"].as_u64().unwrap()).sum::<u64>());
    let audio = ffprobe_stream_packets(&out, "a:0");
    assert!(audio.windows(2).all(|w| w[1].pts_s > w[0].pts_s) && audio.len() > 200);
    assert_decodes(&out);

    // A part of a run: its duration is the request's within one GOP (1 s here).
    let start_s = recs[0]["wall_start_us"].as_i64().unwrap() as f64 / 1e6;
    let part = dir.path().join("part.mp4");
    succeed(
        keeppeek()
            .arg("export")
            .arg(&d.config)
            .args(["--stream", "a/main", "--from", &(start_s + 1.4).to_string(), "--to", &(start_s + 4.4).to_string()])
            .arg("--out")
            .arg(&part),
    );
    let p = ffprobe_packets(&part);
    let part_s = p.last().unwrap().pts_s + p.last().unwrap().duration_s - p[0].pts_s;
    assert!((part_s - 3.0).abs() <= 1.0, "3 s asked, {part_s} s exported");
    assert!(p[0].key);

    // Any byte range reads the same as the whole file, in constant-size pieces.
    let whole = std::fs::read(&out).unwrap();
    let catalog = Catalog::open(&d.data().join("catalog.redb")).unwrap();
    let key = keeppeek::base::StreamKey::parse("a/main").unwrap();
    let ex = Export::plan(&catalog, &d.data(), &key, (from_s * 1e6) as i64, (to_s * 1e6) as i64).unwrap();
    assert_eq!(ex.len_bytes, whole.len() as u64);
    assert!(ex.file_name(&key).starts_with("a-main-") && ex.file_name(&key).ends_with("Z.mp4"));
    for (offset, len) in [(0usize, 10usize), (5, 7000), (whole.len() / 3, 100_000), (whole.len() - 3, 10)] {
        let mut got = Vec::new();
        let mut at = offset as u64;
        while got.len() < len {
            let mut buf = vec![0u8; 4096.min(len - got.len())];
            let n = ex.read_at(at, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            at += n as u64;
        }
        let end = (offset + len).min(whole.len());
        assert_eq!(got, whole[offset..end], "range {offset}+{len}");
    }
    // The HTTP body's reads: a whole chunk across fragment boundaries, then the rest.
    let mut chunk = vec![0u8; keeppeek::limits::EXPORT_CHUNK_BYTES];
    let mut at = 0;
    loop {
        let n = ex.read_full_at(at as u64, &mut chunk).unwrap();
        if n == 0 {
            break;
        }
        assert!(n == chunk.len() || at + n == whole.len(), "a short chunk only at the end");
        assert_eq!(chunk[..n], whole[at..at + n]);
        at += n;
    }
    assert_eq!(at, whole.len());
    assert!(whole.len() > chunk.len(), "the export spans several chunks");
    drop(catalog); // one process at a time may open the catalog
    // A range with nothing in it is a clear error.
    let empty = keeppeek()
        .arg("export")
        .arg(&d.config)
        .args(["--stream", "a/main", "--from", "1", "--to", "2"])
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&empty.stderr);
    assert!(!empty.status.success() && why.contains("nothing recorded"), "{why}");
}

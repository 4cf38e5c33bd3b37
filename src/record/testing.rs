//! Recordings made without a camera, for unit tests that read them back.

use std::path::Path;

use crate::catalog::{Batch, Catalog, FragmentRow, Keyframe, RecordingRow};
use crate::limits;
use crate::media::avc;
use crate::media::fmp4::{SampleEntry, TrackRun, fragment_header_buffer, write_fragment_header, write_init_segment};

/// An init segment plus `n` one-second fragments of 15 frames of 40 bytes (a keyframe first), the first
/// starting at `wall0_us`; returns the bytes and each fragment's (start, end) byte.
pub fn segment(n: u32, wall0_us: i64) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut init = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
    let len = write_init_segment(&mut init, &avc::test_sample_entry(), 640, 360, None).expect("init segment");
    let mut out = init[..len].to_vec();
    let mut bounds = Vec::new();
    let mut head = fragment_header_buffer();
    for i in 0..n {
        let samples: Vec<_> = (0..15).map(|k| SampleEntry { duration: 6000, size_bytes: 40, is_key: k == 0 }).collect();
        let start = out.len() as u64;
        let video = TrackRun { base_decode: u64::from(i) * 90_000, samples: &samples };
        let wall = wall0_us + i64::from(i) * 1_000_000;
        let h = write_fragment_header(&mut head[..], i + 1, wall, video, None).expect("fragment header");
        out.extend_from_slice(&head[..h]);
        for k in 0..15 {
            // One NAL unit a sample, 4-byte length-prefixed: an IDR slice first, then others.
            out.extend_from_slice(&36u32.to_be_bytes());
            out.push(if k == 0 { 0x65 } else { 0x41 });
            out.extend(std::iter::repeat_n(7u8, 35));
        }
        bounds.push((start, out.len() as u64));
    }
    (out, bounds)
}

/// A closed recording of `stream` with `n` one-second fragments from `wall0_us`, its file
/// under `data_dir` and its rows (fragments, keyframes, recording) in `catalog`.
pub fn recording(catalog: &Catalog, data_dir: &Path, stream: &str, wall0_us: i64, n: u32) -> u64 {
    let key = crate::base::StreamKey::parse(stream).expect("a camera/kind name");
    let stream_id = catalog.stream_id(&key).expect("stream id");
    let row = RecordingRow { stream_id, ..RecordingRow::for_test("") };
    let (id, mut row) = catalog.begin_recording(row, |id| format!("recordings/{stream}/{id}.mp4")).expect("begin");
    let (bytes, bounds) = segment(n, wall0_us);
    let path = data_dir.join(&row.path);
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
    std::fs::write(&path, &bytes).expect("write the recording");
    let mut batch = Batch::default();
    for (i, (start, end)) in bounds.iter().enumerate() {
        let wall = wall0_us + i as i64 * 1_000_000;
        let f = FragmentRow {
            wall_start_us: wall,
            wall_end_us: wall + 1_000_000,
            media_start_90k: i as u64 * 90_000,
            duration_90k: 90_000,
            start_byte: *start,
            end_byte: *end,
            frames: 15,
            keyframes: 1,
        };
        batch.fragments.push((id, i as u32 + 1, f));
        batch.keyframes.push((stream_id, id, Keyframe { wall_us: wall, fragment_start_byte: *start }));
    }
    row.init_bytes = bounds.first().map_or(bytes.len() as u64, |b| b.0);
    row.wall_start_us = wall0_us;
    row.wall_end_us = wall0_us + i64::from(n) * 1_000_000;
    row.media_duration_90k = u64::from(n) * 90_000;
    row.bytes = bytes.len() as u64;
    row.frames = u64::from(n) * 15;
    row.fragments = n;
    row.open = false;
    batch.recordings.push((id, row));
    catalog.commit(&batch).expect("commit");
    id
}

//! Held footage against retention, on the simulated clock: a small stream cap, bursts of
//! events every minute, and a day and a half of recording in seconds of test time.
//!
//! Two cameras record continuously (a frame every few simulated seconds); only `cam0` has
//! events. The flusher runs its retention on the same clock with the same [`Holds`] the
//! event intake would fill. Along the way: ordinary footage goes first while a burst's
//! footage stays; a second, longer burst fills the held share and the oldest holds lapse;
//! a write waiting for space still gets it; holds end after their days and their footage
//! goes. At the end `check` finds nothing wrong.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use super::flusher::{Flusher, ToFlusher};
use super::fragmenter::SegmentBounds;
use super::holds::{HoldState, Holds};
use super::queue::StreamMsg;
use super::soak::{drain, keyframe_data, main_recorder};
use super::stream::StreamRecorder;
use super::{HoldPolicy, verify};
use crate::catalog::{Catalog, RecordingRow};
use crate::clock::{BUILD_WALL_US, Clocks, SimulatedClocks};
use crate::config::Retention;
use crate::limits;
use crate::media::{Frame, avc};
use crate::preroll::{Admission, Mode, Trigger};

/// A frame this often, of this size: 120 KiB a minute either way. Under qemu-user, where
/// each step costs ten times as much, fewer and larger frames, every 10 s. Never more than
/// the fragmenter's largest gap between frames: at 15 s every frame was a discontinuity, so
/// its own recording of one frame, an event's 15 s window held one such recording, burst B
/// held 1.9 MB of its 3 MiB share, and burst A's holds never lapsed.
const FRAME_EVERY_S: i64 = if cfg!(target_arch = "aarch64") { 10 } else { 5 };
const _: () = assert!(FRAME_EVERY_S * 90_000 <= super::fragmenter::FRAME_GAP_MAX_90K);
const FRAME_BYTES: usize = 2048 * FRAME_EVERY_S as usize;
/// About 51 minutes of a stream; holds may keep half of it.
const STREAM_MAX_BYTES: u64 = 6 << 20;
const HELD_MAX_PERCENT: u8 = 50;
/// Segments of about two minutes.
const SEGMENT_MAX_BYTES: u64 = 256 << 10;
const HOUR: i64 = 3600;
/// Burst A: an event a minute for ten minutes from the first hour.
const BURST_A: (i64, i64) = (HOUR, HOUR + 600);
/// Burst B: an event a minute for an hour from the thirteenth: more than the held share.
const BURST_B: (i64, i64) = (13 * HOUR, 14 * HOUR);
const END_S: i64 = 39 * HOUR;

/// Whether a recording of `stream_id` covers wall time `at_us`.
fn covered(rows: &[(u64, RecordingRow)], stream_id: u32, at_us: i64) -> bool {
    rows.iter().any(|(_, r)| r.stream_id == stream_id && r.wall_start_us <= at_us && at_us <= r.wall_end_us)
}

#[test]
fn held_footage_outlives_ordinary_retention_until_its_share_is_full_or_its_days_are_over() {
    let dir = tempfile::tempdir_in(super::soak::scratch()).unwrap();
    let data_dir = dir.path().to_path_buf();
    let catalog = Arc::new(Catalog::open(&data_dir.join("catalog.redb")).unwrap());
    let sim = SimulatedClocks::new(BUILD_WALL_US + 86_400_000_000);
    let caps =
        Retention { stream_max_bytes: STREAM_MAX_BYTES, total_max_bytes: u64::MAX, held_max_percent: HELD_MAX_PERCENT };
    let bounds = SegmentBounds { max_duration_90k: 600 * 90_000, max_bytes: SEGMENT_MAX_BYTES };
    let (tx, rx) = sync_channel(limits::CATALOG_QUEUE_COMMANDS);
    let holds = Arc::new(Holds::default());
    let interval = Duration::from_secs(60);
    let mut flusher =
        Flusher::new(catalog.clone(), data_dir.clone(), interval, caps, sim.shared(), holds.clone()).unwrap();
    flusher.begin();
    let stats = flusher.stats();
    let mut streams: Vec<(u32, StreamRecorder, Admission, i64)> = (0..2)
        .map(|i| {
            let (stream_id, recorder) = main_recorder(&catalog, &data_dir, &format!("cam{i}"), &tx, bounds);
            let admission = Admission::new(Mode::Continuous, None, Arc::new(Trigger::default()));
            (stream_id, recorder, admission, 0)
        })
        .collect();
    let cam0 = streams[0].0;
    let policy = HoldPolicy { before_ms: 5_000, after_ms: 10_000, keep_days: 1 };
    let data = keyframe_data(FRAME_BYTES);
    let params = Arc::new(avc::test_params());
    // Wall times of the events of each burst.
    let (mut burst_a, mut burst_b) = (Vec::new(), Vec::new());
    let mut peak_held_bytes = 0;
    for step in 1..=END_S / FRAME_EVERY_S {
        sim.advance(Duration::from_secs(FRAME_EVERY_S as u64));
        let t_s = step * FRAME_EVERY_S;
        let (now_us, wall_us) = (sim.mono_us(), sim.wall_us());
        let in_burst = |(from, to): (i64, i64)| (from..to).contains(&t_s) && t_s % 60 == 0;
        if in_burst(BURST_A) || in_burst(BURST_B) {
            holds.add("cam0", policy.hold(wall_us, None, wall_us).expect("cam0 keeps event footage"));
            if in_burst(BURST_A) { &mut burst_a } else { &mut burst_b }.push(wall_us);
        }
        for (_, recorder, admission, pts_90k) in &mut streams {
            let frame = Frame {
                pts_90k: *pts_90k,
                received_mono_us: now_us,
                received_wall_us: wall_us,
                is_key: true,
                data: data.clone(),
                params: params.clone(),
                audio: None,
            };
            *pts_90k += FRAME_EVERY_S * 90_000;
            recorder.take(StreamMsg::Frame { frame, after_gap: *pts_90k == FRAME_EVERY_S * 90_000 }, admission);
            recorder.write_frames();
            drain(&rx, &mut flusher);
        }
        flusher.flush_if_due();
        peak_held_bytes = peak_held_bytes.max(stats.held_bytes.load(Ordering::Relaxed));

        if t_s % HOUR != 0 {
            continue;
        }
        let rows = catalog.recordings().unwrap();
        let mut per_stream = BTreeMap::<u32, u64>::new();
        for (_, r) in &rows {
            *per_stream.entry(r.stream_id).or_default() += r.bytes;
        }
        for (&id, &b) in &per_stream {
            assert!(b <= STREAM_MAX_BYTES + 2 * SEGMENT_MAX_BYTES, "stream {id}: {b} bytes at hour {}", t_s / HOUR);
        }
        let start_us = sim.wall_us() - t_s * 1_000_000;
        let hour = t_s / HOUR;
        if (2..=12).contains(&hour) {
            // Ordinary retention has long passed burst A: the footage before it is gone,
            // the burst's stays, every event of it.
            assert!(!covered(&rows, cam0, start_us + 1_800_000_000), "unheld footage went first (hour {hour})");
            for &e in &burst_a {
                assert!(covered(&rows, cam0, e), "burst A's event at {e} kept (hour {hour})");
            }
            assert!(!covered(&rows, streams[1].0, start_us + HOUR * 1_000_000 + 300_000_000), "cam1 holds nothing");
            assert!(matches!(holds.state("cam0", burst_a[0], sim.wall_us()), HoldState::Held { .. }));
        }
        if hour == 15 {
            // Burst B wanted more than the held share: the newest holds fill it, the oldest
            // (burst A and B's beginning) lapsed, and their footage went like any other.
            let now = sim.wall_us();
            assert_eq!(holds.state("cam0", burst_a[0], now), HoldState::Lapsed);
            assert_eq!(holds.state("cam0", burst_b[0], now), HoldState::Lapsed);
            assert!(matches!(holds.state("cam0", *burst_b.last().unwrap(), now), HoldState::Held { .. }));
            assert!(!covered(&rows, cam0, burst_a[0]), "a lapsed hold's footage goes");
            assert!(covered(&rows, cam0, *burst_b.last().unwrap()), "the newest held footage stays");
            // A write waiting for space gets it, from unheld footage first.
            let (reply, answer) = sync_channel(1);
            flusher.handle(ToFlusher::NeedSpace { reply });
            assert!(answer.recv().unwrap() > 0, "a full disk frees space even with holds");
            let rows = catalog.recordings().unwrap();
            assert!(covered(&rows, cam0, *burst_b.last().unwrap()), "and not the held footage while unheld is left");
        }
    }
    let share = STREAM_MAX_BYTES / 100 * u64::from(HELD_MAX_PERCENT);
    assert!(peak_held_bytes <= share, "held {peak_held_bytes} bytes, share {share}");
    assert!(peak_held_bytes >= share / 2, "the held share was reached ({peak_held_bytes} of {share})");
    // A day after burst B, its holds ended and its footage went; nothing is held.
    let rows = catalog.recordings().unwrap();
    assert!(!covered(&rows, cam0, *burst_b.last().unwrap()), "footage of ended holds goes");
    assert_eq!(stats.held_recordings.load(Ordering::Relaxed), 0);
    assert!(holds.is_empty());
    for (_, recorder, _, _) in &mut streams {
        recorder.finish();
    }
    drop(streams);
    drop(tx);
    drain(&rx, &mut flusher);
    sim.advance(interval);
    flusher.flush_if_due();
    let v = verify::check(&catalog, &data_dir, sim.wall_us()).unwrap();
    assert!(v.problems.is_empty(), "{:#?}", v.problems);
    assert!(v.recordings > 0, "{v:?}");
}

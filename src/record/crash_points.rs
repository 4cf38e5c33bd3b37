//! Every crash point of a minute of recording, in the manner of SQLite's and redb's crash
//! tests: two cameras recorded on the simulated clock through the file layer's journal
//! (which keeps what was written apart from what was synced), an event on each through the
//! real intake, and a stream cap small enough that retention deletes all along. Then, for
//! every sync and rename in that run, the disk a power cut just after it would leave
//! (nothing kept that was not durable; every name as written with only synced bytes; and
//! the same with the first half of each file's later writes, torn) is laid out and started from as the box would: recovery, then `check`.
//!
//! Each must be clean; the video lost must be at most a flush interval (and the fragment
//! being written); an acknowledged event must be there, and once its early flush was
//! durable, its keyframe and the footage from its pre-roll to its moment. The early flush
//! must come long before the interval would have.
//!
//! Everything runs on this one thread, in order (the event intake's blocking task is waited
//! for), so a failure replays the same way.

use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use bytes::Bytes;

use super::flusher::Flusher;
use super::queue::StreamMsg;
use super::soak::{drain, frame_data, main_recorder, scratch};
use super::stream::StreamRecorder;
use super::{HoldPolicy, RecordingWatch, admission_for, recovery, segment_bounds, verify};
use crate::base::StreamKey;
use crate::base::fs::journal::{Image, Journal, Model};
use crate::cameras::{Cameras, RunningStream};
use crate::catalog::{Catalog, RecordingRow};
use crate::clock::{BUILD_WALL_US, Clocks, SimulatedClocks};
use crate::config::{Config, RecordMode};
use crate::events::{Events, keyframe};
use crate::limits;
use crate::media::{Frame, avc};
use crate::preroll::{Admission, HistoryPool};

const FPS: i64 = 15;
const FRAME_US: i64 = 1_000_000 / FPS;
/// One keyframe a second: a fragment a second.
const GOP_FRAMES: i64 = FPS;
const SECONDS: i64 = 60;
const FLUSH_INTERVAL_S: i64 = 10;
/// ~27 KB/s a stream: a 1 MiB stream cap is passed within the minute, and segments (an
/// eighth of it) close every few seconds.
const KEY_BYTES: usize = 6_000;
const FRAME_BYTES: usize = 1_500;
const STREAM_MAX_BYTES: u64 = 1 << 20;
const ROLL_MS: u32 = 3_000;
/// The events: the continuous camera's early, so retention later passes its footage by; the
/// event camera's later. Each well before the next interval flush.
const EVENTS: [(&str, i64); 2] = [("cam0", 12_400_000), ("cam1", 21_700_000)];

/// Whether `stream_id`'s recordings cover `from_us..=to_us` without a gap longer than a
/// frame.
fn covered(rows: &[(u64, RecordingRow)], stream_id: u32, from_us: i64, to_us: i64) -> bool {
    let mut rows: Vec<_> = rows.iter().map(|(_, r)| r).filter(|r| r.stream_id == stream_id).collect();
    rows.sort_by_key(|r| r.wall_start_us);
    let mut reached = from_us;
    for r in rows {
        if r.wall_start_us <= reached + FRAME_US && r.wall_end_us > reached {
            reached = r.wall_end_us;
        }
    }
    reached >= to_us
}

/// An event posted during the run, and where in the journal it stood.
struct Posted {
    camera: &'static str,
    id: u64,
    at_us: i64,
    /// Journal length when its answer came (it is durable from there on).
    answered: usize,
    /// Journal length once its keyframe resolved in the running catalog, and when.
    footage: Option<(usize, i64)>,
}

#[test]
fn every_crash_point_of_a_minute_recovers_clean_within_a_flush_interval_with_event_footage_kept() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let journal = Journal::watch(&data_dir);
    let sim = SimulatedClocks::new(BUILD_WALL_US + 86_400_000_000);
    let start_us = sim.wall_us();

    // The box starts: the catalog opened, recovery, the flusher, the cameras, the intake.
    let mut config = Config::demo(data_dir.clone(), "127.0.0.1:8080".parse().unwrap());
    config.retention.stream_max_bytes = STREAM_MAX_BYTES;
    config.retention.total_max_bytes = 16 * STREAM_MAX_BYTES;
    config.flush_interval_s = FLUSH_INTERVAL_S as u64;
    let template = config.cameras[0].clone();
    config.cameras = [("cam0", RecordMode::Continuous), ("cam1", RecordMode::Events)]
        .into_iter()
        .map(|(name, record)| crate::config::Camera {
            name: name.into(),
            record,
            pre_roll_ms: ROLL_MS,
            post_roll_ms: ROLL_MS,
            keep_event_footage_days: 14,
            ..template.clone()
        })
        .collect();
    let catalog = Arc::new(Catalog::open(&data_dir.join("catalog.redb")).unwrap());
    recovery::recover(&catalog, &data_dir, start_us).unwrap();
    crate::events::recover(&catalog, &data_dir).unwrap();
    let bounds = segment_bounds(&config, 2, None);
    let (tx, rx) = sync_channel(limits::CATALOG_QUEUE_COMMANDS);
    let interval = Duration::from_secs(FLUSH_INTERVAL_S as u64);
    let holds: Arc<super::holds::Holds> = Arc::default();
    let mut flusher =
        Flusher::new(catalog.clone(), data_dir.clone(), interval, config.retention, sim.shared(), holds.clone())
            .unwrap();
    flusher.begin();
    let pool = Arc::new(HistoryPool::new(4 << 20));
    let cameras = Arc::new(Cameras::default());
    let mut streams: Vec<(u32, StreamRecorder, Admission)> = config
        .cameras
        .iter()
        .map(|camera| {
            let (stream_id, recorder) = main_recorder(&catalog, &data_dir, &camera.name, &tx, bounds);
            let admission = admission_for(camera, camera.record, 1 << 20, &pool);
            let events_mode = camera.record == RecordMode::Events;
            let watch = RecordingWatch {
                mode: camera.record,
                pre_roll_ms: if events_mode { camera.pre_roll_ms } else { 0 },
                post_roll_ms: if events_mode { camera.post_roll_ms } else { 0 },
                hold: HoldPolicy::of(camera),
                queue: Arc::default(),
                stats: recorder.stats.clone(),
                trigger: admission.trigger().clone(),
                admission: admission.stats.clone(),
                history: admission.history().map(|h| h.stats.clone()),
            };
            cameras.add([RunningStream {
                key: StreamKey::new(&camera.name, crate::base::StreamKind::Main),
                state: Arc::default(),
                recording: Some(watch),
                live: Arc::new(crate::live::Fanout::new(crate::live::gop_pool())),
            }]);
            (stream_id, recorder, admission)
        })
        .collect();
    let events = Events::new(catalog.clone(), data_dir.clone(), cameras, None, u64::MAX, sim.shared(), holds);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let jpeg = Bytes::from(crate::events::jpeg::tests::tiny(64, 48));

    // A minute of recording. `marks`: the journal's length at the end of each step, and
    // the wall time then (an operation happened no later than its step's time).
    let params = Arc::new(avc::test_params());
    let mut marks = vec![(journal.len(), start_us)];
    let mut posted: Vec<Posted> = Vec::new();
    for k in 0..SECONDS * FPS {
        sim.advance(Duration::from_micros(FRAME_US as u64));
        let (now_us, wall_us) = (sim.mono_us(), sim.wall_us());
        for &(camera, at) in &EVENTS {
            if (wall_us - start_us) / FRAME_US == at / FRAME_US {
                let envelope = format!(r#"{{"camera":"{camera}","time_us":{wall_us},"labels":["person"]}}"#);
                let accepted = rt.block_on(events.publish("token:1", envelope.as_bytes(), Some(jpeg.clone()))).unwrap();
                posted.push(Posted { camera, id: accepted.id, at_us: wall_us, answered: journal.len(), footage: None });
            }
        }
        for (_, recorder, admission) in &mut streams {
            let frame = Frame {
                pts_90k: k * 90_000 / FPS,
                received_mono_us: now_us,
                received_wall_us: wall_us,
                is_key: k % GOP_FRAMES == 0,
                data: frame_data(if k % GOP_FRAMES == 0 { KEY_BYTES } else { FRAME_BYTES }, k % GOP_FRAMES == 0),
                params: params.clone(),
                audio: None,
            };
            recorder.take(StreamMsg::Frame { frame, after_gap: k == 0 }, admission);
            recorder.write_frames();
            drain(&rx, &mut flusher);
        }
        flusher.flush_if_due();
        marks.push((journal.len(), wall_us));
        for p in posted.iter_mut().filter(|p| p.footage.is_none()) {
            if keyframe::find(&catalog, p.camera, p.at_us).unwrap().is_some() {
                p.footage = Some((journal.len(), wall_us));
            }
        }
    }
    let end_us = sim.wall_us();

    // The run itself: its events' footage made durable early, retention passing the
    // continuous camera's older footage but not what its event holds.
    assert_eq!(posted.len(), EVENTS.len());
    for p in &posted {
        let (_, durable_us) = p.footage.unwrap_or_else(|| panic!("{}'s event footage never durable", p.camera));
        assert!(
            durable_us - p.at_us <= 2 * FRAME_US,
            "{}'s event footage durable {} ms after it: no early flush",
            p.camera,
            (durable_us - p.at_us) / 1000
        );
    }
    let stats = flusher.stats();
    assert!(stats.recordings_deleted.load(std::sync::atomic::Ordering::Relaxed) > 2, "retention deleted");
    let rows = catalog.recordings().unwrap();
    let cam0 = streams[0].0;
    assert!(!covered(&rows, cam0, start_us + 2_000_000, start_us + 3_000_000), "old footage went");
    assert!(covered(&rows, cam0, posted[0].at_us - 2_000_000, posted[0].at_us), "held footage stayed");

    // Every crash point, each laid out both ways, started from as the box would.
    let ops = journal.ops();
    drop(streams);
    drop(flusher);
    let mut model = Model::default();
    let (mut points, mut lost_us) = (0, Vec::new());
    let mut mark = 0;
    for (i, op) in ops.iter().enumerate() {
        model.apply(op);
        if !op.is_boundary() {
            continue;
        }
        let done = i + 1;
        while marks[mark].0 < done {
            mark += 1;
        }
        let cut_us = marks[mark].1;
        for image in Image::ALL {
            let at = tempfile::tempdir_in(scratch()).unwrap();
            let here =
                format!("after op {done} of {} ({op:?}) at {} ms, {image:?}", ops.len(), (cut_us - start_us) / 1000);
            let here = here.chars().take(200).collect::<String>();
            model.materialize(image, at.path()).unwrap();
            let catalog = Catalog::open(&at.path().join("catalog.redb")).unwrap_or_else(|e| panic!("{here}: {e}"));
            recovery::recover(&catalog, at.path(), cut_us).unwrap_or_else(|e| panic!("{here}: {e}"));
            crate::events::recover(&catalog, at.path()).unwrap_or_else(|e| panic!("{here}: {e}"));
            let v = verify::check(&catalog, at.path(), cut_us).unwrap_or_else(|e| panic!("{here}: {e}"));
            assert!(v.problems.is_empty(), "{here}: {:#?}", v.problems);

            let rows = catalog.recordings().unwrap();
            let kept_us = rows.iter().filter(|(_, r)| r.stream_id == cam0).map(|(_, r)| r.wall_end_us).max();
            let lost = cut_us - kept_us.unwrap_or(start_us).max(start_us);
            assert!(
                lost <= FLUSH_INTERVAL_S * 1_000_000 + GOP_FRAMES * FRAME_US + FRAME_US,
                "{here}: {} ms lost",
                lost / 1000
            );
            lost_us.push(lost);
            for p in posted.iter().filter(|p| p.answered <= done) {
                let stored = catalog.event(p.id).unwrap();
                assert!(stored.is_some(), "{here}: {}'s acknowledged event is gone", p.camera);
                let Some((footage_at, _)) = p.footage.filter(|&(n, _)| n <= done) else { continue };
                let found = keyframe::find(&catalog, p.camera, p.at_us).unwrap();
                let (row, kf) = found.unwrap_or_else(|| {
                    panic!("{here}: {}'s event footage (durable from op {footage_at}) is gone", p.camera)
                });
                assert!(
                    kf.wall_us <= p.at_us && p.at_us - kf.wall_us <= GOP_FRAMES * FRAME_US,
                    "{here}: keyframe {kf:?}"
                );
                let from_us = p.at_us - i64::from(ROLL_MS) * 1000;
                assert!(
                    covered(&rows, row.stream_id, from_us, p.at_us),
                    "{here}: {}'s pre-roll is not whole",
                    p.camera
                );
            }
            points += 1;
        }
    }
    lost_us.sort_unstable();
    let boundaries = ops.iter().filter(|o| o.is_boundary()).count();
    assert_eq!(points, Image::ALL.len() * boundaries);
    assert!(boundaries > 50, "only {boundaries} crash points");
    println!(
        "crash points: {boundaries} syncs and renames in {} s of two streams ({} operations), three images each; \
         video lost per cut: p50 {} ms, max {} ms",
        (end_us - start_us) / 1_000_000,
        ops.len(),
        lost_us[lost_us.len() / 2] / 1000,
        lost_us[lost_us.len() - 1] / 1000
    );
}

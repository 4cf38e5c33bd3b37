//! Pre-roll and events benchmark, each result beside its baseline or reference in one run:
//!
//! 1. Admission cost per frame on the recorder thread, p50/p95, for 1 and 127 cameras,
//!    1080p and 2160p frame sizes, H.264 and H.265 (H.265 frames ~60 % of H.264's), GOPs of
//!    1 s and 10 s, at 25 fps: baseline (the frame straight into the fragmenter, as before
//!    pre-roll existed), disabled (through admission with no history: a continuous stream),
//!    enabled (a 5 s pre-roll history kept while an event recording runs: history and
//!    fragmenter both), and idle (the history alone, between events). Heap allocations per
//!    frame counted by a counting allocator in steady state. Reference: ~0.4 µs p95
//!    baseline, +0 disabled, ≤ 5 % enabled; goal: disabled adds nothing measurable, enabled
//!    ≤ 5 % and ≤ 0.2 µs p95 over baseline, no allocation per frame added.
//! 2. Event publication with a 4K JPEG (~420 KB), in process: through the durable commit
//!    (the intake's answer) and through the complete live fanout (the notice at every one of
//!    8 subscribed WebRTC sessions, full `str0m` peers on loopback); baseline: the same bytes
//!    written and fsynced to a file. Reference p95 34.7 ms and 66.8 ms; goal half of each.
//! 3. Event keyframe lookup over a catalog of ≥ 1M fragment and keyframe rows, 10,000
//!    events: resolve-only (event → keyframe place, catalog alone) and resolve+read (the
//!    one-frame MP4 from the file), at concurrency 1, 8 and 32; throughput and latency
//!    percentiles; every lookup checked against the model the catalog was built from.
//! 4. An event's footage made durable: a real recorder and flusher (flush interval 10 s, 2 s
//!    in smoke) recording a 4 Mbit/s stream to files, events published through the intake,
//!    close together with a 1 s post-roll, then isolated with a post-roll as long as the
//!    interval (the defaults): time from each event's answer until the catalog resolves its
//!    keyframe (p50/p95), and for isolated events from the post-roll's end until it is
//!    durable; baseline: a moment with no event, until the interval's flush covers it. And
//!    the extra commits and bytes written per event (recording and catalog, the event's own
//!    commit aside) against a quiet spell of the same length, beside one fragment header and
//!    one interval commit. Goal: p95 ≤ 1 s; at most one fragment header and one catalog
//!    commit per event.
//!
//! Reports: `target/bench/events.json`, `target/bench/events.md`.
//! `cargo bench --bench events`             the full run
//! `cargo bench --bench events -- --smoke`  small sizes, short windows (CI)

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keeppeek::base::{StreamKey, StreamKind};
use keeppeek::cameras::{Cameras, RunningStream};
use keeppeek::catalog::events::EventRecord;
use keeppeek::catalog::{Batch, Catalog, FragmentRow, Keyframe, RecordingRow};
use keeppeek::events::Events;
use keeppeek::events::keyframe;
use keeppeek::live::Fanout;
use keeppeek::media::{Frame, avc, fmp4};
use keeppeek::preroll::{Admission, Caps, History, HistoryPool, Mode, Out, Trigger};
use keeppeek::record::fragmenter::{Event as RecordEvent, Fragmenter, SegmentBounds};
use keeppeek::webrtc::{Engine, Owner, Streams};
use prost::Message;
use serde_json::{Value, json};

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/viewer.rs"]
mod viewer;
use viewer::{Farm, Viewer};

/// Counts heap allocations, to show admission makes none per frame.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn percentiles(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    json!({ "n": v.len(), "p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": at(1.0) })
}

// ---- part 1: admission ----

/// A camera's frames: sizes by resolution and codec, a keyframe every `gop` frames.
struct Shape {
    name: String,
    key_bytes: usize,
    delta_bytes: usize,
    gop: i64,
}

fn shapes() -> Vec<Shape> {
    let mut out = Vec::new();
    for (res, key, delta) in [("1080p", 200_000, 20_000), ("2160p", 600_000, 60_000)] {
        for (codec, share) in [("h264", 1.0), ("h265", 0.6)] {
            for gop_s in [1, 10] {
                out.push(Shape {
                    name: format!("{res} {codec} GOP {gop_s} s"),
                    key_bytes: (key as f64 * share) as usize,
                    delta_bytes: (delta as f64 * share) as usize,
                    gop: 25 * gop_s,
                });
            }
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Baseline,
    Disabled,
    Enabled,
    Idle,
}

/// Per-frame cost of one variant: (p50/p95 ns per frame, allocations per frame).
fn admission_run(shape: &Shape, cameras: usize, variant: Variant, seconds: i64) -> (Value, f64) {
    // Frame data shared by reference, as the ingest's `Bytes` are.
    let key = Bytes::from(vec![7u8; shape.key_bytes]);
    let delta = Bytes::from(vec![7u8; shape.delta_bytes]);
    let params = Arc::new(bench_params());
    let pool = Arc::new(HistoryPool::new(keeppeek::limits::PREROLL_TOTAL_MAX_BYTES));
    let share = keeppeek::limits::PREROLL_STREAM_MAX_BYTES.min(keeppeek::limits::PREROLL_TOTAL_MAX_BYTES / cameras);
    let mut admissions: Vec<Admission> = (0..cameras)
        .map(|_| {
            let history = || Some(History::new(Caps::for_pre_roll(5_000, share), pool.clone()));
            let trigger = Arc::new(Trigger::default());
            match variant {
                Variant::Enabled => {
                    // An event whose recording never ends within the run.
                    trigger.fire(0);
                    Admission::new(Mode::Events { pre_roll_ms: 5_000, post_roll_ms: u32::MAX }, history(), trigger)
                }
                Variant::Idle => {
                    Admission::new(Mode::Events { pre_roll_ms: 5_000, post_roll_ms: 0 }, history(), trigger)
                }
                _ => Admission::new(Mode::Continuous, None, trigger),
            }
        })
        .collect();
    let bounds = SegmentBounds { max_duration_90k: keeppeek::limits::SEGMENT_MAX_DURATION_90K, max_bytes: u64::MAX };
    let mut fragmenters: Vec<Fragmenter> = (0..cameras).map(|_| Fragmenter::new(bounds, false)).collect();
    let mut out = Vec::with_capacity(64);
    let frame = |n: i64, cam: usize| {
        // Cameras' GOPs are not in step with one another.
        let is_key = (n + cam as i64 * 7) % shape.gop == 0;
        Frame {
            pts_90k: n * 3600,
            received_mono_us: n * 40_000 + cam as i64,
            received_wall_us: n * 40_000,
            is_key,
            data: if is_key { key.clone() } else { delta.clone() },
            params: params.clone(),
            audio: None,
        }
    };
    let mut handed = 0u64;
    // A batch is one frame of every camera (or 32 frames of the one camera): its time over
    // its size is one per-frame sample, clear of the clock's own cost.
    let per_batch = if cameras == 1 { 32 } else { cameras };
    let total = seconds * 25 * cameras as i64;
    let warm = (15 * 25 * cameras as i64).min(total / 2);
    let mut samples = Vec::new();
    let mut frames: Vec<Frame> = Vec::with_capacity(per_batch);
    let mut n = 0i64;
    let mut allocs_before = 0;
    let mut measured = 0u64;
    while n < total {
        frames.clear();
        for i in 0..per_batch {
            let k = n + i as i64;
            let (t, cam) = if cameras == 1 { (k, 0) } else { (k / cameras as i64, (k % cameras as i64) as usize) };
            frames.push(frame(t, cam));
        }
        if n >= warm && allocs_before == 0 {
            allocs_before = ALLOCATIONS.load(Ordering::Relaxed);
        }
        let t = Instant::now();
        for (i, f) in frames.drain(..).enumerate() {
            let cam = if cameras == 1 { 0 } else { i };
            let fragmenter = &mut fragmenters[cam];
            let mut sink = |o: Out| match o {
                Out::Frame { frame, .. } => fragmenter.push(frame, &mut out),
                Out::Audio(a) => fragmenter.push_audio(a),
                Out::Finish => fragmenter.finish(&mut out),
            };
            match variant {
                Variant::Baseline => sink(Out::Frame { frame: f, after_gap: false }),
                _ => admissions[cam].frame(f, false, &mut sink),
            }
            // What the recorder thread would write, let go (the disk is not measured here).
            for e in out.drain(..) {
                if let RecordEvent::FrameData(_) = e {
                    handed = handed.wrapping_add(1);
                }
            }
        }
        let took = t.elapsed();
        if n >= warm {
            samples.push(took.as_nanos() as f64 / per_batch as f64);
            measured += per_batch as u64;
        }
        n += per_batch as i64;
    }
    // Making the batch's frames allocates nothing either (clones of shared buffers), so
    // the count is admission's own.
    let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs_before;
    std::hint::black_box(handed);
    (percentiles(samples), allocs as f64 / measured.max(1) as f64)
}

fn admission(smoke: bool) -> Value {
    let seconds = if smoke { 20 } else { 120 };
    let mut rows = Vec::new();
    for cameras in [1usize, 127] {
        for shape in shapes() {
            if smoke && !(shape.name.starts_with("1080p h264") || shape.name.starts_with("2160p h265 GOP 10")) {
                continue;
            }
            let secs = if cameras == 1 { seconds * 20 } else { seconds };
            let (base, base_allocs) = admission_run(&shape, cameras, Variant::Baseline, secs);
            let (disabled, disabled_allocs) = admission_run(&shape, cameras, Variant::Disabled, secs);
            let (enabled, enabled_allocs) = admission_run(&shape, cameras, Variant::Enabled, secs);
            let (idle, idle_allocs) = admission_run(&shape, cameras, Variant::Idle, secs);
            let p95 = |v: &Value| v["p95"].as_f64().unwrap();
            rows.push(json!({
                "cameras": cameras, "shape": shape.name,
                "baseline_ns": base, "disabled_ns": disabled, "enabled_ns": enabled, "idle_ns": idle,
                "disabled_added_p95_ns": p95(&disabled) - p95(&base),
                "enabled_added_p95_ns": p95(&enabled) - p95(&base),
                "enabled_over_baseline_p95": p95(&enabled) / p95(&base),
                "allocations_per_frame": {
                    "baseline": base_allocs, "disabled": disabled_allocs, "enabled": enabled_allocs, "idle": idle_allocs,
                },
            }));
            eprintln!("admission {cameras} × {}: done", shape.name);
        }
    }
    json!(rows)
}

// ---- part 2: event publication ----

const BOUNDARY_CAMERA: &str = "bench";

fn fixture_jpeg() -> Vec<u8> {
    fixtures::fixture("snapshot-4k.jpg")
}

fn publication(work: &Path, smoke: bool) -> Value {
    let jpeg = Bytes::from(fixture_jpeg());
    let subscribers = if smoke { 2 } else { 8 };
    let events_n = if smoke { 10 } else { 100 };
    let dir = work.join("publication");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
    // A stream with a picture, so WHEP sessions open.
    let fanout = Arc::new(Fanout::new(keeppeek::live::gop_pool()));
    fanout.publish(&frame_for_fanout());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let key = StreamKey::new(BOUNDARY_CAMERA, StreamKind::Main);
    let cameras = Arc::new(Cameras::default());
    cameras.add([RunningStream { key: key.clone(), state: Arc::default(), recording: None, live: fanout }]);
    let streams = Streams { cameras: cameras.clone(), catalog: catalog.clone(), data_dir: dir.clone() };
    let (engine, handle) = rt.block_on(Engine::bind(0, &["127.0.0.1".parse().unwrap()], streams, 64)).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let runner = std::thread::spawn(move || rt.block_on(engine.run(stop_rx)));
    let client = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let subscribe = keeppeek::webrtc::control::pb::ClientMessage {
        request_id: 1,
        track: 0,
        command: Some(keeppeek::webrtc::control::pb::client_message::Command::SubscribeEvents(
            keeppeek::webrtc::control::pb::SubscribeEvents { cameras: vec![] },
        )),
    }
    .encode_to_vec();
    let mut viewers = Vec::new();
    for i in 0..subscribers {
        let (mut v, pending, offer) = Viewer::offer();
        v.on_open(subscribe.clone());
        let owner = Owner { principal: format!("token:{i}"), login: None, admin: false };
        let (_, answer) =
            client.block_on(handle.open(key.clone(), offer, owner, "127.0.0.1".parse().unwrap())).expect("a session");
        v.answer(pending, &answer);
        viewers.push(v);
    }
    let farm = Farm::start(viewers);
    let t = Instant::now();
    // Each subscriber's answer to SubscribeEvents is its first message.
    while farm.min_messages() < 1 {
        assert!(t.elapsed() < Duration::from_secs(20), "subscribers connect and subscribe");
        std::thread::sleep(Duration::from_millis(5));
    }
    let events = Events::new(
        catalog,
        dir.clone(),
        cameras,
        Some(Arc::new(handle.clone())),
        u64::MAX,
        keeppeek::clock::RealClocks::shared(),
        Arc::default(),
    );
    let (mut durable, mut fanned, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..events_n {
        // The baseline: the same bytes written and synced to a file of their own.
        let t = Instant::now();
        let path = dir.join(format!("baseline-{k}.jpg"));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&jpeg).unwrap();
        f.sync_all().unwrap();
        baseline.push(t.elapsed().as_secs_f64() * 1e3);
        let want = farm.min_messages() + 1;
        let envelope = format!(
            r#"{{"id":"e{k}","camera":"{BOUNDARY_CAMERA}","labels":["person"],"text":"bench","record":false}}"#
        );
        let t = Instant::now();
        let accepted = client.block_on(events.publish("token:1", envelope.as_bytes(), Some(jpeg.clone()))).unwrap();
        durable.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(!accepted.replayed);
        while farm.min_messages() < want {
            assert!(t.elapsed() < Duration::from_secs(5), "every subscriber gets the notice");
            std::hint::spin_loop();
        }
        fanned.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(farm);
    let _ = stop_tx.send(true);
    let _ = runner.join();
    let p95 = |v: &Value| v["p95"].as_f64().unwrap();
    let (durable, fanned, baseline) = (percentiles(durable), percentiles(fanned), percentiles(baseline));
    json!({
        "jpeg_bytes": jpeg.len(), "subscribers": subscribers, "events": events_n,
        "durable_ms": durable, "fanout_ms": fanned, "write_fsync_baseline_ms": baseline,
        "durable_over_baseline_p95": p95(&durable) / p95(&baseline),
        "durable_over_reference_p95": p95(&durable) / 34.7,
        "fanout_over_reference_p95": p95(&fanned) / 66.8,
    })
}

/// A 640x360 H.264 stream's parameters (Main profile, level 3.1).
fn bench_params() -> keeppeek::media::VideoParams {
    let sps = [0x67, 0x4d, 0x00, 0x1f, 0x9a, 0x66, 0x02, 0x80, 0x2d, 0xd8];
    let pps = [0x68, 0xee, 0x3c, 0x80];
    avc::video_params(&sps, &pps, 640, 360).expect("valid parameter sets")
}

/// One keyframe, so the stream has parameters and a WHEP session can open.
fn frame_for_fanout() -> Frame {
    let params = Arc::new(bench_params());
    Frame {
        pts_90k: 0,
        received_mono_us: 0,
        received_wall_us: 0,
        is_key: true,
        data: Bytes::from_static(&[0, 0, 0, 2, 0x65, 0x88]),
        params,
        audio: None,
    }
}

// ---- part 3: keyframe lookup ----

const WALL0: i64 = 1_800_000_000_000_000;

/// A catalog of `streams` streams × `recordings` recordings × `fragments` one-second
/// fragments (one keyframe each), every stream's recordings sharing one file; returns it
/// with the data directory. Cached under `work`.
fn lookup_catalog(work: &Path, streams: u32, recordings: u32, fragments: u32) -> (Arc<Catalog>, PathBuf) {
    let dir = work.join(format!("lookup-{streams}x{recordings}x{fragments}"));
    let done = dir.join("done");
    if done.exists() {
        return (Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap()), dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("recordings")).unwrap();
    let catalog = Catalog::open(&dir.join("catalog.redb")).unwrap();
    let per_stream = recordings * fragments;
    // One stream's file: an init segment and every fragment, 1 keyframe of 64 bytes each.
    let mut init = vec![0u8; keeppeek::limits::INIT_SEGMENT_MAX_BYTES];
    let len = fmp4::write_init_segment(&mut init, &bench_params().sample_entry, 640, 360, None).unwrap();
    let mut file = init[..len].to_vec();
    let mut head = fmp4::fragment_header_buffer();
    let mut offsets = Vec::with_capacity(per_stream as usize);
    for i in 0..per_stream {
        let s = [fmp4::SampleEntry { duration: 90_000, size_bytes: 64, is_key: true }];
        let run = fmp4::TrackRun { base_decode: u64::from(i) * 90_000, samples: &s };
        let h = fmp4::write_fragment_header(&mut head[..], i + 1, WALL0 + i64::from(i) * 1_000_000, run, None).unwrap();
        offsets.push((file.len() as u64, (file.len() + h + 64) as u64));
        file.extend_from_slice(&head[..h]);
        file.extend(std::iter::repeat_n((i % 251) as u8, 64));
    }
    for s in 0..streams {
        let stream_id = catalog.stream_id(&StreamKey::new(&format!("cam{s}"), StreamKind::Main)).unwrap();
        let rel = format!("recordings/cam{s}.mp4");
        std::fs::write(dir.join(&rel), &file).unwrap();
        let mut batch = Batch::default();
        for r in 0..recordings {
            let row = RecordingRow {
                stream_id,
                run_id: 1,
                codec: keeppeek::media::Codec::H264,
                width: 640,
                height: 360,
                wall_start_us: WALL0 + i64::from(r * fragments) * 1_000_000,
                wall_end_us: WALL0 + i64::from((r + 1) * fragments) * 1_000_000,
                media_duration_90k: u64::from(fragments) * 90_000,
                bytes: file.len() as u64,
                init_bytes: len as u64,
                frames: u64::from(fragments),
                fragments,
                open: false,
                audio: None,
                path: rel.clone(),
            };
            // Ids given here, not drawn one durable commit at a time: rows go in by the batch.
            let id = u64::from(s * recordings + r + 1);
            for f in 0..fragments {
                let i = r * fragments + f;
                let (start, end) = offsets[i as usize];
                let wall = WALL0 + i64::from(i) * 1_000_000;
                let frag = FragmentRow {
                    wall_start_us: wall,
                    wall_end_us: wall + 1_000_000,
                    media_start_90k: u64::from(i) * 90_000,
                    duration_90k: 90_000,
                    start_byte: start,
                    end_byte: end,
                    frames: 1,
                    keyframes: 1,
                };
                batch.fragments.push((id, f + 1, frag));
                batch.keyframes.push((stream_id, id, Keyframe { wall_us: wall, fragment_start_byte: start }));
            }
            batch.recordings.push((id, row));
            if batch.fragments.len() >= 50_000 {
                catalog.commit(&std::mem::take(&mut batch)).unwrap();
            }
        }
        catalog.commit(&batch).unwrap();
        eprintln!("lookup catalog: stream {}/{streams}", s + 1);
    }
    std::fs::write(&done, b"").unwrap();
    (Arc::new(catalog), dir)
}

/// 10,000 events at pseudo-random times; returns (event id, camera index, time) for each.
fn lookup_events(catalog: &Catalog, streams: u32, span_s: u32, n: u64) -> Vec<(u64, u32, i64)> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut model = Vec::new();
    let mut records = Vec::new();
    for id in 1..=n {
        let cam = (rand() % u64::from(streams)) as u32;
        let t = WALL0 + (rand() % (u64::from(span_s) * 1_000_000)) as i64;
        let json = format!(r#"{{"camera":"cam{cam}","time_us":{t},"labels":["person"]}}"#);
        let envelope = keeppeek::events::envelope::parse(json.as_bytes(), 0).unwrap();
        records.push(EventRecord {
            id,
            rev: 1,
            principal: "token:1".into(),
            received_us: t,
            envelope,
            snapshot: None,
            hold: None,
        });
        model.push((id, cam, t));
    }
    for chunk in records.chunks(5_000) {
        catalog.put_events(chunk).unwrap();
    }
    model
}

fn lookup(work: &Path, smoke: bool) -> Value {
    let (streams, recordings, fragments) = if smoke { (4, 16, 128) } else { (16, 512, 128) };
    let (catalog, dir) = lookup_catalog(work, streams, recordings, fragments);
    let rows = u64::from(streams * recordings * fragments);
    // Events live in their own copy of the catalog's state: start from no events.
    let events_n = if smoke { 2_000 } else { 10_000 };
    let model = match catalog.event(1).unwrap() {
        Some(_) => {
            // Made by an earlier run: rebuild the model from the catalog.
            (1..=events_n)
                .map(|id| {
                    let e = catalog.event(id).unwrap().expect("the earlier run's events");
                    let cam = e.envelope.camera.trim_start_matches("cam").parse().unwrap();
                    (id, cam, e.envelope.time())
                })
                .collect()
        }
        None => lookup_events(&catalog, streams, recordings * fragments, events_n),
    };
    // Correctness first: every event's keyframe is the second at or before it.
    let mut checked = 0;
    for (id, cam, t) in &model {
        let at = keyframe::resolve(&catalog, &dir, *id).unwrap();
        let want = WALL0 + (t - WALL0) / 1_000_000 * 1_000_000;
        assert_eq!(at.wall_us, want, "event {id}");
        assert!(at.path.ends_with(format!("recordings/cam{cam}.mp4")));
        let mp4 = keyframe::read(&at).unwrap();
        let i = (want - WALL0) / 1_000_000;
        assert_eq!(&mp4[mp4.len() - 64..], &[(i % 251) as u8; 64][..], "event {id}'s keyframe bytes");
        checked += 1;
    }
    let window = Duration::from_secs(if smoke { 1 } else { 4 });
    let mut runs = Vec::new();
    for threads in [1usize, 8, 32] {
        for read in [false, true] {
            let stop = Instant::now() + window;
            let handles: Vec<_> = (0..threads)
                .map(|th| {
                    let (catalog, dir, model) = (catalog.clone(), dir.clone(), model.clone());
                    std::thread::spawn(move || {
                        let mut lat = Vec::new();
                        let mut k = th * 7919;
                        while Instant::now() < stop {
                            let (id, _, _) = model[k % model.len()];
                            k += 1;
                            let t = Instant::now();
                            let at = keyframe::resolve(&catalog, &dir, id).unwrap();
                            if read {
                                std::hint::black_box(keyframe::read(&at).unwrap());
                            }
                            lat.push(t.elapsed().as_secs_f64() * 1e6);
                        }
                        lat
                    })
                })
                .collect();
            let lat: Vec<f64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
            let per_s = lat.len() as f64 / window.as_secs_f64();
            runs.push(
                json!({ "threads": threads, "read": read, "lookups_per_s": per_s, "latency_us": percentiles(lat) }),
            );
        }
    }
    json!({ "fragment_rows": rows, "keyframe_rows": rows, "events": model.len(), "checked": checked, "runs": runs })
}

// ---- report ----

fn markdown(r: &Value) -> String {
    let mut md = String::from("## Pre-roll and events (`cargo bench --bench events`)\n\n");
    md.push_str("### Admission cost per frame (ns; p95 added over baseline; allocations per frame)\n\n");
    md.push_str("| cameras | frames | baseline p50/p95 | disabled p50/p95 | enabled p50/p95 | idle p50/p95 | added p95 disabled / enabled | enabled ÷ baseline p95 | allocs/frame baseline / enabled |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for row in r["admission"].as_array().unwrap() {
        let pp = |v: &Value| format!("{:.0} / {:.0}", v["p50"].as_f64().unwrap(), v["p95"].as_f64().unwrap());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:+.0} / {:+.0} | {:.2} | {:.3} / {:.3} |",
            row["cameras"],
            row["shape"].as_str().unwrap(),
            pp(&row["baseline_ns"]),
            pp(&row["disabled_ns"]),
            pp(&row["enabled_ns"]),
            pp(&row["idle_ns"]),
            row["disabled_added_p95_ns"].as_f64().unwrap(),
            row["enabled_added_p95_ns"].as_f64().unwrap(),
            row["enabled_over_baseline_p95"].as_f64().unwrap(),
            row["allocations_per_frame"]["baseline"].as_f64().unwrap(),
            row["allocations_per_frame"]["enabled"].as_f64().unwrap(),
        );
    }
    let p = &r["publication"];
    let ms = |v: &Value| format!("{:.1} / {:.1}", v["p50"].as_f64().unwrap(), v["p95"].as_f64().unwrap());
    let _ = write!(
        md,
        "\n### Event publication, {} KB JPEG, {} subscribers (ms p50 / p95)\n\n| step | ours | reference p95 | ratio |\n| --- | --- | --- | --- |\n\
         | write + fsync of the JPEG (baseline) | {} | | |\n| through the durable commit | {} | 34.7 | {:.2} |\n| through the live fanout | {} | 66.8 | {:.2} |\n",
        p["jpeg_bytes"].as_u64().unwrap() / 1000,
        p["subscribers"],
        ms(&p["write_fsync_baseline_ms"]),
        ms(&p["durable_ms"]),
        p["durable_over_reference_p95"].as_f64().unwrap(),
        ms(&p["fanout_ms"]),
        p["fanout_over_reference_p95"].as_f64().unwrap(),
    );
    let l = &r["lookup"];
    let _ = write!(
        md,
        "\n### Event keyframe lookup: {} fragment and keyframe rows, {} events, {} checked\n\n| threads | | lookups/s | p50 µs | p95 µs | p99 µs |\n| --- | --- | --- | --- | --- | --- |\n",
        l["fragment_rows"], l["events"], l["checked"]
    );
    for run in l["runs"].as_array().unwrap() {
        let lat = &run["latency_us"];
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            run["threads"],
            if run["read"].as_bool().unwrap() { "resolve + read" } else { "resolve" },
            run["lookups_per_s"].as_f64().unwrap(),
            lat["p50"].as_f64().unwrap(),
            lat["p95"].as_f64().unwrap(),
            lat["p99"].as_f64().unwrap(),
        );
    }
    for (d, what) in [
        (&r["durability"]["close"], "events close together, a short post-roll"),
        (&r["durability"]["isolated"], "isolated events, the post-roll as long as the interval"),
    ] {
        let _ = write!(
            md,
            "\n### An event's footage made durable, {what}: flush interval {} s, post-roll {} s, {} events {} s apart on average (ms p50 / p95)\n\n| | ms p50 / p95 |\n| --- | --- |\n\
             | a moment with no event, until the interval's flush (baseline) | {} |\n| an event, from its answer | {} |\n",
            d["flush_interval_s"],
            d["post_roll_s"],
            d["events"],
            d["spacing_s"],
            ms(&d["baseline_ms"]),
            ms(&d["durable_ms"]),
        );
        if !d["post_roll_durable_ms"].is_null() {
            let _ = writeln!(md, "| its post-roll, from its end | {} |", ms(&d["post_roll_durable_ms"]));
        }
        let _ = write!(
            md,
            "\nBaseline ÷ event p50: {:.1}; event p95 ÷ goal (1 s): {:.2}. {} early flushes.\n\n\
             | extra writes per event | | beside |\n| --- | --- | --- |\n\
             | recording: {:.2} more fragments | {:.0} B | a fragment header: {:.0} B |\n\
             | catalog: {:.2} more commits (goal: at most 1) | | |\n\
             | catalog, net (the event's own commit, {:.0} B, aside) | {:.0} B | an interval commit: {:.0} B |\n\
             | catalog, the early flushes' commits | {:.0} B | |\n",
            d["baseline_over_durable_p50"].as_f64().unwrap(),
            d["durable_p95_over_goal"].as_f64().unwrap(),
            d["early_flushes"],
            d["extra_fragments_per_event"].as_f64().unwrap(),
            d["extra_recording_bytes_per_event"].as_f64().unwrap(),
            d["fragment_header_bytes"].as_f64().unwrap(),
            d["extra_commits_per_event"].as_f64().unwrap(),
            d["event_commit_bytes"].as_f64().unwrap(),
            d["extra_catalog_bytes_per_event"].as_f64().unwrap(),
            d["interval_commit_bytes"].as_f64().unwrap(),
            d["early_flush_catalog_bytes_per_event"].as_f64().unwrap(),
        );
    }
    md
}

// ---- part 4: an event's footage made durable ----

const DURABLE_CAMERA: &str = "bench";
const FPS: i64 = 25;
/// 4 Mbit/s at 25 fps, a keyframe each second five times a delta frame.
const DELTA_BYTES: usize = 18_000;
const KEY_BYTES: usize = 90_000;

/// A length-prefixed NAL unit of `bytes`.
fn nal(bytes: usize, key: bool) -> Bytes {
    let mut d = Vec::with_capacity(bytes);
    d.extend_from_slice(&(bytes as u32 - 4).to_be_bytes());
    d.push(if key { 0x65 } else { 0x41 });
    d.resize(bytes, 0x5a);
    d.into()
}

/// Written so far: [recording bytes, catalog bytes, the events' own catalog commits' bytes,
/// interval commits, early flushes, the early flushes' catalog bytes, fragments].
fn written(
    recorder: &keeppeek::record::Recorder,
    catalog: &Catalog,
    stream: &keeppeek::record::RecorderStats,
) -> [u64; 7] {
    let f = &recorder.flusher_stats;
    let early = f.early_flushes.load(Ordering::Relaxed);
    [
        recorder.wear.recording_bytes.load(Ordering::Relaxed),
        catalog.writes.bytes(),
        catalog.writes.event_bytes.load(Ordering::Relaxed),
        f.commits.load(Ordering::Relaxed) - early,
        early,
        f.early_flush_bytes.load(Ordering::Relaxed),
        stream.fragments_written.load(Ordering::Relaxed),
    ]
}

/// Moments (wall µs) and since when each was waited for; set to how long, in ms, once the
/// catalog resolves a keyframe at or before it.
type Moments = Vec<(i64, Instant, Option<f64>)>;

/// Looks once at every moment still waited for.
fn look(catalog: &Catalog, moments: &mut Moments) {
    for (at_us, since, took) in moments.iter_mut().filter(|m| m.2.is_none()) {
        if keyframe::find(catalog, DURABLE_CAMERA, *at_us).unwrap().is_some() {
            *took = Some(since.elapsed().as_secs_f64() * 1e3);
        }
    }
}

/// Looks every 2 ms until every moment is durable; the times, ms.
fn until_durable(catalog: &Catalog, mut moments: Moments) -> Vec<f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while moments.iter().any(|m| m.2.is_none()) {
        assert!(Instant::now() < deadline, "footage never became durable");
        look(catalog, &mut moments);
        std::thread::sleep(Duration::from_millis(2));
    }
    moments.into_iter().filter_map(|m| m.2).collect()
}

/// The camera: 25 fps in real time on its own thread until `stop`; returns the frames sent.
fn feed(
    mut sender: keeppeek::record::queue::FrameSender,
    clocks: keeppeek::clock::SharedClocks,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<i64> {
    std::thread::spawn(move || {
        let (key, delta, params) = (nal(KEY_BYTES, true), nal(DELTA_BYTES, false), Arc::new(bench_params()));
        let start = Instant::now();
        let mut n = 0i64;
        while !stop.load(Ordering::Relaxed) {
            let is_key = n % FPS == 0;
            let frame = Frame {
                pts_90k: n * 90_000 / FPS,
                received_mono_us: clocks.mono_us(),
                received_wall_us: clocks.wall_us(),
                is_key,
                data: if is_key { key.clone() } else { delta.clone() },
                params: params.clone(),
                audio: None,
            };
            assert!(sender.send(frame), "the recorder keeps up");
            n += 1;
            let due = Duration::from_micros((n * 1_000_000 / FPS) as u64);
            std::thread::sleep(due.saturating_sub(start.elapsed()));
        }
        n
    })
}

/// Part 4's two shapes of events: close together with a short post-roll (each event's
/// post-roll covered by the next one's flush), and isolated with the default post-roll, as
/// long as the flush interval (its end met by an interval flush).
struct Spell {
    name: &'static str,
    post_roll_ms: u32,
    /// Between events, on average.
    spacing: Duration,
    /// Spread each event's spacing over an interval around it, so the events fall at every
    /// phase of the flush interval (what an event costs in commits depends on it).
    spread: Option<Duration>,
    events: usize,
}

fn durability(work: &Path, smoke: bool) -> Value {
    let interval_s = if smoke { 2 } else { 10 };
    // Spaced past two EVENT_FLUSH_MIN_INTERVAL_MS, so each event is its own: one nearer
    // waits for the spacing, as a storm's do.
    let close = Spell {
        name: "close",
        post_roll_ms: 1_000,
        spacing: Duration::from_millis(2 * keeppeek::limits::EVENT_FLUSH_MIN_INTERVAL_MS + 500),
        spread: None,
        events: if smoke { 4 } else { 24 },
    };
    // Past the post-roll, the interval after it and the wait: nothing of one event is left
    // when the next comes.
    let isolated = Spell {
        name: "isolated",
        post_roll_ms: interval_s as u32 * 1000,
        spacing: Duration::from_millis(interval_s * 2_500),
        spread: Some(Duration::from_secs(interval_s)),
        events: if smoke { 2 } else { 8 },
    };
    json!({ "close": durable_spell(work, interval_s, &close), "isolated": durable_spell(work, interval_s, &isolated) })
}

/// Polls every 2 ms, until `deadline`, for the catalog to hold footage to `to_wall_us`; how
/// long after that wall time it did, ms.
fn footage_durable_to(catalog: &Catalog, to_wall_us: i64, wall: impl Fn() -> i64, deadline: Instant) -> f64 {
    loop {
        let recorded_to = catalog.recordings().unwrap().iter().map(|(_, r)| r.wall_end_us).max();
        if recorded_to >= Some(to_wall_us) {
            return (wall() - to_wall_us) as f64 / 1e3;
        }
        assert!(Instant::now() < deadline, "the post-roll never became durable");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn durable_spell(work: &Path, interval_s: u64, spell: &Spell) -> Value {
    let dir = work.join(format!("durability-{}", spell.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (n, spacing) = (spell.events, spell.spacing);
    let mut config = keeppeek::config::Config::demo(dir.clone(), "127.0.0.1:0".parse().unwrap());
    config.flush_interval_s = interval_s;
    config.retention.stream_max_bytes = u64::MAX / 4;
    config.retention.total_max_bytes = u64::MAX / 4;
    config.cameras[0].name = DURABLE_CAMERA.into();
    config.cameras[0].frame_max_bytes = 1 << 20;
    config.cameras[0].post_roll_ms = spell.post_roll_ms;
    let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
    let clocks = keeppeek::clock::RealClocks::shared();
    let mut recorder = keeppeek::record::Recorder::start(&config, catalog.clone(), clocks.clone()).unwrap();
    let stream = recorder.start_camera(&config.cameras[0], &catalog, |_| None).unwrap().remove(0);
    let cameras = Arc::new(Cameras::default());
    let live = Arc::new(Fanout::new(keeppeek::live::gop_pool()));
    let recording = Some(stream.watch.clone());
    cameras.add([RunningStream { key: stream.key.clone(), state: Arc::default(), recording, live }]);
    let holds = recorder.holds.clone();
    let events = Events::new(catalog.clone(), dir.clone(), cameras, None, u64::MAX, clocks.clone(), holds);
    let stats = stream.watch.stats.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = feed(stream.sender, clocks.clone(), stop.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let wall = || keeppeek::clock::Clocks::wall_us(&*clocks);
    // Settle: the first segment and a flush.
    std::thread::sleep(Duration::from_secs(interval_s + 1));

    // Quiet: moments with no event, each until the interval's flush covers it.
    let q0 = (Instant::now(), written(&recorder, &catalog, &stats));
    let mut quiet: Moments = Vec::new();
    while quiet.len() < n {
        if quiet.last().is_none_or(|m| m.1.elapsed() >= spacing) {
            quiet.push((wall(), Instant::now(), None));
        }
        look(&catalog, &mut quiet);
        std::thread::sleep(Duration::from_millis(2));
    }
    // The last one's spacing, still looking (its time is when the catalog first has it).
    while quiet.last().unwrap().1.elapsed() < spacing {
        look(&catalog, &mut quiet);
        std::thread::sleep(Duration::from_millis(2));
    }
    let q1 = (Instant::now(), written(&recorder, &catalog, &stats));
    let baseline = until_durable(&catalog, quiet);

    // Events: each published, then until its keyframe resolves.
    let e0 = (Instant::now(), written(&recorder, &catalog, &stats));
    let mut durable = Vec::new();
    let mut post_rolls = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        let at = wall();
        let envelope = format!(r#"{{"camera":"{DURABLE_CAMERA}","time_us":{at},"labels":["bench"],"id":"d{i}"}}"#);
        rt.block_on(events.publish("token:1", envelope.as_bytes(), None)).unwrap();
        durable.extend(until_durable(&catalog, vec![(at, Instant::now(), None)]));
        if spell.name == "isolated" {
            // From the post-roll's end until the catalog holds footage to it.
            let end = at + i64::from(spell.post_roll_ms) * 1000;
            post_rolls.push(footage_durable_to(&catalog, end, wall, started + spacing));
        }
        // From half the spread below the spacing to half above, in even steps.
        let gap = spell.spread.map_or(spacing, |w| spacing - w / 2 + w.mul_f64((i as f64 + 0.5) / n as f64));
        std::thread::sleep(gap.saturating_sub(started.elapsed()));
    }
    let e1 = (Instant::now(), written(&recorder, &catalog, &stats));
    stop.store(true, Ordering::Relaxed);
    let frames = feeder.join().unwrap();
    recorder.shutdown();

    // Counts a second in each spell; the events' spell less the quiet one's, per event.
    type Mark = (Instant, [u64; 7]);
    let rate = |(t0, w0): Mark, (t1, w1): Mark, i: usize| (w1[i] - w0[i]) as f64 / (t1 - t0).as_secs_f64();
    let events_s = (e1.0 - e0.0).as_secs_f64();
    let commit_bytes = (q1.1[1] - q0.1[1]) as f64 / ((q1.1[3] - q0.1[3]) as f64).max(1.0);
    let event_commits = (e1.1[2] - e0.1[2]) as f64;
    // The flusher's commits, interval and early, beyond the quiet spell's pace.
    let flushes = |m: Mark| m.1[3] + m.1[4];
    let extra_commits = ((flushes(e1) - flushes(e0)) as f64
        - (flushes(q1) - flushes(q0)) as f64 / (q1.0 - q0.0).as_secs_f64() * events_s)
        / n as f64;
    let extra_catalog = ((rate(e0, e1, 1) - rate(q0, q1, 1)) * events_s - event_commits) / n as f64;
    let early_bytes = (e1.1[5] - e0.1[5]) as f64 / n as f64;
    let extra_fragments = (rate(e0, e1, 6) - rate(q0, q1, 6)) * events_s / n as f64;
    // A fragment's header: what the files hold beyond the frames, per fragment, over the run.
    let keys = (frames + FPS - 1) / FPS;
    let payload = keys as u64 * KEY_BYTES as u64 + (frames - keys) as u64 * DELTA_BYTES as u64;
    let recorded = stats.bytes_written.load(Ordering::Relaxed);
    let header_bytes = recorded.saturating_sub(payload) as f64 / stats.fragments_written.load(Ordering::Relaxed) as f64;
    let (b, d) = (percentiles(baseline), percentiles(durable));
    json!({
        "flush_interval_s": interval_s,
        "post_roll_s": spell.post_roll_ms / 1000,
        "spacing_s": spacing.as_secs_f64(),
        "events": n,
        "extra_commits_per_event": extra_commits,
        "post_roll_durable_ms": if post_rolls.is_empty() { Value::Null } else { percentiles(post_rolls) },
        "frames": frames,
        "baseline_over_durable_p50": b["p50"].as_f64().unwrap() / d["p50"].as_f64().unwrap().max(0.001),
        "durable_p95_over_goal": d["p95"].as_f64().unwrap() / 1000.0,
        "baseline_ms": b,
        "durable_ms": d,
        "early_flushes": e1.1[4] - e0.1[4],
        "extra_fragments_per_event": extra_fragments,
        "extra_recording_bytes_per_event": extra_fragments * header_bytes,
        "extra_catalog_bytes_per_event": extra_catalog,
        "early_flush_catalog_bytes_per_event": early_bytes,
        "event_commit_bytes": event_commits / n as f64,
        "fragment_header_bytes": header_bytes,
        "interval_commit_bytes": commit_bytes,
    })
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let work = repo().join("target/bench/events-work");
    std::fs::create_dir_all(&work).unwrap();
    let report = json!({
        "smoke": smoke,
        "admission": admission(smoke),
        "publication": publication(&work, smoke),
        "lookup": lookup(&work, smoke),
        "durability": durability(&work, smoke),
    });
    let out = repo().join("target/bench");
    std::fs::write(out.join("events.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out.join("events.md"), &md).unwrap();
    println!("{md}");
}

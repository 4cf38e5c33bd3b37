//! Thirty days of recording on the simulated clock, in under two minutes of test time.
//!
//! Four streams (two continuous, two recording on events with a pre-roll) feed their
//! recorders one frame a simulated minute; the flusher runs on the same simulated clock, so
//! its flushes and retention come when simulated time says. Along the way the wall clock
//! steps forward and back, and one camera drops every few hours. Login tries and sessions run
//! on the same clock. At the end `check` must find nothing wrong; all along, bytes stay under
//! the caps and every in-memory table stays bounded.
//!
//! Everything runs on this one thread, in order: the recorders' and the flusher's own steps
//! (the ones their threads loop over), so a failure replays the same way.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::Duration;

use bytes::Bytes;

use super::flusher::{Flusher, ToFlusher};
use super::fragmenter::Fragmenter;
use super::queue::StreamMsg;
use super::recovery::RECORDINGS_DIR;
use super::stream::StreamRecorder;
use super::{segment_bounds, verify};
use crate::auth::{Auth, limiter};
use crate::base::{StreamKey, StreamKind};
use crate::catalog::Catalog;
use crate::clock::{BUILD_WALL_US, Clocks, SimulatedClocks};
use crate::config::{Config, Retention};
use crate::limits;
use crate::media::{Frame, avc};
use crate::preroll::{Admission, Caps, History, HistoryPool, Mode, Trigger};

/// Thirty days on the host; three under qemu-user, where each day costs ten times as much (the
/// same code on the board's architecture, in the same few minutes).
const DAYS: i64 = if cfg!(target_arch = "aarch64") { 3 } else { 30 };
/// The tables' high-water mark over the first third bounds them for the rest.
const EARLY_DAYS: i64 = DAYS / 3;
const FRAME_EVERY_S: i64 = 60;
const FLUSH_INTERVAL_S: u64 = 600;
const FRAME_BYTES: usize = 4096;
const STREAM_MAX_BYTES: u64 = 6 << 20;
const TOTAL_MAX_BYTES: u64 = 20 << 20;
/// Camera 0 drops every this many simulated seconds, for ten minutes.
const DROP_EVERY_S: i64 = 5 * 3600;
const DROP_FOR_S: i64 = 600;
/// Events fire on the event-recorded streams this often.
const EVENT_EVERY_S: i64 = 3 * 3600;

struct Stream {
    recorder: StreamRecorder,
    admission: Admission,
    trigger: Arc<Trigger>,
    /// The camera's own clock, 90 kHz, restarting at every session.
    pts_90k: i64,
    /// Sessions down until this simulated monotonic µs.
    down_until_us: i64,
    after_gap: bool,
}

/// One IDR slice of `bytes`, 4-byte length-prefixed.
pub(super) fn keyframe_data(bytes: usize) -> Bytes {
    frame_data(bytes, true)
}

/// One slice of `bytes`, 4-byte length-prefixed, IDR or not.
pub(super) fn frame_data(bytes: usize, key: bool) -> Bytes {
    let mut d = Vec::with_capacity(bytes);
    d.extend_from_slice(&(bytes as u32 - 4).to_be_bytes());
    d.push(if key { 0x65 } else { 0x41 });
    d.resize(bytes, 0x5a);
    d.into()
}

/// A recorder of `camera`'s main stream writing under `data_dir`, reporting to `tx`.
pub(super) fn main_recorder(
    catalog: &Arc<Catalog>,
    data_dir: &std::path::Path,
    camera: &str,
    tx: &std::sync::mpsc::SyncSender<ToFlusher>,
    bounds: super::fragmenter::SegmentBounds,
) -> (u32, StreamRecorder) {
    let stream_id = catalog.stream_id(&StreamKey::new(camera, StreamKind::Main)).unwrap();
    let dir = format!("{RECORDINGS_DIR}/{camera}/main");
    let f = Fragmenter::new(bounds, true);
    (stream_id, StreamRecorder::new(stream_id, dir, data_dir.into(), catalog.clone(), tx.clone(), f))
}

/// Hands the flusher everything the recorders sent it, as its thread would.
pub(super) fn drain(rx: &Receiver<ToFlusher>, flusher: &mut Flusher) {
    while let Ok(msg) = rx.try_recv() {
        flusher.handle(msg);
    }
}

#[test]
fn thirty_simulated_days_stay_within_caps_and_check_clean() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let data_dir = dir.path().to_path_buf();
    let catalog = Arc::new(Catalog::open(&data_dir.join("catalog.redb")).unwrap());
    let sim = SimulatedClocks::new(BUILD_WALL_US + 86_400_000_000);
    let caps = Retention { stream_max_bytes: STREAM_MAX_BYTES, total_max_bytes: TOTAL_MAX_BYTES, held_max_percent: 50 };
    let mut config = Config::demo(data_dir.clone(), "127.0.0.1:8080".parse().unwrap());
    config.retention = caps;
    let bounds = segment_bounds(&config, 4, None);

    let (tx, rx) = sync_channel(limits::CATALOG_QUEUE_COMMANDS);
    let interval = Duration::from_secs(FLUSH_INTERVAL_S);
    let mut flusher =
        Flusher::new(catalog.clone(), data_dir.clone(), interval, caps, sim.shared(), Arc::default()).unwrap();
    flusher.begin();
    let pool = Arc::new(HistoryPool::new(4 << 20));
    let mut streams: Vec<Stream> = (0..4)
        .map(|i| {
            let (_, recorder) = main_recorder(&catalog, &data_dir, &format!("cam{i}"), &tx, bounds);
            let trigger = Arc::new(Trigger::default());
            let admission = if i < 2 {
                Admission::new(Mode::Continuous, None, trigger.clone())
            } else {
                let history = History::new(Caps::for_pre_roll(180_000, 2 << 20), pool.clone());
                Admission::new(
                    Mode::Events { pre_roll_ms: 180_000, post_roll_ms: 600_000 },
                    Some(history),
                    trigger.clone(),
                )
            };
            Stream { recorder, admission, trigger, pts_90k: 0, down_until_us: 0, after_gap: true }
        })
        .collect();

    let auth = Auth::new(catalog.clone(), sim.shared());
    let mut limiter = limiter::Limiter::new();
    let mut cookies = Vec::new();
    let data = keyframe_data(FRAME_BYTES);
    let params = Arc::new(avc::test_params());
    let steps = DAYS * 86_400 / FRAME_EVERY_S;
    let (mut max_tables, mut max_tables_early) = (0usize, 0usize);
    let (mut max_sessions, mut max_limiter) = (0usize, 0usize);
    let mut commits_seen = 0;
    for step in 1..=steps {
        sim.advance(Duration::from_secs(FRAME_EVERY_S as u64));
        let t_s = step * FRAME_EVERY_S;
        // NTP steps the wall clock: forward after the first third, back after the second.
        if t_s == EARLY_DAYS * 86_400 {
            sim.step_wall(2 * 3_600_000_000);
        }
        if t_s == 2 * EARLY_DAYS * 86_400 {
            sim.step_wall(-3_600_000_000);
        }
        let now_us = sim.mono_us();
        for (i, s) in streams.iter_mut().enumerate() {
            if i == 0 && t_s % DROP_EVERY_S == 0 {
                s.recorder.take(StreamMsg::SessionEnded, &mut s.admission);
                s.down_until_us = now_us + DROP_FOR_S * 1_000_000;
                s.after_gap = true;
                s.pts_90k = 0;
            }
            if now_us < s.down_until_us {
                continue;
            }
            if i >= 2 && t_s % EVENT_EVERY_S == 0 {
                s.trigger.fire(now_us);
            }
            let frame = Frame {
                pts_90k: s.pts_90k,
                received_mono_us: now_us,
                received_wall_us: sim.wall_us(),
                is_key: true,
                data: data.clone(),
                params: params.clone(),
                audio: None,
            };
            s.pts_90k += FRAME_EVERY_S * 90_000;
            let after_gap = std::mem::take(&mut s.after_gap);
            s.recorder.take(StreamMsg::Frame { frame, after_gap }, &mut s.admission);
            // As a writer's turn ends.
            s.recorder.write_frames();
            drain(&rx, &mut flusher);
        }
        flusher.flush_if_due();

        // Every ten simulated minutes someone mistypes a password from a new address.
        if t_s % 600 == 0 {
            let peer = IpAddr::V4(Ipv4Addr::from((step as u32).wrapping_mul(2_654_435_761)));
            let name = limiter::Name::try_from("admin").unwrap();
            if let Ok(t) = limiter.attempt(peer, Some(&name), now_us) {
                limiter.ended(&t);
            }
            max_limiter = max_limiter.max(limiter.len());
        }
        // Hourly: someone logs in; the caps hold (beyond them only the segment being
        // written), and so do the tables.
        if t_s % 3600 == 0 {
            let user = format!("user{}", (t_s / 3600) % 40);
            let (cookie, _, _) = auth.open_session(&user, crate::auth::Role::Viewer, None);
            cookies.push(cookie);
            max_sessions = max_sessions.max(auth.sessions_held());
            let rows = catalog.recordings().unwrap();
            let mut per_stream = std::collections::BTreeMap::<u32, u64>::new();
            for (_, r) in &rows {
                *per_stream.entry(r.stream_id).or_default() += r.bytes;
            }
            let total: u64 = per_stream.values().sum();
            for (&id, &b) in &per_stream {
                assert!(
                    b <= STREAM_MAX_BYTES + bounds.max_bytes,
                    "stream {id} holds {b} bytes on day {}",
                    t_s / 86_400
                );
            }
            assert!(total <= TOTAL_MAX_BYTES + 4 * bounds.max_bytes, "{total} bytes on day {}", t_s / 86_400);
            let tables = flusher.table_lens();
            let held: usize = tables.iter().map(|(_, n)| n).sum();
            assert!(tables.iter().all(|&(_, n)| n <= rows.len() + limits::CATALOG_PENDING_FRAGMENTS_MAX), "{tables:?}");
            if t_s <= EARLY_DAYS * 86_400 {
                max_tables_early = max_tables_early.max(held);
            }
            max_tables = max_tables.max(held);
            assert!(pool.held_bytes() <= pool.max_bytes());
        }
        if t_s % (FLUSH_INTERVAL_S as i64) == 0 {
            // A flush came at every interval.
            let commits = flusher.stats().commits.load(std::sync::atomic::Ordering::Relaxed);
            assert!(commits > commits_seen, "no commit by {t_s} s");
            commits_seen = commits;
        }
    }
    for s in &mut streams {
        s.recorder.finish();
    }
    drop(streams);
    drop(tx);
    drain(&rx, &mut flusher);
    flusher.flush_if_due();
    sim.advance(interval);
    flusher.flush_if_due();

    // Bounded: the flusher's tables grew no further after the first third than they had
    // in it, the session table held no more than its ceiling and its lifetime allow,
    // and the login table no more than its ceiling.
    assert!(max_tables <= max_tables_early + max_tables_early / 4, "{max_tables} > {max_tables_early}");
    let lifetime_h = limits::AUTH_SESSION_LIFETIME_S as usize / 3600;
    assert!(max_sessions <= limits::AUTH_SESSIONS_MAX.min(lifetime_h + 1), "{max_sessions}");
    assert!(max_limiter <= limits::AUTH_LOGIN_TRACKED_MAX, "{max_limiter}");
    // Sessions older than their lifetime are gone, newer ones still open.
    let first_age_s = (DAYS * 86_400 - 3600) as u64;
    assert_eq!(auth.session(&cookies[0]).is_some(), first_age_s < limits::AUTH_SESSION_LIFETIME_S);
    assert!(auth.session(cookies.last().unwrap()).is_some());

    let stats = flusher.stats();
    let deleted = stats.recordings_deleted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(deleted > 30 * DAYS as u64, "retention deleted only {deleted} recordings");
    assert_eq!(stats.sync_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
    drop(flusher);
    let v = verify::check(&catalog, &data_dir, sim.wall_us()).unwrap();
    assert!(v.problems.is_empty(), "{:#?}", v.problems);
    assert!(v.recordings > 0 && v.bytes <= TOTAL_MAX_BYTES + 4 * bounds.max_bytes, "{v:?}");
    // The newest footage is there: the last day, on every stream.
    let newest = catalog.recordings().unwrap().iter().map(|(_, r)| r.wall_end_us).max().unwrap();
    assert!(newest >= sim.wall_us() - 2 * 3_600_000_000, "newest recording ends at {newest}");
}

/// Where the soak writes: memory when the machine has it (thousands of syncs), else `/tmp`.
pub(super) fn scratch() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() { shm.into() } else { std::env::temp_dir() }
}

//! Recording: frames in, segment files and catalog rows out, crash-safe, within retention.
//!
//! Threads: a small fixed pool of [`writers`] that take turns at every recorded stream
//! ([`stream::StreamRecorder`]), each fed by a bounded [`queue`] from ingest, and one flusher
//! thread ([`flusher::Flusher`]) that owns the grouped catalog commits and retention. Disk
//! I/O never runs on the async runtime. The queues' bytes come from one pool shared by every
//! stream (see [`queue`]); a fragment holds no frame, its frames written as they come (see
//! [`fragmenter`] and [`stream`]).
//!
//! Lifecycle: [`recovery::recover`] runs first, then [`Recorder::start`] (the flusher), then
//! [`Recorder::start_camera`] for each camera, at start or while the box runs. To stop one
//! camera, drop its streams' [`queue::FrameSender`]s (its ingest tasks do when they end) and
//! call [`Recorder::stop_camera`]: each of its recorders closes its fragment and segment and
//! leaves the writers, while the other cameras record on. To stop them all, drop every
//! sender and call [`Recorder::shutdown`]: the recorders close their files, the flusher syncs
//! and commits, and the threads exit.

#[cfg(test)]
mod crash_points;
pub mod flusher;
pub mod fragmenter;
pub mod gate;
pub mod holds;
#[cfg(test)]
mod holds_soak;
pub mod queue;
pub mod recovery;
pub mod retention;
mod schedule;
#[cfg(test)]
mod soak;
pub mod stream;
#[cfg(test)]
pub(crate) mod testing;
pub mod verify;
pub mod writers;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::BytePool;

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{info, warn};

use crate::base::StreamKey;
use crate::catalog::{Catalog, CatalogError};
use crate::clock::SharedClocks;
use crate::config::{Camera, Config, RecordMode};
use crate::limits;
use crate::preroll::{Admission, AdmissionStats, Caps, History, HistoryPool, HistoryStats, Mode, Trigger};

pub use flusher::FlusherStats;
pub use queue::{FrameSender, QueueStats};
pub use stream::{RecorderStats, stream_buffers_bytes};

/// One recorded stream's handles.
pub struct RecordedStream {
    pub key: StreamKey,
    pub stream_id: u32,
    pub sender: FrameSender,
    pub watch: RecordingWatch,
}

/// What the API and `/metrics` see of a recorded stream, and how events reach it.
#[derive(Clone)]
pub struct RecordingWatch {
    pub mode: RecordMode,
    /// Of event recordings: how far before the event they start.
    pub pre_roll_ms: u32,
    /// Of event recordings: how far after the event's end they go on.
    pub post_roll_ms: u32,
    /// What an event of its camera holds against retention, whatever the mode.
    pub hold: HoldPolicy,
    pub queue: Arc<QueueStats>,
    pub stats: Arc<RecorderStats>,
    /// Fired by events; the stream's recorder takes it (recording in events mode only;
    /// making footage durable early in every mode).
    pub trigger: Arc<Trigger>,
    pub admission: Arc<AdmissionStats>,
    /// The pre-roll history's counters, when there is a history.
    pub history: Option<Arc<HistoryStats>>,
}

/// Bytes written to flash since the recorder started, by what wrote them, for the flash wear
/// report (`/metrics`, the System page). Monotonic across cameras starting and stopping. The
/// catalog counts its own ([`crate::catalog::wear::CatalogWrites`]).
#[derive(Debug, Default)]
pub struct Wear {
    /// Video and audio: every fragment written to a segment file.
    pub recording_bytes: AtomicU64,
    /// When the recorder started (monotonic µs).
    pub started_mono_us: i64,
}

/// The footage an event of a camera holds, and for how long: the camera's pre-roll before
/// the event to its post-roll after its end, for `keep_days` from its arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldPolicy {
    pub before_ms: u32,
    pub after_ms: u32,
    pub keep_days: u32,
}

impl HoldPolicy {
    pub fn of(camera: &Camera) -> HoldPolicy {
        HoldPolicy {
            before_ms: camera.pre_roll_ms,
            after_ms: camera.post_roll_ms,
            keep_days: camera.keep_event_footage_days,
        }
    }

    /// The hold of an event at `time_us` (ending at `end_us`) that arrived at `received_us`;
    /// none when the camera keeps no event footage.
    pub fn hold(&self, time_us: i64, end_us: Option<i64>, received_us: i64) -> Option<crate::catalog::events::Hold> {
        if self.keep_days == 0 {
            return None;
        }
        let end_us = end_us.unwrap_or(time_us).max(time_us);
        Some(crate::catalog::events::Hold {
            from_us: time_us.saturating_sub(i64::from(self.before_ms) * 1000),
            to_us: end_us.saturating_add(i64::from(self.after_ms) * 1000),
            until_us: received_us.saturating_add(i64::from(self.keep_days) * 86_400_000_000),
        })
    }
}

/// What the API may ask of the recorder.
#[derive(Clone)]
pub struct RecorderHandle {
    flusher_tx: SyncSender<flusher::ToFlusher>,
}

impl RecorderHandle {
    /// Deletes a stream's closed recordings wholly within a range; returns (deleted, bytes,
    /// kept). Blocks until the flusher answers, at most [`limits::SHUTDOWN_TIMEOUT_MS`].
    pub fn delete_range(&self, stream_id: u32, from_us: i64, to_us: i64) -> Option<(u64, u64, u64)> {
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        self.flusher_tx.try_send(flusher::ToFlusher::DeleteRange { stream_id, from_us, to_us, reply }).ok()?;
        rx.recv_timeout(Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS)).ok()
    }
}

/// The running recorder.
pub struct Recorder {
    flusher_tx: SyncSender<flusher::ToFlusher>,
    flusher: JoinHandle<()>,
    writers: writers::Writers,
    /// Each recorded stream, set done when it has closed its files.
    streams: Vec<(StreamKey, Arc<writers::Done>)>,
    pub flusher_stats: Arc<FlusherStats>,
    /// What events hold against retention (the intake adds, the flusher keeps).
    pub holds: Arc<holds::Holds>,
    /// What retention waits for the archive to store (the archive keeps it).
    pub gate: Arc<gate::Gate>,
    /// What the recorders wrote.
    pub wear: Arc<Wear>,
    /// Bytes of pre-roll history across every stream.
    pub preroll: Arc<HistoryPool>,
    /// Bytes queued from ingest across every stream.
    pub ingest_pool: Arc<BytePool>,
    data_dir: PathBuf,
    require_sane_clock: bool,
    /// Every stream's segment bounds and pre-roll share, from the config's plan at start.
    bounds: fragmenter::SegmentBounds,
    history_shares: HistoryShares,
}

/// How the pre-roll pool is shared: each history gets a part of it in proportion to its
/// stream's frame ceiling (by default a main stream four times a sub stream, as their
/// bitrates go), at most its own cap, so one busy stream cannot starve the others.
#[derive(Clone, Copy, Debug)]
struct HistoryShares {
    stream_max_bytes: u64,
    total_bytes: u64,
    /// The weights of every history in the config's plan.
    weights: u64,
}

impl HistoryShares {
    fn plan(config: &Config) -> HistoryShares {
        let weights = config
            .cameras
            .iter()
            .filter(|c| c.pre_roll_ms > 0)
            .flat_map(|c| c.recorded_streams().map(move |s| (c, s)))
            .filter(|(_, (_, mode))| *mode == RecordMode::Events)
            .map(|(c, (kind, _))| c.frame_max_bytes(kind) as u64)
            .sum();
        HistoryShares {
            stream_max_bytes: config.preroll.stream_max_bytes,
            total_bytes: config.preroll.total_max_bytes,
            weights,
        }
    }

    /// The share of the history of `camera`'s stream `kind`.
    fn of(&self, camera: &Camera, kind: crate::base::StreamKind) -> usize {
        let w = camera.frame_max_bytes(kind) as u64;
        let share = u128::from(self.total_bytes) * u128::from(w) / u128::from(self.weights.max(w));
        (share as u64).min(self.stream_max_bytes) as usize
    }
}

/// One camera's recorded streams, taken out of the recorder to be waited for.
#[must_use = "wait for the recorders to close their files"]
pub struct CameraStop(Vec<(StreamKey, Arc<writers::Done>)>);

impl CameraStop {
    /// Waits (bounded by [`limits::SHUTDOWN_TIMEOUT_MS`], blocking) for the streams to close
    /// their files and leave the writers; returns whether every one did in time.
    pub fn wait(self) -> bool {
        join_by(self.0, Instant::now() + Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS))
    }
}

/// The segment bounds for a config: a segment is at most an eighth of a stream's share of
/// the retention caps, and a sixteenth of the data filesystem, so retention and a full disk
/// free space in small steps.
pub fn segment_bounds(config: &Config, stream_count: usize, fs_bytes: Option<u64>) -> fragmenter::SegmentBounds {
    let per_stream_total = config.retention.total_max_bytes / stream_count.max(1) as u64;
    let max_bytes = limits::SEGMENT_MAX_BYTES
        .min(config.retention.stream_max_bytes / 8)
        .min(per_stream_total / 8)
        .min(fs_bytes.map_or(u64::MAX, |b| b / 16 / stream_count.max(1) as u64))
        .max(64 << 10);
    fragmenter::SegmentBounds { max_duration_90k: limits::SEGMENT_MAX_DURATION_90K, max_bytes }
}

/// The segment bounds for every recorded stream of `config`, on `data_dir`'s filesystem.
fn planned_bounds(config: &Config, data_dir: &std::path::Path) -> fragmenter::SegmentBounds {
    let recorded = config.cameras.iter().flat_map(Camera::recorded_streams).count();
    let fs_bytes = crate::base::fs::disk_space(data_dir).map(|d| d.total_bytes);
    segment_bounds(config, recorded, fs_bytes)
}

impl Recorder {
    /// Starts the flusher; the cameras' recorders start with [`Recorder::start_camera`].
    /// Segment bounds and pre-roll shares follow every recorded stream of `config`.
    pub fn start(config: &Config, catalog: Arc<Catalog>, clocks: SharedClocks) -> Result<Recorder, CatalogError> {
        let data_dir: PathBuf = config.data_dir.clone();
        let holds = Arc::new(holds::Holds::new(catalog.event_holds(None, clocks.wall_us())?));
        let wear = Arc::new(Wear { started_mono_us: clocks.mono_us(), ..Wear::default() });
        let gate = Arc::new(gate::Gate::new(&config.archive));
        let f = flusher::Flusher::new(
            catalog,
            data_dir.clone(),
            Duration::from_secs(config.flush_interval_s),
            config.retention,
            clocks,
            holds.clone(),
        )?
        .with_gate(gate.clone());
        let flusher_stats = f.stats();
        let writers = writers::Writers::start(writers::count_for(config.ram_class_bytes));
        let (flusher_tx, flusher_rx) = std::sync::mpsc::sync_channel(limits::CATALOG_QUEUE_COMMANDS);
        let flusher = spawn("kp-flusher", move || f.run(flusher_rx));

        let bounds = planned_bounds(config, &data_dir);
        Ok(Recorder {
            flusher_tx,
            flusher,
            writers,
            streams: Vec::new(),
            flusher_stats,
            holds,
            gate,
            wear,
            preroll: Arc::new(HistoryPool::new(config.preroll.total_max_bytes as usize)),
            ingest_pool: BytePool::shared(config.ingest_pool_bytes()),
            data_dir,
            require_sane_clock: config.require_sane_clock,
            bounds,
            history_shares: HistoryShares::plan(config),
        })
    }

    /// Follows a new plan while the box runs (`config` with a camera added or removed): the
    /// ingest pool's ceiling follows the recorded streams' frame ceilings, and the segment
    /// bounds and pre-roll shares of streams started from now on follow the new set. The
    /// streams already recording keep theirs; the pools' ceilings hold the sum. The flusher
    /// keeps the config's retention caps from its next message on.
    pub fn replan(&mut self, config: &Config) {
        // Blocking at worst for one command's room in the flusher's queue.
        let _ = self.flusher_tx.send(flusher::ToFlusher::SetCaps(config.retention));
        self.bounds = planned_bounds(config, &self.data_dir);
        self.history_shares = HistoryShares::plan(config);
        self.ingest_pool.set_max_bytes(usize::try_from(config.ingest_pool_bytes()).unwrap_or(usize::MAX));
    }

    /// Hands each recorded stream of `camera` to the writers (none when the catalog cannot
    /// give every one of them its id).
    /// `live` gives each stream's live fanout, told where the recorder writes its frames.
    pub fn start_camera(
        &mut self,
        camera: &Camera,
        catalog: &Arc<Catalog>,
        live: impl Fn(&StreamKey) -> Option<Arc<crate::live::Fanout>>,
    ) -> Result<Vec<RecordedStream>, CatalogError> {
        let recorded: Vec<_> = camera
            .recorded_streams()
            .map(|(kind, mode)| {
                let key = StreamKey::new(&camera.name, kind);
                Ok((catalog.stream_id(&key)?, key, mode))
            })
            .collect::<Result<_, CatalogError>>()?;
        let mut started = Vec::new();
        for (stream_id, key, mode) in recorded {
            let (sender, receiver, queue) = queue::channel(&self.ingest_pool);
            let rec = stream::StreamRecorder::new(
                stream_id,
                format!("{}/{key}", recovery::RECORDINGS_DIR),
                self.data_dir.clone(),
                catalog.clone(),
                self.flusher_tx.clone(),
                fragmenter::Fragmenter::new(self.bounds, self.require_sane_clock),
            )
            .with_live(live(&key))
            .with_wear(self.wear.clone());
            let admission = admission_for(camera, mode, self.history_shares.of(camera, key.kind), &self.preroll);
            let watch = RecordingWatch {
                mode,
                pre_roll_ms: if mode == RecordMode::Events { camera.pre_roll_ms } else { 0 },
                post_roll_ms: if mode == RecordMode::Events { camera.post_roll_ms } else { 0 },
                hold: HoldPolicy::of(camera),
                queue,
                stats: rec.stats.clone(),
                trigger: admission.trigger().clone(),
                admission: admission.stats.clone(),
                history: admission.history().map(|h| h.stats.clone()),
            };
            let done = self.writers.add(rec.into_work(receiver, admission));
            self.streams.push((key.clone(), done));
            started.push(RecordedStream { key, stream_id, sender, watch });
        }
        Ok(started)
    }

    /// Takes `camera`'s recorders out of the running ones; the others record on. Its
    /// streams' `FrameSender`s dropped (its ingest stopped), [`CameraStop::wait`] waits for
    /// them to close their files.
    pub fn stop_camera(&mut self, camera: &str) -> CameraStop {
        let (of_camera, others) = self.streams.drain(..).partition(|(key, _)| key.of(camera));
        self.streams = others;
        CameraStop(of_camera)
    }

    /// Tells the catalog writer the box is stopping (see [`flusher::ToFlusher::Stopping`]);
    /// never waits: a full queue is drained soon, and then the final pass at the stop keeps
    /// the usual rules.
    pub fn stopping(&self) {
        let _ = self.flusher_tx.try_send(flusher::ToFlusher::Stopping);
    }

    /// The byte pools, by name as `/metrics` shows them: the recorder's, live view's GOPs,
    /// the event uploads' and, with live view on, the frames waiting for its pacers.
    pub fn pools(
        &self,
        events: &crate::events::Events,
        gops: &Arc<BytePool>,
        live_sending: Option<&Arc<BytePool>>,
    ) -> Vec<(&'static str, Arc<BytePool>)> {
        let mut pools = vec![
            ("ingest_queues", self.ingest_pool.clone()),
            ("live_gops", gops.clone()),
            ("event_uploads", events.upload_pool.clone()),
        ];
        pools.extend(live_sending.map(|p| ("live_sending", p.clone())));
        pools
    }

    /// A handle for the API: deletions go through the flusher, which owns retention's view of
    /// what exists.
    pub fn handle(&self) -> RecorderHandle {
        RecorderHandle { flusher_tx: self.flusher_tx.clone() }
    }

    /// Waits (bounded by [`limits::SHUTDOWN_TIMEOUT_MS`]) for the recorders to close their
    /// files, then has the flusher commit. Every `FrameSender` must be dropped first.
    pub fn shutdown(self) {
        let deadline = Instant::now() + Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS);
        // The flusher ends when every recorder's sender is gone: join it only if they are.
        let all_stopped = join_by(self.streams, deadline) && self.writers.stop(deadline);
        // Never block on a flusher stuck in a sync: ask, and wait only until the deadline.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        let flushed =
            self.flusher_tx.try_send(flusher::ToFlusher::Flush { reply: tx }).is_ok() && rx.recv_timeout(left).is_ok();
        if !flushed {
            warn!("the final catalog commit did not finish in time");
        }
        // API handles may still hold senders: tell the flusher to end rather than wait for them.
        let _ = self.flusher_tx.try_send(flusher::ToFlusher::Stop);
        drop(self.flusher_tx);
        if all_stopped && flushed {
            let _ = self.flusher.join();
        }
        let s = &self.flusher_stats;
        info!(
            catalog_commits = s.commits.load(Ordering::Relaxed),
            file_syncs = s.file_syncs.load(Ordering::Relaxed),
            recordings_deleted = s.recordings_deleted.load(Ordering::Relaxed),
            "recorder stopped"
        );
    }
}

/// A stream's admission: its mode, and for events with a pre-roll its history, allocated
/// here, before the stream starts.
fn admission_for(camera: &Camera, mode: RecordMode, max_bytes: usize, pool: &Arc<HistoryPool>) -> Admission {
    let trigger = Arc::new(Trigger::new(camera.post_roll_ms));
    let mode = match mode {
        RecordMode::Continuous => Mode::Continuous,
        RecordMode::Off => Mode::Off,
        RecordMode::Events => Mode::Events { pre_roll_ms: camera.pre_roll_ms, post_roll_ms: camera.post_roll_ms },
    };
    let history = match mode {
        Mode::Events { pre_roll_ms, .. } if pre_roll_ms > 0 => {
            let caps = Caps::for_pre_roll(pre_roll_ms, max_bytes);
            Some(History::new(caps, pool.clone()))
        }
        _ => None,
    };
    Admission::new(mode, history, trigger)
}

/// Waits for each stream to close its files by `deadline`; returns whether all did.
fn join_by(streams: Vec<(StreamKey, Arc<writers::Done>)>, deadline: Instant) -> bool {
    let mut all_stopped = true;
    for (key, done) in streams {
        if !done.wait_until(deadline) {
            warn!(stream = %key, "a recorder did not close its files in time");
            all_stopped = false;
        }
    }
    all_stopped
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(limits::THREAD_STACK_BYTES)
        .spawn(f)
        .expect("spawning the flusher thread")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_roll_shares_follow_the_stream_kind_and_never_pass_a_stream_cap() {
        use crate::base::StreamKind::{Main, Sub};
        let mut c = Config::demo("/d".into(), "127.0.0.1:8080".parse().unwrap());
        let cam = c.cameras[0].clone();
        c.cameras = (0..2)
            .map(|i| Camera {
                name: format!("c{i}"),
                record: RecordMode::Events,
                record_sub: RecordMode::Events,
                sub: Some(crate::config::Source::Builtin),
                ..cam.clone()
            })
            .collect();
        c.preroll.total_max_bytes = 10 << 20;
        c.preroll.stream_max_bytes = 64 << 20;
        let shares = HistoryShares::plan(&c);
        let cam = &c.cameras[0];
        assert_eq!((shares.of(cam, Main), shares.of(cam, Sub)), (4 << 20, 1 << 20), "4:1, the pool's 10 MiB in all");
        c.preroll.stream_max_bytes = 2 << 20;
        assert_eq!(HistoryShares::plan(&c).of(&c.cameras[0], Main), 2 << 20, "never past a stream's cap");
    }

    #[test]
    fn segments_are_an_eighth_of_the_smallest_cap_and_never_past_the_ceiling() {
        let mut c = Config::demo("/d".into(), "127.0.0.1:8080".parse().unwrap());
        c.retention.stream_max_bytes = u64::MAX;
        c.retention.total_max_bytes = u64::MAX;
        assert_eq!(segment_bounds(&c, 1, None).max_bytes, limits::SEGMENT_MAX_BYTES);
        assert_eq!(segment_bounds(&c, 1, None).max_duration_90k, limits::SEGMENT_MAX_DURATION_90K);
        c.retention.stream_max_bytes = 8 << 20;
        assert_eq!(segment_bounds(&c, 1, None).max_bytes, 1 << 20);
        c.retention.total_max_bytes = 16 << 20;
        assert_eq!(segment_bounds(&c, 8, None).max_bytes, 256 << 10);
        assert_eq!(segment_bounds(&c, 2, Some(64 << 20)).max_bytes, 1 << 20);
    }
}

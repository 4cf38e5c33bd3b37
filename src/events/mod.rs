//! Events from external analysis: intake (envelope + JPEG), durable storage, recording
//! triggers, holds on their footage, deletion, and the files' recovery.
//!
//! An event is acknowledged only once it is durable: its snapshot file is written under a
//! temporary name, synced, renamed and its directory synced; then one `Immediate` catalog
//! commit stores the revision, its idempotency key and its index rows. Writers take turns
//! (one lock), so a revision's number and a key's answer are decided once. A crash before
//! the commit leaves at most a snapshot file no revision names, which [`recover`] deletes.

pub mod envelope;
pub mod footage;
pub mod jpeg;
pub mod keyframe;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::{Semaphore, SemaphorePermit};
use tracing::warn;

use crate::base::fs::{create_dir_all, remove_file, sync_dir, write_synced};
use crate::base::{BytePool, Charge};
use crate::cameras::Cameras;
use crate::catalog::events::{EventFields, EventRecord, Hold, Planned, Snapshot};
use crate::catalog::{Catalog, CatalogError};
use crate::clock::SharedClocks;
use crate::limits;
use crate::record::holds::Holds;
use envelope::EnvelopeError;
use jpeg::JpegError;

/// Where snapshots live, under the data directory.
pub const EVENTS_DIR: &str = "events";

/// Why an event was not stored.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("bad envelope: {0}")]
    Envelope(#[from] EnvelopeError),
    #[error("bad snapshot: {0}")]
    Jpeg(#[from] JpegError),
    #[error("the snapshot is over {} bytes (EVENT_JPEG_MAX_BYTES)", limits::EVENT_JPEG_MAX_BYTES)]
    JpegTooLarge,
    #[error("no camera named {0}")]
    UnknownCamera(String),
    #[error("the event already has {} revisions, the most it may (EVENT_REVISIONS_MAX)", limits::EVENT_REVISIONS_MAX)]
    TooManyRevisions,
    #[error(
        "events being received fill their places or their memory (EVENT_UPLOADS_MAX, EVENT_UPLOADS_TOTAL_MAX_BYTES): try again"
    )]
    Busy,
    #[error("storing the event failed: {0}")]
    Storage(String),
}

impl From<CatalogError> for IntakeError {
    fn from(e: CatalogError) -> Self {
        IntakeError::Storage(e.to_string())
    }
}

/// The answer to a stored (or replayed) event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    pub id: u64,
    pub rev: u32,
    /// Its idempotency key was seen before: nothing new was stored.
    pub replayed: bool,
}

/// Counters of the intake.
#[derive(Debug, Default)]
pub struct EventStats {
    pub stored: AtomicU64,
    pub replayed: AtomicU64,
    pub refused: AtomicU64,
    pub snapshot_bytes: AtomicU64,
    pub triggers: AtomicU64,
}

/// One upload's place and the memory set aside for it, given back when dropped.
pub struct UploadSlot<'a> {
    _permit: SemaphorePermit<'a>,
    _charge: Charge,
}

/// The intake.
pub struct Events {
    catalog: Arc<Catalog>,
    data_dir: PathBuf,
    /// The running cameras, with the triggers of their streams recorded on events.
    cameras: Arc<Cameras>,
    /// Writers take turns (see [`Events::publish`]).
    writer: Arc<std::sync::Mutex<()>>,
    uploads: Semaphore,
    /// The bytes uploads hold together.
    pub upload_pool: Arc<BytePool>,
    /// Events kept and their snapshots' bytes, at most; the oldest go first.
    caps: (u64, u64),
    /// Live view, for subscribers' notices (none when turned off).
    live: Option<Arc<dyn NoticeSink>>,
    /// When events arrive.
    clocks: SharedClocks,
    /// What events hold against retention.
    holds: Arc<Holds>,
    /// Woken once a revision is stored (its MQTT outbox row with it).
    stored_wake: Option<Arc<tokio::sync::Notify>>,
    pub stats: EventStats,
}

impl Events {
    pub fn new(
        catalog: Arc<Catalog>,
        data_dir: PathBuf,
        cameras: Arc<Cameras>,
        live: Option<Arc<dyn NoticeSink>>,
        snapshots_max_bytes: u64,
        clocks: SharedClocks,
        holds: Arc<Holds>,
    ) -> Events {
        Events {
            catalog,
            data_dir,
            cameras,
            writer: Arc::default(),
            uploads: Semaphore::new(limits::EVENT_UPLOADS_MAX),
            upload_pool: Arc::new(BytePool::new(limits::EVENT_UPLOADS_TOTAL_MAX_BYTES)),
            caps: (limits::EVENTS_MAX, snapshots_max_bytes),
            live,
            clocks,
            holds,
            stored_wake: None,
            stats: EventStats::default(),
        }
    }

    /// Wakes `wake` once each revision is stored (the MQTT room, to publish it).
    pub fn with_stored_wake(mut self, wake: Arc<tokio::sync::Notify>) -> Events {
        self.stored_wake = Some(wake);
        self
    }

    /// What events hold against retention.
    pub fn holds(&self) -> &Arc<Holds> {
        &self.holds
    }

    /// A place for one upload whose body is at most `body_bytes` (twice that, for the body
    /// and its parts), or [`IntakeError::Busy`] at once.
    pub fn upload_slot(&self, body_bytes: usize) -> Result<UploadSlot<'_>, IntakeError> {
        let slot = self.uploads.try_acquire().ok().and_then(|permit| {
            let charge = self.upload_pool.charge(body_bytes.saturating_mul(2))?;
            Some(UploadSlot { _permit: permit, _charge: charge })
        });
        slot.ok_or_else(|| {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            IntakeError::Busy
        })
    }

    /// Checks, stores durably, triggers recording; answers only once it is durable.
    pub async fn publish(
        &self,
        principal: &str,
        envelope: &[u8],
        snapshot: Option<Bytes>,
    ) -> Result<Accepted, IntakeError> {
        let r = self.publish_inner(principal, envelope, snapshot).await;
        let counter = match &r {
            Ok(a) if a.replayed => &self.stats.replayed,
            Ok(_) => &self.stats.stored,
            Err(_) => &self.stats.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    async fn publish_inner(
        &self,
        principal: &str,
        envelope: &[u8],
        snapshot: Option<Bytes>,
    ) -> Result<Accepted, IntakeError> {
        let clocks = &*self.clocks;
        let (arrived_us, arrived_mono_us) = (clocks.wall_us(), clocks.mono_us());
        let e = envelope::parse(envelope, arrived_us)?;
        let triggers = self.cameras.triggers(&e.camera).ok_or_else(|| IntakeError::UnknownCamera(e.camera.clone()))?;
        let recorded = self.cameras.recorded_triggers(&e.camera);
        let hold = match e.record {
            true => self.cameras.hold_policy(&e.camera).and_then(|p| p.hold(e.time(), e.end_us, arrived_us)),
            false => None,
        };
        let snapshot = match snapshot {
            Some(b) if b.len() > limits::EVENT_JPEG_MAX_BYTES => return Err(IntakeError::JpegTooLarge),
            Some(b) => Some((jpeg::check(&b)?, b)),
            None => None,
        };
        let record = e.record;
        let time_us = e.time();
        // The writer's turn is taken and held inside the blocking task: it stays taken until
        // the commit is done even if this request is dropped meanwhile, so the next writer
        // never plans from a catalog a commit is about to change. Notices go out in turn too,
        // so subscribers see revisions in the order they were stored.
        let (writer, catalog, data_dir) = (self.writer.clone(), self.catalog.clone(), self.data_dir.clone());
        let (principal, live, caps) = (principal.to_string(), self.live.clone(), self.caps);
        let (holds, now_us) = (self.holds.clone(), arrived_us);
        let stored = tokio::task::spawn_blocking(move || {
            let _turn = writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let (accepted, stored) = store(&catalog, &data_dir, principal, e, arrived_us, snapshot, hold)?;
            if let (Some(r), Some(live)) = (&stored, &live) {
                live.publish(Notice::of(r));
            }
            if stored.is_some() {
                trim(&catalog, &data_dir, caps, &holds, now_us);
            }
            Ok::<_, IntakeError>((accepted, stored))
        });
        let (accepted, stored) = stored.await.map_err(|e| IntakeError::Storage(e.to_string()))??;
        if let (Some(_), Some(wake)) = (&stored, &self.stored_wake) {
            wake.notify_one();
        }
        if let Some(r) = &stored {
            self.stats.snapshot_bytes.fetch_add(r.snapshot.as_ref().map_or(0, |s| s.bytes), Ordering::Relaxed);
            if let Some(h) = r.hold {
                self.holds.add(&r.envelope.camera, h);
            }
        }
        // The event's moment on the monotonic clock: no later than now, and no earlier than
        // the history reaches back for late events.
        let at_mono_us = event_mono_us(arrived_us, arrived_mono_us, time_us);
        if record && !accepted.replayed {
            for t in triggers {
                t.fire(at_mono_us);
                self.stats.triggers.fetch_add(1, Ordering::Relaxed);
            }
        }
        if stored.is_some() {
            // The footage of its moment is made durable without waiting for the flush
            // interval; this answer does not wait for it.
            let streams = recorded.len() as u32;
            for t in recorded {
                t.ask_durable(at_mono_us, streams);
            }
        }
        Ok(accepted)
    }
}

impl Events {
    /// Deletes event `id` (an admin's request): every revision and snapshot, and its hold on
    /// its footage. Takes the writers' turn like a new event. Returns the deleted event's
    /// latest revision, none when there was no such event.
    pub async fn delete(&self, id: u64) -> Result<Option<EventRecord>, IntakeError> {
        let (writer, catalog, data_dir) = (self.writer.clone(), self.catalog.clone(), self.data_dir.clone());
        let (holds, now_us) = (self.holds.clone(), self.clocks.wall_us());
        let done = tokio::task::spawn_blocking(move || {
            let _turn = writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some((latest, files)) = catalog.delete_event(id)? else { return Ok(None) };
            remove_files(&data_dir, &files);
            if latest.hold.is_some() {
                reload_holds(&catalog, &holds, &latest.envelope.camera, now_us);
            }
            Ok::<_, IntakeError>(Some(latest))
        });
        done.await.map_err(|e| IntakeError::Storage(e.to_string()))?
    }
}

/// An event's moment on the monotonic clock, from its wall time and its arrival's: no
/// later than its arrival, and no earlier than [`limits::EVENT_BACKDATE_MAX_MS`] before it
/// (what the pre-roll history keeps beyond the pre-roll).
fn event_mono_us(arrived_wall_us: i64, arrived_mono_us: i64, event_wall_us: i64) -> i64 {
    let late_us = arrived_wall_us.saturating_sub(event_wall_us).clamp(0, limits::EVENT_BACKDATE_MAX_MS as i64 * 1000);
    arrived_mono_us - late_us
}

/// A stored event as live viewers are told of it (live view encodes it for its control
/// channel).
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub id: u64,
    pub rev: u32,
    pub camera: String,
    pub time_us: i64,
    pub labels: Vec<String>,
    pub score: Option<f32>,
    pub text: String,
    /// The revision has a snapshot (`/api/events/{id}/snapshot?rev={rev}`).
    pub has_snapshot: bool,
}

impl Notice {
    pub fn of(r: &EventRecord) -> Notice {
        let e = &r.envelope;
        Notice {
            id: r.id,
            rev: r.rev,
            camera: e.camera.clone(),
            time_us: e.time(),
            labels: e.labels.clone(),
            score: e.score,
            text: e.text.clone(),
            has_snapshot: r.snapshot.is_some(),
        }
    }
}

/// Where the notices of stored events go (live view). It never waits: a notice it has no
/// room for is its to drop and count (the event itself is stored).
pub trait NoticeSink: Send + Sync {
    fn publish(&self, notice: Notice);
}

/// Lets the oldest events go past the caps (count, snapshot bytes), then their files and
/// holds. A failure is logged: the event just stored stands, and the next one tries again.
fn trim(catalog: &Catalog, data_dir: &Path, (max_events, max_bytes): (u64, u64), holds: &Holds, now_us: i64) {
    match catalog.trim_events(max_events, max_bytes) {
        Ok(trimmed) => {
            remove_files(data_dir, &trimmed.files);
            for camera in &trimmed.held_cameras {
                reload_holds(catalog, holds, camera, now_us);
            }
        }
        Err(e) => warn!("letting old events go: {e}"),
    }
}

fn remove_files(data_dir: &Path, files: &[String]) {
    for rel in files {
        if let Err(e) = remove_file(&data_dir.join(rel)) {
            warn!("removing {rel}: {e}");
        }
    }
}

/// Builds `camera`'s holds again from the catalog, after one was released.
fn reload_holds(catalog: &Catalog, holds: &Holds, camera: &str, now_us: i64) {
    match catalog.event_holds(Some(camera), now_us) {
        Ok(rows) => holds.reload_camera(camera, rows),
        Err(e) => warn!("reading {camera}'s holds again (they stay as they were until the next start): {e}"),
    }
}

/// The snapshot file of revision `rev` of event `id`, relative to the data directory.
pub fn snapshot_path(id: u64, rev: u32) -> String {
    format!("{EVENTS_DIR}/{:04}/{id}-{rev}.jpg", id / 1000)
}

/// Plans, writes the snapshot, commits; returns the answer and what was stored (none when
/// replayed).
fn store(
    catalog: &Catalog,
    data_dir: &Path,
    principal: String,
    e: EventFields,
    received_us: i64,
    snapshot: Option<(jpeg::JpegInfo, Bytes)>,
    hold: Option<Hold>,
) -> Result<(Accepted, Option<EventRecord>), IntakeError> {
    let next = match catalog.plan_event(&principal, &e)? {
        Planned::Replay(n) => return Ok((Accepted { id: n.id, rev: n.rev, replayed: true }, None)),
        Planned::TooManyRevisions => return Err(IntakeError::TooManyRevisions),
        Planned::New(n) => n,
    };
    let snapshot = match snapshot {
        Some((info, bytes)) => {
            let rel = snapshot_path(next.id, next.rev);
            write_synced(&data_dir.join(&rel), &bytes).map_err(|err| IntakeError::Storage(format!("{rel}: {err}")))?;
            Some(Snapshot { path: rel, bytes: bytes.len() as u64, width: info.width, height: info.height })
        }
        None => None,
    };
    let r = EventRecord { id: next.id, rev: next.rev, principal, received_us, envelope: e, snapshot, hold };
    if let Err(err) = catalog.put_event(&r) {
        if let Some(s) = &r.snapshot {
            let _ = remove_file(&data_dir.join(&s.path));
        }
        return Err(err.into());
    }
    Ok((Accepted { id: next.id, rev: next.rev, replayed: false }, Some(r)))
}

/// Deletes snapshot files no revision names (a crash between the file and its commit) and
/// leftover temporary files; returns how many.
pub fn recover(catalog: &Catalog, data_dir: &Path) -> Result<u64, CatalogError> {
    let dir = data_dir.join(EVENTS_DIR);
    if !dir.exists() {
        // Made (and its entry synced) here, so a first snapshot's directory chain is durable.
        let made = create_dir_all(&dir).and_then(|()| sync_dir(data_dir));
        if let Err(e) = made {
            warn!("making {}: {e}", dir.display());
        }
        return Ok(0);
    }
    let mut orphans = Vec::new();
    let mut walk_error = None;
    let walked = crate::record::recovery::walk(&dir, data_dir, 1, &mut |rel| {
        let named = rel
            .rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".jpg"))
            .and_then(|stem| stem.split_once('-'))
            .and_then(|(id, rev)| Some((id.parse::<u64>().ok()?, rev.parse::<u32>().ok()?)));
        let keep = match named {
            Some((id, rev)) => match catalog.snapshot_named(id, rev, rel) {
                Ok(k) => k,
                Err(e) => {
                    walk_error.get_or_insert(e);
                    true
                }
            },
            None => false,
        };
        if !keep {
            orphans.push(rel.to_string());
        }
    });
    if let Err(e) = walked {
        warn!("looking through event snapshots: {e}");
    }
    if let Some(e) = walk_error {
        return Err(e);
    }
    for rel in &orphans {
        if let Err(e) = std::fs::remove_file(data_dir.join(rel)) {
            warn!("removing {rel}: {e}");
        }
    }
    Ok(orphans.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_event_counts_from_its_own_time_up_to_the_backdate_ceiling() {
        let back = limits::EVENT_BACKDATE_MAX_MS as i64 * 1000;
        assert_eq!(event_mono_us(10_000_000, 500_000_000, 9_500_000), 499_500_000, "half a second late");
        assert_eq!(event_mono_us(10_000_000, 500_000_000, 0), 500_000_000 - back, "no earlier than the ceiling");
        assert_eq!(event_mono_us(10_000_000, 500_000_000, 99_000_000), 500_000_000, "a future time is now");
        assert_eq!(event_mono_us(i64::MAX, 5, i64::MIN), 5 - back, "no overflow");
    }

    #[tokio::test]
    async fn uploads_past_their_ceiling_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        let events = Events::new(
            catalog,
            dir.path().into(),
            Arc::default(),
            None,
            u64::MAX,
            crate::clock::RealClocks::shared(),
            Arc::default(),
        );
        let slots: Vec<_> = (0..limits::EVENT_UPLOADS_MAX).map(|_| events.upload_slot(1000).unwrap()).collect();
        assert!(matches!(events.upload_slot(1000), Err(IntakeError::Busy)), "every place taken");
        drop(slots);
        let largest = events.upload_slot(limits::EVENT_INTAKE_BODY_MAX_BYTES).unwrap();
        let room = limits::EVENT_UPLOADS_TOTAL_MAX_BYTES - 2 * limits::EVENT_INTAKE_BODY_MAX_BYTES;
        let rest = events.upload_slot(room / 2).unwrap();
        assert_eq!(events.upload_pool.held_bytes(), limits::EVENT_UPLOADS_TOTAL_MAX_BYTES - room % 2);
        assert!(matches!(events.upload_slot(1000), Err(IntakeError::Busy)), "the memory is full");
        drop((largest, rest));
        assert_eq!(events.upload_pool.held_bytes(), 0);
        assert!(events.upload_slot(1000).is_ok());
    }
}

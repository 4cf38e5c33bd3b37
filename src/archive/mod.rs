//! The offsite archive: closed recordings uploaded to S3-compatible buckets
//! (`[archive.<id>]`), each target on a task of its own on the daemon's runtime, so a target
//! that is down, slow or refusing never touches recording: it only reads the catalog and the
//! segment files, and writes its own rows (`catalog::archive`).
//!
//! A target walks the catalog's recordings from its mark (every recording below it is
//! archived, gone, or not the target's), oldest first, and uploads the first closed one it
//! takes that is not archived yet: whole when it is at most [`limits::ARCHIVE_PART_BYTES`],
//! else in parts of that size, each part's ETag noted as it is confirmed, so a restart or an
//! outage resumes at the first part missing. Its key is
//! `<prefix>/recordings/<camera>/<stream>/<YYYY-MM-DD>/<recording id>.mp4` (the day of its
//! start, UTC);
//! an idle target looks again every [`limits::ARCHIVE_IDLE_POLL_MS`];
//! the bytes are the file's committed length, so the object is the local file as the catalog
//! knows it. Failures wait by their kind (`s3::Kind`): the network or a busy server doubles
//! its wait up to [`limits::ARCHIVE_RETRY_MAX_MS`]; refused keys, the box's clock or a full
//! bucket wait [`limits::ARCHIVE_REFUSED_WAIT_MS`] and are shown until they clear.
//!
//! Events go first, before recordings: each event of a camera the target takes is stored
//! as its latest revision, its snapshot as `<prefix>/events/<camera>/<YYYY-MM-DD>/<event
//! id>.jpg` (the day of its moment), and described in its camera's events manifest. A later
//! revision is stored again over it; an events' mark passes an event
//! [`limits::ARCHIVE_EVENTS_LATE_MS`] after its last revision.
//!
//! `s3.rs` is one bucket's client (signed requests, checksums, its failures sorted by what
//! the box does next); `xml.rs` reads S3's answers.

pub mod manifest;
pub mod read;
pub mod s3;
pub mod xml;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use md5::Digest as _;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::base::stream::{StreamKey, StreamKind};
use crate::catalog::archive::{Archived, Backlog, Take, Upload};
use crate::catalog::events::EventRecord;
use crate::catalog::rows::RecordingRow;
use crate::catalog::{Catalog, CatalogError};
use crate::clock::SharedClocks;
use crate::config::archive::Streams;
use crate::config::{ArchiveTarget, Camera};
use crate::limits;
use crate::record::gate::Gate;
use s3::{Bucket, Kind, S3Error};

/// Why one step of a target's work failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("the bucket: {0}")]
    S3(#[from] S3Error),
    #[error("the catalog: {0}")]
    Catalog(#[from] CatalogError),
    #[error("reading {path}: {why}")]
    File { path: String, why: String },
    #[error("the manifest {key}: {why}")]
    Manifest { key: String, why: String },
    /// A read of the bucket past one of its ceilings.
    #[error("{0}")]
    Walk(String),
}

impl ArchiveError {
    fn kind(&self) -> Kind {
        match self {
            ArchiveError::S3(e) => e.kind(),
            _ => Kind::Later,
        }
    }
}

/// What a target is doing, for the UI, the API and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TargetStatus {
    pub id: String,
    /// Where it goes: `endpoint/bucket/prefix`.
    pub place: String,
    /// `uploading`, `idle`, `waiting` (after a failure) or `stopped`.
    pub state: &'static str,
    /// The last failure, until a step succeeds.
    pub error: Option<String>,
    /// What the failure means: `later`, `credentials`, `clock`, `full`, `missing`, `refused`.
    pub error_kind: Option<&'static str>,
    /// How far the box's clock is ahead of the server's (behind when negative), when a
    /// refusal for the box's clock said so.
    pub clock_off_s: Option<i64>,
    pub uploaded_objects: u64,
    pub uploaded_bytes: u64,
    /// Events stored (each revision stored counts), with their snapshots.
    pub uploaded_events: u64,
    pub failures: u64,
    /// What waits to be uploaded, as of the last look.
    pub backlog: Backlog,
    /// With `before_delete`: recordings deleted locally before it stored them (the disk's
    /// reserve, or its backlog past `backlog_max`).
    pub deleted_unarchived: Option<u64>,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Later => "later",
        Kind::Credentials => "credentials",
        Kind::Clock => "clock",
        Kind::Full => "full",
        Kind::Missing => "missing",
        Kind::Refused => "refused",
    }
}

/// One target and what it needs.
struct Target {
    config: ArchiveTarget,
    bucket: Arc<Bucket>,
    /// Pre- and post-roll of each camera, for `what = "events"`: (name, before µs, after µs).
    rolls: Vec<(String, i64, i64)>,
    status: Mutex<TargetStatus>,
    /// When its manifests were last written.
    described: Mutex<Option<tokio::time::Instant>>,
    /// When its cap lets the next request go.
    next_send: Mutex<Option<tokio::time::Instant>>,
    /// The event whose snapshot could not be read, and how many times.
    snapshot_failed: Mutex<Option<(u64, u32)>>,
}

/// The archive's targets and their tasks.
pub struct Archive {
    catalog: Arc<Catalog>,
    data_dir: PathBuf,
    clocks: SharedClocks,
    /// What local retention waits for.
    gate: Arc<Gate>,
    targets: Mutex<Vec<Running>>,
    /// The box's stop, for the tasks of targets started while it runs.
    shutdown: Mutex<Option<watch::Receiver<bool>>>,
}

/// A target and its tasks (its uploads; its old days' deletion, with `keep_days`).
type Running = (Arc<Target>, tokio::task::JoinHandle<()>, Option<tokio::task::JoinHandle<()>>);

impl Archive {
    pub fn new(catalog: Arc<Catalog>, data_dir: PathBuf, clocks: SharedClocks, gate: Arc<Gate>) -> Arc<Archive> {
        Arc::new(Archive { catalog, data_dir, clocks, gate, targets: Mutex::default(), shutdown: Mutex::default() })
    }

    /// Starts a task for each of `targets` (`cameras` give the events' pre- and post-rolls).
    /// Must be called on the runtime the tasks run on.
    pub async fn start(
        self: &Arc<Archive>,
        targets: &[ArchiveTarget],
        cameras: &[Camera],
        shutdown: watch::Receiver<bool>,
    ) {
        *self.shutdown.lock().expect("lock") = Some(shutdown);
        // Targets removed while the box was stopped (or with a change that restarted it).
        match self.catalog.archive_targets() {
            Ok(known) => {
                for id in known.iter().filter(|id| !targets.iter().any(|t| t.id == **id)) {
                    if let Err(e) = self.catalog.forget_archive_target(id) {
                        warn!(target = id, "archive: forgetting a removed target: {e}");
                    }
                }
            }
            Err(e) => warn!("archive: the targets the catalog knows: {e}"),
        }
        self.set_targets(targets, cameras).await;
    }

    /// Follows a config change while the box runs: a target whose settings (or whose
    /// cameras' pre- and post-rolls) changed starts again, a new one starts, a removed one
    /// stops and the catalog forgets what it did. The others, and recording, go on.
    pub async fn set_targets(self: &Arc<Archive>, targets: &[ArchiveTarget], cameras: &[Camera]) {
        let Some(shutdown) = self.shutdown.lock().expect("lock").clone() else { return };
        let rolls: Vec<_> = cameras
            .iter()
            .map(|c| (c.name.clone(), i64::from(c.pre_roll_ms) * 1000, i64::from(c.post_roll_ms) * 1000))
            .collect();
        self.gate.set_targets(targets);
        let stopping: Vec<Running> = {
            let mut running = self.targets.lock().expect("lock");
            let (keep, stop) = std::mem::take(&mut *running)
                .into_iter()
                // (The cameras' rolls matter only to a target of events.)
                .partition(|(t, _, _)| {
                    targets.iter().any(|n| *n == t.config) && (!t.config.events_only || t.rolls == rolls)
                });
            *running = keep;
            stop
        };
        for (t, run, sweep) in stopping {
            // Stopped, and waited for: nothing it does lands after what follows.
            run.abort();
            let _ = run.await;
            if let Some(s) = sweep {
                s.abort();
                let _ = s.await;
            }
            info!(target = t.config.id, "archive target stopped");
            // Removed, or now another bucket or prefix: what it did there is not what it does
            // next (everything is archived again, to the new place).
            let elsewhere = |n: &ArchiveTarget| {
                n.id == t.config.id
                    && n.place.endpoint == t.config.place.endpoint
                    && n.place.bucket == t.config.place.bucket
                    && n.prefix == t.config.prefix
            };
            if !targets.iter().any(elsewhere) {
                self.forget(&t).await;
            }
        }
        let mut running = self.targets.lock().expect("lock");
        for config in targets {
            if running.iter().any(|(t, _, _)| t.config.id == config.id) {
                continue;
            }
            let bucket = match Bucket::new(config.place.clone()) {
                Ok(b) => Arc::new(b),
                Err(e) => {
                    warn!(target = config.id, "archive target not started: {e}");
                    // Retention does not wait for a target that does not run.
                    self.gate.forget(&config.id);
                    continue;
                }
            };
            // A mark row from the start: what a deleted recording leaves is found by it.
            if let Err(e) =
                self.catalog.archive_mark(&config.id).and_then(|m| self.catalog.set_archive_mark(&config.id, m))
            {
                warn!(target = config.id, "archive mark: {e}");
            }
            let place = format!(
                "{}/{}/{}",
                config.place.endpoint.as_str().trim_end_matches('/'),
                config.place.bucket,
                config.prefix
            );
            let status = TargetStatus { id: config.id.clone(), place, state: "idle", ..TargetStatus::default() };
            let t = Arc::new(Target {
                config: config.clone(),
                bucket,
                rolls: rolls.clone(),
                status: Mutex::new(status),
                described: Mutex::new(None),
                next_send: Mutex::new(None),
                snapshot_failed: Mutex::new(None),
            });
            let task = tokio::spawn(self.clone().run(t.clone(), shutdown.clone()));
            let sweep = config.keep_days.map(|_| tokio::spawn(self.clone().sweeping(t.clone(), shutdown.clone())));
            running.push((t, task, sweep));
        }
    }

    /// Forgets what `t` did: its multipart uploads under way are given up in its bucket (so
    /// their parts are not kept there), then its catalog rows go.
    async fn forget(&self, t: &Target) {
        let id = t.config.id.as_str();
        match self.catalog.archive_uploads(id) {
            Ok(uploads) => {
                for u in uploads {
                    if let Err(e) = t.bucket.abort_upload(&u.key, &u.id, self.clocks.wall_us()).await {
                        warn!(target = id, key = u.key, "archive: giving up an upload: {e}");
                    }
                }
            }
            Err(e) => warn!(target = id, "archive: its uploads under way: {e}"),
        }
        if let Err(e) = self.catalog.forget_archive_target(id) {
            warn!(target = id, "archive: forgetting a removed target: {e}");
        }
    }

    /// A reader of target `id`'s bucket, and the target's own prefix.
    pub fn reader(&self, id: &str) -> Option<(read::Reader, String)> {
        let targets = self.targets.lock().expect("lock");
        let (t, _, _) = targets.iter().find(|(t, _, _)| t.config.id == id)?;
        Some((read::Reader::new(t.bucket.clone(), self.clocks.clone()), t.config.prefix.clone()))
    }

    /// The targets' ids.
    pub fn ids(&self) -> Vec<String> {
        self.targets.lock().expect("lock").iter().map(|(t, _, _)| t.config.id.clone()).collect()
    }

    /// What each target is doing.
    pub fn status(&self) -> Vec<TargetStatus> {
        let targets = self.targets.lock().expect("lock");
        targets
            .iter()
            .map(|(t, _, _)| TargetStatus {
                deleted_unarchived: self.gate.deleted_unarchived(&t.config.id),
                ..t.status.lock().expect("lock").clone()
            })
            .collect()
    }

    async fn run(self: Arc<Archive>, t: Arc<Target>, mut shutdown: watch::Receiver<bool>) {
        let mut failures = 0u32;
        let mut looked: Option<tokio::time::Instant> = None;
        loop {
            if *shutdown.borrow() {
                break;
            }
            if looked.is_none_or(|l| l.elapsed() >= Duration::from_millis(limits::ARCHIVE_BACKLOG_LOOK_MS)) {
                looked = Some(tokio::time::Instant::now());
                match self.backlog(&t) {
                    Ok(b) => t.status.lock().expect("lock").backlog = b,
                    Err(e) => warn!(target = t.config.id, "archive backlog: {e}"),
                }
            }
            let wait = match self.step(&t).await {
                Ok(true) => {
                    failures = 0;
                    let mut s = t.status.lock().expect("lock");
                    (s.state, s.error, s.error_kind) = ("uploading", None, None);
                    continue;
                }
                Ok(false) => {
                    failures = 0;
                    let mut s = t.status.lock().expect("lock");
                    (s.state, s.error, s.error_kind) = ("idle", None, None);
                    Duration::from_millis(limits::ARCHIVE_IDLE_POLL_MS)
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let kind = e.kind();
                    let wait = match kind {
                        Kind::Later | Kind::Missing => {
                            let ms = limits::ARCHIVE_RETRY_MIN_MS.saturating_mul(1 << failures.min(16));
                            Duration::from_millis(ms.min(limits::ARCHIVE_RETRY_MAX_MS))
                        }
                        _ => Duration::from_millis(limits::ARCHIVE_REFUSED_WAIT_MS),
                    };
                    let mut s = t.status.lock().expect("lock");
                    if s.error.as_deref() != Some(&e.to_string()) {
                        warn!(target = t.config.id, "archive: {e}; again in {} s", wait.as_secs());
                    }
                    if let ArchiveError::S3(S3Error::Clock { off_s }) = &e {
                        s.clock_off_s = Some(*off_s);
                    }
                    (s.state, s.error, s.error_kind) = ("waiting", Some(e.to_string()), Some(kind_name(kind)));
                    s.failures += 1;
                    wait
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
        }
        t.status.lock().expect("lock").state = "stopped";
    }

    /// With `keep_days`: `t`'s old days deleted every [`limits::ARCHIVE_SWEEP_EVERY_MS`], on
    /// a task of its own beside the uploads; a pass cut short by its ceiling goes on at once,
    /// one that failed a while later.
    async fn sweeping(self: Arc<Archive>, t: Arc<Target>, mut shutdown: watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            let wait = match self.sweep(&t).await {
                Ok(true) => Duration::from_millis(limits::ARCHIVE_SWEEP_EVERY_MS),
                Ok(false) => Duration::ZERO,
                Err(e) => {
                    warn!(target = t.config.id, "archive: deleting old days: {e}");
                    Duration::from_millis(limits::ARCHIVE_RETRY_MAX_MS)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// One step of `t`'s work: the next recording it takes uploaded (true), or nothing to do.
    async fn step(&self, t: &Target) -> Result<bool, ArchiveError> {
        let id = t.config.id.as_str();
        let every = Duration::from_millis(limits::ARCHIVE_DESCRIBE_EVERY_MS);
        if t.described.lock().expect("lock").is_none_or(|d| d.elapsed() >= every) {
            self.describe(t).await?;
        }
        // An event is small and is what someone will look for: it goes before recordings.
        if self.step_events(t).await? {
            return Ok(true);
        }
        let streams = self.catalog.streams()?;
        let mut mark = self.catalog.archive_mark(id)?;
        let mut settled_upto = mark;
        let mut all_settled = true;
        let mut next = mark;
        for _ in 0..limits::ARCHIVE_SCAN_PAGES {
            let rows = self.catalog.recordings_from(next, limits::ARCHIVE_SCAN_ROWS)?;
            let Some(last) = rows.last().map(|(id, _)| *id) else { break };
            for (rec, row) in &rows {
                let key = streams.iter().find(|(s, _)| *s == row.stream_id).and_then(|(_, n)| StreamKey::parse(n));
                // An open recording is not settled, whatever the target takes of it: it may
                // be a camera's the target does not know yet, or get an event.
                let settled = match &key {
                    _ if row.open => false,
                    None => true,
                    Some(key) => match self.take(t, key, row)? {
                        Take::Yes if self.catalog.archived(id, *rec)?.is_some() => true,
                        Take::Yes => {
                            self.advance(id, &mut mark, settled_upto)?;
                            self.upload(t, *rec, row, key).await?;
                            return Ok(true);
                        }
                        Take::Maybe => false,
                        Take::No => true,
                    },
                };
                all_settled &= settled;
                if all_settled {
                    settled_upto = rec + 1;
                }
            }
            next = last + 1;
            if rows.len() < limits::ARCHIVE_SCAN_ROWS {
                break;
            }
        }
        self.advance(id, &mut mark, settled_upto)?;
        // Nothing to upload: what was uploaded goes into its manifests now.
        self.describe(t).await?;
        Ok(false)
    }

    /// One event of `t`'s stored (true): the first from its events' mark that `t` takes and
    /// that is not archived at its latest revision. The mark passes the events `t` does not
    /// take, and those stored at their latest revision [`limits::ARCHIVE_EVENTS_LATE_MS`]
    /// after it came (a sender revises an event soon, if at all).
    async fn step_events(&self, t: &Target) -> Result<bool, ArchiveError> {
        let id = t.config.id.as_str();
        let mark = self.catalog.archive_event_mark(id)?;
        let late_us = limits::ARCHIVE_EVENTS_LATE_MS as i64 * 1000;
        let (next, settled_upto) =
            self.catalog.archive_next_event(id, (self.clocks.wall_us(), late_us), |e| self.takes_event(t, e))?;
        if settled_upto > mark {
            self.catalog.set_archive_event_mark(id, settled_upto)?;
        }
        match next {
            Some(e) => self.upload_event(t, &e).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Whether `t` archives event `e`: one of its cameras', of a day it keeps.
    fn takes_event(&self, t: &Target, e: &EventRecord) -> bool {
        let camera = e.envelope.camera.as_str();
        let c = &t.config;
        // A name fit for a key, as every camera's is (the intake takes only known cameras).
        let named = crate::config::camera_name_ok(camera);
        let camera_ok = c.cameras.is_empty() || c.cameras.iter().any(|n| **n == *camera);
        let kept = self.cutoff(t).is_none_or(|cutoff| utc_day(e.envelope.time()) >= cutoff);
        named && camera_ok && kept
    }

    /// Stores event `e` in `t`'s bucket: its snapshot, then its entry to describe.
    async fn upload_event(&self, t: &Target, e: &EventRecord) -> Result<(), ArchiveError> {
        let camera = e.envelope.camera.as_str();
        let day = utc_day(e.envelope.time());
        let now = || self.clocks.wall_us();
        let mut snapshot = None;
        if let Some(s) = &e.snapshot {
            let key = event_key(&t.config.prefix, camera, &day, e.id);
            let len = s.bytes.min(limits::EVENT_JPEG_MAX_BYTES as u64);
            match read_range(self.data_dir.join(&s.path), 0, len).await {
                Ok(body) => {
                    let etag = self.pace(t, len, || t.bucket.put(&key, body, now())).await?;
                    snapshot =
                        Some(manifest::SnapshotEntry { key, bytes: len, etag, width: s.width, height: s.height });
                }
                // Its file went with the event (trimmed or deleted meanwhile): it goes without
                // it. While the event is there, its file is tried again, up to
                // ARCHIVE_SNAPSHOT_TRIES times: a file that cannot be read (a bad sector) must
                // not hold back every event and recording behind it.
                Err(why) => {
                    let tries = {
                        let mut failed = t.snapshot_failed.lock().expect("lock");
                        let tries = failed.filter(|(id, _)| *id == e.id).map_or(1, |(_, n)| n + 1);
                        *failed = Some((e.id, tries));
                        tries
                    };
                    let there = self.catalog.event(e.id)?.is_some_and(|now| now.rev == e.rev);
                    if there && tries < limits::ARCHIVE_SNAPSHOT_TRIES {
                        return Err(why);
                    }
                    if there {
                        warn!(
                            target = t.config.id,
                            event = e.id,
                            "archive: the event goes without its snapshot, unread {tries} times: {why}"
                        );
                    } else {
                        warn!(target = t.config.id, event = e.id, "archive: the event went with its snapshot: {why}");
                    }
                }
            }
        }
        let stored = snapshot.as_ref().map(|s| s.key.clone());
        let entry = serde_json::to_vec(&manifest::EventEntry::of(e, snapshot)).unwrap_or_default();
        let stream = manifest::events_stream(camera);
        self.catalog.set_archived_event(&t.config.id, e.id, e.rev, (&stream, &day, &entry))?;
        t.status.lock().expect("lock").uploaded_events += 1;
        info!(target = t.config.id, event = e.id, rev = e.rev, snapshot = stored, "event archived");
        Ok(())
    }

    /// Writes the manifests of what `t` archived and no manifest names yet: each stream's
    /// day, its last part rewritten while it has room, the next part started when not.
    async fn describe(&self, t: &Target) -> Result<(), ArchiveError> {
        let id = t.config.id.as_str();
        let now = || self.clocks.wall_us();
        *t.described.lock().expect("lock") = Some(tokio::time::Instant::now());
        for ((stream, day), entries) in
            self.catalog.undescribed(id, limits::ARCHIVE_DESCRIBE_DAYS, limits::ARCHIVE_DESCRIBE_BYTES)?
        {
            let dir = format!("{}/manifests/{stream}/{day}/", t.config.prefix);
            let parts = t.bucket.list_pages(&dir, None, limits::ARCHIVE_LIST_PAGES_MAX, &now).await?.objects;
            let last = parts
                .iter()
                .filter_map(|o| Some((o.key.strip_prefix(&dir)?.strip_suffix(".json")?.parse::<u32>().ok()?, o.size)))
                .max();
            let fresh = |part: u32| manifest::Manifest {
                version: manifest::VERSION,
                box_id: self.catalog.box_id().unwrap_or_default(),
                prefix: t.config.prefix.clone(),
                stream: stream.clone(),
                day: day.clone(),
                part,
                recordings: Vec::new(),
                events: Vec::new(),
            };
            let mut m = match last {
                Some((n, size)) if size < limits::ARCHIVE_MANIFEST_PART_BYTES as u64 => {
                    let key = manifest::key(&t.config.prefix, &stream, &day, n);
                    let bytes = t.bucket.get(&key, None, limits::ARCHIVE_MANIFEST_MAX_BYTES, now()).await?;
                    let read = manifest::decode(&bytes).and_then(|m| {
                        let ours = m.part == n && m.stream == stream && m.day == day && m.prefix == t.config.prefix;
                        if ours { Ok(m) } else { Err("it names another part, stream, day or prefix".into()) }
                    });
                    match read {
                        Ok(m) => m,
                        Err(why) => {
                            // Not one this box can add to: it stays as it is, and the day
                            // goes on in the next part.
                            warn!(target = id, key, "archive manifest left as it is: {why}");
                            fresh(next_part(n)?)
                        }
                    }
                }
                Some((n, _)) => fresh(next_part(n)?),
                None => fresh(0),
            };
            let mut size = manifest::encode(&m).len();
            let mut in_part = Vec::new();
            let of_events = stream.rsplit('/').next() == Some(manifest::EVENTS);
            for (rec, json) in entries {
                let entry = if of_events {
                    serde_json::from_slice(&json).map(Described::Event)
                } else {
                    serde_json::from_slice(&json).map(Described::Recording)
                };
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        warn!(target = id, rec, "archive manifest entry dropped: {e}");
                        self.catalog.described(id, &stream, &day, &[rec])?;
                        continue;
                    }
                };
                let empty = m.recordings.is_empty() && m.events.is_empty();
                if !empty && size + json.len() > limits::ARCHIVE_MANIFEST_PART_BYTES {
                    self.put_manifest(t, &m, &in_part).await?;
                    m = fresh(next_part(m.part)?);
                    size = manifest::encode(&m).len();
                    in_part.clear();
                }
                // An entry again (an event's later revision) takes the place of the first.
                match entry {
                    Described::Recording(e) => {
                        m.recordings.retain(|r| r.id != e.id);
                        m.recordings.push(e);
                    }
                    Described::Event(e) => {
                        m.events.retain(|r| r.id != e.id);
                        m.events.push(e);
                    }
                }
                size += json.len() + 1;
                in_part.push(rec);
            }
            self.put_manifest(t, &m, &in_part).await?;
        }
        Ok(())
    }

    /// With `keep_days`, deletes the days of `t`'s prefix older than that: their manifests
    /// first (so none names an object gone), then their recordings, at most
    /// [`limits::ARCHIVE_SWEEP_DELETES_MAX`] objects a pass. Returns whether it is done.
    async fn sweep(&self, t: &Target) -> Result<bool, ArchiveError> {
        let Some(cutoff) = self.cutoff(t) else { return Ok(true) };
        let now = || self.clocks.wall_us();
        let p = &t.config.prefix;
        let mut budget = limits::ARCHIVE_SWEEP_DELETES_MAX;
        // Each tree: its root, then its levels above the days (camera and stream; the
        // events', camera only).
        let trees = [(format!("{p}/manifests/"), 2), (format!("{p}/recordings/"), 2), (format!("{p}/events/"), 1)];
        for (root, levels) in trees {
            let mut dirs = vec![root];
            for _ in 0..levels {
                let mut below = Vec::new();
                for d in &dirs {
                    below.extend(self.dirs(t, d).await?);
                }
                dirs = below;
            }
            for d in &dirs {
                for day_dir in self.dirs(t, d).await? {
                    let day = day_dir.strip_prefix(d.as_str()).unwrap_or_default().trim_end_matches('/');
                    if !is_day(day) || day >= cutoff.as_str() {
                        continue;
                    }
                    let listed = t.bucket.list_pages(&day_dir, None, 1, &now).await?;
                    for o in &listed.objects {
                        if budget == 0 {
                            info!(target = t.config.id, "archive: old days' deletion goes on in another pass");
                            return Ok(false);
                        }
                        t.bucket.delete(&o.key, now()).await?;
                        budget -= 1;
                    }
                    if listed.next.is_some() {
                        // More of the day than one page: the next pass lists it again.
                        return Ok(false);
                    }
                    info!(target = t.config.id, day_dir, "archive day deleted (keep_days)");
                }
            }
        }
        Ok(true)
    }

    /// With `keep_days`, the first day `t` keeps (UTC).
    fn cutoff(&self, t: &Target) -> Option<String> {
        let days = t.config.keep_days?;
        Some(utc_day(self.clocks.wall_us().saturating_sub(i64::from(days) * 86_400_000_000)))
    }

    /// The directories (common prefixes) just below `dir`, at most
    /// [`limits::ARCHIVE_LIST_PAGES_MAX`] pages of them.
    async fn dirs(&self, t: &Target, dir: &str) -> Result<Vec<String>, S3Error> {
        let now = || self.clocks.wall_us();
        Ok(t.bucket.list_pages(dir, Some("/"), limits::ARCHIVE_LIST_PAGES_MAX, &now).await?.prefixes)
    }

    /// Stores manifest `m`, then notes `recordings` described.
    async fn put_manifest(&self, t: &Target, m: &manifest::Manifest, recordings: &[u64]) -> Result<(), ArchiveError> {
        let key = manifest::key(&t.config.prefix, &m.stream, &m.day, m.part);
        let body = manifest::encode(m);
        if body.len() > limits::ARCHIVE_MANIFEST_MAX_BYTES {
            return Err(ArchiveError::Manifest { key, why: format!("{} bytes, over its ceiling", body.len()) });
        }
        t.bucket.put(&key, Bytes::from(body), self.clocks.wall_us()).await?;
        self.catalog.described(&t.config.id, &m.stream, &m.day, recordings)?;
        Ok(())
    }

    /// What `t` has yet to upload, from its mark; what it may still want goes to the gate
    /// local retention waits at.
    fn backlog(&self, t: &Target) -> Result<Backlog, CatalogError> {
        let id = t.config.id.as_str();
        let streams = self.catalog.streams()?;
        let mark = self.catalog.archive_mark(id)?;
        let mut failed = None;
        let (b, wanted) = self.catalog.archive_backlog(id, mark, limits::ARCHIVE_BACKLOG_ROWS, |row| {
            let key = streams.iter().find(|(s, _)| *s == row.stream_id).and_then(|(_, n)| StreamKey::parse(n));
            match key.map(|k| self.take(t, &k, row)) {
                Some(Ok(take)) => take,
                Some(Err(e)) => {
                    failed = Some(e);
                    Take::Maybe
                }
                None => Take::No,
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        self.gate.looked(id, wanted.looked_upto, wanted.ids);
        Ok(b)
    }

    /// Moves `id`'s mark up to `settled_upto` (every recording below it is settled).
    fn advance(&self, id: &str, mark: &mut u64, settled_upto: u64) -> Result<(), CatalogError> {
        if settled_upto > *mark {
            *mark = settled_upto;
            self.catalog.set_archive_mark(id, settled_upto)?;
        }
        Ok(())
    }

    /// Whether `t` archives recording `row` of stream `key`: an open one it may, and with
    /// `what = "events"` a closed one without an event may yet get one.
    fn take(&self, t: &Target, key: &StreamKey, row: &RecordingRow) -> Result<Take, CatalogError> {
        let c = &t.config;
        let camera_ok = c.cameras.is_empty() || c.cameras.iter().any(|n| **n == *key.camera);
        let stream_ok = matches!(
            (c.streams, key.kind),
            (Streams::Both, _) | (Streams::Main, StreamKind::Main) | (Streams::Sub, StreamKind::Sub)
        );
        if !camera_ok || !stream_ok {
            return Ok(Take::No);
        }
        if row.open {
            return Ok(Take::Maybe);
        }
        // Older than the bucket keeps: it would only be deleted again.
        if self.cutoff(t).is_some_and(|cutoff| utc_day(row.wall_start_us) < cutoff) {
            return Ok(Take::No);
        }
        if !c.events_only {
            return Ok(Take::Yes);
        }
        // An event's footage runs from its pre-roll before it to its post-roll after it: a
        // recording is an event's when an event falls within those of its span.
        let (before, after) = t.rolls.iter().find(|(n, _, _)| **n == *key.camera).map_or((0, 0), |(_, b, a)| (*b, *a));
        if self.catalog.has_event_between(&key.camera, row.wall_start_us - after, row.wall_end_us + before)? {
            return Ok(Take::Yes);
        }
        // An event may be sent a while after its moment: until then, one may still come.
        let late_us = limits::ARCHIVE_EVENTS_LATE_MS as i64 * 1000;
        Ok(if self.clocks.wall_us() > row.wall_end_us + late_us { Take::No } else { Take::Maybe })
    }

    /// Uploads recording `rec` to `t`'s bucket and notes it archived.
    async fn upload(&self, t: &Target, rec: u64, row: &RecordingRow, stream: &StreamKey) -> Result<(), ArchiveError> {
        let key = object_key(&t.config.prefix, stream, rec, row.wall_start_us);
        let path = self.data_dir.join(&row.path);
        let len = row.bytes;
        let now = || self.clocks.wall_us();
        let noted = match self.catalog.archive_upload(&t.config.id, rec)? {
            // Noted for another key (the target's prefix changed): its parts would not make
            // this object. It is given up in the bucket, so its parts are not kept there, and
            // the recording goes anew.
            Some(u) if u.key != key => {
                let _ = t.bucket.abort_upload(&u.key, &u.id, now()).await;
                self.catalog.set_archive_upload(&t.config.id, rec, None)?;
                None
            }
            noted => noted,
        };
        let etag = match way(len, t.config.max_kbit_s, t.bucket.confirms_crc32(), noted.is_some()) {
            Way::Streamed => {
                let crc32 = crc32_of(path.clone(), len).await?;
                self.pace(t, len, || t.bucket.put_file(&key, (path, len), crc32, now())).await?
            }
            Way::InMemory => {
                let body = read_range(path, 0, len).await?;
                self.pace(t, len, || t.bucket.put(&key, body, now())).await?
            }
            Way::Parts => self.upload_parts(t, rec, (&key, path, len), noted).await?,
        };
        let fragments: Vec<_> = self.catalog.fragments(rec)?.into_iter().map(|(_, f)| f).collect();
        let entry = manifest::Entry::of(rec, key.clone(), etag.clone(), row, &fragments);
        let entry = serde_json::to_vec(&entry).unwrap_or_default();
        let done = Archived { key, bytes: len, etag, done_us: now() };
        let day = utc_day(row.wall_start_us);
        self.catalog.set_archived(&t.config.id, rec, &done, (&stream.name(), &day, &entry))?;
        self.gate.archived(&t.config.id, rec);
        let mut s = t.status.lock().expect("lock");
        s.uploaded_objects += 1;
        s.uploaded_bytes += len;
        drop(s);
        info!(target = t.config.id, key = done.key, bytes = len, "archived");
        Ok(())
    }

    /// Uploads recording `rec`'s `len` bytes at `path` to `t`'s bucket as `key` in parts,
    /// from the first part `noted` lacks (a new upload when there is no note); its ETag.
    async fn upload_parts(
        &self,
        t: &Target,
        rec: u64,
        (key, path, len): (&str, PathBuf, u64),
        noted: Option<Upload>,
    ) -> Result<String, ArchiveError> {
        let id = t.config.id.as_str();
        let part = limits::ARCHIVE_PART_BYTES as u64;
        let now = || self.clocks.wall_us();
        let mut upload = match noted {
            Some(u) => u,
            None => {
                let upload_id = t.bucket.start_upload(key, now()).await?;
                let u = Upload { key: key.to_string(), id: upload_id, parts: Vec::new() };
                self.catalog.set_archive_upload(id, rec, Some(&u))?;
                u
            }
        };
        let parts = len.div_ceil(part);
        let range = |n: u64| (n * part, ((n + 1) * part).min(len));
        // The next part is read while this one is sent: two parts in memory at most.
        let read = |n: u64| {
            let (from, to) = range(n);
            let path = path.clone();
            AbortOnDrop(tokio::spawn(async move {
                let body = read_range(path, from, to - from).await?;
                let md5: [u8; 16] = s3::off_runtime(body.clone(), |b| md5::Md5::digest(b).into()).await;
                Ok::<_, ArchiveError>((body, md5))
            }))
        };
        let mut next = ((upload.parts.len() as u64) < parts).then(|| read(upload.parts.len() as u64));
        while let Some(mut reading) = next.take() {
            let n = upload.parts.len() as u64;
            let (from, to) = range(n);
            let body = (&mut reading.0)
                .await
                .map_err(|e| ArchiveError::File { path: key.to_string(), why: e.to_string() })??;
            next = (n + 1 < parts).then(|| read(n + 1));
            let number = u16::try_from(n + 1).unwrap_or(u16::MAX);
            let sent =
                self.pace(t, to - from, || t.bucket.upload_part_digested(key, &upload.id, number, body, now())).await;
            match sent {
                Ok(etag) => {
                    info!(target = id, key, part = number, "archive part stored");
                    upload.parts.push(etag);
                }
                Err(e) => {
                    if self.upload_gone(t, key, &e).await? {
                        // The server no longer knows the upload: it starts again.
                        self.catalog.set_archive_upload(id, rec, None)?;
                        return Err(no_such_upload(key).into());
                    }
                    return Err(e.into());
                }
            }
            self.catalog.set_archive_upload(id, rec, Some(&upload))?;
        }
        match t.bucket.complete_upload(key, &upload.id, &upload.parts, now()).await {
            // The object its parts made must be the file: parts noted at another size (by a
            // firmware of another ARCHIVE_PART_BYTES) would make another, which is not kept.
            Ok(etag) if t.bucket.head(key, now()).await?.is_some_and(|(size, _)| size == len) => Ok(etag),
            Ok(_) => {
                let _ = t.bucket.delete(key, now()).await;
                self.catalog.set_archive_upload(id, rec, None)?;
                Err(S3Error::BadAnswer(format!(
                    "{key}: put together from its parts, not the file's size; it goes again"
                ))
                .into())
            }
            Err(e) => {
                let gone = self.upload_gone(t, key, &e).await?;
                // The server put it together but its answer was lost (a timeout, a crash
                // before the note): the object is there, as its parts make it.
                if gone && self.completed_before(t, key, len, &upload.parts).await? {
                    Ok(s3::multipart_etag(&upload.parts).unwrap_or_default())
                } else {
                    if gone || e.kind() == Kind::Refused {
                        self.catalog.set_archive_upload(id, rec, None)?;
                        let _ = t.bucket.abort_upload(key, &upload.id, now()).await;
                    }
                    Err(if gone { no_such_upload(key) } else { e }.into())
                }
            }
        }
    }

    /// Whether failure `e` of a request of an upload to `key` says the server no longer knows
    /// the upload: S3 answers 404 `NoSuchUpload`; some servers (`s3s-fs`) 403 `AccessDenied`,
    /// which good keys tell apart from a refusal of the keys: a HEAD of the key with them
    /// passes (and fails as they do when they are bad).
    async fn upload_gone(&self, t: &Target, key: &str, e: &S3Error) -> Result<bool, S3Error> {
        match e.kind() {
            Kind::Missing => Ok(true),
            Kind::Credentials => t.bucket.head(key, self.clocks.wall_us()).await.map(|_| true),
            _ => Ok(false),
        }
    }

    /// Whether `key` is there already as the upload of `parts` makes it (`len` bytes).
    async fn completed_before(&self, t: &Target, key: &str, len: u64, parts: &[String]) -> Result<bool, S3Error> {
        let want = s3::multipart_etag(parts);
        Ok(t.bucket
            .head(key, self.clocks.wall_us())
            .await?
            .is_some_and(|(size, etag)| size == len && Some(etag) == want))
    }

    /// Runs `send` (a request carrying `bytes`) once the target's cap lets it go: when the
    /// target has one, the request after it waits until these bytes would have taken at it.
    /// The wait comes before the next request, not after this one, so what this one did is
    /// noted at once (a part stored is not sent again after a restart in the wait).
    async fn pace<F, Fut, T>(&self, t: &Target, bytes: u64, send: F) -> Result<T, S3Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, S3Error>>,
    {
        let Some(kbit_s) = t.config.max_kbit_s else { return send().await };
        let next = *t.next_send.lock().expect("lock");
        if let Some(next) = next {
            tokio::time::sleep_until(next).await;
        }
        let started = tokio::time::Instant::now();
        let due = Duration::from_micros(bytes * 8 * 1000 / u64::from(kbit_s).max(1));
        *t.next_send.lock().expect("lock") = Some(started + due);
        send().await
    }
}

/// What an upload the server no longer knows is shown as: it starts again at the next step.
fn no_such_upload(key: &str) -> S3Error {
    S3Error::Refused {
        status: 404,
        code: "NoSuchUpload".into(),
        message: format!("{key}: the server no longer knows the upload; it starts again"),
    }
}

/// A task that ends with its handle: a part read ahead is not read on after its upload
/// failed (a target holds two parts at most).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The key of recording `rec` of `stream`, which started at `wall_start_us`.
pub fn object_key(prefix: &str, stream: &StreamKey, rec: u64, wall_start_us: i64) -> String {
    let day = utc_day(wall_start_us);
    format!("{prefix}/recordings/{}/{}/{day}/{rec:010}.mp4", stream.camera, stream.kind.name())
}

/// The key of event `event`'s snapshot, of `camera`'s `day`.
pub fn event_key(prefix: &str, camera: &str, day: &str, event: u64) -> String {
    format!("{prefix}/events/{camera}/{day}/{event:010}.jpg")
}

/// An entry waiting for a manifest, as read back.
enum Described {
    Recording(manifest::Entry),
    Event(manifest::EventEntry),
}

/// The manifest part after `n`.
fn next_part(n: u32) -> Result<u32, ArchiveError> {
    n.checked_add(1)
        .filter(|p| *p < 1_000)
        .ok_or_else(|| ArchiveError::Manifest { key: format!("part {n}"), why: "a day of 1,000 manifest parts".into() })
}

/// Whether `s` is a `YYYY-MM-DD`.
pub fn is_day(s: &str) -> bool {
    s.len() == 10 && s.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() })
}

/// `YYYY-MM-DD` of `wall_us`, UTC.
pub fn utc_day(wall_us: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(wall_us.div_euclid(1_000_000))
        .map(|t| t.date().to_string())
        .unwrap_or_else(|_| "0000-00-00".into())
}

/// Reads `len` bytes of `path` from `from`, on the blocking pool.
/// How a recording goes to a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Whole, read from its file as it is sent, with its CRC-32.
    Streamed,
    /// Whole, read first, with its MD5 and SHA-256: to a server that does not send a CRC-32
    /// back.
    InMemory,
    /// In parts of [`limits::ARCHIVE_PART_BYTES`], each with its MD5.
    Parts,
}

/// How a recording of `len` bytes goes to a target capped at `cap_kbit_s`, to a server that
/// confirms CRC-32s or not, `resuming` an upload in parts or not: whole while it is small
/// enough that an interruption loses little (at most a part's size, or at most
/// [`limits::ARCHIVE_WHOLE_MAX_BYTES`] and [`limits::ARCHIVE_WHOLE_MAX_MS`] at the cap), else
/// in parts.
fn way(len: u64, cap_kbit_s: Option<u32>, confirms_crc32: bool, resuming: bool) -> Way {
    let part = limits::ARCHIVE_PART_BYTES as u64;
    // Bits over kbit/s: milliseconds.
    let at_cap_ms = cap_kbit_s.map_or(0, |k| (len * 8).div_ceil(u64::from(k).max(1)));
    let whole =
        len <= part || (len <= limits::ARCHIVE_WHOLE_MAX_BYTES as u64 && at_cap_ms <= limits::ARCHIVE_WHOLE_MAX_MS);
    match (resuming, whole, confirms_crc32) {
        (false, true, true) => Way::Streamed,
        (false, _, false) if len <= part => Way::InMemory,
        _ => Way::Parts,
    }
}

/// The CRC-32 of the first `len` bytes of the file at `path`, read on the blocking pool a
/// chunk at a time.
async fn crc32_of(path: PathBuf, len: u64) -> Result<u32, ArchiveError> {
    let shown = path.display().to_string();
    let sum = tokio::task::spawn_blocking(move || -> std::io::Result<u32> {
        use std::io::Read;
        let mut file = std::fs::File::open(&path)?;
        let mut crc = crc32fast::Hasher::new();
        let mut chunk = vec![0; limits::ARCHIVE_STREAM_CHUNK_BYTES];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            file.read_exact(&mut chunk[..n])?;
            crc.update(&chunk[..n]);
            left -= n as u64;
        }
        Ok(crc.finalize())
    })
    .await
    .map_err(|e| ArchiveError::File { path: shown.clone(), why: e.to_string() })?;
    sum.map_err(|e| ArchiveError::File { path: shown, why: e.to_string() })
}

async fn read_range(path: PathBuf, from: u64, len: u64) -> Result<Bytes, ArchiveError> {
    let shown = path.display().to_string();
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&path)?;
        let mut buf = vec![0; usize::try_from(len).map_err(std::io::Error::other)?];
        f.read_exact_at(&mut buf, from)?;
        Ok(buf)
    })
    .await
    .map_err(|e| ArchiveError::File { path: shown.clone(), why: e.to_string() })?;
    read.map(Bytes::from).map_err(|e| ArchiveError::File { path: shown, why: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_goes_whole_while_an_interruption_would_lose_little_else_in_parts() {
        let part = limits::ARCHIVE_PART_BYTES as u64;
        let most = limits::ARCHIVE_WHOLE_MAX_BYTES as u64;
        assert_eq!(way(part, None, true, false), Way::Streamed);
        assert_eq!(way(most, None, true, false), Way::Streamed);
        assert_eq!(way(most + 1, None, true, false), Way::Parts);
        // At a cap, over a part's size: whole while it takes at most its ceiling at the cap.
        let kbit_s = 16_000;
        let at_ceiling = limits::ARCHIVE_WHOLE_MAX_MS * u64::from(kbit_s) / 8;
        assert!(at_ceiling > part && at_ceiling < most);
        assert_eq!(way(at_ceiling, Some(kbit_s), true, false), Way::Streamed);
        assert_eq!(way(at_ceiling + 1, Some(kbit_s), true, false), Way::Parts);
        assert_eq!(way(part, Some(1), true, false), Way::Streamed, "a part's size goes whole at any cap");
        // To a server that does not send CRC-32s back: whole with its MD5 up to a part.
        assert_eq!(way(part, None, false, false), Way::InMemory);
        assert_eq!(way(part + 1, None, false, false), Way::Parts);
        // An upload in parts noted goes on in parts.
        assert_eq!(way(1, None, true, true), Way::Parts);
    }

    #[test]
    fn keys_name_the_box_the_stream_the_day_and_the_recording() {
        let key = StreamKey::new("porch", StreamKind::Sub);
        // 2026-12-06T01:02:03Z
        assert_eq!(
            object_key("house", &key, 42, 1_796_518_923_000_000),
            "house/recordings/porch/sub/2026-12-06/0000000042.mp4"
        );
    }
}

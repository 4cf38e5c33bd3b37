//! The catalog writer thread: groups recorder output into one durable commit per flush
//! interval, or sooner for an event's footage ([`super::schedule`] says when), and runs
//! retention after each.
//!
//! Commit protocol, per flush: fdatasync every segment file written since the last flush
//! (and the directory of every new file), then commit all their fragment rows in one
//! `Durability::Immediate` transaction. So a row never points at bytes that are not on disk,
//! and a power cut loses at most one flush interval (less: recovery indexes whole fragments
//! found past the last row).
//!
//! Rows wait in memory between flushes rather than in non-durable redb commits: each redb
//! commit rewrites B-tree pages, and on flash those writes would rival the video's own.
//!
//! Deletion: drop rows and list the file as garbage (one durable commit, which also notes
//! why the span is gone), unlink, then unlist it with the next commit. Retention deletes
//! the recordings events hold last ([`super::holds`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;

use tracing::{debug, error, info, warn};

use super::gate::Gate;
use super::holds::Holds;
use super::retention::{self, Entry, Index};
use super::schedule::{Due, Schedule};
use crate::base::StreamKey;
use crate::base::fs::{disk_space, remove_file, sync_dir, sync_file};
use crate::catalog::{Batch, Catalog, FragmentRow, Keyframe, Loss, RecordingRow};
use crate::clock::SharedClocks;
use crate::config::Retention;
use crate::limits;

/// Messages to the flusher.
pub enum ToFlusher {
    /// A fragment was appended (not yet synced) to the recording's file.
    Fragment { rec_id: u64, sequence: u32, row: FragmentRow, keyframes: Vec<Keyframe>, recording: RecordingRow },
    /// A segment was closed; this is its final row.
    Closed { rec_id: u64, recording: RecordingRow },
    /// A new segment file exists: its directory entry must be synced before its rows.
    Created { rec_id: u64, recording: RecordingRow },
    /// A write met a full disk: free what retention can, reply with the bytes freed.
    NeedSpace { reply: SyncSender<u64> },
    /// Commit everything now (shutdown); reply when done.
    Flush { reply: SyncSender<()> },
    /// Stop after a final flush (shutdown; API handles may still hold senders).
    Stop,
    /// The box is stopping: streams are closing their last recordings, which the disk
    /// reserve must not take (nothing more will be recorded to need the space).
    Stopping,
    /// Delete a stream's closed recordings that lie wholly within a wall-time range (an
    /// admin's request); reply with (recordings deleted, bytes freed, recordings left because
    /// they reach outside the range or are still being written).
    DeleteRange { stream_id: u32, from_us: i64, to_us: i64, reply: SyncSender<(u64, u64, u64)> },
    /// The retention caps changed (the web face): kept from now on, enforced at once.
    SetCaps(Retention),
    /// A stream cut its fragment at an event's moment, which asked `streams` streams of its
    /// camera and whose post-roll ends at `post_roll_end_mono_us`: sync and commit what is
    /// pending once the camera's other streams have cut too, without waiting for the
    /// interval ([`super::schedule`]). Its recorder sends it at most once per
    /// [`limits::EVENT_FLUSH_MIN_INTERVAL_MS`], after the fragment it closed early.
    Moment { stream_id: u32, streams: u32, post_roll_end_mono_us: i64 },
    /// A stream wrote the fragment holding an event's post-roll's end: the next interval
    /// flush covers it.
    PostRollWritten { stream_id: u32 },
}

/// What the flusher has done, for `/metrics` and the benchmarks.
#[derive(Debug, Default)]
pub struct FlusherStats {
    pub commits: AtomicU64,
    pub file_syncs: AtomicU64,
    pub commit_errors: AtomicU64,
    pub sync_errors: AtomicU64,
    pub recordings_deleted: AtomicU64,
    pub bytes_deleted: AtomicU64,
    /// Flushes events asked for ([`ToFlusher::Moment`]) before the interval.
    pub early_flushes: AtomicU64,
    /// Recordings and bytes held by events at the last retention pass.
    pub held_recordings: AtomicU64,
    pub held_bytes: AtomicU64,
    /// Recordings deleted while events held them (the disk's reserve, or the total cap).
    pub held_deleted: AtomicU64,
    /// Catalog bytes written by the early flushes (their commits).
    pub early_flush_bytes: AtomicU64,
}

pub struct Flusher {
    catalog: Arc<Catalog>,
    data_dir: PathBuf,
    interval: Duration,
    caps: Retention,
    fragments: Vec<(u64, u32, FragmentRow)>,
    keyframes: Vec<(u32, u64, Keyframe)>,
    recordings: BTreeMap<u64, RecordingRow>,
    garbage_done: Vec<String>,
    /// Files written since the last flush.
    dirty: BTreeSet<u64>,
    /// Directories with new entries since the last flush.
    new_dirs: BTreeSet<PathBuf>,
    index: Index,
    /// Bytes of each stream's recordings, and of all, kept with `index`.
    stream_bytes: BTreeMap<u32, u64>,
    total_bytes: u64,
    paths: BTreeMap<u64, String>,
    /// The last committed row of each open recording: what a recording falls back to when
    /// its file cannot be synced.
    committed: BTreeMap<u64, RecordingRow>,
    /// Open recordings whose file failed to sync: their further rows are not committed.
    poisoned: BTreeSet<u64>,
    /// Set by [`ToFlusher::Stopping`].
    stopping: bool,
    stats: Arc<FlusherStats>,
    clocks: SharedClocks,
    /// When to flush next.
    schedule: Schedule,
    /// What events hold against retention.
    holds: Arc<Holds>,
    /// The camera of each stream, for holds (from the catalog's streams).
    camera_of: BTreeMap<u32, String>,
    /// What the archive must store before retention's caps may delete it.
    gate: Arc<Gate>,
}

impl Flusher {
    pub fn new(
        catalog: Arc<Catalog>,
        data_dir: PathBuf,
        interval: Duration,
        caps: Retention,
        clocks: SharedClocks,
        holds: Arc<Holds>,
    ) -> Result<Self, crate::catalog::CatalogError> {
        let rows = catalog.recordings()?;
        let mut me = Flusher {
            catalog,
            data_dir,
            interval,
            caps,
            fragments: Vec::new(),
            keyframes: Vec::new(),
            recordings: BTreeMap::new(),
            garbage_done: Vec::new(),
            dirty: BTreeSet::new(),
            new_dirs: BTreeSet::new(),
            index: Index::new(),
            stream_bytes: BTreeMap::new(),
            total_bytes: 0,
            paths: BTreeMap::new(),
            committed: BTreeMap::new(),
            poisoned: BTreeSet::new(),
            stopping: false,
            stats: Arc::default(),
            clocks,
            schedule: Schedule::new(interval.as_micros() as i64, 0),
            holds,
            camera_of: BTreeMap::new(),
            gate: Arc::default(),
        };
        for (id, r) in rows {
            me.index_insert(id, entry(&r));
            me.paths.insert(id, r.path);
        }
        me.name_streams();
        Ok(me)
    }

    /// Retention waits for what `gate` says the archive must store first.
    pub fn with_gate(mut self, gate: Arc<Gate>) -> Self {
        self.gate = gate;
        self
    }

    pub fn stats(&self) -> Arc<FlusherStats> {
        self.stats.clone()
    }

    /// The length of each table the flusher keeps in memory, for the soak to bound.
    #[cfg(test)]
    pub(crate) fn table_lens(&self) -> [(&'static str, usize); 14] {
        [
            ("fragments", self.fragments.len()),
            ("keyframes", self.keyframes.len()),
            ("recordings", self.recordings.len()),
            ("garbage_done", self.garbage_done.len()),
            ("dirty", self.dirty.len()),
            ("new_dirs", self.new_dirs.len()),
            ("index", self.index.len()),
            ("stream_bytes", self.stream_bytes.len()),
            ("paths", self.paths.len()),
            ("committed", self.committed.len()),
            ("poisoned", self.poisoned.len()),
            ("camera_of", self.camera_of.len()),
            ("holds", self.holds.len()),
            ("schedule", self.schedule.len()),
        ]
    }

    /// The thread's body: runs until every sender is gone.
    pub fn run(mut self, rx: Receiver<ToFlusher>) {
        self.begin();
        loop {
            match crate::clock::recv_until(&*self.clocks, &rx, self.schedule.next_us()) {
                Ok(ToFlusher::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(msg) => self.handle(msg),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.flush_if_due();
        }
        self.flush();
    }

    /// Runs retention once before the first message (the caps may have shrunk) and sets the
    /// first flush one interval from now.
    pub(crate) fn begin(&mut self) {
        self.enforce_retention(false);
        self.schedule = Schedule::new(self.interval.as_micros() as i64, self.clocks.mono_us());
    }

    /// Flushes and runs retention when the schedule says (the interval is up, or an event
    /// asked), however busy the queue is. The interval counts from the last flush, early or
    /// not, so an event's early flush takes the place of the next one instead of adding to it
    /// (what it costs in writes, `docs/durability.md`).
    pub(crate) fn flush_if_due(&mut self) {
        let Some(due) = self.schedule.due(self.clocks.mono_us()) else {
            return;
        };
        let before = self.catalog.writes.bytes();
        self.flush();
        if due == Due::Early {
            self.stats.early_flushes.fetch_add(1, Ordering::Relaxed);
            let wrote = self.catalog.writes.bytes().saturating_sub(before);
            self.stats.early_flush_bytes.fetch_add(wrote, Ordering::Relaxed);
        }
        self.enforce_retention(false);
        self.schedule.flushed(self.clocks.mono_us(), due);
    }

    /// Learns the camera of every stream the catalog names (once at start, then for each
    /// stream not seen before).
    fn name_streams(&mut self) {
        match self.catalog.streams() {
            Ok(streams) => {
                for (id, name) in streams {
                    if let Some(key) = StreamKey::parse(&name) {
                        self.camera_of.insert(id, key.camera.to_string());
                    }
                }
            }
            Err(e) => warn!("cannot read the streams' names; holds wait for them: {e}"),
        }
    }

    fn track(&mut self, rec_id: u64, recording: RecordingRow) {
        if !self.camera_of.contains_key(&recording.stream_id) {
            self.name_streams();
        }
        self.index_insert(rec_id, entry(&recording));
        self.paths.insert(rec_id, recording.path.clone());
        self.recordings.insert(rec_id, recording);
    }

    fn index_insert(&mut self, rec_id: u64, entry: Entry) {
        self.index_remove(rec_id);
        *self.stream_bytes.entry(entry.stream_id).or_default() += entry.bytes;
        self.total_bytes += entry.bytes;
        self.index.insert(rec_id, entry);
    }

    fn index_remove(&mut self, rec_id: u64) {
        if let Some(old) = self.index.remove(&rec_id) {
            *self.stream_bytes.entry(old.stream_id).or_default() -= old.bytes;
            self.total_bytes -= old.bytes;
        }
    }

    /// True when a stream, or all together, is over its retention cap.
    fn over_caps(&self, stream_id: u32) -> bool {
        self.stream_bytes.get(&stream_id).is_some_and(|&b| b > self.caps.stream_max_bytes)
            || self.total_bytes > self.caps.total_max_bytes
    }

    pub(crate) fn handle(&mut self, msg: ToFlusher) {
        match msg {
            ToFlusher::Fragment { rec_id, .. } | ToFlusher::Created { rec_id, .. }
                if self.poisoned.contains(&rec_id) => {}
            ToFlusher::Closed { rec_id, .. } if self.poisoned.contains(&rec_id) => self.close_poisoned(rec_id),
            ToFlusher::Fragment { rec_id, sequence, row, keyframes, recording } => {
                let stream_id = recording.stream_id;
                self.fragments.push((rec_id, sequence, row));
                self.keyframes.extend(keyframes.into_iter().map(|k| (stream_id, rec_id, k)));
                self.dirty.insert(rec_id);
                self.track(rec_id, recording);
                if self.fragments.len() >= limits::CATALOG_PENDING_FRAGMENTS_MAX {
                    self.flush();
                }
                // Caps hold fragment by fragment, not only once per flush interval: deleting
                // a closed recording needs no flush.
                if self.over_caps(stream_id) {
                    self.enforce_retention(false);
                }
            }
            ToFlusher::Created { rec_id, recording } => {
                // The new file's directory entry, and those of any directories made for it,
                // must be durable before rows point at the file.
                let path = self.data_dir.join(&recording.path);
                for dir in path.ancestors().skip(1) {
                    self.new_dirs.insert(dir.to_path_buf());
                    if dir == self.data_dir {
                        break;
                    }
                }
                self.dirty.insert(rec_id);
                self.track(rec_id, recording);
            }
            ToFlusher::Closed { rec_id, recording } => {
                self.dirty.insert(rec_id);
                self.track(rec_id, recording);
            }
            ToFlusher::NeedSpace { reply } => {
                self.flush();
                let freed = self.enforce_retention(true);
                let _ = reply.send(freed);
            }
            ToFlusher::Flush { reply } => {
                self.flush();
                let _ = reply.send(());
            }
            ToFlusher::Stop => {}
            ToFlusher::Stopping => self.stopping = true,
            ToFlusher::DeleteRange { stream_id, from_us, to_us, reply } => {
                let _ = reply.send(self.delete_range(stream_id, from_us, to_us));
            }
            ToFlusher::Moment { stream_id, streams, post_roll_end_mono_us } => {
                if !self.camera_of.contains_key(&stream_id) {
                    self.name_streams();
                }
                // A stream of no known camera gathers alone.
                let camera = self.camera_of.get(&stream_id).cloned().unwrap_or_else(|| format!("#{stream_id}"));
                let now = self.clocks.mono_us();
                self.schedule.moment(now, &camera, streams, stream_id, post_roll_end_mono_us);
                self.flush_if_due();
            }
            ToFlusher::PostRollWritten { stream_id } => {
                self.schedule.post_roll_written(self.clocks.mono_us(), stream_id);
                self.flush_if_due();
            }
            ToFlusher::SetCaps(caps) => {
                info!(
                    stream_max_bytes = caps.stream_max_bytes,
                    total_max_bytes = caps.total_max_bytes,
                    "retention caps changed"
                );
                self.caps = caps;
                self.enforce_retention(false);
            }
        }
    }

    /// Syncs what was written and commits its rows.
    fn flush(&mut self) {
        if self.catalog.is_closed() {
            self.reopen_catalog();
        }
        if self.fragments.is_empty() && self.recordings.is_empty() && self.garbage_done.is_empty() {
            return;
        }
        for rec_id in std::mem::take(&mut self.dirty) {
            let Some(rel) = self.paths.get(&rec_id) else {
                continue;
            };
            let path = self.data_dir.join(rel);
            match sync_file(&path) {
                Ok(()) => {
                    self.stats.file_syncs.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    // Its bytes may not be on disk: its rows must not be committed, now or
                    // later (the kernel may report the lost pages only once). The recording
                    // ends at its last committed fragment; recovery cuts the rest.
                    error!(path = %path.display(), "cannot sync segment, ending it at its last synced fragment: {e}");
                    self.stats.sync_errors.fetch_add(1, Ordering::Relaxed);
                    self.drop_pending(rec_id);
                    let was_closing = self.recordings.remove(&rec_id).is_some_and(|r| !r.open);
                    self.poisoned.insert(rec_id);
                    if was_closing {
                        self.close_poisoned(rec_id);
                    }
                }
            }
        }
        for dir in std::mem::take(&mut self.new_dirs) {
            if let Err(e) = sync_dir(&dir) {
                warn!(dir = %dir.display(), "cannot sync directory: {e}");
            }
        }
        let batch = Batch {
            fragments: std::mem::take(&mut self.fragments),
            keyframes: std::mem::take(&mut self.keyframes),
            recordings: std::mem::take(&mut self.recordings).into_iter().collect(),
            garbage_done: std::mem::take(&mut self.garbage_done),
        };
        match self.catalog.commit(&batch) {
            Ok(()) => {
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                debug!(fragments = batch.fragments.len(), "catalog commit");
                for (id, row) in batch.recordings {
                    if row.open {
                        self.committed.insert(id, row);
                    } else {
                        self.committed.remove(&id);
                    }
                }
            }
            Err(e) => {
                self.stats.commit_errors.fetch_add(1, Ordering::Relaxed);
                error!("catalog commit failed, retrying at the next flush: {e}");
                if e.is_io() {
                    self.reopen_catalog();
                }
                if batch.fragments.len() < limits::CATALOG_PENDING_FRAGMENTS_MAX {
                    self.fragments = batch.fragments;
                    self.keyframes = batch.keyframes;
                    self.recordings = batch.recordings.into_iter().collect();
                    self.garbage_done = batch.garbage_done;
                } else {
                    error!("dropping {} fragment rows over CATALOG_PENDING_FRAGMENTS_MAX", batch.fragments.len());
                }
            }
        }
    }

    fn drop_pending(&mut self, rec_id: u64) {
        self.fragments.retain(|(r, _, _)| *r != rec_id);
        self.keyframes.retain(|(_, r, _)| *r != rec_id);
    }

    /// Closes a poisoned recording at its last committed state, or drops it if nothing of it
    /// was committed.
    fn close_poisoned(&mut self, rec_id: u64) {
        self.poisoned.remove(&rec_id);
        match self.committed.remove(&rec_id) {
            Some(mut row) if row.fragments > 0 => {
                row.open = false;
                self.track(rec_id, row);
            }
            _ => {
                self.forget(rec_id, Loss::WriteError);
            }
        }
    }

    /// Deletes a recording's rows and file (through the garbage list) and every trace of it
    /// here.
    fn forget(&mut self, rec_id: u64, why: Loss) -> Option<RecordingRow> {
        self.drop_pending(rec_id);
        self.recordings.remove(&rec_id);
        self.committed.remove(&rec_id);
        self.poisoned.remove(&rec_id);
        self.index_remove(rec_id);
        let deleted = match self.catalog.delete_recording(rec_id, why) {
            Err(e) if e.is_io() => {
                warn!(recording = rec_id, "cannot delete ({e}); opening the catalog again to retry");
                self.reopen_catalog();
                self.catalog.delete_recording(rec_id, why)
            }
            other => other,
        };
        let row = match deleted {
            Ok(row) => row,
            Err(e) => {
                error!(recording = rec_id, "cannot delete: {e}");
                return None;
            }
        };
        self.paths.remove(&rec_id);
        let path = self.data_dir.join(&row.path);
        match remove_file(&path) {
            Ok(()) => self.garbage_done.push(row.path.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.garbage_done.push(row.path.clone()),
            // Stays on the garbage list; the next start tries again.
            Err(e) => {
                warn!(path = %path.display(), "cannot delete: {e}");
                return None;
            }
        }
        Some(row)
    }

    /// Opens the catalog again after an I/O error (redb refuses every operation after one
    /// until then); a failure is logged, and the next flush tries again.
    fn reopen_catalog(&mut self) {
        match self.catalog.reopen() {
            Ok(()) => warn!("catalog opened again after an I/O error"),
            Err(e) => error!("cannot open the catalog again (the next flush tries again): {e}"),
        }
    }

    /// Deletes the closed recordings of a stream wholly within `[from_us, to_us]`, through the
    /// garbage list like retention. A recording that reaches outside the range is kept whole:
    /// segments are a few minutes at most, and cutting one would mean rewriting it.
    fn delete_range(&mut self, stream_id: u32, from_us: i64, to_us: i64) -> (u64, u64, u64) {
        self.flush();
        let rows = match self.catalog.recordings() {
            Ok(r) => r,
            Err(e) => {
                error!("cannot list recordings to delete: {e}");
                return (0, 0, 0);
            }
        };
        let (mut deleted, mut bytes, mut kept) = (0, 0, 0);
        for (id, r) in
            rows.iter().filter(|(_, r)| r.stream_id == stream_id && r.wall_end_us > from_us && r.wall_start_us < to_us)
        {
            if r.open || r.wall_start_us < from_us || r.wall_end_us > to_us {
                kept += 1;
                continue;
            }
            if let Some(row) = self.forget(*id, Loss::Deleted) {
                deleted += 1;
                bytes += row.bytes;
                info!(recording = id, "deleted on request: {}", row.path);
            }
        }
        self.flush();
        (deleted, bytes, kept)
    }

    /// Deletes what retention asks for. With `urgent`, a write is waiting on a full disk:
    /// delete at least the oldest closed recording. Returns the bytes freed.
    fn enforce_retention(&mut self, urgent: bool) -> u64 {
        let disk = disk_space(&self.data_dir);
        let now_us = self.clocks.wall_us();
        let held = self.holds.held(&self.index, &self.camera_of, self.caps.held_max_bytes(), now_us);
        let held_bytes: u64 = held.iter().filter_map(|id| self.index.get(id)).map(|e| e.bytes).sum();
        self.stats.held_recordings.store(held.len() as u64, Ordering::Relaxed);
        self.stats.held_bytes.store(held_bytes, Ordering::Relaxed);
        let waiting = self.gate.waiting(&self.index);
        let mut doomed = retention::plan(&self.index, &self.caps, disk, self.stopping && !urgent, &held, &waiting);
        if urgent && doomed.is_empty() {
            let oldest = self.index.iter().filter(|(id, e)| !e.open && !held.contains(id)).map(|(&id, _)| id).next();
            let oldest = oldest.or_else(|| self.index.iter().find(|(_, e)| !e.open).map(|(&id, _)| id));
            doomed.extend(oldest.map(|id| (id, Loss::DiskFull)));
        }
        let ids: Vec<u64> = doomed.iter().map(|(id, _)| *id).collect();
        for target in self.gate.deleted(&ids) {
            warn!(
                target,
                "deleting footage the archive target has not stored yet (the disk's reserve or its backlog's ceiling)"
            );
        }
        let mut freed = 0;
        for (id, why) in doomed {
            if held.contains(&id) {
                self.stats.held_deleted.fetch_add(1, Ordering::Relaxed);
                warn!(recording = id, "deleting footage an event holds: {why:?}");
            }
            if urgent && let Some(rel) = self.paths.get(&id) {
                // On a full disk the catalog may not be able to commit even a deletion:
                // unlink first to make room. A crash before the rows go leaves rows without
                // a file, which recovery drops at the next start.
                let _ = remove_file(&self.data_dir.join(rel));
            }
            // Whatever happens to the file, the rows are gone: the garbage list owns it.
            if let Some(row) = self.forget(id, why) {
                freed += row.bytes;
                self.stats.recordings_deleted.fetch_add(1, Ordering::Relaxed);
                self.stats.bytes_deleted.fetch_add(row.bytes, Ordering::Relaxed);
                info!(recording = id, bytes = row.bytes, "retention deleted {}", row.path);
            }
        }
        freed
    }
}

/// What retention needs of a recording's row.
fn entry(r: &RecordingRow) -> Entry {
    Entry { stream_id: r.stream_id, bytes: r.bytes, open: r.open, start_us: r.wall_start_us, end_us: r.wall_end_us }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(path: &str) -> RecordingRow {
        RecordingRow::for_test(path)
    }

    /// A flusher whose interval never comes in a test, with a per-stream cap.
    fn flusher(catalog: &Arc<Catalog>, dir: &std::path::Path, stream_max_bytes: u64) -> Flusher {
        let caps = Retention { stream_max_bytes, total_max_bytes: u64::MAX, held_max_percent: 50 };
        let clocks = crate::clock::RealClocks::shared();
        Flusher::new(catalog.clone(), dir.into(), Duration::from_secs(3600), caps, clocks, Arc::default()).unwrap()
    }

    fn fragment(i: u32) -> FragmentRow {
        FragmentRow {
            wall_start_us: i64::from(i),
            wall_end_us: i64::from(i) + 1,
            media_start_90k: u64::from(i),
            duration_90k: 1,
            start_byte: u64::from(i),
            end_byte: u64::from(i) + 1,
            frames: 1,
            keyframes: 0,
        }
    }

    #[test]
    fn rows_wait_for_the_interval_unless_the_pending_ceiling_is_reached() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        let (id, row) = catalog.begin_recording(recording(""), |_| "seg.mp4".into()).unwrap();
        std::fs::write(dir.path().join("seg.mp4"), b"bytes").unwrap();
        let mut f = flusher(&catalog, dir.path(), u64::MAX);
        let stats = f.stats();
        for i in 1..limits::CATALOG_PENDING_FRAGMENTS_MAX as u32 {
            f.handle(ToFlusher::Fragment {
                rec_id: id,
                sequence: i,
                row: fragment(i),
                keyframes: vec![],
                recording: row.clone(),
            });
        }
        assert_eq!(stats.commits.load(Ordering::Relaxed), 0, "below the ceiling rows wait");
        assert!(catalog.fragments(id).unwrap().is_empty());
        let last = limits::CATALOG_PENDING_FRAGMENTS_MAX as u32;
        f.handle(ToFlusher::Fragment {
            rec_id: id,
            sequence: last,
            row: fragment(last),
            keyframes: vec![],
            recording: row,
        });
        assert_eq!(stats.commits.load(Ordering::Relaxed), 1, "the ceiling forces a commit");
        assert_eq!(stats.file_syncs.load(Ordering::Relaxed), 1, "the file was synced first");
        assert_eq!(catalog.fragments(id).unwrap().len(), limits::CATALOG_PENDING_FRAGMENTS_MAX);
    }

    #[test]
    fn an_early_flush_takes_the_place_of_the_next_interval_flush() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        let (id, row) = catalog.begin_recording(recording(""), |_| "seg.mp4".into()).unwrap();
        std::fs::write(dir.path().join("seg.mp4"), b"bytes").unwrap();
        let sim = crate::clock::SimulatedClocks::new(crate::clock::BUILD_WALL_US + 1);
        let caps = Retention { stream_max_bytes: u64::MAX, total_max_bytes: u64::MAX, held_max_percent: 50 };
        let mut f = Flusher::new(
            catalog.clone(),
            dir.path().into(),
            Duration::from_secs(10),
            caps,
            sim.shared(),
            Arc::default(),
        )
        .unwrap();
        f.begin();
        let stats = f.stats();
        let fragment_at = |f: &mut Flusher, i: u32| {
            let recording = row.clone();
            f.handle(ToFlusher::Fragment { rec_id: id, sequence: i, row: fragment(i), keyframes: vec![], recording });
        };
        fragment_at(&mut f, 1);
        sim.advance(Duration::from_secs(6));
        f.handle(ToFlusher::Moment { stream_id: row.stream_id, streams: 1, post_roll_end_mono_us: 0 });
        assert_eq!(stats.commits.load(Ordering::Relaxed), 1, "the early flush");
        assert_eq!(stats.early_flushes.load(Ordering::Relaxed), 1);
        // The interval would have come at 10 s; it comes 10 s after the early flush.
        fragment_at(&mut f, 2);
        sim.advance(Duration::from_secs(5));
        f.flush_if_due();
        assert_eq!(stats.commits.load(Ordering::Relaxed), 1, "not at 11 s");
        sim.advance(Duration::from_secs(5));
        f.flush_if_due();
        assert_eq!(stats.commits.load(Ordering::Relaxed), 2, "at 16 s");
    }

    /// A flusher with one recording whose file `name` does not exist, its first fragment
    /// handed over.
    fn with_a_missing_file(dir: &std::path::Path, name: &'static str) -> (Arc<Catalog>, u64, RecordingRow, Flusher) {
        let catalog = Arc::new(Catalog::open(&dir.join("c.redb")).unwrap());
        let (id, row) = catalog.begin_recording(recording(""), |_| name.into()).unwrap();
        let mut f = flusher(&catalog, dir, u64::MAX);
        let first = ToFlusher::Fragment {
            rec_id: id,
            sequence: 1,
            row: fragment(1),
            keyframes: vec![],
            recording: row.clone(),
        };
        f.handle(first);
        (catalog, id, row, f)
    }

    #[test]
    fn rows_of_a_file_that_cannot_be_synced_are_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, id, _, mut f) = with_a_missing_file(dir.path(), "missing.mp4");
        f.flush();
        assert!(catalog.fragments(id).unwrap().is_empty());
    }

    #[test]
    fn a_recording_whose_file_failed_to_sync_commits_nothing_more_and_ends_at_its_last_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, id, row, mut f) = with_a_missing_file(dir.path(), "gone.mp4");
        f.flush(); // the file does not exist: the sync fails
        assert_eq!(f.stats().sync_errors.load(Ordering::Relaxed), 1);
        // The file appears later and would sync now, but rows after a failed sync are not trusted.
        std::fs::write(dir.path().join("gone.mp4"), b"x").unwrap();
        f.handle(ToFlusher::Fragment {
            rec_id: id,
            sequence: 2,
            row: fragment(2),
            keyframes: vec![],
            recording: row.clone(),
        });
        f.flush();
        assert!(catalog.fragments(id).unwrap().is_empty());
        // Nothing of it was ever committed: closing it drops it, file and all.
        let mut closed = row;
        closed.open = false;
        f.handle(ToFlusher::Closed { rec_id: id, recording: closed });
        f.flush();
        assert!(catalog.recordings().unwrap().is_empty());
        assert!(!dir.path().join("gone.mp4").exists());
    }

    #[test]
    fn a_stream_over_its_cap_frees_space_as_the_fragment_arrives_not_at_the_next_flush() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        let mut old = recording("");
        old.open = false;
        old.bytes = 600;
        let (old_id, _) = catalog.begin_recording(old, |_| "old.mp4".into()).unwrap();
        std::fs::write(dir.path().join("old.mp4"), b"old").unwrap();
        let (id, mut row) = catalog.begin_recording(recording(""), |_| "new.mp4".into()).unwrap();
        let mut f = flusher(&catalog, dir.path(), 1000);
        row.bytes = 300;
        f.handle(ToFlusher::Fragment {
            rec_id: id,
            sequence: 1,
            row: fragment(1),
            keyframes: vec![],
            recording: row.clone(),
        });
        assert!(dir.path().join("old.mp4").exists(), "900 bytes: under the cap");
        row.bytes = 500;
        f.handle(ToFlusher::Fragment { rec_id: id, sequence: 2, row: fragment(2), keyframes: vec![], recording: row });
        assert!(!dir.path().join("old.mp4").exists(), "1100 bytes: over, the oldest goes at once");
        assert!(catalog.recordings().unwrap().iter().all(|(i, _)| *i != old_id));
        assert_eq!(f.stats().commits.load(Ordering::Relaxed), 0, "no flush was needed");
    }
}

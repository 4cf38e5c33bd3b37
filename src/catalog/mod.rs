//! The catalog: one redb file that says what media exists and where.
//!
//! Tables:
//! - `meta`: schema version and id counters.
//! - `streams`: stream id → `camera/kind` name.
//! - `recordings`: recording id → [`RecordingRow`] (one segment file). Ids grow with time.
//! - `fragments`: (recording id, sequence) → [`FragmentRow`].
//! - `keyframes`: (stream id, wall µs) → (recording id, byte offset of the fragment).
//! - `coverage`: (stream id, hour) → recorded µs, bytes and fragments of that hour, kept in
//!   the same transactions as the fragment rows ([`coverage`]).
//! - `users`: name → role and argon2id hash; `tokens`: id → name, SHA-256 of the secret,
//!   scopes (the secret itself is never stored).
//! - events, their revisions, idempotency keys and search indexes: see [`events`].
//! - `garbage`: paths of files to delete. A file is listed here in the same commit that
//!   drops its rows, and unlisted only after it is gone, so a crash in between never leaves
//!   a file that nothing will delete.
//!
//! Crash order (the recorder keeps it): a recording row is committed before its file is
//! created; a fragment's bytes are fsynced before the commit that adds its row. Every commit
//! here is `Durability::Immediate`: the recorder groups a flush interval's rows into one.
//!
//! One writer (the recorder's catalog thread); readers open their own read transactions.

pub mod archive;
pub mod camport;
pub mod config_revisions;
pub mod coverage;
pub mod events;
pub mod losses;
pub mod outbox;
pub mod rows;
mod runs;
pub mod wear;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

pub use coverage::Bucket;
pub use losses::Loss;
pub use rows::{FragmentRow, RecordingRow, RowError};
pub use runs::{Run, Runs};

pub use config_revisions::ConfigRevision;

use crate::base::StreamKey;
use crate::limits;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const STREAMS: TableDefinition<u32, &str> = TableDefinition::new("streams");
pub(super) const RECORDINGS: TableDefinition<u64, &[u8]> = TableDefinition::new("recordings");
const FRAGMENTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("fragments");
const KEYFRAMES: TableDefinition<(u32, i64), (u64, u64)> = TableDefinition::new("keyframes");
const GARBAGE: TableDefinition<&str, ()> = TableDefinition::new("garbage");
const COVERAGE: TableDefinition<(u32, i64), (u64, u64, u64)> = TableDefinition::new("coverage");
/// user name → (role, argon2id PHC string)
const USERS: TableDefinition<&str, (u8, &str)> = TableDefinition::new("users");
/// token id → (name, SHA-256 of the secret, scope bits, created µs)
const TOKENS: TableDefinition<u64, (&str, &[u8], u8, i64)> = TableDefinition::new("tokens");

const SCHEMA_VERSION: u64 = 1;

/// Why a catalog operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    #[error("catalog storage: {0}")]
    Storage(#[from] redb::Error),
    #[error(transparent)]
    Row(#[from] RowError),
    #[error("catalog schema version {found} is not {SCHEMA_VERSION}: made by other firmware")]
    Schema { found: u64 },
    #[error("catalog has no recording {0}")]
    NoRecording(u64),
    #[error("catalog has no event {0}")]
    NoEvent(u64),
    #[error("catalog is closed after an I/O error; it opens again at the next flush")]
    Closed,
    #[error("catalog is busy reopening")]
    Busy,
    #[error("path of {len_bytes} bytes exceeds the maximum of {max} (RECORDING_PATH_MAX_BYTES)", max = limits::RECORDING_PATH_MAX_BYTES)]
    PathTooLong { len_bytes: usize },
}

impl CatalogError {
    /// An I/O error (or redb refusing after one): the catalog must be opened again.
    pub fn is_io(&self) -> bool {
        matches!(self, CatalogError::Storage(redb::Error::Io(_) | redb::Error::PreviousIo) | CatalogError::Closed)
    }
}

/// Maps redb's per-operation errors into [`CatalogError`].
trait OrStorage<T> {
    fn storage(self) -> Result<T, CatalogError>;
}

impl<T, E: Into<redb::Error>> OrStorage<T> for Result<T, E> {
    fn storage(self) -> Result<T, CatalogError> {
        self.map_err(|e| CatalogError::Storage(e.into()))
    }
}

/// What is stored of one stream in all (see [`Catalog::stream_totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamTotals {
    pub bytes: u64,
    pub recorded_us: u64,
    /// The first hour (UTC µs) with anything recorded; none when nothing is kept.
    pub first_hour_us: Option<i64>,
}

/// A keyframe's place: for seeking without scanning fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keyframe {
    pub wall_us: i64,
    pub fragment_start_byte: u64,
}

/// One durable commit's worth of recorder output.
#[derive(Debug, Default)]
pub struct Batch {
    /// New fragment rows, with the recording they extend.
    pub fragments: Vec<(u64, u32, FragmentRow)>,
    pub keyframes: Vec<(u32, u64, Keyframe)>,
    /// Updated recording rows (totals, end, open flag).
    pub recordings: Vec<(u64, RecordingRow)>,
    /// Garbage entries whose files are gone.
    pub garbage_done: Vec<String>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty() && self.recordings.is_empty() && self.garbage_done.is_empty()
    }
}

/// The open catalog.
///
/// After an I/O error (a full disk, a failing card) redb refuses every later operation
/// until the database is closed and opened again; [`Catalog::reopen`] does that in place,
/// so the box need not restart to record again once space is freed.
pub struct Catalog {
    /// None between a failed reopen and the next.
    db: RwLock<Option<Arc<Database>>>,
    path: PathBuf,
    /// Times the catalog was opened again after an I/O error.
    pub reopens: AtomicU64,
    /// What it wrote to its file, for the flash wear report.
    pub writes: Arc<wear::CatalogWrites>,
    /// Stored event revisions get an MQTT outbox row ([`outbox`]).
    outbox_on: std::sync::atomic::AtomicBool,
}

fn open_db(path: &Path, writes: &Arc<wear::CatalogWrites>) -> Result<Database, CatalogError> {
    let file = crate::base::fs::open_or_create(path).map_err(|e| CatalogError::Storage(redb::Error::Io(e)))?;
    let backend = wear::Counted::new(file, path, writes.clone()).storage()?;
    Database::builder().set_cache_size(limits::CATALOG_CACHE_BYTES).create_with_backend(backend).storage()
}

/// Makes a new catalog at `path`, whole or not at all: built (its schema committed) under a
/// temporary name, then renamed into place and its directory synced. Otherwise a power cut
/// while redb lays out a new file can leave a file of the catalog's name that redb refuses
/// to open ("not a redb database"), and a box that never starts again (found by the
/// crash-point test).
fn create(path: &Path) -> Result<(), CatalogError> {
    let io = |e| CatalogError::Storage(redb::Error::Io(e));
    let mut staged_path = path.as_os_str().to_owned();
    staged_path.push(".new");
    let staged_path = PathBuf::from(staged_path);
    // What a creation cut short left.
    match crate::base::fs::remove_file(&staged_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    drop(Catalog::open_file(&staged_path)?);
    crate::base::fs::rename(&staged_path, path).map_err(io)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    crate::base::fs::sync_dir(dir).map_err(io)
}

impl Catalog {
    /// Opens (or creates) the catalog file, with the page cache bounded by
    /// [`limits::CATALOG_CACHE_BYTES`]. After an unclean shutdown redb repairs the file here.
    pub fn open(path: &Path) -> Result<Catalog, CatalogError> {
        if !path.exists() {
            create(path)?;
        }
        Catalog::open_file(path)
    }

    /// Opens the catalog file, its schema made or checked.
    fn open_file(path: &Path) -> Result<Catalog, CatalogError> {
        let writes = Arc::default();
        let db = open_db(path, &writes)?;
        let me = Catalog {
            db: RwLock::new(Some(Arc::new(db))),
            path: path.to_path_buf(),
            reopens: AtomicU64::new(0),
            writes,
            outbox_on: std::sync::atomic::AtomicBool::new(false),
        };
        me.init_schema()?;
        Ok(me)
    }

    /// The database, for one operation.
    fn db(&self) -> Result<Arc<Database>, CatalogError> {
        self.db.read().unwrap_or_else(PoisonError::into_inner).clone().ok_or(CatalogError::Closed)
    }

    /// Whether the catalog is closed after a reopen failed (its operations fail until the
    /// next [`Catalog::reopen`] succeeds).
    pub fn is_closed(&self) -> bool {
        self.db.read().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    /// Closes the database and opens it again (redb repairs it if it must): what an I/O
    /// error asks for. Operations already under way finish first (each holds the database
    /// only for its own call); if they do not within [`limits::CATALOG_REOPEN_WAIT_MS`] the
    /// catalog stays as it was and the caller tries again later.
    pub fn reopen(&self) -> Result<(), CatalogError> {
        let mut slot = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut held) = slot.take() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(limits::CATALOG_REOPEN_WAIT_MS);
            let db = loop {
                match Arc::try_unwrap(held) {
                    Ok(db) => break db,
                    Err(back) if std::time::Instant::now() >= deadline => {
                        *slot = Some(back);
                        return Err(CatalogError::Busy);
                    }
                    Err(back) => {
                        held = back;
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }
            };
            // It failed with I/O already; closing only releases the file.
            let _ = db.close();
        }
        let db = open_db(&self.path, &self.writes)?;
        *slot = Some(Arc::new(db));
        self.reopens.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn init_schema(&self) -> Result<(), CatalogError> {
        let txn = self.db()?.begin_write().storage()?;
        {
            let mut meta = txn.open_table(META).storage()?;
            let found = meta.get("schema_version").storage()?.map(|v| v.value());
            match found {
                None => {
                    meta.insert("schema_version", SCHEMA_VERSION).storage()?;
                }
                Some(SCHEMA_VERSION) => {}
                Some(found) => return Err(CatalogError::Schema { found }),
            }
            txn.open_table(STREAMS).storage()?;
            txn.open_table(RECORDINGS).storage()?;
            txn.open_table(FRAGMENTS).storage()?;
            txn.open_table(KEYFRAMES).storage()?;
            txn.open_table(GARBAGE).storage()?;
            txn.open_table(COVERAGE).storage()?;
            txn.open_table(USERS).storage()?;
            txn.open_table(TOKENS).storage()?;
            txn.open_table(config_revisions::CONFIG_REVISIONS).storage()?;
            txn.open_table(events::EVENTS).storage()?;
            txn.open_table(events::EVENT_REVISIONS).storage()?;
            txn.open_table(events::EVENT_SOURCE_IDS).storage()?;
            txn.open_table(events::EVENT_KEYS).storage()?;
            txn.open_table(events::EVENTS_BY_TIME).storage()?;
            txn.open_table(events::EVENTS_BY_CAMERA).storage()?;
            txn.open_table(events::EVENT_TERMS).storage()?;
            txn.open_table(events::EVENT_HOLDS).storage()?;
            txn.open_table(losses::LOSSES).storage()?;
            txn.open_table(archive::ARCHIVED).storage()?;
            txn.open_table(archive::UPLOADS).storage()?;
            txn.open_table(archive::MARKS).storage()?;
            txn.open_table(archive::DESCRIBE).storage()?;
            txn.open_table(archive::EVENT_MARKS).storage()?;
            txn.open_table(archive::EVENTS_DONE).storage()?;
            txn.open_table(camport::CAMPORT_LEASES).storage()?;
        }
        txn.commit().storage()
    }

    /// The id of stream `key`, created if new.
    pub fn stream_id(&self, key: &StreamKey) -> Result<u32, CatalogError> {
        let name = key.name();
        let name = name.as_str();
        let txn = self.db()?.begin_write().storage()?;
        let id = {
            let mut streams = txn.open_table(STREAMS).storage()?;
            let mut found = None;
            let mut max = 0;
            for entry in streams.iter().storage()? {
                let (k, v) = entry.storage()?;
                max = max.max(k.value());
                if v.value() == name {
                    found = Some(k.value());
                }
            }
            match found {
                Some(id) => id,
                None => {
                    streams.insert(max + 1, name).storage()?;
                    max + 1
                }
            }
        };
        txn.commit().storage()?;
        Ok(id)
    }

    /// All streams, by id.
    pub fn streams(&self) -> Result<Vec<(u32, String)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(STREAMS).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()? {
            let (k, v) = entry.storage()?;
            out.push((k.value(), v.value().to_string()));
        }
        Ok(out)
    }

    /// Allocates a run id (durably, with the next commit that uses it).
    pub fn next_run_id(&self) -> Result<u64, CatalogError> {
        self.bump("next_run_id")
    }

    fn bump(&self, key: &str) -> Result<u64, CatalogError> {
        let txn = self.db()?.begin_write().storage()?;
        let id = {
            let mut meta = txn.open_table(META).storage()?;
            let id = meta.get(key).storage()?.map_or(1, |v| v.value());
            meta.insert(key, id + 1).storage()?;
            id
        };
        txn.commit().storage()?;
        Ok(id)
    }

    /// Inserts a new, open recording and commits it durably, before its file exists.
    /// `make_path` turns the new id into the file's path relative to the data directory.
    pub fn begin_recording(
        &self,
        mut row: RecordingRow,
        make_path: impl FnOnce(u64) -> String,
    ) -> Result<(u64, RecordingRow), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let id = {
            let mut meta = txn.open_table(META).storage()?;
            let id = meta.get("next_recording_id").storage()?.map_or(1, |v| v.value());
            meta.insert("next_recording_id", id + 1).storage()?;
            row.path = make_path(id);
            if row.path.len() > limits::RECORDING_PATH_MAX_BYTES {
                return Err(CatalogError::PathTooLong { len_bytes: row.path.len() });
            }
            let mut recs = txn.open_table(RECORDINGS).storage()?;
            recs.insert(id, row.encode().as_slice()).storage()?;
            id
        };
        txn.commit().storage()?;
        Ok((id, row))
    }

    /// Applies a batch in one durable commit. The caller has fsynced every byte its fragment
    /// rows point at.
    pub fn commit(&self, batch: &Batch) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        {
            let mut frags = txn.open_table(FRAGMENTS).storage()?;
            let mut cov = txn.open_table(COVERAGE).storage()?;
            let recs = txn.open_table(RECORDINGS).storage()?;
            let streams: std::collections::BTreeMap<u64, u32> =
                batch.recordings.iter().map(|(id, r)| (*id, r.stream_id)).collect();
            for (rec, seq, row) in &batch.fragments {
                let stream_id = match streams.get(rec) {
                    Some(s) => *s,
                    None => match recs.get(*rec).storage()? {
                        Some(v) => RecordingRow::decode(v.value())?.stream_id,
                        None => return Err(CatalogError::NoRecording(*rec)),
                    },
                };
                let old = frags.insert((*rec, *seq), row.encode().as_slice()).storage()?;
                let old = old.map(|v| FragmentRow::decode(v.value())).transpose()?;
                if let Some(old) = old {
                    add_coverage(&mut cov, stream_id, &old, false)?;
                }
                add_coverage(&mut cov, stream_id, row, true)?;
            }
            drop(recs);
            let mut keys = txn.open_table(KEYFRAMES).storage()?;
            for (stream, rec, k) in &batch.keyframes {
                keys.insert((*stream, k.wall_us), (*rec, k.fragment_start_byte)).storage()?;
            }
            let mut recs = txn.open_table(RECORDINGS).storage()?;
            for (id, row) in &batch.recordings {
                recs.insert(*id, row.encode().as_slice()).storage()?;
            }
            let mut garbage = txn.open_table(GARBAGE).storage()?;
            for path in &batch.garbage_done {
                garbage.remove(path.as_str()).storage()?;
            }
        }
        txn.commit().storage()
    }

    /// Drops a recording's rows, lists its file as garbage and notes why its span is gone,
    /// in one durable commit. Returns the row that was dropped. The caller deletes the file,
    /// then reports it in a later batch's `garbage_done`.
    pub fn delete_recording(&self, id: u64, why: Loss) -> Result<RecordingRow, CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let row = {
            let mut recs = txn.open_table(RECORDINGS).storage()?;
            let row = match recs.remove(id).storage()? {
                Some(v) => RecordingRow::decode(v.value())?,
                None => return Err(CatalogError::NoRecording(id)),
            };
            let mut frags = txn.open_table(FRAGMENTS).storage()?;
            let mut cov = txn.open_table(COVERAGE).storage()?;
            let mut gone = Vec::new();
            for entry in frags.range((id, 0)..=(id, u32::MAX)).storage()? {
                gone.push(FragmentRow::decode(entry.storage()?.1.value())?);
            }
            for f in &gone {
                add_coverage(&mut cov, row.stream_id, f, false)?;
            }
            frags.retain_in((id, 0)..=(id, u32::MAX), |_, _| false).storage()?;
            let mut keys = txn.open_table(KEYFRAMES).storage()?;
            keys.retain_in((row.stream_id, row.wall_start_us)..=(row.stream_id, row.wall_end_us), |_, (rec, _)| {
                rec != id
            })
            .storage()?;
            let mut garbage = txn.open_table(GARBAGE).storage()?;
            garbage.insert(row.path.as_str(), ()).storage()?;
            let mut spans = txn.open_table(losses::LOSSES).storage()?;
            losses::note(&mut spans, row.stream_id, row.wall_start_us, row.wall_end_us, why)?;
            archive::forget_recording(&txn, id)?;
            row
        };
        txn.commit().storage()?;
        Ok(row)
    }

    /// A stream's coverage summaries for the hours from `from_us` to `to_us`, in order.
    pub fn coverage(&self, stream_id: u32, from_us: i64, to_us: i64) -> Result<Vec<(i64, Bucket)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(COVERAGE).storage()?;
        let mut out = Vec::new();
        for entry in t.range((stream_id, coverage::bucket_of(from_us))..=(stream_id, to_us)).storage()? {
            let (k, v) = entry.storage()?;
            out.push((k.value().1, Bucket::from_tuple(v.value())));
        }
        Ok(out)
    }

    /// What is stored of a stream in all: its bytes and recorded time (the sums of its hourly
    /// summaries, which retention takes from as it deletes) and the first hour that holds
    /// any of it. One pass over the stream's summaries: a few rows per day kept.
    pub fn stream_totals(&self, stream_id: u32) -> Result<StreamTotals, CatalogError> {
        let mut out = StreamTotals::default();
        for (hour, b) in self.coverage(stream_id, i64::MIN, i64::MAX)? {
            if b.recorded_us > 0 && out.first_hour_us.is_none() {
                out.first_hour_us = Some(hour);
            }
            out.bytes += b.bytes;
            out.recorded_us += b.recorded_us;
        }
        Ok(out)
    }

    /// A stream's coverage from `from_us` to `to_us` in buckets of `bucket_us` (a whole
    /// number of hours), summed from the maintained hourly summaries — a range of days reads
    /// a few rows per day, whatever was recorded in them.
    pub fn coverage_view(
        &self,
        stream_id: u32,
        from_us: i64,
        to_us: i64,
        bucket_us: i64,
    ) -> Result<Vec<(i64, Bucket)>, CatalogError> {
        let mut out: Vec<(i64, Bucket)> = Vec::new();
        for (hour, b) in self.coverage(stream_id, from_us, to_us)? {
            let start = hour.div_euclid(bucket_us) * bucket_us;
            match out.last_mut() {
                Some((s, total)) if *s == start => *total = coverage::apply(*total, b, true),
                _ => out.push((start, b)),
            }
        }
        Ok(out)
    }

    /// Adds or replaces a user (durably).
    pub fn put_user(&self, name: &str, role: u8, phc: &str) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        txn.open_table(USERS).storage()?.insert(name, (role, phc)).storage()?;
        txn.commit().storage()
    }

    /// A user's role and password hash.
    pub fn user(&self, name: &str) -> Result<Option<(u8, String)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(USERS).storage()?;
        Ok(t.get(name).storage()?.map(|v| {
            let (role, phc) = v.value();
            (role, phc.to_string())
        }))
    }

    /// Every user with their role.
    pub fn users(&self) -> Result<Vec<(String, u8)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(USERS).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()? {
            let (k, v) = entry.storage()?;
            out.push((k.value().to_string(), v.value().0));
        }
        Ok(out)
    }

    /// Removes a user; false if there was none.
    pub fn delete_user(&self, name: &str) -> Result<bool, CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let found = txn.open_table(USERS).storage()?.remove(name).storage()?.is_some();
        txn.commit().storage()?;
        Ok(found)
    }

    /// Stores a new token; returns its id.
    pub fn add_token(
        &self,
        name: &str,
        secret_sha256: &[u8; 32],
        scopes: u8,
        created_us: i64,
    ) -> Result<u64, CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let id = {
            let mut meta = txn.open_table(META).storage()?;
            let id = meta.get("next_token_id").storage()?.map_or(1, |v| v.value());
            meta.insert("next_token_id", id + 1).storage()?;
            txn.open_table(TOKENS)
                .storage()?
                .insert(id, (name, secret_sha256.as_slice(), scopes, created_us))
                .storage()?;
            id
        };
        txn.commit().storage()?;
        Ok(id)
    }

    /// A token's name, secret hash and scopes.
    pub fn token(&self, id: u64) -> Result<Option<(String, Vec<u8>, u8)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(TOKENS).storage()?;
        Ok(t.get(id).storage()?.map(|v| {
            let (name, hash, scopes, _) = v.value();
            (name.to_string(), hash.to_vec(), scopes)
        }))
    }

    /// Every token: id, name, scopes, created µs.
    pub fn tokens(&self) -> Result<Vec<(u64, String, u8, i64)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(TOKENS).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()? {
            let (k, v) = entry.storage()?;
            let (name, _, scopes, created) = v.value();
            out.push((k.value(), name.to_string(), scopes, created));
        }
        Ok(out)
    }

    /// Revokes a token; false if there was none.
    pub fn delete_token(&self, id: u64) -> Result<bool, CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let found = txn.open_table(TOKENS).storage()?.remove(id).storage()?.is_some();
        txn.commit().storage()?;
        Ok(found)
    }

    /// Lists a file as garbage without any rows (a file the catalog never knew).
    pub fn add_garbage(&self, path: &str) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        txn.open_table(GARBAGE).storage()?.insert(path, ()).storage()?;
        txn.commit().storage()
    }

    /// Files waiting to be deleted.
    pub fn garbage(&self) -> Result<Vec<String>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(GARBAGE).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()? {
            out.push(entry.storage()?.0.value().to_string());
        }
        Ok(out)
    }

    /// All recordings, oldest first.
    pub fn recordings(&self) -> Result<Vec<(u64, RecordingRow)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(RECORDINGS).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()? {
            let (k, v) = entry.storage()?;
            out.push((k.value(), RecordingRow::decode(v.value())?));
        }
        Ok(out)
    }

    /// One recording's row.
    pub fn recording(&self, id: u64) -> Result<Option<RecordingRow>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(RECORDINGS).storage()?;
        t.get(id).storage()?.map(|v| RecordingRow::decode(v.value())).transpose().map_err(Into::into)
    }

    /// A stream's last keyframe at or before `wall_us` (looking back at most `back_us`), or
    /// its first after it (looking ahead at most `ahead_us`): (recording, keyframe).
    pub fn keyframe_near(
        &self,
        stream_id: u32,
        wall_us: i64,
        back_us: i64,
        ahead_us: i64,
    ) -> Result<Option<(u64, Keyframe)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(KEYFRAMES).storage()?;
        type Entry<'a> = (redb::AccessGuard<'a, (u32, i64)>, redb::AccessGuard<'a, (u64, u64)>);
        let pick =
            |entry: Option<Result<Entry<'_>, redb::StorageError>>| -> Result<Option<(u64, Keyframe)>, CatalogError> {
                let Some(entry) = entry else { return Ok(None) };
                let (k, v) = entry.storage()?;
                let (rec, off) = v.value();
                Ok(Some((rec, Keyframe { wall_us: k.value().1, fragment_start_byte: off })))
            };
        let before =
            t.range((stream_id, wall_us.saturating_sub(back_us))..=(stream_id, wall_us)).storage()?.next_back();
        if let Some(found) = pick(before)? {
            return Ok(Some(found));
        }
        let after = t.range((stream_id, wall_us)..=(stream_id, wall_us.saturating_add(ahead_us))).storage()?.next();
        pick(after)
    }

    /// One recording's fragments, in order.
    pub fn fragments(&self, id: u64) -> Result<Vec<(u32, FragmentRow)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(FRAGMENTS).storage()?;
        let mut out = Vec::new();
        for entry in t.range((id, 0)..=(id, u32::MAX)).storage()? {
            let (k, v) = entry.storage()?;
            out.push((k.value().1, FragmentRow::decode(v.value())?));
        }
        Ok(out)
    }

    /// A stream's keyframes in a wall-time range.
    pub fn keyframes(&self, stream_id: u32, from_us: i64, to_us: i64) -> Result<Vec<(u64, Keyframe)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(KEYFRAMES).storage()?;
        let mut out = Vec::new();
        for entry in t.range((stream_id, from_us)..=(stream_id, to_us)).storage()? {
            let (k, v) = entry.storage()?;
            let (rec, off) = v.value();
            out.push((rec, Keyframe { wall_us: k.value().1, fragment_start_byte: off }));
        }
        Ok(out)
    }
}

/// Adds (or removes) one fragment's contribution to its stream's coverage rows.
fn add_coverage(
    cov: &mut redb::Table<'_, (u32, i64), (u64, u64, u64)>,
    stream_id: u32,
    f: &FragmentRow,
    add: bool,
) -> Result<(), CatalogError> {
    for (bucket, c) in coverage::contributions(f) {
        let total = cov.get((stream_id, bucket)).storage()?.map(|v| Bucket::from_tuple(v.value())).unwrap_or_default();
        let total = coverage::apply(total, c, add);
        if total == Bucket::default() {
            cov.remove((stream_id, bucket)).storage()?;
        } else {
            cov.insert((stream_id, bucket), total.to_tuple()).storage()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reopened_catalog_keeps_its_rows_and_waits_for_operations_at_most_catalog_reopen_wait_ms() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let key = StreamKey::new("front", crate::base::StreamKind::Main);
        let id = cat.stream_id(&key).unwrap();
        cat.reopen().unwrap();
        assert_eq!(cat.stream_id(&key).unwrap(), id, "the rows are there");
        // What the catalog wrote and synced is counted, across the reopen.
        let (bytes, syncs) = (cat.writes.bytes(), cat.writes.syncs.load(Ordering::Relaxed));
        assert!(bytes >= 4096 && syncs >= 1, "{bytes} bytes, {syncs} syncs");
        cat.stream_id(&StreamKey::new("yard", crate::base::StreamKind::Main)).unwrap();
        assert!(cat.writes.bytes() > bytes, "a commit writes pages");
        assert_eq!(cat.reopens.load(Ordering::Relaxed), 1);
        // An operation under way holds the database: reopening waits for it, then gives up.
        let held = cat.db().unwrap();
        let t = std::time::Instant::now();
        assert!(matches!(cat.reopen(), Err(CatalogError::Busy)));
        assert!(t.elapsed() >= std::time::Duration::from_millis(limits::CATALOG_REOPEN_WAIT_MS));
        assert!(!cat.is_closed(), "left as it was");
        drop(held);
        cat.reopen().unwrap();
        assert_eq!(cat.streams().unwrap().len(), 2);
    }
    use crate::base::StreamKind;

    fn row(stream_id: u32) -> RecordingRow {
        RecordingRow { stream_id, wall_start_us: 1_000, wall_end_us: 1_000, ..RecordingRow::for_test("") }
    }

    #[test]
    fn recordings_fragments_and_deletion_go_through_the_garbage_list() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("catalog.redb")).unwrap();
        let s = cat.stream_id(&StreamKey::new("cam", StreamKind::Main)).unwrap();
        assert_eq!(cat.stream_id(&StreamKey::new("cam", StreamKind::Main)).unwrap(), s);
        assert_ne!(cat.stream_id(&StreamKey::new("cam", StreamKind::Sub)).unwrap(), s);
        let (id, mut r) = cat.begin_recording(row(s), |id| format!("rec/{id}.mp4")).unwrap();
        assert_eq!(r.path, format!("rec/{id}.mp4"));
        let f = FragmentRow {
            wall_start_us: 1_000,
            wall_end_us: 2_000,
            media_start_90k: 0,
            duration_90k: 90,
            start_byte: 700,
            end_byte: 900,
            frames: 1,
            keyframes: 1,
        };
        r.fragments = 1;
        r.wall_end_us = 2_000;
        cat.commit(&Batch {
            fragments: vec![(id, 1, f)],
            keyframes: vec![(s, id, Keyframe { wall_us: 1_000, fragment_start_byte: 700 })],
            recordings: vec![(id, r.clone())],
            garbage_done: vec![],
        })
        .unwrap();
        assert_eq!(cat.recordings().unwrap(), vec![(id, r.clone())]);
        assert_eq!(cat.fragments(id).unwrap(), vec![(1, f)]);
        assert_eq!(cat.keyframes(s, 0, i64::MAX).unwrap().len(), 1);
        let hour = coverage::bucket_of(1_000);
        let covered = Bucket { recorded_us: 1_000, bytes: 200, fragments: 1 };
        assert_eq!(cat.coverage(s, 0, i64::MAX).unwrap(), vec![(hour, covered)]);
        // Committing the same row again (a retried batch) does not count it twice.
        cat.commit(&Batch { fragments: vec![(id, 1, f)], recordings: vec![(id, r.clone())], ..Batch::default() })
            .unwrap();
        assert_eq!(cat.coverage(s, 0, i64::MAX).unwrap(), vec![(hour, covered)]);

        assert_eq!(cat.delete_recording(id, Loss::Retention).unwrap(), r);
        assert!(cat.recordings().unwrap().is_empty());
        assert!(cat.fragments(id).unwrap().is_empty());
        assert!(cat.keyframes(s, 0, i64::MAX).unwrap().is_empty());
        assert!(cat.coverage(s, i64::MIN, i64::MAX).unwrap().is_empty(), "deletion takes its coverage along");
        assert_eq!(cat.garbage().unwrap(), vec![r.path.clone()]);
        cat.commit(&Batch { garbage_done: vec![r.path], ..Batch::default() }).unwrap();
        assert!(cat.garbage().unwrap().is_empty());
        assert!(matches!(cat.delete_recording(id, Loss::Retention), Err(CatalogError::NoRecording(_))));
    }

    #[test]
    fn an_overlong_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let long = "x".repeat(limits::RECORDING_PATH_MAX_BYTES + 1);
        assert!(matches!(cat.begin_recording(row(1), |_| long), Err(CatalogError::PathTooLong { .. })));
        assert!(cat.recordings().unwrap().is_empty());
    }
}

//! Events in the catalog: every revision, the latest one's search indexes, idempotency keys.
//!
//! Tables:
//! - `events`: event id → the latest revision ([`EventRecord`], JSON).
//! - `event_revisions`: (event id, revision) → that revision ([`EventRecord`], JSON).
//! - `event_source_ids`: (principal, the sender's event id) → event id: revisions by id are
//!   per sender, so two services cannot revise each other's events.
//! - `event_keys`: (principal, idempotency key) → (event id, revision).
//! - `events_by_time`: (time µs, event id); `events_by_camera`: (camera, time µs, event id);
//!   `event_terms`: (term, time µs, event id): what search walks, newest first. They follow
//!   the latest revision: a revision that moves an event in time or changes its labels
//!   moves its index rows in the same transaction.
//!
//! - `event_holds`: (camera, from µs, event id) → (to µs, until µs): the footage the latest
//!   revision holds against ordinary retention ([`Hold`]), moved with the index rows.
//!
//! An event's snapshot is a file under `events/` written and synced before the commit that
//! names it ([`EventRecord::snapshot`]); recovery deletes snapshot files no revision names.

use redb::{Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{Catalog, CatalogError, OrStorage, RowError};
use crate::limits;

pub(super) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
pub(super) const EVENT_REVISIONS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("event_revisions");
pub(super) const EVENT_SOURCE_IDS: TableDefinition<(&str, &str), u64> = TableDefinition::new("event_source_ids");
pub(super) const EVENT_KEYS: TableDefinition<(&str, &str), (u64, u32)> = TableDefinition::new("event_keys");
pub(super) const EVENTS_BY_TIME: TableDefinition<(i64, u64), ()> = TableDefinition::new("events_by_time");
pub(super) const EVENTS_BY_CAMERA: TableDefinition<(&str, i64, u64), ()> = TableDefinition::new("events_by_camera");
pub(super) const EVENT_TERMS: TableDefinition<(&str, i64, u64), ()> = TableDefinition::new("event_terms");
pub(super) const EVENT_HOLDS: TableDefinition<(&str, i64, u64), (i64, i64)> = TableDefinition::new("event_holds");

/// The footage an event holds against ordinary retention: its camera's recordings from its
/// pre-roll to its post-roll, until a time (its arrival and the camera's
/// `keep_event_footage_days`). Decided by the intake from the camera's config when it is
/// stored; a revision decides again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub from_us: i64,
    pub to_us: i64,
    pub until_us: i64,
}

/// What trimming to the caps let go.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Snapshot files to delete.
    pub files: Vec<String>,
    /// Cameras of events that held footage: their holds are to be built again.
    pub held_cameras: std::collections::BTreeSet<String>,
}

/// One event's hold, as [`Catalog::event_holds`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRow {
    pub event: u64,
    pub camera: String,
    pub hold: Hold,
}

/// A snapshot file of one revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Relative to the data directory.
    pub path: String,
    pub bytes: u64,
    pub width: u16,
    pub height: u16,
}

/// A box around something seen, in picture fractions (0 to 1, from the top left).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventBox {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
}

/// What a revision of an event says, as stored (and shown to browsers). The intake parses a
/// sender's envelope into it and checks every field (`events::envelope::parse`); an unknown
/// field is refused, there as here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventFields {
    /// The sender's id of the event: a later one with the same id is a revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub camera: String,
    /// When it happened, UTC µs.
    #[serde(default)]
    pub time_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<i64>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    #[serde(default)]
    pub boxes: Vec<EventBox>,
    #[serde(default)]
    pub text: String,
    /// The same key again is the same request: it is answered, not stored twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// It started (or extended) the camera's event recording.
    #[serde(default = "yes")]
    pub record: bool,
}

fn yes() -> bool {
    true
}

impl EventFields {
    /// The event's time (always set by the intake).
    pub fn time(&self) -> i64 {
        self.time_us.unwrap_or(0)
    }

    /// Search terms: each label (`label:person`, and the box labels) and each word of the
    /// text (`person`), lower-cased, deduplicated, at most [`limits::EVENT_TERMS_MAX`].
    pub fn terms(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let labels = self.labels.iter().chain(self.boxes.iter().filter_map(|b| b.label.as_ref()));
        let words = words(&self.text);
        for t in labels.map(|l| format!("label:{l}")).chain(words) {
            if out.len() == limits::EVENT_TERMS_MAX {
                break;
            }
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }
}

/// A label or term as the index keeps it: trimmed and lower-cased.
pub fn query_term(t: &str) -> String {
    t.trim().to_lowercase()
}

/// The searchable words of a text: runs of letters and digits, lower-cased, of 2 to
/// [`limits::EVENT_LABEL_MAX_BYTES`] bytes.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| (2..=limits::EVENT_LABEL_MAX_BYTES).contains(&w.len()))
}

/// One revision of an event, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub id: u64,
    pub rev: u32,
    /// Who sent it (`token:7`, `user:ann`).
    pub principal: String,
    pub received_us: i64,
    pub envelope: EventFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Snapshot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
}

impl EventRecord {
    pub(super) fn decode(b: &[u8]) -> Result<EventRecord, RowError> {
        serde_json::from_slice(b).map_err(|_| RowError { table: "events", why: "not an event record" })
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an event record serializes")
    }
}

/// What a new revision will be: its id and number, decided before its snapshot is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRevision {
    pub id: u64,
    pub rev: u32,
}

/// The answer to an idempotency key seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planned {
    /// Already stored under this key: answer with it.
    Replay(NextRevision),
    /// Store it as this.
    New(NextRevision),
    /// The event has [`limits::EVENT_REVISIONS_MAX`] revisions already.
    TooManyRevisions,
}

/// A search over the indexes.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub camera: Option<String>,
    pub from_us: i64,
    pub to_us: i64,
    /// Every term must match (`label:person`, words of the text).
    pub terms: Vec<String>,
    /// Continue after this (time, id), exclusive: the `next` of the previous page.
    pub before: Option<(i64, u64)>,
    pub limit: usize,
}

/// A page of results, newest first.
#[derive(Debug, Clone, Default)]
pub struct EventPage {
    pub events: Vec<EventRecord>,
    /// Where the next page starts, when there may be more.
    pub next: Option<(i64, u64)>,
}

impl Catalog {
    /// The id and revision the next envelope of `principal` will get, or the stored one when
    /// its idempotency key was seen before. The caller holds the event writer's lock from
    /// here until [`Catalog::put_event`].
    pub fn plan_event(&self, principal: &str, e: &EventFields) -> Result<Planned, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        if let Some(key) = &e.idempotency_key {
            let keys = txn.open_table(EVENT_KEYS).storage()?;
            if let Some(v) = keys.get((principal, key.as_str())).storage()? {
                let (id, rev) = v.value();
                return Ok(Planned::Replay(NextRevision { id, rev }));
            }
        }
        if let Some(source) = &e.id {
            let ids = txn.open_table(EVENT_SOURCE_IDS).storage()?;
            if let Some(id) = ids.get((principal, source.as_str())).storage()?.map(|v| v.value()) {
                let events = txn.open_table(EVENTS).storage()?;
                if let Some(row) = events.get(id).storage()? {
                    let latest = EventRecord::decode(row.value())?;
                    if latest.rev as usize >= limits::EVENT_REVISIONS_MAX {
                        return Ok(Planned::TooManyRevisions);
                    }
                    return Ok(Planned::New(NextRevision { id, rev: latest.rev + 1 }));
                }
            }
        }
        let meta = txn.open_table(super::META).storage()?;
        let id = meta.get("next_event_id").storage()?.map_or(1, |v| v.value());
        Ok(Planned::New(NextRevision { id, rev: 1 }))
    }

    /// Stores a planned revision and moves the event's index rows to it, in one durable
    /// commit. The snapshot file it names is already synced.
    pub fn put_event(&self, r: &EventRecord) -> Result<(), CatalogError> {
        self.put_events(std::slice::from_ref(r))
    }

    /// [`Catalog::put_event`] for many revisions, in one durable commit (an import).
    pub fn put_events(&self, records: &[EventRecord]) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        // Write transactions take turns: what the file gets from here to the commit is this one's.
        let before = self.writes.bytes();
        for r in records {
            let mut events = txn.open_table(EVENTS).storage()?;
            let old = events.get(r.id).storage()?.map(|v| EventRecord::decode(v.value())).transpose()?;
            {
                let mut meta = txn.open_table(super::META).storage()?;
                if old.is_none() {
                    let next = meta.get("next_event_id").storage()?.map_or(1, |v| v.value());
                    meta.insert("next_event_id", next.max(r.id + 1)).storage()?;
                    bump(&mut meta, "event_count", 1, true)?;
                }
                let bytes = r.snapshot.as_ref().map_or(0, |s| s.bytes);
                bump(&mut meta, "event_snapshot_bytes", bytes, true)?;
            }
            if let Some(old) = &old {
                unindex(&txn, old)?;
            }
            let bytes = r.encode();
            events.insert(r.id, bytes.as_slice()).storage()?;
            txn.open_table(EVENT_REVISIONS).storage()?.insert((r.id, r.rev), bytes.as_slice()).storage()?;
            if let Some(source) = &r.envelope.id {
                txn.open_table(EVENT_SOURCE_IDS)
                    .storage()?
                    .insert((r.principal.as_str(), source.as_str()), r.id)
                    .storage()?;
            }
            if let Some(key) = &r.envelope.idempotency_key {
                txn.open_table(EVENT_KEYS)
                    .storage()?
                    .insert((r.principal.as_str(), key.as_str()), (r.id, r.rev))
                    .storage()?;
            }
            index(&txn, r)?;
            if self.outbox_is_on() {
                super::outbox::add(&txn, r.id, r.rev)?;
            }
        }
        txn.commit().storage()?;
        let wrote = self.writes.bytes().saturating_sub(before);
        self.writes.event_bytes.fetch_add(wrote, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Events kept and the bytes of their snapshots.
    pub fn event_totals(&self) -> Result<(u64, u64), CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let meta = txn.open_table(super::META).storage()?;
        let get = |k: &str| -> Result<u64, CatalogError> { Ok(meta.get(k).storage()?.map_or(0, |v| v.value())) };
        Ok((get("event_count")?, get("event_snapshot_bytes")?))
    }

    /// Deletes the oldest events (every revision, index row, sender id and key) until at
    /// most `max_events` remain and their snapshots take at most `max_bytes`, in one durable
    /// commit; returns the snapshot files to delete (a crash before they are gone leaves
    /// files no revision names, which recovery deletes) and the cameras whose holds changed.
    pub fn trim_events(&self, max_events: u64, max_bytes: u64) -> Result<Trimmed, CatalogError> {
        let (mut count, mut bytes) = self.event_totals()?;
        let mut out = Trimmed::default();
        if count <= max_events && bytes <= max_bytes {
            return Ok(out);
        }
        let files = &mut out.files;
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        {
            let mut events = txn.open_table(EVENTS).storage()?;
            let mut revisions = txn.open_table(EVENT_REVISIONS).storage()?;
            let mut ids = txn.open_table(EVENT_SOURCE_IDS).storage()?;
            let mut keys = txn.open_table(EVENT_KEYS).storage()?;
            // Bounded per call: the rest goes with the next event stored.
            for _ in 0..limits::EVENT_TRIM_BATCH_MAX {
                if count <= max_events && bytes <= max_bytes {
                    break;
                }
                let Some(id) = events.first().storage()?.map(|(k, _)| k.value()) else {
                    break;
                };
                let mut tables =
                    EventTables { events: &mut events, revisions: &mut revisions, ids: &mut ids, keys: &mut keys };
                let (latest, freed) = remove_event(&txn, &mut tables, id, files)?;
                if latest.hold.is_some() {
                    out.held_cameras.insert(latest.envelope.camera);
                }
                bytes = bytes.saturating_sub(freed);
                count = count.saturating_sub(1);
            }
            let mut meta = txn.open_table(super::META).storage()?;
            meta.insert("event_count", count).storage()?;
            meta.insert("event_snapshot_bytes", bytes).storage()?;
        }
        txn.commit().storage()?;
        Ok(out)
    }

    /// Deletes event `id` (an admin's request): every revision, index row, sender id, key
    /// and its hold, in one durable commit. Returns the latest revision and the snapshot
    /// files to delete (a crash before they go leaves files recovery deletes), or none when
    /// there is no such event.
    pub fn delete_event(&self, id: u64) -> Result<Option<(EventRecord, Vec<String>)>, CatalogError> {
        let mut files = Vec::new();
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let latest = {
            let mut events = txn.open_table(EVENTS).storage()?;
            if events.get(id).storage()?.is_none() {
                return Ok(None);
            }
            let mut revisions = txn.open_table(EVENT_REVISIONS).storage()?;
            let mut ids = txn.open_table(EVENT_SOURCE_IDS).storage()?;
            let mut keys = txn.open_table(EVENT_KEYS).storage()?;
            let mut tables =
                EventTables { events: &mut events, revisions: &mut revisions, ids: &mut ids, keys: &mut keys };
            let (latest, freed) = remove_event(&txn, &mut tables, id, &mut files)?;
            let mut meta = txn.open_table(super::META).storage()?;
            bump(&mut meta, "event_count", 1, false)?;
            bump(&mut meta, "event_snapshot_bytes", freed, false)?;
            latest
        };
        txn.commit().storage()?;
        Ok(Some((latest, files)))
    }

    /// Whether camera `camera` has an event from `from_us` to `to_us` (inclusive).
    pub fn has_event_between(&self, camera: &str, from_us: i64, to_us: i64) -> Result<bool, CatalogError> {
        if from_us > to_us {
            return Ok(false);
        }
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENTS_BY_CAMERA).storage()?;
        Ok(t.range((camera, from_us, 0)..=(camera, to_us, u64::MAX)).storage()?.next().is_some())
    }

    /// The holds of camera `camera` (every camera's with none) that last past `now_us`.
    /// Bounded by the events kept ([`limits::EVENTS_MAX`]); the caller keeps what fits.
    pub fn event_holds(&self, camera: Option<&str>, now_us: i64) -> Result<Vec<HoldRow>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENT_HOLDS).storage()?;
        let rows = match camera {
            Some(c) => t.range((c, i64::MIN, 0)..=(c, i64::MAX, u64::MAX)).storage()?,
            None => t.range::<(&str, i64, u64)>(..).storage()?,
        };
        let mut out = Vec::new();
        for entry in rows {
            let (k, v) = entry.storage()?;
            let (camera, from_us, event) = k.value();
            let (to_us, until_us) = v.value();
            if until_us > now_us {
                out.push(HoldRow { event, camera: camera.to_string(), hold: Hold { from_us, to_us, until_us } });
            }
        }
        Ok(out)
    }

    /// The latest revision of event `id`.
    pub fn event(&self, id: u64) -> Result<Option<EventRecord>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENTS).storage()?;
        Ok(t.get(id).storage()?.map(|v| EventRecord::decode(v.value())).transpose()?)
    }

    /// One revision of event `id`.
    pub fn event_revision(&self, id: u64, rev: u32) -> Result<Option<EventRecord>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENT_REVISIONS).storage()?;
        Ok(t.get((id, rev)).storage()?.map(|v| EventRecord::decode(v.value())).transpose()?)
    }

    /// Event `id`'s revisions after revision `after`, oldest first, at most `limit`.
    pub fn event_revisions(&self, id: u64, after: u32, limit: usize) -> Result<Vec<EventRecord>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENT_REVISIONS).storage()?;
        let mut out = Vec::new();
        let Some(first) = after.checked_add(1) else { return Ok(out) };
        for entry in t.range((id, first)..=(id, u32::MAX)).storage()?.take(limit) {
            out.push(EventRecord::decode(entry.storage()?.1.value())?);
        }
        Ok(out)
    }

    /// True when some revision names snapshot `path` (recovery's question).
    pub fn snapshot_named(&self, id: u64, rev: u32, path: &str) -> Result<bool, CatalogError> {
        Ok(self.event_revision(id, rev)?.and_then(|r| r.snapshot).is_some_and(|s| s.path == path))
    }

    /// Events matching `q`, newest first, from the indexes: it walks one index (of the terms
    /// and the camera, the one with the fewest rows in the window; else time's) backwards and checks the other conditions
    /// by point lookups, looking at no more than [`limits::EVENT_SEARCH_SCAN_MAX`] index rows;
    /// past that the page ends early with `next` set.
    pub fn search_events(&self, q: &EventQuery) -> Result<EventPage, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let terms = txn.open_table(EVENT_TERMS).storage()?;
        let cameras = txn.open_table(EVENTS_BY_CAMERA).storage()?;
        let times = txn.open_table(EVENTS_BY_TIME).storage()?;
        let events = txn.open_table(EVENTS).storage()?;
        let limit = q.limit.clamp(1, limits::EVENT_SEARCH_RESULTS_MAX);
        // The newest (time, id) a result may have.
        let (top_time, top_id) = match q.before {
            Some((t, id)) if id > 0 => (t.min(q.to_us), if t <= q.to_us { id - 1 } else { u64::MAX }),
            Some((t, _)) => (t.saturating_sub(1).min(q.to_us), u64::MAX),
            None => (q.to_us, u64::MAX),
        };
        if top_time < q.from_us {
            return Ok(EventPage::default());
        }
        // Every condition but time is an index; the one with the fewest rows in the window
        // (counted up to a probe's worth each) is walked, the others are point lookups.
        let mut filters: Vec<Filter> =
            q.terms.iter().map(|t| Filter::Term(t)).chain(q.camera.iter().map(|c| Filter::Camera(c))).collect();
        let in_window = |f: &Filter| -> Result<Range, CatalogError> {
            Ok(match f {
                Filter::Term(t) => Range::Term(terms.range((*t, q.from_us, 0)..=(*t, top_time, top_id)).storage()?),
                Filter::Camera(c) => {
                    Range::Camera(cameras.range((*c, q.from_us, 0)..=(*c, top_time, top_id)).storage()?)
                }
            })
        };
        let mut fewest = None;
        for (i, f) in filters.iter().enumerate() {
            let n = in_window(f)?.take(limits::EVENT_SEARCH_PROBE_ROWS).count();
            if fewest.is_none_or(|(_, m)| n < m) {
                fewest = Some((i, n));
            }
        }
        let candidates: Box<dyn Iterator<Item = Result<(i64, u64), CatalogError>>> = match fewest {
            Some((i, _)) => {
                let driver = filters.swap_remove(i);
                Box::new(in_window(&driver)?.rev())
            }
            None => Box::new(times.range((q.from_us, 0)..=(top_time, top_id)).storage()?.rev().map(|e| {
                let (k, _) = e.storage()?;
                Ok(k.value())
            })),
        };
        let mut page = EventPage::default();
        let mut scanned = 0;
        for c in candidates {
            let (t, id) = c?;
            scanned += 1;
            let mut matches = true;
            for f in &filters {
                matches = match f {
                    Filter::Term(term) => terms.get((*term, t, id)).storage()?.is_some(),
                    Filter::Camera(cam) => cameras.get((*cam, t, id)).storage()?.is_some(),
                };
                if !matches {
                    break;
                }
            }
            if matches && let Some(row) = events.get(id).storage()? {
                page.events.push(EventRecord::decode(row.value())?);
                if page.events.len() == limit {
                    page.next = Some((t, id));
                    break;
                }
            }
            if scanned == limits::EVENT_SEARCH_SCAN_MAX {
                page.next = Some((t, id));
                break;
            }
        }
        Ok(page)
    }
}

/// Adds `by` to (or takes it from) a counter in `meta`.
fn bump(meta: &mut redb::Table<'_, &str, u64>, key: &str, by: u64, add: bool) -> Result<(), CatalogError> {
    let v = meta.get(key).storage()?.map_or(0, |v| v.value());
    let v = if add { v.saturating_add(by) } else { v.saturating_sub(by) };
    meta.insert(key, v).storage()?;
    Ok(())
}

/// The tables one event's rows live in, opened once by the caller.
struct EventTables<'a, 't> {
    events: &'a mut redb::Table<'t, u64, &'static [u8]>,
    revisions: &'a mut redb::Table<'t, (u64, u32), &'static [u8]>,
    ids: &'a mut redb::Table<'t, (&'static str, &'static str), u64>,
    keys: &'a mut redb::Table<'t, (&'static str, &'static str), (u64, u32)>,
}

/// Removes event `id` (which exists): every revision, its sender id and keys, the latest
/// revision's index rows and hold. Adds its snapshot files to `files`; returns the latest
/// revision and the snapshot bytes freed. The caller keeps the totals.
fn remove_event(
    txn: &redb::WriteTransaction,
    t: &mut EventTables<'_, '_>,
    id: u64,
    files: &mut Vec<String>,
) -> Result<(EventRecord, u64), CatalogError> {
    let latest = match t.events.remove(id).storage()? {
        Some(v) => EventRecord::decode(v.value())?,
        None => return Err(CatalogError::NoEvent(id)),
    };
    let revs: Vec<EventRecord> = t
        .revisions
        .range((id, 0)..=(id, u32::MAX))
        .storage()?
        .map(|e| -> Result<EventRecord, CatalogError> { Ok(EventRecord::decode(e.storage()?.1.value())?) })
        .collect::<Result<_, _>>()?;
    let mut freed = 0;
    for r in &revs {
        t.revisions.remove((id, r.rev)).storage()?;
        if let Some(snap) = &r.snapshot {
            freed += snap.bytes;
            files.push(snap.path.clone());
        }
        if let Some(key) = &r.envelope.idempotency_key {
            t.keys.remove((r.principal.as_str(), key.as_str())).storage()?;
        }
        if let Some(source) = &r.envelope.id {
            t.ids.remove((r.principal.as_str(), source.as_str())).storage()?;
        }
    }
    unindex(txn, &latest)?;
    Ok((latest, freed))
}

/// A search condition kept in an index.
enum Filter<'a> {
    Term(&'a str),
    Camera(&'a str),
}

/// A window of one index, newest last: (time, event id) of each row.
enum Range<'a> {
    Term(redb::Range<'a, (&'static str, i64, u64), ()>),
    Camera(redb::Range<'a, (&'static str, i64, u64), ()>),
}

impl Iterator for Range<'_> {
    type Item = Result<(i64, u64), CatalogError>;

    fn next(&mut self) -> Option<Self::Item> {
        let e = match self {
            Range::Term(r) | Range::Camera(r) => r.next()?,
        };
        Some(time_and_id(e))
    }
}

impl DoubleEndedIterator for Range<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let e = match self {
            Range::Term(r) | Range::Camera(r) => r.next_back()?,
        };
        Some(time_and_id(e))
    }
}

type IndexEntry<'a> = (redb::AccessGuard<'a, (&'static str, i64, u64)>, redb::AccessGuard<'a, ()>);

/// The (time, event id) of an index row.
fn time_and_id(e: Result<IndexEntry<'_>, redb::StorageError>) -> Result<(i64, u64), CatalogError> {
    e.storage().map(|(k, _)| {
        let (_, t, id) = k.value();
        (t, id)
    })
}

/// The index rows of revision `r`.
fn index(txn: &redb::WriteTransaction, r: &EventRecord) -> Result<(), CatalogError> {
    let (t, id) = (r.envelope.time(), r.id);
    txn.open_table(EVENTS_BY_TIME).storage()?.insert((t, id), ()).storage()?;
    txn.open_table(EVENTS_BY_CAMERA).storage()?.insert((r.envelope.camera.as_str(), t, id), ()).storage()?;
    let mut terms = txn.open_table(EVENT_TERMS).storage()?;
    for term in r.envelope.terms() {
        terms.insert((term.as_str(), t, id), ()).storage()?;
    }
    if let Some(h) = &r.hold {
        let mut holds = txn.open_table(EVENT_HOLDS).storage()?;
        holds.insert((r.envelope.camera.as_str(), h.from_us, id), (h.to_us, h.until_us)).storage()?;
    }
    Ok(())
}

/// Removes the index rows of revision `r`.
fn unindex(txn: &redb::WriteTransaction, r: &EventRecord) -> Result<(), CatalogError> {
    let (t, id) = (r.envelope.time(), r.id);
    txn.open_table(EVENTS_BY_TIME).storage()?.remove((t, id)).storage()?;
    txn.open_table(EVENTS_BY_CAMERA).storage()?.remove((r.envelope.camera.as_str(), t, id)).storage()?;
    let mut terms = txn.open_table(EVENT_TERMS).storage()?;
    for term in r.envelope.terms() {
        terms.remove((term.as_str(), t, id)).storage()?;
    }
    if let Some(h) = &r.hold {
        txn.open_table(EVENT_HOLDS).storage()?.remove((r.envelope.camera.as_str(), h.from_us, id)).storage()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000_000;

    /// Fields as the intake leaves them: a missing time is the arrival's.
    fn envelope(json: serde_json::Value) -> EventFields {
        let mut e: EventFields = serde_json::from_value(json).unwrap();
        e.time_us.get_or_insert(T0);
        e
    }

    fn store(cat: &Catalog, principal: &str, e: EventFields) -> Planned {
        let plan = cat.plan_event(principal, &e).unwrap();
        if let Planned::New(n) = plan {
            let r = EventRecord {
                id: n.id,
                rev: n.rev,
                principal: principal.into(),
                received_us: T0,
                envelope: e,
                snapshot: None,
                hold: None,
            };
            cat.put_event(&r).unwrap();
        }
        plan
    }

    fn ids(page: &EventPage) -> Vec<u64> {
        page.events.iter().map(|e| e.id).collect()
    }

    #[test]
    fn revisions_by_sender_id_and_idempotency_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let e = |rev: u32, key: &str| {
            envelope(
                serde_json::json!({"id": "d1", "camera": "front", "labels": [format!("l{rev}")], "idempotency_key": key}),
            )
        };
        assert_eq!(store(&cat, "token:1", e(1, "a")), Planned::New(NextRevision { id: 1, rev: 1 }));
        assert_eq!(store(&cat, "token:1", e(2, "b")), Planned::New(NextRevision { id: 1, rev: 2 }));
        assert_eq!(
            store(&cat, "token:1", e(2, "b")),
            Planned::Replay(NextRevision { id: 1, rev: 2 }),
            "a key seen before"
        );
        // Another sender's "d1" is another event; its key "a" is its own.
        assert_eq!(store(&cat, "token:2", e(1, "a")), Planned::New(NextRevision { id: 2, rev: 1 }));
        assert_eq!(cat.event_revisions(1, 0, 10).unwrap().len(), 2);
        assert_eq!(cat.event_revisions(1, 1, 10).unwrap().len(), 1, "after the first");
        assert_eq!(cat.event_totals().unwrap(), (2, 0));
        assert_eq!(cat.event(1).unwrap().unwrap().envelope.labels, ["l2"]);
        // The index follows the latest revision.
        let q = |term: &str| EventQuery {
            from_us: 0,
            to_us: i64::MAX,
            terms: vec![term.into()],
            limit: 10,
            ..EventQuery::default()
        };
        assert_eq!(ids(&cat.search_events(&q("label:l2")).unwrap()), [1]);
        assert_eq!(ids(&cat.search_events(&q("label:l1")).unwrap()), [2]);
    }

    #[test]
    fn the_oldest_events_go_first_past_the_count_or_snapshot_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        for i in 0..6u64 {
            let e = envelope(serde_json::json!({"id": format!("d{i}"), "camera": "front", "time_us": T0 + i as i64,
                "labels": ["person"], "idempotency_key": format!("k{i}")}));
            let r = EventRecord {
                id: i + 1,
                rev: 1,
                principal: "token:1".into(),
                received_us: T0,
                envelope: e,
                snapshot: Some(Snapshot { path: format!("s{i}"), bytes: 100, width: 1, height: 1 }),
                hold: None,
            };
            cat.put_event(&r).unwrap();
        }
        assert_eq!(cat.event_totals().unwrap(), (6, 600));
        assert!(cat.trim_events(6, 600).unwrap().files.is_empty(), "under both caps");
        assert_eq!(cat.trim_events(4, 600).unwrap().files, ["s0", "s1"], "by count, oldest first");
        assert_eq!(cat.trim_events(10, 250).unwrap().files, ["s2", "s3"], "by bytes");
        assert_eq!(cat.event_totals().unwrap(), (2, 200));
        assert!(cat.event(1).unwrap().is_none() && cat.event(5).unwrap().is_some());
        let q = EventQuery {
            from_us: 0,
            to_us: i64::MAX,
            terms: vec!["label:person".into()],
            limit: 10,
            ..EventQuery::default()
        };
        assert_eq!(ids(&cat.search_events(&q).unwrap()), [6, 5], "their index rows went too");
        // Their keys and sender ids went with them: the same key is a new event now.
        let again = envelope(serde_json::json!({"id": "d0", "camera": "front", "idempotency_key": "k0"}));
        assert_eq!(cat.plan_event("token:1", &again).unwrap(), Planned::New(NextRevision { id: 7, rev: 1 }));
    }

    #[test]
    fn revisions_stop_at_their_ceiling_and_come_a_page_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let page = limits::EVENT_REVISIONS_PAGE_MAX as u32;
        let revs: Vec<EventRecord> = (1..=page + 1)
            .map(|rev| EventRecord {
                id: 1,
                rev,
                principal: "token:1".into(),
                received_us: T0,
                envelope: envelope(serde_json::json!({"id": "d1", "camera": "front"})),
                snapshot: None,
                hold: None,
            })
            .collect();
        cat.put_events(&revs).unwrap();
        let first = cat.event_revisions(1, 0, limits::EVENT_REVISIONS_PAGE_MAX).unwrap();
        assert_eq!(first.len(), limits::EVENT_REVISIONS_PAGE_MAX);
        assert_eq!(cat.event_revisions(1, page, limits::EVENT_REVISIONS_PAGE_MAX).unwrap().len(), 1);
        let e = envelope(serde_json::json!({"id": "d1", "camera": "front"}));
        assert_eq!(cat.plan_event("token:1", &e).unwrap(), Planned::New(NextRevision { id: 1, rev: page + 2 }));
        // At the ceiling of revisions, no more.
        let last = EventRecord { rev: limits::EVENT_REVISIONS_MAX as u32, ..revs[0].clone() };
        cat.put_event(&last).unwrap();
        assert_eq!(cat.plan_event("token:1", &e).unwrap(), Planned::TooManyRevisions);
    }

    #[test]
    fn one_trim_lets_at_most_its_batch_go() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let n = limits::EVENT_TRIM_BATCH_MAX as u64 + 6;
        let all: Vec<EventRecord> = (1..=n)
            .map(|id| EventRecord {
                id,
                rev: 1,
                principal: "token:1".into(),
                received_us: T0,
                envelope: envelope(serde_json::json!({"camera": "front"})),
                snapshot: None,
                hold: None,
            })
            .collect();
        cat.put_events(&all).unwrap();
        cat.trim_events(0, u64::MAX).unwrap();
        assert_eq!(cat.event_totals().unwrap().0, 6, "the rest go with the next event");
        cat.trim_events(0, u64::MAX).unwrap();
        assert_eq!(cat.event_totals().unwrap().0, 0);
    }

    #[test]
    fn search_by_camera_time_labels_and_words_with_pages() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        for i in 0..30i64 {
            let camera = if i % 2 == 0 { "front" } else { "back" };
            let label = if i % 3 == 0 { "person" } else { "car" };
            let text = if i % 5 == 0 { "delivery van" } else { "" };
            store(
                &cat,
                "token:1",
                envelope(
                    serde_json::json!({"camera": camera, "time_us": T0 + i * 1_000_000, "labels": [label], "text": text}),
                ),
            );
        }
        let all = EventQuery { from_us: 0, to_us: i64::MAX, limit: 100, ..EventQuery::default() };
        let page = cat.search_events(&all).unwrap();
        assert_eq!(ids(&page), (1..=30).rev().collect::<Vec<u64>>(), "newest first");
        assert_eq!(page.next, None);
        let q = EventQuery { camera: Some("front".into()), terms: vec!["label:person".into()], ..all.clone() };
        // front: even i; person: i % 3 == 0 → i in {0, 6, 12, 18, 24} → ids i + 1.
        assert_eq!(ids(&cat.search_events(&q).unwrap()), [25, 19, 13, 7, 1]);
        let q = EventQuery { terms: vec!["delivery".into(), "label:car".into()], ..all.clone() };
        assert_eq!(ids(&cat.search_events(&q).unwrap()), [26, 21, 11, 6]);
        let q = EventQuery { from_us: T0 + 10_000_000, to_us: T0 + 12_000_000, ..all.clone() };
        assert_eq!(ids(&cat.search_events(&q).unwrap()), [13, 12, 11]);
        // Pages of 4 walk the whole set once.
        let mut seen = Vec::new();
        let mut q = EventQuery { limit: 4, ..all.clone() };
        loop {
            let page = cat.search_events(&q).unwrap();
            seen.extend(ids(&page));
            match page.next {
                Some(n) => q.before = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (1..=30).rev().collect::<Vec<u64>>());
    }

    #[test]
    fn a_search_stops_at_its_scan_ceiling_and_says_where_to_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        let n = 2 * limits::EVENT_SEARCH_SCAN_MAX as i64 + 10;
        let mut txn = cat.db().unwrap().begin_write().unwrap();
        txn.set_durability(Durability::None).unwrap();
        for i in 0..n {
            let r = EventRecord {
                id: i as u64 + 1,
                rev: 1,
                principal: "token:1".into(),
                received_us: T0,
                envelope: envelope(
                    serde_json::json!({"camera": "front", "time_us": T0 + i, "labels": if i < 3 { vec!["rare"] } else { vec![if i % 2 == 0 { "even" } else { "odd" }, "common"] }}),
                ),
                snapshot: None,
                hold: None,
            };
            txn.open_table(EVENTS).unwrap().insert(r.id, r.encode().as_slice()).unwrap();
            index(&txn, &r).unwrap();
        }
        txn.commit().unwrap();
        // "front" and "rare": the camera index is not what is walked (a term is), so the
        // three rare ones are found at once.
        let q = EventQuery {
            from_us: 0,
            to_us: i64::MAX,
            limit: 10,
            terms: vec!["label:rare".into()],
            camera: Some("front".into()),
            before: None,
        };
        assert_eq!(ids(&cat.search_events(&q).unwrap()), [3, 2, 1]);
        // Two terms, the first common: the rare one is walked, so the answer (none has both)
        // comes at once.
        let q = EventQuery { terms: vec!["label:common".into(), "label:rare".into()], ..q };
        let page = cat.search_events(&q).unwrap();
        assert!(page.events.is_empty());
        assert_eq!(page.next, None);
        // Only the common term, with a camera no event has: the camera's index is walked.
        let q = EventQuery { terms: vec!["label:common".into()], camera: Some("back".into()), ..q };
        assert_eq!(cat.search_events(&q).unwrap().next, None);
        // Two large conditions no event meets together: past the scan ceiling the page ends
        // early and says where to go on, and going on ends.
        let q = EventQuery { terms: vec!["label:even".into(), "label:odd".into()], camera: None, ..q };
        let page = cat.search_events(&q).unwrap();
        assert!(page.events.is_empty());
        let next = page.next.expect("where to go on");
        let page = cat.search_events(&EventQuery { before: Some(next), ..q.clone() }).unwrap();
        assert!(page.events.is_empty());
        assert_eq!(page.next, None, "the rest fit in one more page");
        // A page holds at most its ceiling of results.
        let q = EventQuery { terms: vec!["label:common".into()], limit: 10_000, ..q };
        let page = cat.search_events(&q).unwrap();
        assert_eq!(page.events.len(), limits::EVENT_SEARCH_RESULTS_MAX);
        assert!(page.next.is_some());
    }
}

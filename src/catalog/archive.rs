//! What the offsite archive has done, per target: the recordings it stored (their key, size
//! and ETag), its multipart uploads under way (their id and the ETags of the parts sent, so a
//! restart sends only what is missing), and its mark: every recording below it is archived,
//! gone, or not one the target takes. Events have a mark of their own, and the revision each
//! event above it was archived at (rows below the mark go with it).
//!
//! Most of these rows are written in commits that do not wait for the disk
//! (`Durability::None`): the recorder's next durable commit, within a flush interval,
//! carries them. A crash or a power cut before it forgets the last whole objects stored,
//! and they are sent again under the same key with the same bytes: nothing in the bucket is
//! two objects for one recording. A multipart upload's rows are durable at once (a commit a
//! part, one a [`crate::limits::ARCHIVE_PART_BYTES`] sent): a restart sends only the parts
//! missing, and never completes an upload twice.

use redb::{Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::events::{EVENTS, EventRecord};
use super::rows::RecordingRow;
use super::{Catalog, CatalogError, OrStorage, RECORDINGS};
use crate::limits;

/// (target, recording) → (key, bytes, ETag, when it was done, UTC µs)
pub(super) const ARCHIVED: TableDefinition<(&str, u64), (&str, u64, &str, i64)> = TableDefinition::new("archive_done");
/// (target, recording) → (key, upload id, the parts' ETags joined by `,`)
pub(super) const UPLOADS: TableDefinition<(&str, u64), (&str, &str, &str)> = TableDefinition::new("archive_uploads");
/// target → the mark
pub(super) const MARKS: TableDefinition<&str, u64> = TableDefinition::new("archive_marks");
/// target → the events' mark: every event below it is archived at its last revision (and
/// that a while ago), gone, or not one the target takes.
pub(super) const EVENT_MARKS: TableDefinition<&str, u64> = TableDefinition::new("archive_event_marks");
/// (target, event) → the revision archived, for events at or above the mark.
pub(super) const EVENTS_DONE: TableDefinition<(&str, u64), u32> = TableDefinition::new("archive_events_done");
/// (target, stream, day, recording or event) → its manifest entry (JSON), archived and not
/// yet in a manifest the bucket holds. An event's stream is `<camera>/events`.
pub(super) const DESCRIBE: TableDefinition<(&str, &str, &str, u64), &[u8]> = TableDefinition::new("archive_describe");

/// Entries waiting for one manifest: (stream, day) and each recording's entry.
pub type Undescribed = ((String, String), Vec<(u64, Vec<u8>)>);

/// A recording stored in a target's bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    pub key: String,
    pub bytes: u64,
    pub etag: String,
    pub done_us: i64,
}

/// What a target has yet to archive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Backlog {
    pub objects: u64,
    pub bytes: u64,
    /// The start of the oldest recording waiting (UTC µs).
    pub oldest_us: Option<i64>,
    /// More recordings than were looked at: the backlog is at least this.
    pub more: bool,
}

/// Whether a target takes a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    Yes,
    /// Not now, but it may yet (an event may still come for it).
    Maybe,
    No,
}

/// What a target may still want of the recordings it looked at: every one below
/// `looked_upto` not in `ids` it has stored or will never take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub looked_upto: u64,
    pub ids: Vec<u64>,
}

/// A multipart upload under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub key: String,
    pub id: String,
    /// The ETags of parts 1, 2, … sent so far.
    pub parts: Vec<String>,
}

/// Drops what every target noted of recording `id` (deleted locally): its bucket's copy and
/// manifests stay, and an upload of it under way is left to the bucket's own clean-up of
/// incomplete uploads.
pub(super) fn forget_recording(txn: &redb::WriteTransaction, id: u64) -> Result<(), CatalogError> {
    let targets: Vec<String> = {
        let marks = txn.open_table(MARKS).storage()?;
        let mut out = Vec::new();
        for entry in marks.iter().storage()? {
            out.push(entry.storage()?.0.value().to_string());
        }
        out
    };
    let mut done = txn.open_table(ARCHIVED).storage()?;
    let mut uploads = txn.open_table(UPLOADS).storage()?;
    for t in &targets {
        done.remove((t.as_str(), id)).storage()?;
        uploads.remove((t.as_str(), id)).storage()?;
    }
    Ok(())
}

/// Whether recording `id` is in the catalog.
fn exists(txn: &redb::WriteTransaction, id: u64) -> Result<bool, CatalogError> {
    Ok(txn.open_table(RECORDINGS).storage()?.get(id).storage()?.is_some())
}

impl Catalog {
    fn write_lazily(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), CatalogError>,
    ) -> Result<(), CatalogError> {
        self.write_archive(Durability::None, f)
    }

    fn write_archive(
        &self,
        durability: Durability,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), CatalogError>,
    ) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(durability).storage()?;
        f(&txn)?;
        txn.commit().storage()
    }

    /// Target `target`'s mark (1 when it has none yet: recording ids start at 1).
    pub fn archive_mark(&self, target: &str) -> Result<u64, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(MARKS).storage()?;
        Ok(t.get(target).storage()?.map_or(1, |v| v.value()))
    }

    pub fn set_archive_mark(&self, target: &str, mark: u64) -> Result<(), CatalogError> {
        self.write_lazily(|txn| {
            txn.open_table(MARKS).storage()?.insert(target, mark).storage()?;
            Ok(())
        })
    }

    /// Up to `limit` recordings from id `from` on, oldest first.
    pub fn recordings_from(&self, from: u64, limit: usize) -> Result<Vec<(u64, RecordingRow)>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(RECORDINGS).storage()?;
        let mut out = Vec::new();
        for entry in t.range(from..).storage()?.take(limit) {
            let (k, v) = entry.storage()?;
            out.push((k.value(), RecordingRow::decode(v.value())?));
        }
        Ok(out)
    }

    /// What `target` still has to archive: the closed recordings from id `from` on that
    /// `takes` wants and that are not archived, looking at `rows` recordings at most. With
    /// it, what the target may still want ([`Wanted`]).
    pub fn archive_backlog(
        &self,
        target: &str,
        from: u64,
        rows: usize,
        mut takes: impl FnMut(&RecordingRow) -> Take,
    ) -> Result<(Backlog, Wanted), CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let recs = txn.open_table(RECORDINGS).storage()?;
        let done = txn.open_table(ARCHIVED).storage()?;
        let mut b = Backlog::default();
        let mut wanted = Wanted { looked_upto: from, ids: Vec::new() };
        for (n, entry) in recs.range(from..).storage()?.enumerate() {
            if n == rows {
                b.more = true;
                break;
            }
            let (id, v) = entry.storage()?;
            let id = id.value();
            wanted.looked_upto = id + 1;
            if done.get((target, id)).storage()?.is_some() {
                continue;
            }
            let row = RecordingRow::decode(v.value())?;
            match takes(&row) {
                Take::No => continue,
                Take::Maybe => {}
                Take::Yes if row.open => {}
                Take::Yes => {
                    b.objects += 1;
                    b.bytes += row.bytes;
                    b.oldest_us = Some(b.oldest_us.map_or(row.wall_start_us, |o: i64| o.min(row.wall_start_us)));
                }
            }
            wanted.ids.push(id);
        }
        Ok((b, wanted))
    }

    /// Target `target`'s multipart uploads under way.
    pub fn archive_uploads(&self, target: &str) -> Result<Vec<Upload>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(UPLOADS).storage()?;
        let mut out = Vec::new();
        for entry in t.range((target, 0)..=(target, u64::MAX)).storage()? {
            let (_, v) = entry.storage()?;
            let (key, id, _) = v.value();
            out.push(Upload { key: key.into(), id: id.into(), parts: Vec::new() });
        }
        Ok(out)
    }

    /// The targets the catalog has a mark of.
    pub fn archive_targets(&self) -> Result<Vec<String>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(MARKS).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()? {
            out.push(entry.storage()?.0.value().to_string());
        }
        Ok(out)
    }

    /// Forgets everything target `target` did (it was removed from the config): its mark,
    /// what it stored, its uploads under way and its entries waiting for a manifest.
    pub fn forget_archive_target(&self, target: &str) -> Result<(), CatalogError> {
        self.write_archive(Durability::Immediate, |txn| {
            txn.open_table(MARKS).storage()?.remove(target).storage()?;
            let ours = |t: &str| t == target;
            txn.open_table(ARCHIVED).storage()?.retain(|(t, _), _| !ours(t)).storage()?;
            txn.open_table(UPLOADS).storage()?.retain(|(t, _), _| !ours(t)).storage()?;
            txn.open_table(DESCRIBE).storage()?.retain(|(t, _, _, _), _| !ours(t)).storage()?;
            txn.open_table(EVENT_MARKS).storage()?.remove(target).storage()?;
            txn.open_table(EVENTS_DONE).storage()?.retain(|(t, _), _| !ours(t)).storage()?;
            Ok(())
        })
    }

    /// Whether `recording` is archived to `target`, and as what.
    pub fn archived(&self, target: &str, recording: u64) -> Result<Option<Archived>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(ARCHIVED).storage()?;
        Ok(t.get((target, recording)).storage()?.map(|v| {
            let (key, bytes, etag, done_us) = v.value();
            Archived { key: key.into(), bytes, etag: etag.into(), done_us }
        }))
    }

    /// Notes `recording` stored in `target` as `done`, and its `entry` to describe in the
    /// manifest of `(stream, day)`; its upload, if it was one, is over.
    pub fn set_archived(
        &self,
        target: &str,
        recording: u64,
        done: &Archived,
        (stream, day, entry): (&str, &str, &[u8]),
    ) -> Result<(), CatalogError> {
        // The end of a multipart upload is durable: its parts are not sent again.
        let multipart = self.archive_upload(target, recording)?.is_some();
        let durability = if multipart { Durability::Immediate } else { Durability::None };
        self.write_archive(durability, |txn| {
            // A recording deleted meanwhile keeps no row (its deletion dropped them); its
            // object is in the bucket all the same, so its manifest entry goes out.
            if exists(txn, recording)? {
                let row = (done.key.as_str(), done.bytes, done.etag.as_str(), done.done_us);
                txn.open_table(ARCHIVED).storage()?.insert((target, recording), row).storage()?;
            }
            txn.open_table(DESCRIBE).storage()?.insert((target, stream, day, recording), entry).storage()?;
            txn.open_table(UPLOADS).storage()?.remove((target, recording)).storage()?;
            Ok(())
        })
    }

    /// The entries `target` has yet to put in manifests, by stream and day: at most `days`
    /// of them and about `max_bytes` of entries (always at least one).
    pub fn undescribed(&self, target: &str, days: usize, max_bytes: usize) -> Result<Vec<Undescribed>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(DESCRIBE).storage()?;
        let mut out: Vec<Undescribed> = Vec::new();
        let mut bytes = 0;
        for entry in t.range((target, "", "", 0)..).storage()? {
            if bytes >= max_bytes {
                break;
            }
            let (k, v) = entry.storage()?;
            bytes += v.value().len();
            let (tgt, stream, day, rec) = k.value();
            if tgt != target {
                break;
            }
            let same = out.last().is_some_and(|((s, d), _)| s == stream && d == day);
            if let (true, Some((_, entries))) = (same, out.last_mut()) {
                entries.push((rec, v.value().to_vec()));
            } else if out.len() == days {
                break;
            } else {
                out.push(((stream.to_string(), day.to_string()), vec![(rec, v.value().to_vec())]));
            }
        }
        Ok(out)
    }

    /// `recordings` of `(stream, day)` are in a manifest the bucket holds.
    pub fn described(&self, target: &str, stream: &str, day: &str, recordings: &[u64]) -> Result<(), CatalogError> {
        self.write_lazily(|txn| {
            let mut t = txn.open_table(DESCRIBE).storage()?;
            for r in recordings {
                t.remove((target, stream, day, *r)).storage()?;
            }
            Ok(())
        })
    }

    /// Target `target`'s events' mark (1 when it has none yet: event ids start at 1).
    pub fn archive_event_mark(&self, target: &str) -> Result<u64, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENT_MARKS).storage()?;
        Ok(t.get(target).storage()?.map_or(1, |v| v.value()))
    }

    /// Moves `target`'s events' mark to `mark`, dropping the revisions noted below it.
    pub fn set_archive_event_mark(&self, target: &str, mark: u64) -> Result<(), CatalogError> {
        self.write_lazily(|txn| {
            txn.open_table(EVENT_MARKS).storage()?.insert(target, mark).storage()?;
            let mut done = txn.open_table(EVENTS_DONE).storage()?;
            done.retain_in((target, 0)..(target, mark), |_, _| false).storage()?;
            Ok(())
        })
    }

    /// What `target` does next with events, from its events' mark: the first event (its
    /// latest revision) that `takes` and that is not stored at that revision, and how far
    /// the mark may move (every event below it is not taken, or was stored at its latest
    /// revision, which came `late_us` before `now_us` or earlier). Looks at
    /// [`limits::ARCHIVE_EVENTS_LOOKED_MAX`] events at most, one at a time.
    pub fn archive_next_event(
        &self,
        target: &str,
        (now_us, late_us): (i64, i64),
        takes: impl Fn(&EventRecord) -> bool,
    ) -> Result<(Option<EventRecord>, u64), CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let mark = txn.open_table(EVENT_MARKS).storage()?.get(target).storage()?.map_or(1, |v| v.value());
        let events = txn.open_table(EVENTS).storage()?;
        let done = txn.open_table(EVENTS_DONE).storage()?;
        let (mut settled_upto, mut all_settled) = (mark, true);
        for entry in events.range(mark..).storage()?.take(limits::ARCHIVE_EVENTS_LOOKED_MAX) {
            let e = EventRecord::decode(entry.storage()?.1.value())?;
            let settled = if !takes(&e) {
                true
            } else if done.get((target, e.id)).storage()?.map(|v| v.value()) == Some(e.rev) {
                now_us > e.received_us.saturating_add(late_us)
            } else {
                return Ok((Some(e), settled_upto));
            };
            all_settled &= settled;
            if all_settled {
                settled_upto = e.id + 1;
            }
        }
        Ok((None, settled_upto))
    }

    /// The revision of `event` archived to `target`, when it is above the mark (the target
    /// reads it within [`Catalog::archive_next_event`]'s transaction; this is for tests).
    #[cfg(test)]
    pub fn archived_event(&self, target: &str, event: u64) -> Result<Option<u32>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(EVENTS_DONE).storage()?;
        Ok(t.get((target, event)).storage()?.map(|v| v.value()))
    }

    /// Notes revision `rev` of `event` stored in `target`, and its `entry` to describe in the
    /// manifest of `(stream, day)`.
    pub fn set_archived_event(
        &self,
        target: &str,
        event: u64,
        rev: u32,
        (stream, day, entry): (&str, &str, &[u8]),
    ) -> Result<(), CatalogError> {
        self.write_lazily(|txn| {
            txn.open_table(EVENTS_DONE).storage()?.insert((target, event), rev).storage()?;
            txn.open_table(DESCRIBE).storage()?.insert((target, stream, day, event), entry).storage()?;
            Ok(())
        })
    }

    /// The multipart upload of `recording` to `target` under way, if one is.
    pub fn archive_upload(&self, target: &str, recording: u64) -> Result<Option<Upload>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(UPLOADS).storage()?;
        Ok(t.get((target, recording)).storage()?.map(|v| {
            let (key, id, parts) = v.value();
            let parts = parts.split(',').filter(|p| !p.is_empty()).map(str::to_string).collect();
            Upload { key: key.into(), id: id.into(), parts }
        }))
    }

    /// Notes the multipart upload of `recording` to `target` as it stands (none: given up).
    pub fn set_archive_upload(
        &self,
        target: &str,
        recording: u64,
        upload: Option<&Upload>,
    ) -> Result<(), CatalogError> {
        self.write_archive(Durability::Immediate, |txn| {
            let gone = !exists(txn, recording)?;
            let mut t = txn.open_table(UPLOADS).storage()?;
            match upload {
                Some(_) if gone => {}
                Some(u) => {
                    let parts = u.parts.join(",");
                    t.insert((target, recording), (u.key.as_str(), u.id.as_str(), parts.as_str())).storage()?;
                }
                None => {
                    t.remove((target, recording)).storage()?;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_target_did_is_kept_per_target() {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(&dir.path().join("catalog.redb")).unwrap();
        assert_eq!(c.archive_mark("off").unwrap(), 1);
        c.set_archive_mark("off", 7).unwrap();
        assert_eq!((c.archive_mark("off").unwrap(), c.archive_mark("other").unwrap()), (7, 1));
        // Recordings 1 to 10 (rows of ones that are gone are not kept).
        for _ in 0..10 {
            c.begin_recording(RecordingRow::for_test(""), |id| format!("{id}.mp4")).unwrap();
        }
        let up = Upload { key: "k".into(), id: "u-1".into(), parts: vec!["a".into(), "b".into()] };
        c.set_archive_upload("off", 9, Some(&up)).unwrap();
        assert_eq!(c.archive_upload("off", 9).unwrap(), Some(up));
        let none = Upload { key: "k".into(), id: "u-2".into(), parts: vec![] };
        c.set_archive_upload("off", 10, Some(&none)).unwrap();
        assert_eq!(c.archive_upload("off", 10).unwrap().unwrap().parts, Vec::<String>::new());
        let done = Archived { key: "k".into(), bytes: 5, etag: "e-2".into(), done_us: 1 };
        c.set_archived("off", 9, &done, ("porch/main", "2026-12-06", b"{}")).unwrap();
        assert_eq!(c.archive_upload("off", 9).unwrap(), None, "a done upload is no longer under way");
        assert_eq!(c.archived("off", 9).unwrap(), Some(done));
        assert_eq!(c.archived("other", 9).unwrap(), None);
        // Open recordings are wanted, not counted; the archived one neither.
        let wanted = Wanted { looked_upto: 11, ids: vec![1, 2, 3, 4, 5, 6, 7, 8, 10] };
        assert_eq!(c.archive_backlog("off", 1, 20, |_| Take::Yes).unwrap(), (Backlog::default(), wanted));
        let waiting = c.undescribed("off", 4, 1 << 20).unwrap();
        assert_eq!(waiting, vec![(("porch/main".to_string(), "2026-12-06".to_string()), vec![(9, b"{}".to_vec())])]);
        assert_eq!(c.undescribed("other", 4, 1 << 20).unwrap(), vec![]);
        c.described("off", "porch/main", "2026-12-06", &[9]).unwrap();
        assert_eq!(c.undescribed("off", 4, 1 << 20).unwrap(), vec![]);
        c.set_archived(
            "other",
            10,
            &Archived { etag: "e-3".into(), ..c.archived("off", 9).unwrap().unwrap() },
            ("porch/main", "2026-12-06", b"{}"),
        )
        .unwrap();
        c.forget_archive_target("off").unwrap();
        assert_eq!(
            (c.archive_mark("off").unwrap(), c.archived("off", 9).unwrap()),
            (1, None),
            "a removed target is forgotten"
        );
        assert!(c.archived("other", 10).unwrap().is_some(), "the others are not");
        assert_eq!(c.undescribed("other", 4, 1 << 20).unwrap().len(), 1);
    }

    #[test]
    fn an_events_mark_drops_what_was_noted_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(&dir.path().join("catalog.redb")).unwrap();
        assert_eq!(c.archive_event_mark("off").unwrap(), 1);
        for (event, rev) in [(1, 1), (2, 3), (3, 1)] {
            c.set_archived_event("off", event, rev, ("porch/events", "2026-12-06", b"{}")).unwrap();
        }
        assert_eq!(c.archived_event("off", 2).unwrap(), Some(3));
        assert_eq!(c.archived_event("other", 2).unwrap(), None);
        assert_eq!(c.undescribed("off", 4, 1 << 20).unwrap()[0].1.len(), 3, "each waits for its manifest");
        c.set_archive_event_mark("off", 3).unwrap();
        assert_eq!(c.archive_event_mark("off").unwrap(), 3);
        assert_eq!(
            [1, 2, 3].map(|e| c.archived_event("off", e).unwrap()),
            [None, None, Some(1)],
            "rows below the mark go: the table holds only events not yet passed"
        );
        c.forget_archive_target("off").unwrap();
        assert_eq!((c.archive_event_mark("off").unwrap(), c.archived_event("off", 3).unwrap()), (1, None));
    }

    fn event(id: u64, rev: u32, camera: &str, received_us: i64) -> EventRecord {
        let envelope = serde_json::json!({ "camera": camera, "time_us": received_us });
        EventRecord {
            id,
            rev,
            principal: "token:1".into(),
            received_us,
            envelope: serde_json::from_value(envelope).unwrap(),
            snapshot: None,
            hold: None,
        }
    }

    #[test]
    fn the_next_event_is_the_first_taken_not_stored_at_its_revision_and_the_mark_passes_what_is_settled() {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(&dir.path().join("catalog.redb")).unwrap();
        let late = 600;
        // 1: another camera's; 2: stored at rev 1 long ago; 3: stored at rev 1 just now; 4:
        // stored at rev 1, now at rev 2; 5: new.
        let records = [
            event(1, 1, "shed", 0),
            event(2, 1, "porch", 0),
            event(3, 1, "porch", 990),
            event(4, 2, "porch", 0),
            event(5, 1, "porch", 0),
        ];
        c.put_events(&records).unwrap();
        for id in [2, 3, 4] {
            c.set_archived_event("off", id, 1, ("porch/events", "1970-01-01", b"{}")).unwrap();
        }
        let takes = |e: &EventRecord| e.envelope.camera == "porch";
        let (next, upto) = c.archive_next_event("off", (1000, late), takes).unwrap();
        assert_eq!(
            (next.map(|e| (e.id, e.rev)), upto),
            (Some((4, 2)), 3),
            "3 may yet be revised: the mark stops at it"
        );
        c.set_archived_event("off", 4, 2, ("porch/events", "1970-01-01", b"{}")).unwrap();
        let (next, _) = c.archive_next_event("off", (1000, late), takes).unwrap();
        assert_eq!(next.map(|e| e.id), Some(5));
        c.set_archived_event("off", 5, 1, ("porch/events", "1970-01-01", b"{}")).unwrap();
        assert_eq!(c.archive_next_event("off", (2000, late), takes).unwrap(), (None, 6), "all settled later");

        // Past ARCHIVE_EVENTS_LOOKED_MAX events from the mark, the rest wait for a next look.
        let n = limits::ARCHIVE_EVENTS_LOOKED_MAX as u64;
        let more: Vec<EventRecord> = (6..6 + n + 1).map(|id| event(id, 1, "shed", 0)).collect();
        c.put_events(&more).unwrap();
        c.put_events(&[event(6 + n + 1, 1, "porch", 0)]).unwrap();
        c.set_archive_event_mark("off", 6).unwrap();
        let (next, upto) = c.archive_next_event("off", (2000, late), takes).unwrap();
        assert_eq!((next.map(|e| e.id), upto), (None, 6 + n), "the ceiling reached: looked at no further");
        c.set_archive_event_mark("off", upto).unwrap();
        let (next, _) = c.archive_next_event("off", (2000, late), takes).unwrap();
        assert_eq!(next.map(|e| e.id), Some(6 + n + 1), "found at the next look");
    }

    #[test]
    fn a_recording_deleted_locally_leaves_no_archive_rows() {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(&dir.path().join("catalog.redb")).unwrap();
        let (id, _) = c.begin_recording(RecordingRow::for_test(""), |_| "seg.mp4".into()).unwrap();
        c.set_archive_mark("off", id + 1).unwrap();
        let done = Archived { key: "k".into(), bytes: 5, etag: "e".into(), done_us: 1 };
        c.set_archived("off", id, &done, ("porch/main", "2026-12-06", b"{}")).unwrap();
        let up = Upload { key: "k".into(), id: "u".into(), parts: vec![] };
        c.set_archive_upload("off", id, Some(&up)).unwrap();
        c.delete_recording(id, crate::catalog::Loss::Retention).unwrap();
        assert_eq!((c.archived("off", id).unwrap(), c.archive_upload("off", id).unwrap()), (None, None));
        assert_eq!(c.undescribed("off", 4, 1 << 20).unwrap().len(), 1, "its manifest entry still goes out");
    }
}

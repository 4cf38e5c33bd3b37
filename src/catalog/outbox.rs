//! The MQTT outbox: stored event revisions not yet acknowledged by the broker, in the order
//! they were stored.
//!
//! While MQTT is configured ([`Catalog::set_outbox`]), each revision's row goes in with the
//! revision's own commit, so an event acknowledged to its sender is also one the broker will
//! get, whatever happens after (the broker away, a power cut). Rows name the revision
//! (`seq → (event id, rev)`); what is published is read from the revision when it is sent.
//! At most [`limits::MQTT_OUTBOX_EVENTS_MAX`] rows: past it the oldest goes and is counted
//! (`meta.mqtt_outbox_dropped`). Delivered rows are removed in commits of their own that do
//! not wait for the disk (`Durability::None`): the next durable commit carries them, and a
//! power cut before it means those few are delivered again (QoS 1 is at least once).

use std::sync::atomic::Ordering;

use redb::{Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::events::{EVENT_REVISIONS, EventRecord};
use super::{Catalog, CatalogError, OrStorage};
use crate::limits;

/// seq → (event id, revision)
pub(super) const OUTBOX: TableDefinition<u64, (u64, u32)> = TableDefinition::new("mqtt_outbox");
/// (camera, label) → (): the labels each camera's events carried, announced to Home
/// Assistant as its binary sensors (kept so a restart announces, and a camera's removal
/// withdraws, the same ones).
const LABELS: TableDefinition<(&str, &str), ()> = TableDefinition::new("mqtt_labels");

/// The outbox's state, for the UI and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxState {
    /// Rows waiting.
    pub waiting: u64,
    /// Rows dropped at the ceiling since the catalog was made.
    pub dropped: u64,
}

/// One row waiting: its sequence and the revision it names (none when the event was
/// deleted or trimmed since: nothing to publish, the row just goes).
pub type OutboxRow = (u64, Option<EventRecord>);

impl Catalog {
    /// Whether stored revisions get an outbox row from now on; turned off, the rows waiting
    /// go (a broker configured later does not get a backlog of old events).
    pub fn set_outbox(&self, on: bool) -> Result<(), CatalogError> {
        let was = self.outbox_on.swap(on, Ordering::SeqCst);
        if was && !on {
            let mut txn = self.db()?.begin_write().storage()?;
            txn.set_durability(Durability::Immediate).storage()?;
            txn.delete_table(OUTBOX).storage()?;
            txn.commit().storage()?;
        }
        Ok(())
    }

    pub(super) fn outbox_is_on(&self) -> bool {
        self.outbox_on.load(Ordering::SeqCst)
    }

    /// Rows after `after`, at most `limit`, oldest first.
    pub fn outbox_after(&self, after: u64, limit: usize) -> Result<Vec<OutboxRow>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let outbox = match txn.open_table(OUTBOX) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e).storage(),
        };
        let revisions = txn.open_table(EVENT_REVISIONS).storage()?;
        let mut out = Vec::new();
        for row in outbox.range(after.saturating_add(1)..).storage()?.take(limit) {
            let (seq, named) = row.storage()?;
            let (id, rev) = named.value();
            let record = revisions.get((id, rev)).storage()?.map(|v| EventRecord::decode(v.value())).transpose()?;
            out.push((seq.value(), record));
        }
        Ok(out)
    }

    /// Removes the rows up to `upto` (the broker acknowledged them); see the module's note
    /// on durability.
    pub fn outbox_delivered(&self, upto: u64) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::None).storage()?;
        {
            let mut outbox = txn.open_table(OUTBOX).storage()?;
            outbox.retain_in(..=upto, |_, _| false).storage()?;
        }
        txn.commit().storage()?;
        Ok(())
    }

    /// Rows waiting and rows dropped.
    pub fn outbox_state(&self) -> Result<OutboxState, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let waiting = match txn.open_table(OUTBOX) {
            Ok(t) => t.len().storage()?,
            Err(redb::TableError::TableDoesNotExist(_)) => 0,
            Err(e) => return Err(e).storage(),
        };
        let meta = txn.open_table(super::META).storage()?;
        let dropped = meta.get("mqtt_outbox_dropped").storage()?.map_or(0, |v| v.value());
        Ok(OutboxState { waiting, dropped })
    }
}

impl Catalog {
    /// The box's id for MQTT's unique ids (16 hex digits), made once and kept.
    pub fn box_id(&self) -> Result<String, CatalogError> {
        {
            let txn = self.db()?.begin_read().storage()?;
            let meta = txn.open_table(super::META).storage()?;
            if let Some(v) = meta.get("box_id").storage()? {
                return Ok(format!("{:016x}", v.value()));
            }
        }
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("the OS random source");
        let id = u64::from_le_bytes(b);
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let id = {
            let mut meta = txn.open_table(super::META).storage()?;
            let kept = meta.get("box_id").storage()?.map(|v| v.value());
            match kept {
                Some(k) => k,
                None => {
                    meta.insert("box_id", id).storage()?;
                    id
                }
            }
        };
        txn.commit().storage()?;
        Ok(format!("{id:016x}"))
    }

    /// The labels announced for each camera.
    pub fn mqtt_labels(&self) -> Result<std::collections::BTreeMap<String, Vec<String>>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let table = match txn.open_table(LABELS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(out),
            Err(e) => return Err(e).storage(),
        };
        for row in table.iter().storage()? {
            let (k, _) = row.storage()?;
            let (camera, label) = k.value();
            // "" marks a camera announced, whatever its labels.
            let labels = out.entry(camera.to_string()).or_default();
            if !label.is_empty() {
                labels.push(label.to_string());
            }
        }
        Ok(out)
    }

    /// Keeps `label` for `camera` (at most [`limits::MQTT_LABELS_PER_CAMERA_MAX`] a camera;
    /// `""`: the camera announced, with no label yet); true when it is new.
    pub fn add_mqtt_label(&self, camera: &str, label: &str) -> Result<bool, CatalogError> {
        let known = self.mqtt_labels()?;
        let full = |l: &Vec<String>| l.len() >= limits::MQTT_LABELS_PER_CAMERA_MAX || l.iter().any(|x| x == label);
        match known.get(camera) {
            Some(_) if label.is_empty() => return Ok(false),
            Some(l) if full(l) => return Ok(false),
            _ => {}
        }
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::None).storage()?;
        txn.open_table(LABELS).storage()?.insert((camera, label), ()).storage()?;
        txn.commit().storage()?;
        Ok(true)
    }

    /// Forgets a camera's labels (it was removed and its entities withdrawn).
    pub fn remove_mqtt_camera(&self, camera: &str) -> Result<(), CatalogError> {
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::None).storage()?;
        txn.open_table(LABELS).storage()?.retain(|(c, _), _| c != camera).storage()?;
        txn.commit().storage()?;
        Ok(())
    }
}

/// Adds revision `(id, rev)` to the outbox in `txn` (the revision's own commit), dropping
/// the oldest rows past the ceiling.
pub(super) fn add(txn: &redb::WriteTransaction, id: u64, rev: u32) -> Result<(), CatalogError> {
    let mut meta = txn.open_table(super::META).storage()?;
    let seq = meta.get("mqtt_outbox_next").storage()?.map_or(1, |v| v.value());
    meta.insert("mqtt_outbox_next", seq + 1).storage()?;
    let mut outbox = txn.open_table(OUTBOX).storage()?;
    let mut dropped = 0;
    while outbox.len().storage()? >= limits::MQTT_OUTBOX_EVENTS_MAX {
        if outbox.pop_first().storage()?.is_none() {
            break;
        }
        dropped += 1;
    }
    outbox.insert(seq, (id, rev)).storage()?;
    if dropped > 0 {
        let was = meta.get("mqtt_outbox_dropped").storage()?.map_or(0, |v| v.value());
        meta.insert("mqtt_outbox_dropped", was + dropped).storage()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::events::EventFields;

    fn record(id: u64) -> EventRecord {
        let envelope: EventFields = serde_json::from_value(serde_json::json!({
            "camera": "front", "time_us": 1_800_000_000_000_000i64 + id as i64, "labels": ["person"]
        }))
        .unwrap();
        EventRecord { id, rev: 1, principal: "token:1".into(), received_us: 0, envelope, snapshot: None, hold: None }
    }

    #[test]
    fn rows_go_in_with_their_revision_keep_their_ceiling_and_leave_once_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        cat.put_event(&record(1)).unwrap();
        assert_eq!(cat.outbox_state().unwrap(), OutboxState::default(), "no broker: no rows");
        cat.set_outbox(true).unwrap();
        let n = limits::MQTT_OUTBOX_EVENTS_MAX + 3;
        let records: Vec<_> = (2..2 + n).map(record).collect();
        cat.put_events(&records).unwrap();
        assert_eq!(cat.outbox_state().unwrap(), OutboxState { waiting: limits::MQTT_OUTBOX_EVENTS_MAX, dropped: 3 });
        // The oldest went; the rest wait in order, each naming its revision.
        let first = cat.outbox_after(0, 3).unwrap();
        let seqs: Vec<u64> = first.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [4, 5, 6]);
        assert_eq!(first[0].1.as_ref().map(|r| r.id), Some(5));
        cat.outbox_delivered(5).unwrap();
        assert_eq!(cat.outbox_state().unwrap().waiting, limits::MQTT_OUTBOX_EVENTS_MAX - 2);
        assert_eq!(cat.outbox_after(0, 1).unwrap()[0].0, 6);
        // An event deleted meanwhile leaves its row with nothing to send.
        cat.delete_event(7).unwrap();
        assert!(cat.outbox_after(5, 1).unwrap()[0].1.is_none());
        // The broker gone from the config: the rows go, the count of drops stays.
        cat.set_outbox(false).unwrap();
        assert_eq!(cat.outbox_state().unwrap(), OutboxState { waiting: 0, dropped: 3 });
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn a_camera_keeps_at_most_its_ceiling_of_labels_and_forgets_them_when_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        assert!(cat.add_mqtt_label("front", "").unwrap(), "announced, with no label yet");
        assert!(!cat.add_mqtt_label("front", "").unwrap());
        for i in 0..limits::MQTT_LABELS_PER_CAMERA_MAX + 3 {
            let new = cat.add_mqtt_label("front", &format!("l{i}")).unwrap();
            assert_eq!(new, i < limits::MQTT_LABELS_PER_CAMERA_MAX, "label {i}");
        }
        assert!(!cat.add_mqtt_label("front", "l0").unwrap(), "known already");
        assert!(cat.add_mqtt_label("yard", "person").unwrap());
        let labels = cat.mqtt_labels().unwrap();
        assert_eq!(labels["front"].len(), limits::MQTT_LABELS_PER_CAMERA_MAX);
        assert_eq!(labels["yard"], ["person"]);
        cat.remove_mqtt_camera("front").unwrap();
        assert!(!cat.mqtt_labels().unwrap().contains_key("front"));
        // The box's id is made once and kept.
        let id = cat.box_id().unwrap();
        assert_eq!((id.len(), cat.box_id().unwrap()), (16, id.clone()));
    }
}

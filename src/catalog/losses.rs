//! Why recorded footage is no longer kept: spans of a stream's wall time, each with its
//! reason, written in the same commit that drops the recordings (or by recovery after a
//! power cut), so an event whose footage is gone can say why.
//!
//! Table `losses`: (stream, from µs) → (to µs, reason). A span that meets the stream's
//! previous span of the same reason joins it: retention deletes oldest first, so a stream
//! keeps a few spans, not one per recording. At most [`limits::LOSS_SPANS_MAX`] spans are
//! kept; past that the first (the lowest stream's oldest) goes.

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{Catalog, CatalogError, OrStorage};
use crate::limits;

pub(super) const LOSSES: TableDefinition<(u32, i64), (i64, u8)> = TableDefinition::new("losses");

/// Spans of one reason this close (wall µs) join: two recordings of a stream meet within a
/// frame or two, a restart within a few seconds.
const JOIN_US: i64 = 5_000_000;

/// Why footage is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// The retention caps (a stream's, or all streams').
    Retention,
    /// The disk ran short of its free-space reserve.
    DiskFull,
    /// An admin deleted it.
    Deleted,
    /// The power went (or the box stopped uncleanly) before it was synced.
    PowerCut,
    /// Its file could not be written or synced.
    WriteError,
}

impl Loss {
    fn code(self) -> u8 {
        match self {
            Loss::Retention => 1,
            Loss::DiskFull => 2,
            Loss::Deleted => 3,
            Loss::PowerCut => 4,
            Loss::WriteError => 5,
        }
    }

    fn of(code: u8) -> Option<Loss> {
        Some(match code {
            1 => Loss::Retention,
            2 => Loss::DiskFull,
            3 => Loss::Deleted,
            4 => Loss::PowerCut,
            5 => Loss::WriteError,
            _ => return None,
        })
    }
}

/// Adds a span to an open `losses` table (see the module's notes).
pub(super) fn note(
    t: &mut redb::Table<'_, (u32, i64), (i64, u8)>,
    stream_id: u32,
    from_us: i64,
    to_us: i64,
    why: Loss,
) -> Result<(), CatalogError> {
    let (mut from_us, mut to_us) = (from_us, to_us.max(from_us));
    let prev = t
        .range((stream_id, i64::MIN)..=(stream_id, from_us))
        .storage()?
        .next_back()
        .transpose()
        .storage()?
        .map(|(k, v)| (k.value().1, v.value()));
    if let Some((prev_from, (prev_to, code))) = prev
        && code == why.code()
        && prev_to.saturating_add(JOIN_US) >= from_us
    {
        t.remove((stream_id, prev_from)).storage()?;
        from_us = prev_from;
        to_us = to_us.max(prev_to);
    }
    t.insert((stream_id, from_us), (to_us, why.code())).storage()?;
    while t.len().storage()? > limits::LOSS_SPANS_MAX {
        t.pop_first().storage()?;
    }
    Ok(())
}

impl Catalog {
    /// Notes that a stream's footage from `from_us` to `to_us` is gone, and why (recovery,
    /// after a power cut), in one durable commit.
    pub fn note_loss(&self, stream_id: u32, from_us: i64, to_us: i64, why: Loss) -> Result<(), CatalogError> {
        let txn = self.db()?.begin_write().storage()?;
        note(&mut txn.open_table(LOSSES).storage()?, stream_id, from_us, to_us, why)?;
        txn.commit().storage()
    }

    /// Why a stream's footage at `wall_us` is gone, if a span says.
    pub fn loss_at(&self, stream_id: u32, wall_us: i64) -> Result<Option<Loss>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(LOSSES).storage()?;
        let span =
            t.range((stream_id, i64::MIN)..=(stream_id, wall_us)).storage()?.next_back().transpose().storage()?;
        Ok(span.and_then(|(_, v)| {
            let (to_us, code) = v.value();
            if to_us >= wall_us { Loss::of(code) } else { None }
        }))
    }

    /// How many loss spans are kept.
    pub fn loss_spans(&self) -> Result<u64, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        txn.open_table(LOSSES).storage()?.len().storage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.redb")).unwrap();
        (dir, cat)
    }

    #[test]
    fn spans_of_one_reason_that_meet_join_and_others_stand_apart() {
        let (_d, cat) = catalog();
        cat.note_loss(1, 0, 60_000_000, Loss::Retention).unwrap();
        cat.note_loss(1, 60_000_100, 120_000_000, Loss::Retention).unwrap();
        assert_eq!(cat.loss_spans().unwrap(), 1, "adjacent recordings join");
        cat.note_loss(1, 120_000_000, 130_000_000, Loss::DiskFull).unwrap();
        cat.note_loss(2, 0, 10, Loss::PowerCut).unwrap();
        assert_eq!(cat.loss_spans().unwrap(), 3);
        assert_eq!(cat.loss_at(1, 90_000_000).unwrap(), Some(Loss::Retention));
        assert_eq!(cat.loss_at(1, 125_000_000).unwrap(), Some(Loss::DiskFull));
        assert_eq!(cat.loss_at(1, 140_000_000).unwrap(), None, "past every span");
        assert_eq!(cat.loss_at(2, 5).unwrap(), Some(Loss::PowerCut));
        assert_eq!(cat.loss_at(3, 5).unwrap(), None, "another stream");
    }

    #[test]
    fn at_most_loss_spans_max_are_kept_the_first_going_first() {
        let (_d, cat) = catalog();
        let txn = cat.db().unwrap().begin_write().unwrap();
        {
            let mut t = txn.open_table(LOSSES).unwrap();
            let n = limits::LOSS_SPANS_MAX as i64 + 10;
            for i in 0..n {
                // Apart by more than JOIN_US: none joins.
                note(&mut t, 7, i * 10 * JOIN_US, i * 10 * JOIN_US + 1, Loss::Retention).unwrap();
            }
            assert_eq!(t.len().unwrap(), limits::LOSS_SPANS_MAX);
        }
        txn.commit().unwrap();
        assert_eq!(cat.loss_at(7, 0).unwrap(), None, "the oldest went");
        assert_eq!(cat.loss_at(7, (limits::LOSS_SPANS_MAX as i64 + 9) * 10 * JOIN_US).unwrap(), Some(Loss::Retention));
    }
}

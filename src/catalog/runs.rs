//! Reading one stream's recordings: the stream found by name without writing, and its
//! recordings grouped into runs (one camera session each) over a time range. The timeline
//! of live view and the HTTP recordings route both read through here.

use redb::{ReadableDatabase, ReadableTable};

use super::{Catalog, CatalogError, OrStorage, RECORDINGS, RecordingRow, STREAMS};

/// One run of a stream: recordings of one camera session, back to back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub run_id: u64,
    pub start_us: i64,
    pub end_us: i64,
    pub bytes: u64,
    /// Recordings (segment files) in it.
    pub segments: u32,
}

/// A stream's runs in a range, at most as many as asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Runs {
    pub runs: Vec<Run>,
    /// More runs were in the range than asked for.
    pub truncated: bool,
}

impl Catalog {
    /// The id of stream `name` (`camera/kind`), if it was ever recorded. Never writes (the
    /// recorder's [`Catalog::stream_id`] creates ids).
    pub fn find_stream(&self, name: &str) -> Result<Option<u32>, CatalogError> {
        let txn = self.db.begin_read().storage()?;
        let t = txn.open_table(STREAMS).storage()?;
        for entry in t.iter().storage()? {
            let (k, v) = entry.storage()?;
            if v.value() == name {
                return Ok(Some(k.value()));
            }
        }
        Ok(None)
    }

    /// Stream `stream_id`'s recordings that hold video between `from_us` and `to_us`, oldest
    /// first, in one read transaction (rows of other streams are passed over by their
    /// stream id alone).
    pub fn recordings_of(
        &self,
        stream_id: u32,
        from_us: i64,
        to_us: i64,
    ) -> Result<Vec<(u64, RecordingRow)>, CatalogError> {
        let mut out = Vec::new();
        self.each_recording_of(stream_id, from_us, to_us, |id, r| {
            out.push((id, r));
            true
        })?;
        Ok(out)
    }

    /// Stream `stream_id`'s runs between `from_us` and `to_us`, at most `max`.
    pub fn runs(&self, stream_id: u32, from_us: i64, to_us: i64, max: usize) -> Result<Runs, CatalogError> {
        let mut out = Runs::default();
        self.each_recording_of(stream_id, from_us, to_us, |_, r| {
            let full = out.runs.len() >= max;
            match out.runs.last_mut() {
                Some(run) if run.run_id == r.run_id => {
                    run.end_us = run.end_us.max(r.wall_end_us);
                    run.bytes += r.bytes;
                    run.segments += 1;
                }
                _ if full => {
                    out.truncated = true;
                    return false;
                }
                _ => out.runs.push(Run {
                    run_id: r.run_id,
                    start_us: r.wall_start_us,
                    end_us: r.wall_end_us,
                    bytes: r.bytes,
                    segments: 1,
                }),
            }
            true
        })?;
        Ok(out)
    }

    /// Calls `each` with the stream's recordings in the range, in order, until it says stop.
    /// A recording with no fragment yet holds no video and is left out.
    fn each_recording_of(
        &self,
        stream_id: u32,
        from_us: i64,
        to_us: i64,
        mut each: impl FnMut(u64, RecordingRow) -> bool,
    ) -> Result<(), CatalogError> {
        let txn = self.db.begin_read().storage()?;
        let t = txn.open_table(RECORDINGS).storage()?;
        for entry in t.iter().storage()? {
            let (k, v) = entry.storage()?;
            if RecordingRow::stream_of(v.value())? != stream_id {
                continue;
            }
            let r = RecordingRow::decode(v.value())?;
            if r.wall_end_us <= from_us || r.wall_start_us >= to_us || r.fragments == 0 {
                continue;
            }
            if !each(k.value(), r) {
                break;
            }
        }
        Ok(())
    }
}

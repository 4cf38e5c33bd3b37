//! Reading one stream's recordings: the stream found by name without writing, and its
//! recordings grouped into runs (one camera session each) over a time range. The timeline
//! of live view and the HTTP recordings route both read through here.

use redb::{ReadableDatabase, ReadableTable};

use crate::base::StreamKey;

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
    /// The id of stream `key`, if it was ever recorded. Never writes (the recorder's
    /// [`Catalog::stream_id`] creates ids).
    pub fn find_stream(&self, key: &StreamKey) -> Result<Option<u32>, CatalogError> {
        let name = key.name();
        let txn = self.db()?.begin_read().storage()?;
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
        let txn = self.db()?.begin_read().storage()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::StreamKind;
    use crate::catalog::Batch;

    /// Recordings of two streams, interleaved as the recorder writes them: stream `a`'s runs
    /// of two 10-second recordings a minute apart, stream `b` in between; one of `a`'s rows
    /// has no fragment yet.
    fn catalog(dir: &std::path::Path, runs: u64) -> (Catalog, u32) {
        let c = Catalog::open(&dir.join("catalog.redb")).unwrap();
        let (a, b) = (
            c.stream_id(&StreamKey::new("cam", StreamKind::Main)).unwrap(),
            c.stream_id(&StreamKey::new("cam", StreamKind::Sub)).unwrap(),
        );
        let mut batch = Batch::default();
        let row = |stream_id, run_id, start: i64, fragments| RecordingRow {
            stream_id,
            run_id,
            wall_start_us: start,
            wall_end_us: start + 10_000_000,
            bytes: 100,
            fragments,
            ..RecordingRow::for_test("r.mp4")
        };
        let mut id = 1;
        for k in 0..runs {
            let start = k as i64 * 60_000_000;
            for (stream, part, fragments) in [(a, 0, 1), (b, 0, 1), (a, 1, 1)] {
                batch.recordings.push((id, row(stream, 10 * k + stream as u64, start + part * 10_000_000, fragments)));
                id += 1;
            }
        }
        let empty = row(a, 999, runs as i64 * 60_000_000, 0);
        batch.recordings.push((id, RecordingRow { wall_end_us: empty.wall_start_us, ..empty }));
        c.commit(&batch).unwrap();
        (c, a)
    }

    #[test]
    fn a_streams_runs_are_grouped_from_its_rows_alone_up_to_the_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let (c, a) = catalog(dir.path(), 5);
        let all = c.runs(a, 0, i64::MAX, 5).unwrap();
        assert!(!all.truncated, "exactly the ceiling is whole");
        assert_eq!(all.runs.len(), 5);
        let first = &all.runs[0];
        assert_eq!((first.start_us, first.end_us, first.bytes, first.segments), (0, 20_000_000, 200, 2));
        assert!(all.runs.iter().all(|r| r.run_id % 10 == u64::from(a)), "the other stream's rows are not in it");
        let cut = c.runs(a, 0, i64::MAX, 4).unwrap();
        assert!(cut.truncated, "one past the ceiling says so");
        assert_eq!(cut.runs, all.runs[..4]);
        // A range's edges: a recording that ends at `from` or starts at `to` is outside.
        let edge = c.runs(a, 20_000_000, 60_000_000, 5).unwrap();
        assert!(edge.runs.is_empty(), "{edge:?}");
        let one = c.runs(a, 19_999_999, 60_000_001, 5).unwrap();
        assert_eq!(one.runs.len(), 2);
        assert_eq!(one.runs[1].segments, 1, "only the recording that reaches into the range");
    }

    #[test]
    fn a_recording_without_fragments_holds_no_video_and_is_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let (c, a) = catalog(dir.path(), 1);
        let rows = c.recordings_of(a, 0, i64::MAX).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|(_, r)| r.fragments > 0 && r.stream_id == a));
        assert_eq!(c.runs(a, 0, i64::MAX, 10).unwrap().runs.len(), 1);
        assert_eq!(c.find_stream(&StreamKey::new("cam", StreamKind::Sub)).unwrap(), Some(a + 1));
        assert_eq!(c.find_stream(&StreamKey::new("none", StreamKind::Main)).unwrap(), None, "and nothing is created");
        assert_eq!(c.streams().unwrap().len(), 2);
    }
}

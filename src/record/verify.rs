//! `keeppeek check`: proves the catalog and the files agree, after the same recovery a start
//! runs. Every cataloged fragment must be read back at its byte range with its sample count
//! and duration; every closed file must end where its last fragment ends; the coverage
//! summaries must equal what the fragment rows add up to; no file under `recordings/` may be
//! unknown to the catalog. Used after power cuts, by people and tests.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;

use serde::Serialize;

use super::recovery::{self, RECORDINGS_DIR, RecoveryError};
use crate::catalog::{Bucket, Catalog, coverage};
use crate::media::fmp4_read::SegmentReader;

/// What `check` found.
#[derive(Debug, Default, Serialize)]
pub struct Verified {
    pub recovery: String,
    pub recordings: usize,
    pub fragments: u64,
    pub frames: u64,
    pub bytes: u64,
    /// Latest wall time covered by any recording, µs.
    pub wall_end_us: i64,
    pub problems: Vec<String>,
}

/// Recovers (as the box would start at `now_us`), then checks every recording and fragment
/// against its file.
pub fn check(catalog: &Catalog, data_dir: &Path, now_us: i64) -> Result<Verified, RecoveryError> {
    let report = recovery::recover(catalog, data_dir, now_us)?;
    let mut v = Verified { recovery: format!("{report:?}"), wall_end_us: i64::MIN, ..Default::default() };
    let mut known = BTreeSet::new();
    let mut coverage: BTreeMap<(u32, i64), Bucket> = BTreeMap::new();
    for (id, row) in catalog.recordings()? {
        v.recordings += 1;
        v.bytes += row.bytes;
        v.wall_end_us = v.wall_end_us.max(row.wall_end_us);
        known.insert(row.path.clone());
        let path = data_dir.join(&row.path);
        let mut problem = |what: String| v.problems.push(format!("recording {id} ({}): {what}", row.path));
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                problem(format!("cannot open: {e}"));
                continue;
            }
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if !row.open && len != row.bytes {
            problem(format!("file is {len} bytes, catalog says {}", row.bytes));
        }
        let mut reader = match SegmentReader::open(&file, len) {
            Ok((r, _)) => r,
            Err(e) => {
                problem(format!("init segment: {e}"));
                continue;
            }
        };
        let fragments = catalog.fragments(id)?;
        if fragments.len() != row.fragments as usize {
            problem(format!("{} fragment rows, recording says {}", fragments.len(), row.fragments));
        }
        let mut frames = 0u64;
        for (seq, f) in fragments {
            for (bucket, c) in coverage::contributions(&f) {
                let total = coverage.entry((row.stream_id, bucket)).or_default();
                *total = coverage::apply(*total, c, true);
            }
            reader.seek_to(f.start_byte);
            match reader.next_fragment() {
                Ok(Some(got))
                    if got.end_byte == f.end_byte
                        && got.samples.len() == f.frames as usize
                        && got.duration_90k() == f.duration_90k
                        && got.sequence == seq => {}
                Ok(Some(got)) => problem(format!(
                    "fragment {seq} at {}: file has {} samples / {} ticks / end {}, catalog {} / {} / {}",
                    f.start_byte,
                    got.samples.len(),
                    got.duration_90k(),
                    got.end_byte,
                    f.frames,
                    f.duration_90k,
                    f.end_byte
                )),
                Ok(None) => problem(format!("fragment {seq} at {} is past the end", f.start_byte)),
                Err(e) => problem(format!("fragment {seq}: {e}")),
            }
            frames += u64::from(f.frames);
            v.fragments += 1;
        }
        if frames != row.frames {
            problem(format!("fragments hold {frames} frames, recording says {}", row.frames));
        }
        v.frames += frames;
    }
    // The maintained summaries must equal what the fragment rows add up to.
    for (stream_id, _) in catalog.streams()? {
        for (bucket, stored) in catalog.coverage(stream_id, i64::MIN, i64::MAX)? {
            let want = coverage.remove(&(stream_id, bucket)).unwrap_or_default();
            if want != stored {
                v.problems
                    .push(format!("coverage of stream {stream_id} at {bucket}: stored {stored:?}, fragments {want:?}"));
            }
        }
    }
    for ((stream_id, bucket), want) in coverage {
        v.problems.push(format!("coverage of stream {stream_id} at {bucket} missing ({want:?})"));
    }
    recovery::walk(&data_dir.join(RECORDINGS_DIR), data_dir, 0, &mut |rel| {
        if !known.contains(rel) {
            v.problems.push(format!("{rel}: not in the catalog"));
        }
    })?;
    Ok(v)
}

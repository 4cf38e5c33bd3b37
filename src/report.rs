//! `keeppeek recordings`: what the catalog holds, per stream (runs, fragments, bytes, gaps),
//! or every recording and fragment as JSON for tools and tests.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::{Catalog, CatalogError};

/// A gap between two recordings of a stream longer than this is reported.
const GAP_MIN_US: i64 = 1_000_000;

#[derive(Serialize, Default, Debug)]
pub struct StreamReport {
    pub stream: String,
    pub recordings: usize,
    pub runs: usize,
    pub fragments: u64,
    pub frames: u64,
    pub bytes: u64,
    pub start_us: i64,
    pub end_us: i64,
    /// (end of one recording, start of the next), µs.
    pub gaps: Vec<(i64, i64)>,
}

#[derive(Serialize, Debug)]
pub struct RecordingDump {
    pub id: u64,
    pub stream: String,
    pub run_id: u64,
    pub path: String,
    pub codec: String,
    pub open: bool,
    pub has_audio: bool,
    pub wall_start_us: i64,
    pub wall_end_us: i64,
    pub media_duration_90k: u64,
    pub frames: u64,
    pub bytes: u64,
    pub fragments: Vec<crate::catalog::FragmentRow>,
}

fn stream_names(catalog: &Catalog) -> Result<BTreeMap<u32, String>, CatalogError> {
    Ok(catalog.streams()?.into_iter().collect())
}

/// Per-stream summary.
pub fn summarize(catalog: &Catalog) -> Result<Vec<StreamReport>, CatalogError> {
    let names = stream_names(catalog)?;
    let mut out: BTreeMap<u32, (StreamReport, Vec<u64>)> = BTreeMap::new();
    for (_, r) in catalog.recordings()? {
        let (s, runs) = out.entry(r.stream_id).or_insert_with(|| {
            let stream = names.get(&r.stream_id).cloned().unwrap_or_default();
            (StreamReport { stream, start_us: r.wall_start_us, ..Default::default() }, Vec::new())
        });
        if s.recordings > 0 && r.wall_start_us - s.end_us > GAP_MIN_US {
            s.gaps.push((s.end_us, r.wall_start_us));
        }
        if !runs.contains(&r.run_id) {
            runs.push(r.run_id);
        }
        s.recordings += 1;
        s.runs = runs.len();
        s.fragments += u64::from(r.fragments);
        s.frames += r.frames;
        s.bytes += r.bytes;
        s.end_us = s.end_us.max(r.wall_end_us);
    }
    Ok(out.into_values().map(|(s, _)| s).collect())
}

/// Every recording with its fragments.
pub fn dump(catalog: &Catalog) -> Result<Vec<RecordingDump>, CatalogError> {
    let names = stream_names(catalog)?;
    let mut out = Vec::new();
    for (id, r) in catalog.recordings()? {
        out.push(RecordingDump {
            id,
            stream: names.get(&r.stream_id).cloned().unwrap_or_default(),
            run_id: r.run_id,
            codec: r.codec.name().into(),
            open: r.open,
            has_audio: r.has_audio,
            wall_start_us: r.wall_start_us,
            wall_end_us: r.wall_end_us,
            media_duration_90k: r.media_duration_90k,
            frames: r.frames,
            bytes: r.bytes,
            fragments: catalog.fragments(id)?.into_iter().map(|(_, f)| f).collect(),
            path: r.path,
        });
    }
    Ok(out)
}

//! `keeppeek recordings`: what the catalog holds, per stream (runs, fragments, bytes, gaps),
//! or every recording and fragment as JSON for tools and tests.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::{Catalog, CatalogError};
use crate::media::AudioCodec;

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
    /// The audio track's codec (`aac`, `pcmu`, `pcma`, `opus`), if it has one.
    pub audio: Option<&'static str>,
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

/// Per-stream summary of the recordings that hold video, each stream read through the
/// catalog's one reader of a stream's recordings and runs.
pub fn summarize(catalog: &Catalog) -> Result<Vec<StreamReport>, CatalogError> {
    let mut out = Vec::new();
    for (stream_id, stream) in catalog.streams()? {
        let recordings = catalog.recordings_of(stream_id, i64::MIN, i64::MAX)?;
        let Some((_, first)) = recordings.first() else { continue };
        let runs = catalog.runs(stream_id, i64::MIN, i64::MAX, usize::MAX)?.runs.len();
        let mut s = StreamReport { stream, runs, start_us: first.wall_start_us, ..Default::default() };
        for (_, r) in &recordings {
            if s.recordings > 0 && r.wall_start_us - s.end_us > GAP_MIN_US {
                s.gaps.push((s.end_us, r.wall_start_us));
            }
            s.recordings += 1;
            s.fragments += u64::from(r.fragments);
            s.frames += r.frames;
            s.bytes += r.bytes;
            s.end_us = s.end_us.max(r.wall_end_us);
        }
        out.push(s);
    }
    Ok(out)
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
            has_audio: r.audio.is_some(),
            audio: r.audio.map(AudioCodec::name),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::RecordingRow;
    use crate::record::testing::recording;

    const WALL0: i64 = 1_764_500_000_000_000;

    /// Each stream with video is summed from its own recordings: a gap of more than a second
    /// between two is listed, a stream with no video yet is left out.
    #[test]
    fn each_stream_is_summed_from_its_own_recordings() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(&dir.path().join("c.redb")).unwrap();
        recording(&catalog, dir.path(), "a/main", WALL0, 3);
        recording(&catalog, dir.path(), "b/main", WALL0, 1);
        recording(&catalog, dir.path(), "a/main", WALL0 + 10_000_000, 2);
        let key = crate::base::StreamKey::new("a", crate::base::StreamKind::Sub);
        let empty = RecordingRow { stream_id: catalog.stream_id(&key).unwrap(), ..RecordingRow::for_test("") };
        catalog.begin_recording(empty, |id| format!("recordings/a/sub/{id}.mp4")).unwrap();

        let report = summarize(&catalog).unwrap();
        let seen: Vec<_> = report.iter().map(|s| (s.stream.as_str(), s.recordings, s.runs, s.fragments)).collect();
        assert_eq!(seen, [("a/main", 2, 1, 5), ("b/main", 1, 1, 1)]);
        let a = &report[0];
        assert_eq!((a.start_us, a.end_us, a.frames), (WALL0, WALL0 + 12_000_000, 75));
        assert_eq!(a.gaps, [(WALL0 + 3_000_000, WALL0 + 10_000_000)]);
        assert!(report[1].gaps.is_empty());
    }
}

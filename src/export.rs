//! Export: a stream's time range as one playable MP4, built on the fly from stored fragments.
//!
//! The output is a fragmented MP4: the init segment of the first recording in the range,
//! then every fragment that overlaps the range, in order, with its sequence number and decode
//! times rewritten so recordings of different runs (with gaps between them) play as one
//! continuous timeline. Nothing is copied into memory beyond one fragment header at a time:
//! [`Export::read_at`] serves any byte range from the files, so HTTP range requests (and a
//! plain download) cost constant memory. The plan holds one small entry per fragment.
//!
//! A range is cut at fragment (GOP) boundaries — a fragment is in when its middle is — so an
//! export starts on a keyframe and its duration matches the request within one GOP. An export stops early at a change of codec
//! parameters (a different init segment): one file has one set.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::base::StreamKey;
use crate::catalog::{Catalog, CatalogError};
use crate::limits;
use crate::media::fmp4_read::{ReadError, SegmentReader, retime_fragment_header};

/// Why an export cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("no stream named {0}")]
    NoStream(String),
    #[error("nothing recorded in that range")]
    Empty,
    #[error("the range holds more than {max} fragments: export it in parts", max = limits::EXPORT_FRAGMENTS_MAX)]
    TooLong,
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path}: {source}")]
    Read { path: String, source: ReadError },
}

/// One fragment of the output.
#[derive(Clone, Debug)]
struct Part {
    file: usize,
    start_byte: u64,
    len_bytes: u64,
    /// Where it starts in the output.
    out_start: u64,
    duration_90k: u64,
    sequence: u32,
    video_delta: i64,
    audio_delta: i64,
}

/// A planned export.
#[derive(Debug)]
pub struct Export {
    files: Vec<PathBuf>,
    init: Vec<u8>,
    parts: Vec<Part>,
    video_track: u32,
    audio_track: Option<u32>,
    /// Total output length.
    pub len_bytes: u64,
    /// Media duration of the output, 90 kHz.
    pub duration_90k: u64,
    /// Wall time of the first exported frame.
    pub wall_start_us: i64,
    /// True when a change of codec parameters cut the range short.
    pub cut_at_new_parameters: bool,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ExportError + '_ {
    move |source| ExportError::Io { path: path.display().to_string(), source }
}

fn read_err(path: &Path) -> impl FnOnce(ReadError) -> ExportError + '_ {
    move |source| ExportError::Read { path: path.display().to_string(), source }
}

impl Export {
    /// Plans the export of `stream` from `from_us` to `to_us` (wall, UTC).
    pub fn plan(
        catalog: &Catalog,
        data_dir: &Path,
        stream: &StreamKey,
        from_us: i64,
        to_us: i64,
    ) -> Result<Export, ExportError> {
        let stream_id = catalog.find_stream(stream)?.ok_or_else(|| ExportError::NoStream(stream.name()))?;
        let mut ex = Export {
            files: Vec::new(),
            init: Vec::new(),
            parts: Vec::new(),
            video_track: 0,
            audio_track: None,
            len_bytes: 0,
            duration_90k: 0,
            wall_start_us: 0,
            cut_at_new_parameters: false,
        };
        let mut video_at: u64 = 0;
        let mut audio_at: u64 = 0;
        for (id, rec) in &catalog.recordings_of(stream_id, from_us, to_us)? {
            // A fragment belongs to the range when its middle does: the export then starts and
            // ends within half a GOP of the range's ends, and its duration is within one GOP.
            let frags: Vec<_> = catalog
                .fragments(*id)?
                .into_iter()
                .filter(|(_, f)| {
                    let mid = f.wall_start_us + (f.wall_end_us - f.wall_start_us) / 2;
                    mid >= from_us && mid < to_us
                })
                .collect();
            let (Some((_, first)), Some((_, last))) = (frags.first(), frags.last()) else { continue };
            if ex.parts.len() + frags.len() > limits::EXPORT_FRAGMENTS_MAX {
                return Err(ExportError::TooLong);
            }
            let path = data_dir.join(&rec.path);
            let file = File::open(&path).map_err(io_err(&path))?;
            let (mut reader, init) = SegmentReader::open(&file, rec.bytes).map_err(read_err(&path))?;
            let mut init_bytes = vec![0u8; init.end_byte as usize];
            file.read_exact_at(&mut init_bytes, 0).map_err(io_err(&path))?;
            if ex.parts.is_empty() {
                ex.init = init_bytes;
                ex.video_track = init.video_track_id;
                ex.audio_track = init.audio.as_ref().map(|a| a.track_id);
                ex.wall_start_us = first.wall_start_us;
            } else if init_bytes != ex.init {
                ex.cut_at_new_parameters = true;
                break;
            }
            // The first and last exported fragments place this file's audio on the timeline.
            reader.seek_to(first.start_byte);
            let first_ix = reader.next_fragment().map_err(read_err(&path))?.ok_or(ExportError::Empty)?;
            reader.seek_to(last.start_byte);
            let last_ix = reader.next_fragment().map_err(read_err(&path))?.ok_or(ExportError::Empty)?;
            let video_delta = video_at as i64 - first.media_start_90k as i64;
            let audio_delta = audio_at as i64 - first_ix.audio_base_decode as i64;
            ex.files.push(path);
            for (_, f) in &frags {
                ex.parts.push(Part {
                    file: ex.files.len() - 1,
                    start_byte: f.start_byte,
                    len_bytes: f.end_byte - f.start_byte,
                    out_start: 0,
                    duration_90k: f.duration_90k,
                    sequence: ex.parts.len() as u32 + 1,
                    video_delta,
                    audio_delta,
                });
            }
            video_at += last.media_start_90k + last.duration_90k - first.media_start_90k;
            let last_audio_end =
                last_ix.audio_base_decode + last_ix.audio_samples.iter().map(|s| u64::from(s.duration)).sum::<u64>();
            audio_at += last_audio_end.saturating_sub(first_ix.audio_base_decode);
        }
        if ex.parts.is_empty() {
            return Err(ExportError::Empty);
        }
        let mut at = ex.init.len() as u64;
        for p in &mut ex.parts {
            p.out_start = at;
            at += p.len_bytes;
        }
        ex.len_bytes = at;
        ex.duration_90k = video_at;
        Ok(ex)
    }

    /// A file name for the export: `<camera>-<stream>-<UTC start>.mp4`.
    pub fn file_name(&self, stream: &StreamKey) -> String {
        let secs = self.wall_start_us.div_euclid(1_000_000);
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = crate::clock::civil_from_days(days);
        format!(
            "{}-{}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}Z.mp4",
            stream.camera,
            stream.kind.name(),
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    /// The output's layout for an HLS playlist: the init segment's length, then each
    /// fragment's (offset, length, duration in 90 kHz).
    pub fn layout(&self) -> (u64, Vec<(u64, u64, u64)>) {
        (self.init.len() as u64, self.parts.iter().map(|p| (p.out_start, p.len_bytes, p.duration_90k)).collect())
    }

    /// Fills `buf` from output offset `offset`; returns how many bytes (0 at the end).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, ExportError> {
        if offset >= self.len_bytes || buf.is_empty() {
            return Ok(0);
        }
        if offset < self.init.len() as u64 {
            let from = &self.init[offset as usize..];
            let n = from.len().min(buf.len());
            buf[..n].copy_from_slice(&from[..n]);
            return Ok(n);
        }
        let i = self.parts.partition_point(|p| p.out_start <= offset) - 1;
        let p = &self.parts[i];
        let within = offset - p.out_start;
        let want = ((p.len_bytes - within) as usize).min(buf.len());
        let path = &self.files[p.file];
        let file = File::open(path).map_err(io_err(path))?;
        // The fragment header (within the first MOOF_MAX_BYTES) is served retimed.
        let head_len = (p.len_bytes as usize).min(limits::MOOF_MAX_BYTES);
        if (within as usize) < head_len {
            let mut head = vec![0u8; head_len];
            file.read_exact_at(&mut head, p.start_byte).map_err(io_err(path))?;
            let audio = self.audio_track.map(|t| (t, p.audio_delta));
            retime_fragment_header(&mut head, p.sequence, (self.video_track, p.video_delta), audio)
                .map_err(read_err(path))?;
            let n = (head_len - within as usize).min(want);
            buf[..n].copy_from_slice(&head[within as usize..within as usize + n]);
            return Ok(n);
        }
        file.read_exact_at(&mut buf[..want], p.start_byte + within).map_err(io_err(path))?;
        Ok(want)
    }

    /// Fills as much of `buf` as the export has from `offset` on, across fragments (one
    /// [`read_at`](Self::read_at) stops at the end of a fragment or its header); returns how
    /// many bytes.
    pub fn read_full_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, ExportError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.read_at(offset + filled as u64, &mut buf[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        Ok(filled)
    }

    /// Writes the whole export to `out`, a chunk at a time.
    pub fn write_to(&self, out: &mut impl io::Write) -> Result<u64, ExportError> {
        let mut buf = vec![0u8; limits::EXPORT_CHUNK_BYTES];
        let mut at = 0;
        loop {
            let n = self.read_full_at(at, &mut buf)?;
            if n == 0 {
                return Ok(at);
            }
            out.write_all(&buf[..n]).map_err(|source| ExportError::Io { path: "output".into(), source })?;
            at += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::StreamKind;

    #[test]
    fn a_range_of_more_fragments_than_the_ceiling_is_refused_before_any_file_is_read() {
        use crate::catalog::{Batch, FragmentRow, RecordingRow};
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("catalog.redb")).unwrap();
        let s = cat.stream_id(&StreamKey::new("cam", StreamKind::Main)).unwrap();
        let n = limits::EXPORT_FRAGMENTS_MAX as i64 + 1;
        let row = RecordingRow {
            stream_id: s,
            open: false,
            wall_end_us: n * 1_000_000,
            fragments: n as u32,
            ..RecordingRow::for_test("")
        };
        let (id, row) = cat.begin_recording(row, |id| format!("missing/{id}.mp4")).unwrap();
        let fragment = |i: i64| FragmentRow {
            wall_start_us: i * 1_000_000,
            wall_end_us: (i + 1) * 1_000_000,
            media_start_90k: i as u64 * 90_000,
            duration_90k: 90_000,
            start_byte: 100 + i as u64 * 10,
            end_byte: 110 + i as u64 * 10,
            frames: 1,
            keyframes: 1,
        };
        let fragments = (0..n).map(|i| (id, i as u32, fragment(i))).collect();
        cat.commit(&Batch { fragments, recordings: vec![(id, row)], ..Batch::default() }).unwrap();
        let plan =
            |to_s: i64| Export::plan(&cat, dir.path(), &StreamKey::new("cam", StreamKind::Main), 0, to_s * 1_000_000);
        assert!(matches!(plan(n), Err(ExportError::TooLong)));
        // One fragment fewer is planned: it fails only at the file, which does not exist.
        assert!(matches!(plan(n - 1), Err(ExportError::Io { .. })));
    }
}

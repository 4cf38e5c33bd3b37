//! Export: a stream's time range as one playable MP4, built on the fly from stored fragments.
//!
//! The output is a fragmented MP4: the init segment of the first recording in the range,
//! then every fragment that overlaps the range, in order, with its sequence number and decode
//! times rewritten so recordings of different runs (with gaps between them) play as one
//! continuous timeline. Nothing is copied into memory beyond one fragment header at a time:
//! [`Export::read_at`] serves any byte range from the files, so HTTP range requests (and a
//! plain download) cost constant memory. The plan holds one small entry per fragment.
//!
//! Sound goes with the video, each file's audio at its place against its video. AAC and Opus
//! are served as stored; G.711, which browsers do not play from MP4, is given as FLAC (see
//! [`crate::media::flac`]): those fragments are rebuilt as they are read, each G.711 sample a
//! FLAC frame of the same samples, their sizes known at the plan from the sample counts, so
//! byte ranges still cost constant memory.
//!
//! A range is cut at fragment (GOP) boundaries — a fragment is in when its middle is — so an
//! export starts on a keyframe and its duration matches the request within one GOP. An export stops early at a change of codec
//! parameters (a different init segment): one file has one set.
//!
//! The bytes come from a [`ReadAt`]: a segment file, or an archived recording's object in
//! a bucket, read with range requests ([`crate::archive::read`]); the plan is the same.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::base::StreamKey;
use crate::catalog::{Catalog, CatalogError, FragmentRow};
use crate::limits;
use crate::media::fmp4::{self, AudioTrack, SampleEntry, TrackRun};
use crate::media::fmp4_read::{FragmentIndex, ReadError, SegmentReader, retime_fragment_header};
use crate::media::{AudioCodec, flac};

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

/// Bytes read at any offset: a recording's segment file, or its archived object.
pub trait ReadAt: Send + Sync {
    /// Fills `buf` from `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Its name in errors: a path, or a bucket's key.
    fn name(&self) -> String;
    /// At least this much is read at a time while a plan walks its fragments' headers (a
    /// request per read is costly); 0: just what is asked.
    fn window_bytes(&self) -> usize {
        0
    }
}

/// A segment file, opened at each read (an export may outlive a retention pass).
pub struct FileAt(pub PathBuf);

impl ReadAt for FileAt {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        File::open(&self.0)?.read_exact_at(buf, offset)
    }
    fn name(&self) -> String {
        self.0.display().to_string()
    }
}

/// A [`ReadAt`] as a reader of `len` bytes, for [`SegmentReader`]: it reads at least the
/// source's window at a time and keeps the last one.
struct Reading<'a> {
    source: &'a dyn ReadAt,
    len: u64,
    pos: u64,
    window: Vec<u8>,
    window_at: u64,
}

impl<'a> Reading<'a> {
    fn new(source: &'a dyn ReadAt, len: u64) -> Self {
        Reading { source, len, pos: 0, window: Vec::new(), window_at: 0 }
    }
}

impl Read for Reading<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.len.saturating_sub(self.pos);
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let in_window = self.pos >= self.window_at && self.pos < self.window_at + self.window.len() as u64;
        if !in_window {
            let want = (buf.len().max(self.source.window_bytes()) as u64).min(left) as usize;
            self.window.resize(want, 0);
            self.source.read_exact_at(&mut self.window, self.pos)?;
            self.window_at = self.pos;
        }
        let from = (self.pos - self.window_at) as usize;
        let n = (self.window.len() - from).min(buf.len());
        buf[..n].copy_from_slice(&self.window[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Reading<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::End(d) => self.len.saturating_add_signed(d),
            SeekFrom::Current(d) => self.pos.saturating_add_signed(d),
        };
        Ok(self.pos)
    }
}

/// One recording an export may take fragments of: where its bytes are, its committed length,
/// and its fragments (from the catalog, or an archive's manifest).
pub struct Piece {
    pub source: Arc<dyn ReadAt>,
    pub bytes: u64,
    pub fragments: Vec<FragmentRow>,
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
    /// Rebuilt as it is read (its G.711 given as FLAC): `len_bytes` is the rebuilt length.
    rebuilt: bool,
}

/// G.711 given as FLAC.
#[derive(Clone, Copy, Debug)]
struct AsFlac {
    decode: fn(u8) -> i16,
    channels: u16,
}

/// A planned export.
pub struct Export {
    /// Each file and its valid length.
    files: Vec<(Arc<dyn ReadAt>, u64)>,
    /// The init segment served: the first file's, or made anew with a FLAC audio track.
    init: Vec<u8>,
    /// G.711 audio, given as FLAC.
    as_flac: Option<AsFlac>,
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

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("files", &self.files.iter().map(|(s, len)| (s.name(), *len)).collect::<Vec<_>>())
            .field("parts", &self.parts.len())
            .field("len_bytes", &self.len_bytes)
            .finish()
    }
}

fn io_err(source: &dyn ReadAt) -> impl FnOnce(io::Error) -> ExportError + '_ {
    move |e| ExportError::Io { path: source.name(), source: e }
}

fn read_err(source: &dyn ReadAt) -> impl FnOnce(ReadError) -> ExportError + '_ {
    move |e| ExportError::Read { path: source.name(), source: e }
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
        let pieces = catalog.recordings_of(stream_id, from_us, to_us)?.into_iter().map(|(id, rec)| {
            Ok(Piece {
                source: Arc::new(FileAt(data_dir.join(&rec.path))),
                bytes: rec.bytes,
                fragments: catalog.fragments(id)?.into_iter().map(|(_, f)| f).collect(),
            })
        });
        Export::plan_pieces(pieces, from_us, to_us)
    }

    /// Plans the export from `from_us` to `to_us` of `pieces`, in order: a stream's
    /// recordings, local or archived.
    pub fn plan_pieces(
        pieces: impl Iterator<Item = Result<Piece, ExportError>>,
        from_us: i64,
        to_us: i64,
    ) -> Result<Export, ExportError> {
        let mut ex = Export {
            files: Vec::new(),
            init: Vec::new(),
            as_flac: None,
            parts: Vec::new(),
            video_track: 0,
            audio_track: None,
            len_bytes: 0,
            duration_90k: 0,
            wall_start_us: 0,
            cut_at_new_parameters: false,
        };
        // The first file's init segment: every later file must have the same.
        let mut first_init = Vec::new();
        let mut audio_rate = 0u32;
        let mut video_at: u64 = 0;
        let mut audio_at: u64 = 0;
        for piece in pieces {
            let piece = piece?;
            // A fragment belongs to the range when its middle does: the export then starts and
            // ends within half a GOP of the range's ends, and its duration is within one GOP.
            let frags: Vec<_> = piece
                .fragments
                .iter()
                .filter(|f| {
                    let mid = f.wall_start_us + (f.wall_end_us - f.wall_start_us) / 2;
                    mid >= from_us && mid < to_us
                })
                .collect();
            let (Some(first), Some(last)) = (frags.first(), frags.last()) else { continue };
            if ex.parts.len() + frags.len() > limits::EXPORT_FRAGMENTS_MAX {
                return Err(ExportError::TooLong);
            }
            let source = &*piece.source;
            let (mut reader, init) =
                SegmentReader::open(Reading::new(source, piece.bytes), piece.bytes).map_err(read_err(source))?;
            let init_len = usize::try_from(init.end_byte).unwrap_or(usize::MAX).min(limits::INIT_SEGMENT_MAX_BYTES);
            let mut init_bytes = vec![0u8; init_len];
            source.read_exact_at(&mut init_bytes, 0).map_err(io_err(source))?;
            if ex.parts.is_empty() {
                ex.video_track = init.video_track_id;
                ex.audio_track = init.audio.as_ref().map(|a| a.track_id);
                ex.wall_start_us = first.wall_start_us;
                audio_rate = init.audio.as_ref().map_or(0, |a| a.timescale);
                // G.711 is 8 kHz; a file that says otherwise is served as it is.
                ex.as_flac = init.audio.as_ref().filter(|a| a.timescale == 8_000).and_then(|a| {
                    let decode = AudioCodec::from_sample_entry(&a.sample_entry).and_then(flac::g711_decoder)?;
                    let channels = a.sample_entry.get(24..26).map_or(1, |c| u16::from_be_bytes([c[0], c[1]]));
                    Some(AsFlac { decode, channels: channels.clamp(1, 2) })
                });
                ex.init = match (ex.as_flac, &init.audio) {
                    (Some(f), Some(a)) => flac_init(&init, f.channels, a.timescale).map_err(read_err(source))?,
                    _ => init_bytes.clone(),
                };
                first_init = init_bytes;
            } else if init_bytes != first_init {
                ex.cut_at_new_parameters = true;
                break;
            }
            // The file's first exported fragment places its audio on the timeline: moved as
            // its video is, and never before the audio already placed (a file's sound may
            // run a little past its last frame).
            reader.seek_to(first.start_byte);
            let first_ix = reader.next_fragment().map_err(read_err(source))?.ok_or(ExportError::Empty)?;
            // Times from files: saturating, so a damaged one cannot overflow.
            let to_audio = |t_90k: i64| t_90k.saturating_mul(i64::from(audio_rate)) / 90_000;
            if ex.parts.is_empty() {
                // Sound that starts before the first frame: the video starts that much later.
                let early = to_audio(first.media_start_90k as i64).saturating_sub(first_ix.audio_base_decode as i64);
                if audio_rate > 0 && early > 0 {
                    video_at = (early as u64).saturating_mul(90_000).div_ceil(u64::from(audio_rate));
                }
            }
            let video_delta = (video_at as i64).saturating_sub(first.media_start_90k as i64);
            let audio_delta =
                to_audio(video_delta).max((audio_at as i64).saturating_sub(first_ix.audio_base_decode as i64));
            ex.files.push((piece.source.clone(), piece.bytes));
            let file_index = ex.files.len() - 1;
            for f in &frags {
                let mut part = Part {
                    file: file_index,
                    start_byte: f.start_byte,
                    len_bytes: f.end_byte - f.start_byte,
                    out_start: 0,
                    duration_90k: f.duration_90k,
                    sequence: ex.parts.len() as u32 + 1,
                    video_delta,
                    audio_delta,
                    rebuilt: false,
                };
                reader.seek_to(f.start_byte);
                let ix = reader.next_fragment().map_err(read_err(source))?.ok_or(ExportError::Empty)?;
                if let Some(as_flac) = ex.as_flac {
                    part.len_bytes = rebuilt_len(&ix, as_flac.channels, audio_delta);
                    part.rebuilt = true;
                }
                let audio_end =
                    ix.audio_base_decode.saturating_add(ix.audio_samples.iter().map(|s| u64::from(s.duration)).sum());
                audio_at = audio_at.max(audio_end.saturating_add_signed(audio_delta));
                ex.parts.push(part);
            }
            // Saturating: an archived recording's numbers come from a bucket.
            video_at = video_at.saturating_add(
                last.media_start_90k.saturating_add(last.duration_90k).saturating_sub(first.media_start_90k),
            );
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
        let (source, file_len) = &self.files[p.file];
        let source = &**source;
        if let (true, Some(as_flac)) = (p.rebuilt, self.as_flac) {
            return self.read_rebuilt(p, (source, *file_len), as_flac, within, &mut buf[..want]);
        }
        // The fragment header (within the first MOOF_MAX_BYTES) is served retimed.
        let head_len = (p.len_bytes as usize).min(limits::MOOF_MAX_BYTES);
        if (within as usize) < head_len {
            let mut head = vec![0u8; head_len];
            source.read_exact_at(&mut head, p.start_byte).map_err(io_err(source))?;
            let audio = self.audio_track.map(|t| (t, p.audio_delta));
            retime_fragment_header(&mut head, p.sequence, (self.video_track, p.video_delta), audio)
                .map_err(read_err(source))?;
            let n = (head_len - within as usize).min(want);
            buf[..n].copy_from_slice(&head[within as usize..within as usize + n]);
            return Ok(n);
        }
        source.read_exact_at(&mut buf[..want], p.start_byte + within).map_err(io_err(source))?;
        Ok(want)
    }

    /// Fills `buf` from `within` a rebuilt fragment: its header made anew, its video as
    /// stored, its G.711 given as FLAC frames (as many whole or part frames as `buf` takes).
    fn read_rebuilt(
        &self,
        p: &Part,
        (source, file_len): (&dyn ReadAt, u64),
        as_flac: AsFlac,
        within: u64,
        buf: &mut [u8],
    ) -> Result<usize, ExportError> {
        let (mut reader, _) =
            SegmentReader::open(Reading::new(source, file_len), file_len).map_err(read_err(source))?;
        reader.seek_to(p.start_byte);
        let ix = reader.next_fragment().map_err(read_err(source))?.ok_or(ExportError::Empty)?;
        let audio = flac_samples(&ix, as_flac.channels, p.audio_delta);
        let video_bytes: u64 = ix.samples.iter().map(|s| u64::from(s.size_bytes)).sum();
        let mut head = vec![0u8; fmp4::fragment_header_bytes(ix.samples.len(), Some(audio.len()))];
        let video =
            TrackRun { base_decode: ix.base_decode_90k.saturating_add_signed(p.video_delta), samples: &ix.samples };
        let audio_run =
            TrackRun { base_decode: ix.audio_base_decode.saturating_add_signed(p.audio_delta), samples: &audio };
        let head_len =
            fmp4::write_fragment_header(&mut head, p.sequence, ix.wall_us.unwrap_or(0), video, Some(audio_run))
                .map_err(|_| {
                    read_err(source)(ReadError::Malformed { at_byte: p.start_byte, what: "a rebuilt fragment header" })
                })?;
        let head_len = head_len as u64;
        if within < head_len {
            let n = ((head_len - within) as usize).min(buf.len());
            buf[..n].copy_from_slice(&head[within as usize..within as usize + n]);
            return Ok(n);
        }
        if within < head_len + video_bytes {
            let n = ((head_len + video_bytes - within) as usize).min(buf.len());
            source.read_exact_at(&mut buf[..n], ix.data_start_byte + within - head_len).map_err(io_err(source))?;
            return Ok(n);
        }
        // The audio: frame by frame, from the one `within` falls in.
        let mut out_at = head_len + video_bytes;
        let source_at = ix.data_start_byte + video_bytes;
        let mut sample_no = audio_run.base_decode;
        // The fragment's G.711 read at once (a read from a bucket is a request): a few
        // seconds of 8 kB/s.
        let g711_bytes: u64 = ix.audio_samples.iter().map(|s| u64::from(s.size_bytes)).sum();
        if g711_bytes > limits::FRAGMENT_MAX_BYTES as u64 {
            return Err(read_err(source)(ReadError::Malformed { at_byte: p.start_byte, what: "a fragment's sound" }));
        }
        let mut g711 = vec![0u8; g711_bytes as usize];
        source.read_exact_at(&mut g711, source_at).map_err(io_err(source))?;
        let mut at_in_g711 = 0usize;
        let (mut filled, mut frame) = (0, Vec::new());
        for (sample, rebuilt) in ix.audio_samples.iter().zip(&audio) {
            let frame_end = out_at + u64::from(rebuilt.size_bytes);
            let samples = g711.get(at_in_g711..at_in_g711 + sample.size_bytes as usize);
            let Some(samples) = samples else { break };
            if frame_end > within + filled as u64 && filled < buf.len() {
                frame.clear();
                flac::write_frame(&mut frame, samples, as_flac.channels, as_flac.decode, sample_no);
                let from = (within + filled as u64).saturating_sub(out_at) as usize;
                let n = (frame.len() - from).min(buf.len() - filled);
                buf[filled..filled + n].copy_from_slice(&frame[from..from + n]);
                filled += n;
            }
            out_at = frame_end;
            at_in_g711 += sample.size_bytes as usize;
            sample_no = sample_no.saturating_add(u64::from(sample.duration));
        }
        Ok(filled)
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

/// The init segment of an export whose G.711 is given as FLAC: the file's video track as it
/// is, and a FLAC audio track at the same rate.
fn flac_init(init: &crate::media::fmp4_read::InitSegment, channels: u16, rate: u32) -> Result<Vec<u8>, ReadError> {
    let entry = flac::sample_entry(channels, rate);
    let mut buf = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
    let audio = AudioTrack { sample_entry: &entry, sample_rate: rate };
    let n = fmp4::write_init_segment(&mut buf, &init.sample_entry, init.width, init.height, Some(audio))
        .map_err(|_| ReadError::Malformed { at_byte: 0, what: "an export's init segment" })?;
    buf.truncate(n);
    Ok(buf)
}

/// A fragment's audio samples as FLAC frames: each G.711 sample's duration, and the size of
/// the frame of its samples at its place in the export.
fn flac_samples(ix: &FragmentIndex, channels: u16, audio_delta: i64) -> Vec<SampleEntry> {
    let mut sample_no = ix.audio_base_decode.saturating_add_signed(audio_delta);
    ix.audio_samples
        .iter()
        .map(|s| {
            let samples = (s.size_bytes / u32::from(channels)).clamp(1, flac::MAX_BLOCK);
            let size = flac::frame_len(samples, channels, sample_no) as u32;
            sample_no = sample_no.saturating_add(u64::from(s.duration));
            SampleEntry { size_bytes: size, ..*s }
        })
        .collect()
}

/// The length of a fragment rebuilt with its G.711 as FLAC.
fn rebuilt_len(ix: &FragmentIndex, channels: u16, audio_delta: i64) -> u64 {
    let audio = flac_samples(ix, channels, audio_delta);
    let header = fmp4::fragment_header_bytes(ix.samples.len(), Some(audio.len())) as u64;
    let bytes = |s: &[SampleEntry]| s.iter().map(|s| u64::from(s.size_bytes)).sum::<u64>();
    header + bytes(&ix.samples) + bytes(&audio)
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
        assert!(matches!(plan(n - 1), Err(ExportError::Io { .. } | ExportError::Read { .. })));
    }
}

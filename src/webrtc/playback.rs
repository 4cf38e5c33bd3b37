//! Stored playback: a cursor over one stream's recordings. It finds where to start through
//! the catalog (the keyframe at or before the target), reads one fragment's index at a time
//! from the segment file and one sample's bytes at a time, and paces frames by their wall
//! time divided by the rate. Gaps between recordings are skipped, not waited out. Above 2×
//! only keyframes are read.
//!
//! A recording's sound comes with its pictures, each audio sample at its wall time (placed
//! against the fragment's first picture as the file places it), at 1× only: at other rates,
//! paused and stepping, the sound is left out.
//!
//! Memory: one fragment's sample tables (at most [`limits::FRAGMENT_MAX_SAMPLES`] and
//! [`limits::FRAGMENT_MAX_AUDIO_SAMPLES`] entries) and one frame.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::catalog::{Catalog, CatalogError, Keyframe, RecordingRow};
use crate::clock::ticks_90k_to_us;
use crate::limits;
use crate::media::fmp4_read::{ReadError, SegmentReader};
use crate::media::{AudioCodec, AudioFrame, AudioParams, VideoParams, annexb};

/// Why a cursor cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("nothing recorded there")]
    NothingRecorded,
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Read { path: String, source: ReadError },
    #[error("{0}")]
    Params(#[from] annexb::AnnexbError),
}

/// How far a seek looks back for a keyframe, and ahead when there is none before.
const SEEK_WINDOW_US: i64 = 24 * 3600 * 1_000_000;

/// How often a cursor at the end of what is recorded looks for more.
const END_RETRY: Duration = Duration::from_millis(250);

/// A gap longer than this between two frames is skipped at once.
const GAP_SKIP_US: i64 = 2_000_000;

/// One sample to come.
#[derive(Clone, Copy, Debug)]
struct Sample {
    offset: u64,
    len: u32,
    wall_us: i64,
    is_key: bool,
    /// An audio sample: its duration in samples.
    audio: Option<u32>,
}

/// How a G.711 sample of `duration` samples in `size_bytes` is sent: in pieces of 20 ms
/// of `rate`, and the bytes of one sample; `None` to send it as it is (20 ms or less, not
/// whole samples, or longer than the recorder gathers, which bounds the pieces a fragment
/// makes to `RECORD_AUDIO_GATHER_MS` / 20 a sample).
fn g711_piece(duration: u32, size_bytes: u32, rate: u32) -> Option<(u32, u32)> {
    let piece = (rate / 50).max(1);
    let most = u64::from(rate) * limits::RECORD_AUDIO_GATHER_MS / 1000;
    let whole = duration > 0 && size_bytes.is_multiple_of(duration);
    (whole && duration > piece && u64::from(duration) <= most).then(|| (piece, size_bytes / duration))
}

/// One open file for both the fragment reader (which seeks) and the sample reads (which
/// are positioned, so the shared offset does not matter): one descriptor per cursor.
struct Shared(Arc<File>);

impl std::io::Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

impl std::io::Seek for Shared {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        (&*self.0).seek(pos)
    }
}

/// The recording being read.
struct Open {
    row: RecordingRow,
    path: PathBuf,
    file: Arc<File>,
    reader: SegmentReader<Shared>,
    params: Arc<VideoParams>,
    sets: Vec<Bytes>,
    /// The recording's sound, when it has some in a codec KeepPeek knows.
    audio: Option<Arc<AudioParams>>,
}

/// What a cursor hands on.
pub enum Stored {
    Frame(StoredFrame),
    /// A frame of the recording's sound, its time the 90 kHz form of its wall time.
    Audio(AudioFrame),
}

/// A frame read for sending.
pub struct StoredFrame {
    /// Annex B, parameter sets in front of a keyframe.
    pub annexb: Arc<[u8]>,
    pub is_key: bool,
    pub wall_us: i64,
}

pub struct Cursor {
    catalog: Arc<Catalog>,
    data_dir: PathBuf,
    stream_id: u32,
    open: Option<Open>,
    pending: VecDeque<Sample>,
    /// Wall time of the last frame read, so the next recording is found after it.
    last_wall_us: i64,
    /// Pacing: this wall time was due at this instant.
    anchor: (Instant, i64),
    rate: f32,
    paused: bool,
    step: bool,
    keyframes_only: bool,
    /// At the end of what is recorded: look again for new fragments then, not before.
    retry_at: Option<Instant>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CursorError + '_ {
    move |source| CursorError::Io { path: path.display().to_string(), source }
}

impl Cursor {
    /// A cursor on stream `stream_id` at the keyframe at or before `wall_us` (or the first
    /// one after it, when nothing is recorded before).
    pub fn open(
        catalog: Arc<Catalog>,
        data_dir: &Path,
        stream_id: u32,
        wall_us: i64,
        now: Instant,
    ) -> Result<Cursor, CursorError> {
        let mut c = Cursor {
            catalog,
            data_dir: data_dir.into(),
            stream_id,
            open: None,
            pending: VecDeque::new(),
            last_wall_us: wall_us,
            anchor: (now, wall_us),
            rate: 1.0,
            paused: false,
            step: false,
            keyframes_only: false,
            retry_at: None,
        };
        c.seek(wall_us, now)?;
        Ok(c)
    }

    /// Moves to the keyframe at or before `wall_us`.
    pub fn seek(&mut self, wall_us: i64, now: Instant) -> Result<(), CursorError> {
        self.retry_at = None;
        let (rec, kf) = self
            .catalog
            .keyframe_near(self.stream_id, wall_us, SEEK_WINDOW_US, SEEK_WINDOW_US)?
            .ok_or(CursorError::NothingRecorded)?;
        self.start_at(rec, kf)?;
        self.anchor = (now, kf.wall_us);
        self.last_wall_us = kf.wall_us;
        Ok(())
    }

    /// Opens recording `rec` at keyframe `kf`: its fragment's samples from that keyframe on.
    fn start_at(&mut self, rec: u64, kf: Keyframe) -> Result<(), CursorError> {
        let row = self.catalog.recording(rec)?.ok_or(CursorError::NothingRecorded)?;
        let reuse = self.open.as_ref().is_some_and(|o| o.row.path == row.path);
        if reuse {
            // The same file, perhaps grown since: its current length is the row's, for the
            // reader too (else a cursor opened on a segment being written stops where the
            // file ended when it opened: found with sound, whose stored playback at 1× runs
            // on to the live edge).
            let open = self.open.as_mut().expect("checked");
            open.reader.set_len(row.bytes);
            open.row = row;
        } else {
            let path = self.data_dir.join(&row.path);
            let file = File::open(&path).map_err(io_err(&path))?;
            let file = Arc::new(file);
            let (reader, init) = SegmentReader::open(Shared(file.clone()), row.bytes)
                .map_err(|source| CursorError::Read { path: path.display().to_string(), source })?;
            let params = Arc::new(VideoParams {
                codec: init.codec,
                rfc6381: String::new(),
                width: init.width,
                height: init.height,
                sample_entry: init.sample_entry.into(),
            });
            let sets = annexb::parameter_sets(&params)?;
            let audio = init.audio.as_ref().and_then(|a| {
                let codec = AudioCodec::from_sample_entry(&a.sample_entry)?;
                Some(Arc::new(AudioParams {
                    codec,
                    rfc6381: codec.name().into(),
                    sample_rate: a.timescale,
                    sample_entry: Bytes::copy_from_slice(&a.sample_entry),
                }))
            });
            self.open = Some(Open { row, path, file, reader, params, sets, audio });
        }
        let open = self.open.as_mut().expect("just opened");
        open.reader.seek_to(kf.fragment_start_byte);
        self.pending.clear();
        self.load_fragment()?;
        while self.pending.front().is_some_and(|s| !(s.is_key && s.wall_us >= kf.wall_us - 1_000)) {
            self.pending.pop_front();
        }
        Ok(())
    }

    /// Reads the next fragment's sample table; false at the end of the file.
    fn load_fragment(&mut self) -> Result<bool, CursorError> {
        let Some(open) = self.open.as_mut() else { return Ok(false) };
        if open.reader.position_byte() >= open.row.bytes {
            return Ok(false);
        }
        let path = open.path.display().to_string();
        let Some(f) = open.reader.next_fragment().map_err(|source| CursorError::Read { path, source })? else {
            return Ok(false);
        };
        let Some(wall0) = f.wall_us else { return Ok(false) };
        let mut offset = f.data_start_byte;
        let mut at_90k: i64 = 0;
        let mut video = Vec::with_capacity(f.samples.len());
        for s in f.samples.iter().take(limits::FRAGMENT_MAX_SAMPLES) {
            video.push(Sample {
                offset,
                len: s.size_bytes,
                wall_us: wall0 + ticks_90k_to_us(at_90k),
                is_key: s.is_key,
                audio: None,
            });
            offset += u64::from(s.size_bytes);
            at_90k += i64::from(s.duration);
        }
        // The sound after the pictures in the file, placed against the fragment's first
        // picture as the file's two decode times place it.
        let rate = open.audio.as_ref().map_or(0, |a| i64::from(a.sample_rate.max(1)));
        let g711 = open.audio.as_ref().is_some_and(|a| matches!(a.codec, AudioCodec::Pcmu | AudioCodec::Pcma));
        let mut audio = Vec::new();
        if rate > 0 {
            let video_start_us = ticks_90k_to_us(f.base_decode_90k as i64);
            let mut at = f.audio_base_decode as i64;
            let wall_at = |at: i64| {
                let at_us = (i128::from(at) * 1_000_000 / i128::from(rate)) as i64;
                wall0.saturating_add(at_us).saturating_sub(video_start_us)
            };
            for s in f.audio_samples.iter().take(limits::FRAGMENT_MAX_AUDIO_SAMPLES) {
                // G.711 the recorder gathered into longer samples goes to viewers in 20 ms
                // pieces, each at its time, as cameras send it: the packets browsers' jitter
                // buffers expect.
                let piece = g711_piece(s.duration, s.size_bytes, rate as u32).filter(|_| g711);
                let Some((piece, sample_bytes)) = piece else {
                    audio.push(Sample {
                        offset,
                        len: s.size_bytes,
                        wall_us: wall_at(at),
                        is_key: false,
                        audio: Some(s.duration),
                    });
                    offset += u64::from(s.size_bytes);
                    at = at.saturating_add(i64::from(s.duration));
                    continue;
                };
                let mut left = s.duration;
                while left > 0 {
                    let n = piece.min(left);
                    let len = n * sample_bytes;
                    audio.push(Sample { offset, len, wall_us: wall_at(at), is_key: false, audio: Some(n) });
                    offset += u64::from(len);
                    at = at.saturating_add(i64::from(n));
                    left -= n;
                }
            }
        }
        // Both in time order, as they are to be sent.
        let mut audio = audio.into_iter().peekable();
        for v in video {
            while let Some(a) = audio.next_if(|a| a.wall_us < v.wall_us) {
                self.pending.push_back(a);
            }
            self.pending.push_back(v);
        }
        self.pending.extend(audio);
        Ok(true)
    }

    /// The next sample, moving to the next fragment and the next recording as needed.
    fn next_sample(&mut self) -> Result<Option<Sample>, CursorError> {
        // Bounded: a catalog and file that disagree must not keep the engine here.
        for _ in 0..limits::FRAGMENT_MAX_SAMPLES {
            while let Some(s) = self.pending.pop_front() {
                if !self.keyframes_only || s.is_key {
                    return Ok(Some(s));
                }
            }
            if self.load_fragment()? {
                continue;
            }
            // The next recording: its first keyframe after the last frame read.
            let next = self.catalog.keyframe_near(self.stream_id, self.last_wall_us + 1, 0, SEEK_WINDOW_US)?;
            match next {
                Some((rec, kf)) if kf.wall_us > self.last_wall_us => {
                    self.start_at(rec, kf)?;
                    if self.pending.is_empty() {
                        // Nothing readable there yet (a fragment not on disk): later.
                        return Ok(None);
                    }
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    pub fn set_rate(&mut self, rate: f32, keyframes_only: bool, now: Instant) {
        // Re-anchor at the current position so the new rate applies from now.
        self.anchor = (now, self.last_wall_us);
        self.rate = rate;
        self.keyframes_only = keyframes_only;
    }

    pub fn set_paused(&mut self, paused: bool, step: bool, now: Instant) {
        if self.paused && !paused {
            self.anchor = (now, self.last_wall_us);
        }
        self.paused = paused;
        self.step = step;
    }

    /// When the next frame is due; `None` while paused (and no step is asked) or at the end.
    pub fn due(&self) -> Option<Instant> {
        if self.paused && !self.step {
            return None;
        }
        if let Some(retry) = self.retry_at {
            return Some(retry);
        }
        let next = self.pending.front().map_or(self.last_wall_us, |s| s.wall_us);
        if self.step {
            return Some(self.anchor.0);
        }
        let ahead_us = ((next - self.anchor.1).max(0) as f64 / f64::from(self.rate)) as u64;
        Some(self.anchor.0 + Duration::from_micros(ahead_us))
    }

    /// The next frame if it is due at `now`; `Ok(None)` when not yet (or at the end).
    pub fn pop(&mut self, now: Instant) -> Result<Option<Stored>, CursorError> {
        if self.due().is_none_or(|d| d > now) {
            return Ok(None);
        }
        self.retry_at = None;
        let Some(s) = self.next_sample()? else {
            // Caught up with the recording: new fragments reach the catalog at each flush.
            self.retry_at = Some(now + END_RETRY);
            return Ok(None);
        };
        if let Some(duration_samples) = s.audio {
            return self.audio(s, duration_samples).map(Some);
        }
        if s.wall_us - self.last_wall_us > GAP_SKIP_US || s.wall_us < self.last_wall_us {
            self.anchor = (now, s.wall_us);
        }
        self.last_wall_us = s.wall_us;
        if self.step {
            self.step = false;
            self.anchor = (now, s.wall_us);
        }
        let open = self.open.as_ref().expect("a sample comes from an open file");
        if s.len as usize > limits::FRAME_MAX_BYTES {
            let source = ReadError::Malformed { at_byte: s.offset, what: "a sample over the frame ceiling" };
            return Err(CursorError::Read { path: open.path.display().to_string(), source });
        }
        let mut data = vec![0u8; s.len as usize];
        open.file.read_exact_at(&mut data, s.offset).map_err(io_err(&open.path))?;
        let sets: &[Bytes] = if s.is_key { &open.sets } else { &[] };
        let mut out = Vec::with_capacity(data.len() + 64);
        annexb::to_annexb(&data, sets, &mut out)?;
        Ok(Some(Stored::Frame(StoredFrame { annexb: out.into(), is_key: s.is_key, wall_us: s.wall_us })))
    }

    /// An audio sample read, at 1× (else skipped: `Ok(Stored::Audio)` with no bytes).
    fn audio(&mut self, s: Sample, duration_samples: u32) -> Result<Stored, CursorError> {
        let open = self.open.as_ref().expect("a sample comes from an open file");
        let params = open.audio.clone().expect("audio samples come from a file with sound");
        let heard = self.rate == 1.0 && !self.paused && !self.step;
        let len = if heard { s.len as usize } else { 0 };
        if len > limits::AUDIO_FRAME_MAX_BYTES {
            let source = ReadError::Malformed { at_byte: s.offset, what: "an audio sample over its ceiling" };
            return Err(CursorError::Read { path: open.path.display().to_string(), source });
        }
        let mut data = vec![0u8; len];
        open.file.read_exact_at(&mut data, s.offset).map_err(io_err(&open.path))?;
        let pts_90k = s.wall_us.saturating_mul(9) / 100;
        Ok(Stored::Audio(AudioFrame { pts_90k, duration_samples, data: data.into(), params }))
    }

    /// The wall time of the last frame read.
    pub fn position_us(&self) -> i64 {
        self.last_wall_us
    }

    /// The codec parameters of the recording being read.
    pub fn params(&self) -> Option<&Arc<VideoParams>> {
        self.open.as_ref().map(|o| &o.params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_g711_goes_to_viewers_in_20_ms_pieces() {
        // 100 ms mono and stereo at 8 kHz: five pieces of 160 samples.
        assert_eq!(g711_piece(800, 800, 8_000), Some((160, 1)));
        assert_eq!(g711_piece(800, 1_600, 8_000), Some((160, 2)));
        // As a camera's packet: as it is.
        assert_eq!(g711_piece(160, 160, 8_000), None);
        // Longer than the recorder gathers, or not whole samples, or empty: as it is.
        assert_eq!(g711_piece(801, 801, 8_000), None);
        assert_eq!(g711_piece(400, 401, 8_000), None);
        assert_eq!(g711_piece(0, 0, 8_000), None);
    }
}

//! A bounded reader for the fragmented MP4 segment files KeepPeek writes (see
//! [`super::fmp4`] for the layout). Crash recovery uses it to index fragments the catalog never
//! saw and to find where a torn file must be cut; tests use it as an independent check.
//!
//! It reads box headers and `moof`s only, skipping over `mdat` payloads, so a 256 MiB segment
//! costs a few KiB of reads per fragment. Every size is checked against the file's length and
//! a ceiling before anything is allocated; a malformed file is an error, never a panic.

use std::io::{self, Read, Seek, SeekFrom};

use super::Codec;
use super::fmp4::{SAMPLE_FLAGS_NON_SYNC, SampleEntry, ntp_to_wall_us};
use crate::limits;

/// Why a segment file (or the rest of it) could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("reading segment: {0}")]
    Io(#[from] io::Error),
    /// The file ends inside a box: a write torn by a power cut.
    #[error("segment truncated inside a box at byte {at_byte}")]
    Truncated { at_byte: u64 },
    #[error("malformed segment at byte {at_byte}: {what}")]
    Malformed { at_byte: u64, what: &'static str },
    #[error("{what} at byte {at_byte} exceeds the maximum of {max} bytes")]
    TooLarge { at_byte: u64, what: &'static str, max: usize },
}

/// What the init segment says about the file's one video track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitSegment {
    /// Offset just past the `moov`: where the first fragment starts.
    pub end_byte: u64,
    pub codec: Codec,
    pub timescale: u32,
    pub width: u16,
    pub height: u16,
    pub sample_entry: Vec<u8>,
    pub video_track_id: u32,
    pub audio: Option<AudioInit>,
}

/// The audio track of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioInit {
    pub track_id: u32,
    pub timescale: u32,
    pub sample_entry: Vec<u8>,
}

/// One fragment's place in the file and its samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentIndex {
    /// Offset of the fragment's first box (`prft` if present, else `moof`).
    pub start_byte: u64,
    /// Offset just past its `mdat`.
    pub end_byte: u64,
    /// Offset of the first sample's bytes.
    pub data_start_byte: u64,
    pub sequence: u32,
    pub base_decode_90k: u64,
    /// Wall time of the first sample, from `prft`, if the fragment has one.
    pub wall_us: Option<i64>,
    /// The video samples.
    pub samples: Vec<SampleEntry>,
    /// Decode time of the first audio sample, in the audio track's timescale.
    pub audio_base_decode: u64,
    /// The audio samples (empty without an audio track).
    pub audio_samples: Vec<SampleEntry>,
}

impl FragmentIndex {
    /// Total duration of the fragment's samples, 90 kHz.
    pub fn duration_90k(&self) -> u64 {
        self.samples.iter().map(|s| u64::from(s.duration)).sum()
    }
}

/// Sequential reader over one segment file.
pub struct SegmentReader<R> {
    r: R,
    len_bytes: u64,
    pos_byte: u64,
    video_track_id: u32,
    audio_track_id: Option<u32>,
}

struct BoxHeader {
    fourcc: [u8; 4],
    start_byte: u64,
    header_bytes: u64,
    size_bytes: u64,
}

impl BoxHeader {
    /// Where the box ends. Saturating: a hostile 64-bit size must not wrap around to an
    /// offset inside the file (it would make the reader loop).
    fn end_byte(&self) -> u64 {
        self.start_byte.saturating_add(self.size_bytes)
    }
    fn body_bytes(&self) -> u64 {
        self.size_bytes - self.header_bytes
    }
}

impl<R: Read + Seek> SegmentReader<R> {
    /// Reads the init segment of a file of `len_bytes` bytes.
    pub fn open(mut r: R, len_bytes: u64) -> Result<(Self, InitSegment), ReadError> {
        r.seek(SeekFrom::Start(0))?;
        let mut me = SegmentReader { r, len_bytes, pos_byte: 0, video_track_id: 0, audio_track_id: None };
        loop {
            let Some(h) = me.header()? else {
                return Err(ReadError::Truncated { at_byte: me.pos_byte });
            };
            match &h.fourcc {
                b"ftyp" | b"free" | b"skip" => me.skip(&h)?,
                b"moov" => {
                    let body = me.body(&h, limits::INIT_SEGMENT_MAX_BYTES, "moov")?;
                    let init = parse_moov(&body, h.start_byte, h.end_byte())?;
                    me.video_track_id = init.video_track_id;
                    me.audio_track_id = init.audio.as_ref().map(|a| a.track_id);
                    return Ok((me, init));
                }
                _ => {
                    return Err(ReadError::Malformed { at_byte: h.start_byte, what: "expected ftyp then moov" });
                }
            }
        }
    }

    /// The offset where the next fragment would start.
    pub fn position_byte(&self) -> u64 {
        self.pos_byte
    }

    /// Moves to `pos_byte`, e.g. past the fragments the catalog already knows.
    pub fn seek_to(&mut self, pos_byte: u64) {
        self.pos_byte = pos_byte;
    }

    /// The file has grown to `len_bytes` (a segment still being written): its new fragments
    /// are read too.
    pub fn set_len(&mut self, len_bytes: u64) {
        self.len_bytes = len_bytes;
    }

    /// Reads the next whole fragment. `Ok(None)` at a clean end of file; `Truncated` when the
    /// file ends inside a fragment.
    pub fn next_fragment(&mut self) -> Result<Option<FragmentIndex>, ReadError> {
        let start_byte = self.pos_byte;
        let Some(mut h) = self.header()? else {
            return Ok(None);
        };
        if matches!(&h.fourcc, b"free" | b"skip") {
            // Room kept in front of a fragment (a writer that reserves its header's space
            // before the samples are known pads what the header did not need): one such box,
            // no larger than a header.
            if h.size_bytes > limits::MOOF_MAX_BYTES as u64 {
                return Err(ReadError::TooLarge {
                    at_byte: h.start_byte,
                    what: "free box before a fragment",
                    max: limits::MOOF_MAX_BYTES,
                });
            }
            self.skip(&h)?;
            h = self.header()?.ok_or(ReadError::Truncated { at_byte: self.pos_byte })?;
        }
        let mut wall_us = None;
        if &h.fourcc == b"prft" {
            let body = self.body(&h, 64, "prft")?;
            wall_us = Some(parse_prft(&body, h.start_byte)?);
            h = self.header()?.ok_or(ReadError::Truncated { at_byte: self.pos_byte })?;
        }
        if &h.fourcc != b"moof" {
            return Err(ReadError::Malformed { at_byte: h.start_byte, what: "expected moof" });
        }
        let moof_start_byte = h.start_byte;
        let moof = self.body(&h, limits::MOOF_MAX_BYTES, "moof")?;
        let parsed = parse_moof(&moof, moof_start_byte)?;
        let mdat = self.header()?.ok_or(ReadError::Truncated { at_byte: self.pos_byte })?;
        if &mdat.fourcc != b"mdat" {
            return Err(ReadError::Malformed { at_byte: mdat.start_byte, what: "expected mdat" });
        }
        if mdat.end_byte() > self.len_bytes {
            return Err(ReadError::Truncated { at_byte: mdat.start_byte });
        }
        let data_start_byte = mdat.start_byte + mdat.header_bytes;
        // The mdat holds the video samples, then the audio samples, back to back.
        let mut video = None;
        let mut audio = None;
        for t in parsed.trafs {
            if t.track_id == self.video_track_id && video.is_none() {
                video = Some(t);
            } else if Some(t.track_id) == self.audio_track_id && audio.is_none() {
                audio = Some(t);
            } else {
                return Err(ReadError::Malformed {
                    at_byte: moof_start_byte,
                    what: "track fragment of an unknown track",
                });
            }
        }
        let video = video.ok_or(ReadError::Malformed { at_byte: moof_start_byte, what: "fragment without video" })?;
        let mut expect_offset = data_start_byte;
        for t in std::iter::once(&video).chain(audio.as_ref()) {
            if moof_start_byte + t.data_offset_bytes != expect_offset {
                return Err(ReadError::Malformed {
                    at_byte: moof_start_byte,
                    what: "trun data offset does not point at its samples in the mdat",
                });
            }
            expect_offset += t.payload_bytes();
        }
        if expect_offset != mdat.end_byte() {
            return Err(ReadError::Malformed {
                at_byte: mdat.start_byte,
                what: "sample sizes do not add up to the mdat payload",
            });
        }
        self.skip(&mdat)?;
        let (audio_base_decode, audio_samples) = audio.map_or((0, Vec::new()), |a| (a.base_decode, a.samples));
        Ok(Some(FragmentIndex {
            start_byte,
            end_byte: mdat.end_byte(),
            data_start_byte,
            sequence: parsed.sequence,
            base_decode_90k: video.base_decode,
            wall_us,
            samples: video.samples,
            audio_base_decode,
            audio_samples,
        }))
    }

    /// Reads a box header at the current position; `None` at the end of the file.
    fn header(&mut self) -> Result<Option<BoxHeader>, ReadError> {
        let start_byte = self.pos_byte;
        if start_byte >= self.len_bytes {
            return Ok(None);
        }
        if self.len_bytes - start_byte < 8 {
            return Err(ReadError::Truncated { at_byte: start_byte });
        }
        let mut head = [0u8; 16];
        self.r.seek(SeekFrom::Start(start_byte))?;
        self.r.read_exact(&mut head[..8])?;
        let mut size_bytes = u64::from(u32::from_be_bytes([head[0], head[1], head[2], head[3]]));
        let fourcc = [head[4], head[5], head[6], head[7]];
        let mut header_bytes = 8;
        if size_bytes == 1 {
            if self.len_bytes - start_byte < 16 {
                return Err(ReadError::Truncated { at_byte: start_byte });
            }
            self.r.read_exact(&mut head[8..16])?;
            size_bytes = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
            header_bytes = 16;
        }
        if size_bytes < header_bytes {
            // Size 0 ("to end of file") never appears in our files; smaller sizes are garbage.
            return Err(ReadError::Malformed { at_byte: start_byte, what: "box size too small" });
        }
        let h = BoxHeader { fourcc, start_byte, header_bytes, size_bytes };
        if h.end_byte() > self.len_bytes && &fourcc != b"mdat" {
            return Err(ReadError::Truncated { at_byte: start_byte });
        }
        self.pos_byte = start_byte + header_bytes;
        Ok(Some(h))
    }

    fn body(&mut self, h: &BoxHeader, max: usize, what: &'static str) -> Result<Vec<u8>, ReadError> {
        let n = h.body_bytes();
        if n > max as u64 {
            return Err(ReadError::TooLarge { at_byte: h.start_byte, what, max });
        }
        let mut body = vec![0u8; n as usize];
        self.r.read_exact(&mut body)?;
        self.pos_byte = h.end_byte();
        Ok(body)
    }

    fn skip(&mut self, h: &BoxHeader) -> Result<(), ReadError> {
        if h.end_byte() > self.len_bytes {
            return Err(ReadError::Truncated { at_byte: h.start_byte });
        }
        self.pos_byte = h.end_byte();
        Ok(())
    }
}

/// Iterates the child boxes of a box body held in memory.
struct Children<'a> {
    data: &'a [u8],
    /// File offset of `data[0]`, for error messages.
    base_byte: u64,
    pos: usize,
}

fn children(data: &[u8], base_byte: u64) -> Children<'_> {
    Children { data, base_byte, pos: 0 }
}

impl<'a> Iterator for Children<'a> {
    type Item = Result<([u8; 4], &'a [u8], u64), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.data[self.pos..];
        if rest.is_empty() {
            return None;
        }
        let at_byte = self.base_byte + self.pos as u64;
        let bad = |what| Some(Err(ReadError::Malformed { at_byte, what }));
        if rest.len() < 8 {
            self.pos = self.data.len();
            return bad("child box header cut short");
        }
        let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if size < 8 || size > rest.len() {
            self.pos = self.data.len();
            return bad("child box size out of bounds");
        }
        let fourcc = [rest[4], rest[5], rest[6], rest[7]];
        self.pos += size;
        Some(Ok((fourcc, &rest[8..size], at_byte + 8)))
    }
}

/// Finds the first child of type `fourcc`.
fn child<'a>(data: &'a [u8], base_byte: u64, fourcc: &[u8; 4]) -> Result<(&'a [u8], u64), ReadError> {
    for c in children(data, base_byte) {
        let (f, body, at) = c?;
        if &f == fourcc {
            return Ok((body, at));
        }
    }
    Err(ReadError::Malformed { at_byte: base_byte, what: "a required box is missing" })
}

/// Big-endian field reader over a box body.
struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    at_byte: u64,
}

impl Fields<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], ReadError> {
        let s = self
            .data
            .get(self.pos..self.pos + n)
            .ok_or(ReadError::Malformed { at_byte: self.at_byte, what: "box body cut short" })?;
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, ReadError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, ReadError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

fn fields(data: &[u8], at_byte: u64) -> Fields<'_> {
    Fields { data, pos: 0, at_byte }
}

/// One `trak` of the init segment.
struct ParsedTrak {
    track_id: u32,
    handler: [u8; 4],
    timescale: u32,
    width: u16,
    height: u16,
    sample_entry: Vec<u8>,
}

fn parse_trak(trak: &[u8], trak_at: u64) -> Result<ParsedTrak, ReadError> {
    let (tkhd, tkhd_at) = child(trak, trak_at, b"tkhd")?;
    let mut f = fields(tkhd, tkhd_at);
    let version = f.u32()? >> 24;
    f.take(if version == 1 { 16 } else { 8 })?; // creation and modification times
    let track_id = f.u32()?;
    f.take(if version == 1 { 12 } else { 8 })?; // reserved, duration
    f.take(8 + 8 + 36)?; // reserved, layer..volume, matrix
    let width = (f.u32()? >> 16) as u16;
    let height = (f.u32()? >> 16) as u16;
    let (mdia, mdia_at) = child(trak, trak_at, b"mdia")?;
    let (mdhd, mdhd_at) = child(mdia, mdia_at, b"mdhd")?;
    let mut f = fields(mdhd, mdhd_at);
    let version = f.u32()? >> 24;
    f.take(if version == 1 { 16 } else { 8 })?;
    let timescale = f.u32()?;
    if timescale == 0 {
        return Err(ReadError::Malformed { at_byte: mdhd_at, what: "zero timescale" });
    }
    let (hdlr, hdlr_at) = child(mdia, mdia_at, b"hdlr")?;
    let mut f = fields(hdlr, hdlr_at);
    f.take(8)?; // version, flags, pre-defined
    let handler: [u8; 4] = f.take(4)?.try_into().expect("4 bytes");
    let (minf, minf_at) = child(mdia, mdia_at, b"minf")?;
    let (stbl, stbl_at) = child(minf, minf_at, b"stbl")?;
    let (stsd, stsd_at) = child(stbl, stbl_at, b"stsd")?;
    let mut f = fields(stsd, stsd_at);
    f.u32()?;
    if f.u32()? == 0 {
        return Err(ReadError::Malformed { at_byte: stsd_at, what: "no sample entry" });
    }
    let entries = &stsd[8..];
    let entry_len = entries
        .get(0..4)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
        .filter(|&n| n >= 8 && n <= entries.len())
        .ok_or(ReadError::Malformed { at_byte: stsd_at, what: "sample entry out of bounds" })?;
    Ok(ParsedTrak { track_id, handler, timescale, width, height, sample_entry: entries[..entry_len].to_vec() })
}

fn parse_moov(moov: &[u8], moov_start_byte: u64, end_byte: u64) -> Result<InitSegment, ReadError> {
    let base = moov_start_byte + 8;
    let mut video = None;
    let mut audio = None;
    for c in children(moov, base) {
        let (fourcc, body, at) = c?;
        if &fourcc != b"trak" {
            continue;
        }
        let t = parse_trak(body, at)?;
        match &t.handler {
            b"vide" if video.is_none() => video = Some(t),
            b"soun" if audio.is_none() => audio = Some(t),
            _ => {}
        }
    }
    let v = video.ok_or(ReadError::Malformed { at_byte: moov_start_byte, what: "no video track" })?;
    let codec = Codec::from_sample_entry(&v.sample_entry)
        .ok_or(ReadError::Malformed { at_byte: moov_start_byte, what: "not an H.264 or H.265 track" })?;
    Ok(InitSegment {
        end_byte,
        codec,
        video_track_id: v.track_id,
        timescale: v.timescale,
        width: v.width,
        height: v.height,
        sample_entry: v.sample_entry,
        audio: audio.map(|a| AudioInit { track_id: a.track_id, timescale: a.timescale, sample_entry: a.sample_entry }),
    })
}

fn parse_prft(body: &[u8], at_byte: u64) -> Result<i64, ReadError> {
    let mut f = fields(body, at_byte);
    let version = f.u32()? >> 24;
    f.u32()?; // reference track
    let ntp = f.u64()?;
    if version == 1 {
        f.u64()?
    } else {
        u64::from(f.u32()?)
    };
    Ok(ntp_to_wall_us(ntp))
}

/// One `traf`: a track's samples in a fragment.
struct ParsedTraf {
    track_id: u32,
    base_decode: u64,
    data_offset_bytes: u64,
    samples: Vec<SampleEntry>,
}

impl ParsedTraf {
    fn payload_bytes(&self) -> u64 {
        self.samples.iter().map(|s| u64::from(s.size_bytes)).sum()
    }
}

struct ParsedMoof {
    sequence: u32,
    trafs: Vec<ParsedTraf>,
}

/// Track fragments per `moof`: KeepPeek writes one or two (video, audio).
const TRAFS_MAX: usize = 2;

fn parse_moof(moof: &[u8], moof_start_byte: u64) -> Result<ParsedMoof, ReadError> {
    let base = moof_start_byte + 8;
    let (mfhd, mfhd_at) = child(moof, base, b"mfhd")?;
    let mut f = fields(mfhd, mfhd_at);
    f.u32()?;
    let sequence = f.u32()?;
    let mut trafs = Vec::new();
    for c in children(moof, base) {
        let (fourcc, body, at) = c?;
        if &fourcc != b"traf" {
            continue;
        }
        if trafs.len() == TRAFS_MAX {
            return Err(ReadError::Malformed { at_byte: at, what: "more track fragments than tracks" });
        }
        trafs.push(parse_traf(body, at)?);
    }
    Ok(ParsedMoof { sequence, trafs })
}

fn parse_traf(traf: &[u8], traf_at: u64) -> Result<ParsedTraf, ReadError> {
    let (tfhd, tfhd_at) = child(traf, traf_at, b"tfhd")?;
    let mut f = fields(tfhd, tfhd_at);
    let flags = f.u32()? & 0x00ff_ffff;
    let track_id = f.u32()?;
    if flags & 0x1 != 0 {
        return Err(ReadError::Malformed { at_byte: tfhd_at, what: "explicit base data offset" });
    }
    if flags & 0x2 != 0 {
        f.u32()?;
    }
    let default_duration = if flags & 0x8 != 0 { f.u32()? } else { 0 };
    let default_size = if flags & 0x10 != 0 { f.u32()? } else { 0 };
    let default_flags = if flags & 0x20 != 0 { f.u32()? } else { SAMPLE_FLAGS_NON_SYNC };

    let (tfdt, tfdt_at) = child(traf, traf_at, b"tfdt")?;
    let mut f = fields(tfdt, tfdt_at);
    let base_decode = if f.u32()? >> 24 == 1 { f.u64()? } else { u64::from(f.u32()?) };

    let (trun, trun_at) = child(traf, traf_at, b"trun")?;
    let mut f = fields(trun, trun_at);
    let flags = f.u32()? & 0x00ff_ffff;
    let count = f.u32()? as usize;
    if count > limits::FRAGMENT_MAX_SAMPLES {
        return Err(ReadError::TooLarge {
            at_byte: trun_at,
            what: "trun sample count",
            max: limits::FRAGMENT_MAX_SAMPLES,
        });
    }
    if flags & 0x1 == 0 {
        return Err(ReadError::Malformed { at_byte: trun_at, what: "trun without data offset" });
    }
    let data_offset = f.u32()? as i32;
    if data_offset < 0 {
        return Err(ReadError::Malformed { at_byte: trun_at, what: "negative data offset" });
    }
    let first_flags = if flags & 0x4 != 0 { Some(f.u32()?) } else { None };
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let duration = if flags & 0x100 != 0 { f.u32()? } else { default_duration };
        let size_bytes = if flags & 0x200 != 0 { f.u32()? } else { default_size };
        let mut sample_flags = if flags & 0x400 != 0 { f.u32()? } else { default_flags };
        if i == 0
            && let Some(ff) = first_flags
        {
            sample_flags = ff;
        }
        if flags & 0x800 != 0 {
            f.u32()?; // composition offset: KeepPeek records no B-frame reordering in trun
        }
        // is_non_sync_sample is bit 16 of the sample flags.
        let is_key = sample_flags & 0x0001_0000 == 0;
        samples.push(SampleEntry { duration, size_bytes, is_key });
    }
    Ok(ParsedTraf { track_id, base_decode, data_offset_bytes: data_offset as u64, samples })
}

/// Rewrites the timing of a fragment header written by KeepPeek (`prft`, `moof`, as it is at
/// the start of a fragment), in place and at the same size: sets the `mfhd` sequence number
/// and moves the video track's `tfdt` (and the `prft`'s media time) and, if given, the audio
/// track's `tfdt` by a signed delta, each given with its track id. Export uses it to splice
/// fragments of several files into one timeline.
pub fn retime_fragment_header(
    head: &mut [u8],
    sequence: u32,
    video: (u32, i64),
    audio: Option<(u32, i64)>,
) -> Result<(), ReadError> {
    let bad = |what| ReadError::Malformed { at_byte: 0, what };
    let boxes = |buf: &[u8], from: usize, to: usize| -> Result<Vec<(usize, usize, [u8; 4])>, ReadError> {
        let mut out = Vec::new();
        let mut at = from;
        while at + 8 <= to {
            let size = u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
            if size < 8 || at + size > to {
                // The mdat header closes a fragment header: its size covers the payload.
                if &buf[at + 4..at + 8] == b"mdat" {
                    break;
                }
                return Err(bad("box size out of bounds in a fragment header"));
            }
            out.push((at, size, buf[at + 4..at + 8].try_into().expect("4 bytes")));
            at += size;
        }
        Ok(out)
    };
    let put32 = |buf: &mut [u8], at: usize, v: u32| buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    let shift64 = |buf: &mut [u8], at: usize, delta: i64| -> Result<(), ReadError> {
        let old = u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        let new = old.checked_add_signed(delta).ok_or(bad("decode time out of range after retiming"))?;
        buf[at..at + 8].copy_from_slice(&new.to_be_bytes());
        Ok(())
    };
    let len = head.len();
    for (at, size, fourcc) in boxes(head, 0, len)? {
        match &fourcc {
            b"prft" if size >= 32 && head[at + 8] == 1 => shift64(head, at + 24, video.1)?,
            b"moof" => {
                for (c_at, c_size, c_fourcc) in boxes(head, at + 8, at + size)? {
                    match &c_fourcc {
                        b"mfhd" if c_size >= 16 => put32(head, c_at + 12, sequence),
                        b"traf" => {
                            let mut track = None;
                            for (t_at, t_size, t_fourcc) in boxes(head, c_at + 8, c_at + c_size)? {
                                match &t_fourcc {
                                    b"tfhd" if t_size >= 16 => {
                                        track =
                                            Some(u32::from_be_bytes(head[t_at + 12..t_at + 16].try_into().expect("4")));
                                    }
                                    b"tfdt" if t_size >= 20 && head[t_at + 8] == 1 => {
                                        let delta = match track {
                                            Some(t) if t == video.0 => video.1,
                                            Some(t) if audio.is_some_and(|a| a.0 == t) => audio.expect("checked").1,
                                            _ => return Err(bad("tfdt of an unknown track")),
                                        };
                                        shift64(head, t_at + 12, delta)?;
                                    }
                                    b"tfdt" => return Err(bad("tfdt is not version 1")),
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Test helper: reads a whole in-memory segment.
#[cfg(test)]
pub(crate) fn read_all(bytes: &[u8]) -> Result<(InitSegment, Vec<FragmentIndex>), ReadError> {
    let (mut r, init) = SegmentReader::open(io::Cursor::new(bytes), bytes.len() as u64)?;
    let mut frags = Vec::new();
    while let Some(f) = r.next_fragment()? {
        frags.push(f);
    }
    Ok((init, frags))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::avc;
    use crate::media::fmp4::{AudioTrack, TrackRun, fragment_header_buffer, write_fragment_header, write_init_segment};

    /// A stand-in `mp4a` sample entry: the reader only carries it.
    const MP4A: [u8; 16] = [0, 0, 0, 16, b'm', b'p', b'4', b'a', 0, 0, 0, 0, 0, 0, 0, 1];

    fn segment_with(fragments: usize, with_audio: bool) -> Vec<u8> {
        let entry = avc::test_sample_entry();
        let mut init = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
        let audio_track = with_audio.then_some(AudioTrack { sample_entry: &MP4A, sample_rate: 48_000 });
        let n = write_init_segment(&mut init, &entry, 640, 360, audio_track).unwrap();
        let mut out = init[..n].to_vec();
        let mut head = fragment_header_buffer();
        for i in 0..fragments {
            let samples = [
                SampleEntry { duration: 6000, size_bytes: 10, is_key: true },
                SampleEntry { duration: 6000, size_bytes: 20, is_key: false },
            ];
            let audio = [SampleEntry { duration: 1024, size_bytes: 7, is_key: true }; 3];
            let video = TrackRun { base_decode: i as u64 * 12_000, samples: &samples };
            let audio_run = with_audio.then_some(TrackRun { base_decode: i as u64 * 3072, samples: &audio });
            let n = write_fragment_header(&mut head[..], i as u32 + 1, 1_000_000 * i as i64, video, audio_run).unwrap();
            out.extend_from_slice(&head[..n]);
            out.extend(std::iter::repeat_n(0xAB, 30));
            if with_audio {
                out.extend(std::iter::repeat_n(0xCD, 21));
            }
        }
        out
    }

    fn segment(fragments: usize) -> Vec<u8> {
        segment_with(fragments, false)
    }

    #[test]
    fn reads_back_an_audio_track_and_its_samples() {
        let bytes = segment_with(2, true);
        let (init, frags) = read_all(&bytes).unwrap();
        let audio = init.audio.expect("audio track");
        assert_eq!((audio.track_id, audio.timescale, &audio.sample_entry[..]), (2, 48_000, &MP4A[..]));
        assert_eq!(frags[1].audio_samples.len(), 3);
        assert_eq!(frags[1].audio_base_decode, 3072);
        assert_eq!(frags[1].samples.len(), 2);
        assert_eq!(frags[1].end_byte, bytes.len() as u64);
        // The video-only reader of the same bytes with the audio cut out must not accept them.
        let mut corrupt = bytes.clone();
        let last = corrupt.len() - 1;
        corrupt.truncate(last);
        assert!(read_all(&corrupt).is_err());
    }

    #[test]
    fn reads_back_what_the_writer_wrote() {
        let bytes = segment(3);
        let (init, frags) = read_all(&bytes).unwrap();
        assert_eq!((init.codec, init.width, init.height, init.timescale), (Codec::H264, 640, 360, 90_000));
        assert_eq!(init.sample_entry, avc::test_sample_entry());
        assert_eq!(frags.len(), 3);
        assert_eq!(frags[2].sequence, 3);
        assert_eq!(frags[2].base_decode_90k, 24_000);
        assert_eq!(frags[2].wall_us, Some(2_000_000));
        assert_eq!(frags[1].duration_90k(), 12_000);
        assert!(frags[0].samples[0].is_key && !frags[0].samples[1].is_key);
        assert_eq!(frags[2].end_byte, bytes.len() as u64);
        assert_eq!(frags[1].end_byte, frags[2].start_byte);
    }

    #[test]
    fn a_free_box_in_front_of_a_fragment_is_passed_over() {
        let bytes = segment(2);
        let (_, frags) = read_all(&bytes).unwrap();
        let at = frags[1].start_byte as usize;
        let mut padded = bytes[..at].to_vec();
        padded.extend_from_slice(&[0, 0, 0, 40, b'f', b'r', b'e', b'e']);
        padded.extend_from_slice(&[0; 32]);
        padded.extend_from_slice(&bytes[at..]);
        let (_, read) = read_all(&padded).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].start_byte, frags[1].start_byte, "the fragment starts at its padding");
        assert_eq!(
            (read[1].data_start_byte, read[1].end_byte),
            (frags[1].data_start_byte + 40, frags[1].end_byte + 40)
        );
        assert_eq!(read[1].samples, frags[1].samples);
        // An export retimes the header with its padding in front.
        let (from, to) = (read[1].start_byte as usize, read[1].data_start_byte as usize);
        let mut head = padded[from..to].to_vec();
        retime_fragment_header(&mut head, 7, (crate::media::fmp4::VIDEO_TRACK_ID, 90_000), None).unwrap();
        let mut retimed = padded.clone();
        retimed[from..to].copy_from_slice(&head);
        let (_, read) = read_all(&retimed).unwrap();
        assert_eq!((read[1].sequence, read[1].base_decode_90k), (7, frags[1].base_decode_90k + 90_000));
        // Padding alone at the end is a torn fragment; padding past a header's size is not ours.
        assert!(matches!(read_all(&padded[..at + 40]), Err(ReadError::Truncated { .. })));
        let mut huge = bytes[..at].to_vec();
        huge.extend_from_slice(&((limits::MOOF_MAX_BYTES + 8) as u32).to_be_bytes());
        huge.extend_from_slice(b"free");
        huge.extend(std::iter::repeat_n(0, limits::MOOF_MAX_BYTES));
        huge.extend_from_slice(&bytes[at..]);
        assert!(matches!(read_all(&huge), Err(ReadError::TooLarge { .. })));
    }

    #[test]
    fn every_truncation_is_an_error_or_a_shorter_file_never_a_panic() {
        let bytes = segment(2);
        let (_, whole) = read_all(&bytes).unwrap();
        for cut in 0..bytes.len() {
            match read_all(&bytes[..cut]) {
                Ok((_, frags)) => {
                    // A clean prefix: it ends exactly at a fragment boundary.
                    let end = frags.last().map(|f| f.end_byte);
                    assert!(frags.len() < 2 || cut == bytes.len());
                    if let Some(end) = end {
                        assert_eq!(end, cut as u64);
                        assert_eq!(frags[..], whole[..frags.len()]);
                    }
                }
                Err(ReadError::Truncated { .. }) => {}
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
    }

    #[test]
    fn a_corrupt_byte_anywhere_never_panics() {
        let bytes = segment_with(2, true);
        for i in 0..bytes.len() {
            for v in [0x00, 0xff, 0x01] {
                let mut b = bytes.clone();
                b[i] = v;
                let _ = read_all(&b);
            }
        }
    }

    #[test]
    fn a_64_bit_box_size_that_would_wrap_is_an_error() {
        // ftyp with largesize u64::MAX - 7: start + size wraps to the file's start.
        let mut b = vec![0, 0, 0, 1];
        b.extend_from_slice(b"ftyp");
        b.extend_from_slice(&(u64::MAX - 7).to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        assert!(matches!(read_all(&b), Err(ReadError::Truncated { .. })));
    }

    /// Every input the fuzzer ever kept or crashed on (`fuzz/`) reads without a panic.
    #[test]
    fn the_fuzz_corpus_reads_without_panicking() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let mut n = 0;
        for dir in ["corpus/fmp4_read", "crashes/fmp4_read"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
            for e in entries {
                let bytes = std::fs::read(e.unwrap().path()).unwrap();
                let _ = read_all(&bytes);
                n += 1;
            }
        }
        assert!(n > 0, "no fuzz corpus under fuzz/");
    }
}

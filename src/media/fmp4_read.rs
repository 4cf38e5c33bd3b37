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
    TooLarge {
        at_byte: u64,
        what: &'static str,
        max: usize,
    },
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
    pub samples: Vec<SampleEntry>,
}

impl FragmentIndex {
    /// Total duration of the fragment's samples, 90 kHz.
    pub fn duration_90k(&self) -> u64 {
        self.samples.iter().map(|s| u64::from(s.duration_90k)).sum()
    }
}

/// Sequential reader over one segment file.
pub struct SegmentReader<R> {
    r: R,
    len_bytes: u64,
    pos_byte: u64,
}

struct BoxHeader {
    fourcc: [u8; 4],
    start_byte: u64,
    header_bytes: u64,
    size_bytes: u64,
}

impl BoxHeader {
    fn end_byte(&self) -> u64 {
        self.start_byte + self.size_bytes
    }
    fn body_bytes(&self) -> u64 {
        self.size_bytes - self.header_bytes
    }
}

impl<R: Read + Seek> SegmentReader<R> {
    /// Reads the init segment of a file of `len_bytes` bytes.
    pub fn open(mut r: R, len_bytes: u64) -> Result<(Self, InitSegment), ReadError> {
        r.seek(SeekFrom::Start(0))?;
        let mut me = SegmentReader {
            r,
            len_bytes,
            pos_byte: 0,
        };
        loop {
            let Some(h) = me.header()? else {
                return Err(ReadError::Truncated {
                    at_byte: me.pos_byte,
                });
            };
            match &h.fourcc {
                b"ftyp" | b"free" | b"skip" => me.skip(&h)?,
                b"moov" => {
                    let body = me.body(&h, limits::INIT_SEGMENT_MAX_BYTES, "moov")?;
                    let init = parse_moov(&body, h.start_byte, h.end_byte())?;
                    return Ok((me, init));
                }
                _ => {
                    return Err(ReadError::Malformed {
                        at_byte: h.start_byte,
                        what: "expected ftyp then moov",
                    });
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

    /// Reads the next whole fragment. `Ok(None)` at a clean end of file; `Truncated` when the
    /// file ends inside a fragment.
    pub fn next_fragment(&mut self) -> Result<Option<FragmentIndex>, ReadError> {
        let start_byte = self.pos_byte;
        let Some(mut h) = self.header()? else {
            return Ok(None);
        };
        let mut wall_us = None;
        if &h.fourcc == b"prft" {
            let body = self.body(&h, 64, "prft")?;
            wall_us = Some(parse_prft(&body, h.start_byte)?);
            h = self.header()?.ok_or(ReadError::Truncated {
                at_byte: self.pos_byte,
            })?;
        }
        if &h.fourcc != b"moof" {
            return Err(ReadError::Malformed {
                at_byte: h.start_byte,
                what: "expected moof",
            });
        }
        let moof_start_byte = h.start_byte;
        let moof = self.body(&h, limits::MOOF_MAX_BYTES, "moof")?;
        let parsed = parse_moof(&moof, moof_start_byte)?;
        let mdat = self.header()?.ok_or(ReadError::Truncated {
            at_byte: self.pos_byte,
        })?;
        if &mdat.fourcc != b"mdat" {
            return Err(ReadError::Malformed {
                at_byte: mdat.start_byte,
                what: "expected mdat",
            });
        }
        if mdat.end_byte() > self.len_bytes {
            return Err(ReadError::Truncated {
                at_byte: mdat.start_byte,
            });
        }
        let data_start_byte = mdat.start_byte + mdat.header_bytes;
        let payload_bytes: u64 = parsed.samples.iter().map(|s| u64::from(s.size_bytes)).sum();
        if moof_start_byte + parsed.data_offset_bytes != data_start_byte {
            return Err(ReadError::Malformed {
                at_byte: moof_start_byte,
                what: "trun data offset does not point at the mdat payload",
            });
        }
        if payload_bytes != mdat.body_bytes() {
            return Err(ReadError::Malformed {
                at_byte: mdat.start_byte,
                what: "sample sizes do not add up to the mdat payload",
            });
        }
        self.skip(&mdat)?;
        Ok(Some(FragmentIndex {
            start_byte,
            end_byte: mdat.end_byte(),
            data_start_byte,
            sequence: parsed.sequence,
            base_decode_90k: parsed.base_decode_90k,
            wall_us,
            samples: parsed.samples,
        }))
    }

    /// Reads a box header at the current position; `None` at the end of the file.
    fn header(&mut self) -> Result<Option<BoxHeader>, ReadError> {
        let start_byte = self.pos_byte;
        if start_byte >= self.len_bytes {
            return Ok(None);
        }
        if self.len_bytes - start_byte < 8 {
            return Err(ReadError::Truncated {
                at_byte: start_byte,
            });
        }
        let mut head = [0u8; 16];
        self.r.seek(SeekFrom::Start(start_byte))?;
        self.r.read_exact(&mut head[..8])?;
        let mut size_bytes = u64::from(u32::from_be_bytes([head[0], head[1], head[2], head[3]]));
        let fourcc = [head[4], head[5], head[6], head[7]];
        let mut header_bytes = 8;
        if size_bytes == 1 {
            if self.len_bytes - start_byte < 16 {
                return Err(ReadError::Truncated {
                    at_byte: start_byte,
                });
            }
            self.r.read_exact(&mut head[8..16])?;
            size_bytes = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
            header_bytes = 16;
        }
        if size_bytes < header_bytes {
            // Size 0 ("to end of file") never appears in our files; smaller sizes are garbage.
            return Err(ReadError::Malformed {
                at_byte: start_byte,
                what: "box size too small",
            });
        }
        let h = BoxHeader {
            fourcc,
            start_byte,
            header_bytes,
            size_bytes,
        };
        if h.end_byte() > self.len_bytes && &fourcc != b"mdat" {
            return Err(ReadError::Truncated {
                at_byte: start_byte,
            });
        }
        self.pos_byte = start_byte + header_bytes;
        Ok(Some(h))
    }

    fn body(
        &mut self,
        h: &BoxHeader,
        max: usize,
        what: &'static str,
    ) -> Result<Vec<u8>, ReadError> {
        let n = h.body_bytes();
        if n > max as u64 {
            return Err(ReadError::TooLarge {
                at_byte: h.start_byte,
                what,
                max,
            });
        }
        let mut body = vec![0u8; n as usize];
        self.r.read_exact(&mut body)?;
        self.pos_byte = h.end_byte();
        Ok(body)
    }

    fn skip(&mut self, h: &BoxHeader) -> Result<(), ReadError> {
        if h.end_byte() > self.len_bytes {
            return Err(ReadError::Truncated {
                at_byte: h.start_byte,
            });
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
    Children {
        data,
        base_byte,
        pos: 0,
    }
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
fn child<'a>(
    data: &'a [u8],
    base_byte: u64,
    fourcc: &[u8; 4],
) -> Result<(&'a [u8], u64), ReadError> {
    for c in children(data, base_byte) {
        let (f, body, at) = c?;
        if &f == fourcc {
            return Ok((body, at));
        }
    }
    Err(ReadError::Malformed {
        at_byte: base_byte,
        what: "a required box is missing",
    })
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
            .ok_or(ReadError::Malformed {
                at_byte: self.at_byte,
                what: "box body cut short",
            })?;
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, ReadError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, ReadError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

fn fields(data: &[u8], at_byte: u64) -> Fields<'_> {
    Fields {
        data,
        pos: 0,
        at_byte,
    }
}

fn parse_moov(moov: &[u8], moov_start_byte: u64, end_byte: u64) -> Result<InitSegment, ReadError> {
    let base = moov_start_byte + 8;
    let (trak, trak_at) = child(moov, base, b"trak")?;
    let (tkhd, tkhd_at) = child(trak, trak_at, b"tkhd")?;
    let mut f = fields(tkhd, tkhd_at);
    let version = f.u32()? >> 24;
    f.take(if version == 1 { 32 } else { 20 })?; // times, track id, reserved, duration
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
        return Err(ReadError::Malformed {
            at_byte: mdhd_at,
            what: "zero timescale",
        });
    }
    let (minf, minf_at) = child(mdia, mdia_at, b"minf")?;
    let (stbl, stbl_at) = child(minf, minf_at, b"stbl")?;
    let (stsd, stsd_at) = child(stbl, stbl_at, b"stsd")?;
    let mut f = fields(stsd, stsd_at);
    f.u32()?;
    if f.u32()? == 0 {
        return Err(ReadError::Malformed {
            at_byte: stsd_at,
            what: "no sample entry",
        });
    }
    let entries = &stsd[8..];
    let entry_len = entries
        .get(0..4)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
        .filter(|&n| n >= 8 && n <= entries.len())
        .ok_or(ReadError::Malformed {
            at_byte: stsd_at,
            what: "sample entry out of bounds",
        })?;
    let sample_entry = entries[..entry_len].to_vec();
    let codec = Codec::from_sample_entry(&sample_entry).ok_or(ReadError::Malformed {
        at_byte: stsd_at,
        what: "not an H.264 or H.265 track",
    })?;
    Ok(InitSegment {
        end_byte,
        codec,
        timescale,
        width,
        height,
        sample_entry,
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

struct ParsedMoof {
    sequence: u32,
    base_decode_90k: u64,
    data_offset_bytes: u64,
    samples: Vec<SampleEntry>,
}

fn parse_moof(moof: &[u8], moof_start_byte: u64) -> Result<ParsedMoof, ReadError> {
    let base = moof_start_byte + 8;
    let (mfhd, mfhd_at) = child(moof, base, b"mfhd")?;
    let mut f = fields(mfhd, mfhd_at);
    f.u32()?;
    let sequence = f.u32()?;
    let (traf, traf_at) = child(moof, base, b"traf")?;

    let (tfhd, tfhd_at) = child(traf, traf_at, b"tfhd")?;
    let mut f = fields(tfhd, tfhd_at);
    let flags = f.u32()? & 0x00ff_ffff;
    f.u32()?; // track id: a segment has one track
    if flags & 0x1 != 0 {
        return Err(ReadError::Malformed {
            at_byte: tfhd_at,
            what: "explicit base data offset",
        });
    }
    if flags & 0x2 != 0 {
        f.u32()?;
    }
    let default_duration = if flags & 0x8 != 0 { f.u32()? } else { 0 };
    let default_size = if flags & 0x10 != 0 { f.u32()? } else { 0 };
    let default_flags = if flags & 0x20 != 0 {
        f.u32()?
    } else {
        SAMPLE_FLAGS_NON_SYNC
    };

    let (tfdt, tfdt_at) = child(traf, traf_at, b"tfdt")?;
    let mut f = fields(tfdt, tfdt_at);
    let base_decode_90k = if f.u32()? >> 24 == 1 {
        f.u64()?
    } else {
        u64::from(f.u32()?)
    };

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
        return Err(ReadError::Malformed {
            at_byte: trun_at,
            what: "trun without data offset",
        });
    }
    let data_offset = f.u32()? as i32;
    if data_offset < 0 {
        return Err(ReadError::Malformed {
            at_byte: trun_at,
            what: "negative data offset",
        });
    }
    let first_flags = if flags & 0x4 != 0 {
        Some(f.u32()?)
    } else {
        None
    };
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let duration_90k = if flags & 0x100 != 0 {
            f.u32()?
        } else {
            default_duration
        };
        let size_bytes = if flags & 0x200 != 0 {
            f.u32()?
        } else {
            default_size
        };
        let mut sample_flags = if flags & 0x400 != 0 {
            f.u32()?
        } else {
            default_flags
        };
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
        samples.push(SampleEntry {
            duration_90k,
            size_bytes,
            is_key,
        });
    }
    Ok(ParsedMoof {
        sequence,
        base_decode_90k,
        data_offset_bytes: data_offset as u64,
        samples,
    })
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
    use crate::media::fmp4::{fragment_header_buffer, write_fragment_header, write_init_segment};

    fn segment(fragments: usize) -> Vec<u8> {
        let entry = avc::test_sample_entry();
        let mut init = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
        let n = write_init_segment(&mut init, &entry, 640, 360).unwrap();
        let mut out = init[..n].to_vec();
        let mut head = fragment_header_buffer();
        for i in 0..fragments {
            let samples = [
                SampleEntry {
                    duration_90k: 6000,
                    size_bytes: 10,
                    is_key: true,
                },
                SampleEntry {
                    duration_90k: 6000,
                    size_bytes: 20,
                    is_key: false,
                },
            ];
            let n = write_fragment_header(
                &mut head[..],
                i as u32 + 1,
                i as u64 * 12_000,
                1_000_000 * i as i64,
                &samples,
            )
            .unwrap();
            out.extend_from_slice(&head[..n]);
            out.extend(std::iter::repeat_n(0xAB, 30));
        }
        out
    }

    #[test]
    fn reads_back_what_the_writer_wrote() {
        let bytes = segment(3);
        let (init, frags) = read_all(&bytes).unwrap();
        assert_eq!(
            (init.codec, init.width, init.height, init.timescale),
            (Codec::H264, 640, 360, 90_000)
        );
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
        let bytes = segment(2);
        for i in 0..bytes.len() {
            for v in [0x00, 0xff, 0x01] {
                let mut b = bytes.clone();
                b[i] = v;
                let _ = read_all(&b);
            }
        }
    }
}

//! The catalog's row encodings: fixed little-endian layouts behind a version byte, so a row
//! written by this firmware is read back exactly and a row from a future one is refused
//! rather than misread. Pure; every decoder is bounded by the row's length.

use crate::media::{AudioCodec, Codec};

/// Layout version written in every row's first byte.
const ROW_VERSION: u8 = 1;

/// A row that cannot be decoded: the catalog is from another firmware or damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("catalog {table} row is not readable: {why}")]
pub struct RowError {
    pub table: &'static str,
    pub why: &'static str,
}

/// One segment file: a part of one run of one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingRow {
    pub stream_id: u32,
    pub run_id: u64,
    pub codec: Codec,
    pub width: u16,
    pub height: u16,
    pub wall_start_us: i64,
    /// Wall end of the last indexed fragment (= start while there is none).
    pub wall_end_us: i64,
    pub media_duration_90k: u64,
    /// End of the last indexed fragment: the file's valid length.
    pub bytes: u64,
    /// Where the first fragment starts (the init segment's length), 0 until known.
    pub init_bytes: u64,
    pub frames: u64,
    pub fragments: u32,
    /// Still being written (or was, when the power went).
    pub open: bool,
    /// The codec of the file's audio track, if it has one (stored as its code, 0 for none).
    pub audio: Option<AudioCodec>,
    /// Path relative to the data directory.
    pub path: String,
}

/// One fragment (`moof` + `mdat`) of a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FragmentRow {
    pub wall_start_us: i64,
    pub wall_end_us: i64,
    /// Decode time of the first sample since the segment's start.
    pub media_start_90k: u64,
    pub duration_90k: u64,
    /// Where the fragment's first box starts.
    pub start_byte: u64,
    /// Just past its `mdat`.
    pub end_byte: u64,
    pub frames: u32,
    pub keyframes: u32,
}

struct Enc(Vec<u8>);

impl Enc {
    fn new() -> Self {
        Enc(vec![ROW_VERSION])
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(self, v: i64) -> Self {
        self.u64(v as u64)
    }
}

struct Dec<'a> {
    b: &'a [u8],
    table: &'static str,
}

impl<'a> Dec<'a> {
    fn new(b: &'a [u8], table: &'static str) -> Result<Self, RowError> {
        match b.split_first() {
            Some((&ROW_VERSION, rest)) => Ok(Dec { b: rest, table }),
            Some(_) => Err(RowError { table, why: "unknown layout version" }),
            None => Err(RowError { table, why: "empty" }),
        }
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], RowError> {
        if self.b.len() < N {
            return Err(RowError { table: self.table, why: "cut short" });
        }
        let (head, rest) = self.b.split_at(N);
        self.b = rest;
        Ok(head.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, RowError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, RowError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, RowError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, RowError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn i64(&mut self) -> Result<i64, RowError> {
        Ok(self.u64()? as i64)
    }
}

fn codec_code(c: Codec) -> u8 {
    match c {
        Codec::H264 => 1,
        Codec::H265 => 2,
    }
}

impl RecordingRow {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new()
            .u32(self.stream_id)
            .u64(self.run_id)
            .u8(codec_code(self.codec))
            .u16(self.width)
            .u16(self.height)
            .i64(self.wall_start_us)
            .i64(self.wall_end_us)
            .u64(self.media_duration_90k)
            .u64(self.bytes)
            .u64(self.init_bytes)
            .u64(self.frames)
            .u32(self.fragments)
            .u8(u8::from(self.open))
            .u8(self.audio.map_or(0, AudioCodec::code))
            .u16(self.path.len() as u16);
        e.0.extend_from_slice(self.path.as_bytes());
        e.0
    }

    /// The stream an encoded row belongs to, read without decoding the rest.
    pub fn stream_of(b: &[u8]) -> Result<u32, RowError> {
        Dec::new(b, "recordings")?.u32()
    }

    pub fn decode(b: &[u8]) -> Result<Self, RowError> {
        let table = "recordings";
        let mut d = Dec::new(b, table)?;
        let stream_id = d.u32()?;
        let run_id = d.u64()?;
        let codec = match d.u8()? {
            1 => Codec::H264,
            2 => Codec::H265,
            _ => {
                return Err(RowError { table, why: "unknown codec" });
            }
        };
        let row = RecordingRow {
            stream_id,
            run_id,
            codec,
            width: d.u16()?,
            height: d.u16()?,
            wall_start_us: d.i64()?,
            wall_end_us: d.i64()?,
            media_duration_90k: d.u64()?,
            bytes: d.u64()?,
            init_bytes: d.u64()?,
            frames: d.u64()?,
            fragments: d.u32()?,
            open: d.u8()? != 0,
            audio: match d.u8()? {
                0 => None,
                code => Some(AudioCodec::from_code(code).ok_or(RowError { table, why: "unknown audio codec" })?),
            },
            path: {
                let n = usize::from(d.u16()?);
                if d.b.len() != n {
                    return Err(RowError { table, why: "path length does not match" });
                }
                String::from_utf8(d.b.to_vec()).map_err(|_| RowError { table, why: "path is not UTF-8" })?
            },
        };
        Ok(row)
    }
}

impl FragmentRow {
    pub fn encode(&self) -> Vec<u8> {
        Enc::new()
            .i64(self.wall_start_us)
            .i64(self.wall_end_us)
            .u64(self.media_start_90k)
            .u64(self.duration_90k)
            .u64(self.start_byte)
            .u64(self.end_byte)
            .u32(self.frames)
            .u32(self.keyframes)
            .0
    }

    pub fn decode(b: &[u8]) -> Result<Self, RowError> {
        let mut d = Dec::new(b, "fragments")?;
        let row = FragmentRow {
            wall_start_us: d.i64()?,
            wall_end_us: d.i64()?,
            media_start_90k: d.u64()?,
            duration_90k: d.u64()?,
            start_byte: d.u64()?,
            end_byte: d.u64()?,
            frames: d.u32()?,
            keyframes: d.u32()?,
        };
        if !d.b.is_empty() {
            return Err(RowError { table: "fragments", why: "trailing bytes" });
        }
        Ok(row)
    }
}

impl RecordingRow {
    /// A recording as it opens: no fragment yet, its end at its start, no path until the
    /// catalog gives it an id ([`super::Catalog::begin_recording`]).
    pub fn opening(
        stream_id: u32,
        run_id: u64,
        video: (Codec, u16, u16),
        wall_start_us: i64,
        audio: Option<AudioCodec>,
    ) -> Self {
        let (codec, width, height) = video;
        RecordingRow {
            stream_id,
            run_id,
            codec,
            width,
            height,
            wall_start_us,
            wall_end_us: wall_start_us,
            media_duration_90k: 0,
            bytes: 0,
            init_bytes: 0,
            frames: 0,
            fragments: 0,
            open: true,
            audio,
            path: String::new(),
        }
    }

    /// An open, empty 640x360 H.264 recording of stream 1 at `path`, for tests.
    #[cfg(test)]
    pub(crate) fn for_test(path: &str) -> RecordingRow {
        RecordingRow { path: path.into(), ..RecordingRow::opening(1, 1, (Codec::H264, 640, 360), 0, None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording() -> RecordingRow {
        RecordingRow {
            stream_id: 3,
            run_id: 9,
            codec: Codec::H265,
            width: 1920,
            height: 1080,
            wall_start_us: 1_700_000_000_000_000,
            wall_end_us: 1_700_000_060_000_000,
            media_duration_90k: 60 * 90_000,
            bytes: 12345678,
            init_bytes: 700,
            frames: 900,
            fragments: 60,
            open: true,
            audio: Some(AudioCodec::Pcma),
            path: "recordings/front/main/0001700000000000000-7.mp4".into(),
        }
    }

    #[test]
    fn rows_round_trip() {
        let r = recording();
        assert_eq!(RecordingRow::decode(&r.encode()).unwrap(), r);
        // Rows from before G.711 and Opus stored 1 for "has audio": that reads as AAC, and a
        // code this build does not know is an error.
        let mut old = RecordingRow { audio: None, ..recording() }.encode();
        let at = old.iter().zip(r.encode()).position(|(a, b)| *a != b).expect("the audio byte differs");
        old[at] = 1;
        assert_eq!(RecordingRow::decode(&old).unwrap().audio, Some(AudioCodec::Aac));
        old[at] = 9;
        assert!(RecordingRow::decode(&old).is_err());
        let f = FragmentRow {
            wall_start_us: -5,
            wall_end_us: 7,
            media_start_90k: 1,
            duration_90k: 2,
            start_byte: 3,
            end_byte: 4,
            frames: 5,
            keyframes: 1,
        };
        assert_eq!(FragmentRow::decode(&f.encode()).unwrap(), f);
    }

    #[test]
    fn damaged_rows_are_errors_never_panics() {
        let enc = recording().encode();
        for cut in 0..enc.len() {
            assert!(RecordingRow::decode(&enc[..cut]).is_err());
        }
        let mut other_version = enc.clone();
        other_version[0] = 2;
        assert_eq!(RecordingRow::decode(&other_version).unwrap_err().why, "unknown layout version");
    }
}

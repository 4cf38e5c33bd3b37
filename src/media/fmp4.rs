//! Fragmented MP4 box writing: the init segment at a segment file's head and the header of
//! each fragment. Sans-IO: boxes are encoded through `embedded_io::Write` into a
//! caller-supplied fixed buffer, and an encoding that would overflow it fails with
//! [`BufferFull`] instead of growing.
//!
//! The `mp4` crate cannot write fragmented MP4 nor carry an `hvcC` through, so KeepPeek
//! writes the few boxes it needs itself. A segment file is:
//!
//! ```text
//! ftyp
//! moov
//!   mvhd
//!   trak
//!     tkhd
//!     mdia
//!       mdhd            timescale 90 000
//!       hdlr            vide
//!       minf
//!         vmhd
//!         dinf/dref/url
//!         stbl
//!           stsd        the camera's avc1/hvc1 sample entry, verbatim
//!           stts stsc stsz stco   (empty: samples live in fragments)
//!   mvex
//!     trex
//! then, once per fragment (one GOP, or a time-bounded part of a long one):
//! free                  what the room kept for the header (written after the samples,
//!                       which go to disk as they arrive) did not need
//! prft                  wall time (NTP) of the fragment's first sample: crash recovery
//!                       reads it back to place a fragment the catalog never saw
//! moof
//!   mfhd                sequence number
//!   traf
//!     tfhd              default-base-is-moof
//!     tfdt              decode time of the first sample (v1, 64-bit)
//!     trun              per sample: duration, size, flags
//! mdat                  the samples' bytes, in order
//! ```

use embedded_io::Write;

use crate::limits;

/// The video track of a segment file.
pub const VIDEO_TRACK_ID: u32 = 1;
/// The audio track of a segment file, when the camera sends audio.
pub const AUDIO_TRACK_ID: u32 = 2;

/// Media timescale of every track KeepPeek writes.
pub const TIMESCALE_90K: u32 = 90_000;

/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET_S: i64 = 2_208_988_800;

/// `trun` sample flags of a sync sample: depends on no other sample.
pub const SAMPLE_FLAGS_SYNC: u32 = 0x0200_0000;
/// `trun` sample flags of a non-sync sample: depends on others, not a sync sample.
pub const SAMPLE_FLAGS_NON_SYNC: u32 = 0x0101_0000;

/// `tfhd` flag: offsets are relative to the `moof`.
const TFHD_DEFAULT_BASE_IS_MOOF: u32 = 0x02_0000;
/// `trun` flags: data offset, and per-sample duration, size and flags present.
const TRUN_FLAGS: u32 = 0x000001 | 0x000100 | 0x000200 | 0x000400;

/// The fixed buffer given to an encoder was too small for what it had to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fMP4 box does not fit its {capacity_bytes}-byte buffer")]
pub struct BufferFull {
    pub capacity_bytes: usize,
}

impl embedded_io::Error for BufferFull {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::WriteZero
    }
}

/// One sample of a fragment, as described in its `trun`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleEntry {
    /// In the track's timescale (90 kHz for video, the sample rate for audio).
    pub duration: u32,
    pub size_bytes: u32,
    pub is_key: bool,
}

/// The box writer's cursor: `embedded_io::Write` over the caller's slice, which fails when the
/// slice is full and never grows, plus where it is, so a box's size can be patched when the
/// box closes.
struct BoxBuf<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl embedded_io::ErrorType for BoxBuf<'_> {
    type Error = BufferFull;
}

impl Write for BoxBuf<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, BufferFull> {
        let n = self.rest().write(bytes).map_err(|_| self.full())?;
        self.pos += n;
        Ok(n)
    }

    /// The slice's own `write_all`: a field that does not fit is not written in part.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), BufferFull> {
        self.rest().write_all(bytes).map_err(|_| self.full())?;
        self.pos += bytes.len();
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BufferFull> {
        Ok(())
    }
}

impl<'a> BoxBuf<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        BoxBuf { buf, pos: 0 }
    }

    /// The unwritten rest of the buffer; `pos` never passes its end.
    fn rest(&mut self) -> &mut [u8] {
        &mut self.buf[self.pos..]
    }

    /// The one place the slice's "full" becomes the error callers see.
    fn full(&self) -> BufferFull {
        BufferFull { capacity_bytes: self.buf.len() }
    }

    /// Opens a box: writes a placeholder size and the type; returns where it starts.
    fn open(&mut self, fourcc: &[u8; 4]) -> Result<usize, BufferFull> {
        let start = self.pos;
        self.u32(0)?;
        self.write_all(fourcc)?;
        Ok(start)
    }

    /// Opens a full box (version and flags).
    fn open_full(&mut self, fourcc: &[u8; 4], version: u8, flags: u32) -> Result<usize, BufferFull> {
        let start = self.open(fourcc)?;
        self.u32((u32::from(version) << 24) | (flags & 0x00ff_ffff))?;
        Ok(start)
    }

    fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Closes the box opened at `start` by patching its size.
    fn close(&mut self, start: usize) {
        self.patch_u32(start, (self.pos - start) as u32);
    }

    /// The unity transformation matrix of `mvhd` and `tkhd`.
    fn matrix(&mut self) -> Result<(), BufferFull> {
        for v in [0x0001_0000u32, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] {
            self.u32(v)?;
        }
        Ok(())
    }
}

/// The big-endian fields boxes are made of, on any `embedded_io` writer.
trait WriteBe: Write {
    fn u16(&mut self, v: u16) -> Result<(), Self::Error> {
        self.write_all(&v.to_be_bytes())
    }
    fn u32(&mut self, v: u32) -> Result<(), Self::Error> {
        self.write_all(&v.to_be_bytes())
    }
    fn u64(&mut self, v: u64) -> Result<(), Self::Error> {
        self.write_all(&v.to_be_bytes())
    }
    fn zeros(&mut self, n: usize) -> Result<(), Self::Error> {
        for _ in 0..n {
            self.write_all(&[0])?;
        }
        Ok(())
    }
}

impl<W: Write + ?Sized> WriteBe for W {}

/// The audio track of a segment, if it has one.
#[derive(Clone, Copy, Debug)]
pub struct AudioTrack<'a> {
    /// The `mp4a` sample entry.
    pub sample_entry: &'a [u8],
    /// Samples per second: the track's timescale.
    pub sample_rate: u32,
}

/// Writes the init segment (`ftyp` + `moov`) for the video track and, if given, an audio
/// track into `buf`; returns its length.
pub fn write_init_segment(
    buf: &mut [u8],
    sample_entry: &[u8],
    width: u16,
    height: u16,
    audio: Option<AudioTrack<'_>>,
) -> Result<usize, BufferFull> {
    let mut b = BoxBuf::new(buf);
    let ftyp = b.open(b"ftyp")?;
    b.write_all(b"iso5")?;
    b.u32(0x200)?;
    for brand in [b"iso5", b"iso6", b"mp41"] {
        b.write_all(brand)?;
    }
    b.close(ftyp);

    let moov = b.open(b"moov")?;
    let mvhd = b.open_full(b"mvhd", 0, 0)?;
    b.u32(0)?; // creation time
    b.u32(0)?; // modification time
    b.u32(1000)?; // movie timescale
    b.u32(0)?; // duration: unknown, fragments carry it
    b.u32(0x0001_0000)?; // rate 1.0
    b.u16(0x0100)?; // volume 1.0
    b.zeros(10)?;
    b.matrix()?;
    b.zeros(24)?;
    b.u32(AUDIO_TRACK_ID + 1)?; // next track id
    b.close(mvhd);

    let video = Track { id: VIDEO_TRACK_ID, timescale: TIMESCALE_90K, width, height, sample_entry };
    write_trak(&mut b, &video)?;
    if let Some(a) = audio {
        let track =
            Track { id: AUDIO_TRACK_ID, timescale: a.sample_rate, width: 0, height: 0, sample_entry: a.sample_entry };
        write_trak(&mut b, &track)?;
    }

    let mvex = b.open(b"mvex")?;
    for id in std::iter::once(VIDEO_TRACK_ID).chain(audio.map(|_| AUDIO_TRACK_ID)) {
        let trex = b.open_full(b"trex", 0, 0)?;
        b.u32(id)?;
        b.u32(1)?; // sample description index
        b.u32(0)?;
        b.u32(0)?;
        b.u32(0)?;
        b.close(trex);
    }
    b.close(mvex);
    b.close(moov);
    Ok(b.pos)
}

struct Track<'a> {
    id: u32,
    timescale: u32,
    /// Zero for audio.
    width: u16,
    height: u16,
    sample_entry: &'a [u8],
}

fn write_trak(b: &mut BoxBuf<'_>, t: &Track<'_>) -> Result<(), BufferFull> {
    let is_video = t.id == VIDEO_TRACK_ID;
    let trak = b.open(b"trak")?;
    let tkhd = b.open_full(b"tkhd", 0, 0x3)?; // enabled, in movie
    b.u32(0)?;
    b.u32(0)?;
    b.u32(t.id)?;
    b.u32(0)?;
    b.u32(0)?; // duration
    b.zeros(8)?;
    b.u16(0)?; // layer
    b.u16(if is_video { 0 } else { 1 })?; // alternate group
    b.u16(if is_video { 0 } else { 0x0100 })?; // volume
    b.u16(0)?;
    b.matrix()?;
    b.u32(u32::from(t.width) << 16)?;
    b.u32(u32::from(t.height) << 16)?;
    b.close(tkhd);

    let mdia = b.open(b"mdia")?;
    let mdhd = b.open_full(b"mdhd", 0, 0)?;
    b.u32(0)?;
    b.u32(0)?;
    b.u32(t.timescale)?;
    b.u32(0)?;
    b.u16(0x55c4)?; // language "und"
    b.u16(0)?;
    b.close(mdhd);
    let hdlr = b.open_full(b"hdlr", 0, 0)?;
    b.u32(0)?;
    b.write_all(if is_video { b"vide" } else { b"soun" })?;
    b.zeros(12)?;
    b.write_all(if is_video { b"KeepPeek video\0".as_slice() } else { b"KeepPeek audio\0".as_slice() })?;
    b.close(hdlr);

    let minf = b.open(b"minf")?;
    if is_video {
        let vmhd = b.open_full(b"vmhd", 0, 1)?;
        b.zeros(8)?;
        b.close(vmhd);
    } else {
        let smhd = b.open_full(b"smhd", 0, 0)?;
        b.zeros(4)?; // balance, reserved
        b.close(smhd);
    }
    let dinf = b.open(b"dinf")?;
    let dref = b.open_full(b"dref", 0, 0)?;
    b.u32(1)?;
    let url = b.open_full(b"url ", 0, 1)?; // media is in this file
    b.close(url);
    b.close(dref);
    b.close(dinf);
    let stbl = b.open(b"stbl")?;
    let stsd = b.open_full(b"stsd", 0, 0)?;
    b.u32(1)?;
    b.write_all(t.sample_entry)?;
    b.close(stsd);
    for fourcc in [b"stts", b"stsc", b"stco"] {
        let empty = b.open_full(fourcc, 0, 0)?;
        b.u32(0)?;
        b.close(empty);
    }
    let stsz = b.open_full(b"stsz", 0, 0)?;
    b.u32(0)?;
    b.u32(0)?;
    b.close(stsz);
    b.close(stbl);
    b.close(minf);
    b.close(mdia);
    b.close(trak);
    Ok(())
}

/// Converts UTC µs since the Unix epoch to a 64-bit NTP timestamp.
pub fn wall_us_to_ntp(wall_us: i64) -> u64 {
    let secs = wall_us.div_euclid(1_000_000) + NTP_UNIX_OFFSET_S;
    let frac_us = wall_us.rem_euclid(1_000_000) as u64;
    ((secs as u64 & 0xffff_ffff) << 32) | ((frac_us << 32) / 1_000_000)
}

/// Converts a 64-bit NTP timestamp to UTC µs since the Unix epoch. NTP seconds wrap in
/// 2036; as RFC 4330 suggests, a value with the top bit clear is taken to be after the wrap,
/// which covers 1968 to 2104.
pub fn ntp_to_wall_us(ntp: u64) -> i64 {
    let mut ntp_secs = (ntp >> 32) as i64;
    if ntp_secs & 0x8000_0000 == 0 {
        ntp_secs += 1 << 32;
    }
    let secs = ntp_secs - NTP_UNIX_OFFSET_S;
    let frac_us = (((ntp & 0xffff_ffff) * 1_000_000 + (1 << 31)) >> 32) as i64;
    secs * 1_000_000 + frac_us
}

/// One track's samples in a fragment.
#[derive(Clone, Copy, Debug)]
pub struct TrackRun<'a> {
    /// Decode time of the first sample since the segment's start, in the track's timescale.
    pub base_decode: u64,
    pub samples: &'a [SampleEntry],
}

impl TrackRun<'_> {
    fn payload_bytes(&self) -> u64 {
        self.samples.iter().map(|s| u64::from(s.size_bytes)).sum()
    }
}

/// Writes everything of a fragment that precedes the sample bytes: `prft`, `moof` and the
/// `mdat` header. Returns its length; the caller appends the video samples' bytes, then the
/// audio samples' bytes, in order.
///
/// `wall_us` is the wall time of the first video sample.
pub fn write_fragment_header(
    buf: &mut [u8],
    sequence: u32,
    wall_us: i64,
    video: TrackRun<'_>,
    audio: Option<TrackRun<'_>>,
) -> Result<usize, BufferFull> {
    let mut b = BoxBuf::new(buf);
    let prft = b.open_full(b"prft", 1, 0)?;
    b.u32(VIDEO_TRACK_ID)?;
    b.u64(wall_us_to_ntp(wall_us))?;
    b.u64(video.base_decode)?;
    b.close(prft);

    let moof = b.open(b"moof")?;
    let mfhd = b.open_full(b"mfhd", 0, 0)?;
    b.u32(sequence)?;
    b.close(mfhd);
    let video_offset_at = write_traf(&mut b, VIDEO_TRACK_ID, &video)?;
    let audio_offset_at = audio.as_ref().map(|a| write_traf(&mut b, AUDIO_TRACK_ID, a)).transpose()?;
    b.close(moof);

    let video_bytes = video.payload_bytes();
    let mdat_payload_bytes = video_bytes + audio.as_ref().map_or(0, TrackRun::payload_bytes);
    // A fragment's bytes are bounded by FRAGMENT_MAX_BYTES, so 32-bit sizes suffice.
    debug_assert!(mdat_payload_bytes + 8 <= u64::from(u32::MAX));
    let data_offset = (b.pos - moof + 8) as u32;
    b.patch_u32(video_offset_at, data_offset);
    if let Some(at) = audio_offset_at {
        b.patch_u32(at, data_offset + video_bytes as u32);
    }
    b.u32((mdat_payload_bytes + 8) as u32)?;
    b.write_all(b"mdat")?;
    Ok(b.pos)
}

/// Bytes of a fragment header ([`write_fragment_header`]) with `video` samples and, when the
/// segment has an audio track, `audio` samples: what a writer keeps in front of samples it
/// writes before their header.
pub const fn fragment_header_bytes(video: usize, audio: Option<usize>) -> usize {
    // traf: its header, tfhd (track id), tfdt (v1), trun (count, data offset), 12 B a sample.
    const TRAF_BYTES: usize = 8 + 16 + 20 + 20;
    let audio_bytes = match audio {
        Some(n) => TRAF_BYTES + 12 * n,
        None => 0,
    };
    // prft (v1), the moof's header, mfhd, the video traf, the audio traf, the mdat's header.
    32 + 8 + 16 + TRAF_BYTES + 12 * video + audio_bytes + 8
}

/// Writes one `traf`; returns where its `trun` data offset is, to be patched.
fn write_traf(b: &mut BoxBuf<'_>, track_id: u32, run: &TrackRun<'_>) -> Result<usize, BufferFull> {
    let traf = b.open(b"traf")?;
    let tfhd = b.open_full(b"tfhd", 0, TFHD_DEFAULT_BASE_IS_MOOF)?;
    b.u32(track_id)?;
    b.close(tfhd);
    let tfdt = b.open_full(b"tfdt", 1, 0)?;
    b.u64(run.base_decode)?;
    b.close(tfdt);
    let trun = b.open_full(b"trun", 0, TRUN_FLAGS)?;
    b.u32(run.samples.len() as u32)?;
    let data_offset_at = b.pos;
    b.u32(0)?; // data offset, patched by the caller
    for s in run.samples {
        b.u32(s.duration)?;
        b.u32(s.size_bytes)?;
        b.u32(if s.is_key { SAMPLE_FLAGS_SYNC } else { SAMPLE_FLAGS_NON_SYNC })?;
    }
    b.close(trun);
    b.close(traf);
    Ok(data_offset_at)
}

/// A fixed buffer sized for any fragment header KeepPeek writes.
pub fn fragment_header_buffer() -> Box<[u8; limits::MOOF_MAX_BYTES]> {
    Box::new([0u8; limits::MOOF_MAX_BYTES])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntp_round_trips_wall_time_to_the_microsecond() {
        // 1970, 2023, after the NTP wrap of 2036, and 2096.
        for wall_us in [0, 1, 999_999, 1_700_000_000_123_456, 2_085_978_496_000_001, 4_000_000_000_000_001] {
            assert_eq!(ntp_to_wall_us(wall_us_to_ntp(wall_us)), wall_us);
        }
    }

    #[test]
    fn fragment_header_points_trun_at_the_mdat_payload() {
        let mut buf = fragment_header_buffer();
        let samples = [
            SampleEntry { duration: 6000, size_bytes: 100, is_key: true },
            SampleEntry { duration: 6000, size_bytes: 50, is_key: false },
        ];
        let video = TrackRun { base_decode: 12_000, samples: &samples };
        let n = write_fragment_header(&mut buf[..], 7, 1_700_000_000_000_000, video, None).expect("fits");
        let head = &buf[..n];
        assert_eq!(&head[n - 4..], b"mdat");
        let mdat_size = u32::from_be_bytes(head[n - 8..n - 4].try_into().unwrap());
        assert_eq!(mdat_size, 8 + 150);
        let prft_len = u32::from_be_bytes(head[0..4].try_into().unwrap()) as usize;
        assert_eq!(&head[prft_len + 4..prft_len + 8], b"moof");
        // data offset is relative to the moof and lands just past the mdat header.
        let pos = head.windows(4).position(|w| w == b"trun").unwrap();
        let data_offset = u32::from_be_bytes(head[pos + 12..pos + 16].try_into().unwrap());
        assert_eq!(data_offset as usize, n - prft_len);
    }

    #[test]
    fn the_header_length_is_known_before_the_samples() {
        let mut buf = fragment_header_buffer();
        for (v, a) in [
            (1, None),
            (30, None),
            (7, Some(0)),
            (60, Some(94)),
            (limits::FRAGMENT_MAX_SAMPLES, Some(limits::FRAGMENT_MAX_AUDIO_SAMPLES)),
        ] {
            let video = [SampleEntry { duration: 6000, size_bytes: 100, is_key: false }; limits::FRAGMENT_MAX_SAMPLES];
            let audio =
                [SampleEntry { duration: 1024, size_bytes: 9, is_key: true }; limits::FRAGMENT_MAX_AUDIO_SAMPLES];
            let video_run = TrackRun { base_decode: 0, samples: &video[..v] };
            let audio_run = a.map(|a| TrackRun { base_decode: 0, samples: &audio[..a] });
            let n = write_fragment_header(&mut buf[..], 1, 0, video_run, audio_run).expect("fits");
            assert_eq!(n, fragment_header_bytes(v, a), "{v} video and {a:?} audio samples");
        }
        let most = fragment_header_bytes(limits::FRAGMENT_MAX_SAMPLES, Some(limits::FRAGMENT_MAX_AUDIO_SAMPLES));
        assert!(most + 8 <= limits::MOOF_MAX_BYTES, "the largest header and a free box fit the buffer");
    }

    #[test]
    fn a_full_buffer_is_an_error_not_a_panic() {
        let mut small = [0u8; 64];
        let samples = [SampleEntry { duration: 1, size_bytes: 1, is_key: true }; 8];
        let video = TrackRun { base_decode: 0, samples: &samples };
        assert_eq!(write_fragment_header(&mut small, 1, 0, video, None), Err(BufferFull { capacity_bytes: 64 }));
        assert!(write_init_segment(&mut small, &[0; 100], 640, 360, None).is_err());
    }

    #[test]
    fn a_buffer_one_byte_short_is_full_and_an_exact_one_fits() {
        let samples = [SampleEntry { duration: 3000, size_bytes: 1, is_key: true }; 3];
        let video = TrackRun { base_decode: 0, samples: &samples };
        let mut buf = fragment_header_buffer();
        let n = write_fragment_header(&mut buf[..], 1, 0, video, None).expect("fits");
        assert_eq!(write_fragment_header(&mut buf[..n], 1, 0, video, None), Ok(n));
        let short = write_fragment_header(&mut buf[..n - 1], 1, 0, video, None);
        assert_eq!(short, Err(BufferFull { capacity_bytes: n - 1 }));

        let entry = [0u8; 100];
        let mut buf = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
        let n = write_init_segment(&mut buf, &entry, 640, 360, None).expect("fits");
        assert_eq!(write_init_segment(&mut buf[..n], &entry, 640, 360, None), Ok(n));
        let short = write_init_segment(&mut buf[..n - 1], &entry, 640, 360, None);
        assert_eq!(short, Err(BufferFull { capacity_bytes: n - 1 }));
    }

    #[test]
    fn a_full_cursor_refuses_a_byte_but_not_an_empty_write() {
        let mut buf = [0u8; 6];
        let mut b = BoxBuf::new(&mut buf);
        b.u32(0x0102_0304).expect("fits");
        assert_eq!(b.u32(5), Err(BufferFull { capacity_bytes: 6 }), "a field is not written in part");
        b.u16(0x0506).expect("fits");
        assert_eq!(b.write_all(&[7]), Err(BufferFull { capacity_bytes: 6 }));
        assert_eq!(b.write(&[7]), Err(BufferFull { capacity_bytes: 6 }));
        assert_eq!(b.write_all(&[]), Ok(()));
        assert_eq!(b.pos, 6);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn the_largest_sample_entry_fits_the_init_buffer() {
        let mut buf = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
        let entry = vec![0u8; limits::SAMPLE_ENTRY_MAX_BYTES];
        let audio = AudioTrack { sample_entry: &entry, sample_rate: 48_000 };
        assert!(write_init_segment(&mut buf, &entry, 3840, 2160, Some(audio)).is_ok());
    }

    #[test]
    fn the_largest_fragment_fits_the_header_buffer() {
        let mut buf = fragment_header_buffer();
        let samples = vec![SampleEntry { duration: 1, size_bytes: 1, is_key: false }; limits::FRAGMENT_MAX_SAMPLES];
        let audio =
            vec![SampleEntry { duration: 1024, size_bytes: 1, is_key: true }; limits::FRAGMENT_MAX_AUDIO_SAMPLES];
        let video = TrackRun { base_decode: u64::MAX, samples: &samples };
        let audio = TrackRun { base_decode: u64::MAX, samples: &audio };
        assert!(write_fragment_header(&mut buf[..], u32::MAX, i64::MAX / 2, video, Some(audio)).is_ok());
    }
}

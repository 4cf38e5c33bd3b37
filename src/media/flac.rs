//! G.711 as FLAC, for exports that browsers and phones play.
//!
//! Browsers do not play G.711 from an MP4 file, and MP4 has no entry for it they read; they
//! do play FLAC in MP4 (`fLaC` with its `dfLa`, as the FLAC-in-ISOBMFF mapping says). An
//! export of a G.711 camera gives each G.711 sample (one RTP packet's samples) as one FLAC
//! frame of the same samples, decoded to 16 bits.
//!
//! The frames are VERBATIM: the samples as they are, no prediction. Written here, not with
//! an encoder crate, because an export is served by byte ranges with every byte's place
//! known when it is planned (a download resumes, a player seeks): a compressing encoder's
//! sizes are known only once it has run over the whole range. A verbatim frame's size
//! follows from its sample count and position alone, it is ~50 lines of framing, and every
//! FLAC decoder reads it. It costs twice G.711's bytes (128 kbit/s for 8 kHz mono), small
//! beside the video.

use super::AudioCodec;

/// The 16-bit sample of a G.711 µ-law byte (ITU-T G.711; the values ffmpeg's decoder gives).
pub fn ulaw_to_i16(byte: u8) -> i16 {
    let u = !byte;
    let magnitude = ((i32::from(u & 0x0f) << 3) + 0x84) << ((u >> 4) & 0x07);
    (if u & 0x80 != 0 { 0x84 - magnitude } else { magnitude - 0x84 }) as i16
}

/// The 16-bit sample of a G.711 A-law byte.
pub fn alaw_to_i16(byte: u8) -> i16 {
    let a = byte ^ 0x55;
    let quant = i32::from(a & 0x0f);
    let segment = (a >> 4) & 0x07;
    let magnitude = if segment == 0 { (2 * quant + 1) << 3 } else { (2 * quant + 33) << (segment + 2) };
    (if a & 0x80 != 0 { magnitude } else { -magnitude }) as i16
}

/// The decoder of a G.711 codec's bytes.
pub fn g711_decoder(codec: AudioCodec) -> Option<fn(u8) -> i16> {
    match codec {
        AudioCodec::Pcmu => Some(ulaw_to_i16),
        AudioCodec::Pcma => Some(alaw_to_i16),
        _ => None,
    }
}

/// The largest block (samples a channel) a frame here holds: the largest G.711 frame the
/// recorder keeps ([`crate::limits::AUDIO_FRAME_MAX_BYTES`] bytes, one sample each).
pub const MAX_BLOCK: u32 = crate::limits::AUDIO_FRAME_MAX_BYTES as u32;

/// The `fLaC` sample entry with its `dfLa` (one STREAMINFO block) for 16-bit audio of
/// `channels` at `sample_rate`.
pub fn sample_entry(channels: u16, sample_rate: u32) -> Vec<u8> {
    let mut e = Vec::with_capacity(86);
    let be16 = |e: &mut Vec<u8>, v: u16| e.extend_from_slice(&v.to_be_bytes());
    e.extend_from_slice(&[0, 0, 0, 0]);
    e.extend_from_slice(b"fLaC");
    e.extend_from_slice(&[0; 6]);
    be16(&mut e, 1); // data_reference_index
    e.extend_from_slice(&[0; 8]);
    be16(&mut e, channels);
    be16(&mut e, 16);
    e.extend_from_slice(&[0; 4]);
    e.extend_from_slice(&(sample_rate << 16).to_be_bytes());
    let dfla = e.len();
    e.extend_from_slice(&[0, 0, 0, 0]);
    e.extend_from_slice(b"dfLa");
    e.extend_from_slice(&[0; 4]); // version, flags
    // The last metadata block (bit 7), STREAMINFO (type 0), 34 bytes.
    e.extend_from_slice(&[0x80, 0, 0, 34]);
    be16(&mut e, 16); // minimum block size (the last frame may be shorter)
    be16(&mut e, MAX_BLOCK as u16);
    e.extend_from_slice(&[0; 6]); // frame sizes: unknown
    // Sample rate (20 bits), channels - 1 (3), bits - 1 (5), total samples (36): unknown.
    let packed: u64 = (u64::from(sample_rate) << 44) | (u64::from(channels - 1) << 41) | (15 << 36);
    e.extend_from_slice(&packed.to_be_bytes());
    e.extend_from_slice(&[0; 16]); // MD5 of the samples: not computed
    let len = (e.len() - dfla) as u32;
    e[dfla..dfla + 4].copy_from_slice(&len.to_be_bytes());
    let len = e.len() as u32;
    e[0..4].copy_from_slice(&len.to_be_bytes());
    e
}

/// Bytes of the UTF-8-like coding FLAC gives a frame's first sample number.
fn coded_len(n: u64) -> usize {
    match n {
        0..0x80 => 1,
        0x80..0x800 => 2,
        0x800..0x1_0000 => 3,
        0x1_0000..0x20_0000 => 4,
        0x20_0000..0x400_0000 => 5,
        0x400_0000..0x8000_0000 => 6,
        _ => 7,
    }
}

/// Bytes of the verbatim frame of `samples` a channel (of `channels`) starting at sample
/// `first_sample` of the stream.
pub fn frame_len(samples: u32, channels: u16, first_sample: u64) -> usize {
    // Sync and flags, block size and rate, channels and bits, the sample number, the block
    // size (16 bits), CRC-8; per channel a subframe header and its samples; CRC-16.
    4 + coded_len(first_sample) + 2 + 1 + usize::from(channels) * (1 + 2 * samples as usize) + 2
}

/// Appends the verbatim FLAC frame of `g711` (interleaved when stereo; decoded by `decode`)
/// starting at sample `first_sample` of the stream to `out`. `g711` holds at most
/// [`MAX_BLOCK`] samples a channel and a whole number of them.
pub fn write_frame(out: &mut Vec<u8>, g711: &[u8], channels: u16, decode: fn(u8) -> i16, first_sample: u64) {
    let channels_n = usize::from(channels.max(1));
    let samples = (g711.len() / channels_n).clamp(1, MAX_BLOCK as usize);
    let start = out.len();
    // Variable block size (the G.711 frames' lengths are the camera's), so the header
    // carries the first sample's number.
    out.extend_from_slice(&[0xff, 0xf9]);
    // Block size from a 16-bit field after the header (0b0111); the rate from STREAMINFO.
    out.push(0x70);
    // Channels independent (mono 0, stereo 1), 16 bits (0b100).
    out.push(((channels_n as u8 - 1) << 4) | 0b1000);
    let n = first_sample & ((1 << 36) - 1);
    let len = coded_len(n);
    if len == 1 {
        out.push(n as u8);
    } else {
        let lead = (0xff00u16 >> len) as u8;
        out.push(lead | (n >> (6 * (len - 1))) as u8);
        for i in (0..len - 1).rev() {
            out.push(0x80 | ((n >> (6 * i)) & 0x3f) as u8);
        }
    }
    out.extend_from_slice(&((samples - 1) as u16).to_be_bytes());
    out.push(CRC8.checksum(&out[start..]));
    for ch in 0..channels_n {
        out.push(0b0000_0010); // a VERBATIM subframe, no wasted bits
        for i in 0..samples {
            let byte = g711.get(i * channels_n + ch).copied().unwrap_or(0xff);
            out.extend_from_slice(&decode(byte).to_be_bytes());
        }
    }
    let crc = CRC16.checksum(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// FLAC's frame header check: CRC-8, polynomial x^8 + x^2 + x + 1, from zero.
const CRC8: crc::Crc<u8> = crc::Crc::<u8>::new(&crc::CRC_8_SMBUS);
/// FLAC's frame check: CRC-16, polynomial x^16 + x^15 + x^2 + 1, from zero.
const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_UMTS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g711_decodes_as_the_standard_says() {
        assert_eq!((ulaw_to_i16(0xff), ulaw_to_i16(0x7f)), (0, 0));
        assert_eq!((ulaw_to_i16(0x00), ulaw_to_i16(0x80)), (-32124, 32124));
        assert_eq!((alaw_to_i16(0xd5), alaw_to_i16(0x55)), (8, -8));
        assert_eq!((alaw_to_i16(0x2a), alaw_to_i16(0xaa)), (-32256, 32256));
        // Both are odd-symmetric and monotonic over their codes.
        let mut last = i16::MIN;
        for code in (0u8..=0x7f).rev() {
            let v = ulaw_to_i16(code | 0x80);
            assert!(v >= last, "µ-law {code:#x}");
            last = v;
            assert_eq!(ulaw_to_i16(code), -v);
        }
    }

    #[test]
    fn a_frame_is_as_long_as_planned_and_its_checks_are_flacs() {
        for (samples, channels, first) in [(160u32, 1u16, 0u64), (80, 2, 127), (160, 1, 128), (1, 1, 1 << 35)] {
            let g711 = vec![0x55u8; samples as usize * usize::from(channels)];
            let mut out = vec![9, 9];
            write_frame(&mut out, &g711, channels, alaw_to_i16, first);
            assert_eq!(out.len() - 2, frame_len(samples, channels, first), "{samples} {channels} {first}");
            let frame = &out[2..];
            let header_len = 4 + coded_len(first) + 2;
            assert_eq!(CRC8.checksum(&frame[..header_len]), frame[header_len]);
            assert_eq!(CRC16.checksum(frame), 0, "a frame with its CRC-16 checks to zero");
        }
        // The sample number's coding, as FLAC's (UTF-8's) for 128: 0xC2 0x80.
        let mut out = Vec::new();
        write_frame(&mut out, &[0xff; 16], 1, ulaw_to_i16, 128);
        assert_eq!(&out[4..6], &[0xc2, 0x80]);
    }

    #[test]
    fn the_sample_entry_holds_one_streaminfo() {
        let e = sample_entry(1, 8_000);
        assert_eq!(u32::from_be_bytes(e[0..4].try_into().unwrap()) as usize, e.len());
        assert_eq!(&e[4..8], b"fLaC");
        let dfla = &e[36..];
        assert_eq!(&dfla[4..8], b"dfLa");
        assert_eq!(dfla.len(), 12 + 4 + 34);
        let info = &dfla[16..];
        assert_eq!(u32::from_be_bytes([0, info[10], info[11], info[12]]) >> 4, 8_000);
    }
}

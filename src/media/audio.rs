//! The audio codecs KeepPeek records, and what each needs in an MP4 file.
//!
//! Cameras send AAC (RTP `mpeg4-generic`), G.711 µ-law and A-law (`PCMU`, `PCMA`: what many
//! cameras send by default) and now and then Opus. Each is stored as it came, as the second
//! track of a segment, in the sample entry the players that read MP4 know it by:
//!
//! - AAC: `mp4a` with its `esds` (retina writes it from the SDP's `config=`);
//! - G.711: `ulaw` / `alaw`, the QuickTime sound description (version 0) that ISO BMFF's
//!   `AudioSampleEntry` shares its layout with. MPEG-4 has no G.711 entry of its own; these
//!   are the entries ffmpeg (and so VLC, mpv and most tools) read G.711 from, and the ones
//!   ffmpeg's own writer uses for it. Browsers do not play them: exports turn G.711 into
//!   something they do;
//! - Opus: `Opus` with its `dOps`, as in "Encapsulation of Opus in ISO Base Media File
//!   Format" (Opus's own specification for MP4), which browsers and ffmpeg read.
//!
//! Written by hand: these are fixed boxes of a few dozen bytes, and neither retina (which
//! builds only `mp4a`) nor the `mp4` crate writes `ulaw`, `alaw` or `dOps`.

use std::fmt;

use bytes::Bytes;

use super::AudioParams;
use crate::limits;

/// The audio codecs KeepPeek records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AudioCodec {
    Aac,
    /// G.711 µ-law.
    Pcmu,
    /// G.711 A-law.
    Pcma,
    Opus,
}

impl AudioCodec {
    /// Lower-case name, as in the API and in WebRTC (`pcmu`, `pcma`, `opus`).
    pub fn name(self) -> &'static str {
        match self {
            AudioCodec::Aac => "aac",
            AudioCodec::Pcmu => "pcmu",
            AudioCodec::Pcma => "pcma",
            AudioCodec::Opus => "opus",
        }
    }

    /// The catalog's code for a recording's audio (0 is none): 1 was the only value before
    /// G.711 and Opus, and is AAC.
    pub fn code(self) -> u8 {
        match self {
            AudioCodec::Aac => 1,
            AudioCodec::Pcmu => 2,
            AudioCodec::Pcma => 3,
            AudioCodec::Opus => 4,
        }
    }

    /// The codec of a catalog code; `None` for 0 and for codes this build does not know.
    pub fn from_code(code: u8) -> Option<AudioCodec> {
        match code {
            1 => Some(AudioCodec::Aac),
            2 => Some(AudioCodec::Pcmu),
            3 => Some(AudioCodec::Pcma),
            4 => Some(AudioCodec::Opus),
            _ => None,
        }
    }

    /// The codec of an MP4 audio sample entry, from its box type.
    pub fn from_sample_entry(entry: &[u8]) -> Option<AudioCodec> {
        match entry.get(4..8)? {
            b"mp4a" => Some(AudioCodec::Aac),
            b"ulaw" => Some(AudioCodec::Pcmu),
            b"alaw" => Some(AudioCodec::Pcma),
            b"Opus" => Some(AudioCodec::Opus),
            _ => None,
        }
    }
}

impl fmt::Display for AudioCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why audio parameters could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AudioParamsError {
    #[error("G.711 at {0} Hz: a camera sends it at 8000 Hz")]
    G711Rate(u32),
    #[error("{0} audio channels (KeepPeek records 1 or 2)")]
    Channels(u16),
}

/// How many samples of a stream at `rate` starting at `start_90k` start before `t_90k`
/// (sample k starts k × 90,000 / `rate` ticks in): 0 when `t_90k` is not after the start.
pub fn samples_before(start_90k: i64, rate: u32, t_90k: i64) -> u32 {
    let ticks = i128::from(t_90k) - i128::from(start_90k);
    if ticks <= 0 {
        return 0;
    }
    let n = (ticks * i128::from(rate.max(1)) + 89_999) / 90_000;
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The parameters of a G.711 stream (8 kHz, as RTP's static payload types 0 and 8 are).
/// Its sample entry is what ffmpeg's own MOV writer puts for G.711: version 0, 16 in the
/// sample size field (ffmpeg reads the size from the codec, not the field).
pub fn g711_params(codec: AudioCodec, sample_rate: u32, channels: u16) -> Result<AudioParams, AudioParamsError> {
    let fourcc = match codec {
        AudioCodec::Pcmu => b"ulaw",
        AudioCodec::Pcma => b"alaw",
        _ => unreachable!("g711_params is for G.711"),
    };
    if sample_rate != 8_000 {
        return Err(AudioParamsError::G711Rate(sample_rate));
    }
    check_channels(channels)?;
    let mut entry = Vec::with_capacity(36);
    audio_sample_entry(&mut entry, fourcc, channels, sample_rate);
    close_box(&mut entry, 0);
    Ok(AudioParams { codec, rfc6381: codec.name().to_string(), sample_rate, sample_entry: Bytes::from(entry) })
}

/// The parameters of an Opus stream: always 48 kHz in RTP and in MP4. `pre_skip` is in
/// 48 kHz samples (RTP carries none: 0, and playback starts at the first sample).
pub fn opus_params(channels: u16, pre_skip: u16) -> Result<AudioParams, AudioParamsError> {
    check_channels(channels)?;
    let mut entry = Vec::with_capacity(55);
    audio_sample_entry(&mut entry, b"Opus", channels, 48_000);
    let dops = entry.len();
    entry.extend_from_slice(&[0, 0, 0, 0]);
    entry.extend_from_slice(b"dOps");
    entry.push(0); // version
    entry.push(channels as u8); // OutputChannelCount
    entry.extend_from_slice(&pre_skip.to_be_bytes());
    entry.extend_from_slice(&48_000u32.to_be_bytes()); // InputSampleRate
    entry.extend_from_slice(&0i16.to_be_bytes()); // OutputGain
    entry.push(0); // ChannelMappingFamily 0: mono or stereo, no table
    close_box(&mut entry, dops);
    close_box(&mut entry, 0);
    debug_assert!(entry.len() <= limits::SAMPLE_ENTRY_MAX_BYTES);
    Ok(AudioParams {
        codec: AudioCodec::Opus,
        rfc6381: "opus".into(),
        sample_rate: 48_000,
        sample_entry: Bytes::from(entry),
    })
}

fn check_channels(channels: u16) -> Result<(), AudioParamsError> {
    if matches!(channels, 1 | 2) { Ok(()) } else { Err(AudioParamsError::Channels(channels)) }
}

/// The `AudioSampleEntry` fields (ISO/IEC 14496-12 12.2.3), its size left to patch.
fn audio_sample_entry(out: &mut Vec<u8>, fourcc: &[u8; 4], channels: u16, sample_rate: u32) {
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(fourcc);
    out.extend_from_slice(&[0; 6]); // SampleEntry.reserved
    out.extend_from_slice(&1u16.to_be_bytes()); // data_reference_index
    out.extend_from_slice(&[0; 8]); // reserved (QuickTime: version, revision, vendor)
    out.extend_from_slice(&channels.to_be_bytes());
    out.extend_from_slice(&16u16.to_be_bytes()); // samplesize
    out.extend_from_slice(&[0; 4]); // pre_defined, reserved
    out.extend_from_slice(&(sample_rate << 16).to_be_bytes()); // 16.16; all rates here fit
}

/// Writes the size of the box that starts at `start` and runs to the end of `out`.
fn close_box(out: &mut [u8], start: usize) {
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// The duration of an Opus packet in 48 kHz samples, from its table-of-contents byte (RFC
/// 6716 section 3.1), or `None` for a packet that is not a valid one (empty, a code 3
/// packet without its frame count, or longer than the 120 ms a packet may hold).
///
/// By hand: RTP carries one Opus packet per RTP packet (RFC 7587) and retina has no Opus
/// depacketizer; a packet's duration is all the recorder needs from it.
pub fn opus_packet_samples(packet: &[u8]) -> Option<u32> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    // Frame sizes in 48 kHz samples: SILK (0-11) 10/20/40/60 ms, hybrid (12-15) 10/20 ms,
    // CELT (16-31) 2.5/5/10/20 ms.
    let frame = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        12..=15 => [480, 960][usize::from(config % 2)],
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let frames = match toc & 0b11 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(*packet.get(1)? & 0x3f),
    };
    let samples = frame * frames;
    (frames > 0 && samples <= 5_760).then_some(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_g711_entry_is_what_ffmpegs_mov_writer_puts_less_its_channel_layout() {
        let p = g711_params(AudioCodec::Pcmu, 8_000, 1).unwrap();
        // From a file `ffmpeg -c:a pcm_mulaw -f mov` wrote (its `chan` box left out).
        let expected = "00000024756c6177000000000000000100000000000000000001001000000000 1f400000";
        let hex: String = p.sample_entry.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected.replace(' ', ""));
        assert_eq!(AudioCodec::from_sample_entry(&p.sample_entry), Some(AudioCodec::Pcmu));
        let a = g711_params(AudioCodec::Pcma, 8_000, 2).unwrap();
        assert_eq!(AudioCodec::from_sample_entry(&a.sample_entry), Some(AudioCodec::Pcma));
        assert_eq!(g711_params(AudioCodec::Pcma, 16_000, 1), Err(AudioParamsError::G711Rate(16_000)));
        assert_eq!(g711_params(AudioCodec::Pcma, 8_000, 6), Err(AudioParamsError::Channels(6)));
    }

    #[test]
    fn an_opus_entry_carries_its_dops() {
        let p = opus_params(2, 312).unwrap();
        let e = &p.sample_entry;
        assert_eq!(u32::from_be_bytes(e[0..4].try_into().unwrap()) as usize, e.len());
        assert_eq!(&e[4..8], b"Opus");
        assert_eq!(&e[24..26], &[0, 2], "channel count");
        let dops = &e[36..];
        assert_eq!(&dops[4..8], b"dOps");
        assert_eq!(dops.len(), 19);
        assert_eq!(&dops[8..], &[0, 2, 0x01, 0x38, 0, 0, 0xbb, 0x80, 0, 0, 0]);
        assert_eq!(p.sample_rate, 48_000);
    }

    #[test]
    fn catalog_codes_round_trip_and_one_is_aac() {
        for c in [AudioCodec::Aac, AudioCodec::Pcmu, AudioCodec::Pcma, AudioCodec::Opus] {
            assert_eq!(AudioCodec::from_code(c.code()), Some(c));
        }
        assert_eq!(AudioCodec::from_code(1), Some(AudioCodec::Aac));
        assert_eq!(AudioCodec::from_code(0), None);
        assert_eq!(AudioCodec::from_code(9), None);
    }

    #[test]
    fn opus_durations_come_from_the_toc() {
        // CELT 20 ms (config 31), one frame.
        assert_eq!(opus_packet_samples(&[31 << 3, 0xff]), Some(960));
        // SILK 60 ms (config 3), two frames: 120 ms.
        assert_eq!(opus_packet_samples(&[(3 << 3) | 1]), Some(5_760));
        // Code 3 with 3 frames of 2.5 ms (config 16).
        assert_eq!(opus_packet_samples(&[(16 << 3) | 3, 3]), Some(360));
        // Code 3 without its count, with none, or past 120 ms.
        assert_eq!(opus_packet_samples(&[(16 << 3) | 3]), None);
        assert_eq!(opus_packet_samples(&[(16 << 3) | 3, 0]), None);
        assert_eq!(opus_packet_samples(&[(3 << 3) | 3, 3]), None);
        assert_eq!(opus_packet_samples(&[]), None);
    }
}

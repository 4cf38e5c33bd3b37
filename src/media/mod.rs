//! Encoded media as it flows through KeepPeek: frames, codec parameters, and the fragmented
//! MP4 boxes they are stored in.
//!
//! Invariants: a [`Frame`]'s data is one access unit of 4-byte length-prefixed NAL units
//! (the MP4 form; parameter sets travel in the sample entry, not in the frame). Frames are
//! shared as [`Bytes`] and never copied per consumer. Media time is in 90 kHz units.

pub mod annexb;
pub mod audio;
pub mod avc;
pub mod flac;
pub mod fmp4;
pub mod fmp4_read;

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

pub use audio::AudioCodec;

/// The video codecs KeepPeek records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    H264,
    H265,
}

impl Codec {
    /// The codec of an ISO BMFF video sample entry, from its box type.
    pub fn from_sample_entry(entry: &[u8]) -> Option<Codec> {
        match entry.get(4..8)? {
            b"avc1" | b"avc3" => Some(Codec::H264),
            b"hvc1" | b"hev1" => Some(Codec::H265),
            _ => None,
        }
    }

    /// Lower-case name used in logs, the API and file names.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "h264",
            Codec::H265 => "h265",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Codec parameters of a video stream: what a decoder needs before the first frame.
///
/// Two streams with equal parameters can share one MP4 init segment; any change closes the
/// segment being written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VideoParams {
    pub codec: Codec,
    /// RFC 6381 codec string, e.g. `avc1.4d001f`.
    pub rfc6381: String,
    pub width: u16,
    pub height: u16,
    /// The whole `avc1`/`hvc1` sample entry box, as it goes into `stsd`.
    pub sample_entry: Bytes,
}

/// Codec parameters of an audio stream: any change closes the segment being written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioParams {
    pub codec: AudioCodec,
    /// RFC 6381 codec string, e.g. `mp4a.40.2` (`ulaw`, `alaw`, `opus` for the others).
    pub rfc6381: String,
    /// Samples per second: also the audio track's timescale.
    pub sample_rate: u32,
    /// The whole sample entry box (`mp4a`, `ulaw`, `alaw`, `Opus`), as it goes into `stsd`.
    pub sample_entry: Bytes,
}

/// One encoded audio frame: an AAC access unit, a G.711 packet's samples, an Opus packet.
#[derive(Clone, Debug)]
pub struct AudioFrame {
    /// Presentation time on the camera's clock converted to 90 kHz, relative to the session's
    /// start like [`Frame::pts_90k`]: used only to place the audio track against the video.
    pub pts_90k: i64,
    /// Duration in samples (1024 for AAC-LC; one per byte for G.711).
    pub duration_samples: u32,
    /// The codec's own bytes: raw AAC (no ADTS header), G.711 samples, an Opus packet.
    pub data: Bytes,
    pub params: Arc<AudioParams>,
}

impl AudioFrame {
    /// Splits the frame at `t_90k`: what of it starts before stays, what starts from there on
    /// is returned. G.711 splits anywhere, between samples; a frame of another codec goes
    /// whole to the side its start is on. `self` is left with no samples when all of it went.
    pub fn split_at(&mut self, t_90k: i64) -> Option<AudioFrame> {
        if self.pts_90k >= t_90k {
            let data = std::mem::take(&mut self.data);
            return Some(AudioFrame {
                data,
                duration_samples: std::mem::take(&mut self.duration_samples),
                ..self.clone()
            });
        }
        let n = self.duration_samples;
        let by_sample = matches!(self.params.codec, AudioCodec::Pcmu | AudioCodec::Pcma)
            && n > 0
            && self.data.len().is_multiple_of(n as usize);
        let keep =
            if by_sample { audio::samples_before(self.pts_90k, self.params.sample_rate, t_90k).min(n) } else { n };
        if keep == n {
            return None;
        }
        let at = self.data.len() / n as usize * keep as usize;
        let tail = AudioFrame {
            pts_90k: self.pts_90k.saturating_add(i64::from(keep) * 90_000 / i64::from(self.params.sample_rate.max(1))),
            duration_samples: n - keep,
            data: self.data.split_off(at),
            params: self.params.clone(),
        };
        self.duration_samples = keep;
        Some(tail)
    }

    /// Splits `frames` at `t_90k` (see [`AudioFrame::split_at`]): what starts from there on
    /// is returned, in order, and `frames` keeps what starts before.
    pub fn split_all_at(frames: &mut Vec<AudioFrame>, t_90k: i64) -> Vec<AudioFrame> {
        let mut tail = Vec::new();
        frames.retain_mut(|f| match f.split_at(t_90k) {
            Some(rest) => {
                // A frame split keeps its first sample at least: what went starts later.
                let all_went = rest.pts_90k == f.pts_90k;
                tail.push(rest);
                !all_went
            }
            None => true,
        });
        tail
    }
}

/// One encoded video frame (access unit) and when it arrived.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Presentation time on the camera's clock, 90 kHz, relative to the session's start.
    /// Restarts from an arbitrary base on every camera session.
    pub pts_90k: i64,
    /// The monotonic clock at receipt, µs since the process's monotonic origin.
    pub received_mono_us: i64,
    /// The wall clock (UTC) at receipt, µs since the Unix epoch.
    pub received_wall_us: i64,
    /// An IDR (H.264) or IRAP (H.265): decoding can start here.
    pub is_key: bool,
    /// 4-byte length-prefixed NAL units.
    pub data: Bytes,
    /// The codec parameters in effect for this frame.
    pub params: Arc<VideoParams>,
    /// The session's audio track, if it has one: a segment started at this frame records it.
    pub audio: Option<Arc<AudioParams>>,
}

#[cfg(test)]
impl Frame {
    /// A frame of `len` zero bytes with placeholder parameters, for tests of plumbing that
    /// does not look inside frames.
    pub(crate) fn for_test(len: usize, is_key: bool) -> Frame {
        Frame {
            pts_90k: 0,
            received_mono_us: 1,
            received_wall_us: 1,
            is_key,
            data: Bytes::from(vec![0u8; len]),
            params: Arc::new(VideoParams {
                codec: Codec::H264,
                rfc6381: String::new(),
                width: 1,
                height: 1,
                sample_entry: Bytes::new(),
            }),
            audio: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g711_splits_between_samples_and_other_sound_whole_on_its_start_side() {
        let pcmu = Arc::new(audio::g711_params(AudioCodec::Pcmu, 8_000, 1).unwrap());
        let frame = |pts_90k: i64, params: &Arc<AudioParams>| AudioFrame {
            pts_90k,
            duration_samples: 160,
            data: Bytes::from((0..160).map(|i| i as u8).collect::<Vec<u8>>()),
            params: params.clone(),
        };
        // 20 ms from 0, split at 10 ms: 80 samples each side, the bytes with them.
        let mut f = frame(0, &pcmu);
        let tail = f.split_at(900).expect("a tail");
        assert_eq!((f.duration_samples, f.data.len(), f.data[79]), (80, 80, 79));
        assert_eq!((tail.pts_90k, tail.duration_samples, tail.data[0]), (900, 80, 80));
        // Wholly before, wholly after.
        assert!(frame(0, &pcmu).split_at(1_800).is_none());
        let mut f = frame(1_800, &pcmu);
        assert_eq!(f.split_at(1_800).map(|t| (t.pts_90k, t.duration_samples)), Some((1_800, 160)));
        assert_eq!(f.duration_samples, 0);
        // Opus goes whole to the side of its start.
        let opus = Arc::new(audio::opus_params(1, 0).unwrap());
        assert!(frame(0, &opus).split_at(900).is_none());
        // A list: the frames before stay, in order, and the tail comes out in order.
        let mut frames = vec![frame(0, &pcmu), frame(1_800, &pcmu), frame(3_600, &pcmu)];
        let tail = AudioFrame::split_all_at(&mut frames, 2_700);
        let at = |v: &[AudioFrame]| v.iter().map(|f| (f.pts_90k, f.duration_samples)).collect::<Vec<_>>();
        assert_eq!(at(&frames), [(0, 160), (1_800, 80)]);
        assert_eq!(at(&tail), [(2_700, 80), (3_600, 160)]);
    }
}

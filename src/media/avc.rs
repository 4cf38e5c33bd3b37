//! H.264 codec parameters for sources that hand us bare SPS/PPS (the file camera): the
//! `avc1` sample entry with its `avcC`, and the RFC 6381 codec string. RTSP cameras get
//! theirs from retina.

use bytes::Bytes;

use super::{Codec, VideoParams};
use crate::limits;

/// Why an SPS/PPS pair cannot describe a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AvcError {
    #[error("SPS is too short ({len_bytes} bytes)")]
    ShortSps { len_bytes: usize },
    #[error("parameter sets exceed the maximum of {max} bytes", max = limits::SAMPLE_ENTRY_MAX_BYTES)]
    TooLarge,
}

/// Builds [`VideoParams`] for an H.264 stream from one SPS and one PPS (NAL units without
/// start codes or length prefixes) and the picture size.
pub fn video_params(sps: &[u8], pps: &[u8], width: u16, height: u16) -> Result<VideoParams, AvcError> {
    if sps.len() < 4 {
        return Err(AvcError::ShortSps { len_bytes: sps.len() });
    }
    // 86 bytes of visual sample entry and avcC framing, plus the two parameter sets.
    if 86 + sps.len() + pps.len() > limits::SAMPLE_ENTRY_MAX_BYTES {
        return Err(AvcError::TooLarge);
    }
    let mut e = Vec::with_capacity(86 + sps.len() + pps.len());
    e.extend_from_slice(&[0, 0, 0, 0]);
    e.extend_from_slice(b"avc1");
    e.extend_from_slice(&[0; 6]);
    e.extend_from_slice(&1u16.to_be_bytes()); // data reference index
    e.extend_from_slice(&[0; 16]); // pre-defined and reserved
    e.extend_from_slice(&width.to_be_bytes());
    e.extend_from_slice(&height.to_be_bytes());
    e.extend_from_slice(&0x0048_0000u32.to_be_bytes()); // 72 dpi
    e.extend_from_slice(&0x0048_0000u32.to_be_bytes());
    e.extend_from_slice(&[0; 4]);
    e.extend_from_slice(&1u16.to_be_bytes()); // frame count
    e.extend_from_slice(&[0; 32]); // compressor name
    e.extend_from_slice(&0x0018u16.to_be_bytes()); // depth
    e.extend_from_slice(&(-1i16).to_be_bytes());
    let avcc_at = e.len();
    e.extend_from_slice(&[0, 0, 0, 0]);
    e.extend_from_slice(b"avcC");
    e.push(1); // configuration version
    e.extend_from_slice(&sps[1..4]); // profile, compatibility, level
    e.push(0xff); // 4-byte NAL lengths
    e.push(0xe1); // one SPS
    e.extend_from_slice(&(sps.len() as u16).to_be_bytes());
    e.extend_from_slice(sps);
    e.push(1); // one PPS
    e.extend_from_slice(&(pps.len() as u16).to_be_bytes());
    e.extend_from_slice(pps);
    let avcc_len = (e.len() - avcc_at) as u32;
    e[avcc_at..avcc_at + 4].copy_from_slice(&avcc_len.to_be_bytes());
    let len = e.len() as u32;
    e[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(VideoParams {
        codec: Codec::H264,
        rfc6381: format!("avc1.{:02x}{:02x}{:02x}", sps[1], sps[2], sps[3]),
        width,
        height,
        sample_entry: Bytes::from(e),
    })
}

/// Valid parameters for unit tests (Main profile, level 3.1, 640x360).
#[cfg(test)]
pub(crate) fn test_params() -> VideoParams {
    let sps = [0x67, 0x4d, 0x00, 0x1f, 0x9a, 0x66, 0x02, 0x80, 0x2d, 0xd8];
    let pps = [0x68, 0xee, 0x3c, 0x80];
    video_params(&sps, &pps, 640, 360).expect("valid parameter sets")
}

/// A valid sample entry for unit tests: that of [`test_params`].
#[cfg(test)]
pub(crate) fn test_sample_entry() -> Vec<u8> {
    test_params().sample_entry.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_entry_sizes_are_consistent_and_codec_string_follows_the_sps() {
        let sps = [0x67, 0x64, 0x00, 0x28, 0xac];
        let p = video_params(&sps, &[0x68, 0xeb], 1920, 1080).unwrap();
        assert_eq!(p.rfc6381, "avc1.640028");
        let e = &p.sample_entry;
        assert_eq!(u32::from_be_bytes(e[0..4].try_into().unwrap()) as usize, e.len());
        assert_eq!(Codec::from_sample_entry(e), Some(Codec::H264));
        assert_eq!(&e[90..94], b"avcC");
    }

    #[test]
    fn oversized_or_short_parameter_sets_are_refused() {
        assert_eq!(video_params(&[0x67, 1], &[], 1, 1), Err(AvcError::ShortSps { len_bytes: 2 }));
        let big = vec![0x67; limits::SAMPLE_ENTRY_MAX_BYTES];
        assert_eq!(video_params(&big, &[0x68], 1, 1), Err(AvcError::TooLarge));
    }
}

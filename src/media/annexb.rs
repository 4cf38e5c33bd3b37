//! Stored and ingested frames are length-prefixed NAL units (as MP4 keeps them); RTP
//! packetizers take Annex B (start codes). This turns one into the other, and reads the
//! parameter sets (SPS, PPS, and VPS for H.265) out of a sample entry's `avcC` / `hvcC` so a
//! keyframe can carry them in band: a WebRTC viewer has no other way to get them.
//!
//! Bounded: every length is checked against the buffer it claims to be in; a malformed input
//! is an error, never a panic.

use bytes::Bytes;

use super::{Codec, VideoParams};

/// Why a frame or sample entry could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnexbError {
    #[error("a NAL unit length runs past the end of the frame")]
    Truncated,
    #[error("the sample entry has no readable {0} box")]
    NoConfig(&'static str),
}

const START_CODE: [u8; 4] = [0, 0, 0, 1];

/// The child box `fourcc` of a sample entry (`avc1`/`hvc1` and its 78 bytes of visual
/// fields, then boxes), without its header.
fn config_box<'a>(entry: &'a [u8], fourcc: &[u8; 4]) -> Option<&'a [u8]> {
    let mut at = 8 + 78;
    while at + 8 <= entry.len() {
        let size = u32::from_be_bytes(entry[at..at + 4].try_into().ok()?) as usize;
        if size < 8 || at + size > entry.len() {
            return None;
        }
        if &entry[at + 4..at + 8] == fourcc {
            return Some(&entry[at + 8..at + size]);
        }
        at += size;
    }
    None
}

/// Reads `count` NAL units, each preceded by a 16-bit length, from `b` at `*at`.
fn nal_list(b: &[u8], at: &mut usize, count: usize, out: &mut Vec<Bytes>) -> Option<()> {
    for _ in 0..count {
        let len = u16::from_be_bytes(b.get(*at..*at + 2)?.try_into().ok()?) as usize;
        *at += 2;
        out.push(Bytes::copy_from_slice(b.get(*at..*at + len)?));
        *at += len;
    }
    Some(())
}

/// The parameter sets of a stream, in the order a decoder wants them (VPS, SPS, PPS).
pub fn parameter_sets(params: &VideoParams) -> Result<Vec<Bytes>, AnnexbError> {
    let e = &params.sample_entry;
    let mut out = Vec::new();
    match params.codec {
        Codec::H264 => {
            let c = config_box(e, b"avcC").ok_or(AnnexbError::NoConfig("avcC"))?;
            let bad = AnnexbError::NoConfig("avcC");
            let mut at = 5;
            let sps = usize::from(*c.get(at).ok_or(bad.clone())? & 0x1f);
            at += 1;
            nal_list(c, &mut at, sps, &mut out).ok_or(bad.clone())?;
            let pps = usize::from(*c.get(at).ok_or(bad.clone())?);
            at += 1;
            nal_list(c, &mut at, pps, &mut out).ok_or(bad)?;
        }
        Codec::H265 => {
            let c = config_box(e, b"hvcC").ok_or(AnnexbError::NoConfig("hvcC"))?;
            let bad = AnnexbError::NoConfig("hvcC");
            let mut at = 22;
            let arrays = *c.get(at).ok_or(bad.clone())?;
            at += 1;
            for _ in 0..arrays {
                at += 1; // completeness and NAL type
                let n = u16::from_be_bytes(c.get(at..at + 2).ok_or(bad.clone())?.try_into().expect("2 bytes"));
                at += 2;
                nal_list(c, &mut at, usize::from(n), &mut out).ok_or(bad.clone())?;
            }
        }
    }
    Ok(out)
}

/// Appends `prefix` (parameter sets) and then the frame's 4-byte length-prefixed NAL units
/// to `out`, each after a start code.
pub fn to_annexb(frame: &[u8], prefix: &[Bytes], out: &mut Vec<u8>) -> Result<(), AnnexbError> {
    for nal in prefix {
        out.extend_from_slice(&START_CODE);
        out.extend_from_slice(nal);
    }
    let mut at = 0;
    while at < frame.len() {
        let len = frame.get(at..at + 4).ok_or(AnnexbError::Truncated)?;
        let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
        let nal = frame.get(at + 4..(at + 4).checked_add(len).ok_or(AnnexbError::Truncated)?);
        out.extend_from_slice(&START_CODE);
        out.extend_from_slice(nal.ok_or(AnnexbError::Truncated)?);
        at += 4 + len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_sets_come_out_of_the_avcc_and_frames_get_start_codes() {
        let entry = crate::media::avc::test_sample_entry();
        let params = VideoParams {
            codec: Codec::H264,
            rfc6381: String::new(),
            width: 640,
            height: 360,
            sample_entry: entry.into(),
        };
        let sets = parameter_sets(&params).unwrap();
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[0][0] & 0x1f, 7, "SPS first");
        assert_eq!(&sets[1][..], &[0x68, 0xee, 0x3c, 0x80]);
        let frame = [0, 0, 0, 2, 0x65, 0xaa, 0, 0, 0, 1, 0x06];
        let mut out = Vec::new();
        to_annexb(&frame, &sets[1..], &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 1, 0x68, 0xee, 0x3c, 0x80, 0, 0, 0, 1, 0x65, 0xaa, 0, 0, 0, 1, 0x06]);
        for bad in [&[0, 0, 0, 9, 1][..], &[0, 0, 1], &[0xff, 0xff, 0xff, 0xff, 0]] {
            assert_eq!(to_annexb(bad, &[], &mut Vec::new()), Err(AnnexbError::Truncated));
        }
        let broken = VideoParams { sample_entry: Bytes::from_static(b"short"), ..params };
        assert!(parameter_sets(&broken).is_err());
    }
}

//! Checks that an uploaded snapshot is a whole baseline or progressive JPEG and reads its
//! dimensions, without decoding it.
//!
//! Written here rather than taken from a decoder crate: what is needed is the marker
//! structure only (start of image, a frame header with sane dimensions, a scan, and the end
//! of image as the last bytes, which is what a cut-off upload lacks). Decoders parse the
//! headers too but then decode, or stop before the tail. The walk is bounded by the
//! upload's own size and [`limits::JPEG_SEGMENTS_MAX`]; it is fuzzed (`fuzz/`, target
//! `event_intake`).

use crate::limits;

/// Why a snapshot is not a usable JPEG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JpegError {
    #[error("not a JPEG: it does not start with the start-of-image marker")]
    NotJpeg,
    #[error("the JPEG is cut short: {0}")]
    Truncated(&'static str),
    #[error("the JPEG is malformed: {0}")]
    Malformed(&'static str),
    #[error("the JPEG is {width}x{height}, outside 1x1 to {max}x{max}", max = limits::JPEG_SIDE_MAX_PX)]
    Dimensions { width: u16, height: u16 },
}

/// What the check learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JpegInfo {
    pub width: u16,
    pub height: u16,
    pub progressive: bool,
}

/// Walks `b`'s markers: SOI, header segments with a frame header (SOF), at least one scan,
/// and EOI as its last two bytes.
pub fn check(b: &[u8]) -> Result<JpegInfo, JpegError> {
    if b.len() < 4 || b[0] != 0xFF || b[1] != 0xD8 {
        return Err(JpegError::NotJpeg);
    }
    if b[b.len() - 2..] != [0xFF, 0xD9] {
        return Err(JpegError::Truncated("no end-of-image marker at its end"));
    }
    let mut at = 2;
    let mut frame: Option<JpegInfo> = None;
    let mut scans = 0;
    for _ in 0..limits::JPEG_SEGMENTS_MAX {
        // Fill bytes (0xFF runs) may precede a marker.
        while at + 1 < b.len() && b[at] == 0xFF && b[at + 1] == 0xFF {
            at += 1;
        }
        if at + 2 > b.len() {
            return Err(JpegError::Truncated("a marker is cut off"));
        }
        if b[at] != 0xFF {
            return Err(JpegError::Malformed("a segment does not start with a marker"));
        }
        let marker = b[at + 1];
        at += 2;
        match marker {
            0xD9 => {
                let info = frame.ok_or(JpegError::Malformed("no frame header"))?;
                if scans == 0 {
                    return Err(JpegError::Malformed("no scan"));
                }
                if at != b.len() {
                    return Err(JpegError::Malformed("data after the end-of-image marker"));
                }
                return Ok(info);
            }
            // Restart markers and TEM stand alone (only within entropy data, skipped below).
            0xD0..=0xD7 | 0x01 => continue,
            0x00 | 0xD8 => return Err(JpegError::Malformed("an unexpected marker")),
            _ => {}
        }
        if at + 2 > b.len() {
            return Err(JpegError::Truncated("a segment length is cut off"));
        }
        let len = usize::from(u16::from_be_bytes([b[at], b[at + 1]]));
        if len < 2 {
            return Err(JpegError::Malformed("a segment length under 2"));
        }
        let body = b.get(at + 2..at + len).ok_or(JpegError::Truncated("a segment is cut off"))?;
        at += len;
        match marker {
            // Start of frame: every SOF except DHT (C4), JPG (C8) and DAC (CC).
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                if frame.is_some() {
                    return Err(JpegError::Malformed("a second frame header"));
                }
                if body.len() < 6 {
                    return Err(JpegError::Malformed("a frame header too short"));
                }
                let height = u16::from_be_bytes([body[1], body[2]]);
                let width = u16::from_be_bytes([body[3], body[4]]);
                let components = usize::from(body[5]);
                if components == 0 || body.len() < 6 + 3 * components {
                    return Err(JpegError::Malformed("a frame header with bad components"));
                }
                let max = limits::JPEG_SIDE_MAX_PX;
                if width == 0 || height == 0 || width > max || height > max {
                    return Err(JpegError::Dimensions { width, height });
                }
                frame = Some(JpegInfo { width, height, progressive: matches!(marker, 0xC2 | 0xC6 | 0xCA | 0xCE) });
            }
            // Start of scan: entropy-coded data follows up to the next marker that is not a
            // stuffed zero or a restart.
            0xDA => {
                if frame.is_none() {
                    return Err(JpegError::Malformed("a scan before the frame header"));
                }
                scans += 1;
                loop {
                    let Some(ff) = b[at..].iter().position(|x| *x == 0xFF) else {
                        return Err(JpegError::Truncated("scan data runs off the end"));
                    };
                    at += ff;
                    match b.get(at + 1) {
                        Some(0x00) | Some(0xD0..=0xD7) => at += 2,
                        Some(0xFF) => at += 1,
                        Some(_) => break,
                        None => return Err(JpegError::Truncated("scan data runs off the end")),
                    }
                }
            }
            _ => {}
        }
    }
    Err(JpegError::Malformed("too many segments"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal, structurally whole baseline JPEG of `width`x`height` (one component; its
    /// scan data is not a real picture, which this check does not decode).
    pub(crate) fn tiny(width: u16, height: u16) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8];
        // APP0 JFIF
        b.extend_from_slice(&[0xFF, 0xE0, 0, 16, b'J', b'F', b'I', b'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0]);
        // SOF0: precision 8, height, width, one component
        b.extend_from_slice(&[0xFF, 0xC0, 0, 11, 8]);
        b.extend_from_slice(&height.to_be_bytes());
        b.extend_from_slice(&width.to_be_bytes());
        b.extend_from_slice(&[1, 1, 0x11, 0]);
        // SOS, then scan data with a stuffed 0xFF and a restart marker
        b.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]);
        b.extend_from_slice(&[0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56]);
        b.extend_from_slice(&[0xFF, 0xD9]);
        b
    }

    #[test]
    fn a_whole_jpeg_passes_with_its_dimensions() {
        let info = check(&tiny(3840, 2160)).unwrap();
        assert_eq!(info, JpegInfo { width: 3840, height: 2160, progressive: false });
    }

    #[test]
    fn each_defect_is_named() {
        let good = tiny(640, 480);
        assert_eq!(check(b"GIF89a...."), Err(JpegError::NotJpeg));
        assert_eq!(check(&[]), Err(JpegError::NotJpeg));
        assert!(matches!(check(&good[..good.len() - 5]), Err(JpegError::Truncated(_))));
        assert!(matches!(check(&good[..30]), Err(JpegError::Truncated(_))));
        assert_eq!(check(&tiny(0, 480)), Err(JpegError::Dimensions { width: 0, height: 480 }));
        assert!(matches!(check(&tiny(limits::JPEG_SIDE_MAX_PX + 1, 1)), Err(JpegError::Dimensions { .. })));
        // No frame header: SOI, SOS, EOI.
        let mut no_frame = vec![0xFF, 0xD8, 0xFF, 0xDA, 0, 2, 0xFF, 0xD9];
        assert!(matches!(check(&no_frame), Err(JpegError::Malformed(_))));
        // A cut-off file that happens to end in FF D9 inside its header.
        no_frame.truncate(4);
        no_frame.extend_from_slice(&[0xFF, 0xD9]);
        assert!(check(&no_frame).is_err());
        // Data after the end-of-image marker (and ending in another one).
        let mut two = good.clone();
        two.extend_from_slice(&good);
        assert!(check(&two).is_err());
    }

    #[test]
    fn the_segment_walk_stops_at_its_ceiling() {
        let mut b = vec![0xFF, 0xD8];
        for _ in 0..limits::JPEG_SEGMENTS_MAX {
            b.extend_from_slice(&[0xFF, 0xFE, 0, 2]); // empty comments
        }
        b.extend_from_slice(&tiny(8, 8)[2..]);
        assert_eq!(check(&b), Err(JpegError::Malformed("too many segments")));
    }
}

//! A camera made of a plain MP4 file, looped forever at real time: the demo's built-in
//! camera and the network-free camera of tests. The `mp4` crate reads the file once, bounded
//! by [`limits::FILE_SOURCE_MAX_BYTES`]; frames are then served from memory as shared
//! [`Bytes`], each loop continuing the media clock so the stream looks like one long run.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{IngestError, Sink};
use crate::clock::Clocks;
use crate::limits;
use crate::media::{Frame, VideoParams, avc};

/// The clip built into the binary (640x360 H.264, 15 fps, a keyframe each second, a frame
/// counter burned in). Regenerate with `tools/make-fixtures.sh`.
pub static BUILTIN_CLIP: &[u8] = include_bytes!("demo.mp4");

/// One parsed clip, ready to loop.
pub struct Clip {
    params: Arc<VideoParams>,
    /// (pts from the clip's start in 90 kHz, keyframe, data)
    samples: Vec<(i64, bool, Bytes)>,
    duration_90k: i64,
}

impl Clip {
    /// Parses an MP4 file's first H.264 track.
    pub fn parse(bytes: &[u8]) -> Result<Clip, IngestError> {
        let bad = |why: String| IngestError::Source(why);
        if bytes.len() as u64 > limits::FILE_SOURCE_MAX_BYTES {
            return Err(bad(format!(
                "file over the maximum of {} bytes (FILE_SOURCE_MAX_BYTES)",
                limits::FILE_SOURCE_MAX_BYTES
            )));
        }
        let mut r = mp4::Mp4Reader::read_header(Cursor::new(bytes), bytes.len() as u64)
            .map_err(|e| bad(format!("not a readable MP4: {e}")))?;
        let track = r
            .tracks()
            .values()
            .find(|t| matches!(t.media_type(), Ok(mp4::MediaType::H264)))
            .ok_or_else(|| bad("no H.264 track".into()))?;
        let track_id = track.track_id();
        let timescale = i64::from(track.timescale().max(1));
        let avcc = track
            .trak
            .mdia
            .minf
            .stbl
            .stsd
            .avc1
            .as_ref()
            .map(|a| &a.avcc);
        if avcc.is_none_or(|c| c.length_size_minus_one & 3 != 3) {
            return Err(bad("H.264 track without 4-byte NAL lengths".into()));
        }
        let sps = track
            .sequence_parameter_set()
            .map_err(|e| bad(format!("no SPS: {e}")))?;
        let pps = track
            .picture_parameter_set()
            .map_err(|e| bad(format!("no PPS: {e}")))?;
        let params = avc::video_params(sps, pps, track.width(), track.height())
            .map_err(|e| bad(e.to_string()))?;
        let count = r.sample_count(track_id).map_err(|e| bad(e.to_string()))?;
        let mut samples = Vec::with_capacity(count as usize);
        let mut end_90k = 0;
        for id in 1..=count {
            let Some(s) = r
                .read_sample(track_id, id)
                .map_err(|e| bad(e.to_string()))?
            else {
                break;
            };
            if s.bytes.len() > limits::FRAME_MAX_BYTES {
                return Err(bad(format!("sample {id} over FRAME_MAX_BYTES")));
            }
            let pts_90k = s.start_time as i64 * 90_000 / timescale;
            end_90k = (s.start_time as i64 + i64::from(s.duration)) * 90_000 / timescale;
            samples.push((pts_90k, s.is_sync, s.bytes));
        }
        if !samples.first().is_some_and(|s| s.1) || end_90k <= 0 {
            return Err(bad(
                "the clip must start with a keyframe and have a duration".into(),
            ));
        }
        Ok(Clip {
            params: Arc::new(params),
            samples,
            duration_90k: end_90k,
        })
    }

    pub fn params(&self) -> &Arc<VideoParams> {
        &self.params
    }
}

/// Plays `clip` in a loop at real time into `sink`, until cancelled.
pub async fn run(clip: &Clip, sink: &mut Sink<'_>) -> Result<(), IngestError> {
    sink.connected(&clip.params);
    let start = Instant::now();
    for lap in 0i64.. {
        for (pts, is_key, data) in &clip.samples {
            let pts_90k = lap * clip.duration_90k + pts;
            let due = start + Duration::from_micros(crate::clock::ticks_90k_to_us(pts_90k) as u64);
            tokio::time::sleep_until(due).await;
            sink.deliver(Frame {
                pts_90k,
                received_mono_us: Clocks.mono_us(),
                received_wall_us: Clocks.wall_us(),
                is_key: *is_key,
                data: data.clone(),
                params: clip.params.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_clip_parses_with_a_keyframe_each_second() {
        let clip = Clip::parse(BUILTIN_CLIP).unwrap();
        assert_eq!((clip.params.width, clip.params.height), (640, 360));
        assert!(clip.params.rfc6381.starts_with("avc1."));
        let keys: Vec<i64> = clip.samples.iter().filter(|s| s.1).map(|s| s.0).collect();
        assert!(keys.len() >= 5);
        assert!(keys.windows(2).all(|w| w[1] - w[0] == 90_000));
    }

    #[test]
    fn a_file_over_the_ceiling_is_refused_before_parsing() {
        let big = vec![0u8; limits::FILE_SOURCE_MAX_BYTES as usize + 1];
        let Err(IngestError::Source(why)) = Clip::parse(&big) else {
            panic!("accepted")
        };
        assert!(why.contains("FILE_SOURCE_MAX_BYTES"), "{why}");
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(Clip::parse(b"definitely not an mp4").is_err());
        assert!(Clip::parse(&BUILTIN_CLIP[..BUILTIN_CLIP.len() / 3]).is_err());
    }
}

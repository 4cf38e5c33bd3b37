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
use crate::limits;
use crate::media::{AudioFrame, AudioParams, Frame, VideoParams, avc};

/// The clip built into the binary (640x360 H.264, 15 fps, a keyframe each second, a frame
/// counter burned in). Regenerate with `tools/make-fixtures.sh`.
pub static BUILTIN_CLIP: &[u8] = include_bytes!("demo.mp4");

/// One sample of a clip.
enum Sample {
    Video { is_key: bool, data: Bytes },
    Audio { duration_samples: u32, data: Bytes },
}

/// One parsed clip, ready to loop.
pub struct Clip {
    params: Arc<VideoParams>,
    audio: Option<Arc<AudioParams>>,
    /// Video and audio samples in presentation order, with their time from the clip's start
    /// in 90 kHz.
    samples: Vec<(i64, Sample)>,
    duration_90k: i64,
}

fn bad(why: String) -> IngestError {
    IngestError::Source(why)
}

impl Clip {
    /// Parses an MP4 file's first H.264 track and its first AAC track, if any.
    pub fn parse(bytes: &[u8]) -> Result<Clip, IngestError> {
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
        let video_id = track.track_id();
        let avcc = track.trak.mdia.minf.stbl.stsd.avc1.as_ref().map(|a| &a.avcc);
        if avcc.is_none_or(|c| c.length_size_minus_one & 3 != 3) {
            return Err(bad("H.264 track without 4-byte NAL lengths".into()));
        }
        let sps = track.sequence_parameter_set().map_err(|e| bad(format!("no SPS: {e}")))?;
        let pps = track.picture_parameter_set().map_err(|e| bad(format!("no PPS: {e}")))?;
        let params = avc::video_params(sps, pps, track.width(), track.height()).map_err(|e| bad(e.to_string()))?;
        let audio = r.tracks().values().find(|t| matches!(t.media_type(), Ok(mp4::MediaType::AAC))).map(aac_params);
        let audio = audio.transpose()?.map(|(id, p)| (id, Arc::new(p)));

        let mut samples = Vec::new();
        let duration_90k =
            read_track(&mut r, video_id, &mut samples, |s| Sample::Video { is_key: s.is_sync, data: s.bytes })?;
        if !matches!(samples.first(), Some((_, Sample::Video { is_key: true, .. }))) || duration_90k <= 0 {
            return Err(bad("the clip must start with a keyframe and have a duration".into()));
        }
        if let Some((id, _)) = &audio {
            let mut audio_samples = Vec::new();
            read_track(&mut r, *id, &mut audio_samples, |s| Sample::Audio {
                duration_samples: s.duration,
                data: s.bytes,
            })?;
            // The loop's length is the video's: audio past it would overlap the next lap.
            audio_samples.retain(|(pts, _)| *pts < duration_90k);
            samples.extend(audio_samples);
            samples.sort_by_key(|(pts, _)| *pts);
        }
        Ok(Clip { params: Arc::new(params), audio: audio.map(|(_, p)| p), samples, duration_90k })
    }

    pub fn params(&self) -> &Arc<VideoParams> {
        &self.params
    }

    /// The clip's video frames in order: (pts 90 kHz from the clip's start, keyframe, data).
    pub fn video_frames(&self) -> impl Iterator<Item = (i64, bool, Bytes)> + '_ {
        self.samples.iter().filter_map(|(pts, s)| match s {
            Sample::Video { is_key, data } => Some((*pts, *is_key, data.clone())),
            Sample::Audio { .. } => None,
        })
    }

    /// One lap of the clip, 90 kHz.
    pub fn duration_90k(&self) -> i64 {
        self.duration_90k
    }
}

/// Appends every sample of track `id` to `out`; returns the track's end in 90 kHz.
fn read_track(
    r: &mut mp4::Mp4Reader<Cursor<&[u8]>>,
    id: u32,
    out: &mut Vec<(i64, Sample)>,
    make: impl Fn(mp4::Mp4Sample) -> Sample,
) -> Result<i64, IngestError> {
    let timescale = i64::from(r.tracks()[&id].timescale().max(1));
    let count = r.sample_count(id).map_err(|e| bad(e.to_string()))?;
    let mut end_90k = 0;
    for n in 1..=count {
        let Some(s) = r.read_sample(id, n).map_err(|e| bad(e.to_string()))? else { break };
        if s.bytes.len() > limits::FRAME_MAX_BYTES {
            return Err(bad(format!("track {id} sample {n} over FRAME_MAX_BYTES")));
        }
        // The file's times are untrusted: a huge one must be refused, not wrap.
        let to_90k = |t: u64| i64::try_from(u128::from(t) * 90_000 / timescale as u128).ok();
        let (Some(pts_90k), Some(end)) =
            (to_90k(s.start_time), to_90k(s.start_time.saturating_add(u64::from(s.duration))))
        else {
            return Err(bad(format!("track {id} sample {n} has a time out of range")));
        };
        if end > limits::FILE_SOURCE_MAX_DURATION_90K {
            return Err(bad(format!("track {id} is longer than FILE_SOURCE_MAX_DURATION_90K")));
        }
        end_90k = end;
        out.push((pts_90k, make(s)));
    }
    Ok(end_90k)
}

/// The parameters of an AAC track, with its `mp4a` sample entry written back out.
fn aac_params(t: &mp4::Mp4Track) -> Result<(u32, AudioParams), IngestError> {
    use mp4::WriteBox;
    let mp4a = t.trak.mdia.minf.stbl.stsd.mp4a.as_ref().ok_or_else(|| bad("AAC track without mp4a".into()))?;
    let mut entry = Vec::new();
    mp4a.write_box(&mut entry).map_err(|e| bad(format!("mp4a: {e}")))?;
    if entry.len() > limits::SAMPLE_ENTRY_MAX_BYTES {
        return Err(bad("audio sample entry over SAMPLE_ENTRY_MAX_BYTES".into()));
    }
    if t.timescale() == 0 {
        return Err(bad("AAC track with a zero sample rate".into()));
    }
    let object_type = mp4a.esds.as_ref().map_or(2, |e| e.es_desc.dec_config.dec_specific.profile);
    let params = AudioParams {
        codec: crate::media::AudioCodec::Aac,
        rfc6381: format!("mp4a.40.{object_type}"),
        sample_rate: t.timescale(),
        sample_entry: Bytes::from(entry),
    };
    Ok((t.track_id(), params))
}

/// Plays `clip` in a loop at real time into `sink`, until cancelled.
pub async fn run(clip: &Clip, sink: &mut Sink<'_>) -> Result<(), IngestError> {
    sink.connected(&clip.params);
    let start = Instant::now();
    for lap in 0i64.. {
        for (pts, sample) in &clip.samples {
            let pts_90k = lap * clip.duration_90k + pts;
            let due = start + Duration::from_micros(crate::clock::ticks_90k_to_us(pts_90k) as u64);
            tokio::time::sleep_until(due).await;
            match sample {
                Sample::Video { is_key, data } => sink.deliver(Frame {
                    pts_90k,
                    received_mono_us: sink.clocks.mono_us(),
                    received_wall_us: sink.clocks.wall_us(),
                    is_key: *is_key,
                    data: data.clone(),
                    params: clip.params.clone(),
                    audio: clip.audio.clone(),
                }),
                Sample::Audio { duration_samples, data } => {
                    let Some(params) = &clip.audio else { continue };
                    let frame = AudioFrame {
                        pts_90k,
                        duration_samples: *duration_samples,
                        data: data.clone(),
                        params: params.clone(),
                    };
                    sink.deliver_audio(frame, sink.clocks.mono_us())
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_clip_parses_with_a_keyframe_each_second_and_its_audio() {
        let clip = Clip::parse(BUILTIN_CLIP).unwrap();
        assert_eq!((clip.params.width, clip.params.height), (640, 360));
        assert!(clip.params.rfc6381.starts_with("avc1."));
        let keys: Vec<i64> =
            clip.samples.iter().filter(|s| matches!(s.1, Sample::Video { is_key: true, .. })).map(|s| s.0).collect();
        assert!(keys.len() >= 5);
        assert!(keys.windows(2).all(|w| w[1] - w[0] == 90_000));
        let audio = clip.audio.as_ref().expect("the demo clip has AAC");
        assert_eq!(audio.sample_rate, 48_000);
        assert_eq!(&audio.sample_entry[4..8], b"mp4a");
        assert!(clip.samples.windows(2).all(|w| w[0].0 <= w[1].0), "in presentation order");
        assert!(clip.samples.iter().all(|s| s.0 < clip.duration_90k));
    }
    #[test]
    fn a_file_over_the_ceiling_is_refused_before_parsing() {
        let big = vec![0u8; limits::FILE_SOURCE_MAX_BYTES as usize + 1];
        let Err(IngestError::Source(why)) = Clip::parse(&big) else { panic!("accepted") };
        assert!(why.contains("FILE_SOURCE_MAX_BYTES"), "{why}");
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(Clip::parse(b"definitely not an mp4").is_err());
        assert!(Clip::parse(&BUILTIN_CLIP[..BUILTIN_CLIP.len() / 3]).is_err());
    }
}

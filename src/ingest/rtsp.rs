//! One RTSP camera session with retina: DESCRIBE, SETUP of the video stream, PLAY, then
//! frames until the session ends or stalls.
//!
//! retina has no timeouts of its own: connect and DESCRIBE, each SETUP and PLAY are bounded
//! here, and a watchdog ends a session that is connected but delivers no video frame for
//! [`limits::INGEST_NO_FRAMES_TIMEOUT_MS`]. Frames arrive in the MP4 form (4-byte lengths,
//! parameter sets in the sample entry), which is what the recorder stores.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use retina::client::{PlayOptions, Session, SessionGroup, SessionOptions, SetupOptions};
use retina::codec::{CodecItem, FrameFormat, ParametersRef, VideoParameters};
use tokio::time::{Instant, timeout, timeout_at};
use tracing::warn;

use super::{IngestError, Sink};
use crate::config::Transport;
use crate::limits;
use crate::media::{AudioFrame, AudioParams, Codec, Frame, VideoParams};

/// Where and how to reach one camera stream.
pub struct Target<'a> {
    pub url: &'a url::Url,
    pub transport: Transport,
    pub credentials: Option<(&'a str, &'a str)>,
    pub group: &'a Arc<SessionGroup>,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Runs one session until it fails; never returns `Ok` except when cancelled (by dropping).
pub async fn run(target: &Target<'_>, sink: &mut Sink<'_>) -> Result<(), IngestError> {
    let options = SessionOptions::default()
        .creds(
            target
                .credentials
                .map(|(u, p)| retina::client::Credentials { username: u.to_string(), password: p.to_string() }),
        )
        .user_agent(format!("KeepPeek/{}", env!("CARGO_PKG_VERSION")))
        .session_group(target.group.clone());
    let mut session = timeout(ms(limits::RTSP_DESCRIBE_TIMEOUT_MS), Session::describe(target.url.clone(), options))
        .await
        .map_err(|_| IngestError::Timeout("DESCRIBE"))??;
    let video_i = session
        .streams()
        .iter()
        .position(|s| s.media() == "video" && matches!(s.encoding_name(), "h264" | "h265"))
        .ok_or(IngestError::NoVideo)?;
    let transport = match target.transport {
        Transport::Tcp => retina::client::Transport::Tcp(Default::default()),
        Transport::Udp => retina::client::Transport::Udp(Default::default()),
    };
    let setup = || SetupOptions::default().transport(transport.clone()).frame_format(FrameFormat::MP4);
    timeout(ms(limits::RTSP_SETUP_PLAY_TIMEOUT_MS), session.setup(video_i, setup()))
        .await
        .map_err(|_| IngestError::Timeout("SETUP"))??;
    // AAC audio is recorded along with the video when the camera offers it. Its parameters
    // come from the SDP, so they are known before the first frame.
    let audio_i = session.streams().iter().position(|s| s.media() == "audio" && s.encoding_name() == "mpeg4-generic");
    let mut audio: Option<(usize, Arc<AudioParams>)> = None;
    if let Some(i) = audio_i {
        timeout(ms(limits::RTSP_SETUP_PLAY_TIMEOUT_MS), session.setup(i, setup()))
            .await
            .map_err(|_| IngestError::Timeout("SETUP"))??;
        match session.streams()[i].parameters() {
            Some(ParametersRef::Audio(a)) => audio = Some((i, Arc::new(audio_params(a)?))),
            _ => warn!(url = %target.url, "audio stream without usable parameters; recording video only"),
        }
    }
    let play = PlayOptions::default().enforce_timestamps_with_max_jump_secs(NonZeroU32::new(10).expect("nonzero"));
    let session = timeout(ms(limits::RTSP_SETUP_PLAY_TIMEOUT_MS), session.play(play))
        .await
        .map_err(|_| IngestError::Timeout("PLAY"))??;
    let mut demuxed = session.demuxed()?;

    let mut params: Option<Arc<VideoParams>> = None;
    let watchdog = ms(limits::INGEST_NO_FRAMES_TIMEOUT_MS);
    let mut deadline = Instant::now() + watchdog;
    loop {
        let item = match timeout_at(deadline, demuxed.next()).await {
            Err(_) => return Err(IngestError::NoFrames),
            Ok(None) => return Err(IngestError::Ended),
            Ok(Some(item)) => item?,
        };
        let frame = match item {
            CodecItem::VideoFrame(f) if f.stream_id() == video_i => f,
            CodecItem::AudioFrame(a) => {
                if let Some((i, p)) = &audio
                    && a.stream_id() == *i
                {
                    let ts = a.timestamp();
                    sink.deliver_audio(AudioFrame {
                        pts_90k: ts.elapsed() * 90_000 / i64::from(ts.clock_rate().get()),
                        duration_samples: a.frame_length().get(),
                        data: Bytes::copy_from_slice(a.data()),
                        params: p.clone(),
                    });
                }
                continue;
            }
            _ => continue,
        };
        deadline = Instant::now() + watchdog;
        if params.is_none() || frame.has_new_parameters() {
            let Some(ParametersRef::Video(v)) = demuxed.streams()[video_i].parameters() else {
                return Err(IngestError::Source("video stream without parameters".into()));
            };
            let p = Arc::new(video_params(v)?);
            sink.connected(&p);
            params = Some(p);
        }
        let p = params.as_ref().expect("set above");
        let ts = frame.timestamp();
        let rate = i64::from(ts.clock_rate().get());
        let pts_90k = if rate == 90_000 { ts.elapsed() } else { ts.elapsed() * 90_000 / rate };
        let is_key = frame.is_random_access_point();
        sink.deliver(Frame {
            pts_90k,
            received_mono_us: sink.clocks.mono_us(),
            received_wall_us: sink.clocks.wall_us(),
            is_key,
            data: frame.into_data().into(),
            params: p.clone(),
            audio: audio.as_ref().map(|(_, a)| a.clone()),
        });
    }
}

/// Our form of retina's audio parameters, bounded.
fn audio_params(a: &retina::codec::AudioParameters) -> Result<AudioParams, IngestError> {
    let entry = a.mp4_sample_entry().build().map_err(|e| IngestError::Source(format!("audio sample entry: {e}")))?;
    if entry.len() > limits::SAMPLE_ENTRY_MAX_BYTES {
        return Err(IngestError::Source("audio parameters over SAMPLE_ENTRY_MAX_BYTES".into()));
    }
    Ok(AudioParams {
        rfc6381: a.rfc6381_codec().unwrap_or("mp4a.40.2").to_string(),
        sample_rate: a.clock_rate(),
        sample_entry: entry.into(),
    })
}

/// Our form of retina's video parameters, bounded.
fn video_params(v: &VideoParameters) -> Result<VideoParams, IngestError> {
    let rfc6381 = v.rfc6381_codec().to_string();
    let codec = match rfc6381.get(..4) {
        Some("avc1" | "avc3") => Codec::H264,
        Some("hvc1" | "hev1") => Codec::H265,
        _ => return Err(IngestError::Source(format!("unsupported codec {rfc6381}"))),
    };
    let entry = v.mp4_sample_entry().build().map_err(|e| IngestError::Source(format!("sample entry: {e}")))?;
    if entry.len() > limits::SAMPLE_ENTRY_MAX_BYTES {
        return Err(IngestError::Source("codec parameters over SAMPLE_ENTRY_MAX_BYTES".into()));
    }
    let (w, h) = v.pixel_dimensions();
    let (Ok(width), Ok(height)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err(IngestError::Source(format!("picture size {w}x{h} out of range")));
    };
    Ok(VideoParams { codec, rfc6381, width, height, sample_entry: entry.into() })
}

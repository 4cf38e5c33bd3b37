//! Camera ingest: one supervised task per stream that keeps a session up forever and hands
//! each frame to the stream's consumers.
//!
//! The supervisor reconnects with capped exponential backoff and jitter
//! ([`backoff_ms`]); a session that delivered frames for a while resets it, and answers that
//! retrying soon cannot fix (401, 404) wait the longest. A frame over its stream kind's
//! ceiling ([`limits::FRAME_MAX_BYTES`], [`limits::SUB_FRAME_MAX_BYTES`]) is dropped and
//! counted, never buffered.

pub mod avsync;
pub mod file;
pub mod pace;
pub mod probe;
pub mod rtsp;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use retina::client::SessionGroup;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::base::StreamKey;
use crate::clock::{Clocks, SharedClocks};
use crate::config::Source;
use crate::limits;
use crate::live::Fanout;
use crate::media::{AudioFrame, Frame, VideoParams};
use crate::record::FrameSender;
use pace::{Hold, Pace};
use state::StreamState;

/// Why a camera session ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    #[error("RTSP: {0}")]
    Rtsp(#[from] retina::Error),
    #[error("no answer to {0} in time")]
    Timeout(&'static str),
    #[error("connected, but no video frame for {} s", limits::INGEST_NO_FRAMES_TIMEOUT_MS / 1000)]
    NoFrames,
    #[error("the camera ended the stream")]
    Ended,
    #[error("the camera offers no H.264 or H.265 video")]
    NoVideo,
    #[error("{0}")]
    Source(String),
}

impl IngestError {
    /// True when retrying soon cannot help: wrong credentials, a wrong path.
    fn is_configuration(&self) -> bool {
        matches!(self, IngestError::Rtsp(e) if matches!(e.status_code(), Some(401 | 403 | 404)))
    }
}

/// The consumers of one stream's frames, and its live state.
pub struct Sink<'a> {
    pub recorder: Option<&'a mut FrameSender>,
    pub state: &'a StreamState,
    /// Live viewers.
    pub live: Option<&'a Fanout>,
    /// Stamps each frame at receipt.
    pub clocks: &'a dyn Clocks,
    /// The largest frame handed on (its stream kind's ceiling).
    pub frame_max_bytes: usize,
    /// The ingest thread's pacing, held off while this stream has live viewers.
    pub pace: Option<&'a Arc<Pace>>,
    /// The hold while this stream has live viewers.
    watched: Option<Hold>,
    /// Parameters of a session up, shown with its first frame.
    connecting: Option<Arc<VideoParams>>,
}

impl Sink<'_> {
    /// Holds the pacing off while this stream has live viewers: they need frames as they come.
    fn follow_viewers(&mut self, watched: bool) {
        if watched != self.watched.is_some() {
            self.watched = self.pace.filter(|_| watched).map(|p| p.hold());
        }
    }

    /// The session is up with `params`: shown connected once its first frame with them is
    /// handed on, so whoever sees the stream connected (the web face, another thread) finds a
    /// picture to show.
    fn connected(&mut self, params: &Arc<VideoParams>) {
        self.connecting = Some(params.clone());
    }

    /// Counts a video frame dropped for its size; the recorder drops what follows until the
    /// next keyframe, as those frames refer to it.
    fn oversized(&mut self) {
        self.state.oversized();
        if let Some(r) = self.recorder.as_deref_mut() {
            r.reject();
        }
    }

    /// Counts audio dropped for `why`: the video goes on.
    fn audio_dropped(&mut self, why: String) {
        self.state.audio_dropped(why);
    }

    /// The session's audio cannot be recorded, for `why`: it goes on with video only.
    fn audio_unusable(&mut self, why: String) {
        warn!("audio not recorded: {why}");
        self.state.audio_dropped(why);
    }

    /// Hands one audio frame, taken at `now_mono_us`, on, unless it is over
    /// [`limits::AUDIO_FRAME_MAX_BYTES`].
    fn deliver_audio(&mut self, frame: AudioFrame, now_mono_us: i64) {
        if frame.data.len() > limits::AUDIO_FRAME_MAX_BYTES {
            self.audio_dropped(format!("audio frame over AUDIO_FRAME_MAX_BYTES ({})", limits::AUDIO_FRAME_MAX_BYTES));
            return;
        }
        self.state.audio_frame();
        if let Some(live) = self.live {
            live.publish_audio(&frame);
        }
        if let Some(r) = self.recorder.as_deref_mut() {
            r.send_audio(frame, now_mono_us);
        }
    }

    /// Hands one frame on, unless it is over the frame ceiling.
    fn deliver(&mut self, frame: Frame) {
        if frame.data.len() > self.frame_max_bytes {
            self.oversized();
            return;
        }
        self.state.frame(frame.data.len(), frame.received_mono_us);
        if let Some(live) = self.live {
            let watched = live.publish(&frame);
            self.follow_viewers(watched);
        }
        if let Some(params) = self.connecting.take() {
            self.state.connected(&params);
        }
        if let Some(r) = self.recorder.as_deref_mut() {
            r.send(frame);
        }
    }
}

/// How long to wait before reconnect attempt `attempt` (0-based): doubling from
/// [`limits::RECONNECT_BACKOFF_MIN_MS`] up to [`limits::RECONNECT_BACKOFF_MAX_MS`], then
/// scaled by a jitter in [0.5, 1.0) so cameras that fell together do not return together.
pub fn backoff_ms(attempt: u32, jitter: f64) -> u64 {
    let base = limits::RECONNECT_BACKOFF_MIN_MS.saturating_mul(1u64 << attempt.min(20));
    let capped = base.min(limits::RECONNECT_BACKOFF_MAX_MS);
    (capped as f64 * (0.5 + jitter.clamp(0.0, 1.0) / 2.0)) as u64
}

/// A small PRNG for jitter (xorshift); no crate needed for something this unimportant.
fn jitter(seed: &mut u64) -> f64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 11) as f64 / (1u64 << 53) as f64
}

/// What the supervisor of one stream needs.
pub struct StreamInput {
    pub clocks: SharedClocks,
    pub key: StreamKey,
    pub source: Source,
    pub credentials: Option<(String, String)>,
    pub recorder: Option<FrameSender>,
    pub state: Arc<StreamState>,
    pub live: Arc<Fanout>,
    /// The largest frame handed on (the camera's ceiling for this stream).
    pub frame_max_bytes: usize,
    /// The pacing of the thread the session runs on (none: not paced).
    pub pace: Option<Arc<Pace>>,
}

/// Keeps one stream's session up until `shutdown` turns true. Dropping the returned future
/// (or shutdown) drops the recorder's sender, which lets the recorder close its files.
pub async fn supervise(mut input: StreamInput, mut shutdown: watch::Receiver<bool>) {
    let group = Arc::new(SessionGroup::default().named(input.key.name()));
    let clip = match &input.source {
        Source::Builtin => Some(file::Clip::parse(file::BUILTIN_CLIP)),
        Source::File { path } => Some(read_clip(path).await),
        Source::Rtsp { .. } => None,
    };
    let clocks = input.clocks.clone();
    let mut seed = (clocks.wall_us() as u64) | 1;
    let mut attempt: u32 = 0;
    while !*shutdown.borrow() {
        let started = Instant::now();
        let mut sink = Sink {
            recorder: input.recorder.as_mut(),
            state: &input.state,
            live: Some(&input.live),
            clocks: &*clocks,
            frame_max_bytes: input.frame_max_bytes,
            pace: input.pace.as_ref(),
            watched: None,
            connecting: None,
        };
        let session = async {
            match (&input.source, &clip) {
                (Source::Rtsp { url, transport }, _) => {
                    let credentials = input.credentials.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
                    let target =
                        rtsp::Target { url, transport: *transport, credentials, group: &group, key: &input.key };
                    rtsp::run(&target, &mut sink).await
                }
                (_, Some(Ok(clip))) => file::run(clip, &mut sink).await,
                (_, Some(Err(e))) => Err(IngestError::Source(e.to_string())),
                (_, None) => Err(IngestError::Source("no source".into())),
            }
        };
        let result = tokio::select! {
            r = session => r,
            _ = shutdown.changed() => break,
        };
        if let Some(r) = input.recorder.as_mut() {
            r.session_ended();
        }
        input.live.session_ended();
        let err = match result {
            Ok(()) => IngestError::Ended,
            Err(e) => e,
        };
        if started.elapsed() >= Duration::from_millis(limits::RECONNECT_HEALTHY_AFTER_MS) {
            attempt = 0;
        }
        let wait_ms = if err.is_configuration() {
            limits::RECONNECT_BACKOFF_MAX_MS
        } else {
            backoff_ms(attempt, jitter(&mut seed))
        };
        attempt = attempt.saturating_add(1);
        warn!(stream = %input.key, retry_in_ms = wait_ms, "camera session ended: {err}");
        input.state.disconnected(err.to_string());
        // retina tears old sessions down in the background; do not pile new ones on a camera
        // that limits its sessions, but do not wait on it forever either.
        let stale = group.stale_sessions();
        let _ = tokio::time::timeout(
            Duration::from_millis(limits::RTSP_TEARDOWN_WAIT_MS),
            group.await_stale_sessions(&stale),
        )
        .await;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            _ = shutdown.changed() => break,
        }
    }
    info!(stream = %input.key, "ingest stopped");
}

async fn read_clip(path: &std::path::Path) -> Result<file::Clip, IngestError> {
    let bad = |e: std::io::Error| IngestError::Source(format!("{}: {e}", path.display()));
    let len = tokio::fs::metadata(path).await.map_err(bad)?.len();
    if len > limits::FILE_SOURCE_MAX_BYTES {
        return Err(IngestError::Source(format!("{}: over FILE_SOURCE_MAX_BYTES", path.display())));
    }
    file::Clip::parse(&tokio::fs::read(path).await.map_err(bad)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::RealClocks;

    fn frame(len: usize) -> Frame {
        Frame::for_test(len, true)
    }

    #[test]
    fn a_frame_over_the_ceiling_is_dropped_and_counted_never_queued() {
        let (mut tx, _rx, queue) =
            crate::record::queue::channel(&crate::base::BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64));
        let state = StreamState::default();
        let max = limits::SUB_FRAME_MAX_BYTES;
        let mut sink = Sink {
            recorder: Some(&mut tx),
            state: &state,
            live: None,
            clocks: &RealClocks,
            frame_max_bytes: max,
            pace: None,
            watched: None,
            connecting: None,
        };
        sink.deliver(frame(limits::SUB_FRAME_MAX_BYTES));
        sink.deliver(frame(limits::SUB_FRAME_MAX_BYTES + 1));
        assert_eq!(state.snapshot().frames_oversized, 1);
        assert_eq!(state.snapshot().frames_received, 1);
        use std::sync::atomic::Ordering;
        assert_eq!(queue.bytes_in_flight.load(Ordering::Relaxed), limits::SUB_FRAME_MAX_BYTES);
        assert_eq!(queue.frames_dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_stream_shows_connected_once_its_first_frame_is_handed_on_to_its_viewers() {
        let state = StreamState::default();
        let live = Fanout::new(crate::live::gop_pool());
        let mut sink = Sink {
            recorder: None,
            state: &state,
            live: Some(&live),
            clocks: &RealClocks,
            frame_max_bytes: limits::SUB_FRAME_MAX_BYTES,
            pace: None,
            watched: None,
            connecting: None,
        };
        let first = frame(1000);
        sink.connected(&first.params);
        assert!(!state.snapshot().connected, "not before a frame");
        assert!(live.params().is_none());
        sink.deliver(first);
        assert!(state.snapshot().connected);
        assert!(live.params().is_some(), "a viewer who sees it connected finds a picture");
    }

    #[test]
    fn an_audio_frame_over_its_ceiling_is_dropped_and_counted() {
        let (mut tx, _rx, queue) =
            crate::record::queue::channel(&crate::base::BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64));
        let state = StreamState::default();
        let mut sink = Sink {
            recorder: Some(&mut tx),
            state: &state,
            live: None,
            clocks: &RealClocks,
            frame_max_bytes: limits::FRAME_DEFAULT_MAX_BYTES,
            pace: None,
            watched: None,
            connecting: None,
        };
        let params = Arc::new(crate::media::AudioParams {
            codec: crate::media::AudioCodec::Aac,
            rfc6381: "mp4a.40.2".into(),
            sample_rate: 48_000,
            sample_entry: bytes::Bytes::new(),
        });
        let audio = |len: usize| AudioFrame {
            pts_90k: 0,
            duration_samples: 1024,
            data: vec![0; len].into(),
            params: params.clone(),
        };
        sink.deliver_audio(audio(limits::AUDIO_FRAME_MAX_BYTES), 0);
        sink.deliver_audio(audio(limits::AUDIO_FRAME_MAX_BYTES + 1), 0);
        assert_eq!(state.snapshot().audio_dropped, 1);
        assert_eq!(state.snapshot().audio_frames_received, 1);
        use std::sync::atomic::Ordering;
        assert_eq!(queue.bytes_in_flight.load(Ordering::Relaxed), limits::AUDIO_FRAME_MAX_BYTES);
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_in_bounds() {
        assert_eq!(backoff_ms(0, 1.0), limits::RECONNECT_BACKOFF_MIN_MS);
        assert_eq!(backoff_ms(1, 1.0), 2 * limits::RECONNECT_BACKOFF_MIN_MS);
        assert_eq!(backoff_ms(0, 0.0), limits::RECONNECT_BACKOFF_MIN_MS / 2);
        assert_eq!(backoff_ms(30, 1.0), limits::RECONNECT_BACKOFF_MAX_MS);
        assert_eq!(backoff_ms(u32::MAX, 1.0), limits::RECONNECT_BACKOFF_MAX_MS);
        let mut seed = 12345;
        for _ in 0..1000 {
            let j = jitter(&mut seed);
            assert!((0.0..1.0).contains(&j));
        }
    }
}

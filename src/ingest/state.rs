//! Live state of each camera stream, kept for the API: connected or not, codec, picture
//! size, measured frame rate and bitrate, the last error, and drop counters.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::media::{AudioCodec, Codec, VideoParams};

/// A snapshot of one stream's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamStatus {
    pub connected: bool,
    pub codec: Option<Codec>,
    pub width: u16,
    pub height: u16,
    /// Frames per second over the last measuring window.
    pub fps: f32,
    /// Bits per second over the last measuring window.
    pub bitrate_bps: u64,
    pub last_error: Option<String>,
    pub frames_received: u64,
    /// Frames over [`crate::limits::FRAME_MAX_BYTES`], dropped.
    pub frames_oversized: u64,
    pub sessions_started: u64,
    /// The session's audio codec, while its audio is recorded.
    pub audio: Option<AudioCodec>,
    pub audio_frames_received: u64,
    /// Audio frames or packets that could not be used (garbage, a codec the session did
    /// not set up, over [`crate::limits::AUDIO_FRAME_MAX_BYTES`]), and audio streams that
    /// could not be set up: each dropped, the video going on.
    pub audio_dropped: u64,
    /// Why audio was last dropped.
    pub audio_last_error: Option<String>,
}

/// Shared, updated by the stream's ingest task.
#[derive(Debug, Default)]
pub struct StreamState {
    status: Mutex<StreamStatus>,
    window: Mutex<RateWindow>,
    /// `StreamStatus::audio_frames_received`, counted without the lock (up to 50 a second).
    audio_frames: AtomicU64,
}

#[derive(Debug, Default)]
struct RateWindow {
    start_mono_us: i64,
    frames: u32,
    bytes: u64,
}

/// Rates are measured over windows of this length.
const RATE_WINDOW: Duration = Duration::from_secs(2);

impl StreamState {
    pub fn snapshot(&self) -> StreamStatus {
        let mut s = self.status.lock().expect("state lock").clone();
        s.audio_frames_received = self.audio_frames.load(Ordering::Relaxed);
        s
    }

    pub fn connected(&self, params: &VideoParams) {
        let mut s = self.status.lock().expect("state lock");
        s.connected = true;
        s.codec = Some(params.codec);
        s.width = params.width;
        s.height = params.height;
        s.last_error = None;
        s.sessions_started += 1;
    }

    /// The session records audio in `codec` (`None`: it has none, or no more).
    pub fn audio(&self, codec: Option<AudioCodec>) {
        self.status.lock().expect("state lock").audio = codec;
    }

    pub fn audio_frame(&self) {
        self.audio_frames.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts audio dropped for `why`.
    pub fn audio_dropped(&self, why: String) {
        let mut s = self.status.lock().expect("state lock");
        s.audio_dropped += 1;
        s.audio_last_error = Some(why);
    }

    pub fn disconnected(&self, error: String) {
        let mut s = self.status.lock().expect("state lock");
        s.connected = false;
        s.audio = None;
        s.fps = 0.0;
        s.bitrate_bps = 0;
        s.last_error = Some(error);
    }

    pub fn oversized(&self) {
        self.status.lock().expect("state lock").frames_oversized += 1;
    }

    /// Counts one frame received at `mono_us`.
    pub fn frame(&self, len_bytes: usize, mono_us: i64) {
        let mut w = self.window.lock().expect("state lock");
        if w.start_mono_us == 0 {
            w.start_mono_us = mono_us;
        }
        w.frames += 1;
        w.bytes += len_bytes as u64;
        let elapsed_us = mono_us - w.start_mono_us;
        let mut s = self.status.lock().expect("state lock");
        s.frames_received += 1;
        if elapsed_us >= RATE_WINDOW.as_micros() as i64 {
            s.fps = (f64::from(w.frames) * 1e6 / elapsed_us as f64) as f32;
            s.bitrate_bps = (w.bytes as f64 * 8.0 * 1e6 / elapsed_us as f64) as u64;
            *w = RateWindow { start_mono_us: mono_us, frames: 0, bytes: 0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_measured_over_the_window() {
        let st = StreamState::default();
        for i in 0..=30 {
            st.frame(1000, 1 + i * 66_667);
        }
        let s = st.snapshot();
        assert!((s.fps - 15.0).abs() < 0.6, "{}", s.fps);
        assert!((s.bitrate_bps as i64 - 120_000).abs() < 5_000, "{}", s.bitrate_bps);
        st.disconnected("camera went away".into());
        assert_eq!(st.snapshot().last_error.as_deref(), Some("camera went away"));
        assert!(!st.snapshot().connected);
    }
}

//! The bounded hand-off from a stream's ingest to the writer that records it.
//!
//! Bounded three times: [`limits::INGEST_QUEUE_FRAMES`] messages and
//! [`limits::INGEST_QUEUE_BYTES_PER_STREAM`] bytes per stream, and the bytes of every
//! stream's queue together in one pool ([`limits::INGEST_QUEUE_BYTES_PER_GIB`] of the board's RAM), so the
//! budget holds one figure for all queues rather than a worst case per stream. Ingest never
//! waits on the disk: a frame that does not fit is dropped and counted, and so is every
//! frame after it until the next keyframe (a decoder cannot use them). The first frame
//! queued after a drop or a reconnect carries `after_gap`, which ends the recorder's run.
//!
//! When the session has sound, the recorder gets picture and sound in the order of their
//! times, whichever the camera sent first: on the ingest's side, a video frame waits until
//! the session's audio has reached it (at most [`limits::AUDIO_SYNC_WAIT_MS`] and
//! [`limits::AUDIO_SYNC_HOLD_FRAMES`]), and an audio frame until the video has (at most
//! [`limits::AUDIO_AHEAD_WAIT_MS`] and [`limits::AUDIO_AHEAD_HOLD_FRAMES`]), their bytes
//! charged to the queue all the while. Many cameras send a stretch of sound after they
//! capture it, tens of milliseconds after the picture of the same moment; others send their
//! pictures later than their sound (a slow video encoder), by half a second or more. In time
//! order the recorder finds each moment's sound before the keyframe that follows it and none
//! of the sound after it, so a segment that ends at that keyframe holds its sound to its end
//! and the next starts its sound there, and the pre-roll keeps each moment's sound with its
//! picture. Live viewers get each frame at once: only the recorder's copy waits.
//!
//! G.711 is gathered on the same side, as it leaves in time order: packets that follow on
//! from each other become one sample of up to [`limits::RECORD_AUDIO_GATHER_MS`], charged to
//! the queue as they come. What is gathered goes ahead of each keyframe up to that
//! keyframe's time (a G.711 sample splits anywhere), so a segment cut there still holds its
//! sound to its end.
//!
//! A frame's bytes stay charged to the queue until the stream's next frame is taken. By then
//! the writer has it in hand for its next write, at most [`limits::RECORD_WRITE_BATCH_MAX_BYTES`]
//! a writer, which the budget counts apart, or a pre-roll history holds it in its own pool.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::BytesMut;
use tokio::sync::mpsc;

use crate::base::BytePool;
use crate::limits;
use crate::media::{AudioCodec, AudioFrame, AudioParams, Frame, audio};

/// What a recorder thread receives.
#[derive(Debug)]
pub enum StreamMsg {
    /// A frame; `after_gap` when frames were lost (or the session restarted) before it.
    Frame { frame: Frame, after_gap: bool },
    /// An audio frame of the same session.
    Audio(AudioFrame),
    /// The camera session ended: close what is open rather than wait for the next frame.
    SessionEnded,
}

impl StreamMsg {
    fn bytes(&self) -> usize {
        match self {
            StreamMsg::Frame { frame, .. } => frame.data.len(),
            StreamMsg::Audio(a) => a.data.len(),
            StreamMsg::SessionEnded => 0,
        }
    }
}

/// Counters shared between the two ends.
#[derive(Debug, Default)]
pub struct QueueStats {
    pub bytes_in_flight: AtomicUsize,
    pub frames_dropped: AtomicU64,
}

/// The ingest's end of the queue.
pub struct FrameSender {
    tx: mpsc::Sender<StreamMsg>,
    stats: Arc<QueueStats>,
    pool: Arc<BytePool>,
    need_keyframe: bool,
    gap: bool,
    /// Video frames (and their `after_gap`) charged to the queue but held until the
    /// session's audio reaches them, oldest first.
    held: VecDeque<(Frame, bool)>,
    /// Audio frames (and when they came, µs monotonic) charged to the queue but held until
    /// the session's video reaches them, oldest first.
    held_audio: VecDeque<(AudioFrame, i64)>,
    /// The start of the newest audio frame sent, on the video's timeline (90 kHz).
    audio_reached_90k: Option<i64>,
    /// The time of the newest video frame sent (90 kHz).
    video_reached_90k: Option<i64>,
    /// G.711 gathered into one sample, not yet queued.
    gathered: Option<Gathered>,
}

/// G.711 packets that follow on from each other, gathered into one sample (see the module's
/// notes); its bytes are charged to the queue.
struct Gathered {
    pts_90k: i64,
    samples: u32,
    /// Bytes a sample: the stream's channels.
    sample_bytes: usize,
    data: BytesMut,
    params: Arc<AudioParams>,
}

impl Gathered {
    /// The most samples one holds.
    fn max_samples(params: &AudioParams) -> u32 {
        let by_time = u64::from(params.sample_rate) * limits::RECORD_AUDIO_GATHER_MS / 1000;
        u32::try_from(by_time).unwrap_or(u32::MAX).max(1)
    }

    /// A gathering that starts with `frame`, if it is G.711 of whole samples.
    fn start(frame: &AudioFrame) -> Option<Gathered> {
        if !matches!(frame.params.codec, AudioCodec::Pcmu | AudioCodec::Pcma) || frame.duration_samples == 0 {
            return None;
        }
        let sample_bytes = frame.data.len() / frame.duration_samples as usize;
        if sample_bytes == 0 || sample_bytes * frame.duration_samples as usize != frame.data.len() {
            return None;
        }
        let max = Gathered::max_samples(&frame.params) as usize * sample_bytes;
        let mut data = BytesMut::with_capacity(max.max(frame.data.len()));
        data.extend_from_slice(&frame.data);
        Some(Gathered {
            pts_90k: frame.pts_90k,
            samples: frame.duration_samples,
            sample_bytes,
            data,
            params: frame.params.clone(),
        })
    }

    /// The 90 kHz time `samples` after the start.
    fn at(&self, samples: u32) -> i64 {
        let ticks = i64::from(samples) * 90_000 / i64::from(self.params.sample_rate.max(1));
        self.pts_90k.saturating_add(ticks)
    }

    /// Takes `frame` if it follows on from what is gathered (same stream, the next sample
    /// within a tick of rounding) and fits.
    fn take(&mut self, frame: &AudioFrame) -> bool {
        let follows = Arc::ptr_eq(&self.params, &frame.params)
            && frame.data.len() == frame.duration_samples as usize * self.sample_bytes
            && frame.pts_90k.abs_diff(self.at(self.samples)) <= 1
            && self.samples.saturating_add(frame.duration_samples) <= Gathered::max_samples(&self.params);
        if follows {
            self.data.extend_from_slice(&frame.data);
            self.samples += frame.duration_samples;
        }
        follows
    }

    /// Splits off the samples that start before `before_90k` (all of them for `None`).
    fn split(&mut self, before_90k: Option<i64>) -> Option<AudioFrame> {
        let n = match before_90k {
            None => self.samples,
            Some(t) => audio::samples_before(self.pts_90k, self.params.sample_rate, t).min(self.samples),
        };
        if n == 0 {
            return None;
        }
        let data = self.data.split_to(n as usize * self.sample_bytes).freeze();
        let frame = AudioFrame { pts_90k: self.pts_90k, duration_samples: n, data, params: self.params.clone() };
        self.pts_90k = self.at(n);
        self.samples -= n;
        Some(frame)
    }
}

/// The recorder's end of the queue.
pub struct FrameReceiver {
    rx: mpsc::Receiver<StreamMsg>,
    stats: Arc<QueueStats>,
    pool: Arc<BytePool>,
    /// Bytes of the newest frame taken, charged until the next one is.
    newest_bytes: usize,
}

/// What [`FrameReceiver::try_recv`] found.
#[derive(Debug)]
pub enum Recv {
    Msg(StreamMsg),
    /// Nothing queued now.
    Empty,
    /// Every sender is gone and the queue is drained.
    Closed,
}

/// Makes a queue for one stream, its bytes taken from `pool`.
pub fn channel(pool: &Arc<BytePool>) -> (FrameSender, FrameReceiver, Arc<QueueStats>) {
    let (tx, rx) = mpsc::channel(limits::INGEST_QUEUE_FRAMES);
    let stats = Arc::new(QueueStats::default());
    (
        FrameSender {
            tx,
            stats: stats.clone(),
            pool: pool.clone(),
            need_keyframe: false,
            gap: true,
            held: VecDeque::new(),
            held_audio: VecDeque::new(),
            audio_reached_90k: None,
            video_reached_90k: None,
            gathered: None,
        },
        FrameReceiver { rx, stats: stats.clone(), pool: pool.clone(), newest_bytes: 0 },
        stats,
    )
}

impl FrameSender {
    /// Queues a frame if it fits; returns false when it was dropped. A frame of a session
    /// with sound is held until the session's audio reaches it (see the module's notes).
    pub fn send(&mut self, frame: Frame) -> bool {
        if self.need_keyframe && !frame.is_key {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let after_gap = self.gap;
        self.video_reached_90k = Some(frame.pts_90k);
        if frame.audio.is_none() && self.held.is_empty() {
            // A session without sound now: what the one before held and gathered goes first.
            self.release(frame.received_mono_us, true);
            self.flush_gathered(None);
            if self.queue(StreamMsg::Frame { frame, after_gap }) {
                self.need_keyframe = false;
                self.gap = false;
                return true;
            }
            self.dropped();
            return false;
        }
        if !self.reserve(frame.data.len()) {
            self.dropped();
            return false;
        }
        self.need_keyframe = false;
        self.gap = false;
        let now_mono_us = frame.received_mono_us;
        self.held.push_back((frame, after_gap));
        self.release(now_mono_us, false);
        true
    }

    /// Takes an audio frame if it fits; it is held until the video reaches it (see the
    /// module's notes). Audio is small and never waits for a keyframe, but counts against the
    /// same byte ceilings. The video frames held for audio up to its start go first.
    pub fn send_audio(&mut self, frame: AudioFrame, now_mono_us: i64) -> bool {
        if !self.reserve(frame.data.len()) {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.audio_reached_90k = Some(frame.pts_90k);
        self.held_audio.push_back((frame, now_mono_us));
        self.release(now_mono_us, false);
        true
    }

    /// Hands on an audio frame whose turn came, its bytes charged already: G.711 is
    /// gathered (see the module's notes), other sound queued as it is.
    fn pass_audio(&mut self, frame: AudioFrame) {
        if !matches!(frame.params.codec, AudioCodec::Pcmu | AudioCodec::Pcma) {
            self.flush_gathered(None);
            self.send_charged(StreamMsg::Audio(frame));
            return;
        }
        let taken = self.gathered.as_mut().is_some_and(|g| g.take(&frame));
        if !taken {
            self.flush_gathered(None);
            match Gathered::start(&frame) {
                Some(g) => self.gathered = Some(g),
                None => {
                    // Not whole samples: it goes as it came.
                    self.send_charged(StreamMsg::Audio(frame));
                    return;
                }
            }
        }
        if self.gathered.as_ref().is_some_and(|g| g.samples >= Gathered::max_samples(&g.params)) {
            self.flush_gathered(None);
        }
    }

    /// Queues `msg`, its bytes charged already; counted as dropped (its charge given back)
    /// if the queue is full.
    fn send_charged(&mut self, msg: StreamMsg) {
        let len = msg.bytes();
        if self.tx.try_send(msg).is_err() {
            self.unreserve(len);
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Queues the gathered G.711 that starts before `before_90k` (all of it for `None`);
    /// its bytes are charged already.
    fn flush_gathered(&mut self, before_90k: Option<i64>) {
        let Some(g) = &mut self.gathered else { return };
        let frame = g.split(before_90k);
        if g.samples == 0 {
            self.gathered = None;
        }
        if let Some(frame) = frame {
            self.send_charged(StreamMsg::Audio(frame));
        }
    }

    /// Hands on, in the order of their times, the held frames the other track has reached,
    /// that waited their longest, or past the count ceilings; every one when `all`. (Of two
    /// held fronts, the earlier has always been reached by the other track, whose front is
    /// later; a picture goes before sound of the same time, which a segment starting there
    /// holds.)
    fn release(&mut self, now_mono_us: i64, all: bool) {
        loop {
            let video = self.held.front().map(|(f, _)| f.pts_90k);
            let audio = self.held_audio.front().map(|(a, _)| a.pts_90k);
            let video_first = match (video, audio) {
                (Some(v), Some(a)) => v <= a,
                (v, a) => v.is_some() || a.is_none(),
            };
            if !video_first {
                let (front, came_mono_us) = self.held_audio.front().expect("checked");
                let seen = self.video_reached_90k.is_some_and(|v| v >= front.pts_90k);
                let waited = now_mono_us - came_mono_us >= limits::AUDIO_AHEAD_WAIT_MS as i64 * 1000;
                if !(all || seen || waited || self.held_audio.len() > limits::AUDIO_AHEAD_HOLD_FRAMES) {
                    break;
                }
                let (frame, _) = self.held_audio.pop_front().expect("front exists");
                self.pass_audio(frame);
                continue;
            }
            let Some((front, _)) = self.held.front() else { break };
            let heard = self.audio_reached_90k.is_some_and(|a| a >= front.pts_90k);
            let waited = now_mono_us - front.received_mono_us >= limits::AUDIO_SYNC_WAIT_MS as i64 * 1000;
            if !(all || heard || waited || self.held.len() > limits::AUDIO_SYNC_HOLD_FRAMES) {
                break;
            }
            let (frame, after_gap) = self.held.pop_front().expect("front exists");
            if frame.is_key {
                // A segment may end here: the sound before it goes first.
                self.flush_gathered(Some(frame.pts_90k));
            }
            let len = frame.data.len();
            if let Err(e) = self.tx.try_send(StreamMsg::Frame { frame, after_gap }) {
                // The recorder is behind: this frame and the rest until a keyframe go.
                drop(e);
                self.unreserve(len);
                self.dropped();
                while self.held.front().is_some_and(|(f, _)| !f.is_key) {
                    let (f, _) = self.held.pop_front().expect("front exists");
                    self.unreserve(f.data.len());
                    self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
                }
                if let Some((_, after_gap)) = self.held.front_mut() {
                    // A held keyframe goes on, and starts the new run.
                    *after_gap = true;
                    self.need_keyframe = false;
                    self.gap = false;
                }
            }
        }
    }

    /// A frame dropped: the frames after it are useless until the next keyframe.
    fn dropped(&mut self) {
        self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        self.need_keyframe = true;
        self.gap = true;
    }

    /// Queues `msg` if its bytes fit the stream's ceiling and the pool.
    fn queue(&mut self, msg: StreamMsg) -> bool {
        let len = msg.bytes();
        if !self.reserve(len) {
            return false;
        }
        if self.tx.try_send(msg).is_ok() {
            return true;
        }
        self.unreserve(len);
        false
    }

    /// Charges `len` bytes to the stream's ceiling and the pool, if both have room.
    fn reserve(&mut self, len: usize) -> bool {
        let stream_fits = self
            .stats
            .bytes_in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + len <= limits::INGEST_QUEUE_BYTES_PER_STREAM).then_some(held + len)
            })
            .is_ok();
        if !stream_fits {
            return false;
        }
        if !self.pool.reserve(len) {
            self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn unreserve(&mut self, len: usize) {
        self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
        self.pool.release(len);
    }

    /// Counts a frame that ingest refused (over a ceiling): the frames after it are useless
    /// until the next keyframe.
    pub fn reject(&mut self) {
        self.release(0, true);
        self.flush_gathered(None);
        self.dropped();
    }

    /// Tells the recorder the session ended; the next frame starts a new run. The frames
    /// held for each other go first: what they waited for will not come.
    pub fn session_ended(&mut self) {
        self.release(0, true);
        self.flush_gathered(None);
        self.audio_reached_90k = None;
        self.video_reached_90k = None;
        self.gap = true;
        self.need_keyframe = false;
        // If the queue is full the recorder is busy and will see `after_gap` instead.
        let _ = self.tx.try_send(StreamMsg::SessionEnded);
    }
}

impl Drop for FrameSender {
    /// The frames held go to the recorder, which drains the queue as it closes.
    fn drop(&mut self) {
        self.release(0, true);
        self.flush_gathered(None);
    }
}

impl FrameReceiver {
    /// The next message, without waiting. A frame's bytes stay charged until the next frame
    /// is taken (or the session ends); audio's are given back at once.
    pub fn try_recv(&mut self) -> Recv {
        match self.rx.try_recv() {
            Ok(msg) => {
                let len = msg.bytes();
                match &msg {
                    StreamMsg::Frame { .. } => {
                        let before = std::mem::replace(&mut self.newest_bytes, len);
                        self.give_back(before);
                    }
                    StreamMsg::Audio(_) => self.give_back(len),
                    StreamMsg::SessionEnded => {
                        let before = std::mem::take(&mut self.newest_bytes);
                        self.give_back(before);
                    }
                }
                Recv::Msg(msg)
            }
            Err(mpsc::error::TryRecvError::Empty) => Recv::Empty,
            Err(mpsc::error::TryRecvError::Disconnected) => Recv::Closed,
        }
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    fn give_back(&self, len: usize) {
        self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
        self.pool.release(len);
    }
}

impl Drop for FrameReceiver {
    fn drop(&mut self) {
        let newest = std::mem::take(&mut self.newest_bytes);
        self.give_back(newest);
        // Messages left in the queue carry charges too.
        while let Ok(msg) = self.rx.try_recv() {
            self.give_back(msg.bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize, is_key: bool) -> Frame {
        Frame::for_test(len, is_key)
    }

    fn next(rx: &mut FrameReceiver) -> StreamMsg {
        match rx.try_recv() {
            Recv::Msg(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_frame_ceiling_drops_until_the_next_keyframe() {
        let (mut tx, mut rx, stats) = channel(&BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64));
        for i in 0..limits::INGEST_QUEUE_FRAMES {
            assert!(tx.send(frame(10, i == 0)), "frame {i} fits");
        }
        assert!(!tx.send(frame(10, false)), "the queue is full");
        assert_eq!(stats.frames_dropped.load(Ordering::Relaxed), 1);
        let first = next(&mut rx);
        assert!(matches!(first, StreamMsg::Frame { after_gap: true, .. }));
        assert!(!tx.send(frame(10, false)), "room again, but not a keyframe");
        assert!(tx.send(frame(10, true)));
        while let Recv::Msg(StreamMsg::Frame { after_gap, frame }) = rx.try_recv() {
            if frame.is_key {
                assert!(after_gap, "the keyframe after a drop starts a new run");
            }
        }
    }

    #[test]
    fn the_byte_ceiling_drops_frames_that_would_pass_it() {
        let (mut tx, _rx, stats) = channel(&BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64));
        let half = limits::INGEST_QUEUE_BYTES_PER_STREAM / 2;
        assert!(tx.send(frame(half, true)));
        assert!(tx.send(frame(half, false)));
        assert!(!tx.send(frame(1, false)));
        assert_eq!(stats.bytes_in_flight.load(Ordering::Relaxed), limits::INGEST_QUEUE_BYTES_PER_STREAM);
    }

    #[test]
    fn every_queue_together_stops_at_the_pool_ceiling() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let each = limits::INGEST_QUEUE_BYTES_PER_STREAM;
        let streams = pool.max_bytes() / each;
        let mut queues: Vec<_> = (0..streams + 1).map(|_| channel(&pool)).collect();
        for (tx, _, _) in &mut queues[..streams] {
            assert!(tx.send(frame(each, true)), "each stream's own ceiling, within the pool");
        }
        assert_eq!(pool.held_bytes(), limits::INGEST_QUEUE_BYTES_PER_GIB, "the pool is full");
        let (tx, _, stats) = &mut queues[streams];
        assert!(!tx.send(frame(1, true)), "one more stream finds the pool full");
        assert_eq!(stats.frames_dropped.load(Ordering::Relaxed), 1);
        assert!(!tx.send(frame(1, false)), "and drops until the next keyframe");
        queues.truncate(1);
        assert_eq!(pool.held_bytes(), each, "dropped queues give their bytes back");
    }

    /// A frame of a session with sound, at `pts_90k`, received at `mono_us`.
    fn heard_frame(pts_90k: i64, mono_us: i64, is_key: bool) -> Frame {
        let mut f = frame(10, is_key);
        (f.pts_90k, f.received_mono_us) = (pts_90k, mono_us);
        f.audio = Some(Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap()));
        f
    }

    /// 20 ms of Opus at `pts_90k`: sound that goes to the queue as it comes.
    fn audio_at(pts_90k: i64) -> AudioFrame {
        let params = Arc::new(crate::media::audio::opus_params(1, 0).unwrap());
        AudioFrame { pts_90k, duration_samples: 960, data: vec![0xff; 160].into(), params }
    }

    /// A G.711 packet of `samples` at `pts_90k` of the stream with `params`.
    fn g711_at(params: &Arc<AudioParams>, pts_90k: i64, samples: u32) -> AudioFrame {
        AudioFrame {
            pts_90k,
            duration_samples: samples,
            data: vec![0xff; samples as usize].into(),
            params: params.clone(),
        }
    }

    /// What the recorder finds in the queue now, its sound with each sample's length.
    fn order_with_samples(rx: &mut FrameReceiver) -> Vec<String> {
        let mut out = Vec::new();
        while let Recv::Msg(m) = rx.try_recv() {
            out.push(match m {
                StreamMsg::Frame { frame, .. } => format!("V{}", frame.pts_90k),
                StreamMsg::Audio(a) => format!("A{}x{}", a.pts_90k, a.duration_samples),
                StreamMsg::SessionEnded => "end".into(),
            });
        }
        out
    }

    #[test]
    fn g711_is_gathered_up_to_record_audio_gather_ms_and_split_at_a_keyframe() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, stats) = channel(&pool);
        let pcmu = Arc::new(crate::media::audio::g711_params(AudioCodec::Pcmu, 8_000, 1).unwrap());
        let most = (8_000 * limits::RECORD_AUDIO_GATHER_MS / 1000) as u32;
        assert_eq!(most, 800);
        // The pictures to 18,000 came first; twelve 20 ms packets (1,800 ticks each) follow
        // them. The sound goes in time order with the pictures, gathered into samples of
        // the ceiling; the last packet, after the last picture, waits for the next.
        for pts in [0, 6_000, 12_000, 18_000] {
            assert!(tx.send(heard_frame(pts, 0, pts == 0)));
        }
        for k in 0..12 {
            assert!(tx.send_audio(g711_at(&pcmu, k * 1_800, 160), 0));
        }
        assert_eq!(order_with_samples(&mut rx), ["V0", "V6000", "A0x800", "V12000", "A9000x800", "V18000"]);
        assert_eq!(
            stats.bytes_in_flight.load(Ordering::Relaxed),
            160 + 160 + 10,
            "what is gathered and held is charged, and the last frame taken"
        );
        // A keyframe in the middle of a packet gathered waits for the sound; when it comes,
        // the sound before the keyframe goes first, to the sample.
        assert!(tx.send(heard_frame(24_000, 0, true)));
        assert!(tx.send_audio(g711_at(&pcmu, 21_600, 160), 0));
        assert!(tx.send_audio(g711_at(&pcmu, 23_400, 160), 0));
        assert!(order_with_samples(&mut rx).is_empty());
        assert!(tx.send_audio(g711_at(&pcmu, 25_200, 160), 0));
        // 6,000 ticks of 8 kHz sound are 533 1/3 samples: 534 start before the keyframe.
        assert_eq!(order_with_samples(&mut rx), ["A18000x534", "V24000"]);
        // The rest follows on (the held packet joins it) at the session's end.
        tx.session_ended();
        assert_eq!(order_with_samples(&mut rx), ["A24007x266", "end"]);
        assert_eq!((stats.bytes_in_flight.load(Ordering::Relaxed), pool.held_bytes()), (0, 0));
        assert_eq!(stats.frames_dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn gathered_g711_goes_before_other_sound_and_at_the_senders_end() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, _) = channel(&pool);
        let pcma = Arc::new(crate::media::audio::g711_params(AudioCodec::Pcma, 8_000, 1).unwrap());
        assert!(tx.send(heard_frame(6_000, 0, true)));
        assert!(tx.send_audio(g711_at(&pcma, 0, 160), 0));
        // The camera switched to Opus: the G.711 before it goes first.
        assert!(tx.send_audio(audio_at(1_800), 0));
        assert!(tx.send_audio(g711_at(&pcma, 3_600, 160), 0));
        assert_eq!(order_with_samples(&mut rx), ["A0x160", "A1800x960"]);
        // The sender goes: the held keyframe goes on, what was gathered before it first.
        drop(tx);
        assert_eq!(order_with_samples(&mut rx), ["A3600x160", "V6000"]);
        drop(rx);
        assert_eq!(pool.held_bytes(), 0);
    }

    /// What the recorder finds in the queue now: `V<pts>` for a frame, `A<pts>` for audio.
    fn order(rx: &mut FrameReceiver) -> Vec<String> {
        let mut out = Vec::new();
        while let Recv::Msg(m) = rx.try_recv() {
            out.push(match m {
                StreamMsg::Frame { frame, .. } => format!("V{}", frame.pts_90k),
                StreamMsg::Audio(a) => format!("A{}", a.pts_90k),
                StreamMsg::SessionEnded => "end".into(),
            });
        }
        out
    }

    #[test]
    fn a_frame_with_sound_waits_until_the_audio_reaches_it() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, stats) = channel(&pool);
        // The picture of 0 and 6000 comes before the sound of the same moments.
        assert!(tx.send(heard_frame(0, 0, true)));
        assert!(tx.send(heard_frame(6_000, 66_000, false)));
        assert!(order(&mut rx).is_empty(), "both wait for their sound");
        assert_eq!(stats.bytes_in_flight.load(Ordering::Relaxed), 20, "held frames are charged to the queue");
        assert!(tx.send_audio(audio_at(0), 70_000));
        assert!(tx.send_audio(audio_at(1_800), 90_000));
        assert!(tx.send_audio(audio_at(3_600), 110_000));
        assert!(tx.send_audio(audio_at(5_400), 130_000));
        assert_eq!(order(&mut rx), ["V0", "A0", "A1800", "A3600", "A5400"]);
        assert!(tx.send_audio(audio_at(7_200), 150_000));
        assert_eq!(order(&mut rx), ["V6000"], "the sound before 6000 went first");
        // The sound after the last picture waits for the next.
        assert!(tx.send(heard_frame(12_000, 132_000, false)));
        assert_eq!(order(&mut rx), ["A7200"]);
    }

    #[test]
    fn sound_before_its_picture_waits_for_it_at_most_audio_ahead_wait_ms_and_audio_ahead_hold_frames() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, stats) = channel(&pool);
        // A camera whose pictures come after the sound of the same moments.
        for pts in [0, 1_800, 3_600] {
            assert!(tx.send_audio(audio_at(pts), 0));
        }
        assert!(order(&mut rx).is_empty(), "the sound waits for its pictures");
        assert_eq!(stats.bytes_in_flight.load(Ordering::Relaxed), 3 * 160, "held sound is charged to the queue");
        assert!(tx.send(heard_frame(0, 10_000, true)));
        assert_eq!(order(&mut rx), ["V0", "A0"], "a picture goes before the sound of its moment");
        assert!(tx.send(heard_frame(6_000, 20_000, false)));
        assert_eq!(order(&mut rx), ["A1800", "A3600"]);
        // No picture comes: sound that waited its longest goes on when the next comes.
        let wait_us = limits::AUDIO_AHEAD_WAIT_MS as i64 * 1000;
        assert!(tx.send_audio(audio_at(100_000), 30_000));
        assert!(tx.send_audio(audio_at(101_800), 30_000 + wait_us - 1));
        assert_eq!(order(&mut rx), ["V6000"], "the picture the sound reached goes");
        assert!(tx.send_audio(audio_at(103_600), 30_000 + wait_us));
        assert_eq!(order(&mut rx), ["A100000"]);
        // However fast sound comes, no more than the ceiling waits.
        for i in 0..limits::AUDIO_AHEAD_HOLD_FRAMES as i64 {
            assert!(tx.send_audio(audio_at(110_000 + i), 30_000 + wait_us));
        }
        assert_eq!(order(&mut rx), ["A101800", "A103600"]);
        assert_eq!(tx.held_audio.len(), limits::AUDIO_AHEAD_HOLD_FRAMES);
        // The session's end hands every held frame on.
        tx.session_ended();
        assert_eq!(order(&mut rx).len(), limits::AUDIO_AHEAD_HOLD_FRAMES + 1);
        drop(tx);
        drop(rx);
        assert_eq!(pool.held_bytes(), 0);
        assert_eq!(stats.frames_dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_frame_waits_for_sound_at_most_audio_sync_wait_ms_and_audio_sync_hold_frames() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, _) = channel(&pool);
        let wait_us = limits::AUDIO_SYNC_WAIT_MS as i64 * 1000;
        assert!(tx.send(heard_frame(0, 0, true)));
        assert!(tx.send(heard_frame(3_000, wait_us - 1, false)));
        assert!(order(&mut rx).is_empty());
        // No sound comes: a frame that waited its longest goes on when the next one comes.
        assert!(tx.send(heard_frame(6_000, wait_us, false)));
        assert_eq!(order(&mut rx), ["V0"]);
        // However fast frames come, no more than the ceiling wait.
        for i in 0..limits::AUDIO_SYNC_HOLD_FRAMES as i64 {
            assert!(tx.send(heard_frame(9_000 + i, wait_us, false)));
        }
        assert_eq!(order(&mut rx), ["V3000", "V6000"]);
        assert_eq!(tx.held.len(), limits::AUDIO_SYNC_HOLD_FRAMES);
        // The session's end, or the sender's, hands every held frame on.
        tx.session_ended();
        assert_eq!(order(&mut rx).len(), limits::AUDIO_SYNC_HOLD_FRAMES + 1);
        assert!(tx.send(heard_frame(0, 0, true)));
        drop(tx);
        assert_eq!(order(&mut rx), ["V0"]);
    }

    #[test]
    fn a_full_queue_drops_held_frames_until_a_held_keyframe() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, stats) = channel(&pool);
        for _ in 0..limits::INGEST_QUEUE_FRAMES {
            assert!(tx.send(frame(1, true)));
        }
        for (pts, key) in [(0, true), (1, false), (2, true)] {
            assert!(tx.send(heard_frame(pts, 0, key)));
        }
        // The sound reaches them but the recorder has taken nothing: 0 and 1 are lost, and
        // the sound that could not go either; 2 is still held, a keyframe after a gap.
        assert!(tx.send_audio(audio_at(1), 0));
        assert_eq!(stats.frames_dropped.load(Ordering::Relaxed), 3);
        assert_eq!(order(&mut rx).len(), limits::INGEST_QUEUE_FRAMES);
        assert!(tx.send_audio(audio_at(2), 0));
        match rx.try_recv() {
            Recv::Msg(StreamMsg::Frame { frame, after_gap }) => {
                assert!(frame.is_key && after_gap && frame.pts_90k == 2)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(stats.bytes_in_flight.load(Ordering::Relaxed), 10 + 160, "the taken frame and the audio");
    }

    #[test]
    fn a_frame_stays_charged_until_the_next_is_taken() {
        let pool = BytePool::shared(limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let (mut tx, mut rx, stats) = channel(&pool);
        assert!(tx.send(frame(100, true)));
        assert!(tx.send(frame(50, false)));
        let _ = next(&mut rx);
        assert_eq!(pool.held_bytes(), 150, "the newest frame taken stays charged");
        let _ = next(&mut rx);
        assert_eq!(pool.held_bytes(), 50);
        tx.session_ended();
        let _ = next(&mut rx);
        assert_eq!((pool.held_bytes(), stats.bytes_in_flight.load(Ordering::Relaxed)), (0, 0));
        assert!(matches!(rx.try_recv(), Recv::Empty));
        drop(tx);
        assert!(matches!(rx.try_recv(), Recv::Closed));
    }
}

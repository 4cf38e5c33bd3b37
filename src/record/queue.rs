//! The bounded hand-off from a stream's ingest to its recorder thread.
//!
//! Bounded twice: [`limits::INGEST_QUEUE_FRAMES`] messages and
//! [`limits::INGEST_QUEUE_BYTES_PER_STREAM`] bytes of frame data in flight. Ingest never waits
//! on the disk: a frame that does not fit is dropped and counted, and so is every frame after
//! it until the next keyframe (a decoder cannot use them). The first frame queued after a
//! drop or a reconnect carries `after_gap`, which ends the recorder's run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::mpsc;

use crate::limits;
use crate::media::{AudioFrame, Frame};

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
    need_keyframe: bool,
    gap: bool,
}

/// The recorder's end of the queue.
pub struct FrameReceiver {
    rx: mpsc::Receiver<StreamMsg>,
    stats: Arc<QueueStats>,
}

/// Makes a queue for one stream.
pub fn channel() -> (FrameSender, FrameReceiver, Arc<QueueStats>) {
    let (tx, rx) = mpsc::channel(limits::INGEST_QUEUE_FRAMES);
    let stats = Arc::new(QueueStats::default());
    (
        FrameSender { tx, stats: stats.clone(), need_keyframe: false, gap: true },
        FrameReceiver { rx, stats: stats.clone() },
        stats,
    )
}

impl FrameSender {
    /// Queues a frame if it fits; returns false when it was dropped.
    pub fn send(&mut self, frame: Frame) -> bool {
        if self.need_keyframe && !frame.is_key {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let len = frame.data.len();
        let in_flight = self.stats.bytes_in_flight.load(Ordering::Relaxed);
        let fits = in_flight + len <= limits::INGEST_QUEUE_BYTES_PER_STREAM;
        if fits {
            self.stats.bytes_in_flight.fetch_add(len, Ordering::Relaxed);
            match self.tx.try_send(StreamMsg::Frame { frame, after_gap: self.gap }) {
                Ok(()) => {
                    self.need_keyframe = false;
                    self.gap = false;
                    return true;
                }
                Err(_) => {
                    self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
                }
            }
        }
        self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        self.need_keyframe = true;
        self.gap = true;
        false
    }

    /// Queues an audio frame if it fits; audio is small and never waits for a keyframe, but
    /// counts against the same byte ceiling.
    pub fn send_audio(&mut self, frame: AudioFrame) -> bool {
        let len = frame.data.len();
        if self.stats.bytes_in_flight.load(Ordering::Relaxed) + len <= limits::INGEST_QUEUE_BYTES_PER_STREAM {
            self.stats.bytes_in_flight.fetch_add(len, Ordering::Relaxed);
            if self.tx.try_send(StreamMsg::Audio(frame)).is_ok() {
                return true;
            }
            self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
        }
        self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Counts a frame that ingest refused (over a ceiling): the frames after it are useless
    /// until the next keyframe.
    pub fn reject(&mut self) {
        self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        self.need_keyframe = true;
        self.gap = true;
    }

    /// Tells the recorder the session ended; the next frame starts a new run.
    pub fn session_ended(&mut self) {
        self.gap = true;
        self.need_keyframe = false;
        // If the queue is full the recorder is busy and will see `after_gap` instead.
        let _ = self.tx.try_send(StreamMsg::SessionEnded);
    }
}

impl FrameReceiver {
    /// The next message for the (non-async) recorder thread; `None` once every sender is
    /// gone and the queue is drained. When the queue is empty it sleeps
    /// [`limits::RECORDER_POLL_INTERVAL_MS`] and looks again, so a stream costs a few thread
    /// wakes a second rather than one per frame.
    pub fn recv(&mut self) -> Option<StreamMsg> {
        loop {
            match self.rx.try_recv() {
                Ok(msg) => {
                    let len = match &msg {
                        StreamMsg::Frame { frame, .. } => frame.data.len(),
                        StreamMsg::Audio(a) => a.data.len(),
                        StreamMsg::SessionEnded => 0,
                    };
                    self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
                    return Some(msg);
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {
                    std::thread::sleep(std::time::Duration::from_millis(limits::RECORDER_POLL_INTERVAL_MS));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize, is_key: bool) -> Frame {
        Frame::for_test(len, is_key)
    }

    #[test]
    fn the_frame_ceiling_drops_until_the_next_keyframe() {
        let (mut tx, mut rx, stats) = channel();
        for i in 0..limits::INGEST_QUEUE_FRAMES {
            assert!(tx.send(frame(10, i == 0)), "frame {i} fits");
        }
        assert!(!tx.send(frame(10, false)), "the queue is full");
        assert_eq!(stats.frames_dropped.load(Ordering::Relaxed), 1);
        let first = rx.recv().unwrap();
        assert!(matches!(first, StreamMsg::Frame { after_gap: true, .. }));
        assert!(!tx.send(frame(10, false)), "room again, but not a keyframe");
        assert!(tx.send(frame(10, true)));
        while let Some(StreamMsg::Frame { after_gap, frame }) = rx.rx.try_recv().ok() {
            if frame.is_key {
                assert!(after_gap, "the keyframe after a drop starts a new run");
            }
        }
    }

    #[test]
    fn the_byte_ceiling_drops_frames_that_would_pass_it() {
        let (mut tx, _rx, stats) = channel();
        let half = limits::INGEST_QUEUE_BYTES_PER_STREAM / 2;
        assert!(tx.send(frame(half, true)));
        assert!(tx.send(frame(half, false)));
        assert!(!tx.send(frame(1, false)));
        assert_eq!(stats.bytes_in_flight.load(Ordering::Relaxed), limits::INGEST_QUEUE_BYTES_PER_STREAM);
    }
}

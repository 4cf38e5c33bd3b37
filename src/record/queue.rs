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
//! A frame's bytes stay charged to the queue until the stream's next frame is taken. By then
//! the writer has it in hand for its next write, at most [`limits::RECORD_WRITE_BATCH_MAX_BYTES`]
//! a writer, which the budget counts apart, or a pre-roll history holds it in its own pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::mpsc;

use crate::base::BytePool;
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
        FrameSender { tx, stats: stats.clone(), pool: pool.clone(), need_keyframe: false, gap: true },
        FrameReceiver { rx, stats: stats.clone(), pool: pool.clone(), newest_bytes: 0 },
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
        let after_gap = self.gap;
        if self.queue(StreamMsg::Frame { frame, after_gap }) {
            self.need_keyframe = false;
            self.gap = false;
            return true;
        }
        self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        self.need_keyframe = true;
        self.gap = true;
        false
    }

    /// Queues an audio frame if it fits; audio is small and never waits for a keyframe, but
    /// counts against the same byte ceilings.
    pub fn send_audio(&mut self, frame: AudioFrame) -> bool {
        let queued = self.queue(StreamMsg::Audio(frame));
        if !queued {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        }
        queued
    }

    /// Queues `msg` if its bytes fit the stream's ceiling and the pool.
    fn queue(&mut self, msg: StreamMsg) -> bool {
        let len = msg.bytes();
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
        if self.tx.try_send(msg).is_ok() {
            return true;
        }
        self.stats.bytes_in_flight.fetch_sub(len, Ordering::Relaxed);
        self.pool.release(len);
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

//! The live fanout: each stream's frames, as ingest delivers them, to whoever watches live.
//!
//! Frames are shared, never copied: a [`Frame`]'s data is reference-counted, so a tap and
//! the held GOP cost a pointer each. A stream keeps its current GOP (from the newest
//! keyframe on) so a new viewer starts at once; the GOP is capped per stream
//! ([`limits::LIVE_GOP_MAX_BYTES`]) and what of it is in RAM across streams
//! ([`limits::LIVE_GOP_TOTAL_MAX_BYTES`]): a GOP that would pass either cap is dropped, and
//! the stream holds nothing until its next keyframe (a new viewer then waits for it).
//! Once the recorder has written a frame ([`Fanout::written`]) the GOP keeps only where it
//! is, and reads it back for a new viewer: a recorded stream's GOP costs no RAM.
//!
//! Consumers register a tap: a bounded queue ([`limits::LIVE_TAP_FRAMES`], and the bytes of
//! the frames in it against the consumer's pool, [`limits::LIVE_TAP_QUEUE_MAX_BYTES`]) that
//! publication never waits on. A frame in the queue may be the only thing keeping it alive
//! (a consumer that lags holds frames the recorder has written), so its bytes count until
//! the consumer drops it. A frame that does not fit is dropped for that tap and the tap is
//! marked lagged; its consumer skips to the next keyframe.
//!
//! The session's sound goes to the taps too ([`Fanout::publish_audio`]), charged the same
//! way; an audio frame that does not fit is dropped (a moment of silence) and counted, and
//! breaks nothing after it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use tokio::sync::mpsc;

use crate::base::{BytePool, Charge, StreamKey};
use crate::limits;
use crate::media::{AudioFrame, AudioParams, Frame, VideoParams};

/// What a tap receives.
#[derive(Debug)]
pub struct LiveFrame {
    /// Which stream it came from (the key the consumer gave at [`Fanout::tap`]).
    pub stream: StreamKey,
    pub frame: Frame,
    /// Frames were lost before this one on this tap (full queue or a new camera session):
    /// decode state is broken until a keyframe.
    pub after_gap: bool,
    /// The frame's bytes in the consumer's queue pool, given back when it is dropped.
    pub charge: Charge,
}

/// The sound of a stream, as a tap receives it.
#[derive(Debug)]
pub struct LiveAudio {
    pub stream: StreamKey,
    pub frame: AudioFrame,
    /// Its bytes in the consumer's queue pool.
    pub charge: Charge,
}

/// What a tap's queue carries.
#[derive(Debug)]
pub enum Live {
    Video(LiveFrame),
    Audio(LiveAudio),
}

struct Tap {
    id: u64,
    stream: StreamKey,
    tx: mpsc::Sender<Live>,
    /// The bytes of the frames in the consumer's queue.
    queue: Arc<BytePool>,
    lagged: bool,
}

/// A frame of the held GOP: in RAM until the recorder has written it, then in its segment
/// file, read back when a viewer starts from it.
#[derive(Clone)]
struct Held {
    /// Its bytes emptied once it is on disk.
    frame: Frame,
    len: usize,
    on_disk: Option<(Arc<File>, u64)>,
}

#[derive(Default)]
struct Inner {
    gop: Vec<Held>,
    /// Bytes of the GOP's frames, against [`limits::LIVE_GOP_MAX_BYTES`].
    gop_bytes: usize,
    /// Bytes of them still in RAM, held in the pool.
    ram_bytes: usize,
    taps: Vec<Tap>,
    /// The codec parameters of the newest frame.
    params: Option<Arc<VideoParams>>,
    /// The codec parameters of the newest audio frame.
    audio: Option<Arc<AudioParams>>,
    /// A camera session ended: every tap's next frame is after a gap.
    session_gap: bool,
    /// Counts [`Fanout::forget_gop`]s: a GOP read back across one may hold what the
    /// recorder wrote where its frames were cut off.
    forgotten: u64,
}

/// Counters of one fanout.
#[derive(Debug, Default)]
pub struct FanoutStats {
    /// Frames a tap had no room for.
    pub tap_drops: AtomicU64,
    /// GOPs dropped at a cap.
    pub gops_dropped: AtomicU64,
    /// Audio frames a tap had no room for.
    pub tap_audio_drops: AtomicU64,
}

/// Bytes of held GOPs across every fanout, against [`limits::LIVE_GOP_TOTAL_MAX_BYTES`].
pub type GopPool = BytePool;

/// The pool every fanout's GOP is held against.
pub fn gop_pool() -> Arc<GopPool> {
    Arc::new(BytePool::new(limits::LIVE_GOP_TOTAL_MAX_BYTES))
}

/// One stream's fanout.
pub struct Fanout {
    inner: Mutex<Inner>,
    pool: Arc<GopPool>,
    next_tap: AtomicU64,
    pub stats: FanoutStats,
    /// How many taps `inner.taps` holds, read without the lock.
    taps_n: AtomicUsize,
    /// The address of the sound parameters `inner.audio` holds (0: none), read without the
    /// lock. `inner.audio` keeps that `Arc` alive, so no other has its address meanwhile.
    audio_at: AtomicUsize,
}

impl Fanout {
    pub fn new(pool: Arc<GopPool>) -> Fanout {
        Fanout {
            inner: Mutex::default(),
            pool,
            next_tap: AtomicU64::new(1),
            stats: FanoutStats::default(),
            taps_n: AtomicUsize::new(0),
            audio_at: AtomicUsize::new(0),
        }
    }

    /// Hands a frame to every tap and keeps it in the GOP; returns whether any tap (a live
    /// viewer) remains.
    pub fn publish(&self, frame: &Frame) -> bool {
        let mut inner = self.inner.lock().expect("fanout lock");
        let len = frame.data.len();
        if inner.params.as_ref().is_none_or(|p| !Arc::ptr_eq(p, &frame.params)) {
            inner.params = Some(frame.params.clone());
        }
        if frame.is_key {
            self.release(&mut inner);
        }
        if frame.is_key || !inner.gop.is_empty() {
            let fits = inner.gop_bytes + len <= limits::LIVE_GOP_MAX_BYTES && self.pool.reserve(len);
            if fits {
                inner.gop.push(Held { frame: frame.clone(), len, on_disk: None });
                inner.gop_bytes += len;
                inner.ram_bytes += len;
            } else {
                // A partial GOP cannot start a decoder: hold nothing until the next keyframe.
                self.stats.gops_dropped.fetch_add(1, Ordering::Relaxed);
                self.release(&mut inner);
            }
        }
        let gap = std::mem::take(&mut inner.session_gap);
        for tap in &mut inner.taps {
            let sent = tap.queue.charge(len).is_some_and(|charge| {
                let after_gap = gap || tap.lagged;
                let item = LiveFrame { stream: tap.stream.clone(), frame: frame.clone(), after_gap, charge };
                tap.tx.try_send(Live::Video(item)).is_ok()
            });
            if sent {
                tap.lagged = false;
            } else {
                tap.lagged = true;
                self.stats.tap_drops.fetch_add(1, Ordering::Relaxed);
            }
        }
        inner.taps.retain(|t| !t.tx.is_closed());
        self.taps_n.store(inner.taps.len(), Ordering::Release);
        !inner.taps.is_empty()
    }

    /// Hands an audio frame to every tap (nothing is held of sound for a new viewer).
    pub fn publish_audio(&self, frame: &AudioFrame) {
        // Most of the time no one watches and the sound's parameters are those held: then
        // there is nothing to do, and it is known without the lock (at 50 packets a second a
        // camera, taking it was a measured part of what recording sound cost).
        let at = Arc::as_ptr(&frame.params) as usize;
        if self.taps_n.load(Ordering::Acquire) == 0 && self.audio_at.load(Ordering::Acquire) == at {
            return;
        }
        let mut inner = self.inner.lock().expect("fanout lock");
        if inner.audio.as_ref().is_none_or(|p| !Arc::ptr_eq(p, &frame.params)) {
            inner.audio = Some(frame.params.clone());
            self.audio_at.store(at, Ordering::Release);
        }
        for tap in &inner.taps {
            let sent = tap.queue.charge(frame.data.len()).is_some_and(|charge| {
                let item = LiveAudio { stream: tap.stream.clone(), frame: frame.clone(), charge };
                tap.tx.try_send(Live::Audio(item)).is_ok()
            });
            if !sent {
                self.stats.tap_audio_drops.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn release(&self, inner: &mut Inner) {
        self.pool.release(inner.ram_bytes);
        inner.gop.clear();
        inner.gop_bytes = 0;
        inner.ram_bytes = 0;
    }

    /// The recorder wrote a frame (`data`) at `offset` of `file`: if the GOP holds it, it
    /// holds where it is instead, and its RAM goes back to the pool.
    pub fn written(&self, data: &Bytes, file: &Arc<File>, offset: u64) {
        if data.is_empty() {
            return;
        }
        let mut guard = self.inner.lock().expect("fanout lock");
        let inner = &mut *guard;
        // The GOP's own reference keeps its frames' bytes alive, so no other frame can have
        // the same address while it is held.
        let held = inner.gop.iter_mut().rev().find(|h| h.on_disk.is_none() && h.frame.data.as_ptr() == data.as_ptr());
        if let Some(h) = held.filter(|h| h.len == data.len()) {
            h.frame.data = Bytes::new();
            h.on_disk = Some((file.clone(), offset));
            inner.ram_bytes -= h.len;
            self.pool.release(h.len);
        }
    }

    /// What the recorder wrote may be cut off its file (a failed write): the GOP is let go,
    /// and the next keyframe starts another.
    pub fn forget_gop(&self) {
        let mut inner = self.inner.lock().expect("fanout lock");
        self.release(&mut inner);
        inner.forgotten += 1;
    }

    /// The camera session ended: the GOP is of no use to a new viewer, and every tap's next
    /// frame comes after a gap.
    pub fn session_ended(&self) {
        let mut inner = self.inner.lock().expect("fanout lock");
        self.release(&mut inner);
        inner.session_gap = true;
        inner.params = None;
        inner.audio = None;
        self.audio_at.store(0, Ordering::Release);
    }

    /// The codec parameters of the stream's newest audio frame: none until it has sent one
    /// in this camera session.
    pub fn audio_params(&self) -> Option<Arc<AudioParams>> {
        self.inner.lock().expect("fanout lock").audio.clone()
    }

    /// The codec parameters of the stream's newest frame: none until it has sent one.
    pub fn params(&self) -> Option<Arc<VideoParams>> {
        self.inner.lock().expect("fanout lock").params.clone()
    }

    /// The held GOP (empty when none is held, or when what was written of it cannot be read
    /// back), oldest first. Frames on disk are read from the page cache where the recorder
    /// just wrote them, on the caller's thread; at most [`limits::LIVE_GOP_MAX_BYTES`] (the
    /// budget counts one GOP read back at a time: live view's engine is one task).
    pub fn gop(&self) -> Vec<Frame> {
        let (held, forgotten) = self.held();
        self.read_back(held, forgotten)
    }

    /// The held GOP's frames and places, and how many times it was forgotten so far.
    fn held(&self) -> (Vec<Held>, u64) {
        let inner = self.inner.lock().expect("fanout lock");
        (inner.gop.clone(), inner.forgotten)
    }

    /// Reads `held` (taken when [`Fanout::forget_gop`] had run `forgotten` times) back from
    /// disk, without the lock so the recorder never waits on it; empty if the GOP was
    /// forgotten meanwhile, as the recorder may have written other frames where its were.
    fn read_back(&self, held: Vec<Held>, forgotten: u64) -> Vec<Frame> {
        let mut gop = Vec::with_capacity(held.len());
        for h in held {
            let mut frame = h.frame;
            if let Some((file, offset)) = h.on_disk {
                let mut data = vec![0u8; h.len];
                if let Err(e) = file.read_exact_at(&mut data, offset) {
                    tracing::debug!("cannot read the held GOP back: {e}");
                    return Vec::new();
                }
                frame.data = Bytes::from(data);
            }
            gop.push(frame);
        }
        if self.inner.lock().expect("fanout lock").forgotten != forgotten {
            return Vec::new();
        }
        gop
    }

    /// Registers a tap sending to `tx`, its frames labelled `stream` and their bytes charged
    /// to `queue` while they wait; returns its id.
    pub fn tap(&self, stream: StreamKey, tx: mpsc::Sender<Live>, queue: Arc<BytePool>) -> u64 {
        let id = self.next_tap.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.inner.lock().expect("fanout lock");
        inner.taps.push(Tap { id, stream, tx, queue, lagged: false });
        self.taps_n.store(inner.taps.len(), Ordering::Release);
        id
    }

    pub fn untap(&self, id: u64) {
        let mut inner = self.inner.lock().expect("fanout lock");
        inner.taps.retain(|t| t.id != id);
        self.taps_n.store(inner.taps.len(), Ordering::Release);
    }

    /// Bytes of the held GOP: all of them, and those in RAM.
    pub fn gop_bytes(&self) -> (usize, usize) {
        let inner = self.inner.lock().expect("fanout lock");
        (inner.gop_bytes, inner.ram_bytes)
    }

    pub fn taps(&self) -> usize {
        self.inner.lock().expect("fanout lock").taps.len()
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        let mut inner = std::mem::take(self.inner.get_mut().expect("fanout lock"));
        self.release(&mut inner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize, is_key: bool) -> Frame {
        Frame::for_test(len, is_key)
    }

    fn video(item: Live) -> LiveFrame {
        match item {
            Live::Video(f) => f,
            Live::Audio(a) => panic!("audio where a frame was due: {a:?}"),
        }
    }

    #[test]
    fn sound_goes_to_every_tap_charged_and_is_dropped_alone_when_a_queue_is_full() {
        let f = Fanout::new(crate::live::gop_pool());
        let key = StreamKey::new("cam", crate::base::StreamKind::Main);
        let params = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcma, 8_000, 1).unwrap());
        let sound =
            AudioFrame { pts_90k: 0, duration_samples: 160, data: vec![0xd5; 160].into(), params: params.clone() };
        assert!(f.audio_params().is_none());
        f.publish_audio(&sound);
        assert_eq!(f.audio_params().as_deref(), Some(&*params), "known before anyone watches");
        let (tx, mut rx) = mpsc::channel(2);
        let queue = BytePool::shared(limits::LIVE_TAP_QUEUE_MAX_BYTES as u64);
        f.tap(key.clone(), tx, queue.clone());
        f.publish(&frame(10, true));
        f.publish_audio(&sound);
        f.publish_audio(&sound);
        assert_eq!(f.stats.tap_audio_drops.load(Ordering::Relaxed), 1, "the queue holds two");
        assert_eq!(queue.held_bytes(), 170);
        assert!(matches!(rx.try_recv().unwrap(), Live::Video(_)));
        match rx.try_recv().unwrap() {
            Live::Audio(a) => assert_eq!((a.stream, a.frame.data.len()), (key, 160)),
            other => panic!("{other:?}"),
        }
        assert_eq!(queue.held_bytes(), 0);
        // Nothing after the dropped sound lags: the next picture is not after a gap.
        f.publish(&frame(10, false));
        assert!(!video(rx.try_recv().unwrap()).after_gap);
        f.session_ended();
        assert!(f.audio_params().is_none(), "a new camera session may send other sound");
    }

    #[test]
    fn the_gop_starts_at_the_newest_keyframe_and_stays_under_both_caps() {
        let pool = crate::live::gop_pool();
        let f = Fanout::new(pool.clone());
        f.publish(&frame(10, false));
        assert!(f.gop().is_empty(), "nothing before the first keyframe");
        f.publish(&frame(100, true));
        f.publish(&frame(10, false));
        assert_eq!(f.gop().len(), 2);
        f.publish(&frame(200, true));
        assert_eq!(f.gop().iter().map(|f| f.data.len()).collect::<Vec<_>>(), [200]);
        assert_eq!(pool.held_bytes(), 200);
        // Past the per-stream cap the GOP goes, until the next keyframe.
        f.publish(&frame(limits::LIVE_GOP_MAX_BYTES, false));
        assert!(f.gop().is_empty());
        assert_eq!(pool.held_bytes(), 0);
        f.publish(&frame(10, false));
        assert!(f.gop().is_empty());
        f.publish(&frame(50, true));
        assert_eq!(f.gop().len(), 1);
        // Past the global cap, across streams.
        let others: Vec<_> = (0..limits::LIVE_GOP_TOTAL_MAX_BYTES / limits::LIVE_GOP_MAX_BYTES + 1)
            .map(|_| {
                let o = Fanout::new(pool.clone());
                o.publish(&frame(limits::LIVE_GOP_MAX_BYTES - 100, true));
                o
            })
            .collect();
        assert!(pool.held_bytes() <= limits::LIVE_GOP_TOTAL_MAX_BYTES, "{}", pool.held_bytes());
        assert!(others.iter().any(|o| o.gop().is_empty()), "one GOP did not fit");
        assert!(others.iter().map(|o| o.stats.gops_dropped.load(Ordering::Relaxed)).sum::<u64>() >= 1);
        drop(others);
        drop(f);
        assert_eq!(pool.held_bytes(), 0, "every byte given back");
    }

    #[test]
    fn a_written_frame_leaves_ram_and_is_read_back_for_a_new_viewer() {
        let pool = crate::live::gop_pool();
        let f = Fanout::new(pool.clone());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        let file = Arc::new(File::options().read(true).write(true).create(true).open(&path).unwrap());
        let mut key = frame(300, true);
        key.data = Bytes::from(vec![7u8; 300]);
        let mut next = frame(100, false);
        next.data = Bytes::from(vec![9u8; 100]);
        f.publish(&key);
        f.publish(&next);
        assert_eq!(pool.held_bytes(), 400);
        // The recorder writes the keyframe at 1000; a copy of the same bytes is not it.
        file.write_all_at(&key.data, 1000).unwrap();
        f.written(&Bytes::from(vec![7u8; 300]), &file, 1000);
        assert_eq!(pool.held_bytes(), 400, "only the frame the GOP holds");
        f.written(&key.data, &file, 1000);
        assert_eq!(pool.held_bytes(), 100, "its RAM given back");
        assert_eq!(f.gop_bytes(), (400, 100));
        let gop = f.gop();
        assert_eq!(
            (gop[0].data.clone(), gop[1].data.clone()),
            (key.data.clone(), next.data.clone()),
            "read back whole"
        );
        assert!(gop[0].is_key && !gop[1].is_key);
        // Cut off its file: no GOP rather than a broken one.
        file.set_len(1100).unwrap();
        assert!(f.gop().is_empty());
        f.forget_gop();
        assert_eq!(pool.held_bytes(), 0);
        f.publish(&frame(50, true));
        assert_eq!(f.gop().len(), 1, "the next keyframe starts another");
    }

    #[test]
    fn a_gop_read_back_while_the_recorder_cuts_its_file_is_not_used() {
        let f = Fanout::new(crate::live::gop_pool());
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::options().read(true).write(true).create(true).open(dir.path().join("s")).unwrap());
        let mut key = frame(300, true);
        key.data = Bytes::from(vec![7u8; 300]);
        f.publish(&key);
        file.write_all_at(&key.data, 0).unwrap();
        f.written(&key.data, &file, 0);
        // A viewer takes the GOP's places; before it reads them, a write fails: the recorder
        // cuts the file back, forgets the GOP and writes the next frames where it was.
        let (held, forgotten) = f.held();
        assert_eq!(f.read_back(held.clone(), forgotten)[0].data, key.data, "read whole while nothing is cut");
        file.set_len(0).unwrap();
        f.forget_gop();
        file.write_all_at(&[1u8; 300], 0).unwrap();
        assert!(f.read_back(held, forgotten).is_empty(), "not another frame's bytes");
        assert!(f.gop().is_empty(), "and the GOP is gone");
    }

    #[test]
    fn a_full_tap_loses_frames_and_is_told_so_and_publication_never_waits() {
        let f = Fanout::new(crate::live::gop_pool());
        let (tx, mut rx) = mpsc::channel(limits::LIVE_TAP_FRAMES);
        let key = StreamKey::new("cam", crate::base::StreamKind::Main);
        let queue = BytePool::shared(limits::LIVE_TAP_QUEUE_MAX_BYTES as u64);
        f.tap(key.clone(), tx, queue.clone());
        for i in 0..limits::LIVE_TAP_FRAMES + 5 {
            f.publish(&frame(10, i == 0));
        }
        assert_eq!(f.stats.tap_drops.load(Ordering::Relaxed), 5);
        assert_eq!(queue.held_bytes(), 10 * limits::LIVE_TAP_FRAMES, "the queued frames' bytes");
        let first = video(rx.try_recv().unwrap());
        assert_eq!((&first.stream, first.after_gap), (&key, false));
        drop(first);
        while rx.try_recv().is_ok() {}
        assert_eq!(queue.held_bytes(), 0, "given back as the consumer drops them");
        f.publish(&frame(10, false));
        assert!(video(rx.try_recv().unwrap()).after_gap, "the tap lagged");
        // Past the queue's bytes, frames are dropped however few wait.
        let big = limits::LIVE_TAP_QUEUE_MAX_BYTES / 2 + 1;
        f.publish(&frame(big, true));
        f.publish(&frame(big, false));
        assert_eq!(f.stats.tap_drops.load(Ordering::Relaxed), 6);
        assert_eq!((video(rx.try_recv().unwrap()).frame.data.len(), queue.refusals()), (big, 1));
        f.session_ended();
        f.publish(&frame(10, true));
        assert!(video(rx.try_recv().unwrap()).after_gap, "a new camera session");
        drop(rx);
        f.publish(&frame(10, false));
        assert_eq!(f.taps(), 0, "a closed tap goes");
    }
}

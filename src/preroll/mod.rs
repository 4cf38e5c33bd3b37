//! Pre-roll and recording admission: which of a stream's frames its recorder writes.
//!
//! - [`Mode::Continuous`] writes every frame; [`Mode::Off`] has no recorder at all.
//! - [`Mode::Events`] writes from the keyframe at or before (first trigger − pre-roll) until
//!   the end of the GOP that holds (last trigger + post-roll); triggers that arrive while a
//!   recording is open extend it, so overlapping events make one recording. Ending on a GOP
//!   boundary means the next event's recording can start at the very next keyframe: nothing
//!   is written twice and nothing between two merged events is lost.
//! - The frames before a trigger come from the stream's [`History`]: a ring of the newest
//!   frames that always starts at a keyframe, is trimmed to the pre-roll, and never holds
//!   more than its per-stream caps (bytes, frame slots, keyframes) nor, with every other
//!   stream, more than the global byte cap of its [`HistoryPool`]. At a cap the oldest GOP
//!   goes first. With no pre-roll no history exists at all.
//! - A session's audio is held with its video: each audio frame after the video frame it
//!   came after, in the same caps and pool, and let go with that frame's GOP. A recording
//!   from history hands both on in the order they came, so its sound starts with its first
//!   keyframe and lines up as in continuous recording.
//!
//! The history holds the frames' shared buffers (`Bytes`, reference-counted), not copies:
//! the ingest has already allocated each frame once, and copying it into a byte ring would
//! cost a memcpy per frame (tens of µs for a 4K keyframe) against an admission budget of a
//! fraction of a µs. Its slots and keyframe index are allocated when the stream starts and
//! never grow, so admission allocates nothing per frame.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::limits;
use crate::media::{AudioFrame, Frame};

/// Bytes of history held across every stream, against a global cap.
#[derive(Debug)]
pub struct HistoryPool {
    held_bytes: AtomicUsize,
    high_water_bytes: AtomicUsize,
    max_bytes: usize,
}

impl HistoryPool {
    pub fn new(max_bytes: usize) -> HistoryPool {
        HistoryPool { held_bytes: AtomicUsize::new(0), high_water_bytes: AtomicUsize::new(0), max_bytes }
    }

    /// Takes `n` bytes of the cap; false when they do not fit.
    fn reserve(&self, n: usize) -> bool {
        let r = self.held_bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            let after = held.checked_add(n)?;
            (after <= self.max_bytes).then_some(after)
        });
        match r {
            Ok(before) => {
                // A read first: the read-modify-write only when the mark moves (rarely).
                if before + n > self.high_water_bytes.load(Ordering::Relaxed) {
                    self.high_water_bytes.fetch_max(before + n, Ordering::Relaxed);
                }
                true
            }
            Err(_) => false,
        }
    }

    fn release(&self, n: usize) {
        self.held_bytes.fetch_sub(n, Ordering::AcqRel);
    }

    pub fn held_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Acquire)
    }

    /// The most ever held at once.
    pub fn high_water_bytes(&self) -> usize {
        self.high_water_bytes.load(Ordering::Relaxed)
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

/// Counters of one stream's history.
#[derive(Debug, Default)]
pub struct HistoryStats {
    pub held_bytes: AtomicUsize,
    /// The most this stream ever held at once.
    pub high_water_bytes: AtomicUsize,
    pub held_frames: AtomicUsize,
    /// GOPs let go because they fell out of the pre-roll.
    pub gops_aged: AtomicU64,
    /// GOPs let go early to stay under a cap.
    pub gops_capped: AtomicU64,
    /// Frames not kept at all: no room even with every older GOP gone, or no keyframe yet.
    pub frames_refused: AtomicU64,
}

/// The per-stream caps of a history, fixed when the stream starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub max_bytes: usize,
    /// Frame slots (allocated up front).
    pub slots: usize,
    /// Audio frame slots (allocated at the first audio frame).
    pub audio_slots: usize,
    /// How far back it keeps, µs: the pre-roll plus how late an event may arrive.
    pub keep_us: i64,
}

impl Caps {
    /// The caps for a stream with `pre_roll_ms` of pre-roll and a per-stream byte cap.
    pub fn for_pre_roll(pre_roll_ms: u32, max_bytes: usize) -> Caps {
        let keep_ms = u64::from(pre_roll_ms) + limits::EVENT_BACKDATE_MAX_MS;
        // Enough slots for the kept time plus one whole GOP at the highest frame rate.
        let span_ms = keep_ms + limits::PREROLL_GOP_MAX_MS;
        let slots = (span_ms * limits::PREROLL_FPS_MAX as u64).div_ceil(1000) as usize;
        let audio_slots = (span_ms * limits::PREROLL_AUDIO_FPS_MAX as u64).div_ceil(1000) as usize;
        Caps {
            max_bytes,
            slots: slots.min(limits::PREROLL_FRAMES_MAX),
            audio_slots: audio_slots.min(limits::PREROLL_AUDIO_FRAMES_MAX),
            keep_us: keep_ms as i64 * 1000,
        }
    }

    /// Bytes of the slot arrays themselves (video and audio).
    pub fn slot_bytes(&self) -> usize {
        self.slots * std::mem::size_of::<Entry>() + self.audio_slots * std::mem::size_of::<AudioEntry>()
    }
}

struct Entry {
    frame: Frame,
    after_gap: bool,
}

/// An audio frame and the sequence number of the video frame it came after.
struct AudioEntry {
    after_seq: u64,
    frame: AudioFrame,
}

/// What a history hands back from a sequence number on, in the order it came.
pub enum Held<'a> {
    Video(&'a Frame, bool),
    Audio(&'a AudioFrame),
}

/// One stream's recent frames: always starting at a keyframe, never over its caps.
pub struct History {
    entries: VecDeque<Entry>,
    /// Audio frames, oldest first, each after a video frame held.
    audio: VecDeque<AudioEntry>,
    /// Sequence number of `entries[0]`.
    first_seq: u64,
    /// Sequence numbers of the keyframes held, oldest first; `keyframes[0] == first_seq`.
    keyframes: heapless::Deque<u64, { limits::PREROLL_KEYFRAMES_MAX }>,
    bytes: usize,
    /// The most ever held (published with the other counters).
    high_water: usize,
    caps: Caps,
    /// Frames since a gap are useless until the next keyframe.
    need_key: bool,
    /// Frames were refused since the last one kept: the next one kept starts after a gap.
    gap_pending: bool,
    pool: Arc<HistoryPool>,
    pub stats: Arc<HistoryStats>,
}

impl History {
    pub fn new(caps: Caps, pool: Arc<HistoryPool>) -> History {
        History {
            entries: VecDeque::with_capacity(caps.slots),
            audio: VecDeque::new(),
            first_seq: 0,
            keyframes: heapless::Deque::new(),
            bytes: 0,
            high_water: 0,
            caps,
            need_key: true,
            gap_pending: false,
            pool,
            stats: Arc::default(),
        }
    }

    fn next_seq(&self) -> u64 {
        self.first_seq + self.entries.len() as u64
    }

    fn entry(&self, seq: u64) -> &Entry {
        &self.entries[(seq - self.first_seq) as usize]
    }

    /// Keeps `frame`; returns its sequence number, or `None` when it is not kept.
    pub fn push(&mut self, frame: Frame, after_gap: bool) -> Option<u64> {
        if after_gap && !frame.is_key {
            self.need_key = true;
        }
        if frame.is_key {
            self.need_key = false;
        }
        let len = frame.data.len();
        if self.need_key || len > self.caps.max_bytes {
            // The frames after a refused one are useless until the next keyframe, and that
            // one starts after a gap.
            self.need_key = true;
            self.refuse();
            return None;
        }
        loop {
            let room = self.entries.len() < self.caps.slots
                && !(frame.is_key && self.keyframes.is_full())
                && self.bytes + len <= self.caps.max_bytes;
            if room && self.pool.reserve(len) {
                break;
            }
            if self.evict_oldest_gop() {
                self.stats.gops_capped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Only the GOP in progress is held, and the frame still does not fit.
            self.stats.gops_capped.fetch_add(u64::from(!self.entries.is_empty()), Ordering::Relaxed);
            self.clear();
            if !frame.is_key || !self.pool.reserve(len) {
                self.need_key = true;
                self.refuse();
                return None;
            }
            break;
        }
        let seq = self.next_seq();
        let (is_key, mono_us) = (frame.is_key, frame.received_mono_us);
        let after_gap = after_gap || std::mem::take(&mut self.gap_pending);
        self.entries.push_back(Entry { frame, after_gap });
        self.bytes += len;
        self.high_water = self.high_water.max(self.bytes);
        if is_key {
            // Room was made above.
            let _ = self.keyframes.push_back(seq);
        }
        // Let go of GOPs the pre-roll no longer reaches: the second keyframe is old enough.
        while self.keyframes.len() >= 2 {
            let second = self.keyframes.iter().nth(1).copied().unwrap_or(seq);
            if self.entry(second).frame.received_mono_us > mono_us.saturating_sub(self.caps.keep_us) {
                break;
            }
            self.evict_oldest_gop();
            self.stats.gops_aged.fetch_add(1, Ordering::Relaxed);
        }
        // The counters move at GOP boundaries (and evictions, which start at one): their
        // cache line is not touched for every frame.
        if is_key {
            self.publish_stats();
        }
        Some(seq)
    }

    /// Keeps an audio frame after the newest video frame; false when it is not kept (no
    /// video held yet, or no room even with every older GOP gone).
    pub fn push_audio(&mut self, frame: AudioFrame) -> bool {
        if self.entries.is_empty() || self.need_key || self.caps.audio_slots == 0 {
            return false;
        }
        if self.audio.capacity() == 0 {
            self.audio.reserve_exact(self.caps.audio_slots);
        }
        let len = frame.data.len();
        loop {
            let room = self.audio.len() < self.caps.audio_slots && self.bytes + len <= self.caps.max_bytes;
            if room && self.pool.reserve(len) {
                break;
            }
            if !self.evict_oldest_gop() {
                self.stats.frames_refused.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            self.stats.gops_capped.fetch_add(1, Ordering::Relaxed);
        }
        self.audio.push_back(AudioEntry { after_seq: self.next_seq() - 1, frame });
        self.bytes += len;
        self.high_water = self.high_water.max(self.bytes);
        true
    }

    fn refuse(&mut self) {
        self.gap_pending = true;
        self.stats.frames_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops the oldest GOP; false when fewer than two GOPs are held.
    fn evict_oldest_gop(&mut self) -> bool {
        if self.keyframes.len() < 2 {
            return false;
        }
        let _ = self.keyframes.pop_front();
        let until = self.keyframes.front().copied().unwrap_or(self.first_seq);
        let mut freed = 0;
        while self.first_seq < until {
            if let Some(e) = self.entries.pop_front() {
                freed += e.frame.data.len();
            }
            self.first_seq += 1;
        }
        while self.audio.front().is_some_and(|a| a.after_seq < self.first_seq) {
            freed += self.audio.pop_front().map_or(0, |a| a.frame.data.len());
        }
        self.bytes -= freed;
        self.pool.release(freed);
        self.publish_stats();
        true
    }

    /// Lets go of everything.
    fn clear(&mut self) {
        self.first_seq = self.next_seq();
        self.entries.clear();
        self.audio.clear();
        self.keyframes.clear();
        self.pool.release(self.bytes);
        self.bytes = 0;
        self.publish_stats();
    }

    /// Plain stores: this history's thread is the counters' only writer.
    fn publish_stats(&self) {
        self.stats.held_bytes.store(self.bytes, Ordering::Relaxed);
        self.stats.high_water_bytes.store(self.high_water, Ordering::Relaxed);
        self.stats.held_frames.store(self.entries.len(), Ordering::Relaxed);
    }

    /// The keyframe at or before monotonic time `mono_us`, or the oldest one when all are
    /// later; `None` when nothing is held.
    pub fn keyframe_at_or_before(&self, mono_us: i64) -> Option<u64> {
        let at_or_before = self.keyframes.iter().rev().find(|s| self.entry(**s).frame.received_mono_us <= mono_us);
        at_or_before.or(self.keyframes.front()).copied()
    }

    /// The first keyframe after sequence `seq`.
    pub fn keyframe_after(&self, seq: u64) -> Option<u64> {
        self.keyframes.iter().find(|s| **s > seq).copied()
    }

    /// The frames from sequence `seq` on, each with its gap flag.
    pub fn since(&self, seq: u64) -> impl Iterator<Item = (&Frame, bool)> {
        let skip = seq.saturating_sub(self.first_seq) as usize;
        self.entries.iter().skip(skip).map(|e| (&e.frame, e.after_gap))
    }

    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// Hands `f` the video frames from sequence `seq` on and the audio that came after
    /// them, in the order they came.
    pub fn each_since(&self, seq: u64, mut f: impl FnMut(Held<'_>)) {
        let seq = seq.max(self.first_seq);
        let mut audio = self.audio.range(self.audio.partition_point(|a| a.after_seq < seq)..).peekable();
        for (i, (frame, gap)) in self.since(seq).enumerate() {
            f(Held::Video(frame, gap));
            let at = seq + i as u64;
            while let Some(a) = audio.next_if(|a| a.after_seq == at) {
                f(Held::Audio(&a.frame));
            }
        }
    }

    /// Audio frames held.
    pub fn held_audio_frames(&self) -> usize {
        self.audio.len()
    }

    pub fn held_frames(&self) -> usize {
        self.entries.len()
    }

    /// The monotonic time of the oldest frame held.
    pub fn oldest_mono_us(&self) -> Option<i64> {
        self.entries.front().map(|e| e.frame.received_mono_us)
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.pool.release(self.bytes);
    }
}

/// A stream's recording mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Continuous,
    Events { pre_roll_ms: u32, post_roll_ms: u32 },
    Off,
}

/// Events that asked a stream to record: the earliest and latest event times not yet taken
/// by its recorder, monotonic µs. And events that asked for its footage to be made durable
/// early: now, and again once their post-roll is written. Shared between the event intake
/// and the recorder thread; lock-free, so firing never waits on the recorder.
#[derive(Debug)]
pub struct Trigger {
    first_mono_us: AtomicI64,
    last_mono_us: AtomicI64,
    pub fired: AtomicU64,
    /// The camera's post-roll: how long after an event its footage is flushed again.
    post_roll_us: i64,
    /// The latest moment (monotonic µs) of the events acknowledged since the recorder last
    /// took an ask, `i64::MIN` for none: the first frame received past it is the cut.
    durable_past_mono_us: AtomicI64,
    /// When the last event's post-roll ends (monotonic µs), `i64::MIN` for none.
    durable_at_mono_us: AtomicI64,
    /// How many streams of the camera the last event asked (each cuts; the flusher commits
    /// once all have).
    durable_streams: AtomicU32,
}

/// What an event asks of a stream's recorder for its footage to be made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurableAsk {
    /// The event's moment has just been recorded: end the open fragment at the next frame
    /// and flush, so the moment does not wait in the page cache. The event asked `streams`
    /// of its camera's streams, and its post-roll ends at `post_roll_end_mono_us`.
    Cut { streams: u32, post_roll_end_mono_us: i64 },
    /// A post-roll has been recorded: flush once the fragment holding its last frame is
    /// written, at its GOP's end (an extra fragment header would buy a second at most).
    AtFragmentEnd,
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger::new(0)
    }
}

impl Trigger {
    /// A stream's trigger, for a camera whose post-roll is `post_roll_ms`.
    pub fn new(post_roll_ms: u32) -> Trigger {
        Trigger {
            first_mono_us: AtomicI64::new(i64::MAX),
            last_mono_us: AtomicI64::new(i64::MIN),
            fired: AtomicU64::new(0),
            post_roll_us: i64::from(post_roll_ms) * 1000,
            durable_past_mono_us: AtomicI64::new(i64::MIN),
            durable_at_mono_us: AtomicI64::new(i64::MIN),
            durable_streams: AtomicU32::new(1),
        }
    }

    /// An event of monotonic time `mono_us` was acknowledged, asking this stream and the
    /// others of its camera, `streams` in all: the stream's footage should be made durable at
    /// once, and again once its post-roll is written.
    pub fn ask_durable(&self, mono_us: i64, streams: u32) {
        self.durable_streams.store(streams, Ordering::Release);
        self.durable_at_mono_us.fetch_max(mono_us.saturating_add(self.post_roll_us), Ordering::AcqRel);
        self.durable_past_mono_us.fetch_max(mono_us, Ordering::AcqRel);
    }

    /// What an event asks, at a frame received at `now_mono_us`, for the footage to be
    /// made durable: a cut at the first frame past an acknowledged event's moment (frames
    /// still queued from before it would end the fragment short of it), else a flush once
    /// the fragment under way is written when a post-roll's end is reached.
    pub fn take_durable(&self, now_mono_us: i64) -> Option<DurableAsk> {
        let past = self.durable_past_mono_us.load(Ordering::Acquire);
        let now = past != i64::MIN
            && now_mono_us >= past
            && self.durable_past_mono_us.compare_exchange(past, i64::MIN, Ordering::AcqRel, Ordering::Acquire).is_ok();
        let at = self.durable_at_mono_us.load(Ordering::Acquire);
        let post_roll_over = at != i64::MIN
            && now_mono_us >= at
            && self.durable_at_mono_us.compare_exchange(at, i64::MIN, Ordering::AcqRel, Ordering::Acquire).is_ok();
        match (now, post_roll_over) {
            (true, _) => Some(DurableAsk::Cut {
                streams: self.durable_streams.load(Ordering::Acquire),
                post_roll_end_mono_us: at,
            }),
            (false, true) => Some(DurableAsk::AtFragmentEnd),
            (false, false) => None,
        }
    }

    /// An event happened at monotonic time `mono_us`.
    pub fn fire(&self, mono_us: i64) {
        self.last_mono_us.fetch_max(mono_us, Ordering::AcqRel);
        self.first_mono_us.fetch_min(mono_us, Ordering::AcqRel);
        self.fired.fetch_add(1, Ordering::Relaxed);
    }

    /// The first and last event times since the last take.
    fn take(&self) -> Option<(i64, i64)> {
        // `last` is read after `first` is taken: an event fired in between is seen by this
        // take (its `last`) or by the next one (its `first`), never lost.
        // A plain read first: the swap (a locked instruction) only when something fired.
        if self.first_mono_us.load(Ordering::Acquire) == i64::MAX {
            return None;
        }
        let first = self.first_mono_us.swap(i64::MAX, Ordering::AcqRel);
        if first == i64::MAX {
            return None;
        }
        Some((first, self.last_mono_us.load(Ordering::Acquire).max(first)))
    }
}

/// What admission hands the recorder.
#[derive(Debug)]
pub enum Out {
    Frame {
        frame: Frame,
        after_gap: bool,
    },
    Audio(AudioFrame),
    /// The recording ends here: close what is open.
    Finish,
}

/// Counters of a stream's event recordings.
#[derive(Debug, Default)]
pub struct AdmissionStats {
    pub recordings_started: AtomicU64,
    pub recordings_finished: AtomicU64,
    /// Frames of pre-roll written from the history.
    pub preroll_frames: AtomicU64,
}

/// Decides, frame by frame, what a stream's recorder writes.
pub struct Admission {
    mode: Mode,
    history: Option<History>,
    trigger: Arc<Trigger>,
    recording: bool,
    /// A recording that could not start from history waits for a keyframe.
    waiting_key: bool,
    until_mono_us: i64,
    /// The newest history frame written.
    written_seq: Option<u64>,
    pub stats: Arc<AdmissionStats>,
}

impl Admission {
    /// Admission for `mode`; `history` is built only for events with a pre-roll.
    pub fn new(mode: Mode, history: Option<History>, trigger: Arc<Trigger>) -> Admission {
        let history = match mode {
            Mode::Events { pre_roll_ms, .. } if pre_roll_ms > 0 => history,
            _ => None,
        };
        Admission {
            mode,
            history,
            trigger,
            recording: false,
            waiting_key: false,
            until_mono_us: i64::MIN,
            written_seq: None,
            stats: Arc::default(),
        }
    }

    /// The trigger events fire for this stream (read by its recorder at every frame).
    pub fn trigger(&self) -> &Arc<Trigger> {
        &self.trigger
    }

    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    pub fn is_continuous(&self) -> bool {
        self.mode == Mode::Continuous
    }

    /// Takes one audio frame from the queue: written when the video it came after was, and
    /// held with it in the history.
    pub fn audio(&mut self, frame: AudioFrame, out: &mut impl FnMut(Out)) {
        match self.mode {
            Mode::Continuous => out(Out::Audio(frame)),
            Mode::Off => {}
            Mode::Events { .. } => {
                let writing = self.recording && !self.waiting_key;
                match &mut self.history {
                    Some(h) if writing => {
                        h.push_audio(frame.clone());
                        out(Out::Audio(frame));
                    }
                    Some(h) => {
                        h.push_audio(frame);
                    }
                    None if writing => out(Out::Audio(frame)),
                    None => {}
                }
            }
        }
    }

    /// Takes one frame from the queue; hands what is to be written to `out`.
    pub fn frame(&mut self, frame: Frame, after_gap: bool, out: &mut impl FnMut(Out)) {
        let (pre_roll_ms, post_roll_ms) = match self.mode {
            Mode::Continuous => return out(Out::Frame { frame, after_gap }),
            Mode::Off => return,
            Mode::Events { pre_roll_ms, post_roll_ms } => (pre_roll_ms, post_roll_ms),
        };
        let kept = match &mut self.history {
            Some(h) => h.push(frame.clone(), after_gap),
            None => None,
        };
        if let Some((first, last)) = self.trigger.take() {
            self.until_mono_us = self.until_mono_us.max(last.saturating_add(i64::from(post_roll_ms) * 1000));
            if !self.recording {
                self.recording = true;
                self.waiting_key = true;
                self.stats.recordings_started.fetch_add(1, Ordering::Relaxed);
                let from_mono_us = first.saturating_sub(i64::from(pre_roll_ms) * 1000);
                if let (Some(h), Some(_)) = (&self.history, kept) {
                    // Never write a frame twice: start after what the last recording wrote.
                    let start = match (h.keyframe_at_or_before(from_mono_us), self.written_seq) {
                        (Some(s), Some(w)) if s <= w => h.keyframe_after(w),
                        (s, _) => s,
                    };
                    if let Some(start) = start {
                        let mut n = 0u64;
                        h.each_since(start, |held| match held {
                            Held::Video(f, gap) => {
                                out(Out::Frame { frame: f.clone(), after_gap: gap || n == 0 });
                                n += 1;
                            }
                            Held::Audio(a) => out(Out::Audio(a.clone())),
                        });
                        self.stats.preroll_frames.fetch_add(n.saturating_sub(1), Ordering::Relaxed);
                        self.written_seq = kept;
                        self.waiting_key = false;
                        return;
                    }
                }
            }
        }
        if !self.recording {
            return;
        }
        // An event recording holds at least one GOP, even when the post-roll ended before
        // its first keyframe came.
        if frame.is_key && frame.received_mono_us > self.until_mono_us && !self.waiting_key {
            self.recording = false;
            self.stats.recordings_finished.fetch_add(1, Ordering::Relaxed);
            return out(Out::Finish);
        }
        if self.waiting_key {
            if !frame.is_key {
                return;
            }
            self.waiting_key = false;
            self.written_seq = kept.or(self.written_seq);
            return out(Out::Frame { frame, after_gap: true });
        }
        self.written_seq = kept.or(self.written_seq);
        out(Out::Frame { frame, after_gap });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames every 100 ms (10 fps), a keyframe every `gop` frames, `len` bytes each.
    struct Camera {
        n: i64,
        gop: i64,
        len: usize,
    }

    impl Camera {
        fn next(&mut self) -> Frame {
            let f = Frame {
                received_mono_us: self.n * 100_000,
                received_wall_us: 1_800_000_000_000_000 + self.n * 100_000,
                pts_90k: self.n * 9000,
                ..Frame::for_test(self.len, self.n % self.gop == 0)
            };
            self.n += 1;
            f
        }
    }

    fn caps(max_bytes: usize) -> Caps {
        Caps::for_pre_roll(5_000, max_bytes)
    }

    #[test]
    fn the_history_starts_at_a_keyframe_and_reaches_back_the_pre_roll_and_no_further() {
        let pool = Arc::new(HistoryPool::new(1 << 30));
        let mut h = History::new(caps(1 << 30), pool.clone());
        // A 10 s GOP; the first frames come before any keyframe.
        let mut cam = Camera { n: 5, gop: 100, len: 1000 };
        for _ in 0..95 {
            assert_eq!(h.push(cam.next(), false), None, "nothing before the first keyframe");
        }
        for _ in 0..300 {
            h.push(cam.next(), false).expect("kept");
            let oldest = h.oldest_mono_us().unwrap();
            assert_eq!(oldest % 10_000_000, 0, "starts at a keyframe");
            let newest = (cam.n - 1) * 100_000;
            // The oldest GOP goes once the next keyframe is 7 s (pre-roll + backdate) old.
            let reach = newest - 7_000_000;
            assert!(oldest <= reach.max(10_000_000), "reaches back far enough: {oldest} vs {reach}");
            assert!(oldest > reach - 10_000_000, "no GOP more than it needs");
        }
        assert_eq!(pool.held_bytes(), h.held_bytes());
        assert_eq!(h.stats.frames_refused.load(Ordering::Relaxed), 95);
        assert!(h.stats.gops_aged.load(Ordering::Relaxed) >= 2);
        drop(h);
        assert_eq!(pool.held_bytes(), 0, "a dropped history gives its bytes back");
    }

    #[test]
    fn the_per_stream_cap_lets_the_oldest_gop_go_first_and_is_never_passed() {
        let pool = Arc::new(HistoryPool::new(1 << 30));
        let max = 25_000;
        let mut h = History::new(caps(max), pool);
        let mut cam = Camera { n: 0, gop: 10, len: 1000 };
        for _ in 0..500 {
            h.push(cam.next(), false);
            assert!(h.held_bytes() <= max);
            assert_eq!(h.oldest_mono_us().unwrap() % 1_000_000, 0, "starts at a keyframe");
        }
        assert!(h.held_bytes() >= max - 10_000, "holds as many whole GOPs as fit");
        assert!(h.stats.gops_capped.load(Ordering::Relaxed) > 0);
        assert_eq!(h.stats.high_water_bytes.load(Ordering::Relaxed), max);
        // A GOP larger than the cap: it is let go and the history waits for a keyframe.
        let mut big = Camera { n: cam.n, gop: 40, len: 1000 };
        while big.n % 40 != 0 {
            big.n += 1;
        }
        for _ in 0..30 {
            h.push(big.next(), false);
            assert!(h.held_bytes() <= max);
        }
        assert!(h.stats.frames_refused.load(Ordering::Relaxed) > 0);
        assert!(h.held_frames() < 25);
    }

    #[test]
    fn histories_together_never_pass_the_global_cap() {
        let pool = Arc::new(HistoryPool::new(60_000));
        let mut hs: Vec<History> = (0..8).map(|_| History::new(caps(25_000), pool.clone())).collect();
        let mut cams: Vec<Camera> = (0..8).map(|i| Camera { n: i, gop: 10, len: 700 + 100 * i as usize }).collect();
        for _ in 0..400 {
            for (h, c) in hs.iter_mut().zip(&mut cams) {
                h.push(c.next(), false);
                assert!(pool.held_bytes() <= 60_000);
                assert!(h.held_bytes() <= 25_000);
            }
        }
        assert_eq!(pool.held_bytes(), hs.iter().map(History::held_bytes).sum::<usize>());
        assert!(pool.high_water_bytes() <= 60_000);
        assert!(pool.high_water_bytes() > 50_000, "the cap is reached");
    }

    #[test]
    fn with_127_streams_neither_cap_is_ever_passed_and_disabled_streams_hold_nothing() {
        const STREAMS: usize = 127;
        // As the recorder sets them: each stream's cap is its share of the global one.
        let total_max = 96 << 20;
        let stream_max = (1 << 20usize).min(total_max / STREAMS);
        let pool = Arc::new(HistoryPool::new(total_max));
        let events = Mode::Events { pre_roll_ms: 5_000, post_roll_ms: 10_000 };
        let mut streams: Vec<Admission> = (0..STREAMS)
            .map(|_| {
                let h = History::new(Caps::for_pre_roll(5_000, stream_max), pool.clone());
                Admission::new(events, Some(h), Arc::new(Trigger::default()))
            })
            .collect();
        // A stream with the pre-roll off, and a continuous one: no history at all.
        let off = Mode::Events { pre_roll_ms: 0, post_roll_ms: 10_000 };
        let history = || Some(History::new(Caps::for_pre_roll(5_000, stream_max), pool.clone()));
        assert!(Admission::new(off, history(), Arc::new(Trigger::default())).history().is_none());
        assert!(Admission::new(Mode::Continuous, history(), Arc::new(Trigger::default())).history().is_none());
        assert_eq!(pool.held_bytes(), 0);
        // 1080p-like streams at 25 fps: a 120 KB keyframe and 8 KB frames, GOPs of 1 to 3 s,
        // 30 s of each.
        let mut written = 0usize;
        for n in 0..25 * 30i64 {
            for (i, a) in streams.iter_mut().enumerate() {
                let gop = 25 * (1 + i as i64 % 3);
                let is_key = n % gop == 0;
                let f = Frame {
                    received_mono_us: n * 40_000 + i as i64,
                    ..Frame::for_test(if is_key { 120_000 } else { 8_000 }, is_key)
                };
                a.frame(f, false, &mut |_| written += 1);
                let h = a.history().unwrap();
                assert!(h.held_bytes() <= stream_max);
                assert!(pool.held_bytes() <= total_max);
            }
        }
        assert_eq!(written, 0, "no event, nothing written");
        for a in &streams {
            let st = &a.history().unwrap().stats;
            assert!(st.high_water_bytes.load(Ordering::Relaxed) <= stream_max);
            assert!(st.high_water_bytes.load(Ordering::Relaxed) > stream_max - 130_000, "its cap was reached");
            assert!(a.history().unwrap().held_frames() > 0, "every stream holds pre-roll");
        }
        assert!(pool.high_water_bytes() <= total_max);
        assert!(pool.high_water_bytes() > total_max * 3 / 4, "the global cap was nearly reached");
        let capped: u64 = streams.iter().map(|a| a.history().unwrap().stats.gops_capped.load(Ordering::Relaxed)).sum();
        assert!(capped > 0, "GOPs went early to stay under the caps");
        drop(streams);
        assert_eq!(pool.held_bytes(), 0);
    }

    #[test]
    fn slots_and_the_keyframe_index_are_caps_too() {
        let pool = Arc::new(HistoryPool::new(1 << 30));
        let c = Caps { max_bytes: 1 << 30, slots: 50, audio_slots: 0, keep_us: 3_600_000_000 };
        let mut h = History::new(c, pool.clone());
        let mut cam = Camera { n: 0, gop: 7, len: 10 };
        for _ in 0..200 {
            h.push(cam.next(), false);
            assert!(h.held_frames() <= 50);
        }
        assert!(h.held_frames() > 40);
        let mut h = History::new(Caps { slots: limits::PREROLL_FRAMES_MAX, ..c }, pool);
        let mut all_keys = Camera { n: 0, gop: 1, len: 10 };
        for _ in 0..limits::PREROLL_KEYFRAMES_MAX * 2 {
            h.push(all_keys.next(), false);
            assert!(h.keyframes.len() <= limits::PREROLL_KEYFRAMES_MAX);
        }
        assert_eq!(h.held_frames(), limits::PREROLL_KEYFRAMES_MAX);
        assert_eq!(Caps::for_pre_roll(limits::PREROLL_MAX_MS, 1).slots, limits::PREROLL_FRAMES_MAX.min(2520));
        assert_eq!(Caps::for_pre_roll(u32::MAX, 1).slots, limits::PREROLL_FRAMES_MAX, "whatever the pre-roll");
    }

    fn sound(pts_90k: i64, len: usize) -> AudioFrame {
        let params = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        AudioFrame { pts_90k, duration_samples: len as u32, data: vec![0xff; len].into(), params }
    }

    /// What a history hands back from `seq`: `V<pts>` and `A<pts>` in order.
    fn replay(h: &History, seq: u64) -> Vec<String> {
        let mut out = Vec::new();
        h.each_since(seq, |held| {
            out.push(match held {
                Held::Video(f, _) => format!("V{}", f.pts_90k),
                Held::Audio(a) => format!("A{}", a.pts_90k),
            })
        });
        out
    }

    #[test]
    fn sound_is_held_after_its_video_and_goes_with_its_gop() {
        let pool = Arc::new(HistoryPool::new(1 << 30));
        let mut h = History::new(Caps::for_pre_roll(1_000, 1 << 30), pool.clone());
        assert!(!h.push_audio(sound(0, 800)), "no video held yet");
        let mut cam = Camera { n: 0, gop: 10, len: 1000 };
        for _ in 0..40 {
            let f = cam.next();
            let pts = f.pts_90k;
            h.push(f, false);
            // Two 50 ms packets of sound after each 100 ms frame.
            assert!(h.push_audio(sound(pts, 400)));
            assert!(h.push_audio(sound(pts + 4_500, 400)));
        }
        // 1 s of pre-roll and 2 s of backdate: GOPs of 1 s, the oldest at 3.7 s back.
        let first = h.keyframe_at_or_before(0).unwrap();
        let got = replay(&h, first);
        let oldest = h.oldest_mono_us().unwrap() / 100_000 * 9_000;
        assert_eq!(got[..3], [format!("V{oldest}"), format!("A{oldest}"), format!("A{}", oldest + 4_500)]);
        assert_eq!(got.len(), 3 * h.held_frames(), "every frame's sound, none of a GOP let go");
        assert_eq!(h.held_audio_frames(), 2 * h.held_frames());
        assert_eq!(h.held_bytes(), 1000 * h.held_frames() + 800 * h.held_frames());
        assert_eq!(pool.held_bytes(), h.held_bytes());
        // From a later keyframe: its frames and their sound only.
        let later = h.keyframe_after(first).unwrap();
        assert_eq!(replay(&h, later).len(), 3 * (h.held_frames() - (later - first) as usize));
        drop(h);
        assert_eq!(pool.held_bytes(), 0);
    }

    #[test]
    fn audio_slots_are_a_cap_and_preroll_audio_frames_max_bounds_them() {
        let pool = Arc::new(HistoryPool::new(1 << 30));
        let c = Caps { max_bytes: 1 << 30, slots: 1000, audio_slots: 30, keep_us: 3_600_000_000 };
        let mut h = History::new(c, pool);
        let mut cam = Camera { n: 0, gop: 5, len: 10 };
        for _ in 0..100 {
            let f = cam.next();
            let pts = f.pts_90k;
            h.push(f, false);
            for i in 0..3 {
                h.push_audio(sound(pts + i * 3_000, 8));
            }
            assert!(h.held_audio_frames() <= 30);
        }
        assert!(h.stats.gops_capped.load(Ordering::Relaxed) > 0, "GOPs went to make room for sound");
        assert!(h.held_audio_frames() >= 15);
        assert_eq!(Caps::for_pre_roll(limits::PREROLL_MAX_MS, 1).audio_slots, 4_200);
        assert_eq!(Caps::for_pre_roll(u32::MAX, 1).audio_slots, limits::PREROLL_AUDIO_FRAMES_MAX);
    }

    #[test]
    fn an_event_recording_from_history_starts_its_sound_with_its_first_keyframe() {
        let pool = Arc::new(HistoryPool::new(1 << 30));
        let trigger = Arc::new(Trigger::new(0));
        let history = History::new(Caps::for_pre_roll(1_000, 1 << 30), pool);
        let mut a =
            Admission::new(Mode::Events { pre_roll_ms: 1_000, post_roll_ms: 0 }, Some(history), trigger.clone());
        let mut cam = Camera { n: 0, gop: 10, len: 100 };
        let mut out = Vec::new();
        let mut take = |o: Out| {
            out.push(match o {
                Out::Frame { frame, .. } => format!("V{}", frame.pts_90k),
                Out::Audio(s) => format!("A{}", s.pts_90k),
                Out::Finish => "end".into(),
            })
        };
        for i in 0..35 {
            let f = cam.next();
            let (pts, mono) = (f.pts_90k, f.received_mono_us);
            if i == 34 {
                trigger.fire(mono);
            }
            a.frame(f, false, &mut take);
            a.audio(sound(pts + 1, 400), &mut take);
        }
        // The pre-roll reaches 2.4 s: from the keyframe at 2.0 s (pts 180,000).
        assert_eq!(out[..3], ["V180000", "A180001", "V189000"]);
        assert_eq!(out.len(), 2 * 15, "frames 20 to 34 and each one's sound");
        assert_eq!(out.last().unwrap(), "A306001", "the live sound after the frame that fired");
    }

    #[test]
    fn a_refused_keyframe_ends_the_history_s_run_there() {
        let mut h = History::new(caps(5_000), Arc::new(HistoryPool::new(1 << 20)));
        let mut cam = Camera { n: 0, gop: 10, len: 100 };
        for _ in 0..10 {
            h.push(cam.next(), false);
        }
        // A keyframe over the stream's cap: its GOP cannot be kept, nor written.
        let mut big = cam.next();
        big.data = bytes::Bytes::from(vec![0u8; 6_000]);
        assert!(h.push(big, false).is_none());
        for _ in 0..9 {
            assert!(h.push(cam.next(), false).is_none(), "its delta frames are useless");
        }
        let next = h.push(cam.next(), false).expect("the next keyframe");
        let flags: Vec<bool> = h.since(0).map(|(_, gap)| gap).collect();
        assert_eq!(h.since(next).next().map(|(_, gap)| gap), Some(true), "after a gap: {flags:?}");
    }

    #[test]
    fn without_pre_roll_an_event_records_at_least_one_gop() {
        // 10 s GOPs, no post-roll: the first keyframe after the event is past its end.
        let (w, stats) = admit(Mode::Events { pre_roll_ms: 0, post_roll_ms: 0 }, 310, 100, &[150]);
        assert_eq!(w, (200..300).chain([-1]).collect::<Vec<_>>());
        assert_eq!(stats.recordings_finished.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn frames_after_a_gap_wait_for_a_keyframe() {
        let mut h = History::new(caps(1 << 20), Arc::new(HistoryPool::new(1 << 20)));
        let mut cam = Camera { n: 0, gop: 10, len: 10 };
        for _ in 0..15 {
            h.push(cam.next(), false);
        }
        assert!(h.push(cam.next(), true).is_none(), "a delta frame after a gap is useless");
        for _ in 0..4 {
            assert!(h.push(cam.next(), false).is_none());
        }
        assert!(h.push(cam.next(), false).is_some(), "the keyframe at 2 s");
    }

    /// Runs `frames` frames through admission, firing the trigger at the given frame
    /// numbers; returns the frame numbers written (a `-1` for each finish).
    fn admit(mode: Mode, frames: i64, gop: i64, triggers: &[i64]) -> (Vec<i64>, Arc<AdmissionStats>) {
        let trigger = Arc::new(Trigger::default());
        let history = History::new(caps(1 << 30), Arc::new(HistoryPool::new(1 << 30)));
        let mut a = Admission::new(mode, Some(history), trigger.clone());
        let mut cam = Camera { n: 0, gop, len: 100 };
        let mut written = Vec::new();
        for n in 0..frames {
            if triggers.contains(&n) {
                trigger.fire(n * 100_000);
            }
            a.frame(cam.next(), false, &mut |o| match o {
                Out::Frame { frame, after_gap } => {
                    let n = frame.received_mono_us / 100_000;
                    if mode != Mode::Continuous {
                        let first = written.last().is_none_or(|l| *l == -1);
                        assert_eq!(after_gap, first, "a gap starts each recording");
                    }
                    written.push(n);
                }
                Out::Finish => written.push(-1),
                Out::Audio(_) => unreachable!("no sound here"),
            });
        }
        (written, a.stats.clone())
    }

    #[test]
    fn an_event_recording_starts_at_the_keyframe_at_or_before_trigger_minus_pre_roll() {
        let events = Mode::Events { pre_roll_ms: 5_000, post_roll_ms: 3_000 };
        // 10 s GOPs; a trigger at 25 s: the pre-roll reaches 20 s, a keyframe.
        let (w, stats) = admit(events, 400, 100, &[250]);
        assert_eq!(w.first(), Some(&200));
        // Until 28 s and the end of its GOP: the keyframe at 30 s ends it.
        assert_eq!(&w[w.len() - 2..], &[299, -1]);
        assert_eq!(w.len(), 101);
        assert_eq!(stats.preroll_frames.load(Ordering::Relaxed), 50);
        // A trigger at 27 s reaches back to 22 s: the GOP from 20 s.
        let (w, _) = admit(events, 400, 100, &[270]);
        assert_eq!(w.first(), Some(&200));
        // On the very first keyframe the pre-roll reaches before anything held: the oldest.
        let (w, _) = admit(events, 400, 100, &[20]);
        assert_eq!(w.first(), Some(&0));
    }

    #[test]
    fn overlapping_events_make_one_recording_and_nothing_is_written_twice() {
        let events = Mode::Events { pre_roll_ms: 5_000, post_roll_ms: 3_000 };
        // 1 s GOPs. Triggers at 10 s and 12 s overlap: one recording from 5 s to 15 s.
        let (w, stats) = admit(events, 400, 10, &[100, 120]);
        assert_eq!(w.first(), Some(&50));
        assert_eq!(w.iter().filter(|n| **n == -1).count(), 1);
        assert_eq!(w[w.len() - 2..], [159, -1]);
        assert_eq!(stats.recordings_started.load(Ordering::Relaxed), 1);
        // A trigger at 18 s reaches back to 13 s, already written up to 15 s: it starts at 16 s.
        let (w, stats) = admit(events, 400, 10, &[100, 180]);
        let finish = w.iter().position(|n| *n == -1).unwrap();
        assert_eq!(w[finish - 1], 139);
        assert_eq!(w[finish + 1], 140, "the next recording starts where the last ended");
        let seen = w.iter().filter(|n| **n >= 0).collect::<Vec<_>>();
        assert!(seen.windows(2).all(|p| p[0] < p[1]), "no frame twice, none out of order: {seen:?}");
        assert_eq!(stats.recordings_started.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn without_pre_roll_no_history_exists_and_recording_starts_at_the_next_keyframe() {
        let trigger = Arc::new(Trigger::default());
        let pool = Arc::new(HistoryPool::new(1 << 20));
        let history = History::new(caps(1 << 20), pool.clone());
        let a = Admission::new(Mode::Events { pre_roll_ms: 0, post_roll_ms: 1_000 }, Some(history), trigger);
        assert!(a.history().is_none());
        assert_eq!(pool.held_bytes(), 0);
        let (w, _) = admit(Mode::Events { pre_roll_ms: 0, post_roll_ms: 1_000 }, 100, 10, &[25]);
        assert_eq!(w, (30..40).chain([-1]).collect::<Vec<_>>(), "until 3.5 s: the GOP from 3 s");
        let (w, _) = admit(Mode::Continuous, 30, 10, &[]);
        assert_eq!(w, (0..30).collect::<Vec<_>>());
        let (w, _) = admit(Mode::Off, 30, 10, &[5]);
        assert!(w.is_empty());
    }

    #[test]
    fn an_event_asks_for_durable_footage_past_its_moment_and_after_its_post_roll() {
        let t = Trigger::new(5_000);
        assert_eq!(t.take_durable(0), None);
        t.ask_durable(1_000_000, 1);
        t.ask_durable(2_000_000, 2);
        // Frames still queued from before the last event's moment do not end its fragment.
        assert_eq!(t.take_durable(1_100_000), None);
        // The first frame past it does, once, for both events; the last asked two streams.
        let cut = DurableAsk::Cut { streams: 2, post_roll_end_mono_us: 7_000_000 };
        assert_eq!(t.take_durable(2_000_000), Some(cut));
        assert_eq!(t.take_durable(2_100_000), None);
        // Then when the last one's post-roll has been written, at its fragment's end.
        assert_eq!(t.take_durable(6_999_999), None);
        assert_eq!(t.take_durable(7_000_000), Some(DurableAsk::AtFragmentEnd));
        assert_eq!(t.take_durable(8_000_000), None);
    }
}

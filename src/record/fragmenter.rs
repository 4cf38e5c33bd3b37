//! Cuts one stream's frames into runs, segments and fragments. Sans-IO: frames go in, and
//! [`Event`]s come out for the segment writer to act on, in order.
//!
//! - A *run* is a stretch of frames with one continuous camera clock and a steady wall
//!   clock. It starts at a keyframe and ends at a discontinuity (reconnect, dropped frames),
//!   a timestamp that goes backwards or jumps, a wall-clock step, or shutdown.
//! - A *segment* (one file) is a part of a run with one set of codec parameters. It starts
//!   at a keyframe and closes at the first keyframe past its duration or size bound, or at a
//!   parameter change.
//! - A *fragment* is one GOP, cut early at [`limits::FRAGMENT_MAX_DURATION_90K`],
//!   [`limits::FRAGMENT_MAX_SAMPLES`] or [`limits::FRAGMENT_MAX_BYTES`]. A sample's duration
//!   is known only when the next frame arrives, so a fragment is emitted when the frame after
//!   its last arrives; at the end of a run the last frame repeats the previous duration.
//! - A fragment's video frames go out as they come ([`Event::FrameData`], after
//!   [`Event::BeginFragment`] says how much room to keep for its header); what the header
//!   needs of each is kept. The room follows the last fragment's sample count, and a
//!   fragment that fills it is emitted early, the next one with more room.
//! - A fragment being gathered holds no frame, so a long GOP costs no RAM: what it keeps is
//!   a few words per frame for its header (at most [`limits::FRAGMENT_MAX_SAMPLES`]) and its
//!   audio frames, written when it is whole. A fragment that ends before its GOP does (its
//!   header room full, or a ceiling on its duration, samples or bytes) is counted in
//!   [`Fragmenter::cut_short`]; no frame is ever dropped or waits on another stream.
//! - Audio, when the session has it, rides along: the audio frames that arrive while a
//!   fragment's video is pending go into that fragment. A segment has an audio track when its
//!   first frame names the session's audio parameters; its audio decode time starts at the
//!   first audio frame's offset from the segment's first video frame and then runs on
//!   contiguously. A change of the session's audio (its codec, or audio that comes or goes)
//!   closes the segment at the next keyframe, as new video parameters do at once.

use std::sync::Arc;

use crate::clock::{self, RunClock};
use crate::limits;
use crate::media::fmp4::{self, SampleEntry};
use crate::media::{AudioFrame, AudioParams, Frame, VideoParams};

/// A gap in camera time larger than this between consecutive frames is a discontinuity.
pub(crate) const FRAME_GAP_MAX_90K: i64 = 10 * 90_000;

/// Duration assumed for a run's only frame when there is no previous one (30 fps).
const FALLBACK_FRAME_DURATION_90K: i64 = 3_000;

/// What the segment writer must do, in order.
#[derive(Debug)]
pub enum Event {
    /// Open a new segment file for these parameters. `new_run` when it starts a run.
    StartSegment { params: Arc<VideoParams>, audio: Option<Arc<AudioParams>>, new_run: bool, wall_start_us: i64 },
    /// A fragment starts in the open segment: keep `header_bytes` for its header in front
    /// of the samples that follow. `first_is_key`, `sequence`, `base_decode_90k` and
    /// `wall_start_us` are its first frame's, for a segment that must be opened afresh.
    BeginFragment { header_bytes: usize, first_is_key: bool, sequence: u32, base_decode_90k: u64, wall_start_us: i64 },
    /// A video frame of the fragment begun: write its bytes now.
    FrameData(Frame),
    /// The fragment is whole: write its audio and its header.
    Fragment(FragmentOut),
    /// Close the open segment.
    EndSegment,
}

/// One fragment, ready to be written.
#[derive(Debug)]
pub struct FragmentOut {
    /// 1-based within the segment.
    pub sequence: u32,
    /// Decode time of the first sample since the segment's start.
    pub base_decode_90k: u64,
    pub wall_start_us: i64,
    pub wall_end_us: i64,
    pub samples: Vec<SampleEntry>,
    /// Bytes kept for the header in front of the samples (as begun).
    pub header_bytes: usize,
    /// Decode time of the first audio sample since the segment's start, in samples.
    pub audio_base_decode: u64,
    pub audio_samples: Vec<SampleEntry>,
    pub audio_frames: Vec<AudioFrame>,
}

impl FragmentOut {
    pub fn duration_90k(&self) -> u64 {
        self.samples.iter().map(|s| u64::from(s.duration)).sum()
    }
    /// Bytes of the fragment's samples, video and audio.
    pub fn payload_bytes(&self) -> u64 {
        self.samples.iter().chain(&self.audio_samples).map(|s| u64::from(s.size_bytes)).sum()
    }
}

/// Bounds on one segment.
#[derive(Clone, Copy, Debug)]
pub struct SegmentBounds {
    pub max_duration_90k: i64,
    pub max_bytes: u64,
}

/// Counters of frames the fragmenter did not record, and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Waiting for a keyframe to start a run.
    pub before_keyframe: u64,
    /// Waiting for a sane wall clock.
    pub clock_not_sane: u64,
    /// Audio frames with no segment (or no audio track in it) to go into, or over
    /// [`limits::FRAGMENT_MAX_AUDIO_SAMPLES`] or [`limits::FRAGMENT_AUDIO_MAX_BYTES`].
    pub audio: u64,
}

struct Segment {
    params: Arc<VideoParams>,
    start_pts_90k: i64,
    bytes: u64,
    next_sequence: u32,
    audio: Option<Arc<AudioParams>>,
    /// Decode time of the next audio sample; set by the segment's first audio frame.
    audio_next_decode: Option<u64>,
}

impl Segment {
    /// Places a fragment's audio frames on the segment's audio timeline, which runs on
    /// contiguously from the segment's first audio frame, and returns the first one's decode
    /// time and the frames kept. Where the camera's clock puts a frame decides when the two
    /// part by more than half a frame:
    ///
    /// - **Later** (audio lost on the way, or the camera's reports moved the audio later
    ///   than its arrival had put it): the fragment's first frame starts there, leaving a
    ///   gap that must not pull later audio early. (A track run has no gaps: within a
    ///   fragment the audio stays contiguous until the next.)
    /// - **Earlier** (the reports moved the audio earlier): what it would overlap is
    ///   written, so the frame is dropped (G.711 only its samples before where the audio
    ///   has reached), and counted in `dropped`. Kept on, the rest of the segment's sound
    ///   would stay that much late.
    fn place_audio(&mut self, frames: Vec<AudioFrame>, dropped: &mut u64) -> (u64, Vec<AudioFrame>) {
        let Some(rate) = self.audio.as_ref().map(|a| u64::from(a.sample_rate.max(1))) else {
            return (self.audio_next_decode.unwrap_or(0), frames);
        };
        let start_90k = self.start_pts_90k;
        // Saturating: the times are the camera's, whatever it sent.
        let by_clock =
            |f: &AudioFrame| (f.pts_90k.saturating_sub(start_90k).max(0) as u64).saturating_mul(rate) / 90_000;
        let Some(first) = frames.first() else { return (self.audio_next_decode.unwrap_or(0), frames) };
        // The segment's first audio frame starts its audio where its time says.
        let mut next = self.audio_next_decode.unwrap_or_else(|| by_clock(first));
        let mut kept: Vec<AudioFrame> = Vec::with_capacity(frames.len());
        for mut f in frames {
            let at = by_clock(&f);
            let half = u64::from(f.duration_samples / 2);
            if at + half < next {
                let reached_90k = start_90k.saturating_add(next.saturating_mul(90_000).div_ceil(rate) as i64);
                match f.split_at(reached_90k) {
                    // G.711: its samples from there on go on.
                    Some(rest) => f = rest,
                    None => {
                        *dropped += 1;
                        continue;
                    }
                }
            }
            if kept.is_empty() && at > next + half {
                next = at;
            }
            next += u64::from(f.duration_samples);
            kept.push(f);
        }
        self.audio_next_decode = Some(next);
        (next - kept.iter().map(|f| u64::from(f.duration_samples)).sum::<u64>(), kept)
    }
}

/// What a fragment's header needs of one of its video frames.
#[derive(Clone, Copy, Debug)]
struct PendingFrame {
    pts_90k: i64,
    received_mono_us: i64,
    size_bytes: u32,
    is_key: bool,
}

/// Room in a new fragment's header: for as many samples as the last fragment had and a
/// quarter more (at least [`FRAGMENT_ROOM_MIN_SAMPLES`]), at most the ceiling. A fragment
/// that fills its room closes early, and the next has more. (Room for the ceiling always
/// would cost 6 KiB a fragment: a sixth of a sub stream's second.)
fn header_room(last: usize, max: usize) -> usize {
    (last + last / 4 + 8).clamp(FRAGMENT_ROOM_MIN_SAMPLES, max)
}

/// The least room a fragment's header keeps for samples of each track.
const FRAGMENT_ROOM_MIN_SAMPLES: usize = 32;

/// The least room for audio frames that may arrive after a fragment's audio room is full
/// and before the video frame that closes it (about 70 ms at 15 fps is 3 or 4 AAC frames;
/// slower video gets more, see `Fragmenter::audio_spare`).
const AUDIO_ROOM_SPARE_SAMPLES: usize = 16;

/// The per-stream state machine. Lifecycle: [`Fragmenter::push`] each frame;
/// [`Fragmenter::finish`] at a discontinuity or shutdown (the next frame may start again).
pub struct Fragmenter {
    bounds: SegmentBounds,
    require_sane_clock: bool,
    clock: Option<RunClock>,
    /// The run has started and its first segment is not yet open.
    run_starting: bool,
    segment: Option<Segment>,
    /// The video frames of the fragment being gathered: written as they come, so only what
    /// its header needs of them is kept.
    pending: Vec<PendingFrame>,
    pending_bytes: usize,
    /// Samples the fragment being gathered has room for in its header (video, audio).
    capacity: (usize, usize),
    /// Samples in the last fragment (video, audio): the next one's room follows them.
    last_counts: Option<(usize, usize)>,
    /// Audio frames the fragment being gathered leaves room for after its audio room is
    /// full: twice as many as came between two video frames in the last fragment.
    audio_spare: usize,
    pending_audio: Vec<AudioFrame>,
    pending_audio_bytes: usize,
    /// Fragments ended before their GOP did.
    cut_short: u64,
    /// The open fragment ends before the next frame ([`Fragmenter::cut_at_next_frame`]).
    cut_asked: bool,
    /// Fragments ended early for an event's footage to be made durable.
    cut_for_events: u64,
    last_pts_90k: i64,
    last_duration_90k: i64,
    skipped: Skipped,
}

impl Fragmenter {
    /// A stream's fragmenter. `require_sane_clock`: start no run before the wall clock is
    /// set (see [`clock::is_sane`]).
    pub fn new(bounds: SegmentBounds, require_sane_clock: bool) -> Self {
        Fragmenter {
            bounds,
            require_sane_clock,
            clock: None,
            run_starting: false,
            segment: None,
            pending: Vec::new(),
            pending_bytes: 0,
            capacity: (0, 0),
            last_counts: None,
            audio_spare: AUDIO_ROOM_SPARE_SAMPLES,
            pending_audio: Vec::new(),
            pending_audio_bytes: 0,
            cut_short: 0,
            cut_asked: false,
            cut_for_events: 0,
            last_pts_90k: 0,
            last_duration_90k: FALLBACK_FRAME_DURATION_90K,
            skipped: Skipped::default(),
        }
    }

    /// The most a fragmenter holds: what the open fragment keeps of its frames, and its
    /// audio.
    pub fn held_bytes_max() -> usize {
        limits::FRAGMENT_MAX_SAMPLES * size_of::<PendingFrame>()
            + limits::FRAGMENT_MAX_AUDIO_SAMPLES * size_of::<AudioFrame>()
            + limits::FRAGMENT_AUDIO_MAX_BYTES
    }

    pub fn skipped(&self) -> Skipped {
        self.skipped
    }

    /// Fragments ended before their GOP did: at their header room (video or audio), or at
    /// [`limits::FRAGMENT_MAX_DURATION_90K`], [`limits::FRAGMENT_MAX_BYTES`] or half of
    /// [`limits::FRAGMENT_AUDIO_MAX_BYTES`].
    pub fn cut_short(&self) -> u64 {
        self.cut_short
    }

    /// Ends the open fragment before the next frame, so that what is written so far can be
    /// made durable (an event asked). Not counted in [`Fragmenter::cut_short`].
    pub fn cut_at_next_frame(&mut self) {
        self.cut_asked = true;
    }

    /// How long after the wall time the open run would give it `frame` was received, µs
    /// (0 outside a run); see [`RunClock::lag_us`].
    pub fn lag_us(&self, frame: &Frame) -> i64 {
        self.clock.as_ref().map_or(0, |c| c.lag_us(frame.pts_90k, frame.received_mono_us))
    }

    /// Fragments ended early for an event.
    pub fn cut_for_events(&self) -> u64 {
        self.cut_for_events
    }

    /// True while a run is being recorded.
    pub fn in_run(&self) -> bool {
        self.clock.is_some()
    }

    /// Takes one frame; appends what must be done to `out`.
    pub fn push(&mut self, frame: Frame, out: &mut Vec<Event>) {
        if let Some(clock) = &self.clock {
            let delta = frame.pts_90k - self.last_pts_90k;
            let broken = delta <= 0
                || delta > FRAME_GAP_MAX_90K
                || clock.is_stepped(frame.received_mono_us, frame.received_wall_us);
            if broken {
                self.finish(out);
            }
        }
        if self.clock.is_none() {
            if !frame.is_key {
                self.skipped.before_keyframe += 1;
                return;
            }
            if self.require_sane_clock && !clock::is_sane(frame.received_wall_us) {
                self.skipped.clock_not_sane += 1;
                return;
            }
            self.clock = Some(RunClock::start(frame.pts_90k, frame.received_mono_us, frame.received_wall_us));
            self.run_starting = true;
        }

        if !frame.is_key && self.segment.as_ref().is_some_and(|s| s.bytes >= self.bounds.max_bytes.saturating_mul(2)) {
            // A camera that stopped sending keyframes must not grow one file without bound:
            // end the run; the next keyframe starts a new one.
            self.finish(out);
            self.skipped.before_keyframe += 1;
            return;
        }
        let params_changed =
            self.segment.as_ref().is_some_and(|s| !Arc::ptr_eq(&s.params, &frame.params) && *s.params != *frame.params);
        let asked = std::mem::take(&mut self.cut_asked);
        let closes_segment = self.closes_segment(&frame, params_changed);
        // Sound of this keyframe's moment on that came before it (a camera whose pictures lag
        // its sound by more than the queue waits for them) belongs to the next segment, at
        // its place there, not at the end of this one.
        let carried = match closes_segment {
            true => self.take_audio_from(frame.pts_90k),
            false => Vec::new(),
        };
        if let Some(first) = self.pending.first() {
            let gop_ends = frame.is_key || params_changed;
            let full = frame.pts_90k - first.pts_90k >= limits::FRAGMENT_MAX_DURATION_90K
                || self.pending.len() >= self.capacity.0
                || self.pending_audio.len() + self.audio_spare >= self.capacity.1
                || self.pending_audio_bytes >= limits::FRAGMENT_AUDIO_MAX_BYTES / 2
                || self.pending_bytes + frame.data.len() > limits::FRAGMENT_MAX_BYTES;
            if gop_ends || full || asked {
                self.cut_short += u64::from(!gop_ends && full);
                self.cut_for_events += u64::from(!gop_ends && !full);
                self.emit_fragment(frame.pts_90k, frame.received_mono_us, out);
            }
        }
        if params_changed && !frame.is_key {
            // New parameters must start a segment, and a segment must start on a keyframe.
            self.finish(out);
            self.skipped.before_keyframe += 1;
            return;
        }
        if closes_segment {
            self.segment = None;
            out.push(Event::EndSegment);
        }
        if self.segment.is_none() {
            let clock = self.clock.as_mut().expect("a run is open");
            let wall_start_us = clock.wall_us_at(frame.pts_90k, frame.received_mono_us);
            let new_run = std::mem::take(&mut self.run_starting);
            out.push(Event::StartSegment {
                params: frame.params.clone(),
                audio: frame.audio.clone(),
                new_run,
                wall_start_us,
            });
            self.segment = Some(Segment {
                params: frame.params.clone(),
                start_pts_90k: frame.pts_90k,
                bytes: frame.params.sample_entry.len() as u64 + 800,
                next_sequence: 1,
                audio: frame.audio.clone(),
                audio_next_decode: None,
            });
        }
        if let Some(prev) = self.pending.last() {
            self.last_duration_90k = frame.pts_90k - prev.pts_90k;
        }
        self.last_pts_90k = frame.pts_90k;
        if self.pending.is_empty() {
            self.begin_fragment(&frame, out);
        }
        self.pending_bytes += frame.data.len();
        self.pending.push(PendingFrame {
            pts_90k: frame.pts_90k,
            received_mono_us: frame.received_mono_us,
            size_bytes: frame.data.len() as u32,
            is_key: frame.is_key,
        });
        out.push(Event::FrameData(frame));
        for a in carried {
            self.push_audio(a);
        }
    }

    /// Whether `frame` closes the open segment: a keyframe past its duration or size bound,
    /// or with new parameters. The size counts the fragment `frame` ends as it will be
    /// written.
    /// The room a fragment's header takes in `seg` with room for `capacity` samples (video,
    /// audio), and a free box's header.
    fn header_bytes(capacity: (usize, usize), seg: &Segment) -> usize {
        fmp4::fragment_header_bytes(capacity.0, seg.audio.as_ref().map(|_| capacity.1)) + 8
    }

    fn closes_segment(&self, frame: &Frame, params_changed: bool) -> bool {
        let Some(seg) = self.segment.as_ref().filter(|_| frame.is_key) else { return false };
        let too_long = frame.pts_90k - seg.start_pts_90k >= self.bounds.max_duration_90k;
        let pending_bytes = match self.pending.is_empty() {
            true => 0,
            false => {
                (self.pending_bytes + self.pending_audio_bytes + Fragmenter::header_bytes(self.capacity, seg)) as u64
            }
        };
        // The session's audio changed (its codec, or it came or went): a segment has one
        // audio track, so the next keyframe starts a segment with the new one. Audio until
        // then has no track to go in (counted in `skipped.audio`).
        let audio_changed = match (&seg.audio, &frame.audio) {
            (None, None) => false,
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b) && **a != **b,
            _ => true,
        };
        too_long || seg.bytes + pending_bytes >= self.bounds.max_bytes || params_changed || audio_changed
    }

    /// Takes out of the fragment being gathered the audio from `t_90k` on (G.711 split at
    /// the sample).
    fn take_audio_from(&mut self, t_90k: i64) -> Vec<AudioFrame> {
        let tail = AudioFrame::split_all_at(&mut self.pending_audio, t_90k);
        self.pending_audio_bytes = self.pending_audio.iter().map(|a| a.data.len()).sum();
        tail
    }

    /// Starts a fragment at `first`, with room in its header for about as many samples as
    /// the last one had.
    fn begin_fragment(&mut self, first: &Frame, out: &mut Vec<Event>) {
        let (Some(seg), Some(clock)) = (self.segment.as_ref(), self.clock.as_mut()) else {
            return;
        };
        // Nothing to go by (a stream's first fragment): room for the most.
        let (video, audio) = match self.last_counts {
            None => (limits::FRAGMENT_MAX_SAMPLES, limits::FRAGMENT_MAX_AUDIO_SAMPLES),
            Some((v, a)) => {
                self.audio_spare = (2 * a.div_ceil(v.max(1))).max(AUDIO_ROOM_SPARE_SAMPLES);
                let audio = header_room(a + self.audio_spare, limits::FRAGMENT_MAX_AUDIO_SAMPLES);
                (header_room(v, limits::FRAGMENT_MAX_SAMPLES), audio)
            }
        };
        let audio = seg.audio.as_ref().map(|_| audio);
        self.capacity = (video, audio.unwrap_or(usize::MAX));
        out.push(Event::BeginFragment {
            // And a free box's header, so what the header leaves is always a box.
            header_bytes: fmp4::fragment_header_bytes(video, audio) + 8,
            first_is_key: first.is_key,
            sequence: seg.next_sequence,
            base_decode_90k: (first.pts_90k - seg.start_pts_90k) as u64,
            wall_start_us: clock.wall_us_at(first.pts_90k, first.received_mono_us),
        });
    }

    /// Takes one audio frame: it joins the fragment being gathered, if that fragment's
    /// segment records this audio.
    pub fn push_audio(&mut self, frame: AudioFrame) {
        let same_params =
            |s: &Segment| s.audio.as_ref().is_some_and(|a| Arc::ptr_eq(a, &frame.params) || **a == *frame.params);
        // Sound of a moment before the segment began (the previous segment's, come late)
        // would sit at the segment's start, ahead of its time: it is dropped.
        let ends_90k = frame
            .pts_90k
            .saturating_add(i64::from(frame.duration_samples) * 90_000 / i64::from(frame.params.sample_rate.max(1)));
        let fits = self.segment.as_ref().is_some_and(|s| same_params(s) && ends_90k > s.start_pts_90k)
            && !self.pending.is_empty()
            && self.pending_audio.len() < self.capacity.1
            && self.pending_audio_bytes + frame.data.len() <= limits::FRAGMENT_AUDIO_MAX_BYTES;
        if fits {
            self.pending_audio_bytes += frame.data.len();
            self.pending_audio.push(frame);
        } else {
            self.skipped.audio += 1;
        }
    }

    /// Ends the run: emits the pending fragment (its last frame repeating the previous
    /// duration) and closes the segment.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if !self.pending.is_empty() {
            let last = self.pending.last().expect("non-empty");
            let end_pts = last.pts_90k + self.last_duration_90k;
            let end_mono = last.received_mono_us + clock::ticks_90k_to_us(self.last_duration_90k);
            // Sound after the run's last picture has no picture to go with (a camera that
            // sends its sound ahead of its pictures, then went): the run's sound ends with it.
            self.skipped.audio += self.take_audio_from(end_pts).len() as u64;
            self.emit_fragment(end_pts, end_mono, out);
        }
        if self.segment.take().is_some() {
            out.push(Event::EndSegment);
        }
        self.clock = None;
        self.last_duration_90k = FALLBACK_FRAME_DURATION_90K;
    }

    fn emit_fragment(&mut self, end_pts_90k: i64, end_mono_us: i64, out: &mut Vec<Event>) {
        let frames = std::mem::take(&mut self.pending);
        let audio_frames = std::mem::take(&mut self.pending_audio);
        self.pending_bytes = 0;
        self.pending_audio_bytes = 0;
        let (Some(seg), Some(clock)) = (self.segment.as_mut(), self.clock.as_mut()) else {
            return;
        };
        let (audio_base_decode, audio_frames) = seg.place_audio(audio_frames, &mut self.skipped.audio);
        let audio_samples: Vec<SampleEntry> = audio_frames
            .iter()
            .map(|a| SampleEntry { duration: a.duration_samples, size_bytes: a.data.len() as u32, is_key: true })
            .collect();
        let mut samples = Vec::with_capacity(frames.len());
        for (i, f) in frames.iter().enumerate() {
            let next_pts = frames.get(i + 1).map_or(end_pts_90k, |n| n.pts_90k);
            samples.push(SampleEntry {
                duration: (next_pts - f.pts_90k) as u32,
                size_bytes: f.size_bytes,
                is_key: f.is_key,
            });
        }
        self.last_counts = Some((samples.len(), audio_samples.len()));
        let header_bytes = Fragmenter::header_bytes(self.capacity, seg);
        let first = &frames[0];
        let wall_start_us = clock.wall_us_at(first.pts_90k, first.received_mono_us);
        let wall_end_us = clock.wall_us_at(end_pts_90k, end_mono_us);
        let fragment = FragmentOut {
            sequence: seg.next_sequence,
            base_decode_90k: (first.pts_90k - seg.start_pts_90k) as u64,
            wall_start_us,
            wall_end_us,
            samples,
            header_bytes,
            audio_base_decode,
            audio_samples,
            audio_frames,
        };
        seg.next_sequence += 1;
        seg.bytes += fragment.payload_bytes() + header_bytes as u64;
        out.push(Event::Fragment(fragment));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::AudioCodec;
    use crate::media::Codec;
    use bytes::Bytes;

    const WALL0: i64 = 1_800_000_000_000_000;

    fn params(width: u16) -> Arc<VideoParams> {
        Arc::new(VideoParams {
            codec: Codec::H264,
            rfc6381: "avc1.4d001f".into(),
            width,
            height: 360,
            sample_entry: Bytes::from(crate::media::avc::test_sample_entry()),
        })
    }

    /// A 15 fps stream with a keyframe every `gop` frames.
    fn frame(i: i64, gop: i64, p: &Arc<VideoParams>) -> Frame {
        Frame {
            pts_90k: 1000 + i * 6000,
            received_mono_us: i * 66_667,
            received_wall_us: WALL0 + i * 66_667,
            is_key: i % gop == 0,
            data: Bytes::from(vec![0u8; 100]),
            params: p.clone(),
            audio: None,
        }
    }

    fn bounds() -> SegmentBounds {
        SegmentBounds { max_duration_90k: 10 * 90_000, max_bytes: u64::MAX }
    }

    fn fragments(events: &[Event]) -> Vec<&FragmentOut> {
        events.iter().filter_map(|e| if let Event::Fragment(f) = e { Some(f) } else { None }).collect()
    }

    /// The events that shape files (segments and whole fragments), without the frames'.
    fn structure(events: &[Event]) -> Vec<&Event> {
        events.iter().filter(|e| !matches!(e, Event::BeginFragment { .. } | Event::FrameData(_))).collect()
    }

    #[test]
    fn one_fragment_per_gop_with_durations_that_add_up() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..46 {
            fr.push(frame(i, 15, &p), &mut out);
        }
        fr.finish(&mut out);
        assert!(matches!(out[0], Event::StartSegment { new_run: true, .. }));
        assert!(matches!(out.last(), Some(Event::EndSegment)));
        let frags = fragments(&out);
        assert_eq!(frags.iter().map(|f| f.samples.len()).collect::<Vec<_>>(), [15, 15, 15, 1]);
        for (n, f) in frags.iter().enumerate() {
            assert_eq!(f.sequence, n as u32 + 1);
            assert!(f.samples[0].is_key);
            assert_eq!(f.base_decode_90k, n as u64 * 15 * 6000);
            assert!(f.samples.iter().all(|s| s.duration == 6000));
        }
        // Wall times are continuous from fragment to fragment.
        for w in frags.windows(2) {
            assert_eq!(w[0].wall_end_us, w[1].wall_start_us);
        }
        assert_eq!(frags[0].wall_start_us, WALL0);
    }

    #[test]
    fn a_fragment_asked_to_end_ends_before_the_next_frame_and_loses_none() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..20 {
            if i == 4 {
                fr.cut_at_next_frame();
            }
            fr.push(frame(i, 15, &p), &mut out);
        }
        let frags = fragments(&out);
        // Frames 0-3, then 4-14 (the GOP's rest), asked once only.
        assert_eq!(frags.iter().map(|f| f.samples.len()).collect::<Vec<_>>(), [4, 11]);
        assert!(!frags[1].samples[0].is_key);
        assert_eq!((fr.cut_for_events(), fr.cut_short()), (1, 0));
        // Asked just before a keyframe: the GOP ends there anyway, nothing counted.
        for i in 20..30 {
            fr.push(frame(i, 15, &p), &mut out);
        }
        fr.cut_at_next_frame();
        fr.push(frame(30, 15, &p), &mut out);
        assert_eq!(fragments(&out).last().unwrap().samples.len(), 15);
        assert_eq!(fr.cut_for_events(), 1);
    }

    #[test]
    fn a_run_waits_for_a_keyframe() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 5..20 {
            fr.push(frame(i, 15, &p), &mut out);
        }
        assert_eq!(fr.skipped().before_keyframe, 10);
        assert!(matches!(out[0], Event::StartSegment { .. }));
    }

    #[test]
    fn long_gops_are_cut_at_the_fragment_time_bound() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..150 {
            fr.push(frame(i, 150, &p), &mut out);
        }
        let frags = fragments(&out);
        assert!(!frags.is_empty());
        for f in &frags {
            assert!(f.duration_90k() <= limits::FRAGMENT_MAX_DURATION_90K as u64);
        }
        assert!(!frags[1].samples[0].is_key);
    }

    #[test]
    fn segments_close_at_a_keyframe_past_the_bound_and_on_new_parameters() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..(15 * 25) {
            fr.push(frame(i, 15, &p), &mut out);
        }
        let starts = out.iter().filter(|e| matches!(e, Event::StartSegment { .. })).count();
        assert_eq!(starts, 3, "25 s in 10 s segments");
        let news = out.iter().filter(|e| matches!(e, Event::StartSegment { new_run: true, .. })).count();
        assert_eq!(news, 1, "one run");

        out.clear();
        let q = params(1280);
        fr.push(frame(15 * 25, 15, &q), &mut out);
        assert!(matches!(
            structure(&out)[..],
            [Event::Fragment(_), Event::EndSegment, Event::StartSegment { new_run: false, .. }]
        ));
    }

    #[test]
    fn backwards_time_or_a_clock_step_ends_the_run() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..20 {
            fr.push(frame(i, 15, &p), &mut out);
        }
        out.clear();
        let mut stepped = frame(30, 15, &p);
        stepped.received_wall_us += limits::CLOCK_STEP_MAX_US + 1;
        fr.push(stepped, &mut out);
        assert!(matches!(
            structure(&out)[..],
            [Event::Fragment(_), Event::EndSegment, Event::StartSegment { new_run: true, .. }]
        ));

        out.clear();
        fr.push(frame(2, 15, &p), &mut out); // goes backwards, not a keyframe
        assert!(matches!(structure(&out)[..], [Event::Fragment(_), Event::EndSegment]));
        assert!(!fr.in_run());
    }

    #[test]
    fn an_insane_clock_holds_recording_unless_allowed() {
        let p = params(640);
        let mut early = frame(0, 15, &p);
        early.received_wall_us = 0;
        let mut out = Vec::new();
        let mut strict = Fragmenter::new(bounds(), true);
        strict.push(early.clone(), &mut out);
        assert!(out.is_empty());
        assert_eq!(strict.skipped().clock_not_sane, 1);
        let mut lax = Fragmenter::new(bounds(), false);
        lax.push(early, &mut out);
        assert!(matches!(structure(&out)[..], [Event::StartSegment { .. }]));
    }

    #[test]
    fn fragments_stay_within_sample_and_byte_ceilings() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..(limits::FRAGMENT_MAX_SAMPLES as i64 + 10) {
            let mut f = frame(i, i64::MAX, &p);
            f.pts_90k = 1000 + i * 10; // tiny durations: only the sample ceiling cuts
            f.is_key = i == 0;
            fr.push(f, &mut out);
        }
        assert_eq!(fragments(&out)[0].samples.len(), limits::FRAGMENT_MAX_SAMPLES);

        let mut fr = Fragmenter::new(bounds(), true);
        out.clear();
        for i in 0..8 {
            let mut f = frame(i, i64::MAX, &p);
            f.is_key = i == 0;
            f.data = Bytes::from(vec![0u8; limits::FRAME_MAX_BYTES]);
            fr.push(f, &mut out);
        }
        for f in fragments(&out) {
            assert!(f.payload_bytes() <= limits::FRAGMENT_MAX_BYTES as u64);
        }
    }

    #[test]
    fn frames_go_out_as_they_come_after_room_for_their_header_that_follows_the_last_fragment() {
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        // A GOP of 5, then one that never ends, its frames 10 ticks apart (only room cuts).
        for i in 0..106 {
            let mut f = frame(i, i64::MAX, &p);
            f.is_key = i == 0 || i == 5;
            f.pts_90k = 1000 + i * 10;
            fr.push(f, &mut out);
            assert!(
                matches!(out.last(), Some(Event::FrameData(d)) if d.pts_90k == 1000 + i * 10),
                "frame {i} out at once"
            );
        }
        fr.finish(&mut out);
        let frags = fragments(&out);
        assert_eq!(frags.iter().map(|f| f.samples.len()).collect::<Vec<_>>(), [5, 32, 48, 21]);
        let begun: Vec<usize> = out
            .iter()
            .filter_map(|e| if let Event::BeginFragment { header_bytes, .. } = e { Some(*header_bytes) } else { None })
            .collect();
        let room = |n| fmp4::fragment_header_bytes(n, None) + 8;
        assert_eq!(begun, [room(limits::FRAGMENT_MAX_SAMPLES), room(32), room(48), room(68)]);
        for (f, kept) in frags.iter().zip(&begun) {
            assert_eq!(f.header_bytes, *kept);
            assert!(fmp4::fragment_header_bytes(f.samples.len(), None) + 8 <= *kept);
        }
        // Each fragment's frames came between its beginning and its end.
        let mut open = false;
        for e in &out {
            match e {
                Event::BeginFragment { .. } => {
                    assert!(!open, "begun twice");
                    open = true;
                }
                Event::FrameData(_) => assert!(open),
                Event::Fragment(_) => {
                    assert!(open);
                    open = false;
                }
                _ => assert!(!open),
            }
        }
    }

    fn aac_params() -> Arc<AudioParams> {
        Arc::new(AudioParams {
            codec: crate::media::AudioCodec::Aac,
            rfc6381: "mp4a.40.2".into(),
            sample_rate: 48_000,
            sample_entry: Bytes::new(),
        })
    }

    fn aac(pts_90k: i64, params: &Arc<AudioParams>) -> AudioFrame {
        AudioFrame { pts_90k, duration_samples: 1024, data: Bytes::from(vec![1u8; 20]), params: params.clone() }
    }

    #[test]
    fn audio_rides_with_the_video_fragment_and_its_decode_time_runs_on() {
        let p = params(640);
        let a = aac_params();
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        // Audio before any video has nowhere to go.
        fr.push_audio(aac(0, &a));
        let mut audio_pts = 1000 + 9000; // the first audio frame is 0.1 s after the first video frame
        for i in 0..31 {
            let mut f = frame(i, 15, &p);
            f.audio = Some(a.clone());
            let pts = f.pts_90k;
            fr.push(f, &mut out);
            while audio_pts < pts + 6000 {
                fr.push_audio(aac(audio_pts, &a));
                audio_pts += 1920; // 1024 samples at 48 kHz
            }
        }
        assert_eq!(fr.skipped().audio, 1);
        assert!(matches!(&out[0], Event::StartSegment { audio: Some(_), .. }));
        let frags = fragments(&out);
        assert_eq!(frags.len(), 2);
        assert_eq!(frags[0].audio_base_decode, 4800, "0.1 s into the segment at 48 kHz");
        let first_len = frags[0].audio_samples.len() as u64;
        assert!(first_len >= 40, "{first_len} audio frames in the first second");
        assert_eq!(frags[1].audio_base_decode, 4800 + first_len * 1024, "contiguous");
        assert_eq!(frags[0].payload_bytes(), 15 * 100 + first_len * 20);

        // A segment started without audio parameters records no audio.
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        fr.push(frame(0, 15, &p), &mut out);
        fr.push_audio(aac(1000, &a));
        assert_eq!(fr.skipped().audio, 1);
    }

    #[test]
    fn a_runs_sound_ends_with_its_last_picture() {
        // Three frames at 1000, 7000 and 13,000: the run ends at 19,000 (the last repeats
        // the duration before it). Sound that came ahead of the pictures reaches past it.
        let p = params(640);
        let g711 = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..3 {
            let mut f = frame(i, 15, &p);
            f.audio = Some(g711.clone());
            fr.push(f, &mut out);
        }
        let pcmu = |pts_90k: i64, samples: u32| AudioFrame {
            pts_90k,
            duration_samples: samples,
            data: Bytes::from(vec![0xffu8; samples as usize]),
            params: g711.clone(),
        };
        // 50 ms gathered from 10,000 (to 14,500), then 100 ms from there: its first 400
        // samples start before the end. Then a packet wholly after it.
        fr.push_audio(pcmu(10_000, 400));
        fr.push_audio(pcmu(14_500, 800));
        fr.push_audio(pcmu(23_500, 160));
        fr.finish(&mut out);
        let frags = fragments(&out);
        let last = frags.last().unwrap();
        let durations: Vec<u32> = last.audio_samples.iter().map(|s| s.duration).collect();
        assert_eq!(durations, [400, 400]);
        assert_eq!(last.audio_frames[1].data.len(), 400);
        assert_eq!(fr.skipped().audio, 2, "the sound after the run's end is counted: a frame's end, a whole one");
    }

    #[test]
    fn sound_that_came_before_the_keyframe_that_ends_a_segment_goes_into_the_next_at_its_place() {
        // G.711 in 20 ms packets, each given to the fragmenter 333 ms before the picture of
        // its moment (a camera whose pictures lag more than the queue waits for them). The
        // segment closes at frame 150 (10 s): each segment's sound spans just its pictures.
        let p = params(640);
        let g711 = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        let mut audio_pts = 1000;
        for i in 0..200 {
            let mut f = frame(i, 15, &p);
            f.audio = Some(g711.clone());
            let pts = f.pts_90k;
            fr.push(f, &mut out);
            while audio_pts < pts + 30_000 {
                let data = Bytes::from(vec![0xffu8; 160]);
                fr.push_audio(AudioFrame { pts_90k: audio_pts, duration_samples: 160, data, params: g711.clone() });
                audio_pts += 1_800;
            }
        }
        let (mut segments, mut audio) = (Vec::new(), None);
        for e in &out {
            match e {
                Event::StartSegment { .. } => audio = Some((None, 0u64)),
                Event::Fragment(f) if !f.audio_samples.is_empty() => {
                    let (first, samples) = audio.as_mut().expect("in a segment");
                    first.get_or_insert(f.audio_base_decode);
                    *samples = f.audio_base_decode + f.audio_samples.iter().map(|s| u64::from(s.duration)).sum::<u64>();
                }
                Event::EndSegment => segments.extend(audio.take()),
                _ => {}
            }
        }
        // The first segment: 150 pictures, 10 s, 80,000 samples; the second from its start.
        assert_eq!(segments, [(Some(0), 80_000)], "{:?}", fr.skipped());
        let second = audio.expect("the second segment is open");
        assert_eq!(second.0, Some(0), "the second segment's sound starts with its first picture");
        assert_eq!(fr.skipped().audio, 0, "nothing dropped");
    }

    #[test]
    fn long_gops_are_cut_into_shorter_fragments_counted_without_losing_a_frame() {
        // 1 s GOPs, then 10 s ones: the first long fragments end at their header room (as
        // many samples as the last fragment and a little more), the rest at the duration
        // ceiling; the frames go out as they come, so none is held for its fragment.
        let p = params(640);
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        let gop = |i: i64| if i < 30 { 15 } else { 150 };
        for i in 0..330 {
            let mut f = frame(i, 1, &p);
            f.is_key = i < 30 && i % 15 == 0 || i >= 30 && (i - 30) % gop(i) == 0;
            fr.push(f, &mut out);
        }
        fr.finish(&mut out);
        let frags = fragments(&out);
        let frames: usize = frags.iter().map(|f| f.samples.len()).sum();
        assert_eq!(frames, 330, "every frame written");
        assert_eq!(out.iter().filter(|e| matches!(e, Event::FrameData(_))).count(), 330);
        let media: u64 = frags.iter().map(|f| f.duration_90k()).sum();
        assert_eq!(media, 330 * 6000, "durations add up across the cuts");
        let counts: Vec<usize> = frags.iter().map(|f| f.samples.len()).collect();
        // After a fragment of 15 or 10 samples the room is 32 samples, then 48, then 68 (more
        // than the 60 frames of the 4 s ceiling); a GOP's rest ends at its next keyframe.
        assert_eq!(counts, [15, 15, 32, 48, 60, 10, 32, 48, 60, 10], "{counts:?}");
        assert_eq!(fr.cut_short(), 6, "fragments ended before their GOP did");
    }

    #[test]
    fn a_camera_that_stops_sending_keyframes_cannot_grow_a_segment_without_bound() {
        let p = params(640);
        let small = SegmentBounds { max_duration_90k: i64::MAX, max_bytes: 10_000 };
        let mut fr = Fragmenter::new(small, true);
        let mut out = Vec::new();
        for i in 0..2000 {
            fr.push(frame(i, i64::MAX, &p), &mut out); // only frame 0 is a keyframe
        }
        let written: u64 = fragments(&out).iter().map(|f| f.payload_bytes()).sum();
        assert!(written <= 2 * 10_000 + limits::FRAGMENT_MAX_BYTES as u64, "{written}");
        assert!(matches!(out.last(), Some(Event::EndSegment)));
        assert!(!fr.in_run());
    }

    /// A stream at `fps` with a keyframe every `gop` frames and `per_second` audio frames of
    /// `audio_bytes` each a second, for `frames` video frames; returns the events and the
    /// audio frames pushed.
    fn with_audio(
        fr: &mut Fragmenter,
        fps: i64,
        gop: i64,
        frames: i64,
        per_second: i64,
        audio_bytes: usize,
    ) -> (Vec<Event>, usize) {
        let p = params(640);
        let a = aac_params();
        let (step, audio_step) = (90_000 / fps, 90_000 / per_second);
        let mut out = Vec::new();
        let mut audio_pts = 1000;
        let mut pushed = 0;
        for i in 0..frames {
            let mut f = frame(i, gop, &p);
            (f.pts_90k, f.received_mono_us, f.received_wall_us) =
                (1000 + i * step, i * step * 100 / 9, WALL0 + i * step * 100 / 9);
            f.audio = Some(a.clone());
            let pts = f.pts_90k;
            fr.push(f, &mut out);
            while audio_pts < pts + step {
                fr.push_audio(AudioFrame {
                    pts_90k: audio_pts,
                    // As long as the step to the next (48 kHz), as a camera's frames are.
                    duration_samples: (audio_step * 48_000 / 90_000) as u32,
                    data: Bytes::from(vec![1u8; audio_bytes]),
                    params: a.clone(),
                });
                audio_pts += audio_step;
                pushed += 1;
            }
        }
        fr.finish(&mut out);
        (out, pushed)
    }

    fn audio_kept(out: &[Event]) -> usize {
        fragments(out).iter().map(|f| f.audio_frames.len()).sum()
    }

    #[test]
    fn audio_at_one_video_frame_a_second_keeps_every_frame() {
        // 47 AAC frames come between two video frames: the room and the spare follow them.
        let mut fr = Fragmenter::new(bounds(), true);
        let (out, pushed) = with_audio(&mut fr, 1, 4, 40, 47, 400);
        assert_eq!((audio_kept(&out), fr.skipped().audio), (pushed, 0), "every audio frame kept");
        let frags = fragments(&out);
        for f in &frags {
            assert!(fmp4::fragment_header_bytes(f.samples.len(), Some(f.audio_samples.len())) + 8 <= f.header_bytes);
        }
        assert_eq!(frags.iter().map(|f| f.samples.len()).sum::<usize>(), 40);
    }

    #[test]
    fn a_fragments_audio_stays_under_its_byte_ceiling() {
        // 384 kbit/s of audio ends fragments early at half the ceiling, none dropped; 16 KiB
        // audio frames at 15 fps overflow what a fragment holds, and the excess is counted.
        let mut fr = Fragmenter::new(bounds(), true);
        let (out, pushed) = with_audio(&mut fr, 15, 30, 150, 47, 1024);
        assert_eq!((audio_kept(&out), fr.skipped().audio), (pushed, 0));
        assert!(fr.cut_short() > 0, "fragments ended before their GOP");
        let mut fr = Fragmenter::new(bounds(), true);
        let (out, pushed) = with_audio(&mut fr, 15, 30, 60, 150, 16 << 10);
        for f in fragments(&out) {
            let audio: usize = f.audio_frames.iter().map(|a| a.data.len()).sum();
            assert!(audio <= limits::FRAGMENT_AUDIO_MAX_BYTES, "{audio}");
        }
        assert!(fr.skipped().audio > 0 && (fr.skipped().audio as usize) < pushed);
    }

    #[test]
    fn an_audio_codec_change_closes_the_segment_at_the_next_keyframe_and_loses_no_video() {
        let p = params(640);
        let (aac, pcmu) =
            (aac_params(), Arc::new(crate::media::audio::g711_params(AudioCodec::Pcmu, 8_000, 1).unwrap()));
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..50 {
            let mut f = frame(i, 15, &p);
            // The codec changes at frame 20, mid-GOP; audio goes away at frame 40.
            f.audio = match i {
                0..20 => Some(aac.clone()),
                20..40 => Some(pcmu.clone()),
                _ => None,
            };
            let audio = f.audio.clone();
            let pts = f.pts_90k;
            fr.push(f, &mut out);
            if let Some(a) = audio {
                fr.push_audio(AudioFrame {
                    pts_90k: pts,
                    duration_samples: 160,
                    data: Bytes::from(vec![0xff; 160]),
                    params: a,
                });
            }
        }
        fr.finish(&mut out);
        let starts: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                Event::StartSegment { audio, .. } => Some(audio.as_ref().map(|a| a.codec)),
                _ => None,
            })
            .collect();
        assert_eq!(starts, [Some(AudioCodec::Aac), Some(AudioCodec::Pcmu), None]);
        assert_eq!(out.iter().filter(|e| matches!(e, Event::FrameData(_))).count(), 50, "every video frame kept");
        assert_eq!(fr.skipped().before_keyframe, 0);
        // Frames 20..30 carried PCMU audio while their segment's track was AAC.
        assert_eq!(fr.skipped().audio, 10);
    }

    #[test]
    fn lost_audio_leaves_a_gap_instead_of_pulling_later_audio_early() {
        let p = params(640);
        let a = aac_params();
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        for i in 0..46 {
            let mut f = frame(i, 15, &p);
            f.audio = Some(a.clone());
            let pts = f.pts_90k;
            fr.push(f, &mut out);
            // One audio frame per video frame's span, but none during the second GOP.
            if !(15..30).contains(&i) {
                fr.push_audio(aac(pts, &a));
            }
        }
        let frags = fragments(&out);
        // Frame 30's audio was sent at 2 s: the third fragment's audio starts there.
        assert_eq!(frags[2].audio_base_decode, 2 * 48_000);
    }

    #[test]
    fn audio_moved_earlier_drops_what_it_would_overlap_and_stays_in_step() {
        // G.711 in 20 ms packets, contiguous; after 2 s the camera's reports move the sound
        // 333 ms earlier than its arrival had put it (its times step back by 30,000).
        let p = params(640);
        let g711 = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        let mut fr = Fragmenter::new(bounds(), true);
        let mut out = Vec::new();
        let (mut sent, mut last_pts) = (0i64, 0);
        for i in 0..90 {
            let mut f = frame(i, 15, &p);
            f.audio = Some(g711.clone());
            let pts = f.pts_90k;
            fr.push(f, &mut out);
            while 1000 + sent * 1_800 < pts + 6000 {
                let moved = if sent >= 100 { 30_000 } else { 0 };
                last_pts = 1000 + sent * 1_800 - moved;
                let data = Bytes::from(vec![0xffu8; 160]);
                fr.push_audio(AudioFrame { pts_90k: last_pts, duration_samples: 160, data, params: g711.clone() });
                sent += 1;
            }
        }
        fr.finish(&mut out);
        let frags = fragments(&out);
        let last = frags.last().unwrap();
        let end = last.audio_base_decode + last.audio_samples.iter().map(|s| u64::from(s.duration)).sum::<u64>();
        // The last packet is where its time says: 160 samples after its start.
        let at = (last_pts - 1000) as u64 * 8_000 / 90_000;
        assert_eq!(end, at + 160, "the sound after the move is at its place");
        // 333 ms is 16 packets and 107 samples: 16 dropped, the next cut to its last 53.
        assert_eq!(fr.skipped().audio, 16);
        let cut: Vec<u32> =
            frags.iter().flat_map(|f| &f.audio_samples).map(|s| s.duration).filter(|d| *d != 160).collect();
        assert_eq!(cut, [53], "one packet cut to the sample");
    }
}

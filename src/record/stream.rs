//! One stream's recorder thread: takes frames from the queue, cuts them with the
//! [`Fragmenter`], writes segment files, and reports each fragment to the flusher.
//!
//! A fragment's frames are written as they are taken (none waits in RAM for its fragment to
//! be whole), after room kept for its header; when it is whole its audio follows and its
//! header goes into that room, a `free` box filling what the header did not need. The
//! stream's live fanout is told where each frame went, so the GOP it holds for new viewers
//! need not keep the frame.
//!
//! Crash order kept here: the recording row is committed (durably) before its file is
//! created; fragments are written and reported, and the flusher syncs the file before it
//! commits their rows. A failed write is cut back off the file, so the file on disk is always
//! init segment + whole fragments + at most one torn tail (the fragment being written: room
//! of zeros and frames, which recovery cuts).
//!
//! A full disk: the flusher frees the oldest recording, and the write is retried once. If
//! nothing could be freed the fragment is cut off, its segment closed (so it can be freed in
//! turn) and the fragment dropped and counted; the next keyframe opens a new segment.

use std::io::{self, IoSlice};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;

use tracing::{error, info, warn};

use super::flusher::ToFlusher;
use super::fragmenter::{Event, FragmentOut, Fragmenter};
use super::queue::{FrameReceiver, Recv, StreamMsg};
use super::writers::{Turn, Work};
use crate::base::fs::DataFile;
use crate::catalog::{Catalog, FragmentRow, Keyframe, RecordingRow};
use crate::clock::ticks_90k_to_us;
use crate::limits;
use crate::live::Fanout;
use crate::media::Frame;
use crate::media::fmp4::{self, AudioTrack, TrackRun, write_fragment_header, write_init_segment};
use crate::media::{AudioParams, VideoParams};
use crate::preroll::{Admission, DurableAsk, Out};

/// The most one recorded stream's recorder holds besides the frames in hand for a write:
/// its fragment header buffer, an init segment being made, what the open fragment keeps of
/// its frames and its audio, and room for a write's frames (the budget's "write buffers").
pub fn stream_buffers_bytes() -> usize {
    limits::MOOF_MAX_BYTES
        + limits::INIT_SEGMENT_MAX_BYTES
        + Fragmenter::held_bytes_max()
        + limits::RECORD_WRITE_FRAMES_MAX * size_of::<Frame>()
        + EVENTS_KEPT * size_of::<Event>()
}

/// Events a stream's recorder keeps room for between messages (a frame brings at most five).
const EVENTS_KEPT: usize = 16;

/// Counters of one stream's recorder.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub fragments_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub fragments_dropped: AtomicU64,
    /// Fragments ended before their GOP did (see [`Fragmenter::cut_short`]).
    pub fragments_cut_short: AtomicU64,
    /// Writes of frames tried (each at most [`limits::RECORD_WRITE_FRAMES_MAX`] frames and
    /// [`limits::RECORD_WRITE_BATCH_MAX_BYTES`], or one larger frame), failed ones too.
    pub frame_writes: AtomicU64,
    pub disk_full: AtomicU64,
    pub write_errors: AtomicU64,
    /// Times an event's moment had this stream's fragment cut and the flusher told to make it
    /// durable early (at most once per [`limits::EVENT_FLUSH_MIN_INTERVAL_MS`]); a post-roll
    /// is told too, for the next interval flush, and not counted.
    pub early_flushes: AtomicU64,
    pub fragments_cut_for_events: AtomicU64,
}

/// An open segment file.
struct Segment {
    rec_id: u64,
    row: RecordingRow,
    /// Its file; shared with the stream's live fanout, which reads back the frames of its GOP.
    file: DataFile,
    /// Bytes of whole fragments written (the file's valid length).
    len_bytes: u64,
    /// Fragmenter decode time and sequence at this file's start: a segment reopened mid-run
    /// after a write failure starts its own numbering.
    decode_offset_90k: u64,
    sequence_offset: u32,
    /// Audio decode time (in the fragmenter's count) at this file's start.
    audio_decode_offset: Option<u64>,
    /// The fragment whose frames are being written, if one is.
    fragment: Option<OpenFragment>,
}

/// A fragment being written: its frames go to the file as they come, after room kept for
/// its header, which is written when it is whole.
struct OpenFragment {
    /// Where it starts: the end of the file's whole fragments.
    start_byte: u64,
    header_bytes: usize,
    /// Bytes of its video frames written so far.
    video_bytes: u64,
    /// The room for its header is on disk (as zeros, written with its first frames, so
    /// the header later overwrites blocks the file already has).
    room_written: bool,
    /// A write failed: the rest of it is not written, and it is dropped when whole.
    failed: bool,
}

pub struct StreamRecorder {
    pub stream_id: u32,
    /// `recordings/<camera>/<stream>`, relative to the data directory.
    pub dir_rel: String,
    pub data_dir: PathBuf,
    pub catalog: Arc<Catalog>,
    pub flusher: SyncSender<ToFlusher>,
    pub fragmenter: Fragmenter,
    pub stats: Arc<RecorderStats>,
    segment: Option<Segment>,
    params: Option<Arc<VideoParams>>,
    audio: Option<Arc<AudioParams>>,
    run_id: u64,
    /// What the fragmenter asked for, kept between messages so none allocates.
    events: Vec<Event>,
    header_buf: Box<[u8; limits::MOOF_MAX_BYTES]>,
    /// The stream's live fanout: told where each written frame is, so its held GOP need
    /// not keep the frame in RAM.
    live: Option<Arc<Fanout>>,
    /// The box's count of bytes recorded.
    wear: Arc<super::Wear>,
    /// Frames of the open fragment taken this turn, written together at its end (or before
    /// anything else is written, or when the batch's ceilings are reached).
    unwritten: Vec<Frame>,
    unwritten_bytes: usize,
    durable: Durable,
}

/// Where a stream is in making its footage durable early for events: at an event's moment
/// by a cut (`asked`, then `armed`), at a post-roll's end by the fragment that holds it
/// (`at_fragment_end`, then `post_roll_written`). The flusher decides when each is
/// committed ([`super::schedule`]).
#[derive(Default)]
struct Durable {
    /// An event's moment was recorded; waits for [`limits::EVENT_FLUSH_MIN_INTERVAL_MS`]
    /// since the last early flush.
    asked: Option<Cut>,
    /// The open fragment ends at the next frame, after which the flusher is told.
    armed: Option<Cut>,
    /// A post-roll ended: the flusher is told once the fragment holding it is written.
    at_fragment_end: bool,
    /// That fragment is written.
    post_roll_written: bool,
    /// When the last cut was armed (monotonic µs).
    last_mono_us: Option<i64>,
}

/// What an event's cut tells the flusher: how many streams of the camera the event asked,
/// and when its post-roll ends (monotonic µs).
#[derive(Clone, Copy)]
struct Cut {
    streams: u32,
    post_roll_end_mono_us: i64,
}

impl Durable {
    fn spaced(&self, now_mono_us: i64) -> bool {
        self.last_mono_us.is_none_or(|last| now_mono_us - last >= limits::EVENT_FLUSH_MIN_INTERVAL_MS as i64 * 1000)
    }

    /// After a frame's fragments are written: what to tell stream `stream_id`'s flusher,
    /// given the cut whose fragment was just sent (`cut_sent`) and whether any fragment was
    /// written.
    fn after_frame(&mut self, stream_id: u32, cut_sent: Option<Cut>, fragment_written: bool) -> Option<ToFlusher> {
        self.post_roll_written |= self.at_fragment_end && fragment_written;
        if let Some(Cut { streams, post_roll_end_mono_us }) = cut_sent {
            // Every frame before this one is written: the cut's flush holds any post-roll
            // ended by now too.
            (self.at_fragment_end, self.post_roll_written) = (false, false);
            return Some(ToFlusher::Moment { stream_id, streams, post_roll_end_mono_us });
        }
        // Not spaced: the flusher spaces the flushes a post-roll may still ask for, and the
        // next event's cut must not wait on this.
        if self.post_roll_written {
            (self.at_fragment_end, self.post_roll_written) = (false, false);
            return Some(ToFlusher::PostRollWritten { stream_id });
        }
        None
    }
}

impl StreamRecorder {
    pub fn new(
        stream_id: u32,
        dir_rel: String,
        data_dir: PathBuf,
        catalog: Arc<Catalog>,
        flusher: SyncSender<ToFlusher>,
        fragmenter: Fragmenter,
    ) -> Self {
        StreamRecorder {
            stream_id,
            dir_rel,
            data_dir,
            catalog,
            flusher,
            fragmenter,
            stats: Arc::default(),
            segment: None,
            params: None,
            audio: None,
            run_id: 0,
            events: Vec::new(),
            header_buf: fmp4::fragment_header_buffer(),
            live: None,
            wear: Arc::default(),
            unwritten: Vec::new(),
            unwritten_bytes: 0,
            durable: Durable::default(),
        }
    }

    /// Tells `live` (the stream's fanout) where each frame is once written.
    pub fn with_live(mut self, live: Option<Arc<Fanout>>) -> Self {
        self.live = live;
        self
    }

    /// Counts what it writes in the box's flash wear report.
    pub fn with_wear(mut self, wear: Arc<super::Wear>) -> Self {
        self.wear = wear;
        self
    }

    /// This stream as a writer's job: records what `admission` lets through from `rx` until
    /// the queue closes, then closes what is open.
    pub fn into_work(self, rx: FrameReceiver, admission: Admission) -> Box<dyn Work> {
        Box::new(Recording { recorder: self, rx, admission })
    }

    /// Records one message from the stream's queue.
    pub(crate) fn take(&mut self, msg: StreamMsg, admission: &mut Admission) {
        let mut events = std::mem::take(&mut self.events);
        // The frame this message brings, when an early flush is armed, ends the fragment
        // before it: the flusher is told once that fragment is sent.
        let mut cut_sent = None;
        let mut now_mono_us = None;
        match msg {
            StreamMsg::Frame { frame, after_gap } => {
                now_mono_us = Some(frame.received_mono_us);
                // When the frame is in the run's wall time: a run's wall time may run behind
                // the frames' arrival (its first frame came late, within what the slew has
                // not yet taken up), and the cut must reach the event's moment as recorded,
                // not only as received (found by the QEMU power cuts: the fragment cut at
                // the first frame received past the event ended before its wall time).
                let recorded_mono_us = frame.received_mono_us - self.fragmenter.lag_us(&frame).max(0);
                match admission.trigger().take_durable(recorded_mono_us) {
                    Some(DurableAsk::Cut { streams, post_roll_end_mono_us }) => {
                        self.durable.asked = Some(Cut { streams, post_roll_end_mono_us });
                    }
                    Some(DurableAsk::AtFragmentEnd) => self.durable.at_fragment_end = true,
                    None => {}
                }
                cut_sent = self.durable.armed.take();
                let fragmenter = &mut self.fragmenter;
                let mut finished = false;
                admission.frame(frame, after_gap, &mut |out| match out {
                    Out::Frame { frame, after_gap } => {
                        if after_gap {
                            fragmenter.finish(&mut events);
                        }
                        fragmenter.push(frame, &mut events);
                    }
                    Out::Audio(a) => fragmenter.push_audio(a),
                    Out::Finish => {
                        fragmenter.finish(&mut events);
                        finished = true;
                    }
                });
                // An event recording ends with its post-roll written: its last fragment,
                // written now, made durable too.
                self.durable.at_fragment_end |= finished;
            }
            StreamMsg::Audio(frame) => {
                let fragmenter = &mut self.fragmenter;
                admission.audio(frame, &mut |out| {
                    if let Out::Audio(a) = out {
                        fragmenter.push_audio(a);
                    }
                });
            }
            StreamMsg::SessionEnded => self.fragmenter.finish(&mut events),
        }
        let fragments_before = self.stats.fragments_written.load(Ordering::Relaxed);
        for e in events.drain(..) {
            self.apply(e);
        }
        let fragment_written = self.stats.fragments_written.load(Ordering::Relaxed) > fragments_before;
        // A pre-roll handed over at an event's start brings hundreds of events at once; the
        // vector keeps room for a turn's usual few, which the budget counts.
        events.shrink_to(EVENTS_KEPT);
        self.events = events;
        // After the fragment just sent: the flusher syncs and commits it with the rest.
        if let Some(tell) = self.durable.after_frame(self.stream_id, cut_sent, fragment_written) {
            let moment = matches!(tell, ToFlusher::Moment { .. });
            if self.flusher.send(tell).is_ok() && moment {
                self.stats.early_flushes.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(now) = now_mono_us {
            self.arm_early_flush(now);
        }
        self.stats.fragments_cut_short.store(self.fragmenter.cut_short(), Ordering::Relaxed);
        self.stats.fragments_cut_for_events.store(self.fragmenter.cut_for_events(), Ordering::Relaxed);
    }

    /// Arms an early flush an event asked for, unless one was armed less than
    /// [`limits::EVENT_FLUSH_MIN_INTERVAL_MS`] ago (then it waits).
    fn arm_early_flush(&mut self, now_mono_us: i64) {
        let d = &mut self.durable;
        if d.asked.is_some() && d.armed.is_none() && d.spaced(now_mono_us) {
            d.armed = d.asked.take();
            d.last_mono_us = Some(now_mono_us);
            self.fragmenter.cut_at_next_frame();
        }
    }

    /// Closes what is open: the queue has closed.
    pub(crate) fn finish(&mut self) {
        let mut events = Vec::new();
        self.fragmenter.finish(&mut events);
        for e in events {
            self.apply(e);
        }
        self.write_frames();
    }

    fn apply(&mut self, event: Event) {
        if !matches!(event, Event::FrameData(_)) {
            // What comes next writes where the frames end.
            self.write_frames();
        }
        match event {
            Event::StartSegment { params, audio, new_run, wall_start_us } => {
                if new_run || self.run_id == 0 {
                    match self.catalog.next_run_id() {
                        Ok(id) => self.run_id = id,
                        Err(e) => error!(stream = self.stream_id, "cannot start a run: {e}"),
                    }
                }
                self.params = Some(params);
                self.audio = audio;
                self.open_segment(wall_start_us, 0, 0);
            }
            Event::BeginFragment { header_bytes, first_is_key, sequence, base_decode_90k, wall_start_us } => {
                if self.segment.is_none() && first_is_key {
                    // The segment was lost to a write error; a keyframe lets a new file start here.
                    self.open_segment(wall_start_us, base_decode_90k, sequence - 1);
                }
                if let Some(seg) = self.segment.as_mut() {
                    if seg.fragment.is_some() {
                        // Never whole (the fragmenter always ends what it begins): cut it off.
                        cut_back(seg, self.live.as_deref());
                    }
                    let start_byte = seg.len_bytes;
                    let failed = header_bytes > ROOM_ZEROS.len();
                    seg.fragment =
                        Some(OpenFragment { start_byte, header_bytes, video_bytes: 0, room_written: false, failed });
                }
            }
            Event::FrameData(frame) => {
                // A writer holds at most one batch (or one larger frame): the budget's line.
                if self.unwritten_bytes + frame.data.len() > limits::RECORD_WRITE_BATCH_MAX_BYTES {
                    self.write_frames();
                }
                self.unwritten_bytes += frame.data.len();
                self.unwritten.push(frame);
                if self.unwritten.len() >= limits::RECORD_WRITE_FRAMES_MAX {
                    self.write_frames();
                }
            }
            Event::Fragment(f) => self.write_fragment(f),
            Event::EndSegment => self.close_segment(),
        }
    }

    fn open_segment(&mut self, wall_start_us: i64, decode_offset_90k: u64, sequence_offset: u32) {
        let Some(params) = self.params.clone() else {
            return;
        };
        let video = (params.codec, params.width, params.height);
        let row = RecordingRow::opening(
            self.stream_id,
            self.run_id,
            video,
            wall_start_us,
            self.audio.as_ref().map(|a| a.codec),
        );
        // File names sort by time: 20 digits of µs since the epoch, then the id.
        let dir_rel = self.dir_rel.clone();
        let name_us = wall_start_us.max(0);
        let (rec_id, mut row) =
            match self.catalog.begin_recording(row, |id| format!("{dir_rel}/{name_us:020}-{id}.mp4")) {
                Ok(r) => r,
                Err(e) => {
                    error!(stream = self.stream_id, "cannot add a recording to the catalog: {e}");
                    return;
                }
            };
        let path = self.data_dir.join(&row.path);
        let mut init = vec![0u8; limits::INIT_SEGMENT_MAX_BYTES];
        let audio =
            self.audio.as_ref().map(|a| AudioTrack { sample_entry: &a.sample_entry, sample_rate: a.sample_rate });
        let created = write_init_segment(&mut init, &params.sample_entry, params.width, params.height, audio)
            .map_err(io::Error::other)
            .and_then(|n| {
                init.truncate(n);
                let file = DataFile::create_new(&path)?;
                file.write_all_at(&init, 0)?;
                Ok(file)
            });
        match created {
            Ok(file) => {
                row.init_bytes = init.len() as u64;
                row.bytes = row.init_bytes;
                info!(stream = self.stream_id, recording = rec_id, "recording to {}", row.path);
                let _ = self.flusher.send(ToFlusher::Created { rec_id, recording: row.clone() });
                self.segment = Some(Segment {
                    rec_id,
                    row,
                    file,
                    len_bytes: init.len() as u64,
                    decode_offset_90k,
                    sequence_offset,
                    // The fragmenter counts audio from its segment's start, as it does video.
                    audio_decode_offset: self
                        .audio
                        .as_ref()
                        .map(|a| decode_offset_90k * u64::from(a.sample_rate) / 90_000),
                    fragment: None,
                });
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                error!(path = %path.display(), "cannot create segment: {e}");
                // Drop the row now (its file, if half made, through the garbage list) rather
                // than leave an open row with no file until the next start.
                let _ = crate::base::fs::remove_file(&path);
                if let Err(e) = self.catalog.delete_recording(rec_id, crate::catalog::Loss::WriteError) {
                    warn!(recording = rec_id, "cannot drop the row of a segment never made: {e}");
                }
            }
        }
    }

    fn close_segment(&mut self) {
        if let Some(mut seg) = self.segment.take() {
            if seg.fragment.is_some() {
                cut_back(&mut seg, self.live.as_deref());
            }
            seg.row.open = false;
            let _ = self.flusher.send(ToFlusher::Closed { rec_id: seg.rec_id, recording: seg.row });
        }
    }

    /// Writes the open fragment's frames taken since the last write, in one call, where
    /// the file stands (one write a turn rather than one a frame: the syscalls were a third
    /// of recording's CPU). A full disk frees the oldest recording and tries again once; a
    /// frame that cannot be written fails its fragment, which is dropped when whole.
    pub(crate) fn write_frames(&mut self) {
        if self.unwritten.is_empty() {
            return;
        }
        let frames = std::mem::take(&mut self.unwritten);
        self.unwritten_bytes = 0;
        let Some(seg) = self.segment.as_mut() else { return self.keep(frames) };
        let Some(fragment) = seg.fragment.as_mut().filter(|f| !f.failed) else { return self.keep(frames) };
        let at = fragment.start_byte + fragment.header_bytes as u64 + fragment.video_bytes;
        // The fragment's first frames bring the room for its header before them.
        let room = (!fragment.room_written).then_some(&ROOM_ZEROS[..fragment.header_bytes]);
        let from = if room.is_some() { fragment.start_byte } else { at };
        self.stats.frame_writes.fetch_add(1, Ordering::Relaxed);
        let result = write_making_room(&seg.file, &self.flusher, &self.stats, self.stream_id, |file| {
            let mut slices: Vec<IoSlice<'_>> = room.map(IoSlice::new).into_iter().collect();
            slices.extend(frames.iter().map(|f| IoSlice::new(&f.data)));
            file.write_vectored_at(from, &mut slices)
        });
        match result {
            Ok(()) => {
                fragment.room_written = true;
                let mut offset = at;
                for f in &frames {
                    if let Some(live) = &self.live {
                        live.written(&f.data, seg.file.shared(), offset);
                    }
                    offset += f.data.len() as u64;
                }
                fragment.video_bytes = offset - fragment.start_byte - fragment.header_bytes as u64;
            }
            Err(e) => {
                if !is_disk_full(&e) {
                    self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                }
                error!(stream = self.stream_id, "cannot write frames, their fragment is dropped: {e}");
                fragment.failed = true;
                // Its bytes go now, not when it is whole: they may be what the disk lacks
                // (and the held GOP may point at them).
                let _ = seg.file.set_len(seg.len_bytes);
                if let Some(live) = &self.live {
                    live.forget_gop();
                }
            }
        }
        self.keep(frames);
    }

    /// Keeps `frames`' vector (emptied) for the next turn's frames, so none allocates.
    fn keep(&mut self, mut frames: Vec<Frame>) {
        frames.clear();
        self.unwritten = frames;
    }

    /// Completes the open fragment: its audio after its video, then its header in the room
    /// kept for it; reports it to the flusher. A fragment that failed is cut off the file,
    /// counted, and its segment closed (so its whole fragments can be played and, if the
    /// disk is full, deleted); the next keyframe opens a new one.
    fn write_fragment(&mut self, f: FragmentOut) {
        let result = match self.segment.as_mut() {
            None => Err(None),
            Some(seg) => match seg.fragment.take() {
                Some(fragment) if !fragment.failed => self.complete(&f, fragment).map_err(Some),
                Some(_) => Err(None),
                None => Err(None),
            },
        };
        match result {
            Ok(row) => self.report(f, row),
            Err(e) => {
                self.stats.fragments_dropped.fetch_add(1, Ordering::Relaxed);
                if let Some(e) = e {
                    if !is_disk_full(&e) {
                        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    error!(stream = self.stream_id, "fragment dropped: {e}");
                }
                if let Some(seg) = self.segment.as_mut() {
                    cut_back(seg, self.live.as_deref());
                }
                self.close_segment();
            }
        }
    }

    /// Writes a fragment's audio and header; on failure the caller cuts the file back.
    fn complete(&mut self, f: &FragmentOut, fragment: OpenFragment) -> io::Result<FragmentRow> {
        let seg = self.segment.as_mut().expect("checked by caller");
        let video_bytes: u64 = f.samples.iter().map(|s| u64::from(s.size_bytes)).sum();
        if video_bytes != fragment.video_bytes || f.header_bytes != fragment.header_bytes || !fragment.room_written {
            return Err(io::Error::other("a fragment's frames and its header disagree"));
        }
        let sequence = f.sequence - seg.sequence_offset;
        let base_decode_90k = f.base_decode_90k - seg.decode_offset_90k;
        let video = TrackRun { base_decode: base_decode_90k, samples: &f.samples };
        // A segment reopened mid-run numbers its audio from its own first fragment.
        let audio_offset = seg.audio_decode_offset.unwrap_or(0);
        let audio = seg.row.audio.is_some().then(|| TrackRun {
            base_decode: f.audio_base_decode.saturating_sub(audio_offset),
            samples: &f.audio_samples,
        });
        let (flusher, stats, stream) = (&self.flusher, &*self.stats, self.stream_id);
        if seg.row.audio.is_some() && !f.audio_frames.is_empty() {
            let audio_at = fragment.start_byte + fragment.header_bytes as u64 + fragment.video_bytes;
            write_making_room(&seg.file, flusher, stats, stream, |file| {
                let mut slices: Vec<IoSlice<'_>> = f.audio_frames.iter().map(|a| IoSlice::new(&a.data)).collect();
                file.write_vectored_at(audio_at, &mut slices)
            })?;
        }
        // The header goes at the end of the room kept for it; a free box fills the rest.
        let head_len = write_fragment_header(&mut self.header_buf[..], sequence, f.wall_start_us, video, audio)
            .map_err(io::Error::other)?;
        let free_bytes = fragment.header_bytes.checked_sub(head_len).filter(|n| *n >= 8);
        let free_bytes =
            free_bytes.ok_or_else(|| io::Error::other("a fragment's header outgrew the room kept for it"))?;
        let mut free = [0u8; 8];
        free[..4].copy_from_slice(&(free_bytes as u32).to_be_bytes());
        free[4..].copy_from_slice(b"free");
        let head = &self.header_buf[..head_len];
        write_making_room(&seg.file, flusher, stats, stream, |file| {
            file.write_all_at(&free, fragment.start_byte)?;
            file.write_all_at(head, fragment.start_byte + free_bytes as u64)
        })?;
        let start_byte = fragment.start_byte;
        seg.len_bytes = start_byte + fragment.header_bytes as u64 + f.payload_bytes();
        Ok(FragmentRow {
            wall_start_us: f.wall_start_us,
            wall_end_us: f.wall_end_us,
            media_start_90k: base_decode_90k,
            duration_90k: f.duration_90k(),
            start_byte,
            end_byte: seg.len_bytes,
            frames: f.samples.len() as u32,
            keyframes: f.samples.iter().filter(|s| s.is_key).count() as u32,
        })
    }

    fn report(&mut self, f: FragmentOut, row: FragmentRow) {
        let seg = self.segment.as_mut().expect("just written");
        let mut keyframes = Vec::new();
        let mut offset_90k: i64 = 0;
        for s in &f.samples {
            if s.is_key {
                keyframes.push(Keyframe {
                    wall_us: f.wall_start_us + ticks_90k_to_us(offset_90k),
                    fragment_start_byte: row.start_byte,
                });
            }
            offset_90k += i64::from(s.duration);
        }
        let r = &mut seg.row;
        r.wall_end_us = row.wall_end_us;
        r.media_duration_90k = row.media_start_90k + row.duration_90k;
        r.bytes = row.end_byte;
        r.frames += u64::from(row.frames);
        r.fragments += 1;
        self.stats.fragments_written.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_written.fetch_add(row.end_byte - row.start_byte, Ordering::Relaxed);
        self.wear.recording_bytes.fetch_add(row.end_byte - row.start_byte, Ordering::Relaxed);
        let sequence = r.fragments;
        let msg = ToFlusher::Fragment { rec_id: seg.rec_id, sequence, row, keyframes, recording: r.clone() };
        if self.flusher.send(msg).is_err() {
            error!(stream = self.stream_id, "catalog writer is gone");
        }
    }
}

/// A recorded stream as the writers take turns at it.
struct Recording {
    recorder: StreamRecorder,
    rx: FrameReceiver,
    admission: Admission,
}

impl Work for Recording {
    /// Takes what the queue holds now, no more, so the other streams get their turns.
    fn turn(&mut self) -> Turn {
        let mut worked = false;
        for _ in 0..self.rx.len().max(1) {
            match self.rx.try_recv() {
                Recv::Msg(msg) => {
                    self.recorder.take(msg, &mut self.admission);
                    worked = true;
                }
                Recv::Empty => break,
                Recv::Closed => {
                    self.recorder.finish();
                    return Turn::Ended;
                }
            }
        }
        self.recorder.write_frames();
        if worked { Turn::Worked } else { Turn::Idle }
    }
}

/// Zeros for the room kept for a fragment's header.
static ROOM_ZEROS: [u8; limits::MOOF_MAX_BYTES] = [0; limits::MOOF_MAX_BYTES];

/// Runs `write` (which says where it writes, so running it again writes the same); on a
/// full disk asks the flusher to free the oldest recording and runs it once more.
fn write_making_room(
    file: &DataFile,
    flusher: &SyncSender<ToFlusher>,
    stats: &RecorderStats,
    stream: u32,
    mut write: impl FnMut(&DataFile) -> io::Result<()>,
) -> io::Result<()> {
    match write(file) {
        Err(e) if is_disk_full(&e) => {
            stats.disk_full.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let freed =
                if flusher.send(ToFlusher::NeedSpace { reply: tx }).is_ok() { rx.recv().unwrap_or(0) } else { 0 };
            warn!(stream, freed_bytes = freed, "disk full while writing");
            if freed > 0 { write(file) } else { Err(e) }
        }
        other => other,
    }
}

/// Cuts the file back to its whole fragments (the one being written, if any, goes). Best
/// effort: if even this fails, recovery cuts the torn tail at the next start.
fn cut_back(seg: &mut Segment, live: Option<&Fanout>) {
    seg.fragment = None;
    let _ = seg.file.set_len(seg.len_bytes);
    // The held GOP may point at what was cut.
    if let Some(live) = live {
        live.forget_gop();
    }
}

fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(libc::ENOSPC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::StreamKey;
    use crate::media::Codec;
    use crate::preroll::Mode;
    use crate::record::fragmenter::SegmentBounds;

    /// A continuously recorded stream in `dir`, and the flusher's end of its channel.
    fn recorder(dir: &std::path::Path) -> (StreamRecorder, Admission, std::sync::mpsc::Receiver<ToFlusher>) {
        let catalog = Arc::new(Catalog::open(&dir.join("c.redb")).unwrap());
        let stream_id = catalog.stream_id(&StreamKey::parse("c/main").unwrap()).unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(1024);
        let bounds = SegmentBounds { max_duration_90k: 60 * 90_000, max_bytes: u64::MAX };
        let rec = StreamRecorder::new(
            stream_id,
            "recordings/c/main".into(),
            dir.into(),
            catalog,
            tx,
            Fragmenter::new(bounds, false),
        );
        (rec, Admission::new(Mode::Continuous, None, Arc::default()), rx)
    }

    /// Frame `i` of a 30 fps stream with one keyframe, of `len` bytes.
    fn frame(i: i64, len: usize, params: &Arc<VideoParams>) -> StreamMsg {
        frame_of_gop(i, i64::MAX, len, params)
    }

    /// Frame `i` of a 30 fps stream with a keyframe every `gop` frames, of `len` bytes.
    fn frame_of_gop(i: i64, gop: i64, len: usize, params: &Arc<VideoParams>) -> StreamMsg {
        let frame = Frame {
            pts_90k: i * 3000,
            received_mono_us: 1 + i * 33_333,
            received_wall_us: 1_800_000_000_000_000 + i * 33_333,
            is_key: i % gop == 0,
            data: bytes::Bytes::from(vec![7u8; len]),
            params: params.clone(),
            audio: None,
        };
        StreamMsg::Frame { frame, after_gap: i == 0 }
    }

    fn params() -> Arc<VideoParams> {
        let sample_entry = bytes::Bytes::from(crate::media::avc::test_sample_entry());
        Arc::new(VideoParams {
            codec: Codec::H264,
            rfc6381: "avc1.4d001f".into(),
            width: 640,
            height: 360,
            sample_entry,
        })
    }

    #[test]
    fn an_event_flushes_at_its_moment_by_a_cut_and_after_its_post_roll_at_its_fragments_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = params();
        let (mut rec, _, rx) = recorder(dir.path());
        let trigger = Arc::new(crate::preroll::Trigger::new(3_000));
        let mut admission = Admission::new(Mode::Continuous, None, trigger.clone());
        // A keyframe a second; an event at frame 40 (1.33 s), its post-roll to frame 130.
        let mut told = Vec::new();
        for i in 0..200 {
            if i == 40 {
                trigger.ask_durable(1 + 40 * 33_333, 1);
            }
            rec.take(frame_of_gop(i, 30, 500, &p), &mut admission);
            rec.write_frames();
            told.extend(rx.try_iter().filter_map(|m| match m {
                ToFlusher::Moment { streams: 1, post_roll_end_mono_us, .. } => Some((i, post_roll_end_mono_us)),
                ToFlusher::PostRollWritten { .. } => Some((i, 0)),
                _ => None,
            }));
        }
        // Its moment: armed at frame 40, the fragment cut before frame 41, its post-roll's end
        // told. Its post-roll: the fragment holding frame 129 ends at the keyframe at 150,
        // where the flusher is told, uncut.
        assert_eq!(told, [(41, 1 + 40 * 33_333 + 3_000_000), (150, 0)]);
        assert_eq!(rec.fragmenter.cut_for_events(), 1, "one extra fragment header an event");
        assert_eq!(rec.stats.early_flushes.load(Ordering::Relaxed), 1, "the moment's");
        rec.finish();
    }

    #[test]
    fn an_events_cut_reaches_its_moment_as_recorded_when_the_runs_wall_time_lags_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let p = params();
        let (mut rec, _, rx) = recorder(dir.path());
        let trigger = Arc::new(crate::preroll::Trigger::new(3_000));
        let mut admission = Admission::new(Mode::Continuous, None, trigger.clone());
        // The first frame came at once, every later one 400 ms after its time: the run's
        // wall time runs 400 ms behind the frames' arrival.
        const LATE_US: i64 = 400_000;
        let at = |i: i64| 1 + i * 33_333 + if i > 0 { LATE_US } else { 0 };
        let event_wall_us = 1_800_000_000_000_000 + 40 * 33_333 + LATE_US;
        let mut cut = None;
        for i in 0..90 {
            if i == 40 {
                // As the intake sees it: when it arrived, at frame 40's arrival.
                trigger.ask_durable(at(40), 1);
            }
            let StreamMsg::Frame { mut frame, after_gap } = frame_of_gop(i, 30, 500, &p) else { unreachable!() };
            frame.received_mono_us = at(i);
            frame.received_wall_us += at(i) - (1 + i * 33_333);
            rec.take(StreamMsg::Frame { frame, after_gap }, &mut admission);
            rec.write_frames();
            let mut last_end = None;
            for m in rx.try_iter() {
                match m {
                    ToFlusher::Fragment { row, .. } => last_end = Some(row.wall_end_us),
                    ToFlusher::Moment { .. } if cut.is_none() => cut = last_end,
                    _ => {}
                }
            }
        }
        let end_us = cut.expect("an early flush after a fragment");
        assert!(end_us >= event_wall_us, "the cut fragment ends {} ms short", (event_wall_us - end_us) / 1000);
        rec.finish();
    }

    #[test]
    fn a_write_takes_at_most_its_ceilings_of_frames_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = params();
        // Small frames: 64 to a write, and what a fragment's end finds unwritten.
        let (mut rec, mut admission, _flusher) = recorder(dir.path());
        for i in 0..=120 {
            rec.take(frame(i, 1000, &p), &mut admission);
        }
        // Frames 0 to 63 at the ceiling, 64 to 119 when frame 120 ended the 4 s fragment.
        assert_eq!(rec.stats.frame_writes.load(Ordering::Relaxed), 2);
        assert_eq!(rec.stats.fragments_written.load(Ordering::Relaxed), 1);
        assert_eq!((rec.unwritten.len(), rec.unwritten_bytes), (1, 1000), "frame 120 waits for the turn's end");
        rec.finish();

        // Large frames: as many to a write as fit RECORD_WRITE_BATCH_MAX_BYTES.
        let dir = tempfile::tempdir().unwrap();
        let (mut rec, mut admission, _flusher) = recorder(dir.path());
        let len = limits::RECORD_WRITE_BATCH_MAX_BYTES / 3 - 1;
        for i in 0..10 {
            rec.take(frame(i, len, &p), &mut admission);
            assert!(rec.unwritten_bytes <= limits::RECORD_WRITE_BATCH_MAX_BYTES);
        }
        assert_eq!(rec.stats.frame_writes.load(Ordering::Relaxed), 3, "frames 0-2, 3-5 and 6-8 written");
        rec.finish();
        assert_eq!(rec.stats.frame_writes.load(Ordering::Relaxed), 4);
        assert_eq!(rec.stats.fragments_written.load(Ordering::Relaxed), 1);
        let row = rec.catalog.recordings().unwrap();
        let file = std::fs::metadata(dir.path().join(&row[0].1.path)).unwrap().len();
        assert!(file > 10 * len as u64, "every frame on disk: {file} bytes");
    }
}

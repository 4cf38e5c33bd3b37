//! One stream's recorder thread: takes frames from the queue, cuts them with the
//! [`Fragmenter`], writes segment files, and reports each fragment to the flusher.
//!
//! Crash order kept here: the recording row is committed (durably) before its file is
//! created; fragments are appended and reported, and the flusher syncs the file before it
//! commits their rows. A failed write is cut back off the file, so the file on disk is always
//! init segment + whole fragments + at most one torn tail (which recovery cuts).
//!
//! A full disk: the write is cut back, the flusher frees the oldest recording, and the write
//! is retried once. If nothing could be freed the segment is closed (so it can be freed in
//! turn) and the fragment is dropped and counted; recording goes on.

use std::fs::File;
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;

use tracing::{error, info, warn};

use super::flusher::ToFlusher;
use super::fragmenter::{Event, FragmentOut, Fragmenter};
use super::queue::{FrameReceiver, Recv, StreamMsg};
use super::writers::{Turn, Work};
use crate::catalog::{Catalog, FragmentRow, Keyframe, RecordingRow};
use crate::clock::ticks_90k_to_us;
use crate::limits;
use crate::media::fmp4::{self, AudioTrack, TrackRun, write_fragment_header, write_init_segment};
use crate::media::{AudioParams, VideoParams};
use crate::preroll::{Admission, Out};

/// Counters of one stream's recorder.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub fragments_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub fragments_dropped: AtomicU64,
    /// Fragments written early because the fragment pool was full.
    pub fragments_cut_short: AtomicU64,
    pub disk_full: AtomicU64,
    pub write_errors: AtomicU64,
}

/// An open segment file.
struct Segment {
    rec_id: u64,
    row: RecordingRow,
    file: File,
    /// Bytes of whole fragments written (the file's valid length).
    len_bytes: u64,
    /// Fragmenter decode time and sequence at this file's start: a segment reopened mid-run
    /// after a write failure starts its own numbering.
    decode_offset_90k: u64,
    sequence_offset: u32,
    /// Audio decode time (in the fragmenter's count) at this file's start.
    audio_decode_offset: Option<u64>,
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
        }
    }

    /// This stream as a writer's job: records what `admission` lets through from `rx` until
    /// the queue closes, then closes what is open.
    pub fn into_work(self, rx: FrameReceiver, admission: Admission) -> Box<dyn Work> {
        Box::new(Recording { recorder: self, rx, admission })
    }

    /// Records one message from the stream's queue.
    pub(crate) fn take(&mut self, msg: StreamMsg, admission: &mut Admission) {
        let mut events = std::mem::take(&mut self.events);
        match msg {
            StreamMsg::Frame { frame, after_gap } => {
                let fragmenter = &mut self.fragmenter;
                admission.frame(frame, after_gap, &mut |out| match out {
                    Out::Frame { frame, after_gap } => {
                        if after_gap {
                            fragmenter.finish(&mut events);
                        }
                        fragmenter.push(frame, &mut events);
                    }
                    Out::Finish => fragmenter.finish(&mut events),
                });
            }
            // Audio is not held in the pre-roll, so event recordings are video only:
            // live audio would not line up with pre-roll video in one fragment.
            StreamMsg::Audio(frame) if admission.is_continuous() => self.fragmenter.push_audio(frame),
            StreamMsg::Audio(_) => {}
            StreamMsg::SessionEnded => self.fragmenter.finish(&mut events),
        }
        for e in events.drain(..) {
            self.apply(e);
        }
        self.events = events;
        self.stats.fragments_cut_short.store(self.fragmenter.cut_short(), Ordering::Relaxed);
    }

    /// Closes what is open: the queue has closed.
    pub(crate) fn finish(&mut self) {
        let mut events = Vec::new();
        self.fragmenter.finish(&mut events);
        for e in events {
            self.apply(e);
        }
    }

    fn apply(&mut self, event: Event) {
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
            Event::Fragment(f) => self.write_fragment(f),
            Event::EndSegment => self.close_segment(),
        }
    }

    fn open_segment(&mut self, wall_start_us: i64, decode_offset_90k: u64, sequence_offset: u32) {
        let Some(params) = self.params.clone() else {
            return;
        };
        let video = (params.codec, params.width, params.height);
        let row = RecordingRow::opening(self.stream_id, self.run_id, video, wall_start_us, self.audio.is_some());
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
                std::fs::create_dir_all(path.parent().expect("has a parent"))?;
                let mut file = File::options().write(true).create_new(true).open(&path)?;
                file.write_all(&init)?;
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
                });
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                error!(path = %path.display(), "cannot create segment: {e}");
                // Drop the row now (its file, if half made, through the garbage list) rather
                // than leave an open row with no file until the next start.
                let _ = std::fs::remove_file(&path);
                if let Err(e) = self.catalog.delete_recording(rec_id) {
                    warn!(recording = rec_id, "cannot drop the row of a segment never made: {e}");
                }
            }
        }
    }

    fn close_segment(&mut self) {
        if let Some(mut seg) = self.segment.take() {
            seg.row.open = false;
            let _ = self.flusher.send(ToFlusher::Closed { rec_id: seg.rec_id, recording: seg.row });
        }
    }

    fn write_fragment(&mut self, f: FragmentOut) {
        if self.segment.is_none() && f.samples.first().is_some_and(|s| s.is_key) {
            // The segment was lost to a write error; a keyframe lets a new file start here.
            self.open_segment(f.wall_start_us, f.base_decode_90k, f.sequence - 1);
        }
        if self.segment.is_none() {
            self.stats.fragments_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut result = self.append(&f);
        if let Err(e) = &result
            && is_disk_full(e)
        {
            self.stats.disk_full.fetch_add(1, Ordering::Relaxed);
            let freed = self.request_space();
            warn!(stream = self.stream_id, freed_bytes = freed, "disk full while writing");
            result = if freed > 0 { self.append(&f) } else { Err(io::Error::from(io::ErrorKind::StorageFull)) };
        }
        match result {
            Ok(row) => self.report(f, row),
            Err(e) => {
                self.stats.fragments_dropped.fetch_add(1, Ordering::Relaxed);
                if !is_disk_full(&e) {
                    self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                }
                error!(stream = self.stream_id, "fragment dropped: {e}");
                // Close the segment so its whole fragments can be played and, if the disk is
                // full, deleted; the next keyframe opens a new one.
                self.close_segment();
            }
        }
    }

    /// Appends one fragment; on failure cuts the file back to its last whole fragment.
    fn append(&mut self, f: &FragmentOut) -> io::Result<FragmentRow> {
        let seg = self.segment.as_mut().expect("checked by caller");
        let sequence = f.sequence - seg.sequence_offset;
        let base_decode_90k = f.base_decode_90k - seg.decode_offset_90k;
        let video = TrackRun { base_decode: base_decode_90k, samples: &f.samples };
        // A segment reopened mid-run numbers its audio from its own first fragment.
        let audio_offset = seg.audio_decode_offset.unwrap_or(0);
        let audio = seg.row.has_audio.then(|| TrackRun {
            base_decode: f.audio_base_decode.saturating_sub(audio_offset),
            samples: &f.audio_samples,
        });
        let head_len = write_fragment_header(&mut self.header_buf[..], sequence, f.wall_start_us, video, audio)
            .map_err(io::Error::other)?;
        let mut slices = Vec::with_capacity(f.frames.len() + f.audio_frames.len() + 1);
        slices.push(IoSlice::new(&self.header_buf[..head_len]));
        slices.extend(f.frames.iter().map(|fr| IoSlice::new(&fr.data)));
        if seg.row.has_audio {
            slices.extend(f.audio_frames.iter().map(|a| IoSlice::new(&a.data)));
        }
        if let Err(e) = write_all_vectored(&mut seg.file, &mut slices) {
            // Best effort: if even this fails, recovery cuts the torn tail at next start.
            let _ = seg.file.set_len(seg.len_bytes);
            let _ = seg.file.seek(SeekFrom::Start(seg.len_bytes));
            return Err(e);
        }
        let start_byte = seg.len_bytes;
        seg.len_bytes += head_len as u64 + f.payload_bytes();
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
        let sequence = r.fragments;
        let msg = ToFlusher::Fragment { rec_id: seg.rec_id, sequence, row, keyframes, recording: r.clone() };
        if self.flusher.send(msg).is_err() {
            error!(stream = self.stream_id, "catalog writer is gone");
        }
    }

    fn request_space(&mut self) -> u64 {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if self.flusher.send(ToFlusher::NeedSpace { reply: tx }).is_err() {
            return 0;
        }
        rx.recv().unwrap_or(0)
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
        if worked { Turn::Worked } else { Turn::Idle }
    }
}

fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(libc::ENOSPC)
}

/// `Write::write_all_vectored` is not stable; this is it.
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

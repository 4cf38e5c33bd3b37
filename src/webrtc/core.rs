//! The engine's core, without sockets and without a clock: every session, their admission,
//! live fanout, stored playback and the sweep.
//!
//! Each input comes with the time it happens at: an offer ([`Core::open`]), a datagram
//! ([`Core::datagram`]), a live frame ([`Core::frame`]), an event notice ([`Core::event`]),
//! a tick ([`Core::timeouts`]) and the sweep ([`Core::sweep`]). What leaves is the datagrams
//! handed to the caller's `out` (each names the local address to send it from) and the
//! return values. The shell (`net.rs`) owns the sockets and the clock; tests drive whole
//! sessions on simulated time.
//!
//! Sessions live in one `Vec` with their next deadline beside them, so the shell sleeps
//! until the earliest. A session is removed by the sweep once it is no longer alive.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use str0m::Input;
use str0m::net::{Receive, Transmit};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::playback::Stored;
use super::session::{self, Owner, Session, Source, Viewer};
use super::{OpenError, WebrtcStats, control, for_everyone, principal_max};
use crate::base::{BytePool, StreamKey};
use crate::cameras::Cameras;
use crate::catalog::Catalog;
use crate::events::Notice;
use crate::limits;
use crate::live::{Fanout, Live, LiveAudio, LiveFrame};
use crate::media::annexb;
use crate::media::{Frame, VideoParams};

/// Where the core's datagrams go: the caller sends each from the local address it names.
pub type Out<'a> = &'a mut dyn FnMut(Transmit);

/// How often a track playing stored video reports its position.
const POSITION_EVERY: Duration = Duration::from_millis(250);

/// One stream the engine watches: its fanout and tap, and the parameter sets of its current
/// params.
struct Watched {
    live: Arc<Fanout>,
    tap: u64,
    params: Option<(Arc<VideoParams>, Vec<Bytes>)>,
    /// Sound that came ahead of the stream's pictures, held until they near it (see
    /// [`Core::audio`]), with when it came; oldest first.
    held_audio: VecDeque<(LiveAudio, Instant)>,
    /// The time of the stream's newest picture (90 kHz).
    video_reached_90k: Option<i64>,
}

/// The streams a core serves and where their recordings are.
pub struct Streams {
    /// The running cameras' streams, with their live fanouts.
    pub cameras: Arc<Cameras>,
    pub catalog: Arc<Catalog>,
    pub data_dir: PathBuf,
}

/// Every session and what they watch.
pub struct Core {
    pub(super) streams: Streams,
    watched: HashMap<StreamKey, Watched>,
    pub(super) sessions: Vec<Session>,
    deadlines: Vec<Instant>,
    /// Live frames of watched streams come back to the shell on this queue.
    frames_tx: mpsc::Sender<Live>,
    stats: Arc<WebrtcStats>,
    max_sessions: usize,
    /// Bytes of frames waiting for the sessions' pacers ([`super::send_pool_bytes`]).
    send_pool: Arc<BytePool>,
    /// Bytes of the live frames waiting on `frames_tx` ([`limits::LIVE_TAP_QUEUE_MAX_BYTES`]).
    tap_queue: Arc<BytePool>,
    next_id: u64,
    /// (session, track) pairs showing the stream of the frame being sent: kept between
    /// frames so the per-frame path does not allocate it.
    viewers: Vec<(usize, usize)>,
    /// Sessions the sweep removed, not yet freed ([`Core::take_ended`]).
    ended: Vec<Session>,
    /// Where the next turn of timeouts starts looking for sessions due.
    timeouts_from: usize,
    /// Where the next frame's viewers start: each frame one further on, so when the send
    /// pool has room for only some of a stream's viewers the same ones do not always miss.
    first_viewer: usize,
}

impl Core {
    pub fn new(streams: Streams, frames_tx: mpsc::Sender<Live>, stats: Arc<WebrtcStats>, max_sessions: usize) -> Core {
        Core {
            streams,
            watched: HashMap::new(),
            sessions: Vec::new(),
            deadlines: Vec::new(),
            frames_tx,
            stats,
            max_sessions,
            send_pool: BytePool::shared(super::send_pool_bytes(max_sessions) as u64),
            tap_queue: BytePool::shared(limits::LIVE_TAP_QUEUE_MAX_BYTES as u64),
            next_id: 1,
            viewers: Vec::new(),
            ended: Vec::new(),
            timeouts_from: 0,
            first_viewer: 0,
        }
    }

    /// The pool frames waiting for the sessions' pacers are charged to.
    pub fn send_pool(&self) -> Arc<BytePool> {
        self.send_pool.clone()
    }

    /// The earliest time a session wants to be driven again.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.iter().min().copied()
    }

    /// Admits a session on stream `stream` for a WHEP offer, answered with host candidates
    /// on the addresses `locals` gives (asked only once the session is admitted); returns its
    /// id and the answer.
    pub fn open(
        &mut self,
        stream: StreamKey,
        offer: &str,
        owner: Owner,
        peer: IpAddr,
        locals: impl FnOnce() -> Vec<std::net::SocketAddr>,
        now: Instant,
    ) -> Result<(u64, String), OpenError> {
        let fanout = self.streams.cameras.stream(&stream).ok_or(OpenError::NoStream)?.live.clone();
        self.admit(&owner, peer)?;
        let params = fanout.params().ok_or(OpenError::NotLive)?;
        let audio = fanout.audio_params();
        let id = self.next_id;
        let viewer = Viewer { id, owner, peer, stream: stream.clone() };
        let accepted =
            Session::accept(viewer, &params, audio.as_deref(), offer, &locals(), self.send_pool.clone(), now);
        let (session, answer) = accepted.inspect_err(|_| {
            self.stats.bad_offers.fetch_add(1, Ordering::Relaxed);
        })?;
        self.next_id += 1;
        self.watch(stream, &fanout);
        self.sessions.push(session);
        self.deadlines.push(now);
        self.stats.sessions_total.fetch_add(1, Ordering::Relaxed);
        self.stats.sessions_open.store(self.sessions.len(), Ordering::Relaxed);
        Ok((id, answer))
    }

    /// Whether `owner` at `peer` may open one more session: its principal's share, its
    /// address's ceiling, and the box's (with room kept back for admins).
    fn admit(&self, owner: &Owner, peer: IpAddr) -> Result<(), OpenError> {
        let of_principal = self.sessions.iter().filter(|s| s.owner.principal == owner.principal).count();
        let principal_max = principal_max(self.max_sessions);
        if of_principal >= principal_max {
            self.stats.refused_principal.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Principal(owner.principal.clone(), principal_max));
        }
        if self.sessions.iter().filter(|s| s.peer == peer).count() >= limits::WEBRTC_SESSIONS_PER_ADDRESS_MAX {
            self.stats.refused_address.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Address(limits::WEBRTC_SESSIONS_PER_ADDRESS_MAX));
        }
        let room = if owner.admin { self.max_sessions } else { for_everyone(self.max_sessions) };
        if self.sessions.len() >= room {
            self.stats.refused_server.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Server(room));
        }
        Ok(())
    }

    /// Taps stream `stream` (its fanout `live`) if nobody watches it yet, or if it is tapped
    /// on a fanout that is no longer the stream's (its camera stopped and started again since):
    /// every track showing the stream then gets the new fanout's frames.
    pub(super) fn watch(&mut self, stream: StreamKey, live: &Arc<Fanout>) {
        if let Some(w) = self.watched.get(&stream) {
            if Arc::ptr_eq(&w.live, live) {
                return;
            }
            w.live.untap(w.tap);
        }
        let tap = live.tap(stream.clone(), self.frames_tx.clone(), self.tap_queue.clone());
        let w = Watched { live: live.clone(), tap, params: None, held_audio: VecDeque::new(), video_reached_90k: None };
        self.watched.insert(stream, w);
    }

    /// Closes session `id` if `principal` owns it (`None`: an admin, who may close any).
    pub fn close(&mut self, id: u64, principal: Option<&str>) -> bool {
        let mut found = false;
        for s in self.sessions.iter_mut().filter(|s| s.id == id) {
            if principal.is_none_or(|p| p == s.owner.principal) {
                s.rtc.disconnect();
                found = true;
            }
        }
        found
    }

    /// Closes every session opened with login session `login`.
    pub fn close_login(&mut self, login: [u8; 32]) {
        for s in self.sessions.iter_mut().filter(|s| s.owner.login == Some(login)) {
            s.rtc.disconnect();
        }
    }

    /// Closes every session of `principal`.
    pub fn close_principal(&mut self, principal: &str) {
        for s in self.sessions.iter_mut().filter(|s| s.owner.principal == principal) {
            s.rtc.disconnect();
        }
    }

    /// Ends every session (the engine stops).
    pub fn close_all(&mut self) {
        for s in &mut self.sessions {
            s.rtc.disconnect();
        }
    }

    /// Offers a stored event to every subscribed session.
    pub fn event(&mut self, e: &Notice, now: Instant, out: Out<'_>) {
        self.stats.event_notices_in.fetch_add(1, Ordering::Relaxed);
        let notice = control::event_notice(e);
        for i in 0..self.sessions.len() {
            match self.sessions[i].offer_event(&e.camera, &notice) {
                session::Offered::NotWanted => continue,
                session::Offered::Queued => {}
                session::Offered::CutOff => {
                    self.stats.events_cut_off.fetch_add(1, Ordering::Relaxed);
                }
            }
            let _ = self.drive_quiet(i, now, out);
        }
    }

    /// A datagram that arrived at `now`; the shell checked it is STUN, DTLS, RTP or RTCP.
    pub fn datagram(&mut self, receive: Receive<'_>, now: Instant, out: Out<'_>) {
        let input = Input::Receive(now, receive);
        let Some(i) = self.sessions.iter().position(|s| s.rtc.accepts(&input)) else {
            self.stats.datagrams_unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if self.sessions[i].input(input).is_err() {
            self.sessions[i].rtc.disconnect();
        }
        self.drive(i, now, out);
    }

    /// Drives the sessions whose deadline has come, at most
    /// [`limits::WEBRTC_TIMEOUT_SESSIONS_PER_TURN_MAX`] a turn (the next turn goes on from the
    /// first left waiting, so none is passed over for long). str0m's pacer asks for a tick a
    /// microsecond after each packet it sends: those ticks are given here, each at the time
    /// it asked for, up to [`limits::WEBRTC_PACER_TICKS_PER_TURN_MAX`] a turn, so a session
    /// sends at its pacer's rate and not at one packet per turn of the engine's timer.
    pub fn timeouts(&mut self, now: Instant, out: Out<'_>) {
        let n = self.sessions.len();
        let mut driven = 0;
        for k in 0..n {
            let i = (self.timeouts_from + k) % n;
            if self.deadlines[i] > now {
                continue;
            }
            if driven == limits::WEBRTC_TIMEOUT_SESSIONS_PER_TURN_MAX {
                // The rest wait for the next turn, which starts with them.
                self.timeouts_from = i;
                return;
            }
            driven += 1;
            let mut ticks = 0;
            while self.deadlines[i] <= now && ticks < limits::WEBRTC_PACER_TICKS_PER_TURN_MAX {
                ticks += 1;
                // Never before what str0m has taken (it would ignore the tick).
                let last = self.sessions[i].last_input();
                let at = last.map_or(now, |l| self.deadlines[i].max(l));
                if self.sessions[i].input(Input::Timeout(at)).is_err() {
                    self.sessions[i].rtc.disconnect();
                }
                self.pump_cursors(i, at);
                self.drive(i, at, out);
                if self.deadlines[i] <= at {
                    break; // it wants nothing later: the next turn drives it
                }
            }
            self.stats.pacer_ticks.fetch_add(ticks as u64, Ordering::Relaxed);
        }
    }

    /// Drains session `i`'s output; answers its keyframe wants and control messages.
    fn drive(&mut self, i: usize, now: Instant, out: Out<'_>) {
        let wants = self.drive_quiet(i, now, out);
        for t in wants.keyframe {
            self.keyframe_burst(i, t, now, out);
        }
        // Messages may also have arrived during a drive whose wants were not looked at.
        if wants.control || !self.sessions[i].inbox.is_empty() {
            self.control(i, now, out);
        }
    }

    /// Drains session `i`'s output; returns what it wants. Its next deadline is the earlier
    /// of its own timeout and its cursors' next frames.
    fn drive_quiet(&mut self, i: usize, now: Instant, out: Out<'_>) -> session::Wants {
        let stats = &self.stats;
        let s = &mut self.sessions[i];
        let (next, wants) = s.drive(out);
        stats.control_dropped.fetch_add(std::mem::take(&mut s.control_dropped), Ordering::Relaxed);
        stats.replies_dropped.fetch_add(std::mem::take(&mut s.replies_dropped), Ordering::Relaxed);
        stats.frames_skipped.fetch_add(std::mem::take(&mut s.frames_skipped), Ordering::Relaxed);
        stats.event_notices_sent.fetch_add(std::mem::take(&mut s.events_sent), Ordering::Relaxed);
        let cursors = s.tracks.iter().filter_map(|t| match &t.source {
            Source::Stored(c) if s.is_connected() => c.due(),
            _ => None,
        });
        self.deadlines[i] = cursors.chain(next).min().unwrap_or(now);
        wants
    }

    /// Sends track `t` of session `i` a keyframe: the stream's held GOP for live video, the
    /// keyframe at or before the position for stored video.
    pub(super) fn keyframe_burst(&mut self, i: usize, t: usize, now: Instant, out: Out<'_>) {
        let stream = match &mut self.sessions[i].tracks[t].source {
            Source::Live(stream) => stream.clone(),
            Source::Stored(cursor) => {
                let at = cursor.position_us();
                if cursor.seek(at, now).is_ok() {
                    self.sessions[i].tracks[t].lost_frames();
                }
                return;
            }
            Source::Idle => return,
        };
        let Some(gop) = self.watched.get(&stream).map(|w| w.live.gop()) else { return };
        if gop.is_empty() {
            return; // the next keyframe will do
        }
        self.stats.keyframe_bursts.fetch_add(1, Ordering::Relaxed);
        for f in &gop {
            let Some(data) = self.annexb(&stream, f) else { return };
            let s = &mut self.sessions[i];
            if s.send_frame(t, &data, f.is_key, f.pts_90k, true, now).is_err() {
                s.tracks[t].lost_frames();
                return;
            }
            s.tracks[t].last_sent_mono_us = f.received_mono_us;
        }
        // Wants raised while sending the burst are answered by the burst itself.
        let _ = self.drive_quiet(i, now, out);
    }

    /// Sends session `i`'s stored tracks every frame that is due.
    fn pump_cursors(&mut self, i: usize, now: Instant) {
        let s = &mut self.sessions[i];
        if !s.is_connected() {
            return;
        }
        for t in 0..s.tracks.len() {
            while let Source::Stored(cursor) = &mut s.tracks[t].source {
                let frame = match cursor.pop(now) {
                    Ok(Some(Stored::Frame(f))) => f,
                    Ok(Some(Stored::Audio(a))) => {
                        // The session's one sound line goes with its first track.
                        if t == 0 && !a.data.is_empty() && matches!(s.send_audio(&a, now), Ok(true)) {
                            self.stats.audio_frames_sent.fetch_add(1, Ordering::Relaxed);
                        }
                        continue;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        s.send_control(&control::error(0, t as u32, "internal", e.to_string()));
                        s.tracks[t].source = Source::Idle;
                        break;
                    }
                };
                let pts = frame.wall_us * 9 / 100;
                match s.send_frame(t, &frame.annexb, frame.is_key, pts, false, now) {
                    Ok(true) => {
                        self.stats.frames_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {}
                    Err(_) => s.tracks[t].lost_frames(),
                }
                let report = s.tracks[t].reported.is_none_or(|r| now.duration_since(r) >= POSITION_EVERY);
                if report {
                    s.tracks[t].reported = Some(now);
                    s.send_control(&control::position(t, frame.wall_us));
                }
            }
        }
    }

    /// A frame in Annex B with the parameter sets in front of a keyframe; `None` (and a
    /// warning) when the frame or its parameters cannot be read.
    fn annexb(&mut self, stream: &StreamKey, f: &Frame) -> Option<Arc<[u8]>> {
        let watched = self.watched.get_mut(stream)?;
        let fresh = watched.params.as_ref().is_some_and(|(p, _)| Arc::ptr_eq(p, &f.params) || **p == *f.params);
        if !fresh {
            match annexb::parameter_sets(&f.params) {
                Ok(sets) => watched.params = Some((f.params.clone(), sets)),
                Err(e) => {
                    warn!("stream {stream}: {e}");
                    return None;
                }
            }
        }
        let sets: &[Bytes] = if f.is_key { &watched.params.as_ref()?.1 } else { &[] };
        let mut out = Vec::with_capacity(f.data.len() + 64);
        annexb::to_annexb(&f.data, sets, &mut out).ok()?;
        Some(out.into())
    }

    /// A live frame of a watched stream, sent to every track showing that stream, and then
    /// the sound held for it. Returns whether a viewer wanted it (and so it was turned into
    /// Annex B and written).
    pub fn frame(&mut self, lf: LiveFrame, now: Instant, out: Out<'_>) -> bool {
        let stream = lf.stream.clone();
        if lf.after_gap {
            // The sound of the session before goes before the new session's first picture.
            self.release_audio(&stream, now, true, out);
        }
        if let Some(w) = self.watched.get_mut(&stream) {
            w.video_reached_90k = Some(lf.frame.pts_90k);
        }
        let wanted = self.video_frame(lf, now, out);
        self.release_audio(&stream, now, false, out);
        wanted
    }

    fn video_frame(&mut self, lf: LiveFrame, now: Instant, out: Out<'_>) -> bool {
        let stream = &lf.stream;
        let mut viewers = std::mem::take(&mut self.viewers);
        viewers.clear();
        for (i, s) in self.sessions.iter_mut().enumerate() {
            for (t, track) in s.tracks.iter_mut().enumerate() {
                if matches!(&track.source, Source::Live(x) if x == stream) {
                    if lf.after_gap {
                        track.rebase();
                    }
                    viewers.push((i, t));
                }
            }
            if lf.after_gap && matches!(&s.tracks[0].source, Source::Live(x) if x == stream) {
                s.rebase_audio();
            }
        }
        let wanted = viewers.iter().any(|&(i, t)| {
            let (s, track) = (&self.sessions[i], &self.sessions[i].tracks[t]);
            s.is_connected()
                && (lf.frame.is_key || !track.needs_keyframe())
                && lf.frame.received_mono_us > track.last_sent_mono_us
        });
        let data = if wanted { self.annexb(stream, &lf.frame) } else { None };
        let Some(data) = data else {
            self.viewers = viewers;
            return false;
        };
        // Taken in turn: the first a frame goes to is the next one along each time.
        if !viewers.is_empty() {
            self.first_viewer = (self.first_viewer + 1) % viewers.len();
            viewers.rotate_left(self.first_viewer);
        }
        let mut last_touched = None;
        for &(i, t) in &viewers {
            let s = &mut self.sessions[i];
            if lf.frame.received_mono_us <= s.tracks[t].last_sent_mono_us {
                continue; // already sent in a keyframe burst
            }
            match s.send_frame(t, &data, lf.frame.is_key, lf.frame.pts_90k, false, now) {
                Ok(true) => {
                    s.tracks[t].last_sent_mono_us = lf.frame.received_mono_us;
                    self.stats.frames_sent.fetch_add(1, Ordering::Relaxed);
                }
                Ok(false) => {}
                Err(_) => s.tracks[t].lost_frames(),
            }
            // A session's tracks come together: drive it once, after its last one.
            if last_touched.is_some_and(|l| l != i) {
                self.drive(last_touched.take().expect("checked"), now, out);
            }
            last_touched = Some(i);
        }
        if let Some(i) = last_touched {
            self.drive(i, now, out);
        }
        self.viewers = viewers;
        true
    }

    /// A live audio frame of a watched stream, sent to every session whose first track shows
    /// that stream and which takes its sound once the stream's pictures are within
    /// [`limits::LIVE_AUDIO_LEAD_MAX_MS`] of it. Returns how many frames went to a session
    /// now (this one, or ones held before it).
    ///
    /// A camera whose pictures come later than the sound of the same moment (a slow video
    /// encoder: half a second is seen) would have the browser hear its sound that much early
    /// at first: the browser puts the two in step by their sender reports, but moves a
    /// track's delay by at most about 80 ms a second, so the gap takes half a minute to
    /// close. Held here (once per stream, not per viewer) the sound reaches the browser with
    /// its picture, in step from the start. At most [`limits::AUDIO_AHEAD_WAIT_MS`] and
    /// [`limits::AUDIO_AHEAD_HOLD_FRAMES`] wait, their bytes charged to the tap's queue pool.
    pub fn audio(&mut self, la: LiveAudio, now: Instant, out: Out<'_>) -> usize {
        let stream = la.stream.clone();
        let Some(w) = self.watched.get_mut(&stream) else { return 0 };
        w.held_audio.push_back((la, now));
        self.release_audio(&stream, now, false, out)
    }

    /// Sends `stream`'s held sound that its pictures are near, that waited its longest, or
    /// past the count ceiling; all of it when `all`. Returns how many frames went to a
    /// session.
    fn release_audio(&mut self, stream: &StreamKey, now: Instant, all: bool, out: Out<'_>) -> usize {
        let lead_90k = limits::LIVE_AUDIO_LEAD_MAX_MS as i64 * 90;
        let wait = Duration::from_millis(limits::AUDIO_AHEAD_WAIT_MS);
        let mut sent = 0;
        loop {
            let Some(w) = self.watched.get_mut(stream) else { break };
            let Some((front, came)) = w.held_audio.front() else { break };
            let near = w.video_reached_90k.is_some_and(|v| front.frame.pts_90k <= v.saturating_add(lead_90k));
            let waited = now.saturating_duration_since(*came) >= wait;
            if !(all || near || waited || w.held_audio.len() > limits::AUDIO_AHEAD_HOLD_FRAMES) {
                break;
            }
            let (la, _) = w.held_audio.pop_front().expect("front exists");
            if self.audio_to_sessions(&la, now, out) > 0 {
                sent += 1;
            }
        }
        sent
    }

    /// Sends a live audio frame to every session whose first track shows its stream and
    /// which takes its sound; returns how many it went to.
    fn audio_to_sessions(&mut self, la: &LiveAudio, now: Instant, out: Out<'_>) -> usize {
        let mut sent = 0;
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            if s.audio.is_none() || !matches!(&s.tracks[0].source, Source::Live(x) if *x == la.stream) {
                continue;
            }
            match s.send_audio(&la.frame, now) {
                Ok(true) => {
                    self.stats.audio_frames_sent.fetch_add(1, Ordering::Relaxed);
                    self.drive(i, now, out);
                    sent += 1;
                }
                Ok(false) => {}
                Err(_) => {}
            }
        }
        sent
    }

    /// Handles session `i`'s control messages.
    fn control(&mut self, i: usize, now: Instant, out: Out<'_>) {
        // Answering drives the session, which may take in more messages: until none wait.
        while !self.sessions[i].inbox.is_empty() {
            while let Some(bytes) = self.sessions[i].inbox.pop_front() {
                self.control_message(i, &bytes, now, out);
            }
            let _ = self.drive_quiet(i, now, out);
        }
    }

    /// Answers one control message of session `i`.
    fn control_message(&mut self, i: usize, bytes: &[u8], now: Instant, out: Out<'_>) {
        self.stats.control_messages.fetch_add(1, Ordering::Relaxed);
        let (reply, track) = match control::decode(bytes, self.sessions[i].tracks.len()) {
            Ok(request) => (self.answer(i, &request, now, out), Some(request.track)),
            Err(e) => (e, None),
        };
        if matches!(reply.body, Some(control::pb::server_message::Body::Error(_))) {
            self.stats.control_errors.fetch_add(1, Ordering::Relaxed);
        }
        let s = &mut self.sessions[i];
        s.send_control(&reply);
        // A stored track also says where it is (after a seek: the keyframe it starts at).
        if let Some(t) = track
            && let Source::Stored(cursor) = &s.tracks[t].source
        {
            let at = cursor.position_us();
            s.send_control(&control::position(t, at));
        }
    }

    /// Sessions ended by the last sweeps, for the shell to free off the engine's thread
    /// (a session's WebRTC state takes about 13 µs to free: 30 at a logout would hold every
    /// other viewer's next packet for 0.4 ms).
    pub fn take_ended(&mut self) -> Vec<Session> {
        std::mem::take(&mut self.ended)
    }

    /// Drops dead sessions (and ones that never connected), and taps no one needs.
    pub fn sweep(&mut self, now: Instant) {
        let timeout = Duration::from_millis(limits::WEBRTC_CONNECT_TIMEOUT_MS);
        for s in &mut self.sessions {
            if !s.is_connected() && s.is_alive() && now.duration_since(s.created) > timeout {
                self.stats.connect_timeouts.fetch_add(1, Ordering::Relaxed);
                s.rtc.disconnect();
            }
        }
        let mut i = 0;
        while i < self.sessions.len() {
            if self.sessions[i].is_alive() {
                i += 1;
            } else {
                let s = self.sessions.swap_remove(i);
                self.deadlines.swap_remove(i);
                debug!(id = s.id, frames = s.frames_sent, "live session ended");
                self.ended.push(s);
            }
        }
        let in_use: Vec<&StreamKey> = self
            .sessions
            .iter()
            .flat_map(|s| s.tracks.iter())
            .filter_map(|t| match &t.source {
                Source::Live(x) => Some(x),
                _ => None,
            })
            .collect();
        self.watched.retain(|stream, w| {
            let keep = in_use.contains(&stream);
            if !keep {
                w.live.untap(w.tap);
            }
            keep
        });
        self.stats.sessions_open.store(self.sessions.len(), Ordering::Relaxed);
    }

    /// Streams tapped now.
    #[cfg(test)]
    pub(super) fn watched(&self) -> usize {
        self.watched.len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use super::*;
    use crate::webrtc::testing::{self, WALL0, offer, owner};

    fn locals() -> Vec<SocketAddr> {
        vec![SocketAddr::from(([127, 0, 0, 1], 9))]
    }

    /// Carries out `req` on session `i`: its answer, `Err` when it is an error.
    fn answer_of(
        core: &mut Core,
        i: usize,
        req: &control::Request,
    ) -> Result<control::pb::ServerMessage, control::pb::ServerMessage> {
        let m = core.answer(i, req, Instant::now(), &mut |_| {});
        match m.body {
            Some(control::pb::server_message::Body::Error(_)) => Err(m),
            _ => Ok(m),
        }
    }

    fn play_stored(track: usize) -> control::Request {
        let command = control::Command::PlayStored { stream: String::new(), wall_us: WALL0 + 10_000_000 };
        control::Request { id: 7, track, command }
    }

    fn error_code(m: &control::pb::ServerMessage) -> &str {
        match &m.body {
            Some(control::pb::server_message::Body::Error(e)) => &e.code,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn stored_tracks_stop_at_sixteen_per_session_and_the_box_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let per_session = limits::WEBRTC_CURSORS_PER_SESSION_MAX;
        let sessions = limits::WEBRTC_CURSORS_MAX / per_session;
        let (mut e, _frames, _fanout) = testing::core(dir.path(), sessions + 1);
        let offer = offer(per_session + 1);
        let peer = IpAddr::from([127, 0, 0, 1]);
        for k in 0..=sessions {
            let who = Owner { admin: true, ..owner(&format!("user:{k}")) };
            e.open(testing::key(), &offer, who, peer, locals, Instant::now()).expect("a session");
        }
        assert_eq!(e.sessions[0].tracks.len(), per_session + 1, "one live track and sixteen more");
        for i in 0..sessions {
            for t in 0..per_session {
                let answer = answer_of(&mut e, i, &play_stored(t)).expect("a stored track");
                assert_eq!(answer.request_id, 7);
            }
        }
        let all: usize = e.sessions.iter().map(Session::cursors).sum();
        assert_eq!(all, limits::WEBRTC_CURSORS_MAX);
        // The seventeenth of a session.
        let refused = answer_of(&mut e, 0, &play_stored(per_session)).unwrap_err();
        assert_eq!(error_code(&refused), "too_many_cursors");
        // The box is full: a session with none is refused too, with the box's reason.
        let refused = answer_of(&mut e, sessions, &play_stored(0)).unwrap_err();
        assert_eq!(error_code(&refused), "too_many_cursors");
        assert!(format!("{refused:?}").contains("the box plays at most 1024"), "{refused:?}");
        // A track already playing stored video may seek or play stored again.
        answer_of(&mut e, 0, &play_stored(0)).expect("replaying a stored track is not a new cursor");
        // One ends: its room is free again.
        e.sessions[0].tracks[3].source = Source::Idle;
        answer_of(&mut e, sessions, &play_stored(0)).expect("room for one more");
    }

    /// A camera stopped and started again has a new fanout: the next session on it taps that
    /// one, and the old one is let go.
    #[test]
    fn a_camera_started_again_is_watched_on_its_new_fanout() {
        let dir = tempfile::tempdir().unwrap();
        let (mut e, _frames, old) = testing::core(dir.path(), 8);
        let peer = IpAddr::from([127, 0, 0, 1]);
        e.open(testing::key(), &offer(1), owner("user:a"), peer, locals, Instant::now()).unwrap();
        assert_eq!(old.taps(), 1);
        let cameras = e.streams.cameras.clone();
        cameras.remove_camera("cam");
        let new = Arc::new(Fanout::new(crate::live::gop_pool()));
        new.publish(&testing::live_frame(0, true));
        let running = crate::cameras::RunningStream {
            key: testing::key(),
            state: Arc::default(),
            recording: None,
            live: new.clone(),
        };
        cameras.add([running]);
        e.open(testing::key(), &offer(1), owner("user:b"), peer, locals, Instant::now()).unwrap();
        assert_eq!((old.taps(), new.taps(), e.watched()), (0, 1, 1));
    }

    #[test]
    fn the_timeline_stops_at_its_ceiling_of_runs_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (mut e, _frames, _fanout) = testing::core(dir.path(), 1);
        e.open(testing::key(), &offer(1), owner("user:a"), IpAddr::from([127, 0, 0, 1]), locals, Instant::now())
            .unwrap();
        // Runs of one recording each, a minute apart, after the one recording made above.
        let stream_id = e.streams.catalog.stream_id(&testing::key()).unwrap();
        let mut batch = crate::catalog::Batch::default();
        for k in 0..limits::WEBRTC_TIMELINE_RUNS_MAX as u64 + 10 {
            let start = WALL0 + 60_000_000 * (k as i64 + 1);
            let row = crate::catalog::RecordingRow {
                stream_id,
                run_id: 100 + k,
                wall_start_us: start,
                wall_end_us: start + 30_000_000,
                fragments: 1,
                open: false,
                ..crate::catalog::RecordingRow::for_test(&format!("r/{k}.mp4"))
            };
            batch.recordings.push((1_000 + k, row));
        }
        e.streams.catalog.commit(&batch).unwrap();
        let ask = |from_us, to_us| control::Request {
            id: 3,
            track: 0,
            command: control::Command::Timeline { stream: String::new(), from_us, to_us },
        };
        let timeline = |m: control::pb::ServerMessage| match m.body {
            Some(control::pb::server_message::Body::Timeline(t)) => t,
            other => panic!("not a timeline: {other:?}"),
        };
        let all = timeline(answer_of(&mut e, 0, &ask(0, i64::MAX)).unwrap());
        assert_eq!(all.runs.len(), limits::WEBRTC_TIMELINE_RUNS_MAX);
        assert!(all.truncated);
        assert_eq!(all.runs[0], control::pb::Run { start_us: WALL0, end_us: WALL0 + 30_000_000 });
        // A window within the ceiling is whole.
        let some = timeline(answer_of(&mut e, 0, &ask(WALL0, WALL0 + 60_000_000 * 5)).unwrap());
        assert_eq!(some.runs.len(), 5);
        assert!(!some.truncated);
    }

    use crate::webrtc::testing::{RECORDED_S, Sim};
    use control::pb::{self, client_message::Command as C, server_message::Body};

    /// The NAL unit types of an Annex B frame.
    fn nal_types(annexb: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..annexb.len().saturating_sub(3) {
            if annexb[i..i + 3] == [0, 0, 1] {
                out.push(annexb[i + 3] & 0x1f);
            }
        }
        out
    }

    fn state(b: &Body) -> &pb::State {
        match b {
            Body::State(s) => s,
            other => panic!("not a state: {other:?}"),
        }
    }

    #[test]
    fn a_live_session_connects_gets_the_held_gop_then_each_frame_and_ends_with_its_tap() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::connected(dir.path(), 1);
        // On connecting, the viewer got the keyframe the stream held, at once.
        assert_eq!(sim.frames_on(0), 1, "{:?}", sim.frames);
        assert_eq!(sim.core.stats.keyframe_bursts.load(Ordering::Relaxed), 1);
        // The camera goes on at 15 frames a second: every frame reaches the viewer, in
        // increasing RTP time.
        for n in 1..=30 {
            sim.camera(n, n % 15 == 0);
            sim.run_for(Duration::from_millis(66));
        }
        assert_eq!(sim.frames_on(0), 31);
        assert!(sim.frames.windows(2).all(|w| w[0].1 < w[1].1), "increasing RTP time");
        // Keyframes arrive with the parameter sets in front, in Annex B.
        for (_, _, data) in sim.frames.iter().filter(|f| nal_types(&f.2).contains(&5)) {
            assert_eq!(nal_types(data), [7, 8, 5]);
        }
        assert_eq!(nal_types(&sim.frames[1].2), [1]);
        // Two seconds of video took two seconds of RTP time (the burst's frame aside).
        let span = sim.frames[30].1 - sim.frames[1].1;
        assert_eq!(span, 29 * 6000);
        assert_eq!(sim.core.watched(), 1);
        // Closed: the sweep drops the session and the stream's tap.
        assert!(sim.core.close(sim.id, Some("user:sim")));
        sim.run_for(Duration::from_millis(100));
        assert_eq!(sim.core.sessions.len(), 0);
        assert_eq!((sim.core.watched(), sim.fanout.taps()), (0, 0));
    }

    #[test]
    fn a_live_sessions_sound_goes_as_it_came_in_step_with_its_picture() {
        let dir = tempfile::tempdir().unwrap();
        let params = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        // 20 ms of µ-law: its bytes say which it is.
        let sound = |k: i64| crate::media::AudioFrame {
            pts_90k: k * 1_800,
            duration_samples: 160,
            data: vec![k as u8; 160].into(),
            params: params.clone(),
        };
        let mut sim = Sim::connected_with(dir.path(), 1, Some(&sound(0)));
        assert!(sim.core.sessions[0].audio.is_some(), "the offer's audio line takes PCMU");
        sim.camera_audio(&sound(1));
        let mut k = 2;
        for n in 1..=30 {
            sim.camera(n, n % 15 == 0);
            // The sound of a frame's moment comes after it (the camera sends it once heard).
            while k * 1_800 < n * 6_000 {
                sim.camera_audio(&sound(k));
                k += 1;
            }
            sim.run_for(Duration::from_millis(66));
        }
        let heard: Vec<u8> = sim.sound.iter().map(|(_, data)| data[0]).collect();
        assert_eq!(heard.len(), 99, "every frame: {heard:?}");
        assert!(heard.windows(2).all(|w| w[1] == w[0] + 1), "as they came, none lost: {heard:?}");
        assert!(sim.sound.iter().all(|(_, d)| d.len() == 160), "passed through as it came");
        // RTP time at 8 kHz: 160 a frame, as the camera's.
        assert!(sim.sound.windows(2).all(|w| w[1].0 - w[0].0 == 160));
        assert_eq!(sim.core.stats.audio_frames_sent.load(Ordering::Relaxed), 99);
        // A new camera session: the sound's offset is found anew, and its RTP time goes on
        // increasing.
        sim.fanout.session_ended();
        let before = sim.sound.len();
        for n in 31..=45 {
            sim.camera(n, n == 31);
            while k * 1_800 < n * 6_000 {
                sim.camera_audio(&sound(k));
                k += 1;
            }
            sim.run_for(Duration::from_millis(66));
        }
        assert!(sim.sound.len() > before + 40, "{} after the new session", sim.sound.len() - before);
        assert!(sim.sound.windows(2).all(|w| w[1].0 > w[0].0), "increasing RTP time");
    }

    #[test]
    fn a_camera_whose_pictures_come_late_is_heard_with_them_and_reported_in_step() {
        let dir = tempfile::tempdir().unwrap();
        let params = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        // 20 ms of µ-law; its first two bytes say which it is.
        let sound = |k: i64| {
            let mut data = vec![0u8; 160];
            data[..2].copy_from_slice(&(k as u16).to_le_bytes());
            crate::media::AudioFrame {
                pts_90k: k * 1_800,
                duration_samples: 160,
                data: data.into(),
                params: params.clone(),
            }
        };
        let which = |data: &[u8]| i64::from(u16::from_le_bytes([data[0], data[1]]));
        let mut sim = Sim::connected_with(dir.path(), 1, Some(&sound(0)));
        // The camera sends the sound of each moment 600 ms before its picture (its video
        // encoder is slow). The viewer gets sound at most LIVE_AUDIO_LEAD_MAX_MS ahead of the
        // newest picture: every frame of sound up to there, and none past it.
        let lead_max_90k = limits::LIVE_AUDIO_LEAD_MAX_MS as i64 * 90;
        let mut k = 1;
        for n in 1..=90 {
            while k * 1_800 < n * 6_000 + 54_000 {
                sim.camera_audio(&sound(k));
                k += 1;
            }
            sim.camera(n, n % 15 == 0);
            let sent = sim.core.stats.audio_frames_sent.load(Ordering::Relaxed) as i64;
            assert_eq!(sent, (n * 6_000 + lead_max_90k) / 1_800, "after the picture at {}", n * 6_000);
            sim.run_for(Duration::from_millis(66));
        }
        // The sender reports of both tracks say the moment at 162,000 (frame 27, sound 90)
        // was captured at one time, though its sound was written 600 ms before its picture.
        let (v, a) = (sim.video_report.expect("a video report"), sim.sound_report.expect("a sound report"));
        assert_eq!(sim.frames_on(0), 91, "the held keyframe, then every frame");
        let rtp_27 = sim.frames[1].1 + 26 * 6_000;
        let (sound_rtp, sound_k) = sim.sound.iter().map(|(rtp, d)| (*rtp, which(d))).find(|(_, k)| *k == 90).unwrap();
        assert_eq!(sound_k, 90);
        let captured = |report: &str0m::rtp::rtcp::SenderInfo, rtp: u64, rate: f64| {
            let ntp = report.ntp_time.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
            ntp + (rtp as f64 - report.rtp_time.numer() as f64) / rate
        };
        let apart_ms = (captured(&v, rtp_27, 90_000.0) - captured(&a, sound_rtp, 8_000.0)) * 1e3;
        assert!(apart_ms.abs() < 5.0, "picture and sound of one moment reported {apart_ms:.1} ms apart");
    }

    #[test]
    fn live_sound_far_ahead_waits_at_most_audio_ahead_wait_ms_and_audio_ahead_hold_frames() {
        let dir = tempfile::tempdir().unwrap();
        let params = Arc::new(crate::media::audio::g711_params(crate::media::AudioCodec::Pcmu, 8_000, 1).unwrap());
        let sound = |k: i64| crate::media::AudioFrame {
            pts_90k: 900_000 + k * 1_800,
            duration_samples: 160,
            data: vec![0u8; 160].into(),
            params: params.clone(),
        };
        let sent = |sim: &Sim| sim.core.stats.audio_frames_sent.load(Ordering::Relaxed);
        let mut sim = Sim::connected_with(dir.path(), 1, Some(&sound(0)));
        sim.camera(1, false);
        // Sound ten seconds ahead of the pictures, faster than a camera sends it: past the
        // count ceiling the oldest goes.
        let most = limits::AUDIO_AHEAD_HOLD_FRAMES as i64;
        for k in 1..=most {
            sim.camera_audio(&sound(k));
        }
        assert_eq!(sent(&sim), 0, "held");
        sim.camera_audio(&sound(most + 1));
        assert_eq!(sent(&sim), 1, "the oldest went past the ceiling");
        // What waited its longest goes when the next comes; the next waits.
        sim.run_for(Duration::from_millis(limits::AUDIO_AHEAD_WAIT_MS));
        sim.camera_audio(&sound(most + 2));
        assert_eq!(sent(&sim), 1 + most as u64);
        // A picture near it lets it go.
        sim.camera_frame(Frame { pts_90k: 900_000 + (most + 2) * 1_800, ..testing::live_frame(2, false) });
        assert_eq!(sent(&sim), 2 + most as u64);
    }

    #[test]
    fn a_large_frame_is_paced_out_and_a_viewer_that_cannot_keep_up_skips_to_a_keyframe() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::connected(dir.path(), 1);
        let pool = sim.core.send_pool();
        let start = sim.frames_on(0);
        // A 512 KiB keyframe (~450 packets) does not leave in one burst: at first part of it
        // waits for the pacer, charged to the pool; within a second it has all arrived.
        let len = 512 << 10;
        sim.camera_frame(testing::large_live_frame(1, true, len));
        assert_eq!(sim.frames_on(0), start, "not sent at once");
        assert!(sim.core.sessions[0].waiting_bytes() >= len);
        assert!(pool.held_bytes() >= len);
        sim.run_for(Duration::from_millis(1000));
        assert_eq!(sim.frames_on(0), start + 1);
        assert!(sim.frames.last().unwrap().2.len() > len, "the whole frame, parameter sets in front");
        assert_eq!((sim.core.sessions[0].waiting_bytes(), pool.held_bytes()), (0, 0), "all given back");
        // Frames faster than the pacer sends them: past the session's share the viewer
        // skips the rest, and its picture waits for the next keyframe.
        for n in 2..12 {
            sim.camera_frame(testing::large_live_frame(n, false, len));
        }
        // Within the session's share, and (not being keyframes) short of the pool's reserve.
        let reserve = pool.max_bytes() / 100 * limits::WEBRTC_SEND_POOL_KEYFRAME_RESERVE_PERCENT;
        let fit = limits::WEBRTC_SEND_SESSION_MAX_BYTES.min(pool.max_bytes() - reserve) / (len + 4);
        assert_eq!(sim.core.stats.frames_skipped.load(Ordering::Relaxed), 1);
        assert!(pool.peak_bytes() <= limits::WEBRTC_SEND_SESSION_MAX_BYTES);
        sim.run_for(Duration::from_millis(2000));
        assert_eq!(sim.frames_on(0), start + 1 + fit, "the frames that fit, then none");
        sim.camera(12, false);
        sim.run_for(Duration::from_millis(100));
        assert_eq!(sim.frames_on(0), start + 1 + fit, "not until a keyframe");
        sim.camera(13, true);
        sim.run_for(Duration::from_millis(100));
        assert_eq!(sim.frames_on(0), start + 2 + fit);
        assert_eq!(pool.held_bytes(), 0);
        // The pool is the box's: with other sessions' frames filling it, a frame is skipped
        // however little this session has waiting.
        let others = pool.charge(pool.max_bytes() - 1024).expect("room");
        sim.camera_frame(testing::large_live_frame(14, true, 4096));
        assert_eq!(sim.core.stats.frames_skipped.load(Ordering::Relaxed), 2);
        assert_eq!(pool.refusals(), 1);
        drop(others);
        sim.camera(15, true);
        sim.run_for(Duration::from_millis(100));
        assert_eq!(sim.frames_on(0), start + 3 + fit);
        // The pool's last quarter is for keyframes: with the rest taken, a frame is skipped
        // and the next keyframe still goes.
        let others = pool.charge(pool.max_bytes() - reserve).expect("room");
        sim.camera_frame(testing::large_live_frame(16, false, 4096));
        assert_eq!(sim.core.stats.frames_skipped.load(Ordering::Relaxed), 3);
        sim.camera_frame(testing::large_live_frame(17, true, 4096));
        sim.run_for(Duration::from_millis(100));
        assert_eq!(sim.frames_on(0), start + 4 + fit);
        drop(others);
    }

    #[test]
    fn viewers_of_a_stream_take_turns_at_a_full_send_pool() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::connected(dir.path(), 2);
        let live = sim.send(1, C::PlayLive(pb::PlayLive { stream: "cam/main".into() }));
        assert_eq!(state(sim.answer(live)).mode, pb::Mode::Live as i32);
        sim.camera(0, true);
        sim.run_for(Duration::from_millis(100));
        let pool = sim.core.send_pool();
        // Room for one frame at a time: whichever viewer the engine came to first would
        // otherwise take every frame, and the other none.
        let len = 4096;
        let others = pool.charge(pool.max_bytes() - len - 200).expect("room");
        let start = (sim.frames_on(0), sim.frames_on(1));
        for n in 1..=10 {
            sim.camera_frame(testing::large_live_frame(n, true, len));
            sim.run_for(Duration::from_millis(100));
        }
        let got = (sim.frames_on(0) - start.0, sim.frames_on(1) - start.1);
        assert_eq!(got, (5, 5), "each viewer every other frame");
        assert_eq!(sim.core.stats.frames_skipped.load(Ordering::Relaxed), 10);
        drop(others);
    }

    #[test]
    fn a_session_catching_up_gets_at_most_its_ticks_in_one_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::connected(dir.path(), 1);
        // A 1 MiB keyframe (~900 packets), then a second without a turn: the pacer would
        // send it all, one packet a tick; the turn gives it its ceiling of ticks.
        sim.camera_frame(testing::large_live_frame(1, true, 1 << 20));
        let before = sim.core.stats.pacer_ticks.load(Ordering::Relaxed);
        let mut sent = 0;
        sim.core.timeouts(sim.now + Duration::from_secs(1), &mut |_| sent += 1);
        let ticks = sim.core.stats.pacer_ticks.load(Ordering::Relaxed) - before;
        assert_eq!(ticks, limits::WEBRTC_PACER_TICKS_PER_TURN_MAX as u64);
        assert!(sent >= limits::WEBRTC_PACER_TICKS_PER_TURN_MAX / 2, "a packet or so a tick: {sent}");
    }

    #[test]
    fn a_turn_of_timeouts_drives_at_most_its_ceiling_of_sessions_and_the_next_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (mut core, _frames, _fanout) = testing::core(dir.path(), 8);
        let t0 = Instant::now();
        let n = limits::WEBRTC_TIMEOUT_SESSIONS_PER_TURN_MAX + 2;
        for i in 0..n {
            core.open(testing::key(), &offer(1), owner(&format!("user:{i}")), IpAddr::from([127, 0, 0, 1]), locals, t0)
                .unwrap();
        }
        // Not connected, each stays due (it wants nothing later): the turns go round them.
        let now = t0 + Duration::from_secs(1);
        assert!(core.deadlines.iter().all(|d| *d <= now), "all fall due together");
        let ceiling = limits::WEBRTC_TIMEOUT_SESSIONS_PER_TURN_MAX;
        core.timeouts(now, &mut |_| {});
        assert_eq!(core.timeouts_from, ceiling, "one turn drove the first {ceiling}; the next starts after them");
        core.timeouts(now, &mut |_| {});
        assert_eq!(core.timeouts_from, 2 * ceiling % n, "the next drove the other two, then the first ones again");
    }

    #[test]
    fn a_live_session_not_connected_in_time_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut core, _frames, _fanout) = testing::core(dir.path(), 4);
        let t0 = Instant::now();
        core.open(testing::key(), &offer(1), owner("user:a"), IpAddr::from([127, 0, 0, 1]), locals, t0).unwrap();
        core.sweep(t0 + Duration::from_millis(limits::WEBRTC_CONNECT_TIMEOUT_MS));
        assert_eq!(core.sessions.len(), 1, "not yet");
        core.sweep(t0 + Duration::from_millis(limits::WEBRTC_CONNECT_TIMEOUT_MS + 1));
        assert_eq!(core.sessions.len(), 0);
        assert_eq!(core.stats.connect_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!((core.watched(), core.stats.sessions_open.load(Ordering::Relaxed)), (0, 0));
    }

    #[test]
    fn stored_playback_plays_pauses_steps_changes_rate_and_seeks_on_simulated_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::connected(dir.path(), 2);
        let play = sim.send(1, C::PlayStored(pb::PlayStored { stream: String::new(), wall_us: WALL0 + 10_000_000 }));
        let s = state(sim.answer(play));
        assert_eq!((s.mode, s.stream.as_str(), s.paused, s.rate), (pb::Mode::Stored as i32, "cam/main", false, 1.0));
        assert_eq!(sim.position(1), Some(WALL0 + 10_000_000), "at the keyframe asked for");
        // Two seconds at 1x: two seconds of recording (15 frames a second), paced.
        sim.run_for(Duration::from_millis(2_000));
        let played = sim.frames_on(1);
        assert!((29..=31).contains(&played), "{played}");
        let at = sim.position(1).unwrap();
        assert!((WALL0 + 11_500_000..=WALL0 + 12_000_000).contains(&at), "{}", at - WALL0);
        // Paused: nothing more, however long.
        let pause = sim.send(1, C::Pause(pb::Pause {}));
        assert!(state(sim.answer(pause)).paused);
        sim.run_for(Duration::from_millis(3_000));
        let paused_at = sim.frames_on(1);
        assert!(paused_at <= played + 1, "{paused_at} after {played}");
        sim.run_for(Duration::from_millis(1_000));
        assert_eq!(sim.frames_on(1), paused_at);
        // A step: one frame, then still.
        let step = sim.send(1, C::Step(pb::Step {}));
        assert!(state(sim.answer(step)).paused);
        sim.run_for(Duration::from_millis(1_000));
        assert_eq!(sim.frames_on(1), paused_at + 1);
        // 2x: two seconds of recording a second.
        let resume = sim.send(1, C::Resume(pb::Resume {}));
        assert!(!state(sim.answer(resume)).paused);
        let rate = sim.send(1, C::SetRate(pb::SetRate { rate: 2.0 }));
        assert_eq!(state(sim.answer(rate)).rate, 2.0);
        let before = sim.frames_on(1);
        sim.run_for(Duration::from_millis(1_000));
        let fast = sim.frames_on(1) - before;
        assert!((28..=32).contains(&fast), "{fast}");
        // 4x: keyframes only, one for each recorded second, four a second.
        let rate = sim.send(1, C::SetRate(pb::SetRate { rate: 4.0 }));
        assert_eq!(state(sim.answer(rate)).rate, 4.0);
        let before = sim.frames.len();
        sim.run_for(Duration::from_millis(1_000));
        let keys: Vec<_> = sim.frames[before..].iter().filter(|f| f.0 == 1).collect();
        assert!((3..=5).contains(&keys.len()), "{}", keys.len());
        assert!(keys.iter().all(|f| nal_types(&f.2) == [7, 8, 5]), "only keyframes");
        assert!(keys.windows(2).all(|w| w[1].1 - w[0].1 == 90_000), "a recorded second apart");
        // A seek goes to the keyframe at or before the time asked, and says so.
        let seek = sim.send(1, C::Seek(pb::Seek { wall_us: WALL0 + 20_500_000 }));
        assert_eq!(state(sim.answer(seek)).rate, 4.0, "the rate holds across a seek");
        assert_eq!(sim.position(1), Some(WALL0 + 20_000_000));
        assert_eq!(sim.core.stats.control_errors.load(Ordering::Relaxed), 0);
        // Track 0 stayed live the whole time.
        assert_eq!(sim.frames_on(0), 1);
        sim.camera(1, false);
        assert_eq!(sim.frames_on(0), 2);
        // Played to the end of what is recorded, the track waits there.
        let rate = sim.send(1, C::SetRate(pb::SetRate { rate: 1.0 }));
        assert_eq!(state(sim.answer(rate)).rate, 1.0);
        sim.run_for(Duration::from_millis(15_000));
        let end = sim.position(1).unwrap();
        assert!(
            (WALL0 + i64::from(RECORDED_S - 1) * 1_000_000..WALL0 + i64::from(RECORDED_S) * 1_000_000).contains(&end)
        );
        let still = sim.frames_on(1);
        sim.run_for(Duration::from_millis(1_000));
        assert_eq!(sim.frames_on(1), still);
    }

    #[test]
    fn a_command_the_track_cannot_take_is_answered_with_its_code_and_the_session_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut sim = Sim::connected(dir.path(), 1);
        let code = |sim: &Sim, id| match sim.answer(id) {
            Body::Error(e) => e.code.clone(),
            other => panic!("{other:?}"),
        };
        let pause = sim.send(0, C::Pause(pb::Pause {}));
        assert_eq!(code(&sim, pause), "not_stored");
        assert!(
            matches!(sim.answer(pause), Body::Error(e) if e.message == "the track is not playing stored video"),
            "{:?}",
            sim.answer(pause)
        );
        let seek = sim.send(0, C::Seek(pb::Seek { wall_us: WALL0 }));
        assert_eq!(code(&sim, seek), "not_stored");
        let other = sim.send(0, C::PlayLive(pb::PlayLive { stream: "cam/sub".into() }));
        assert_eq!(code(&sim, other), "not_found");
        assert!(matches!(sim.answer(other), Body::Error(e) if e.message == "no stream cam/sub"));
        let nothing =
            sim.send(0, C::PlayStored(pb::PlayStored { stream: String::new(), wall_us: WALL0 - 86_400_000_000 * 2 }));
        assert_eq!(code(&sim, nothing), "nothing_recorded");
        assert_eq!(sim.core.stats.control_errors.load(Ordering::Relaxed), 4);
        sim.camera(1, false);
        assert_eq!(sim.frames_on(0), 2, "live video goes on");
        let sub = sim.send(0, C::SubscribeEvents(pb::SubscribeEvents { cameras: vec![] }));
        assert!(matches!(sim.answer(sub), Body::Subscribed(s) if s.cameras == ["*"]));
        let unsub = sim.send(0, C::UnsubscribeEvents(pb::UnsubscribeEvents {}));
        assert!(matches!(sim.answer(unsub), Body::Subscribed(s) if s.cameras.is_empty()));
    }
}

//! Live view over WebRTC: `str0m` sessions, all on one UDP port, driven by one task.
//!
//! - Signaling is WHEP (`src/http/api.rs`): an SDP offer in, an answer and a session id out.
//! - ICE-lite with a host candidate on every LAN address of the box (and loopback when
//!   configured): a browser on the LAN reaches one of them directly; no STUN or TURN.
//! - Frames come from each stream's live fanout ([`crate::live`]) through one bounded tap
//!   per watched stream, are turned into Annex B once, and the same bytes go to every viewer
//!   of the stream (`str0m` packetizes and encrypts per session).
//! - A viewer starts from the newest held keyframe: the GOP since it is sent at once, its
//!   timestamps squeezed together so the decoder catches up instead of playing it back. A
//!   picture-loss request is answered the same way. A viewer that lost frames (a lagging
//!   tap) skips to the next keyframe.
//!
//! Every ceiling (sessions per principal, per address and per server, offer size, send
//! buffer) is in `src/limits.rs`; each refusal and each bad datagram is counted.

pub mod control;
mod playback;
mod session;

use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use str0m::Input;
use str0m::net::{Protocol, Receive, Transmit};
use tokio::io::ReadBuf;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use playback::Cursor;
pub use session::{OfferError, Owner};
use session::{Session, Source, Viewer};

use crate::catalog::{Catalog, CatalogError};
use crate::events::{Notice, NoticeSink};
use crate::limits;
use crate::live::{Fanout, LiveFrame};
use crate::media::annexb;
use crate::media::{Frame, VideoParams};

/// Counters of the engine.
#[derive(Debug, Default)]
pub struct WebrtcStats {
    pub sessions_open: AtomicUsize,
    pub sessions_total: AtomicU64,
    pub refused_principal: AtomicU64,
    pub refused_address: AtomicU64,
    pub refused_server: AtomicU64,
    pub bad_offers: AtomicU64,
    pub datagrams_in: AtomicU64,
    /// Datagrams that are not STUN, DTLS, RTP or RTCP.
    pub datagrams_bad: AtomicU64,
    /// Well-formed datagrams no session claims.
    pub datagrams_unmatched: AtomicU64,
    pub send_errors: AtomicU64,
    pub frames_sent: AtomicU64,
    pub keyframe_bursts: AtomicU64,
    pub control_messages: AtomicU64,
    /// Control messages answered with an error.
    pub control_errors: AtomicU64,
    /// Control messages dropped because too many waited.
    pub control_dropped: AtomicU64,
    /// Messages to browsers their channel would not take (full, or closed).
    pub replies_dropped: AtomicU64,
    /// Sessions that never connected within [`limits::WEBRTC_CONNECT_TIMEOUT_MS`].
    pub connect_timeouts: AtomicU64,
    /// Stored events handed to the engine for subscribers.
    pub event_notices_in: AtomicU64,
    /// Stored events whose notice found the engine's queue full.
    pub event_notices_dropped: AtomicU64,
    /// Event notices written to subscribers' channels.
    pub event_notices_sent: AtomicU64,
    /// Subscriptions cut off because their session did not keep up.
    pub events_cut_off: AtomicU64,
    /// The engine's time for each of the last live frames (in to RTP out, all viewers), µs.
    frame_times: std::sync::Mutex<std::collections::VecDeque<u32>>,
}

/// Frame times kept for [`WebrtcStats::frame_times_us`].
const FRAME_TIMES_KEPT: usize = 4096;

impl WebrtcStats {
    fn record_frame(&self, took: Duration) {
        let mut times = self.frame_times.lock().expect("stats lock");
        if times.len() == FRAME_TIMES_KEPT {
            times.pop_front();
        }
        times.push_back(took.as_micros().min(u128::from(u32::MAX)) as u32);
    }

    /// Takes the engine's recorded times per live frame (for the benchmark), µs.
    pub fn frame_times_us(&self) -> Vec<u32> {
        self.frame_times.lock().expect("stats lock").drain(..).collect()
    }
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Offer(#[from] OfferError),
    #[error("{0} already has {1} live sessions, the most it may")]
    Principal(String, usize),
    #[error("this address already has {0} live sessions, the most it may")]
    Address(usize),
    #[error("the box already serves {0} live sessions, the most it can")]
    Server(usize),
    #[error("the camera is not connected: no picture to send yet")]
    NotLive,
    #[error("no such stream")]
    NoStream,
    #[error("live view is stopping")]
    Stopped,
    #[error("live view has {0} requests waiting, the most it queues: try again")]
    Busy(usize),
}

enum Command {
    Open {
        stream: usize,
        offer: String,
        owner: Owner,
        peer: IpAddr,
        reply: oneshot::Sender<Result<(u64, String), OpenError>>,
    },
    Close {
        id: u64,
        /// Only the owner (or an admin: `None`) may close a session.
        principal: Option<String>,
        reply: oneshot::Sender<bool>,
    },
    CloseLogin([u8; 32]),
    ClosePrincipal(String),
}

/// What the HTTP side holds to reach the engine.
#[derive(Clone)]
pub struct WebrtcHandle {
    tx: mpsc::Sender<Command>,
    events_tx: mpsc::Sender<Notice>,
    pub stats: Arc<WebrtcStats>,
    pub max_sessions: usize,
}

/// Stored events reach the subscribed sessions through the engine's queue.
impl NoticeSink for WebrtcHandle {
    fn publish(&self, notice: Notice) {
        self.publish_event(notice);
    }
}

impl WebrtcHandle {
    /// Opens a session on stream `stream` for a WHEP offer; returns its id and the answer.
    pub async fn open(
        &self,
        stream: usize,
        offer: String,
        owner: Owner,
        peer: IpAddr,
    ) -> Result<(u64, String), OpenError> {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Open { stream, offer, owner, peer, reply };
        self.tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => OpenError::Busy(limits::WEBRTC_COMMANDS_MAX),
            mpsc::error::TrySendError::Closed(_) => OpenError::Stopped,
        })?;
        rx.await.map_err(|_| OpenError::Stopped)?
    }

    /// Closes session `id`; `principal` must own it unless it is `None` (an admin).
    pub async fn close(&self, id: u64, principal: Option<String>) -> bool {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Command::Close { id, principal, reply }).await.is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// Hands a stored event to the subscribed sessions; never waits: with the engine's
    /// queue full the notice is dropped and counted (the event itself is stored).
    pub fn publish_event(&self, e: Notice) {
        if self.events_tx.try_send(e).is_err() {
            self.stats.event_notices_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes every session opened with a login session (at logout). Waits for room in
    /// the queue rather than lose the request: a logout must end its sessions.
    pub async fn close_login(&self, login: [u8; 32]) {
        let _ = self.tx.send(Command::CloseLogin(login)).await;
    }

    /// Closes every session of a principal (a user deleted); waits for room like
    /// [`WebrtcHandle::close_login`].
    pub async fn close_principal(&self, principal: String) {
        let _ = self.tx.send(Command::ClosePrincipal(principal)).await;
    }
}

/// Sessions the whole box may hold, by its RAM class.
pub fn max_sessions(ram_class_bytes: u64) -> usize {
    let gib = (ram_class_bytes >> 30).max(1) as usize;
    (gib * limits::WEBRTC_SESSIONS_PER_GIB).min(limits::WEBRTC_SESSIONS_SERVER_MAX)
}

/// Sessions one principal may hold on a box of `max_sessions`: its share, so that others
/// always find room.
pub fn principal_max(max_sessions: usize) -> usize {
    (max_sessions * limits::WEBRTC_PRINCIPAL_SHARE_PERCENT / 100).clamp(1, limits::WEBRTC_SESSIONS_PER_PRINCIPAL_MAX)
}

/// Sessions anyone may open on a box of `max_sessions`; the rest are kept for admins.
pub fn for_everyone(max_sessions: usize) -> usize {
    max_sessions.saturating_sub(limits::WEBRTC_SESSIONS_ADMIN_RESERVED).max(1)
}

/// The addresses to offer host candidates on: every IPv4 and global IPv6 address of an
/// interface, loopback only when asked.
pub fn host_addresses(loopback: bool) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip())
        .filter(|ip| match ip {
            IpAddr::V4(v4) => !v4.is_link_local() && !v4.is_unspecified() && (loopback || !v4.is_loopback()),
            IpAddr::V6(v6) => {
                !v6.is_loopback() && !v6.is_unspecified() && (v6.segments()[0] & 0xffc0) != 0xfe80 // link-local
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A UDP socket on `addr` for the engine (called on its runtime), and the address it got.
fn listen(addr: SocketAddr) -> io::Result<(SocketAddr, UdpSocket)> {
    let socket = std::net::UdpSocket::bind(addr)?;
    socket.set_nonblocking(true)?;
    let socket = UdpSocket::from_std(socket)?;
    Ok((socket.local_addr()?, socket))
}

/// How often a track playing stored video reports its position.
const POSITION_EVERY: Duration = Duration::from_millis(250);

/// One stream the engine watches: its tap and the parameter sets of its current params.
struct Watched {
    tap: u64,
    params: Option<(Arc<VideoParams>, Vec<Bytes>)>,
}

/// The engine: owns every session and the sockets.
pub struct Engine {
    sockets: Vec<UdpSocket>,
    locals: Vec<SocketAddr>,
    streams: Vec<Arc<Fanout>>,
    /// `camera/kind` of each stream.
    names: Vec<String>,
    catalog: Arc<Catalog>,
    data_dir: PathBuf,
    watched: HashMap<usize, Watched>,
    sessions: Vec<Session>,
    deadlines: Vec<Instant>,
    cmd_rx: mpsc::Receiver<Command>,
    events_rx: mpsc::Receiver<Notice>,
    frames_tx: mpsc::Sender<LiveFrame>,
    frames_rx: mpsc::Receiver<LiveFrame>,
    stats: Arc<WebrtcStats>,
    max_sessions: usize,
    next_id: u64,
    /// (session, track) pairs showing the stream of the frame being sent: kept between
    /// frames so the per-frame path does not allocate it.
    viewers: Vec<(usize, usize)>,
    /// Where the box's current addresses come from, when they are followed (the daemon);
    /// `None`: the addresses bound at the start are all there is.
    addresses: Option<Box<dyn Fn() -> Vec<IpAddr> + Send>>,
    /// The port new addresses are bound on: the first socket's.
    port: u16,
}

impl Engine {
    /// Binds the UDP port on each address (a taken port is a clear error at start).
    pub async fn bind(
        port: u16,
        addresses: &[IpAddr],
        streams: Vec<(String, Arc<Fanout>)>,
        store: (Arc<Catalog>, PathBuf),
        max_sessions: usize,
    ) -> io::Result<(Engine, WebrtcHandle)> {
        let (names, streams): (Vec<String>, Vec<Arc<Fanout>>) = streams.into_iter().unzip();
        let (catalog, data_dir) = store;
        let mut sockets = Vec::new();
        let mut locals = Vec::new();
        let mut first_error = None;
        // One address that cannot be bound is skipped (said, and tried again when a session
        // opens); none bound is the port's problem, and an error.
        for ip in addresses.iter().take(limits::WEBRTC_HOST_ADDRESSES_MAX) {
            match listen(SocketAddr::new(*ip, port)) {
                Ok((local, socket)) => {
                    locals.push(local);
                    sockets.push(socket);
                }
                Err(e) => {
                    warn!(address = %ip, port, error = %e, "live view: cannot listen on an address");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let (true, Some(e)) = (sockets.is_empty(), first_error) {
            return Err(e);
        }
        let port = locals.first().map_or(port, |l| l.port());
        let (tx, cmd_rx) = mpsc::channel(limits::WEBRTC_COMMANDS_MAX);
        let (events_tx, events_rx) = mpsc::channel(limits::WEBRTC_EVENTS_IN_MAX);
        let (frames_tx, frames_rx) = mpsc::channel(limits::LIVE_TAP_FRAMES);
        let stats = Arc::new(WebrtcStats::default());
        let handle = WebrtcHandle { tx, events_tx, stats: stats.clone(), max_sessions };
        let engine = Engine {
            sockets,
            locals,
            streams,
            names,
            catalog,
            data_dir,
            watched: HashMap::new(),
            sessions: Vec::new(),
            deadlines: Vec::new(),
            cmd_rx,
            events_rx,
            frames_tx,
            frames_rx,
            stats,
            max_sessions,
            next_id: 1,
            viewers: Vec::new(),
            addresses: None,
            port,
        };
        Ok((engine, handle))
    }

    /// Follows the box's addresses: each session is offered the addresses `current` gives
    /// when it opens, and one not bound yet is bound then (see
    /// [`limits::WEBRTC_HOST_ADDRESSES_MAX`]).
    pub fn follow_addresses(mut self, current: impl Fn() -> Vec<IpAddr> + Send + 'static) -> Self {
        self.addresses = Some(Box::new(current));
        self
    }

    /// The local addresses to offer a session now: the box's current ones, each bound (a new
    /// one gets a socket, or the socket of an address the box no longer has).
    fn current_locals(&mut self) -> Vec<SocketAddr> {
        let Some(current) = self.addresses.as_ref().map(|f| f()) else { return self.locals.clone() };
        for ip in &current {
            if self.locals.iter().any(|l| l.ip() == *ip) {
                continue;
            }
            let slot = if self.sockets.len() < limits::WEBRTC_HOST_ADDRESSES_MAX {
                None
            } else if let Some(i) = self.locals.iter().position(|l| !current.contains(&l.ip())) {
                Some(i)
            } else {
                debug!(address = %ip, max = limits::WEBRTC_HOST_ADDRESSES_MAX, "live view: no socket left for a new address");
                continue;
            };
            let (local, socket) = match listen(SocketAddr::new(*ip, self.port)) {
                Ok(bound) => bound,
                Err(e) => {
                    warn!(address = %ip, error = %e, "live view: cannot listen on a new address");
                    continue;
                }
            };
            info!(address = %local, "live view listening on a new address");
            match slot {
                None => {
                    self.sockets.push(socket);
                    self.locals.push(local);
                }
                Some(i) => {
                    self.sockets[i] = socket;
                    self.locals[i] = local;
                }
            }
        }
        let offered: Vec<SocketAddr> = self.locals.iter().filter(|l| current.contains(&l.ip())).copied().collect();
        // No address right now (the network is down): offer what is bound rather than none.
        if offered.is_empty() { self.locals.clone() } else { offered }
    }

    /// Runs until `shutdown` turns true or every handle is gone.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        info!(addresses = ?self.locals, "live view (WebRTC) listening");
        let mut buf = vec![0u8; limits::WEBRTC_DATAGRAM_MAX_BYTES];
        loop {
            let next = self.deadlines.iter().min().copied();
            let sleep_until = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
            let event = {
                let sockets = &self.sockets;
                let received = poll_fn(|cx| {
                    for (i, s) in sockets.iter().enumerate() {
                        let mut rb = ReadBuf::new(&mut buf);
                        if let Poll::Ready(r) = s.poll_recv_from(cx, &mut rb) {
                            return Poll::Ready(r.map(|from| (i, rb.filled().len(), from)));
                        }
                    }
                    Poll::Pending
                });
                tokio::select! {
                    c = self.cmd_rx.recv() => match c {
                        Some(c) => Step::Command(c),
                        None => break,
                    },
                    r = received => Step::Datagram(r),
                    Some(e) = self.events_rx.recv() => Step::Event(e),
                    Some(f) = self.frames_rx.recv() => Step::Frame(f),
                    _ = tokio::time::sleep_until(sleep_until.into()) => Step::Timeout,
                    _ = shutdown.changed() => break,
                }
            };
            match event {
                Step::Command(c) => self.command(c),
                Step::Datagram(Ok((i, n, from))) => self.datagram(i, &buf[..n], from),
                Step::Datagram(Err(e)) => debug!("webrtc receive: {e}"),
                Step::Frame(f) => self.frame(f),
                Step::Event(e) => self.event(&e),
                Step::Timeout => self.timeouts(),
            }
            self.sweep();
            // Share the runtime fairly (ingest, the web face, signals) however busy it is.
            tokio::task::consume_budget().await;
        }
        for s in &mut self.sessions {
            s.rtc.disconnect();
        }
        info!("live view stopped");
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Open { stream, offer, owner, peer, reply } => {
                let r = self.open(stream, &offer, owner, peer);
                if r.is_err() {
                    debug!("live session refused: {:?}", r.as_ref().err());
                }
                let _ = reply.send(r);
            }
            Command::Close { id, principal, reply } => {
                let mut found = false;
                for s in &mut self.sessions {
                    if s.id == id && principal.as_ref().is_none_or(|p| *p == s.owner.principal) {
                        s.rtc.disconnect();
                        found = true;
                    }
                }
                let _ = reply.send(found);
            }
            Command::CloseLogin(login) => {
                for s in self.sessions.iter_mut().filter(|s| s.owner.login == Some(login)) {
                    s.rtc.disconnect();
                }
            }
            Command::ClosePrincipal(p) => {
                for s in self.sessions.iter_mut().filter(|s| s.owner.principal == p) {
                    s.rtc.disconnect();
                }
            }
        }
    }

    fn open(&mut self, stream: usize, offer: &str, owner: Owner, peer: IpAddr) -> Result<(u64, String), OpenError> {
        let fanout = self.streams.get(stream).ok_or(OpenError::NoStream)?.clone();
        let of_principal = self.sessions.iter().filter(|s| s.owner.principal == owner.principal).count();
        let principal_max = principal_max(self.max_sessions);
        if of_principal >= principal_max {
            self.stats.refused_principal.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Principal(owner.principal, principal_max));
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
        let params = fanout.params().ok_or(OpenError::NotLive)?;
        let id = self.next_id;
        let now = Instant::now();
        let locals = self.current_locals();
        let accepted = Session::accept(Viewer { id, owner, peer, stream }, &params, offer, &locals, now);
        let (session, answer) = accepted.inspect_err(|_| {
            self.stats.bad_offers.fetch_add(1, Ordering::Relaxed);
        })?;
        self.next_id += 1;
        if !self.watched.contains_key(&stream) {
            let tap = fanout.tap(stream, self.frames_tx.clone());
            self.watched.insert(stream, Watched { tap, params: None });
        }
        self.sessions.push(session);
        self.deadlines.push(now);
        self.stats.sessions_total.fetch_add(1, Ordering::Relaxed);
        self.stats.sessions_open.store(self.sessions.len(), Ordering::Relaxed);
        Ok((id, answer))
    }

    /// Offers a stored event to every subscribed session.
    fn event(&mut self, e: &Notice) {
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
            let _ = self.drive_quiet(i);
        }
    }

    fn datagram(&mut self, socket: usize, data: &[u8], from: SocketAddr) {
        self.stats.datagrams_in.fetch_add(1, Ordering::Relaxed);
        let Ok(receive) = Receive::new(Protocol::Udp, from, self.locals[socket], data) else {
            self.stats.datagrams_bad.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let input = Input::Receive(Instant::now(), receive);
        let Some(i) = self.sessions.iter().position(|s| s.rtc.accepts(&input)) else {
            self.stats.datagrams_unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if self.sessions[i].rtc.handle_input(input).is_err() {
            self.sessions[i].rtc.disconnect();
        }
        self.drive(i);
    }

    fn timeouts(&mut self) {
        let now = Instant::now();
        for i in 0..self.sessions.len() {
            if self.deadlines[i] <= now {
                if self.sessions[i].rtc.handle_input(Input::Timeout(now)).is_err() {
                    self.sessions[i].rtc.disconnect();
                }
                self.pump_cursors(i, now);
                self.drive(i);
            }
        }
    }

    /// Drains session `i`'s output to the sockets; answers its keyframe wants and control
    /// messages.
    fn drive(&mut self, i: usize) {
        let wants = self.drive_quiet(i);
        for t in wants.keyframe {
            self.keyframe_burst(i, t);
        }
        // Messages may also have arrived during a drive whose wants were not looked at.
        if wants.control || !self.sessions[i].inbox.is_empty() {
            self.control(i);
        }
    }

    /// Drains session `i`'s output to the sockets; returns what it wants. Its next deadline
    /// is the earlier of its own timeout and its cursors' next frames.
    fn drive_quiet(&mut self, i: usize) -> session::Wants {
        let (sockets, locals, stats) = (&self.sockets, &self.locals, &self.stats);
        let mut send = |t: Transmit| {
            // From the socket of the address the session was offered; one whose socket went
            // to a newer address (the box no longer has the old one) is not sent.
            let sent = locals
                .iter()
                .position(|l| *l == t.source)
                .is_some_and(|k| sockets[k].try_send_to(&t.contents, t.destination).is_ok());
            if !sent {
                stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        };
        let s = &mut self.sessions[i];
        let (next, wants) = s.drive(&mut send);
        stats.control_dropped.fetch_add(std::mem::take(&mut s.control_dropped), Ordering::Relaxed);
        stats.replies_dropped.fetch_add(std::mem::take(&mut s.replies_dropped), Ordering::Relaxed);
        stats.event_notices_sent.fetch_add(std::mem::take(&mut s.events_sent), Ordering::Relaxed);
        let cursors = s.tracks.iter().filter_map(|t| match &t.source {
            Source::Stored(c) if s.is_connected() => c.due(),
            _ => None,
        });
        self.deadlines[i] = cursors.chain(next).min().unwrap_or_else(Instant::now);
        wants
    }

    /// Sends track `t` of session `i` a keyframe: the stream's held GOP for live video, the
    /// keyframe at or before the position for stored video.
    fn keyframe_burst(&mut self, i: usize, t: usize) {
        let now = Instant::now();
        let stream = match &mut self.sessions[i].tracks[t].source {
            Source::Live(stream) => *stream,
            Source::Stored(cursor) => {
                let at = cursor.position_us();
                if cursor.seek(at, now).is_ok() {
                    self.sessions[i].tracks[t].lost_frames();
                }
                return;
            }
            Source::Idle => return,
        };
        let gop = self.streams[stream].gop();
        if gop.is_empty() {
            return; // the next keyframe will do
        }
        self.stats.keyframe_bursts.fetch_add(1, Ordering::Relaxed);
        for f in &gop {
            let Some(data) = self.annexb(stream, f) else { return };
            let s = &mut self.sessions[i];
            if s.send_frame(t, &data, f.is_key, f.pts_90k, true, now).is_err() {
                s.tracks[t].lost_frames();
                return;
            }
            s.tracks[t].last_sent_mono_us = f.received_mono_us;
        }
        // Wants raised while sending the burst are answered by the burst itself.
        let _ = self.drive_quiet(i);
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
                    Ok(Some(f)) => f,
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
                    let body =
                        control::pb::server_message::Body::Position(control::pb::Position { wall_us: frame.wall_us });
                    s.send_control(&control::pb::ServerMessage { request_id: 0, track: t as u32, body: Some(body) });
                }
            }
        }
    }

    /// A frame in Annex B with the parameter sets in front of a keyframe; `None` (and a
    /// warning) when the frame or its parameters cannot be read.
    fn annexb(&mut self, stream: usize, f: &Frame) -> Option<Arc<[u8]>> {
        let watched = self.watched.get_mut(&stream)?;
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

    fn frame(&mut self, lf: LiveFrame) {
        let stream = lf.stream;
        let now = Instant::now();
        let mut viewers = std::mem::take(&mut self.viewers);
        viewers.clear();
        for (i, s) in self.sessions.iter_mut().enumerate() {
            for (t, track) in s.tracks.iter_mut().enumerate() {
                if matches!(track.source, Source::Live(x) if x == stream) {
                    if lf.after_gap {
                        track.rebase();
                    }
                    viewers.push((i, t));
                }
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
            return;
        };
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
                self.drive(last_touched.take().expect("checked"));
            }
            last_touched = Some(i);
        }
        if let Some(i) = last_touched {
            self.drive(i);
        }
        self.viewers = viewers;
        self.stats.record_frame(now.elapsed());
    }

    /// Handles session `i`'s control messages.
    fn control(&mut self, i: usize) {
        // Answering drives the session, which may take in more messages: until none wait.
        while !self.sessions[i].inbox.is_empty() {
            self.control_batch(i);
        }
    }

    fn control_batch(&mut self, i: usize) {
        while let Some(bytes) = self.sessions[i].inbox.pop_front() {
            let tracks = self.sessions[i].tracks.len();
            self.stats.control_messages.fetch_add(1, Ordering::Relaxed);
            let (reply, track) = match control::decode(&bytes, tracks) {
                Ok(request) => (self.command_for(i, &request).unwrap_or_else(|e| e), Some(request.track)),
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
                let body = control::pb::server_message::Body::Position(control::pb::Position {
                    wall_us: cursor.position_us(),
                });
                s.send_control(&control::pb::ServerMessage { request_id: 0, track: t as u32, body: Some(body) });
            }
        }
        let _ = self.drive_quiet(i);
    }

    /// The index and name of a stream named in a command (empty: the session's own).
    fn stream_named(
        &self,
        i: usize,
        name: &str,
        req: &control::Request,
    ) -> Result<(usize, String), control::pb::ServerMessage> {
        let ix =
            if name.is_empty() { Some(self.sessions[i].stream) } else { self.names.iter().position(|n| n == name) };
        let ix =
            ix.ok_or_else(|| control::error(req.id, req.track as u32, "not_found", format!("no stream {name}")))?;
        Ok((ix, self.names[ix].clone()))
    }

    /// Carries out one request on track `req.track` of session `i`; returns the answer.
    fn command_for(
        &mut self,
        i: usize,
        req: &control::Request,
    ) -> Result<control::pb::ServerMessage, control::pb::ServerMessage> {
        use control::Command as C;
        let (id, t) = (req.id, req.track);
        let now = Instant::now();
        let err = |code: &str, message: String| control::error(id, t as u32, code, message);
        match &req.command {
            C::PlayLive { stream } => {
                let (ix, name) = self.stream_named(i, stream, req)?;
                let codec = self.streams[ix].params().map(|p| p.codec);
                if codec.is_some_and(|c| c != self.sessions[i].codec) {
                    return Err(err("no_codec", format!("{name} is not in the codec this session negotiated")));
                }
                if !self.watched.contains_key(&ix) {
                    let tap = self.streams[ix].tap(ix, self.frames_tx.clone());
                    self.watched.insert(ix, Watched { tap, params: None });
                }
                let track = &mut self.sessions[i].tracks[t];
                track.source = Source::Live(ix);
                track.play = control::PlayState::live(name);
                track.rebase();
                track.last_sent_mono_us = i64::MIN;
                self.keyframe_burst(i, t);
            }
            C::PlayStored { stream, wall_us } => {
                let (_, name) = self.stream_named(i, stream, req)?;
                let is_stored = matches!(self.sessions[i].tracks[t].source, Source::Stored(_));
                if !is_stored && self.sessions[i].cursors() >= limits::WEBRTC_CURSORS_PER_SESSION_MAX {
                    let m = format!("a session plays at most {} stored tracks", limits::WEBRTC_CURSORS_PER_SESSION_MAX);
                    return Err(err("too_many_cursors", m));
                }
                let all: usize = self.sessions.iter().map(Session::cursors).sum();
                if !is_stored && all >= limits::WEBRTC_CURSORS_MAX {
                    let m = format!("the box plays at most {} stored tracks", limits::WEBRTC_CURSORS_MAX);
                    return Err(err("too_many_cursors", m));
                }
                let stream_id = match self.catalog.streams() {
                    Ok(list) => list.into_iter().find(|(_, n)| *n == name).map(|(id, _)| id),
                    Err(e) => return Err(err("internal", e.to_string())),
                };
                let stream_id =
                    stream_id.ok_or_else(|| err("nothing_recorded", format!("{name} has no recordings")))?;
                let cursor = Cursor::open(self.catalog.clone(), &self.data_dir, stream_id, *wall_us, now)
                    .map_err(|e| err("nothing_recorded", e.to_string()))?;
                if cursor.params().is_some_and(|p| p.codec != self.sessions[i].codec) {
                    return Err(err(
                        "no_codec",
                        format!("{name} was recorded in a codec this session did not negotiate"),
                    ));
                }
                let track = &mut self.sessions[i].tracks[t];
                track.source = Source::Stored(Box::new(cursor));
                track.play = control::PlayState { stored: true, stream: name, paused: false, rate: 1.0, step: false };
                track.rebase();
            }
            C::Seek { wall_us } => {
                let track = &mut self.sessions[i].tracks[t];
                let Source::Stored(cursor) = &mut track.source else {
                    return Err(err("not_stored", "the track is not playing stored video".into()));
                };
                cursor.seek(*wall_us, now).map_err(|e| err("nothing_recorded", e.to_string()))?;
                track.rebase();
            }
            C::Pause | C::Resume | C::SetRate { .. } | C::Step => {
                let track = &mut self.sessions[i].tracks[t];
                track.play.apply(req)?;
                if let Source::Stored(cursor) = &mut track.source {
                    cursor.set_rate(track.play.rate, track.play.keyframes_only(), now);
                    cursor.set_paused(track.play.paused, track.play.step, now);
                    if track.play.keyframes_only() {
                        track.lost_frames();
                    }
                }
            }
            C::SubscribeEvents { cameras } => {
                self.sessions[i].events = Some(session::EventSub::new(cameras.clone()));
                let cameras = if cameras.is_empty() { vec!["*".to_string()] } else { cameras.clone() };
                let body = control::pb::server_message::Body::Subscribed(control::pb::Subscribed { cameras });
                return Ok(control::pb::ServerMessage { request_id: id, track: t as u32, body: Some(body) });
            }
            C::UnsubscribeEvents => {
                self.sessions[i].events = None;
                let body = control::pb::server_message::Body::Subscribed(control::pb::Subscribed { cameras: vec![] });
                return Ok(control::pb::ServerMessage { request_id: id, track: t as u32, body: Some(body) });
            }
            C::Timeline { stream, from_us, to_us } => {
                let (_, name) = self.stream_named(i, stream, req)?;
                return self.timeline(req, name, *from_us, *to_us);
            }
        }
        let track = &self.sessions[i].tracks[t];
        Ok(track.play.message(id, t as u32))
    }

    /// Runs and gaps of a stream: its recordings grouped by run.
    fn timeline(
        &self,
        req: &control::Request,
        name: String,
        from_us: i64,
        to_us: i64,
    ) -> Result<control::pb::ServerMessage, control::pb::ServerMessage> {
        let err = |e: CatalogError| control::error(req.id, req.track as u32, "internal", e.to_string());
        let stream_id = self.catalog.streams().map_err(err)?.into_iter().find(|(_, n)| *n == name).map(|(id, _)| id);
        let mut runs: Vec<control::pb::Run> = Vec::new();
        let mut truncated = false;
        if let Some(stream_id) = stream_id {
            let mut last_run = None;
            for (_, r) in self.catalog.recordings().map_err(err)? {
                if r.stream_id != stream_id || r.wall_end_us <= from_us || r.wall_start_us >= to_us || r.fragments == 0
                {
                    continue;
                }
                let full = runs.len() >= limits::WEBRTC_TIMELINE_RUNS_MAX;
                match runs.last_mut() {
                    Some(run) if last_run == Some(r.run_id) => run.end_us = run.end_us.max(r.wall_end_us),
                    _ if full => {
                        truncated = true;
                        break;
                    }
                    _ => runs.push(control::pb::Run { start_us: r.wall_start_us, end_us: r.wall_end_us }),
                }
                last_run = Some(r.run_id);
            }
        }
        let body = control::pb::server_message::Body::Timeline(control::pb::Timeline { stream: name, runs, truncated });
        Ok(control::pb::ServerMessage { request_id: req.id, track: req.track as u32, body: Some(body) })
    }

    /// Drops dead sessions (and ones that never connected), and taps no one needs.
    fn sweep(&mut self) {
        let now = Instant::now();
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
            }
        }
        let in_use: Vec<usize> = self
            .sessions
            .iter()
            .flat_map(|s| s.tracks.iter())
            .filter_map(|t| match t.source {
                Source::Live(x) => Some(x),
                _ => None,
            })
            .collect();
        let streams = &self.streams;
        self.watched.retain(|stream, w| {
            let keep = in_use.contains(stream);
            if !keep {
                streams[*stream].untap(w.tap);
            }
            keep
        });
        self.stats.sessions_open.store(self.sessions.len(), Ordering::Relaxed);
    }
}

enum Step {
    Command(Command),
    Datagram(io::Result<(usize, usize, SocketAddr)>),
    Frame(LiveFrame),
    Event(Notice),
    Timeout,
}

/// A session driven with arbitrary input, for the fuzz target `webrtc_session` (`fuzz/`):
/// datagrams as if from the browser, frames from the camera, time passing. Nothing here may
/// panic on any input.
#[doc(hidden)]
pub mod fuzzing {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use str0m::Input;
    use str0m::net::{Protocol, Receive};

    use super::session::{Owner, Session, Viewer};
    use crate::media::{VideoParams, avc};

    const LOCAL: ([u8; 4], u16) = ([127, 0, 0, 1], 9);
    const PEER: ([u8; 4], u16) = ([127, 0, 0, 1], 40_000);

    pub struct Harness {
        session: Session,
        now: Instant,
        pts_90k: i64,
    }

    /// A 640x360 H.264 stream's parameters (Main profile, level 3.1).
    pub(super) fn params() -> VideoParams {
        let sps = [0x67, 0x4d, 0x00, 0x1f, 0x9a, 0x66, 0x02, 0x80, 0x2d, 0xd8];
        let pps = [0x68, 0xee, 0x3c, 0x80];
        avc::video_params(&sps, &pps, 640, 360).expect("valid parameter sets")
    }

    impl Harness {
        /// A session accepted from `offer`; `None` when the offer is refused.
        pub fn new(offer: &str) -> Option<Harness> {
            let owner = Owner { principal: "token:1".into(), login: None, admin: false };
            let who = Viewer { id: 1, owner, peer: PEER.0.into(), stream: 0 };
            let now = Instant::now();
            let (session, _answer) = Session::accept(who, &params(), offer, &[SocketAddr::from(LOCAL)], now).ok()?;
            Some(Harness { session, now, pts_90k: 0 })
        }

        fn drive(&mut self) {
            let _ = self.session.drive(&mut |_| {});
            self.session.inbox.clear();
        }

        #[cfg(test)]
        pub(super) fn session(&mut self) -> &mut Session {
            &mut self.session
        }

        /// A datagram from the browser's address.
        pub fn datagram(&mut self, bytes: &[u8]) {
            if let Ok(r) = Receive::new(Protocol::Udp, PEER.into(), LOCAL.into(), bytes) {
                let input = Input::Receive(self.now, r);
                if self.session.rtc.accepts(&input) && self.session.rtc.handle_input(input).is_err() {
                    self.session.rtc.disconnect();
                }
            }
            self.drive();
        }

        /// A frame on track `track` (Annex B bytes as given).
        pub fn frame(&mut self, track: usize, is_key: bool, data: &[u8]) {
            self.pts_90k += 6000;
            let data: Arc<[u8]> = data.into();
            let _ = self.session.send_frame(track, &data, is_key, self.pts_90k, false, self.now);
            self.drive();
        }

        /// Time passes.
        pub fn tick(&mut self, ms: u64) {
            self.now += Duration::from_millis(ms);
            if self.session.rtc.handle_input(Input::Timeout(self.now)).is_err() {
                self.session.rtc.disconnect();
            }
            self.drive();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::GopPool;
    use str0m::Rtc;
    use str0m::media::{Direction, MediaKind};

    const WALL0: i64 = 1_800_000_000_000_000;

    /// A browser's offer, made by `str0m` as a client: `videos` receive-only video tracks
    /// and the control channel.
    fn offer(videos: usize) -> String {
        let mut rtc = Rtc::new(Instant::now());
        let mut api = rtc.sdp_api();
        for _ in 0..videos {
            api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        }
        api.add_channel("control".into());
        let (offer, _pending) = api.apply().expect("an offer");
        offer.to_sdp_string()
    }

    /// An engine on a loopback port serving one stream, `cam/main`, that has a picture (and
    /// so parameters) and one 30-second recording.
    async fn engine(dir: &std::path::Path, max_sessions: usize) -> (Engine, WebrtcHandle) {
        let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
        crate::record::testing::recording(&catalog, dir, "cam/main", WALL0, 30);
        let fanout = Arc::new(Fanout::new(Arc::new(GopPool::default())));
        let params = Arc::new(fuzzing::params());
        fanout.publish(&Frame { params, ..Frame::for_test(100, true) });
        let addrs = [IpAddr::from([127, 0, 0, 1])];
        let streams = vec![("cam/main".to_string(), fanout)];
        Engine::bind(0, &addrs, streams, (catalog, dir.into()), max_sessions).await.unwrap()
    }

    fn owner(principal: &str) -> Owner {
        Owner { principal: principal.into(), login: None, admin: false }
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
    fn a_principal_gets_its_share_and_admins_keep_room() {
        // A 1 GiB box: 64 sessions, 32 for one principal, 62 for anyone, 64 for admins.
        assert_eq!((principal_max(64), for_everyone(64)), (32, 62));
        assert_eq!(principal_max(512), limits::WEBRTC_SESSIONS_PER_PRINCIPAL_MAX);
        assert_eq!((principal_max(1), for_everyone(1)), (1, 1));
    }

    #[tokio::test]
    async fn stored_tracks_stop_at_sixteen_per_session_and_the_box_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let per_session = limits::WEBRTC_CURSORS_PER_SESSION_MAX;
        let sessions = limits::WEBRTC_CURSORS_MAX / per_session;
        let (mut e, _handle) = engine(dir.path(), sessions + 1).await;
        let offer = offer(per_session + 1);
        let peer = IpAddr::from([127, 0, 0, 1]);
        for k in 0..=sessions {
            let who = Owner { admin: true, ..owner(&format!("user:{k}")) };
            e.open(0, &offer, who, peer).expect("a session");
        }
        assert_eq!(e.sessions[0].tracks.len(), per_session + 1, "one live track and sixteen more");
        for i in 0..sessions {
            for t in 0..per_session {
                let answer = e.command_for(i, &play_stored(t)).expect("a stored track");
                assert_eq!(answer.request_id, 7);
            }
        }
        let all: usize = e.sessions.iter().map(Session::cursors).sum();
        assert_eq!(all, limits::WEBRTC_CURSORS_MAX);
        // The seventeenth of a session.
        let refused = e.command_for(0, &play_stored(per_session)).unwrap_err();
        assert_eq!(error_code(&refused), "too_many_cursors");
        // The box is full: a session with none is refused too, with the box's reason.
        let refused = e.command_for(sessions, &play_stored(0)).unwrap_err();
        assert_eq!(error_code(&refused), "too_many_cursors");
        assert!(format!("{refused:?}").contains("the box plays at most 1024"), "{refused:?}");
        // A track already playing stored video may seek or play stored again.
        e.command_for(0, &play_stored(0)).expect("replaying a stored track is not a new cursor");
        // One ends: its room is free again.
        e.sessions[0].tracks[3].source = Source::Idle;
        e.command_for(sessions, &play_stored(0)).expect("room for one more");
    }

    /// The host candidates of an answer.
    fn candidates(answer: &str) -> Vec<String> {
        answer
            .lines()
            .filter(|l| l.starts_with("a=candidate:"))
            .filter_map(|l| l.split_whitespace().nth(4).map(str::to_owned))
            .collect()
    }

    #[tokio::test]
    async fn addresses_that_appear_later_are_offered_and_bound_up_to_the_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let (e, _handle) = engine(dir.path(), 64).await;
        let now = Arc::new(std::sync::Mutex::new(vec![IpAddr::from([127, 0, 0, 1])]));
        let mut e = {
            let now = now.clone();
            e.follow_addresses(move || now.lock().unwrap().clone())
        };
        let peer = IpAddr::from([127, 0, 0, 1]);
        let open = |e: &mut Engine, who: &str| candidates(&e.open(0, &offer(1), owner(who), peer).unwrap().1);
        assert_eq!(open(&mut e, "user:a"), ["127.0.0.1"]);
        // A lease arrives: the next session is offered the new address too, bound on the
        // same port.
        let loopback = |k: u8| IpAddr::from([127, 0, 0, k]);
        now.lock().unwrap().push(loopback(2));
        assert_eq!(open(&mut e, "user:b"), ["127.0.0.1", "127.0.0.2"]);
        assert_eq!(e.locals[1].port(), e.locals[0].port());
        // Up to the ceiling of sockets; past it, a new address takes the socket of one the
        // box no longer has.
        let max = limits::WEBRTC_HOST_ADDRESSES_MAX as u8;
        *now.lock().unwrap() = (1..=max + 1).map(loopback).collect();
        assert_eq!(open(&mut e, "user:c").len(), limits::WEBRTC_HOST_ADDRESSES_MAX, "the ninth is not bound");
        assert_eq!(e.sockets.len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
        *now.lock().unwrap() = (2..=max + 1).map(loopback).collect();
        let offered = open(&mut e, "user:d");
        assert_eq!(offered.len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
        assert!(!offered.contains(&"127.0.0.1".to_string()) && offered.contains(&format!("127.0.0.{}", max + 1)));
        assert_eq!(e.sockets.len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
        // The network is down: what is bound is offered rather than nothing.
        now.lock().unwrap().clear();
        assert_eq!(open(&mut e, "user:e").len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
    }

    #[tokio::test]
    async fn the_timeline_stops_at_its_ceiling_of_runs_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (mut e, _handle) = engine(dir.path(), 1).await;
        e.open(0, &offer(1), owner("user:a"), IpAddr::from([127, 0, 0, 1])).unwrap();
        // Runs of one recording each, a minute apart, after the one recording made above.
        let stream_id = e.catalog.stream_id("cam/main").unwrap();
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
        e.catalog.commit(&batch).unwrap();
        let ask = |from_us, to_us| control::Request {
            id: 3,
            track: 0,
            command: control::Command::Timeline { stream: String::new(), from_us, to_us },
        };
        let timeline = |m: control::pb::ServerMessage| match m.body {
            Some(control::pb::server_message::Body::Timeline(t)) => t,
            other => panic!("not a timeline: {other:?}"),
        };
        let all = timeline(e.command_for(0, &ask(0, i64::MAX)).unwrap());
        assert_eq!(all.runs.len(), limits::WEBRTC_TIMELINE_RUNS_MAX);
        assert!(all.truncated);
        assert_eq!(all.runs[0], control::pb::Run { start_us: WALL0, end_us: WALL0 + 30_000_000 });
        // A window within the ceiling is whole.
        let some = timeline(e.command_for(0, &ask(WALL0, WALL0 + 60_000_000 * 5)).unwrap());
        assert_eq!(some.runs.len(), 5);
        assert!(!some.truncated);
    }

    #[tokio::test]
    async fn opening_sessions_beyond_the_request_queue_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (e, handle) = engine(dir.path(), 1).await;
        // The engine is not running yet: requests wait in its queue.
        let mut waiting = Vec::new();
        for _ in 0..limits::WEBRTC_COMMANDS_MAX {
            let h = handle.clone();
            let peer = IpAddr::from([127, 0, 0, 1]);
            waiting.push(tokio::spawn(async move { h.open(0, offer(1), owner("user:a"), peer).await }));
        }
        while e.cmd_rx.len() < limits::WEBRTC_COMMANDS_MAX {
            tokio::task::yield_now().await;
        }
        let refused = handle.open(0, offer(1), owner("user:a"), IpAddr::from([127, 0, 0, 1])).await;
        assert!(matches!(refused, Err(OpenError::Busy(limits::WEBRTC_COMMANDS_MAX))), "{refused:?}");
        // Logout does not lose its request to a full queue: it waits for room.
        let logout = tokio::spawn({
            let h = handle.clone();
            async move { h.close_login([1; 32]).await }
        });
        let (_stop_tx, stop) = watch::channel(false);
        let engine = tokio::spawn(e.run(stop));
        let mut opened = 0;
        for w in waiting {
            match w.await.unwrap() {
                Ok(_) => opened += 1,
                // On a box of one session, one principal's share is that session.
                Err(OpenError::Principal(_, 1)) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(opened, 1, "the engine took every queued request in turn");
        tokio::time::timeout(Duration::from_secs(5), logout).await.unwrap().unwrap();
        engine.abort();
    }

    #[test]
    fn the_box_holds_sessions_by_its_ram_class_up_to_the_server_ceiling() {
        assert_eq!(max_sessions(512 << 20), limits::WEBRTC_SESSIONS_PER_GIB, "at least one GiB's worth");
        assert_eq!(max_sessions(2 << 30), 2 * limits::WEBRTC_SESSIONS_PER_GIB);
        assert_eq!(max_sessions(1 << 40), limits::WEBRTC_SESSIONS_SERVER_MAX);
    }

    #[tokio::test]
    async fn event_notices_past_the_engines_queue_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        // The engine is not running: its queue fills.
        let (_e, handle) = engine(dir.path(), 1).await;
        let notice = Notice {
            id: 1,
            rev: 1,
            camera: "cam".into(),
            time_us: 0,
            labels: Vec::new(),
            score: None,
            text: String::new(),
            has_snapshot: false,
        };
        for _ in 0..limits::WEBRTC_EVENTS_IN_MAX + 2 {
            handle.publish_event(notice.clone());
        }
        assert_eq!(handle.stats.event_notices_dropped.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_subscriber_that_does_not_keep_up_is_cut_off_at_its_queue_ceilings() {
        let offer = include_str!("../../tests/recorder/chromium-offer.sdp");
        let mut h = fuzzing::Harness::new(offer).expect("the canned offer is accepted");
        let s = h.session();
        let notice: Arc<[u8]> = vec![1u8; 100].into();
        assert_eq!(s.offer_event("front", &notice), session::Offered::NotWanted, "not subscribed");
        s.events = Some(session::EventSub::new(vec!["front".into()]));
        assert_eq!(s.offer_event("back", &notice), session::Offered::NotWanted, "another camera");
        // Not connected: nothing leaves, so the queue fills.
        for _ in 0..limits::WEBRTC_EVENT_QUEUE_MESSAGES {
            assert_eq!(s.offer_event("front", &notice), session::Offered::Queued);
        }
        assert_eq!(s.events_waiting(), limits::WEBRTC_EVENT_QUEUE_MESSAGES);
        assert!(!s.cut_off_pending());
        assert_eq!(s.offer_event("front", &notice), session::Offered::CutOff);
        assert!(s.events.is_none(), "unsubscribed");
        assert!(s.cut_off_pending(), "the browser is owed a notice, sent once the channel takes it");
        // By bytes: two notices of more than half the byte ceiling.
        s.events = Some(session::EventSub::new(Vec::new()));
        let big: Arc<[u8]> = vec![2u8; limits::WEBRTC_EVENT_QUEUE_BYTES / 2 + 1].into();
        assert_eq!(s.offer_event("any", &big), session::Offered::Queued);
        assert_eq!(s.offer_event("any", &big), session::Offered::CutOff);
    }

    #[test]
    fn a_flood_of_control_messages_keeps_the_newest_and_counts_the_dropped() {
        let offer = include_str!("../../tests/recorder/chromium-offer.sdp");
        let mut h = fuzzing::Harness::new(offer).expect("the canned offer is accepted");
        let s = h.session();
        for i in 0..limits::WEBRTC_CONTROL_QUEUE_MESSAGES + 3 {
            s.queue_control(vec![i as u8]);
        }
        assert_eq!(s.inbox.len(), limits::WEBRTC_CONTROL_QUEUE_MESSAGES);
        assert_eq!(s.control_dropped, 3);
        assert_eq!(s.inbox.front(), Some(&vec![3u8]), "the oldest went");
    }
}

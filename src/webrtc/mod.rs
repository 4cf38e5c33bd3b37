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

mod session;

use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::net::{IpAddr, SocketAddr};
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

pub use session::{OfferError, Owner};
use session::{Session, Viewer};

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
    /// Sessions that never connected within [`limits::WEBRTC_CONNECT_TIMEOUT_MS`].
    pub connect_timeouts: AtomicU64,
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
    pub stats: Arc<WebrtcStats>,
    pub max_sessions: usize,
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
        self.tx.send(cmd).await.map_err(|_| OpenError::Stopped)?;
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

    /// Closes every session opened with a login session (at logout).
    pub fn close_login(&self, login: [u8; 32]) {
        let _ = self.tx.try_send(Command::CloseLogin(login));
    }

    /// Closes every session of a principal (a user deleted).
    pub fn close_principal(&self, principal: String) {
        let _ = self.tx.try_send(Command::ClosePrincipal(principal));
    }
}

/// Sessions the whole box may hold, by its RAM class.
pub fn max_sessions(ram_class_bytes: u64) -> usize {
    let gib = (ram_class_bytes >> 30).max(1) as usize;
    (gib * limits::WEBRTC_SESSIONS_PER_GIB).min(limits::WEBRTC_SESSIONS_SERVER_MAX)
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
    watched: HashMap<usize, Watched>,
    sessions: Vec<Session>,
    deadlines: Vec<Instant>,
    cmd_rx: mpsc::Receiver<Command>,
    frames_tx: mpsc::Sender<LiveFrame>,
    frames_rx: mpsc::Receiver<LiveFrame>,
    stats: Arc<WebrtcStats>,
    max_sessions: usize,
    next_id: u64,
}

impl Engine {
    /// Binds the UDP port on each address (a taken port is a clear error at start).
    pub async fn bind(
        port: u16,
        addresses: &[IpAddr],
        streams: Vec<Arc<Fanout>>,
        max_sessions: usize,
    ) -> io::Result<(Engine, WebrtcHandle)> {
        let mut sockets = Vec::new();
        let mut locals = Vec::new();
        for ip in addresses {
            let socket = UdpSocket::bind(SocketAddr::new(*ip, port)).await?;
            locals.push(socket.local_addr()?);
            sockets.push(socket);
        }
        let (tx, cmd_rx) = mpsc::channel(limits::WEBRTC_COMMANDS_MAX);
        let (frames_tx, frames_rx) = mpsc::channel(limits::LIVE_TAP_FRAMES);
        let stats = Arc::new(WebrtcStats::default());
        let handle = WebrtcHandle { tx, stats: stats.clone(), max_sessions };
        let engine = Engine {
            sockets,
            locals,
            streams,
            watched: HashMap::new(),
            sessions: Vec::new(),
            deadlines: Vec::new(),
            cmd_rx,
            frames_tx,
            frames_rx,
            stats,
            max_sessions,
            next_id: 1,
        };
        Ok((engine, handle))
    }

    /// The local addresses (one per socket), for logs and tests.
    pub fn locals(&self) -> &[SocketAddr] {
        &self.locals
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
                Step::Timeout => self.timeouts(),
            }
            self.sweep();
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
        if of_principal >= limits::WEBRTC_SESSIONS_PER_PRINCIPAL_MAX {
            self.stats.refused_principal.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Principal(owner.principal, limits::WEBRTC_SESSIONS_PER_PRINCIPAL_MAX));
        }
        if self.sessions.iter().filter(|s| s.peer == peer).count() >= limits::WEBRTC_SESSIONS_PER_ADDRESS_MAX {
            self.stats.refused_address.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Address(limits::WEBRTC_SESSIONS_PER_ADDRESS_MAX));
        }
        if self.sessions.len() >= self.max_sessions {
            self.stats.refused_server.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Server(self.max_sessions));
        }
        let params = fanout.params().ok_or(OpenError::NotLive)?;
        let id = self.next_id;
        let now = Instant::now();
        let accepted = Session::accept(Viewer { id, owner, peer, stream }, &params, offer, &self.locals, now);
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
                self.drive(i);
            }
        }
    }

    /// Drains session `i`'s output to the sockets; answers its keyframe wants.
    fn drive(&mut self, i: usize) {
        if self.drive_quiet(i).keyframe {
            self.keyframe_burst(i);
        }
    }

    /// Sends session `i` the stream's held GOP (if any), squeezed.
    fn keyframe_burst(&mut self, i: usize) {
        let stream = self.sessions[i].stream;
        let gop = self.streams[stream].gop();
        if gop.is_empty() {
            return; // the next keyframe will do
        }
        self.stats.keyframe_bursts.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        for f in &gop {
            let Some(data) = self.annexb(stream, f) else { return };
            if self.sessions[i].send_frame(&data, f.is_key, f.pts_90k, true, now).is_err() {
                self.sessions[i].lost_frames();
                return;
            }
            self.sessions[i].last_sent_mono_us = f.received_mono_us;
        }
        // Wants raised while sending the burst are answered by the burst itself.
        let _ = self.drive_quiet(i);
    }

    /// Drains session `i`'s output to the sockets; returns what it wants.
    fn drive_quiet(&mut self, i: usize) -> session::Wants {
        let (sockets, locals, stats) = (&self.sockets, &self.locals, &self.stats);
        let mut send = |t: Transmit| {
            let socket = locals.iter().position(|l| *l == t.source).unwrap_or(0);
            if sockets[socket].try_send_to(&t.contents, t.destination).is_err() {
                stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        };
        let (next, wants) = self.sessions[i].drive(&mut send);
        self.deadlines[i] = next.unwrap_or_else(Instant::now);
        wants
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
        let viewers: Vec<usize> = (0..self.sessions.len()).filter(|&i| self.sessions[i].stream == stream).collect();
        if lf.after_gap {
            for &i in &viewers {
                self.sessions[i].lost_frames();
                self.sessions[i].rebase();
            }
        }
        let wanted = viewers.iter().any(|&i| {
            let s = &self.sessions[i];
            s.is_connected()
                && (lf.frame.is_key || !s.needs_keyframe())
                && lf.frame.received_mono_us > s.last_sent_mono_us
        });
        if !wanted {
            return;
        }
        let Some(data) = self.annexb(stream, &lf.frame) else { return };
        for i in viewers {
            let s = &mut self.sessions[i];
            if lf.frame.received_mono_us <= s.last_sent_mono_us {
                continue; // already sent in a keyframe burst
            }
            match s.send_frame(&data, lf.frame.is_key, lf.frame.pts_90k, false, now) {
                Ok(true) => {
                    s.last_sent_mono_us = lf.frame.received_mono_us;
                    self.stats.frames_sent.fetch_add(1, Ordering::Relaxed);
                }
                Ok(false) => {}
                Err(_) => s.lost_frames(),
            }
            self.drive(i);
        }
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
        let in_use: Vec<usize> = self.sessions.iter().map(|s| s.stream).collect();
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
    Timeout,
}

//! The engine's shell: every socket, the box's addresses followed as they change, the clock,
//! and the one task that feeds the [`Core`] its inputs (commands from the HTTP side,
//! datagrams, live frames, event notices, ticks) and sends what it hands back.
//!
//! All sessions share one UDP port, bound on each host address (at most
//! [`limits::WEBRTC_HOST_ADDRESSES_MAX`]); a datagram leaves from the socket of the local
//! address its session was offered.

use std::future::poll_fn;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use str0m::net::{Protocol, Receive, Transmit};
use tokio::io::ReadBuf;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::core::{Core, Streams};
use super::{Command, WebrtcHandle, WebrtcStats};
use crate::base::StreamKey;
use crate::events::Notice;
use crate::limits;
use crate::live::Live;

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

/// The bound sockets, each with its local address.
struct Sockets {
    sockets: Vec<UdpSocket>,
    locals: Vec<SocketAddr>,
}

impl Sockets {
    /// Sends one datagram from the socket of its source address; one whose socket went to a
    /// newer address (the box no longer has the old one) is not sent, and counted.
    fn send(&self, t: &Transmit, stats: &WebrtcStats) {
        let sent = self
            .locals
            .iter()
            .position(|l| *l == t.source)
            .is_some_and(|k| self.sockets[k].try_send_to(&t.contents, t.destination).is_ok());
        if !sent {
            stats.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The local addresses to offer a session now: the box's current ones, each bound (a new
/// one gets a socket, or the socket of an address the box no longer has).
fn current_locals(net: &mut Sockets, addresses: Option<&Addresses>, port: u16) -> Vec<SocketAddr> {
    let Some(current) = addresses.map(|f| f()) else { return net.locals.clone() };
    for ip in &current {
        if net.locals.iter().any(|l| l.ip() == *ip) {
            continue;
        }
        let slot = if net.sockets.len() < limits::WEBRTC_HOST_ADDRESSES_MAX {
            None
        } else if let Some(i) = net.locals.iter().position(|l| !current.contains(&l.ip())) {
            Some(i)
        } else {
            debug!(address = %ip, max = limits::WEBRTC_HOST_ADDRESSES_MAX, "live view: no socket left for a new address");
            continue;
        };
        let (local, socket) = match listen(SocketAddr::new(*ip, port)) {
            Ok(bound) => bound,
            Err(e) => {
                warn!(address = %ip, error = %e, "live view: cannot listen on a new address");
                continue;
            }
        };
        info!(address = %local, "live view listening on a new address");
        match slot {
            None => {
                net.sockets.push(socket);
                net.locals.push(local);
            }
            Some(i) => {
                net.sockets[i] = socket;
                net.locals[i] = local;
            }
        }
    }
    let offered: Vec<SocketAddr> = net.locals.iter().filter(|l| current.contains(&l.ip())).copied().collect();
    // No address right now (the network is down): offer what is bound rather than none.
    if offered.is_empty() { net.locals.clone() } else { offered }
}

/// Where the box's current addresses come from.
type Addresses = dyn Fn() -> Vec<IpAddr> + Send;

/// The engine: the sockets and the core, run by one task.
pub struct Engine {
    net: Sockets,
    pub(super) core: Core,
    pub(super) cmd_rx: mpsc::Receiver<Command>,
    events_rx: mpsc::Receiver<Notice>,
    frames_rx: mpsc::Receiver<Live>,
    stats: Arc<WebrtcStats>,
    /// Where the box's current addresses come from, when they are followed (the daemon);
    /// `None`: the addresses bound at the start are all there is.
    addresses: Option<Box<Addresses>>,
    /// The port new addresses are bound on: the first socket's.
    port: u16,
}

/// What woke the engine.
enum Step {
    Command(Command),
    Input(Input),
}

/// What the core is handed.
enum Input {
    /// (socket, length in the buffer, sender).
    Datagram(io::Result<(usize, usize, SocketAddr)>),
    Frame(Live),
    Event(Notice),
    Timeout,
}

impl Engine {
    /// Binds the UDP port on each address (a taken port is a clear error at start).
    pub async fn bind(
        port: u16,
        addresses: &[IpAddr],
        streams: Streams,
        max_sessions: usize,
    ) -> io::Result<(Engine, WebrtcHandle)> {
        let mut net = Sockets { sockets: Vec::new(), locals: Vec::new() };
        let mut first_error = None;
        // One address that cannot be bound is skipped (said, and tried again when a session
        // opens); none bound is the port's problem, and an error.
        for ip in addresses.iter().take(limits::WEBRTC_HOST_ADDRESSES_MAX) {
            match listen(SocketAddr::new(*ip, port)) {
                Ok((local, socket)) => {
                    net.locals.push(local);
                    net.sockets.push(socket);
                }
                Err(e) => {
                    warn!(address = %ip, port, error = %e, "live view: cannot listen on an address");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let (true, Some(e)) = (net.sockets.is_empty(), first_error) {
            return Err(e);
        }
        let port = net.locals.first().map_or(port, |l| l.port());
        let (tx, cmd_rx) = mpsc::channel(limits::WEBRTC_COMMANDS_MAX);
        let (events_tx, events_rx) = mpsc::channel(limits::WEBRTC_EVENTS_IN_MAX);
        let (frames_tx, frames_rx) = mpsc::channel(limits::LIVE_TAP_FRAMES);
        let stats = Arc::new(WebrtcStats::default());
        let core = Core::new(streams, frames_tx, stats.clone(), max_sessions);
        let handle = WebrtcHandle { tx, events_tx, stats: stats.clone(), max_sessions, send_pool: core.send_pool() };
        let engine = Engine { net, core, cmd_rx, events_rx, frames_rx, stats, addresses: None, port };
        Ok((engine, handle))
    }

    /// Follows the box's addresses: each session is offered the addresses `current` gives
    /// when it opens, and one not bound yet is bound then (see
    /// [`limits::WEBRTC_HOST_ADDRESSES_MAX`]).
    pub fn follow_addresses(mut self, current: impl Fn() -> Vec<IpAddr> + Send + 'static) -> Self {
        self.addresses = Some(Box::new(current));
        self
    }

    /// Runs until `shutdown` turns true or every handle is gone.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        info!(addresses = ?self.net.locals, "live view (WebRTC) listening");
        let mut buf = vec![0u8; limits::WEBRTC_DATAGRAM_MAX_BYTES];
        loop {
            let next = self.core.next_deadline();
            let sleep_until = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
            // A command (a session opened or closed, a logout) goes before whatever else is
            // waiting: commands are few, and someone waits on each.
            let waiting = self.cmd_rx.try_recv().ok();
            let event = if let Some(c) = waiting {
                Step::Command(c)
            } else {
                let sockets = &self.net.sockets;
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
                    r = received => Step::Input(Input::Datagram(r)),
                    Some(e) = self.events_rx.recv() => Step::Input(Input::Event(e)),
                    Some(f) = self.frames_rx.recv() => Step::Input(Input::Frame(f)),
                    _ = tokio::time::sleep_until(sleep_until.into()) => Step::Input(Input::Timeout),
                    _ = shutdown.changed() => break,
                }
            };
            let now = Instant::now();
            match event {
                Step::Command(c) => self.command(c, now),
                Step::Input(input) => self.input(input, &buf, now),
            }
            self.core.sweep(now);
            let ended = self.core.take_ended();
            if !ended.is_empty() {
                // Freed on the blocking pool: the engine goes on with the others at once.
                tokio::task::spawn_blocking(move || drop(ended));
            }
            // Share the runtime fairly (ingest, the web face, signals) however busy it is.
            tokio::task::consume_budget().await;
        }
        self.core.close_all();
        info!("live view stopped");
    }

    /// Hands the core what arrived (a datagram's bytes are in `buf`) and sends what it gives
    /// back.
    fn input(&mut self, input: Input, buf: &[u8], now: Instant) {
        let Engine { net, core, stats, .. } = self;
        let mut out = |t: Transmit| net.send(&t, stats);
        match input {
            Input::Datagram(Ok((i, n, from))) => {
                stats.datagrams_in.fetch_add(1, Ordering::Relaxed);
                match Receive::new(Protocol::Udp, from, net.locals[i], &buf[..n]) {
                    Ok(receive) => core.datagram(receive, now, &mut out),
                    Err(_) => {
                        stats.datagrams_bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Input::Datagram(Err(e)) => debug!("webrtc receive: {e}"),
            Input::Frame(Live::Video(f)) => {
                // Timed only when sent, as the benchmark compares frames that reached viewers.
                if core.frame(f, now, &mut out) {
                    stats.record_frame(now.elapsed());
                }
            }
            Input::Frame(Live::Audio(a)) => {
                // Timed per sound frame that reached a viewer (held ones go with a later one).
                let sent = core.audio(a, now, &mut out);
                if sent > 0 {
                    stats.record_audio(now.elapsed() / sent as u32);
                }
            }
            Input::Event(e) => core.event(&e, now, &mut out),
            Input::Timeout => core.timeouts(now, &mut out),
        }
    }

    /// Carries out a command from the HTTP side.
    fn command(&mut self, c: Command, now: Instant) {
        match c {
            Command::Open { stream, offer, owner, peer, reply } => {
                let r = self.open(stream, &offer, owner, peer, now);
                if r.is_err() {
                    debug!("live session refused: {:?}", r.as_ref().err());
                }
                let _ = reply.send(r);
            }
            Command::Close { id, principal, reply } => {
                let _ = reply.send(self.core.close(id, principal.as_deref()));
            }
            Command::CloseLogin(login) => self.core.close_login(login),
            Command::ClosePrincipal(p) => self.core.close_principal(&p),
        }
    }

    /// Opens a session answered with the box's current addresses.
    pub(super) fn open(
        &mut self,
        stream: StreamKey,
        offer: &str,
        owner: super::Owner,
        peer: IpAddr,
        now: Instant,
    ) -> Result<(u64, String), super::OpenError> {
        let Engine { core, net, addresses, port, .. } = self;
        core.open(stream, offer, owner, peer, || current_locals(net, addresses.as_deref(), *port), now)
    }

    /// Sockets bound now.
    #[cfg(test)]
    pub(super) fn locals(&self) -> &[SocketAddr] {
        &self.net.locals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webrtc::testing::{self, offer, owner};

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
        let (e, _handle) = testing::engine(dir.path(), 64).await;
        let now = Arc::new(std::sync::Mutex::new(vec![IpAddr::from([127, 0, 0, 1])]));
        let mut e = {
            let now = now.clone();
            e.follow_addresses(move || now.lock().unwrap().clone())
        };
        let peer = IpAddr::from([127, 0, 0, 1]);
        let open = |e: &mut Engine, who: &str| {
            candidates(&e.open(testing::key(), &offer(1), owner(who), peer, Instant::now()).unwrap().1)
        };
        assert_eq!(open(&mut e, "user:a"), ["127.0.0.1"]);
        // A lease arrives: the next session is offered the new address too, bound on the
        // same port.
        let loopback = |k: u8| IpAddr::from([127, 0, 0, k]);
        now.lock().unwrap().push(loopback(2));
        assert_eq!(open(&mut e, "user:b"), ["127.0.0.1", "127.0.0.2"]);
        assert_eq!(e.locals()[1].port(), e.locals()[0].port());
        // Up to the ceiling of sockets; past it, a new address takes the socket of one the
        // box no longer has.
        let max = limits::WEBRTC_HOST_ADDRESSES_MAX as u8;
        *now.lock().unwrap() = (1..=max + 1).map(loopback).collect();
        assert_eq!(open(&mut e, "user:c").len(), limits::WEBRTC_HOST_ADDRESSES_MAX, "the ninth is not bound");
        assert_eq!(e.net.sockets.len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
        *now.lock().unwrap() = (2..=max + 1).map(loopback).collect();
        let offered = open(&mut e, "user:d");
        assert_eq!(offered.len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
        assert!(!offered.contains(&"127.0.0.1".to_string()) && offered.contains(&format!("127.0.0.{}", max + 1)));
        assert_eq!(e.net.sockets.len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
        // The network is down: what is bound is offered rather than nothing.
        now.lock().unwrap().clear();
        assert_eq!(open(&mut e, "user:e").len(), limits::WEBRTC_HOST_ADDRESSES_MAX);
    }
}

//! The camera port's DHCP server on its interface: a UDP socket on port 67 bound to that
//! device alone (`SO_BINDTODEVICE`), so it never hears or answers the LAN; answers go where
//! RFC 2131 4.1 says ([`dhcp::Destination`]): by UDP to a client's address or to everyone,
//! or, to a client without an address yet, in an Ethernet frame of the box's own on a packet
//! socket. Before an address is offered to a client that never had it, an ARP probe asks
//! whether someone holds it already (a camera set up by hand); one that answers makes the
//! address held back ([`Table::conflict`]) and the client is offered another. Acknowledged
//! leases are kept in the catalog when they change.
//!
//! The packet sockets are made with `libc`: no crate here opens an `AF_PACKET` socket on one
//! interface for a frame or two, and `smoltcp::wire` writes and reads what goes through them.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr, DhcpMessageType, EthernetAddress};
use tokio::io::unix::AsyncFd;
use tokio::sync::{Semaphore, broadcast, watch};
use tracing::{debug, info, warn};

use super::dhcp::{self, Destination, Message};
use super::leases::{Counts, Decision, Lease, Rate, Table};
use super::port::Ending;
use crate::catalog::Catalog;
use crate::clock::SharedClocks;
use crate::limits;

/// The camera port as the server needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub interface: String,
    /// The box's address there, the subnet's mask, router and DNS or not.
    pub server: dhcp::Server,
    /// First and last address given, inclusive.
    pub pool: (Ipv4Addr, Ipv4Addr),
    pub lease_s: u32,
}

/// What the server did, for the UI and `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DhcpStatus {
    pub counts: Counts,
    /// Messages that did not read as a client's DHCP message.
    pub malformed: u64,
    /// Packets over a client's rate.
    pub rate_dropped: u64,
    /// Addresses an ARP probe found in use.
    pub conflicts: u64,
    /// The most ARP probes that ran at once (at most [`limits::CAMPORT_PROBES_MAX`]).
    pub probes_peak: u64,
    /// The most ACKs one durable write of the leases let go (at most
    /// [`limits::CAMPORT_ACKS_WAITING_MAX`]).
    pub acks_batch_peak: u64,
    pub leases: Vec<Lease>,
}

/// The acknowledged leases as the catalog holds them, and the wall clock less the monotonic
/// one (µs) on whose timeline their ends are written: a reader that finds the clocks apart by
/// another amount since (the wall clock stepped) moves the ends by the difference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bound {
    pub leases: Vec<Lease>,
    pub offset_us: i64,
}

impl Bound {
    /// The leases that hold at `wall_us` and `mono_us`.
    pub fn live(&self, wall_us: i64, mono_us: i64) -> Vec<Lease> {
        let by = wall_us.saturating_sub(mono_us).saturating_sub(self.offset_us);
        self.leases.iter().filter(|l| l.until_us.saturating_add(by) > wall_us).cloned().collect()
    }
}

/// The DHCP server of one camera port.
pub struct DhcpServer {
    port: Port,
    ifindex: i32,
    mac: [u8; 6],
    table: Mutex<Table>,
    rate: Mutex<Rate>,
    catalog: Arc<Catalog>,
    clocks: SharedClocks,
    probes: Arc<Semaphore>,
    malformed: AtomicU64,
    conflicts: AtomicU64,
    /// Probes running, and the most that ran at once.
    probing: AtomicU64,
    probes_peak: AtomicU64,
    /// ACKs waiting for their lease's durable write.
    acks: Acks,
    /// The acknowledged leases as the catalog holds them, after each write (the finder of
    /// plugged-in cameras follows it).
    bound: watch::Sender<Bound>,
}

impl DhcpServer {
    /// A server for `port` with the leases the catalog keeps. The interface must exist.
    pub fn new(port: Port, catalog: Arc<Catalog>, clocks: SharedClocks) -> Result<Arc<DhcpServer>, String> {
        let ifindex = ifindex(&port.interface)?;
        let mac = interface_mac(&port.interface)?;
        let stored = catalog.camport_leases().map_err(|e| format!("the camera port's leases: {e}"))?;
        let table = Table::new(port.server.ip, port.pool, port.lease_s, stored, clocks.wall_us(), clocks.mono_us());
        // As read (ends past a lease from now cut); written as they are the next time a
        // lease changes.
        let bound = Bound { leases: table.leases().to_vec(), offset_us: table.offset_us };
        Ok(Arc::new(DhcpServer {
            port,
            ifindex,
            mac,
            table: Mutex::new(table),
            rate: Mutex::new(Rate::default()),
            catalog,
            clocks,
            probes: Arc::new(Semaphore::new(limits::CAMPORT_PROBES_MAX)),
            malformed: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            probing: AtomicU64::new(0),
            probes_peak: AtomicU64::new(0),
            bound: watch::Sender::new(bound),
            acks: Acks::default(),
        }))
    }

    /// The bound leases as the catalog holds them, changed after each write.
    pub fn bound(&self) -> watch::Receiver<Bound> {
        self.bound.subscribe()
    }

    /// Follows a step of the wall clock ([`Table::follow_clock`]); whether the leases moved
    /// (the writer keeps them).
    fn follow_clock(&self) -> bool {
        let (wall_us, mono_us) = (self.clocks.wall_us(), self.clocks.mono_us());
        let moved = self.table.lock().expect("lock").follow_clock(wall_us, mono_us);
        if moved {
            info!("camera port: the wall clock stepped; the leases' ends move with it");
        }
        moved
    }

    pub fn status(&self) -> DhcpStatus {
        let table = self.table.lock().expect("lock");
        DhcpStatus {
            counts: table.counts,
            malformed: self.malformed.load(Ordering::Relaxed),
            rate_dropped: self.rate.lock().expect("lock").dropped,
            conflicts: self.conflicts.load(Ordering::Relaxed),
            probes_peak: self.probes_peak.load(Ordering::Relaxed),
            acks_batch_peak: self.acks.peak.load(Ordering::Relaxed),
            leases: table.leases().iter().filter(|l| l.bound).cloned().collect(),
        }
    }

    /// Serves until `shutdown`: an error when its socket cannot be made, or when its
    /// interface goes away or is made again (a USB adapter unplugged: its sockets would hear
    /// nothing more), so the port is set up again.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) -> Result<(), String> {
        let udp = Arc::new(
            udp_on(&self.port.interface, smoltcp::wire::DHCP_SERVER_PORT)
                .map_err(|e| format!("DHCP on {}: {e}", self.port.interface))?,
        );
        let frames = Arc::new(
            Packet::open(self.ifindex, libc::SOCK_RAW, 0)
                .map_err(|e| format!("frames on {}: {e}", self.port.interface))?,
        );
        let arp = Arc::new(Arp::open(self.ifindex).map_err(|e| format!("ARP on {}: {e}", self.port.interface))?);
        // The tasks below end with this one, even when it is ended from outside (a stop that
        // took too long): no writer or socket of an old server is left behind.
        let hearing = Ending(tokio::spawn(arp.clone().hear()));
        info!(interface = self.port.interface, "camera port: DHCP served");
        let mut writer = Ending(tokio::spawn(self.clone().write_leases(udp.clone(), frames.clone())));
        let mut offers = tokio::task::JoinSet::new();
        // One byte more than a message may have: a datagram that fills it is over the ceiling.
        let mut buf = vec![0u8; limits::CAMPORT_DHCP_MESSAGE_MAX_BYTES + 1];
        let mut still_there = tokio::time::interval(Duration::from_millis(limits::CAMPORT_RETRY_MS));
        // "The pool is exhausted" is logged when it starts, not for each request.
        let mut exhausted_said = false;
        let mut ended = Ok(());
        loop {
            let got = tokio::select! {
                got = next_datagram(&udp, &mut buf, &mut shutdown) => got,
                _ = still_there.tick() => {
                    if ifindex(&self.port.interface).ok() != Some(self.ifindex) {
                        ended = Err(format!("{} went away (unplugged, or made again)", self.port.interface));
                        break;
                    }
                    continue;
                }
            };
            let Some((n, _from)) = got else { break };
            while offers.try_join_next().is_some() {}
            if n > limits::CAMPORT_DHCP_MESSAGE_MAX_BYTES {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                debug!(bytes = n, "camera port: a DHCP message over its ceiling dropped");
                continue;
            }
            let m = match dhcp::parse(&buf[..n]) {
                Ok(m) => m,
                Err(e) => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    debug!(error = %e, "camera port: a DHCP message dropped");
                    continue;
                }
            };
            if !self.rate.lock().expect("lock").take(m.mac, self.clocks.mono_us()) {
                continue;
            }
            // An INFORM is answered at the address it names: one of the port's subnet only.
            if m.kind == DhcpMessageType::Inform && !self.port.server.on_subnet(m.ciaddr) {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                debug!(ciaddr = %m.ciaddr, "camera port: an INFORM from outside the subnet dropped");
                continue;
            }
            if self.follow_clock() {
                self.acks.wake.notify_one();
            }
            // An offer waits for its probe on a task of its own, so a DISCOVER does not hold
            // the others; at most CAMPORT_PROBES_MAX run at once, the others wait their turn
            // (as many as offers may wait, CAMPORT_OFFERS_PENDING_MAX, and the bound clients
            // asking again). A client asking again for the offer it holds gets it at once:
            // its address was probed when it was offered.
            let now = self.clocks.wall_us();
            let holds_offer = self
                .table
                .lock()
                .expect("lock")
                .leases()
                .iter()
                .any(|l| !l.bound && l.until_us > now && l.client == m.client.0.as_slice());
            let probe = m.kind == DhcpMessageType::Discover && !holds_offer;
            // A DISCOVER or an INFORM binds nothing: the writer is not woken for it.
            let binds = !matches!(m.kind, DhcpMessageType::Discover | DhcpMessageType::Inform);
            let decision = self.table.lock().expect("lock").decide(&m, now);
            match decision {
                Decision::Silent(why) => {
                    if why == "the pool is exhausted" && !exhausted_said {
                        warn!(client = m.client.shown(), "camera port: the pool is exhausted, no address given");
                        exhausted_said = true;
                    }
                    debug!(why, "camera port: a DHCP message left unanswered");
                }
                Decision::Answer(a) if a.kind == DhcpMessageType::Offer && probe => {
                    exhausted_said = false;
                    let (me, udp, frames, arp) = (self.clone(), udp.clone(), frames.clone(), arp.clone());
                    offers.spawn(async move {
                        let Ok(_permit) = me.probes.clone().acquire_owned().await else { return };
                        let running = me.probing.fetch_add(1, Ordering::Relaxed) + 1;
                        me.probes_peak.fetch_max(running, Ordering::Relaxed);
                        me.offer(m, a, &udp, &frames, &arp).await;
                        me.probing.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                // An ACK goes once its lease is written durably, with the others of its
                // burst (one write for them all): an address acknowledged is not given to
                // another after a power cut.
                Decision::Answer(a) if a.kind == DhcpMessageType::Ack => self.acks.push(a).await,
                Decision::Answer(a) => self.send(&a, &udp, &frames).await,
            }
            // A RELEASE or a DECLINE changes the leases too.
            if binds {
                self.acks.wake.notify_one();
            }
        }
        self.acks.closed.store(true, Ordering::Relaxed);
        self.acks.wake.notify_one();
        let _ = (&mut writer.0).await;
        drop(hearing);
        ended
    }

    /// Writes the leases that changed, then sends the ACKs that waited for the write; again
    /// each time it is woken, until the server stops (the last ACKs written and sent). The
    /// writes do not wait for the disk; a durable commit follows once the leases are quiet for
    /// [`limits::CAMPORT_LEASES_SYNC_IDLE_MS`] (it would hold a burst's next write behind
    /// its flush), and at the latest [`limits::CAMPORT_LEASES_SYNC_MS`] after the first write
    /// not yet on the disk. A power cut in
    /// between loses at most that second's leases: their cameras keep their addresses and
    /// answer the ARP probe made before any address is offered to another.
    async fn write_leases(self: Arc<Self>, udp: Arc<tokio::net::UdpSocket>, frames: Arc<Packet>) {
        // The first write not on the disk yet, and the last write.
        let mut unsynced: Option<(tokio::time::Instant, tokio::time::Instant)> = None;
        loop {
            let sync_due = async {
                match unsynced {
                    Some((first, last)) => {
                        let latest = first + Duration::from_millis(limits::CAMPORT_LEASES_SYNC_MS);
                        let quiet = last + Duration::from_millis(limits::CAMPORT_LEASES_SYNC_IDLE_MS);
                        tokio::time::sleep_until(latest.min(quiet)).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.acks.wake.notified() => {}
                _ = sync_due => {
                    self.sync().await;
                    unsynced = None;
                    continue;
                }
                // A step of the wall clock moves the leases' ends while no client asks too.
                _ = tokio::time::sleep(Duration::from_millis(limits::CAMPORT_FINDER_TICK_MS)) => {
                    if !self.follow_clock() {
                        continue;
                    }
                }
            }
            let closing = self.acks.closed.load(Ordering::Relaxed);
            // Taken before the leases are read: each of these ACKs' leases is in the write.
            let batch = self.acks.take();
            let me = self.clone();
            let wrote = tokio::task::spawn_blocking(move || me.keep()).await.unwrap_or(false);
            if wrote {
                let now = tokio::time::Instant::now();
                unsynced = Some((unsynced.map_or(now, |(first, _)| first), now));
            }
            for a in &batch {
                self.send(a, &udp, &frames).await;
            }
            self.acks.done(batch.len());
            if closing {
                if unsynced.is_some() {
                    self.sync().await;
                }
                return;
            }
        }
    }

    /// A durable commit: the leases written before it are on the disk.
    async fn sync(&self) {
        let catalog = self.catalog.clone();
        match tokio::task::spawn_blocking(move || catalog.set_camport_leases(&[], &[], true)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "camera port: the leases not made durable"),
            Err(e) => warn!(error = %e, "camera port: the leases not made durable"),
        }
    }

    /// Sends offer `a` for `m` once an ARP probe found its address free; when someone holds
    /// it, the address is held back and the client is offered another (one more probe).
    async fn offer(&self, m: Message, mut a: dhcp::Answer, udp: &tokio::net::UdpSocket, frames: &Packet, arp: &Arp) {
        for _ in 0..2 {
            let known =
                self.bound.borrow().leases.iter().any(|l| l.ip == a.yiaddr && l.client == m.client.0.as_slice());
            if known || !self.taken(a.yiaddr, m.mac, arp).await {
                self.send(&a, udp, frames).await;
                return;
            }
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            warn!(ip = %a.yiaddr, "camera port: an address of the pool is in use by someone it was not given to; held back");
            let mut table = self.table.lock().expect("lock");
            let now = self.clocks.wall_us();
            table.conflict(a.yiaddr, now);
            match table.decide(&m, now) {
                Decision::Answer(next) if next.kind == DhcpMessageType::Offer => a = next,
                _ => return,
            }
        }
    }

    async fn send(&self, a: &dhcp::Answer, udp: &tokio::net::UdpSocket, frames: &Packet) {
        let mut payload = [0u8; dhcp::ANSWER_MAX_BYTES];
        let len = dhcp::emit(a, &self.port.server, &mut payload);
        let sent = match a.destination() {
            Destination::Unicast(ip) => {
                udp.send_to(&payload[..len], SocketAddrV4::new(ip, smoltcp::wire::DHCP_CLIENT_PORT)).await
            }
            Destination::Broadcast => {
                udp.send_to(&payload[..len], SocketAddrV4::new(Ipv4Addr::BROADCAST, smoltcp::wire::DHCP_CLIENT_PORT))
                    .await
            }
            Destination::Frame { mac, ip } => {
                let mut frame = [0u8; dhcp::FRAME_MAX_BYTES];
                let n = dhcp::frame(&payload[..len], (self.mac, self.port.server.ip), (mac, ip), &mut frame);
                frames.send_to(&frame[..n], mac, ETH_P_IP)
            }
        };
        if let Err(e) = sent {
            warn!(error = %e, kind = ?a.kind, "camera port: a DHCP answer not sent");
        }
    }

    /// Whether someone other than the client `asking` answers an ARP probe for `ip` (RFC 5227:
    /// from 0.0.0.0) within [`limits::CAMPORT_ARP_PROBE_MS`]. The client itself may still use
    /// the address (its lease lost in a power cut, a DISCOVER while it holds it): that is no
    /// conflict.
    async fn taken(&self, ip: Ipv4Addr, asking: [u8; 6], arp: &Arp) -> bool {
        // Listening before asking: an answer cannot come before the listener.
        let mut said = arp.said.subscribe();
        let probe = ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress(self.mac),
            source_protocol_addr: Ipv4Addr::UNSPECIFIED,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: ip,
        };
        let mut out = [0u8; 28];
        probe.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        if let Err(e) = arp.socket.send_to(&out, [0xff; 6], ETH_P_ARP) {
            warn!(error = %e, "camera port: no ARP probe");
            return false;
        }
        let answered = async {
            loop {
                match said.recv().await {
                    Ok((from_ip, from_mac)) if from_ip == ip && from_mac != self.mac && from_mac != asking => {
                        return true;
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return false,
                }
            }
        };
        tokio::time::timeout(Duration::from_millis(limits::CAMPORT_ARP_PROBE_MS), answered).await.unwrap_or(false)
    }

    /// Writes the acknowledged leases that changed to the catalog (not waiting for the disk);
    /// whether it wrote.
    fn keep(&self) -> bool {
        let (now, offset_us) = {
            let table = self.table.lock().expect("lock");
            (table.leases().iter().filter(|l| l.bound).cloned().collect::<Vec<Lease>>(), table.offset_us)
        };
        let stored = self.bound.borrow();
        let put: Vec<Lease> = now.iter().filter(|l| !stored.leases.contains(l)).cloned().collect();
        let gone: Vec<Vec<u8>> = stored
            .leases
            .iter()
            .filter(|s| !now.iter().any(|l| l.client == s.client))
            .map(|s| s.client.clone())
            .collect();
        drop(stored);
        if put.is_empty() && gone.is_empty() {
            return false;
        }
        match self.catalog.set_camport_leases(&put, &gone, false) {
            Ok(()) => {
                self.bound.send_replace(Bound { leases: now, offset_us });
                true
            }
            // The ACKs still go: a camera without an address is worse than a lease the next
            // start may not know (its ARP probe finds the address taken).
            Err(e) => {
                warn!(error = %e, "camera port: leases not kept");
                false
            }
        }
    }
}

/// ACKs waiting for their lease's durable write: at most [`limits::CAMPORT_ACKS_WAITING_MAX`];
/// past it, the server reads no further message until a write lets some go.
struct Acks {
    queue: Mutex<Vec<dhcp::Answer>>,
    room: Semaphore,
    /// The writer's call: leases changed, or ACKs wait.
    wake: tokio::sync::Notify,
    /// The server stopped: the writer's last round.
    closed: std::sync::atomic::AtomicBool,
    /// The most ACKs one write let go.
    peak: AtomicU64,
}

impl Default for Acks {
    fn default() -> Acks {
        Acks {
            queue: Mutex::new(Vec::new()),
            room: Semaphore::new(limits::CAMPORT_ACKS_WAITING_MAX),
            wake: tokio::sync::Notify::new(),
            closed: false.into(),
            peak: AtomicU64::new(0),
        }
    }
}

impl Acks {
    /// Queues `a` for the next write, once there is room.
    async fn push(&self, a: dhcp::Answer) {
        if let Ok(permit) = self.room.acquire().await {
            permit.forget();
        }
        self.queue.lock().expect("lock").push(a);
        self.wake.notify_one();
    }

    /// The ACKs waiting, for one write.
    fn take(&self) -> Vec<dhcp::Answer> {
        let batch = std::mem::take(&mut *self.queue.lock().expect("lock"));
        self.peak.fetch_max(batch.len() as u64, Ordering::Relaxed);
        batch
    }

    /// `n` ACKs of a batch sent: their room is free.
    fn done(&self, n: usize) {
        self.room.add_permits(n);
    }
}

/// What the SNTP server did.
#[derive(Debug, Default)]
pub struct SntpCounts {
    pub answered: AtomicU64,
    /// Datagrams that were not a client's request.
    pub refused: AtomicU64,
    /// Requests over their client's rate ([`limits::CAMPORT_SNTP_REQUESTS_PER_S`]).
    pub rate_dropped: AtomicU64,
}

/// Serves SNTP on `interface` (UDP 123, bound to that device alone) until `shutdown`: each
/// client's request answered with the box's clock (`sntp::answer`), "not synchronized" while
/// the clock is not sane. An error only when its socket cannot be made.
pub async fn serve_sntp(
    interface: String,
    clocks: SharedClocks,
    counts: Arc<SntpCounts>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let udp = udp_on(&interface, 123).map_err(|e| format!("SNTP on {interface}: {e}"))?;
    info!(interface, "camera port: SNTP served");
    // One byte more than a request may have: a datagram that fills it is over the ceiling.
    let mut buf = vec![0u8; limits::CAMPORT_SNTP_MESSAGE_MAX_BYTES + 1];
    let mut rate = Rate::<std::net::IpAddr>::new(limits::CAMPORT_SNTP_REQUESTS_PER_S);
    while let Some((n, from)) = next_datagram(&udp, &mut buf, &mut shutdown).await {
        let received_us = clocks.wall_us();
        if !rate.take(from.ip(), clocks.mono_us()) {
            counts.rate_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let request = match super::sntp::parse(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                debug!(error = %e, "camera port: an SNTP datagram dropped");
                continue;
            }
        };
        let sent_us = clocks.wall_us();
        let answer = super::sntp::answer(&request, received_us, sent_us, crate::clock::is_sane(sent_us));
        match udp.send_to(&answer, from).await {
            Ok(_) => {
                counts.answered.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => warn!(error = %e, "camera port: an SNTP answer not sent"),
        }
    }
    Ok(())
}

/// The next datagram on `udp` into `buf` (its length and sender), or none once `shutdown`
/// changes; a failed receive is logged and waited out a moment.
async fn next_datagram(
    udp: &tokio::net::UdpSocket,
    buf: &mut [u8],
    shutdown: &mut watch::Receiver<bool>,
) -> Option<(usize, std::net::SocketAddr)> {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return None,
            got = udp.recv_from(buf) => match got {
                Ok(got) => return Some(got),
                Err(e) => {
                    warn!(error = %e, "camera port: a receive failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_ARP: u16 = 0x0806;

/// A UDP socket on `port` that hears and speaks on `interface` only.
fn udp_on(interface: &str, port: u16) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    s.bind_device(Some(interface.as_bytes()))?;
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())?;
    s.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(s.into())
}

fn ifindex(interface: &str) -> Result<i32, String> {
    let name = std::ffi::CString::new(interface).map_err(|_| format!("no interface {interface:?}"))?;
    // SAFETY: a NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 { Err(format!("no interface {interface:?}")) } else { Ok(i as i32) }
}

/// `interface`'s MAC, as sysfs gives it.
fn interface_mac(interface: &str) -> Result<[u8; 6], String> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{interface}/address"))
        .map_err(|e| format!("{interface}'s MAC: {e}"))?;
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for b in &mut mac {
        *b = parts
            .next()
            .and_then(|p| u8::from_str_radix(p, 16).ok())
            .ok_or_else(|| format!("{interface}'s MAC: {text:?}"))?;
    }
    Ok(mac)
}

/// The port's one ARP socket, and who said they hold which address, for the probes waiting.
/// One socket for every probe: opening and closing an `AF_PACKET` socket waits for the
/// kernel's RCU grace period (tens of ms), which a socket per probe paid on the server's
/// thread, holding every other message.
struct Arp {
    socket: Packet,
    said: broadcast::Sender<(Ipv4Addr, [u8; 6])>,
}

/// What the ARP socket heard, for the probes: at most [`limits::CAMPORT_ARP_HEARD_MAX`]
/// waiting for a slow probe; past it the probe lags, skips the oldest and reads on.
fn heard() -> broadcast::Sender<(Ipv4Addr, [u8; 6])> {
    broadcast::channel(limits::CAMPORT_ARP_HEARD_MAX).0
}

impl Arp {
    fn open(ifindex: i32) -> std::io::Result<Arp> {
        let socket = Packet::open(ifindex, libc::SOCK_DGRAM, ETH_P_ARP)?;
        Ok(Arp { socket, said: heard() })
    }

    /// Reads the ARP packets on the port and tells the probes who said what, until aborted.
    async fn hear(self: Arc<Self>) {
        let mut buf = [0u8; 64];
        loop {
            let n = match self.socket.recv(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    warn!(error = %e, "camera port: an ARP receive failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let said = ArpPacket::new_checked(&buf[..n]).ok().and_then(|p| ArpRepr::parse(&p).ok());
            if let Some(ArpRepr::EthernetIpv4 { source_protocol_addr, source_hardware_addr, .. }) = said {
                // No probe waiting is no one to tell.
                let _ = self.said.send((source_protocol_addr, source_hardware_addr.0));
            }
        }
    }
}

/// An `AF_PACKET` socket on one interface.
struct Packet {
    fd: AsyncFd<OwnedFd>,
    ifindex: i32,
}

impl Packet {
    /// `kind` is `SOCK_RAW` (frames with their Ethernet header) or `SOCK_DGRAM` (payloads);
    /// `protocol` the EtherType heard (0: none).
    fn open(ifindex: i32, kind: libc::c_int, protocol: u16) -> std::io::Result<Packet> {
        // SAFETY: plain socket(2) and bind(2) calls with a sockaddr_ll of the right size; the
        // descriptor is owned from here on, and registered with tokio while it is open.
        unsafe {
            let fd = libc::socket(
                libc::AF_PACKET,
                kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                i32::from(protocol.to_be()),
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(fd);
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = protocol.to_be();
            sll.sll_ifindex = ifindex;
            let r = libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            );
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Packet { fd: AsyncFd::register(fd)?, ifindex })
        }
    }

    fn send_to(&self, buf: &[u8], mac: [u8; 6], protocol: u16) -> std::io::Result<usize> {
        // SAFETY: a sockaddr_ll of the right size, a buffer of its length.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = protocol.to_be();
            sll.sll_ifindex = self.ifindex;
            sll.sll_halen = 6;
            sll.sll_addr[..6].copy_from_slice(&mac);
            let r = libc::sendto(
                self.fd.get_ref().as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&raw const sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            );
            if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(r as usize) }
        }
    }

    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            // SAFETY: a buffer of its length.
            let r = unsafe { libc::recv(self.fd.get_ref().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            ready.clear_ready();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(n: u8) -> dhcp::Answer {
        dhcp::Answer {
            kind: DhcpMessageType::Ack,
            xid: u32::from(n),
            mac: [2, 0, 0, 0, 0, n],
            client: None,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::new(10, 71, 0, n),
            broadcast: false,
            lease_s: Some(60),
        }
    }

    /// A probe that fell CAMPORT_ARP_HEARD_MAX packets behind skips the oldest and still
    /// hears the answer that came after them.
    #[tokio::test]
    async fn a_probe_behind_the_arp_ceiling_reads_on() {
        let said = heard();
        let mut probe = said.subscribe();
        for n in 0..=limits::CAMPORT_ARP_HEARD_MAX {
            said.send((Ipv4Addr::new(10, 0, 0, n as u8), [2; 6])).unwrap();
        }
        assert!(matches!(probe.recv().await, Err(broadcast::error::RecvError::Lagged(1))));
        let mut last = None;
        while let Ok(got) = probe.try_recv() {
            last = Some(got);
        }
        assert_eq!(last, Some((Ipv4Addr::new(10, 0, 0, limits::CAMPORT_ARP_HEARD_MAX as u8), [2; 6])));
    }

    /// CAMPORT_ACKS_WAITING_MAX ACKs wait; the next waits for room, which a write makes.
    #[tokio::test]
    async fn acks_past_the_ceiling_wait_for_a_write() {
        let acks = Acks::default();
        for n in 0..limits::CAMPORT_ACKS_WAITING_MAX {
            acks.push(ack(n as u8)).await;
        }
        let next = tokio::time::timeout(Duration::from_millis(50), acks.push(ack(255))).await;
        assert!(next.is_err(), "no room past the ceiling");
        let batch = acks.take();
        assert_eq!(batch.len(), limits::CAMPORT_ACKS_WAITING_MAX);
        assert_eq!(acks.peak.load(Ordering::Relaxed), limits::CAMPORT_ACKS_WAITING_MAX as u64);
        acks.done(batch.len());
        tokio::time::timeout(Duration::from_millis(50), acks.push(ack(255))).await.expect("room after the write");
        assert_eq!(acks.take().len(), 1);
    }
}

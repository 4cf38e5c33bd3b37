//! Cameras plugged into the camera port: a new lease is a new camera. The box asks the
//! address over ONVIF (a WS-Discovery Probe sent to it alone: its name, model and device
//! service) and over RTSP (an OPTIONS on port 554), again a few times while the camera's
//! services start after its address, and shows what answered in Settings → Cameras, ready
//! to add with the camera's password. A lease that ends (released, or not renewed) marks the
//! camera unplugged; it is kept, shown as such, until the room is needed.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};
use tracing::info;

use super::leases::Lease;
use super::serve::Bound;
use crate::clock::SharedClocks;
use crate::limits;
use crate::onvif::discovery::Found;

/// A camera that took a lease on the port.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Plugged {
    /// Its MAC, `aa:bb:cc:dd:ee:ff`: one camera, whatever address it has.
    pub mac: String,
    pub address: Ipv4Addr,
    /// What it calls itself in its DHCP request, if it says.
    pub hostname: Option<String>,
    /// Holds a lease now (else unplugged).
    pub plugged_in: bool,
    /// When it took its lease, or was unplugged (UTC µs).
    pub since_us: i64,
    /// What it said over ONVIF: its name, model and device service.
    pub onvif: Option<Found>,
    /// Its RTSP service at port 554, when it answered there.
    pub rtsp_url: Option<String>,
    /// Still being asked (its services may start after its address).
    pub checking: bool,
}

/// The cameras plugged into the port, at most [`limits::CAMPORT_LEASES_MAX`].
#[derive(Default)]
pub struct Finder {
    cameras: Mutex<Vec<Plugged>>,
    /// Cameras being asked now, and the most at once (at most
    /// [`limits::CAMPORT_CHECKS_MAX`]).
    asking: AtomicUsize,
    pub asking_peak: AtomicUsize,
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl Finder {
    pub fn cameras(&self) -> Vec<Plugged> {
        self.cameras.lock().expect("lock").clone()
    }

    /// Forgets every camera: the port is gone, or moved to another network.
    pub fn clear(&self) {
        self.cameras.lock().expect("lock").clear();
    }

    /// Follows the bound leases `live` at `now_us`: a lease of a MAC not plugged in (or at a
    /// new address) is a camera plugged in, one gone is a camera unplugged. Returns the
    /// cameras to ask.
    fn update(&self, live: &[Lease], now_us: i64) -> Vec<(String, Ipv4Addr)> {
        // One camera per MAC: a MAC with leases under two client ids is the newest of them
        // (else it would flip between the two, asked anew each time).
        let mut newest: Vec<&Lease> = Vec::new();
        for l in live {
            match newest.iter_mut().find(|n| n.mac == l.mac) {
                Some(n) if n.until_us < l.until_us => *n = l,
                Some(_) => {}
                None => newest.push(l),
            }
        }
        let mut cameras = self.cameras.lock().expect("lock");
        let mut ask = Vec::new();
        for l in newest {
            let mac = mac_text(l.mac);
            match cameras.iter_mut().find(|c| c.mac == mac) {
                Some(c) if c.plugged_in && c.address == l.ip => {
                    if c.hostname.is_none() {
                        c.hostname.clone_from(&l.hostname);
                    }
                }
                Some(c) => {
                    info!(mac, ip = %l.ip, "camera port: a camera plugged in again");
                    *c = Plugged { since_us: now_us, ..plugged(l, mac.clone()) };
                    ask.push((mac, l.ip));
                }
                None => {
                    if cameras.len() >= limits::CAMPORT_LEASES_MAX {
                        // The one unplugged longest ago makes room (there is one: the leases
                        // are fewer than the ceiling).
                        let oldest =
                            cameras.iter().enumerate().filter(|(_, c)| !c.plugged_in).min_by_key(|(_, c)| c.since_us);
                        let Some((i, _)) = oldest else { continue };
                        cameras.remove(i);
                    }
                    info!(mac, ip = %l.ip, "camera port: a camera plugged in");
                    cameras.push(Plugged { since_us: now_us, ..plugged(l, mac.clone()) });
                    ask.push((mac, l.ip));
                }
            }
        }
        for c in cameras.iter_mut().filter(|c| c.plugged_in) {
            if !live.iter().any(|l| mac_text(l.mac) == c.mac) {
                info!(mac = c.mac, ip = %c.address, "camera port: a camera unplugged (its lease ended)");
                c.plugged_in = false;
                c.checking = false;
                c.since_us = now_us;
            }
        }
        ask
    }

    /// Writes what asking `mac` at `ip` found, while it is still there; whether to ask again.
    fn found(&self, mac: &str, ip: Ipv4Addr, onvif: Option<Found>, rtsp: bool, last: bool) -> bool {
        let mut cameras = self.cameras.lock().expect("lock");
        let Some(c) = cameras.iter_mut().find(|c| c.mac == mac && c.address == ip && c.plugged_in) else {
            return false;
        };
        if onvif.is_some() {
            c.onvif = onvif;
        }
        if rtsp {
            c.rtsp_url = Some(format!("rtsp://{ip}:554/"));
        }
        let done = c.onvif.is_some() && c.rtsp_url.is_some();
        c.checking = !done && !last;
        c.checking
    }
}

fn plugged(l: &Lease, mac: String) -> Plugged {
    Plugged {
        mac,
        address: l.ip,
        hostname: l.hostname.clone(),
        plugged_in: true,
        since_us: 0,
        onvif: None,
        rtsp_url: None,
        checking: true,
    }
}

/// Follows `bound` (the DHCP server's leases, after each write) until `shutdown`: cameras
/// plugged in are asked, at most [`limits::CAMPORT_CHECKS_MAX`] at once; leases that end
/// while nothing is written (not renewed) are seen at the next tick.
pub async fn follow(
    finder: Arc<Finder>,
    mut bound: watch::Receiver<Bound>,
    clocks: SharedClocks,
    mut shutdown: watch::Receiver<bool>,
) {
    let checks = Arc::new(Semaphore::new(limits::CAMPORT_CHECKS_MAX));
    let mut asking = Asking::default();
    loop {
        let (now, mono) = (clocks.wall_us(), clocks.mono_us());
        let live = bound.borrow_and_update().live(now, mono);
        for (mac, ip) in finder.update(&live, now) {
            asking.start(mac.clone(), ask(finder.clone(), mac, ip, checks.clone()));
        }
        asking.reap();
        tokio::select! {
            _ = shutdown.changed() => break,
            changed = bound.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep(Duration::from_millis(limits::CAMPORT_FINDER_TICK_MS)) => {}
        }
    }
    asking.shutdown().await;
}

/// The cameras being asked: one asking per MAC (a camera plugged in again, or at a new
/// address, ends the asking of before), so their number stays under the cameras kept.
#[derive(Default)]
struct Asking {
    tasks: tokio::task::JoinSet<()>,
    by_mac: std::collections::HashMap<String, tokio::task::AbortHandle>,
}

impl Asking {
    fn start(&mut self, mac: String, asking: impl Future<Output = ()> + Send + 'static) {
        if let Some(before) = self.by_mac.remove(&mac) {
            before.abort();
        }
        let handle = self.tasks.spawn(asking);
        self.by_mac.insert(mac, handle);
    }

    /// Forgets the askings that ended.
    fn reap(&mut self) {
        while self.tasks.try_join_next().is_some() {}
        self.by_mac.retain(|_, h| !h.is_finished());
    }

    async fn shutdown(&mut self) {
        self.tasks.shutdown().await;
    }
}

/// Asks the camera at `ip` over ONVIF and RTSP, up to [`limits::CAMPORT_CHECK_TRIES`] times
/// [`limits::CAMPORT_CHECK_AGAIN_MS`] apart, until both answered or it is gone.
async fn ask(finder: Arc<Finder>, mac: String, ip: Ipv4Addr, checks: Arc<Semaphore>) {
    for n in 1..=limits::CAMPORT_CHECK_TRIES {
        let (onvif, rtsp) = {
            let Ok(_permit) = checks.acquire().await else { return };
            let now = finder.asking.fetch_add(1, Ordering::Relaxed) + 1;
            finder.asking_peak.fetch_max(now, Ordering::Relaxed);
            let answers = tokio::join!(
                crate::onvif::discovery::probe_at(ip, Duration::from_millis(limits::CAMPORT_CHECK_WAIT_MS)),
                rtsp_answers(ip)
            );
            finder.asking.fetch_sub(1, Ordering::Relaxed);
            answers
        };
        let again = finder.found(&mac, ip, onvif.clone(), rtsp, n == limits::CAMPORT_CHECK_TRIES);
        if !again {
            let cameras = finder.cameras();
            if let Some(c) = cameras.iter().find(|c| c.mac == mac) {
                info!(mac, ip = %ip, onvif = c.onvif.is_some(), rtsp = c.rtsp_url.is_some(), model = ?c.onvif.as_ref().and_then(|o| o.hardware.clone()), "camera port: a plugged-in camera asked");
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(limits::CAMPORT_CHECK_AGAIN_MS)).await;
    }
}

/// Whether an RTSP server answers an OPTIONS at `ip`:554 within
/// [`limits::CAMPORT_CHECK_WAIT_MS`] (any status: a camera may want credentials even here).
async fn rtsp_answers(ip: Ipv4Addr) -> bool {
    let at = SocketAddr::from((ip, 554));
    let talk = async {
        let mut s = tokio::net::TcpStream::connect(at).await.ok()?;
        let options = format!("OPTIONS rtsp://{ip}:554/ RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: KeepPeek\r\n\r\n");
        s.write_all(options.as_bytes()).await.ok()?;
        let mut head = [0u8; 16];
        let mut got = 0;
        while got < 9 {
            let n = s.read(&mut head[got..]).await.ok()?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Some(head[..got].starts_with(b"RTSP/1.0 "))
    };
    tokio::time::timeout(Duration::from_millis(limits::CAMPORT_CHECK_WAIT_MS), talk)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u8, ip: u8) -> Lease {
        Lease {
            client: vec![1, n],
            mac: [2, 0, 0, 0, 0, n],
            ip: Ipv4Addr::new(10, 71, 0, ip),
            until_us: 10_000,
            bound: true,
            hostname: Some(format!("cam{n}")),
        }
    }

    #[test]
    fn a_new_lease_is_a_camera_plugged_in_and_one_that_ends_unplugs_it() {
        let f = Finder::default();
        assert_eq!(f.update(&[lease(1, 100), lease(2, 101)], 5).len(), 2);
        assert!(f.update(&[lease(1, 100), lease(2, 101)], 6).is_empty(), "asked once");
        assert!(f.update(&[lease(1, 100)], 7).is_empty());
        let c = f.cameras();
        assert!(c[0].plugged_in && !c[1].plugged_in && c[1].since_us == 7, "{c:?}");
        // One MAC under two client ids: one camera, at its newest lease, asked once.
        let twice = Lease { client: vec![9, 9], until_us: 20_000, ip: Ipv4Addr::new(10, 71, 0, 150), ..lease(1, 100) };
        assert_eq!(f.update(&[lease(1, 100), twice.clone()], 7).len(), 1);
        assert!(f.update(&[lease(1, 100), twice], 7).is_empty(), "not flipped back");
        assert_eq!(f.cameras()[0].address, Ipv4Addr::new(10, 71, 0, 150));
        assert!(f.update(&[lease(1, 100)], 7).len() == 1, "back at .100");
        // Back, at another address: plugged in again, asked again.
        assert_eq!(
            f.update(&[lease(1, 100), lease(2, 102)], 8),
            vec![("02:00:00:00:00:02".to_string(), Ipv4Addr::new(10, 71, 0, 102))]
        );
        // What the asking found stays with the camera while it is there.
        assert!(f.found("02:00:00:00:00:02", Ipv4Addr::new(10, 71, 0, 102), None, true, false), "ONVIF not yet: again");
        assert!(!f.found("02:00:00:00:00:02", Ipv4Addr::new(10, 71, 0, 101), None, true, false), "not at that address");
        assert!(!f.found("02:00:00:00:00:02", Ipv4Addr::new(10, 71, 0, 102), None, false, true), "the last try");
        let c = f.cameras();
        assert_eq!(c[1].rtsp_url.as_deref(), Some("rtsp://10.71.0.102:554/"));
        assert!(!c[1].checking);
    }

    /// Eight cameras plugged in at once: CAMPORT_CHECKS_MAX are asked at once, the others
    /// wait their turn (addresses where nothing answers: each ask waits its whole time).
    #[tokio::test]
    async fn cameras_are_asked_at_most_the_ceiling_at_once() {
        let finder = Arc::new(Finder::default());
        let leases: Vec<Lease> = (0..8)
            .map(|i| Lease {
                mac: [2, 0, 0, 0, 1, i],
                ip: Ipv4Addr::new(127, 0, 86, 10 + i),
                until_us: i64::MAX,
                ..lease(i, 1)
            })
            .collect();
        let clocks = crate::clock::RealClocks::shared();
        let (_keep, bound) = watch::channel(Bound { leases, offset_us: clocks.wall_us() - clocks.mono_us() });
        let (stop, stopped) = watch::channel(false);
        let following = tokio::spawn(follow(finder.clone(), bound, clocks, stopped));
        let within = Duration::from_millis(limits::CAMPORT_CHECK_WAIT_MS + 500);
        tokio::time::sleep(within).await;
        assert_eq!(finder.asking_peak.load(Ordering::Relaxed), limits::CAMPORT_CHECKS_MAX);
        assert_eq!(finder.cameras().len(), 8);
        let _ = stop.send(true);
        following.await.unwrap();
    }

    /// A camera plugged in and out again and again is asked by one task at a time.
    #[tokio::test]
    async fn a_camera_plugged_in_again_is_asked_once_at_a_time() {
        let mut asking = Asking::default();
        for _ in 0..50 {
            asking.start("02:00:00:00:00:01".into(), std::future::pending());
            asking.start("02:00:00:00:00:02".into(), std::future::pending());
            tokio::task::yield_now().await;
            asking.reap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        asking.reap();
        assert_eq!((asking.tasks.len(), asking.by_mac.len()), (2, 2));
        asking.shutdown().await;
    }

    /// The wall clock stepped 56 years since the leases were written (NTP setting a board
    /// without an RTC): they still hold, and one that ended has still ended.
    #[test]
    fn leases_hold_across_a_step_of_the_wall_clock() {
        let years = 56 * 365 * 86_400 * 1_000_000i64;
        let bound = Bound { leases: vec![lease(1, 100), Lease { until_us: 4_000, ..lease(2, 101) }], offset_us: 0 };
        assert_eq!(bound.live(5_000, 5_000).len(), 1);
        assert_eq!(bound.live(years + 5_000, 5_000), vec![lease(1, 100)]);
        assert!(bound.live(years + 10_000, 10_000).is_empty());
    }

    /// CAMPORT_LEASES_MAX cameras kept: the one unplugged longest ago makes room.
    #[test]
    fn the_cameras_kept_stop_at_the_leases_ceiling() {
        let f = Finder::default();
        let many: Vec<Lease> = (0..limits::CAMPORT_LEASES_MAX)
            .map(|i| Lease { mac: [2, 0, 0, 0, (i >> 8) as u8, i as u8], ..lease(0, 1) })
            .collect();
        f.update(&many, 1);
        f.update(&many[1..], 2);
        assert_eq!(f.cameras().len(), limits::CAMPORT_LEASES_MAX);
        let newcomer = Lease { mac: [2, 0, 0, 1, 0, 0], ..lease(0, 1) };
        let mut next = many[1..].to_vec();
        next.push(newcomer);
        assert_eq!(f.update(&next, 3).len(), 1);
        let c = f.cameras();
        assert_eq!(c.len(), limits::CAMPORT_LEASES_MAX);
        assert!(c.iter().all(|c| c.plugged_in), "the unplugged one made room");
    }
}

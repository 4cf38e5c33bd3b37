//! The camera port's room: its servers (DHCP, SNTP) and the finder of plugged-in cameras,
//! started from `[camera_port]` and started again when it changes while the box runs (the
//! cameras keep their addresses: the leases are in the catalog). An interface that is not
//! there (a USB adapter not plugged in yet) or a server that cannot start is shown, and
//! tried again every [`limits::CAMPORT_RETRY_MS`].

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::found::{self, Finder, Plugged};
use super::serve::{self, DhcpServer, DhcpStatus, SntpCounts};
use crate::catalog::Catalog;
use crate::clock::SharedClocks;
use crate::config::CameraPortConfig;
use crate::limits;

/// What the web face shows of the port.
#[derive(Debug, Serialize)]
pub struct PortStatus {
    /// The port's settings; none: the box has no camera port.
    pub config: Option<ShownConfig>,
    /// Why it does not serve, while it does not.
    pub problem: Option<String>,
    pub dhcp: Option<DhcpStatus>,
    pub sntp_answered: u64,
    pub sntp_refused: u64,
    pub sntp_rate_dropped: u64,
    pub cameras: Vec<Plugged>,
    /// The box's interfaces, to choose the port from.
    pub interfaces: Vec<Interface>,
}

/// The port's counts for `/metrics`.
pub struct PortCounts {
    pub serving: bool,
    pub dhcp: Option<DhcpStatus>,
    pub plugged_in: u64,
    pub unplugged: u64,
    /// SNTP answered, refused, over their rate.
    pub sntp: [u64; 3],
}

#[derive(Debug, Serialize)]
pub struct ShownConfig {
    pub interface: String,
    pub address: String,
    pub pool: String,
    pub lease_time_s: u32,
    pub router: bool,
    pub web: bool,
}

struct Running {
    config: CameraPortConfig,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The camera port's room.
pub struct CameraPort {
    catalog: Arc<Catalog>,
    clocks: SharedClocks,
    finder: Arc<Finder>,
    sntp: Arc<SntpCounts>,
    server: Mutex<Option<Arc<DhcpServer>>>,
    problem: Mutex<Option<String>>,
    running: tokio::sync::Mutex<Option<Running>>,
    /// The box's address on the port, while the web face must not answer there.
    closed_to_web: Mutex<Option<(Ipv4Addr, u8)>>,
    /// The port's subnet before the last change: its address on the interface is the box's
    /// own, removed for the new one.
    previous: Mutex<Option<(Ipv4Addr, u8)>>,
}

impl CameraPort {
    pub fn new(catalog: Arc<Catalog>, clocks: SharedClocks) -> Arc<CameraPort> {
        Arc::new(CameraPort {
            catalog,
            clocks,
            finder: Arc::default(),
            sntp: Arc::default(),
            server: Mutex::default(),
            problem: Mutex::default(),
            running: tokio::sync::Mutex::default(),
            closed_to_web: Mutex::default(),
            previous: Mutex::default(),
        })
    }

    /// Whether the web face refuses a connection from `peer` at `local`, unless `web = true`:
    /// one at the box's address on the camera port, or from the port's subnet at any of the
    /// box's addresses (Linux takes a packet for the LAN's address on the port too).
    pub fn refuses_web(&self, local: std::net::IpAddr, peer: std::net::IpAddr) -> bool {
        let Some((ip, prefix)) = *self.closed_to_web.lock().expect("lock") else { return false };
        let v4 = |a: std::net::IpAddr| match a.to_canonical() {
            std::net::IpAddr::V4(a) => Some(a),
            std::net::IpAddr::V6(_) => None,
        };
        v4(local) == Some(ip) || v4(peer).is_some_and(|p| within(p, (ip, prefix)))
    }

    /// Follows `config`: the servers stop, then start with it (nothing changes when it is the
    /// same). None: no camera port.
    pub async fn set_config(self: &Arc<Self>, config: Option<&CameraPortConfig>) {
        let mut running = self.running.lock().await;
        if running.as_ref().map(|r| &r.config) == config {
            return;
        }
        if let Some(mut r) = running.take() {
            let _ = r.stop.send(true);
            let wait = Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS);
            if tokio::time::timeout(wait, &mut r.task).await.is_err() {
                error!("camera port: its servers did not stop in time; ended");
                r.task.abort();
            }
            info!(interface = r.config.interface, "camera port: stopped");
            // Removed, or on another network: the cameras shown were of the old one.
            if config.is_none_or(|c| {
                (&c.interface, c.address, c.prefix) != (&r.config.interface, r.config.address, r.config.prefix)
            }) {
                self.finder.clear();
            }
            *self.previous.lock().expect("lock") = Some((r.config.address, r.config.prefix));
            // Removed, or moved to another interface: the old one keeps no address of the
            // box's, where cameras with leases still running could reach it.
            if config.is_none_or(|c| c.interface != r.config.interface) {
                let old = r.config.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    let with_prefix = format!("{}/{}", old.address, old.prefix);
                    if let Err(why) = ip_cmd(&["addr", "del", &with_prefix, "dev", &old.interface]) {
                        warn!(problem = why, "camera port: the old address not removed");
                    }
                })
                .await;
            }
        }
        *self.server.lock().expect("lock") = None;
        *self.problem.lock().expect("lock") = None;
        *self.closed_to_web.lock().expect("lock") = config.filter(|c| !c.web).map(|c| (c.address, c.prefix));
        if let Some(c) = config {
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(self.clone().supervise(c.clone(), stopped));
            *running = Some(Running { config: c.clone(), stop, task });
        }
    }

    /// Stops the servers (the ACKs waiting for their write go first).
    pub async fn stop(self: &Arc<Self>) {
        self.set_config(None).await;
    }

    pub async fn status(&self) -> PortStatus {
        let config = self.running.lock().await.as_ref().map(|r| {
            let c = &r.config;
            ShownConfig {
                interface: c.interface.clone(),
                address: format!("{}/{}", c.address, c.prefix),
                pool: format!("{}-{}", c.pool.0, c.pool.1),
                lease_time_s: c.lease_time_s,
                router: c.router,
                web: c.web,
            }
        });
        let server = self.server.lock().expect("lock").clone();
        let problem = self.problem.lock().expect("lock").clone();
        PortStatus {
            config,
            problem,
            dhcp: server.map(|s| s.status()),
            sntp_answered: self.sntp.answered.load(std::sync::atomic::Ordering::Relaxed),
            sntp_refused: self.sntp.refused.load(std::sync::atomic::Ordering::Relaxed),
            sntp_rate_dropped: self.sntp.rate_dropped.load(std::sync::atomic::Ordering::Relaxed),
            cameras: self.finder.cameras(),
            interfaces: tokio::task::spawn_blocking(interfaces).await.unwrap_or_default(),
        }
    }

    /// What `/metrics` shows, read without waiting: whether it serves, the DHCP server's
    /// status, the cameras plugged in and unplugged, and the SNTP counts.
    pub fn counts(&self) -> PortCounts {
        let dhcp = self.server.lock().expect("lock").as_ref().map(|s| s.status());
        let cameras = self.finder.cameras();
        let load = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
        PortCounts {
            serving: dhcp.is_some() && self.problem.lock().expect("lock").is_none(),
            dhcp,
            plugged_in: cameras.iter().filter(|c| c.plugged_in).count() as u64,
            unplugged: cameras.iter().filter(|c| !c.plugged_in).count() as u64,
            sntp: [load(&self.sntp.answered), load(&self.sntp.refused), load(&self.sntp.rate_dropped)],
        }
    }

    /// Shows why the port does not serve; logged when it is new (it is tried again every
    /// few seconds, for as long as an adapter stays unplugged).
    fn trouble(&self, why: String) {
        let mut problem = self.problem.lock().expect("lock");
        if problem.as_deref() != Some(why.as_str()) {
            warn!(problem = why, "camera port: not served; tried again every few seconds");
        }
        *problem = Some(why);
    }

    /// Runs the servers of `config` until `stop`, started again after a failure.
    async fn supervise(self: Arc<Self>, config: CameraPortConfig, mut stop: watch::Receiver<bool>) {
        loop {
            match self.serve(&config, stop.clone()).await {
                Ok(()) => return,
                Err(why) => self.trouble(why),
            }
            *self.server.lock().expect("lock") = None;
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(Duration::from_millis(limits::CAMPORT_RETRY_MS)) => {}
            }
        }
    }

    /// Serves until `stop` (Ok), or says why it cannot.
    async fn serve(&self, config: &CameraPortConfig, stop: watch::Receiver<bool>) -> Result<(), String> {
        let c = config.clone();
        let previous = *self.previous.lock().expect("lock");
        tokio::task::spawn_blocking(move || address_on(&c.interface, c.address, c.prefix, previous))
            .await
            .map_err(|e| e.to_string())??;
        let server = DhcpServer::new(config.port(), self.catalog.clone(), self.clocks.clone())?;
        *self.server.lock().expect("lock") = Some(server.clone());
        // One stop for the three: a server that fails stops the others, and all start again.
        let (inner_stop, inner) = watch::channel(false);
        // Ended with this task if it is ended (a stop that took too long): never two servers.
        let finder = Ending(tokio::spawn(found::follow(
            self.finder.clone(),
            server.bound(),
            self.clocks.clone(),
            inner.clone(),
        )));
        let mut dhcp = Ending(tokio::spawn(server.run(inner.clone())));
        let mut sntp = Ending(tokio::spawn(serve::serve_sntp(
            config.interface.clone(),
            self.clocks.clone(),
            self.sntp.clone(),
            inner,
        )));
        *self.problem.lock().expect("lock") = None;
        let mut outer = stop;
        let ended = tokio::select! {
            _ = outer.changed() => Ok(()),
            r = &mut dhcp.0 => r.map_err(|e| e.to_string()).and_then(|r| r).and(Err("the DHCP server stopped".to_string())),
            r = &mut sntp.0 => r.map_err(|e| e.to_string()).and_then(|r| r).and(Err("the SNTP server stopped".to_string())),
        };
        let _ = inner_stop.send(true);
        for task in [&mut dhcp, &mut sntp] {
            if !task.0.is_finished() {
                let _ = (&mut task.0).await;
            }
        }
        let mut finder = finder;
        let _ = (&mut finder.0).await;
        ended
    }
}

/// Runs busybox's or iproute2's `ip` with `args`; its complaint when it fails.
fn ip_cmd(args: &[&str]) -> Result<(), String> {
    let out =
        std::process::Command::new("ip").args(args).output().map_err(|e| format!("`ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}`: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The LAN interface the image's board names (`net_if` in its firmware description); none
/// outside an image.
fn board_lan_interface() -> Option<String> {
    let system = crate::system::System::discover(std::path::Path::new("/")).ok()??;
    Some(system.firmware.net_if).filter(|n| !n.is_empty())
}

/// A task ended when this is dropped: the servers' tasks end with the task that runs them.
pub(super) struct Ending<T>(pub(super) JoinHandle<T>);

impl<T> Drop for Ending<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether `ip` is in `net/prefix`.
fn within(ip: Ipv4Addr, (net, prefix): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// The interface the default route leaves by, from `/proc/net/route`.
fn default_route_interface() -> Option<String> {
    let text = std::fs::read_to_string("/proc/net/route").ok()?;
    text.lines().skip(1).find_map(|l| {
        let mut f = l.split_whitespace();
        let (name, destination) = (f.next()?, f.next()?);
        (destination == "00000000").then(|| name.to_string())
    })
}

/// Gives `interface` the box's address `ip/prefix` when it does not have it, and brings it
/// up. `init` does this at boot; here it follows a change of the config. An interface that
/// is not there is an error, and so is one that is the LAN's: it carries the default route,
/// or an address of neither this subnet nor `previous` (the port's subnet before a change,
/// whose address is removed). The box never serves DHCP on a network it did not make.
pub fn address_on(interface: &str, ip: Ipv4Addr, prefix: u8, previous: Option<(Ipv4Addr, u8)>) -> Result<(), String> {
    if !std::path::Path::new("/sys/class/net").join(interface).exists() {
        return Err(format!("There is no interface {interface}: is the camera port's adapter plugged in?"));
    }
    // The board's LAN interface, as the image names it: refused even before its DHCP lease
    // (at boot, or on a LAN without a router, it has no default route to tell it by).
    if board_lan_interface().as_deref() == Some(interface) || default_route_interface().as_deref() == Some(interface) {
        return Err(format!(
            "{interface} is the box's way to the LAN and the internet: the camera port must be an interface of its own."
        ));
    }
    let held: Vec<(Ipv4Addr, u8)> = if_addrs::get_if_addrs()
        .map_err(|e| format!("The interfaces could not be read: {e}"))?
        .into_iter()
        .filter(|i| i.name == interface)
        .filter_map(|i| match i.addr {
            if_addrs::IfAddr::V4(a) => Some((a.ip, u32::from(a.netmask).count_ones() as u8)),
            _ => None,
        })
        .collect();
    // Only the box's own addresses are its to remove: this one, and the port's before a
    // change. Any other is another network's (a DHCP lease, an address set by hand).
    let ours = |a: Ipv4Addr| a == ip || previous.is_some_and(|(p, _)| a == p);
    if let Some((foreign, p)) = held.iter().find(|&&(a, _)| !ours(a)) {
        return Err(format!(
            "{interface} has the address {foreign}/{p}, of another network: the camera port must be an interface of its own."
        ));
    }
    // No IPv6 on the port: its link-local address would be a way to the box past the checks.
    let v6 = format!("/proc/sys/net/ipv6/conf/{interface}/disable_ipv6");
    if std::path::Path::new(&v6).exists() {
        let _ = std::fs::write(&v6, "1");
    }
    // Strict reverse-path filtering: a packet on the port from an address the box would not
    // answer there (a camera posing as a host of the LAN) is dropped, so no reply of the
    // box's goes out on the LAN for it.
    let rp = format!("/proc/sys/net/ipv4/conf/{interface}/rp_filter");
    if std::path::Path::new(&rp).exists() {
        let _ = std::fs::write(&rp, "1");
    }
    if held.iter().any(|&(a, _)| a == ip) {
        return ip_cmd(&["link", "set", interface, "up"]);
    }
    for (old, p) in &held {
        ip_cmd(&["addr", "del", &format!("{old}/{p}"), "dev", interface])?;
    }
    let with_prefix = format!("{ip}/{prefix}");
    ip_cmd(&["addr", "add", &with_prefix, "dev", interface])?;
    ip_cmd(&["link", "set", interface, "up"])?;
    info!(interface, address = with_prefix, "camera port: the box's address set");
    Ok(())
}

/// One of the box's network interfaces, for the camera port's form.
#[derive(Debug, Serialize)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    /// Its IPv4 addresses with their prefix.
    pub addresses: Vec<String>,
    /// Its cable is in (`/sys/class/net/*/carrier`).
    pub carrier: bool,
    /// The board's LAN interface, or the default route leaves by it: never the camera port.
    pub lan: bool,
}

/// Interface names but loopback's, sorted, at most [`limits::NET_INTERFACES_SHOWN_MAX`].
fn listed(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = names.filter(|n| n != "lo").collect();
    names.sort();
    names.truncate(limits::NET_INTERFACES_SHOWN_MAX);
    names
}

/// The box's interfaces but loopback, at most [`limits::NET_INTERFACES_SHOWN_MAX`].
pub fn interfaces() -> Vec<Interface> {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else { return Vec::new() };
    let names = listed(dir.filter_map(|e| e.ok()?.file_name().into_string().ok()));
    let all = if_addrs::get_if_addrs().unwrap_or_default();
    let lan = [default_route_interface(), board_lan_interface()];
    let read = |name: &str, what: &str| std::fs::read_to_string(format!("/sys/class/net/{name}/{what}")).ok();
    names
        .into_iter()
        .map(|name| Interface {
            mac: read(&name, "address").map(|m| m.trim().chars().take(17).collect()),
            addresses: all
                .iter()
                .filter(|i| i.name == name)
                .filter_map(|i| match &i.addr {
                    if_addrs::IfAddr::V4(a) => Some(format!("{}/{}", a.ip, u32::from(a.netmask).count_ones())),
                    _ => None,
                })
                .collect(),
            carrier: read(&name, "carrier").is_some_and(|c| c.trim() == "1"),
            lan: lan.iter().any(|l| l.as_deref() == Some(name.as_str())),
            name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_within_its_subnet_and_not_another() {
        let port = (Ipv4Addr::new(10, 71, 0, 1), 24);
        assert!(within(Ipv4Addr::new(10, 71, 0, 200), port));
        assert!(!within(Ipv4Addr::new(10, 71, 1, 1), port));
        assert!(!within(Ipv4Addr::new(192, 168, 1, 5), port));
        assert!(within(Ipv4Addr::new(10, 71, 3, 1), (Ipv4Addr::new(10, 71, 0, 1), 16)));
    }

    /// 40 interfaces: NET_INTERFACES_SHOWN_MAX shown, in order, loopback never.
    #[test]
    fn the_interfaces_shown_stop_at_their_ceiling() {
        let names = (0..40).rev().map(|n| format!("eth{n:02}")).chain(["lo".to_string()]);
        let shown = listed(names);
        assert_eq!(shown.len(), limits::NET_INTERFACES_SHOWN_MAX);
        assert_eq!((shown[0].as_str(), shown.iter().any(|n| n == "lo")), ("eth00", false));
    }
}

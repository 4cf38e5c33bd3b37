//! The camera port's DHCP server against real clients: busybox `udhcpc` in a network
//! namespace joined to the box's side by a veth pair (both made here, removed after), the
//! server in this process on the box's end, its leases in a catalog of its own.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use keeppeek::camport::dhcp;
use keeppeek::camport::serve::{DhcpServer, Port};
use keeppeek::catalog::Catalog;

use crate::common::wait_until;

/// A namespace and the veth pair into it: `box_side` here with `box_ip`/24, `camera_side`
/// there, up with nothing on it. Removed when dropped.
pub struct Segment {
    pub ns: String,
    pub box_side: String,
    pub camera_side: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2), as root");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Segment {
    /// `tag` keeps names apart between tests (interface names are at most 15 bytes).
    pub fn new(tag: &str, box_ip: Ipv4Addr) -> Segment {
        let id = std::process::id() % 100_000;
        let s = Segment {
            ns: format!("kp-{tag}-{id}"),
            box_side: format!("kb{tag}{id}"),
            camera_side: format!("kc{tag}{id}"),
        };
        let _ = Command::new("ip").args(["netns", "del", &s.ns]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["link", "del", &s.box_side]).stderr(Stdio::null()).status();
        ip(&["netns", "add", &s.ns]);
        ip(&["link", "add", &s.box_side, "type", "veth", "peer", "name", &s.camera_side]);
        ip(&["link", "set", &s.camera_side, "netns", &s.ns]);
        ip(&["addr", "add", &format!("{box_ip}/24"), "dev", &s.box_side]);
        ip(&["link", "set", &s.box_side, "up"]);
        ip(&["-n", &s.ns, "link", "set", "lo", "up"]);
        ip(&["-n", &s.ns, "link", "set", &s.camera_side, "up"]);
        s
    }

    /// `program` run in the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = Command::new("ip").args(["link", "del", &self.box_side]).status();
    }
}

/// The server for `segment`'s box side with the pool `.100`–`.107`, on a runtime of its own.
struct Served {
    server: Arc<DhcpServer>,
    stop: tokio::sync::watch::Sender<bool>,
    rt: tokio::runtime::Runtime,
}

fn serve(segment: &Segment, box_ip: Ipv4Addr, catalog: &Path) -> Served {
    let o = box_ip.octets();
    let at = |n: u8| Ipv4Addr::new(o[0], o[1], o[2], n);
    let port = Port {
        interface: segment.box_side.clone(),
        server: dhcp::Server { ip: box_ip, mask: Ipv4Addr::new(255, 255, 255, 0), router: false },
        pool: (at(100), at(107)),
        lease_s: 120,
    };
    let catalog = Arc::new(Catalog::open(catalog).unwrap());
    let server = DhcpServer::new(port, catalog, keeppeek::clock::RealClocks::shared()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = server.clone();
    rt.spawn(async move { running.run(shutdown).await.expect("the server starts") });
    Served { server, stop, rt }
}

impl Served {
    fn stop(self) {
        let _ = self.stop.send(true);
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

/// busybox `udhcpc` in the foreground on the camera side: each event its script is called
/// with (`bound`, `renew`, `deconfig`, …) and the address, one line each in `events`; the
/// script sets the address on the interface, as a camera's does (a renewal goes from it).
struct Udhcpc {
    child: Child,
    events: PathBuf,
}

impl Udhcpc {
    fn start(segment: &Segment, dir: &Path, hostname: &str) -> Udhcpc {
        let script = dir.join("udhcpc.sh");
        let events = dir.join("udhcpc.events");
        let text = format!(
            "#!/bin/sh\ncase $1 in\n  deconfig) ip -4 addr flush dev $interface ;;\n  \
             bound|renew) ip addr replace $ip/$subnet dev $interface ;;\nesac\necho \"$1 $ip\" >> {}\n",
            events.display()
        );
        std::fs::write(&script, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = segment
            .command("busybox")
            .args(["udhcpc", "-f", "-i", &segment.camera_side, "-s"])
            .arg(&script)
            .args(["-x", &format!("hostname:{hostname}"), "-t", "20", "-T", "1", "-A", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("busybox udhcpc");
        Udhcpc { child, events }
    }

    fn events(&self) -> Vec<String> {
        std::fs::read_to_string(&self.events).unwrap_or_default().lines().map(str::to_string).collect()
    }

    /// Waits for the `n`th event of `kind`; its address.
    fn wait(&self, kind: &str, n: usize) -> String {
        let mut got = None;
        let ok = wait_until(Duration::from_secs(20), || {
            let seen: Vec<String> = self.events().into_iter().filter(|e| e.starts_with(&format!("{kind} "))).collect();
            got = seen.get(n - 1).map(|e| e[kind.len() + 1..].to_string());
            got.is_some()
        });
        assert!(ok, "udhcpc: no {kind} #{n}; its events: {:?}", self.events());
        got.unwrap()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Busybox's client gets an address of the pool, renews it, releases it and gets the same
/// one back, after its own restart and after the server's (its leases kept in the catalog).
#[test]
fn udhcpc_gets_renews_releases_and_keeps_its_address_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 1, 1);
    let segment = Segment::new("u", box_ip);
    let catalog = tmp.path().join("catalog.redb");
    let served = serve(&segment, box_ip, &catalog);

    let client = Udhcpc::start(&segment, tmp.path(), "cam-porch");
    let first = client.wait("bound", 1);
    let addr: Ipv4Addr = first.parse().unwrap();
    assert!((100..=107).contains(&addr.octets()[3]) && addr.octets()[..3] == [10, 71, 1], "{first} in the pool");
    let lease = served.server.status().leases;
    assert_eq!(lease.len(), 1, "{lease:?}");
    assert_eq!((lease[0].ip, lease[0].hostname.as_deref()), (addr, Some("cam-porch")));
    // Renewed on asking (SIGUSR1): the same address.
    client.signal("USR1");
    assert_eq!(client.wait("renew", 1), first);
    // Released (SIGUSR2): the server marks it so, and keeps the binding for the client.
    client.signal("USR2");
    assert!(wait_until(Duration::from_secs(10), || served.server.status().counts.releases == 1), "released");
    client.stop();

    // The client restarts: the same address.
    let client = Udhcpc::start(&segment, tmp.path(), "cam-porch");
    assert_eq!(client.wait("bound", 2), first, "the same address after the client's restart");
    client.stop();

    // The server restarts (its leases from the catalog): the same address again.
    served.stop();
    let served = serve(&segment, box_ip, &catalog);
    assert_eq!(served.server.status().leases.len(), 1, "the lease came back from the catalog");
    let client = Udhcpc::start(&segment, tmp.path(), "cam-porch");
    assert_eq!(client.wait("bound", 3), first, "the same address after the server's restart");
    client.stop();
    served.stop();
}

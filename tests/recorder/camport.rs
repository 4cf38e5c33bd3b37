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
use crate::segment::{Segment, ip};

/// The server for `segment`'s box side with the pool `.100`–`.107` and leases of `lease_s`.
fn serve(segment: &Segment, box_ip: Ipv4Addr, catalog: &Path, lease_s: u32) -> Served {
    serve_pool(segment, box_ip, catalog, (100, 107), lease_s)
}

/// The server for `segment`'s box side with the pool `.first`–`.last`, on a runtime of its
/// own.
struct Served {
    server: Arc<DhcpServer>,
    stop: tokio::sync::watch::Sender<bool>,
    rt: tokio::runtime::Runtime,
    running: tokio::task::JoinHandle<Result<(), String>>,
}

fn serve_pool(segment: &Segment, box_ip: Ipv4Addr, catalog: &Path, (first, last): (u8, u8), lease_s: u32) -> Served {
    let o = box_ip.octets();
    let at = |n: u8| Ipv4Addr::new(o[0], o[1], o[2], n);
    let port = Port {
        interface: segment.box_side.clone(),
        server: dhcp::Server { ip: box_ip, mask: Ipv4Addr::new(255, 255, 255, 0), router: false },
        pool: (at(first), at(last)),
        lease_s,
    };
    let catalog = Arc::new(Catalog::open(catalog).unwrap());
    let server = DhcpServer::new(port, catalog, keeppeek::clock::RealClocks::shared()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = rt.spawn(server.clone().run(shutdown));
    Served { server, stop, rt, running }
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
    let served = serve(&segment, box_ip, &catalog, 120);

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
    let served = serve(&segment, box_ip, &catalog, 120);
    assert_eq!(served.server.status().leases.len(), 1, "the lease came back from the catalog");
    let client = Udhcpc::start(&segment, tmp.path(), "cam-porch");
    assert_eq!(client.wait("bound", 3), first, "the same address after the server's restart");
    client.stop();
    served.stop();
}

/// The port's adapter unplugged and plugged in again: its interface goes, and comes back
/// under its name with a new index. The server's sockets would hear nothing more, so it ends
/// saying so (the room sets the port up again, CAMPORT_RETRY_MS later); the next server
/// serves the client its address.
#[test]
fn an_interface_made_again_ends_its_server_and_the_next_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 6, 1);
    let segment = Segment::new("r", box_ip);
    let catalog = tmp.path().join("catalog.redb");
    let mut served = serve(&segment, box_ip, &catalog, 120);
    let client = Udhcpc::start(&segment, tmp.path(), "cam-replug");
    let first = client.wait("bound", 1);
    client.stop();
    // The camera keeps its MAC (the pair is made anew here, each end with a new one).
    let shown = segment.command("cat").arg(format!("/sys/class/net/{}/address", segment.camera_side)).output().unwrap();
    let camera_mac = String::from_utf8(shown.stdout).unwrap().trim().to_string();
    drop(segment);
    let segment = Segment::new("r", box_ip);
    ip(&["-n", &segment.ns, "link", "set", &segment.camera_side, "address", &camera_mac]);
    let wait = Duration::from_millis(keeppeek::limits::CAMPORT_RETRY_MS + 3_000);
    let ended = served.rt.block_on(async { tokio::time::timeout(wait, &mut served.running).await });
    let ended = ended.expect("the server ended").expect("its task ran");
    let why = ended.expect_err("ended with why");
    assert!(why.contains(&segment.box_side) && why.contains("went away"), "{why}");
    served.stop();
    let served = serve(&segment, box_ip, &catalog, 120);
    let client = Udhcpc::start(&segment, tmp.path(), "cam-replug");
    assert_eq!(client.wait("bound", 2), first, "its address, from the next server");
    client.stop();
    served.stop();
}

/// A client's script: each call's reason and address (`$reason $new_ip_address`, as ISC
/// dhclient and dhcpcd name them), one line each in `events`; with `configure`, it sets or
/// flushes the address as a camera's would (dhcpcd sets it itself).
fn reasons_script(dir: &Path, name: &str, configure: bool) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join(format!("{name}.sh"));
    let events = dir.join(format!("{name}.events"));
    let set = if configure {
        "case $reason in\n  BOUND|RENEW|REBIND|REBOOT) ip addr replace $new_ip_address/24 dev $interface ;;\n  \
         EXPIRE|FAIL|RELEASE|STOP) ip -4 addr flush dev $interface ;;\nesac\n"
    } else {
        ""
    };
    std::fs::write(&script, format!("#!/bin/sh\n{set}echo \"$reason $new_ip_address\" >> {}\n", events.display()))
        .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, events)
}

/// Waits for the `n`th line of `events` whose reason is one of `reasons`; its address.
fn wait_reason(events: &Path, reasons: &[&str], n: usize, within: Duration) -> String {
    let read = || std::fs::read_to_string(events).unwrap_or_default();
    let mut got = None;
    let ok = wait_until(within, || {
        let text = read();
        let mut seen = text.lines().filter_map(|l| l.split_once(' ')).filter(|(r, _)| reasons.contains(r));
        got = seen.nth(n - 1).map(|(_, ip)| ip.to_string());
        got.is_some()
    });
    assert!(ok, "no {reasons:?} #{n} within {within:?}; events: {}", read());
    got.unwrap()
}

/// A client's reasons for holding an address anew.
const TAKEN: &[&str] = &["BOUND", "REBOOT"];

/// ISC dhclient, with leases of 20 s: gets an address, renews it at its renewal time
/// (option 58: 10 s), releases it, and gets the same one back after its restart (from its
/// lease file) and after the server's.
#[test]
fn dhclient_gets_renews_on_time_releases_and_keeps_its_address_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 2, 1);
    let segment = Segment::new("i", box_ip);
    let catalog = tmp.path().join("catalog.redb");
    let served = serve(&segment, box_ip, &catalog, 20);
    let (script, events) = reasons_script(tmp.path(), "dhclient", true);
    let dhclient = |args: &[&str]| {
        let out = segment
            .command("dhclient")
            .args(["-4", "-v", "-sf"])
            .arg(&script)
            .arg("-lf")
            .arg(tmp.path().join("dhclient.leases"))
            .arg("-pf")
            .arg(tmp.path().join("dhclient.pid"))
            .args(args)
            .arg(&segment.camera_side)
            .output()
            .expect("ISC dhclient");
        assert!(out.status.success(), "dhclient {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // Bound, then on in the background.
    dhclient(&["-1"]);
    let first = wait_reason(&events, TAKEN, 1, Duration::from_secs(5));
    assert!(first.starts_with("10.71.2.1") && first.len() == 11, "{first} in the pool");
    assert_eq!(wait_reason(&events, &["RENEW"], 1, Duration::from_secs(20)), first, "renewed at its renewal time");
    dhclient(&["-r"]);
    assert!(wait_until(Duration::from_secs(10), || served.server.status().counts.releases == 1), "released");
    // Started again: it asks for its address from its lease file.
    dhclient(&["-1"]);
    assert_eq!(wait_reason(&events, TAKEN, 2, Duration::from_secs(10)), first, "the same address after its restart");
    dhclient(&["-x"]);
    served.stop();
    let served = serve(&segment, box_ip, &catalog, 20);
    dhclient(&["-1"]);
    assert_eq!(
        wait_reason(&events, TAKEN, 3, Duration::from_secs(10)),
        first,
        "the same address after the server's restart"
    );
    dhclient(&["-x"]);
    served.stop();
}

/// dhcpcd (which probes the address itself before it takes it), with leases of 20 s: gets an
/// address, renews it on time, releases it, and gets the same one back after its restart and
/// the server's. Its client id is a DUID (option 61, type 255), which the box keeps as given.
#[test]
fn dhcpcd_gets_renews_on_time_releases_and_keeps_its_address_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 3, 1);
    let segment = Segment::new("d", box_ip);
    let catalog = tmp.path().join("catalog.redb");
    let served = serve(&segment, box_ip, &catalog, 20);
    let (script, events) = reasons_script(tmp.path(), "dhcpcd", false);
    let lease_file = format!("/var/lib/dhcpcd/{}.lease", segment.camera_side);
    let _ = std::fs::remove_file(&lease_file);
    let start = || {
        segment
            .command("dhcpcd")
            .args(["-4", "-B", "--duid", "-f", "/dev/null", "-c"])
            .arg(&script)
            .arg(&segment.camera_side)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dhcpcd")
    };
    let mut daemon = start();
    let first = wait_reason(&events, TAKEN, 1, Duration::from_secs(15));
    assert!(first.starts_with("10.71.3.1") && first.len() == 11, "{first} in the pool");
    let leases = served.server.status().leases;
    assert!(leases.len() == 1 && leases[0].client.first() == Some(&255), "a DUID client id: {leases:?}");
    assert_eq!(wait_reason(&events, &["RENEW"], 1, Duration::from_secs(20)), first, "renewed at its renewal time");
    let out = segment.command("dhcpcd").args(["-4", "-k"]).arg(&segment.camera_side).output().unwrap();
    assert!(out.status.success(), "dhcpcd -k: {}", String::from_utf8_lossy(&out.stderr));
    assert!(wait_until(Duration::from_secs(10), || served.server.status().counts.releases == 1), "released");
    let _ = daemon.kill();
    let _ = daemon.wait();
    let mut daemon = start();
    assert_eq!(wait_reason(&events, TAKEN, 2, Duration::from_secs(15)), first, "the same address after its restart");
    let _ = daemon.kill();
    let _ = daemon.wait();
    served.stop();
    let served = serve(&segment, box_ip, &catalog, 20);
    let mut daemon = start();
    assert_eq!(
        wait_reason(&events, TAKEN, 3, Duration::from_secs(15)),
        first,
        "the same address after the server's restart"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_file(&lease_file);
    served.stop();
}

/// Sends each of `packets` (from port 68, to everyone on port 67) from the camera side of
/// `segment`, at once, then hears what comes back for `listen_ms`: (ms since the first was
/// sent, the answer's xid, its yiaddr) each. Python's socket module in the namespace: a
/// client that says exactly what the test wants, hostile or not.
fn send_raw(segment: &Segment, packets: &[Vec<u8>], listen_ms: u64) -> Vec<(f64, u32, Ipv4Addr)> {
    const SENDER: &str = r#"
import socket, sys, time
iface, listen_ms = sys.argv[1], int(sys.argv[2])
packets = [bytes.fromhex(l) for l in sys.stdin.read().split()]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
s.bind(("0.0.0.0", 68))
t0 = time.monotonic()
for p in packets:
    s.sendto(p, ("255.255.255.255", 67))
s.settimeout(0.02)
while time.monotonic() < t0 + listen_ms / 1000:
    try:
        data, _ = s.recvfrom(2048)
    except socket.timeout:
        continue
    if len(data) >= 20:
        print("%.1f %d %s" % ((time.monotonic() - t0) * 1000, int.from_bytes(data[4:8], "big"), socket.inet_ntoa(data[16:20])), flush=True)
"#;
    use std::io::Write;
    let mut child = segment
        .command("python3")
        .args(["-c", SENDER, &segment.camera_side, &listen_ms.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let hex: Vec<String> = packets.iter().map(|p| p.iter().map(|b| format!("{b:02x}")).collect()).collect();
    child.stdin.take().unwrap().write_all(hex.join("\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the sender: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect()
}

/// A DISCOVER from `mac` with transaction `xid`, asking for its answer by broadcast (the
/// sender has no address), padded to BOOTP's 300 bytes.
fn discover(mac: [u8; 6], xid: u32) -> Vec<u8> {
    let mut p = vec![0u8; 236];
    (p[0], p[1], p[2]) = (1, 1, 6);
    p[4..8].copy_from_slice(&xid.to_be_bytes());
    p[10] = 0x80;
    p[28..34].copy_from_slice(&mac);
    p.extend_from_slice(&[99, 130, 83, 99, 53, 1, 1, 255]);
    p.resize(300, 0);
    p
}

fn mac(n: u16) -> [u8; 6] {
    let [a, b] = n.to_be_bytes();
    [0x02, 0x4b, 0x50, 0, a, b]
}

/// An address someone holds already (set up by hand: here the camera side's own, on `lo`,
/// which Linux answers ARP for) is found by the ARP probe and not offered: the next is, after
/// its own probe waited `CAMPORT_ARP_PROBE_MS` with no answer.
#[test]
fn an_offer_waits_for_its_arp_probe_and_an_address_in_use_is_not_offered() {
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 4, 1);
    let segment = Segment::new("a", box_ip);
    ip(&["-n", &segment.ns, "addr", "add", "10.71.4.100/32", "dev", "lo"]);
    let served = serve(&segment, box_ip, &tmp.path().join("catalog.redb"), 120);
    let answers = send_raw(&segment, &[discover(mac(1), 7)], 2_000);
    assert_eq!(answers.len(), 1, "one offer: {answers:?}");
    let (ms, xid, offered) = answers[0];
    assert_eq!((xid, offered), (7, Ipv4Addr::new(10, 71, 4, 101)), "the address in use passed over");
    let probe_ms = keeppeek::limits::CAMPORT_ARP_PROBE_MS as f64;
    assert!(ms >= probe_ms && ms < probe_ms + 1_000.0, "the offer came after its probe's wait: {ms} ms");
    assert_eq!(served.server.status().conflicts, 1);
    served.stop();
}

/// Hostile packets: truncated, over the message ceiling, an option running past the end, a
/// flood from one MAC: each is dropped and counted, and a client that behaves is served all
/// the while. Then more DISCOVERs at once than probes may run: all are offered, the probes in
/// turn.
#[test]
fn hostile_packets_and_floods_are_dropped_and_counted_and_others_served() {
    use keeppeek::limits;
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 5, 1);
    let segment = Segment::new("h", box_ip);
    let served = serve_pool(&segment, box_ip, &tmp.path().join("catalog.redb"), (100, 199), 120);
    let truncated = discover(mac(1), 1)[..200].to_vec();
    let mut oversized = discover(mac(2), 2);
    oversized.resize(limits::CAMPORT_DHCP_MESSAGE_MAX_BYTES + 1, 0);
    let mut overlapping = discover(mac(3), 3);
    overlapping.truncate(236 + 7);
    overlapping.extend_from_slice(&[12, 200, b'c', b'a', b'm']);
    let flood: Vec<Vec<u8>> = (0..40).map(|i| discover(mac(4), 100 + i)).collect();
    let mut packets = vec![truncated, oversized, overlapping];
    packets.extend(flood);
    packets.push(discover(mac(5), 5));
    let answers = send_raw(&segment, &packets, 1_000);
    let s = served.server.status();
    assert_eq!(s.malformed, 3, "{s:?}");
    let taken = limits::CAMPORT_CLIENT_PACKETS_PER_S as u64;
    assert!(s.rate_dropped >= 40 - taken, "the flood past its rate dropped: {s:?}");
    assert!(answers.iter().any(|(_, xid, _)| *xid == 5), "the other client served: {answers:?}");

    // More DISCOVERs at once than probes may run: each is offered, the probes past the
    // ceiling after those before them.
    let many = limits::CAMPORT_PROBES_MAX + 8;
    let packets: Vec<Vec<u8>> = (0..many as u16).map(|i| discover(mac(100 + i), 1_000 + u32::from(i))).collect();
    let answers = send_raw(&segment, &packets, 1_500);
    let s = served.server.status();
    assert_eq!(s.probes_peak, limits::CAMPORT_PROBES_MAX as u64, "probes at once up to their ceiling: {s:?}");
    let offered: std::collections::BTreeSet<u32> = answers.iter().map(|(_, xid, _)| *xid).collect();
    assert_eq!(offered.len(), many, "each offered: {answers:?}");
    let last = answers.iter().map(|(ms, _, _)| *ms).fold(0.0, f64::max);
    let probe_ms = limits::CAMPORT_ARP_PROBE_MS as f64;
    assert!(last >= 2.0 * probe_ms, "those past the ceiling waited a probe's turn: {last} ms");
    served.stop();
}

/// `n` macvlans on the camera side of `segment`, each a client of its own (its own MAC), up.
fn macvlans(segment: &Segment, n: usize) -> Vec<String> {
    use std::io::Write;
    let names: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    let mut batch = String::new();
    for name in &names {
        batch.push_str(&format!(
            "link add link {} name {name} type macvlan mode bridge\nlink set {name} up\n",
            segment.camera_side
        ));
    }
    let mut child = Command::new("ip")
        .args(["-n", &segment.ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip -batch");
    child.stdin.take().unwrap().write_all(batch.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "macvlans: {}", String::from_utf8_lossy(&out.stderr));
    names
}

/// busybox udhcpc on each of `interfaces` at once, each quitting once it has a lease or has
/// tried `tries` times a second apart: the address each got (none when it got none), and how
/// long the last that got one took.
fn udhcpc_at_once(
    segment: &Segment,
    dir: &Path,
    interfaces: &[String],
    tries: u32,
) -> (Vec<Option<Ipv4Addr>>, Duration) {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("bound.sh");
    let text = format!(
        "#!/bin/sh\n[ \"$1\" = bound ] && ip addr replace $ip/$subnet dev $interface && echo $ip > {}/$interface.ip\nexit 0\n",
        dir.display()
    );
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    let children: Vec<Child> = interfaces
        .iter()
        .map(|i| {
            segment
                .command("busybox")
                .args(["udhcpc", "-f", "-q", "-n", "-i", i, "-s"])
                .arg(&script)
                .args(["-t", &tries.to_string(), "-T", "1", "-A", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("busybox udhcpc")
        })
        .collect();
    // Waited for in turn: when each that got a lease was seen done, at most later than it
    // was; the slowest of them says how long it took.
    let mut last = Duration::ZERO;
    let mut children = children;
    for (c, i) in children.iter_mut().zip(interfaces) {
        let _ = c.wait();
        if dir.join(format!("{i}.ip")).exists() {
            last = last.max(started.elapsed());
        }
    }
    let got: Vec<Option<Ipv4Addr>> = interfaces
        .iter()
        .map(|i| std::fs::read_to_string(dir.join(format!("{i}.ip"))).ok().and_then(|t| t.trim().parse().ok()))
        .collect();
    (got, last)
}

/// Sixty-four cameras plugged in at once get distinct addresses within seconds (more at once
/// than probes may run: those past them ask again); in a pool of eight, a ninth gets none,
/// and the box counts it.
#[test]
fn sixty_four_clients_at_once_get_distinct_leases_and_a_ninth_in_a_pool_of_eight_gets_none() {
    let tmp = tempfile::tempdir().unwrap();
    let box_ip = Ipv4Addr::new(10, 71, 6, 1);
    let segment = Segment::new("m", box_ip);
    let interfaces = macvlans(&segment, 64);
    let served = serve_pool(&segment, box_ip, &tmp.path().join("catalog.redb"), (100, 199), 600);
    let (got, last) = udhcpc_at_once(&segment, tmp.path(), &interfaces, 10);
    let held: std::collections::BTreeSet<Ipv4Addr> = got.iter().flatten().copied().collect();
    eprintln!("64 clients at once: {} distinct leases, the last after {last:?}", held.len());
    assert_eq!((got.iter().flatten().count(), held.len()), (64, 64), "64 distinct leases: {got:?}");
    assert!(last < Duration::from_secs(10), "within seconds: {last:?}");
    assert_eq!(served.server.status().leases.len(), 64);
    served.stop();
    drop(segment);

    let box_ip = Ipv4Addr::new(10, 71, 7, 1);
    let segment = Segment::new("n", box_ip);
    let interfaces = macvlans(&segment, 9);
    let dir = tmp.path().join("nine");
    std::fs::create_dir_all(&dir).unwrap();
    let served = serve_pool(&segment, box_ip, &dir.join("catalog.redb"), (100, 107), 600);
    let (got, _) = udhcpc_at_once(&segment, &dir, &interfaces, 4);
    let held: std::collections::BTreeSet<Ipv4Addr> = got.iter().flatten().copied().collect();
    assert_eq!((got.iter().flatten().count(), held.len()), (8, 8), "eight of nine leased: {got:?}");
    let s = served.server.status();
    assert!(s.counts.exhausted >= 1, "the ninth counted: {s:?}");
    served.stop();
}

/// A camera's clock set from the box: `ntpdate -q` (ntpsec) in the namespace asks the box's
/// SNTP server, and the offset it measures to the box's clock (the same clock: one machine)
/// is within 10 ms.
#[test]
fn ntpdate_against_the_box_sntp_server_is_within_ten_ms_of_its_clock_and_a_flood_is_cut_at_its_rate() {
    use keeppeek::camport::serve::{SntpCounts, serve_sntp};
    use std::sync::atomic::Ordering;
    let box_ip = Ipv4Addr::new(10, 71, 8, 1);
    let segment = Segment::new("t", box_ip);
    // The camera's address, as a lease would give it.
    ip(&["-n", &segment.ns, "addr", "add", "10.71.8.50/24", "dev", &segment.camera_side]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let counts = Arc::new(SntpCounts::default());
    let clocks = keeppeek::clock::RealClocks::shared();
    rt.spawn(serve_sntp(segment.box_side.clone(), clocks, counts.clone(), shutdown));
    // Up when it answers: ntpdate asks a few times over a few hundred ms.
    let mut said = String::new();
    let ok = wait_until(Duration::from_secs(10), || {
        let out = segment.command("ntpdate").args(["-q", &box_ip.to_string()]).output().expect("ntpdate (ntpsec)");
        said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out.status.success()
    });
    assert!(ok, "ntpdate -q: {said}");
    // "2026-12-06 12:45:00.544806 (+0000) -0.000041 +/- 0.000072 10.71.8.1 s8 no-leap"
    let line = said.lines().find(|l| l.contains(&box_ip.to_string())).unwrap_or_else(|| panic!("{said}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    let offset: f64 = fields[3].parse().unwrap_or_else(|_| panic!("an offset in {line:?}"));
    eprintln!("ntpdate -q against the box: {line}");
    assert!(offset.abs() < 0.010, "within 10 ms of the box's clock: {line}");
    assert!(line.contains(" s8 "), "stratum 8, synchronized: {line}");
    assert!(counts.answered.load(Ordering::Relaxed) >= 1);

    // A flood from one address (not ntpdate's, whose requests count in its second) is cut at
    // its rate; another camera is answered meanwhile.
    for a in ["10.71.8.51/24", "10.71.8.52/24"] {
        ip(&["-n", &segment.ns, "addr", "add", a, "dev", &segment.camera_side]);
    }
    let flood = r#"
import socket, sys
def ask(src, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((src, 0)); s.settimeout(0.5)
    for _ in range(n): s.sendto(bytes([0x23]) + bytes(47), (sys.argv[1], 123))
    got = 0
    try:
        while True: s.recvfrom(512); got += 1
    except socket.timeout:
        return got
print(ask("10.71.8.52", 40), ask("10.71.8.51", 1))
"#;
    let before = counts.rate_dropped.load(Ordering::Relaxed);
    let out = segment.command("python3").args(["-c", flood, &box_ip.to_string()]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let got: Vec<u32> = said.split_whitespace().map(|n| n.parse().unwrap()).collect();
    let per_s = keeppeek::limits::CAMPORT_SNTP_REQUESTS_PER_S;
    // The 40 go out within a second, or across the turn of one.
    assert!(got[0] >= per_s && got[0] <= 2 * per_s, "{said}");
    assert_eq!(got[1], 1, "the other camera answered: {said}");
    assert_eq!(counts.rate_dropped.load(Ordering::Relaxed) - before, u64::from(40 - got[0]), "{said}");
    let _ = stop.send(true);
    rt.shutdown_timeout(Duration::from_secs(2));
}

/// The LAN beside the camera port, with a DHCP server of its own (dnsmasq, as a router
/// would run it): a client there gets its address from that server, and the box, serving
/// its port, never hears the LAN's DHCP nor answers there.
#[test]
fn on_the_lan_beside_a_foreign_dhcp_server_the_box_never_answers() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let port_ip = Ipv4Addr::new(10, 71, 10, 1);
    let port = Segment::new("p", port_ip);
    let served = serve(&port, port_ip, &tmp.path().join("catalog.redb"), 120);
    // The LAN: the box's LAN interface here; the router and a client there, each a macvlan.
    let lan = Segment::new("l", Ipv4Addr::new(10, 71, 9, 1));
    for name in ["router", "client"] {
        ip(&[
            "-n",
            &lan.ns,
            "link",
            "add",
            "link",
            &lan.camera_side,
            "name",
            name,
            "type",
            "macvlan",
            "mode",
            "bridge",
        ]);
        ip(&["-n", &lan.ns, "link", "set", name, "up"]);
    }
    ip(&["-n", &lan.ns, "addr", "add", "10.71.9.2/24", "dev", "router"]);
    let mut dnsmasq = lan
        .command("dnsmasq")
        .args(["--no-daemon", "--port=0", "--interface=router", "--bind-interfaces"])
        .args(["--dhcp-range=10.71.9.150,10.71.9.160,10m", "--no-ping"])
        .arg(format!("--dhcp-leasefile={}", tmp.path().join("dnsmasq.leases").display()))
        .arg(format!("--pid-file={}", tmp.path().join("dnsmasq.pid").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dnsmasq");
    let script = tmp.path().join("lan.sh");
    let events = tmp.path().join("lan.events");
    std::fs::write(&script, format!("#!/bin/sh\necho \"$1 $ip $serverid\" >> {}\n", events.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = lan
        .command("busybox")
        .args(["udhcpc", "-f", "-q", "-n", "-i", "client", "-t", "10", "-T", "1", "-s"])
        .arg(&script)
        .output()
        .expect("busybox udhcpc");
    let _ = dnsmasq.kill();
    let _ = dnsmasq.wait();
    let said = std::fs::read_to_string(&events).unwrap_or_default();
    assert!(out.status.success(), "the LAN client got no lease: {said}");
    let bound = said.lines().find(|l| l.starts_with("bound ")).unwrap_or_else(|| panic!("{said}"));
    let fields: Vec<&str> = bound.split(' ').collect();
    let got: Ipv4Addr = fields[1].parse().unwrap();
    assert!((150..=160).contains(&got.octets()[3]) && fields[2] == "10.71.9.2", "dnsmasq's lease: {bound}");
    let s = served.server.status();
    assert_eq!(
        (s.counts.offers, s.counts.acks, s.malformed, s.leases.len()),
        (0, 0, 0, 0),
        "the box heard nothing: {s:?}"
    );
    served.stop();
}

/// Another address of the box's (on `lo`: this kernel has no dummy interfaces), removed
/// when dropped.
struct LoAddress(String);

impl LoAddress {
    fn new(address: &str) -> LoAddress {
        let with_prefix = format!("{address}/32");
        let _ = Command::new("ip").args(["addr", "del", &with_prefix, "dev", "lo"]).stderr(Stdio::null()).status();
        ip(&["addr", "add", &with_prefix, "dev", "lo"]);
        LoAddress(with_prefix)
    }
}

impl Drop for LoAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["addr", "del", &self.0, "dev", "lo"]).status();
    }
}

/// The box's answer at `path` as JSON, as `admin`.
fn api(port: u16, admin: &(String, String), path: &str) -> serde_json::Value {
    let (code, v) = crate::config_apply::call(port, admin, "GET", path, &serde_json::Value::Null);
    assert_eq!(code, 200, "{path}: {v}");
    v
}

/// The real keeppeek with `[camera_port]` on the pair tools/onvif-camera.sh makes: oxvif's
/// mock ONVIF device and the RTSP test camera plugged in behind it take their address from
/// the box (busybox udhcpc), are asked over ONVIF and RTSP and shown as plugged in with
/// their model; read with the password and added, they record. The web face does not answer
/// at the box's address on the port. After keeppeek restarts, the camera is still shown and
/// renews the same address; unplugged (its lease released), it is shown as unplugged.
#[test]
fn a_camera_plugged_into_the_port_is_found_added_with_its_password_records_and_keeps_its_address() {
    use crate::common::{CAMERA_PASSWORD, CAMERA_USER, Daemon, OnvifCamera, free_port, setup_admin, write_config};
    use serde_json::json;
    let n = 9;
    let mut cam = OnvifCamera::plugged(n);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_config(
        dir.path(),
        &format!(
            "listen = \"0.0.0.0:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [camera_port]\ninterface = \"kpo{n}-h\"\naddress = \"10.213.{n}.1/24\"\npool = \"10.213.{n}.100-10.213.{n}.107\"\n\
             lease_time_s = 120\n"
        ),
    );
    let mut d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    cam.wait_ready();
    let addr: Ipv4Addr = cam.address.parse().unwrap();
    assert!((100..=107).contains(&addr.octets()[3]), "{addr} from the pool");

    // Plugged in: asked over ONVIF and RTSP, with what it said.
    let mut status = serde_json::Value::Null;
    let asked = wait_until(Duration::from_secs(30), || {
        status = api(port, &admin, "/api/system/camera-port");
        let c = &status["cameras"][0];
        c["onvif"]["hardware"] == "MockCam-4K" && c["rtsp_url"].is_string() && c["checking"] == false
    });
    assert!(asked, "{status:#}");
    let c = &status["cameras"][0];
    assert_eq!(status["cameras"].as_array().unwrap().len(), 1, "{status:#}");
    assert_eq!(
        (c["plugged_in"].as_bool(), c["address"].as_str(), c["hostname"].as_str(), c["onvif"]["name"].as_str()),
        (
            Some(true),
            Some(cam.address.as_str()),
            Some(format!("porch-{n}").as_str()),
            Some(format!("Porch-{n}").as_str())
        ),
        "{status:#}"
    );
    assert_eq!(c["rtsp_url"], format!("rtsp://{addr}:554/").as_str());
    assert_eq!(status["config"]["interface"], format!("kpo{n}-h").as_str());
    assert_eq!(status["dhcp"]["leases"].as_array().unwrap().len(), 1, "{status:#}");
    assert!(status["problem"].is_null(), "{status:#}");
    let rp_filter = std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/kpo{n}-h/rp_filter")).unwrap();
    assert_eq!(rp_filter.trim(), "1", "strict reverse-path filtering on the port");

    // The web face is not served at the box's address on the port; it is on the LAN's.
    let mut s = std::net::TcpStream::connect((Ipv4Addr::new(10, 213, n, 1), port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = std::io::Write::write_all(&mut s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut got);
    assert!(got.is_empty(), "closed unanswered: {}", String::from_utf8_lossy(&got));
    // Nor to a camera on the port at another of the box's addresses (Linux takes a packet for
    // any of them on any interface): an address on `lo` stands for the LAN's.
    let lan = LoAddress::new(&format!("10.214.{n}.1"));
    ip(&["-n", &format!("kp-onvif-{n}"), "route", "add", &format!("10.214.{n}.1/32"), "dev", &format!("kpo{n}-c")]);
    let ask = format!(
        "import socket\ntry:\n    s = socket.create_connection(('10.214.{n}.1', {port}), 5)\n    s.settimeout(5)\n    \
         s.sendall(b'GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n    print(len(s.recv(100)))\n\
         except (ConnectionResetError, BrokenPipeError):\n    print(0)"
    );
    let out =
        Command::new("ip").args(["netns", "exec", &format!("kp-onvif-{n}"), "python3", "-c", &ask]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "closed unanswered: {out:?}");
    drop(lan);
    let (_, _, metrics) = crate::common::request(port, "GET", "/metrics", &[("cookie", admin.0.as_str())], "");
    assert!(metrics.contains("keeppeek_http_camera_port_refused_total 2"), "{metrics}");
    for sample in
        ["keeppeek_camport_serving 1", "keeppeek_camport_leases 1", "keeppeek_camport_cameras{state=\"plugged_in\"} 1"]
    {
        assert!(metrics.contains(sample), "{sample} in {metrics}");
    }

    // Its streams read with the password, then added: it records.
    let device_url = c["onvif"]["device_url"].as_str().unwrap().to_string();
    let body = json!({ "address": device_url, "username": CAMERA_USER, "password": CAMERA_PASSWORD });
    let (code, v) = crate::config_apply::call(port, &admin, "POST", "/api/cameras/onvif", &body);
    assert_eq!((code, v["ok"].as_bool()), (200, Some(true)), "{v}");
    let main = v["streams"]["main"].as_str().unwrap().to_string();
    assert_eq!(main, format!("rtsp://{addr}:554/mock/stream"));
    let snap = api(port, &admin, "/api/config");
    let change = json!({ "base": snap["rev"], "changes": [{ "op": "add_camera", "name": "porch",
        "set": { "main": { "url": main }, "username": CAMERA_USER, "password": CAMERA_PASSWORD } }] });
    let (code, v) = crate::config_apply::call(port, &admin, "POST", "/api/config/apply", &change);
    assert_eq!(code, 200, "{v}");
    let added_us = crate::common::wall_us();
    let recorded = wait_until(Duration::from_secs(30), || {
        let path = format!(
            "/api/streams/porch/main/recordings?from_us={}&to_us={}",
            added_us - 60_000_000,
            crate::common::wall_us() + 1_000_000
        );
        let runs = api(port, &admin, &path)["runs"].clone();
        runs.as_array().is_some_and(|r| r.iter().any(|r| r["end_us"].as_i64().unwrap_or(0) > added_us + 2_000_000))
    });
    assert!(recorded, "the plugged-in camera records: {}", d.log_text());

    // The port changed while keeppeek runs: its servers start again with the new lease time
    // and the web face on the port; the camera renews the same address, and records on.
    let snap = api(port, &admin, "/api/config");
    let change = json!({ "base": snap["rev"], "changes": [
        { "op": "set", "key": "camera_port.lease_time_s", "value": 600 },
        { "op": "set", "key": "camera_port.web", "value": true }] });
    let (code, v) = crate::config_apply::call(port, &admin, "POST", "/api/config/apply", &change);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["restarting"], false, "{v}");
    let live = v["plan"]["effect"]["live"].to_string();
    assert!(live.contains("camera_port.lease_time_s") && live.contains("camera_port.web"), "taken live: {v}");
    let changed = wait_until(Duration::from_secs(10), || {
        let s = api(port, &admin, "/api/system/camera-port");
        s["config"]["lease_time_s"] == 600 && s["problem"].is_null() && s["dhcp"].is_object()
    });
    assert!(changed, "the servers follow the change");
    let renews = cam.leases().len();
    cam.renew();
    assert!(wait_until(Duration::from_secs(15), || cam.leases().len() > renews), "{:?}", cam.leases());
    assert_eq!(cam.leases().last().unwrap(), &("renew".to_string(), cam.address.clone()));
    let mut s = std::net::TcpStream::connect((Ipv4Addr::new(10, 213, n, 1), port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = std::io::Write::write_all(&mut s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut got);
    assert!(got.starts_with(b"HTTP/1.1 200"), "served on the port now: {}", String::from_utf8_lossy(&got));

    // keeppeek restarts: the camera is known from its lease, and renews the same address.
    d.stop();
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let (code, head, body) = crate::common::request(
        port,
        "POST",
        "/api/login",
        &[],
        r#"{"username":"root","password":"correct horse battery"}"#,
    );
    assert_eq!(code, 200, "{head}{body}");
    let admin = crate::common::session_of(&head, &body);
    let status = api(port, &admin, "/api/system/camera-port");
    assert_eq!(status["dhcp"]["leases"][0]["ip"], cam.address.as_str(), "{status:#}");
    cam.renew();
    let renewed = wait_until(Duration::from_secs(15), || cam.leases().iter().any(|(what, _)| what == "renew"));
    assert!(renewed, "{:?}", cam.leases());
    assert!(cam.leases().iter().all(|(_, a)| a == &cam.address), "the same address: {:?}", cam.leases());
    let shown = wait_until(Duration::from_secs(15), || {
        api(port, &admin, "/api/system/camera-port")["cameras"][0]["plugged_in"] == true
    });
    assert!(shown, "shown plugged in after the restart");

    // Unplugged: its lease released, it is shown so.
    drop(cam);
    let mut status = serde_json::Value::Null;
    let unplugged = wait_until(Duration::from_secs(15), || {
        status = api(port, &admin, "/api/system/camera-port");
        status["cameras"][0]["plugged_in"] == false
    });
    assert!(unplugged, "{status:#}");
    assert_eq!(status["dhcp"]["counts"]["releases"], 1, "{status:#}");

    // The port removed: nothing of it is shown, and its interface keeps no address of the box.
    let snap = api(port, &admin, "/api/config");
    let change = json!({ "base": snap["rev"], "changes": [{ "op": "set", "key": "camera_port", "value": null }] });
    let (code, v) = crate::config_apply::call(port, &admin, "POST", "/api/config/apply", &change);
    assert_eq!(code, 200, "{v}");
    let status = api(port, &admin, "/api/system/camera-port");
    assert!(status["config"].is_null() && status["cameras"].as_array().is_some_and(|c| c.is_empty()), "{status:#}");
}

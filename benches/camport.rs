//! Camera port benchmark: KeepPeek's DHCP server against dnsmasq on the same veth segment, in
//! one run (root: it makes a network namespace and a veth pair, removed after).
//!
//! A client in the namespace (Python's socket module: it sends exactly what is measured)
//! asks for `n` leases at once, each from a MAC of its own: every DISCOVER sent together,
//! then a REQUEST for each offer, each asked again a second later while unanswered, as real
//! clients do. Each server in turn, on the same box side of the same segment, with its
//! defaults: KeepPeek probes each new address with ARP (`CAMPORT_ARP_PROBE_MS`), dnsmasq
//! pings it.
//!
//! 1. **Leases per second**: `n` over the time from the first DISCOVER to the last ACK.
//! 2. **Reply latency**: each OFFER from its client's first DISCOVER, each ACK from its
//!    REQUEST; median and 95th percentile. Goal: KeepPeek's p95 at most dnsmasq's.
//! 3. **Memory per lease**: the heap (a counting allocator) KeepPeek's server holds with `n`
//!    leases, over what it held before the first, per lease. Goal: at most 256 B.
//!
//! Reports: `target/bench/camport.json`, `target/bench/camport.md`.
//! `cargo bench --bench camport`             the full run (200 leases)
//! `cargo bench --bench camport -- --smoke`  16 leases (CI)

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use keeppeek::camport::dhcp;
use keeppeek::camport::serve::{DhcpServer, Port};
use keeppeek::catalog::Catalog;
use serde_json::{Value, json};

#[path = "support/heap.rs"]
mod heap;
#[path = "support/segment.rs"]
mod segment;
use heap::LIVE_BYTES;
use segment::Segment;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

const BOX_IP: Ipv4Addr = Ipv4Addr::new(10, 72, 0, 1);

/// The client: `n` DORA exchanges at once; prints `O <ms>` for each offer, `A <ms>` for each
/// ACK and `T <s>` for the whole. An answer's time is when the kernel received it
/// (`SO_TIMESTAMPNS`), not when this one-threaded client got round to reading it: with
/// answers coming densely, the client's own queue would be measured.
const CLIENT: &str = r#"
import socket, struct, sys, time
iface, n = sys.argv[1], int(sys.argv[2])
SO_TIMESTAMPNS = 35
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
s.bind(("0.0.0.0", 68))
s.settimeout(0.01)
def msg(kind, xid, req=None, sid=None):
    p = bytearray(236); p[0] = 1; p[1] = 1; p[2] = 6
    p[4:8] = xid.to_bytes(4, "big"); p[10] = 0x80
    p[28:34] = bytes([2, 0x4b, 0x42, 0, xid >> 8, xid & 255])
    p += bytes([99, 130, 83, 99, 53, 1, kind])
    if req: p += bytes([50, 4]) + socket.inet_aton(req)
    if sid: p += bytes([54, 4]) + socket.inet_aton(sid)
    p += bytes([255]); p += bytes(max(0, 300 - len(p)))
    return bytes(p)
def kind_of(d):
    i = 240
    while i + 1 < len(d) and d[i] != 255:
        if d[i] == 0: i += 1; continue
        if d[i] == 53: return d[i + 2], sid_of(d)
        i += 2 + d[i + 1]
    return None, None
def sid_of(d):
    i = 240
    while i + 1 < len(d) and d[i] != 255:
        if d[i] == 0: i += 1; continue
        if d[i] == 54: return socket.inet_ntoa(d[i + 2:i + 6])
        i += 2 + d[i + 1]
    return None
def arrived(anc):
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16]); return sec + nsec / 1e9
    return time.time()
t0 = time.time()
first = {}; offers = {}; asked = {}; acks = {}; last_sent = {}
for x in range(1, n + 1):
    first[x] = last_sent[x] = time.time(); s.sendto(msg(1, x), ("255.255.255.255", 67))
deadline = t0 + max(60, 3 * n)
resend_at = 0.0
while len(acks) < n and time.time() < deadline:
    try:
        d, anc, _, _ = s.recvmsg(2048, 64)
        at = arrived(anc)
        x = int.from_bytes(d[4:8], "big"); k, sid = kind_of(d); ip = socket.inet_ntoa(d[16:20])
        if k == 2 and x in first and x not in offers:
            offers[x] = (at - first[x], ip, sid); asked[x] = last_sent[x] = time.time()
            s.sendto(msg(3, x, ip, sid), ("255.255.255.255", 67))
        elif k == 5 and x in asked and x not in acks:
            acks[x] = at - asked[x]
    except socket.timeout:
        pass
    now = time.time()
    if now < resend_at: continue
    resend_at = now + 0.05
    for x in range(1, n + 1):
        if x not in acks and now - last_sent[x] > 1.0:
            last_sent[x] = now
            if x in offers: s.sendto(msg(3, x, offers[x][1], offers[x][2]), ("255.255.255.255", 67))
            else: s.sendto(msg(1, x), ("255.255.255.255", 67))
total = time.time() - t0
for x in offers: print("O %.3f" % (offers[x][0] * 1000))
for x in acks: print("A %.3f" % (acks[x] * 1000))
print("T %.4f" % total)
"#;

/// Runs the client in `segment` for `n` leases: (offer ms, ack ms, seconds).
fn client(segment: &Segment, n: usize) -> (Vec<f64>, Vec<f64>, f64) {
    let out = segment
        .command("python3")
        .args(["-c", CLIENT, &segment.camera_side, &n.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("python3");
    assert!(out.status.success(), "the client failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut offers, mut acks, mut total) = (Vec::new(), Vec::new(), 0.0);
    for line in text.lines() {
        let (k, v) = line.split_once(' ').unwrap();
        let v: f64 = v.parse().unwrap();
        match k {
            "O" => offers.push(v),
            "A" => acks.push(v),
            _ => total = v,
        }
    }
    assert_eq!(acks.len(), n, "every client acknowledged:\n{text}");
    (offers, acks, total)
}

fn spread(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({ "median_ms": at(0.5), "p95_ms": at(0.95), "n": v.len() })
}

fn keeppeek(segment: &Segment, work: &Path, n: usize) -> Value {
    let catalog = Arc::new(Catalog::open(&work.join("catalog.redb")).unwrap());
    let port = Port {
        interface: segment.box_side.clone(),
        server: dhcp::Server { ip: BOX_IP, mask: Ipv4Addr::new(255, 255, 255, 0), router: false },
        pool: (Ipv4Addr::new(10, 72, 0, 10), Ipv4Addr::new(10, 72, 0, 250)),
        lease_s: 3600,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = DhcpServer::new(port.clone(), catalog.clone(), keeppeek::clock::RealClocks::shared()).unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = server.clone();
    rt.spawn(async move { running.run(shutdown).await.expect("the server starts") });
    std::thread::sleep(Duration::from_millis(200));
    let (offers, acks, total) = client(segment, n);
    let leases = server.status().leases.len();
    assert_eq!(leases, n, "every lease held");
    let _ = stop.send(true);
    rt.shutdown_timeout(Duration::from_secs(2));
    drop(server);
    // What a server holds for its leases: one made on the catalog's `n` leases, over one made
    // on none (each read once first, so the catalog's cache is warm in both).
    let held = |catalog: &Arc<Catalog>| {
        drop(catalog.camport_leases().unwrap());
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        let server = DhcpServer::new(port.clone(), catalog.clone(), keeppeek::clock::RealClocks::shared()).unwrap();
        let bytes = LIVE_BYTES.load(Ordering::Relaxed) - before;
        drop(server);
        bytes
    };
    let full = held(&catalog);
    let empty = held(&Arc::new(Catalog::open(&work.join("empty.redb")).unwrap()));
    json!({
        "seconds": total, "leases_per_s": n as f64 / total,
        "offer": spread(offers), "ack": spread(acks),
        "bytes_per_lease": (full - empty) as f64 / n as f64,
    })
}

/// dnsmasq on `segment`'s box side; with `ping`, its default check of each new address.
fn dnsmasq(segment: &Segment, work: &Path, n: usize, ping: bool) -> Value {
    let _ = std::fs::remove_file(work.join("dnsmasq.leases"));
    let mut child = Command::new("dnsmasq")
        .args(["--no-daemon", "--port=0", "--bind-interfaces", "--dhcp-authoritative"])
        .args(if ping { &[][..] } else { &["--no-ping"][..] })
        .arg(format!("--interface={}", segment.box_side))
        .args(["--dhcp-range=10.72.0.10,10.72.0.250,1h", "--dhcp-lease-max=1000"])
        .arg(format!("--dhcp-leasefile={}", work.join("dnsmasq.leases").display()))
        .arg(format!("--pid-file={}", work.join("dnsmasq.pid").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dnsmasq");
    std::thread::sleep(Duration::from_millis(300));
    let (offers, acks, total) = client(segment, n);
    let _ = child.kill();
    let _ = child.wait();
    json!({
        "seconds": total, "leases_per_s": n as f64 / total,
        "offer": spread(offers), "ack": spread(acks),
    })
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let n = if smoke { 16 } else { 200 };
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let work = out.join("camport-work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    // dnsmasq first, then KeepPeek, each on a segment of its own made alike.
    let theirs = {
        let segment = Segment::new("q", BOX_IP);
        dnsmasq(&segment, &work, n, true)
    };
    let theirs_no_ping = {
        let segment = Segment::new("r", BOX_IP);
        dnsmasq(&segment, &work, n, false)
    };
    let ours = {
        let segment = Segment::new("k", BOX_IP);
        keeppeek(&segment, &work, n)
    };
    let report = json!({
        "mode": if smoke { "smoke" } else { "full" },
        "leases": n,
        "dnsmasq": theirs,
        "dnsmasq_no_ping": theirs_no_ping,
        "ratio_offer_p95_no_ping": ours["offer"]["p95_ms"].as_f64().unwrap() / theirs_no_ping["offer"]["p95_ms"].as_f64().unwrap(),
        "ratio_ack_p95_no_ping": ours["ack"]["p95_ms"].as_f64().unwrap() / theirs_no_ping["ack"]["p95_ms"].as_f64().unwrap(),
        "keeppeek": ours,
        "ratio_offer_p95": ours["offer"]["p95_ms"].as_f64().unwrap() / theirs["offer"]["p95_ms"].as_f64().unwrap(),
        "ratio_ack_p95": ours["ack"]["p95_ms"].as_f64().unwrap() / theirs["ack"]["p95_ms"].as_f64().unwrap(),
        "probe_ms": keeppeek::limits::CAMPORT_ARP_PROBE_MS,
    });
    std::fs::write(out.join("camport.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out.join("camport.md"), &md).unwrap();
    println!("{md}");
    let _ = std::io::stdout().flush();
    let _ = std::fs::remove_dir_all(&work);
}

fn markdown(r: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Camera port: DHCP, {} leases asked for at once ({}), KeepPeek against dnsmasq on the same veth setup\n",
        r["leases"],
        r["mode"].as_str().unwrap()
    );
    let _ = writeln!(
        md,
        "| server | leases/s | OFFER median | OFFER p95 | ACK median | ACK p95 |\n|---|---|---|---|---|---|"
    );
    for (name, k) in [
        ("dnsmasq (baseline, its defaults: a ping of each new address)", "dnsmasq"),
        ("dnsmasq `--no-ping` (no check of an address before it is offered)", "dnsmasq_no_ping"),
        ("KeepPeek (an ARP probe of each new address)", "keeppeek"),
    ] {
        let s = &r[k];
        let _ = writeln!(
            md,
            "| {name} | {:.0} | {:.1} ms | {:.1} ms | {:.2} ms | {:.2} ms |",
            f(&s["leases_per_s"]),
            f(&s["offer"]["median_ms"]),
            f(&s["offer"]["p95_ms"]),
            f(&s["ack"]["median_ms"]),
            f(&s["ack"]["p95_ms"])
        );
    }
    let _ = writeln!(
        md,
        "\nKeepPeek's p95 over dnsmasq's: OFFER ×{:.2}, ACK ×{:.2} (goal: at most ×1); over dnsmasq's without its check: OFFER ×{:.2}, ACK ×{:.2}. An OFFER waits for its probe ({} ms). Memory: {:.0} B of heap per lease held (goal ≤ 256 B).",
        f(&r["ratio_offer_p95"]),
        f(&r["ratio_ack_p95"]),
        f(&r["ratio_offer_p95_no_ping"]),
        f(&r["ratio_ack_p95_no_ping"]),
        r["probe_ms"],
        f(&r["keeppeek"]["bytes_per_lease"])
    );
    md
}

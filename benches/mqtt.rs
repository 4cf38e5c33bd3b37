//! MQTT benchmark: events from the durable commit to a subscriber of a real broker (Debian's
//! `mosquitto`, started here on a free port), each result beside its baseline in one run.
//!
//! 1. **Latency**: the intake's answer (the event durable, its outbox row in the same commit)
//!    until an independent subscriber (QoS 0, its own thread and connection) holds the
//!    event's message, p50/p95: single events one at a time, envelope only and with a 4K
//!    JPEG (~420 KB; Home Assistant's snapshot image goes out too), and a burst of 1,000
//!    envelopes from 8 posters at once. The Home Assistant part of the room is on (labels,
//!    last event, snapshot), as on a box. Baseline: a bare client publishing the same payload
//!    at QoS 1 to the same broker, until the same subscriber holds it. Goal: commit →
//!    delivery p95 ≤ 10 ms (the reference NVR: 34.7 ms from publication to durable commit).
//! 2. **Drain after an outage**: N events stored while the room is not connected (N = 10,000
//!    full, the outbox's ceiling), then the room connects: events a second until the
//!    subscriber holds all N, each once and in order, against the rate the intake stores
//!    events at (the burst's).
//! 3. **Memory per queued event**: the heap the process holds (a counting allocator: bytes
//!    allocated less bytes freed) after the N events are stored and waiting, per event,
//!    against the same N stored with no outbox (the catalog's page cache holds both); and the
//!    most the heap rose over that while the room drained them.
//!
//! Reports: `target/bench/mqtt.json`, `target/bench/mqtt.md`.
//! `cargo bench --bench mqtt`             the full run
//! `cargo bench --bench mqtt -- --smoke`  small counts (CI)

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keeppeek::base::{StreamKey, StreamKind};
use keeppeek::cameras::{Cameras, RunningStream};
use keeppeek::catalog::Catalog;
use keeppeek::config::MqttConfig;
use keeppeek::events::Events;
use keeppeek::live::Fanout;
use keeppeek::mqtt::Mqtt;
use keeppeek::mqtt::link::{Dial, Link};
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::{Packet, Publish, Subscribe};
use serde_json::{Value, json};

#[path = "support/fixtures.rs"]
mod fixtures;

#[path = "support/heap.rs"]
mod heap;
use heap::{LIVE_BYTES, PEAK_BYTES};

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

const CAMERA: &str = "porch";
const PREFIX: &str = "bench";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn percentiles(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    json!({ "n": v.len(), "p50": at(0.5), "p95": at(0.95), "max": at(1.0) })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fixture_jpeg() -> Bytes {
    Bytes::from(fixtures::fixture("snapshot-4k.jpg"))
}

/// Debian's mosquitto on a free port, killed when dropped.
struct Broker {
    child: Child,
    port: u16,
}

impl Broker {
    fn start(work: &Path) -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let conf = work.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 0\n"),
        )
        .unwrap();
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto (Debian's package mosquitto; tools/test.sh installs it)");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(10), "mosquitto did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Broker { child, port }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dial(port: u16, client_id: &str) -> Dial {
    Dial {
        host: "127.0.0.1".into(),
        port,
        tls: None,
        client_id: client_id.into(),
        login: None,
        will_topic: format!("{PREFIX}/{client_id}/gone"),
        keep_alive_s: 60,
    }
}

/// What the subscriber heard: the `id` of each event message (or the `n` of a baseline
/// message), and when.
type Heard = mpsc::Receiver<(u64, Instant)>;

/// An independent subscriber to `<prefix>/events` and `<prefix>/baseline`, at QoS 0, on a
/// thread and connection of its own.
fn subscriber(port: u16) -> Heard {
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let mut link = Link::open(&dial(port, "bench-subscriber")).await.expect("the subscriber connects");
            let mut sub = Subscribe::new(format!("{PREFIX}/events"), QoS::AtMostOnce);
            sub.add(format!("{PREFIX}/baseline"), QoS::AtMostOnce);
            sub.pkid = 1;
            link.send(&Packet::Subscribe(sub)).await.unwrap();
            loop {
                match link.next().await {
                    Ok(Packet::SubAck(_)) => ready_tx.send(()).unwrap(),
                    Ok(Packet::Publish(p)) => {
                        let at = Instant::now();
                        let v: Value = serde_json::from_slice(&p.payload).expect("a JSON message");
                        let id = v.get("id").or_else(|| v.get("n")).and_then(Value::as_u64).expect("an id");
                        if tx.send((id, at)).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    // The broker stopped at the end (or failed: the waits for messages say so).
                    Err(_) => return,
                }
            }
        });
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).expect("the subscription acknowledged");
    rx
}

/// Waits for the message of `id` (earlier ones may come first: they are returned too).
fn heard(rx: &Heard, id: u64) -> Instant {
    loop {
        let (got, at) = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("message {id} never came"));
        if got == id {
            return at;
        }
    }
}

/// The box's side: a catalog with its outbox on, the intake waking the room, the room with
/// its Home Assistant part.
struct TheBox {
    rt: tokio::runtime::Runtime,
    events: Arc<Events>,
    mqtt: Arc<Mqtt>,
    stop: tokio::sync::watch::Sender<bool>,
    room: Option<tokio::task::JoinHandle<()>>,
    _orders: tokio::sync::mpsc::Receiver<keeppeek::mqtt::home::Order>,
}

impl TheBox {
    fn new(dir: &Path, port: u16, outbox: bool) -> TheBox {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
        let config = MqttConfig {
            host: "127.0.0.1".into(),
            port,
            tls: false,
            ca_pem: None,
            username: None,
            password: None,
            prefix: PREFIX.into(),
            discovery_prefix: "homeassistant".into(),
            client_id: format!("bench-box-{}", dir.file_name().unwrap().to_string_lossy()),
        };
        catalog.set_outbox(outbox).unwrap();
        let mqtt = Mqtt::new(catalog.clone(), Some(config));
        let cameras = Arc::new(Cameras::default());
        let live = Arc::new(Fanout::new(keeppeek::live::gop_pool()));
        cameras.add([RunningStream {
            key: StreamKey::new(CAMERA, StreamKind::Main),
            state: Arc::default(),
            recording: None,
            live,
        }]);
        // Home Assistant's commands: none come here.
        let (orders, orders_rx) = tokio::sync::mpsc::channel(8);
        mqtt.set_around(keeppeek::mqtt::home::Around {
            cameras: cameras.clone(),
            data_dir: dir.to_path_buf(),
            box_id: "bench".into(),
            orders,
        });
        let events = Arc::new(
            Events::new(
                catalog.clone(),
                dir.to_path_buf(),
                cameras,
                None,
                u64::MAX,
                keeppeek::clock::RealClocks::shared(),
                Arc::default(),
            )
            .with_stored_wake(mqtt.wake()),
        );
        let (stop, _) = tokio::sync::watch::channel(false);
        TheBox { rt, events, mqtt, stop, room: None, _orders: orders_rx }
    }

    /// Starts the room: it connects and sends what waits.
    fn connect(&mut self) {
        let room = self.rt.spawn(self.mqtt.clone().run(self.stop.subscribe()));
        self.room = Some(room);
        let t = Instant::now();
        while !self.mqtt.stats.connected.load(Ordering::Relaxed) {
            assert!(t.elapsed() < Duration::from_secs(10), "the room connects");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn post(&self, n: u64, snapshot: Option<Bytes>) -> (u64, Instant) {
        let envelope =
            format!(r#"{{"camera":"{CAMERA}","labels":["person"],"score":0.8,"text":"bench {n}","record":false}}"#);
        let accepted = self.rt.block_on(self.events.publish("token:1", envelope.as_bytes(), snapshot)).unwrap();
        (accepted.id, Instant::now())
    }
}

impl Drop for TheBox {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(room) = self.room.take() {
            let _ = self.rt.block_on(room);
        }
    }
}

/// Single events, one at a time: commit → delivery.
fn single(b: &TheBox, rx: &Heard, n: usize, snapshot: Option<Bytes>) -> Value {
    let (mut commit, mut delivery) = (Vec::new(), Vec::new());
    for i in 0..n {
        let t = Instant::now();
        let (id, durable) = b.post(i as u64, snapshot.clone());
        commit.push(ms(durable - t));
        delivery.push(ms(heard(rx, id) - durable));
        std::thread::sleep(Duration::from_millis(5));
    }
    json!({ "events": n, "commit_ms": percentiles(commit), "delivery_ms": percentiles(delivery) })
}

/// A burst of `n` envelopes from 8 posters at once: each one's commit → delivery.
fn burst(b: &TheBox, rx: &Heard, n: usize) -> Value {
    let durable: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    b.rt.block_on(async {
        let mut posters = Vec::new();
        for _ in 0..8 {
            let (events, durable, next) = (b.events.clone(), durable.clone(), next.clone());
            posters.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n as u64 {
                        return;
                    }
                    let envelope =
                        format!(r#"{{"camera":"{CAMERA}","labels":["person"],"text":"burst {i}","record":false}}"#);
                    let a = events.publish("token:1", envelope.as_bytes(), None).await.unwrap();
                    durable.lock().unwrap().insert(a.id, Instant::now());
                }
            }));
        }
        for p in posters {
            p.await.unwrap();
        }
    });
    let posted = t.elapsed();
    let mut got = HashMap::new();
    while got.len() < n {
        let (id, at) = rx.recv_timeout(Duration::from_secs(10)).expect("every burst event delivered");
        got.insert(id, at);
    }
    let all = t.elapsed();
    let durable = durable.lock().unwrap();
    let delivery: Vec<f64> = durable.iter().map(|(id, d)| ms(got[id].saturating_duration_since(*d))).collect();
    assert_eq!(delivery.len(), n);
    json!({ "events": n, "posted_ms": ms(posted), "all_delivered_ms": ms(all), "delivery_ms": percentiles(delivery) })
}

/// A bare client's QoS 1 publish of a payload like an event's, until the subscriber holds
/// it, one at a time.
fn baseline(port: u16, rx: &Heard, singles: usize) -> Value {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut link = Link::open(&dial(port, "bench-baseline")).await.unwrap();
        let payload = |i: usize| {
            json!({ "n": i, "rev": 1, "camera": CAMERA, "labels": ["person"], "score": 0.8, "time": "2026-12-05T08:00:00.000Z",
                "time_us": 1_796_464_800_000_000i64, "end_us": null, "text": format!("bench {i}"), "snapshot_url": null,
                "event_url": "/#/events/1" })
            .to_string()
        };
        let publish = |i: usize| {
            let mut p = Publish::new(format!("{PREFIX}/baseline"), QoS::AtLeastOnce, payload(i));
            p.pkid = (i % 60_000 + 1) as u16;
            Packet::Publish(p)
        };
        let mut one = Vec::new();
        for i in 0..singles {
            let t = Instant::now();
            link.send(&publish(i)).await.unwrap();
            one.push(ms(heard(rx, i as u64) - t));
            loop {
                if let Packet::PubAck(_) = link.next().await.unwrap() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        json!({ "single_ms": percentiles(one) })
    })
}

/// Events stored with the room away, then drained: rate, order, memory.
fn drain(work: &Path, port: u16, rx: &Heard, n: usize) -> Value {
    // The same events stored with no outbox: the heap the rest holds for them (the catalog's
    // page cache, mostly).
    let plain = {
        let b = TheBox::new(&work.join("no-outbox"), port, false);
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        for i in 0..n {
            b.post(i as u64, None);
        }
        (LIVE_BYTES.load(Ordering::Relaxed) - before) as f64 / n as f64
    };
    let mut b = TheBox::new(&work.join("drain"), port, true);
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(b.post(i as u64, None).0);
    }
    let queued = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(queued, Ordering::Relaxed);
    let t = Instant::now();
    b.connect();
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let (id, _) = rx.recv_timeout(Duration::from_secs(20)).expect("every stored event delivered after the outage");
        got.push(id);
    }
    let took = t.elapsed();
    let peak = PEAK_BYTES.load(Ordering::Relaxed);
    assert_eq!(got, ids, "each once, in order");
    // Nothing more comes.
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "an event delivered twice");
    json!({
        "events": n,
        "ms": ms(took),
        "per_s": n as f64 / took.as_secs_f64(),
        "heap_per_queued_event_bytes": (queued - before) as f64 / n as f64,
        "heap_per_event_without_outbox_bytes": plain,
        "heap_rise_while_draining_bytes": peak - queued,
    })
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (singles, burst_n, drain_n) = if smoke { (20, 100, 500) } else { (200, 1_000, 10_000) };
    let out: PathBuf = repo().join("target/bench");
    let work = out.join("mqtt-work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let jpeg = fixture_jpeg();
    let broker = Broker::start(&work);
    let rx = subscriber(broker.port);

    let base = baseline(broker.port, &rx, singles);
    let mut b = TheBox::new(&work.join("latency"), broker.port, true);
    b.connect();
    // The first event announces the camera's label to Home Assistant: not what is measured.
    let (id, _) = b.post(0, None);
    heard(&rx, id);
    let envelope = single(&b, &rx, singles, None);
    let with_jpeg = single(&b, &rx, singles, Some(jpeg.clone()));
    let burst = burst(&b, &rx, burst_n);
    drop(b);
    let drain = drain(&work, broker.port, &rx, drain_n);
    drop(broker);

    let report = json!({
        "mode": if smoke { "smoke" } else { "full" },
        "jpeg_bytes": jpeg.len(),
        "baseline": base,
        "single": envelope,
        "single_4k_jpeg": with_jpeg,
        "burst": burst,
        "drain": drain,
    });
    std::fs::write(out.join("mqtt.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out.join("mqtt.md"), &md).unwrap();
    println!("{md}");
}

fn markdown(r: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap();
    let mut md = String::new();
    let _ = writeln!(md, "# MQTT: events from the durable commit to a subscriber ({})\n", r["mode"].as_str().unwrap());
    let _ = writeln!(md, "| what | p50 | p95 | max |\n|---|---|---|---|");
    let b = &r["baseline"]["single_ms"];
    let _ = writeln!(
        md,
        "| baseline: a bare QoS 1 publish until the subscriber holds it | {:.2} ms | {:.2} ms | {:.2} ms |",
        f(&b["p50"]),
        f(&b["p95"]),
        f(&b["max"])
    );
    for (k, label) in [
        ("single", "an event, envelope only: commit → delivery"),
        ("single_4k_jpeg", "an event with a 4K JPEG: commit → delivery"),
        ("burst", "a burst from 8 posters: each event's commit → delivery"),
    ] {
        let d = &r[k]["delivery_ms"];
        let _ = writeln!(
            md,
            "| {label} ({} events) | {:.2} ms | {:.2} ms (×{:.1} baseline) | {:.2} ms |",
            r[k]["events"],
            f(&d["p50"]),
            f(&d["p95"]),
            f(&d["p95"]) / f(&b["p95"]),
            f(&d["max"])
        );
    }
    let c = &r["single_4k_jpeg"]["commit_ms"];
    let _ = writeln!(
        md,
        "| for reference: the intake's durable commit with the 4K JPEG ({} bytes) | {:.2} ms | {:.2} ms | {:.2} ms |",
        r["jpeg_bytes"],
        f(&c["p50"]),
        f(&c["p95"]),
        f(&c["max"])
    );
    let d = &r["drain"];
    let intake_per_s = f(&r["burst"]["events"]) / f(&r["burst"]["posted_ms"]) * 1e3;
    let _ = writeln!(
        md,
        "\nBurst: {} events posted in {:.0} ms, all delivered {:.0} ms after the first post.\n\nDrain after an outage: {} events stored while the room was away went out in {:.0} ms, {:.0} events/s, each once and in order: ×{:.0} the rate the intake stores them at (the burst, {:.0} events/s), so a backlog drains far faster than events can fill it. Heap held per queued event: {:.0} bytes, against {:.0} bytes per event stored with no outbox (the catalog's page cache, at most {} MiB, holds both): the outbox's own share {:.0} bytes. The heap rose by at most {} KiB while they drained.",
        r["burst"]["events"],
        f(&r["burst"]["posted_ms"]),
        f(&r["burst"]["all_delivered_ms"]),
        d["events"],
        f(&d["ms"]),
        f(&d["per_s"]),
        f(&d["per_s"]) / intake_per_s,
        intake_per_s,
        f(&d["heap_per_queued_event_bytes"]),
        f(&d["heap_per_event_without_outbox_bytes"]),
        keeppeek::limits::CATALOG_CACHE_BYTES >> 20,
        f(&d["heap_per_queued_event_bytes"]) - f(&d["heap_per_event_without_outbox_bytes"]),
        d["heap_rise_while_draining_bytes"].as_i64().unwrap() / 1024
    );
    md
}

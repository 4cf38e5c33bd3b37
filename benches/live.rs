//! Live view benchmark, each result beside its goal or baseline in the same run:
//!
//! 1. In process: KeepPeek's WebRTC engine (on its own thread and single-threaded runtime, as
//!    in the daemon) with 1, 16 and 64 viewers, each a full WebRTC peer (`str0m`, on its own
//!    loopback UDP socket, on another thread of this process). A 1080p H.264 clip is
//!    published frame by frame into the stream's fanout, one frame per 1/15 s, each only once
//!    every viewer has the one before. Reported: the engine's own time per frame (frame in
//!    to RTP packets handed to the socket, for every viewer; measured inside the engine),
//!    p50/p95 (goal ≤ 1 ms p95), against a baseline of copying the frame once per viewer;
//!    and delivery (publish to the whole frame depacketized at every viewer), p50/p95.
//!    Then again with sound: G.711 µ-law in 20 ms frames (50 a second, as cameras send it)
//!    published beside the pictures, and the engine's time per sound frame for all viewers
//!    (in to RTP out, passed through: no transcode), p50/p95, and per viewer.
//! 2. The daemon as its own process, recording the same clip from a file camera, with 0, 1,
//!    16 and 64 viewers connected over WHEP: CPU (% of a core) and RSS per viewer (goal
//!    ≤ 512 KiB).
//! 3. Set-up in Chromium: from opening a camera's page to its first decoded frame (goal ≤ 300 ms
//!    on loopback), five times (`tests/ui/bench-setup.mjs`).
//!
//! Reports: `target/bench/live.json`, `target/bench/live.md`.
//! `cargo bench --bench live`             the full run
//! `cargo bench --bench live -- --smoke`  1 and 4 viewers, short windows, no Chromium part (CI)

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keeppeek::base::{StreamKey, StreamKind};
use keeppeek::cameras::{Cameras, RunningStream};
use keeppeek::catalog::Catalog;
use keeppeek::ingest::file::Clip;
use keeppeek::live::Fanout;
use keeppeek::media::{AudioCodec, AudioFrame, Frame};
use keeppeek::webrtc::{Engine, Owner, Streams};
use serde_json::{Value, json};

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/viewer.rs"]
mod viewer;
use daemon::Daemon;
use viewer::{Farm, Viewer};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The 1080p clip: testsrc2 at 15 fps, 10 s, GOP 1 s, ~3 Mbit/s (made once, cached).
fn clip_1080p(work: &Path) -> PathBuf {
    let path = work.join("1080p.mp4");
    if !path.exists() {
        let tmp = work.join("1080p.tmp.mp4");
        let ok = Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i"])
            .arg("testsrc2=size=1920x1080:rate=15:duration=10")
            .args(["-c:v", "libx264", "-preset", "veryfast", "-b:v", "3M", "-maxrate", "3M", "-bufsize", "3M"])
            .args(["-profile:v", "main", "-pix_fmt", "yuv420p", "-bf", "0", "-g", "15", "-keyint_min", "15"])
            .args(["-sc_threshold", "0", "-movflags", "+faststart"])
            .arg(&tmp)
            .status()
            .expect("ffmpeg runs")
            .success();
        assert!(ok, "ffmpeg made the 1080p clip");
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

fn percentiles(mut us: Vec<f64>) -> Value {
    us.sort_by(f64::total_cmp);
    let at = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    json!({ "n": us.len(), "p50_us": at(0.5), "p95_us": at(0.95), "max_us": at(1.0) })
}

/// The clip's video frames as the fanout gets them, looping, with increasing times.
struct Source {
    frames: Vec<(i64, bool, bytes::Bytes)>,
    params: Arc<keeppeek::media::VideoParams>,
    duration_90k: i64,
    n: usize,
}

impl Source {
    fn new(path: &Path) -> Source {
        let clip = Clip::parse(&std::fs::read(path).unwrap()).unwrap();
        let frames: Vec<_> = clip.video_frames().collect();
        let duration_90k = clip.duration_90k();
        Source { frames, params: clip.params().clone(), duration_90k, n: 0 }
    }

    fn next(&mut self) -> Frame {
        let (pts, is_key, data) = self.frames[self.n % self.frames.len()].clone();
        let lap = (self.n / self.frames.len()) as i64;
        self.n += 1;
        Frame {
            pts_90k: pts + lap * self.duration_90k,
            received_mono_us: self.n as i64,
            received_wall_us: self.n as i64,
            is_key,
            data,
            params: self.params.clone(),
            audio: None,
        }
    }
}

/// Part 1 for `n` viewers: (engine time per frame, copy baseline, delivery); with `sound`,
/// G.711 published beside the pictures and the engine's time per sound frame.
fn in_process(clip: &Path, work: &Path, n: usize, frames: usize, sound: bool) -> Value {
    let fanout = Arc::new(Fanout::new(keeppeek::live::gop_pool()));
    let mut source = Source::new(clip);
    // A first GOP, so the stream has parameters and new viewers a picture.
    for _ in 0..15 {
        fanout.publish(&source.next());
    }
    let pcmu = Arc::new(keeppeek::media::audio::g711_params(AudioCodec::Pcmu, 8_000, 1).unwrap());
    let sound_at = |pts_90k: i64| AudioFrame {
        pts_90k,
        duration_samples: 160,
        data: vec![0xff; 160].into(),
        params: pcmu.clone(),
    };
    let mut next_sound_90k = 0;
    if sound {
        // The stream's sound is known before anyone watches, so viewers are offered it.
        fanout.publish_audio(&sound_at(next_sound_90k));
        next_sound_90k += 1_800;
    }
    let dir = work.join(format!("engine-{n}{}", if sound { "-sound" } else { "" }));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let key = StreamKey::new("bench", StreamKind::Main);
    let cameras = Arc::new(Cameras::default());
    cameras.add([RunningStream { key: key.clone(), state: Arc::default(), recording: None, live: fanout.clone() }]);
    let streams = Streams { cameras, catalog, data_dir: dir };
    let (engine, handle) = rt.block_on(Engine::bind(0, &["127.0.0.1".parse().unwrap()], streams, 512)).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let runner = std::thread::spawn(move || rt.block_on(engine.run(stop_rx)));
    let client = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut viewers = Vec::new();
    for i in 0..n {
        let (mut v, pending, offer) = if sound { Viewer::offer_with_sound() } else { Viewer::offer() };
        let owner = Owner { principal: format!("token:{}", i % 32), login: None, admin: false };
        let peer = format!("10.0.0.{}", i / 100 + 1).parse().unwrap();
        let (_, answer) = client.block_on(handle.open(key.clone(), offer, owner, peer)).expect("a session");
        v.answer(pending, &answer);
        viewers.push(v);
    }
    let farm = Farm::start(viewers);
    // Every viewer connected and showing the held GOP.
    let t = Instant::now();
    while farm.min_frames() == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "viewers connect");
        std::thread::sleep(Duration::from_millis(10));
    }
    handle.stats.frame_times_us(); // drop the warm-up's samples
    handle.stats.audio_times_ns();
    let mut delivery = Vec::new();
    let mut copies = Vec::new();
    let tick = Duration::from_micros(1_000_000 / 15);
    let mut due = Instant::now();
    for _ in 0..frames {
        let frame = source.next();
        // The baseline: one copy of the frame per viewer.
        let t = Instant::now();
        let mut sink = 0usize;
        for _ in 0..n {
            let copy = frame.data.to_vec();
            sink = sink.wrapping_add(copy[copy.len() / 2] as usize);
        }
        copies.push(t.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(sink);
        let want = farm.min_frames() + 1;
        let t = Instant::now();
        fanout.publish(&frame);
        while farm.min_frames() < want && t.elapsed() < Duration::from_secs(2) {
            std::hint::spin_loop();
        }
        delivery.push(t.elapsed().as_secs_f64() * 1e6);
        // The sound of this frame's time, as a camera sends it after the picture.
        next_sound_90k = next_sound_90k.max(frame.pts_90k);
        while sound && next_sound_90k < frame.pts_90k + 6_000 {
            fanout.publish_audio(&sound_at(next_sound_90k));
            next_sound_90k += 1_800;
        }
        due += tick;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let engine_us: Vec<f64> = handle.stats.frame_times_us().into_iter().map(f64::from).collect();
    let audio_us: Vec<f64> = handle.stats.audio_times_ns().into_iter().map(|ns| f64::from(ns) / 1000.0).collect();
    if sound {
        let t = Instant::now();
        while farm.min_audio_frames() < 100 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(farm.min_audio_frames() >= 100, "every viewer hears the sound: {}", farm.min_audio_frames());
        assert!(!audio_us.is_empty(), "the engine timed the sound frames it sent");
    }
    drop(farm);
    let _ = stop_tx.send(true);
    let _ = runner.join();
    json!({
        "viewers": n,
        "sound": sound,
        "engine_per_frame": percentiles(engine_us),
        "engine_per_sound_frame": if sound { percentiles(audio_us) } else { Value::Null },
        "copy_baseline": percentiles(copies),
        "delivery": percentiles(delivery),
    })
}

// ---- part 2: the daemon ----

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if body.starts_with('{') {
        req.push_str("content-type: application/json\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

fn proc_kib(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Part 2: the daemon's CPU and RSS with 0 and then `counts` viewers.
fn per_viewer(clip: &Path, work: &Path, counts: &[usize], window: Duration) -> Value {
    let dir = work.join("daemon");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (port, udp) = (free_tcp_port(), UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    std::fs::write(
        dir.join("keeppeek.toml"),
        format!(
            "data_dir = \"data\"\nlisten = \"127.0.0.1:{port}\"\nram_class = \"2 GiB\"\n[retention]\n\
             stream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n[webrtc]\nport = {udp}\nloopback = true\n\
             [[cameras]]\nname = \"cam\"\nmain = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&dir, false);
    let pid = daemon.0.id();
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "the daemon listens");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, _) =
        http(port, "POST", "/api/setup", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    assert_eq!(code, 201);
    let (_, head, body) =
        http(port, "POST", "/api/login", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    let cookie =
        head.lines().find_map(|l| l.strip_prefix("set-cookie: ")).unwrap().split(';').next().unwrap().to_string();
    let csrf = serde_json::from_str::<Value>(&body).unwrap()["csrf"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(3)); // the camera is up, the GOP held
    let measure = || {
        let (c0, t0) = (cpu_s(pid), Instant::now());
        std::thread::sleep(window);
        ((cpu_s(pid) - c0) / t0.elapsed().as_secs_f64(), proc_kib(pid, "VmRSS:"))
    };
    let (cpu0, rss0) = measure();
    let mut rows = vec![json!({ "viewers": 0, "cpu_share": cpu0, "rss_kib": rss0 })];
    let mut viewers: Vec<Viewer> = Vec::new();
    for &n in counts {
        while viewers.len() < n {
            let (mut v, pending, offer) = Viewer::offer();
            let headers =
                [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("content-type", "application/sdp")];
            let (code, _, answer) = http(port, "POST", "/api/whep/cam/main", &headers, &offer);
            assert_eq!(code, 201, "{answer}");
            v.answer(pending, &answer);
            viewers.push(v);
        }
        let farm = Farm::start(std::mem::take(&mut viewers));
        std::thread::sleep(Duration::from_secs(2));
        let before = farm.min_frames();
        let (cpu, rss) = measure();
        let frames = farm.min_frames() - before;
        rows.push(json!({
            "viewers": n,
            "cpu_share": cpu,
            "rss_kib": rss,
            "cpu_share_per_viewer": (cpu - cpu0) / n as f64,
            "rss_kib_per_viewer": (rss as f64 - rss0 as f64) / n as f64,
            "frames_per_viewer_in_window": frames,
        }));
        eprintln!("{n} viewers: cpu {:.1}% rss {} KiB, each viewer got ≥ {frames} frames", cpu * 100.0, rss);
        viewers = farm.stop();
    }
    json!(rows)
}

/// Part 3: `tests/ui/bench-setup.mjs` in Node: a camera's page opened to its first decoded frame, five times.
fn chromium_setup() -> Value {
    let out = Command::new("node")
        .arg(repo().join("tests/ui/bench-setup.mjs"))
        .env("KEEPPEEK_BIN", env!("CARGO_BIN_EXE_keeppeek"))
        .output()
        .expect("node runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}

fn markdown(r: &Value) -> String {
    let mut md = format!("Mode: {}.\n\n### In process: 1080p H.264, one frame per 1/15 s\n\n", r["mode"]);
    md.push_str("| viewers | engine per frame p50 µs | p95 µs | copy-per-viewer baseline p95 µs | engine / baseline | delivery p50 µs | delivery p95 µs |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let rows = r["in_process"].as_array().unwrap();
    for row in rows.iter().filter(|row| row["sound"] != true) {
        let (e, c, d) = (&row["engine_per_frame"], &row["copy_baseline"], &row["delivery"]);
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} |",
            row["viewers"],
            f(&e["p50_us"]),
            f(&e["p95_us"]),
            f(&c["p95_us"]),
            f(&e["p95_us"]) / f(&c["p95_us"]).max(1.0),
            f(&d["p50_us"]),
            f(&d["p95_us"])
        );
    }
    md.push_str(
        "\n### In process, with sound: G.711 µ-law, 20 ms frames (50 a second) beside the pictures\n\n\
         | viewers | video engine per frame p95 µs (without sound) | engine per sound frame p50 µs | p95 µs | per viewer p50 µs |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for row in rows.iter().filter(|row| row["sound"] == true) {
        let a = &row["engine_per_sound_frame"];
        let n = row["viewers"].as_f64().unwrap_or(1.0);
        let without = rows.iter().find(|w| w["sound"] != true && w["viewers"] == row["viewers"]);
        let without = without.map_or("–".into(), |w| format!("{:.0}", f(&w["engine_per_frame"]["p95_us"])));
        let _ = writeln!(
            md,
            "| {} | {:.0} ({without}) | {:.1} | {:.1} | {:.2} |",
            row["viewers"],
            f(&row["engine_per_frame"]["p95_us"]),
            f(&a["p50_us"]),
            f(&a["p95_us"]),
            f(&a["p50_us"]) / n
        );
    }
    md.push_str("\n### The daemon with live viewers of one 1080p stream\n\n| viewers | CPU % of a core | RSS MiB | CPU % per viewer | RSS KiB per viewer |\n| --- | --- | --- | --- | --- |\n");
    for row in r["daemon"].as_array().unwrap() {
        let per = |k: &str, scale: f64| row[k].as_f64().map_or("–".to_string(), |x| format!("{:.2}", x * scale));
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.1} | {} | {} |",
            row["viewers"],
            f(&row["cpu_share"]) * 100.0,
            f(&row["rss_kib"]) / 1024.0,
            per("cpu_share_per_viewer", 100.0),
            per("rss_kib_per_viewer", 1.0)
        );
    }
    if let Some(s) = r.get("chromium_setup") {
        let _ = writeln!(
            md,
            "\n### Set-up in Chromium\n\nClick on \"Watch\" to the first decoded frame: {} ms each, median {} ms.",
            s["ms"], s["median_ms"]
        );
    }
    md
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let out = repo().join("target/bench");
    let work = out.join("live");
    std::fs::create_dir_all(&work).unwrap();
    let clip = clip_1080p(&work);
    let (counts, frames, window) =
        if smoke { (vec![1, 4], 45, Duration::from_secs(3)) } else { (vec![1, 16, 64], 150, Duration::from_secs(10)) };
    let mut part1 = Vec::new();
    for sound in [false, true] {
        for &n in &counts {
            let r = in_process(&clip, &work, n, frames, sound);
            eprintln!(
                "{n} viewers in process (sound {sound}): engine p95 {} µs, per sound frame p95 {} µs",
                r["engine_per_frame"]["p95_us"], r["engine_per_sound_frame"]["p95_us"]
            );
            part1.push(r);
        }
    }
    let part2 = per_viewer(&clip, &work, &counts, window);
    let mut report = json!({ "mode": if smoke { "smoke" } else { "full" }, "in_process": part1, "daemon": part2 });
    if !smoke {
        report["chromium_setup"] = chromium_setup();
    }
    std::fs::write(out.join("live.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out.join("live.md"), &md).unwrap();
    println!("{md}");
}

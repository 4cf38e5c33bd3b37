//! Archive benchmark: KeepPeek's uploader against `curl --upload-file` of the same files to
//! the same S3-compatible server (`s3s-fs`, built by `tools/test.sh` under `target/peers`,
//! checking every signature), in one run.
//!
//! 1. **Throughput**: closed recordings of 24 MiB (a main stream's segment) put in a catalog
//!    and archived by a target (the real uploader: its catalog walk, each file read for its
//!    CRC-32 then sent whole as it is read again, signing, the checks of each answer, the
//!    durable notes, the manifests), MiB/s from the start until the last is stored; against
//!    `curl --aws-sigv4` putting each file whole, one after the other (its payload not
//!    hashed: `UNSIGNED-PAYLOAD`, as KeepPeek signs too, though KeepPeek also sends each
//!    body's CRC-32 for the server to check). Goal: ≥ 0.8 × curl's. Two more baselines say
//!    where the rest goes: curl with the same CRC-32 (made in this process in its time), and,
//!    for recordings of 40 MiB (over `ARCHIVE_WHOLE_MAX_BYTES`, which KeepPeek sends in parts,
//!    each part's MD5 made while the one before is sent), curl uploading in the same 8 MiB
//!    parts (the server's own multipart work in its time too).
//! 2. **CPU per archived MiB**: this process's CPU time over the upload (the server is
//!    another process), as % of a core per MiB/s archived. Goal: ≤ 2 %.
//! 3. **Memory**: the most the heap (a counting allocator) rose over its level before the
//!    target started, for recordings sent whole (against the chunks read ahead,
//!    `ARCHIVE_STREAM_CHUNKS_AHEAD` of `ARCHIVE_STREAM_CHUNK_BYTES`, and the one being sent)
//!    and for recordings sent in parts (against two parts, `ARCHIVE_PART_BYTES`: a target
//!    sends one while it reads the next), and the archive's line in `keeppeek budget` for one
//!    target.
//! 4. **Time to first byte of playback**: the keeppeek binary records the fixture camera
//!    and archives it to the same server; then, over ranges a few seconds long that both
//!    the disk and the bucket hold, the first byte of an MP4 export from the bucket
//!    (`/api/archive/{target}/export.mp4`: its days' manifest, each fragment's header read
//!    with a range request, the plan) against the same range's from the disk
//!    (`/api/streams/{stream}/export.mp4`), alternating, each range asked for once (no plan
//!    kept from an earlier request). Median and 95th percentile.
//!
//! Reports: `target/bench/archive.json`, `target/bench/archive.md`.
//! `cargo bench --bench archive`             the full run (12 recordings, 288 MiB; 4 of 40 MiB)
//! `cargo bench --bench archive -- --smoke`  2 recordings and 1 of 40 MiB (CI)

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use keeppeek::archive::Archive;
use keeppeek::archive::s3::Place;
use keeppeek::base::{StreamKey, StreamKind};
use keeppeek::catalog::{Batch, Catalog, RecordingRow};
use keeppeek::config::ArchiveTarget;
use keeppeek::config::archive::Streams;
use keeppeek::media::Codec;
use serde_json::{Value, json};

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/heap.rs"]
mod heap;
use heap::{LIVE_BYTES, PEAK_BYTES};

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

const ACCESS_KEY: &str = "keeppeek-bench";
const SECRET_KEY: &str = "a-secret-the-server-checks";
const RECORDING_BYTES: usize = 24 << 20;
/// Recordings over `ARCHIVE_WHOLE_MAX_BYTES`, which go in parts.
const LARGE_BYTES: usize = 40 << 20;

/// `s3s-fs` on a free port over `dir`, bucket `nvr` made.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/peers/s3s-fs/bin/s3s-fs");
        assert!(bin.exists(), "{} is missing: tools/test.sh builds it (cargo install s3s-fs)", bin.display());
        std::fs::create_dir_all(dir.join("nvr")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--access-key", ACCESS_KEY])
            .args(["--secret-key", SECRET_KEY])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting s3s-fs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's bucket `nvr` on `port`, with the keys it takes.
fn place(port: u16) -> Place {
    Place {
        endpoint: url::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
        region: "us-east-1".into(),
        bucket: "nvr".into(),
        path_style: true,
        access_key: ACCESS_KEY.into(),
        secret_key: SECRET_KEY.into(),
        ca_pem: None,
    }
}

/// This process's CPU time (user + system).
fn cpu_time() -> Duration {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// `n` files of `size` bytes under `dir/recordings`, bytes that differ everywhere.
fn make_files(dir: &Path, n: usize, size: usize) -> Vec<PathBuf> {
    let rec = dir.join("recordings");
    std::fs::create_dir_all(&rec).unwrap();
    (0..n)
        .map(|i| {
            let path = rec.join(format!("{i:03}.mp4"));
            let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ i as u64;
            let bytes: Vec<u8> = (0..size / 8)
                .flat_map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()
                })
                .collect();
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

/// curl with the server's keys, for `args` and `url`; its output.
fn curl_s3(args: &[&str], url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3"])
        .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--user"])
        .arg(format!("{ACCESS_KEY}:{SECRET_KEY}"))
        .args(args)
        .arg(url)
        .output()
        .expect("running curl");
    assert!(out.status.success(), "curl {args:?} {url}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// curl uploading each file in parts of `ARCHIVE_PART_BYTES`, as KeepPeek does, one file
/// after the other, without checksums: an upload started, each part put from a file of its
/// own (cut before the clock starts), the upload put together: seconds. The server's work for
/// multipart uploads is then in both sides' times.
fn curl_multipart(port: u16, files: &[PathBuf], work: &Path) -> f64 {
    let part = keeppeek::limits::ARCHIVE_PART_BYTES;
    let cut: Vec<Vec<PathBuf>> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let bytes = std::fs::read(f).unwrap();
            bytes
                .chunks(part)
                .enumerate()
                .map(|(n, c)| {
                    let p = work.join(format!("part-{i:03}-{n}"));
                    std::fs::write(&p, c).unwrap();
                    p
                })
                .collect()
        })
        .collect();
    let started = Instant::now();
    for (i, parts) in cut.iter().enumerate() {
        let url = format!("http://127.0.0.1:{port}/nvr/curl-parts/{i:03}.mp4");
        let made = curl_s3(&["-X", "POST"], &format!("{url}?uploads="));
        let id = made.split("<UploadId>").nth(1).and_then(|r| r.split("</UploadId>").next()).expect("an upload id");
        let mut done = String::from("<CompleteMultipartUpload>");
        for (n, p) in parts.iter().enumerate() {
            let p = p.to_str().unwrap();
            let etag = curl_s3(
                &["-o", "/dev/null", "-w", "%header{etag}", "--upload-file", p],
                &format!("{url}?partNumber={}&uploadId={id}", n + 1),
            );
            done.push_str(&format!("<Part><PartNumber>{}</PartNumber><ETag>{etag}</ETag></Part>", n + 1));
        }
        done.push_str("</CompleteMultipartUpload>");
        curl_s3(&["-X", "POST", "--data-binary", &done], &format!("{url}?uploadId={id}"));
    }
    let s = started.elapsed().as_secs_f64();
    cut.iter().flatten().for_each(|p| std::fs::remove_file(p).unwrap());
    s
}

/// curl putting each file whole, one after the other: seconds. With `checksums`, each goes
/// with the CRC-32 KeepPeek sends (made here in the time, as the box makes it: a read of the
/// file), so the server checks it as it checks KeepPeek's.
fn curl(port: u16, files: &[PathBuf], checksums: bool) -> f64 {
    use base64::Engine;
    let started = Instant::now();
    for (i, f) in files.iter().enumerate() {
        let mut headers = Vec::new();
        if checksums {
            let crc32 = crc32fast::hash(&std::fs::read(f).unwrap());
            let crc32 = base64::engine::general_purpose::STANDARD.encode(crc32.to_be_bytes());
            headers.push(format!("x-amz-checksum-crc32: {crc32}"));
        }
        let ok = Command::new("curl")
            .args(headers.iter().flat_map(|h| ["-H", h.as_str()]))
            .args(["-sS", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3"])
            // curl 7.88 signs no payload hash of its own: the server needs the header.
            .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--user"])
            .arg(format!("{ACCESS_KEY}:{SECRET_KEY}"))
            .arg("--upload-file")
            .arg(f)
            .arg(format!("http://127.0.0.1:{port}/nvr/curl-{checksums}/{i:03}.mp4"))
            .status()
            .expect("running curl")
            .success();
        assert!(ok, "curl --upload-file failed");
    }
    started.elapsed().as_secs_f64()
}

/// KeepPeek's uploader archiving `files` (under `data`), as closed recordings of one stream:
/// (seconds, CPU seconds, the heap's rise at most, bytes).
fn keeppeek(port: u16, data: &Path, files: &[PathBuf]) -> (f64, f64, i64) {
    let catalog = Arc::new(Catalog::open(&data.join("catalog.redb")).unwrap());
    let stream_id = catalog.stream_id(&StreamKey::new("gate", StreamKind::Main)).unwrap();
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    for (i, f) in files.iter().enumerate() {
        let row = RecordingRow {
            stream_id,
            run_id: 1,
            codec: Codec::H264,
            width: 1920,
            height: 1080,
            wall_start_us: now_us + i as i64 * 60_000_000,
            wall_end_us: now_us + (i as i64 + 1) * 60_000_000,
            media_duration_90k: 60 * 90_000,
            bytes: std::fs::metadata(f).unwrap().len(),
            init_bytes: 0,
            frames: 1_800,
            fragments: 0,
            open: false,
            audio: None,
            path: String::new(),
        };
        let rel = f.strip_prefix(data).unwrap().to_string_lossy().into_owned();
        let (id, row) = catalog.begin_recording(row, |_| rel).unwrap();
        catalog
            .commit(&Batch { recordings: vec![(id, RecordingRow { open: false, ..row })], ..Batch::default() })
            .unwrap();
    }
    let target = ArchiveTarget {
        id: "bench".into(),
        place: place(port),
        prefix: "box".into(),
        max_kbit_s: None,
        cameras: Vec::new(),
        streams: Streams::Main,
        events_only: false,
        keep_days: None,
        before_delete: false,
        backlog_max_bytes: 1 << 40,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gate = Arc::new(keeppeek::record::gate::Gate::new(&[]));
    let archive = Archive::new(catalog, data.to_path_buf(), keeppeek::clock::RealClocks::shared(), gate);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(before, Ordering::Relaxed);
    let cpu = cpu_time();
    let started = Instant::now();
    rt.block_on(async {
        archive.start(&[target], &[], shutdown).await;
        loop {
            let s = archive.status();
            if s[0].uploaded_objects as usize == files.len() {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(600), "the uploads did not end: {s:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu).as_secs_f64();
    let rise = PEAK_BYTES.load(Ordering::Relaxed) - before;
    let _ = stop.send(true);
    drop(rt);
    (seconds, cpu, rise)
}

/// The S3 client alone on the same files, read into memory first: each whole in one PUT,
/// then each in 8 MiB parts (start, parts, complete): seconds of each. What the server's
/// multipart costs, and what the uploader adds to the client.
fn client_alone(port: u16, files: &[PathBuf]) -> (f64, f64) {
    use keeppeek::archive::s3::Bucket;
    let bucket = Bucket::new(place(port)).unwrap();
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let bodies: Vec<bytes::Bytes> = files.iter().map(|f| bytes::Bytes::from(std::fs::read(f).unwrap())).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let started = Instant::now();
        for (i, b) in bodies.iter().enumerate() {
            bucket.put(&format!("whole/{i:03}.mp4"), b.clone(), now()).await.unwrap();
        }
        let whole = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let part = keeppeek::limits::ARCHIVE_PART_BYTES;
        for (i, b) in bodies.iter().enumerate() {
            let key = format!("parts/{i:03}.mp4");
            let id = bucket.start_upload(&key, now()).await.unwrap();
            let mut etags = Vec::new();
            for (n, from) in (0..b.len()).step_by(part).enumerate() {
                let body = b.slice(from..(from + part).min(b.len()));
                etags.push(bucket.upload_part(&key, &id, n as u16 + 1, body, now()).await.unwrap());
            }
            bucket.complete_upload(&key, &id, &etags, now()).await.unwrap();
        }
        (whole, started.elapsed().as_secs_f64())
    })
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let n = if smoke { 2 } else { 12 };
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let work = out.join("archive-work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let data = work.join("data");
    let files = make_files(&data, n, RECORDING_BYTES);
    let large_data = work.join("data-large");
    let large = make_files(&large_data, if smoke { 1 } else { 4 }, LARGE_BYTES);
    let large_mib = (large.len() * LARGE_BYTES) as f64 / f64::from(1 << 20);
    let server = Server::start(&work.join("s3"));
    let mib = (n * RECORDING_BYTES) as f64 / f64::from(1 << 20);
    // Each side once to warm the server's disk and the page cache, then measured.
    let curl_s = curl(server.port, &files, false);
    let curl_sums_s = curl(server.port, &files, true);
    let (kp_s, cpu_s, rise) = keeppeek(server.port, &data, &files);
    let (kp_parts_s, cpu_parts_s, rise_parts) = keeppeek(server.port, &large_data, &large);
    let curl_large_s = curl_multipart(server.port, &large, &work);
    let (whole_s, parts_s) = client_alone(server.port, &files);
    let ttfb = first_bytes(server.port, &work, if smoke { 5 } else { 40 });
    let config = keeppeek::config::Config::parse(
        &format!(
            "data_dir = \"data\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n[archive.bench]\nendpoint = \"http://127.0.0.1:{}\"\nbucket = \"nvr\"\naccess_key = \"a\"\nsecret_key = \"s\"\n",
            server.port
        ),
        "bench.toml",
        &work,
    )
    .unwrap();
    let budget = keeppeek::budget::compute(&config);
    let line = budget.lines.iter().find(|l| l.component == "archive").map_or(0, |l| l.bytes);
    drop(server);
    let report = json!({
        "mode": if smoke { "smoke" } else { "full" },
        "recordings": n,
        "mib": mib,
        "curl": { "seconds": curl_s, "mib_s": mib / curl_s },
        "curl_checksums": { "seconds": curl_sums_s, "mib_s": mib / curl_sums_s },
        "ratio_checksums": curl_sums_s / kp_s,
        "keeppeek": { "seconds": kp_s, "mib_s": mib / kp_s, "cpu_seconds": cpu_s },
        "large": {
            "recordings": large.len(),
            "mib": large_mib,
            "keeppeek": { "seconds": kp_parts_s, "mib_s": large_mib / kp_parts_s, "cpu_seconds": cpu_parts_s },
            "curl_parts": { "seconds": curl_large_s, "mib_s": large_mib / curl_large_s },
            "ratio_parts": curl_large_s / kp_parts_s,
            "heap_rise_bytes": rise_parts,
        },
        "ratio": curl_s / kp_s,
        "client_whole": { "seconds": whole_s, "mib_s": mib / whole_s },
        "client_parts": { "seconds": parts_s, "mib_s": mib / parts_s },
        "core_percent_per_mib_s": 100.0 * cpu_s / mib,
        "heap_rise_bytes": rise,
        "part_bytes": keeppeek::limits::ARCHIVE_PART_BYTES,
        "chunk_bytes": keeppeek::limits::ARCHIVE_STREAM_CHUNK_BYTES,
        "chunks_ahead": keeppeek::limits::ARCHIVE_STREAM_CHUNKS_AHEAD,
        "budget_line_bytes": line,
        "first_byte": ttfb,
    });
    std::fs::write(out.join("archive.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out.join("archive.md"), &md).unwrap();
    println!("{md}");
    let _ = std::fs::remove_dir_all(&work);
}

/// One request on a new connection to `port`; its head and body as text.
fn http(port: u16, method: &str, path: &str, cookie: &str, body: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: kp\r\nconnection: close\r\ncookie: {cookie}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (head.to_string(), body.to_string())
}

/// Seconds from sending a GET of `path` until the first byte of its body (200 only).
fn first_byte_s(port: u16, path: &str, cookie: &str) -> f64 {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: kp\r\nconnection: close\r\ncookie: {cookie}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{path}: the connection ended: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]);
            assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
            if got.len() > end + 4 {
                return t.elapsed().as_secs_f64();
            }
        }
    }
}

/// Median and 95th percentile of `v`, in ms.
fn spread_ms(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] * 1000.0;
    json!({ "median_ms": at(0.5), "p95_ms": at(0.95), "n": v.len() })
}

/// 4: the keeppeek binary records the fixture camera into the bucket at `s3_port`; first
/// bytes of `n` exports of the same ranges from the disk and from the bucket.
fn first_bytes(s3_port: u16, work: &Path, n: usize) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clip = root.join("target/fixtures/h264.mp4");
    assert!(clip.exists(), "{} is missing: tools/test.sh makes the fixtures", clip.display());
    let dir = work.join("box");
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Segments of 256 KiB (one every 6 s), eight of them kept on the disk.
    std::fs::write(
        dir.join("keeppeek.toml"),
        format!(
            "data_dir = \"data\"\nlisten = \"127.0.0.1:{port}\"\nflush_interval_s = 1\n[retention]\nstream_max_bytes = \"2 MiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [archive.offsite]\nendpoint = \"http://127.0.0.1:{s3_port}\"\nbucket = \"nvr\"\nprefix = \"ttfb\"\naccess_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n\
             [[cameras]]\nname = \"porch\"\nmain = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    )
    .unwrap();
    let _daemon = daemon::Daemon::start(&dir, true);
    let wait = |what: &str, secs: u64, f: &mut dyn FnMut() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f() {
            assert!(
                Instant::now() < deadline,
                "{what}: {}",
                std::fs::read_to_string(dir.join("keeppeek.log")).unwrap()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait("the web face", 20, &mut || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let (head, _) = http(port, "POST", "/api/setup", "", r#"{"username":"root","password":"correct horse battery"}"#);
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .expect("a session")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    // Three recordings archived and still on the disk: the ranges are taken in them.
    let mut archived = Vec::new();
    wait("three recordings archived", 90, &mut || {
        let now = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros()) as i64;
        let q = format!("stream=porch/main&from_us={}&to_us={now}", now - 600_000_000);
        let (_, body) = http(port, "GET", &format!("/api/archive/offsite/recordings?{q}"), &cookie, "");
        archived = serde_json::from_str::<Value>(&body)
            .map(|v| v["recordings"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default();
        archived.len() >= 3
    });
    let (from, to) = (archived[1]["wall_start_us"].as_i64().unwrap(), archived[2]["wall_end_us"].as_i64().unwrap());
    let (mut disk, mut bucket) = (Vec::new(), Vec::new());
    for i in 0..n {
        // Four seconds, a different range each time (a plan kept would not be a first byte).
        let a = from + (i as i64 * 100_000) % (to - from - 4_000_000).max(1);
        let range = format!("from_us={a}&to_us={}", a + 4_000_000);
        disk.push(first_byte_s(port, &format!("/api/streams/porch/main/export.mp4?{range}"), &cookie));
        let path = format!("/api/archive/offsite/export.mp4?stream=porch/main&{range}");
        bucket.push(first_byte_s(port, &path, &cookie));
    }
    let (d, b) = (spread_ms(disk), spread_ms(bucket));
    let ratio = b["median_ms"].as_f64().unwrap() / d["median_ms"].as_f64().unwrap();
    json!({ "disk": d, "bucket": b, "ratio_median": ratio })
}

fn markdown(r: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Archive: uploads to s3s-fs on this machine ({}, {} recordings of 24 MiB, {:.0} MiB)\n",
        r["mode"].as_str().unwrap(),
        r["recordings"],
        f(&r["mib"])
    );
    let _ = writeln!(md, "| what | time | throughput |\n|---|---|---|");
    let _ = writeln!(
        md,
        "| baseline: `curl --upload-file --aws-sigv4`, each file whole | {:.2} s | {:.1} MiB/s |",
        f(&r["curl"]["seconds"]),
        f(&r["curl"]["mib_s"])
    );
    let _ = writeln!(
        md,
        "| KeepPeek's uploader: each whole, read as it is sent, with its CRC-32; durable notes, manifests | {:.2} s | {:.1} MiB/s (×{:.2} curl's) |",
        f(&r["keeppeek"]["seconds"]),
        f(&r["keeppeek"]["mib_s"]),
        f(&r["ratio"])
    );
    let _ = writeln!(
        md,
        "| baseline with KeepPeek's check: curl with `x-amz-checksum-crc32` (made in the time) | {:.2} s | {:.1} MiB/s (KeepPeek ×{:.2} of it) |",
        f(&r["curl_checksums"]["seconds"]),
        f(&r["curl_checksums"]["mib_s"]),
        f(&r["ratio_checksums"])
    );
    for (k, label) in [
        (
            "client_whole",
            "for reference: the S3 client alone, each file whole in one PUT with its MD5 and SHA-256 (from memory), as to a server that does not send CRC-32s back",
        ),
        ("client_parts", "for reference: the S3 client alone, each file in 8 MiB parts (from memory)"),
    ] {
        let _ = writeln!(
            md,
            "| {label} | {:.2} s | {:.1} MiB/s (×{:.2} curl's) |",
            f(&r[k]["seconds"]),
            f(&r[k]["mib_s"]),
            f(&r["curl"]["seconds"]) / f(&r[k]["seconds"])
        );
    }
    let _ = writeln!(
        md,
        "\nCPU: {:.2} s for {:.0} MiB: {:.2} % of a core per MiB/s archived (goal ≤ 2 %). Heap: rose by at most {:.1} MiB during the uploads, against {} chunks of {} KiB read ahead and the one being sent.",
        f(&r["keeppeek"]["cpu_seconds"]),
        f(&r["mib"]),
        f(&r["core_percent_per_mib_s"]),
        f(&r["heap_rise_bytes"]) / f64::from(1 << 20),
        r["chunks_ahead"],
        r["chunk_bytes"].as_u64().unwrap() >> 10,
    );
    let l = &r["large"];
    let _ = writeln!(
        md,
        "\nRecordings over the size sent whole: {} of 40 MiB ({:.0} MiB), in {} MiB parts:\n\n| what | time | throughput |\n|---|---|---|\n| baseline: curl in the same parts, without checksums | {:.2} s | {:.1} MiB/s |\n| KeepPeek's uploader: each part with its MD5, made while the one before is sent; durable notes | {:.2} s | {:.1} MiB/s (×{:.2} curl's) |\n\nCPU: {:.2} s, {:.2} % of a core per MiB/s. Heap: rose by at most {:.1} MiB, against two parts of {} MiB in memory; `keeppeek budget` counts {:.1} MiB for one target.",
        l["recordings"],
        f(&l["mib"]),
        r["part_bytes"].as_u64().unwrap() >> 20,
        f(&l["curl_parts"]["seconds"]),
        f(&l["curl_parts"]["mib_s"]),
        f(&l["keeppeek"]["seconds"]),
        f(&l["keeppeek"]["mib_s"]),
        f(&l["ratio_parts"]),
        f(&l["keeppeek"]["cpu_seconds"]),
        100.0 * f(&l["keeppeek"]["cpu_seconds"]) / f(&l["mib"]),
        f(&l["heap_rise_bytes"]) / f64::from(1 << 20),
        r["part_bytes"].as_u64().unwrap() >> 20,
        f(&r["budget_line_bytes"]) / f64::from(1 << 20)
    );
    let t = &r["first_byte"];
    let _ = writeln!(
        md,
        "\nFirst byte of playback, an export of 4 s (keeppeek recording the fixture camera; {} ranges each):\n\n| from | median | p95 |\n|---|---|---|\n| the disk (baseline) | {:.1} ms | {:.1} ms |\n| the bucket | {:.1} ms | {:.1} ms (median ×{:.1} the disk's) |",
        t["disk"]["n"],
        f(&t["disk"]["median_ms"]),
        f(&t["disk"]["p95_ms"]),
        f(&t["bucket"]["median_ms"]),
        f(&t["bucket"]["p95_ms"]),
        f(&t["ratio_median"])
    );
    md
}

//! Web face benchmark, each result beside its baseline from the same run:
//!
//! 1. Cached answers over one keep-alive connection (1,000 requests per route): the UI's
//!    files (a `304` revalidation and a gzipped download), `/api/me`, `/api/cameras` and a
//!    day's coverage, each p50/p95/p99 and its p95 against `/healthz` (the floor: parse,
//!    route, answer).
//! 2. Coverage on a generated catalog of 127 cameras × 2 streams × 30 days × 128 fragments a
//!    camera-day-stream (975,360 fragments, cached under `target/bench/web/`): p95 from the
//!    summaries the catalog maintains (`Catalog::coverage_view`, and the HTTP route) against
//!    materializing the fragment rows, for one stream's month and for every stream's month.
//!    Both must give the same buckets.
//! 3. Export: a stream's recordings as one MP4 (in process, and over HTTP) against `cat` of
//!    the same files, MB/s, page cache warm for both.
//!
//! Reports: `target/bench/web.json` and `target/bench/web.md`.
//!
//! `cargo bench --bench web`             the full run
//! `cargo bench --bench web -- --smoke`  4 cameras × 3 days, 100 requests, 16 MiB export (CI)
//! `… -- --smoke --export-mib 256`        the same with a larger export

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keeppeek::auth::{Auth, scope};
use keeppeek::base::{StreamKey, StreamKind};
use keeppeek::cameras::{Cameras, RunningStream};
use keeppeek::catalog::{Batch, Bucket, Catalog, FragmentRow, Keyframe, RecordingRow, coverage};
use keeppeek::export::Export;
use keeppeek::http::{self, HttpStats, Services};
use keeppeek::ingest::state::StreamState;
use keeppeek::media::Codec;
use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

const DAY_US: i64 = 86_400_000_000;
const SIX_HOURS_US: i64 = 6 * 3_600_000_000;
/// 2026-01-01 00:00 UTC: the generated catalog's first day (fixed, so the cache stays valid).
const DAY0_US: i64 = 1_767_225_600_000_000;

/// The shape of the generated catalog.
#[derive(Clone, Copy)]
struct Shape {
    cameras: u32,
    days: i64,
    fragments_per_day: u32,
}

impl Shape {
    fn streams(self) -> u32 {
        self.cameras * 2
    }
    fn fragments(self) -> u64 {
        u64::from(self.streams()) * self.days as u64 * u64::from(self.fragments_per_day)
    }
}

fn stream_key(camera: u32, kind: StreamKind) -> StreamKey {
    StreamKey::new(&format!("cam{camera:03}"), kind)
}

/// Builds (or reopens, when a finished one is cached) the catalog: one recording per
/// camera-day-stream, its fragments evenly spread over the day with a gap after each (so
/// the coverage has holes), a keyframe row per fragment.
fn generate(dir: &Path, shape: Shape) -> Catalog {
    let tag = format!("{}x2x{}x{}", shape.cameras, shape.days, shape.fragments_per_day);
    let path = dir.join(format!("catalog-{tag}.redb"));
    let done = dir.join(format!("catalog-{tag}.done"));
    if done.exists() {
        return Catalog::open(&path).expect("the cached catalog opens");
    }
    let _ = std::fs::remove_file(&path);
    std::fs::create_dir_all(dir).unwrap();
    let t = Instant::now();
    let catalog = Catalog::open(&path).unwrap();
    let spacing_us = DAY_US / i64::from(shape.fragments_per_day);
    let length_us = spacing_us * 8 / 9;
    for camera in 0..shape.cameras {
        for (kind, bytes_per_s, width, height) in
            [(StreamKind::Main, 250_000u64, 1920, 1080), (StreamKind::Sub, 32_000, 640, 360)]
        {
            let stream_id = catalog.stream_id(&stream_key(camera, kind)).unwrap();
            let mut batch = Batch::default();
            for day in 0..shape.days {
                let start_us = DAY0_US + day * DAY_US;
                let fragment_bytes = bytes_per_s * (length_us / 1_000_000) as u64;
                let n = shape.fragments_per_day;
                let row = RecordingRow {
                    stream_id,
                    run_id: day as u64 + 1,
                    codec: Codec::H264,
                    width,
                    height,
                    wall_start_us: start_us,
                    wall_end_us: start_us + (i64::from(n) - 1) * spacing_us + length_us,
                    media_duration_90k: u64::from(n) * (length_us as u64 * 9 / 100),
                    bytes: 700 + u64::from(n) * fragment_bytes,
                    init_bytes: 700,
                    frames: u64::from(n) * (length_us as u64 / 40_000),
                    fragments: n,
                    open: false,
                    audio: None,
                    path: String::new(),
                };
                let (id, row) = catalog
                    .begin_recording(row, |id| format!("recordings/cam{camera:03}/{}/{id}.mp4", kind.name()))
                    .unwrap();
                for i in 0..n {
                    let f = FragmentRow {
                        wall_start_us: start_us + i64::from(i) * spacing_us,
                        wall_end_us: start_us + i64::from(i) * spacing_us + length_us,
                        media_start_90k: u64::from(i) * (spacing_us as u64 * 9 / 100),
                        duration_90k: length_us as u64 * 9 / 100,
                        start_byte: 700 + u64::from(i) * fragment_bytes,
                        end_byte: 700 + u64::from(i + 1) * fragment_bytes,
                        frames: (length_us / 40_000) as u32,
                        keyframes: (length_us / 2_000_000) as u32,
                    };
                    batch.fragments.push((id, i, f));
                    batch.keyframes.push((
                        stream_id,
                        id,
                        Keyframe { wall_us: f.wall_start_us, fragment_start_byte: f.start_byte },
                    ));
                }
                batch.recordings.push((id, row));
            }
            catalog.commit(&batch).unwrap();
        }
        if camera % 16 == 15 {
            eprintln!("  generated {} of {} cameras ({:.0} s)", camera + 1, shape.cameras, t.elapsed().as_secs_f64());
        }
    }
    std::fs::write(&done, "").unwrap();
    eprintln!("generated {} fragments in {:.1} s", shape.fragments(), t.elapsed().as_secs_f64());
    catalog
}

/// The baseline: a stream's coverage by materializing its recordings' fragment rows, summed
/// into the same buckets as the summaries (the same hours: from `from_us`'s hour to `to_us`).
fn coverage_by_scan(catalog: &Catalog, stream_id: u32, from_us: i64, to_us: i64) -> Vec<(i64, Bucket)> {
    let mut out: BTreeMap<i64, Bucket> = BTreeMap::new();
    let first_hour = coverage::bucket_of(from_us);
    for (id, r) in catalog.recordings().unwrap() {
        if r.stream_id != stream_id || r.wall_end_us <= from_us || r.wall_start_us >= to_us {
            continue;
        }
        for (_, f) in catalog.fragments(id).unwrap() {
            for (hour, c) in coverage::contributions(&f) {
                if hour >= first_hour && hour <= to_us {
                    let total = out.entry(hour.div_euclid(SIX_HOURS_US) * SIX_HOURS_US).or_default();
                    *total = coverage::apply(*total, c, true);
                }
            }
        }
    }
    out.into_iter().collect()
}

/// Latency percentiles of a set of samples, µs.
fn percentiles(mut us: Vec<f64>) -> Value {
    us.sort_by(f64::total_cmp);
    let at = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    json!({ "n": us.len(), "p50_us": at(0.50), "p95_us": at(0.95), "p99_us": at(0.99), "max_us": at(1.0) })
}

fn p95(v: &Value) -> f64 {
    v["p95_us"].as_f64().unwrap()
}

/// Times `n` runs of `f`, µs each.
fn time_n(n: usize, mut f: impl FnMut(usize)) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// KeepPeek's web face in this process, on its own thread and runtime (as in the daemon), on
/// a free loopback port. Returns the port and an admin token.
fn start_server(catalog: Arc<Catalog>, data_dir: PathBuf, streams: Vec<RunningStream>) -> (u16, String) {
    let auth = Arc::new(Auth::new(catalog.clone(), keeppeek::clock::RealClocks::shared()));
    for (id, name, _, _) in catalog.tokens().unwrap() {
        if name == "bench" {
            catalog.delete_token(id).unwrap();
        }
    }
    let (_, token) = auth.create_token("bench", scope::VIEW | scope::METRICS | scope::ADMIN).unwrap();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = http::bind(([127, 0, 0, 1], 0).into()).await.unwrap();
            port_tx.send(listener.local_addr().unwrap().port()).unwrap();
            let cameras = Arc::new(Cameras::default());
            cameras.add(streams);
            let services = Arc::new(Services::without_cameras(catalog, data_dir, cameras).unwrap());
            let (_keep, shutdown) = tokio::sync::watch::channel(false);
            http::serve(
                http::Listeners { plain: Some(listener), https: None },
                Arc::new(HttpStats::default()),
                auth,
                services,
                shutdown,
            )
            .await;
        });
    });
    (port_rx.recv().unwrap(), token)
}

/// One keep-alive HTTP/1.1 connection.
struct Client {
    reader: BufReader<TcpStream>,
    token: String,
}

impl Client {
    fn connect(port: u16, token: &str) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client { reader: BufReader::with_capacity(256 << 10, s), token: token.into() }
    }

    /// GET `path`; returns (status, response head in lower case, body length). The body is
    /// read and dropped.
    fn get(&mut self, path: &str, extra: &str) -> (u16, String, u64) {
        let req = format!("GET {path} HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer {}\r\n{extra}\r\n", self.token);
        self.reader.get_mut().write_all(req.as_bytes()).unwrap();
        let mut head = String::new();
        loop {
            let mut line = String::new();
            assert!(self.reader.read_line(&mut line).unwrap() > 0, "the server closed the connection");
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let len: u64 = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .unwrap_or(0);
        let copied = std::io::copy(&mut (&mut self.reader).take(len), &mut std::io::sink()).unwrap();
        assert_eq!(copied, len, "a whole body");
        (status, head, len)
    }
}

fn header(head: &str, name: &str) -> String {
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(|v| v.trim().to_string())).unwrap_or_default()
}

/// Part 1: every route over one connection, `n` requests each.
fn cached_answers(port: u16, token: &str, n: usize, streams: usize) -> Value {
    let mut c = Client::connect(port, token);
    let (_, head, _) = c.get("/", "accept-encoding: gzip\r\n");
    let etag = header(&head, "etag");
    let revalidate = format!("accept-encoding: gzip\r\nif-none-match: {etag}\r\n");
    let day = format!("/api/streams/cam000/main/coverage?from_us={DAY0_US}&to_us={}", DAY0_US + DAY_US);
    let cameras = format!("/api/cameras ({streams} streams)");
    let routes: [(&str, &str, &str, u16); 6] = [
        ("/healthz", "/healthz", "", 200),
        ("/ revalidated (304)", "/", &revalidate, 304),
        ("/app.js gzipped", "/app.js", "accept-encoding: gzip\r\n", 200),
        ("/api/me (token)", "/api/me", "", 200),
        (&cameras, "/api/cameras", "", 200),
        ("coverage, one stream-day", &day, "", 200),
    ];
    let mut out = Vec::new();
    let mut floor = 0.0;
    for (name, path, extra, want) in routes {
        for _ in 0..20 {
            c.get(path, extra); // warm-up
        }
        let us = time_n(n, |_| assert_eq!(c.get(path, extra).0, want, "{path}"));
        let mut p = percentiles(us);
        if path == "/healthz" {
            floor = p95(&p);
        }
        p["route"] = json!(name);
        p["p95_vs_healthz"] = json!(p95(&p) / floor);
        eprintln!("{name}: p95 {:.0} µs", p95(&p));
        out.push(p);
    }
    json!(out)
}

/// Part 2: coverage from the summaries against the fragment scan.
fn coverage_queries(catalog: &Catalog, port: u16, token: &str, shape: Shape, smoke: bool) -> Value {
    let streams: Vec<(u32, String)> = catalog.streams().unwrap();
    assert_eq!(streams.len() as u32, shape.streams());
    let (from, to) = (DAY0_US, DAY0_US + shape.days * DAY_US);
    let summaries = |id: u32| catalog.coverage_view(id, from, to, SIX_HOURS_US).unwrap();
    // Same answer both ways, for every stream.
    let t = Instant::now();
    for (id, name) in &streams {
        let (a, b) = (summaries(*id), coverage_by_scan(catalog, *id, from, to));
        assert_eq!(a, b, "{name}: summaries and scan differ");
        assert_eq!(a.len() as i64, shape.days * 4, "{name}: a bucket per 6 hours");
    }
    eprintln!("summaries equal the scan for {} streams (checked in {:.1} s)", streams.len(), t.elapsed().as_secs_f64());

    let n_one = if smoke { 50 } else { 200 };
    let one_sum = percentiles(time_n(n_one, |i| {
        summaries(streams[i % streams.len()].0);
    }));
    let one_scan = percentiles(time_n(if smoke { 5 } else { 20 }, |i| {
        coverage_by_scan(catalog, streams[(i * 7) % streams.len()].0, from, to);
    }));
    let all_sum = percentiles(time_n(if smoke { 10 } else { 20 }, |_| {
        for (id, _) in &streams {
            summaries(*id);
        }
    }));
    let all_scan = percentiles(time_n(3, |_| {
        for (id, _) in &streams {
            coverage_by_scan(catalog, *id, from, to);
        }
    }));
    let mut c = Client::connect(port, token);
    let paths: Vec<String> =
        streams.iter().map(|(_, name)| format!("/api/streams/{name}/coverage?from_us={from}&to_us={to}")).collect();
    for p in paths.iter().take(10) {
        c.get(p, "");
    }
    let http_one = percentiles(time_n(n_one, |i| assert_eq!(c.get(&paths[i % paths.len()], "").0, 200)));
    let row = |what: &str, sum: &Value, scan: Option<&Value>| {
        json!({
            "query": what,
            "summaries": sum,
            "fragment_scan": scan,
            "scan_p95_over_summaries_p95": scan.map(|s| p95(s) / p95(sum)),
        })
    };
    let days = shape.days;
    let out = json!([
        row(&format!("one stream, {days} days"), &one_sum, Some(&one_scan)),
        row(&format!("one stream, {days} days, over HTTP"), &http_one, None),
        row(&format!("all {} streams, {days} days", streams.len()), &all_sum, Some(&all_scan)),
    ]);
    for r in out.as_array().unwrap() {
        eprintln!("{}: p95 {:.3} ms", r["query"], p95(&r["summaries"]) / 1000.0);
    }
    out
}

/// A short real recording of the built-in camera (`keeppeek demo`), cached.
fn demo_recording(work: &Path) -> PathBuf {
    let dir = work.join("demo");
    let done = work.join("demo.done");
    if done.exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_keeppeek"))
        .args(["demo", "--webrtc-port", "0", "--data-dir"])
        .arg(&dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(9));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success(), "keeppeek demo stopped cleanly");
    std::fs::write(&done, "").unwrap();
    dir
}

/// Part 3: an export of `target_bytes` (the demo recording linked many times into a stream's
/// timeline) against `cat` of its files.
fn export_throughput(work: &Path, target_bytes: u64) -> Value {
    let demo = demo_recording(work);
    let source = Catalog::open(&demo.join("catalog.redb")).unwrap();
    let recs: Vec<(u64, RecordingRow)> = source.recordings().unwrap().into_iter().filter(|(_, r)| !r.open).collect();
    assert!(!recs.is_empty(), "the demo recorded nothing");
    let rec_bytes: u64 = recs.iter().map(|(_, r)| r.bytes).sum();
    let copies = target_bytes.div_ceil(rec_bytes);
    let span_us = recs.iter().map(|(_, r)| r.wall_end_us).max().unwrap() - recs[0].1.wall_start_us + 1_000_000;

    let dir = work.join(format!("export-{copies}"));
    let bench = StreamKey::new("bench", StreamKind::Main);
    let catalog = if dir.join("done").exists() {
        Catalog::open(&dir.join("catalog.redb")).unwrap()
    } else {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("recordings/bench/main")).unwrap();
        let catalog = Catalog::open(&dir.join("catalog.redb")).unwrap();
        let stream_id = catalog.stream_id(&bench).unwrap();
        for k in 0..copies as i64 {
            let mut batch = Batch::default();
            for (src_id, r) in &recs {
                let shift = k * span_us;
                let row = RecordingRow {
                    stream_id,
                    wall_start_us: r.wall_start_us + shift,
                    wall_end_us: r.wall_end_us + shift,
                    ..r.clone()
                };
                let (id, row) = catalog.begin_recording(row, |id| format!("recordings/bench/main/{id}.mp4")).unwrap();
                std::fs::hard_link(demo.join(&r.path), dir.join(&row.path)).unwrap();
                for (seq, f) in source.fragments(*src_id).unwrap() {
                    let f =
                        FragmentRow { wall_start_us: f.wall_start_us + shift, wall_end_us: f.wall_end_us + shift, ..f };
                    batch.fragments.push((id, seq, f));
                }
                batch.recordings.push((id, row));
            }
            catalog.commit(&batch).unwrap();
        }
        std::fs::write(dir.join("done"), "").unwrap();
        catalog
    };
    let files: Vec<PathBuf> = catalog.recordings().unwrap().iter().map(|(_, r)| dir.join(&r.path)).collect();
    let file_bytes: u64 = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
    let (from, to) = (recs[0].1.wall_start_us - 1, recs[0].1.wall_start_us + copies as i64 * span_us);
    let catalog = Arc::new(catalog);

    let best_of_3 = |f: &mut dyn FnMut() -> u64| -> (u64, f64) {
        let mut best = f64::MAX;
        let mut bytes = 0;
        for _ in 0..3 {
            let t = Instant::now();
            bytes = f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        (bytes, bytes as f64 / 1e6 / best)
    };
    let (cat_bytes, cat_mbps) = best_of_3(&mut || {
        let ok = Command::new("cat").args(&files).stdout(Stdio::null()).status().unwrap().success();
        assert!(ok, "cat");
        file_bytes
    });
    let t = Instant::now();
    let plan = Export::plan(&catalog, &dir, &bench, from, to).unwrap();
    let plan_ms = t.elapsed().as_secs_f64() * 1e3;
    let (_, in_process_mbps) = best_of_3(&mut || {
        let ex = Export::plan(&catalog, &dir, &bench, from, to).unwrap();
        ex.write_to(&mut std::io::sink()).unwrap()
    });
    let (port, token) = start_server(catalog.clone(), dir.clone(), Vec::new());
    let mut c = Client::connect(port, &token);
    let path = format!("/api/streams/bench/main/export.mp4?from_us={from}&to_us={to}");
    let (http_bytes, http_mbps) = best_of_3(&mut || {
        let (status, _, len) = c.get(&path, "");
        assert_eq!(status, 200);
        len
    });
    assert_eq!(http_bytes, plan.len_bytes);
    eprintln!(
        "export {:.1} MB ({} files): HTTP {http_mbps:.0} MB/s, in process {in_process_mbps:.0} MB/s, cat {cat_mbps:.0} MB/s",
        http_bytes as f64 / 1e6,
        files.len()
    );
    json!({
        "files": files.len(),
        "file_bytes": cat_bytes,
        "export_bytes": http_bytes,
        "plan_ms": plan_ms,
        "cat_mb_per_s": cat_mbps,
        "export_in_process_mb_per_s": in_process_mbps,
        "export_http_mb_per_s": http_mbps,
        "http_over_cat": http_mbps / cat_mbps,
        "in_process_over_cat": in_process_mbps / cat_mbps,
    })
}

fn markdown(report: &Value) -> String {
    let mut md = format!("Mode: {}.\n\n### Cached answers over one keep-alive connection\n\n", report["mode"]);
    md.push_str("| route | requests | p50 µs | p95 µs | p99 µs | p95 / `/healthz` p95 |\n| --- | --- | --- | --- | --- | --- |\n");
    for r in report["cached_answers"].as_array().unwrap() {
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2} |",
            r["route"].as_str().unwrap(),
            r["n"],
            r["p50_us"].as_f64().unwrap(),
            r["p95_us"].as_f64().unwrap(),
            r["p99_us"].as_f64().unwrap(),
            r["p95_vs_healthz"].as_f64().unwrap()
        );
    }
    let _ = write!(
        md,
        "\n### Coverage, {} fragments\n\n| query | summaries p50 ms | summaries p95 ms | fragment scan p95 ms | scan / summaries |\n| --- | --- | --- | --- | --- |\n",
        report["catalog_fragments"]
    );
    let ms = |v: &Value, k: &str| v[k].as_f64().map_or("–".into(), |x| format!("{:.3}", x / 1000.0));
    for r in report["coverage"].as_array().unwrap() {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r["query"].as_str().unwrap(),
            ms(&r["summaries"], "p50_us"),
            ms(&r["summaries"], "p95_us"),
            ms(&r["fragment_scan"], "p95_us"),
            r["scan_p95_over_summaries_p95"].as_f64().map_or("–".into(), |x| format!("{x:.0}×"))
        );
    }
    let e = &report["export"];
    let _ = write!(
        md,
        "\n### Export, {:.1} MB from {} files\n\n| reader | MB/s | vs `cat` |\n| --- | --- | --- |\n\
         | `cat` of the files | {:.0} | 1.00 |\n| export in process | {:.0} | {:.2} |\n| export over HTTP | {:.0} | {:.2} |\n\
         \nPlanning the export: {:.1} ms.\n",
        e["export_bytes"].as_f64().unwrap() / 1e6,
        e["files"],
        e["cat_mb_per_s"].as_f64().unwrap(),
        e["export_in_process_mb_per_s"].as_f64().unwrap(),
        e["in_process_over_cat"].as_f64().unwrap(),
        e["export_http_mb_per_s"].as_f64().unwrap(),
        e["http_over_cat"].as_f64().unwrap(),
        e["plan_ms"].as_f64().unwrap(),
    );
    md
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let (shape, requests, mut export_bytes) = if smoke {
        (Shape { cameras: 4, days: 3, fragments_per_day: 128 }, 100, 16 << 20)
    } else {
        (Shape { cameras: 127, days: 30, fragments_per_day: 128 }, 1000, 256 << 20)
    };
    // `--export-mib 128` for a closer look at export alone.
    for w in args.windows(2) {
        if w[0] == "--export-mib" {
            export_bytes = w[1].parse::<u64>().expect("MiB") << 20;
        }
    }
    let out_dir = repo().join("target/bench");
    let work = out_dir.join("web");
    std::fs::create_dir_all(&work).unwrap();

    let catalog = Arc::new(generate(&work, shape));
    let streams: Vec<RunningStream> = catalog
        .streams()
        .unwrap()
        .into_iter()
        .map(|(_, name)| RunningStream {
            key: StreamKey::parse(&name).unwrap(),
            state: Arc::new(StreamState::default()),
            recording: None,
            live: Arc::new(keeppeek::live::Fanout::new(keeppeek::live::gop_pool())),
        })
        .collect();
    let (port, token) = start_server(catalog.clone(), work.clone(), streams);
    let cached = cached_answers(port, &token, requests, shape.streams() as usize);
    let coverage = coverage_queries(&catalog, port, &token, shape, smoke);
    let export = export_throughput(&work, export_bytes);

    let report = json!({
        "mode": if smoke { "smoke" } else { "full" },
        "catalog_fragments": shape.fragments(),
        "cached_answers": cached,
        "coverage": coverage,
        "export": export,
    });
    std::fs::write(out_dir.join("web.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out_dir.join("web.md"), &md).unwrap();
    println!("{md}");
}

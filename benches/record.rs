//! Recording benchmark: KeepPeek against the baseline NVR users run today, one
//! `ffmpeg -rtsp_transport tcp -i … -c copy -f segment` process per stream (as Frigate does),
//! both recording the same simulated camera in the same run.
//!
//! For a 720p 2 Mbit/s and a 1080p 4 Mbit/s camera-like clip (made on demand by
//! `tools/make-fixtures.sh --bench`) and N = 1, 4, 16 and 64 streams it reports, per stream:
//! CPU (% of one core), peak RSS, PSS and anonymous memory, threads, bytes written per
//! recorded hour, and for KeepPeek the catalog commits and file syncs per recorded hour and
//! the memory budget's total beside its measured peak; then the ratios KeepPeek / ffmpeg.
//! Each clip is also recorded with the camera's sound (G.711 in 20 ms packets, 50 audio frames
//! a second: the most frames of any codec cameras send; ffmpeg, which cannot put G.711 in MP4,
//! turns it into AAC as NVRs built on it do), and the table "what sound costs"
//! sets KeepPeek with sound beside the same clip without (issue 20's goal: at most 10 % more
//! CPU). Beside it, the *receiving floor*: a process that only receives the same streams as
//! KeepPeek's ingest does (retina's sessions over TCP, on the paced ingest thread) and drops
//! every packet, so the table can say how much of what sound costs is receiving its packets at
//! all and how much is what KeepPeek does with them; and the *socket floor*, the same
//! sessions set up by hand and their connections only read (what any reader pays). Reports: `target/bench/record.json` and
//! `target/bench/record.md`.
//!
//! `cargo bench --bench record`            the full run (60 s per side, clip and N)
//! `cargo bench --bench record -- --smoke` the small test clip, N = 1 for 8 s per side (CI)
//! `--streams 1,4 --seconds 30 --clip 720p` narrows the full run.
//!
//! `--reference NAME=COMMAND` adds a third side, another NVR measured in the same run: the
//! bench runs `COMMAND N URL DIR`, which sets that NVR up in DIR to record N streams of URL and
//! then execs it (so the pid measured is the NVR's), and reports KeepPeek's CPU and RSS over
//! its. Goals stated against another NVR are judged this way, never against figures taken on
//! another day: this machine's speed drifts by half from day to day.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What one process used, read from /proc.
#[derive(Clone, Copy, Default, Serialize)]
struct Usage {
    cpu_s: f64,
    peak_rss_bytes: u64,
    pss_bytes: u64,
    anon_bytes: u64,
    threads: u64,
    written_bytes: u64,
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, o: Usage) -> Usage {
        Usage {
            cpu_s: self.cpu_s + o.cpu_s,
            peak_rss_bytes: self.peak_rss_bytes + o.peak_rss_bytes,
            pss_bytes: self.pss_bytes + o.pss_bytes,
            anon_bytes: self.anon_bytes + o.anon_bytes,
            threads: self.threads + o.threads,
            written_bytes: self.written_bytes + o.written_bytes,
        }
    }
}

fn proc_field(pid: u32, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time of every live thread of `pid`, to the nanosecond (`/proc/*/stat` counts in
/// 10 ms ticks, too coarse for one quiet stream). The threads measured live for the whole
/// run, so none of their time is lost with an exited thread.
fn cpu_s(pid: u32) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("process is alive");
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

fn usage(pid: u32) -> Usage {
    Usage {
        cpu_s: cpu_s(pid),
        peak_rss_bytes: proc_field(pid, "status", "VmHWM:") * 1024,
        pss_bytes: proc_field(pid, "smaps_rollup", "Pss:") * 1024,
        anon_bytes: proc_field(pid, "status", "RssAnon:") * 1024,
        threads: proc_field(pid, "status", "Threads:"),
        written_bytes: proc_field(pid, "io", "wchar:"),
    }
}

/// Runs `n` sessions made by `session` (given the URL, and where to say it plays) on a paced
/// ingest thread like KeepPeek's; says "playing N" on stderr once all play, then runs until
/// killed.
fn on_the_ingest_thread<F, Fut>(url: &str, n: usize, session: F)
where
    F: Fn(url::Url, std::sync::mpsc::Sender<()>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tick = Duration::from_millis(keeppeek::limits::INGEST_READ_TICK_MS);
    let thread = keeppeek::ingest::pace::IngestThread::start(tick).expect("the ingest thread");
    let url = url::Url::parse(url).expect("a URL");
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..n {
        thread.spawn(session(url.clone(), tx.clone()));
    }
    for _ in 0..n {
        rx.recv().expect("every session plays");
    }
    eprintln!("playing {n}");
    loop {
        std::thread::park();
    }
}

/// The receiving floor (`--drain URL N`, run by the bench itself as its own process): `n`
/// sessions of `url` set up as KeepPeek's ingest sets up a camera's (TCP, the video and the
/// sound), on the same paced ingest thread, every packet dropped. Says "playing N" on stderr
/// once all play, then runs until killed.
fn drain(url: &str, n: usize) {
    use futures::StreamExt;
    use retina::client::{PlayOptions, Session, SessionOptions, SetupOptions, Transport};
    on_the_ingest_thread(url, n, |url, tx| async move {
        // A session the camera breaks (a packet out of order as PLAY's answer comes, as
        // KeepPeek's ingest also meets) is set up again, as KeepPeek's would be.
        let mut playing_once = Some(tx);
        loop {
            let mut session = Session::describe(url.clone(), SessionOptions::default()).await.expect("DESCRIBE");
            for i in 0..session.streams().len() {
                let options = SetupOptions::default().transport(Transport::Tcp(Default::default()));
                session.setup(i, options).await.expect("SETUP");
            }
            let play =
                PlayOptions::default().enforce_timestamps_with_max_jump_secs(std::num::NonZeroU32::new(10).unwrap());
            let mut playing = session.play(play).await.expect("PLAY");
            if let Some(tx) = playing_once.take() {
                tx.send(()).unwrap();
            }
            while let Some(Ok(item)) = playing.next().await {
                std::hint::black_box(item);
            }
            eprintln!("a session broke; set up again");
        }
    })
}

/// The socket floor (`--drain-raw URL N`): the least any reader of these streams could
/// spend. `n` sessions set up by hand (DESCRIBE, SETUP of every track interleaved over TCP,
/// PLAY) on the same paced ingest thread, then each connection's bytes read and walked
/// frame by frame (`$`, channel, length) and dropped: the kernel's work and the runtime's,
/// no RTP checked, nothing allocated a packet. Set beside [`drain`], it says how much of
/// receiving a packet is retina's and how much any RTSP reader would pay.
fn drain_raw(url: &str, n: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // One request, its answer read up to the end of its body; returns the head and body.
    async fn request(s: &mut tokio::net::TcpStream, cseq: &mut u32, line: &str, extra: &str) -> (String, String) {
        *cseq += 1;
        let req = format!("{line} RTSP/1.0\r\nCSeq: {cseq}\r\n{extra}\r\n");
        s.write_all(req.as_bytes()).await.expect("writing a request");
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let b = s.read_u8().await.expect("reading an answer");
            // The camera may send interleaved packets before PLAY's answer: skipped whole.
            if head.is_empty() && b == b'$' {
                let _channel = s.read_u8().await.expect("reading a packet");
                let mut skip = vec![0; usize::from(s.read_u16().await.expect("reading a packet"))];
                s.read_exact(&mut skip).await.expect("reading a packet");
                continue;
            }
            head.push(b);
            assert!(head.len() < 8192, "an answer's head over 8 KiB");
        }
        let head = String::from_utf8(head).expect("an answer in text");
        assert!(head.starts_with("RTSP/1.0 200"), "{line}: {head}");
        let header = |name: &str| {
            head.lines().find_map(|l| {
                l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string())
            })
        };
        let mut body = vec![0; header("Content-Length").map_or(0, |v| v.parse().expect("a length"))];
        s.read_exact(&mut body).await.expect("reading a body");
        (head, String::from_utf8(body).expect("a body in text"))
    }
    on_the_ingest_thread(url, n, |url, tx| async move {
        let addr = format!("{}:{}", url.host_str().expect("a host"), url.port().unwrap_or(554));
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connecting");
        let mut cseq = 0;
        let (_, sdp) = request(&mut s, &mut cseq, &format!("DESCRIBE {url}"), "Accept: application/sdp\r\n").await;
        let controls: Vec<&str> =
            sdp.lines().filter_map(|l| l.strip_prefix("a=control:")).filter(|c| *c != "*").collect();
        let mut session = String::new();
        for (i, control) in controls.iter().enumerate() {
            let track = if control.starts_with("rtsp://") {
                control.to_string()
            } else {
                format!("{}/{control}", url.as_str().trim_end_matches('/'))
            };
            let transport = format!("Transport: RTP/AVP/TCP;unicast;interleaved={}-{}\r\n{session}", 2 * i, 2 * i + 1);
            let (head, _) = request(&mut s, &mut cseq, &format!("SETUP {track}"), &transport).await;
            let id = head.lines().find_map(|l| l.strip_prefix("Session:")).expect("a session").trim();
            session = format!("Session: {}\r\n", id.split(';').next().unwrap_or(id));
        }
        request(&mut s, &mut cseq, &format!("PLAY {url}"), &session).await;
        tx.send(()).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let (mut skip, mut head, mut have, mut packets) = (0usize, [0u8; 4], 0usize, 0u64);
        loop {
            let got = s.read(&mut buf).await.expect("reading");
            assert!(got > 0, "the camera ended a session");
            let mut i = 0;
            while i < got {
                if skip > 0 {
                    let k = skip.min(got - i);
                    (skip, i) = (skip - k, i + k);
                    continue;
                }
                head[have] = buf[i];
                (have, i) = (have + 1, i + 1);
                if have == 4 {
                    assert_eq!(head[0], b'$', "interleaved data");
                    (skip, have, packets) = (usize::from(u16::from_be_bytes([head[2], head[3]])), 0, packets + 1);
                }
            }
            std::hint::black_box(packets);
        }
    })
}

/// Runs a floor on `n` streams, `mode` `--drain` (the receiving floor, [`drain`]) or
/// `--drain-raw` (the socket floor, [`drain_raw`]); returns its usage over `secs` from a
/// second after every session plays.
fn run_floor(mode: &str, url: &str, n: usize, secs: u64, work: &Path) -> Usage {
    let log = work.join(format!("floor{mode}-{n}.log"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([mode, url, &n.to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting the receiving floor");
    let end = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("playing") {
        assert!(Instant::now() < end, "the receiving floor did not play {n} streams in 60 s");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the receiving floor failed: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = usage(child.id());
    std::thread::sleep(Duration::from_secs(secs));
    let after = usage(child.id());
    sigterm(&mut child);
    Usage { cpu_s: after.cpu_s - before.cpu_s, ..after }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Camera(Child);

impl Drop for Camera {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_camera(fixtures: &Path, port: u16, work: &Path) -> Camera {
    let ready = work.join("camera.ready");
    let _ = std::fs::remove_file(&ready);
    let child = Command::new("/usr/bin/python3")
        .arg(repo().join("tools/rtsp-camera.py"))
        .args(["--port", &port.to_string(), "--fixtures"])
        .arg(fixtures)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the RTSP camera");
    let end = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < end, "the RTSP camera did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Camera(child)
}

fn sigterm(child: &mut Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// Runs KeepPeek on `n` streams; returns its usage over `secs` after warm-up, its log and
/// its memory budget's total.
fn run_keeppeek(url: &str, n: usize, secs: u64, work: &Path) -> (Usage, String, u64) {
    let dir = work.join(format!("keeppeek-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = String::from(
        "data_dir = \"data\"\nram_class = \"2 GiB\"\n[retention]\nstream_max_bytes = \"10 GiB\"\ntotal_max_bytes = \"100 GiB\"\n",
    );
    for i in 0..n {
        config.push_str(&format!("[[cameras]]\nname = \"c{i}\"\nmain = {{ url = \"{url}\" }}\n"));
    }
    std::fs::write(dir.join("keeppeek.toml"), config).unwrap();
    let budget = Command::new(env!("CARGO_BIN_EXE_keeppeek")).arg("budget").arg(dir.join("keeppeek.toml")).output();
    let budget = String::from_utf8(budget.unwrap().stdout).unwrap();
    let budget_bytes = budget
        .lines()
        .find_map(|l| l.strip_prefix("total")?.split_whitespace().next()?.parse::<f64>().ok())
        .map(|mib| (mib * 1048576.0) as u64)
        .expect("the budget's total");
    let log = dir.join("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_keeppeek"))
        .args(["run", "--config"])
        .arg(dir.join("keeppeek.toml"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Measured from when every stream records, and a second more: what a box costs while it
    // records, not the sessions' set-up (which takes longer with sound: a second SETUP), so a
    // window that began during it charged the set-up to the side that took longer.
    let end = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&log).unwrap_or_default().matches("recording to").count() < n {
        assert!(Instant::now() < end, "KeepPeek did not start recording all {n} streams in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = usage(pid);
    std::thread::sleep(Duration::from_secs(secs));
    let after = usage(pid);
    sigterm(&mut child);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.matches("recording to").count() >= n, "KeepPeek did not record all {n} streams:\n{text}");
    let u =
        Usage { cpu_s: after.cpu_s - before.cpu_s, written_bytes: after.written_bytes - before.written_bytes, ..after };
    (u, text, budget_bytes)
}

/// Runs `n` ffmpeg processes; returns their summed usage over `secs` after warm-up.
fn run_ffmpeg(url: &str, n: usize, secs: u64, work: &Path) -> Usage {
    let dir = work.join(format!("ffmpeg-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // MP4 has no G.711 ffmpeg writes: NVRs on ffmpeg turn it into AAC to keep it (Frigate's
    // "preset-record-generic-audio-aac"), and so does this side.
    let codecs: &[&str] = if url.ends_with("-pcmu") { &["-c:v", "copy", "-c:a", "aac"] } else { &["-c", "copy"] };
    let mut children: Vec<Child> = (0..n)
        .map(|i| {
            Command::new("ffmpeg")
                .args(["-nostdin", "-loglevel", "error", "-rtsp_transport", "tcp", "-i", url])
                .args(codecs)
                .args(["-f", "segment", "-segment_time", "60", "-reset_timestamps", "1"])
                .arg(dir.join(format!("s{i}-%03d.mp4")))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting ffmpeg")
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let before: Vec<Usage> = children.iter().map(|c| usage(c.id())).collect();
    std::thread::sleep(Duration::from_secs(secs));
    let mut total = Usage::default();
    for (c, b) in children.iter().zip(&before) {
        let a = usage(c.id());
        total = total + Usage { cpu_s: a.cpu_s - b.cpu_s, written_bytes: a.written_bytes - b.written_bytes, ..a };
    }
    for c in &mut children {
        sigterm(c);
    }
    let written: u64 = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(written > 0, "ffmpeg recorded nothing");
    total
}

/// Runs another NVR by `command` (see the module's doc) on `n` streams; returns its usage over
/// `secs`, measured after a longer warm-up than KeepPeek's since it sets up its own database.
fn run_reference(command: &str, url: &str, n: usize, secs: u64, work: &Path) -> Usage {
    let dir = work.join(format!("reference-{n}"));
    let mut child = Command::new(command)
        .arg(n.to_string())
        .arg(url)
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the reference NVR");
    std::thread::sleep(Duration::from_secs(6));
    let before = usage(child.id());
    std::thread::sleep(Duration::from_secs(secs));
    let after = usage(child.id());
    sigterm(&mut child);
    assert!(after.written_bytes > before.written_bytes, "the reference NVR recorded nothing");
    Usage { cpu_s: after.cpu_s - before.cpu_s, written_bytes: after.written_bytes - before.written_bytes, ..after }
}

/// The number after `key=` in the last log line that has it.
fn log_number(log: &str, key: &str) -> u64 {
    log.lines()
        .rev()
        .find_map(|l| l.split(key).nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or(0)
}

#[derive(Serialize)]
struct Row {
    clip: &'static str,
    streams: usize,
    keeppeek_budget_bytes: u64,
    seconds: u64,
    keeppeek: Usage,
    ffmpeg: Usage,
    /// Receiving alone (see [`drain`]).
    floor: Usage,
    /// Reading the connections alone (see [`drain_raw`]).
    socket_floor: Usage,
    reference: Option<Usage>,
    keeppeek_catalog_commits_per_hour: f64,
    keeppeek_file_syncs_per_stream_hour: f64,
    cpu_ratio: f64,
    rss_ratio: f64,
    pss_ratio: f64,
    /// KeepPeek over the reference NVR, when one ran.
    reference_cpu_ratio: Option<f64>,
    reference_rss_ratio: Option<f64>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--drain") {
        return drain(&args[i + 1], args[i + 2].parse().expect("a count of streams"));
    }
    if let Some(i) = args.iter().position(|a| a == "--drain-raw") {
        return drain_raw(&args[i + 1], args[i + 2].parse().expect("a count of streams"));
    }
    let smoke = args.iter().any(|a| a == "--smoke");
    let (mut counts, mut secs): (Vec<usize>, u64) = if smoke { (vec![1], 8) } else { (vec![1, 4, 16, 64], 60) };
    let mut clips: Vec<(&'static str, &str)> = if smoke {
        vec![("360p test clip", "/h264"), ("360p test clip + G.711", "/h264-pcmu")]
    } else {
        vec![
            ("720p 2 Mbit/s", "/h264-720p"),
            ("720p 2 Mbit/s + G.711", "/h264-720p-pcmu"),
            ("1080p 4 Mbit/s", "/h264-1080p"),
            ("1080p 4 Mbit/s + G.711", "/h264-1080p-pcmu"),
        ]
    };
    let mut reference: Option<(&str, &str)> = None;
    // `--streams 1,4 --seconds 30 --clip 720p` for a quicker look at one change.
    for w in args.windows(2) {
        match w[0].as_str() {
            "--streams" => counts = w[1].split(',').filter_map(|n| n.parse().ok()).collect(),
            "--seconds" => secs = w[1].parse().unwrap_or(secs),
            "--reference" => reference = w[1].split_once('='),
            "--clip" => clips.retain(|(name, _)| name.starts_with(w[1].as_str())),
            _ => {}
        }
    }
    let out_dir = repo().join("target/bench");
    let work = out_dir.join("record-work");
    std::fs::create_dir_all(&work).unwrap();
    let fixtures = repo().join("target/fixtures");
    let mut make = Command::new("bash");
    make.arg(repo().join("tools/make-fixtures.sh")).arg(&fixtures);
    if !smoke {
        make.arg("--bench");
    }
    let status = make.status().unwrap();
    assert!(status.success(), "making fixtures");
    let port = free_port();
    let _camera = start_camera(&fixtures, port, &work);

    let mut rows = Vec::new();
    for &(clip, path) in &clips {
        let url = format!("rtsp://127.0.0.1:{port}{path}");
        for &n in &counts {
            let (kp, log, budget) = run_keeppeek(&url, n, secs, &work);
            let ff = run_ffmpeg(&url, n, secs, &work);
            let floor = run_floor("--drain", &url, n, secs, &work);
            let socket_floor = run_floor("--drain-raw", &url, n, secs, &work);
            let re = reference.map(|(_, command)| run_reference(command, &url, n, secs, &work));
            // Commits and syncs are counted over the whole run (warm-up and shutdown included),
            // so the per-hour figures are slightly high.
            let run_hours = (secs + 2) as f64 / 3600.0;
            let row = Row {
                clip,
                streams: n,
                keeppeek_budget_bytes: budget,
                seconds: secs,
                keeppeek: kp,
                ffmpeg: ff,
                floor,
                socket_floor,
                reference: re,
                keeppeek_catalog_commits_per_hour: log_number(&log, "catalog_commits=") as f64 / run_hours,
                keeppeek_file_syncs_per_stream_hour: log_number(&log, "file_syncs=") as f64 / run_hours / n as f64,
                cpu_ratio: kp.cpu_s / ff.cpu_s.max(1e-9),
                rss_ratio: kp.peak_rss_bytes as f64 / ff.peak_rss_bytes.max(1) as f64,
                pss_ratio: kp.pss_bytes as f64 / ff.pss_bytes.max(1) as f64,
                reference_cpu_ratio: re.map(|re| kp.cpu_s / re.cpu_s.max(1e-9)),
                reference_rss_ratio: re.map(|re| kp.peak_rss_bytes as f64 / re.peak_rss_bytes.max(1) as f64),
            };
            eprintln!(
                "N={n}: keeppeek {:.2} cpu-s, ffmpeg {:.2} cpu-s; ratios cpu {:.3} rss {:.3}",
                kp.cpu_s, ff.cpu_s, row.cpu_ratio, row.rss_ratio
            );
            rows.push(row);
        }
    }

    let mib = |b: u64| b as f64 / 1048576.0;
    let mut md = String::from(
        "| clip | streams | side | CPU % of a core / stream | peak RSS MiB (all) | PSS MiB (all) | anonymous MiB (all) | threads | MiB written / stream-hour | catalog commits / hour | file syncs / stream-hour | budget MiB |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in &rows {
        let n = r.streams as f64;
        let per_hour = 3600.0 / r.seconds as f64;
        let reference = reference.zip(r.reference.as_ref()).map(|((name, _), u)| (name, u));
        for (side, u) in [("KeepPeek", &r.keeppeek), ("ffmpeg ×N", &r.ffmpeg)].into_iter().chain(reference) {
            let kp = side == "KeepPeek";
            let only_kp = |v: String| if kp { v } else { "–".into() };
            let _ = writeln!(
                md,
                "| {} | {} | {side} | {:.2} | {:.1} | {:.1} | {:.1} | {} | {:.0} | {} | {} | {} |",
                r.clip,
                r.streams,
                u.cpu_s / r.seconds as f64 / n * 100.0,
                mib(u.peak_rss_bytes),
                mib(u.pss_bytes),
                mib(u.anon_bytes),
                u.threads,
                mib(u.written_bytes) / n * per_hour,
                only_kp(format!("{:.0}", r.keeppeek_catalog_commits_per_hour)),
                only_kp(format!("{:.0}", r.keeppeek_file_syncs_per_stream_hour)),
                only_kp(format!("{:.1}", mib(r.keeppeek_budget_bytes))),
            );
        }
    }
    let reference_name = reference.map_or("reference", |(name, _)| name);
    let _ = write!(
        md,
        "\n| clip | streams | CPU / ffmpeg | peak RSS / ffmpeg | PSS / ffmpeg | budget / peak RSS | CPU / {reference_name} | peak RSS / {reference_name} |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    let ratio = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.3}"));
    for r in &rows {
        let budget_ratio = r.keeppeek_budget_bytes as f64 / r.keeppeek.peak_rss_bytes.max(1) as f64;
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {budget_ratio:.1} | {} | {} |",
            r.clip,
            r.streams,
            r.cpu_ratio,
            r.rss_ratio,
            r.pss_ratio,
            ratio(r.reference_cpu_ratio),
            ratio(r.reference_rss_ratio)
        );
    }
    // What sound costs: each clip with sound against the same clip without, same N.
    md.push_str(
        "\nWhat sound costs KeepPeek (the clip with G.711 over the same clip without); the receiving floor is a \
         process that only receives the same streams, as KeepPeek's ingest does, and drops every packet; the \
         socket floor only reads the connections and walks their interleaved frames:\n\n\
         | clip | streams | CPU with / without | socket floor, CPU-s without → with | receiving floor, CPU-s \
         without → with | KeepPeek less the receiving floor, CPU-s without → with | that, with / without | peak RSS \
         with / without |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows.iter().filter(|r| r.clip.ends_with(" + G.711")) {
        let plain = r.clip.trim_end_matches(" + G.711");
        if let Some(p) = rows.iter().find(|p| p.clip == plain && p.streams == r.streams) {
            let (own, own_plain) = (r.keeppeek.cpu_s - r.floor.cpu_s, p.keeppeek.cpu_s - p.floor.cpu_s);
            let _ = writeln!(
                md,
                "| {plain} | {} | {:.3} | {:.3} → {:.3} | {:.3} → {:.3} | {own_plain:.3} → {own:.3} | {:.3} | {:.3} |",
                r.streams,
                r.keeppeek.cpu_s / p.keeppeek.cpu_s.max(1e-9),
                p.socket_floor.cpu_s,
                r.socket_floor.cpu_s,
                p.floor.cpu_s,
                r.floor.cpu_s,
                own / own_plain.max(1e-9),
                r.keeppeek.peak_rss_bytes as f64 / p.keeppeek.peak_rss_bytes.max(1) as f64
            );
        }
    }
    md.push_str("\nGoal (issue 20): sound adds at most 10 % to recording CPU (a ratio of at most 1.100).\n");
    // Issue 14's goal: KeepPeek at most 0.8 times Moonfire NVR's CPU and RSS at every N,
    // recording the same 720p 2 Mbit/s clip, judged with Moonfire as the reference side.
    md.push_str(
        "\nGoal (720p 2 Mbit/s): CPU and peak RSS at most 0.8 × Moonfire NVR's, recording the same clip in the \
         same run (`--reference moonfire=COMMAND`); ratios above 0.8 in the last two columns miss it.\n",
    );
    let mode = if smoke { "smoke" } else { "full" };
    let header = format!("# Recording benchmark ({mode}: {secs} s per side)\n\n");
    std::fs::write(out_dir.join("record.md"), format!("{header}{md}")).unwrap();
    std::fs::write(out_dir.join("record.json"), serde_json::to_string_pretty(&rows).unwrap()).unwrap();
    println!("{header}{md}");
}

//! The memory budget against the real binary with its ceilings driven at once: 32 cameras
//! (main and sub) on the 1 GiB class sending frames at their kind's ceiling in step (every
//! session holding a frame being received while a quarter of them arrive at once, so the
//! live GOPs and the pre-roll fill; then all at once, so the ingest queues do), 1,000 logins, every event upload
//! place full with a body of the largest size, every export running to a client that does
//! not read, and every other HTTP connection open with a head at its ceiling. The peak RSS
//! and PSS stay under `keeppeek budget`'s total.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use crate::common::*;
use crate::firehose::{Firehose, GROUPS};
use crate::viewer::{Farm, Viewer};

const CAMERAS: usize = 32;
/// Frames at their ceilings: the RTP payloads that carry one (the NAL unit in FU-A
/// fragments of 16 KiB, two bytes of header each) add up to just under its stream's ceiling.
const MAIN_FRAME_BYTES: usize = (1 << 20) - 256;
const SUB_FRAME_BYTES: usize = (256 << 10) - 256;

/// A pool's figure from `/metrics`.
fn pool(port: u16, token: &str, family: &str, pool: &str) -> u64 {
    sample(port, token, &format!("{family}{{pool=\"{pool}\"}}")).unwrap_or_else(|| panic!("{family} {pool}"))
}

/// Sends all of a request but its last byte; the connection stays open, its handler waiting.
fn all_but_the_last_byte(port: u16, head: &str, body: &[u8]) -> TcpStream {
    let mut s = connect(port);
    let mut all = head.as_bytes().to_vec();
    all.extend_from_slice(body);
    s.write_all(&all[..all.len() - 1]).unwrap();
    s
}

/// It loads both cores to their limit, so it runs alone, in a step of its own in
/// `tools/test.sh` (beside other tests, drops from CPU starvation keep the pre-roll from
/// filling).
#[test]
#[ignore = "runs alone: tools/test.sh runs it with --ignored in a step of its own"]
fn every_ceiling_at_once_stays_under_the_budget() {
    let cameras = Firehose::start(MAIN_FRAME_BYTES, SUB_FRAME_BYTES, 5);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut body = format!(
        "listen = \"127.0.0.1:{port}\"\nram_class = \"1 GiB\"\nflush_interval_s = 2\n\
         [retention]\nstream_max_bytes = \"2 GiB\"\ntotal_max_bytes = \"60 GiB\"\n\
         [webrtc]\nport = {}\nloopback = true\n",
        free_port()
    );
    for i in 0..CAMERAS {
        let record = if i % 4 == 0 { "events" } else { "continuous" };
        body.push_str(&format!(
            "[[cameras]]\nname = \"c{i}\"\nrecord = \"{record}\"\nmain = {{ url = \"{}\" }}\nsub = {{ url = \"{}\" }}\n",
            cameras.url("/main"),
            cameras.url("/sub")
        ));
    }
    let config = write_config(dir.path(), &body);
    let total_kib = budget_line_kib(&config, "total");
    let mut d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(30));
    let admin = setup_admin(port);
    let metrics = make_token(port, &admin, r#""metrics""#);
    let viewer = make_token(port, &admin, r#""view""#);
    let writer = make_token(port, &admin, r#""events:write""#);
    let peaks = RssPeak::watch(d.pid());
    // A second at a time, each group of sessions in turn: their frames arrive a quarter of
    // the streams at once, which the queues take, while every other session holds a frame
    // being received and the held GOPs and histories fill.
    // Under an emulator (qemu-user runs the aarch64 build several times slower) a group's
    // turn lasts four times as long, so the box keeps up as a board would.
    let turn_ms = if std::env::var_os("KEEPPEEK_RUNNER").is_some() { 1000 } else { 250 };
    let cycle = |n: usize| {
        for _ in 0..n {
            for group in 0..GROUPS {
                cameras.release_group(group);
                std::thread::sleep(Duration::from_millis(turn_ms));
            }
        }
    };
    cycle(3);
    let connected = sample_sum(port, &metrics, "keeppeek_stream_connected");
    assert_eq!(connected, 64, "every session up: {}", d.log_text());

    // Every live session the class holds (64 on 1 GiB: half for a viewer's token, half for
    // an admin), two on each sub stream, streaming while the rest goes on. The admin is not
    // root: the login flood logs root in 200 times, and past its 16 login sessions the oldest
    // ends, with every live view it opened.
    let (code, _, body) = request(
        port,
        "POST",
        "/api/users",
        &[("cookie", &admin.0), ("x-csrf-token", &admin.1)],
        r#"{"username":"keeper","password":"another horse battery","role":"admin"}"#,
    );
    assert!(code == 200 || code == 201, "a second admin: {code} {body}");
    let login = request(port, "POST", "/api/login", &[], r#"{"username":"keeper","password":"another horse battery"}"#);
    let (cookie, csrf) = session_of(&login.1, &login.2);
    let cookie = cookie.as_str();
    let bearer = format!("Bearer {viewer}");
    let offer = |i: usize| {
        let (mut v, pending, offer) = Viewer::offer();
        let sdp = ("content-type", "application/sdp");
        let headers: Vec<(&str, &str)> = if i < 32 {
            vec![("authorization", &bearer), sdp]
        } else {
            vec![("cookie", cookie), ("x-csrf-token", &csrf), sdp]
        };
        let (code, _, answer) = request(port, "POST", &format!("/api/whep/c{}/sub", i / 2), &headers, &offer);
        assert_eq!(code, 201, "live session {i}: {answer}");
        v.answer(pending, &answer);
        v
    };
    // Four threads drive them, so the viewers keep up with what is sent; they join sixteen
    // at a time, each group streaming (a whole frame at the ceiling) before the next, and
    // all before the logins start: what this measures is memory, not 64 handshakes racing
    // each other and the password hashing for the CPU (under the emulator that race is lost
    // past the connect timeout).
    let mut farms: Vec<Farm> = Vec::new();
    for group in 0..4 {
        // They connect while the cameras hold their frames, then stream.
        farms.push(Farm::start((group * 16..group * 16 + 16).map(offer).collect()));
        let deadline = std::time::Instant::now() + Duration::from_millis(keeppeek::limits::WEBRTC_CONNECT_TIMEOUT_MS);
        while farms[group].connected() < 16 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let deadline = std::time::Instant::now() + Duration::from_millis(60 * turn_ms);
        while farms[group].min_frames() == 0 && std::time::Instant::now() < deadline {
            cycle(1);
        }
        assert!(
            farms[group].min_frames() > 0,
            "live sessions {}..{} stream: frames {:?}, connect timeouts {:?}, skipped {:?}, dropped at the engine's queue {}, keyframe bursts {:?}",
            group * 16,
            group * 16 + 16,
            farms[group].frames(),
            sample(port, &metrics, "keeppeek_webrtc_connect_timeouts_total"),
            sample(port, &metrics, "keeppeek_webrtc_frames_skipped_total"),
            sample_sum(port, &metrics, "keeppeek_live_tap_drops_total"),
            sample(port, &metrics, "keeppeek_webrtc_keyframe_bursts_total"),
        );
    }
    let frames_before: Vec<u64> = farms.iter().flat_map(Farm::frames).collect();

    // 1,000 logins while the cameras send.
    let logins = std::thread::spawn(move || login_flood(port));
    cycle(6);
    let (ok, refused, limited) = logins.join().unwrap();
    assert_eq!(ok + refused + limited, 1000);

    // Every export running to a client that does not read, every upload place holding a
    // body of the largest size, and the rest of the connections with a head at its ceiling.
    let from = wall_us() - 8_000_000;
    let export = |i: usize| {
        let path = format!("/api/streams/c{}/main/export.mp4?from_us={from}&to_us={}", i * 4 + 1, wall_us());
        let head = format!("GET {path} HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {viewer}\r\n\r\n");
        let mut s = connect(port);
        s.write_all(head.as_bytes()).unwrap();
        s
    };
    let mut held: Vec<TcpStream> = (0..4).map(export).collect();
    // The uploads' memory holds one body of the largest size (twice: read, then split)
    // and the rest in three smaller ones.
    let largest = (8 << 20) + (24 << 10);
    let rest = ((24 << 20) - 2 * largest) / 6 - 1024;
    for len in [largest, rest, rest, rest] {
        let head = format!(
            "POST /api/events HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {writer}\r\n\
             content-type: application/json\r\ncontent-length: {len}\r\n\r\n"
        );
        held.push(all_but_the_last_byte(port, &head, &vec![b'x'; len]));
    }
    let line = format!("x-fill: {}\r\n", "f".repeat(8000));
    while held.len() < 250 {
        let mut s = connect(port);
        let mut head = String::from("GET /api/cameras HTTP/1.1\r\n");
        while head.len() + line.len() < (64 << 10) - 64 {
            head.push_str(&line);
        }
        s.write_all(head.as_bytes()).unwrap();
        held.push(s);
    }
    cycle(3);
    // And then every frame at once, three times over (120 MiB against the queues' 72 MiB,
    // faster than the writers drain them): the queues' pool fills, and streams drop until
    // their next keyframe.
    for _ in 0..3 {
        cameras.release();
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1000));
    cycle(1);
    let figures: Vec<(&str, u64, u64)> = ["ingest_queues", "live_gops", "event_uploads"]
        .into_iter()
        .map(|p| {
            (p, pool(port, &metrics, "keeppeek_pool_peak_bytes", p), pool(port, &metrics, "keeppeek_pool_max_bytes", p))
        })
        .collect();
    let sending = (
        pool(port, &metrics, "keeppeek_pool_peak_bytes", "live_sending"),
        pool(port, &metrics, "keeppeek_pool_max_bytes", "live_sending"),
    );
    drop(held);
    // The viewers stream on (one that lost frames while the box was busiest waits for a
    // keyframe).
    let behind = || farms.iter().flat_map(Farm::frames).zip(&frames_before).any(|(now, before)| now <= *before);
    let deadline = std::time::Instant::now() + Duration::from_millis(60 * turn_ms);
    while behind() && std::time::Instant::now() < deadline {
        cycle(1);
    }
    let got: Vec<(u64, u64)> = farms.into_iter().flat_map(Farm::stop).map(|v| (v.frames, v.received_bytes)).collect();
    // A session streamed when it went on receiving whole frames at their ceiling while
    // every other ceiling was reached.
    let streamed = got.iter().zip(&frames_before).filter(|&(&(frames, _), before)| frames > *before).count();
    let skipped = sample(port, &metrics, "keeppeek_webrtc_frames_skipped_total").unwrap();
    let tap_drops = sample_sum(port, &metrics, "keeppeek_live_tap_drops_total");
    let preroll_high = sample(port, &metrics, "keeppeek_preroll_total_high_water_bytes").unwrap();
    let preroll_max = sample(port, &metrics, "keeppeek_preroll_total_max_bytes").unwrap();
    let Memory { rss_kib: rss, pss_kib: pss, anon_kib: anon, process_rss_kib } = peaks.stop_all();
    d.stop();
    eprintln!(
        "worst case: peak RSS {rss} KiB, PSS {pss} KiB, anonymous {anon} KiB; budget {total_kib} KiB (the process, an emulator's memory included: {process_rss_kib} KiB)"
    );
    for (name, peak, max) in &figures {
        eprintln!("  pool {name}: peak {peak} of {max} bytes");
    }
    eprintln!("  pre-roll: high water {preroll_high} of {preroll_max} bytes; live: {streamed} of 64 sessions streamed");
    eprintln!(
        "  live frames waiting for the pacers: peak {} of {} bytes, {skipped} skipped; {tap_drops} dropped at the engine's queue",
        sending.0, sending.1
    );
    for (name, peak, max) in &figures {
        // The ingest queues and the live GOPs (a recorded stream's held GOP leaves RAM as the
        // writers write it) fill only while the writers lag behind the cameras, so how full
        // they get depends on the machine's disk and cores: the GOPs reached 89.8 % on one
        // host and 90.6 % on another. On the host both must reach three quarters. Under the
        // emulator the writers' system calls run at native speed while receiving frames is
        // emulated, several times slower, so the writers keep up more often: there the
        // queues must reach three quarters (84 % in one run) and the GOPs are not required
        // to fill (85 to 89 %). Their budget lines are still their ceilings.
        let least = match (*name, std::env::var_os("KEEPPEEK_RUNNER").is_some()) {
            ("ingest_queues", _) | ("live_gops", false) => max * 3 / 4,
            ("live_gops", true) => 0,
            _ => max * 9 / 10,
        };
        assert!(*peak >= least, "the {name} pool reached its ceiling: {peak} of {max}");
        assert!(peak <= max);
    }
    // Histories hold whole frames: each may stop short of its share by less than a frame.
    let short = (CAMERAS as u64 / 4) * (MAIN_FRAME_BYTES + SUB_FRAME_BYTES) as u64;
    assert!(preroll_high + short >= preroll_max, "the pre-roll reached its ceiling: {preroll_high} of {preroll_max}");
    assert_eq!(
        streamed, 64,
        "live sessions that went on getting whole frames (frames before the logins, then (frames, bytes) at the end): {frames_before:?} {got:?}"
    );
    assert!(rss < total_kib, "peak RSS {rss} KiB under the budget's {total_kib} KiB");
    assert!(pss < total_kib, "peak PSS {pss} KiB under the budget's {total_kib} KiB");
}

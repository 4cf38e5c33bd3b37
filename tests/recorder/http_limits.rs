//! Every HTTP ceiling over real sockets: each refusal gets its status while a normal client
//! is served at the same time, and memory stays bounded.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{self, *};

fn rss_kib(d: &Daemon) -> u64 {
    common::rss_kib(d.pid())
}

/// The table holds 256 connections; the 257th client is served at once in the slot of the
/// oldest one waiting for its client (here an idle keep-alive one: none is unanswered), never
/// left in the backlog, and memory stays bounded.
#[test]
fn the_257th_connection_takes_the_oldest_idle_slot_while_the_others_are_served() {
    let (_dir, d, port) = web_daemon();
    let token = make_token(port, &setup_admin(port), "\"metrics\"");
    let rss_before = rss_kib(&d);
    // 255 keep-alive clients, each served once so the server holds its connection.
    let mut held: Vec<TcpStream> = (0..255)
        .map(|_| {
            let mut s = connect(port);
            s.write_all(b"GET /healthz HTTP/1.1\r\nhost: kp\r\n\r\n").unwrap();
            assert_eq!(status(&read_response(&mut s)), 200);
            s
        })
        .collect();
    // The 256th is a normal client, served on its keep-alive connection throughout.
    let mut normal = connect(port);
    normal.write_all(b"GET /healthz HTTP/1.1\r\nhost: kp\r\n\r\n").unwrap();
    assert_eq!(status(&read_response(&mut normal)), 200);
    let start = Instant::now();
    let mut extra = connect(port);
    extra.write_all(b"GET /healthz HTTP/1.1\r\nhost: kp\r\n\r\n").unwrap();
    let served = read_response(&mut extra);
    assert_eq!(status(&served), 200, "{served}");
    assert!(start.elapsed() < Duration::from_secs(2), "served at once, not queued");
    // The oldest held connection gave its slot up: the server closed it.
    held[0].set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    assert!(matches!(std::io::Read::read(&mut held[0], &mut buf), Ok(0)), "the oldest idle connection was closed");
    normal.write_all(b"GET /healthz HTTP/1.1\r\nhost: kp\r\n\r\n").unwrap();
    assert_eq!(status(&read_response(&mut normal)), 200, "the normal client is still served");
    let rss_after = rss_kib(&d);
    assert!(rss_after < rss_before + 64 * 1024, "RSS grew from {rss_before} to {rss_after} KiB");
    held.clear();
    drop(normal);
    let evicted = exchange(
        port,
        format!("GET /metrics HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    );
    let count = evicted
        .lines()
        .find_map(|l| l.strip_prefix("keeppeek_http_connections_evicted_total ")?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{evicted}"));
    assert!(count >= 1, "{evicted}");
    healthy(port);
}

#[test]
fn a_slow_loris_client_gets_408_and_is_dropped() {
    let (_dir, _d, port) = web_daemon();
    let token = make_token(port, &setup_admin(port), "\"metrics\"");
    let mut slow = connect(port);
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: kp\r\n").unwrap();
    let start = Instant::now();
    // One header byte every few seconds, never finishing the head.
    let trickle = std::thread::spawn(move || {
        let mut s = slow.try_clone().unwrap();
        for _ in 0..20 {
            if s.write_all(b"x").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        read_response(&mut slow)
    });
    healthy(port);
    let response = trickle.join().unwrap();
    let waited = start.elapsed();
    assert_eq!(status(&response), 408, "{response}");
    assert!(waited >= Duration::from_secs(29) && waited < Duration::from_secs(40), "dropped after {waited:?}");
    healthy(port);
    assert_eq!(metric(port, &token, "request_timeout"), 1);
}

#[test]
fn oversized_lines_heads_header_counts_and_bodies_get_their_status() {
    let (_dir, d, port) = web_daemon();
    let token = make_token(port, &setup_admin(port), "\"metrics\"");
    let rss_before = rss_kib(&d);
    let get = |extra_headers: &str, target: &str| format!("GET {target} HTTP/1.1\r\nhost: kp\r\n{extra_headers}\r\n");
    // A header line of exactly 8 KiB passes; one byte more is refused.
    let line = |len: usize| format!("x-long: {}\r\n", "a".repeat(len - "x-long: \r\n".len()));
    assert_eq!(status(&exchange(port, get(&line(8192), "/healthz").as_bytes())), 200);
    assert_eq!(status(&exchange(port, get(&line(8193), "/healthz").as_bytes())), 431);
    healthy(port);
    // The request line: 8 KiB + 1 is refused with 414.
    let target = |line_len: usize| format!("/healthz?{}", "q".repeat(line_len - "GET /healthz? HTTP/1.1\r\n".len()));
    assert_eq!(status(&exchange(port, get("", &target(8192)).as_bytes())), 200);
    assert_eq!(status(&exchange(port, get("", &target(8193)).as_bytes())), 414);
    // 100 header fields (with host) pass; 101 do not.
    let fields = |n: usize| (1..n).map(|i| format!("x-f{i}: v\r\n")).collect::<String>();
    assert_eq!(status(&exchange(port, get(&fields(100), "/healthz").as_bytes())), 200);
    assert_eq!(status(&exchange(port, get(&fields(101), "/healthz").as_bytes())), 431);
    healthy(port);
    // All header lines over 64 KiB, each line under 8 KiB and under 100 fields.
    let big = (0..9).map(|i| format!("x-big{i}: {}\r\n", "b".repeat(7600))).collect::<String>();
    assert!(big.len() > 64 << 10);
    assert_eq!(status(&exchange(port, get(&big, "/healthz").as_bytes())), 431);
    // A body over 16 KiB where no route takes more.
    let post =
        |len: usize| format!("POST /healthz HTTP/1.1\r\nhost: kp\r\ncontent-length: {len}\r\n\r\n{}", "z".repeat(len));
    // At the limit the request goes on to routing (and, without credentials, 401).
    assert_eq!(status(&exchange(port, post(16 << 10).as_bytes())), 401);
    assert_eq!(status(&exchange(port, post((16 << 10) + 1).as_bytes())), 413);
    // Garbage is a 400.
    assert_eq!(status(&exchange(port, b"NOT HTTP AT ALL\r\n\r\n")), 400);
    healthy(port);
    for (reason, at_least) in [("headers_too_large", 3), ("uri_too_long", 1), ("body_too_large", 1), ("bad_request", 1)]
    {
        assert!(metric(port, &token, reason) >= at_least, "{reason}");
    }
    assert!(rss_kib(&d) < rss_before + 32 * 1024);
}

//! Live view's ceilings and bad input over real sockets, against the real binary: WHEP
//! offers (a Chromium offer captured once, `chromium-offer.sdp`), sessions per principal,
//! per client address and per box, malformed and oversized offers, garbage datagrams on the
//! media port. Each refusal has its status and counter; the daemon keeps serving.
//! Decoding in a browser is `tests/ui/live.test.mjs`.

use std::net::UdpSocket;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const OFFER: &str = include_str!("chromium-offer.sdp");

/// A daemon recording camera `a` from the fixture clip, live view on a free UDP port.
fn live_daemon(ram_class: &str) -> (tempfile::TempDir, Daemon, u16, u16) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let clip = fixtures().join("h264.mp4");
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\nram_class = \"{ram_class}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\n\
             total_max_bytes = \"1 GiB\"\n[webrtc]\nport = {udp}\nloopback = true\n[[cameras]]\nname = \"a\"\n\
             main = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    );
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    (dir, d, port, udp)
}

fn webrtc_metric(port: u16, token: &str, name: &str) -> u64 {
    let (_, _, text) = request(port, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], "");
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Opens a session with `token`; returns (status, body, Location).
fn whep(port: u16, token: &str, offer: &str) -> (u16, String, String) {
    let bearer = format!("Bearer {token}");
    let (code, head, body) = request(
        port,
        "POST",
        "/api/whep/a/main",
        &[("authorization", &bearer), ("content-type", "application/sdp")],
        offer,
    );
    let location = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("location:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    (code, body, location)
}

fn wait_connected(port: u16, token: &str) {
    let bearer = format!("Bearer {token}");
    let up = wait_until(Duration::from_secs(20), || {
        let (_, _, body) = request(port, "GET", "/api/cameras", &[("authorization", &bearer)], "");
        serde_json::from_str::<Value>(&body).is_ok_and(|v| v[0]["streams"][0]["connected"] == true)
    });
    assert!(up, "the camera connects");
}

#[test]
fn sessions_are_capped_per_principal_and_per_address_and_bad_input_is_refused() {
    let (_dir, _d, port, udp) = live_daemon("4 GiB");
    let admin = setup_admin(port);
    let tokens: Vec<String> = (0..3).map(|_| make_token(port, &admin, "\"view\"")).collect();
    let metrics = make_token(port, &admin, "\"metrics\"");
    wait_connected(port, &tokens[0]);

    // A principal holds 64 sessions; the 65th is refused with a clear error.
    let mut first = String::new();
    for i in 0..64 {
        let (code, body, location) = whep(port, &tokens[0], OFFER);
        assert_eq!(code, 201, "session {i}: {body}");
        assert!(body.starts_with("v=0") && body.contains("a=ice-lite"), "an ICE-lite answer: {body}");
        assert!(location.starts_with("/api/whep/sessions/"), "{location}");
        if i == 0 {
            first = location;
        }
    }
    let (code, body, _) = whep(port, &tokens[0], OFFER);
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("\"code\":\"too_many_sessions\"") && body.contains("64"), "{body}");
    assert_eq!(webrtc_metric(port, &metrics, "keeppeek_webrtc_refused_total{reason=\"principal\"}"), 1);
    // One address holds 128, whoever the principals.
    for i in 0..64 {
        let (code, body, _) = whep(port, &tokens[1], OFFER);
        assert_eq!(code, 201, "second principal, session {i}: {body}");
    }
    let (code, body, _) = whep(port, &tokens[2], OFFER);
    assert_eq!(code, 429, "{body}");
    assert_eq!(webrtc_metric(port, &metrics, "keeppeek_webrtc_refused_total{reason=\"address\"}"), 1);
    assert_eq!(webrtc_metric(port, &metrics, "keeppeek_webrtc_sessions_open"), 128);

    // WHEP DELETE ends a session, once, and only for its owner.
    let bearer = |t: &str| format!("Bearer {t}");
    let other = request(port, "DELETE", &first, &[("authorization", &bearer(&tokens[1]))], "");
    assert_eq!(other.0, 404, "another principal's session");
    assert_eq!(request(port, "DELETE", &first, &[("authorization", &bearer(&tokens[0]))], "").0, 200);
    assert_eq!(request(port, "DELETE", &first, &[("authorization", &bearer(&tokens[0]))], "").0, 404);

    // Malformed and oversized offers.
    let (code, body, _) = whep(port, &tokens[2], "v=0\r\nthis is not SDP\r\n");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("\"code\":\"bad_offer\""), "{body}");
    let no_video = OFFER.split("m=video").next().unwrap().to_string();
    assert_eq!(whep(port, &tokens[2], &no_video).0, 400);
    assert_eq!(whep(port, &tokens[2], &"a".repeat(128 * 1024 + 1)).0, 413);
    assert!(webrtc_metric(port, &metrics, "keeppeek_webrtc_refused_total{reason=\"bad_offer\"}") >= 2);
    let sdp = [("authorization", bearer(&tokens[2])), ("content-type", "application/sdp".into())];
    let sdp: Vec<(&str, &str)> = sdp.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let wrong_stream = request(port, "POST", "/api/whep/a/sub", &sdp, OFFER);
    assert_eq!(wrong_stream.0, 404);

    // Garbage on the media port: counted, nothing else happens.
    let before = webrtc_metric(port, &metrics, "keeppeek_webrtc_datagrams_total");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // One past the read buffer (WEBRTC_DATAGRAM_MAX_BYTES): cut, and counted like the rest.
    s.send_to(&[0x17; 4000], ("127.0.0.1", udp)).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..500usize {
        let len = 1 + i % 1400;
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        s.send_to(&junk, ("127.0.0.1", udp)).unwrap();
        // In batches, so the kernel's receive buffer never overflows (that loss is not ours).
        if i % 50 == 49 {
            let want = before + i as u64 + 1;
            let counted = wait_until(Duration::from_secs(10), || {
                webrtc_metric(port, &metrics, "keeppeek_webrtc_datagrams_total") >= want
            });
            assert!(counted, "datagrams up to {i} read");
        }
    }
    let bad = webrtc_metric(port, &metrics, "keeppeek_webrtc_datagrams_bad_total");
    let unmatched = webrtc_metric(port, &metrics, "keeppeek_webrtc_datagrams_unmatched_total");
    assert!(bad + unmatched >= 500, "bad {bad}, unmatched {unmatched}");
    healthy(port);
    assert_eq!(webrtc_metric(port, &metrics, "keeppeek_webrtc_sessions_open"), 127, "the others live on");
}

/// A 1 GiB box holds 64 sessions: one principal takes at most half (one view token once held
/// all 64 and everyone else got 503), the last two are an admin's, and sessions whose browser
/// never connects go after the connect timeout.
#[test]
fn the_box_holds_the_sessions_its_ram_class_allows_and_shares_them() {
    let (_dir, _d, port, _) = live_daemon("1 GiB");
    let admin = setup_admin(port);
    let tokens: Vec<String> = (0..2).map(|_| make_token(port, &admin, "\"view\"")).collect();
    let admin_token = make_token(port, &admin, "\"admin\"");
    wait_connected(port, &tokens[0]);
    for i in 0..32 {
        let (code, body, _) = whep(port, &tokens[0], OFFER);
        assert_eq!(code, 201, "session {i}: {body}");
    }
    let (code, body, _) = whep(port, &tokens[0], OFFER);
    assert_eq!(code, 429, "one principal holds half the box: {body}");
    assert!(body.contains("\"code\":\"too_many_sessions\"") && body.contains("32"), "{body}");
    for i in 0..30 {
        let (code, body, _) = whep(port, &tokens[1], OFFER);
        assert_eq!(code, 201, "session {i} of the second: {body}");
    }
    let (code, body, _) = whep(port, &tokens[1], OFFER);
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"code\":\"server_full\""), "{body}");
    // The last two are kept for admins.
    assert_eq!(whep(port, &admin_token, OFFER).0, 201);
    assert_eq!(whep(port, &admin_token, OFFER).0, 201);
    assert_eq!(whep(port, &admin_token, OFFER).0, 503, "the box is full");
    // A session whose browser never connects is dropped after the connect timeout.
    let metrics = make_token(port, &admin, "\"metrics\"");
    let swept =
        wait_until(Duration::from_secs(30), || webrtc_metric(port, &metrics, "keeppeek_webrtc_sessions_open") == 0);
    assert!(swept, "unconnected sessions time out");
    assert_eq!(webrtc_metric(port, &metrics, "keeppeek_webrtc_connect_timeouts_total"), 64);
    assert_eq!(whep(port, &tokens[1], OFFER).0, 201, "room again");
}

/// Deleting a token left its sessions streaming, and so did changing a user's password:
/// every revocation closes what it authorized, at once.
#[test]
fn revoking_a_token_or_a_password_closes_its_live_sessions_at_once() {
    let (_dir, _d, port, _) = live_daemon("4 GiB");
    let admin = setup_admin(port);
    let metrics = make_token(port, &admin, "\"metrics\"");
    let view = make_token(port, &admin, "\"view\"");
    let keep = make_token(port, &admin, "\"view\"");
    wait_connected(port, &view);
    let open = || webrtc_metric(port, &metrics, "keeppeek_webrtc_sessions_open");
    for _ in 0..3 {
        assert_eq!(whep(port, &view, OFFER).0, 201);
    }
    assert_eq!(whep(port, &keep, OFFER).0, 201);
    let id = view.split('_').nth(1).unwrap();
    let h = [("cookie", admin.0.as_str()), ("x-csrf-token", admin.1.as_str())];
    assert_eq!(request(port, "DELETE", &format!("/api/tokens/{id}"), &h, "").0, 200);
    assert!(wait_until(Duration::from_secs(1), || open() == 1), "the token's 3 sessions closed within 1 s");
    // A viewer's sessions close when an admin sets a new password.
    let made =
        request(port, "POST", "/api/users", &h, r#"{"username":"guest","password":"viewer password","role":"viewer"}"#);
    assert_eq!(made.0, 201);
    let (_, head, body) =
        request(port, "POST", "/api/login", &[], r#"{"username":"guest","password":"viewer password"}"#);
    let guest = session_of(&head, &body);
    let with_cookie =
        [("cookie", guest.0.as_str()), ("x-csrf-token", guest.1.as_str()), ("content-type", "application/sdp")];
    for _ in 0..2 {
        assert_eq!(request(port, "POST", "/api/whep/a/main", &with_cookie, OFFER).0, 201);
    }
    assert_eq!(open(), 3);
    let changed =
        request(port, "POST", "/api/users", &h, r#"{"username":"guest","password":"a new password","role":"viewer"}"#);
    assert_eq!(changed.0, 201);
    assert!(wait_until(Duration::from_secs(1), || open() == 1), "the viewer's 2 sessions closed within 1 s");
    assert_eq!(request(port, "GET", "/api/me", &[("cookie", &guest.0)], "").0, 401, "and its login");
}

#[test]
fn logout_closes_the_logins_sessions_within_a_second() {
    let (_dir, _d, port, _) = live_daemon("1 GiB");
    let admin = setup_admin(port);
    let metrics = make_token(port, &admin, "\"metrics\"");
    let view = make_token(port, &admin, "\"view\"");
    wait_connected(port, &view);
    let with_cookie =
        [("cookie", admin.0.as_str()), ("x-csrf-token", admin.1.as_str()), ("content-type", "application/sdp")];
    for _ in 0..3 {
        assert_eq!(request(port, "POST", "/api/whep/a/main", &with_cookie, OFFER).0, 201);
    }
    // Without the CSRF token a session cookie opens nothing.
    let no_csrf = request(port, "POST", "/api/whep/a/main", &[("cookie", admin.0.as_str())], OFFER);
    assert_eq!(no_csrf.0, 403);
    assert_eq!(whep(port, &view, OFFER).0, 201, "a token's session, which logout leaves alone");
    assert_eq!(webrtc_metric(port, &metrics, "keeppeek_webrtc_sessions_open"), 4);
    let out = request(port, "POST", "/api/logout", &[("cookie", &admin.0), ("x-csrf-token", &admin.1)], "");
    assert_eq!(out.0, 200);
    let t = std::time::Instant::now();
    let closed =
        wait_until(Duration::from_secs(1), || webrtc_metric(port, &metrics, "keeppeek_webrtc_sessions_open") == 1);
    assert!(closed, "the login's 3 sessions closed within 1 s");
    eprintln!("logout closed 3 live sessions in {} ms", t.elapsed().as_millis());
}

/// The canned offer with H.265 added (payload type 50), as a browser that decodes it offers.
fn offer_with_h265() -> String {
    OFFER.replace("m=video 9 UDP/TLS/RTP/SAVPF 96 ", "m=video 9 UDP/TLS/RTP/SAVPF 50 96 ").replace(
        "a=rtpmap:96 VP8/90000\r\n",
        "a=rtpmap:50 H265/90000\r\na=rtcp-fb:50 nack pli\r\na=rtpmap:96 VP8/90000\r\n",
    )
}

/// A daemon recording camera `a` from the RTSP test camera's `path`, live view on; returns
/// it with its port, an admin's login and a viewer's token, the camera connected.
fn camera_daemon(cam: &Camera, path: &str) -> (tempfile::TempDir, Daemon, u16, (String, String), String) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [webrtc]\nport = {udp}\nloopback = true\n[[cameras]]\nname = \"a\"\nmain = {{ url = \"{}\" }}\n",
            cam.url(path)
        ),
    );
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let view = make_token(port, &admin, "\"view\"");
    wait_connected(port, &view);
    (dir, d, port, admin, view)
}

#[test]
fn h265_is_sent_only_to_a_browser_that_offers_it() {
    let cam = Camera::start();
    let (_dir, _d, port, _, view) = camera_daemon(&cam, "/h265");
    let (code, body, _) = whep(port, &view, OFFER);
    assert_eq!(code, 406, "{body}");
    assert!(body.contains("\"code\":\"no_codec\"") && body.contains("H.265"), "{body}");
    let (code, body, _) = whep(port, &view, &offer_with_h265());
    assert_eq!(code, 201, "{body}");
    assert!(body.contains("H265/90000"), "the answer carries H.265: {body}");
}

#[test]
fn a_recorded_streams_gop_waits_on_disk_and_a_new_viewer_still_starts_from_it() {
    // GOPs of 10 s: a viewer that had to wait for a keyframe would wait seconds.
    let cam = Camera::start();
    let (_dir, _d, port, admin, view) = camera_daemon(&cam, "/h264-long-gop");
    let metrics = make_token(port, &admin, "\"metrics\"");
    // The GOP grows past 100 KB while the recorder writes it: what it holds in RAM is what
    // the recorder has not written yet (a writer's turn, 250 ms), not the GOP.
    let gop = |name: &str| sample(port, &metrics, &format!("{name}{{stream=\"a/main\"}}")).unwrap_or(0);
    let mut on_disk = false;
    let grown = wait_until(Duration::from_secs(30), || {
        let (all, ram) = (gop("keeppeek_live_gop_bytes"), gop("keeppeek_live_gop_ram_bytes"));
        on_disk |= all > 0 && ram * 4 < all;
        all > 100_000 && on_disk
    });
    assert!(
        grown,
        "the held GOP is on disk: {} bytes, {} in RAM",
        gop("keeppeek_live_gop_bytes"),
        gop("keeppeek_live_gop_ram_bytes")
    );
    // A new viewer gets it at once, read back whole: dozens of frames within two seconds.
    let (mut v, pending, offer) = crate::viewer::Viewer::offer();
    let (code, answer, _) = whep(port, &view, &offer);
    assert_eq!(code, 201, "{answer}");
    v.answer(pending, &answer);
    let farm = crate::viewer::Farm::start(vec![v]);
    assert!(wait_until(Duration::from_secs(10), || farm.connected() == 1), "the viewer connects");
    std::thread::sleep(Duration::from_secs(2));
    let frames = farm.frames()[0];
    assert!(frames >= 30, "the GOP's frames at once, not the next keyframe's: {frames}");
    drop(farm.stop());
}

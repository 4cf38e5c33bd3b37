//! Accounts over real HTTP: first-time setup, login limits, logout, and the auth matrix —
//! every protected route refuses no credentials, a viewer, a missing or wrong CSRF token and
//! a token of the wrong scope, and serves only the right credential.

use crate::common::*;

#[test]
fn setup_happens_once_and_login_logout_and_limits_work() {
    let (_dir, _d, port) = web_daemon();
    let (code, _, body) = request(port, "GET", "/api/setup", &[], "");
    assert_eq!((code, body.as_str()), (200, r#"{"needed":true}"#));
    let weak = request(port, "POST", "/api/setup", &[], r#"{"username":"root","password":"short"}"#);
    assert_eq!(weak.0, 400, "{}", weak.2);
    let admin = setup_admin(port);
    assert!(admin.0.starts_with("kp_session="));
    let (_, head, _) =
        request(port, "POST", "/api/login", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    let cookie_line = head.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie")).unwrap();
    assert!(cookie_line.contains("HttpOnly") && cookie_line.contains("SameSite=Strict"), "{cookie_line}");
    // Setup is over once an admin exists.
    let again = request(port, "POST", "/api/setup", &[], r#"{"username":"evil","password":"correct horse battery"}"#);
    assert_eq!(again.0, 403);
    // Logout revokes the session at once.
    let me = |s: &(String, String)| request(port, "GET", "/api/me", &[("cookie", &s.0)], "").0;
    assert_eq!(me(&admin), 200);
    let out = request(port, "POST", "/api/logout", &[("cookie", &admin.0), ("x-csrf-token", &admin.1)], "");
    assert_eq!(out.0, 200);
    assert_eq!(me(&admin), 401);
    // Failed logins are limited per user (and per address): the right password then waits.
    // After each wrong password the address pauses a second (its next try refused at once).
    for _ in 0..5 {
        let r = request(port, "POST", "/api/login", &[], r#"{"username":"root","password":"wrong password"}"#);
        assert_eq!(r.0, 401);
        let paused = request(port, "POST", "/api/login", &[], r#"{"username":"root","password":"wrong password"}"#);
        assert_eq!(paused.0, 429, "{}", paused.2);
        std::thread::sleep(PAUSE);
    }
    let limited = request(port, "POST", "/api/login", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    assert_eq!(limited.0, 429, "{}", limited.2);
    assert!(limited.1.to_ascii_lowercase().contains("retry-after"));
    // Bodies are bounded and must be the expected JSON.
    let junk = request(port, "POST", "/api/login", &[], r#"{"user":"root"}"#);
    assert_eq!(junk.0, 400);
    assert!(junk.2.contains("\"code\":\"bad_json\""), "{}", junk.2);
}

#[test]
fn the_auth_matrix_over_every_route() {
    let (_dir, _d, port) = web_daemon();
    let admin = setup_admin(port);
    let viewer_made = request(
        port,
        "POST",
        "/api/users",
        &[("cookie", &admin.0), ("x-csrf-token", &admin.1)],
        r#"{"username":"guest","password":"viewer password","role":"viewer"}"#,
    );
    assert_eq!(viewer_made.0, 201, "{}", viewer_made.2);
    let (_, head, body) =
        request(port, "POST", "/api/login", &[], r#"{"username":"guest","password":"viewer password"}"#);
    let viewer = session_of(&head, &body);
    auth_matrix(port, &admin, &viewer);
}

/// Every protected route against no credentials, the `viewer` session, a missing or wrong
/// CSRF token, a foreign Origin and tokens of each scope (made by the `admin` session), and
/// served with the right credential. Local accounts and single sign-on's sessions alike.
pub fn auth_matrix(port: u16, admin: &(String, String), viewer: &(String, String)) {
    let view_token = make_token(port, admin, "\"view\"");
    let metrics_token = make_token(port, admin, "\"metrics\"");
    let admin_token = make_token(port, admin, "\"admin\"");

    // (method, path, body, scope the route needs: "metrics", "admin" or "any")
    let routes: &[(&str, &str, &str, &str)] = &[
        ("GET", "/metrics", "", "metrics"),
        ("GET", "/api/me", "", "any"),
        ("GET", "/api/cameras", "", "view"),
        ("GET", "/api/streams/a/main/coverage?from_us=0&to_us=1", "", "view"),
        ("GET", "/api/streams/a/main/poster.mp4", "", "view"),
        ("GET", "/api/health?offset=0&limit=25", "", "view"),
        ("DELETE", "/api/streams/a/main/recordings?from_us=0&to_us=1", "", "admin"),
        ("DELETE", "/api/events/999", "", "admin"),
        ("GET", "/api/users", "", "admin"),
        ("POST", "/api/users", r#"{"username":"x1","password":"some password","role":"viewer"}"#, "admin"),
        ("DELETE", "/api/users/x1", "", "admin"),
        ("GET", "/api/tokens", "", "admin"),
        ("POST", "/api/tokens", r#"{"name":"n","scopes":["view"]}"#, "admin"),
        ("DELETE", "/api/tokens/999", "", "admin"),
        ("GET", "/api/config", "", "admin"),
        ("GET", "/api/config/revisions", "", "admin"),
        ("POST", "/api/config/plan", r#"{"base":1,"changes":[]}"#, "admin"),
        ("POST", "/api/config/apply", r#"{"base":1,"changes":[]}"#, "admin"),
        ("POST", "/api/cameras/probe", r#"{"url":"rtsp://127.0.0.1:1/x"}"#, "admin"),
        ("POST", "/api/cameras/onvif", r#"{"address":"127.0.0.1:1","username":"u","password":"p"}"#, "admin"),
        ("POST", "/api/cameras/discover", "", "admin"),
    ];
    for &(method, path, body, needs) in routes {
        let call = |headers: &[(&str, &str)]| request(port, method, path, headers, body).0;
        let changes = method != "GET";
        assert_eq!(call(&[]), 401, "{method} {path} without credentials");
        let viewer_h = [("cookie", viewer.0.as_str()), ("x-csrf-token", viewer.1.as_str())];
        let view_bearer = format!("Bearer {view_token}");
        let wrong_scope = [("authorization", view_bearer.as_str())];
        if needs == "view" {
            // Viewers may view; a token without the view scope may not.
            let metrics_bearer = format!("Bearer {metrics_token}");
            assert_eq!(call(&[("authorization", &metrics_bearer)]), 403, "{method} {path} with a metrics token");
        } else if needs != "any" {
            assert_eq!(call(&viewer_h), 403, "{method} {path} as a viewer");
            assert_eq!(call(&wrong_scope), 403, "{method} {path} with a token of the wrong scope");
        }
        if changes {
            assert_eq!(call(&[("cookie", &admin.0)]), 403, "{method} {path} without CSRF");
            assert_eq!(call(&[("cookie", &admin.0), ("x-csrf-token", "nope")]), 403, "{method} {path} wrong CSRF");
            let foreign =
                [("cookie", admin.0.as_str()), ("x-csrf-token", admin.1.as_str()), ("origin", "http://evil.example")];
            assert_eq!(call(&foreign), 403, "{method} {path} from a foreign Origin");
        }
        let right_token = match needs {
            "metrics" => &metrics_token,
            "view" => &view_token,
            _ => &admin_token,
        };
        let right = call(&[("authorization", &format!("Bearer {right_token}"))]);
        // A stream never recorded is a 404, past the auth check.
        let ok = if path.ends_with("/999") || path.contains("/streams/") {
            404
        } else if method == "POST" && !path.starts_with("/api/config/") && !path.starts_with("/api/cameras/") {
            201
        } else {
            200
        };
        assert_eq!(right, ok, "{method} {path} with the right credential");
    }
    // No route but health, the UI (the login page), setup and login answers without credentials.
    for (method, path) in
        [("GET", "/api/recordings"), ("GET", "/api/cameras"), ("GET", "/metrics"), ("POST", "/api/logout")]
    {
        let code = request(port, method, path, &[], "").0;
        assert_eq!(code, 401, "{method} {path}");
    }
    assert_eq!(request(port, "GET", "/healthz", &[], "").0, 200);
}

/// The UI's files answer without credentials, precompressed for browsers that take gzip,
/// with an ETag per variant that turns a reload into a `304`.
#[test]
fn the_ui_is_served_gzipped_with_etags() {
    use std::io::{Read as _, Write as _};
    let (_dir, _d, port) = web_daemon();
    let get = |extra: &str| -> (String, Vec<u8>) {
        let mut s = connect(port);
        s.write_all(format!("GET /app.js HTTP/1.1\r\nhost: kp\r\nconnection: close\r\n{extra}\r\n").as_bytes())
            .unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
        (String::from_utf8_lossy(&all[..end]).to_ascii_lowercase(), all[end..].to_vec())
    };
    let header = |head: &str, name: &str| -> String {
        head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string)).unwrap_or_default()
    };
    let source = std::fs::read(repo().join("ui-static/app.js")).unwrap();
    let (plain_head, plain) = get("");
    assert!(plain_head.starts_with("http/1.1 200"), "{plain_head}");
    assert_eq!(plain, source);
    assert_eq!(header(&plain_head, "content-encoding"), "");
    let (gz_head, gz) = get("accept-encoding: gzip, deflate, br\r\n");
    assert_eq!(header(&gz_head, "content-encoding"), "gzip");
    assert_eq!(header(&gz_head, "vary"), "accept-encoding");
    assert_eq!(header(&gz_head, "cache-control"), "no-cache");
    assert!(gz.len() * 2 < source.len(), "gzip shrinks app.js: {} of {}", gz.len(), source.len());
    let mut inflated = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut inflated).unwrap();
    assert_eq!(inflated, source);
    let (plain_tag, gz_tag) = (header(&plain_head, "etag"), header(&gz_head, "etag"));
    assert!(!plain_tag.is_empty() && plain_tag != gz_tag, "{plain_tag} {gz_tag}");
    let (fresh, body) = get(&format!("accept-encoding: gzip\r\nif-none-match: {gz_tag}\r\n"));
    assert!(fresh.starts_with("http/1.1 304"), "{fresh}");
    assert!(body.is_empty());
    // A tag of the other variant is not a match: the browser gets the bytes it can read.
    let (stale, _) = get(&format!("if-none-match: {gz_tag}\r\n"));
    assert!(stale.starts_with("http/1.1 200"), "{stale}");
}

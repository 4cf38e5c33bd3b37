//! HTTPS against independent clients: OpenSSL's `s_client` and `x509`, GnuTLS's
//! `gnutls-cli` and curl (pinning the key the API shows). The box makes its own certificate,
//! logs its fingerprint, serves it, sends plain HTTP on to HTTPS, marks its cookie `Secure`,
//! takes an admin's certificate and key (refusing a wrong pair or names that do not fit),
//! makes its certificate again for a new address, and a flood of clients that open TLS and
//! stop keeps no one else out.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// KeepPeek with its web face on a plain port and an HTTPS port.
fn https_daemon() -> (tempfile::TempDir, Daemon, u16, u16) {
    let dir = tempfile::tempdir().unwrap();
    let (plain, https) = (free_port(), free_port());
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{plain}\"\n[https]\nlisten = \"127.0.0.1:{https}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n"
        ),
    );
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 2, Duration::from_secs(20));
    (dir, d, plain, https)
}

/// A field of the last log line that announced a certificate (`fingerprint`, `pin`, …).
fn announced(d: &Daemon, field: &str) -> String {
    let log = d.log_text();
    let line = log.lines().rev().find(|l| l.contains("HTTPS certificate")).unwrap_or_else(|| panic!("{log}"));
    let at = line.find(&format!(" {field}=")).unwrap_or_else(|| panic!("{field} in {line}")) + field.len() + 2;
    match line[at..].strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap().to_string(),
        None => line[at..].split_whitespace().next().unwrap().to_string(),
    }
}

/// One request with curl over HTTPS: (status, head, body). `tls` are curl's options for
/// trusting the box (a pin, a CA file).
fn curl(
    https: u16,
    tls: &[&str],
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String, String) {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", "-D", "-", "-X", method]).args(tls);
    for (k, v) in headers {
        c.arg("-H").arg(format!("{k}: {v}"));
    }
    if let Some(b) = body {
        c.args(["-H", "content-type: application/json", "--data-binary"]).arg(b);
    }
    let out = c.arg(format!("https://127.0.0.1:{https}{path}")).output().unwrap();
    assert!(out.status.success(), "curl {path}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status(head), head.to_string(), body.to_string())
}

/// The SHA-256 fingerprint OpenSSL reads off the certificate the port serves.
fn served_fingerprint(https: u16, servername: &str) -> String {
    let mut s_client = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{https}"), "-servername", servername])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256"])
        .stdin(s_client.stdout.take().unwrap())
        .output()
        .unwrap();
    s_client.wait().unwrap();
    assert!(x509.status.success(), "openssl x509: {}", String::from_utf8_lossy(&x509.stderr));
    let text = String::from_utf8(std::mem::take(&mut x509.stdout)).unwrap();
    text.trim().rsplit('=').next().unwrap().to_string()
}

fn setup_over_https(https: u16, tls: &[&str]) -> (String, String) {
    let (code, head, body) =
        curl(https, tls, "POST", "/api/setup", &[], Some(r#"{"username":"root","password":"correct horse battery"}"#));
    assert_eq!(code, 201, "{head}\n{body}");
    session_of(&head, &body)
}

#[test]
fn the_box_serves_its_own_certificate_to_independent_clients_and_sends_http_on() {
    let (dir, d, plain, https) = https_daemon();
    let data = dir.path().join("data");
    let own = data.join("tls/own.crt");
    // The key is the box's alone.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("tls/own.key")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // The console (the log) names the certificate: OpenSSL sees the very one.
    let fingerprint = announced(&d, "fingerprint");
    assert_eq!(announced(&d, "made_because"), "the box had none");
    assert_eq!(served_fingerprint(https, "localhost"), fingerprint);

    // OpenSSL verifies it for each of its names, with the certificate as the trust anchor.
    for (flag, name) in [("-verify_hostname", "localhost"), ("-verify_ip", "127.0.0.1")] {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{https}"), "-verify_return_error", "-CAfile"])
            .arg(&own)
            .args([flag, name])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Verify return code: 0 (ok)"), "{name}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("TLSv1.3"), "{text}");
    }
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{https}"), "-verify_return_error", "-CAfile"])
        .arg(&own)
        .args(["-verify_hostname", "elsewhere.example"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "a name the certificate lacks must fail verification");

    // GnuTLS, verifying against the certificate, gets an answer.
    let mut gnutls = Command::new("gnutls-cli")
        .arg("--x509cafile")
        .arg(&own)
        .args(["-p", &https.to_string(), "--verify-hostname=localhost", "127.0.0.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    gnutls
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .unwrap();
    let out = wait_output(gnutls, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("HTTP/1.1 200 OK") && text.contains("ok"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // curl with only the pin the log printed (no CA at all): setup, then the API's view of
    // the certificate, whose pin and fingerprint are the same.
    let pin = announced(&d, "pin");
    let pinned = ["-k", "--pinnedpubkey", pin.as_str()];
    let admin = setup_over_https(https, &pinned);
    let (code, _, body) = curl(https, &pinned, "GET", "/api/system/https", &[("cookie", &admin.0)], None);
    assert_eq!(code, 200, "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["fingerprint"], fingerprint.as_str());
    assert_eq!(shown["pin"], pin.as_str());
    assert_eq!(shown["source"], "own");
    let names: Vec<&str> = shown["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(names.contains(&"127.0.0.1") && names.contains(&"localhost"), "{names:?}");
    // A wrong pin is refused by curl (exit 90): the pin is what protects.
    let wrong = Command::new("curl")
        .args(["-sk", "--pinnedpubkey", "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="])
        .arg(format!("https://127.0.0.1:{https}/healthz"))
        .status()
        .unwrap();
    assert_eq!(wrong.code(), Some(90));

    // The session cookie is Secure over HTTPS, and the Origin must be the HTTPS one.
    let login_from = |origin: String| {
        let password = r#"{"username":"root","password":"correct horse battery"}"#;
        curl(https, &pinned, "POST", "/api/login", &[("origin", &origin)], Some(password))
    };
    let (code, head, _) = login_from(format!("https://127.0.0.1:{https}"));
    assert_eq!(code, 200, "{head}");
    let cookie = head.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie")).unwrap();
    assert!(cookie.contains("; Secure") && cookie.contains("HttpOnly"), "{cookie}");
    let (code, _, body) = login_from(format!("http://127.0.0.1:{https}"));
    assert_eq!(code, 403, "{body}");

    // Plain HTTP: /healthz answers, everything else goes on to HTTPS, method and path kept.
    healthy(plain);
    let (code, head, _) = request(plain, "GET", "/events?camera=door", &[], "");
    assert_eq!(code, 307, "{head}");
    let location = head.lines().find(|l| l.to_ascii_lowercase().starts_with("location:")).unwrap();
    assert_eq!(location[9..].trim(), format!("https://127.0.0.1:{https}/events?camera=door"));
    assert!(head.to_ascii_lowercase().contains("cache-control: no-store"), "{head}");
    let (code, head, _) =
        request(plain, "POST", "/api/login", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    assert_eq!(code, 307, "{head}");
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "no session over plain HTTP: {head}");
    // An IPv6 literal host keeps its brackets; a host that is no host is refused.
    let r = exchange(plain, b"GET / HTTP/1.1\r\nhost: [::1]:80\r\n\r\n");
    assert!(r.contains(&format!("https://[::1]:{https}/")), "{r}");
    let r = exchange(plain, b"GET / HTTP/1.1\r\nhost: a b\r\n\r\n");
    assert_eq!(status(&r), 400, "{r}");
    // Followed by curl, the redirect lands on the UI over HTTPS.
    let out = Command::new("curl")
        .args(["-sSL", "-o", "/dev/null", "-w", "%{url_effective} %{http_code}", "-k", "--pinnedpubkey", &pin])
        .arg(format!("http://127.0.0.1:{plain}/"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("https://127.0.0.1:{https}/ 200"));

    let token = make_token_with(https, &pinned, &admin, "\"metrics\"");
    let (_, _, metrics) =
        curl(https, &pinned, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], None);
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    assert!(value("keeppeek_http_redirects_total") >= 4);
    assert!(value("keeppeek_tls_handshakes_total{outcome=\"done\"}") >= 8);
    assert!(value("keeppeek_tls_handshakes_total{outcome=\"failed\"}") >= 1, "OpenSSL's refusal of a wrong name");
}

fn make_token_with(https: u16, tls: &[&str], admin: &(String, String), scopes: &str) -> String {
    let (code, _, body) = curl(
        https,
        tls,
        "POST",
        "/api/tokens",
        &[("cookie", &admin.0), ("x-csrf-token", &admin.1)],
        Some(&format!(r#"{{"name":"t","scopes":[{scopes}]}}"#)),
    );
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["token"].as_str().unwrap().to_string()
}

/// Waits for a child's output, killing it past `timeout`.
fn wait_output(mut child: std::process::Child, timeout: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > timeout {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Makes a certificate authority and a server certificate it signs with OpenSSL (as an
/// admin would), in `dir`: `ca.crt`, and for each `(name, sans)` `name.crt` and `name.key`.
fn openssl_certificates(dir: &Path, servers: &[(&str, &str)]) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "30",
        "-subj",
        "/CN=Home CA",
    ]);
    for (name, sans) in servers {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ]);
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!("subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"),
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "20",
            "-out",
            &format!("{name}.crt"),
            "-extfile",
            &format!("{name}.ext"),
        ]);
    }
}

#[test]
fn an_admin_serves_a_certificate_of_their_own_and_can_go_back() {
    let (dir, mut d, _plain, https) = https_daemon();
    let pin = announced(&d, "pin");
    let own_fingerprint = announced(&d, "fingerprint");
    let pinned = ["-k", "--pinnedpubkey", pin.as_str()];
    let admin = setup_over_https(https, &pinned);
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    openssl_certificates(&certs, &[("nvr", "IP:127.0.0.1,DNS:nvr.home.test"), ("other", "DNS:other.home.test")]);
    let read = |f: &str| std::fs::read_to_string(certs.join(f)).unwrap();
    let chain = read("nvr.crt") + &read("ca.crt");
    let upload = |tls: &[&str], cert: &str, key: &str| {
        let body = serde_json::json!({ "certificate": cert, "key": key }).to_string();
        curl(https, tls, "POST", "/api/system/https", &[("cookie", &admin.0), ("x-csrf-token", &admin.1)], Some(&body))
    };
    // A key that is not the certificate's, and a certificate for another name, are refused
    // with what is wrong; the box's own certificate stays.
    let (code, _, body) = upload(&pinned, &chain, &read("other.key"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("the key does not belong to the certificate"), "{body}");
    let (code, _, body) = upload(&pinned, &read("other.crt"), &read("other.key"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("the certificate names other.home.test, but this page was reached as 127.0.0.1"), "{body}");
    let (code, _, body) = upload(&pinned, "not a certificate", &read("nvr.key"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("no PEM certificate"), "{body}");
    // Each file is bounded (TLS_UPLOAD_MAX_BYTES, 64 KiB).
    let (code, _, body) = upload(&pinned, &"x".repeat((64 << 10) + 1), &read("nvr.key"));
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("\"field\":\"certificate\""), "{body}");
    assert_eq!(served_fingerprint(https, "localhost"), own_fingerprint);
    // A viewer may look but not change it.
    let (code, _, _) = curl(
        https,
        &pinned,
        "POST",
        "/api/users",
        &[("cookie", &admin.0), ("x-csrf-token", &admin.1)],
        Some(r#"{"username":"guest","password":"viewer password","role":"viewer"}"#),
    );
    assert_eq!(code, 201);
    let (_, head, body) =
        curl(https, &pinned, "POST", "/api/login", &[], Some(r#"{"username":"guest","password":"viewer password"}"#));
    let viewer = session_of(&head, &body);
    let (code, _, _) = curl(https, &pinned, "GET", "/api/system/https", &[("cookie", &viewer.0)], None);
    assert_eq!(code, 200);
    let body = serde_json::json!({ "certificate": chain, "key": read("nvr.key") }).to_string();
    let (code, _, _) = curl(
        https,
        &pinned,
        "POST",
        "/api/system/https",
        &[("cookie", &viewer.0), ("x-csrf-token", &viewer.1)],
        Some(&body),
    );
    assert_eq!(code, 403);

    // The right pair: served from the next handshake on, verified by OpenSSL and curl with
    // the admin's CA, and kept across a restart.
    let (code, _, body) = upload(&pinned, &chain, &read("nvr.key"));
    assert_eq!(code, 200, "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["source"], "uploaded");
    let ca = certs.join("ca.crt");
    let ca = ca.to_str().unwrap();
    let trusted = ["--cacert", ca];
    assert_eq!(curl(https, &trusted, "GET", "/healthz", &[], None).0, 200);
    assert_eq!(served_fingerprint(https, "nvr.home.test"), shown["fingerprint"].as_str().unwrap());
    d.stop();
    let mut d = Daemon::start(dir.path());
    d.wait_log("web face listening", 2, Duration::from_secs(20));
    assert_eq!(announced(&d, "source"), "uploaded");
    assert_eq!(curl(https, &trusted, "GET", "/healthz", &[], None).0, 200);

    // Back to the box's own: the same key as before, so the old pin works again.
    let (code, head, body) = curl(
        https,
        &trusted,
        "POST",
        "/api/login",
        &[],
        Some(r#"{"username":"root","password":"correct horse battery"}"#),
    );
    assert_eq!(code, 200, "{body}");
    let admin = session_of(&head, &body);
    let (code, _, body) =
        curl(https, &trusted, "DELETE", "/api/system/https", &[("cookie", &admin.0), ("x-csrf-token", &admin.1)], None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["source"], "own");
    assert_eq!(curl(https, &pinned, "GET", "/healthz", &[], None).0, 200);
    d.stop();
}

#[test]
fn a_handshake_flood_holds_no_slot_and_normal_clients_are_served() {
    let (_dir, d, plain, https) = https_daemon();
    let pin = announced(&d, "pin");
    let pinned = ["-k", "--pinnedpubkey", pin.as_str()];
    let admin = setup_over_https(https, &pinned);
    let token = make_token_with(https, &pinned, &admin, "\"metrics\"");
    let before_kib = rss_kib(d.pid());
    // 256 clients open TLS and stop: half send nothing, half the start of a ClientHello.
    let mut stalled: Vec<TcpStream> = (0..256)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", https)).unwrap();
            if i % 2 == 1 {
                s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]).unwrap();
            }
            s
        })
        .collect();
    // Normal clients are served at once all the while, over HTTPS and plain HTTP.
    for _ in 0..10 {
        let start = Instant::now();
        assert_eq!(curl(https, &pinned, "GET", "/healthz", &[], None).0, 200);
        assert!(start.elapsed() < Duration::from_secs(3), "a normal client waited {:?}", start.elapsed());
        healthy(plain);
    }
    // The newest stallers hold at most the handshake places; the oldest were dropped.
    let metrics = || curl(https, &pinned, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], None).2;
    let value = |text: &str, name: &str| -> u64 {
        text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0)
    };
    let m = metrics();
    let dropped = value(&m, "keeppeek_tls_handshakes_total{outcome=\"dropped_for_newcomer\"}");
    assert!(dropped >= 256 - 64, "dropped {dropped}\n{m}");
    let grew_kib = rss_kib(d.pid()).saturating_sub(before_kib);
    eprintln!("RSS grew {grew_kib} KiB with 256 stalled handshakes");
    // The handshakes' memory is bounded by the budget's line for them.
    assert!(grew_kib < 64 * 48 + 4096, "RSS grew {grew_kib} KiB");
    // A staller that is never dropped is cut at the handshake timeout (10 s).
    stalled.truncate(0);
    let mut last = TcpStream::connect(("127.0.0.1", https)).unwrap();
    last.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut last, &mut buf).unwrap_or(0);
    let waited = start.elapsed();
    assert_eq!(n, 0, "the server closes a handshake that never comes");
    assert!(waited >= Duration::from_secs(9) && waited < Duration::from_secs(15), "closed after {waited:?}");
    let m = metrics();
    assert!(value(&m, "keeppeek_tls_handshakes_total{outcome=\"timed_out\"}") >= 1, "{m}");
}

/// The box gains an address: within the poll it makes its certificate again, for that
/// address too, with the same key. Runs KeepPeek in a network namespace of its own (root).
#[test]
fn a_new_address_gets_a_new_certificate() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "[https]\nlisten = \"0.0.0.0:8443\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n",
    );
    let config = dir.path().join("keeppeek.toml");
    let log = dir.path().join("keeppeek.log");
    let bin = env!("CARGO_BIN_EXE_keeppeek");
    let mut child = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", "ip link set lo up && exec \"$0\" run --config \"$1\""])
        .arg(bin)
        .arg(&config)
        .env("KEEPPEEK_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("unshare (util-linux), as root");
    let d = Daemon::start_stopped(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let pin = announced(&d, "pin");
    let netns = format!("/proc/{}/ns/net", child.id());
    let added = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args(["ip", "addr", "add", "10.9.8.7/32", "dev", "lo"])
        .status()
        .unwrap();
    assert!(added.success());
    d.wait_log("the box is now also 10.9.8.7", 1, Duration::from_secs(25));
    assert_eq!(announced(&d, "pin"), pin, "the key is kept");
    assert!(announced(&d, "names").contains("10.9.8.7"));
    // The new certificate is served for the new address (checked from inside the namespace).
    let out = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(d.data().join("tls/own.crt"))
        .arg("https://10.9.8.7:8443/healthz")
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{}", String::from_utf8_lossy(&out.stderr));
}

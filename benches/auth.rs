//! Authorization, sign-in and HTTPS benchmark, each figure beside its reference (another NVR's,
//! measured on a 6-core desktop) and, where there is one, its baseline from the same run:
//!
//! 1. A bearer token's authorization (`Auth::bearer`: its id looked up in the catalog, its
//!    secret's hash compared), and a session cookie's (`Auth::session`), p50/p95 in process.
//! 2. 10,000 rejected logins from one address (`Auth::login` with a wrong password): the wall
//!    time, how many were refused by the limiter before any hashing, and the sessions held
//!    before and after (they must not grow).
//! 3. A complete single sign-on with warm metadata against the real provider (oidc-provider
//!    over TLS, its `--auto` sign-in), the box over HTTPS: from its start address through every
//!    redirect (the provider's authorization, the box's callback: the code exchanged and the
//!    id token verified) to the session, p50/p95, with a Rust client that keeps the cookies
//!    and, as a browser does, one connection per origin. Two kinds: a browser signed in at the
//!    provider already, signing in to the box again after a logout (what single sign-on is
//!    for, and the reference's figure), and a browser new to the provider each time, which
//!    also passes the provider's sign-in and consent steps. The provider's own share (its
//!    redirects alone) is reported beside each.
//! 4. HTTPS: a new connection, its TLS 1.3 handshake and one `GET /healthz`, against the same
//!    over plain HTTP, p50/p95 and the ratio.
//!
//! 5. Logout of one login holding 30 WebRTC sessions (each connected and shown its picture,
//!    8 video tracks, one live): KeepPeek's engine in this process, the viewers full `str0m`
//!    peers; the time from the logout's order (`close_login`) to the engine counting none of
//!    them open, p50/p95.
//!
//! Reports: `target/bench/auth.json` and `target/bench/auth.md`.
//!
//! `cargo bench --bench auth`             the full run
//! `cargo bench --bench auth -- --smoke`  fewer rounds (CI)

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keeppeek::auth::{Auth, Role, scope};
use keeppeek::catalog::Catalog;
use keeppeek::http::{self, HttpStats, Listeners, Services};
use serde_json::{Value, json};

#[path = "support/viewer.rs"]
mod viewer;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Latency percentiles of a set of samples, µs.
fn percentiles(mut us: Vec<f64>) -> Value {
    us.sort_by(f64::total_cmp);
    let at = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    json!({ "n": us.len(), "p50_us": at(0.50), "p95_us": at(0.95), "p99_us": at(0.99) })
}

fn p95(v: &Value) -> f64 {
    v["p95_us"].as_f64().unwrap()
}

fn time_n(n: usize, mut f: impl FnMut(usize)) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// Part 1 and 2, in process.
fn credentials(work: &Path, n: usize, rejected: usize) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let catalog = Arc::new(Catalog::open(&work.join("auth.redb")).unwrap());
    let auth = Auth::new(catalog, keeppeek::clock::RealClocks::shared());
    let (_, token) = auth.create_token("bench", scope::VIEW).unwrap();
    rt.block_on(auth.put_user("root", "correct horse battery", Role::Admin)).unwrap();
    let lan: IpAddr = [192, 168, 1, 50].into();
    let login = rt.block_on(auth.login(lan, "root", "correct horse battery")).unwrap();
    let bearer = percentiles(time_n(n, |_| assert!(auth.bearer(&token).is_some())));
    let cookie = percentiles(time_n(n, |_| assert!(auth.session(&login.cookie).is_some())));
    let wrong = percentiles(time_n(n, |_| assert!(auth.bearer("kp_1_0000").is_none())));

    let attacker: IpAddr = [192, 168, 1, 66].into();
    let held_before = auth.sessions_held();
    let (mut limited, mut limited_us) = (0, 0.0);
    let start = Instant::now();
    rt.block_on(async {
        for i in 0..rejected {
            let t = Instant::now();
            match auth.login(attacker, if i % 2 == 0 { "root" } else { "nobody" }, "wrong password").await {
                Err(keeppeek::auth::AuthError::RateLimited { .. } | keeppeek::auth::AuthError::Paused { .. }) => {
                    limited += 1;
                    limited_us += t.elapsed().as_secs_f64() * 1e6;
                }
                Err(_) => {}
                Ok(_) => panic!("a wrong password logged in"),
            }
        }
    });
    let wall = start.elapsed();
    json!({
        "bearer": bearer, "cookie": cookie, "bearer_unknown": wrong,
        "rejected": { "logins": rejected, "wall_ms": wall.as_secs_f64() * 1e3, "limited_before_hashing": limited, "limited_ms": limited_us / 1e3,
            "sessions_before": held_before, "sessions_after": auth.sessions_held() },
    })
}

/// The oidc-provider peer for part 3.
struct Provider {
    child: Child,
    issuer: String,
    ca: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_provider(work: &Path, box_origin: &str) -> Provider {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
        .args(["-keyout", "p.key", "-out", "p.crt", "-days", "5", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"])
        .current_dir(work)
        .output()
        .expect("openssl");
    assert!(out.status.success());
    std::fs::write(work.join("account"), "admin-bench").unwrap();
    let ready = work.join("ready");
    let _ = std::fs::remove_file(&ready);
    let port = free_port();
    let child = Command::new("node")
        .arg(repo().join("tests/ui/oidc-provider.mjs"))
        .args(["--port", &port.to_string(), "--redirect", box_origin])
        .arg("--cert")
        .arg(work.join("p.crt"))
        .arg("--key")
        .arg(work.join("p.key"))
        .arg("--keys")
        .arg(work.join("keys.json"))
        .arg("--auto")
        .arg(work.join("account"))
        .arg("--ready")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("node with tests/ui's npm packages");
    let t = Instant::now();
    while !ready.exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "oidc-provider did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Provider {
        child,
        issuer: format!("https://127.0.0.1:{port}"),
        ca: std::fs::read_to_string(work.join("p.crt")).unwrap(),
    }
}

/// KeepPeek's web face in this process on its own thread and runtime: HTTPS on `https_port`
/// with the box's own certificate made in `work` (plain HTTP on another port answers
/// `/healthz` and redirects), with `providers` for single sign-on. Returns the plain port.
fn start_server(work: &Path, providers: Vec<keeppeek::config::OidcProvider>, https_port: u16) -> u16 {
    std::fs::create_dir_all(work).unwrap();
    let catalog = Arc::new(Catalog::open(&work.join("web.redb")).unwrap());
    let auth = Arc::new(Auth::new(catalog.clone(), keeppeek::clock::RealClocks::shared()));
    let tls = Arc::new(
        keeppeek::tls::Tls::open(&work.join("tls"), "bench", &[[127, 0, 0, 1].into()], 1_796_428_800, true).unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let data_dir = work.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let plain = http::bind(([127, 0, 0, 1], 0).into()).await.unwrap();
            let https = http::bind(([127, 0, 0, 1], https_port).into()).await.unwrap();
            tx.send(plain.local_addr().unwrap().port()).unwrap();
            let mut services = Services::without_cameras(catalog, data_dir, Arc::default()).unwrap();
            services.oidc = Arc::new(keeppeek::oidc::Oidc::new(&providers));
            services.tls = Some(tls.clone());
            let (_keep, shutdown) = tokio::sync::watch::channel(false);
            let listeners = Listeners { plain: Some(plain), https: Some((https, tls)) };
            http::serve(listeners, Arc::new(HttpStats::default()), auth, Arc::new(services), shutdown).await;
        });
    });
    rx.recv().unwrap()
}

/// A TLS client trusting exactly `pem`'s certificates.
fn tls_client(pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// One request on a new connection (TLS when `tls`): status, head (names in lower case), body.
fn get(url: &url::Url, cookies: &str, tls: Option<&Arc<rustls::ClientConfig>>) -> (u16, String, Vec<u8>) {
    let host = url.host_str().unwrap();
    let port = url.port_or_known_default().unwrap();
    let tcp = TcpStream::connect((host, port)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let cookie = if cookies.is_empty() { String::new() } else { format!("cookie: {cookies}\r\n") };
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}:{port}\r\nconnection: close\r\n{cookie}\r\n");
    let mut all = Vec::new();
    match tls {
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
            let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            s.write_all(req.as_bytes()).unwrap();
            let _ = s.read_to_end(&mut all);
        }
        None => {
            let mut s = tcp;
            s.write_all(req.as_bytes()).unwrap();
            s.read_to_end(&mut all).unwrap();
        }
    }
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    // Header names in lower case, values as sent (a location's query, a cookie).
    let head: String = String::from_utf8_lossy(&all[..end])
        .lines()
        .map(|l| match l.split_once(':') {
            Some((k, v)) => format!("{}:{v}\n", k.to_ascii_lowercase()),
            None => format!("{l}\n"),
        })
        .collect();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head, all[end..].to_vec())
}

/// A browser's cookies, by host and port (the box and the provider share 127.0.0.1).
#[derive(Default)]
struct Jar(Vec<(String, String, String)>);

impl Jar {
    fn take(&mut self, url: &url::Url, head: &str) {
        let at = format!("{}:{}", url.host_str().unwrap(), url.port_or_known_default().unwrap());
        for line in head.lines().filter_map(|l| l.strip_prefix("set-cookie:")) {
            let pair = line.trim().split(';').next().unwrap();
            let Some((k, v)) = pair.split_once('=') else { continue };
            self.0.retain(|(h, n, _)| !(h == &at && n == k));
            if !v.is_empty() {
                self.0.push((at.clone(), k.to_string(), v.to_string()));
            }
        }
    }

    fn for_url(&self, url: &url::Url) -> String {
        let at = format!("{}:{}", url.host_str().unwrap(), url.port_or_known_default().unwrap());
        self.0.iter().filter(|(h, ..)| *h == at).map(|(_, k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
}

/// A browser for the sign-ins: its cookies, and one connection kept per origin (HTTP/1.1
/// keep-alive over TLS), as a browser keeps them through a sign-in's redirects.
struct Browser {
    jar: Jar,
    rt: tokio::runtime::Runtime,
    conns: Vec<(String, hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>)>,
}

impl Browser {
    fn new() -> Browser {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        Browser { jar: Jar::default(), rt, conns: Vec::new() }
    }

    /// `GET url` on the origin's kept connection (a new one when none is open): status and
    /// head (names in lower case); the body is read and dropped.
    fn get(&mut self, url: &url::Url, tls: &Arc<rustls::ClientConfig>) -> (u16, String) {
        use http_body_util::BodyExt;
        let origin = url[..url::Position::AfterPort].to_string();
        self.conns.retain(|(_, s)| !s.is_closed());
        let cookies = self.jar.for_url(url);
        let host = url.host_str().unwrap().to_string();
        let authority = url[url::Position::BeforeHost..url::Position::AfterPort].to_string();
        let path = url[url::Position::BeforePath..url::Position::AfterQuery].to_string();
        let kept = self.conns.iter().position(|(o, _)| *o == origin).map(|i| self.conns.swap_remove(i).1);
        let port = url.port_or_known_default().unwrap();
        let tls = tls.clone();
        let (status, head, sender) = self.rt.block_on(async move {
            let mut sender = match kept {
                Some(s) => s,
                None => {
                    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.unwrap();
                    tcp.set_nodelay(true).unwrap();
                    let name = rustls::pki_types::ServerName::try_from(host.clone()).unwrap();
                    let stream = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.unwrap();
                    let (sender, conn) =
                        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
                    tokio::spawn(conn);
                    sender
                }
            };
            let mut req = hyper::Request::get(path).header("host", authority);
            if !cookies.is_empty() {
                req = req.header("cookie", cookies);
            }
            sender.ready().await.unwrap();
            let res = sender.send_request(req.body(http_body_util::Empty::new()).unwrap()).await.unwrap();
            let mut head = format!("HTTP/1.1 {}\n", res.status().as_u16());
            for (k, v) in res.headers() {
                let _ = writeln!(head, "{}:{}", k.as_str(), v.to_str().unwrap_or(""));
            }
            let status = res.status().as_u16();
            res.into_body().collect().await.unwrap();
            (status, head, sender)
        });
        self.conns.push((origin, sender));
        (status, head)
    }

    /// One whole sign-in; returns (total µs, µs spent at the provider). The box's cookies
    /// are dropped first (as after a logout); the provider's stay.
    fn sign_in(
        &mut self,
        https_port: u16,
        box_tls: &Arc<rustls::ClientConfig>,
        provider_tls: &Arc<rustls::ClientConfig>,
    ) -> (f64, f64) {
        let box_at = format!("127.0.0.1:{https_port}");
        self.jar.0.retain(|(h, ..)| *h != box_at);
        let mut url = url::Url::parse(&format!("https://127.0.0.1:{https_port}/api/oidc/home/login")).unwrap();
        let (start, mut at_provider) = (Instant::now(), 0.0);
        for _ in 0..12 {
            let t = Instant::now();
            let at_box = url.port() == Some(https_port);
            let (status, head) = self.get(&url, if at_box { box_tls } else { provider_tls });
            if !at_box {
                at_provider += t.elapsed().as_secs_f64() * 1e6;
            }
            self.jar.take(&url, &head);
            let location = head.lines().find_map(|l| l.strip_prefix("location:")).map(|l| l.trim().to_string());
            match (status, location) {
                (302 | 303, Some(to)) if to.starts_with("/#/live") => {
                    assert!(self.jar.for_url(&url).contains("kp_session="), "signed in");
                    return (start.elapsed().as_secs_f64() * 1e6, at_provider);
                }
                (302 | 303, Some(to)) if to.contains("sso_error") => panic!("the sign-in was refused: {to}"),
                (302 | 303, Some(to)) => url = url.join(&to).unwrap(),
                (s, l) => panic!("the sign-in stopped at {url}: {s} {l:?}"),
            }
        }
        panic!("too many redirects");
    }
}

fn shares(runs: &[(f64, f64)]) -> Value {
    json!({
        "total": percentiles(runs.iter().map(|r| r.0).collect()),
        "at_provider": percentiles(runs.iter().map(|r| r.1).collect()),
        "at_box": percentiles(runs.iter().map(|r| r.0 - r.1).collect()),
    })
}

/// Parts 3 and 4: sign-ins through the real provider, and HTTPS against plain HTTP.
fn over_the_network(work: &Path, logins: usize, connections: usize) -> Value {
    let https_port = free_port();
    let provider = start_provider(work, &format!("https://127.0.0.1:{https_port}"));
    let config = format!(
        "data_dir = \"d\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n[oidc.home]\nissuer = \"{}\"\n\
         client_id = \"keeppeek\"\nclient_secret = \"kp-client-secret\"\nadmin_values = \"nvr-admins\"\nca_pem = \"\"\"{}\"\"\"\n",
        provider.issuer, provider.ca
    );
    let providers = keeppeek::config::Config::parse(&config, "bench", work).unwrap().oidc;
    let box_dir = work.join("box");
    let plain = start_server(&box_dir, providers, https_port);
    let box_tls = tls_client(&std::fs::read_to_string(box_dir.join("tls/own.crt")).unwrap());
    let provider_tls = tls_client(&provider.ca);
    // Warm: the first sign-in fetches the discovery document and the keys.
    Browser::new().sign_in(https_port, &box_tls, &provider_tls);
    // A browser new to the provider each time: its sign-in and consent steps.
    let first: Vec<_> = (0..logins).map(|_| Browser::new().sign_in(https_port, &box_tls, &provider_tls)).collect();
    // One browser signing in again and again (after a logout): signed in at the provider.
    let mut browser = Browser::new();
    browser.sign_in(https_port, &box_tls, &provider_tls);
    let again: Vec<_> = (0..logins).map(|_| browser.sign_in(https_port, &box_tls, &provider_tls)).collect();

    let plain_url = url::Url::parse(&format!("http://127.0.0.1:{plain}/healthz")).unwrap();
    let https_url = url::Url::parse(&format!("https://127.0.0.1:{https_port}/healthz")).unwrap();
    for _ in 0..20 {
        get(&plain_url, "", None);
        get(&https_url, "", Some(&box_tls));
    }
    let plain_runs = percentiles(time_n(connections, |_| assert_eq!(get(&plain_url, "", None).0, 200)));
    let https_runs = percentiles(time_n(connections, |_| assert_eq!(get(&https_url, "", Some(&box_tls)).0, 200)));
    json!({
        "sign_in": shares(&again), "sign_in_first": shares(&first),
        "plain_request": plain_runs, "https_request": https_runs,
        "https_over_plain_p95": p95(&https_runs) / p95(&plain_runs),
    })
}

/// Part 5: `rounds` logouts, each of one login holding 30 connected sessions.
fn logout_with_sessions(work: &Path, rounds: usize) -> Value {
    use keeppeek::base::{StreamKey, StreamKind};
    use keeppeek::cameras::{Cameras, RunningStream};
    use keeppeek::ingest::file::Clip;
    use keeppeek::live::Fanout;
    use keeppeek::webrtc::{Engine, Owner, Streams};
    const SESSIONS: usize = 30;
    const TRACKS: usize = 8;
    let clip_path = repo().join("target/fixtures/h264.mp4");
    let clip = Clip::parse(&std::fs::read(&clip_path).expect("the fixtures (tools/make-fixtures.sh)")).unwrap();
    let fanout = Arc::new(Fanout::new(keeppeek::live::gop_pool()));
    for (i, (pts, is_key, data)) in clip.video_frames().take(15).enumerate() {
        fanout.publish(&keeppeek::media::Frame {
            pts_90k: pts,
            received_mono_us: i as i64,
            received_wall_us: i as i64,
            is_key,
            data,
            params: clip.params().clone(),
            audio: None,
        });
    }
    let dir = work.join("engine");
    std::fs::create_dir_all(&dir).unwrap();
    let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let key = StreamKey::new("bench", StreamKind::Main);
    let cameras = Arc::new(Cameras::default());
    cameras.add([RunningStream { key: key.clone(), state: Arc::default(), recording: None, live: fanout.clone() }]);
    let streams = Streams { cameras, catalog, data_dir: dir };
    let (engine, handle) = rt.block_on(Engine::bind(0, &["127.0.0.1".parse().unwrap()], streams, 512)).unwrap();
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    std::thread::spawn(move || rt.block_on(engine.run(stop_rx)));
    let client = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let open_now = || handle.stats.sessions_open.load(std::sync::atomic::Ordering::Relaxed);
    let mut times = Vec::new();
    for round in 0..rounds {
        let login = [round as u8 + 1; 32];
        let mut viewers = Vec::new();
        for _ in 0..SESSIONS {
            let (mut v, pending, offer) = viewer::Viewer::offer_tracks(TRACKS);
            let owner = Owner { principal: "user:ann".into(), login: Some(login), admin: false };
            let (_, answer) =
                client.block_on(handle.open(key.clone(), offer, owner, [10, 0, 0, 1].into())).expect("a session");
            v.answer(pending, &answer);
            viewers.push(v);
        }
        let farm = viewer::Farm::start(viewers);
        let t = Instant::now();
        while farm.connected() < SESSIONS {
            assert!(t.elapsed() < Duration::from_secs(20), "the viewers connect");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(open_now(), SESSIONS);
        // Each viewer shown its picture (the held GOP), then a moment: the logout comes to
        // an engine at rest, not in the burst of 30 first pictures.
        while farm.min_frames() == 0 {
            assert!(t.elapsed() < Duration::from_secs(20), "the viewers get a picture");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        client.block_on(handle.close_login(login));
        while open_now() > 0 {
            // Yield, not spin: on two cores a spinning watcher would hold the engine's core.
            std::thread::yield_now();
            assert!(t.elapsed() < Duration::from_secs(5), "the sessions close");
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
        farm.stop();
    }
    json!({ "sessions": SESSIONS, "tracks_each": TRACKS, "logout": percentiles(times) })
}

fn main() {
    keeppeek::tls::install_provider();
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (n, rejected, logins, connections) = if smoke { (1_000, 1_000, 5, 50) } else { (100_000, 10_000, 100, 1_000) };
    let out_dir = repo().join("target/bench");
    let work = out_dir.join("auth");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let creds = credentials(&work, n, rejected);
    let network = over_the_network(&work, logins, connections);
    let logout = logout_with_sessions(&work, if smoke { 2 } else { 40 });
    let report = json!({ "mode": if smoke { "smoke" } else { "full" }, "credentials": creds, "network": network, "logout": logout });
    std::fs::write(out_dir.join("auth.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let md = markdown(&report);
    std::fs::write(out_dir.join("auth.md"), &md).unwrap();
    println!("{md}");
}

fn markdown(r: &Value) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Authorization, sign-in and HTTPS ({})\n", r["mode"].as_str().unwrap());
    let c = &r["credentials"];
    let _ = writeln!(md, "| what | p50 | p95 | reference p95 |\n|---|---|---|---|");
    for (k, label, reference) in [
        ("bearer", "bearer token", "600 ns"),
        ("cookie", "session cookie", "1.8 µs"),
        ("bearer_unknown", "unknown bearer token", "-"),
    ] {
        let _ = writeln!(
            md,
            "| {label} | {:.2} µs | {:.2} µs | {reference} |",
            c[k]["p50_us"].as_f64().unwrap(),
            p95(&c[k])
        );
    }
    let w = &r["network"];
    let ms = |v: &Value, k: &str| v[k].as_f64().unwrap() / 1e3;
    for (k, label, reference) in [
        ("sign_in", "a whole single sign-on, warm, signed in at the provider (of it at the provider)", "8.5 ms"),
        ("sign_in_first", "the same, new to the provider: its sign-in and consent steps too", "-"),
    ] {
        let s = &w[k];
        let _ = writeln!(
            md,
            "| {label} | {:.2} ms ({:.2}) | {:.2} ms ({:.2}) | {reference} |",
            ms(&s["total"], "p50_us"),
            ms(&s["at_provider"], "p50_us"),
            ms(&s["total"], "p95_us"),
            ms(&s["at_provider"], "p95_us")
        );
    }
    let s = &w["sign_in"];
    let _ = writeln!(
        md,
        "| of the former, at the box (start, callback: code exchanged, token verified) | {:.2} ms | {:.2} ms | - |",
        ms(&s["at_box"], "p50_us"),
        ms(&s["at_box"], "p95_us")
    );
    let _ = writeln!(
        md,
        "| plain HTTP: connect and GET /healthz | {:.0} µs | {:.0} µs | - |",
        w["plain_request"]["p50_us"].as_f64().unwrap(),
        p95(&w["plain_request"])
    );
    let _ = writeln!(
        md,
        "| HTTPS: connect, TLS 1.3 handshake and GET /healthz | {:.0} µs | {:.0} µs (×{:.1} plain) | - |",
        w["https_request"]["p50_us"].as_f64().unwrap(),
        p95(&w["https_request"]),
        w["https_over_plain_p95"].as_f64().unwrap()
    );
    let l = &r["logout"];
    let _ = writeln!(
        md,
        "| logout of one login with {} WebRTC sessions × {} tracks: until none is open | {:.0} µs | {:.0} µs | 330 µs |",
        l["sessions"],
        l["tracks_each"],
        l["logout"]["p50_us"].as_f64().unwrap(),
        p95(&l["logout"])
    );
    let rej = &c["rejected"];
    let _ = writeln!(
        md,
        "\n{} rejected logins from one address: {:.1} ms wall (reference 32 ms); the {} the limiter refused before any hashing (each in the pause after a wrong password, or past the window's count) took {:.1} ms together, the {} that reached the password check each cost a hash; sessions {} → {}.",
        rej["logins"],
        rej["wall_ms"].as_f64().unwrap(),
        rej["limited_before_hashing"],
        rej["limited_ms"].as_f64().unwrap(),
        rej["logins"].as_u64().unwrap() - rej["limited_before_hashing"].as_u64().unwrap(),
        rej["sessions_before"],
        rej["sessions_after"]
    );
    md
}

//! Single sign-on against a real OpenID provider: panva's certified `oidc-provider`
//! (`tests/ui/oidc-provider.mjs`), over TLS on loopback with its own certificate, which the
//! box trusts through the provider's configured CA. curl plays the browser (following every
//! redirect, keeping cookies); the provider's `--auto` mode signs in the account a file names.
//!
//! Shown: an admin claim and a viewer claim give their roles and the auth matrix holds for
//! both; no role is refused with why; a replayed `state` is refused; logout ends the session
//! and hands the provider's end-session address; keys rotated at the provider are followed;
//! a provider that is down, a key set that is huge or slow are refused with what failed, in
//! bounded time, while sessions already open go on.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// The provider, its certificate and keys in a directory of its own.
struct Provider {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    redirect: String,
}

impl Provider {
    /// Makes the provider's TLS certificate (OpenSSL) and starts it for a box at `redirect`
    /// (`http://127.0.0.1:PORT`).
    fn start(redirect: &str, extra: &[&str]) -> Provider {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
            .args(["-keyout", "p.key", "-out", "p.crt", "-days", "5", "-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut p = Provider { child: None, dir, port: free_port(), redirect: redirect.into() };
        p.account("admin-ann");
        p.run(extra);
        p
    }

    fn run(&mut self, extra: &[&str]) {
        let ready = self.dir.path().join("ready");
        let _ = std::fs::remove_file(&ready);
        let script = repo().join("tests/ui/oidc-provider.mjs");
        let d = self.dir.path();
        let child = Command::new("node")
            .arg(&script)
            .args(["--port", &self.port.to_string(), "--redirect", &self.redirect])
            .arg("--cert")
            .arg(d.join("p.crt"))
            .arg("--key")
            .arg(d.join("p.key"))
            .arg("--keys")
            .arg(d.join("keys.json"))
            .arg("--auto")
            .arg(d.join("account"))
            .arg("--ready")
            .arg(&ready)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("provider.log")).unwrap())
            .spawn()
            .expect("node (Debian package nodejs) and tests/ui's npm packages (npm ci in tests/ui)");
        self.child = Some(child);
        // Node loads the provider's modules in a few seconds, more with the suite's tests
        // side by side on two cores (once over 20 s).
        let up = wait_until(Duration::from_secs(60), || ready.exists());
        assert!(
            up,
            "oidc-provider did not start: {}",
            std::fs::read_to_string(d.join("provider.log")).unwrap_or_default()
        );
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again with `extra` (`--rotate`, `--jwks slow`), same keys and port.
    fn restart(&mut self, extra: &[&str]) {
        self.stop();
        self.run(extra);
    }

    /// The account the next sign-in is.
    fn account(&self, name: &str) {
        std::fs::write(self.dir.path().join("account"), name).unwrap();
    }

    fn issuer(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The box's config for it: `[oidc.home]`.
    fn config(&self) -> String {
        let ca = std::fs::read_to_string(self.dir.path().join("p.crt")).unwrap();
        format!(
            "[oidc.home]\nname = \"Home ID\"\nissuer = \"{}\"\nclient_id = \"keeppeek\"\nclient_secret = \"kp-client-secret\"\n\
             admin_values = \"nvr-admins\"\nviewer_values = \"nvr-viewers\"\nca_pem = \"\"\"{ca}\"\"\"\n",
            self.issuer()
        )
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.stop();
    }
}

/// KeepPeek on a free port with `[oidc.home]` for a provider to be started at `provider`;
/// the port is chosen first so the provider can register the box's address.
fn sso_daemon(port: u16, provider: &Provider) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n{}",
            provider.config()
        ),
    );
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    (dir, d)
}

/// What a sign-in ended as: a session (cookie, CSRF), or the reason the login page shows.
#[derive(Debug)]
enum Outcome {
    Session(String, String),
    Refused(String),
}

/// Signs in through the provider as a browser would (every redirect followed, cookies kept
/// in `jar`), stopping before the box's callback when `stop_at_callback`: then the callback's
/// address is returned as the reason.
fn sign_in_with(port: u16, jar: &Path, stop_at_callback: bool) -> Outcome {
    let mut c = Command::new("curl");
    c.args(["-sk", "--max-time", "30", "-o", "/dev/null", "-w", "%{url_effective}\n%{redirect_url}"])
        .arg("-c")
        .arg(jar)
        .arg("-b")
        .arg(jar);
    if stop_at_callback {
        // Follow until the provider sends the browser back: curl stops at the first
        // redirect to the box's callback (the box's own first redirect is followed by hand).
        let first = Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-w", "%{redirect_url}", "-c"])
            .arg(jar)
            .arg("-b")
            .arg(jar)
            .arg(format!("http://127.0.0.1:{port}/api/oidc/home/login"))
            .output()
            .unwrap();
        let mut at = String::from_utf8_lossy(&first.stdout).into_owned();
        for _ in 0..10 {
            if at.contains("/api/oidc/callback") {
                return Outcome::Refused(at);
            }
            let next = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{redirect_url}", "-c"])
                .arg(jar)
                .arg("-b")
                .arg(jar)
                .arg(&at)
                .output()
                .unwrap();
            at = String::from_utf8_lossy(&next.stdout).into_owned();
        }
        panic!("the provider never sent the browser back: {at}");
    }
    let out = c.arg("-L").arg(format!("http://127.0.0.1:{port}/api/oidc/home/login")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    outcome(&text, jar)
}

fn outcome(effective: &str, jar: &Path) -> Outcome {
    let url = effective.lines().next().unwrap_or("").to_string();
    if let Some(reason) = url.split("sso_error=").nth(1) {
        let reason: String =
            url::form_urlencoded::parse(format!("r={reason}").as_bytes()).next().unwrap().1.into_owned();
        return Outcome::Refused(reason);
    }
    let jar_text = std::fs::read_to_string(jar).unwrap_or_default();
    let Some(cookie) = jar_text.lines().find(|l| l.contains("\tkp_session\t")).and_then(|l| l.rsplit('\t').next())
    else {
        return Outcome::Refused(format!("no session and no reason: ended at {url}"));
    };
    assert!(url.ends_with("/#/live"), "a sign-in lands on the live page: {url}");
    let cookie = format!("kp_session={cookie}");
    let (code, _, body) = request(port_of(&url), "GET", "/api/me", &[("cookie", &cookie)], "");
    assert_eq!(code, 200, "{body}");
    let me: Value = serde_json::from_str(&body).unwrap();
    Outcome::Session(cookie, me["csrf"].as_str().unwrap().to_string())
}

fn port_of(url: &str) -> u16 {
    url::Url::parse(url).unwrap().port().unwrap()
}

fn sign_in(port: u16, work: &Path, n: &str) -> Outcome {
    let jar = work.join(format!("jar-{n}"));
    let _ = std::fs::remove_file(&jar);
    sign_in_with(port, &jar, false)
}

fn session(o: Outcome) -> (String, String) {
    match o {
        Outcome::Session(c, t) => (c, t),
        Outcome::Refused(r) => panic!("the sign-in was refused: {r}"),
    }
}

fn refused(o: Outcome) -> String {
    match o {
        Outcome::Refused(r) => r,
        Outcome::Session(..) => panic!("the sign-in should have been refused"),
    }
}

fn me(port: u16, s: &(String, String)) -> Value {
    let (code, _, body) = request(port, "GET", "/api/me", &[("cookie", &s.0)], "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_real_provider_signs_in_admins_and_viewers_and_the_auth_matrix_holds_for_them() {
    let port = free_port();
    let provider = Provider::start(&format!("http://127.0.0.1:{port}"), &[]);
    let (dir, _d) = sso_daemon(port, &provider);
    let work = dir.path();
    // The break-glass account exists beside single sign-on.
    let local = setup_admin(port);
    let (code, _, body) = request(port, "GET", "/api/oidc/providers", &[], "");
    assert_eq!((code, body.as_str()), (200, r#"[{"id":"home","name":"Home ID"}]"#));

    let admin = session(sign_in(port, work, "admin"));
    assert_eq!(me(port, &admin)["role"], "admin");
    assert_eq!(me(port, &admin)["user"], "admin-ann");
    assert_eq!(me(port, &admin)["provider"], "home");
    provider.account("viewer-bob");
    let viewer = session(sign_in(port, work, "viewer"));
    assert_eq!(
        (me(port, &viewer)["role"].as_str(), me(port, &viewer)["user"].as_str()),
        (Some("viewer"), Some("viewer-bob"))
    );
    crate::auth::auth_matrix(port, &admin, &viewer);

    // Someone the provider knows but whose groups name no role here is refused, with why.
    provider.account("guest-carl");
    let why = refused(sign_in(port, work, "nobody"));
    assert_eq!(
        why,
        "Home ID: guest-carl has no role on this box (its groups claim holds none of the values the box's settings name)"
    );

    // A state is taken once: the provider's redirect back, replayed, finds nothing.
    provider.account("admin-ann");
    let jar = work.join("jar-replay");
    let back = match sign_in_with(port, &jar, true) {
        Outcome::Refused(url) => url,
        other => panic!("{other:?}"),
    };
    let follow = |url: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{redirect_url}", "-c"])
            .arg(&jar)
            .arg("-b")
            .arg(&jar)
            .arg(url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(follow(&back).ends_with("/#/live"), "the first return signs in");
    let again = follow(&back);
    assert!(again.contains("sso_error=this+sign-in+was+used+already+or+has+expired"), "{again}");
    // And the return, carried to another browser (no binding cookie), is refused too.
    let other_jar = work.join("jar-other");
    let back = match sign_in_with(port, &work.join("jar-third"), true) {
        Outcome::Refused(url) => url,
        other => panic!("{other:?}"),
    };
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{redirect_url}", "-c"])
        .arg(&other_jar)
        .arg(&back)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("started+in+another+browser"));

    // Logout ends the session at once and gives the provider's end-session address.
    let (code, _, body) = request(port, "POST", "/api/logout", &[("cookie", &admin.0), ("x-csrf-token", &admin.1)], "");
    assert_eq!(code, 200, "{body}");
    let end = serde_json::from_str::<Value>(&body).unwrap()["end_session"].as_str().unwrap().to_string();
    assert!(end.starts_with(&format!("{}/session/end?id_token_hint=", provider.issuer())), "{end}");
    assert!(end.contains(&format!("post_logout_redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2F")), "{end}");
    assert_eq!(request(port, "GET", "/api/me", &[("cookie", &admin.0)], "").0, 401);
    // The provider takes it (its logout page answers 200).
    let out = Command::new("curl").args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"]).arg(&end).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    // The local admin was untouched by all of it.
    assert_eq!(me(port, &local)["role"], "admin");
}

#[test]
fn keys_rotated_at_the_provider_are_followed_and_refetches_are_spaced() {
    let port = free_port();
    let mut provider = Provider::start(&format!("http://127.0.0.1:{port}"), &[]);
    let (dir, _d) = sso_daemon(port, &provider);
    session(sign_in(port, dir.path(), "before"));
    // A new key signs from now on; the box holds only the old one: it fetches the set again
    // and verifies.
    provider.restart(&["--rotate"]);
    let s = session(sign_in(port, dir.path(), "rotated"));
    assert_eq!(me(port, &s)["role"], "admin");
    // Rotated again at once: the box does not fetch the keys again within
    // OIDC_JWKS_REFETCH_MIN_INTERVAL_MS (10 s), so forged key ids cannot make it hammer the
    // provider; the sign-in is refused with why, and works once the interval has passed.
    provider.restart(&["--rotate"]);
    let why = refused(sign_in(port, dir.path(), "too-soon"));
    assert!(why.starts_with("Home ID: the id token names a key the provider does not list"), "{why}");
    std::thread::sleep(Duration::from_millis(10_500));
    let s = session(sign_in(port, dir.path(), "later"));
    assert_eq!(me(port, &s)["role"], "admin");
    let keys: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(provider.dir.path().join("keys.json")).unwrap()).unwrap();
    assert_eq!(keys.len(), 2, "the provider lists the new key and the one before");
}

#[test]
fn a_provider_down_slow_or_wrong_is_refused_with_what_failed_and_sessions_go_on() {
    let port = free_port();
    let mut provider = Provider::start(&format!("http://127.0.0.1:{port}"), &["--jwks", "huge"]);
    let (dir, _d) = sso_daemon(port, &provider);
    let work = dir.path();
    let local = setup_admin(port);
    let issuer = provider.issuer();

    // A key set of 1 MiB: refused at its ceiling.
    let why = refused(sign_in(port, work, "huge"));
    assert_eq!(why, format!("Home ID: its key set at {issuer}/jwks: its answer is over 65536 bytes"));

    // A key set that takes 8 s: refused at the fetch's 5 s.
    provider.restart(&["--jwks", "slow"]);
    let start = Instant::now();
    let why = refused(sign_in(port, work, "slow"));
    let took = start.elapsed();
    assert_eq!(why, format!("Home ID: its key set at {issuer}/jwks: it did not answer within 5000 ms"));
    assert!(took < Duration::from_secs(9), "the sign-in was refused in {took:?}");

    // Working again: a session opens.
    provider.restart(&[]);
    let s = session(sign_in(port, work, "ok"));

    // Down: refused at once with the provider's address, and sessions already open go on.
    provider.stop();
    let start = Instant::now();
    let why = refused(sign_in(port, work, "down"));
    assert!(
        why.starts_with(&format!(
            "Home ID: its discovery document at {issuer}/.well-known/openid-configuration: cannot reach it"
        )),
        "{why}"
    );
    assert!(start.elapsed() < Duration::from_secs(6));
    assert_eq!(me(port, &s)["role"], "admin");
    assert_eq!(me(port, &local)["role"], "admin");

    // A provider whose certificate the box does not trust: its CA taken out of the settings
    // (a change taken while the box runs), the sign-in is refused by TLS.
    provider.restart(&[]);
    let csrf = [("cookie", local.0.as_str()), ("x-csrf-token", local.1.as_str())];
    let (_, _, body) = request(port, "GET", "/api/config", &csrf, "");
    let rev = serde_json::from_str::<Value>(&body).unwrap()["rev"].as_u64().unwrap();
    let change =
        serde_json::json!({ "base": rev, "changes": [{ "op": "set", "key": "oidc.home.ca_pem", "value": null }] });
    let (code, _, body) = request(port, "POST", "/api/config/apply", &csrf, &change.to_string());
    assert_eq!(code, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["restarting"], false, "{body}");
    let why = refused(sign_in(port, work, "untrusted"));
    assert!(
        why.starts_with(&format!(
            "Home ID: its discovery document at {issuer}/.well-known/openid-configuration: TLS failed"
        )),
        "{why}"
    );
    assert_eq!(me(port, &s)["role"], "admin");
}

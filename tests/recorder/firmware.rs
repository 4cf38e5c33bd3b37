//! The firmware API of the real binary, on the host: a scratch folder shaped like a box's
//! root (firmware description, kernel command line, boot environment, two slot "devices"
//! named in a fake `sys/class/block`) stands in for `/`. The same code boots in QEMU in
//! `tests/image/`; here every refusal and ceiling is tried quickly.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const SLOT_BYTES: u64 = 4 << 20;

fn fake_root(root: &Path) {
    let w = |rel: &str, body: &[u8]| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    w(
        "etc/keeppeek/firmware.toml",
        format!("version = \"0.5.0\"\nboard = \"qemu-virt\"\nslot_bytes = {SLOT_BYTES}\n").as_bytes(),
    );
    w("proc/cmdline", b"console=ttyAMA0 panic=5 kp.slot=a\n");
    let mut env = b"# GRUB Environment Block\nORDER=a b\nA_OK=1\nB_OK=0\nA_TRY=0\nB_TRY=0\n".to_vec();
    env.resize(1024, b'#');
    w("boot/EFI/keeppeek/grubenv", &env);
    for (n, s) in [(2, "a"), (3, "b")] {
        w(&format!("sys/class/block/vda{n}/uevent"), format!("DEVNAME=vda{n}\nPARTNAME=kp-slot-{s}\n").as_bytes());
        w(&format!("dev/vda{n}"), b"");
        std::fs::File::options()
            .write(true)
            .open(root.join(format!("dev/vda{n}")))
            .unwrap()
            .set_len(SLOT_BYTES)
            .unwrap();
    }
    std::fs::create_dir_all(root.join("data")).unwrap();
}

fn make_bundle(dir: &Path, name: &str, version: &str, board: &str, payload: &[u8], key: &Path) -> Vec<u8> {
    let slot = dir.join(format!("{name}.slot"));
    std::fs::write(&slot, payload).unwrap();
    let out = dir.join(format!("{name}.bundle"));
    succeed(
        Command::new("bash")
            .arg(repo().join("tools/make-bundle.sh"))
            .arg("--slot")
            .arg(&slot)
            .args(["--version", version, "--board", board, "--slot-bytes", &SLOT_BYTES.to_string(), "--key"])
            .arg(key)
            .arg("--out")
            .arg(&out),
    );
    std::fs::read(out).unwrap()
}

fn upload(port: u16, token: &str, bundle: &[u8], query: &str) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let (code, _, body) =
        request_bytes(port, "POST", &format!("/api/system/update{query}"), &[("authorization", &auth)], bundle);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn system(port: u16, token: &str) -> Value {
    let (code, _, body) = request(port, "GET", "/api/system", &[("authorization", &format!("Bearer {token}"))], "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// A daemon on a fake root (with a camera, so its config has a secret to redact), and an
/// admin's session.
fn firmware_daemon(dir: &Path) -> (Daemon, u16, std::path::PathBuf, (String, String)) {
    let root = dir.join("root");
    fake_root(&root);
    let port = free_port();
    write_config(
        dir,
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [[cameras]]\nname = \"gate\"\nusername = \"u\"\npassword = \"hunter2\"\n\
             main = {{ url = \"rtsp://127.0.0.1:9/s\" }}\n"
        ),
    );
    let d = Daemon::start_with(dir, &["--system-root", root.to_str().unwrap()]);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    (d, port, root, admin)
}

/// A 1.5 MB payload that does not compress.
fn payload() -> Vec<u8> {
    (0..1_500_000u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect()
}

#[test]
fn updates_over_http_are_checked_streamed_and_refused_without_touching_the_running_slot() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, port, root, admin) = firmware_daemon(dir.path());
    let token = make_token(port, &admin, r#""admin""#);
    let viewer = make_token(port, &admin, r#""view""#);

    let s = system(port, &viewer);
    assert_eq!((s["firmware"].as_bool(), s["running_slot"].as_str()), (Some(true), Some("a")), "{s}");
    assert_eq!((s["version"].as_str(), s["next_boot"].as_str()), (Some("0.5.0"), Some("a")));
    assert_eq!(s["update_key"], "development");

    let payload = payload();
    let key = repo().join("images/keys/development.key");
    let other = dir.path().join("other.key");
    succeed(Command::new("minisign").args(["-G", "-W", "-p"]).arg(dir.path().join("other.pub")).arg("-s").arg(&other));
    let good = make_bundle(dir.path(), "good", "0.6.0", "qemu-virt", &payload, &key);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "foreign key",
            make_bundle(dir.path(), "foreign", "0.6.0", "qemu-virt", &payload, &other),
            422,
            "bad_signature",
        ),
        ("other board", make_bundle(dir.path(), "board", "0.6.0", "rpi4", &payload, &key), 409, "wrong_board"),
        ("older", make_bundle(dir.path(), "old", "0.4.0", "qemu-virt", &payload, &key), 409, "downgrade"),
        ("truncated", good[..good.len() * 2 / 3].to_vec(), 400, "truncated_bundle"),
        ("garbage", vec![7u8; 4096], 400, "bad_bundle"),
    ];
    let (code, _) = upload(port, &viewer, &good, "");
    assert_eq!(code, 403, "a viewer may not update");
    for (what, bundle, status, code) in cases {
        let (got, answer) = upload(port, &token, &bundle, "?reboot=1");
        assert_eq!((got, answer["code"].as_str()), (status, Some(code)), "{what}: {answer}");
        let s = system(port, &viewer);
        assert_eq!((s["running_slot"].as_str(), s["next_boot"].as_str()), (Some("a"), Some("a")), "{what}: {s}");
        assert_eq!(s["last_update"]["result"], "failed", "{what}");
    }
    // A body declared past the ceiling is refused from its head.
    let r = exchange(
        port,
        format!(
            "POST /api/system/update HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\n\r\n",
            (256u64 << 20) + 1
        )
        .as_bytes(),
    );
    assert_eq!(status(&r), 413, "{r}");

    // One install at a time: a second upload while the first is streaming is refused, and
    // the first completes.
    let mut first = connect(port);
    let head = format!(
        "POST /api/system/update HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        good.len()
    );
    first.write_all(head.as_bytes()).unwrap();
    first.write_all(&good[..good.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (code, answer) = upload(port, &token, &good, "");
    assert_eq!((code, answer["code"].as_str()), (409, Some("update_busy")), "{answer}");
    first.write_all(&good[good.len() / 2..]).unwrap();
    let r = read_response(&mut first);
    assert_eq!(status(&r), 200, "{r}");
    let slot_b = std::fs::read(root.join("dev/vda3")).unwrap();
    assert!(slot_b[..payload.len()] == payload[..], "the payload is in slot B");
    let env = std::fs::read_to_string(root.join("boot/EFI/keeppeek/grubenv")).unwrap();
    assert!(env.contains("ORDER=b a\n") && env.contains("B_TRY=1\n") && env.contains("B_OK=0\n"), "{env}");
    assert_eq!(std::fs::metadata(root.join("boot/EFI/keeppeek/grubenv")).unwrap().len(), 1024);
    let s = system(port, &viewer);
    assert_eq!((s["next_boot"].as_str(), s["slots"]["b"]["version"].as_str()), (Some("b"), Some("0.6.0")), "{s}");
    assert_eq!(s["last_update"]["result"], "installed");

    // Not the box's own root: no reboot, and it says so.
    let auth = format!("Bearer {token}");
    let (code, _, body) = request(port, "POST", "/api/system/reboot", &[("authorization", &auth)], "");
    assert_eq!(code, 409, "{body}");

    // A factory reset is recorded for the next boot; an unknown choice is refused.
    let (code, _, body) =
        request(port, "POST", "/api/system/factory-reset", &[("authorization", &auth)], r#"{"keep":["accounts"]}"#);
    assert_eq!(code, 400, "{body}");
    let (code, _, body) =
        request(port, "POST", "/api/system/factory-reset", &[("authorization", &auth)], r#"{"keep":["config"]}"#);
    assert_eq!(code, 202, "{body}");
    let marker = std::fs::read_to_string(root.join("data/system/factory-reset.json")).unwrap();
    assert_eq!(marker, r#"{"keep":["config"]}"#);

    // The support bundle: a tar with the config, its password replaced.
    let (code, head, tar) = {
        let r = exchange(
            port,
            format!("GET /api/system/support-bundle HTTP/1.1\r\nhost: kp\r\nauthorization: {auth}\r\n\r\n").as_bytes(),
        );
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        (status(&r), head.to_string(), body.to_string())
    };
    assert_eq!(code, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/x-tar"));
    assert!(tar.contains("keeppeek.toml") && tar.contains("firmware.toml") && tar.contains("grubenv"));
    assert!(!tar.contains("hunter2"), "no secret in the support bundle");
    let (code, _, _) =
        request(port, "GET", "/api/system/support-bundle", &[("authorization", &format!("Bearer {viewer}"))], "");
    assert_eq!(code, 403);

    // The same from the command line: status, and a refusal with its reason.
    let out = succeed(keeppeek().args(["update", "status", "--system-root"]).arg(&root));
    let s: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(s["next_boot"], "b");
    let foreign = dir.path().join("foreign.bundle");
    let out = keeppeek().args(["update", "install"]).arg(&foreign).arg("--system-root").arg(&root).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("signature"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Sends `bundle` as an update in chunks of `chunk` bytes every 100 ms; returns the answer
/// and how long it took.
fn paced_upload(port: u16, token: &str, bundle: &[u8], chunk: usize) -> (String, Duration) {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST /api/system/update HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        bundle.len()
    );
    let start = std::time::Instant::now();
    s.write_all(head.as_bytes()).unwrap();
    for part in bundle.chunks(chunk) {
        if s.write_all(part).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (read_response(&mut s), start.elapsed())
}

#[test]
fn an_upload_longer_than_the_read_timeout_is_read_while_it_keeps_the_minimum_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, port, root, admin) = firmware_daemon(dir.path());
    let token = make_token(port, &admin, r#""admin""#);
    let key = repo().join("images/keys/development.key");
    let payload = payload();
    let bundle = make_bundle(dir.path(), "slow", "0.6.0", "qemu-virt", &payload, &key);
    // 40 KiB/s, over two and a half times the minimum: longer than the read timeout, whole.
    let (answer, took) = paced_upload(port, &token, &bundle, 4 << 10);
    assert!(took > Duration::from_secs(32), "the upload took {took:?}, not past the read timeout");
    assert_eq!(status(&answer), 200, "{answer}");
    let slot_b = std::fs::read(root.join("dev/vda3")).unwrap();
    assert!(slot_b[..payload.len()] == payload[..], "the payload is in slot B");
    // 4 KiB/s, a quarter of the minimum: the deadline moves a quarter second each second, so
    // the upload is cut off with a 408 after about 40 s, and the running slot stays first.
    let newer = make_bundle(dir.path(), "slower", "0.7.0", "qemu-virt", &payload, &key);
    let (answer, took) = paced_upload(port, &token, &newer, 400);
    assert_eq!(status(&answer), 408, "{answer}");
    assert!(took > Duration::from_secs(35) && took < Duration::from_secs(50), "cut off after {took:?}");
    let s = system(port, &token);
    assert_eq!(s["slots"]["a"]["good"].as_bool(), Some(true), "{s}");
    assert_eq!(s["last_update"]["result"], "failed", "{s}");
}

#[test]
fn a_daemon_that_is_not_an_image_says_so() {
    let (_dir, _d, port) = web_daemon();
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin""#);
    let s = system(port, &token);
    assert_eq!(s["firmware"], false);
    let (code, answer) = upload(port, &token, b"whatever", "");
    assert_eq!((code, answer["code"].as_str()), (409, Some("not_firmware")), "{answer}");
}

//! The firmware image under QEMU (`qemu-system-aarch64 -M virt -cpu cortex-a53 -m 512`,
//! booted by U-Boot and GRUB as the reference board boots), driven from the host over a
//! forwarded port: boot to a healthy `/healthz`, a camera served from the host recorded
//! across reboots, and a whole A/B cycle: refusals that leave the running slot alone, a
//! good update (installed from the web face in Chromium) that boots and is marked good, a
//! broken one that rolls back by itself, and
//! a power cut during the slot write that still boots the old slot. And power cuts while
//! recording (QEMU killed, so the guest's page cache is lost as in a real cut): an event's
//! footage survives each cut made 1 to 3 s after its answer, and without events the video
//! lost per cut stays within one flush interval; `check` is clean at the end.
//!
//! The image is built by `tools/image.sh` (tools/test.sh runs it first); this test fails
//! when it is missing. Figures land in `target/images/qemu-virt/figures.txt`.

#[allow(dead_code)]
#[path = "../recorder/common.rs"]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Camera, free_port, repo, request, request_bytes, wait_until};
use serde_json::Value;

fn image_dir() -> PathBuf {
    repo().join("target/images/qemu-virt")
}

fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// A QEMU machine on a disk file; killed on drop.
struct Vm {
    child: Child,
    serial: PathBuf,
    http: u16,
    /// The guest's HTTPS port (8443), forwarded.
    https: u16,
    started: Instant,
}

impl Vm {
    fn boot(disk: &Path, serial: &Path) -> Vm {
        Vm::boot_with(disk, serial, None)
    }

    /// Boots with a second NIC on the host's tap device `camera_tap`: the guest's eth1, the
    /// board's camera port.
    fn boot_with(disk: &Path, serial: &Path, camera_tap: Option<&str>) -> Vm {
        let (http, https) = (free_port(), free_port());
        // After the LAN's NIC: the guest names them in that order (eth0, eth1).
        let camera_nic: Vec<String> = match camera_tap {
            Some(tap) => vec![
                "-netdev".into(),
                format!("tap,id=n1,ifname={tap},script=no,downscript=no"),
                "-device".into(),
                "virtio-net-pci,netdev=n1,romfile=".into(),
            ],
            None => Vec::new(),
        };
        let child = Command::new("qemu-system-aarch64")
            .args(["-M", "virt", "-cpu", "cortex-a53", "-m", "512", "-smp", "2"])
            .args(["-display", "none", "-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", serial.display()))
            .args(["-bios", "/usr/lib/u-boot/qemu_arm64/u-boot.bin"])
            .arg("-drive")
            .arg(format!("if=none,id=disk,format=raw,file={}", disk.display()))
            .args(["-device", "virtio-blk-pci,drive=disk"])
            .args([
                "-netdev",
                &format!("user,id=n0,hostfwd=tcp:127.0.0.1:{http}-:8080,hostfwd=tcp:127.0.0.1:{https}-:8443"),
            ])
            .args(["-device", "virtio-net-pci,netdev=n0,romfile="])
            .args(&camera_nic)
            .args(["-device", "virtio-rng-pci", "-device", "i6300esb", "-action", "watchdog=reset"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting qemu-system-aarch64 (Debian package qemu-system-arm)");
        Vm { child, serial: serial.to_owned(), http, https, started: Instant::now() }
    }

    fn console(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.serial).unwrap_or_default()).into_owned()
    }

    /// Waits for `/healthz`; returns the time since QEMU started.
    fn wait_healthy(&mut self, timeout: Duration) -> Duration {
        let up = wait_until(timeout, || {
            assert!(self.child.try_wait().unwrap().is_none(), "QEMU ended:\n{}", tail(&self.console()));
            answers(self.http)
        });
        assert!(up, "no healthy /healthz in {timeout:?}; console:\n{}", tail(&self.console()));
        self.started.elapsed()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
        // The console stays for whoever reads a failure: target/images/qemu-virt/serial-*.log.
        if let Some(name) = self.serial.file_name() {
            let _ = std::fs::copy(&self.serial, image_dir().join(name));
        }
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// One `GET /healthz` through the forwarded port, tolerant of a machine that is not up.
/// QEMU's user network accepts on the guest's behalf and holds a connection the guest does
/// not answer: a short wait keeps the boot time measured to a poll, not to a timeout.
fn answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    if s.write_all(b"GET /healthz HTTP/1.1\r\nhost: kp\r\nconnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// A GET that tolerates a machine going down or coming up: None unless it answers 200.
fn try_get(port: u16, token: &str, path: &str) -> Option<Value> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut got = Vec::new();
    s.read_to_end(&mut got).ok()?;
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n")?;
    if common::status(head) != 200 {
        return None;
    }
    serde_json::from_str(body).ok()
}

/// A GET over HTTPS with curl, trusting only the key `pin` (as the console printed it):
/// None unless it answers 200 with JSON.
fn try_get_https(port: u16, pin: &str, token: &str, path: &str) -> Option<Value> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "10", "--pinnedpubkey", pin, "-H"])
        .arg(format!("authorization: Bearer {token}"))
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n')?;
    if code != "200" {
        return None;
    }
    serde_json::from_str(body).ok()
}

/// The key pin of the last HTTPS certificate the console announced.
fn console_pin(vm: &Vm) -> Option<String> {
    let console = vm.console();
    let line = console.lines().rev().find(|l| l.contains("HTTPS certificate"))?;
    Some(line.split(" pin=").nth(1)?.split_whitespace().next()?.to_string())
}

fn get(vm: &Vm, token: &str, path: &str) -> Value {
    let (code, _, body) = request(vm.http, "GET", path, &[("authorization", &format!("Bearer {token}"))], "");
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn system(vm: &Vm, token: &str) -> Value {
    get(vm, token, "/api/system")
}

/// Waits until `/api/system` satisfies `f` (across reboots).
fn wait_system(vm: &mut Vm, token: &str, timeout: Duration, f: impl Fn(&Value) -> bool) -> bool {
    wait_until(timeout, || {
        assert!(vm.child.try_wait().unwrap().is_none(), "QEMU ended:\n{}", tail(&vm.console()));
        answers(vm.http) && try_get(vm.http, token, "/api/system").is_some_and(|s| f(&s))
    })
}

/// Runs a command that must succeed.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A bundle of the image's root slot, changed by `edit` (the unpacked slot) and signed by
/// `key`, for `board`.
fn bundle(work: &Path, name: &str, version: &str, board: &str, key: &Path, edit: impl FnOnce(&Path)) -> PathBuf {
    let tree = work.join(name);
    let _ = std::fs::remove_dir_all(&tree);
    run(Command::new("unsquashfs").args(["-q", "-n", "-d"]).arg(&tree).arg(image_dir().join("rootfs.squashfs")));
    let firmware = tree.join("etc/keeppeek/firmware.toml");
    let text = std::fs::read_to_string(&firmware).unwrap();
    let text = text.replace(&format!("version = \"{}\"", version_in(&text)), &format!("version = \"{version}\""));
    std::fs::write(&firmware, text).unwrap();
    edit(&tree);
    let slot = work.join(format!("{name}.squashfs"));
    let _ = std::fs::remove_file(&slot);
    run(Command::new("mksquashfs").arg(&tree).arg(&slot).args([
        "-comp",
        "gzip",
        "-all-root",
        "-quiet",
        "-no-progress",
    ]));
    let out = work.join(format!("{name}.bundle"));
    run(Command::new("bash")
        .arg(repo().join("tools/make-bundle.sh"))
        .arg("--slot")
        .arg(&slot)
        .args(["--version", version, "--board", board, "--slot-bytes", &(48u64 << 20).to_string(), "--key"])
        .arg(key)
        .arg("--out")
        .arg(&out));
    out
}

fn version_in(firmware: &str) -> String {
    firmware.lines().find_map(|l| l.strip_prefix("version = \"")).map(|v| v.trim_end_matches('"').to_string()).unwrap()
}

/// Uploads a bundle; returns (status, JSON answer).
fn upload(vm: &Vm, token: &str, bundle: &Path, query: &str) -> (u16, Value) {
    let bytes = std::fs::read(bundle).unwrap();
    let auth = format!("Bearer {token}");
    let path = format!("/api/system/update{query}");
    let (code, _, body) = request_bytes(vm.http, "POST", &path, &[("authorization", &auth)], &bytes);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Writes the data partition's config before the first boot (as an installer would with the
/// card in a reader): the partition is copied out, written with debugfs, and copied back.
/// The data partition of `disk`, copied out to `work/data.img`; its start, in sectors.
fn data_partition(disk: &Path, work: &Path) -> (PathBuf, u64) {
    let out = Command::new("sfdisk").arg("--json").arg(disk).output().unwrap();
    let table: Value = serde_json::from_slice(&out.stdout).unwrap();
    let part = table["partitiontable"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "kp-data")
        .expect("a kp-data partition")
        .clone();
    let (start, size) = (part["start"].as_u64().unwrap(), part["size"].as_u64().unwrap());
    let data = work.join("data.img");
    run(Command::new("dd").args([
        format!("if={}", disk.display()),
        format!("of={}", data.display()),
        "bs=512".into(),
        format!("skip={start}"),
        format!("count={size}"),
        "status=none".into(),
    ]));
    (data, start)
}

fn put_config(disk: &Path, work: &Path, config: &str) {
    let (data, start) = data_partition(disk, work);
    let file = work.join("keeppeek.toml");
    std::fs::write(&file, config).unwrap();
    let dd = |args: Vec<String>| run(Command::new("dd").args(args).arg("status=none"));
    run(Command::new("debugfs").arg("-w").arg("-R").arg(format!("write {} keeppeek.toml", file.display())).arg(&data));
    dd(vec![
        format!("if={}", data.display()),
        format!("of={}", disk.display()),
        "bs=512".into(),
        format!("seek={start}"),
        "conv=notrunc".into(),
    ]);
}

/// Creates the first admin with the setup token the box printed on its console, and an
/// admin token that outlives reboots.
fn admin_token(vm: &Vm) -> String {
    let console = vm.console();
    let token = console
        .lines()
        .find_map(|l| l.split("setup_token=").nth(1))
        .map(|t| t.split_whitespace().next().unwrap().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("no setup token on the console:\n{}", tail(&console)));
    let body = format!(r#"{{"username":"root","password":"correct horse battery","setup_token":"{token}"}}"#);
    let (code, head, body) = request(vm.http, "POST", "/api/setup", &[], &body);
    assert_eq!(code, 201, "{head}\n{body}");
    let session = common::session_of(&head, &body);
    common::make_token(vm.http, &session, r#""admin""#)
}

/// The recordings of the camera `door` from a day back to a day on.
fn runs_path() -> String {
    let day = 86_400_000_000;
    let now = common::wall_us();
    format!("/api/streams/door/main/recordings?from_us={}&to_us={}", now - day, now + day)
}

fn runs(port: u16, token: &str) -> Vec<(i64, i64)> {
    let Some(v) = try_get(port, token, &runs_path()) else { return Vec::new() };
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["start_us"].as_i64().unwrap(), r["end_us"].as_i64().unwrap()))
        .collect()
}

/// A copy of the built image to boot, in `work`.
fn fresh_disk(work: &Path) -> PathBuf {
    let image = image_dir().join(format!("keeppeek-{}-qemu-virt.img", version()));
    assert!(image.exists(), "no image at {}: build it with tools/image.sh", image.display());
    let disk = work.join("disk.img");
    run(Command::new("cp").arg("--sparse=always").arg(&image).arg(&disk));
    disk
}

/// The disk the image is written to: larger than the image (about 450 MiB).
const DISK_BYTES: u64 = 2 << 30;

#[test]
fn the_image_boots_records_and_updates_a_b_with_rollback() {
    let dir = image_dir();
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let disk = fresh_disk(work);
    let mut figures = Vec::new();

    // The camera on the host; the guest reaches the host at 10.0.2.2.
    let camera = Camera::start();
    let config = format!(
        "data_dir = \"/data/keeppeek\"\nlisten = \"0.0.0.0:8080\"\nflush_interval_s = 2\nram_class = \"512 MiB\"\n\
         [retention]\nstream_max_bytes = \"96 MiB\"\ntotal_max_bytes = \"224 MiB\"\n\
         [webrtc]\nport = 0\n[camera_port]\ninterface = \"eth1\"\naddress = \"10.71.0.1/24\"\n[[cameras]]\nname = \"door\"\nusername = \"{}\"\npassword = \"{}\"\n\
         main = {{ url = \"rtsp://10.0.2.2:{}/h264\" }}\n",
        common::CAMERA_USER,
        common::CAMERA_PASSWORD,
        camera.port
    );
    put_config(&disk, work, &config);
    // The card is larger than the image: the data partition grows into the rest at first boot.
    let image_bytes = std::fs::metadata(&disk).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&disk).unwrap().set_len(DISK_BYTES).unwrap();

    // ---- first boot: slot A, healthy, recording, serving its camera port -----------------
    let tap = Tap::new("kpimgcam0");
    let mut vm = Vm::boot_with(&disk, &work.join("serial-1.log"), Some(&tap.name));
    let boot = vm.wait_healthy(Duration::from_secs(120));
    figures.push(format!("boot_to_healthy_ms {}", boot.as_millis()));
    let token = admin_token(&vm);
    let s = system(&vm, &token);
    assert_eq!((s["running_slot"].as_str(), s["version"].as_str()), (Some("a"), Some(version().as_str())), "{s}");
    assert_eq!(s["update_key"], "development");
    // It grows beside keeppeek's start.
    let grown = |s: &Value| s["data"]["bytes"].as_u64().is_some_and(|b| b > DISK_BYTES - image_bytes);
    assert!(
        wait_system(&mut vm, &token, Duration::from_secs(60), grown),
        "the data file system grew into the {} bytes the image did not cover: {}",
        DISK_BYTES - image_bytes,
        tail(&vm.console())
    );
    let data_bytes = system(&vm, &token)["data"]["bytes"].as_u64().unwrap();
    let grew = vm.console().lines().find(|l| l.contains("grew to the disk's end")).map(str::to_owned);
    let grew = grew.unwrap_or_else(|| panic!("init says the data partition grew: {}", tail(&vm.console())));
    let grow_ms = grew.split("took_ms=").nth(1).and_then(|v| v.split_whitespace().next()).unwrap();
    figures.push(format!("data_grow_ms {grow_ms}"));
    figures.push(format!("data_bytes_after_growth {data_bytes}"));
    let recorded = wait_until(Duration::from_secs(60), || runs(vm.http, &token).iter().any(|(a, b)| b - a > 4_000_000));
    assert!(recorded, "the camera on the host is recorded in the image: {:?}", get(&vm, &token, "/api/cameras"));
    let first_run = runs(vm.http, &token)[0];
    // A camera behind the second NIC (busybox udhcpc on the host's end of the tap) gets an
    // address of the pool from the box; init brought the port up before keeppeek started.
    let leased = tap.lease(work);
    assert!(leased.starts_with("10.71.0."), "{leased}");
    assert!(vm.console().contains("camera port up"), "init brought the port up: {}", tail(&vm.console()));
    let port = get(&vm, &token, "/api/system/camera-port");
    assert_eq!(port["dhcp"]["leases"][0]["ip"], leased.as_str(), "{port}");
    assert!(port["cameras"][0]["plugged_in"].as_bool().unwrap_or(false), "{port}");
    figures.push(format!("camera_port_lease {leased}"));
    let metrics = {
        let (_, _, body) = request(vm.http, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], "");
        body
    };
    let rss = metrics.lines().find_map(|l| l.strip_prefix("keeppeek_process_resident_bytes ")).unwrap().to_string();
    figures.push(format!("rss_bytes_recording_one_camera {rss}"));

    // ---- refusals: the running slot is untouched ------------------------------------------
    let dev_key = repo().join("images/keys/development.key");
    let other_key = work.join("other.key");
    run(Command::new("minisign").args(["-G", "-W", "-p"]).arg(work.join("other.pub")).arg("-s").arg(&other_key));
    let foreign = bundle(work, "foreign", "9.0.0", "qemu-virt", &other_key, |_| {});
    let board = bundle(work, "board", "9.0.0", "rpi4", &dev_key, |_| {});
    let old = bundle(work, "old", "0.0.1", "qemu-virt", &dev_key, |_| {});
    for (b, status, code) in [(&foreign, 422, "bad_signature"), (&board, 409, "wrong_board"), (&old, 409, "downgrade")]
    {
        let (got, answer) = upload(&vm, &token, b, "?reboot=1");
        assert_eq!((got, answer["code"].as_str()), (status, Some(code)), "{answer}");
    }
    let s = system(&vm, &token);
    assert_eq!((s["running_slot"].as_str(), s["next_boot"].as_str()), (Some("a"), Some("a")), "{s}");
    assert_eq!(s["last_update"]["result"], "failed");

    // ---- a good update, installed from the web face's System page in Chromium (the upload's
    // progress shown as it goes): slot B boots once, passes its check, is marked good --------
    let good = bundle(work, "good", "9.1.0", "qemu-virt", &dev_key, |_| {});
    let t = Instant::now();
    let out = Command::new("node")
        .arg(repo().join("tests/ui/image-update.mjs"))
        .arg(format!("http://127.0.0.1:{}", vm.http))
        .arg(&good)
        .output()
        .expect("node runs the browser");
    assert!(out.status.success(), "the browser's update: {}", String::from_utf8_lossy(&out.stderr));
    let answered_us = common::wall_us();
    let browser: Value = serde_json::from_slice(&out.stdout).expect("the browser's update prints JSON");
    let result = browser["result"].as_str().unwrap_or_default();
    assert!(result.starts_with("Installed 9.1.0 into slot b"), "{browser}");
    assert_eq!(browser["errors"], serde_json::json!([]), "{browser}");
    let shown: Vec<f64> = browser["progress"].as_array().unwrap().iter().filter_map(Value::as_f64).collect();
    assert!(
        shown.iter().any(|&p| p > 0.0 && p < 1.0) && shown.iter().any(|&p| p >= 1.0),
        "the progress bar rose while the bundle went up: {browser}"
    );
    figures.push(format!("update_install_ms {}", t.elapsed().as_millis()));
    figures.push(format!("bundle_bytes {}", std::fs::metadata(&good).unwrap().len()));
    let back = wait_system(&mut vm, &token, Duration::from_secs(120), |s| s["running_slot"] == "b");
    assert!(back, "slot B came up: {}", tail(&vm.console()));
    figures.push(format!("update_install_to_healthy_ms {}", t.elapsed().as_millis()));
    let marked = wait_system(&mut vm, &token, Duration::from_secs(30), |s| s["last_update"]["result"] == "good");
    let s = system(&vm, &token);
    assert!(marked, "{s}");
    assert_eq!(s["version"], "9.1.0");
    assert_eq!((s["slots"]["a"]["good"].as_bool(), s["slots"]["b"]["good"].as_bool()), (Some(true), Some(true)), "{s}");
    // The recording from before the reboot is still there, and recording goes on.
    let after = wait_until(Duration::from_secs(60), || {
        let r = runs(vm.http, &token);
        r.first() == Some(&first_run) || r.first().is_some_and(|f| f.0 == first_run.0 && f.1 >= first_run.1)
    });
    assert!(after, "the first run survived the reboot: {:?} vs {:?}", runs(vm.http, &token), first_run);
    // The reboot stopped keeppeek cleanly: it said so, and the first run was recorded up to
    // the reboot (a crash would lose up to a flush interval, 2 s here).
    assert!(vm.console().contains("keeppeek::daemon: stopped"), "{}", tail(&vm.console()));
    let end = runs(vm.http, &token)[0].1;
    assert!(end > answered_us - 1_500_000, "recorded to {end}, the reboot was asked at {answered_us}");
    let recording =
        wait_until(Duration::from_secs(60), || runs(vm.http, &token).last().is_some_and(|r| r.0 > first_run.1));
    assert!(recording, "recording goes on after the reboot: {:?}", runs(vm.http, &token));

    // ---- a broken update (never healthy): it boots once, then slot B again -----------------
    let broken = bundle(work, "broken", "9.2.0", "qemu-virt", &dev_key, |tree| {
        // Init works, but keeppeek never answers: a hang, not a crash.
        let bin = tree.join("usr/bin");
        std::fs::rename(bin.join("keeppeek"), bin.join("keeppeek.real")).unwrap();
        let wrapper = "#!/bin/sh\ncase $1 in init) exec /usr/bin/keeppeek.real \"$@\" ;; esac\nexec sleep 100000\n";
        std::fs::write(bin.join("keeppeek"), wrapper).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bin.join("keeppeek"), std::fs::Permissions::from_mode(0o755)).unwrap();
    });
    let t = Instant::now();
    let (code, answer) = upload(&vm, &token, &broken, "?reboot=1");
    assert_eq!((code, answer["slot"].as_str()), (200, Some("a")), "{answer}");
    let rolled =
        wait_system(&mut vm, &token, Duration::from_secs(240), |s| s["last_update"]["result"] == "rolled_back");
    assert!(rolled, "the broken update rolled back: {}", tail(&vm.console()));
    figures.push(format!("rollback_ms {}", t.elapsed().as_millis()));
    let s = system(&vm, &token);
    assert_eq!((s["running_slot"].as_str(), s["version"].as_str()), (Some("b"), Some("9.1.0")), "{s}");
    assert!(vm.console().contains("did not pass its health check"), "init said why");
    assert_eq!((s["slots"]["a"]["version"].as_str(), s["slots"]["a"]["good"].as_bool()), (Some("9.2.0"), Some(false)));

    // ---- power cut during the slot write: the old slot boots ------------------------------
    let next = bundle(work, "next", "9.3.0", "qemu-virt", &dev_key, |_| {});
    let bytes = std::fs::read(&next).unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", vm.http)).unwrap();
    let head = format!(
        "POST /api/system/update HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\n\r\n",
        bytes.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // Half the slot, then the power goes.
    for chunk in bytes[..bytes.len() / 2].chunks(64 << 10) {
        s.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    // The install is under way: slot A is marked unbootable and its version forgotten.
    let writing = wait_until(Duration::from_secs(20), || {
        try_get(vm.http, &token, "/api/system").is_some_and(|s| s["slots"]["a"]["version"].is_null())
    });
    assert!(writing, "the install began writing slot A");
    vm.kill();
    drop(s);
    let mut vm = Vm::boot(&disk, &work.join("serial-2.log"));
    let boot = vm.wait_healthy(Duration::from_secs(120));
    figures.push(format!("boot_after_power_cut_ms {}", boot.as_millis()));
    let s = system(&vm, &token);
    assert_eq!((s["running_slot"].as_str(), s["version"].as_str()), (Some("b"), Some("9.1.0")), "{s}");
    assert_eq!((s["slots"]["a"]["good"].as_bool(), s["next_boot"].as_str()), (Some(false), Some("b")), "{s}");
    assert!(runs(vm.http, &token).first().is_some_and(|f| f.0 == first_run.0), "recordings survived the power cut");

    // ---- factory reset, keeping the recordings: the config is the board's again -----------
    let auth = format!("Bearer {token}");
    let (code, _, body) = request(
        vm.http,
        "POST",
        "/api/system/factory-reset",
        &[("authorization", &auth)],
        r#"{"keep":["recordings"]}"#,
    );
    assert_eq!(code, 202, "{body}");
    // The board's config serves HTTPS: the box made its certificate and printed its
    // fingerprint and key pin on the console; curl trusting that pin alone gets answers.
    let reset = wait_until(Duration::from_secs(120), || {
        console_pin(&vm).is_some_and(|pin| {
            try_get_https(vm.https, &pin, &token, "/api/cameras")
                .is_some_and(|c| c.as_array().is_some_and(|a| a.is_empty()))
        })
    });
    assert!(reset, "after the reset the board's config (no camera, HTTPS) runs: {}", tail(&vm.console()));
    assert!(vm.console().contains("factory reset"), "init did the reset");
    let pin = console_pin(&vm).unwrap();
    let cert = try_get_https(vm.https, &pin, &token, "/api/system/https").unwrap();
    assert_eq!((cert["source"].as_str(), cert["pin"].as_str()), (Some("own"), Some(pin.as_str())), "{cert}");
    let names: Vec<&str> = cert["names"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert!(
        names.contains(&"keeppeek") && names.contains(&"keeppeek.local") && names.contains(&"10.0.2.15"),
        "{names:?}"
    );
    assert!(vm.console().contains(&format!("fingerprint={}", cert["fingerprint"].as_str().unwrap())));
    // Plain HTTP answers init's health check and sends the rest on to HTTPS.
    assert!(answers(vm.http));
    let (code, head, _) = request(vm.http, "GET", "/api/cameras", &[], "");
    assert_eq!(code, 307, "{head}");
    assert!(head.contains(&format!("https://127.0.0.1:{}/api/cameras", 8443)), "{head}");
    let kept = try_get_https(vm.https, &pin, &token, &runs_path()).unwrap();
    assert_eq!(kept["runs"][0]["start_us"].as_i64(), Some(first_run.0), "the recordings were kept");

    // Every boot after the first found the partition grown: nothing more to do, no complaint.
    assert_eq!(vm.console().matches("grew to the disk's end").count(), 0, "{}", tail(&vm.console()));
    assert!(!vm.console().contains("was not grown"), "{}", tail(&vm.console()));
    let data_now = try_get_https(vm.https, &pin, &token, "/api/system").unwrap()["data"]["bytes"].as_u64().unwrap();
    assert_eq!(data_now, data_bytes, "the file system keeps its size across reboots");
    // The partition table, read on the host: both copies whole, the data partition reaching
    // the last MiB before the backup table.
    drop(vm);
    let verify = Command::new("sfdisk").arg("--verify").arg(&disk).output().unwrap();
    let said = String::from_utf8_lossy(&verify.stdout).into_owned() + &String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && said.contains("No errors detected"), "{said}");
    let table: Value =
        serde_json::from_slice(&Command::new("sfdisk").arg("--json").arg(&disk).output().unwrap().stdout).unwrap();
    let data =
        table["partitiontable"]["partitions"].as_array().unwrap().iter().find(|p| p["name"] == "kp-data").unwrap();
    let end_bytes = (data["start"].as_u64().unwrap() + data["size"].as_u64().unwrap()) * 512;
    assert_eq!(end_bytes, DISK_BYTES - (1 << 20), "{table}");

    let report = figures.join("\n") + "\n";
    std::fs::write(dir.join("figures.txt"), &report).unwrap();
    println!("{report}");
}

/// A tap device on the host: the wire to the guest's camera port. Removed when dropped.
struct Tap {
    name: String,
}

impl Tap {
    fn new(name: &str) -> Tap {
        // What a killed run may have left.
        let _ = Command::new("ip").args(["link", "del", name]).status();
        run(Command::new("ip").args(["tuntap", "add", "dev", name, "mode", "tap"]));
        run(Command::new("ip").args(["link", "set", name, "up"]));
        Tap { name: name.to_string() }
    }

    /// Asks for an address on the tap as a camera would (busybox udhcpc, which leaves the
    /// host's interface as it is: its script only writes the address down); the address.
    fn lease(&self, work: &Path) -> String {
        use std::os::unix::fs::PermissionsExt;
        let (script, got) = (work.join("udhcpc.sh"), work.join("leased"));
        std::fs::write(&script, format!("#!/bin/sh\n[ \"$1\" = bound ] && echo \"$ip\" > {}\nexit 0\n", got.display()))
            .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new("busybox")
            .args(["udhcpc", "-f", "-q", "-n", "-t", "20", "-T", "2", "-i", &self.name, "-s"])
            .arg(&script)
            .output()
            .expect("busybox udhcpc");
        let leased = std::fs::read_to_string(&got).unwrap_or_default().trim().to_string();
        assert!(out.status.success() && !leased.is_empty(), "no lease on the camera port: {out:?}");
        leased
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.name]).status();
    }
}

/// The image's own binary (aarch64, musl, release) under qemu-user: 1,000 logins with wrong
/// and right passwords from 100 addresses never grow its memory past the budget's line for
/// accounts (the hashing buffers are allocated once; musl's allocator has no arenas to keep).
#[test]
fn logins_on_the_image_binary_stay_within_the_accounts_budget() {
    let binary = repo().join("target/aarch64-unknown-linux-musl/image/keeppeek");
    assert!(binary.exists(), "{} is missing: run tools/image.sh first", binary.display());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    common::write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n"
        ),
    );
    let qemu = common::emulated("qemu-aarch64-static".as_ref(), &binary);
    let d = common::Daemon::start_program(qemu, dir.path(), &[]);
    d.wait_log("web face listening", 1, Duration::from_secs(60));
    common::setup_admin(port);
    // Two logins at once first: both hashing buffers exist (they are kept) before the baseline.
    let admin = r#"{"username":"root","password":"correct horse battery"}"#;
    let both: Vec<_> =
        (0..2).map(|_| std::thread::spawn(move || request(port, "POST", "/api/login", &[], admin).0)).collect();
    for b in both {
        assert_eq!(b.join().unwrap(), 200);
    }
    let budget_kib = common::accounts_budget_kib(dir.path());
    let start_kib = common::rss_kib(d.pid());
    let peak = common::RssPeak::watch(d.pid());
    let started = Instant::now();
    let (ok, wrong, limited) = common::login_flood(port);
    let took = started.elapsed();
    let grew = peak.stop().saturating_sub(start_kib);
    let line = format!(
        "aarch64-musl under qemu-user: 1,000 logins ({ok} right, {wrong} wrong, {limited} limited) in {:.1} s; RSS {start_kib} KiB, grew {grew} KiB; accounts line {budget_kib} KiB",
        took.as_secs_f64()
    );
    eprintln!("{line}");
    assert_eq!((ok, ok + wrong + limited), (200, 1000));
    assert!(grew <= budget_kib, "{line}");
}

/// Where the power cuts fall: xorshift64*, its seed printed (`KEEPPEEK_POWER_CUT_SEED`
/// replays a run).
struct Cuts(u64);

impl Cuts {
    fn new() -> Cuts {
        let seed = std::env::var("KEEPPEEK_POWER_CUT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        eprintln!("power cuts: seed {seed}");
        Cuts(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A wait from `from_ms` to `to_ms`.
    fn wait(&mut self, from_ms: u64, to_ms: u64) -> Duration {
        Duration::from_millis(from_ms + self.next() % (to_ms - from_ms + 1))
    }
}

/// The median of `v`, 0 when empty.
fn median(v: &[i64]) -> i64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// (min, p50, max) of `v`.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

#[test]
fn power_cuts_lose_at_most_a_flush_interval_and_never_an_acknowledged_events_footage() {
    // 10 cuts of each kind in the test command; `KEEPPEEK_POWER_CUTS=100` for the long run.
    let n: usize = std::env::var("KEEPPEEK_POWER_CUTS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let dir = image_dir();
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let disk = fresh_disk(work);
    let camera = Camera::start();
    // The default flush interval; a 2 MiB cap, so retention deletes all along (about 50 s of
    // the 332 kbit/s clip); a 5 s pre-roll, held against retention for its event.
    let flush_s = 10;
    let config = format!(
        "data_dir = \"/data/keeppeek\"\nlisten = \"0.0.0.0:8080\"\nflush_interval_s = {flush_s}\nram_class = \"512 MiB\"\n\
         [retention]\nstream_max_bytes = \"2 MiB\"\ntotal_max_bytes = \"224 MiB\"\n\
         [webrtc]\nport = 0\n[[cameras]]\nname = \"door\"\nusername = \"{}\"\npassword = \"{}\"\npre_roll_s = 5\n\
         main = {{ url = \"rtsp://10.0.2.2:{}/h264\" }}\n",
        common::CAMERA_USER,
        common::CAMERA_PASSWORD,
        camera.port
    );
    put_config(&disk, work, &config);
    std::fs::OpenOptions::new().write(true).open(&disk).unwrap().set_len(DISK_BYTES).unwrap();
    let mut vm = Vm::boot(&disk, &work.join("serial-cuts.log"));
    vm.wait_healthy(Duration::from_secs(120));
    let token = admin_token(&vm);
    let auth = format!("Bearer {token}");
    let mut cuts = Cuts::new();
    let (mut lost_s, mut event_keyframe_s, mut boots_s) = (Vec::new(), Vec::new(), Vec::new());
    let mut guest_ahead_us: Vec<i64> = Vec::new();
    for cut in 0..2 * n {
        let with_event = cut < n;
        // The camera again, then at least the pre-roll.
        let connected = wait_until(Duration::from_secs(60), || {
            try_get(vm.http, &token, "/api/cameras").is_some_and(|c| c[0]["streams"][0]["connected"] == true)
        });
        assert!(connected, "cut {cut}: the camera again after the boot: {}", tail(&vm.console()));
        // Recording since about then, by the guest's clock.
        let connected_us = common::wall_us() + median(&guest_ahead_us);
        // With an event: at least its pre-roll. Without: anywhere in the first flush
        // intervals, so cuts fall before, at and between the flushes and retention passes.
        std::thread::sleep(if with_event { cuts.wait(5_500, 8_000) } else { cuts.wait(2_000, 25_000) });
        let event = with_event.then(|| {
            // At the box's own time (the guest's clock is not the host's: it starts from
            // QEMU's RTC, whole seconds, and runs on its own).
            let envelope = format!(r#"{{"camera":"door","labels":["cut"],"text":"cut {cut}"}}"#);
            let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
            let posted_us = common::wall_us();
            let (code, _, body) = request(vm.http, "POST", "/api/events", &headers, &envelope);
            assert_eq!(code, 201, "cut {cut}: {body}");
            let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_u64().unwrap();
            let at = get(&vm, &token, &format!("/api/events/{id}"))["revisions"][0]["time_us"].as_i64().unwrap();
            guest_ahead_us.push(at - posted_us);
            std::thread::sleep(cuts.wait(1_000, 3_000));
            (id, at)
        });
        // The power goes: QEMU dies, and the guest's page cache with it. When, by the
        // guest's clock: the host's, moved by how far ahead the guest was at the events.
        let cut_us = common::wall_us() + median(&guest_ahead_us);
        vm.kill();
        vm = Vm::boot(&disk, &work.join("serial-cuts.log"));
        boots_s.push(vm.wait_healthy(Duration::from_secs(120)).as_secs_f64());
        match event {
            Some((id, at)) => {
                // The event, its keyframe at or before it, and the footage from its pre-roll
                // up to it, frame after frame.
                let f = get(&vm, &token, &format!("/api/events/{id}"))["footage"].clone();
                let near: Vec<_> = runs(vm.http, &token).into_iter().filter(|r| r.1 >= at - 30_000_000).collect();
                assert_eq!(f["state"], "on_disk", "cut {cut}: {f}; the event at {at}, runs kept near it: {near:?}");
                let keyframe_us = f["keyframe_us"].as_i64().unwrap();
                assert!(
                    keyframe_us <= at && at - keyframe_us <= 2_000_000,
                    "cut {cut}: keyframe {keyframe_us}, event {at}"
                );
                event_keyframe_s.push((at - keyframe_us) as f64 / 1e6);
                let path = format!("/api/streams/door/main/export.mp4?from_us={}&to_us={at}", at - 5_000_000);
                let (code, mp4) = common::get_bytes(vm.http, &token, &path);
                assert_eq!(code, 200, "cut {cut}: the pre-roll up to the event exports");
                let file = work.join("cut.mp4");
                std::fs::write(&file, mp4).unwrap();
                let numbers = common::frame_numbers(&file, 200);
                let steps = numbers.windows(2).filter(|w| w[1] != w[0] + 1 && w[1] != 0).count();
                assert!(
                    numbers.len() >= 4 * 15 && steps == 0,
                    "cut {cut}: {} frames, {steps} out of order: {numbers:?}",
                    numbers.len()
                );
            }
            None => {
                // What was kept of the footage before the cut: lost is what followed it, of
                // what this boot recorded (none of the time the box was down).
                let kept =
                    runs(vm.http, &token).iter().map(|&(_, end)| end).filter(|&end| end <= cut_us + 1_000_000).max();
                let kept = kept.expect("footage from before the cut").max(connected_us);
                let lost = (cut_us - kept).max(0) as f64 / 1e6;
                lost_s.push(lost);
                assert!(
                    lost <= flush_s as f64 + 2.0,
                    "cut {cut}: {lost:.1} s lost, more than the {flush_s} s flush interval"
                );
            }
        }
    }
    drop(vm);

    // The catalog and the files, read on the host by `keeppeek check`.
    let check = work.join("check");
    std::fs::create_dir_all(&check).unwrap();
    let (data, _) = data_partition(&disk, work);
    run(Command::new("debugfs").arg("-R").arg(format!("rdump /keeppeek {}", check.display())).arg(&data));
    std::fs::rename(check.join("keeppeek"), check.join("data")).unwrap();
    let config =
        common::write_config(&check, "[retention]\nstream_max_bytes = \"2 MiB\"\ntotal_max_bytes = \"224 MiB\"\n");
    let v: Value = serde_json::from_slice(&common::succeed(common::keeppeek().arg("check").arg(&config))).unwrap();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");

    let (l, k, b) = (spread(&lost_s), spread(&event_keyframe_s), spread(&boots_s));
    let report = format!(
        "power cuts: {n} with an event, {n} without, flush interval {flush_s} s\n\
         video lost per cut without an event, s: min {:.1} p50 {:.1} max {:.1}\n\
         event to its keyframe, s: min {:.2} p50 {:.2} max {:.2}\n\
         boot to healthy after a cut, s: min {:.1} p50 {:.1} max {:.1}\n\
         the guest's clock ahead of the host's, ms: p50 {}\n\
         check: {} recordings, {} fragments, no problem\n",
        l.0,
        l.1,
        l.2,
        k.0,
        k.1,
        k.2,
        b.0,
        b.1,
        b.2,
        median(&guest_ahead_us) / 1000,
        v["recordings"],
        v["fragments"]
    );
    std::fs::write(dir.join("power-cuts.txt"), &report).unwrap();
    println!("{report}");
}

//! The shared harness: starts the real `keeppeek` binary and real peers (the gst-rtsp-server
//! camera, ffprobe), and fails loudly when a peer cannot start.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture clips, generated once by `tools/make-fixtures.sh` and cached under `target/`.
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = repo().join("target/fixtures");
        let out = Command::new("bash")
            .arg(repo().join("tools/make-fixtures.sh"))
            .arg(&dir)
            .output()
            .expect("running tools/make-fixtures.sh");
        assert!(out.status.success(), "make-fixtures failed: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
}

/// A port that was free a moment ago, and never handed to another test of this process: the
/// kernel may give the same port to two binds in a row once the first is let go, and two
/// tests' servers on one port fail each other.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub fn wall_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64
}

/// Polls `f` until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

pub const CAMERA_USER: &str = "kp";
pub const CAMERA_PASSWORD: &str = "s3cret";

/// The simulated IP camera (`tools/rtsp-camera.py`), killed on drop.
pub struct Camera {
    child: Child,
    pub port: u16,
}

impl Camera {
    pub fn start() -> Camera {
        Camera::start_on(free_port())
    }

    pub fn start_on(port: u16) -> Camera {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let child = Command::new("/usr/bin/python3")
            .arg(repo().join("tools/rtsp-camera.py"))
            .args(["--port", &port.to_string(), "--fixtures"])
            .arg(fixtures())
            .args(["--user", CAMERA_USER, "--password", CAMERA_PASSWORD, "--ready-file"])
            .arg(&ready)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the RTSP camera: is /usr/bin/python3 with gi installed?");
        let mut cam = Camera { child, port };
        let up = wait_until(Duration::from_secs(20), || ready.exists() || cam.child.try_wait().unwrap().is_some());
        assert!(up && ready.exists(), "the RTSP camera on port {port} did not become ready");
        cam
    }

    pub fn url(&self, path: &str) -> String {
        format!("rtsp://127.0.0.1:{}{path}", self.port)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Camera {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An ONVIF camera on a network namespace of its own (`tools/onvif-camera.sh`, as root):
/// oxvif's mock device answering WS-Discovery and ONVIF at 10.213.N.2:8000, and the RTSP
/// test camera at the stream address it gives (rtsp://10.213.N.2:554/mock/stream), both
/// with [`CAMERA_USER`] and [`CAMERA_PASSWORD`]. Stopped, and its network removed, on drop.
pub struct OnvifCamera {
    child: Child,
    pub address: String,
    /// Where the script writes: `ready`, and for a camera on a camera port `ready.link`,
    /// `ready.pid` (its DHCP client) and `ready.leases`.
    pub ready: PathBuf,
    _dir: tempfile::TempDir,
}

impl OnvifCamera {
    /// Camera `n` at 10.213.`n`.2, its services listening.
    pub fn start(n: u8) -> OnvifCamera {
        let mut cam = OnvifCamera::spawn(n, false);
        cam.wait_ready();
        cam
    }

    /// Camera `n` plugged into a camera port (kpo`n`-h, 10.213.`n`.1/24 the box's address
    /// there), once the port is up: it asks for its address (busybox udhcpc) until the box
    /// serves it; [`OnvifCamera::wait_ready`] waits for its lease and services.
    pub fn plugged(n: u8) -> OnvifCamera {
        let mut cam = OnvifCamera::spawn(n, true);
        let link = cam.ready.with_extension("link");
        let up = wait_until(Duration::from_secs(20), || link.exists() || cam.child.try_wait().unwrap().is_some());
        assert!(up && link.exists(), "the camera port for ONVIF camera {n} did not come up (as root?)");
        cam
    }

    fn spawn(n: u8, dhcp: bool) -> OnvifCamera {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let child = Command::new(repo().join("tools/onvif-camera.sh"))
            .args([&n.to_string(), CAMERA_USER, CAMERA_PASSWORD])
            .arg(fixtures())
            .arg(&ready)
            .env("ONVIF_CAMERA_DHCP", if dhcp { "1" } else { "0" })
            .stdout(Stdio::null())
            .spawn()
            .expect("starting tools/onvif-camera.sh");
        OnvifCamera { child, address: format!("10.213.{n}.2"), ready, _dir: dir }
    }

    /// Waits until the camera's services listen; its address is the one it was given.
    pub fn wait_ready(&mut self) {
        let ready = self.ready.clone();
        let up = wait_until(Duration::from_secs(60), || ready.exists() || self.child.try_wait().unwrap().is_some());
        assert!(up && ready.exists(), "the ONVIF camera did not become ready (as root? its peer built?)");
        if let Some(bound) = self.leases().first() {
            self.address = bound.1.clone();
        }
    }

    /// Its DHCP client's lease events: ("bound" or "renew", address).
    pub fn leases(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.ready.with_extension("leases"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())))
            .collect()
    }

    /// Asks its DHCP client to renew (SIGUSR1).
    pub fn renew(&self) {
        let pid: i32 = std::fs::read_to_string(self.ready.with_extension("pid")).unwrap().trim().parse().unwrap();
        unsafe { libc::kill(pid, libc::SIGUSR1) };
    }
}

impl Drop for OnvifCamera {
    fn drop(&mut self) {
        // SIGTERM: the script stops its peers and removes its network.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// A running `keeppeek run`, with its config and log in a temporary directory.
pub struct Daemon {
    child: Option<Child>,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
}

/// Writes `dir/keeppeek.toml` with `data_dir = "data"` and `body`; live view is off unless
/// `body` has a `[webrtc]` table (tests run side by side: no two may take its port).
pub fn write_config(dir: &Path, body: &str) -> PathBuf {
    let config = dir.join("keeppeek.toml");
    let webrtc = if body.contains("[webrtc]") { "" } else { "\n[webrtc]\nport = 0\n" };
    std::fs::write(&config, format!("data_dir = \"data\"\n{body}{webrtc}")).unwrap();
    config
}

/// The binary under test: this build's, or the one `KEEPPEEK_BIN` names (to run the suite
/// against another build, say the one before a fix, and see which tests it fails), under
/// the emulator `KEEPPEEK_RUNNER` names if there is one (an aarch64 build under qemu-user).
pub fn keeppeek() -> Command {
    let other = std::env::var_os("KEEPPEEK_BIN").filter(|b| !b.is_empty());
    let bin: PathBuf = other.unwrap_or_else(|| env!("CARGO_BIN_EXE_keeppeek").into()).into();
    // Another architecture's build runs under its emulator (qemu-user), named here.
    match std::env::var_os("KEEPPEEK_RUNNER").filter(|r| !r.is_empty()) {
        Some(runner) => emulated(runner.as_ref(), &bin),
        None => Command::new(bin),
    }
}

/// Where qemu-user places the program's memory in its own address space: the guest's whole
/// address space is kept at [`GUEST_BASE`] for [`GUEST_SPAN_BYTES`], so what is resident
/// there is the program's and the rest is the emulator's (its translation cache, its own
/// heap), which a board does not have.
const GUEST_BASE: u64 = 0x10_0000_0000;
const GUEST_SPAN_BYTES: u64 = 0x10_0000_0000;

/// `binary` under qemu-user (`emulator`), its memory at [`GUEST_BASE`].
pub fn emulated(emulator: &std::ffi::OsStr, binary: &Path) -> Command {
    let mut c = Command::new(emulator);
    c.arg(binary)
        .env("QEMU_GUEST_BASE", format!("{GUEST_BASE:#x}"))
        .env("QEMU_RESERVED_VA", format!("{GUEST_SPAN_BYTES:#x}"));
    c
}

/// Runs a command that must succeed; returns its stdout.
pub fn succeed(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

impl Daemon {
    /// Starts `keeppeek run` on the config in `dir` (see [`write_config`]).
    pub fn start(dir: &Path) -> Daemon {
        Daemon::start_with(dir, &[])
    }

    /// [`Daemon::start`] with more arguments to `keeppeek run`.
    pub fn start_with(dir: &Path, args: &[&str]) -> Daemon {
        Daemon::start_program(keeppeek(), dir, args)
    }

    /// [`Daemon::start_with`] for another build of keeppeek (`program` runs it).
    pub fn start_program(mut program: Command, dir: &Path, args: &[&str]) -> Daemon {
        let config = dir.join("keeppeek.toml");
        let log = dir.join("keeppeek.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = program
            .args(["run", "--config"])
            .arg(&config)
            .args(args)
            .env("KEEPPEEK_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("starting keeppeek");
        Daemon { child: Some(child), dir: dir.to_path_buf(), config, log }
    }

    /// A handle on a data directory whose daemon has stopped: for the catalog commands.
    pub fn start_stopped(dir: &Path) -> Daemon {
        Daemon { child: None, dir: dir.to_path_buf(), config: dir.join("keeppeek.toml"), log: dir.join("keeppeek.log") }
    }

    pub fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Waits until the log contains `needle` at least `count` times.
    pub fn wait_log(&self, needle: &str, count: usize, timeout: Duration) {
        let ok = wait_until(timeout, || self.log_text().matches(needle).count() >= count);
        assert!(ok, "no {count}× {needle:?} in the log within {timeout:?}:\n{}", self.log_text());
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// SIGTERM, and the exit must be clean and quick.
    pub fn stop(&mut self) {
        let mut child = self.child.take().expect("running");
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        let ok = wait_until(Duration::from_secs(10), || child.try_wait().unwrap().is_some());
        assert!(ok, "keeppeek did not stop within 10 s of SIGTERM");
        let status = child.wait().unwrap();
        assert!(status.success(), "keeppeek exited with {status}:\n{}", self.log_text());
        eprintln!("keeppeek stopped in {:?}", start.elapsed());
    }

    /// A power cut, as far as the process can tell.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Runs `keeppeek check`: recovery, then every fragment against its file.
    pub fn check(&self) -> Value {
        serde_json::from_slice(&succeed(keeppeek().arg("check").arg(&self.config))).unwrap()
    }

    /// Every recording with its fragments, from `keeppeek recordings --json`.
    pub fn recordings(&self) -> Vec<Value> {
        let out = succeed(keeppeek().args(["recordings", "--json"]).arg(&self.config));
        serde_json::from_slice::<Value>(&out).unwrap().as_array().unwrap().clone()
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One packet as ffprobe sees it.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    pub pts_s: f64,
    pub duration_s: f64,
    pub key: bool,
}

/// ffprobe's view of a file's video packets; any message from ffprobe fails the test.
pub fn ffprobe_packets(path: &Path) -> Vec<Packet> {
    ffprobe_stream_packets(path, "v:0")
}

/// ffprobe's view of the packets of one stream (`v:0`, `a:0`).
pub fn ffprobe_stream_packets(path: &Path, stream: &str) -> Vec<Packet> {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            stream,
            "-show_entries",
            "packet=pts_time,duration_time,flags",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("running ffprobe: is ffmpeg installed?");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "ffprobe {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Packet { pts_s: f[0].parse().unwrap(), duration_s: f[1].parse().unwrap_or(0.0), key: f[2].starts_with('K') }
        })
        .collect()
}

/// Decodes the whole file with ffmpeg; any decoder message fails the test.
pub fn assert_decodes(path: &Path) {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .expect("running ffmpeg");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "ffmpeg decode {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks one recorded file against its catalog row: plays in ffprobe with zero errors,
/// starts on a keyframe, timestamps increase, and frame count and duration agree with the
/// catalog within one frame.
pub fn assert_recording_matches_file(data: &Path, rec: &Value) {
    let path = data.join(rec["path"].as_str().unwrap());
    let packets = ffprobe_packets(&path);
    assert!(!packets.is_empty(), "{} has no packets", path.display());
    assert!(packets[0].key, "{} does not start on a keyframe", path.display());
    for w in packets.windows(2) {
        assert!(w[1].pts_s > w[0].pts_s, "{}: timestamps do not increase: {:?}", path.display(), w);
    }
    let frames = rec["frames"].as_u64().unwrap() as i64;
    assert!(
        (packets.len() as i64 - frames).abs() <= 1,
        "{}: {} packets, catalog {frames}",
        path.display(),
        packets.len()
    );
    let last = packets.last().unwrap();
    let file_s = last.pts_s + last.duration_s - packets[0].pts_s;
    let catalog_s = rec["media_duration_90k"].as_u64().unwrap() as f64 / 90_000.0;
    assert!(
        (file_s - catalog_s).abs() <= 1.0 / 15.0 + 1e-3,
        "{}: {file_s} s in the file, {catalog_s} s in the catalog",
        path.display()
    );
    let wall_s = (rec["wall_end_us"].as_i64().unwrap() - rec["wall_start_us"].as_i64().unwrap()) as f64 / 1e6;
    assert!(
        (wall_s - catalog_s).abs() <= 0.05 + catalog_s * 0.002,
        "{}: wall {wall_s} s vs media {catalog_s} s",
        path.display()
    );
}

/// Checks a recording's audio track: it plays, its timestamps increase, and it covers the
/// video's duration within a quarter second (audio starts a little after the first video
/// frame and ends with the last fragment).
pub fn assert_audio_follows_video(data: &Path, rec: &Value) {
    let path = data.join(rec["path"].as_str().unwrap());
    assert_eq!(rec["has_audio"], true, "{}", path.display());
    let audio = ffprobe_stream_packets(&path, "a:0");
    assert!(!audio.is_empty(), "{} has no audio packets", path.display());
    for w in audio.windows(2) {
        assert!(w[1].pts_s > w[0].pts_s, "{}: audio timestamps do not increase: {:?}", path.display(), w);
    }
    let video = ffprobe_packets(&path);
    let (a0, v0) = (audio[0].pts_s, video[0].pts_s);
    assert!((a0 - v0).abs() < 0.25, "{}: audio starts at {a0} s, video at {v0} s", path.display());
    let a_end = audio.last().map(|p| p.pts_s + p.duration_s).unwrap();
    let v_end = video.last().map(|p| p.pts_s + p.duration_s).unwrap();
    assert!((a_end - v_end).abs() < 0.25, "{}: audio ends at {a_end} s, video at {v_end} s", path.display());
}

/// Recordings of one stream (`camera/kind`).
pub fn of_stream<'a>(recs: &'a [Value], stream: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["stream"] == stream).collect()
}

/// Total recorded seconds of a set of recordings.
pub fn seconds(recs: &[&Value]) -> f64 {
    recs.iter().map(|r| r["media_duration_90k"].as_u64().unwrap() as f64 / 90_000.0).sum()
}

/// Sum of the sizes of the files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let m = e.metadata().unwrap();
            if m.is_dir() { dir_bytes(&e.path()) } else { m.len() }
        })
        .sum()
}

/// A TCP server that accepts connections and never answers: a hung camera.
pub fn silent_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
            if held.len() > 64 {
                held.remove(0);
            }
        }
    });
    port
}

/// Appends `bytes` of filler to `path`, stopping quietly at a full disk.
pub fn fill(path: &Path, bytes: usize) {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    let chunk = vec![0x55u8; 64 << 10];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        if f.write_all(&chunk[..n]).is_err() {
            break;
        }
        left -= n;
    }
    let _ = f.sync_all();
}

/// How a scripted fake camera misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeCamera {
    /// Answers DESCRIBE, then never answers SETUP.
    HangsOnSetup,
    /// Answers DESCRIBE, SETUP and PLAY, then sends no media at all.
    SilentAfterPlay,
}

/// A hand-scripted RTSP server on a free port that misbehaves as `mode` says; returns the
/// port. Real servers do not misbehave on request, so this small one does.
pub fn fake_camera(mode: FakeCamera) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in l.incoming().flatten() {
            std::thread::spawn(move || serve_fake(stream, port, mode));
        }
    });
    port
}

fn serve_fake(mut s: std::net::TcpStream, port: u16, mode: FakeCamera) {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
    let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=fake\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\n\
               a=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1\r\na=control:track1\r\n";
    loop {
        // Read one request head.
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push(line);
        }
        let method = head.first().and_then(|l| l.split_whitespace().next()).unwrap_or("").to_string();
        let cseq = head.iter().find_map(|l| l.strip_prefix("CSeq:").map(|v| v.trim().to_string())).unwrap_or_default();
        let reply = match (method.as_str(), mode) {
            ("DESCRIBE", _) => format!(
                "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nContent-Base: rtsp://127.0.0.1:{port}/fake/\r\n\
                 Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
                sdp.len()
            ),
            ("SETUP", FakeCamera::HangsOnSetup) => {
                std::thread::sleep(Duration::from_secs(3600));
                return;
            }
            ("SETUP", _) => format!(
                "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\
                 Session: 4242;timeout=60\r\n\r\n"
            ),
            ("PLAY", _) => format!("RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nSession: 4242\r\n\r\n"),
            _ => format!("RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nSession: 4242\r\n\r\n"),
        };
        if s.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

// ---- HTTP over raw sockets ----

/// Starts KeepPeek with no camera and its web face on a free port.
pub fn web_daemon() -> (tempfile::TempDir, Daemon, u16) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n"
        ),
    );
    let d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    (dir, d, port)
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    s
}

/// Reads one response head (and a short body) from `s`.
pub fn read_response(s: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 16 << 10];
    let mut got = Vec::new();
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&got);
        if let Some(head_end) = text.find("\r\n\r\n") {
            let len = text[..head_end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if got.len() >= head_end + 4 + len {
                break;
            }
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Sends `request` on a new connection; returns the response.
pub fn exchange(port: u16, request: &[u8]) -> String {
    let mut s = connect(port);
    s.write_all(request).unwrap();
    read_response(&mut s)
}

pub fn status(response: &str) -> u16 {
    response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// A normal client: a health check that must succeed.
pub fn healthy(port: u16) {
    let r = exchange(port, b"GET /healthz HTTP/1.1\r\nhost: kp\r\n\r\n");
    assert_eq!(status(&r), 200, "{r}");
}

/// A refusal counter from `/metrics`, read with a `metrics` token.
pub fn metric(port: u16, token: &str, reason: &str) -> u64 {
    let r = exchange(
        port,
        format!("GET /metrics HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    );
    let needle = format!("keeppeek_http_refused_total{{reason=\"{reason}\"");
    r.lines()
        .find(|l| l.starts_with(&needle))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{r}"))
}

/// One request on a new connection: (status, response head, body).
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    request_bytes(port, method, path, headers, body.as_bytes())
}

/// [`request`] with a binary body.
pub fn request_bytes(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    send_request(connect(port), port, method, path, headers, body)
}

/// A GET with a bearer token whose body is binary: (status, body).
pub fn get_bytes(port: u16, token: &str, path: &str) -> (u16, Vec<u8>) {
    let mut s = connect(port);
    let req = format!("GET {path} HTTP/1.1\r\nhost: kp\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n");
    std::io::Write::write_all(&mut s, req.as_bytes()).unwrap();
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    (status(&String::from_utf8_lossy(&all[..end])), all[end..].to_vec())
}

/// [`request`] from another loopback address (`127.0.0.0/8` is all this machine's).
pub fn request_from(
    src: std::net::Ipv4Addr,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    send_request(connect_from(src, port), port, method, path, headers, body.as_bytes())
}

fn send_request(
    mut s: TcpStream,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    )
    .into_bytes();
    for (k, v) in headers {
        req.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    // A JSON body says so, as the UI's requests do, unless the caller chose a type.
    if body.starts_with(b"{") && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        req.extend_from_slice(b"content-type: application/json\r\n");
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(body);
    s.write_all(&req).unwrap();
    let r = read_response(&mut s);
    let (head, body) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
    (status(&r), head.to_string(), body.to_string())
}

/// A connection to the daemon on 127.0.0.1 from the loopback address `src` (std cannot bind
/// before it connects).
pub fn connect_from(src: std::net::Ipv4Addr, port: u16) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, addresses that live across the calls, and the fd handed to
    // exactly one owner.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let s = TcpStream::from_raw_fd(fd);
        let from = sockaddr(src, 0);
        let to = sockaddr(std::net::Ipv4Addr::LOCALHOST, port);
        assert_eq!(libc::bind(fd, (&raw const from).cast(), len), 0, "bind {src}: {}", std::io::Error::last_os_error());
        assert_eq!(libc::connect(fd, (&raw const to).cast(), len), 0, "connect: {}", std::io::Error::last_os_error());
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        s
    }
}

/// The resident set of a program, in KiB (under qemu-user, of the program, not the emulator).
pub fn rss_kib(pid: u32) -> u64 {
    Memory::of(pid).expect("the process is running").rss_kib
}

/// A program's memory now, in KiB. Under qemu-user (see [`emulated`]) the program's figures
/// are those of the pages the emulator holds for it; `process_rss_kib` counts the emulator too.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub rss_kib: u64,
    pub pss_kib: u64,
    pub anon_kib: u64,
    pub process_rss_kib: u64,
}

impl Memory {
    /// `None` once the process is gone.
    pub fn of(pid: u32) -> Option<Memory> {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |text: &str, key: &str| -> u64 {
            text.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok()).unwrap_or(0)
        };
        let process_rss_kib = field(&status, "VmRSS:");
        let is_emulator = exe.file_name().is_some_and(|n| n.to_string_lossy().starts_with("qemu-"));
        if !is_emulator {
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            return Some(Memory {
                rss_kib: process_rss_kib,
                pss_kib: field(&rollup, "Pss:"),
                anon_kib: field(&status, "RssAnon:"),
                process_rss_kib,
            });
        }
        // The mappings inside the guest's span, summed.
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
        let mut m = Memory { process_rss_kib, ..Memory::default() };
        let mut inside = false;
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or_default();
            if let Some((start, end)) = first.split_once('-') {
                if let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) {
                    inside = start >= GUEST_BASE && end <= GUEST_BASE + GUEST_SPAN_BYTES;
                    continue;
                }
            }
            let kib = words.next().and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
            match first {
                "Rss:" if inside => m.rss_kib += kib,
                "Pss:" if inside => m.pss_kib += kib,
                "Anonymous:" if inside => m.anon_kib += kib,
                _ => {}
            }
        }
        assert!(m.rss_kib > 0, "qemu-user holds the program's memory at {GUEST_BASE:#x} (QEMU_GUEST_BASE)");
        Some(m)
    }
}

/// The pause after a wrong password (`AUTH_LOGIN_FAILURE_PAUSE_MS`), and a little more.
pub const PAUSE: std::time::Duration =
    std::time::Duration::from_millis(keeppeek::limits::AUTH_LOGIN_FAILURE_PAUSE_MS + 50);

/// 1,000 logins from 100 addresses (`127.8.0.1` on), ten each from four threads: the admin's
/// right password twice, six wrong ones at a name of that address's own, and two at other
/// names, one after another (all but the first wrong one fall in its address's pause).
/// Returns how many answered 200, 401 and 429; every right one must be 200.
pub fn login_flood(port: u16) -> (usize, usize, usize) {
    let counts = std::sync::Arc::new(std::sync::Mutex::new((0, 0, 0)));
    let workers: Vec<_> = (0..4u8)
        .map(|w| {
            let counts = counts.clone();
            std::thread::spawn(move || {
                for a in (w..100).step_by(4) {
                    let src = std::net::Ipv4Addr::new(127, 8, 0, a + 1);
                    let (mine, other, third) = (format!("n{a}"), format!("n{a}b"), format!("n{a}c"));
                    let tries = [("root", "correct horse battery"); 2]
                        .into_iter()
                        .chain([(mine.as_str(), "wrong password"); 6])
                        .chain([(other.as_str(), "wrong password"), (third.as_str(), "wrong password")]);
                    for (user, password) in tries {
                        let body = serde_json::json!({ "username": user, "password": password }).to_string();
                        let (code, _, text) = request_from(src, port, "POST", "/api/login", &[], &body);
                        if password.starts_with("correct") {
                            assert_eq!(code, 200, "the admin from {src}: {text}");
                        }
                        let mut c = counts.lock().unwrap();
                        match code {
                            200 => c.0 += 1,
                            401 => c.1 += 1,
                            429 => c.2 += 1,
                            other => panic!("{other}: {text}"),
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    *counts.lock().unwrap()
}

/// The `accounts` line of `keeppeek budget` for the config in `dir`, in KiB.
pub fn accounts_budget_kib(dir: &Path) -> u64 {
    budget_line_kib(&dir.join("keeppeek.toml"), "accounts")
}

/// One line of `keeppeek budget` for `config` (`total` for the total), in KiB.
pub fn budget_line_kib(config: &Path, component: &str) -> u64 {
    let out = succeed(keeppeek().arg("budget").arg(config));
    let text = String::from_utf8_lossy(&out).into_owned();
    let line = text.lines().find(|l| l.starts_with(component)).unwrap_or_else(|| panic!("{text}"));
    let mib: f64 =
        line.split_whitespace().find_map(|w| w.parse::<f64>().ok()).unwrap_or_else(|| panic!("a MiB figure in {line}"));
    (mib * 1024.0) as u64
}

/// Samples a program's memory (see [`Memory`]) every 50 ms until stopped; the peaks.
pub struct RssPeak {
    peak: std::sync::Arc<std::sync::Mutex<Memory>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl RssPeak {
    pub fn watch(pid: u32) -> RssPeak {
        use std::sync::atomic::Ordering;
        let peak = std::sync::Arc::new(std::sync::Mutex::new(Memory::of(pid).expect("the process is running")));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = std::thread::spawn({
            let (peak, done) = (peak.clone(), done.clone());
            move || {
                while !done.load(Ordering::Relaxed) {
                    if let Some(now) = Memory::of(pid) {
                        let mut p = peak.lock().unwrap();
                        p.rss_kib = p.rss_kib.max(now.rss_kib);
                        p.pss_kib = p.pss_kib.max(now.pss_kib);
                        p.anon_kib = p.anon_kib.max(now.anon_kib);
                        p.process_rss_kib = p.process_rss_kib.max(now.process_rss_kib);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        RssPeak { peak, done, sampler: Some(sampler) }
    }

    /// The peak resident set so far, sampling stopped.
    pub fn stop(self) -> u64 {
        self.stop_all().rss_kib
    }

    /// The peaks so far (each its own peak), sampling stopped.
    pub fn stop_all(mut self) -> Memory {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(s) = self.sampler.take() {
            s.join().unwrap();
        }
        *self.peak.lock().unwrap()
    }
}

/// Creates the first admin from this machine; returns (session cookie, CSRF token).
pub fn setup_admin(port: u16) -> (String, String) {
    let (code, head, body) =
        request(port, "POST", "/api/setup", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    assert_eq!(code, 201, "{head}\n{body}");
    session_of(&head, &body)
}

/// The session cookie and CSRF token of a login or setup response.
pub fn session_of(head: &str, body: &str) -> (String, String) {
    let cookie = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie:")
                .then(|| l[11..].trim().split(';').next().unwrap().to_string())
        })
        .expect("a session cookie");
    let json: Value = serde_json::from_str(body).unwrap();
    (cookie, json["csrf"].as_str().unwrap().to_string())
}

/// A token with `scopes`, made by the admin session.
pub fn make_token(port: u16, admin: &(String, String), scopes: &str) -> String {
    let (code, _, body) = request(
        port,
        "POST",
        "/api/tokens",
        &[("cookie", &admin.0), ("x-csrf-token", &admin.1)],
        &format!(r#"{{"name":"t","scopes":[{scopes}]}}"#),
    );
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["token"].as_str().unwrap().to_string()
}

/// The value of one sample of `/metrics` (`name{labels}`), read with a `metrics` token.
pub fn sample(port: u16, token: &str, name: &str) -> Option<u64> {
    let (_, _, body) = request(port, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], "");
    body.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// The bar-coded frame numbers of the first `max` frames of a recorded file.
pub fn frame_numbers(path: &Path, max: usize) -> Vec<u32> {
    let (w, h) = (640usize, 360usize);
    let mut child = std::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-loglevel", "error", "-i"])
        .arg(path)
        .args(["-frames:v", &max.to_string(), "-f", "rawvideo", "-pix_fmt", "gray", "-"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("ffmpeg");
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut raw).unwrap();
    assert!(child.wait().unwrap().success());
    raw.chunks_exact(w * h)
        .map(|frame| {
            let row = &frame[348 * w..349 * w];
            (0..16).map(|i| u32::from(row[40 * i + 20] > 128) << i).sum()
        })
        .collect()
}

/// The sum of a per-stream family of `/metrics` over every stream.
pub fn sample_sum(port: u16, token: &str, family: &str) -> u64 {
    let (_, _, body) = request(port, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], "");
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

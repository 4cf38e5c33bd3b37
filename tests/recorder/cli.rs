//! The command line: config mistakes get clear errors, `budget` prints each component, and
//! the demo records with no setup.

use std::time::Duration;

use crate::common::*;

#[test]
fn each_config_mistake_gets_its_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let base = "data_dir = \"d\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"2 GiB\"\n";
    let cases = [
        (
            "[[cameras]]\nname = \"x\"\nmain = { url = \"http://cam/1\" }\n",
            "cameras[0].main.url: scheme must be rtsp or file",
        ),
        (
            "[[cameras]]\nname = \"x\"\nmain = { url = \"rtsp://u:p@cam/1\" }\n",
            "cameras[0].main.url: must not carry credentials",
        ),
        (
            "[[cameras]]\nname = \"x\"\nmain = { url = \"rtsp://cam/1\", transport = \"quic\" }\n",
            "cameras[0].main.transport: unknown variant `quic`",
        ),
        (
            "[[cameras]]\nname = \"Bad Name\"\nmain = { url = \"rtsp://cam/1\" }\n",
            "cameras[0].name: must be 1 to 32 characters",
        ),
        ("flush_interval_s = 9999\n", "flush_interval_s: must be 1 to 300"),
        ("colour = \"blue\"\n", "unknown field `colour`"),
    ];
    for (i, (extra, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        // Top-level keys go before the first table.
        let text = if extra.starts_with("[[") { format!("{base}{extra}") } else { format!("{extra}{base}") };
        std::fs::write(&path, text).unwrap();
        let out = keeppeek().arg("check-config").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{want}: accepted");
        assert!(err.contains(&format!("bad{i}.toml")) && err.contains(want), "want {want:?} in {err:?}");
        assert!(!err.contains("panicked"), "{err}");
        // `run` refuses the same config at start.
        let out = keeppeek().args(["run", "--config"]).arg(&path).output().unwrap();
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(want));
    }
    succeed(keeppeek().arg("check-config").arg(repo().join("keeppeek.example.toml")));
}

#[test]
fn budget_prints_a_figure_per_component() {
    let out = succeed(keeppeek().arg("budget").arg(repo().join("keeppeek.example.toml")));
    let text = String::from_utf8_lossy(&out);
    for component in [
        "process",
        "camera sessions",
        "ingest queues",
        "write buffers",
        "catalog cache",
        "http connections",
        "thread stacks",
        "total",
        "allowed",
    ] {
        let line =
            text.lines().find(|l| l.starts_with(component)).unwrap_or_else(|| panic!("no {component} in {text}"));
        assert!(line.contains(" MiB"), "{line}");
    }
    let room = text.lines().find_map(|l| l.strip_prefix("room for ")).unwrap_or_else(|| panic!("{text}"));
    let more: usize = room.split(' ').next().unwrap().parse().unwrap();
    assert!(more > 0, "the example leaves room: {room}");
    // Too many cameras for a small board: refused.
    let dir = tempfile::tempdir().unwrap();
    let mut body = String::from(
        "ram_class = \"128 MiB\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n",
    );
    for i in 0..16 {
        body.push_str(&format!("[[cameras]]\nname = \"c{i}\"\nmain = {{ url = \"rtsp://cam/{i}\" }}\nsub = {{ url = \"rtsp://cam/{i}s\" }}\n"));
    }
    let config = write_config(dir.path(), &body);
    let out = keeppeek().arg("budget").arg(&config).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stdout).contains("DOES NOT FIT"));
    let out = keeppeek().args(["run", "--config"]).arg(&config).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("memory budget does not fit"));
}

#[test]
fn the_demo_records_the_builtin_camera_with_no_setup() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    let port = free_port();
    let mut child = keeppeek()
        .args(["demo", "--webrtc-port", "0", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let main = data.join("recordings/demo/main");
    let recorded = wait_until(Duration::from_secs(20), || dir_bytes(&main) > 100_000);
    // The web face answers on the address given.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the demo listens");
    std::io::Write::write_all(&mut s, b"GET /healthz HTTP/1.1\r\nhost: kp\r\nconnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(recorded, "the demo recorded nothing into {}", main.display());
    assert!(status.success());
    for entry in std::fs::read_dir(&main).unwrap() {
        let path = entry.unwrap().path();
        let packets = ffprobe_packets(&path);
        assert!(packets[0].key && packets.len() > 15);
        // The built-in clip's AAC track is recorded too.
        assert!(ffprobe_stream_packets(&path, "a:0").len() > 40, "{}", path.display());
    }
}

/// A service's soft limit on open files is often far below what the ceilings allow (256
/// connections, 1,024 playback cursors): the daemon raises it to the hard limit at start.
#[test]
fn the_daemon_raises_its_open_files_limit() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n"
        ),
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", "ulimit -Sn 256 && exec \"$0\" run --config \"$1\""])
        .arg(env!("CARGO_BIN_EXE_keeppeek"))
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let limits = || std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap_or_default();
    let soft_and_hard = |text: &str| -> Option<(String, String)> {
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        let mut v = line.split_whitespace().skip(3);
        Some((v.next()?.to_string(), v.next()?.to_string()))
    };
    let raised = wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && soft_and_hard(&limits()).is_some_and(|(s, h)| s == h)
    });
    let seen = soft_and_hard(&limits());
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(raised, "soft limit raised to the hard one: {seen:?}");
}

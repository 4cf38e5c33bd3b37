//! The config changed from the web face while the box records, against the real binary and
//! the RTSP test camera: a change applies live (only the changed camera restarts; the
//! untouched ones lose no frame, read back from the bar codes in their files), a stale base
//! gets 409 and changes nothing, bad input names its field, no camera password leaves the
//! box, a rollback restores an earlier file, a setting that needs a restart gets one, and a
//! power cut during an apply leaves a whole old or whole new file that still runs.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

/// (status, JSON body) of an admin request.
pub(crate) fn call(port: u16, admin: &(String, String), method: &str, path: &str, body: &Value) -> (u16, Value) {
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let mut headers = vec![("cookie", admin.0.as_str()), ("x-csrf-token", admin.1.as_str())];
    if !body.is_empty() {
        headers.push(("content-type", "application/json"));
    }
    let (code, head, text) = request(port, method, path, &headers, &body);
    (code, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{head}\n{text}")))
}

fn rev(port: u16, admin: &(String, String)) -> u64 {
    let (code, v) = call(port, admin, "GET", "/api/config", &Value::Null);
    assert_eq!(code, 200, "{v}");
    v["rev"].as_u64().unwrap()
}

/// Frame numbers of every file of `stream`, in recorded order.
fn frames_of(d: &Daemon, recs: &[Value], stream: &str) -> (Vec<u32>, Vec<u64>) {
    let mine = of_stream(recs, stream);
    let runs = mine.iter().map(|r| r["run_id"].as_u64().unwrap()).collect();
    let frames =
        mine.iter().flat_map(|r| frame_numbers(&d.data().join(r["path"].as_str().unwrap()), 100_000)).collect();
    (frames, runs)
}

#[test]
fn a_change_applies_live_and_the_cameras_it_does_not_touch_lose_no_frame() {
    let cam = Camera::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = cam.url("/h264");
    let cameras: String = (1..=4)
        .map(|i| {
            format!("\n# camera {i}, kept as written\n[[cameras]]\nname = \"c{i}\"\nmain = {{ url = \"{url}\" }}\n")
        })
        .collect();
    write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{port}\"\nflush_interval_s = 1\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n{cameras}"
        ),
    );
    let mut d = Daemon::start(dir.path());
    for i in 1..=4 {
        d.wait_log(&format!("recording to recordings/c{i}/main"), 1, Duration::from_secs(20));
    }
    let admin = setup_admin(port);
    let base = rev(port, &admin);
    std::thread::sleep(Duration::from_secs(4));

    let changes = json!({ "base": base, "changes": [
        { "op": "change_camera", "name": "c1", "set": { "main": { "transport": "udp" }, "post_roll_s": 4 } },
        { "op": "add_camera", "name": "c5", "set": { "main": { "url": url } } },
    ]});
    let (code, plan) = call(port, &admin, "POST", "/api/config/plan", &changes);
    assert_eq!(code, 200, "{plan}");
    assert_eq!(
        plan["effect"],
        json!({ "stop": [], "restart": ["c1"], "start": ["c5"], "restart_box": [], "live": [] })
    );
    assert!(plan["diff"].to_string().contains(r#"["main.transport","tcp","udp"]"#), "{plan}");
    let applied = Instant::now();
    let (code, answer) = call(port, &admin, "POST", "/api/config/apply", &changes);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["rev"], base + 1);
    d.wait_log("recording to recordings/c5/main", 1, Duration::from_secs(10));
    d.wait_log("recording to recordings/c1/main", 2, Duration::from_secs(10));
    let again = applied.elapsed();
    assert!(again < Duration::from_secs(3), "the changed camera records again {again:?} after the apply");
    eprintln!("config apply: the changed camera recorded again {again:?} after the apply was sent");
    std::thread::sleep(Duration::from_secs(4));
    d.stop();

    // The file: the change made, every comment kept.
    let text = std::fs::read_to_string(dir.path().join("keeppeek.toml")).unwrap();
    for i in 1..=4 {
        assert!(text.contains(&format!("# camera {i}, kept as written\n[[cameras]]\nname = \"c{i}\"")), "{text}");
    }
    assert!(text.contains("transport = \"udp\"") && text.contains("name = \"c5\""), "{text}");
    // The untouched cameras: one run each, every frame in order across the apply.
    let recs = d.recordings();
    for i in 2..=4 {
        let (frames, runs) = frames_of(&d, &recs, &format!("c{i}/main"));
        assert!(runs.windows(2).all(|w| w[0] == w[1]), "c{i}: one run, no gap: {runs:?}");
        assert!(frames.len() >= 15 * 10, "c{i}: {} frames", frames.len());
        let breaks: Vec<_> = frames.windows(2).filter(|w| w[1] != (w[0] + 1) % 150).collect();
        assert!(breaks.is_empty(), "c{i}: frames out of order {breaks:?}");
    }
    // The changed camera: a run before and one after.
    let (_, runs) = frames_of(&d, &recs, "c1/main");
    assert!(runs.windows(2).filter(|w| w[0] != w[1]).count() == 1, "c1: two runs: {runs:?}");
    assert!(!of_stream(&recs, "c5/main").is_empty(), "c5 recorded");
}

/// A daemon recording two cameras from the fixture clip, each with a password, and its
/// first admin's session.
pub(crate) fn file_box() -> (tempfile::TempDir, u16, Daemon, (String, String)) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let d = file_daemon(dir.path(), port);
    let admin = setup_admin(port);
    (dir, port, d, admin)
}

fn file_daemon(dir: &std::path::Path, port: u16) -> Daemon {
    let clip = fixtures().join("h264.mp4");
    write_config(
        dir,
        &format!(
            "# The box.\nlisten = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [[cameras]]\nname = \"a\"\nusername = \"admin\"\npassword = \"hunter2-a\"\nmain = {{ url = \"file://{clip}\" }}\n\
             [[cameras]]\nname = \"b\"\nusername = \"admin\"\npassword = \"hunter2-b\"\nmain = {{ url = \"file://{clip}\" }}\n",
            clip = clip.display()
        ),
    );
    let d = Daemon::start(dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    d
}

#[test]
fn stale_plans_conflict_bad_input_names_its_field_no_secret_leaves_and_rollback_and_restart_work() {
    let (dir, port, mut d, admin) = file_box();
    let file = || std::fs::read_to_string(dir.path().join("keeppeek.toml")).unwrap();
    let first = file();
    let base = rev(port, &admin);
    let mut answers = String::new();

    // The snapshot: passwords only as set.
    let (code, snap) = call(port, &admin, "GET", "/api/config", &Value::Null);
    assert_eq!(code, 200);
    assert_eq!(snap["cameras"][0]["password"], "set");
    answers += &snap.to_string();

    // Two plans on the same base: the first applies, the second is stale and changes nothing.
    let one = json!({ "base": base, "changes": [{ "op": "change_camera", "name": "a", "set": { "password": "hunter2-new", "record": "events" } }] });
    let two = json!({ "base": base, "changes": [{ "op": "remove_camera", "name": "b" }] });
    for set in [&one, &two] {
        let (code, plan) = call(port, &admin, "POST", "/api/config/plan", set);
        assert_eq!(code, 200, "{plan}");
        answers += &plan.to_string();
    }
    let (code, applied) = call(port, &admin, "POST", "/api/config/apply", &one);
    assert_eq!(code, 200, "{applied}");
    answers += &applied.to_string();
    assert!(applied.to_string().contains(r#"["password","set","changed"]"#), "{applied}");
    let after_one = file();
    assert!(after_one.contains("hunter2-new") && after_one.contains("\n# The box.\n"), "{after_one}");
    let (code, stale) = call(port, &admin, "POST", "/api/config/apply", &two);
    assert_eq!(code, 409, "{stale}");
    assert_eq!(stale["field"], "base");
    assert_eq!(file(), after_one, "nothing applied");

    // Bad input: each names its field, nothing is applied.
    let base = base + 1;
    let many: Vec<String> = (0..65).map(|i| format!("c{i}")).collect();
    let bad = [
        (
            json!({ "base": base, "changes": [{ "op": "change_camera", "name": "a", "set": { "colour": 1 } }] }),
            "changes[0]",
        ),
        (
            json!({ "base": base, "changes": [{ "op": "change_camera", "name": "a", "set": { "pre_roll_s": "five" } }] }),
            "changes[0]",
        ),
        (
            json!({ "base": base, "changes": [{ "op": "add_camera", "name": "b", "set": { "main": { "url": "rtsp://192.0.2.9/" } } }] }),
            "changes[0].name",
        ),
        (
            json!({ "base": base, "changes": [{ "op": "change_camera", "name": "b", "set": { "main": { "url": "rtsp://u:hunter2-url@192.0.2.9/" } } }] }),
            "cameras[1].main.url",
        ),
        (json!({ "base": base, "changes": [{ "op": "set", "key": "ram_class", "value": "64 MiB" }] }), "budget"),
        (
            json!({ "base": base, "changes": [{ "op": "bulk", "cameras": many, "set": { "record": "events" } }] }),
            "changes[0].cameras",
        ),
        (json!({ "base": base, "changes": [{ "op": "set", "key": "retention.colour", "value": 1 }] }), "retention"),
        (json!({ "base": base, "changes": [{ "op": "nothing" }] }), "changes[0]"),
    ];
    for (set, field) in &bad {
        let (code, e) = call(port, &admin, "POST", "/api/config/apply", set);
        assert_eq!(code, 400, "{set}: {e}");
        assert!(e["field"].as_str().unwrap().starts_with(field), "{set}: {e}");
        answers += &e.to_string();
    }
    let huge = format!(r#"{{"base":{base},"changes":[],"pad":"{}"}}"#, "x".repeat(70 << 10));
    let (code, _, body) = request(
        port,
        "POST",
        "/api/config/plan",
        &[("cookie", &admin.0), ("x-csrf-token", &admin.1), ("content-type", "application/json")],
        &huge,
    );
    assert_eq!(code, 413, "{body}");
    assert_eq!(file(), after_one, "nothing applied");
    assert_eq!(rev(port, &admin), base);

    // The revisions: who and what, no secret; a rollback is a plan and an apply.
    let (code, revs) = call(port, &admin, "GET", "/api/config/revisions", &Value::Null);
    assert_eq!(code, 200);
    answers += &revs.to_string();
    assert_eq!(revs["revisions"][0]["by"], "user:root");
    assert_eq!(revs["revisions"][1]["by"], "the file");
    let back = json!({ "base": base, "changes": [{ "op": "rollback", "to": base - 1 }] });
    let (code, rolled) = call(port, &admin, "POST", "/api/config/apply", &back);
    assert_eq!(code, 200, "{rolled}");
    answers += &rolled.to_string();
    assert_eq!(file(), first, "the earlier file, byte for byte");

    // A setting the box cannot change while it runs: it restarts (the same process) with it.
    let set = json!({ "base": base + 1, "changes": [{ "op": "set", "key": "flush_interval_s", "value": 3 }] });
    let (code, restart) = call(port, &admin, "POST", "/api/config/apply", &set);
    assert_eq!(code, 200, "{restart}");
    assert_eq!(restart["restarting"], true);
    assert_eq!(restart["plan"]["effect"]["restart_box"], json!(["flush_interval_s"]));
    d.wait_log("web face listening", 2, Duration::from_secs(30));
    assert!(d.is_running());
    // Sessions live in memory: log in again.
    let (code, head, body) =
        request(port, "POST", "/api/login", &[], r#"{"username":"root","password":"correct horse battery"}"#);
    assert_eq!(code, 200, "{body}");
    let admin = session_of(&head, &body);
    let (_, snap) = call(port, &admin, "GET", "/api/config", &Value::Null);
    assert_eq!(snap["settings"]["flush_interval_s"], 3);
    answers += &snap.to_string();

    // No answer, log line or support bundle carries a camera password.
    let (code, _, bundle) = request_bytes_lossy(port, "/api/system/support-bundle", &admin);
    assert_eq!(code, 200);
    d.stop();
    for (what, text) in [("answers", answers.as_str()), ("log", &d.log_text()), ("support bundle", &bundle)] {
        assert!(!text.contains("hunter2"), "a password in the {what}");
    }
}

/// GET `path` with the admin session; the body as text however binary it is.
fn request_bytes_lossy(port: u16, path: &str, admin: &(String, String)) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = connect(port);
    let head = format!("GET {path} HTTP/1.1\r\nhost: kp\r\ncookie: {}\r\nconnection: close\r\n\r\n", admin.0);
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    (status(&text), text.clone(), text)
}

/// Sends one change on the current revision with `token`, from another thread.
fn apply_in_background(port: u16, token: &str, change: Value) -> std::thread::JoinHandle<(u16, String, String)> {
    let bearer = format!("Bearer {token}");
    let (_, _, snap) = request(port, "GET", "/api/config", &[("authorization", &bearer)], "");
    let base = serde_json::from_str::<Value>(&snap).unwrap()["rev"].as_u64().unwrap();
    let set = json!({ "base": base, "changes": [change] }).to_string();
    let headers = [("authorization", bearer), ("content-type", "application/json".to_string())];
    std::thread::spawn(move || {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        request(port, "POST", "/api/config/apply", &headers, &set)
    })
}

#[test]
fn a_power_cut_during_an_apply_leaves_a_whole_file_that_runs() {
    let (dir, port, mut d, admin) = file_box();
    let token = make_token(port, &admin, r#""admin""#);
    let path = dir.path().join("keeppeek.toml");
    // How long an apply takes here to write the file (then it restarts the camera, which
    // takes longer): the cuts fall within twice that, before and after the rename alike.
    let before = std::fs::read_to_string(&path).unwrap();
    let started = Instant::now();
    let sender =
        apply_in_background(port, &token, json!({ "op": "change_camera", "name": "b", "set": { "post_roll_s": 3 } }));
    while std::fs::read_to_string(&path).is_ok_and(|t| t == before) {
        assert!(started.elapsed() < Duration::from_secs(10), "the apply wrote the file");
        std::thread::sleep(Duration::from_micros(200));
    }
    let write_us = started.elapsed().as_micros() as u64;
    assert_eq!(sender.join().unwrap().0, 200);
    let apply_us = 2 * write_us;
    let mut seed = 0x9e37_79b9_u64;
    let mut whole_new_files = 0;
    for round in 0..20 {
        let old = std::fs::read_to_string(&path).unwrap();
        let change = json!({ "op": "change_camera", "name": "a", "set": { "pre_roll_s": round % 9 + 1 } });
        let sender = apply_in_background(port, &token, change);
        // A moment within the apply.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % apply_us));
        d.kill9();
        let _ = sender.join();
        let now = std::fs::read_to_string(&path).unwrap();
        let whole_new = now.contains(&format!("pre_roll_s = {}", round % 9 + 1));
        assert!(now == old || whole_new, "round {round}: neither the old file nor a whole new one:\n{now}");
        whole_new_files += usize::from(now != old);
        succeed(keeppeek().arg("check-config").arg(&path));
        d = Daemon::start(dir.path());
        d.wait_log("recording to recordings/a/main", 1, Duration::from_secs(20));
        d.wait_log("web face listening", 1, Duration::from_secs(20));
    }
    d.stop();
    // The cuts fell before and after the rename alike.
    eprintln!("power cuts within {apply_us} µs of an apply's start: {whole_new_files} of 20 left the new file");
    assert!((1..20).contains(&whole_new_files), "{whole_new_files} of 20 cuts left the new file");
}

#[test]
fn a_probe_says_what_a_camera_sends_or_why_not() {
    let cam = Camera::start();
    let (_dir, port, _d, admin) = file_box();
    let probe = |body: Value| call(port, &admin, "POST", "/api/cameras/probe", &body);
    let silent = silent_server();
    // Two probes of a camera that accepts and never answers hold both places (and show the
    // timeout); a third meanwhile is refused.
    let hung: Vec<_> = (0..2)
        .map(|_| {
            let admin = admin.clone();
            std::thread::spawn(move || {
                call(
                    port,
                    &admin,
                    "POST",
                    "/api/cameras/probe",
                    &json!({ "url": format!("rtsp://127.0.0.1:{silent}/x") }),
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (code, busy) = probe(json!({ "url": cam.url("/h264") }));
    assert_eq!((code, busy["code"].as_str()), (503, Some("probes_busy")), "{busy}");
    for h in hung {
        let (code, v) = h.join().unwrap();
        assert_eq!((code, v["code"].as_str()), (200, Some("timeout")), "{v}");
    }

    let found = |body: Value| {
        let (code, v) = probe(body);
        assert_eq!(code, 200, "{v}");
        v
    };
    let h265 = found(json!({ "url": cam.url("/h265") }));
    assert_eq!(
        h265["found"],
        json!({ "codec": "H.265", "width": 640, "height": 360, "fps": 15.0, "audio": null }),
        "{h265}"
    );
    let aac = found(json!({ "url": cam.url("/h264-aac"), "transport": "udp" }));
    assert_eq!(aac["found"]["audio"], "mpeg4-generic", "{aac}");
    let good = found(json!({ "url": cam.url("/h264-auth"), "username": CAMERA_USER, "password": CAMERA_PASSWORD }));
    assert_eq!(good["found"]["codec"], "H.264", "{good}");
    // Why not, in a word for the UI, with the field it is about.
    let closed = free_port();
    let cases = [
        (
            json!({ "url": cam.url("/h264-auth"), "username": CAMERA_USER, "password": "wrong" }),
            "wrong_credentials",
            "password",
        ),
        (json!({ "url": cam.url("/h264-auth") }), "wrong_credentials", "password"),
        (json!({ "url": cam.url("/nothing-here") }), "refused", "url"),
        (json!({ "url": format!("rtsp://127.0.0.1:{closed}/x") }), "unreachable", "url"),
        (json!({ "url": format!("rtsp://127.0.0.1:{port}/x") }), "not_rtsp", "url"),
        (json!({ "url": cam.url("/mjpeg") }), "codec", "url"),
    ];
    for (body, code, field) in cases {
        let v = found(body.clone());
        assert_eq!(
            (v["ok"].as_bool(), v["code"].as_str(), v["field"].as_str()),
            (Some(false), Some(code), Some(field)),
            "{body}: {v}"
        );
        eprintln!("probe {}: {}", body["url"], v["message"]);
    }
    // A bad request names its field and tries nothing.
    let (code, v) = probe(json!({ "url": format!("rtsp://u:p@127.0.0.1:{}/h264", cam.port) }));
    assert_eq!((code, v["field"].as_str()), (400, Some("url")), "{v}");
    let (code, v) = probe(json!({ "url": cam.url("/h264"), "transport": "carrier pigeon" }));
    assert_eq!((code, v["field"].as_str()), (400, Some("transport")), "{v}");
}

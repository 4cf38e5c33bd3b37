//! MQTT against a real broker (Debian's mosquitto, started here) and an independent
//! subscriber (mosquitto_sub): events published once durable, the box's availability and
//! its last will on `kill -9`, and a broker away for 60 s while 100 events arrive: each is
//! delivered once, in order, after it returns, and the intake's latency did not change, nor
//! the recording's pace (one run across the absence, nothing dropped).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A mosquitto broker on loopback, its sessions kept on disk (saved every second), so a
/// subscriber's session outlives a `kill -9` of the broker.
pub struct Broker {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Broker {
    pub fn start(dir: &Path, port: u16) -> Broker {
        std::fs::create_dir_all(dir).unwrap();
        // mosquitto started as root runs as its own user: it must be able to write here.
        std::process::Command::new("chmod").arg("0777").arg(dir).status().unwrap();
        let conf = dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nautosave_interval 1\nlog_dest stderr\n",
                dir.display()
            ),
        )
        .unwrap();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("mosquitto.log")).unwrap();
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mosquitto (Debian's package) must be installed: tools/test.sh installs it");
        let up = wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        assert!(
            up,
            "mosquitto did not listen on {port}: {}",
            std::fs::read_to_string(dir.join("mosquitto.log")).unwrap_or_default()
        );
        Broker { child, port, dir: dir.to_path_buf() }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again with the same port and sessions.
    pub fn restart(&mut self) {
        self.kill9();
        *self = Broker::start(&self.dir.clone(), self.port);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `mosquitto_sub`, with a session the broker keeps (client id `id`, QoS 1), printing each
/// message as `topic payload`; what it printed, line by line.
pub struct Subscriber {
    child: Child,
    lines: Arc<Mutex<Vec<(String, String)>>>,
}

impl Subscriber {
    pub fn start(port: u16, id: &str, topics: &[&str]) -> Subscriber {
        let mut cmd = Command::new("mosquitto_sub");
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q", "1", "-c", "-i", id, "-v"]);
        for t in topics {
            cmd.args(["-t", t]);
        }
        let mut child =
            cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("mosquitto_sub (mosquitto-clients)");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let into = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let (t, p) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                into.lock().unwrap().push((t.to_string(), p.to_string()));
            }
        });
        Subscriber { child, lines }
    }

    /// Messages on `topic` so far.
    pub fn on(&self, topic: &str) -> Vec<String> {
        self.lines.lock().unwrap().iter().filter(|(t, _)| t == topic).map(|(_, p)| p.clone()).collect()
    }

    /// Waits until `topic` has had `n` messages; returns them.
    pub fn wait_for(&self, topic: &str, n: usize, timeout: Duration) -> Vec<String> {
        let ok = wait_until(timeout, || self.on(topic).len() >= n);
        let got = self.on(topic);
        assert!(ok, "{n} messages on {topic} within {timeout:?}; got {}: {got:?}", got.len());
        got
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A box with camera `front` (the fixture file, recorded on events), its web face and
/// `[mqtt]` at `broker`; an `events:write` token.
fn mqtt_box(dir: &Path, broker: u16) -> (Daemon, u16, String, (String, String)) {
    mqtt_box_recording(dir, broker, "events")
}

/// [`mqtt_box`] with the camera's `record` mode.
fn mqtt_box_recording(dir: &Path, broker: u16, record: &str) -> (Daemon, u16, String, (String, String)) {
    std::fs::create_dir_all(dir).unwrap();
    let port = free_port();
    let clip = fixtures().join("h264.mp4");
    write_config(
        dir,
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n\
             [mqtt]\nhost = \"127.0.0.1\"\nport = {broker}\nclient_id = \"kp-test\"\n\
             [[cameras]]\nname = \"front\"\nrecord = \"{record}\"\nmain = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    );
    let d = Daemon::start(dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""events:write", "view", "metrics""#);
    (d, port, token, admin)
}

/// Posts an envelope-only event; returns how long the durable acknowledgement took.
fn post(port: u16, token: &str, n: usize) -> Duration {
    let body =
        serde_json::json!({ "camera": "front", "labels": ["person"], "text": format!("event {n}"), "record": false })
            .to_string();
    let t = Instant::now();
    let (code, _, text) = request(
        port,
        "POST",
        "/api/events",
        &[("authorization", &format!("Bearer {token}")), ("content-type", "application/json")],
        &body,
    );
    assert_eq!(code, 201, "{text}");
    t.elapsed()
}

fn p95(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 95 / 100).min(v.len() - 1)]
}

#[test]
fn events_and_availability_reach_the_broker_and_the_will_fires_on_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("broker"), free_port());
    let sub = Subscriber::start(broker.port, "kp-sub-a", &["keeppeek/#"]);
    let (mut d, port, token, _) = mqtt_box(&dir.path().join("box"), broker.port);
    assert_eq!(sub.wait_for("keeppeek/available", 1, Duration::from_secs(20)).last().unwrap(), "online");
    post(port, &token, 1);
    let got = sub.wait_for("keeppeek/events", 1, Duration::from_secs(10));
    let e: Value = serde_json::from_str(&got[0]).unwrap();
    assert_eq!(
        (e["camera"].as_str(), e["labels"][0].as_str(), e["text"].as_str()),
        (Some("front"), Some("person"), Some("event 1"))
    );
    assert!(e["time"].as_str().unwrap().ends_with('Z') && e["id"].as_u64().is_some(), "{e}");
    // The retained availability a newcomer reads.
    let late = Subscriber::start(broker.port, "kp-sub-late", &["keeppeek/available"]);
    assert_eq!(late.wait_for("keeppeek/available", 1, Duration::from_secs(10))[0], "online");
    // kill -9: the broker publishes the will.
    d.kill9();
    let avail = sub.wait_for("keeppeek/available", 2, Duration::from_secs(10));
    assert_eq!(avail.last().unwrap(), "offline");
}

#[test]
fn a_broker_away_for_60_s_gets_every_event_once_in_order_and_nothing_waited_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(&dir.path().join("broker"), free_port());
    let sub = Subscriber::start(broker.port, "kp-sub-b", &["keeppeek/events"]);
    // Recording all the time, so its pace can be compared too.
    let (_d, port, token, _) = mqtt_box_recording(&dir.path().join("box"), broker.port, "continuous");
    std::thread::sleep(Duration::from_secs(2));
    let frames =
        || sample(port, &token, "keeppeek_stream_frames_total{stream=\"front/main\"}").expect("the stream's frames");
    // Before: the broker up, 20 events.
    let (f0, t0) = (frames(), Instant::now());
    let up: Vec<Duration> = (0..20).map(|n| post(port, &token, n)).collect();
    sub.wait_for("keeppeek/events", 20, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(5).saturating_sub(t0.elapsed()));
    let rate_up = (frames() - f0) as f64 / t0.elapsed().as_secs_f64();
    // The broker away for 60 s; 100 events arrive meanwhile.
    broker.kill9();
    let gone = Instant::now();
    let (f1, away_from_us) = (frames(), wall_us());
    let mut down = Vec::new();
    for n in 0..100 {
        down.push(post(port, &token, 1000 + n));
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(60).saturating_sub(gone.elapsed()));
    let rate_away = (frames() - f1) as f64 / gone.elapsed().as_secs_f64();
    let away_to_us = wall_us();
    broker.restart();
    sub.wait_for("keeppeek/events", 120, Duration::from_secs(60));
    // A moment more: a copy sent twice would show now.
    std::thread::sleep(Duration::from_secs(2));
    let all = sub.on("keeppeek/events").into_iter().skip(20).collect::<Vec<_>>();
    let texts: Vec<String> =
        all.iter().map(|p| serde_json::from_str::<Value>(p).unwrap()["text"].as_str().unwrap().to_string()).collect();
    let wanted: Vec<String> = (0..100).map(|n| format!("event {}", 1000 + n)).collect();
    assert_eq!(texts, wanted, "every event once, in order");
    let (up, down) = (p95(up), p95(down));
    eprintln!("intake p95: broker up {up:?}, broker away {down:?}");
    assert!(down <= up * 3 + Duration::from_millis(50), "the intake waited on the broker: {up:?} → {down:?}");
    // Recording went on at its pace (the camera's frames taken), with no gap and nothing
    // dropped at the recorder, while the broker was away.
    eprintln!("frames a second: broker up {rate_up:.1}, broker away {rate_away:.1}");
    assert!(rate_away >= rate_up * 0.9, "recording slowed while the broker was away: {rate_up:.1} → {rate_away:.1}");
    assert_eq!(sample(port, &token, "keeppeek_recorder_queue_dropped_total{stream=\"front/main\"}"), Some(0));
    let path = format!("/api/streams/front/main/recordings?from_us={away_from_us}&to_us={away_to_us}");
    let (code, _, body) = request(port, "GET", &path, &[("authorization", &format!("Bearer {token}"))], "");
    assert_eq!(code, 200, "{body}");
    let runs: Value = serde_json::from_str(&body).unwrap();
    let runs: Vec<(i64, i64)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["start_us"].as_i64().unwrap(), r["end_us"].as_i64().unwrap()))
        .collect();
    assert!(
        runs.len() == 1 && runs[0].0 <= away_from_us && runs[0].1 >= away_to_us - 2_000_000,
        "one run across the broker's absence: {runs:?} for {away_from_us}..{away_to_us}"
    );
}

/// Home Assistant itself (PyPI `homeassistant` 2025.4.4 on Python 3.13, installed by
/// tools/test.sh under target/ha/venv with the MQTT integration's paho-mqtt), its MQTT
/// integration set up on `broker` (a config entry written before it starts, as its setup
/// page would), started with `--skip-pip` so it needs no network.
pub struct HomeAssistant {
    child: Child,
    dir: PathBuf,
}

impl HomeAssistant {
    pub fn start(dir: &Path, broker: u16) -> HomeAssistant {
        let hass = repo().join("target/ha/venv/bin/hass");
        assert!(hass.exists(), "Home Assistant is not installed at {}: tools/test.sh installs it", hass.display());
        std::fs::create_dir_all(dir.join(".storage")).unwrap();
        std::fs::write(
            dir.join("configuration.yaml"),
            "homeassistant:\n  name: KeepPeek test\n  latitude: 0\n  longitude: 0\n  elevation: 0\n  unit_system: metric\n  time_zone: UTC\nlogger:\n  default: warning\n  logs:\n    homeassistant.components.mqtt: debug\n",
        )
        .unwrap();
        let entries = serde_json::json!({
            "version": 1, "minor_version": 5, "key": "core.config_entries",
            "data": { "entries": [{
                "created_at": "2026-01-01T00:00:00+00:00", "modified_at": "2026-01-01T00:00:00+00:00",
                "data": { "broker": "127.0.0.1", "port": broker, "discovery": true },
                "discovery_keys": {}, "disabled_by": null, "domain": "mqtt", "entry_id": "01KEEPPEEKTESTMQTT0000000",
                "minor_version": 2, "options": {}, "pref_disable_new_entities": false, "pref_disable_polling": false,
                "source": "user", "subentries": [], "title": "127.0.0.1", "unique_id": null, "version": 1,
            }] },
        });
        std::fs::write(dir.join(".storage/core.config_entries"), entries.to_string()).unwrap();
        let log = std::fs::File::create(dir.join("hass.log")).unwrap();
        let child = Command::new(&hass)
            .arg("-c")
            .arg(dir)
            .arg("--skip-pip")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting Home Assistant");
        HomeAssistant { child, dir: dir.to_path_buf() }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("hass.log")).unwrap_or_default()
    }

    /// The unique ids of the entities its registry holds (saved a few seconds after they
    /// are made).
    pub fn entities(&self) -> Vec<(String, String)> {
        let Ok(text) = std::fs::read_to_string(self.dir.join(".storage/core.entity_registry")) else {
            return Vec::new();
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else { return Vec::new() };
        v["data"]["entities"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| Some((e["unique_id"].as_str()?.to_string(), e["entity_id"].as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for HomeAssistant {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Applies a change set through the web face as the admin.
fn apply(port: u16, admin: &(String, String), changes: Value) {
    let (_, _, snap) = request(port, "GET", "/api/config?limit=1", &[("cookie", &admin.0)], "");
    let base = serde_json::from_str::<Value>(&snap).unwrap()["rev"].as_u64().unwrap();
    let body = serde_json::json!({ "base": base, "changes": changes }).to_string();
    let (code, _, text) =
        request(port, "POST", "/api/config/apply", &[("cookie", &admin.0), ("x-csrf-token", &admin.1)], &body);
    assert_eq!(code, 200, "{text}");
}

#[test]
fn home_assistant_discovery_states_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("broker"), free_port());
    let sub = Subscriber::start(broker.port, "kp-sub-c", &["keeppeek/#", "homeassistant/#"]);
    let box_dir = dir.path().join("box");
    let (_d, port, token, admin) = mqtt_box(&box_dir, broker.port);
    // The box and its camera are announced; the camera's entities without a label yet.
    let configs = |camera_entity: &str| -> Vec<String> {
        let lines = sub.lines.lock().unwrap();
        lines
            .iter()
            .filter(|(t, _)| t.starts_with("homeassistant/") && t.ends_with(&format!("/{camera_entity}/config")))
            .map(|(_, p)| p.clone())
            .collect()
    };
    let announced = wait_until(Duration::from_secs(20), || !configs("front_snapshot").is_empty());
    assert!(announced, "no discovery: {:?}", sub.lines.lock().unwrap());
    let image: Value = serde_json::from_str(&configs("front_snapshot")[0]).unwrap();
    assert_eq!(image["image_topic"], "keeppeek/front/snapshot");
    assert_eq!(image["device"]["name"], "front");
    for entity in ["front_continuous", "front_mark", "front_recording", "uptime_s", "disk_used_percent", "firmware"] {
        assert!(wait_until(Duration::from_secs(5), || !configs(entity).is_empty()), "{entity} announced");
    }
    assert_eq!(sub.wait_for("keeppeek/front/continuous", 1, Duration::from_secs(10)).last().unwrap(), "OFF");
    assert_eq!(sub.wait_for("keeppeek/front/recording", 1, Duration::from_secs(10)).last().unwrap(), "events");
    // An event with a new label: its sensor announced, then on; the camera's last event.
    post(port, &token, 1);
    assert!(wait_until(Duration::from_secs(10), || !configs("front_person").is_empty()), "the person sensor announced");
    let person: Value = serde_json::from_str(&configs("front_person")[0]).unwrap();
    assert_eq!(person["state_topic"], "keeppeek/front/person");
    assert_eq!(sub.wait_for("keeppeek/front/person", 1, Duration::from_secs(10))[0], "ON");
    let last: Value =
        serde_json::from_str(&sub.wait_for("keeppeek/front/last_event", 1, Duration::from_secs(10))[0]).unwrap();
    assert_eq!(last["text"], "event 1");
    // The button: an event marked on the camera.
    let publish = |t: &str, m: &str| {
        succeed(Command::new("mosquitto_pub").args([
            "-h",
            "127.0.0.1",
            "-p",
            &broker.port.to_string(),
            "-t",
            t,
            "-m",
            m,
        ]));
    };
    publish("keeppeek/front/mark/press", "PRESS");
    let events = sub.wait_for("keeppeek/events", 2, Duration::from_secs(10));
    let marked: Value = serde_json::from_str(&events[1]).unwrap();
    assert_eq!(marked["labels"][0], "marked");
    // The switch: continuous recording on, as a config change.
    publish("keeppeek/front/continuous/set", "ON");
    assert!(
        wait_until(Duration::from_secs(20), || sub.on("keeppeek/front/continuous").last().map(String::as_str)
            == Some("ON")),
        "{:?}",
        sub.on("keeppeek/front/continuous")
    );
    let file = std::fs::read_to_string(box_dir.join("keeppeek.toml")).unwrap();
    assert!(file.contains("record = \"continuous\""), "{file}");
    // Home Assistant back online: everything announced again.
    let before = configs("front_snapshot").len();
    publish("homeassistant/status", "online");
    assert!(wait_until(Duration::from_secs(10), || configs("front_snapshot").len() > before), "announced again");
    // The camera removed: its entities withdrawn (an empty retained config).
    apply(port, &admin, serde_json::json!([{ "op": "remove_camera", "name": "front" }]));
    assert!(
        wait_until(Duration::from_secs(10), || configs("front_snapshot")
            .last()
            .is_some_and(|p| p.is_empty() || p == "(null)")),
        "{:?}",
        configs("front_snapshot")
    );
}

/// Home Assistant 2025.4.4 itself, on the same broker: it comes online (its birth message),
/// the box announces again, and Home Assistant makes every entity the box announced, the
/// label sensor an event brings too.
#[test]
fn home_assistant_makes_the_entities_the_box_announces() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(&dir.path().join("broker"), free_port());
    let sub = Subscriber::start(broker.port, "kp-sub-d", &["homeassistant/#"]);
    let (_d, port, token, _) = mqtt_box(&dir.path().join("box"), broker.port);
    post(port, &token, 1);
    let ha = HomeAssistant::start(&dir.path().join("ha"), broker.port);
    // Its birth message; the box announces again on it.
    let online = wait_until(Duration::from_secs(240), || sub.on("homeassistant/status").iter().any(|p| p == "online"));
    assert!(online, "Home Assistant did not come online:\n{}", ha.log());
    let unique_ids: std::collections::BTreeSet<String> = sub
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, p)| t.ends_with("/config") && !p.is_empty())
        .filter_map(|(_, p)| serde_json::from_str::<Value>(p).ok()?["unique_id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(unique_ids.len(), 8, "the box's three sensors and the camera's five entities: {unique_ids:?}");
    let made = wait_until(Duration::from_secs(120), || {
        let have: std::collections::BTreeSet<String> = ha.entities().into_iter().map(|(u, _)| u).collect();
        unique_ids.iter().all(|u| have.contains(u))
    });
    let have = ha.entities();
    assert!(made, "Home Assistant made {have:?}, the box announced {unique_ids:?}\n{}", ha.log());
    let person = have.iter().find(|(u, _)| u.ends_with("_front_person")).expect("the person sensor");
    assert!(person.1.starts_with("binary_sensor."), "{person:?}");
    let image = have.iter().find(|(u, _)| u.ends_with("_front_snapshot")).expect("the snapshot image");
    assert!(image.1.starts_with("image."), "{image:?}");
    eprintln!("Home Assistant made {} entities from the box's discovery", have.len());
}

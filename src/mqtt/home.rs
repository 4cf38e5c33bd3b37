//! Home Assistant over MQTT: discovery announced on every connect and whenever Home
//! Assistant says it is online, a camera's entities withdrawn when it goes, the states the
//! entities read (availability, recording, continuous recording, each label's sensor, the
//! latest snapshot, the last event), and the commands they send back.
//!
//! States are published at QoS 0 and retained (the broker hands the latest to whoever
//! subscribes), and only when they change: a look every [`limits::MQTT_STATE_TICK_MS`]. A
//! label's sensor is on from an event with it until [`limits::MQTT_LABEL_ON_S`] after the
//! event (or its end, when it has one), for events no older than that.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::{Packet, Publish, Subscribe, SubscribeFilter};
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::discovery::{CameraInfo, Command, Names, object_id, parse_command, subscriptions};
use super::link::LinkError;
use super::{Session, topic};
use crate::cameras::Cameras;
use crate::catalog::Catalog;
use crate::catalog::events::EventRecord;
use crate::config::{MqttConfig, RecordMode};
use crate::limits;

/// What Home Assistant asks of the box: the daemon carries it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// Continuous recording on (`continuous`) or off (`events`) for a camera, as a config
    /// change.
    Continuous { camera: String, on: bool },
    /// An event on a camera, as if a service had posted it.
    Mark { camera: String },
}

/// The queue of Home Assistant's orders to the daemon: at most [`limits::MQTT_ORDERS_MAX`].
pub fn orders() -> (mpsc::Sender<Order>, mpsc::Receiver<Order>) {
    mpsc::channel(limits::MQTT_ORDERS_MAX)
}

/// The box around the room, given once by the daemon.
pub struct Around {
    pub cameras: Arc<Cameras>,
    pub data_dir: PathBuf,
    pub box_id: String,
    pub orders: mpsc::Sender<Order>,
}

/// What every step of the room reads: the broker's settings, the box around, the catalog.
pub(super) struct With<'a> {
    pub config: &'a MqttConfig,
    pub around: &'a Around,
    pub catalog: &'a Catalog,
}

/// A connection's Home Assistant state.
#[derive(Default)]
pub(super) struct Home {
    /// Cameras announced, with their labels.
    announced: BTreeMap<String, Vec<String>>,
    /// The last payload published on each state topic.
    last: HashMap<String, Vec<u8>>,
    /// Label sensors to turn off, and when.
    /// (On tokio's clock, which the tests pause.)
    offs: Vec<(tokio::time::Instant, String)>,
}

fn names<'a>(config: &'a MqttConfig, around: &'a Around) -> Names<'a> {
    Names {
        prefix: &config.prefix,
        discovery_prefix: &config.discovery_prefix,
        box_id: &around.box_id,
        firmware: env!("CARGO_PKG_VERSION"),
    }
}

/// The cameras running now (by name, main stream first), with their mode and whether their
/// main stream is connected.
fn running(cameras: &Cameras) -> BTreeMap<String, (bool, Option<RecordMode>)> {
    let mut out = BTreeMap::new();
    for s in cameras.streams() {
        let entry = out.entry(s.key.camera.to_string()).or_insert((false, None));
        if s.key.kind == crate::base::StreamKind::Main {
            *entry = (s.state.snapshot().connected, s.recording.as_ref().map(|r| r.mode));
        }
    }
    out
}

impl Home {
    /// Subscribes to the command topics and announces everything.
    pub fn on_connect(&mut self, s: &mut Session<'_>, w: &With<'_>) -> Result<(), LinkError> {
        let config = w.config;
        let filters: Vec<SubscribeFilter> = subscriptions(&config.prefix, &config.discovery_prefix)
            .into_iter()
            .map(|f| SubscribeFilter::new(f, QoS::AtLeastOnce))
            .collect();
        let mut sub = Subscribe::new_many(filters);
        sub.pkid = s.pkid();
        s.link.queue(&Packet::Subscribe(sub))?;
        self.last.clear();
        self.announced.clear();
        self.announce_all(s, w)
    }

    /// Announces the box and every camera (running, or announced before and not withdrawn).
    pub fn announce_all(&mut self, s: &mut Session<'_>, w: &With<'_>) -> Result<(), LinkError> {
        let (config, around, catalog) = (w.config, w.around, w.catalog);
        let n = names(config, around);
        for (t, payload) in n.for_box() {
            s.publish_quiet(&t, payload, true)?;
        }
        let known = catalog.mqtt_labels().unwrap_or_default();
        let now = running(&around.cameras);
        // Cameras announced before that no longer run are withdrawn.
        for (camera, labels) in &known {
            if !now.contains_key(camera) {
                self.withdraw(s, w, camera, labels.clone())?;
            }
        }
        for camera in now.keys() {
            let labels = known.get(camera).cloned().unwrap_or_default();
            self.announce(s, w, camera, labels)?;
        }
        // States go again, to the announced entities.
        self.last.clear();
        self.states(s, w)
    }

    fn announce(
        &mut self,
        s: &mut Session<'_>,
        w: &With<'_>,
        camera: &str,
        labels: Vec<String>,
    ) -> Result<(), LinkError> {
        let (config, around, catalog) = (w.config, w.around, w.catalog);
        let info = CameraInfo { name: camera.to_string(), model: None, labels };
        for (t, payload) in names(config, around).for_camera(&info) {
            s.publish_quiet(&t, payload, true)?;
        }
        let _ = catalog.add_mqtt_label(camera, "");
        self.announced.insert(camera.to_string(), info.labels);
        Ok(())
    }

    /// A camera's entities withdrawn: an empty retained config on each of its topics.
    fn withdraw(
        &mut self,
        s: &mut Session<'_>,
        w: &With<'_>,
        camera: &str,
        labels: Vec<String>,
    ) -> Result<(), LinkError> {
        let (config, around, catalog) = (w.config, w.around, w.catalog);
        let n = names(config, around);
        let info = CameraInfo { name: camera.to_string(), model: None, labels };
        for t in n.camera_config_topics(&info) {
            s.publish_quiet(&t, Vec::new(), true)?;
        }
        for state in ["available", "recording", "continuous", "snapshot", "last_event"] {
            s.publish_quiet(&n.camera_topic(camera, state), Vec::new(), true)?;
        }
        let _ = catalog.remove_mqtt_camera(camera);
        self.announced.remove(camera);
        info!(camera, "MQTT: the camera's Home Assistant entities withdrawn");
        Ok(())
    }

    /// Publishes the states that changed.
    fn states(&mut self, s: &mut Session<'_>, w: &With<'_>) -> Result<(), LinkError> {
        let (config, around) = (w.config, w.around);
        let n = names(config, around);
        let mut set = |s: &mut Session<'_>, t: String, v: Vec<u8>| -> Result<(), LinkError> {
            if self.last.get(&t) != Some(&v) {
                s.publish_quiet(&t, v.clone(), true)?;
                self.last.insert(t, v);
            }
            Ok(())
        };
        for (camera, (connected, mode)) in running(&around.cameras) {
            set(s, n.camera_topic(&camera, "available"), if connected { "online" } else { "offline" }.into())?;
            let mode_name = mode.map_or("off", |m| m.name());
            set(s, n.camera_topic(&camera, "recording"), mode_name.into())?;
            let on = mode == Some(RecordMode::Continuous);
            set(s, n.camera_topic(&camera, "continuous"), if on { "ON" } else { "OFF" }.into())?;
        }
        let disk = crate::base::fs::disk_space(&around.data_dir).unwrap_or_default();
        let used = (disk.free_bytes * 100).checked_div(disk.total_bytes).map_or(0, |free| 100 - free);
        let state = serde_json::json!({
            "disk_used_percent": used,
            "uptime_s": started().elapsed().as_secs() / 60 * 60,
            "firmware": env!("CARGO_PKG_VERSION"),
        });
        set(s, topic(&config.prefix, "state"), state.to_string().into_bytes())
    }

    /// Every [`limits::MQTT_STATE_TICK_MS`]: cameras that came or went, states that changed,
    /// label sensors due off.
    pub fn tick(&mut self, s: &mut Session<'_>, w: &With<'_>) -> Result<(), LinkError> {
        let (around, catalog) = (w.around, w.catalog);
        let now = running(&around.cameras);
        let gone: Vec<String> = self.announced.keys().filter(|c| !now.contains_key(*c)).cloned().collect();
        for camera in gone {
            let labels = self.announced.get(&camera).cloned().unwrap_or_default();
            self.withdraw(s, w, &camera, labels)?;
        }
        let known = catalog.mqtt_labels().unwrap_or_default();
        let new: Vec<String> = now.keys().filter(|c| !self.announced.contains_key(*c)).cloned().collect();
        for camera in new {
            let labels = known.get(&camera).cloned().unwrap_or_default();
            self.announce(s, w, &camera, labels)?;
        }
        let at = tokio::time::Instant::now();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.offs).into_iter().partition(|(when, _)| *when <= at);
        self.offs = later;
        for (_, t) in due {
            s.publish_quiet(&t, b"OFF".to_vec(), true)?;
        }
        self.states(s, w)
    }

    /// An event was published: its labels' sensors on (a label new to its camera announced
    /// first), its snapshot as the camera's image, the camera's last event.
    pub async fn on_event(
        &mut self,
        s: &mut Session<'_>,
        w: &With<'_>,
        r: &EventRecord,
        payload: &[u8],
        now_us: i64,
    ) -> Result<(), LinkError> {
        let (config, around, catalog) = (w.config, w.around, w.catalog);
        let camera = r.envelope.camera.clone();
        let n = names(config, around);
        let mut new_label = false;
        for label in &r.envelope.labels {
            new_label |= catalog.add_mqtt_label(&camera, label).unwrap_or(false);
        }
        if new_label || !self.announced.contains_key(&camera) {
            let labels = catalog.mqtt_labels().unwrap_or_default().get(&camera).cloned().unwrap_or_default();
            self.announce(s, w, &camera, labels)?;
        }
        let on_us = limits::MQTT_LABEL_ON_S as i64 * 1_000_000;
        let until_us = r.envelope.end_us.unwrap_or(r.envelope.time()).max(r.envelope.time()) + on_us;
        if until_us > now_us {
            let off_at =
                tokio::time::Instant::now() + Duration::from_micros((until_us - now_us).min(on_us * 10) as u64);
            let announced = self.announced.get(&camera).cloned().unwrap_or_default();
            for label in r.envelope.labels.iter().filter(|l| announced.contains(l)) {
                let t = n.camera_topic(&camera, &object_id(label));
                s.publish_quiet(&t, b"ON".to_vec(), true)?;
                self.offs.retain(|(_, x)| *x != t);
                self.offs.push((off_at, t));
            }
        }
        s.publish_quiet(&n.camera_topic(&camera, "last_event"), payload.to_vec(), true)?;
        if let Some(snap) = &r.snapshot
            && snap.bytes as usize + 1024 <= limits::MQTT_PACKET_MAX_BYTES
        {
            match tokio::fs::read(around.data_dir.join(&snap.path)).await {
                Ok(jpeg) => s.publish_quiet(&n.camera_topic(&camera, "snapshot"), jpeg, true)?,
                Err(e) => debug!(path = %snap.path, error = %e, "MQTT: the snapshot could not be read"),
            }
        }
        Ok(())
    }

    /// A message on a subscribed topic.
    pub fn on_message(&mut self, s: &mut Session<'_>, w: &With<'_>, p: &Publish) -> Result<(), LinkError> {
        let (config, around) = (w.config, w.around);
        match parse_command(&config.prefix, &config.discovery_prefix, &p.topic, &p.payload) {
            Ok(Some(Command::AssistantOnline)) => {
                info!("MQTT: Home Assistant is online: announcing again");
                self.announce_all(s, w)?;
            }
            Ok(Some(Command::Continuous { camera, on })) => {
                self.order(around, &camera, |c| Order::Continuous { camera: c, on });
            }
            Ok(Some(Command::Mark { camera })) => {
                self.order(around, &camera, |c| Order::Mark { camera: c });
            }
            Ok(None) => {}
            Err(e) => {
                debug!(topic = %p.topic.chars().take(80).collect::<String>(), error = %e, "MQTT: a message that is no command")
            }
        }
        Ok(())
    }

    /// Passes an order on for the camera whose object id is `id` (never waits: with the
    /// daemon busy it is dropped and logged). Whether it was passed on.
    fn order(&self, around: &Around, id: &str, make: impl FnOnce(String) -> Order) -> bool {
        let Some(name) = running(&around.cameras).into_keys().find(|c| object_id(c) == id) else {
            debug!(camera = id, "MQTT: a command for a camera that does not run");
            return false;
        };
        let passed = around.orders.try_send(make(name)).is_ok();
        if !passed {
            tracing::warn!("MQTT: a command dropped, the box is busy with others");
        }
        passed
    }
}

/// When the process started (for the uptime sensor).
fn started() -> Instant {
    static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// Starts the uptime's clock (called at the box's start).
pub fn mark_start() {
    let _ = started();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_past_the_orders_queue_are_dropped_and_others_wait_their_turn() {
        let (tx, mut rx) = orders();
        let cameras = Cameras::main_streams(&["front-door"]);
        let around = Around { cameras, data_dir: PathBuf::new(), box_id: "b".into(), orders: tx };
        let home = Home::default();
        let passed: Vec<bool> = (0..limits::MQTT_ORDERS_MAX + 2)
            .map(|_| home.order(&around, "front_door", |c| Order::Mark { camera: c }))
            .collect();
        assert_eq!(passed.iter().filter(|p| **p).count(), limits::MQTT_ORDERS_MAX);
        assert!(!passed[limits::MQTT_ORDERS_MAX] && !passed[limits::MQTT_ORDERS_MAX + 1]);
        assert_eq!(rx.try_recv().unwrap(), Order::Mark { camera: "front-door".into() });
        // One taken: room for one more.
        assert!(home.order(&around, "front_door", |c| Order::Continuous { camera: c, on: true }));
        // A camera that does not run gets nothing.
        assert!(!home.order(&around, "garage", |c| Order::Mark { camera: c }));
    }
}

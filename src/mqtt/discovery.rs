//! Home Assistant's MQTT discovery: what the box announces for itself and each camera, and
//! the commands it takes back.
//!
//! One device for the box and one per camera (`via_device` the box). Per camera: a binary
//! sensor per label its events have carried (`motion`, `person`, …), on while an event with
//! it is recent; the latest snapshot as an image; a switch for continuous recording (on:
//! continuous, off: around events); a button that posts an event; its recording state. For
//! the box: disk use, uptime and firmware. Every entity is available while the box is and,
//! for a camera's, while that camera is running. Topics follow Home Assistant's documented
//! discovery scheme: `<discovery prefix>/<component>/<node id>/<object id>/config`.

use serde_json::{Value, json};

use crate::limits;

/// A camera as discovery announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CameraInfo {
    pub name: String,
    /// The model, when the camera said (ONVIF).
    pub model: Option<String>,
    /// Labels its events have carried, each a binary sensor.
    pub labels: Vec<String>,
}

/// What is announced: (config topic, payload).
pub type Announcement = (String, Vec<u8>);

/// Letters and digits kept (lower case), anything else `_`: a name as an object id.
pub fn object_id(name: &str) -> String {
    let id: String = name
        .chars()
        .take(limits::MQTT_FIELD_MAX_BYTES)
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect();
    if id.is_empty() { "_".into() } else { id }
}

/// The topics and settings discovery needs.
pub struct Names<'a> {
    pub prefix: &'a str,
    pub discovery_prefix: &'a str,
    /// Stable for the box: it keys every unique id.
    pub box_id: &'a str,
    pub firmware: &'a str,
}

impl Names<'_> {
    fn node(&self) -> String {
        format!("keeppeek_{}", self.box_id)
    }

    fn config_topic(&self, component: &str, object: &str) -> String {
        format!("{}/{component}/{}/{object}/config", self.discovery_prefix, self.node())
    }

    fn box_device(&self) -> Value {
        json!({
            "identifiers": [self.node()],
            "name": "KeepPeek",
            "manufacturer": "KeepPeek",
            "model": "Network video recorder",
            "sw_version": self.firmware,
        })
    }

    fn camera_device(&self, c: &CameraInfo) -> Value {
        json!({
            "identifiers": [format!("{}_{}", self.node(), object_id(&c.name))],
            "name": c.name,
            "manufacturer": "KeepPeek",
            "model": c.model.as_deref().unwrap_or("Camera"),
            "via_device": self.node(),
        })
    }

    fn box_availability(&self) -> Value {
        json!([{ "topic": format!("{}/available", self.prefix) }])
    }

    fn camera_availability(&self, camera: &str) -> Value {
        json!([
            { "topic": format!("{}/available", self.prefix) },
            { "topic": format!("{}/{}/available", self.prefix, object_id(camera)) },
        ])
    }

    /// A camera's topic `<prefix>/<camera>/<rest>`.
    pub fn camera_topic(&self, camera: &str, rest: &str) -> String {
        format!("{}/{}/{rest}", self.prefix, object_id(camera))
    }

    /// The box's announcements.
    pub fn for_box(&self) -> Vec<Announcement> {
        let state = format!("{}/state", self.prefix);
        let sensor = |key: &str, name: &str, extra: Value| {
            let mut v = json!({
                "name": name,
                "unique_id": format!("{}_{key}", self.node()),
                "object_id": format!("keeppeek_{key}"),
                "state_topic": state,
                "value_template": format!("{{{{ value_json.{key} }}}}"),
                "availability": self.box_availability(),
                "device": self.box_device(),
                "entity_category": "diagnostic",
            });
            merge(&mut v, extra);
            (self.config_topic("sensor", key), v.to_string().into_bytes())
        };
        vec![
            sensor(
                "disk_used_percent",
                "Disk used",
                json!({ "unit_of_measurement": "%", "state_class": "measurement" }),
            ),
            sensor(
                "uptime_s",
                "Uptime",
                json!({ "unit_of_measurement": "s", "device_class": "duration", "state_class": "measurement" }),
            ),
            sensor("firmware", "Firmware", json!({})),
        ]
    }

    /// One camera's announcements.
    pub fn for_camera(&self, c: &CameraInfo) -> Vec<Announcement> {
        let cam = object_id(&c.name);
        let base = |key: &str, name: &str| {
            json!({
                "name": name,
                "unique_id": format!("{}_{cam}_{key}", self.node()),
                "object_id": format!("{cam}_{key}"),
                "availability": self.camera_availability(&c.name),
                "availability_mode": "all",
                "device": self.camera_device(c),
            })
        };
        let mut out = Vec::new();
        for label in c.labels.iter().take(limits::MQTT_LABELS_PER_CAMERA_MAX) {
            let key = object_id(label);
            let mut v = base(&key, label);
            merge(
                &mut v,
                json!({
                    "state_topic": self.camera_topic(&c.name, &key),
                    "payload_on": "ON",
                    "payload_off": "OFF",
                    "device_class": if key == "motion" { "motion" } else { "occupancy" },
                }),
            );
            out.push((self.config_topic("binary_sensor", &format!("{cam}_{key}")), v.to_string().into_bytes()));
        }
        let mut image = base("snapshot", "Snapshot");
        merge(
            &mut image,
            json!({ "image_topic": self.camera_topic(&c.name, "snapshot"), "content_type": "image/jpeg" }),
        );
        out.push((self.config_topic("image", &format!("{cam}_snapshot")), image.to_string().into_bytes()));
        let mut switch = base("continuous", "Continuous recording");
        merge(
            &mut switch,
            json!({
                "state_topic": self.camera_topic(&c.name, "continuous"),
                "command_topic": self.camera_topic(&c.name, "continuous/set"),
                "payload_on": "ON",
                "payload_off": "OFF",
                "icon": "mdi:record-rec",
            }),
        );
        out.push((self.config_topic("switch", &format!("{cam}_continuous")), switch.to_string().into_bytes()));
        let mut button = base("mark", "Mark an event");
        merge(
            &mut button,
            json!({ "command_topic": self.camera_topic(&c.name, "mark/press"), "payload_press": "PRESS", "icon": "mdi:bookmark-plus" }),
        );
        out.push((self.config_topic("button", &format!("{cam}_mark")), button.to_string().into_bytes()));
        let mut state = base("recording", "Recording");
        merge(&mut state, json!({ "state_topic": self.camera_topic(&c.name, "recording"), "icon": "mdi:harddisk" }));
        out.push((self.config_topic("sensor", &format!("{cam}_recording")), state.to_string().into_bytes()));
        out
    }

    /// The config topics a camera's announcements use (to remove them when it goes).
    pub fn camera_config_topics(&self, c: &CameraInfo) -> Vec<String> {
        self.for_camera(c).into_iter().map(|(t, _)| t).collect()
    }
}

fn merge(into: &mut Value, more: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), more) {
        a.extend(b);
    }
}

/// A command from the broker, on a topic the box subscribes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Home Assistant came online (`<discovery prefix>/status` = `online`): announce again.
    AssistantOnline,
    /// Continuous recording on or off for a camera (by its object id).
    Continuous { camera: String, on: bool },
    /// Post an event for a camera (by its object id).
    Mark { camera: String },
}

/// Why a message on a subscribed topic was not a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("the topic is over {} bytes", limits::MQTT_TOPIC_MAX_BYTES)]
    TopicTooLong,
    #[error("the payload is over {} bytes", limits::MQTT_COMMAND_MAX_BYTES)]
    PayloadTooLong,
    #[error("not a topic the box takes commands on")]
    NotMine,
    #[error("the payload is not one the command takes")]
    BadPayload,
}

/// The topic filters the box subscribes to.
pub fn subscriptions(prefix: &str, discovery_prefix: &str) -> Vec<String> {
    vec![format!("{discovery_prefix}/status"), format!("{prefix}/+/continuous/set"), format!("{prefix}/+/mark/press")]
}

/// Reads a message that came on a subscribed topic; bounded, never panics.
pub fn parse_command(
    prefix: &str,
    discovery_prefix: &str,
    topic: &str,
    payload: &[u8],
) -> Result<Option<Command>, CommandError> {
    if topic.len() > limits::MQTT_TOPIC_MAX_BYTES {
        return Err(CommandError::TopicTooLong);
    }
    if payload.len() > limits::MQTT_COMMAND_MAX_BYTES {
        return Err(CommandError::PayloadTooLong);
    }
    let text = std::str::from_utf8(payload).map_err(|_| CommandError::BadPayload)?.trim();
    if topic == format!("{discovery_prefix}/status") {
        // "offline" is Home Assistant going away: nothing to do.
        return Ok((text == "online").then_some(Command::AssistantOnline));
    }
    let rest = topic.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')).ok_or(CommandError::NotMine)?;
    let mut parts = rest.split('/');
    let (Some(camera), Some(what), action, None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(CommandError::NotMine);
    };
    if camera.is_empty() || object_id(camera) != camera {
        return Err(CommandError::NotMine);
    }
    match (what, action) {
        ("continuous", Some("set")) => match text {
            "ON" => Ok(Some(Command::Continuous { camera: camera.into(), on: true })),
            "OFF" => Ok(Some(Command::Continuous { camera: camera.into(), on: false })),
            _ => Err(CommandError::BadPayload),
        },
        ("mark", Some("press")) => match text {
            "PRESS" => Ok(Some(Command::Mark { camera: camera.into() })),
            _ => Err(CommandError::BadPayload),
        },
        _ => Err(CommandError::NotMine),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names<'static> {
        Names { prefix: "keeppeek", discovery_prefix: "homeassistant", box_id: "b0", firmware: "1.0" }
    }

    #[test]
    fn a_camera_is_one_device_with_its_entities_each_uniquely_named() {
        let c = CameraInfo { name: "Front Door".into(), model: None, labels: vec!["motion".into(), "person".into()] };
        let a = names().for_camera(&c);
        let topics: Vec<&str> = a.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            topics,
            [
                "homeassistant/binary_sensor/keeppeek_b0/front_door_motion/config",
                "homeassistant/binary_sensor/keeppeek_b0/front_door_person/config",
                "homeassistant/image/keeppeek_b0/front_door_snapshot/config",
                "homeassistant/switch/keeppeek_b0/front_door_continuous/config",
                "homeassistant/button/keeppeek_b0/front_door_mark/config",
                "homeassistant/sensor/keeppeek_b0/front_door_recording/config",
            ]
        );
        let ids: std::collections::BTreeSet<String> = a
            .iter()
            .map(|(_, p)| serde_json::from_slice::<Value>(p).unwrap()["unique_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), a.len(), "unique ids");
        let motion: Value = serde_json::from_slice(&a[0].1).unwrap();
        assert_eq!(motion["state_topic"], "keeppeek/front_door/motion");
        assert_eq!(motion["device"]["via_device"], "keeppeek_b0");
        assert_eq!(motion["device_class"], "motion");
    }

    #[test]
    fn commands_are_read_on_their_topics_only() {
        let p = |t: &str, b: &[u8]| parse_command("keeppeek", "homeassistant", t, b);
        assert_eq!(p("homeassistant/status", b"online"), Ok(Some(Command::AssistantOnline)));
        assert_eq!(p("homeassistant/status", b"offline"), Ok(None));
        assert_eq!(
            p("keeppeek/front_door/continuous/set", b"OFF"),
            Ok(Some(Command::Continuous { camera: "front_door".into(), on: false }))
        );
        assert_eq!(
            p("keeppeek/front_door/mark/press", b"PRESS"),
            Ok(Some(Command::Mark { camera: "front_door".into() }))
        );
        assert_eq!(p("keeppeek/front_door/continuous/set", b"maybe"), Err(CommandError::BadPayload));
        assert_eq!(p("keeppeek/Front Door/mark/press", b"PRESS"), Err(CommandError::NotMine));
        assert_eq!(p("keeppeek/a/b/c/d", b""), Err(CommandError::NotMine));
        assert_eq!(p("other/a/mark/press", b"PRESS"), Err(CommandError::NotMine));
        assert_eq!(p(&"k".repeat(limits::MQTT_TOPIC_MAX_BYTES + 1), b""), Err(CommandError::TopicTooLong));
        assert_eq!(
            p("keeppeek/a/mark/press", &[b'x'; limits::MQTT_COMMAND_MAX_BYTES + 1]),
            Err(CommandError::PayloadTooLong)
        );
        assert_eq!(p("keeppeek/a/mark/press", &[0xff, 0xfe]), Err(CommandError::BadPayload));
    }
}

//! The TOML config file, parsed into a typed, validated [`Config`].
//!
//! A config that KeepPeek cannot run is refused at start, with the file, the key path and
//! the reason (`cameras[2].main.url: scheme must be rtsp or file`), never a panic. Parsing
//! is bounded: the file's size is capped and every string and list is checked against
//! `src/limits.rs` before it is used.

pub mod archive;
pub mod camport;
pub mod change;
pub mod file;
pub mod mqtt;
pub mod plan;
mod size;
pub mod snapshot;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use size::parse_bytes;

use crate::limits;
pub use archive::ArchiveTarget;
pub use camport::CameraPortConfig;
pub use mqtt::MqttConfig;

/// Why a config cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file, or `<built-in>`.
    pub file: String,
    /// Key path of the offending value (`cameras[0].main.url`), or `line L, column C` for a
    /// syntax error, or empty for the file as a whole.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.file, self.key, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// RTP transport for one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    #[default]
    Tcp,
    Udp,
}

/// Where a stream's frames come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// An RTSP camera. The URL carries no credentials; they are in [`Camera`].
    Rtsp { url: url::Url, transport: Transport },
    /// A plain MP4 file looped at real time (tests that need no network).
    File { path: PathBuf },
    /// The clip built into the binary (the demo).
    Builtin,
}

pub use crate::base::{StreamKey, StreamKind};

/// How a stream is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordMode {
    /// Every frame, always.
    Continuous,
    /// Around events: from the pre-roll before the first to the post-roll after the last.
    Events,
    /// Not at all (live view only).
    Off,
}

impl RecordMode {
    pub fn name(self) -> &'static str {
        match self {
            RecordMode::Continuous => "continuous",
            RecordMode::Events => "events",
            RecordMode::Off => "off",
        }
    }
}

/// A validated camera.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Camera {
    pub name: String,
    /// How the main stream is recorded.
    pub record: RecordMode,
    /// How the sub stream is recorded (the camera's mode unless the stream says otherwise).
    pub record_sub: RecordMode,
    /// Of event recordings: how far before the first event and after the last they reach.
    pub pre_roll_ms: u32,
    pub post_roll_ms: u32,
    /// How long its events' footage is held against ordinary retention; 0: not held.
    pub keep_event_footage_days: u32,
    pub username: Option<String>,
    pub password: Option<String>,
    pub main: Source,
    pub sub: Option<Source>,
    /// The largest frame of the main stream (sub streams': [`limits::SUB_FRAME_MAX_BYTES`]).
    pub frame_max_bytes: usize,
    /// Its ONVIF device service, when it was added over ONVIF: its own events (motion and
    /// the like) are followed there with the camera's credentials.
    pub onvif: Option<url::Url>,
}

impl Camera {
    /// The largest frame stream `kind` may carry: a larger one is dropped and counted, so
    /// the budget can count the frames a stream holds.
    pub fn frame_max_bytes(&self, kind: StreamKind) -> usize {
        match kind {
            StreamKind::Main => self.frame_max_bytes,
            StreamKind::Sub => limits::SUB_FRAME_MAX_BYTES,
        }
    }

    /// The camera's streams, main first.
    pub fn streams(&self) -> impl Iterator<Item = (StreamKind, &Source)> {
        std::iter::once((StreamKind::Main, &self.main)).chain(self.sub.iter().map(|s| (StreamKind::Sub, s)))
    }

    /// How stream `kind` is recorded.
    pub fn mode(&self, kind: StreamKind) -> RecordMode {
        match kind {
            StreamKind::Main => self.record,
            StreamKind::Sub => self.record_sub,
        }
    }

    /// The streams that are recorded at all, with their modes.
    pub fn recorded_streams(&self) -> impl Iterator<Item = (StreamKind, RecordMode)> {
        self.streams().map(|(k, _)| (k, self.mode(k))).filter(|(_, m)| *m != RecordMode::Off)
    }
}

/// Caps of the pre-roll history (a board preset lowers them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preroll {
    pub stream_max_bytes: u64,
    pub total_max_bytes: u64,
}

impl Preroll {
    /// The caps a board of `ram_class_bytes` starts with: a stream's default, and the total
    /// in proportion to its RAM.
    pub fn for_ram_class(ram_class_bytes: u64) -> Preroll {
        let total = crate::base::pool::ceiling_for(limits::PREROLL_BYTES_PER_GIB, ram_class_bytes, 0)
            .min(limits::PREROLL_TOTAL_MAX_BYTES);
        Preroll { stream_max_bytes: limits::PREROLL_STREAM_DEFAULT_BYTES as u64, total_max_bytes: total as u64 }
    }
}

/// Default pre-roll and post-roll of event recordings.
pub const PRE_ROLL_DEFAULT_S: u32 = 5;
pub const POST_ROLL_DEFAULT_S: u32 = 10;

/// Retention caps, in bytes of stored media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub stream_max_bytes: u64,
    pub total_max_bytes: u64,
    /// The share of a stream's cap its events' footage may hold against retention.
    pub held_max_percent: u8,
}

impl Retention {
    /// The bytes of one stream that holds may keep.
    pub fn held_max_bytes(&self) -> u64 {
        self.stream_max_bytes / 100 * u64::from(self.held_max_percent)
    }
}

/// Default share of a stream's cap events may hold.
pub const HELD_MAX_PERCENT_DEFAULT: u8 = 50;
/// Default days a camera keeps its events' footage against ordinary retention.
pub const KEEP_EVENT_FOOTAGE_DAYS_DEFAULT: u32 = 14;

/// A validated config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Where the web face listens over plain HTTP; none: not over HTTP. With [`Config::https`]
    /// set, it answers `/healthz` and sends everything else on to HTTPS.
    pub listen: Option<std::net::SocketAddr>,
    /// Where the web face listens over HTTPS (`[https] listen`); none: no HTTPS.
    pub https: Option<std::net::SocketAddr>,
    /// Single sign-on providers (`[oidc.<id>]`), by id; at most [`limits::OIDC_PROVIDERS_MAX`].
    pub oidc: Vec<OidcProvider>,
    /// The MQTT broker (`[mqtt]`); none: nothing is published.
    pub mqtt: Option<MqttConfig>,
    /// The camera port (`[camera_port]`); none: cameras are on the LAN.
    pub camera_port: Option<CameraPortConfig>,
    /// The buckets recordings are archived to (`[archive.<id>]`), by id; at most
    /// [`limits::ARCHIVE_TARGETS_MAX`].
    pub archive: Vec<ArchiveTarget>,
    pub flush_interval_s: u64,
    pub require_sane_clock: bool,
    pub ram_class_bytes: u64,
    pub retention: Retention,
    pub cameras: Vec<Camera>,
    pub webrtc: Webrtc,
    pub preroll: Preroll,
    /// The recorder's shared pools.
    pub pools: Pools,
    /// Bytes of event snapshots kept; past this the oldest events go.
    pub events_max_bytes: u64,
}

/// The ceilings of the recorder's shared pools: by the RAM class unless the config lowers
/// them (`[pools]`). The ingest queues' pool holds this much more than each recorded
/// stream's newest frame (see [`Config::ingest_pool_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pools {
    /// Frames queued between ingest and the writers, every stream together.
    pub ingest_queues_max_bytes: u64,
}

impl Pools {
    pub fn for_ram_class(ram_class_bytes: u64) -> Pools {
        let ceiling = |per_gib, floor| crate::base::pool::ceiling_for(per_gib, ram_class_bytes, floor) as u64;
        Pools { ingest_queues_max_bytes: ceiling(limits::INGEST_QUEUE_BYTES_PER_GIB, limits::FRAME_DEFAULT_MAX_BYTES) }
    }
}

/// Default cap on event snapshots: 2,500 of 4K at ~420 KB.
pub const EVENTS_MAX_BYTES_DEFAULT: u64 = 1 << 30;

/// Live view over WebRTC: one UDP port for every session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Webrtc {
    /// The UDP port, on every LAN address; 0: no live view.
    pub port: u16,
    /// Also offer 127.0.0.1 (a browser on the box itself, tests).
    pub loopback: bool,
}

/// An OpenID Connect provider people may sign in with (`[oidc.<id>]`).
#[derive(Clone, PartialEq, Eq)]
pub struct OidcProvider {
    /// Its name in the config and URLs: lower-case letters, digits and `-`.
    pub id: String,
    /// What the login page's button says.
    pub name: String,
    /// The issuer, exactly as the provider names itself: `https://…` (plain `http://` only on
    /// this machine's loopback, for a development provider).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// The id token's claim whose values give a role (default `groups`).
    pub role_claim: String,
    /// Values of that claim that make an admin, and a viewer (`*`: anyone this provider signs
    /// in). Someone with neither is refused.
    pub admin_values: Vec<String>,
    pub viewer_values: Vec<String>,
    /// The provider's CA (PEM), when it is not one of the public roots.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for OidcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcProvider")
            .field("id", &self.id)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "set"))
            .finish_non_exhaustive()
    }
}

/// The default WebRTC port.
pub const WEBRTC_PORT_DEFAULT: u16 = 8189;

/// Default flush interval. Each flush is one fdatasync per open segment and one catalog
/// commit (a few 4 KiB pages): at 10 s that is under 1% of the writes of a 1 Mbit/s stream,
/// so flash wear is set by the video itself, while a power cut loses at most 10 s.
pub const FLUSH_INTERVAL_DEFAULT_S: u64 = 10;

// ---- the file's shape: what serde reads before validation ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    data_dir: String,
    listen: Option<String>,
    #[serde(default = "default_flush_interval_s")]
    flush_interval_s: u64,
    #[serde(default = "default_true")]
    require_sane_clock: bool,
    #[serde(default = "default_ram_class")]
    ram_class: RawBytes,
    retention: RawRetention,
    #[serde(default)]
    cameras: Vec<RawCamera>,
    #[serde(default)]
    https: RawHttps,
    #[serde(default)]
    oidc: std::collections::BTreeMap<String, RawOidc>,
    mqtt: Option<mqtt::RawMqtt>,
    camera_port: Option<camport::RawCameraPort>,
    #[serde(default)]
    archive: std::collections::BTreeMap<String, archive::RawArchive>,
    #[serde(default)]
    webrtc: RawWebrtc,
    #[serde(default)]
    preroll: RawPreroll,
    #[serde(default)]
    pools: RawPools,
    #[serde(default)]
    events: RawEvents,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOidc {
    name: Option<String>,
    issuer: String,
    client_id: String,
    client_secret: Option<String>,
    role_claim: Option<String>,
    admin_values: Option<RawValues>,
    viewer_values: Option<RawValues>,
    ca_pem: Option<String>,
}

/// A list of claim values: an array, or one string of values separated by commas.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawValues {
    List(Vec<String>),
    Text(String),
}

impl RawValues {
    fn resolve(self) -> Vec<String> {
        let list = match self {
            RawValues::List(l) => l,
            RawValues::Text(t) => t.split(',').map(str::to_string).collect(),
        };
        list.into_iter().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
    }
}

impl RawOidc {
    fn validate(self, id: String) -> Result<OidcProvider, Invalid> {
        let at = |key: &str| format!("oidc.{id}.{key}");
        let id_ok = !id.is_empty()
            && id.len() <= 32
            && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !id_ok {
            return Err((format!("oidc.{id}"), "a provider's id is 1 to 32 lower-case letters, digits and '-'".into()));
        }
        let issuer = url::Url::parse(&self.issuer).map_err(|e| (at("issuer"), format!("not an address: {e}")))?;
        if issuer.scheme() != "https" && !crate::oidc::token::is_loopback_http(&issuer) {
            return Err((at("issuer"), "an issuer is an https address".into()));
        }
        let small = |key: &str, v: &str| {
            if v.len() > limits::OIDC_FIELD_MAX_BYTES {
                Err((at(key), format!("at most {} bytes (OIDC_FIELD_MAX_BYTES)", limits::OIDC_FIELD_MAX_BYTES)))
            } else {
                Ok(())
            }
        };
        small("issuer", &self.issuer)?;
        small("client_id", &self.client_id)?;
        if self.client_id.trim().is_empty() {
            return Err((at("client_id"), "the client id the provider gave this box".into()));
        }
        if let Some(secret) = &self.client_secret {
            small("client_secret", secret)?;
        }
        if let Some(ca) = &self.ca_pem {
            if ca.len() > limits::TLS_UPLOAD_MAX_BYTES {
                return Err((at("ca_pem"), format!("at most {} KiB", limits::TLS_UPLOAD_MAX_BYTES >> 10)));
            }
            crate::oidc::fetch::trust(Some(ca)).map_err(|e| (at("ca_pem"), e))?;
        }
        let admin_values = self.admin_values.map(RawValues::resolve).unwrap_or_default();
        let viewer_values = self.viewer_values.map(RawValues::resolve).unwrap_or_default();
        if admin_values.is_empty() && viewer_values.is_empty() {
            return Err((at("admin_values"), "name the claim values that make an admin or a viewer".into()));
        }
        Ok(OidcProvider {
            name: self.name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| id.clone()),
            id,
            issuer: self.issuer,
            client_id: self.client_id,
            client_secret: self.client_secret.filter(|s| !s.is_empty()),
            role_claim: self.role_claim.unwrap_or_else(|| "groups".into()),
            admin_values,
            viewer_values,
            ca_pem: self.ca_pem.filter(|c| !c.trim().is_empty()),
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttps {
    /// The HTTPS port's address, such as `0.0.0.0:8443`.
    listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPools {
    ingest_queues_max_bytes: Option<RawBytes>,
    /// Read and ignored: a fragment's frames are written as they come, so there is no pool
    /// of fragments being gathered to size any more (configs that lowered it still load).
    fragments_max_bytes: Option<RawBytes>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    /// Bytes of event snapshots kept (oldest events go first).
    max_bytes: Option<RawBytes>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPreroll {
    stream_max_bytes: Option<RawBytes>,
    total_max_bytes: Option<RawBytes>,
}

/// A recording mode: `true` (continuous), `false` (off) or its name.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum RawMode {
    Flag(bool),
    Name(String),
}

impl RawMode {
    fn resolve(&self, key: &str) -> Result<RecordMode, Invalid> {
        match self {
            RawMode::Flag(true) => Ok(RecordMode::Continuous),
            RawMode::Flag(false) => Ok(RecordMode::Off),
            RawMode::Name(n) => match n.as_str() {
                "continuous" => Ok(RecordMode::Continuous),
                "events" => Ok(RecordMode::Events),
                "off" => Ok(RecordMode::Off),
                _ => Err((key.into(), format!("\"{n}\" is not a mode: continuous, events or off"))),
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebrtc {
    #[serde(default = "default_webrtc_port")]
    port: u16,
    #[serde(default)]
    loopback: bool,
}

impl Default for RawWebrtc {
    fn default() -> Self {
        RawWebrtc { port: WEBRTC_PORT_DEFAULT, loopback: false }
    }
}

fn default_webrtc_port() -> u16 {
    WEBRTC_PORT_DEFAULT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    stream_max_bytes: RawBytes,
    total_max_bytes: RawBytes,
    #[serde(default = "default_held_max_percent")]
    held_max_percent: u8,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCamera {
    name: String,
    #[serde(default = "default_mode")]
    record: RawMode,
    #[serde(default = "default_pre_roll_s")]
    pre_roll_s: u32,
    #[serde(default = "default_post_roll_s")]
    post_roll_s: u32,
    #[serde(default = "default_keep_event_footage_days")]
    keep_event_footage_days: u32,
    username: Option<String>,
    password: Option<String>,
    main: RawStream,
    sub: Option<RawStream>,
    /// The largest frame of the main stream (a 4K camera's I-frames want more than 1 MiB).
    frame_max_bytes: Option<RawBytes>,
    /// Its ONVIF device service (`http://…/onvif/device_service`).
    onvif: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStream {
    url: String,
    #[serde(default)]
    transport: Transport,
    /// This stream's own mode (else the camera's).
    record: Option<RawMode>,
}

/// A byte count written as a number or as a string with a unit ("8 GiB").
#[derive(Deserialize)]
#[serde(untagged)]
enum RawBytes {
    Number(u64),
    Text(String),
}

fn default_flush_interval_s() -> u64 {
    FLUSH_INTERVAL_DEFAULT_S
}
fn default_true() -> bool {
    true
}
fn default_mode() -> RawMode {
    RawMode::Flag(true)
}
fn default_pre_roll_s() -> u32 {
    PRE_ROLL_DEFAULT_S
}
fn default_post_roll_s() -> u32 {
    POST_ROLL_DEFAULT_S
}
fn default_held_max_percent() -> u8 {
    HELD_MAX_PERCENT_DEFAULT
}
fn default_keep_event_footage_days() -> u32 {
    KEEP_EVENT_FOOTAGE_DAYS_DEFAULT
}
fn default_ram_class() -> RawBytes {
    RawBytes::Number(1 << 30)
}

impl Config {
    /// The ingest queues' pool: the queued frames' share, and each recorded stream's newest
    /// frame at its ceiling (held until the next frame gives its duration).
    pub fn ingest_pool_bytes(&self) -> u64 {
        let newest: u64 = self
            .cameras
            .iter()
            .flat_map(|c| c.recorded_streams().map(move |(kind, _)| c.frame_max_bytes(kind) as u64))
            .sum();
        self.pools.ingest_queues_max_bytes + newest
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with_text(path).map(|(c, _)| c)
    }

    /// [`Config::load`], with the text it was read from.
    pub fn load_with_text(path: &Path) -> Result<(Config, String), ConfigError> {
        let file = path.display().to_string();
        let whole = |reason: String| ConfigError { file: file.clone(), key: String::new(), reason };
        let meta = std::fs::metadata(path).map_err(|e| whole(format!("cannot read: {e}")))?;
        if meta.len() > limits::CONFIG_FILE_MAX_BYTES {
            return Err(whole(format!(
                "file is {} bytes, over the maximum of {} (CONFIG_FILE_MAX_BYTES)",
                meta.len(),
                limits::CONFIG_FILE_MAX_BYTES
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| whole(format!("cannot read: {e}")))?;
        let config = Config::parse(&text, &file, path.parent().unwrap_or(Path::new(".")))?;
        Ok((config, text))
    }

    /// Parses and validates config text. `file` names it in errors; relative paths in it
    /// are taken relative to `base_dir`.
    pub fn parse(text: &str, file: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let err = |key: String, reason: String| ConfigError { file: file.to_string(), key, reason };
        // Read plainly first; only a file that fails is read again keeping the key path, for
        // the message (tracking the path costs about as much as the rest of the read).
        let raw: RawConfig = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(_) => {
                let de = toml::Deserializer::parse(text)
                    .map_err(|e| err(toml_position(text, &e), e.message().to_string()))?;
                let found: Result<RawConfig, _> = serde_path_to_error::deserialize(de);
                match found {
                    Ok(raw) => raw,
                    Err(e) => {
                        let key = e.path().to_string();
                        let inner = e.into_inner();
                        let key = if key == "." { toml_position(text, &inner) } else { key };
                        return Err(err(key, inner.message().trim().to_string()));
                    }
                }
            }
        };
        raw.validate(base_dir).map_err(|(key, reason)| err(key, reason))
    }

    /// The demo's config: the built-in camera recorded into `data_dir`.
    pub fn demo(data_dir: PathBuf, listen: std::net::SocketAddr) -> Config {
        Config {
            data_dir,
            listen: Some(listen),
            https: None,
            oidc: Vec::new(),
            mqtt: None,
            camera_port: None,
            archive: Vec::new(),
            flush_interval_s: FLUSH_INTERVAL_DEFAULT_S,
            require_sane_clock: false,
            ram_class_bytes: 1 << 30,
            retention: Retention {
                stream_max_bytes: 1 << 30,
                total_max_bytes: 1 << 30,
                held_max_percent: HELD_MAX_PERCENT_DEFAULT,
            },
            // The demo is watched from the box itself as often as from the LAN.
            webrtc: Webrtc { port: WEBRTC_PORT_DEFAULT, loopback: true },
            preroll: Preroll::for_ram_class(1 << 30),
            pools: Pools::for_ram_class(1 << 30),
            events_max_bytes: EVENTS_MAX_BYTES_DEFAULT,
            cameras: vec![Camera {
                name: "demo".into(),
                record: RecordMode::Continuous,
                record_sub: RecordMode::Continuous,
                pre_roll_ms: PRE_ROLL_DEFAULT_S * 1000,
                post_roll_ms: POST_ROLL_DEFAULT_S * 1000,
                keep_event_footage_days: KEEP_EVENT_FOOTAGE_DAYS_DEFAULT,
                username: None,
                password: None,
                main: Source::Builtin,
                sub: None,
                frame_max_bytes: limits::FRAME_DEFAULT_MAX_BYTES,
                onvif: None,
            }],
        }
    }
}

fn toml_position(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return String::new();
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("line {line}, column {column}")
}

type Invalid = (String, String);

impl RawBytes {
    fn resolve(&self, key: &str) -> Result<u64, Invalid> {
        match self {
            RawBytes::Number(n) => Ok(*n),
            RawBytes::Text(t) => parse_bytes(t).map_err(|reason| (key.to_string(), reason)),
        }
    }
}

impl RawConfig {
    fn validate(self, base_dir: &Path) -> Result<Config, Invalid> {
        if self.data_dir.trim().is_empty() {
            return Err(("data_dir".into(), "must not be empty".into()));
        }
        if !(1..=limits::FLUSH_INTERVAL_MAX_S).contains(&self.flush_interval_s) {
            return Err((
                "flush_interval_s".into(),
                format!("must be 1 to {} (FLUSH_INTERVAL_MAX_S)", limits::FLUSH_INTERVAL_MAX_S),
            ));
        }
        let ram_class_bytes = self.ram_class.resolve("ram_class")?;
        if ram_class_bytes < 64 << 20 {
            return Err(("ram_class".into(), "must be at least 64 MiB".into()));
        }
        let retention = Retention {
            stream_max_bytes: self.retention.stream_max_bytes.resolve("retention.stream_max_bytes")?,
            total_max_bytes: self.retention.total_max_bytes.resolve("retention.total_max_bytes")?,
            held_max_percent: self.retention.held_max_percent,
        };
        if retention.held_max_percent > limits::EVENT_HELD_MAX_PERCENT {
            return Err((
                "retention.held_max_percent".into(),
                format!("at most {} (EVENT_HELD_MAX_PERCENT)", limits::EVENT_HELD_MAX_PERCENT),
            ));
        }
        // A segment is an eighth of the cap (record::segment_bounds); below this floor a
        // segment would be a handful of fragments.
        let floor = limits::RETENTION_MIN_BYTES;
        for (key, v) in [
            ("retention.stream_max_bytes", retention.stream_max_bytes),
            ("retention.total_max_bytes", retention.total_max_bytes),
        ] {
            if v < floor {
                return Err((key.into(), format!("must be at least {floor} bytes (RETENTION_MIN_BYTES)")));
            }
        }
        if self.cameras.len() > limits::CAMERAS_MAX {
            return Err((
                "cameras".into(),
                format!("{} cameras, over the maximum of {} (CAMERAS_MAX)", self.cameras.len(), limits::CAMERAS_MAX),
            ));
        }
        let mut preroll = Preroll::for_ram_class(ram_class_bytes);
        let ceilings = Preroll {
            stream_max_bytes: limits::PREROLL_STREAM_MAX_BYTES as u64,
            total_max_bytes: limits::PREROLL_TOTAL_MAX_BYTES as u64,
        };
        let caps = [
            (
                "stream_max_bytes",
                &self.preroll.stream_max_bytes,
                (&mut preroll.stream_max_bytes, &ceilings.stream_max_bytes),
                "PREROLL_STREAM_MAX_BYTES",
            ),
            (
                "total_max_bytes",
                &self.preroll.total_max_bytes,
                (&mut preroll.total_max_bytes, &ceilings.total_max_bytes),
                "PREROLL_TOTAL_MAX_BYTES",
            ),
        ];
        for (key, raw, (into, ceiling), ceiling_name) in caps {
            let Some(raw) = raw else { continue };
            let key = format!("preroll.{key}");
            let v = raw.resolve(&key)?;
            if v > *ceiling {
                return Err((key, format!("at most {} bytes ({ceiling_name})", *ceiling)));
            }
            *into = v;
        }
        let mut pools = Pools::for_ram_class(ram_class_bytes);
        if let Some(raw) = &self.pools.fragments_max_bytes {
            raw.resolve("pools.fragments_max_bytes")?;
            tracing::warn!("pools.fragments_max_bytes is ignored: fragments are written as their frames come");
        }
        if let Some(raw) = &self.pools.ingest_queues_max_bytes {
            // A config may only lower the pool, and not below one frame at the default ceiling.
            let key = "pools.ingest_queues_max_bytes".to_string();
            let v = raw.resolve(&key)?;
            let floor = limits::FRAME_DEFAULT_MAX_BYTES as u64;
            if v > pools.ingest_queues_max_bytes {
                return Err((key, format!("at most {} bytes on this RAM class", pools.ingest_queues_max_bytes)));
            }
            if v < floor {
                return Err((key, format!("at least {floor} bytes (FRAME_DEFAULT_MAX_BYTES)")));
            }
            pools.ingest_queues_max_bytes = v;
        }
        let mut cameras: Vec<Camera> = Vec::with_capacity(self.cameras.len());
        for (i, c) in self.cameras.into_iter().enumerate() {
            let at = format!("cameras[{i}]");
            let cam = c.validate(&at, base_dir)?;
            if cameras.iter().any(|o| o.name == cam.name) {
                return Err((format!("{at}.name"), format!("\"{}\" is used by another camera", cam.name)));
            }
            cameras.push(cam);
        }
        let address = |key: &str, value: Option<String>, example: &str| {
            value
                .map(|l| {
                    l.parse().map_err(|_| (key.to_string(), format!("\"{l}\" is not an address such as {example}")))
                })
                .transpose()
        };
        let listen = address("listen", self.listen, "0.0.0.0:8080")?;
        let https = address("https.listen", self.https.listen, "0.0.0.0:8443")?;
        if self.oidc.len() > limits::OIDC_PROVIDERS_MAX {
            return Err((
                "oidc".into(),
                format!("at most {} providers (OIDC_PROVIDERS_MAX)", limits::OIDC_PROVIDERS_MAX),
            ));
        }
        let oidc = self.oidc.into_iter().map(|(id, raw)| raw.validate(id)).collect::<Result<Vec<_>, _>>()?;
        if self.archive.len() > limits::ARCHIVE_TARGETS_MAX {
            return Err((
                "archive".into(),
                format!("at most {} targets (ARCHIVE_TARGETS_MAX)", limits::ARCHIVE_TARGETS_MAX),
            ));
        }
        let names: Vec<&str> = cameras.iter().map(|c: &Camera| c.name.as_str()).collect();
        let archive =
            self.archive.into_iter().map(|(id, raw)| raw.validate(id, &names)).collect::<Result<Vec<_>, _>>()?;
        if https.is_some() && https == listen {
            return Err(("https.listen".into(), "HTTPS needs a port of its own, not listen's".into()));
        }
        Ok(Config {
            data_dir: base_dir.join(self.data_dir),
            listen,
            https,
            oidc,
            mqtt: self.mqtt.map(mqtt::RawMqtt::validate).transpose()?,
            camera_port: self.camera_port.map(camport::RawCameraPort::validate).transpose()?,
            archive,
            flush_interval_s: self.flush_interval_s,
            require_sane_clock: self.require_sane_clock,
            ram_class_bytes,
            retention,
            cameras,
            webrtc: Webrtc { port: self.webrtc.port, loopback: self.webrtc.loopback },
            preroll,
            pools,
            events_max_bytes: match &self.events.max_bytes {
                Some(b) => b.resolve("events.max_bytes")?,
                None => EVENTS_MAX_BYTES_DEFAULT,
            },
        })
    }
}

/// Whether `name` is fit for a camera: 1 to [`limits::CAMERA_NAME_MAX_BYTES`] of a-z, 0-9,
/// `-` and `_`, not starting with `-` (it names a directory, and keys in an archive).
pub fn camera_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= limits::CAMERA_NAME_MAX_BYTES
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.starts_with('-')
}

impl RawCamera {
    fn validate(self, at: &str, base_dir: &Path) -> Result<Camera, Invalid> {
        if !camera_name_ok(&self.name) {
            return Err((
                format!("{at}.name"),
                format!(
                    "must be 1 to {} characters of a-z, 0-9, '-' and '_' (it names a directory)",
                    limits::CAMERA_NAME_MAX_BYTES
                ),
            ));
        }
        for (key, v) in [("username", &self.username), ("password", &self.password)] {
            if v.as_ref().is_some_and(|v| v.len() > limits::CAMERA_CREDENTIAL_MAX_BYTES) {
                return Err((
                    format!("{at}.{key}"),
                    format!("longer than {} bytes (CAMERA_CREDENTIAL_MAX_BYTES)", limits::CAMERA_CREDENTIAL_MAX_BYTES),
                ));
            }
        }
        if self.username.is_some() != self.password.is_some() {
            return Err((format!("{at}.password"), "username and password go together".into()));
        }
        let record = self.record.resolve(&format!("{at}.record"))?;
        let stream_mode = |s: &RawStream, key: &str| s.record.as_ref().map_or(Ok(record), |m| m.resolve(key));
        let main_mode = stream_mode(&self.main, &format!("{at}.main.record"))?;
        let sub_mode = match &self.sub {
            Some(s) => stream_mode(s, &format!("{at}.sub.record"))?,
            None => RecordMode::Off,
        };
        if u64::from(self.pre_roll_s) * 1000 > u64::from(limits::PREROLL_MAX_MS) {
            return Err((
                format!("{at}.pre_roll_s"),
                format!("at most {} s (PREROLL_MAX_MS)", limits::PREROLL_MAX_MS / 1000),
            ));
        }
        if u64::from(self.post_roll_s) * 1000 > u64::from(limits::POSTROLL_MAX_MS) {
            return Err((
                format!("{at}.post_roll_s"),
                format!("at most {} s (POSTROLL_MAX_MS)", limits::POSTROLL_MAX_MS / 1000),
            ));
        }
        if self.keep_event_footage_days > limits::EVENT_FOOTAGE_KEEP_MAX_DAYS {
            return Err((
                format!("{at}.keep_event_footage_days"),
                format!("at most {} days (EVENT_FOOTAGE_KEEP_MAX_DAYS)", limits::EVENT_FOOTAGE_KEEP_MAX_DAYS),
            ));
        }
        let main = self.main.validate(&format!("{at}.main"), base_dir)?;
        let sub = self.sub.map(|s| s.validate(&format!("{at}.sub"), base_dir)).transpose()?;
        let frame_max_bytes = match &self.frame_max_bytes {
            None => limits::FRAME_DEFAULT_MAX_BYTES,
            Some(raw) => {
                let key = format!("{at}.frame_max_bytes");
                let v = raw.resolve(&key)?;
                if !(limits::SUB_FRAME_MAX_BYTES as u64..=limits::FRAME_MAX_BYTES as u64).contains(&v) {
                    return Err((
                        key,
                        format!(
                            "{} to {} bytes (SUB_FRAME_MAX_BYTES, FRAME_MAX_BYTES)",
                            limits::SUB_FRAME_MAX_BYTES,
                            limits::FRAME_MAX_BYTES
                        ),
                    ));
                }
                v as usize
            }
        };
        let onvif = match &self.onvif {
            Some(o) => {
                let u = url::Url::parse(o).map_err(|e| (format!("{at}.onvif"), format!("not an address: {e}")))?;
                let ok = matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some()
                    && u.username().is_empty()
                    && o.len() <= limits::CAMERA_URL_MAX_BYTES;
                if !ok {
                    return Err((
                        format!("{at}.onvif"),
                        "an http address of the camera's ONVIF device service, with no credentials in it".into(),
                    ));
                }
                Some(u)
            }
            None => None,
        };
        Ok(Camera {
            name: self.name,
            record: main_mode,
            record_sub: sub_mode,
            pre_roll_ms: self.pre_roll_s * 1000,
            post_roll_ms: self.post_roll_s * 1000,
            keep_event_footage_days: self.keep_event_footage_days,
            username: self.username,
            password: self.password,
            main,
            sub,
            frame_max_bytes,
            onvif,
        })
    }
}

/// A camera's RTSP address, checked as the config checks it: at most
/// [`limits::CAMERA_URL_MAX_BYTES`], `rtsp://` with a host and without credentials.
pub fn rtsp_url(text: &str) -> Result<url::Url, String> {
    if text.len() > limits::CAMERA_URL_MAX_BYTES {
        return Err(format!("longer than {} bytes (CAMERA_URL_MAX_BYTES)", limits::CAMERA_URL_MAX_BYTES));
    }
    let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    if url.scheme() != "rtsp" {
        return Err(format!("scheme must be rtsp, not \"{}\"", url.scheme()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials: set the camera's username and password".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    Ok(url)
}

impl RawStream {
    fn validate(self, at: &str, base_dir: &Path) -> Result<Source, Invalid> {
        let key = format!("{at}.url");
        if self.url.len() > limits::CAMERA_URL_MAX_BYTES {
            return Err((key, format!("longer than {} bytes (CAMERA_URL_MAX_BYTES)", limits::CAMERA_URL_MAX_BYTES)));
        }
        let url = url::Url::parse(&self.url).map_err(|e| (key.clone(), format!("not a URL: {e}")))?;
        match url.scheme() {
            "rtsp" => {
                let url = rtsp_url(&self.url).map_err(|why| (key, why))?;
                Ok(Source::Rtsp { url, transport: self.transport })
            }
            "file" => {
                let path = url.to_file_path().map_err(|()| (key.clone(), "not a local file path".into()))?;
                Ok(Source::File { path: base_dir.join(path) })
            }
            other => Err((key, format!("scheme must be rtsp or file, not \"{other}\""))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
data_dir = "data"
[retention]
stream_max_bytes = "1 GiB"
total_max_bytes = 4294967296
[[cameras]]
name = "front"
username = "admin"
password = "pw"
main = { url = "rtsp://192.0.2.1/main" }
sub = { url = "rtsp://192.0.2.1/sub", transport = "udp" }
[[cameras]]
name = "file-cam"
record = false
main = { url = "file:///clips/a.mp4" }
"#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, "test.toml", Path::new("/etc/kp"))
    }

    fn error_of(text: &str) -> String {
        parse(text).expect_err("must be refused").to_string()
    }

    #[test]
    fn archive_targets_are_read_up_to_their_ceiling() {
        let base = "data_dir = \"data\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n";
        let target = |id: usize| {
            format!(
                "[archive.t{id}]\nendpoint = \"http://127.0.0.1:9000\"\nbucket = \"nvr\"\naccess_key = \"a\"\nsecret_key = \"s\"\n"
            )
        };
        let all: String = (0..limits::ARCHIVE_TARGETS_MAX).map(target).collect();
        let c = parse(&format!("{base}{all}")).unwrap();
        assert_eq!(c.archive.len(), limits::ARCHIVE_TARGETS_MAX);
        assert_eq!(c.archive[0].id, "t0");
        let one_more = format!("{base}{all}{}", target(limits::ARCHIVE_TARGETS_MAX));
        assert!(error_of(&one_more).contains("ARCHIVE_TARGETS_MAX"), "{}", error_of(&one_more));
    }

    #[test]
    fn sign_in_providers_are_checked_and_bounded() {
        let provider = |id: &str, extra: &str| {
            format!(
                "[oidc.{id}]\nissuer = \"https://id.example\"\nclient_id = \"kp\"\nadmin_values = \"a, b\"\n{extra}"
            )
        };
        let base = "data_dir = \"data\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n";
        let c = parse(&format!("{base}{}", provider("home", "viewer_values = [\"*\"]\n"))).unwrap();
        assert_eq!(c.oidc[0].admin_values, ["a", "b"]);
        assert_eq!(
            (c.oidc[0].viewer_values.as_slice(), c.oidc[0].role_claim.as_str()),
            (&["*".to_string()][..], "groups")
        );
        let four: String = (0..limits::OIDC_PROVIDERS_MAX).map(|i| provider(&format!("p{i}"), "")).collect();
        assert_eq!(parse(&format!("{base}{four}")).unwrap().oidc.len(), limits::OIDC_PROVIDERS_MAX);
        let five = format!("{base}{four}{}", provider("p9", ""));
        assert!(error_of(&five).contains("at most 4 providers (OIDC_PROVIDERS_MAX)"), "{}", error_of(&five));
        let long = format!("client_secret = \"{}\"\n", "s".repeat(limits::OIDC_FIELD_MAX_BYTES + 1));
        assert!(error_of(&format!("{base}{}", provider("home", &long))).contains("oidc.home.client_secret"));
        let plain =
            format!("{base}[oidc.home]\nissuer = \"http://id.example\"\nclient_id = \"kp\"\nadmin_values = \"a\"\n");
        assert!(error_of(&plain).contains("an issuer is an https address"));
        assert!(error_of(&format!("{base}{}", provider("Home", ""))).contains("lower-case letters"));
        let no_roles = format!("{base}[oidc.home]\nissuer = \"https://id.example\"\nclient_id = \"kp\"\n");
        assert!(error_of(&no_roles).contains("name the claim values"));
        assert!(error_of(&format!("{base}{}", provider("home", "ca_pem = \"junk\"\n"))).contains("oidc.home.ca_pem"));
    }

    #[test]
    fn a_good_config_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.data_dir, Path::new("/etc/kp/data"));
        assert_eq!(c.flush_interval_s, FLUSH_INTERVAL_DEFAULT_S);
        assert!(c.require_sane_clock);
        assert_eq!(c.retention.stream_max_bytes, 1 << 30);
        assert_eq!(c.cameras.len(), 2);
        assert!(matches!(c.cameras[0].sub, Some(Source::Rtsp { transport: Transport::Udp, .. })));
        assert!(matches!(c.cameras[0].main, Source::Rtsp { transport: Transport::Tcp, .. }));
        assert_eq!(c.cameras[1].main, Source::File { path: "/clips/a.mp4".into() });
        assert_eq!(c.cameras[1].record, RecordMode::Off);
        assert_eq!((c.cameras[0].record, c.cameras[0].record_sub), (RecordMode::Continuous, RecordMode::Continuous));
        assert_eq!(c.cameras[0].pre_roll_ms, PRE_ROLL_DEFAULT_S * 1000);
        assert_eq!(c.preroll, Preroll::for_ram_class(c.ram_class_bytes));
        assert_eq!(c.preroll.total_max_bytes, 64 << 20, "the 1 GiB class's share");
    }

    #[test]
    fn event_footage_is_kept_two_weeks_on_half_a_streams_cap_unless_set_up_to_the_ceilings() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.cameras[0].keep_event_footage_days, KEEP_EVENT_FOOTAGE_DAYS_DEFAULT);
        assert_eq!(c.retention.held_max_percent, HELD_MAX_PERCENT_DEFAULT);
        assert_eq!(c.retention.held_max_bytes(), (1 << 30) / 100 * 50);
        let most = GOOD
            .replacen("name = \"file-cam\"", "name = \"file-cam\"\nkeep_event_footage_days = 3650", 1)
            .replacen("total_max_bytes = 4294967296", "total_max_bytes = 4294967296\nheld_max_percent = 90", 1);
        let c = parse(&most).unwrap();
        assert_eq!(c.cameras[1].keep_event_footage_days, limits::EVENT_FOOTAGE_KEEP_MAX_DAYS);
        assert_eq!(c.retention.held_max_percent, limits::EVENT_HELD_MAX_PERCENT);
    }

    #[test]
    fn recording_modes_per_camera_and_per_stream_with_pre_and_post_roll() {
        let text = GOOD
            .replace("password = \"pw\"", "password = \"pw\"\nrecord = \"events\"\npre_roll_s = 8\npost_roll_s = 0")
            .replace("transport = \"udp\"", "transport = \"udp\", record = \"off\"")
            .replace(
                "[[cameras]]\nname = \"file-cam\"",
                "[preroll]\ntotal_max_bytes = \"32 MiB\"\n[[cameras]]\nname = \"file-cam\"",
            );
        let c = parse(&text).unwrap();
        let front = &c.cameras[0];
        assert_eq!((front.record, front.record_sub), (RecordMode::Events, RecordMode::Off));
        assert_eq!((front.pre_roll_ms, front.post_roll_ms), (8000, 0));
        assert_eq!(front.recorded_streams().collect::<Vec<_>>(), [(StreamKind::Main, RecordMode::Events)]);
        assert_eq!(c.preroll.total_max_bytes, 32 << 20);
        assert_eq!(c.preroll.stream_max_bytes, limits::PREROLL_STREAM_DEFAULT_BYTES as u64);
        assert_eq!(c.events_max_bytes, EVENTS_MAX_BYTES_DEFAULT);
        let c = parse(&GOOD.replace("[retention]", "[events]\nmax_bytes = \"2 GiB\"\n[retention]")).unwrap();
        assert_eq!(c.events_max_bytes, 2 << 30);
    }

    #[test]
    fn each_mistake_names_the_key_and_the_reason() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "rtsp://192.0.2.1/main",
                "http://192.0.2.1/main",
                "test.toml: cameras[0].main.url: scheme must be rtsp or file",
            ),
            ("rtsp://192.0.2.1/main", "rtsp://u:p@192.0.2.1/main", "cameras[0].main.url: must not carry credentials"),
            ("rtsp://192.0.2.1/main", "not a url", "cameras[0].main.url: not a URL"),
            ("transport = \"udp\"", "transport = \"sctp\"", "cameras[0].sub.transport: unknown variant `sctp`"),
            ("name = \"front\"", "name = \"Front Door\"", "cameras[0].name: must be 1 to 32 characters"),
            ("name = \"file-cam\"", "name = \"front\"", "cameras[1].name: \"front\" is used by another camera"),
            ("\"1 GiB\"", "\"1 GB of love\"", "retention.stream_max_bytes: "),
            ("\"1 GiB\"", "\"1 KiB\"", "retention.stream_max_bytes: must be at least"),
            ("password = \"pw\"\n", "", "cameras[0].password: username and password go together"),
            ("data_dir = \"data\"", "data_dir = \"data\"\nflush_interval_s = 0", "flush_interval_s: must be 1 to 300"),
            ("data_dir = \"data\"", "data_dir = \"data\"\nflush_intervl_s = 5", "unknown field `flush_intervl_s`"),
            ("data_dir = \"data\"", "data_dir = 7", "data_dir: invalid type: integer `7`, expected a string"),
            ("[retention]", "[retention", "line 3, column"),
            ("data_dir = \"data\"", "", "missing field `data_dir`"),
            ("name = \"front\"", "name = \"abcdefghijklmnopqrstuvwxyz0123456\"", "cameras[0].name: must be 1 to 32"),
            (
                "password = \"pw\"",
                "password = \"{long}\"",
                "cameras[0].password: longer than 128 bytes (CAMERA_CREDENTIAL_MAX_BYTES)",
            ),
            (
                "rtsp://192.0.2.1/main",
                "rtsp://192.0.2.1/{url}",
                "cameras[0].main.url: longer than 1024 bytes (CAMERA_URL_MAX_BYTES)",
            ),
            ("record = false", "record = \"sometimes\"", "cameras[1].record: \"sometimes\" is not a mode"),
            (
                "name = \"file-cam\"",
                "name = \"file-cam\"\npre_roll_s = 31",
                "cameras[1].pre_roll_s: at most 30 s (PREROLL_MAX_MS)",
            ),
            (
                "name = \"file-cam\"",
                "name = \"file-cam\"\npost_roll_s = 4294967295",
                "cameras[1].post_roll_s: at most 600 s",
            ),
            (
                "name = \"file-cam\"",
                "name = \"file-cam\"\nkeep_event_footage_days = 3651",
                "cameras[1].keep_event_footage_days: at most 3650 days (EVENT_FOOTAGE_KEEP_MAX_DAYS)",
            ),
            (
                "total_max_bytes = 4294967296",
                "total_max_bytes = 4294967296\nheld_max_percent = 91",
                "retention.held_max_percent: at most 90 (EVENT_HELD_MAX_PERCENT)",
            ),
            (
                "data_dir = \"data\"",
                "data_dir = \"data\"\n[preroll]\nstream_max_bytes = \"65 MiB\"",
                "preroll.stream_max_bytes: at most 67108864 bytes (PREROLL_STREAM_MAX_BYTES)",
            ),
        ];
        for (from, to, want) in cases {
            assert!(GOOD.contains(from), "{from}");
            let to = to.replace("{long}", &"p".repeat(limits::CAMERA_CREDENTIAL_MAX_BYTES + 1));
            let to = to.replace("{url}", &"u".repeat(limits::CAMERA_URL_MAX_BYTES));
            let got = error_of(&GOOD.replacen(from, &to, 1));
            assert!(got.contains(want), "want {want:?} in {got:?}");
        }
    }

    #[test]
    fn the_pools_follow_the_ram_class_and_a_config_may_only_lower_them() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.pools, Pools::for_ram_class(c.ram_class_bytes));
        assert_eq!(c.pools.ingest_queues_max_bytes, limits::INGEST_QUEUE_BYTES_PER_GIB as u64);
        let with = |body: &str| GOOD.replace("[retention]", &format!("[pools]\n{body}\n[retention]"));
        let c = parse(&with("ingest_queues_max_bytes = \"8 MiB\"")).unwrap();
        assert_eq!(c.pools.ingest_queues_max_bytes, 8 << 20);
        // The fragment pool is gone: a config that lowered it still loads (a warning says so).
        let c = parse(&with("fragments_max_bytes = \"1 MiB\"")).unwrap();
        assert_eq!(c.pools, Pools::for_ram_class(c.ram_class_bytes));
        assert!(error_of(&with("fragments_max_bytes = \"lots\"")).contains("pools.fragments_max_bytes"));
        assert!(error_of(&with("ingest_queues_max_bytes = \"512 KiB\"")).contains("(FRAME_DEFAULT_MAX_BYTES)"));
        assert!(error_of(&with("queues = 1")).contains("unknown field"));
    }

    #[test]
    fn a_camera_may_raise_its_main_stream_frame_ceiling_up_to_the_firmware_s() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.cameras[0].frame_max_bytes(StreamKind::Main), limits::FRAME_DEFAULT_MAX_BYTES);
        assert_eq!(c.cameras[0].frame_max_bytes(StreamKind::Sub), limits::SUB_FRAME_MAX_BYTES);
        let with = |v: &str| GOOD.replacen("[[cameras]]\n", &format!("[[cameras]]\nframe_max_bytes = \"{v}\"\n"), 1);
        assert_eq!(parse(&with("4 MiB")).unwrap().cameras[0].frame_max_bytes, limits::FRAME_MAX_BYTES);
        assert!(error_of(&with("5 MiB")).contains("frame_max_bytes: 262144 to 4194304 bytes"));
        assert!(error_of(&with("100 KiB")).contains("(SUB_FRAME_MAX_BYTES, FRAME_MAX_BYTES)"));
        let bigger = parse(&with("4 MiB")).unwrap();
        assert_eq!(bigger.ingest_pool_bytes() - c.ingest_pool_bytes(), (3 << 20) as u64, "its newest frame");
    }

    #[test]
    fn too_many_cameras_is_refused_at_the_ceiling() {
        let mut text =
            String::from("data_dir = \"d\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n");
        for i in 0..=limits::CAMERAS_MAX {
            text.push_str(&format!("[[cameras]]\nname = \"c{i}\"\nmain = {{ url = \"rtsp://h/{i}\" }}\n"));
        }
        assert!(error_of(&text).contains(&format!("over the maximum of {} (CAMERAS_MAX)", limits::CAMERAS_MAX)));
        let at_ceiling = text.rsplitn(2, "[[cameras]]").last().unwrap().to_string();
        assert_eq!(parse(&at_ceiling).unwrap().cameras.len(), limits::CAMERAS_MAX);
    }

    #[test]
    fn the_annotated_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("keeppeek.example.toml");
        let c = Config::load(&path).unwrap();
        assert!(!c.cameras.is_empty());
    }

    #[test]
    fn an_oversized_file_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.toml");
        std::fs::write(&path, vec![b'#'; limits::CONFIG_FILE_MAX_BYTES as usize + 1]).unwrap();
        assert!(Config::load(&path).unwrap_err().reason.contains("CONFIG_FILE_MAX_BYTES"));
    }
}

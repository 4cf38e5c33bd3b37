//! MQTT: stored events and the box's state published to a broker (`[mqtt]`), for Home
//! Assistant and anything else that listens.
//!
//! - **Nothing waits on the broker.** An event's outbox row goes in with its own commit
//!   (`catalog::outbox`); the intake only wakes this room ([`Mqtt::stored`]). The room
//!   publishes the rows in order at QoS 1, at most [`limits::MQTT_INFLIGHT_MAX`]
//!   unacknowledged, and removes each once the broker acknowledges it: events stored while
//!   the broker is away wait in the catalog and go, in order, after it returns.
//! - **Availability**: the box's `<prefix>/available` is `online` (retained) once connected,
//!   and the broker publishes the will, `offline` (retained), when the box goes without a
//!   word (a crash, a power cut, a cable pulled).
//! - **Reconnects forever**, waiting from [`limits::MQTT_RECONNECT_MIN_MS`] doubling to
//!   [`limits::MQTT_RECONNECT_MAX_MS`], each wait ±25 % so boxes that lost one broker do not
//!   come back in step; a settings change connects again at once.

pub mod discovery;
pub mod home;
pub mod link;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::{Packet, PubAck, Publish};
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::catalog::events::EventRecord;
use crate::config::MqttConfig;
use crate::limits;
use link::{Dial, Link, LinkError};

/// Counters and state, for the UI and `/metrics`.
#[derive(Debug, Default)]
pub struct MqttStats {
    pub connected: AtomicBool,
    pub connects: AtomicU64,
    /// Events published (each revision once per time sent).
    pub events_sent: AtomicU64,
    /// Events the broker acknowledged.
    pub events_acked: AtomicU64,
    /// Outbox rows whose event was gone before it could be sent.
    pub events_gone: AtomicU64,
    /// Why the last connection failed or ended.
    pub last_error: Mutex<Option<String>>,
}

/// The room.
pub struct Mqtt {
    catalog: Arc<Catalog>,
    wake: Arc<Notify>,
    settings: watch::Sender<Option<Arc<MqttConfig>>>,
    /// The box around (cameras, data, orders): Home Assistant's part runs once it is given.
    around: std::sync::OnceLock<home::Around>,
    /// A removal of delivered rows is under way.
    removing: Arc<AtomicBool>,
    pub stats: MqttStats,
}

/// What a packet id in flight stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// An outbox row.
    Event(u64),
    /// A state (availability and the like): nothing to remove once acknowledged.
    State,
}

impl Mqtt {
    pub fn new(catalog: Arc<Catalog>, config: Option<MqttConfig>) -> Arc<Mqtt> {
        let (settings, _) = watch::channel(config.map(Arc::new));
        Arc::new(Mqtt {
            catalog,
            wake: Arc::new(Notify::new()),
            settings,
            around: std::sync::OnceLock::new(),
            removing: Arc::default(),
            stats: MqttStats::default(),
        })
    }

    /// What the intake wakes once an event revision is stored (its outbox row with it).
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Gives the room the box around it, once: from then on it announces the cameras to Home
    /// Assistant, publishes their states and takes commands.
    pub fn set_around(&self, around: home::Around) {
        let _ = self.around.set(around);
    }

    /// The broker's settings now.
    pub fn config(&self) -> Option<Arc<MqttConfig>> {
        self.settings.borrow().clone()
    }

    /// The broker's settings from now on (a config change): the connection is made again
    /// with them, or ended when there are none.
    pub fn set_config(&self, config: Option<MqttConfig>) -> Result<(), crate::catalog::CatalogError> {
        self.catalog.set_outbox(config.is_some())?;
        self.settings.send_replace(config.map(Arc::new));
        Ok(())
    }

    /// Runs until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut settings = self.settings.subscribe();
        let mut wait_ms = limits::MQTT_RECONNECT_MIN_MS;
        loop {
            let config = settings.borrow_and_update().clone();
            // A connection ends well only at the stop; Ok here is otherwise the settings
            // changing meanwhile (connect again at once).
            let ended = match &config {
                None => Ok(()),
                Some(c) => tokio::select! {
                    r = self.connection(c, &mut shutdown) => r,
                    _ = settings.changed() => Ok(()),
                },
            };
            if *shutdown.borrow() {
                return;
            }
            self.stats.connected.store(false, Ordering::Relaxed);
            match ended {
                Ok(()) if config.is_some() => {
                    wait_ms = limits::MQTT_RECONNECT_MIN_MS;
                    continue;
                }
                Ok(()) => {}
                Err(e) => {
                    let why = e.to_string();
                    warn!(error = %why, wait_ms, "MQTT: connecting again soon");
                    *self.stats.last_error.lock().expect("lock") = Some(why);
                }
            }
            let wait = Duration::from_millis(jittered(wait_ms));
            tokio::select! {
                _ = tokio::time::sleep(wait), if config.is_some() => wait_ms = next_wait_ms(wait_ms),
                _ = settings.changed() => wait_ms = limits::MQTT_RECONNECT_MIN_MS,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// One connection, from dial to its end. At shutdown the box says `offline` itself and
    /// disconnects (the will is for when it cannot).
    async fn connection(&self, config: &MqttConfig, shutdown: &mut watch::Receiver<bool>) -> Result<(), LinkError> {
        let dial = dial_of(config)?;
        let mut link = tokio::select! {
            l = Link::open(&dial) => l?,
            _ = shutdown.changed() => return Ok(()),
        };
        self.stats.connected.store(true, Ordering::Relaxed);
        self.stats.connects.fetch_add(1, Ordering::Relaxed);
        info!(broker = %format!("{}:{}", dial.host, dial.port), "MQTT: connected");
        let keep_alive = Duration::from_secs(u64::from(dial.keep_alive_s));
        self.session(&mut link, config, keep_alive, shutdown).await
    }

    /// A connection once the broker accepted it: until it fails, or the stop.
    async fn session(
        &self,
        link: &mut Link,
        config: &MqttConfig,
        keep_alive: Duration,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), LinkError> {
        let mut s =
            Session { link, inflight: VecDeque::new(), next_pkid: 1, sent_upto: 0, acked_upto: 0, removed_upto: 0 };
        s.publish_state(&topic(&config.prefix, "available"), b"online".to_vec(), true)?;
        let mut home = home::Home::default();
        if let Some(around) = self.around.get() {
            home.on_connect(&mut s, &home::With { config, around, catalog: &self.catalog })?;
        }
        s.link.flush().await?;
        let tick_every = Duration::from_millis(limits::MQTT_STATE_TICK_MS);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + tick_every, tick_every);
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + keep_alive, keep_alive);
        // A PINGRESP is due by then: half the keep-alive after the ping.
        let mut pong_due: Option<tokio::time::Instant> = None;
        // Whatever waits in the outbox goes first.
        self.wake.notify_one();
        loop {
            let room = s.inflight.len() < limits::MQTT_INFLIGHT_MAX;
            tokio::select! {
                p = s.link.next() => match p? {
                    Packet::PubAck(PubAck { pkid }) => self.acked(&mut s, pkid),
                    Packet::PingResp => pong_due = None,
                    Packet::Publish(p) => {
                        if p.qos == QoS::AtLeastOnce {
                            s.link.queue(&Packet::PubAck(PubAck::new(p.pkid)))?;
                        }
                        if let Some(around) = self.around.get() {
                            home.on_message(&mut s, &home::With { config, around, catalog: &self.catalog }, &p)?;
                        }
                    }
                    Packet::Disconnect => return Err(LinkError::Closed),
                    _ => {}
                },
                _ = self.wake.notified(), if room => self.fill(&mut s, config, &mut home).await?,
                _ = tick.tick() => {
                    self.remove_delivered(&mut s, true);
                    if let Some(around) = self.around.get() {
                        home.tick(&mut s, &home::With { config, around, catalog: &self.catalog })?;
                    }
                }
                _ = shutdown.changed() => {
                    let upto = Self::removable(&s);
                    if upto > s.removed_upto {
                        let _ = self.catalog.outbox_delivered(upto);
                    }
                    let mut p = Publish::new(topic(&config.prefix, "available"), QoS::AtMostOnce, "offline");
                    p.retain = true;
                    s.link.queue(&Packet::Publish(p))?;
                    s.link.queue(&Packet::Disconnect)?;
                    let _ = tokio::time::timeout(Duration::from_millis(limits::MQTT_GOODBYE_MS), s.link.flush()).await;
                    return Ok(());
                }
                _ = ping.tick() => {
                    s.link.queue(&Packet::PingReq)?;
                    pong_due.get_or_insert(tokio::time::Instant::now() + keep_alive / 2);
                }
                _ = tokio::time::sleep_until(pong_due.unwrap_or_else(tokio::time::Instant::now)), if pong_due.is_some() => {
                    return Err(LinkError::Timeout((keep_alive / 2).as_millis() as u64));
                }
            }
            s.link.flush().await?;
        }
    }

    /// Sends outbox rows after the last sent, while there is room in flight. The events go
    /// to the broker first; Home Assistant's states that follow from them (labels, the last
    /// event, the snapshot, read from disk) after.
    async fn fill(&self, s: &mut Session<'_>, config: &MqttConfig, home: &mut home::Home) -> Result<(), LinkError> {
        let room = limits::MQTT_INFLIGHT_MAX.saturating_sub(s.inflight.len());
        let rows = self.catalog.outbox_after(s.sent_upto, room).map_err(|e| LinkError::Io(e.to_string()))?;
        let full = rows.len() == room;
        let mut sent = Vec::with_capacity(rows.len());
        for (seq, record) in rows {
            s.sent_upto = seq;
            let Some(r) = record else {
                self.stats.events_gone.fetch_add(1, Ordering::Relaxed);
                // Nothing to send: acknowledged at once, as it were.
                s.inflight.push_back((0, Sent::Event(seq)));
                continue;
            };
            let pkid = s.pkid();
            let payload = event_payload(&r);
            let mut p = Publish::new(topic(&config.prefix, "events"), QoS::AtLeastOnce, payload.clone());
            p.pkid = pkid;
            s.link.queue(&Packet::Publish(p))?;
            s.inflight.push_back((pkid, Sent::Event(seq)));
            self.stats.events_sent.fetch_add(1, Ordering::Relaxed);
            sent.push((r, payload));
        }
        s.settle_gone();
        if let Some(around) = self.around.get()
            && !sent.is_empty()
        {
            s.link.flush().await?;
            let now_us = crate::clock::Clocks::wall_us(&crate::clock::RealClocks);
            for (r, payload) in &sent {
                home.on_event(s, &home::With { config, around, catalog: &self.catalog }, r, payload, now_us).await?;
            }
        }
        if full {
            // More may wait: the next acknowledgement makes room and looks again.
            self.wake.notify_one();
        }
        Ok(())
    }

    /// The broker acknowledged `pkid`: its outbox row may go (with every earlier one).
    fn acked(&self, s: &mut Session<'_>, pkid: u16) {
        let Some(i) = s.inflight.iter().position(|(p, _)| *p == pkid) else { return };
        let (_, sent) = s.inflight.remove(i).expect("found");
        if let Sent::Event(seq) = sent {
            self.stats.events_acked.fetch_add(1, Ordering::Relaxed);
            s.acked_upto = s.acked_upto.max(seq);
        }
        s.settle_gone();
        self.remove_delivered(s, false);
        self.wake.notify_one();
    }

    /// The outbox rows every one of which, and every row before them, the broker
    /// acknowledged.
    fn removable(s: &Session<'_>) -> u64 {
        let oldest_waiting = s.inflight.iter().find_map(|(_, x)| match x {
            Sent::Event(seq) => Some(*seq),
            Sent::State => None,
        });
        match oldest_waiting {
            Some(w) => s.acked_upto.min(w - 1),
            None => s.acked_upto,
        }
    }

    /// Removes delivered rows from the outbox, off the room's loop: the removal is a commit,
    /// which may wait behind the intake's durable ones, and the next events must not. One
    /// removal at a time; the rows acknowledged meanwhile go with the next (an
    /// acknowledgement or the state tick). Unless `every`, it waits for
    /// [`limits::MQTT_OUTBOX_REMOVE_ROWS`] rows while events are in flight. A removal lost to
    /// a power cut sends its rows again (QoS 1 is at least once).
    fn remove_delivered(&self, s: &mut Session<'_>, every: bool) {
        let upto = Self::removable(s);
        let in_flight = s.inflight.iter().any(|(_, x)| matches!(x, Sent::Event(_)));
        let enough = every || !in_flight || upto - s.removed_upto.min(upto) >= limits::MQTT_OUTBOX_REMOVE_ROWS;
        if upto <= s.removed_upto || !enough || self.removing.swap(true, Ordering::AcqRel) {
            return;
        }
        s.removed_upto = upto;
        let (catalog, removing) = (self.catalog.clone(), self.removing.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = catalog.outbox_delivered(upto) {
                warn!(error = %e, "MQTT: delivered events could not be removed from the outbox; they go again after a reconnect");
            }
            removing.store(false, Ordering::Release);
        });
    }
}

/// The wait after another failure: double the last, at most
/// [`limits::MQTT_RECONNECT_MAX_MS`].
fn next_wait_ms(ms: u64) -> u64 {
    (ms * 2).min(limits::MQTT_RECONNECT_MAX_MS)
}

/// A connection's state.
pub(super) struct Session<'a> {
    pub(super) link: &'a mut Link,
    /// Packet ids not yet acknowledged, in the order sent (0: an outbox row with nothing to
    /// send, settled at once).
    inflight: VecDeque<(u16, Sent)>,
    next_pkid: u16,
    /// The last outbox row sent (or settled).
    sent_upto: u64,
    /// The highest outbox row acknowledged.
    acked_upto: u64,
    /// The outbox rows up to this one are removed (or being removed).
    removed_upto: u64,
}

impl Session<'_> {
    /// The next packet id not in flight (1 to 65,535).
    pub(super) fn pkid(&mut self) -> u16 {
        loop {
            let p = self.next_pkid;
            self.next_pkid = self.next_pkid.checked_add(1).unwrap_or(1);
            if !self.inflight.iter().any(|(q, _)| *q == p) {
                return p;
            }
        }
    }

    /// Rows with nothing to send count as acknowledged.
    fn settle_gone(&mut self) {
        while let Some(i) = self.inflight.iter().position(|(p, _)| *p == 0) {
            if let Some((_, Sent::Event(seq))) = self.inflight.remove(i) {
                self.acked_upto = self.acked_upto.max(seq);
            }
        }
    }

    /// Queues a publish at QoS 0 (a state: the next one replaces it anyway).
    pub(super) fn publish_quiet(&mut self, topic: &str, payload: Vec<u8>, retain: bool) -> Result<(), LinkError> {
        let mut p = Publish::new(topic, QoS::AtMostOnce, payload);
        p.retain = retain;
        self.link.queue(&Packet::Publish(p))
    }

    /// Queues a state at QoS 1.
    fn publish_state(&mut self, topic: &str, payload: Vec<u8>, retain: bool) -> Result<(), LinkError> {
        let pkid = self.pkid();
        let mut p = Publish::new(topic, QoS::AtLeastOnce, payload);
        p.pkid = pkid;
        p.retain = retain;
        self.link.queue(&Packet::Publish(p))?;
        self.inflight.push_back((pkid, Sent::State));
        Ok(())
    }
}

/// `<prefix>/<rest>`.
pub fn topic(prefix: &str, rest: &str) -> String {
    format!("{}/{rest}", prefix.trim_end_matches('/'))
}

/// `ms` ± 25 %.
fn jittered(ms: u64) -> u64 {
    let mut b = [0u8; 2];
    getrandom::fill(&mut b).expect("the OS random source");
    let r = u64::from(u16::from_le_bytes(b)); // 0..65,535
    let spread = ms / 4;
    ms - spread + (2 * spread * r) / 65_535
}

fn dial_of(c: &MqttConfig) -> Result<Dial, LinkError> {
    let tls = if c.tls { Some(crate::oidc::fetch::trust(c.ca_pem.as_deref()).map_err(LinkError::Tls)?) } else { None };
    Ok(Dial {
        host: c.host.clone(),
        port: c.port,
        tls,
        client_id: c.client_id.clone(),
        login: c.username.clone().map(|u| (u, c.password.clone().unwrap_or_default())),
        will_topic: topic(&c.prefix, "available"),
        keep_alive_s: limits::MQTT_KEEP_ALIVE_S,
    })
}

/// `YYYY-MM-DDThh:mm:ss.mmmZ` for UTC µs.
pub fn rfc3339_ms(us: i64) -> String {
    let s = us.div_euclid(1_000_000);
    let ms = us.rem_euclid(1_000_000) / 1_000;
    let text = crate::onvif::soap::utc_text(s);
    format!("{}.{ms:03}Z", text.trim_end_matches('Z'))
}

/// What an event's publication says (JSON).
pub fn event_payload(r: &EventRecord) -> Vec<u8> {
    let e = &r.envelope;
    let snapshot = r.snapshot.as_ref().map(|_| format!("/api/events/{}/snapshot?rev={}", r.id, r.rev));
    serde_json::json!({
        "id": r.id,
        "rev": r.rev,
        "camera": e.camera,
        "labels": e.labels,
        "score": e.score,
        "time": rfc3339_ms(e.time()),
        "time_us": e.time(),
        "end_us": e.end_us,
        "text": e.text,
        "snapshot_url": snapshot,
        "event_url": format!("/#/events/{}", r.id),
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use rumqttc::mqttbytes::v4::{ConnAck, ConnectReturnCode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn waits_double_from_the_first_to_the_ceiling_and_stay() {
        let mut waits = vec![limits::MQTT_RECONNECT_MIN_MS];
        while *waits.last().unwrap() < limits::MQTT_RECONNECT_MAX_MS {
            waits.push(next_wait_ms(*waits.last().unwrap()));
            assert!(waits.len() < 64, "{waits:?}");
        }
        assert!(waits.windows(2).all(|w| w[1] == (w[0] * 2).min(limits::MQTT_RECONNECT_MAX_MS)), "{waits:?}");
        assert_eq!(next_wait_ms(limits::MQTT_RECONNECT_MAX_MS), limits::MQTT_RECONNECT_MAX_MS);
    }

    #[test]
    fn waits_are_jittered_a_quarter_either_way() {
        for _ in 0..1000 {
            let w = jittered(1000);
            assert!((750..=1250).contains(&w), "{w}");
        }
    }

    fn record(id: u64) -> EventRecord {
        let envelope = serde_json::from_value(serde_json::json!({
            "camera": "front", "time_us": 1_800_000_000_000_000i64, "labels": ["person"], "text": format!("e{id}")
        }))
        .unwrap();
        EventRecord { id, rev: 1, principal: "token:1".into(), received_us: 0, envelope, snapshot: None, hold: None }
    }

    /// Packets the fake broker reads until none comes for `quiet`.
    async fn read_until_quiet(s: &mut tokio::net::TcpStream, buf: &mut BytesMut, quiet: Duration) -> Vec<Packet> {
        let mut out = Vec::new();
        loop {
            while let Some(p) = link::take_packet(buf).unwrap() {
                out.push(p);
            }
            match tokio::time::timeout(quiet, s.read_buf(buf)).await {
                Ok(Ok(n)) if n > 0 => continue,
                _ => return out,
            }
        }
    }

    /// A room connected to a fake broker on a socket of the test: the room, the broker's end
    /// and what it has read.
    async fn connected(
        catalog: Arc<Catalog>,
    ) -> (Arc<Mqtt>, watch::Sender<bool>, tokio::task::JoinHandle<()>, tokio::net::TcpStream, BytesMut) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let config: crate::config::MqttConfig = {
            let raw: crate::config::mqtt::RawMqtt =
                toml::from_str(&format!("host = \"127.0.0.1\"\nport = {port}\nclient_id = \"t\"")).unwrap();
            raw.validate().unwrap()
        };
        let mqtt = Mqtt::new(catalog, Some(config));
        let (stop_tx, stop_rx) = watch::channel(false);
        let room = tokio::spawn(mqtt.clone().run(stop_rx));
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        let first = read_until_quiet(&mut s, &mut buf, Duration::from_millis(300)).await;
        assert!(matches!(first.first(), Some(Packet::Connect(_))), "{first:?}");
        let mut ack = BytesMut::new();
        Packet::ConnAck(ConnAck::new(ConnectReturnCode::Success, false)).write(&mut ack, 16).unwrap();
        s.write_all(&ack).await.unwrap();
        (mqtt, stop_tx, room, s, buf)
    }

    /// The room, its stop, its task, the broker's end, and the catalog's directory.
    type InSession = (
        Arc<Mqtt>,
        watch::Sender<bool>,
        tokio::task::JoinHandle<Result<(), LinkError>>,
        tokio::io::DuplexStream,
        tempfile::TempDir,
    );

    /// A room in session with an in-memory broker of `capacity` bytes a way, on tokio's
    /// paused clock: the room's task, its stop, and the broker's end.
    fn in_session(capacity: usize) -> InSession {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        let raw: crate::config::mqtt::RawMqtt = toml::from_str("host = \"127.0.0.1\"\nclient_id = \"t\"").unwrap();
        let config = raw.validate().unwrap();
        let mqtt = Mqtt::new(catalog, Some(config.clone()));
        let (ours, broker) = tokio::io::duplex(capacity);
        let (stop_tx, mut stop) = watch::channel(false);
        let room = mqtt.clone();
        let task = tokio::spawn(async move {
            let mut link = Link::over(Box::new(ours));
            let keep_alive = Duration::from_secs(u64::from(limits::MQTT_KEEP_ALIVE_S));
            room.session(&mut link, &config, keep_alive, &mut stop).await
        });
        (mqtt, stop_tx, task, broker, dir)
    }

    /// What the in-memory broker reads until nothing more comes for `quiet` (paused clock).
    async fn broker_reads(b: &mut tokio::io::DuplexStream, buf: &mut BytesMut, quiet: Duration) -> Vec<Packet> {
        let mut out = Vec::new();
        loop {
            while let Some(p) = link::take_packet(buf).unwrap() {
                out.push(p);
            }
            match tokio::time::timeout(quiet, b.read_buf(buf)).await {
                Ok(Ok(n)) if n > 0 => continue,
                _ => return out,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_labels_sensor_goes_off_its_time_after_the_event_at_the_next_state_tick() {
        let (mqtt, _stop, task, mut broker, dir) = in_session(64 << 10);
        // The room's Home Assistant part, with camera "front" running.
        let cameras = crate::cameras::Cameras::main_streams(&["front"]);
        let (orders, _orders) = home::orders();
        mqtt.set_around(home::Around { cameras, data_dir: dir.path().to_path_buf(), box_id: "b".into(), orders });
        // An event of now, waiting in the outbox.
        mqtt.catalog.set_outbox(true).unwrap();
        let mut r = record(1);
        r.envelope = serde_json::from_value(serde_json::json!({
            "camera": "front", "time_us": crate::clock::Clocks::wall_us(&crate::clock::RealClocks), "labels": ["person"]
        }))
        .unwrap();
        mqtt.catalog.put_events(&[r]).unwrap();
        mqtt.wake.notify_one();
        let started = tokio::time::Instant::now();
        let (mut on, mut off) = (None, None);
        let mut buf = BytesMut::new();
        while off.is_none() {
            assert!(started.elapsed() < Duration::from_secs(120), "no OFF");
            for p in broker_reads(&mut broker, &mut buf, Duration::from_millis(500)).await {
                match p {
                    Packet::Publish(p) if p.topic == "keeppeek/front/person" && p.retain => match p.payload.as_ref() {
                        b"ON" => on = on.or(Some(started.elapsed())),
                        b"OFF" => off = off.or(Some(started.elapsed())),
                        _ => {}
                    },
                    // Answered, so the connection lives.
                    Packet::PingReq => {
                        let mut out = BytesMut::new();
                        Packet::PingResp.write(&mut out, 16).unwrap();
                        broker.write_all(&out).await.unwrap();
                    }
                    _ => {}
                }
            }
        }
        let (on, off) = (on.expect("ON before OFF"), off.unwrap());
        let lit = off - on;
        let (on_for, tick) =
            (Duration::from_secs(limits::MQTT_LABEL_ON_S), Duration::from_millis(limits::MQTT_STATE_TICK_MS));
        assert!(
            lit >= on_for - Duration::from_secs(1) && lit <= on_for + tick + Duration::from_millis(600),
            "on for {lit:?}"
        );
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_broker_that_stops_answering_pings_is_left_half_a_keep_alive_after_the_ping() {
        let (_mqtt, _stop, task, mut broker, _dir) = in_session(64 << 10);
        let started = tokio::time::Instant::now();
        let mut buf = BytesMut::new();
        let first = broker_reads(&mut broker, &mut buf, Duration::from_millis(100)).await;
        assert!(matches!(first.as_slice(), [Packet::Publish(p)] if p.topic == "keeppeek/available"), "{first:?}");
        // The ping comes one keep-alive in, and is never answered.
        let keep_alive = Duration::from_secs(u64::from(limits::MQTT_KEEP_ALIVE_S));
        let mut pinged = None;
        while pinged.is_none() {
            for p in broker_reads(&mut broker, &mut buf, Duration::from_millis(10)).await {
                if matches!(p, Packet::PingReq) {
                    pinged = Some(started.elapsed());
                }
            }
        }
        assert_eq!(pinged.unwrap().as_secs(), keep_alive.as_secs());
        let ended = task.await.unwrap();
        assert_eq!(ended, Err(LinkError::Timeout((keep_alive / 2).as_millis() as u64)));
        assert_eq!(started.elapsed().as_secs(), (keep_alive + keep_alive / 2).as_secs());
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_stop_a_broker_that_does_not_read_holds_the_box_at_most_the_goodbye() {
        // Room for the first "online" and little more: the goodbye cannot be written whole.
        let (_mqtt, stop, task, mut broker, _dir) = in_session(24);
        let mut buf = BytesMut::new();
        let first = broker_reads(&mut broker, &mut buf, Duration::from_millis(100)).await;
        assert!(matches!(first.as_slice(), [Packet::Publish(_)]), "{first:?}");
        let started = tokio::time::Instant::now();
        stop.send(true).unwrap();
        assert_eq!(task.await.unwrap(), Ok(()));
        let held = started.elapsed();
        let goodbye = Duration::from_millis(limits::MQTT_GOODBYE_MS);
        assert!(held >= goodbye && held < goodbye + Duration::from_millis(100), "{held:?}");
    }

    #[tokio::test]
    async fn delivered_rows_leave_the_outbox_in_batches_while_events_are_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        catalog.set_outbox(true).unwrap();
        let rows = limits::MQTT_OUTBOX_REMOVE_ROWS + 36;
        catalog.put_events(&(1..=rows).map(record).collect::<Vec<_>>()).unwrap();
        let (_mqtt, stop_tx, room, mut s, mut buf) = connected(catalog.clone()).await;
        let waiting = || catalog.outbox_state().unwrap().waiting;
        // The broker acknowledges events in the order they came, up to `upto` of them.
        let mut events = std::collections::VecDeque::new();
        let mut acked = 0;
        let mut ack_upto = async |upto: u64, s: &mut tokio::net::TcpStream, buf: &mut BytesMut| {
            while acked < upto {
                for p in read_until_quiet(s, buf, Duration::from_millis(30)).await {
                    if let Packet::Publish(p) = p
                        && p.topic == "keeppeek/events"
                    {
                        events.push_back(p.pkid);
                    }
                }
                let mut out = BytesMut::new();
                while acked < upto
                    && let Some(pkid) = events.pop_front()
                {
                    Packet::PubAck(PubAck::new(pkid)).write(&mut out, 16).unwrap();
                    acked += 1;
                }
                s.write_all(&out).await.unwrap();
            }
        };
        // One short of the batch, with events still in flight: all still in the outbox.
        ack_upto(limits::MQTT_OUTBOX_REMOVE_ROWS - 1, &mut s, &mut buf).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(waiting(), rows);
        // The batch: they go in one removal.
        ack_upto(limits::MQTT_OUTBOX_REMOVE_ROWS, &mut s, &mut buf).await;
        let t = std::time::Instant::now();
        while waiting() != rows - limits::MQTT_OUTBOX_REMOVE_ROWS {
            assert!(t.elapsed() < Duration::from_secs(1), "{} waiting", waiting());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The rest, with nothing left in flight: the outbox is empty at once.
        ack_upto(rows, &mut s, &mut buf).await;
        while waiting() != 0 {
            assert!(t.elapsed() < Duration::from_secs(1), "{} waiting", waiting());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop_tx.send(true).unwrap();
        room.await.unwrap();
    }

    #[tokio::test]
    async fn at_most_the_ceiling_of_publishes_wait_for_their_acknowledgement() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(Catalog::open(&dir.path().join("c.redb")).unwrap());
        catalog.set_outbox(true).unwrap();
        let records: Vec<_> = (1..=40).map(record).collect();
        catalog.put_events(&records).unwrap();
        let (mqtt, stop_tx, room, mut s, mut buf) = connected(catalog.clone()).await;
        let sent = read_until_quiet(&mut s, &mut buf, Duration::from_millis(500)).await;
        let publishes: Vec<&rumqttc::mqttbytes::v4::Publish> =
            sent.iter().filter_map(|p| if let Packet::Publish(p) = p { Some(p) } else { None }).collect();
        // The box's "online" and events up to the ceiling, nothing more until acknowledged.
        assert_eq!(publishes.len(), limits::MQTT_INFLIGHT_MAX, "{sent:?}");
        assert_eq!(publishes[0].topic, "keeppeek/available");
        assert!(publishes[1..].iter().all(|p| p.topic == "keeppeek/events" && p.qos == QoS::AtLeastOnce));
        // One acknowledged: one more goes.
        let mut ack = BytesMut::new();
        Packet::PubAck(PubAck::new(publishes[1].pkid)).write(&mut ack, 16).unwrap();
        s.write_all(&ack).await.unwrap();
        let more = read_until_quiet(&mut s, &mut buf, Duration::from_millis(500)).await;
        let more: Vec<_> = more.iter().filter(|p| matches!(p, Packet::Publish(_))).collect();
        assert_eq!(more.len(), 1, "{more:?}");
        assert_eq!(mqtt.stats.events_acked.load(Ordering::Relaxed), 1);
        stop_tx.send(true).unwrap();
        // At the stop: "offline", retained, then DISCONNECT.
        let bye = read_until_quiet(&mut s, &mut buf, Duration::from_millis(500)).await;
        assert!(
            matches!(bye.as_slice(), [Packet::Publish(p), Packet::Disconnect] if p.payload.as_ref() == b"offline" && p.retain),
            "{bye:?}"
        );
        room.await.unwrap();
    }
}

//! The daemon: starts the rooms as steps ([`start`]: the budget checked, the ports bound,
//! the catalog opened and recovered, the recorder, the event intake, each camera, the web
//! face) into a [`Running`] handle, and on SIGTERM or SIGINT stops them in order
//! ([`Running::stop`]) so nothing recorded before the signal is lost.
//!
//! The daemon owns the seam where one camera starts or stops while the others run
//! ([`Running::start_camera`], [`Running::stop_camera`]): its recorders, ingest tasks and
//! live fanouts, and its place in [`Cameras`], which every other room reads. A config
//! change from the web face arrives as an [`Order`]: the cameras it names stop and start
//! ([`Running::apply`]), or, for a setting that cannot change while the box runs, the
//! daemon stops cleanly and [`run`] says to start again ([`Exit::Restart`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::auth::Auth;
use crate::base::StreamKey;
use crate::budget;
use crate::cameras::{Cameras, RunningStream};
use crate::catalog::{Catalog, CatalogError};
use crate::clock::SharedClocks;
use crate::config::file::ConfigFile;
use crate::config::plan::Effect;
use crate::config::{Camera, Config};
use crate::http;
use crate::ingest::{self, StreamInput, pace::IngestThread, state::StreamState};
use crate::limits;
use crate::live::{Fanout, GopPool};
use crate::record::{Recorder, recovery};
use crate::system::SystemApi;
use crate::webrtc;

/// The catalog's file name in the data directory.
pub const CATALOG_FILE: &str = "catalog.redb";

/// The box's HTTPS certificates and keys, under the data directory (mode `0700`).
pub const TLS_DIR: &str = "tls";

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("the memory budget does not fit this board:\n{0}")]
    Budget(budget::Budget),
    #[error("data directory {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Recovery(#[from] recovery::RecoveryError),
    #[error(transparent)]
    Listen(#[from] http::ListenError),
    #[error("cannot open the live view port {port} (udp): {source}")]
    Webrtc { port: u16, source: std::io::Error },
    #[error("camera {0} is running already")]
    CameraRunning(String),
    #[error("cannot start the ingest thread: {0}")]
    IngestThread(std::io::Error),
    #[error("HTTPS: {0}")]
    Tls(crate::tls::TlsError),
}

/// File descriptors the daemon may hold at once: connections, playback cursors, a few per
/// stream (socket, segment file, directory), the catalog and some slack.
fn open_files_needed(config: &Config) -> u64 {
    let streams: u64 = config.cameras.iter().map(|c| c.streams().count() as u64).sum();
    (limits::HTTP_CONNECTIONS_MAX
        + limits::TLS_HANDSHAKES_MAX
        + limits::WEBRTC_CURSORS_MAX
        + limits::EXPORTS_RUNNING_MAX * 2) as u64
        + streams * 4
        + 64
}

/// Raises the soft limit on open files to the hard one (a service's soft limit is often
/// 1,024, below what the ceilings allow); warns when even the hard limit is short.
fn raise_open_files_limit(config: &Config) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    let needed = open_files_needed(config);
    if (lim.rlim_cur as u64) < needed {
        tracing::warn!(limit = lim.rlim_cur, needed, "the open-files limit is below what the ceilings allow");
    }
}

/// Runs until SIGTERM or SIGINT.
/// The config file the daemon was started from: changes from the web face rewrite it.
pub struct ConfigSource {
    pub path: PathBuf,
    /// The text the config was read from.
    pub text: String,
}

/// How [`run`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// A signal: stop.
    Stopped,
    /// A config change the box applies by starting again (the caller starts keeppeek anew).
    Restart,
}

/// A config change for the running daemon, from the web face.
pub enum Order {
    /// Stop and start the cameras `effect` names; `config` is the new whole config.
    Cameras { config: Config, effect: Effect, done: oneshot::Sender<Result<(), String>> },
    /// Stop cleanly and start again (the file holds the new config).
    Restart { done: oneshot::Sender<Result<(), String>> },
}

/// What the web face changes the config through.
pub struct Reconfig {
    pub file: Arc<ConfigFile>,
    pub orders: mpsc::Sender<Order>,
}

/// A change set applied: its revision, its plan as the web face shows it, and whether the
/// box restarts to take it.
pub struct Applied {
    pub rev: u64,
    pub answer: serde_json::Value,
    pub restarting: bool,
}

/// Why a change set was not applied.
pub enum ApplyError {
    /// Refused by its plan (a stale base, a field the validator refuses).
    Plan(crate::config::file::PlanError),
    NotWritten(String),
    Stopping,
    /// Written, and the running box could not follow it.
    NotApplied {
        rev: u64,
        why: String,
    },
}

impl Reconfig {
    /// Plans `set` again on the current revision, writes the file and its revision, and
    /// reconfigures the box (only the cameras the plan names stop and start; a setting that
    /// cannot change while the box runs restarts keeppeek). The web face's apply and Home
    /// Assistant's commands both come here.
    pub async fn apply(&self, set: &crate::config::change::ChangeSet, by: String) -> Result<Applied, ApplyError> {
        // Held until the box runs the new revision: the next apply plans on it.
        let current = self.file.lock_owned().await;
        let plan = self.file.plan(&current, set).map_err(ApplyError::Plan)?;
        let answer = serde_json::to_value(plan.answer()).unwrap_or_default();
        let (effect, config) = (plan.effect.clone(), plan.config.clone());
        let summary = plan.summary();
        let now_us = crate::clock::Clocks::wall_us(&crate::clock::RealClocks);
        let (file, who) = (self.file.clone(), by.clone());
        let (current, rev) = tokio::task::spawn_blocking(move || {
            let mut current = current;
            let rev = file.write(&mut current, plan, &who, now_us);
            (current, rev)
        })
        .await
        .map_err(|e| ApplyError::NotWritten(e.to_string()))?;
        let rev = rev.map_err(|e| {
            error!(error = %e, "config not written");
            ApplyError::NotWritten(e.to_string())
        })?;
        info!(by = %by, rev, summary = %summary.join("; "), "config applied");
        let restarting = !effect.restart_box.is_empty();
        let (done, outcome) = oneshot::channel();
        let order = if restarting { Order::Restart { done } } else { Order::Cameras { config, effect, done } };
        if self.orders.send(order).await.is_err() {
            return Err(ApplyError::Stopping);
        }
        let result = outcome.await.unwrap_or_else(|_| Err("the box is stopping".into()));
        drop(current);
        match result {
            Ok(()) => Ok(Applied { rev, answer, restarting }),
            Err(why) => Err(ApplyError::NotApplied { rev, why }),
        }
    }
}

/// How long a restart waits after answering, so that the answer leaves before the web face
/// stops.
const RESTART_GRACE_MS: u64 = 300;

pub async fn run(config: Config, source: Option<ConfigSource>, system: Arc<SystemApi>) -> Result<Exit, DaemonError> {
    let mut running = start(config, source, system).await?;
    let mut orders = running.orders.take();
    let signal = wait_for_signal();
    tokio::pin!(signal);
    let exit = loop {
        let order = async {
            match orders.as_mut() {
                Some(o) => o.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut signal => break Exit::Stopped,
            Some(order) = order => match order {
                Order::Cameras { config, effect, done } => {
                    let result = running.apply(&config, &effect).await.map_err(|e| e.to_string());
                    let _ = done.send(result);
                }
                Order::Restart { done } => {
                    info!("restarting to apply the config");
                    let _ = done.send(Ok(()));
                    tokio::time::sleep(Duration::from_millis(RESTART_GRACE_MS)).await;
                    break Exit::Restart;
                }
            },
        }
    };
    running.stop().await;
    Ok(exit)
}

/// Follows a camera's own events over ONVIF until `stop`: each start of something seen (a
/// label) is an event, its end a revision of it with its end time, through the intake like
/// any event (so it records with the pre-roll). Events wait in a bounded queue
/// ([`limits::ONVIF_EVENTS_QUEUED_MAX`]); past it one is dropped, counted and logged. How it
/// goes is in `followers` while the camera runs.
async fn follow_camera_events(
    name: String,
    camera: crate::onvif::subscribe::Camera,
    events: Arc<crate::events::Events>,
    followers: Arc<crate::onvif::subscribe::Followers>,
    clocks: SharedClocks,
    stop: watch::Receiver<bool>,
) {
    use crate::onvif::subscribe::Follower;
    let (tx, mut rx) = Follower::queue();
    let (follower, status) = Follower::new(&name);
    followers.add(follower.clone());
    let now_clocks = clocks.clone();
    let now_s = move || crate::clock::Clocks::wall_us(&*now_clocks) / 1_000_000;
    let offering = follower.clone();
    let sink = move |e| offering.offer(&tx, e);
    let intake = async {
        // Open events by label: their id and start, for the revision that ends them.
        let mut open: std::collections::HashMap<&'static str, (String, i64)> = Default::default();
        while let Some(e) = rx.recv().await {
            let now_us = crate::clock::Clocks::wall_us(&*clocks);
            let at_us = e.utc_us.unwrap_or(now_us).min(now_us);
            let envelope = match (e.active, open.get(e.label)) {
                (true, Some(_)) => continue,
                (true, None) => {
                    let id = format!("onvif-{}-{at_us}", e.label.replace(' ', "-"));
                    open.insert(e.label, (id.clone(), at_us));
                    serde_json::json!({ "id": id, "camera": name, "time_us": at_us, "labels": [e.label], "text": format!("{} (the camera's own detection)", e.label) })
                }
                (false, Some(_)) => {
                    let (id, from_us) = open.remove(e.label).expect("looked up");
                    serde_json::json!({ "id": id, "camera": name, "time_us": from_us, "end_us": at_us.max(from_us), "labels": [e.label], "text": format!("{} (the camera's own detection)", e.label) })
                }
                (false, None) => continue,
            };
            match events.publish("onvif", envelope.to_string().as_bytes(), None).await {
                Ok(_) => {
                    follower.events.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(err) => warn!(camera = %name, error = %err, "ONVIF events: an event refused"),
            }
        }
    };
    let follow = crate::onvif::subscribe::follow(camera, now_s, sink, status, stop);
    // The follower ends at the stop (unsubscribed); the intake then drains what is queued.
    tokio::join!(follow, intake);
    followers.remove(&follower);
}

/// Carries out an order from Home Assistant; what fails is logged (the sender is a button).
async fn carry_out(order: crate::mqtt::home::Order, events: &crate::events::Events, config: Option<&Reconfig>) {
    use crate::mqtt::home::Order;
    match order {
        Order::Mark { camera } => {
            let envelope =
                serde_json::json!({ "camera": camera, "labels": ["marked"], "text": "Marked from Home Assistant" });
            match events.publish("mqtt", envelope.to_string().as_bytes(), None).await {
                Ok(a) => info!(camera = %camera, id = a.id, "MQTT: an event marked from Home Assistant"),
                Err(e) => warn!(camera = %camera, error = %e, "MQTT: the event Home Assistant asked for was refused"),
            }
        }
        Order::Continuous { camera, on } => {
            let Some(r) = config else {
                warn!("MQTT: continuous recording cannot change without a config file");
                return;
            };
            let base = r.file.lock().await.rev;
            let record = if on { "continuous" } else { "events" };
            let set = crate::config::change::ChangeSet {
                base,
                changes: vec![crate::config::change::Change::ChangeCamera {
                    name: camera.clone(),
                    set: crate::config::change::CameraFields { record: Some(record.into()), ..Default::default() },
                }],
            };
            match r.apply(&set, "mqtt".into()).await {
                Ok(a) => info!(camera = %camera, record, rev = a.rev, "MQTT: recording changed from Home Assistant"),
                Err(_) => {
                    warn!(camera = %camera, record, "MQTT: the recording change Home Assistant asked for was not applied")
                }
            }
        }
    }
}

/// Starts every room in order: the budget checked, the ports bound, the catalog opened and
/// recovered, the recorder, the event intake, each camera, then the web face.
pub async fn start(
    config: Config,
    source: Option<ConfigSource>,
    system: Arc<SystemApi>,
) -> Result<Running, DaemonError> {
    check_budget(&config)?;
    raise_open_files_limit(&config);
    let data_dir = config.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|source| DaemonError::DataDir { path: data_dir.clone(), source })?;
    // Bind first: a taken port is a clear error before anything else starts.
    let listener = match config.listen {
        Some(addr) => Some(http::bind(addr).await?),
        None => None,
    };
    let https_listener = match config.https {
        Some(addr) => Some(http::bind(addr).await?),
        None => None,
    };
    let catalog = Arc::new(Catalog::open(&data_dir.join(CATALOG_FILE))?);
    let cameras = Arc::new(Cameras::default());
    let webrtc = bind_live_view(&config, &catalog, &cameras).await?;
    // Every room reads time through this one handle.
    let clocks = crate::clock::RealClocks::shared();
    recover(&catalog, &data_dir, crate::clock::Clocks::wall_us(&*clocks))?;
    let recorder = Recorder::start(&config, catalog.clone(), clocks.clone())?;
    let live_view = webrtc.as_ref().map(|(_, handle)| Arc::new(handle.clone()) as Arc<dyn crate::events::NoticeSink>);
    // MQTT: stored events get their outbox rows from the first on.
    catalog.set_outbox(config.mqtt.is_some())?;
    let mqtt = crate::mqtt::Mqtt::new(catalog.clone(), config.mqtt.clone());
    let events = Arc::new(
        crate::events::Events::new(
            catalog.clone(),
            data_dir.clone(),
            cameras.clone(),
            live_view,
            config.events_max_bytes,
            clocks.clone(),
            recorder.holds.clone(),
        )
        .with_stored_wake(mqtt.wake()),
    );
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // The config file and its revisions, when there is a file (the demo has none).
    let (reconfig, orders) = match source {
        Some(s) => {
            let now_us = crate::clock::Clocks::wall_us(&*clocks);
            let file = ConfigFile::open(&s.path, s.text, config.clone(), catalog.clone(), now_us)?;
            let (tx, rx) = mpsc::channel(1);
            (Some(Arc::new(Reconfig { file: Arc::new(file), orders: tx })), Some(rx))
        }
        None => (None, None),
    };
    // Home Assistant's commands over MQTT, carried out here: an event marked, continuous
    // recording turned on or off (a config change like the web face's).
    let (mqtt_orders, mut mqtt_orders_rx) = crate::mqtt::home::orders();
    crate::mqtt::home::mark_start();
    mqtt.set_around(crate::mqtt::home::Around {
        cameras: cameras.clone(),
        data_dir: data_dir.clone(),
        box_id: catalog.box_id()?,
        orders: mqtt_orders,
    });
    let (for_events, for_config) = (events.clone(), reconfig.clone());
    let mqtt_orders_task = tokio::spawn(async move {
        while let Some(order) = mqtt_orders_rx.recv().await {
            carry_out(order, &for_events, for_config.as_deref()).await;
        }
    });
    let gate = recorder.gate.clone();
    let mut running = Running {
        orders,
        clocks: clocks.clone(),
        catalog: catalog.clone(),
        cameras: cameras.clone(),
        gop_pool: crate::live::gop_pool(),
        recorder,
        ingest_thread: IngestThread::start(Duration::from_millis(limits::INGEST_READ_TICK_MS))
            .map_err(DaemonError::IngestThread)?,
        ingest: Vec::new(),
        shutdown_tx,
        background: Vec::new(),
        web: None,
        engine: None,
        oidc: Arc::new(crate::oidc::Oidc::new(&config.oidc)),
        mqtt_task: Some(tokio::spawn(mqtt.clone().run(shutdown_rx.clone()))),
        mqtt: mqtt.clone(),
        events: events.clone(),
        camera_events: Arc::default(),
        archive: crate::archive::Archive::new(catalog.clone(), data_dir.clone(), clocks.clone(), gate),
        camera_port: crate::camport::port::CameraPort::new(catalog.clone(), clocks.clone()),
    };
    for camera in &config.cameras {
        running.start_camera(camera)?;
    }
    info!(cameras = config.cameras.len(), data_dir = %data_dir.display(), "recording");

    // The offsite archive reads what the recorder wrote; its targets wait out their own
    // failures on their own tasks.
    running.archive.start(&config.archive, &config.cameras, shutdown_rx.clone()).await;
    running.background.push(mqtt_orders_task);
    // The camera port's servers wait out a missing interface on their own task.
    running.camera_port.set_config(config.camera_port.as_ref()).await;
    running.background.push(tokio::spawn(log_status(cameras.clone())));
    #[cfg(target_env = "gnu")]
    running.background.push(tokio::spawn(return_freed_memory()));
    // The box's certificate, made before the port answers (the first start makes its key).
    let tls = match https_listener {
        Some(l) => {
            let dir = data_dir.join(TLS_DIR);
            let wall_us = crate::clock::Clocks::wall_us(&*clocks);
            let (host, addresses) = (crate::tls::host_name(), crate::tls::addresses());
            let tls = tokio::task::spawn_blocking(move || {
                crate::tls::Tls::open(&dir, &host, &addresses, wall_us / 1_000_000, crate::clock::is_sane(wall_us))
            })
            .await
            .map_err(|e| DaemonError::Tls(crate::tls::TlsError::Config(e.to_string())))?
            .map_err(DaemonError::Tls)?;
            let tls = Arc::new(tls);
            running.background.push(tokio::spawn(tls.clone().watch(clocks.clone(), shutdown_rx.clone())));
            Some((l, tls))
        }
        None => None,
    };
    let auth = Arc::new(Auth::new(catalog.clone(), clocks));
    if auth.setup_needed().unwrap_or(false)
        && let Some(token) = auth.setup_token()
    {
        // Printed once at start: whoever reads the box's console may create the first admin
        // from another machine (once); from the box itself no token is needed. The support
        // bundle leaves the token out of the log it ships.
        info!(setup_token = %token, "no admin yet: open the web face to set one up");
    }
    let webrtc = webrtc.map(|(engine, handle)| {
        running.engine = Some(tokio::spawn(engine.run(shutdown_rx.clone())));
        handle
    });
    let tls_store = tls.as_ref().map(|(_, t)| t.clone());
    let web = (listener.is_some() || tls.is_some()).then(|| http::Listeners { plain: listener, https: tls });
    running.web = web.map(|listeners| {
        let services = Arc::new(http::Services {
            catalog,
            data_dir,
            cameras,
            recorder: running.recorder.handle(),
            flusher: running.recorder.flusher_stats.clone(),
            wear: running.recorder.wear.clone(),
            preroll: running.recorder.preroll.clone(),
            pools: running.recorder.pools(&events, &running.gop_pool, webrtc.as_ref().map(|w| &w.send_pool)),
            events,
            system,
            webrtc,
            config: reconfig,
            config_stats: Arc::default(),
            tls: tls_store,
            oidc: running.oidc.clone(),
            mqtt,
            camera_events: running.camera_events.clone(),
            archive: running.archive.clone(),
            camera_port: running.camera_port.clone(),
        });
        tokio::spawn(http::serve(listeners, Arc::new(http::HttpStats::default()), auth, services, shutdown_rx))
    });
    Ok(running)
}

fn check_budget(config: &Config) -> Result<(), DaemonError> {
    let budget = budget::compute(config);
    if !budget.fits() {
        return Err(DaemonError::Budget(budget));
    }
    info!("memory budget {} MiB of {} MiB allowed", budget.total_bytes() >> 20, budget.allowed_bytes >> 20);
    Ok(())
}

/// Live view's engine, bound to its port (none when `[webrtc] port = 0`).
async fn bind_live_view(
    config: &Config,
    catalog: &Arc<Catalog>,
    cameras: &Arc<Cameras>,
) -> Result<Option<(webrtc::Engine, webrtc::WebrtcHandle)>, DaemonError> {
    let port = config.webrtc.port;
    if port == 0 {
        return Ok(None);
    }
    let loopback = config.webrtc.loopback;
    let addresses = webrtc::host_addresses(loopback);
    let max = webrtc::max_sessions(config.ram_class_bytes);
    let streams =
        webrtc::Streams { cameras: cameras.clone(), catalog: catalog.clone(), data_dir: config.data_dir.clone() };
    let bound = webrtc::Engine::bind(port, &addresses, streams, max).await;
    let (engine, handle) = bound.map_err(|source| DaemonError::Webrtc { port, source })?;
    Ok(Some((engine.follow_addresses(move || webrtc::host_addresses(loopback)), handle)))
}

/// Puts the catalog and the files back in agreement after a crash or a power cut.
fn recover(catalog: &Catalog, data_dir: &std::path::Path, now_us: i64) -> Result<(), DaemonError> {
    recovery::recover(catalog, data_dir, now_us)?;
    let orphans = crate::events::recover(catalog, data_dir)?;
    if orphans > 0 {
        info!(orphans, "deleted event snapshots no event names (a crash before their commit)");
    }
    Ok(())
}

/// One camera's ingest tasks, stopped together.
struct CameraIngest {
    name: String,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

/// The daemon while it runs: what [`start`] started, which [`Running::stop`] stops in order.
/// Cameras start and stop one at a time while the others record on.
pub struct Running {
    clocks: SharedClocks,
    catalog: Arc<Catalog>,
    cameras: Arc<Cameras>,
    /// Live GOPs held for new viewers, across every stream.
    gop_pool: Arc<GopPool>,
    recorder: Recorder,
    /// Where every camera session runs, paced while no one watches.
    ingest_thread: IngestThread,
    ingest: Vec<CameraIngest>,
    /// Tells the web face and live view to stop.
    shutdown_tx: watch::Sender<bool>,
    /// The status log and the allocator's trim, aborted at the stop.
    background: Vec<JoinHandle<()>>,
    web: Option<JoinHandle<()>>,
    engine: Option<JoinHandle<()>>,
    /// Config changes from the web face ([`run`] takes them).
    orders: Option<mpsc::Receiver<Order>>,
    /// Single sign-on's providers, changed with the config while the box runs.
    oidc: Arc<crate::oidc::Oidc>,
    /// The MQTT room and its task (it says goodbye to the broker at the stop).
    mqtt: Arc<crate::mqtt::Mqtt>,
    archive: Arc<crate::archive::Archive>,
    /// The camera port's servers and the cameras plugged into it.
    camera_port: Arc<crate::camport::port::CameraPort>,
    /// The event intake: cameras' own events (ONVIF) go in there.
    events: Arc<crate::events::Events>,
    /// The cameras whose own events are followed (ONVIF), and how it goes.
    camera_events: Arc<crate::onvif::subscribe::Followers>,
    mqtt_task: Option<JoinHandle<()>>,
}

impl Running {
    /// The running cameras, as every room sees them.
    pub fn cameras(&self) -> &Arc<Cameras> {
        &self.cameras
    }

    /// Starts `camera` (refused while one of its name runs): its recorders, then one ingest
    /// task per stream; from then on the web face, live view and the event intake see it.
    pub fn start_camera(&mut self, camera: &Camera) -> Result<(), DaemonError> {
        if self.ingest.iter().any(|c| c.name == camera.name) {
            return Err(DaemonError::CameraRunning(camera.name.clone()));
        }
        let lives: Vec<(StreamKey, Arc<Fanout>)> = camera
            .streams()
            .map(|(kind, _)| (StreamKey::new(&camera.name, kind), Arc::new(Fanout::new(self.gop_pool.clone()))))
            .collect();
        let live_of = |key: &StreamKey| lives.iter().find(|(k, _)| k == key).map(|(_, l)| l.clone());
        let mut recorded = self.recorder.start_camera(camera, &self.catalog, live_of)?;
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut streams = Vec::new();
        for (kind, source) in camera.streams() {
            let key = StreamKey::new(&camera.name, kind);
            let state = Arc::new(StreamState::default());
            let live = live_of(&key).expect("made above");
            let recorder = recorded.iter().position(|r| r.key == key).map(|i| recorded.swap_remove(i));
            streams.push(RunningStream {
                key: key.clone(),
                state: state.clone(),
                recording: recorder.as_ref().map(|r| r.watch.clone()),
                live: live.clone(),
            });
            let input = StreamInput {
                clocks: self.clocks.clone(),
                key,
                source: source.clone(),
                credentials: camera.username.clone().zip(camera.password.clone()),
                recorder: recorder.map(|r| r.sender),
                state,
                live,
                frame_max_bytes: camera.frame_max_bytes(kind),
                pace: Some(self.ingest_thread.pace().clone()),
            };
            tasks.push(self.ingest_thread.spawn(ingest::supervise(input, stopped.clone())));
        }
        if let (Some(device), Some((user, password))) =
            (&camera.onvif, camera.username.clone().zip(camera.password.clone()))
        {
            let follower = crate::onvif::subscribe::Camera { device: device.clone(), user, password };
            tasks.push(tokio::spawn(follow_camera_events(
                camera.name.clone(),
                follower,
                self.events.clone(),
                self.camera_events.clone(),
                self.clocks.clone(),
                stopped.clone(),
            )));
        }
        self.cameras.add(streams);
        self.ingest.push(CameraIngest { name: camera.name.clone(), tasks, stop });
        Ok(())
    }

    /// Follows a new plan while the box runs: `config` is the set of cameras that will run
    /// (call it before starting an added camera, or after stopping a removed one, once the
    /// budget has said the plan fits). The pools sized by the cameras follow it.
    pub fn replan(&mut self, config: &Config) {
        self.recorder.replan(config);
    }

    /// Stops camera `name` while the others run: out of every room's sight first, then its
    /// ingest (bounded by [`limits::SHUTDOWN_TIMEOUT_MS`]), then its recorders close their
    /// files. Returns false when no such camera runs.
    pub async fn stop_camera(&mut self, name: &str) -> bool {
        let Some(i) = self.ingest.iter().position(|c| c.name == name) else {
            return false;
        };
        let camera = self.ingest.swap_remove(i);
        self.cameras.remove_camera(name);
        stop_ingest(vec![camera]).await;
        let recorders = self.recorder.stop_camera(name);
        if !tokio::task::spawn_blocking(move || recorders.wait()).await.unwrap_or(false) {
            error!(camera = name, "a recorder did not close its files in time");
        }
        info!(camera = name, "camera stopped");
        true
    }

    /// Applies a config change while the box runs: the cameras `effect` stops or restarts
    /// stop, the pools follow `config`, then the restarted and the new ones start. Every
    /// other camera records on untouched.
    pub async fn apply(&mut self, config: &Config, effect: &Effect) -> Result<(), DaemonError> {
        for name in effect.stop.iter().chain(&effect.restart) {
            self.stop_camera(name).await;
        }
        self.replan(config);
        self.oidc.set_providers(&config.oidc);
        if let Err(e) = self.mqtt.set_config(config.mqtt.clone()) {
            error!(error = %e, "MQTT: the outbox could not follow the settings");
        }
        self.archive.set_targets(&config.archive, &config.cameras).await;
        self.camera_port.set_config(config.camera_port.as_ref()).await;
        for name in effect.restart.iter().chain(&effect.start) {
            if let Some(camera) = config.cameras.iter().find(|c| &c.name == name) {
                self.start_camera(camera)?;
                info!(camera = %name, "camera started");
            }
        }
        Ok(())
    }

    /// Stops everything so that nothing recorded before is lost: the catalog writer told,
    /// the web face and live view, every camera's ingest (its recorders' queues close), then
    /// the recorders close their files and the flusher commits.
    pub async fn stop(mut self) {
        info!("stopping");
        self.recorder.stopping();
        for task in &self.background {
            task.abort();
        }
        let _ = self.shutdown_tx.send(true);
        for task in [self.web.take(), self.engine.take()].into_iter().flatten() {
            let _ = task.await;
        }
        if let Some(task) = self.mqtt_task.take() {
            let wait = Duration::from_millis(limits::MQTT_GOODBYE_MS + 500);
            if tokio::time::timeout(wait, task).await.is_err() {
                error!("MQTT did not stop in time");
            }
        }
        // Its last ACKs wait for their leases' write, which the catalog takes before it closes.
        self.camera_port.stop().await;
        stop_ingest(std::mem::take(&mut self.ingest)).await;
        let (ingest_thread, recorder) = (self.ingest_thread, self.recorder);
        tokio::task::spawn_blocking(move || {
            drop(ingest_thread);
            recorder.shutdown();
        })
        .await
        .ok();
        info!("stopped");
    }
}

/// Tells the cameras' ingest tasks to stop and waits for them under one deadline; a task
/// that misses it is aborted, which drops its sender so its recorder can still close the
/// files.
async fn stop_ingest(cameras: Vec<CameraIngest>) {
    for c in &cameras {
        let _ = c.stop.send(true);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS);
    for mut t in cameras.into_iter().flat_map(|c| c.tasks) {
        if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
            error!("an ingest task did not stop in time");
            t.abort();
        }
    }
}

/// One line a minute per stream, so a log shows what each camera is doing.
async fn log_status(cameras: Arc<Cameras>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    tick.tick().await;
    loop {
        tick.tick().await;
        for stream in cameras.streams() {
            let s = stream.state.snapshot();
            info!(
                stream = %stream.key,
                connected = s.connected,
                codec = ?s.codec,
                fps = s.fps,
                bitrate_bps = s.bitrate_bps,
                last_error = s.last_error.as_deref().unwrap_or(""),
                "status"
            );
        }
    }
}

/// The runtime the web face and live view run on (camera sessions run on the ingest
/// thread, [`IngestThread`]): one thread (this is light I/O, and a multi-threaded runtime
/// spends more CPU waking its workers than its tasks spend working), and a blocking pool
/// of at most [`limits::BLOCKING_THREADS_MAX`] threads with stacks of
/// [`limits::BLOCKING_THREAD_STACK_BYTES`], as the budget counts.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(limits::BLOCKING_THREADS_MAX)
        .thread_stack_size(limits::BLOCKING_THREAD_STACK_BYTES)
        .build()
}

/// glibc gives each thread that allocates an arena of its own and keeps what it frees
/// there; [`limits::MALLOC_ARENAS_MAX`] arenas keep that slack inside the budget's process
/// line. Call it first, before any thread starts. The image's musl build has no arenas.
/// Returns whether the allocator took the ceiling.
pub fn limit_malloc_arenas() -> bool {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter.
    let taken = unsafe { libc::mallopt(libc::M_ARENA_MAX, limits::MALLOC_ARENAS_MAX as libc::c_int) } == 1;
    #[cfg(not(target_env = "gnu"))]
    let taken = true;
    taken
}

/// glibc keeps what is freed in its arenas (one per thread that allocated), so a burst of
/// connections would leave the process large for good; this hands it back to the kernel
/// every [`limits::MEMORY_TRIM_INTERVAL_S`]. The image's musl build returns freed memory
/// itself and has no such call.
#[cfg(target_env = "gnu")]
async fn return_freed_memory() {
    let mut tick = tokio::time::interval(Duration::from_secs(limits::MEMORY_TRIM_INTERVAL_S));
    loop {
        tick.tick().await;
        // SAFETY: malloc_trim only walks the allocator's own free lists.
        unsafe { libc::malloc_trim(0) };
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::base::StreamKind;

    #[test]
    fn the_allocator_takes_the_arena_ceiling() {
        assert!(limit_malloc_arenas());
    }

    #[test]
    fn the_blocking_pool_stops_at_its_ceiling_and_the_rest_wait_their_turn() {
        let rt = runtime().unwrap();
        let threads = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..limits::BLOCKING_THREADS_MAX * 2)
            .map(|_| {
                let (threads, running, most) = (threads.clone(), running.clone(), most.clone());
                rt.spawn_blocking(move || {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        rt.block_on(async {
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), limits::BLOCKING_THREADS_MAX, "the ceiling is reached, not passed");
        assert_eq!(threads.lock().unwrap().len(), limits::BLOCKING_THREADS_MAX);
    }

    /// Two cameras on the built-in clip; one is stopped while the box runs, and the other
    /// records on: the stopped one's files are closed, every room stops seeing it, and it
    /// can start again.
    #[tokio::test]
    async fn one_camera_stops_and_starts_again_while_the_other_records_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::demo(dir.path().into(), "127.0.0.1:0".parse().unwrap());
        config.listen = None;
        config.webrtc.port = 0;
        let demo = config.cameras[0].clone();
        config.cameras = ["front", "yard"].map(|name| Camera { name: name.into(), ..demo.clone() }).into();
        let (front, yard) = (StreamKey::new("front", StreamKind::Main), StreamKey::new("yard", StreamKind::Main));
        let mut running = start(config.clone(), None, Arc::new(SystemApi::new(dir.path().into(), None))).await.unwrap();
        let catalog = running.catalog.clone();
        let fragments = |r: &Running, key: &StreamKey| {
            let stream = r.cameras().stream(key)?;
            Some(stream.recording.as_ref()?.stats.fragments_written.load(Ordering::Relaxed))
        };
        let recorded = |r: &Running, key: &StreamKey| fragments(r, key).is_some_and(|n| n > 0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !(recorded(&running, &front) && recorded(&running, &yard)) {
            assert!(tokio::time::Instant::now() < deadline, "both cameras record a fragment");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        assert!(running.stop_camera("front").await);
        assert!(!running.stop_camera("front").await, "stopped once");
        // The ingest pool follows the plan: less the stopped camera's newest frame, and back.
        let only_yard = Config { cameras: vec![config.cameras[1].clone()], ..config.clone() };
        let ingest_max = |r: &Running| r.recorder.ingest_pool.max_bytes() as u64;
        assert_eq!(ingest_max(&running), config.ingest_pool_bytes());
        running.replan(&only_yard);
        assert_eq!(ingest_max(&running), only_yard.ingest_pool_bytes());
        assert!(only_yard.ingest_pool_bytes() < config.ingest_pool_bytes());
        let names: Vec<_> = running.cameras().streams().iter().map(|s| s.key.name()).collect();
        assert_eq!(names, ["yard/main"]);
        assert!(running.cameras().triggers("front").is_none(), "the event intake no longer knows it");
        let before = fragments(&running, &yard).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while fragments(&running, &yard).unwrap() < before + 2 {
            assert!(tokio::time::Instant::now() < deadline, "the other camera records on");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        assert!(matches!(running.start_camera(&config.cameras[1]), Err(DaemonError::CameraRunning(_))), "once");
        running.replan(&config);
        assert_eq!(ingest_max(&running), config.ingest_pool_bytes());
        running.start_camera(&config.cameras[0]).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !recorded(&running, &front) {
            assert!(tokio::time::Instant::now() < deadline, "the camera records again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        running.stop().await;

        let ids = |key: &StreamKey| catalog.find_stream(key).unwrap().unwrap();
        let rows = |key: &StreamKey| catalog.recordings_of(ids(key), i64::MIN, i64::MAX).unwrap();
        let (front_rows, yard_rows) = (rows(&front), rows(&yard));
        assert!(front_rows.iter().chain(&yard_rows).all(|(_, r)| !r.open), "every file closed");
        let runs = |rows: &[(u64, crate::catalog::RecordingRow)]| {
            rows.iter().map(|(_, r)| r.run_id).collect::<std::collections::BTreeSet<_>>().len()
        };
        assert_eq!((runs(&front_rows), runs(&yard_rows)), (2, 1), "front's stop ended its run; yard's went on");
    }
}

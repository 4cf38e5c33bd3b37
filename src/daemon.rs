//! The daemon: checks the budget, opens and recovers the catalog, starts the recorder and
//! one ingest task per stream, and on SIGTERM or SIGINT stops them in order so nothing
//! recorded before the signal is lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info};

use crate::auth::Auth;
use crate::budget;
use crate::catalog::{Catalog, CatalogError};
use crate::config::Config;
use crate::http;
use crate::ingest::{self, StreamInput, state::StreamState};
use crate::limits;
use crate::record::{Recorder, recovery};
use crate::webrtc;

/// The catalog's file name in the data directory.
pub const CATALOG_FILE: &str = "catalog.redb";

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
}

/// File descriptors the daemon may hold at once: connections, playback cursors, a few per
/// stream (socket, segment file, directory), the catalog and some slack.
fn open_files_needed(config: &Config) -> u64 {
    let streams: u64 = config.cameras.iter().map(|c| c.streams().count() as u64).sum();
    (limits::HTTP_CONNECTIONS_MAX + limits::WEBRTC_CURSORS_MAX + limits::EXPORTS_RUNNING_MAX * 2) as u64
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
pub async fn run(config: Config, system: Arc<crate::system::SystemApi>) -> Result<(), DaemonError> {
    let budget = budget::compute(&config);
    if !budget.fits() {
        return Err(DaemonError::Budget(budget));
    }
    info!("memory budget {} MiB of {} MiB allowed", budget.total_bytes() >> 20, budget.allowed_bytes >> 20);
    raise_open_files_limit(&config);
    let data_dir = config.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|source| DaemonError::DataDir { path: data_dir.clone(), source })?;
    // Bind first: a taken port is a clear error before anything else starts.
    let listener = match config.listen {
        Some(addr) => Some(http::bind(addr).await?),
        None => None,
    };
    // One fanout per stream, in config order: live view's sources.
    let gop_pool = Arc::new(crate::live::GopPool::default());
    let fanouts: Vec<Arc<crate::live::Fanout>> = config
        .cameras
        .iter()
        .flat_map(|c| c.streams())
        .map(|_| Arc::new(crate::live::Fanout::new(gop_pool.clone())))
        .collect();
    let catalog = Arc::new(Catalog::open(&data_dir.join(CATALOG_FILE))?);
    // Every room reads time through this one handle.
    let clocks = crate::clock::RealClocks::shared();
    let webrtc = match config.webrtc.port {
        0 => None,
        port => {
            let addresses = webrtc::host_addresses(config.webrtc.loopback);
            let max = webrtc::max_sessions(config.ram_class_bytes);
            let names =
                config.cameras.iter().flat_map(|c| c.streams().map(move |(k, _)| format!("{}/{}", c.name, k.name())));
            let streams = names.zip(fanouts.iter().cloned()).collect();
            let store = (catalog.clone(), data_dir.clone());
            let bound = webrtc::Engine::bind(port, &addresses, streams, store, max).await;
            let (engine, handle) = bound.map_err(|source| DaemonError::Webrtc { port, source })?;
            let loopback = config.webrtc.loopback;
            Some((engine.follow_addresses(move || webrtc::host_addresses(loopback)), handle))
        }
    };
    recovery::recover(&catalog, &data_dir)?;
    let orphans = crate::events::recover(&catalog, &data_dir)?;
    if orphans > 0 {
        info!(orphans, "deleted event snapshots no event names (a crash before their commit)");
    }
    let (recorder, recorded) = Recorder::start(&config, catalog.clone(), clocks.clone())?;
    // Every camera, with the triggers of its streams recorded on events.
    let mut triggers: std::collections::HashMap<String, Vec<Arc<crate::preroll::Trigger>>> =
        config.cameras.iter().map(|c| (c.name.clone(), Vec::new())).collect();
    for r in recorded.iter().filter(|r| r.watch.mode == crate::config::RecordMode::Events) {
        triggers.entry(r.camera.clone()).or_default().push(r.watch.trigger.clone());
    }
    let live_view = webrtc.as_ref().map(|(_, handle)| Arc::new(handle.clone()) as Arc<dyn crate::events::NoticeSink>);
    let events = Arc::new(crate::events::Events::new(
        catalog.clone(),
        data_dir.clone(),
        triggers,
        live_view,
        config.events_max_bytes,
        clocks.clone(),
    ));

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut senders: std::collections::HashMap<(String, &'static str), _> =
        recorded.into_iter().map(|r| ((r.camera.clone(), r.kind.name()), (r.sender, r.watch))).collect();
    let mut tasks = Vec::new();
    let mut states = Vec::new();
    let mut live = Vec::new();
    let mut fanouts = fanouts.into_iter();
    for camera in &config.cameras {
        for (kind, source) in camera.streams() {
            let state = Arc::new(StreamState::default());
            let fanout = fanouts.next().expect("a fanout per stream");
            let name = format!("{}/{}", camera.name, kind.name());
            states.push((name.clone(), state.clone()));
            let recorder = senders.remove(&(camera.name.clone(), kind.name()));
            live.push(http::LiveStream {
                camera: camera.name.clone(),
                kind,
                state: state.clone(),
                recording: recorder.as_ref().map(|(_, watch)| watch.clone()),
                live: fanout.clone(),
            });
            let input = StreamInput {
                clocks: clocks.clone(),
                name,
                source: source.clone(),
                credentials: camera.username.clone().zip(camera.password.clone()),
                recorder: recorder.map(|(sender, _)| sender),
                state,
                live: fanout,
            };
            tasks.push(tokio::spawn(ingest::supervise(input, shutdown_rx.clone())));
        }
    }
    info!(cameras = config.cameras.len(), data_dir = %data_dir.display(), "recording");

    let status = tokio::spawn(log_status(states));
    #[cfg(target_env = "gnu")]
    let trim = tokio::spawn(return_freed_memory());
    let auth = Arc::new(Auth::new(catalog.clone(), clocks.clone()));
    if auth.setup_needed().unwrap_or(false)
        && let Some(token) = auth.setup_token()
    {
        // Printed once at start: whoever reads the box's console may create the first admin
        // from another machine (once); from the box itself no token is needed. The support
        // bundle leaves the token out of the log it ships.
        info!(setup_token = %token, "no admin yet: open the web face to set one up");
    }
    let (engine, webrtc) = match webrtc {
        Some((engine, handle)) => (Some(tokio::spawn(engine.run(shutdown_rx.clone()))), Some(handle)),
        None => (None, None),
    };
    let web = listener.map(|l| {
        let media = Arc::new(http::Media {
            catalog: catalog.clone(),
            recorder: Some(recorder.handle()),
            data_dir: data_dir.clone(),
            streams: live,
            flusher: Some(recorder.flusher_stats.clone()),
            webrtc,
            events: Some(events),
            preroll: Some(recorder.preroll.clone()),
            system: Some(system),
        });
        tokio::spawn(http::serve(l, Arc::new(http::HttpStats::default()), auth.clone(), media, shutdown_rx.clone()))
    });
    wait_for_signal().await;
    info!("stopping");
    recorder.stopping();
    status.abort();
    #[cfg(target_env = "gnu")]
    trim.abort();
    let _ = shutdown_tx.send(true);
    if let Some(web) = web {
        let _ = web.await;
    }
    if let Some(engine) = engine {
        let _ = engine.await;
    }
    // One deadline for all; a task that misses it is aborted, which drops its sender so its
    // recorder can still close the files.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(limits::SHUTDOWN_TIMEOUT_MS);
    for mut t in tasks {
        if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
            error!("an ingest task did not stop in time");
            t.abort();
        }
    }
    tokio::task::spawn_blocking(move || recorder.shutdown()).await.ok();
    info!("stopped");
    Ok(())
}

/// One line a minute per stream, so a log shows what each camera is doing.
async fn log_status(states: Vec<(String, Arc<StreamState>)>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    tick.tick().await;
    loop {
        tick.tick().await;
        for (name, st) in &states {
            let s = st.snapshot();
            info!(
                stream = %name,
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

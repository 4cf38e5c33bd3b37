//! The HTTP/1.1 listener (hyper), with every ceiling of `src/limits.rs` enforced and counted.
//!
//! Order of refusal, each with its status and a counter in `/metrics`:
//! - connection cap ([`limits::HTTP_CONNECTIONS_MAX`]): a full table gives the newcomer the
//!   slot of the oldest connection that never got an answer (else the oldest idle one), and
//!   only when every connection is in a handler is the newcomer answered `503` and closed —
//!   never left waiting in the kernel's backlog ([`conns`]);
//! - slow requests: `408` ([`guard`]), once per request;
//! - head too large or too many header fields: `431` (hyper's own checks, configured here; a
//!   request line past the whole head's ceiling is one of these);
//! - request line over [`limits::HTTP_LINE_MAX_BYTES`]: `414`; one header line over it:
//!   `431` (hyper has no per-line limit, so they are checked on the parsed head);
//! - no `Host`, or more than one: `400`;
//! - a declared body larger than the route allows: `413`;
//! - every handler busy and [`limits::HTTP_REQUESTS_WAITING_MAX`] requests already waiting:
//!   `503`;
//! - unparseable requests: `400` (hyper).
//!
//! `/healthz` is answered before any of the handler slots is asked for, and a small body
//! (at most [`limits::HTTP_SMALL_BODY_MAX_BYTES`]) is read whole before: a client that sends
//! a head and then its body slowly, or never, holds a connection slot (which a newcomer may
//! take) but no handler. Login and setup take no handler slot either: they wait for the
//! password hashing in a bounded line of their own ([`limits::AUTH_LOGINS_IN_FLIGHT_MAX`]).
//!
//! Routes: `/healthz` (no auth, no details), then the table of [`routes`], each checked
//! against its caller once ([`api`]) and answered by its room's handlers: the accounts
//! ([`accounts`]), media and exports ([`media`]), live view ([`live`]), events ([`events`]),
//! the box as firmware ([`system`]), `/metrics` ([`metrics`]) and the UI's files ([`ui`]).
//! Every handler answers through [`reply`], and every room's error through [`errors`].

mod accounts;
mod api;
mod archive;
mod config;
mod conns;
mod discover;
pub(crate) mod errors;
pub mod events;
mod guard;
mod health;
mod live;
mod media;
mod metrics;
pub mod parse;
mod reply;
mod routes;
mod sso;
mod system;
mod ui;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::{debug, info, warn};

use crate::auth::Auth;
use crate::limits;
use reply::{Body, Reply, RequestBody, closing, error, text};

/// Counters of the listener, each refusal by its kind.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub connections_open: AtomicUsize,
    pub connections_total: AtomicU64,
    /// 503: over [`limits::HTTP_CONNECTIONS_MAX`] with every connection in a handler.
    pub connections_refused: AtomicU64,
    /// Connections closed to make room for a newcomer when the table was full.
    pub connections_evicted: AtomicU64,
    /// Connections that came in at the box's address on the camera port, closed unanswered.
    pub camera_port_refused: AtomicU64,
    pub requests: AtomicU64,
    /// 408: the request did not arrive in time.
    pub request_timeouts: AtomicU64,
    pub write_timeouts: AtomicU64,
    /// 400: hyper could not parse the request, or its `Host` was missing or repeated.
    pub bad_requests: AtomicU64,
    /// 414: request line too long.
    pub uri_too_long: AtomicU64,
    /// 431: a header line, all header lines, or the header count over its ceiling.
    pub headers_too_large: AtomicU64,
    /// 413: body over the route's ceiling.
    pub body_too_large: AtomicU64,
    /// 503: every handler busy and the waiting line full.
    pub busy: AtomicU64,
    /// TLS handshakes completed.
    pub tls_handshakes: AtomicU64,
    /// TLS handshakes that failed (a client that does not trust the certificate, a bad hello).
    pub tls_handshake_failures: AtomicU64,
    /// TLS handshakes not done within [`limits::TLS_HANDSHAKE_TIMEOUT_MS`].
    pub tls_handshake_timeouts: AtomicU64,
    /// TLS handshakes dropped for a newcomer with [`limits::TLS_HANDSHAKES_MAX`] in progress.
    pub tls_handshakes_dropped: AtomicU64,
    /// Plain HTTP requests sent on to HTTPS.
    pub redirects: AtomicU64,
}

/// The daemon's services as the handlers reach them: the catalog and the files, the running
/// cameras, the recorder, the event intake, the box as firmware and live view.
pub struct Services {
    pub catalog: Arc<crate::catalog::Catalog>,
    pub data_dir: std::path::PathBuf,
    /// The running cameras' streams and their live state.
    pub cameras: Arc<crate::cameras::Cameras>,
    /// Deletions go through the recorder.
    pub recorder: crate::record::RecorderHandle,
    /// The catalog writer's counters.
    pub flusher: Arc<crate::record::flusher::FlusherStats>,
    /// What the recorders wrote, for the flash wear report.
    pub wear: Arc<crate::record::Wear>,
    /// Pre-roll history across every stream.
    pub preroll: Arc<crate::preroll::HistoryPool>,
    /// The byte pools shared buffers hold their memory in, by name, for `/metrics`.
    pub pools: Vec<(&'static str, Arc<crate::base::BytePool>)>,
    pub events: Arc<crate::events::Events>,
    /// The box as firmware: updates, reboot, factory reset, support bundle.
    pub system: Arc<crate::system::SystemApi>,
    /// Live view (none when turned off: `[webrtc] port = 0`).
    pub webrtc: Option<crate::webrtc::WebrtcHandle>,
    /// The config file as the web face changes it (none: the demo, which has no file).
    pub config: Option<Arc<crate::daemon::Reconfig>>,
    pub config_stats: Arc<ConfigStats>,
    /// The HTTPS certificate store (none: no HTTPS port).
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// Single sign-on's providers and sign-ins in progress.
    pub oidc: Arc<crate::oidc::Oidc>,
    /// The MQTT room: its state for `/api/system/mqtt` and `/metrics`.
    pub mqtt: Arc<crate::mqtt::Mqtt>,
    /// The cameras whose own events are followed (ONVIF): `/api/system/camera-events`.
    pub camera_events: Arc<crate::onvif::subscribe::Followers>,
    /// The offsite archive: its targets' state for `/api/system/archive` and `/metrics`.
    pub archive: Arc<crate::archive::Archive>,
    /// The camera port: `/api/system/camera-port`, and the address the web face does not
    /// answer at.
    pub camera_port: Arc<crate::camport::port::CameraPort>,
}

/// Config plans and applies, for `/metrics`.
#[derive(Default)]
pub struct ConfigStats {
    pub plans: std::sync::atomic::AtomicU64,
    pub applies: std::sync::atomic::AtomicU64,
    pub refused: std::sync::atomic::AtomicU64,
    pub conflicts: std::sync::atomic::AtomicU64,
    pub probes: std::sync::atomic::AtomicU64,
    pub searches: std::sync::atomic::AtomicU64,
    pub onvif_reads: std::sync::atomic::AtomicU64,
}

impl Services {
    /// Every service on `catalog` in `data_dir` with no camera running yet, no firmware and
    /// no live view: a flusher with no retention caps, an event intake that knows `cameras`. For tests, fuzzing and
    /// benchmarks; the daemon builds its own from its config.
    pub fn without_cameras(
        catalog: Arc<crate::catalog::Catalog>,
        data_dir: std::path::PathBuf,
        cameras: Arc<crate::cameras::Cameras>,
    ) -> Result<Services, crate::catalog::CatalogError> {
        let mut config = crate::config::Config::demo(data_dir.clone(), ([127, 0, 0, 1], 0).into());
        config.cameras.clear();
        // Keeps what it is given: the catalog may hold anything (a benchmark's month of
        // rows), and only a full disk makes the flusher delete.
        config.retention =
            crate::config::Retention { stream_max_bytes: u64::MAX, total_max_bytes: u64::MAX, held_max_percent: 50 };
        let clocks = crate::clock::RealClocks::shared();
        // The flusher thread ends once the last handle to it (this one's) is gone.
        let recorder = crate::record::Recorder::start(&config, catalog.clone(), clocks.clone())?;
        let events = crate::events::Events::new(
            catalog.clone(),
            data_dir.clone(),
            cameras.clone(),
            None,
            config.events_max_bytes,
            clocks,
            recorder.holds.clone(),
        );
        let events = Arc::new(events);
        let mqtt = crate::mqtt::Mqtt::new(catalog.clone(), None);
        let camera_port = crate::camport::port::CameraPort::new(catalog.clone(), crate::clock::RealClocks::shared());
        let archive = crate::archive::Archive::new(
            catalog.clone(),
            data_dir.clone(),
            crate::clock::RealClocks::shared(),
            recorder.gate.clone(),
        );
        Ok(Services {
            recorder: recorder.handle(),
            flusher: recorder.flusher_stats.clone(),
            wear: recorder.wear.clone(),
            preroll: recorder.preroll.clone(),
            pools: recorder.pools(&events, &crate::live::gop_pool(), None),
            events,
            system: Arc::new(crate::system::SystemApi::new(data_dir.clone(), None)),
            catalog,
            data_dir,
            cameras,
            webrtc: None,
            config: None,
            config_stats: Arc::default(),
            tls: None,
            oidc: Arc::new(crate::oidc::Oidc::new(&[])),
            mqtt,
            camera_events: Arc::default(),
            camera_port,
            archive,
        })
    }
}

/// What every request handler shares.
struct Ctx {
    stats: Arc<HttpStats>,
    auth: Arc<Auth>,
    services: Arc<Services>,
    handlers: Semaphore,
    waiting: AtomicUsize,
    /// Exports streaming: [`limits::EXPORTS_RUNNING_MAX`].
    exports: Arc<Semaphore>,
    /// Camera probes running: [`limits::PROBES_RUNNING_MAX`].
    probes: Semaphore,
    /// Searches for cameras running: [`limits::DISCOVERIES_RUNNING_MAX`].
    searches: Semaphore,
    /// Reads of archive buckets running: [`limits::ARCHIVE_READS_RUNNING_MAX`].
    archive_reads: Semaphore,
    /// Archived exports planned lately, so a player's byte ranges do not plan again.
    archive_plans: archive::Plans,
}

impl Ctx {
    fn new(stats: Arc<HttpStats>, auth: Arc<Auth>, services: Arc<Services>) -> Ctx {
        Ctx {
            stats,
            auth,
            services,
            handlers: Semaphore::new(limits::HTTP_HANDLERS_MAX),
            waiting: 0.into(),
            exports: Arc::new(Semaphore::new(limits::EXPORTS_RUNNING_MAX)),
            probes: Semaphore::new(limits::PROBES_RUNNING_MAX),
            searches: Semaphore::new(limits::DISCOVERIES_RUNNING_MAX),
            archive_reads: Semaphore::new(limits::ARCHIVE_READS_RUNNING_MAX),
            archive_plans: archive::Plans::default(),
        }
    }

    /// With an empty catalog in `dir` and no camera (fuzzing and tests).
    fn bare(dir: &std::path::Path) -> Ctx {
        Ctx::with_cameras(dir, Arc::default())
    }

    /// With an empty catalog in `dir` and the cameras `cameras` knows (none running).
    fn with_cameras(dir: &std::path::Path, cameras: Arc<crate::cameras::Cameras>) -> Ctx {
        let catalog =
            Arc::new(crate::catalog::Catalog::open(&dir.join("catalog.redb")).expect("a catalog in a fresh dir"));
        let services =
            Services::without_cameras(catalog.clone(), dir.into(), cameras).expect("services in a fresh dir");
        Ctx::new(Arc::default(), Arc::new(Auth::new(catalog, crate::clock::RealClocks::shared())), Arc::new(services))
    }
}

/// A reply's body that keeps its connection's reply open ([`conns::Conn::quiet`]) until it
/// has been written whole or dropped.
struct Marked {
    inner: Body,
    _mark: conns::ReplyMark,
}

impl hyper::body::Body for Marked {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

/// Binds the listening socket (so a taken port fails the start, clearly).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    TcpListener::bind(addr).await.map_err(|source| ListenError { addr, source })
}

/// The web face's listening sockets: plain HTTP (everything, or when HTTPS is on only
/// `/healthz` and redirects to HTTPS), and HTTPS with the box's certificates.
#[derive(Default)]
pub struct Listeners {
    pub plain: Option<TcpListener>,
    pub https: Option<(TcpListener, Arc<crate::tls::Tls>)>,
}

/// How a connection's requests are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Plain HTTP, every route (no HTTPS port).
    Http,
    /// Plain HTTP beside an HTTPS port: `/healthz`, and a redirect for everything else.
    Redirect { https_port: u16, local: SocketAddr },
    /// HTTPS: every route, and the session cookie is `Secure`.
    Https,
}

/// A request that came over HTTPS (an extension of its parts).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverHttps;

/// How one listener's connections start.
#[derive(Clone)]
enum Face {
    Plain { https_port: Option<u16> },
    Https { acceptor: tokio_rustls::TlsAcceptor, handshakes: Arc<crate::tls::Handshakes> },
}

/// Serves until `shutdown` turns true: every listener shares one connection table and one
/// set of handler slots.
pub async fn serve(
    listeners: Listeners,
    stats: Arc<HttpStats>,
    auth: Arc<Auth>,
    services: Arc<Services>,
    shutdown: watch::Receiver<bool>,
) {
    let table = conns::Table::new();
    let ctx = Arc::new(Ctx::new(stats.clone(), auth, services));
    let https_port = listeners.https.as_ref().and_then(|(l, _)| l.local_addr().ok()).map(|a| a.port());
    let mut loops = Vec::new();
    if let Some(l) = listeners.plain {
        let face = Face::Plain { https_port };
        loops.push(tokio::spawn(accept_loop(l, face, table.clone(), ctx.clone(), shutdown.clone())));
    }
    if let Some((l, tls)) = listeners.https {
        let config = match tls.server_config() {
            Ok(c) => c,
            Err(e) => {
                warn!("HTTPS is off: {e}");
                return;
            }
        };
        let face = Face::Https {
            acceptor: tokio_rustls::TlsAcceptor::from(config),
            handshakes: Arc::new(crate::tls::Handshakes::default()),
        };
        loops.push(tokio::spawn(accept_loop(l, face, table.clone(), ctx.clone(), shutdown.clone())));
    }
    for l in loops {
        let _ = l.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    face: Face,
    table: Arc<conns::Table>,
    ctx: Arc<Ctx>,
    mut shutdown: watch::Receiver<bool>,
) {
    let stats = ctx.stats.clone();
    if let Ok(addr) = listener.local_addr() {
        let scheme = if matches!(face, Face::Https { .. }) { "https" } else { "http" };
        info!(%addr, scheme, "web face listening");
    }
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off a moment rather than spin.
                warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // The camera port is the cameras' network: the web face is not there unless the
        // config says so (`[camera_port] web`).
        if stream.local_addr().is_ok_and(|local| ctx.services.camera_port.refuses_web(local.ip(), peer.ip())) {
            stats.camera_port_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        stats.connections_total.fetch_add(1, Ordering::Relaxed);
        // Replies and TLS handshake flights leave at once, never held for an ACK.
        let _ = stream.set_nodelay(true);
        match &face {
            Face::Plain { https_port } => {
                let scheme = match (https_port, stream.local_addr()) {
                    (Some(https_port), Ok(local)) => Scheme::Redirect { https_port: *https_port, local },
                    _ => Scheme::Http,
                };
                let Some(slot) = admit_connection(&table, &stats).await else {
                    let _ = stream.try_write(REFUSED);
                    continue;
                };
                tokio::spawn(run_connection(slot, stream, ctx.clone(), peer, scheme));
            }
            Face::Https { acceptor, handshakes } => {
                let (place, took) = handshakes.enter();
                if took {
                    stats.tls_handshakes_dropped.fetch_add(1, Ordering::Relaxed);
                }
                let (acceptor, table, ctx) = (acceptor.clone(), table.clone(), ctx.clone());
                tokio::spawn(async move {
                    let Some(mut tls) = handshake(&acceptor, stream, place, &ctx.stats).await else { return };
                    let Some(slot) = admit_connection(&table, &ctx.stats).await else {
                        use tokio::io::AsyncWriteExt;
                        let refuse = async {
                            let _ = tls.write_all(REFUSED).await;
                            let _ = tls.shutdown().await;
                        };
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), refuse).await;
                        return;
                    };
                    run_connection(slot, tls, ctx, peer, Scheme::Https).await
                });
            }
        }
    }
}

/// What a client gets when every connection slot is working.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// A connection slot for a new connection ([`conns::Table::admit`]), counted.
async fn admit_connection(table: &Arc<conns::Table>, stats: &HttpStats) -> Option<conns::Slot> {
    let (admission, took) = table.admit().await;
    if took {
        stats.connections_evicted.fetch_add(1, Ordering::Relaxed);
    }
    match admission {
        conns::Admission::Slot(slot) => Some(slot),
        conns::Admission::Full => {
            stats.connections_refused.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// A TLS handshake, holding its `place` among those in progress until it is done, fails,
/// runs past [`limits::TLS_HANDSHAKE_TIMEOUT_MS`] or is dropped for a newcomer.
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    place: crate::tls::Place,
    stats: &HttpStats,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let accept = acceptor.accept_with(stream, crate::tls::bound_buffers);
    let timeout = std::time::Duration::from_millis(limits::TLS_HANDSHAKE_TIMEOUT_MS);
    let done = tokio::select! {
        r = tokio::time::timeout(timeout, accept) => r,
        () = place.dropped() => return None,
    };
    match done {
        Ok(Ok(tls)) => {
            stats.tls_handshakes.fetch_add(1, Ordering::Relaxed);
            Some(tls)
        }
        Ok(Err(e)) => {
            stats.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
            debug!("TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            stats.tls_handshake_timeouts.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// Serves one admitted connection until it ends or the table takes its slot.
async fn run_connection<S>(slot: conns::Slot, stream: S, ctx: Arc<Ctx>, peer: SocketAddr, scheme: Scheme)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = slot.conn.clone();
    let io = guard::Guarded::new(stream, ctx.stats.clone(), conn.clone());
    let stats = ctx.stats.clone();
    stats.connections_open.fetch_add(1, Ordering::Relaxed);
    tokio::select! {
        () = connection(io, ctx, peer, conn.clone(), scheme) => {}
        () = conn.evicted() => debug!(%peer, "connection closed to make room for a new one"),
    }
    stats.connections_open.fetch_sub(1, Ordering::Relaxed);
    drop(slot);
}

/// Serves one connection until it ends: hyper's HTTP/1.1 with the head ceilings configured,
/// then [`check_head`], admission and the routes for each request.
async fn connection<I>(io: I, ctx: Arc<Ctx>, peer: SocketAddr, conn: Arc<conns::Conn>, scheme: Scheme)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let stats = ctx.stats.clone();
    let service = service_fn(move |req| handle(req, ctx.clone(), peer, conn.clone(), scheme));
    let result = http1::Builder::new()
        .timer(TokioTimer::new())
        // The guard's own read clock covers the head, with a 408; hyper's would drop the
        // connection silently.
        .header_read_timeout(None)
        // A client that sends its requests and closes its side still gets every answer.
        .half_close(true)
        .max_headers(limits::HTTP_HEADERS_MAX)
        .max_header_size(limits::HTTP_HEAD_MAX_BYTES)
        .max_buf_size(limits::HTTP_HEAD_MAX_BYTES.max(8192))
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = result {
        if e.is_parse_too_large() {
            stats.headers_too_large.fetch_add(1, Ordering::Relaxed);
        } else if e.is_parse() {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        }
        debug!(%peer, "connection ended: {e}");
    }
}

/// The real connection code on an in-memory pipe, for the fuzz target `http_head` (`fuzz/`)
/// and tests: whatever bytes a client sends, served as one connection from a LAN address.
#[doc(hidden)]
pub mod fuzzing {
    use std::net::SocketAddr;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{Ctx, connection, guard};

    /// Responses past this are not read (the UI's largest file is far below it).
    const READ_MAX_BYTES: u64 = 4 << 20;

    /// An input that starts with this is sent paced ([`Pace`]): its next byte says how.
    pub const PACED: &[u8] = b"~P";

    /// How a paced input is sent: in pieces with pauses (on a simulated clock, so the
    /// read deadlines are reached in no time), and maybe without ever closing.
    #[derive(Clone, Copy, Debug)]
    pub struct Pace {
        pub piece_bytes: usize,
        pub pause_ms: u64,
        /// Keep the client's side open after the input: the server must end it.
        pub hold_open: bool,
    }

    impl Pace {
        /// The pace a byte picks: piece, pause and whether to hold the connection open.
        pub fn from_byte(b: u8) -> Pace {
            const PIECES: [usize; 8] = [1, 2, 7, 64, 512, 4096, 16 << 10, 1 << 20];
            const PAUSES_MS: [u64; 8] = [0, 10, 500, 2_000, 10_000, 29_000, 31_000, 60_000];
            Pace {
                piece_bytes: PIECES[usize::from(b & 7)],
                pause_ms: PAUSES_MS[usize::from((b >> 3) & 7)],
                hold_open: b & 0x40 != 0,
            }
        }
    }

    pub struct Server {
        rt: tokio::runtime::Runtime,
        /// With its clock paused: it moves on by itself whenever every task waits (tokio's
        /// test clock, so only in tests and the fuzz targets' build).
        #[cfg(any(test, feature = "fuzzing"))]
        paced_rt: tokio::runtime::Runtime,
        ctx: Arc<Ctx>,
    }

    impl Server {
        /// A server with an empty catalog in `dir`, no camera and no recorder.
        pub fn new(dir: &Path) -> Server {
            let ctx = Arc::new(Ctx::bare(dir));
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            #[cfg(any(test, feature = "fuzzing"))]
            let paced_rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("a runtime");
            Server {
                rt,
                #[cfg(any(test, feature = "fuzzing"))]
                paced_rt,
                ctx,
            }
        }

        /// What a fuzz input asks: [`PACED`] and a pace byte first, or bytes sent at once.
        #[cfg(any(test, feature = "fuzzing"))]
        pub fn run(&self, data: &[u8]) -> Vec<u8> {
            match data.strip_prefix(PACED).and_then(|rest| rest.split_first()) {
                Some((&pace, input)) => self.exchange_paced(input, Pace::from_byte(pace)),
                None => self.exchange(data),
            }
        }

        /// Sends `input`, closes the client's side, and returns everything the server wrote
        /// (up to 4 MiB). Panics if the server has not closed the connection within 10 s.
        pub fn exchange(&self, input: &[u8]) -> Vec<u8> {
            let pace = Pace { piece_bytes: input.len().max(1), pause_ms: 0, hold_open: false };
            self.rt.block_on(self.serve(input, pace, Duration::from_secs(10)))
        }

        /// Sends `input` at `pace` on the simulated clock; panics if the server has not ended
        /// the connection within an hour of it.
        #[cfg(any(test, feature = "fuzzing"))]
        pub fn exchange_paced(&self, input: &[u8], pace: Pace) -> Vec<u8> {
            self.paced_rt.block_on(self.serve(input, pace, Duration::from_secs(3600)))
        }

        async fn serve(&self, input: &[u8], pace: Pace, limit: Duration) -> Vec<u8> {
            let peer: SocketAddr = ([192, 0, 2, 7], 40000).into();
            let (client, server) = tokio::io::duplex(64 << 10);
            let conn = Arc::new(super::conns::Conn::new());
            let io = guard::Guarded::new(server, self.ctx.stats.clone(), conn.clone());
            let served = tokio::spawn(connection(io, self.ctx.clone(), peer, conn, super::Scheme::Http));
            let (rx, mut tx) = tokio::io::split(client);
            let send = async {
                for piece in input.chunks(pace.piece_bytes) {
                    // The server may close early (a refused head): the rest is not read.
                    if tx.write_all(piece).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(pace.pause_ms)).await;
                }
                if pace.hold_open {
                    std::future::pending::<()>().await;
                }
                let _ = tx.shutdown().await;
            };
            let mut out = Vec::new();
            let mut rx = rx.take(READ_MAX_BYTES);
            let receive = rx.read_to_end(&mut out);
            // The send side may wait forever (held open): the server's close ends the exchange.
            let both = async {
                tokio::pin!(send);
                tokio::pin!(receive);
                tokio::select! {
                    r = &mut receive => r,
                    () = &mut send => receive.await,
                }
            };
            let read = tokio::time::timeout(limit, both).await.expect("the connection ended");
            read.expect("reading an in-memory pipe");
            drop(rx);
            let _ = served.await;
            out
        }
    }

    /// What every exchange must show: nothing, or HTTP answers, no 500, and a 408 only as
    /// the last answer (one writer per connection).
    pub fn check(out: &[u8]) -> Result<(), String> {
        if out.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(out);
        let shown = || text.chars().take(512).collect::<String>();
        // An HTTP/1.0 request is answered in HTTP/1.0.
        if !(out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 ")) {
            return Err(format!("not HTTP: {}", shown()));
        }
        let statuses: Vec<&str> = text.match_indices("HTTP/1.").filter_map(|(i, _)| text.get(i + 9..i + 12)).collect();
        if statuses.contains(&"500") {
            return Err(format!("a 500: {}", shown()));
        }
        if let Some(at) = statuses.iter().position(|s| *s == "408")
            && at + 1 != statuses.len()
        {
            return Err(format!("an answer after the 408: {statuses:?}"));
        }
        Ok(())
    }
}

/// The largest body a route takes: an SDP offer for WHEP, an event with its snapshot, small
/// JSON everywhere else.
pub(crate) fn body_max_bytes(method: &http::Method, path: &str) -> u64 {
    if method == http::Method::POST && path.starts_with("/api/whep/") {
        limits::WEBRTC_OFFER_MAX_BYTES as u64
    } else if method == http::Method::POST && path == "/api/events" {
        limits::EVENT_INTAKE_BODY_MAX_BYTES as u64
    } else if method == http::Method::POST && path == "/api/system/update" {
        limits::UPDATE_BODY_MAX_BYTES
    } else if method == http::Method::POST && path == "/api/system/https" {
        system::HTTPS_UPLOAD_BODY_MAX_BYTES
    } else {
        limits::HTTP_SMALL_BODY_MAX_BYTES
    }
}

/// Checks a parsed head against the limits hyper does not enforce.
fn check_head(req: &Request<Incoming>, stats: &HttpStats) -> Option<Reply> {
    // "METHOD SP request-target SP HTTP/1.1 CRLF"
    let request_line = req.method().as_str().len() + 1 + req.uri().to_string().len() + 11;
    if request_line > limits::HTTP_LINE_MAX_BYTES {
        stats.uri_too_long.fetch_add(1, Ordering::Relaxed);
        return Some(error(StatusCode::URI_TOO_LONG, "uri_too_long", "the request line is over 8 KiB"));
    }
    // "name: value CRLF"
    let too_long = req.headers().iter().any(|(n, v)| n.as_str().len() + 2 + v.len() + 2 > limits::HTTP_LINE_MAX_BYTES);
    if too_long {
        stats.headers_too_large.fetch_add(1, Ordering::Relaxed);
        return Some(error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header_too_large",
            "a header line is over 8 KiB",
        ));
    }
    let declared = reply::declared_length(req.headers());
    let max = body_max_bytes(req.method(), req.uri().path());
    if declared.is_some_and(|n| n > max) {
        stats.body_too_large.fetch_add(1, Ordering::Relaxed);
        let message = format!("the request body is over {} KiB", max >> 10);
        let mut r = error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", &message);
        // The body will not be read: do not keep the connection for the next request.
        r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        return Some(r);
    }
    // RFC 9112 § 3.2: one Host, and an HTTP/1.1 request without one is refused.
    let hosts = req.headers().get_all(header::HOST).iter().count();
    if hosts > 1 || (hosts == 0 && req.version() == http::Version::HTTP_11) {
        stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Some(error(StatusCode::BAD_REQUEST, "bad_host", "a request names its host once"));
    }
    None
}

async fn handle(
    req: Request<Incoming>,
    ctx: Arc<Ctx>,
    peer: SocketAddr,
    conn: Arc<conns::Conn>,
    scheme: Scheme,
) -> Result<Reply, Infallible> {
    use http_body_util::BodyExt;
    ctx.stats.requests.fetch_add(1, Ordering::Relaxed);
    let mark = conn.request_started();
    let reply = answer(req, &ctx, peer, &conn, scheme).await;
    conn.handler_done();
    Ok(reply.map(|inner| Marked { inner, _mark: mark }.boxed_unsync()))
}

/// The reply to one request: the head's checks, `/healthz`, a small body read, a handler
/// slot, then the route.
async fn answer(mut req: Request<Incoming>, ctx: &Ctx, peer: SocketAddr, conn: &conns::Conn, scheme: Scheme) -> Reply {
    if let Some(refusal) = check_head(&req, &ctx.stats) {
        return refusal;
    }
    if matches!(*req.method(), http::Method::GET | http::Method::HEAD) && req.uri().path() == "/healthz" {
        return text("ok\n".into(), "text/plain; charset=utf-8");
    }
    match scheme {
        Scheme::Redirect { https_port, local } => {
            ctx.stats.redirects.fetch_add(1, Ordering::Relaxed);
            let reply = reply::to_https(req.headers(), req.uri(), https_port, local);
            // The body, if any, is not read: the connection ends with the reply.
            return if has_body(req.headers()) { closing(reply) } else { reply };
        }
        Scheme::Https => {
            req.extensions_mut().insert(OverHttps);
        }
        Scheme::Http => {}
    }
    let max = body_max_bytes(req.method(), req.uri().path());
    let (parts, body) = req.into_parts();
    let body = if max <= limits::HTTP_SMALL_BODY_MAX_BYTES {
        match reply::read_body(RequestBody::Right(body), ctx, max as usize).await {
            Ok(bytes) => RequestBody::Left(Full::new(bytes)),
            Err(refusal) => return refusal,
        }
    } else {
        RequestBody::Right(body)
    };
    // Login and setup wait in their own bounded line (`Auth`), for the hashing.
    if parts.method == http::Method::POST && matches!(parts.uri.path(), "/api/login" | "/api/setup") {
        // Working, not waiting for its client: a newcomer does not take its slot mid-hash.
        if !conn.set_admitted() {
            return taken();
        }
        return api::route(parts, body, ctx, peer).await;
    }
    let on_wire = matches!(body, RequestBody::Right(_)) && has_body(&parts.headers);
    let (_permit, waited) = match ctx.handlers.try_acquire() {
        Ok(p) => (p, false),
        Err(_) => match admit(ctx).await {
            Ok(p) => (p, true),
            Err(refusal) => return closing(refusal),
        },
    };
    if !conn.set_admitted() {
        return taken();
    }
    // The wait for a handler was the server's, not the client's.
    if on_wire && waited {
        conn.body_read_from_now();
    }
    let reply = api::route(parts, body, ctx, peer).await;
    // A refusal may leave the body unread: the connection ends with the reply, so no later
    // read of that body can time out into a second answer.
    if on_wire && !reply.status().is_success() { closing(reply) } else { reply }
}

/// True when the head announces a body.
fn has_body(headers: &http::HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING) || reply::declared_length(headers).is_some_and(|n| n > 0)
}

/// The answer to a request whose connection the table took for a newcomer before the
/// request was admitted (it is seldom written: the connection is ending).
fn taken() -> Reply {
    closing(error(StatusCode::SERVICE_UNAVAILABLE, "busy", "the connection was closed to make room"))
}

/// A handler slot: at once if one is free, after a wait if fewer than
/// [`limits::HTTP_REQUESTS_WAITING_MAX`] requests are waiting, else a `503`.
async fn admit(ctx: &Ctx) -> Result<tokio::sync::SemaphorePermit<'_>, Reply> {
    if let Ok(p) = ctx.handlers.try_acquire() {
        return Ok(p);
    }
    /// A place in the line, given back however the wait ends (a connection taken for a
    /// newcomer drops its request mid-wait).
    struct InLine<'a>(&'a AtomicUsize);
    impl Drop for InLine<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let place = InLine(&ctx.waiting);
    if ctx.waiting.fetch_add(1, Ordering::AcqRel) >= limits::HTTP_REQUESTS_WAITING_MAX {
        ctx.stats.busy.fetch_add(1, Ordering::Relaxed);
        return Err(error(StatusCode::SERVICE_UNAVAILABLE, "busy", "too many requests at once"));
    }
    let p = ctx.handlers.acquire().await;
    drop(place);
    p.map_err(|_| error(StatusCode::SERVICE_UNAVAILABLE, "stopping", "the server is stopping"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The services tests and benchmarks build keep every recording they are given: their
    /// flusher has no retention caps (it once deleted a benchmark's month of rows to fit the
    /// demo's 1 GiB).
    #[test]
    fn services_without_cameras_keep_every_recording() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(crate::catalog::Catalog::open(&dir.path().join("catalog.redb")).unwrap());
        let id = crate::record::testing::recording(&catalog, dir.path(), "cam/main", 1_764_500_000_000_000, 2);
        let mut row = catalog.recording(id).unwrap().unwrap();
        row.bytes = 4 << 30;
        catalog.commit(&crate::catalog::Batch { recordings: vec![(id, row)], ..Default::default() }).unwrap();
        let services = Services::without_cameras(catalog.clone(), dir.path().into(), Arc::default()).unwrap();
        // The flusher has begun (retention runs before its first message) once it answers.
        assert_eq!(services.recorder.delete_range(u32::MAX, 0, 1), Some((0, 0, 0)));
        assert!(catalog.recording(id).unwrap().is_some(), "kept");
    }

    #[test]
    fn the_in_memory_connection_answers_like_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let server = fuzzing::Server::new(dir.path());
        let status = |out: &[u8]| String::from_utf8_lossy(&out[..12.min(out.len())]).into_owned();
        let two =
            server.exchange(b"GET /healthz HTTP/1.1\r\nhost: a\r\n\r\nGET /api/cameras HTTP/1.1\r\nhost: a\r\n\r\n");
        let text = String::from_utf8_lossy(&two);
        assert!(text.starts_with("HTTP/1.1 200") && text.contains("HTTP/1.1 401"), "{text}");
        assert_eq!(status(&server.exchange(b"\x00\x01garbage\r\n\r\n")), "HTTP/1.1 400");
        let long = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(limits::HTTP_LINE_MAX_BYTES));
        assert_eq!(status(&server.exchange(long.as_bytes())), "HTTP/1.1 431");
        let big = b"POST /api/login HTTP/1.1\r\nhost: a\r\ncontent-length: 999999\r\n\r\n";
        assert_eq!(status(&server.exchange(big)), "HTTP/1.1 413");
        // One Host, always.
        assert_eq!(status(&server.exchange(b"GET /healthz HTTP/1.1\r\n\r\n")), "HTTP/1.1 400");
        assert_eq!(status(&server.exchange(b"GET /healthz HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n")), "HTTP/1.1 400");
        assert_eq!(status(&server.exchange(b"GET /healthz HTTP/1.0\r\n\r\n")), "HTTP/1.0 200");
    }

    #[tokio::test]
    async fn with_every_handler_busy_eight_requests_wait_and_the_ninth_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx::bare(dir.path());
        let running: Vec<_> = (0..limits::HTTP_HANDLERS_MAX).map(|_| admit(&ctx)).collect();
        let mut held = Vec::new();
        for r in running {
            held.push(r.await.ok().expect("a free handler"));
        }
        let mut waiting: Vec<_> = (0..limits::HTTP_REQUESTS_WAITING_MAX).map(|_| Box::pin(admit(&ctx))).collect();
        for w in &mut waiting {
            assert!(futures::poll!(w.as_mut()).is_pending(), "waits for a handler");
        }
        let refused = admit(&ctx).await.err().expect("the line is full");
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ctx.stats.busy.load(Ordering::Relaxed), 1);
        drop(held.pop());
        assert!(futures::poll!(waiting[0].as_mut()).is_ready(), "a freed handler goes to a waiting request");
        // A waiting request dropped mid-wait (its connection taken) gives its place back.
        waiting.truncate(1);
        assert_eq!(ctx.waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn with_four_exports_running_the_fifth_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx::bare(dir.path());
        let parts = Request::get("/x?from_us=1&to_us=2").body(()).unwrap().into_parts().0;
        let stream = routes::StreamPath { camera: "a", kind: crate::base::StreamKind::Main };
        let running: Vec<_> =
            (0..limits::EXPORTS_RUNNING_MAX).map(|_| ctx.exports.clone().try_acquire_owned().unwrap()).collect();
        assert_eq!(media::export(&ctx, &parts, stream, 1, 2).await.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(running);
        assert_eq!(media::export(&ctx, &parts, stream, 1, 2).await.status(), StatusCode::NOT_FOUND, "nothing recorded");
    }

    /// Slow clients on the simulated clock: each gets one 408 at its deadline, after a
    /// `100 Continue` when it asked for one, and nothing else.
    #[test]
    fn slow_clients_get_one_408_at_their_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let server = fuzzing::Server::new(dir.path());
        let login = "POST /api/login HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\n";
        let held = |piece_bytes, pause_ms| fuzzing::Pace { piece_bytes, pause_ms, hold_open: true };
        let statuses = |out: Vec<u8>| {
            fuzzing::check(&out).unwrap();
            let text = String::from_utf8_lossy(&out).into_owned();
            text.match_indices("HTTP/1.1 ").map(|(i, _)| text[i + 9..i + 12].to_string()).collect::<Vec<_>>()
        };
        let expect = format!("{login}content-length: 100\r\nexpect: 100-continue\r\n\r\n");
        assert_eq!(statuses(server.exchange_paced(expect.as_bytes(), held(4096, 0))), ["100", "408"]);
        let head = "GET /healthz HTTP/1.1\r\nhost: a\r\nx: aaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        assert_eq!(statuses(server.exchange_paced(head.as_bytes(), held(1, 2_000))), ["408"]);
        let body = format!("{login}content-length: 50\r\n\r\n{{\"username\":\"a\",");
        assert_eq!(statuses(server.exchange_paced(body.as_bytes(), held(1, 500))), ["408"]);
        // Idle after an answer: the next request's clock runs out.
        let idle = "GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n";
        assert_eq!(statuses(server.exchange_paced(idle.as_bytes(), held(4096, 0))), ["200", "408"]);
    }

    /// Serves one connection on an in-memory pipe of `pipe_bytes` on the simulated clock;
    /// returns the client's end and the connection's state.
    fn pipe(ctx: Arc<Ctx>, pipe_bytes: usize) -> (tokio::io::DuplexStream, Arc<conns::Conn>) {
        let (client, server) = tokio::io::duplex(pipe_bytes);
        let conn = Arc::new(conns::Conn::new());
        let io = guard::Guarded::new(server, ctx.stats.clone(), conn.clone());
        tokio::spawn(connection(io, ctx, ([192, 0, 2, 7], 40000).into(), conn.clone(), Scheme::Http));
        (client, conn)
    }

    /// Reads from the pipe until what arrived satisfies `done`; panics if it closes first.
    async fn read_until(client: &mut tokio::io::DuplexStream, done: impl Fn(&str) -> bool) -> String {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        while !done(&String::from_utf8_lossy(&got)) {
            let read = client.read_buf(&mut got).await.unwrap();
            assert!(read > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// hyper takes a reply's whole body into its write buffer and drops it before the end
    /// has reached the socket: the connection still writes (a newcomer may not take it while
    /// the client takes bytes, and its guard writes no `408`) until the socket has taken the
    /// last byte.
    #[tokio::test(start_paused = true)]
    async fn a_reply_still_in_the_write_buffer_keeps_its_connection_busy() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        // Room for a few bytes: the reply's head does not fit, and the client does not read.
        let (mut client, conn) = pipe(Arc::new(Ctx::bare(dir.path())), 16);
        client.write_all(b"GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(!conn.in_handler(), "the handler is done");
        assert!(!conn.quiet(), "its reply is still leaving");
        // Still leaving as long as the client takes a byte within the write timeout.
        tokio::time::sleep(std::time::Duration::from_millis(limits::HTTP_WRITE_TIMEOUT_MS - 2_000)).await;
        assert!(!conn.quiet());
        let mut one = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut client, &mut one).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(limits::HTTP_WRITE_TIMEOUT_MS - 2_000)).await;
        assert!(!conn.quiet(), "a minute on, it still leaves");
        let text = read_until(&mut client, |t| t.ends_with("ok\n")).await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        assert!(conn.quiet(), "written whole");
        assert!(one == *b"H" && text.starts_with("TTP/1.1 200"), "{text}");
    }

    /// A request that waited for a handler slot longer than the read timeout: its body is
    /// read on a fresh clock (it got an instant `408` when the clock ran from its head).
    #[tokio::test(start_paused = true)]
    async fn a_body_that_waited_for_a_handler_is_read_on_a_fresh_clock() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let cameras = crate::cameras::Cameras::main_streams(&["front"]);
        let ctx = Arc::new(Ctx::with_cameras(dir.path(), cameras));
        let (_, token) = ctx.auth.create_token("detector", crate::auth::scope::EVENTS_WRITE).unwrap();
        // Every handler is busy for 40 s.
        let busy = ctx.handlers.try_acquire_many(limits::HTTP_HANDLERS_MAX as u32).unwrap();
        let (mut client, _conn) = pipe(ctx.clone(), 64 << 10);
        let body = br#"{"camera":"front","labels":["person"]}"#;
        let head = format!(
            "POST /api/events HTTP/1.1\r\nhost: a\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
            body.len()
        );
        client.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(40)).await;
        drop(busy);
        // The handler asks for the body: `100 Continue`, then the client sends it.
        let interim = read_until(&mut client, |t| t.contains("\r\n\r\n")).await;
        assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        client.write_all(body).await.unwrap();
        let mut rest = Vec::new();
        client.read_buf(&mut rest).await.unwrap();
        let text = String::from_utf8_lossy(&rest);
        assert!(text.starts_with("HTTP/1.1 201"), "stored: {text}");
    }

    /// What the `http_head` fuzz target found worth keeping, and what once failed it, is
    /// answered in HTTP or closed, with no 500.
    #[test]
    fn the_request_head_fuzz_corpus_is_answered() {
        let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let dir = tempfile::tempdir().unwrap();
        let server = fuzzing::Server::new(dir.path());
        let mut n = 0;
        for sub in ["corpus/http_head", "crashes/http_head"] {
            for entry in std::fs::read_dir(fuzz.join(sub)).unwrap() {
                let path = entry.unwrap().path();
                let out = server.run(&std::fs::read(&path).unwrap());
                if let Err(e) = fuzzing::check(&out) {
                    panic!("{}: {e}", path.display());
                }
                n += 1;
            }
        }
        assert!(n > 100, "the corpus is under fuzz/");
    }
}

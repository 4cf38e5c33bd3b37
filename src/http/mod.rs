//! The HTTP/1.1 listener (hyper), with every ceiling of `src/limits.rs` enforced and counted.
//!
//! Order of refusal, each with its status and a counter in `/metrics`:
//! - connection cap ([`limits::HTTP_CONNECTIONS_MAX`]): accepted, answered `503`, closed —
//!   never left waiting in the kernel's backlog;
//! - slow requests: `408` ([`guard`]);
//! - head too large or too many header fields: `431` (hyper's own checks, configured here);
//! - request line over [`limits::HTTP_LINE_MAX_BYTES`]: `414`; one header line over it:
//!   `431` (hyper has no per-line limit, so they are checked on the parsed head);
//! - a declared body larger than the route allows: `413`;
//! - every handler busy and [`limits::HTTP_REQUESTS_WAITING_MAX`] requests already waiting:
//!   `503`;
//! - unparseable requests: `400` (hyper).
//!
//! Routes ([`api`]): `/healthz` (no auth, no details), `/metrics` (Prometheus text; a
//! `metrics` token or an admin), setup, login and the account API.

mod api;
pub mod events;
mod guard;
mod live;
mod media;
mod metrics;
pub mod parse;
mod system;
mod ui;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
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

/// Counters of the listener, each refusal by its kind.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub connections_open: AtomicUsize,
    pub connections_total: AtomicU64,
    /// 503: over [`limits::HTTP_CONNECTIONS_MAX`].
    pub connections_refused: AtomicU64,
    pub requests: AtomicU64,
    /// 408: the request did not arrive in time.
    pub request_timeouts: AtomicU64,
    pub write_timeouts: AtomicU64,
    /// 400: hyper could not parse the request.
    pub bad_requests: AtomicU64,
    /// 414: request line too long.
    pub uri_too_long: AtomicU64,
    /// 431: a header line, all header lines, or the header count over its ceiling.
    pub headers_too_large: AtomicU64,
    /// 413: body over the route's ceiling.
    pub body_too_large: AtomicU64,
    /// 503: every handler busy and the waiting line full.
    pub busy: AtomicU64,
}

/// What the media routes read: the catalog, the files, and each stream's live state.
pub struct Media {
    pub catalog: Arc<crate::catalog::Catalog>,
    /// Deletions go through the recorder (none in tests of the edge alone).
    pub recorder: Option<crate::record::RecorderHandle>,
    pub data_dir: std::path::PathBuf,
    pub streams: Vec<LiveStream>,
    /// The catalog writer's counters (none in tests of the edge alone).
    pub flusher: Option<Arc<crate::record::flusher::FlusherStats>>,
    /// Live view (none when turned off).
    pub webrtc: Option<crate::webrtc::WebrtcHandle>,
    /// Event intake (none in tests of the edge alone).
    pub events: Option<Arc<crate::events::Events>>,
    /// Pre-roll history across every stream (none in tests of the edge alone).
    pub preroll: Option<Arc<crate::preroll::HistoryPool>>,
    /// The box as firmware: updates, reboot, factory reset, support bundle (none in tests of
    /// the edge alone).
    pub system: Option<Arc<crate::system::SystemApi>>,
}

/// One configured stream and its live state.
pub struct LiveStream {
    pub camera: String,
    pub kind: crate::config::StreamKind,
    pub state: Arc<crate::ingest::state::StreamState>,
    /// Its recorder's queue, counters and trigger, when it is recorded.
    pub recording: Option<crate::record::RecordingWatch>,
    /// Its live frames.
    pub live: Arc<crate::live::Fanout>,
}

/// What every request handler shares.
struct Ctx {
    stats: Arc<HttpStats>,
    auth: Arc<Auth>,
    media: Arc<Media>,
    handlers: Semaphore,
    waiting: AtomicUsize,
    /// Exports streaming: [`limits::EXPORTS_RUNNING_MAX`].
    exports: Arc<Semaphore>,
}

impl Ctx {
    fn new(stats: Arc<HttpStats>, auth: Arc<Auth>, media: Arc<Media>) -> Ctx {
        Ctx {
            stats,
            auth,
            media,
            handlers: Semaphore::new(limits::HTTP_HANDLERS_MAX),
            waiting: 0.into(),
            exports: Arc::new(Semaphore::new(limits::EXPORTS_RUNNING_MAX)),
        }
    }

    /// With an empty catalog in `dir`, no camera and no recorder (fuzzing and tests).
    fn bare(dir: &std::path::Path) -> Ctx {
        let catalog =
            Arc::new(crate::catalog::Catalog::open(&dir.join("catalog.redb")).expect("a catalog in a fresh dir"));
        let media = Media {
            catalog: catalog.clone(),
            recorder: None,
            data_dir: dir.into(),
            streams: Vec::new(),
            flusher: None,
            webrtc: None,
            events: None,
            preroll: None,
            system: None,
        };
        Ctx::new(Arc::default(), Arc::new(Auth::new(catalog)), Arc::new(media))
    }
}

/// Response bodies: whole (`full`) or streamed from disk (export).
type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;
type Reply = Response<Body>;

fn full(bytes: impl Into<Bytes>) -> Body {
    use http_body_util::BodyExt;
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
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

/// Serves until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    stats: Arc<HttpStats>,
    auth: Arc<Auth>,
    media: Arc<Media>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = Arc::new(Semaphore::new(limits::HTTP_CONNECTIONS_MAX));
    let ctx = Arc::new(Ctx::new(stats.clone(), auth, media));
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "web face listening");
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
        stats.connections_total.fetch_add(1, Ordering::Relaxed);
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            stats.connections_refused.fetch_add(1, Ordering::Relaxed);
            let _ =
                stream.try_write(b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let io = guard::Guarded::new(stream, ctx.stats.clone());
            connection(io, ctx, peer).await;
            drop(permit);
        });
    }
}

/// Serves one connection until it ends: hyper's HTTP/1.1 with the head ceilings configured,
/// then [`check_head`], admission and the routes for each request.
async fn connection<I>(io: I, ctx: Arc<Ctx>, peer: SocketAddr)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let stats = ctx.stats.clone();
    stats.connections_open.fetch_add(1, Ordering::Relaxed);
    let service = service_fn(move |req| handle(req, ctx.clone(), peer));
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
    stats.connections_open.fetch_sub(1, Ordering::Relaxed);
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

    use super::{Ctx, connection};

    /// Responses past this are not read (the UI's largest file is far below it).
    const READ_MAX_BYTES: u64 = 4 << 20;

    pub struct Server {
        rt: tokio::runtime::Runtime,
        ctx: Arc<Ctx>,
    }

    impl Server {
        /// A server with an empty catalog in `dir`, no camera and no recorder.
        pub fn new(dir: &Path) -> Server {
            let ctx = Arc::new(Ctx::bare(dir));
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            Server { rt, ctx }
        }

        /// Sends `input`, closes the client's side, and returns everything the server wrote
        /// (up to 4 MiB). Panics if the server has not closed the connection within 10 s.
        pub fn exchange(&self, input: &[u8]) -> Vec<u8> {
            let peer: SocketAddr = ([192, 0, 2, 7], 40000).into();
            self.rt.block_on(async {
                let (client, server) = tokio::io::duplex(64 << 10);
                let served = tokio::spawn(connection(server, self.ctx.clone(), peer));
                let (rx, mut tx) = tokio::io::split(client);
                let send = async {
                    // The server may close early (a refused head): the rest is not read.
                    let _ = tx.write_all(input).await;
                    let _ = tx.shutdown().await;
                };
                let mut out = Vec::new();
                let mut rx = rx.take(READ_MAX_BYTES);
                let receive = rx.read_to_end(&mut out);
                let both = async { tokio::join!(send, receive) };
                let (_, read) =
                    tokio::time::timeout(Duration::from_secs(10), both).await.expect("the connection ended");
                read.expect("reading an in-memory pipe");
                drop(rx);
                let _ = served.await;
                out
            })
        }
    }
}

/// A JSON error body with a stable code.
fn error(status: StatusCode, code: &str, message: &str) -> Reply {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

fn text(body: String, content_type: &'static str) -> Reply {
    let mut r = Response::new(full(body));
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    r
}

/// The largest body a route takes: an SDP offer for WHEP, an event with its snapshot, small
/// JSON everywhere else.
pub(crate) fn body_max_bytes(method: &http::Method, path: &str) -> u64 {
    if method == http::Method::POST && path.starts_with("/api/whep/") {
        limits::WEBRTC_OFFER_MAX_BYTES as u64
    } else if method == http::Method::POST && path == "/api/events" {
        events::INTAKE_BODY_MAX_BYTES as u64
    } else if method == http::Method::POST && path == "/api/system/update" {
        limits::UPDATE_BODY_MAX_BYTES
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
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let max = body_max_bytes(req.method(), req.uri().path());
    if declared.is_some_and(|n| n > max) {
        stats.body_too_large.fetch_add(1, Ordering::Relaxed);
        let message = format!("the request body is over {} KiB", max >> 10);
        let mut r = error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", &message);
        // The body will not be read: do not keep the connection for the next request.
        r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        return Some(r);
    }
    None
}

async fn handle(req: Request<Incoming>, ctx: Arc<Ctx>, peer: SocketAddr) -> Result<Reply, Infallible> {
    ctx.stats.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(refusal) = check_head(&req, &ctx.stats) {
        return Ok(refusal);
    }
    let _permit = match admit(&ctx).await {
        Ok(p) => p,
        Err(refusal) => return Ok(refusal),
    };
    let (parts, body) = req.into_parts();
    Ok(api::route(parts, body, &ctx, peer).await)
}

/// A handler slot: at once if one is free, after a wait if fewer than
/// [`limits::HTTP_REQUESTS_WAITING_MAX`] requests are waiting, else a `503`.
async fn admit(ctx: &Ctx) -> Result<tokio::sync::SemaphorePermit<'_>, Reply> {
    if let Ok(p) = ctx.handlers.try_acquire() {
        return Ok(p);
    }
    if ctx.waiting.fetch_add(1, Ordering::AcqRel) >= limits::HTTP_REQUESTS_WAITING_MAX {
        ctx.waiting.fetch_sub(1, Ordering::AcqRel);
        ctx.stats.busy.fetch_add(1, Ordering::Relaxed);
        return Err(error(StatusCode::SERVICE_UNAVAILABLE, "busy", "too many requests at once"));
    }
    let p = ctx.handlers.acquire().await;
    ctx.waiting.fetch_sub(1, Ordering::AcqRel);
    p.map_err(|_| error(StatusCode::SERVICE_UNAVAILABLE, "stopping", "the server is stopping"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let big = b"POST /api/login HTTP/1.1\r\ncontent-length: 999999\r\n\r\n";
        assert_eq!(status(&server.exchange(big)), "HTTP/1.1 413");
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
    }

    #[test]
    fn with_four_exports_running_the_fifth_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx::bare(dir.path());
        let parts = Request::get("/x?from_us=1&to_us=2").body(()).unwrap().into_parts().0;
        let running: Vec<_> =
            (0..limits::EXPORTS_RUNNING_MAX).map(|_| ctx.exports.clone().try_acquire_owned().unwrap()).collect();
        assert_eq!(media::export(&ctx, &parts, "a/main", 1, 2).status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(running);
        assert_eq!(media::export(&ctx, &parts, "a/main", 1, 2).status(), StatusCode::NOT_FOUND, "nothing recorded");
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
                let input = std::fs::read(entry.unwrap().path()).unwrap();
                let out = server.exchange(&input);
                assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "));
                assert!(!out.starts_with(b"HTTP/1.1 500"), "{}", String::from_utf8_lossy(&out));
                n += 1;
            }
        }
        assert!(n > 100, "the corpus is under fuzz/");
    }
}

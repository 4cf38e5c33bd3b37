//! One request to an OpenID provider: HTTPS with rustls (Mozilla's roots compiled in, plus a
//! CA the admin gives for a provider of their own), or plain HTTP to a development provider
//! on this machine's loopback; the whole exchange within [`limits::OIDC_FETCH_TIMEOUT_MS`] and
//! its answer within a byte ceiling. hyper's client connection is used directly (as the ONVIF
//! client does), with no pool of its own: each provider keeps at most one idle connection
//! ([`Kept`]), used again while it is open and at most [`limits::OIDC_CONNECTION_IDLE_S`]
//! old, so a sign-in's exchange does not pay a TLS handshake each time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
// tokio's clock, so the tests may pause it; the same as the system's otherwise.
use tokio::time::Instant;

use crate::limits;

/// Why a request to a provider failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("cannot reach it: {0}")]
    Unreachable(String),
    #[error("it did not answer within {0} ms")]
    Timeout(u64),
    #[error("TLS failed: {0}")]
    Tls(String),
    #[error("its answer is over {0} bytes")]
    TooLarge(usize),
    #[error("it answered HTTP {status}{detail}")]
    Status { status: u16, detail: String },
    #[error("the exchange broke off: {0}")]
    Broken(String),
}

/// Whom the box trusts for a provider: Mozilla's roots, and `ca_pem` (its certificates) when
/// given. A CA that does not parse is an error the admin sees when saving the provider.
pub fn trust(ca_pem: Option<&str>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(pem) = ca_pem.filter(|p| !p.trim().is_empty()) {
        let mut added = 0;
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let c = c.map_err(|e| format!("the CA is not PEM: {e}"))?;
            roots.add(c).map_err(|e| format!("a CA certificate does not load: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("the CA holds no PEM certificate".into());
        }
    }
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A request's body: whole in memory, or [`Chunks`] as they are read.
pub(crate) type Body = http_body_util::Either<Full<bytes::Bytes>, Chunks>;

pub(crate) type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// A request body of `len` bytes that arrives in chunks from a channel (a file read on a
/// blocking thread), so a large body goes with its `Content-Length` and is never whole in
/// memory: at most the channel's chunks and the one being written.
pub(crate) struct Chunks {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    left: u64,
}

impl Chunks {
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>, len: u64) -> Chunks {
        Chunks { rx, left: len }
    }

    /// Chunks waiting to be sent.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.rx.len()
    }
}

impl hyper::body::Body for Chunks {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>> {
        use std::task::Poll;
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let failed = match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Ok(chunk)) if chunk.len() as u64 <= self.left => {
                self.left -= chunk.len() as u64;
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))));
            }
            Some(Ok(_)) => std::io::Error::other("the body runs past its length"),
            Some(Err(e)) => e,
            None => std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the body ended before its length"),
        };
        // A body that failed ends there.
        self.left = 0;
        Poll::Ready(Some(Err(failed)))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}

/// `bytes` as a request body.
pub(crate) fn whole(bytes: bytes::Bytes) -> Body {
    http_body_util::Either::Left(Full::new(bytes))
}

/// The one idle connection kept for a provider: its origin (`scheme://host:port`), and since
/// when it is idle.
#[derive(Default)]
pub struct Kept(Mutex<Option<(String, Sender, Instant)>>);

fn origin(url: &url::Url) -> String {
    format!("{}://{}", url.scheme(), &url[url::Position::BeforeHost..url::Position::AfterPort])
}

impl Kept {
    /// True while a connection to `url`'s origin is kept and open: the provider was there a
    /// moment ago and has not closed it.
    pub fn open_to(&self, url: &url::Url) -> bool {
        let kept = self.0.lock().expect("lock");
        kept.as_ref().is_some_and(|(o, s, since)| *o == origin(url) && usable(s, *since))
    }

    fn take(&self, origin: &str) -> Option<Sender> {
        let mut kept = self.0.lock().expect("lock");
        match kept.take() {
            Some((o, s, since)) if o == origin && usable(&s, since) => Some(s),
            // Another origin's, closed or too old: dropped (its connection ends).
            _ => None,
        }
    }

    pub(crate) fn put(&self, origin: String, sender: Sender) {
        if !sender.is_closed() {
            *self.0.lock().expect("lock") = Some((origin, sender, Instant::now()));
        }
    }
}

fn usable(s: &Sender, since: Instant) -> bool {
    !s.is_closed() && s.is_ready() && since.elapsed() < Duration::from_secs(limits::OIDC_CONNECTION_IDLE_S)
}

/// A request: `GET`, or `POST` of a form with its `authorization`.
pub enum Ask<'a> {
    Get,
    PostForm { form: String, authorization: Option<&'a str> },
}

/// Sends `ask` to `url`; the answer's status and at most `max_bytes` of its body. A status
/// other than 200 is an error carrying the start of the body (a provider's reason).
/// The connection kept in `kept` is used when it goes to the same origin; the one used is kept
/// after a whole answer.
pub async fn fetch(
    tls: &Arc<rustls::ClientConfig>,
    kept: &Kept,
    url: &url::Url,
    ask: Ask<'_>,
    max_bytes: usize,
) -> Result<Vec<u8>, FetchError> {
    let timeout_ms = limits::OIDC_FETCH_TIMEOUT_MS;
    match tokio::time::timeout(Duration::from_millis(timeout_ms), exchange(tls, kept, url, ask, max_bytes)).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::Timeout(timeout_ms)),
    }
}

async fn exchange(
    tls: &Arc<rustls::ClientConfig>,
    kept: &Kept,
    url: &url::Url,
    ask: Ask<'_>,
    max_bytes: usize,
) -> Result<Vec<u8>, FetchError> {
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
    let mut request = match &ask {
        Ask::Get => http::Request::get(path),
        Ask::PostForm { .. } => {
            http::Request::post(path).header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        }
    }
    .header(http::header::HOST, authority)
    .header(http::header::ACCEPT, "application/json")
    .header(http::header::USER_AGENT, concat!("KeepPeek/", env!("CARGO_PKG_VERSION")));
    let body = match ask {
        Ask::Get => String::new(),
        Ask::PostForm { form, authorization } => {
            if let Some(a) = authorization {
                request = request.header(http::header::AUTHORIZATION, a);
            }
            form
        }
    };
    let request = request.body(whole(bytes::Bytes::from(body))).map_err(|e| FetchError::Broken(e.to_string()))?;
    let (origin, sender, response) = send(tls, kept, url, request).await?;
    answer(kept, origin, sender, response, max_bytes).await
}

/// Sends `request` to `url`'s origin on the connection kept in `kept` when there is one, else
/// on a new one; the origin and the connection come back with the answer's head, for the
/// caller to [`Kept::put`] once it has read the whole answer. The S3 archive sends its
/// requests this way too.
pub(crate) async fn send(
    tls: &Arc<rustls::ClientConfig>,
    kept: &Kept,
    url: &url::Url,
    mut request: http::Request<Body>,
) -> Result<(String, Sender, http::Response<hyper::body::Incoming>), FetchError> {
    let origin = origin(url);
    if let Some(mut sender) = kept.take(&origin) {
        match sender.try_send_request(request).await {
            Ok(response) => return Ok((origin, sender, response)),
            // The server closed the kept connection as the request went: the request was
            // not sent, so it goes again on a new connection. Sent and then lost is an error
            // (an OpenID code is good once; an upload is sent again whole, by its caller).
            Err(mut e) => match e.take_message() {
                Some(unsent) => request = unsent,
                None => return Err(FetchError::Broken(e.into_error().to_string())),
            },
        }
    }
    let mut sender = connect(tls, url).await?;
    let response = sender.send_request(request).await.map_err(|e| FetchError::Broken(e.to_string()))?;
    Ok((origin, sender, response))
}

/// A new connection to `url`'s host, TLS for `https`, driven on its own task until it closes
/// (its sender dropped, or the provider closing it).
async fn connect(tls: &Arc<rustls::ClientConfig>, url: &url::Url) -> Result<Sender, FetchError> {
    let host = url.host_str().ok_or_else(|| FetchError::Unreachable("the address has no host".into()))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = url.port_or_known_default().unwrap_or(443);
    let tcp = TcpStream::connect((bare.as_str(), port)).await.map_err(|e| FetchError::Unreachable(e.to_string()))?;
    // hyper writes a request's head and body apart: without this, Nagle's algorithm holds the
    // body until the head's ACK, which the provider delays (40 ms on Linux).
    let _ = tcp.set_nodelay(true);
    let tcp = QuickAck(tcp);
    if url.scheme() == "https" {
        let name = rustls::pki_types::ServerName::try_from(bare).map_err(|e| FetchError::Tls(e.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| FetchError::Tls(e.to_string()))?;
        handshake(stream).await
    } else {
        handshake(tcp).await
    }
}

/// A connection that acknowledges what it receives at once. A server that writes an answer's
/// head and body apart with Nagle's algorithm on (hyper's default: `s3s-fs` is one, curl
/// meets the same) holds the body until the head is acknowledged, and Linux delays that ACK
/// by up to 40 ms on a connection used again: each request after the first on a kept
/// connection would take 40 ms more. So before each read the delayed ACK is sent
/// (`TCP_QUICKACK`, which the kernel does not keep: hence each time).
struct QuickAck(TcpStream);

impl QuickAck {
    fn ack_now(&self) {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: a valid socket of this stream, an int option of the size given.
        let _ = unsafe {
            libc::setsockopt(
                self.0.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

impl tokio::io::AsyncRead for QuickAck {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.ack_now();
        std::pin::Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for QuickAck {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

async fn handshake<S>(stream: S) -> Result<Sender, FetchError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| FetchError::Broken(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Reads at most `max_bytes` of the answer; the connection is kept once it is whole.
async fn answer(
    kept: &Kept,
    origin: String,
    sender: Sender,
    response: http::Response<hyper::body::Incoming>,
    max_bytes: usize,
) -> Result<Vec<u8>, FetchError> {
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), max_bytes).collect().await.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            FetchError::TooLarge(max_bytes)
        } else {
            FetchError::Broken(e.to_string())
        }
    })?;
    kept.put(origin, sender);
    let body = body.to_bytes().to_vec();
    if status != 200 {
        let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
        let detail = if text.trim().is_empty() { String::new() } else { format!(": {}", text.trim()) };
        return Err(FetchError::Status { status, detail });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn local(port: u16) -> url::Url {
        format!("http://127.0.0.1:{port}/x").parse().unwrap()
    }

    /// A provider that takes the connection and never answers: the fetch gives up at its
    /// timeout (on tokio's paused clock).
    #[tokio::test(start_paused = true)]
    async fn a_provider_that_never_answers_is_given_up_on_at_the_fetch_timeout() {
        let port = crate::base::testing::silent_peer().await;
        let started = Instant::now();
        let got = fetch(&trust(None).unwrap(), &Kept::default(), &local(port), Ask::Get, 1024).await;
        assert_eq!(got, Err(FetchError::Timeout(limits::OIDC_FETCH_TIMEOUT_MS)));
        assert_eq!(started.elapsed(), Duration::from_millis(limits::OIDC_FETCH_TIMEOUT_MS));
    }

    /// A provider that answers every request and keeps the connection: it is used again
    /// until it has been idle for its ceiling, then a new one is made.
    #[tokio::test(start_paused = true)]
    async fn a_kept_connection_is_used_again_until_it_has_been_idle_its_ceiling() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 1024];
                        let Ok(n) = s.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        // Requests here are GETs: their head is the whole request.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                            if s.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let (tls, kept, url) = (trust(None).unwrap(), Kept::default(), local(port));
        assert_eq!(fetch(&tls, &kept, &url, Ask::Get, 1024).await.unwrap(), b"{}");
        assert!(kept.open_to(&url));
        let idle = Duration::from_secs(limits::OIDC_CONNECTION_IDLE_S);
        tokio::time::advance(idle - Duration::from_secs(1)).await;
        assert!(kept.open_to(&url), "kept until the ceiling");
        assert_eq!(fetch(&tls, &kept, &url, Ask::Get, 1024).await.unwrap(), b"{}");
        assert_eq!(connections.load(Ordering::Relaxed), 1, "the kept connection used again");
        // Idle its ceiling: no longer used; the next fetch makes a new connection.
        tokio::time::advance(idle).await;
        assert!(!kept.open_to(&url), "let go at the ceiling");
        assert_eq!(fetch(&tls, &kept, &url, Ask::Get, 1024).await.unwrap(), b"{}");
        assert_eq!(connections.load(Ordering::Relaxed), 2);
    }
}
